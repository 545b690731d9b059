/* Unit tests of the Prometheus rendering: a real shm segment with known counters, a real
 * snapshot for names, exact expected values, and a strict text-format 0.0.4 checker. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "conf/conf.h"
#include "conf/snapshot.h"
#include "http/http_metrics.h"
#include "shm/shm.h"

/* ---- strict exposition-format checker ---------------------------------------------- */

#define MAX_SERIES 4096
#define MAX_FAMS 256

struct checker {
	char *fams[MAX_FAMS];
	char *types[MAX_FAMS];
	bool help[MAX_FAMS];
	size_t n_fams;
	char *series[MAX_SERIES];
	size_t n_series;
	long cur;            /* family index whose samples may follow, -1 none */
	char err[256];
};

static bool name_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static bool name_char(char c)
{
	return name_start(c) || (c >= '0' && c <= '9');
}

/* Metric name [a-zA-Z_:][a-zA-Z0-9_:]*; returns its length or 0. */
static size_t metric_name(const char *p)
{
	size_t n = 0;
	if (!name_start(p[0]))
		return 0;
	while (name_char(p[n]))
		n++;
	return n;
}

static bool chk_fail(struct checker *c, const char *line, const char *why)
{
	snprintf(c->err, sizeof(c->err), "%s: \"%.120s\"", why, line);
	return false;
}

static long fam_find(struct checker *c, const char *name, size_t n)
{
	for (size_t i = 0; i < c->n_fams; i++)
		if (strlen(c->fams[i]) == n && strncmp(c->fams[i], name, n) == 0)
			return (long)i;
	return -1;
}

static bool check_comment(struct checker *c, const char *line)
{
	bool is_help = strncmp(line, "# HELP ", 7) == 0;
	bool is_type = strncmp(line, "# TYPE ", 7) == 0;
	if (!is_help && !is_type)
		return true;  /* other comments are allowed */
	const char *p = line + 7;
	size_t n = metric_name(p);
	if (n == 0 || p[n] != ' ')
		return chk_fail(c, line, "bad name in HELP/TYPE");
	long f = fam_find(c, p, n);
	if (is_help) {
		if (f >= 0)
			return chk_fail(c, line, "family declared twice");
		if (c->n_fams == MAX_FAMS)
			return chk_fail(c, line, "too many families");
		c->fams[c->n_fams] = strndup(p, n);
		c->types[c->n_fams] = NULL;
		c->help[c->n_fams] = p[n + 1] != '\0';
		c->cur = -1;
		c->n_fams++;
		return c->help[c->n_fams - 1] ? true : chk_fail(c, line, "empty HELP");
	}
	if (f < 0 || f != (long)c->n_fams - 1)
		return chk_fail(c, line, "TYPE without a directly preceding HELP");
	if (c->types[f] != NULL)
		return chk_fail(c, line, "TYPE twice");
	const char *t = p + n + 1;
	if (strcmp(t, "counter") && strcmp(t, "gauge") && strcmp(t, "histogram") &&
	    strcmp(t, "summary") && strcmp(t, "untyped"))
		return chk_fail(c, line, "unknown TYPE");
	c->types[f] = strdup(t);
	c->cur = f;
	return true;
}

/* {name="value",...}: names unique, values with only \\ \" \n escapes. */
static const char *check_labels(struct checker *c, const char *line, const char *p, bool *ok)
{
	char seen[16][64];
	size_t n_seen = 0;
	*ok = false;
	if (*p != '{')
		return (*ok = true), p;
	p++;
	while (*p != '}') {
		size_t n = 0;
		if (!(name_start(p[0]) && p[0] != ':'))
			return chk_fail(c, line, "bad label name"), p;
		while (name_char(p[n]) && p[n] != ':')
			n++;
		if (n >= 64 || n_seen == 16)
			return chk_fail(c, line, "label name too long"), p;
		for (size_t i = 0; i < n_seen; i++)
			if (strlen(seen[i]) == n && strncmp(seen[i], p, n) == 0)
				return chk_fail(c, line, "duplicate label"), p;
		memcpy(seen[n_seen], p, n);
		seen[n_seen++][n] = '\0';
		p += n;
		if (p[0] != '=' || p[1] != '"')
			return chk_fail(c, line, "expected =\""), p;
		for (p += 2; *p != '"'; p++) {
			if (*p == '\0' || *p == '\n')
				return chk_fail(c, line, "unterminated label value"), p;
			if (*p == '\\') {
				p++;
				if (*p != '\\' && *p != '"' && *p != 'n')
					return chk_fail(c, line, "bad escape"), p;
			}
		}
		p++;
		if (*p == ',')
			p++;
		else if (*p != '}')
			return chk_fail(c, line, "expected , or }"), p;
	}
	*ok = true;
	return p + 1;
}

