/* Unit tests of the expiries an adoption takes over (worker/adopt.c, worker/table.c): the
 * adoption arms each allocation's timer at a bound without reading the record's 64
 * permission and channel expiries (wk_alloc_arm_adopted), and the pass after it (or the
 * timer at that bound) arms it at the exact deadline. What must hold meanwhile: a
 * permission or channel that expired before its record was swept relays nothing (every
 * reader checks its expiry), the timer fires no later than the allocation's expiry or
 * the bound, and the sweep of what expired follows the exact deadline (at the bound's tick
 * itself for what expired before it). The whole upgrade through the daemon is the
 * integration tests' (test_upgrade*.py). */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <netinet/in.h>

#include "common/ipc.h"
#include "common/mono.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_revoke.h"
#include "tests/unit/worker_fix.h"
#include "worker/lifecycle.h"
#include "worker/table.h"
#include "worker/turn.h"
#include "worker/wk.h"

#define S_NS 1000000000ull
#define PEER_OLD 0x0a000001u	/* 10.0.0.1: permission and channel 0x4000 expired */
#define PEER_NEW 0x0a000002u	/* 10.0.0.2: permission and channel 0x4001 live */
#define USER "alice"

struct fix {
	struct shm *shm;
	struct worker_heritage h;
	struct worker *w;
	struct wk_listener l;
	int chan[2];		/* the relay channel: [0] the worker reads, [1] we write */
	int fd;			/* the relay socket handed over */
	uint32_t idx;
	uint64_t t0_ms;		/* before the adoption */
};

/* A LIVE UDP record of slot 0 relayed at 127.0.0.1:port, its lifetime ending at
 * expires_ns, with an expired permission and channel (PEER_OLD: expired a second ago and
 * not swept yet, as a record the old worker handed over before its timer's tick) and live
 * ones (PEER_NEW, 300 s). */
static uint32_t mk_rec(struct fix *f, uint16_t port, uint64_t expires_ns)
{
	struct sockaddr_in old = worker_fix_sin4(PEER_OLD, 5000);
	struct sockaddr_in young = worker_fix_sin4(PEER_NEW, 5000);
	uint64_t now = mono_ns();
	struct shm_alloc *rec;
	uint32_t idx;

	worker_fix_rec(f->shm, &f->l, 40000, port, expires_ns, &idx, &rec);
	memcpy(rec->username, USER, strlen(USER));
	rec->user_len = (uint16_t)strlen(USER);
	/* in slots 5 and 9 / 7 and 11: the scan must not stop at an empty slot */
	rec->perms[5].family = AF_INET;
	memcpy(rec->perms[5].addr, &old.sin_addr, 4);
	rec->perms[5].expires_ns = now - S_NS;
	rec->perms[9].family = AF_INET;
	memcpy(rec->perms[9].addr, &young.sin_addr, 4);
	rec->perms[9].expires_ns = now + 300 * S_NS;
	wk_addr_to_shm((struct sockaddr *)&old, &rec->chans[7].peer);
	rec->chans[7].number = 0x4000;
	rec->chans[7].expires_ns = now - S_NS;
	wk_addr_to_shm((struct sockaddr *)&young, &rec->chans[11].peer);
	rec->chans[11].number = 0x4001;
	rec->chans[11].expires_ns = now + 300 * S_NS;
	worker_fix_rec_publish(f->shm, &f->l, idx, rec);
	return idx;
}

/* fix_new's record before its adoption; revoked: its user was revoked before the
 * worker's first revocation sweep, which ran before the adoption (a worker started with
 * no listeners, adopting when they come). */
static struct fix *fix_new_revoked(uint64_t expires_ns, bool revoked)
{
	struct fix *f = calloc(1, sizeof(*f));
	uint16_t port;
	uint32_t key;

