/* Private layout of the shared segment and of the process-local handle; shm/ only. */
#ifndef TG_SHM_SHM_INTERNAL_H
#define TG_SHM_SHM_INTERNAL_H

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include <urcu/arch.h>
#include <urcu/system.h>
#include <urcu/uatomic.h>

#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_authfail.h"
#include "shm/shm_bw.h"
#include "shm/shm_lslot.h"
#include "shm/shm_quota.h"
#include "shm/shm_ppool.h"
#include "shm/shm_records.h"
#include "shm/shm_relay.h"
#include "shm/shm_revoke.h"
#include "shm/shm_source.h"
#include "shm/shm_trust.h"

/* The uatomic emulation of 32-bit x86 uses a process-local mutex: never valid here. */
static_assert(sizeof(long) == 8, "shm requires a 64-bit target");

#define SHM_MAGIC UINT64_C(0x314d48534754554e)   /* "NUTGSHM1" read little-endian */
/* Version of the header prefix below and of the region table's meaning (4: room for 12
 * regions, the listener slots being the 9th; 3: the region table; 2 was the trust
 * region's first layout). A new region or a changed record is not
 * a version change: it shows in the region table and in the regions' format fingerprints
 * (shm_region_format), which a take-over checks. */
#define SHM_LAYOUT_VERSION 4u
#define SHM_CL 128u                              /* = CAA_CACHE_LINE_SIZE on x86-64 */
#define SHM_HANDLE_MAGIC 0x53484d48u             /* process-local handle check */
#define SHM_SNAP_MAGIC 0x534e4150u               /* in a LIVE or RETIRED snapshot header */
#define SHM_ALLOC_STRIDE_ALIGN 64u
#define SHM_MAX_REGIONS 12u
#define SHM_BOOT_ID_LEN 40u                      /* /proc/sys/kernel/random/boot_id text */
#define SHM_TRUST_MAGIC 0x54525354u              /* "TSRT" read little-endian */
#define SHM_TRUST_VERSION 2u                     /* 2: the failed-auth table after it */
#define SHM_QUOTA_MAGIC 0x41544f51u              /* "QOTA" read little-endian */
#define SHM_QUOTA_VERSION 3u                     /* 3: TCP peer connections per record */
#define SHM_RELAY_MAGIC 0x594c4552u              /* "RELY" read little-endian */
#define SHM_RELAY_VERSION 2u                     /* 2: the port pool after the counters */
#define SHM_RELAY_PORTS 65536u
#define SHM_REVOKE_MAGIC 0x4b564552u              /* "REVK" read little-endian */
#define SHM_REVOKE_VERSION 1u
#define SHM_RECORDS_MAGIC 0x53434552u             /* "RECS" read little-endian */
#define SHM_RECORDS_VERSION 1u
#define SHM_LSLOT_MAGIC 0x544f4c53u               /* "SLOT" read little-endian */
#define SHM_LSLOT_VERSION 1u

/* The regions of a segment. shm_geom_compute() and hdr_init() are the only places that
 * list them; a reader finds a region by id in the header's table, so a region added by a
 * later build is an entry an older reader skips, and a reader never assumes an offset. */
enum shm_region_id {
	SHM_REGION_UNUSED = 0,
	SHM_REGION_SLOTS = 1,    /* struct shm_slot[n_slots] */
	SHM_REGION_SNAPS = 2,    /* snapshot arena: snap_count slots of snap_stride bytes */
	SHM_REGION_ALLOCS = 3,   /* struct shm_alloc[alloc_cap] */
	SHM_REGION_TRUST = 4,    /* one trust table (shm/shm_trust.h) of trust_size bytes */
	SHM_REGION_QUOTA = 5,    /* one allocation-count table (shm/shm_quota.h) */
	SHM_REGION_RELAY = 6,    /* one relay port index (shm/shm_relay.h) */
	SHM_REGION_REVOKE = 7,   /* one revocation list (shm/shm_revoke.h) */
	SHM_REGION_RECORDS = 8,  /* session-record rings (shm/shm_records.h) */
	SHM_REGION_LSLOTS = 9,   /* one listener slot table (shm/shm_lslot.h) */
};

struct shm_region {
	uint32_t id;             /* enum shm_region_id; 0: unused entry */
	uint32_t count;          /* elements */
	uint64_t off;            /* from the segment base */
	uint64_t stride;         /* bytes per element */
	uint64_t format;         /* shm_region_format(id) of the build that wrote it */
};

