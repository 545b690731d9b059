/* Take-over of a segment image left by an earlier run: strict validation, then a copy of
 * its live UDP records (and nonce key, counters) into this run's fresh segment. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shm/shm_internal.h"
#include "shm/shm_state.h"

/* Lifetimes are at most an hour by default; a record that claims to live for more than
 * this is not one this daemon wrote. */
#define MAX_REMAINING_NS (UINT64_C(7) * 86400 * 1000000000)
#define REC_BODY_OFF offsetof(struct shm_alloc, owner)

/* What the header says, once validated. */
struct img_geom {
	uint32_t n_slots;
	const struct shm_region *slots, *allocs;   /* into hdr */
	const struct shm_region *revoke;           /* NULL: none, or of another format */
	const struct shm_region *lslot;            /* listener slots (this build's format) */
	uint64_t gen_max;                          /* its floor, then the highest gen of its
						    * records read (gen_seen) */
	struct shm_hdr hdr;
};

static int refuse(struct shm_takeover *t, enum shm_state_verdict v, const char *fmt, ...)
{
	va_list ap;

	t->verdict = v;
	va_start(ap, fmt);
	vsnprintf(t->why, sizeof(t->why), fmt, ap);
	va_end(ap);
	return -EBADMSG;
}

/* Reads exactly n bytes at off; a short read or an out-of-range request is -EIO. */
static int img_read(const struct shm_image *img, uint64_t off, void *dst, size_t n)
{
	if (off > img->size || n > img->size - off)
		return -EIO;
	if (img->fd < 0) {
		memcpy(dst, img->buf + off, n);
		return 0;
	}
	for (size_t done = 0; done < n;) {
		ssize_t r = pread(img->fd, (uint8_t *)dst + done, n - done, (off_t)(off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EIO;
		done += (size_t)r;
	}
	return 0;
}

static const struct shm_region *region_find(const struct shm_hdr *h, uint32_t id)
{
	for (uint32_t i = 0; i < h->n_regions; i++)
		if (h->regions[i].id == id)
			return &h->regions[i];
	return NULL;
}

/* Every region lies after the header and inside the file, and none overlaps another. */
static bool regions_ok(const struct shm_hdr *h)
{
	if (h->n_regions > SHM_MAX_REGIONS)
		return false;
	for (uint32_t i = 0; i < h->n_regions; i++) {
		const struct shm_region *r = &h->regions[i];

		if (r->stride == 0 || r->stride > h->seg_size || r->off < h->hdr_size ||
		    r->off > h->seg_size || r->count > (h->seg_size - r->off) / r->stride)
			return false;
		for (uint32_t j = 0; j < i; j++) {
			const struct shm_region *q = &h->regions[j];

			if (q->id == r->id && r->id != SHM_REGION_UNUSED)
				return false;
			if (r->off < q->off + q->count * q->stride &&
			    q->off < r->off + r->count * r->stride)
				return false;
		}
	}
	return true;
}

static int check_header(const struct shm_image *img, struct img_geom *g, struct shm_takeover *t)
{
	struct shm_hdr *h = &g->hdr;
	char boot[SHM_BOOT_ID_LEN];

	if (img->size < sizeof(*h))
		return refuse(t, SHM_STATE_TRUNCATED, "truncated: %llu bytes, less than a header",
			      (unsigned long long)img->size);
	if (img_read(img, 0, h, sizeof(*h)) < 0)
		return refuse(t, SHM_STATE_IO, "cannot read its header");
	if (h->magic != SHM_MAGIC)
		return refuse(t, SHM_STATE_FOREIGN, "not a turngate segment (magic %016llx)",
			      (unsigned long long)h->magic);
	if (h->layout_version != SHM_LAYOUT_VERSION)
		return refuse(t, SHM_STATE_VERSION, "layout version %u, this build reads %u",
			      h->layout_version, SHM_LAYOUT_VERSION);
	if (h->hdr_check != shm_hdr_checksum(h))
		return refuse(t, SHM_STATE_CORRUPT, "header checksum mismatch");
	if (h->seg_size != img->size)
		return refuse(t, SHM_STATE_TRUNCATED, "truncated: %llu bytes, its header says %llu",
			      (unsigned long long)img->size, (unsigned long long)h->seg_size);
	if (h->hdr_size < sizeof(*h) || !regions_ok(h))
		return refuse(t, SHM_STATE_CORRUPT, "region table out of bounds");
	g->allocs = region_find(h, SHM_REGION_ALLOCS);
	g->slots = region_find(h, SHM_REGION_SLOTS);
	if (g->allocs == NULL || g->slots == NULL || g->slots->count == 0 ||
	    g->slots->count > SHM_MAX_SLOTS || g->allocs->count > SHM_MAX_ALLOCS)
		return refuse(t, SHM_STATE_CORRUPT, "no usable slot or allocation region");
	if (g->allocs->format != shm_region_format(SHM_REGION_ALLOCS) ||
	    g->allocs->stride < sizeof(struct shm_alloc))
		return refuse(t, SHM_STATE_FORMAT,
			      "allocation record format %016llx, this build "
			      "writes %016llx",
			      (unsigned long long)g->allocs->format,
			      (unsigned long long)shm_region_format(SHM_REGION_ALLOCS));
	shm_boot_id(boot);
	h->boot_id[SHM_BOOT_ID_LEN - 1] = '\0';
	if (memcmp(boot, h->boot_id, sizeof(boot)) != 0)
		return refuse(t, SHM_STATE_OTHER_BOOT, "written during another boot (%.36s)",
			      h->boot_id);
	g->n_slots = g->slots->count;
	/* not covered by hdr_check (it lies after it) */
	if (h->gen_floor > SHM_ALLOC_GEN_MAX)
		return refuse(t, SHM_STATE_CORRUPT, "gen_floor %llu above 2^62",
			      (unsigned long long)h->gen_floor);
	g->gen_max = h->gen_floor;	/* 0 in the files of builds before the floor */
	g->revoke = region_find(h, SHM_REGION_REVOKE);
	if (g->revoke != NULL && (g->revoke->format != shm_region_format(SHM_REGION_REVOKE) ||
				  g->revoke->count != 1 ||
				  g->revoke->stride < sizeof(struct shm_revoke_hdr) +
							      SHM_REVOKE_MAX *
								      sizeof(struct shm_revoke_ent)))
		g->revoke = NULL;	/* another build's list: not carried (t says so) */
	/* The records name listener slots: without the table of the build that wrote them
	 * (same record format, so same build family) they would mean nothing. */
	g->lslot = region_find(h, SHM_REGION_LSLOTS);
	if (g->lslot == NULL || g->lslot->format != shm_region_format(SHM_REGION_LSLOTS) ||
	    g->lslot->count != 1 || g->lslot->stride < sizeof(struct shm_lslot_hdr))
		return refuse(t, SHM_STATE_FORMAT, "no listener slot table of this build's format");
	return 0;
}

/* The listener slot table of the image, validated, into *out. */
static int read_lslots(const struct shm_image *img, const struct img_geom *g,
		       struct shm_lslot_hdr *out, struct shm_takeover *t)
{
	if (img_read(img, g->lslot->off, out, sizeof(*out)) < 0)
		return refuse(t, SHM_STATE_IO, "cannot read its listener slot table");
	if (shm_lslot_validate(out) < 0)
		return refuse(t, SHM_STATE_CORRUPT, "listener slot table is inconsistent");
	return 0;
}

/* The revocation list of the image (a region of this build's format), read whole into
 * *out (malloc'd, header then SHM_REVOKE_MAX entries); NULL *out when it has none. A
 * header or an entry in use that this build would not write refuses the file. */
static int read_revocations(const struct shm_image *img, const struct img_geom *g,
			    struct shm_revoke_hdr **out, struct shm_takeover *t)
{
	size_t size = sizeof(struct shm_revoke_hdr) +
		      SHM_REVOKE_MAX * sizeof(struct shm_revoke_ent);
	struct shm_revoke_hdr *h;

	*out = NULL;
	if (g->revoke == NULL)
		return 0;
	h = malloc(size);
	if (h == NULL)
		return -ENOMEM;
	if (img_read(img, g->revoke->off, h, size) < 0) {
		free(h);
		return refuse(t, SHM_STATE_IO, "cannot read its revocation list");
	}
	if (shm_revoke_validate(h) < 0) {
		free(h);
		return refuse(t, SHM_STATE_CORRUPT, "revocation list header is inconsistent");
	}
	for (uint32_t i = 0; i < h->count; i++)
		if (!shm_revoke_ent_sane(&h->ent[i])) {
			free(h);
			return refuse(t, SHM_STATE_CORRUPT, "revocation entry %u is inconsistent",
				      i);
		}
	*out = h;
	return 0;
}

/* Copies the entries in use (expired ones too: the master prunes them) into dst's fresh,
 * empty list, with no writer yet. */
static void import_revocations(struct shm *dst, const struct shm_revoke_hdr *src,
			       struct shm_takeover *t)
{
	struct shm_revoke_hdr *h = shm_revoke_hdr(dst);

	if (src == NULL)
		return;
	memcpy(h->ent, src->ent, (size_t)src->count * sizeof(src->ent[0]));
	h->count = src->count;
	/* Not the fresh 0: a worker (its last sweep 0) then sweeps the adopted allocations. */
	if (src->count > 0)
		h->seq = 2;
	t->revoked = src->count;
}

static bool family_ok(uint8_t f)
{
	return f == AF_INET || f == AF_INET6;
}

static bool addr_ok(const struct shm_addr *a, bool need_port)
{
	return family_ok(a->family) && (!need_port || a->port != 0);
}

/* A LIVE, consistent record: every field within what this build writes. */
static bool record_sane(const struct shm_alloc *r, unsigned old_slots, uint64_t now_ns)
{
	bool key = (r->key_alg == SHM_KEY_NONE && r->key_len == 0) ||
		   (r->key_alg == SHM_KEY_MD5 && r->key_len == 16) ||
		   (r->key_alg == SHM_KEY_SHA256 && r->key_len == 32);

	if (r->owner != SHM_ALLOC_WORD_OWNER(r->state) || r->owner >= old_slots || !key ||
	    r->client_transport < SHM_TRANSPORT_UDP || r->client_transport > SHM_TRANSPORT_DTLS ||
	    r->user_len > SHM_ALLOC_USER_MAX || r->realm_len > SHM_ALLOC_REALM_MAX ||
	    r->pad0[0] != 0 || r->pad0[1] != 0 || r->pad1 != 0 ||
	    (r->listener_idx >= SHM_MAX_LISTENERS && r->listener_idx != SHM_LSLOT_NONE))
		return false;
	if (!addr_ok(&r->client, true) || !addr_ok(&r->server, true) ||
	    !addr_ok(&r->relay, r->client_transport == SHM_TRANSPORT_UDP) ||
	    (r->relay2.family != 0 && !addr_ok(&r->relay2, true)))
		return false;
	if (r->created_ns > now_ns || r->expires_ns < r->created_ns ||
	    (r->expires_ns > now_ns && r->expires_ns - now_ns > MAX_REMAINING_NS))
		return false;
	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS; i++)
		if (r->perms[i].family != 0 && !family_ok(r->perms[i].family))
			return false;
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++)
		if (r->chans[i].number != 0 &&
		    (r->chans[i].number < 0x4000 || r->chans[i].number > 0x7fff ||
		     !addr_ok(&r->chans[i].peer, true)))
			return false;
	return true;
}

