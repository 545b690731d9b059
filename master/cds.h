/* Master: client of STUNner's config discovery service (CDS): the WebSocket watch of one config.
 *
 * `turngated -c http://HOST:PORT` (or ws://, or $STUNNER_CONFIG_ORIGIN when -c is absent)
 * watches GET /api/v1/configs/{namespace}/{name}?watch=true[&node=NODE]. The server
 * upgrades to a WebSocket and sends the current config, then one text message per
 * update, each a full JSON StunnerConfig. Each one goes through reload_run() (trigger
 * "cds"): an invalid one is rejected and logged and the running config stays. Until the
 * first config arrives the daemon runs a bootstrap config with no listeners, as stunnerd
 * does with its "zero config". As in stunnerd's client: pings every 5 s, a stream silent
 * for 8 s is dropped, and a dropped stream (or a server that cannot be reached) is
 * redialled every second while the running config keeps serving; the server then resends
 * the current config, and an identical one is skipped.
 *
 * Process model: the master only, on its libev loop; the socket is non-blocking. The CDS
 * state hangs off m->watcher (in place of the inotify watch, see master/watch.c).
 */
#ifndef TG_MASTER_CDS_H
#define TG_MASTER_CDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master/master.h"

#define CDS_DEFAULT_PORT "13478"
#define CDS_MAX_MESSAGE (4u << 20)  /* a config larger than this is refused (and logged) */

/* True when config (a -c value) names a CDS origin: http://, https://, ws://, wss://, or
 * HOST:PORT without a scheme (stunnerd reads it as http://HOST:PORT). */
bool cds_is_origin(const char *config);

/* Splits a CDS origin into host and port (default 13478); host is "" for "http://:PORT"
 * (the local host, as Go dials it). Returns 0, -EINVAL for a malformed one,
 * -EPROTONOSUPPORT for https:// and wss:// (TLS is not supported). */
int cds_parse_origin(const char *origin, char *host, size_t host_cap, char *port, size_t port_cap);

/* The identity: id ("NS/NAME", from --id) when given, else $STUNNER_NAMESPACE and
 * $STUNNER_NAME, else "default/stunnerd-HOSTNAME" (stunnerd's default). Writes
 * "NS/NAME" to out. Returns 0 or -EINVAL (id without a '/'). */
int cds_identity(const char *id, char *out, size_t cap);

/* Starts watching m->config_path (a CDS origin) as identity id ("NS/NAME"); sets
 * m->watcher. Returns 0 or -errno (bad origin). Connection failures are retried, not
 * returned. */
int cds_start(struct master *m, const char *id);
/* Closes the stream and frees the state; accepts a master without one. */
void cds_stop(struct master *m);

/* The config text the reload path loads in CDS mode: the update being applied, else the
 * last applied one, else the bootstrap config (no listeners; admin socket
 * $TURNGATE_ADMIN_SOCKET or the default). Returns 0 and *text (malloc'd, NUL-terminated,
 * caller frees) and *len, or -ENOMEM. */
int cds_config_text(struct master *m, char **text, size_t *len);

/* ---- WebSocket pieces (master/cds_ws.c), pure functions ------------------------------- */

#define WS_KEY_LEN 24
#define WS_ACCEPT_LEN 28
#define WS_MAX_HEADERS 8192
enum {
	WS_CONT = 0x0,
	WS_TEXT = 0x1,
	WS_BINARY = 0x2,
	WS_CLOSE = 0x8,
	WS_PING = 0x9,
	WS_PONG = 0xa
};

/* A random Sec-WebSocket-Key (base64 of 16 bytes). Returns 0 or -EIO. */
int ws_key_new(char key[WS_KEY_LEN + 1]);
/* The Sec-WebSocket-Accept a server must answer to key. */
void ws_accept_of(const char *key, char out[WS_ACCEPT_LEN + 1]);

/* Parses the server's handshake response in buf[0..len). Returns 0 when the header block
 * is incomplete, 1 when it is a valid upgrade (*consumed: its length; frames may follow),
 * -EPROTO when the status is not 101 (*status says which), -EACCES for a wrong
 * Sec-WebSocket-Accept, -EBADMSG for a malformed response or missing Upgrade/Connection,
 * -EMSGSIZE for headers over WS_MAX_HEADERS. */
int ws_handshake_parse(const char *buf, size_t len, const char *accept, size_t *consumed,
		       int *status);

struct ws_frame {
	bool fin;
	uint8_t opcode;
	const uint8_t *payload;  /* points into the parsed buffer */
	size_t len;              /* payload length */
	size_t total;            /* header + payload bytes consumed */
};

/* Parses one server frame at buf[0..len). Returns 1 and *f, 0 when incomplete, -EBADMSG
 * (masked frame, RSV bits, bad control frame), -EMSGSIZE (payload over max_payload). */
int ws_frame_parse(const uint8_t *buf, size_t len, size_t max_payload, struct ws_frame *f);

/* Builds one masked client frame (FIN set) into out. Returns 0 and *out_len, -EMSGSIZE
 * (payload over 65535 bytes or cap too small), -EIO. */
int ws_frame_build(uint8_t opcode, const uint8_t *payload, size_t len, uint8_t *out, size_t cap,
		   size_t *out_len);

#endif
