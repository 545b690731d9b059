/* Internals shared by http_server.c (MHD and libev plumbing) and http_routes.c (dispatch). */
#ifndef TG_HTTP_HTTP_INT_H
#define TG_HTTP_HTTP_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include <ev.h>
#include <microhttpd.h>

#include "http/http.h"

#define HTTP_SERVER_MAGIC 0x48545450u /* "HTTP" */

#define HTTP_CONN_MAGIC 0x48434f4eu /* "HCON" */

/* One open connection, oldest first in http_server.conns (MHD's socket context). */
struct http_conn {
	uint32_t magic;
	TAILQ_ENTRY(http_conn) link;  /* in conns until closed or shut to make room */
	int fd;
	bool shut;
	bool headed;                  /* its request head is complete (http_route was called) */
	uint8_t net[16];              /* client network: IPv4 /32 as ::ffff:a.b.c.d, IPv6 /64 */
	unsigned peers;               /* connections in conns from net, this one included */
};

struct http_server {
	uint32_t magic;
	struct ev_loop *loop;
	struct MHD_Daemon *daemon;
	int listen_fd;                /* owned by MHD once it started, ours while held */
	bool held;                    /* quiesced: takes no new connection (http_server_hold) */
	ev_io io;                     /* MHD's epoll fd */
	ev_timer timer;               /* MHD_get_timeout() */
	struct http_handlers h;
	void *ctx;
	char metrics_path[HTTP_PATH_MAX];
	bool metrics_at_root;         /* endpoint had no path: "/" also answers (STUNner) */
	uint16_t port;
	TAILQ_HEAD(, http_conn) conns; /* open connections not shut, oldest first */
	unsigned nconns;              /* entries in conns */
};

/* Per request, created by the URI log callback (before MHD splits and decodes the URL) so
 * the credential API parses the raw query itself. Freed by the completion callback. */
struct http_req {
	char *query;                  /* raw bytes after '?', NUL-terminated; NULL if none */
	size_t query_len;
	bool query_too_long;
};

/* Marks conn's request head complete (its first http_route call): a full server closes
 * such a connection to make room only when nothing else will do (http_server.c). */
void http_conn_headed(struct MHD_Connection *conn);

/* MHD access handler (cls is the server). */
enum MHD_Result http_route(void *cls, struct MHD_Connection *conn, const char *url,
			   const char *method, const char *version, const char *upload_data,
			   size_t *upload_data_size, void **req_cls);

#endif
