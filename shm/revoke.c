/* Revocation list of the shared segment: the master's seqlocked writes, every process's
 * reads (contract and layout in shm/shm_revoke.h). */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "shm/shm_internal.h"
#include "shm/shm_quota.h"
#include "shm/shm_revoke.h"

#define SHM_REVOKE_TRIES 64u

void shm_revoke_init(struct shm_revoke_hdr *h)
{
	h->cap = SHM_REVOKE_MAX;
	h->version = SHM_REVOKE_VERSION;
	h->magic = SHM_REVOKE_MAGIC;
}

int shm_revoke_validate(const struct shm_revoke_hdr *h)
{
	if (h->magic != SHM_REVOKE_MAGIC || h->version != SHM_REVOKE_VERSION ||
	    h->cap != SHM_REVOKE_MAX || h->count > SHM_REVOKE_MAX)
		return -EBADMSG;
	return 0;
}

bool shm_revoke_ent_sane(const struct shm_revoke_ent *e)
{
	return (e->kind == SHM_REVOKE_USER || e->kind == SHM_REVOKE_USER_ID) && e->len >= 1 &&
	       e->len <= SHM_REVOKE_NAME_MAX && e->since >= 0 && e->until >= 0;
}

static bool kind_ok(enum shm_revoke_kind kind)
{
	return kind == SHM_REVOKE_USER || kind == SHM_REVOKE_USER_ID;
}

/* The writer's brackets: readers that saw an odd word, or another word after their
 * scan, read again. */
static void write_begin(struct shm_revoke_hdr *h)
{
	CMM_STORE_SHARED(h->seq, h->seq + 1);
	cmm_smp_wmb();
}

static void write_end(struct shm_revoke_hdr *h)
{
	cmm_smp_wmb();
	CMM_STORE_SHARED(h->seq, h->seq + 1);
}

static int find(const struct shm_revoke_hdr *h, enum shm_revoke_kind kind, const char *name,
		size_t len)
{
	for (uint32_t i = 0; i < h->count && i < SHM_REVOKE_MAX; i++)
		if (h->ent[i].kind == (uint32_t)kind && h->ent[i].len == len &&
		    memcmp(h->ent[i].name, name, len) == 0)
			return (int)i;
	return -1;
}

/* Entry i goes; the last one takes its place (inside the caller's write brackets). */
static void drop(struct shm_revoke_hdr *h, uint32_t i)
{
	uint32_t last = h->count - 1;

	if (i != last)
		h->ent[i] = h->ent[last];
	memset(&h->ent[last], 0, sizeof(h->ent[last]));
	CMM_STORE_SHARED(h->count, last);
}

static struct shm_revoke_hdr *writable(struct shm *shm)
{
	shm_check_handle(shm);
	return shm->ro ? NULL : shm_revoke_hdr(shm);
}

unsigned shm_revoke_prune(struct shm *shm, int64_t now)
{
	struct shm_revoke_hdr *h = writable(shm);
	unsigned n = 0;

	if (h == NULL)
		return 0;
	for (uint32_t i = 0; i < h->count;) {
		if (h->ent[i].until != 0 && h->ent[i].until <= now) {
			if (n++ == 0)
				write_begin(h);
			drop(h, i);
		} else {
			i++;
		}
	}
	if (n > 0)
		write_end(h);
	return n;
}

int shm_revoke_add(struct shm *shm, enum shm_revoke_kind kind, const char *name, size_t len,
		   int64_t now, int64_t until)
{
	struct shm_revoke_hdr *h = writable(shm);
	struct shm_revoke_ent *e;
	int i;

	if (h == NULL)
		return -EROFS;
	if (!kind_ok(kind) || name == NULL || len == 0 || len > SHM_REVOKE_NAME_MAX ||
	    now < 0 || until < 0 || (until != 0 && until <= now))
		return -EINVAL;
	shm_revoke_prune(shm, now);
	i = find(h, kind, name, len);
	if (i < 0 && h->count >= SHM_REVOKE_MAX)
		return -ENOSPC;
	write_begin(h);
	if (i >= 0) {
		e = &h->ent[i];
	} else {
		e = &h->ent[h->count];
		memset(e, 0, sizeof(*e));
		e->kind = (uint32_t)kind;
		e->len = (uint32_t)len;
		memcpy(e->name, name, len);
	}
	e->since = now;
	e->until = until;
	if (i < 0)
		CMM_STORE_SHARED(h->count, h->count + 1);
	write_end(h);
	return i >= 0 ? 1 : 0;
}

int shm_revoke_del(struct shm *shm, enum shm_revoke_kind kind, const char *name, size_t len)
{
	struct shm_revoke_hdr *h = writable(shm);
	int i;

	if (h == NULL)
		return -EROFS;
	if (!kind_ok(kind) || name == NULL || len == 0 || len > SHM_REVOKE_NAME_MAX)
		return -EINVAL;
	i = find(h, kind, name, len);
	if (i < 0)
		return -ENOENT;
	write_begin(h);
	drop(h, (uint32_t)i);
	write_end(h);
	return 0;
}