enum rec_kind {
	REC_SKIP,
	REC_TORN,
	REC_STREAM,
	REC_EXPIRED,
	REC_TAKE,
	REC_ENDED,	/* LIVE with its end marked: its worker recorded its end, then died */
	REC_BAD
};

static enum rec_kind record_kind(const struct shm_alloc *r, unsigned old_slots, uint64_t now_ns,
			      bool keep_tcp)
{
	enum shm_alloc_state st = SHM_ALLOC_WORD_STATE(r->state);
	bool ending = (r->state & SHM_ALLOC_ENDING) != 0;

	/* A free record's gen too: the take-over's floor is the highest gen of the file. */
	if (r->gen > SHM_ALLOC_GEN_MAX)
		return REC_BAD;
	if (st == SHM_ALLOC_FREE)
		return r->state == 0 ? REC_SKIP : REC_BAD;
	/* The mark is stored on a LIVE word only (shm_alloc_end_mark). */
	if ((r->state & ~(SHM_ALLOC_ENDING | 0xffffu)) != 0 || (ending && st != SHM_ALLOC_LIVE))
		return REC_BAD;
	/* Its end recorded (or lost, a kill between the mark and the push): not copied, so
	 * neither its sequence nor its fields matter. Whoever ends a torn LIVE record of a
	 * dead worker (adopt_retire, shm_slot_release_all) marks it with its odd sequence and
	 * half-written fields; killed before the retire, it leaves it so. ended_queued reads
	 * created_ns (written before the publish only, never in a bracket) and bounds what it
	 * makes of it. */
	if (ending)
		return r->owner == SHM_ALLOC_WORD_OWNER(r->state) && r->owner < old_slots
			       ? REC_ENDED
			       : REC_BAD;
	if (st == SHM_ALLOC_CLAIMED || st == SHM_ALLOC_DYING || (r->seq & 1u) != 0)
		return st <= SHM_ALLOC_DYING ? REC_TORN : REC_BAD;
	if (st != SHM_ALLOC_LIVE || !record_sane(r, old_slots, now_ns))
		return REC_BAD;
	if (r->client_transport != SHM_TRANSPORT_UDP &&
	    !(keep_tcp && r->client_transport == SHM_TRANSPORT_TCP))
		return REC_STREAM;
	return r->expires_ns <= now_ns ? REC_EXPIRED : REC_TAKE;
}

/* The records, read a chunk at a time: a table of 10 000 records is two passes of 160
 * preads instead of 20 000, which is most of a take-over's time (the restart gap). Each
 * record is used where the chunk holds it (an image in a buffer: where it lies), not
 * copied once more: at 250,000 records of 2.7 KiB those copies were a third of the new
 * master's take-over. */
