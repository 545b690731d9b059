/* Wake-up coalescing controller (see wake.h): engages a short wait before each poll when
 * single-datagram wake-ups come fast, and keeps it only while it gathers datagrams. */
#include "config.h"

#include "worker/wake.h"

#include <string.h>

void wk_wake_configure(struct wk_wake *k, uint32_t interval_us, uint32_t min_rate)
{
	if (k->interval_us == interval_us && k->min_rate == min_rate)
		return;
	memset(k, 0, sizeof(*k));
	k->interval_us = interval_us;
	k->min_rate = min_rate;
	k->backoff = WK_WAKE_BACKOFF_MIN_NS;
}

/* The window [win_start, now) of dt ns had k->wakes wake-ups handling k->units datagrams. */
static void wk_wake_decide(struct wk_wake *k, uint64_t now, uint64_t dt)
{
	uint32_t per = k->wakes ? (uint32_t)((uint64_t)k->units * 16 / k->wakes) : 0;
	/* units per second, by division: min_rate * dt would wrap after a long idle window
	 * (dt >= WK_WAKE_WINDOW_NS > 0; units * 1e9 < 2^64 for any uint32_t units) */
	bool busy = k->units > 0 && k->streams == 0 &&
		    (uint64_t)k->units * 1000000000ull / dt >= k->min_rate;

	if (!k->on) {
		if (busy && per < WK_WAKE_FEW * 16 && now >= k->probe_at) {
			k->on = true;
			k->off_per_x16 = per;
			k->measured_at = now;
		}
		return;
	}
	if (busy && per >= WK_WAKE_MIN_PER_X16 &&
	    (uint64_t)per * WK_WAKE_GAIN_DEN >= (uint64_t)k->off_per_x16 * WK_WAKE_GAIN_NUM) {
		k->backoff = WK_WAKE_BACKOFF_MIN_NS;	/* it pays: stay */
		/* The baseline is from when it engaged: a load that has grown since may batch
		 * on its own. Leave one window un-engaged, without back-off, to measure again. */
		if (now - k->measured_at >= WK_WAKE_REMEASURE_NS) {
			k->on = false;
			k->probe_at = 0;
		}
		return;
	}
	k->on = false;
	k->probe_at = now + k->backoff;
	/* A stream read says nothing about whether waiting gathers datagrams: growing the
	 * back-off for it would let one TCP health check every few seconds keep it off. */
	if (k->streams == 0)
		k->backoff = k->backoff * 2 < WK_WAKE_BACKOFF_MAX_NS ? k->backoff * 2
								     : WK_WAKE_BACKOFF_MAX_NS;
}

void wk_wake_woke(struct wk_wake *k, uint64_t now)
{
	if (!k->interval_us)
		return;
	if (k->win_start && now - k->win_start >= WK_WAKE_WINDOW_NS)
		wk_wake_decide(k, now, now - k->win_start);
	if (!k->win_start || now - k->win_start >= WK_WAKE_WINDOW_NS) {
		k->win_start = now;
		k->wakes = 0;
		k->units = 0;
		k->streams = 0;
	}
	k->wakes++;
}

double wk_wake_interval(const struct wk_wake *k)
{
	return k->on ? k->interval_us / 1e6 : 0.0;
}