/* Offset 0. Everything up to hdr_check is written once by shm_create() (geometry, boot,
 * regions) or by the master before it forks (nonce key), and covered by hdr_check; the
 * fields after it change while the segment is in use. Each hot word has its own line. */
struct shm_hdr {
	uint64_t magic;
	uint32_t layout_version;
	uint32_t hdr_size;
	uint64_t layout_hash;
	uint64_t seg_size;
	uint32_t n_slots;
	uint32_t snap_count;
	uint32_t snap_size;
	uint32_t alloc_cap;
	uint64_t off_slots, slot_stride;
	uint64_t off_snaps, snap_stride;
	uint64_t off_allocs, alloc_stride;
	uint64_t off_trust, trust_size;
	char boot_id[SHM_BOOT_ID_LEN];       /* kernel boot the CLOCK_MONOTONIC times are of */
	uint8_t nonce_key[SHM_NONCE_KEY_LEN]; /* master: what clients' nonces are MACed with */
	uint32_t n_regions;
	uint32_t pad1;
	struct shm_region regions[SHM_MAX_REGIONS];
	uint64_t hdr_check;                  /* shm_checksum of the bytes before it */
	int32_t master_pid;
	uint32_t pad0;
	uint64_t generation;                 /* successful publishes (master) */
	uint64_t gen_floor;                  /* every claim's gen is above it: the highest
					      * gen of the image taken over (master, before
					      * any worker runs); 0, as in the files of builds
					      * before it (padding then): no floor */
	_Alignas(SHM_CL) uint64_t epoch;     /* global QSBR epoch, starts at 1 (master only) */
	_Alignas(SHM_CL) uint64_t cur_snap;  /* offset of the current snapshot header, 0 none */
};

/* One worker slot. qs is alone on its line: it is written every loop iteration. */
struct shm_slot {
	_Alignas(SHM_CL) uint64_t qs;        /* 0 offline, else last epoch seen (worker) */
	_Alignas(SHM_CL) int32_t pid;        /* master: set after fork, cleared when reaped */
	uint32_t state;                      /* enum shm_slot_state */
	uint64_t incarnation;                /* master, at spawn */
	uint64_t heartbeat_ns;               /* worker */
	uint32_t alloc_hint;                 /* worker: next claim search start + 1, 0 unset */
	uint32_t pad0;
	_Alignas(SHM_CL) struct shm_counters ctr;   /* worker; master only while slot is dead */
	_Alignas(SHM_CL) struct shm_src src;        /* worker; master zeroes counts at spawn */
};

enum shm_snap_state {
	SHM_SNAP_FREE = 0,
	SHM_SNAP_LIVE,
	SHM_SNAP_RETIRED
};

/* Header of one snapshot slot; the payload follows at +sizeof(struct shm_snap_hdr).
 * Written only by the master: magic/gen/len/checksum before the slot is published
 * (immutable while LIVE or RETIRED), state/retire_* when it is retired or freed. */
struct shm_snap_hdr {
	uint32_t magic;
	uint32_t state;
	uint64_t gen;
	uint64_t len;
	uint64_t checksum;
	uint64_t retire_token;
	uint64_t retire_ns;
	uint64_t publish_no;                 /* value of hdr->generation when published */
	_Alignas(SHM_CL) uint8_t payload[];
};

/* Trust region (shm/shm_trust.h): this header, then the entries at
 * off_trust + sizeof(struct shm_trust_hdr), set after set, then the failed-authentication
 * table (shm/shm_authfail.h, same entry size). The master writes the header once in
 * shm_create(); entries start all zero (empty). */
struct shm_trust_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t n_sets;
	uint32_t n_ways;
	uint8_t key[SHM_TRUST_KEY_LEN];
	_Alignas(SHM_CL) uint8_t entries[];
};

/* Quota region (shm/shm_quota.h): the master writes the header once in shm_create();
 * the total and the entries start at 0 and change only by CAS (shm/quota.c). After the
 * n_entries count entries come the bandwidth words (shm/shm_bw.h, shm/bw.c): the buckets
 * of each count entry (uint64_t[n_entries][SHM_BW_DIRS]), then one struct shm_bw_rec per
 * allocation record. */
