/* Worker start-up after a crash: re-adopts the UDP allocations a dead predecessor in the
 * same slot left in the shared table, and releases what cannot be served again.
 *
 * Why this works: the records hold everything the relay needs (client 5-tuple, relayed
 * address and port, permissions, channels, key, CLOCK_MONOTONIC expiries, which are
 * system-wide), the master keeps the slot's listening sockets (clients still reach this
 * slot), and the dead process's relay sockets were closed by the kernel before waitpid
 * returned, so their ports are free to bind again. Only the private half (indexes,
 * sockets, timers) is rebuilt. Counters: the slot's counters survive the respawn, so the
 * predecessor's +1 in ALLOCS_ACTIVE for each LIVE record is still there; an adopted
 * record keeps it, a released LIVE one gives it back. */
#include "config.h"

#include "worker/lifecycle.h"
#include "worker/relay.h"
#include "worker/transport.h"
#include "worker/turn.h"
#include "worker/wk.h"
#include "worker/relayho.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "worker/sockbuf.h"
#include "shm/shm_lslot.h"
#include "shm/shm_ppool.h"
#include "shm/shm_records.h"
#include "shm/shm_relay.h"

/* A record whose relay port a socket still holds waits (wk_adopt_wait_due) instead of
 * being released: a kill -9 of the whole daemon frees the instance lock before the kernel
 * has closed the killed workers' sockets (shm/state.c: fd_move_high), which takes it a
 * second or more at 250,000 on two loaded cores. Tried again 20, 40, 80, 160 ms apart, then
 * every 200 ms, for up to 10 s (the master's wait for the lock), then released. A
 * try that fails costs a socket, a bind and a close (1.75 us here): 7,000 waiting records
 * are 12 ms of a pass, and the kernel's closing of the old sockets, which they wait for,
 * needs the same CPU, hence no shorter steps. */
#define WK_ADOPT_WAIT_MS 10000u
#define WK_ADOPT_WAIT_STEP_MIN_MS 20u
#define WK_ADOPT_WAIT_STEP_MAX_MS 200u

enum wk_adopt_verdict wk_adopt_classify(const struct shm *shm, uint32_t idx,
					const struct shm_alloc *rec, uint64_t now_ns)
{
	bool torn = true;

	if (shm_alloc_is_torn(shm, idx, &torn, NULL) < 0 || torn)
		return WK_ADOPT_TORN;
	if (shm_alloc_end_marked(rec))
		return WK_ADOPT_ENDED;
	if (rec->client_transport != SHM_TRANSPORT_UDP)
		return WK_ADOPT_STREAM;
	if (rec->expires_ns <= now_ns)
		return WK_ADOPT_EXPIRED;
	return WK_ADOPT_TRY;
}

/* Ends record idx of the dead predecessor if it is LIVE, its first step: a LIVE record is
 * still counted as active and in the quota counts (the predecessor uncounts only after
 * shm_alloc_retire made it DYING, and counts only after publishing it LIVE, or for the
 * quota counts just before), so it ends here as wk_alloc_destroy ends an allocation, in
 * the same order: its session record named after its listener (by the record's slot,
 * which keeps a removed listener's name; not a torn record's, whose fields may be half
 * written), then DYING, then, only if that retire succeeded, uncounted and its lifetime
 * observed (a torn one's too: created_ns is written before the publish, wk_record_fill in
 * worker/turn.c, and by no write bracket after it, so a LIVE record's is whole). Why this
 * order (shm/shm_alloc.h): killed before the retire, we leave a LIVE record still
 * counted, which our replacement ends again; killed after it, a DYING one, which it
 * releases without counting again. Uncounting first would leave a LIVE record already
 * counted off, which the replacement would count off again (and give its quota twice)
 * or adopt one low. A record marked ending (its end recorded, by the predecessor or by
 * us before a kill) gets no second session record; one not marked is marked before its
 * record is pushed, as wk_alloc_destroy does (shm_alloc_end_mark). */
static void adopt_retire(struct shm *shm, unsigned slot, struct shm_counters *ctr, uint32_t idx,
			 struct shm_alloc *rec, enum shm_rec_reason why, uint64_t end_ns, bool torn)
{
	char lname[SHM_LSLOT_NAME_MAX] = "";

