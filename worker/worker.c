/* Worker process: libev loop, snapshot tracking (QSBR), listeners and the control channel. */
#include "config.h"

#include "worker/authfail.h"
#include "worker/dtlslinger.h"
#include "worker/unauth.h"
#include "worker/lifecycle.h"
#include "worker/recflush.h"
#include "worker/relay.h"
#include "worker/stream.h"
#include "worker/transport.h"
#include "worker/turn.h"
#include "worker/wk.h"
#include "worker/relayho.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "common/ipc.h"
#include "common/ipcq_ev.h"
#include "common/log.h"
#include "shm/shm_lslot.h"
#include "shm/shm_quota.h"
#include "shm/shm_revoke.h"

static void wk_pem_digest(const struct snap_listener *sl, uint8_t out[32])
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned int n = 0;

	memset(out, 0, 32);
	if (md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 &&
	    EVP_DigestUpdate(md, sl->cert_pem, sl->cert_pem_len) == 1 &&
	    EVP_DigestUpdate(md, sl->key_pem, sl->key_pem_len) == 1)
		EVP_DigestFinal_ex(md, out, &n);
	EVP_MD_CTX_free(md);
}

/* TLS/DTLS listener: (re)builds its contexts when the certificate or key changed. A
 * rotation only changes what new handshakes get: established sessions hold their own
 * reference to the old context. A context that cannot be built leaves the previous one
 * serving (the master validated the PEM, so this is rare). Returns -EINVAL when the
 * listener has nothing to serve with. */
static int wk_listener_secure(struct worker *w, struct wk_listener *l)
{
	bool dtls = l->sl.protocol == CONF_PROTO_TURN_DTLS;
	uint8_t dg[32];
	SSL_CTX *ctx;

	if (!l->secure_known) {
		l->secure_known = l->secure = true;
		if (dtls && wk_dtls_start(w, l) < 0)
			return -EINVAL;
	}
	wk_pem_digest(&l->sl, dg);
	if (l->tls_ctx && memcmp(dg, l->tls_digest, sizeof(dg)) == 0)
		return 0;
	if (wk_tls_ctx_build(w, &l->sl, dtls, &ctx) < 0) {
		log_error("worker", "listener %s: certificate or key unusable; %s", l->name,
			  l->tls_ctx ? "the previous one stays in use" : "not served");
		return l->tls_ctx ? 0 : -EINVAL;
	}
	if (l->tls_ctx)
		log_info("worker", "listener %s: new certificate for new handshakes", l->name);
	SSL_CTX_free(l->tls_ctx);
	l->tls_ctx = ctx;
	memcpy(l->tls_digest, dg, sizeof(dg));
	SSL_free(l->dtls_listen);
	l->dtls_listen = NULL;
	wk_tcp_resume(w);
	return 0;
}

/* Re-resolves one listener by name in the new snapshot (indexes may change across
 * reloads) and refreshes its relay address, port pool and dual-stack address. */
static void wk_listener_apply(struct worker *w, struct wk_listener *l)
{
	bool secure, dgram;

	l->snap_ok = snap_listener_find(w->snap, l->name, &l->snap_idx) == 0 &&
		     snap_listener_get(w->snap, l->snap_idx, &l->sl) == 0;
	/* Kept while the listener is gone from the snapshot: its last connections still
	 * count where they always did. */
	if (!l->snap_ok)
		return;
	l->slot = l->sl.slot;
	secure = l->sl.protocol == CONF_PROTO_TURN_TLS || l->sl.protocol == CONF_PROTO_TURN_DTLS;
	dgram = l->sl.protocol == CONF_PROTO_TURN_UDP || l->sl.protocol == CONF_PROTO_TURN_DTLS;
	if (dgram != (l->proto == WORKER_PROTO_UDP) || (l->secure_known && secure != l->secure)) {
		/* Never serve a TLS/DTLS listener's socket in the clear, nor the other way
		 * round: a protocol change comes with a new socket from the master. */
		log_error("worker", "listener %s: socket does not match protocol %s; not served",
			  l->name, conf_proto_name(l->sl.protocol));
		l->snap_ok = false;
		return;
	}
	if (secure && wk_listener_secure(w, l) < 0) {
		l->snap_ok = false;
		return;
	}
	memcpy(&l->relay_addr, &l->sl.relay_addr, sizeof(l->relay_addr));
	memcpy(&l->mask_addr, &l->sl.relay_mask, sizeof(l->mask_addr));
	if (l->sl.relay_port_min != l->pool_min || l->sl.relay_port_max != l->pool_max) {
		/* A changed range only affects new allocations: live ones keep their
		 * ports, booked in the shared pool until they end. */
		portpool_destroy(&l->pool);
		if (portpool_init(&l->pool, l->sl.relay_port_min, l->sl.relay_port_max, w->slot,
				  w->h->slot_count) < 0)
			log_error("worker", "listener %s: relay port range %u-%u is empty",
				  l->name, l->sl.relay_port_min, l->sl.relay_port_max);
		l->pool_min = l->sl.relay_port_min;
		l->pool_max = l->sl.relay_port_max;
	}
	/* "Local" = bindable: then relay sockets send from the announced IP. */
	l->relay_local = wk_addr_bindable(&l->relay_addr);
	wk_relay2_find(l);
}

