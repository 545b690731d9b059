/* Unit tests for the worker's timing wheel and relay port pool (injected clock). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>

#include <cmocka.h>

#include "shm/shm_alloc.h"
#include "worker/portpool.h"
#include "worker/wheel.h"

struct fired {
	struct wheel_timer t;
	int count;
	uint64_t at;
	struct wheel_timer *disarm;	/* disarmed from the callback */
	struct wheel *w;
};

static uint64_t g_now;

static void on_fire(struct wheel_timer *t, void *arg)
{
	struct fired *f = (struct fired *)t;

	(void)arg;
	f->count++;
	f->at = g_now;
	if (f->disarm)
		wheel_disarm(f->w, f->disarm);
}

static void test_fires_not_early(void **state)
{
	struct wheel w;
	struct fired a = { 0 };

	(void)state;
	wheel_init(&w, 1000);
	wheel_timer_init(&a.t, on_fire);
	wheel_arm(&w, &a.t, 1550);
	for (g_now = 1000; g_now < 1550; g_now += 10)
		wheel_advance(&w, g_now, NULL);
	assert_int_equal(a.count, 0);
	for (; g_now < 1800; g_now += 10)
		wheel_advance(&w, g_now, NULL);
	assert_int_equal(a.count, 1);
	assert_true(a.at >= 1550 && a.at <= 1550 + WHEEL_TICK_MS);
	assert_false(wheel_timer_armed(&a.t));
	assert_int_equal(w.armed, 0);
}

static void test_long_deadline_and_gap(void **state)
{
	struct wheel w;
	struct fired a = { 0 }, b = { 0 };
	uint64_t far = (uint64_t)WHEEL_SLOTS * WHEEL_TICK_MS * 3 + 123;

	(void)state;
	wheel_init(&w, 0);
	wheel_timer_init(&a.t, on_fire);
	wheel_timer_init(&b.t, on_fire);
	wheel_arm(&w, &a.t, far);
	wheel_arm(&w, &b.t, 500);
	/* One huge jump: b fires, a must not (its slot comes round earlier). */
	g_now = far - 1000;
	assert_int_equal(wheel_advance(&w, g_now, NULL), 1);
	assert_int_equal(b.count, 1);
	assert_int_equal(a.count, 0);
	for (; g_now <= far + WHEEL_TICK_MS; g_now += 50)
		wheel_advance(&w, g_now, NULL);
	assert_int_equal(a.count, 1);
	assert_true(a.at >= far);
}

static void test_rearm_disarm_in_callback(void **state)
{
	struct wheel w;
	struct fired a = { 0 }, b = { 0 };

	(void)state;
	wheel_init(&w, 0);
	wheel_timer_init(&a.t, on_fire);
	wheel_timer_init(&b.t, on_fire);
	a.disarm = &b.t;
	a.w = &w;
	wheel_arm(&w, &a.t, 200);
	wheel_arm(&w, &b.t, 200);	/* same slot: a disarms b before it fires, or b fires first */
	wheel_arm(&w, &a.t, 300);	/* re-arm moves it */
	g_now = 250;
	wheel_advance(&w, g_now, NULL);
	assert_int_equal(a.count, 0);
	assert_int_equal(b.count, 1);
	g_now = 400;
	wheel_advance(&w, g_now, NULL);
	assert_int_equal(a.count, 1);
	wheel_disarm(&w, &a.t);	/* no-op when unarmed */
	assert_int_equal(w.armed, 0);
}

