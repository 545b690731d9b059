/* Worker stream I/O: accepting TURN-TCP and TURN-TLS clients, TLS handshakes, stream
 * framing of STUN and ChannelData, bounded per-connection buffers and deadlines (shared
 * with DTLS associations). An allocation made over a connection ends with it. */
#include "config.h"

#include "worker/sockbuf.h"
#include "worker/stream.h"
#include "worker/transport.h"
#include "worker/wk.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>

#include "common/grow.h"
#include "common/ipc.h"
#include "common/ipcq.h"
#include "common/log.h"
#include "stun/stun_frame.h"

/* Publishes the listener's open-connection count as this slot's absolute gauge value
 * (not a delta): a gauge kept as +1/-1 would drift when a connection outlives its
 * listener's presence in the snapshot or the worker dies with connections open; the
 * renderer sums it over live slots only. */
static void wk_tcp_count_conns(struct worker *w, const struct wk_listener *l)
{
	if (l->slot < SHM_MAX_LISTENERS)
		CMM_STORE_SHARED(w->ctr->lst[l->slot][SHM_LCTR_CONNS_ACTIVE],
				 (uint64_t)l->n_conns);
}

void wk_tconn_carry(struct wk_tconn *c, struct wk_alloc *a)
{
	if (a == NULL)
		wk_fdstore_conn_detach(c->l->w, c);
	c->alloc = a;
}

int wk_alloc_attach_conn(struct worker *w, struct wk_tconn *c, uint32_t idx,
			 struct shm_alloc *rec, struct wk_alloc **out)
{
	struct wk_ep ep = {.l = c->l, .c = c, .addr = (struct sockaddr *)&c->peer,
			   .addr_len = c->peer_len};

	if (c->alloc)
		return -EEXIST;
	return wk_alloc_attach_ep(w, &ep, idx, rec, out);
}

void wk_tconn_close(struct worker *w, struct wk_tconn *c)
{
	wk_fdstore_conn_end(w, c);
	if (c->alloc)
		wk_alloc_destroy(w, c->alloc,
				 c->dgram ? "DTLS association closed" : "TCP connection closed");
	ev_io_stop(w->loop, &c->rio);
	ev_io_stop(w->loop, &c->wio);
	ev_timer_stop(w->loop, &c->tmo);
	wk_budget_detach(w, c);
	if (c->ssl) {
		if (c->hs_done && !c->dead)
			SSL_shutdown(c->ssl);	/* close_notify, best effort, never waits */
		SSL_free(c->ssl);
		ERR_clear_error();
	}
	if (c->dgram) {
		wk_dtls_unhash(w, c);
		w->n_dtls--;
	} else if (c->fd >= 0) {
		close(c->fd);
	}
	*c->pprev = c->next;
	if (c->next)
		c->next->pprev = c->pprev;
	c->l->n_conns--;
	wk_tcp_count_conns(w, c->l);
	free(c->in);
	free(c->out);
	free(c);
	wk_tcp_resume(w);
}

/* Writes from the output buffer: > 0 bytes written, -EAGAIN to wait, other < 0 fatal. */
static ssize_t wk_tconn_write(struct wk_tconn *c, const uint8_t *buf, size_t len)
{
	return wk_stream_send(c->fd, c->ssl, buf, len);
}

/* Marks c dead; it is closed by the read side, never here: callers may still use c. */
static void wk_tconn_kill(struct worker *w, struct wk_tconn *c)
{
	c->dead = true;
	c->out_off = c->out_len = 0;
	ev_io_stop(w->loop, &c->wio);
	ev_feed_event(w->loop, &c->rio, EV_READ);
}

static void wk_tconn_flush(struct worker *w, struct wk_tconn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = wk_tconn_write(c, c->out + c->out_off, c->out_len - c->out_off);

		if (n == -EAGAIN)
			break;
		if (n < 0) {
			wk_tconn_kill(w, c);
			return;
		}
		c->out_off += (size_t)n;
	}
	if (c->out_off == c->out_len) {
		c->out_off = c->out_len = 0;
		ev_io_stop(w->loop, &c->wio);
	} else {
		ev_io_start(w->loop, &c->wio);
	}
}

