/* Shared-memory segment shared by the master and its workers: header, worker slots,
 * per-slot counters, cross-process QSBR and the snapshot arena.
 *
 * The allocation table living in the same segment has its own header, shm/shm_alloc.h.
 *
 * Segment, processes and handles
 * ------------------------------
 * The master creates the segment with shm_create() before it forks any worker; the
 * workers inherit both the mapping and the process-local `struct shm` handle (a plain
 * heap object, valid in the child after fork). A tool maps the segment read-only with
 * shm_attach_ro() from an fd it received (SCM_RIGHTS); every offset it follows is
 * validated, so a corrupt or hostile segment yields errors, never a crash.
 * Everything inside the segment refers to everything else by byte offset from the
 * segment base; nothing process-specific (pointers, fds) is ever stored in it.
 *
 * Who writes what
 *   master : header, global epoch, current-snapshot offset, snapshot arena, a slot's
 *            pid/state/incarnation while no worker runs in it (spawn, reap), a slot's
 *            quiescent counter only after waitpid() reaped its worker.
 *   worker : its own slot (quiescent counter, heartbeat, state RUNNING/STOPPING, counters),
 *            allocation records it owns (see shm_alloc.h).
 *   tools  : nothing (read-only mapping).
 *
 * Snapshot lifetime (the QSBR contract, argument in shm/qsbr.c):
 *   worker: before its loop runs: shm_qsbr_online(); in its ev_check watcher
 *   (EV_MAXPRI): shm_qsbr_online() then shm_snap_current(); in its ev_prepare watcher
 *   (EV_MINPRI): shm_qsbr_offline(). A pointer from shm_snap_current() is valid only
 *   until the caller's next shm_qsbr_offline()/shm_qsbr_quiescent(); never keep it.
 *   master: shm_snap_publish() (never blocks), shm_snap_reclaim() from a timer,
 *   shm_slot_reaped() only after waitpid() returned the worker's pid.
 *
 * Errors: functions return 0 or a negative errno; results go to out-parameters.
 * Not thread-safe: each turngate process is single-threaded.
 */
#ifndef TG_SHM_SHM_H
#define TG_SHM_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <urcu/system.h>

struct shm;

/* Limits of the layout (the owner slot is encoded in 8 bits of a record state word). */
#define SHM_MAX_SLOTS 255u
#define SHM_MAX_SNAPS 64u
#define SHM_MIN_SNAPS 2u
#define SHM_MIN_SNAP_SIZE 256u
#define SHM_MAX_SNAP_SIZE (1u << 30)
#define SHM_MAX_ALLOCS (1u << 24)
#define SHM_MAX_LISTENERS 64u
#define SHM_MAX_CLUSTERS 64u
#define SHM_NONCE_KEY_LEN 32u

/* Byte pattern written over a reclaimed snapshot slot, so a reader that (wrongly) still
 * uses it sees garbage that checksums and magic checks catch. */
#define SHM_POISON_BYTE 0xa5

struct shm_config {
	uint32_t n_slots;     /* worker slots, 1..SHM_MAX_SLOTS */
	uint32_t snap_count;  /* snapshot slots, SHM_MIN_SNAPS..SHM_MAX_SNAPS */
	uint32_t snap_size;   /* payload bytes per snapshot slot (largest blob) */
	uint32_t alloc_cap;   /* allocation records, 0..SHM_MAX_ALLOCS */
};

/* ---- segment ------------------------------------------------------------------- */

/* Master, before any fork: creates a sealed memfd (MFD_CLOEXEC, F_SEAL_SHRINK|GROW|SEAL),
 * backs it with fallocate (a memory shortage fails here, not as SIGBUS later), maps it
 * shared and writes the header. `name` labels the memfd (/proc/PID/fd). On success *out
 * owns the fd and the mapping; free with shm_destroy().
 * Returns 0, -EINVAL (config out of range), -ENOMEM/-ENOSPC, or another -errno. */
int shm_create(const struct shm_config *cfg, const char *name, struct shm **out);

