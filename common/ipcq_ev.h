/* A control-frame queue (common/ipcq.h) on a libev loop, for the two that need one: the
 * worker's frames to the master (worker/ctlq.c) and the master's hand-offs to each worker
 * (master/handoffq.c).
 *
 * The queue is made when a frame first goes through it (most control sockets never fill,
 * so most never have one) and an EV_WRITE watcher on its socket runs exactly while frames
 * wait in it, flushing them as the socket has room. A frame that finds no queue and cannot
 * make one (out of memory) is dropped and counted (ipcq_lost). ipcq_ev_close() frees the
 * queue (the socket closes, or a stopping worker gave up on what waits); a later frame makes
 * a new one.
 *
 * In a library of its own, common/libcommon_ev.a: common/libcommon.a links without libev
 * (turngatectl, test_ipcq). One struct ipcq_ev per channel owner (the master's for a slot
 * serves each respawned worker's socket in turn), used by the one thread of the loop it is
 * given. */
#ifndef TG_COMMON_IPCQ_EV_H
#define TG_COMMON_IPCQ_EV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ev.h>

#include "common/ipcq.h"

/* Set up by ipcq_ev_init(); the fields are this module's, but for q, which a caller may
 * read and hand to common/ipcq.h's functions (never ipcq_free: ipcq_ev_close). */
struct ipcq_ev {
	uint32_t magic;
	struct ipcq *q; /* NULL: none (not needed yet, or closed since) */
	int sock;       /* q's socket while there is a q */
	struct ev_loop *loop;
	ev_io io; /* EV_WRITE on sock, active exactly while frames wait in q */
	size_t max_bytes;
	struct ipcq_fds *fds;  /* the bound on q's owned descriptors, or NULL */
	struct ipcq_lost lost; /* frames dropped when no queue could be made */
	const char *scope; /* not copied: a string literal */
	char name[64];
};

/* Sets qe up, with no queue yet: the queues it makes are bounded at max_bytes and by fds
 * (not owned: it outlives qe; NULL: no bound; its max is the caller's to set), their log
 * lines headed by scope (kept, not copied: a string literal) and name (copied), their
 * watcher on loop. Once per qe: it forgets what was lost before. */
void ipcq_ev_init(struct ipcq_ev *qe, struct ev_loop *loop, size_t max_bytes, struct ipcq_fds *fds,
		  const char *scope, const char *name);

/* Sends a frame on sock through qe's queue (ipcq_send(): at once when nothing waits and the
 * socket has room, else behind what waits), making the queue first when qe has none; sock
 * is the same for every frame until ipcq_ev_close(). Starts or stops the watcher as frames
 * wait or not. flags, key and the returns as ipcq_send() (with IPCQ_OWN_FD, fd is the
 * queue's from the call on), and -ENOMEM when no queue could be made (the frame dropped
 * as ipcq_lost() does). */
int ipcq_ev_send(struct ipcq_ev *qe, int sock, uint16_t type, const void *payload, size_t len,
		 int fd, unsigned flags, const char *key);

/* ipcq_cancel() on qe's queue (false when there is none), the watcher stopped when nothing
 * waits any more. */
bool ipcq_ev_cancel(struct ipcq_ev *qe, const char *key);

/* Drops what still waits (logged by type, the descriptors the queue owns closed), stops the
 * watcher, frees the queue. Safe when there is none. */
void ipcq_ev_close(struct ipcq_ev *qe);

/* From the caller's periodic timer: logs the drops held back by their lines' rate, of the
 * queue (ipcq_report, if there is one) and of the frames that found none
 * (ipcq_lost_report). */
void ipcq_ev_report(struct ipcq_ev *qe);

#endif
