/* Worker: UDP relay sockets handed over in a live upgrade (worker/relayho.h). */
#include "config.h"

#include "worker/relayho.h"

#include "worker/table.h"
#include "worker/wk.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ipc.h"
#include "common/log.h"
#include "shm/shm.h"

/* The whole sending of one worker waits at most this long for the master to read. */
#define WK_RELAYHO_TIMEOUT_MS 5000

/* One frame, waiting while the channel is full. 0 or -errno. */
static int relayho_frame(struct worker *w, const uint32_t *keys, const int *fds, size_t n,
			 uint64_t deadline)
{
	for (;;) {
		int rc = ipc_send_fds(w->h->ctl_fd, IPC_RELAYS, keys, n * sizeof(*keys), fds, n);
		struct pollfd p = { .fd = w->h->ctl_fd, .events = POLLOUT };
		uint64_t now = mono_ms();

		if (rc != -EAGAIN)
			return rc;
		if (now >= deadline)
			return -ETIMEDOUT;
		(void)poll(&p, 1, (int)(deadline - now));
	}
}

/* Sends the batch and stops watching what went; the sockets stay open with their
 * allocations until the worker's exit closes our copies. */
static int relayho_flush(struct worker *w, struct wk_relay **rs, uint32_t *keys, int *fds,
			 size_t n, uint64_t deadline)
{
	int rc;

	if (n == 0)
		return 0;
	rc = relayho_frame(w, keys, fds, n, deadline);
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
	uint64_t deadline = mono_ms() + WK_RELAYHO_TIMEOUT_MS;
	size_t n = 0, sent = 0;
	struct wk_alloc *a;
	int rc = 0;

	LIST_FOREACH(a, &w->allocs, link) {
		/* A stream client's allocation goes with its connection (park.c). */
		if (a->conn != NULL || a->tcp)
			continue;
		for (unsigned i = 0; i < 2 && rc == 0; i++) {
			if (a->relay[i].fd < 0)
				continue;
			rs[n] = &a->relay[i];
			keys[n] = IPC_RELAY_KEY(a->rec_idx, i);
			fds[n++] = a->relay[i].fd;
			if (n < IPC_FDS_MAX)
				continue;
			rc = relayho_flush(w, rs, keys, fds, n, deadline);
			sent += rc == 0 ? n : 0;
			n = 0;
		}
		if (rc < 0)
			break;
	}
	if (rc == 0) {
		rc = relayho_flush(w, rs, keys, fds, n, deadline);
		sent += rc == 0 ? n : 0;
	}
	if (rc < 0)
		log_warn("worker", "slot %u: %zu relay sockets handed over, the rest cannot be "
				   "(%s): the new worker binds their ports again",
			 w->slot, sent, strerror(-rc));
	else if (sent > 0)
		log_info("worker", "slot %u: %zu relay sockets handed over", w->slot, sent);
	return sent;
}

int wk_relayho_open(struct worker *w, struct wk_relayho *m)
{
	uint64_t n_keys = 2 * (uint64_t)shm_alloc_capacity(w->shm);

	memset(m, 0, sizeof(*m));
	if (w->h->n_relays == 0)
		return 0;
	/* calloc'd pages stay untouched until a key lands on them */
	m->fd1 = calloc(n_keys, sizeof(*m->fd1));
	if (m->fd1 == NULL)
		return -ENOMEM;
	m->n_keys = (uint32_t)n_keys;
	for (size_t i = 0; i < w->h->n_relays; i++) {
		const struct worker_relayfd *r = &w->h->relays[i];

		if (r->key >= n_keys || m->fd1[r->key] != 0) {
			close(r->fd);	/* not ours to take: the master checked it */
			continue;
		}
		m->fd1[r->key] = r->fd + 1;
		m->left++;
	}
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
