/* Unit tests for the allocation counts of the shared segment (shm/shm_quota.h): take and
 * give, each limit and all-or-nothing refusals, keys sharing a window, a full window,
 * records' keys, read-only attach, and exact counts under two racing processes. */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_internal.h"
#include "shm/shm_quota.h"

static const struct shm_quota_limits none = { 0, 0, 0 };

static struct shm *mk(uint32_t alloc_cap)
{
	struct shm_config cfg = { 2, 2, 256, alloc_cap };
	struct shm *shm = NULL;

	assert_int_equal(shm_create(&cfg, "test-quota", &shm), 0);
	return shm;
}

/* The i-th key with the same window start as k and another tag. */
static uint64_t same_window(uint64_t k, unsigned i)
{
	return k ^ ((uint64_t)(i + 1) << 40);
}

static void test_take_give(void **state)
{
	struct shm *shm = mk(10);
	uint64_t u = shm_quota_key(SHM_QUOTA_USER, "alice", 5);
	uint64_t v = shm_quota_key(SHM_QUOTA_USER, "bob", 3);
	uint64_t l = shm_quota_key(SHM_QUOTA_LISTENER, "alice", 5);

	(void)state;
	assert_int_not_equal(u, l);	/* domains keep names apart */
	assert_int_equal(shm_quota_entries(10), SHM_QUOTA_MIN_ENTRIES);
	assert_int_equal(shm_quota_entries(1000000), 1u << 22);
	/* docs/architecture.md: 65 536 entries at the default 10 000 records */
	assert_int_equal(shm_quota_entries(10000), 65536);
	for (int i = 0; i < 3; i++)
		assert_int_equal(shm_quota_take(shm, u, l, &none), 0);
	assert_int_equal(shm_quota_take(shm, v, 0, &none), 0);
	assert_int_equal(shm_quota_count(shm, u), 3);
	assert_int_equal(shm_quota_count(shm, v), 1);
	assert_int_equal(shm_quota_count(shm, l), 3);
	assert_int_equal(shm_quota_total(shm), 4);
	assert_int_equal(shm_quota_give(shm, u, l), 0);
	assert_int_equal(shm_quota_give(shm, v, 0), 0);
	assert_int_equal(shm_quota_count(shm, u), 2);
	assert_int_equal(shm_quota_count(shm, v), 0);
	assert_int_equal(shm_quota_count(shm, l), 2);
	assert_int_equal(shm_quota_total(shm), 2);
	/* never counted: nothing changes */
	assert_int_equal(shm_quota_give(shm, v, l), -ENOENT);
	assert_int_equal(shm_quota_total(shm), 2);
	assert_int_equal(shm_quota_count(shm, l), 2);
	assert_int_equal(shm_quota_take(shm, 0, l, &none), -EINVAL);
	shm_destroy(shm);
}

static void test_limits(void **state)
{
	struct shm *shm = mk(10);
	uint64_t u = shm_quota_key(SHM_QUOTA_USER, "u", 1);
	uint64_t w = shm_quota_key(SHM_QUOTA_USER, "w", 1);
	uint64_t l = shm_quota_key(SHM_QUOTA_LISTENER, "l", 1);
	uint64_t m = shm_quota_key(SHM_QUOTA_LISTENER, "m", 1);
	struct shm_quota_limits lim = { .user = 2, .listener = 3, .total = 4 };

	(void)state;
	assert_int_equal(shm_quota_take(shm, u, l, &lim), 0);
	assert_int_equal(shm_quota_take(shm, u, l, &lim), 0);
	assert_int_equal(shm_quota_take(shm, u, l, &lim), -EDQUOT);
	assert_int_equal(shm_quota_take(shm, w, l, &lim), 0);
	assert_int_equal(shm_quota_take(shm, w, l, &lim), -EUSERS);
	/* the refusal gave back what it had taken */
	assert_int_equal(shm_quota_count(shm, w), 1);
	assert_int_equal(shm_quota_total(shm), 3);
	assert_int_equal(shm_quota_take(shm, w, m, &lim), 0);
	assert_int_equal(shm_quota_take(shm, shm_quota_key(SHM_QUOTA_USER, "x", 1), m, &lim),
			 -EBUSY);
	assert_int_equal(shm_quota_count(shm, shm_quota_key(SHM_QUOTA_USER, "x", 1)), 0);
	assert_int_equal(shm_quota_count(shm, m), 1);
	/* a lower limit refuses new ones and ends nothing */
	lim.user = 1;
	assert_int_equal(shm_quota_take(shm, u, 0, &none), 0);
	assert_int_equal(shm_quota_count(shm, u), 3);
	lim.total = 0;
	assert_int_equal(shm_quota_take(shm, u, 0, &lim), -EDQUOT);
	shm_destroy(shm);
}

