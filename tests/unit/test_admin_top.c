/* Unit tests for the master's ranking behind `turngatectl top` (master/admin_top.c) on a
 * real segment without workers: what a sample counts per allocation and per user (a
 * user's throttling included), across the users table's growth, its emptying between
 * samples, a failed growth, a record ended and claimed again, and what the table walk
 * and its prefetch hint read at the table's end. calloc is wrapped (-Wl,--wrap=calloc)
 * so that a test can make the users table's growth fail. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "master/admin.h"
#include "master/master.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_bw.h"
#include "shm/shm_internal.h"
#include "shm/shm_quota.h"
#include "shm/shm_relay.h"

void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);

/* A calloc of n elements with calloc_fail_min <= n < calloc_fail_below fails (none by
 * default), counted in calloc_failed. */
static size_t calloc_fail_min, calloc_fail_below;
static unsigned calloc_failed;

void *__wrap_calloc(size_t n, size_t size)
{
	if (n >= calloc_fail_min && n < calloc_fail_below) {
		calloc_failed++;
		return NULL;
	}
	return __real_calloc(n, size);
}

#define CAP 1024u
#define N_RECS 300u
#define N_USERS 200u   /* past the users table's first sizes: it grows while a sample runs */

struct top_fix {
	struct master m;
	uint32_t idx[N_RECS];
	unsigned slot[N_RECS];
};

static struct shm_alloc *rec_of(struct top_fix *f, unsigned k)
{
	struct shm_alloc *r;

	assert_int_equal(shm_alloc_get(f->m.shm, f->slot[k], f->idx[k], &r), 0);
	return r;
}

static void claim(struct top_fix *f, unsigned k, unsigned user)
{
	struct shm_alloc *r;
	int len;

	f->slot[k] = k % 2;
	assert_int_equal(shm_alloc_claim(f->m.shm, f->slot[k], &f->idx[k], &r), 0);
	shm_alloc_begin_write(r);
	len = snprintf(r->username, sizeof(r->username), "user-%u", user);
	r->user_len = (uint16_t)len;
	shm_alloc_end_write(r);
	assert_int_equal(shm_alloc_publish(f->m.shm, f->slot[k], f->idx[k]), 0);
	/* counted as a worker counts it (the table's live total) */
	assert_int_equal(shm_quota_take_rec(f->m.shm, r, &(struct shm_quota_limits){ 0 }), 0);
}

static void release(struct top_fix *f, unsigned k)
{
	assert_int_equal(shm_quota_give_rec(f->m.shm, rec_of(f, k)), 0);
	assert_int_equal(shm_alloc_release(f->m.shm, f->slot[k], f->idx[k]), 0);
}

static int setup(void **state)
{
	struct top_fix *f = calloc(1, sizeof(*f));
	struct shm_config sc = { .n_slots = 2, .snap_count = 2, .snap_size = 4096, .alloc_cap = CAP };

	assert_non_null(f);
	f->m.magic = MASTER_MAGIC;
	assert_int_equal(shm_create(&sc, "test-admin-top", &f->m.shm), 0);
	for (unsigned k = 0; k < N_RECS; k++)
		claim(f, k, k % N_USERS);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct top_fix *f = *state;

	admin_top_free(f->m.top);
	shm_destroy(f->m.shm);
	free(f);
	return 0;
}

static uint64_t total_bytes(const struct admin_top_pick *p)
{
	return p->bytes[0] + p->bytes[1];
}

/* Records 0..n-1: record k relays (k + 1) kB and k packets to the peer, `times` over;
 * user u's records are u and u + 200. */
static void relay_some(struct top_fix *f, unsigned n, unsigned times)
{
	for (unsigned k = 0; k < n; k++) {
		struct shm_alloc *r = rec_of(f, k);

		shm_alloc_ctr_add(r, SHM_ACTR_BYTES_TO_PEER, (uint64_t)(k + 1) * 1000 * times);
		shm_alloc_ctr_add(r, SHM_ACTR_PKTS_TO_PEER, (uint64_t)k * times);
	}
}

/* Record k's bandwidth words as a worker's shm_bw_admit leaves them after it dropped
 * `n` datagrams in direction d for reason v. */
static void drop_some(struct top_fix *f, unsigned k, unsigned d, uint64_t n,
		      enum shm_bw_verdict v)
{
	struct shm_bw_rec *b = &shm_bw_recs(f->m.shm)[f->idx[k]];

	b->drops[d] += n;
	b->last[d] = v;
}