/* limits.wake_coalesce_*: the controller's parameters, and the timer slack to go with the
 * interval (wake.h). */
static void wk_wake_apply(struct worker *w, const struct snap_limits *lim)
{
	uint32_t before = w->wake.interval_us;

	wk_wake_configure(&w->wake, lim->wake_coalesce_us, lim->wake_coalesce_rate);
	if (w->wake.interval_us == before)
		return;
	(void)prctl(PR_SET_TIMERSLACK, wk_wake_slack_ns(w->wake.interval_us));
}

/* Copies the values the hot path needs out of a new snapshot and re-resolves every
 * listener by name (indexes may change across reloads). */
static void wk_snap_apply(struct worker *w)
{
	const struct snap_limits *lim = snap_limits(w->snap);
	struct wk_hot *h = &w->hot;
	const char *spec = snap_log_spec(w->snap);

	h->max_perms = lim->max_permissions < SHM_ALLOC_MAX_PERMS ? lim->max_permissions
								  : SHM_ALLOC_MAX_PERMS;
	h->max_chans = lim->max_channels < SHM_ALLOC_MAX_CHANS ? lim->max_channels
							       : SHM_ALLOC_MAX_CHANS;
	h->alloc_lifetime = lim->allocation_lifetime;
	h->max_alloc_lifetime = lim->max_allocation_lifetime;
	h->perm_lifetime = lim->permission_lifetime;
	h->chan_lifetime = lim->channel_lifetime;
	h->nonce_lifetime = lim->nonce_lifetime;
	h->user_quota = lim->user_quota;
	h->total_quota = lim->total_quota;
	h->bw = (struct shm_bw_limits){ .alloc_bps = lim->allocation_bps,
					.user_bps = lim->user_bps,
					.burst_ns = (uint64_t)lim->bandwidth_burst_ms * 1000000 };
	h->tcp_conns = lim->tcp_connections;
	h->tcp_pending = lim->tcp_pending_connects;
	h->tcp_buf = lim->tcp_buffer;
	h->tcp_connect_timeout = lim->tcp_connect_timeout;
	h->have_alt = snap_alternate_server(w->snap, &h->alt) == 0;
	wk_unauth_configure(w, lim);
	wk_authfail_configure(w, lim);
	wk_budget_configure(w, lim);
	wk_wake_apply(w, lim);
	if (spec && *spec && log_set_spec(spec) < 0)
		log_warn("worker", "snapshot log spec \"%s\" rejected", spec);
	log_set_format(snap_log_format(w->snap) == CONF_LOG_JSON ? LOG_FMT_JSON : LOG_FMT_TEXT);

	for (size_t i = 0; i < w->n_ls; i++)
		if (w->ls[i]->active)
			wk_listener_apply(w, w->ls[i]);
	wk_sc_refresh(w);
	wk_sib_refresh(w);
	wk_self_refresh(w);
	/* Routes, limits or listener indices may have changed: the kernel's entries follow,
	 * and TCP peer connections whose peer the routes no longer admit end. */
	wk_offload_sync_all(w);
	wk_tcpr_recheck_all(w);
}

