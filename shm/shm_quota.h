/* Allocation counts in the shared segment: per user, per listener and in total, updated
 * with atomics by whichever worker starts or ends an allocation, so every worker decides
 * a quota on one count in O(1).
 *
 * Keys: shm_quota_key() hashes a name (a user id from shm_quota_user_key(), or a listener's
 * slot from shm_quota_listener_key()) into a 64-bit key; the domain keeps a user and a
 * listener apart. The hash is not keyed by the segment, so a key computed by one run means
 * the same in the next (a record's listener slot, shm/shm_lslot.h, is stable by name
 * across reloads and carried with the record by a take-over).
 *
 * Table: a power-of-two number of 64-bit entries, at least four per allocation record
 * (shm_quota_entries()), so at most a quarter of them can be in use: every key in use
 * has a live allocation behind it, and an allocation holds two keys (its user and its
 * listener). An entry is one word: the top 38 bits of a key (the tag) and a 26-bit count.
 * A key lives in the first entry of the 64 from hash % entries on that carries its tag;
 * a key without one takes the first entry of those 64 whose count is 0 (never used, or
 * left by a key whose allocations all ended). Every change is a CAS on the one word, so
 * there is no lock a killed worker could leave held. If none of the 64 entries has the tag
 * or a count of 0 (the table is full there), shm_quota_take() refuses with -ENOSPC.
 *
 * Exactness: a take checks the limit and adds 1 in the same CAS, so two workers never
 * both take the last unit. The one inexact case: two workers taking a key that has no
 * entry yet while a third frees an earlier entry of the same window may give the key two
 * entries; the totals stay exact (shm_quota_give() takes from whichever), but a limit is
 * then checked against one of the two until their counts drain.
 *
 * Who calls: workers (take when they publish a record, give when it ends or a crashed
 * predecessor's record is released), the master (shm_slot_release_all, the take-over's
 * recount in shm/image.c). Tools read with shm_quota_count()/shm_quota_total(). */
#ifndef TG_SHM_SHM_QUOTA_H
#define TG_SHM_SHM_QUOTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/shm.h"

#define SHM_QUOTA_WINDOW 64u        /* entries a key may live in */
#define SHM_QUOTA_MIN_ENTRIES 1024u
#define SHM_QUOTA_COUNT_BITS 26u

enum shm_quota_domain {
	SHM_QUOTA_USER = 'u',
	SHM_QUOTA_LISTENER = 'l',
};

/* The user key of a username as an allocation record holds it: the REST user id of a
 * username of the form "<expiry>:<id>" (1 to 19 digits, a colon, at least one byte), so
 * that credentials of one user minted at different times share a count; else the whole
 * username (a static user). A static username of that form counts under its <id>. */
uint64_t shm_quota_user_key(const char *user, size_t len);

/* Where that user id starts in user[0..len): after the colon of a REST username, else 0. */
size_t shm_quota_user_off(const char *user, size_t len);

/* Whether want[0..want_len) names the username user[0..len): the whole of it, or its user
 * id (shm_quota_user_off: the id of a REST username "<expiry>:<id>"), the user its
 * allocations count under. The one test of `allocations --user` and `disconnect --user`:
 * the master picks the records with it and the owner workers end the same ones (both
 * processes call it; IPC_DISC_USER). */
bool shm_quota_user_match(const char *user, size_t len, const char *want, size_t want_len);

/* Limits of one take; 0 = unlimited. */
struct shm_quota_limits {
	uint32_t user;
	uint32_t listener;
	uint32_t total;
};

/* Entries of the table for a segment of alloc_cap records (a power of two). */
uint64_t shm_quota_entries(uint32_t alloc_cap);

/* Key of name[0..len) in domain (never 0). */
uint64_t shm_quota_key(enum shm_quota_domain domain, const char *name, size_t len);

/* The key of the listener holding slot (shm/shm_lslot.h), 0 (not counted per listener)
 * for a slot >= SHM_MAX_LISTENERS. */
uint64_t shm_quota_listener_key(uint32_t slot);

/* Counts one allocation of user_key on listener_key (0: no listener count) unless a limit
 * would be passed; all or nothing. Returns 0, -EDQUOT (the user is at lim->user),
 * -EUSERS (the listener is at lim->listener), -EBUSY (the total is at lim->total),
 * -ENOSPC (no entry for a key), -EROFS, -EINVAL. */
int shm_quota_take(struct shm *shm, uint64_t user_key, uint64_t listener_key,
		   const struct shm_quota_limits *lim);

/* Uncounts one allocation taken with the same keys. A user key without a count (an
 * allocation that was never counted) changes nothing and gives -ENOENT; so does a listener
 * key without one (after the user and total were uncounted). Returns 0, -ENOENT, -EROFS,
 * -EINVAL. */
int shm_quota_give(struct shm *shm, uint64_t user_key, uint64_t listener_key);

struct shm_alloc;

/* The same for the keys of a record: shm_quota_user_key() of its username and
 * shm_quota_listener_key() of its listener slot. The one place that derives a record's
 * keys, for the worker that publishes or ends it, the replacement that releases a dead
 * predecessor's LIVE record, the master's shm_slot_release_all and the take-over. */
int shm_quota_take_rec(struct shm *shm, const struct shm_alloc *rec,
		       const struct shm_quota_limits *lim);
int shm_quota_give_rec(struct shm *shm, const struct shm_alloc *rec);

/* Current count of a key (0 when it has none) and the total. */
uint64_t shm_quota_count(const struct shm *shm, uint64_t key);
uint64_t shm_quota_total(const struct shm *shm);

#endif
