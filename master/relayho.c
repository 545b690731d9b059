/* Master: relay channels of a live upgrade (master/relayho.h). */
#include "config.h"

#include "master/relayho.h"

#include "master/master.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/ipc.h"
#include "common/log.h"

/* Room for every socket of a worker's share in the channel while nobody reads it: a frame
 * of IPC_FDS_MAX costs about 2 KiB of the sender's buffer. Raised past wmem_max where the
 * master may (CAP_NET_ADMIN), else as far as wmem_max lets (about 40,000 sockets). */
#define RELAYHO_SNDBUF (64 << 20)

struct relay_list {
	int *rx;		/* by slot, -1 none */
	unsigned n;
};

static struct relay_list *list_get(struct master *m)
{
	struct relay_list *rl = m->relays;

	if (rl != NULL)
		return rl;
	rl = calloc(1, sizeof(*rl));
	if (rl == NULL)
		return NULL;
	rl->rx = malloc(m->n_slots * sizeof(*rl->rx));
	if (rl->rx == NULL) {
		free(rl);
		return NULL;
	}
	rl->n = m->n_slots;
	for (unsigned i = 0; i < rl->n; i++)
		rl->rx[i] = -1;
	m->relays = rl;
	return rl;
}

static void set_rx(struct relay_list *rl, unsigned slot, int fd)
{
	if (rl->rx[slot] >= 0)
		close(rl->rx[slot]);
	rl->rx[slot] = fd;
}

void relayho_channels(struct master *m)
{
	struct relay_list *rl = list_get(m);
	int size = RELAYHO_SNDBUF;

	for (unsigned i = 0; rl != NULL && i < m->n_slots; i++) {
		struct mworker *w = &m->workers[i];
		uint32_t slot = i;
		int sp[2];

		if (w->pid <= 0 || w->ctl_fd < 0 ||
		    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) < 0)
			continue;
		if (setsockopt(sp[1], SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size)) < 0)
			(void)setsockopt(sp[1], SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
		if (ipc_send(w->ctl_fd, IPC_RELAY_CHAN, &slot, sizeof(slot), sp[1]) < 0) {
			close(sp[0]);
			close(sp[1]);
			continue;
		}
		close(sp[1]);
		set_rx(rl, i, sp[0]);
	}
}

static long elapsed_ms(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

int relayho_forward(struct master *m, int fd, int timeout_ms)
{
	const struct relay_list *rl = m->relays;
	struct timespec t0;
	int rc = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 0; rl != NULL && i < rl->n && rc == 0; i++) {
		uint32_t slot = i;

		if (rl->rx[i] < 0)
			continue;
		for (;;) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };
			long left = timeout_ms - elapsed_ms(&t0);

			rc = ipc_send(fd, IPC_RELAY_CHAN, &slot, sizeof(slot), rl->rx[i]);
			if (rc != -EAGAIN && rc != -ENOBUFS)
				break;
			if (left <= 0) {
				rc = -ETIMEDOUT;
				break;
			}
			(void)poll(&pfd, 1, (int)(left < 100 ? left : 100));
		}
	}
	return rc;
}

void relayho_receive(struct master *m, const struct ipc_msg *msg, int fd)
{
	struct relay_list *rl = list_get(m);
	uint32_t slot;

	if (rl == NULL || ipc_msg_get(msg, &slot, sizeof(slot)) < 0 || slot >= rl->n) {
		/* its sockets close with it: that slot's worker binds their ports again */
		log_warn("master", "upgrade: a relay channel not taken");
		close(fd);
		return;
	}
	set_rx(rl, slot, fd);
}

int relayho_rx(const struct master *m, unsigned slot)
{
	const struct relay_list *rl = m->relays;

	return rl != NULL && slot < rl->n ? rl->rx[slot] : -1;
}

void relayho_release(struct master *m)
{
	struct relay_list *rl = m->relays;

	if (rl == NULL)
		return;
	for (unsigned i = 0; i < rl->n; i++)
		if (rl->rx[i] >= 0)
			close(rl->rx[i]);
	free(rl->rx);
	free(rl);
	m->relays = NULL;
}