	if ((CMM_LOAD_SHARED(rec->state) & ~SHM_ALLOC_ENDING) !=
	    SHM_ALLOC_WORD(SHM_ALLOC_LIVE, slot))
		return;
	if (torn || shm_lslot_name(shm, rec->listener_idx, lname, sizeof(lname), NULL) < 0)
		lname[0] = '\0';
	/* It ends here, unrecorded so far unless marked (the predecessor marks and pushes
	 * its event before the retire that makes a record DYING): its session record. */
	if (shm_alloc_end_mark(shm, slot, idx) == 0)
		(void)shm_records_push(shm, slot, idx, rec, why, end_ns,
				       lname[0] != '\0' ? lname : NULL);
	if (shm_alloc_retire(shm, slot, idx) < 0)
		return;
	shm_ctr_observe_lifetime(ctr, shm_life_seconds(rec->created_ns, end_ns));
	shm_ctr_add(ctr, SHM_CTR_ALLOCS_ENDED, 1);
	shm_ctr_add(ctr, SHM_CTR_ALLOCS_ACTIVE, (uint64_t)-1);
	shm_lctr_add(ctr, rec->listener_idx, SHM_LCTR_ALLOCS_ACTIVE, (uint64_t)-1);
	shm_quota_give_rec(shm, rec);
}

/* Releases record idx of the dead predecessor: ended first if still LIVE (adopt_retire;
 * a DYING one was counted already, by its predecessor or by adopt_end). */
static void adopt_release(struct shm *shm, unsigned slot, struct shm_counters *ctr, uint32_t idx,
			  struct shm_alloc *rec, enum shm_rec_reason why, uint64_t end_ns, bool torn)
{
	adopt_retire(shm, slot, ctr, idx, rec, why, end_ns, torn);
	/* Its ports back to the pool, as the master does (shm/image.c): a booking left
	 * behind outlives its owner, and the search takes such a port last of all. A
	 * record that never wrote its relay (CLAIMED) leaves its booking: harmless, the
	 * pool's checked round finds it. A put clears only idx's own booking. */
	if (rec->relay.family != 0)
		shm_ppool_put(shm, shm_ppool_tag(&rec->relay), rec->relay.port, idx);
	if (rec->relay2.family != 0)
		shm_ppool_put(shm, shm_ppool_tag(&rec->relay2), rec->relay2.port, idx);
	/* And its entries in the relay port index, which a predecessor in the same segment
	 * (a worker's crash) left: its owner takes them out before closing its ports
	 * (wk_alloc_unlink), a record released here never had them open. No-op if absent. */
	if (rec->relay.family != 0)
		shm_relay_del(shm, rec->relay.port, idx);
	if (rec->relay2.family != 0)
		shm_relay_del(shm, rec->relay2.port, idx);
	shm_alloc_release(shm, slot, idx);
}

/* The end reason of a record that fn refused with rc (verdict v), and its end time. */
static enum shm_rec_reason adopt_reason(int rc, enum wk_adopt_verdict v,
					const struct shm_alloc *rec, uint64_t now_ns,
					uint64_t *end_ns)
{
	*end_ns = v == WK_ADOPT_EXPIRED ? rec->expires_ns : now_ns;
	if (rc == -EKEYREVOKED)
		return SHM_REC_REVOKE;
	if (rc == WK_ADOPT_LISTENER_GONE)
		return SHM_REC_LISTENER_REMOVED;
	if (rc == WK_ADOPT_DISCONNECTED)
		return SHM_REC_ADMIN;
	return v == WK_ADOPT_EXPIRED ? SHM_REC_EXPIRY : SHM_REC_WORKER_CRASH;
}

/* Adopts or releases record idx of the predecessor. */
static void adopt_idx(struct shm *shm, unsigned slot, struct shm_counters *ctr, uint64_t now_ns,
		      uint32_t idx, wk_adopt_fn *fn, void *arg, struct wk_adopt_stats *st)
{
	struct shm_alloc *rec;
	enum wk_adopt_verdict v;
	enum shm_rec_reason end_why;
	uint64_t end_ns;
	int rc = -ENOENT;

	if (shm_alloc_get(shm, slot, idx, &rec) < 0)
		return;
	v = wk_adopt_classify(shm, idx, rec, now_ns);
	if (v == WK_ADOPT_ENDED) {
		/* Its end recorded, maybe written: finished, never served again. fn takes out
		 * its kernel entries (wk_adopt_fn); its end time is unknown: now, a little
		 * late by the respawn's time. */
		rc = fn(arg, idx, rec);
		assert(rc < 0 && rc != -EBUSY);
		adopt_release(shm, slot, ctr, idx, rec, SHM_REC_OTHER, now_ns, false);
		st->ended++;
		return;
	}
	/* A TURN-TCP allocation whose connection a live upgrade handed over is offered too:
	 * fn takes it only with that connection (worker/park.c). */
	if (v == WK_ADOPT_TRY ||
	    (v == WK_ADOPT_STREAM && rec->client_transport == SHM_TRANSPORT_TCP &&
	     rec->expires_ns > now_ns))
		rc = fn(arg, idx, rec);
	if (rc == 0) {
		st->adopted++;
		shm_ctr_add(ctr, SHM_CTR_ALLOCS_ADOPTED, 1);
		return;
	}
	if (rc == -EBUSY) {
		st->waiting++;	/* fn keeps it for a later try */
		return;
	}
	end_why = adopt_reason(rc, v, rec, now_ns, &end_ns);
	adopt_release(shm, slot, ctr, idx, rec, end_why, end_ns, v == WK_ADOPT_TORN);
	/* Revoked, its listener removed or disconnected: ended as the revocation sweep, the
	 * reload or the admin's disconnect ends an allocation, not a drop. */
	if (rc == -EKEYREVOKED || rc == WK_ADOPT_LISTENER_GONE || rc == WK_ADOPT_DISCONNECTED) {
		st->revoked += rc == -EKEYREVOKED;
		st->removed += rc == WK_ADOPT_LISTENER_GONE;
		st->disconnected += rc == WK_ADOPT_DISCONNECTED;
		return;
	}
	st->torn += v == WK_ADOPT_TORN;
	st->stream += v == WK_ADOPT_STREAM;
	st->expired += v == WK_ADOPT_EXPIRED;
	st->failed += v == WK_ADOPT_TRY;
	shm_ctr_add(ctr, SHM_CTR_ALLOCS_DROPPED, 1);
}

