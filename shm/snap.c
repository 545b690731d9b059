/* Snapshot arena: the master publishes immutable blobs into fixed slots and reclaims
 * retired slots after a QSBR grace period (argument in shm/qsbr.c); workers read the
 * current one through a bounds-checked acquire load of its offset. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "shm/shm_internal.h"

uint64_t shm_checksum(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

/* Maps an offset read from the segment to a snapshot slot index. Offsets are never
 * trusted: anything but the exact start of a slot header is corrupt. */
static int snap_index(const struct shm *shm, uint64_t off, unsigned *idx)
{
	uint64_t rel;

	if (off < shm->off_snaps)
		return -EBADMSG;
	rel = off - shm->off_snaps;
	if (rel % shm->snap_stride != 0 || rel / shm->snap_stride >= shm->cfg.snap_count)
		return -EBADMSG;
	*idx = (unsigned)(rel / shm->snap_stride);
	return 0;
}

static uint64_t snap_off(const struct shm *shm, unsigned i)
{
	return shm->off_snaps + (uint64_t)i * shm->snap_stride;
}

static int free_slot_find(const struct shm *shm, unsigned *idx)
{
	for (unsigned i = 0; i < shm->cfg.snap_count; i++) {
		if (shm_snap_at(shm, i)->state == SHM_SNAP_FREE) {
			*idx = i;
			return 0;
		}
	}
	return -EBUSY;
}

/* Retire the previously current slot with a fresh grace-period token. */
static int snap_retire(struct shm *shm, uint64_t old_off, uint64_t now_ns)
{
	struct shm_snap_hdr *old;
	unsigned i;
	uint64_t token;
	int rc;

	if (old_off == 0)
		return 0;
	if (snap_index(shm, old_off, &i) < 0)
		return -EBADMSG;
	old = shm_snap_at(shm, i);
	rc = shm_qsbr_start(shm, &token);	/* after the cur_snap store, see qsbr.c P3 */
	if (rc < 0)
		return rc;
	old->retire_token = token;
	old->retire_ns = now_ns;
	CMM_STORE_SHARED(old->state, SHM_SNAP_RETIRED);
	return 0;
}

int shm_snap_publish(struct shm *shm, const void *blob, size_t len, uint64_t gen, uint64_t now_ns)
{
	struct shm_hdr *h;
	struct shm_snap_hdr *s;
	uint64_t old_off;
	unsigned i;
	int rc;

	shm_check_handle(shm);
	if (shm->ro)
		return -EROFS;
	if (blob == NULL && len > 0)
		return -EINVAL;
	if (len > shm->cfg.snap_size)
		return -EMSGSIZE;
	rc = free_slot_find(shm, &i);
	if (rc < 0)
		return rc;
	h = shm_hdr(shm);
	s = shm_snap_at(shm, i);
	if (len > 0)
		memcpy(s->payload, blob, len);
	s->gen = gen;
	s->len = len;
	s->checksum = shm_checksum(s->payload, len);
	s->retire_token = 0;
	s->retire_ns = 0;
	s->publish_no = h->generation + 1;
	s->state = SHM_SNAP_LIVE;
	s->magic = SHM_SNAP_MAGIC;
	old_off = h->cur_snap;
	/* P2: release store of the offset; everything above is visible to an acquire load. */
	cmm_smp_wmb();
	CMM_STORE_SHARED(h->cur_snap, snap_off(shm, i));
	CMM_STORE_SHARED(h->generation, h->generation + 1);
	return snap_retire(shm, old_off, now_ns);
}

static void snap_free(struct shm *shm, struct shm_snap_hdr *s)
{
	/* Poison the whole payload area and the header fields readers look at, so a reader
	 * that still (wrongly) uses the slot fails its checks instead of reading stale data
	 * that happens to look right. */
	memset(s->payload, SHM_POISON_BYTE, shm->cfg.snap_size);
	memset(&s->gen, SHM_POISON_BYTE, sizeof(s->gen));
	memset(&s->len, SHM_POISON_BYTE, sizeof(s->len));
	s->magic = 0;
	s->retire_token = 0;
	s->retire_ns = 0;
	cmm_smp_wmb();
	CMM_STORE_SHARED(s->state, SHM_SNAP_FREE);
}

static int reclaim(struct shm *shm, bool wait_gp, unsigned *n_freed, unsigned *n_pending)
{
	unsigned freed = 0, pending = 0;

	shm_check_handle(shm);
	if (shm->ro)
		return -EROFS;
	for (unsigned i = 0; i < shm->cfg.snap_count; i++) {
		struct shm_snap_hdr *s = shm_snap_at(shm, i);

		if (s->state != SHM_SNAP_RETIRED)
			continue;
		/* shm_qsbr_poll() ends with a full barrier: the poison stores cannot move
		 * before the qs loads that proved every reader done (qsbr.c R2). */
		if (wait_gp && shm_qsbr_poll(shm, s->retire_token) < 0) {
			pending++;
			continue;
		}
		snap_free(shm, s);
		freed++;
	}
	if (n_freed != NULL)
		*n_freed = freed;
	if (n_pending != NULL)
		*n_pending = pending;
	return 0;
}

