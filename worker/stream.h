/* Worker stream transports, part of the transports' layer (transport.h): TCP and TLS
 * connections and the life of every client connection (tcp.c), stream pipes and TLS
 * bridges (pipe.c), and systemd's fd store for TURN-TCP connections (fdstore.c). Worker
 * process only. */
#ifndef TG_WORKER_STREAM_H
#define TG_WORKER_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <ev.h>
#include <openssl/ssl.h>

#include "shm/shm_alloc.h"
#include "worker/table.h"
#include "worker/transport.h"
#include "worker/wk.h"

struct ipc_handoff;
struct wk_pipe;

/* worker/pipe.c: two stream sockets joined by one bounded buffer per direction (an RFC
 * 6062 peer connection and its client data connection; a TLS bridge). */
struct wk_pipe_ops {
	/* n bytes were read from (write: written to) side. May be NULL. */
	void (*moved)(struct wk_pipe *p, int side, bool write, size_t n);
	/* The pipe is over: both directions ended (reset false), or a side failed (reset
	 * true: the caller closes both with a RST). Must close the pipe (wk_pipe_close) and
	 * may free what holds it: p is not touched after. */
	void (*done)(struct wk_pipe *p, bool reset);
	/* Side j was shut down (the other side's end passed on): true ends the pipe now
	 * (done(p, false)) instead of waiting for side j's own end. May be NULL. */
	bool (*shut)(struct wk_pipe *p, int j);
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

/* ---- tcp.c ---- */
int wk_tcp_start(struct worker *w, struct wk_listener *l);
/* c carries a from now (a NULL: no more): the table's hook (table.h: carry). */
void wk_tconn_carry(struct wk_tconn *c, struct wk_alloc *a);
/* Adoption after a live upgrade: wk_alloc_attach_ep for c, the handed-over connection of
 * a TURN-TCP allocation's record idx. Returns 0, -EEXIST (c carries one), -ENOMEM. */
int wk_alloc_attach_conn(struct worker *w, struct wk_tconn *c, uint32_t idx,
			 struct shm_alloc *rec, struct wk_alloc **out);
/* The worker's stream state before any listener: the unauthenticated list, the accept
 * back-off timer, the pre-authentication deadline until a snapshot sets it. */
void wk_tcp_init(struct worker *w);
/* Links a new connection into its listener, counts it and starts its deadline timer. */
void wk_tconn_link(struct worker *w, struct wk_listener *l, struct wk_tconn *c);
/* Handshake step: 1 done, 0 in progress, -1 failed (the caller closes). */
int wk_tconn_handshake(struct worker *w, struct wk_tconn *c);
void wk_tconn_close(struct worker *w, struct wk_tconn *c);
/* A TURN-TCP connection another worker handed over (IPC_TCP_HANDOFF, h): fd (a plain TCP
 * listener's connection, or with h->tls the bridged plain end of a TURN-TLS one) served
 * on the listener of that name as if accepted here, with h->client's address, deadlines
 * counted from h->age_ms ago, and h->data (the bytes read so far) handled first. Takes fd
 * (dropped as wk_tcp_drop_handoff does when there is no such active listener or memory is
 * short; and, defensively, when the data does not fit, which ipc_recv's bound,
 * IPC_HANDOFF_DATA_MAX, rules out). */
void wk_tcp_adopt_conn(struct worker *w, const struct ipc_handoff *h, int fd);
/* Drops a handed-over connection (IPC_TCP_HANDOFF's descriptor, taken) that is not served:
 * shut down, then closed, so that its client sees the end although systemd's fd store may
 * hold a copy (a plain close would leave the client waiting). why, the reason, is logged
 * at debug level. fd -1: nothing. */
void wk_tcp_drop_handoff(struct worker *w, int fd, const char *why);
/* Restarts accepting on stream listeners paused by the connection/handshake bounds. */
void wk_tcp_resume(struct worker *w);
/* Out of descriptors or memory with nothing to end for room: accepting pauses for
 * WK_ACCEPT_BACKOFF_S (counted) rather than a level-triggered watcher spinning. */
void wk_tcp_pause(struct worker *w);
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

/* Sets TCP_NODELAY on a TCP socket of ours (client connections, RFC 6062 peer
 * connections): TURN messages are small and answered, so Nagle with the peer's delayed
 * ACK would hold each one ~40 ms. Errors are ignored (an AF_UNIX socket has no Nagle). */
void wk_sock_nodelay(int fd);

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
/* The kernel buffers of a TCP socket of an RFC 6062 pair (a peer connection, a data
 * connection at its ConnectionBind, the TCP side of a TLS bridge) whose pipe buffers
 * are cap bytes: receive and send bounded at the larger of WK_TCP_SNDBUF and cap (an
 * operator who raised limits.tcp_buffer keeps the rate), where autotuning grew a send
 * buffer to net.ipv4.tcp_wmem's and a receive buffer to tcp_rmem's maximum while the
 * pipe stopped reading. The plain options, capped at net.core.[rw]mem_max
 * (wk_sockbuf_stream, sockbuf.h). An AF_UNIX socket (a bridge's end) keeps its fixed
 * buffers. Errors are ignored. */
void wk_pipe_sockbuf(int fd, size_t cap);
/* Starts relaying (ops->done may run before it returns). */
void wk_pipe_start(struct wk_pipe *p);
/* Stops watching and closes both sides (abort: with a RST), TLS sessions freed. */
void wk_pipe_close(struct wk_pipe *p, bool abort_conn);
/* A data connection that came over TURN-TLS (fd, its session ssl; out: the plaintext
 * still owed to the client): bridged to one end of a new socket pair. Returns the other
 * end (plain, for the relay or a handover), or -1 (fd and ssl are then the caller's). */
int wk_tlsb_new(struct worker *w, int fd, SSL *ssl, const uint8_t *out, size_t out_len);
void wk_tlsb_close_all(struct worker *w);

/* ---- fdstore.c (systemd's file descriptor store, common/fdname.h) ---- */
/* Puts c, which carries a published allocation, in the unit's fd store through the master
 * (when it keeps one: w->h->fdstore). Plain TURN-TCP only: a TLS connection cannot be
 * taken back after a crash. Safe to call again. */
void wk_fdstore_conn(struct worker *w, struct wk_tconn *c);
/* Takes c out of the store, if it is in (before its socket closes). A connection that
 * ends here (not handed over, not left for the next process) and was ever in the store
 * is shut down too, even when its allocation left it earlier (wk_fdstore_conn_detach):
 * the store's copy, kept until the master reads the FDUNSTORE, must not keep it open. */
void wk_fdstore_conn_end(struct worker *w, struct wk_tconn *c);
/* c's allocation ends, c stays open (a disconnect, a revocation, an expiry: c may
 * allocate again or idle out): its name, which names the allocation's record, leaves the
 * store now, not when c closes; an allocation c makes later is stored under its own. No
 * shutdown: c's close does that later (wk_fdstore_conn_end). */
void wk_fdstore_conn_detach(struct worker *w, struct wk_tconn *c);
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

#endif
