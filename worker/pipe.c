/* Two stream sockets joined by one bounded buffer per direction: RFC 6062 data connections
 * (tcprelay.c) and the TLS bridge of a data connection that arrived over TURN-TLS
 * (wk_tlsb below). What is read from side i waits in buf[i] until it is written to side
 * 1 - i; a full buffer stops reading side i until the other side has taken the bytes
 * (TCP's flow control then stops the sender); an end of stream is passed on as a
 * shutdown(SHUT_WR) once the buffer is written (a TLS side sends close_notify first).
 * A side with an SSL object is read and written through it. */
#include "config.h"

#include "worker/sockbuf.h"
#include "worker/stream.h"
#include "worker/transport.h"
#include "worker/wk.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "common/log.h"

ssize_t wk_stream_recv(int fd, SSL *ssl, uint8_t *b, size_t n, bool *want_write)
{
	int r;

	if (!ssl) {
		ssize_t k = recv(fd, b, n, MSG_DONTWAIT);

		if (k >= 0)
			return k;
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -EAGAIN : -errno;
	}
	r = SSL_read(ssl, b, n > INT_MAX ? INT_MAX : (int)n);
	if (r > 0)
		return r;
	switch (SSL_get_error(ssl, r)) {
	case SSL_ERROR_WANT_WRITE:
		if (want_write)
			*want_write = true;
		/* fall through */
	case SSL_ERROR_WANT_READ:
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:	/* close_notify, or a FIN (SSL_OP_IGNORE_UNEXPECTED_EOF) */
		return 0;
	default:
		ERR_clear_error();
		return -EIO;
	}
}

ssize_t wk_stream_send(int fd, SSL *ssl, const uint8_t *b, size_t n)
{
	int r;

	if (!ssl) {
		ssize_t k = send(fd, b, n, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (k >= 0)
			return k;
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -EAGAIN : -errno;
	}
	r = SSL_write(ssl, b, n > INT_MAX ? INT_MAX : (int)n);
	if (r > 0)
		return r;
	switch (SSL_get_error(ssl, r)) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		return -EAGAIN;
	default:
		ERR_clear_error();
		return -EIO;
	}
}

/* Side i may be read again: watch it, and come back at once for bytes a TLS side has
 * already decrypted (the socket may never become readable for them). */
static void wk_pipe_resume(struct wk_pipe *p, int i)
{
	if (p->eof[i] || p->len[i] >= p->cap)
		return;
	ev_io_start(p->w->loop, &p->rio[i]);
	if (p->ssl[i] && SSL_pending(p->ssl[i]) > 0)
		ev_feed_event(p->w->loop, &p->rio[i], EV_READ);
}

/* Writes buf[1 - j] to side j. Returns false when the pipe is over (ops->done ran). */
static bool wk_pipe_flush(struct wk_pipe *p, int j)
{
	struct ev_loop *loop = p->w->loop;
	int i = 1 - j;

	while (p->off[i] < p->len[i]) {
		ssize_t n = wk_stream_send(p->fd[j], p->ssl[j], p->buf[i] + p->off[i],
					   p->len[i] - p->off[i]);

		if (n == -EAGAIN)
			break;
		if (n < 0) {
			p->ops->done(p, true);	/* reset: the other side gets one too */
			return false;
		}
		p->off[i] += (size_t)n;
		if (p->ops->moved)
			p->ops->moved(p, j, true, (size_t)n);
	}
	if (p->off[i] == p->len[i]) {
		p->off[i] = p->len[i] = 0;
		ev_io_stop(loop, &p->wio[j]);
		if (p->eof[i] && !p->shut[j]) {
			if (p->ssl[j] && SSL_shutdown(p->ssl[j]) < 0)
				ERR_clear_error();	/* close_notify, best effort */
			shutdown(p->fd[j], SHUT_WR);	/* half-close propagated */
			p->shut[j] = true;
			if (p->ops->shut && p->ops->shut(p, j)) {
				p->ops->done(p, false);
				return false;
			}
		}
	} else {
		ev_io_start(loop, &p->wio[j]);
	}
	wk_pipe_resume(p, i);	/* room again: read the side that filled it */
	if (p->shut[0] && p->shut[1]) {
		p->ops->done(p, false);	/* both directions done */
		return false;
	}
	return true;
}