#define REC_CHUNK_BYTES (256u << 10)

struct rec_reader {
	const struct shm_image *img;
	const struct img_geom *g;
	uint8_t *chunk;
	uint8_t *again;           /* twice: the second read of the chunk */
	uint32_t per_chunk;       /* records a chunk holds (at least 1) */
	uint32_t first, n;        /* records held now */
};

/* twice: each chunk is read twice (the pre-copy: rec_stable), a buffer's too. */
static int rec_reader_init(struct rec_reader *rr, const struct shm_image *img,
			   const struct img_geom *g, bool twice)
{
	uint64_t stride = g->allocs->stride;

	memset(rr, 0, sizeof(*rr));
	rr->img = img;
	rr->g = g;
	if (img->fd < 0 && !twice)
		return 0;	/* in place (rec_get) */
	/* malloc's alignment and the stride's keep every record of a chunk aligned */
	rr->per_chunk = stride >= REC_CHUNK_BYTES ? 1u : (uint32_t)(REC_CHUNK_BYTES / stride);
	rr->chunk = malloc((size_t)(rr->per_chunk * stride));
	if (twice && rr->chunk != NULL) {
		rr->again = malloc((size_t)(rr->per_chunk * stride));
		if (rr->again == NULL) {
			free(rr->chunk);
			rr->chunk = NULL;
		}
	}
	return rr->chunk != NULL ? 0 : -ENOMEM;
}

static void rec_reader_free(struct rec_reader *rr)
{
	size_t len = (size_t)rr->per_chunk * rr->g->allocs->stride;

	if (rr->chunk != NULL) {
		explicit_bzero(rr->chunk, len);
		free(rr->chunk);
	}
	if (rr->again != NULL) {
		explicit_bzero(rr->again, len);
		free(rr->again);
	}
	rr->chunk = rr->again = NULL;
}

/* Record i (read in order), valid until the next call: in the chunk, or in the image
 * in a buffer where it is aligned, else copied into scratch. NULL: it cannot be read. */
static const struct shm_alloc *rec_get(struct rec_reader *rr, uint32_t i,
				       struct shm_alloc *scratch)
{
	uint64_t stride = rr->g->allocs->stride, off = rr->g->allocs->off + (uint64_t)i * stride;
	const uint8_t *at;

	if (rr->chunk == NULL) {
		if (off > rr->img->size || sizeof(*scratch) > rr->img->size - off)
			return NULL;
		at = rr->img->buf + off;
	} else {
		if (i < rr->first || i - rr->first >= rr->n) {
			uint32_t n = rr->g->allocs->count - i;
			size_t len;

			if (n > rr->per_chunk)
				n = rr->per_chunk;
			len = (size_t)(n * stride);
			rr->n = 0;
			if (img_read(rr->img, off, rr->chunk, len) < 0)
				return NULL;
			if (rr->again != NULL && rr->img->between_reads != NULL)
				rr->img->between_reads(rr->img->between_ctx, off, len);
			/* a second syscall: it starts after the first one's copy ended */
			if (rr->again != NULL && img_read(rr->img, off, rr->again, len) < 0)
				return NULL;
			rr->first = i;
			rr->n = n;
		}
		at = rr->chunk + (size_t)((i - rr->first) * stride);
	}
	if (((uintptr_t)at & (_Alignof(struct shm_alloc) - 1)) == 0)
		return (const struct shm_alloc *)(const void *)at;
	memcpy(scratch, at, sizeof(*scratch));
	return scratch;
}

/* Record i, just returned by rec_get of a reader that reads twice: the same in both reads
 * up to its counters (which change outside the seqlock bracket), with an even sequence. */
static bool rec_stable(const struct rec_reader *rr, uint32_t i)
{
	size_t at = (size_t)((i - rr->first) * rr->g->allocs->stride);
	const struct shm_alloc *r = (const struct shm_alloc *)(const void *)(rr->chunk + at);

	return rr->again != NULL && i >= rr->first && i - rr->first < rr->n &&
	       (r->seq & 1) == 0 &&
	       memcmp(rr->chunk + at, rr->again + at, offsetof(struct shm_alloc, ctr)) == 0;
}

/* Notes the gen of an image's record read (any state: a free record keeps the gen of its
 * last claim, and a pair with it may still be in an operator's hands). False for a gen
 * above SHM_ALLOC_GEN_MAX, not noted: the file is corrupt (record_kind says so; the
 * take under the lock of a pre-copy also for a FREE record it does not judge again). */
static bool gen_seen(struct img_geom *g, const struct shm_alloc *r)
{
	if (r->gen > SHM_ALLOC_GEN_MAX)
		return false;
	if (r->gen > g->gen_max)
		g->gen_max = r->gen;
	return true;
}

/* Every claim in dst from now on gets a gen above the image's (shm_alloc_claim): the
 * identity (index, gen) of an allocation of the earlier run never names one of this run,
 * however the indexes move. Only the header is written, no free record is touched. */
static void gen_floor_raise(struct shm *dst, const struct img_geom *g)
{
	struct shm_hdr *h = shm_hdr(dst);

	if (g->gen_max > h->gen_floor)
		CMM_STORE_SHARED(h->gen_floor, g->gen_max);
}

/* Pass 1: every record is readable and sane, its gen noted; nothing is written. */
static int check_records(struct rec_reader *rr, struct img_geom *g, uint64_t now_ns,
			 struct shm_alloc *buf, struct shm_takeover *t)
{
	for (uint32_t i = 0; i < g->allocs->count; i++) {
		const struct shm_alloc *r = rec_get(rr, i, buf);

		if (r == NULL)
			return refuse(t, SHM_STATE_IO, "cannot read record %u", i);
		if (!gen_seen(g, r) || record_kind(r, g->n_slots, now_ns, false) == REC_BAD)
			return refuse(t, SHM_STATE_CORRUPT, "record %u is inconsistent", i);
	}
	return 0;
}

/* Appends dst's record idx, copied from the image's record src_idx, to the take-over list
 * (shm_taken). Out of memory, the record stays copied but unlisted: no worker adopts it,
 * and its slot's first worker releases it as one it does not know. */
static void taken_push(struct shm *dst, uint32_t idx, uint32_t src_idx)
{
	if (dst->n_taken == dst->cap_taken) {
		uint32_t cap = dst->cap_taken ? dst->cap_taken * 2 : 256;
		uint32_t *grown = realloc(dst->taken, cap * sizeof(*grown));
		uint32_t *from = grown ? realloc(dst->taken_from, cap * sizeof(*from)) : NULL;

		if (grown != NULL)
			dst->taken = grown;
		if (from != NULL) {
			dst->taken_from = from;
			dst->cap_taken = cap;
		}
	}
	if (dst->n_taken < dst->cap_taken) {
		dst->taken_from[dst->n_taken] = src_idx;
		dst->taken[dst->n_taken++] = idx;
	}
}

