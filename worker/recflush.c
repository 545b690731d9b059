/* The worker's session-record backlog, moved into its slot's ring as the master frees room
 * (contract in worker/recflush.h). */
#include "config.h"

#include <signal.h>
#include <time.h>

#include <ev.h>

#include "common/ipc.h"
#include "common/log.h"
#include "common/mono.h"
#include "shm/shm_records.h"
#include "worker/recflush.h"

/* The master drains every ring each 10 ms (master/records.c): half of that between our
 * tries keeps a backlog behind at most one drain without spinning. */
#define WK_RECFLUSH_S 0.005
/* At a stop, half the grace the master gives before it kills us (common/ipc.h), so that
 * the teardown after the wait (the fd-store hand-off among it) always runs: 512 events a
 * drain, 100 drains a second empty about 128,000 in 2.5 s, 25,600 in the 0.5 s of a stop
 * made immediate. Without progress for WK_RECFLUSH_STALL_MS (a slow write of the master's
 * may take most of it) the master is not draining; once the stop is immediate,
 * WK_RECFLUSH_NOW_STALL_MS, inside its shorter wait. */
#define WK_RECFLUSH_STOP_MS (IPC_STOP_GRACE_MS / 2)
#define WK_RECFLUSH_NOW_MS (IPC_STOP_NOW_GRACE_MS / 2)
#define WK_RECFLUSH_STALL_MS 1000u
#define WK_RECFLUSH_NOW_STALL_MS 400u
/* A backlog that waits this long is worth a warning (each as long again). */
#define WK_RECFLUSH_WARN_MS 10000u

_Static_assert(WK_RECFLUSH_STALL_MS < WK_RECFLUSH_STOP_MS, "the stall check fits the wait");
_Static_assert(WK_RECFLUSH_NOW_STALL_MS < WK_RECFLUSH_NOW_MS, "the stall check fits the wait");

static void wk_recflush_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = wk_checked(t->data);
	uint64_t left = shm_records_flush(w->shm, w->slot), now;

	(void)revents;
	if (left == 0) {
		ev_timer_stop(loop, t);
		return;
	}
	now = mono_ms();
	if (now - w->rec_warned < WK_RECFLUSH_WARN_MS)
		return;
	w->rec_warned = now;
	log_warn("worker", "slot %u: %llu session-record events wait for the master to drain "
			   "them (%llu dropped so far)",
		 w->slot, (unsigned long long)left,
		 (unsigned long long)shm_records_dropped(w->shm));
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
	if (shm_records_flush(w->shm, w->slot) != 0 && !ev_is_active(&w->rec_flush)) {
		w->rec_warned = mono_ms();	/* the first warning after WK_RECFLUSH_WARN_MS */
		ev_timer_start(w->loop, &w->rec_flush);
	}
}

void wk_recflush_linger(struct worker *w)
{
	if (ev_is_active(&w->rec_flush))
		ev_timer_stop(w->loop, &w->rec_flush);
	shm_records_unbuffered(w->shm, w->slot);
}

/* Whether the master made our stop immediate during the wait (a second signal's SIGTERM,
 * blocked by our caller: it stays pending for the loop's handler). A stop immediate from
 * the start says so in its IPC_STOP frame (w->stop_now): its SIGTERM usually reaches
 * libev's handler after the loop ended and is no longer pending here. */
static bool wk_recflush_hurried(void)
{
	sigset_t pend;

	return sigpending(&pend) == 0 &&
	       (sigismember(&pend, SIGTERM) == 1 || sigismember(&pend, SIGINT) == 1);
}

/* Flushes until the backlog is empty, deadline_ms passes, the stall limit passes without
 * progress (WK_RECFLUSH_STALL_MS, WK_RECFLUSH_NOW_STALL_MS once hurried), or the stop is
 * made immediate (then WK_RECFLUSH_NOW_MS at most from there). Returns the events left. */
static uint64_t wk_recflush_wait(struct worker *w, uint64_t deadline_ms)
{
	uint64_t left = shm_records_flush(w->shm, w->slot), before = left;
	uint64_t progress = mono_ms();
	const struct timespec nap = { .tv_nsec = 1000000 };
	bool hurried = w->stop_now;
	uint64_t stall = hurried ? WK_RECFLUSH_NOW_STALL_MS : WK_RECFLUSH_STALL_MS;

	while (left != 0 && mono_ms() < deadline_ms && mono_ms() - progress < stall) {
		(void)nanosleep(&nap, NULL);
		if (!hurried && wk_recflush_hurried()) {
			hurried = true;
			w->stop_now = true;	/* and the control frames' wait after ours */
			stall = WK_RECFLUSH_NOW_STALL_MS;
			if (mono_ms() + WK_RECFLUSH_NOW_MS < deadline_ms)
				deadline_ms = mono_ms() + WK_RECFLUSH_NOW_MS;
		}
		left = shm_records_flush(w->shm, w->slot);
		if (left < before)
			progress = mono_ms();
		before = left;
	}
	return left;
}

void wk_recflush_stop(struct worker *w)
{
	sigset_t hurry, old;
	uint64_t left;

	if (ev_is_active(&w->rec_flush))
		ev_timer_stop(w->loop, &w->rec_flush);
	if (shm_records_waiting(w->shm, w->slot) == 0)
		return;
	if (!shm_records_on(w->shm)) {
		shm_records_abandon(w->shm, w->slot);	/* the master would discard them */
		return;
	}
	sigemptyset(&hurry);
	sigaddset(&hurry, SIGTERM);
	sigaddset(&hurry, SIGINT);
	(void)sigprocmask(SIG_BLOCK, &hurry, &old);
	left = wk_recflush_wait(w, mono_ms() + (w->stop_now ? WK_RECFLUSH_NOW_MS
							    : WK_RECFLUSH_STOP_MS));
	(void)sigprocmask(SIG_SETMASK, &old, NULL);
	if (left == 0)
		return;
	log_error("worker", "slot %u: %llu session records not drained by the master in time: "
			    "dropped", w->slot, (unsigned long long)left);
	shm_records_abandon(w->shm, w->slot);
}
