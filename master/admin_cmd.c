/* Master: admin commands (status, config, reload, allocations, top, disconnect, drain, stats,
 * workers, loglevel, upgrade). */
#include "config.h"

#include "master/admin.h"
#include "master/records.h"
#include "master/revoke.h"
#include "master/disconnect.h"
#include "master/linger.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/ipc.h"
#include "common/log.h"
#include "common/mono.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_bw.h"
#include "shm/shm_lslot.h"
#include "shm/shm_quota.h"
#include "shm/shm_relay.h"
#include "shm/shm_source.h"

typedef json_t *(*cmd_fn)(struct master *m, json_t *req);

static json_t *err(const char *msg)
{
	return json_pack("{s:b, s:s}", "ok", 0, "error", msg);
}

static double unix_of(const struct master *m, double ev_t)
{
	/* ev_now is wall-clock based in libev (ev_time), so it is already unix time. */
	(void)m;
	return ev_t;
}

static const char *outcome_name(enum reload_outcome o)
{
	return o == RELOAD_APPLIED ? "applied" : o == RELOAD_REFUSED ? "refused" : "failed";
}

static json_t *reload_json(const struct master *m)
{
	const struct reload_result *r = &m->last_reload;

	/* "o" steals: a reference of our own either way (an "O" on a fresh array leaked it). */
	return json_pack("{s:b, s:s, s:s?, s:b, s:f, s:s, s:o}", "ok", r->ok, "result",
			 outcome_name(r->outcome), "reason", r->reason, "forced", r->forced,
			 "at", unix_of(m, r->at), "trigger",
			 r->trigger != NULL ? r->trigger : "", "errors",
			 r->errors != NULL ? json_incref(r->errors) : json_array());
}

static unsigned workers_running(const struct master *m)
{
	unsigned n = 0;

	for (unsigned i = 0; i < m->n_slots; i++)
		if (m->workers[i].state == MW_RUNNING)
			n++;
	return n;
}

/* ports: also look for another process on each listener's port ("shared_with"; socket
 * diagnostics, so only on request: turngatectl doctor). */
static json_t *listeners_json(const struct master *m, bool ports)
{
	json_t *arr = json_array();
	char who[256];

	for (size_t i = 0; i < m->n_listeners && arr != NULL; i++) {
		const struct mlistener *l = &m->listeners[i];
		bool shared = ports && listener_foreign_holder(m, l, who, sizeof(who));

		json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:i, s:s?}", "name", l->name,
						     "protocol", conf_proto_name(l->proto),
						     "address", l->bind_text, "port", (int)l->port,
						     "shared_with", shared ? who : NULL));
	}
	return arr;
}

/* The sources that tripped a per-source budget most (shm/shm_source.h), most first. */
static json_t *refused_sources_json(const struct master *m)
{
	struct shm_src_top top[10];
	size_t n = shm_src_top_read(m->shm, top, 10);
	uint64_t now = mono_ns();
	json_t *a = json_array();

	for (size_t i = 0; a != NULL && i < n; i++) {
		char ip[INET6_ADDRSTRLEN] = "?";

		inet_ntop(top[i].addr.family, top[i].addr.addr, ip, sizeof(ip));
		json_array_append_new(
			a, json_pack("{s:s, s:s, s:I, s:f}", "address", ip, "reason",
				     shm_src_reason_name((enum shm_src_reason)top[i].reason)
					     ? shm_src_reason_name((enum shm_src_reason)top[i].reason)
					     : "?",
				     "trips", (json_int_t)top[i].trips, "seconds_ago",
				     now > top[i].last_ns ? (double)(now - top[i].last_ns) / 1e9 : 0.0));
	}
	return a;
}

static json_t *cmd_status(struct master *m, json_t *req)
{
	bool ports = json_is_true(json_object_get(req, "ports"));
	json_t *r;

	r = json_pack("{s:b, s:s, s:i, s:f, s:I, s:s, s:o, s:b, s:{s:i, s:i, s:s}, s:i, s:o, "
			 "s:{s:i, s:I}, s:I, s:{s:s?, s:i}, s:o, s:o?, s:o?}",
			 "ok", 1, "version", PACKAGE_VERSION, "pid", (int)getpid(), "uptime",
			 ev_now(m->loop) - m->started_at, "generation", (json_int_t)m->generation,
			 "config_source", m->config_path != NULL ? m->config_path : "<default>",
			 "last_reload", reload_json(m), "draining", m->draining, "workers",
			 "configured", (int)m->n_slots, "running", (int)workers_running(m),
			 "source", m->workers_why, "allocations", (int)master_alloc_count(m),
			 "listeners", listeners_json(m, ports),
			 "snapshots", "pending", (int)m->snaps_pending, "reclaimed",
			 (json_int_t)m->snaps_reclaimed, "unknown_routes",
			 (json_int_t)(m->cfg ? m->cfg->n_unknown_routes : 0), "state", "file",
			 m->state_path, "taken_over", (int)m->takeover_adopted, "offload",
			 master_offload_json(m), "siblings",
			 m->cfg ? conf_siblings_json(m->cfg) : json_array(), "dns",
			 dns_refresh_json(m));
	if (r != NULL)
		json_object_set_new(r, "refused_sources", refused_sources_json(m));
	if (r != NULL)
		json_object_set_new(r, "table", master_sizing_json(m));
	if (r != NULL)
		json_object_set_new(r, "lingering", linger_status(m));
	return r;
}

