/* Unit tests for the relay port pool's search (worker/portpool.h) near a full range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>

#include <cmocka.h>

#include "shm/shm_alloc.h"
#include "worker/portpool.h"

/* A booking that outlived its owner (a dead worker's released record, an expired
 * reservation) is taken only when no port without a booking is left: the search passes
 * booked ports on the pool's words and reads their records only in its last round. */
static void test_portpool_unbooked_first(void **state)
{
	struct shm_config cfg = { 1, 2, 256, 64 };
	struct shm *shm;
	struct portpool p;
	struct shm_addr ip = { .family = 2, .addr = { 127, 0, 0, 1 } };
	struct shm_ppool_resv rv = { .token = 9, .lkey = 1, .family = 2 };
	uint32_t idx[16], tag;
	uint16_t port, stale, expired;
	const uint64_t now = 1000000000000u;

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-portpool-unbooked", &shm), 0);
	tag = shm_ppool_tag(&ip);
	for (int i = 0; i < 16; i++)
		assert_int_equal(shm_alloc_claim(shm, 0, &idx[i], NULL), 0);
	assert_int_equal(portpool_init(&p, 50000, 50009, 0, 1), 0);
	/* 50000 booked by a record that is then released without a word. */
	assert_int_equal(portpool_get(&p, shm, tag, idx[0], false, NULL, now, &stale), 0);
	assert_int_equal(stale, 50000);
	assert_int_equal(shm_alloc_release(shm, 0, idx[0]), 0);
	assert_true(shm_ppool_is_free(shm, tag, stale, now));
	assert_false(shm_ppool_unbooked(shm, tag, stale));
	/* 50003 reserved (EVEN-PORT R: 50002 for the record, 50003 for the token) until
	 * now + 1, then expired. */
	rv.expires_ns = now + 1;
	p.cursor = 50001;
	assert_int_equal(portpool_get(&p, shm, tag, idx[1], true, &rv, now, &port), 0);
	assert_int_equal(port, 50002);
	expired = rv.port;
	assert_true(shm_ppool_is_free(shm, tag, expired, now + 1));
	/* From the cursor at the stale port: the never-booked ports come first. */
	p.cursor = 50000;
	for (unsigned i = 0; i < 7; i++) {
		assert_int_equal(portpool_get(&p, shm, tag, idx[2 + i], false, NULL, now + 1,
					      &port), 0);
		assert_int_not_equal(port, stale);
		assert_int_not_equal(port, expired);
	}
	/* Only then the two whose bookings outlived their owners, and then none. */
	assert_int_equal(portpool_get(&p, shm, tag, idx[9], false, NULL, now + 1, &port), 0);
	assert_true(port == stale || port == expired);
	assert_int_equal(portpool_get(&p, shm, tag, idx[10], false, NULL, now + 1, &port), 0);
	assert_true(port == stale || port == expired);
	assert_int_equal(portpool_get(&p, shm, tag, idx[11], false, NULL, now + 1, &port),
			 -EADDRNOTAVAIL);
	portpool_destroy(&p);
	shm_destroy(shm);
}

/* portpool_bind's callback: the kernel refuses *ctx (another program holds it). */
static int refuse_one(void *ctx, uint16_t port)
{
	return port == *(uint16_t *)ctx ? -EADDRINUSE : 0;
}

/* A port the kernel refuses has an empty word once given back, so it looks unbooked
 * again: it must not hide the ports whose bookings outlived their owners. Range of 10:
 * 50000 stale, 50005 free in the pool but refused by the kernel, the rest held; the
 * cursor at 50005. */
static void test_portpool_refused_then_stale(void **state)
{
	struct shm_config cfg = { 1, 2, 256, 64 };
	struct shm *shm;
	struct portpool p;
	struct shm_addr ip = { .family = 2, .addr = { 127, 0, 0, 1 } };
	uint32_t idx[16], tag;
	uint16_t port, ports[10], refused;
	const uint64_t now = 1000000000000u;

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-portpool-refused", &shm), 0);
	tag = shm_ppool_tag(&ip);
	for (int i = 0; i < 16; i++)
		assert_int_equal(shm_alloc_claim(shm, 0, &idx[i], NULL), 0);
	assert_int_equal(portpool_init(&p, 50000, 50009, 0, 1), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(portpool_get(&p, shm, tag, idx[i], false, NULL, now, &ports[i]),
				 0);
	assert_int_equal(shm_alloc_release(shm, 0, idx[0]), 0);
	refused = ports[5];
	shm_ppool_put(shm, tag, refused, idx[5]);
	p.cursor = refused;
	assert_int_equal(portpool_bind(&p, shm, tag, idx[10], false, NULL, now, refuse_one,
				       &refused, &port), 0);
	assert_int_equal(port, ports[0]);
	/* The refused port was given back; the stale one is now idx[10]'s, so nothing is
	 * left (the refused port tried again and again until the tries run out). */
	assert_true(shm_ppool_unbooked(shm, tag, refused));
	assert_int_equal(portpool_bind(&p, shm, tag, idx[11], false, NULL, now, refuse_one,
				       &refused, &port), -EADDRNOTAVAIL);
	assert_true(shm_ppool_unbooked(shm, tag, refused));
	portpool_destroy(&p);
	shm_destroy(shm);
}

/* A reservation entry reused after its expiry gives its old port's booking back: the
 * word would outlive its owner, and the search takes such a port last of all. */
static void test_resv_reuse_gives_port_back(void **state)
{
	struct shm_config cfg = { 1, 2, 256, 64 };
	struct shm *shm;
	struct shm_addr ip = { .family = 2, .addr = { 127, 0, 0, 1 } };
	struct shm_ppool_resv rv = { .token = 7, .lkey = 1, .family = 2, .port = 50003 };
	const uint64_t now = 1000000000000u;

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-portpool-resv", &shm), 0);
	rv.tag = shm_ppool_tag(&ip);
	rv.expires_ns = now + 1;
	assert_int_equal(shm_ppool_reserve(shm, &rv, now), 0);
	assert_false(shm_ppool_unbooked(shm, rv.tag, 50003));
	/* Past the expiry and the grace, a token of the same entry reserves 50005. */
	rv.token += SHM_PPOOL_RESV;
	rv.port = 50005;
	rv.expires_ns = now + 2 + SHM_PPOOL_GRACE_NS + 1;
	assert_int_equal(shm_ppool_reserve(shm, &rv, now + 1 + SHM_PPOOL_GRACE_NS), 0);
	assert_true(shm_ppool_unbooked(shm, rv.tag, 50003));
	assert_false(shm_ppool_unbooked(shm, rv.tag, 50005));
	shm_destroy(shm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_portpool_unbooked_first),
		cmocka_unit_test(test_portpool_refused_then_stale),
		cmocka_unit_test(test_resv_reuse_gives_port_back),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
