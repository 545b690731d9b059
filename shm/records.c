/* Session-record rings: single producer per slot, the master as consumer (contract in
 * shm/shm_records.h). */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "shm/shm_internal.h"
#include "shm/shm_records.h"

static_assert((SHM_REC_RING & (SHM_REC_RING - 1)) == 0, "SHM_REC_RING is a power of two");

static const char *const reason_names[SHM_REC__COUNT] = {
	[SHM_REC_OTHER] = "other",
	[SHM_REC_REFRESH0] = "refresh0",
	[SHM_REC_EXPIRY] = "expiry",
	[SHM_REC_DISCONNECT] = "disconnect",
	[SHM_REC_REVOKE] = "revoke",
	[SHM_REC_ADMIN] = "admin_disconnect",
	[SHM_REC_LISTENER_REMOVED] = "listener_removed",
	[SHM_REC_QUOTA] = "quota",
	[SHM_REC_SHUTDOWN] = "shutdown",
	[SHM_REC_WORKER_CRASH] = "worker_crash",
};

const char *shm_rec_reason_name(enum shm_rec_reason r)
{
	return (unsigned)r < SHM_REC__COUNT ? reason_names[r] : "other";
}

/* wk_alloc_destroy's texts (worker/), one place that maps them. */
static const struct {
	const char *why;
	enum shm_rec_reason reason;
} why_map[] = {
	{ "refreshed with lifetime 0", SHM_REC_REFRESH0 },
	{ "lifetime expired", SHM_REC_EXPIRY },
	{ "TCP connection closed", SHM_REC_DISCONNECT },
	{ "DTLS association closed", SHM_REC_DISCONNECT },
	{ "credential revoked", SHM_REC_REVOKE },
	{ "disconnected by admin", SHM_REC_ADMIN },
	{ "listener removed", SHM_REC_LISTENER_REMOVED },
	{ "over quota", SHM_REC_QUOTA },
	/* a handed-over socket refused (wk_relay_verify): as its adoption's failure was */
	{ "relay socket refused", SHM_REC_WORKER_CRASH },
};

enum shm_rec_reason shm_rec_reason_of(const char *why)
{
	for (size_t i = 0; why != NULL && i < sizeof(why_map) / sizeof(why_map[0]); i++)
		if (strcmp(why, why_map[i].why) == 0)
			return why_map[i].reason;
	return SHM_REC_OTHER;
}

void shm_records_init(struct shm_records_hdr *h, uint32_t n_rings)
{
	h->n_rings = n_rings;
	h->ring_cap = SHM_REC_RING;
	h->version = SHM_RECORDS_VERSION;
	h->magic = SHM_RECORDS_MAGIC;
}

int shm_records_validate(const struct shm_records_hdr *h, uint32_t n_rings)
{
	if (h->magic != SHM_RECORDS_MAGIC || h->version != SHM_RECORDS_VERSION ||
	    h->n_rings != n_rings || h->ring_cap != SHM_REC_RING)
		return -EBADMSG;
	return 0;
}

int shm_records_push_ev(struct shm *shm, unsigned slot, const struct shm_rec_ev *ev)
{
	struct shm_rec_ring *r;
	uint64_t head, tail;

	shm_check_handle(shm);
	if (shm->ro)
		return -EROFS;
	if (slot >= shm->cfg.n_slots || ev == NULL)
		return -EINVAL;
	r = shm_rec_ring_at(shm, slot);
	head = CMM_LOAD_SHARED(r->head);
	tail = CMM_LOAD_SHARED(r->tail);
	cmm_smp_mb();	/* the tail before our stores into the slot it freed */
	if (head - tail >= SHM_REC_RING) {
		CMM_STORE_SHARED(r->dropped, CMM_LOAD_SHARED(r->dropped) + 1);
		return -ENOBUFS;
	}
	memcpy(&r->ev[head & (SHM_REC_RING - 1)], ev, sizeof(*ev));
	cmm_smp_wmb();	/* the event before the head that publishes it */
	CMM_STORE_SHARED(r->head, head + 1);
	return 0;
}

