/* Master: wires the HTTP module (health, /status, metrics, credential API) to the master's state. */
#include "config.h"

#include "master/master.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "conf/snapshot.h"
#include "http/http.h"
#include "http/http_metrics.h"
#include "shm/shm.h"

#define HTTPD_MAX_SERVERS 3

struct httpd {
	struct http_server *srv[HTTPD_MAX_SERVERS];
	unsigned n;
};

static enum http_readiness cb_readiness(void *ctx)
{
	struct master *m = ctx;

	if (m->draining || m->exiting || m->stopping)
		return HTTP_DRAINING;
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
	};

	return http_status_render(m->cfg, &info, out);
}

static int cb_metrics(void *ctx, struct http_buf *out)
{
	struct master *m = ctx;
	struct http_master_stats ms;
	struct http_proc_stats *ws;
	const struct snap *snap = NULL;
	int rc;

	memset(&ms, 0, sizeof(ms));
	ws = calloc(m->n_slots, sizeof(*ws));
	if (ws == NULL)
		return -ENOMEM;
	ms.generation = m->generation;
	ms.reloads_ok = m->reloads_ok;
	ms.reloads_failed = m->reloads_failed;
	for (unsigned i = 0; i < m->n_slots; i++)
		ms.worker_restarts += m->workers[i].restarts;
	ms.draining = m->draining;
	http_proc_read(0, &ms.master);
	http_proc_read_workers(m->shm, ws, m->n_slots, &ms.n_workers);
	ms.workers = ws;
	/* The master's own copy of what it published: names for listener/cluster series. */
	if (m->snap_blob != NULL && snap_open(m->snap_blob, m->snap_len, &snap) < 0)
		snap = NULL;
	rc = http_metrics_render(m->shm, snap, &ms, out);
	free(ws);
	return rc;
}

static int cb_cred_config(void *ctx, const struct conf **cfg)
{
	struct master *m = ctx;

	*cfg = m->cfg;
	return m->cfg != NULL ? 0 : -ENOENT;
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

static void start_one(struct master *m, struct httpd *h, const char *what, const char *url,
		      const struct http_handlers *hd)
{
	int rc;

	if (h->n >= HTTPD_MAX_SERVERS)
		return;
	rc = http_server_start(m->loop, url, hd, m, &h->srv[h->n]);
	if (rc < 0) {
		/* Health and metrics are conveniences: the relay serves without them. */
		log_error("master", "%s endpoint %s: %s (not served)", what, url, strerror(-rc));
		return;
	}
	log_info("master", "%s endpoint %s (port %u)", what, url,
		 http_server_port(h->srv[h->n]));
	h->n++;
}

/* Health, metrics and credential API: one server per distinct address and port. */
int httpd_start(struct master *m)
{
	const struct conf_admin *a = &m->cfg->admin;
	const char *health = a->healthcheck_endpoint, *metrics = a->metrics_endpoint;
	const char *cred = a->credential_api_endpoint;
	struct http_handlers hh = { 0 }, hm = { 0 }, hc = { 0 };
	struct httpd *h = calloc(1, sizeof(*h));
	bool m_in_h, c_in_h, c_in_m;

	if (h == NULL)
		return -ENOMEM;
	m->httpd = h;
	hh.readiness = cb_readiness;
	hh.status_json = cb_status;
	hm.metrics = cb_metrics;
	hc.cred_config = cb_cred_config;
	m_in_h = set(health) && set(metrics) &&
		 same_socket(health, metrics, HTTP_HEALTH_PORT, HTTP_METRICS_PORT);
	c_in_h = set(health) && set(cred) &&
		 same_socket(health, cred, HTTP_HEALTH_PORT, HTTP_CRED_PORT);
	c_in_m = !c_in_h && set(metrics) && set(cred) && !m_in_h &&
		 same_socket(metrics, cred, HTTP_METRICS_PORT, HTTP_CRED_PORT);
	if (set(health)) {
		if (m_in_h)
			hh.metrics = cb_metrics;
		if (c_in_h)
			hh.cred_config = cb_cred_config;
		/* Shared with metrics: the metrics URL carries the metrics path. */
		start_one(m, h, "health", m_in_h ? metrics : health, &hh);
	}
	if (set(metrics) && !m_in_h) {
		if (c_in_m)
			hm.cred_config = cb_cred_config;
		start_one(m, h, "metrics", metrics, &hm);
	}
	if (set(cred) && !c_in_h && !c_in_m)
		start_one(m, h, "credential API", cred, &hc);
	return 0;
}

void httpd_stop(struct master *m)
{
	struct httpd *h = m->httpd;

	if (h == NULL)
		return;
	for (unsigned i = 0; i < h->n; i++)
		http_server_stop(h->srv[i]);
	free(h);
	m->httpd = NULL;
}
