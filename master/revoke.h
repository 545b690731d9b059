/* Master: the revocation list's commands (admin socket `revoke`, `unrevoke`,
 * `revocations`; HTTP /revoke on the credential API server). The list itself lives in
 * the shared segment (shm/shm_revoke.h); revoking also ends the user's allocations at
 * once on every worker (master/disconnect.h: one IPC_DISC_REVOKED frame to each worker
 * that owns any). Master process only, on its loop. */
#ifndef TG_MASTER_REVOKE_H
#define TG_MASTER_REVOKE_H

#include <stddef.h>

#include <jansson.h>

#include "http/http_buf.h"
#include "master/master.h"

/* revoke and unrevoke on a live upgrade's old master from its hand-over on answer
 * UPGRADE_HANDOVER_BUSY (HTTP 503): the new master takes the list over with the table, and
 * answers them once it serves (upgrade_handover_busy). */

/* {"cmd":"revoke", "user":U | "user_id":ID, "for":SECONDS|"30s"|"10m"|"2h"|"7d"}: enters
 * the entry (until removed when "for" is absent) and ends the matching allocations.
 * Reply {"ok":true, "revoked":{entry}, "renewed":BOOL, "disconnected":N,
 * "not_reached":K}: N allocations the list now refuses on workers that were told to end
 * them, K on workers that could not be (not running, or the frame not sent). */
json_t *revoke_cmd_add(struct master *m, json_t *req);

/* {"cmd":"unrevoke", "user":U | "user_id":ID}: removes the entry. */
json_t *revoke_cmd_del(struct master *m, json_t *req);

/* {"cmd":"revocations"}: {"ok":true, "revocations":[{kind, name, since, until|null,
 * left}], "count":N, "capacity":N}. */
json_t *revoke_cmd_list(struct master *m, json_t *req);

/* HTTP handler (struct http_handlers.revoke; ctx is the master): GET lists, POST adds,
 * DELETE removes, with the arguments in the query (user=, user_id=, for=). The server
 * has already checked the bearer token. Writes the JSON reply into out and the HTTP
 * status into *status. Returns 0 or -ENOMEM. */
int revoke_http(void *ctx, const char *method, const char *query, size_t len,
		struct http_buf *out, unsigned *status);

/* Parses a duration: seconds ("90"), or a number with s, m, h or d ("2h"). Returns 0 and
 * *secs (> 0), or -EINVAL. */
int revoke_parse_duration(const char *s, int64_t *secs);

#endif
