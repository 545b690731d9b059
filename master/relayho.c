/* Master: UDP relay sockets handed over in a live upgrade (master/relayho.h). */
#include "config.h"

#include "master/relayho.h"

#include "master/master.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/ipc.h"
#include "common/log.h"
#include "worker/worker.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"

struct relay_list {
	int *fd;
	uint32_t *key;		/* IPC_RELAY_KEY in the table of the slot's worker */
	uint16_t *slot;
	size_t n, cap;
	size_t lost;		/* frames that did not arrive whole */
};

static struct relay_list *list_get(struct master *m)
{
	if (m->relays == NULL)
		m->relays = calloc(1, sizeof(*m->relays));
	return m->relays;
}

static int list_grow(struct relay_list *rl, size_t more)
{
	size_t cap = rl->cap ? rl->cap : 1024;
	int *fd;
	uint32_t *key;
	uint16_t *slot;

	while (cap < rl->n + more)
		cap *= 2;
	if (cap == rl->cap)
		return 0;
	fd = realloc(rl->fd, cap * sizeof(*fd));
	if (fd != NULL)
		rl->fd = fd;
	key = realloc(rl->key, cap * sizeof(*key));
	if (key != NULL)
		rl->key = key;
	slot = realloc(rl->slot, cap * sizeof(*slot));
	if (slot != NULL)
		rl->slot = slot;
	if (fd == NULL || key == NULL || slot == NULL)
		return -ENOMEM;
	rl->cap = cap;
	return 0;
}

/* Takes the frame's sockets into the list for slot (all closed on failure). */
static int list_push(struct master *m, const struct ipc_msg *msg, const int *fds, size_t n,
		     unsigned slot)
{
	struct relay_list *rl = list_get(m);

	if (rl == NULL || n * sizeof(uint32_t) != msg->hdr.len || list_grow(rl, n) < 0) {
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		rl->fd[rl->n] = fds[i];
		memcpy(&rl->key[rl->n], msg->payload + i * sizeof(uint32_t), sizeof(uint32_t));
		rl->slot[rl->n++] = (uint16_t)slot;
	}
	return 0;
}

void relayho_collect(struct mworker *w, const struct ipc_msg *msg, const int *fds, size_t n)
{
	struct master *m = w->m;

	if (!m->handing_over || !upgrade_peer_relays(m)) {
		/* not asked for: the sockets close with the worker, ports bound again */
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
		return;
	}
	if (list_push(m, msg, fds, n, w->slot) < 0)
		log_warn("master", "worker %u: %zu relay sockets not kept (no memory): their "
				   "ports are bound again", w->slot, n);
}

void relayho_receive(struct master *m, const struct ipc_msg *msg, const int *fds, size_t n)
{
	if (list_push(m, msg, fds, n, 0) < 0)
		relayho_lost(m);
}

void relayho_lost(struct master *m)
{
	struct relay_list *rl = list_get(m);

	if (rl != NULL)
		rl->lost++;
}

size_t relayho_count(const struct master *m)
{
	return m->relays != NULL ? m->relays->n : 0;
}

static long elapsed_ms(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* One frame, waiting while the channel is full or the kernel's count of descriptors in
 * flight is (ETOOMANYREFS: the new master has not read enough yet). */
static int send_frame(int fd, const uint32_t *keys, const int *fds, size_t n,
		      const struct timespec *t0, int timeout_ms)
{
	for (;;) {
		int rc = ipc_send_fds(fd, IPC_RELAYS, keys, n * sizeof(*keys), fds, n);
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };
		long left = timeout_ms - elapsed_ms(t0);

		if (rc != -EAGAIN && rc != -ENOBUFS && rc != -ETOOMANYREFS)
			return rc;
		if (left <= 0)
			return -ETIMEDOUT;
		(void)poll(&pfd, 1, (int)(left < 10 ? left : 10));
	}
}