/* Copies one record into dst, owned by the slot its client is steered to, LIVE (its relay
 * ports booked in the port pool) and
 * counted as active there and in dst's quota counts (the adopting worker keeps the
 * counts, or gives them back). *out_idx: where it went; *counted: whether the quota
 * counts took it (unimport_record gives them back only then); *booked (may be NULL):
 * whether each of its relay ports was booked for it (not, while another copied record
 * still holds one). Not yet listed: the caller lists it (taken_push). */
static int import_record(struct shm *dst, const struct shm_alloc *src, uint64_t now_ns,
			 uint32_t *out_idx, bool *counted, bool *booked)
{
	/* A TURN-TCP record (kept by a live upgrade, whose worker count does not change)
	 * stays on its slot: the CONNECTION-IDs of its RFC 6062 connections name it. */
	unsigned owner = src->client_transport == SHM_TRANSPORT_TCP && src->owner < dst->cfg.n_slots
				 ? src->owner
				 : shm_steer_slot(&src->client, dst->cfg.n_slots);
	struct shm_alloc *r;
	struct shm_counters *c;
	uint32_t idx;
	unsigned ports = (src->relay.family != 0 && src->relay.port != 0) +
			 (src->relay2.family != 0 && src->relay2.port != 0);
	bool all;
	int rc = shm_alloc_claim(dst, owner, &idx, &r);

	if (rc < 0)
		return rc;
	shm_alloc_begin_write(r);
	memcpy((uint8_t *)r + REC_BODY_OFF, (const uint8_t *)src + REC_BODY_OFF,
	       sizeof(*r) - REC_BODY_OFF);
	r->owner = (uint8_t)owner;
	shm_alloc_end_write(r);
	rc = shm_alloc_publish(dst, owner, idx);
	if (rc < 0)
		return rc;
	/* The new segment's port pool starts empty: the record's ports are booked before
	 * any worker could hand them to a new allocation (its own worker books them again
	 * when it adopts it, a no-op). A pre-copied record may find its port still held by
	 * the copy of one that gave it up meanwhile: the take under the lock books it again
	 * once that copy is undone (shm_image_take_precopied). */
	all = shm_ppool_book_record(dst, idx, now_ns) == ports;
	if (booked != NULL)
		*booked = all;
	c = &shm_slot_at(dst, owner)->ctr;
	shm_ctr_add(c, SHM_CTR_ALLOCS_ACTIVE, 1);
	shm_lctr_add(c, src->listener_idx, SHM_LCTR_ALLOCS_ACTIVE, 1);
	/* The fresh segment's counts start at 0: each record copied is counted again, with
	 * no limit (a limit refuses new allocations only). Its table has room for every
	 * record's two keys, so this does not fail; if it did, the record would stay
	 * uncounted and its end would change nothing (shm_quota_give). */
	*counted = shm_quota_take_rec(dst, r, &(struct shm_quota_limits){ 0 }) == 0;
	*out_idx = idx;
	return 0;
}

/* Undoes import_record() of dst's record idx (a pre-copied record that changed before the
 * lock): its counts, its port bookings and the record itself, as if never copied. */
static void unimport_record(struct shm *dst, uint32_t idx, bool counted)
{
	struct shm_alloc *r = shm_alloc_at(dst, idx);
	unsigned owner = r->owner;
	struct shm_counters *c = &shm_slot_at(dst, owner)->ctr;

	if (counted)
		(void)shm_quota_give_rec(dst, r);
	shm_ctr_add(c, SHM_CTR_ALLOCS_ACTIVE, (uint64_t)-1);
	shm_lctr_add(c, r->listener_idx, SHM_LCTR_ALLOCS_ACTIVE, (uint64_t)-1);
	if (r->relay.family != 0)
		shm_ppool_put(dst, shm_ppool_tag(&r->relay), r->relay.port, idx);
	if (r->relay2.family != 0)
		shm_ppool_put(dst, shm_ppool_tag(&r->relay2), r->relay2.port, idx);
	(void)shm_alloc_release(dst, owner, idx);
}

/* The session record of an allocation that ended while no daemon ran (expired in the
 * gap) or that the take-over ends (a stream allocation, a torn LIVE one, one with no room
 * in this run's table): an event in the ring of the slot
 * its client steers to; the new master writes it. Its index is of the old table, and the
 * ring's relay counters are of the new one: the short-circuited count is not carried. */
static void record_end(struct shm *dst, uint32_t idx, const struct shm_alloc *r,
		       enum shm_rec_reason reason, uint64_t at_ns)
{
	struct shm_alloc copy;
	unsigned slot = shm_steer_slot(&r->client, dst->cfg.n_slots);

	memcpy(&copy, r, sizeof(copy));
	explicit_bzero(copy.key, sizeof(copy.key));
	(void)shm_records_push_carried(dst, slot, idx, &copy, reason, at_ns);
	explicit_bzero(&copy, sizeof(copy));
}

/* The end events of the earlier run's own records that its rings still held, by (idx, gen):
 * a worker pushes its end event before it retires the record (wk_alloc_destroy), so a kill
 * between the two leaves a LIVE record whose end is queued already. take_one ends such a
 * record at its event's ended_ns instead of copying it (or ending it a second time). */
struct ended_ev {
	uint32_t idx;
	uint64_t gen, ended_ns;
};

struct ended_set {
	struct ended_ev *ev;      /* sorted by (idx, gen) once filled */
	uint32_t n, cap;
};

static int ended_cmp(const void *a, const void *b)
{
	const struct ended_ev *x = a, *y = b;

	if (x->idx != y->idx)
		return x->idx < y->idx ? -1 : 1;
	return x->gen < y->gen ? -1 : x->gen > y->gen;
}

/* Notes one end event of the image's rings; without memory it is not noted (the record
 * is then judged as before: ended a second time or copied). */
static void ended_note(struct ended_set *es, const struct shm_rec_ev *ev)
{
	if (es->n == es->cap) {
		uint32_t cap = es->cap != 0 ? es->cap * 2 : 64;
		struct ended_ev *p = realloc(es->ev, (size_t)cap * sizeof(*p));

		if (p == NULL)
			return;
		es->ev = p;
		es->cap = cap;
	}
	es->ev[es->n++] = (struct ended_ev){ ev->idx, ev->gen, ev->ended_ns };
}

/* The queued end of the image's record i of generation gen, or NULL. */
static const struct ended_ev *ended_find(const struct ended_set *es, uint32_t i, uint64_t gen)
{
	struct ended_ev key = { .idx = i, .gen = gen };

	if (es == NULL || es->n == 0)
		return NULL;
	return bsearch(&key, es->ev, es->n, sizeof(key), ended_cmp);
}

static void ended_free(struct ended_set *es)
{
	free(es->ev);
	es->ev = NULL;
	es->n = es->cap = 0;
}

/* Events of the earlier run's rings that its master had not written yet: into this
 * segment's rings (slot i of the old run into slot i mod n here), their ends of the
 * earlier run's own records noted in es. Read only when the region is of this build's
 * format. */