struct shm_quota_hdr {
	uint32_t magic;
	uint32_t version;
	uint64_t n_entries;
	_Alignas(SHM_CL) uint64_t total;     /* live counted allocations */
	_Alignas(SHM_CL) uint64_t listener_drops[SHM_MAX_LISTENERS];  /* bandwidth drops */
	_Alignas(SHM_CL) uint64_t entries[]; /* tag 38 | count 26; 0 = never used */
};

/* Bandwidth words of one allocation record (shm/bw.c), and its live TCP peer
 * connection count (RFC 6062): figures a take-over does not carry. */
struct shm_bw_rec {
	uint64_t tat[SHM_BW_DIRS];           /* bucket: theoretical arrival time, ns */
	uint64_t drops[SHM_BW_DIRS];         /* datagrams dropped */
	uint32_t last[SHM_BW_DIRS];          /* enum shm_bw_verdict of the last drop */
	uint32_t tcp_conns;                  /* peer connections held (owner's store) */
	uint32_t pad;
};

/* Relay port index (shm/shm_relay.h): the master writes the header once in shm_create();
 * the ways (SHM_RELAY_WAYS per port, 1 + record index, 0 empty) change only by CAS; then,
 * 8-aligned after them, one struct shm_relay_ctr per allocation record; then the relay
 * port pool (shm/shm_ppool.h): SHM_PPOOL_WAYS words per port, then SHM_PPOOL_RESV
 * struct shm_ppool_ent. */
struct shm_relay_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t ways;
	uint32_t ports;
	_Alignas(SHM_CL) uint32_t ways_tab[];
};

/* Short-circuited deliveries to a record's client by workers that do not own it. */
struct shm_relay_ctr {
	uint64_t pkts;
	uint64_t bytes;
};

/* One reservation of the port pool: expires_ns is claimed by CAS (0 free), the fields
 * are written next, the token last (0 until then: not redeemable). */
struct shm_ppool_ent {
	uint64_t expires_ns;
	uint64_t token;
	uint64_t lkey;
	uint32_t tag;
	uint16_t port;
	uint8_t family;
	uint8_t pad;
};

/* Revocation list (shm/shm_revoke.h): the master writes the header once in shm_create()
 * (or a take-over's copy), then the entries and count under the seqlock word seq. */
struct shm_revoke_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t cap;                        /* SHM_REVOKE_MAX */
	uint32_t count;                      /* entries [0, count) in use */
	_Alignas(SHM_CL) uint64_t seq;       /* odd while the master writes */
	_Alignas(SHM_CL) struct shm_revoke_ent ent[];
};

/* Session-record region (shm/shm_records.h): this header, then one ring per slot. */
struct shm_records_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t n_rings;
	uint32_t ring_cap;                   /* SHM_REC_RING */
	_Alignas(SHM_CL) uint64_t written;   /* master: records written (metrics) */
	uint64_t master_dropped;             /* master: records it could not write */
	uint64_t webhook_failures;           /* master: failed webhook deliveries */
	uint32_t start_wanted;               /* master: 1 = workers push start events too */
	uint32_t records_off;                /* master: 1 = it writes no records (none
					      * configured): a full ring drops, no
					      * backlog, no wait (in start_wanted's
					      * padding: an image without it reads 0) */
	uint64_t webhook_dropped;            /* master: records its full backlog dropped */
	uint64_t webhook_backlog;            /* master: records waiting for the webhook now */
};

struct shm_rec_ring {
	_Alignas(SHM_CL) uint64_t head;      /* producer: events pushed */
	uint64_t dropped;                    /* producer: events lost (no memory for its
					      * backlog, or a backlog it gave up) */
	uint64_t waiting;                    /* producer: events in its private backlog
					      * (shm_records_push_ev), lost if it dies: the
					      * master counts them dropped at its reap and a
					      * take-over at the restart (in the cache line's
					      * padding: an image without it reads 0) */
	_Alignas(SHM_CL) uint64_t tail;      /* consumer: events consumed */
	_Alignas(SHM_CL) struct shm_rec_ev ev[SHM_REC_RING];
};

/* Listener slot table (shm/shm_lslot.h): the master writes the header in shm_create()
 * and the entries at each publish (shm/lslot.c); nobody else writes it. */
