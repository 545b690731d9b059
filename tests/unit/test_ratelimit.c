/* Unit tests for the worker's unauthenticated-error limiter (worker/ratelimit.h): burst,
 * rate, refill, prefix grouping, independence, disabling, bounded state; injected clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmocka.h>

#include "worker/ratelimit.h"

#define SEC 1000000000ull
#define T0 (1000 * SEC)	/* an arbitrary monotonic start */

static const uint8_t test_key[WK_RL_KEY_LEN] = { 1, 2,  3,  4,  5,  6,  7,  8,
						 9, 10, 11, 12, 13, 14, 15, 16 };

static struct sockaddr_storage v4(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *s = (struct sockaddr_in *)&ss;

	memset(&ss, 0, sizeof(ss));
	s->sin_family = AF_INET;
	s->sin_port = htons(port);
	assert_int_equal(inet_pton(AF_INET, ip, &s->sin_addr), 1);
	return ss;
}

static struct sockaddr_storage v6(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;

	memset(&ss, 0, sizeof(ss));
	s->sin6_family = AF_INET6;
	s->sin6_port = htons(port);
	assert_int_equal(inet_pton(AF_INET6, ip, &s->sin6_addr), 1);
	return ss;
}

#define SA(ss) ((const struct sockaddr *)&(ss))

static struct wk_rl *rl_new(uint32_t rate, uint32_t burst, uint32_t p4, uint32_t p6)
{
	static struct wk_rl rl;	/* 32 KiB: not on the test's stack */
	struct wk_rl_conf c = { rate, burst, p4, p6, 0, 0 };

	assert_int_equal(wk_rl_init(&rl, &c, test_key), 0);
	return &rl;
}

/* How many of n requests at time now are admitted. */
static unsigned admit_n(struct wk_rl *rl, const struct sockaddr *sa, uint64_t now, unsigned n)
{
	unsigned ok = 0;

	for (unsigned i = 0; i < n; i++)
		ok += wk_rl_admit(rl, sa, now);
	return ok;
}

/* The reference vectors of the SipHash paper: key 00..0f, messages 00, 00 01, ... */
static void test_siphash_vectors(void **state)
{
	uint8_t key[16], msg[64];

	(void)state;
	for (unsigned i = 0; i < 16; i++)
		key[i] = (uint8_t)i;
	for (unsigned i = 0; i < 64; i++)
		msg[i] = (uint8_t)i;
	assert_true(wk_siphash24(key, msg, 0) == 0x726fdb47dd0e0e31ull);
	assert_true(wk_siphash24(key, msg, 1) == 0x74f839c593dc67fdull);
	assert_true(wk_siphash24(key, msg, 8) == 0x93f5f5799a932462ull);
	assert_true(wk_siphash24(key, msg, 15) == 0xa129ca6149be45e5ull);
	assert_true(wk_siphash24(key, msg, 63) == 0x958a324ceb064572ull);
}

static void test_burst_then_drop(void **state)
{
	struct wk_rl *rl = rl_new(20, 40, 24, 64);
	struct sockaddr_storage a = v4("192.0.2.7", 5000);

	(void)state;
	assert_int_equal(admit_n(rl, SA(a), T0, 100), 40);
	assert_false(wk_rl_admit(rl, SA(a), T0));
}

/* Tokens come back at `rate` per second, never beyond `burst`. */
static void test_refill(void **state)
{
	struct wk_rl *rl = rl_new(20, 40, 24, 64);
	struct sockaddr_storage a = v4("192.0.2.7", 5000);

	(void)state;
	assert_int_equal(admit_n(rl, SA(a), T0, 40), 40);
	assert_false(wk_rl_admit(rl, SA(a), T0 + SEC / 20 - 1));	/* just too early */
	assert_true(wk_rl_admit(rl, SA(a), T0 + SEC / 20));
	assert_false(wk_rl_admit(rl, SA(a), T0 + SEC / 20));
	/* Half a second: 10 more. */
	assert_int_equal(admit_n(rl, SA(a), T0 + SEC / 20 + SEC / 2, 100), 10);
	/* A long quiet spell fills the bucket to burst, not beyond. */
	assert_int_equal(admit_n(rl, SA(a), T0 + 3600 * SEC, 1000), 40);
}

