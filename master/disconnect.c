/* Master: ending a user's allocations with one frame per worker (contract in
 * master/disconnect.h). */
#include "config.h"

#include "master/disconnect.h"
#include "master/linger.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/ipc.h"
#include "common/log.h"
#include "common/mono.h"
#include "shm/shm.h"

/* The worker of slot s, when it has a control channel. */
static bool slot_running(const struct master *m, uint32_t s)
{
	return s < m->n_slots && m->workers[s].ctl_fd >= 0;
}

static int send_one(int fd, const char *user)
{
	return user != NULL ? ipc_send_disconnect_user(fd, user) : ipc_send_disconnect_revoked(fd);
}

void disconnect_count(struct master *m, disconnect_pick_fn pick, const void *arg,
		      struct disconnect_plan *p)
{
	struct shm_alloc rec;
	uint32_t cursor = 0, idx;

	p->not_running = 0;
	p->per = calloc(m->n_slots ? m->n_slots : 1, sizeof(*p->per));
	while (shm_alloc_next_live(m->shm, &cursor, &idx) == 0) {
		if (shm_alloc_read_copy(m->shm, idx, &rec) < 0 ||
		    SHM_ALLOC_WORD_STATE(rec.state) != SHM_ALLOC_LIVE || !pick(m, &rec, arg))
			continue;
		if (p->per != NULL && slot_running(m, rec.owner))
			p->per[rec.owner]++;
		else
			p->not_running++;
	}
	explicit_bzero(&rec, sizeof(rec));
}

void disconnect_plan_free(struct disconnect_plan *p)
{
	free(p->per);
	p->per = NULL;
}

void disconnect_send(struct master *m, const char *user, struct disconnect_plan *p,
		     const char *why, struct disconnect_tally *t)
{
	unsigned *per = p->per;
	/* Read before any frame goes: an entry stamped after its send would take a record the
	 * worker created after reading the frame for one from before it (master/discsent.h). */
	uint64_t now = mono_ns();

	memset(t, 0, sizeof(*t));
	t->not_reached = p->not_running;
	for (unsigned s = 0; per != NULL && s < m->n_slots; s++) {
		int rc;

		if (per[s] == 0)
			continue;
		rc = send_one(m->workers[s].ctl_fd, user);
		if (rc < 0) {
			log_warn("master", "worker %u: cannot send DISCONNECT: %s: %u allocation(s) "
				 "not reached", s, strerror(-rc), per[s]);
			t->not_reached += per[s];
			continue;
		}
		t->ended += per[s];
		t->workers++;
		/* Kept for a replacement of a worker killed before it reads the frame
		 * (master/discsent.h); the revocation list needs none. */
		if (user != NULL)
			(void)discsent_add_user(&m->workers[s].disc, m->shm, s, user, now);
	}
	disconnect_plan_free(p);
	if (t->not_reached > 0)
		log_warn("master", "%u allocation(s) to end not reached: their worker is not "
			 "running or its control channel is full", t->not_reached);
	linger_stop_all(m, why);
}

int disconnect_many(struct master *m, const char *user, disconnect_pick_fn pick,
		    const void *arg, const char *why, struct disconnect_tally *t)
{
	struct disconnect_plan p;

	memset(t, 0, sizeof(*t));
	if (user != NULL && (user[0] == '\0' || strlen(user) >= IPC_USER_MAX))
		return -EINVAL;
	disconnect_count(m, pick, arg, &p);
	disconnect_send(m, user, &p, why, t);
	return 0;
}

void disconnect_tally_json(json_t *reply, const struct disconnect_tally *t)
{
	json_object_set_new(reply, "disconnected", json_integer(t->ended));
	json_object_set_new(reply, "not_reached", json_integer(t->not_reached));
}
