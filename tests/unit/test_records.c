/* Unit tests for the session-record rings (shm/shm_records.h): a full ring queues in the
 * producer's backlog without blocking or dropping, the flush moves the backlog into the
 * room the drain frees, in push order, a dead producer's backlog is counted as dropped,
 * the master's own backlog is written by its drain, and a take-over carries the earlier
 * run's undrained events and records what ended in the gap (expiry) or cannot be taken
 * over (a stream allocation: shutdown), not what it takes over, however many end in one
 * slot. */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_internal.h"
#include "shm/shm_records.h"
#include "shm/shm_state.h"

#define NOW UINT64_C(5000000000000)
#define SEC UINT64_C(1000000000)

static struct shm *mk(unsigned slots, unsigned cap)
{
	struct shm_config cfg = { slots, 2, 256, cap };
	struct shm *shm = NULL;

	assert_int_equal(shm_create(&cfg, "test-records", &shm), 0);
	return shm;
}

static void fill(struct shm_alloc *r, unsigned i, uint8_t transport, uint64_t expires)
{
	r->client_transport = transport;
	r->key_alg = SHM_KEY_MD5;
	r->key_len = 16;
	r->client.family = AF_INET;
	r->client.addr[0] = 127;
	r->client.addr[3] = 1;
	r->client.port = (uint16_t)(40000 + i);
	r->server = r->client;
	r->server.port = 3478;
	r->relay = r->server;
	r->relay.port = (uint16_t)(50000 + i);
	r->created_ns = NOW - 10 * SEC;
	r->expires_ns = expires;
	r->user_len = (uint16_t)snprintf(r->username, sizeof(r->username), "user%u", i);
	r->realm_len = (uint16_t)snprintf(r->realm, sizeof(r->realm), "realm");
	r->perms[0].family = AF_INET;
	r->perms[0].addr[0] = 10;
	r->perms[0].expires_ns = expires;
	r->ctr[SHM_ACTR_BYTES_TO_PEER] = 1000 + i;
}

static uint32_t add(struct shm *s, unsigned slot, unsigned i, uint8_t transport, uint64_t expires)
{
	struct shm_alloc *r;
	uint32_t idx;

	assert_int_equal(shm_alloc_claim(s, slot, &idx, &r), 0);
	shm_alloc_begin_write(r);
	fill(r, i, transport, expires);
	shm_alloc_end_write(r);
	assert_int_equal(shm_alloc_publish(s, slot, idx), 0);
	return idx;
}

struct got {
	struct shm_rec_ev ev[2 * SHM_REC_RING + 256];
	unsigned n;
};

static void collect(const struct shm_rec_ev *ev, void *arg)
{
	struct got *g = arg;

	if (g->n < sizeof(g->ev) / sizeof(g->ev[0]))
		g->ev[g->n] = *ev;
	g->n++;
}

static struct got G;

/* A segment of 2 slots with one UDP record (user7) in `slot`: its index, *r the record. */
static uint32_t with_record(struct shm **s, unsigned slot, struct shm_alloc **r)
{
	uint32_t idx;

	*s = mk(2, 8);
	idx = add(*s, slot, 7, SHM_TRANSPORT_UDP, NOW + SEC);
	assert_int_equal(shm_alloc_get(*s, slot, idx, r), 0);
	return idx;
}

/* n events of record idx pushed into slot's ring by producer p, ended at NOW + 0..n-1. */
static void push_n(struct shm *p, unsigned slot, uint32_t idx, const struct shm_alloc *r,
		   enum shm_rec_reason why, unsigned n, const char *listener)
{
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(shm_records_push(p, slot, idx, r, why, NOW + i, listener), 0);
}

/* A worker's handle: the master's, copied by the fork, with a backlog of its own. */
static struct shm *fork_handle(const struct shm *master)
{
	struct shm *w = malloc(sizeof(*w));

	assert_non_null(w);
	memcpy(w, master, sizeof(*w));
	/* A fork copies the master's queues, which the worker frees (shm_records_disown);
	 * this copy shares them, so it only forgets them. */
	w->rec_bl = NULL;
	w->rec_held = NULL;
	shm_records_disown(w);
	return w;
}

static void drop_handle(struct shm *w)
{
	shm_records_disown(w);
	free(w);
}

/* A worker's handle of slot 1 with the ring full of record idx's expiry events and
 * `over` more waiting in its backlog. */
