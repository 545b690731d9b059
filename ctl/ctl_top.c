/* turngatectl top: the heaviest allocations and users by bit rate, live.
 *
 * The daemon's `top` command returns counters, not rates (per-user figures are never
 * metric labels): this client takes two samples an interval apart, divides by the time
 * between them (the daemon's monotonic clock of each sample), and sorts. An allocation is
 * matched across samples by its record index and generation; one that is new in the
 * second sample counts from zero. Throttled: datagrams of it were dropped by a bandwidth
 * limit within the interval, and which limit dropped the last of them. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl/ctl.h"

#define TOP_ROWS 20

struct top_row {
	json_t *a;			/* the allocation in the second sample (borrowed) */
	const char *user;
	double bps[2], pps[2];		/* to the peer, from the peer */
	const char *throttled;		/* "" when nothing was dropped in the interval */
	unsigned n;			/* users: allocations */
};

struct top_opts {
	bool once, as_json;
	double interval;
	long rows, count;
};

static uint64_t jint(json_t *arr, size_t i)
{
	json_int_t v = json_integer_value(json_array_get(arr, i));

	return v > 0 ? (uint64_t)v : 0;
}

/* The first sample's allocations sorted by id (unique within a sample). */
struct top_key {
	json_int_t id, gen;
	json_t *a;
};

static int by_id(const void *x, const void *y)
{
	const struct top_key *a = x, *b = y;

	return a->id < b->id ? -1 : a->id > b->id;
}

static struct top_key *top_index(json_t *prev, size_t *n)
{
	struct top_key *k = calloc(json_array_size(prev) + 1, sizeof(*k));
	size_t i;
	json_t *a;

	if (k == NULL)
		return NULL;
	json_array_foreach(prev, i, a)
		k[i] = (struct top_key){ json_integer_value(json_object_get(a, "id")),
					 json_integer_value(json_object_get(a, "gen")), a };
	*n = json_array_size(prev);
	qsort(k, *n, sizeof(*k), by_id);
	return k;
}

/* The allocation of a (id and gen) in the first sample, or NULL. */
static json_t *top_find(const struct top_key *k, size_t n, json_t *a)
{
	struct top_key want = { json_integer_value(json_object_get(a, "id")),
				json_integer_value(json_object_get(a, "gen")), NULL };
	const struct top_key *hit = bsearch(&want, k, n, sizeof(*k), by_id);

	return hit != NULL && hit->gen == want.gen ? hit->a : NULL;
}

static double delta(json_t *a, json_t *p, const char *key, size_t i)
{
	uint64_t now = jint(json_object_get(a, key), i);
	uint64_t then = p ? jint(json_object_get(p, key), i) : 0;

	return now > then ? (double)(now - then) : 0.0;
}

static void top_fill(struct top_row *r, json_t *a, json_t *p, double dt)
{
	static const char *const dirs[] = { "to_peer", "from_peer" };

	memset(r, 0, sizeof(*r));
	r->a = a;
	r->user = json_string_value(json_object_get(a, "user"));
	r->user = r->user ? r->user : "";
	r->n = 1;
	r->throttled = "";
	for (size_t d = 0; d < 2; d++) {
		r->bps[d] = delta(a, p, dirs[d], 1) * 8 / dt;
		r->pps[d] = delta(a, p, dirs[d], 0) / dt;
		if (delta(a, p, "dropped", d) > 0)
			r->throttled = json_string_value(
				json_array_get(json_object_get(a, "limited_by"), d));
	}
	if (r->throttled == NULL)
		r->throttled = "";
}

static double row_bps(const struct top_row *r)
{
	return r->bps[0] + r->bps[1];
}

static int by_rate(const void *x, const void *y)
{
	const struct top_row *a = x, *b = y;
	double d = row_bps(b) - row_bps(a);

	if (d == 0)
		d = (b->pps[0] + b->pps[1]) - (a->pps[0] + a->pps[1]);
	return d > 0 ? 1 : d < 0 ? -1 : 0;
}

static int by_user(const void *x, const void *y)
{
	return strcmp(((const struct top_row *)x)->user, ((const struct top_row *)y)->user);
}

/* Sums rows into one row per user (users has room for n rows); returns their number. */
static size_t top_users(const struct top_row *rows, size_t n, struct top_row *users)
{
	size_t nu = 0;

	memcpy(users, rows, n * sizeof(*rows));
	qsort(users, n, sizeof(*users), by_user);
	for (size_t i = 0; i < n; i++) {
		struct top_row *u = &users[nu - (nu > 0)];

		if (nu == 0 || strcmp(u->user, users[i].user) != 0) {
			users[nu] = users[i];
			users[nu++].a = NULL;
			continue;
		}
		for (size_t d = 0; d < 2; d++) {
			u->bps[d] += users[i].bps[d];
			u->pps[d] += users[i].pps[d];
		}
		u->n++;
		if (users[i].throttled[0] != '\0')
			u->throttled = users[i].throttled;
	}
	return nu;
}

