/* Worker core, the bottom of the worker's layers (docs/architecture.md, "Worker layers"):
 * the limits, struct worker and the per-worker state it embeds, listeners, client
 * connections, endpoints, the checked casts, the clocks, and the address and socket
 * helpers (addr.c). It declares no function of a layer above: table.h, transport.h,
 * relay.h, turn.h and lifecycle.h do, each for its own layer. Not a public API: only
 * worker/ includes it (and the harnesses). One struct worker per process, passed
 * explicitly; no globals. */
#ifndef TG_WORKER_WK_H
#define TG_WORKER_WK_H

#include <assert.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>

#include <ev.h>
#include <openssl/ssl.h>

#include "common/ipc.h"
#include "common/ipcq.h"
#include "common/ipcq_ev.h"
#include "common/mono.h"
#include "conf/snapshot.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_bw.h"
#include "shm/shm_lslot.h"
#include "shm/shm_quota.h"
#include "shm/shm_source.h"
#include "stun/stun.h"
#include "worker/portpool.h"
#include "worker/ratelimit.h"
#include "worker/wake.h"
#include "worker/wheel.h"
#include "worker/worker.h"

#define WK_DISC_PENDING_MAX 16u	/* disconnect frames kept for the adoption */

#define WK_MAGIC 0x574b5231u		/* struct worker, checked by wk_checked() */
#define WK_MAX_LISTENERS SHM_MAX_LISTENERS
/* Hints of the records of foreign ConnectionBinds (worker/auth.c): a power of two. */
#define WK_BIND_HINTS 64u
#define WK_BATCH 32		/* datagrams per recvmmsg/sendmmsg */
#define WK_HEADROOM 64		/* room to prepend a Data indication header in place */
#define WK_DGRAM_MAX (65535 + 4)	/* any UDP payload, plus padding room */
#define WK_GSO_SEG_MAX 1400		/* larger messages go one by one (path MTU) */
#define WK_GSO_TOTAL_MAX 65000		/* bytes in one UDP_SEGMENT send */
#define WK_TCP_IN_MAX (STUN_CHANDATA_MAX_LEN + 4)
#define WK_TCP_IN_START 4096		/* first input buffer; grows to WK_TCP_IN_MAX once */
#define WK_TCP_OUT_MAX (256u * 1024u)	/* data beyond this is dropped, like a lossy link */
#define WK_TCP_MAX_CONNS 4096
#define WK_RESV_LIFETIME_MS 30000u
#define WK_HASH_BUCKETS 4096u	/* DTLS associations; the least allocation buckets (pow2) */
/* Stream and DTLS connection bounds (docs/security.md). A TLS/DTLS handshake must finish
 * within WK_HS_TIMEOUT_S and a worker runs at most WK_MAX_HANDSHAKES TLS handshakes and as
 * many DTLS handshakes at once: a new one past that evicts the worker's oldest handshake
 * of its kind (worker/budget.c), as a full listener table (WK_TCP_MAX_CONNS) evicts its
 * oldest unauthenticated connection. Per source address and prefix, the limits.source_*
 * and prefix_* budgets bound the same across workers, and a connection must authenticate
 * within limits.preauth_timeout. Out of descriptors, accepting pauses for
 * WK_ACCEPT_BACKOFF_S (no spin on EMFILE). A connection that carries no allocation is
 * closed after WK_IDLE_TIMEOUT_S without a complete message; a partial message must be
 * completed within WK_FRAME_TIMEOUT_S (slow senders cannot pin a 64 KiB buffer). */
#define WK_HS_TIMEOUT_S 10.0
#define WK_MAX_HANDSHAKES 64u
#define WK_ACCEPT_BACKOFF_S 0.1
#define WK_BUDGET_LOG_EVERY_S 10	/* one log line per source and interval */
#define WK_IDLE_TIMEOUT_S 30.0
#define WK_FRAME_TIMEOUT_S 10.0
#define WK_DTLS_MAX_ASSOCS 4096u
/* Control frames to the master that wait for room (ctlq.c): at most this many bytes, each
 * frame its payload, its key and IPCQ_FRAME_COST: about 13,000 RFC 6062 hand-offs (a
 * struct ipc_handoff each), well over 100,000 fd store frames (a name, twice for an
 * FDSTORE: its key); a frame past that is dropped (logged). */
