/* Session records (master/records.c): the master drains the workers' end events from the
 * shared segment's rings (shm/shm_records.h) and writes one JSON line per ended allocation
 * to admin.session_records.file (a path, stdout or syslog), and POSTs them in batches to
 * admin.session_records.webhook. Nothing here runs in a worker. */
#ifndef TG_MASTER_RECORDS_H
#define TG_MASTER_RECORDS_H

struct master;

/* Starts the drain timer, applies m->cfg's outputs and takes what the rings hold
 * already (a take-over's records) out of them, for the first drain to write before any
 * worker's (shm_records_hold: no encoding, no write here); called at startup after the
 * segment exists and the first snapshot is published, before the first worker is
 * forked. Returns 0, or -errno (logged) when the file cannot be opened (the
 * daemon runs on, with the records counted as dropped until a reload or reopen fixes
 * it). */
int records_start(struct master *m);

/* After a reload: outputs of the new m->cfg (the file reopened when its path changed,
 * the webhook's backlog kept when its URL did not). */
void records_apply(struct master *m);

/* SIGUSR1 / turngatectl logrotate: the file closed and opened again at its path. */
void records_reopen(struct master *m);

/* Drains every pending event now (before a hand-over, at exit). */
void records_flush(struct master *m);

/* Stops draining for good: the segment belongs to another master (live upgrade). */
void records_freeze(struct master *m);

/* The segment is ours again (a live upgrade that failed after the hand-over). */
void records_thaw(struct master *m);

void records_free(struct master *m);

#endif
