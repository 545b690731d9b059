/* Unit tests for shm/: segment creation and attach validation, QSBR protocol steps,
 * snapshot arena, counters, allocation table (including races from forked children). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/mono.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_internal.h"
#include "shm/shm_records.h"
#include "shm/shm_relay.h"
#include "shm/shm_source.h"

static struct shm *mk(unsigned slots, unsigned snaps, unsigned snap_size, unsigned cap)
{
	struct shm_config cfg = { slots, snaps, snap_size, cap };
	struct shm *shm = NULL;

	assert_int_equal(shm_create(&cfg, "test-shm", &shm), 0);
	assert_non_null(shm);
	return shm;
}

/* ---- segment ---- */

static void test_create_rejects_bad_config(void **state)
{
	struct shm_config bad[] = {
		{ 0, 4, 4096, 10 }, { SHM_MAX_SLOTS + 1, 4, 4096, 10 },
		{ 2, 1, 4096, 10 }, { 2, SHM_MAX_SNAPS + 1, 4096, 10 },
		{ 2, 4, 16, 10 },   { 2, 4, 4096, SHM_MAX_ALLOCS + 1 },
	};
	struct shm *shm = NULL;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(shm_create(&bad[i], "x", &shm), -EINVAL);
	assert_null(shm);
	assert_int_equal(shm_create(NULL, "x", &shm), -EINVAL);
}

static void test_create_sealed(void **state)
{
	struct shm *shm = mk(2, 3, 4096, 16);
	struct shm_config cfg;
	int seals;

	(void)state;
	seals = fcntl(shm_fd(shm), F_GET_SEALS);
	assert_true(seals & F_SEAL_SHRINK);
	assert_true(seals & F_SEAL_GROW);
	assert_true(seals & F_SEAL_SEAL);
	assert_int_equal(ftruncate(shm_fd(shm), 4096), -1);
	shm_get_config(shm, &cfg);
	assert_int_equal(cfg.n_slots, 2);
	assert_int_equal(cfg.alloc_cap, 16);
	assert_true(shm_size(shm) >= 16 * sizeof(struct shm_alloc));
	assert_int_equal(shm_hdr(shm)->layout_hash, shm_layout_hash());
	assert_int_equal(shm_hdr(shm)->epoch, 1);
	shm_destroy(shm);
	shm_destroy(NULL);
}

static void test_attach_ro_ok(void **state)
{
	struct shm *shm = mk(2, 3, 4096, 16), *ro = NULL;
	struct shm_config a, b;
	const void *blob;
	size_t len;
	uint64_t tok;

	(void)state;
	assert_int_equal(shm_snap_publish(shm, "hello", 5, 7, 0), 0);
	assert_int_equal(shm_attach_ro(shm_fd(shm), &ro), 0);
	shm_get_config(shm, &a);
	shm_get_config(ro, &b);
	assert_memory_equal(&a, &b, sizeof(a));
	assert_int_equal(shm_snap_current(ro, &blob, &len, NULL), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(blob, "hello", 5);
	assert_int_equal(shm_qsbr_online(ro, 0), -EROFS);
	assert_int_equal(shm_qsbr_start(ro, &tok), -EROFS);
	assert_int_equal(shm_snap_publish(ro, "x", 1, 1, 0), -EROFS);
	assert_int_equal(shm_alloc_claim(ro, 0, NULL, NULL), -EROFS);
	assert_null(shm_slot_counters(ro, 0));
	shm_destroy(ro);
	shm_destroy(shm);
}

/* A writable copy of a segment in a fresh memfd, with `patch` applied at `off`. */
static int copy_patched(struct shm *shm, size_t off, const void *patch, size_t n, off_t new_size)
{
	int fd = memfd_create("copy", MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, shm->base, shm->size), (ssize_t)shm->size);
	if (patch != NULL)
		assert_int_equal(pwrite(fd, patch, n, (off_t)off), (ssize_t)n);
	if (new_size >= 0)
		assert_int_equal(ftruncate(fd, new_size), 0);
	return fd;
}

static int attach_patched(struct shm *shm, size_t off, const void *patch, size_t n, off_t new_size)
{
	struct shm *ro = NULL;
	int fd = copy_patched(shm, off, patch, n, new_size);
	int rc = shm_attach_ro(fd, &ro);

	shm_destroy(ro);
	close(fd);
	return rc;
}

static void test_attach_validation(void **state)
{
	struct shm *shm = mk(2, 3, 4096, 16);
	uint64_t v64 = 0x1234;
	uint32_t v32;

	(void)state;
	assert_int_equal(attach_patched(shm, 0, NULL, 0, -1), 0);
	assert_int_equal(attach_patched(shm, offsetof(struct shm_hdr, magic), &v64, 8, -1),
			 -EBADMSG);
	v32 = SHM_LAYOUT_VERSION + 1;
	assert_int_equal(attach_patched(shm, offsetof(struct shm_hdr, layout_version), &v32, 4, -1),
			 -EBADMSG);
	assert_int_equal(attach_patched(shm, offsetof(struct shm_hdr, layout_hash), &v64, 8, -1),
			 -EBADMSG);
	/* the immutable rest of the header is checksummed */
	assert_int_equal(attach_patched(shm, offsetof(struct shm_hdr, nonce_key), &v64, 8, -1),
			 -EBADMSG);
	v32 = 3;	/* more slots than the file has room for */
	assert_int_equal(attach_patched(shm, offsetof(struct shm_hdr, n_slots), &v32, 4, -1),
			 -EINVAL);
	v32 = 0;
	assert_int_equal(attach_patched(shm, offsetof(struct shm_hdr, n_slots), &v32, 4, -1),
			 -EINVAL);
	v32 = 0xffffffffu;
	assert_int_equal(attach_patched(shm, offsetof(struct shm_hdr, alloc_cap), &v32, 4, -1),
			 -EINVAL);
	v64 = shm->off_snaps + 128;	/* region offsets must be what this build computes */
	assert_int_equal(attach_patched(shm, offsetof(struct shm_hdr, off_snaps), &v64, 8, -1),
			 -EINVAL);
	v64 = shm->size * 2;
	assert_int_equal(attach_patched(shm, offsetof(struct shm_hdr, seg_size), &v64, 8, -1),
			 -EINVAL);
	/* file shorter or longer than the recorded size */
	assert_int_equal(attach_patched(shm, 0, NULL, 0, (off_t)shm->size - 4096), -EINVAL);
	assert_int_equal(attach_patched(shm, 0, NULL, 0, (off_t)shm->size + 4096), -EINVAL);
	assert_int_equal(attach_patched(shm, 0, NULL, 0, 16), -EBADMSG);
	assert_int_equal(shm_attach_ro(-1, NULL), -EINVAL);
	shm_destroy(shm);
}