int wk_adopt_scan(struct shm *shm, unsigned slot, struct shm_counters *ctr, uint64_t now_ns,
		  wk_adopt_fn *fn, void *arg, struct wk_adopt_stats *st)
{
	struct wk_adopt_stats local;
	uint32_t cursor = 0, idx;

	if (!shm || !ctr || !fn)
		return -EINVAL;
	if (!st)
		st = &local;
	memset(st, 0, sizeof(*st));
	while (shm_alloc_next_owned(shm, slot, &cursor, &idx) == 0)
		adopt_idx(shm, slot, ctr, now_ns, idx, fn, arg, st);
	return 0;
}

int wk_adopt_list(struct shm *shm, unsigned slot, struct shm_counters *ctr, uint64_t now_ns,
		  const uint32_t *list, size_t n, wk_adopt_fn *fn, void *arg,
		  struct wk_adopt_stats *st)
{
	struct wk_adopt_stats local;
	struct shm_alloc *rec;

	if (!shm || !ctr || !fn || (!list && n > 0))
		return -EINVAL;
	if (!st)
		st = &local;
	memset(st, 0, sizeof(*st));
	for (size_t i = 0; i < n; i++)
		/* shm_alloc_get() refuses a record another slot owns or a free one */
		if (shm_alloc_get(shm, slot, list[i], &rec) == 0)
			adopt_idx(shm, slot, ctr, now_ns, list[i], fn, arg, st);
	return 0;
}

/* The active UDP listeners and their local addresses, read once per adoption run
 * (a getsockname per listener per record was a tenth of a take-over's worker time). */
struct adopt_ctx {
	struct worker *w;
	size_t n;
	struct wk_listener **ls;
	struct shm_addr *local;
	struct wk_relayho ho;	/* relay sockets a live upgrade handed over */
	uint64_t now_ms;	/* the run's start: the timers' bound (wk_alloc_arm_adopted) */
	int64_t unix_now;	/* the run's start: the revocation check (wk_rec_revoked) */
	bool may_wait;		/* a record whose relay port is still held waits (adopt_wait) */
};

/* handover: read the relay sockets a live upgrade handed over (the first run only: the
 * channel is read once). */
static int adopt_ctx_init(struct adopt_ctx *c, struct worker *w, bool handover)
{
	memset(c, 0, sizeof(*c));
	c->w = w;
	c->now_ms = mono_ms();
	c->unix_now = wk_unix_now();
	if (w->n_ls > 0) {
		c->ls = calloc(w->n_ls, sizeof(*c->ls));
		c->local = calloc(w->n_ls, sizeof(*c->local));
	}
	/* The relay channel last: once read, its sockets are ours to take or close. */
	if ((w->n_ls > 0 && (c->ls == NULL || c->local == NULL)) ||
	    (handover && wk_relayho_open(w, &c->ho) < 0)) {
		free(c->ls);
		free(c->local);
		return -ENOMEM;
	}
	for (size_t i = 0; i < w->n_ls; i++) {
		struct wk_listener *l = w->ls[i];
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);

		if (!l->active || !l->snap_ok || l->proto != WORKER_PROTO_UDP ||
		    getsockname(l->fd, (struct sockaddr *)&ss, &sl) < 0)
			continue;
		c->ls[c->n] = l;
		wk_addr_to_shm((struct sockaddr *)&ss, &c->local[c->n++]);
	}
	return 0;
}

