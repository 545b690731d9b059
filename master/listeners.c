/* Master: opens and keeps the per-slot SO_REUSEPORT listening sockets of each listener. */
#include "config.h"

#include "master/master.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"

#define LISTEN_BACKLOG 511
/* How long a start waits for another turngated's sockets to go (20 x 100 ms). */
#define LISTEN_DYING_TRIES 20
#define LISTEN_DYING_STEP_US 100000

/* The address to bind: bind_address when set, else the relay address; wildcard_ok tells
 * the caller it may retry on the wildcard of the same family when that is not local. */
static int bind_addr_of(const struct conf_listener *l, struct sockaddr_storage *ss, socklen_t *sl)
{
	memset(ss, 0, sizeof(*ss));
	if (l->bind_address != NULL) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		if (inet_pton(AF_INET, l->bind_address, &s4->sin_addr) == 1) {
			s4->sin_family = AF_INET;
		} else if (inet_pton(AF_INET6, l->bind_address, &s6->sin6_addr) == 1) {
			s6->sin6_family = AF_INET6;
		} else {
			return -EINVAL;
		}
	} else {
		memcpy(ss, &l->relay_addr, sizeof(*ss));
		if (ss->ss_family != AF_INET && ss->ss_family != AF_INET6)
			ss->ss_family = AF_INET; /* unset relay address: IPv4 wildcard */
	}
	if (ss->ss_family == AF_INET) {
		((struct sockaddr_in *)ss)->sin_port = htons(l->port);
		*sl = sizeof(struct sockaddr_in);
	} else {
		((struct sockaddr_in6 *)ss)->sin6_port = htons(l->port);
		*sl = sizeof(struct sockaddr_in6);
	}
	return 0;
}

static void make_wildcard(struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_addr.s_addr = htonl(INADDR_ANY);
	else
		((struct sockaddr_in6 *)ss)->sin6_addr = in6addr_any;
}

static int open_one(int type, const struct sockaddr_storage *ss, socklen_t sl)
{
	int one = 1, fd, rc;

	fd = socket(ss->ss_family, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* SO_REUSEADDR only for TCP (a restart binds past TIME_WAIT): on UDP it would let
	 * two sockets bind one port without SO_REUSEPORT, each taking part of the traffic. */
	if ((type == SOCK_STREAM &&
	     setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
		goto fail;
	if (ss->ss_family == AF_INET6 &&
	    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0)
		goto fail;
	if (bind(fd, (const struct sockaddr *)ss, sl) < 0)
		goto fail;
	if (type == SOCK_STREAM && listen(fd, LISTEN_BACKLOG) < 0)
		goto fail;
	return fd;
fail:
	rc = -errno;
	close(fd);
	return rc;
}

static void addr_text(const struct sockaddr_storage *ss, char *buf, size_t size)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	unsigned port;

	if (ss->ss_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, ip, sizeof(ip));
		port = ntohs(((const struct sockaddr_in *)ss)->sin_port);
		snprintf(buf, size, "%s:%u", ip, port);
	} else {
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, ip, sizeof(ip));
		port = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
		snprintf(buf, size, "[%s]:%u", ip, port);
	}
}

/* Port 0 asks the kernel for one: every later slot must bind the same port to share the
 * reuseport group, so the first socket's port is copied into the address. */
static void pin_port(int fd, struct sockaddr_storage *ss)
{
	struct sockaddr_storage got;
	socklen_t gl = sizeof(got);

	if (getsockname(fd, (struct sockaddr *)&got, &gl) < 0)
		return;
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = ((struct sockaddr_in *)&got)->sin_port;
	else
		((struct sockaddr_in6 *)ss)->sin6_port = ((struct sockaddr_in6 *)&got)->sin6_port;
}

/* Logs the process other than own[] that holds ss for type, if socket diagnostics find
 * one; returns whether it did. */
static bool log_holder(const char *name, enum conf_proto proto, int type,
		       const struct sockaddr_storage *ss, const unsigned long *own, size_t n_own)
{
	struct port_holder h;
	char text[INET6_ADDRSTRLEN + 16], who[256];
	int rc = ports_foreign_holder(type, ss, own, n_own, &h);

	if (rc < 0)
		log_warn("master",
			 "listener %s: socket diagnostics unavailable (%s): cannot tell "
			 "whether another process shares the port",
			 name, strerror(-rc));
	if (rc != 1)
		return false;
	addr_text(ss, text, sizeof(text));
	ports_holder_text(&h, who, sizeof(who));
	log_error("master",
		  "listener %s: %s %s is already held by %s: turngated does not share a "
		  "port with another server (stop it, or give this listener another port)",
		  name, conf_proto_name(proto), text, who);
	return true;
}