/* Any process: maps the segment behind `fd` read-only (the fd is dup'ed, the caller keeps
 * its own) and validates it completely: magic, layout version, layout hash, recorded size
 * equal to the file size, every region offset/size in bounds and non-overlapping.
 * Returns 0, -EBADMSG (not a turngate segment / wrong version / wrong layout hash),
 * -EINVAL (inconsistent geometry), or -errno from fstat/mmap. */
int shm_attach_ro(int fd, struct shm **out);

/* Unmaps and closes. Accepts NULL. A worker may call it on its inherited handle. */
void shm_destroy(struct shm *shm);

/* The memfd, for passing to a tool; owned by the handle (do not close). */
int shm_fd(const struct shm *shm);

/* Geometry of the segment as validated at create/attach time. */
void shm_get_config(const struct shm *shm, struct shm_config *out);
size_t shm_size(const struct shm *shm);

/* Fingerprint of every shared struct's size and field offsets in this build; two binaries
 * may share a segment only if their hashes match (exec upgrade, tools). A take-over of a
 * state file (shm/shm_state.h) checks the allocation records' format only. */
uint64_t shm_layout_hash(void);

/* Master, before any fork: the nonce key stored in the header (what a state file carries
 * across restarts, so clients' nonces stay valid). set returns 0 or -EROFS. */
int shm_nonce_key_set(struct shm *shm, const uint8_t key[SHM_NONCE_KEY_LEN]);
void shm_nonce_key_get(const struct shm *shm, uint8_t key[SHM_NONCE_KEY_LEN]);

/* The state file lock a file-backed segment holds (shm/shm_state.h), or -1. Every process
 * of the daemon keeps it open (workers inherit it), so a successor knows when the last
 * one is gone. Owned by the handle. */
int shm_lock_fd(const struct shm *shm);
/* The state file's own lock (a flock on the segment file, through a description of its
 * own), or -1: kept open by every process that keeps shm_lock_fd(), so that a start which
 * finds NAME.lock removed or replaced still sees that a live daemon writes NAME.state.
 * Owned by the handle; shm_lock_set() lets go of it with the instance lock. */
int shm_file_lock_fd(const struct shm *shm);

/* The indexes of the records a take-over (shm_image_take) copied into this segment, in
 * no order, NULL when none: the first workers adopt from this list instead of scanning
 * the whole table (each record sits on its own page: a scan of 10 000 costs tens of
 * milliseconds of page walks, the bulk of a restart's gap). Owned by the handle. */
const uint32_t *shm_taken(const struct shm *shm, uint32_t *n);
/* The same list's records as they were numbered in the image taken over: entry i of
 * shm_taken() was record shm_taken_from()[i] there (a live upgrade's handed-over
 * connections name their allocation by that number). Owned by the handle. */
const uint32_t *shm_taken_from(const struct shm *shm, uint32_t *n);
/* Master, after the take-over and before the first workers fork: orders both lists by the
 * slot that owns each record (entry i of one still matches entry i of the other), so that
 * shm_taken_slot() hands each worker its own share: 17 workers of a 250,000 table no
 * longer each visit every record and its page. 0 or -ENOMEM (the lists stay as they
 * were; shm_taken_slot then answers with the whole list). */
int shm_taken_group(struct shm *shm);
/* The part of shm_taken() that slot owns (the whole list before shm_taken_group), NULL
 * with *n 0 when the take-over copied none. */
const uint32_t *shm_taken_slot(const struct shm *shm, unsigned slot, uint32_t *n);

/* Master: replaces the lock the handle holds by fd (-1: lets go of it, as a live upgrade
 * does once its workers are gone, so that the new binary may take the table over). The
 * state file's own lock (shm_file_lock_fd) is let go of in both cases. */
void shm_lock_set(struct shm *shm, int fd);

/* ---- worker slots -------------------------------------------------------------- */