static bool check_value(const char *v)
{
	if (!strcmp(v, "NaN") || !strcmp(v, "+Inf") || !strcmp(v, "-Inf"))
		return true;
	char *end;
	if (*v == '\0' || *v == ' ')
		return false;
	strtod(v, &end);
	return *end == '\0';
}

static bool check_sample(struct checker *c, const char *line)
{
	size_t n = metric_name(line);
	if (n == 0)
		return chk_fail(c, line, "bad metric name");
	if (c->cur < 0)
		return chk_fail(c, line, "sample outside its family (HELP/TYPE first, contiguous)");
	size_t fn = strlen(c->fams[c->cur]);
	if (!strcmp(c->types[c->cur], "histogram")) {
		/* name_bucket{...,le="x"} / name_sum / name_count, nothing else */
		char suf[16] = "";
		if (fn < n && n - fn < sizeof(suf) && !strncmp(c->fams[c->cur], line, fn))
			memcpy(suf, line + fn, n - fn);
		if (strcmp(suf, "_bucket") && strcmp(suf, "_sum") && strcmp(suf, "_count"))
			return chk_fail(c, line, "histogram sample not _bucket/_sum/_count");
		if (n - fn == 7 && strstr(line, "le=\"") == NULL)
			return chk_fail(c, line, "histogram bucket without le");
	} else if (fn != n || strncmp(c->fams[c->cur], line, n)) {
		return chk_fail(c, line, "sample outside its family (HELP/TYPE first, contiguous)");
	}
	if (!strcmp(c->types[c->cur], "counter") && (n < 6 || strncmp(line + n - 6, "_total", 6)))
		return chk_fail(c, line, "counter name without _total");
	bool ok;
	const char *p = check_labels(c, line, line + n, &ok);
	if (!ok)
		return false;
	if (*p != ' ')
		return chk_fail(c, line, "expected one space before the value");
	if (!check_value(p + 1))
		return chk_fail(c, line, "bad value");
	for (size_t i = 0; i < c->n_series; i++)
		if (strncmp(c->series[i], line, (size_t)(p - line)) == 0 &&
		    c->series[i][p - line] == '\0')
			return chk_fail(c, line, "duplicate series");
	if (c->n_series == MAX_SERIES)
		return chk_fail(c, line, "too many series");
	c->series[c->n_series++] = strndup(line, (size_t)(p - line));
	return true;
}

static void checker_free(struct checker *c)
{
	for (size_t i = 0; i < c->n_fams; i++) {
		free(c->fams[i]);
		free(c->types[i]);
	}
	for (size_t i = 0; i < c->n_series; i++)
		free(c->series[i]);
}

/* Returns true when text is valid; c->err says why not. */
static bool prom_check(const char *text, size_t len, struct checker *c)
{
	memset(c, 0, sizeof(*c));
	c->cur = -1;
	if (len == 0 || text[len - 1] != '\n' || strlen(text) != len)
		return chk_fail(c, "", "empty, NUL inside, or no final newline");
	char *copy = strndup(text, len), *save = NULL;
	bool ok = true;
	for (char *line = strtok_r(copy, "\n", &save); ok && line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '#')
			ok = check_comment(c, line);
		else
			ok = check_sample(c, line);
	}
	for (size_t i = 0; ok && i < c->n_fams; i++)
		if (c->types[i] == NULL)
			ok = chk_fail(c, c->fams[i], "family without TYPE");
	free(copy);
	return ok;
}

