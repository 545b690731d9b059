/* Worker DTLS: one shared UDP listener socket carries every association of a TURN-DTLS
 * listener. A ClientHello without a valid cookie is answered statelessly
 * (DTLSv1_listen); only the cookie round trip creates per-client state, bounded in
 * number (WK_DTLS_MAX_ASSOCS, WK_MAX_HANDSHAKES DTLS handshakes per worker, the per-source
 * budgets of worker/budget.c: a full one evicts the oldest unauthenticated association)
 * and in time (wk_tconn deadlines). */
#include "config.h"

#include "worker/stream.h"
#include "worker/transport.h"
#include "worker/wk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>

#include "common/log.h"
#include "worker/dtlslinger.h"
#include "worker/sockbuf.h"

#define WK_DTLS_CT_HANDSHAKE 22	/* DTLS record content type of a ClientHello */
#define WK_DTLS_HT_CLIENT_HELLO 1
/* Offsets in a datagram that opens with a ClientHello: 13-byte record header, 12-byte
 * handshake header (type, length, message_seq, fragment_offset, fragment_length), then
 * client_version and the 32-byte random. */
#define WK_DTLS_OFF_EPOCH 3
#define WK_DTLS_OFF_HS 13
#define WK_DTLS_OFF_FRAG (WK_DTLS_OFF_HS + 6)
#define WK_DTLS_OFF_RANDOM (WK_DTLS_OFF_HS + 12 + 2)
#define WK_DTLS_RANDOM_LEN 32

static struct wk_tconn *wk_dtls_find(struct worker *w, const struct wk_listener *l,
				     const struct sockaddr *from)
{
	struct wk_tconn *c = w->dhash[wk_ep_hash(l, from) & (WK_HASH_BUCKETS - 1)];

	for (; c; c = c->dnext)
		if (c->l == l && wk_addr_equal((struct sockaddr *)&c->peer, from))
			return c;
	return NULL;
}

void wk_dtls_unhash(struct worker *w, struct wk_tconn *c)
{
	struct wk_tconn **pp = &w->dhash[wk_ep_hash(c->l, (struct sockaddr *)&c->peer) & (WK_HASH_BUCKETS - 1)];

	for (; *pp; pp = &(*pp)->dnext)
		if (*pp == c) {
			*pp = c->dnext;
			return;
		}
}

/* Whether buf opens with an epoch-0 ClientHello from another client than the one that
 * made association c: its random differs from c's. That is a new client on c's address
 * and port (RFC 6347 4.2.8), typically a new socket that got the port of one closed
 * without close_notify, whose association (with its allocation) would otherwise swallow
 * every hello as a stale retransmission until it expired. A retransmission of c's own
 * hello carries c's random and still goes to c. */
bool wk_dtls_is_hello(const uint8_t *buf, size_t len)
{
	return len >= WK_DTLS_OFF_RANDOM + WK_DTLS_RANDOM_LEN && buf[0] == WK_DTLS_CT_HANDSHAKE &&
	       buf[WK_DTLS_OFF_EPOCH] == 0 && buf[WK_DTLS_OFF_EPOCH + 1] == 0 &&
	       buf[WK_DTLS_OFF_HS] == WK_DTLS_HT_CLIENT_HELLO &&
	       (buf[WK_DTLS_OFF_FRAG] | buf[WK_DTLS_OFF_FRAG + 1] | buf[WK_DTLS_OFF_FRAG + 2]) == 0;
}

static bool wk_dtls_new_client(const struct wk_tconn *c, const uint8_t *buf, size_t len)
{
	uint8_t random[WK_DTLS_RANDOM_LEN];

	if (!wk_dtls_is_hello(buf, len))
		return false;
	if (SSL_get_client_random(c->ssl, random, sizeof(random)) != sizeof(random))
		return false;
	return memcmp(random, buf + WK_DTLS_OFF_RANDOM, sizeof(random)) != 0;
}