enum shm_slot_state {
	SHM_SLOT_EMPTY = 0,  /* never used */
	SHM_SLOT_STARTING,   /* master forked (or is forking) a worker into it */
	SHM_SLOT_RUNNING,    /* worker serves (it sets this itself) */
	SHM_SLOT_STOPPING,   /* worker drains (it sets this itself) */
	SHM_SLOT_DEAD,       /* master reaped the worker */
};

struct shm_slot_info {
	pid_t pid;                   /* 0 when none */
	enum shm_slot_state state;
	uint64_t incarnation;        /* +1 per spawn into the slot */
	uint64_t heartbeat_ns;       /* CLOCK_MONOTONIC of the worker's last heartbeat */
	uint64_t qs;                 /* quiescent counter: 0 offline, else last epoch seen */
};

/* Master, before fork(): the slot must be EMPTY or DEAD. Zeroes the quiescent counter and
 * pid, increments the incarnation, sets STARTING; *incarnation gets the new value
 * (may be NULL). Counters are kept: they are cumulative per slot across respawns.
 * Returns 0, -EINVAL (bad slot), -EBUSY (a worker may still be alive in it), -EROFS. */
int shm_slot_spawning(struct shm *shm, unsigned slot, uint64_t *incarnation);

/* Master, right after fork() in the parent: records the child's pid. */
int shm_slot_set_pid(struct shm *shm, unsigned slot, pid_t pid);

/* Worker, in its own slot: RUNNING or STOPPING only. Returns 0 or -EINVAL. */
int shm_slot_set_state(struct shm *shm, unsigned slot, enum shm_slot_state state);

/* Worker, in its own slot, from a timer: CLOCK_MONOTONIC now. */
int shm_slot_heartbeat(struct shm *shm, unsigned slot, uint64_t now_ns);

/* Master, ONLY after waitpid() has returned this slot's pid (the worker can no longer run
 * any instruction): forces the quiescent counter to 0 (offline) so it never holds up a
 * grace period, sets DEAD and pid 0. Never call it on a timeout: a stalled but live worker
 * may still hold a snapshot pointer (see shm/qsbr.c). */
int shm_slot_reaped(struct shm *shm, unsigned slot);

/* Any process: a relaxed copy of a slot's control fields. */
int shm_slot_read(const struct shm *shm, unsigned slot, struct shm_slot_info *out);

/* ---- counters ------------------------------------------------------------------ */

/* Per-slot counters. Single writer (the slot's worker) with relaxed stores; readers sum
 * over slots. All are monotonic except the *_ACTIVE gauges. Append only before __COUNT
 * (the metrics module names them with shm_ctr_name()). */
