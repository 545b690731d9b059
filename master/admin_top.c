/* Master: the ranking behind `turngatectl top` (admin `top` with "rows"): the heaviest
 * allocations and users by relayed bytes since the previous ranked sample.
 *
 * Why here and not in the tool: the tool used to take every allocation's counters twice
 * and rank them itself, a reply that grows with the table (a third of a second and 2 MB
 * at 10,000 allocations, tens of MB at 250,000). The master keeps one baseline of every
 * record's counters instead (64 bytes a record, allocated at the first ranked sample) and
 * answers with `rows` of each: the reply's size no longer depends on the table's.
 *
 * One baseline for every caller: each ranked sample is measured against the previous
 * one, whoever took it, and replaces it. Two `top` sessions at once therefore each show
 * the rates over the time since the other's last sample (the reply says over how long).
 * A record is matched to its baseline by index and generation; a new allocation counts
 * from zero. */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/mono.h"
#include "master/admin.h"
#include "master/master.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_bw.h"
#include "shm/shm_quota.h"
#include "shm/shm_relay.h"

struct top_base {
	uint64_t gen;                  /* 0: no baseline for the record */
	uint64_t ukey;                 /* its user's key (read once per generation) */
	uint64_t bytes[2], pkts[2];    /* to the peer, from the peer */
	uint64_t drops[2];
};

struct top_user {
	uint64_t key;                  /* 0: empty slot */
	struct admin_top_pick p;
};

/* master/admin.h and docs/operations.md give the kept users table's size from it. */
static_assert(sizeof(struct top_user) == 72, "a users slot is 72 bytes");

/* The users of one sample, by key (open addressing). Sized by the users seen, not by
 * the table: sized by the table (2 slots a live record), its 37 MB at 250,000 allocations
 * were a cache miss per record and a walk of every slot, about half of the ranking's time
 * (bench/topscan). Empty between samples, and kept from one to the next only while it has
 * at most TOP_USERS_KEEP slots (see top_users_drain). */
struct top_users {
	struct top_user *slot;
	size_t mask;                   /* slots - 1, a power of two minus one; 0: none yet */
	unsigned n;
	bool nomem;                    /* a grow failed in this sample: no more tries */
	size_t first;                  /* slots of the first grow when there are none:
					* what the previous sample's users needed */
};

#define TOP_USERS_MIN 64u
/* The most slots kept between samples: 524,288 of 72 bytes, 37.7 MB (admin.h), enough
 * for the 262,140 users of the default table's largest capacity. A sample with more than
 * 262,144 users grows a larger table and gives it back at its end. */
#define TOP_USERS_KEEP 524288u

struct admin_top {
	struct top_base *base;
	uint32_t cap;
	uint64_t mono;                 /* of the baseline; 0 before the first sample */
	struct top_users users;
};

void admin_top_free(struct admin_top *t)
{
	if (t == NULL)
		return;
	free(t->base);
	free(t->users.slot);
	free(t);
}

static uint64_t top_user_key(const struct shm_alloc_stat *s)
{
	size_t off = shm_quota_user_off(s->username, s->user_len);
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	for (size_t i = off; i < s->user_len; i++)
		h = (h ^ (uint8_t)s->username[i]) * UINT64_C(0x100000001b3);
	return h != 0 ? h : 1;
}

/* a ranks before b: more bytes, then more packets. */
static bool top_before(const struct admin_top_pick *a, const struct admin_top_pick *b)
{
	uint64_t ab = a->bytes[0] + a->bytes[1], bb = b->bytes[0] + b->bytes[1];

	if (ab != bb)
		return ab > bb;
	return a->pkts[0] + a->pkts[1] > b->pkts[0] + b->pkts[1];
}

/* Keeps the best `rows` of what it is offered in picks[0..*n), best first. */
static void top_offer(struct admin_top_pick *picks, size_t *n, size_t rows,
		      const struct admin_top_pick *p)
{
	size_t i;

	if (rows == 0 || (*n == rows && !top_before(p, &picks[rows - 1])))
		return;
	i = *n < rows ? (*n)++ : rows - 1;
	while (i > 0 && top_before(p, &picks[i - 1])) {
		picks[i] = picks[i - 1];
		i--;
	}
	picks[i] = *p;
}

