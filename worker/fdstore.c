/* Worker: stream connections in systemd's file descriptor store. Each plain TURN-TCP
 * connection that carries an allocation, and each bound RFC 6062 peer connection with its
 * data connection, goes to the master (IPC_FDSTORE with its name, common/fdname.h), which
 * hands it to systemd (master/fdstore.c: only the main process may) and keeps nothing but
 * the name. After a kill -9 of the whole daemon systemd gives them to the next start,
 * which takes them back with their allocations from the state file (worker/park.c, as
 * for a live upgrade). A connection leaves the store (IPC_FDUNSTORE) before its socket
 * closes, or the store would keep it open after we are done with it.
 *
 * The control socket holds about 170 frames (wmem_default): a worker that ends or starts
 * more connections than that at once (a disconnect --user, a revocation, a listener
 * removed, a burst of new calls) while the master reads, or a master busy elsewhere,
 * fills it. What does not fit waits here, in order, and goes when the socket is writable
 * again (an EV_WRITE watcher, active only while something waits): a lost FDUNSTORE would
 * leave a dead connection in the store, given back at the next crash restart under the
 * name of a record that is free or another allocation's by then; a lost FDSTORE, a call
 * that does not survive one. A waiting FDSTORE borrows the connection's descriptor (no
 * descriptor more than the connection's own): the connection's end (wk_fdstore_conn_end,
 * wk_fdstore_pair_end), which always comes before its socket closes, takes it out of the
 * queue, and neither frame goes. A stopping worker sends what waits within a budget
 * that leaves the master's grace room for the session-record flush before it
 * (WK_FDSQ_STOP_MS below, wk_fdstore_stop). */
#include "config.h"

#include "worker/stream.h"
#include "worker/transport.h"
#include "worker/wk.h"

#include <errno.h>
#include <poll.h>
#include <search.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include "common/fdname.h"
#include "common/ipc.h"
#include "common/log.h"
#include "stun/stun.h"

/* A stopping worker waits this long at most for room, all its calls of wk_fdstore_stop
 * together (w->fdsq_until), WK_FDSQ_NOW_MS when the stop is immediate (w->stop_now), and
 * gives up after WK_FDSQ_STALL_MS without a frame sent (a master that reads takes tens of
 * thousands a second). The wait comes after the session-record flush's
 * (worker/recflush.c: at most half the master's grace), so the two stay within it with
 * room for the teardown: 2.5 s + 0.5 s of the 5 s of IPC_STOP_GRACE_MS, 0.5 s + 0.15 s
 * of the 1 s of IPC_STOP_NOW_GRACE_MS. A stop made immediate during our wait (the
 * master's 1 s from then) has at most 0.5 s of it left. */
#define WK_FDSQ_STOP_MS 500u
#define WK_FDSQ_NOW_MS 150u
#define WK_FDSQ_STALL_MS 200u

_Static_assert(IPC_STOP_GRACE_MS / 2 + WK_FDSQ_STOP_MS < IPC_STOP_GRACE_MS,
	       "both waits of a stop fit its grace");
_Static_assert(IPC_STOP_NOW_GRACE_MS / 2 + WK_FDSQ_NOW_MS < IPC_STOP_NOW_GRACE_MS,
	       "both waits of an immediate stop fit its grace");
_Static_assert(WK_FDSQ_STOP_MS < IPC_STOP_NOW_GRACE_MS, "a stop made immediate in our wait");

/* A frame that waits for room on the control socket. */
struct wk_fdsq_frame {
	TAILQ_ENTRY(wk_fdsq_frame) link;
	int fd;				/* IPC_FDSTORE: the connection's socket (borrowed),
					 * IPC_FDUNSTORE: -1 */
	char name[];
};

struct wk_fdsq {
	uint32_t magic;
	TAILQ_HEAD(, wk_fdsq_frame) q;	/* oldest first */
	size_t n;
	void *stores;			/* tsearch tree of the waiting FDSTOREs' names */
	ev_io wio;			/* the control socket writable; only while q is not
					 * empty */
	unsigned lost;			/* refused by the socket for another reason than room */
};