static struct shm *worker_over(struct shm *s, uint32_t idx, const struct shm_alloc *r,
			       uint64_t over)
{
	struct shm *w = fork_handle(s);

	push_n(w, 1, idx, r, SHM_REC_EXPIRY, (unsigned)(SHM_REC_RING + over), NULL);
	assert_int_equal(shm_records_waiting(w, 1), over);
	return w;
}

/* Slot 1's producer (a worker's handle) pushes more than the ring holds: nothing is
 * dropped, the rest waits; the drain frees room, the flush fills it in push order, and
 * an event pushed while older ones wait queues behind them even when the ring has room. */
static void test_full_ring_backlog(void **state)
{
	struct shm *s, *w;
	struct shm_alloc *r;
	uint32_t idx = with_record(&s, 1, &r);
	const unsigned over = 88;

	(void)state;
	w = fork_handle(s);
	push_n(w, 1, idx, r, SHM_REC_REFRESH0, SHM_REC_RING + over, "udp");
	assert_int_equal(shm_records_dropped(s), 0);
	assert_int_equal(shm_records_waiting(w, 1), over);
	assert_int_equal(shm_rec_ring_at(s, 1)->waiting, over);
	assert_int_equal(shm_records_flush(w, 1), over);	/* no room yet */
	memset(&G, 0, sizeof(G));
	assert_int_equal(shm_records_drain(s, collect, &G), SHM_REC_RING);
	/* room now, but older events wait: behind them */
	assert_int_equal(shm_records_push(w, 1, idx, r, SHM_REC_REFRESH0, NOW + SHM_REC_RING + over,
					  "udp"), 0);
	assert_int_equal(shm_records_waiting(w, 1), over + 1);
	assert_int_equal(shm_records_flush(w, 1), 0);
	assert_int_equal(shm_rec_ring_at(s, 1)->waiting, 0);
	assert_int_equal(shm_records_drain(s, collect, &G), over + 1);
	assert_int_equal(G.n, SHM_REC_RING + over + 1);
	for (unsigned i = 0; i < G.n; i++)
		assert_int_equal(G.ev[i].ended_ns, NOW + i);
	assert_int_equal(shm_records_dropped(s), 0);
	drop_handle(w);
	shm_destroy(s);
}

/* A worker that dies with events in its backlog: the master counts them dropped at its
 * reap; one that gives up at its stop counts them itself. */
static void test_backlog_lost(void **state)
{
	struct shm *s, *w;
	struct shm_alloc *r;
	uint32_t idx = with_record(&s, 1, &r);

	(void)state;
	w = worker_over(s, idx, r, 5);
	assert_int_equal(shm_slot_reaped(s, 1), 0);
	assert_int_equal(shm_records_dropped(s), 5);
	assert_int_equal(shm_slot_reaped(s, 1), 0);	/* counted once */
	assert_int_equal(shm_records_dropped(s), 5);
	drop_handle(w);
	w = fork_handle(s);	/* its replacement: the ring still full */
	push_n(w, 1, idx, r, SHM_REC_EXPIRY, 3, NULL);
	shm_records_abandon(w, 1);
	assert_int_equal(shm_records_waiting(w, 1), 0);
	assert_int_equal(shm_records_dropped(s), 8);
	assert_int_equal(shm_records_flush(w, 1), 0);
	memset(&G, 0, sizeof(G));
	assert_int_equal(shm_records_drain(s, collect, &G), SHM_REC_RING);
	drop_handle(w);
	shm_destroy(s);
}

/* The master as the producer of a slot without a worker: what its ring has no room for
 * is written by its own drain, after the ring, in push order. */
static void test_master_backlog(void **state)
{
	struct shm *s;
	struct shm_alloc *r;
	uint32_t idx = with_record(&s, 0, &r);

	(void)state;
	push_n(s, 0, idx, r, SHM_REC_WORKER_CRASH, SHM_REC_RING + 100, NULL);
	memset(&G, 0, sizeof(G));
	assert_int_equal(shm_records_drain(s, collect, &G), SHM_REC_RING + 100);
	for (unsigned i = 0; i < G.n; i++)
		assert_int_equal(G.ev[i].ended_ns, NOW + i);
	assert_int_equal(shm_records_waiting(s, 0), 0);
	assert_int_equal(shm_rec_ring_at(s, 0)->waiting, 0);
	assert_int_equal(shm_records_dropped(s), 0);
	assert_int_equal(shm_records_drain(s, collect, &G), 0);
	shm_destroy(s);
}