static void adopt_ctx_free(struct adopt_ctx *c)
{
	size_t n = wk_relayho_close(&c->ho);

	if (n > 0)
		log_info("worker", "slot %u: %zu handed-over relay sockets closed (their "
				   "allocations were not adopted)", c->w->slot, n);
	free(c->ls);
	free(c->local);
}

/* The active UDP listener the record's client reached: same local address as when the
 * allocation was made, preferring the same snapshot index. */
static struct wk_listener *wk_adopt_listener(const struct adopt_ctx *c, const struct shm_alloc *rec)
{
	struct wk_listener *found = NULL;

	for (size_t i = 0; i < c->n; i++) {
		if (memcmp(&c->local[i], &rec->server, sizeof(c->local[i])) != 0)
			continue;
		if (c->ls[i]->slot == rec->listener_idx)
			return c->ls[i];
		found = c->ls[i];
	}
	return found;
}

/* wk_adopt_relay with the sockets handed over for relay and relay2 (-1: bind one), at
 * now_ms (a clock read for each of thousands of records cost 2 % of the adoption).
 * may_wait: a port that a socket still holds (-EBUSY) is not logged, the caller keeps the
 * record for a later try. */
static int adopt_relays(struct worker *w, struct wk_alloc *a, uint32_t idx, struct shm_alloc *rec,
			int fd0, int fd1, uint64_t now_ms, bool may_wait)
{
	struct wk_listener *l = a->l;
	int rc;

	rc = wk_alloc_rebind_relay(w, a, &rec->relay, fd0);
	if (fd0 >= 0 && a->relay[0].fd != fd0)
		close(fd0);	/* not taken: ours to close */
	if (rc == 0 && rec->relay2.family != 0)
		rc = wk_alloc_rebind_relay(w, a, &rec->relay2, fd1);
	if (fd1 >= 0 && a->relay[1].fd != fd1)
		close(fd1);
	if (rc < 0) {
		if (!(may_wait && rc == -EBUSY))
			log_warn("worker",
				 "slot %u: allocation %u: cannot rebind its relay port %u: %s",
				 w->slot, idx, rec->relay.port,
				 strerror(rc == -EBUSY ? EADDRINUSE : -rc));
		wk_alloc_forget(w, a);
		return rc;
	}
	/* Served by another listener on the same address (its own was removed): move the
	 * predecessor's gauge contribution to where wk_alloc_destroy will take it back. */
	if (l->slot != rec->listener_idx) {
		shm_lctr_add(w->ctr, rec->listener_idx, SHM_LCTR_ALLOCS_ACTIVE, (uint64_t)-1);
		shm_lctr_add(w->ctr, l->slot, SHM_LCTR_ALLOCS_ACTIVE, 1);
		shm_alloc_begin_write(rec);
		rec->listener_idx = (uint16_t)l->slot;
		shm_alloc_end_write(rec);
	}
	/* DONT-FRAGMENT and the cached Allocate response are not in the record: the first
	 * is lost (packets may fragment), the second only answers retransmissions. */
	a->expires_ms = rec->expires_ns / 1000000u;
	a->published = true;
	wk_alloc_arm_adopted(w, a, now_ms);	/* exact in wk_adopt_tune_cb */
	return 0;
}

int wk_adopt_relay(struct worker *w, struct wk_alloc *a, uint32_t idx, struct shm_alloc *rec,
		   int relay_fd, int relay2_fd)
{
	int rc = adopt_relays(w, a, idx, rec, relay_fd, relay2_fd, mono_ms(), false);

	return rc == -EBUSY ? -EADDRINUSE : rc;
}

/* Record idx (forgotten by adopt_relays) waits for its relay ports: its pool bookings
 * stay its own meanwhile (the one that failed to bind kept it, a relay that bound before
 * it gave its back when forgotten: booked again). Returns 0 or -errno (the caller
 * releases it). */
static int adopt_wait_push(struct worker *w, uint32_t idx, const struct shm_alloc *rec)
{
	uint64_t now_ns = mono_ns();
	int rc = 0;

	if (w->n_adopt_wait == w->cap_adopt_wait) {
		size_t cap = w->cap_adopt_wait ? 2 * w->cap_adopt_wait : 64;
		uint32_t *p = realloc(w->adopt_wait, cap * sizeof(*p));

		if (p == NULL)
			return -ENOMEM;
		w->adopt_wait = p;
		w->cap_adopt_wait = cap;
	}
	if (rec->relay.family != 0)
		rc = shm_ppool_take(w->shm, shm_ppool_tag(&rec->relay), rec->relay.port, idx,
				    now_ns);
	if (rc == 0 && rec->relay2.family != 0)
		rc = shm_ppool_take(w->shm, shm_ppool_tag(&rec->relay2), rec->relay2.port, idx,
				    now_ns);
	if (rc < 0)
		return rc;
	w->adopt_wait[w->n_adopt_wait++] = idx;
	return 0;
}

