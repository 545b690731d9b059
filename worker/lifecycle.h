/* Worker process, the top layer: the loop, the snapshots and the listeners (worker.c),
 * the re-adoption of a dead predecessor's allocations (adopt.c), and the live upgrade's
 * two halves, the stream connections parked with the master (park.c) and the TLS calls
 * an old worker keeps (linger.c). The only layer that may call every other one: it sets
 * the layers below up and registers their hooks (wk_tables_init: the table's struct
 * wk_table_ops, the transports' struct wk_xport_up). Nothing below includes this header.
 * Worker process only. */
#ifndef TG_WORKER_LIFECYCLE_H
#define TG_WORKER_LIFECYCLE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ipc.h"
#include "conf/snapshot.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "worker/table.h"
#include "worker/wk.h"

struct park_hdr;		/* common/park.h */

/* ---- worker.c ---- */
void wk_listener_close(struct worker *w, struct wk_listener *l);
/* Acts on control frame m from the master (ipc_recv checked it) and takes fd, its
 * descriptor or -1: wk_ctl_cb's dispatch, called by unit tests directly. */
void wk_ctl_msg(struct worker *w, struct ipc_msg *m, int fd);
/* At exit (worker_run, after the loop): reads what is left on the control socket, up to 64
 * frames, until it has no more or is closed. Acts on an IPC_PARK still unread (the master
 * sends it before the SIGQUIT that stopped us); nothing else is acted on any more: a
 * hand-off's connection is dropped as wk_tcp_drop_handoff does, a relay channel kept for
 * the stop, any other descriptor closed. A frame ipc_recv refused is skipped, never read. */
void wk_ctl_last(struct worker *w);
/* The 1 s heartbeat timer's work: the slot's heartbeat in the table, the control queue's
 * drops held back by their lines' rate logged (ipcq_ev_report), the revocation sweep. */
void wk_heartbeat(struct worker *w);
/* For harnesses that call wk_turn_input without the loop (fuzz/fuzz_dispatch.c): makes s
 * (an opened snapshot the caller keeps alive) current as the ev_check watcher does for a
 * new generation: hot values copied, listeners re-resolved, relay pools (re)built; no shm
 * tracking, no adoption. */
void wk_snap_use(struct worker *w, const struct snap *s);
/* The worker's private tables (receive buffers, allocation hash sized from the table's
 * capacity), its fast path maps from the heritage, and the layers' hooks (w->table_ops,
 * w->up): w->h and w->shm set first. Returns 0 or -ENOMEM; either way wk_tables_free frees
 * what it allocated. */
int wk_tables_init(struct worker *w);
void wk_tables_free(struct worker *w);

