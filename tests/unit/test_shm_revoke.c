/* Unit tests for the revocation list of the shared segment (shm/shm_revoke.h): add, renew,
 * remove, bad arguments, a full list, expiry and pruning, what a username and a REST user
 * id match, read-only attach, the take-over's copy and its refusal of a corrupt entry, and
 * a reader racing a writer in another process. */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/shm.h"
#include "shm/shm_internal.h"
#include "shm/shm_revoke.h"
#include "shm/shm_state.h"

#define T0 INT64_C(1700000000)

static struct shm *mk(void)
{
	struct shm_config cfg = { 2, 2, 256, 16 };
	struct shm *shm = NULL;

	assert_int_equal(shm_create(&cfg, "test-revoke", &shm), 0);
	return shm;
}

static bool match(const struct shm *s, const char *user, int64_t now)
{
	return shm_revoke_match(s, user, strlen(user), now);
}

/* shm_revoke_names: one entry's test, without the list (what revoke counts with). */
static bool names(enum shm_revoke_kind k, const char *name, const char *user)
{
	return shm_revoke_names(k, name, strlen(name), user, strlen(user));
}

static int add(struct shm *s, enum shm_revoke_kind k, const char *name, int64_t until)
{
	return shm_revoke_add(s, k, name, strlen(name), T0, until);
}

static void test_add_match_del(void **state)
{
	struct shm *s = mk();
	struct shm_revoke_ent e[4];
	uint64_t seq = shm_revoke_seq(s);

	(void)state;
	assert_false(match(s, "alice", T0));
	assert_int_equal(add(s, SHM_REVOKE_USER_ID, "alice", 0), 0);
	assert_int_equal(add(s, SHM_REVOKE_USER, "1700003600:bob", 0), 0);
	assert_true(shm_revoke_seq(s) != seq && (shm_revoke_seq(s) & 1u) == 0);
	/* a user id: every expiry of it, and a username without the REST form */
	assert_true(match(s, "1700003600:alice", T0));
	assert_true(match(s, "1800000000:alice", T0));
	assert_true(match(s, "alice", T0));
	assert_false(match(s, "1700003600:alice2", T0));
	assert_false(match(s, "1700003600:malice", T0));
	assert_false(match(s, "x:alice", T0));
	/* a username: exactly */
	assert_true(match(s, "1700003600:bob", T0));
	assert_false(match(s, "1700003601:bob", T0));
	assert_false(match(s, "bob", T0));
	/* the same tests, entry by entry */
	assert_true(names(SHM_REVOKE_USER_ID, "alice", "1800000000:alice"));
	assert_true(names(SHM_REVOKE_USER_ID, "alice", "alice"));
	assert_false(names(SHM_REVOKE_USER_ID, "alice", "x:alice"));
	assert_false(names(SHM_REVOKE_USER_ID, "1700003600:alice", "1700003600:alice"));
	assert_true(names(SHM_REVOKE_USER, "1700003600:bob", "1700003600:bob"));
	assert_false(names(SHM_REVOKE_USER, "bob", "1700003600:bob"));
	assert_false(names(SHM_REVOKE_NONE, "bob", "bob"));
	assert_false(names(SHM_REVOKE_USER, "", ""));
	/* renewal keeps one entry with the new expiry */
	assert_int_equal(add(s, SHM_REVOKE_USER_ID, "alice", T0 + 60), 1);
	assert_int_equal(shm_revoke_list(s, T0, e, 4), 2);
	assert_int_equal(shm_revoke_count(s, T0), 2);
	assert_int_equal(shm_revoke_del(s, SHM_REVOKE_USER_ID, "alice", 5), 0);
	assert_int_equal(shm_revoke_del(s, SHM_REVOKE_USER_ID, "alice", 5), -ENOENT);
	assert_int_equal(shm_revoke_del(s, SHM_REVOKE_USER, "alice", 5), -ENOENT);
	assert_false(match(s, "1700003600:alice", T0));
	assert_int_equal(shm_revoke_list(s, T0, e, 4), 1);
	assert_int_equal(e[0].kind, SHM_REVOKE_USER);
	assert_memory_equal(e[0].name, "1700003600:bob", 14);
	shm_destroy(s);
}

static void test_bad_args(void **state)
{
	struct shm *s = mk();
	char big[SHM_REVOKE_NAME_MAX + 1];

	(void)state;
	memset(big, 'x', sizeof(big));
	assert_int_equal(shm_revoke_add(s, SHM_REVOKE_USER, big, sizeof(big), T0, 0), -EINVAL);
	assert_int_equal(shm_revoke_add(s, SHM_REVOKE_USER, big, sizeof(big) - 1, T0, 0), 0);
	assert_int_equal(shm_revoke_add(s, SHM_REVOKE_USER, "a", 0, T0, 0), -EINVAL);
	assert_int_equal(shm_revoke_add(s, SHM_REVOKE_NONE, "a", 1, T0, 0), -EINVAL);
	assert_int_equal(shm_revoke_add(s, 7, "a", 1, T0, 0), -EINVAL);
	assert_int_equal(shm_revoke_add(s, SHM_REVOKE_USER, "a", 1, T0, T0), -EINVAL);
	assert_int_equal(shm_revoke_add(s, SHM_REVOKE_USER, "a", 1, T0, -5), -EINVAL);
	assert_int_equal(shm_revoke_del(s, 7, "a", 1), -EINVAL);
	shm_destroy(s);
}