/* ---- snapshots and QSBR ---- */

static void test_snap_bounds(void **state)
{
	struct shm *shm = mk(1, 3, 4096, 0);
	struct shm_hdr *h = shm_hdr(shm);
	const void *blob;
	size_t len;
	uint64_t good, bad[5];
	struct shm_snap_hdr *s;

	(void)state;
	assert_int_equal(shm_snap_current(shm, &blob, &len, NULL), -ENOENT);
	assert_int_equal(shm_snap_publish(shm, "abc", 3, 1, 0), 0);
	good = h->cur_snap;
	bad[0] = good + 8;                                   /* misaligned */
	bad[1] = shm->off_snaps - 4096;                       /* before the arena */
	bad[2] = shm->off_snaps + 3 * shm->snap_stride;      /* one past the end */
	bad[3] = shm->off_allocs + 4096 * 16;                /* far outside */
	bad[4] = UINT64_MAX;
	for (int i = 0; i < 5; i++) {
		h->cur_snap = bad[i];
		assert_int_equal(shm_snap_current(shm, &blob, &len, NULL), -EBADMSG);
	}
	h->cur_snap = good;
	s = (struct shm_snap_hdr *)(shm->base + good);
	s->len = 4097;                                       /* longer than a slot */
	assert_int_equal(shm_snap_current(shm, &blob, &len, NULL), -EBADMSG);
	s->len = 3;
	s->magic = 0;
	assert_int_equal(shm_snap_current(shm, &blob, &len, NULL), -EBADMSG);
	s->magic = SHM_SNAP_MAGIC;
	assert_int_equal(shm_snap_current(shm, &blob, &len, NULL), 0);
	assert_int_equal(shm_snap_publish(shm, NULL, 4097, 1, 0), -EINVAL);
	assert_int_equal(shm_snap_publish(shm, &good, 4097, 1, 0), -EMSGSIZE);
	shm_destroy(shm);
}

static void test_qsbr_poll_truth_table(void **state)
{
	struct shm *shm = mk(3, 3, 4096, 0);
	struct shm_slot *s1 = shm_slot_at(shm, 1);
	uint64_t t;
	unsigned blk;

	(void)state;
	assert_int_equal(shm_qsbr_start(shm, &t), 0);
	assert_int_equal(t, 2);
	/* all offline */
	assert_int_equal(shm_qsbr_poll(shm, t), 0);
	/* online before the bump: blocks */
	s1->qs = t - 1;
	assert_int_equal(shm_qsbr_poll(shm, t), -EAGAIN);
	blk = 0;
	assert_int_equal(shm_qsbr_blocker(shm, t, &blk), 0);
	assert_int_equal(blk, 1);
	blk = 2;
	assert_int_equal(shm_qsbr_blocker(shm, t, &blk), -ENOENT);
	/* q == t and q > t: done */
	s1->qs = t;
	assert_int_equal(shm_qsbr_poll(shm, t), 0);
	s1->qs = t + 5;
	assert_int_equal(shm_qsbr_poll(shm, t), 0);
	/* worker API */
	s1->qs = t - 1;
	assert_int_equal(shm_qsbr_quiescent(shm, 1), 0);
	assert_int_equal(s1->qs, t);
	assert_int_equal(shm_qsbr_poll(shm, t), 0);
	assert_int_equal(shm_qsbr_offline(shm, 1), 0);
	assert_int_equal(s1->qs, 0);
	assert_int_equal(shm_qsbr_online(shm, 1), 0);
	assert_int_equal(s1->qs, t);
	assert_int_equal(shm_qsbr_online(shm, 3), -EINVAL);
	assert_int_equal(shm_qsbr_offline(shm, 99), -EINVAL);
	shm_destroy(shm);
}

static uint8_t *payload_of(struct shm *shm, const void *blob)
{
	(void)shm;
	return (uint8_t *)(uintptr_t)blob;
}

static void test_publish_reclaim_cycle(void **state)
{
	struct shm *shm = mk(3, 3, 4096, 0);
	const void *old_blob, *blob;
	size_t len;
	uint64_t gen, age;
	unsigned freed, pending, blk;
	char a[100], b[200];

	(void)state;
	memset(a, 'A', sizeof(a));
	memset(b, 'B', sizeof(b));
	assert_int_equal(shm_snap_publish(shm, a, sizeof(a), 1, 1000), 0);
	/* worker 0 online and holding A; worker 1 offline; worker 2 online at a later point */
	assert_int_equal(shm_qsbr_online(shm, 0), 0);
	assert_int_equal(shm_snap_current(shm, &old_blob, &len, &gen), 0);
	assert_int_equal(gen, 1);
	assert_int_equal(shm_snap_publish(shm, b, sizeof(b), 2, 5000), 0);
	assert_int_equal(shm_qsbr_online(shm, 2), 0);	/* sees the new epoch */
	assert_int_equal(shm_snap_reclaim(shm, &freed, &pending), 0);
	assert_int_equal(freed, 0);
	assert_int_equal(pending, 1);
	/* A is untouched while worker 0 may use it */
	assert_memory_equal(old_blob, a, sizeof(a));
	assert_int_equal(shm_qsbr_oldest_pending_ns(shm, 8000, &age), 0);
	assert_int_equal(age, 3000);
	blk = 0;
	assert_int_equal(shm_qsbr_blocker(shm, shm_snap_oldest_token(shm), &blk), 0);
	assert_int_equal(blk, 0);
	/* worker 0 passes a quiescent state: A can go, and is poisoned */
	assert_int_equal(shm_qsbr_quiescent(shm, 0), 0);
	assert_int_equal(shm_snap_reclaim(shm, &freed, &pending), 0);
	assert_int_equal(freed, 1);
	assert_int_equal(pending, 0);
	for (size_t i = 0; i < 4096; i++)
		assert_int_equal(payload_of(shm, old_blob)[i], SHM_POISON_BYTE);
	assert_int_equal(shm_snap_oldest_token(shm), 0);
	assert_int_equal(shm_qsbr_oldest_pending_ns(shm, 9000, &age), 0);
	assert_int_equal(age, 0);
	/* the live one is never reclaimed */
	assert_int_equal(shm_snap_reclaim(shm, &freed, NULL), 0);
	assert_int_equal(freed, 0);
	assert_int_equal(shm_snap_current(shm, &blob, &len, &gen), 0);
	assert_int_equal(len, sizeof(b));
	assert_int_equal(gen, 2);
	assert_memory_equal(blob, b, sizeof(b));
	assert_int_equal(shm_hdr(shm)->generation, 2);
	shm_destroy(shm);
}

