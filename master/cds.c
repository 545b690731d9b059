/* Master: the CDS watch (connect, WebSocket handshake, frames, apply each config, redial every
 * second, as stunnerd). */
#include "config.h"

#include "master/cds.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "common/grow.h"
#include "common/log.h"

/* stunnerd's client (l7mp/stunner pkg/config/client/client.go, cds_api.go): */
#define CDS_RETRY_S 1.0         /* RetryPeriod: redial every second, no backoff */
#define CDS_PING_S 5.0          /* PingPeriod */
#define CDS_SILENCE_S 8.0       /* PongWait: nothing (message or pong) for this long: redial */
#define CDS_TICK_S 1.0          /* how often the keepalive timer looks */
#define CDS_OUT_CAP 4096

enum cds_state {
	CDS_IDLE = 0,
	CDS_CONNECTING,
	CDS_HANDSHAKE,
	CDS_OPEN
};

struct cds {
	struct master *m;
	char host[256], port[16], path[600], hostport[300];
	char authority[300];         /* host[:port] as the origin spells it: Host and Origin */
	enum cds_state state;
	int fd;
	ev_io io;
	ev_timer retry, keepalive;
	double last_rx, last_ping;
	char accept[WS_ACCEPT_LEN + 1];
	uint8_t *in;                 /* received, not yet parsed */
	size_t in_len, in_cap;
	uint8_t out[CDS_OUT_CAP];    /* to send: the request, pongs, pings, close */
	size_t out_len;
	char *msg;                   /* text message being reassembled */
	size_t msg_len;
	bool in_msg;
	char *good;                  /* last applied config text */
	char *pending;               /* the update being applied */
	unsigned applied, rejected;
};

/* stunnerd's getURI puts "http://" before an origin without a scheme, so "IP:PORT" and
 * "HOST:PORT" are CDS origins too (a file path has a '/' or no ":PORT" at its end). */
static bool bare_hostport(const char *s)
{
	const char *colon = strrchr(s, ':');

	return colon != NULL && colon[1] != '\0' && strchr(s, '/') == NULL &&
	       strspn(colon + 1, "0123456789") == strlen(colon + 1);
}

bool cds_is_origin(const char *config)
{
	return config != NULL &&
	       (strncmp(config, "http://", 7) == 0 || strncmp(config, "https://", 8) == 0 ||
		strncmp(config, "ws://", 5) == 0 || strncmp(config, "wss://", 6) == 0 ||
		bare_hostport(config));
}

int cds_parse_origin(const char *origin, char *host, size_t host_cap, char *port, size_t port_cap)
{
	const char *p = strstr(origin, "://"), *end, *colon;
	size_t hl;

	if (strncmp(origin, "https://", 8) == 0 || strncmp(origin, "wss://", 6) == 0)
		return -EPROTONOSUPPORT;
	if (!cds_is_origin(origin))
		return -EINVAL;
	p = p != NULL ? p + 3 : origin;
	end = p + strcspn(p, "/?#");
	if (*p == '[') {
		const char *rb = memchr(p, ']', (size_t)(end - p));

		if (rb == NULL)
			return -EINVAL;
		hl = (size_t)(rb - p - 1);
		memcpy(host, p + 1, hl < host_cap ? hl : 0);
		colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
		p++;
	} else {
		colon = memchr(p, ':', (size_t)(end - p));
		hl = (size_t)((colon ? colon : end) - p);
		memcpy(host, p, hl < host_cap ? hl : 0);
	}
	/* "http://:13478" (the operator's default origin) is the local host, as Go dials it. */
	if ((hl == 0 && colon == NULL) || hl >= host_cap)
		return -EINVAL;
	host[hl] = '\0';
	if (colon == NULL) {
		snprintf(port, port_cap, "%s", CDS_DEFAULT_PORT);
		return 0;
	}
	if ((size_t)(end - colon - 1) == 0 || (size_t)(end - colon - 1) >= port_cap ||
	    strspn(colon + 1, "0123456789") != (size_t)(end - colon - 1))
		return -EINVAL;
	snprintf(port, port_cap, "%.*s", (int)(end - colon - 1), colon + 1);
	return 0;
}

