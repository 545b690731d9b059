/* Relay port pool: bookings of relay ports by records and reservations
 * (shm/shm_ppool.h). */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include <urcu/arch.h>

#include "shm/shm_internal.h"

#define OWNER_MASK 0xffffffffu

static uint64_t *pool_ways(const struct shm *shm, uint16_t port)
{
	return shm_ppool_words(shm) + (uint64_t)port * SHM_PPOOL_WAYS;
}

static uint64_t word_of(uint32_t tag, uint32_t owner)
{
	return (uint64_t)tag << 32 | owner;
}

uint32_t shm_ppool_tag(const struct shm_addr *relay)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	unsigned n = relay->family == AF_INET ? 4 : 16;

	h = (h ^ relay->family) * UINT64_C(0x100000001b3);
	for (unsigned i = 0; i < n; i++)
		h = (h ^ relay->addr[i]) * UINT64_C(0x100000001b3);
	h ^= h >> 32;
	return (uint32_t)h != 0 ? (uint32_t)h : 1u;
}

/* Relaxed: whether the owner of word w still holds `port` (see shm/shm_ppool.h). */
static bool owner_holds(const struct shm *shm, uint64_t w, uint16_t port, uint64_t now_ns)
{
	uint32_t owner = (uint32_t)(w & OWNER_MASK);

	if (w == 0)
		return false;
	if (owner & SHM_PPOOL_RESV_BIT) {
		uint32_t e = (owner & ~SHM_PPOOL_RESV_BIT) - 1;
		const struct shm_ppool_ent *r;
		uint64_t exp;

		if (e >= SHM_PPOOL_RESV)
			return false;
		r = shm_ppool_ents(shm) + e;
		exp = CMM_LOAD_SHARED(r->expires_ns);
		/* Its port comes back at the expiry; the entry itself is reused only after
		 * the grace (shm_ppool_reserve). */
		return exp != 0 && now_ns < exp &&
		       CMM_LOAD_SHARED(r->port) == port &&
		       CMM_LOAD_SHARED(r->tag) == (uint32_t)(w >> 32);
	}
	if (owner == 0 || owner - 1 >= shm->cfg.alloc_cap)
		return false;
	{
		const struct shm_alloc *a = shm_alloc_at(shm, owner - 1);
		enum shm_alloc_state st = SHM_ALLOC_WORD_STATE(CMM_LOAD_SHARED(a->state));

		if (st == SHM_ALLOC_CLAIMED)
			return true;	/* being filled in: its ports are not written yet */
		if (st != SHM_ALLOC_LIVE && st != SHM_ALLOC_DYING)
			return false;
		return CMM_LOAD_SHARED(a->relay.port) == port ||
		       CMM_LOAD_SHARED(a->relay2.port) == port;
	}
}

/* Room for tag on port: no way holds a booking of tag and one way is empty. A way counts as
 * held while its owner holds the port (check_owner: reads the owner's record or reservation)
 * or, without check_owner, while it is not zero (the pool's words alone). */
static bool pool_room(const struct shm *shm, uint32_t tag, uint16_t port, uint64_t now_ns,
		      bool check_owner)
{
	const uint64_t *w;
	bool room = false;

	shm_check_handle(shm);
	w = pool_ways(shm, port);
	for (unsigned i = 0; i < SHM_PPOOL_WAYS; i++) {
		uint64_t v = CMM_LOAD_SHARED(w[i]);
		bool held = check_owner ? owner_holds(shm, v, port, now_ns) : v != 0;

		if (held && (uint32_t)(v >> 32) == tag)
			return false;
		room |= !held;
	}
	return room;
}

bool shm_ppool_is_free(const struct shm *shm, uint32_t tag, uint16_t port, uint64_t now_ns)
{
	return pool_room(shm, tag, port, now_ns, true);
}

bool shm_ppool_unbooked(const struct shm *shm, uint32_t tag, uint16_t port)
{
	return pool_room(shm, tag, port, 0, false);
}

