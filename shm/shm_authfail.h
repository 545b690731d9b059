/* Failed-authentication table in the shared segment: a decaying count of failed
 * authentications per key (a source prefix, a username), seen by every worker, so that
 * password guessing is throttled per source and per username, not per worker
 * (worker/authfail.h decides what is throttled; docs/security.md says why).
 *
 * Each entry holds a GCRA cell: the CLOCK_MONOTONIC millisecond at which its failures
 * are forgiven ("tat", theoretical arrival time). A failure adds the budget's interval to
 * max(tat, now); the key is over its budget while tat - now exceeds the budget's window.
 * That is a counter that loses one failure every interval, with nothing to sweep.
 *
 * Layout (an ABI): it lives in the trust region (shm/shm_trust.h), after the trust
 * entries, keyed with the trust region's hash key: SHM_AUTHFAIL_SETS sets of
 * SHM_AUTHFAIL_WAYS entries of two 64-bit words:
 *   key   : keyed hash of the prefix or username, computed by the caller; 0 = empty way
 *   state : bits 63..48 the top 16 bits of the key it belongs to, 47..0 tat (ms)
 * Fixed size, nothing grows: a new key takes an empty way, else the way whose failures
 * are forgiven first (smallest tat). Keys are secret-keyed hashes: nobody can aim at a set.
 *
 * Concurrency: as the trust table, compare-and-swap on one word at a time, no lock, so a
 * worker killed anywhere leaves nothing held; a state whose tag does not match its key
 * reads as no failures. Races can lose a failure or count one twice, never more.
 *
 * Who calls: workers (tat, charge), the master and tools (count). Times are arguments.
 */
#ifndef TG_SHM_SHM_AUTHFAIL_H
#define TG_SHM_SHM_AUTHFAIL_H

#include <stdint.h>

#include "shm/shm.h"

#define SHM_AUTHFAIL_SETS 4096u     /* power of two */
#define SHM_AUTHFAIL_WAYS 4u
#define SHM_AUTHFAIL_TAT_MAX ((UINT64_C(1) << 48) - 1)
/* The window of every budget (worker/authfail.h): N failures per minute. */
#define SHM_AUTHFAIL_WINDOW_MS 60000u

/* Bytes the table takes after the trust entries. */
#define SHM_AUTHFAIL_BYTES ((uint64_t)SHM_AUTHFAIL_SETS * SHM_AUTHFAIL_WAYS * 16u)

/* Any process: the tat (ms) of h's entry, 0 when it has none. */
uint64_t shm_authfail_tat(const struct shm *shm, uint64_t h);

/* Worker: charges h's entry (creating it when needed): its tat becomes
 * max(max(tat, now_ms) + add_ms, floor_ms), at most cap_ms. Returns the new tat, or 0
 * when nothing was recorded (a read-only handle, or every race for a way lost). */
uint64_t shm_authfail_charge(struct shm *shm, uint64_t h, uint64_t now_ms, uint64_t add_ms,
			     uint64_t floor_ms, uint64_t cap_ms);

/* Any process: entries whose tat is later than now_ms + window_ms (over a budget of that
 * window; a relaxed scan: a gauge, not a snapshot). */
uint32_t shm_authfail_count(const struct shm *shm, uint64_t now_ms, uint64_t window_ms);

#endif
