/* Session-record rings: single producer per slot, the master as consumer (contract in
 * shm/shm_records.h). */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

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

/* ---- the producer's backlog ------------------------------------------------------------
 * A ring holds SHM_REC_RING events; a burst of ends in one loop iteration (a listener
 * removed, a user revoked, a bulk expiry, a take-over's ends) can be far more. What does
 * not fit waits here, in the producing process's memory, oldest first, and goes into the
 * ring as the master frees room (shm_records_flush; the master, which is also the
 * consumer, writes its own from shm_records_drain). Once a slot's backlog holds an event,
 * every later event of that slot queues behind it, so the ring sees one producer's events
 * in the order they were pushed (a start record before its allocation's end). */

#define REC_CHUNK 128u     /* events a backlog chunk holds */

struct rec_chunk {
	TAILQ_ENTRY(rec_chunk) link;
	uint32_t head, tail;   /* events [head, tail) of ev wait */
	struct shm_rec_ev ev[REC_CHUNK];
};

struct shm_rec_backlog {
	TAILQ_HEAD(rec_chunks, rec_chunk) q;
	uint64_t n;            /* events waiting */
};

/* Appends ev to queue b: 0, or -ENOMEM. */
static int bl_append(struct shm_rec_backlog *b, const struct shm_rec_ev *ev)
{
	struct rec_chunk *c = TAILQ_LAST(&b->q, rec_chunks);

	if (c == NULL || c->tail == REC_CHUNK) {
		c = malloc(sizeof(*c));
		if (c == NULL)
			return -ENOMEM;
		c->head = c->tail = 0;
		TAILQ_INSERT_TAIL(&b->q, c, link);
	}
	memcpy(&c->ev[c->tail++], ev, sizeof(*ev));
	b->n++;
	return 0;
}

/* The oldest event of queue b, or NULL. */
static const struct shm_rec_ev *bl_first(const struct shm_rec_backlog *b)
{
	const struct rec_chunk *c;

	if (b == NULL || b->n == 0)
		return NULL;
	c = TAILQ_FIRST(&b->q);
	return &c->ev[c->head];
}

/* Takes off the event bl_first gave. */
static void bl_pop(struct shm_rec_backlog *b)
{
	struct rec_chunk *c = TAILQ_FIRST(&b->q);

	if (++c->head == c->tail) {
		TAILQ_REMOVE(&b->q, c, link);
		free(c);
	}
	b->n--;
}

/* Empties queue b (NULL: none): the events it held. */
static uint64_t bl_clear(struct shm_rec_backlog *b)
{
	struct rec_chunk *c;
	uint64_t n;

	if (b == NULL)
		return 0;
	n = b->n;
	while ((c = TAILQ_FIRST(&b->q)) != NULL) {
		TAILQ_REMOVE(&b->q, c, link);
		free(c);
	}
	b->n = 0;
	return n;
}

/* Slot's backlog, allocated with the others on first use; NULL without memory. */
static struct shm_rec_backlog *backlog_of(struct shm *shm, unsigned slot)
{
	if (shm->rec_bl == NULL) {
		shm->rec_bl = calloc(shm->cfg.n_slots, sizeof(*shm->rec_bl));
		if (shm->rec_bl == NULL)
			return NULL;
		for (unsigned i = 0; i < shm->cfg.n_slots; i++)
			TAILQ_INIT(&shm->rec_bl[i].q);
	}
	return &shm->rec_bl[slot];
}

/* The most events one slot's backlog holds in a worker: every record of the table ending,
 * each with its start event still waiting too (a burst of a whole table, far beyond any a
 * working master leaves behind; at 250,000 records 2 x 250,000 x sizeof(struct shm_rec_ev),
 * 424 bytes: about 212 MB). Only a master that stopped draining reaches it: beyond it,
 * events are dropped and counted. The master's own backlog (a take-over's ends) has no cap:
 * the image it takes over bounds it (its records plus its rings' events), and production.md
 * promises every one of them is written. */
static uint64_t backlog_max(const struct shm *shm)
{
	uint64_t cap = 2 * (uint64_t)shm_alloc_capacity(shm);

	if (!shm->rec_capped)
		return UINT64_MAX;
	return cap > SHM_REC_RING ? cap : SHM_REC_RING;
}

static void count_dropped(struct shm_rec_ring *r, uint64_t n)
{
	CMM_STORE_SHARED(r->dropped, CMM_LOAD_SHARED(r->dropped) + n);
}

