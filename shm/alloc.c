/* Allocation table: CAS-claimed single-owner records with per-record seqlocks. */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include <urcu/arch.h>

#include "common/mono.h"
#include "shm/shm_internal.h"

static_assert(sizeof(struct shm_alloc) == 2528, "update the record size in shm_alloc.h "
						"and docs/architecture.md");
static_assert(offsetof(struct shm_alloc, owner) == 16, "state/seq/gen header changed");

/* A few microseconds of retries: an owner's write bracket is a handful of stores. */
#define SHM_ALLOC_COPY_TRIES 256

/* Everything after the state/seq/gen header is cleared on claim and release. */
#define REC_BODY_OFF offsetof(struct shm_alloc, owner)

uint32_t shm_alloc_capacity(const struct shm *shm)
{
	shm_check_handle(shm);
	return shm->cfg.alloc_cap;
}

static struct shm_alloc *rec_rw(struct shm *shm, unsigned slot, uint32_t idx, int *rc)
{
	shm_check_handle(shm);
	if (shm->ro) {
		*rc = -EROFS;
		return NULL;
	}
	if (idx >= shm->cfg.alloc_cap || slot >= shm->cfg.n_slots) {
		*rc = -EINVAL;
		return NULL;
	}
	*rc = 0;
	return shm_alloc_at(shm, idx);
}

void shm_alloc_begin_write(struct shm_alloc *rec)
{
	uint32_t s = CMM_LOAD_SHARED(rec->seq);

	/* Always leave it odd and different, even if a dead predecessor left it odd. */
	CMM_STORE_SHARED(rec->seq, (s + 1) | 1u);
	cmm_smp_wmb();	/* odd seq visible before any field store */
}

void shm_alloc_end_write(struct shm_alloc *rec)
{
	uint32_t s = CMM_LOAD_SHARED(rec->seq);

	cmm_smp_wmb();	/* field stores visible before the even seq */
	CMM_STORE_SHARED(rec->seq, (s + 1) & ~1u);
}

static void rec_clear(struct shm_alloc *rec)
{
	/* explicit_bzero: the key must not survive in the segment, and the compiler may not
	 * elide the wipe. */
	explicit_bzero((uint8_t *)rec + REC_BODY_OFF, sizeof(*rec) - REC_BODY_OFF);
}

uint64_t shm_alloc_gen_next(uint64_t gen, uint64_t floor)
{
	uint64_t base = gen > floor ? gen : floor;

	/* A backstop: a take-over refuses a file with a gen or floor above the bound, so
	 * nothing here comes near it. Past it, gen + 1 would reach 0 (which the users of gen
	 * take for "unknown") and stay there, or repeat the record's last gen. */
	if (base >= SHM_ALLOC_GEN_MAX)
		base = gen < SHM_ALLOC_GEN_MAX ? gen : 0;
	return base + 1;
}

/* One CAS attempt at idx; on success the record is CLAIMED by slot, clean, new gen: above
 * both its last one and the segment's floor (a take-over's table starts above every gen of
 * the image, so an (index, gen) pair of the earlier run never names a record of this one;
 * free records keep their 0 and are never touched for it). */
static bool try_claim(struct shm_alloc *rec, unsigned slot, uint64_t floor)
{
	if (CMM_LOAD_SHARED(rec->state) != SHM_ALLOC_WORD(SHM_ALLOC_FREE, 0))
		return false;
	if (uatomic_cmpxchg(&rec->state, SHM_ALLOC_WORD(SHM_ALLOC_FREE, 0),
			    SHM_ALLOC_WORD(SHM_ALLOC_CLAIMED, slot)) != 0)
		return false;
	/* cmpxchg is a full barrier: we own it now and are its only writer. */
	shm_alloc_begin_write(rec);
	rec_clear(rec);
	rec->gen = shm_alloc_gen_next(rec->gen, floor);
	rec->owner = (uint8_t)slot;
	shm_alloc_end_write(rec);
	return true;
}