	assert_non_null(f);
	worker_fix_create("test-adopt-expiry", 1, &f->shm, &f->h, &f->w);
	worker_fix_adopter(f->w, &f->l);
	f->fd = worker_fix_bound(SOCK_DGRAM, &port);
	f->idx = mk_rec(f, port, expires_ns);
	key = IPC_RELAY_KEY(f->idx, 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
				    f->chan), 0);
	assert_int_equal(ipc_send_fds(f->chan[1], IPC_RELAYS, &key, sizeof(key), &f->fd, 1), 0);
	close(f->chan[1]);
	f->h.relay_chan = true;
	f->h.relay_rx = f->chan[0];
	f->t0_ms = mono_ms();
	if (revoked) {
		assert_int_equal(shm_revoke_add(f->shm, SHM_REVOKE_USER, USER, strlen(USER),
						wk_unix_now(), 0),
				 0);
		assert_true(wk_revoke_sweep(f->w));	/* nothing to end yet */
	}
	wk_adopt_run(f->w);
	return f;
}

static struct fix *fix_new(uint64_t expires_ns)
{
	return fix_new_revoked(expires_ns, false);
}

/* fix_new with its record adopted */
static struct fix *fix_adopted(uint64_t expires_ns)
{
	struct fix *f = fix_new(expires_ns);

	assert_int_equal(worker_fix_ctr(f->shm, 0, SHM_CTR_ALLOCS_ADOPTED), 1);
	return f;
}

static void fix_free(struct fix *f)
{
	struct wk_alloc *a;

	while ((a = LIST_FIRST(&f->w->allocs)) != NULL)
		wk_alloc_forget(f->w, a);
	if (ev_is_active(&f->w->tune))
		ev_idle_stop(f->w->loop, &f->w->tune);
	if (ev_is_active(&f->w->adopt_cpu))
		ev_check_stop(f->w->loop, &f->w->adopt_cpu);
	wk_tables_free(f->w);
	close(f->fd);
	close(f->l.fd);
	worker_fix_destroy(f->shm, 1, &f->w);
	free(f);
}

static struct sockaddr_in peer(uint32_t ip)
{
	return worker_fix_sin4(ip, 5000);
}

/* What relays right after the adoption, before any timer: the live permission and channel,
 * never the expired ones (each reader checks the expiry, the sweep has not come). */
static void check_relays(const struct wk_alloc *a)
{
	struct sockaddr_in old = peer(PEER_OLD), young = peer(PEER_NEW);
	uint64_t now = mono_ns();

	assert_false(wk_alloc_perm_ok(a, (struct sockaddr *)&old, now));
	assert_true(wk_alloc_perm_ok(a, (struct sockaddr *)&young, now));
	assert_null(wk_alloc_chan_by_num(a, 0x4000, now));
	assert_null(wk_alloc_chan_by_peer(a, (struct sockaddr *)&old, now));
	assert_non_null(wk_alloc_chan_by_num(a, 0x4001, now));
	assert_non_null(wk_alloc_chan_by_peer(a, (struct sockaddr *)&young, now));
}

/* The expired entries swept from the record, the live ones kept, the timer re-armed for the
 * earliest of those. */
static void check_swept(struct wk_alloc *a)
{
	uint64_t next = a->expires_ms;

	assert_int_equal(a->rec->perms[5].family, 0);
	assert_int_equal(a->rec->chans[7].number, 0);
	assert_int_equal(a->rec->perms[9].family, AF_INET);
	assert_int_equal(a->rec->chans[11].number, 0x4001);
	/* re-armed for the earliest live deadline */
	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS; i++)
		if (a->rec->perms[i].family && a->rec->perms[i].expires_ns / 1000000u < next)
			next = a->rec->perms[i].expires_ns / 1000000u;
	assert_true(next < a->expires_ms);
	assert_false(a->arm_pending);
	assert_true(wheel_timer_armed(&a->timer));
	assert_int_equal(a->timer.deadline_ms, next + 1);
	check_relays(a);
}

/* The exact deadline is the expired entries' (in the past: the next tick), and that tick
 * sweeps them (check_swept). */
static void check_exact_then_swept(struct fix *f, struct wk_alloc *a)
{
	assert_false(a->arm_pending);
	assert_true(wheel_timer_armed(&a->timer));
	assert_int_equal(a->timer.deadline_ms, a->rec->perms[5].expires_ns / 1000000u + 1);
	/* the wheel's next tick (it may be ahead of the clock: test_bound_arms_exact) */
	assert_int_equal(wheel_advance(&f->w->wheel, (f->w->wheel.tick + 1) * WHEEL_TICK_MS, f->w),
			 1);
	assert_ptr_equal(f->w->by_idx[f->idx], a);
	check_swept(a);
}