static json_t *cmd_config(struct master *m, json_t *req)
{
	json_t *c = conf_to_json_redacted(m->cfg);

	(void)req;
	if (c == NULL)
		return err("cannot render the configuration");
	return json_pack("{s:b, s:o}", "ok", 1, "config", c);
}

/* logrotate's postrotate: the session record file opened again (as SIGUSR1 does). */
static json_t *cmd_logrotate(struct master *m, json_t *req)
{
	(void)req;
	records_reopen(m);
	return json_pack("{s:b}", "ok", 1);
}

static json_t *cmd_reload(struct master *m, json_t *req)
{
	json_t *force = json_object_get(req, "force");
	char msg[1200];
	int rc;

	if (force != NULL && !json_is_boolean(force))
		return err("\"force\" must be true or false");
	if (upgrade_in_progress(m))
		return err(RELOAD_UPGRADE_BUSY);
	rc = reload_run(m, "admin", json_is_true(force) ? RELOAD_FORCE : 0);
	if (rc == 0)
		return json_pack("{s:b, s:I, s:O, s:s?, s:b}", "ok", 1, "generation",
				 (json_int_t)m->generation, "warnings", m->last_reload.errors,
				 "reason", m->last_reload.reason, "forced", m->last_reload.forced);
	if (rc == -ECANCELED) {
		snprintf(msg, sizeof(msg),
			 "%s; refused: the running configuration is unchanged (--force "
			 "applies it)",
			 m->last_reload.reason != NULL ? m->last_reload.reason : "?");
		return json_pack("{s:b, s:b, s:s, s:s?, s:O}", "ok", 0, "refused", 1, "error",
				 msg, "reason", m->last_reload.reason, "errors",
				 m->last_reload.errors);
	}
	return json_pack("{s:b, s:s, s:O}", "ok", 0, "error",
			 rc == -EINVAL ? "invalid configuration; the running one is unchanged"
				       : "reload failed; the running configuration is unchanged",
			 "errors", m->last_reload.errors);
}

static json_t *cmd_drain(struct master *m, json_t *req)
{
	json_t *on = json_object_get(req, "on");

	if (on != NULL && !json_is_boolean(on))
		return err("\"on\" must be true or false");
	master_set_drain(m, on == NULL || json_is_true(on));
	log_info("admin", "drain: %s, %u allocation(s) live",
		 m->draining ? "on (new allocations refused)" : "off (new allocations accepted)",
		 master_alloc_count(m));
	return json_pack("{s:b, s:b, s:i}", "ok", 1, "draining", m->draining, "allocations",
			 (int)master_alloc_count(m));
}

static json_t *cmd_loglevel(struct master *m, json_t *req)
{
	json_t *spec = json_object_get(req, "spec");
	const char *s;
	int rc;

	if (spec == NULL)
		return json_pack("{s:b, s:s, s:s}", "ok", 1, "spec",
				 m->log_override != NULL
					 ? m->log_override
					 : (m->cfg->admin.loglevel != NULL ? m->cfg->admin.loglevel
									   : "all:INFO"),
				 "source", m->log_override != NULL ? "override" : "config");
	if (!json_is_string(spec))
		return err("\"spec\" must be a string such as \"all:INFO,turn:DEBUG\"");
	s = json_string_value(spec);
	/* "config" drops the override: the config file's loglevel applies again. */
	rc = reload_set_loglevel(m, strcmp(s, "config") == 0 ? NULL : s);
	if (rc == -EINVAL)
		return err("malformed log spec (expected e.g. \"all:INFO,turn:DEBUG\")");
	if (rc < 0)
		return err(strerror(-rc));
	return cmd_loglevel(m, NULL);
}

static json_t *cmd_workers(struct master *m, json_t *req)
{
	json_t *arr = json_array();
	double now = mono_s();

	(void)req;
	for (unsigned i = 0; i < m->n_slots && arr != NULL; i++) {
		const struct mworker *w = &m->workers[i];
		struct shm_slot_info si;
		json_t *o;

		memset(&si, 0, sizeof(si));
		shm_slot_read(m->shm, i, &si);
		o = json_pack("{s:i, s:i, s:s, s:I, s:i, s:f, s:f}", "slot", (int)i, "pid",
			      (int)w->pid, "state", supervise_state_name(w->state), "incarnation",
			      (json_int_t)si.incarnation, "restarts", (int)w->restarts, "uptime",
			      w->pid > 0 ? now - w->started_at : 0.0, "last_pong_age",
			      w->pid > 0 ? now - w->last_pong : 0.0);
		if (o != NULL && w->last_status != -1)
			json_object_set_new(o, "last_exit", json_integer(w->last_status));
		/* Online: inside a loop iteration, may hold a snapshot (0 = offline). */
		if (o != NULL)
			json_object_set_new(o, "online", json_boolean(w->pid > 0 && si.qs != 0));
		json_array_append_new(arr, o);
	}
	return json_pack("{s:b, s:o}", "ok", 1, "workers", arr);
}

