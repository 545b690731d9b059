/* Unit tests for common/ipcq: control frames that find their socket full wait in order and
 * go when it has room; the queue leaves half the socket to frames sent directly; the
 * bounds (bytes, descriptors shared by queues) drop, counted and logged, also later from
 * ipcq_report(), as are frames that found no queue (ipcq_lost_report()); a key cancels a
 * waiting frame; a descriptor the queue owns is closed once its frame is sent or dropped
 * (shut down first when dropped, if asked), a borrowed one never is. Except in test_direct
 * and test_headroom, the socket is filled with IPC_PING frames first, so that every frame
 * under test has to wait. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ipc.h"
#include "common/ipcq.h"
#include "tests/unit/conn_fix.h"

#define BIG (1u << 30) /* a bound never reached */

struct pair {
	int fd[2];      /* the queue writes fd[0], the test reads fd[1] */
	uint64_t pings; /* filler frames sent */
};

static int setup(void **state)
{
	static struct pair p;

	p.pings = 0;
	*state = &p;
	return ipc_socketpair(p.fd) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	struct pair *p = *state;

	for (int i = 0; i < 2; i++)
		if (p->fd[i] >= 0)
			close(p->fd[i]);
	return 0;
}

/* Fills fd[0] with pings until it says -EAGAIN. */
static void fill(struct pair *p)
{
	int rc;

	while ((rc = ipc_send_ping(p->fd[0], p->pings + 1)) == 0)
		p->pings++;
	assert_int_equal(rc, -EAGAIN);
	assert_true(p->pings > 0);
}

static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

static ino_t inode_of(int fd)
{
	struct stat st;

	assert_int_equal(fstat(fd, &st), 0);
	return st.st_ino;
}

/* A descriptor to pass: the read end of a new pipe (its write end closed). */
static int new_fd(void)
{
	int fds[2];

	assert_int_equal(pipe(fds), 0);
	close(fds[1]);
	return fds[0];
}

static struct ipc_handoff handoff(uint32_t slot)
{
	struct ipc_handoff h;

	memset(&h, 0, sizeof(h));
	h.slot = slot;
	h.len = 4;
	memcpy(h.listener, "tcp", 3);
	memcpy(h.data, "bind", 4);
	h.client.ss_family = AF_INET;
	return h;
}

/* One frame read from fd[1] (it must be there); its descriptor, if any, in *fd. */
static void next(struct pair *p, struct ipc_msg *m, int *fd)
{
	assert_int_equal(ipc_recv(p->fd[1], m, fd), 0);
}

/* Reads the pings that filled the socket, flushing q as room appears, until q is empty
 * (bounded). */
static void drain_pings(struct pair *p, struct ipcq *q, struct ipc_msg *m)
{
	for (uint64_t i = 1; i <= p->pings; i++) {
		struct ipc_ping ping;
		int fd;

		next(p, m, &fd);
		assert_int_equal(m->hdr.type, IPC_PING);
		assert_int_equal(ipc_msg_get(m, &ping, sizeof(ping)), 0);
		assert_int_equal(ping.seq, i);
		assert_int_equal(fd, -1);
	}
	for (int i = 0; i < 1000 && ipcq_flush(q) > 0; i++)
		;
	assert_int_equal(ipcq_waiting(q), 0);
}

static void expect_str(struct pair *p, struct ipc_msg *m, uint16_t type, const char *s, int *fd)
{
	next(p, m, fd);
	assert_int_equal(m->hdr.type, type);
	assert_string_equal(ipc_msg_str(m), s);
}

static void expect_nothing(struct pair *p, struct ipc_msg *m)
{
	int fd;

	assert_int_equal(ipc_recv(p->fd[1], m, &fd), -EAGAIN);
}

/* Room and nothing waiting: sent at once. An owned descriptor is closed after it went
 * (the peer has its own), a borrowed one stays open. */
