/* Unit tests for the bandwidth buckets of the shared segment (shm/shm_bw.h): the rate and
 * the burst over simulated time, per direction, a user's bucket shared by two allocations,
 * all-or-nothing charges, the listener bucket and drop counts, resets, a key whose count
 * entry is new, a changed rate, and exact charges under two racing processes. */
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
#include "shm/shm_bw.h"
#include "shm/shm_internal.h"
#include "shm/shm_quota.h"

#define MS UINT64_C(1000000)
#define T0 (UINT64_C(1000) * 1000 * MS)	/* an arbitrary monotonic start */

static const struct shm_quota_limits none = { 0, 0, 0 };

static struct shm *mk(void)
{
	struct shm_config cfg = { 2, 2, 256, 16 };
	struct shm *shm = NULL;

	assert_int_equal(shm_create(&cfg, "test-bw", &shm), 0);
	return shm;
}

/* Offers `bytes`-byte datagrams every `step` ns for `dur` ns from `start`; returns the
 * bytes that passed. */
static uint64_t offer(struct shm *shm, const struct shm_bw_who *who, enum shm_bw_dir dir,
		      const struct shm_bw_limits *lim, size_t bytes, uint64_t start, uint64_t step,
		      uint64_t dur)
{
	uint64_t passed = 0;

	for (uint64_t t = start; t < start + dur; t += step)
		if (shm_bw_admit(shm, who, dir, bytes, t, lim) == SHM_BW_PASS)
			passed += bytes;
	return passed;
}

static void test_rate_and_burst(void **state)
{
	struct shm *shm = mk();
	struct shm_bw_who a = { .alloc_idx = 3, .listener_idx = 1 };
	/* 1 Mbit/s = 125 000 B/s, a burst of 100 ms = 12 500 bytes */
	struct shm_bw_limits lim = { .alloc_bps = 1000000, .burst_ns = 100 * MS };
	struct shm_bw_stat st;
	uint64_t p;

	(void)state;
	assert_true(shm_bw_on(&lim));
	/* at once: exactly the burst (10 datagrams of 1250 bytes cost 100 ms) */
	p = offer(shm, &a, SHM_BW_TO_PEER, &lim, 1250, T0, 1, 20);
	assert_int_equal(p, 12500);
	/* 3x the rate for 5 s, from a bucket that has refilled: the burst and the rate,
	 * within one datagram */
	p = offer(shm, &a, SHM_BW_TO_PEER, &lim, 1250, T0 + 100 * MS, 10 * MS / 3, 5000 * MS);
	assert_in_range(p, 637500 - 1250, 637500 + 1250);
	/* the other direction has its own bucket */
	p = offer(shm, &a, SHM_BW_TO_CLIENT, &lim, 1250, T0 + 100 * MS, 1, 20);
	assert_int_equal(p, 12500);
	assert_int_equal(shm_bw_alloc_stat(shm, 3, &st), 0);
	assert_true(st.drops[SHM_BW_TO_PEER] > 0 && st.drops[SHM_BW_TO_CLIENT] == 10);
	assert_int_equal(st.last[SHM_BW_TO_CLIENT], SHM_BW_ALLOC);
	assert_int_equal(shm_bw_listener_drops(shm, 1), st.drops[0] + st.drops[1]);
	assert_int_equal(shm_bw_listener_drops(shm, 0), 0);
	/* a datagram larger than the burst passes alone into an idle bucket */
	p = offer(shm, &a, SHM_BW_TO_CLIENT, &lim, 60000, T0 + 10000 * MS, 1, 2);
	assert_int_equal(p, 60000);
	/* a reset fills the buckets and clears the drops */
	shm_bw_alloc_reset(shm, 3);
	assert_int_equal(shm_bw_alloc_stat(shm, 3, &st), 0);
	assert_int_equal(st.drops[0] + st.drops[1], 0);
	assert_int_equal(st.last[0], SHM_BW_PASS);
	p = offer(shm, &a, SHM_BW_TO_CLIENT, &lim, 1250, T0 + 10000 * MS, 1, 20);
	assert_int_equal(p, 12500);
	/* a higher rate applies from the next datagram */
	lim.alloc_bps = 2000000;
	p = offer(shm, &a, SHM_BW_TO_CLIENT, &lim, 1250, T0 + 10100 * MS, MS, 1000 * MS);
	assert_in_range(p, 250000 + 25000 - 1250, 250000 + 25000 + 1250);
	assert_int_equal(shm_bw_alloc_stat(shm, 99, &st), -EINVAL);
	shm_destroy(shm);
}