static void test_ring_full_and_reap(void **state)
{
	struct shm *shm = mk(2, 3, 4096, 0);
	unsigned freed, pending;
	struct shm_slot_info info;
	uint64_t inc;

	(void)state;
	assert_int_equal(shm_slot_spawning(shm, 0, &inc), 0);
	assert_int_equal(inc, 1);
	assert_int_equal(shm_slot_set_pid(shm, 0, 4242), 0);
	assert_int_equal(shm_slot_set_state(shm, 0, SHM_SLOT_RUNNING), 0);
	assert_int_equal(shm_slot_set_state(shm, 0, SHM_SLOT_DEAD), -EINVAL);
	assert_int_equal(shm_slot_spawning(shm, 0, NULL), -EBUSY);
	assert_int_equal(shm_qsbr_online(shm, 0), 0);	/* stuck online at epoch 1 */
	assert_int_equal(shm_snap_publish(shm, "1", 1, 1, 0), 0);
	assert_int_equal(shm_snap_publish(shm, "2", 1, 2, 0), 0);
	assert_int_equal(shm_snap_publish(shm, "3", 1, 3, 0), 0);
	assert_int_equal(shm_snap_publish(shm, "4", 1, 4, 0), -EBUSY);
	assert_int_equal(shm_snap_reclaim(shm, &freed, &pending), 0);
	assert_int_equal(freed, 0);
	assert_int_equal(pending, 2);
	/* the master reaps the worker: only now may its counter be forced offline */
	assert_int_equal(shm_slot_reaped(shm, 0), 0);
	assert_int_equal(shm_slot_read(shm, 0, &info), 0);
	assert_int_equal(info.state, SHM_SLOT_DEAD);
	assert_int_equal(info.pid, 0);
	assert_int_equal(info.qs, 0);
	assert_int_equal(shm_snap_reclaim(shm, &freed, &pending), 0);
	assert_int_equal(freed, 2);
	assert_int_equal(pending, 0);
	assert_int_equal(shm_snap_publish(shm, "4", 1, 4, 0), 0);
	/* respawn */
	assert_int_equal(shm_slot_spawning(shm, 0, &inc), 0);
	assert_int_equal(inc, 2);
	assert_int_equal(shm_slot_read(shm, 0, &info), 0);
	assert_int_equal(info.state, SHM_SLOT_STARTING);
	assert_int_equal(shm_slot_heartbeat(shm, 0, 77), 0);
	assert_int_equal(shm_slot_read(shm, 0, &info), 0);
	assert_int_equal(info.heartbeat_ns, 77);
	assert_int_equal(shm_slot_read(shm, 5, &info), -EINVAL);
	shm_destroy(shm);
}

static void test_reclaim_unsafe_frees_pending(void **state)
{
	struct shm *shm = mk(1, 2, 4096, 0);
	unsigned freed;

	(void)state;
	assert_int_equal(shm_qsbr_online(shm, 0), 0);
	assert_int_equal(shm_snap_publish(shm, "1", 1, 1, 0), 0);
	assert_int_equal(shm_snap_publish(shm, "2", 1, 2, 0), 0);
	assert_int_equal(shm_snap_reclaim_unsafe(shm, &freed), 0);
	assert_int_equal(freed, 1);
	shm_destroy(shm);
}

static void test_snap_copy(void **state)
{
	struct shm *shm = mk(1, 2, 4096, 0), *ro = NULL;
	char buf[16];
	size_t len;
	uint64_t gen;

	(void)state;
	assert_int_equal(shm_snap_copy(shm, buf, sizeof(buf), &len, &gen), -ENOENT);
	assert_int_equal(shm_snap_publish(shm, "0123456789", 10, 9, 0), 0);
	assert_int_equal(shm_attach_ro(shm_fd(shm), &ro), 0);
	assert_int_equal(shm_snap_copy(ro, buf, 4, &len, &gen), -ENOBUFS);
	assert_int_equal(len, 10);
	assert_int_equal(shm_snap_copy(ro, buf, sizeof(buf), &len, &gen), 0);
	assert_int_equal(gen, 9);
	assert_memory_equal(buf, "0123456789", 10);
	/* a corrupted payload is caught by the checksum */
	((struct shm_snap_hdr *)(shm->base + shm_hdr(shm)->cur_snap))->payload[3] ^= 1;
	assert_int_equal(shm_snap_copy(ro, buf, sizeof(buf), &len, &gen), -EBADMSG);
	assert_int_equal(shm_checksum("", 0), UINT64_C(0xcbf29ce484222325));
	shm_destroy(ro);
	shm_destroy(shm);
}

/* ---- counters ---- */

