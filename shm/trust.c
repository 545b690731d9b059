/* Trust table of the shared segment: credits of source addresses that authenticated,
 * CAS-updated by every worker (contract and layout in shm/shm_trust.h). */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "shm/shm_internal.h"

#define TRUST_TRIES 4u   /* races lost before an earn gives up (SHM_TRUST_SKIPPED) */

static_assert((SHM_TRUST_SETS & (SHM_TRUST_SETS - 1)) == 0, "sets: a power of two");
static_assert(sizeof(struct shm_trust_ent) == 16, "two words per entry");

int shm_trust_init(struct shm_trust_hdr *t)
{
	size_t got = 0;

	while (got < SHM_TRUST_KEY_LEN) {
		ssize_t n = getrandom(t->key + got, SHM_TRUST_KEY_LEN - got, 0);

		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0)
			got += (size_t)n;
	}
	t->n_sets = SHM_TRUST_SETS;
	t->n_ways = SHM_TRUST_WAYS;
	t->version = SHM_TRUST_VERSION;
	t->magic = SHM_TRUST_MAGIC;
	return 0;
}

int shm_trust_validate(const struct shm_trust_hdr *t)
{
	if (t->magic != SHM_TRUST_MAGIC || t->version != SHM_TRUST_VERSION ||
	    t->n_sets != SHM_TRUST_SETS || t->n_ways != SHM_TRUST_WAYS)
		return -EBADMSG;
	return 0;
}

const uint8_t *shm_trust_hkey(const struct shm *shm)
{
	shm_check_handle(shm);
	return shm_trust_hdr(shm)->key;
}

/* 0 is "empty": the one hash value that maps to it is moved to 1. */
static inline uint64_t trust_key(uint64_t h)
{
	return h ? h : 1;
}

static inline uint64_t st_tag(uint64_t st)
{
	return st >> 48;
}
static inline uint32_t st_credits(uint64_t st)
{
	return (uint32_t)(st >> 32) & 0xffffu;
}
static inline uint32_t st_time(uint64_t st)
{
	return (uint32_t)st;
}

static inline uint64_t st_make(uint64_t key, uint32_t credits, uint32_t t)
{
	return (key >> 48) << 48 | (uint64_t)credits << 32 | t;
}

/* Earned within window_s of now_s. A last earn a little ahead of now_s (another process
 * read the clock later) counts as now. */
static inline bool st_live(uint64_t st, uint32_t now_s, uint32_t window_s)
{
	int64_t age = (int64_t)now_s - (int64_t)st_time(st);

	return age <= (int64_t)window_s;
}

static struct shm_trust_ent *trust_set(const struct shm *shm, uint64_t key)
{
	struct shm_trust_ent *e = (struct shm_trust_ent *)shm_trust_hdr(shm)->entries;

	return e + (key & (SHM_TRUST_SETS - 1)) * SHM_TRUST_WAYS;
}

/* The way holding key in its set, or NULL. */
static struct shm_trust_ent *trust_find(const struct shm *shm, uint64_t key)
{
	struct shm_trust_ent *set = trust_set(shm, key);

	for (unsigned i = 0; i < SHM_TRUST_WAYS; i++)
		if (CMM_LOAD_SHARED(set[i].key) == key)
			return &set[i];
	return NULL;
}

/* Live credits of an entry's state for key (0 when the state belongs to another key). */
static uint32_t st_credits_for(uint64_t st, uint64_t key, uint32_t now_s, uint32_t window_s)
{
	if (st_tag(st) != key >> 48 || !st_live(st, now_s, window_s))
		return 0;
	return st_credits(st);
}

/* One credit more for key in e (or a fresh start at one). False when e was taken over by
 * another key meanwhile (the caller searches again). */
static bool trust_credit(struct shm_trust_ent *e, uint64_t key, uint32_t now_s, uint32_t window_s,
			 uint32_t cap)
{
	for (;;) {
		uint64_t st = CMM_LOAD_SHARED(e->state), nst;
		uint32_t c = st_credits_for(st, key, now_s, window_s);

		if (CMM_LOAD_SHARED(e->key) != key)
			return false;
		if (c >= cap && st_time(st) == now_s)
			return true;
		nst = st_make(key, c < cap ? c + 1 : cap, now_s);
		if (uatomic_cmpxchg(&e->state, st, nst) == st)
			return true;
	}
}

