/* Unit tests for the state file (shm/shm_state.h): take-over of a segment image (what is
 * copied, re-owned, released and counted), refusal of every kind of bad image with dst
 * untouched, random corruption that never crashes, and the files of shm_state_open()
 * (creation, lock, symlink, mode, directory). With $TG_STATE_CORPUS set it also writes
 * the fuzz corpus of fuzz/fuzz_state.c there; with $TG_TEST_FILTER set, only the tests whose
 * names match it (a cmocka pattern) run. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/mono.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_internal.h"
#include "shm/shm_quota.h"
#include "shm/shm_records.h"
#include "shm/shm_state.h"

#define NOW UINT64_C(5000000000000)	/* a CLOCK_MONOTONIC "now" for images */
#define SEC UINT64_C(1000000000)
#define N_LIVE 9

static struct shm *mk(unsigned slots, unsigned cap)
{
	struct shm_config cfg = { slots, 2, 256, cap };
	struct shm *shm = NULL;

	assert_int_equal(shm_create(&cfg, "test-state", &shm), 0);
	return shm;
}

/* When rec_fill's records were created: NOW - 10 s for images judged as of NOW. A live
 * upgrade's open judges them as of the real clock (mono_ns()), and a record created after
 * that "now" is refused: its tests set this from mono_ns(), or they would pass only on a
 * machine up for longer than NOW (83 minutes). */
static uint64_t rec_created_ns = NOW - 10 * SEC;

static void rec_fill(struct shm_alloc *r, unsigned i, uint8_t transport, uint64_t expires)
{
	r->client_transport = transport;
	r->key_alg = SHM_KEY_MD5;
	r->key_len = 16;
	r->listener_idx = 1;
	r->client.family = AF_INET;
	r->client.addr[0] = 127;
	r->client.addr[3] = 1;
	r->client.port = (uint16_t)(40000 + i);
	r->server = r->client;
	r->server.port = 3478;
	r->relay = r->server;
	r->relay.port = (uint16_t)(50000 + i);
	r->created_ns = rec_created_ns;
	r->expires_ns = expires;
	r->user_len = (uint16_t)snprintf(r->username, sizeof(r->username), "user%u", i);
	r->realm_len = (uint16_t)snprintf(r->realm, sizeof(r->realm), "realm");
	memset(r->key, (int)i, 16);
	r->chans[0].number = 0x4000;
	r->chans[0].peer = r->relay;
	r->chans[0].expires_ns = expires;
	r->perms[0].family = AF_INET;
	r->perms[0].expires_ns = expires;
	r->ctr[SHM_ACTR_PKTS_TO_PEER] = 100 + i;
}

/* One record of slot `slot`; state: 0 LIVE, 1 CLAIMED (torn), 2 odd seqlock (torn). */
static void rec_add(struct shm *s, unsigned slot, unsigned i, uint8_t transport, uint64_t expires,
		    int torn)
{
	struct shm_alloc *r;
	uint32_t idx;

	assert_int_equal(shm_alloc_claim(s, slot, &idx, &r), 0);
	shm_alloc_begin_write(r);
	rec_fill(r, i, transport, expires);
	shm_alloc_end_write(r);
	if (torn == 1)
		return;
	assert_int_equal(shm_alloc_publish(s, slot, idx), 0);
	shm_ctr_add(shm_slot_counters(s, slot), SHM_CTR_ALLOCS_CREATED, 1);
	shm_ctr_add(shm_slot_counters(s, slot), SHM_CTR_ALLOCS_ACTIVE, 1);
	if (torn == 2)
		shm_alloc_begin_write(r);
}

/* An earlier run with 3 workers: N_LIVE live UDP records, 1 expired, 1 TCP, 2 torn, and
 * 5 allocations that ended before it died. */
static struct shm *src_build(void)
{
	struct shm *s = mk(3, 16);
	uint8_t key[SHM_NONCE_KEY_LEN];

