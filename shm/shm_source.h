/* Per-source budgets in the shared segment: what unauthenticated clients hold (connections,
 * TLS handshakes, DTLS handshakes), counted per hashed source address and per hashed
 * source prefix across workers, and the sources that most recently tripped a budget
 * (docs/security.md, "Budgets per source").
 *
 * Layout (an ABI, part of each worker slot, struct shm_slot): SHM_SRC_KINDS rows of
 * SHM_SRC_BUCKETS 32-bit counts, then SHM_SRC_TOP records of refused sources. A bucket is
 * the low bits of a keyed hash (the caller's, e.g. SipHash under shm_trust_hkey) of an
 * address or of a prefix: shm/ knows no addresses. Collisions only share a budget; the key
 * is secret, so a remote client cannot aim at someone else's bucket.
 *
 * Crash safety: each worker writes only its own slot's rows (single writer, relaxed
 * stores); a reader sums the rows of the slots whose worker may be alive (STARTING,
 * RUNNING, STOPPING). A dead worker's counts drop out of the sum when the master reaps it,
 * and shm_slot_spawning() zeroes them before the slot's next worker starts: nothing leaks.
 * Sums are relaxed: two workers admitting at the same moment may exceed a budget by one
 * each, never more.
 */
#ifndef TG_SHM_SHM_SOURCE_H
#define TG_SHM_SHM_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/shm.h"
#include "shm/shm_alloc.h"

#define SHM_SRC_BUCKETS 2048u  /* power of two */
#define SHM_SRC_TOP 8u

enum shm_src_kind {
	SHM_SRC_CONNS = 0,      /* unauthenticated connections (TCP, TLS, DTLS associations) */
	SHM_SRC_TLS_HS,         /* TLS handshakes in progress */
	SHM_SRC_DTLS_HS,        /* DTLS handshakes in progress */
	SHM_SRC_KINDS
};

/* Why a source was refused or lost a connection (also the metric's reason label). */
enum shm_src_reason {
	SHM_SRC_R_ADDR_CONNS = 0,   /* address's connection budget */
	SHM_SRC_R_PREFIX_CONNS,
	SHM_SRC_R_ADDR_TLS,         /* address's TLS handshake budget */
	SHM_SRC_R_PREFIX_TLS,
	SHM_SRC_R_ADDR_DTLS,
	SHM_SRC_R_PREFIX_DTLS,
	SHM_SRC_R_WORKER_CONNS,     /* a listener's per-worker connection table */
	SHM_SRC_R_WORKER_TLS,       /* a worker's TLS handshake table */
	SHM_SRC_R_WORKER_DTLS,      /* a worker's DTLS handshake/association table */
	SHM_SRC_REASONS
};

/* A source that tripped a budget (the full address, port 0). */
struct shm_src_top {
	struct shm_addr addr;
	uint32_t reason;             /* enum shm_src_reason of the last trip */
	uint32_t pad;
	uint64_t trips;              /* budget trips (evictions and refusals) */
	uint64_t last_ns;            /* CLOCK_MONOTONIC of the last trip */
	uint64_t logged_ns;          /* of the last log line about it */
};

struct shm_src {
	uint32_t n[SHM_SRC_KINDS][SHM_SRC_BUCKETS];
	struct shm_src_top top[SHM_SRC_TOP];
};

/* Reason label ("address_connections", ...), NULL when out of range. */
const char *shm_src_reason_name(enum shm_src_reason r);

/* Worker, its own slot: adds delta (+1/-1) to bucket b (masked) of kind k. A count never
 * goes below 0. No-op on a read-only handle or a bad slot. */
void shm_src_add(struct shm *shm, unsigned slot, enum shm_src_kind k, uint32_t b, int delta);

/* Any process: the count of bucket b of kind k summed over the slots whose worker may be
 * alive. */
uint32_t shm_src_sum(const struct shm *shm, enum shm_src_kind k, uint32_t b);

/* Any process: as shm_src_sum, and *own = slot's own count of bucket b, *live = the
 * number of slots summed (at least 1). */
uint32_t shm_src_share(const struct shm *shm, enum shm_src_kind k, uint32_t b, unsigned slot,
		       uint32_t *own, unsigned *live);

/* Master (shm_slot_spawning) or a worker in its own slot at start: zeroes the slot's
 * counts (not its refused sources). */
void shm_src_clear(struct shm *shm, unsigned slot);

/* Worker, its own slot: addr tripped a budget for reason r at now_ns. Returns true when a
 * log line about addr is due (none in the last log_every_ns), and then records it as
 * logged. The table keeps the SHM_SRC_TOP sources with the most recent trips. */
bool shm_src_trip(struct shm *shm, unsigned slot, const struct shm_addr *addr,
		  enum shm_src_reason r, uint64_t now_ns, uint64_t log_every_ns);

/* Any process: the refused sources of every slot, merged by address (trips summed, the
 * latest reason kept), most trips first; at most max into out. Returns their number. */
size_t shm_src_top_read(const struct shm *shm, struct shm_src_top *out, size_t max);

#endif