static void test_direct(void **state)
{
	struct pair *p = *state;
	struct ipcq *q = ipcq_new(p->fd[0], BIG, "test", "direct");
	struct ipc_handoff h = handoff(1);
	struct ipc_msg m;
	int own = new_fd(), lent = new_fd(), fd;
	ino_t own_ino = inode_of(own), lent_ino = inode_of(lent);

	assert_non_null(q);
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), own, IPCQ_OWN_FD, NULL), 0);
	assert_int_equal(ipcq_send(q, IPC_FDSTORE, "s1", 2, lent, 0, "s1"), 0);
	assert_int_equal(ipcq_waiting(q), 0);
	assert_false(fd_open(own));
	assert_true(fd_open(lent));
	next(p, &m, &fd);
	assert_int_equal(m.hdr.type, IPC_TCP_HANDOFF);
	assert_int_equal(inode_of(fd), own_ino);
	close(fd);
	expect_str(p, &m, IPC_FDSTORE, "s1", &fd);
	assert_int_equal(inode_of(fd), lent_ino);
	close(fd);
	expect_nothing(p, &m);
	assert_int_equal(ipcq_dropped(q, 0), 0);
	ipcq_free(q);
	assert_true(fd_open(lent));
	close(lent);
}

/* A full socket: every frame waits, and so does every later one even once there is room
 * (never before what waits); they arrive in order after the pings, each with its own
 * descriptor; an owned one is closed once sent. */
static void test_order(void **state)
{
	struct pair *p = *state;
	struct ipcq *q = ipcq_new(p->fd[0], BIG, "test", "order");
	struct ipc_handoff h = handoff(2), got;
	struct ipc_msg m, ping;
	int own = new_fd(), lent = new_fd(), fd;
	ino_t own_ino = inode_of(own), lent_ino = inode_of(lent);

	assert_non_null(q);
	fill(p);
	assert_int_equal(ipcq_send(q, IPC_FDUNSTORE, "u1", 2, -1, 0, NULL), 0);
	assert_int_equal(ipcq_send(q, IPC_FDSTORE, "s1", 2, lent, 0, "s1"), 0);
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), own, IPCQ_OWN_FD, NULL), 0);
	assert_int_equal(ipcq_waiting(q), 3);
	assert_true(fd_open(own)); /* kept open while it waits */
	/* Room for one frame: the next still queues behind the three. */
	next(p, &ping, &fd);
	assert_int_equal(ping.hdr.type, IPC_PING);
	p->pings--;
	assert_int_equal(ipcq_send(q, IPC_FDUNSTORE, "u2", 2, -1, 0, NULL), 0);
	assert_int_equal(ipcq_waiting(q), 4);
	/* The rest of the pings (numbered from 2 now), then the queue. */
	for (uint64_t i = 0; i < p->pings; i++) {
		next(p, &ping, &fd);
		assert_int_equal(ping.hdr.type, IPC_PING);
	}
	for (int i = 0; i < 1000 && ipcq_flush(q) > 0; i++)
		;
	assert_int_equal(ipcq_waiting(q), 0);
	expect_str(p, &m, IPC_FDUNSTORE, "u1", &fd);
	assert_int_equal(fd, -1);
	expect_str(p, &m, IPC_FDSTORE, "s1", &fd);
	assert_int_equal(inode_of(fd), lent_ino);
	close(fd);
	next(p, &m, &fd);
	assert_int_equal(m.hdr.type, IPC_TCP_HANDOFF);
	assert_int_equal(ipc_msg_get(&m, &got, sizeof(got)), 0);
	assert_memory_equal(&got, &h, sizeof(h));
	assert_int_equal(inode_of(fd), own_ino);
	close(fd);
	expect_str(p, &m, IPC_FDUNSTORE, "u2", &fd);
	expect_nothing(p, &m);
	assert_false(fd_open(own));
	assert_true(fd_open(lent));
	assert_int_equal(ipcq_dropped(q, 0), 0);
	ipcq_free(q);
	close(lent);
}

/* The bound: two frames' worth. A third is dropped and counted by type, its owned
 * descriptor closed; once the queue has gone, there is room again. */