#define WK_CTLQ_MAX_BYTES (32u * 1024u * 1024u)
struct worker;
struct wk_table_ops;
struct wk_xport_up;
struct wk_tconn;
struct wk_tpeer;
struct wk_tlsb;
struct wk_pipeline;
struct wk_ctg;
struct wk_alloc;

TAILQ_HEAD(wk_tconn_q, wk_tconn);
struct wk_tpeer;
struct wk_tcpr_census;
TAILQ_HEAD(wk_tpeer_q, wk_tpeer);

/* A listening socket inherited from the master (or added by LISTENER_ADD). */
struct wk_listener {
	struct worker *w;
	char name[256];
	enum worker_proto proto;
	int fd;
	int family;			/* of the listening socket */
	ev_io io;
	bool active;			/* false once removed */
	/* Hot copy from the current snapshot; snap_ok false while the snapshot has no
	 * listener of this name (then nothing is served on it). */
	bool snap_ok;
	uint32_t snap_idx;		/* position in the snapshot: for snap_*() look-ups only */
	uint32_t slot;			/* its slot (shm/shm_lslot.h): every per-listener counter,
					 * record and kernel counter; SHM_LSLOT_NONE when none */
	struct snap_listener sl;	/* strings point into the snapshot: do not keep */
	struct sockaddr_storage relay_addr;	/* announced IP (port 0) */
	bool relay_local;		/* announced IP is local: bind relay sockets to it */
	/* Relay address of the other family (dual-stack allocations): the first usable
	 * address of that family on the interface holding relay_addr; family 0 if none. */
	struct sockaddr_storage relay_addr2;
	bool relay2_local;
	/* relay_address_mask: announced instead of relay_addr (family 0: unset). A masked
	 * listener makes no dual-stack allocations (relay_addr2 unset), so that no internal
	 * address of the other family is announced. */
	struct sockaddr_storage mask_addr;
	uint16_t pool_min, pool_max;
	struct portpool pool;
	struct wk_tconn *conns;
	size_t n_conns;
	/* TLS/DTLS (secure: the snapshot says TURN-TLS/TURN-DTLS). tls_ctx is the default
	 * context; established sessions keep their own reference across a rotation. */
	bool secure, secure_known;	/* decided by the first snapshot naming it */
	SSL_CTX *tls_ctx;
	uint8_t tls_digest[32];		/* SHA-256 of the cert and key PEM it was built from */
	SSL *dtls_listen;		/* DTLSv1_listen's stateless object */
	bool gso_off;			/* UDP_SEGMENT refused on this socket */
	bool df_fast;			/* IP_PMTUDISC_DO set by wk_df_fast */
};

/* An IPv4 or IPv6 socket address: 28 bytes where a sockaddr_storage takes 128. An
 * allocation holds four (client, via, two relay addresses): 400 bytes less each. */
union wk_sa {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
};

LIST_HEAD(wk_alloc_list, wk_alloc);

struct wk_hot {
	uint32_t max_perms, max_chans;
	uint32_t alloc_lifetime, max_alloc_lifetime, perm_lifetime, chan_lifetime;
	uint32_t nonce_lifetime, user_quota, total_quota;
	uint32_t auth_fail_prefix, auth_fail_user; /* per minute, 0 = off (worker/authfail.h) */
	struct shm_bw_limits bw;	/* listener_bps 0: each listener's own max_bps */
	uint32_t tcp_conns, tcp_pending, tcp_buf; /* RFC 6062 limits (turn.h) */
	double tcp_connect_timeout;               /* seconds */
	uint32_t src_lim[SHM_SRC_KINDS][2];        /* per address [0], per prefix [1]; 0 off */
	double preauth_timeout;                   /* seconds */
	bool have_alt;
	struct sockaddr_storage alt;
};

/* Where a request came from and where the answer goes. */
struct wk_ep {
	struct wk_listener *l;
	struct wk_tconn *c;		/* TCP connection, or NULL for UDP */
	const struct sockaddr *addr;	/* client transport address */
	socklen_t addr_len;
	/* UDP behind a PROXY protocol v2 proxy: where replies go (the proxy); addr is then
	 * the header's client. NULL: replies go to addr. */
	const struct sockaddr *via;
	socklen_t via_len;
};

