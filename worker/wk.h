/* Worker internals shared by the worker's source files (not a public API: only worker/
 * includes it). One struct worker per process, passed explicitly; no globals. */
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
#include "worker/wheel.h"
#include "worker/worker.h"

#define WK_MAGIC 0x574b5231u		/* struct worker, checked by wk_checked() */
#define WK_MAX_LISTENERS SHM_MAX_LISTENERS
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
/* TCP relaying (RFC 6062, worker/tcprelay.c), bounded by the snapshot's limits (struct
 * wk_hot): a Connect must complete within tcp_connect_timeout seconds (else 447); a
 * connected peer must be bound by a ConnectionBind within WK_TCPR_BIND_TIMEOUT_S (RFC 6062
 * 5.3: 30 s) or it is closed. An allocation holds at most tcp_connections peer
 * connections and a worker runs at most tcp_pending_connects connects at once (508 beyond
 * either). Each direction of a bound connection buffers at most tcp_buffer bytes (fixed
 * for the connection when it starts): a full buffer stops reading the side that fills it
 * until the other side drains it. */
#define WK_TCPR_BIND_TIMEOUT_S 30.0
#define WK_TCPR_HASH 1024u		/* peer connections by CONNECTION-ID (power of two) */
struct worker;
struct wk_tpeer;
struct wk_tlsb;
struct wk_pipe;
struct park_hdr;		/* common/park.h */

/* worker/pipe.c: two stream sockets joined by one bounded buffer per direction (an RFC
 * 6062 peer connection and its client data connection; a TLS bridge). */
struct wk_pipe_ops {
	/* n bytes were read from (write: written to) side. May be NULL. */
	void (*moved)(struct wk_pipe *p, int side, bool write, size_t n);
	/* The pipe is over: both directions ended (reset false), or a side failed (reset
	 * true: the caller closes both with a RST). Must close the pipe (wk_pipe_close) and
	 * may free what holds it: p is not touched after. */
	void (*done)(struct wk_pipe *p, bool reset);
};

struct wk_pipe {
	struct worker *w;		/* NULL until wk_pipe_init */
	const struct wk_pipe_ops *ops;
	int fd[2];
	SSL *ssl[2];			/* TLS side: read and written through it; owned */
	ev_io rio[2], wio[2];
	bool eof[2], shut[2];		/* eof[i]: side i ended; shut[j]: side j shut down */
	size_t len[2], off[2], cap;	/* buf[i]: read from side i, for side 1 - i */
	uint8_t *buf[2];
};
struct wk_cred;
struct wk_alloc;

/* The DTLS BIO's state: where datagrams go, and the one received datagram to hand out. */
struct wk_dbio {
	struct worker *w;
	int fd;				/* the listener's UDP socket (not owned) */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	const uint8_t *rbuf;
	size_t rlen;
};

/* One client connection: TCP or TLS on a stream listener, or a DTLS association on a
 * TURN-DTLS listener's shared UDP socket (dgram: fd is the listener's, no buffers). */
struct wk_tconn {
	struct wk_listener *l;
	struct wk_tconn *next, **pprev;	/* listener's connection list */
	struct wk_tconn *dnext;		/* DTLS association hash chain */
	int fd;
	ev_io rio, wio;
	ev_timer tmo;			/* handshake, idle and slow-sender deadlines */
	SSL *ssl;			/* TLS/DTLS; NULL for plain TCP */
	bool dgram;
	bool hs_done;			/* handshake finished (always true without ssl) */
	double born, last_msg, partial_since;	/* ev_now() times; partial_since 0 = none */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	uint8_t *in;			/* in_cap bytes: WK_TCP_IN_START, or WK_TCP_IN_MAX once
					 * a message did not fit */
	size_t in_len, in_cap;
	uint8_t *out;			/* grows up to WK_TCP_OUT_MAX */
	size_t out_len, out_off, out_cap;
	struct wk_alloc *alloc;		/* the allocation this connection carries, or NULL */
	struct wk_tpeer *bind_to;	/* ConnectionBind answered: becomes its data connection */
	unsigned handoff_slot;		/* 1 + the slot whose CONNECTION-ID a ConnectionBind
					 * named: the connection goes there; 0 none */
	bool dead;			/* send failed: closed by the next read callback */
	bool pp_wait;			/* a PROXY header is due before TLS or STUN; peer is
					 * the proxy's address until it came (proxyproto.c) */
	/* Budgets (worker/budget.c): what c is counted as, per source address and prefix
	 * (src_b: their buckets), and its place in the worker's unauthenticated list. */
	bool authed;			/* sent an authenticated request */
	bool resync;			/* taken back after a crash: the first frame is sought
					 * (wk_fdstore_resync) */
	bool fdstored;			/* in systemd's fd store (fdstore.c), named by these */
	uint32_t fds_rec, fds_flags;
	bool cnt_conn;			/* counted in SHM_SRC_CONNS */
	int8_t cnt_hs;			/* SHM_SRC_TLS_HS/DTLS_HS it is counted in, or -1 */
	uint32_t src_b[2];		/* [0] address, [1] prefix */
	TAILQ_ENTRY(wk_tconn) uq;	/* w->unauth, oldest first, while cnt_conn */
};
TAILQ_HEAD(wk_tconn_q, wk_tconn);

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
	uint32_t tcp_conns, tcp_pending, tcp_buf; /* RFC 6062 limits (above) */
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

/* A run of datagrams to one address with one size (the last may be shorter), sent as one
 * sendmsg with UDP_SEGMENT instead of one sendto each (udp.c). */