#define WK_FDSQ_MAGIC 0x66647371u	/* "fdsq" */

static struct wk_fdsq_frame *fdsq_frame_of(const char *name)
{
	return (struct wk_fdsq_frame *)(void *)(name - offsetof(struct wk_fdsq_frame, name));
}

static int fdsq_name_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

static int fdsq_send(struct worker *w, const char *name, int fd)
{
	return ipc_send(w->h->ctl_fd, fd >= 0 ? IPC_FDSTORE : IPC_FDUNSTORE, name, strlen(name),
			fd);
}

static bool fdsq_full(int rc)
{
	return rc == -EAGAIN || rc == -ENOBUFS;
}

static void fdsq_drop(struct wk_fdsq *q, struct wk_fdsq_frame *f)
{
	TAILQ_REMOVE(&q->q, f, link);
	q->n--;
	if (f->fd >= 0)
		(void)tdelete(f->name, &q->stores, fdsq_name_cmp);
	free(f);
}

static void fdsq_log_lost(struct worker *w, struct wk_fdsq *q)
{
	if (q->lost)
		log_warn("worker", "slot %u: %u fd store frames lost (control channel)", w->slot,
			 q->lost);
	q->lost = 0;
}

/* Sends what waits, oldest first, until the socket is full. */
static void fdsq_flush(struct worker *w, struct wk_fdsq *q)
{
	struct wk_fdsq_frame *f;

	while ((f = TAILQ_FIRST(&q->q)) != NULL) {
		int rc = fdsq_send(w, f->name, f->fd);

		if (fdsq_full(rc))
			return;
		if (rc < 0)
			q->lost++;	/* the master gone: nothing reads any more */
		fdsq_drop(q, f);
	}
	ev_io_stop(w->loop, &q->wio);
	fdsq_log_lost(w, q);
}

static void fdsq_write_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct worker *w = wk_checked(io->data);

	(void)loop;
	(void)revents;
	assert(w->fdsq != NULL && w->fdsq->magic == WK_FDSQ_MAGIC);
	fdsq_flush(w, w->fdsq);
}

/* Queues a frame that did not fit (or must follow one that waits). */
static void fdsq_push(struct worker *w, const char *name, int fd)
{
	struct wk_fdsq *q = w->fdsq;
	size_t len = strlen(name);
	struct wk_fdsq_frame *f;

	if (q == NULL && (q = calloc(1, sizeof(*q))) != NULL) {
		q->magic = WK_FDSQ_MAGIC;
		TAILQ_INIT(&q->q);
		ev_io_init(&q->wio, fdsq_write_cb, w->h->ctl_fd, EV_WRITE);
		q->wio.data = w;
		w->fdsq = q;
	}
	f = q != NULL ? malloc(sizeof(*f) + len + 1) : NULL;
	if (f == NULL) {
		log_warn("worker", "slot %u: fd store %s: %s", w->slot, name, strerror(ENOMEM));
		return;
	}
	f->fd = fd;
	memcpy(f->name, name, len + 1);
	if (fd >= 0) {
		char **in = tsearch(f->name, &q->stores, fdsq_name_cmp);

		if (in == NULL || *in != f->name) {	/* no memory, or it waits already */
			free(f);
			if (in == NULL)
				log_warn("worker", "slot %u: fd store %s: %s", w->slot, name,
					 strerror(ENOMEM));
			return;
		}
	}
	TAILQ_INSERT_TAIL(&q->q, f, link);
	q->n++;
	ev_io_start(w->loop, &q->wio);
}

/* A waiting FDSTORE of name: taken out with its borrowed descriptor (about to close);
 * true when there was one, so that the FDUNSTORE need not go either. */