struct worker {
	uint32_t magic;
	const struct worker_heritage *h;
	/* The layers above, as registered by wk_tables_init: what the allocation table tells
	 * them (table.h; NULL: the table alone, as its unit tests run it) and what the
	 * transports hand up (transport.h). */
	const struct wk_table_ops *table_ops;
	const struct wk_xport_up *up;
	struct ev_loop *loop;
	struct shm *shm;
	unsigned slot;
	struct shm_counters *ctr;
	ev_prepare prep;
	ev_check check;
	ev_io ctl_io;
	ev_io ho_io;			/* the slot's hand-over channel (handover.c) */
	ev_timer tick;
	ev_timer hb;
	ev_timer rec_flush;		/* while session-record events wait (recflush.c) */
	uint64_t rec_warned;		/* mono ms of its last warning, or its start */
	bool stop_now;			/* stopped by SIGTERM/SIGINT or IPC_STOP_NOW: the
					 * master's short grace */
	ev_signal sigterm, sigint, sigquit;
	bool draining;
	bool parking;			/* IPC_PARK: hand the stream connections over at exit */
	int relay_tx;			/* IPC_RELAY_CHAN: where the relay sockets go, or -1 */
	bool *park_used;		/* h->parked[i] restored (park.c), n_parked entries */
	uint64_t park_start;		/* mono_ms() when the parking began */
	unsigned park_lost;		/* parked sockets restored then closed (park.c) */
	/* Lingering after a live upgrade (linger.c): the limit IPC_PARK carried (0: none),
	 * its deadline (Unix s), the status file, the calls it holds and those the limit
	 * ended. */
	uint32_t linger_limit_s;
	bool lingering;			/* listeners closed: nothing may watch them again */
	int64_t linger_deadline;
	char linger_path[4096 + 32];
	unsigned linger_sessions, linger_ended_limit;
	ev_timer linger_tmo;
	struct wk_dl *dl;		/* DTLS forwarding, lingering workers (dtlslinger.h) */
	int exit_status;
	/* current snapshot: valid only between ev_check and the next ev_prepare */
	const struct snap *snap;
	const struct snap *snap_cached;	/* handle of snap_blob, reused while current */
	const void *snap_blob;
	uint64_t snap_gen;
	uint64_t snap_bad_gen;		/* last generation snap_open rejected, logged once */
	bool snap_seen;
	bool adopted;			/* the predecessor's records were dealt with */
	bool adopt_nomem;		/* a run found no memory (logged once; tried again) */
	/* IPC_DISC_USER and IPC_DISC_INDEX frames taken before the adoption ran: it ends what
	 * they name instead of adopting it (adopt.c: wk_adopt_disc_keep). */
	struct ipc_disconnect disc_pending[WK_DISC_PENDING_MAX];
	unsigned n_disc_pending;
	/* Adoption binds the relay sockets and leaves their buffer sizes and DF mode to an
	 * idle watcher that runs once relaying has resumed (adopt.c: wk_adopt_tune_cb). */
	bool adopting;
	ev_idle tune;
	uint32_t tune_next;		/* next record index the idle watcher looks at */
	/* The adoption's cost in CPU time, logged once libev watches its relay sockets (the
	 * next loop iteration: an epoll_ctl each, after the adoption's line). */
	ev_check adopt_cpu;
	uint32_t adopt_n;
	uint64_t adopt_cpu_us;
	uint64_t adopt_minflt;
	/* Records whose relay port a socket still held at the adoption, tried again
	 * (adopt.c: wk_adopt_wait_due): their indices, the next try, the last one. */
	uint32_t *adopt_wait;
	size_t n_adopt_wait, cap_adopt_wait;
	ev_timer adopt_wait_w;		/* wakes the loop for the next try */
	uint64_t adopt_wait_since_ms, adopt_wait_next_ms, adopt_wait_until_ms;
	unsigned adopt_wait_step_ms;
	unsigned adopt_waited, adopt_wait_lost;	/* adopted, released by the tries */
	unsigned adopt_wait_ended;	/* ended by a revocation or disconnect meanwhile */