/* The listener of slot `lslot` (an active one first; a removed one keeps its name and
 * mask until its place is reused), or NULL (also for SHM_LSLOT_NONE). */
static struct wk_listener *adopt_listener_of_slot(struct worker *w, uint32_t lslot)
{
	struct wk_listener *found = NULL;

	/* Listeners without a counter slot all have SHM_LSLOT_NONE: it names none of them. */
	for (size_t i = 0; lslot != SHM_LSLOT_NONE && i < w->n_ls; i++) {
		if (w->ls[i]->slot != lslot)
			continue;
		if (w->ls[i]->active)
			return w->ls[i];
		found = w->ls[i];
	}
	return found;
}

/* Whether record rec's listener left the configuration: its slot is RETIRED (a reload
 * removed its name; shm/shm_lslot.h). */
static bool adopt_listener_removed(const struct worker *w, const struct shm_alloc *rec)
{
	enum shm_lslot_state st;
	char name[SHM_LSLOT_NAME_MAX];

	return shm_lslot_name(w->shm, rec->listener_idx, name, sizeof(name), &st) == 0 &&
	       st == SHM_LSLOT_RETIRED;
}

static int adopt_one_try(struct adopt_ctx *c, uint32_t idx, struct shm_alloc *rec)
{
	struct worker *w = c->w;
	struct wk_listener *l;
	struct wk_alloc *a;
	int rc;

	if (shm_alloc_end_marked(rec))
		return -ECANCELED;	/* ended by its predecessor: wk_adopt_one ends it */
	/* A revoked user's record is not served again: the revocation sweep may have run
	 * before it was adopted (a first heartbeat before the first adoption, a record that
	 * waited for its relay port), and checking here closes the heartbeat's second too. A
	 * revocation after this check changes the list's sequence word, which the next sweep
	 * sees. */
	if (wk_rec_revoked(w, rec, c->unix_now))
		return -EKEYREVOKED;
	for (unsigned i = 0; i < w->n_disc_pending; i++)
		if (wk_disconnect_why(w, rec, idx, &w->disc_pending[i]) != NULL)
			return WK_ADOPT_DISCONNECTED;
	if (rec->client_transport == SHM_TRANSPORT_TCP)
		return wk_park_adopt(w, idx, rec);
	l = wk_adopt_listener(c, rec);
	if (!l)
		return adopt_listener_removed(w, rec) ? WK_ADOPT_LISTENER_GONE : -ENOENT;
	rc = wk_alloc_attach(w, l, idx, rec, &a);
	if (rc < 0)
		return rc;
	rc = adopt_relays(w, a, idx, rec, wk_relayho_take(&c->ho, idx, 0),
			  wk_relayho_take(&c->ho, idx, 1), c->now_ms, c->may_wait);
	if (rc != -EBUSY || !c->may_wait)
		return rc == -EBUSY ? -EADDRINUSE : rc;	/* released by the caller */
	rc = adopt_wait_push(w, idx, rec);
	if (rc == 0)
		return -EBUSY;
	log_warn("worker", "slot %u: allocation %u: cannot wait for its relay port %u: %s", w->slot,
		 idx, rec->relay.port, strerror(-rc));
	return -EADDRINUSE;
}

/* Ends record idx, which this worker owns without a private half, as wk_alloc_destroy
 * ends an allocation: the kernel's entries of its channels while it is LIVE, then its
 * session record, counters and retire (adopt_retire), then its short circuits' entries,
 * after the retire (a partner's owner that writes the pair meanwhile sees it DYING;
 * worker/fastpath.c). The caller releases it (adopt_release). l: its listener, or NULL. */
static void adopt_end(struct worker *w, struct wk_listener *l, uint32_t idx,
		      struct shm_alloc *rec, enum shm_rec_reason why, uint64_t end_ns)
{
	wk_offload_rec_drop(w, l, idx, rec);
	adopt_retire(w->shm, w->slot, w->ctr, idx, rec, why, end_ns, false);
	wk_offload_rec_forget(w, l, idx, rec);
}