/* ev_check at EV_MAXPRI: runs after the poll, before any I/O callback. */
static void wk_check_cb(struct ev_loop *loop, ev_check *ck, int revents)
{
	struct worker *w = wk_checked(ck->data);
	const void *blob;
	size_t len;
	uint64_t gen;

	if (w->wake.interval_us)
		wk_wake_woke(&w->wake, mono_ns());
	if (w->wake_on)	/* what libev was told, whatever the controller thinks now */
		shm_ctr_add(w->ctr, SHM_CTR_WAKES_COALESCED, 1);
	shm_qsbr_online(w->shm, w->slot);
	if (shm_snap_current(w->shm, &blob, &len, &gen) < 0) {
		w->snap = NULL;
		return;
	}
	if (w->snap_seen && gen == w->snap_gen && blob == w->snap_blob) {
		/* Same snapshot as last iteration: reuse the validated handle (it aliases
		 * the blob, which stays valid while it is current). */
		w->snap = w->snap_cached;
		wk_adopt_due(w);
		return;
	}
	if (snap_open(blob, len, &w->snap) < 0) {
		/* Retried every iteration until the master publishes another; say it once. */
		if (gen != w->snap_bad_gen)
			log_error("worker", "snapshot generation %llu rejected",
				  (unsigned long long)gen);
		w->snap_bad_gen = gen;
		w->snap = NULL;
		w->snap_seen = false;
		return;
	}
	w->snap_cached = w->snap;
	w->snap_blob = blob;
	w->snap_gen = gen;
	w->snap_seen = true;
	wk_snap_apply(w);
	log_debug("worker", "slot %u now on snapshot generation %llu", w->slot,
		  (unsigned long long)gen);
	/* A dead predecessor's allocations need resolved listeners (relay addresses, port
	 * pools), and must be indexed before any client packet is handled: we run before
	 * every I/O callback of this first iteration. A worker that has no listener yet (a
	 * start on a config discovery service's bootstrap config: the listeners come with the
	 * first real config) waits for them, else it would release every record. */
	wk_adopt_due(w);
}

static void wk_prepare_cb(struct ev_loop *loop, ev_prepare *pr, int revents)
{
	struct worker *w = wk_checked(pr->data);

	/* Timers run from here too so expiry never needs the snapshot. */
	if (w->wheel.armed && !ev_is_active(&w->tick)) {
		ev_timer_set(&w->tick, WHEEL_TICK_MS / 1000.0, WHEEL_TICK_MS / 1000.0);
		ev_timer_start(loop, &w->tick);
	}
	if (w->wake.on != w->wake_on) {
		/* libev then sleeps this long, less what the callbacks took, before it polls */
		w->wake_on = w->wake.on;
		ev_set_io_collect_interval(loop, wk_wake_interval(&w->wake));
	}
	wk_recflush_prepare(w);
	w->snap = NULL;
	shm_qsbr_offline(w->shm, w->slot);
}

static void wk_tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = wk_checked(t->data);

	wheel_advance(&w->wheel, mono_ms(), w);
	if (!w->wheel.armed)
		ev_timer_stop(loop, t);
}

/* wk_adopt_wait_end's test for the revocation sweep. */
static const char *wk_revoked_why(struct worker *w, const struct shm_alloc *rec, uint32_t idx,
				  const void *arg)
{
	(void)idx;
	(void)arg;
	return wk_rec_revoked(w, rec, wk_unix_now()) ? "credential revoked" : NULL;
}

static void wk_hb_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	wk_heartbeat(wk_checked(t->data));
}

void wk_heartbeat(struct worker *w)
{
	shm_slot_heartbeat(w->shm, w->slot, mono_ns());
	ipcq_ev_report(&w->ctlq); /* drops held back by their lines' rate */
	if (wk_revoke_sweep(w))
		wk_adopt_wait_end(w, wk_revoked_why, NULL);
}

static void wk_stop(struct worker *w, const char *why)
{
	log_info("worker", "slot %u stopping: %s (%zu allocations stay in the table)", w->slot, why,
		 w->n_allocs);
	ev_break(w->loop, EVBREAK_ALL);
}

