/* Unit tests of the adoption scan (worker/adopt.c): which of a dead predecessor's records
 * are offered for adoption, which are released, and that the slot's counters stay exact. */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sys/socket.h>
#ifdef HAVE_OFFLOAD
#include <bpf/bpf.h>
#include <linux/types.h>
#include "offload/tgo_maps.h"
#endif

#include "offload/offload.h"
#include "shm/shm.h"
#include "shm/shm_lslot.h"
#include "shm/shm_records.h"
#include "shm/shm_relay.h"
#include "shm/shm_alloc.h"
#include "shm/shm_internal.h"
#include "shm/shm_ppool.h"
#include "shm/shm_quota.h"
#include "shm/shm_state.h"
#include "common/mono.h"
#include "tests/unit/worker_fix.h"
#include "worker/lifecycle.h"
#include "worker/relay.h"
#include "worker/relayho.h"
#include "worker/table.h"
#include "worker/wk.h"

#define NOW_NS 1000000000000ull
#define LST 1u

struct offer {
	uint32_t seen[16];
	unsigned n;
	uint32_t refuse;	/* idx the callback refuses (relay port taken) */
	uint32_t keep1;		/* 1 + idx the callback keeps for later (its port still
				 * bound); 0: none */
	bool take_tcp;		/* a TURN-TCP record's connection was handed over */
	uint32_t revoked1;	/* 1 + idx whose user is revoked; 0: none */
};

static int offer_cb(void *arg, uint32_t idx, struct shm_alloc *rec)
{
	struct offer *o = arg;

	assert_int_equal(SHM_ALLOC_WORD_STATE(rec->state), SHM_ALLOC_LIVE);
	assert_true(o->n < 16);
	o->seen[o->n++] = idx;
	if (shm_alloc_end_marked(rec))
		return -ECANCELED;	/* never adopted: offered to be ended (wk_adopt_fn) */
	if (rec->client_transport == SHM_TRANSPORT_TCP && !o->take_tcp)
		return -ENOENT;	/* no connection came with it (worker/park.c) */
	if (o->keep1 == idx + 1)
		return -EBUSY;
	if (o->revoked1 == idx + 1)
		return -EKEYREVOKED;
	return idx == o->refuse ? -EADDRINUSE : 0;
}

/* A record as the predecessor in `slot` would leave it: claimed, filled, then (publish)
 * LIVE and counted like worker/turn.c does. */
static uint32_t mk_rec(struct shm *shm, unsigned slot, uint8_t transport, uint64_t expires,
		       bool publish)
{
	struct shm_counters *c = shm_slot_counters(shm, slot);
	struct shm_alloc *rec;
	uint32_t idx;

	assert_int_equal(shm_alloc_claim(shm, slot, &idx, &rec), 0);
	shm_alloc_begin_write(rec);
	rec->client_transport = transport;
	rec->listener_idx = LST;
	rec->expires_ns = expires;
	rec->client.family = 2;	/* AF_INET */
	rec->client.port = (uint16_t)(1000 + idx);
	shm_alloc_end_write(rec);
	if (publish) {
		assert_int_equal(shm_alloc_publish(shm, slot, idx), 0);
		shm_ctr_add(c, SHM_CTR_ALLOCS_CREATED, 1);
		shm_ctr_add(c, SHM_CTR_ALLOCS_ACTIVE, 1);
		shm_lctr_add(c, LST, SHM_LCTR_ALLOCS_ACTIVE, 1);
	}
	return idx;
}

static uint64_t ctr(struct shm *shm, unsigned slot, enum shm_ctr i)
{
	struct shm_counters out;

	assert_int_equal(shm_counters_read(shm, slot, &out), 0);
	return out.v[i];
}

static uint64_t lctr_active(struct shm *shm, unsigned slot)
{
	struct shm_counters out;

	assert_int_equal(shm_counters_read(shm, slot, &out), 0);
	return out.lst[LST][SHM_LCTR_ALLOCS_ACTIVE];
}

static bool is_free(struct shm *shm, uint32_t idx)
{
	return shm_alloc_get(shm, 0, idx, NULL) == -EPERM &&
	       shm_alloc_get(shm, 1, idx, NULL) == -EPERM;
}

/* shm_alloc_retire wrapped (-Wl,--wrap, worker/Makefile.inc): what the slot's counters
 * said when the adoption retired a record, and a retire that fails as if another had
 * retired the record first. Off (retire_watch NULL): the real retire, nothing noted. */
struct retire_watch {
	struct shm *shm;
	unsigned calls;
	uint64_t active_at;	/* ALLOCS_ACTIVE at the (last) retire */
	uint64_t ended_at;	/* ALLOCS_ENDED at the (last) retire */
	bool fail;		/* return -EPERM without retiring */
	bool marked_at;		/* the record marked ending at the (last) retire */
	uint64_t pushed_at;	/* events pushed into the slot's ring by then */
	uint8_t *snap;		/* with keep_snap: the segment's bytes at the first retire
				 * (a kill there), malloc'd */
	bool keep_snap;
};
static struct retire_watch *retire_watch;

int __real_shm_alloc_retire(struct shm *shm, unsigned slot, uint32_t idx);
int __wrap_shm_alloc_retire(struct shm *shm, unsigned slot, uint32_t idx);

int __wrap_shm_alloc_retire(struct shm *shm, unsigned slot, uint32_t idx)
{
	struct retire_watch *rw = retire_watch;
	struct shm_counters out;

	if (rw == NULL || rw->shm != shm)
		return __real_shm_alloc_retire(shm, slot, idx);
	rw->calls++;
	assert_int_equal(shm_counters_read(shm, slot, &out), 0);
	rw->active_at = out.v[SHM_CTR_ALLOCS_ACTIVE];
	rw->ended_at = out.v[SHM_CTR_ALLOCS_ENDED];
	rw->marked_at = shm_alloc_end_marked(shm_alloc_at(shm, idx));
	rw->pushed_at = shm_rec_ring_at(shm, slot)->head;
	if (rw->keep_snap && rw->snap == NULL) {
		rw->snap = malloc(shm->size);
		assert_non_null(rw->snap);
		memcpy(rw->snap, shm->base, shm->size);
	}
	return rw->fail ? -EPERM : __real_shm_alloc_retire(shm, slot, idx);
}

/* A LIVE record the adoption ends is retired before it is counted off, as
 * wk_alloc_destroy does (shm/shm_alloc.h): a worker killed in between must leave a LIVE
 * record that is still counted, never one already counted off. And a record whose retire
 * fails (another retired it first, and counts it) is not counted off at all. */
static void test_retire_before_counts(void **state)
{
	struct shm_config cfg = { 2, 4, 4096, 32 };
	struct shm *shm = NULL;
	struct shm_counters *c;
	struct wk_adopt_stats st;
	struct retire_watch rw;
	struct offer o;
	uint32_t idx;

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-adopt-order", &shm), 0);
	c = shm_slot_counters(shm, 0);
	memset(&rw, 0, sizeof(rw));
	rw.shm = shm;
	retire_watch = &rw;
	for (unsigned fail = 0; fail < 2; fail++) {
		uint64_t ended = ctr(shm, 0, SHM_CTR_ALLOCS_ENDED);

		rw.fail = fail != 0;
		rw.calls = 0;
		idx = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS - 1, true);	/* expired */
		memset(&o, 0, sizeof(o));
		o.refuse = UINT32_MAX;
		assert_int_equal(wk_adopt_scan(shm, 0, c, NOW_NS, offer_cb, &o, &st), 0);
		assert_int_equal(st.expired, 1);
		assert_true(is_free(shm, idx));
		assert_int_equal(rw.calls, 1);
		assert_int_equal(rw.active_at, 1);	/* still counted at the retire */
		assert_int_equal(rw.ended_at, ended);
		/* retired: counted off once; not retired: left as it was */
		assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ACTIVE), fail);
		assert_int_equal(lctr_active(shm, 0), fail);
		assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ENDED), ended + !fail);
	}
	retire_watch = NULL;
	shm_destroy(shm);
}

