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
/* At the worker's stop, its loop ended: waits for the master to drain the backlog into
 * the file (bounded: WK_RECFLUSH_STOP_MS in all, WK_RECFLUSH_STALL_MS without progress);
 * what is left then is counted as dropped and logged. */
void wk_recflush_stop(struct worker *w);

#endif