static void wk_signal_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
	/* the master's immediate stop: it kills us IPC_STOP_NOW_GRACE_MS later */
	if (s->signum == SIGTERM || s->signum == SIGINT)
		wk_checked(s->data)->stop_now = true;
	wk_stop(wk_checked(s->data), s->signum == SIGTERM   ? "SIGTERM"
				     : s->signum == SIGQUIT ? "SIGQUIT"
							    : "SIGINT");
}

static int wk_listener_add(struct worker *w, const char *name, enum worker_proto proto, int fd)
{
	struct wk_listener *l;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	size_t idx = w->n_ls;
	int rc;

	/* Reuse the slot of a removed listener so add/remove cycles never run out. */
	for (size_t i = 0; i < w->n_ls; i++)
		if (!w->ls[i]->active) {
			idx = i;
			break;
		}
	if (idx >= WK_MAX_LISTENERS)
		return -ENOSPC;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->w = w;
	l->slot = SHM_LSLOT_NONE;
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->proto = proto;
	l->fd = fd;
	l->active = true;
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
		l->family = ss.ss_family;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	rc = proto == WORKER_PROTO_UDP ? wk_udp_start(w, l) : wk_tcp_start(w, l);
	if (rc < 0) {
		free(l);
		return rc;
	}
	if (idx < w->n_ls)
		free(w->ls[idx]);
	else
		w->n_ls++;
	w->ls[idx] = l;
	w->snap_seen = false;	/* re-resolve listeners on the next iteration */
	return 0;
}

void wk_listener_close(struct worker *w, struct wk_listener *l)
{
	struct wk_alloc *a, *next;

	if (!l->active)
		return;
	for (a = LIST_FIRST(&w->allocs); a; a = next) {
		next = LIST_NEXT(a, link);
		if (a->l == l)
			wk_alloc_destroy(w, a, "listener removed");
	}
	while (l->conns)
		wk_tconn_close(w, l->conns);
	ev_io_stop(w->loop, &l->io);
	close(l->fd);
	l->fd = -1;
	l->active = false;
	portpool_destroy(&l->pool);
	SSL_free(l->dtls_listen);
	l->dtls_listen = NULL;
	SSL_CTX_free(l->tls_ctx);
	l->tls_ctx = NULL;
}

/* wk_adopt_wait_end's test for a reload's removal of listener arg: a record that waits for
 * its relay port ends as the listener's allocations do (wk_listener_close). */
static const char *wk_listener_gone_why(struct worker *w, const struct shm_alloc *rec,
					uint32_t idx, const void *arg)
{
	const struct wk_listener *l = arg;

	(void)w;
	(void)idx;
	/* Listeners without a counter slot share SHM_LSLOT_NONE with their records: a
	 * removal of one must not end the others'. Those records wait on, bounded. */
	return l->slot != SHM_LSLOT_NONE && rec->listener_idx == l->slot ? "listener removed"
									   : NULL;
}

/* Why the disconnect request d ends record idx, or NULL. The master counted its reply
 * with the same tests (shm_quota_user_match, the revocation list). By index, the record
 * must still be the one the master read: the index and the generation. Between the
 * master's read and this test (a frame queued behind others, or kept for the adoption)
 * the allocation may have ended and its index been claimed again, by another user. */
const char *wk_disconnect_why(struct worker *w, const struct shm_alloc *rec, uint32_t idx,
			      const void *arg)
{
	const struct ipc_disconnect *d = arg;
	size_t len = rec->user_len < SHM_ALLOC_USER_MAX ? rec->user_len : SHM_ALLOC_USER_MAX;

	switch (d->by) {
	case IPC_DISC_INDEX:
		return idx == d->index && rec->gen == d->gen ? "disconnected by admin" : NULL;
	case IPC_DISC_USER:
		return shm_quota_user_match(rec->username, len, d->user, strlen(d->user))
			       ? "disconnected by admin"
			       : NULL;
	case IPC_DISC_REVOKED:
		return wk_rec_revoked(w, rec, wk_unix_now()) ? "credential revoked" : NULL;
	}
	return NULL;
}