static int backlog_add(struct shm *shm, unsigned slot, const struct shm_rec_ev *ev)
{
	struct shm_rec_ring *r = shm_rec_ring_at(shm, slot);
	struct shm_rec_backlog *b = backlog_of(shm, slot);

	if (b != NULL && b->n >= backlog_max(shm)) {
		count_dropped(r, 1);
		return -ENOBUFS;
	}
	if (b == NULL || bl_append(b, ev) < 0) {
		count_dropped(r, 1);
		return -ENOMEM;
	}
	CMM_STORE_SHARED(r->waiting, b->n);
	return 0;
}

/* The oldest event of slot's backlog, or NULL. */
static const struct shm_rec_ev *backlog_first(const struct shm *shm, unsigned slot)
{
	return shm->rec_bl != NULL ? bl_first(&shm->rec_bl[slot]) : NULL;
}

void shm_records_backlog_free(struct shm *shm)
{
	for (unsigned s = 0; shm->rec_bl != NULL && s < shm->cfg.n_slots; s++)
		(void)bl_clear(&shm->rec_bl[s]);
	free(shm->rec_bl);
	shm->rec_bl = NULL;
	(void)bl_clear(shm->rec_held);
	free(shm->rec_held);
	shm->rec_held = NULL;
}

/* A full ring: ev waits in the backlog, unless this handle keeps none (a lingering
 * worker: shm_records_unbuffered) or the master writes no records (records_off): then a
 * full ring drops it and counts it, as it always did. */
static int ring_full(struct shm *shm, unsigned slot, const struct shm_rec_ev *ev)
{
	if (shm->rec_unbuffered || CMM_LOAD_SHARED(shm_records_hdr(shm)->records_off)) {
		count_dropped(shm_rec_ring_at(shm, slot), 1);
		return -ENOBUFS;
	}
	return backlog_add(shm, slot, ev);
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
	if (shm->rec_bl != NULL && shm->rec_bl[slot].n != 0)
		return backlog_add(shm, slot, ev);	/* behind the older ones */
	r = shm_rec_ring_at(shm, slot);
	head = CMM_LOAD_SHARED(r->head);
	tail = CMM_LOAD_SHARED(r->tail);
	cmm_smp_mb();	/* the tail before our stores into the slot it freed */
	if (head - tail >= SHM_REC_RING)
		return ring_full(shm, slot, ev);
	memcpy(&r->ev[head & (SHM_REC_RING - 1)], ev, sizeof(*ev));
	cmm_smp_wmb();	/* the event before the head that publishes it */
	CMM_STORE_SHARED(r->head, head + 1);
	return 0;
}

uint64_t shm_records_flush(struct shm *shm, unsigned slot)
{
	const struct shm_rec_ev *ev;
	struct shm_rec_ring *r;
	uint64_t head, tail;

	shm_check_handle(shm);
	if (shm->ro || slot >= shm->cfg.n_slots || backlog_first(shm, slot) == NULL)
		return 0;
	r = shm_rec_ring_at(shm, slot);
	head = CMM_LOAD_SHARED(r->head);
	tail = CMM_LOAD_SHARED(r->tail);
	cmm_smp_mb();	/* the tail before our stores into the slots it freed */
	for (; head - tail < SHM_REC_RING && (ev = backlog_first(shm, slot)) != NULL; head++) {
		memcpy(&r->ev[head & (SHM_REC_RING - 1)], ev, sizeof(*ev));
		bl_pop(&shm->rec_bl[slot]);
	}
	cmm_smp_wmb();	/* the events before the head that publishes them */
	CMM_STORE_SHARED(r->head, head);
	CMM_STORE_SHARED(r->waiting, shm->rec_bl[slot].n);
	return shm->rec_bl[slot].n;
}

uint64_t shm_records_waiting(const struct shm *shm, unsigned slot)
{
	return shm->rec_bl != NULL && slot < shm->cfg.n_slots ? shm->rec_bl[slot].n : 0;
}

void shm_records_abandon(struct shm *shm, unsigned slot)
{
	struct shm_rec_ring *r;

	shm_check_handle(shm);
	if (shm->ro || slot >= shm->cfg.n_slots)
		return;
	r = shm_rec_ring_at(shm, slot);
	count_dropped(r, bl_clear(shm->rec_bl != NULL ? &shm->rec_bl[slot] : NULL));
	CMM_STORE_SHARED(r->waiting, 0);
}

