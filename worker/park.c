/* Worker: TURN-TCP connections across a live upgrade. The old worker parks each plain
 * TURN-TCP connection (its socket, the partial frame its input buffer holds, the bytes
 * its output buffer has not written, the record of its allocation) with the master and
 * leaves the record LIVE, with its allocation's UDP relay sockets, or for an RFC 6062
 * allocation its listening relay socket, its
 * peer connections and their data connections with what their buffers hold
 * (tcprelay.c); the new worker of the slot
 * the record was copied to restores the connection with the allocation around it, as it
 * adopts a UDP allocation, and the relay, peer and data sockets with it. Nothing is read
 * from or written to the sockets in between: what either side sends meanwhile waits in
 * them (a peer's datagrams in the relay socket), and neither sees a reset. */
#include "config.h"

#include "worker/lifecycle.h"
#include "worker/stream.h"
#include "worker/transport.h"
#include "worker/turn.h"
#include "worker/wk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/park.h"

/* The UDP relay sockets of a's allocation (a UDP-relayed TURN-TCP call): the same
 * sockets in the new worker, so nothing rebinds their ports (another program could take
 * one meanwhile) and a peer's datagrams meanwhile wait in them. Returns how many went;
 * one that did not is bound again by the new worker. */
static unsigned wk_park_urelays(struct worker *w, const struct wk_alloc *a)
{
	unsigned n = 0;

	for (uint32_t i = 0; i < 2; i++) {
		struct park_hdr h;

		if (a->relay[i].fd < 0)
			continue;
		memset(&h, 0, sizeof(h));
		h.kind = PARK_URELAY;
		h.rec_idx = a->rec_idx;
		h.id = i;
		if (wk_park_send(w, &h, NULL, 0, NULL, 0, a->relay[i].fd) == 0)
			n++;
	}
	return n;
}

static int wk_park_one(struct worker *w, struct wk_tconn *c)
{
	struct park_hdr h;

	if (strlen(c->l->name) > IPC_NAME_MAX)
		return -ENAMETOOLONG;
	memset(&h, 0, sizeof(h));
	h.kind = PARK_TCONN;
	h.rec_idx = c->alloc ? c->alloc->rec_idx : PARK_NO_REC;
	h.flags = (c->authed ? PARK_F_AUTHED : 0) |
		  (c->alloc && c->alloc->tcp ? PARK_F_TCPALLOC : 0);
	h.peer_len = c->peer_len;
	memcpy(&h.peer, &c->peer, c->peer_len);
	memcpy(h.listener, c->l->name, strlen(c->l->name));
	return wk_park_send(w, &h, c->in, c->in_len, c->out + c->out_off, c->out_len - c->out_off,
			    c->fd);
}

void wk_park_all(struct worker *w)
{
	unsigned parked = 0, failed = 0;
	size_t bytes_in = 0, bytes_out = 0;

	w->park_start = mono_ms();
	for (size_t i = 0; i < w->n_ls; i++) {
		struct wk_listener *l = w->ls[i];
		struct wk_tconn *c, *next;

		if (!l->active || l->proto != WORKER_PROTO_TCP)
			continue;
		for (c = l->conns; c; c = next) {
			unsigned with = 0;

			next = c->next;
			if (!wk_tconn_parkable(c))
				continue;
			/* The allocation's relay sockets (and an RFC 6062 allocation's peer
			 * and data connections) go first: the new worker takes them when it
			 * adopts the allocation; counted once the connection went too. */
			if (c->alloc && c->alloc->tcp)
				with = wk_tcpr_park(w, c->alloc);
			else if (c->alloc)
				with = wk_park_urelays(w, c->alloc);
			bytes_in += c->in_len;
			bytes_out += c->out_len - c->out_off;
			if (wk_park_one(w, c) < 0) {
				/* what went with it ends in the new worker, which counts it */
				failed++;
				continue;
			}
			parked += with;
			/* The master holds the socket now: ours closes, the record stays. */
			if (c->alloc)
				wk_alloc_forget(w, c->alloc);
			wk_tconn_close(w, c);
			parked++;
		}
	}
	shm_ctr_add(w->ctr, SHM_CTR_STREAMS_HANDOVER_ENDED, failed);
	if (parked || failed)
		log_info("worker",
			 "slot %u: %u stream connections handed over, TURN-TCP buffers %zu bytes "
			 "in, %zu out%s",
			 w->slot, parked, bytes_in, bytes_out,
			 failed ? " (some could not be: they end)" : "");
}

