/* Unit tests for the worker's timing wheel and relay port pool (injected clock). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>

#include <cmocka.h>

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

static void test_portpool_shares(void **state)
{
	struct portpool p0, p1;
	uint16_t port, last = 0;

	(void)state;
	assert_int_equal(portpool_init(&p0, 50000, 50009, 0, 2), 0);
	assert_int_equal(portpool_init(&p1, 50000, 50009, 1, 2), 0);
	assert_int_equal(p0.lo, 50000);
	assert_int_equal(p0.hi, 50004);
	assert_int_equal(p1.lo, 50005);
	assert_int_equal(p1.hi, 50009);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(portpool_get(&p0, false, false, &port), 0);
		assert_true(port >= 50000 && port <= 50004);
		assert_true(port != last);
		last = port;
	}
	assert_int_equal(portpool_get(&p0, false, false, &port), -EADDRNOTAVAIL);
	portpool_put(&p0, 50002);
	assert_int_equal(portpool_get(&p0, false, false, &port), 0);
	assert_int_equal(port, 50002);
	/* even pair in p1: 50006+50007 or 50008+50009 */
	assert_int_equal(portpool_get(&p1, true, true, &port), 0);
	assert_int_equal(port % 2, 0);
	assert_int_equal(portpool_take(&p1, port + 1), -EADDRINUSE);
	assert_int_equal(portpool_take(&p1, 50000), -ERANGE);
	portpool_destroy(&p0);
	assert_int_equal(portpool_init(&p0, 10, 5, 0, 1), -EINVAL);
	/* a failed pool hands out nothing and does not crash */
	assert_int_equal(portpool_get(&p0, false, false, &port), -EADDRNOTAVAIL);
	assert_int_equal(portpool_take(&p0, 10), -EADDRNOTAVAIL);
	portpool_put(&p0, 10);
	assert_int_equal(portpool_init(&p0, 10, 10, 0, 2), -EINVAL);
	portpool_destroy(&p1);
	portpool_destroy(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fires_not_early),
		cmocka_unit_test(test_long_deadline_and_gap),
		cmocka_unit_test(test_rearm_disarm_in_callback),
		cmocka_unit_test(test_portpool_shares),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
