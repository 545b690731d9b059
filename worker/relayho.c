/* Worker: UDP relay sockets handed over in a live upgrade (worker/relayho.h). */
#include "config.h"

#include "worker/relayho.h"

#include "worker/table.h"
#include "worker/wk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/grow.h"
#include "common/ipc.h"
#include "common/log.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"

void wk_relayho_chan(struct worker *w, int fd)
{
	if (w->relay_tx >= 0)
		close(w->relay_tx);
	w->relay_tx = fd;
}

/* Writes the batch and stops watching what went; the sockets stay open with their
 * allocations until the worker's exit closes our copies. */
static int relayho_flush(struct worker *w, struct wk_relay **rs, const uint32_t *keys,
			 const int *fds, size_t n)
{
	int rc;

	if (n == 0)
		return 0;
	/* Non-blocking and never waited on: nobody reads before the new worker starts. */
	rc = ipc_send_fds(w->relay_tx, IPC_RELAYS, keys, n * sizeof(*keys), fds, n);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		ev_io_stop(w->loop, &rs[i]->io);
	return 0;
}

size_t wk_relayho_send(struct worker *w)
{
	struct wk_relay *rs[IPC_FDS_MAX];
	uint32_t keys[IPC_FDS_MAX];
	int fds[IPC_FDS_MAX];
	size_t n = 0, sent = 0;
	struct wk_alloc *a;
	int rc = 0;

	if (w->relay_tx < 0)
		return 0;
	LIST_FOREACH(a, &w->allocs, link) {
		/* A UDP client's only: a stream client's goes with its connection (park.c),
		 * a DTLS client's stays with its lingering association (dtlslinger.c). */
		if (a->conn != NULL || a->tcp || a->rec == NULL ||
		    a->rec->client_transport != SHM_TRANSPORT_UDP)
			continue;
		for (unsigned i = 0; i < 2 && rc == 0; i++) {
			if (a->relay[i].fd < 0)
				continue;
			rs[n] = &a->relay[i];
			keys[n] = IPC_RELAY_KEY(a->rec_idx, i);
			fds[n++] = a->relay[i].fd;
			if (n < IPC_FDS_MAX)
				continue;
			rc = relayho_flush(w, rs, keys, fds, n);
			sent += rc == 0 ? n : 0;
			n = 0;
		}
		if (rc < 0)
			break;
	}
	if (rc == 0) {
		rc = relayho_flush(w, rs, keys, fds, n);
		sent += rc == 0 ? n : 0;
	}
	close(w->relay_tx);
	w->relay_tx = -1;
	if (rc < 0)
		log_warn("worker", "slot %u: %zu relay sockets handed over, the rest cannot be "
				   "(%s): the new worker binds their ports again",
			 w->slot, sent, strerror(-rc));
	else if (sent > 0)
		log_info("worker", "slot %u: %zu relay sockets handed over", w->slot, sent);
	return sent;
}

size_t wk_relayho_abandon(struct worker *w)
{
	struct wk_alloc *a, *next;
	size_t n = 0;

	for (a = LIST_FIRST(&w->allocs); a != NULL; a = next) {
		next = LIST_NEXT(a, link);
		/* sent: a UDP client's, its first socket no longer watched (relayho_flush) */
		if (a->conn != NULL || a->tcp || a->rec == NULL ||
		    a->rec->client_transport != SHM_TRANSPORT_UDP || a->relay[0].fd < 0 ||
		    ev_is_active(&a->relay[0].io))
			continue;
		LIST_REMOVE(a, link);	/* freed with the process, never touched again */
		w->n_allocs--;
		n++;
	}
	return n;
}

/* What the channel held: keys as the old worker named them, and their sockets. */
struct relayho_got {
	uint32_t *key;
	int *fd;
	size_t n, cap;
};

static int got_add(struct relayho_got *g, const struct ipc_msg *msg, const int *fds, size_t n)
{
	size_t key_cap = g->cap, fd_cap = g->cap;

	/* Two arrays, one capacity: it counts once both have grown. */
	if (GROW_ARRAY(&g->key, &key_cap, g->n + n, 4096) < 0 ||
	    GROW_ARRAY(&g->fd, &fd_cap, g->n + n, 4096) < 0)
		return -ENOMEM;
	g->cap = fd_cap;
	memcpy(g->key + g->n, msg->payload, n * sizeof(uint32_t));
	memcpy(g->fd + g->n, fds, n * sizeof(int));
	g->n += n;
	return 0;
}