/* Reads side i into buf[i] while there is room, then writes it on. */
static void wk_pipe_pump(struct wk_pipe *p, int i)
{
	for (int k = 0; k < 16; k++) {
		ssize_t n;

		if (p->off[i] && p->off[i] == p->len[i])
			p->off[i] = p->len[i] = 0;
		if (p->len[i] == p->cap) {
			ev_io_stop(p->w->loop, &p->rio[i]);	/* the other side is slow */
			break;
		}
		n = wk_stream_recv(p->fd[i], p->ssl[i], p->buf[i] + p->len[i], p->cap - p->len[i],
				   NULL);
		wk_wake_stream(&p->w->wake);
		if (n == -EAGAIN)
			break;
		if (n < 0) {
			p->ops->done(p, true);
			return;
		}
		if (n == 0) {
			p->eof[i] = true;
			ev_io_stop(p->w->loop, &p->rio[i]);
			break;
		}
		p->len[i] += (size_t)n;
		if (p->ops->moved)
			p->ops->moved(p, i, false, (size_t)n);
	}
	if (wk_pipe_flush(p, 1 - i) && p->ssl[i] && !p->eof[i] && p->len[i] < p->cap &&
	    SSL_pending(p->ssl[i]) > 0)
		ev_feed_event(p->w->loop, &p->rio[i], EV_READ);	/* the 16 reads ran out */
}

static void wk_pipe_rcb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_pipe *p = io->data;

	(void)loop;
	(void)revents;
	wk_pipe_pump(p, io == &p->rio[0] ? 0 : 1);
}

static void wk_pipe_wcb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_pipe *p = io->data;

	(void)loop;
	(void)revents;
	wk_pipe_flush(p, io == &p->wio[0] ? 0 : 1);
}

void wk_pipe_init(struct wk_pipe *p, struct worker *w, const struct wk_pipe_ops *ops,
		  uint8_t *bufs, size_t cap)
{
	memset(p, 0, sizeof(*p));
	p->w = w;
	p->ops = ops;
	p->cap = cap;
	for (int i = 0; i < 2; i++) {
		p->fd[i] = -1;
		p->buf[i] = bufs + (size_t)i * cap;
	}
}

void wk_pipe_side(struct wk_pipe *p, int i, int fd, SSL *ssl, const uint8_t *pre, size_t len)
{
	p->fd[i] = fd;
	p->ssl[i] = ssl;
	ev_io_init(&p->rio[i], wk_pipe_rcb, fd, EV_READ);
	ev_io_init(&p->wio[i], wk_pipe_wcb, fd, EV_WRITE);
	p->rio[i].data = p->wio[i].data = p;
	if (len)
		memcpy(p->buf[i], pre, len);
	p->len[i] = len;
}

void wk_pipe_start(struct wk_pipe *p)
{
	for (int i = 0; i < 2; i++)
		wk_pipe_resume(p, i);
	if (wk_pipe_flush(p, 1) && p->len[1])
		wk_pipe_flush(p, 0);
}