static void test_rank_allocations_and_users(void **state)
{
	struct top_fix *f = *state;
	struct admin_top_result r;

	/* The first sample has no baseline: it counts from each allocation's start. */
	relay_some(f, N_RECS, 1);
	assert_int_equal(admin_top_rank(&f->m, 5, &r), 0);
	assert_int_equal(r.live, N_RECS);
	assert_int_equal(r.n_users_seen, N_USERS);
	assert_true(r.interval == 0.0);
	assert_int_equal(r.n_allocs, 5);
	for (size_t i = 0; i < r.n_allocs; i++)
		assert_int_equal(total_bytes(&r.allocs[i]), (uint64_t)(N_RECS - i) * 1000);
	admin_top_result_free(&r);

	relay_some(f, N_RECS, 2);
	/* what another worker delivered by the short circuit counts from the peer */
	shm_relay_ctr_add(f->m.shm, f->idx[7], 3, 5000000);
	/* user 7's second record was throttled: the user is (the first one was not) */
	drop_some(f, 207, SHM_BW_TO_CLIENT, 4, SHM_BW_USER);
	assert_int_equal(admin_top_rank(&f->m, 5, &r), 0);
	assert_int_equal(r.live, N_RECS);
	assert_int_equal(r.n_users_seen, N_USERS);
	assert_int_equal(r.n_allocs, 5);
	assert_int_equal(r.allocs[0].idx, f->idx[7]);
	assert_int_equal(r.allocs[0].bytes[0], 8 * 2000);
	assert_int_equal(r.allocs[0].bytes[1], 5000000);
	assert_int_equal(r.allocs[0].pkts[1], 3);
	assert_int_equal(r.allocs[0].limited[0], 0);
	assert_int_equal(r.allocs[0].limited[1], 0);
	for (size_t i = 1; i < r.n_allocs; i++) {
		unsigned k = N_RECS - (unsigned)i;

		assert_int_equal(r.allocs[i].idx, f->idx[k]);
		assert_int_equal(r.allocs[i].gen, rec_of(f, k)->gen);
		assert_int_equal(r.allocs[i].bytes[0], (uint64_t)(k + 1) * 2000);
		assert_int_equal(r.allocs[i].pkts[0], (uint64_t)k * 2);
		assert_int_equal(r.allocs[i].n, 1);
	}
	/* user 7 (records 7 and 207) first, then users 99, 98, ... with two records each */
	assert_int_equal(r.n_users, 5);
	assert_int_equal(total_bytes(&r.users[0]), 8 * 2000 + 208 * 2000 + 5000000);
	assert_int_equal(r.users[0].n, 2);
	assert_int_equal(r.users[0].limited[0], 0);
	assert_int_equal(r.users[0].limited[1], SHM_BW_USER);
	for (size_t i = 1; i < r.n_users; i++) {
		unsigned u = 100 - (unsigned)i;

		assert_int_equal(total_bytes(&r.users[i]), (uint64_t)(u + 1 + u + 201) * 2000);
		assert_int_equal(r.users[i].pkts[0], (uint64_t)(u + u + 200) * 2);
		assert_int_equal(r.users[i].n, 2);
		assert_int_equal(r.users[i].limited[1], 0);
	}
	admin_top_result_free(&r);
	/* no drop since: nobody is throttled in the next interval */
	relay_some(f, N_RECS, 1);
	shm_relay_ctr_add(f->m.shm, f->idx[7], 3, 5000000);
	assert_int_equal(admin_top_rank(&f->m, 1, &r), 0);
	assert_int_equal(r.users[0].n, 2);
	assert_int_equal(r.users[0].limited[1], 0);
	admin_top_result_free(&r);
}

/* A sample with few users after one with many: the users table holds only this sample's
 * (a user left over from the previous sample would count twice or show up). */
static void test_rank_users_emptied_between_samples(void **state)
{
	struct top_fix *f = *state;
	struct admin_top_result r;

	assert_int_equal(admin_top_rank(&f->m, 3, &r), 0);
	assert_int_equal(r.n_users_seen, N_USERS);
	admin_top_result_free(&r);
	for (unsigned k = 3; k < N_RECS; k++)
		release(f, k);
	relay_some(f, 3, 1);
	assert_int_equal(admin_top_rank(&f->m, 10, &r), 0);
	assert_int_equal(r.live, 3);
	assert_int_equal(r.n_users_seen, 3);
	assert_int_equal(r.n_allocs, 3);
	assert_int_equal(r.n_users, 3);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(r.users[i].n, 1);
		assert_int_equal(total_bytes(&r.users[i]), (uint64_t)(3 - i) * 1000);
	}
	admin_top_result_free(&r);
	/* and back to many: the table grows again within one sample */
	for (unsigned k = 3; k < N_RECS; k++)
		claim(f, k, k % N_USERS);
	assert_int_equal(admin_top_rank(&f->m, 1, &r), 0);
	assert_int_equal(r.live, N_RECS);
	assert_int_equal(r.n_users_seen, N_USERS);
	admin_top_result_free(&r);
}