int cds_identity(const char *id, char *out, size_t cap)
{
	const char *ns = getenv("STUNNER_NAMESPACE"), *name = getenv("STUNNER_NAME");
	char hn[128] = "localhost";

	if (id != NULL) {
		const char *slash = strchr(id, '/');

		if (slash == NULL || slash == id || slash[1] == '\0' || strchr(slash + 1, '/'))
			return -EINVAL;
		snprintf(out, cap, "%s", id);
		return 0;
	}
	if (ns != NULL && ns[0] != '\0' && name != NULL && name[0] != '\0') {
		snprintf(out, cap, "%s/%s", ns, name);
		return 0;
	}
	gethostname(hn, sizeof(hn) - 1);
	hn[sizeof(hn) - 1] = '\0';
	snprintf(out, cap, "default/stunnerd-%s", hn);
	return 0;
}

/* ---- connection ------------------------------------------------------------------------ */

static void cds_dial(struct cds *c);

static void drop(struct cds *c, const char *why)
{
	struct ev_loop *loop = c->m->loop;

	if (c->state == CDS_OPEN) {
		/* stunnerd says goodbye with an empty close frame; best effort. */
		static const uint8_t none[1];

		log_warn("cds", "stream from %s closed: %s; redialling", c->hostport, why);
		c->out_len = 0;
		if (ws_frame_build(WS_CLOSE, none, 0, c->out, sizeof(c->out), &c->out_len) == 0)
			(void)send(c->fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
	} else {
		log_warn("cds", "cannot watch %s%s: %s; retrying in %.0f s", c->hostport, c->path,
			 why, CDS_RETRY_S);
	}
	ev_io_stop(loop, &c->io);
	ev_timer_stop(loop, &c->keepalive);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->state = CDS_IDLE;
	c->in_len = c->out_len = c->msg_len = 0;
	c->in_msg = false;
	ev_timer_set(&c->retry, CDS_RETRY_S, 0.);
	ev_timer_start(loop, &c->retry);
}

/* Sends what is queued; waits for writability when the socket is full. */
static int flush_out(struct cds *c)
{
	while (c->out_len > 0) {
		ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0)
			return -errno;
		memmove(c->out, c->out + n, c->out_len - (size_t)n);
		c->out_len -= (size_t)n;
	}
	ev_io_stop(c->m->loop, &c->io);
	ev_io_set(&c->io, c->fd, EV_READ | (c->out_len > 0 ? EV_WRITE : 0));
	ev_io_start(c->m->loop, &c->io);
	return 0;
}

static int queue_frame(struct cds *c, uint8_t opcode, const uint8_t *p, size_t len)
{
	size_t n = 0;
	int rc = ws_frame_build(opcode, p, len, c->out + c->out_len, sizeof(c->out) - c->out_len,
				&n);

	if (rc < 0)
		return rc;
	c->out_len += n;
	return flush_out(c);
}

static int send_request(struct cds *c)
{
	char key[WS_KEY_LEN + 1];
	int n;

	if (ws_key_new(key) < 0)
		return -EIO;
	ws_accept_of(key, c->accept);
	n = snprintf((char *)c->out, sizeof(c->out),
		     "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
		     "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
		     "Sec-WebSocket-Version: 13\r\nOrigin: http://%s\r\n"
		     "User-Agent: turngated/" PACKAGE_VERSION "\r\n\r\n",
		     c->path, c->authority, key, c->authority);
	if (n < 0 || (size_t)n >= sizeof(c->out))
		return -EMSGSIZE;
	c->out_len = (size_t)n;
	c->state = CDS_HANDSHAKE;
	return flush_out(c);
}

static bool str_is(json_t *o, const char *key, const char *want)
{
	json_t *v = json_object_get(o, key);

	return json_is_string(v) && strcmp(json_string_value(v), want) == 0;
}

/* An unset or empty string, or one equal to the default. */
static bool str_default(json_t *o, const char *key, const char *def)
{
	json_t *v = json_object_get(o, key);

	return v == NULL || json_is_null(v) ||
	       (json_is_string(v) && (json_string_value(v)[0] == '\0' ||
				      (def != NULL && strcmp(json_string_value(v), def) == 0)));
}

static bool empty_list(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return v == NULL || json_is_null(v) || (json_is_array(v) && json_array_size(v) == 0);
}

