/* Worker: TURN-DTLS calls through a live upgrade: the forwarding channel between the new
 * workers and an old worker lingering with DTLS associations (contract in dtlslinger.h).
 *
 * Why a channel of its own and not the hand-over socketpairs (handover.c): those are made
 * by one master before its first fork and reach only its own slots; a lingering worker is
 * of an earlier generation (possibly several upgrades back) and its successors are no
 * kin of it. A socket at a path beside the status file is what both can find: the
 * lingering worker binds it before it tells its master that it lingers, so it exists
 * before any new worker reads a listener. SOCK_SEQPACKET, not SOCK_DGRAM: a connected
 * stream of messages keeps one forwarder's order, and its queue is bounded by the socket
 * buffers, not by net.unix.max_dgram_qlen (10 by default), which an unconnected datagram
 * socket would hit at the first stall of the lingering worker. */
#include "config.h"

#include "worker/dtlslinger.h"
#include "worker/transport.h"
#include "worker/wk.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"

#define WK_DL_ROUNDS 64		/* messages read from one forwarder per wakeup */
#define WK_DL_BUCKETS 1024

/* The header of one forwarded datagram; the datagram follows. */
struct wk_dl_hdr {
	uint32_t magic;
	uint32_t lslot;			/* the TURN-DTLS listener's slot */
	struct shm_addr from;		/* the client */
};

/* One forwarder's connection, on the lingering side. */
struct wk_dl_conn {
	ev_io io;
	struct worker *w;
};

/* A lingering worker this one forwards to. */
struct wk_dl_peer {
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int fd;				/* connected, -1 until the first datagram */
	bool gone;			/* it refused or closed: its clients are no more */
};

struct wk_dl_route {
	struct wk_dl_route *next;
	uint32_t lslot;
	struct shm_addr addr;
	uint16_t peer;			/* index in peers */
};

struct wk_dl {
	/* lingering side */
	int lfd;
	ev_io lio;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct wk_dl_conn *conns[WK_DL_MAX_CONNS];
	/* forwarding side */
	bool loaded;
	struct wk_dl_peer peers[WK_DL_MAX_PEERS];
	unsigned n_peers, n_routes;
	struct wk_dl_route *routes[WK_DL_BUCKETS];
};

static struct wk_dl *wk_dl_get(struct worker *w)
{
	if (w->dl == NULL) {
		w->dl = calloc(1, sizeof(*w->dl));
		if (w->dl != NULL)
			w->dl->lfd = -1;
	}
	return w->dl;
}

static uint32_t wk_dl_hash(uint32_t lslot, const struct shm_addr *a)
{
	uint64_t h = 1469598103934665603ull ^ lslot;

	for (size_t i = 0; i < sizeof(a->addr); i++)
		h = (h ^ a->addr[i]) * 1099511628211ull;
	h = (h ^ a->port) * 1099511628211ull;
	return (uint32_t)(h ^ (h >> 32)) & (WK_DL_BUCKETS - 1);
}

/* ---- the lingering worker ---- */

static void wk_dl_conn_close(struct worker *w, unsigned i)
{
	struct wk_dl_conn *c = w->dl->conns[i];

	ev_io_stop(w->loop, &c->io);
	close(c->io.fd);
	free(c);
	w->dl->conns[i] = NULL;
}

/* One message of n bytes at buf: checked, then fed to its association. */
static void wk_dl_msg(struct worker *w, const uint8_t *buf, size_t n)
{
	struct sockaddr_storage from;
	struct wk_dl_hdr h;

	if (n < sizeof(h) || n - sizeof(h) > WK_DGRAM_MAX - 4) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_MALFORMED, 1);
		return;
	}
	memcpy(&h, buf, sizeof(h));
	if (h.magic != WK_DL_MAGIC || wk_shm_to_addr(&h.from, &from) == 0) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_MALFORMED, 1);
		return;
	}
	for (size_t i = 0; i < w->n_ls; i++) {
		struct wk_listener *l = w->ls[i];

		if (l->slot == h.lslot && l->proto == WORKER_PROTO_UDP && l->fd >= 0) {
			wk_dtls_forwarded(w, l, (struct sockaddr *)&from, buf + sizeof(h),
					  n - sizeof(h));
			return;
		}
	}
	shm_ctr_add(w->ctr, SHM_CTR_ERR_MALFORMED, 1);
}

static void wk_dl_conn_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_dl_conn *c = io->data;
	struct worker *w = wk_checked(c->w);
	uint8_t *buf = w->rx[0];

	(void)loop;
	(void)revents;
	for (int i = 0; i < WK_DL_ROUNDS; i++) {
		struct iovec iov = { .iov_base = buf, .iov_len = sizeof(w->rx[0]) };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n = recvmsg(io->fd, &msg, MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		if (n <= 0) {
			/* the forwarder is gone (an empty message ends it too: none sends one) */
			for (unsigned j = 0; j < WK_DL_MAX_CONNS; j++)
				if (w->dl->conns[j] == c) {
					wk_dl_conn_close(w, j);
					break;
				}
			return;
		}
		if (msg.msg_flags & MSG_TRUNC)
			shm_ctr_add(w->ctr, SHM_CTR_ERR_MALFORMED, 1);
		else
			wk_dl_msg(w, buf, (size_t)n);
	}
}