/* Queues a whole frame or nothing: a frame that does not fit in the bounded output
 * buffer is dropped (data) so a slow reader cannot grow our memory. */
void wk_tconn_send(struct worker *w, struct wk_tconn *c, const uint8_t *buf, size_t len)
{
	size_t need;

	if (c->dead || !c->hs_done)
		return;
	if (c->dgram) {
		/* One message, one record, one datagram. */
		if (SSL_write(c->ssl, buf, (int)len) <= 0) {
			ERR_clear_error();
			shm_ctr_add(w->ctr, SHM_CTR_ERR_SEND, 1);
			return;
		}
		wk_client_sent(w, c->l, 1, len);
		return;
	}
	if (c->out_off && c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	need = c->out_len + len;
	if (need > WK_TCP_OUT_MAX) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_SEND, 1);
		return;
	}
	if (GROW_ARRAY(&c->out, &c->out_cap, need, 4096) < 0)
		return;
	memcpy(c->out + c->out_len, buf, len);
	c->out_len += len;
	wk_client_sent(w, c->l, 1, len);
	if (!ev_is_active(&c->wio))
		wk_tconn_flush(w, c);
}

int wk_tconn_handshake(struct worker *w, struct wk_tconn *c)
{
	int r = SSL_do_handshake(c->ssl);
	char desc[160];

	if (r == 1) {
		c->hs_done = true;
		wk_budget_hs_done(w, c);
		c->last_msg = ev_now(w->loop);
		shm_ctr_add(w->ctr, SHM_CTR_TLS_HANDSHAKES, 1);
		wk_tcp_resume(w);
		if (log_enabled("worker", LOG_LVL_DEBUG)) {
			wk_tls_describe(c->ssl, desc, sizeof(desc));
			log_debug("worker", "listener %s: handshake done: %s", c->l->name, desc);
		}
		return 1;
	}
	switch (SSL_get_error(c->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		if (!c->dgram)
			ev_io_stop(w->loop, &c->wio);
		return 0;
	case SSL_ERROR_WANT_WRITE:
		if (!c->dgram)
			ev_io_start(w->loop, &c->wio);
		return 0;
	default:
		shm_ctr_add(w->ctr, SHM_CTR_ERR_TLS, 1);
		log_debug("worker", "listener %s: handshake failed: %s", c->l->name,
			  ERR_reason_error_string(ERR_peek_last_error())
				  ? ERR_reason_error_string(ERR_peek_last_error())
				  : "closed");
		ERR_clear_error();
		return -1;
	}
}

static void wk_tconn_wcb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_tconn *c = io->data;
	struct worker *w = wk_checked(c->l->w);

	if (!c->hs_done) {
		if (wk_tconn_handshake(w, c) < 0)
			wk_tconn_close(w, c);
		return;
	}
	wk_tconn_flush(w, c);
	if (c->dead)
		wk_tconn_close(w, c);
}

/* A TLS connection's plain stand-in: its session goes to a TLS bridge (pipe.c) with the
 * plaintext still owed to the client (from out_from in the output buffer); c keeps no
 * socket. Returns the bridge's plain end, or -1 (c unchanged). */
static int wk_tconn_bridge(struct worker *w, struct wk_tconn *c, size_t out_from)
{
	int fd = wk_tlsb_new(w, c->fd, c->ssl, c->out + out_from, c->out_len - out_from);

	if (fd >= 0) {
		c->fd = -1;
		c->ssl = NULL;
		c->out_off = c->out_len = 0;
	}
	return fd;
}

/* After a successful ConnectionBind (RFC 6062 5.4) the connection stops being a TURN
 * connection: its socket, the bytes the client sent after the request and the response
 * not yet written go to the peer connection (tcprelay.c), and c is freed. Over TLS the
 * peer connection gets the plain end of the connection's TLS bridge, which writes the
 * response. */
static void wk_tconn_handover(struct worker *w, struct wk_tconn *c, size_t off)
{
	struct wk_tpeer *tp = c->bind_to;
	int fd = c->ssl ? wk_tconn_bridge(w, c, c->out_off) : c->fd;

	if (!c->ssl)
		c->fd = -1;
	if (fd < 0)
		w->up->bind_failed(w, tp);
	else
		w->up->bound(w, tp, fd, c->in + off, c->in_len - off, c->out + c->out_off,
			     c->out_len - c->out_off);
	wk_tconn_close(w, c);
}

