/* Unit tests for the trust table of the shared segment (shm/shm_trust.h): credits earned
 * and spent, the cap, the trust window, eviction in a full set, torn ways, read-only
 * attach and its validation, and credit conservation under two racing processes. */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/shm.h"
#include "shm/shm_internal.h"
#include "shm/shm_trust.h"

#define WIN 60u
#define CAP 1000u

static struct shm *mk(void)
{
	struct shm_config cfg = { 2, 2, 256, 0 };
	struct shm *shm = NULL;

	assert_int_equal(shm_create(&cfg, "test-trust", &shm), 0);
	return shm;
}

/* The i-th key of the set that key k falls into (other high bits, so another tag). */
static uint64_t same_set(uint64_t k, unsigned i)
{
	return k ^ ((uint64_t)(i * 0x9e37u) << 40);
}

static struct shm_trust_ent *set_of(struct shm *shm, uint64_t k)
{
	return (struct shm_trust_ent *)shm_trust_hdr(shm)->entries +
	       (k & (SHM_TRUST_SETS - 1)) * SHM_TRUST_WAYS;
}

static void test_earn_spend(void **state)
{
	struct shm *shm = mk();
	uint64_t a = 0x1234567890abcdefull, b = 0x0fedcba098765432ull;

	(void)state;
	assert_false(shm_trust_spend(shm, a, 100, WIN));
	assert_int_equal(shm_trust_earn(shm, a, 100, WIN, CAP), SHM_TRUST_NEW);
	assert_int_equal(shm_trust_earn(shm, a, 100, WIN, CAP), SHM_TRUST_CREDITED);
	assert_int_equal(shm_trust_earn(shm, a, 101, WIN, CAP), SHM_TRUST_CREDITED);
	assert_int_equal(shm_trust_credits(shm, a, 101, WIN), 3);
	assert_int_equal(shm_trust_credits(shm, b, 101, WIN), 0);	/* independent */
	for (int i = 0; i < 3; i++)
		assert_true(shm_trust_spend(shm, a, 102, WIN));
	assert_false(shm_trust_spend(shm, a, 102, WIN));
	assert_false(shm_trust_spend(shm, b, 102, WIN));
	assert_int_equal(shm_trust_count(shm, 102, WIN), 1);	/* trusted, out of credit */
	/* hash 0 is a key like any other (stored as 1) */
	assert_int_equal(shm_trust_earn(shm, 0, 102, WIN, CAP), SHM_TRUST_NEW);
	assert_true(shm_trust_spend(shm, 0, 102, WIN));
	shm_destroy(shm);
}

static void test_cap(void **state)
{
	struct shm *shm = mk();
	uint64_t a = 77;
	struct shm_trust_ent *e;
	uint64_t st;

	(void)state;
	for (uint32_t t = 0; t < 10; t++)
		shm_trust_earn(shm, a, 100 + t, WIN, 4);
	assert_int_equal(shm_trust_credits(shm, a, 110, WIN), 4);
	/* at the cap within the same second: no write at all */
	e = set_of(shm, a);
	st = e->state;
	assert_int_equal(shm_trust_earn(shm, a, 109, WIN, 4), SHM_TRUST_CREDITED);
	assert_int_equal(e->state, st);
	/* a cap above the state's 16 bits is clamped; 0 is taken as 1 */
	for (int i = 0; i < 70000; i++)
		shm_trust_earn(shm, 78, 100, WIN, 1000000);
	assert_int_equal(shm_trust_credits(shm, 78, 100, WIN), SHM_TRUST_MAX_CREDITS);
	shm_trust_earn(shm, 79, 100, WIN, 0);
	shm_trust_earn(shm, 79, 101, WIN, 0);
	assert_int_equal(shm_trust_credits(shm, 79, 101, WIN), 1);
	shm_destroy(shm);
}