enum shm_ctr {
	SHM_CTR_CLIENT_PKTS_IN = 0,
	SHM_CTR_CLIENT_BYTES_IN,
	SHM_CTR_CLIENT_PKTS_OUT,
	SHM_CTR_CLIENT_BYTES_OUT,
	SHM_CTR_PEER_PKTS_IN,
	SHM_CTR_PEER_BYTES_IN,
	SHM_CTR_PEER_PKTS_OUT,
	SHM_CTR_PEER_BYTES_OUT,
	SHM_CTR_ALLOCS_CREATED,
	SHM_CTR_ALLOCS_ENDED,
	SHM_CTR_ALLOCS_ACTIVE,        /* gauge */
	SHM_CTR_ALLOCS_ADOPTED,       /* re-adopted after a worker restart */
	SHM_CTR_ALLOCS_DROPPED,       /* dropped at adoption (torn, TCP, expired) */
	SHM_CTR_AUTH_FAIL_MISSING,    /* no MESSAGE-INTEGRITY / USERNAME: 401 challenge */
	SHM_CTR_AUTH_FAIL_BAD_MAC,
	SHM_CTR_AUTH_FAIL_UNKNOWN_USER,
	SHM_CTR_AUTH_FAIL_EXPIRED,    /* REST credential past its timestamp */
	SHM_CTR_AUTH_FAIL_STALE_NONCE,
	SHM_CTR_AUTH_FAIL_WRONG_REALM,
	SHM_CTR_PERM_DENIED,          /* peer address refused by policy */
	SHM_CTR_QUOTA_USER,           /* per-user allocation quota hit */
	SHM_CTR_QUOTA_TOTAL,          /* server-wide allocation quota / table full */
	SHM_CTR_QUOTA_BANDWIDTH,
	SHM_CTR_ERR_MALFORMED,        /* undecodable STUN/ChannelData */
	SHM_CTR_ERR_UNKNOWN_METHOD,
	SHM_CTR_ERR_ALLOC_MISMATCH,   /* 437 */
	SHM_CTR_ERR_RELAY_BIND,       /* relay socket or port exhausted */
	SHM_CTR_ERR_SEND,             /* sendmsg failures */
	SHM_CTR_ERR_RECV,
	SHM_CTR_ERR_TLS,              /* TLS/DTLS handshake or record errors */
	SHM_CTR_ERR_INTERNAL,
	SHM_CTR_STUN_BINDING,         /* Binding requests answered */
	SHM_CTR_TLS_HANDSHAKES,       /* TLS/DTLS handshakes completed */
	SHM_CTR_DTLS_COOKIES,         /* DTLS ClientHellos answered with a cookie (no state) */
	SHM_CTR_HANDSHAKES_REFUSED,   /* DTLS ClientHellos dropped: a budget full, nothing to
				       * evict (worker/budget.c) */
	SHM_CTR_CONN_TIMEOUTS,        /* connections closed by a handshake/idle/slow deadline */
	SHM_CTR_UNAUTH_DROPPED,       /* answers to unauthenticated UDP requests (errors,
				       * Binding successes) not sent: source prefix over
				       * limits.unauth_rate */
	SHM_CTR_UNAUTH_TRUSTED,       /* such responses sent on a credit of the source address
				       * (it authenticated recently, shm/shm_trust.h) */
	SHM_CTR_UNAUTH_TRUST_NEW,     /* addresses entered into the trust table */
	SHM_CTR_UNAUTH_TRUST_EVICTED, /* of those, entries that displaced a live one */
	SHM_CTR_TCP_PEER_CONNS,       /* gauge, stored absolute by the worker: RFC 6062 peer
				       * connections (connecting, waiting, bound) */
	SHM_CTR_TCP_CONNECT_OK,       /* Connects by result: connected */
	SHM_CTR_TCP_CONNECT_DENIED,   /* 403: the routes refused the peer (no SYN sent) */
	SHM_CTR_TCP_CONNECT_FAILED,   /* 447: refused or failed */
	SHM_CTR_TCP_CONNECT_TIMEOUT,  /* 447: not connected within the connect timeout */
	SHM_CTR_TCP_CONNECT_EXISTS,   /* 446 */
	SHM_CTR_TCP_CONNECT_LIMIT,    /* 508: per-allocation or per-worker limit */
	SHM_CTR_TCP_EVICT_PENDING,    /* a Connect in flight ended (447) to make room for
				       * another user's (worker/tcprelay.c wk_tcpr_evict) */
	SHM_CTR_TCP_EVICT_PEER,       /* a peer connection reset to make room, the same */
	SHM_CTR_SHORT_CIRCUIT,        /* datagrams from one allocation to another of this
				       * instance without a relay socket (worker/shortcut.c) */
	SHM_CTR_SIBLING_OUT,          /* datagrams sent to a sibling instance's relay address
				       * for a masked address in its slice (worker/sibling.c) */
	SHM_CTR_SIBLING_IN,           /* datagrams from a sibling's relay address translated
				       * to the receiving listener's mask (worker/sibling.c) */
	SHM_CTR_SHORT_CIRCUIT_STALE,  /* short-circuited datagrams handed over to the owner
				       * of their receiving allocation, which had ended or
				       * changed meanwhile (worker/handover.c) */
	SHM_CTR_AUTH_FAIL_REVOKED,    /* 403: credentials right, user revoked
				       * (shm/shm_revoke.h) */
	SHM_CTR_AUTH_THROTTLED_PREFIX, /* new-allocation authentications not verified or
				       * not answered: the source prefix was over
				       * limits.auth_fail_prefix (worker/authfail.h) */
	SHM_CTR_AUTH_THROTTLED_USER,  /* the same for the username (limits.auth_fail_user) */
	SHM_CTR_BUDGET_EVICT_ADDR_CONNS, /* oldest unauthenticated connection closed, by
					 * enum shm_src_reason (same order) */
	SHM_CTR_BUDGET_EVICT_PREFIX_CONNS,
	SHM_CTR_BUDGET_EVICT_ADDR_TLS,
	SHM_CTR_BUDGET_EVICT_PREFIX_TLS,
	SHM_CTR_BUDGET_EVICT_ADDR_DTLS,
	SHM_CTR_BUDGET_EVICT_PREFIX_DTLS,
	SHM_CTR_BUDGET_EVICT_WORKER_CONNS,
	SHM_CTR_BUDGET_EVICT_WORKER_TLS,
	SHM_CTR_BUDGET_EVICT_WORKER_DTLS,
	SHM_CTR_BUDGET_REFUSED_ADDR_CONNS, /* new connection closed: nothing of this
					    * worker's to evict (same order) */
	SHM_CTR_BUDGET_REFUSED_PREFIX_CONNS,
	SHM_CTR_BUDGET_REFUSED_ADDR_TLS,
	SHM_CTR_BUDGET_REFUSED_PREFIX_TLS,
	SHM_CTR_BUDGET_REFUSED_ADDR_DTLS,
	SHM_CTR_BUDGET_REFUSED_PREFIX_DTLS,
	SHM_CTR_BUDGET_REFUSED_WORKER_CONNS,
	SHM_CTR_BUDGET_REFUSED_WORKER_TLS,
	SHM_CTR_BUDGET_REFUSED_WORKER_DTLS,
	SHM_CTR_PREAUTH_TIMEOUTS,     /* closed: no authenticated request within
				       * limits.preauth_timeout */
	SHM_CTR_ACCEPT_BACKOFF,       /* accept paused: out of descriptors (EMFILE/ENFILE) */
	SHM_CTR_PP_ACCEPTED,          /* PROXY protocol headers accepted (worker/proxyproto.c) */
	SHM_CTR_PP_REJ_UNTRUSTED,     /* refused, by reason (enum wk_pp_reason order): a */
	SHM_CTR_PP_REJ_MISSING,       /* source outside trusted, no header, a malformed one, */
	SHM_CTR_PP_REJ_MALFORMED,     /* a version not enabled, the header's deadline */
	SHM_CTR_PP_REJ_VERSION,
	SHM_CTR_PP_REJ_TIMEOUT,
	SHM_CTR_STREAMS_HANDED_OVER,  /* sockets of stream calls a live upgrade's new worker
				       * took over (worker/park.c) */
	SHM_CTR_STREAMS_HANDOVER_ENDED, /* ... that could not be handed over or taken back */
	SHM_CTR_STREAMS_LINGER_ENDED, /* TLS calls a lingering old worker ended at the linger
				       * limit (counted by the master, master/linger.c) */
	SHM_CTR_WAKES_COALESCED,      /* loop iterations run while wake-up coalescing was
				       * engaged (limits.wake_coalesce_us, worker/wake.h) */
	SHM_CTR_BIND_WALKED,          /* foreign ConnectionBinds whose record was looked for
				       * by a walk of the table (worker/auth.c) */
	SHM_CTR_BIND_CACHED,          /* ... found at once, in the worker's hints */
	SHM_CTR_BIND_LIMITED,         /* ... not looked for: the walks' bucket was empty,
				       * the listener's credentials decided */
	SHM_CTR__COUNT
};