/* The pass after the adoption arms the timer exactly. */
static void test_pass_arms_exact(void **state)
{
	struct fix *f = fix_adopted(mono_ns() + 600 * S_NS);
	struct wk_alloc *a = f->w->by_idx[f->idx];

	(void)state;
	assert_non_null(a);
	check_relays(a);
	assert_true(wheel_timer_armed(&a->timer));
	assert_true(a->timer.deadline_ms <= mono_ms() + WK_ARM_PENDING_MS + 1);
	assert_true(ev_is_active(&f->w->tune));
	for (int i = 0; i < 16 && ev_is_active(&f->w->tune); i++)	/* bounded */
		ev_run(f->w->loop, EVRUN_NOWAIT);
	assert_false(ev_is_active(&f->w->tune));
	check_exact_then_swept(f, a);
	fix_free(f);
}

/* Without that pass (a worker that never idles), the timer at its bound arms it exactly:
 * the bound is no later than WK_ARM_PENDING_MS after the adoption. Its deadline, now_ms +
 * WK_ARM_PENDING_MS + 1, falls anywhere in a wheel tick: each case arms it again from a
 * chosen now_ms (residue: now_ms's in its tick), so that every run covers a deadline that
 * is a multiple of WHEEL_TICK_MS (the last millisecond of its tick) and others. expired:
 * the record's PEER_OLD permission and channel expired before the bound (as mk_rec makes
 * them), else they expire 200 s on. */
static void bound_arms_exact(uint64_t residue, bool expired)
{
	struct fix *f = fix_adopted(mono_ns() + 600 * S_NS);
	struct wk_alloc *a = f->w->by_idx[f->idx];
	uint64_t now_ms, tick_end;

	assert_non_null(a);
	assert_true(a->arm_pending);
	assert_true(a->timer.deadline_ms >= f->t0_ms + WK_ARM_PENDING_MS);
	assert_true(a->timer.deadline_ms <= mono_ms() + WK_ARM_PENDING_MS + 1);
	if (!expired) {
		shm_alloc_begin_write(a->rec);
		a->rec->perms[5].expires_ns = a->rec->chans[7].expires_ns = mono_ns() + 200 * S_NS;
		shm_alloc_end_write(a->rec);
	}
	/* the adoption's bound again, from a now_ms ahead of the wheel and the clock */
	now_ms = (mono_ms() / WHEEL_TICK_MS + 1) * WHEEL_TICK_MS + residue;
	wk_alloc_arm_adopted(f->w, a, now_ms);
	assert_int_equal(a->timer.deadline_ms, now_ms + WK_ARM_PENDING_MS + 1);
	/* the end of the deadline's tick: that tick alone runs */
	tick_end = (a->timer.deadline_ms + WHEEL_TICK_MS - 1) / WHEEL_TICK_MS * WHEEL_TICK_MS;
	/* nothing fires before the bound */
	assert_int_equal(wheel_advance(&f->w->wheel, now_ms + WK_ARM_PENDING_MS / 2, f->w), 0);
	assert_int_equal(wheel_advance(&f->w->wheel, tick_end - 1, f->w), 0);
	assert_int_equal(wheel_advance(&f->w->wheel, tick_end, f->w), 1);
	assert_ptr_equal(f->w->by_idx[f->idx], a);
	if (expired) {
		/* what expired is swept at the bound's tick, not a tick later */
		check_swept(a);
	} else {
		/* nothing to sweep: the timer re-armed at the exact deadline, no sweep */
		assert_false(a->arm_pending);
		assert_int_equal(a->rec->perms[5].family, AF_INET);
		assert_int_equal(a->rec->chans[7].number, 0x4000);
		assert_int_equal(a->timer.deadline_ms, a->rec->perms[5].expires_ns / 1000000u + 1);
	}
	fix_free(f);
}