static int wk_adopt_one(void *arg, uint32_t idx, struct shm_alloc *rec)
{
	struct adopt_ctx *c = arg;
	int rc = adopt_one_try(c, idx, rec);
	struct wk_listener *l;
	enum shm_rec_reason why;
	uint64_t end_ns;

	if (rc == 0 || rc == -EBUSY)
		return rc;
	/* Released by the caller: the kernel's entries of its channels (the predecessor's,
	 * kept over the take-over while the record was LIVE) go first, as at the end of an
	 * allocation, not at the master's next garbage collection. Offered only untorn and
	 * unexpired, or marked ending (wk_adopt_classify): its end recorded, adopt_end records
	 * nothing more. */
	why = adopt_reason(rc, WK_ADOPT_TRY, rec, mono_ns(), &end_ns);
	l = wk_adopt_listener(c, rec);
	adopt_end(c->w, l != NULL ? l : adopt_listener_of_slot(c->w, rec->listener_idx), idx, rec,
		  why, end_ns);
	return rc;
}

/* The process's CPU time in microseconds: since its fork for a worker (a forked process
 * starts at zero), its start-up included. */
static uint64_t wk_cpu_us(void)
{
	struct timespec cpu;

	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) < 0)
		return 0;
	return (uint64_t)cpu.tv_sec * 1000000u + (uint64_t)cpu.tv_nsec / 1000u;
}

/* The process's minor page faults so far (since its fork for a worker). */
static uint64_t wk_minflt(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_minflt : 0;
}

/* A check watcher started by the adoption runs at the next iteration, after libev's
 * fd_reify (an epoll_ctl per relay socket watched) and its poll: from here the worker
 * polls the relay sockets it adopted. */
static void wk_adopt_cpu_cb(struct ev_loop *loop, ev_check *c, int revents)
{
	struct worker *w = c->data;

	(void)revents;
	ev_check_stop(loop, c);
	log_info("worker",
		 "slot %u: %u adopted in %llu us of CPU since the fork, %llu us once its relay "
		 "sockets are watched (minor page faults: %llu, %llu)",
		 w->slot, w->adopt_n, (unsigned long long)w->adopt_cpu_us,
		 (unsigned long long)wk_cpu_us(), (unsigned long long)w->adopt_minflt,
		 (unsigned long long)wk_minflt());
}

/* Relay sockets tuned per idle callback: small enough that a worker answers its clients
 * between two batches. */
#define WK_TUNE_BATCH 256u

/* After an adoption: the handed-over relay sockets' check (wk_relay_verify), the
 * adopted ones' buffer sizes and DF mode (what wk_relay_socket sets at once for a new
 * allocation) and the allocations' timers at their exact deadlines (wk_alloc_arm_adopted
 * armed them at a bound), a batch per loop iteration with no pending event, so that every
 * worker of a take-over relays again before any spends time on what relaying does not need
 * (the check's two system calls of the four a handed-over socket cost; three setsockopt of
 * the six a bound one costs; the scan of a record's 64 expiries). Until then a socket
 * relays with the kernel's default buffers and DF mode, a handed-over one unchecked (see
 * wk_relay_verify for what a wrong one can do meanwhile), and an allocation's timer fires
 * at its bound at the latest (wk_alloc_arm_adopted). */
static void wk_adopt_tune_cb(struct ev_loop *loop, ev_idle *iw, int revents)
{
	struct worker *w = iw->data;
	uint32_t cap = shm_alloc_capacity(w->shm), done = 0;

	(void)revents;
	for (; w->tune_next < cap && done < WK_TUNE_BATCH; w->tune_next++) {
		struct wk_alloc *a = w->by_idx[w->tune_next];

		if (a != NULL && wk_alloc_rearm_pending(w, a))
			done++;
		for (int i = 0; a != NULL && i < 2; i++) {
			struct wk_relay *r = &a->relay[i];

			if (r->fd < 0 || !(r->untuned || r->unchecked))
				continue;
			done++;
			if (!wk_relay_verify(w, a, r))
				break;	/* a ended */
			if (!r->untuned)
				continue;
			r->df_fast = wk_df_fast(r->fd, r->family);
			wk_sockbuf_set(r->fd, WK_SOCKBUF_RELAY);
			r->untuned = false;
		}
	}
	if (w->tune_next >= cap)
		ev_idle_stop(loop, iw);
}

/* After a pass that adopted records: the idle watcher's pass over them. */
static void adopt_tune_start(struct worker *w)
{
	/* From the first record again when a pass is under way: what this run adopted below
	 * its cursor is checked too. */
	w->tune_next = 0;
	if (!ev_is_active(&w->tune)) {
		ev_idle_init(&w->tune, wk_adopt_tune_cb);
		w->tune.data = w;
		ev_idle_start(w->loop, &w->tune);
	}
}

/* Only wakes the loop: the records that wait are tried from wk_check_cb, where the
 * snapshot is current (wk_adopt_wait_due). */
static void adopt_wait_wake_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)t;
	(void)revents;
}