/* Per-listener counters (listener index 0..SHM_MAX_LISTENERS-1, assigned by conf). */
enum shm_lctr {
	SHM_LCTR_CLIENT_PKTS_IN = 0,
	SHM_LCTR_CLIENT_BYTES_IN,
	SHM_LCTR_CLIENT_PKTS_OUT,
	SHM_LCTR_CLIENT_BYTES_OUT,
	SHM_LCTR_PEER_PKTS_IN,
	SHM_LCTR_PEER_BYTES_IN,
	SHM_LCTR_PEER_PKTS_OUT,
	SHM_LCTR_PEER_BYTES_OUT,
	SHM_LCTR_ALLOCS_CREATED,
	SHM_LCTR_ALLOCS_ACTIVE,       /* gauge */
	SHM_LCTR_CONNS_ACTIVE,        /* gauge: open TCP/TLS connections; a UDP/DTLS listener
				       * counts its socket as one per worker (STUNner) */
	SHM_LCTR_CONNS_TOTAL,         /* connections accepted (UDP: listener sockets opened) */
	SHM_LCTR_PERM_DENIED,         /* peer address refused by policy, by client listener */
	SHM_LCTR__COUNT
};

/* Per-cluster counters (cluster index 0..SHM_MAX_CLUSTERS-1, assigned by conf). */
enum shm_cctr {
	SHM_CCTR_PEER_PKTS_IN = 0,    /* from peers of the cluster */
	SHM_CCTR_PEER_BYTES_IN,
	SHM_CCTR_PEER_PKTS_OUT,       /* to peers of the cluster */
	SHM_CCTR_PEER_BYTES_OUT,
	SHM_CCTR_PERM_GRANTED,
	SHM_CCTR__COUNT
};

