/* HTTP endpoints of the master: health (/live, /ready, /status), Prometheus metrics and the
 * TURN credential API, served by libmicrohttpd from the master's libev loop.
 *
 * The module knows nothing of the master's internals: the master hands it a struct
 * http_handlers of callbacks (readiness, status JSON, metrics text, the current config for
 * minting) and one opaque ctx. A route whose callback is NULL is not served (404), so one
 * server can carry health only, metrics only, credentials only, or health and metrics when
 * their endpoints share an address and port.
 *
 * Event loop: MHD runs without threads in its epoll mode. Its epoll descriptor is watched
 * by an ev_io and its next timeout by an ev_timer; MHD_run() is called from those watchers
 * only and never blocks (it polls with timeout 0), so a slow or hostile client cannot stall
 * the loop. Limits: HTTP_CONN_LIMIT connections (a newcomer beyond it closes one of
 * the client network holding the most, see http_server.c;
 * HTTP_CONN_PER_IP from one client address, more are closed at once), HTTP_CONN_TIMEOUT_S
 * idle seconds per connection, HTTP_MEM_LIMIT bytes of request head per connection (more gets 431/414 from
 * MHD). Only GET and HEAD are served (405 with "Allow: GET, HEAD" otherwise).
 *
 * Process model: master only, on its loop; callbacks run on that loop, synchronously inside
 * MHD_run(). Not thread-safe.
 */
#ifndef TG_HTTP_HTTP_H
#define TG_HTTP_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ev.h>

#include "http/http_buf.h"

struct conf;

#define HTTP_CONN_LIMIT 64u
#define HTTP_CONN_PER_IP 16u   /* one client cannot take every slot (probes stay served) */
/* MHD's limit above ours, for connections shut to make room but not yet closed: MHD 0.9.75
 * accepts up to 11 a run, and accepts before it closes the previous run's shut ones, so up
 * to 22 may be open at once. */
#define HTTP_CONN_SLACK 24u
#define HTTP_CONN_TIMEOUT_S 10u
#define HTTP_MEM_LIMIT (32u * 1024u)

/* STUNner's default ports (pkg/apis/v1/default.go). */
#define HTTP_HEALTH_PORT 8086
#define HTTP_METRICS_PORT 8080
#define HTTP_CRED_PORT 8088
#define HTTP_METRICS_PATH "/metrics"

/* ---- endpoint URLs -------------------------------------------------------------- */

#define HTTP_PATH_MAX 256

/* A parsed "http://[host][:port][/path]" (STUNner's admin.*_endpoint forms). */
struct http_endpoint {
	struct sockaddr_storage addr;  /* bind address with port; in6addr_any when any_host */
	socklen_t addr_len;
	bool any_host;                 /* host empty, "0.0.0.0" or "::": all addresses */
	uint16_t port;
	char path[HTTP_PATH_MAX];      /* "" when the URL has no path (or just "/") */
};

/* Pure: parses url. Host: empty, an IPv4 literal, a bracketed IPv6 literal or "localhost"
 * (127.0.0.1); names are refused because the master must not block on DNS. Port: 1..65535,
 * default_port when absent (0 allowed only as an explicit ":0", for tests: any free port).
 * Path: kept verbatim (printable ASCII, no '?'/'#'); a lone "/" becomes "".
 * Returns 0 and fills *out; -EINVAL with *why (static string, may be NULL) on a bad URL;
 * -EPROTONOSUPPORT for a scheme other than http. */
int http_endpoint_parse(const char *url, uint16_t default_port, struct http_endpoint *out,
			const char **why);

/* True when a and b bind the same address and port (then they must share one server). */
bool http_endpoint_same_socket(const struct http_endpoint *a, const struct http_endpoint *b);

/* ---- handlers ------------------------------------------------------------------- */

enum http_readiness {
	HTTP_NOT_READY = 0,  /* no real config serving yet: 503 */
	HTTP_READY,          /* 200 */
	HTTP_DRAINING,       /* SIGTERM/admin drain: 503 */
};

/* Callbacks; each runs on the master's loop and must not block. Any may be NULL: the
 * matching route then answers 404 (exceptions: is_live NULL means always live). Bodies go
 * into *out; a callback returns 0 or a negative errno (answered 500). */