static void test_event_fields(void **state)
{
	struct shm *s;
	struct shm_alloc *r;
	uint32_t idx = with_record(&s, 1, &r);

	(void)state;
	push_n(s, 1, idx, r, SHM_REC_REFRESH0, SHM_REC_RING, "udp");
	/* another slot's ring has its own room */
	assert_int_equal(shm_records_push(s, 0, idx, r, SHM_REC_EXPIRY, NOW, NULL), 0);
	memset(&G, 0, sizeof(G));
	assert_int_equal(shm_records_drain(s, collect, &G), SHM_REC_RING + 1);
	assert_int_equal(G.ev[0].reason, SHM_REC_EXPIRY);
	for (unsigned i = 0; i < SHM_REC_RING; i++) {
		assert_int_equal(G.ev[1 + i].ended_ns, NOW + i);
		assert_int_equal(G.ev[1 + i].idx, idx);
		assert_int_equal(G.ev[1 + i].ctr[SHM_ACTR_BYTES_TO_PEER], 1007);
		assert_int_equal(G.ev[1 + i].n_peers, 1);
		assert_memory_equal(G.ev[1 + i].username, "user7", 5);
		assert_string_equal(G.ev[1 + i].listener, "udp");
	}
	assert_int_equal(shm_records_drain(s, collect, &G), 0);
	/* a permission expired but not swept yet (another, live, at perms[3]) is not in force
	 * at the end */
	shm_alloc_begin_write(r);
	r->perms[0].expires_ns = NOW - 1;
	r->perms[3].family = AF_INET;
	r->perms[3].addr[0] = 11;
	r->perms[3].expires_ns = NOW + SEC;
	shm_alloc_end_write(r);
	assert_int_equal(shm_records_push(s, 1, idx, r, SHM_REC_EXPIRY, NOW, NULL), 0);
	memset(&G, 0, sizeof(G));
	assert_int_equal(shm_records_drain(s, collect, &G), 1);
	assert_int_equal(G.ev[0].n_peers, 1);
	assert_int_equal(G.ev[0].peers[0].addr[0], 11);
	assert_int_equal(shm_records_push(s, 1, idx, r, SHM_REC_REFRESH0, NOW, NULL), 0);
	assert_int_equal(shm_rec_reason_of("lifetime expired"), SHM_REC_EXPIRY);
	assert_int_equal(shm_rec_reason_of("no such text"), SHM_REC_OTHER);
	assert_string_equal(shm_rec_reason_name(SHM_REC_REVOKE), "revoke");
	shm_destroy(s);
}

static void test_take_over(void **state)
{
	struct shm *src = mk(3, 16), *dst = mk(2, 16);
	struct shm_takeover t;
	struct shm_image img;
	struct shm_alloc *r;
	uint32_t ended;
	unsigned reasons[SHM_REC__COUNT] = { 0 };

	(void)state;
	add(src, 0, 1, SHM_TRANSPORT_UDP, NOW + 600 * SEC);       /* taken over */
	add(src, 1, 2, SHM_TRANSPORT_UDP, NOW - SEC);             /* expired in the gap */
	add(src, 2, 3, SHM_TRANSPORT_TCP, NOW + 600 * SEC);       /* stream: ends here */
	ended = add(src, 2, 4, SHM_TRANSPORT_UDP, NOW + 600 * SEC);
	assert_int_equal(shm_alloc_get(src, 2, ended, &r), 0);
	/* ended before the kill, its event not written by the old master yet */
	assert_int_equal(shm_records_push(src, 2, ended, r, SHM_REC_REFRESH0, NOW - 2 * SEC, NULL),
			 0);
	assert_int_equal(shm_alloc_release(src, 2, ended), 0);
	/* slot 1's worker was killed with 3 events in its backlog: counted dropped */
	shm_rec_ring_at(src, 1)->waiting = 3;
	img = (struct shm_image){ .fd = -1, .buf = src->base, .size = src->size };
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
	assert_int_equal(t.adopted, 1);
	assert_int_equal(shm_records_dropped(dst), 3);
	assert_int_equal(shm_rec_ring_at(dst, 1)->waiting, 0);
	memset(&G, 0, sizeof(G));
	assert_int_equal(shm_records_drain(dst, collect, &G), 3);
	for (unsigned i = 0; i < G.n; i++) {
		assert_int_equal(G.ev[i].carried, 1);
		reasons[G.ev[i].reason]++;
		if (G.ev[i].reason == SHM_REC_EXPIRY) {
			assert_int_equal(G.ev[i].ended_ns, NOW - SEC);
			assert_memory_equal(G.ev[i].username, "user2", 5);
		}
		if (G.ev[i].reason == SHM_REC_REFRESH0)
			assert_memory_equal(G.ev[i].username, "user4", 5);
		if (G.ev[i].reason == SHM_REC_SHUTDOWN)
			assert_int_equal(G.ev[i].transport, SHM_TRANSPORT_TCP);
	}
	assert_int_equal(reasons[SHM_REC_REFRESH0], 1);
	assert_int_equal(reasons[SHM_REC_EXPIRY], 1);
	assert_int_equal(reasons[SHM_REC_SHUTDOWN], 1);
	shm_destroy(src);
	shm_destroy(dst);
}