/* The value of one series ("name{labels}" exactly as rendered), or -1 when absent. */
static double value_of(const char *text, const char *series)
{
	size_t n = strlen(series);
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

static void test_checker_rejects(void **state)
{
	static const char *const bad[] = {
		"a_total 1\n",
		"# HELP a x\n# TYPE a counter\na 1\n",
		"# HELP a_total x\n# TYPE a_total counter\na_total{x=\"1\"} 1\na_total{x=\"1\"} 2\n",
		"# HELP g x\n# TYPE g gauge\ng{x=\"a\\q\"} 1\n",
		"# HELP g x\n# TYPE g gauge\ng{x=\"a\",x=\"b\"} 1\n",
		"# HELP g x\n# TYPE g gauge\ng 1x\n",
		"# HELP g x\n# TYPE g gauge\ng  1\n",
		"# HELP g x\n# TYPE g gauge\n# HELP h y\n# TYPE h gauge\ng 1\n",
		"# HELP g x\n# TYPE g gauge\ng 1",
		"# HELP g x\ng 1\n",
		"# TYPE g gauge\n# HELP g x\ng 1\n",
		"# HELP 1g x\n# TYPE 1g gauge\n",
		"# HELP g x\n# TYPE g flag\n",
		"# HELP h x\n# TYPE h histogram\nh 1\n",
		"# HELP h x\n# TYPE h histogram\nh_bucket 1\n",
		"# HELP h x\n# TYPE h histogram\nh_bkt{le=\"1\"} 1\n",
		"# HELP h x\n# TYPE h histogram\nh_buc 1\n",
	};
	struct checker c;
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		bool ok = prom_check(bad[i], strlen(bad[i]), &c);
		checker_free(&c);
		if (ok)
			fail_msg("checker accepted bad input %zu", i);
	}
	const char *good = "# HELP g x\n# TYPE g gauge\ng{a=\"q\\\"\\n\\\\\"} -1.5e3\ng 2\n";
	assert_true(prom_check(good, strlen(good), &c));
	checker_free(&c);
}

/* ---- fixture: shm with known counters, snapshot for names -------------------------- */

static const char cfg_yaml[] =
	"version: v1\n"
	"admin: {name: m}\n"
	"auth: {type: ephemeral, credentials: {secret: s}}\n"
	"listeners:\n"
	"  - {name: udp, protocol: TURN-UDP, address: 127.0.0.1, port: 3478, routes: [pods, \"we\\\"ird\"],\n"
	"     relay_port_min: 50000, relay_port_max: 50999}\n"
	"  - {name: tcp, protocol: TURN-TCP, address: 127.0.0.1, port: 3479, routes: [pods]}\n"
	"clusters:\n"
	"  - {name: pods, type: STATIC, endpoints: [10.0.0.0/8]}\n"
	"  - {name: \"we\\\"ird\", type: STATIC, endpoints: [10.1.0.0/16]}\n"
	"limits: {max_allocations: 100, total_quota: 40}\n";

struct fx {
	struct shm *shm;
	struct conf *cfg;
	void *blob;
	size_t blob_len;
	const struct snap *snap;
};

static int fx_setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	struct shm_config sc = {
		.n_slots = 3, .snap_count = 2, .snap_size = 4096, .alloc_cap = 100
	};
	struct conf_diags d = { 0 };
	struct snap_build_params p = { .generation = 7 };

	if (fx == NULL || shm_create(&sc, "test_http_metrics", &fx->shm) != 0)
		return -1;
	if (conf_load_string(cfg_yaml, sizeof(cfg_yaml) - 1, "m.yaml", NULL, &fx->cfg, &d) != 0) {
		conf_diags_print(&d, stderr);
		return -1;
	}
	conf_diags_free(&d);
	if (snap_build(fx->cfg, &p, &fx->blob, &fx->blob_len) != 0 ||
	    snap_open(fx->blob, fx->blob_len, &fx->snap) != 0)
		return -1;
	/* Slots 0 and 1 have run workers (slot 2 never did); slot 1 has died since. */
	for (unsigned s = 0; s < 2; s++)
		if (shm_slot_spawning(fx->shm, s, NULL) != 0)
			return -1;
	if (shm_slot_set_state(fx->shm, 0, SHM_SLOT_RUNNING) != 0 || shm_slot_reaped(fx->shm, 1))
		return -1;
	*state = fx;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *fx = *state;
	snap_blob_free(fx->blob, fx->blob_len);
	conf_free(fx->cfg);
	shm_destroy(fx->shm);
	free(fx);
	return 0;
}