/* Books `port` on tag for owner (a record or reservation word's low half). */
static int pool_take(struct shm *shm, uint32_t tag, uint16_t port, uint32_t owner,
		     uint64_t now_ns)
{
	uint64_t *w = pool_ways(shm, port), want = word_of(tag, owner);

	for (unsigned i = 0; i < SHM_PPOOL_WAYS; i++) {
		uint64_t v = CMM_LOAD_SHARED(w[i]);

		if (v == want)
			return 0;
		if ((uint32_t)(v >> 32) == tag && owner_holds(shm, v, port, now_ns))
			return -EADDRINUSE;
	}
	for (unsigned i = 0; i < SHM_PPOOL_WAYS; i++) {
		uint64_t v = CMM_LOAD_SHARED(w[i]);

		/* An empty way, or one whose owner let go without a word (a dead worker's
		 * released record, an expired reservation). */
		if (v != 0 && owner_holds(shm, v, port, now_ns))
			continue;
		if (uatomic_cmpxchg(&w[i], v, want) != v)
			continue;
		/* Two owners of one tag may have won two ways at once: both step back. */
		for (unsigned j = 0; j < SHM_PPOOL_WAYS; j++) {
			uint64_t o = CMM_LOAD_SHARED(w[j]);

			if (j != i && (uint32_t)(o >> 32) == tag && o != want &&
			    owner_holds(shm, o, port, now_ns)) {
				(void)uatomic_cmpxchg(&w[i], want, 0);
				return -EADDRINUSE;
			}
		}
		return 0;
	}
	return -ENOSPC;
}

static void pool_put(struct shm *shm, uint16_t port, uint64_t want)
{
	uint64_t *w = pool_ways(shm, port);

	for (unsigned i = 0; i < SHM_PPOOL_WAYS; i++)
		if (CMM_LOAD_SHARED(w[i]) == want)
			(void)uatomic_cmpxchg(&w[i], want, 0);
}

int shm_ppool_take(struct shm *shm, uint32_t tag, uint16_t port, uint32_t idx, uint64_t now_ns)
{
	shm_check_handle(shm);
	if (shm->ro)
		return -EROFS;
	if (idx >= shm->cfg.alloc_cap || tag == 0 || port == 0)
		return -EINVAL;
	return pool_take(shm, tag, port, idx + 1, now_ns);
}

void shm_ppool_put(struct shm *shm, uint32_t tag, uint16_t port, uint32_t idx)
{
	shm_check_handle(shm);
	if (shm->ro || idx >= shm->cfg.alloc_cap || tag == 0)
		return;
	pool_put(shm, port, word_of(tag, idx + 1));
}

int shm_ppool_reserve(struct shm *shm, const struct shm_ppool_resv *r, uint64_t now_ns)
{
	struct shm_ppool_ent *ents;
	uint32_t start;

	shm_check_handle(shm);
	if (shm->ro)
		return -EROFS;
	if (r->token == 0 || r->tag == 0 || r->port == 0 || r->expires_ns == 0)
		return -EINVAL;
	ents = shm_ppool_ents(shm);
	start = (uint32_t)(r->token % SHM_PPOOL_RESV);
	for (uint32_t n = 0; n < SHM_PPOOL_RESV; n++) {
		uint32_t e = (start + n) % SHM_PPOOL_RESV;
		struct shm_ppool_ent *p = ents + e;
		uint64_t exp = CMM_LOAD_SHARED(p->expires_ns);
		int rc;

		if (exp != 0 && now_ns < exp + SHM_PPOOL_GRACE_NS)
			continue;
		if (uatomic_cmpxchg(&p->expires_ns, exp, r->expires_ns) != exp)
			continue;
		/* The expired reservation's booking goes with it (a redeemed one's word is
		 * the record's now, and only this entry's own word is cleared): left, it
		 * would outlive its owner and the search would take the port last. */
		if (exp != 0)
			pool_put(shm, CMM_LOAD_SHARED(p->port),
				 word_of(CMM_LOAD_SHARED(p->tag), SHM_PPOOL_RESV_BIT | (e + 1)));
		/* Ours until expiry: fields first, the token (what makes it redeemable)
		 * last. */
		CMM_STORE_SHARED(p->token, 0);
		CMM_STORE_SHARED(p->lkey, r->lkey);
		CMM_STORE_SHARED(p->tag, r->tag);
		CMM_STORE_SHARED(p->port, r->port);
		CMM_STORE_SHARED(p->family, r->family);
		cmm_smp_wmb();
		rc = pool_take(shm, r->tag, r->port, SHM_PPOOL_RESV_BIT | (e + 1), now_ns);
		if (rc < 0) {
			uatomic_set(&p->expires_ns, 0);
			return rc;
		}
		uatomic_set(&p->token, r->token);
		return 0;
	}
	return -ENOSPC;
}