/* Over a long run the admitted count is burst + rate * elapsed. */
static void test_sustained_rate(void **state)
{
	struct wk_rl *rl = rl_new(100, 5, 24, 64);
	struct sockaddr_storage a = v4("198.51.100.1", 1);
	unsigned ok = 0;

	(void)state;
	for (uint64_t ms = 0; ms < 10000; ms++)	/* 10 s, 10 requests every millisecond */
		ok += admit_n(rl, SA(a), T0 + ms * (SEC / 1000), 10);
	/* burst 5 at t=0, then one every 10 ms over 9.999 s: 999 more */
	assert_int_equal(ok, 5 + 999);
}

static void test_prefix_v4(void **state)
{
	struct wk_rl *rl = rl_new(1, 3, 24, 64);
	struct sockaddr_storage a = v4("10.1.2.3", 1000), b = v4("10.1.2.250", 2000);
	struct sockaddr_storage m = v6("::ffff:10.1.2.99", 3000);

	(void)state;
	assert_int_equal(wk_rl_bucket(rl, SA(a)), wk_rl_bucket(rl, SA(b)));
	assert_int_equal(wk_rl_bucket(rl, SA(a)), wk_rl_bucket(rl, SA(m)));
	/* One /24 shares one budget, whatever the host or port. */
	assert_true(wk_rl_admit(rl, SA(a), T0));
	assert_true(wk_rl_admit(rl, SA(b), T0));
	assert_true(wk_rl_admit(rl, SA(m), T0));
	assert_false(wk_rl_admit(rl, SA(a), T0));
	assert_false(wk_rl_admit(rl, SA(b), T0));
	assert_false(wk_rl_admit(rl, SA(m), T0));
}

static void test_prefix_v6(void **state)
{
	struct wk_rl *rl = rl_new(1, 2, 24, 64);
	struct sockaddr_storage a = v6("2001:db8:1:2::1", 1), b = v6("2001:db8:1:2:ffff::9", 2);

	(void)state;
	assert_int_equal(wk_rl_bucket(rl, SA(a)), wk_rl_bucket(rl, SA(b)));
	assert_int_equal(admit_n(rl, SA(a), T0, 1), 1);
	assert_int_equal(admit_n(rl, SA(b), T0, 5), 1);
	assert_false(wk_rl_admit(rl, SA(a), T0));
}

/* Configured prefix lengths: /32 separates hosts, /16 groups more, /48 for IPv6. */
static void test_prefix_configured(void **state)
{
	struct wk_rl *rl = rl_new(1, 1, 32, 48);
	struct sockaddr_storage a = v4("10.1.2.3", 1), b = v4("10.1.2.4", 1);
	struct sockaddr_storage c = v6("2001:db8:1:2::1", 1), d = v6("2001:db8:1:ffff::1", 1);
	struct sockaddr_storage e;

	(void)state;
	assert_int_not_equal(wk_rl_bucket(rl, SA(a)), wk_rl_bucket(rl, SA(b)));
	assert_int_equal(wk_rl_bucket(rl, SA(c)), wk_rl_bucket(rl, SA(d)));
	wk_rl_set(rl, &(struct wk_rl_conf){ 1, 1, 16, 64, 0, 0 });
	e = v4("10.1.200.1", 9);
	assert_int_equal(wk_rl_bucket(rl, SA(a)), wk_rl_bucket(rl, SA(e)));
	assert_int_not_equal(wk_rl_bucket(rl, SA(c)), wk_rl_bucket(rl, SA(d)));
}

/* Distinct prefixes have their own budgets: draining one leaves the others full. The
 * addresses are chosen among those not colliding under the test key (a collision would
 * share a bucket, which is the documented behaviour). */
