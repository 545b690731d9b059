/* turngatectl: command-line client of turngated's admin socket. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: turngatectl [-s SOCKET] [--json] COMMAND [ARGS]\n"
		"commands:\n"
		"  status                     version, uptime, config, last reload, workers\n"
		"  config                     running configuration (secrets redacted)\n"
		"  reload [--force]           reload the configuration (non-zero exit if invalid,\n"
		"                             or refused: it would remove every listener, or\n"
		"                             remove or restart listeners because a key is\n"
		"                             not recognised);\n"
		"                             --force applies what the guard refuses\n"
		"  logrotate                  reopen the session record file (after logrotate)\n"
		"  allocations [--user U] [--listener L] [--worker N] [--limit N] [--page N]\n"
		"              [--cursor C]   live allocations, fetched --page (1000) at a time\n"
		"                             up to --limit (1000); --cursor: where the\n"
		"                             last listing stopped\n"
		"  top [--once] [--json] [--interval S] [--rows N] [--count N]\n"
		"                             heaviest allocations and users by bit rate, with\n"
		"                             listener, age, permissions, channels and the\n"
		"                             bandwidth limit throttling them; refreshed every\n"
		"                             interval (1 s) like top; --once: one refresh\n"
		"  disconnect ID [--gen G] | --user U\n"
		"                             end one allocation, or every one of a user;\n"
		"                             --gen: only if its GEN (allocations) is still G,\n"
		"                             not another allocation that took the ID since\n"
		"  revoke USER | --user-id ID [--for DURATION]\n"
		"                             refuse a TURN username (or every REST username of\n"
		"                             a user id) on every worker and end its allocations,\n"
		"                             until removed or for DURATION (30s, 10m, 2h, 7d)\n"
		"  revoke --list              the revocations in force (also: revocations)\n"
		"  unrevoke USER | --user-id ID\n"
		"                             remove a revocation (also: revoke --remove ...)\n"
		"  drain [off]                refuse new allocations (or accept them again)\n"
		"  stats                      counters summed over workers\n"
		"  workers                    worker processes and their states\n"
		"  loglevel [SPEC|config]     show or set log levels (config: back to the file's)\n"
		"  probe TURN-URI (-u USER -p PASS | --secret SECRET [--user NAME])\n"
		"        [--peer IP:PORT | --tcp-peer IP:PORT [--data-port PORT]] [--timeout MS]\n"
		"        [--transport udp|tcp|tls|dtls] [--sni NAME] [--json]\n"
		"                             allocate, permit, relay a round trip (through the\n"
		"                             echo at --peer, else a second allocation), timed;\n"
		"                             --tcp-peer: TCP relaying (RFC 6062) over a tcp or\n"
		"                             tls control connection: allocate TCP, Connect to\n"
		"                             the TCP echo, ConnectionBind a data connection\n"
		"                             (the control connection's transport and address,\n"
		"                             or TURN-TCP to --data-port), round trip;\n"
		"                             TURN-URI is turn[s]:HOST[:PORT][?transport=udp|tcp]\n"
		"                             (turns: TLS, or DTLS with transport=udp; the\n"
		"                             certificate is not verified)\n"
		"  doctor [-c CONFIG] [--secret S [--user NAME] | -u USER -p PASS]\n"
		"         [--peer IP:PORT] [--host HOST] [--timeout MS]\n"
		"                             check daemon, listeners, auth, routes, then probe;\n"
		"                             names the first broken layer and its fix\n"
		"  upgrade [--binary PATH] [--timeout S]\n"
		"                             live upgrade: start PATH (default: the running\n"
		"                             binary; PATH only as root) as the new master, which\n"
		"                             takes the sockets and allocations over; prints its\n"
		"                             PID (exit 0), or why it failed while the old\n"
		"                             master serves on\n"
		"options:\n"
		"  -s, --socket PATH          admin socket (default: $TURNGATE_ADMIN_SOCKET or\n"
		"                             " CTL_DEFAULT_SOCKET ")\n"
		"  --json                     print the daemon's JSON reply as is\n");
}

/* "USER" or "--user-id ID" of cmd into req; the arguments it used are taken off argc and
 * argv. Returns 0, or -EINVAL after a usage error. */
static int revoke_target(const char *cmd, json_t *req, int *argc, char ***argv)
{
	if (*argc == 0)
		return ctl_usage_error(cmd, NULL, "missing USER or --user-id ID");
	if (strcmp((*argv)[0], "--user-id") == 0) {
		if (*argc < 2)
			return ctl_usage_error(cmd, "--user-id", "needs a value");
		json_object_set_new(req, "user_id", json_string((*argv)[1]));
		*argc -= 2;
		*argv += 2;
		return 0;
	}
	if ((*argv)[0][0] == '-')
		return ctl_arg_unexpected(cmd, (*argv)[0], "");
	json_object_set_new(req, "user", json_string((*argv)[0]));
	*argc -= 1;
	*argv += 1;
	return 0;
}

