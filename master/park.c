/* Master: stream connections a live upgrade hands from the old workers to the new ones
 * (common/park.h; the workers' side is worker/park.c).
 *
 *   old worker -> old master   IPC_PARK answered with each parkable TURN-TCP connection:
 *                              IPC_STREAM_PART pieces and a last IPC_STREAM with the
 *                              socket, then the worker exits;
 *   old master -> new master   once the old workers are gone and the lock is free, the
 *                              same frames on the upgrade channel, then IPC_STREAM_END;
 *   new master -> new workers  after the take-over copied the table (TURN-TCP records
 *                              included), each connection goes in the heritage of the slot
 *                              that owns its allocation's record now (park_heritage).
 *
 * The old master keeps its copies until the new master serves: when the upgrade fails it
 * gives them to its own respawned workers instead, with their own table. */
#include "config.h"

#include "master/master.h"
#include "master/relayho.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/grow.h"
#include "common/log.h"
#include "common/park.h"
#include "worker/worker.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"

struct mpark {
	uint8_t *blob;
	size_t len;
	int fd;
	unsigned slot;			/* whose heritage it goes in */
	uint32_t rec_idx;		/* in the table that slot's worker adopts from */
};

struct park_list {
	struct mpark *v;
	size_t n, cap;
	struct park_asm *pasm;		/* per slot: pieces received so far */
	unsigned n_pasm;
	size_t lost;			/* sockets that ended here, not yet counted */
};

static struct park_list *list_get(struct master *m)
{
	if (m->parked == NULL)
		m->parked = calloc(1, sizeof(*m->parked));
	return m->parked;
}

/* Takes blob and fd (closed on failure). From a live upgrade (upgrade): a UDP relay
 * socket of a TURN-TCP call when the new master does not take them (upgrade_urelays) is
 * closed: 1. */
static int list_push(struct master *m, uint8_t *blob, size_t len, int fd, bool upgrade)
{
	struct park_list *pl = list_get(m);
	struct park_hdr h;

	if (pl == NULL || park_check(blob, len, &h) < 0)
		goto fail;
	if (upgrade && h.kind == PARK_URELAY && !upgrade_urelays(m)) {
		/* its port is bound again by the new worker, once the old worker's copy
		 * is closed too (wk_alloc_forget) */
		free(blob);
		close(fd);
		return 1;
	}
	if (GROW_ARRAY(&pl->v, &pl->cap, pl->n + 1, 64) < 0)
		goto fail;
	pl->v[pl->n++] = (struct mpark){ blob, len, fd, h.slot % m->n_slots, h.rec_idx };
	return 0;
fail:
	free(blob);
	close(fd);
	return -EBADMSG;
}

int park_add(struct master *m, uint8_t *blob, size_t len, int fd)
{
	return list_push(m, blob, len, fd, false);
}

void park_collect(struct mworker *w, const struct ipc_msg *msg, int *fd)
{
	struct master *m = w->m;
	struct park_list *pl = list_get(m);
	struct park_asm *a;
	uint8_t *blob;
	size_t len;
	int rc;

	if (pl == NULL || !m->handing_over)
		return;	/* not asked for: the connection closes with our copy */
	if (pl->pasm == NULL) {
		pl->pasm = calloc(m->n_slots, sizeof(*pl->pasm));
		if (pl->pasm == NULL)
			return;
		pl->n_pasm = m->n_slots;
	}
	a = &pl->pasm[w->slot];
	rc = park_asm_add(a, msg);
	if (rc <= 0) {
		if (rc < 0) {
			log_warn("master", "worker %u: a handed-over connection's state is "
					   "too large: it ends", w->slot);
			pl->lost++;
		}
		return;
	}
	blob = park_asm_take(a, &len);
	if (list_push(m, blob, len, *fd, true) < 0) {
		log_warn("master", "worker %u: a handed-over connection's state is malformed",
			 w->slot);
		pl->lost++;
	}
	*fd = -1;
}

void park_collect_lost(struct mworker *w, const struct ipc_msg *msg)
{
	struct master *m = w->m;
	struct park_list *pl = m->parked;

	log_warn("master", "worker %u: a descriptor it sent did not fit under this master's "
			   "limit (LimitNOFILE, %s)", w->slot,
		 msg->hdr.type == IPC_STREAM ? "a handed-over socket: it ends" : "closed");
	if (msg->hdr.type != IPC_STREAM || pl == NULL || !m->handing_over)
		return;
	/* its pieces so far go with it */
	if (pl->pasm != NULL && w->slot < pl->n_pasm)
		park_asm_free(&pl->pasm[w->slot]);
	pl->lost++;
}

void park_count_lost(struct master *m)
{
	struct park_list *pl = m->parked;

	if (pl == NULL || pl->lost == 0 || m->shm == NULL)
		return;
	/* Slot 0's counters: written while no worker of ours runs (the old master's
	 * stopped, the new master's not started yet), carried over by the take-over. */
	shm_ctr_add(shm_slot_counters(m->shm, 0), SHM_CTR_STREAMS_HANDOVER_ENDED, pl->lost);
	pl->lost = 0;
}

size_t park_count(const struct master *m)
{
	return m->parked != NULL ? m->parked->n : 0;
}

int park_forward(struct master *m, int fd, int timeout_ms)
{
	struct park_list *pl = m->parked;
	struct timespec t0, t;
	int rc = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (size_t i = 0; pl != NULL && i < pl->n && rc == 0; i++) {
		long spent;

		clock_gettime(CLOCK_MONOTONIC, &t);
		spent = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
		rc = spent >= timeout_ms ? -ETIMEDOUT
					 : park_send(fd, pl->v[i].blob, pl->v[i].len, pl->v[i].fd,
						     (int)(timeout_ms - spent));
	}
	if (rc == 0 && upgrade_peer_relays(m))
		rc = relayho_forward(m, fd, timeout_ms);
	if (rc == 0)
		rc = ipc_send(fd, IPC_STREAM_END, NULL, 0, -1);
	return rc;
}