/* Decrypts every record the datagram held and hands each message to the dispatcher. */
static void wk_dtls_records(struct worker *w, struct wk_tconn *c)
{
	struct wk_ep ep = {
		.l = c->l, .c = c, .addr = (struct sockaddr *)&c->peer, .addr_len = c->peer_len
	};

	for (int i = 0; i < 16 && !c->dead; i++) {
		int n = SSL_read(c->ssl, w->plain + WK_HEADROOM, WK_DGRAM_MAX - 4);

		if (n <= 0) {
			int err = SSL_get_error(c->ssl, n);

			if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
				/* close_notify or a fatal alert: the association is over */
				if (err != SSL_ERROR_ZERO_RETURN)
					shm_ctr_add(w->ctr, SHM_CTR_ERR_TLS, 1);
				c->dead = err != SSL_ERROR_ZERO_RETURN;
				wk_dtls_dbio(c->ssl)->rbuf = NULL;
				ERR_clear_error();
				wk_tconn_close(w, c);
			}
			return;
		}
		c->last_msg = ev_now(w->loop);
		if (c->l->snap_ok && w->snap)
			w->up->input(w, &ep, w->plain + WK_HEADROOM, (size_t)n);
	}
	wk_dtls_dbio(c->ssl)->rbuf = NULL;	/* never keep a pointer into the batch */
}

/* Hands one datagram (NULL: none, just run the state machine) to association c; c may
 * be closed on return. */
static void wk_dtls_feed(struct worker *w, struct wk_tconn *c, const uint8_t *buf, size_t len)
{
	struct wk_dbio *d = wk_dtls_dbio(c->ssl);

	d->rbuf = buf;
	d->rlen = len;
	if (!c->hs_done) {
		int r = wk_tconn_handshake(w, c);

		d->rbuf = NULL;
		if (r < 0) {
			c->dead = true;
			wk_tconn_close(w, c);
			return;
		}
		/* Re-arm the timer for the next retransmission or the deadline. */
		ev_timer_stop(w->loop, &c->tmo);
		ev_timer_set(&c->tmo, 0.001, 0.0);
		ev_timer_start(w->loop, &c->tmo);
		if (r == 0)
			return;
	}
	wk_dtls_records(w, c);	/* consumes the datagram; may close c */
}

/* Room for one more association from `from` (its cookie verified): from the worker's
 * tables (evicting the oldest DTLS handshake, or the listener's oldest unauthenticated
 * association), then from the source's budgets. 0, or -EBUSY (refused, counted). */
static int wk_dtls_make_room(struct worker *w, struct wk_listener *l, const struct sockaddr *from)
{
	if ((w->n_hs[SHM_SRC_DTLS_HS] >= WK_MAX_HANDSHAKES &&
	     wk_budget_make_room(w, NULL, SHM_SRC_DTLS_HS, SHM_SRC_R_WORKER_DTLS) < 0) ||
	    (w->n_dtls >= WK_DTLS_MAX_ASSOCS &&
	     wk_budget_make_room(w, l, SHM_SRC_CONNS, SHM_SRC_R_WORKER_DTLS) < 0)) {
		shm_ctr_add(w->ctr, SHM_CTR_HANDSHAKES_REFUSED, 1);
		shm_ctr_add(w->ctr, SHM_CTR_BUDGET_REFUSED_WORKER_DTLS, 1);
		return -EBUSY;
	}
	if (wk_budget_admit(w, from, SHM_SRC_CONNS) < 0 ||
	    wk_budget_admit(w, from, SHM_SRC_DTLS_HS) < 0) {
		shm_ctr_add(w->ctr, SHM_CTR_HANDSHAKES_REFUSED, 1);
		return -EBUSY;
	}
	return 0;
}

/* The stateless step: answers a cookie-less ClientHello with a HelloVerifyRequest, and
 * turns one carrying a valid cookie into an association. An association the source
 * address already has ends only then: the cookie round trip proves that the new client
 * owns the address (RFC 6347 4.2.8), so a forged hello cannot end someone's association. */