static bool fdsq_cancel(struct worker *w, const char *name)
{
	struct wk_fdsq *q = w->fdsq;
	void *found;

	if (q == NULL || q->stores == NULL || (found = tfind(name, &q->stores,
							     fdsq_name_cmp)) == NULL)
		return false;
	fdsq_drop(q, fdsq_frame_of(*(char **)found));
	if (TAILQ_EMPTY(&q->q))
		ev_io_stop(w->loop, &q->wio);
	return true;
}

static void wk_fdstore_send(struct worker *w, const char *name, int fd)
{
	int rc;

	if (fd < 0 && fdsq_cancel(w, name))
		return;
	/* A worker that leaves its records LIVE for the next process leaves their
	 * connections in the store too: a start after a crash takes both back. (A respawn
	 * cannot: the master removes the slot's names when it respawns.) */
	if (fd < 0 && w->leaving)
		return;
	/* Behind what waits, never before it: a name's FDUNSTORE follows its FDSTORE. */
	if (w->fdsq != NULL && !TAILQ_EMPTY(&w->fdsq->q)) {
		fdsq_push(w, name, fd);
		return;
	}
	rc = fdsq_send(w, name, fd);
	if (fdsq_full(rc))
		fdsq_push(w, name, fd);
	else if (rc < 0)
		log_warn("worker", "slot %u: fd store %s: %s", w->slot, name, strerror(-rc));
}

void wk_fdstore_stop(struct worker *w)
{
	struct wk_fdsq *q = w->fdsq;
	uint64_t now = mono_ms(), progress = now;
	struct wk_fdsq_frame *f;
	size_t before;

	if (q == NULL)
		return;
	if (w->fdsq_until == 0)
		w->fdsq_until = now + (w->stop_now ? WK_FDSQ_NOW_MS : WK_FDSQ_STOP_MS);
	before = q->n;
	for (;;) {
		struct pollfd pfd = { .fd = w->h->ctl_fd, .events = POLLOUT };
		uint64_t until;

		fdsq_flush(w, q);
		now = mono_ms();
		if (q->n < before)
			progress = now;
		before = q->n;
		until = progress + WK_FDSQ_STALL_MS < w->fdsq_until ? progress + WK_FDSQ_STALL_MS
								     : w->fdsq_until;
		if (TAILQ_EMPTY(&q->q) || now >= until)
			break;
		(void)poll(&pfd, 1, (int)(until - now));
	}
	if (q->n > 0)
		log_warn("worker", "slot %u: %zu fd store frames not sent at exit: the master did "
				   "not read in time", w->slot, q->n);
	fdsq_log_lost(w, q);
	while ((f = TAILQ_FIRST(&q->q)) != NULL)
		fdsq_drop(q, f);
	ev_io_stop(w->loop, &q->wio);
	w->fdsq = NULL;
	free(q);
}

/* The connection ends for good in this process: its FIN (or, with SO_LINGER 0, the RST
 * of the last close) must not wait for the store's copy to go. Not while the worker
 * hands its connections over (a live upgrade) or leaves them for the next start. */
static void wk_fdstore_shut(struct worker *w, int fd)
{
	if (fd >= 0 && !w->leaving && w->park_start == 0)
		(void)shutdown(fd, SHUT_RDWR);
}

void wk_fdstore_conn(struct worker *w, struct wk_tconn *c)
{
	char name[FDNAME_MAX + 1];
	uint32_t flags;

	if (!w->h->fdstore || c->fdstored || !c->alloc || c->ssl || c->dgram || c->fd < 0)
		return;
	flags = PARK_F_AUTHED | (c->alloc->tcp ? PARK_F_TCPALLOC : 0);
	if (fdname_make(name, sizeof(name), PARK_TCONN, w->slot, c->alloc->rec_idx, 0, flags,
			c->l->name) < 0)
		return;	/* a listener name too long for systemd: ends with a crash */
	wk_fdstore_send(w, name, c->fd);
	c->fdstored = c->fds_ever = true;
	c->fds_rec = c->alloc->rec_idx;
	c->fds_flags = flags;
}