static void import_records_rings(struct shm *dst, const struct shm_image *img,
				 const struct img_geom *g, struct ended_set *es)
{
	const struct shm_region *rg = region_find(&g->hdr, SHM_REGION_RECORDS);
	struct shm_records_hdr h;
	struct shm_rec_ring *ring;
	uint64_t off;

	if (rg == NULL || rg->format != shm_region_format(SHM_REGION_RECORDS) || rg->count != 1)
		return;
	if (img_read(img, rg->off, &h, sizeof(h)) < 0 ||
	    shm_records_validate(&h, h.n_rings) < 0 || h.n_rings == 0 ||
	    h.n_rings > SHM_MAX_SLOTS ||
	    rg->stride < sizeof(h) + (uint64_t)h.n_rings * sizeof(struct shm_rec_ring))
		return;
	ring = malloc(sizeof(*ring));
	if (ring == NULL)
		return;
	shm_records_hdr(dst)->written += h.written;
	shm_records_hdr(dst)->master_dropped += h.master_dropped;
	shm_records_hdr(dst)->webhook_failures += h.webhook_failures;
	shm_records_hdr(dst)->webhook_dropped += h.webhook_dropped;
	for (uint32_t i = 0; i < h.n_rings; i++) {
		unsigned to = i % dst->cfg.n_slots;

		off = rg->off + sizeof(h) + (uint64_t)i * sizeof(*ring);
		if (img_read(img, off, ring, sizeof(*ring)) < 0)
			break;
		/* and what its worker's backlog held: lost with the process */
		shm_rec_ring_at(dst, to)->dropped += ring->dropped + ring->waiting;
		if (ring->head - ring->tail > SHM_REC_RING)
			ring->tail = ring->head - SHM_REC_RING;
		for (uint64_t k = ring->tail; k != ring->head; k++) {
			struct shm_rec_ev *ev = &ring->ev[k & (SHM_REC_RING - 1)];

			/* one it carried itself names a record of a table before it */
			if (!ev->carried && !ev->start)
				ended_note(es, ev);
			ev->carried = 1;
			(void)shm_records_push_ev(dst, to, ev);
		}
	}
	free(ring);
	if (es->n > 0)
		qsort(es->ev, es->n, sizeof(*es->ev), ended_cmp);
}

/* A LIVE record of the image that the take-over ends at end_ns (not copied): its session
 * record and its lifetime. It was counted as created and not as ended, so
 * import_counters counts it as ended; its lifetime goes with that count. */
static void end_live(struct shm *dst, uint32_t i, const struct shm_alloc *r,
		     enum shm_rec_reason reason, uint64_t end_ns, struct shm_takeover *t)
{
	record_end(dst, i, r, reason, end_ns);
	shm_life_observe(&t->ended_life, shm_life_seconds(r->created_ns, end_ns));
}

/* When the take-over ends a LIVE record r that it cannot copy (torn, stream, no room):
 * now_ns, or its expiry if that came first (it ran out while no daemon ran), never before
 * its creation. */
static uint64_t end_at(const struct shm_alloc *r, uint64_t now_ns)
{
	uint64_t end = r->expires_ns < now_ns ? r->expires_ns : now_ns;

	if (end < r->created_ns)
		end = r->created_ns < now_ns ? r->created_ns : now_ns;
	return end;
}

/* A LIVE record whose worker recorded its end and was killed before its retire: marked
 * (REC_ENDED), or whose end event the earlier run's rings still hold (e, from ended_find:
 * a record of a build before the mark). It ended then: not copied, no second session
 * record (its event is carried already, import_records_rings, or was written by the
 * earlier run's master). Its lifetime goes with the count of ended allocations
 * (import_counters), as its worker did not observe it: to its event's end, or, the event
 * drained, to the take-over (its expiry if that came first): a little long, by the time
 * between the kill and the take-over. A marked record may be half written and is not
 * checked (record_kind), nor is an event: the end is never after now_ns, and a creation
 * after the end makes 0, so no lifetime exceeds the time since the record's creation. */
static void ended_queued(const struct shm_alloc *r, const struct ended_ev *e, uint64_t now_ns,
			 struct shm_takeover *t)
{
	uint64_t end = e != NULL && e->ended_ns <= now_ns ? e->ended_ns : end_at(r, now_ns);

	t->queued++;
	shm_life_observe(&t->ended_life, shm_life_seconds(r->created_ns, end));
}

/* One record of the image as the take-over judges it. REC_BAD refuses the image when
 * strict, else (the check pass judged it already) it is skipped. */
static int take_one(struct shm *dst, const struct shm_alloc *r, uint32_t i, unsigned old_slots,
		    uint64_t now_ns, bool strict, const struct ended_set *es,
		    struct shm_takeover *t)
{
	enum rec_kind kind = record_kind(r, old_slots, now_ns, dst->keep_tcp);
	const struct ended_ev *e;
	uint32_t idx;
	bool counted;

	e = kind != REC_BAD && SHM_ALLOC_WORD_STATE(r->state) == SHM_ALLOC_LIVE
		    ? ended_find(es, i, r->gen)
		    : NULL;
	if (kind == REC_ENDED || e != NULL) {
		ended_queued(r, e, now_ns, t);
		return 0;
	}
	switch (kind) {
	case REC_TORN:
		t->torn++;
		/* LIVE, its worker died inside a write (a replacement worker releases such
		 * a record as worker_crash too, worker/adopt.c); CLAIMED was never counted,
		 * DYING was recorded and counted by its worker */
		if (SHM_ALLOC_WORD_STATE(r->state) == SHM_ALLOC_LIVE)
			end_live(dst, i, r, SHM_REC_WORKER_CRASH, end_at(r, now_ns), t);
		break;
	case REC_STREAM:
		t->stream++;
		end_live(dst, i, r, SHM_REC_SHUTDOWN, end_at(r, now_ns), t);
		break;
	case REC_EXPIRED:
		t->expired++;
		end_live(dst, i, r, SHM_REC_EXPIRY, r->expires_ns, t);
		break;
	case REC_TAKE:
		if (import_record(dst, r, now_ns, &idx, &counted, NULL) == 0) {
			taken_push(dst, idx, i);
			t->adopted++;
		} else {
			/* no room in this run's table: it cannot be taken over */
			t->overflow++;
			end_live(dst, i, r, SHM_REC_SHUTDOWN, now_ns, t);
		}
		break;
	case REC_BAD:
		if (strict)
			return refuse(t, SHM_STATE_CORRUPT, "record %u is inconsistent", i);
		break;
	default:
		break;
	}
	return 0;
}

/* Pass 2. */
static int import_records(struct shm *dst, struct rec_reader *rr, const struct img_geom *g,
			  uint64_t now_ns, struct shm_alloc *buf, const struct ended_set *es,
			  struct shm_takeover *t)
{
	int rc = 0;

	for (uint32_t i = 0; i < g->allocs->count && rc == 0; i++) {
		const struct shm_alloc *r = rec_get(rr, i, buf);

		if (r == NULL)
			return -EIO;
		rc = take_one(dst, r, i, g->n_slots, now_ns, false, es, t);
	}
	explicit_bzero(buf, sizeof(*buf));
	return rc;
}

