/* Master: the admin unix socket server (line-delimited JSON, bounded lines and clients). */
#include "config.h"

#include "master/admin.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/mono.h"

struct admin_client {
	struct admin *a;
	int fd;
	struct admin_peer peer;
	ev_io rio, wio;
	char in[ADMIN_LINE_MAX];
	size_t in_len;
	bool discarding;   /* inside an overlong line: skip to its newline */
	char *out;
	size_t out_len, out_off;
	bool closing;      /* close once out is flushed */
	uint64_t active;   /* mono_ms() of its last byte either way (or of its connect): not
			    * libev's loop time, which is the wall clock and steps */
	LIST_ENTRY(admin_client) link; /* struct admin's clients */
};

struct admin {
	struct master *m;
	int fd;
	bool paused;       /* inherited by a live upgrade: not accepting until it serves */
	ev_io io;
	char *path;
	unsigned n_clients;
	LIST_HEAD(, admin_client) clients;
};

static void client_free(struct admin_client *c)
{
	struct admin *a = c->a;

	ev_io_stop(a->m->loop, &c->rio);
	ev_io_stop(a->m->loop, &c->wio);
	close(c->fd);
	LIST_REMOVE(c, link);
	a->n_clients--;
	free(c->out);
	free(c);
}

/* Queues one reply line; the write watcher drains it. */
static int client_queue(struct admin_client *c, json_t *reply)
{
	char *s = json_dumps(reply, JSON_COMPACT);
	size_t n, need;
	char *grown;

	if (s == NULL)
		return -ENOMEM;
	n = strlen(s);
	need = c->out_len + n + 1;
	if (need > ADMIN_OUT_MAX) {
		free(s);
		return -ENOBUFS;
	}
	grown = realloc(c->out, need);
	if (grown == NULL) {
		free(s);
		return -ENOMEM;
	}
	c->out = grown;
	memcpy(c->out + c->out_len, s, n);
	c->out[c->out_len + n] = '\n';
	c->out_len = need;
	free(s);
	/* One request at a time: reading resumes when the reply has left. */
	ev_io_stop(c->a->m->loop, &c->rio);
	ev_io_start(c->a->m->loop, &c->wio);
	return 0;
}

static void client_error(struct admin_client *c, const char *msg, bool close_after)
{
	json_t *r = json_pack("{s:b, s:s}", "ok", 0, "error", msg);

	if (r == NULL || client_queue(c, r) < 0)
		c->closing = true;
	json_decref(r);
	if (close_after)
		c->closing = true;
}

static void handle_line(struct admin_client *c, const char *line, size_t len)
{
	json_t *reply;

	if (len == 0)
		return;
	reply = admin_dispatch(c->a->m, &c->peer, line, len);
	if (reply == NULL) {
		client_error(c, "out of memory", true);
		return;
	}
	if (client_queue(c, reply) == -ENOBUFS)
		client_error(c, "reply too large: narrow the request with filters or limit", false);
	json_decref(reply);
}

/* Takes the first complete line out of the input buffer; false when none is complete. */
static bool take_line(struct admin_client *c)
{
	char *nl = memchr(c->in, '\n', c->in_len);
	size_t used;

	if (nl == NULL)
		return false;
	used = (size_t)(nl - c->in) + 1;
	if (c->discarding) {
		c->discarding = false;
	} else {
		size_t len = used - 1;

		if (len > 0 && c->in[len - 1] == '\r')
			len--;
		handle_line(c, c->in, len);
	}
	memmove(c->in, c->in + used, c->in_len - used);
	c->in_len -= used;
	return true;
}

/* Serves buffered lines until one produces a reply (requests are answered one at a time:
 * the rest wait until that reply has been written). */
static void process_lines(struct admin_client *c)
{
	for (int i = 0; i < 64 && !ev_is_active(&c->wio) && !c->closing; i++)
		if (!take_line(c))
			break;
}

/* No newline in a full buffer: the line is too long. Answer once and skip to its end. */
static void check_overflow(struct admin_client *c)
{
	if (c->in_len < sizeof(c->in) || memchr(c->in, '\n', c->in_len) != NULL)
		return;
	c->in_len = 0;
	if (!c->discarding)
		client_error(c, "request line too long", false);
	c->discarding = true;
}

