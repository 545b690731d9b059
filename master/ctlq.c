/* Master: frames to a worker that wait, in order, for room on its control socket
 * (common/ipcq.h). A worker's control socket fills when the worker is busy (a long
 * callback, an adoption) while others hand it RFC 6062 data connections through us
 * (IPC_TCP_HANDOFF, a burst of ConnectionBinds): each frame carries a client's connection,
 * which a full socket used to close. One queue per worker, made when a frame first has to
 * wait and freed with the worker's control socket (ctlq_close), so a respawned worker
 * starts with none and never gets its predecessor's frames. */
#include "config.h"

#include "master/master.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/ipc.h"
#include "common/ipcq.h"
#include "common/log.h"

static void ctlq_watch(struct mworker *w)
{
	if (ipcq_waiting(w->ctlq) > 0)
		ev_io_start(w->m->loop, &w->ctlq_io);
	else
		ev_io_stop(w->m->loop, &w->ctlq_io);
}

static void ctlq_write_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct mworker *w = io->data;

	(void)loop;
	(void)revents;
	(void)ipcq_flush(w->ctlq);
	ctlq_watch(w);
}

int ctlq_send(struct mworker *w, uint16_t type, const void *payload, size_t len, int fd,
	      unsigned flags)
{
	int rc;

	if (w->ctlq == NULL && w->ctl_fd >= 0) {
		char name[32];

		snprintf(name, sizeof(name), "worker %u", w->slot);
		w->ctlq = ipcq_new(w->ctl_fd, MASTER_CTLQ_MAX_BYTES, "master", name);
		if (w->ctlq != NULL) {
			ev_io_init(&w->ctlq_io, ctlq_write_cb, w->ctl_fd, EV_WRITE);
			w->ctlq_io.data = w;
		}
	}
	if (w->ctlq == NULL) {
		rc = w->ctl_fd < 0 ? -ESRCH : -ENOMEM;
		if ((flags & IPCQ_OWN_FD) && fd >= 0)
			close(fd);
		log_warn("master", "worker %u: %s frame dropped: %s", w->slot, ipc_type_name(type),
			 strerror(-rc));
		return rc;
	}
	rc = ipcq_send(w->ctlq, type, payload, len, fd, flags, NULL);
	ctlq_watch(w);
	return rc;
}

void ctlq_close(struct mworker *w)
{
	if (w->ctlq == NULL)
		return;
	ev_io_stop(w->m->loop, &w->ctlq_io);
	ipcq_free(w->ctlq); /* logs what it drops, by type */
	w->ctlq = NULL;
}