static int top_prepare(struct master *m, struct admin_top **tp)
{
	uint32_t cap = shm_alloc_capacity(m->shm);
	struct admin_top *t = m->top;

	if (t != NULL && t->cap == cap) {
		*tp = t;
		return 0;
	}
	admin_top_free(t);
	m->top = NULL;
	t = calloc(1, sizeof(*t));
	if (t == NULL || (t->base = calloc(cap ? cap : 1, sizeof(*t->base))) == NULL) {
		free(t);
		return -ENOMEM;
	}
	t->cap = cap;
	t->users.first = TOP_USERS_MIN;
	m->top = *tp = t;
	return 0;
}

/* The record's counters now and what changed since its baseline (which it replaces). */
static void top_measure(struct master *m, struct top_base *b, uint32_t idx,
			const struct shm_alloc_stat *s, struct admin_top_pick *p)
{
	struct shm_bw_stat bw = { 0 };
	struct top_base now = { .gen = s->gen,
				.ukey = b->gen == s->gen ? b->ukey : top_user_key(s) };
	uint64_t rp = 0, rb = 0;

	shm_relay_ctr_get(m->shm, idx, &rp, &rb);
	(void)shm_bw_alloc_stat(m->shm, idx, &bw);
	now.bytes[0] = s->ctr[SHM_ACTR_BYTES_TO_PEER];
	now.pkts[0] = s->ctr[SHM_ACTR_PKTS_TO_PEER];
	now.bytes[1] = s->ctr[SHM_ACTR_BYTES_FROM_PEER] + rb;
	now.pkts[1] = s->ctr[SHM_ACTR_PKTS_FROM_PEER] + rp;
	now.drops[0] = bw.drops[SHM_BW_TO_PEER];
	now.drops[1] = bw.drops[SHM_BW_TO_CLIENT];
	if (b->gen != s->gen)
		memset(b, 0, sizeof(*b));
	memset(p, 0, sizeof(*p));
	p->idx = idx;
	p->gen = s->gen;
	p->n = 1;
	for (int d = 0; d < 2; d++) {
		p->bytes[d] = now.bytes[d] > b->bytes[d] ? now.bytes[d] - b->bytes[d] : 0;
		p->pkts[d] = now.pkts[d] > b->pkts[d] ? now.pkts[d] - b->pkts[d] : 0;
		p->limited[d] = now.drops[d] > b->drops[d] ? (int)bw.last[d == 0 ? SHM_BW_TO_PEER
										  : SHM_BW_TO_CLIENT]
							   : 0;
	}
	*b = now;
}

static struct top_user *top_users_find(struct top_user *slot, size_t mask, uint64_t key)
{
	size_t i = key & mask;

	while (slot[i].key != 0 && slot[i].key != key)
		i = (i + 1) & mask;
	return &slot[i];
}

/* Twice the slots (from none: u->first), every user moved over. 0 or -ENOMEM (the table
 * is unchanged). */
static int top_users_grow(struct top_users *u)
{
	size_t mask = u->mask != 0 ? u->mask * 2 + 1 : u->first - 1;
	struct top_user *slot = calloc(mask + 1, sizeof(*slot));

	if (slot == NULL)
		return -ENOMEM;
	for (size_t i = 0; u->mask != 0 && i <= u->mask; i++)
		if (u->slot[i].key != 0)
			*top_users_find(slot, mask, u->slot[i].key) = u->slot[i];
	free(u->slot);
	u->slot = slot;
	u->mask = mask;
	return 0;
}

/* Adds an allocation's pick to its user's sum; a new user in a table half full grows it
 * first. 0, or -ENOMEM when it could not grow (the pick is then not counted). After one
 * failed grow the sample's other new users are not counted either, without a try: the
 * sample fails anyway, and each try would be an allocation that is likely to fail. */