void wk_pipe_close(struct wk_pipe *p, bool abort_conn)
{
	for (int i = 0; i < 2; i++) {
		if (p->fd[i] < 0)
			continue;
		ev_io_stop(p->w->loop, &p->rio[i]);
		ev_io_stop(p->w->loop, &p->wio[i]);
		if (abort_conn) {
			struct linger lg = { .l_onoff = 1, .l_linger = 0 };

			setsockopt(p->fd[i], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		}
		if (p->ssl[i]) {
			SSL_free(p->ssl[i]);
			p->ssl[i] = NULL;
			ERR_clear_error();
		}
		close(p->fd[i]);
		p->fd[i] = -1;
	}
}

/* ---- TLS bridges ------------------------------------------------------------------ */

#define WK_TLSB_MAGIC 0x544c5342u	/* struct wk_tlsb */

/* A data connection that arrived over TURN-TLS: side 0 its TLS session, side 1 one end
 * of a socket pair whose other end is the plain data connection the owner worker binds
 * (locally or handed over through the master), so the relay itself never sees TLS. */
struct wk_tlsb {
	uint32_t magic;
	struct wk_tlsb *next, **pprev;	/* the worker's list */
	struct wk_pipe pipe;
	uint8_t bufs[];
};

static void wk_tlsb_free(struct wk_tlsb *b, bool abort_conn)
{
	assert(b->magic == WK_TLSB_MAGIC);
	*b->pprev = b->next;
	if (b->next)
		b->next->pprev = b->pprev;
	b->pipe.w->n_tlsbs--;
	wk_pipe_close(&b->pipe, abort_conn);
	b->magic = 0;
	free(b);
}

static void wk_tlsb_done(struct wk_pipe *p, bool reset)
{
	wk_tlsb_free((struct wk_tlsb *)((char *)p - offsetof(struct wk_tlsb, pipe)), reset);
}

/* The plain end closed (not just shut down for writing): nobody will ever read what the
 * client sends, so the bridge ends with the close_notify it just sent, rather than wait
 * for the client's end for ever (an owner that closed a connection at its deadline left
 * the bridge's descriptors and buffers behind, attacker walk aw2 F4). A plain end that
 * was only shut down (a half-close relayed from the peer) keeps the bridge; a later close
 * of it ends the bridge when the client next sends (the write fails). */
static bool wk_tlsb_shut(struct wk_pipe *p, int j)
{
	struct pollfd pfd = { .fd = p->fd[1], .events = POLLOUT };

	return j == 0 && poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLHUP | POLLERR)) != 0;
}

static const struct wk_pipe_ops wk_tlsb_ops = { .done = wk_tlsb_done, .shut = wk_tlsb_shut };

void wk_pipe_sockbuf(int fd, size_t cap)
{
	int domain = AF_UNSPEC;
	socklen_t dl = sizeof(domain);

	/* An AF_UNIX stream socket does not autotune: its send buffer stays at
	 * net.core.wmem_default, and it has no receive buffer of its own. */
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) < 0 || domain == AF_UNIX)
		return;
	wk_sockbuf_stream(fd, wk_sockbuf_pair(cap), wk_sockbuf_pair(cap));
}

int wk_tlsb_new(struct worker *w, int fd, SSL *ssl, const uint8_t *out, size_t out_len)
{
	size_t cap = w->hot.tcp_buf;
	struct wk_tlsb *b;
	int sp[2];

	if (out_len > cap || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
					sp) < 0)
		return -1;
	b = calloc(1, sizeof(*b) + 2 * cap);
	if (!b) {
		close(sp[0]);
		close(sp[1]);
		return -1;
	}
	b->magic = WK_TLSB_MAGIC;
	wk_pipe_sockbuf(fd, cap);	/* the data connection, bounded at accept as TURN-TLS */
	SSL_set_options(ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);	/* a bare FIN is an end */
	wk_pipe_init(&b->pipe, w, &wk_tlsb_ops, b->bufs, cap);
	/* What the TLS side still owes the client (the ConnectionBind response) waits in
	 * the buffer written to side 0, buf[1]. */
	wk_pipe_side(&b->pipe, 0, fd, ssl, NULL, 0);
	wk_pipe_side(&b->pipe, 1, sp[0], NULL, out, out_len);
	b->next = w->tlsbs;
	if (b->next)
		b->next->pprev = &b->next;
	b->pprev = &w->tlsbs;
	w->tlsbs = b;
	w->n_tlsbs++;
	wk_pipe_start(&b->pipe);
	return sp[1];
}

void wk_tlsb_close_all(struct worker *w)
{
	while (w->tlsbs)
		wk_tlsb_free(w->tlsbs, false);
}
