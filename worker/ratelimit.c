/* Per-source-prefix token buckets (GCRA) for error responses to unauthenticated UDP
 * requests; see worker/ratelimit.h for the contract and docs/security.md for the why. */
#include "config.h"

#include "worker/ratelimit.h"

#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include <openssl/rand.h>

#define NS_PER_S 1000000000ull

static inline uint64_t rotl64(uint64_t x, unsigned b)
{
	return (x << b) | (x >> (64 - b));
}

static inline uint64_t load_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static inline void sip_round(uint64_t v[4])
{
	v[0] += v[1];
	v[1] = rotl64(v[1], 13) ^ v[0];
	v[0] = rotl64(v[0], 32);
	v[2] += v[3];
	v[3] = rotl64(v[3], 16) ^ v[2];
	v[0] += v[3];
	v[3] = rotl64(v[3], 21) ^ v[0];
	v[2] += v[1];
	v[1] = rotl64(v[1], 17) ^ v[2];
	v[2] = rotl64(v[2], 32);
}

static inline void sip_absorb(uint64_t v[4], uint64_t m)
{
	v[3] ^= m;
	sip_round(v);
	sip_round(v);
	v[0] ^= m;
}

uint64_t wk_siphash24(const uint8_t key[WK_RL_KEY_LEN], const void *msg, size_t len)
{
	const uint8_t *p = msg;
	uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
	uint64_t v[4] = { k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull,
			  k0 ^ 0x6c7967656e657261ull, k1 ^ 0x7465646279746573ull };
	uint64_t last = (uint64_t)(len & 0xff) << 56;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8)
		sip_absorb(v, load_le64(p + i));
	for (unsigned j = 0; i + j < len; j++)
		last |= (uint64_t)p[i + j] << (8 * j);
	sip_absorb(v, last);
	v[2] ^= 0xff;
	for (unsigned r = 0; r < 4; r++)
		sip_round(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}

/* Zeroes the bits of addr[0..n) after the first `bits`. */
static void rl_mask(uint8_t *addr, size_t n, uint32_t bits)
{
	for (size_t i = 0; i < n; i++) {
		if (bits >= 8) {
			bits -= 8;
			continue;
		}
		addr[i] &= (uint8_t)(0xff00u >> bits);
		bits = 0;
	}
}

size_t wk_rl_prefix_msg(const struct sockaddr *sa, uint32_t bits_v4, uint32_t bits_v6,
			uint8_t out[WK_RL_MSG_MAX])
{
	const uint8_t *a = NULL;
	size_t n = 0;
	uint32_t bits = 0;

	if (sa->sa_family == AF_INET) {
		a = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
		n = 4;
	} else if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		/* A dual-stack socket shows IPv4 clients as ::ffff:a.b.c.d: same bucket as
		 * a.b.c.d would have on an IPv4 socket. */
		a = a6->s6_addr;
		n = 16;
		if (IN6_IS_ADDR_V4MAPPED(a6)) {
			a += 12;
			n = 4;
		}
	}
	out[0] = (uint8_t)n;
	if (n == 4)
		bits = bits_v4 < 32 ? bits_v4 : 32;
	else if (n == 16)
		bits = bits_v6 < 128 ? bits_v6 : 128;
	out[1] = (uint8_t)bits;
	if (n)
		memcpy(out + 2, a, n);
	rl_mask(out + 2, n, bits);
	return 2 + n;
}

uint32_t wk_rl_bucket(const struct wk_rl *rl, const struct sockaddr *src)
{
	uint8_t msg[WK_RL_MSG_MAX];
	size_t len = wk_rl_prefix_msg(src, rl->conf.prefix_v4, rl->conf.prefix_v6, msg);

	return (uint32_t)(wk_siphash24(rl->key, msg, len) & (WK_RL_BUCKETS - 1));
}

static struct wk_rl_conf rl_normal(const struct wk_rl_conf *conf)
{
	struct wk_rl_conf c = *conf;

	if (c.burst == 0)
		c.burst = 1;
	if (c.prefix_v4 > 32)
		c.prefix_v4 = 32;
	if (c.prefix_v6 > 128)
		c.prefix_v6 = 128;
	return c;
}

/* The fields that decide which bucket holds what, and how full it may be. */
static bool rl_same_buckets(const struct wk_rl_conf *a, const struct wk_rl_conf *b)
{
	return a->rate == b->rate && a->burst == b->burst && a->prefix_v4 == b->prefix_v4 &&
	       a->prefix_v6 == b->prefix_v6;
}

static void rl_apply(struct wk_rl *rl, const struct wk_rl_conf *conf)
{
	rl->conf = rl_normal(conf);
	rl->interval_ns = rl->conf.rate ? NS_PER_S / rl->conf.rate : 0;
	if (rl->conf.rate && rl->interval_ns == 0)
		rl->interval_ns = 1;
	rl->window_ns = rl->interval_ns * rl->conf.burst;
	memset(rl->tat, 0, sizeof(rl->tat));
}

int wk_rl_init(struct wk_rl *rl, const struct wk_rl_conf *conf, const uint8_t *key)
{
	memset(rl, 0, sizeof(*rl));
	if (key)
		memcpy(rl->key, key, WK_RL_KEY_LEN);
	else if (RAND_bytes(rl->key, WK_RL_KEY_LEN) != 1)
		return -EIO;
	rl_apply(rl, conf);
	rl->magic = WK_RL_MAGIC;
	return 0;
}

void wk_rl_set(struct wk_rl *rl, const struct wk_rl_conf *conf)
{
	struct wk_rl_conf c = rl_normal(conf);

	assert(rl->magic == WK_RL_MAGIC);
	if (!rl_same_buckets(&rl->conf, &c))
		rl_apply(rl, &c);
	else
		rl->conf = c;
}

bool wk_rl_admit(struct wk_rl *rl, const struct sockaddr *src, uint64_t now_ns)
{
	uint64_t *tat, t;

	if (rl->magic != WK_RL_MAGIC)
		return false;
	if (rl->conf.rate == 0)
		return true;
	tat = &rl->tat[wk_rl_bucket(rl, src)];
	t = *tat > now_ns ? *tat : now_ns;
	/* Booking one more response must not reach further ahead than `burst` intervals:
	 * that is a token bucket of `burst` tokens refilled every interval. */
	if (t + rl->interval_ns - now_ns > rl->window_ns)
		return false;
	*tat = t + rl->interval_ns;
	return true;
}
