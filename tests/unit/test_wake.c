/* Unit tests for the worker's wake-up coalescing controller (worker/wake.h), on an injected
 * clock: when it engages, when it stays, when it backs off and for how long. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "worker/wake.h"

#define MS 1000000ull

/* One window of `wakes` loop iterations spread evenly from *now, each handling `per`
 * datagrams, the first also `streams` stream reads; then the wake-up that closes it (and
 * opens the next window). Returns whether the controller is engaged for what follows. */
static bool window_s(struct wk_wake *k, uint64_t *now, uint32_t wakes, uint32_t per,
		     uint32_t streams)
{
	uint64_t step = WK_WAKE_WINDOW_NS / wakes;

	for (uint32_t i = 0; i < wakes; i++) {
		wk_wake_woke(k, *now + 1 + i * step);
		wk_wake_units(k, per);
		for (; i == 0 && streams > 0; streams--)
			wk_wake_stream(k);
	}
	*now += WK_WAKE_WINDOW_NS + 1;
	wk_wake_woke(k, *now);
	return k->on;
}

static bool window(struct wk_wake *k, uint64_t *now, uint32_t wakes, uint32_t per)
{
	return window_s(k, now, wakes, per, 0);
}

static void setup(struct wk_wake *k, uint32_t us, uint32_t rate)
{
	*k = (struct wk_wake){ 0 };
	wk_wake_configure(k, us, rate);
}

static void test_off_never_engages(void **state)
{
	struct wk_wake k;
	uint64_t now = 1000 * MS;

	(void)state;
	setup(&k, 0, 1);
	for (int i = 0; i < 10; i++)
		assert_false(window(&k, &now, 400, 1));
	assert_true(wk_wake_interval(&k) == 0.0);
}

/* 400 single-datagram wake-ups in 10 ms (40,000/s, the fixed-rate benchmark) engage it;
 * wake-ups that then carry 4 datagrams each keep it; the interval is what was set. */
static void test_engages_and_stays_while_it_pays(void **state)
{
	struct wk_wake k;
	uint64_t now = 1000 * MS;

	(void)state;
	setup(&k, 100, 20000);
	assert_true(wk_wake_interval(&k) == 0.0);
	assert_true(window(&k, &now, 400, 1));
	assert_true(wk_wake_interval(&k) > 99e-6 && wk_wake_interval(&k) < 101e-6);
	for (int i = 0; i < 50; i++)
		assert_true(window(&k, &now, 100, 4));
}

/* Below the rate, or when each wake-up drains a batch already, nothing to gain. */
static void test_no_engage_slow_or_batched(void **state)
{
	struct wk_wake k;
	uint64_t now = 1000 * MS;

	(void)state;
	setup(&k, 100, 20000);
	for (int i = 0; i < 5; i++)
		assert_false(window(&k, &now, 100, 1));	/* 10,000/s */
	for (int i = 0; i < 5; i++)
		assert_false(window(&k, &now, 100, 8));	/* 80,000/s in batches of 8 */
	for (int i = 0; i < 5; i++)
		assert_false(window(&k, &now, 10, WK_WAKE_FEW)); /* 4,000/s */
	assert_true(window(&k, &now, 100, 3));	/* 30,000/s, 3 a wake-up */
}

/* A closed loop of one flow: waiting gathers nothing (still one datagram a wake-up), so it
 * disengages after one window and tries again after 100 ms, 200 ms, 400 ms... up to 5 s. */
static void test_backs_off_when_it_does_not_pay(void **state)
{
	struct wk_wake k;
	uint64_t now = 1000 * MS, off_at, expect = WK_WAKE_BACKOFF_MIN_NS;
	int probes = 0;

	(void)state;
	setup(&k, 60, 20000);
	assert_true(window(&k, &now, 400, 1));
	while (probes < 12) {
		assert_false(window(&k, &now, 400, 1));	/* the engaged window: no gain */
		off_at = now;
		while (!window(&k, &now, 400, 1))
			assert_true(now - off_at < expect + 2 * WK_WAKE_WINDOW_NS);
		assert_true(now - off_at >= expect);
		expect = expect * 2 < WK_WAKE_BACKOFF_MAX_NS ? expect * 2 : WK_WAKE_BACKOFF_MAX_NS;
		probes++;
	}
	assert_int_equal(expect, WK_WAKE_BACKOFF_MAX_NS);
	/* A window that pays resets the back-off. */
	assert_true(window(&k, &now, 100, 4));
	assert_false(window(&k, &now, 400, 1));
	off_at = now;
	while (!window(&k, &now, 400, 1))
		;
	assert_true(now - off_at < WK_WAKE_BACKOFF_MIN_NS + 2 * WK_WAKE_WINDOW_NS);
}