static json_t *cmd_stats(struct master *m, json_t *req)
{
	struct shm_counters sum;
	json_t *ctr = json_object(), *lst = json_object();

	(void)req;
	memset(&sum, 0, sizeof(sum));
	shm_counters_sum(m->shm, &sum);
	master_offload_add(m, &sum);
	for (int i = 0; i < SHM_CTR__COUNT && ctr != NULL; i++)
		json_object_set_new(ctr, shm_ctr_name(i), json_integer((json_int_t)sum.v[i]));
	/* Listener counters are at each listener's slot (shm/shm_lslot.h). */
	for (size_t l = 0; l < m->cfg->n_listeners && lst; l++) {
		json_t *o;
		uint32_t s;

		if (shm_lslot_find(m->shm, m->cfg->listeners[l].name, &s) < 0)
			continue;
		o = json_object();
		for (int i = 0; i < SHM_LCTR__COUNT && o != NULL; i++)
			json_object_set_new(o, shm_lctr_name(i),
					    json_integer((json_int_t)sum.lst[s][i]));
		json_object_set_new(lst, m->cfg->listeners[l].name, o);
	}
	return json_pack("{s:b, s:i, s:o, s:o}", "ok", 1, "allocations", (int)master_alloc_count(m),
			 "counters", ctr, "listeners", lst);
}

/* ---- allocations --------------------------------------------------------------------- */

static json_t *addr_json(const struct shm_addr *a)
{
	char ip[INET6_ADDRSTRLEN], buf[INET6_ADDRSTRLEN + 10];

	if (a->family != AF_INET && a->family != AF_INET6)
		return json_null();
	inet_ntop(a->family, a->addr, ip, sizeof(ip));
	snprintf(buf, sizeof(buf), a->family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, a->port);
	return json_string(buf);
}

static double left_s(uint64_t expires_ns, uint64_t now)
{
	return expires_ns > now ? (double)(expires_ns - now) / 1e9 : 0.0;
}

static const char *transport_name(unsigned t)
{
	static const char *const names[] = { "none", "udp", "tcp", "tls", "dtls" };

	return t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

static json_t *perms_json(const struct shm_alloc *r, uint64_t now)
{
	json_t *arr = json_array();

	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS && arr != NULL; i++) {
		char ip[INET6_ADDRSTRLEN];

		if (r->perms[i].family != AF_INET && r->perms[i].family != AF_INET6)
			continue;
		inet_ntop(r->perms[i].family, r->perms[i].addr, ip, sizeof(ip));
		json_array_append_new(arr, json_pack("{s:s, s:f}", "peer", ip, "expires_in",
						     left_s(r->perms[i].expires_ns, now)));
	}
	return arr;
}

static json_t *chans_json(const struct shm_alloc *r, uint64_t now)
{
	json_t *arr = json_array();

	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS && arr != NULL; i++) {
		if (r->chans[i].number == 0)
			continue;
		json_array_append_new(arr, json_pack("{s:i, s:o, s:f}", "number",
						     (int)r->chans[i].number, "peer",
						     addr_json(&r->chans[i].peer), "expires_in",
						     left_s(r->chans[i].expires_ns, now)));
	}
	return arr;
}

/* The configured listener that holds slot (shm/shm_lslot.h), NULL when none does (the
 * listener was removed by a reload and its slot is kept for its allocations). */
static const struct conf_listener *listener_of(const struct master *m, unsigned slot)
{
	uint32_t s;

	for (size_t i = 0; i < m->cfg->n_listeners; i++)
		if (shm_lslot_find(m->shm, m->cfg->listeners[i].name, &s) == 0 && s == slot)
			return &m->cfg->listeners[i];
	return NULL;
}

/* The name of the listener a record was made on, by its slot: a removed listener's too.
 * The buffer is static: use the result before the next call. */
static const char *listener_name(const struct master *m, unsigned slot)
{
	static char buf[SHM_LSLOT_NAME_MAX];
	const struct conf_listener *l = listener_of(m, slot);

	if (l != NULL)
		return l->name;
	if (shm_lslot_name(m->shm, slot, buf, sizeof(buf), NULL) == 0)
		return buf;
	return "?";
}

/* The relay address as the client was told it: with the listener's relay_address_mask in
 * place of the address when the listener masks that family. */
static struct shm_addr relay_announced(const struct master *m, const struct shm_alloc *r,
				       const struct shm_addr *relay)
{
	const struct conf_listener *l = listener_of(m, r->listener_idx);
	const struct sockaddr_storage *mask;
	struct shm_addr out = *relay;

	if (l == NULL)
		return out;
	mask = &l->relay_mask_addr;
	if (mask->ss_family != relay->family)
		return out;
	memset(out.addr, 0, sizeof(out.addr));
	if (mask->ss_family == AF_INET)
		memcpy(out.addr, &((const struct sockaddr_in *)mask)->sin_addr, 4);
	else
		memcpy(out.addr, &((const struct sockaddr_in6 *)mask)->sin6_addr, 16);
	return out;
}

/* The per-record counts from peers, with what other workers delivered by the short
 * circuit (shm/shm_relay.h). */
static void from_peer_counts(const struct master *m, uint32_t idx, const struct shm_alloc *r,
			     uint64_t *pkts, uint64_t *bytes)
{
	shm_relay_ctr_get(m->shm, idx, pkts, bytes);
	*pkts += r->ctr[SHM_ACTR_PKTS_FROM_PEER];
	*bytes += r->ctr[SHM_ACTR_BYTES_FROM_PEER];
}