static void test_counters(void **state)
{
	struct shm *shm = mk(3, 2, 4096, 0);
	struct shm_counters *c0 = shm_slot_counters(shm, 0), *c2 = shm_slot_counters(shm, 2);
	struct shm_counters *sum = malloc(sizeof(*sum));

	(void)state;
	assert_non_null(sum);
	assert_null(shm_slot_counters(shm, 3));
	shm_ctr_add(c0, SHM_CTR_CLIENT_BYTES_IN, 100);
	shm_ctr_add(c2, SHM_CTR_CLIENT_BYTES_IN, 23);
	shm_ctr_add(c2, SHM_CTR__COUNT, 5);	/* ignored */
	shm_lctr_add(c0, 63, SHM_LCTR_PEER_PKTS_OUT, 2);
	shm_lctr_add(c2, 63, SHM_LCTR_PEER_PKTS_OUT, 3);
	shm_lctr_add(c2, 64, SHM_LCTR_PEER_PKTS_OUT, 3);	/* ignored */
	shm_cctr_add(c0, 1, SHM_CCTR_PEER_BYTES_IN, 9);
	assert_int_equal(shm_counters_sum(shm, sum), 0);
	assert_int_equal(sum->v[SHM_CTR_CLIENT_BYTES_IN], 123);
	assert_int_equal(sum->lst[63][SHM_LCTR_PEER_PKTS_OUT], 5);
	assert_int_equal(sum->cls[1][SHM_CCTR_PEER_BYTES_IN], 9);
	assert_int_equal(shm_counters_read(shm, 2, sum), 0);
	assert_int_equal(sum->v[SHM_CTR_CLIENT_BYTES_IN], 23);
	assert_int_equal(shm_counters_read(shm, 3, sum), -EINVAL);
	for (int i = 0; i < SHM_CTR__COUNT; i++) {
		assert_non_null(shm_ctr_name(i));
		for (int j = 0; j < i; j++)
			assert_string_not_equal(shm_ctr_name(i), shm_ctr_name(j));
	}
	for (int i = 0; i < SHM_LCTR__COUNT; i++)
		assert_non_null(shm_lctr_name(i));
	for (int i = 0; i < SHM_CCTR__COUNT; i++)
		assert_non_null(shm_cctr_name(i));
	assert_null(shm_ctr_name(SHM_CTR__COUNT));
	assert_null(shm_lctr_name(SHM_LCTR__COUNT));
	assert_null(shm_cctr_name(SHM_CCTR__COUNT));
	free(sum);
	shm_destroy(shm);
}

/* ---- allocation table ---- */

static void test_alloc_lifecycle(void **state)
{
	struct shm *shm = mk(2, 2, 4096, 4);
	struct shm_alloc *r, *copy = malloc(sizeof(*copy));
	struct shm_counters *c = shm_slot_counters(shm, 1);
	uint32_t idx, cur = 0, got;
	uint64_t gen;
	bool torn;
	unsigned owner;

	(void)state;
	assert_non_null(copy);
	assert_int_equal(shm_alloc_capacity(shm), 4);
	assert_int_equal(shm_alloc_claim(shm, 1, &idx, &r), 0);
	assert_int_equal(idx, 2);	/* slot 1 starts in its own half of the table */
	assert_int_equal(r->gen, 1);
	assert_int_equal(r->owner, 1);
	assert_int_equal(shm_alloc_is_torn(shm, idx, &torn, &owner), 0);
	assert_true(torn);	/* CLAIMED */
	assert_int_equal(owner, 1);
	assert_int_equal(shm_alloc_next_live(shm, &cur, &got), -ENOENT);
	shm_alloc_begin_write(r);
	r->client_transport = SHM_TRANSPORT_UDP;
	r->listener_idx = 5;
	memcpy(r->username, "alice", 5);
	r->user_len = 5;
	memset(r->key, 0x42, 16);
	r->key_len = 16;
	shm_alloc_end_write(r);
	assert_int_equal(shm_alloc_publish(shm, 0, idx), -EPERM);
	assert_int_equal(shm_alloc_publish(shm, 1, idx), 0);
	assert_int_equal(shm_alloc_publish(shm, 1, idx), -EPERM);
	assert_int_equal(c->v[SHM_CTR_ALLOCS_ACTIVE], 0);	/* the worker counts, not shm */
	assert_int_equal(shm_alloc_is_torn(shm, idx, &torn, NULL), 0);
	assert_false(torn);
	cur = 0;
	assert_int_equal(shm_alloc_next_live(shm, &cur, &got), 0);
	assert_int_equal(got, idx);
	assert_int_equal(shm_alloc_next_live(shm, &cur, &got), -ENOENT);
	assert_int_equal(shm_alloc_read_copy(shm, idx, copy), 0);
	assert_memory_equal(copy->username, "alice", 5);
	assert_int_equal(SHM_ALLOC_WORD_STATE(copy->state), SHM_ALLOC_LIVE);
	assert_int_equal(shm_alloc_get(shm, 0, idx, &r), -EPERM);
	assert_int_equal(shm_alloc_get(shm, 1, idx, &r), 0);
	assert_int_equal(shm_alloc_get(shm, 1, 4, &r), -EINVAL);
	assert_int_equal(shm_alloc_release(shm, 0, idx), -EPERM);
	assert_int_equal(shm_alloc_release(shm, 1, idx), 0);
	assert_int_equal(c->v[SHM_CTR_ALLOCS_ENDED], 0);
	assert_int_equal(r->state, 0);
	assert_int_equal(r->key[0], 0);	/* wiped */
	assert_int_equal(shm_alloc_release(shm, 1, idx), -EPERM);
	gen = r->gen;
	/* fill the table, then ENOSPC */
	for (int i = 0; i < 4; i++)
		assert_int_equal(shm_alloc_claim(shm, 0, NULL, NULL), 0);
	assert_int_equal(shm_alloc_claim(shm, 0, NULL, NULL), -ENOSPC);
	assert_int_equal(shm_alloc_read_copy(shm, idx, copy), 0);
	assert_int_equal(copy->gen, gen + 1);	/* reclaimed record got a new generation */
	assert_int_equal(shm_alloc_claim(shm, 2, NULL, NULL), -EINVAL);
	free(copy);
	shm_destroy(shm);
}

