/* Worker: an old worker that lingers after a live upgrade, serving only its TURN-TLS and
 * TURN-DTLS calls until they end or the linger limit passes (limits.upgrade_linger).
 *
 * Why: a TLS session's keys and record sequence numbers live in OpenSSL's state, which
 * cannot be exported, and this design does not need kernel TLS; so the connection stays
 * with the process that holds the session, as nginx lets its old workers finish. What it
 * keeps: each authenticated TLS connection or DTLS association that carries a UDP-relayed
 * allocation, with that allocation's relay sockets; a DTLS one only with a forwarding
 * socket open (worker/dtlslinger.h: the new workers read the listener and forward its
 * datagrams), and with its TURN-DTLS listener's socket, kept open to send from. Everything
 * else is given up exactly as a stopping worker gives it up (the other allocations are
 * forgotten, their records stay LIVE for the new workers; its other listeners,
 * associations and connections close) before the master hears that we linger, so the
 * new workers find every port and record they take over free. The lingering allocations'
 * records are not taken over (the take-over ends TLS and DTLS records: shm/image.c), so
 * no new worker serves them twice; their relay ports are bound here without SO_REUSEPORT,
 * so a new allocation that draws one moves on to another port.
 *
 * The new master is not our parent and may be another version: what it learns of us
 * goes through a small text file beside the state file, NAME.state.linger.PID (format in
 * master/linger.h), rewritten when the count changes and marked done when we exit. */
#include "config.h"

#include "worker/lifecycle.h"
#include "worker/stream.h"
#include "worker/transport.h"
#include "worker/wk.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "common/ipc.h"
#include "common/log.h"
#include "worker/dtlslinger.h"
#include "worker/recflush.h"

#define WK_LINGER_TICK_S 0.2

/* A DTLS association lingers only with the channel its datagrams come through. */
static bool wk_linger_keeps(const struct wk_tconn *c)
{
	return c->ssl && (!c->dgram || wk_dl_ready(c->l->w)) && c->hs_done && !c->dead &&
	       c->authed && c->fd >= 0 && c->alloc != NULL && !c->alloc->tcp && !c->bind_to &&
	       !c->handoff_slot;
}

/* The calls we keep; *dtls (may be NULL): those over DTLS. */
static unsigned wk_linger_count(const struct worker *w, unsigned *dtls)
{
	unsigned n = 0, d = 0;

	for (size_t i = 0; i < w->n_ls; i++)
		for (const struct wk_tconn *c = w->ls[i]->conns; c; c = c->next) {
			n += wk_linger_keeps(c);
			d += wk_linger_keeps(c) && c->dgram;
		}
	if (dtls != NULL)
		*dtls = d;
	return n;
}

/* Whether l's socket stays open: it sends for our DTLS associations on it. */
static bool wk_linger_sends(const struct wk_listener *l)
{
	for (const struct wk_tconn *c = l->conns; c; c = c->next)
		if (c->dgram)
			return true;
	return false;
}

/* Writes the status file (tmp + rename: a reader sees the old or the new text). */
static void wk_linger_write(struct worker *w, unsigned sessions, unsigned dtls, bool done)
{
	char tmp[sizeof(w->linger_path) + 8];
	FILE *f;

	if (w->linger_path[0] == '\0')
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", w->linger_path);
	f = fopen(tmp, "we");
	if (f == NULL)
		return;
	fprintf(f,
		"turngate-linger 1 pid=%d slot=%u sessions=%u ended_limit=%u deadline=%lld "
		"done=%d dtls=%u\n",
		(int)getpid(), w->slot, sessions, w->linger_ended_limit,
		(long long)w->linger_deadline, done ? 1 : 0, dtls);
	if (!done)
		wk_dl_write_routes(w, f, wk_linger_keeps);
	if (fclose(f) != 0 || rename(tmp, w->linger_path) < 0)
		unlink(tmp);
	w->linger_sessions = sessions;
}

static void wk_linger_end_all(struct worker *w)
{
	for (size_t i = 0; i < w->n_ls; i++)
		while (w->ls[i]->conns)
			wk_tconn_close(w, w->ls[i]->conns);
}

static void wk_linger_tick(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = wk_checked(t->data);
	unsigned dtls, n = wk_linger_count(w, &dtls);

	(void)revents;
	if (n > 0 && time(NULL) >= w->linger_deadline) {
		log_info("worker",
			 "slot %u (lingering): the linger limit passed: %u TLS/DTLS calls end",
			 w->slot, n);
		w->linger_ended_limit += n;
		wk_linger_end_all(w);
		n = dtls = 0;
	}
	if (n != w->linger_sessions)
		wk_linger_write(w, n, dtls, false);
	if (n == 0)
		ev_break(loop, EVBREAK_ALL);
}

