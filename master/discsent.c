/* Master: the disconnects each slot's worker was sent and has not acted on yet (contract
 * in master/discsent.h). */
#include "config.h"

#include "master/discsent.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/ipc.h"
#include "common/log.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_quota.h"

static void entry_drop(struct discsent *d, unsigned i)
{
	if (d->e[i].user != NULL)
		d->n_user--;
	free(d->e[i].user);
	memmove(&d->e[i], &d->e[i + 1], (d->n - i - 1) * sizeof(d->e[0]));
	d->n--;
}

/* Room for one more entry at the end: a full list is pruned first (shm not NULL), and its
 * oldest entry goes only if that left it full. */
static struct discsent_entry *entry_new(struct discsent *d, const struct shm *shm, unsigned slot)
{
	if (d->e == NULL) {
		d->e = calloc(DISCSENT_MAX, sizeof(*d->e));
		if (d->e == NULL)
			return NULL;
	}
	if (d->n == DISCSENT_MAX && shm != NULL)
		discsent_prune(d, shm, slot);
	if (d->n == DISCSENT_MAX) {
		entry_drop(d, 0);
		d->dropped++;
	}
	memset(&d->e[d->n], 0, sizeof(d->e[0]));
	return &d->e[d->n];
}

/* An entry for the same record or user already kept (an operator who repeats the command
 * while the allocation is still listed), or NULL. */
static struct discsent_entry *entry_find(struct discsent *d, const char *user, uint32_t idx,
					 uint64_t gen)
{
	for (unsigned i = 0; i < d->n; i++) {
		struct discsent_entry *e = &d->e[i];

		if (user != NULL ? e->user != NULL && strcmp(e->user, user) == 0
				 : e->user == NULL && e->idx == idx && e->gen == gen)
			return e;
	}
	return NULL;
}

int discsent_add_index(struct discsent *d, const struct shm *shm, unsigned slot, uint32_t idx,
		       uint64_t gen)
{
	struct discsent_entry *e = entry_find(d, NULL, idx, gen);

	if (e != NULL) {
		/* The current worker was just sent it; a re-owe countdown keeps running (one
		 * owed to a replacement starts it: the replacement may drop this frame too). */
		if (e->replaced && e->reowe == 0 && e->reowed < DISCSENT_REOWE_MAX)
			e->reowe = DISCSENT_REOWE_TICKS;
		e->owed = false;
		return 0;
	}
	e = entry_new(d, shm, slot);
	if (e == NULL)
		return -ENOMEM;
	e->idx = idx;
	e->gen = gen;
	d->n++;
	return 0;
}

int discsent_add_user(struct discsent *d, const struct shm *shm, unsigned slot, const char *user,
		      uint64_t now_ns)
{
	struct discsent_entry *e = entry_find(d, user, 0, 0);
	char *copy;

	if (e != NULL) {
		/* The later send names every record the earlier one did, and those since. */
		e->sent_ns = now_ns > e->sent_ns ? now_ns : e->sent_ns;
		e->owed = false;	/* just sent; a user entry is never owed again */
		return 0;
	}
	copy = strdup(user);
	e = copy != NULL ? entry_new(d, shm, slot) : NULL;

	if (e == NULL) {
		free(copy);
		return -ENOMEM;
	}
	e->user = copy;
	e->sent_ns = now_ns;
	d->n++;
	d->n_user++;
	return 0;
}

/* Whether the worker has not ended record idx of generation gen yet. A record that cannot
 * be read consistently now (its owner writing) counts as not ended: kept a tick longer,
 * as users_pending does; only a clean read that shows it not LIVE, of another generation
 * or of another owner drops it. */
static bool index_pending(const struct shm *shm, unsigned slot, uint32_t idx, uint64_t gen)
{
	struct shm_alloc rec;
	int rc = shm_alloc_read_copy(shm, idx, &rec);
	bool pending = rc == -EAGAIN ||
		       (rc == 0 && SHM_ALLOC_WORD_STATE(rec.state) == SHM_ALLOC_LIVE &&
			rec.gen == gen && rec.owner == slot);

	explicit_bzero(&rec, sizeof(rec));
	return pending;
}

/* Whether a user entry of d not marked yet matches the user name (len bytes). */
static bool user_unmarked(const struct discsent *d, const char *name, size_t len)
{
	for (unsigned i = 0; i < d->n; i++) {
		const struct discsent_entry *e = &d->e[i];

		if (e->user != NULL && !e->keep &&
		    shm_quota_user_match(name, len, e->user, strlen(e->user)))
			return true;
	}
	return false;
}

/* Marks (e->keep) the user entries of every slot that some LIVE record of that slot,
 * created before the entry was sent, still matches: one walk of the table for all slots.
 * Only the state word of a record of a slot without user entries is read; of the others,
 * the generation and username first (shm_alloc_read_stat), and the whole record is copied
 * (for created_ns) only when the name matches an entry not marked yet. A record that
 * cannot be read consistently now (its owner writing) counts as matching each user entry
 * of its slot: kept a tick longer rather than dropped too early. d[s] is slot s's list
 * (NULL: none), for s < n_slots. */
