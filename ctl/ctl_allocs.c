/* turngatectl allocations: the live allocations, fetched page by page with the daemon's
 * cursor (master/admin_cmd.c cmd_allocations), printed as each page arrives. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl.h"

struct allocs_opts {
	json_t *filter;          /* user, listener, worker */
	json_int_t limit;        /* entries printed at most, all pages together */
	json_int_t page;         /* entries asked per request */
	json_int_t cursor;       /* where the first page starts */
};

static int allocs_args(struct allocs_opts *o, int argc, char **argv)
{
	static const char *const opts[] = { "--user", "--listener", "--worker", "--limit",
					    "--page", "--cursor", NULL };
	const char *cmd = "allocations";

	for (int i = 0; i < argc; i++) {
		const char *k = argv[i], *v;
		json_int_t n;
		int rc = ctl_arg_option(cmd, opts, argc, argv, &i, &v);

		if (rc < 0)
			return rc;
		if (strcmp(k, "--user") == 0 || strcmp(k, "--listener") == 0) {
			json_object_set_new(o->filter, k + 2, json_string(v));
			continue;
		}
		/* --limit and --page 0 would page forever */
		rc = ctl_arg_int(cmd, k, v, strcmp(k, "--limit") == 0 || strcmp(k, "--page") == 0,
				 INT64_MAX, &n);
		if (rc < 0)
			return rc;
		if (strcmp(k, "--worker") == 0)
			json_object_set_new(o->filter, "worker", json_integer(n));
		else if (strcmp(k, "--limit") == 0)
			o->limit = n;
		else if (strcmp(k, "--page") == 0)
			o->page = n;
		else
			o->cursor = n;
	}
	return 0;
}

/* One request: the filter, this page's limit and the cursor. */
static json_t *allocs_request(const struct allocs_opts *o, json_int_t want, json_int_t cursor)
{
	json_t *req = json_deep_copy(o->filter);

	if (req == NULL)
		return NULL;
	json_object_set_new(req, "cmd", json_string("allocations"));
	json_object_set_new(req, "limit", json_integer(want));
	json_object_set_new(req, "cursor", json_integer(cursor));
	return req;
}

/* Pages until the table's end or the limit: each page printed as it comes (--json: each
 * reply on its own line). The last line says where to go on when the limit stopped it. */
static int allocs_run(const char *sock, bool as_json, const struct allocs_opts *o)
{
	json_int_t printed = 0, cursor = o->cursor;
	bool header = true;

	for (;;) {
		json_int_t want = o->limit - printed < o->page ? o->limit - printed : o->page;
		json_t *reply = NULL, *next, *req = allocs_request(o, want, cursor);
		int rc;

		if (req == NULL)
			return CTL_EXIT_ERROR;
		rc = ctl_call(sock, req, &reply);
		if (rc == CTL_EXIT_CONNECT)
			return rc;
		if (rc != CTL_EXIT_OK) {
			ctl_print_error("allocations", reply, stderr);
			json_decref(reply);
			return rc;
		}
		if (as_json) {
			json_dumpf(reply, stdout, JSON_COMPACT);
			fputc('\n', stdout);
		} else {
			ctl_print_alloc_rows(reply, header, stdout);
		}
		header = false;
		printed += (json_int_t)json_array_size(json_object_get(reply, "allocations"));
		next = json_object_get(reply, "next_cursor");
		if (!json_is_integer(next)) {
			json_decref(reply);
			return CTL_EXIT_OK;
		}
		cursor = json_integer_value(next);
		json_decref(reply);
		if (printed >= o->limit) {
			if (!as_json)
				printf("(stopped at --limit %lld: --cursor %lld goes on)\n",
				       (long long)o->limit, (long long)cursor);
			return CTL_EXIT_OK;
		}
	}
}

int ctl_allocations_main(const char *sock, bool as_json, int argc, char **argv)
{
	struct allocs_opts o = { .filter = json_object(), .limit = 1000, .page = 1000 };
	int rc;

	if (o.filter == NULL)
		return CTL_EXIT_ERROR;
	if (allocs_args(&o, argc, argv) < 0) {
		json_decref(o.filter);
		return CTL_EXIT_USAGE;
	}
	rc = allocs_run(sock, as_json, &o);
	json_decref(o.filter);
	return rc;
}