struct shm_lslot_ent {
	uint32_t state;                      /* enum shm_lslot_state */
	uint32_t name_len;                   /* the full name's length */
	uint64_t key;                        /* hash of the full name */
	char name[SHM_LSLOT_NAME_MAX];       /* its first bytes, NUL ended */
};

struct shm_lslot_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t n;                          /* SHM_MAX_LISTENERS */
	uint32_t pad;
	struct shm_lslot_ent ent[SHM_MAX_LISTENERS];
};

struct shm_trust_ent {
	uint64_t key;    /* keyed hash of the address, 0 = empty */
	uint64_t state;  /* tag 16 | credits 16 | last earn, monotonic seconds 32 */
};

/* Process-local handle. The geometry is copied here at create/attach time after
 * validation and never re-read from the segment, so a corrupted header cannot redirect
 * later accesses outside the mapping. */
struct shm {
	uint32_t magic;
	bool ro;
	int fd;
	uint8_t *base;
	size_t size;
	struct shm_config cfg;
	uint64_t off_slots, slot_stride;
	uint64_t off_snaps, snap_stride;
	uint64_t off_allocs, alloc_stride;
	uint64_t off_trust;
	uint64_t off_quota;
	uint64_t quota_entries;              /* shm_quota_entries(cfg.alloc_cap), once: the
					      * bandwidth words' place depends on it and every
					      * datagram and table walk finds them */
	uint64_t off_relay;
	uint64_t off_revoke;
	uint64_t off_records;
	uint64_t off_lslot;
	int lock_fd;                         /* state file lock (shm/state.c), -1 for none */
	int file_lock_fd;                    /* the state file's own lock, a description of
					      * its own (shm/state.c), -1 for none */
	uint32_t *taken;                     /* records a take-over imported (shm_taken) */
	uint32_t *taken_from;                /* their indexes in the image (shm_taken_from) */
	uint32_t n_taken, cap_taken;
	uint32_t *taken_off;                 /* shm_taken_group: slot s's share starts at
					      * [s], ends at [s + 1]; NULL until grouped */
	bool keep_tcp;                       /* a take-over keeps TURN-TCP records (live
					      * upgrade: their connections are handed over) */
	struct shm_rec_backlog *rec_bl;      /* per slot, this process's session-record
					      * events its rings had no room for
					      * (shm/records.c); NULL until one was full */
	struct shm_rec_backlog *rec_held;    /* master: the events shm_records_hold took
					      * from the rings and backlogs before the
					      * first fork, all slots in one queue */
	bool rec_unbuffered;                 /* a full ring drops: no backlog (a
					      * lingering worker) */
	bool rec_capped;                     /* the backlog is capped (a worker's:
					      * shm_records_disown); the master's is
					      * bounded by the image it takes over */
};

static inline void shm_check_handle(const struct shm *shm)
{
	assert(shm != NULL && shm->magic == SHM_HANDLE_MAGIC);
	(void)shm;
}

static inline struct shm_hdr *shm_hdr(const struct shm *shm)
{
	return (struct shm_hdr *)shm->base;
}

/* Slot pointer, or NULL when slot is out of range. */
static inline struct shm_slot *shm_slot_at(const struct shm *shm, unsigned slot)
{
	if (slot >= shm->cfg.n_slots)
		return NULL;
	return (struct shm_slot *)(shm->base + shm->off_slots + (uint64_t)slot * shm->slot_stride);
}

/* Writable slot of a read-write handle, or NULL with *rc set (-EROFS on a read-only handle,
 * -EINVAL when slot is out of range); *rc is 0 on success. */
static inline struct shm_slot *shm_slot_rw(struct shm *shm, unsigned slot, int *rc)
{
	struct shm_slot *s;

	shm_check_handle(shm);
	if (shm->ro) {
		*rc = -EROFS;
		return NULL;
	}
	s = shm_slot_at(shm, slot);
	*rc = s != NULL ? 0 : -EINVAL;
	return s;
}

static inline struct shm_snap_hdr *shm_snap_at(const struct shm *shm, unsigned i)
{
	return (struct shm_snap_hdr *)(shm->base + shm->off_snaps + (uint64_t)i * shm->snap_stride);
}

static inline struct shm_alloc *shm_alloc_at(const struct shm *shm, uint32_t idx)
{
	return (struct shm_alloc *)(shm->base + shm->off_allocs +
				    (uint64_t)idx * shm->alloc_stride);
}