static void wk_dtls_hello(struct worker *w, struct wk_listener *l, const struct sockaddr *from,
			  socklen_t fromlen, const uint8_t *buf, size_t len)
{
	struct wk_dbio *d;
	struct wk_tconn *c, *old;
	BIO_ADDR *peer;
	int r;

	if (len < 13 || buf[0] != WK_DTLS_CT_HANDSHAKE || !l->tls_ctx) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_MALFORMED, 1);
		return;
	}
	if (!l->dtls_listen && !(l->dtls_listen = wk_dtls_ssl_new(w, l->tls_ctx, l->fd)))
		return;
	d = wk_dtls_dbio(l->dtls_listen);
	memcpy(&d->peer, from, fromlen);
	d->peer_len = fromlen;
	d->rbuf = buf;
	d->rlen = len;
	peer = BIO_ADDR_new();
	r = peer ? DTLSv1_listen(l->dtls_listen, peer) : -1;
	BIO_ADDR_free(peer);
	d->rbuf = NULL;
	if (r <= 0) {
		/* 0: answered with a cookie, or dropped; < 0: a fatal error (not ours to
		 * keep): the next hello starts from a fresh object. */
		if (r == 0)
			shm_ctr_add(w->ctr, SHM_CTR_DTLS_COOKIES, 1);
		if (r < 0) {
			SSL_free(l->dtls_listen);
			l->dtls_listen = NULL;
		}
		ERR_clear_error();
		return;
	}
	old = wk_dtls_find(w, l, from);
	if (old) {
		log_debug("worker", "listener %s: new DTLS client on an association's address",
			  l->name);
		old->dead = true; /* no close_notify: the address has a new owner */
		wk_tconn_close(w, old);
	}
	c = wk_dtls_make_room(w, l, from) == 0 ? calloc(1, sizeof(*c)) : NULL;
	if (!c) {
		/* The client retransmits its hello (with its cookie) and tries again. */
		SSL_free(l->dtls_listen);
		l->dtls_listen = NULL;
		ERR_clear_error();
		return;
	}
	c->ssl = l->dtls_listen;
	l->dtls_listen = NULL;
	c->dgram = true;
	c->fd = l->fd;
	memcpy(&c->peer, from, fromlen);
	c->peer_len = fromlen;
	c->dnext = w->dhash[wk_ep_hash(l, from) & (WK_HASH_BUCKETS - 1)];
	w->dhash[wk_ep_hash(l, from) & (WK_HASH_BUCKETS - 1)] = c;
	w->n_dtls++;
	wk_tconn_link(w, l, c);
	wk_dtls_feed(w, c, NULL, 0);	/* the buffered ClientHello: send our flight */
}

static void wk_dtls_dgram(struct worker *w, struct wk_listener *l, const struct sockaddr *from,
			  socklen_t fromlen, uint8_t *buf, size_t len)
{
	struct wk_tconn *c = wk_dtls_find(w, l, from);

	if (c && !wk_dtls_new_client(c, buf, len))
		wk_dtls_feed(w, c, buf, len);
	else if (c || !wk_dl_forward(w, l, from, buf, len))
		wk_dtls_hello(w, l, from, fromlen, buf, len);
}

void wk_dtls_forwarded(struct worker *w, struct wk_listener *l, const struct sockaddr *from,
		       const uint8_t *buf, size_t len)
{
	struct wk_tconn *c = wk_dtls_find(w, l, from);

	/* A lingering worker makes no association: a new client's hello is not ours. */
	if (c && c->hs_done && !wk_dtls_new_client(c, buf, len))
		wk_dtls_feed(w, c, buf, len);
	else
		shm_ctr_add(w->ctr, SHM_CTR_ERR_MALFORMED, 1);
}

static void wk_dtls_listener_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_listener *l = io->data;

	wk_listener_drain(wk_checked(l->w), l, wk_dtls_dgram);
}

int wk_dtls_start(struct worker *w, struct wk_listener *l)
{
	if (!w->dhash) {
		w->dhash = calloc(WK_HASH_BUCKETS, sizeof(*w->dhash));
		w->plain = malloc(WK_HEADROOM + WK_DGRAM_MAX);
		if (!w->dhash || !w->plain)
			return -ENOMEM;
	}
	wk_dl_load(w);	/* the clients of lingering old workers, whose datagrams we forward */
	wk_sockbuf_set(l->fd, WK_SOCKBUF_LISTENER);
	ev_io_stop(w->loop, &l->io);
	ev_io_init(&l->io, wk_dtls_listener_cb, l->fd, EV_READ);
	l->io.data = l;
	ev_io_start(w->loop, &l->io);
	return 0;
}