static void counters_add(struct shm_counters *d, const struct shm_counters *s)
{
	uint64_t *dw = (uint64_t *)d;
	const uint64_t *sw = (const uint64_t *)s;

	for (size_t i = 0; i < sizeof(*d) / sizeof(uint64_t); i++)
		dw[i] += sw[i];
}

static void counters_add_life(struct shm_lifetime *d, const struct shm_lifetime *s)
{
	for (unsigned i = 0; i <= SHM_LIFE_BUCKETS; i++)
		d->bucket[i] += s->bucket[i];
	d->sum_s += s->sum_s;
	d->count += s->count;
}

/* The earlier run's cumulative counters, folded onto this run's slots. Gauges are not
 * carried: import_record() counts what is active now. Everything created before and not
 * carried over has ended. */
static void import_counters(struct shm *dst, const struct shm_image *img, const struct img_geom *g,
			    struct shm_takeover *t)
{
	struct shm_counters *c = malloc(sizeof(*c));
	uint64_t created = 0, ended = 0, dropped = t->torn + t->stream + t->expired + t->overflow;
	struct shm_counters *c0 = &shm_slot_at(dst, 0)->ctr;

	/* A build that added a counter changed the slot format: its counters start from 0
	 * (the master logs it), its allocations are still taken. */
	t->counters_format = g->slots->format != shm_region_format(SHM_REGION_SLOTS) ||
			     g->slots->stride < sizeof(struct shm_slot);
	if (c == NULL || t->counters_format) {
		free(c);
		return;
	}
	for (uint32_t i = 0; i < g->n_slots; i++) {
		struct shm_counters *d = &shm_slot_at(dst, i % dst->cfg.n_slots)->ctr;

		if (img_read(img,
			     g->slots->off + (uint64_t)i * g->slots->stride +
				     offsetof(struct shm_slot, ctr),
			     c, sizeof(*c)) < 0)
			goto out;
		c->v[SHM_CTR_ALLOCS_ACTIVE] = 0;
		c->v[SHM_CTR_TCP_PEER_CONNS] = 0;
		for (unsigned l = 0; l < SHM_MAX_LISTENERS; l++) {
			c->lst[l][SHM_LCTR_ALLOCS_ACTIVE] = 0;
			c->lst[l][SHM_LCTR_CONNS_ACTIVE] = 0;
		}
		created += c->v[SHM_CTR_ALLOCS_CREATED];
		ended += c->v[SHM_CTR_ALLOCS_ENDED];
		counters_add(d, c);
	}
	if (created >= ended + t->adopted) {
		shm_ctr_add(c0, SHM_CTR_ALLOCS_ENDED, created - ended - t->adopted);
		/* the lifetimes of the LIVE records among them (take_one), with that count:
		 * counters that do not add up (a worker killed between its publish and its
		 * CREATED add) raise nothing, so nothing is observed either */
		counters_add_life(&c0->life, &t->ended_life);
	}
	shm_ctr_add(c0, SHM_CTR_ALLOCS_DROPPED, dropped);
	t->have_counters = true;
out:
	free(c);
}

/* What the take-over reads besides the records: the header, the listener slot table and
 * the revocation list (*rv malloc'd or NULL), all validated. */
static int take_begin(struct shm *dst, const struct shm_image *img, struct img_geom *g,
		      struct shm_lslot_hdr *ls, struct shm_revoke_hdr **rv, struct shm_takeover *t)
{
	int rc;

	shm_check_handle(dst);
	*rv = NULL;
	if (img == NULL || t == NULL || dst->ro)
		return -EINVAL;
	memset(g, 0, sizeof(*g));
	rc = check_header(img, g, t);
	if (rc < 0)
		return rc;
	t->revoke_lost = g->revoke == NULL && region_find(&g->hdr, SHM_REGION_REVOKE) != NULL;
	rc = read_lslots(img, g, ls, t);
	if (rc < 0)
		return rc;
	return read_revocations(img, g, rv, t);
}

/* After the records (rc: how they went): the listener slots, counters, revocations and
 * nonce key, or (rc < 0) nothing but the clean-up. Returns rc. */
static int take_end(struct shm *dst, const struct shm_image *img, struct img_geom *g,
		    const struct shm_lslot_hdr *ls, struct shm_revoke_hdr *rv, int rc,
		    struct shm_takeover *t)
{
	if (rc < 0) {
		free(rv);
		explicit_bzero(&g->hdr.nonce_key, sizeof(g->hdr.nonce_key));
		return rc;
	}
	/* Before the counters: they and the records are indexed by these slots. */
	memcpy(shm_lslot_hdr(dst), ls, sizeof(*ls));
	import_counters(dst, img, g, t);
	import_revocations(dst, rv, t);
	free(rv);
	shm_nonce_key_set(dst, g->hdr.nonce_key);
	explicit_bzero(&g->hdr.nonce_key, sizeof(g->hdr.nonce_key));
	t->have_key = true;
	t->old_slots = g->n_slots;
	t->old_master = g->hdr.master_pid;
	t->verdict = SHM_STATE_TAKEN;
	snprintf(t->why, sizeof(t->why),
		 "%u allocations taken over from %u workers "
		 "(master pid %d); released %u expired, %u TCP/TLS/DTLS, %u torn, %u over "
		 "capacity, %u ended before (end recorded); %u revocations%s",
		 t->adopted, t->old_slots, t->old_master, t->expired, t->stream, t->torn,
		 t->overflow, t->queued, t->revoked,
		 t->revoke_lost ? " (its revocation list is of another format: not carried)"
				: "");
	if (t->precopy) {
		size_t len = strlen(t->why);

		snprintf(t->why + len, sizeof(t->why) - len,
			 "; %u copied before the lock, %u of them changed since, %u of them "
			 "ended before (end recorded)",
			 t->precopied + t->recopied + t->precopy_ended, t->recopied,
			 t->precopy_ended);
	}
	return 0;
}

int shm_image_take(struct shm *dst, const struct shm_image *img, uint64_t now_ns,
		   struct shm_takeover *t)
{
	struct img_geom g;
	struct rec_reader rr;
	struct shm_alloc *buf;
	struct shm_revoke_hdr *rv = NULL;
	struct shm_lslot_hdr ls;
	int rc = take_begin(dst, img, &g, &ls, &rv, t);

	if (rc < 0)
		return rc;
	buf = malloc(sizeof(*buf));
	if (buf == NULL || rec_reader_init(&rr, img, &g, false) < 0) {
		free(buf);
		return take_end(dst, img, &g, &ls, rv, -ENOMEM, t);
	}
	rc = check_records(&rr, &g, now_ns, buf, t);
	if (rc == 0) {
		struct ended_set es = { 0 };

		gen_floor_raise(dst, &g);	/* before the first copy's claim */

		/* the earlier run's pending events first: they ended before these, and
		 * they say which LIVE records ended already */
		import_records_rings(dst, img, &g, &es);
		rc = import_records(dst, &rr, &g, now_ns, buf, &es, t);
		ended_free(&es);
	}
	rec_reader_free(&rr);
	explicit_bzero(buf, sizeof(*buf));
	free(buf);
	return take_end(dst, img, &g, &ls, rv, rc, t);
}