static void test_scan_sorts_records(void **state)
{
	struct shm_config cfg = { 2, 4, 4096, 32 };
	struct shm *shm = NULL;
	struct shm_counters *c;
	struct shm_alloc *rec;
	struct wk_adopt_stats st;
	struct offer o;
	uint32_t live, torn_odd, claimed, tcp, expired, dying, refused, other;

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-adopt", &shm), 0);
	c = shm_slot_counters(shm, 0);
	live = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	torn_odd = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	assert_int_equal(shm_alloc_get(shm, 0, torn_odd, &rec), 0);
	shm_alloc_begin_write(rec);	/* killed mid-update: seq stays odd */
	claimed = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, false);
	tcp = mk_rec(shm, 0, SHM_TRANSPORT_TCP, NOW_NS + 60000000000ull, true);
	expired = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS - 1, true);
	/* killed inside wk_alloc_destroy, after retire and uncounting, before release */
	dying = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	assert_int_equal(shm_alloc_retire(shm, 0, dying), 0);
	shm_ctr_add(c, SHM_CTR_ALLOCS_ENDED, 1);
	shm_ctr_add(c, SHM_CTR_ALLOCS_ACTIVE, (uint64_t)-1);
	shm_lctr_add(c, LST, SHM_LCTR_ALLOCS_ACTIVE, (uint64_t)-1);
	refused = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	other = mk_rec(shm, 1, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ACTIVE), 5);
	assert_int_equal(lctr_active(shm, 0), 5);

	memset(&o, 0, sizeof(o));
	o.refuse = refused;
	assert_int_equal(wk_adopt_scan(shm, 0, c, NOW_NS, offer_cb, &o, &st), 0);

	/* only the consistent, unexpired UDP records and the TURN-TCP one (a live upgrade
	 * may have handed its connection over) were offered */
	assert_int_equal(o.n, 3);
	for (unsigned i = 0; i < o.n; i++)
		assert_true(o.seen[i] == live || o.seen[i] == refused || o.seen[i] == tcp);
	assert_true(o.seen[0] != o.seen[1] && o.seen[1] != o.seen[2] && o.seen[0] != o.seen[2]);
	assert_int_equal(st.adopted, 1);
	assert_int_equal(st.torn, 3);	/* odd seq, CLAIMED, DYING */
	assert_int_equal(st.stream, 1);
	assert_int_equal(st.expired, 1);
	assert_int_equal(st.failed, 1);
	assert_int_equal(shm_alloc_get(shm, 0, live, &rec), 0);
	assert_int_equal(rec->state, SHM_ALLOC_WORD(SHM_ALLOC_LIVE, 0));
	assert_true(is_free(shm, torn_odd) && is_free(shm, claimed) && is_free(shm, tcp) &&
		    is_free(shm, expired) && is_free(shm, dying) && is_free(shm, refused));
	assert_int_equal(shm_alloc_get(shm, 1, other, NULL), 0);

	/* exactly the adopted one is still counted; nothing counted twice or lost */
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ACTIVE), 1);
	assert_int_equal(lctr_active(shm, 0), 1);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ENDED), 5);	/* dying + 4 LIVE dropped */
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_DROPPED), 6);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ADOPTED), 1);
	assert_int_equal(ctr(shm, 1, SHM_CTR_ALLOCS_ACTIVE), 1);

	/* a second scan (the next respawn) offers the survivor again and drops nothing */
	memset(&o, 0, sizeof(o));
	o.refuse = UINT32_MAX;
	assert_int_equal(wk_adopt_scan(shm, 0, c, NOW_NS, offer_cb, &o, &st), 0);
	assert_int_equal(o.n, 1);
	assert_int_equal(st.adopted, 1);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ACTIVE), 1);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_DROPPED), 6);
	shm_destroy(shm);
}

/* A take-over's list: only the listed records the slot owns are offered (another slot's,
 * a free one and an index past the table are skipped), and nothing else is touched. */
static void test_list(void **state)
{
	struct shm_config cfg = { 2, 4, 4096, 32 };
	struct shm *shm = NULL;
	struct shm_counters *c;
	struct wk_adopt_stats st;
	struct offer o;
	uint32_t a, b, unlisted, other, list[5];

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-adopt", &shm), 0);
	c = shm_slot_counters(shm, 0);
	a = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	b = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS - 1, true);	/* expired */
	unlisted = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	other = mk_rec(shm, 1, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	list[0] = other;
	list[1] = a;
	list[2] = 31;	/* free */
	list[3] = b;
	list[4] = 4096;	/* past the table */
	memset(&o, 0, sizeof(o));
	o.refuse = UINT32_MAX;
	assert_int_equal(wk_adopt_list(shm, 0, c, NOW_NS, list, 5, offer_cb, &o, &st), 0);
	assert_int_equal(o.n, 1);
	assert_int_equal(o.seen[0], a);
	assert_int_equal(st.adopted, 1);
	assert_int_equal(st.expired, 1);
	assert_true(is_free(shm, b));
	assert_int_equal(shm_alloc_get(shm, 0, unlisted, NULL), 0);
	assert_int_equal(shm_alloc_get(shm, 1, other, NULL), 0);
	assert_int_equal(wk_adopt_list(shm, 0, c, NOW_NS, NULL, 1, offer_cb, &o, &st), -EINVAL);
	assert_int_equal(wk_adopt_list(shm, 0, c, NOW_NS, NULL, 0, offer_cb, &o, &st), 0);
	assert_int_equal(st.adopted, 0);
	shm_destroy(shm);
}

/* A live upgrade: a TURN-TCP record whose connection came along is adopted and stays
 * counted; TLS and DTLS records and an expired TCP one are never offered. */
static void test_tcp_handed_over(void **state)
{
	struct shm_config cfg = { 2, 4, 4096, 8 };
	struct shm *shm = NULL;
	struct shm_counters *c;
	struct wk_adopt_stats st;
	struct offer o;
	uint32_t tcp, tls, dtls, old;

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-adopt", &shm), 0);
	c = shm_slot_counters(shm, 0);
	tcp = mk_rec(shm, 0, SHM_TRANSPORT_TCP, NOW_NS + 60000000000ull, true);
	tls = mk_rec(shm, 0, SHM_TRANSPORT_TLS, NOW_NS + 60000000000ull, true);
	dtls = mk_rec(shm, 0, SHM_TRANSPORT_DTLS, NOW_NS + 60000000000ull, true);
	old = mk_rec(shm, 0, SHM_TRANSPORT_TCP, NOW_NS - 1, true);
	memset(&o, 0, sizeof(o));
	o.refuse = UINT32_MAX;
	o.take_tcp = true;
	assert_int_equal(wk_adopt_scan(shm, 0, c, NOW_NS, offer_cb, &o, &st), 0);
	assert_int_equal(o.n, 1);
	assert_int_equal(o.seen[0], tcp);
	assert_int_equal(st.adopted, 1);
	assert_int_equal(st.stream, 3);
	assert_int_equal(shm_alloc_get(shm, 0, tcp, NULL), 0);
	assert_true(is_free(shm, tls) && is_free(shm, dtls) && is_free(shm, old));
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ACTIVE), 1);
	shm_destroy(shm);
}

static void test_classify_and_bad_args(void **state)
{
	struct shm_config cfg = { 1, 4, 4096, 4 };
	struct shm *shm = NULL;
	struct shm_alloc *rec;
	uint32_t idx;

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-adopt", &shm), 0);
	idx = mk_rec(shm, 0, SHM_TRANSPORT_DTLS, NOW_NS + 1, true);
	assert_int_equal(shm_alloc_get(shm, 0, idx, &rec), 0);
	assert_int_equal(wk_adopt_classify(shm, idx, rec, NOW_NS), WK_ADOPT_STREAM);
	rec->client_transport = SHM_TRANSPORT_UDP;
	assert_int_equal(wk_adopt_classify(shm, idx, rec, NOW_NS), WK_ADOPT_TRY);
	assert_int_equal(wk_adopt_classify(shm, idx, rec, NOW_NS + 1), WK_ADOPT_EXPIRED);
	assert_int_equal(wk_adopt_classify(shm, 99, rec, NOW_NS), WK_ADOPT_TORN);
	/* retire only from LIVE */
	assert_int_equal(shm_alloc_retire(shm, 0, idx), 0);
	assert_int_equal(shm_alloc_retire(shm, 0, idx), -EPERM);
	assert_int_equal(wk_adopt_classify(shm, idx, rec, NOW_NS), WK_ADOPT_TORN);
	assert_int_equal(wk_adopt_scan(NULL, 0, shm_slot_counters(shm, 0), 0, offer_cb, NULL, NULL),
			 -EINVAL);
	assert_int_equal(wk_adopt_scan(shm, 0, shm_slot_counters(shm, 0), 0, NULL, NULL, NULL),
			 -EINVAL);
	shm_destroy(shm);
}

/* A dropped record gives its relay ports back to the pool, as the master does for a
 * record it does not carry over (shm/image.c): a booking left behind would outlive its
 * owner, and the pool would take such a port only after every port without a booking,
 * so a freed port would no longer be reused last. */
static void test_drop_gives_ports_back(void **state)
{
	struct shm_config cfg = { 2, 4, 4096, 32 };
	struct shm_addr ip = { .addr = { 127, 0, 0, 1 }, .family = 2 };
	struct shm *shm = NULL;
	struct shm_alloc *rec;
	struct wk_adopt_stats st;
	struct offer o;
	uint32_t expired, refused, live, tag;

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-adopt-ports", &shm), 0);
	tag = shm_ppool_tag(&ip);
	expired = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS - 1, true);
	refused = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	live = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	for (uint32_t i = 0; i < 3; i++) {
		uint32_t idx = i == 0 ? expired : i == 1 ? refused : live;

		assert_int_equal(shm_alloc_get(shm, 0, idx, &rec), 0);
		assert_int_equal(shm_ppool_take(shm, tag, (uint16_t)(50000 + i), idx, NOW_NS), 0);
		shm_alloc_begin_write(rec);
		rec->relay = ip;
		rec->relay.port = (uint16_t)(50000 + i);
		shm_alloc_end_write(rec);
	}
	memset(&o, 0, sizeof(o));
	o.refuse = refused;
	assert_int_equal(wk_adopt_scan(shm, 0, shm_slot_counters(shm, 0), NOW_NS, offer_cb, &o,
				       &st), 0);
	assert_int_equal(st.adopted, 1);
	assert_true(shm_ppool_unbooked(shm, tag, 50000));	/* expired */
	assert_true(shm_ppool_unbooked(shm, tag, 50001));	/* its relay port refused */
	assert_false(shm_ppool_unbooked(shm, tag, 50002));	/* adopted: still booked */
	assert_false(shm_ppool_is_free(shm, tag, 50002, NOW_NS));
	shm_destroy(shm);
}

