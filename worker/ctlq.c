/* Worker: control frames to the master that must not be lost when the control socket is
 * full: the fd store's (fdstore.c) and the RFC 6062 hand-offs (tcp.c).
 *
 * The control socket holds about 278 small frames with the default wmem_default (the kernel
 * charges each about 768 bytes of it), 49 IPC_TCP_HANDOFFs (about 4.3 KiB each): a worker
 * that ends or starts more connections than that at once (a disconnect --user, a
 * revocation, a listener removed, a burst of new calls or of ConnectionBinds for another
 * worker's peers) while the master reads, or a master busy elsewhere, fills it. What does
 * not fit waits in one queue (common/ipcq.h), in order, and goes when the socket is
 * writable again (an EV_WRITE watcher, active only while something waits): a lost FDUNSTORE
 * would leave a dead connection in the store, a lost FDSTORE a call that does not survive a
 * crash, a lost hand-off a data connection that closes under its client. A waiting FDSTORE
 * borrows the connection's descriptor (keyed by its name: the connection's end takes it
 * out, fdstore.c); a waiting hand-off owns the connection's, which this worker no longer
 * serves (shut down if it is dropped unsent: the fd store may hold a copy,
 * IPCQ_SHUT_ON_DROP). The queue fills the socket only halfway (common/ipcq.h): PONG and
 * READY, sent directly, find room. Bounded (WK_CTLQ_MAX_BYTES, and a quarter of our
 * descriptors, w->ctlq_fds): past it a frame is dropped and logged, as is one the socket
 * refuses for another reason (the master gone), or one that finds no queue and cannot make
 * one (out of memory); the heartbeat logs a count held back by the lines' rate
 * (ipcq_ev_report). A stopping worker sends what waits within a budget that leaves
 * the master's grace room for the session-record flush before it (WK_CTLQ_STOP_MS below,
 * wk_ctlq_stop); what is left then is dropped (a waiting hand-off's client sees its
 * connection close, as it would have before it waited). */
#include "config.h"

#include "worker/wk.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/ipcq.h"
#include "common/ipcq_ev.h"
#include "common/log.h"

/* A stopping worker waits this long at most for room, all its calls of wk_ctlq_stop
 * together (w->ctlq_until), WK_CTLQ_NOW_MS when the stop is immediate (w->stop_now), and
 * gives up after WK_CTLQ_STALL_MS without a frame sent (a master that reads takes tens of
 * thousands a second). The wait comes after the session-record flush's
 * (worker/recflush.c: at most half the master's grace), so the two stay within it with
 * room for the teardown: 2.5 s + 0.5 s of the 5 s of IPC_STOP_GRACE_MS, 0.5 s + 0.15 s
 * of the 1 s of IPC_STOP_NOW_GRACE_MS. A stop made immediate during our wait (the
 * master's 1 s from then) has at most 0.5 s of it left. */
#define WK_CTLQ_STOP_MS 500u
#define WK_CTLQ_NOW_MS 150u
#define WK_CTLQ_STALL_MS 200u

_Static_assert(IPC_STOP_GRACE_MS / 2 + WK_CTLQ_STOP_MS < IPC_STOP_GRACE_MS,
	       "both waits of a stop fit its grace");
_Static_assert(IPC_STOP_NOW_GRACE_MS / 2 + WK_CTLQ_NOW_MS < IPC_STOP_NOW_GRACE_MS,
	       "both waits of an immediate stop fit its grace");
_Static_assert(WK_CTLQ_STOP_MS < IPC_STOP_NOW_GRACE_MS, "a stop made immediate in our wait");

void wk_ctlq_init(struct worker *w)
{
	char name[48];

	snprintf(name, sizeof(name), "slot %u to the master", w->slot);
	w->ctlq_fds.max = ipcq_fd_share();
	ipcq_ev_init(&w->ctlq, w->loop, WK_CTLQ_MAX_BYTES, &w->ctlq_fds, "worker", name);
}

int wk_ctlq_send(struct worker *w, uint16_t type, const void *payload, size_t len, int fd,
		 unsigned flags, const char *key)
{
	return ipcq_ev_send(&w->ctlq, w->h->ctl_fd, type, payload, len, fd, flags, key);
}

bool wk_ctlq_cancel(struct worker *w, const char *key)
{
	return ipcq_ev_cancel(&w->ctlq, key);
}

void wk_ctlq_stop(struct worker *w)
{
	uint64_t now = mono_ms(), progress = now;
	size_t left, before;

	if (w->ctlq.q == NULL)
		return;
	if (w->ctlq_until == 0)
		w->ctlq_until = now + (w->stop_now ? WK_CTLQ_NOW_MS : WK_CTLQ_STOP_MS);
	before = ipcq_waiting(w->ctlq.q);
	for (;;) {
		struct pollfd pfd = { .fd = w->h->ctl_fd, .events = POLLOUT };
		uint64_t until;

		left = ipcq_flush(w->ctlq.q);
		now = mono_ms();
		if (left < before)
			progress = now;
		before = left;
		until = progress + WK_CTLQ_STALL_MS < w->ctlq_until ? progress + WK_CTLQ_STALL_MS
								    : w->ctlq_until;
		if (left == 0 || now >= until)
			break;
		(void)poll(&pfd, 1, (int)(until - now));
	}
	if (left > 0)
		log_warn("worker",
			 "slot %u: %zu control frames not sent at exit: the master did "
			 "not read in time",
			 w->slot, left);
	ipcq_ev_close(&w->ctlq); /* logs what it drops, by type */
}
