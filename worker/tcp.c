/* Worker TCP I/O: accepting TURN-TCP clients, stream framing of STUN and ChannelData,
 * bounded per-connection buffers. An allocation made over a connection ends with it. */
#include "config.h"

#include "worker/wk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "stun/stun_frame.h"

/* Publishes the listener's open-connection count as this slot's absolute gauge value
 * (not a delta): a gauge kept as +1/-1 would drift when a connection outlives its
 * listener's presence in the snapshot or the worker dies with connections open; the
 * renderer sums it over live slots only. */
static void wk_tcp_count_conns(struct worker *w, const struct wk_listener *l)
{
	if (l->snap_ok && l->snap_idx < SHM_MAX_LISTENERS)
		CMM_STORE_SHARED(w->ctr->lst[l->snap_idx][SHM_LCTR_CONNS_ACTIVE],
				 (uint64_t)l->n_conns);
}

void wk_tconn_close(struct worker *w, struct wk_tconn *c)
{
	if (c->alloc)
		wk_alloc_destroy(w, c->alloc, "TCP connection closed");
	ev_io_stop(w->loop, &c->rio);
	ev_io_stop(w->loop, &c->wio);
	close(c->fd);
	*c->pprev = c->next;
	if (c->next)
		c->next->pprev = c->pprev;
	c->l->n_conns--;
	wk_tcp_count_conns(w, c->l);
	free(c->in);
	free(c->out);
	free(c);
}

static void wk_tconn_flush(struct worker *w, struct wk_tconn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			if (errno == EINTR)
				continue;
			/* Closed by the read side, never here: callers may still use c. */
			c->dead = true;
			c->out_off = c->out_len = 0;
			ev_io_stop(w->loop, &c->wio);
			ev_feed_event(w->loop, &c->rio, EV_READ);
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

	if (c->dead)
		return;
	if (c->out_off && c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	need = c->out_len + len;
	if (need > WK_TCP_OUT_MAX) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_SEND, 1);
		return;
	}
	if (need > c->out_cap) {
		size_t cap = c->out_cap ? c->out_cap : 4096;
		uint8_t *p;

		while (cap < need)
			cap *= 2;
		p = realloc(c->out, cap);
		if (!p)
			return;
		c->out = p;
		c->out_cap = cap;
	}
	memcpy(c->out + c->out_len, buf, len);
	c->out_len += len;
	shm_ctr_add(w->ctr, SHM_CTR_CLIENT_PKTS_OUT, 1);
	shm_ctr_add(w->ctr, SHM_CTR_CLIENT_BYTES_OUT, len);
	if (c->l->snap_ok) {
		shm_lctr_add(w->ctr, c->l->snap_idx, SHM_LCTR_CLIENT_PKTS_OUT, 1);
		shm_lctr_add(w->ctr, c->l->snap_idx, SHM_LCTR_CLIENT_BYTES_OUT, len);
	}
	if (!ev_is_active(&c->wio))
		wk_tconn_flush(w, c);
}

static void wk_tconn_wcb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_tconn *c = io->data;

	wk_tconn_flush(c->l->w, c);
	if (c->dead)
		wk_tconn_close(c->l->w, c);
}

/* Cuts complete frames off the input buffer. Returns false when the connection was
 * closed (framing error). The callee may close the connection only through a framing
 * error here, never from wk_turn_input (which only queues output). */
static bool wk_tconn_frames(struct worker *w, struct wk_tconn *c)
{
	size_t off = 0;
	struct wk_ep ep = { .l = c->l, .c = c, .addr = (struct sockaddr *)&c->peer,
			    .addr_len = c->peer_len };

	for (;;) {
		size_t flen;
		int rc = wk_frame_next(c->in + off, c->in_len - off, WK_TCP_IN_MAX, &flen);

		if (rc == -EAGAIN)
			break;
		if (rc < 0) {
			shm_ctr_add(w->ctr, SHM_CTR_ERR_MALFORMED, 1);
			return false;
		}
		shm_ctr_add(w->ctr, SHM_CTR_CLIENT_PKTS_IN, 1);
		shm_ctr_add(w->ctr, SHM_CTR_CLIENT_BYTES_IN, flen);
		if (c->l->snap_ok && w->snap) {
			shm_lctr_add(w->ctr, c->l->snap_idx, SHM_LCTR_CLIENT_PKTS_IN, 1);
			shm_lctr_add(w->ctr, c->l->snap_idx, SHM_LCTR_CLIENT_BYTES_IN, flen);
			wk_turn_input(w, &ep, c->in + off, flen);
		}
		off += flen;
	}
	if (off) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
	}
	return true;
}

static void wk_tconn_rcb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_tconn *c = io->data;
	struct worker *w = c->l->w;

	for (int i = 0; i < 16; i++) {
		ssize_t n;

		if (c->dead) {
			wk_tconn_close(w, c);
			return;
		}
		n = recv(c->fd, c->in + c->in_len, WK_TCP_IN_MAX - c->in_len, MSG_DONTWAIT);

		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
			wk_tconn_close(w, c);
			return;
		}
		if (n < 0)
			return;
		c->in_len += (size_t)n;
		if (!wk_tconn_frames(w, c)) {
			wk_tconn_close(w, c);
			return;
		}
	}
}

static void wk_tcp_accept_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_listener *l = io->data;
	struct worker *w = l->w;

	for (int i = 0; i < 32; i++) {
		struct wk_tconn *c = NULL;
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0)
			return;
		if (l->n_conns < WK_TCP_MAX_CONNS)
			c = calloc(1, sizeof(*c));
		if (c)
			c->in = malloc(WK_TCP_IN_MAX);
		if (!c || !c->in) {
			free(c);
			close(fd);
			continue;
		}
		c->l = l;
		c->fd = fd;
		memcpy(&c->peer, &ss, sl);
		c->peer_len = sl;
		ev_io_init(&c->rio, wk_tconn_rcb, fd, EV_READ);
		c->rio.data = c;
		ev_io_init(&c->wio, wk_tconn_wcb, fd, EV_WRITE);
		c->wio.data = c;
		ev_io_start(w->loop, &c->rio);
		c->next = l->conns;
		if (c->next)
			c->next->pprev = &c->next;
		c->pprev = &l->conns;
		l->conns = c;
		l->n_conns++;
		if (l->snap_ok)
			shm_lctr_add(w->ctr, l->snap_idx, SHM_LCTR_CONNS_TOTAL, 1);
		wk_tcp_count_conns(w, l);
	}
}

int wk_tcp_start(struct worker *w, struct wk_listener *l)
{
	ev_io_init(&l->io, wk_tcp_accept_cb, l->fd, EV_READ);
	l->io.data = l;
	ev_io_start(w->loop, &l->io);
	return 0;
}