static void bump(struct fx *fx)
{
	struct shm_counters *a = shm_slot_counters(fx->shm, 0), *b = shm_slot_counters(fx->shm, 1);
	assert_non_null(a);
	assert_non_null(b);
	shm_ctr_add(a, SHM_CTR_CLIENT_PKTS_IN, 10);
	shm_ctr_add(b, SHM_CTR_CLIENT_PKTS_IN, 5);
	shm_ctr_add(a, SHM_CTR_CLIENT_PKTS_OUT, 7);
	shm_ctr_add(b, SHM_CTR_PEER_PKTS_IN, 3);
	shm_ctr_add(a, SHM_CTR_PEER_PKTS_OUT, 4);
	shm_ctr_add(b, SHM_CTR_WAKES_COALESCED, 17);
	shm_lctr_add(a, 0, SHM_LCTR_CLIENT_PKTS_IN, 10);
	shm_lctr_add(b, 0, SHM_LCTR_CLIENT_PKTS_IN, 5);
	shm_lctr_add(a, 1, SHM_LCTR_CLIENT_BYTES_OUT, 1000);
	shm_lctr_add(b, 1, SHM_LCTR_CLIENT_BYTES_OUT, 234);
	shm_lctr_add(a, 0, SHM_LCTR_ALLOCS_ACTIVE, 3);
	shm_lctr_add(b, 0, SHM_LCTR_ALLOCS_ACTIVE, (uint64_t)-1);
	shm_cctr_add(a, 1, SHM_CCTR_PEER_PKTS_OUT, 4);
	shm_cctr_add(b, 1, SHM_CCTR_PEER_BYTES_IN, 99);
	/* Active allocations: 3 created in slot 0; slot 1 created 2, ended 3 (one adopted). */
	shm_ctr_add(a, SHM_CTR_ALLOCS_ACTIVE, 3);
	shm_ctr_add(b, SHM_CTR_ALLOCS_ACTIVE, (uint64_t)-1);
	shm_ctr_add(a, SHM_CTR_ALLOCS_CREATED, 3);
	shm_ctr_add(b, SHM_CTR_ALLOCS_CREATED, 2);
	shm_ctr_add(b, SHM_CTR_ALLOCS_ENDED, 3);
	shm_ctr_add(a, SHM_CTR_AUTH_FAIL_BAD_MAC, 2);
	shm_ctr_add(b, SHM_CTR_AUTH_FAIL_BAD_MAC, 1);
	shm_ctr_add(b, SHM_CTR_AUTH_FAIL_EXPIRED, 4);
	shm_ctr_add(a, SHM_CTR_PERM_DENIED, 6);
	shm_lctr_add(a, 1, SHM_LCTR_PERM_DENIED, 5);
	shm_lctr_add(b, 1, SHM_LCTR_PERM_DENIED, 1);
	/* TCP listener 1: slot 0 (live) holds 2 connections, dead slot 1 had 4 open when it
	 * died: only live slots count; the total counts every accept. */
	CMM_STORE_SHARED(a->lst[1][SHM_LCTR_CONNS_ACTIVE], 2);
	CMM_STORE_SHARED(b->lst[1][SHM_LCTR_CONNS_ACTIVE], 4);
	shm_lctr_add(a, 1, SHM_LCTR_CONNS_TOTAL, 9);
	shm_lctr_add(b, 1, SHM_LCTR_CONNS_TOTAL, 4);
	/* Lifetimes: 0 and 10 s in the first bucket, 11 s in the second, 4000 s in +Inf. */
	shm_ctr_observe_lifetime(a, 0);
	shm_ctr_observe_lifetime(a, 10);
	shm_ctr_observe_lifetime(b, 11);
	shm_ctr_observe_lifetime(b, 4000);
	shm_ctr_add(a, SHM_CTR_QUOTA_USER, 1);
	shm_ctr_add(b, SHM_CTR_ERR_MALFORMED, 8);
}

static char *render(struct fx *fx, const struct snap *snap, const struct http_master_stats *ms,
		    size_t *len)
{
	struct http_buf b = HTTP_BUF_INIT;
	assert_int_equal(http_metrics_render(fx->shm, snap, ms, &b), 0);
	char *t = http_buf_take(&b, len);
	assert_non_null(t);
	struct checker c;
	bool ok = prom_check(t, *len, &c);
	if (!ok)
		fail_msg("invalid exposition: %s", c.err);
	checker_free(&c);
	return t;
}

