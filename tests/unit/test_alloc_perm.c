/* Unit tests of a worker's permission table (worker/table.c, wk_alloc_perm_add): the
 * limits.max_permissions bound holds whichever entry a new peer's permission reuses,
 * including an expired one the timer has not swept yet. */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmocka.h>

#include "common/mono.h"
#include "shm/shm_alloc.h"
#include "worker/table.h"
#include "worker/wk.h"

struct fix {
	struct worker w;
	struct wk_alloc a;
	struct shm_alloc rec;
};

static void never_fires(struct wheel_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	fail();
}

static struct fix *fix_new(uint32_t max_perms)
{
	struct fix *f = test_calloc(1, sizeof(*f));

	f->w.magic = WK_MAGIC;
	f->w.off.c2p_fd = f->w.off.p2c_fd = -1;
	f->w.hot.max_perms = max_perms;
	f->w.hot.perm_lifetime = 300;
	wheel_init(&f->w.wheel, mono_ms());
	wheel_timer_init(&f->a.timer, never_fires);
	f->a.magic = WK_ALLOC_MAGIC;
	f->a.w = &f->w;
	f->a.rec = &f->rec;
	f->a.expires_ms = mono_ms() + 600000u;
	return f;
}

static void fix_free(struct fix *f)
{
	wheel_disarm(&f->w.wheel, &f->a.timer);
	test_free(f);
}

static struct sockaddr_in peer(const char *ip)
{
	struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons(5000) };

	assert_int_equal(inet_pton(AF_INET, ip, &s.sin_addr), 1);
	return s;
}

/* wk_alloc_perm_add writes the peer's entry (live); the entry that changed is the peer's.
 * Returns its index, for age(). */
static unsigned add(struct fix *f, const char *ip)
{
	struct sockaddr_in p = peer(ip);
	struct shm_perm before[SHM_ALLOC_MAX_PERMS];
	unsigned changed = SHM_ALLOC_MAX_PERMS;

	memcpy(before, f->rec.perms, sizeof(before));
	assert_int_equal(wk_alloc_perm_add(&f->w, &f->a, (struct sockaddr *)&p), 0);
	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS; i++)
		if (memcmp(&before[i], &f->rec.perms[i], sizeof(before[i])) != 0) {
			assert_int_equal(changed, SHM_ALLOC_MAX_PERMS);
			changed = i;
		}
	assert_true(changed < SHM_ALLOC_MAX_PERMS);
	return changed;
}

/* The entry expired long ago and the allocation's timer has not swept it yet. */
static void age(struct fix *f, unsigned i)
{
	f->rec.perms[i].expires_ns = 1;
}

static unsigned live_perms(const struct fix *f)
{
	uint64_t now = mono_ns();
	unsigned n = 0;

	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS; i++)
		n += f->rec.perms[i].family && f->rec.perms[i].expires_ns > now;
	return n;
}

/* Three live permissions, then a reload lowers limits.max_permissions to 2 and A's
 * expires (the timer has not swept it yet): B and C are live, at the limit, so a new
 * peer D is refused. Before the fix D reused A's entry without the check. */
static void test_expired_unswept_counts_limit(void **state)
{
	struct fix *f = fix_new(3);
	struct sockaddr_in d = peer("192.0.2.4");
	unsigned a;

	(void)state;
	a = add(f, "192.0.2.1");
	add(f, "192.0.2.2");
	add(f, "192.0.2.3");
	f->w.hot.max_perms = 2;
	age(f, a);
	assert_int_equal(live_perms(f), 2);
	assert_int_equal(wk_alloc_perm_add(&f->w, &f->a, (struct sockaddr *)&d), -ENOSPC);
	assert_int_equal(live_perms(f), 2);
	fix_free(f);
}

/* The same, for A itself: its expired entry renewed is a new permission. */
static void test_expired_same_peer_counts_limit(void **state)
{
	struct fix *f = fix_new(3);
	struct sockaddr_in pa = peer("192.0.2.1");
	unsigned a;

	(void)state;
	a = add(f, "192.0.2.1");
	add(f, "192.0.2.2");
	add(f, "192.0.2.3");
	f->w.hot.max_perms = 2;
	age(f, a);
	assert_int_equal(wk_alloc_perm_add(&f->w, &f->a, (struct sockaddr *)&pa), -ENOSPC);
	assert_int_equal(live_perms(f), 2);
	f->w.hot.max_perms = 3;
	assert_int_equal(wk_alloc_perm_add(&f->w, &f->a, (struct sockaddr *)&pa), 0);
	assert_int_equal(live_perms(f), 3);
	fix_free(f);
}

/* At the limit a live permission is still refreshed; an expired entry makes room. */
static void test_refresh_and_room(void **state)
{
	struct fix *f = fix_new(2);
	struct sockaddr_in pa = peer("192.0.2.1");
	unsigned b;

	(void)state;
	add(f, "192.0.2.1");
	b = add(f, "192.0.2.2");
	assert_int_equal(wk_alloc_perm_add(&f->w, &f->a, (struct sockaddr *)&pa), 0);
	age(f, b);
	assert_int_equal(add(f, "192.0.2.3"), b);
	assert_int_equal(live_perms(f), 2);
	fix_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_expired_unswept_counts_limit),
		cmocka_unit_test(test_expired_same_peer_counts_limit),
		cmocka_unit_test(test_refresh_and_room),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