static json_t *row_json(const struct top_row *r)
{
	json_t *o = json_pack("{s:s, s:f, s:f, s:f, s:f, s:f, s:s?}", "user", r->user, "bps",
			      row_bps(r), "to_peer_bps", r->bps[0], "from_peer_bps", r->bps[1],
			      "to_peer_pps", r->pps[0], "from_peer_pps", r->pps[1], "throttled",
			      r->throttled[0] ? r->throttled : NULL);

	if (o == NULL)
		return NULL;
	if (r->a == NULL) {
		json_object_set_new(o, "allocations", json_integer(r->n));
		return o;
	}
	for (const char *const *k = (const char *const[]){ "id", "listener", "worker", "age",
							   "permissions", "channels", NULL };
	     *k; k++)
		json_object_set(o, *k, json_object_get(r->a, *k));
	return o;
}

static void human_rate(double bps, char *buf, size_t len)
{
	static const char *const units[] = { "b", "k", "M", "G", "T" };
	unsigned u = 0;

	while (bps >= 1000 && u + 1 < sizeof(units) / sizeof(units[0])) {
		bps /= 1000;
		u++;
	}
	snprintf(buf, len, "%.1f%s", bps, units[u]);
}

/* The widest of the first max rows' users and listeners, at least the old fixed widths:
 * names are printed whole (a gateway's "ns/gateway/listener" names differ at their end)
 * and the columns after them stay aligned. */
static void row_widths(const struct top_row *rows, size_t n, long max, int *wu, int *wl)
{
	*wu = 24;
	*wl = 12;
	for (size_t i = 0; i < n && (long)i < max; i++) {
		const char *l = rows[i].a ? json_string_value(json_object_get(rows[i].a, "listener"))
					  : NULL;
		int nu = (int)strlen(rows[i].user), nl = l ? (int)strlen(l) : 0;

		*wu = nu > *wu ? nu : *wu;
		*wl = nl > *wl ? nl : *wl;
	}
}

static void print_rows(const struct top_row *rows, size_t n, long max, bool users, FILE *out)
{
	char tx[16], rx[16];
	int wu, wl;

	row_widths(rows, n, max, &wu, &wl);
	if (users)
		fprintf(out, "%-*s %6s %9s %9s %9s %s\n", wu, "USER", "ALLOCS", "TO_PEER",
			"FROM_PEER", "PPS", "THROTTLED");
	else
		fprintf(out, "%-6s %-*s %-*s %3s %7s %5s %5s %9s %9s %9s %s\n", "ID", wu, "USER",
			wl, "LISTENER", "WK", "AGE", "PERMS", "CHANS", "TO_PEER", "FROM_PEER", "PPS",
			"THROTTLED");
	for (size_t i = 0; i < n && (long)i < max; i++) {
		const struct top_row *r = &rows[i];
		const char *l;
		double pps = r->pps[0] + r->pps[1];

		human_rate(r->bps[0], tx, sizeof(tx));
		human_rate(r->bps[1], rx, sizeof(rx));
		if (users) {
			fprintf(out, "%-*s %6u %9s %9s %9.0f %s\n", wu, r->user, r->n, tx, rx, pps,
				r->throttled);
			continue;
		}
		l = json_string_value(json_object_get(r->a, "listener"));
		fprintf(out, "%-6lld %-*s %-*s %3lld %6.0fs %5lld %5lld %9s %9s %9.0f %s\n",
			(long long)json_integer_value(json_object_get(r->a, "id")), wu, r->user, wl,
			l ? l : "", (long long)json_integer_value(json_object_get(r->a, "worker")),
			json_real_value(json_object_get(r->a, "age")),
			(long long)json_integer_value(json_object_get(r->a, "permissions")),
			(long long)json_integer_value(json_object_get(r->a, "channels")), tx, rx, pps,
			r->throttled);
	}
}

