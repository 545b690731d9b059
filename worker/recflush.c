/* The worker's session-record backlog, moved into its slot's ring as the master frees room
 * (contract in worker/recflush.h). */
#include "config.h"

#include <time.h>

#include <ev.h>

#include "common/log.h"
#include "common/mono.h"
#include "shm/shm_records.h"
#include "worker/recflush.h"

/* The master drains every ring each 10 ms (master/records.c): half of that between our
 * tries keeps a backlog behind at most one drain without spinning. */
#define WK_RECFLUSH_S 0.005
/* At a stop: 512 events a drain, 100 drains a second, so 60,000 waiting (issue 42's
 * allocations of one relay address ended at once) take about 1.2 s. */
#define WK_RECFLUSH_STOP_MS 5000u
#define WK_RECFLUSH_STALL_MS 1000u

static void wk_recflush_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = wk_checked(t->data);

	(void)revents;
	if (shm_records_flush(w->shm, w->slot) == 0)
		ev_timer_stop(loop, t);
}

void wk_recflush_init(struct worker *w)
{
	shm_records_disown(w->shm);
	ev_timer_init(&w->rec_flush, wk_recflush_cb, WK_RECFLUSH_S, WK_RECFLUSH_S);
	w->rec_flush.data = w;
}

void wk_recflush_prepare(struct worker *w)
{
	if (shm_records_waiting(w->shm, w->slot) == 0)
		return;
	if (shm_records_flush(w->shm, w->slot) != 0 && !ev_is_active(&w->rec_flush))
		ev_timer_start(w->loop, &w->rec_flush);
}

void wk_recflush_stop(struct worker *w)
{
	uint64_t left = shm_records_flush(w->shm, w->slot), before = left;
	uint64_t start = mono_ms(), progress = start;
	const struct timespec nap = { .tv_nsec = 1000000 };

	while (left != 0 && mono_ms() - start < WK_RECFLUSH_STOP_MS &&
	       mono_ms() - progress < WK_RECFLUSH_STALL_MS) {
		(void)nanosleep(&nap, NULL);
		left = shm_records_flush(w->shm, w->slot);
		if (left < before)
			progress = mono_ms();
		before = left;
	}
	if (ev_is_active(&w->rec_flush))
		ev_timer_stop(w->loop, &w->rec_flush);
	if (left == 0)
		return;
	log_error("worker", "slot %u: %llu session records not drained by the master in time: "
			    "dropped", w->slot, (unsigned long long)left);
	shm_records_abandon(w->shm, w->slot);
}