static void test_bound(void **state)
{
	struct pair *p = *state;
	struct ipc_handoff h = handoff(1);
	size_t one = IPCQ_FRAME_COST + sizeof(h);
	struct ipcq *q = ipcq_new(p->fd[0], 2 * one, "test", "bound");
	struct ipc_msg m;
	int fds[4], fd;

	assert_non_null(q);
	for (int i = 0; i < 4; i++)
		fds[i] = new_fd();
	fill(p);
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), fds[0], IPCQ_OWN_FD, NULL),
			 0);
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), fds[1], IPCQ_OWN_FD, NULL),
			 0);
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), fds[2], IPCQ_OWN_FD, NULL),
			 -ENOBUFS);
	assert_false(fd_open(fds[2]));
	assert_true(fd_open(fds[0]) && fd_open(fds[1]));
	/* A smaller frame past the bound is dropped too. */
	assert_int_equal(ipcq_send(q, IPC_FDUNSTORE, "u", 1, -1, 0, NULL), -ENOBUFS);
	assert_int_equal(ipcq_waiting(q), 2);
	assert_int_equal(ipcq_dropped(q, IPC_TCP_HANDOFF), 1);
	assert_int_equal(ipcq_dropped(q, IPC_FDUNSTORE), 1);
	assert_int_equal(ipcq_dropped(q, 0), 2);
	drain_pings(p, q, &m);
	for (int i = 0; i < 2; i++) {
		next(p, &m, &fd);
		assert_int_equal(m.hdr.type, IPC_TCP_HANDOFF);
		close(fd);
	}
	expect_nothing(p, &m);
	assert_false(fd_open(fds[0]) || fd_open(fds[1]));
	/* Room again. */
	fill(p);
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), fds[3], IPCQ_OWN_FD, NULL),
			 0);
	assert_int_equal(ipcq_waiting(q), 1);
	assert_int_equal(ipcq_dropped(q, 0), 2);
	ipcq_free(q); /* drops it: closed */
	assert_false(fd_open(fds[3]));
}

/* Keys: one waiting frame per key (a second is refused, the first stands); cancel takes
 * the frame out unsent, a borrowed descriptor left open, an owned one closed. */
static void test_cancel(void **state)
{
	struct pair *p = *state;
	struct ipcq *q = ipcq_new(p->fd[0], BIG, "test", "cancel");
	struct ipc_msg m;
	int lent = new_fd(), own = new_fd(), own2 = new_fd(), fd;

	assert_non_null(q);
	assert_false(ipcq_cancel(q, "s1")); /* nothing waits */
	fill(p);
	assert_int_equal(ipcq_send(q, IPC_FDSTORE, "s1", 2, lent, 0, "s1"), 0);
	assert_int_equal(ipcq_send(q, IPC_FDSTORE, "s1", 2, lent, 0, "s1"), -EEXIST);
	assert_int_equal(ipcq_send(q, IPC_FDSTORE, "s1", 2, own2, IPCQ_OWN_FD, "s1"), -EEXIST);
	assert_false(fd_open(own2));
	assert_int_equal(ipcq_send(q, IPC_FDSTORE, "s2", 2, own, IPCQ_OWN_FD, "s2"), 0);
	assert_int_equal(ipcq_send(q, IPC_FDUNSTORE, "u1", 2, -1, 0, NULL), 0);
	assert_int_equal(ipcq_waiting(q), 3);
	assert_int_equal(ipcq_dropped(q, 0), 0); /* -EEXIST is not a drop */
	assert_false(ipcq_cancel(q, "u1"));      /* not keyed */
	assert_false(ipcq_cancel(q, "s3"));
	assert_true(ipcq_cancel(q, "s1"));
	assert_true(fd_open(lent));
	assert_false(ipcq_cancel(q, "s1"));
	assert_true(ipcq_cancel(q, "s2"));
	assert_false(fd_open(own));
	assert_int_equal(ipcq_waiting(q), 1);
	/* The key is free again. */
	assert_int_equal(ipcq_send(q, IPC_FDSTORE, "s1", 2, lent, 0, "s1"), 0);
	drain_pings(p, q, &m);
	expect_str(p, &m, IPC_FDUNSTORE, "u1", &fd);
	expect_str(p, &m, IPC_FDSTORE, "s1", &fd);
	close(fd);
	expect_nothing(p, &m);
	assert_false(ipcq_cancel(q, "s1")); /* sent: no longer waits */
	ipcq_free(q);
	assert_true(fd_open(lent));
	close(lent);
}

/* ipcq_free drops what waits: owned descriptors closed, borrowed ones not. */
static void test_free_drops(void **state)
{
	struct pair *p = *state;
	struct ipcq *q = ipcq_new(p->fd[0], BIG, "test", "free");
	struct ipc_handoff h = handoff(1);
	int lent = new_fd(), own = new_fd();

	assert_non_null(q);
	fill(p);
	assert_int_equal(ipcq_send(q, IPC_FDSTORE, "s1", 2, lent, 0, "s1"), 0);
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), own, IPCQ_OWN_FD, NULL), 0);
	ipcq_free(q);
	assert_false(fd_open(own));
	assert_true(fd_open(lent));
	close(lent);
	ipcq_free(NULL);
}

