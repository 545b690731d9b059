/* Worker: stream connections in systemd's file descriptor store. Each plain TURN-TCP
 * connection that carries an allocation, and each bound RFC 6062 peer connection with its
 * data connection, goes to the master (IPC_FDSTORE with its name, common/fdname.h), which
 * hands it to systemd (master/fdstore.c: only the main process may) and keeps nothing but
 * the name. After a kill -9 of the whole daemon systemd gives them to the next start,
 * which takes them back with their allocations from the state file (worker/park.c, as
 * for a live upgrade). A connection leaves the store (IPC_FDUNSTORE) before its socket
 * closes, or the store would keep it open after we are done with it.
 *
 * Neither frame may be lost when the control socket is full (a worker that ends or starts
 * many connections at once, a master busy elsewhere): both go through the worker's queue of
 * control frames (ctlq.c), in order. A waiting FDSTORE borrows the connection's descriptor
 * (no descriptor more than the connection's own) and is keyed by its name: the
 * connection's end (wk_fdstore_conn_end, wk_fdstore_pair_end), which always comes before
 * its socket closes, takes it out of the queue, and neither frame goes. */
#include "config.h"

#include "worker/stream.h"
#include "worker/transport.h"
#include "worker/wk.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/fdname.h"
#include "common/ipc.h"
#include "common/log.h"
#include "stun/stun.h"

static void wk_fdstore_send(struct worker *w, const char *name, int fd)
{
	if (fd < 0 && wk_ctlq_cancel(w, name))
		return;
	/* A worker that leaves its records LIVE for the next process leaves their
	 * connections in the store too: a start after a crash takes both back. (A respawn
	 * cannot: the master removes the slot's names when it respawns.) */
	if (fd < 0 && w->leaving)
		return;
	/* A name's FDUNSTORE follows its FDSTORE (the queue keeps the order); a second
	 * FDSTORE of a name that waits already is not queued again (-EEXIST). Drops are
	 * logged by the queue. */
	(void)wk_ctlq_send(w, fd >= 0 ? IPC_FDSTORE : IPC_FDUNSTORE, name, strlen(name), fd, 0,
			   fd >= 0 ? name : NULL);
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