static json_t *alloc_json(const struct master *m, uint32_t idx, const struct shm_alloc *r,
			  uint64_t now)
{
	struct shm_addr relay = relay_announced(m, r, &r->relay);
	uint64_t from_pkts, from_bytes;
	/* Lengths come from another process: never trust them past the arrays. */
	int ulen = r->user_len < SHM_ALLOC_USER_MAX ? r->user_len : SHM_ALLOC_USER_MAX;
	int rlen = r->realm_len < SHM_ALLOC_REALM_MAX ? r->realm_len : SHM_ALLOC_REALM_MAX;
	struct shm_bw_stat bw = { 0 };
	json_t *o = json_pack("{s:i, s:I, s:i, s:s#, s:s#, s:s, s:s, s:o, s:o, s:o, s:f, s:f}",
			      "id", (int)idx, "gen", (json_int_t)r->gen, "worker", (int)r->owner,
			      "user", r->username, ulen, "realm",
			      r->realm, rlen, "listener", listener_name(m, r->listener_idx),
			      "transport", transport_name(r->client_transport), "client",
			      addr_json(&r->client), "server", addr_json(&r->server), "relay",
			      addr_json(&relay), "age",
			      now > r->created_ns ? (double)(now - r->created_ns) / 1e9 : 0.0,
			      "lifetime_left", left_s(r->expires_ns, now));

	if (o == NULL)
		return NULL;
	(void)shm_bw_alloc_stat(m->shm, idx, &bw);
	if (memcmp(&relay, &r->relay, sizeof(relay)) != 0)
		json_object_set_new(o, "relay_internal", addr_json(&r->relay));
	if (r->relay2.family != 0)
		json_object_set_new(o, "relay2", addr_json(&r->relay2));
	from_peer_counts(m, idx, r, &from_pkts, &from_bytes);
	json_object_set_new(o, "permissions", perms_json(r, now));
	json_object_set_new(o, "channels", chans_json(r, now));
	json_object_set_new(o, "tcp_connections", json_integer(bw.tcp_conns));
	json_object_set_new(o, "to_peer",
			    json_pack("{s:I, s:I}", "packets",
				      (json_int_t)r->ctr[SHM_ACTR_PKTS_TO_PEER], "bytes",
				      (json_int_t)r->ctr[SHM_ACTR_BYTES_TO_PEER]));
	json_object_set_new(o, "from_peer",
			    json_pack("{s:I, s:I}", "packets", (json_int_t)from_pkts, "bytes",
				      (json_int_t)from_bytes));
	return o;
}

/* The whole username, or for a TURN REST username "<expiry>:<user>" the user part: the
 * test the workers apply to IPC_DISC_USER too. */
static bool user_match(const char *want, const struct shm_alloc *r)
{
	size_t len = r->user_len < SHM_ALLOC_USER_MAX ? r->user_len : SHM_ALLOC_USER_MAX;

	return shm_quota_user_match(r->username, len, want, strlen(want));
}

struct alloc_filter {
	const char *user, *listener;
	json_int_t worker; /* -1: any */
	json_int_t limit;  /* 1..ADMIN_PAGE_MAX: 0 would page without moving the cursor */
	json_int_t cursor; /* record index the page starts at */
};

static bool alloc_match(const struct master *m, const struct alloc_filter *f,
			const struct shm_alloc *r)
{
	if (f->user != NULL && !user_match(f->user, r))
		return false;
	if (f->listener != NULL && strcmp(f->listener, listener_name(m, r->listener_idx)) != 0)
		return false;
	return f->worker < 0 || f->worker == r->owner;
}

static int parse_filter(json_t *req, struct alloc_filter *f)
{
	json_t *u = json_object_get(req, "user"), *l = json_object_get(req, "listener");
	json_t *w = json_object_get(req, "worker"), *lim = json_object_get(req, "limit");
	json_t *cur = json_object_get(req, "cursor");

	f->user = f->listener = NULL;
	f->worker = -1;
	f->limit = ADMIN_DEFAULT_LIMIT;
	f->cursor = 0;
	if ((u != NULL && !json_is_string(u)) || (l != NULL && !json_is_string(l)) ||
	    (w != NULL && (!json_is_integer(w) || json_integer_value(w) < 0)) ||
	    (lim != NULL && (!json_is_integer(lim) || json_integer_value(lim) < 1)) ||
	    (cur != NULL && (!json_is_integer(cur) || json_integer_value(cur) < 0)))
		return -EINVAL;
	f->user = u != NULL ? json_string_value(u) : NULL;
	f->listener = l != NULL ? json_string_value(l) : NULL;
	if (w != NULL)
		f->worker = json_integer_value(w);
	if (lim != NULL)
		f->limit = json_integer_value(lim);
	if (f->limit > ADMIN_PAGE_MAX)
		f->limit = ADMIN_PAGE_MAX;
	if (cur != NULL)
		f->cursor = json_integer_value(cur);
	return 0;
}

/* One page of the live allocations that match, from the record index `cursor` on:
 * next_cursor is where the next page starts, null once the table's end was reached. */
