/* Shared segment lifecycle: creation (sealed memfd, or a state file's fd), geometry and
 * region table, read-only attach with full validation, layout fingerprints. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm/shm_internal.h"

#define SHM_PAGE 4096u

int shm_config_check(const struct shm_config *cfg)
{
	if (cfg == NULL)
		return -EINVAL;
	if (cfg->n_slots < 1 || cfg->n_slots > SHM_MAX_SLOTS)
		return -EINVAL;
	if (cfg->snap_count < SHM_MIN_SNAPS || cfg->snap_count > SHM_MAX_SNAPS)
		return -EINVAL;
	if (cfg->snap_size < SHM_MIN_SNAP_SIZE || cfg->snap_size > SHM_MAX_SNAP_SIZE)
		return -EINVAL;
	if (cfg->alloc_cap > SHM_MAX_ALLOCS)
		return -EINVAL;
	return 0;
}

/* With the limits of shm_config_check() every product below stays far from 2^64:
 * 64 * 2^30 snapshot bytes + 2^24 * 2.5 KiB records < 2^37. */
void shm_geom_compute(const struct shm_config *cfg, struct shm_geom *g)
{
	g->off_slots = shm_round_up(sizeof(struct shm_hdr), SHM_PAGE);
	g->slot_stride = shm_round_up(sizeof(struct shm_slot), SHM_CL);
	g->off_snaps =
		shm_round_up(g->off_slots + (uint64_t)cfg->n_slots * g->slot_stride, SHM_PAGE);
	g->snap_stride =
		shm_round_up(sizeof(struct shm_snap_hdr) + (uint64_t)cfg->snap_size, SHM_PAGE);
	g->off_allocs = g->off_snaps + (uint64_t)cfg->snap_count * g->snap_stride;
	g->alloc_stride = shm_round_up(sizeof(struct shm_alloc), SHM_ALLOC_STRIDE_ALIGN);
	g->off_trust =
		shm_round_up(g->off_allocs + (uint64_t)cfg->alloc_cap * g->alloc_stride, SHM_PAGE);
	g->trust_size = sizeof(struct shm_trust_hdr) + shm_trust_entries_bytes() +
			SHM_AUTHFAIL_BYTES;
	g->off_quota = shm_round_up(g->off_trust + g->trust_size, SHM_PAGE);
	g->quota_size = shm_quota_region_size(cfg->alloc_cap);
	g->off_relay = shm_round_up(g->off_quota + g->quota_size, SHM_PAGE);
	g->relay_size = shm_relay_region_size(cfg->alloc_cap);
	g->off_revoke = shm_round_up(g->off_relay + g->relay_size, SHM_PAGE);
	g->revoke_size = sizeof(struct shm_revoke_hdr) +
			 (uint64_t)SHM_REVOKE_MAX * sizeof(struct shm_revoke_ent);
	g->off_records = shm_round_up(g->off_revoke + g->revoke_size, SHM_PAGE);
	g->records_size = sizeof(struct shm_records_hdr) +
			  (uint64_t)cfg->n_slots * sizeof(struct shm_rec_ring);
	g->off_lslot = shm_round_up(g->off_records + g->records_size, SHM_PAGE);
	g->lslot_size = sizeof(struct shm_lslot_hdr);
	g->size = shm_round_up(g->off_lslot + g->lslot_size, SHM_PAGE);
}