/* A sample whose users table cannot grow fails, tries to grow it once, not once for each
 * user it could not count, and still replaces every baseline; the next sample grows it. */
static void test_rank_users_grow_fails_once(void **state)
{
	struct top_fix *f = *state;
	struct admin_top_result r;

	/* the table's first grow (64 to 128 slots, at the 33rd user) fails, the baseline's
	 * calloc (CAP records) and the rows' do not */
	calloc_fail_min = 128;
	calloc_fail_below = CAP;
	calloc_failed = 0;
	relay_some(f, N_RECS, 1);
	assert_int_equal(admin_top_rank(&f->m, 5, &r), -ENOMEM);
	calloc_fail_min = calloc_fail_below = 0;
	assert_int_equal(calloc_failed, 1);
	relay_some(f, N_RECS, 2);
	assert_int_equal(admin_top_rank(&f->m, 5, &r), 0);
	assert_int_equal(r.n_users_seen, N_USERS);
	assert_int_equal(total_bytes(&r.allocs[0]), (uint64_t)N_RECS * 2000);
	admin_top_result_free(&r);
}

/* A record ended and claimed again (a new generation) counts from zero, not from the old
 * allocation's baseline. */
static void test_rank_new_generation_counts_from_zero(void **state)
{
	struct top_fix *f = *state;
	struct admin_top_result r;

	relay_some(f, N_RECS, 5);
	assert_int_equal(admin_top_rank(&f->m, 1, &r), 0);
	admin_top_result_free(&r);
	release(f, 0);
	release(f, 299);
	claim(f, 0, 7);
	shm_alloc_ctr_add(rec_of(f, 0), SHM_ACTR_BYTES_TO_PEER, 123);
	assert_int_equal(admin_top_rank(&f->m, 2, &r), 0);
	assert_int_equal(r.live, N_RECS - 1);
	assert_int_equal(r.n_allocs, 2);
	assert_int_equal(r.allocs[0].idx, f->idx[0]);
	assert_int_equal(r.allocs[0].gen, rec_of(f, 0)->gen);
	assert_int_equal(total_bytes(&r.allocs[0]), 123);
	assert_int_equal(total_bytes(&r.allocs[1]), 0);
	assert_int_equal(r.n_users, 2);
	assert_int_equal(total_bytes(&r.users[0]), 123);
	assert_int_equal(r.users[0].n, 3);	/* user 7: records 7, 207 and the new one */
	admin_top_result_free(&r);
}

/* The walk, its hint included, reads nothing past the table's last record. The sanitizer
 * cannot check this (the segment is a shared mapping it does not watch, and what follows
 * the records is readable), so the page right after the last record, the trust region's
 * first, is made unreadable around a ranking and around hints at and past the table's
 * end: a read there faults, which fails the test. */
static void test_walk_reads_nothing_past_the_end(void **state)
{
	struct top_fix *f = *state;
	struct shm *shm = f->m.shm;
	long page = sysconf(_SC_PAGESIZE);
	uint8_t *after = (uint8_t *)shm_alloc_at(shm, CAP - 1) + shm->alloc_stride;
	uint64_t gen = rec_of(f, 0)->gen;
	struct admin_top_result r;
	int rc;

	/* the records end on a page boundary, where the trust region starts */
	assert_true(page > 0);
	assert_int_equal((uint64_t)CAP * shm->alloc_stride % (uint64_t)page, 0);
	assert_int_equal(shm->off_allocs % (uint64_t)page, 0);
	assert_ptr_equal(after, (uint8_t *)shm_trust_hdr(shm));
	assert_int_equal(mprotect(after, (size_t)page, PROT_NONE), 0);
	for (uint32_t idx = CAP - 2 * SHM_ALLOC_AHEAD - 2; idx < CAP + 3; idx++)
		shm_alloc_prefetch_ahead(shm, idx);
	shm_alloc_prefetch_ahead(shm, UINT32_MAX);
	rc = admin_top_rank(&f->m, 1, &r);
	assert_int_equal(mprotect(after, (size_t)page, PROT_READ | PROT_WRITE), 0);
	assert_int_equal(rc, 0);
	assert_int_equal(r.live, N_RECS);
	admin_top_result_free(&r);
	assert_int_equal(rec_of(f, 0)->gen, gen);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_rank_allocations_and_users, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rank_users_emptied_between_samples, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_rank_new_generation_counts_from_zero, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_rank_users_grow_fails_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_walk_reads_nothing_past_the_end, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