static void test_window(void **state)
{
	struct shm *shm = mk();
	uint64_t a = 4242;

	(void)state;
	for (int i = 0; i < 5; i++)
		shm_trust_earn(shm, a, 100, WIN, CAP);
	assert_true(shm_trust_spend(shm, a, 150, WIN));	/* spending keeps the earn time */
	assert_int_equal(shm_trust_credits(shm, a, 160, WIN), 4);
	assert_int_equal(shm_trust_count(shm, 160, WIN), 1);
	assert_int_equal(shm_trust_credits(shm, a, 161, WIN), 0);
	assert_false(shm_trust_spend(shm, a, 161, WIN));
	assert_int_equal(shm_trust_count(shm, 161, WIN), 0);
	/* a longer window (a reload) sees the same entry live again */
	assert_int_equal(shm_trust_credits(shm, a, 161, 2 * WIN), 4);
	/* an expired entry starts over from one credit, not from its old balance */
	assert_int_equal(shm_trust_earn(shm, a, 200, WIN, CAP), SHM_TRUST_CREDITED);
	assert_int_equal(shm_trust_credits(shm, a, 200, WIN), 1);
	/* an earn stamped a little after a reader's clock counts as now */
	assert_int_equal(shm_trust_credits(shm, a, 199, WIN), 1);
	shm_destroy(shm);
}

static void test_eviction(void **state)
{
	struct shm *shm = mk();
	uint64_t k0 = 0x5555aaaa00000123ull;

	(void)state;
	for (unsigned i = 0; i < SHM_TRUST_WAYS; i++)
		assert_int_equal(shm_trust_earn(shm, same_set(k0, i), 100 + i, WIN, CAP),
				 SHM_TRUST_NEW);
	shm_trust_earn(shm, same_set(k0, 0), 120, WIN, CAP);	/* k0 is the newest now */
	assert_int_equal(shm_trust_earn(shm, same_set(k0, SHM_TRUST_WAYS), 121, WIN, CAP),
			 SHM_TRUST_EVICTED);
	assert_int_equal(shm_trust_credits(shm, same_set(k0, 1), 121, WIN), 0);	/* oldest */
	assert_int_equal(shm_trust_credits(shm, same_set(k0, 0), 121, WIN), 2);
	for (unsigned i = 2; i <= SHM_TRUST_WAYS; i++)
		assert_int_equal(shm_trust_credits(shm, same_set(k0, i), 121, WIN), 1);
	/* other sets are untouched: the whole table holds one set's worth */
	assert_int_equal(shm_trust_count(shm, 121, WIN), SHM_TRUST_WAYS);
	/* an expired way is taken before any live one */
	assert_int_equal(shm_trust_earn(shm, same_set(k0, 9), 102 + WIN + 1, WIN, CAP),
			 SHM_TRUST_NEW);
	assert_int_equal(shm_trust_credits(shm, same_set(k0, 2), 102 + WIN + 1, WIN), 0);
	assert_int_equal(shm_trust_credits(shm, same_set(k0, 0), 102 + WIN + 1, WIN), 2);
	shm_destroy(shm);
}

/* A new key that takes a live way never inherits its credits, even when the two keys
 * share the 16 tag bits of the state. */
static void test_evict_same_tag(void **state)
{
	struct shm *shm = mk();
	uint64_t k0 = 0x7777000000000abcull;

	(void)state;
	for (unsigned i = 0; i < SHM_TRUST_WAYS; i++)
		for (int n = 0; n < 9; n++)
			shm_trust_earn(shm, k0 + (uint64_t)i * SHM_TRUST_SETS, 100 + i, WIN, CAP);
	assert_int_equal(shm_trust_earn(shm, k0 + SHM_TRUST_WAYS * SHM_TRUST_SETS, 110, WIN, CAP),
			 SHM_TRUST_EVICTED);
	assert_int_equal(shm_trust_credits(shm, k0 + SHM_TRUST_WAYS * SHM_TRUST_SETS, 110, WIN), 1);
	assert_int_equal(shm_trust_credits(shm, k0, 110, WIN), 0);
	assert_int_equal(shm_trust_credits(shm, k0 + SHM_TRUST_SETS, 110, WIN), 9);
	shm_destroy(shm);
}

/* A way whose key was taken over but whose state still carries the old tag (a worker
 * killed between the two CAS) gives no credit to anyone, and the next earn repairs it. */
static void test_torn_way(void **state)
{
	struct shm *shm = mk();
	uint64_t a = 0x1111000000000042ull, b = 0x2222000000000042ull;
	struct shm_trust_ent *set = set_of(shm, a);

	(void)state;
	for (int i = 0; i < 5; i++)
		shm_trust_earn(shm, a, 100, WIN, CAP);
	assert_ptr_equal(set_of(shm, b), set);
	set[0].key = b;		/* b's key, a's state with 5 credits */
	assert_false(shm_trust_spend(shm, b, 100, WIN));
	assert_false(shm_trust_spend(shm, a, 100, WIN));
	assert_int_equal(shm_trust_count(shm, 100, WIN), 0);
	assert_int_equal(shm_trust_earn(shm, b, 100, WIN, CAP), SHM_TRUST_CREDITED);
	assert_int_equal(shm_trust_credits(shm, b, 100, WIN), 1);
	shm_destroy(shm);
}