/* A take-over's events beyond a ring (the master's ring and backlog of slot 0) are taken
 * into the held queue before the fork: the rings are empty, nothing is written; after
 * the fork a worker's end event of the same allocation is written after all of them,
 * though it reached the ring before the master's backlog was drained. */
static void test_hold_order(void **state)
{
	struct shm *s, *w;
	struct shm_alloc *r;
	uint32_t idx = with_record(&s, 0, &r);
	const unsigned n = SHM_REC_RING + 188;
	struct shm_rec_ring *ring = shm_rec_ring_at(s, 0);

	(void)state;
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(shm_records_push_carried(s, 0, idx, r, SHM_REC_EXPIRY, NOW + i), 0);
	assert_int_equal(shm_records_hold(s), 0);
	assert_int_equal(ring->head, ring->tail);	/* moved, not written */
	assert_int_equal(shm_records_waiting(s, 0), 0);
	assert_int_equal(ring->waiting, 0);
	w = fork_handle(s);
	assert_int_equal(shm_records_push(w, 0, idx, r, SHM_REC_SHUTDOWN, NOW + n, NULL), 0);
	memset(&G, 0, sizeof(G));
	assert_int_equal(shm_records_drain(s, collect, &G), n + 1);
	for (unsigned i = 0; i < G.n; i++)
		assert_int_equal(G.ev[i].ended_ns, NOW + i);
	assert_int_equal(G.ev[n].reason, SHM_REC_SHUTDOWN);
	assert_int_equal(shm_records_drain(s, collect, &G), 0);
	assert_int_equal(shm_records_dropped(s), 0);
	drop_handle(w);
	shm_destroy(s);
}

/* A lingering worker's handle: its backlog forgotten uncounted, then a full ring drops. */
static void test_unbuffered(void **state)
{
	struct shm *s, *w;
	struct shm_alloc *r;
	uint32_t idx = with_record(&s, 1, &r);

	(void)state;
	w = worker_over(s, idx, r, 88);
	shm_records_unbuffered(w, 1);
	assert_int_equal(shm_records_waiting(w, 1), 0);
	assert_int_equal(shm_rec_ring_at(s, 1)->waiting, 0);
	assert_int_equal(shm_records_dropped(s), 0);
	assert_int_equal(shm_records_push(w, 1, idx, r, SHM_REC_EXPIRY, NOW, NULL), -ENOBUFS);
	assert_int_equal(shm_records_waiting(w, 1), 0);
	assert_int_equal(shm_records_dropped(s), 1);
	assert_int_equal(shm_records_flush(w, 1), 0);
	drop_handle(w);
	shm_destroy(s);
}

/* Records off: a full ring drops and counts, no backlog; on again: a backlog. */
static void test_records_off(void **state)
{
	struct shm *s, *w;
	struct shm_alloc *r;
	uint32_t idx = with_record(&s, 1, &r);

	(void)state;
	assert_true(shm_records_on(s));
	shm_records_want(s, false);
	assert_false(shm_records_on(s));
	w = fork_handle(s);
	for (unsigned i = 0; i < SHM_REC_RING + 3; i++)
		(void)shm_records_push(w, 1, idx, r, SHM_REC_EXPIRY, NOW + i, NULL);
	assert_int_equal(shm_records_waiting(w, 1), 0);
	assert_int_equal(shm_records_dropped(s), 3);
	shm_records_want(s, true);
	assert_int_equal(shm_records_push(w, 1, idx, r, SHM_REC_EXPIRY, NOW, NULL), 0);
	assert_int_equal(shm_records_waiting(w, 1), 1);
	drop_handle(w);
	shm_destroy(s);
}