/* Wakes the loop in ms. libev counts from its time of the iteration's start, which may be
 * earlier than our clock's reading: wk_adopt_wait_due arms it again for what is left when
 * it fires early. */
static void adopt_wait_wake_in(struct worker *w, uint64_t ms)
{
	ev_timer_stop(w->loop, &w->adopt_wait_w);
	ev_timer_init(&w->adopt_wait_w, adopt_wait_wake_cb, (double)ms / 1000.0, 0.);
	ev_timer_start(w->loop, &w->adopt_wait_w);
}

/* The next try of the records that wait, step_ms from now. */
static void adopt_wait_arm(struct worker *w, unsigned step_ms)
{
	w->adopt_wait_step_ms = step_ms;
	w->adopt_wait_next_ms = mono_ms() + step_ms;
	adopt_wait_wake_in(w, step_ms);
}

/* Nothing waits any more: the summary of the tries. */
static void adopt_wait_done(struct worker *w, uint64_t now_ms)
{
	ev_timer_stop(w->loop, &w->adopt_wait_w);
	log_warn("worker",
		 "slot %u: %u allocations adopted once their relay ports came free, %u "
		 "released (not rebindable, expired or torn meanwhile), %u ended by "
		 "revocation, disconnect or listener removal meanwhile, after %llu ms",
		 w->slot, w->adopt_waited, w->adopt_wait_lost, w->adopt_wait_ended,
		 (unsigned long long)(now_ms - w->adopt_wait_since_ms));
}

void wk_adopt_wait_end(struct worker *w, wk_adopt_wait_why_fn *fn, const void *arg)
{
	size_t kept = 0, n = w->n_adopt_wait;
	unsigned ended = 0;

	for (size_t i = 0; i < n; i++) {
		uint32_t idx = w->adopt_wait[i];
		struct shm_alloc *rec;
		const char *why;
		uint64_t end_ns;

		if (shm_alloc_get(w->shm, w->slot, idx, &rec) < 0)
			continue;	/* not ours any more: nothing to try */
		why = fn(w, rec, idx, arg);
		if (why == NULL) {
			w->adopt_wait[kept++] = idx;
			continue;
		}
		log_debug("turn", "allocation %u ended while waiting for its relay port: %s", idx,
			  why);
		end_ns = mono_ns();
		adopt_end(w, adopt_listener_of_slot(w, rec->listener_idx), idx, rec,
			  shm_rec_reason_of(why), end_ns);
		adopt_release(w->shm, w->slot, w->ctr, idx, rec, shm_rec_reason_of(why), end_ns,
			      false);
		ended++;
	}
	w->n_adopt_wait = kept;
	w->adopt_wait_ended += ended;
	if (kept == 0 && n > 0)
		adopt_wait_done(w, mono_ms());
}

void wk_adopt_wait_abandon(struct worker *w)
{
	ev_timer_stop(w->loop, &w->adopt_wait_w);
	free(w->adopt_wait);
	w->adopt_wait = NULL;
	w->n_adopt_wait = w->cap_adopt_wait = 0;
}

void wk_adopt_wait_due(struct worker *w)
{
	struct wk_adopt_stats st;
	struct adopt_ctx c;
	uint32_t *list = w->adopt_wait;
	size_t n = w->n_adopt_wait;
	uint64_t now_ms;
	unsigned step;

	if (n == 0)	/* every loop iteration comes here: no clock read for an empty list */
		return;
	now_ms = mono_ms();
	if (now_ms < w->adopt_wait_next_ms) {
		if (!ev_is_active(&w->adopt_wait_w))
			adopt_wait_wake_in(w, w->adopt_wait_next_ms - now_ms);
		return;
	}
	if (adopt_ctx_init(&c, w, false) < 0) {
		adopt_wait_arm(w, w->adopt_wait_step_ms);
		return;
	}
	w->adopt_wait = NULL;
	w->n_adopt_wait = w->cap_adopt_wait = 0;
	/* The last try releases what still cannot bind, as the first pass did before. */
	c.may_wait = now_ms < w->adopt_wait_until_ms;
	w->adopting = true;
	(void)wk_adopt_list(w->shm, w->slot, w->ctr, mono_ns(), list, n, wk_adopt_one, &c, &st);
	adopt_ctx_free(&c);
	w->adopting = false;
	free(list);
	if (st.adopted > 0)
		adopt_tune_start(w);
	w->adopt_waited += st.adopted;
	w->adopt_wait_ended += st.revoked + st.removed + st.disconnected;
	w->adopt_wait_lost += st.torn + st.stream + st.expired + st.failed;
	if (w->n_adopt_wait > 0) {
		step = 2 * w->adopt_wait_step_ms;
		adopt_wait_arm(w,
			       step < WK_ADOPT_WAIT_STEP_MAX_MS ? step : WK_ADOPT_WAIT_STEP_MAX_MS);
		return;
	}
	adopt_wait_done(w, now_ms);
}