static void test_full_and_expiry(void **state)
{
	struct shm *s = mk();
	char name[32];

	(void)state;
	for (unsigned i = 0; i < SHM_REVOKE_MAX; i++) {
		snprintf(name, sizeof(name), "u%u", i);
		/* the odd ones expire at T0 + 10 */
		assert_int_equal(add(s, SHM_REVOKE_USER, name, (i & 1) ? T0 + 10 : 0), 0);
	}
	assert_int_equal(add(s, SHM_REVOKE_USER, "one-more", 0), -ENOSPC);
	assert_int_equal(add(s, SHM_REVOKE_USER, "u7", T0 + 10), 1);   /* a renewal fits */
	assert_true(match(s, "u7", T0 + 9));
	assert_false(match(s, "u7", T0 + 10));
	assert_true(match(s, "u8", T0 + 1000));
	assert_int_equal(shm_revoke_count(s, T0 + 10), SHM_REVOKE_MAX / 2);
	/* a later add prunes what expired before it */
	assert_int_equal(shm_revoke_add(s, SHM_REVOKE_USER, "one-more", 8, T0 + 10, 0), 0);
	assert_int_equal(shm_revoke_count(s, T0 + 10), SHM_REVOKE_MAX / 2 + 1);
	assert_int_equal(shm_revoke_prune(s, T0 + 20), 0);
	assert_true(match(s, "one-more", T0 + 20));
	shm_destroy(s);
}

static void test_read_only(void **state)
{
	struct shm *s = mk(), *ro = NULL;

	(void)state;
	assert_int_equal(add(s, SHM_REVOKE_USER_ID, "carol", 0), 0);
	assert_int_equal(shm_attach_ro(shm_fd(s), &ro), 0);
	assert_true(match(ro, "1700000000:carol", T0));
	assert_int_equal(add(ro, SHM_REVOKE_USER_ID, "dave", 0), -EROFS);
	assert_int_equal(shm_revoke_del(ro, SHM_REVOKE_USER_ID, "carol", 5), -EROFS);
	shm_destroy(ro);
	/* a damaged header is refused at attach */
	shm_revoke_hdr(s)->cap = 3;
	assert_int_equal(shm_attach_ro(shm_fd(s), &ro), -EBADMSG);
	shm_destroy(s);
}

static struct shm_image img_of(const struct shm *s)
{
	return (struct shm_image){ .fd = -1, .buf = s->base, .size = s->size };
}

static void test_take_over(void **state)
{
	struct shm *src = mk(), *dst = mk(), *bad = mk();
	struct shm_image img = img_of(src);
	struct shm_takeover t;

	(void)state;
	assert_int_equal(add(src, SHM_REVOKE_USER_ID, "erin", 0), 0);
	assert_int_equal(add(src, SHM_REVOKE_USER, "frank", T0 + 5), 0);
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, &img, 1, &t), 0);
	assert_int_equal(t.revoked, 2);
	assert_false(t.revoke_lost);
	assert_true(match(dst, "1700000000:erin", T0));
	assert_true(match(dst, "frank", T0));
	assert_false(match(dst, "frank", T0 + 5));
	/* the workers' last sweep (0) differs: they sweep their adopted allocations */
	assert_true(shm_revoke_seq(dst) != 0 && (shm_revoke_seq(dst) & 1u) == 0);
	/* an entry this build would not write refuses the whole file, touching nothing */
	shm_revoke_hdr(src)->ent[1].kind = 9;
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(bad, &img, 1, &t), -EBADMSG);
	assert_int_equal(t.verdict, SHM_STATE_CORRUPT);
	assert_int_equal(shm_revoke_count(bad, T0), 0);
	shm_revoke_hdr(src)->ent[1].kind = SHM_REVOKE_USER;
	shm_revoke_hdr(src)->count = SHM_REVOKE_MAX + 1;
	assert_int_equal(shm_image_take(bad, &img, 1, &t), -EBADMSG);
	shm_destroy(src);
	shm_destroy(dst);
	shm_destroy(bad);
}

/* A child adds and removes one entry as fast as it can while the parent checks that the
 * entry that is always there always matches and one never added never does. */
static void test_racing_writer(void **state)
{
	struct shm *s = mk();
	pid_t pid;
	int status;

	(void)state;
	assert_int_equal(add(s, SHM_REVOKE_USER_ID, "steady", 0), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (unsigned i = 0; i < 200000; i++) {
			if (add(s, SHM_REVOKE_USER, "churn", 0) < 0 ||
			    shm_revoke_del(s, SHM_REVOKE_USER, "churn", 5) < 0)
				_exit(1);
		}
		_exit(0);
	}
	for (unsigned i = 0; i < 200000; i++) {
		assert_true(match(s, "1700000000:steady", T0));
		assert_false(match(s, "never", T0));
		if (waitpid(pid, &status, WNOHANG) == pid)
			goto done;
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
done:
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	shm_destroy(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_add_match_del),  cmocka_unit_test(test_bad_args),
		cmocka_unit_test(test_full_and_expiry), cmocka_unit_test(test_read_only),
		cmocka_unit_test(test_take_over),      cmocka_unit_test(test_racing_writer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