/* ---- pre-copy (a live upgrade: shm_image_precopy, shm_image_take_precopied) --------- */

/* What the pre-copy saw of one record of the image and where it put it. A record's
 * fields change only inside its seqlock bracket (shm_alloc_begin_write/end_write: +2 to
 * seq), a claim also moves gen and a release passes through DYING to FREE: a record whose
 * state word, seq and gen are as they were has the same fields. Only its counters (ctr,
 * outside the bracket) may have moved. That needs the pre-copy's seq read before the
 * fields and again after, which one pread does not give (its copy, and the CPU, order
 * nothing within it): each chunk is read twice, the second pread after the first returned,
 * and a record is copied only when its bytes up to ctr are the same in both with an even
 * seq (rec_stable). A bracket that ended during the first read, which may show its new
 * seq with stale fields there, shows its new fields to the second: they differ. One that
 * began during the first read or before the second (its odd seq is stored before its
 * fields) shows the second an odd or newer seq: they differ. The same bytes with an even
 * seq: no bracket overlapped the reads but one that wrote the same values again, which
 * changes nothing. The file is still only read, never mapped (a truncated one cannot
 * SIGBUS the master). */
struct pre_ent {
	uint32_t state, seq;
	uint64_t gen;
	uint32_t dst;             /* dst index + 1; 0: not copied */
	bool counted;             /* its quota counts were taken */
	bool booked_all;          /* each of its relay ports was booked for it */
};

struct shm_precopy {
	uint32_t count;           /* the image's records */
	uint64_t off, stride;
	uint32_t n_slots;
	uint32_t copied;          /* records copied (pre_ent.dst != 0) */
	uint64_t gen_min;         /* the lowest gen of a kept copy (precopy_regen); 0: unknown */
	struct pre_ent ent[];
};

/* Every kept copy gets a gen above `above`, the floor rising to it first (only copies at or
 * below it are written): their (index, gen) then names no allocation of the earlier run,
 * however the indexes moved. Run twice. At the end of the pre-copy, with `above` the
 * file's highest gen then plus SHM_PRECOPY_GEN_AHEAD: a copy took the floor of its moment
 * (a higher gen may come later in the file), and the earlier run claims on until the lock.
 * Under the lock, with `above` the file's highest gen now: a pass only when that run
 * claimed an index more than SHM_PRECOPY_GEN_AHEAD times in between, so the upgrade's gap
 * does not write 250,000 records again. Nothing reads the new table yet (no worker runs). */
static void precopy_regen(struct shm *dst, struct shm_precopy *pc, uint64_t above)
{
	struct shm_hdr *h = shm_hdr(dst);

	if (above > h->gen_floor)
		CMM_STORE_SHARED(h->gen_floor, above);
	if (pc->gen_min > above)
		return;
	pc->gen_min = UINT64_MAX;
	for (uint32_t i = 0; i < pc->count; i++) {
		struct shm_alloc *r;

		if (pc->ent[i].dst == 0)
			continue;
		r = shm_alloc_at(dst, pc->ent[i].dst - 1);
		if (r->gen <= above) {
			shm_alloc_begin_write(r);
			r->gen = shm_alloc_gen_next(r->gen, h->gen_floor);
			shm_alloc_end_write(r);
		}
		if (r->gen < pc->gen_min)
			pc->gen_min = r->gen;
	}
}

int shm_image_precopy(struct shm *dst, const struct shm_image *img, uint64_t now_ns,
		      struct shm_precopy **out, struct shm_takeover *t)
{
	struct img_geom g;
	struct rec_reader rr;
	struct shm_alloc *buf;
	struct shm_revoke_hdr *rv = NULL;
	struct shm_lslot_hdr ls;
	struct shm_precopy *pc;
	int rc;

	if (out == NULL)
		return -EINVAL;
	*out = NULL;
	rc = take_begin(dst, img, &g, &ls, &rv, t);
	free(rv);
	explicit_bzero(&g.hdr.nonce_key, sizeof(g.hdr.nonce_key));
	if (rc < 0)
		return rc;
	pc = calloc(1, sizeof(*pc) + (size_t)g.allocs->count * sizeof(pc->ent[0]));
	buf = malloc(sizeof(*buf));
	if (pc == NULL || buf == NULL || rec_reader_init(&rr, img, &g, true) < 0) {
		free(pc);
		free(buf);
		return -ENOMEM;
	}
	pc->count = g.allocs->count;
	pc->off = g.allocs->off;
	pc->stride = g.allocs->stride;
	pc->n_slots = g.n_slots;
	for (uint32_t i = 0; i < pc->count; i++) {
		const struct shm_alloc *r = rec_get(&rr, i, buf);
		struct pre_ent *e = &pc->ent[i];
		uint32_t idx;

		if (r == NULL) {
			rc = refuse(t, SHM_STATE_IO, "cannot read record %u", i);
			break;
		}
		/* The floor so far: a copy made before a higher gen is seen gets its gen
		 * again under the lock (precopy_regen), as do all the kept ones. */
		(void)gen_seen(&g, r);	/* above the bound: not copied (record_kind) */
		gen_floor_raise(dst, &g);
		/* Anything else (a record being written now may look torn or inconsistent,
		 * or differ between the two reads: shm_image_precopy in shm_state.h) is judged
		 * under the lock, as the whole take-over judges it. */
		if (!rec_stable(&rr, i) ||
		    record_kind(r, g.n_slots, now_ns, dst->keep_tcp) != REC_TAKE)
			continue;
		e->state = r->state;
		e->seq = r->seq;
		e->gen = r->gen;
		if (import_record(dst, r, now_ns, &idx, &e->counted, &e->booked_all) < 0) {
			/* dst is too small for them all: which ones are left over is the full
			 * take-over's to say (the first ones in the file's order fit) */
			rc = -ENOSPC;
			break;
		}
		e->dst = idx + 1;
		pc->copied++;
	}
	rec_reader_free(&rr);
	explicit_bzero(buf, sizeof(*buf));
	free(buf);
	if (rc < 0) {
		shm_precopy_undo(dst, pc);
		shm_precopy_free(pc);
		return rc;
	}
	precopy_regen(dst, pc,
		      g.gen_max < SHM_ALLOC_GEN_MAX - SHM_PRECOPY_GEN_AHEAD
			      ? g.gen_max + SHM_PRECOPY_GEN_AHEAD
			      : SHM_ALLOC_GEN_MAX);
	*out = pc;
	return 0;
}

uint32_t shm_precopy_copied(const struct shm_precopy *pc)
{
	return pc != NULL ? pc->copied : 0;
}

void shm_precopy_undo(struct shm *dst, struct shm_precopy *pc)
{
	if (pc == NULL)
		return;
	for (uint32_t i = 0; i < pc->count; i++)
		if (pc->ent[i].dst != 0) {
			unimport_record(dst, pc->ent[i].dst - 1, pc->ent[i].counted);
			pc->ent[i].dst = 0;
		}
	pc->copied = 0;
	dst->n_taken = 0;
}