/* The allocations and the records that wait for their relay ports (adopt.c). */
static void wk_disconnect(struct worker *w, const struct ipc_disconnect *d)
{
	struct wk_alloc *a, *next;
	const char *why;

	for (a = LIST_FIRST(&w->allocs); a; a = next) {
		next = LIST_NEXT(a, link);
		why = wk_disconnect_why(w, a->rec, a->rec_idx, d);
		if (why != NULL)
			wk_alloc_destroy(w, a, why);
	}
	wk_adopt_wait_end(w, wk_disconnect_why, d);
	wk_adopt_disc_keep(w, d);	/* before the adoption: for what it adopts */
}

void wk_ctl_msg(struct worker *w, struct ipc_msg *m, int fd)
{
	struct ipc_ping ping;
	struct ipc_drain drain;
	struct ipc_disconnect disc;

	switch (m->hdr.type) {
	case IPC_PING:
		if (ipc_msg_get(m, &ping, sizeof(ping)) == 0)
			ipc_send_pong(w->h->ctl_fd, IPC_PONG, ping.seq, w->slot, getpid());
		break;
	case IPC_LISTENER_ADD: {
		const char *name = ipc_msg_str(m);
		int type = 0;
		socklen_t tl = sizeof(type);

		getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl);
		if (wk_listener_add(w, name,
				    type == SOCK_STREAM ? WORKER_PROTO_TCP : WORKER_PROTO_UDP,
				    fd) < 0) {
			log_error("worker", "cannot add listener %s", name);
			close(fd);
		}
		fd = -1;
		break;
	}
	case IPC_LISTENER_REMOVE:
		for (size_t i = 0; i < w->n_ls; i++)
			if (w->ls[i]->active && strcmp(w->ls[i]->name, ipc_msg_str(m)) == 0) {
				/* Its records that wait too, before it closes (their kernel
				 * entries' short circuits need its mask). */
				wk_adopt_wait_end(w, wk_listener_gone_why, w->ls[i]);
				wk_listener_close(w, w->ls[i]);
			}
		break;
	case IPC_DRAIN:
		if (ipc_msg_get(m, &drain, sizeof(drain)) == 0) {
			w->draining = drain.on != 0;
			shm_slot_set_state(w->shm, w->slot,
					   w->draining ? SHM_SLOT_STOPPING : SHM_SLOT_RUNNING);
		}
		break;
	case IPC_DISCONNECT:
		if (ipc_msg_get(m, &disc, sizeof(disc)) == 0) {
			disc.user[IPC_USER_MAX - 1] = 0;
			wk_disconnect(w, &disc);
		}
		break;
	case IPC_LOGLEVEL:
		if (log_set_spec(ipc_msg_str(m)) < 0)
			log_warn("worker", "bad log spec from master");
		break;
	case IPC_STOP:
		/* immediate: the SIGTERM that follows finds our loop ended */
		if (m->payload[0] == IPC_STOP_NOW)
			w->stop_now = true;
		wk_stop(w, w->stop_now ? "STOP now from master" : "STOP from master");
		break;
	case IPC_PARK:
		/* A live upgrade: the stream connections go to the new processes when we
		 * stop (the SIGQUIT that follows; wk_ctl_last reads this frame when the signal
		 * came first). */
		w->parking = true;
		(void)ipc_msg_get(m, &w->linger_limit_s, sizeof(w->linger_limit_s));
		break;
	case IPC_RELAY_CHAN:
		wk_relayho_chan(w, fd);
		fd = -1;
		break;
	case IPC_OFFLOAD_MAP:
		wk_offload_map(w, m->payload[0], fd);
		fd = -1;
		break;
	case IPC_OFFLOAD_OFF:
		wk_offload_map(w, 2, -1);
		break;
	case IPC_TCP_HANDOFF: {
		struct ipc_handoff *h = malloc(sizeof(*h));

		if (!h)
			wk_tcp_drop_handoff(w, fd, "no memory");
		else if (ipc_msg_get(m, h, sizeof(*h)) != 0)
			wk_tcp_drop_handoff(w, fd, "malformed");
		else if (h->slot != w->slot)
			wk_tcp_drop_handoff(w, fd, "another slot's frame");
		else
			wk_tcp_adopt_conn(w, h, fd);
		fd = -1;
		free(h);
		break;
	}
	default:
		log_warn("worker", "unexpected control message %s", ipc_type_name(m->hdr.type));
		break;
	}
	if (fd >= 0)
		close(fd);
}

