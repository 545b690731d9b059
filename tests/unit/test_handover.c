/* Unit tests of the short circuit's hand-over channel (worker/handover.c): which targets a
 * worker hands over to, that the receiver takes nothing it could not have been sent (short,
 * foreign or oversized messages, indexes past the table), that each message is answered
 * once, and that a full channel refuses at once instead of blocking. The receiving half
 * with a live allocation and a snapshot is the integration test's
 * (test_short_circuit.py::test_stream_receiver). */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/shm.h"
#include "shm/shm_relay.h"
#include "tests/unit/worker_fix.h"
#include "worker/lifecycle.h"
#include "worker/relay_priv.h"
#include "worker/transport.h"
#include "worker/wk.h"

#define SLOTS 2u

struct fix {
	struct shm *shm;
	int rx[SLOTS], tx[SLOTS];
	struct worker_heritage h[SLOTS];
	struct worker *w[SLOTS];
};

static int fix_setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	worker_fix_create("test-handover", SLOTS, &f->shm, f->h, f->w);
	for (unsigned s = 0; s < SLOTS; s++) {
		int sp[2];

		assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sp), 0);
		f->rx[s] = sp[0];
		f->tx[s] = sp[1];
	}
	for (unsigned s = 0; s < SLOTS; s++) {
		f->h[s].handover_rx = f->rx[s];
		f->h[s].handover_tx = f->tx;
		assert_int_equal(wk_tables_init(f->w[s]), 0);
		wk_ho_start(f->w[s]);
	}
	*state = f;
	return 0;
}

static int fix_teardown(void **state)
{
	struct fix *f = *state;

	for (unsigned s = 0; s < SLOTS; s++) {
		wk_tables_free(f->w[s]);
		close(f->rx[s]);
		close(f->tx[s]);
	}
	worker_fix_destroy(f->shm, SLOTS, f->w);
	free(f);
	return 0;
}

static uint64_t ctr(struct fix *f, unsigned slot, enum shm_ctr i)
{
	return worker_fix_ctr(f->shm, slot, i);
}

