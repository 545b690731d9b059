/* Master: revocation commands over the admin socket and the HTTP API (contract in
 * master/revoke.h; the list in shm/shm_revoke.h). */
#include "config.h"

#include "master/revoke.h"
#include "master/disconnect.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_revoke.h"

#define STR(x) #x
#define XSTR(x) STR(x)
#define REVOKE_MAX_SECS (INT64_C(100) * 366 * 86400)

/* What a request names: the kind and the name, or why it does not. */
struct revoke_target {
	enum shm_revoke_kind kind;
	const char *name;
	size_t len;
};

static json_t *err(const char *msg)
{
	return json_pack("{s:b, s:s}", "ok", 0, "error", msg);
}

int revoke_parse_duration(const char *s, int64_t *secs)
{
	char *end;
	long long v;
	int64_t unit = 1;

	if (s == NULL || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s)
		return -EINVAL;
	if (*end != '\0') {
		const char *units = "smhd", *u = strchr(units, *end);
		static const int64_t mul[] = { 1, 60, 3600, 86400 };

		if (u == NULL || end[1] != '\0')
			return -EINVAL;
		unit = mul[u - units];
	}
	if (v <= 0 || v > REVOKE_MAX_SECS / unit)
		return -EINVAL;
	*secs = (int64_t)v * unit;
	return 0;
}

/* "user" or "user_id", exactly one, a non-empty string of at most SHM_REVOKE_NAME_MAX
 * bytes without NUL. NULL, or the error message. */
static const char *target_of(json_t *req, struct revoke_target *t)
{
	json_t *u = json_object_get(req, "user"), *id = json_object_get(req, "user_id");
	json_t *v = u != NULL ? u : id;

	if ((u == NULL) == (id == NULL))
		return "give exactly one of \"user\" (a TURN username) or \"user_id\" (the user "
		       "id of TURN REST usernames)";
	if (!json_is_string(v) || json_string_length(v) == 0 ||
	    json_string_length(v) > SHM_REVOKE_NAME_MAX ||
	    strlen(json_string_value(v)) != json_string_length(v))
		return "the user must be a non-empty string of at most " XSTR(
			SHM_REVOKE_NAME_MAX) " bytes";
	t->kind = u != NULL ? SHM_REVOKE_USER : SHM_REVOKE_USER_ID;
	t->name = json_string_value(v);
	t->len = json_string_length(v);
	return NULL;
}

/* The "for" argument: absent (0: until removed), whole seconds, or a duration string. */
static const char *for_of(json_t *req, int64_t *secs)
{
	json_t *f = json_object_get(req, "for");
	static const char *const bad = "\"for\" must be a duration: seconds, or a number with "
				       "s, m, h or d (\"30s\", \"2h\", \"7d\")";

	*secs = 0;
	if (f == NULL || json_is_null(f))
		return NULL;
	if (json_is_integer(f)) {
		if (json_integer_value(f) <= 0 || json_integer_value(f) > REVOKE_MAX_SECS)
			return bad;
		*secs = json_integer_value(f);
		return NULL;
	}
	if (!json_is_string(f) || revoke_parse_duration(json_string_value(f), secs) < 0)
		return bad;
	return NULL;
}

static json_t *ent_json(const struct shm_revoke_ent *e, int64_t now)
{
	json_t *o = json_pack("{s:s, s:s#, s:I}", "kind", shm_revoke_kind_name(e->kind), "name",
			      e->name, (int)e->len, "since", (json_int_t)e->since);

	if (o == NULL)
		return NULL;
	json_object_set_new(o, "until", e->until ? json_integer(e->until) : json_null());
	json_object_set_new(o, "left", e->until ? json_integer(e->until - now) : json_null());
	return o;
}

/* What revoke_cmd_add counts: the entry it is about to store, at now. */
struct revoking {
	const struct revoke_target *t;
	int64_t now;
};

/* Whether the list refuses the record once the new entry is in: the entry, or one already
 * there. */
static bool pick_revoking(struct master *m, const struct shm_alloc *rec, const void *arg)
{
	const struct revoking *r = arg;
	size_t len = rec->user_len < SHM_ALLOC_USER_MAX ? rec->user_len : SHM_ALLOC_USER_MAX;

	return shm_revoke_names(r->t->kind, r->t->name, r->t->len, rec->username, len) ||
	       shm_revoke_match(m->shm, rec->username, len, r->now);
}