static void wk_ctl_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct worker *w = wk_checked(io->data);
	struct ipc_msg *m = malloc(sizeof(*m));

	if (!m)
		return;
	for (int i = 0; i < 64; i++) {
		int fd = -1;
		int rc = ipc_recv(w->h->ctl_fd, m, &fd);

		if (rc == -EAGAIN)
			break;
		if (rc == -EPROTO || rc == -EMFILE) {
			log_warn("worker", "malformed control frame dropped%s",
				 rc == -EMFILE ? " (its descriptor did not fit)" : "");
			continue;
		}
		if (rc < 0) {
			wk_stop(w, "control channel closed");
			break;
		}
		wk_ctl_msg(w, m, fd);
	}
	free(m);
}

void wk_ctl_last(struct worker *w)
{
	struct ipc_msg *m = malloc(sizeof(*m));

	for (int i = 0; m && i < 64; i++) {
		int fd = -1;
		int rc = ipc_recv(w->h->ctl_fd, m, &fd);

		if (rc == -EPROTO || rc == -EMFILE)
			continue;	/* that frame refused (its descriptors dropped): the next */
		if (rc < 0)
			break;		/* nothing more (-EAGAIN), or the master gone (-EPIPE) */
		if (m->hdr.type == IPC_RELAY_CHAN)
			wk_relayho_chan(w, fd);
		else if (m->hdr.type == IPC_TCP_HANDOFF)
			wk_tcp_drop_handoff(w, fd, "read at exit");
		else if (fd >= 0)
			close(fd);
		if (m->hdr.type == IPC_PARK) {
			w->parking = true;
			(void)ipc_msg_get(m, &w->linger_limit_s, sizeof(w->linger_limit_s));
		}
	}
	free(m);
}

static void wk_watchers_init(struct worker *w)
{
	ev_check_init(&w->check, wk_check_cb);
	ev_set_priority(&w->check, EV_MAXPRI);
	w->check.data = w;
	ev_check_start(w->loop, &w->check);
	ev_prepare_init(&w->prep, wk_prepare_cb);
	ev_set_priority(&w->prep, EV_MINPRI);
	w->prep.data = w;
	ev_prepare_start(w->loop, &w->prep);
	ev_timer_init(&w->tick, wk_tick_cb, 0.1, 0.1);
	w->tick.data = w;
	ev_timer_init(&w->hb, wk_hb_cb, 0.0, 1.0);
	w->hb.data = w;
	ev_timer_start(w->loop, &w->hb);
	ev_io_init(&w->ctl_io, wk_ctl_cb, w->h->ctl_fd, EV_READ);
	w->ctl_io.data = w;
	ev_io_start(w->loop, &w->ctl_io);
	ev_signal_init(&w->sigterm, wk_signal_cb, SIGTERM);
	w->sigterm.data = w;
	ev_signal_start(w->loop, &w->sigterm);
	ev_signal_init(&w->sigint, wk_signal_cb, SIGINT);
	w->sigint.data = w;
	ev_signal_start(w->loop, &w->sigint);
	/* systemctl kill -s QUIT reaches every process of the unit: a worker exits as on
	 * SIGTERM instead of dumping core (SIGQUIT's default). */
	ev_signal_init(&w->sigquit, wk_signal_cb, SIGQUIT);
	w->sigquit.data = w;
	ev_signal_start(w->loop, &w->sigquit);
}

/* Closes the private half of every allocation and leaves its record LIVE and counted, as
 * a crash would, so the next process serving this slot adopts it: a respawned worker, or
 * the next start taking the state file over. However the worker stops (STOP, a signal,
 * the master gone), the table keeps what is still open; only a client, an expiry, a
 * listener removal or an admin disconnect ends an allocation. */
