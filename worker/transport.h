/* Worker transports: the client-facing sockets and their framing. UDP listeners (udp.c),
 * TCP and TLS streams (tcp.c), DTLS associations on a UDP listener (dtls.c), TLS contexts
 * (tls.c), the PROXY protocol in front of any of them (proxyproto.c), stream pipes and TLS
 * bridges (pipe.c), per-source budgets of connections and handshakes (budget.c), systemd's
 * fd store (fdstore.c), and the one output toward clients (client.c); stream.h declares
 * those of tcp.c, pipe.c and fdstore.c. Above the
 * allocation table (table.h), below the relay pipeline and the TURN methods: what a
 * transport receives goes up through the one handler the worker registered (struct
 * wk_xport_up), never by a call to an upper layer's function. Worker process only. */
#ifndef TG_WORKER_TRANSPORT_H
#define TG_WORKER_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <ev.h>
#include <openssl/ssl.h>

#include "shm/shm_alloc.h"
#include "shm/shm_source.h"
#include "worker/table.h"
#include "worker/wk.h"

struct park_hdr;		/* common/park.h */
struct wk_tpeer;

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
	bool fds_ever;			/* was in it: the store may hold a copy still (its
					 * FDUNSTORE waits), so its end shuts it down */
	uint32_t fds_rec, fds_flags;
	bool cnt_conn;			/* counted in SHM_SRC_CONNS */
	int8_t cnt_hs;			/* SHM_SRC_TLS_HS/DTLS_HS it is counted in, or -1 */
	uint32_t src_b[2];		/* [0] address, [1] prefix */
	TAILQ_ENTRY(wk_tconn) uq;	/* w->unauth, oldest first, while cnt_conn */
};
/* A run of datagrams to one address with one size (the last may be shorter), sent as one
 * sendmsg with UDP_SEGMENT instead of one sendto each (udp.c, relaysock.c). */
struct wk_gso_run {
	struct sockaddr_storage to;
	socklen_t to_len;
	size_t seg, total;
	unsigned n;
	bool closed;			/* the last datagram was shorter: nothing more joins */
	struct iovec iov[WK_BATCH];
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

/* What the transports hand up (Knot's transports over one handler core): registered once
 * by the worker (wk_tables_init, worker.c) in w->up, so that no transport calls a layer
 * above it by name. */
struct wk_xport_up {
	/* One STUN message or ChannelData from the client behind ep (buf: WK_HEADROOM free
	 * before it; the TURN methods' wk_turn_input). */
	void (*input)(struct worker *w, const struct wk_ep *ep, uint8_t *buf, size_t len);
	/* A UDP listener's batch was handled: what it grouped leaves before the next
	 * recvmmsg reuses the receive slots (wk_txg_flush). */
	void (*batch_end)(struct worker *w);
	/* After a ConnectionBind's response, the connection's socket fd (with pre: the
	 * client's bytes after the request, out: the response not yet written) becomes tp's
	 * data connection (wk_tcpr_attach); or fd could not be had (wk_tcpr_drop). */
	void (*bound)(struct worker *w, struct wk_tpeer *tp, int fd, const uint8_t *pre,
		      size_t pre_len, const uint8_t *out, size_t out_len);
	void (*bind_failed)(struct worker *w, struct wk_tpeer *tp);
};

/* The DTLS BIO's state: where datagrams go, and the one received datagram to hand out. */
struct wk_dbio {
	struct worker *w;
	int fd;				/* the listener's UDP socket (not owned) */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	const uint8_t *rbuf;
	size_t rlen;
};

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
/* One message to a UDP client from listener l's socket (DF as wk_df_fast says), counted
 * by wk_client_sent once sent, as a send error otherwise. */
void wk_udp_send(struct worker *w, struct wk_listener *l, const struct sockaddr *to,
		 socklen_t to_len, const uint8_t *buf, size_t len);
/* A message for the UDP client `to` of plain listener l (short circuit): joins the batch's
 * group to that client when it can (struct wk_ctg), else leaves at once (wk_udp_send). */
void wk_ctg_send(struct worker *w, struct wk_listener *l, const struct sockaddr *to,
		 socklen_t to_len, const uint8_t *buf, size_t len);
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

/* ---- client.c ---- */
/* Sends a response/indication/ChannelData to the client behind ep (stream: queued on its
 * connection; UDP: wk_udp_send). */
void wk_send_client(struct worker *w, const struct wk_ep *ep, const uint8_t *buf, size_t len);
/* Counts n messages of bytes in all that reached the client side of listener l (sent, or
 * queued on a stream): globally and, while l is in the snapshot, per listener. The only
 * place that counts client output; called after the send succeeded. */
void wk_client_sent(struct worker *w, const struct wk_listener *l, unsigned n, size_t bytes);

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

#endif