/* One refresh from samples prev and cur: prints it (human or JSON). Returns 0 or -ENOMEM. */
static int top_show(const struct top_opts *o, json_t *prev, json_t *cur, FILE *out)
{
	json_t *pa = json_object_get(prev, "allocations"), *ca = json_object_get(cur, "allocations");
	double dt = json_number_value(json_object_get(cur, "mono")) -
		    json_number_value(json_object_get(prev, "mono"));
	size_t n = json_array_size(ca), nu, i, nk = 0;
	struct top_row *rows = calloc(n ? n : 1, sizeof(*rows));
	struct top_row *users = calloc(n ? n : 1, sizeof(*users));
	struct top_key *keys = top_index(pa, &nk);
	json_t *a;

	if (rows == NULL || users == NULL || keys == NULL) {
		free(rows);
		free(users);
		free(keys);
		return -ENOMEM;
	}
	if (!(dt > 0))
		dt = o->interval;
	json_array_foreach(ca, i, a)
		top_fill(&rows[i], a, top_find(keys, nk, a), dt);
	free(keys);
	qsort(rows, n, sizeof(*rows), by_rate);
	nu = top_users(rows, n, users);
	qsort(users, nu, sizeof(*users), by_rate);
	if (o->as_json) {
		json_t *ja = json_array(), *ju = json_array(), *res;

		for (i = 0; i < n && (long)i < o->rows; i++)
			json_array_append_new(ja, row_json(&rows[i]));
		for (i = 0; i < nu && (long)i < o->rows; i++)
			json_array_append_new(ju, row_json(&users[i]));
		res = json_pack("{s:f, s:i, s:O, s:o, s:o}", "interval", dt, "live", (int)n,
				"limits", json_object_get(cur, "limits"), "allocations", ja, "users",
				ju);
		json_dumpf(res, out, JSON_INDENT(2));
		fputc('\n', out);
		json_decref(res);
	} else {
		json_t *lim = json_object_get(cur, "limits");
		char ab[16], ub[16];

		human_rate((double)json_integer_value(json_object_get(lim, "allocation_bps")), ab,
			   sizeof(ab));
		human_rate((double)json_integer_value(json_object_get(lim, "user_bps")), ub,
			   sizeof(ub));
		if (!o->once)
			fputs("\033[H\033[2J", out);
		fprintf(out,
			"turngate top: %zu allocations, %zu users, rates over %.2f s; limits: "
			"allocation %s, user %s (0b: none)\n\n",
			n, nu, dt, ab, ub);
		print_rows(rows, n, o->rows, false, out);
		fputc('\n', out);
		print_rows(users, nu, o->rows, true, out);
	}
	fflush(out);
	free(rows);
	free(users);
	return 0;
}

static int top_args(struct top_opts *o, int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		char *end;

		if (strcmp(argv[i], "--once") == 0) {
			o->once = true;
		} else if (strcmp(argv[i], "--json") == 0) {
			o->as_json = true;
		} else if (strcmp(argv[i], "--interval") == 0 && i + 1 < argc) {
			o->interval = strtod(argv[++i], &end);
			if (*end != '\0' || !(o->interval >= 0.1 && o->interval <= 60))
				return -EINVAL;
		} else if ((strcmp(argv[i], "--rows") == 0 || strcmp(argv[i], "--count") == 0) &&
			   i + 1 < argc) {
			long *dst = argv[i][2] == 'r' ? &o->rows : &o->count;

			*dst = strtol(argv[++i], &end, 10);
			if (*end != '\0' || *dst < 1 || *dst > 1000000)
				return -EINVAL;
		} else {
			return -EINVAL;
		}
	}
	return 0;
}

static int top_sample(const char *sock, json_t **out)
{
	json_t *reply = NULL;
	int rc = ctl_call(sock, json_pack("{s:s}", "cmd", "top"), &reply);

	if (rc == CTL_EXIT_ERROR)
		ctl_print_error("top", reply, stderr);
	if (rc != CTL_EXIT_OK) {
		json_decref(reply);
		return rc;
	}
	*out = reply;
	return 0;
}

int ctl_top_main(const char *sock, bool as_json, int argc, char **argv)
{
	struct top_opts o = { .as_json = as_json, .interval = 1.0, .rows = TOP_ROWS };
	json_t *prev = NULL, *cur = NULL;
	int rc;

	if (top_args(&o, argc, argv) < 0)
		return CTL_EXIT_USAGE;
	if (o.once)
		o.count = 1;
	rc = top_sample(sock, &prev);
	for (long k = 0; rc == 0 && (o.count == 0 || k < o.count); k++) {
		struct timespec ts = { (time_t)o.interval, 0 };

		ts.tv_nsec = (long)((o.interval - (double)ts.tv_sec) * 1e9);
		nanosleep(&ts, NULL);
		rc = top_sample(sock, &cur);
		if (rc != 0)
			break;
		if (top_show(&o, prev, cur, stdout) < 0)
			rc = CTL_EXIT_ERROR;
		json_decref(prev);
		prev = cur;
		cur = NULL;
	}
	json_decref(prev);
	return rc;
}