static void test_user_shared(void **state)
{
	struct shm *shm = mk();
	uint64_t u = shm_quota_key(SHM_QUOTA_USER, "u", 1);
	uint64_t l = shm_quota_key(SHM_QUOTA_LISTENER, "l", 1);
	struct shm_bw_who a = { .alloc_idx = 0, .listener_idx = 0, .user_key = u,
				.listener_key = l };
	struct shm_bw_who b = a;
	/* per allocation 2 Mbit/s, per user 3 Mbit/s */
	struct shm_bw_limits lim = { .alloc_bps = 2000000, .user_bps = 3000000,
				     .burst_ns = 10 * MS };
	struct shm_bw_stat st;
	uint64_t pa = 0, pb = 0;

	(void)state;
	b.alloc_idx = 1;
	/* no count entry for u yet: only the allocation buckets limit */
	assert_int_equal(offer(shm, &a, SHM_BW_TO_PEER, &lim, 1000, T0, 1, 1000), 2000);
	shm_bw_alloc_reset(shm, 0);
	assert_int_equal(shm_quota_take(shm, u, l, &none), 0);
	assert_int_equal(shm_quota_take(shm, u, l, &none), 0);
	/* both offer 4 Mbit/s for 2 s: the user's 3 Mbit/s is shared, neither passes 2 */
	for (uint64_t t = T0 + 1000 * MS; t < T0 + 3000 * MS; t += 2 * MS) {
		if (shm_bw_admit(shm, &a, SHM_BW_TO_PEER, 1000, t, &lim) == SHM_BW_PASS)
			pa += 1000;
		if (shm_bw_admit(shm, &b, SHM_BW_TO_PEER, 1000, t, &lim) == SHM_BW_PASS)
			pb += 1000;
	}
	assert_in_range(pa + pb, 750000 - 2000, 750000 + 3750 + 2000);
	assert_true(pa <= 500000 + 2500 + 1000 && pb <= 500000 + 2500 + 1000);
	/* all or nothing: with the user's bucket full, a refused datagram does not charge the
	 * allocation's bucket (an allocation alone afterwards gets its full rate) */
	lim.user_bps = 8000;	/* 1000 bytes per second */
	assert_int_equal(shm_bw_admit(shm, &a, SHM_BW_TO_CLIENT, 1000, T0 + 5000 * MS, &lim),
			 SHM_BW_PASS);
	assert_int_equal(shm_bw_admit(shm, &a, SHM_BW_TO_CLIENT, 1000, T0 + 5000 * MS, &lim),
			 SHM_BW_USER);
	lim.user_bps = 0;
	assert_int_equal(shm_bw_admit(shm, &a, SHM_BW_TO_CLIENT, 1000, T0 + 5000 * MS, &lim),
			 SHM_BW_PASS);
	/* the listener's bucket */
	lim = (struct shm_bw_limits){ .listener_bps = 8000, .burst_ns = MS };
	assert_int_equal(shm_bw_admit(shm, &b, SHM_BW_TO_CLIENT, 100, T0 + 6000 * MS, &lim),
			 SHM_BW_PASS);
	assert_int_equal(shm_bw_admit(shm, &a, SHM_BW_TO_CLIENT, 100, T0 + 6000 * MS, &lim),
			 SHM_BW_LISTENER);
	assert_int_equal(shm_bw_alloc_stat(shm, 0, &st), 0);
	assert_int_equal(st.drops[SHM_BW_TO_CLIENT], 2);
	assert_int_equal(st.last[SHM_BW_TO_CLIENT], SHM_BW_LISTENER);
	/* the keys' allocations end, a new key (same window, another tag) takes the
	 * listener's entry: its buckets start full, not 100 ms ahead */
	assert_int_equal(shm_quota_give(shm, u, l), 0);
	assert_int_equal(shm_quota_give(shm, u, l), 0);
	b.listener_key = l ^ (UINT64_C(1) << 40);
	assert_int_equal(shm_quota_take(shm, b.listener_key, 0, &none), 0);
	assert_ptr_equal(shm_quota_entry_of(shm, b.listener_key),
			 &shm_quota_hdr(shm)->entries[l & (shm_quota_entries(16) - 1)]);
	assert_int_equal(shm_bw_admit(shm, &b, SHM_BW_TO_CLIENT, 100, T0 + 6000 * MS, &lim),
			 SHM_BW_PASS);
	shm_destroy(shm);
}

/* Two processes charge one user's bucket at once: what passes is exactly what the bucket
 * holds (no lost or doubled charge). */
static void test_race(void **state)
{
	struct shm *shm = mk();
	uint64_t u = shm_quota_key(SHM_QUOTA_USER, "r", 1);
	/* 8 Mbit/s: 1 byte per us; a burst of 1 s: exactly 1 000 000 bytes pass at one instant */
	struct shm_bw_limits lim = { .user_bps = 8000000, .burst_ns = 1000 * MS };
	int fds[2], st;
	uint64_t mine = 0, theirs = 0;
	pid_t pid;

	(void)state;
	assert_int_equal(shm_quota_take(shm, u, 0, &none), 0);
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct shm_bw_who w = { .alloc_idx = 1, .listener_idx = 99, .user_key = u };
		uint64_t p = 0;

		for (int i = 0; i < 100000; i++)
			if (shm_bw_admit(shm, &w, SHM_BW_TO_PEER, 10, T0, &lim) == SHM_BW_PASS)
				p += 10;
		_exit(write(fds[1], &p, sizeof(p)) == sizeof(p) ? 0 : 1);
	}
	{
		struct shm_bw_who w = { .alloc_idx = 0, .listener_idx = 99, .user_key = u };

		for (int i = 0; i < 100000; i++)
			if (shm_bw_admit(shm, &w, SHM_BW_TO_PEER, 10, T0, &lim) == SHM_BW_PASS)
				mine += 10;
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(read(fds[0], &theirs, sizeof(theirs)), sizeof(theirs));
	assert_int_equal(mine + theirs, 1000000);
	close(fds[0]);
	close(fds[1]);
	shm_destroy(shm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rate_and_burst),
		cmocka_unit_test(test_user_shared),
		cmocka_unit_test(test_race),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