/* The entry as stored, for the reply. */
static json_t *stored_json(const struct master *m, const struct revoke_target *t, int64_t now)
{
	struct shm_revoke_ent *all = calloc(SHM_REVOKE_MAX, sizeof(*all));
	unsigned n;
	json_t *o = json_null();

	if (all == NULL)
		return o;
	n = shm_revoke_list(m->shm, now, all, SHM_REVOKE_MAX);
	for (unsigned i = 0; i < n; i++)
		if (all[i].kind == (uint32_t)t->kind && all[i].len == t->len &&
		    memcmp(all[i].name, t->name, t->len) == 0) {
			json_decref(o);
			o = ent_json(&all[i], now);
			break;
		}
	free(all);
	return o;
}

json_t *revoke_cmd_add(struct master *m, json_t *req)
{
	struct revoke_target t;
	struct disconnect_tally tally;
	struct disconnect_plan plan;
	int64_t now = (int64_t)time(NULL), secs;
	const char *why = target_of(req, &t);
	json_t *reply;
	int rc;

	if (why == NULL)
		why = for_of(req, &secs);
	if (why == NULL)
		why = upgrade_handover_busy(m);
	if (why != NULL)
		return err(why);
	/* Counted before the entry is stored: once it is, a worker's own sweep
	 * (wk_revoke_sweep) may end some before the walk reaches them, and the reply would
	 * count fewer than the user held. An Allocate that passes its check between this walk
	 * and the store is not counted; the frames' sweep (or the next one) ends it all the
	 * same. The frames go after the store, so that the workers' sweep sees the entry. */
	disconnect_count(m, pick_revoking, &(struct revoking){ .t = &t, .now = now }, &plan);
	rc = shm_revoke_add(m->shm, t.kind, t.name, t.len, now, secs ? now + secs : 0);
	if (rc < 0)
		disconnect_plan_free(&plan);
	if (rc == -ENOSPC) {
		char msg[160];

		snprintf(msg, sizeof(msg),
			 "the revocation list is full (%u entries): remove entries "
			 "(turngatectl unrevoke) or let them expire",
			 SHM_REVOKE_MAX);
		return err(msg);
	}
	if (rc < 0)
		return err(strerror(-rc));
	/* One frame to each worker that owns any, which sweeps at once (master/disconnect.h).
	 * The not reached end all the same: at their worker's own sweep, or at its
	 * replacement's adoption (adopt_one_try). */
	disconnect_send(m, NULL, &plan, "a credential is revoked", &tally);
	if (secs)
		log_info("master", "revoked %s %.*s for %lld s: %u allocation(s) ended, %u not "
			 "reached", shm_revoke_kind_name(t.kind), (int)t.len, t.name,
			 (long long)secs, tally.ended, tally.not_reached);
	else
		log_info("master", "revoked %s %.*s until removed: %u allocation(s) ended, %u not "
			 "reached", shm_revoke_kind_name(t.kind), (int)t.len, t.name, tally.ended,
			 tally.not_reached);
	reply = json_pack("{s:b, s:o, s:b}", "ok", 1, "revoked", stored_json(m, &t, now),
			  "renewed", rc == 1);
	if (reply != NULL)
		disconnect_tally_json(reply, &tally);
	return reply;
}

json_t *revoke_cmd_del(struct master *m, json_t *req)
{
	struct revoke_target t;
	const char *why = target_of(req, &t);
	int rc;

	if (why == NULL)
		why = upgrade_handover_busy(m);
	if (why != NULL)
		return err(why);
	rc = shm_revoke_del(m->shm, t.kind, t.name, t.len);
	if (rc == -ENOENT)
		return err("no such revocation");
	if (rc < 0)
		return err(strerror(-rc));
	log_info("master", "revocation of %s %.*s removed", shm_revoke_kind_name(t.kind),
		   (int)t.len, t.name);
	return json_pack("{s:b, s:i}", "ok", 1, "removed", 1);
}