static void test_shared_window(void **state)
{
	struct shm *shm = mk(10);
	uint64_t k = shm_quota_key(SHM_QUOTA_USER, "k", 1);
	uint64_t a = same_window(k, 0), b = same_window(k, 1), c = same_window(k, 2);

	(void)state;
	assert_int_equal(shm_quota_take(shm, k, 0, &none), 0);
	assert_int_equal(shm_quota_take(shm, a, 0, &none), 0);
	assert_int_equal(shm_quota_take(shm, a, 0, &none), 0);
	assert_int_equal(shm_quota_count(shm, k), 1);
	assert_int_equal(shm_quota_count(shm, a), 2);
	/* k's entry drains and c takes it; a keeps its own further on */
	assert_int_equal(shm_quota_give(shm, k, 0), 0);
	assert_int_equal(shm_quota_take(shm, c, 0, &none), 0);
	assert_int_equal(shm_quota_count(shm, c), 1);
	assert_int_equal(shm_quota_count(shm, k), 0);
	assert_int_equal(shm_quota_count(shm, a), 2);
	assert_int_equal(shm_quota_count(shm, b), 0);
	/* k comes back after a: it finds no tag of its own and takes the next free entry */
	assert_int_equal(shm_quota_take(shm, k, 0, &none), 0);
	assert_int_equal(shm_quota_count(shm, k), 1);
	assert_int_equal(shm_quota_give(shm, a, 0), 0);
	assert_int_equal(shm_quota_give(shm, a, 0), 0);
	assert_int_equal(shm_quota_give(shm, a, 0), -ENOENT);
	assert_int_equal(shm_quota_total(shm), 2);
	shm_destroy(shm);
}

static void test_full_window(void **state)
{
	struct shm *shm = mk(10);
	uint64_t k = shm_quota_key(SHM_QUOTA_USER, "full", 4);

	(void)state;
	for (unsigned i = 0; i < SHM_QUOTA_WINDOW; i++)
		assert_int_equal(shm_quota_take(shm, same_window(k, i), 0, &none), 0);
	assert_int_equal(shm_quota_take(shm, k, 0, &none), -ENOSPC);
	assert_int_equal(shm_quota_total(shm), SHM_QUOTA_WINDOW);
	/* another window is unaffected */
	assert_int_equal(shm_quota_take(shm, shm_quota_key(SHM_QUOTA_USER, "o", 1), 0, &none), 0);
	/* a drained entry is free again */
	assert_int_equal(shm_quota_give(shm, same_window(k, 7), 0), 0);
	assert_int_equal(shm_quota_take(shm, k, 0, &none), 0);
	assert_int_equal(shm_quota_count(shm, k), 1);
	/* a full listener window fails the take as a whole */
	assert_int_equal(shm_quota_take(shm, shm_quota_key(SHM_QUOTA_USER, "p", 1),
					same_window(k, 99), &none),
			 -ENOSPC);
	assert_int_equal(shm_quota_count(shm, shm_quota_key(SHM_QUOTA_USER, "p", 1)), 0);
	assert_int_equal(shm_quota_total(shm), SHM_QUOTA_WINDOW + 1);
	shm_destroy(shm);
}