int shm_alloc_claim(struct shm *shm, unsigned slot, uint32_t *idx, struct shm_alloc **rec)
{
	struct shm_slot *s;
	uint32_t cap, start;
	uint64_t floor;

	shm_check_handle(shm);
	if (shm->ro)
		return -EROFS;
	cap = shm->cfg.alloc_cap;
	floor = CMM_LOAD_SHARED(shm_hdr(shm)->gen_floor);
	s = shm_slot_at(shm, slot);
	if (s == NULL)
		return -EINVAL;
	if (cap == 0)
		return -ENOSPC;
	/* Each slot starts in its own partition, so workers rarely contend for a line;
	 * the hint makes repeated claims O(1) while the partition has room. */
	start = CMM_LOAD_SHARED(s->alloc_hint);	/* next start + 1, 0 = unset */
	if (start == 0 || start > cap)
		start = (uint32_t)((uint64_t)cap * slot / shm->cfg.n_slots);
	else
		start--;
	for (uint32_t n = 0; n < cap; n++) {
		uint32_t i = (uint32_t)(((uint64_t)start + n) % cap);
		struct shm_alloc *r = shm_alloc_at(shm, i);

		if (!try_claim(r, slot, floor))
			continue;
		CMM_STORE_SHARED(s->alloc_hint, i + 2 <= cap ? i + 2 : 1);
		if (idx != NULL)
			*idx = i;
		if (rec != NULL)
			*rec = r;
		return 0;
	}
	return -ENOSPC;
}

int shm_alloc_get(struct shm *shm, unsigned slot, uint32_t idx, struct shm_alloc **rec)
{
	int rc;
	struct shm_alloc *r = rec_rw(shm, slot, idx, &rc);
	uint32_t w;

	if (r == NULL)
		return rc;
	w = CMM_LOAD_SHARED(r->state);
	if (SHM_ALLOC_WORD_STATE(w) == SHM_ALLOC_FREE || SHM_ALLOC_WORD_OWNER(w) != slot)
		return -EPERM;
	if (rec != NULL)
		*rec = r;
	return 0;
}

/* Only for records the master ends on behalf of a dead slot at end_ns (shm_slot_release_all,
 * which gives back the record's quota counts too); live workers count their own allocations.
 * Counted as ended, so its lifetime is observed too, as the worker's end does. */
static void count_ended(struct shm_counters *c, const struct shm_alloc *r, uint64_t end_ns)
{
	shm_ctr_add(c, SHM_CTR_ALLOCS_ENDED, 1);
	shm_ctr_add(c, SHM_CTR_ALLOCS_ACTIVE, (uint64_t)-1);
	shm_lctr_add(c, r->listener_idx, SHM_LCTR_ALLOCS_ACTIVE, (uint64_t)-1);
	shm_ctr_observe_lifetime(c, shm_life_seconds(r->created_ns, end_ns));
}

/* Record idx for its owner `slot`'s step from state word `want` (bits in `ignore` aside),
 * or NULL with *rc: -EPERM (another word), as rec_rw. */
static struct shm_alloc *rec_in(struct shm *shm, unsigned slot, uint32_t idx, uint32_t want,
				uint32_t ignore, int *rc)
{
	struct shm_alloc *r = rec_rw(shm, slot, idx, rc);

	if (r != NULL && (CMM_LOAD_SHARED(r->state) & ~ignore) != want) {
		*rc = -EPERM;
		return NULL;
	}
	return r;
}

int shm_alloc_publish(struct shm *shm, unsigned slot, uint32_t idx)
{
	int rc;
	struct shm_alloc *r =
		rec_in(shm, slot, idx, SHM_ALLOC_WORD(SHM_ALLOC_CLAIMED, slot), 0, &rc);

	if (r == NULL)
		return rc;
	cmm_smp_wmb();	/* release: identity fields before LIVE */
	CMM_STORE_SHARED(r->state, SHM_ALLOC_WORD(SHM_ALLOC_LIVE, slot));
	return 0;
}

int shm_alloc_end_mark(struct shm *shm, unsigned slot, uint32_t idx)
{
	int rc;
	struct shm_alloc *r = rec_in(shm, slot, idx, SHM_ALLOC_WORD(SHM_ALLOC_LIVE, slot), 0, &rc);

	if (r == NULL)
		return rc;
	/* No barrier of its own: whoever judges the mark does so once the marking process
	 * is gone (a replacement after waitpid, a take-over under the instance lock), when
	 * every store it made is visible. The order against the push holds anyway: the
	 * compiler keeps this volatile store before the push's, and so does the hardware,
	 * as shm_records_push_ev has cmm_smp_mb() and cmm_smp_wmb() before the head store
	 * that publishes the event: the mark is visible before the event is. A live reader
	 * ignores the mark (SHM_ALLOC_WORD_STATE is still LIVE). */
	CMM_STORE_SHARED(r->state, SHM_ALLOC_WORD(SHM_ALLOC_LIVE, slot) | SHM_ALLOC_ENDING);
	return 0;
}

