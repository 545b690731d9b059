/* Per-worker hashed timing wheel: expiry of allocations, permissions, channels and
 * reservations without a heap entry per object.
 *
 * Worker-private, single-threaded. Timers are intrusive (embed struct wheel_timer in the
 * object). Time is passed in by the caller (milliseconds of a monotonic clock), so tests
 * drive it without sleeping. Resolution is WHEEL_TICK_MS; a timer fires at the first
 * wheel_advance() whose now is >= its deadline, never earlier. Deadlines beyond one
 * revolution are parked in a slot and re-filed when their slot comes round.
 */
#ifndef TG_WORKER_WHEEL_H
#define TG_WORKER_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#define WHEEL_TICK_MS 100u
#define WHEEL_SLOTS 1024u

struct wheel_timer;
typedef void wheel_fire_fn(struct wheel_timer *t, void *arg);

struct wheel_timer {
	LIST_ENTRY(wheel_timer) link;	/* its slot's list, while armed */
	bool armed;
	uint64_t deadline_ms;
	wheel_fire_fn *fire;
};
LIST_HEAD(wheel_list, wheel_timer);

struct wheel {
	uint64_t tick;		/* last tick processed */
	size_t armed;		/* number of armed timers */
	struct wheel_list slot[WHEEL_SLOTS];
};

/* Initialises an empty wheel at time now_ms. */
void wheel_init(struct wheel *w, uint64_t now_ms);

/* Initialises a timer (unarmed) with its callback. */
void wheel_timer_init(struct wheel_timer *t, wheel_fire_fn *fire);

/* Arms t for deadline_ms (re-arms it when already armed). A deadline in the past fires at
 * the next wheel_advance(). */
void wheel_arm(struct wheel *w, struct wheel_timer *t, uint64_t deadline_ms);

/* Disarms t; a no-op when it is not armed. Safe from within a fire callback for any timer. */
void wheel_disarm(struct wheel *w, struct wheel_timer *t);

static inline bool wheel_timer_armed(const struct wheel_timer *t)
{
	return t->armed;
}

/* Fires every timer whose deadline is <= now_ms, in no particular order. A fired timer is
 * disarmed before its callback runs; the callback may re-arm it, arm or disarm others, or
 * free the object holding it. Returns the number fired. Bounded work: at most
 * WHEEL_SLOTS slots are visited per call. */
size_t wheel_advance(struct wheel *w, uint64_t now_ms, void *arg);

#endif