static json_t *cmd_allocations(struct master *m, json_t *req)
{
	struct shm_alloc rec;
	struct alloc_filter f;
	json_t *arr;
	uint32_t cap = shm_alloc_capacity(m->shm), cursor, idx, end;
	uint64_t now = mono_ns();

	if (parse_filter(req, &f) < 0)
		return err("filters: user and listener are strings, worker and cursor "
			   "non-negative integers, limit a positive integer");
	cursor = f.cursor < (json_int_t)cap ? (uint32_t)f.cursor : cap;
	end = cap - cursor > ADMIN_PAGE_SCAN ? cursor + ADMIN_PAGE_SCAN : cap;
	arr = json_array();
	while (arr != NULL && cursor < end && (json_int_t)json_array_size(arr) < f.limit) {
		if (shm_alloc_next_live_before(m->shm, &cursor, end, &idx) < 0)
			break;
		if (shm_alloc_read_copy(m->shm, idx, &rec) < 0 ||
		    SHM_ALLOC_WORD_STATE(rec.state) != SHM_ALLOC_LIVE || !alloc_match(m, &f, &rec))
			continue;
		json_array_append_new(arr, alloc_json(m, idx, &rec, now));
	}
	explicit_bzero(&rec, sizeof(rec));
	return json_pack("{s:b, s:o, s:b, s:o}", "ok", 1, "allocations", arr, "truncated",
			 cursor < cap, "next_cursor",
			 cursor < cap ? json_integer(cursor) : json_null());
}

/* ---- top -------------------------------------------------------------------------- */

static const char *bw_verdict_name(enum shm_bw_verdict v)
{
	static const char *const names[] = { "", "allocation", "user", "listener" };

	return (unsigned)v < sizeof(names) / sizeof(names[0]) ? names[v] : "";
}

/* The user an allocation counts under (shm_quota_user_key): a REST username's user id,
 * else the whole username. */
static json_t *quota_user_json(const struct shm_alloc *r)
{
	size_t len = r->user_len < SHM_ALLOC_USER_MAX ? r->user_len : SHM_ALLOC_USER_MAX;
	size_t off = shm_quota_user_off(r->username, len);

	return json_stringn(r->username + off, len - off);
}

static json_t *top_alloc_json(const struct master *m, uint32_t idx, const struct shm_alloc *r,
			      uint64_t now)
{
	struct shm_bw_stat bw;
	unsigned perms = 0, chans = 0;
	uint64_t from_pkts, from_bytes;

	memset(&bw, 0, sizeof(bw));
	from_peer_counts(m, idx, r, &from_pkts, &from_bytes);
	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS; i++)
		perms += r->perms[i].family != 0 && r->perms[i].expires_ns > now;
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++)
		chans += r->chans[i].number != 0 && r->chans[i].expires_ns > now;
	(void)shm_bw_alloc_stat(m->shm, idx, &bw);
	return json_pack("{s:i, s:I, s:o, s:s, s:i, s:f, s:i, s:i, s:[I,I], s:[I,I], s:[I,I], "
			 "s:[s,s]}",
			 "id", (int)idx, "gen", (json_int_t)r->gen, "user", quota_user_json(r),
			 "listener", listener_name(m, r->listener_idx), "worker", (int)r->owner,
			 "age", now > r->created_ns ? (double)(now - r->created_ns) / 1e9 : 0.0,
			 "permissions", (int)perms, "channels", (int)chans, "to_peer",
			 (json_int_t)r->ctr[SHM_ACTR_PKTS_TO_PEER],
			 (json_int_t)r->ctr[SHM_ACTR_BYTES_TO_PEER], "from_peer",
			 (json_int_t)from_pkts, (json_int_t)from_bytes, "dropped",
			 (json_int_t)bw.drops[SHM_BW_TO_PEER],
			 (json_int_t)bw.drops[SHM_BW_TO_CLIENT], "limited_by",
			 bw_verdict_name(bw.last[SHM_BW_TO_PEER]),
			 bw_verdict_name(bw.last[SHM_BW_TO_CLIENT]));
}

static json_t *top_limits_json(const struct master *m)
{
	const struct conf_limits *l = &m->cfg->limits;
	json_t *lst = json_object();

	for (size_t i = 0; i < m->cfg->n_listeners && lst != NULL; i++)
		json_object_set_new(lst, m->cfg->listeners[i].name,
				    json_integer((json_int_t)m->cfg->listeners[i].max_bps));
	return json_pack("{s:I, s:I, s:i, s:o}", "allocation_bps", (json_int_t)l->allocation_bps,
			 "user_bps", (json_int_t)l->user_bps, "bandwidth_burst_ms",
			 (int)l->bandwidth_burst_ms, "listener_bps", lst);
}

/* The live counters behind `turngatectl top`: every live allocation's relayed packets and
 * bytes, bandwidth drops and the limit that dropped last, with the monotonic time of the
 * sample; the client takes two samples and divides (docs/operations.md). */
/* A ranked row as `turngatectl top` prints it: rates over the interval, and for an
 * allocation its listener, worker, age, permissions and channels (from a copy of its
 * record, NULL when it ended meanwhile). */
