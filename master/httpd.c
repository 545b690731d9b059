/* Master: wires the HTTP module (health, /status, metrics, credential API) to master state. */
#include "config.h"

#include "master/master.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "conf/snapshot.h"
#include "http/http.h"
#include "http/http_metrics.h"
#include "master/linger.h"
#include "master/revoke.h"
#include "shm/shm.h"

#define HTTPD_MAX_SERVERS 3
#define HTTPD_URL_MAX 512
#define HTTPD_FINISH_S 1.0   /* the old master's wait for its requests, at its exit */

/* What a server carries. */
#define ROLE_HEALTH 1u
#define ROLE_METRICS 2u
#define ROLE_CRED 4u

/* One server of the plan: the URL it is started with and the routes it serves. A running
 * server is kept across a reload exactly when the new plan has an entry with the same URL
 * and roles, so a reload that leaves an endpoint alone never drops its connections. */
struct httpd_srv {
	char url[HTTPD_URL_MAX];
	unsigned roles;
	struct http_server *srv;   /* NULL in a plan, or when it failed to start */
};

struct httpd {
	struct httpd_srv s[HTTPD_MAX_SERVERS];
	unsigned n;
	bool held;                 /* httpd_hold: a server started meanwhile is held too */
};

static enum http_readiness cb_readiness(void *ctx)
{
	struct master *m = ctx;

	if (m->draining || m->exiting || m->stopping)
		return HTTP_DRAINING;
	/* Running workers with no listener serve nobody (a forced or CDS reload to an empty
	 * configuration, a start without listeners): out of the load balancer. */
	if (m->n_listeners == 0)
		return HTTP_NOT_READY;
	for (unsigned i = 0; i < m->n_slots; i++)
		if (m->workers[i].state == MW_RUNNING)
			return HTTP_READY;
	return HTTP_NOT_READY;
}

static unsigned running(const struct master *m)
{
	unsigned n = 0;

	for (unsigned i = 0; i < m->n_slots; i++)
		n += m->workers[i].state == MW_RUNNING;
	return n;
}

static int cb_status(void *ctx, struct http_buf *out)
{
	struct master *m = ctx;
	struct http_status_info info = {
		.readiness = cb_readiness(m),
		.allocations = master_alloc_count(m),
		.generation = m->generation,
		.workers_running = running(m),
		.workers_total = m->n_slots,
		.last_reload_ok = m->last_reload.ok,
		.last_reload_refused = m->last_reload.outcome == RELOAD_REFUSED,
	};

	return http_status_render(m->cfg, &info, out);
}

/* The running config's TLS/DTLS listeners with a certificate, for
 * turngate_tls_certificate_expiry_seconds (arrays the caller frees). */
static int cert_expiry(const struct master *m, struct http_master_stats *ms)
{
	size_t n = m->cfg ? m->cfg->n_listeners : 0;
	const char **names = calloc(n + 1, sizeof(*names));
	int64_t *na = calloc(n + 1, sizeof(*na));

	ms->cert_listeners = names;
	ms->cert_not_after = na;
	ms->now = (int64_t)time(NULL);
	if (names == NULL || na == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const struct conf_listener *l = &m->cfg->listeners[i];

		if (l->cert_not_after == 0 || l->cert_pem == NULL)
			continue;
		names[ms->n_certs] = l->name;
		na[ms->n_certs++] = l->cert_not_after;
	}
	return 0;
}

static int cb_metrics(void *ctx, struct http_buf *out)
{
	struct master *m = ctx;
	struct http_master_stats ms;
	struct http_proc_stats *ws;
	struct shm_counters *off = NULL;
	const struct snap *snap = NULL;
	int rc;

	memset(&ms, 0, sizeof(ms));
	ws = calloc(m->n_slots, sizeof(*ws));
	if (ws == NULL)
		return -ENOMEM;
	ms.generation = m->generation;
	ms.reloads_ok = m->reloads_ok;
	ms.reloads_failed = m->reloads_failed;
	ms.reloads_refused = m->reloads_refused;
	ms.last_reload_ok = m->last_reload.ok;
	for (unsigned i = 0; i < m->n_slots; i++)
		ms.worker_restarts += m->workers[i].restarts;
	ms.draining = m->draining;
	linger_totals(m, &ms.linger_workers, &ms.linger_sessions, &ms.linger_dtls);
	http_proc_read(0, &ms.master);
	http_proc_read_workers(m->shm, ws, m->n_slots, &ms.n_workers);
	ms.workers = ws;
	if (m->offload != NULL && (off = calloc(1, sizeof(*off))) != NULL) {
		struct tgo_count c;

		master_offload_add(m, off);
		if (tgo_totals(m->offload, &c, &ms.offload_entries) == 0) {
			ms.offload_pkts[0] = c.pkts[0];
			ms.offload_pkts[1] = c.pkts[1];
		}
		ms.offload_add = off;
	}
	/* The master's own copy of what it published: names for listener/cluster series. */
	if (m->snap_blob != NULL && snap_open(m->snap_blob, m->snap_len, &snap) < 0)
		snap = NULL;
	rc = cert_expiry(m, &ms);
	if (rc == 0)
		rc = http_metrics_render(m->shm, snap, &ms, out);
	free((void *)ms.cert_listeners);
	free((void *)ms.cert_not_after);
	free(ws);
	free(off);
	return rc;
}

