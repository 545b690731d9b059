/* Allocation table in the shared segment: fixed-size records, each owned by one worker
 * slot, CAS-claimed, with a per-record seqlock so other processes copy consistent views.
 *
 * Ownership and writers
 *   - A record is FREE, or owned by exactly one worker slot (not a pid: a respawned worker
 *     in the same slot inherits its predecessor's records).
 *   - The owning worker is the only writer of a record's contents. It claims with
 *     shm_alloc_claim() (CAS FREE -> CLAIMED(slot)), fills fields between
 *     shm_alloc_begin_write()/shm_alloc_end_write(), makes it LIVE with
 *     shm_alloc_publish(), updates it under the same bracket, and ends it: marks the end
 *     (shm_alloc_end_mark), pushes its session record, retires it (shm_alloc_retire:
 *     -> DYING), counts it off, and releases it (shm_alloc_release: cleared, -> FREE).
 *   - The master writes records only of a slot in which no worker runs (after waitpid and
 *     before/without adoption by the replacement): shm_slot_release_all().
 *   - Everyone else reads with shm_alloc_read_copy() (seqlock-validated copy).
 *   - The per-record packet/byte counters (ctr[]) are outside the seqlock: owner-only
 *     relaxed stores, readers may see them a little stale but never torn.
 * No mutex lives in shared memory, so a kill -9 never leaves a lock held; it can leave a
 * record CLAIMED/DYING or with an odd sequence: shm_alloc_is_torn() detects that, and the
 * replacement worker (or the master) releases it; or LIVE and marked ending, its end
 * recorded (shm_alloc_end_marked): the replacement or a take-over finishes that end.
 *
 * Record size: sizeof(struct shm_alloc) is 2 528 bytes (static assertion in shm/alloc.c);
 * records are laid out with a 2 560-byte (64-byte aligned) stride, alloc_cap of them,
 * preallocated.
 *
 * Times: created_ns/expires_ns and permission/channel expiries are CLOCK_MONOTONIC ns,
 * which is system-wide, so a respawned worker can re-arm timers from them.
 */
#ifndef TG_SHM_SHM_ALLOC_H
#define TG_SHM_SHM_ALLOC_H

#include <stdbool.h>
#include <stdint.h>

#include "shm/shm.h"

/* Version of the record's meaning, part of its format fingerprint (shm_region_format): a
 * take-over refuses another's records. 2: listener_idx is the listener's slot (was the
 * snapshot's order; its quota key is derived from it), n_perms/n_chans/listener_hash gone. */
#define SHM_ALLOC_FORMAT 2u
#define SHM_ALLOC_MAX_PERMS 32
#define SHM_ALLOC_MAX_CHANS 32
#define SHM_ALLOC_USER_MAX 128   /* bytes, not NUL-terminated; user_len gives the length */
#define SHM_ALLOC_REALM_MAX 128
#define SHM_ALLOC_KEY_MAX 32

/* Record states (low 8 bits of the state word; owner slot in bits 8..15). */
enum shm_alloc_state {
	SHM_ALLOC_FREE = 0,
	SHM_ALLOC_CLAIMED = 1,   /* owner is filling it in; not yet visible as an allocation */
	SHM_ALLOC_LIVE = 2,
	SHM_ALLOC_DYING = 3,     /* owner is clearing it */
};

enum shm_transport {
	SHM_TRANSPORT_NONE = 0,
	SHM_TRANSPORT_UDP,
	SHM_TRANSPORT_TCP,
	SHM_TRANSPORT_TLS,
	SHM_TRANSPORT_DTLS,
};

enum shm_key_alg {
	SHM_KEY_NONE = 0,
	SHM_KEY_MD5,      /* RFC 8489 MD5(user:realm:pass), 16 bytes */
	SHM_KEY_SHA256,   /* RFC 8489 SHA-256 variant, 32 bytes */
};

/* Per-record counters (owner-only relaxed stores, outside the seqlock). */
enum shm_alloc_ctr {
	SHM_ACTR_PKTS_TO_PEER = 0,
	SHM_ACTR_BYTES_TO_PEER,
	SHM_ACTR_PKTS_FROM_PEER,
	SHM_ACTR_BYTES_FROM_PEER,
	SHM_ACTR__COUNT
};

