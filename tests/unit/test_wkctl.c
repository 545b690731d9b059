/* Unit tests of the worker's control frames (worker/worker.c's wk_ctl_msg): an IPC_STOP
 * that says the stop is immediate gives the worker the shorter grace even when it is read
 * before the master's SIGTERM (whose handler runs only in the loop the stop ends); a
 * hand-off the worker cannot serve is shut down, not merely closed. */
#include "config.h"

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ipc.h"
#include "tests/unit/conn_fix.h"
#include "tests/unit/worker_fix.h"
#include "worker/lifecycle.h"
#include "worker/wk.h"

/* The master's IPC_STOP (now or not) as one fresh worker reads it: its stop_now after. */
static bool stop_read(bool now)
{
	struct worker_heritage h[1];
	struct worker *w[1];
	struct shm *shm;
	struct ipc_msg m;
	int sp[2], fd;
	bool got;

	worker_fix_create("test-wkctl", 1, &shm, h, w);
	assert_int_equal(ipc_socketpair(sp), 0);
	assert_int_equal(ipc_send_stop(sp[0], now), 0);
	assert_int_equal(ipc_recv(sp[1], &m, &fd), 0);
	wk_ctl_msg(w[0], &m, fd);
	got = w[0]->stop_now;
	close(sp[0]);
	close(sp[1]);
	worker_fix_destroy(shm, 1, w);
	return got;
}

static void test_stop_now(void **state)
{
	(void)state;
	assert_true(stop_read(true));
}

static void test_stop_grace(void **state)
{
	(void)state;
	assert_false(stop_read(false));
}

/* A well-formed IPC_TCP_HANDOFF for slot that names listener, as one worker reads it:
 * whether the connection's peer sees its end while the fd store's copy stays open. */
static bool handoff_dropped_shut(unsigned slot, const char *listener)
{
	struct worker_heritage h[1];
	struct worker *w[1];
	struct ipc_handoff *ho = calloc(1, sizeof(*ho));
	struct ipc_msg m;
	struct shm *shm;
	int sp[2], fd, peer, copy, conn;
	bool eof;

	assert_non_null(ho);
	worker_fix_create("test-wkctl", 1, &shm, h, w);
	ho->slot = slot;
	memcpy(ho->listener, listener, strlen(listener));
	conn = conn_with_copy(&peer, &copy);
	assert_int_equal(ipc_socketpair(sp), 0);
	assert_int_equal(ipc_send(sp[0], IPC_TCP_HANDOFF, ho, sizeof(*ho), conn), 0);
	close(conn);
	assert_int_equal(ipc_recv(sp[1], &m, &fd), 0);
	assert_true(fd >= 0);
	wk_ctl_msg(w[0], &m, fd);
	eof = peer_sees_eof(peer);
	assert_true(fcntl(copy, F_GETFD) >= 0);	/* the fd store's copy: still open */
	close(copy);
	close(peer);
	close(sp[0]);
	close(sp[1]);
	worker_fix_destroy(shm, 1, w);
	free(ho);
	return eof;
}

/* No active listener of that name (a reload's LISTENER_REMOVE, sent directly, overtook the
 * hand-off waiting in the master's queue): the client sees the end. */
static void test_handoff_unknown_listener(void **state)
{
	(void)state;
	assert_true(handoff_dropped_shut(0, "gone"));
}

/* Another slot's hand-off: dropped alike. */
static void test_handoff_wrong_slot(void **state)
{
	(void)state;
	assert_true(handoff_dropped_shut(1, "gone"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stop_now),
		cmocka_unit_test(test_stop_grace),
		cmocka_unit_test(test_handoff_unknown_listener),
		cmocka_unit_test(test_handoff_wrong_slot),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