/* A ConnectionBind for another worker's CONNECTION-ID: the socket and the bytes from
 * that request on go to the owner through the master (IPC_TCP_HANDOFF), and c is freed
 * here. A TLS connection stays here, bridged (its session cannot move): the bridge's plain
 * end goes instead. The socket is the control queue's from here (ctlq.c): sent at once, or
 * kept open and sent in order when the control socket has room. When that fails (the
 * queue's bound, the master gone, a stop before it went: logged by the queue) the client
 * sees a close. */
static void wk_tconn_handoff(struct worker *w, struct wk_tconn *c, size_t from)
{
	struct ipc_handoff *h = calloc(1, sizeof(*h));
	size_t len = c->in_len - from;

	if (h && len <= IPC_HANDOFF_DATA_MAX && strlen(c->l->name) <= IPC_NAME_MAX) {
		bool tls = c->ssl != NULL;
		int fd = tls ? wk_tconn_bridge(w, c, c->out_off) : c->fd;
		double age = ev_now(w->loop) - c->born;

		h->slot = c->handoff_slot - 1;
		h->len = (uint32_t)len;
		memcpy(h->listener, c->l->name, strlen(c->l->name));
		memcpy(h->data, c->in + from, len);
		h->tls = tls;
		memcpy(&h->client, &c->peer, c->peer_len);
		h->age_ms = age <= 0 ? 0 : age >= UINT32_MAX / 1000.0 ? UINT32_MAX
								      : (uint32_t)(age * 1000.0);
		/* Not ours any more: c's close must neither close nor shut it down (the
		 * bridge keeps a TLS connection's own socket). */
		if (!tls)
			c->fd = -1;
		if (fd < 0)
			log_debug("worker", "listener %s: TCP connection for slot %u dropped",
				  c->l->name, h->slot);
		else
			(void)wk_ctlq_send(w, IPC_TCP_HANDOFF, h, sizeof(*h), fd,
					   IPCQ_OWN_FD | IPCQ_SHUT_ON_DROP, NULL);
	}
	free(h);
	wk_tconn_close(w, c);
}

/* Cuts complete frames off the input buffer. Returns 1, or 0 when the connection must be
 * closed (framing error), or -1 when it was handed over (c is freed). The callee may
 * close the connection only through a framing error here, never from wk_turn_input
 * (which only queues output or marks the connection for a handover). */
static int wk_tconn_frames(struct worker *w, struct wk_tconn *c)
{
	size_t off = 0;
	struct wk_ep ep = {
		.l = c->l, .c = c, .addr = (struct sockaddr *)&c->peer, .addr_len = c->peer_len
	};

	if (c->resync && !wk_fdstore_resync(w, c))
		return 1;	/* nothing but the cut frame's rest yet */
	for (;;) {
		size_t flen;
		/* Framed in the wide range whatever limits.channel_numbers says: a strict
		 * server skips a 0x50-0x7F frame as malformed (wk_turn_input) rather than
		 * lose the connection's framing. */
		int rc = stun_frame_next(c->in + off, c->in_len - off, WK_TCP_IN_MAX,
					 STUN_CHAN_RFC5766, &flen);

		if (rc == -EAGAIN)
			break;
		if (rc < 0) {
			shm_ctr_add(w->ctr, SHM_CTR_ERR_MALFORMED, 1);
			return 0;
		}
		shm_ctr_add(w->ctr, SHM_CTR_CLIENT_PKTS_IN, 1);
		shm_ctr_add(w->ctr, SHM_CTR_CLIENT_BYTES_IN, flen);
		if (c->l->snap_ok && w->snap) {
			shm_lctr_add(w->ctr, c->l->slot, SHM_LCTR_CLIENT_PKTS_IN, 1);
			shm_lctr_add(w->ctr, c->l->slot, SHM_LCTR_CLIENT_BYTES_IN, flen);
			w->up->input(w, &ep, c->in + off, flen);
		}
		off += flen;
		if (c->handoff_slot) {
			wk_tconn_handoff(w, c, off - flen);
			return -1;
		}
		if (c->bind_to) {
			wk_tconn_handover(w, c, off);
			return -1;
		}
	}
	if (off) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
		c->last_msg = ev_now(w->loop);
		c->partial_since = 0;
	}
	if (c->in_len && !c->partial_since) {
		/* A partial message starts the slow-sender deadline: bring the timer
		 * forward if it was set for the (later) idle deadline. */
		c->partial_since = ev_now(w->loop);
		if (ev_timer_remaining(w->loop, &c->tmo) > WK_FRAME_TIMEOUT_S) {
			ev_timer_stop(w->loop, &c->tmo);
			ev_timer_set(&c->tmo, WK_FRAME_TIMEOUT_S, 0.0);
			ev_timer_start(w->loop, &c->tmo);
		}
	}
	return 1;
}