	bool leaving;			/* stopping, records left LIVE: its connections stay in
					 * systemd's fd store for the next start (fdstore.c) */
	uint64_t revoke_seq;		/* revocation list last swept against (auth.c) */
	struct wk_hot hot;
	struct wk_rl rl;		/* unauthenticated error responses (worker/unauth.c) */
	uint64_t authfail_log_tat;	/* worker/authfail.c: its log lines' token bucket, ns */
	/* worker/auth.c: where a foreign ConnectionBind's record was found, per (slot,
	 * username) hash, so that one user's repeated binds cost a record copy, not a walk of
	 * the table (an entry is only a hint, checked on use); and the token bucket of the
	 * walks that remain (ns). */
	struct wk_bind_hint {
		uint64_t h;		/* hash of slot and username, 0: empty */
		uint32_t idx;
	} bind_hint[WK_BIND_HINTS];
	uint64_t bind_walk_tat;
	struct wheel wheel;
	struct wk_listener *ls[WK_MAX_LISTENERS];
	size_t n_ls;
	struct tgo_maps off;		/* the kernel fast path's maps, -1 when off */
	/* UDP allocations by (listener, client): a power of two of buckets, at least the
	 * table's capacity (so chains stay short however many allocations one worker holds,
	 * and a lookup costs the same with 0 or 100,000 held), hash_mask = buckets - 1. */
	struct wk_alloc_list *hash;
	uint32_t hash_mask;
	struct wk_alloc_list allocs;
	size_t n_allocs;
	struct wk_alloc **by_idx; /* own allocations by record index (table capacity) */
	struct wk_tpeer **tphash;	/* peer connections by CONNECTION-ID, WK_TCPR_HASH (turn.h) */
	struct wk_tlsb *tlsbs;		/* TLS bridges of data connections (pipe.c) */
	unsigned n_tlsbs;		/* the same, counted (two descriptors each) */
	unsigned n_tconnecting;		/* Connects in progress */
	unsigned n_tpeers;		/* peer connections (SHM_CTR_TCP_PEER_CONNS) */
	struct wk_tpeer_q tpq;		/* the same, oldest first (tcprelay.c) */
	uint64_t tpq_gen;		/* bumped when tpq or its Connects in flight change */
	ev_timer tcpr_resume_tmo;	/* paused TCP relay listeners go on (wk_tcpr_resume) */
	struct wk_tcpr_census *tcensus;	/* who holds how many, when a pool was full */
	uint64_t tpeer_fd_limit;	/* peer connections stop at this many descriptors held
					 * (wk_tcpr_init, wk_tcpr_fds_held) */
	/* TLS/DTLS */
	int tls_set_idx;		/* SSL_CTX ex_data index of the SNI certificate set */
	uint8_t cookie_key[32];		/* DTLS cookie MAC key, per process */
	BIO_METHOD *dbio_meth;
	unsigned n_hs[SHM_SRC_KINDS];	/* TLS/DTLS handshakes in progress (by kind) */
	struct wk_tconn_q unauth;	/* unauthenticated connections, oldest first */
	ev_timer accept_tmo;		/* restarts accepting after an EMFILE pause */
	bool accept_paused;
	unsigned n_dtls;
	struct wk_tconn **dhash;	/* DTLS associations by (listener, client), WK_HASH_BUCKETS */
	uint8_t *plain;			/* DTLS plaintext scratch, WK_DGRAM_MAX bytes */
	uint64_t batch_ns;		/* mono_ns() of the datagram batch being handled, 0 outside */
	bool batch_group;		/* inside a plain UDP listener's batch: datagrams may be
					 * grouped (relay_priv.h: wk_txg, transport.h: wk_ctg) */
	struct wk_pipeline *pl;		/* the relay pipeline's own state (relay_priv.h) */
	struct wk_ctg *ctg;		/* short-circuited datagrams to UDP clients (udp.c) */
	/* I/O scratch (one worker, one thread: shared by all callbacks) */
	uint8_t (*rx)[WK_HEADROOM + WK_DGRAM_MAX];
	uint8_t txbuf[2048];
	/* last, so that the fields above keep their offsets */
	struct wk_wake wake;	/* wake-up coalescing (wake.h) */
	bool wake_on;		/* what the loop was last told: wake.on */
	/* Control frames to the master waiting for room on the control socket (ctlq.c):
	 * the queue, made on first use, its EV_WRITE watcher, active only while some wait,
	 * and the frames dropped when it could not be made (common/ipcq_ev.h). */
	struct ipcq_ev ctlq;
	uint64_t ctlq_until;	/* mono ms: the end of the stop's wait for it, 0 before */
	struct ipcq_fds ctlq_fds; /* its owned descriptors' bound (a quarter of ours) */
};