static void test_render_values(void **state)
{
	struct fx *fx = *state;
	struct http_proc_stats workers[3] = {
		{ .valid = true, .cpu_seconds = 1.5, .resident_bytes = 4096, .open_fds = 12 },
		{ .valid = false },
		{ .valid = false },
	};
	struct http_master_stats ms = {
		.generation = 7,
		.reloads_ok = 2,
		.reloads_failed = 1,
		.reloads_refused = 3,
		.worker_restarts = 1,
		.master = { .valid = true,
			    .cpu_seconds = 0.25,
			    .resident_bytes = 1 << 20,
			    .virtual_bytes = 1 << 24,
			    .start_time = 1700000000.5,
			    .open_fds = 9,
			    .max_fds = 1024 },
		.workers = workers,
		.n_workers = 3,
	};
	size_t len;

	bump(fx);
	char *t = render(fx, fx->snap, &ms, &len);
	static const struct {
		const char *series;
		double v;
	} want[] = {
		{ "stunner_allocations_active", 2 },
		{ "stunner_listener_packets_total{name=\"udp\",direction=\"rx\"}", 15 },
		{ "stunner_listener_packets_total{name=\"udp\",direction=\"tx\"}", 0 },
		{ "stunner_listener_packets_total{name=\"tcp\",direction=\"rx\"}", 0 },
		{ "stunner_listener_bytes_total{name=\"tcp\",direction=\"tx\"}", 1234 },
		{ "stunner_cluster_packets_total{name=\"we\\\"ird\",direction=\"tx\"}", 4 },
		{ "stunner_cluster_bytes_total{name=\"we\\\"ird\",direction=\"rx\"}", 99 },
		{ "stunner_cluster_bytes_total{name=\"pods\",direction=\"rx\"}", 0 },
		{ "turngate_listener_allocations_active{name=\"udp\"}", 2 },
		{ "turngate_listener_relay_ports{name=\"udp\"}", 1000 },
		{ "turngate_listener_relay_ports{name=\"tcp\"}", 16384 },
		{ "turngate_allocations_limit", 40 },
		{ "turngate_auth_failures_total{reason=\"bad_mac\"}", 3 },
		{ "turngate_auth_failures_total{reason=\"expired\"}", 4 },
		{ "turngate_auth_failures_total{reason=\"missing\"}", 0 },
		{ "turngate_permission_denied_total{listener=\"tcp\"}", 6 },
		{ "turngate_permission_denied_total{listener=\"udp\"}", 0 },
		{ "stunner_listener_connections{name=\"tcp\"}", 2 },
		{ "stunner_listener_connections_total{name=\"tcp\"}", 13 },
		/* UDP: one socket per live worker (slot 0); one per worker start (2 spawns). */
		{ "stunner_listener_connections{name=\"udp\"}", 1 },
		{ "stunner_listener_connections_total{name=\"udp\"}", 2 },
		{ "turngate_allocation_lifetime_seconds_bucket{le=\"10\"}", 2 },
		{ "turngate_allocation_lifetime_seconds_bucket{le=\"60\"}", 3 },
		{ "turngate_allocation_lifetime_seconds_bucket{le=\"3600\"}", 3 },
		{ "turngate_allocation_lifetime_seconds_bucket{le=\"+Inf\"}", 4 },
		{ "turngate_allocation_lifetime_seconds_sum", 4021 },
		{ "turngate_allocation_lifetime_seconds_count", 4 },
		{ "turngate_quota_rejections_total{kind=\"user\"}", 1 },
		{ "turngate_allocations_created_total", 5 },
		{ "turngate_allocations_ended_total", 3 },
		{ "turngate_errors_total{kind=\"malformed\"}", 8 },
		{ "turngate_client_packets_total{direction=\"rx\"}", 15 },
		{ "turngate_peer_packets_total{direction=\"tx\"}", 4 },
		{ "turngate_reloads_total{result=\"success\"}", 2 },
		{ "turngate_reloads_total{result=\"failure\"}", 1 },
		{ "turngate_reloads_total{result=\"refused\"}", 3 },
		{ "turngate_config_generation", 7 },
		{ "turngate_config_last_reload_successful", 0 },
		{ "turngate_worker_restarts_total", 1 },
		{ "turngate_draining", 0 },
		{ "turngate_worker_packets_total{worker=\"0\",direction=\"rx\"}", 10 },
		{ "turngate_worker_packets_total{worker=\"0\",direction=\"tx\"}", 11 },
		{ "turngate_worker_packets_total{worker=\"1\",direction=\"rx\"}", 8 },
		{ "turngate_worker_packets_total{worker=\"1\",direction=\"tx\"}", 0 },
		{ "turngate_worker_wakes_coalesced_total{worker=\"0\"}", 0 },
		{ "turngate_worker_wakes_coalesced_total{worker=\"1\"}", 17 },
		{ "turngate_worker_up{worker=\"0\"}", 1 },
		{ "turngate_worker_up{worker=\"1\"}", 0 },
		{ "process_cpu_seconds_total", 0.25 },
		{ "process_resident_memory_bytes", 1 << 20 },
		{ "process_start_time_seconds", 1700000000.5 },
		{ "process_open_fds", 9 },
		{ "process_max_fds", 1024 },
		{ "turngate_worker_cpu_seconds_total{worker=\"0\"}", 1.5 },
		{ "turngate_worker_resident_memory_bytes{worker=\"0\"}", 4096 },
		{ "turngate_worker_open_fds{worker=\"0\"}", 12 },
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		double v = value_of(t, want[i].series);
		if (v != want[i].v)
			fail_msg("%s = %g, want %g", want[i].series, v, want[i].v);
	}
	/* Slot 2 never ran: no series for it; dead workers have no process series. */
	assert_null(strstr(t, "worker=\"2\""));
	assert_null(strstr(t, "turngate_worker_cpu_seconds_total{worker=\"1\"}"));
	/* Live: one more packet shows at the next scrape. */
	shm_lctr_add(shm_slot_counters(fx->shm, 0), 0, SHM_LCTR_CLIENT_PKTS_IN, 1);
	free(t);
	t = render(fx, fx->snap, &ms, &len);
	assert_true(value_of(t, "stunner_listener_packets_total{name=\"udp\",direction=\"rx\"}") ==
		    16);
	free(t);
}