	for (unsigned i = 0; i < N_LIVE; i++)
		rec_add(s, i % 3, i, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
	rec_add(s, 0, 20, SHM_TRANSPORT_UDP, NOW - SEC, 0);
	rec_add(s, 1, 21, SHM_TRANSPORT_TCP, NOW + 600 * SEC, 0);
	rec_add(s, 2, 22, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 1);
	rec_add(s, 2, 23, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 2);
	shm_ctr_add(shm_slot_counters(s, 1), SHM_CTR_ALLOCS_CREATED, 5);
	shm_ctr_add(shm_slot_counters(s, 1), SHM_CTR_ALLOCS_ENDED, 5);
	for (unsigned i = 0; i < 5; i++)	/* their lifetimes, as their worker observed them */
		shm_ctr_observe_lifetime(shm_slot_counters(s, 1), 7);
	shm_ctr_add(shm_slot_counters(s, 2), SHM_CTR_CLIENT_PKTS_IN, 1234);
	{
		/* The records name slot 1, "udp"'s; "gone" holds slot 0 (no record names
		 * it). The take-over carries the table as it is. */
		const char *names[] = { "gone", "udp" };
		uint16_t slots[2];

		assert_int_equal(shm_lslot_assign(s, names, 2, slots, NULL), 0);
		assert_int_equal(slots[0], 0);
		assert_int_equal(slots[1], 1);
	}
	memset(key, 0x5a, sizeof(key));
	assert_int_equal(shm_nonce_key_set(s, key), 0);
	return s;
}

static struct shm_image img_of(const struct shm *s)
{
	return (struct shm_image){ .fd = -1, .buf = s->base, .size = s->size };
}

/* A private copy of s's bytes, for corrupting. */
static uint8_t *bytes_of(const struct shm *s)
{
	uint8_t *b = malloc(s->size);

	assert_non_null(b);
	memcpy(b, s->base, s->size);
	return b;
}

static void reseal(uint8_t *b)
{
	struct shm_hdr *h = (struct shm_hdr *)b;

	h->hdr_check = shm_hdr_checksum(h);
}

static unsigned live_count(const struct shm *s)
{
	uint32_t cursor = 0, idx;
	unsigned n = 0;

	while (shm_alloc_next_live(s, &cursor, &idx) == 0)
		n++;
	return n;
}

/* The session records a take-over queued in dst: per record of rec_fill's numbering
 * ("user<i>"), its reason + 1 (0: none); a second record of the same one fails. */
static void ended_reason(const struct shm_rec_ev *ev, void *arg)
{
	uint8_t *reason = arg;
	unsigned i;

	assert_int_equal(sscanf(ev->username, "user%u", &i), 1);
	assert_true(i < 32);
	assert_int_equal(reason[i], 0);
	reason[i] = (uint8_t)(ev->reason + 1);
}

static void test_take_over(void **state)
{
	struct shm *src = src_build(), *dst = mk(2, 16);
	struct shm_image img = img_of(src);
	struct shm_takeover t;
	struct shm_counters sum;
	uint8_t key[SHM_NONCE_KEY_LEN], want[SHM_NONCE_KEY_LEN];
	uint32_t cursor = 0, idx;
	unsigned owned[2] = { 0, 0 };

	(void)state;
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
	assert_int_equal(t.verdict, SHM_STATE_TAKEN);
	assert_int_equal(t.adopted, N_LIVE);
	assert_int_equal(t.expired, 1);
	assert_int_equal(t.stream, 1);
	assert_int_equal(t.torn, 2);
	assert_int_equal(t.overflow, 0);
	assert_int_equal(t.old_slots, 3);
	assert_true(t.have_key && t.have_counters);
	assert_int_equal(live_count(dst), N_LIVE);
	/* the listener slots came along: "udp" keeps slot 1 in the next run */
	{
		const char *names[] = { "new", "udp" };
		uint16_t slots[2];
		char name[SHM_LSLOT_NAME_MAX];
		enum shm_lslot_state st;

		assert_int_equal(shm_lslot_name(dst, 1, name, sizeof(name), &st), 0);
		assert_string_equal(name, "udp");
		assert_int_equal(st, SHM_LSLOT_USED);
		uint64_t freed;

		assert_int_equal(shm_lslot_assign(dst, names, 2, slots, &freed), 0);
		assert_int_equal(slots[1], 1);
		/* "gone" is retired by this publish, not freed: "new" takes another slot */
		assert_int_equal(slots[0], 2);
		assert_int_equal(freed, 0);
		assert_int_equal(shm_lslot_name(dst, 0, name, sizeof(name), &st), 0);
		assert_int_equal(st, SHM_LSLOT_RETIRED);
		/* the next publish frees it: no record names slot 0 */
		assert_int_equal(shm_lslot_assign(dst, names, 2, slots, &freed), 0);
		assert_int_equal(freed, 1);
		assert_int_equal(slots[0], 2);
		assert_int_equal(shm_lslot_name(dst, 0, name, sizeof(name), &st), -ENOENT);
		/* slot 1 is busy (the records): "udp" removed stays retired */
		assert_int_equal(shm_lslot_assign(dst, names, 1, slots, &freed), 0);
		assert_int_equal(shm_lslot_assign(dst, names, 1, slots, &freed), 0);
		assert_int_equal(freed, 0);
		assert_int_equal(shm_lslot_name(dst, 1, name, sizeof(name), &st), 0);
		assert_int_equal(st, SHM_LSLOT_RETIRED);
		/* and comes back to it */
		assert_int_equal(shm_lslot_assign(dst, names, 2, slots, &freed), 0);
		assert_int_equal(slots[1], 1);
	}
	/* the list the first workers adopt from names exactly the live records */
	{
		uint32_t n_taken = 0;
		const uint32_t *taken = shm_taken(dst, &n_taken);

		assert_int_equal(n_taken, N_LIVE);
		for (uint32_t i = 0; i < n_taken; i++)
			assert_int_equal(SHM_ALLOC_WORD_STATE(shm_alloc_at(dst, taken[i])->state),
					 SHM_ALLOC_LIVE);
	}
	/* grouped by owner: each slot's share holds exactly its records, and entry i of the
	 * image's numbering still names the record entry i names */
	{
		uint32_t n_taken = 0, n_from = 0, n0 = 0, n1 = 0, pairs[N_LIVE][2];
		const uint32_t *taken = shm_taken(dst, &n_taken), *from, *s0, *s1;

		from = shm_taken_from(dst, &n_from);
		for (uint32_t i = 0; i < n_taken; i++)
			pairs[i][0] = taken[i], pairs[i][1] = from[i];
		assert_int_equal(shm_taken_group(dst), 0);
		taken = shm_taken(dst, &n_taken);
		from = shm_taken_from(dst, &n_from);
		s0 = shm_taken_slot(dst, 0, &n0);
		s1 = shm_taken_slot(dst, 1, &n1);
		assert_int_equal(n_taken, N_LIVE);
		assert_int_equal(n0 + n1, N_LIVE);
		assert_ptr_equal(s0, taken);
		assert_ptr_equal(s1, taken + n0);
		for (uint32_t i = 0; i < n_taken; i++) {
			bool found = false;

			assert_int_equal(shm_alloc_at(dst, taken[i])->owner, i < n0 ? 0 : 1);
			for (uint32_t j = 0; j < N_LIVE; j++)
				found |= pairs[j][0] == taken[i] && pairs[j][1] == from[i];
			assert_true(found);
		}
	}
	/* every record where the steering program sends its client, intact */
	while (shm_alloc_next_live(dst, &cursor, &idx) == 0) {
		struct shm_alloc r, *o;
		unsigned i;

		assert_int_equal(shm_alloc_read_copy(dst, idx, &r), 0);
		assert_true(r.owner < 2);
		assert_int_equal(r.owner, shm_steer_slot(&r.client, 2));
		assert_int_equal(shm_alloc_get(dst, r.owner, idx, &o), 0);
		i = r.client.port - 40000;
		assert_true(i < N_LIVE);
		assert_int_equal(r.relay.port, 50000 + i);
		assert_int_equal(r.key[15], i);
		assert_int_equal(r.chans[0].number, 0x4000);
		assert_int_equal(r.ctr[SHM_ACTR_PKTS_TO_PEER], 100 + i);
		owned[r.owner]++;
	}
	/* gauges: what is live now, per owner slot and per listener */
	for (unsigned s = 0; s < 2; s++) {
		struct shm_counters c;

		assert_int_equal(shm_counters_read(dst, s, &c), 0);
		assert_int_equal(c.v[SHM_CTR_ALLOCS_ACTIVE], owned[s]);
	}
	assert_true(owned[0] > 0 && owned[1] > 0);
	assert_int_equal(shm_counters_sum(dst, &sum), 0);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_ACTIVE], N_LIVE);
	assert_int_equal(sum.lst[1][SHM_LCTR_ALLOCS_ACTIVE], N_LIVE);
	/* cumulative counters carried; created - ended = active */
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_CREATED], N_LIVE + 1 + 1 + 1 + 5);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_CREATED] - sum.v[SHM_CTR_ALLOCS_ENDED], N_LIVE);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_DROPPED], 4);
	assert_int_equal(sum.v[SHM_CTR_CLIENT_PKTS_IN], 1234);
	/* each allocation counted as ended has its lifetime observed, as a worker's end does:
	 * the 5 of the earlier run (7 s each), the expired one (created to its expiry: 9 s),
	 * the TCP one and the torn LIVE one (created to the take-over: 10 s each) */
	assert_int_equal(sum.life.count, sum.v[SHM_CTR_ALLOCS_ENDED]);
	assert_int_equal(sum.life.sum_s, 5 * 7 + 9 + 10 + 10);
	assert_int_equal(sum.life.bucket[0], 5 + 3);
	/* and has its session record: expiry, shutdown (TCP), worker_crash (torn LIVE, as a
	 * replacement worker's release records it); the CLAIMED one was never granted */
	{
		uint8_t reason[32] = { 0 };

		assert_int_equal(shm_records_drain(dst, ended_reason, reason), 3);
		assert_int_equal(reason[20], SHM_REC_EXPIRY + 1);
		assert_int_equal(reason[21], SHM_REC_SHUTDOWN + 1);
		assert_int_equal(reason[22], 0);
		assert_int_equal(reason[23], SHM_REC_WORKER_CRASH + 1);
	}
	/* quota counts start at 0 in the new segment and are recounted from what was copied */
	assert_int_equal(shm_quota_total(dst), N_LIVE);
	assert_int_equal(shm_quota_count(dst, shm_quota_listener_key(1)), N_LIVE);
	for (unsigned i = 0; i < N_LIVE; i++) {
		char u[16];
		int n = snprintf(u, sizeof(u), "user%u", i);

		assert_int_equal(shm_quota_count(dst, shm_quota_key(SHM_QUOTA_USER, u, (size_t)n)),
				 1);
	}
	assert_int_equal(shm_quota_count(dst, shm_quota_key(SHM_QUOTA_USER, "user20", 6)), 0);
	assert_int_equal(shm_quota_count(dst, shm_quota_key(SHM_QUOTA_USER, "user21", 6)), 0);
	shm_nonce_key_get(dst, key);
	memset(want, 0x5a, sizeof(want));
	assert_memory_equal(key, want, sizeof(key));
	shm_destroy(dst);

	/* the same through the file descriptor (pread), into a smaller table */
	img.fd = shm_fd(src);
	dst = mk(1, 4);
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
	assert_int_equal(t.adopted, 4);
	assert_int_equal(t.overflow, N_LIVE - 4);
	assert_int_equal(live_count(dst), 4);
	assert_int_equal(shm_quota_total(dst), 4);
	/* the ones with no room ended too (10 s each): counted, observed, recorded */
	assert_int_equal(shm_counters_sum(dst, &sum), 0);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_CREATED] - sum.v[SHM_CTR_ALLOCS_ENDED], 4);
	assert_int_equal(sum.life.count, sum.v[SHM_CTR_ALLOCS_ENDED]);
	assert_int_equal(sum.life.sum_s, 5 * 7 + 9 + 10 + 10 + (N_LIVE - 4) * 10);
	{
		uint8_t reason[32] = { 0 };
		unsigned shut = 0;

		assert_int_equal(shm_records_drain(dst, ended_reason, reason), 3 + N_LIVE - 4);
		for (unsigned i = 0; i < N_LIVE; i++)
			shut += reason[i] == SHM_REC_SHUTDOWN + 1;
		assert_int_equal(shut, N_LIVE - 4);
	}
	shm_destroy(dst);
	shm_destroy(src);
}

typedef void corrupt_fn(uint8_t *b, size_t *len, const struct shm *src);

static void c_magic(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	(void)s;
	b[0] ^= 1;
}

static void c_version(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	(void)s;
	((struct shm_hdr *)b)->layout_version++;
	reseal(b);
}

static void c_checksum(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	(void)s;
	((struct shm_hdr *)b)->nonce_key[3] ^= 0x80;
}

static void c_short(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)b;
	(void)s;
	*len -= 4096;
}

static void c_tiny(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)b;
	(void)s;
	*len = 100;
}

static struct shm_region *region(uint8_t *b, uint32_t id)
{
	struct shm_hdr *h = (struct shm_hdr *)b;

	for (uint32_t i = 0; i < h->n_regions; i++)
		if (h->regions[i].id == id)
			return &h->regions[i];
	fail();
	return NULL;
}

static void c_format(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	(void)s;
	region(b, SHM_REGION_ALLOCS)->format ^= 1;
	reseal(b);
}

/* An image of a build before listener slots: no slot table (its records would name
 * listener positions, not slots). */
static void c_no_lslots(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	(void)s;
	region(b, SHM_REGION_LSLOTS)->id = SHM_REGION_UNUSED;
	reseal(b);
}

static void c_lslot_state(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	((struct shm_lslot_hdr *)(b + s->off_lslot))->ent[3].state = 7;
}

static void c_boot(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	(void)s;
	((struct shm_hdr *)b)->boot_id[0] ^= 1;
	reseal(b);
}

static void c_region_bounds(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	(void)s;
	region(b, SHM_REGION_ALLOCS)->count += 1;
	reseal(b);
}

static void c_region_overlap(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	(void)s;
	region(b, SHM_REGION_ALLOCS)->off = region(b, SHM_REGION_SLOTS)->off;
	reseal(b);
}

static void c_no_allocs(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	(void)s;
	region(b, SHM_REGION_ALLOCS)->id = 99;
	reseal(b);
}

static struct shm_alloc *rec0(uint8_t *b, const struct shm *s)
{
	return (struct shm_alloc *)(b + s->off_allocs);
}

static void c_user_len(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	rec0(b, s)->user_len = SHM_ALLOC_USER_MAX + 1;
}

static void c_owner(uint8_t *b, size_t *len, const struct shm *s)
{
	struct shm_alloc *r = rec0(b, s);

	(void)len;
	r->owner = 7;
	r->state = SHM_ALLOC_WORD(SHM_ALLOC_LIVE, 7);
}

static void c_state(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	rec0(b, s)->state = SHM_ALLOC_WORD(9, 0);
}

/* A bit above the owner other than SHM_ALLOC_ENDING, which no build sets. */
static void c_state_high(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	rec0(b, s)->state |= 1u << 17;
}

/* The end mark on a word that is not LIVE: never stored there (shm_alloc_end_mark). */
static void c_ending_claimed(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	rec0(b, s)->state = SHM_ALLOC_WORD(SHM_ALLOC_CLAIMED, 0) | SHM_ALLOC_ENDING;
}

static void c_ending_dying(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	rec0(b, s)->state = SHM_ALLOC_WORD(SHM_ALLOC_DYING, 0) | SHM_ALLOC_ENDING;
}

