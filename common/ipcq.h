/* Control frames that must not be lost when their control socket is full (common/ipc.h):
 * they wait here, in order, and go when the socket has room again.
 *
 * A control socket (a non-blocking SOCK_SEQPACKET pair) holds a few dozen to a few hundred
 * frames (net.core.wmem_default); a burst of them, or a reader busy elsewhere, fills it and
 * ipc_send() says -EAGAIN. A frame sent through ipcq_send() then waits in the queue, and
 * every later one waits behind it, so that the reader sees them in the order they were
 * sent. The queue does no I/O on its own: the caller watches the socket for writing while
 * ipcq_waiting() is not 0 and calls ipcq_flush() when it may write (libev's EV_WRITE in
 * both processes), so this module needs no loop and unit tests drive it directly.
 *
 * A frame's descriptor is either the queue's (IPCQ_OWN_FD: closed once it is sent, or
 * dropped, whatever ipcq_send() returns: the caller gives it up at the call) or borrowed
 * (the caller keeps it open while the frame waits and takes the frame out with
 * ipcq_cancel() before it closes it; it never costs a descriptor more). A frame may carry a
 * key (a NUL-terminated string, at most one waiting frame per key) by which ipcq_cancel()
 * finds it.
 *
 * The queue fills its socket only to 1/IPCQ_FILL_SHARE of the socket's send buffer
 * (SO_SNDBUF, read once) as SIOCOUTQ counts what is unread: the memory the kernel charges
 * per frame, not payload bytes (about 768 bytes for a small frame, 4.3 KiB for a hand-off
 * with its descriptor: half the default buffer is about 24 hand-offs or 138 small frames).
 * The rest stays for the frames the caller sends directly with ipc_send() (a PING, a
 * LOGLEVEL, a STOP), which would otherwise find the socket full for as long as frames wait
 * here. Room in that sense is what ipcq_send() and ipcq_flush() wait for.
 *
 * Bounded: what waits may cost about max_bytes (each frame its payload, its key and
 * IPCQ_FRAME_COST, an estimate of malloc's and the search tree's overhead), and the
 * descriptors it owns at most an ipcq_fds bound (ipcq_set_fds()), which several queues
 * may share. A frame that would pass either bound is dropped, as is one the socket
 * refuses for another reason than room (the peer gone). Drops are counted per frame type
 * and logged as [warn] lines under the queue's scope and name, at most one a type every
 * IPCQ_REPORT_MS (the first at once), with the counts since the last line and in all
 * and the last drop's reason ("last: ..." when the line counts several); ipcq_report()
 * logs those held back once their time has come (the caller's periodic timer),
 * ipcq_free() all that are left. Either process may use it; one queue per socket
 * and direction, used by one thread. */
#ifndef TG_COMMON_IPCQ_H
#define TG_COMMON_IPCQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a waiting frame costs besides its payload and key, in the bound. */
#define IPCQ_FRAME_COST 64u
/* Drops are logged at most this often per frame type (the first at once). */
#define IPCQ_REPORT_MS 10000u
/* The queue fills its socket's send buffer up to this share (1/2). */
#define IPCQ_FILL_SHARE 2u
/* ipcq_fd_share() when the limit cannot be read. */
#define IPCQ_FDS_FALLBACK 256u
/* ipcq_send(): the queue owns fd from the call on. */
#define IPCQ_OWN_FD 1u
/* ipcq_send() with IPCQ_OWN_FD: a socket the queue drops unsent (a bound, the peer gone,
 * cancel, free) is shut down (SHUT_RDWR) before it is closed, so its client sees the
 * end even where another process holds a copy (systemd's fd store). */
#define IPCQ_SHUT_ON_DROP 2u

/* A bound on the descriptors that waiting frames own, shared by the queues given it
 * (ipcq_set_fds()): used counts them, max is set by the caller. */
struct ipcq_fds {
	size_t used, max;
};

struct ipcq;

/* A queue for frames to sock (not owned: the caller closes it after ipcq_free()), bounded
 * at max_bytes; scope and name (copied) head its log lines ("worker", "slot 1 to the
 * master"). Returns NULL when out of memory. */
struct ipcq *ipcq_new(int sock, size_t max_bytes, const char *scope, const char *name);

