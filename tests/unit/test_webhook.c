/* Unit tests of master/webhook.c without a server: the backlog is bounded (the oldest
 * waiting record goes, the push says so, the segment counts it for the metrics), removing the
 * webhook drops it, a change of URL keeps it, and an https:// webhook whose CA file has no
 * certificate is refused at configure time with its records kept. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <ev.h>
#include <jansson.h>

#include "master/master.h"
#include "master/webhook.h"
#include "shm/shm.h"
#include "shm/shm_records.h"

struct fixture {
	struct master m;
	struct webhook *h;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	struct shm_config cfg = { 2, 2, 256, 64 };

	f->m.loop = ev_loop_new(EVFLAG_AUTO);
	assert_non_null(f->m.loop);
	assert_int_equal(shm_create(&cfg, "test-webhook", &f->m.shm), 0);
	f->h = webhook_new(&f->m);
	assert_non_null(f->h);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	webhook_free(f->h);
	ev_loop_destroy(f->m.loop);
	shm_destroy(f->m.shm);
	free(f);
	return 0;
}

static bool push_n(struct webhook *h, unsigned from, unsigned n)
{
	bool dropped = false;

	for (unsigned i = from; i < from + n; i++) {
		json_t *o = json_pack("{s:i}", "n", (int)i);

		assert_non_null(o);
		dropped |= webhook_push(h, o);
		json_decref(o);
	}
	return dropped;
}

static void test_backlog_bounded(void **state)
{
	struct fixture *f = *state;
	uint64_t dropped, backlog;

	/* no URL yet: nothing is sent, everything waits */
	assert_false(push_n(f->h, 0, WEBHOOK_BACKLOG));
	assert_int_equal(webhook_backlog(f->h), WEBHOOK_BACKLOG);
	assert_true(push_n(f->h, WEBHOOK_BACKLOG, 5));
	assert_int_equal(webhook_backlog(f->h), WEBHOOK_BACKLOG);
	/* the metrics' figures: 5 dropped, the backlog full */
	shm_records_hook_counts(f->m.shm, &dropped, &backlog);
	assert_int_equal(dropped, 5);
	assert_int_equal(backlog, WEBHOOK_BACKLOG);
	/* a URL (unreachable: nothing listens on port 9 of 127.0.0.1) keeps the backlog */
	assert_int_equal(webhook_configure(f->h, "http://127.0.0.1:9/x", NULL, NULL), 0);
	assert_int_equal(webhook_backlog(f->h), WEBHOOK_BACKLOG);
	assert_int_equal(webhook_configure(f->h, "http://127.0.0.1:10/y", NULL, NULL), 0);
	assert_int_equal(webhook_backlog(f->h), WEBHOOK_BACKLOG);
	/* no webhook: nothing to deliver */
	assert_int_equal(webhook_configure(f->h, NULL, NULL, NULL), 0);
	assert_int_equal(webhook_backlog(f->h), 0);
	shm_records_hook_counts(f->m.shm, &dropped, &backlog);
	assert_int_equal(dropped, 5);
	assert_int_equal(backlog, 0);
}

static void test_bad_ca_file(void **state)
{
	struct fixture *f = *state;
	char path[] = "/tmp/tg-webhook-ca-XXXXXX";
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, "not a certificate\n", 18), 18);
	close(fd);
	assert_false(push_n(f->h, 0, 3));
	assert_true(webhook_configure(f->h, "https://127.0.0.1:9/x", path, NULL) < 0);
	assert_int_equal(webhook_backlog(f->h), 3);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_backlog_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_ca_file, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
