/* Relay port index: UDP relay port -> allocation records, for the short circuit between
 * turngate's own allocations (shm/shm_relay.h). */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include <urcu/arch.h>

#include "shm/shm_internal.h"

#define RELAY_READ_TRIES 64

static uint32_t *relay_way(const struct shm *shm, uint16_t port)
{
	return shm_relay_hdr(shm)->ways_tab + (uint64_t)port * SHM_RELAY_WAYS;
}

static struct shm_relay_ctr *relay_ctr(const struct shm *shm, uint32_t idx)
{
	return shm_relay_ctrs(shm) + idx;
}

/* Relaxed: whether record idx still holds UDP relay port `port` in any state but FREE.
 * Decides only whether a way may be reused; readers check under the seqlock. */
static bool rec_holds(const struct shm *shm, uint32_t idx, uint16_t port)
{
	const struct shm_alloc *r;
	enum shm_alloc_state st;

	if (idx >= shm->cfg.alloc_cap)
		return false;
	r = shm_alloc_at(shm, idx);
	st = SHM_ALLOC_WORD_STATE(CMM_LOAD_SHARED(r->state));
	if (st == SHM_ALLOC_FREE || st > SHM_ALLOC_DYING)
		return false;
	return CMM_LOAD_SHARED(r->relay.port) == port || CMM_LOAD_SHARED(r->relay2.port) == port;
}

int shm_relay_add(struct shm *shm, uint16_t port, uint32_t idx)
{
	uint32_t *w, want = idx + 1;

	shm_check_handle(shm);
	if (shm->ro)
		return -EROFS;
	if (idx >= shm->cfg.alloc_cap)
		return -EINVAL;
	w = relay_way(shm, port);
	for (unsigned i = 0; i < SHM_RELAY_WAYS; i++)
		if (CMM_LOAD_SHARED(w[i]) == want)
			return 0;
	for (unsigned i = 0; i < SHM_RELAY_WAYS; i++) {
		uint32_t cur = CMM_LOAD_SHARED(w[i]);

		/* An empty way, or one a dead or finished owner left behind. The record
		 * being entered does not hold the port in its record yet (it is filled after
		 * the bind), so it never looks stale to itself. */
		if (cur != 0 && rec_holds(shm, cur - 1, port))
			continue;
		if (uatomic_cmpxchg(&w[i], cur, want) == cur)
			return 0;
	}
	return -ENOSPC;
}

void shm_relay_del(struct shm *shm, uint16_t port, uint32_t idx)
{
	uint32_t *w;

	shm_check_handle(shm);
	if (shm->ro || idx >= shm->cfg.alloc_cap)
		return;
	w = relay_way(shm, port);
	for (unsigned i = 0; i < SHM_RELAY_WAYS; i++)
		if (CMM_LOAD_SHARED(w[i]) == idx + 1)
			(void)uatomic_cmpxchg(&w[i], idx + 1, 0);
}

unsigned shm_relay_find(const struct shm *shm, uint16_t port, uint32_t out[SHM_RELAY_WAYS])
{
	const uint32_t *w;
	unsigned n = 0;

	shm_check_handle(shm);
	w = relay_way(shm, port);
	for (unsigned i = 0; i < SHM_RELAY_WAYS; i++) {
		uint32_t v = CMM_LOAD_SHARED(w[i]);

		if (v != 0 && v - 1 < shm->cfg.alloc_cap)
			out[n++] = v - 1;
	}
	return n;
}

static bool addr_eq(const struct shm_addr *a, const struct shm_addr *b)
{
	return a->family == b->family && a->port == b->port &&
	       memcmp(a->addr, b->addr, a->family == AF_INET ? 4 : 16) == 0;
}

int shm_relay_target_fill(const struct shm_alloc *r, uint16_t port, const struct shm_addr *from,
			  uint64_t now_ns, struct shm_relay_target *t)
{
	if (r->client_transport == SHM_TRANSPORT_NONE)
		return -ENOENT;
	if (r->relay.port == port && r->relay.family != 0)
		t->relay = r->relay;
	else if (r->relay2.port == port && r->relay2.family != 0)
		t->relay = r->relay2;
	else
		return -ENOENT;
	t->transport = r->client_transport;
	t->listener_idx = r->listener_idx;
	t->gen = r->gen;
	t->client = r->client;
	t->server = r->server;
	t->perm = false;
	t->chan = 0;
	t->until_ns = r->expires_ns;
	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS && !t->perm; i++)
		if (r->perms[i].family == from->family && r->perms[i].expires_ns > now_ns &&
		    memcmp(r->perms[i].addr, from->addr, 16) == 0) {
			t->perm = true;
			if (r->perms[i].expires_ns < t->until_ns)
				t->until_ns = r->perms[i].expires_ns;
		}
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS && !t->chan; i++)
		if (r->chans[i].number && r->chans[i].expires_ns > now_ns &&
		    addr_eq(&r->chans[i].peer, from)) {
			t->chan = r->chans[i].number;
			if (r->chans[i].expires_ns < t->until_ns)
				t->until_ns = r->chans[i].expires_ns;
		}
	return 0;
}