int shm_snap_reclaim(struct shm *shm, unsigned *n_freed, unsigned *n_pending)
{
	return reclaim(shm, true, n_freed, n_pending);
}

int shm_snap_reclaim_unsafe(struct shm *shm, unsigned *n_freed)
{
	return reclaim(shm, false, n_freed, NULL);
}

/* The retired slot with the smallest token is the oldest (tokens grow with time). */
static const struct shm_snap_hdr *oldest_retired(const struct shm *shm)
{
	const struct shm_snap_hdr *best = NULL;

	for (unsigned i = 0; i < shm->cfg.snap_count; i++) {
		const struct shm_snap_hdr *s = shm_snap_at(shm, i);

		if (CMM_LOAD_SHARED(s->state) != SHM_SNAP_RETIRED)
			continue;
		if (best == NULL || s->retire_token < best->retire_token)
			best = s;
	}
	return best;
}

uint64_t shm_snap_oldest_token(const struct shm *shm)
{
	const struct shm_snap_hdr *s;

	shm_check_handle(shm);
	s = oldest_retired(shm);
	return s != NULL ? s->retire_token : 0;
}

int shm_qsbr_oldest_pending_ns(const struct shm *shm, uint64_t now_ns, uint64_t *age_ns)
{
	const struct shm_snap_hdr *s;

	shm_check_handle(shm);
	if (age_ns == NULL)
		return -EINVAL;
	s = oldest_retired(shm);
	*age_ns = (s != NULL && now_ns > s->retire_ns) ? now_ns - s->retire_ns : 0;
	return 0;
}

/* Acquire-load of the current offset and validation of the slot it names. */
static int current_hdr(const struct shm *shm, const struct shm_snap_hdr **out, uint64_t *len,
		       uint64_t *off)
{
	const struct shm_snap_hdr *s;
	unsigned i;

	*off = CMM_LOAD_SHARED(shm_hdr(shm)->cur_snap);
	cmm_smp_rmb();	/* acquire: header and payload loads after the offset load */
	if (*off == 0)
		return -ENOENT;
	if (snap_index(shm, *off, &i) < 0)
		return -EBADMSG;
	s = shm_snap_at(shm, i);
	*len = CMM_LOAD_SHARED(s->len);	/* read once: no double fetch */
	if (CMM_LOAD_SHARED(s->magic) != SHM_SNAP_MAGIC || *len > shm->cfg.snap_size)
		return -EBADMSG;
	*out = s;
	return 0;
}

int shm_snap_current(const struct shm *shm, const void **blob, size_t *len, uint64_t *gen)
{
	const struct shm_snap_hdr *s;
	uint64_t l, off;
	int rc;

	shm_check_handle(shm);
	if (blob == NULL || len == NULL)
		return -EINVAL;
	rc = current_hdr(shm, &s, &l, &off);
	if (rc < 0)
		return rc;
	*blob = s->payload;
	*len = (size_t)l;
	if (gen != NULL)
		*gen = CMM_LOAD_SHARED(s->gen);
	return 0;
}

int shm_snap_copy(const struct shm *shm, void *buf, size_t cap, size_t *len, uint64_t *gen)
{
	const struct shm_hdr *h;
	const struct shm_snap_hdr *s = NULL;
	uint64_t l = 0, off, g0, g = 0, sum = 0;
	int rc;

	shm_check_handle(shm);
	if (len == NULL || (buf == NULL && cap > 0))
		return -EINVAL;
	h = shm_hdr(shm);
	/* Not a QSBR reader: instead, the publish count brackets the copy. The current slot
	 * is never freed, and a slot is freed only after a later publish has incremented
	 * `generation`; an unchanged count therefore proves the slot stayed current and
	 * intact during the copy, and any mismatch then is real corruption. */
	g0 = CMM_LOAD_SHARED(h->generation);
	cmm_smp_rmb();
	rc = current_hdr(shm, &s, &l, &off);
	if (rc == 0 && l <= cap) {
		g = CMM_LOAD_SHARED(s->gen);
		sum = CMM_LOAD_SHARED(s->checksum);
		memcpy(buf, s->payload, (size_t)l);
	}
	cmm_smp_rmb();
	if (CMM_LOAD_SHARED(h->generation) != g0)
		return -EAGAIN;
	if (rc < 0)
		return rc;
	*len = (size_t)l;
	if (l > cap)
		return -ENOBUFS;
	if (shm_checksum(buf, (size_t)l) != sum)
		return -EBADMSG;
	if (gen != NULL)
		*gen = g;
	return 0;
}