/* A transport address. family is AF_INET or AF_INET6 (0 = unset); IPv4 uses addr[0..3]. */
struct shm_addr {
	uint8_t addr[16];
	uint16_t port;       /* host byte order */
	uint8_t family;
	uint8_t pad;
};

struct shm_perm {
	uint8_t addr[16];
	uint8_t family;      /* 0 = empty entry */
	uint8_t pad[7];
	uint64_t expires_ns;
};

struct shm_chan {
	struct shm_addr peer;
	uint16_t number;     /* 0x4000..0x4FFF; 0 = empty entry */
	uint8_t pad[2];
	uint64_t expires_ns;
};

/* One record. Fields from `owner` on are written only by the owner (inside the seqlock
 * bracket); state/seq/gen are managed by the functions below. */
struct shm_alloc {
	uint32_t state;            /* SHM_ALLOC_WORD(state, owner): CAS-claimed */
	uint32_t seq;              /* seqlock: odd while the owner writes */
	uint64_t gen;              /* each claim: max(gen, the segment's gen_floor) + 1
				    * (shm_alloc_gen_next); private indexes keep (idx, gen) */

	uint8_t owner;             /* == owner slot of the state word when claimed */
	uint8_t client_transport;  /* enum shm_transport */
	uint8_t key_alg;           /* enum shm_key_alg */
	uint8_t key_len;
	uint8_t pad0[2];           /* 0 (held counts no one kept true before format 2) */
	uint16_t listener_idx;     /* the listener's slot (shm/shm_lslot.h): stable by name
				    * across reloads, restarts and upgrades; 0xffff: none */
	uint64_t pad1;             /* 0 (was a hash of the listener's name before format 2) */

	struct shm_addr client;
	struct shm_addr server;    /* listener address the client reached */
	struct shm_addr relay;
	struct shm_addr relay2;    /* second relay of a dual-stack allocation, family 0 if none */

	uint64_t created_ns;       /* CLOCK_MONOTONIC */
	uint64_t expires_ns;       /* CLOCK_MONOTONIC */
	int64_t cred_expiry;       /* unix seconds of the REST credential (strict_expiry), 0 none */
	uint64_t reservation;      /* RESERVATION-TOKEN, 0 if none */
	uint8_t txid[12];          /* Allocate transaction id, for retransmissions */
	uint16_t user_len;
	uint16_t realm_len;

	char username[SHM_ALLOC_USER_MAX];
	char realm[SHM_ALLOC_REALM_MAX];
	uint8_t key[SHM_ALLOC_KEY_MAX];   /* long-term key; wipe copies with explicit_bzero */

	struct shm_perm perms[SHM_ALLOC_MAX_PERMS];
	struct shm_chan chans[SHM_ALLOC_MAX_CHANS];

	uint64_t ctr[SHM_ACTR__COUNT];
};

#define SHM_ALLOC_WORD(state, slot) ((uint32_t)(slot) << 8 | (uint32_t)(state))
#define SHM_ALLOC_WORD_STATE(w) ((enum shm_alloc_state)((w)&0xffu))
#define SHM_ALLOC_WORD_OWNER(w) ((unsigned)(((w) >> 8) & 0xffu))
/* Bit 16 of a LIVE record's state word: its end has begun (shm_alloc_end_mark). No other
 * bit above the owner is ever set. Readers that look at SHM_ALLOC_WORD_STATE still see
 * LIVE, as they did between an end's session record and its retire before the mark
 * existed; a build without the mark takes such a record for a plain LIVE one. */
#define SHM_ALLOC_ENDING (1u << 16)

/* Number of records in the table (the segment's alloc_cap). */
uint32_t shm_alloc_capacity(const struct shm *shm);

/* The highest gen a record may have: 2^62. A take-over refuses a state file in which a
 * record's gen (a FREE one's too) or the header's gen_floor is above it, as corrupt: no
 * run gets there (at a claim per nanosecond, 146 years), and a gen near 2^64 would wrap to
 * 0 at the next claim. A claim never hands out 0 or a gen above it (shm_alloc_gen_next). */
#define SHM_ALLOC_GEN_MAX (UINT64_C(1) << 62)

/* The gen a claim gives a record whose last gen is `gen`, in a segment whose floor is
 * `floor`: max(gen, floor) + 1, always in 1..SHM_ALLOC_GEN_MAX and never `gen` again. A
 * floor at or above the bound (which no take-over sets) is ignored, and a gen at it starts
 * again at 1. Pure: any process. */