/* Gives up all but the lingering connections, as wk_teardown would. */
static void wk_linger_shed(struct worker *w)
{
	struct wk_alloc *a, *next;

	w->lingering = true;
	wk_recflush_linger(w);	/* no master writes our events from here */
	wk_adopt_wait_abandon(w);
	for (a = LIST_FIRST(&w->allocs); a; a = next) {
		next = LIST_NEXT(a, link);
		if (a->conn != NULL && wk_linger_keeps(a->conn))
			continue;
		if (a->conn != NULL)
			a->conn->alloc = NULL;
		wk_alloc_forget(w, a);
	}
	wk_tlsb_close_all(w);
	for (size_t i = 0; i < w->n_ls; i++) {
		struct wk_listener *l = w->ls[i];
		struct wk_tconn *c, *cn;

		for (c = l->conns; c; c = cn) {
			cn = c->next;
			if (!wk_linger_keeps(c))
				wk_tconn_close(w, c);
		}
		/* No more accepts or datagrams: the new workers read these sockets now. */
		ev_io_stop(w->loop, &l->io);
		if (l->fd >= 0 && l->proto == WORKER_PROTO_UDP && !wk_linger_sends(l)) {
			close(l->fd);
			l->fd = -1;
		}
		if (l->fd >= 0 && l->proto == WORKER_PROTO_TCP) {
			close(l->fd);
			l->fd = -1;
		}
	}
	/* The master that started us exits: neither its channel nor its death ends us, and
	 * the instance lock (a copy of its descriptor) is the new master's to take. */
	ev_io_stop(w->loop, &w->ctl_io);
	ev_io_stop(w->loop, &w->ho_io);
	shm_lock_set(w->shm, -1);
	(void)prctl(PR_SET_PDEATHSIG, 0);
}

bool wk_linger_begin(struct worker *w)
{
	unsigned n = 0, dtls = 0;
	uint32_t count;
	int rc;

	if (w->linger_limit_s == 0)
		return false;
	if (w->h->state_path != NULL)
		snprintf(w->linger_path, sizeof(w->linger_path), "%s.linger.%d", w->h->state_path,
			 (int)getpid());
	if (w->n_dtls > 0 && (rc = wk_dl_listen(w)) < 0)
		log_warn("worker", "slot %u: no channel for DTLS calls to linger (%s): they end",
			 w->slot, strerror(-rc));
	if ((n = wk_linger_count(w, &dtls)) == 0) {
		wk_dl_stop(w);
		return false;
	}
	wk_linger_shed(w);
	w->linger_deadline = (int64_t)time(NULL) + w->linger_limit_s;
	wk_linger_write(w, n, dtls, false);
	/* The FDUNSTOREs of the connections just shed go before IPC_LINGER, as a worker's
	 * frames go before IPC_HANDED_OVER: a direct send would overtake those that wait. */
	wk_ctlq_stop(w);
	/* The master counts us as stopped from here: its upgrade goes on without us. */
	count = n;
	rc = ipc_send(w->h->ctl_fd, IPC_LINGER, &count, sizeof(count), -1);
	if (rc < 0) {
		/* It would wait for our exit: end them rather than hold the upgrade. */
		log_warn("worker", "slot %u: cannot tell the master we linger: %s", w->slot,
			 strerror(-rc));
		wk_linger_end_all(w);
		wk_linger_write(w, 0, 0, true);
		wk_dl_stop(w);
		return false;
	}
	log_info("worker", "slot %u lingers (pid %d) with %u TLS/DTLS calls (%u DTLS), for at most "
			   "%u s",
		 w->slot, (int)getpid(), n, dtls, w->linger_limit_s);
	ev_timer_init(&w->linger_tmo, wk_linger_tick, WK_LINGER_TICK_S, WK_LINGER_TICK_S);
	w->linger_tmo.data = w;
	ev_timer_start(w->loop, &w->linger_tmo);
	return true;
}

void wk_linger_end(struct worker *w)
{
	unsigned n = wk_linger_count(w, NULL);

	ev_timer_stop(w->loop, &w->linger_tmo);
	if (n > 0)
		log_info("worker", "slot %u (lingering): stopped: %u TLS/DTLS calls end", w->slot,
			 n);
	wk_linger_end_all(w);
	wk_dl_stop(w);
	wk_linger_write(w, 0, 0, true);
	log_info("worker", "slot %u (lingering) exits: %u calls ended by the linger limit",
		 w->slot, w->linger_ended_limit);
}
