/* Unit tests for common/ipcq_ev: frames that find the control socket full wait in the queue
 * with the EV_WRITE watcher on, and the loop sends them in order once the reader drains the
 * socket, the watcher off again; after ipcq_ev_close() the next frame makes a new queue. */
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wait_flush_reopen),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