/* A record the callback keeps for a later try (-EBUSY: its relay port still bound, the
 * worker's adopt_wait) is neither adopted nor released: still LIVE, still counted, and
 * offered again by the next pass over it. */
static void test_kept_for_later(void **state)
{
	struct shm_config cfg = { 2, 4, 4096, 32 };
	struct shm *shm = NULL;
	struct shm_counters *c;
	struct shm_alloc *rec;
	struct wk_adopt_stats st;
	struct offer o;
	uint32_t kept, live;

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-adopt", &shm), 0);
	c = shm_slot_counters(shm, 0);
	kept = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	live = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	memset(&o, 0, sizeof(o));
	o.refuse = UINT32_MAX;
	o.keep1 = kept + 1;
	assert_int_equal(wk_adopt_scan(shm, 0, c, NOW_NS, offer_cb, &o, &st), 0);
	assert_int_equal(o.n, 2);
	assert_int_equal(st.adopted, 1);
	assert_int_equal(st.waiting, 1);
	assert_int_equal(st.failed, 0);
	assert_int_equal(shm_alloc_get(shm, 0, kept, &rec), 0);
	assert_int_equal(rec->state, SHM_ALLOC_WORD(SHM_ALLOC_LIVE, 0));
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ACTIVE), 2);
	assert_int_equal(lctr_active(shm, 0), 2);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_DROPPED), 0);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ADOPTED), 1);

	/* the later try: adopted now */
	memset(&o, 0, sizeof(o));
	o.refuse = UINT32_MAX;
	assert_int_equal(wk_adopt_list(shm, 0, c, NOW_NS, &kept, 1, offer_cb, &o, &st), 0);
	assert_int_equal(o.n, 1);
	assert_int_equal(o.seen[0], kept);
	assert_int_equal(st.adopted, 1);
	assert_int_equal(st.waiting, 0);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ACTIVE), 2);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ADOPTED), 2);
	(void)live;
	shm_destroy(shm);
}

/* A record the callback finds revoked (-EKEYREVOKED: worker/adopt.c checks the revocation
 * list before adopting) ends as the revocation sweep ends an allocation: released,
 * ALLOCS_ENDED, not ALLOCS_DROPPED, its relay port back to the pool. */
static void test_revoked_ends(void **state)
{
	struct shm_config cfg = { 2, 4, 4096, 32 };
	struct shm *shm = NULL;
	struct shm_counters *c;
	struct shm_alloc *rec;
	struct wk_adopt_stats st;
	struct shm_addr ip = { .addr = { 127, 0, 0, 1 }, .family = 2 };
	struct offer o;
	uint32_t revoked, live, tag;

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-adopt-revoked", &shm), 0);
	c = shm_slot_counters(shm, 0);
	tag = shm_ppool_tag(&ip);
	revoked = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	live = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	assert_int_equal(shm_alloc_get(shm, 0, revoked, &rec), 0);
	assert_int_equal(shm_ppool_take(shm, tag, 50003, revoked, NOW_NS), 0);
	shm_alloc_begin_write(rec);
	rec->relay = ip;
	rec->relay.port = 50003;
	shm_alloc_end_write(rec);
	memset(&o, 0, sizeof(o));
	o.refuse = UINT32_MAX;
	o.revoked1 = revoked + 1;
	assert_int_equal(wk_adopt_scan(shm, 0, c, NOW_NS, offer_cb, &o, &st), 0);
	assert_int_equal(o.n, 2);
	assert_int_equal(st.adopted, 1);
	assert_int_equal(st.revoked, 1);
	assert_int_equal(st.failed, 0);
	assert_true(is_free(shm, revoked));
	assert_int_equal(shm_alloc_get(shm, 0, live, NULL), 0);
	assert_true(shm_ppool_unbooked(shm, tag, 50003));
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ACTIVE), 1);
	assert_int_equal(lctr_active(shm, 0), 1);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ENDED), 1);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_DROPPED), 0);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ADOPTED), 1);
	shm_destroy(shm);
}

/* A worker of slot 0 on a new segment `name`, its fast path off, with room for 4
 * records that wait (w->adopt_wait). */
static void wait_worker(struct worker *w, struct shm_config *cfg, const char *name)
{
	memset(w, 0, sizeof(*w));
	assert_int_equal(shm_create(cfg, name, &w->shm), 0);
	w->ctr = shm_slot_counters(w->shm, 0);
	w->off.c2p_fd = w->off.p2c_fd = -1;
	w->loop = ev_loop_new(EVFLAG_AUTO);
	assert_non_null(w->loop);
	w->adopt_wait = calloc(4, sizeof(*w->adopt_wait));
	assert_non_null(w->adopt_wait);
	w->cap_adopt_wait = 4;
}

static const char *end_one_cb(struct worker *w, const struct shm_alloc *rec, uint32_t idx,
			      const void *arg)
{
	(void)w;
	(void)rec;
	return idx == *(const uint32_t *)arg ? "credential revoked" : NULL;
}

/* wk_alloc_destroy: the record is marked ending and its event pushed before the retire, so
 * a worker killed after the push leaves a marked record (test_end_marked), never a plain
 * LIVE one whose end is recorded already. The adoption's own end (adopt_end, of a record
 * that waited for its relay port) does the same. */
static void test_destroy_marks_first(void **state)
{
	struct shm *shm;
	struct worker_heritage h;
	struct worker *w;
	struct wk_listener l;
	struct shm_alloc *rec;
	struct wk_alloc *a = NULL;
	struct retire_watch rw;
	uint32_t idx[2];

	(void)state;
	memset(&l, 0, sizeof(l));
	worker_fix_create("test-adopt-destroy", 1, &shm, &h, &w);
	worker_fix_adopter(w, &l);
	w->off.c2p_fd = w->off.p2c_fd = -1;
	for (int i = 0; i < 2; i++) {
		worker_fix_rec(shm, &l, (uint16_t)(40000 + i), (uint16_t)(31731 + i),
			       mono_ns() + 60000000000ull, &idx[i], &rec);
		worker_fix_rec_publish(shm, &l, idx[i], rec);
	}
	memset(&rw, 0, sizeof(rw));
	rw.shm = shm;
	retire_watch = &rw;
	assert_int_equal(shm_alloc_get(shm, 0, idx[0], &rec), 0);
	assert_int_equal(wk_alloc_attach(w, &l, idx[0], rec, &a), 0);
	a->published = true;
	wk_alloc_destroy(w, a, "refreshed with lifetime 0");
	assert_int_equal(rw.calls, 1);
	assert_true(rw.marked_at);
	assert_int_equal(rw.pushed_at, 1);
	assert_int_equal(shm_alloc_get(shm, 0, idx[0], NULL), -EPERM);	/* released */
	/* a record that waited for its relay port, ended by a revocation */
	w->adopt_wait = calloc(1, sizeof(*w->adopt_wait));
	assert_non_null(w->adopt_wait);
	w->cap_adopt_wait = 1;
	w->adopt_wait[w->n_adopt_wait++] = idx[1];
	wk_adopt_wait_end(w, end_one_cb, &idx[1]);
	assert_int_equal(rw.calls, 2);
	assert_true(rw.marked_at);
	assert_int_equal(rw.pushed_at, 2);
	assert_int_equal(worker_fix_ctr(shm, 0, SHM_CTR_ALLOCS_ENDED), 2);
	assert_int_equal(worker_fix_ctr(shm, 0, SHM_CTR_ALLOCS_ACTIVE), 0);
	retire_watch = NULL;
	wk_adopt_wait_abandon(w);
	wk_tables_free(w);
	close(l.fd);
	worker_fix_destroy(shm, 1, &w);
}

/* The records that wait for their relay ports (w->adopt_wait): a revocation or disconnect
 * ends the one it names as wk_alloc_destroy would (released, uncounted), the others wait
 * on; a worker that leaves the table forgets them, LIVE and counted for its successor. */