static void wk_dl_accept_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct worker *w = wk_checked(io->data);

	(void)revents;
	for (;;) {
		int fd = accept4(io->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		unsigned i;

		if (fd < 0)
			return;
		for (i = 0; i < WK_DL_MAX_CONNS && w->dl->conns[i] != NULL; i++)
			;
		if (i == WK_DL_MAX_CONNS || (w->dl->conns[i] = calloc(1, sizeof(**w->dl->conns))) ==
						    NULL) {
			log_warn("worker", "slot %u (lingering): too many DTLS forwarders",
				 w->slot);
			close(fd);
			continue;
		}
		w->dl->conns[i]->w = w;
		ev_io_init(&w->dl->conns[i]->io, wk_dl_conn_cb, fd, EV_READ);
		w->dl->conns[i]->io.data = w->dl->conns[i];
		ev_io_start(loop, &w->dl->conns[i]->io);
	}
}

int wk_dl_listen(struct worker *w)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct wk_dl *dl = wk_dl_get(w);
	mode_t um;
	int fd, rc;

	if (dl == NULL)
		return -ENOMEM;
	if (w->linger_path[0] == '\0')
		return -ENOENT;
	if (snprintf(dl->path, sizeof(dl->path), "%s.sock", w->linger_path) >=
	    (int)sizeof(dl->path)) {
		dl->path[0] = '\0';
		return -ENAMETOOLONG;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memcpy(sun.sun_path, dl->path, sizeof(dl->path));
	(void)unlink(dl->path);
	um = umask(077);	/* only this user (the workers of every generation) connects */
	rc = bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 || listen(fd, 64) < 0 ? -errno : 0;
	umask(um);
	if (rc < 0) {
		close(fd);
		(void)unlink(dl->path);
		dl->path[0] = '\0';
		return rc;
	}
	dl->lfd = fd;
	ev_io_init(&dl->lio, wk_dl_accept_cb, fd, EV_READ);
	dl->lio.data = w;
	ev_io_start(w->loop, &dl->lio);
	return 0;
}

bool wk_dl_ready(const struct worker *w)
{
	return w->dl != NULL && w->dl->lfd >= 0;
}

void wk_dl_write_routes(struct worker *w, FILE *f, bool (*keeps)(const struct wk_tconn *))
{
	for (size_t i = 0; i < w->n_ls; i++)
		for (const struct wk_tconn *c = w->ls[i]->conns; c; c = c->next) {
			char text[INET6_ADDRSTRLEN];
			struct shm_addr a;

			if (!c->dgram || !keeps(c))
				continue;
			wk_addr_to_shm((const struct sockaddr *)&c->peer, &a);
			if (inet_ntop(a.family, a.addr, text, sizeof(text)) != NULL)
				fprintf(f, "dtls %u %s %u\n", c->l->slot, text, a.port);
		}
}

void wk_dl_stop(struct worker *w)
{
	struct wk_dl *dl = w->dl;

	if (dl == NULL || dl->lfd < 0)
		return;
	for (unsigned i = 0; i < WK_DL_MAX_CONNS; i++)
		if (dl->conns[i] != NULL)
			wk_dl_conn_close(w, i);
	ev_io_stop(w->loop, &dl->lio);
	close(dl->lfd);
	dl->lfd = -1;
	(void)unlink(dl->path);
}

/* ---- every worker: the routes ---- */

static void wk_dl_route_add(struct wk_dl *dl, uint32_t lslot, const struct shm_addr *a,
			    unsigned peer)
{
	struct wk_dl_route *r;
	uint32_t b = wk_dl_hash(lslot, a);

	if (dl->n_routes >= WK_DL_MAX_ROUTES || (r = calloc(1, sizeof(*r))) == NULL)
		return;
	r->lslot = lslot;
	r->addr = *a;
	r->peer = (uint16_t)peer;
	r->next = dl->routes[b];
	dl->routes[b] = r;
	dl->n_routes++;
}

/* One status file (its pid from the name): its "dtls" lines, when the worker still runs
 * and listens. */
