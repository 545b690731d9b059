/* Unit tests of the worker's control frames (worker/worker.c's wk_ctl_msg, wk_ctl_last) and
 * heartbeat: an IPC_STOP that says the stop is immediate gives the worker the shorter grace
 * even when it is read before the master's SIGTERM (whose handler runs only in the loop the
 * stop ends); a hand-off the worker cannot serve is shut down, not merely closed, one it
 * can is adopted; at exit only frames ipc_recv took are acted on; the heartbeat reports the
 * control queue's held-back drops. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ipc.h"
#include "common/ipcq.h"
#include "common/mono.h"
#include "tests/unit/conn_fix.h"
#include "tests/unit/worker_fix.h"
#include "worker/lifecycle.h"
#include "worker/stream.h"
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

/* One worker with an active plain TCP listener "l0", added as the master adds one
 * (IPC_LISTENER_ADD through wk_ctl_msg), its control socket sp[1] (sp[0]: the master's). */
struct wfix {
	struct worker_heritage h[1];
	struct worker *w[1];
	struct shm *shm;
	struct wk_listener *l0;
	int sp[2];
};

static void wfix_up(struct wfix *f)
{
	struct worker *w;
	struct ipc_msg m;
	uint16_t port;
	int lfd, fd;

	worker_fix_create("test-wkctl", 1, &f->shm, f->h, f->w);
	w = f->w[0];
	assert_int_equal(wk_tables_init(w), 0);
	wk_tcp_init(w);
	wheel_init(&w->wheel, mono_ms());
	assert_int_equal(ipc_socketpair(f->sp), 0);
	f->h[0].ctl_fd = f->sp[1];
	lfd = worker_fix_bound(SOCK_STREAM, &port);
	assert_int_equal(listen(lfd, 8), 0);
	assert_int_equal(ipc_send_str(f->sp[0], IPC_LISTENER_ADD, "l0", lfd), 0);
	close(lfd);
	assert_int_equal(ipc_recv(f->sp[1], &m, &fd), 0);
	wk_ctl_msg(w, &m, fd);
	assert_int_equal(w->n_ls, 1);
	f->l0 = w->ls[0];
	assert_true(f->l0->active);
	assert_int_equal(f->l0->proto, WORKER_PROTO_TCP);
	assert_string_equal(f->l0->name, "l0");
}

static void wfix_down(struct wfix *f)
{
	struct worker *w = f->w[0];

	for (size_t i = 0; i < w->n_ls; i++) {
		wk_listener_close(w, w->ls[i]);
		free(w->ls[i]);
	}
	w->n_ls = 0;
	wk_tables_free(w);
	if (f->sp[0] >= 0)
		close(f->sp[0]);
	close(f->sp[1]);
	worker_fix_destroy(f->shm, 1, f->w);
}

/* A well-formed IPC_TCP_HANDOFF for slot that names "l0", as the worker of f reads it:
 * whether the connection's peer sees its end while the fd store's copy stays open. */
static bool handoff_sees_eof(struct wfix *f, unsigned slot)
{
	struct ipc_handoff *ho = calloc(1, sizeof(*ho));
	struct ipc_msg m;
	int fd, peer, copy, conn;
	bool eof;

	assert_non_null(ho);
	ho->slot = slot;
	memcpy(ho->listener, "l0", 2);
	ho->client.ss_family = AF_INET;
	conn = conn_with_copy(&peer, &copy);
	assert_int_equal(ipc_send(f->sp[0], IPC_TCP_HANDOFF, ho, sizeof(*ho), conn), 0);
	close(conn);
	assert_int_equal(ipc_recv(f->sp[1], &m, &fd), 0);
	assert_true(fd >= 0);
	wk_ctl_msg(f->w[0], &m, fd);
	eof = peer_sees_eof(peer);
	assert_true(fcntl(copy, F_GETFD) >= 0);	/* the fd store's copy: still open */
	close(copy);
	close(peer);
	free(ho);
	return eof;
}

/* Another slot's hand-off naming an active listener of this worker: dropped, the client
 * sees the end (worker.c's slot check). */
static void test_handoff_wrong_slot(void **state)
{
	struct wfix f;

	(void)state;
	wfix_up(&f);
	assert_true(handoff_sees_eof(&f, 1));
	assert_int_equal(f.l0->n_conns, 0);
	wfix_down(&f);
}