static void read_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct admin_client *c = io->data;
	ssize_t n;

	(void)loop;
	(void)revents;
	n = read(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n == 0 && c->in_len > 0 && !c->discarding && !c->closing) {
		/* The last request without its newline, then the end (`printf ... | socat`):
		 * answered, then closed once the answer has left. */
		handle_line(c, c->in, c->in_len);
		c->in_len = 0;
		c->closing = true;
		if (ev_is_active(&c->wio))
			return;
	}
	if (n <= 0) {
		client_free(c);
		return;
	}
	c->active = mono_ms();
	c->in_len += (size_t)n;
	process_lines(c);
	check_overflow(c);
}

static void write_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct admin_client *c = io->data;
	ssize_t n;

	(void)revents;
	n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n < 0) {
		client_free(c);
		return;
	}
	c->active = mono_ms();
	c->out_off += (size_t)n;
	if (c->out_off < c->out_len)
		return;
	c->out_off = c->out_len = 0;
	ev_io_stop(loop, &c->wio);
	if (c->closing) {
		client_free(c);
		return;
	}
	ev_io_start(loop, &c->rio);
	/* Pipelined requests already buffered are served now. */
	process_lines(c);
	check_overflow(c);
}

/* The peer's credentials as of connect(); unknown ones are nobody's (never privileged). */
static void peer_read(int fd, struct admin_peer *peer)
{
	struct ucred uc;
	socklen_t len = sizeof(uc);

	peer->pid = 0;
	peer->uid = (uid_t)-1;
	peer->gid = (gid_t)-1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0 || len != sizeof(uc)) {
		log_warn("admin", "SO_PEERCRED: %s (the client counts as unprivileged)",
			 strerror(errno));
		return;
	}
	peer->pid = uc.pid;
	peer->uid = uc.uid;
	peer->gid = uc.gid;
}

/* Idle: nothing in progress for it (no request partly read or being skipped, no reply
 * queued, no bytes waiting in the socket that this loop iteration has not read yet). A
 * client between requests is idle; one that is sending, or being answered, or not yet
 * reading a large reply, is not. */
static bool client_idle(const struct admin_client *c)
{
	char b;

	if (c->in_len != 0 || c->discarding || c->closing || ev_is_active(&c->wio))
		return false;
	return recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
}

/* A full table makes room by closing the client idle longest, if it has been idle at least
 * ADMIN_IDLE_EVICT_S, else the one stalled longest in a request or a reply, if it has made
 * no progress for ADMIN_STALL_EVICT_S: connections that a monitoring script leaked or holds
 * open, asking nothing or half a request, must not lock the operator out. At most
 * ADMIN_MAX_CLIENTS compared, only when full. Returns true when a place was freed. */
static bool evict_idle(struct admin *a, uint64_t now)
{
	struct admin_client *c, *idle = NULL, *stalled = NULL, *victim;

	LIST_FOREACH(c, &a->clients, link) {
		struct admin_client **oldest = client_idle(c) ? &idle : &stalled;

		if (*oldest == NULL || c->active < (*oldest)->active)
			*oldest = c;
	}
	if (idle != NULL && now - idle->active >= ADMIN_IDLE_EVICT_S * 1000u)
		victim = idle;
	else if (stalled != NULL && now - stalled->active >= ADMIN_STALL_EVICT_S * 1000u)
		victim = stalled;
	else
		return false;
	log_warn("admin", "%u clients (the limit): closing the one %s longest, uid=%d pid=%d, "
		 "%s %llu s, for a new one", a->n_clients, victim == idle ? "idle" : "stalled",
		 (int)victim->peer.uid, (int)victim->peer.pid,
		 victim == idle ? "idle" : "no progress in a request or reply for",
		 (unsigned long long)((now - victim->active) / 1000u));
	client_free(victim);
	return true;
}