/* The peer gone: a flush drops what waits (counted, owned descriptors closed), and a
 * frame sent afterwards is refused at once (ipc_send's error), dropped too. */
static void test_peer_gone(void **state)
{
	struct pair *p = *state;
	struct ipcq *q = ipcq_new(p->fd[0], BIG, "test", "gone");
	struct ipc_handoff h = handoff(1);
	int own = new_fd(), own2 = new_fd();

	assert_non_null(q);
	fill(p);
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), own, IPCQ_OWN_FD, NULL), 0);
	assert_int_equal(ipcq_send(q, IPC_FDUNSTORE, "u1", 2, -1, 0, NULL), 0);
	close(p->fd[1]);
	p->fd[1] = -1;
	assert_int_equal(ipcq_flush(q), 0);
	assert_false(fd_open(own));
	assert_int_equal(ipcq_dropped(q, IPC_TCP_HANDOFF), 1);
	assert_int_equal(ipcq_dropped(q, IPC_FDUNSTORE), 1);
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), own2, IPCQ_OWN_FD, NULL),
			 -EPIPE);
	assert_false(fd_open(own2));
	assert_int_equal(ipcq_dropped(q, 0), 3);
	ipcq_free(q);
}

/* The queue fills the socket only halfway: with nothing read, frames start to wait while
 * a frame sent directly (a PING) still has room, and keeps having it for a while; then
 * everything arrives, in order. */