static size_t inodes_of(const struct mlistener *l, unsigned long *out, size_t at, size_t cap)
{
	for (unsigned i = 0; l->fds != NULL && i < l->n_fds && at < cap; i++)
		if (l->fds[i] >= 0)
			out[at++] = ports_inode(l->fds[i]);
	return at;
}

/* The first socket on l's address and port that is none of m's, pend's or l's own: 1 and
 * *h, *ss filled; 0; -errno (no socket diagnostics, no memory). */
static int find_holder(const struct master *m, const struct mlistener *pend, size_t n_pend,
		       const struct mlistener *l, struct port_holder *h, struct sockaddr_storage *ss,
		       int *type)
{
	socklen_t sl = sizeof(*ss), tl = sizeof(int);
	size_t cap = l->n_fds, n = 0;
	unsigned long *own;
	int rc;

	if (l->fds == NULL || l->n_fds == 0 ||
	    getsockname(l->fds[0], (struct sockaddr *)ss, &sl) < 0 ||
	    getsockopt(l->fds[0], SOL_SOCKET, SO_TYPE, type, &tl) < 0)
		return 0;
	for (size_t i = 0; i < m->n_listeners; i++)
		cap += m->listeners[i].n_fds;
	for (size_t i = 0; i < n_pend; i++)
		cap += pend[i].n_fds;
	own = malloc(sizeof(*own) * cap);
	if (own == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < m->n_listeners; i++)
		n = inodes_of(&m->listeners[i], own, n, cap);
	for (size_t i = 0; i < n_pend; i++)
		n = inodes_of(&pend[i], own, n, cap);
	n = inodes_of(l, own, n, cap);
	rc = ports_foreign_holder(*type, ss, own, n, h);
	free(own);
	return rc;
}

int listener_check_owned(const struct master *m, const struct mlistener *pend, size_t n_pend,
			 const struct mlistener *l)
{
	struct sockaddr_storage ss;
	struct port_holder h;
	char text[INET6_ADDRSTRLEN + 16], who[256];
	int type = 0, rc = find_holder(m, pend, n_pend, l, &h, &ss, &type);

	/* At start, the workers of a master killed without a state file to wait on (its lock)
	 * may still be exiting (PR_SET_PDEATHSIG): give them a bounded moment. So may a
	 * socket that no process shows any more: a killed predecessor's, whose files are
	 * still being released when its state file's lock already came free (a worker with
	 * 10,000 relay sockets: test_scale.py refused 1 start in 8 after kill -9 of all). A
	 * live second instance only delays this start's refusal. */
	for (unsigned i = 0; rc == 1 && m->workers == NULL && i < LISTEN_DYING_TRIES &&
			     (strcmp(h.comm, "turngated") == 0 || h.pid <= 0);
	     i++) {
		usleep(LISTEN_DYING_STEP_US);
		rc = find_holder(m, pend, n_pend, l, &h, &ss, &type);
	}
	if (rc == -ENOMEM)
		return rc;
	if (rc < 0)
		log_warn("master",
			 "listener %s: socket diagnostics unavailable (%s): cannot tell "
			 "whether another process shares the port",
			 l->name, strerror(-rc));
	if (rc != 1)
		return 0;
	addr_text(&ss, text, sizeof(text));
	ports_holder_text(&h, who, sizeof(who));
	log_error("master",
		  "listener %s: %s %s is already held by %s: turngated does not share a "
		  "port with another server (stop it, or give this listener another port)",
		  l->name, conf_proto_name(l->proto), text, who);
	return -EADDRINUSE;
}

bool listener_foreign_holder(const struct master *m, const struct mlistener *l, char *buf,
			     size_t cap)
{
	struct sockaddr_storage ss;
	struct port_holder h;
	int type = 0;

	if (find_holder(m, NULL, 0, l, &h, &ss, &type) != 1)
		return false;
	ports_holder_text(&h, buf, cap);
	return true;
}

int listener_bind_addr(const struct conf_listener *l, struct sockaddr_storage *ss)
{
	socklen_t sl;

	return bind_addr_of(l, ss, &sl);
}

