/* turngatectl: shared declarations of the admin client (request building and reply printing).
 *
 * Process model: a short-lived command-line process; nothing here is used by the daemon.
 */
#ifndef TG_CTL_CTL_H
#define TG_CTL_CTL_H

#include <stdio.h>

#include <jansson.h>

#define CTL_DEFAULT_SOCKET "/run/turngate/admin.sock"
#define CTL_REPLY_MAX (64u << 20)
#define CTL_TIMEOUT_S 30

/* Exit statuses. */
enum { CTL_EXIT_OK = 0, CTL_EXIT_ERROR = 1, CTL_EXIT_USAGE = 2, CTL_EXIT_CONNECT = 3 };

/* Sends req (one JSON line) to the admin socket at path and reads one reply line.
 * Returns 0 and *reply (new reference), or -errno (connect, I/O, timeout) / -EBADMSG
 * (reply not a JSON object); *why gets a static description on failure. */
int ctl_request(const char *path, json_t *req, json_t **reply, const char **why);

/* Prints a successful reply of command cmd in human form to out. */
void ctl_print_human(const char *cmd, json_t *reply, FILE *out);

/* Prints a failed reply ({"ok":false,...}) to out: the error and any "errors" lines. */
void ctl_print_error(const char *cmd, json_t *reply, FILE *out);

/* `turngatectl probe ARGS...` (argv after "probe"): returns the exit status; CTL_EXIT_USAGE
 * for bad arguments (the caller prints the usage). */
int ctl_probe_main(int argc, char **argv);

#endif