int shm_alloc_retire(struct shm *shm, unsigned slot, uint32_t idx)
{
	int rc;
	struct shm_alloc *r = rec_in(shm, slot, idx, SHM_ALLOC_WORD(SHM_ALLOC_LIVE, slot),
				     SHM_ALLOC_ENDING, &rc);

	if (r == NULL)
		return rc;
	CMM_STORE_SHARED(r->state, SHM_ALLOC_WORD(SHM_ALLOC_DYING, slot));
	cmm_smp_mb();	/* DYING before the caller's counter updates */
	return 0;
}

/* Clears an owned record and frees it. Used by the owner, by its replacement in the same
 * slot, and by the master for a slot without a process: always a single writer. */
static void rec_release(struct shm_alloc *r, unsigned slot)
{
	CMM_STORE_SHARED(r->state, SHM_ALLOC_WORD(SHM_ALLOC_DYING, slot));
	shm_alloc_begin_write(r);
	rec_clear(r);
	shm_alloc_end_write(r);
	cmm_smp_mb();	/* cleared contents before the record can be claimed again */
	CMM_STORE_SHARED(r->state, SHM_ALLOC_WORD(SHM_ALLOC_FREE, 0));
}

int shm_alloc_release(struct shm *shm, unsigned slot, uint32_t idx)
{
	int rc = shm_alloc_get(shm, slot, idx, NULL);

	if (rc < 0)
		return rc;
	rec_release(shm_alloc_at(shm, idx), slot);
	return 0;
}

int shm_alloc_read_copy(const struct shm *shm, uint32_t idx, struct shm_alloc *copy)
{
	const struct shm_alloc *r;

	shm_check_handle(shm);
	if (idx >= shm->cfg.alloc_cap || copy == NULL)
		return -EINVAL;
	r = shm_alloc_at(shm, idx);
	for (int i = 0; i < SHM_ALLOC_COPY_TRIES; i++) {
		uint32_t s1 = CMM_LOAD_SHARED(r->seq), s2;

		if (s1 & 1u) {
			caa_cpu_relax();
			continue;
		}
		cmm_smp_rmb();	/* seq before the fields */
		memcpy(copy, r, sizeof(*copy));
		cmm_smp_rmb();	/* fields before the second seq */
		s2 = CMM_LOAD_SHARED(r->seq);
		if (s1 == s2) {
			copy->seq = s1;
			return 0;
		}
	}
	explicit_bzero(copy, sizeof(*copy));
	return -EAGAIN;
}

int shm_alloc_read_stat(const struct shm *shm, uint32_t idx, uint64_t known_gen,
			struct shm_alloc_stat *out)
{
	const struct shm_alloc *r;

	shm_check_handle(shm);
	if (idx >= shm->cfg.alloc_cap || out == NULL)
		return -EINVAL;
	r = shm_alloc_at(shm, idx);
	if (SHM_ALLOC_WORD_STATE(CMM_LOAD_SHARED(r->state)) != SHM_ALLOC_LIVE)
		return -ENOENT;
	for (int i = 0; i < SHM_ALLOC_COPY_TRIES; i++) {
		uint32_t s1 = CMM_LOAD_SHARED(r->seq), s2;

		if (s1 & 1u) {
			caa_cpu_relax();
			continue;
		}
		cmm_smp_rmb();	/* seq before the fields */
		out->gen = r->gen;
		out->user_len = 0;
		if (out->gen != known_gen) {
			out->user_len = r->user_len < SHM_ALLOC_USER_MAX ? r->user_len
									 : SHM_ALLOC_USER_MAX;
			memcpy(out->username, r->username, out->user_len);
		}
		cmm_smp_rmb();	/* fields before the second seq */
		s2 = CMM_LOAD_SHARED(r->seq);
		if (s1 != s2)
			continue;
		if (SHM_ALLOC_WORD_STATE(CMM_LOAD_SHARED(r->state)) != SHM_ALLOC_LIVE)
			return -ENOENT;
		for (int k = 0; k < SHM_ACTR__COUNT; k++)
			out->ctr[k] = CMM_LOAD_SHARED(r->ctr[k]);
		return 0;
	}
	return -EAGAIN;
}