static void test_record_keys(void **state)
{
	struct shm *shm = mk(10);
	struct shm_alloc *rec = calloc(1, sizeof(*rec));
	const struct shm_quota_limits one = { .user = 1 };

	(void)state;
	assert_non_null(rec);
	memcpy(rec->username, "1700000000:carol", 16);
	rec->user_len = 16;
	rec->listener_idx = 1;
	assert_int_equal(shm_quota_take_rec(shm, rec, &one), 0);
	/* another credential of the same REST user id */
	assert_int_equal(shm_quota_take(shm, shm_quota_user_key("1800000000:carol", 16), 0, &one),
			 -EDQUOT);
	assert_int_equal(shm_quota_take(shm, shm_quota_user_key("1800000000:carl", 15), 0, &one),
			 0);
	assert_int_equal(shm_quota_count(shm, shm_quota_listener_key(1)), 1);
	assert_int_equal(shm_quota_give_rec(shm, rec), 0);
	assert_int_equal(shm_quota_count(shm, shm_quota_listener_key(1)), 0);
	assert_int_equal(shm_quota_give(shm, shm_quota_user_key("1800000000:carl", 15), 0), 0);
	assert_int_equal(shm_quota_total(shm), 0);
	/* no listener key: only the user and the total count */
	rec->listener_idx = 0xffff;
	assert_int_equal(shm_quota_take_rec(shm, rec, &none), 0);
	assert_int_equal(shm_quota_total(shm), 1);
	free(rec);
	shm_destroy(shm);
}

static void test_user_keys(void **state)
{
	(void)state;
	assert_int_equal(shm_quota_user_key("1700000000:dave", 15),
			 shm_quota_key(SHM_QUOTA_USER, "dave", 4));
	assert_int_equal(shm_quota_user_key("1:d:e", 5), shm_quota_key(SHM_QUOTA_USER, "d:e", 3));
	/* static names stay whole: no digits, no id, too many digits */
	assert_int_equal(shm_quota_user_key("dave", 4), shm_quota_key(SHM_QUOTA_USER, "dave", 4));
	assert_int_equal(shm_quota_user_key("1700000000:", 11),
			 shm_quota_key(SHM_QUOTA_USER, "1700000000:", 11));
	assert_int_equal(shm_quota_user_key("1700000000", 10),
			 shm_quota_key(SHM_QUOTA_USER, "1700000000", 10));
	assert_int_equal(shm_quota_user_key(":dave", 5), shm_quota_key(SHM_QUOTA_USER, ":dave", 5));
	assert_int_equal(shm_quota_user_key("12345678901234567890:x", 22),
			 shm_quota_key(SHM_QUOTA_USER, "12345678901234567890:x", 22));
	assert_int_equal(shm_quota_user_key("1234567890123456789:x", 21),
			 shm_quota_key(SHM_QUOTA_USER, "x", 1));
	assert_int_equal(shm_quota_user_key("12a:x", 5), shm_quota_key(SHM_QUOTA_USER, "12a:x", 5));
}

/* The one test of `allocations --user` and `disconnect --user`, in the master and the
 * workers: the whole username, or the user id of a REST username, nothing else. */
static void test_user_match(void **state)
{
#define MATCH(user, want) shm_quota_user_match(user, strlen(user), want, strlen(want))
	(void)state;
	assert_true(MATCH("alice", "alice"));
	assert_true(MATCH("1700000000:alice", "alice"));
	assert_true(MATCH("1700000000:alice", "1700000000:alice"));
	assert_true(MATCH("1:d:e", "d:e"));
	assert_false(MATCH("1:d:e", "e"));
	assert_false(MATCH("1700000000:alice", "alic"));
	assert_false(MATCH("1700000000:alice", "1700000000"));
	assert_false(MATCH("alice", "alice2"));
	assert_false(MATCH("alice", ""));
	/* not a REST username: only the whole name matches */
	assert_false(MATCH("team:alice", "alice"));
	assert_true(MATCH("team:alice", "team:alice"));
	assert_false(MATCH("12a:alice", "alice"));
	assert_false(MATCH("12345678901234567890:alice", "alice"));
	assert_false(MATCH("1700000000:", ""));
#undef MATCH
}