static void test_headroom(void **state)
{
	struct pair *p = *state;
	struct ipcq *q = ipcq_new(p->fd[0], BIG, "test", "headroom");
	struct ipc_msg m;
	int sndbuf = 0, unread = 0, sent = 0, fd;
	socklen_t optlen = sizeof(sndbuf);

	assert_non_null(q);
	assert_int_equal(getsockopt(p->fd[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, &optlen), 0);
	/* Bounded: each frame costs the socket more than 64 bytes. */
	while (ipcq_waiting(q) == 0 && sent < sndbuf / 64) {
		assert_int_equal(ipcq_send(q, IPC_FDUNSTORE, "u", 1, -1, 0, NULL), 0);
		sent++;
	}
	assert_int_equal(ipcq_waiting(q), 1);
	sent--;
	assert_true(sent > 0);
	assert_int_equal(ioctl(p->fd[0], SIOCOUTQ, &unread), 0);
	assert_true(unread >= sndbuf / (int)IPCQ_FILL_SHARE && unread < sndbuf);
	/* A flush sends nothing while the share is used; direct frames still go. */
	assert_int_equal(ipcq_flush(q), 1);
	for (int i = 0; i < 4; i++)
		assert_int_equal(ipc_send_ping(p->fd[0], ++p->pings), 0);
	for (int i = 0; i < sent; i++) {
		next(p, &m, &fd);
		assert_int_equal(m.hdr.type, IPC_FDUNSTORE);
	}
	for (uint64_t i = 1; i <= p->pings; i++) {
		next(p, &m, &fd);
		assert_int_equal(m.hdr.type, IPC_PING);
	}
	assert_int_equal(ipcq_flush(q), 0);
	next(p, &m, &fd);
	assert_int_equal(m.hdr.type, IPC_FDUNSTORE);
	expect_nothing(p, &m);
	assert_int_equal(ipcq_dropped(q, 0), 0);
	ipcq_free(q);
}

/* One descriptor bound shared by two queues: owned descriptors count against it while
 * they wait (a borrowed one and a frame without one do not); past it an owned one is
 * dropped (-EMFILE, counted by type, closed); sent or dropped, they give their place
 * back. */
static void test_fd_bound(void **state)
{
	struct pair *p = *state;
	struct ipcq_fds fds = { .used = 0, .max = 2 };
	struct ipcq *q1 = ipcq_new(p->fd[0], BIG, "test", "fds 1");
	struct ipcq *q2 = ipcq_new(p->fd[0], BIG, "test", "fds 2");
	struct ipc_handoff h = handoff(1);
	struct ipc_msg m;
	int own[4], lent = new_fd(), fd;

	assert_non_null(q1);
	assert_non_null(q2);
	ipcq_set_fds(q1, &fds);
	ipcq_set_fds(q2, &fds);
	for (int i = 0; i < 4; i++)
		own[i] = new_fd();
	fill(p);
	assert_int_equal(ipcq_send(q1, IPC_TCP_HANDOFF, &h, sizeof(h), own[0], IPCQ_OWN_FD, NULL),
			 0);
	assert_int_equal(ipcq_send(q2, IPC_TCP_HANDOFF, &h, sizeof(h), own[1], IPCQ_OWN_FD, NULL),
			 0);
	assert_int_equal(fds.used, 2);
	assert_int_equal(ipcq_send(q1, IPC_TCP_HANDOFF, &h, sizeof(h), own[2], IPCQ_OWN_FD, NULL),
			 -EMFILE);
	assert_false(fd_open(own[2]));
	assert_int_equal(ipcq_dropped(q1, IPC_TCP_HANDOFF), 1);
	/* Borrowed, or none: not counted. */
	assert_int_equal(ipcq_send(q1, IPC_FDSTORE, "s1", 2, lent, 0, "s1"), 0);
	assert_int_equal(ipcq_send(q2, IPC_FDUNSTORE, "u1", 2, -1, IPCQ_OWN_FD, NULL), 0);
	assert_int_equal(fds.used, 2);
	assert_int_equal(ipcq_waiting(q1) + ipcq_waiting(q2), 4);
	/* q2 dropped (closed): its place is free for q1. */
	ipcq_free(q2);
	assert_false(fd_open(own[1]));
	assert_int_equal(fds.used, 1);
	assert_int_equal(ipcq_send(q1, IPC_TCP_HANDOFF, &h, sizeof(h), own[3], IPCQ_OWN_FD, NULL),
			 0);
	assert_int_equal(fds.used, 2);
	/* Sent: none left. */
	drain_pings(p, q1, &m);
	assert_int_equal(fds.used, 0);
	for (int i = 0; i < 3; i++) {
		next(p, &m, &fd);
		assert_int_not_equal(m.hdr.type, IPC_FDUNSTORE);
		close(fd);
	}
	/* q2's pings were q1's filler too: what q2 had queued is gone with it. */
	expect_nothing(p, &m);
	assert_int_equal(ipcq_dropped(q1, 0), 1);
	ipcq_free(q1);
	close(lent);
}

static uint64_t fake_ms;

static uint64_t fake_clock(void)
{
	return fake_ms;
}

/* Drops are logged at once the first time, then at most once every IPCQ_REPORT_MS per
 * type: ipcq_report() logs what was held back once that time has come, without another
 * drop, and nothing when there is nothing new. */
static void test_report(void **state)
{
	struct pair *p = *state;
	struct ipcq *q = ipcq_new(p->fd[0], 0, "test", "report"); /* every frame that waits
								    * is dropped */

	assert_non_null(q);
	fake_ms = 1000000;
	ipcq_set_clock(q, fake_clock);
	fill(p);
	assert_int_equal(ipcq_report(q), 0);
	assert_int_equal(ipcq_send(q, IPC_FDUNSTORE, "u1", 2, -1, 0, NULL), -ENOBUFS); /* logged */
	assert_int_equal(ipcq_report(q), 0);
	fake_ms += 1;
	assert_int_equal(ipcq_send(q, IPC_FDUNSTORE, "u2", 2, -1, 0, NULL), -ENOBUFS); /* held */
	assert_int_equal(ipcq_send(q, IPC_LOGLEVEL, "x", 1, -1, 0, NULL), -ENOBUFS);   /* logged */
	fake_ms += IPCQ_REPORT_MS / 2;
	assert_int_equal(ipcq_report(q), 0);
	fake_ms += IPCQ_REPORT_MS / 2;
	assert_int_equal(ipcq_report(q), 1); /* u2's, 10 s after the first */
	assert_int_equal(ipcq_report(q), 0);
	fake_ms += IPCQ_REPORT_MS;
	assert_int_equal(ipcq_report(q), 0);
	assert_int_equal(ipcq_dropped(q, 0), 3);
	ipcq_free(q);
}

/* IPCQ_SHUT_ON_DROP: an owned socket dropped unsent (the bound, cancel, free) is shut
 * down, so its peer sees the end although a copy stays open; one that was sent is not
 * (the receiver's copy serves it); without the flag a drop only closes it. */
static void test_shut_on_drop(void **state)
{
	struct pair *p = *state;
	struct ipc_handoff h = handoff(1);
	size_t one = IPCQ_FRAME_COST + sizeof(h) + 3;
	struct ipcq *q = ipcq_new(p->fd[0], 2 * one, "test", "shut");
	struct ipc_msg m;
	int peer[5], copy[5], s[5], fd;
	unsigned shut = IPCQ_OWN_FD | IPCQ_SHUT_ON_DROP;

	assert_non_null(q);
	for (int i = 0; i < 5; i++)
		s[i] = conn_with_copy(&peer[i], &copy[i]);
	fill(p);
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), s[0], shut, "k0"), 0);
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), s[1], shut, "k1"), 0);
	/* Past the bound: dropped, shut down; without the flag only closed. */
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), s[2], shut, NULL), -ENOBUFS);
	assert_true(peer_sees_eof(peer[2]));
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), s[3], IPCQ_OWN_FD, NULL),
			 -ENOBUFS);
	assert_false(peer_sees_eof(peer[3]));
	/* Cancelled: shut down. */
	assert_true(ipcq_cancel(q, "k0"));
	assert_true(peer_sees_eof(peer[0]));
	/* Sent: not shut down, the receiver's copy works. */
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), s[4], shut, NULL), 0);
	drain_pings(p, q, &m);
	next(p, &m, &fd); /* s[1] */
	close(fd);
	next(p, &m, &fd); /* s[4] */
	assert_false(peer_sees_eof(peer[4]));
	assert_int_equal(send(fd, "x", 1, 0), 1);
	close(fd);
	/* Dropped at free: shut down. */
	fill(p);
	s[1] = conn_with_copy(&fd, &copy[1]);
	close(peer[1]);
	peer[1] = fd;
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), s[1], shut, NULL), 0);
	assert_false(peer_sees_eof(peer[1]));
	ipcq_free(q);
	assert_true(peer_sees_eof(peer[1]));
	for (int i = 0; i < 5; i++) {
		close(peer[i]);
		close(copy[i]);
	}
}