void shm_precopy_free(struct shm_precopy *pc)
{
	free(pc);
}

/* Pass 1 under the lock: every record's header (and counters) against what the pre-copy saw. An
 * unchanged one that has not expired since keeps its copy, with its counters copied again; a
 * changed one loses it, and so does one whose end was recorded since (marked, or its end event
 * queued, es: take_one ends it, as a full take-over does); *need marks the records to judge again (all that are not FREE and zero
 * and not kept). All undone before anything is copied or booked again: a port a changed or ended
 * record gave up may be booked by another one now. */
static int precopy_compare(struct shm *dst, struct rec_reader *rr, struct img_geom *g,
			   struct shm_precopy *pc, uint64_t now_ns, const struct ended_set *es,
			   uint8_t *need, struct shm_alloc *buf, struct shm_takeover *t)
{
	for (uint32_t i = 0; i < pc->count; i++) {
		const struct shm_alloc *r = rec_get(rr, i, buf);
		struct pre_ent *e = &pc->ent[i];

		if (r == NULL)
			return refuse(t, SHM_STATE_IO, "cannot read record %u", i);
		if (!gen_seen(g, r))
			return refuse(t, SHM_STATE_CORRUPT, "record %u is inconsistent", i);
		if (e->dst != 0) {
			bool same = r->state == e->state && r->seq == e->seq && r->gen == e->gen;
			/* its end recorded since: marked (the same allocation, its gen), or
			 * unchanged with its end event queued (a build before the mark) */
			bool ended = (same && ended_find(es, i, e->gen) != NULL) ||
				     (r->gen == e->gen && shm_alloc_end_marked(r));

			/* Unchanged and still not expired now: still a record to take, unless
			 * its end is queued (its worker killed between the event and its
			 * retire). */
			if (same && !ended && r->expires_ns > now_ns) {
				memcpy(shm_alloc_at(dst, e->dst - 1)->ctr, r->ctr, sizeof(r->ctr));
				continue;
			}
			unimport_record(dst, e->dst - 1, e->counted);
			e->dst = 0;
			pc->copied--;
			t->recopied += !ended;
			t->precopy_ended += ended;
		}
		if (r->state != 0)
			need[i / 8] |= (uint8_t)(1u << (i % 8));
	}
	return 0;
}

int shm_image_take_precopied(struct shm *dst, const struct shm_image *img,
			     struct shm_precopy *pc, uint64_t now_ns, struct shm_takeover *t)
{
	struct img_geom g;
	struct rec_reader rr;
	struct shm_alloc *buf;
	struct shm_revoke_hdr *rv = NULL;
	struct shm_lslot_hdr ls;
	struct ended_set es = { 0 };
	uint8_t *need;
	int rc;

	if (pc == NULL)
		return -EINVAL;
	rc = take_begin(dst, img, &g, &ls, &rv, t);
	if (rc < 0)
		return rc;
	/* The pre-copy is only an optimisation: what keeps it from being used here is no
	 * reason to fail (-ESTALE: the caller gives it back and takes the whole file). */
	if (g.allocs->count != pc->count || g.allocs->off != pc->off ||
	    g.allocs->stride != pc->stride || g.n_slots != pc->n_slots) {
		snprintf(t->why, sizeof(t->why), "the file's geometry changed since the pre-copy");
		return take_end(dst, img, &g, &ls, rv, -ESTALE, t);
	}
	need = calloc((size_t)pc->count / 8 + 1, 1);
	buf = malloc(sizeof(*buf));
	if (need == NULL || buf == NULL || rec_reader_init(&rr, img, &g, false) < 0) {
		free(need);
		free(buf);
		snprintf(t->why, sizeof(t->why), "out of memory");
		return take_end(dst, img, &g, &ls, rv, -ESTALE, t);
	}
	/* The earlier run's pending events first, as in a full take-over: they say which
	 * kept copies ended already (the compare undoes those with the changed ones). */
	import_records_rings(dst, img, &g, &es);
	rc = precopy_compare(dst, &rr, &g, pc, now_ns, &es, need, buf, t);
	rec_reader_free(&rr);
	if (rc == 0)
		precopy_regen(dst, pc, g.gen_max);
	/* A kept record whose port a changed or ended one held when it was copied (that one
	 * ended and this one claimed the port): those copies are undone now, so the port is
	 * booked for it before any other record is copied. */
	for (uint32_t i = 0; i < pc->count && rc == 0; i++)
		if (pc->ent[i].dst != 0 && !pc->ent[i].booked_all)
			(void)shm_ppool_book_record(dst, pc->ent[i].dst - 1, now_ns);
	/* The list as a full take-over makes it: in the image's order. */
	dst->n_taken = 0;
	for (uint32_t i = 0; i < pc->count && rc == 0; i++) {
		uint64_t off = g.allocs->off + (uint64_t)i * g.allocs->stride;

		if (pc->ent[i].dst != 0) {
			taken_push(dst, pc->ent[i].dst - 1, i);
			t->adopted++;
			continue;
		}
		if ((need[i / 8] & (1u << (i % 8))) == 0)
			continue;
		if (img_read(img, off, buf, sizeof(*buf)) < 0)
			rc = refuse(t, SHM_STATE_IO, "cannot read record %u", i);
		else
			rc = take_one(dst, buf, i, g.n_slots, now_ns, true, &es, t);
	}
	t->precopy = true;
	t->precopied = pc->copied;
	ended_free(&es);
	explicit_bzero(buf, sizeof(*buf));
	free(buf);
	free(need);
	return take_end(dst, img, &g, &ls, rv, rc, t);
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

unsigned shm_steer_slot(const struct shm_addr *client, unsigned n_slots)
{
	uint32_t h;

	if (n_slots <= 1)
		return 0;
	if (client->family == AF_INET6)
		h = be32(client->addr) ^ be32(client->addr + 4) ^ be32(client->addr + 8) ^
		    be32(client->addr + 12);
	else
		h = be32(client->addr);
	h = (h ^ client->port) * SHM_STEER_MUL;
	return (h >> SHM_STEER_SHIFT) % n_slots;
}

const char *shm_state_verdict_name(enum shm_state_verdict v)
{
	static const char *const names[] = {
		[SHM_STATE_NONE] = "none",
		[SHM_STATE_TAKEN] = "taken",
		[SHM_STATE_SYMLINK] = "symlink",
		[SHM_STATE_NOT_REGULAR] = "not-regular",
		[SHM_STATE_OWNER] = "owner",
		[SHM_STATE_MODE] = "mode",
		[SHM_STATE_TRUNCATED] = "truncated",
		[SHM_STATE_FOREIGN] = "foreign",
		[SHM_STATE_VERSION] = "version",
		[SHM_STATE_FORMAT] = "format",
		[SHM_STATE_OTHER_BOOT] = "other-boot",
		[SHM_STATE_CORRUPT] = "corrupt",
		[SHM_STATE_IO] = "io",
	};

	return (unsigned)v < sizeof(names) / sizeof(names[0]) ? names[v] : "?";
}
