/* libmicrohttpd server driven by the master's libev loop (epoll fd + timeout watchers). */
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/mono.h"
#include "http/http_cred.h"
#include "http/http_int.h"

static void srv_rearm(struct http_server *s)
{
	MHD_UNSIGNED_LONG_LONG ms = 0;
	ev_timer_stop(s->loop, &s->timer);
	if (MHD_get_timeout(s->daemon, &ms) == MHD_YES) {
		ev_timer_set(&s->timer, (double)ms / 1000.0, 0.);
		ev_timer_start(s->loop, &s->timer);
	}
}

static unsigned srv_open_connections(const struct http_server *s)
{
	const union MHD_DaemonInfo *info;

	if (s == NULL || s->daemon == NULL)
		return 0;
	info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
	return info != NULL ? info->num_connections : 0;
}

/* MHD_run() in epoll mode polls with timeout 0: it accepts, reads, writes whatever is
 * ready and returns; it never waits on a client.
 *
 * At HTTP_CONN_LIMIT connections MHD takes its listening socket out of its epoll set, and
 * puts it back only at the start of a later MHD_run(), once connections have closed. When
 * the last connections close within one run, nothing calls it again (no connection left,
 * so no timeout; the listening socket is not watched): the endpoint would never accept
 * again (64 connections from 4 addresses, closed together, ended /live for good). So a
 * run that closed connections is followed by another at once. */
static void srv_run(struct http_server *s)
{
	unsigned before = srv_open_connections(s);

	if (MHD_run(s->daemon) != MHD_YES)
		log_debug("http", "MHD_run reported an error");
	if (srv_open_connections(s) < before) {
		ev_timer_stop(s->loop, &s->timer);
		ev_timer_set(&s->timer, 0., 0.);
		ev_timer_start(s->loop, &s->timer);
		return;
	}
	srv_rearm(s);
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	srv_run(w->data);
}

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	srv_run(w->data);
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct http_req *req = calloc(1, sizeof(*req));
	const char *q = uri ? strchr(uri, '?') : NULL;
	size_t n;

	(void)cls;
	(void)conn;
	if (req == NULL || q == NULL)
		return req;
	n = strlen(q + 1);
	if (n > HTTP_CRED_QUERY_MAX) {
		req->query_too_long = true;
		return req;
	}
	req->query = strndup(q + 1, n);
	req->query_len = req->query ? n : 0;
	req->query_too_long = req->query == NULL;
	return req;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
			 enum MHD_RequestTerminationCode code)
{
	struct http_req *req = *req_cls;

	(void)cls;
	(void)conn;
	(void)code;
	if (req != NULL) {
		if (req->query != NULL)
			explicit_bzero(req->query, req->query_len);
		free(req->query);
		free(req);
	}
	*req_cls = NULL;
}

/* The client's network, the unit a victim is chosen by: an IPv4 address (mapped ones
 * too) or an IPv6 /64, since one host may hold a whole /64 and MHD's per-address limit
 * counts exact addresses. */