static void test_distinct_independent(void **state)
{
	struct wk_rl *rl = rl_new(10, 4, 24, 64);
	struct sockaddr_storage victim = v4("203.0.113.5", 1);
	unsigned other_ok = 0, others = 0;
	char ip[32];

	(void)state;
	assert_int_equal(admit_n(rl, SA(victim), T0, 50), 4);
	for (unsigned i = 0; i < 200; i++) {
		struct sockaddr_storage o;

		snprintf(ip, sizeof(ip), "198.%u.%u.1", 18 + i / 100, i % 100);
		o = v4(ip, 1);
		if (wk_rl_bucket(rl, SA(o)) == wk_rl_bucket(rl, SA(victim)))
			continue;
		others++;
		other_ok += admit_n(rl, SA(o), T0, 1);
	}
	assert_true(others >= 190);
	assert_int_equal(other_ok, others);
	assert_false(wk_rl_admit(rl, SA(victim), T0));
	/* IPv6 /64s too. */
	victim = v6("2001:db8:a::1", 1);
	assert_int_equal(admit_n(rl, SA(victim), T0, 9), 4);
	{
		struct sockaddr_storage o = v6("2001:db8:b::1", 1);

		assert_int_not_equal(wk_rl_bucket(rl, SA(o)), wk_rl_bucket(rl, SA(victim)));
		assert_int_equal(admit_n(rl, SA(o), T0, 9), 4);
	}
}

static void test_disabled(void **state)
{
	struct wk_rl *rl = rl_new(0, 1, 24, 64);
	struct sockaddr_storage a = v4("192.0.2.1", 1);

	(void)state;
	assert_int_equal(admit_n(rl, SA(a), T0, 100000), 100000);
	/* Enabling on reload limits at once; disabling again lets everything through. */
	wk_rl_set(rl, &(struct wk_rl_conf){ 5, 2, 24, 64, 0, 0 });
	assert_int_equal(admit_n(rl, SA(a), T0, 10), 2);
	wk_rl_set(rl, &(struct wk_rl_conf){ 0, 2, 24, 64, 0, 0 });
	assert_int_equal(admit_n(rl, SA(a), T0, 10), 10);
}

/* A changed configuration starts from full buckets; an unchanged one keeps the state. */
static void test_reload(void **state)
{
	struct wk_rl *rl = rl_new(1, 3, 24, 64);
	struct sockaddr_storage a = v4("192.0.2.1", 1);

	(void)state;
	assert_int_equal(admit_n(rl, SA(a), T0, 10), 3);
	wk_rl_set(rl, &(struct wk_rl_conf){ 1, 3, 24, 64, 0, 0 });
	assert_false(wk_rl_admit(rl, SA(a), T0));
	wk_rl_set(rl, &(struct wk_rl_conf){ 1, 5, 24, 64, 0, 0 });
	assert_int_equal(admit_n(rl, SA(a), T0, 10), 5);
	/* burst 0 is taken as 1, and re-applying it is no change */
	wk_rl_set(rl, &(struct wk_rl_conf){ 1, 0, 24, 64, 0, 0 });
	assert_int_equal(admit_n(rl, SA(a), T0, 10), 1);
	wk_rl_set(rl, &(struct wk_rl_conf){ 1, 0, 24, 64, 0, 0 });
	assert_false(wk_rl_admit(rl, SA(a), T0));
}

/* The trust fields (limits.unauth_trust_*) ride along: changing them keeps the buckets. */
static void test_reload_trust_keeps_buckets(void **state)
{
	struct wk_rl *rl = rl_new(1, 3, 24, 64);
	struct sockaddr_storage a = v4("192.0.2.1", 1);

	(void)state;
	assert_int_equal(admit_n(rl, SA(a), T0, 10), 3);
	wk_rl_set(rl, &(struct wk_rl_conf){ 1, 3, 24, 64, 600, 50 });
	assert_false(wk_rl_admit(rl, SA(a), T0));
	assert_int_equal(rl->conf.trust_window, 600);
	assert_int_equal(rl->conf.trust_credits, 50);
}

/* The message both the buckets and the trust table hash: an IPv4-mapped address is its
 * IPv4 address; a full-length prefix keeps every bit, a shorter one masks the rest. */
static void test_prefix_msg(void **state)
{
	struct sockaddr_storage a = v4("192.0.2.1", 1), b = v4("192.0.2.2", 9);
	struct sockaddr_storage m = v6("::ffff:192.0.2.1", 7), c = v6("2001:db8::1", 1);
	struct sockaddr_storage e = v6("2001:db8::2", 1);
	uint8_t x[WK_RL_MSG_MAX], y[WK_RL_MSG_MAX];

	(void)state;
	assert_int_equal(wk_rl_prefix_msg(SA(a), 32, 128, x), 6);
	assert_int_equal(wk_rl_prefix_msg(SA(m), 32, 128, y), 6);
	assert_memory_equal(x, y, 6);
	wk_rl_prefix_msg(SA(b), 32, 128, y);
	assert_memory_not_equal(x, y, 6);
	wk_rl_prefix_msg(SA(a), 24, 64, x);
	wk_rl_prefix_msg(SA(b), 24, 64, y);
	assert_memory_equal(x, y, 6);
	assert_int_equal(wk_rl_prefix_msg(SA(c), 32, 128, x), 18);
	wk_rl_prefix_msg(SA(e), 32, 128, y);
	assert_memory_not_equal(x, y, 18);
	wk_rl_prefix_msg(SA(c), 32, 200, x);	/* taken as 128 */
	assert_int_equal(x[1], 128);
}