static void accept_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct admin *a = io->data;
	struct admin_client *c;
	int fd;

	(void)revents;
	fd = accept4(a->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return;
	if (a->n_clients >= ADMIN_MAX_CLIENTS && !evict_idle(a, mono_ms())) {
		static const char busy[] = "{\"ok\":false,\"error\":\"too many admin clients\"}\n";

		if (send(fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
			log_debug("admin", "busy reply not sent");
		close(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		close(fd);
		return;
	}
	c->a = a;
	c->fd = fd;
	c->active = mono_ms();
	peer_read(fd, &c->peer);
	ev_io_init(&c->rio, read_cb, fd, EV_READ);
	ev_io_init(&c->wio, write_cb, fd, EV_WRITE);
	c->rio.data = c->wio.data = c;
	ev_io_start(loop, &c->rio);
	LIST_INSERT_HEAD(&a->clients, c, link);
	a->n_clients++;
}

/* A socket file left by a crashed daemon is removed; a live one (connect succeeds) is not. */
static int remove_stale(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, rc;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memcpy(sun.sun_path, path, strlen(path) + 1);
	rc = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
	close(fd);
	if (rc == 0)
		return -EADDRINUSE;
	return unlink(path) < 0 ? -errno : 0;
}

static void ensure_parent(const char *path)
{
	char *copy = strdup(path);

	if (copy == NULL)
		return;
	/* One level only (e.g. /run/turngate): a deeper missing tree is a configuration
	 * mistake the bind error will report. */
	if (mkdir(dirname(copy), 0750) < 0 && errno != EEXIST)
		log_debug("admin", "mkdir for %s: %s", path, strerror(errno));
	free(copy);
}

/* A live upgrade's new master: the old one's listening socket, served once it serves
 * (admin_resume), so that nobody talks to a master that may still fail. */
static int adopt(struct master *m, const char *path, int fd, struct admin **out)
{
	struct admin *a = calloc(1, sizeof(*a));

	if (a == NULL || (a->path = strdup(path)) == NULL) {
		free(a);
		close(fd);
		return -ENOMEM;
	}
	a->m = m;
	a->fd = fd;
	a->paused = true;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	ev_io_init(&a->io, accept_cb, a->fd, EV_READ);
	a->io.data = a;
	*out = a;
	return 0;
}

void admin_resume(struct admin *a)
{
	if (a == NULL || !a->paused)
		return;
	a->paused = false;
	ev_io_start(a->m->loop, &a->io);
}

void admin_hold(struct admin *a, bool hold)
{
	if (a == NULL || a->paused)
		return;
	if (hold)
		ev_io_stop(a->m->loop, &a->io);
	else
		ev_io_start(a->m->loop, &a->io);
}

int admin_fd(const struct admin *a)
{
	return a != NULL ? a->fd : -1;
}

int admin_open(struct master *m, const char *path, unsigned mode, struct admin **out)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct admin *a;
	mode_t old;
	int rc;

	*out = NULL;
	if (path == NULL || path[0] == '\0' || strlen(path) >= sizeof(sun.sun_path))
		return -ENAMETOOLONG;
	memcpy(sun.sun_path, path, strlen(path) + 1);
	rc = upgrade_take_socket(m, SOCK_STREAM, (struct sockaddr *)&sun);
	if (rc >= 0)
		return adopt(m, path, rc, out);
	ensure_parent(path);
	rc = remove_stale(path);
	if (rc < 0)
		return rc;
	a = calloc(1, sizeof(*a));
	if (a == NULL)
		return -ENOMEM;
	a->m = m;
	a->path = strdup(path);
	a->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (a->path == NULL || a->fd < 0) {
		rc = a->path == NULL ? -ENOMEM : -errno;
		goto fail;
	}
	/* The socket is created with the final mode: no window in which others may connect. */
	old = umask((mode_t)(~mode & 0777));
	rc = bind(a->fd, (struct sockaddr *)&sun, sizeof(sun));
	umask(old);
	if (rc < 0 || chmod(path, (mode_t)mode) < 0 || listen(a->fd, ADMIN_BACKLOG) < 0) {
		rc = -errno;
		goto fail;
	}
	ev_io_init(&a->io, accept_cb, a->fd, EV_READ);
	a->io.data = a;
	ev_io_start(m->loop, &a->io);
	*out = a;
	return 0;
fail:
	if (a->fd >= 0)
		close(a->fd);
	free(a->path);
	free(a);
	return rc;
}

void admin_close(struct admin *a)
{
	if (a == NULL)
		return;
	while (!LIST_EMPTY(&a->clients))
		client_free(LIST_FIRST(&a->clients));
	ev_io_stop(a->m->loop, &a->io);
	/* After a live upgrade the socket (and its path) is the new master's; a new master
	 * that never served leaves it to the old one. */
	if (!a->m->handed_over && !a->paused)
		unlink(a->path);
	close(a->fd);
	free(a->path);
	free(a);
}