static bool live(const struct shm_revoke_ent *e, int64_t now)
{
	return e->until == 0 || e->until > now;
}

/* A reader's pass over the entries, retried by seq_read while the master writes. */
struct revoke_pass {
	int64_t now;
	struct shm_revoke_ent *out; /* list: the copies */
	unsigned cap;
	const char *user; /* match: the username, and where its user id starts */
	size_t len, id_off;
};

typedef unsigned (*revoke_pass_fn)(const struct shm_revoke_ent *ent, uint32_t n,
				   const struct revoke_pass *p);

/* Runs fn over the entries until a pass saw no write (a bounded number of tries). */
static unsigned seq_read(const struct shm *shm, revoke_pass_fn fn, const struct revoke_pass *p)
{
	const struct shm_revoke_hdr *h;
	unsigned k = 0;

	shm_check_handle(shm);
	h = shm_revoke_hdr(shm);
	for (unsigned t = 0; t < SHM_REVOKE_TRIES; t++) {
		uint64_t s = CMM_LOAD_SHARED(h->seq);
		uint32_t n;

		cmm_smp_rmb();
		n = CMM_LOAD_SHARED(h->count);
		k = fn(h->ent, n < SHM_REVOKE_MAX ? n : SHM_REVOKE_MAX, p);
		cmm_smp_rmb();
		if ((s & 1u) == 0 && CMM_LOAD_SHARED(h->seq) == s)
			break;
	}
	return k;
}

static unsigned list_pass(const struct shm_revoke_ent *ent, uint32_t n,
			  const struct revoke_pass *p)
{
	unsigned k = 0;

	for (uint32_t i = 0; i < n && k < p->cap; i++) {
		p->out[k] = ent[i];
		if (shm_revoke_ent_sane(&p->out[k]) && live(&p->out[k], p->now))
			k++;
	}
	return k;
}

unsigned shm_revoke_list(const struct shm *shm, int64_t now, struct shm_revoke_ent *out,
			 unsigned cap)
{
	struct revoke_pass p = { .now = now, .out = out, .cap = cap };

	return seq_read(shm, list_pass, &p);
}

static unsigned count_pass(const struct shm_revoke_ent *ent, uint32_t n,
			   const struct revoke_pass *p)
{
	unsigned k = 0;

	for (uint32_t i = 0; i < n; i++)
		k += live(&ent[i], p->now);
	return k;
}

unsigned shm_revoke_count(const struct shm *shm, int64_t now)
{
	struct revoke_pass p = { .now = now };

	return seq_read(shm, count_pass, &p);
}

/* shm_revoke_names with the user id's start id_off (shm_quota_user_off) given: a pass
 * finds it once for every entry. */
static bool names_at(enum shm_revoke_kind kind, const char *name, size_t nlen,
		     const char *user, size_t len, size_t id_off)
{
	if (kind == SHM_REVOKE_USER)
		return nlen == len && memcmp(name, user, len) == 0;
	if (kind == SHM_REVOKE_USER_ID)
		return nlen == len - id_off && memcmp(name, user + id_off, nlen) == 0;
	return false;
}

bool shm_revoke_names(enum shm_revoke_kind kind, const char *name, size_t nlen,
		      const char *user, size_t len)
{
	return nlen > 0 && nlen <= SHM_REVOKE_NAME_MAX &&
	       names_at(kind, name, nlen, user, len, shm_quota_user_off(user, len));
}

static bool ent_match(const struct shm_revoke_ent *e, const struct revoke_pass *p)
{
	size_t elen = e->len;

	if (elen == 0 || elen > SHM_REVOKE_NAME_MAX || !live(e, p->now))
		return false;
	return names_at(e->kind, e->name, elen, p->user, p->len, p->id_off);
}

static unsigned match_pass(const struct shm_revoke_ent *ent, uint32_t n,
			   const struct revoke_pass *p)
{
	for (uint32_t i = 0; i < n; i++)
		if (ent_match(&ent[i], p))
			return 1;
	return 0;
}

bool shm_revoke_match(const struct shm *shm, const char *user, size_t len, int64_t now)
{
	const struct shm_revoke_hdr *h;
	struct revoke_pass p = { .now = now, .user = user, .len = len };

	shm_check_handle(shm);
	h = shm_revoke_hdr(shm);
	if (CMM_LOAD_SHARED(h->count) == 0 && (CMM_LOAD_SHARED(h->seq) & 1u) == 0)
		return false;
	p.id_off = shm_quota_user_off(user, len);
	return seq_read(shm, match_pass, &p) != 0;
}

uint64_t shm_revoke_seq(const struct shm *shm)
{
	shm_check_handle(shm);
	return CMM_LOAD_SHARED(shm_revoke_hdr(shm)->seq);
}

const char *shm_revoke_kind_name(enum shm_revoke_kind kind)
{
	return kind == SHM_REVOKE_USER ? "user" : kind == SHM_REVOKE_USER_ID ? "user_id" : NULL;
}