static void test_wait_end_and_abandon(void **state)
{
	struct shm_config cfg = { 2, 4, 4096, 32 };
	struct worker w;
	uint32_t idx[3];

	(void)state;
	wait_worker(&w, &cfg, "test-adopt");
	for (int i = 0; i < 3; i++)
		w.adopt_wait[w.n_adopt_wait++] = idx[i] =
			mk_rec(w.shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	ev_timer_init(&w.adopt_wait_w, NULL, 1., 0.);
	ev_timer_start(w.loop, &w.adopt_wait_w);

	wk_adopt_wait_end(&w, end_one_cb, &idx[1]);
	assert_int_equal(w.n_adopt_wait, 2);
	assert_int_equal(w.adopt_wait[0], idx[0]);
	assert_int_equal(w.adopt_wait[1], idx[2]);
	assert_int_equal(w.adopt_wait_ended, 1);
	assert_true(is_free(w.shm, idx[1]));
	assert_int_equal(ctr(w.shm, 0, SHM_CTR_ALLOCS_ACTIVE), 2);
	assert_int_equal(ctr(w.shm, 0, SHM_CTR_ALLOCS_ENDED), 1);
	assert_int_equal(lctr_active(w.shm, 0), 2);
	assert_true(ev_is_active(&w.adopt_wait_w));	/* two still wait */

	wk_adopt_wait_abandon(&w);
	assert_null(w.adopt_wait);
	assert_int_equal(w.n_adopt_wait, 0);
	assert_false(ev_is_active(&w.adopt_wait_w));
	for (int i = 0; i < 3; i += 2)
		assert_int_equal(shm_alloc_get(w.shm, 0, idx[i], NULL), 0);	/* still LIVE */
	assert_int_equal(ctr(w.shm, 0, SHM_CTR_ALLOCS_ACTIVE), 2);
	ev_loop_destroy(w.loop);
	shm_destroy(w.shm);
}

/* A record of slot 0 as a UDP client's: 10.0.0.1:(1000 + idx) to the listener 10.0.0.2:3478,
 * relayed at 10.0.0.2:(50000 + idx), channel 0x4000 bound to 10.0.0.9:5000 (permitted). */
static void fill_udp(struct shm *shm, uint32_t idx, uint64_t now)
{
	struct shm_alloc *rec;
	const uint8_t cl[4] = { 10, 0, 0, 1 }, sv[4] = { 10, 0, 0, 2 }, pr[4] = { 10, 0, 0, 9 };

	assert_int_equal(shm_alloc_get(shm, 0, idx, &rec), 0);
	shm_alloc_begin_write(rec);
	memcpy(rec->client.addr, cl, 4);
	memcpy(rec->server.addr, sv, 4);
	rec->server.family = AF_INET;
	rec->server.port = 3478;
	rec->relay = rec->server;
	rec->relay.port = (uint16_t)(50000 + idx);
	memcpy(rec->perms[0].addr, pr, 4);
	rec->perms[0].family = AF_INET;
	rec->perms[0].expires_ns = now + 60000000000ull;
	memcpy(rec->chans[3].peer.addr, pr, 4);
	rec->chans[3].peer.family = AF_INET;
	rec->chans[3].peer.port = 5000;
	rec->chans[3].number = 0x4000;
	rec->chans[3].expires_ns = now + 60000000000ull;
	rec->created_ns = now - 30000000000ull;
	shm_alloc_end_write(rec);
}

#ifdef HAVE_OFFLOAD
/* The kernel entry of channel slot i of rec, as the predecessor wrote it. */
static struct tgo_channel entry_of_slot(const struct shm_alloc *rec, unsigned i)
{
	struct tgo_channel ch = { .family = AF_INET };

	memcpy(ch.client, rec->client.addr, 4);
	memcpy(ch.listener, rec->server.addr, 4);
	memcpy(ch.relay, rec->relay.addr, 4);
	memcpy(ch.peer, rec->chans[i].peer.addr, 4);
	ch.client_port = rec->client.port;
	ch.listener_port = rec->server.port;
	ch.relay_port = rec->relay.port;
	ch.peer_port = rec->chans[i].peer.port;
	ch.channel = rec->chans[i].number;
	ch.expires_ns = rec->chans[i].expires_ns;
	ch.listener_idx = LST;
	return ch;
}

/* The kernel entry of fill_udp's channel. */
static struct tgo_channel entry_of(const struct shm_alloc *rec)
{
	return entry_of_slot(rec, 3);
}

/* A walk's visitor: the client -> peer entries' channels and relay ports. */
static bool list_entry(const struct tgo_channel *ch, void *arg)
{
	uint16_t *out = arg;	/* [0]: count, then pairs of channel, relay port */

	if (out[0] < 4) {
		out[1 + 2 * out[0]] = ch->channel;
		out[2 + 2 * out[0]] = ch->relay_port;
	}
	out[0]++;
	return true;
}

/* The keys in hash map fd. */
static unsigned map_keys(int fd)
{
	uint8_t key[64], next[64];
	unsigned n = 0;

	for (const void *k = NULL; n < 64 && bpf_map_get_next_key(fd, k, next) == 0; k = key) {
		memcpy(key, next, sizeof(key));
		n++;
	}
	return n;
}

static bool count_entry(const struct tgo_channel *ch, void *arg)
{
	uint16_t *ports = arg;

	ports[ports[0] + 1] = ch->client_port;
	ports[0]++;
	return true;
}
#endif

static void drain_ev(const struct shm_rec_ev *ev, void *arg)
{
	struct shm_rec_ev *out = arg;

	*out = *ev;
}

/* A waiting record that a revocation ends (wk_adopt_wait_end) ends as wk_alloc_destroy ends
 * an allocation: its kernel fast path entries go at once (the master's garbage collection
 * would take up to 5 s; the kernel relays for a revoked user meanwhile), its lifetime is
 * observed and its session record names its listener. Another waiting record's entry
 * stays. The maps are plain hash maps of the programs' layout (root: CAP_BPF; else the
 * entries' part is skipped). */
static void test_wait_end_like_an_end(void **state)
{
	struct shm_config cfg = { 2, 4, 4096, 32 };
	const char *const names[] = { "udp0", "udp1" };
	uint16_t slots[2];
	struct worker w;
	struct shm_counters out;
	struct shm_rec_ev ev;
	struct shm_alloc *rec;
	uint64_t now = mono_ns();
	uint32_t idx[2];
	bool maps = false;

	(void)state;
	wait_worker(&w, &cfg, "test-adopt-end");
	assert_int_equal(shm_lslot_assign(w.shm, names, 2, slots, NULL), 0);
	assert_int_equal(slots[1], LST);
	for (int i = 0; i < 2; i++) {
		w.adopt_wait[w.n_adopt_wait++] = idx[i] =
			mk_rec(w.shm, 0, SHM_TRANSPORT_UDP, now + 60000000000ull, true);
		fill_udp(w.shm, idx[i], now);
	}
#ifdef HAVE_OFFLOAD
	w.off.c2p_fd = bpf_map_create(BPF_MAP_TYPE_HASH, NULL, sizeof(struct tgo_c2p_key),
				      sizeof(struct tgo_c2p_val), 16, NULL);
	w.off.p2c_fd = bpf_map_create(BPF_MAP_TYPE_HASH, NULL, sizeof(struct tgo_p2c_key),
				      sizeof(struct tgo_p2c_val), 16, NULL);
	maps = w.off.c2p_fd >= 0 && w.off.p2c_fd >= 0;
	if (!maps)
		print_message("no BPF maps (not root?): the entries' part is skipped\n");
	for (int i = 0; i < 2 && maps; i++) {
		struct tgo_channel ch;

		assert_int_equal(shm_alloc_get(w.shm, 0, idx[i], &rec), 0);
		ch = entry_of(rec);
		assert_int_equal(tgo_channel_set(&w.off, &ch), 0);
	}
#endif
	/* the predecessor's relay port index entries (a worker's crash keeps the segment) */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(shm_alloc_get(w.shm, 0, idx[i], &rec), 0);
		assert_int_equal(shm_relay_add(w.shm, rec->relay.port, idx[i]), 0);
	}
	wk_adopt_wait_end(&w, end_one_cb, &idx[0]);
	assert_int_equal(w.n_adopt_wait, 1);
	assert_true(is_free(w.shm, idx[0]));
	{
		uint32_t got[SHM_RELAY_WAYS];

		assert_int_equal(shm_relay_find(w.shm, (uint16_t)(50000 + idx[0]), got), 0);
		assert_int_equal(shm_relay_find(w.shm, (uint16_t)(50000 + idx[1]), got), 1);
	}
#ifdef HAVE_OFFLOAD
	if (maps) {
		uint16_t ports[4] = { 0 };

		assert_int_equal(tgo_channel_walk(&w.off, count_entry, ports), 1);
		assert_int_equal(ports[0], 1);
		assert_int_equal(ports[1], 1000 + idx[1]);	/* the other's stays */
	}
#endif
	assert_int_equal(shm_counters_read(w.shm, 0, &out), 0);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_ENDED], 1);
	assert_int_equal(out.life.count, 1);
	assert_int_equal(out.life.sum_s, 30);
	memset(&ev, 0, sizeof(ev));
	assert_int_equal(shm_records_drain(w.shm, drain_ev, &ev), 1);
	assert_int_equal(ev.idx, idx[0]);
	assert_int_equal(ev.reason, SHM_REC_REVOKE);
	assert_string_equal(ev.listener, "udp1");
	wk_adopt_wait_abandon(&w);
	if (w.off.c2p_fd >= 0)
		close(w.off.c2p_fd);
	if (w.off.p2c_fd >= 0)
		close(w.off.p2c_fd);
	ev_loop_destroy(w.loop);
	shm_destroy(w.shm);
}