/* Allocation lifetime histogram: upper bounds in whole seconds of the finite buckets,
 * ascending; one more bucket (+Inf) follows them. */
#define SHM_LIFE_BUCKETS 6u
/* clang-format off */
#define SHM_LIFE_BOUNDS_INIT { 10, 60, 300, 600, 1800, 3600 }
/* clang-format on */

/* Buckets are NOT cumulative (bucket[i] counts lifetimes in (bound[i-1], bound[i]],
 * bucket[SHM_LIFE_BUCKETS] those above the last bound); the renderer accumulates them.
 * Every field is a plain uint64_t so slot sums stay a word-by-word addition. */
struct shm_lifetime {
	uint64_t bucket[SHM_LIFE_BUCKETS + 1];
	uint64_t sum_s;   /* sum of observed lifetimes, seconds */
	uint64_t count;   /* observations (equals the sum of the buckets) */
};

/* One slot's counter block (lives in the slot, cache-line aligned in the segment). */
struct shm_counters {
	uint64_t v[SHM_CTR__COUNT];
	uint64_t lst[SHM_MAX_LISTENERS][SHM_LCTR__COUNT];
	uint64_t cls[SHM_MAX_CLUSTERS][SHM_CCTR__COUNT];
	struct shm_lifetime life;
};

/* Worker: its own slot's block, for the inline adders below; NULL on a bad slot or a
 * read-only handle. The pointer stays valid for the life of the mapping. */
struct shm_counters *shm_slot_counters(struct shm *shm, unsigned slot);

/* Lower-case snake names ("client_pkts_in"), or NULL for an out-of-range value. */
const char *shm_ctr_name(enum shm_ctr c);
const char *shm_lctr_name(enum shm_lctr c);
const char *shm_cctr_name(enum shm_cctr c);

/* Hot-path adders: single writer, so a relaxed load+store (no lock prefix) suffices; the
 * store is one aligned 64-bit write so readers never see a torn value. Out-of-range
 * indexes are ignored. */
static inline void shm_ctr_add(struct shm_counters *c, enum shm_ctr i, uint64_t v)
{
	if ((unsigned)i < SHM_CTR__COUNT)
		CMM_STORE_SHARED(c->v[i], CMM_LOAD_SHARED(c->v[i]) + v);
}