/* The record a handed-over connection named in the old table, in ours. */
static int remap(struct master *m, struct mpark *p)
{
	uint32_t n = 0, n2 = 0;
	const uint32_t *to = shm_taken(m->shm, &n), *from = shm_taken_from(m->shm, &n2);
	unsigned owner = 0;
	bool torn = true;

	if (p->rec_idx == PARK_NO_REC)
		return 0;
	for (uint32_t i = 0; to != NULL && from != NULL && i < n; i++) {
		if (from[i] != p->rec_idx)
			continue;
		if (shm_alloc_is_torn(m->shm, to[i], &torn, &owner) < 0 || torn ||
		    owner >= m->n_slots)
			break;
		p->rec_idx = to[i];
		p->slot = owner;
		return 0;
	}
	return -ENOENT;
}

size_t park_remap_from(struct master *m, size_t before)
{
	size_t kept = before, closed = 0;

	if (m->parked == NULL)
		return 0;
	for (size_t i = before; i < m->parked->n; i++) {
		struct mpark *p = &m->parked->v[i];

		if (remap(m, p) < 0) {
			close(p->fd);
			free(p->blob);
			closed++;
			continue;
		}
		m->parked->v[kept++] = *p;
	}
	m->parked->n = kept;
	return closed;
}

int park_receive(struct master *m, int fd, int timeout_ms)
{
	struct park_asm a = { 0 };
	struct ipc_msg *msg = malloc(sizeof(*msg));
	struct timespec t0, t;
	size_t before = park_count(m), lost = 0;
	int rc = -ETIMEDOUT;

	if (msg == NULL)
		return -ENOMEM;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		long spent;
		int got = -1;

		clock_gettime(CLOCK_MONOTONIC, &t);
		spent = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
		if (spent >= timeout_ms) {
			rc = -ETIMEDOUT;
			break;
		}
		if (poll(&pfd, 1, (int)(timeout_ms - spent)) <= 0)
			continue;
		rc = ipc_recv(fd, msg, &got);
		if (rc == -EMFILE && msg->hdr.type == IPC_STREAM) {
			/* our descriptor limit: the socket ends, its pieces with it */
			log_warn("master", "upgrade: a handed-over socket did not fit under this "
					   "master's descriptor limit (LimitNOFILE): it ends");
			park_asm_free(&a);
			lost++;
		}
		if (rc == -EAGAIN || rc == -EPROTO || rc == -EMFILE)
			continue;
		if (rc < 0)
			break;
		if (msg->hdr.type == IPC_STREAM_END)
			break;
		if (msg->hdr.type == IPC_RELAY_CHAN) {
			relayho_receive(m, msg, got);
			continue;
		}
		if (msg->hdr.type != IPC_STREAM_PART && msg->hdr.type != IPC_STREAM) {
			if (got >= 0)
				close(got);
			continue;
		}
		if (park_asm_add(&a, msg) == 1) {
			size_t len;
			uint8_t *blob = park_asm_take(&a, &len);

			if (list_push(m, blob, len, got, true) < 0)
				lost++;
		} else if (got >= 0) {
			close(got);
		}
	}
	park_asm_free(&a);
	free(msg);
	lost += park_remap_from(m, before);
	if (list_get(m) != NULL)
		m->parked->lost += lost;
	park_count_lost(m);	/* before our workers start */
	if (rc < 0 && rc != -EPIPE)
		log_warn("master", "upgrade: the old master's connections did not all come: %s",
			 strerror(-rc));
	log_info("master", "upgrade: %zu sockets of TCP calls handed over (connections, RFC 6062 "
			   "peer and listening relay sockets, TURN-TCP calls' UDP relay sockets)",
		 park_count(m));
	return rc;
}

static int by_record(const void *a, const void *b)
{
	const struct worker_parked *p = a, *q = b;

	/* within a record, the order they came in (qsort is not stable): the peer connections
	 * of one are sent newest first, and the worker rebuilds their age from it */
	if (p->rec_idx != q->rec_idx)
		return (p->rec_idx > q->rec_idx) - (p->rec_idx < q->rec_idx);
	return (p->seq > q->seq) - (p->seq < q->seq);
}

struct worker_parked *park_heritage(const struct master *m, unsigned slot, size_t *n)
{
	const struct park_list *pl = m->parked;
	struct worker_parked *v;
	size_t k = 0;

	*n = 0;
	if (pl == NULL || pl->n == 0)
		return NULL;
	v = calloc(pl->n, sizeof(*v));
	if (v == NULL)
		return NULL;
	for (size_t i = 0; i < pl->n; i++)
		if (pl->v[i].slot == slot && pl->v[i].fd >= 0)
			v[k++] = (struct worker_parked){ pl->v[i].blob, pl->v[i].len, pl->v[i].fd,
							 pl->v[i].rec_idx, (uint32_t)i };
	qsort(v, k, sizeof(*v), by_record);	/* the worker binary-searches it */
	*n = k;
	return v;
}

void park_release(struct master *m)
{
	struct park_list *pl = m->parked;

	relayho_release(m);	/* handed over beside them, released with them */
	if (pl == NULL)
		return;
	for (size_t i = 0; i < pl->n; i++) {
		if (pl->v[i].fd >= 0)
			close(pl->v[i].fd);
		free(pl->v[i].blob);
	}
	for (unsigned i = 0; i < pl->n_pasm; i++)
		park_asm_free(&pl->pasm[i]);
	free(pl->pasm);
	free(pl->v);
	free(pl);
	m->parked = NULL;
}