void shm_records_disown(struct shm *shm)
{
	shm_check_handle(shm);
	shm_records_backlog_free(shm);
	shm->rec_capped = true;
}

void shm_records_unbuffered(struct shm *shm, unsigned slot)
{
	shm_check_handle(shm);
	shm_records_backlog_free(shm);
	shm->rec_unbuffered = true;
	if (!shm->ro && slot < shm->cfg.n_slots)
		CMM_STORE_SHARED(shm_rec_ring_at(shm, slot)->waiting, 0);
}

void shm_records_reaped(struct shm *shm, unsigned slot)
{
	struct shm_rec_ring *r = shm_rec_ring_at(shm, slot);
	uint64_t n = CMM_LOAD_SHARED(r->waiting);

	if (n == 0)
		return;
	count_dropped(r, n);
	CMM_STORE_SHARED(r->waiting, 0);
}

int shm_records_hold(struct shm *shm)
{
	shm_check_handle(shm);
	if (shm->ro)
		return -EROFS;
	if (shm->rec_held == NULL) {
		shm->rec_held = calloc(1, sizeof(*shm->rec_held));
		if (shm->rec_held == NULL)
			return -ENOMEM;
		TAILQ_INIT(&shm->rec_held->q);
	}
	for (unsigned s = 0; s < shm->cfg.n_slots; s++) {
		struct shm_rec_ring *r = shm_rec_ring_at(shm, s);
		uint64_t head = CMM_LOAD_SHARED(r->head), tail = CMM_LOAD_SHARED(r->tail);
		const struct shm_rec_ev *ev;

		if (head - tail > SHM_REC_RING)
			tail = head - SHM_REC_RING;	/* a corrupt pair: keep the newest */
		/* the ring, then what waits behind it: one slot's events in push order */
		for (; tail != head; tail++)
			if (bl_append(shm->rec_held, &r->ev[tail & (SHM_REC_RING - 1)]) < 0)
				count_dropped(r, 1);
		CMM_STORE_SHARED(r->tail, tail);
		for (; (ev = backlog_first(shm, s)) != NULL; bl_pop(&shm->rec_bl[s]))
			if (bl_append(shm->rec_held, ev) < 0)
				count_dropped(r, 1);
		CMM_STORE_SHARED(r->waiting, 0);
	}
	return 0;
}

bool shm_records_on(const struct shm *shm)
{
	return CMM_LOAD_SHARED(shm_records_hdr(shm)->records_off) == 0;
}

void shm_records_want(struct shm *shm, bool on)
{
	shm_check_handle(shm);
	if (!shm->ro)
		CMM_STORE_SHARED(shm_records_hdr(shm)->records_off, on ? 0u : 1u);
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

/* Writes queue b (NULL: none) through fn, oldest first: the events. */
static unsigned drain_queue(struct shm_rec_backlog *b,
			    void (*fn)(const struct shm_rec_ev *ev, void *arg), void *arg)
{
	const struct shm_rec_ev *ev;
	unsigned n = 0;

	for (; (ev = bl_first(b)) != NULL; n++) {
		struct shm_rec_ev copy;

		memcpy(&copy, ev, sizeof(copy));
		bl_pop(b);
		fn(&copy, arg);
	}
	return n;
}

/* The consumer's own backlog (events it pushed as the producer of a slot without a
 * worker: a dead slot's), after the rings: a slot's backlog is younger than what its
 * ring held when it began. Written at the next drain, normally before the slot's
 * replacement runs (a replacement forked sooner may find its waiting count reset here,
 * which only its loss accounting would notice). */
static unsigned drain_own(struct shm *shm, void (*fn)(const struct shm_rec_ev *ev, void *arg),
			  void *arg)
{
	unsigned n = 0;

	for (unsigned s = 0; shm->rec_bl != NULL && s < shm->cfg.n_slots; s++) {
		if (shm->rec_bl[s].n == 0)
			continue;
		n += drain_queue(&shm->rec_bl[s], fn, arg);
		CMM_STORE_SHARED(shm_rec_ring_at(shm, s)->waiting, 0);
	}
	return n;
}

unsigned shm_records_drain(struct shm *shm, void (*fn)(const struct shm_rec_ev *ev, void *arg),
			   void *arg)
{
	unsigned n = 0;

	shm_check_handle(shm);
	if (shm->ro)
		return 0;
	/* what shm_records_hold took before the workers ran: older than all they push */
	n = drain_queue(shm->rec_held, fn, arg);
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
	return n + drain_own(shm, fn, arg);
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