/* IPCQ_SHUT_ON_DROP when the peer is gone: a frame the socket refuses at once (the direct
 * send's error) and one a flush finds undeliverable are shut down, not only closed. */
static void test_shut_on_drop_peer_gone(void **state)
{
	struct pair *p = *state;
	struct ipcq *q = ipcq_new(p->fd[0], BIG, "test", "shut gone");
	struct ipc_handoff h = handoff(1);
	unsigned shut = IPCQ_OWN_FD | IPCQ_SHUT_ON_DROP;
	int peer[2], copy[2], s[2];

	assert_non_null(q);
	for (int i = 0; i < 2; i++)
		s[i] = conn_with_copy(&peer[i], &copy[i]);
	fill(p);
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), s[0], shut, NULL), 0);
	close(p->fd[1]);
	p->fd[1] = -1;
	/* The flush finds the peer gone. */
	assert_false(peer_sees_eof(peer[0]));
	assert_int_equal(ipcq_flush(q), 0);
	assert_true(peer_sees_eof(peer[0]));
	/* Nothing waits: sent directly, refused at once. */
	assert_int_equal(ipcq_send(q, IPC_TCP_HANDOFF, &h, sizeof(h), s[1], shut, NULL), -EPIPE);
	assert_true(peer_sees_eof(peer[1]));
	assert_int_equal(ipcq_dropped(q, IPC_TCP_HANDOFF), 2);
	ipcq_free(q);
	for (int i = 0; i < 2; i++) {
		close(peer[i]);
		close(copy[i]);
	}
}

/* ipcq_drop_fd: shut down and closed with both flags, only closed with IPCQ_OWN_FD, left
 * alone when borrowed. */
