/* Trust table in the shared segment: source addresses that proved themselves by an
 * authenticated request, each with a few credits for error responses to its
 * unauthenticated UDP requests (reflection protection, docs/security.md).
 *
 * Why credits: an authenticated request carries a nonce that is an HMAC over the client's
 * transport address (worker/auth.c), so it proves that the address received our earlier
 * answer: it cannot come from a spoofed source. Each such request earns its address one
 * credit (up to a cap); each error response to an unauthenticated request from that
 * address may spend one. A crowd pays for its 401s (every client answers its 401 with an
 * authenticated request); a spoofed flood never earns, so it can spend at most what the
 * real clients of the address it spoofs earned, and nothing for any other address.
 *
 * Layout (an ABI, like the rest of the segment): a region of its own at off_trust, a
 * header (magic, version, geometry, the hash key) then SHM_TRUST_SETS sets of
 * SHM_TRUST_WAYS entries of two 64-bit words:
 *   key   : keyed hash (SipHash-2-4 under the region's key) of the canonical address; 0 =
 *           empty way. The caller hashes (shm/ knows no addresses), see shm_trust_hkey().
 *   state : bits 63..48 the top 16 bits of the key it belongs to, 47..32 credits, 31..0
 *           the CLOCK_MONOTONIC second of the last earn.
 * The set is key % SHM_TRUST_SETS. Fixed size, nothing grows: a full set evicts the way
 * that earned least recently.
 *
 * Concurrency: every worker reads and writes any entry, with compare-and-swap on one
 * 64-bit word at a time; no lock, so a worker killed anywhere leaves nothing held. A way
 * being taken over by another key may be seen with the new key and the old state for a
 * moment; the tag bits of the state tell them apart, and a state whose tag does not match
 * its key counts as empty (no credit: a race can only limit more, never grant what was
 * not earned). Two workers earning for the same new key at once may claim two ways; the
 * spare one expires.
 *
 * Who calls: workers (earn, spend), the master (count, for metrics), read-only tools
 * (count). All functions take times and parameters as arguments, so tests drive them.
 */
#ifndef TG_SHM_SHM_TRUST_H
#define TG_SHM_SHM_TRUST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/shm.h"

#define SHM_TRUST_SETS 4096u     /* power of two */
#define SHM_TRUST_WAYS 4u
#define SHM_TRUST_KEY_LEN 16u
#define SHM_TRUST_MAX_CREDITS 65535u

/* The hash key (SHM_TRUST_KEY_LEN bytes), drawn by shm_create(). The same in every
 * process of the segment, so every worker finds the same entry for an address. */
const uint8_t *shm_trust_hkey(const struct shm *shm);

enum shm_trust_earned {
	SHM_TRUST_CREDITED = 0,  /* the address had an entry (live or expired): one credit more */
	SHM_TRUST_NEW,           /* a new entry in an empty or expired way */
	SHM_TRUST_EVICTED,       /* a new entry in place of a live one (its set was full) */
	SHM_TRUST_SKIPPED,       /* lost every race for a way; nothing recorded */
};

/* Worker: the address hashed to h made an authenticated request at now_s (CLOCK_MONOTONIC
 * seconds). Its entry gets one credit (at most `cap`, clamped to SHM_TRUST_MAX_CREDITS)
 * and now_s as last earn; an entry older than window_s starts again from one credit.
 * An entry already at the cap that earned this second is left alone (no write: the hot
 * path of a busy address is one read). Returns a value of enum shm_trust_earned, or
 * -EROFS on a read-only handle. */
int shm_trust_earn(struct shm *shm, uint64_t h, uint32_t now_s, uint32_t window_s, uint32_t cap);

/* Worker: takes one credit of h's entry when it has one and earned within window_s of
 * now_s. True when a credit was taken. False on a read-only handle. */
bool shm_trust_spend(struct shm *shm, uint64_t h, uint32_t now_s, uint32_t window_s);

/* Any process: credits h's entry holds now (0 when none or expired). For tests. */
uint32_t shm_trust_credits(const struct shm *shm, uint64_t h, uint32_t now_s, uint32_t window_s);

/* Any process: entries that earned within window_s of now_s (a relaxed scan of the
 * table: a gauge, not a snapshot). */
uint32_t shm_trust_count(const struct shm *shm, uint32_t now_s, uint32_t window_s);

#endif