static inline struct shm_trust_hdr *shm_trust_hdr(const struct shm *shm)
{
	return (struct shm_trust_hdr *)(shm->base + shm->off_trust);
}

/* Bytes of the trust entries (the failed-authentication table follows them). */
static inline uint64_t shm_trust_entries_bytes(void)
{
	return (uint64_t)SHM_TRUST_SETS * SHM_TRUST_WAYS * sizeof(struct shm_trust_ent);
}

static inline struct shm_quota_hdr *shm_quota_hdr(const struct shm *shm)
{
	return (struct shm_quota_hdr *)(shm->base + shm->off_quota);
}

/* Bandwidth words after the count entries (layout at struct shm_quota_hdr). */
static inline uint64_t *shm_bw_key_words(const struct shm *shm)
{
	return shm_quota_hdr(shm)->entries + shm->quota_entries;
}

static inline struct shm_bw_rec *shm_bw_recs(const struct shm *shm)
{
	return (struct shm_bw_rec *)(shm_bw_key_words(shm) +
				     shm->quota_entries * SHM_BW_DIRS);
}

static inline struct shm_relay_hdr *shm_relay_hdr(const struct shm *shm)
{
	return (struct shm_relay_hdr *)(shm->base + shm->off_relay);
}

/* Bytes of the relay ways, from the region's start (header included), 8-aligned. */
static inline uint64_t shm_relay_ways_size(void)
{
	return sizeof(struct shm_relay_hdr) +
	       (uint64_t)SHM_RELAY_PORTS * SHM_RELAY_WAYS * sizeof(uint32_t);
}

static inline struct shm_relay_ctr *shm_relay_ctrs(const struct shm *shm)
{
	return (struct shm_relay_ctr *)(shm->base + shm->off_relay + shm_relay_ways_size());
}

/* Bytes of the relay index region before the port pool (ways and counters), 8-aligned. */
static inline uint64_t shm_relay_pool_off(uint32_t alloc_cap)
{
	return shm_relay_ways_size() + (uint64_t)alloc_cap * sizeof(struct shm_relay_ctr);
}

/* Bytes of the whole relay index region. */
static inline uint64_t shm_relay_region_size(uint32_t alloc_cap)
{
	return shm_relay_pool_off(alloc_cap) +
	       (uint64_t)SHM_RELAY_PORTS * SHM_PPOOL_WAYS * sizeof(uint64_t) +
	       (uint64_t)SHM_PPOOL_RESV * sizeof(struct shm_ppool_ent);
}

static inline uint64_t *shm_ppool_words(const struct shm *shm)
{
	return (uint64_t *)(shm->base + shm->off_relay + shm_relay_pool_off(shm->cfg.alloc_cap));
}

static inline struct shm_ppool_ent *shm_ppool_ents(const struct shm *shm)
{
	return (struct shm_ppool_ent *)(shm_ppool_words(shm) +
					(uint64_t)SHM_RELAY_PORTS * SHM_PPOOL_WAYS);
}

static inline struct shm_revoke_hdr *shm_revoke_hdr(const struct shm *shm)
{
	return (struct shm_revoke_hdr *)(shm->base + shm->off_revoke);
}

static inline struct shm_records_hdr *shm_records_hdr(const struct shm *shm)
{
	return (struct shm_records_hdr *)(shm->base + shm->off_records);
}

static inline struct shm_rec_ring *shm_rec_ring_at(const struct shm *shm, unsigned slot)
{
	return (struct shm_rec_ring *)(shm->base + shm->off_records +
				       sizeof(struct shm_records_hdr) +
				       (uint64_t)slot * sizeof(struct shm_rec_ring));
}

static inline struct shm_lslot_hdr *shm_lslot_hdr(const struct shm *shm)
{
	return (struct shm_lslot_hdr *)(shm->base + shm->off_lslot);
}

static inline uint64_t shm_round_up(uint64_t v, uint64_t align)
{
	return (v + align - 1) / align * align;
}

/* Geometry computed from a config (shared by create and attach validation). */
struct shm_geom {
	uint64_t off_slots, slot_stride;
	uint64_t off_snaps, snap_stride;
	uint64_t off_allocs, alloc_stride;
	uint64_t off_trust, trust_size;
	uint64_t off_quota, quota_size;
	uint64_t off_relay, relay_size;
	uint64_t off_revoke, revoke_size;
	uint64_t off_records, records_size;
	uint64_t off_lslot, lslot_size;
	uint64_t size;
};

