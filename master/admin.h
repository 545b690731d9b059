/* Master: admin unix socket (line-delimited JSON) and its command dispatcher.
 *
 * Protocol: the client writes one JSON object per line, {"cmd":"NAME", ...arguments}; the
 * master answers each with one JSON object on one line: {"ok":true, ...} or
 * {"ok":false,"error":"what went wrong"}. Requests are answered in order, one at a time.
 * Lines are at most ADMIN_LINE_MAX bytes, at most ADMIN_MAX_CLIENTS connections are served,
 * replies are capped at ADMIN_OUT_MAX bytes. Master process only.
 */
#ifndef TG_MASTER_ADMIN_H
#define TG_MASTER_ADMIN_H

#include <jansson.h>

#include "master/master.h"

#define ADMIN_LINE_MAX 8192
#define ADMIN_MAX_CLIENTS 16
#define ADMIN_OUT_MAX (32u << 20)
#define ADMIN_DEFAULT_LIMIT 1000

/* Creates the socket at path with the given mode (0600 by default in the config), after
 * removing a stale socket file left by a dead daemon (a live one is -EADDRINUSE; a
 * non-socket file is -EEXIST). Returns 0 and *out, or -errno. */
int admin_open(struct master *m, const char *path, unsigned mode, struct admin **out);

/* Closes every connection, removes the socket file (unless the master handed it over to
 * a live upgrade's new master). Accepts NULL. */
void admin_close(struct admin *a);

/* The listening socket, -1 for NULL. */
int admin_fd(const struct admin *a);

/* A socket inherited by a live upgrade is served from here on (no-op otherwise). */
void admin_resume(struct admin *a);

/* Runs one request line and returns the reply object (new reference; NULL only when out of
 * memory). Never fails on bad input: malformed JSON, a missing or unknown command and bad
 * arguments all produce {"ok":false,"error":...}. */
json_t *admin_dispatch(struct master *m, const char *line, size_t len);

#endif