/* Gauges: v may be "negative" (two's complement), e.g. (uint64_t)-1. */
static inline void shm_lctr_add(struct shm_counters *c, unsigned listener, enum shm_lctr i,
				uint64_t v)
{
	if (listener < SHM_MAX_LISTENERS && (unsigned)i < SHM_LCTR__COUNT)
		CMM_STORE_SHARED(c->lst[listener][i], CMM_LOAD_SHARED(c->lst[listener][i]) + v);
}

static inline void shm_cctr_add(struct shm_counters *c, unsigned cluster, enum shm_cctr i,
				uint64_t v)
{
	if (cluster < SHM_MAX_CLUSTERS && (unsigned)i < SHM_CCTR__COUNT)
		CMM_STORE_SHARED(c->cls[cluster][i], CMM_LOAD_SHARED(c->cls[cluster][i]) + v);
}

/* Upper bound in seconds of finite lifetime bucket i (< SHM_LIFE_BUCKETS); UINT64_MAX for
 * the +Inf bucket or an out-of-range index. */
static inline uint64_t shm_life_bound(unsigned i)
{
	static const uint64_t bounds[SHM_LIFE_BUCKETS] = SHM_LIFE_BOUNDS_INIT;

	return i < SHM_LIFE_BUCKETS ? bounds[i] : UINT64_MAX;
}

/* The lifetime of an allocation created at born_ns (its record's created_ns) that ends at
 * end_ns, both CLOCK_MONOTONIC: whole seconds, rounded to the nearest; 0 if end_ns is not
 * after born_ns. */
static inline uint64_t shm_life_seconds(uint64_t born_ns, uint64_t end_ns)
{
	return end_ns > born_ns ? (end_ns - born_ns + 500000000u) / 1000000000u : 0;
}

/* Records one ended allocation that lived `seconds` into l. Single writer, relaxed like
 * the adders above; a reader may see count and the bucket of one observation out of
 * step, never torn. */
static inline void shm_life_observe(struct shm_lifetime *l, uint64_t seconds)
{
	unsigned i = 0;

	while (i < SHM_LIFE_BUCKETS && seconds > shm_life_bound(i))
		i++;
	CMM_STORE_SHARED(l->bucket[i], CMM_LOAD_SHARED(l->bucket[i]) + 1);
	CMM_STORE_SHARED(l->sum_s, CMM_LOAD_SHARED(l->sum_s) + seconds);
	CMM_STORE_SHARED(l->count, CMM_LOAD_SHARED(l->count) + 1);
}

/* Whoever counts an allocation as ended (SHM_CTR_ALLOCS_ENDED) in block c observes its
 * lifetime there too (shm_life_seconds): the worker that ends it in its own slot, its
 * replacement for a LIVE record it releases, the master for a dead slot's LIVE records
 * (shm_slot_release_all) and for those a take-over ends (shm/image.c). */
static inline void shm_ctr_observe_lifetime(struct shm_counters *c, uint64_t seconds)
{
	shm_life_observe(&c->life, seconds);
}

/* Any process: relaxed copy of one slot's counters. */
int shm_counters_read(const struct shm *shm, unsigned slot, struct shm_counters *out);

/* Master/tools: sum of every slot's counters (dead slots included, so totals stay
 * monotonic across respawns). Returns 0. */
int shm_counters_sum(const struct shm *shm, struct shm_counters *out);

/* dst += src, word by word (every counter, listener and cluster counters included). */
void shm_counters_add(struct shm_counters *dst, const struct shm_counters *src);

/* ---- cross-process QSBR (argument in shm/qsbr.c) -------------------------------- */

/* Worker, own slot: announce "I may read snapshots from now on". Stores the current
 * global epoch in the slot's quiescent counter followed by a full barrier, so the
 * announcement is visible before any snapshot offset is loaded. Call before ev_run()
 * and first thing in the ev_check watcher. Returns 0, -EINVAL, -EROFS. */
int shm_qsbr_online(struct shm *shm, unsigned slot);

/* Worker, own slot: "I hold no snapshot pointer now, and may take a new one after this".
 * Use inside long callbacks (e.g. every 1000 datagrams). Returns 0, -EINVAL, -EROFS. */