static void users_pending(struct discsent *const *d, unsigned n_slots, const struct shm *shm)
{
	struct shm_alloc_stat st;
	struct shm_alloc rec;
	uint32_t cursor = 0, idx;

	while (shm_alloc_next_live(shm, &cursor, &idx) == 0) {
		struct discsent *ds;
		unsigned owner;
		bool torn;
		size_t len = 0;
		int rc;

		if (shm_alloc_is_torn(shm, idx, &torn, &owner) < 0 || owner >= n_slots ||
		    d[owner] == NULL || d[owner]->n_user == 0)
			continue;
		ds = d[owner];
		/* A generation is never 0 (shm_alloc_gen_next): the username comes back. */
		rc = shm_alloc_read_stat(shm, idx, 0, &st);
		if (rc == -ENOENT || rc == -EINVAL ||
		    (rc == 0 && !user_unmarked(ds, st.username, st.user_len)))
			continue;	/* ended since, or no entry left to mark by that name */
		torn = shm_alloc_read_copy(shm, idx, &rec) < 0;
		if (!torn && (SHM_ALLOC_WORD_STATE(rec.state) != SHM_ALLOC_LIVE ||
			      rec.owner != owner))
			continue;	/* ended, or claimed again by another slot since */
		if (!torn)
			len = rec.user_len < SHM_ALLOC_USER_MAX ? rec.user_len : SHM_ALLOC_USER_MAX;
		for (unsigned i = 0; i < ds->n; i++) {
			struct discsent_entry *e = &ds->e[i];

			if (e->user != NULL && !e->keep &&
			    (torn || (rec.created_ns < e->sent_ns &&
				      shm_quota_user_match(rec.username, len, e->user,
							   strlen(e->user)))))
				e->keep = true;
		}
	}
	explicit_bzero(&rec, sizeof(rec));
}

/* Drops the entries of one list the table shows acted on (user entries: e->keep set by
 * users_pending). */
static void prune_one(struct discsent *d, const struct shm *shm, unsigned slot)
{
	for (unsigned i = d->n; i-- > 0;) {
		struct discsent_entry *e = &d->e[i];
		bool drop = e->user != NULL ? !e->keep : !index_pending(shm, slot, e->idx, e->gen);

		e->keep = false;
		if (drop)
			entry_drop(d, i);
	}
}

void discsent_prune_all(struct discsent *const *d, unsigned n_slots, const struct shm *shm)
{
	bool users = false;

	for (unsigned s = 0; s < n_slots; s++)
		users = users || (d[s] != NULL && d[s]->n_user > 0);
	if (users)
		users_pending(d, n_slots, shm);
	for (unsigned s = 0; s < n_slots; s++)
		if (d[s] != NULL && d[s]->n > 0)
			prune_one(d[s], shm, s);
}

void discsent_prune(struct discsent *d, const struct shm *shm, unsigned slot)
{
	struct discsent *one[DISCSENT_SLOTS_MAX] = { NULL };

	if (d->n == 0 || slot >= DISCSENT_SLOTS_MAX)
		return;
	one[slot] = d;
	discsent_prune_all(one, slot + 1, shm);
}

void discsent_tick(struct discsent *d)
{
	for (unsigned i = 0; i < d->n; i++) {
		struct discsent_entry *e = &d->e[i];

		if (e->reowe > 0 && --e->reowe == 0) {
			e->owed = true;
			e->reowed++;
		}
	}
}

void discsent_worker_died(struct discsent *d, pid_t pid)
{
	if (d->n == 0)
		return;
	for (unsigned i = 0; i < d->n; i++) {
		d->e[i].owed = true;
		d->e[i].replaced = true;
		d->e[i].reowe = 0;
		d->e[i].reowed = 0;
	}
	d->dead_pid = pid;
}

unsigned discsent_flush(struct discsent *d, int ctl_fd)
{
	unsigned sent = 0;

	d->repeats = 0;
	for (unsigned i = 0; i < d->n && ctl_fd >= 0; i++) {
		struct discsent_entry *e = &d->e[i];

		if (!e->owed)
			continue;
		if ((e->user != NULL ? ipc_send_disconnect_user(ctl_fd, e->user)
				     : ipc_send_disconnect_index(ctl_fd, e->idx, e->gen)) < 0)
			break;
		e->owed = false;
		sent++;
		if (e->reowed > 0)
			d->repeats++;
		if (e->user != NULL)
			continue;	/* no time in its frame: sent once (DISCSENT_REOWE_TICKS) */
		if (e->reowed < DISCSENT_REOWE_MAX)
			e->reowe = DISCSENT_REOWE_TICKS;
		else
			d->gave_up++;
	}
	return sent;
}

void discsent_report(struct discsent *d, unsigned slot)
{
	if (d->gave_up > 0) {
		log_warn("master", "worker %u: %llu disconnect(s) by id re-sent %u times and still "
			 "not acted on: no longer re-sent to this worker", slot,
			 (unsigned long long)d->gave_up, DISCSENT_REOWE_MAX + 1);
		d->gave_up = 0;
	}
	if (d->dropped == 0)
		return;
	log_warn("master", "worker %u: %llu disconnect(s) no longer kept for a re-send: its "
		 "list of %u was full of disconnects not acted on", slot,
		 (unsigned long long)d->dropped, DISCSENT_MAX);
	d->dropped = 0;
}

void discsent_free(struct discsent *d)
{
	for (unsigned i = 0; i < d->n; i++)
		free(d->e[i].user);
	free(d->e);
	memset(d, 0, sizeof(*d));
}