/* Slot 0's scan at NOW_NS, offer_cb refusing nothing. */
static void scan_all(struct shm *shm, struct offer *o, struct wk_adopt_stats *st)
{
	memset(o, 0, sizeof(*o));
	o->refuse = UINT32_MAX;
	assert_int_equal(wk_adopt_scan(shm, 0, shm_slot_counters(shm, 0), NOW_NS, offer_cb, o, st),
			 0);
}

/* The predecessor was killed inside wk_alloc_destroy between the push of the end event
 * and the retire, and the master drained the event (every 10 ms) before the replacement
 * came: the record is LIVE, still counted (active, its listener's gauge, quota), its relay
 * port booked and indexed, and marked (shm_alloc_end_mark). The replacement's adoption
 * ends it: not adopted, no second session record, counted off exactly once (ALLOCS_ENDED,
 * its lifetime, not ALLOCS_DROPPED), its port and index entry gone. */
static void test_end_marked(void **state)
{
	struct shm_config cfg = { 2, 4, 4096, 32 };
	struct shm_addr ip = { .addr = { 127, 0, 0, 1 }, .family = 2 };
	struct shm_quota_limits none = { 0 };
	struct shm *shm = NULL;
	struct shm_counters out;
	struct shm_alloc *rec;
	struct wk_adopt_stats st;
	struct offer o;
	uint32_t marked, live, tag;
	uint32_t got[SHM_RELAY_WAYS];

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-adopt-marked", &shm), 0);
	tag = shm_ppool_tag(&ip);
	marked = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	live = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	for (uint32_t i = 0; i < 2; i++) {
		uint32_t idx = i == 0 ? marked : live;

		assert_int_equal(shm_alloc_get(shm, 0, idx, &rec), 0);
		assert_int_equal(shm_ppool_take(shm, tag, (uint16_t)(50010 + i), idx, NOW_NS), 0);
		shm_alloc_begin_write(rec);
		rec->relay = ip;
		rec->relay.port = (uint16_t)(50010 + i);
		rec->created_ns = NOW_NS - 30000000000ull;
		rec->user_len = (uint16_t)snprintf(rec->username, sizeof(rec->username), "u%u", i);
		shm_alloc_end_write(rec);
		assert_int_equal(shm_quota_take_rec(shm, rec, &none), 0);
		assert_int_equal(shm_relay_add(shm, rec->relay.port, idx), 0);
	}
	/* wk_alloc_destroy up to its kill: the end marked and pushed, then drained */
	assert_int_equal(shm_alloc_get(shm, 0, marked, &rec), 0);
	assert_int_equal(shm_alloc_end_mark(shm, 0, marked), 0);
	assert_int_equal(shm_records_push(shm, 0, marked, rec, SHM_REC_REFRESH0, NOW_NS, "udp1"),
			 0);
	assert_int_equal(shm_records_drain(shm, drain_ev, &(struct shm_rec_ev){ 0 }), 1);
	assert_int_equal(shm_quota_total(shm), 2);

	scan_all(shm, &o, &st);
	assert_int_equal(st.adopted, 1);
	assert_int_equal(st.ended, 1);
	assert_int_equal(st.failed + st.torn + st.expired + st.stream, 0);
	assert_true(is_free(shm, marked));
	assert_int_equal(shm_alloc_get(shm, 0, live, NULL), 0);
	/* no second session record */
	assert_int_equal(shm_records_drain(shm, drain_ev, &(struct shm_rec_ev){ 0 }), 0);
	/* counted off once: ended, not dropped; the survivor still counted */
	assert_int_equal(shm_counters_read(shm, 0, &out), 0);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_ACTIVE], 1);
	assert_int_equal(out.lst[LST][SHM_LCTR_ALLOCS_ACTIVE], 1);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_ENDED], 1);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_DROPPED], 0);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_ADOPTED], 1);
	assert_int_equal(out.life.count, 1);
	assert_int_equal(out.life.sum_s, 30);
	assert_int_equal(shm_quota_total(shm), 1);
	assert_int_equal(shm_quota_count(shm, shm_quota_key(SHM_QUOTA_USER, "u0", 2)), 0);
	/* its port back to the pool and out of the relay port index; the survivor's kept */
	assert_true(shm_ppool_unbooked(shm, tag, 50010));
	assert_false(shm_ppool_unbooked(shm, tag, 50011));
	assert_int_equal(shm_relay_find(shm, 50010, got), 0);
	assert_int_equal(shm_relay_find(shm, 50011, got), 1);

	/* the next respawn finds nothing more of it */
	scan_all(shm, &o, &st);
	assert_int_equal(o.n, 1);
	assert_int_equal(st.ended, 0);
	assert_int_equal(shm_records_drain(shm, drain_ev, &(struct shm_rec_ev){ 0 }), 0);
	assert_int_equal(worker_fix_ctr(shm, 0, SHM_CTR_ALLOCS_ENDED), 1);
	shm_destroy(shm);
}

/* The replacement ends its predecessor's torn LIVE record (killed inside a write bracket:
 * an odd sequence) as it ends any LIVE one (adopt_retire): it marks it, pushes its session
 * record, and is killed before the retire (the segment's bytes at that instant). A
 * take-over of those bytes ends that record as a marked one (not copied, no second
 * session record, its lifetime observed) instead of refusing the whole file: the mark
 * may sit on a half-written record. */
static void test_torn_marked_takeover(void **state)
{
	struct shm_config cfg = { 2, 4, 4096, 32 };
	struct shm *shm = NULL, *dst = NULL;
	struct shm_alloc *rec, *at;
	struct shm_counters sum;
	struct wk_adopt_stats st;
	struct retire_watch rw;
	struct shm_takeover t;
	struct shm_rec_ev ev;
	struct offer o;
	uint32_t idx;

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-adopt-tornmark", &shm), 0);
	assert_int_equal(shm_create(&cfg, "test-adopt-tornmark2", &dst), 0);
	idx = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	assert_int_equal(shm_alloc_get(shm, 0, idx, &rec), 0);
	shm_alloc_begin_write(rec);	/* as its worker wrote it before the publish */
	rec->created_ns = NOW_NS - 30000000000ull;
	shm_alloc_end_write(rec);
	shm_alloc_begin_write(rec);	/* the predecessor killed inside a bracket */
	memset(&rw, 0, sizeof(rw));
	rw.shm = shm;
	rw.keep_snap = true;
	retire_watch = &rw;
	scan_all(shm, &o, &st);
	retire_watch = NULL;
	assert_int_equal(st.torn, 1);
	assert_true(rw.marked_at);
	assert_non_null(rw.snap);
	at = (struct shm_alloc *)(void *)(rw.snap + ((uint8_t *)rec - shm->base));
	assert_true(shm_alloc_end_marked(at));
	assert_int_equal(at->seq & 1u, 1);
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst,
					&(struct shm_image){ .fd = -1, .buf = rw.snap,
							     .size = shm->size },
					NOW_NS, &t),
			 0);
	assert_int_equal(t.verdict, SHM_STATE_TAKEN);
	assert_int_equal(t.queued, 1);
	assert_int_equal(t.adopted + t.torn + t.stream + t.expired + t.overflow, 0);
	/* one session record: the replacement's, carried; counted off once with its lifetime */
	memset(&ev, 0, sizeof(ev));
	assert_int_equal(shm_records_drain(dst, drain_ev, &ev), 1);
	assert_int_equal(ev.reason, SHM_REC_WORKER_CRASH);
	assert_int_equal(shm_counters_sum(dst, &sum), 0);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_ENDED], 1);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_ACTIVE], 0);
	assert_int_equal(sum.life.count, 1);
	assert_int_equal(sum.life.sum_s, 30);
	free(rw.snap);
	shm_destroy(dst);
	shm_destroy(shm);
}

/* Refuses every record with the code *arg. */
static int code_cb(void *arg, uint32_t idx, struct shm_alloc *rec)
{
	(void)idx;
	(void)rec;
	return *(const int *)arg;
}

/* A LIVE record that the adoption refuses with code: released, uncounted, ALLOCS_ENDED;
 * removed: as its listener's removal ends it (not a drop), else dropped as not
 * rebindable; its session record's reason `want`. */
