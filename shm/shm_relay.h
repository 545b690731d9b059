/* Relay port index in the shared segment: which allocation records hold a UDP relay port,
 * so that a worker relaying towards one of turngate's own relay addresses finds the
 * receiving allocation in O(1), whichever worker owns it (the short circuit,
 * worker/shortcut.c and docs/relay.md).
 *
 * Layout (region SHM_REGION_RELAY): a header, then SHM_RELAY_WAYS words per port
 * (65 536 ports), each 0 (empty) or 1 + a record index; then, per allocation record, the
 * packets and bytes that other workers delivered to its client by the short circuit
 * (counted as "from peer", beside the record's own owner-only counters).
 *
 * Writers: the worker that binds a UDP relay port enters its record (shm_relay_add, after
 * the bind, while the record is CLAIMED or, at adoption, LIVE) and takes it out before
 * the port is closed (shm_relay_del), or, for a record of a dead predecessor that it
 * releases unadopted, before the release (worker/adopt.c). Each word changes only by
 * CAS, so workers whose listeners share a port (distinct relay addresses) do not
 * overwrite each other. Entries
 * a dead worker left behind are not trusted: a reader checks every candidate record
 * under its seqlock (LIVE, holds the port), and shm_relay_add reuses a way whose record
 * no longer holds that port. The per-record delivery counts are atomic adds by any
 * worker; the owner clears them when it claims the record.
 *
 * Nothing of this region is carried across a take-over (restart, upgrade): the workers
 * that adopt the records enter them again when they bind the relay ports, and delivery
 * counts by other workers start from 0. */
#ifndef TG_SHM_SHM_RELAY_H
#define TG_SHM_SHM_RELAY_H

#include <stdbool.h>
#include <stdint.h>

#include "shm/shm.h"
#include "shm/shm_alloc.h"

#define SHM_RELAY_WAYS 4u /* records per port: listeners with distinct relay addresses */

/* Owner of record idx, after binding UDP relay port `port`: enters idx (idempotent).
 * Returns 0, or -ENOSPC when every way holds a record that still holds the port (the
 * allocation is then not found by the short circuit and is relayed the ordinary way),
 * -EINVAL, -EROFS. */
int shm_relay_add(struct shm *shm, uint16_t port, uint32_t idx);

/* Owner of record idx, before closing relay port `port`: takes idx out (no-op when it is
 * not there). */
void shm_relay_del(struct shm *shm, uint16_t port, uint32_t idx);

/* Any process: the records entered for `port` (at most SHM_RELAY_WAYS) into out.
 * Returns their number. Candidates only: check each with shm_relay_target_read. */
unsigned shm_relay_find(const struct shm *shm, uint16_t port, uint32_t out[SHM_RELAY_WAYS]);

/* What the short circuit needs of a receiving record, read consistently. */
struct shm_relay_target {
	uint32_t idx;
	unsigned owner;    /* owner slot */
	uint8_t transport; /* enum shm_transport of its client */
	uint16_t listener_idx; /* its listener's slot (shm/shm_lslot.h) */
	uint64_t user_key; /* shm_quota_user_key of its username (want_user only) */
	uint64_t gen;      /* the record's claim generation */
	struct shm_addr client;
	struct shm_addr server; /* the listener address its client reached */
	struct shm_addr relay; /* its relay address that holds the port */
	bool perm;             /* a live permission for from's IP */
	uint16_t chan;         /* the live channel bound to from (IP and port), 0 none */
	uint64_t until_ns;     /* with perm and chan: the earliest of their expiries and the
				* allocation's */
};

/* Any process: reads record idx under its seqlock. It must be LIVE and hold UDP relay
 * port `port` (relay or relay2); perm and chan are decided for the sender's announced
 * address `from` at now_ns; want_user computes user_key. Returns 0, -ENOENT (not LIVE,
 * not that port, not UDP relaying), -EAGAIN (being written: treat as not found), -EINVAL. */
int shm_relay_target_read(const struct shm *shm, uint32_t idx, uint16_t port,
			  const struct shm_addr *from, uint64_t now_ns, bool want_user,
			  struct shm_relay_target *out);

/* Owner of record r (in any state: it writes no field meanwhile): the same fields as
 * shm_relay_target_read but idx and owner, without the state check. 0 or -ENOENT. */
int shm_relay_target_fill(const struct shm_alloc *r, uint16_t port, const struct shm_addr *from,
			  uint64_t now_ns, struct shm_relay_target *out);

/* Any worker: packets and bytes delivered to record idx's client by the short circuit
 * from a worker that does not own it (atomic adds). */
void shm_relay_ctr_add(struct shm *shm, uint32_t idx, uint64_t pkts, uint64_t bytes);
/* Any process: those counts (0 for an index out of range). */
void shm_relay_ctr_get(const struct shm *shm, uint32_t idx, uint64_t *pkts, uint64_t *bytes);
/* Owner, when it claims record idx: its counts start at 0. */
void shm_relay_ctr_reset(struct shm *shm, uint32_t idx);

#endif