void wk_adopt_disc_keep(struct worker *w, const struct ipc_disconnect *d)
{
	if (w->adopted || d->by == IPC_DISC_REVOKED)
		return;
	/* An operator who sees the allocations still listed runs it again: a repeat takes
	 * no second entry (the frames are zeroed past what they carry, ipc.c). */
	for (unsigned i = 0; i < w->n_disc_pending; i++)
		if (memcmp(&w->disc_pending[i], d, sizeof(*d)) == 0)
			return;
	if (w->n_disc_pending >= WK_DISC_PENDING_MAX) {
		log_warn("worker", "slot %u: more than %u disconnects before the adoption: this "
			 "one's allocations are adopted", w->slot, WK_DISC_PENDING_MAX);
		return;
	}
	w->disc_pending[w->n_disc_pending++] = *d;
}

void wk_adopt_due(struct worker *w)
{
	if (!w->adopted && w->n_ls > 0)
		wk_adopt_run(w);
	else
		wk_adopt_wait_due(w);
}

void wk_adopt_run(struct worker *w)
{
	struct wk_adopt_stats st;
	struct adopt_ctx c;
	int rc;

	memset(&st, 0, sizeof(st));
	if (adopt_ctx_init(&c, w, true) < 0) {
		/* Tried again at the next iteration (wk_adopt_due); said once. */
		if (!w->adopt_nomem)
			log_error("worker", "slot %u: no memory for the adoption of the "
				  "predecessor's allocations: tried again at each iteration",
				  w->slot);
		w->adopt_nomem = true;
		return;
	}
	w->adopted = true;
	w->adopting = true;
	c.may_wait = true;
	rc = w->h->adopt != NULL
		     ? wk_adopt_list(w->shm, w->slot, w->ctr, mono_ns(), w->h->adopt, w->h->n_adopt,
				     wk_adopt_one, &c, &st)
		     : wk_adopt_scan(w->shm, w->slot, w->ctr, mono_ns(), wk_adopt_one, &c, &st);
	adopt_ctx_free(&c);
	w->adopting = false;
	w->n_disc_pending = 0;	/* what they named is ended or was not ours */
	if (st.adopted > 0)
		adopt_tune_start(w);
	if (w->n_adopt_wait > 0) {
		w->adopt_wait_since_ms = mono_ms();
		w->adopt_wait_until_ms = w->adopt_wait_since_ms + WK_ADOPT_WAIT_MS;
		adopt_wait_arm(w, WK_ADOPT_WAIT_STEP_MIN_MS);
		log_warn("worker",
			 "slot %u: %zu allocations wait for their relay ports, still bound (the "
			 "sockets of a killed predecessor that the kernel is still releasing, or "
			 "another program's): tried again for up to %u ms",
			 w->slot, w->n_adopt_wait, WK_ADOPT_WAIT_MS);
	}
	if (rc < 0)
		return;
	wk_park_rest(w);
	/* A take-over that kept every call is routine (INFO); one that lost calls (torn
	 * records, TCP allocations whose connections died, relay ports that could not be bound
	 * again) is what an operator alerting on WARN wants to see. */
	if (st.adopted || st.waiting || st.revoked || st.removed || st.disconnected ||
	    st.ended || st.torn || st.stream || st.expired || st.failed)
		log_msg("worker", st.torn || st.stream || st.failed ? LOG_LVL_WARN : LOG_LVL_INFO,
			"slot %u: predecessor's allocations: %u adopted, %u wait, %u ended "
			"(credential revoked), %u ended (listener removed), %u ended "
			"(disconnected by admin), %u ended before (end recorded), dropped %u "
			"torn, %u TCP, %u expired, %u not rebindable",
			w->slot, st.adopted, st.waiting, st.revoked, st.removed, st.disconnected,
			st.ended, st.torn, st.stream, st.expired, st.failed);
	/* What the adoption cost the worker (bench/: the CPU per adopted record, which the
	 * wall time of a take-over on a loaded machine hides), logged at the next iteration,
	 * after libev's epoll_ctl for each relay socket the adoption started watching. */
	if (st.adopted > 0 && !ev_is_active(&w->adopt_cpu)) {
		w->adopt_n = st.adopted;
		w->adopt_cpu_us = wk_cpu_us();
		w->adopt_minflt = wk_minflt();
		ev_check_init(&w->adopt_cpu, wk_adopt_cpu_cb);
		w->adopt_cpu.data = w;
		ev_check_start(w->loop, &w->adopt_cpu);
	}
}