/* A stream read in a window keeps it from engaging, and disengages it. */
static void test_streams_keep_it_off(void **state)
{
	struct wk_wake k;
	uint64_t now = 1000 * MS;

	(void)state;
	setup(&k, 100, 20000);
	assert_false(window_s(&k, &now, 400, 1, 1));
	assert_true(window(&k, &now, 400, 1));	/* no stream read in that one */
	for (int i = 0; i < 3; i++)
		assert_true(window(&k, &now, 100, 4));
	assert_false(window_s(&k, &now, 100, 4, 1));
}

/* A stream read disengages it for the current back-off but does not grow it, even when
 * every engaged spell meets one (a TCP health check on a mixed listener): it comes back after
 * 100 ms each time, not after 200, 400, ... 5 s. */
static void test_streams_do_not_grow_backoff(void **state)
{
	struct wk_wake k;
	uint64_t now = 1000 * MS, off_at;

	(void)state;
	setup(&k, 100, 20000);
	assert_true(window(&k, &now, 400, 1));
	for (int i = 0; i < 12; i++) {
		assert_false(window_s(&k, &now, 100, 4, 1));
		off_at = now;
		while (!window(&k, &now, 400, 1))
			assert_true(now - off_at < WK_WAKE_BACKOFF_MIN_NS + 2 * WK_WAKE_WINDOW_NS);
	}
	assert_int_equal(k.backoff, WK_WAKE_BACKOFF_MIN_NS);
}

/* Engaged, it leaves one window un-engaged every WK_WAKE_REMEASURE_NS to measure again: the
 * same load engages it again at once; a load that now batches on its own (8 a wake-up
 * un-engaged) leaves it off. */
static void test_remeasures(void **state)
{
	struct wk_wake k;
	uint64_t now = 1000 * MS, on_at;
	int windows = 0;

	(void)state;
	setup(&k, 100, 20000);
	assert_true(window(&k, &now, 400, 1));
	on_at = now;
	while (window(&k, &now, 100, 4))
		assert_true(++windows < 1000);
	assert_true(now - on_at >= WK_WAKE_REMEASURE_NS);
	assert_true(now - on_at < WK_WAKE_REMEASURE_NS + 2 * WK_WAKE_WINDOW_NS);
	assert_true(window(&k, &now, 400, 1));	/* measured again: still one a wake-up */
	windows = 0;
	while (window(&k, &now, 100, 4))
		assert_true(++windows < 1000);
	for (int i = 0; i < 1000; i++)
		assert_false(window(&k, &now, 50, 8));	/* batches on its own */
}

/* Engaged, a rate that falls below min_rate disengages it. */
static void test_rate_falls(void **state)
{
	struct wk_wake k;
	uint64_t now = 1000 * MS;

	(void)state;
	setup(&k, 100, 20000);
	assert_true(window(&k, &now, 400, 1));
	assert_false(window(&k, &now, 5, 2));	/* 1,000/s */
}

/* The rate is units / dt: a long idle window with one datagram is no rate at all, even
 * where min_rate * dt would wrap (1e8/s, the configuration's maximum, over ~184.5 s). */
static void test_long_idle_window(void **state)
{
	struct wk_wake k;
	uint64_t now = 1000 * MS;

	(void)state;
	setup(&k, 100, 100000000);
	wk_wake_woke(&k, now);
	wk_wake_units(&k, 1);
	/* 1e8 * dt - 2^64 = 90,448,384 < 1e9 * 1 unit */
	wk_wake_woke(&k, now + 184467440738ull);
	assert_false(k.on);
}

/* A reload that changes the parameters starts over; the same ones change nothing. */
static void test_reconfigure(void **state)
{
	struct wk_wake k;
	uint64_t now = 1000 * MS;

	(void)state;
	setup(&k, 100, 20000);
	assert_true(window(&k, &now, 400, 1));
	wk_wake_configure(&k, 100, 20000);
	assert_true(k.on);
	wk_wake_configure(&k, 50, 20000);
	assert_false(k.on);
	wk_wake_configure(&k, 0, 20000);
	assert_false(window(&k, &now, 400, 1));
	assert_true(wk_wake_interval(&k) == 0.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_off_never_engages),
		cmocka_unit_test(test_engages_and_stays_while_it_pays),
		cmocka_unit_test(test_no_engage_slow_or_batched),
		cmocka_unit_test(test_backs_off_when_it_does_not_pay),
		cmocka_unit_test(test_streams_keep_it_off),
		cmocka_unit_test(test_streams_do_not_grow_backoff),
		cmocka_unit_test(test_remeasures),
		cmocka_unit_test(test_rate_falls),
		cmocka_unit_test(test_reconfigure),
		cmocka_unit_test(test_long_idle_window),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
