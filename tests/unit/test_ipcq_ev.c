/* Unit tests for common/ipcq_ev: frames that find the control socket full wait in the queue
 * with the EV_WRITE watcher on, and the loop sends them in order once the reader drains the
 * socket, the watcher off again; after ipcq_ev_close() the next frame makes a new queue, on a
 * new socket too (a respawned worker's), its watcher on that socket. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>
#include <ev.h>

#include "common/ipc.h"
#include "common/ipcq_ev.h"

#define BIG (1u << 30) /* a bound never reached */
#define WAITING 3      /* frames sent through the queue while the socket is full */

/* A ping's seq sent through qe on sock. */
static int send_ping(struct ipcq_ev *qe, int sock, uint64_t seq)
{
	struct ipc_ping p = { .seq = seq };

	return ipcq_ev_send(qe, sock, IPC_PING, &p, sizeof(p), -1, 0, NULL);
}

/* The next frame on fd must be the ping seq. */
static void expect_ping(int fd, uint64_t seq)
{
	struct ipc_msg m;
	struct ipc_ping p;
	int pfd = -1;

	assert_int_equal(ipc_recv(fd, &m, &pfd), 0);
	assert_int_equal(m.hdr.type, IPC_PING);
	assert_int_equal(ipc_msg_get(&m, &p, sizeof(p)), 0);
	assert_int_equal(p.seq, seq);
	assert_int_equal(pfd, -1);
}

static void test_wait_flush_reopen(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
	struct ipcq_ev qe;
	uint64_t filled = 0;
	int sp[2], rc;

	(void)state;
	assert_non_null(loop);
	/* SOCK_SEQPACKET and non-blocking, as every control socket. */
	assert_int_equal(ipc_socketpair(sp), 0);
	ipcq_ev_init(&qe, loop, BIG, NULL, "test", "ev");
	while ((rc = ipc_send_ping(sp[0], filled + 1)) == 0)
		filled++;
	assert_int_equal(rc, -EAGAIN);
	assert_true(filled > 0);
	for (uint64_t i = 1; i <= WAITING; i++)
		assert_int_equal(send_ping(&qe, sp[0], filled + i), 0);
	assert_non_null(qe.q);
	assert_int_equal(ipcq_waiting(qe.q), WAITING);
	assert_true(ev_is_active(&qe.io));
	for (uint64_t i = 1; i <= filled; i++)
		expect_ping(sp[1], i);
	/* The watcher sends what waits once the loop sees room; bounded in count. */
	for (int i = 0; i < 100 && ev_is_active(&qe.io); i++)
		ev_run(loop, EVRUN_NOWAIT);
	assert_false(ev_is_active(&qe.io));
	assert_int_equal(ipcq_waiting(qe.q), 0);
	for (uint64_t i = 1; i <= WAITING; i++)
		expect_ping(sp[1], filled + i);
	/* Closed, then a new queue for the next frame, which goes at once. */
	ipcq_ev_close(&qe);
	assert_null(qe.q);
	assert_false(ev_is_active(&qe.io));
	assert_int_equal(send_ping(&qe, sp[0], 1000), 0);
	assert_non_null(qe.q);
	assert_false(ev_is_active(&qe.io));
	expect_ping(sp[1], 1000);
	ipcq_ev_close(&qe);
	close(sp[0]);
	close(sp[1]);
	ev_loop_destroy(loop);
}

/* Fills fd's socket with pings 1.. until it says -EAGAIN; returns how many went. */
static uint64_t fill(int fd)
{
	uint64_t n = 0;
	int rc;

	while ((rc = ipc_send_ping(fd, n + 1)) == 0 && n < 100000)
		n++;
	assert_int_equal(rc, -EAGAIN);
	assert_true(n > 0);
	return n;
}

/* A descriptor the queue will own (a pipe's read end; the write end closed). */
static int owned_fd(void)
{
	int p[2];

	assert_int_equal(pipe(p), 0);
	close(p[1]);
	return p[0];
}

/* The respawn case (the master's struct ipcq_ev for a slot serves each new worker's socket
 * in turn): after ipcq_ev_close(), frames to a second socketpair use a new queue on the new
 * socket, the watcher on the new descriptor (the first socket, still full, would never wake
 * it), its owned descriptors bounded by the same struct ipcq_fds (max 1). */
static void test_respawn_socket(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
	struct ipcq_fds fds = { .used = 0, .max = 1 };
	struct ipcq_ev qe;
	struct ipc_msg m;
	uint64_t full_a, full_b;
	int a[2], b[2], pfd = -1;

	(void)state;
	assert_non_null(loop);
	assert_int_equal(ipc_socketpair(a), 0);
	assert_int_equal(ipc_socketpair(b), 0);
	ipcq_ev_init(&qe, loop, BIG, &fds, "test", "ev");
	/* The first worker's socket: full, a hand-off-like frame waits, then the worker goes. */
	full_a = fill(a[0]);
	assert_int_equal(ipcq_ev_send(&qe, a[0], IPC_LISTENER_ADD, "x", 1, owned_fd(),
				      IPCQ_OWN_FD, NULL), 0);
	assert_int_equal(fds.used, 1);
	assert_true(ev_is_active(&qe.io));
	ipcq_ev_close(&qe);
	assert_int_equal(fds.used, 0);	/* its descriptor closed with the queue */
	/* The respawned worker's socket, full too: frames wait in a new queue on it. */
	full_b = fill(b[0]);
	assert_int_equal(ipcq_ev_send(&qe, b[0], IPC_LISTENER_ADD, "y", 1, owned_fd(),
				      IPCQ_OWN_FD, NULL), 0);
	assert_int_equal(ipcq_ev_send(&qe, b[0], IPC_LISTENER_ADD, "z", 1, owned_fd(),
				      IPCQ_OWN_FD, NULL), -EMFILE);	/* the bound, kept */
	for (uint64_t i = 1; i <= WAITING; i++)
		assert_int_equal(send_ping(&qe, b[0], full_b + i), 0);
	assert_int_equal(qe.sock, b[0]);
	assert_int_equal(qe.io.fd, b[0]);
	assert_true(ev_is_active(&qe.io));
	assert_int_equal(ipcq_waiting(qe.q), 1 + WAITING);
	for (uint64_t i = 1; i <= full_b; i++)
		expect_ping(b[1], i);
	for (int i = 0; i < 100 && ev_is_active(&qe.io); i++)
		ev_run(loop, EVRUN_NOWAIT);
	assert_false(ev_is_active(&qe.io));
	assert_int_equal(ipcq_waiting(qe.q), 0);
	assert_int_equal(fds.used, 0);
	assert_int_equal(ipc_recv(b[1], &m, &pfd), 0);
	assert_int_equal(m.hdr.type, IPC_LISTENER_ADD);
	assert_int_equal(m.payload[0], 'y');
	assert_true(pfd >= 0);
	close(pfd);
	for (uint64_t i = 1; i <= WAITING; i++)
		expect_ping(b[1], full_b + i);
	assert_int_equal(ipc_recv(b[1], &m, &pfd), -EAGAIN);
	/* Nothing of the second queue went to the first socket, which holds its pings only. */
	for (uint64_t i = 1; i <= full_a; i++)
		expect_ping(a[1], i);
	assert_int_equal(ipc_recv(a[1], &m, &pfd), -EAGAIN);
	ipcq_ev_close(&qe);
	close(a[0]);
	close(a[1]);
	close(b[0]);
	close(b[1]);
	ev_loop_destroy(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wait_flush_reopen),
		cmocka_unit_test(test_respawn_socket),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