static void test_drop_fd(void **state)
{
	int peer[3], copy[3], s[3];

	(void)state;
	for (int i = 0; i < 3; i++)
		s[i] = conn_with_copy(&peer[i], &copy[i]);
	ipcq_drop_fd(s[0], IPCQ_OWN_FD | IPCQ_SHUT_ON_DROP);
	assert_false(fd_open(s[0]));
	assert_true(peer_sees_eof(peer[0]));
	ipcq_drop_fd(s[1], IPCQ_OWN_FD);
	assert_false(fd_open(s[1]));
	assert_false(peer_sees_eof(peer[1]));
	ipcq_drop_fd(s[2], IPCQ_SHUT_ON_DROP);
	assert_true(fd_open(s[2]));
	assert_false(peer_sees_eof(peer[2]));
	ipcq_drop_fd(-1, IPCQ_OWN_FD | IPCQ_SHUT_ON_DROP);
	close(s[2]);
	for (int i = 0; i < 3; i++) {
		close(peer[i]);
		close(copy[i]);
	}
}

/* ipcq_lost: the descriptor dropped as ipcq_drop_fd does, every frame counted. */
static void test_lost(void **state)
{
	struct ipcq_lost lost = { 0 };
	int peer, copy, s;

	(void)state;
	s = conn_with_copy(&peer, &copy);
	ipcq_lost(&lost, "test", "lost", IPC_TCP_HANDOFF, s, IPCQ_OWN_FD | IPCQ_SHUT_ON_DROP,
		  -ENOMEM);
	assert_false(fd_open(s));
	assert_true(peer_sees_eof(peer));
	ipcq_lost(&lost, "test", "lost", IPC_FDUNSTORE, -1, 0, -ENOMEM);
	assert_int_equal(lost.dropped, 2);
	assert_int_not_equal(lost.reported_ms, 0);
	close(peer);
	close(copy);
}

/* ipcq_lost's lines: the first drop logged at once, a later one within IPCQ_REPORT_MS held
 * back; ipcq_lost_report() (the 1 s timers', as ipcq_report() for a queue) logs it once that
 * time has come, without another drop, and nothing when there is nothing new. */
static void test_lost_report(void **state)
{
	struct ipcq_lost lost = { .now_ms = fake_clock };

	(void)state;
	fake_ms = 2000000;
	assert_int_equal(ipcq_lost_report(&lost, "test", "lost"), 0);
	ipcq_lost(&lost, "test", "lost", IPC_FDUNSTORE, -1, 0, -ENOMEM); /* logged */
	assert_int_equal(lost.unreported, 0);
	assert_int_equal(ipcq_lost_report(&lost, "test", "lost"), 0);
	fake_ms += 1;
	ipcq_lost(&lost, "test", "lost", IPC_TCP_HANDOFF, -1, 0, -ENOMEM); /* held */
	assert_int_equal(lost.unreported, 1);
	fake_ms += IPCQ_REPORT_MS / 2;
	assert_int_equal(ipcq_lost_report(&lost, "test", "lost"), 0);
	assert_int_equal(lost.unreported, 1);
	fake_ms += IPCQ_REPORT_MS / 2;
	assert_int_equal(ipcq_lost_report(&lost, "test", "lost"), 1); /* 10 s after the first */
	assert_int_equal(lost.unreported, 0);
	assert_int_equal(ipcq_lost_report(&lost, "test", "lost"), 0);
	fake_ms += IPCQ_REPORT_MS;
	assert_int_equal(ipcq_lost_report(&lost, "test", "lost"), 0);
	assert_int_equal(lost.dropped, 2);
}

/* ipcq_fd_share: a quarter of the soft RLIMIT_NOFILE, whatever it is now. */
static void test_fd_share(void **state)
{
	struct rlimit old, low;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = old.rlim_max != RLIM_INFINITY && old.rlim_max < 400 ? old.rlim_max : 400;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	assert_int_equal(ipcq_fd_share(), low.rlim_cur / 4);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	if (old.rlim_cur == RLIM_INFINITY)
		assert_true(ipcq_fd_share() == SIZE_MAX);
	else
		assert_int_equal(ipcq_fd_share(), old.rlim_cur / 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_direct, setup, teardown),
		cmocka_unit_test_setup_teardown(test_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_drops, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_gone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_headroom, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fd_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_report, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shut_on_drop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shut_on_drop_peer_gone, setup, teardown),
		cmocka_unit_test(test_drop_fd),
		cmocka_unit_test(test_lost),
		cmocka_unit_test(test_lost_report),
		cmocka_unit_test(test_fd_share),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