void shm_alloc_prefetch_ahead(const struct shm *shm, uint32_t idx)
{
	uint64_t near = (uint64_t)idx + SHM_ALLOC_AHEAD, far = near + SHM_ALLOC_AHEAD;
	const struct shm_alloc *r;

	shm_check_handle(shm);
	if (far < shm->cfg.alloc_cap)
		__builtin_prefetch(shm_alloc_at(shm, (uint32_t)far), 0, 3);
	if (near >= shm->cfg.alloc_cap)
		return;
	/* Its state line was asked for SHM_ALLOC_AHEAD records ago: a FREE record's
	 * counters are not worth a line. */
	r = shm_alloc_at(shm, (uint32_t)near);
	if (SHM_ALLOC_WORD_STATE(CMM_LOAD_SHARED(r->state)) == SHM_ALLOC_LIVE)
		__builtin_prefetch(&r->ctr[0], 0, 3);
}

int shm_alloc_is_torn(const struct shm *shm, uint32_t idx, bool *torn, unsigned *owner)
{
	const struct shm_alloc *r;
	uint32_t w;
	enum shm_alloc_state st;

	shm_check_handle(shm);
	if (idx >= shm->cfg.alloc_cap || torn == NULL)
		return -EINVAL;
	r = shm_alloc_at(shm, idx);
	w = CMM_LOAD_SHARED(r->state);
	st = SHM_ALLOC_WORD_STATE(w);
	*torn = st == SHM_ALLOC_CLAIMED || st == SHM_ALLOC_DYING ||
		(CMM_LOAD_SHARED(r->seq) & 1u) != 0 || st > SHM_ALLOC_DYING;
	if (owner != NULL)
		*owner = SHM_ALLOC_WORD_OWNER(w);
	return 0;
}

static int next_matching(const struct shm *shm, uint32_t *cursor, uint32_t end, uint32_t *idx,
			 bool live_only, unsigned slot)
{
	shm_check_handle(shm);
	if (cursor == NULL || idx == NULL)
		return -EINVAL;
	if (end > shm->cfg.alloc_cap)
		end = shm->cfg.alloc_cap;
	for (uint32_t i = *cursor; i < end; i++) {
		uint32_t w = CMM_LOAD_SHARED(shm_alloc_at(shm, i)->state);
		enum shm_alloc_state st = SHM_ALLOC_WORD_STATE(w);
		bool hit = live_only ? st == SHM_ALLOC_LIVE
				     : (st != SHM_ALLOC_FREE && SHM_ALLOC_WORD_OWNER(w) == slot);

		if (hit) {
			*idx = i;
			*cursor = i + 1;
			return 0;
		}
	}
	if (*cursor < end)
		*cursor = end;
	return -ENOENT;
}

int shm_alloc_next_owned(const struct shm *shm, unsigned slot, uint32_t *cursor, uint32_t *idx)
{
	if (slot >= shm->cfg.n_slots)
		return -EINVAL;
	return next_matching(shm, cursor, UINT32_MAX, idx, false, slot);
}

int shm_alloc_next_live(const struct shm *shm, uint32_t *cursor, uint32_t *idx)
{
	return next_matching(shm, cursor, UINT32_MAX, idx, true, 0);
}

int shm_alloc_next_live_before(const struct shm *shm, uint32_t *cursor, uint32_t end,
			       uint32_t *idx)
{
	return next_matching(shm, cursor, end, idx, true, 0);
}

int shm_slot_release_all(struct shm *shm, unsigned slot, unsigned *n_released)
{
	struct shm_slot *s;
	uint32_t cursor = 0, idx;
	unsigned n = 0;
	uint32_t st;

	shm_check_handle(shm);
	if (shm->ro)
		return -EROFS;
	s = shm_slot_at(shm, slot);
	if (s == NULL)
		return -EINVAL;
	st = CMM_LOAD_SHARED(s->state);
	if (st != SHM_SLOT_EMPTY && st != SHM_SLOT_DEAD)
		return -EBUSY;
	while (shm_alloc_next_owned(shm, slot, &cursor, &idx) == 0) {
		struct shm_alloc *r = shm_alloc_at(shm, idx);

		/* the dead worker counted its LIVE records as active; nobody else will end them */
		if ((CMM_LOAD_SHARED(r->state) & ~SHM_ALLOC_ENDING) ==
		    SHM_ALLOC_WORD(SHM_ALLOC_LIVE, slot)) {
			uint64_t now = mono_ns();

			/* nobody will end it: its session record, as the master sees it now,
			 * unless it was marked ending (recorded by the worker already) */
			if (shm_alloc_end_mark(shm, slot, idx) == 0)
				(void)shm_records_push(shm, slot, idx, r, SHM_REC_WORKER_CRASH,
						       now, NULL);
			count_ended(&s->ctr, r, now);
			shm_quota_give_rec(shm, r);
		}
		rec_release(r, slot);
		n++;
	}
	if (n_released != NULL)
		*n_released = n;
	return 0;
}