/* Reads into the input buffer: > 0 bytes, 0 end of stream, -EAGAIN, other < 0 fatal. */
static ssize_t wk_tconn_read(struct worker *w, struct wk_tconn *c)
{
	bool want_write = false;
	size_t room;
	ssize_t n;

	if (c->in_len == c->in_cap) {
		/* Full without a whole message (wk_tconn_frames consumed what it could):
		 * the message is larger than the first buffer. Grow once, to the largest
		 * frame; a frame larger than that was refused by the framer. */
		uint8_t *p = c->in_cap < WK_TCP_IN_MAX ? realloc(c->in, WK_TCP_IN_MAX) : NULL;

		if (!p)
			return -ENOMEM;
		c->in = p;
		c->in_cap = WK_TCP_IN_MAX;
	}
	room = c->in_cap - c->in_len;
	n = wk_stream_recv(c->fd, c->ssl, c->in + c->in_len, room, &want_write);
	wk_wake_stream(&w->wake);
	if (want_write)
		ev_io_start(w->loop, &c->wio);	/* the session must write before it reads */
	return n;
}

static void wk_tconn_rcb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_tconn *c = io->data;
	struct worker *w = wk_checked(c->l->w);

	if (c->pp_wait && !c->dead) {
		int r = wk_pp_stream(w, c);

		if (r == 0)
			return;
		if (r < 0) {
			c->dead = true;
			wk_tconn_close(w, c);
			return;
		}
		c->pp_wait = false;
	}
	if (!c->dead && !c->hs_done) {
		int r = wk_tconn_handshake(w, c);

		if (r == 0)
			return;
		if (r < 0)
			c->dead = true;
	}
	for (int i = 0; i < 16; i++) {
		ssize_t n;

		if (c->dead) {
			wk_tconn_close(w, c);
			return;
		}
		n = wk_tconn_read(w, c);
		if (n == -EAGAIN)
			break;
		if (n <= 0) {
			wk_tconn_close(w, c);
			return;
		}
		c->in_len += (size_t)n;
		switch (wk_tconn_frames(w, c)) {
		case 0:
			wk_tconn_close(w, c);
			return;
		case -1:
			return;		/* now a data connection (tcprelay.c) */
		default:
			break;
		}
	}
	/* Plaintext left inside OpenSSL makes the socket look idle: come back for it. */
	if (c->ssl && SSL_pending(c->ssl) > 0)
		ev_feed_event(w->loop, &c->rio, EV_READ);
	/* TLS may have wanted to read before it could write (key update). */
	if (c->ssl && c->out_off < c->out_len)
		wk_tconn_flush(w, c);
}

/* The first deadline of a connection: a TLS or DTLS handshake must be done within
 * WK_HS_TIMEOUT_S, and nothing comes before limits.preauth_timeout where that is
 * shorter (no request can be authenticated before the handshake is done). */
static double wk_tconn_first_deadline(const struct worker *w, const struct wk_tconn *c)
{
	double limit = c->ssl && WK_HS_TIMEOUT_S < w->hot.preauth_timeout ? WK_HS_TIMEOUT_S
									 : w->hot.preauth_timeout;

	return c->born + limit;
}

/* One timer per connection, re-armed only when it fires: the hot path just stores times.
 * It enforces the handshake deadline, the pre-authentication deadline, the slow-sender
 * deadline of a partial message and the idle deadline of a connection without an
 * allocation; DTLS retransmits its handshake flights from here too. */
