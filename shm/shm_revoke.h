/* Revocation list in the shared segment: TURN usernames and user ids whose credentials
 * every worker refuses until the entry expires or is removed (docs/operations.md,
 * "Revoking a credential").
 *
 * Layout (region SHM_REGION_REVOKE): a header with a sequence word, then SHM_REVOKE_MAX
 * entries, of which the first `count` are in use (unordered: a removal moves the last
 * entry into the hole).
 *
 * Writer: the master only (admin command, HTTP API, its tick pruning expired entries),
 * under a seqlock: the sequence is odd while it writes. Readers (workers at every
 * authentication, the master's tools) copy-and-check: they scan, then retry when the
 * sequence moved or was odd. A reader never waits on the writer: after SHM_REVOKE_TRIES
 * unstable reads (a master killed mid-write leaves the word odd until the next start) it
 * goes by its last scan. There is no lock word, so nothing can be left held.
 *
 * Lifetime: the region is part of the state file, so the list survives reloads (which
 * never touch it), worker crashes, restarts and live upgrades (a take-over copies it,
 * shm/image.c). A state file refused at start (another boot, corrupt) loses it with the
 * allocations. Expiry is in unix seconds (CLOCK_REALTIME): an operator's "for 2h".
 */
#ifndef TG_SHM_SHM_REVOKE_H
#define TG_SHM_SHM_REVOKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/shm.h"
#include "shm/shm_alloc.h"

#define SHM_REVOKE_MAX 1024u                    /* entries */
#define SHM_REVOKE_NAME_MAX SHM_ALLOC_USER_MAX  /* bytes: a STUN username turngate accepts */

enum shm_revoke_kind {
	SHM_REVOKE_NONE = 0,
	SHM_REVOKE_USER = 1,     /* the whole TURN username, as the client sends it */
	SHM_REVOKE_USER_ID = 2,  /* the user id of a TURN REST username "<expiry>:<id>", every
				  * expiry (a username without that form is its own id, as
				  * for quotas: shm_quota_user_off) */
};

struct shm_revoke_ent {
	int64_t until;           /* unix seconds it expires at; 0: until removed */
	int64_t since;           /* unix seconds it was added (or last renewed) */
	uint32_t kind;           /* enum shm_revoke_kind */
	uint32_t len;            /* 1..SHM_REVOKE_NAME_MAX */
	char name[SHM_REVOKE_NAME_MAX];
};

/* Master: enters (kind, name[0..len)) until `until` (0: until removed), added at `now`;
 * an existing entry of the same kind and name gets the new times. Expired entries are
 * pruned first. Returns 0 (added), 1 (renewed), -ENOSPC (the list is full), -EINVAL (bad
 * kind or length, until <= now), -EROFS. */
int shm_revoke_add(struct shm *shm, enum shm_revoke_kind kind, const char *name, size_t len,
		   int64_t now, int64_t until);

/* Master: removes the entry. Returns 0, -ENOENT, -EINVAL, -EROFS. */
int shm_revoke_del(struct shm *shm, enum shm_revoke_kind kind, const char *name, size_t len);

/* Master: removes the entries expired at now. Returns how many. */
unsigned shm_revoke_prune(struct shm *shm, int64_t now);

/* Copies the entries in use, live at now, into out[0..cap); returns how many (never more
 * than cap). Any process. */
unsigned shm_revoke_list(const struct shm *shm, int64_t now, struct shm_revoke_ent *out,
			 unsigned cap);

/* Entries live at now (the turngate_revocations gauge). Any process. */
unsigned shm_revoke_count(const struct shm *shm, int64_t now);

/* Any process: whether username user[0..len) is refused at now (an entry of kind USER
 * with that name, or of kind USER_ID with its user id, not expired). Costs one load when
 * the list is empty. */
bool shm_revoke_match(const struct shm *shm, const char *user, size_t len, int64_t now);

/* Any process: whether an entry of kind naming name[0..nlen) refuses username
 * user[0..len), its expiry aside: the test shm_revoke_match applies to each entry (the
 * master counts with it what a new entry will refuse before it stores it). */
bool shm_revoke_names(enum shm_revoke_kind kind, const char *name, size_t nlen,
		      const char *user, size_t len);

/* Changes whenever the list does (the seqlock word): a worker that saw another value
 * walks its allocations again (worker/auth.c, wk_revoke_sweep). */
uint64_t shm_revoke_seq(const struct shm *shm);

/* "user" / "user_id" (NULL for others), and back (SHM_REVOKE_NONE for an unknown word). */
const char *shm_revoke_kind_name(enum shm_revoke_kind kind);

#endif