static int cb_cred_config(void *ctx, const struct conf **cfg)
{
	struct master *m = ctx;

	*cfg = m->cfg;
	return m->cfg != NULL ? 0 : -ENOENT;
}

/* Read at each request, so a reload that changes only the token needs no restart. */
static const char *cb_cred_token(void *ctx)
{
	struct master *m = ctx;

	return m->cfg != NULL ? m->cfg->admin.credential_api_token : NULL;
}

static bool set(const char *s)
{
	return s != NULL && s[0] != '\0';
}

/* True when endpoints a and b (both set) name the same address and port. */
static bool same_socket(const char *a, const char *b, uint16_t da, uint16_t db)
{
	struct http_endpoint ea, eb;

	if (http_endpoint_parse(a, da, &ea, NULL) < 0 || http_endpoint_parse(b, db, &eb, NULL) < 0)
		return false;
	return http_endpoint_same_socket(&ea, &eb);
}

/* The shared health+metrics server binds the health endpoint's address and port (probes
 * are configured against it) and serves metrics on the metrics URL's path. The health URL
 * is cut before its path; an absent port stays absent (the health default applies). */
static int merged_url(const char *health, const char *metrics, char *out, size_t len)
{
	struct http_endpoint em;
	const char *auth = strstr(health, "://"), *slash;
	int n;

	if (auth == NULL || http_endpoint_parse(metrics, HTTP_METRICS_PORT, &em, NULL) < 0)
		return -EINVAL;
	slash = strchr(auth + 3, '/');
	n = snprintf(out, len, "%.*s%s", slash ? (int)(slash - health) : (int)strlen(health),
		     health, em.path[0] != '\0' ? em.path : HTTP_METRICS_PATH);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static void plan_add(struct httpd *p, const char *url, unsigned roles)
{
	size_t len = strlen(url);

	if (p->n >= HTTPD_MAX_SERVERS || len >= sizeof(p->s[0].url)) {
		log_error("master", "HTTP endpoint %.64s...: URL too long (not served)", url);
		return;
	}
	memcpy(p->s[p->n].url, url, len + 1);
	p->s[p->n].roles = roles;
	p->n++;
}

/* Decides the servers for config c: one per distinct socket. Metrics may share the health
 * server; the credential API may share the metrics server, but never the health port,
 * which is meant for probes and is often reachable by anyone who can reach the pod. */
static void plan_build(const struct conf *c, struct httpd *p)
{
	const char *health = c->admin.healthcheck_endpoint, *metrics = c->admin.metrics_endpoint;
	const char *cred = c->admin.credential_api_endpoint;
	char url[HTTPD_URL_MAX];
	bool m_in_h, c_in_h, c_in_m;

	memset(p, 0, sizeof(*p));
	m_in_h = set(health) && set(metrics) &&
		 same_socket(health, metrics, HTTP_HEALTH_PORT, HTTP_METRICS_PORT);
	c_in_h = set(health) && set(cred) &&
		 same_socket(health, cred, HTTP_HEALTH_PORT, HTTP_CRED_PORT);
	c_in_m = !c_in_h && !m_in_h && set(metrics) && set(cred) &&
		 same_socket(metrics, cred, HTTP_METRICS_PORT, HTTP_CRED_PORT);
	/* conf refuses such a config at load (conf_http_same_socket, the same rule; test_http
	 * checks that they agree), so this only fires if the two drift: then the credential
	 * API stays off rather than answering on the probes' port. */
	if (c_in_h)
		log_error("master",
			  "credential API endpoint %s uses the health endpoint's port "
			  "(%s): not served; give it its own port",
			  cred, health);
	if (set(health)) {
		if (!m_in_h)
			plan_add(p, health, ROLE_HEALTH);
		else if (merged_url(health, metrics, url, sizeof(url)) == 0)
			plan_add(p, url, ROLE_HEALTH | ROLE_METRICS);
		else
			log_error("master",
				  "health endpoint %s with metrics %s: cannot combine "
				  "(not served)",
				  health, metrics);
	}
	if (set(metrics) && !m_in_h)
		plan_add(p, metrics, ROLE_METRICS | (c_in_m ? ROLE_CRED : 0));
	if (set(cred) && !c_in_h && !c_in_m)
		plan_add(p, cred, ROLE_CRED);
}

static const char *roles_name(unsigned roles)
{
	/* clang-format off */
	switch (roles) {
	case ROLE_HEALTH: return "health";
	case ROLE_METRICS: return "metrics";
	case ROLE_CRED: return "credential API";
	case ROLE_HEALTH | ROLE_METRICS: return "health and metrics";
	default: return "metrics and credential API";
	}
	/* clang-format on */
}

static int cb_inherited(void *ctx, const struct sockaddr *addr)
{
	return upgrade_take_socket(ctx, SOCK_STREAM, addr);
}

static void srv_hold(struct httpd_srv *s, bool hold)
{
	if (http_server_hold(s->srv, hold) < 0)
		log_error("master", "%s endpoint %s: cannot %s", roles_name(s->roles), s->url,
			  hold ? "hold it for the live upgrade" : "serve it again (not served)");
}

static void srv_start(struct master *m, struct httpd_srv *s)
{
	struct http_handlers hd = { .inherited_socket = cb_inherited };
	const struct httpd *h = m->httpd;
	int rc;

	if (s->roles & ROLE_HEALTH) {
		hd.readiness = cb_readiness;
		hd.status_json = cb_status;
	}
	if (s->roles & ROLE_METRICS)
		hd.metrics = cb_metrics;
	if (s->roles & ROLE_CRED) {
		hd.cred_config = cb_cred_config;
		hd.cred_token = cb_cred_token;
		hd.revoke = revoke_http;
	}
	rc = http_server_start(m->loop, s->url, &hd, m, &s->srv);
	if (rc < 0) {
		/* These are conveniences: the relay serves without them. */
		log_error("master", "%s endpoint %s: %s (not served)", roles_name(s->roles), s->url,
			  strerror(-rc));
		s->srv = NULL;
		return;
	}
	log_info("master", "%s endpoint %s (port %u)", roles_name(s->roles), s->url,
		 http_server_port(s->srv));
	if (h->held)
		srv_hold(s, true);
}

/* Health, metrics and credential API: one server per distinct address and port. */
int httpd_start(struct master *m)
{
	struct httpd *h = calloc(1, sizeof(*h));

	if (h == NULL)
		return -ENOMEM;
	m->httpd = h;
	plan_build(m->cfg, h);
	for (unsigned i = 0; i < h->n; i++)
		srv_start(m, &h->s[i]);
	return 0;
}

static bool srv_same(const struct httpd_srv *a, const struct httpd_srv *b)
{
	return a->roles == b->roles && strcmp(a->url, b->url) == 0;
}

int httpd_reload(struct master *m)
{
	struct httpd *h = m->httpd, next;
	bool keep[HTTPD_MAX_SERVERS] = { false };

	if (h == NULL)
		return 0;   /* never started (a test master): a reload starts nothing either */
	plan_build(m->cfg, &next);
	next.held = h->held;
	/* Stop every server that goes away before starting any new one: a changed endpoint
	 * may reuse a port an old server still holds. A server that failed to start is
	 * retried. */
	for (unsigned i = 0; i < h->n; i++) {
		for (unsigned j = 0; j < next.n && !keep[i]; j++)
			if (next.s[j].srv == NULL && h->s[i].srv != NULL &&
			    srv_same(&h->s[i], &next.s[j])) {
				next.s[j].srv = h->s[i].srv;
				keep[i] = true;
			}
		if (!keep[i] && h->s[i].srv != NULL) {
			log_info("master", "%s endpoint %s stopped (changed by reload)",
				 roles_name(h->s[i].roles), h->s[i].url);
			http_server_stop(h->s[i].srv);
		}
	}
	for (unsigned j = 0; j < next.n; j++)
		if (next.s[j].srv == NULL)
			srv_start(m, &next.s[j]);
	*h = next;
	return 0;
}

void httpd_hold(struct master *m, bool hold)
{
	struct httpd *h = m->httpd;

	if (h == NULL)
		return;
	h->held = hold;
	for (unsigned i = 0; i < h->n; i++)
		srv_hold(&h->s[i], hold);
}

void httpd_stop(struct master *m)
{
	struct httpd *h = m->httpd;

	if (h == NULL)
		return;
	if (m->handed_over && h->held) {
		struct http_server *srvs[HTTPD_MAX_SERVERS];
		unsigned left;

		for (unsigned i = 0; i < h->n; i++)
			srvs[i] = h->s[i].srv;
		/* The new master serves: what we took before the hand-over is answered first. */
		left = http_server_finish(srvs, h->n, HTTPD_FINISH_S);
		if (left > 0)
			log_warn("master", "upgrade: %u HTTP requests not over after %.0f s: cut",
				 left, HTTPD_FINISH_S);
	}
	for (unsigned i = 0; i < h->n; i++)
		http_server_stop(h->s[i].srv);
	free(h);
	m->httpd = NULL;
}

size_t httpd_fds(const struct master *m, int *fds, size_t cap)
{
	const struct httpd *h = m->httpd;
	size_t n = 0;

	for (unsigned i = 0; h != NULL && i < h->n && n < cap; i++)
		if (http_server_fd(h->s[i].srv) >= 0)
			fds[n++] = http_server_fd(h->s[i].srv);
	return n;
}
