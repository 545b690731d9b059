/* Master: ending every allocation of a user, or of the revoked credentials, on every
 * worker at once (turngatectl disconnect --user, revoke).
 *
 * One IPC_DISCONNECT frame per worker, never one per allocation: a worker's control
 * socket holds about 278 small frames (test_ctl.py's not-reached case fills one), and a user
 * may hold tens of thousands of allocations on one worker (issue 42). Master process
 * only, on its loop. */
#ifndef TG_MASTER_DISCONNECT_H
#define TG_MASTER_DISCONNECT_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "master/master.h"
#include "shm/shm_alloc.h"

/* What a disconnect reached: counts of the LIVE records it picked. */
struct disconnect_tally {
	unsigned ended;        /* on workers that got the frame: they end them at their next
				* loop iteration (or the replacement of one killed first:
				* master/discsent.h) */
	unsigned not_reached;  /* on workers that did not: not running (their records wait
				* for the respawned worker) or their frame could not be sent */
	unsigned workers;      /* workers sent the frame */
};

/* Whether the record is one to end; arg is the caller's. */
typedef bool (*disconnect_pick_fn)(struct master *m, const struct shm_alloc *rec,
				   const void *arg);

/* The records to end, counted per owner worker (disconnect_count), before the frames go
 * (disconnect_send). */
struct disconnect_plan {
	unsigned *per;        /* [m->n_slots]: picked records per running worker; NULL when
			       * out of memory (then every one is not_running) */
	unsigned not_running; /* picked records of workers not running */
};

/* Walks the LIVE records once and counts those pick() takes per owner worker into *p
 * (which disconnect_send, on the same loop turn, or disconnect_plan_free then frees).
 * Sends nothing: revoke counts before it stores the entry (master/revoke.c). */
void disconnect_count(struct master *m, disconnect_pick_fn pick, const void *arg,
		      struct disconnect_plan *p);

/* Sends each worker that owns any record of plan p one IPC_DISCONNECT frame: IPC_DISC_USER
 * of user, or with user NULL IPC_DISC_REVOKED; the worker's test is pick()'s
 * (shm_quota_user_match, the revocation list). A worker that could not be sent the frame
 * is logged and its records counted in not_reached, never in ended. A user frame sent is
 * kept in the slot's discsent list (re-sent if the worker dies first). Then stops the
 * workers that linger after a live upgrade (they serve calls from the old table:
 * linger_stop_all) with why. Fills *t; frees p. */
void disconnect_send(struct master *m, const char *user, struct disconnect_plan *p,
		     const char *why, struct disconnect_tally *t);

/* Frees a plan that is not sent. Accepts a zeroed one. */
void disconnect_plan_free(struct disconnect_plan *p);

/* disconnect_count, then disconnect_send. -EINVAL (nothing done) for a user that
 * IPC_DISC_USER cannot carry. */
int disconnect_many(struct master *m, const char *user, disconnect_pick_fn pick,
		    const void *arg, const char *why, struct disconnect_tally *t);

/* Adds the tally to a reply: "disconnected" (ended) and "not_reached". */
void disconnect_tally_json(json_t *reply, const struct disconnect_tally *t);

#endif
