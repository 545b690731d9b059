/* Allocation counts of the shared segment: per-user and per-listener entries and the
 * total, CAS-updated by every worker (contract and layout in shm/shm_quota.h). */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "shm/shm_internal.h"

#define QUOTA_COUNT_MASK ((UINT64_C(1) << SHM_QUOTA_COUNT_BITS) - 1)
#define QUOTA_TAG(key) ((key) & ~QUOTA_COUNT_MASK)

static_assert(((uint64_t)SHM_MAX_ALLOCS << 1) < QUOTA_COUNT_MASK, "a count never overflows");

uint64_t shm_quota_entries(uint32_t alloc_cap)
{
	uint64_t n = SHM_QUOTA_MIN_ENTRIES;

	while (n < (uint64_t)alloc_cap * 4)
		n <<= 1;
	return n;
}

uint64_t shm_quota_key(enum shm_quota_domain domain, const char *name, size_t len)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	h = (h ^ (uint8_t)domain) * UINT64_C(0x100000001b3);
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)name[i]) * UINT64_C(0x100000001b3);
	/* FNV's low bits mix poorly, and both the slot (low bits) and the tag (high bits)
	 * come from this word: finish with the splitmix64 mixer. */
	h ^= h >> 30;
	h *= UINT64_C(0xbf58476d1ce4e5b9);
	h ^= h >> 27;
	h *= UINT64_C(0x94d049bb133111eb);
	h ^= h >> 31;
	if (QUOTA_TAG(h) == 0)
		h |= ~QUOTA_COUNT_MASK;
	return h;
}

uint64_t shm_quota_region_size(uint32_t alloc_cap)
{
	uint64_t n = shm_quota_entries(alloc_cap);

	return sizeof(struct shm_quota_hdr) + n * sizeof(uint64_t) +
	       n * SHM_BW_DIRS * sizeof(uint64_t) + (uint64_t)alloc_cap * sizeof(struct shm_bw_rec);
}

void shm_quota_init(struct shm_quota_hdr *q, uint32_t alloc_cap)
{
	q->n_entries = shm_quota_entries(alloc_cap);
	q->version = SHM_QUOTA_VERSION;
	q->magic = SHM_QUOTA_MAGIC;
}

int shm_quota_validate(const struct shm_quota_hdr *q, uint32_t alloc_cap)
{
	if (q->magic != SHM_QUOTA_MAGIC || q->version != SHM_QUOTA_VERSION ||
	    q->n_entries != shm_quota_entries(alloc_cap))
		return -EBADMSG;
	return 0;
}

/* Entry i of key's window (the handle's entry count, never the segment's). */
static uint64_t *quota_ent(const struct shm *shm, uint64_t key, unsigned i)
{
	uint64_t n = shm->quota_entries;

	return &shm_quota_hdr(shm)->entries[(key + i) & (n - 1)];
}

static unsigned quota_window(const struct shm *shm)
{
	uint64_t n = shm->quota_entries;

	return n < SHM_QUOTA_WINDOW ? (unsigned)n : SHM_QUOTA_WINDOW;
}

/* Adds 1 to key's count unless it is at limit (0: none). A lost CAS rescans: somebody
 * else's change went through, so the loop is lock-free. */
static int quota_take_key(struct shm *shm, uint64_t key, uint32_t limit, int full_rc)
{
	uint64_t tag = QUOTA_TAG(key);

	for (;;) {
		uint64_t *hit = NULL, *spare = NULL, seen = 0, spare_seen = 0;

		for (unsigned i = 0; i < quota_window(shm) && !hit; i++) {
			uint64_t *e = quota_ent(shm, key, i), v = CMM_LOAD_SHARED(*e);

			if (QUOTA_TAG(v) == tag) {
				hit = e;
				seen = v;
			} else if (!spare && (v & QUOTA_COUNT_MASK) == 0) {
				spare = e;
				spare_seen = v;
			}
		}
		if (hit) {
			if (limit && (seen & QUOTA_COUNT_MASK) >= limit)
				return full_rc;
			if (uatomic_cmpxchg(hit, seen, seen + 1) == seen)
				return 0;
		} else if (spare) {
			/* A new count starts at 1, within any limit (a limit of 0 is none). */
			if (uatomic_cmpxchg(spare, spare_seen, tag | 1) == spare_seen) {
				if (QUOTA_TAG(spare_seen) != tag)
					shm_bw_key_reset(shm, spare);
				return 0;
			}
		} else {
			return -ENOSPC;
		}
	}
}

/* Takes 1 from key's count: from the first entry of its window with the tag and a count. */
static int quota_give_key(struct shm *shm, uint64_t key)
{
	uint64_t tag = QUOTA_TAG(key);

	for (;;) {
		uint64_t *hit = NULL, seen = 0;

		for (unsigned i = 0; i < quota_window(shm) && !hit; i++) {
			uint64_t *e = quota_ent(shm, key, i), v = CMM_LOAD_SHARED(*e);

			if (QUOTA_TAG(v) == tag && (v & QUOTA_COUNT_MASK) != 0) {
				hit = e;
				seen = v;
			}
		}
		if (!hit)
			return -ENOENT;
		/* The tag stays with a count of 0: the key keeps its place in the window. */
		if (uatomic_cmpxchg(hit, seen, seen - 1) == seen)
			return 0;
	}
}