static void wk_tconn_tmo_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct wk_tconn *c = t->data;
	struct worker *w = wk_checked(c->l->w);
	double now = ev_now(loop), next;
	const char *why = NULL;

	if (!c->hs_done) {
		struct timeval tv;

		next = wk_tconn_first_deadline(w, c);
		if (now >= next && next < c->born + WK_HS_TIMEOUT_S) {
			why = "no authenticated request in time";
			shm_ctr_add(w->ctr, SHM_CTR_PREAUTH_TIMEOUTS, 1);
		} else if (now >= next) {
			why = "handshake timeout";
		} else if (c->dgram && DTLSv1_get_timeout(c->ssl, &tv) == 1) {
			if (tv.tv_sec == 0 && tv.tv_usec == 0) {
				if (DTLSv1_handle_timeout(c->ssl) < 0)
					why = "handshake retransmission failed";
				ERR_clear_error();
			}
			if (!why && DTLSv1_get_timeout(c->ssl, &tv) == 1 &&
			    now + (double)tv.tv_sec + tv.tv_usec / 1e6 < next)
				next = now + (double)tv.tv_sec + tv.tv_usec / 1e6;
		}
	} else if (!c->authed && now >= c->born + w->hot.preauth_timeout) {
		why = "no authenticated request in time";
		shm_ctr_add(w->ctr, SHM_CTR_PREAUTH_TIMEOUTS, 1);
	} else if (c->partial_since && now >= c->partial_since + WK_FRAME_TIMEOUT_S) {
		why = "partial message not completed in time";
	} else if (!c->alloc && now >= c->last_msg + WK_IDLE_TIMEOUT_S) {
		why = "idle without an allocation";
	} else {
		next = c->last_msg + WK_IDLE_TIMEOUT_S;
		if (c->alloc || next <= now)
			next = now + WK_IDLE_TIMEOUT_S;
		if (c->partial_since && c->partial_since + WK_FRAME_TIMEOUT_S < next)
			next = c->partial_since + WK_FRAME_TIMEOUT_S;
		if (!c->authed && c->born + w->hot.preauth_timeout < next)
			next = c->born + w->hot.preauth_timeout;
	}
	if (why) {
		log_debug("worker", "listener %s: connection closed: %s", c->l->name, why);
		if (c->pp_wait)
			wk_pp_reject(w, c->l, (const struct sockaddr *)&c->peer, WK_PP_TIMEOUT);
		shm_ctr_add(w->ctr, SHM_CTR_CONN_TIMEOUTS, 1);
		wk_tconn_close(w, c);
		return;
	}
	ev_timer_set(t, next - now > 0.001 ? next - now : 0.001, 0.0);
	ev_timer_start(loop, t);
}

void wk_tconn_link(struct worker *w, struct wk_listener *l, struct wk_tconn *c)
{
	double first;

	c->l = l;
	c->born = c->last_msg = ev_now(w->loop);
	c->hs_done = c->ssl == NULL;
	wk_budget_attach(w, c);
	/* The first deadline (the handshake's or the pre-authentication one), or the idle one
	 * if that is earlier; DTLS starts with its retransmission timer. */
	first = wk_tconn_first_deadline(w, c) - c->born;
	ev_timer_init(&c->tmo, wk_tconn_tmo_cb,
		      c->dgram ? 0.001 : c->ssl || first < WK_IDLE_TIMEOUT_S ? first : WK_IDLE_TIMEOUT_S,
		      0.0);
	c->tmo.data = c;
	ev_timer_start(w->loop, &c->tmo);
	c->next = l->conns;
	if (c->next)
		c->next->pprev = &c->next;
	c->pprev = &l->conns;
	l->conns = c;
	l->n_conns++;
	if (l->snap_ok)
		shm_lctr_add(w->ctr, l->slot, SHM_LCTR_CONNS_TOTAL, 1);
	wk_tcp_count_conns(w, l);
}

/* A TLS listener with no usable certificate, a worker out of descriptors (paused for
 * WK_ACCEPT_BACKOFF_S), or a full listener table of authenticated connections leaves
 * connections in the kernel's backlog until it can serve them. A table that holds
 * unauthenticated connections makes room instead (wk_tcp_make_room): an attacker never
 * stops accepting. */