/* ---- adopt.c ---- */
/* Re-adoption of a dead predecessor's records (same slot), see docs/architecture.md. */
enum wk_adopt_verdict {
	WK_ADOPT_TRY = 0,	/* LIVE, consistent, UDP, not expired: try to serve it again */
	WK_ADOPT_TORN,		/* CLAIMED/DYING or odd seqlock: killed mid-update */
	WK_ADOPT_STREAM,	/* TCP/TLS/DTLS: its connection died with the process */
	WK_ADOPT_EXPIRED,
	WK_ADOPT_ENDED,		/* LIVE, marked ending (shm_alloc_end_marked): killed after it
				 * recorded the end, before its retire */
};
struct wk_adopt_stats {
	unsigned adopted, torn, stream, expired, failed;
	unsigned waiting;	/* kept by fn for a later try (-EBUSY) */
	unsigned revoked;	/* its user revoked (-EKEYREVOKED): ended, not dropped */
	unsigned removed;	/* its listener removed (WK_ADOPT_LISTENER_GONE): ended, not
				 * dropped */
	unsigned ended;		/* its end begun by the predecessor (WK_ADOPT_ENDED): ended,
				 * not dropped, no second session record */
	unsigned disconnected;	/* named by a disconnect taken before the adoption
				 * (WK_ADOPT_DISCONNECTED): ended, not dropped */
};
/* Adopts one record (owned by the caller's slot). 0 = adopted; -EBUSY = kept by fn for a
 * later try (neither adopted nor released); -EKEYREVOKED = its user is revoked (the scan
 * releases it with end reason SHM_REC_REVOKE, as the revocation sweep ends an allocation:
 * ALLOCS_ENDED, not ALLOCS_DROPPED); WK_ADOPT_LISTENER_GONE = its listener left the
 * configuration (end reason SHM_REC_LISTENER_REMOVED, ended, not dropped); other < 0 =
 * could not be served again (the scan releases and counts it). A LIVE record released
 * ends as an allocation does: ALLOCS_ENDED, its lifetime observed, its session record
 * named after its listener (by its slot); a torn one neither observed nor named. fn may
 * end the record itself before it returns < 0 (LIVE -> DYING, counted as the scan would:
 * worker/adopt.c, adopt_end); the scan then only releases it. A record whose end its
 * predecessor had begun (WK_ADOPT_ENDED) is offered too, only to be ended: fn must refuse
 * it (< 0, not -EBUSY), after taking out what it alone can (the kernel's entries of its
 * channels: adopt_end); the scan then finishes its end with no second session record
 * (the predecessor recorded it), counted as ended (st->ended), not dropped. */
typedef int wk_adopt_fn(void *arg, uint32_t idx, struct shm_alloc *rec);
/* wk_adopt_fn's code for a record whose listener left the configuration: one that no
 * system call of the adoption returns (bind(2) gives -ENODEV for a vanished interface). */
#define WK_ADOPT_LISTENER_GONE (-EIDRM)
/* wk_adopt_fn's code for a record that a disconnect taken before the adoption names
 * (wk_adopt_disc_keep): released with end reason SHM_REC_ADMIN, ended, not dropped. */
#define WK_ADOPT_DISCONNECTED (-ECONNABORTED)

/* Verdict on record idx owned by `slot` whose predecessor is dead. */
enum wk_adopt_verdict wk_adopt_classify(const struct shm *shm, uint32_t idx,
					const struct shm_alloc *rec, uint64_t now_ns);
/* Walks every record owned by `slot` (run once, by the slot's new worker, before it
 * serves any packet): adopts via fn the ones classify says to try, releases the others
 * and those fn refused. Keeps the slot's counters exact: a released record that was
 * LIVE (still counted by the predecessor) gets ALLOCS_ENDED +1 and ALLOCS_ACTIVE -1
 * (slot-wide and its listener's); adopted ones stay counted as they are. Adds
 * ALLOCS_ADOPTED and ALLOCS_DROPPED. *st may be NULL. Returns 0 or -EINVAL. */
int wk_adopt_scan(struct shm *shm, unsigned slot, struct shm_counters *ctr, uint64_t now_ns,
		  wk_adopt_fn *fn, void *arg, struct wk_adopt_stats *st);
/* The same over the records of list (a take-over's, shm_taken) that slot owns: only
 * their pages are touched. */
int wk_adopt_list(struct shm *shm, unsigned slot, struct shm_counters *ctr, uint64_t now_ns,
		  const uint32_t *list, size_t n, wk_adopt_fn *fn, void *arg,
		  struct wk_adopt_stats *st);
/* The worker's use of wk_adopt_scan: needs the snapshot applied (listeners resolved). A
 * record whose relay port a socket still holds (a killed predecessor's, not closed yet)
 * waits in w->adopt_wait. */
void wk_adopt_run(struct worker *w);
/* A disconnect frame d (IPC_DISC_USER or IPC_DISC_INDEX) taken before the adoption ran (a
 * first snapshot rejected, a config discovery service's bootstrap config without
 * listeners): kept, so that wk_adopt_run ends the records it names (wk_disconnect_why)
 * instead of adopting them; forgotten once it ran. A repeat of a kept one is not kept
 * again; at most WK_DISC_PENDING_MAX, further ones logged and lost. IPC_DISC_REVOKED needs none: the adoption checks the list. */
