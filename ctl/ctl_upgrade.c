/* turngatectl upgrade: starts a live upgrade and waits for its outcome.
 *
 * The old master answers the upgrade command at once; the outcome is asked with
 * upgrade_status on the same socket path, which the new master serves once it has taken
 * over (the old one exits then). From the hand-over on the old master takes no new
 * connection, so a question asked in the gap waits for the master that serves after it.
 * Success: a master other than the old one answers that it serves (or the old one says it
 * handed over, on a connection it took before); its PID goes to stdout, exit 0. Failure:
 * the old master reports the attempt failed; the reason goes to stderr, exit 1. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/mono.h"
#include "ctl/ctl.h"

#define POLL_MS 50

/* One status question; 1 when it settled the outcome (*rc set), 0 to ask again. */
static int poll_once(const char *sock, int old_pid, int attempt, int *rc)
{
	json_t *req = json_pack("{s:s}", "cmd", "upgrade_status"), *reply = NULL, *u;
	const char *why = "", *state;
	int pid, settled = 0;

	if (req == NULL || ctl_request(sock, req, &reply, &why) < 0) {
		json_decref(req);
		return 0;	/* between the two masters: ask again */
	}
	json_decref(req);
	u = json_object_get(reply, "upgrade");
	state = json_string_value(json_object_get(u, "state"));
	pid = (int)json_integer_value(json_object_get(u, "pid"));
	if (state == NULL) {
		settled = 0;
	} else if (pid != old_pid && json_is_true(json_object_get(u, "serving"))) {
		printf("%d\n", pid);
		*rc = CTL_EXIT_OK;
		settled = 1;
	} else if (pid == old_pid && json_integer_value(json_object_get(u, "attempt")) == attempt) {
		if (strcmp(state, "done") == 0) {
			printf("%d\n", (int)json_integer_value(json_object_get(u, "new_pid")));
			*rc = CTL_EXIT_OK;
			settled = 1;
		} else if (strcmp(state, "failed") == 0) {
			fprintf(stderr, "turngatectl: upgrade failed: %s; pid %d serves on\n",
				json_string_value(json_object_get(u, "error")), old_pid);
			*rc = CTL_EXIT_ERROR;
			settled = 1;
		}
	}
	json_decref(reply);
	return settled;
}

/* --binary PATH and --timeout S into req and *timeout. Returns 0, or -EINVAL after a
 * usage error. */
static int upgrade_args(json_t *req, double *timeout, int argc, char **argv)
{
	static const char *const opts[] = { "--binary", "--timeout", NULL };

	for (int i = 0; i < argc; i++) {
		const char *v;
		int k = ctl_arg_option("upgrade", opts, argc, argv, &i, &v);

		if (k < 0)
			return k;
		if (k == 0) {
			json_object_set_new(req, "binary", json_string(v));
			continue;
		}
		if (ctl_arg_seconds("upgrade", opts[k], v, 0.001, 3600, timeout) < 0)
			return -EINVAL;
		json_object_set_new(req, "timeout", json_real(*timeout));
	}
	return 0;
}

int ctl_upgrade_main(const char *sock, int argc, char **argv)
{
	json_t *req = json_pack("{s:s}", "cmd", "upgrade"), *reply = NULL, *u;
	double timeout = 30;
	uint64_t deadline;
	int old_pid, attempt, rc;

	if (upgrade_args(req, &timeout, argc, argv) < 0) {
		json_decref(req);
		return CTL_EXIT_USAGE;
	}
	rc = ctl_call(sock, req, &reply);
	if (rc == CTL_EXIT_CONNECT)
		return rc;
	if (rc != CTL_EXIT_OK) {
		ctl_print_error("upgrade", reply, stderr);
		json_decref(reply);
		return rc;
	}
	u = json_object_get(reply, "upgrade");
	old_pid = (int)json_integer_value(json_object_get(u, "pid"));
	attempt = (int)json_integer_value(json_object_get(u, "attempt"));
	json_decref(reply);
	/* The daemon enforces the timeout itself; this only bounds a daemon that vanished. */
	deadline = mono_ns() + (uint64_t)((timeout + 15) * 1e9);
	while (mono_ns() < deadline) {
		if (poll_once(sock, old_pid, attempt, &rc))
			return rc;
		usleep(POLL_MS * 1000);
	}
	fprintf(stderr, "turngatectl: upgrade: no outcome within %.0f s\n", timeout + 15);
	return CTL_EXIT_ERROR;
}