static struct wk_listener *wk_park_listener(struct worker *w, const char *name)
{
	for (size_t i = 0; i < w->n_ls; i++) {
		struct wk_listener *l = w->ls[i];

		if (l->active && l->snap_ok && l->proto == WORKER_PROTO_TCP && !l->secure &&
		    strcmp(l->name, name) == 0)
			return l;
	}
	return NULL;
}

/* Restores h->parked[i] (not yet restored) as a connection, or NULL; rec: the record
 * it must belong to when it was taken back after a crash (NULL: none). */
static struct wk_tconn *wk_park_restore(struct worker *w, size_t i, const struct shm_alloc *rec)
{
	const struct worker_parked *p = &w->h->parked[i];
	const uint8_t *body = p->blob + sizeof(struct park_hdr);
	struct wk_listener *l;
	struct wk_tconn *c;
	struct park_hdr h;

	if (!w->park_used || w->park_used[i] || park_check(p->blob, p->len, &h) < 0 ||
	    h.kind != PARK_TCONN)
		return NULL;
	l = wk_park_listener(w, h.listener);
	if (!l || ((h.flags & PARK_F_CRASH) &&
		   (!rec || !wk_fdstore_owns(p->fd, true, rec))))
		return NULL;
	c = wk_tcp_restore(w, l, p->fd, (const struct sockaddr *)&h.peer, h.peer_len, body,
			   h.in_len, body + h.in_len, h.out_len, (h.flags & PARK_F_AUTHED) != 0);
	if (c) {
		w->park_used[i] = true;
		c->resync = (h.flags & PARK_F_CRASH) != 0;
	}
	return c;
}

static void wk_park_init(struct worker *w)
{
	if (w->park_used || w->h->n_parked == 0)
		return;
	w->park_used = calloc(w->h->n_parked, sizeof(*w->park_used));
}

/* The first entry of record idx in the heritage, or n_parked: the heritage is sorted by
 * record (park_heritage), so that an adoption looks at its own entries only. */
