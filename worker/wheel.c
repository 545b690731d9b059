/* Hashed timing wheel for the worker's expiry timers (see wheel.h). */
#include "config.h"

#include "worker/wheel.h"

#include <string.h>

static void wheel_link(struct wheel *w, struct wheel_timer *t, uint64_t tick)
{
	LIST_INSERT_HEAD(&w->slot[tick % WHEEL_SLOTS], t, link);
	t->armed = true;
}

static void wheel_unlink(struct wheel_timer *t)
{
	LIST_REMOVE(t, link);
	t->armed = false;
}

void wheel_init(struct wheel *w, uint64_t now_ms)
{
	memset(w, 0, sizeof(*w));
	for (size_t i = 0; i < WHEEL_SLOTS; i++)
		LIST_INIT(&w->slot[i]);
	w->tick = now_ms / WHEEL_TICK_MS;
}

void wheel_timer_init(struct wheel_timer *t, wheel_fire_fn *fire)
{
	memset(&t->link, 0, sizeof(t->link));
	t->armed = false;
	t->deadline_ms = 0;
	t->fire = fire;
}

static uint64_t wheel_tick_of(const struct wheel *w, uint64_t deadline_ms)
{
	/* Round up so a timer never fires before its deadline; never file in the past,
	 * the slot of the current tick has already been visited. */
	uint64_t tick = (deadline_ms + WHEEL_TICK_MS - 1) / WHEEL_TICK_MS;

	return tick <= w->tick ? w->tick + 1 : tick;
}

void wheel_arm(struct wheel *w, struct wheel_timer *t, uint64_t deadline_ms)
{
	if (t->armed)
		wheel_unlink(t);
	else
		w->armed++;
	t->deadline_ms = deadline_ms;
	wheel_link(w, t, wheel_tick_of(w, deadline_ms));
}

void wheel_disarm(struct wheel *w, struct wheel_timer *t)
{
	if (!t->armed)
		return;
	wheel_unlink(t);
	w->armed--;
}

/* Moves one slot's timers to a private list first: callbacks may then add to or remove
 * from the wheel (including the private list: a LIST entry unlinks without its head)
 * without disturbing the walk. */
static size_t wheel_run_slot(struct wheel *w, size_t idx, uint64_t now_ms, void *arg)
{
	struct wheel_list pending;
	struct wheel_timer *t;
	size_t fired = 0;

	LIST_INIT(&pending);
	while ((t = LIST_FIRST(&w->slot[idx])) != NULL) {
		LIST_REMOVE(t, link);
		LIST_INSERT_HEAD(&pending, t, link);
	}
	while ((t = LIST_FIRST(&pending)) != NULL) {
		wheel_unlink(t);
		if (t->deadline_ms > now_ms) {
			wheel_link(w, t, wheel_tick_of(w, t->deadline_ms));
			continue;
		}
		w->armed--;
		fired++;
		t->fire(t, arg);
	}
	return fired;
}

size_t wheel_advance(struct wheel *w, uint64_t now_ms, void *arg)
{
	uint64_t target = now_ms / WHEEL_TICK_MS;
	uint64_t steps;
	size_t fired = 0;

	if (target <= w->tick)
		return 0;
	steps = target - w->tick;
	if (steps > WHEEL_SLOTS) {
		/* Long gap: every slot is due at most once; visit each one. */
		w->tick = target;
		for (size_t i = 0; i < WHEEL_SLOTS; i++)
			fired += wheel_run_slot(w, i, now_ms, arg);
		return fired;
	}
	while (w->tick < target) {
		w->tick++;
		fired += wheel_run_slot(w, w->tick % WHEEL_SLOTS, now_ms, arg);
	}
	return fired;
}
