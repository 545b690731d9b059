/* A control-frame queue on a libev loop: made on first use, flushed by an EV_WRITE watcher
 * while frames wait (contract in common/ipcq_ev.h). */
#include "common/ipcq_ev.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define IPCQ_EV_MAGIC 0x69716576u /* "iqev" */

static struct ipcq_ev *ipcq_ev_checked(struct ipcq_ev *qe)
{
	assert(qe != NULL && qe->magic == IPCQ_EV_MAGIC);
	return qe;
}

/* The watcher runs exactly while frames wait: the kernel says a unix socket is writable
 * most of the time, so a watcher left on would spin the loop. */
static void ipcq_ev_watch(struct ipcq_ev *qe)
{
	if (qe->q != NULL && ipcq_waiting(qe->q) > 0)
		ev_io_start(qe->loop, &qe->io);
	else
		ev_io_stop(qe->loop, &qe->io);
}

static void ipcq_ev_write_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct ipcq_ev *qe = ipcq_ev_checked(io->data);

	(void)loop;
	(void)revents;
	(void)ipcq_flush(qe->q);
	ipcq_ev_watch(qe);
}

void ipcq_ev_init(struct ipcq_ev *qe, struct ev_loop *loop, size_t max_bytes, struct ipcq_fds *fds,
		  const char *scope, const char *name)
{
	memset(qe, 0, sizeof(*qe));
	qe->magic = IPCQ_EV_MAGIC;
	qe->sock = -1;
	qe->loop = loop;
	qe->max_bytes = max_bytes;
	qe->fds = fds;
	qe->scope = scope;
	snprintf(qe->name, sizeof(qe->name), "%s", name);
}

/* Makes qe's queue for sock. Returns 0 or -ENOMEM. */
static int ipcq_ev_open(struct ipcq_ev *qe, int sock)
{
	qe->q = ipcq_new(sock, qe->max_bytes, qe->scope, qe->name);
	if (qe->q == NULL)
		return -ENOMEM;
	ipcq_set_fds(qe->q, qe->fds);
	qe->sock = sock;
	ev_io_init(&qe->io, ipcq_ev_write_cb, sock, EV_WRITE);
	qe->io.data = qe;
	return 0;
}

int ipcq_ev_send(struct ipcq_ev *qe, int sock, uint16_t type, const void *payload, size_t len,
		 int fd, unsigned flags, const char *key)
{
	int rc;

	(void)ipcq_ev_checked(qe);
	if (qe->q == NULL && ipcq_ev_open(qe, sock) < 0) {
		ipcq_lost(&qe->lost, qe->scope, qe->name, type, fd, flags, -ENOMEM);
		return -ENOMEM;
	}
	assert(sock == qe->sock);
	rc = ipcq_send(qe->q, type, payload, len, fd, flags, key);
	ipcq_ev_watch(qe);
	return rc;
}

bool ipcq_ev_cancel(struct ipcq_ev *qe, const char *key)
{
	bool found;

	if (ipcq_ev_checked(qe)->q == NULL)
		return false;
	found = ipcq_cancel(qe->q, key);
	ipcq_ev_watch(qe);
	return found;
}

void ipcq_ev_close(struct ipcq_ev *qe)
{
	if (ipcq_ev_checked(qe)->q == NULL)
		return;
	ev_io_stop(qe->loop, &qe->io);
	ipcq_free(qe->q); /* logs what it drops, by type */
	qe->q = NULL;
	qe->sock = -1;
}

void ipcq_ev_report(struct ipcq_ev *qe)
{
	(void)ipcq_lost_report(&ipcq_ev_checked(qe)->lost, qe->scope, qe->name);
	if (qe->q != NULL)
		(void)ipcq_report(qe->q);
}