static void refused_ends(int code, bool removed, enum shm_rec_reason want)
{
	struct shm_config cfg = { 2, 4, 4096, 32 };
	struct shm *shm = NULL;
	struct wk_adopt_stats st;
	struct shm_rec_ev ev;
	uint32_t idx;

	assert_int_equal(shm_create(&cfg, "test-adopt-refused", &shm), 0);
	idx = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	assert_int_equal(wk_adopt_list(shm, 0, shm_slot_counters(shm, 0), NOW_NS, &idx, 1,
				       code_cb, &code, &st),
			 0);
	assert_int_equal(st.removed, removed);
	assert_int_equal(st.failed, !removed);
	assert_true(is_free(shm, idx));
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ENDED), 1);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_DROPPED), !removed);
	assert_int_equal(ctr(shm, 0, SHM_CTR_ALLOCS_ACTIVE), 0);
	memset(&ev, 0, sizeof(ev));
	assert_int_equal(shm_records_drain(shm, drain_ev, &ev), 1);
	assert_int_equal(ev.reason, want);
	shm_destroy(shm);
}

/* A record whose listener a reload removed (WK_ADOPT_LISTENER_GONE: worker/adopt.c finds
 * its slot RETIRED) ends as the removal ends the listener's allocations: reason
 * listener_removed, ALLOCS_ENDED, not ALLOCS_DROPPED. */
static void test_listener_removed_ends(void **state)
{
	(void)state;
	refused_ends(WK_ADOPT_LISTENER_GONE, true, SHM_REC_LISTENER_REMOVED);
}

/* A relay port that cannot be bound because its interface vanished (bind: -ENODEV, an
 * IPv6 link-local relay address) is not a removed listener: the record is dropped as not
 * rebindable, end reason worker_crash. */
static void test_nodev_not_removed(void **state)
{
	(void)state;
	refused_ends(-ENODEV, false, SHM_REC_WORKER_CRASH);
}

/* A torn record (its predecessor died inside a write bracket after the publish: a refresh,
 * a permission) is released and counted as ended, so its lifetime is observed too: its
 * created_ns is written before the publish only (worker/turn.c), whole in a LIVE record.
 * Its listener, of fields a bracket may be writing, does not name its session record. */
static void test_torn_observed(void **state)
{
	struct shm_config cfg = { 2, 4, 4096, 32 };
	const char *const names[] = { "udp0", "udp1" };
	struct shm *shm = NULL;
	struct shm_counters out;
	struct wk_adopt_stats st;
	struct shm_rec_ev ev;
	struct shm_alloc *rec;
	struct offer o;
	uint16_t slots[2];
	uint32_t idx;

	(void)state;
	assert_int_equal(shm_create(&cfg, "test-adopt-torn", &shm), 0);
	assert_int_equal(shm_lslot_assign(shm, names, 2, slots, NULL), 0);
	idx = mk_rec(shm, 0, SHM_TRANSPORT_UDP, NOW_NS + 60000000000ull, true);
	assert_int_equal(shm_alloc_get(shm, 0, idx, &rec), 0);
	shm_alloc_begin_write(rec);	/* as its worker wrote it before the publish */
	rec->created_ns = NOW_NS - 30000000000ull;
	shm_alloc_end_write(rec);
	shm_alloc_begin_write(rec);	/* never closed: torn */
	rec->expires_ns = NOW_NS + 90000000000ull;
	memset(&o, 0, sizeof(o));
	o.refuse = UINT32_MAX;
	assert_int_equal(wk_adopt_scan(shm, 0, shm_slot_counters(shm, 0), NOW_NS, offer_cb, &o,
				       &st),
			 0);
	assert_int_equal(o.n, 0);	/* not offered */
	assert_int_equal(st.torn, 1);
	assert_true(is_free(shm, idx));
	assert_int_equal(shm_counters_read(shm, 0, &out), 0);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_ACTIVE], 0);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_ENDED], 1);
	assert_int_equal(out.life.count, out.v[SHM_CTR_ALLOCS_ENDED]);
	assert_int_equal(out.life.sum_s, 30);	/* created to the scan */
	memset(&ev, 0, sizeof(ev));
	assert_int_equal(shm_records_drain(shm, drain_ev, &ev), 1);
	assert_int_equal(ev.reason, SHM_REC_WORKER_CRASH);
	assert_string_equal(ev.listener, "");
	shm_destroy(shm);
}

/* A LIVE record of user for the listener l of slot 0 (worker_fix_rec). */
static uint32_t user_rec(struct shm *shm, const struct wk_listener *l, uint16_t client_port,
			 uint16_t relay_port, const char *user)
{
	struct shm_alloc *rec;
	uint32_t idx;

	worker_fix_rec(shm, l, client_port, relay_port, mono_ns() + 60000000000ull, &idx, &rec);
	rec->user_len = (uint16_t)strlen(user);
	memcpy(rec->username, user, strlen(user));
	worker_fix_rec_publish(shm, l, idx, rec);
	return idx;
}

/* Record idx's generation. */
static uint64_t gen_of(struct shm *shm, uint32_t idx)
{
	struct shm_alloc *rec;

	assert_int_equal(shm_alloc_get(shm, 0, idx, &rec), 0);
	return rec->gen;
}

/* The master's frame of `disconnect ID` (record idx, of generation gen) as w reads it. */
static void disc_index_read(struct worker *w, uint32_t idx, uint64_t gen)
{
	struct ipc_msg m;
	int sp[2], fd;

	assert_int_equal(ipc_socketpair(sp), 0);
	assert_int_equal(ipc_send_disconnect_index(sp[0], idx, gen), 0);
	assert_int_equal(ipc_recv(sp[1], &m, &fd), 0);
	wk_ctl_msg(w, &m, fd);
	close(sp[0]);
	close(sp[1]);
}

/* A disconnect by index names the record's generation too, as the master read it: a
 * record at that index of a newer generation (the allocation the operator meant ended and
 * another one, maybe another user's, claimed its index since) is not ended, whether the
 * frame was kept for the adoption (wk_adopt_disc_keep), or found the record waiting for
 * its relay port (wk_adopt_wait_end) or live (wk_ctl_msg); the frame with the record's own
 * generation ends it. Before: the index alone decided, and alice and carol were ended. */
static void test_disc_index_gen(void **state)
{
	struct ipc_disconnect d = { .by = IPC_DISC_INDEX };
	struct worker_heritage h;
	struct wk_listener l;
	struct worker *w;
	struct shm *shm;
	uint32_t alice, bob, carol;
	uint16_t port;

	(void)state;
	memset(&l, 0, sizeof(l));
	worker_fix_create("test-adopt-disc-gen", 1, &shm, &h, &w);
	worker_fix_adopter(w, &l);
	w->off.c2p_fd = w->off.p2c_fd = -1;
	close(worker_fix_bound(SOCK_DGRAM, &port));	/* a free port for alice's relay */
	alice = user_rec(shm, &l, 40000, port, "alice");
	bob = user_rec(shm, &l, 40001, 31751, "bob");
	d.index = alice;
	d.gen = gen_of(shm, alice) - 1;	/* the allocation before alice's at her index */
	wk_adopt_disc_keep(w, &d);
	d.index = bob;
	d.gen = gen_of(shm, bob);
	wk_adopt_disc_keep(w, &d);
	assert_int_equal(w->n_disc_pending, 2);
	wk_adopt_run(w);
	assert_int_equal(w->n_allocs, 1);
	assert_int_equal(shm_alloc_get(shm, 0, alice, NULL), 0);	/* adopted */
	assert_int_equal(shm_alloc_get(shm, 0, bob, NULL), -EPERM);	/* ended */

	/* carol waits for her relay port, alice is live: frames of the older generations */
	carol = user_rec(shm, &l, 40002, 31752, "carol");
	w->adopt_wait = calloc(1, sizeof(*w->adopt_wait));
	assert_non_null(w->adopt_wait);
	w->cap_adopt_wait = 1;
	w->adopt_wait[w->n_adopt_wait++] = carol;
	disc_index_read(w, alice, gen_of(shm, alice) - 1);
	disc_index_read(w, carol, gen_of(shm, carol) - 1);
	assert_int_equal(w->n_allocs, 1);
	assert_int_equal(w->n_adopt_wait, 1);
	assert_int_equal(worker_fix_ctr(shm, 0, SHM_CTR_ALLOCS_ENDED), 1);
	/* and of their own */
	disc_index_read(w, alice, gen_of(shm, alice));
	disc_index_read(w, carol, gen_of(shm, carol));
	assert_int_equal(w->n_allocs, 0);
	assert_int_equal(w->n_adopt_wait, 0);
	assert_int_equal(shm_alloc_get(shm, 0, alice, NULL), -EPERM);
	assert_int_equal(shm_alloc_get(shm, 0, carol, NULL), -EPERM);
	assert_int_equal(worker_fix_ctr(shm, 0, SHM_CTR_ALLOCS_ENDED), 3);
	assert_int_equal(worker_fix_ctr(shm, 0, SHM_CTR_ALLOCS_ACTIVE), 0);
	wk_adopt_wait_abandon(w);
	if (ev_is_active(&w->tune))
		ev_idle_stop(w->loop, &w->tune);
	wk_tables_free(w);
	close(l.fd);
	worker_fix_destroy(shm, 1, &w);
}