static uint64_t fnv_mix(uint64_t h, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		h ^= (v >> (8 * i)) & 0xffu;
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

#define LH(h, v) ((h) = fnv_mix((h), (uint64_t)(v)))
#define FNV_BASIS UINT64_C(0xcbf29ce484222325)

static uint64_t format_slots(void)
{
	uint64_t h = FNV_BASIS;

	LH(h, sizeof(struct shm_slot));
	LH(h, offsetof(struct shm_slot, pid));
	LH(h, offsetof(struct shm_slot, alloc_hint));
	LH(h, offsetof(struct shm_slot, ctr));
	LH(h, offsetof(struct shm_slot, src));
	LH(h, sizeof(struct shm_src));
	LH(h, sizeof(struct shm_counters));
	LH(h, SHM_CTR__COUNT);
	LH(h, SHM_LCTR__COUNT);
	LH(h, SHM_CCTR__COUNT);
	LH(h, SHM_MAX_LISTENERS);
	LH(h, SHM_MAX_CLUSTERS);
	LH(h, SHM_LIFE_BUCKETS);
	return h;
}

static uint64_t format_snaps(void)
{
	uint64_t h = FNV_BASIS;

	LH(h, sizeof(struct shm_snap_hdr));
	LH(h, offsetof(struct shm_snap_hdr, retire_token));
	LH(h, offsetof(struct shm_snap_hdr, payload));
	return h;
}

/* The record format: what a take-over copies from an earlier run's file. */
static uint64_t format_allocs(void)
{
	uint64_t h = FNV_BASIS;

	LH(h, SHM_ALLOC_FORMAT);
	LH(h, sizeof(struct shm_alloc));
	LH(h, offsetof(struct shm_alloc, owner));
	LH(h, offsetof(struct shm_alloc, listener_idx));
	LH(h, offsetof(struct shm_alloc, client));
	LH(h, offsetof(struct shm_alloc, server));
	LH(h, offsetof(struct shm_alloc, relay));
	LH(h, offsetof(struct shm_alloc, relay2));
	LH(h, offsetof(struct shm_alloc, created_ns));
	LH(h, offsetof(struct shm_alloc, cred_expiry));
	LH(h, offsetof(struct shm_alloc, txid));
	LH(h, offsetof(struct shm_alloc, username));
	LH(h, offsetof(struct shm_alloc, realm));
	LH(h, offsetof(struct shm_alloc, key));
	LH(h, offsetof(struct shm_alloc, perms));
	LH(h, offsetof(struct shm_alloc, chans));
	LH(h, offsetof(struct shm_alloc, ctr));
	LH(h, sizeof(struct shm_addr));
	LH(h, offsetof(struct shm_addr, port));
	LH(h, sizeof(struct shm_perm));
	LH(h, sizeof(struct shm_chan));
	LH(h, offsetof(struct shm_chan, number));
	LH(h, offsetof(struct shm_chan, expires_ns));
	LH(h, SHM_ALLOC_MAX_PERMS);
	LH(h, SHM_ALLOC_MAX_CHANS);
	LH(h, SHM_ALLOC_USER_MAX);
	LH(h, SHM_ALLOC_REALM_MAX);
	LH(h, SHM_ALLOC_KEY_MAX);
	LH(h, SHM_ACTR__COUNT);
	return h;
}

static uint64_t format_trust(void)
{
	uint64_t h = FNV_BASIS;

	LH(h, sizeof(struct shm_trust_hdr));
	LH(h, offsetof(struct shm_trust_hdr, entries));
	LH(h, sizeof(struct shm_trust_ent));
	LH(h, SHM_TRUST_SETS);
	LH(h, SHM_TRUST_WAYS);
	LH(h, SHM_TRUST_VERSION);
	LH(h, SHM_AUTHFAIL_SETS);
	LH(h, SHM_AUTHFAIL_WAYS);
	return h;
}

static uint64_t format_quota(void)
{
	uint64_t h = FNV_BASIS;

	LH(h, sizeof(struct shm_quota_hdr));
	LH(h, offsetof(struct shm_quota_hdr, total));
	LH(h, offsetof(struct shm_quota_hdr, listener_drops));
	LH(h, offsetof(struct shm_quota_hdr, entries));
	LH(h, sizeof(struct shm_bw_rec));
	LH(h, SHM_BW_DIRS);
	LH(h, SHM_QUOTA_WINDOW);
	LH(h, SHM_QUOTA_MIN_ENTRIES);
	LH(h, SHM_QUOTA_COUNT_BITS);
	LH(h, SHM_QUOTA_VERSION);
	return h;
}

static uint64_t format_relay(void)
{
	uint64_t h = FNV_BASIS;

	LH(h, sizeof(struct shm_relay_hdr));
	LH(h, offsetof(struct shm_relay_hdr, ways_tab));
	LH(h, sizeof(struct shm_relay_ctr));
	LH(h, SHM_RELAY_PORTS);
	LH(h, SHM_RELAY_WAYS);
	LH(h, SHM_RELAY_VERSION);
	LH(h, SHM_PPOOL_WAYS);
	LH(h, SHM_PPOOL_RESV);
	LH(h, sizeof(struct shm_ppool_ent));
	return h;
}

static uint64_t format_revoke(void)
{
	uint64_t h = FNV_BASIS;

	LH(h, sizeof(struct shm_revoke_hdr));
	LH(h, offsetof(struct shm_revoke_hdr, seq));
	LH(h, offsetof(struct shm_revoke_hdr, ent));
	LH(h, sizeof(struct shm_revoke_ent));
	LH(h, offsetof(struct shm_revoke_ent, kind));
	LH(h, offsetof(struct shm_revoke_ent, name));
	LH(h, SHM_REVOKE_MAX);
	LH(h, SHM_REVOKE_NAME_MAX);
	LH(h, SHM_REVOKE_VERSION);
	return h;
}

static uint64_t format_records(void)
{
	uint64_t h = FNV_BASIS;

	LH(h, sizeof(struct shm_records_hdr));
	LH(h, sizeof(struct shm_rec_ring));
	LH(h, offsetof(struct shm_rec_ring, tail));
	LH(h, offsetof(struct shm_rec_ring, ev));
	LH(h, sizeof(struct shm_rec_ev));
	LH(h, offsetof(struct shm_rec_ev, username));
	LH(h, SHM_REC_RING);
	LH(h, SHM_RECORDS_VERSION);
	return h;
}

static uint64_t format_lslot(void)
{
	uint64_t h = FNV_BASIS;

	LH(h, sizeof(struct shm_lslot_hdr));
	LH(h, offsetof(struct shm_lslot_hdr, ent));
	LH(h, sizeof(struct shm_lslot_ent));
	LH(h, offsetof(struct shm_lslot_ent, key));
	LH(h, offsetof(struct shm_lslot_ent, name));
	LH(h, SHM_MAX_LISTENERS);
	LH(h, SHM_LSLOT_NAME_MAX);
	LH(h, SHM_LSLOT_VERSION);
	return h;
}

uint64_t shm_region_format(uint32_t id)
{
	switch (id) {
	case SHM_REGION_SLOTS:
		return format_slots();
	case SHM_REGION_SNAPS:
		return format_snaps();
	case SHM_REGION_ALLOCS:
		return format_allocs();
	case SHM_REGION_TRUST:
		return format_trust();
	case SHM_REGION_QUOTA:
		return format_quota();
	case SHM_REGION_RELAY:
		return format_relay();
	case SHM_REGION_REVOKE:
		return format_revoke();
	case SHM_REGION_RECORDS:
		return format_records();
	case SHM_REGION_LSLOTS:
		return format_lslot();
	}
	return 0;
}

uint64_t shm_layout_hash(void)
{
	uint64_t h = FNV_BASIS;

	LH(h, SHM_LAYOUT_VERSION);
	LH(h, sizeof(struct shm_hdr));
	LH(h, offsetof(struct shm_hdr, off_trust));
	LH(h, offsetof(struct shm_hdr, regions));
	LH(h, offsetof(struct shm_hdr, hdr_check));
	LH(h, offsetof(struct shm_hdr, generation));
	LH(h, offsetof(struct shm_hdr, gen_floor));
	LH(h, offsetof(struct shm_hdr, epoch));
	LH(h, offsetof(struct shm_hdr, cur_snap));
	LH(h, format_slots());
	LH(h, format_snaps());
	LH(h, format_allocs());
	LH(h, format_trust());
	LH(h, format_quota());
	LH(h, format_relay());
	LH(h, format_revoke());
	LH(h, format_records());
	LH(h, format_lslot());
	return h;
}

void shm_boot_id(char out[SHM_BOOT_ID_LEN])
{
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	ssize_t n = -1;

	memset(out, 0, SHM_BOOT_ID_LEN);
	if (fd >= 0) {
		n = read(fd, out, SHM_BOOT_ID_LEN - 1);
		close(fd);
	}
	if (n <= 0) {
		memset(out, 0, SHM_BOOT_ID_LEN);
		return;
	}
	while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\0'))
		out[--n] = '\0';
}

static void hdr_region(struct shm_hdr *h, uint32_t id, uint32_t count, uint64_t off,
		       uint64_t stride)
{
	struct shm_region *r = &h->regions[h->n_regions++];

	r->id = id;
	r->count = count;
	r->off = off;
	r->stride = stride;
	r->format = shm_region_format(id);
}

uint64_t shm_hdr_checksum(const struct shm_hdr *h)
{
	/* From the field after the magic: the magic is stored last (see hdr_init). */
	return shm_checksum(&h->layout_version, offsetof(struct shm_hdr, hdr_check) -
							offsetof(struct shm_hdr, layout_version));
}

static void hdr_init(struct shm_hdr *h, const struct shm_config *cfg, const struct shm_geom *g)
{
	h->layout_version = SHM_LAYOUT_VERSION;
	h->hdr_size = sizeof(*h);
	h->layout_hash = shm_layout_hash();
	h->seg_size = g->size;
	h->n_slots = cfg->n_slots;
	h->snap_count = cfg->snap_count;
	h->snap_size = cfg->snap_size;
	h->alloc_cap = cfg->alloc_cap;
	h->off_slots = g->off_slots;
	h->slot_stride = g->slot_stride;
	h->off_snaps = g->off_snaps;
	h->snap_stride = g->snap_stride;
	h->off_allocs = g->off_allocs;
	h->alloc_stride = g->alloc_stride;
	h->off_trust = g->off_trust;
	h->trust_size = g->trust_size;
	shm_boot_id(h->boot_id);
	hdr_region(h, SHM_REGION_SLOTS, cfg->n_slots, g->off_slots, g->slot_stride);
	hdr_region(h, SHM_REGION_SNAPS, cfg->snap_count, g->off_snaps, g->snap_stride);
	hdr_region(h, SHM_REGION_ALLOCS, cfg->alloc_cap, g->off_allocs, g->alloc_stride);
	hdr_region(h, SHM_REGION_TRUST, 1, g->off_trust, g->trust_size);
	hdr_region(h, SHM_REGION_QUOTA, 1, g->off_quota, g->quota_size);
	hdr_region(h, SHM_REGION_RELAY, 1, g->off_relay, g->relay_size);
	hdr_region(h, SHM_REGION_REVOKE, 1, g->off_revoke, g->revoke_size);
	hdr_region(h, SHM_REGION_RECORDS, 1, g->off_records, g->records_size);
	hdr_region(h, SHM_REGION_LSLOTS, 1, g->off_lslot, g->lslot_size);
	h->hdr_check = shm_hdr_checksum(h);
	h->master_pid = (int32_t)getpid();
	h->epoch = 1;
	h->cur_snap = 0;
	/* magic last: a reader that sees it sees an initialised header */
	cmm_smp_wmb();
	CMM_STORE_SHARED(h->magic, SHM_MAGIC);
}

int shm_nonce_key_set(struct shm *shm, const uint8_t key[SHM_NONCE_KEY_LEN])
{
	struct shm_hdr *h;

	shm_check_handle(shm);
	if (shm->ro)
		return -EROFS;
	h = shm_hdr(shm);
	memcpy(h->nonce_key, key, SHM_NONCE_KEY_LEN);
	h->hdr_check = shm_hdr_checksum(h);
	return 0;
}

void shm_nonce_key_get(const struct shm *shm, uint8_t key[SHM_NONCE_KEY_LEN])
{
	shm_check_handle(shm);
	memcpy(key, shm_hdr(shm)->nonce_key, SHM_NONCE_KEY_LEN);
}

const uint32_t *shm_taken(const struct shm *shm, uint32_t *n)
{
	shm_check_handle(shm);
	*n = shm->n_taken;
	return shm->taken;
}

const uint32_t *shm_taken_from(const struct shm *shm, uint32_t *n)
{
	shm_check_handle(shm);
	*n = shm->n_taken;
	return shm->taken_from;
}

int shm_taken_group(struct shm *shm)
{
	unsigned ns = shm->cfg.n_slots;
	uint32_t n = shm->n_taken, *off, *to, *from;

	shm_check_handle(shm);
	if (shm->taken == NULL || shm->taken_off != NULL)
		return 0;
	off = calloc(ns + 2, sizeof(*off));
	to = malloc(n * sizeof(*to));
	from = malloc(n * sizeof(*from));
	if (off == NULL || to == NULL || from == NULL) {
		free(off);
		free(to);
		free(from);
		return -ENOMEM;
	}
	/* A counting sort on the owner the copy wrote (r->owner < n_slots). */
	for (uint32_t i = 0; i < n; i++)
		off[shm_alloc_at(shm, shm->taken[i])->owner % ns + 2]++;
	for (unsigned s = 2; s < ns + 2; s++)
		off[s] += off[s - 1];
	for (uint32_t i = 0; i < n; i++) {
		uint32_t k = off[shm_alloc_at(shm, shm->taken[i])->owner % ns + 1]++;

		to[k] = shm->taken[i];
		from[k] = shm->taken_from[i];
	}
	free(shm->taken);
	free(shm->taken_from);
	shm->taken = to;
	shm->taken_from = from;
	shm->cap_taken = n;
	shm->taken_off = off;	/* [s]..[s + 1] after the pass above shifted it down */
	return 0;
}

const uint32_t *shm_taken_slot(const struct shm *shm, unsigned slot, uint32_t *n)
{
	shm_check_handle(shm);
	*n = 0;
	if (shm->taken == NULL)
		return NULL;
	if (shm->taken_off == NULL || slot >= shm->cfg.n_slots) {
		*n = shm->n_taken;
		return shm->taken;
	}
	*n = shm->taken_off[slot + 1] - shm->taken_off[slot];
	return shm->taken + shm->taken_off[slot];
}

void shm_lock_set(struct shm *shm, int fd)
{
	shm_check_handle(shm);
	if (shm->lock_fd >= 0)
		close(shm->lock_fd);
	if (shm->file_lock_fd >= 0)
		close(shm->file_lock_fd);
	shm->lock_fd = fd;
	shm->file_lock_fd = -1;
}

int shm_lock_fd(const struct shm *shm)
{
	shm_check_handle(shm);
	return shm->lock_fd;
}

int shm_file_lock_fd(const struct shm *shm)
{
	shm_check_handle(shm);
	return shm->file_lock_fd;
}

static struct shm *handle_new(int fd, bool ro, void *base, const struct shm_config *cfg,
			      const struct shm_geom *g)
{
	struct shm *shm = calloc(1, sizeof(*shm));

	if (shm == NULL)
		return NULL;
	shm->magic = SHM_HANDLE_MAGIC;
	shm->ro = ro;
	shm->fd = fd;
	shm->base = base;
	shm->size = g->size;
	shm->cfg = *cfg;
	shm->off_slots = g->off_slots;
	shm->slot_stride = g->slot_stride;
	shm->off_snaps = g->off_snaps;
	shm->snap_stride = g->snap_stride;
	shm->off_allocs = g->off_allocs;
	shm->alloc_stride = g->alloc_stride;
	shm->off_trust = g->off_trust;
	shm->off_quota = g->off_quota;
	shm->quota_entries = shm_quota_entries(cfg->alloc_cap);
	shm->off_relay = g->off_relay;
	shm->off_revoke = g->off_revoke;
	shm->off_records = g->off_records;
	shm->off_lslot = g->off_lslot;
	shm->lock_fd = -1;
	shm->file_lock_fd = -1;
	return shm;
}

/* ftruncate + fallocate (+ seals for a memfd); a missing fallocate on the backing fs is
 * tolerated (memfd and the state directory's tmpfs have it; the fallback only loses the
 * early ENOSPC). A regular file cannot be sealed: only the daemon's user may write it. */
static int fd_size(int fd, uint64_t size, bool memfd)
{
	if (ftruncate(fd, (off_t)size) < 0)
		return -errno;
	if (memfd && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		return -errno;
	return 0;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Every page of the segment allocated now, so that a memory shortage fails the start
 * instead of raising SIGBUS later. MADV_POPULATE_WRITE (Linux 5.14) allocates the file's
 * pages and maps them in one pass: a take-over writes every record page next, and the
 * page faults of an fallocate'd but unmapped file were a third of its copy (250,000
 * records: 700 MiB). Older kernels: fallocate. */
static int seg_populate(int fd, void *base, uint64_t size)
{
	if (madvise(base, (size_t)size, MADV_POPULATE_WRITE) == 0)
		return 0;
	if (errno != EINVAL)
		return errno == EFAULT || errno == EHWPOISON ? -ENOMEM : -errno;
	if (fallocate(fd, 0, 0, (off_t)size) < 0 && errno != EOPNOTSUPP)
		return -errno;
	return 0;
}

int shm_init_fd(int fd, bool memfd, const struct shm_config *cfg, struct shm **out)
{
	struct shm_geom g;
	struct shm *shm;
	void *base;
	int rc;

	if (out == NULL || fd < 0 || shm_config_check(cfg) < 0)
		return -EINVAL;
	shm_geom_compute(cfg, &g);
	if (g.size > SIZE_MAX)
		return -ENOMEM;
	rc = fd_size(fd, g.size, memfd);
	if (rc < 0)
		return rc;
	base = mmap(NULL, (size_t)g.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	rc = seg_populate(fd, base, g.size);
	if (rc < 0) {
		munmap(base, (size_t)g.size);
		return rc;
	}
	rc = shm_trust_init((struct shm_trust_hdr *)((uint8_t *)base + g.off_trust));
	if (rc < 0) {
		munmap(base, (size_t)g.size);
		return rc;
	}
	shm_quota_init((struct shm_quota_hdr *)((uint8_t *)base + g.off_quota), cfg->alloc_cap);
	shm_relay_init((struct shm_relay_hdr *)((uint8_t *)base + g.off_relay));
	shm_revoke_init((struct shm_revoke_hdr *)((uint8_t *)base + g.off_revoke));
	shm_records_init((struct shm_records_hdr *)((uint8_t *)base + g.off_records),
			 cfg->n_slots);
	shm_lslot_init((struct shm_lslot_hdr *)((uint8_t *)base + g.off_lslot));
	hdr_init(base, cfg, &g);
	shm = handle_new(fd, false, base, cfg, &g);
	if (shm == NULL) {
		munmap(base, (size_t)g.size);
		return -ENOMEM;
	}
	*out = shm;
	return 0;
}

int shm_create(const struct shm_config *cfg, const char *name, struct shm **out)
{
	int fd, rc;

	if (out == NULL || shm_config_check(cfg) < 0)
		return -EINVAL;
	fd = memfd_create(name != NULL ? name : "turngate-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	rc = shm_init_fd(fd, true, cfg, out);
	if (rc < 0)
		close(fd);
	return rc;
}

/* Everything the handle will trust is checked here against values recomputed from the
 * (range-checked) config, so attach never accepts geometry this build would not create. */
static int hdr_validate(const struct shm_hdr *h, uint64_t file_size, struct shm_config *cfg,
			struct shm_geom *g)
{
	if (h->magic != SHM_MAGIC || h->layout_version != SHM_LAYOUT_VERSION ||
	    h->hdr_size != sizeof(*h) || h->layout_hash != shm_layout_hash())
		return -EBADMSG;
	cfg->n_slots = h->n_slots;
	cfg->snap_count = h->snap_count;
	cfg->snap_size = h->snap_size;
	cfg->alloc_cap = h->alloc_cap;
	if (shm_config_check(cfg) < 0)
		return -EINVAL;
	shm_geom_compute(cfg, g);
	if (h->seg_size != g->size || file_size != g->size || g->size > SIZE_MAX)
		return -EINVAL;
	if (h->off_slots != g->off_slots || h->slot_stride != g->slot_stride ||
	    h->off_snaps != g->off_snaps || h->snap_stride != g->snap_stride ||
	    h->off_allocs != g->off_allocs || h->alloc_stride != g->alloc_stride ||
	    h->off_trust != g->off_trust || h->trust_size != g->trust_size)
		return -EINVAL;
	/* Last, so that inconsistent geometry reads as -EINVAL: the fields after it are
	 * covered too (boot id, nonce key, region table). */
	if (h->hdr_check != shm_hdr_checksum(h))
		return -EBADMSG;
	return 0;
}

int shm_attach_ro(int fd, struct shm **out)
{
	struct shm_hdr h;
	struct shm_config cfg;
	struct shm_geom g;
	struct stat st;
	struct shm *shm;
	void *base;
	int dfd, rc;
	ssize_t n;

	if (out == NULL || fd < 0)
		return -EINVAL;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_size < (off_t)sizeof(h))
		return -EBADMSG;
	n = pread(fd, &h, sizeof(h), 0);
	if (n < 0)
		return -errno;
	if ((size_t)n != sizeof(h))
		return -EBADMSG;
	rc = hdr_validate(&h, (uint64_t)st.st_size, &cfg, &g);
	if (rc < 0)
		return rc;
	dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -errno;
	base = mmap(NULL, (size_t)g.size, PROT_READ, MAP_SHARED, dfd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		close(dfd);
		return rc;
	}
	rc = shm_trust_validate(
		(const struct shm_trust_hdr *)((const uint8_t *)base + g.off_trust));
	if (rc == 0)
		rc = shm_quota_validate((const struct shm_quota_hdr *)((const uint8_t *)base +
								       g.off_quota),
					cfg.alloc_cap);
	if (rc == 0)
		rc = shm_relay_validate(
			(const struct shm_relay_hdr *)((const uint8_t *)base + g.off_relay));
	if (rc == 0)
		rc = shm_revoke_validate(
			(const struct shm_revoke_hdr *)((const uint8_t *)base + g.off_revoke));
	if (rc == 0)
		rc = shm_records_validate(
			(const struct shm_records_hdr *)((const uint8_t *)base + g.off_records),
			cfg.n_slots);
	if (rc == 0)
		rc = shm_lslot_validate(
			(const struct shm_lslot_hdr *)((const uint8_t *)base + g.off_lslot));
	if (rc < 0)
		goto fail;
	shm = handle_new(dfd, true, base, &cfg, &g);
	if (shm == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	*out = shm;
	return 0;
fail:
	munmap(base, (size_t)g.size);
	close(dfd);
	return rc;
}

void shm_destroy(struct shm *shm)
{
	if (shm == NULL)
		return;
	shm_check_handle(shm);
	munmap(shm->base, shm->size);
	close(shm->fd);
	free(shm->taken);
	free(shm->taken_from);
	free(shm->taken_off);
	shm_records_backlog_free(shm);
	if (shm->lock_fd >= 0)
		close(shm->lock_fd);
	if (shm->file_lock_fd >= 0)
		close(shm->file_lock_fd);
	shm->magic = 0;
	free(shm);
}

int shm_fd(const struct shm *shm)
{
	shm_check_handle(shm);
	return shm->fd;
}

void shm_get_config(const struct shm *shm, struct shm_config *out)
{
	shm_check_handle(shm);
	*out = shm->cfg;
}

size_t shm_size(const struct shm *shm)
{
	shm_check_handle(shm);
	return shm->size;
}