/* The name and n_slots empty fd entries of *out (zeroed first). */
static int out_init(const struct conf_listener *l, unsigned n_slots, struct mlistener *out)
{
	memset(out, 0, sizeof(*out));
	out->name = strdup(l->name);
	out->fds = malloc(sizeof(int) * n_slots);
	if (out->name == NULL || out->fds == NULL)
		return -ENOMEM;
	for (unsigned i = 0; i < n_slots; i++)
		out->fds[i] = -1;
	out->n_fds = n_slots;
	out->proto = l->protocol;
	return 0;
}

/* The address bound (ss), for status and logs. */
static int out_describe(const struct sockaddr_storage *ss, struct mlistener *out, const char *how)
{
	char text[INET6_ADDRSTRLEN + 16];

	addr_text(ss, text, sizeof(text));
	out->bind_text = strdup(text);
	out->port = ss->ss_family == AF_INET ? ntohs(((const struct sockaddr_in *)ss)->sin_port)
					     : ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	if (out->bind_text == NULL)
		return -ENOMEM;
	log_info("master", "listener %s: %s on %s, %u sockets%s", out->name,
		 conf_proto_name(out->proto), text, out->n_fds, how);
	return 0;
}

/* Closes what *out holds and zeroes it. */
static void out_free(struct mlistener *out)
{
	if (out->fds != NULL) {
		for (unsigned i = 0; i < out->n_fds; i++)
			if (out->fds[i] >= 0)
				close(out->fds[i]);
	}
	free(out->fds);
	free(out->name);
	free(out->bind_text);
	memset(out, 0, sizeof(*out));
}

int listener_open(const struct conf_listener *l, unsigned n_slots, struct mlistener *out)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	char text[INET6_ADDRSTRLEN + 16];
	int type, rc;

	memset(out, 0, sizeof(*out));
	type = l->protocol == CONF_PROTO_TURN_UDP || l->protocol == CONF_PROTO_TURN_DTLS
		       ? SOCK_DGRAM
		       : SOCK_STREAM;
	rc = bind_addr_of(l, &ss, &sl);
	if (rc < 0) {
		log_error("master", "listener %s: bad bind address", l->name);
		return rc;
	}
	rc = out_init(l, n_slots, out);
	if (rc < 0)
		goto fail;
	for (unsigned i = 0; i < n_slots; i++) {
		int fd = open_one(type, &ss, sl);

		/* The relay address need not be local (behind NAT it is the public one):
		 * without an explicit bind address, fall back to the wildcard. */
		if (fd == -EADDRNOTAVAIL && i == 0 && l->bind_address == NULL) {
			make_wildcard(&ss);
			fd = open_one(type, &ss, sl);
		}
		if (fd < 0) {
			rc = fd;
			addr_text(&ss, text, sizeof(text));
			if (rc != -EADDRINUSE || !log_holder(l->name, l->protocol, type, &ss, NULL, 0))
				log_error("master", "listener %s: cannot open %s %s: %s", l->name,
					  conf_proto_name(l->protocol), text, strerror(-rc));
			goto fail;
		}
		if (i == 0)
			pin_port(fd, &ss);
		out->fds[i] = fd;
	}
	/* TURN-UDP only: DTLS and stream clients keep no state across a restart. */
	if (l->protocol == CONF_PROTO_TURN_UDP)
		steer_attach(out->fds[0], ss.ss_family, n_slots, l->name);
	rc = out_describe(&ss, out, "");
	if (rc == 0)
		return 0;
fail:
	out_free(out);
	return rc;
}

int listener_adopt(const struct conf_listener *l, const int *fds, unsigned n, struct mlistener *out)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int rc = out_init(l, n, out);

	if (rc == 0 && getsockname(fds[0], (struct sockaddr *)&ss, &sl) < 0)
		rc = -errno;
	if (rc < 0) {
		/* the caller keeps the fds */
		free(out->fds);
		out->fds = NULL;
		out_free(out);
		return rc;
	}
	memcpy(out->fds, fds, sizeof(int) * n);
	rc = out_describe(&ss, out, " (inherited)");
	if (rc < 0) {
		memset(out->fds, 0xff, sizeof(int) * n);
		out_free(out);
	}
	return rc;
}

void listener_close(struct mlistener *l)
{
	if (l == NULL)
		return;
	out_free(l);
}

ssize_t listener_find(const struct master *m, const char *name)
{
	for (size_t i = 0; i < m->n_listeners; i++)
		if (strcmp(m->listeners[i].name, name) == 0)
			return (ssize_t)i;
	return -1;
}