static bool wk_tcp_can_accept(const struct worker *w, const struct wk_listener *l)
{
	if (w->accept_paused)
		return false;
	if (l->n_conns >= WK_TCP_MAX_CONNS && TAILQ_EMPTY(&w->unauth))
		return false;
	return !l->secure || l->tls_ctx;
}

/* Room for one more connection on l, from this worker's tables (evicting the oldest
 * unauthenticated connection of a full one), then from the source's budgets (sa).
 * Returns 0, or -EBUSY: the new connection is to be closed (counted). Behind a PROXY
 * protocol listener sa is the proxy: the source's budgets wait for the header. */
static int wk_tcp_make_room(struct worker *w, struct wk_listener *l, const struct sockaddr *sa,
			    bool pp)
{
	if (l->n_conns >= WK_TCP_MAX_CONNS &&
	    wk_budget_make_room(w, l, SHM_SRC_CONNS, SHM_SRC_R_WORKER_CONNS) < 0) {
		shm_ctr_add(w->ctr, SHM_CTR_BUDGET_REFUSED_WORKER_CONNS, 1);
		return -EBUSY;
	}
	if (l->secure && w->n_hs[SHM_SRC_TLS_HS] >= WK_MAX_HANDSHAKES &&
	    wk_budget_make_room(w, NULL, SHM_SRC_TLS_HS, SHM_SRC_R_WORKER_TLS) < 0) {
		shm_ctr_add(w->ctr, SHM_CTR_BUDGET_REFUSED_WORKER_TLS, 1);
		return -EBUSY;
	}
	if (pp)
		return 0;
	if (wk_budget_admit(w, sa, SHM_SRC_CONNS) < 0)
		return -EBUSY;
	return l->secure ? wk_budget_admit(w, sa, SHM_SRC_TLS_HS) : 0;
}

/* Out of descriptors: every TCP listener stops for WK_ACCEPT_BACKOFF_S instead of its
 * level-triggered watcher firing again at once (a spin at 100 % CPU). */
void wk_tcp_pause(struct worker *w)
{
	shm_ctr_add(w->ctr, SHM_CTR_ACCEPT_BACKOFF, 1);
	if (w->accept_paused)
		return;
	w->accept_paused = true;
	for (size_t i = 0; i < w->n_ls; i++)
		if (w->ls[i]->proto == WORKER_PROTO_TCP)
			ev_io_stop(w->loop, &w->ls[i]->io);
	ev_timer_set(&w->accept_tmo, WK_ACCEPT_BACKOFF_S, 0.0);
	ev_timer_start(w->loop, &w->accept_tmo);
}

static void wk_tcp_unpause_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = wk_checked(t->data);

	w->accept_paused = false;
	wk_tcp_resume(w);
}

void wk_tcp_init(struct worker *w)
{
	TAILQ_INIT(&w->unauth);
	w->hot.preauth_timeout = 10.0;
	ev_timer_init(&w->accept_tmo, wk_tcp_unpause_cb, WK_ACCEPT_BACKOFF_S, 0.0);
	w->accept_tmo.data = w;
}

