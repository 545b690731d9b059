/* turngatectl: shared declarations of the admin client (request building and reply printing).
 *
 * Process model: a short-lived command-line process; nothing here is used by the daemon.
 */
#ifndef TG_CTL_CTL_H
#define TG_CTL_CTL_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/socket.h>

#include <jansson.h>

#define CTL_DEFAULT_SOCKET "/run/turngate/admin.sock"
#define CTL_REPLY_MAX (64u << 20)
#define CTL_TIMEOUT_S 30

/* Exit statuses. */
enum {
	CTL_EXIT_OK = 0,
	CTL_EXIT_ERROR = 1,
	CTL_EXIT_USAGE = 2,
	CTL_EXIT_CONNECT = 3
};

/* Sends req (one JSON line) to the admin socket at path and reads one reply line.
 * Returns 0 and *reply (new reference), or -errno (connect, I/O, timeout) / -EBADMSG
 * (reply not a JSON object); *why gets a static description on failure. */
int ctl_request(const char *path, json_t *req, json_t **reply, const char **why);

/* ctl_request() of req (consumed), saying on stderr why the daemon could not be reached.
 * Returns CTL_EXIT_OK with *reply ({"ok":true,...}), CTL_EXIT_ERROR with *reply (the
 * daemon's error), or CTL_EXIT_CONNECT (no reply). */
int ctl_call(const char *sock, json_t *req, json_t **reply);

/* Prints a successful reply of command cmd in human form to out. */
void ctl_print_human(const char *cmd, json_t *reply, FILE *out);

/* One page of `allocations` in human form: the header line when header is set, then a
 * row per allocation. */
void ctl_print_alloc_rows(json_t *reply, bool header, FILE *out);

/* Usage errors (ctl/ctl_args.c). Each says on stderr, in one line, what is wrong with the
 * command line: "turngatectl CMD: ARG: WHY" (CMD NULL, before or without a command:
 * "turngatectl: ARG: WHY"; ARG NULL: no "ARG: " part), and returns -EINVAL; the caller
 * returns CTL_EXIT_USAGE and main() prints "try 'turngatectl --help'" after that line. */
int ctl_usage_error(const char *cmd, const char *arg, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* arg, which cmd does not take there: "unknown option" when it starts with '-', else
 * "unexpected argument", then hint (e.g. "(status takes none)", "": none). Returns -EINVAL. */
int ctl_arg_unexpected(const char *cmd, const char *arg, const char *hint);

/* argv[*i] must be one of opts (NULL-terminated), options that each take a value: *val gets
 * argv[*i + 1] and *i is advanced past it. Returns the option's index in opts, or -EINVAL
 * after a usage error of cmd (an unknown option, no value after it). */
int ctl_arg_option(const char *cmd, const char *const *opts, int argc, char **argv, int *i,
		   const char **val);

/* s (the value of argument arg of cmd) as a decimal integer from min to max, the whole
 * string. Returns 0 and *out, or -EINVAL after a usage error naming arg and s. */
int ctl_arg_int(const char *cmd, const char *arg, const char *s, json_int_t min, json_int_t max,
		json_int_t *out);

/* s (the value of option arg of cmd) as a number of seconds from min to max. Returns 0 and
 * *out, or -EINVAL after a usage error naming arg and s. */
int ctl_arg_seconds(const char *cmd, const char *arg, const char *s, double min, double max,
		    double *out);

/* `turngatectl allocations [--user U] [--listener L] [--worker N] [--limit N] [--page N]
 * [--cursor C]`: pages through the daemon's listing (N per request, default 1000) until
 * its end or --limit entries (default 1000); returns the exit status. */
int ctl_allocations_main(const char *sock, bool as_json, int argc, char **argv);

/* The exit status of command cmd's reply: CTL_EXIT_ERROR for a failed one, and for a
 * `disconnect` whose "not_reached" is above 0 (allocations left running that nothing else
 * ends: a script must see it, after ctl_print_human printed the reply); else CTL_EXIT_OK
 * (a `revoke`'s "not_reached" end at their worker's sweep or adoption). */
int ctl_exit_status(const char *cmd, json_t *reply);

/* Prints a failed reply ({"ok":false,...}) to out: the error and any "errors" lines. */
void ctl_print_error(const char *cmd, json_t *reply, FILE *out);

/* `turngatectl probe ARGS...` (argv after "probe"): returns the exit status; CTL_EXIT_USAGE
 * for bad arguments (the caller prints the usage). */
int ctl_probe_main(int argc, char **argv);

/* One live probe (allocate, permission, round trip, delete), for `doctor`. */
struct ctl_probe_opts {
	struct sockaddr_storage server;
	bool tcp;                /* TURN over TCP, else UDP */
	const char *user, *pass; /* long-term credential (required) */
	const char *peer;        /* "IP:PORT" echo peer, NULL: through a second allocation */
	int timeout_ms;          /* per transaction; <= 0: 3000 */
	const char *indent;      /* prefix of each printed step line, NULL: none */
};

struct ctl_probe_result {
	const char *failed_step; /* static name of the first failed step, NULL when all ok */
	int stun_code;           /* its STUN error code (401, 403...), 0 when none */
	int err;                 /* its negative errno, 0 when all ok */
	struct sockaddr_storage peer; /* the peer that step asked for, ss_family 0: none */
};

/* Runs the probe, printing one line per step to stdout. Returns 0 when every step passed,
 * 1 when one failed (*res says which), -ENOMEM. */
int ctl_probe_run(const struct ctl_probe_opts *o, struct ctl_probe_result *res);

/* `turngatectl doctor ARGS...` (argv after "doctor") against the admin socket sock:
 * returns the exit status (0 all ok, 1 a layer failed, 3 daemon unreachable,
 * CTL_EXIT_USAGE for bad arguments). */
int ctl_doctor_main(const char *sock, int argc, char **argv);

/* `turngatectl upgrade [--binary PATH] [--timeout S]`: starts a live upgrade and waits for
 * its outcome: 0 and the serving master's PID on stdout, 1 and the reason on stderr,
 * 3 daemon unreachable, CTL_EXIT_USAGE for bad arguments. */
int ctl_upgrade_main(const char *sock, int argc, char **argv);

/* `turngatectl top [--once] [--json] [--interval S] [--rows N] [--count N]`: the heaviest
 * allocations and users by bit rate from two samples of the daemon's `top` an interval
 * apart, refreshed until interrupted (or N times); returns the exit status. */
int ctl_top_main(const char *sock, bool as_json, int argc, char **argv);

#endif
