/* Listener slots: the master's table of stable per-listener numbers (shm/shm_lslot.h). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "shm/shm_internal.h"

static uint64_t name_key(const char *name, size_t len)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	for (size_t i = 0; i < len; i++) {
		h ^= (uint8_t)name[i];
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

void shm_lslot_init(struct shm_lslot_hdr *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = SHM_LSLOT_MAGIC;
	h->version = SHM_LSLOT_VERSION;
	h->n = SHM_MAX_LISTENERS;
}

int shm_lslot_validate(const struct shm_lslot_hdr *h)
{
	if (h->magic != SHM_LSLOT_MAGIC || h->version != SHM_LSLOT_VERSION ||
	    h->n != SHM_MAX_LISTENERS)
		return -EBADMSG;
	for (unsigned i = 0; i < SHM_MAX_LISTENERS; i++) {
		const struct shm_lslot_ent *e = &h->ent[i];

		if (e->state > SHM_LSLOT_RETIRED ||
		    memchr(e->name, '\0', sizeof(e->name)) == NULL ||
		    (e->state != SHM_LSLOT_FREE && e->name_len == 0))
			return -EBADMSG;
	}
	return 0;
}

static bool ent_is(const struct shm_lslot_ent *e, const char *name, size_t len, uint64_t key)
{
	size_t kept = len < SHM_LSLOT_NAME_MAX - 1 ? len : SHM_LSLOT_NAME_MAX - 1;

	return e->state != SHM_LSLOT_FREE && e->key == key && e->name_len == len &&
	       memcmp(e->name, name, kept) == 0;
}

/* The slots that records still name (any state but free: a record being filled in or
 * cleared may still count on its slot), one bit each. One pass over the table, only
 * when a publish has slots to retire or free (each record sits on its own page). */
static uint64_t slots_busy(const struct shm *shm)
{
	uint64_t busy = 0;

	for (uint32_t i = 0; i < shm->cfg.alloc_cap; i++) {
		const struct shm_alloc *r = shm_alloc_at(shm, i);
		uint16_t slot = CMM_LOAD_SHARED(r->listener_idx);

		if (SHM_ALLOC_WORD_STATE(CMM_LOAD_SHARED(r->state)) != SHM_ALLOC_FREE &&
		    slot < SHM_MAX_LISTENERS)
			busy |= UINT64_C(1) << slot;
	}
	return busy;
}

/* A slot about to serve another name starts from zero: every worker slot's counters
 * (nothing writes them: no listener and no record has the slot) and its bandwidth drops. */
static void slot_zero(struct shm *shm, uint32_t slot)
{
	for (unsigned w = 0; w < shm->cfg.n_slots; w++) {
		struct shm_counters *c = &shm_slot_at(shm, w)->ctr;

		for (unsigned k = 0; k < SHM_LCTR__COUNT; k++)
			CMM_STORE_SHARED(c->lst[slot][k], 0);
	}
	CMM_STORE_SHARED(shm_quota_hdr(shm)->listener_drops[slot], 0);
}

static int find(const struct shm_lslot_hdr *h, const char *name, size_t len, uint64_t key)
{
	for (unsigned i = 0; i < SHM_MAX_LISTENERS; i++)
		if (ent_is(&h->ent[i], name, len, key))
			return (int)i;
	return -1;
}

int shm_lslot_assign(struct shm *shm, const char *const *names, size_t n, uint16_t *out,
		     uint64_t *freed)
{
	struct shm_lslot_hdr *h;
	bool keep[SHM_MAX_LISTENERS] = { false }, scanned = false;
	uint64_t busy = 0;

	shm_check_handle(shm);
	if (shm->ro || (n > 0 && (names == NULL || out == NULL)))
		return -EINVAL;
	h = shm_lslot_hdr(shm);
	if (freed != NULL)
		*freed = 0;
	for (size_t i = 0; i < n; i++) {
		int s = find(h, names[i], strlen(names[i]), name_key(names[i], strlen(names[i])));

		if (s >= 0)
			keep[s] = true;
	}
	for (unsigned i = 0; i < SHM_MAX_LISTENERS; i++) {
		struct shm_lslot_ent *e = &h->ent[i];

		if (keep[i] || e->state == SHM_LSLOT_FREE)
			continue;
		/* Removed now: retired, even with no record, for a worker still on the
		 * previous snapshot may make one on it yet; freed at a later publish. */
		if (e->state == SHM_LSLOT_USED) {
			e->state = SHM_LSLOT_RETIRED;
			continue;
		}
		if (!scanned) {
			busy = slots_busy(shm);
			scanned = true;
		}
		if (busy & (UINT64_C(1) << i)) {
			e->state = SHM_LSLOT_RETIRED;
		} else {
			memset(e, 0, sizeof(*e));
			slot_zero(shm, i);
			if (freed != NULL)
				*freed |= UINT64_C(1) << i;
		}
	}
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(names[i]);
		uint64_t key = name_key(names[i], len);
		int s = find(h, names[i], len, key);

		for (unsigned j = 0; s < 0 && j < SHM_MAX_LISTENERS; j++)
			if (h->ent[j].state == SHM_LSLOT_FREE)
				s = (int)j;
		if (s < 0) {
			out[i] = SHM_LSLOT_NONE;
			continue;
		}
		h->ent[s].state = SHM_LSLOT_USED;
		h->ent[s].key = key;
		h->ent[s].name_len = (uint32_t)len;
		memset(h->ent[s].name, 0, sizeof(h->ent[s].name));
		memcpy(h->ent[s].name, names[i], len < SHM_LSLOT_NAME_MAX - 1 ? len
									 : SHM_LSLOT_NAME_MAX - 1);
		out[i] = (uint16_t)s;
	}
	return 0;
}

int shm_lslot_find(const struct shm *shm, const char *name, uint32_t *slot)
{
	int s;

	shm_check_handle(shm);
	if (name == NULL || slot == NULL)
		return -EINVAL;
	s = find(shm_lslot_hdr(shm), name, strlen(name), name_key(name, strlen(name)));
	if (s < 0 || shm_lslot_hdr(shm)->ent[s].state != SHM_LSLOT_USED)
		return -ENOENT;
	*slot = (uint32_t)s;
	return 0;
}

int shm_lslot_name(const struct shm *shm, uint32_t slot, char *buf, size_t cap,
		   enum shm_lslot_state *state)
{
	const struct shm_lslot_ent *e;

	shm_check_handle(shm);
	if (slot >= SHM_MAX_LISTENERS || buf == NULL || cap == 0)
		return -EINVAL;
	e = &shm_lslot_hdr(shm)->ent[slot];
	if (e->state == SHM_LSLOT_FREE)
		return -ENOENT;
	snprintf(buf, cap, "%s", e->name);
	if (state != NULL)
		*state = (enum shm_lslot_state)e->state;
	return 0;
}