static int build_ev(const struct shm *shm, uint32_t idx, const struct shm_alloc *rec,
		    enum shm_rec_reason reason, uint64_t now_ns, bool carried,
		    struct shm_rec_ev *out)
{
	struct shm_rec_ev ev;
	unsigned n = 0;

	if (rec == NULL || (!carried && idx >= shm->cfg.alloc_cap))
		return -EINVAL;
	memset(&ev, 0, sizeof(ev));
	ev.idx = idx;
	ev.reason = (uint8_t)reason;
	ev.transport = rec->client_transport;
	ev.listener_idx = rec->listener_idx;
	ev.gen = rec->gen;
	ev.created_ns = rec->created_ns;
	ev.ended_ns = now_ns;
	for (unsigned i = 0; i < SHM_ACTR__COUNT; i++)
		ev.ctr[i] = CMM_LOAD_SHARED(rec->ctr[i]);
	if (!carried) {
		/* deliveries other workers short-circuited to this record's client */
		const struct shm_relay_ctr *sc = &shm_relay_ctrs(shm)[idx];

		ev.ctr[SHM_ACTR_PKTS_FROM_PEER] += CMM_LOAD_SHARED(sc->pkts);
		ev.ctr[SHM_ACTR_BYTES_FROM_PEER] += CMM_LOAD_SHARED(sc->bytes);
	}
	ev.carried = carried ? 1 : 0;
	ev.client = rec->client;
	ev.server = rec->server;
	ev.relay = rec->relay;
	ev.relay2 = rec->relay2;
	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS; i++) {
		/* in force at now_ns: an expired one not swept yet (its timer's next tick; an
		 * adopted record's bound, worker/table.h) is not */
		if (rec->perms[i].family == 0 || rec->perms[i].expires_ns <= now_ns)
			continue;
		if (n < SHM_REC_PEERS) {
			memcpy(ev.peers[n].addr, rec->perms[i].addr, sizeof(ev.peers[n].addr));
			ev.peers[n].family = rec->perms[i].family;
		}
		n++;
	}
	ev.n_peers = (uint16_t)n;
	ev.user_len = rec->user_len <= SHM_ALLOC_USER_MAX ? rec->user_len : SHM_ALLOC_USER_MAX;
	memcpy(ev.username, rec->username, ev.user_len);
	ev.owner = rec->owner;
	memcpy(out, &ev, sizeof(ev));
	return 0;
}

int shm_records_event(const struct shm *shm, uint32_t idx, const struct shm_alloc *rec,
		      enum shm_rec_reason reason, uint64_t now_ns, struct shm_rec_ev *out)
{
	shm_check_handle(shm);
	return build_ev(shm, idx, rec, reason, now_ns, false, out);
}

static int push_rec(struct shm *shm, unsigned slot, uint32_t idx, const struct shm_alloc *rec,
		    enum shm_rec_reason reason, uint64_t now_ns, bool carried)
{
	struct shm_rec_ev ev;
	int rc = build_ev(shm, idx, rec, reason, now_ns, carried, &ev);

	return rc < 0 ? rc : shm_records_push_ev(shm, slot, &ev);
}

static int push_named(struct shm *shm, unsigned slot, uint32_t idx, const struct shm_alloc *rec,
		      enum shm_rec_reason reason, uint64_t now_ns, const char *listener,
		      bool start)
{
	struct shm_rec_ev ev;
	int rc = build_ev(shm, idx, rec, reason, now_ns, false, &ev);

	if (rc < 0)
		return rc;
	if (listener != NULL)
		strncpy(ev.listener, listener, sizeof(ev.listener) - 1);
	ev.start = start ? 1 : 0;
	return shm_records_push_ev(shm, slot, &ev);
}