static json_t *top_row_json(struct master *m, const struct admin_top_pick *p, double dt,
			    bool user, uint64_t now)
{
	struct shm_alloc rec;
	json_t *o = NULL, *a;
	int lim = p->limited[1] != 0 ? p->limited[1] : p->limited[0];

	if (shm_alloc_read_copy(m->shm, p->idx, &rec) < 0 || rec.gen != p->gen)
		goto out;
	o = json_pack("{s:o, s:f, s:f, s:f, s:f, s:f, s:s?}", "user", quota_user_json(&rec),
		      "bps", (double)(p->bytes[0] + p->bytes[1]) * 8 / dt, "to_peer_bps",
		      (double)p->bytes[0] * 8 / dt, "from_peer_bps", (double)p->bytes[1] * 8 / dt,
		      "to_peer_pps", (double)p->pkts[0] / dt, "from_peer_pps",
		      (double)p->pkts[1] / dt, "throttled",
		      lim != 0 ? bw_verdict_name((enum shm_bw_verdict)lim) : NULL);
	if (o == NULL || user) {
		if (o != NULL)
			json_object_set_new(o, "allocations", json_integer(p->n));
		goto out;
	}
	a = top_alloc_json(m, p->idx, &rec, now);
	for (const char *const *k = (const char *const[]){ "id", "gen", "listener", "worker",
							   "age", "permissions", "channels",
							   NULL };
	     *k != NULL && a != NULL; k++)
		json_object_set(o, *k, json_object_get(a, *k));
	json_decref(a);
out:
	explicit_bzero(&rec, sizeof(rec));
	return o;
}

/* {"cmd":"top","rows":N}: the master ranks (master/admin_top.c) and answers N rows of
 * allocations and of users by bit rate since the previous ranked sample; a reply whose
 * size does not grow with the table. */
static json_t *cmd_top_ranked(struct master *m, json_int_t rows)
{
	struct admin_top_result r;
	json_t *ja, *ju;
	double dt;

	if (admin_top_rank(m, (size_t)rows, &r) < 0)
		return err("out of memory");
	dt = r.interval > 0 ? r.interval : 1.0;
	ja = json_array();
	ju = json_array();
	for (size_t i = 0; i < r.n_allocs && ja != NULL; i++) {
		json_t *o = top_row_json(m, &r.allocs[i], dt, false, r.mono);

		if (o != NULL)
			json_array_append_new(ja, o);
	}
	for (size_t i = 0; i < r.n_users && ju != NULL; i++) {
		json_t *o = top_row_json(m, &r.users[i], dt, true, r.mono);

		if (o != NULL)
			json_array_append_new(ju, o);
	}
	admin_top_result_free(&r);
	return json_pack("{s:b, s:f, s:f, s:i, s:i, s:o, s:o, s:o}", "ok", 1, "mono",
			 (double)r.mono / 1e9, "interval", r.interval, "live", (int)r.live,
			 "users_live", (int)r.n_users_seen, "limits", top_limits_json(m),
			 "allocations", ja, "users", ju);
}

static json_t *cmd_top(struct master *m, json_t *req)
{
	struct shm_alloc rec;
	json_t *arr, *lim = json_object_get(req, "limit"), *rows = json_object_get(req, "rows");
	json_int_t limit = 100000;
	uint32_t cursor = 0, idx;
	uint64_t now = mono_ns();
	bool truncated = false;

	if (rows != NULL) {
		if (!json_is_integer(rows) || json_integer_value(rows) < 0 ||
		    json_integer_value(rows) > ADMIN_TOP_ROWS_MAX)
			return err("\"rows\" must be an integer 0..1000");
		return cmd_top_ranked(m, json_integer_value(rows));
	}
	if (lim != NULL && (!json_is_integer(lim) || json_integer_value(lim) < 0))
		return err("\"limit\" must be a non-negative integer");
	arr = json_array();
	if (lim != NULL)
		limit = json_integer_value(lim);
	while (arr != NULL && shm_alloc_next_live(m->shm, &cursor, &idx) == 0) {
		if (shm_alloc_read_copy(m->shm, idx, &rec) < 0 ||
		    SHM_ALLOC_WORD_STATE(rec.state) != SHM_ALLOC_LIVE)
			continue;
		if ((json_int_t)json_array_size(arr) >= limit) {
			truncated = true;
			break;
		}
		json_array_append_new(arr, top_alloc_json(m, idx, &rec, now));
	}
	explicit_bzero(&rec, sizeof(rec));
	return json_pack("{s:b, s:f, s:o, s:o, s:b}", "ok", 1, "mono", (double)now / 1e9,
			 "limits", top_limits_json(m), "allocations", arr, "truncated", truncated);
}

_Static_assert(IPC_USER_MAX - 1 == 515, "disconnect_user's error message");

static bool pick_user(struct master *m, const struct shm_alloc *rec, const void *arg)
{
	(void)m;
	return user_match(arg, rec);
}

/* Ends every live allocation of user (whole username or REST user part): one frame to each
 * worker that owns any (master/disconnect.h); the reply counts what they end. */
static json_t *disconnect_user(struct master *m, json_t *user)
{
	struct disconnect_tally t;
	const char *name = json_string_value(user);
	json_t *reply;

	if (!json_is_string(user) || strlen(name) != json_string_length(user) ||
	    disconnect_many(m, name, pick_user, name, "a user is disconnected", &t) < 0)
		return err("\"user\" must be a non-empty string of at most 515 bytes without NUL");
	/* What was done, beside the audit line of what was asked. */
	log_info("admin", "disconnect: ending %u allocation(s) of user %.256s on %u worker(s), "
		 "%u not reached", t.ended, name, t.workers, t.not_reached);
	reply = json_pack("{s:b}", "ok", 1);
	if (reply != NULL)
		disconnect_tally_json(reply, &t);
	return reply;
}