static void wk_leave_table(struct worker *w)
{
	struct wk_alloc *a;

	w->leaving = true;	/* and their connections in systemd's fd store (fdstore.c) */
	wk_adopt_wait_abandon(w);
	if (w->parking)
		(void)wk_relayho_abandon(w);	/* handed over: left as they are */
	while ((a = LIST_FIRST(&w->allocs)) != NULL) {
		if (a->conn)
			a->conn->alloc = NULL;
		wk_alloc_forget(w, a);
	}
}

/* What the rest of the daemon sees of our stop: the table left, every connection and
 * listener closed, the slot offline. Nothing touches the table after it. */
static void wk_give_up(struct worker *w)
{
	if (w->relay_tx >= 0)
		close(w->relay_tx);	/* a channel never used: not parked */
	w->relay_tx = -1;
	wk_leave_table(w);
	wk_tlsb_close_all(w);
	/* Close all before freeing any: closing a connection looks at every listener. */
	for (size_t i = 0; i < w->n_ls; i++)
		wk_listener_close(w, w->ls[i]);
	shm_qsbr_offline(w->shm, w->slot);
}

static void wk_free_all(struct worker *w)
{
	for (size_t i = 0; i < w->n_ls; i++)
		free(w->ls[i]);
	wk_tables_free(w);
	wk_dl_free(w);
	free(w->dhash);
	free(w->plain);
	BIO_meth_free(w->dbio_meth);
	ev_loop_destroy(w->loop);
}

static void wk_teardown(struct worker *w)
{
	wk_give_up(w);
	wk_free_all(w);
}

/* A live upgrade's worker with nothing to linger: its relay sockets and connections are
 * handed over, the rest closed, its slot offline and its copy of the instance lock
 * closed, so the old master counts it stopped now (IPC_HANDED_OVER, the last frame on its
 * channel) and the take-over starts while the kernel releases our descriptors, epoll
 * entries and memory (tens of milliseconds a worker at 15,000 allocations). That release
 * runs at SCHED_IDLE: on a busy node the new master's take-over and the new workers'
 * adoption, which the relaying waits for, go first. */
static void wk_handed_over(struct worker *w)
{
	struct sched_param sp = { .sched_priority = 0 };
	int rc;

	wk_give_up(w);
	shm_lock_set(w->shm, -1);
	rc = ipc_send(w->h->ctl_fd, IPC_HANDED_OVER, NULL, 0, -1);
	if (rc < 0) {	/* the master counts us stopped at our exit, as before */
		log_warn("worker", "slot %u: cannot tell the master we handed over: %s", w->slot,
			 strerror(-rc));
		return;	/* and the rest of our teardown is what it waits for */
	}
	(void)sched_setscheduler(0, SCHED_IDLE, &sp);
}

/* The layers' hooks (table.h, transport.h): the upper layers' functions that the table
 * and the transports call without naming them. */
static const struct wk_table_ops wk_table_hooks = {
	.relay_rx = wk_relay_cb,
	.relay_accept = wk_tcpr_accept_cb,
	.flush = wk_txg_flush_alloc,
	.conns_end = wk_tcpr_alloc_end,
	.chans_sync = wk_offload_sync,
	.chan_drop = wk_offload_drop,
	.chans_drop = wk_offload_drop_all,
	.retired = wk_offload_sc_forget,
	.carry = wk_tconn_carry,
};

static const struct wk_xport_up wk_xport_hooks = {
	.input = wk_turn_input,
	.batch_end = wk_txg_flush,
	.bound = wk_tcpr_attach,
	.bind_failed = wk_tcpr_drop,
};