/* A marked record is ended on its owner alone: another than its word's, or a slot the file
 * does not have. */
static void c_ending_owner(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	rec0(b, s)->state |= SHM_ALLOC_ENDING;
	rec0(b, s)->owner = 1;
}

static void c_ending_slot(uint8_t *b, size_t *len, const struct shm *s)
{
	c_owner(b, len, s);
	rec0(b, s)->state |= SHM_ALLOC_ENDING;
}

static void c_lifetime(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	rec0(b, s)->expires_ns = NOW + 365 * 86400 * SEC;
}

/* The bytes that were n_perms/n_chans before format 2 must be zero. */
static void c_pad(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	rec0(b, s)->pad0[1] = 3;
}

static void c_channel(uint8_t *b, size_t *len, const struct shm *s)
{
	(void)len;
	rec0(b, s)->chans[3].number = 0x3fff;
}

static void test_refusals(void **state)
{
	static const struct {
		corrupt_fn *fn;
		enum shm_state_verdict v;
	} cases[] = {
		{ c_magic, SHM_STATE_FOREIGN },          { c_version, SHM_STATE_VERSION },
		{ c_checksum, SHM_STATE_CORRUPT },       { c_short, SHM_STATE_TRUNCATED },
		{ c_tiny, SHM_STATE_TRUNCATED },         { c_format, SHM_STATE_FORMAT },
		{ c_boot, SHM_STATE_OTHER_BOOT },        { c_region_bounds, SHM_STATE_CORRUPT },
		{ c_region_overlap, SHM_STATE_CORRUPT }, { c_no_allocs, SHM_STATE_CORRUPT },
		{ c_user_len, SHM_STATE_CORRUPT },       { c_owner, SHM_STATE_CORRUPT },
		{ c_state, SHM_STATE_CORRUPT },          { c_lifetime, SHM_STATE_CORRUPT },
		{ c_channel, SHM_STATE_CORRUPT },        { c_no_lslots, SHM_STATE_FORMAT },
		{ c_lslot_state, SHM_STATE_CORRUPT },    { c_pad, SHM_STATE_CORRUPT },
		{ c_state_high, SHM_STATE_CORRUPT },     { c_ending_claimed, SHM_STATE_CORRUPT },
		{ c_ending_dying, SHM_STATE_CORRUPT },   { c_ending_owner, SHM_STATE_CORRUPT },
		{ c_ending_slot, SHM_STATE_CORRUPT },
	};
	struct shm *src = src_build();

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t *b = bytes_of(src);
		size_t len = src->size;
		struct shm *dst = mk(2, 16);
		struct shm_image img;
		struct shm_takeover t;
		struct shm_counters sum;
		uint8_t key[SHM_NONCE_KEY_LEN], zero[SHM_NONCE_KEY_LEN] = { 0 };

		cases[i].fn(b, &len, src);
		img = (struct shm_image){ .fd = -1, .buf = b, .size = len };
		memset(&t, 0, sizeof(t));
		assert_int_equal(shm_image_take(dst, &img, NOW, &t), -EBADMSG);
		if (t.verdict != cases[i].v)
			fail_msg("case %zu: verdict %s, want %s (%s)", i,
				 shm_state_verdict_name(t.verdict),
				 shm_state_verdict_name(cases[i].v), t.why);
		assert_true(t.why[0] != '\0');
		/* nothing of the refused image reached dst */
		assert_int_equal(live_count(dst), 0);
		assert_int_equal(shm_counters_sum(dst, &sum), 0);
		assert_int_equal(sum.v[SHM_CTR_ALLOCS_CREATED], 0);
		shm_nonce_key_get(dst, key);
		assert_memory_equal(key, zero, sizeof(key));
		shm_destroy(dst);
		free(b);
	}
	shm_destroy(src);
}

/* A build with other counters (another slot format): the allocations are taken, the
 * counters are not, and the take-over says so (the master logs a warning). */
static void test_counters_other_format(void **state)
{
	struct shm *src = src_build(), *dst = mk(2, 16);
	uint8_t *b = bytes_of(src);
	struct shm_image img;
	struct shm_takeover t;
	struct shm_counters sum;

	(void)state;
	region(b, SHM_REGION_SLOTS)->format ^= 1;
	reseal(b);
	img = (struct shm_image){ .fd = -1, .buf = b, .size = src->size };
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
	assert_int_equal(t.verdict, SHM_STATE_TAKEN);
	assert_int_equal(t.adopted, N_LIVE);
	assert_true(t.counters_format && !t.have_counters);
	assert_int_equal(shm_counters_sum(dst, &sum), 0);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_CREATED], 0);
	shm_destroy(dst);
	shm_destroy(src);
	free(b);
	/* the same format: carried, nothing to say */
	src = src_build();
	dst = mk(2, 16);
	img = img_of(src);
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
	assert_true(t.have_counters && !t.counters_format);
	shm_destroy(dst);
	shm_destroy(src);
}

/* Random damage anywhere (the header re-sealed half of the time so the records are
 * reached): the take-over never crashes and either refuses or takes sane records. */
static void test_random_damage(void **state)
{
	struct shm *src = src_build();
	unsigned taken = 0, refused = 0;

	(void)state;
	srand(19);
	for (int round = 0; round < 300; round++) {
		uint8_t *b = bytes_of(src);
		struct shm *dst = mk(2, 16);
		struct shm_image img = { .fd = -1, .buf = b, .size = src->size };
		struct shm_takeover t;
		int flips = 1 + rand() % 8;

		for (int f = 0; f < flips; f++) {
			size_t at = round % 2 ? (size_t)rand() % sizeof(struct shm_hdr)
					      : src->off_allocs + (size_t)rand() % (16 * 2560);

			b[at] ^= (uint8_t)(1 + rand() % 255);
		}
		if (round % 4 < 2)
			reseal(b);
		memset(&t, 0, sizeof(t));
		if (shm_image_take(dst, &img, NOW, &t) == 0) {
			taken++;
			assert_true(live_count(dst) <= N_LIVE);
		} else {
			refused++;
			assert_int_equal(live_count(dst), 0);
		}
		shm_destroy(dst);
		free(b);
	}
	print_message("random damage: %u taken, %u refused\n", taken, refused);
	assert_true(refused > 0);
	shm_destroy(src);
}

/* ---- the files ---- */

/* Record i of src (rec_fill's client port 40000 + i): its index. */
static uint32_t idx_of(const struct shm *s, unsigned i)
{
	uint32_t cursor = 0, idx;

	while (shm_alloc_next_live(s, &cursor, &idx) == 0)
		if (shm_alloc_at(s, idx)->client.port == 40000 + i)
			return idx;
	fail_msg("record %u not found", i);
	return 0;
}

/* Record i of s gets relay port `port` (in its bracket, as a worker writes it). */
static void set_relay_port(struct shm *s, unsigned i, uint16_t port)
{
	struct shm_alloc *r = shm_alloc_at(s, idx_of(s, i));

	shm_alloc_begin_write(r);
	r->relay.port = port;
	shm_alloc_end_write(r);
}

/* dst a and b hold the same: allocations (every field from the owner on), take-over
 * list, slot counters, quota counts, port bookings and session record events. */
static void assert_same_take(struct shm *a, struct shm *b)
{
	uint32_t cursor = 0, idx, na, nb;
	const uint32_t *ta, *tb, *fa, *fb;
	size_t body = offsetof(struct shm_alloc, owner);

	assert_int_equal(live_count(a), live_count(b));
	while (shm_alloc_next_live(a, &cursor, &idx) == 0) {
		const struct shm_alloc *ra = shm_alloc_at(a, idx);
		const struct shm_alloc *rb = shm_alloc_at(b, idx_of(b, ra->client.port - 40000u));

		assert_memory_equal((const uint8_t *)ra + body, (const uint8_t *)rb + body,
				    sizeof(*ra) - body);
	}
	ta = shm_taken(a, &na);
	tb = shm_taken(b, &nb);
	assert_int_equal(na, nb);
	fa = shm_taken_from(a, &na);
	fb = shm_taken_from(b, &nb);
	for (uint32_t k = 0; k < na; k++) {
		assert_int_equal(fa[k], fb[k]);
		assert_int_equal(shm_alloc_at(a, ta[k])->client.port,
				 shm_alloc_at(b, tb[k])->client.port);
	}
	for (unsigned s = 0; s < a->cfg.n_slots; s++) {
		assert_memory_equal(shm_slot_counters(a, s), shm_slot_counters(b, s),
				    sizeof(struct shm_counters));
		assert_int_equal(shm_rec_ring_at(a, s)->head, shm_rec_ring_at(b, s)->head);
	}
	assert_int_equal(shm_quota_total(a), shm_quota_total(b));
	for (unsigned i = 0; i < 40; i++) {
		char u[16];
		int n = snprintf(u, sizeof(u), "user%u", i);
		uint64_t k = shm_quota_user_key(u, (size_t)n);

		assert_int_equal(shm_quota_count(a, k), shm_quota_count(b, k));
	}
	assert_int_equal(shm_ppool_held(a, NOW, NULL), shm_ppool_held(b, NOW, NULL));
}

/* The session records a take-over queued in dst, per record of rec_fill's numbering: when
 * each ended (0: none); a second record of the same one fails. */
static void ended_at(const struct shm_rec_ev *ev, void *arg)
{
	uint64_t *at = arg;
	unsigned i;

	assert_int_equal(sscanf(ev->username, "user%u", &i), 1);
	assert_true(i < 32);
	assert_int_equal(at[i], 0);
	at[i] = ev->ended_ns;
}

/* A pre-copy of img into dst and the take under the lock; then a whole take-over of img
 * into another segment, which dst must equal. The take's account in *t. */