/* stunnerd's IsConfigDeleted (pkg/config/client/config.go): the config equals, after
 * Validate() defaults, the ZeroConfig the server pushes when a Gateway is deleted: admin
 * with only its name (and any loglevel), static auth with the dummy credentials and the
 * default realm, no listeners, no clusters. In watch mode stunnerd ignores it, so a pod
 * being removed keeps serving through its drain. */
static bool is_zero_config(const char *text)
{
	json_t *j = json_loads(text, 0, NULL);
	json_t *admin, *auth, *cred;
	bool zero = false;

	if (j == NULL)
		return false;
	admin = json_object_get(j, "admin");
	auth = json_object_get(j, "auth");
	cred = json_object_get(auth, "credentials");
	zero = json_is_object(auth) && json_is_object(cred) && json_object_size(cred) == 2 &&
	       str_is(cred, "username", "dummy-username") &&
	       str_is(cred, "password", "dummy-password") && str_default(auth, "type", "static") &&
	       str_default(auth, "realm", "stunner.l7mp.io") && empty_list(j, "listeners") &&
	       empty_list(j, "clusters") &&
	       (admin == NULL ||
		(json_is_object(admin) && str_default(admin, "metrics_endpoint", NULL) &&
		 str_default(admin, "offload_engine", "None") &&
		 empty_list(admin, "offload_interfaces") &&
		 json_object_get(admin, "license_config") == NULL &&
		 (json_object_get(admin, "healthcheck_endpoint") == NULL ||
		  str_is(admin, "healthcheck_endpoint", "http://:8086")) &&
		 (json_object_get(admin, "user_quota") == NULL ||
		  json_integer_value(json_object_get(admin, "user_quota")) <= 0)));
	json_decref(j);
	return zero;
}

/* One complete text message: a full config. */
static void apply_message(struct cds *c, char *text)
{
	int rc;

	if (text[0] == '\0') {
		log_warn("cds", "ignoring zero-length config");
		free(text);
		return;
	}
	if (c->good != NULL && strcmp(c->good, text) == 0) {
		log_debug("cds", "config unchanged; nothing to apply");
		free(text);
		return;
	}
	if (is_zero_config(text)) {
		log_info("cds", "ignoring delete configuration update (zero config)");
		free(text);
		return;
	}
	c->pending = text;
	rc = reload_run(c->m, "cds", 0);
	if (rc == 0) {
		free(c->good);
		c->good = c->pending;
		c->applied++;
	} else {
		log_error("cds", "config update rejected; the running configuration is "
				 "unchanged (turngatectl status shows why)");
		free(c->pending);
		c->rejected++;
	}
	c->pending = NULL;
}

/* Handles one frame; returns 0, or -errno to drop the connection. */
static int on_frame(struct cds *c, const struct ws_frame *f)
{
	char *grown;

	switch (f->opcode) {
	case WS_PING:
		return queue_frame(c, WS_PONG, f->payload, f->len);
	case WS_PONG:
		return 0;
	case WS_CLOSE:
		queue_frame(c, WS_CLOSE, f->payload, f->len < 2 ? f->len : 2);
		return -ECONNRESET;
	case WS_TEXT:
	case WS_CONT:
		if ((f->opcode == WS_TEXT) == c->in_msg)
			return -EBADMSG;  /* a continuation without a start, or vice versa */
		if (c->msg_len + f->len > CDS_MAX_MESSAGE)
			return -EMSGSIZE;
		grown = realloc(c->msg, c->msg_len + f->len + 1);
		if (grown == NULL)
			return -ENOMEM;
		c->msg = grown;
		memcpy(c->msg + c->msg_len, f->payload, f->len);
		c->msg_len += f->len;
		c->msg[c->msg_len] = '\0';
		c->in_msg = !f->fin;
		if (f->fin) {
			char *text = c->msg;

			c->msg = NULL;
			c->msg_len = 0;
			apply_message(c, text);
		}
		return 0;
	default:
		return -EPROTONOSUPPORT;  /* binary frames: stunnerd aborts too */
	}
}

