/* Failed-authentication table of the shared segment: GCRA cells per prefix or username,
 * CAS-updated by every worker (contract and layout in shm/shm_authfail.h). */
#include "config.h"

#include "shm/shm_internal.h"

#define AUTHFAIL_TRIES 4u   /* races lost before a charge gives up */

static_assert((SHM_AUTHFAIL_SETS & (SHM_AUTHFAIL_SETS - 1)) == 0, "sets: a power of two");
static_assert(sizeof(struct shm_trust_ent) == 16, "the table reuses the trust entry");

static inline uint64_t af_key(uint64_t h)
{
	return h ? h : 1;   /* 0 is "empty" */
}

static inline uint64_t af_make(uint64_t key, uint64_t tat)
{
	return (key >> 48) << 48 | (tat & SHM_AUTHFAIL_TAT_MAX);
}

/* The tat of a state for key: 0 when the state belongs to another key. */
static inline uint64_t af_tat_for(uint64_t st, uint64_t key)
{
	return st >> 48 == key >> 48 ? st & SHM_AUTHFAIL_TAT_MAX : 0;
}

static struct shm_trust_ent *af_set(const struct shm *shm, uint64_t key)
{
	struct shm_trust_ent *e = (struct shm_trust_ent *)(shm_trust_hdr(shm)->entries +
							  shm_trust_entries_bytes());

	return e + (key & (SHM_AUTHFAIL_SETS - 1)) * SHM_AUTHFAIL_WAYS;
}

static struct shm_trust_ent *af_find(const struct shm *shm, uint64_t key)
{
	struct shm_trust_ent *set = af_set(shm, key);

	for (unsigned i = 0; i < SHM_AUTHFAIL_WAYS; i++)
		if (CMM_LOAD_SHARED(set[i].key) == key)
			return &set[i];
	return NULL;
}

/* The way a new key takes: an empty one, else the one forgiven first. */
static struct shm_trust_ent *af_victim(const struct shm *shm, uint64_t key)
{
	struct shm_trust_ent *set = af_set(shm, key), *best = &set[0];
	uint64_t best_tat = UINT64_MAX;

	for (unsigned i = 0; i < SHM_AUTHFAIL_WAYS; i++) {
		uint64_t k = CMM_LOAD_SHARED(set[i].key);
		uint64_t t = af_tat_for(CMM_LOAD_SHARED(set[i].state), k);

		if (k == 0)
			return &set[i];
		if (t < best_tat) {
			best_tat = t;
			best = &set[i];
		}
	}
	return best;
}

static uint64_t af_next(uint64_t tat, uint64_t now_ms, uint64_t add_ms, uint64_t floor_ms,
			uint64_t cap_ms)
{
	uint64_t t = (tat > now_ms ? tat : now_ms) + add_ms;

	if (t < floor_ms)
		t = floor_ms;
	if (t > cap_ms)
		t = cap_ms;
	if (t > SHM_AUTHFAIL_TAT_MAX)
		t = SHM_AUTHFAIL_TAT_MAX;
	return t ? t : 1;
}

/* Charges key in e. 0 when e was taken over by another key meanwhile. */
static uint64_t af_update(struct shm_trust_ent *e, uint64_t key, uint64_t now_ms,
			  uint64_t add_ms, uint64_t floor_ms, uint64_t cap_ms)
{
	for (;;) {
		uint64_t st = CMM_LOAD_SHARED(e->state);
		uint64_t t = af_next(af_tat_for(st, key), now_ms, add_ms, floor_ms, cap_ms);

		if (CMM_LOAD_SHARED(e->key) != key)
			return 0;
		if (uatomic_cmpxchg(&e->state, st, af_make(key, t)) == st)
			return t;
	}
}

uint64_t shm_authfail_tat(const struct shm *shm, uint64_t h)
{
	uint64_t key = af_key(h);
	const struct shm_trust_ent *e;

	shm_check_handle(shm);
	e = af_find(shm, key);
	return e ? af_tat_for(CMM_LOAD_SHARED(e->state), key) : 0;
}

uint64_t shm_authfail_charge(struct shm *shm, uint64_t h, uint64_t now_ms, uint64_t add_ms,
			     uint64_t floor_ms, uint64_t cap_ms)
{
	uint64_t key = af_key(h);

	shm_check_handle(shm);
	if (shm->ro)
		return 0;
	for (unsigned t = 0; t < AUTHFAIL_TRIES; t++) {
		struct shm_trust_ent *e = af_find(shm, key);
		uint64_t old, ost, r;

		if (e == NULL) {
			e = af_victim(shm, key);
			ost = CMM_LOAD_SHARED(e->state);
			old = CMM_LOAD_SHARED(e->key);
			if (uatomic_cmpxchg(&e->key, old, key) != old)
				continue;
			/* The old key's failures are never inherited: until this store lands
			 * the way reads as none for key (its tag is the old key's). */
			r = af_next(0, now_ms, add_ms, floor_ms, cap_ms);
			if (uatomic_cmpxchg(&e->state, ost, af_make(key, r)) == ost)
				return r;
		}
		r = af_update(e, key, now_ms, add_ms, floor_ms, cap_ms);
		if (r != 0)
			return r;
	}
	return 0;
}

uint32_t shm_authfail_count(const struct shm *shm, uint64_t now_ms, uint64_t window_ms)
{
	const struct shm_trust_ent *e;
	uint32_t n = 0;

	shm_check_handle(shm);
	e = af_set(shm, 0);
	for (uint32_t i = 0; i < SHM_AUTHFAIL_SETS * SHM_AUTHFAIL_WAYS; i++) {
		uint64_t k = CMM_LOAD_SHARED(e[i].key);

		if (k != 0 && af_tat_for(CMM_LOAD_SHARED(e[i].state), k) > now_ms + window_ms)
			n++;
	}
	return n;
}