/* A worker's backlog holds at most twice the table's capacity (or a ring's worth):
 * beyond, a push is dropped and counted. */
static void test_backlog_cap(void **state)
{
	struct shm *s, *w;
	struct shm_alloc *r;
	uint32_t idx = with_record(&s, 1, &r);
	uint64_t max = 2 * (uint64_t)shm_alloc_capacity(s);

	(void)state;
	if (max < SHM_REC_RING)
		max = SHM_REC_RING;
	w = worker_over(s, idx, r, max);
	assert_int_equal(shm_records_dropped(s), 0);
	assert_int_equal(shm_records_push(w, 1, idx, r, SHM_REC_EXPIRY, NOW, NULL), -ENOBUFS);
	assert_int_equal(shm_records_waiting(w, 1), max);
	assert_int_equal(shm_records_dropped(s), 1);
	drop_handle(w);
	shm_destroy(s);
}

/* More ends in one slot than its ring holds: the earlier run's undrained ring (full) and
 * 700 records that expired in the gap, all steered to dst's one slot: every one is
 * written by the drain, none dropped. */
static void test_take_over_burst(void **state)
{
	const unsigned n_exp = 700;
	struct shm *src = mk(1, 1024), *dst = mk(1, 1024);
	unsigned reasons[SHM_REC__COUNT] = { 0 };
	struct shm_takeover t;
	struct shm_image img;
	struct shm_alloc *r;
	uint32_t ended;

	(void)state;
	for (unsigned i = 0; i < n_exp; i++)
		add(src, 0, i, SHM_TRANSPORT_UDP, NOW - SEC);
	ended = add(src, 0, n_exp, SHM_TRANSPORT_UDP, NOW + 600 * SEC);
	assert_int_equal(shm_alloc_get(src, 0, ended, &r), 0);
	for (unsigned i = 0; i < SHM_REC_RING; i++)	/* as many as its ring held */
		assert_int_equal(shm_records_push(src, 0, ended, r, SHM_REC_REFRESH0,
						  NOW - 2 * SEC + i, NULL), 0);
	assert_int_equal(shm_alloc_release(src, 0, ended), 0);
	img = (struct shm_image){ .fd = -1, .buf = src->base, .size = src->size };
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
	assert_int_equal(t.expired, n_exp);
	memset(&G, 0, sizeof(G));
	assert_int_equal(shm_records_drain(dst, collect, &G), SHM_REC_RING + n_exp);
	for (unsigned i = 0; i < G.n; i++)
		reasons[G.ev[i].reason]++;
	assert_int_equal(reasons[SHM_REC_REFRESH0], SHM_REC_RING);
	assert_int_equal(reasons[SHM_REC_EXPIRY], n_exp);
	assert_int_equal(shm_records_dropped(dst), 0);
	shm_destroy(src);
	shm_destroy(dst);
}

/* A restart into a smaller table: 2,000 records that expired in the gap, all steered to a
 * table of one slot and capacity 128: the master's backlog has no cap (a worker's twice
 * the capacity would keep 512 beside the ring's 512): every one is written, none
 * dropped. */
static void test_take_over_smaller(void **state)
{
	const unsigned n_exp = 2000;
	struct shm *src = mk(1, n_exp), *dst = mk(1, 128);
	struct shm_takeover t;
	struct shm_image img;

	(void)state;
	for (unsigned i = 0; i < n_exp; i++)
		add(src, 0, i, SHM_TRANSPORT_UDP, NOW - SEC);
	img = (struct shm_image){ .fd = -1, .buf = src->base, .size = src->size };
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
	assert_int_equal(t.expired, n_exp);
	assert_int_equal(shm_records_dropped(dst), 0);
	memset(&G, 0, sizeof(G));
	assert_int_equal(shm_records_drain(dst, collect, &G), n_exp);
	assert_int_equal(shm_records_dropped(dst), 0);
	shm_destroy(src);
	shm_destroy(dst);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_ring_backlog),
		cmocka_unit_test(test_backlog_lost),
		cmocka_unit_test(test_master_backlog),
		cmocka_unit_test(test_event_fields),
		cmocka_unit_test(test_take_over),
		cmocka_unit_test(test_take_over_burst),
		cmocka_unit_test(test_take_over_smaller),
		cmocka_unit_test(test_hold_order),
		cmocka_unit_test(test_unbuffered),
		cmocka_unit_test(test_records_off),
		cmocka_unit_test(test_backlog_cap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
