/* Master: old workers that linger after a live upgrade with their TLS and DTLS calls
 * (worker/linger.c), seen through their status files beside the state file.
 *
 * Only the master calls these. A lingering worker is not the new master's child, and may
 * be of another version: the file is its one contract, a line
 *   turngate-linger 1 pid=P slot=S sessions=N ended_limit=E deadline=UNIX_S done=0|1 dtls=D
 * in STATE_PATH.linger.P, rewritten whole (rename) when N changes and with done=1 when
 * the worker exits. D (absent: 0, a version without DTLS lingering) of the N calls are
 * DTLS; each of those has a line "dtls LSLOT ADDR PORT" after the first, which the
 * workers read (worker/dtlslinger.h) to forward its datagrams to STATE_PATH.linger.P.sock,
 * the worker's forwarding socket. */
#ifndef TG_MASTER_LINGER_H
#define TG_MASTER_LINGER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

struct master;
struct mworker;

struct linger_info {
	pid_t pid;
	unsigned slot, sessions, ended_limit, dtls;
	int64_t deadline;
};

/* Reads the status files: up to cap lingering workers into out, returns how many there
 * are. A file whose worker is done or gone is harvested once: its calls ended by the
 * limit go to SHM_CTR_STREAMS_LINGER_ENDED, and the file is removed. */
size_t linger_scan(struct master *m, struct linger_info *out, size_t cap);

/* [{"pid":P,"slot":S,"sessions":N,"ends_in_s":T}, ...] for admin status. */
json_t *linger_status(struct master *m);

/* The lingering workers, the calls they hold and the DTLS ones of those, for the
 * metrics. */
void linger_totals(struct master *m, unsigned *workers, unsigned *sessions, unsigned *dtls);

/* The lingering workers end their calls and exit (SIGTERM), for why (logged): a stop
 * (not an upgrade), or a disconnect or revocation of a user, which cannot reach into
 * them to pick that user's calls (they read the old table): all of theirs end. */
void linger_stop_all(struct master *m, const char *why);

/* The old master: w's worker said IPC_LINGER (it stays, serving its TLS calls): it counts
 * as stopped for the upgrade from now on. */
void linger_worker_detached(struct mworker *w, uint32_t sessions);

/* The old master, when the upgrade failed after the hand-over: its own lingering workers
 * are killed and reaped before their slots are respawned (their calls end, as before
 * lingering existed: the slots' shared state must have one process each). */
void linger_kill_children(struct master *m);

#endif