static size_t wk_park_first(const struct worker *w, uint32_t idx)
{
	size_t lo = 0, hi = w->h->n_parked;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (w->h->parked[mid].rec_idx < idx)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The entries of record idx: i from wk_park_first while this holds. */
static bool wk_park_of(const struct worker *w, size_t i, uint32_t idx)
{
	return i < w->h->n_parked && w->h->parked[i].rec_idx == idx;
}

/* The socket of the parked entry of kind and id (TDATA: the peer connection's; URELAY:
 * which; TRELAY: 0) for record idx, taken; or -1. */
static int wk_park_take(struct worker *w, uint32_t idx, enum park_kind kind, uint32_t id)
{
	for (size_t i = wk_park_first(w, idx); wk_park_of(w, i, idx); i++) {
		const struct worker_parked *p = &w->h->parked[i];
		struct park_hdr h;

		if (w->park_used[i] || park_check(p->blob, p->len, &h) < 0 || h.kind != kind ||
		    h.id != id)
			continue;
		w->park_used[i] = true;
		return p->fd;
	}
	return -1;
}

/* The peer connections (and their data connections) of RFC 6062 allocation a. */
static void wk_park_tpeers(struct worker *w, struct wk_alloc *a)
{
	for (size_t i = wk_park_first(w, a->rec_idx); wk_park_of(w, i, a->rec_idx); i++) {
		const struct worker_parked *p = &w->h->parked[i];
		struct park_hdr h;
		int data_fd = -1;

		if (w->park_used[i] || park_check(p->blob, p->len, &h) < 0 || h.kind != PARK_TPEER ||
		    ((h.flags & PARK_F_CRASH) && !wk_fdstore_owns(p->fd, false, a->rec)))
			continue;	/* one that does not belong: wk_park_rest closes it */
		w->park_used[i] = true;
		if (h.flags & PARK_F_BOUND) {
			data_fd = wk_park_take(w, a->rec_idx, PARK_TDATA, h.id);
			if (data_fd < 0) {
				close(p->fd);
				w->park_lost++;
				continue;
			}
		}
		if (wk_tcpr_restore(w, a, &h, p->blob + sizeof(h), p->fd, data_fd) < 0) {
			close(p->fd);
			w->park_lost++;
			if (data_fd >= 0) {
				close(data_fd);
				w->park_lost++;
			}
		}
	}
}

int wk_park_adopt(struct worker *w, uint32_t idx, struct shm_alloc *rec)
{
	struct wk_tconn *c = NULL;
	struct wk_alloc *a;
	bool tcp = false;
	int rc, fd0 = -1, fd1 = -1;

	wk_park_init(w);
	for (size_t i = wk_park_first(w, idx); wk_park_of(w, i, idx) && !c; i++) {
		struct park_hdr h;

		if (park_check(w->h->parked[i].blob, w->h->parked[i].len, &h) < 0)
			continue;
		c = wk_park_restore(w, i, rec);
		tcp = (h.flags & PARK_F_TCPALLOC) != 0;
	}
	if (!c)
		return -ENOENT;
	rc = wk_alloc_attach_conn(w, c, idx, rec, &a);
	if (rc == 0) {
		/* The relay sockets handed over with the connection (an RFC 6062
		 * allocation's listening one, or its UDP ones); one that was not is bound
		 * again (a listening one beside its peer connections: SO_REUSEADDR; never
		 * beside another listening socket, wk_relay_tcp_bind). */
		a->tcp = tcp;
		fd0 = wk_park_take(w, idx, tcp ? PARK_TRELAY : PARK_URELAY, 0);
		fd1 = tcp ? -1 : wk_park_take(w, idx, PARK_URELAY, 1);
		rc = wk_adopt_relay(w, a, idx, rec, fd0, fd1);
	}
	if (rc < 0) {
		/* the connection, and the relay sockets taken with it (closed: their
		 * allocation is forgotten) */
		wk_tconn_close(w, c);
		w->park_lost += 1 + (fd0 >= 0) + (fd1 >= 0);
		return rc;
	}
	if (tcp)
		wk_park_tpeers(w, a);
	wk_fdstore_conn(w, c);
	(void)wk_tconn_restart(w, c);
	return 0;
}

void wk_park_rest(struct worker *w)
{
	unsigned restored = 0, ended = 0;

	wk_park_init(w);
	for (size_t i = 0; i < w->h->n_parked; i++) {
		const struct worker_parked *p = &w->h->parked[i];
		struct wk_tconn *c;

		if (w->park_used && w->park_used[i]) {
			restored++;
			continue;
		}
		c = p->rec_idx == PARK_NO_REC ? wk_park_restore(w, i, NULL) : NULL;
		if (c) {
			restored++;
			(void)wk_tconn_restart(w, c);
			continue;
		}
		/* Its allocation could not be adopted, or no listener serves it now. */
		close(p->fd);
		ended++;
	}
	free(w->park_used);
	w->park_used = NULL;
	/* Counted once the new workers have them (each socket: a TURN-TCP connection, a
	 * peer connection, a data connection). */
	restored -= w->park_lost < restored ? w->park_lost : restored;
	ended += w->park_lost;
	shm_ctr_add(w->ctr, SHM_CTR_STREAMS_HANDED_OVER, restored);
	shm_ctr_add(w->ctr, SHM_CTR_STREAMS_HANDOVER_ENDED, ended);
	if (restored || ended)
		log_info("worker", "slot %u: %u stream connections taken over, %u ended", w->slot,
			 restored, ended);
}