void wk_fdstore_conn_detach(struct worker *w, struct wk_tconn *c)
{
	char name[FDNAME_MAX + 1];

	if (!c->fdstored)
		return;
	c->fdstored = false;
	if (fdname_make(name, sizeof(name), PARK_TCONN, w->slot, c->fds_rec, 0, c->fds_flags,
			c->l->name) == 0)
		wk_fdstore_send(w, name, -1);
}

/* Not only while c is in the store: after its allocation ended (detached) its FDUNSTORE
 * may still wait in our queue or the master's socket, and the store's copy would hold
 * the FIN of our close until it is read. */
void wk_fdstore_conn_end(struct worker *w, struct wk_tconn *c)
{
	if (c->fds_ever)
		wk_fdstore_shut(w, c->fd);
	wk_fdstore_conn_detach(w, c);
}

bool wk_fdstore_pair(struct worker *w, uint32_t rec, uint32_t id, int peer_fd, int data_fd)
{
	char name[FDNAME_MAX + 1];

	if (!w->h->fdstore || peer_fd < 0 || data_fd < 0)
		return false;
	(void)fdname_make(name, sizeof(name), PARK_TPEER, w->slot, rec, id, PARK_F_BOUND, NULL);
	wk_fdstore_send(w, name, peer_fd);
	(void)fdname_make(name, sizeof(name), PARK_TDATA, w->slot, rec, id, 0, NULL);
	wk_fdstore_send(w, name, data_fd);
	return true;
}

void wk_fdstore_pair_end(struct worker *w, uint32_t rec, uint32_t id, int peer_fd, int data_fd)
{
	char name[FDNAME_MAX + 1];

	wk_fdstore_shut(w, peer_fd);
	wk_fdstore_shut(w, data_fd);
	(void)fdname_make(name, sizeof(name), PARK_TPEER, w->slot, rec, id, PARK_F_BOUND, NULL);
	wk_fdstore_send(w, name, -1);
	(void)fdname_make(name, sizeof(name), PARK_TDATA, w->slot, rec, id, 0, NULL);
	wk_fdstore_send(w, name, -1);
}

bool wk_fdstore_owns(int fd, bool client, const struct shm_alloc *rec)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct shm_addr a;

	if (client ? getpeername(fd, (struct sockaddr *)&ss, &sl) < 0
			       : getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		return false;
	memset(&a, 0, sizeof(a));
	wk_addr_to_shm((struct sockaddr *)&ss, &a);
	return memcmp(&a, client ? &rec->client : &rec->relay, sizeof(a)) == 0;
}

/* 1: a frame starts at p (n bytes there), 0: none does, -1: more bytes needed to say. */
static int frame_start(const struct wk_tconn *c, const uint8_t *p, size_t n, uint64_t now_ns)
{
	uint32_t cookie;

	if (n < 4)
		return -1;
	if ((p[0] & 0xC0) == 0x40)
		return c->alloc && wk_alloc_chan_by_num(c->alloc, (uint16_t)(p[0] << 8 | p[1]),
							now_ns) != NULL;
	if ((p[0] & 0xC0) != 0 || (p[3] & 3) != 0)
		return 0;
	if (n < 8)
		return -1;
	cookie = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
	return cookie == STUN_MAGIC_COOKIE;
}

bool wk_fdstore_resync(struct worker *w, struct wk_tconn *c)
{
	uint64_t now_ns = mono_ns();
	size_t pos = 0;
	int rc = 0;

	while (pos < c->in_len && (rc = frame_start(c, c->in + pos, c->in_len - pos, now_ns)) == 0)
		pos++;
	if (pos > 0) {
		memmove(c->in, c->in + pos, c->in_len - pos);
		c->in_len -= pos;
		shm_ctr_add(w->ctr, SHM_CTR_ERR_MALFORMED, 1);
		log_info("worker", "slot %u: allocation %u: %zu bytes of a frame cut by the crash "
				   "skipped", w->slot, c->alloc ? c->alloc->rec_idx : 0, pos);
	}
	if (rc != 1)
		return false;
	c->resync = false;
	return true;
}