/* The fields of one attempt, read between two loads of seq (the caller validates). */
static int target_fields(const struct shm_alloc *r, uint16_t port, const struct shm_addr *from,
			 uint64_t now_ns, struct shm_relay_target *t, char *user, size_t *user_len)
{
	uint32_t w = CMM_LOAD_SHARED(r->state);
	int rc;

	if (SHM_ALLOC_WORD_STATE(w) != SHM_ALLOC_LIVE)
		return -ENOENT;
	rc = shm_relay_target_fill(r, port, from, now_ns, t);
	if (rc < 0)
		return rc;
	t->owner = SHM_ALLOC_WORD_OWNER(w);
	if (user) {
		*user_len = r->user_len < SHM_ALLOC_USER_MAX ? r->user_len : SHM_ALLOC_USER_MAX;
		memcpy(user, r->username, *user_len);
	}
	return 0;
}

int shm_relay_target_read(const struct shm *shm, uint32_t idx, uint16_t port,
			  const struct shm_addr *from, uint64_t now_ns, bool want_user,
			  struct shm_relay_target *out)
{
	const struct shm_alloc *r;
	char user[SHM_ALLOC_USER_MAX];
	size_t user_len = 0;

	shm_check_handle(shm);
	if (idx >= shm->cfg.alloc_cap || from == NULL || out == NULL)
		return -EINVAL;
	r = shm_alloc_at(shm, idx);
	for (int i = 0; i < RELAY_READ_TRIES; i++) {
		uint32_t s1 = CMM_LOAD_SHARED(r->seq);
		int rc;

		if (s1 & 1u) {
			caa_cpu_relax();
			continue;
		}
		cmm_smp_rmb(); /* seq before the fields */
		rc = target_fields(r, port, from, now_ns, out, want_user ? user : NULL, &user_len);
		cmm_smp_rmb(); /* fields before the second seq */
		if (CMM_LOAD_SHARED(r->seq) != s1)
			continue;
		if (rc < 0)
			return rc;
		out->idx = idx;
		out->user_key = want_user ? shm_quota_user_key(user, user_len) : 0;
		return 0;
	}
	return -EAGAIN;
}

void shm_relay_ctr_add(struct shm *shm, uint32_t idx, uint64_t pkts, uint64_t bytes)
{
	shm_check_handle(shm);
	if (shm->ro || idx >= shm->cfg.alloc_cap)
		return;
	uatomic_add(&relay_ctr(shm, idx)->pkts, pkts);
	uatomic_add(&relay_ctr(shm, idx)->bytes, bytes);
}

void shm_relay_ctr_get(const struct shm *shm, uint32_t idx, uint64_t *pkts, uint64_t *bytes)
{
	shm_check_handle(shm);
	*pkts = *bytes = 0;
	if (idx >= shm->cfg.alloc_cap)
		return;
	*pkts = CMM_LOAD_SHARED(relay_ctr(shm, idx)->pkts);
	*bytes = CMM_LOAD_SHARED(relay_ctr(shm, idx)->bytes);
}

void shm_relay_ctr_reset(struct shm *shm, uint32_t idx)
{
	shm_check_handle(shm);
	if (shm->ro || idx >= shm->cfg.alloc_cap)
		return;
	CMM_STORE_SHARED(relay_ctr(shm, idx)->pkts, 0);
	CMM_STORE_SHARED(relay_ctr(shm, idx)->bytes, 0);
}

void shm_relay_init(struct shm_relay_hdr *h)
{
	h->magic = SHM_RELAY_MAGIC;
	h->version = SHM_RELAY_VERSION;
	h->ways = SHM_RELAY_WAYS;
	h->ports = SHM_RELAY_PORTS;
}

int shm_relay_validate(const struct shm_relay_hdr *h)
{
	if (h->magic != SHM_RELAY_MAGIC || h->version != SHM_RELAY_VERSION ||
	    h->ways != SHM_RELAY_WAYS || h->ports != SHM_RELAY_PORTS)
		return -EBADMSG;
	return 0;
}
