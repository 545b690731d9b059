/* turngatectl top: the heaviest allocations and users by bit rate, live.
 *
 * Per-user figures are never metric labels: the daemon ranks (master/admin_top.c). This
 * client asks for a ranked sample (the baseline), waits the interval, and asks again:
 * the daemon answers the `--rows` heaviest allocations and users by bit rate since the
 * previous sample, so a refresh costs the same whatever the table's size. Throttled:
 * datagrams of it were dropped by a bandwidth limit within the interval, and which
 * limit dropped the last of them. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl/ctl.h"

#define TOP_ROWS 20
#define TOP_ROWS_MAX 1000 /* the daemon's ADMIN_TOP_ROWS_MAX */

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

/* A row of the daemon's ranked reply (user rows have no allocation fields). */
static void top_fill(struct top_row *r, json_t *a, bool user)
{
	const char *thr = json_string_value(json_object_get(a, "throttled"));

	memset(r, 0, sizeof(*r));
	r->a = user ? NULL : a;
	r->user = json_string_value(json_object_get(a, "user"));
	r->user = r->user ? r->user : "";
	r->n = user ? (unsigned)json_integer_value(json_object_get(a, "allocations")) : 1;
	r->throttled = thr ? thr : "";
	r->bps[0] = json_number_value(json_object_get(a, "to_peer_bps"));
	r->bps[1] = json_number_value(json_object_get(a, "from_peer_bps"));
	r->pps[0] = json_number_value(json_object_get(a, "to_peer_pps"));
	r->pps[1] = json_number_value(json_object_get(a, "from_peer_pps"));
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

/* One refresh from a ranked sample (rates since the previous one): prints it (human or
 * JSON); first: the first refresh. Returns 0 or -ENOMEM. */
static int top_show(const struct top_opts *o, json_t *cur, bool first, FILE *out)
{
	json_t *ca = json_object_get(cur, "allocations"), *cu = json_object_get(cur, "users"), *a;
	double dt = json_number_value(json_object_get(cur, "interval"));
	size_t n = json_array_size(ca), nu = json_array_size(cu), i;
	struct top_row *rows = calloc(n + 1, sizeof(*rows)), *users = calloc(nu + 1, sizeof(*users));

	if (rows == NULL || users == NULL) {
		free(rows);
		free(users);
		return -ENOMEM;
	}
	json_array_foreach(ca, i, a)
		top_fill(&rows[i], a, false);
	json_array_foreach(cu, i, a)
		top_fill(&users[i], a, true);
	if (o->as_json) {
		json_t *res = json_pack("{s:f, s:O, s:O, s:O, s:O}", "interval", dt, "live",
					json_object_get(cur, "live"), "limits",
					json_object_get(cur, "limits"), "allocations", ca, "users", cu);

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
		/* redrawn in place on a terminal; a pipe or file gets the refreshes one after
		 * the other, a blank line apart, and no terminal codes */
		if (!o->once && isatty(fileno(out)))
			fputs("\033[H\033[2J", out);
		else if (!first)
			fputc('\n', out);
		fprintf(out,
			"turngate top: %lld allocations, %lld users, rates over %.2f s; limits: "
			"allocation %s, user %s (0b: none)\n\n",
			(long long)json_integer_value(json_object_get(cur, "live")),
			(long long)json_integer_value(json_object_get(cur, "users_live")), dt, ab, ub);
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
	static const char *const opts[] = { "--interval", "--rows", "--count", NULL };

	for (int i = 0; i < argc; i++) {
		const char *k = argv[i], *v;
		json_int_t n;

		if (strcmp(k, "--once") == 0) {
			o->once = true;
		} else if (strcmp(k, "--json") == 0) {
			o->as_json = true;
		} else if (ctl_arg_option("top", opts, argc, argv, &i, &v) < 0) {
			return -EINVAL;
		} else if (strcmp(k, "--interval") == 0) {
			if (ctl_arg_seconds("top", k, v, 0.1, 60, &o->interval) < 0)
				return -EINVAL;
		} else {
			if (ctl_arg_int("top", k, v, 1, 1000000, &n) < 0)
				return -EINVAL;
			*(strcmp(k, "--rows") == 0 ? &o->rows : &o->count) = (long)n;
		}
	}
	return 0;
}

/* A ranked sample of rows rows (the daemon ranks: master/admin_top.c). */
static int top_sample(const char *sock, long rows, json_t **out)
{
	json_t *reply = NULL;
	int rc = ctl_call(sock, json_pack("{s:s, s:I}", "cmd", "top", "rows",
					  (json_int_t)(rows < TOP_ROWS_MAX ? rows : TOP_ROWS_MAX)),
			  &reply);

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
	json_t *cur = NULL;
	int rc;

	if (top_args(&o, argc, argv) < 0)
		return CTL_EXIT_USAGE;
	if (o.once)
		o.count = 1;
	rc = top_sample(sock, o.rows, &cur);	/* the baseline */
	json_decref(cur);
	for (long k = 0; rc == 0 && (o.count == 0 || k < o.count); k++) {
		struct timespec ts = { (time_t)o.interval, 0 };

		ts.tv_nsec = (long)((o.interval - (double)ts.tv_sec) * 1e9);
		nanosleep(&ts, NULL);
		cur = NULL;
		rc = top_sample(sock, o.rows, &cur);
		if (rc != 0)
			break;
		if (top_show(&o, cur, k == 0, stdout) < 0)
			rc = CTL_EXIT_ERROR;
		json_decref(cur);
	}
	return rc;
}