struct http_handlers {
	/* GET /live: 200 "{}\n" while true, else 503. */
	bool (*is_live)(void *ctx);
	/* GET /ready. Serving /ready needs this callback; /live and /status are served
	 * whenever readiness is set (it marks a health server). */
	enum http_readiness (*readiness)(void *ctx);
	/* GET /status: a JSON object with secrets already redacted. */
	int (*status_json)(void *ctx, struct http_buf *out);
	/* GET <metrics path>: Prometheus text (see http_metrics.h). */
	int (*metrics)(void *ctx, struct http_buf *out);
	/* Credential API (GET /ice and GET /?service=turn): the running config, borrowed until
	 * the callback returns to the loop. -ENOENT when there is none (answered 500). */
	int (*cred_config)(void *ctx, const struct conf **cfg);
	/* Optional bearer token for the credential API; NULL or "" = no token required. */
	const char *(*cred_token)(void *ctx);
	/* Revocation list (GET lists, POST adds, DELETE removes; /revoke on the credential
	 * API server): only with a cred_token set, which the request must carry. The query
	 * (raw, NULL when none) in; the JSON body into *out and the status into *status.
	 * Returns 0 or -ENOMEM (answered 500). */
	int (*revoke)(void *ctx, const char *method, const char *query, size_t len,
		      struct http_buf *out, unsigned *status);
	/* Unix seconds for minting; NULL = time(NULL). Injectable for tests. */
	int64_t (*now)(void *ctx);
	/* A listening socket already bound to addr (a live upgrade's inherited one: the
	 * server takes it), or -1 to open one. NULL = always open one. */
	int (*inherited_socket)(void *ctx, const struct sockaddr *addr);
};

/* ---- /status body ------------------------------------------------------------------ */

/* What the master knows beyond the config, for GET /status. */
struct http_status_info {
	enum http_readiness readiness;
	uint64_t allocations;         /* active, summed over workers */
	uint64_t generation;          /* config generation being served */
	unsigned workers_running, workers_total;
	bool last_reload_ok;
	bool last_reload_refused;     /* the guard refused it ("refused", not "failed") */
};

/* Pure: renders STUNner's StunnerStatus shape ({"version","admin","auth","listeners",
 * "clusters",...,"allocationCount":N,"status":"READY"|"NOT-READY"|"TERMINATING"}) plus
 * turngate's "generation", "workers":{"running","total"},
 * "lastReload":"ok"|"failed"|"refused" (refused: the reload guard's) and
 * "unknownRoutes" (listener routes that name no cluster and so admit nobody).
 * The config part comes from conf_to_json_redacted(): secrets, passwords, certificates and
 * keys never appear. cfg may be NULL (no config part). Returns 0, -ENOMEM. */
int http_status_render(const struct conf *cfg, const struct http_status_info *info,
		       struct http_buf *out);

/* ---- server --------------------------------------------------------------------- */

struct http_server;

/* Parses endpoint (see http_endpoint_parse; default port HTTP_HEALTH_PORT when handlers
 * has readiness, HTTP_CRED_PORT when only credentials, else HTTP_METRICS_PORT), opens the
 * listening socket (SO_REUSEADDR, CLOEXEC, non-blocking; "any" host binds [::] dual stack,
 * falling back to 0.0.0.0) and starts serving on loop. The metrics route is the URL's path,
 * or HTTP_METRICS_PATH when the URL has none. handlers is copied; ctx is borrowed and must
 * outlive the server. Returns 0 and *out; -EINVAL (bad endpoint or handlers), -errno from
 * socket/bind/listen (e.g. -EADDRINUSE), -EIO (MHD refused to start), -ENOMEM. */
int http_server_start(struct ev_loop *loop, const char *endpoint,
		      const struct http_handlers *handlers, void *ctx, struct http_server **out);

/* The port actually bound (useful with ":0"). */
uint16_t http_server_port(const struct http_server *srv);

/* The listening socket (owned by the server), -1 for NULL. */
int http_server_fd(const struct http_server *srv);

/* The old master of a live upgrade, from its hand-over on (hold true): the server takes no
 * new connection; one made meanwhile waits in the listening socket's queue for the new
 * master, which shares the socket. The connections already taken are served on. false (the
 * upgrade failed): takes connections again. MHD cannot undo its hold: the server restarts on
 * the same socket, and a connection the held one still served (a request in progress since
 * before the hold) is closed. Returns 0 (also for NULL or no change), or -EIO: the hold
 * failed (the server serves on as before) or the restart did (it serves nothing; stop it). */
int http_server_hold(struct http_server *srv, bool hold);

/* Before the old master of a live upgrade exits, its servers held: serves the connections
 * open on the n held servers of srvs (NULL entries, and servers not held, which would take
 * new connections, skipped) until none is left or max_s seconds have passed. Our answers
 * close their connection (MHD says "Connection: close" to a response queued before the
 * request's end), so an open one is a request in progress.
 * Blocks: nothing else of the loop runs meanwhile. Returns the number still open
 * (http_server_stop closes them). */
unsigned http_server_finish(struct http_server *const *srvs, size_t n, double max_s);

/* Stops the watchers, closes every connection and the socket, frees. Accepts NULL. */
void http_server_stop(struct http_server *srv);

#endif
