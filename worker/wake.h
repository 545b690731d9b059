/* Wake-up coalescing of a worker's loop (limits.wake_coalesce_us): under a steady stream of
 * datagrams that each wake the worker on their own, the loop waits a short bounded interval
 * before it polls, so that one wake-up serves several datagrams.
 *
 * Why: at a fixed rate below capacity every relayed datagram costs a wake-up of its own
 * (epoll_wait returns, the scheduler switches in, the receivers of our sends are woken from
 * idle), about three times the work of the datagram itself (docs/performance.md,
 * *Wake-up coalescing*). Waiting trades that for latency: at most the interval per hop.
 *
 * How: the controller looks at windows of WK_WAKE_WINDOW_NS of loop iterations ("wakes")
 * and the datagrams they handled ("units"). It engages (asks libev for an io collect
 * interval, ev_set_io_collect_interval: libev sleeps the interval less the time the
 * callbacks took, then polls) only when
 *   - the window's units per second reach `min_rate` (limits.wake_coalesce_rate), and
 *   - the wakes handle fewer than WK_WAKE_FEW units each (a loop that drains batches
 *     already has nothing to gain);
 * and it stays engaged only while waiting pays: the engaged window's units per wake are at
 * least WK_WAKE_GAIN_NUM/DEN times those of the window before it and at least WK_WAKE_MIN_PER.
 * A window that does not pay (one flow in a closed loop, whose next datagram only comes
 * after our answer; a rate that fell) disengages it for a back-off that doubles from
 * WK_WAKE_BACKOFF_MIN_NS to WK_WAKE_BACKOFF_MAX_NS and resets after a window that paid.
 * A window with any stream read (TCP, TLS, RFC 6062 data connections) does not pay either:
 * stream calls are closed loops of their own (a request waits for its answer, TCP for its
 * acknowledgements), which a wait only slows down (measured: the TURN-TCP round trip of ten
 * calls doubled and their throughput halved with coalescing on at 100 us). It disengages
 * for the current back-off without doubling it: a stream read says nothing about the
 * datagrams, and one TCP health check every few seconds must not keep it off for good.
 * Engaged, every WK_WAKE_REMEASURE_NS it leaves one window un-engaged (no back-off) to
 * measure the baseline again: a load that grew until its wake-ups batch on their own gains
 * nothing from waiting any more.
 *
 * Pure: no I/O, no clock of its own (now is passed in), so tests drive it without sleeping.
 * Worker-private, single-threaded, embedded in struct worker.
 */
#ifndef TG_WORKER_WAKE_H
#define TG_WORKER_WAKE_H

#include <stdbool.h>
#include <stdint.h>

#define WK_WAKE_WINDOW_NS 10000000ull		/* 10 ms */
#define WK_WAKE_FEW 4u				/* units per wake below which it may engage */
#define WK_WAKE_MIN_PER_X16 32u			/* engaged: at least 2 units per wake (x16) */
#define WK_WAKE_GAIN_NUM 3u			/* engaged: at least 1.5 x the units per */
#define WK_WAKE_GAIN_DEN 2u			/* wake of the window before engaging */
#define WK_WAKE_BACKOFF_MIN_NS 100000000ull	/* 100 ms */
#define WK_WAKE_BACKOFF_MAX_NS 5000000000ull	/* 5 s */
#define WK_WAKE_REMEASURE_NS 5000000000ull	/* engaged: one window off this often */
#define WK_WAKE_SLACK_DIV 8u			/* timer slack: interval / 8 ... */
#define WK_WAKE_SLACK_PLUS_NS 1000u		/* ... + 1 us */

struct wk_wake {
	uint32_t interval_us;	/* limits.wake_coalesce_us; 0 = never */
	uint32_t min_rate;	/* limits.wake_coalesce_rate: units per second */
	bool on;		/* engaged: the loop waits interval_us before polling */
	uint64_t win_start;	/* ns; 0 = no window yet */
	uint32_t wakes, units;	/* of the current window */
	uint32_t streams;	/* stream reads in the current window */
	uint32_t off_per_x16;	/* units per wake x16 of the last window before engaging */
	uint64_t measured_at;	/* ns: when off_per_x16 was measured */
	uint64_t probe_at;	/* ns: no engaging before */
	uint64_t backoff;	/* ns: the next back-off */
};

/* Sets the parameters (a snapshot, at start or reload; conf bounds interval_us to
 * CONF_MAX_WAKE_COALESCE_US). A change of either disengages and forgets the back-off and
 * the window. */
void wk_wake_configure(struct wk_wake *k, uint32_t interval_us, uint32_t min_rate);

/* One loop iteration began (the poll returned) at now (ns, monotonic). Closes the window
 * when it is WK_WAKE_WINDOW_NS old and decides for the next one. */
void wk_wake_woke(struct wk_wake *k, uint64_t now);

/* n datagrams were handled in this iteration. */
static inline void wk_wake_units(struct wk_wake *k, uint32_t n)
{
	k->units += n;
}

/* A stream connection was read in this iteration. */
static inline void wk_wake_stream(struct wk_wake *k)
{
	k->streams++;
}

/* The timer slack (ns, PR_SET_TIMERSLACK) for a worker waiting interval_us: enough to keep
 * the wait near what was asked (the default 50 us would more than double a short one); 0
 * (back to the default inherited from the master) when interval_us is 0. */
static inline unsigned long wk_wake_slack_ns(uint32_t interval_us)
{
	return interval_us ? (unsigned long)interval_us * 1000 / WK_WAKE_SLACK_DIV +
				     WK_WAKE_SLACK_PLUS_NS
			   : 0;
}

/* The interval (seconds) the loop should wait before its next poll: 0 or interval_us. */
double wk_wake_interval(const struct wk_wake *k);

#endif
