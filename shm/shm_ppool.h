/* Relay port pool in the shared segment: which relay ports are booked, by which
 * allocation record or RESERVATION-TOKEN, so that any worker can take any free port of a
 * listener's relay range and redeem any worker's reservation (docs/relay.md).
 *
 * Layout (inside region SHM_REGION_RELAY, after the relay index and its counters, see
 * shm/shm_internal.h): SHM_PPOOL_WAYS 64-bit words per port (65 536 ports), then
 * SHM_PPOOL_RESV reservation entries.
 *   word: bits 63..32 the tag of the relay address the port is booked on (shm_ppool_tag,
 *         never 0), bits 31..0 the owner: 1 + a record index, or SHM_PPOOL_RESV_BIT | 1 +
 *         a reservation entry index; 0 = an empty way. Listeners with distinct relay
 *         addresses book the same port number in distinct ways.
 *
 * Ownership is checked, never trusted: a booking counts only while its owner still holds
 * the port. A record holds it while CLAIMED (being filled in: its ports are not written
 * yet) and, LIVE or DYING, while its relay or relay2 has that port; a reservation entry
 * while it is not expired and names the port. So the ports of a worker
 * killed anywhere come back by themselves: its torn records are released by its
 * replacement (or the master), its reservations expire, and the replacement re-adopts
 * its LIVE records, which keep their ports all along. Nothing is locked: every word and
 * entry changes by CAS.
 *
 * A take-over (restart with the state file, live upgrade) does not carry this pool: the
 * copy of each record into the new segment books its ports (shm_ppool_book_record), so
 * the pool is rebuilt from the allocation table before any new worker serves.
 * Reservations are not carried either (a reservation lives 30 s).
 *
 * The pool only books. The kernel decides the bind: a port free here may be bound by
 * another program, and the caller then gives the booking back and tries another port. */
#ifndef TG_SHM_SHM_PPOOL_H
#define TG_SHM_SHM_PPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "shm/shm.h"
#include "shm/shm_alloc.h"

#define SHM_PPOOL_WAYS 4u        /* relay addresses booking one port number */
#define SHM_PPOOL_RESV 4096u     /* reservation entries (a token lives 30 s) */
#define SHM_PPOOL_RESV_BIT 0x80000000u
/* An expired reservation entry is reused only this long after its expiry, so that a
 * redeemer that read it just before it expired never sees it change under it (its port
 * is free at the expiry: such a redeemer may then lose the port and answer 508). */
#define SHM_PPOOL_GRACE_NS UINT64_C(5000000000)

/* The tag of a relay address (family and IP; the port is ignored): never 0. */
uint32_t shm_ppool_tag(const struct shm_addr *relay);

/* Any process: whether `port` is free for `tag` at now_ns (a hint: take decides). */
bool shm_ppool_is_free(const struct shm *shm, uint32_t tag, uint16_t port, uint64_t now_ns);

/* Any process: whether `port` looks free for `tag` from the pool's words alone: no way
 * carries a booking on tag and one way is empty. Reads no record, so a booking whose
 * owner let go still counts here (shm_ppool_is_free checks owners). A hint: take decides. */
bool shm_ppool_unbooked(const struct shm *shm, uint32_t tag, uint16_t port);

/* Worker owning record idx: books `port` on `tag` for it. Returns 0 (booked, or already
 * booked by idx), -EADDRINUSE (another owner holds it), -ENOSPC (every way is held by
 * other relay addresses), -EINVAL, -EROFS. */
int shm_ppool_take(struct shm *shm, uint32_t tag, uint16_t port, uint32_t idx, uint64_t now_ns);

/* Worker owning record idx: gives `port` back (no-op when idx does not book it). */
void shm_ppool_put(struct shm *shm, uint32_t tag, uint16_t port, uint32_t idx);

/* A reservation (EVEN-PORT with the R bit) as stored. */
struct shm_ppool_resv {
	uint64_t token;       /* RESERVATION-TOKEN, never 0 */
	uint64_t lkey;        /* the listener's key (shm_quota_listener_key of its slot) */
	uint64_t expires_ns;  /* CLOCK_MONOTONIC */
	uint32_t tag;
	uint16_t port;
	uint8_t family;
};

/* Any worker: books r->port on r->tag for the reservation r until r->expires_ns.
 * Returns 0, -EADDRINUSE (the port is held), -ENOSPC (no free entry or way), -EINVAL
 * (token 0), -EROFS. */
int shm_ppool_reserve(struct shm *shm, const struct shm_ppool_resv *r, uint64_t now_ns);

/* Any worker: redeems `token` (once) for record idx: the reserved port is then booked by
 * idx and *out tells which. Returns 0, -ENOENT (unknown, spent or expired), -EROFS. */
int shm_ppool_redeem(struct shm *shm, uint64_t token, uint32_t idx, uint64_t now_ns,
		     struct shm_ppool_resv *out);

/* The writer of record idx (a take-over's copy, shm/image.c, before any worker runs):
 * books the ports of its relay and relay2 for it. Idempotent. Returns the number of
 * ports booked (a port another owner holds is not). */
unsigned shm_ppool_book_record(struct shm *shm, uint32_t idx, uint64_t now_ns);

/* Any process: the ports booked at now_ns by records (returned) and by reservations
 * (*n_resv, may be NULL). A relaxed scan, for tests and the fuzzers' leak checks. */
unsigned shm_ppool_held(const struct shm *shm, uint64_t now_ns, unsigned *n_resv);

/* Tests only: drops every reservation (their ports come back at once). */
void shm_ppool_resv_clear(struct shm *shm);

#endif