/* revoke USER|--user-id ID [--for D], revoke --list, revoke --remove USER|--user-id ID,
 * unrevoke USER|--user-id ID: the request, with *cmd changed to the admin command; NULL
 * after a usage error. */
static json_t *revoke_request(const char **cmd, int argc, char **argv)
{
	const char *name = *cmd; /* as typed, for the usage error */
	json_t *req = json_object();
	int rc = 0;

	if (strcmp(*cmd, "revoke") == 0 && argc >= 1 && strcmp(argv[0], "--list") == 0) {
		*cmd = "revocations";
		argc--;
		argv++;
	} else if (strcmp(*cmd, "revoke") == 0 && argc >= 1 && strcmp(argv[0], "--remove") == 0) {
		*cmd = "unrevoke";
		argc--;
		argv++;
	}
	json_object_set_new(req, "cmd", json_string(*cmd));
	if (strcmp(*cmd, "revocations") != 0)
		rc = revoke_target(name, req, &argc, &argv);
	if (rc == 0 && strcmp(*cmd, "revoke") == 0 && argc >= 1 &&
	    strcmp(argv[0], "--for") == 0) {
		if (argc < 2)
			rc = ctl_usage_error(name, "--for", "needs a value");
		else
			json_object_set_new(req, "for", json_string(argv[1]));
		argc -= 2;
		argv += 2;
	}
	if (rc == 0 && argc > 0)
		rc = ctl_arg_unexpected(name, argv[0], "");
	if (rc == 0)
		return req;
	json_decref(req);
	return NULL;
}

/* disconnect ID [--gen G] | --user U into req. Returns 0, or -EINVAL after a usage error. */
static int disconnect_args(json_t *req, int argc, char **argv)
{
	const char *cmd = "disconnect", *val;
	json_int_t id, gen;
	int i = 0;

	if (argc == 0)
		return ctl_usage_error(cmd, NULL, "missing ID or --user U");
	if (strcmp(argv[0], "--user") == 0) {
		if (ctl_arg_option(cmd, (const char *const[]){ "--user", NULL }, argc, argv, &i,
				   &val) < 0)
			return -EINVAL;
		json_object_set_new(req, "user", json_string(val));
	} else {
		if (ctl_arg_int(cmd, "ID", argv[0], 0, INT64_MAX, &id) < 0)
			return -EINVAL;
		if (argc == 1) {
			json_object_set_new(req, "id", json_integer(id));
			return 0;
		}
		i = 1;
		if (ctl_arg_option(cmd, (const char *const[]){ "--gen", NULL }, argc, argv, &i,
				   &val) < 0 ||
		    ctl_arg_int(cmd, "--gen", val, 0, INT64_MAX, &gen) < 0)
			return -EINVAL;
		/* [ID, GEN]: a daemon older than the generation refuses an "id" that is not an
		 * integer, instead of ending whatever allocation holds ID */
		json_object_set_new(req, "id", json_pack("[I, I]", id, gen));
	}
	if (i + 1 < argc)
		return ctl_arg_unexpected(cmd, argv[i + 1], "");
	return 0;
}

/* Builds the request for cmd and its arguments; NULL after a usage error. */
static json_t *build_request(const char *cmd, int argc, char **argv)
{
	json_t *req = json_pack("{s:s}", "cmd", cmd);
	static const char *const plain[] = { "status", "config", "stats", "workers", "logrotate" };
	bool is_plain = false;
	int rc;

	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
		is_plain = is_plain || strcmp(cmd, plain[i]) == 0;
	if (is_plain) {
		rc = argc == 0 ? 0 : ctl_arg_unexpected(cmd, argv[0], "(it takes none)");
	} else if (strcmp(cmd, "reload") == 0) {
		rc = argc == 0 || (argc == 1 && strcmp(argv[0], "--force") == 0)
			     ? 0
			     : ctl_arg_unexpected(cmd, argv[argc == 1 ? 0 : 1], "(reload [--force])");
		if (rc == 0 && argc == 1)
			json_object_set_new(req, "force", json_true());
	} else if (strcmp(cmd, "disconnect") == 0) {
		rc = disconnect_args(req, argc, argv);
	} else if (strcmp(cmd, "drain") == 0) {
		if (argc > 1)
			rc = ctl_arg_unexpected(cmd, argv[1], "(drain [on|off])");
		else if (argc == 1 && strcmp(argv[0], "on") != 0 && strcmp(argv[0], "off") != 0)
			rc = ctl_usage_error(cmd, argv[0], "neither on nor off");
		else
			rc = 0;
		if (rc == 0 && argc == 1 && strcmp(argv[0], "off") == 0)
			json_object_set_new(req, "on", json_false());
	} else if (strcmp(cmd, "loglevel") == 0) {
		rc = argc <= 1 ? 0 : ctl_arg_unexpected(cmd, argv[1], "(one SPEC at most)");
		if (rc == 0 && argc == 1)
			json_object_set_new(req, "spec", json_string(argv[0]));
	} else {
		rc = ctl_usage_error(NULL, cmd, "unknown command");
	}
	if (rc == 0)
		return req;
	json_decref(req);
	return NULL;
}

