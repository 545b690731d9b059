/* Per-source-prefix rate limiter of answers (error responses, STUN Binding successes) to
 * unauthenticated UDP requests: keeps turngate from serving as a reflection amplifier
 * (docs/security.md).
 *
 * Fixed-size state: WK_RL_BUCKETS token buckets indexed by SipHash-2-4 (with a per-process
 * random key) of the source address cut to its prefix (IPv4 /24, IPv6 /64 by default; an
 * IPv4-mapped IPv6 address counts as IPv4). Nothing is ever allocated per source: two
 * prefixes whose hashes collide share one bucket, so a collision only ever limits more,
 * never grows state. The key is secret, so an attacker cannot aim collisions at a victim.
 *
 * Each bucket is a GCRA cell (theoretical arrival time), the exact equivalent of a token
 * bucket of `burst` tokens refilled at `rate` per second; an all-zero bucket is full, so a
 * reset is a memset. Time is passed in (nanoseconds of a monotonic clock), so tests drive
 * it without sleeping.
 *
 * Worker-private and single-threaded: one struct wk_rl per worker process, embedded in
 * struct worker (its fields are private to ratelimit.c). Pure: no I/O, no counters (the
 * caller counts drops, see worker/unauth.c).
 */
#ifndef TG_WORKER_RATELIMIT_H
#define TG_WORKER_RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define WK_RL_MAGIC 0x574b524cu
#define WK_RL_BUCKETS 4096u	/* power of two */
#define WK_RL_KEY_LEN 16u

struct wk_rl_conf {
	uint32_t rate;		/* responses per second per prefix; 0 = no limit */
	uint32_t burst;		/* bucket size (>= 1; 0 is taken as 1) */
	uint32_t prefix_v4;	/* 0..32 (larger is taken as 32) */
	uint32_t prefix_v6;	/* 0..128 (larger is taken as 128) */
	/* Not used here, carried for worker/unauth.c: the trust table's window (seconds)
	 * and credit cap (0 = no trust), limits.unauth_trust_*. A change keeps the buckets. */
	uint32_t trust_window;
	uint32_t trust_credits;
};

struct wk_rl {
	uint32_t magic;
	struct wk_rl_conf conf;
	uint64_t interval_ns;	/* 1 s / rate */
	uint64_t window_ns;	/* burst * interval: how far ahead a bucket may be booked */
	uint8_t key[WK_RL_KEY_LEN];
	uint64_t tat[WK_RL_BUCKETS];	/* theoretical arrival time per bucket, ns */
};

/* Initialises rl with conf and a hash key: key (WK_RL_KEY_LEN bytes) for tests, NULL for a
 * fresh random one. Returns 0, or -EIO when no random key could be drawn (rl is then left
 * unusable and wk_rl_admit answers false: fail towards limiting). */
int wk_rl_init(struct wk_rl *rl, const struct wk_rl_conf *conf, const uint8_t *key);

/* Applies a new configuration (a reload). When rate, burst or a prefix length differs
 * from the current one every bucket is reset to full: prefixes may map differently now.
 * The key is kept. */
void wk_rl_set(struct wk_rl *rl, const struct wk_rl_conf *conf);

/* May an error response go to src at now_ns? True (one token taken) or false (drop it).
 * Always true when rate is 0. An address of a family other than AF_INET/AF_INET6 shares
 * one bucket with its kind. */
bool wk_rl_admit(struct wk_rl *rl, const struct sockaddr *src, uint64_t now_ns);

/* The hashed form of src cut to a prefix: family tag, prefix length, masked address
 * (IPv4: 4 bytes, IPv6: 16; an IPv4-mapped IPv6 address counts as IPv4, bits_v4 then
 * applies). Writes at most WK_RL_MSG_MAX bytes to out; returns the length. */
#define WK_RL_MSG_MAX 18u
size_t wk_rl_prefix_msg(const struct sockaddr *src, uint32_t bits_v4, uint32_t bits_v6,
			uint8_t out[WK_RL_MSG_MAX]);

/* The bucket index src falls into (for tests: grouping and independence). */
uint32_t wk_rl_bucket(const struct wk_rl *rl, const struct sockaddr *src);

/* SipHash-2-4 (Aumasson and Bernstein) of msg under a 16-byte key. */
uint64_t wk_siphash24(const uint8_t key[WK_RL_KEY_LEN], const void *msg, size_t len);

#endif