/* "id" of a disconnect: N, or [N, G] (the record's generation too: `allocations` lists
 * both; an id alone may have been reused since). The array is how a client asks for the
 * check: a master older than it refuses a non-integer "id" with the same error, so the
 * request fails closed there instead of ending whatever allocation holds N. 0, or -1. */
static int disconnect_id_parse(const struct master *m, json_t *id, uint32_t *idx, bool *has_gen,
			       uint64_t *gen)
{
	json_t *n = id, *g = NULL;

	if (json_is_array(id)) {
		if (json_array_size(id) != 2)
			return -1;
		n = json_array_get(id, 0);
		g = json_array_get(id, 1);
		if (!json_is_integer(g) || json_integer_value(g) < 0)
			return -1;
	}
	if (!json_is_integer(n) || json_integer_value(n) < 0 ||
	    json_integer_value(n) >= (json_int_t)shm_alloc_capacity(m->shm))
		return -1;
	*idx = (uint32_t)json_integer_value(n);
	*has_gen = g != NULL;
	*gen = g != NULL ? (uint64_t)json_integer_value(g) : 0;
	return 0;
}

/* {"cmd":"disconnect","id":N} or "id":[N,G]: ends the allocation at record N, if its
 * generation is G where given. The worker is sent the generation read here and ends the
 * record only if it still has it. */
static json_t *cmd_disconnect(struct master *m, json_t *req)
{
	struct shm_alloc rec;
	json_t *id = json_object_get(req, "id"), *user = json_object_get(req, "user");
	uint32_t idx;
	uint64_t gen;
	bool has_gen;
	int rc;

	if ((id == NULL) == (user == NULL))
		return err("give exactly one of \"id\" (allocation id) or \"user\"");
	if (user != NULL)
		return disconnect_user(m, user);
	if (disconnect_id_parse(m, id, &idx, &has_gen, &gen) < 0)
		return err("\"id\" must be an allocation id from `allocations`, or [id, gen]");
	rc = shm_alloc_read_copy(m->shm, idx, &rec);
	explicit_bzero(rec.key, sizeof(rec.key));
	if (rc < 0 || SHM_ALLOC_WORD_STATE(rec.state) != SHM_ALLOC_LIVE ||
	    (has_gen && rec.gen != gen))
		return err("no such allocation");
	if (rec.owner >= m->n_slots || m->workers[rec.owner].ctl_fd < 0)
		return err("the allocation's worker is not running");
	rc = ipc_send_disconnect_index(m->workers[rec.owner].ctl_fd, idx, rec.gen);
	if (rc < 0)
		return err(strerror(-rc));
	/* Kept until the worker ends it: a worker killed before it reads the frame leaves it
	 * to its replacement (master/discsent.h). Out of memory: sent, not kept. */
	(void)discsent_add_index(&m->workers[rec.owner].disc, m->shm, rec.owner, idx, rec.gen);
	log_info("admin", "disconnect: ending allocation %u of user %.*s (worker %u, gen %llu)",
		 idx, (int)(rec.user_len < SHM_ALLOC_USER_MAX ? rec.user_len : SHM_ALLOC_USER_MAX),
		 rec.username, (unsigned)rec.owner, (unsigned long long)rec.gen);
	return json_pack("{s:b, s:i, s:i}", "ok", 1, "disconnected", 1, "worker", (int)rec.owner);
}

/* {"cmd":"upgrade","binary":PATH?,"timeout":SECONDS?}: starts a live upgrade; its outcome
 * is asked with upgrade_status (the admin socket is the new master's once it serves). */
static json_t *cmd_upgrade(struct master *m, json_t *req)
{
	json_t *bin = json_object_get(req, "binary"), *tmo = json_object_get(req, "timeout");
	char why[PATH_MAX + 256];

	if (m->up == NULL)
		return err("live upgrade is not available in this process");
	if (bin != NULL && !json_is_string(bin))
		return err("\"binary\" must be a path");
	if (tmo != NULL &&
	    (!json_is_number(tmo) || json_number_value(tmo) <= 0 || json_number_value(tmo) > 3600))
		return err("\"timeout\" must be seconds in (0, 3600]");
	if (upgrade_begin(m, bin ? json_string_value(bin) : NULL, tmo ? json_number_value(tmo) : 0,
			  why, sizeof(why)) < 0)
		return err(why);
	return json_pack("{s:b, s:o}", "ok", 1, "upgrade", upgrade_status(m));
}

static json_t *cmd_upgrade_status(struct master *m, json_t *req)
{
	(void)req;
	return json_pack("{s:b, s:o}", "ok", 1, "upgrade", upgrade_status(m));
}

/* Who may do what: every connected peer may run every command (the socket's mode and
 * group decide who connects); a command that changes something is logged with the
 * peer's uid and pid; root_arg is an argument only a privileged peer may give. */