/* A command that is one admin request: builds it, sends it, prints the reply. */
static int run_request(const char *sock, bool as_json, const char *cmd, int argc, char **argv)
{
	json_t *req, *reply = NULL;
	int rc;

	if (strcmp(cmd, "revoke") == 0 || strcmp(cmd, "unrevoke") == 0 ||
	    strcmp(cmd, "revocations") == 0)
		req = revoke_request(&cmd, argc, argv);
	else
		req = build_request(cmd, argc, argv);
	if (req == NULL)
		return CTL_EXIT_USAGE;
	rc = ctl_call(sock, req, &reply);
	if (rc == CTL_EXIT_CONNECT)
		return rc;
	if (as_json) {
		json_dumpf(reply, stdout, JSON_COMPACT);
		fputc('\n', stdout);
	} else if (rc == CTL_EXIT_OK) {
		ctl_print_human(cmd, reply, stdout);
	} else {
		ctl_print_error(cmd, reply, stderr);
	}
	/* The daemon's answer is printed whole first, then the policy's status. */
	if (rc == CTL_EXIT_OK)
		rc = ctl_exit_status(cmd, reply);
	json_decref(reply);
	return rc;
}

/* Command cmd with its arguments: the exit status. */
static int run_command(const char *sock, bool as_json, const char *cmd, int argc, char **argv)
{
	if (strcmp(cmd, "probe") == 0)
		return ctl_probe_main(argc, argv);
	if (strcmp(cmd, "upgrade") == 0)
		return ctl_upgrade_main(sock, argc, argv);
	if (strcmp(cmd, "allocations") == 0)
		return ctl_allocations_main(sock, as_json, argc, argv);
	if (strcmp(cmd, "top") == 0)
		return ctl_top_main(sock, as_json, argc, argv);
	if (strcmp(cmd, "doctor") == 0)
		return ctl_doctor_main(sock, argc, argv);
	return run_request(sock, as_json, cmd, argc, argv);
}

int main(int argc, char **argv)
{
	const char *sock = getenv("TURNGATE_ADMIN_SOCKET");
	bool as_json = false;
	int i = 1, rc = CTL_EXIT_OK;

	if (sock == NULL || sock[0] == '\0')
		sock = CTL_DEFAULT_SOCKET;
	for (; i < argc && argv[i][0] == '-' && rc == CTL_EXIT_OK; i++) {
		if (strcmp(argv[i], "-s") == 0 || strcmp(argv[i], "--socket") == 0) {
			if (i + 1 < argc) {
				sock = argv[++i];
				continue;
			}
			ctl_usage_error(NULL, argv[i], "needs a value (the admin socket's path)");
			rc = CTL_EXIT_USAGE;
		} else if (strcmp(argv[i], "--json") == 0) {
			as_json = true;
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return CTL_EXIT_OK;
		} else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--version") == 0) {
			printf("turngatectl %s\n", PACKAGE_VERSION);
			return CTL_EXIT_OK;
		} else {
			ctl_usage_error(NULL, argv[i], "unknown option");
			rc = CTL_EXIT_USAGE;
		}
	}
	if (rc == CTL_EXIT_OK && i >= argc) {
		ctl_usage_error(NULL, NULL, "no COMMAND given");
		rc = CTL_EXIT_USAGE;
	}
	if (rc == CTL_EXIT_OK)
		rc = run_command(sock, as_json, argv[i], argc - i - 1, argv + i + 1);
	/* every usage error has said what is wrong in one line (ctl_usage_error); the whole
	 * text would push that line off the screen */
	if (rc == CTL_EXIT_USAGE)
		fputs("try 'turngatectl --help'\n", stderr);
	return rc;
}
