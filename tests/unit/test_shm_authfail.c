/* Unit tests for the failed-authentication table of the shared segment
 * (shm/shm_authfail.h): charging (GCRA arithmetic, floor, cap), independence from the
 * trust table, eviction of the way forgiven first in a full set, read-only handles, and
 * the over-budget count. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "shm/shm.h"
#include "shm/shm_authfail.h"
#include "shm/shm_internal.h"
#include "shm/shm_trust.h"

#define WIN 60000u   /* ms */
#define IV 6000u     /* ms: 10 failures a minute */

static struct shm *mk(void)
{
	struct shm_config cfg = { 2, 2, 256, 0 };
	struct shm *shm = NULL;

	assert_int_equal(shm_create(&cfg, "test-authfail", &shm), 0);
	return shm;
}

/* The i-th key of the set that key k falls into (other high bits, so another tag). */
static uint64_t same_set(uint64_t k, unsigned i)
{
	return k ^ ((uint64_t)(i * 0x9e37u) << 40);
}

/* A failure as worker/authfail.c charges it: one interval, capped a window and an
 * interval ahead. */
static uint64_t one_failure(struct shm *shm, uint64_t k, uint64_t now)
{
	return shm_authfail_charge(shm, k, now, IV, 0, now + WIN + IV);
}

static void test_charge(void **state)
{
	struct shm *shm = mk();
	uint64_t a = 0x1234567890abcdefull, b = 0x0fedcba098765432ull, now = 1000000;

	(void)state;
	assert_int_equal(shm_authfail_tat(shm, a), 0);
	for (unsigned i = 1; i <= 10; i++)
		assert_int_equal(one_failure(shm, a, now), now + i * IV);
	assert_int_equal(shm_authfail_tat(shm, a), now + WIN);	/* 10: at the budget */
	assert_int_equal(shm_authfail_count(shm, now, WIN), 0);
	assert_int_equal(one_failure(shm, a, now), now + WIN + IV);		/* 11: over */
	assert_int_equal(one_failure(shm, a, now), now + WIN + IV);		/* capped */
	assert_int_equal(shm_authfail_count(shm, now, WIN), 1);
	assert_int_equal(shm_authfail_tat(shm, b), 0);			/* independent */
	/* forgiven one per interval: an interval later it is at the budget again */
	assert_int_equal(shm_authfail_count(shm, now + IV, WIN), 0);
	/* a floor holds it over; a charge of 0 never lowers it */
	assert_int_equal(shm_authfail_charge(shm, a, now + IV, 0, now + IV + WIN + IV,
					     now + IV + WIN + IV),
			 now + IV + WIN + IV);
	assert_int_equal(shm_authfail_charge(shm, a, now + 2 * IV, 0, now, now + 10 * WIN),
			 now + IV + WIN + IV);
	/* long forgiven: a new failure starts from now */
	assert_int_equal(one_failure(shm, a, now + 10 * WIN), now + 10 * WIN + IV);
	shm_destroy(shm);
}

/* The table sits after the trust entries: neither writes the other's words. */
static void test_apart_from_trust(void **state)
{
	struct shm *shm = mk();
	uint64_t k = 0x5555aaaa5555aaaaull;

	(void)state;
	assert_int_equal(shm_trust_earn(shm, k, 100, 3600, 1000), SHM_TRUST_NEW);
	assert_int_equal(shm_authfail_tat(shm, k), 0);
	assert_true(one_failure(shm, k, 5000) != 0);
	assert_int_equal(shm_trust_credits(shm, k, 100, 3600), 1);
	shm_destroy(shm);
}

/* A full set: a new key takes the way forgiven first, never inherits its failures. */
static void test_evict(void **state)
{
	struct shm *shm = mk();
	uint64_t k = 0x0123456789abcdefull, now = 1000000;

	(void)state;
	for (unsigned i = 0; i < SHM_AUTHFAIL_WAYS; i++)
		for (unsigned j = 0; j <= i + 1; j++)	/* way i owes i + 2 failures */
			assert_true(one_failure(shm, same_set(k, i), now) != 0);
	assert_int_equal(one_failure(shm, same_set(k, 9), now), now + IV);
	assert_int_equal(shm_authfail_tat(shm, same_set(k, 0)), 0);	/* the least in debt */
	for (unsigned i = 1; i < SHM_AUTHFAIL_WAYS; i++)
		assert_int_equal(shm_authfail_tat(shm, same_set(k, i)), now + (i + 2) * IV);
	shm_destroy(shm);
}

static void test_read_only(void **state)
{
	struct shm *shm = mk(), *ro = NULL;
	uint64_t k = 0x42ull << 50 | 7, now = 1000000;

	(void)state;
	assert_true(one_failure(shm, k, now) != 0);
	assert_int_equal(shm_attach_ro(shm_fd(shm), &ro), 0);
	assert_int_equal(shm_authfail_tat(ro, k), now + IV);
	assert_int_equal(shm_authfail_charge(ro, k, now, IV, 0, UINT64_MAX), 0);
	assert_int_equal(shm_authfail_tat(shm, k), now + IV);
	shm_destroy(ro);
	shm_destroy(shm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_charge),
		cmocka_unit_test(test_apart_from_trust),
		cmocka_unit_test(test_evict),
		cmocka_unit_test(test_read_only),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
