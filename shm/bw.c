/* Bandwidth buckets of the shared segment: per allocation, per user and per listener,
 * one CAS-updated word per bucket and direction (contract in shm/shm_bw.h). */
#include "config.h"

#include <errno.h>

#include "shm/shm_internal.h"

#define BW_NS_PER_S UINT64_C(1000000000)

/* Nanoseconds a datagram of bytes costs at bps (at least 1, so that any traffic moves a
 * bucket). bytes < 2^17 and 8e9 < 2^33: the product stays below 2^50. */
static uint64_t bw_cost(size_t bytes, uint64_t bps)
{
	uint64_t c = (uint64_t)bytes * 8 * BW_NS_PER_S / bps;

	return c ? c : 1;
}

/* Charges cost to *tat unless the bucket would then be more than burst ahead of now (a
 * bucket not ahead at all takes any one datagram). Returns true when charged. */
static bool bw_take(uint64_t *tat, uint64_t now, uint64_t cost, uint64_t burst)
{
	for (;;) {
		uint64_t t = CMM_LOAD_SHARED(*tat), base = t > now ? t : now;

		if (base > now && base + cost - now > burst)
			return false;
		if (uatomic_cmpxchg(tat, t, base + cost) == t)
			return true;
	}
}

/* Gives back a charge of cost (a later bucket refused the datagram). */
static void bw_refund(uint64_t *tat, uint64_t cost)
{
	uatomic_add(tat, -cost);
}

/* The bucket word of key in direction dir, or NULL when key has no count entry. */
static uint64_t *bw_key_tat(struct shm *shm, uint64_t key, enum shm_bw_dir dir)
{
	uint64_t *e = key ? shm_quota_entry_of(shm, key) : NULL;

	if (e == NULL)
		return NULL;
	return &shm_bw_key_words(shm)[(uint64_t)(e - shm_quota_hdr(shm)->entries) * SHM_BW_DIRS +
				      dir];
}

void shm_bw_key_reset(struct shm *shm, const uint64_t *e)
{
	uint64_t *w = &shm_bw_key_words(shm)[(uint64_t)(e - shm_quota_hdr(shm)->entries) *
					     SHM_BW_DIRS];

	for (unsigned d = 0; d < SHM_BW_DIRS; d++)
		CMM_STORE_SHARED(w[d], 0);
}

struct bw_bucket {
	uint64_t *tat, bps;		/* tat NULL: a key without a count entry, not limited */
	enum shm_bw_verdict verdict;
};

enum shm_bw_verdict shm_bw_admit(struct shm *shm, const struct shm_bw_who *who,
				 enum shm_bw_dir dir, size_t bytes, uint64_t now_ns,
				 const struct shm_bw_limits *lim)
{
	struct bw_bucket b[3];
	uint64_t cost[3];
	unsigned n = 0, i;
	struct shm_bw_rec *rec;

	shm_check_handle(shm);
	if (shm->ro || (unsigned)dir >= SHM_BW_DIRS || who->alloc_idx >= shm->cfg.alloc_cap)
		return SHM_BW_PASS;
	rec = &shm_bw_recs(shm)[who->alloc_idx];
	if (lim->alloc_bps)
		b[n++] = (struct bw_bucket){ &rec->tat[dir], lim->alloc_bps, SHM_BW_ALLOC };
	if (lim->user_bps)
		b[n++] = (struct bw_bucket){ bw_key_tat(shm, who->user_key, dir), lim->user_bps,
					 SHM_BW_USER };
	if (lim->listener_bps)
		b[n++] = (struct bw_bucket){ bw_key_tat(shm, who->listener_key, dir),
					 lim->listener_bps, SHM_BW_LISTENER };
	for (i = 0; i < n; i++) {
		cost[i] = bw_cost(bytes, b[i].bps);
		if (b[i].tat && !bw_take(b[i].tat, now_ns, cost[i], lim->burst_ns))
			break;
	}
	if (i == n)
		return SHM_BW_PASS;
	for (unsigned j = 0; j < i; j++)
		if (b[j].tat)
			bw_refund(b[j].tat, cost[j]);
	uatomic_inc(&rec->drops[dir]);
	CMM_STORE_SHARED(rec->last[dir], (uint32_t)b[i].verdict);
	if (who->listener_idx < SHM_MAX_LISTENERS)
		uatomic_inc(&shm_quota_hdr(shm)->listener_drops[who->listener_idx]);
	return b[i].verdict;
}

void shm_bw_alloc_reset(struct shm *shm, uint32_t idx)
{
	shm_check_handle(shm);
	if (shm->ro || idx >= shm->cfg.alloc_cap)
		return;
	for (unsigned d = 0; d < SHM_BW_DIRS; d++) {
		CMM_STORE_SHARED(shm_bw_recs(shm)[idx].tat[d], 0);
		CMM_STORE_SHARED(shm_bw_recs(shm)[idx].drops[d], 0);
		CMM_STORE_SHARED(shm_bw_recs(shm)[idx].last[d], SHM_BW_PASS);
	}
	CMM_STORE_SHARED(shm_bw_recs(shm)[idx].tcp_conns, 0);
}

void shm_bw_alloc_tcp_conns(struct shm *shm, uint32_t idx, uint32_t n)
{
	shm_check_handle(shm);
	if (!shm->ro && idx < shm->cfg.alloc_cap)
		CMM_STORE_SHARED(shm_bw_recs(shm)[idx].tcp_conns, n);
}

int shm_bw_alloc_stat(const struct shm *shm, uint32_t idx, struct shm_bw_stat *out)
{
	const struct shm_bw_rec *b;

	shm_check_handle(shm);
	if (idx >= shm->cfg.alloc_cap)
		return -EINVAL;
	b = &shm_bw_recs(shm)[idx];
	for (unsigned d = 0; d < SHM_BW_DIRS; d++) {
		uint32_t v = CMM_LOAD_SHARED(b->last[d]);

		out->drops[d] = CMM_LOAD_SHARED(b->drops[d]);
		out->last[d] = v <= SHM_BW_LISTENER ? (enum shm_bw_verdict)v : SHM_BW_PASS;
	}
	out->tcp_conns = CMM_LOAD_SHARED(b->tcp_conns);
	return 0;
}

uint64_t shm_bw_listener_drops(const struct shm *shm, unsigned i)
{
	shm_check_handle(shm);
	if (i >= SHM_MAX_LISTENERS)
		return 0;
	return CMM_LOAD_SHARED(shm_quota_hdr(shm)->listener_drops[i]);
}