/* Drops what still waits (closing the descriptors the queue owns; a borrowed one stays
 * the caller's), logs the drops not logged yet, frees q. NULL is fine. */
void ipcq_free(struct ipcq *q);

/* Sends one frame as ipc_send() does (payload, len, fd -1 for none) when nothing waits and
 * the socket has room; else queues it behind what waits (payload and key copied). key:
 * NULL, or a name for ipcq_cancel(). flags: IPCQ_OWN_FD, IPCQ_SHUT_ON_DROP, or 0.
 * Returns 0 (sent, or waiting: see ipcq_waiting()); -EEXIST when a frame with that key
 * waits already (this one is not queued: the first one stands); -ENOBUFS when it would
 * pass the byte bound, -EMFILE the descriptor bound, -ENOMEM when there is no memory to
 * queue it, or ipc_send()'s error when the socket refused it for another reason than
 * room: dropped and counted. */
int ipcq_send(struct ipcq *q, uint16_t type, const void *payload, size_t len, int fd,
	      unsigned flags, const char *key);

/* Sends what waits, oldest first, until the socket is full. A frame the socket refuses for
 * another reason is dropped (counted) and the next one tried. Returns how many still wait. */
size_t ipcq_flush(struct ipcq *q);

/* Takes the waiting frame with key out, unsent (its descriptor closed when the queue owns
 * it). Returns true when there was one. */
bool ipcq_cancel(struct ipcq *q, const char *key);

/* Frames waiting. */
size_t ipcq_waiting(const struct ipcq *q);

/* Frames of type dropped so far (every type: type 0). */
uint64_t ipcq_dropped(const struct ipcq *q, uint16_t type);

/* Logs the drops held back by IPCQ_REPORT_MS whose time has come (call it from a periodic
 * timer, so a count is not held until the next drop). Returns the [warn] lines logged. */
size_t ipcq_report(struct ipcq *q);

/* Bounds the descriptors that q's waiting frames own by fds (not owned; it outlives q),
 * which other queues may share; NULL: no bound. Before anything waits in q. */
void ipcq_set_fds(struct ipcq *q, struct ipcq_fds *fds);

/* Drops a frame's descriptor as a queue does: with IPCQ_OWN_FD in flags it is closed, shut
 * down first with IPCQ_SHUT_ON_DROP (ipc_drop_fd); a borrowed one (no IPCQ_OWN_FD) or fd
 * -1: nothing. For the callers that drop a frame before it reaches a queue. */
void ipcq_drop_fd(int fd, unsigned flags);

/* The frames dropped where there was no queue to count them (none could be made: out of
 * memory), for ipcq_lost(). Zero-initialised. */
struct ipcq_lost {
	uint64_t dropped, unreported, reported_ms;
	uint16_t type; /* the last drop's frame type */
	int why;       /* and reason (a negative errno) */
	uint64_t (*now_ms)(void); /* tests: the lines' clock (milliseconds); NULL: mono_ms */
};

/* Drops a frame of type that never reached a queue: its descriptor as ipcq_drop_fd(fd,
 * flags) does, counted in *lost and logged as a [warn] line under scope and name (why: a
 * negative errno) at most every IPCQ_REPORT_MS (the first at once), with the count since
 * the last line and in all, and the last drop's type and reason. */
void ipcq_lost(struct ipcq_lost *lost, const char *scope, const char *name, uint16_t type, int fd,
	       unsigned flags, int why);

/* Logs the drops of *lost held back by IPCQ_REPORT_MS once their time has come, as
 * ipcq_report() does for a queue's (call it from the same periodic timer, with the scope
 * and name given to ipcq_lost()). Returns the [warn] lines logged (0 or 1). */
size_t ipcq_lost_report(struct ipcq_lost *lost, const char *scope, const char *name);

/* A share of this process's descriptors for ipcq_fds.max: a quarter of RLIMIT_NOFILE's
 * soft limit (SIZE_MAX when unlimited, IPCQ_FDS_FALLBACK when getrlimit fails). */
size_t ipcq_fd_share(void);

/* Tests: the clock of the drop lines' rate (milliseconds; mono_ms by default). */
void ipcq_set_clock(struct ipcq *q, uint64_t (*now_ms)(void));

#endif