/* The shared pool (shm/shm_ppool.h) through two workers' pools on one segment. */
static void test_portpool_shared(void **state)
{
	struct shm_config cfg = { 2, 2, 256, 64 };
	struct shm *shm;
	struct portpool p0, p1;
	struct shm_addr ip = { .family = 2, .addr = { 127, 0, 0, 1 } };
	struct shm_ppool_resv rv = { .token = 77, .lkey = 5, .family = 2 }, got;
	uint32_t idx[12], tag;
	uint16_t port, ports[10];
	const uint64_t now = 1000000000000u;

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-portpool", &shm), 0);
	tag = shm_ppool_tag(&ip);
	for (int i = 0; i < 12; i++)
		assert_int_equal(shm_alloc_claim(shm, (unsigned)i % 2, &idx[i], NULL), 0);
	assert_int_equal(portpool_init(&p0, 50000, 50009, 0, 2), 0);
	assert_int_equal(portpool_init(&p1, 50000, 50009, 1, 2), 0);
	assert_int_equal(p0.cursor, 50000);
	assert_int_equal(p1.cursor, 50005);
	/* Worker 0 alone can take the whole range; then worker 1 finds nothing. */
	for (int i = 0; i < 10; i++) {
		assert_int_equal(portpool_get(&p0, shm, tag, idx[i], false, NULL, now, &ports[i]), 0);
		for (int k = 0; k < i; k++)
			assert_int_not_equal(ports[i], ports[k]);
	}
	assert_int_equal(portpool_get(&p1, shm, tag, idx[10], false, NULL, now, &port),
			 -EADDRNOTAVAIL);
	/* Another relay address books the same numbers in ways of its own. */
	ip.addr[3] = 2;
	assert_int_equal(portpool_get(&p1, shm, shm_ppool_tag(&ip), idx[10], false, NULL, now,
				      &port), 0);
	shm_ppool_put(shm, shm_ppool_tag(&ip), port, idx[10]);
	/* A port given back goes to the other worker. */
	shm_ppool_put(shm, tag, ports[3], idx[3]);
	assert_int_equal(portpool_get(&p1, shm, tag, idx[10], false, NULL, now, &port), 0);
	assert_int_equal(port, ports[3]);
	assert_int_equal(shm_ppool_take(shm, tag, port, idx[10], now), 0);	/* idempotent */
	assert_int_equal(shm_ppool_take(shm, tag, port, idx[11], now), -EADDRINUSE);
	/* A record released without a word (its worker died) frees its port by itself. */
	assert_int_equal(shm_alloc_release(shm, 0, idx[4]), 0);
	assert_true(shm_ppool_is_free(shm, tag, ports[4], now));
	assert_int_equal(shm_ppool_take(shm, tag, ports[4], idx[11], now), 0);
	/* Reservations: booked until redeemed (once, by any worker) or expired. */
	for (int i = 0; i < 10; i++)
		if (i != 3 && i != 4)
			shm_ppool_put(shm, tag, ports[i], idx[i]);
	rv.expires_ns = now + 30000000000u;
	assert_int_equal(portpool_get(&p0, shm, tag, idx[0], true, &rv, now, &port), 0);
	assert_int_equal(port % 2, 0);
	assert_int_equal(rv.port, port + 1);
	assert_false(shm_ppool_is_free(shm, tag, port + 1, now));
	assert_int_equal(shm_ppool_redeem(shm, 77, idx[1], now, &got), 0);
	assert_int_equal(got.port, port + 1);
	assert_int_equal(got.lkey, 5);
	assert_int_equal(shm_ppool_redeem(shm, 77, idx[2], now, &got), -ENOENT);
	assert_int_equal(shm_ppool_take(shm, tag, port + 1, idx[2], now), -EADDRINUSE);
	shm_ppool_put(shm, tag, port + 1, idx[1]);
	/* An expired reservation is not redeemed, and its port comes back at the expiry. */
	rv.token = 78;
	rv.expires_ns = now + 2;
	assert_int_equal(portpool_get(&p0, shm, tag, idx[5], true, &rv, now, &port), 0);
	assert_false(shm_ppool_is_free(shm, tag, port + 1, now + 1));
	assert_int_equal(shm_ppool_redeem(shm, 78, idx[6], now + 2, &got), -ENOENT);
	assert_true(shm_ppool_is_free(shm, tag, port + 1, now + 2));
	/* A take-over's copy books a LIVE record's relay ports (shm_ppool_book_record). */
	{
		struct shm_alloc *r;
		uint32_t ri;

		assert_int_equal(shm_alloc_claim(shm, 1, &ri, &r), 0);
		shm_alloc_begin_write(r);
		r->relay = ip;
		r->relay.port = 50100;
		shm_alloc_end_write(r);
		assert_int_equal(shm_alloc_publish(shm, 1, ri), 0);
		assert_true(shm_ppool_is_free(shm, shm_ppool_tag(&ip), 50100, now));
		assert_int_equal(shm_ppool_book_record(shm, ri, now), 1);
		assert_false(shm_ppool_is_free(shm, shm_ppool_tag(&ip), 50100, now));
		assert_int_equal(shm_ppool_take(shm, shm_ppool_tag(&ip), 50100, ri, now), 0);
		assert_int_equal(shm_ppool_take(shm, shm_ppool_tag(&ip), 50100, idx[0], now),
				 -EADDRINUSE);
	}
	/* An empty range hands out nothing. */
	assert_int_equal(portpool_init(&p0, 10, 5, 0, 1), -EINVAL);
	assert_int_equal(portpool_get(&p0, shm, tag, idx[0], false, NULL, now, &port),
			 -EADDRNOTAVAIL);
	portpool_destroy(&p1);
	portpool_destroy(NULL);
	shm_destroy(shm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fires_not_early),
		cmocka_unit_test(test_long_deadline_and_gap),
		cmocka_unit_test(test_rearm_disarm_in_callback),
		cmocka_unit_test(test_portpool_shared),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