#ifdef HAVE_OFFLOAD
/* Channel slot i of rec bound to 10.0.0.9:port, permitted, for 60 s. */
static void bind_chan(struct shm_alloc *rec, unsigned i, uint16_t number, uint16_t port)
{
	const uint8_t pr[4] = { 10, 0, 0, 9 };
	uint64_t now = mono_ns();

	memcpy(rec->perms[0].addr, pr, 4);
	rec->perms[0].family = AF_INET;
	rec->perms[0].expires_ns = now + 60000000000ull;
	memcpy(rec->chans[i].peer.addr, pr, 4);
	rec->chans[i].peer.family = AF_INET;
	rec->chans[i].peer.port = port;
	rec->chans[i].number = number;
	rec->chans[i].expires_ns = now + 60000000000ull;
}

/* A worker of slot 0 on a new table `name` that adopts (worker_fix_adopter: l its UDP
 * listener) with plain hash maps of the fast path's layout as its maps (w->off: -1 each
 * without CAP_BPF). Returns whether it has them. */
static bool maps_worker_new(const char *name, struct shm **shm, struct worker_heritage *h,
			    struct worker **w, struct wk_listener *l)
{
	memset(l, 0, sizeof(*l));
	worker_fix_create(name, 1, shm, h, w);
	worker_fix_adopter(*w, l);
	(*w)->off.c2p_fd = bpf_map_create(BPF_MAP_TYPE_HASH, NULL, sizeof(struct tgo_c2p_key),
					  sizeof(struct tgo_c2p_val), 16, NULL);
	(*w)->off.p2c_fd = bpf_map_create(BPF_MAP_TYPE_HASH, NULL, sizeof(struct tgo_p2c_key),
					  sizeof(struct tgo_p2c_val), 16, NULL);
	return (*w)->off.c2p_fd >= 0 && (*w)->off.p2c_fd >= 0;
}

/* What maps_worker_new made, with what an adoption left in w. */
static void maps_worker_free(struct shm *shm, struct worker *w, struct wk_listener *l)
{
	struct wk_alloc *a;

	while ((a = LIST_FIRST(&w->allocs)) != NULL)	/* what a test adopted */
		wk_alloc_forget(w, a);
	wk_adopt_wait_abandon(w);
	if (w->off.c2p_fd >= 0)
		close(w->off.c2p_fd);
	if (w->off.p2c_fd >= 0)
		close(w->off.p2c_fd);
	if (ev_is_active(&w->tune))
		ev_idle_stop(w->loop, &w->tune);
	wk_tables_free(w);
	close(l->fd);
	worker_fix_destroy(shm, 1, &w);
}

/* A waiting record whose client allocated again on the same 5-tuple (the new allocation
 * binds channel 0x4001 only) ends: the kernel's client -> peer entry of its channel 0x4000
 * goes (the client's ChannelData on 0x4000 would else go on through the old relay), and
 * both its peer -> client entries (keyed on its relay port, still booked by it). The new
 * allocation's entry for 0x4001, which replaced the old one's key, stays (new_entry); if
 * the new allocation never wrote its own (a channel it cannot offload, full maps), the
 * old one's entry under that key goes too: it would send the new allocation's ChannelData
 * on 0x4001 to the old peer from the released relay port 50001. */
static void wait_end_client_again(bool new_entry)
{
	struct shm *shm;
	struct worker_heritage h;
	struct worker *w;
	struct wk_listener l;
	struct shm_alloc *orec, *nrec;
	struct wk_alloc *a = NULL;
	uint32_t oidx, nidx;
	uint16_t got[9] = { 0 };
	struct tgo_channel ch;

	if (!maps_worker_new("test-adopt-again", &shm, &h, &w, &l)) {
		print_message("no BPF maps (not root?): skipped\n");
		goto out;
	}
	worker_fix_rec(shm, &l, 40000, 50001, mono_ns() + 60000000000ull, &oidx, &orec);
	bind_chan(orec, 0, 0x4000, 5000);
	bind_chan(orec, 1, 0x4001, 5001);
	worker_fix_rec_publish(shm, &l, oidx, orec);
	worker_fix_rec(shm, &l, 40000, 50002, mono_ns() + 60000000000ull, &nidx, &nrec);
	bind_chan(nrec, 0, 0x4001, 6000);
	worker_fix_rec_publish(shm, &l, nidx, nrec);
	assert_int_equal(wk_alloc_attach(w, &l, nidx, nrec, &a), 0);
	/* The old allocation's entries, then the new one's, which replace the key of 0x4001. */
	for (unsigned i = 0; i < 2; i++) {
		ch = entry_of_slot(orec, i);
		ch.listener_idx = l.slot;
		assert_int_equal(tgo_channel_set(&w->off, &ch), 0);
	}
	if (new_entry) {
		ch = entry_of_slot(nrec, 0);
		assert_int_equal(tgo_channel_set(&w->off, &ch), 0);
	}
	assert_int_equal(map_keys(w->off.p2c_fd), new_entry ? 3 : 2);
	w->adopt_wait = calloc(1, sizeof(*w->adopt_wait));
	assert_non_null(w->adopt_wait);
	w->cap_adopt_wait = 1;
	w->adopt_wait[w->n_adopt_wait++] = oidx;

	wk_adopt_wait_end(w, end_one_cb, &oidx);
	assert_int_equal(w->n_adopt_wait, 0);
	assert_int_equal(shm_alloc_get(shm, 0, oidx, NULL), -EPERM);	/* released */
	if (new_entry) {
		assert_int_equal(tgo_channel_walk(&w->off, list_entry, got), 1);
		assert_int_equal(got[0], 1);
		assert_int_equal(got[1], 0x4001);
		assert_int_equal(got[2], 50002);	/* the new allocation's */
		assert_int_equal(map_keys(w->off.p2c_fd), 1);
	} else {
		assert_int_equal(tgo_channel_walk(&w->off, list_entry, got), 0);
		assert_int_equal(map_keys(w->off.p2c_fd), 0);
	}
out:
	if (a != NULL)
		wk_alloc_forget(w, a);
	maps_worker_free(shm, w, &l);
}
/* The worker's own adoption (wk_adopt_run, wk_adopt_one) of a record its predecessor
 * marked ending, the event drained: ended, not adopted or bound, no second session record,
 * counted off once; whatever kernel entries of its channels were left go with it, as
 * adopt_end takes them (the predecessor takes its channels' entries out before the mark,
 * its short circuits' after the retire it did not reach). */
static void test_run_ends_marked(void **state)
{
	struct shm *shm;
	struct worker_heritage h;
	struct worker *w;
	struct wk_listener l;
	struct shm_alloc *rec;
	struct shm_counters out;
	struct tgo_channel ch;
	uint16_t got[9] = { 0 };
	uint32_t idx;
	bool maps;

	(void)state;
	maps = maps_worker_new("test-adopt-marked-run", &shm, &h, &w, &l);
	worker_fix_rec(shm, &l, 40000, 31721, mono_ns() + 60000000000ull, &idx, &rec);
	bind_chan(rec, 0, 0x4000, 5000);
	worker_fix_rec_publish(shm, &l, idx, rec);
	if (maps) {
		ch = entry_of_slot(rec, 0);
		ch.listener_idx = l.slot;
		assert_int_equal(tgo_channel_set(&w->off, &ch), 0);
	} else {
		print_message("no BPF maps (not root?): the entries' part is skipped\n");
	}
	assert_int_equal(shm_alloc_end_mark(shm, 0, idx), 0);
	assert_int_equal(shm_records_push(shm, 0, idx, rec, SHM_REC_REFRESH0, mono_ns(), "udp"),
			 0);
	assert_int_equal(shm_records_drain(shm, drain_ev, &(struct shm_rec_ev){ 0 }), 1);

	wk_adopt_run(w);
	assert_int_equal(w->n_allocs, 0);
	assert_int_equal(w->n_adopt_wait, 0);
	assert_int_equal(shm_alloc_get(shm, 0, idx, NULL), -EPERM);	/* released */
	assert_int_equal(shm_records_drain(shm, drain_ev, &(struct shm_rec_ev){ 0 }), 0);
	assert_int_equal(shm_counters_read(shm, 0, &out), 0);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_ACTIVE], 0);
	assert_int_equal(out.lst[l.slot][SHM_LCTR_ALLOCS_ACTIVE], 0);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_ENDED], 1);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_DROPPED], 0);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_ADOPTED], 0);
	assert_int_equal(out.life.count, 1);
	if (maps) {
		assert_int_equal(tgo_channel_walk(&w->off, list_entry, got), 0);
		assert_int_equal(map_keys(w->off.p2c_fd), 0);
	}
	maps_worker_free(shm, w, &l);
}

/* A disconnect of a user taken before the adoption ran (wk_adopt_disc_keep: the first
 * snapshot rejected, a bootstrap config without listeners) ends that user's records at the
 * adoption, with end reason admin_disconnect, counted ended, not dropped or adopted; a
 * record of another user is adopted. The kept disconnect is forgotten after the run.
 * Before: the frame found no allocation and the records were adopted, running on. */
