/* Unit tests for the session-record rings (shm/shm_records.h): a full ring drops and
 * counts without blocking, the drain gives the events in order and frees the room, and a
 * take-over carries the earlier run's undrained events and records what ended in the
 * gap (expiry) or cannot be taken over (a stream allocation: shutdown), not what it
 * takes over. */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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
	struct shm_rec_ev ev[SHM_REC_RING + 8];
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

static void test_full_ring_drops(void **state)
{
	struct shm *s = mk(2, 8);
	struct shm_alloc *r;
	uint32_t idx = add(s, 1, 7, SHM_TRANSPORT_UDP, NOW + SEC);

	(void)state;
	assert_int_equal(shm_alloc_get(s, 1, idx, &r), 0);
	for (unsigned i = 0; i < SHM_REC_RING; i++)
		assert_int_equal(shm_records_push(s, 1, idx, r, SHM_REC_REFRESH0, NOW + i,
						  "udp"), 0);
	assert_int_equal(shm_records_push(s, 1, idx, r, SHM_REC_REFRESH0, NOW, NULL), -ENOBUFS);
	assert_int_equal(shm_records_dropped(s), 1);
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
	img = (struct shm_image){ .fd = -1, .buf = src->base, .size = src->size };
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
	assert_int_equal(t.adopted, 1);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_ring_drops),
		cmocka_unit_test(test_take_over),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