uint64_t shm_alloc_gen_next(uint64_t gen, uint64_t floor);

/* Worker `slot`: claims a FREE record with CAS (search starts in the slot's partition at
 * its private hint, then wraps over the whole table). The record comes back CLAIMED,
 * zeroed except state/seq/gen/owner, with a new gen (its last one or the segment's floor,
 * whichever is higher, + 1: shm_alloc_gen_next, see shm_image_take); *idx and *rec (pointer into
 * the segment, valid for the mapping's life) may be NULL. Returns 0, -ENOSPC (table
 * full), -EINVAL, -EROFS. */
int shm_alloc_claim(struct shm *shm, unsigned slot, uint32_t *idx, struct shm_alloc **rec);

/* Owner: pointer to record `idx` if `slot` owns it (any non-FREE state). Returns 0,
 * -EINVAL (idx out of range), -EPERM (not owned by slot), -EROFS. */
int shm_alloc_get(struct shm *shm, unsigned slot, uint32_t idx, struct shm_alloc **rec);

/* Owner: open/close a write bracket (seq odd between them). Every multi-field update of
 * an owned record happens inside one. Not nestable. */
void shm_alloc_begin_write(struct shm_alloc *rec);
void shm_alloc_end_write(struct shm_alloc *rec);

/* Owner: CLAIMED -> LIVE (release store: all fields written before are visible to a
 * reader that sees LIVE). Does not touch counters: the worker counts ALLOCS_CREATED/
 * ALLOCS_ACTIVE itself. Returns 0, -EINVAL, -EPERM (not CLAIMED by slot), -EROFS. */
int shm_alloc_publish(struct shm *shm, unsigned slot, uint32_t idx);

/* Owner (or whoever ends a record of a slot with no process: the replacement worker, the
 * master): marks LIVE record idx as ending (SHM_ALLOC_ENDING), one store to its state
 * word, just before pushing its end event (shm_records_push). Why: the event goes out
 * first and the retire (below) after it, and the master drains events every 10 ms; a
 * process killed between the push and the retire leaves a LIVE record whose end is
 * recorded already, maybe drained. The mark tells whoever finds the record (a take-over,
 * shm/image.c; a replacement worker, worker/adopt.c) that it ended: it is finished (retired,
 * counted off, its ports freed) with no second session record and never served again. A
 * kill between the mark and the push (two adjacent statements) loses the event: at most one
 * record per allocation, never two. Returns 0, -EINVAL, -EPERM (not LIVE and owned by
 * slot, or marked already), -EROFS. */
int shm_alloc_end_mark(struct shm *shm, unsigned slot, uint32_t idx);

/* Any process: whether rec (a record in the segment or a copy) is LIVE with its end
 * begun (shm_alloc_end_mark). */
static inline bool shm_alloc_end_marked(const struct shm_alloc *rec)
{
	uint32_t w = CMM_LOAD_SHARED(rec->state);

	return SHM_ALLOC_WORD_STATE(w) == SHM_ALLOC_LIVE && (w & SHM_ALLOC_ENDING) != 0;
}

/* Owner: LIVE -> DYING (marked or not), contents kept, as the step of ending an allocation
 * the worker counted as active that comes after its session record. The worker then
 * uncounts it and calls shm_alloc_release(). Uncount only if this returned 0. Why: a
 * worker killed between the two steps leaves a DYING record, which its replacement
 * releases without uncounting (a kill before the uncounting leaves it counted, one high,
 * never counted off twice), and a LIVE record, marked or not, always still counts in
 * ALLOCS_ACTIVE. Returns 0, -EINVAL, -EPERM (not LIVE and owned by slot), -EROFS. */
int shm_alloc_retire(struct shm *shm, unsigned slot, uint32_t idx);

/* Owner (or the replacement worker of the same slot): ends a record in any owned state
 * (CLAIMED, LIVE, DYING, torn): -> DYING, contents cleared (key wiped), -> FREE.
 * Does not touch counters (the worker counts ALLOCS_ENDED/ALLOCS_ACTIVE itself).
 * Returns 0, -EINVAL, -EPERM (not owned by slot), -EROFS. */
int shm_alloc_release(struct shm *shm, unsigned slot, uint32_t idx);