int shm_qsbr_quiescent(struct shm *shm, unsigned slot);

/* Worker, own slot: "I hold no snapshot pointer and read none until online again".
 * Call in the ev_prepare watcher before the loop blocks. Returns 0, -EINVAL, -EROFS. */
int shm_qsbr_offline(struct shm *shm, unsigned slot);

/* Master: starts a grace period (bumps the global epoch) and returns its token. Snapshot
 * publishing does this itself; exposed for other deferred frees. Returns 0 or -EROFS. */
int shm_qsbr_start(struct shm *shm, uint64_t *token);

/* Master, non-blocking: 0 when every slot is offline or has passed `token` (memory
 * retired before the token may be freed, a full barrier has been issued), -EAGAIN when
 * some slot still may hold an older reference. */
int shm_qsbr_poll(const struct shm *shm, uint64_t token);

/* Master: the first slot (from *slot on, start with 0) that still blocks `token`.
 * Returns 0 with *slot set, or -ENOENT when none blocks. */
int shm_qsbr_blocker(const struct shm *shm, uint64_t token, unsigned *slot);

/* Master: age of the oldest snapshot still waiting for its grace period, relative to
 * `now_ns` (same clock as given to shm_snap_publish()); 0 when nothing is pending.
 * Combine with shm_qsbr_blocker(shm_snap_oldest_token()) to name a stalled worker. */
int shm_qsbr_oldest_pending_ns(const struct shm *shm, uint64_t now_ns, uint64_t *age_ns);

/* ---- snapshot arena ------------------------------------------------------------- */

/* Master: copies `blob` into a FREE snapshot slot, stores its checksum and `gen`,
 * release-publishes its offset as the current snapshot, then starts a grace period and
 * retires the previously current slot with that token (retire time = now_ns).
 * Never blocks. Returns 0, -EMSGSIZE (len > snap_size), -EBUSY (every slot is current or
 * still waiting for its grace period: run shm_snap_reclaim() and retry later), -EROFS. */
int shm_snap_publish(struct shm *shm, const void *blob, size_t len, uint64_t gen, uint64_t now_ns);

/* Master, from a timer: frees every retired slot whose grace period has completed and
 * poisons its payload with SHM_POISON_BYTE. *n_freed / *n_pending (either may be NULL)
 * get the number freed now and the number still waiting. Returns 0 or -EROFS. */
int shm_snap_reclaim(struct shm *shm, unsigned *n_freed, unsigned *n_pending);

/* Master: token of the oldest retired slot still pending, or 0 when none. */
uint64_t shm_snap_oldest_token(const struct shm *shm);

/* Test/stress hook: frees retired slots WITHOUT waiting for a grace period. Exists only
 * so the stress test can prove its checker catches premature reclamation. Never call in
 * the daemon. */
int shm_snap_reclaim_unsafe(struct shm *shm, unsigned *n_freed);

/* Worker (between shm_qsbr_online and the next offline/quiescent): acquire-loads the
 * current snapshot offset, bounds-checks it and the slot header. blob, len and gen (gen
 * may be NULL) describe the immutable payload. Returns 0, -ENOENT (nothing published yet),
 * -EBADMSG (offset or header corrupt). */
int shm_snap_current(const struct shm *shm, const void **blob, size_t *len, uint64_t *gen);

/* Any process, including a read-only tool that is not a QSBR reader: copies the current
 * snapshot into `buf` (capacity `cap`) and validates it: the segment's publish count must
 * be the same before and after the copy (else -EAGAIN: a publish raced, retry) and the
 * copy must match the stored checksum. Returns 0, -ENOENT, -ENOBUFS (cap too small; *len
 * gets the size), -EAGAIN, -EBADMSG (corrupt segment). */
int shm_snap_copy(const struct shm *shm, void *buf, size_t cap, size_t *len, uint64_t *gen);

/* Checksum used for snapshot payloads (64-bit FNV-1a), exported for tests and tools. */
uint64_t shm_checksum(const void *buf, size_t len);

#endif