static void test_render_no_snap(void **state)
{
	struct fx *fx = *state;
	struct http_master_stats ms = { .draining = true, .last_reload_ok = true };
	size_t len;
	char *t = render(fx, NULL, &ms, &len);
	assert_null(strstr(t, "stunner_listener_packets_total{"));
	assert_non_null(strstr(t, "# TYPE stunner_listener_packets_total counter\n"));
	assert_true(value_of(t, "turngate_draining") == 1);
	assert_true(value_of(t, "turngate_config_last_reload_successful") == 1);
	/* no snapshot: no total_quota to read, the table's size is the limit */
	assert_true(value_of(t, "turngate_allocations_limit") == 100);
	assert_null(strstr(t, "process_cpu_seconds_total")); /* master stats invalid */
	free(t);
	struct http_buf b = HTTP_BUF_INIT;
	assert_int_equal(http_metrics_render(NULL, NULL, &ms, &b), -EINVAL);
	assert_int_equal(http_metrics_render(fx->shm, NULL, NULL, &b), -EINVAL);
}

static void test_escape(void **state)
{
	struct http_buf b = HTTP_BUF_INIT;
	(void)state;
	http_metrics_escape(&b, "a\\b\"c\nd");
	assert_string_equal(b.data, "a\\\\b\\\"c\\nd");
	http_buf_free(&b);
}

static void test_proc_read(void **state)
{
	struct http_proc_stats p;
	(void)state;
	assert_int_equal(http_proc_read(0, &p), 0);
	assert_true(p.valid);
	assert_true(p.resident_bytes > 0);
	assert_true(p.open_fds >= 3);
	assert_true(p.start_time > 1.0e9);
	assert_int_equal(http_proc_read(getpid(), &p), 0);
	assert_true(p.valid);
	assert_true(http_proc_read(-2, &p) < 0);
	assert_false(p.valid);
}

static void test_proc_read_workers(void **state)
{
	struct fx *fx = *state;
	struct http_proc_stats w[4];
	unsigned n = 0;
	/* Slot 0 "runs" this test process. */
	assert_int_equal(shm_slot_set_pid(fx->shm, 0, getpid()), 0);
	assert_int_equal(http_proc_read_workers(fx->shm, w, 4, &n), 0);
	assert_int_equal(n, 3);
	assert_true(w[0].valid);
	assert_false(w[1].valid);
	assert_false(w[2].valid);
	assert_int_equal(http_proc_read_workers(fx->shm, w, 1, &n), 0);
	assert_int_equal(n, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_checker_rejects),
		cmocka_unit_test(test_escape),
		cmocka_unit_test(test_proc_read),
		cmocka_unit_test_setup_teardown(test_render_values, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_render_no_snap, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_proc_read_workers, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