static int parse_input(struct cds *c)
{
	size_t off = 0;
	int rc = 0, status = 0;

	if (c->state == CDS_HANDSHAKE) {
		rc = ws_handshake_parse((const char *)c->in, c->in_len, c->accept, &off, &status);
		if (rc == 0)
			return 0;
		if (rc == -EPROTO) {
			log_error("cds", "%s%s answered HTTP %d%s", c->hostport, c->path, status,
				  status == 404 ? " (no config for this identity yet)" : "");
			return rc;
		}
		if (rc < 0)
			return rc;
		log_info("cds", "watching %s%s", c->hostport, c->path);
		c->state = CDS_OPEN;
		c->last_ping = ev_now(c->m->loop);
		ev_timer_set(&c->keepalive, CDS_TICK_S, CDS_TICK_S);
		ev_timer_start(c->m->loop, &c->keepalive);
	}
	while (c->state == CDS_OPEN && off < c->in_len) {
		struct ws_frame f;

		rc = ws_frame_parse(c->in + off, c->in_len - off, CDS_MAX_MESSAGE, &f);
		if (rc <= 0)
			break;
		rc = on_frame(c, &f);
		off += f.total;
		if (rc < 0)
			break;
	}
	memmove(c->in, c->in + off, c->in_len - off);
	c->in_len -= off;
	return rc < 0 ? rc : 0;
}

static int read_input(struct cds *c)
{
	for (int i = 0; i < 64; i++) {
		ssize_t n;

		if (c->in_cap - c->in_len < 16384) {
			/* From 65536 up, room for 16384 more is one doubling: refuse the one
			 * that would pass 2 * CDS_MAX_MESSAGE. */
			if (c->in_cap > (size_t)CDS_MAX_MESSAGE)
				return -EMSGSIZE;
			if (GROW_ARRAY(&c->in, &c->in_cap, c->in_len + 16384, 65536) < 0)
				return -ENOMEM;
		}
		n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		c->in_len += (size_t)n;
		c->last_rx = ev_now(c->m->loop);
		n = parse_input(c);
		if (n < 0 || c->fd < 0)
			return (int)n;
	}
	return 0;
}

static void io_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct cds *c = io->data;
	int rc = 0, err = 0;
	socklen_t el = sizeof(err);

	(void)loop;
	if (c->state == CDS_CONNECTING) {
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err != 0) {
			drop(c, strerror(err ? err : errno));
			return;
		}
		rc = send_request(c);
	} else if (revents & EV_WRITE) {
		rc = flush_out(c);
	}
	if (rc == 0 && (revents & EV_READ))
		rc = read_input(c);
	if (rc < 0)
		drop(c, rc == -EACCES ? "wrong Sec-WebSocket-Accept" : strerror(-rc));
}

static void cds_dial(struct cds *c)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
	int rc;

	c->state = CDS_CONNECTING;
	/* An empty host is the local host (NULL without AI_PASSIVE: loopback). */
	rc = getaddrinfo(c->host[0] ? c->host : NULL, c->port, &hints, &res);
	if (rc != 0) {
		drop(c, gai_strerror(rc));
		return;
	}
	/* The first address only: the operator hands out the CDS pod's IP. */
	c->fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0 ||
	    (connect(c->fd, res->ai_addr, res->ai_addrlen) < 0 && errno != EINPROGRESS)) {
		int err = errno;

		freeaddrinfo(res);
		drop(c, strerror(err));
		return;
	}
	freeaddrinfo(res);
	c->last_rx = ev_now(c->m->loop);
	ev_io_set(&c->io, c->fd, EV_READ | EV_WRITE);
	ev_io_start(c->m->loop, &c->io);
}

static void retry_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)revents;
	cds_dial(t->data);
}

/* stunnerd pings every 5 s ("keepalive") and gives up after 8 s without a message or a
 * pong; a server that answers pings keeps the stream alive, one that went away is
 * noticed here. */
static void keepalive_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct cds *c = t->data;
	int rc = 0;

	(void)revents;
	if (ev_now(loop) - c->last_rx > CDS_SILENCE_S) {
		drop(c, "no message or pong for 8 s");
		return;
	}
	if (ev_now(loop) - c->last_ping >= CDS_PING_S - 0.01) {
		c->last_ping = ev_now(loop);
		rc = queue_frame(c, WS_PING, (const uint8_t *)"keepalive", 9);
	}
	if (rc < 0)
		drop(c, strerror(-rc));
}