static void take_precopied_same(struct shm *dst, const struct shm_image *img, uint32_t copied,
				struct shm_takeover *t)
{
	struct shm *full = mk(dst->cfg.n_slots, dst->cfg.alloc_cap);
	struct shm_precopy *pc = NULL;
	struct shm_takeover tf;

	full->keep_tcp = dst->keep_tcp;
	memset(t, 0, sizeof(*t));
	assert_int_equal(shm_image_precopy(dst, img, NOW, &pc, t), 0);
	assert_int_equal(shm_precopy_copied(pc), copied);
	memset(t, 0, sizeof(*t));
	assert_int_equal(shm_image_take_precopied(dst, img, pc, NOW, t), 0);
	shm_precopy_free(pc);
	memset(&tf, 0, sizeof(tf));
	assert_int_equal(shm_image_take(full, img, NOW, &tf), 0);
	assert_int_equal(t->adopted, tf.adopted);
	assert_int_equal(t->queued, tf.queued);
	assert_same_take(dst, full);
	shm_destroy(full);
}

/* A worker pushes its end event before it retires the record (wk_alloc_destroy): killed
 * between the two, it leaves a LIVE record whose end is queued in its ring. The take-over
 * (a whole one, and one after a pre-copy that copied it) ends it then: one session record
 * (the queued one), counted as ended with its lifetime up to that end, not copied. */
static void test_take_over_queued_end(void **state)
{
	for (int precopy = 0; precopy < 2; precopy++) {
		struct shm *src = mk(3, 16), *dst = mk(2, 16);
		struct shm_image img = img_of(src);
		struct shm_takeover t;
		struct shm_counters sum;
		uint8_t reason[32] = { 0 };
		uint32_t a, b;

		(void)state;
		rec_add(src, 0, 0, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
		rec_add(src, 1, 1, SHM_TRANSPORT_TCP, NOW + 600 * SEC, 0);
		rec_add(src, 2, 2, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);	/* goes on */
		a = idx_of(src, 0);
		b = idx_of(src, 1);
		/* 0 refreshed to 0 at NOW - 2 s, 1 disconnected at NOW - 3 s; both workers killed
		 * before their retire */
		assert_int_equal(shm_records_push(src, 0, a, shm_alloc_at(src, a), SHM_REC_REFRESH0,
						  NOW - 2 * SEC, NULL), 0);
		assert_int_equal(shm_records_push(src, 1, b, shm_alloc_at(src, b),
						  SHM_REC_DISCONNECT, NOW - 3 * SEC, NULL), 0);
		dst->keep_tcp = true;	/* 1 would be copied too, were its end not queued */
		memset(&t, 0, sizeof(t));
		if (precopy) {
			take_precopied_same(dst, &img, 3, &t);
			assert_int_equal(t.precopied, 1);
			assert_int_equal(t.precopy_ended, 2);
			assert_int_equal(t.recopied, 0);
		} else {
			assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
		}
		assert_int_equal(t.adopted, 1);
		assert_int_equal(t.queued, 2);
		assert_int_equal(t.stream + t.expired + t.torn + t.overflow, 0);
		assert_int_equal(live_count(dst), 1);
		assert_int_equal(shm_quota_total(dst), 1);
		assert_int_equal(shm_records_drain(dst, ended_reason, reason), 2);
		assert_int_equal(reason[0], SHM_REC_REFRESH0 + 1);
		assert_int_equal(reason[1], SHM_REC_DISCONNECT + 1);
		assert_int_equal(reason[2], 0);
		/* created 10 s before NOW: lived 8 and 7 s */
		assert_int_equal(shm_counters_sum(dst, &sum), 0);
		assert_int_equal(sum.v[SHM_CTR_ALLOCS_ENDED], 2);
		assert_int_equal(sum.v[SHM_CTR_ALLOCS_DROPPED], 0);
		assert_int_equal(sum.v[SHM_CTR_ALLOCS_ACTIVE], 1);
		assert_int_equal(sum.life.count, 2);
		assert_int_equal(sum.life.sum_s, 8 + 7);
		shm_destroy(dst);
		shm_destroy(src);
	}
	/* 0 ended (its end queued) and its worker gave its relay port to 1: 1's booking in
	 * the pre-copy failed (0's copy held the port). 0's copy is undone before the kept
	 * copies are booked again: the port is 1's, as in a whole take-over. */
	{
		struct shm *src = mk(1, 8), *dst = mk(1, 8);
		struct shm_image img = img_of(src);
		struct shm_takeover t;
		uint32_t a;

		rec_add(src, 0, 0, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
		rec_add(src, 0, 1, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
		set_relay_port(src, 1, 50000);
		a = idx_of(src, 0);
		assert_int_equal(shm_records_push(src, 0, a, shm_alloc_at(src, a), SHM_REC_REFRESH0,
						  NOW - 2 * SEC, NULL), 0);
		take_precopied_same(dst, &img, 2, &t);
		assert_int_equal(t.adopted, 1);
		assert_int_equal(t.queued, 1);
		assert_int_equal(t.precopy_ended, 1);
		assert_false(shm_ppool_is_free(dst, shm_ppool_tag(&shm_alloc_at(dst, idx_of(dst, 1))->relay),
					       50000, NOW));
		assert_int_equal(shm_ppool_held(dst, NOW, NULL), 1);
		shm_destroy(dst);
		shm_destroy(src);
	}
}

static void drop_ev(const struct shm_rec_ev *ev, void *arg)
{
	(void)ev;
	(void)arg;
}

/* Record i of src as wk_alloc_destroy leaves it when its worker is killed between the push
 * of its end event (refresh 0 at at_ns) and its retire: marked (shm_alloc_end_mark), the
 * event in its slot's ring, the record LIVE and still counted. */
static void end_pushed(struct shm *src, unsigned slot, unsigned i, uint64_t at_ns)
{
	uint32_t idx = idx_of(src, i);

	assert_int_equal(shm_alloc_end_mark(src, slot, idx), 0);
	assert_int_equal(shm_records_push(src, slot, idx, shm_alloc_at(src, idx),
					  SHM_REC_REFRESH0, at_ns, NULL), 0);
	assert_int_equal(SHM_ALLOC_WORD_STATE(shm_alloc_at(src, idx)->state), SHM_ALLOC_LIVE);
}

/* The take-over's account of src (see test_take_over_end_marked) in dst. */
static void assert_end_marked_take(struct shm *dst, const struct shm_takeover *t)
{
	struct shm_counters sum;
	uint8_t reason[32] = { 0 };

	assert_int_equal(t->adopted, 1);
	assert_int_equal(t->queued, 3);
	assert_int_equal(t->stream + t->expired + t->torn + t->overflow, 0);
	assert_int_equal(live_count(dst), 1);
	assert_int_equal(idx_of(dst, 2), shm_taken(dst, &(uint32_t){ 0 })[0]);
	assert_int_equal(shm_quota_total(dst), 1);
	assert_int_equal(shm_ppool_held(dst, NOW, NULL), 1);
	/* one session record: 3's, carried from the earlier run's ring; 0's and 1's were
	 * written by the earlier run's master, none again */
	assert_int_equal(shm_records_drain(dst, ended_reason, reason), 1);
	assert_int_equal(reason[3], SHM_REC_REFRESH0 + 1);
	assert_int_equal(reason[0] + reason[1] + reason[2], 0);
	/* created 4, 1 goes on: 3 ended, none dropped; 0 and 1 lived to the take-over (10 s:
	 * their end time went with their drained events), 3 to its queued end (8 s) */
	assert_int_equal(shm_counters_sum(dst, &sum), 0);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_CREATED], 4);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_ENDED], 3);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_DROPPED], 0);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_ACTIVE], 1);
	assert_int_equal(sum.lst[1][SHM_LCTR_ALLOCS_ACTIVE], 1);
	assert_int_equal(sum.life.count, sum.v[SHM_CTR_ALLOCS_ENDED]);
	assert_int_equal(sum.life.sum_s, 10 + 10 + 8);
}

/* Workers killed between the push of an end event and the retire (wk_alloc_destroy), and
 * the earlier run's master drained 0's and 1's events before it died (every 10 ms; a live
 * upgrade drains at records_freeze): their rings no longer say they ended, their records
 * do (the mark). The take-over (a whole one, and one under the lock after a pre-copy that
 * copied them before they ended) copies none of them and writes no second record; 3's
 * event is still queued: carried, and its end time is the event's. */