static void test_read_only(void **state)
{
	struct shm *shm = mk(10), *ro = NULL;
	uint64_t u = shm_quota_key(SHM_QUOTA_USER, "r", 1);

	(void)state;
	assert_int_equal(shm_quota_take(shm, u, 0, &none), 0);
	assert_int_equal(shm_attach_ro(shm_fd(shm), &ro), 0);
	assert_int_equal(shm_quota_count(ro, u), 1);
	assert_int_equal(shm_quota_total(ro), 1);
	assert_int_equal(shm_quota_take(ro, u, 0, &none), -EROFS);
	assert_int_equal(shm_quota_give(ro, u, 0), -EROFS);
	shm_destroy(ro);
	shm_destroy(shm);
}

#define RACE_N 20000
#define RACE_LIMIT 5000

/* Child p: RACE_N takes of the shared user, each kept; then as many takes of a limited
 * user, counting successes in its exit status's way (written to the pipe). */
static void race_child(struct shm *shm, int fd)
{
	uint64_t u = shm_quota_key(SHM_QUOTA_USER, "shared", 6);
	uint64_t v = shm_quota_key(SHM_QUOTA_USER, "limited", 7);
	uint64_t l = shm_quota_key(SHM_QUOTA_LISTENER, "lst", 3);
	const struct shm_quota_limits lim = { .user = RACE_LIMIT };
	uint32_t ok = 0;

	for (int i = 0; i < RACE_N; i++) {
		if (shm_quota_take(shm, u, l, &none) < 0)
			_exit(2);
		if (i % 3 == 0 && shm_quota_give(shm, u, l) < 0)
			_exit(3);
		if (shm_quota_take(shm, v, 0, &lim) == 0)
			ok++;
	}
	if (write(fd, &ok, sizeof(ok)) != sizeof(ok))
		_exit(4);
	_exit(0);
}

static void test_race_exact(void **state)
{
	struct shm *shm = mk(100);
	uint64_t u = shm_quota_key(SHM_QUOTA_USER, "shared", 6);
	uint64_t v = shm_quota_key(SHM_QUOTA_USER, "limited", 7);
	uint64_t l = shm_quota_key(SHM_QUOTA_LISTENER, "lst", 3);
	uint32_t ok_sum = 0;
	pid_t pid[2];
	int fds[2];

	(void)state;
	assert_int_equal(pipe(fds), 0);
	for (int p = 0; p < 2; p++) {
		pid[p] = fork();
		assert_true(pid[p] >= 0);
		if (pid[p] == 0)
			race_child(shm, fds[1]);
	}
	for (int p = 0; p < 2; p++) {
		int st = 0;
		uint32_t ok = 0;

		assert_int_equal(waitpid(pid[p], &st, 0), pid[p]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		assert_int_equal(read(fds[0], &ok, sizeof(ok)), sizeof(ok));
		ok_sum += ok;
	}
	close(fds[0]);
	close(fds[1]);
	/* each child kept RACE_N minus every third */
	const uint64_t kept = 2u * (RACE_N - (RACE_N + 2) / 3);

	assert_int_equal(shm_quota_count(shm, u), kept);
	assert_int_equal(shm_quota_count(shm, l), kept);
	assert_int_equal(ok_sum, RACE_LIMIT);
	assert_int_equal(shm_quota_count(shm, v), RACE_LIMIT);
	assert_int_equal(shm_quota_total(shm), kept + RACE_LIMIT);
	shm_destroy(shm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_take_give),     cmocka_unit_test(test_limits),
		cmocka_unit_test(test_shared_window), cmocka_unit_test(test_full_window),
		cmocka_unit_test(test_record_keys),   cmocka_unit_test(test_user_keys),
		cmocka_unit_test(test_read_only),     cmocka_unit_test(test_user_match),     cmocka_unit_test(test_race_exact),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