static void conn_net(struct MHD_Connection *conn, uint8_t net[16])
{
	const union MHD_ConnectionInfo *info =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = info != NULL ? info->client_addr : NULL;

	memset(net, 0, 16);
	if (sa != NULL && sa->sa_family == AF_INET) {
		net[10] = net[11] = 0xff;
		memcpy(net + 12, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
	} else if (sa != NULL && sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
		memcpy(net, a, IN6_IS_ADDR_V4MAPPED(a) ? 16 : 8);
	}
}

/* conns stays oldest first; each entry's peers counts the entries from its network. */
static void conns_add(struct http_server *s, struct http_conn *c)
{
	struct http_conn *e;

	c->peers = 1;
	TAILQ_FOREACH(e, &s->conns, link) {
		if (memcmp(e->net, c->net, sizeof(c->net)) == 0) {
			e->peers++;
			c->peers++;
		}
	}
	TAILQ_INSERT_TAIL(&s->conns, c, link);
	s->nconns++;
}

static void conns_remove(struct http_server *s, struct http_conn *c)
{
	struct http_conn *e;

	TAILQ_REMOVE(&s->conns, c, link);
	s->nconns--;
	TAILQ_FOREACH(e, &s->conns, link) {
		if (memcmp(e->net, c->net, sizeof(c->net)) == 0)
			e->peers--;
	}
}

/* The connection to close for newcomer: one of the network holding the most, among those
 * one whose request head is not complete, among those the oldest. Oldest alone let 5
 * attacker addresses (or one IPv6 /64) close a legitimate client's request in progress
 * (a large /metrics answer to a remote scraper, a credential call over a WAN): whoever
 * holds the most loses its own, and a request already being answered goes only when every
 * network holds as many and none is still sending its head (then the globally oldest).
 * One pass over at most HTTP_CONN_LIMIT + 1 entries. The newcomer itself is never chosen:
 * it is served. */
static struct http_conn *conns_victim(struct http_server *s, const struct http_conn *newcomer)
{
	struct http_conn *e, *best = NULL;

	TAILQ_FOREACH(e, &s->conns, link) {
		if (e == newcomer)
			continue;
		if (best == NULL || e->peers > best->peers ||
		    (e->peers == best->peers && best->headed && !e->headed))
			best = e;
	}
	return best;
}

void http_conn_headed(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *info =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct http_conn *c = info != NULL ? info->socket_context : NULL;

	if (c == NULL)
		return;
	assert(c->magic == HTTP_CONN_MAGIC);
	c->headed = true;
}

/* A full server closes a connection to make room: slow clients (a header line within
 * every idle timeout) from 4 addresses held all HTTP_CONN_LIMIT slots while MHD refused
 * newcomers, so /live did not answer for as long as the attacker pleased. Now every
 * newcomer is served and an attacker displaces its own connections (conns_victim).
 * shutdown() makes MHD see the end and close the connection itself, in its next run;
 * MHD's own limit sits HTTP_CONN_SLACK above, for the connections shut but not yet
 * closed. */
static void on_conn(void *cls, struct MHD_Connection *conn, void **ctx,
		    enum MHD_ConnectionNotificationCode code)
{
	struct http_server *s = cls;
	struct http_conn *c = *ctx, *old;
	const union MHD_ConnectionInfo *info;

	if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (c != NULL) {
			assert(c->magic == HTTP_CONN_MAGIC);
			if (!c->shut)
				conns_remove(s, c);
			c->magic = 0;
		}
		free(c);
		*ctx = NULL;
		return;
	}
	info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	c = info != NULL ? calloc(1, sizeof(*c)) : NULL;
	if (c == NULL)
		return;
	c->magic = HTTP_CONN_MAGIC;
	c->fd = info->connect_fd;
	conn_net(conn, c->net);
	conns_add(s, c);
	*ctx = c;
	if (s->nconns <= HTTP_CONN_LIMIT)
		return;
	old = conns_victim(s, c);
	conns_remove(s, old);
	old->shut = true;
	(void)shutdown(old->fd, SHUT_RDWR);
	log_debug("http", "%u connections: closing one of a network holding %u to make room",
		  HTTP_CONN_LIMIT, old->peers);
}

__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[256];
	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	msg[strcspn(msg, "\n")] = '\0';
	log_debug("http", "%s", msg);
}

/* Opens the listening socket; "any" binds [::] dual stack, or 0.0.0.0 without IPv6. */
static int srv_listen(const struct http_server *s, const struct http_endpoint *ep, int *fd_out,
		      uint16_t *port)
{
	struct sockaddr_storage ss = ep->addr;
	socklen_t len = ep->addr_len;
	int one = 1, zero = 0;
	int fd = s->h.inherited_socket != NULL
			 ? s->h.inherited_socket(s->ctx, (const struct sockaddr *)&ss)
			 : -1;
	if (fd >= 0) {
		*port = ep->port;
		*fd_out = fd;
		return 0;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 && ep->any_host && errno == EAFNOSUPPORT) {
		struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
		memset(&ss, 0, sizeof(ss));
		v4->sin_family = AF_INET;
		v4->sin_port = htons(ep->port);
		len = sizeof(*v4);
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	}
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss.ss_family == AF_INET6 && ep->any_host)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 64) != 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	*port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					      : ((struct sockaddr_in6 *)&ss)->sin6_port);
	*fd_out = fd;
	return 0;
}

static uint16_t default_port(const struct http_handlers *h)
{
	if (h->readiness != NULL)
		return HTTP_HEALTH_PORT;
	if (h->cred_config != NULL && h->metrics == NULL)
		return HTTP_CRED_PORT;
	return HTTP_METRICS_PORT;
}

static int srv_daemon(struct http_server *s, int lfd)
{
	const union MHD_DaemonInfo *info;

	s->daemon = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, http_route,
				     s, MHD_OPTION_LISTEN_SOCKET, lfd, MHD_OPTION_CONNECTION_LIMIT,
				     (unsigned)(HTTP_CONN_LIMIT + HTTP_CONN_SLACK),
				     MHD_OPTION_PER_IP_CONNECTION_LIMIT,
				     (unsigned)HTTP_CONN_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT,
				     (unsigned)HTTP_CONN_TIMEOUT_S,
				     MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_MEM_LIMIT,
				     MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
				     MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
				     MHD_OPTION_NOTIFY_CONNECTION, on_conn, s,
				     MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, MHD_OPTION_END);
	if (s->daemon == NULL)
		return -EIO;
	info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
	if (info == NULL || info->epoll_fd < 0)
		return -EIO;
	ev_io_init(&s->io, on_io, info->epoll_fd, EV_READ);
	s->io.data = s;
	ev_init(&s->timer, on_timer);
	s->timer.data = s;
	ev_io_start(s->loop, &s->io);
	srv_rearm(s);
	return 0;
}