static void test_take_over_end_marked(void **state)
{
	for (int precopy = 0; precopy < 2; precopy++) {
		struct shm *src = mk(3, 16), *dst = mk(2, 16), *full = mk(2, 16);
		struct shm_image img = img_of(src);
		struct shm_precopy *pc = NULL;
		struct shm_takeover t, tf;

		(void)state;
		rec_add(src, 0, 0, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
		rec_add(src, 1, 1, SHM_TRANSPORT_TCP, NOW + 600 * SEC, 0);
		rec_add(src, 2, 2, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);	/* goes on */
		rec_add(src, 2, 3, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
		dst->keep_tcp = full->keep_tcp = true;	/* a live upgrade would copy 1 */
		memset(&t, 0, sizeof(t));
		if (precopy) {
			assert_int_equal(shm_image_precopy(dst, &img, NOW, &pc, &t), 0);
			assert_int_equal(shm_precopy_copied(pc), 4);
		}
		end_pushed(src, 0, 0, NOW - 4 * SEC);
		end_pushed(src, 1, 1, NOW - 3 * SEC);
		assert_int_equal(shm_records_drain(src, drop_ev, NULL), 2);
		end_pushed(src, 2, 3, NOW - 2 * SEC);
		memset(&t, 0, sizeof(t));
		if (precopy) {
			assert_int_equal(shm_image_take_precopied(dst, &img, pc, NOW, &t), 0);
			shm_precopy_free(pc);
			assert_int_equal(t.precopied, 1);
			/* copied before the lock, then ended: counted so, not as changed */
			assert_int_equal(t.precopy_ended, 3);
			assert_int_equal(t.recopied, 0);
		} else {
			assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
		}
		memset(&tf, 0, sizeof(tf));
		assert_int_equal(shm_image_take(full, &img, NOW, &tf), 0);
		assert_same_take(dst, full);
		assert_end_marked_take(dst, &t);
		shm_destroy(full);
		shm_destroy(dst);
		shm_destroy(src);
	}
}

/* Whoever ends a torn LIVE record of a dead worker (killed inside a write bracket: an odd
 * sequence) marks it as it marks any LIVE one: its replacement (adopt_retire) or the master
 * (shm_slot_release_all). Killed in turn before the retire or release, it leaves the record
 * marked with its odd sequence and fields perhaps half written. The take-over (whole, and
 * under the lock after a pre-copy) ends it as a marked record, not refusing the file: 1's
 * event pushed (its lifetime to it), 2 killed before its push (no record, its lifetime to
 * the take-over), 3 with a creation after the take-over and an event at the end of time
 * (a damaged record: lifetime 0, not ages). */
static void test_take_over_marked_torn(void **state)
{
	for (int precopy = 0; precopy < 2; precopy++) {
		struct shm *src = mk(3, 16), *dst = mk(2, 16);
		struct shm_image img = img_of(src);
		struct shm_takeover t;
		struct shm_counters sum;
		struct shm_alloc *r;
		uint8_t reason[32] = { 0 };

		(void)state;
		rec_add(src, 0, 0, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);	/* goes on */
		for (unsigned i = 1; i < 4; i++) {
			uint32_t idx;

			rec_add(src, i - 1, i, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 2);
			idx = idx_of(src, i);
			r = shm_alloc_at(src, idx);
			assert_int_equal(r->seq & 1u, 1);
			r->pad1 = 1;	/* half written */
			r->chans[0].number = 1;
			r->expires_ns = i == 2 ? UINT64_MAX : 1;
			if (i == 3)
				r->created_ns = NOW + 1000 * SEC;
			assert_int_equal(shm_alloc_end_mark(src, i - 1, idx), 0);
			if (i != 2)
				assert_int_equal(shm_records_push(src, i - 1, idx, r,
								  SHM_REC_WORKER_CRASH,
								  i == 1 ? NOW - 2 * SEC : UINT64_MAX,
								  NULL),
						 0);
		}
		memset(&t, 0, sizeof(t));
		if (precopy)
			take_precopied_same(dst, &img, 1, &t);
		else
			assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
		assert_int_equal(t.verdict, SHM_STATE_TAKEN);
		assert_int_equal(t.adopted, 1);
		assert_int_equal(t.queued, 3);
		assert_int_equal(t.stream + t.expired + t.torn + t.overflow, 0);
		assert_int_equal(live_count(dst), 1);
		/* the two pushed, carried; none for 2, none again */
		assert_int_equal(shm_records_drain(dst, ended_reason, reason), 2);
		assert_int_equal(reason[1], SHM_REC_WORKER_CRASH + 1);
		assert_int_equal(reason[2], 0);
		assert_int_equal(reason[3], SHM_REC_WORKER_CRASH + 1);
		assert_int_equal(shm_counters_sum(dst, &sum), 0);
		assert_int_equal(sum.v[SHM_CTR_ALLOCS_ENDED], 3);
		assert_int_equal(sum.v[SHM_CTR_ALLOCS_DROPPED], 0);
		assert_int_equal(sum.v[SHM_CTR_ALLOCS_ACTIVE], 1);
		assert_int_equal(sum.life.count, 3);
		assert_int_equal(sum.life.sum_s, 8 + 10 + 0);
		shm_destroy(dst);
		shm_destroy(src);
	}
}

/* What is not a queued end of a LIVE record leaves it to be copied: a start event (with
 * start records on), an event carried from a run before (its index and generation of
 * another table), the end of an earlier generation of the same index. */
static void test_take_over_queued_other(void **state)
{
	for (int precopy = 0; precopy < 2; precopy++) {
		struct shm *src = mk(1, 3), *dst = mk(1, 8);	/* full: 3 reuses 2's index */
		struct shm_image img = img_of(src);
		struct shm_takeover t;
		struct shm_alloc old;
		uint8_t reason[32] = { 0 };
		uint32_t a, b, c;

		(void)state;
		shm_records_want_start(src, true);
		for (unsigned i = 0; i < 3; i++)
			rec_add(src, 0, i, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
		a = idx_of(src, 0);
		b = idx_of(src, 1);
		c = idx_of(src, 2);
		assert_int_equal(shm_records_push_start(src, 0, a, shm_alloc_at(src, a), NOW - SEC,
							NULL), 0);
		assert_int_equal(shm_records_push_carried(src, 0, b, shm_alloc_at(src, b),
							  SHM_REC_EXPIRY, NOW - SEC), 0);
		/* 2 ended (event, retire), and 3 claims its index */
		memcpy(&old, shm_alloc_at(src, c), sizeof(old));
		assert_int_equal(shm_records_push(src, 0, c, &old, SHM_REC_REFRESH0, NOW - SEC,
						  NULL), 0);
		assert_int_equal(shm_alloc_release(src, 0, c), 0);
		rec_add(src, 0, 3, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
		assert_int_equal(idx_of(src, 3), c);
		assert_true(shm_alloc_at(src, c)->gen != old.gen);
		if (precopy) {
			take_precopied_same(dst, &img, 3, &t);
			assert_int_equal(t.precopied, 3);
			assert_int_equal(t.precopy_ended, 0);
		} else {
			memset(&t, 0, sizeof(t));
			assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
		}
		assert_int_equal(t.adopted, 3);
		assert_int_equal(t.queued, 0);
		assert_int_equal(live_count(dst), 3);
		/* the three events carried, none added */
		assert_int_equal(shm_records_drain(dst, ended_reason, reason), 3);
		assert_int_equal(reason[0], SHM_REC_OTHER + 1);
		assert_int_equal(reason[1], SHM_REC_EXPIRY + 1);
		assert_int_equal(reason[2], SHM_REC_REFRESH0 + 1);
		assert_int_equal(reason[3], 0);
		shm_destroy(dst);
		shm_destroy(src);
	}
}

/* What the take-over ends that expired while no daemon ran (a TCP one, a torn LIVE one)
 * ended at its expiry, not at the take-over: its session record and its lifetime. */
static void test_take_over_end_time(void **state)
{
	struct shm *src = mk(3, 16), *dst = mk(2, 16);
	struct shm_image img = img_of(src);
	struct shm_takeover t;
	struct shm_counters sum;
	uint64_t at[32] = { 0 };

	(void)state;
	rec_add(src, 0, 0, SHM_TRANSPORT_TCP, NOW - 5 * SEC, 0);
	rec_add(src, 1, 1, SHM_TRANSPORT_UDP, NOW - 4 * SEC, 2);	/* torn LIVE */
	rec_add(src, 2, 2, SHM_TRANSPORT_TCP, NOW + 600 * SEC, 0);	/* ends now */
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
	assert_int_equal(t.stream, 2);
	assert_int_equal(t.torn, 1);
	assert_int_equal(shm_records_drain(dst, ended_at, at), 3);
	assert_int_equal(at[0], NOW - 5 * SEC);
	assert_int_equal(at[1], NOW - 4 * SEC);
	assert_int_equal(at[2], NOW);
	assert_int_equal(shm_counters_sum(dst, &sum), 0);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_ENDED], 3);
	assert_int_equal(sum.life.count, 3);
	assert_int_equal(sum.life.sum_s, 5 + 6 + 10);
	shm_destroy(dst);
	shm_destroy(src);
}

/* Counters that do not add up (more ended and copied than created: a worker killed
 * between its publish and its CREATED add) raise no ALLOCS_ENDED: no lifetime is observed
 * without it either. */
static void test_take_over_counters_short(void **state)
{
	struct shm *src = mk(3, 16), *dst = mk(2, 16);
	struct shm_image img = img_of(src);
	struct shm_takeover t;
	struct shm_counters sum;

	(void)state;
	rec_add(src, 0, 0, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
	rec_add(src, 1, 1, SHM_TRANSPORT_TCP, NOW + 600 * SEC, 0);
	shm_ctr_add(shm_slot_counters(src, 1), SHM_CTR_ALLOCS_CREATED, (uint64_t)-2);
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
	assert_int_equal(t.adopted, 1);
	assert_int_equal(t.stream, 1);
	assert_true(t.have_counters);
	assert_int_equal(shm_counters_sum(dst, &sum), 0);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_CREATED], 0);
	assert_int_equal(sum.v[SHM_CTR_ALLOCS_ENDED], 0);
	assert_int_equal(sum.life.count, sum.v[SHM_CTR_ALLOCS_ENDED]);
	shm_destroy(dst);
	shm_destroy(src);
}

/* Every gen the claims of dst's free records hand out (until it is full): above `floor`. */
static void assert_claims_above(struct shm *dst, uint64_t floor)
{
	struct shm_alloc *r;
	uint32_t idx;

	while (shm_alloc_claim(dst, 0, &idx, &r) == 0) {
		assert_true(r->gen > floor);
		assert_int_equal(shm_alloc_publish(dst, 0, idx), 0);
	}
}

/* Take-over of img into a fresh table: refused as corrupt, nothing copied. */
static void assert_refused_corrupt(const struct shm_image *img)
{
	struct shm *dst = mk(1, 8);
	struct shm_takeover t;

	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, img, NOW, &t), -EBADMSG);
	assert_int_equal(t.verdict, SHM_STATE_CORRUPT);
	assert_int_equal(live_count(dst), 0);
	shm_destroy(dst);
}

static void assert_gen_ok(uint64_t gen)
{
	assert_true(gen >= 1 && gen <= SHM_ALLOC_GEN_MAX);
}