int wk_tables_init(struct worker *w)
{
	struct shm_config cfg;
	uint64_t share;

	w->table_ops = &wk_table_hooks;
	w->up = &wk_xport_hooks;
	w->off = w->h->offload;
	w->rx = calloc(WK_BATCH, sizeof(*w->rx));

	/* Buckets for twice a worker's share of the table (the steering spreads clients
	 * evenly over the slots): chains stay short when one holds more, and 17 workers of a
	 * 250,000 table do not each keep 2 MiB of buckets (136 bytes an allocation). */
	shm_get_config(w->shm, &cfg);
	share = 2 * (uint64_t)shm_alloc_capacity(w->shm) / (cfg.n_slots > 0 ? cfg.n_slots : 1);
	w->hash_mask = WK_HASH_BUCKETS - 1;
	while (w->hash_mask < share - 1 && w->hash_mask < (1u << 24) - 1)
		w->hash_mask = w->hash_mask << 1 | 1;
	LIST_INIT(&w->allocs);
	w->hash = calloc((size_t)w->hash_mask + 1, sizeof(*w->hash)); /* empty LIST heads */
	w->tphash = calloc(WK_TCPR_HASH, sizeof(*w->tphash));
	w->by_idx = calloc(shm_alloc_capacity(w->shm) + 1, sizeof(*w->by_idx));
	w->ctg = calloc(1, sizeof(*w->ctg));
	if (!w->rx || !w->hash || !w->tphash || !w->by_idx || !w->ctg)
		return -ENOMEM;
	wk_tcpr_init(w);
	return wk_pipeline_init(w);
}

void wk_tables_free(struct worker *w)
{
	free(w->rx);
	free(w->hash);
	free(w->tphash);
	wk_tcpr_fini(w);
	free(w->by_idx);
	free(w->adopt_wait);
	free(w->ctg);
	wk_pipeline_free(w);
}

int worker_run(const struct worker_heritage *h)
{
	struct worker *w;
	int status = 1;

	w = calloc(1, sizeof(*w));
	if (!w)
		return 1;
	w->magic = WK_MAGIC;
	w->h = h;
	w->shm = h->shm;
	w->slot = h->slot;
	w->exit_status = 0;
	w->relay_tx = -1;
	signal(SIGPIPE, SIG_IGN);
	w->ctr = shm_slot_counters(w->shm, w->slot);
	w->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
	if (!w->ctr || wk_tables_init(w) < 0 || !w->loop || wk_tls_init(w) < 0 || wk_dtls_meth_init(w) < 0) {
		log_error("worker", "slot %u: setup failed", h->slot);
		wk_tables_free(w);
		if (w->loop)
			ev_loop_destroy(w->loop);
		free(w);
		return 1;
	}
	wk_ctlq_init(w);
	wk_tcp_init(w);
	wheel_init(&w->wheel, mono_ms());
	wk_watchers_init(w);
	wk_recflush_init(w);
	wk_ho_start(w);
	fcntl(h->ctl_fd, F_SETFL, fcntl(h->ctl_fd, F_GETFL) | O_NONBLOCK);
	for (size_t i = 0; i < h->n_listeners; i++) {
		const struct worker_listener *wl = &h->listeners[i];

		if (wk_listener_add(w, wl->name, wl->proto, wl->fd) < 0) {
			log_error("worker", "slot %u: cannot serve listener %s", h->slot, wl->name);
			goto out;
		}
	}
	shm_slot_set_state(w->shm, w->slot, SHM_SLOT_RUNNING);
	shm_qsbr_online(w->shm, w->slot);
	ipc_send_pong(h->ctl_fd, IPC_READY, 0, w->slot, getpid());
	log_info("worker", "slot %u running with %zu listeners", w->slot, w->n_ls);
	ev_run(w->loop, 0);
	status = w->exit_status;
	wk_recflush_stop(w);	/* while the master still drains: before we count stopped */
	wk_ctl_last(w);
	if (w->parking) {
		wk_park_all(w);
		(void)wk_relayho_send(w);
		wk_ctlq_stop(w);	/* before IPC_HANDED_OVER, the last frame */
		/* TLS calls stay with us until they end (linger.c). */
		if (wk_linger_begin(w)) {
			ev_run(w->loop, 0);
			wk_linger_end(w);
		} else {
			wk_handed_over(w);
			wk_free_all(w);
			free(w);
			return status;
		}
	}
out:
	wk_ctlq_stop(w);
	wk_teardown(w);
	free(w);
	return status;
}

/* ---- harness entry (fuzz/fuzz_dispatch.c) ---- */

void wk_snap_use(struct worker *w, const struct snap *s)
{
	w->snap = s;
	wk_snap_apply(w);
}
