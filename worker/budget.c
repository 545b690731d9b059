/* Worker per-source budgets: what an unauthenticated client may hold (connections, TLS and
 * DTLS handshakes) per source address and per prefix, counted across workers in the
 * slots' shared counts (shm/shm_source.h). A full budget evicts the source's oldest
 * unauthenticated connection instead of refusing everyone's newest, and a full per-worker
 * table does the same for the worker's oldest: accepting never stops for an attacker. */
#include "config.h"

#include "worker/stream.h"
#include "worker/transport.h"
#include "worker/wk.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "common/log.h"
#include "shm/shm_trust.h"

#define NS_PER_S 1000000000ull

/* The reasons of kind k's budgets: [0] address, [1] prefix. */
static const enum shm_src_reason wk_budget_reason[SHM_SRC_KINDS][2] = {
	[SHM_SRC_CONNS] = { SHM_SRC_R_ADDR_CONNS, SHM_SRC_R_PREFIX_CONNS },
	[SHM_SRC_TLS_HS] = { SHM_SRC_R_ADDR_TLS, SHM_SRC_R_PREFIX_TLS },
	[SHM_SRC_DTLS_HS] = { SHM_SRC_R_ADDR_DTLS, SHM_SRC_R_PREFIX_DTLS },
};

void wk_budget_keys(const struct worker *w, const struct sockaddr *sa, uint32_t b[2])
{
	uint8_t msg[WK_RL_MSG_MAX];
	size_t len;

	/* The lengths are part of the message: an address never shares its prefix's key. */
	len = wk_rl_prefix_msg(sa, 32, 128, msg);
	b[0] = (uint32_t)wk_siphash24(shm_trust_hkey(w->shm), msg, len);
	len = wk_rl_prefix_msg(sa, 24, 64, msg);
	b[1] = (uint32_t)wk_siphash24(shm_trust_hkey(w->shm), msg, len);
}

void wk_budget_configure(struct worker *w, const struct snap_limits *lim)
{
	uint32_t(*s)[2] = w->hot.src_lim;

	s[SHM_SRC_CONNS][0] = lim->source_connections;
	s[SHM_SRC_CONNS][1] = lim->prefix_connections;
	s[SHM_SRC_TLS_HS][0] = lim->source_tls_handshakes;
	s[SHM_SRC_TLS_HS][1] = lim->prefix_tls_handshakes;
	s[SHM_SRC_DTLS_HS][0] = lim->source_dtls_handshakes;
	s[SHM_SRC_DTLS_HS][1] = lim->prefix_dtls_handshakes;
	w->hot.preauth_timeout = lim->preauth_timeout;
}

/* Whether c counts in kind k. */
static bool wk_budget_holds(const struct wk_tconn *c, enum shm_src_kind k)
{
	return k == SHM_SRC_CONNS ? c->cnt_conn : c->cnt_hs == (int8_t)k;
}

/* Records a trip of sa (the shared table of refused sources) and logs it when due. */
static void wk_budget_trip(struct worker *w, const struct sockaddr *sa, enum shm_src_reason r,
			   bool evicted)
{
	struct shm_addr a;
	char txt[INET6_ADDRSTRLEN] = "?";

	memset(&a, 0, sizeof(a));
	wk_addr_to_shm(sa, &a);
	if (!shm_src_trip(w->shm, w->slot, &a, r, mono_ns(),
			  (uint64_t)WK_BUDGET_LOG_EVERY_S * NS_PER_S))
		return;
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, txt, sizeof(txt));
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, txt,
			  sizeof(txt));
	log_warn("worker",
		 "source %s: budget %s full: %s (one line per source and worker every %d s at most)",
		 txt, shm_src_reason_name(r),
		 evicted ? "its oldest unauthenticated connection closed" : "new connection refused",
		 WK_BUDGET_LOG_EVERY_S);
}

static void wk_budget_evict(struct worker *w, struct wk_tconn *c, enum shm_src_reason r)
{
	shm_ctr_add(w->ctr, (enum shm_ctr)(SHM_CTR_BUDGET_EVICT_ADDR_CONNS + r), 1);
	wk_budget_trip(w, (const struct sockaddr *)&c->peer, r, true);
	log_debug("worker", "listener %s: connection evicted (%s)", c->l->name,
		  shm_src_reason_name(r));
	c->dead = true;		/* no close_notify: it never finished a handshake or auth */
	wk_tconn_close(w, c);
}