int shm_config_check(const struct shm_config *cfg);
/* Session-record region (shm/records.c): header written once; rings start empty. */
void shm_records_init(struct shm_records_hdr *h, uint32_t n_rings);
int shm_records_validate(const struct shm_records_hdr *h, uint32_t n_rings);
/* Take-over: an event of a record of an earlier run's table (idx is of that table). */
int shm_records_push_carried(struct shm *shm, unsigned slot, uint32_t idx,
			     const struct shm_alloc *rec, enum shm_rec_reason reason,
			     uint64_t now_ns);
/* Raw push of a complete event into ring `slot` (take-over's carried events); one that
 * does not fit waits in the handle's backlog (shm_records_push). */
int shm_records_push_ev(struct shm *shm, unsigned slot, const struct shm_rec_ev *ev);
/* Master, at the reap of slot's worker: the events its backlog still held are lost
 * (counted dropped). */
void shm_records_reaped(struct shm *shm, unsigned slot);
/* shm_destroy: frees the handle's backlog. */
void shm_records_backlog_free(struct shm *shm);
/* Writes the trust region's header with a fresh random key (shm/trust.c). Returns 0 or
 * -errno from getrandom(). */
int shm_trust_init(struct shm_trust_hdr *t);
/* 0 when the trust header at t is the one this build writes, else -EBADMSG. */
int shm_trust_validate(const struct shm_trust_hdr *t);
/* Bytes of the quota region (counts and bandwidth words) for alloc_cap records. */
uint64_t shm_quota_region_size(uint32_t alloc_cap);
/* The first count entry of key with a count (where its buckets live), or NULL. */
uint64_t *shm_quota_entry_of(const struct shm *shm, uint64_t key);
/* The key of count entry e changed (a new tag): its buckets start full (shm/bw.c). */
void shm_bw_key_reset(struct shm *shm, const uint64_t *e);
/* Writes the quota region's header for alloc_cap records (shm/quota.c). */
void shm_quota_init(struct shm_quota_hdr *q, uint32_t alloc_cap);
/* 0 when the quota header at q is the one this build writes for alloc_cap, else -EBADMSG. */
int shm_quota_validate(const struct shm_quota_hdr *q, uint32_t alloc_cap);
void shm_geom_compute(const struct shm_config *cfg, struct shm_geom *g);
/* Writes the relay index's header (shm/relay.c); the rest starts zero. */
void shm_relay_init(struct shm_relay_hdr *h);
/* 0 when the relay index header at h is the one this build writes, else -EBADMSG. */
int shm_relay_validate(const struct shm_relay_hdr *h);

/* Writes the revocation list's header (shm/revoke.c); the entries start empty. */
void shm_revoke_init(struct shm_revoke_hdr *h);
/* 0 when the revocation header at h is the one this build writes, else -EBADMSG. */
int shm_revoke_validate(const struct shm_revoke_hdr *h);
/* An entry this build could have written (kind, length, times). */
bool shm_revoke_ent_sane(const struct shm_revoke_ent *e);

/* Writes the listener slot table's header (shm/lslot.c); the entries start FREE. */
void shm_lslot_init(struct shm_lslot_hdr *h);
/* 0 when the table at h is the one this build writes (header and every entry), else
 * -EBADMSG. */
int shm_lslot_validate(const struct shm_lslot_hdr *h);

/* Fingerprint of the element layout of region `id` in this build (0 for an unknown id). */
uint64_t shm_region_format(uint32_t id);

/* Checksum over the immutable header fields (stored in hdr_check). */
uint64_t shm_hdr_checksum(const struct shm_hdr *h);

/* This boot's id (/proc/sys/kernel/random/boot_id), NUL-padded; all zero if unreadable. */
void shm_boot_id(char out[SHM_BOOT_ID_LEN]);

/* Sizes fd (a memfd, sealed when `memfd`, or a regular file) to cfg's geometry, maps it
 * shared and writes a fresh header. On success *out owns fd; on failure the caller still
 * owns it. Returns 0, -EINVAL, -ENOMEM/-ENOSPC or another -errno. */
int shm_init_fd(int fd, bool memfd, const struct shm_config *cfg, struct shm **out);

#endif