int http_server_start(struct ev_loop *loop, const char *endpoint,
		      const struct http_handlers *handlers, void *ctx, struct http_server **out)
{
	struct http_endpoint ep;
	const char *why = NULL;
	struct http_server *s = NULL;
	int lfd = -1, rc;

	*out = NULL;
	if (loop == NULL || handlers == NULL)
		return -EINVAL;
	rc = http_endpoint_parse(endpoint, default_port(handlers), &ep, &why);
	if (rc != 0) {
		log_error("http", "bad endpoint \"%s\": %s", endpoint ? endpoint : "",
			  why ? why : "invalid");
		return rc;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	s->magic = HTTP_SERVER_MAGIC;
	TAILQ_INIT(&s->conns);
	s->loop = loop;
	s->h = *handlers;
	s->ctx = ctx;
	s->metrics_at_root = ep.path[0] == '\0';
	snprintf(s->metrics_path, sizeof(s->metrics_path), "%s",
		 ep.path[0] ? ep.path : HTTP_METRICS_PATH);
	rc = srv_listen(s, &ep, &lfd, &s->port);
	s->listen_fd = lfd;
	if (rc != 0) {
		log_error("http", "cannot listen on %s: %s", endpoint, strerror(-rc));
		goto fail;
	}
	rc = srv_daemon(s, lfd);
	if (rc != 0) {
		log_error("http", "cannot start the HTTP server on %s", endpoint);
		goto fail;
	}
	log_info("http", "serving %s (port %u)", endpoint, (unsigned)s->port);
	*out = s;
	return 0;
fail:
	if (s->daemon == NULL && lfd >= 0)
		close(lfd);  /* MHD owns (and closes) it once started */
	http_server_stop(s);
	return rc;
}

/* Stops serving: the watchers, then MHD (which closes its connections, and the listening
 * socket unless held: then it is ours). */
static void srv_halt(struct http_server *s)
{
	if (s->daemon == NULL)
		return;
	ev_io_stop(s->loop, &s->io);
	ev_timer_stop(s->loop, &s->timer);
	MHD_stop_daemon(s->daemon);
	s->daemon = NULL;
}

int http_server_hold(struct http_server *srv, bool hold)
{
	if (srv == NULL || srv->held == hold)
		return 0;
	if (hold) {
		/* External polling: MHD takes the socket out of its epoll set, nothing more. */
		if (srv->daemon == NULL || MHD_quiesce_daemon(srv->daemon) == MHD_INVALID_SOCKET)
			return -EIO;
		srv->held = true;
		return 0;
	}
	/* MHD cannot take a quiesced socket back: a new daemon on it. A connection the held
	 * one still serves (a request in progress since before the hold) is closed here. */
	srv_halt(srv);
	if (srv_daemon(srv, srv->listen_fd) != 0) {
		srv->held = srv->daemon == NULL;	/* the socket is still ours to close */
		return -EIO;
	}
	srv->held = false;
	return 0;
}

unsigned http_server_finish(struct http_server *const *srvs, size_t n, double max_s)
{
	uint64_t until = mono_ns() + (uint64_t)(max_s * 1e9);
	struct pollfd *pfd = calloc(n > 0 ? n : 1, sizeof(*pfd));

	for (;;) {
		uint64_t now = mono_ns(), wait = until > now ? (until - now) / 1000000u : 0;
		unsigned open = 0, k = 0;

		for (size_t i = 0; i < n; i++) {
			MHD_UNSIGNED_LONG_LONG ms;

			/* One not held (its hold failed) would take new connections here. */
			if (srvs[i] == NULL || srvs[i]->daemon == NULL || !srvs[i]->held)
				continue;
			(void)MHD_run(srvs[i]->daemon);	/* never waits, as from the loop */
			open += srv_open_connections(srvs[i]);
			if (MHD_get_timeout(srvs[i]->daemon, &ms) == MHD_YES && ms < wait)
				wait = ms;
			if (pfd != NULL) {
				pfd[k].fd = srvs[i]->io.fd;
				pfd[k++].events = POLLIN;
			}
		}
		if (open == 0 || now >= until || pfd == NULL) {
			free(pfd);
			return open;
		}
		/* +1: a wait rounded down to 0 ms would spin until the deadline */
		(void)poll(pfd, k, (int)wait + 1);
	}
}

int http_server_fd(const struct http_server *srv)
{
	return srv != NULL ? srv->listen_fd : -1;
}

uint16_t http_server_port(const struct http_server *srv)
{
	return srv ? srv->port : 0;
}

void http_server_stop(struct http_server *srv)
{
	if (srv == NULL)
		return;
	if (srv->magic != HTTP_SERVER_MAGIC)
		abort();
	srv_halt(srv);
	if (srv->held)
		close(srv->listen_fd);
	srv->magic = 0;
	free(srv);
}