int relayho_forward(struct master *m, int fd, int timeout_ms)
{
	const struct relay_list *rl = m->relays;
	struct timespec t0;
	int rc = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (size_t i = 0; rl != NULL && i < rl->n && rc == 0; i += IPC_FDS_MAX) {
		size_t n = rl->n - i < IPC_FDS_MAX ? rl->n - i : IPC_FDS_MAX;

		rc = send_frame(fd, rl->key + i, rl->fd + i, n, &t0, timeout_ms);
	}
	return rc;
}

/* The table's index of each record the image had: old index -> position in the take-over's
 * lists + 1 (0: not taken over). NULL with *n 0 when nothing was. */
static uint32_t *inverse_taken(const struct master *m, uint32_t *n_out)
{
	uint32_t n = 0, n2 = 0, max = 0, *inv;
	const uint32_t *from = shm_taken_from(m->shm, &n2);

	*n_out = 0;
	(void)shm_taken(m->shm, &n);
	if (from == NULL || n2 != n || n == 0)
		return NULL;
	for (uint32_t i = 0; i < n; i++)
		max = from[i] > max ? from[i] : max;
	inv = calloc((size_t)max + 1, sizeof(*inv));
	if (inv == NULL)
		return NULL;
	for (uint32_t i = 0; i < n; i++)
		inv[from[i]] = i + 1;
	*n_out = max + 1;
	return inv;
}

/* Entry i renamed to this table's record and owner; -ENOENT when it was not taken over. */
static int remap_one(struct master *m, size_t i, const uint32_t *inv, uint32_t n_inv)
{
	struct relay_list *rl = m->relays;
	uint32_t n = 0, old = IPC_RELAY_IDX(rl->key[i]), pos, idx;
	const uint32_t *to = shm_taken(m->shm, &n);
	unsigned owner = 0;
	bool torn = true;

	if (old >= n_inv || (pos = inv[old]) == 0 || pos > n)
		return -ENOENT;
	idx = to[pos - 1];
	if (shm_alloc_is_torn(m->shm, idx, &torn, &owner) < 0 || torn || owner >= m->n_slots)
		return -ENOENT;
	rl->key[i] = IPC_RELAY_KEY(idx, IPC_RELAY_WHICH(rl->key[i]));
	rl->slot[i] = (uint16_t)owner;
	return 0;
}

int relayho_remap(struct master *m)
{
	struct relay_list *rl = m->relays;
	uint32_t n_inv = 0, *inv;
	size_t kept = 0, closed = 0;

	if (rl == NULL)
		return 0;
	inv = inverse_taken(m, &n_inv);
	for (size_t i = 0; i < rl->n; i++) {
		if (remap_one(m, i, inv, n_inv) < 0) {
			close(rl->fd[i]);
			closed++;
			continue;
		}
		rl->fd[kept] = rl->fd[i];
		rl->key[kept] = rl->key[i];
		rl->slot[kept++] = rl->slot[i];
	}
	free(inv);
	rl->n = kept;
	log_info("master", "upgrade: %zu relay sockets handed over%s", kept,
		 closed ? " (some of records not taken over: closed)" : "");
	if (rl->lost > 0) {
		log_error("master", "upgrade: %zu frames of relay sockets did not arrive whole "
				    "(descriptor limit?)", rl->lost);
		return -EPIPE;
	}
	return 0;
}

struct worker_relayfd *relayho_heritage(const struct master *m, unsigned slot, size_t *n)
{
	const struct relay_list *rl = m->relays;
	struct worker_relayfd *v;
	size_t k = 0;

	*n = 0;
	if (rl == NULL || rl->n == 0)
		return NULL;
	v = calloc(rl->n, sizeof(*v));
	if (v == NULL)
		return NULL;
	for (size_t i = 0; i < rl->n; i++)
		if (rl->slot[i] == slot)
			v[k++] = (struct worker_relayfd){ rl->fd[i], rl->key[i] };
	*n = k;
	return v;
}

void relayho_release(struct master *m)
{
	struct relay_list *rl = m->relays;

	if (rl == NULL)
		return;
	for (size_t i = 0; i < rl->n; i++)
		close(rl->fd[i]);
	free(rl->fd);
	free(rl->key);
	free(rl->slot);
	free(rl);
	m->relays = NULL;
}