/* now_ms's residue in its tick: the deadline's is 0 (a multiple of WHEEL_TICK_MS), 1, 51, 99 */
static const uint64_t residues[] = { (2 * WHEEL_TICK_MS - 1 - WK_ARM_PENDING_MS % WHEEL_TICK_MS) %
					     WHEEL_TICK_MS,
				     0, WHEEL_TICK_MS / 2, WHEEL_TICK_MS - 2 };

static void test_bound_arms_exact(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(residues) / sizeof(residues[0]); i++)
		bound_arms_exact(residues[i], false);
}

/* An entry that expired before the bound is swept at the bound's tick. */
static void test_bound_sweeps_expired(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(residues) / sizeof(residues[0]); i++)
		bound_arms_exact(residues[i], true);
}

/* An allocation that ends before the bound: its timer fires at its expiry, not later. */
static void test_lifetime_before_bound(void **state)
{
	uint64_t exp_ns = mono_ns() + WK_ARM_PENDING_MS * 900000ull;	/* 0.9 x the bound */
	struct fix *f = fix_new(exp_ns);
	struct wk_alloc *a = f->w->by_idx[f->idx];

	(void)state;
	if (a == NULL) {
		/* the only outcome a stall of 0.9 s before the adoption allows */
		assert_int_equal(worker_fix_ctr(f->shm, 0, SHM_CTR_ALLOCS_DROPPED), 1);
		print_message("skipped: the record expired before its adoption (a stalled "
			      "machine)\n");
		fix_free(f);
		skip();
	}
	assert_int_equal(a->timer.deadline_ms, exp_ns / 1000000u + 1);
	fix_free(f);
}

/* A change of an expiry after the adoption (a Refresh, a CreatePermission) arms the timer
 * exactly at once, and the pass has nothing left to do for it. */
static void test_refresh_arms_exact(void **state)
{
	struct fix *f = fix_adopted(mono_ns() + 600 * S_NS);
	struct wk_alloc *a = f->w->by_idx[f->idx];

	(void)state;
	assert_non_null(a);
	f->w->hot.perm_lifetime = 300;
	f->w->hot.max_perms = 8;
	{
		struct sockaddr_in p = peer(0x0a000003u);

		assert_int_equal(wk_alloc_perm_add(f->w, a, (struct sockaddr *)&p), 0);
	}
	assert_false(a->arm_pending);
	assert_false(wk_alloc_rearm_pending(f->w, a));
	check_exact_then_swept(f, a);
	fix_free(f);
}

/* A record whose user was revoked before its adoption is not adopted, even when the
 * worker's revocation sweep ran before: it ends as the sweep ends an allocation (end
 * reason revoked, ALLOCS_ENDED, not ALLOCS_DROPPED), its relay socket closed. */
static void test_revoked_not_adopted(void **state)
{
	struct fix *f = fix_new_revoked(mono_ns() + 600 * S_NS, true);

	(void)state;
	assert_false(wk_revoke_sweep(f->w));	/* the list did not change since */
	assert_null(f->w->by_idx[f->idx]);
	assert_int_equal(f->w->n_allocs, 0);
	assert_int_equal(shm_alloc_get(f->shm, 0, f->idx, NULL), -EPERM);	/* released */
	assert_int_equal(worker_fix_ctr(f->shm, 0, SHM_CTR_ALLOCS_ADOPTED), 0);
	assert_int_equal(worker_fix_ctr(f->shm, 0, SHM_CTR_ALLOCS_DROPPED), 0);
	assert_int_equal(worker_fix_ctr(f->shm, 0, SHM_CTR_ALLOCS_ENDED), 1);
	assert_int_equal(worker_fix_ctr(f->shm, 0, SHM_CTR_ALLOCS_ACTIVE), 0);
	assert_int_equal(f->w->n_adopt_wait, 0);
	fix_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pass_arms_exact),
		cmocka_unit_test(test_bound_arms_exact),
		cmocka_unit_test(test_bound_sweeps_expired),
		cmocka_unit_test(test_lifetime_before_bound),
		cmocka_unit_test(test_refresh_arms_exact),
		cmocka_unit_test(test_revoked_not_adopted),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