int shm_records_push(struct shm *shm, unsigned slot, uint32_t idx, const struct shm_alloc *rec,
		     enum shm_rec_reason reason, uint64_t now_ns, const char *listener)
{
	return push_named(shm, slot, idx, rec, reason, now_ns, listener, false);
}

int shm_records_push_start(struct shm *shm, unsigned slot, uint32_t idx,
			   const struct shm_alloc *rec, uint64_t now_ns, const char *listener)
{
	shm_check_handle(shm);
	if (!CMM_LOAD_SHARED(shm_records_hdr(shm)->start_wanted))
		return 0;	/* one load: what the relay path pays with start records off */
	return push_named(shm, slot, idx, rec, SHM_REC_OTHER, now_ns, listener, true);
}

void shm_records_want_start(struct shm *shm, bool on)
{
	shm_check_handle(shm);
	if (!shm->ro)
		CMM_STORE_SHARED(shm_records_hdr(shm)->start_wanted, on ? 1u : 0u);
}

int shm_records_push_carried(struct shm *shm, unsigned slot, uint32_t idx,
			     const struct shm_alloc *rec, enum shm_rec_reason reason,
			     uint64_t now_ns)
{
	return push_rec(shm, slot, idx, rec, reason, now_ns, true);
}

unsigned shm_records_drain(struct shm *shm, void (*fn)(const struct shm_rec_ev *ev, void *arg),
			   void *arg)
{
	unsigned n = 0;

	shm_check_handle(shm);
	if (shm->ro)
		return 0;
	for (unsigned s = 0; s < shm->cfg.n_slots; s++) {
		struct shm_rec_ring *r = shm_rec_ring_at(shm, s);
		uint64_t head = CMM_LOAD_SHARED(r->head), tail = CMM_LOAD_SHARED(r->tail);

		if (head == tail)
			continue;	/* nothing new, no store: the state file page stays clean */
		cmm_smp_rmb();	/* the head before the events it publishes */
		if (head - tail > SHM_REC_RING)
			tail = head - SHM_REC_RING;	/* a corrupt pair: keep the newest */
		for (; tail != head; tail++, n++) {
			struct shm_rec_ev ev;

			memcpy(&ev, &r->ev[tail & (SHM_REC_RING - 1)], sizeof(ev));
			fn(&ev, arg);
		}
		cmm_smp_mb();	/* our copies before the producer may reuse the entries */
		CMM_STORE_SHARED(r->tail, tail);
	}
	return n;
}

uint64_t shm_records_dropped(const struct shm *shm)
{
	uint64_t d = 0;

	shm_check_handle(shm);
	for (unsigned s = 0; s < shm->cfg.n_slots; s++)
		d += CMM_LOAD_SHARED(shm_rec_ring_at(shm, s)->dropped);
	return d + CMM_LOAD_SHARED(shm_records_hdr(shm)->master_dropped);
}

void shm_records_counts(const struct shm *shm, uint64_t *written, uint64_t *hook_failures)
{
	const struct shm_records_hdr *h;

	shm_check_handle(shm);
	h = shm_records_hdr(shm);
	*written = CMM_LOAD_SHARED(h->written);
	*hook_failures = CMM_LOAD_SHARED(h->webhook_failures);
}

void shm_records_hook_counts(const struct shm *shm, uint64_t *dropped, uint64_t *backlog)
{
	const struct shm_records_hdr *h;

	shm_check_handle(shm);
	h = shm_records_hdr(shm);
	*dropped = CMM_LOAD_SHARED(h->webhook_dropped);
	*backlog = CMM_LOAD_SHARED(h->webhook_backlog);
}

void shm_records_hook_note(struct shm *shm, uint64_t dropped, uint64_t backlog)
{
	struct shm_records_hdr *h;

	shm_check_handle(shm);
	if (shm->ro)
		return;
	h = shm_records_hdr(shm);
	if (dropped != 0)
		CMM_STORE_SHARED(h->webhook_dropped, h->webhook_dropped + dropped);
	CMM_STORE_SHARED(h->webhook_backlog, backlog);
}