static int top_users_add(struct top_users *u, uint64_t key, const struct admin_top_pick *p)
{
	struct top_user *e = u->mask != 0 ? top_users_find(u->slot, u->mask, key) : NULL;

	if (e == NULL || (e->key == 0 && (size_t)(u->n + 1) * 2 > u->mask + 1)) {
		if (u->nomem || top_users_grow(u) < 0) {
			u->nomem = true;
			return -ENOMEM;
		}
		e = top_users_find(u->slot, u->mask, key);
	}
	if (e->key == 0) {
		e->key = key;
		e->p = *p;
		u->n++;
		return 0;
	}
	for (int d = 0; d < 2; d++) {
		e->p.bytes[d] += p->bytes[d];
		e->p.pkts[d] += p->pkts[d];
		if (p->limited[d] != 0)
			e->p.limited[d] = p->limited[d];
	}
	e->p.n++;
	return 0;
}

/* Offers every user to the ranking and empties the table for the next sample. The
 * table is freed when it has more than TOP_USERS_KEEP slots, or more than TOP_USERS_MIN
 * slots and more than 16 slots for each user of this sample; otherwise it is kept. A
 * freed table's successor starts at the size this sample's users needed (at least
 * TOP_USERS_MIN): one allocation instead of a chain of doublings, each rehashing every
 * user (at 250,000 users 75 MB allocated and 262,000 users moved per sample). */
static void top_users_drain(struct top_users *u, struct admin_top_result *out, size_t rows)
{
	for (size_t i = 0; u->mask != 0 && i <= u->mask; i++) {
		if (u->slot[i].key == 0)
			continue;
		top_offer(out->users, &out->n_users, rows, &u->slot[i].p);
		memset(&u->slot[i], 0, sizeof(u->slot[i]));
	}
	if (u->mask + 1 > TOP_USERS_KEEP ||
	    (u->mask + 1 > TOP_USERS_MIN && (size_t)u->n * 16 < u->mask + 1)) {
		free(u->slot);
		u->slot = NULL;
		u->mask = 0;
	}
	for (u->first = TOP_USERS_MIN; u->first < (size_t)u->n * 2; u->first *= 2)
		;
	u->n = 0;
	u->nomem = false;
}

int admin_top_rank(struct master *m, size_t rows, struct admin_top_result *out)
{
	struct admin_top *t;
	struct shm_alloc_stat s;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = top_prepare(m, &t);
	if (rc < 0)
		return rc;
	out->allocs = calloc(rows ? rows : 1, sizeof(*out->allocs));
	out->users = calloc(rows ? rows : 1, sizeof(*out->users));
	if (out->allocs == NULL || out->users == NULL) {
		admin_top_result_free(out);
		return -ENOMEM;
	}
	out->mono = mono_ns();
	out->interval = t->mono != 0 ? (double)(out->mono - t->mono) / 1e9 : 0.0;
	for (uint32_t idx = 0; idx < t->cap; idx++) {
		struct admin_top_pick p;

		shm_alloc_prefetch_ahead(m->shm, idx);
		if (shm_alloc_read_stat(m->shm, idx, t->base[idx].gen, &s) < 0) {
			t->base[idx].gen = 0;
			continue;
		}
		top_measure(m, &t->base[idx], idx, &s, &p);
		out->live++;
		top_offer(out->allocs, &out->n_allocs, rows, &p);
		/* On a failure the walk goes on: every baseline is still replaced, so the
		 * next sample measures from this one. */
		if (top_users_add(&t->users, t->base[idx].ukey, &p) < 0)
			rc = -ENOMEM;
	}
	explicit_bzero(&s, sizeof(s));
	t->mono = out->mono;
	out->n_users_seen = t->users.n;
	top_users_drain(&t->users, out, rows);
	if (rc < 0)
		admin_top_result_free(out);
	return rc;
}

void admin_top_result_free(struct admin_top_result *r)
{
	free(r->allocs);
	free(r->users);
	r->allocs = r->users = NULL;
}