static void test_alloc_torn_and_release_all(void **state)
{
	struct shm *shm = mk(2, 2, 4096, 8);
	struct shm_alloc *r, *copy = malloc(sizeof(*copy));
	struct shm_counters *c = shm_slot_counters(shm, 0);
	uint64_t now, ago_s, born;
	uint32_t a, b, d, cur = 0, got;
	unsigned n, seen = 0;
	bool torn;

	(void)state;
	/* created 20 s ago, or at the clock's 0 if it is younger (a fresh boot, a time
	 * namespace: test_clock_offsets.py) */
	now = mono_ns();
	ago_s = now >= UINT64_C(20000000000) ? 20 : now / UINT64_C(1000000000);
	born = now - ago_s * UINT64_C(1000000000);
	assert_non_null(copy);
	assert_int_equal(shm_slot_spawning(shm, 0, NULL), 0);
	/* a: LIVE and fine; b: LIVE but writer died mid-update (odd seq); d: CLAIMED */
	assert_int_equal(shm_alloc_claim(shm, 0, &a, &r), 0);
	r->listener_idx = 7;
	r->created_ns = born;
	assert_int_equal(shm_alloc_publish(shm, 0, a), 0);
	assert_int_equal(shm_alloc_claim(shm, 0, &b, &r), 0);
	r->listener_idx = 7;
	r->created_ns = born;
	assert_int_equal(shm_alloc_publish(shm, 0, b), 0);
	/* what the worker counts for its two LIVE allocations */
	shm_ctr_add(c, SHM_CTR_ALLOCS_ACTIVE, 2);
	shm_lctr_add(c, 7, SHM_LCTR_ALLOCS_ACTIVE, 2);
	shm_alloc_begin_write(r);
	assert_int_equal(shm_alloc_claim(shm, 0, &d, NULL), 0);
	assert_int_equal(shm_alloc_claim(shm, 1, NULL, NULL), 0);
	assert_int_equal(shm_alloc_is_torn(shm, a, &torn, NULL), 0);
	assert_false(torn);
	assert_int_equal(shm_alloc_is_torn(shm, b, &torn, NULL), 0);
	assert_true(torn);
	assert_int_equal(shm_alloc_is_torn(shm, d, &torn, NULL), 0);
	assert_true(torn);
	assert_int_equal(shm_alloc_read_copy(shm, b, copy), -EAGAIN);
	assert_int_equal(shm_alloc_is_torn(shm, 8, &torn, NULL), -EINVAL);
	while (shm_alloc_next_owned(shm, 0, &cur, &got) == 0)
		seen++;
	assert_int_equal(seen, 3);
	/* the master may not touch the records of a slot with a process in it */
	assert_int_equal(shm_slot_release_all(shm, 0, &n), -EBUSY);
	assert_int_equal(shm_slot_reaped(shm, 0), 0);
	assert_int_equal(c->v[SHM_CTR_ALLOCS_ACTIVE], 2);
	assert_int_equal(shm_slot_release_all(shm, 0, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(c->v[SHM_CTR_ALLOCS_ACTIVE], 0);
	assert_int_equal(c->v[SHM_CTR_ALLOCS_ENDED], 2);	/* the LIVE ones only */
	/* counted as ended, so observed in the lifetime histogram too: ago_s (or one more, as
	 * the master's clock saw the release), 20 s in the (10, 60] bucket */
	assert_int_equal(c->life.count, 2);
	if (ago_s == 20)
		assert_int_equal(c->life.bucket[1], 2);
	assert_true(c->life.sum_s >= 2 * ago_s && c->life.sum_s <= 2 * ago_s + 2);
	assert_int_equal(c->lst[7][SHM_LCTR_ALLOCS_ACTIVE], 0);
	cur = 0;
	assert_int_equal(shm_alloc_next_owned(shm, 0, &cur, &got), -ENOENT);
	assert_int_equal(shm_alloc_is_torn(shm, b, &torn, NULL), 0);
	assert_false(torn);
	assert_int_equal(shm_alloc_read_copy(shm, b, copy), 0);
	assert_int_equal(copy->seq & 1, 0);
	/* slot 1's record survived */
	cur = 0;
	assert_int_equal(shm_alloc_next_owned(shm, 1, &cur, &got), 0);
	free(copy);
	shm_destroy(shm);
}

/* Counts the session records drained (arg: unsigned *), each a worker crash's. */
static void count_rec(const struct shm_rec_ev *ev, void *arg)
{
	unsigned *n = arg;

	assert_int_equal(ev->reason, SHM_REC_WORKER_CRASH);
	(*n)++;
}

/* The end mark (shm_alloc_end_mark): only on a LIVE record of its owner, once; the record
 * still reads LIVE and untorn; the retire takes it to DYING. The master releasing a dead
 * slot's records counts a marked one off as it does a LIVE one, with no second session
 * record (its worker pushed one after the mark). */
static void test_alloc_end_mark(void **state)
{
	struct shm *shm = mk(2, 2, 4096, 8);
	struct shm_counters *c = shm_slot_counters(shm, 0);
	uint32_t a, b, d, cur = 0, got;
	unsigned n, recs = 0;
	bool torn;

	(void)state;
	assert_int_equal(shm_slot_spawning(shm, 0, NULL), 0);
	for (int i = 0; i < 3; i++) {
		uint32_t *idx = i == 0 ? &a : i == 1 ? &b : &d;

		assert_int_equal(shm_alloc_claim(shm, 0, idx, NULL), 0);
		assert_int_equal(shm_alloc_publish(shm, 0, *idx), 0);
		shm_ctr_add(c, SHM_CTR_ALLOCS_ACTIVE, 1);
	}
	assert_int_equal(shm_alloc_end_mark(shm, 1, a), -EPERM);	/* not its owner */
	assert_int_equal(shm_alloc_end_mark(shm, 0, 8), -EINVAL);
	assert_int_equal(shm_alloc_end_mark(shm, 0, a), 0);
	assert_int_equal(shm_alloc_end_mark(shm, 0, a), -EPERM);	/* once */
	assert_true(shm_alloc_end_marked(shm_alloc_at(shm, a)));
	assert_false(shm_alloc_end_marked(shm_alloc_at(shm, b)));
	assert_int_equal(SHM_ALLOC_WORD_STATE(shm_alloc_at(shm, a)->state), SHM_ALLOC_LIVE);
	assert_int_equal(shm_alloc_is_torn(shm, a, &torn, NULL), 0);
	assert_false(torn);
	assert_int_equal(shm_alloc_next_live(shm, &cur, &got), 0);
	assert_int_equal(got, a);
	/* retired: DYING, the mark gone with LIVE; not markable any more */
	assert_int_equal(shm_alloc_end_mark(shm, 0, d), 0);
	assert_int_equal(shm_alloc_retire(shm, 0, d), 0);
	assert_int_equal(shm_alloc_at(shm, d)->state, SHM_ALLOC_WORD(SHM_ALLOC_DYING, 0));
	assert_false(shm_alloc_end_marked(shm_alloc_at(shm, d)));
	assert_int_equal(shm_alloc_end_mark(shm, 0, d), -EPERM);
	shm_ctr_add(c, SHM_CTR_ALLOCS_ACTIVE, (uint64_t)-1);	/* d counted off by its worker */
	shm_ctr_add(c, SHM_CTR_ALLOCS_ENDED, 1);
	/* the worker dies: a marked (its end recorded), b LIVE, d DYING */
	assert_int_equal(shm_slot_reaped(shm, 0), 0);
	assert_int_equal(shm_slot_release_all(shm, 0, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(c->v[SHM_CTR_ALLOCS_ACTIVE], 0);
	assert_int_equal(c->v[SHM_CTR_ALLOCS_ENDED], 3);
	assert_int_equal(shm_records_drain(shm, count_rec, &recs), 1);	/* b's only */
	assert_int_equal(recs, 1);
	shm_destroy(shm);
}

/* Children race to claim every record; each must be claimed exactly once. */
static void test_alloc_claim_race(void **state)
{
	enum {
		KIDS = 4,
		CAP = 2000
	};
	struct shm *shm = mk(KIDS, 2, 4096, CAP);
	uint32_t *owner_of = mmap(NULL, CAP * sizeof(uint32_t), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pids[KIDS];
	unsigned per_kid[KIDS] = { 0 };

	(void)state;
	assert_true(owner_of != MAP_FAILED);
	memset(owner_of, 0xff, CAP * sizeof(uint32_t));
	for (int k = 0; k < KIDS; k++) {
		pids[k] = fork();
		assert_true(pids[k] >= 0);
		if (pids[k] == 0) {
			uint32_t idx;
			int bad = 0;

			while (shm_alloc_claim(shm, (unsigned)k, &idx, NULL) == 0) {
				/* record who got it; a second claimer would overwrite */
				if (uatomic_cmpxchg(&owner_of[idx], 0xffffffffu, (uint32_t)k) !=
				    0xffffffffu)
					bad = 1;
				if (shm_alloc_publish(shm, (unsigned)k, idx) != 0)
					bad = 1;
			}
			_exit(bad);
		}
	}
	for (int k = 0; k < KIDS; k++) {
		int st;

		assert_int_equal(waitpid(pids[k], &st, 0), pids[k]);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), 0);
	}
	for (uint32_t i = 0; i < CAP; i++) {
		struct shm_alloc *r = shm_alloc_at(shm, i);

		assert_true(owner_of[i] < KIDS);
		assert_int_equal(r->state, SHM_ALLOC_WORD(SHM_ALLOC_LIVE, owner_of[i]));
		assert_int_equal(r->gen, 1);
		per_kid[owner_of[i]]++;
	}
	assert_int_equal(per_kid[0] + per_kid[1] + per_kid[2] + per_kid[3], CAP);
	print_message("claims per child: %u %u %u %u\n", per_kid[0], per_kid[1], per_kid[2],
		      per_kid[3]);
	munmap(owner_of, CAP * sizeof(uint32_t));
	shm_destroy(shm);
}

/* A child rewrites a record's fields as x / ~x pairs; every copy the parent obtains must
 * be consistent. Bounded in iterations, not time. */
static void test_seqlock_copy_consistent(void **state)
{
	struct shm *shm = mk(1, 2, 4096, 1);
	struct shm_alloc *r, *copy = malloc(sizeof(*copy));
	uint32_t idx;
	pid_t pid;
	unsigned ok = 0, busy = 0;
	int st;

	(void)state;
	assert_non_null(copy);
	assert_int_equal(shm_alloc_claim(shm, 0, &idx, &r), 0);
	assert_int_equal(shm_alloc_publish(shm, 0, idx), 0);
	r->reservation = ~(uint64_t)0;	/* the x = 0 pair */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (uint64_t x = 1; x < 2000000; x++) {
			shm_alloc_begin_write(r);
			r->cred_expiry = (int64_t)x;
			memset(r->username, (int)(x & 0xff), sizeof(r->username));
			r->perms[SHM_ALLOC_MAX_PERMS - 1].expires_ns = x;
			r->reservation = ~x;
			shm_alloc_end_write(r);
		}
		_exit(0);
	}
	for (int i = 0; i < 200000; i++) {
		int rc = shm_alloc_read_copy(shm, idx, copy);

		if (rc == -EAGAIN) {
			busy++;
			continue;
		}
		assert_int_equal(rc, 0);
		assert_int_equal(copy->reservation, ~(uint64_t)copy->cred_expiry);
		assert_int_equal(copy->perms[SHM_ALLOC_MAX_PERMS - 1].expires_ns,
				 (uint64_t)copy->cred_expiry);
		assert_int_equal((uint8_t)copy->username[0], (uint8_t)(copy->cred_expiry & 0xff));
		assert_int_equal((uint8_t)copy->username[127], (uint8_t)(copy->cred_expiry & 0xff));
		ok++;
	}
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(ok > 0);
	print_message("seqlock: %u consistent copies, %u busy\n", ok, busy);
	free(copy);
	shm_destroy(shm);
}

/* A worker process blocks reclamation until it is reaped; the grandparent view:
 * a real fork inherits the mapping and the handle. */
static void test_forked_reader_then_reap(void **state)
{
	struct shm *shm = mk(1, 2, 4096, 0);
	int pfd[2];
	pid_t pid;
	unsigned freed, pending, blk = 0;
	struct shm_slot_info info;
	uint64_t age;
	char c;
	int st;

	(void)state;
	assert_int_equal(pipe(pfd), 0);
	assert_int_equal(shm_snap_publish(shm, "one", 3, 1, 0), 0);
	assert_int_equal(shm_slot_spawning(shm, 0, NULL), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		const void *b;
		size_t l;

		shm_qsbr_online(shm, 0);
		shm_snap_current(shm, &b, &l, NULL);
		if (write(pfd[1], "x", 1) != 1)
			_exit(1);
		pause();	/* "stalled", holding the snapshot */
		_exit(0);
	}
	assert_int_equal(shm_slot_set_pid(shm, 0, pid), 0);
	assert_int_equal(read(pfd[0], &c, 1), 1);
	assert_int_equal(shm_snap_publish(shm, "two", 3, 2, 1000), 0);
	assert_int_equal(shm_snap_reclaim(shm, &freed, &pending), 0);
	assert_int_equal(pending, 1);
	/* the master can name the stalled worker and how long it has stalled */
	assert_int_equal(shm_qsbr_oldest_pending_ns(shm, 2000000, &age), 0);
	assert_int_equal(age, 2000000 - 1000);
	assert_int_equal(shm_qsbr_blocker(shm, shm_snap_oldest_token(shm), &blk), 0);
	assert_int_equal(blk, 0);
	assert_int_equal(shm_slot_read(shm, blk, &info), 0);
	assert_int_equal(info.pid, pid);
	/* publishing goes on until the ring is full, without blocking */
	assert_int_equal(shm_snap_publish(shm, "three", 5, 3, 2000), -EBUSY);
	kill(pid, SIGKILL);
	/* still pending until waitpid says it is gone */
	assert_int_equal(shm_snap_reclaim(shm, &freed, &pending), 0);
	assert_int_equal(pending, 1);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(shm_slot_reaped(shm, 0), 0);
	assert_int_equal(shm_snap_reclaim(shm, &freed, &pending), 0);
	assert_int_equal(freed, 1);
	assert_int_equal(pending, 0);
	close(pfd[0]);
	close(pfd[1]);
	shm_destroy(shm);
}

/* A LIVE record of slot 0 with a UDP relay on 10.0.0.1:port and one permission. */
static uint32_t relay_rec(struct shm *shm, uint16_t port, const uint8_t perm_ip[4])
{
	struct shm_alloc *r;
	uint32_t idx;

	assert_int_equal(shm_alloc_claim(shm, 0, &idx, &r), 0);
	assert_int_equal(shm_relay_add(shm, port, idx), 0);
	shm_alloc_begin_write(r);
	r->client_transport = SHM_TRANSPORT_UDP;
	r->relay = (struct shm_addr){ .addr = { 10, 0, 0, 1 }, .port = port, .family = AF_INET };
	memcpy(r->perms[0].addr, perm_ip, 4);
	r->perms[0].family = AF_INET;
	r->perms[0].expires_ns = 1000;
	r->chans[0].peer =
		(struct shm_addr){ .addr = { 192, 0, 2, 9 }, .port = 7, .family = AF_INET };
	r->chans[0].number = 0x4001;
	r->chans[0].expires_ns = 1000;
	shm_alloc_end_write(r);
	return idx;
}

/* Relay port index: ways, stale entries, the target read, delivery counts. */
/* Per-source counts: summed over the live slots only; a reaped worker's counts drop out
 * and its slot starts from zero at the next spawn; never below zero; refused sources
 * merge by address and log at most once per interval. */
static void test_source_counts(void **state)
{
	struct shm *shm = mk(3, 2, 4096, 16);
	struct shm_addr a = { .addr = { 192, 0, 2, 1 }, .family = 2 }, b = a;
	struct shm_src_top top[4];

	(void)state;
	for (unsigned s = 0; s < 2; s++) {
		assert_int_equal(shm_slot_spawning(shm, s, NULL), 0);
		assert_int_equal(shm_slot_set_state(shm, s, SHM_SLOT_RUNNING), 0);
	}
	shm_src_add(shm, 0, SHM_SRC_CONNS, 7, 1);
	shm_src_add(shm, 0, SHM_SRC_CONNS, 7, 1);
	shm_src_add(shm, 1, SHM_SRC_CONNS, 7 + SHM_SRC_BUCKETS, 1);	/* masked: bucket 7 */
	shm_src_add(shm, 2, SHM_SRC_CONNS, 7, 5);	/* slot 2 never started: not summed */
	shm_src_add(shm, 1, SHM_SRC_TLS_HS, 7, 1);
	assert_int_equal(shm_src_sum(shm, SHM_SRC_CONNS, 7), 3);
	assert_int_equal(shm_src_sum(shm, SHM_SRC_TLS_HS, 7), 1);
	assert_int_equal(shm_src_sum(shm, SHM_SRC_DTLS_HS, 7), 0);
	shm_src_add(shm, 1, SHM_SRC_TLS_HS, 7, -1);
	shm_src_add(shm, 1, SHM_SRC_TLS_HS, 7, -1);	/* clamps at 0 */
	assert_int_equal(shm_src_sum(shm, SHM_SRC_TLS_HS, 7), 0);
	/* Worker 0 dies with two connections: they leave the sum when it is reaped, and the
	 * slot's next worker starts from zero. */
	assert_int_equal(shm_slot_reaped(shm, 0), 0);
	assert_int_equal(shm_src_sum(shm, SHM_SRC_CONNS, 7), 1);
	assert_int_equal(shm_slot_spawning(shm, 0, NULL), 0);
	assert_int_equal(shm_src_sum(shm, SHM_SRC_CONNS, 7), 1);
	/* Trips: the first logs, the next within the interval does not, merged by address. */
	assert_true(shm_src_trip(shm, 0, &a, SHM_SRC_R_ADDR_TLS, 1000, 100));
	assert_false(shm_src_trip(shm, 0, &a, SHM_SRC_R_ADDR_TLS, 1050, 100));
	assert_true(shm_src_trip(shm, 0, &a, SHM_SRC_R_ADDR_CONNS, 1100, 100));
	assert_true(shm_src_trip(shm, 1, &a, SHM_SRC_R_ADDR_TLS, 1200, 100));
	b.addr[3] = 2;
	assert_true(shm_src_trip(shm, 1, &b, SHM_SRC_R_PREFIX_CONNS, 1300, 100));
	assert_int_equal(shm_src_top_read(shm, top, 4), 2);
	assert_int_equal(top[0].trips, 4);
	assert_int_equal(top[0].addr.addr[3], 1);
	assert_int_equal(top[0].reason, SHM_SRC_R_ADDR_TLS);	/* the latest trip's */
	assert_int_equal(top[1].trips, 1);
	assert_string_equal(shm_src_reason_name(SHM_SRC_R_PREFIX_DTLS), "prefix_dtls_handshakes");
	assert_null(shm_src_reason_name(SHM_SRC_REASONS));
	shm_destroy(shm);
}

static void test_relay_index(void **state)
{
	struct shm *shm = mk(1, 2, 4096, 8);
	const uint8_t ip[4] = { 192, 0, 2, 9 };
	struct shm_addr from = { .addr = { 192, 0, 2, 9 }, .port = 7, .family = AF_INET };
	struct shm_relay_target t;
	uint32_t cand[SHM_RELAY_WAYS], a, b, idx[SHM_RELAY_WAYS];
	uint64_t pkts, bytes;

	(void)state;
	a = relay_rec(shm, 50000, ip);
	assert_int_equal(shm_relay_find(shm, 50000, cand), 1); /* entered, not LIVE yet */
	assert_int_equal(cand[0], a);
	assert_int_equal(shm_relay_target_read(shm, a, 50000, &from, 10, false, &t), -ENOENT);
	assert_int_equal(shm_alloc_publish(shm, 0, a), 0);
	assert_int_equal(shm_relay_target_read(shm, a, 50001, &from, 10, false, &t), -ENOENT);
	assert_int_equal(shm_relay_target_read(shm, a, 50000, &from, 10, true, &t), 0);
	assert_int_equal(t.idx, a);
	assert_true(t.perm);
	assert_int_equal(t.chan, 0x4001);
	assert_int_equal(t.transport, SHM_TRANSPORT_UDP);
	assert_int_equal(t.relay.port, 50000);
	from.port = 8; /* the permission is by IP, the channel by address and port */
	assert_int_equal(shm_relay_target_read(shm, a, 50000, &from, 10, false, &t), 0);
	assert_true(t.perm);
	assert_int_equal(t.chan, 0);
	assert_int_equal(shm_relay_target_read(shm, a, 50000, &from, 2000, false, &t), 0);
	assert_false(t.perm); /* expired */
	/* Idempotent; the ways fill up with records that hold the port, then refuse. */
	assert_int_equal(shm_relay_add(shm, 50000, a), 0);
	for (unsigned i = 1; i < SHM_RELAY_WAYS; i++)
		idx[i] = relay_rec(shm, 50000, ip);
	assert_int_equal(shm_relay_find(shm, 50000, cand), SHM_RELAY_WAYS);
	b = relay_rec(shm, 50001, ip);
	assert_int_equal(shm_relay_add(shm, 50000, b), -ENOSPC);
	/* A released record's way is taken over (a dead owner never deleted it). */
	assert_int_equal(shm_alloc_release(shm, 0, idx[1]), 0);
	assert_int_equal(shm_relay_add(shm, 50000, b), 0);
	shm_relay_del(shm, 50000, a);
	assert_int_equal(shm_relay_find(shm, 50000, cand), SHM_RELAY_WAYS - 1);
	for (unsigned i = 0; i < SHM_RELAY_WAYS - 1; i++)
		assert_int_not_equal(cand[i], a);
	/* Delivery counts by other workers, cleared on claim. */
	shm_relay_ctr_add(shm, a, 2, 300);
	shm_relay_ctr_add(shm, a, 1, 5);
	shm_relay_ctr_get(shm, a, &pkts, &bytes);
	assert_int_equal(pkts, 3);
	assert_int_equal(bytes, 305);
	shm_relay_ctr_reset(shm, a);
	shm_relay_ctr_get(shm, a, &pkts, &bytes);
	assert_int_equal(pkts + bytes, 0);
	shm_destroy(shm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_rejects_bad_config),
		cmocka_unit_test(test_create_sealed),
		cmocka_unit_test(test_attach_ro_ok),
		cmocka_unit_test(test_attach_validation),
		cmocka_unit_test(test_snap_bounds),
		cmocka_unit_test(test_qsbr_poll_truth_table),
		cmocka_unit_test(test_publish_reclaim_cycle),
		cmocka_unit_test(test_ring_full_and_reap),
		cmocka_unit_test(test_reclaim_unsafe_frees_pending),
		cmocka_unit_test(test_snap_copy),
		cmocka_unit_test(test_counters),
		cmocka_unit_test(test_alloc_lifecycle),
		cmocka_unit_test(test_alloc_torn_and_release_all),
		cmocka_unit_test(test_alloc_end_mark),
		cmocka_unit_test(test_alloc_claim_race),
		cmocka_unit_test(test_seqlock_copy_consistent),
		cmocka_unit_test(test_forked_reader_then_reap),
		cmocka_unit_test(test_relay_index),
		cmocka_unit_test(test_source_counts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