static void test_read_only(void **state)
{
	struct shm *shm = mk(), *ro = NULL;
	struct shm_trust_hdr *t = shm_trust_hdr(shm);

	(void)state;
	shm_trust_earn(shm, 9, 100, WIN, CAP);
	assert_int_equal(shm_attach_ro(shm_fd(shm), &ro), 0);
	assert_memory_equal(shm_trust_hkey(ro), shm_trust_hkey(shm), SHM_TRUST_KEY_LEN);
	assert_int_equal(shm_trust_count(ro, 100, WIN), 1);
	assert_int_equal(shm_trust_credits(ro, 9, 100, WIN), 1);
	assert_int_equal(shm_trust_earn(ro, 9, 100, WIN, CAP), -EROFS);
	assert_false(shm_trust_spend(ro, 9, 100, WIN));
	shm_destroy(ro);
	/* a segment whose trust header is not this build's is refused */
	t->version++;
	assert_int_equal(shm_attach_ro(shm_fd(shm), &ro), -EBADMSG);
	t->version--;
	t->n_ways = 8;
	assert_int_equal(shm_attach_ro(shm_fd(shm), &ro), -EBADMSG);
	t->n_ways = SHM_TRUST_WAYS;
	assert_int_equal(shm_attach_ro(shm_fd(shm), &ro), 0);
	shm_destroy(ro);
	shm_destroy(shm);
}

/* Two segments draw different keys (the key is what keeps sets unpredictable). */
static void test_key_random(void **state)
{
	struct shm *a = mk(), *b = mk();

	(void)state;
	assert_memory_not_equal(shm_trust_hkey(a), shm_trust_hkey(b), SHM_TRUST_KEY_LEN);
	shm_destroy(a);
	shm_destroy(b);
}

/* Two processes earn and spend on the same (new) key at once: every credit spent was
 * earned, and none is lost or made up: spent + credits left in the set = earned. */
static void test_race_conserves(void **state)
{
	enum {
		N = 20000,
		PROCS = 2
	};
	struct shm *shm = mk();
	uint64_t k = 0xabcdef0123456789ull;
	uint32_t *spent =
		mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint64_t left = 0;
	pid_t pid[PROCS];

	(void)state;
	assert_true(spent != MAP_FAILED);
	for (int p = 0; p < PROCS; p++) {
		pid[p] = fork();
		assert_true(pid[p] >= 0);
		if (pid[p] == 0) {
			uint32_t n = 0;

			for (int i = 0; i < N; i++) {
				if (shm_trust_earn(shm, k, 100, WIN, SHM_TRUST_MAX_CREDITS) ==
				    SHM_TRUST_SKIPPED)
					_exit(2);
				n += shm_trust_spend(shm, k, 100, WIN);
				if (i % 3 == 0)
					n += shm_trust_spend(shm, k, 100, WIN);
			}
			spent[p] = n;
			_exit(0);
		}
	}
	for (int p = 0; p < PROCS; p++) {
		int st;

		assert_int_equal(waitpid(pid[p], &st, 0), pid[p]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	for (unsigned i = 0; i < SHM_TRUST_WAYS; i++) {
		struct shm_trust_ent *e = &set_of(shm, k)[i];

		if (e->key == k)
			left += (e->state >> 32) & 0xffff;
	}
	print_message("spent %u + %u, left %lu, earned %d\n", spent[0], spent[1],
		      (unsigned long)left, PROCS * N);
	assert_int_equal(spent[0] + spent[1] + left, PROCS * N);
	assert_true(spent[0] + spent[1] > N);	/* the spends did happen */
	munmap(spent, 4096);
	shm_destroy(shm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_earn_spend),     cmocka_unit_test(test_cap),
		cmocka_unit_test(test_window),         cmocka_unit_test(test_eviction),
		cmocka_unit_test(test_evict_same_tag), cmocka_unit_test(test_torn_way),
		cmocka_unit_test(test_read_only),      cmocka_unit_test(test_key_random),
		cmocka_unit_test(test_race_conserves),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
