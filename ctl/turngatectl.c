/* turngatectl: command-line client of turngated's admin socket. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
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

int ctl_parse_nonneg(const char *s, json_int_t *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0' || end == s || v < 0)
		return -EINVAL;
	*out = v;
	return 0;
}

/* "USER" or "--user-id ID" into req; the arguments it used are taken off argc and argv. */
static int revoke_target(json_t *req, int *argc, char ***argv)
{
	if (*argc >= 2 && strcmp((*argv)[0], "--user-id") == 0) {
		json_object_set_new(req, "user_id", json_string((*argv)[1]));
		*argc -= 2;
		*argv += 2;
		return 0;
	}
	if (*argc >= 1 && (*argv)[0][0] != '-') {
		json_object_set_new(req, "user", json_string((*argv)[0]));
		*argc -= 1;
		*argv += 1;
		return 0;
	}
	return -EINVAL;
}

/* revoke USER|--user-id ID [--for D], revoke --list, revoke --remove USER|--user-id ID,
 * unrevoke USER|--user-id ID: the request, with *cmd changed to the admin command. */
static json_t *revoke_request(const char **cmd, int argc, char **argv)
{
	json_t *req = json_object();

	if (strcmp(*cmd, "revoke") == 0 && argc == 1 && strcmp(argv[0], "--list") == 0) {
		*cmd = "revocations";
		argc = 0;
	} else if (strcmp(*cmd, "revoke") == 0 && argc >= 1 && strcmp(argv[0], "--remove") == 0) {
		*cmd = "unrevoke";
		argc--;
		argv++;
	}
	json_object_set_new(req, "cmd", json_string(*cmd));
	if (strcmp(*cmd, "revocations") == 0 && argc == 0)
		return req;
	if (strcmp(*cmd, "revocations") == 0 || revoke_target(req, &argc, &argv) < 0)
		goto bad;
	if (strcmp(*cmd, "revoke") == 0 && argc == 2 && strcmp(argv[0], "--for") == 0) {
		json_object_set_new(req, "for", json_string(argv[1]));
		argc = 0;
	}
	if (argc == 0)
		return req;
bad:
	json_decref(req);
	return NULL;
}

/* Builds the request for cmd and its arguments; NULL on a usage error. */
static json_t *build_request(const char *cmd, int argc, char **argv)
{
	json_t *req = json_pack("{s:s}", "cmd", cmd);
	static const char *const plain[] = { "status", "config", "reload", "stats", "workers",
					       "logrotate" };
	json_int_t id, gen;

	if (strcmp(cmd, "reload") == 0 && argc == 1 && strcmp(argv[0], "--force") == 0) {
		json_object_set_new(req, "force", json_true());
		return req;
	}

	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
		if (strcmp(cmd, plain[i]) == 0)
			return argc == 0 ? req : (json_decref(req), NULL);
	if (strcmp(cmd, "disconnect") == 0) {
		if (argc == 2 && strcmp(argv[0], "--user") == 0) {
			json_object_set_new(req, "user", json_string(argv[1]));
			return req;
		}
		if ((argc == 1 || (argc == 3 && strcmp(argv[1], "--gen") == 0 &&
				   ctl_parse_nonneg(argv[2], &gen) == 0)) &&
		    ctl_parse_nonneg(argv[0], &id) == 0) {
			/* [ID, GEN]: a daemon older than the generation refuses an "id" that
			 * is not an integer, instead of ending whatever allocation holds ID */
			json_object_set_new(req, "id",
					    argc == 3 ? json_pack("[I, I]", id, gen)
						      : json_integer(id));
			return req;
		}
	}
	if (strcmp(cmd, "drain") == 0 && argc <= 1) {
		if (argc == 0 || strcmp(argv[0], "on") == 0)
			return req;
		if (strcmp(argv[0], "off") == 0) {
			json_object_set_new(req, "on", json_false());
			return req;
		}
	}
	if (strcmp(cmd, "loglevel") == 0 && argc <= 1) {
		if (argc == 1)
			json_object_set_new(req, "spec", json_string(argv[0]));
		return req;
	}
	json_decref(req);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *sock = getenv("TURNGATE_ADMIN_SOCKET"), *cmd;
	bool as_json = false;
	json_t *req, *reply = NULL;
	int i = 1, rc;

	if (sock == NULL || sock[0] == '\0')
		sock = CTL_DEFAULT_SOCKET;
	for (; i < argc && argv[i][0] == '-'; i++) {
		if ((strcmp(argv[i], "-s") == 0 || strcmp(argv[i], "--socket") == 0) &&
		    i + 1 < argc) {
			sock = argv[++i];
		} else if (strcmp(argv[i], "--json") == 0) {
			as_json = true;
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return CTL_EXIT_OK;
		} else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--version") == 0) {
			printf("turngatectl %s\n", PACKAGE_VERSION);
			return CTL_EXIT_OK;
		} else {
			usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (i >= argc) {
		usage(stderr);
		return CTL_EXIT_USAGE;
	}
	cmd = argv[i];
	if (strcmp(cmd, "probe") == 0) {
		rc = ctl_probe_main(argc - i - 1, argv + i + 1);
		if (rc == CTL_EXIT_USAGE)
			usage(stderr);
		return rc;
	}
	if (strcmp(cmd, "upgrade") == 0) {
		rc = ctl_upgrade_main(sock, argc - i - 1, argv + i + 1);
		if (rc == CTL_EXIT_USAGE)
			usage(stderr);
		return rc;
	}
	if (strcmp(cmd, "allocations") == 0) {
		rc = ctl_allocations_main(sock, as_json, argc - i - 1, argv + i + 1);
		if (rc == CTL_EXIT_USAGE)
			usage(stderr);
		return rc;
	}
	if (strcmp(cmd, "top") == 0) {
		rc = ctl_top_main(sock, as_json, argc - i - 1, argv + i + 1);
		if (rc == CTL_EXIT_USAGE)
			usage(stderr);
		return rc;
	}
	if (strcmp(cmd, "doctor") == 0) {
		rc = ctl_doctor_main(sock, argc - i - 1, argv + i + 1);
		if (rc == CTL_EXIT_USAGE)
			usage(stderr);
		return rc;
	}
	if (strcmp(cmd, "revoke") == 0 || strcmp(cmd, "unrevoke") == 0 ||
	    strcmp(cmd, "revocations") == 0)
		req = revoke_request(&cmd, argc - i - 1, argv + i + 1);
	else
		req = build_request(cmd, argc - i - 1, argv + i + 1);
	if (req == NULL) {
		fprintf(stderr, "turngatectl: bad command or arguments: %s\n", cmd);
		usage(stderr);
		return CTL_EXIT_USAGE;
	}
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