static int quota_take_total(struct shm *shm, uint32_t limit)
{
	uint64_t *t = &shm_quota_hdr(shm)->total;

	for (;;) {
		uint64_t v = CMM_LOAD_SHARED(*t);

		if (limit && v >= limit)
			return -EBUSY;
		if (uatomic_cmpxchg(t, v, v + 1) == v)
			return 0;
	}
}

static void quota_give_total(struct shm *shm)
{
	uint64_t *t = &shm_quota_hdr(shm)->total;

	for (;;) {
		uint64_t v = CMM_LOAD_SHARED(*t);

		if (v == 0 || uatomic_cmpxchg(t, v, v - 1) == v)
			return;
	}
}

static int quota_rw(struct shm *shm)
{
	if (shm == NULL)
		return -EINVAL;
	shm_check_handle(shm);
	return shm->ro ? -EROFS : 0;
}

int shm_quota_take(struct shm *shm, uint64_t user_key, uint64_t listener_key,
		   const struct shm_quota_limits *lim)
{
	int rc = quota_rw(shm);

	if (rc < 0 || lim == NULL || user_key == 0)
		return rc < 0 ? rc : -EINVAL;
	rc = quota_take_key(shm, user_key, lim->user, -EDQUOT);
	if (rc < 0)
		return rc;
	rc = quota_take_total(shm, lim->total);
	if (rc < 0)
		goto undo_user;
	if (listener_key) {
		rc = quota_take_key(shm, listener_key, lim->listener, -EUSERS);
		if (rc < 0)
			goto undo_total;
	}
	return 0;
undo_total:
	quota_give_total(shm);
undo_user:
	quota_give_key(shm, user_key);
	return rc;
}

int shm_quota_give(struct shm *shm, uint64_t user_key, uint64_t listener_key)
{
	int rc = quota_rw(shm), rc2 = 0;

	if (rc < 0 || user_key == 0)
		return rc < 0 ? rc : -EINVAL;
	rc = quota_give_key(shm, user_key);
	if (rc < 0)
		return rc;
	quota_give_total(shm);
	if (listener_key)
		rc2 = quota_give_key(shm, listener_key);
	return rc2;
}

size_t shm_quota_user_off(const char *user, size_t len)
{
	size_t i = 0;

	/* A REST username is "<expiry>:<id>" (stun_rest_expiry): 1 to 19 digits, a colon. */
	while (i < len && i < 20 && user[i] >= '0' && user[i] <= '9')
		i++;
	return i > 0 && i < 20 && i + 1 < len && user[i] == ':' ? i + 1 : 0;
}

bool shm_quota_user_match(const char *user, size_t len, const char *want, size_t want_len)
{
	size_t off = shm_quota_user_off(user, len);

	if (want_len == 0)
		return false;
	return (want_len == len && memcmp(user, want, len) == 0) ||
	       (off > 0 && want_len == len - off && memcmp(user + off, want, want_len) == 0);
}

uint64_t shm_quota_user_key(const char *user, size_t len)
{
	size_t off = shm_quota_user_off(user, len);

	return shm_quota_key(SHM_QUOTA_USER, user + off, len - off);
}

uint64_t shm_quota_listener_key(uint32_t slot)
{
	char b[2] = { (char)(slot & 0xff), (char)(slot >> 8) };

	return slot < SHM_MAX_LISTENERS ? shm_quota_key(SHM_QUOTA_LISTENER, b, sizeof(b)) : 0;
}

static uint64_t rec_user_key(const struct shm_alloc *rec)
{
	size_t len = rec->user_len < SHM_ALLOC_USER_MAX ? rec->user_len : SHM_ALLOC_USER_MAX;

	return shm_quota_user_key(rec->username, len);
}

int shm_quota_take_rec(struct shm *shm, const struct shm_alloc *rec,
		       const struct shm_quota_limits *lim)
{
	return shm_quota_take(shm, rec_user_key(rec), shm_quota_listener_key(rec->listener_idx), lim);
}

int shm_quota_give_rec(struct shm *shm, const struct shm_alloc *rec)
{
	return shm_quota_give(shm, rec_user_key(rec), shm_quota_listener_key(rec->listener_idx));
}

uint64_t *shm_quota_entry_of(const struct shm *shm, uint64_t key)
{
	uint64_t tag = QUOTA_TAG(key);

	for (unsigned i = 0; i < quota_window(shm); i++) {
		uint64_t *e = quota_ent(shm, key, i), v = CMM_LOAD_SHARED(*e);

		if (QUOTA_TAG(v) == tag && (v & QUOTA_COUNT_MASK) != 0)
			return e;
	}
	return NULL;
}

uint64_t shm_quota_count(const struct shm *shm, uint64_t key)
{
	uint64_t tag = QUOTA_TAG(key), n = 0;

	shm_check_handle(shm);
	for (unsigned i = 0; i < quota_window(shm); i++) {
		uint64_t v = CMM_LOAD_SHARED(*quota_ent(shm, key, i));

		if (QUOTA_TAG(v) == tag)
			n += v & QUOTA_COUNT_MASK;
	}
	return n;
}

uint64_t shm_quota_total(const struct shm *shm)
{
	shm_check_handle(shm);
	return CMM_LOAD_SHARED(shm_quota_hdr(shm)->total);
}