/* Checked casts back from what libev or the timing wheel hands a callback (Varnish's
 * CHECK_OBJ_NOTNULL): every callback's entry passes its worker (and allocation) through
 * these, so a stale or foreign pointer stops at an assertion (asserts stay on in every
 * build) instead of running on freed memory. */
static inline struct worker *wk_checked(struct worker *w)
{
	assert(w != NULL && w->magic == WK_MAGIC);
	return w;
}

/* Monotonic time for expiry checks on the data path: one clock read per received batch
 * (permissions and channels live for minutes), a fresh one outside a batch. */
static inline uint64_t wk_batch_ns(const struct worker *w)
{
	return w->batch_ns ? w->batch_ns : mono_ns();
}

/* Wall-clock seconds since the epoch: nonces, credential expiry, revocation. */
static inline int64_t wk_unix_now(void)
{
	return (int64_t)time(NULL);
}

/* ---- ctlq.c: frames to the master that must not be lost (common/ipcq.h) ---- */
/* Sets up the queue, none made yet (after w->loop and w->h are there, before any frame
 * goes through it): bounded at WK_CTLQ_MAX_BYTES and a quarter of our descriptors. */
void wk_ctlq_init(struct worker *w);
/* Sends a frame on the control socket, or queues it behind those that wait when the
 * socket is full; the queue is sent in order as the socket has room (an EV_WRITE watcher,
 * active only while frames wait). flags, key and the returns as ipcq_send() (with
 * IPCQ_OWN_FD, fd is the queue's from the call on). Bounded: WK_CTLQ_MAX_BYTES. */
int wk_ctlq_send(struct worker *w, uint16_t type, const void *payload, size_t len, int fd,
		 unsigned flags, const char *key);
/* Takes the waiting frame with key out, unsent; true when there was one. */
bool wk_ctlq_cancel(struct worker *w, const char *key);
/* A stopping worker (after its loop, before IPC_HANDED_OVER, IPC_LINGER or its
 * teardown): sends the frames that wait for room, for at most 500 ms (150 ms once
 * w->stop_now) shared by all the calls of one stop, or until 200 ms pass without a frame
 * sent, and drops the rest (logged by type; a handed-off connection among them closes).
 * The queue comes back if more frames wait later (a lingering worker's loop flushes it).
 * Safe to call again. */
void wk_ctlq_stop(struct worker *w);

/* ---- addr.c ---- */
/* Hash of (listener, client address); a table of 2^k buckets takes its low k bits. */
uint32_t wk_ep_hash(const struct wk_listener *l, const struct sockaddr *sa);
/* shm_addr <-> sockaddr (IPv4 and IPv6; another family gives a zeroed shm_addr / 0). */
void wk_addr_to_shm(const struct sockaddr *sa, struct shm_addr *out);
socklen_t wk_shm_to_addr(const struct shm_addr *in, struct sockaddr_storage *out);
/* Address and port (not scope or flow info). */
bool wk_addr_equal(const struct sockaddr *a, const struct sockaddr *b);
/* sizeof the sockaddr of sa's family (IPv4 unless IPv6). */
socklen_t wk_addr_len(const struct sockaddr *sa);
/* True when this process can bind a UDP socket to ss (port 0 or its port): the address
 * is local, so relay sockets send from it. */
bool wk_addr_bindable(const struct sockaddr_storage *ss);
/* Sets l->relay_addr2 (and relay2_local) to the relay address of the other family for
 * dual-stack allocations, from l->sl, l->mask_addr and l->relay_local: none on a masked
 * listener; the listener's dual_stack_address when configured (bound when local);
 * else, when relay_addr is local, the first non-link-local address of that family on the
 * interface that holds relay_addr itself, or, for an address no interface lists (one of
 * 127.0.0.0/8 beyond 127.0.0.1), on the loopback interface whose network holds it.
 * Another interface whose network merely contains relay_addr is never taken. Family 0
 * when there is none (dual-stack requests then get ADDRESS-ERROR-CODE 440). */
void wk_relay2_find(struct wk_listener *l);
/* Puts an IPv4 UDP socket in IP_PMTUDISC_DO mode; returns true when done (then sends
 * that fail with EMSGSIZE are retried fragmentable, see udp.c: wk_sendto_df). */
bool wk_df_fast(int fd, int family);

#endif