json_t *revoke_cmd_list(struct master *m, json_t *req)
{
	struct shm_revoke_ent *all = calloc(SHM_REVOKE_MAX, sizeof(*all));
	int64_t now = (int64_t)time(NULL);
	json_t *arr = json_array();
	unsigned n;

	(void)req;
	if (all == NULL || arr == NULL) {
		free(all);
		json_decref(arr);
		return err("out of memory");
	}
	shm_revoke_prune(m->shm, now);
	n = shm_revoke_list(m->shm, now, all, SHM_REVOKE_MAX);
	for (unsigned i = 0; i < n; i++)
		json_array_append_new(arr, ent_json(&all[i], now));
	free(all);
	return json_pack("{s:b, s:o, s:i, s:i}", "ok", 1, "revocations", arr, "count", (int)n,
			 "capacity", (int)SHM_REVOKE_MAX);
}

/* ---- HTTP --------------------------------------------------------------------------- */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decodes s[0..n) ('+' is a space) into a new JSON string; NULL on a bad escape,
 * a NUL, or more than SHM_REVOKE_NAME_MAX bytes. */
static json_t *decode(const char *s, size_t n)
{
	char buf[SHM_REVOKE_NAME_MAX + 1];
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)s[i];

		if (c == '%') {
			if (i + 2 >= n || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0)
				return NULL;
			c = hexval(s[i + 1]) * 16 + hexval(s[i + 2]);
			i += 2;
		} else if (c == '+') {
			c = ' ';
		}
		if (c == 0 || k >= SHM_REVOKE_NAME_MAX)
			return NULL;
		buf[k++] = (char)c;
	}
	return json_stringn(buf, k);
}

/* The query as an admin request: user=, user_id=, for= (each at most once). */
static int query_req(const char *q, size_t len, json_t *req, const char **why)
{
	size_t i = 0;

	while (q != NULL && i < len) {
		size_t end = i, eq;
		json_t *v;
		const char *key;

		while (end < len && q[end] != '&')
			end++;
		for (eq = i; eq < end && q[eq] != '='; eq++)
			;
		if (eq - i == 4 && memcmp(q + i, "user", 4) == 0)
			key = "user";
		else if (eq - i == 7 && memcmp(q + i, "user_id", 7) == 0)
			key = "user_id";
		else if (eq - i == 3 && memcmp(q + i, "for", 3) == 0)
			key = "for";
		else if (eq == i && end == i)
			key = NULL;	/* an empty part ("a=1&&b=2") */
		else {
			*why = "unknown parameter: use user=, user_id= and for=";
			return -EINVAL;
		}
		if (key != NULL) {
			v = decode(q + eq + (eq < end), end - eq - (eq < end));
			if (v == NULL || json_object_get(req, key) != NULL) {
				json_decref(v);
				*why = "bad or repeated parameter";
				return -EINVAL;
			}
			json_object_set_new(req, key, v);
		}
		i = end + 1;
	}
	return 0;
}

static unsigned status_of(json_t *reply, const char *method)
{
	const char *e;

	if (json_is_true(json_object_get(reply, "ok")))
		return 200;
	e = json_string_value(json_object_get(reply, "error"));
	if (e != NULL && strncmp(e, "the revocation list is full", 27) == 0)
		return 507;
	if (e != NULL && strcmp(e, UPGRADE_HANDOVER_BUSY) == 0)
		return 503;
	if (e != NULL && strcmp(method, "DELETE") == 0 && strcmp(e, "no such revocation") == 0)
		return 404;
	return 400;
}

int revoke_http(void *ctx, const char *method, const char *query, size_t len,
		struct http_buf *out, unsigned *status)
{
	struct master *m = ctx;
	json_t *req = json_object(), *reply;
	const char *why = NULL;
	char *text;

	if (req == NULL)
		return -ENOMEM;
	if (query_req(query, len, req, &why) < 0)
		reply = err(why);
	else if (strcmp(method, "GET") == 0)
		reply = revoke_cmd_list(m, req);
	else if (strcmp(method, "POST") == 0)
		reply = revoke_cmd_add(m, req);
	else
		reply = revoke_cmd_del(m, req);
	json_decref(req);
	if (reply == NULL)
		return -ENOMEM;
	*status = status_of(reply, method);
	text = json_dumps(reply, JSON_COMPACT);
	json_decref(reply);
	if (text == NULL)
		return -ENOMEM;
	http_buf_puts(out, text);
	http_buf_puts(out, "\n");
	free(text);
	return 0;
}