/* Runs slot's loop until its channel is empty (bounded). */
static void drain(struct fix *f, unsigned slot)
{
	for (int i = 0; i < 64; i++) {
		char b;

		if (recv(f->rx[slot], &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0)
			return;
		ev_run(f->w[slot]->loop, EVRUN_NOWAIT);
	}
	fail_msg("slot %u's channel never drained", slot);
}

static const struct shm_addr FROM = { .addr = { 127, 0, 0, 9 }, .port = 54000, .family = AF_INET };

/* Only another slot that exists, and only with a channel. */
static void test_send_targets(void **state)
{
	struct fix *f = *state;
	struct shm_relay_target t = { .idx = 3, .gen = 1, .owner = 1 };
	const uint8_t data[4] = { 1, 2, 3, 4 };

	assert_int_equal(wk_ho_send(f->w[0], &t, 54001, &FROM, data, sizeof(data)), 0);
	t.owner = 0;
	assert_int_equal(wk_ho_send(f->w[0], &t, 54001, &FROM, data, sizeof(data)), -ENOTCONN);
	t.owner = SLOTS;
	assert_int_equal(wk_ho_send(f->w[0], &t, 54001, &FROM, data, sizeof(data)), -ENOTCONN);
	t.owner = 1;
	f->h[0].handover_tx = NULL;
	assert_int_equal(wk_ho_send(f->w[0], &t, 54001, &FROM, data, sizeof(data)), -ENOTCONN);
	f->h[0].handover_tx = f->tx;
	/* The one message sent names no live record: counted stale by slot 1, not slot 0. */
	drain(f, 1);
	assert_int_equal(ctr(f, 1, SHM_CTR_SHORT_CIRCUIT_STALE), 1);
	assert_int_equal(ctr(f, 0, SHM_CTR_SHORT_CIRCUIT_STALE), 0);
	assert_int_equal(ctr(f, 1, SHM_CTR_ERR_INTERNAL), 0);
}

/* What the channel can carry but wk_ho_send never writes is refused before any record is
 * read: too short for a header, another magic, a payload past WK_DGRAM_MAX - 4. Well-formed
 * messages whose record is past the table, free, or of another generation are stale. */
static void test_receive_checks(void **state)
{
	struct fix *f = *state;
	struct shm_relay_target t = { .idx = 5, .gen = 1, .owner = 1 };
	size_t big = WK_DGRAM_MAX - 4 + 1;
	uint8_t *buf = calloc(1, 64 + big);

	assert_non_null(buf);
	assert_int_equal(send(f->tx[1], buf, 3, 0), 3);
	memset(buf, 0x5a, 64);
	assert_int_equal(send(f->tx[1], buf, 64, 0), 64);
	/* The largest payload the sender hands over fits the receiver's buffers. */
	assert_int_equal(wk_ho_send(f->w[0], &t, 54001, &FROM, buf, WK_DGRAM_MAX - 4), 0);
	drain(f, 1);
	assert_int_equal(ctr(f, 1, SHM_CTR_SHORT_CIRCUIT_STALE), 1);
	assert_int_equal(ctr(f, 1, SHM_CTR_ERR_INTERNAL), 2);
	{
		uint8_t hdr[64];
		ssize_t n;
		int sp[2];

		/* Capture a header as wk_ho_send writes it, then send it before a payload
		 * one byte longer than any it sends. */
		assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM, 0, sp), 0);
		f->h[0].handover_tx = (const int[]){ sp[1], sp[1] };
		assert_int_equal(wk_ho_send(f->w[0], &t, 54001, &FROM, buf, 1), 0);
		f->h[0].handover_tx = f->tx;
		n = recv(sp[0], hdr, sizeof(hdr), 0);
		close(sp[0]);
		close(sp[1]);
		assert_true(n > 1 && (size_t)n <= sizeof(hdr));
		memcpy(buf, hdr, (size_t)n - 1);
		assert_int_equal(send(f->tx[1], buf, (size_t)n - 1 + big, 0),
				 (ssize_t)((size_t)n - 1 + big));
	}
	drain(f, 1);
	assert_int_equal(ctr(f, 1, SHM_CTR_ERR_INTERNAL), 3);
	/* Past the table, and a free record: stale, whatever the payload. */
	t.idx = 4096;
	assert_int_equal(wk_ho_send(f->w[0], &t, 54001, &FROM, buf, 10), 0);
	t.idx = 31;
	assert_int_equal(wk_ho_send(f->w[0], &t, 54001, &FROM, buf, 10), 0);
	drain(f, 1);
	assert_int_equal(ctr(f, 1, SHM_CTR_SHORT_CIRCUIT_STALE), 3);
	assert_int_equal(ctr(f, 1, SHM_CTR_ERR_INTERNAL), 3);
	free(buf);
}

/* A full channel answers -EAGAIN at once (the sender counts a send error and goes on);
 * every message it took is read and answered once. */
static void test_full_channel(void **state)
{
	struct fix *f = *state;
	struct shm_relay_target t = { .idx = 7, .gen = 1, .owner = 0 };
	uint8_t data[1000] = { 0 };
	unsigned sent = 0;
	int rc;

	while ((rc = wk_ho_send(f->w[1], &t, 54001, &FROM, data, sizeof(data))) == 0)
		assert_true(++sent < 1000000);
	assert_int_equal(rc, -EAGAIN);
	assert_true(sent > 10);	/* more than net.unix.max_dgram_qlen's default */
	drain(f, 0);
	assert_int_equal(ctr(f, 0, SHM_CTR_SHORT_CIRCUIT_STALE), sent);
	assert_int_equal(wk_ho_send(f->w[1], &t, 54001, &FROM, data, sizeof(data)), 0);
	drain(f, 0);
	assert_int_equal(ctr(f, 0, SHM_CTR_SHORT_CIRCUIT_STALE), sent + 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_send_targets, fix_setup, fix_teardown),
		cmocka_unit_test_setup_teardown(test_receive_checks, fix_setup, fix_teardown),
		cmocka_unit_test_setup_teardown(test_full_channel, fix_setup, fix_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
