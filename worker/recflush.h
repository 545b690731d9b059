/* The worker's session-record backlog: the end (and start) events its slot's ring had no
 * room for wait in the process (shm/shm_records.h) and are moved into the ring as the
 * master drains it. Worker process only. */
#ifndef TG_WORKER_RECFLUSH_H
#define TG_WORKER_RECFLUSH_H

#include "worker/wk.h"

/* Once after the fork, before the loop: forgets the master's backlog that came with its
 * handle and sets the flush timer up (not started). */
void wk_recflush_init(struct worker *w);
/* From the loop's prepare watcher: nothing while the backlog is empty (one load); else
 * what fits goes into the ring now and the flush timer runs until the backlog is empty. */
void wk_recflush_prepare(struct worker *w);
/* At the worker's stop, its loop ended: waits until the master has drained the backlog
 * into the ring (not until the records are written: the master writes them at its next
 * drain). Bounded: half the master's stop grace (common/ipc.h; half the shorter one once
 * the stop is made immediate: w->stop_now, from IPC_STOP's byte or the loop's SIGTERM, or
 * a SIGTERM/SIGINT during the wait, which stays pending for the loop and sets
 * w->stop_now for the control frames' wait after this one: worker/ctlq.c), or 1 s without
 * progress (0.4 s once immediate); what is left then is counted as dropped and logged. No wait while the master writes no records: the backlog
 * is dropped (counted). */
void wk_recflush_stop(struct worker *w);
/* When the worker starts to linger after a live upgrade: no master writes its events
 * any more (the new one recorded its calls' ends at the take-over), so the backlog is
 * forgotten, a full ring drops from now on, and nothing waits at its exit. */
void wk_recflush_linger(struct worker *w);

#endif