struct wk_gso_run {
	struct sockaddr_storage to;
	socklen_t to_len;
	size_t seg, total;
	unsigned n;
	bool closed;			/* the last datagram was shorter: nothing more joins */
	struct iovec iov[WK_BATCH];
};

/* Client -> peer datagrams of one received UDP batch, grouped (udp.c): consecutive
 * datagrams of one allocation to one peer make a run. The iovecs point into the batch's rx
 * slots, so the run is sent before the next recvmmsg and before any STUN message is
 * handled (which may refresh an allocation away). */
struct wk_txg {
	bool on;			/* grouping allowed: inside a plain UDP listener batch */
	struct wk_alloc *a;
	struct wk_relay *r;
	uint32_t cl;			/* the peer's cluster, for its counters */
	bool sib;			/* the peer is a sibling's relay address */
	struct wk_gso_run run;
};

/* Short-circuited datagrams to UDP clients of one batch, grouped (udp.c, shortcut.c): as
 * wk_txg, consecutive messages to one client through one listener socket make a run. The
 * messages are copied into the group's own slots (they are framed in a scratch buffer), so
 * only the order matters: the run leaves wherever wk_txg's does (wk_txg_flush sends both). */
struct wk_ctg {
	struct wk_listener *l;
	struct wk_gso_run run;
	uint8_t slot[WK_BATCH][WK_GSO_SEG_MAX];
};

/* An IP of this instance's relays (a relay address or a mask), for the short circuit. */
struct wk_sc_ip {
	uint8_t family;
	uint8_t addr[16];
};
#define WK_SC_MAX_IPS (3 * WK_MAX_LISTENERS)

/* One of this instance's own sockets (self.c): an address (canonical, conf_addr_canon)
 * or any local address, with a port range. relay: a relay range reached through the
 * short circuit or a sibling's slice, never otherwise. */
struct wk_self_sock {
	uint8_t family;
	bool any, relay;
	uint16_t port_min, port_max;
	uint8_t addr[16];
};
#define WK_SELF_MAX (3 * WK_MAX_LISTENERS + SNAP_HTTP_PORTS)
#define WK_SELF_MAX_LOCAL 64

struct wk_self {
	struct wk_self_sock socks[WK_SELF_MAX];
	unsigned n;
	struct wk_sc_ip local[WK_SELF_MAX_LOCAL]; /* interface addresses, canonical */
	unsigned n_local;
	uint64_t local_ns;                        /* when read; 0: read at the next need */
};

/* A sibling instance's relay address and its slice of the relay ports (sibling.c). */
struct wk_sib {
	uint8_t family;
	uint8_t addr[16];
	uint16_t port_min, port_max;
};
#define WK_MAX_SIBS 256

struct worker {
	uint32_t magic;
	const struct worker_heritage *h;
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
	ev_signal sigterm, sigint, sigquit;
	bool draining;
	bool parking;			/* IPC_PARK: hand the stream connections over at exit */
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
	/* Adoption binds the relay sockets and leaves their buffer sizes and DF mode to an
	 * idle watcher that runs once relaying has resumed (adopt.c: wk_adopt_tune_cb). */
	bool adopting;
	ev_idle tune;
	uint32_t tune_next;		/* next record index the idle watcher looks at */

