/* Unit tests of the worker's control frames (worker/worker.c's wk_ctl_msg): an IPC_STOP
 * that says the stop is immediate gives the worker the shorter grace even when it is read
 * before the master's SIGTERM (whose handler runs only in the loop the stop ends). */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ipc.h"
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stop_now),
		cmocka_unit_test(test_stop_grace),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
