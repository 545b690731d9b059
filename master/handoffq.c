/* Master: frames to a worker that wait, in order, for room on its control socket
 * (common/ipcq.h). A worker's control socket fills when the worker is busy (a long
 * callback, an adoption) while others hand it RFC 6062 data connections through us
 * (IPC_TCP_HANDOFF, a burst of ConnectionBinds): each frame carries a client's connection,
 * which a full socket used to close. One queue per worker (common/ipcq_ev.h: made when a
 * frame first goes through it, sent on by an EV_WRITE watcher while frames wait), freed
 * with the worker's control socket (handoffq_close), so a respawned worker starts with
 * none and never gets its predecessor's frames.
 *
 * The queues fill a worker's socket only halfway (common/ipcq.h), so that the frames the
 * master sends it directly (PING, LOGLEVEL, DRAIN, STOP, ...) still find room during a
 * flood of hand-offs, and together hold at most m->handoff_fds descriptors, a quarter of
 * the master's: a client may send a ConnectionBind for another worker's connection before
 * it authenticates, so unauthenticated clients can fill these queues. A hand-off dropped
 * unsent is shut down before it is closed (IPCQ_SHUT_ON_DROP): the worker that sent it
 * may have left a copy in systemd's fd store. */
#include "config.h"

#include "master/master.h"

#include <errno.h>
#include <stdio.h>
#include <stdint.h>

#include "common/ipc.h"
#include "common/ipcq.h"
#include "common/ipcq_ev.h"
#include "common/log.h"

/* The master's share of descriptors for every hand-off queue together: a quarter of the
 * RLIMIT_NOFILE that master/sizing.c set at start (read again only if it could not). */
static size_t handoffq_fd_max(const struct master *m)
{
	if (m->fd_limit == 0)
		return ipcq_fd_share();
	return m->fd_limit / 4 > SIZE_MAX ? SIZE_MAX : (size_t)(m->fd_limit / 4);
}

void handoffq_init(struct master *m)
{
	m->handoff_fds.max = handoffq_fd_max(m);
	for (unsigned i = 0; i < m->n_slots; i++) {
		char name[32];

		snprintf(name, sizeof(name), "worker %u", i);
		ipcq_ev_init(&m->workers[i].handoffq, m->loop, MASTER_HANDOFFQ_MAX_BYTES,
			     &m->handoff_fds, "master", name);
	}
}

int handoffq_send(struct mworker *w, uint16_t type, const void *payload, size_t len, int fd,
		  unsigned flags)
{
	flags |= IPCQ_SHUT_ON_DROP;
	if (w->ctl_fd < 0) {
		ipcq_drop_fd(fd, flags);
		log_debug("master", "worker %u: %s frame dropped: no worker", w->slot,
			  ipc_type_name(type));
		return -ESRCH;
	}
	return ipcq_ev_send(&w->handoffq, w->ctl_fd, type, payload, len, fd, flags, NULL);
}

int handoffq_pass(struct master *m, unsigned from, const struct ipc_handoff *h, int fd)
{
	if (h->slot >= m->n_slots || h->slot == from) {
		ipcq_drop_fd(fd, IPCQ_OWN_FD | IPCQ_SHUT_ON_DROP);
		log_debug("master", "worker %u: TCP connection for slot %u dropped: bad slot", from,
			  h->slot);
		return -EINVAL;
	}
	return handoffq_send(&m->workers[h->slot], IPC_TCP_HANDOFF, h, sizeof(*h), fd, IPCQ_OWN_FD);
}

void handoffq_close(struct mworker *w)
{
	ipcq_ev_close(&w->handoffq); /* logs what it drops, by type */
}

void handoffq_tick(struct master *m)
{
	if (m->workers == NULL)
		return;
	for (unsigned i = 0; i < m->n_slots; i++)
		ipcq_ev_report(&m->workers[i].handoffq);
}