	bool leaving;			/* stopping, records left LIVE: its connections stay in
					 * systemd's fd store for the next start (fdstore.c) */
	uint64_t revoke_seq;		/* revocation list last swept against (auth.c) */
	struct wk_hot hot;
	struct wk_rl rl;		/* unauthenticated error responses (worker/unauth.c) */
	uint64_t authfail_log_tat;	/* worker/authfail.c: its log lines' token bucket, ns */
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
	struct wk_sc_ip sc_ips[WK_SC_MAX_IPS]; /* distinct relay IPs and masks (shortcut.c) */
	unsigned n_sc_ips;
	struct wk_self self; /* this instance's own sockets, never a peer (self.c) */
	struct wk_sc_ip masks[WK_MAX_LISTENERS]; /* distinct masks (sibling.c) */
	unsigned n_masks; /* also: some listener masks (the inbound mapping's guard) */
	struct wk_sib sibs[WK_MAX_SIBS]; /* the snapshot's sibling addresses (sibling.c) */
	unsigned n_sibs;
	uint8_t *sc_buf; /* WK_HEADROOM + WK_DGRAM_MAX: a short-circuited datagram */
	struct wk_tpeer **tphash;	/* peer connections by CONNECTION-ID, WK_TCPR_HASH */
	struct wk_tlsb *tlsbs;		/* TLS bridges of data connections (pipe.c) */
	unsigned n_tconnecting;		/* Connects in progress */
	unsigned n_tpeers;		/* peer connections (SHM_CTR_TCP_PEER_CONNS) */
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
	struct wk_txg txg;
	struct wk_ctg ctg;
	/* I/O scratch (one worker, one thread: shared by all callbacks) */
	uint8_t (*rx)[WK_HEADROOM + WK_DGRAM_MAX];
	uint8_t txbuf[2048];
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

/* ---- worker.c ---- */
void wk_listener_close(struct worker *w, struct wk_listener *l);
/* For harnesses that call wk_turn_input without the loop (fuzz/fuzz_dispatch.c): makes s
 * (an opened snapshot the caller keeps alive) current as the ev_check watcher does for a
 * new generation: hot values copied, listeners re-resolved, relay pools (re)built; no shm
 * tracking, no adoption. */
void wk_snap_use(struct worker *w, const struct snap *s);

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

/* ---- tls.c ---- */
int wk_tls_init(struct worker *w);
int wk_dtls_meth_init(struct worker *w);
/* Builds the listener's default context (and one per further certificate, chosen by
 * SNI) from the snapshot's PEM: every private key is paired with the certificate it
 * matches, the other certificates are the chains. Returns 0 or -EINVAL/-ENOMEM. */
int wk_tls_ctx_build(struct worker *w, const struct snap_listener *sl, bool dtls, SSL_CTX **out);
/* A server SSL whose BIO sends datagrams through fd (the listener's socket). */
SSL *wk_dtls_ssl_new(struct worker *w, SSL_CTX *ctx, int fd);
struct wk_dbio *wk_dtls_dbio(SSL *ssl);
/* "TLSv1.3 TLS_AES_128_GCM_SHA256 alpn=stun.turn", for logs. */
void wk_tls_describe(SSL *ssl, char *buf, size_t len);

/* ---- dtls.c ---- */
int wk_dtls_start(struct worker *w, struct wk_listener *l);
/* Unhashes a closing association (called by wk_tconn_close). */
void wk_dtls_unhash(struct worker *w, struct wk_tconn *c);

/* ---- udp.c ---- */
/* One datagram from a client on a listener socket (buf has WK_HEADROOM before it). */
typedef void wk_dgram_fn(struct worker *w, struct wk_listener *l, const struct sockaddr *from,
			 socklen_t fromlen, uint8_t *buf, size_t len);
/* Reads a UDP/DTLS listener socket (8 batches at most per wakeup), counts every datagram,
 * drops truncated ones and all while the listener has no snapshot, and hands the others to
 * fn with the batch's clock (wk_batch_ns) set. */
void wk_listener_drain(struct worker *w, struct wk_listener *l, wk_dgram_fn *fn);
/* recvmmsg of up to WK_BATCH datagrams from fd into the worker's rx slots (payload at
 * WK_HEADROOM, cap bytes each), addresses into from[]; counts hard errors. Returns the
 * number received, 0 or < 0 when none. */
int wk_recv_batch(struct worker *w, int fd, size_t cap, struct mmsghdr *msgs, struct iovec *iov,
		  struct sockaddr_storage *from);
int wk_udp_start(struct worker *w, struct wk_listener *l);
/* Sends an admitted client -> peer datagram from relay socket r (cl: the peer's cluster):
 * joins the current batch's group when it can (struct wk_txg), else goes at once. sib:
 * peer is a sibling's relay address (wk_sib_target), counted as such once sent. */
void wk_peer_send(struct worker *w, struct wk_alloc *a, struct wk_relay *r,
		  const struct sockaddr *peer, uint32_t cl, const uint8_t *data, size_t len,
		  bool sib);
/* One message to a UDP client from listener l's socket (DF as wk_df_fast says), counted
 * by wk_client_sent once sent, as a send error otherwise. */
void wk_udp_send(struct worker *w, struct wk_listener *l, const struct sockaddr *to,
		 socklen_t to_len, const uint8_t *buf, size_t len);
/* Frames a peer datagram for the client in place: payload (len bytes, WK_HEADROOM free
 * before it, 3 after) becomes ChannelData of channel chan (padded to 4 bytes when stream)
 * or, chan 0, a Data indication from peer. Returns the message start, or NULL. */
uint8_t *wk_frame_peer(uint8_t *payload, size_t len, const struct sockaddr *peer, uint16_t chan,
		       bool stream, size_t *out_len);
/* Sends the pending client -> peer group and the pending short-circuited group to a
 * client, if any. */
void wk_txg_flush(struct worker *w);
/* A message for the UDP client `to` of plain listener l (short circuit): joins the batch's
 * group to that client when it can (struct wk_ctg), else leaves at once (wk_udp_send). */
void wk_ctg_send(struct worker *w, struct wk_listener *l, const struct sockaddr *to,
		 socklen_t to_len, const uint8_t *buf, size_t len);
void wk_relay_cb(struct ev_loop *loop, ev_io *io, int revents);
/* sendto; on EMSGSIZE from a wk_df_fast socket, once more fragmentable. */
ssize_t wk_sendto_df(int fd, bool df_fast, const void *buf, size_t len, const struct sockaddr *to,
		     socklen_t to_len);
/* One sendmsg of n messages of seg bytes each (the last may be shorter), cut into
 * datagrams by the kernel (UDP_SEGMENT). */
ssize_t wk_send_segments(int fd, const struct sockaddr *to, socklen_t to_len, struct iovec *iov,
			 unsigned n, size_t seg);
/* After a failed UDP_SEGMENT send: true when the socket will never take one. */
bool wk_gso_unsupported(int err);
/* Sends run g (not empty) on fd as one UDP_SEGMENT message when it holds several and the
 * socket takes them; true when it went so, else the caller sends them one by one. */
bool wk_run_send(struct wk_gso_run *g, int fd, bool *gso_off);
/* Sends the pending short-circuited group to a UDP client, if any. */
void wk_ctg_flush(struct worker *w);

/* ---- tcp.c ---- */
int wk_tcp_start(struct worker *w, struct wk_listener *l);
/* The worker's stream state before any listener: the unauthenticated list, the accept
 * back-off timer, the pre-authentication deadline until a snapshot sets it. */
void wk_tcp_init(struct worker *w);
/* Links a new connection into its listener, counts it and starts its deadline timer. */
void wk_tconn_link(struct worker *w, struct wk_listener *l, struct wk_tconn *c);
/* Handshake step: 1 done, 0 in progress, -1 failed (the caller closes). */
int wk_tconn_handshake(struct worker *w, struct wk_tconn *c);
void wk_tconn_close(struct worker *w, struct wk_tconn *c);
/* A TURN-TCP connection another worker handed over (IPC_TCP_HANDOFF): served on the
 * listener of that name as if accepted here, data (the bytes read so far) handled first.
 * client: NULL for a plain TCP listener's connection, else the client's address of a
 * TURN-TLS connection that fd is the bridged plain end of. Takes fd (closed when there is
 * no such listener). */
void wk_tcp_adopt_conn(struct worker *w, const char *listener, int fd, const uint8_t *data,
		       size_t len, const struct sockaddr *client);
/* Restarts accepting on stream listeners paused by the connection/handshake bounds. */
void wk_tcp_resume(struct worker *w);
/* Live upgrade (park.c): a connection the predecessor parked, restored on l with the
 * bytes its buffers held; takes fd on success only. NULL: bad lengths or no memory. */
struct wk_tconn *wk_tcp_restore(struct worker *w, struct wk_listener *l, int fd,
				const struct sockaddr *peer, socklen_t peer_len, const uint8_t *in,
				size_t in_len, const uint8_t *out, size_t out_len, bool authed);
/* c can be parked: plain TCP, no handshake, PROXY header or RFC 6062 step half done. */
bool wk_tconn_parkable(const struct wk_tconn *c);
/* Handles the complete frames a restored connection holds; false: it was closed. */
bool wk_tconn_restart(struct worker *w, struct wk_tconn *c);
/* Queues a whole frame (or one DTLS record) for c, or drops it (bounded output) and counts
 * a send error; what is queued is counted as sent (wk_client_sent). */
void wk_tconn_send(struct worker *w, struct wk_tconn *c, const uint8_t *buf, size_t len);

/* ---- pipe.c ---- */
/* One non-blocking read or write on a stream socket, through ssl when it is not NULL
 * (TURN-TCP/TLS connections, pipes): > 0 bytes, 0 end of stream (recv: a FIN or
 * close_notify), -EAGAIN to wait (recv: *want_write set, when not NULL, if the TLS session
 * must write first), other < 0 an error. */
ssize_t wk_stream_recv(int fd, SSL *ssl, uint8_t *b, size_t n, bool *want_write);
ssize_t wk_stream_send(int fd, SSL *ssl, const uint8_t *b, size_t n);
/* An idle pipe of two cap-byte buffers (bufs: 2 * cap bytes, the caller's). */
void wk_pipe_init(struct wk_pipe *p, struct worker *w, const struct wk_pipe_ops *ops,
		  uint8_t *bufs, size_t cap);
/* Side i is fd (ssl: a TLS session over it, or NULL), both owned by the pipe from now;
 * pre: len bytes (<= cap) already read from it, to be written to the other side. */
void wk_pipe_side(struct wk_pipe *p, int i, int fd, SSL *ssl, const uint8_t *pre, size_t len);
/* Starts relaying (ops->done may run before it returns). */
void wk_pipe_start(struct wk_pipe *p);
/* Stops watching and closes both sides (abort: with a RST), TLS sessions freed. */
void wk_pipe_close(struct wk_pipe *p, bool abort_conn);
/* A data connection that came over TURN-TLS (fd, its session ssl; out: the plaintext
 * still owed to the client): bridged to one end of a new socket pair. Returns the other
 * end (plain, for the relay or a handover), or -1 (fd and ssl are then the caller's). */
int wk_tlsb_new(struct worker *w, int fd, SSL *ssl, const uint8_t *out, size_t out_len);
void wk_tlsb_close_all(struct worker *w);

/* ---- tcprelay.c (RFC 6062) ---- */
/* Connect: a is a TCP allocation, peer passed its checks; starts a non-blocking connect
 * from a's relayed address and answers req (success with CONNECTION-ID, or 447) when it
 * ends. Returns 0 (the answer comes later) or an error code to answer now: 446 (a
 * connection to peer exists), 508 (limits, no memory, no socket). */
int wk_tcpr_connect(struct worker *w, struct wk_alloc *a, const struct sockaddr *peer,
		    const struct stun_msg *req, bool sha256);
/* The relay socket of a TCP allocation is listening: accepts peers that have a permission
 * and that the routes admit, announcing each with a ConnectionAttempt; refuses others
 * with a RST. */
void wk_tcpr_accept_cb(struct ev_loop *loop, ev_io *io, int revents);
/* The connected peer connection id, waiting for its ConnectionBind, owned by this worker
 * and by an allocation of user (user_len bytes), or NULL. */
struct wk_tpeer *wk_tcpr_find(struct worker *w, uint32_t id, const char *user, size_t user_len);
/* The slot whose worker owns CONNECTION-ID id (its low byte, see wk_tpeer_new_id). */
static inline unsigned wk_tcpr_slot(uint32_t id)
{
	return id & 0xffu;
}
/* The allocation tp belongs to. */
struct wk_alloc *wk_tcpr_alloc(const struct wk_tpeer *tp);
/* A claimed tp whose data connection could not be attached: reset and freed. */
void wk_tcpr_drop(struct worker *w, struct wk_tpeer *tp);
/* ConnectionBind answered on c: after the frame, c's socket becomes tp's client side. */
void wk_tcpr_claim(struct worker *w, struct wk_tpeer *tp, struct wk_tconn *c);
/* Live upgrade (park.c): hands a's peer connections waiting for their bind, and bound
 * pairs of plain sockets, to the master (wk_park_send) and frees them here without a
 * FIN; the others end with a. Returns the number of sockets handed over. */
unsigned wk_tcpr_park(struct worker *w, struct wk_alloc *a);
/* Restores a parked peer connection of a (fd; data_fd its bound data connection, or -1)
 * from its header h and the bytes after it. Takes the fds on success only. Returns 0 or
 * -errno. */
int wk_tcpr_restore(struct worker *w, struct wk_alloc *a, const struct park_hdr *h,
		    const uint8_t *body, int fd, int data_fd);
/* Takes fd over as tp's client data connection; pre (pre_len bytes: the client's bytes
 * after the ConnectionBind) goes to the peer, out (out_len bytes: the response not yet
 * written) to the client first. Closes fd on failure. */
void wk_tcpr_attach(struct worker *w, struct wk_tpeer *tp, int fd, const uint8_t *pre,
		    size_t pre_len, const uint8_t *out, size_t out_len);
/* A new snapshot: resets every peer connection of the worker whose peer the listener's
 * routes (IP and port) no longer admit, as the UDP path's per-packet check drops its
 * datagrams. */
void wk_tcpr_recheck_all(struct worker *w);
/* Closes every peer connection of a (the allocation ends). */
void wk_tcpr_alloc_end(struct worker *w, struct wk_alloc *a);

/* ---- shortcut.c (relay to relay inside the instance) ---- */
/* After a snapshot is applied: the set of this instance's relay IPs and masks, and every
 * listener's name key. */
void wk_sc_refresh(struct worker *w);
/* Whether peer's IP is one of this instance's relay addresses or masks. */
bool wk_sc_own_ip(const struct worker *w, const struct sockaddr *peer);
/* Whether peer may be (now or later) one of this instance's relays: a mask, any port; a
 * relay address with a port in a listener's relay port range. Such a peer is never
 * offloaded (the short circuit, or the sibling translation, decides in user space); a
 * peer that merely shares the relay's IP (a media server on the same host) is. */
bool wk_sc_maybe_relay(const struct worker *w, const struct sockaddr *peer);
struct shm_relay_target;
/* The live UDP allocation of this instance that relay address `to` (a relay IP or a mask,
 * with its port) names, read for the sender's announced address `from` (permission,
 * channel) at now_ns, and *tl its listener here. 0, or -ENOENT (none). */
int wk_sc_target(struct worker *w, const struct shm_addr *to, const struct shm_addr *from,
		 uint64_t now_ns, bool want_user, struct shm_relay_target *t,
		 struct wk_listener **tl);
/* Peer -> client on a relay socket of listener l: when from is the relay address of a live
 * allocation of this instance whose listener masks it, *out = the announced (masked)
 * address, which the permission check and the Data indication then use (what
 * the short circuit sends through the relay sockets, for a client it cannot reach without a
 * hand-over channel, arrives so); when from is a sibling's relay address, l's mask with
 * from's port (wk_sib_from).
 * Returns true when set. */
bool wk_sc_announced_from(struct worker *w, const struct wk_listener *l,
			  const struct sockaddr *from, struct sockaddr_storage *out);

/* The owner's half of a hand-over (handover.c): a datagram for record idx (claim
 * generation gen, relay port `port`) from the sender's announced address `from`, that
 * another worker found by the short circuit and could not deliver. Re-read under the
 * record's seqlock: when it is no longer LIVE, no longer holds the port, is of another
 * generation or owned by another slot, or its client is not this worker's, the datagram
 * is dropped and counted (SHM_CTR_SHORT_CIRCUIT_STALE); else the receiving half runs as
 * for this worker's own short circuit (routes, permission, bandwidth, counters, framing,
 * the send to its client). */
void wk_sc_accept(struct worker *w, uint32_t idx, uint64_t gen, uint16_t port,
		  const struct shm_addr *from, const uint8_t *data, size_t len);

/* ---- handover.c (the short circuit's datagrams for another worker's client) ---- */
/* Starts reading the slot's hand-over channel (no-op without one). */
void wk_ho_start(struct worker *w);
/* Sends data (len bytes, at most WK_DGRAM_MAX - 4), from the sender's announced address
 * `from` to relay port `port` of target t, to t's owner worker without blocking. Returns
 * 0 (sent: the owner decides the rest), -ENOTCONN (no channel to t->owner: none in the
 * heritage, t->owner out of range or this worker), or -errno of the send (-EAGAIN: the
 * channel is full). */
int wk_ho_send(struct worker *w, const struct shm_relay_target *t, uint16_t port,
	       const struct shm_addr *from, const uint8_t *data, size_t len);

/* ---- sibling.c (masked addresses of other instances, admin.siblings) ---- */
/* After a snapshot is applied (and wk_sc_refresh): the siblings' addresses and slices, and
 * the set of this instance's masks. */
void wk_sib_refresh(struct worker *w);
/* Whether a is one of this instance's masks. */
bool wk_sib_is_mask(const struct worker *w, const struct shm_addr *a);
/* Whether port lies in the relay port range of one of this instance's listeners. */
bool wk_sib_own_port(const struct worker *w, uint16_t port);
/* Whether peer is one of this instance's masks with a port in no slice: neither a
 * listener's relay port range nor a sibling's (of peer's family). Such a peer is refused
 * as the routes refuse one (wk_peer_allowed, ChannelBind). */
bool wk_sib_refused(const struct worker *w, const struct sockaddr *peer);
/* Whether peer is a sibling's relay address with a port in its slice. */
bool wk_sib_addr(const struct worker *w, const struct sockaddr *peer);
/* Peer -> client on a relay socket of listener l: when from is a sibling's relay address
 * with a port in its slice and l masks from's family, *out = l's mask with from's port,
 * counted (before any check) as received from a sibling. Returns true when set. */
bool wk_sib_from(struct worker *w, const struct wk_listener *l, const struct sockaddr *from,
		 struct sockaddr_storage *out);

/* ---- client.c ---- */
/* Sends a response/indication/ChannelData to the client behind ep (stream: queued on its
 * connection; UDP: wk_udp_send). */
void wk_send_client(struct worker *w, const struct wk_ep *ep, const uint8_t *buf, size_t len);
/* Counts n messages of bytes in all that reached the client side of listener l (sent, or
 * queued on a stream): globally and, while l is in the snapshot, per listener. The only
 * place that counts client output; called after the send succeeded. */
void wk_client_sent(struct worker *w, const struct wk_listener *l, unsigned n, size_t bytes);

/* ---- self.c (this instance's own sockets, never a peer) ---- */
/* After a snapshot is applied (and wk_sc_refresh, wk_sib_refresh): the listeners' sockets
 * as bound, their public addresses and ports, the HTTP ports, and the relay ranges whose
 * sockets bind the wildcard. */
void wk_self_refresh(struct worker *w);
/* Whether peer (address and port) is one of this instance's own sockets, other than a
 * relay address or mask of ours (the short circuit's) or a sibling's slice. */
bool wk_self_refused(struct worker *w, const struct sockaddr *peer);

/* ---- peer.c ---- */
/* The one count of a refused peer: perm_denied, globally and at l while it is listed.
 * Returns -EACCES. */
int wk_peer_deny(struct worker *w, const struct wk_listener *l);
/* The one peer decision, nothing counted: with check_port, one of this instance's own
 * sockets (wk_self_refused) or a mask's port in no slice (wk_sib_refused) is refused
 * whatever the routes say; then the listener's allowlist in the current snapshot
 * (snap_peer_match: the special ranges, the routes; proto is the peer's transport,
 * CONF_CPROTO_UDP for datagrams and UDP allocations, CONF_CPROTO_TCP for RFC 6062
 * connections and the permissions of TCP allocations; check_port: the admitting cluster's
 * port range too). No snapshot, or a listener without an entry, refuses. Returns 0 and
 * *cl (may be NULL), or -EACCES. The kernel fast path's entries (offload.c) ask this too. */
int wk_peer_match(struct worker *w, const struct wk_listener *l, const struct sockaddr *peer,
		  enum conf_cluster_proto proto, bool check_port, uint32_t *cl);
/* wk_peer_match, and a refusal counted (perm_denied, and at the listener while it is
 * listed). Returns 0 and *cl, or -EACCES. */
int wk_peer_allowed(struct worker *w, const struct wk_listener *l, const struct sockaddr *peer,
		    enum conf_cluster_proto proto, bool check_port, uint32_t *cl);
/* ChannelBind's form: IP and port, as a packet's (a channel names the port every
 * ChannelData on it goes to: a port outside the admitting cluster's range, a masked
 * address that names no instance, or one of this instance's own sockets, is refused). */
int wk_peer_bind_allowed(struct worker *w, const struct wk_listener *l, const struct sockaddr *peer,
			 enum conf_cluster_proto proto, uint32_t *cl);

/* ---- turn.c ---- */
/* Error response to req (signed when cred has a key; unsigned ones are rate limited). */
void wk_reply_error(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req, int code,
		    const char *reason, const struct wk_cred *cred);
/* Success response to req with no attributes (signed as cred says). */
void wk_reply_ok(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req,
		 const struct wk_cred *cred, bool with_lifetime, uint32_t lifetime);
/* Sets TCP_NODELAY on a TCP socket of ours (client connections, RFC 6062 peer
 * connections): TURN messages are small and answered, so Nagle with the peer's delayed
 * ACK would hold each one ~40 ms. Errors are ignored (an AF_UNIX socket has no Nagle). */
void wk_sock_nodelay(int fd);
/* The channel numbers clients may use (limits.channel_numbers): RFC 5766's wide range
 * unless the current snapshot says strict RFC 8656 (no snapshot: RFC 5766). */
enum stun_chan_range wk_chan_range(const struct worker *w);
/* Handles one datagram or frame from a client (STUN or ChannelData). */
void wk_turn_input(struct worker *w, const struct wk_ep *ep, uint8_t *buf, size_t len);

/* ---- worker.c ---- */
/* The worker's private tables (receive buffers, allocation hash sized from the table's
 * capacity) and its fast path maps from the heritage: w->h and w->shm set first. Freed
 * with the worker. Returns 0 or -ENOMEM. */
int wk_tables_init(struct worker *w);

/* ---- offload.c ---- */
/* Rewrites the kernel fast path entries of a's channels from its record (after anything
 * that changes them or their eligibility); no-op when the fast path is off. */
void wk_offload_sync(struct worker *w, struct wk_alloc *a);
/* Removes the entry of channel slot i (before the slot is overwritten or cleared). */
void wk_offload_drop(struct worker *w, struct wk_alloc *a, unsigned i);
/* Removes every entry of a (the allocation ends). */
void wk_offload_drop_all(struct worker *w, struct wk_alloc *a);
/* After a's record is retired: the kernel short circuit's entries of a's channels, both
 * ways (a's own and its partners' back to a), go. */
void wk_offload_sc_forget(struct worker *w, struct wk_alloc *a);
/* wk_offload_sync of every allocation of the worker (a new snapshot). */
void wk_offload_sync_all(struct worker *w);
/* A reload changed the fast path (IPC_OFFLOAD_MAP/OFF): which 0 takes fd as the client ->
 * peer map, 1 as the peer -> client map and then enters every channel in the new maps;
 * 2 turns the fast path off. Takes fd. */
void wk_offload_map(struct worker *w, unsigned which, int fd);

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

/* ---- adopt.c ---- */
/* Re-adoption of a dead predecessor's records (same slot), see docs/architecture.md. */
enum wk_adopt_verdict {
	WK_ADOPT_TRY = 0,	/* LIVE, consistent, UDP, not expired: try to serve it again */
	WK_ADOPT_TORN,		/* CLAIMED/DYING or odd seqlock: killed mid-update */
	WK_ADOPT_STREAM,	/* TCP/TLS/DTLS: its connection died with the process */
	WK_ADOPT_EXPIRED,
};
struct wk_adopt_stats {
	unsigned adopted, torn, stream, expired, failed;
};
/* Adopts one record (owned by the caller's slot). 0 = adopted; < 0 = could not be served
 * again (the scan releases and counts it). */
typedef int wk_adopt_fn(void *arg, uint32_t idx, struct shm_alloc *rec);

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
/* The worker's use of wk_adopt_scan: needs the snapshot applied (listeners resolved). */
void wk_adopt_run(struct worker *w);
/* a was attached around record idx: binds its relay ports again (an RFC 6062 relay:
 * relay_fd, the listening socket a live upgrade handed over, when >= 0; always taken),
 * moves its listener
 * gauge when another listener serves it, re-arms its timer. On failure a is forgotten
 * (the caller's scan releases the record). Returns 0 or -errno. */
int wk_adopt_relay(struct worker *w, struct wk_alloc *a, uint32_t idx, struct shm_alloc *rec,
		   int relay_fd);

/* ---- park.c (stream connections across a live upgrade) ---- */
/* IPC_PARK: hands every parkable TURN-TCP connection to the master (state and socket),
 * its allocation's record left LIVE for the next process; then closes them here. */
void wk_park_all(struct worker *w);
/* Sends one parked connection's state (h completed: magic, version, slot, lengths) and
 * socket fd to the master, within what is left of the worker's parking time. */
int wk_park_send(struct worker *w, struct park_hdr *h, const uint8_t *in, size_t in_len,
		 const uint8_t *out, size_t out_len, int fd);
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

/* ---- fdstore.c (systemd's file descriptor store, common/fdname.h) ---- */
/* Puts c, which carries a published allocation, in the unit's fd store through the master
 * (when it keeps one: w->h->fdstore). Plain TURN-TCP only: a TLS connection cannot be
 * taken back after a crash. Safe to call again. */
void wk_fdstore_conn(struct worker *w, struct wk_tconn *c);
/* Takes c out of the store, if it is in (before its socket closes). A connection that
 * ends here (not handed over, not left for the next process) is shut down too: the
 * store's copy must not keep it open. */
void wk_fdstore_conn_end(struct worker *w, struct wk_tconn *c);
/* Puts a bound RFC 6062 pair of record rec (peer connection peer_fd, data connection
 * data_fd, CONNECTION-ID id) in the store. Returns true when it was sent. */
bool wk_fdstore_pair(struct worker *w, uint32_t rec, uint32_t id, int peer_fd, int data_fd);
/* Takes that pair out of the store (peer_fd, data_fd: shut down as in
 * wk_fdstore_conn_end; -1 when not open). */
void wk_fdstore_pair_end(struct worker *w, uint32_t rec, uint32_t id, int peer_fd, int data_fd);
/* A connection taken back after a crash (c->resync) starts where the kernel's buffer
 * stands, maybe inside a frame the dead worker had read part of. Skips the input up to
 * the first position that starts a frame this connection can carry: a STUN message (top
 * two bits 0, the magic cookie, a length that is a multiple of 4) or a ChannelData on one
 * of its allocation's bound channels; clears c->resync once found. Returns false while
 * more input is needed to decide (what was skipped so far is gone). */
bool wk_fdstore_resync(struct worker *w, struct wk_tconn *c);
/* Whether socket fd, taken back after a crash (client: a TURN-TCP connection, whose peer
 * must be the record's client; else a peer connection, whose local address must be the
 * record's relay address), belongs to
 * record rec: a name left in the store by an older table must not give one client's
 * socket to another's allocation. */
bool wk_fdstore_owns(int fd, bool client, const struct shm_alloc *rec);

/* ---- budget.c (per-source budgets, docs/security.md) ---- */
/* The budgets' buckets of sa: [0] its address, [1] its prefix (/24, /64). */
void wk_budget_keys(const struct worker *w, const struct sockaddr *sa, uint32_t b[2]);
/* Before a new connection (kind SHM_SRC_CONNS) or handshake (TLS/DTLS) from sa is made:
 * while a budget of sa's address or prefix is full, evicts this worker's oldest
 * unauthenticated connection that counts in it, as long as this worker holds at least its
 * fair share (budget / live workers); below it, admits over the budget. Returns 0
 * (admitted), or -EBUSY when a share to shed has no connection left to evict (a hash
 * collision's count; the caller drops the newcomer; counted). */
int wk_budget_admit(struct worker *w, const struct sockaddr *sa, enum shm_src_kind k);
/* When a per-worker table is full: evicts this worker's oldest unauthenticated connection
 * of kind k (conns: on listener l when l is not NULL). Returns 0, or -EBUSY when there is
 * none (the caller refuses; counted as refused for reason r). */
int wk_budget_make_room(struct worker *w, struct wk_listener *l, enum shm_src_kind k,
			enum shm_src_reason r);
/* c was linked (wk_tconn_link): counts it, and its handshake when it has one. */
void wk_budget_attach(struct worker *w, struct wk_tconn *c);
/* c's handshake finished (counted no more as one). */
void wk_budget_hs_done(struct worker *w, struct wk_tconn *c);
/* c sent an authenticated request: out of the budgets and the pre-auth deadline. NULL ok. */
void wk_budget_authed(struct worker *w, struct wk_tconn *c);
/* c is being closed: uncounts whatever it still counts in. */
void wk_budget_detach(struct worker *w, struct wk_tconn *c);
/* From the snapshot's limits. */
void wk_budget_configure(struct worker *w, const struct snap_limits *lim);

/* ---- proxyproto.c ---- */
/* Why a PROXY protocol listener refused a connection or datagram (counters
 * SHM_CTR_PP_REJ_* in this order). */
enum wk_pp_reason {
	WK_PP_UNTRUSTED = 0,
	WK_PP_MISSING,
	WK_PP_MALFORMED,
	WK_PP_VERSION,
	WK_PP_TIMEOUT
};
/* l's snapshot enables proxy_protocol. */
bool wk_pp_enabled(const struct wk_listener *l);
/* Where datagrams to a's UDP client go (*len its length): a's proxy on a
 * proxy_protocol listener (NULL while unknown: dropped), else the client itself. */
const struct sockaddr *wk_alloc_dest(const struct wk_alloc *a, socklen_t *len);
/* A datagram of listener l (proxy_protocol) from from: its header checked and stripped,
 * handed to the TURN dispatcher as from the header's client, replies to from. */
void wk_pp_udp_input(struct worker *w, struct wk_listener *l, const struct sockaddr *from,
		     uint8_t *buf, size_t len);
/* Counts (and logs at debug) a refusal of from on l for reason r. */
void wk_pp_reject(struct worker *w, const struct wk_listener *l, const struct sockaddr *from,
		  enum wk_pp_reason r);
/* Whether from is in l's trusted CIDRs; false is counted (the caller closes or drops). */
bool wk_pp_admit_source(struct worker *w, const struct wk_listener *l,
			const struct sockaddr *from);
/* c (pp_wait) reads its header: 1 done (c->peer is the client, its budgets rekeyed; the
 * socket's next byte is TLS or STUN), 0 wait for more, -1 close c (counted). */
int wk_pp_stream(struct worker *w, struct wk_tconn *c);
/* A datagram from from on l: its v2 header's length (the payload follows), with the
 * client's address in *client (from itself for LOCAL); -1 drop it (counted). */
int wk_pp_dgram(struct worker *w, const struct wk_listener *l, const struct sockaddr *from,
		const uint8_t *buf, size_t len, struct sockaddr_storage *client,
		socklen_t *client_len);

/* ---- auth.c ---- */
enum wk_auth_result {
	WK_AUTH_OK = 0,
	WK_AUTH_REPLIED
};
/* Authenticates req for a new allocation (a == NULL) or an existing one. On success
 * writes the key (and its algorithm, username, credential expiry) into *cred and
 * returns WK_AUTH_OK; otherwise the error response was sent. */
struct wk_cred {
	char user[SHM_ALLOC_USER_MAX + 1];
	size_t user_len;
	uint8_t key[SHM_ALLOC_KEY_MAX];
	size_t key_len;
	uint8_t key_alg;		/* enum shm_key_alg */
	bool sha256;			/* request used MESSAGE-INTEGRITY-SHA256 */
	int64_t cred_expiry;
};
enum wk_auth_result wk_auth_check(struct worker *w, const struct wk_ep *ep,
				  const struct stun_msg *req, const struct wk_alloc *a,
				  struct wk_cred *cred);
/* Appends MESSAGE-INTEGRITY(-SHA256) as the request used, then FINGERPRINT if asked. */
void wk_auth_sign(struct stun_builder *b, const struct wk_cred *cred, bool fingerprint);
/* Ends this worker's allocations whose username the revocation list now refuses, when the
 * list changed since the last sweep (shm/shm_revoke.h). The master also ends them at
 * once by index when it revokes; this catches an Allocate that raced it and allocations
 * adopted after a restart. Called every second (the heartbeat). */
void wk_revoke_sweep(struct worker *w);

/* ---- udp.c: GSO runs (inline: every grouped datagram passes here) ---- */
/* Whether run g can take a datagram of len bytes to `to`. */
static inline bool wk_run_takes(const struct wk_gso_run *g, const struct sockaddr *to, size_t len)
{
	return !g->closed && len <= g->seg && g->n < WK_BATCH &&
	       g->total + len <= WK_GSO_TOTAL_MAX &&
	       wk_addr_equal(to, (const struct sockaddr *)&g->to);
}

/* Appends data (len bytes, which stay where they are until the run is sent), starting the
 * run when it is empty. */
static inline void wk_run_add(struct wk_gso_run *g, const struct sockaddr *to, socklen_t to_len,
		       const void *data, size_t len)
{
	if (!g->n) {
		memcpy(&g->to, to, to_len);
		g->to_len = to_len;
		g->seg = len;
		g->total = 0;
		g->closed = false;
	}
	g->iov[g->n].iov_base = (void *)data;
	g->iov[g->n].iov_len = len;
	g->n++;
	g->total += len;
	if (len < g->seg)
		g->closed = true;
}

/* The layers above, until each file includes its own. */
#include "worker/table.h"

#endif