/* The way a new key takes: an empty one, else an expired one, else the one that earned
 * least recently. *live tells whether that one was live. */
static struct shm_trust_ent *trust_victim(const struct shm *shm, uint64_t key, uint32_t now_s,
					  uint32_t window_s, bool *live)
{
	struct shm_trust_ent *set = trust_set(shm, key), *best = NULL;
	int64_t best_age = -1;

	for (unsigned i = 0; i < SHM_TRUST_WAYS; i++) {
		uint64_t st = CMM_LOAD_SHARED(set[i].state);
		int64_t age = (int64_t)now_s - (int64_t)st_time(st);

		if (CMM_LOAD_SHARED(set[i].key) == 0 || !st_live(st, now_s, window_s)) {
			*live = false;
			return &set[i];
		}
		if (age > best_age) {
			best_age = age;
			best = &set[i];
		}
	}
	*live = true;
	return best;
}

int shm_trust_earn(struct shm *shm, uint64_t h, uint32_t now_s, uint32_t window_s, uint32_t cap)
{
	uint64_t key = trust_key(h);

	shm_check_handle(shm);
	if (shm->ro)
		return -EROFS;
	if (cap > SHM_TRUST_MAX_CREDITS)
		cap = SHM_TRUST_MAX_CREDITS;
	if (cap == 0)
		cap = 1;
	for (unsigned t = 0; t < TRUST_TRIES; t++) {
		struct shm_trust_ent *e = trust_find(shm, key);
		uint64_t old, ost;
		bool live;

		if (e != NULL) {
			if (trust_credit(e, key, now_s, window_s, cap))
				return SHM_TRUST_CREDITED;
			continue;
		}
		e = trust_victim(shm, key, now_s, window_s, &live);
		ost = CMM_LOAD_SHARED(e->state);
		old = CMM_LOAD_SHARED(e->key);
		if (uatomic_cmpxchg(&e->key, old, key) != old)
			continue;
		/* The old state's tag is the old key's: until the store below lands, the way
		 * reads as empty for key (st_credits_for). The old credits are never
		 * inherited, even by a key with the same tag; when the state moved meanwhile
		 * (a spend of the old key, an earn of the new one), credit as usual. */
		if (uatomic_cmpxchg(&e->state, ost, st_make(key, 1, now_s)) == ost ||
		    trust_credit(e, key, now_s, window_s, cap))
			return live ? SHM_TRUST_EVICTED : SHM_TRUST_NEW;
	}
	return SHM_TRUST_SKIPPED;
}

bool shm_trust_spend(struct shm *shm, uint64_t h, uint32_t now_s, uint32_t window_s)
{
	uint64_t key = trust_key(h);
	struct shm_trust_ent *e;

	shm_check_handle(shm);
	if (shm->ro || (e = trust_find(shm, key)) == NULL)
		return false;
	for (;;) {
		uint64_t st = CMM_LOAD_SHARED(e->state);
		uint32_t c = st_credits_for(st, key, now_s, window_s);

		if (c == 0 || CMM_LOAD_SHARED(e->key) != key)
			return false;
		/* The last-earn time stays: spending does not make an address more trusted. */
		if (uatomic_cmpxchg(&e->state, st, st_make(key, c - 1, st_time(st))) == st)
			return true;
	}
}

uint32_t shm_trust_credits(const struct shm *shm, uint64_t h, uint32_t now_s, uint32_t window_s)
{
	uint64_t key = trust_key(h);
	const struct shm_trust_ent *e;

	shm_check_handle(shm);
	e = trust_find(shm, key);
	return e ? st_credits_for(CMM_LOAD_SHARED(e->state), key, now_s, window_s) : 0;
}

uint32_t shm_trust_count(const struct shm *shm, uint32_t now_s, uint32_t window_s)
{
	const struct shm_trust_ent *e;
	uint32_t n = 0;

	shm_check_handle(shm);
	e = (const struct shm_trust_ent *)shm_trust_hdr(shm)->entries;
	for (uint32_t i = 0; i < SHM_TRUST_SETS * SHM_TRUST_WAYS; i++) {
		uint64_t k = CMM_LOAD_SHARED(e[i].key);
		uint64_t st = CMM_LOAD_SHARED(e[i].state);

		if (k != 0 && st_tag(st) == k >> 48 && st_live(st, now_s, window_s))
			n++;
	}
	return n;
}