/* Reads frames until the channel is empty (every writer is gone before the new master
 * takes the table: nothing more comes). */
static void relayho_read(int rx, struct relayho_got *g)
{
	struct ipc_msg *msg = malloc(sizeof(*msg));
	int fds[IPC_FDS_MAX];

	for (; msg != NULL;) {
		size_t n = 0;
		int rc = ipc_recv_fds(rx, msg, fds, IPC_FDS_MAX, &n);

		if (rc == -EPROTO || rc == -EMFILE)
			continue;	/* what it carried is closed: bound again */
		if (rc < 0)
			break;		/* empty, or every writer closed */
		if (msg->hdr.type != IPC_RELAYS || got_add(g, msg, fds, n) < 0)
			for (size_t i = 0; i < n; i++)
				close(fds[i]);	/* its port is bound again */
	}
	free(msg);
}

/* Key k of the image (a take-over) as this table names it: the take-over's lists, entry
 * i record from[i] there and to[i] here. Builds old key -> position once. */
static void relayho_rename(struct worker *w, struct relayho_got *g)
{
	uint32_t n_to = 0, n_from = 0, max = 0, *pos;
	const uint32_t *to = shm_taken(w->shm, &n_to), *from = shm_taken_from(w->shm, &n_from);

	for (size_t i = 0; i < g->n; i++)
		max = IPC_RELAY_IDX(g->key[i]) > max ? IPC_RELAY_IDX(g->key[i]) : max;
	pos = to != NULL && from != NULL && n_to == n_from ? calloc((size_t)max + 1, sizeof(*pos))
							   : NULL;
	for (uint32_t i = 0; pos != NULL && i < n_to; i++)
		if (from[i] <= max)
			pos[from[i]] = i + 1;
	for (size_t i = 0; i < g->n; i++) {
		uint32_t p = pos != NULL ? pos[IPC_RELAY_IDX(g->key[i])] : 0;

		/* UINT32_MAX: not taken over, closed by the caller */
		g->key[i] = p == 0 ? UINT32_MAX
				   : IPC_RELAY_KEY(to[p - 1], IPC_RELAY_WHICH(g->key[i]));
	}
	free(pos);
}

int wk_relayho_open(struct worker *w, struct wk_relayho *m)
{
	uint64_t n_keys = 2 * (uint64_t)shm_alloc_capacity(w->shm);
	struct relayho_got g = { 0 };

	memset(m, 0, sizeof(*m));
	if (!w->h->relay_chan || w->h->relay_rx < 0)
		return 0;
	/* calloc'd pages stay untouched until a key lands on them */
	m->fd1 = calloc(n_keys, sizeof(*m->fd1));
	if (m->fd1 == NULL)
		return -ENOMEM;
	m->n_keys = (uint32_t)n_keys;
	relayho_read(w->h->relay_rx, &g);
	close(w->h->relay_rx);
	/* After a take-over the old worker named the image's records; a respawn after a
	 * failed upgrade reads its predecessor's, in the same table. */
	if (w->h->adopt != NULL)
		relayho_rename(w, &g);
	for (size_t i = 0; i < g.n; i++) {
		if (g.key[i] >= n_keys || m->fd1[g.key[i]] != 0) {
			close(g.fd[i]);
			continue;
		}
		m->fd1[g.key[i]] = g.fd[i] + 1;
		m->left++;
	}
	free(g.key);
	free(g.fd);
	return 0;
}

int wk_relayho_take(struct wk_relayho *m, uint32_t idx, unsigned which)
{
	uint32_t key = IPC_RELAY_KEY(idx, which);
	int fd;

	if (m->fd1 == NULL || key >= m->n_keys || m->fd1[key] == 0)
		return -1;
	fd = m->fd1[key] - 1;
	m->fd1[key] = 0;
	m->left--;
	return fd;
}

size_t wk_relayho_close(struct wk_relayho *m)
{
	size_t closed = 0;

	for (uint32_t k = 0; m->fd1 != NULL && m->left > 0 && k < m->n_keys; k++)
		if (m->fd1[k] != 0) {
			close(m->fd1[k] - 1);
			m->fd1[k] = 0;
			m->left--;
			closed++;
		}
	free(m->fd1);
	memset(m, 0, sizeof(*m));
	return closed;
}
