/* turngatectl: human-readable rendering of admin replies (tables and key: value lines). */
#include "config.h"

#include "ctl/ctl.h"

#include <string.h>

static const char *str_of(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s != NULL ? s : "-";
}

static long long int_of(json_t *o, const char *key)
{
	return (long long)json_integer_value(json_object_get(o, key));
}

static double num_of(json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

static void print_lines(json_t *arr, const char *prefix, FILE *out)
{
	size_t i;
	json_t *v;

	json_array_foreach(arr, i, v)
		fprintf(out, "%s%s\n", prefix, json_string_value(v) ? json_string_value(v) : "?");
}

/* disconnect --user: the allocations whose worker was not told to end them; nothing else
 * ends them (ctl_exit_status: exit 1). */
static void print_not_reached(json_t *r, FILE *out)
{
	if (int_of(r, "not_reached") > 0)
		fprintf(out, "not reached: %lld allocation(s) (their worker is not running or "
			"its control channel is full; see the log): run it again\n",
			int_of(r, "not_reached"));
}

/* revoke: the same count is information only, the entry is stored and the workers end
 * them on their own. */
static void print_revoke_not_reached(json_t *r, FILE *out)
{
	if (int_of(r, "not_reached") > 0)
		fprintf(out, "%lld allocation(s) on workers not reached now: they end when their "
			"worker sweeps or adopts\n", int_of(r, "not_reached"));
}

/* "offload: TC on lo, XDP on eth0; 12 entries" or "offload: None (user space)". */
static void print_offload(json_t *o, FILE *out)
{
	json_t *ifs = json_object_get(o, "interfaces"), *f;
	size_t i;

	if (o == NULL)
		return;
	if (!json_is_true(json_object_get(o, "active"))) {
		fprintf(out, "offload:        %s (user space)\n", str_of(o, "engine"));
		return;
	}
	fprintf(out, "offload:        %s:", str_of(o, "engine"));
	json_array_foreach(ifs, i, f)
		fprintf(out, "%s %s on %s", i ? "," : "", str_of(f, "engine"), str_of(f, "name"));
	fprintf(out, "; %lld entries\n", int_of(o, "entries"));
}

/* "sibling:        turngate-1.turngate 51000-51999: 10.0.0.7" (or "this instance", or
 * "does not resolve"). */
static void print_siblings(json_t *sibs, FILE *out)
{
	json_t *s, *a;
	size_t i, j;

	json_array_foreach(sibs, i, s)
	{
		json_t *res = json_object_get(s, "resolved");

		fprintf(out, "sibling:        %s %lld-%lld:", str_of(s, "address"),
			int_of(s, "relay_port_min"), int_of(s, "relay_port_max"));
		if (json_is_true(json_object_get(s, "self")))
			fprintf(out, " this instance");
		else if (json_array_size(res) == 0)
			fprintf(out, " does not resolve");
		json_array_foreach(res, j, a)
		{
			const char *ip = json_string_value(a);

			fprintf(out, "%s %s", j ? "," : "", ip ? ip : "?");
		}
		fprintf(out, "\n");
	}
}

/* "dns:            2 names every 5 s: rounds 14, changed 1, failed 0" (none without names). */
static void print_dns(json_t *d, FILE *out)
{
	if (d == NULL || int_of(d, "names") == 0)
		return;
	fprintf(out, "dns:            %lld name%s every %g s: rounds %lld, changed %lld, "
		"failed %lld\n", int_of(d, "names"), int_of(d, "names") == 1 ? "" : "s",
		json_number_value(json_object_get(d, "interval_s")), int_of(d, "runs"),
		int_of(d, "changes"), int_of(d, "failures"));
}

/* "ok (SIGHUP)", "FAILED (admin)", "refused (inotify): would remove every listener ...",
 * "ok (admin, forced): ...", "ok (cds): the configuration has no listeners". */
static void print_last_reload(json_t *lr, FILE *out)
{
	const char *result = str_of(lr, "result");
	const char *reason = json_string_value(json_object_get(lr, "reason"));
	bool ok = json_is_true(json_object_get(lr, "ok"));

	fprintf(out, "last reload:    %s (%s%s)%s%s\n",
		ok ? "ok" : strcmp(result, "refused") == 0 ? "refused" : "FAILED",
		str_of(lr, "trigger"), json_is_true(json_object_get(lr, "forced")) ? ", forced" : "",
		reason != NULL ? ": " : "", reason != NULL ? reason : "");
}

/* What the allocation table reserved (master/sizing.c); absent from an older daemon. */
static void print_table(json_t *t, FILE *out)
{
	if (!json_is_object(t))
		return;
	fprintf(out, "table:          %lld allocations (%s: %lld relay ports on %lld relay "
		     "address%s), %.1f MiB; descriptors %lld per process (a full table needs "
		     "%lld)\n",
		int_of(t, "capacity"), str_of(t, "source"), int_of(t, "relay_ports"),
		int_of(t, "relay_addresses"), int_of(t, "relay_addresses") == 1 ? "" : "es",
		(double)int_of(t, "segment_bytes") / 1048576.0,
		int_of(t, "descriptors"), int_of(t, "descriptors_wanted"));
}

static void print_status(json_t *r, FILE *out)
{
	json_t *lr = json_object_get(r, "last_reload"), *w = json_object_get(r, "workers");
	json_t *ls = json_object_get(r, "listeners"), *l, *st = json_object_get(r, "state");
	size_t i;

	fprintf(out, "version:        %s (pid %lld)\n", str_of(r, "version"), int_of(r, "pid"));
	fprintf(out, "uptime:         %.0f s\n", num_of(r, "uptime"));
	fprintf(out, "config:         %s, generation %lld\n", str_of(r, "config_source"),
		int_of(r, "generation"));
	print_last_reload(lr, out);
	print_lines(json_object_get(lr, "errors"), "                ", out);
	fprintf(out, "workers:        %lld running of %lld (%s)\n", int_of(w, "running"),
		int_of(w, "configured"), str_of(w, "source"));
	fprintf(out, "allocations:    %lld\n", int_of(r, "allocations"));
	/* Old workers a live upgrade left serving their TLS and DTLS calls (absent: an older
	 * daemon; dtls_sessions absent: one without DTLS lingering). */
	json_array_foreach(json_object_get(r, "lingering"), i, l)
		fprintf(out, "lingering:      old worker pid %lld (slot %lld): %lld TLS, %lld DTLS "
			     "calls, ends them in %lld s at the latest\n",
			int_of(l, "pid"), int_of(l, "slot"),
			int_of(l, "sessions") - int_of(l, "dtls_sessions"),
			int_of(l, "dtls_sessions"), int_of(l, "ends_in_s"));
	print_table(json_object_get(r, "table"), out);
	fprintf(out, "draining:       %s\n",
		json_is_true(json_object_get(r, "draining")) ? "yes" : "no");
	if (json_is_string(json_object_get(st, "file")))
		fprintf(out, "state file:     %s (%lld allocations taken over at start)\n",
			str_of(st, "file"), int_of(st, "taken_over"));
	else if (st != NULL)
		fprintf(out, "state file:     none (the table ends with the daemon)\n");
	print_offload(json_object_get(r, "offload"), out);
	print_siblings(json_object_get(r, "siblings"), out);
	print_dns(json_object_get(r, "dns"), out);
	json_array_foreach(ls, i, l) fprintf(out, "listener:       %s %s %s\n", str_of(l, "name"),
					     str_of(l, "protocol"), str_of(l, "address"));
	if (ls != NULL && json_array_size(ls) == 0)
		fprintf(out, "listener:       none (nothing serves; /ready answers 503)\n");
	json_array_foreach(json_object_get(r, "refused_sources"), i, l)
		fprintf(out, "refused source: %s %s, %lld trips, last %.0f s ago\n",
			str_of(l, "address"), str_of(l, "reason"), int_of(l, "trips"),
			num_of(l, "seconds_ago"));
}

static void print_workers(json_t *r, FILE *out)
{
	json_t *w;
	size_t i;

	fprintf(out, "%-5s %-8s %-9s %-8s %-10s %s\n", "SLOT", "PID", "STATE", "RESTARTS", "UPTIME",
		"LAST_EXIT");
	json_array_foreach(json_object_get(r, "workers"), i, w)
	{
		char last[32] = "-";

		if (json_object_get(w, "last_exit") != NULL) {
			long long st = int_of(w, "last_exit");

			/* A raw wait status: low 7 bits the signal, else the exit code. */
			if ((st & 0x7f) != 0)
				snprintf(last, sizeof(last), "signal %lld", st & 0x7f);
			else
				snprintf(last, sizeof(last), "exit %lld", (st >> 8) & 0xff);
		}
		fprintf(out, "%-5lld %-8lld %-9s %-8lld %-10.0f %s\n", int_of(w, "slot"),
			int_of(w, "pid"), str_of(w, "state"), int_of(w, "restarts"),
			num_of(w, "uptime"), last);
	}
}

/* The text of o's key as a table cell: a string as it is, an integer in decimal (into
 * buf), anything else or nothing "-" (an older daemon's reply may lack the key). */
static const char *cell_of(json_t *o, const char *key, char buf[24])
{
	json_t *v = json_object_get(o, key);

	if (json_is_integer(v)) {
		snprintf(buf, 24, "%lld", (long long)json_integer_value(v));
		return buf;
	}
	return str_of(o, key);
}

/* The width of column key (cell_of) over every allocation, at least min: names are
 * printed whole (a gateway's "ns/gateway/listener" names differ at their end), and the
 * columns after them stay aligned. */
static int col_width(json_t *allocs, const char *key, int min)
{
	json_t *a;
	size_t i;
	int w = min;
	char buf[24];

	json_array_foreach(allocs, i, a)
	{
		int n = (int)strlen(cell_of(a, key, buf));

		w = n > w ? n : w;
	}
	return w;
}

/* GEN beside ID: `disconnect ID --gen GEN` ends that allocation only, not another that
 * took the id since; "-" from a daemon older than the generation. */
void ctl_print_alloc_rows(json_t *r, bool header, FILE *out)
{
	json_t *a, *all = json_object_get(r, "allocations");
	size_t i;
	int wu = col_width(all, "user", 24), wl = col_width(all, "listener", 10);
	int wc = col_width(all, "client", 22), wr = col_width(all, "relay", 22);
	int wg = col_width(all, "gen", 5);
	char buf[24];

	if (header)
		fprintf(out, "%-6s %-*s %-3s %-*s %-*s %-*s %-*s %6s %6s %5s %5s %4s %s\n", "ID",
			wg, "GEN", "WRK", wu, "USER", wl, "LISTENER", wc, "CLIENT", wr, "RELAY",
			"AGE", "LEFT", "PERMS", "CHANS", "TCP", "TO_PEER/FROM_PEER (pkts bytes)");
	json_array_foreach(all, i, a)
	{
		json_t *tp = json_object_get(a, "to_peer"), *fp = json_object_get(a, "from_peer");

		fprintf(out,
			"%-6lld %-*s %-3lld %-*s %-*s %-*s %-*s %6.0f %6.0f %5zu %5zu %4lld "
			"%lld %lld / %lld %lld\n",
			int_of(a, "id"), wg, cell_of(a, "gen", buf), int_of(a, "worker"), wu,
			str_of(a, "user"), wl,
			str_of(a, "listener"), wc, str_of(a, "client"), wr, str_of(a, "relay"),
			num_of(a, "age"), num_of(a, "lifetime_left"),
			json_array_size(json_object_get(a, "permissions")),
			json_array_size(json_object_get(a, "channels")),
			int_of(a, "tcp_connections"), int_of(tp, "packets"), int_of(tp, "bytes"),
			int_of(fp, "packets"), int_of(fp, "bytes"));
	}
}

/* "user_id alice  until removed" / "user 1700000000:bob  for 3600 s more". */
static void print_revocation(json_t *e, FILE *out)
{
	json_t *left = json_object_get(e, "left");

	fprintf(out, "%-8s %-40s ", str_of(e, "kind"), str_of(e, "name"));
	if (json_is_integer(left))
		fprintf(out, "%lld s more\n", (long long)json_integer_value(left));
	else
		fprintf(out, "until removed\n");
}

static void print_revocations(json_t *r, FILE *out)
{
	json_t *e;
	size_t i;

	fprintf(out, "%-8s %-40s %s\n", "KIND", "NAME", "EXPIRES");
	json_array_foreach(json_object_get(r, "revocations"), i, e)
		print_revocation(e, out);
	fprintf(out, "(%lld of %lld entries)\n", int_of(r, "count"), int_of(r, "capacity"));
}

static void print_stats(json_t *r, FILE *out)
{
	const char *key;
	json_t *v, *l;

	fprintf(out, "allocations %lld\n", int_of(r, "allocations"));
	json_object_foreach(json_object_get(r, "counters"), key, v)
		fprintf(out, "%s %lld\n", key, (long long)json_integer_value(v));
	json_object_foreach(json_object_get(r, "listeners"), key, l)
	{
		const char *k2;

		json_object_foreach(l, k2, v) fprintf(out, "listener{%s} %s %lld\n", key, k2,
						      (long long)json_integer_value(v));
	}
}

void ctl_print_human(const char *cmd, json_t *r, FILE *out)
{
	if (strcmp(cmd, "status") == 0) {
		print_status(r, out);
	} else if (strcmp(cmd, "workers") == 0) {
		print_workers(r, out);
	} else if (strcmp(cmd, "allocations") == 0) {
		ctl_print_alloc_rows(r, true, out);
	} else if (strcmp(cmd, "stats") == 0) {
		print_stats(r, out);
	} else if (strcmp(cmd, "config") == 0) {
		json_dumpf(json_object_get(r, "config"), out, JSON_INDENT(2));
		fputc('\n', out);
	} else if (strcmp(cmd, "reload") == 0) {
		const char *reason = json_string_value(json_object_get(r, "reason"));

		fprintf(out, "reload ok: generation %lld%s%s%s\n", int_of(r, "generation"),
			json_is_true(json_object_get(r, "forced")) ? " (forced)" : "",
			reason != NULL ? ": " : "", reason != NULL ? reason : "");
		print_lines(json_object_get(r, "warnings"), "  ", out);
	} else if (strcmp(cmd, "logrotate") == 0) {
		fprintf(out, "session record file reopened\n");
	} else if (strcmp(cmd, "drain") == 0) {
		fprintf(out, "draining: %s, allocations: %lld\n",
			json_is_true(json_object_get(r, "draining")) ? "yes" : "no",
			int_of(r, "allocations"));
	} else if (strcmp(cmd, "loglevel") == 0) {
		fprintf(out, "log level: %s (%s)\n", str_of(r, "spec"), str_of(r, "source"));
	} else if (strcmp(cmd, "revoke") == 0) {
		fprintf(out, "%s: ", json_is_true(json_object_get(r, "renewed")) ? "renewed" : "revoked");
		print_revocation(json_object_get(r, "revoked"), out);
		fprintf(out, "ended %lld allocation(s)\n", int_of(r, "disconnected"));
		print_revoke_not_reached(r, out);
	} else if (strcmp(cmd, "unrevoke") == 0) {
		fprintf(out, "revocation removed\n");
	} else if (strcmp(cmd, "revocations") == 0) {
		print_revocations(r, out);
	} else if (strcmp(cmd, "disconnect") == 0) {
		fprintf(out, "disconnected %lld allocation(s)\n", int_of(r, "disconnected"));
		print_not_reached(r, out);
	} else {
		json_dumpf(r, out, JSON_INDENT(2));
		fputc('\n', out);
	}
}

int ctl_exit_status(const char *cmd, json_t *r)
{
	if (!json_is_true(json_object_get(r, "ok")))
		return CTL_EXIT_ERROR;
	return strcmp(cmd, "disconnect") == 0 && int_of(r, "not_reached") > 0 ? CTL_EXIT_ERROR
									       : CTL_EXIT_OK;
}

void ctl_print_error(const char *cmd, json_t *r, FILE *out)
{
	fprintf(out, "turngatectl: %s: %s\n", cmd, str_of(r, "error"));
	print_lines(json_object_get(r, "errors"), "  ", out);
}