/* A gen near 2^64 in a state file (damage: no run gets there) wrapped to 0 at the next
 * claim, for good, and the master's session records dropped every end of gen 0 as a
 * repeat. A record's gen (LIVE or FREE) or the header's gen_floor above SHM_ALLOC_GEN_MAX
 * refuses the file as corrupt, in a take-over and in a pre-copy's take under the lock; at
 * the bound it is taken; and a claim never hands out 0 or a gen above the bound, whatever
 * the floor (the backstop). */
static void gen_floor_bound(void)
{
	struct shm *src = mk(1, 4), *dst = mk(1, 8), *pre = mk(1, 8), *fresh = mk(1, 1);
	struct shm_image img = img_of(src);
	struct shm_precopy *pc = NULL;
	struct shm_takeover t;
	struct shm_alloc *r;
	uint32_t idx, free_idx;
	uint64_t last;

	rec_add(src, 0, 0, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
	assert_int_equal(shm_alloc_claim(src, 0, &free_idx, NULL), 0);
	assert_int_equal(shm_alloc_release(src, 0, free_idx), 0);
	shm_alloc_at(src, idx_of(src, 0))->gen = UINT64_MAX;
	assert_refused_corrupt(&img);
	shm_alloc_at(src, idx_of(src, 0))->gen = 1;
	shm_alloc_at(src, free_idx)->gen = SHM_ALLOC_GEN_MAX + 1;
	assert_refused_corrupt(&img);
	shm_alloc_at(src, free_idx)->gen = 1;
	shm_hdr(src)->gen_floor = UINT64_MAX;	/* not covered by hdr_check */
	assert_refused_corrupt(&img);
	shm_hdr(src)->gen_floor = SHM_ALLOC_GEN_MAX + 1;
	assert_refused_corrupt(&img);

	/* At the bound: taken, and the copy and every claim get a gen in 1..bound. */
	shm_hdr(src)->gen_floor = SHM_ALLOC_GEN_MAX;
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
	assert_int_equal(t.adopted, 1);
	assert_gen_ok(shm_alloc_at(dst, idx_of(dst, 0))->gen);
	while (shm_alloc_claim(dst, 0, &idx, &r) == 0) {
		assert_gen_ok(r->gen);
		assert_int_equal(shm_alloc_publish(dst, 0, idx), 0);
	}
	shm_hdr(src)->gen_floor = 0;

	/* A pre-copy reads a free record's gen above the bound: it raises the floor no
	 * higher than the bound, and the take under the lock refuses the file. */
	shm_alloc_at(src, free_idx)->gen = UINT64_MAX;
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_precopy(pre, &img, NOW, &pc, &t), 0);
	assert_true(shm_hdr(pre)->gen_floor <= SHM_ALLOC_GEN_MAX);
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take_precopied(pre, &img, pc, NOW, &t), -EBADMSG);
	assert_int_equal(t.verdict, SHM_STATE_CORRUPT);
	shm_precopy_undo(pre, pc);
	shm_precopy_free(pc);

	/* The backstop: a floor far above the bound (no take-over sets one), then a record
	 * at the bound: claims give 1..bound, never the record's last gen again. */
	shm_hdr(fresh)->gen_floor = UINT64_MAX;
	assert_int_equal(shm_alloc_claim(fresh, 0, &idx, &r), 0);
	assert_gen_ok(r->gen);
	assert_int_equal(shm_alloc_release(fresh, 0, idx), 0);
	shm_hdr(fresh)->gen_floor = SHM_ALLOC_GEN_MAX;
	r->gen = SHM_ALLOC_GEN_MAX;
	for (unsigned i = 0; i < 3; i++) {
		last = r->gen;
		assert_int_equal(shm_alloc_claim(fresh, 0, &idx, &r), 0);
		assert_gen_ok(r->gen);
		assert_true(r->gen != last);
		assert_int_equal(shm_alloc_release(fresh, 0, idx), 0);
	}
	shm_destroy(fresh);
	shm_destroy(pre);
	shm_destroy(dst);
	shm_destroy(src);
}

/* (index, gen) names one allocation across a take-over: the new table's claims, the copies'
 * included, get gens above every gen of the image (a LIVE record's, a free one's, the image's
 * own floor), and its free records are not touched for it (gen 0 until claimed). The
 * pre-copy of a live upgrade too, with gens the earlier run hands out after it. The
 * bounds of gen: gen_floor_bound. */
static void test_take_over_gen_floor(void **state)
{
	struct shm *src = mk(1, 4), *dst = mk(2, 8), *next = mk(1, 8), *pre = mk(1, 8);
	struct shm *ahead = mk(1, 8);
	struct shm_image img = img_of(src);
	struct shm_precopy *pc = NULL;
	struct shm_takeover t;
	uint32_t cursor = 0, idx, free_idx, seq;

	(void)state;
	rec_add(src, 0, 0, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
	shm_alloc_at(src, idx_of(src, 0))->gen = 5;	/* claimed 5 times there */
	assert_int_equal(shm_alloc_claim(src, 0, &free_idx, NULL), 0);	/* then free, gen 7 */
	assert_int_equal(shm_alloc_release(src, 0, free_idx), 0);
	shm_alloc_at(src, free_idx)->gen = 7;
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(dst, &img, NOW, &t), 0);
	assert_int_equal(t.adopted, 1);
	assert_int_equal(shm_alloc_next_live(dst, &cursor, &idx), 0);
	assert_true(shm_alloc_at(dst, idx)->gen > 7);
	for (uint32_t i = 0; i < 8; i++)
		if (i != idx)
			assert_int_equal(shm_alloc_at(dst, i)->gen, 0);
	assert_claims_above(dst, 7);

	/* The image's own floor (it took over a table with higher gens) counts as one of
	 * its gens; 0 (a file of a build before the floor) is none. */
	shm_alloc_at(src, idx_of(src, 0))->gen = 1;
	shm_alloc_at(src, free_idx)->gen = 1;
	shm_hdr(src)->gen_floor = 9;
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(next, &img, NOW, &t), 0);
	assert_int_equal(t.adopted, 1);
	assert_true(shm_alloc_at(next, idx_of(next, 0))->gen > 9);
	assert_claims_above(next, 9);
	shm_hdr(src)->gen_floor = 0;

	/* Pre-copy: the copy is made when the file's highest gen is 1, and gets a gen
	 * SHM_PRECOPY_GEN_AHEAD above it; the earlier run then claims a record at gen 12
	 * before the lock. The kept copy and the new claims stay above 12, and the take under
	 * the lock writes no kept copy again (its sequence unchanged: no pass in the gap). */
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_precopy(pre, &img, NOW, &pc, &t), 0);
	assert_int_equal(shm_precopy_copied(pc), 1);
	assert_true(shm_alloc_at(pre, idx_of(pre, 0))->gen > 1 + SHM_PRECOPY_GEN_AHEAD);
	seq = shm_alloc_at(pre, idx_of(pre, 0))->seq;
	rec_add(src, 0, 1, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
	shm_alloc_at(src, idx_of(src, 1))->gen = 12;	/* its index claimed 12 times by now */
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take_precopied(pre, &img, pc, NOW, &t), 0);
	shm_precopy_free(pc);
	assert_int_equal(t.adopted, 2);
	assert_int_equal(shm_alloc_at(pre, idx_of(pre, 0))->seq, seq);
	assert_true(shm_alloc_at(pre, idx_of(pre, 0))->gen > 12);
	assert_true(shm_alloc_at(pre, idx_of(pre, 1))->gen > 12);
	assert_claims_above(pre, 12);

	/* The earlier run claimed an index more than SHM_PRECOPY_GEN_AHEAD times between the
	 * pre-copy and the lock: the kept copies are given gens above it under the lock. */
	shm_alloc_at(src, idx_of(src, 1))->gen = 1;
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_precopy(ahead, &img, NOW, &pc, &t), 0);
	assert_int_equal(shm_precopy_copied(pc), 2);
	rec_add(src, 0, 2, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
	shm_alloc_at(src, idx_of(src, 2))->gen = 2 * SHM_PRECOPY_GEN_AHEAD;
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take_precopied(ahead, &img, pc, NOW, &t), 0);
	shm_precopy_free(pc);
	assert_int_equal(t.adopted, 3);
	for (unsigned k = 0; k < 3; k++)
		assert_true(shm_alloc_at(ahead, idx_of(ahead, k))->gen > 2 * SHM_PRECOPY_GEN_AHEAD);
	assert_claims_above(ahead, 2 * SHM_PRECOPY_GEN_AHEAD);
	shm_destroy(ahead);
	gen_floor_bound();
	shm_destroy(pre);
	shm_destroy(next);
	shm_destroy(dst);
	shm_destroy(src);
}

/* A live upgrade's pre-copy, then what the earlier run's workers did before they stopped:
 * the take under the lock leaves exactly what a full take-over of the final image does. */