void wk_adopt_disc_keep(struct worker *w, const struct ipc_disconnect *d);
/* worker.c: why disconnect frame arg (struct ipc_disconnect) ends record idx, or NULL (by
 * index: idx and the record's gen both). */
const char *wk_disconnect_why(struct worker *w, const struct shm_alloc *rec, uint32_t idx,
			      const void *arg);
/* Tries the records that wait again when their next try is due (from wk_check_cb, the
 * snapshot current); the last try, 10 s after the adoption, releases what still cannot
 * bind. Cheap when nothing waits. */
void wk_adopt_wait_due(struct worker *w);
/* Each loop iteration's part (wk_check_cb, the snapshot current): wk_adopt_run once the
 * worker has listeners, until a run got its memory (one that did not is tried again at
 * the next iteration, whether the snapshot changed or not); else wk_adopt_wait_due. */
void wk_adopt_due(struct worker *w);
/* Why record idx, which waits for its relay port, ends now (wk_alloc_destroy's `why`
 * text), or NULL: it waits on. */
typedef const char *wk_adopt_wait_why_fn(struct worker *w, const struct shm_alloc *rec,
					 uint32_t idx, const void *arg);
/* Ends the waiting records that fn names a reason for, as wk_alloc_destroy ends an
 * allocation (a revocation, an admin disconnect): their session records, counters and
 * quota, their ports back to the pool. */
void wk_adopt_wait_end(struct worker *w, wk_adopt_wait_why_fn *fn, const void *arg);
/* Forgets the records that wait and stops their timer (a worker that leaves the table,
 * parks or lingers): they stay LIVE for the next process serving the slot. */
void wk_adopt_wait_abandon(struct worker *w);
/* a was attached around record idx: binds its relay ports again, or takes relay_fd and
 * relay2_fd, the sockets a live upgrade handed over for its relayed address and its
 * second family's (an RFC 6062 relay's listening socket, or UDP ones), where >= 0 (always
 * taken); moves its listener
 * gauge when another listener serves it, re-arms its timer. A UDP one is taken unchecked:
 * called during wk_adopt_run only, whose pass after the adoption checks it
 * (wk_relay_verify). On failure a is forgotten (the caller's scan releases the record).
 * Returns 0 or -errno. */
int wk_adopt_relay(struct worker *w, struct wk_alloc *a, uint32_t idx, struct shm_alloc *rec,
		   int relay_fd, int relay2_fd);

/* ---- park.c (stream connections across a live upgrade) ---- */
/* IPC_PARK: hands every parkable TURN-TCP connection to the master (state and socket),
 * its allocation's record left LIVE for the next process; then closes them here. */
void wk_park_all(struct worker *w);
/* Adoption of a TURN-TCP record: only with the connection the heritage hands over for
 * it. Returns 0, or < 0 (the record is released). */
int wk_park_adopt(struct worker *w, uint32_t idx, struct shm_alloc *rec);
/* After the adoption: restores the handed-over connections that carry no allocation,
 * closes those whose allocation could not be adopted. */
void wk_park_rest(struct worker *w);

/* ---- linger.c (TLS calls kept by an old worker after a live upgrade) ---- */
/* After wk_park_all: when w->linger_limit_s > 0 and w holds authenticated TLS calls with
 * UDP-relayed allocations, gives up everything else, tells the master it lingers
 * (IPC_LINGER) and returns true: the caller runs the loop again until the last call ends
 * or the limit passes, then calls wk_linger_end. False: nothing lingers. */
bool wk_linger_begin(struct worker *w);
/* Ends what is still held and marks the status file done. */
void wk_linger_end(struct worker *w);

#endif