static const struct admin_cmd {
	const char *name;
	cmd_fn fn;
	const char *writes;    /* NULL: reads only; "": changes something; "KEY": if KEY is given */
	const char *root_arg;  /* NULL, or an argument only a privileged peer may give */
	/* Where it writes, refused from a live upgrade's hand-over on (upgrade_handover_busy):
	 * it changes what the new master copies (the table, the snapshot) or acts on workers
	 * that are stopping. revoke and unrevoke check it themselves (HTTP /revoke too). */
	bool handover;
	/* A command that changes something takes these arguments (space-separated) and no
	 * others: a misspelt one must not leave the most drastic default to run. */
	const char *args;
} commands[] = {
	{ "status", cmd_status, NULL, NULL, false, NULL },
	{ "config", cmd_config, NULL, NULL, false, NULL },
	{ "reload", cmd_reload, "", NULL, false, "force" },
	{ "logrotate", cmd_logrotate, "", NULL, false, "" },
	{ "allocations", cmd_allocations, NULL, NULL, false, NULL },
	{ "top", cmd_top, NULL, NULL, false, NULL },
	{ "disconnect", cmd_disconnect, "", NULL, true, "id user" },
	{ "drain", cmd_drain, "", NULL, true, "on" },
	{ "stats", cmd_stats, NULL, NULL, false, NULL },
	{ "workers", cmd_workers, NULL, NULL, false, NULL },
	{ "loglevel", cmd_loglevel, "spec", NULL, true, "spec" },
	/* The binary runs as the daemon's user: naming one is for those who could run it so
	 * themselves. Without it the daemon re-executes its own binary. */
	{ "upgrade", cmd_upgrade, "", "binary", false, "binary timeout" },
	{ "upgrade_status", cmd_upgrade_status, NULL, NULL, false, NULL },
	{ "revoke", revoke_cmd_add, "", NULL, false, "user user_id for" },
	{ "unrevoke", revoke_cmd_del, "", NULL, false, "user user_id" },
	{ "revocations", revoke_cmd_list, NULL, NULL, false, NULL },
};

/* Root, or the daemon's own user (who could run any program as that user anyway). */
static bool peer_privileged(const struct admin_peer *peer)
{
	return peer->uid == 0 || peer->uid == geteuid();
}

static bool cmd_writes(const struct admin_cmd *c, json_t *req)
{
	return c->writes != NULL && (c->writes[0] == '\0' || json_object_get(req, c->writes));
}

/* Whether key is "cmd" or one of the space-separated words of args. */
static bool arg_known(const char *args, const char *key)
{
	size_t n = strlen(key);

	for (const char *p = args; *p != '\0';) {
		size_t len = strcspn(p, " ");

		if (len == n && memcmp(p, key, n) == 0)
			return true;
		p += len + (p[len] == ' ');
	}
	return strcmp(key, "cmd") == 0;
}

/* NULL, or the first argument of req that c does not take (c->args: NULL takes any). */
static const char *arg_unknown(const struct admin_cmd *c, json_t *req)
{
	const char *key;
	json_t *v;

	if (c->args != NULL)
		json_object_foreach(req, key, v)
			if (!arg_known(c->args, key))
				return key;
	return NULL;
}

/* Runs c for peer: the audit line first (so that it is written whatever the command does,
 * a loglevel change included), the refusal after. */
static json_t *cmd_run(struct master *m, const struct admin_cmd *c, const struct admin_peer *peer,
		       json_t *req)
{
	bool audit = cmd_writes(c, req);
	const char *unknown = arg_unknown(c, req);
	json_t *reply;
	char *text = NULL;

	if (audit) {
		text = json_dumps(req, JSON_COMPACT | JSON_SORT_KEYS);
		log_info("admin", "uid=%d pid=%d: %.512s", (int)peer->uid, (int)peer->pid,
			 text != NULL ? text : c->name);
	}
	if (unknown != NULL) {
		char why[192];

		snprintf(why, sizeof(why), "%s: unknown argument \"%.64s\" (it takes: %s)",
			 c->name, unknown, c->args[0] ? c->args : "none");
		reply = err(why);
	} else if (c->handover && audit && upgrade_handover_busy(m) != NULL) {
		reply = err(upgrade_handover_busy(m));
	} else if (c->root_arg != NULL && json_object_get(req, c->root_arg) != NULL &&
		   !peer_privileged(peer)) {
		char why[160];

		snprintf(why, sizeof(why),
			 "\"%s\" is for root (uid 0) or the daemon's own user, not uid %d",
			 c->root_arg, (int)peer->uid);
		reply = err(why);
	} else {
		reply = c->fn(m, req);
	}
	if (audit && reply != NULL && !json_is_true(json_object_get(reply, "ok"))) {
		const char *e = json_string_value(json_object_get(reply, "error"));

		log_info("admin", "uid=%d pid=%d: %s refused: %s", (int)peer->uid,
			 (int)peer->pid, c->name, e != NULL ? e : "?");
	}
	free(text);
	return reply;
}

json_t *admin_dispatch(struct master *m, const struct admin_peer *peer, const char *line,
		       size_t len)
{
	json_error_t jerr;
	json_t *req, *cmd, *reply = NULL;
	const char *name;

	assert(m->magic == MASTER_MAGIC);
	req = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (req == NULL)
		return err("malformed request: expected one JSON object per line");
	if (!json_is_object(req)) {
		reply = err("malformed request: expected a JSON object");
		goto out;
	}
	cmd = json_object_get(req, "cmd");
	if (!json_is_string(cmd)) {
		reply = err("missing \"cmd\" (a string)");
		goto out;
	}
	name = json_string_value(cmd);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(commands[i].name, name) == 0) {
			log_debug("admin", "command %s", name);
			reply = cmd_run(m, &commands[i], peer, req);
			goto out;
		}
	}
	reply = err("unknown command");
out:
	json_decref(req);
	return reply;
}