static void test_precopy(void **state)
{
	struct shm *src = mk(3, 32), *pre = mk(2, 32), *full = mk(2, 32), *undone = mk(2, 32);
	struct shm_image img = img_of(src);
	struct shm_precopy *pc = NULL;
	struct shm_takeover t, tf;
	struct shm_alloc *r;
	unsigned slot;
	bool torn;

	(void)state;
	for (unsigned i = 0; i < 12; i++)
		rec_add(src, i % 3, i, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
	rec_add(src, 0, 12, SHM_TRANSPORT_DTLS, NOW + 600 * SEC, 0);	/* never pre-copied */
	r = shm_alloc_at(src, idx_of(src, 7));	/* expires between the pre-copy and the take */
	shm_alloc_begin_write(r);
	r->expires_ns = r->chans[0].expires_ns = r->perms[0].expires_ns = NOW + 5 * SEC;
	shm_alloc_end_write(r);
	pre->keep_tcp = full->keep_tcp = undone->keep_tcp = true;
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_precopy(pre, &img, NOW, &pc, &t), 0);
	assert_int_equal(shm_precopy_copied(pc), 12);
	assert_int_equal(live_count(pre), 12);

	/* (7 expires by the take's now;) 1 ends; 2 is refreshed with a new permission; 3 only
	 * relays (counters); 4 ends and 30 takes its place; 5 expires; 6 is left torn; 31 is new;
	 * 32 gets the relay port that 1 gave up (pre-copied: booked in pre until the take gives it
	 * back). */
	assert_int_equal(shm_alloc_is_torn(src, idx_of(src, 1), &torn, &slot), 0);
	assert_int_equal(shm_alloc_release(src, slot, idx_of(src, 1)), 0);
	r = shm_alloc_at(src, idx_of(src, 2));
	shm_alloc_begin_write(r);
	r->expires_ns += 100 * SEC;
	r->perms[1].family = AF_INET;
	r->perms[1].expires_ns = r->expires_ns;
	shm_alloc_end_write(r);
	shm_alloc_ctr_add(shm_alloc_at(src, idx_of(src, 3)), SHM_ACTR_BYTES_TO_PEER, 777);
	assert_int_equal(shm_alloc_is_torn(src, idx_of(src, 4), &torn, &slot), 0);
	assert_int_equal(shm_alloc_release(src, slot, idx_of(src, 4)), 0);
	rec_add(src, slot, 30, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
	r = shm_alloc_at(src, idx_of(src, 5));
	shm_alloc_begin_write(r);
	r->expires_ns = NOW - SEC;
	r->chans[0].expires_ns = r->perms[0].expires_ns = NOW - SEC;
	shm_alloc_end_write(r);
	shm_alloc_begin_write(shm_alloc_at(src, idx_of(src, 6)));
	rec_add(src, 1, 31, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
	rec_add(src, 2, 32, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
	set_relay_port(src, 32, 50001);

	memset(&tf, 0, sizeof(tf));
	assert_int_equal(shm_image_take(full, &img, NOW + 10 * SEC, &tf), 0);
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take_precopied(pre, &img, pc, NOW + 10 * SEC, &t), 0);
	assert_int_equal(t.verdict, SHM_STATE_TAKEN);
	assert_int_equal(t.adopted, tf.adopted);
	assert_int_equal(t.adopted, 12 - 5 + 3);	/* 1, 4, 5, 6, 7 gone; 30, 31, 32 new */
	assert_int_equal(t.expired, tf.expired);
	assert_int_equal(t.expired, 2);
	assert_int_equal(t.torn, tf.torn);
	assert_int_equal(t.stream, tf.stream);
	assert_int_equal(t.overflow, tf.overflow);
	assert_true(t.precopy);
	assert_int_equal(t.recopied, 6);
	assert_int_equal(t.precopied, 6);
	assert_int_equal(shm_alloc_at(pre, idx_of(pre, 3))->ctr[SHM_ACTR_BYTES_TO_PEER], 777);
	assert_false(shm_ppool_is_free(pre, shm_ppool_tag(&shm_alloc_at(pre, idx_of(pre, 32))->relay),
				       50001, NOW));
	assert_same_take(pre, full);
	shm_precopy_free(pc);

	/* Another file under the lock: the pre-copy is given back whole first. */
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_precopy(undone, &img, NOW, &pc, &t), 0);
	shm_precopy_undo(undone, pc);
	shm_precopy_free(pc);
	assert_int_equal(live_count(undone), 0);
	assert_int_equal(shm_quota_total(undone), 0);
	assert_int_equal(shm_ppool_held(undone, NOW, NULL), 0);
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take(undone, &img, NOW + 10 * SEC, &t), 0);
	assert_same_take(undone, full);

	/* A table too small for them all: no pre-copy (the take under the lock says which
	 * ones fit), and nothing left of it. */
	{
		struct shm *small = mk(2, 8);

		memset(&t, 0, sizeof(t));
		assert_int_equal(shm_image_precopy(small, &img, NOW, &pc, &t), -ENOSPC);
		assert_null(pc);
		assert_int_equal(live_count(small), 0);
		assert_int_equal(shm_quota_total(small), 0);
		assert_int_equal(shm_ppool_held(small, NOW, NULL), 0);
		shm_destroy(small);
	}

	/* A pre-copy of an image whose geometry is not the final one cannot be used: it is
	 * given back and the whole file taken (shm_state_open_upgrade does). */
	{
		uint8_t *b = bytes_of(src);
		struct shm_image bi = { .fd = -1, .buf = b, .size = src->size };
		struct shm *d = mk(2, 32);

		memset(&t, 0, sizeof(t));
		assert_int_equal(shm_image_precopy(d, &img, NOW, &pc, &t), 0);
		region(b, SHM_REGION_ALLOCS)->count--;
		reseal(b);
		memset(&t, 0, sizeof(t));
		assert_int_equal(shm_image_take_precopied(d, &bi, pc, NOW, &t), -ESTALE);
		assert_int_equal(t.verdict, SHM_STATE_NONE);
		assert_non_null(strstr(t.why, "geometry"));
		shm_precopy_undo(d, pc);
		memset(&t, 0, sizeof(t));
		assert_int_equal(shm_image_take(d, &bi, NOW, &t), 0);
		assert_int_equal(t.verdict, SHM_STATE_TAKEN);
		shm_precopy_free(pc);
		shm_destroy(d);
		free(b);
	}
	/* A relay port that two records of the pre-copy hold: 0 (first in the file's order)
	 * and 1, which claimed it after 0 ended while the pre-copy read on. 0 is released
	 * before the lock; 1, kept, holds the port as in a full take-over. */
	{
		struct shm *s2 = mk(1, 8), *p2 = mk(1, 8), *f2 = mk(1, 8);
		struct shm_image i2 = img_of(s2);

		rec_add(s2, 0, 0, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
		rec_add(s2, 0, 1, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
		set_relay_port(s2, 1, 50000);
		memset(&t, 0, sizeof(t));
		assert_int_equal(shm_image_precopy(p2, &i2, NOW, &pc, &t), 0);
		assert_int_equal(shm_precopy_copied(pc), 2);
		assert_int_equal(shm_alloc_release(s2, 0, idx_of(s2, 0)), 0);
		memset(&tf, 0, sizeof(tf));
		assert_int_equal(shm_image_take(f2, &i2, NOW, &tf), 0);
		memset(&t, 0, sizeof(t));
		assert_int_equal(shm_image_take_precopied(p2, &i2, pc, NOW, &t), 0);
		assert_int_equal(t.precopied, 1);
		assert_false(shm_ppool_is_free(f2, shm_ppool_tag(&shm_alloc_at(f2, idx_of(f2, 1))->relay),
					       50000, NOW));
		assert_false(shm_ppool_is_free(p2, shm_ppool_tag(&shm_alloc_at(p2, idx_of(p2, 1))->relay),
					       50000, NOW));
		assert_same_take(p2, f2);
		shm_precopy_free(pc);
		shm_destroy(s2);
		shm_destroy(p2);
		shm_destroy(f2);
	}
	shm_destroy(src);
	shm_destroy(pre);
	shm_destroy(full);
	shm_destroy(undone);
}

struct between {
	struct shm *src;
	int calls;
};

/* Between the pre-copy's two reads of the (only) chunk: record 1's bracket ends (the
 * first read caught its new seq, set before the pre-copy, with the old fields) and record
 * 2's begins. */
static void between_reads(void *ctx, uint64_t off, size_t n)
{
	struct between *b = ctx;
	struct shm_alloc *r = shm_alloc_at(b->src, idx_of(b->src, 1));

	(void)off;
	(void)n;
	if (b->calls++ > 0)
		return;
	r->expires_ns += 100 * SEC;
	r->perms[1].family = AF_INET;
	r->perms[1].expires_ns = r->expires_ns;
	shm_alloc_begin_write(shm_alloc_at(b->src, idx_of(b->src, 2)));
}

/* The pre-copy is a seqlock read: a record whose bytes differ between its two reads, or
 * with an odd sequence, is not pre-copied (the take under the lock copies it). */
static void test_precopy_torn(void **state)
{
	struct shm *src = mk(1, 8), *pre = mk(1, 8), *full = mk(1, 8);
	struct shm_image img = img_of(src);
	struct between b = { src, 0 };
	struct shm_precopy *pc = NULL;
	struct shm_takeover t, tf;
	struct shm_alloc *r;

	(void)state;
	for (unsigned i = 0; i < 3; i++)
		rec_add(src, 0, i, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
	shm_alloc_at(src, idx_of(src, 1))->seq += 2;	/* its bracket's end, seen early */
	img.between_reads = between_reads;
	img.between_ctx = &b;
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_precopy(pre, &img, NOW, &pc, &t), 0);
	assert_int_equal(b.calls, 1);
	assert_int_equal(shm_precopy_copied(pc), 1);
	r = shm_alloc_at(src, idx_of(src, 2));
	r->expires_ns += 50 * SEC;
	shm_alloc_end_write(r);
	img.between_reads = NULL;
	memset(&tf, 0, sizeof(tf));
	assert_int_equal(shm_image_take(full, &img, NOW, &tf), 0);
	memset(&t, 0, sizeof(t));
	assert_int_equal(shm_image_take_precopied(pre, &img, pc, NOW, &t), 0);
	assert_int_equal(t.adopted, 3);
	assert_int_equal(t.precopied, 1);
	assert_int_equal(t.recopied, 0);
	assert_int_equal(shm_alloc_at(pre, idx_of(pre, 1))->perms[1].family, AF_INET);
	assert_same_take(pre, full);
	shm_precopy_free(pc);
	shm_destroy(src);
	shm_destroy(pre);
	shm_destroy(full);
}

static char tmpdir[64];

static int dir_setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/tg-state-XXXXXX");
	return mkdtemp(tmpdir) != NULL ? 0 : -1;
}

static int dir_teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static int open_state(const char *dir, struct shm **out, struct shm_takeover *t)
{
	struct shm_config cfg = { 2, 2, 256, 16 };

	return shm_state_open(dir, "inst", &cfg, NOW, 50, out, t);
}

static char *path(const char *name)
{
	static char p[4][PATH_MAX];
	static int n;
	char *r = p[n++ % 4];

	snprintf(r, PATH_MAX, "%s/%s", tmpdir, name);
	return r;
}

/* What a live upgrade's new binary is told before it says ready (shm_state_open_upgrade). */
struct ready_seen {
	int calls;
	uint32_t n;
	char why[256];
	bool shrink;             /* then the file's table loses its last record */
};

static char *path(const char *name);

static void ready_cb(void *ctx, uint32_t n, const char *why)
{
	struct ready_seen *r = ctx;

	r->calls++;
	r->n = n;
	snprintf(r->why, sizeof(r->why), "%s", why != NULL ? why : "(null)");
	if (r->shrink) {
		int fd = open(path("inst.state"), O_RDWR | O_CLOEXEC);
		struct stat st;
		uint8_t *b;

		assert_true(fd >= 0);
		assert_int_equal(fstat(fd, &st), 0);
		b = malloc((size_t)st.st_size);
		assert_non_null(b);
		assert_int_equal(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
		region(b, SHM_REGION_ALLOCS)->count--;
		reseal(b);
		assert_int_equal(pwrite(fd, b, sizeof(struct shm_hdr), 0), sizeof(struct shm_hdr));
		free(b);
		close(fd);
	}
}

/* A live upgrade's open of tmpdir's "inst" into a table of cap records: *r what its
 * ready callback was told (shrink: the callback shrinks the file's table). */
static void open_upgrade(unsigned cap, bool shrink, struct ready_seen *r, struct shm **a,
			 struct shm_takeover *t)
{
	memset(r, 0, sizeof(*r));
	r->shrink = shrink;
	*a = NULL;
	assert_int_equal(shm_state_open_upgrade(tmpdir, "inst",
						&(struct shm_config){ 2, 2, 256, cap }, NOW, 50,
						ready_cb, r, a, t),
			 0);
	assert_int_equal(r->calls, 1);
}

/* The pre-copy's count, or why none was made: no file; a table too small for every
 * record (the take under the lock still copies what fits). */
static void test_upgrade_ready(void **state)
{
	struct shm *a = NULL;
	struct shm_takeover t;
	struct ready_seen r;

	(void)state;
	open_upgrade(16, false, &r, &a, &t);
	assert_string_equal(r.why, "no state file");
	rec_created_ns = mono_ns() > 10 * SEC ? mono_ns() - 10 * SEC : 0;	/* a young clock */
	for (unsigned i = 0; i < 3; i++)
		rec_add(a, i % 2, i, SHM_TRANSPORT_UDP, mono_ns() + 600 * SEC, 0);
	rec_created_ns = NOW - 10 * SEC;
	shm_destroy(a);

	open_upgrade(2, false, &r, &a, &t);
	assert_int_equal(r.n, 0);
	assert_string_equal(r.why, "the new table cannot hold all its records");
	assert_int_equal(t.verdict, SHM_STATE_TAKEN);
	assert_int_equal(live_count(a), 2);
	shm_destroy(a);

	open_upgrade(16, false, &r, &a, &t);
	assert_int_equal(r.n, 2);
	assert_string_equal(r.why, "(null)");
	assert_int_equal(t.adopted, 2);
	shm_destroy(a);

	/* The file's geometry changes between the pre-copy and the lock: the pre-copy is
	 * given back and the whole file taken, not the upgrade failed. */
	open_upgrade(16, true, &r, &a, &t);
	assert_int_equal(r.n, 2);
	assert_int_equal(t.verdict, SHM_STATE_TAKEN);
	assert_int_equal(t.adopted, 2);
	assert_int_equal(live_count(a), 2);
	assert_non_null(strstr(t.why, "the pre-copy was given back (the file's geometry changed"));
	shm_destroy(a);
}

static int refused_files(void)
{
	glob_t gl;
	int n = glob(path("inst.state.refused-*"), 0, NULL, &gl) == 0 ? (int)gl.gl_pathc : 0;

	globfree(&gl);
	return n;
}

static void test_files(void **state)
{
	struct shm *a = NULL, *b = NULL;
	struct shm_takeover t;
	struct stat st;
	char sub[PATH_MAX];

	(void)state;
	/* first start: the directory is created 0700, the file 0600 */
	snprintf(sub, sizeof(sub), "%s/run", tmpdir);
	assert_int_equal(shm_state_open(sub, "inst", &(struct shm_config){ 1, 2, 256, 4 }, NOW, 50,
					&a, &t),
			 0);
	assert_int_equal(t.verdict, SHM_STATE_NONE);
	assert_int_equal(stat(sub, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	shm_destroy(a);
	a = NULL;

	assert_int_equal(open_state(tmpdir, &a, &t), 0);
	assert_int_equal(t.verdict, SHM_STATE_NONE);
	assert_int_equal(stat(path("inst.state"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* the highest descriptor: a dying process closes it last (shm/state.c) */
	assert_true(shm_lock_fd(a) > 100);
	rec_add(a, 1, 1, SHM_TRANSPORT_UDP, NOW + 600 * SEC, 0);
	/* the lock: a second instance is refused while the first lives */
	assert_int_equal(open_state(tmpdir, &b, &t), -EBUSY);
	assert_null(b);
	shm_destroy(a);
	a = NULL;
	/* taken over once the first is gone */
	assert_int_equal(open_state(tmpdir, &a, &t), 0);
	assert_int_equal(t.verdict, SHM_STATE_TAKEN);
	assert_int_equal(t.adopted, 1);
	assert_int_equal(live_count(a), 1);
	shm_destroy(a);
	a = NULL;

	/* a symlink, a group-readable file, a directory: refused, moved aside, replaced */
	assert_int_equal(rename(path("inst.state"), path("target")), 0);
	assert_int_equal(symlink(path("target"), path("inst.state")), 0);
	assert_int_equal(open_state(tmpdir, &a, &t), 0);
	assert_int_equal(t.verdict, SHM_STATE_SYMLINK);
	assert_true(t.aside[0] != '\0');
	assert_int_equal(lstat(path("inst.state"), &st), 0);
	assert_true(S_ISREG(st.st_mode));
	shm_destroy(a);
	a = NULL;
	assert_int_equal(chmod(path("inst.state"), 0640), 0);
	assert_int_equal(open_state(tmpdir, &a, &t), 0);
	assert_int_equal(t.verdict, SHM_STATE_MODE);
	shm_destroy(a);
	a = NULL;
	assert_int_equal(unlink(path("inst.state")), 0);
	assert_int_equal(mkdir(path("inst.state"), 0700), 0);
	assert_int_equal(open_state(tmpdir, &a, &t), 0);
	assert_int_equal(t.verdict, SHM_STATE_NOT_REGULAR);
	shm_destroy(a);
	a = NULL;
	assert_int_equal(refused_files(), 3);

	/* unusable directories and names */
	assert_int_equal(chmod(tmpdir, 0777), 0);
	assert_int_equal(open_state(tmpdir, &a, &t), -EPERM);
	assert_int_equal(chmod(tmpdir, 0700), 0);
	assert_int_equal(shm_state_open(tmpdir, "a/b", &(struct shm_config){ 1, 2, 256, 4 }, NOW,
					50, &a, &t),
			 -EINVAL);
	assert_int_equal(shm_state_open(path("inst.lock"), "x",
					&(struct shm_config){ 1, 2, 256, 4 }, NOW, 50, &a, &t),
			 -ENOTDIR);
	assert_null(a);
}

/* ---- fuzz corpus (fuzz/fuzz_state.c reads images taken at NOW) ---- */

static void corpus_write(const char *dir, const char *name, const uint8_t *b, size_t len)
{
	char p[PATH_MAX];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	f = fopen(p, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, len, f), len);
	fclose(f);
}

static void test_corpus(void **state)
{
	const char *dir = getenv("TG_STATE_CORPUS");
	struct shm *src;
	uint8_t *b;

	(void)state;
	if (dir == NULL)
		return;	/* only when asked: the corpus is checked in */
	src = src_build();
	corpus_write(dir, "valid", src->base, src->size);
	b = bytes_of(src);
	c_user_len(b, NULL, src);
	corpus_write(dir, "bad-record", b, src->size);
	free(b);
	b = bytes_of(src);
	c_version(b, NULL, src);
	corpus_write(dir, "version", b, src->size);
	corpus_write(dir, "truncated", src->base, src->size / 2);
	free(b);
	shm_destroy(src);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_take_over),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_counters_other_format),
		cmocka_unit_test(test_random_damage),
		cmocka_unit_test(test_take_over_queued_end),
		cmocka_unit_test(test_take_over_queued_other),
		cmocka_unit_test(test_take_over_end_marked),
		cmocka_unit_test(test_take_over_marked_torn),
		cmocka_unit_test(test_take_over_end_time),
		cmocka_unit_test(test_take_over_counters_short),
		cmocka_unit_test(test_take_over_gen_floor),
		cmocka_unit_test(test_precopy),
		cmocka_unit_test(test_precopy_torn),
		cmocka_unit_test_setup_teardown(test_files, dir_setup, dir_teardown),
		cmocka_unit_test_setup_teardown(test_upgrade_ready, dir_setup, dir_teardown),
		cmocka_unit_test(test_corpus),
	};

	/* tests/unit/test_clock_offsets.py runs only the tests that read the real clock */
	if (getenv("TG_TEST_FILTER") != NULL)
		cmocka_set_test_filter(getenv("TG_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