static void wk_dl_load_file(struct wk_dl *dl, const char *path)
{
	char line[256];
	unsigned peer = dl->n_peers, n = 0;
	struct wk_dl_peer *p = &dl->peers[peer];
	FILE *f;

	if (peer >= WK_DL_MAX_PEERS ||
	    snprintf(p->path, sizeof(p->path), "%s.sock", path) >= (int)sizeof(p->path))
		return;
	f = fopen(path, "re");
	if (f == NULL)
		return;
	if (fgets(line, sizeof(line), f) == NULL || strncmp(line, "turngate-linger 1 ", 18) != 0 ||
	    strstr(line, " done=0") == NULL) {
		fclose(f);
		return;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		char text[INET6_ADDRSTRLEN + 1];
		struct shm_addr a = { 0 };
		unsigned lslot, port;

		if (sscanf(line, "dtls %u %46s %u", &lslot, text, &port) != 3 || port > 65535)
			continue;
		a.family = strchr(text, ':') != NULL ? AF_INET6 : AF_INET;
		if (inet_pton(a.family, text, a.addr) != 1)
			continue;
		a.port = (uint16_t)port;
		wk_dl_route_add(dl, lslot, &a, peer);
		n++;
	}
	fclose(f);
	if (n > 0) {
		p->fd = -1;
		dl->n_peers++;
	}
}

void wk_dl_load(struct worker *w)
{
	char dir[PATH_MAX], path[PATH_MAX * 2];
	const char *state = w->h->state_path, *slash;
	struct wk_dl *dl;
	struct dirent *de;
	size_t plen;
	DIR *d;

	if (w->lingering || state == NULL || (slash = strrchr(state, '/')) == NULL ||
	    (dl = wk_dl_get(w)) == NULL || dl->loaded)
		return;
	dl->loaded = true;
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - state), state);
	plen = strlen(slash + 1);
	d = opendir(dir[0] != '\0' ? dir : "/");
	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		const char *tail = de->d_name + plen;

		/* NAME.state.linger.PID, not its .tmp or .sock */
		if (strncmp(de->d_name, slash + 1, plen) != 0 ||
		    strncmp(tail, ".linger.", 8) != 0 || tail[8] == '\0' ||
		    strspn(tail + 8, "0123456789") != strlen(tail + 8))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		wk_dl_load_file(dl, path);
	}
	closedir(d);
	if (dl->n_routes > 0)
		log_info("worker", "slot %u forwards %u DTLS clients to %u lingering workers",
			 w->slot, dl->n_routes, dl->n_peers);
}

/* Peer i's connection: 0 (p set), -EAGAIN (its backlog is full: try again with the next
 * datagram) or -ENOTCONN (it is gone). */
static int wk_dl_peer_conn(struct wk_dl *dl, unsigned i, struct wk_dl_peer **out)
{
	struct wk_dl_peer *p = &dl->peers[i];
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int rc;

	if (p->gone)
		return -ENOTCONN;
	if (p->fd < 0) {
		p->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (p->fd < 0)
			return -EAGAIN;
		memcpy(sun.sun_path, p->path, sizeof(p->path));
		if (connect(p->fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
			rc = errno == EAGAIN ? -EAGAIN : -ENOTCONN;
			close(p->fd);
			p->fd = -1;
			p->gone = rc == -ENOTCONN;
			return rc;
		}
	}
	*out = p;
	return 0;
}

bool wk_dl_forward(struct worker *w, const struct wk_listener *l, const struct sockaddr *from,
		   const uint8_t *buf, size_t len)
{
	struct wk_dl *dl = w->dl;
	struct wk_dl_hdr h = { .magic = WK_DL_MAGIC, .lslot = l->slot };
	struct iovec iov[2] = { { .iov_base = &h, .iov_len = sizeof(h) },
				{ .iov_base = (void *)buf, .iov_len = len } };
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	struct wk_dl_route *r;
	struct wk_dl_peer *p = NULL;
	int rc = 0;

	if (dl == NULL || dl->n_routes == 0)
		return false;
	wk_addr_to_shm(from, &h.from);
	for (r = dl->routes[wk_dl_hash(l->slot, &h.from)]; r; r = r->next)
		if (r->lslot == l->slot && memcmp(&r->addr, &h.from, sizeof(h.from)) == 0)
			break;
	if (r == NULL || wk_dtls_is_hello(buf, len) ||
	    (rc = wk_dl_peer_conn(dl, r->peer, &p)) == -ENOTCONN)
		return false;
	if (rc < 0 || sendmsg(p->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		if (rc < 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
			/* a full channel loses the datagram, as a full UDP socket would */
			shm_ctr_add(w->ctr, SHM_CTR_ERR_SEND, 1);
			return true;
		}
		/* It exited: its clients' datagrams are anyone's now. */
		close(p->fd);
		p->fd = -1;
		p->gone = true;
		return false;
	}
	return true;
}

void wk_dl_free(struct worker *w)
{
	struct wk_dl *dl = w->dl;

	if (dl == NULL)
		return;
	wk_dl_stop(w);
	for (unsigned i = 0; i < dl->n_peers; i++)
		if (dl->peers[i].fd >= 0)
			close(dl->peers[i].fd);
	for (unsigned b = 0; b < WK_DL_BUCKETS; b++)
		while (dl->routes[b] != NULL) {
			struct wk_dl_route *r = dl->routes[b];

			dl->routes[b] = r->next;
			free(r);
		}
	free(dl);
	w->dl = NULL;
}