static void wk_budget_refuse(struct worker *w, const struct sockaddr *sa, enum shm_src_reason r)
{
	shm_ctr_add(w->ctr, (enum shm_ctr)(SHM_CTR_BUDGET_REFUSED_ADDR_CONNS + r), 1);
	wk_budget_trip(w, sa, r, false);
}

/* The oldest unauthenticated connection of this worker that counts in kind k, on listener
 * l (NULL: any) with bucket b in scope (scope < 0: any source). */
static struct wk_tconn *wk_budget_oldest(struct worker *w, const struct wk_listener *l,
					 enum shm_src_kind k, int scope, uint32_t b)
{
	struct wk_tconn *c;

	TAILQ_FOREACH(c, &w->unauth, uq)
		if (wk_budget_holds(c, k) && (!l || c->l == l) &&
		    (scope < 0 || c->src_b[scope] == b))
			return c;
	return NULL;
}

int wk_budget_admit(struct worker *w, const struct sockaddr *sa, enum shm_src_kind k)
{
	uint32_t b[2];

	wk_budget_keys(w, sa, b);
	for (int scope = 0; scope < 2; scope++) {
		uint32_t lim = w->hot.src_lim[k][scope];
		enum shm_src_reason r = wk_budget_reason[k][scope];

		/* A worker may evict only its own connections. While the sum is at the
		 * budget, one holding at least its fair share (budget / live workers) frees
		 * its oldest; one below it admits the newcomer anyway, so that a source whose
		 * old connections sit on another worker is not refused: the others shed
		 * theirs on their next arrival from it or at the pre-auth deadline. A source
		 * thus holds at most the budget plus a fair share per other worker. */
		for (;;) {
			uint32_t own;
			unsigned live;
			struct wk_tconn *old;

			if (!lim || shm_src_share(w->shm, k, b[scope], w->slot, &own, &live) < lim)
				break;
			if (own < (lim + live - 1) / live)
				break;
			old = wk_budget_oldest(w, NULL, k, scope, b[scope]);
			if (!old) {
				wk_budget_refuse(w, sa, r);
				return -EBUSY;
			}
			wk_budget_evict(w, old, r);
		}
	}
	return 0;
}

int wk_budget_make_room(struct worker *w, struct wk_listener *l, enum shm_src_kind k,
			enum shm_src_reason r)
{
	struct wk_tconn *old = wk_budget_oldest(w, l, k, -1, 0);

	if (!old)
		return -EBUSY;
	wk_budget_evict(w, old, r);
	return 0;
}

static void wk_budget_count(struct worker *w, const struct wk_tconn *c, enum shm_src_kind k,
			    int delta)
{
	shm_src_add(w->shm, w->slot, k, c->src_b[0], delta);
	shm_src_add(w->shm, w->slot, k, c->src_b[1], delta);
}

void wk_budget_attach(struct worker *w, struct wk_tconn *c)
{
	wk_budget_keys(w, (const struct sockaddr *)&c->peer, c->src_b);
	c->authed = false;
	c->cnt_conn = true;
	wk_budget_count(w, c, SHM_SRC_CONNS, 1);
	TAILQ_INSERT_TAIL(&w->unauth, c, uq);
	c->cnt_hs = -1;
	if (c->ssl && !c->hs_done) {
		c->cnt_hs = c->dgram ? SHM_SRC_DTLS_HS : SHM_SRC_TLS_HS;
		wk_budget_count(w, c, (enum shm_src_kind)c->cnt_hs, 1);
		w->n_hs[c->cnt_hs]++;
	}
}

void wk_budget_hs_done(struct worker *w, struct wk_tconn *c)
{
	if (c->cnt_hs < 0)
		return;
	wk_budget_count(w, c, (enum shm_src_kind)c->cnt_hs, -1);
	w->n_hs[c->cnt_hs]--;
	c->cnt_hs = -1;
}

void wk_budget_authed(struct worker *w, struct wk_tconn *c)
{
	if (!c || c->authed)
		return;
	c->authed = true;
	if (c->cnt_conn) {
		wk_budget_count(w, c, SHM_SRC_CONNS, -1);
		TAILQ_REMOVE(&w->unauth, c, uq);
		c->cnt_conn = false;
	}
}

void wk_budget_detach(struct worker *w, struct wk_tconn *c)
{
	wk_budget_hs_done(w, c);
	if (c->cnt_conn) {
		wk_budget_count(w, c, SHM_SRC_CONNS, -1);
		TAILQ_REMOVE(&w->unauth, c, uq);
		c->cnt_conn = false;
	}
}