/* Appends s to out as Go's url.QueryEscape writes it. */
static void query_escape(char *out, size_t cap, const char *s)
{
	size_t n = strlen(out);

	for (; *s != '\0' && n + 4 < cap; s++) {
		unsigned char ch = (unsigned char)*s;

		if (isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~')
			out[n++] = (char)ch;
		else if (ch == ' ')
			out[n++] = '+';
		else
			n += (size_t)snprintf(out + n, cap - n, "%%%02X", ch);
	}
	out[n] = '\0';
}

/* The origin's host[:port] as written ("http://:13478" gives ":13478"), which is what Go
 * sends as Host and puts in stunnerd's Origin header. */
static void origin_authority(const char *origin, char *out, size_t cap)
{
	const char *p = strstr(origin, "://");

	p = p != NULL ? p + 3 : origin;
	snprintf(out, cap, "%.*s", (int)strcspn(p, "/?#"), p);
}

int cds_start(struct master *m, const char *id)
{
	struct cds *c = calloc(1, sizeof(*c));
	const char *slash = strchr(id, '/');
	const char *node = getenv("STUNNER_NODENAME");
	int rc;

	if (c == NULL)
		return -ENOMEM;
	rc = cds_parse_origin(m->config_path, c->host, sizeof(c->host), c->port, sizeof(c->port));
	if (rc < 0 || slash == NULL) {
		free(c);
		return rc < 0 ? rc : -EINVAL;
	}
	snprintf(c->hostport, sizeof(c->hostport), strchr(c->host, ':') ? "[%s]:%s" : "%s:%s",
		 c->host, c->port);
	origin_authority(m->config_path, c->authority, sizeof(c->authority));
	/* stunnerd's wsURI: url.Values.Encode, so the keys are sorted and the node escaped. */
	snprintf(c->path, sizeof(c->path), "/api/v1/configs/%.*s/%s?", (int)(slash - id), id,
		 slash + 1);
	if (node != NULL && node[0] != '\0') {
		strcat(c->path, "node=");
		query_escape(c->path, sizeof(c->path) - 16, node);
		strcat(c->path, "&");
	}
	strcat(c->path, "watch=true");
	c->m = m;
	c->fd = -1;
	ev_init(&c->io, io_cb);
	c->io.data = c;
	ev_init(&c->retry, retry_cb);
	c->retry.data = c;
	ev_init(&c->keepalive, keepalive_cb);
	c->keepalive.data = c;
	m->watcher = c;
	log_info("cds",
		 "config origin %s, identity %s: serving nothing until the first config "
		 "arrives",
		 m->config_path, id);
	cds_dial(c);
	return 0;
}

void cds_stop(struct master *m)
{
	struct cds *c = m->watcher;

	if (c == NULL)
		return;
	ev_io_stop(m->loop, &c->io);
	ev_timer_stop(m->loop, &c->retry);
	ev_timer_stop(m->loop, &c->keepalive);
	if (c->fd >= 0)
		close(c->fd);
	free(c->in);
	free(c->msg);
	free(c->good);
	free(c->pending);
	free(c);
	m->watcher = NULL;
}

int cds_config_text(struct master *m, char **text, size_t *len)
{
	const struct cds *c = m->watcher;
	const char *sock = getenv("TURNGATE_ADMIN_SOCKET");
	const char *src = c != NULL ? (c->pending != NULL ? c->pending : c->good) : NULL;
	json_t *boot;

	if (src != NULL) {
		*text = strdup(src);
		*len = *text != NULL ? strlen(*text) : 0;
		return *text != NULL ? 0 : -ENOMEM;
	}
	/* stunnerd's bootstrap "zero config": nothing served; the admin socket is ours. */
	boot = json_pack("{s:s, s:{s:s, s:s}, s:{s:s, s:{s:s, s:s}}, s:[], s:[]}", "version", "v1",
			 "admin", "name", "cds-bootstrap", "healthcheck_endpoint", "", "auth",
			 "type", "static", "credentials", "username", "dummy-username", "password",
			 "dummy-password", "listeners", "clusters");
	if (boot != NULL && sock != NULL && sock[0] != '\0')
		json_object_set_new(json_object_get(boot, "admin"), "admin_socket",
				    json_string(sock));
	*text = boot != NULL ? json_dumps(boot, JSON_COMPACT) : NULL;
	json_decref(boot);
	*len = *text != NULL ? strlen(*text) : 0;
	return *text != NULL ? 0 : -ENOMEM;
}