void wk_sock_nodelay(int fd)
{
	int one = 1;

	/* Fails harmlessly (EOPNOTSUPP) on the AF_UNIX end of a bridged TLS connection. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static_assert(WK_TCP_SNDBUF == WK_TCP_OUT_MAX,
	      "the kernel's send buffer of a connection is its output buffer's size");

/* A connection for fd accepted on l (TLS unless plain: with its SSL object in accept
 * state), or NULL. */
static struct wk_tconn *wk_tconn_new(const struct wk_listener *l, int fd, bool plain)
{
	struct wk_tconn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	wk_sock_nodelay(fd);
	c->in = malloc(WK_TCP_IN_START);
	c->in_cap = WK_TCP_IN_START;
	if (c->in && l->secure && !plain) {
		c->ssl = SSL_new(l->tls_ctx);
		if (c->ssl && SSL_set_fd(c->ssl, fd) == 1) {
			SSL_set_accept_state(c->ssl);
		} else {
			SSL_free(c->ssl);
			c->ssl = NULL;
		}
	}
	if (!c->in || (l->secure && !plain && !c->ssl)) {
		free(c->in);
		free(c);
		ERR_clear_error();
		return NULL;
	}
	c->fd = fd;
	return c;
}

/* Watches a new connection of listener l (accepted here or handed over) and links it. */
static void wk_tconn_start(struct worker *w, struct wk_listener *l, struct wk_tconn *c)
{
	ev_io_init(&c->rio, wk_tconn_rcb, c->fd, EV_READ);
	c->rio.data = c;
	ev_io_init(&c->wio, wk_tconn_wcb, c->fd, EV_WRITE);
	c->wio.data = c;
	ev_io_start(w->loop, &c->rio);
	wk_tconn_link(w, l, c);
}

static void wk_tcp_accept_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_listener *l = io->data;
	struct worker *w = wk_checked(l->w);

	for (int i = 0; i < 32; i++) {
		struct wk_tconn *c = NULL;
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		bool pp = wk_pp_enabled(l);
		int fd;

		if (!wk_tcp_can_accept(w, l)) {
			ev_io_stop(loop, io);	/* wk_tcp_resume restarts it */
			return;
		}
		fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			int err = errno;

			/* Out of this process's descriptors: this listener's oldest
			 * unauthenticated connection (each holds one) makes room for the
			 * newcomer, as a full connection table does; with none, accepting
			 * pauses instead of spinning. */
			if (err == EMFILE && wk_budget_make_room(w, l, SHM_SRC_CONNS,
								 SHM_SRC_R_WORKER_CONNS) == 0)
				continue;
			if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
				wk_tcp_pause(w);
			return;
		}
		if ((pp && !wk_pp_admit_source(w, l, (struct sockaddr *)&ss)) ||
		    wk_tcp_make_room(w, l, (struct sockaddr *)&ss, pp) < 0) {
			close(fd);
			continue;
		}
		wk_sock_sndbuf(fd);
		c = wk_tconn_new(l, fd, false);
		if (!c) {
			close(fd);
			continue;
		}
		memcpy(&c->peer, &ss, sl);
		c->peer_len = sl;
		c->pp_wait = pp;
		wk_tconn_start(w, l, c);
	}
}

void wk_tcp_drop_handoff(struct worker *w, int fd, const char *why)
{
	if (fd >= 0)
		log_debug("worker", "slot %u: hand-off dropped: %s", w->slot, why);
	ipcq_drop_fd(fd, IPCQ_OWN_FD | IPCQ_SHUT_ON_DROP);
}

/* A handed-over connection keeps the deadlines it had (born age s ago): a hand-off must not
 * give an unauthenticated connection a new pre-authentication deadline. */
static void wk_tconn_aged(struct worker *w, struct wk_tconn *c, double age)
{
	double now = ev_now(w->loop), first;

	c->born = now - age;
	if (c->authed)
		return;
	first = wk_tconn_first_deadline(w, c) - now;
	if (first >= ev_timer_remaining(w->loop, &c->tmo))
		return;
	ev_timer_stop(w->loop, &c->tmo);
	ev_timer_set(&c->tmo, first > 0.001 ? first : 0.001, 0.0);
	ev_timer_start(w->loop, &c->tmo);
}

void wk_tcp_adopt_conn(struct worker *w, const struct ipc_handoff *h, int fd)
{
	struct wk_listener *l = NULL;
	struct wk_tconn *c;
	size_t len = h->len;

	/* A plain TCP listener's connection, or a TLS one's bridged plain end. */
	for (size_t i = 0; i < w->n_ls && !l; i++)
		if (w->ls[i]->active && w->ls[i]->proto == WORKER_PROTO_TCP &&
		    w->ls[i]->secure == (h->tls != 0) && strcmp(w->ls[i]->name, h->listener) == 0)
			l = w->ls[i];
	if (!l) {
		wk_tcp_drop_handoff(w, fd, "no active listener of that name");
		return;
	}
	/* Defensive: ipc_recv bounds len at IPC_HANDOFF_DATA_MAX, below WK_TCP_IN_START. */
	c = len <= WK_TCP_IN_START ? wk_tconn_new(l, fd, true) : NULL;
	if (!c) {
		wk_tcp_drop_handoff(w, fd, len > WK_TCP_IN_START ? "data too long" : "no memory");
		return;
	}
	c->peer_len = wk_addr_len((const struct sockaddr *)&h->client);
	memcpy(&c->peer, &h->client, c->peer_len);
	memcpy(c->in, h->data, len);
	c->in_len = len;
	wk_tconn_start(w, l, c);
	wk_tconn_aged(w, c, h->age_ms / 1000.0);
	/* What the other worker read is handled now; the rest comes through rio. */
	if (wk_tconn_frames(w, c) == 0)
		wk_tconn_close(w, c);
}