/* The right slot, but "l0" closed (its entry left inactive, as a reload's LISTENER_REMOVE,
 * sent directly, leaves it when it overtakes a hand-off waiting in the master's queue):
 * dropped, the client sees the end (tcp.c's active check). */
static void test_handoff_removed_listener(void **state)
{
	struct wfix f;

	(void)state;
	wfix_up(&f);
	wk_listener_close(f.w[0], f.l0);
	assert_true(handoff_sees_eof(&f, 0));
	assert_int_equal(f.l0->n_conns, 0);
	wfix_down(&f);
}

/* The positive control: the right slot, "l0" active: the connection is adopted, open. */
static void test_handoff_adopted(void **state)
{
	struct wfix f;

	(void)state;
	wfix_up(&f);
	assert_false(handoff_sees_eof(&f, 0));
	assert_int_equal(f.l0->n_conns, 1);
	assert_non_null(f.l0->conns);
	wfix_down(&f);
}

/* At exit, with the master's end closed: wk_ctl_last acts only on frames ipc_recv took
 * (rc 0). A refused IPC_PARK (its payload 2 bytes, not 4: -EPROTO, its header in m) does
 * not start parking, nor does the -EPIPE after it; the call returns. */
static void test_ctl_last_refused_and_closed(void **state)
{
	struct wfix f;
	uint8_t buf[sizeof(struct ipc_hdr) + 2] = { 0 };
	struct ipc_hdr hdr = { .type = IPC_PARK, .len = 2 };

	(void)state;
	wfix_up(&f);
	memcpy(buf, &hdr, sizeof(hdr));
	assert_int_equal(send(f.sp[0], buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	close(f.sp[0]);
	f.sp[0] = -1;
	wk_ctl_last(f.w[0]);
	assert_false(f.w[0]->parking);
	wfix_down(&f);
}

/* And a well-formed IPC_PARK still unread is acted on before the closed channel ends the
 * reading. */
static void test_ctl_last_park(void **state)
{
	struct wfix f;
	uint32_t limit = 7;

	(void)state;
	wfix_up(&f);
	assert_int_equal(ipc_send(f.sp[0], IPC_PARK, &limit, sizeof(limit), -1), 0);
	close(f.sp[0]);
	f.sp[0] = -1;
	wk_ctl_last(f.w[0]);
	assert_true(f.w[0]->parking);
	assert_int_equal(f.w[0]->linger_limit_s, 7);
	wfix_down(&f);
}

static uint64_t fake_ms = 5000000; /* the lost drops' clock in test_heartbeat_lost */

static uint64_t fake_now(void)
{
	return fake_ms;
}

/* The worker's 1 s heartbeat (wk_heartbeat, through ipcq_ev_report) logs the frames to the
 * master dropped unqueued (no memory for a queue: ipcq_lost) that the 10 s rate held back,
 * without another drop: the held-back count is reported (and so reset) once 10 s passed. */
static void test_heartbeat_lost(void **state)
{
	struct worker_heritage h[1];
	struct worker *w[1];
	struct shm *shm;
	struct ipcq_lost *lost;

	(void)state;
	worker_fix_create("test-wkctl", 1, &shm, h, w);
	lost = &w[0]->ctlq.lost;
	lost->now_ms = fake_now;
	ipcq_lost(lost, "worker", "slot 0", IPC_FDSTORE, -1, 0, -ENOMEM); /* logged */
	ipcq_lost(lost, "worker", "slot 0", IPC_FDSTORE, -1, 0, -ENOMEM); /* held back */
	assert_int_equal(lost->unreported, 1);
	fake_ms += 1000;
	wk_heartbeat(w[0]);
	assert_int_equal(lost->unreported, 1);
	fake_ms += 10000;
	wk_heartbeat(w[0]);
	assert_int_equal(lost->unreported, 0);
	assert_int_equal(lost->dropped, 2);
	worker_fix_destroy(shm, 1, w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stop_now),
		cmocka_unit_test(test_stop_grace),
		cmocka_unit_test(test_handoff_wrong_slot),
		cmocka_unit_test(test_handoff_removed_listener),
		cmocka_unit_test(test_handoff_adopted),
		cmocka_unit_test(test_ctl_last_refused_and_closed),
		cmocka_unit_test(test_ctl_last_park),
		cmocka_unit_test(test_heartbeat_lost),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