/* Owner: relaxed add to a per-record counter (outside the seqlock). */
static inline void shm_alloc_ctr_add(struct shm_alloc *rec, enum shm_alloc_ctr i, uint64_t v)
{
	if ((unsigned)i < SHM_ACTR__COUNT)
		CMM_STORE_SHARED(rec->ctr[i], CMM_LOAD_SHARED(rec->ctr[i]) + v);
}

/* Any process: consistent copy of record `idx` (seqlock: retries a bounded number of
 * times). Returns 0, -EINVAL, -EAGAIN (the owner kept writing, or left the sequence odd:
 * check shm_alloc_is_torn). A FREE record copies as all zero state. The copy holds the
 * key: wipe it with explicit_bzero when done. */
int shm_alloc_read_copy(const struct shm *shm, uint32_t idx, struct shm_alloc *copy);

/* Any process: *torn = true when record idx is CLAIMED or DYING, or has an odd seq
 * (an owner stopped in the middle of an update). Only meaningful while the owner is dead
 * or stopped; for a live owner it just means "being written". *owner (may be NULL) gets
 * the owner slot. Returns 0 or -EINVAL. */
int shm_alloc_is_torn(const struct shm *shm, uint32_t idx, bool *torn, unsigned *owner);

/* What `turngatectl top` ranks by, without copying the whole record (its 2.5 KiB are
 * read a few cache lines at a time): the generation and username under the seqlock, the
 * counters relaxed after it. */
struct shm_alloc_stat {
	uint64_t gen;
	uint64_t ctr[SHM_ACTR__COUNT];
	uint16_t user_len;             /* at most SHM_ALLOC_USER_MAX */
	char username[SHM_ALLOC_USER_MAX];
};

/* Any process: the stat of a LIVE record; the username only when the record's generation
 * is not known_gen (user_len 0 otherwise: the caller has it from an earlier read).
 * Returns 0, -ENOENT (not LIVE), -EAGAIN (the owner kept writing), -EINVAL. */
int shm_alloc_read_stat(const struct shm *shm, uint32_t idx, uint64_t known_gen,
			struct shm_alloc_stat *out);

/* Any process walking the table in index order with shm_alloc_read_stat (the ranked
 * `top`): asks the CPU to start fetching what that will read of the records a little
 * after idx: the state line of record idx + 2 * SHM_ALLOC_AHEAD and, when record
 * idx + SHM_ALLOC_AHEAD is LIVE, its counters' line. Only a hint: it reads nothing
 * but a state word, changes nothing and ignores indexes past the table's end. Why: each
 * record is 2.5 KiB, so a walk touches two lines of their own (and often a page of its
 * own) per record, which the hardware prefetchers do not predict; fetched one at a time
 * the misses, not the work, were the walk's cost (bench/topscan). */
#define SHM_ALLOC_AHEAD 8u
void shm_alloc_prefetch_ahead(const struct shm *shm, uint32_t idx);

/* Any process: iteration. Start with *cursor = 0; each call returns 0 and the next index
 * in *idx (cursor advanced past it), or -ENOENT at the end.
 * _next_owned: records in any non-FREE state owned by `slot` (re-adoption after a crash).
 * _next_live:  LIVE records of any owner (admin listing, metrics). */
int shm_alloc_next_owned(const struct shm *shm, unsigned slot, uint32_t *cursor, uint32_t *idx);
int shm_alloc_next_live(const struct shm *shm, uint32_t *cursor, uint32_t *idx);
/* _next_live_before: the same, reading no record at or after `end` (a page of the admin
 * listing): -ENOENT with *cursor = end (or the table's end) when none is left before it. */
int shm_alloc_next_live_before(const struct shm *shm, uint32_t *cursor, uint32_t end,
			       uint32_t *idx);

/* Master, only for a slot with no running worker (after shm_slot_reaped and before a
 * replacement is forked, or when the replacement declines adoption): releases every
 * record the slot owns and, for each one that was LIVE, adds 1 to the slot's
 * ALLOCS_ENDED and subtracts 1 from its ALLOCS_ACTIVE gauges (slot-wide and of the
 * record's listener), as the dead worker would have done.
 * *n_released may be NULL. Returns 0, -EINVAL, -EBUSY (slot is STARTING/RUNNING/
 * STOPPING), -EROFS. */
int shm_slot_release_all(struct shm *shm, unsigned slot, unsigned *n_released);

#endif