/* State is the fixed table: a million distinct sources touch at most WK_RL_BUCKETS
 * buckets, spread over nearly all of them, and the struct never grows. */
static void test_bounded_table(void **state)
{
	struct wk_rl *rl = rl_new(1, 1, 32, 128);
	static uint8_t seen[WK_RL_BUCKETS];
	unsigned used = 0, admitted = 0;

	(void)state;
	assert_true(sizeof(*rl) < 40 * 1024);
	memset(seen, 0, sizeof(seen));
	for (uint32_t i = 0; i < 1000000; i++) {
		struct sockaddr_storage ss;
		struct sockaddr_in *s = (struct sockaddr_in *)&ss;
		uint32_t b;

		memset(&ss, 0, sizeof(ss));
		s->sin_family = AF_INET;
		s->sin_addr.s_addr = htonl(0x0a000000u + i);
		b = wk_rl_bucket(rl, SA(ss));
		assert_true(b < WK_RL_BUCKETS);
		used += !seen[b];
		seen[b] = 1;
		admitted += wk_rl_admit(rl, SA(ss), T0);
	}
	assert_true(used > WK_RL_BUCKETS * 99 / 100);
	/* burst 1 per bucket at one instant: every bucket gave exactly one answer */
	assert_int_equal(admitted, used);
}

/* The key decides the grouping of colliding prefixes: another key, another layout. */
static void test_keyed(void **state)
{
	static struct wk_rl r1, r2;
	struct wk_rl_conf c = { 1, 1, 24, 64, 0, 0 };
	uint8_t k2[WK_RL_KEY_LEN];
	unsigned same = 0;
	char ip[32];

	(void)state;
	memcpy(k2, test_key, sizeof(k2));
	k2[0] ^= 1;
	assert_int_equal(wk_rl_init(&r1, &c, test_key), 0);
	assert_int_equal(wk_rl_init(&r2, &c, k2), 0);
	for (unsigned i = 0; i < 256; i++) {
		struct sockaddr_storage a;

		snprintf(ip, sizeof(ip), "10.0.%u.1", i);
		a = v4(ip, 1);

		same += wk_rl_bucket(&r1, SA(a)) == wk_rl_bucket(&r2, SA(a));
	}
	assert_true(same < 8);
	/* NULL key: a random one, and a working limiter */
	assert_int_equal(wk_rl_init(&r1, &c, NULL), 0);
	{
		struct sockaddr_storage a = v4("10.0.0.1", 1);

		assert_int_equal(admit_n(&r1, SA(a), T0, 3), 1);
	}
}

/* An uninitialised limiter (no key could be drawn) refuses: fail towards limiting. */
static void test_uninitialised_refuses(void **state)
{
	static struct wk_rl rl;
	struct sockaddr_storage a = v4("10.0.0.1", 1);

	(void)state;
	memset(&rl, 0, sizeof(rl));
	assert_false(wk_rl_admit(&rl, SA(a), T0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_siphash_vectors),
		cmocka_unit_test(test_burst_then_drop),
		cmocka_unit_test(test_refill),
		cmocka_unit_test(test_sustained_rate),
		cmocka_unit_test(test_prefix_v4),
		cmocka_unit_test(test_prefix_v6),
		cmocka_unit_test(test_prefix_configured),
		cmocka_unit_test(test_distinct_independent),
		cmocka_unit_test(test_disabled),
		cmocka_unit_test(test_reload),
		cmocka_unit_test(test_reload_trust_keeps_buckets),
		cmocka_unit_test(test_prefix_msg),
		cmocka_unit_test(test_bounded_table),
		cmocka_unit_test(test_keyed),
		cmocka_unit_test(test_uninitialised_refuses),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