static void test_run_ends_disconnected(void **state)
{
	struct ipc_disconnect d = { .by = IPC_DISC_USER, .user = "alice" };
	struct shm_rec_ev ev = { 0 };
	struct shm_counters out;
	struct worker_heritage h;
	struct wk_listener l;
	struct worker *w;
	struct shm *shm;
	uint32_t alice, bob;
	uint16_t port;

	(void)state;
	(void)maps_worker_new("test-adopt-disc-run", &shm, &h, &w, &l);
	alice = user_rec(shm, &l, 40000, 31722, "1800000000:alice");
	close(worker_fix_bound(SOCK_DGRAM, &port));	/* a free port for bob's relay */
	bob = user_rec(shm, &l, 40001, port, "bob");
	/* an operator's repeats take no room: more than the list holds, still one */
	for (unsigned i = 0; i <= WK_DISC_PENDING_MAX; i++)
		wk_adopt_disc_keep(w, &d);
	d.by = IPC_DISC_REVOKED;	/* the adoption checks the list itself: not kept */
	wk_adopt_disc_keep(w, &d);
	assert_int_equal(w->n_disc_pending, 1);

	wk_adopt_run(w);
	assert_int_equal(w->n_disc_pending, 0);
	assert_int_equal(w->n_allocs, 1);
	assert_int_equal(shm_alloc_get(shm, 0, alice, NULL), -EPERM);	/* released */
	assert_int_equal(shm_alloc_get(shm, 0, bob, NULL), 0);
	assert_int_equal(shm_records_drain(shm, drain_ev, &ev), 1);
	assert_int_equal(ev.reason, SHM_REC_ADMIN);
	assert_int_equal(shm_counters_read(shm, 0, &out), 0);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_ENDED], 1);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_DROPPED], 0);
	assert_int_equal(out.v[SHM_CTR_ALLOCS_ADOPTED], 1);
	/* kept no more once adopted */
	d.by = IPC_DISC_USER;
	wk_adopt_disc_keep(w, &d);
	assert_int_equal(w->n_disc_pending, 0);
	maps_worker_free(shm, w, &l);
}

/* wk_relayho_open wrapped (-Wl,--wrap, worker/Makefile.inc): the adoption's context finds
 * no memory this many times (its first allocation; the real one otherwise). */
static unsigned relayho_nomem;

int __real_wk_relayho_open(struct worker *w, struct wk_relayho *m);
int __wrap_wk_relayho_open(struct worker *w, struct wk_relayho *m);

int __wrap_wk_relayho_open(struct worker *w, struct wk_relayho *m)
{
	if (relayho_nomem == 0)
		return __real_wk_relayho_open(w, m);
	relayho_nomem--;
	memset(m, 0, sizeof(*m));
	return -ENOMEM;
}

/* An adoption that found no memory runs again at the next loop iteration on the same
 * snapshot (wk_adopt_due, what wk_check_cb calls each iteration): the predecessor's
 * record is adopted then, not left unserved. Before, wk_check_cb ran the adoption only
 * with a new snapshot and otherwise wk_adopt_wait_due, which does not adopt: the record
 * stayed unserved until the master published another config. */
static void test_run_nomem_again(void **state)
{
	struct worker_heritage h;
	struct wk_listener l;
	struct worker *w;
	struct shm *shm;
	uint32_t idx;
	uint16_t port;

	(void)state;
	(void)maps_worker_new("test-adopt-nomem", &shm, &h, &w, &l);
	close(worker_fix_bound(SOCK_DGRAM, &port));	/* a free port for its relay */
	idx = user_rec(shm, &l, 40002, port, "carol");
	relayho_nomem = 1;
	wk_adopt_due(w);
	assert_false(w->adopted);
	assert_true(w->adopt_nomem);
	assert_int_equal(w->n_allocs, 0);
	assert_int_equal(shm_alloc_get(shm, 0, idx, NULL), 0);	/* kept for the next try */

	wk_adopt_due(w);	/* the next iteration, the same snapshot */
	assert_true(w->adopted);
	assert_int_equal(w->n_allocs, 1);
	assert_int_equal(shm_alloc_get(shm, 0, idx, NULL), 0);
	maps_worker_free(shm, w, &l);
}

static void test_wait_end_client_again(void **state)
{
	(void)state;
	wait_end_client_again(true);
}

static void test_wait_end_client_again_no_entry(void **state)
{
	(void)state;
	wait_end_client_again(false);
}

/* tgo_channel_take_if_ours (offload/offload.h): the client -> peer entry under ch's key
 * goes only if its value is ch's (relay address and port, peer, short circuit channel);
 * the peer -> client entry keyed on ch's relay port always goes. */
static void test_take_if_ours(void **state)
{
	struct tgo_maps m;
	struct tgo_channel old = { .family = AF_INET }, other, sc, sc2;
	struct tgo_chan_ctr c;
	uint16_t got[9] = { 0 };

	(void)state;
	m.c2p_fd = bpf_map_create(BPF_MAP_TYPE_HASH, NULL, sizeof(struct tgo_c2p_key),
				  sizeof(struct tgo_c2p_val), 16, NULL);
	m.p2c_fd = bpf_map_create(BPF_MAP_TYPE_HASH, NULL, sizeof(struct tgo_p2c_key),
				  sizeof(struct tgo_p2c_val), 16, NULL);
	if (m.c2p_fd < 0 || m.p2c_fd < 0) {
		print_message("no BPF maps (not root?): skipped\n");
		goto out;
	}
	memcpy(old.client, (const uint8_t[4]){ 127, 0, 0, 2 }, 4);
	memcpy(old.listener, (const uint8_t[4]){ 127, 0, 0, 1 }, 4);
	memcpy(old.relay, (const uint8_t[4]){ 127, 0, 0, 1 }, 4);
	memcpy(old.peer, (const uint8_t[4]){ 127, 0, 0, 3 }, 4);
	old.client_port = 40000;
	old.listener_port = 3478;
	old.relay_port = 50001;
	old.peer_port = 5001;
	old.channel = 0x4001;
	old.expires_ns = mono_ns() + 60000000000ull;
	/* Another allocation's key (same client, listener, channel) from another relay port:
	 * the entry is old's, not other's; other's peer -> client entry is none. */
	other = old;
	other.relay_port = 50002;
	assert_int_equal(tgo_channel_set(&m, &old), 0);
	assert_int_equal(tgo_channel_take_if_ours(&m, &other, &c), -ENOENT);
	assert_int_equal(tgo_channel_walk(&m, list_entry, got), 1);
	assert_int_equal(got[2], 50001);
	assert_int_equal(tgo_channel_take_if_ours(&m, &old, &c), 0);
	assert_int_equal(tgo_channel_walk(&m, list_entry, got), 0);
	assert_int_equal(map_keys(m.p2c_fd), 0);
	/* A short circuit under the same key: its target (listener, client, channel) is
	 * what decides; an entry to the peer is not a short circuit's. */
	sc = old;
	sc.sc_channel = 0x4005;
	sc.relay_port = 30001;	/* the target's listener port */
	sc2 = sc;
	sc2.sc_channel = 0x4006;
	assert_int_equal(tgo_channel_set(&m, &sc), 0);
	assert_int_equal(tgo_channel_take_if_ours(&m, &sc2, &c), -ENOENT);
	other.relay_port = 30001;	/* to the peer from a relay port equal to the port */
	(void)tgo_channel_take_if_ours(&m, &other, &c);
	memset(got, 0, sizeof(got));
	assert_int_equal(tgo_channel_walk(&m, list_entry, got), 1);
	assert_int_equal(tgo_channel_take_if_ours(&m, &sc, &c), 0);
	assert_int_equal(tgo_channel_walk(&m, list_entry, got), 0);
out:
	if (m.c2p_fd >= 0)
		close(m.c2p_fd);
	if (m.p2c_fd >= 0)
		close(m.p2c_fd);
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scan_sorts_records),
		cmocka_unit_test(test_retire_before_counts),
		cmocka_unit_test(test_destroy_marks_first),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_tcp_handed_over),
		cmocka_unit_test(test_classify_and_bad_args),
		cmocka_unit_test(test_drop_gives_ports_back),
		cmocka_unit_test(test_kept_for_later),
		cmocka_unit_test(test_wait_end_and_abandon),
		cmocka_unit_test(test_revoked_ends),
		cmocka_unit_test(test_wait_end_like_an_end),
		cmocka_unit_test(test_listener_removed_ends),
		cmocka_unit_test(test_nodev_not_removed),
		cmocka_unit_test(test_torn_observed),
		cmocka_unit_test(test_end_marked),
		cmocka_unit_test(test_torn_marked_takeover),
		cmocka_unit_test(test_disc_index_gen),
#ifdef HAVE_OFFLOAD
		cmocka_unit_test(test_wait_end_client_again),
		cmocka_unit_test(test_run_ends_marked),
		cmocka_unit_test(test_run_ends_disconnected),
		cmocka_unit_test(test_run_nomem_again),
		cmocka_unit_test(test_wait_end_client_again_no_entry),
		cmocka_unit_test(test_take_if_ours),
#endif
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