void wk_tcp_resume(struct worker *w)
{
	if (w->lingering)
		return;	/* its listeners are closed (linger.c) */
	for (size_t i = 0; i < w->n_ls; i++) {
		struct wk_listener *l = w->ls[i];

		if (l->active && l->proto == WORKER_PROTO_TCP && !ev_is_active(&l->io) &&
		    wk_tcp_can_accept(w, l))
			ev_io_start(w->loop, &l->io);
	}
}

int wk_tcp_start(struct worker *w, struct wk_listener *l)
{
	ev_io_init(&l->io, wk_tcp_accept_cb, l->fd, EV_READ);
	l->io.data = l;
	if (!w->accept_paused)
		ev_io_start(w->loop, &l->io);
	return 0;
}

/* A TURN-TCP connection a live upgrade handed over (worker/park.c): served on l as the
 * predecessor served it, with what its buffers held (a partial frame in, unwritten bytes
 * out). Takes fd only on success. Returns the connection, or NULL (nothing changed). */
struct wk_tconn *wk_tcp_restore(struct worker *w, struct wk_listener *l, int fd,
				const struct sockaddr *peer, socklen_t peer_len, const uint8_t *in,
				size_t in_len, const uint8_t *out, size_t out_len, bool authed)
{
	struct wk_tconn *c;

	if (in_len > WK_TCP_IN_MAX || out_len > WK_TCP_OUT_MAX || peer_len > sizeof(c->peer))
		return NULL;
	c = wk_tconn_new(l, fd, true);
	if (!c)
		return NULL;
	wk_sock_sndbuf(fd);	/* a predecessor's socket may predate the bound */
	if (in_len > c->in_cap) {
		uint8_t *p = realloc(c->in, WK_TCP_IN_MAX);

		if (!p)
			goto fail;
		c->in = p;
		c->in_cap = WK_TCP_IN_MAX;
	}
	if (out_len > 0) {
		c->out = malloc(out_len);
		if (!c->out)
			goto fail;
		memcpy(c->out, out, out_len);
		c->out_len = c->out_cap = out_len;
	}
	memcpy(c->in, in, in_len);
	c->in_len = in_len;
	memcpy(&c->peer, peer, peer_len);
	c->peer_len = peer_len;
	wk_tconn_start(w, l, c);
	/* The same connection, not a new one: the predecessor counted it. */
	if (l->snap_ok)
		shm_lctr_add(w->ctr, l->slot, SHM_LCTR_CONNS_TOTAL, (uint64_t)-1);
	if (authed)
		wk_budget_authed(w, c);
	if (c->in_len)
		c->partial_since = ev_now(w->loop);
	if (c->out_len)
		ev_io_start(w->loop, &c->wio);
	return c;
fail:
	free(c->in);
	free(c->out);
	free(c);
	return NULL;
}

/* What a live upgrade can hand over of c: a plain TURN-TCP connection (no handshake,
 * PROXY header or ConnectionBind half done). */
bool wk_tconn_parkable(const struct wk_tconn *c)
{
	return !c->ssl && !c->dgram && !c->dead && !c->pp_wait && !c->bind_to &&
	       !c->handoff_slot && c->fd >= 0;
}

/* Handles the complete frames a restored connection's input holds. Returns false when
 * the connection had to be closed (it is freed). */
bool wk_tconn_restart(struct worker *w, struct wk_tconn *c)
{
	int rc = wk_tconn_frames(w, c);

	if (rc == 0)
		wk_tconn_close(w, c);
	return rc == 1;
}