int shm_ppool_redeem(struct shm *shm, uint64_t token, uint32_t idx, uint64_t now_ns,
		     struct shm_ppool_resv *out)
{
	struct shm_ppool_ent *ents;
	uint32_t start;

	shm_check_handle(shm);
	if (shm->ro)
		return -EROFS;
	if (token == 0 || idx >= shm->cfg.alloc_cap)
		return -ENOENT;
	ents = shm_ppool_ents(shm);
	start = (uint32_t)(token % SHM_PPOOL_RESV);
	for (uint32_t n = 0; n < SHM_PPOOL_RESV; n++) {
		uint32_t e = (start + n) % SHM_PPOOL_RESV;
		struct shm_ppool_ent *p = ents + e;
		uint64_t exp, *w;
		uint64_t from, to;

		if (CMM_LOAD_SHARED(p->token) != token)
			continue;
		cmm_smp_rmb();	/* the token before the fields it publishes */
		exp = CMM_LOAD_SHARED(p->expires_ns);
		out->token = token;
		out->lkey = CMM_LOAD_SHARED(p->lkey);
		out->tag = CMM_LOAD_SHARED(p->tag);
		out->port = CMM_LOAD_SHARED(p->port);
		out->family = CMM_LOAD_SHARED(p->family);
		out->expires_ns = exp;
		if (exp == 0 || now_ns >= exp)
			return -ENOENT;	/* expired: its port comes back by itself */
		if (uatomic_cmpxchg(&p->token, token, 0) != token)
			return -ENOENT;	/* spent by another worker just now */
		if (CMM_LOAD_SHARED(p->expires_ns) != exp)
			return -ENOENT;	/* reused meanwhile (a redeemer stalled for seconds) */
		/* The booking passes to the record, then the entry is free. */
		from = word_of(out->tag, SHM_PPOOL_RESV_BIT | (e + 1));
		to = word_of(out->tag, idx + 1);
		w = pool_ways(shm, out->port);
		for (unsigned i = 0; i < SHM_PPOOL_WAYS; i++)
			if (uatomic_cmpxchg(&w[i], from, to) == from) {
				from = 0;
				break;
			}
		uatomic_set(&p->expires_ns, 0);
		if (from != 0 && pool_take(shm, out->tag, out->port, idx + 1, now_ns) < 0)
			return -ENOENT;
		return 0;
	}
	return -ENOENT;
}

unsigned shm_ppool_book_record(struct shm *shm, uint32_t idx, uint64_t now_ns)
{
	const struct shm_alloc *a;
	struct shm_addr rel[2];
	unsigned n = 0;

	shm_check_handle(shm);
	if (shm->ro || idx >= shm->cfg.alloc_cap)
		return 0;
	a = shm_alloc_at(shm, idx);
	rel[0] = a->relay;
	rel[1] = a->relay2;
	for (int i = 0; i < 2; i++)
		if (rel[i].family != 0 && rel[i].port != 0 &&
		    pool_take(shm, shm_ppool_tag(&rel[i]), rel[i].port, idx + 1, now_ns) == 0)
			n++;
	return n;
}

unsigned shm_ppool_held(const struct shm *shm, uint64_t now_ns, unsigned *n_resv)
{
	const uint64_t *w;
	unsigned n = 0, r = 0;

	shm_check_handle(shm);
	w = shm_ppool_words(shm);
	for (uint32_t port = 0; port < SHM_RELAY_PORTS; port++)
		for (unsigned i = 0; i < SHM_PPOOL_WAYS; i++) {
			uint64_t v = CMM_LOAD_SHARED(w[port * SHM_PPOOL_WAYS + i]);

			if (v == 0 || !owner_holds(shm, v, (uint16_t)port, now_ns))
				continue;
			if (v & SHM_PPOOL_RESV_BIT)
				r++;
			else
				n++;
		}
	if (n_resv)
		*n_resv = r;
	return n;
}

void shm_ppool_resv_clear(struct shm *shm)
{
	shm_check_handle(shm);
	if (shm->ro)
		return;
	for (uint32_t e = 0; e < SHM_PPOOL_RESV; e++) {
		uatomic_set(&shm_ppool_ents(shm)[e].token, 0);
		uatomic_set(&shm_ppool_ents(shm)[e].expires_ns, 0);
	}
}
