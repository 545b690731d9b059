/* Credential API compatible with stunner-auth-service: query parsing and JSON responses.
 *
 *   GET /ice?service=turn&username=U&ttl=S  -> {"iceServers":[{"urls":[...],
 *        "username":"<expiry>:U","credential":"..."}],"iceTransportPolicy":"all"}
 *   GET /?service=turn&username=U&ttl=S     -> {"username","password","ttl","uris"}
 *
 * Query parameters (others are ignored, a repeated key keeps its first value, as Go's
 * url.Values.Get): service (required, "turn"), username (user id, default ""), ttl (seconds,
 * 1..HTTP_CRED_TTL_MAX, default 86400), iceTransportPolicy (all|public|relay, /ice only),
 * namespace and gateway (must match admin.name "namespace/gateway"; gateway needs
 * namespace), listener (a listener name, or the last "/" component of one), public-addr
 * (host put in the URIs instead of each listener's public address), key (accepted, unused).
 *
 * Minting: ephemeral auth gives username "<now+ttl>:<username>" (the colon stays when the
 * user id is empty, as STUNner does) and password base64(HMAC-SHA1(current secret,
 * username)); static auth returns the configured pair; auth "none" returns URIs only.
 * Listeners with their own auth block get their own iceServers entry; the TURN REST form
 * returns the first entry only (stunner-auth-service does the same).
 *
 * Pure functions: no I/O, no global state; any process.
 */
#ifndef TG_HTTP_HTTP_CRED_H
#define TG_HTTP_HTTP_CRED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http/http_buf.h"

struct conf;

#define HTTP_CRED_TTL_DEFAULT 86400u
#define HTTP_CRED_TTL_MAX (10u * 365u * 86400u)
#define HTTP_CRED_USER_MAX 256     /* bytes of the user id */
#define HTTP_CRED_FIELD_MAX 256    /* namespace, gateway, listener */
#define HTTP_CRED_HOST_MAX 253     /* public-addr */
#define HTTP_CRED_QUERY_MAX 4096   /* raw query bytes */

enum http_ice_policy {
	HTTP_ICE_ALL = 0,
	HTTP_ICE_PUBLIC,
	HTTP_ICE_RELAY
};

struct http_cred_query {
	char username[HTTP_CRED_USER_MAX + 1];
	uint32_t ttl;
	enum http_ice_policy policy;
	char namespace_[HTTP_CRED_FIELD_MAX + 1];   /* "" when absent */
	char gateway[HTTP_CRED_FIELD_MAX + 1];
	char listener[HTTP_CRED_FIELD_MAX + 1];
	char public_addr[HTTP_CRED_HOST_MAX + 1];
};

/* Parses the raw query string (the bytes after '?', percent-encoded, '+' = space; need not
 * be NUL-terminated; NULL with len 0 is an empty query). Returns 0 and fills *out, or
 * -EINVAL with *why (a static message for the 400 body) on a malformed or invalid query. */
int http_cred_query_parse(const char *query, size_t len, struct http_cred_query *out,
			  const char **why);

enum http_cred_form {
	HTTP_CRED_REST = 0,
	HTTP_CRED_ICE
};

/* Renders the response for q under cfg at unix time now into out (JSON object followed by
 * a newline) and sets *status: 200, 404 (no listener matches the filters) or 500 (the
 * auth block lacks its secret/credentials). Error bodies are {"status":N,"message":"..."}.
 * Returns 0 (a response was rendered, whatever its status) or -ENOMEM/-EIO. */
int http_cred_render(const struct conf *cfg, const struct http_cred_query *q,
		     enum http_cred_form form, int64_t now, struct http_buf *out, int *status);

/* Renders {"status":status,"message":msg}\n into out. Returns 0 or -ENOMEM. */
int http_json_error(struct http_buf *out, int status, const char *msg);

/* RFC 7065 URI of one listener: "<turn|turns>:<host>:<port>?transport=<udp|tcp>" with an
 * IPv6 host in brackets; host override (may be NULL/"") replaces the listener's public
 * address. Returns 0, -ENOBUFS, -EINVAL (listener index out of range). */
int http_cred_listener_uri(const struct conf *cfg, size_t idx, const char *host_override, char *buf,
			   size_t cap);

#endif
