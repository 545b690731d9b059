/* TURN client lifecycle: create (socket, connect, TLS/DTLS handshake), destroy, accessors. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/turn_client_int.h"

static socklen_t sa_len(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return sizeof(struct sockaddr_in);
	if (sa->sa_family == AF_INET6)
		return sizeof(struct sockaddr_in6);
	return 0;
}

/* Non-blocking connect bounded by timeout_ms (for TCP; instant for UDP). */
static int connect_bounded(int fd, const struct sockaddr *sa, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	int rc;
	int err = 0;
	socklen_t el = sizeof(err);

	if (connect(fd, sa, sa_len(sa)) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return -errno;
	rc = poll(&p, 1, timeout_ms);
	if (rc == 0)
		return -ETIMEDOUT;
	if (rc < 0)
		return -errno;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
		return -errno;
	return err ? -err : 0;
}

static int open_socket(struct turn_client *c, const struct turn_client_opts *o)
{
	int type = tc_is_stream(c) ? SOCK_STREAM : SOCK_DGRAM;
	int64_t deadline = tc_now_ms() + c->timeout_ms;
	int rc;

	c->fd = socket(o->server->sa_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	if (type == SOCK_STREAM) {
		int one = 1;

		/* Small request/answer messages: no Nagle wait for the server's delayed ACK. */
		(void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	if (o->local != NULL) {
		if (o->local->sa_family != o->server->sa_family)
			return -EAFNOSUPPORT;
		if (bind(c->fd, o->local, sa_len(o->local)) != 0)
			return -errno;
	}
	rc = connect_bounded(c->fd, o->server, c->timeout_ms);
	if (rc != 0 || (c->transport != TURN_CLIENT_TLS && c->transport != TURN_CLIENT_DTLS))
		return rc;
	/* One budget for connect and handshake together. */
	return tc_tls_start(c, o, deadline);
}

static char *dup_opt(const char *s, int *rc)
{
	char *d;

	if (s == NULL)
		return NULL;
	d = strdup(s);
	if (d == NULL)
		*rc = -ENOMEM;
	return d;
}

int turn_client_create(const struct turn_client_opts *o, struct turn_client **out)
{
	struct turn_client *c;
	int rc = 0;

	if (o == NULL || out == NULL || o->server == NULL || sa_len(o->server) == 0 ||
	    (o->transport != TURN_CLIENT_UDP && o->transport != TURN_CLIENT_TCP &&
	     o->transport != TURN_CLIENT_TLS && o->transport != TURN_CLIENT_DTLS))
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	c->magic = TC_MAGIC;
	c->fd = -1;
	c->transport = o->transport;
	memcpy(&c->server, o->server, sa_len(o->server));
	c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 5000;
	c->rto_ms = o->rto_ms > 0 ? o->rto_ms : 200;
	c->max_retrans = o->max_retrans > 0 ? (o->max_retrans > 10 ? 10 : o->max_retrans) : 6;
	c->fingerprint = o->fingerprint;
	c->username = dup_opt(o->username, &rc);
	c->password = dup_opt(o->password, &rc);
	c->software = dup_opt(o->software, &rc);
	c->rx = malloc(TC_RX_CAP);
	c->tx = malloc(TC_RX_CAP);
	if (c->rx == NULL || c->tx == NULL)
		rc = -ENOMEM;
	if (rc == 0)
		rc = open_socket(c, o);
	if (rc != 0)
		goto fail;
	*out = c;
	return 0;
fail:
	turn_client_destroy(c);
	return rc;
}

void turn_client_destroy(struct turn_client *c)
{
	struct tc_pkt p;

	if (c == NULL)
		return;
	tc_tls_close(c);
	if (c->fd >= 0)
		close(c->fd);
	while (tc_queue_pop(c, &p))
		free(p.data);
	if (c->password) {
		explicit_bzero(c->password, strlen(c->password));
		free(c->password);
	}
	free(c->username);
	free(c->software);
	free(c->rx);
	free(c->tx);
	explicit_bzero(c->key, sizeof(c->key));
	c->magic = 0;
	free(c);
}

int turn_client_local_addr(const struct turn_client *c, struct sockaddr_storage *out)
{
	socklen_t len = sizeof(*out);

	if (c == NULL || out == NULL)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	return getsockname(c->fd, (struct sockaddr *)out, &len) == 0 ? 0 : -errno;
}

int turn_client_last_error(const struct turn_client *c, const char **reason)
{
	if (c == NULL)
		return 0;
	if (reason)
		*reason = c->last_reason;
	return c->last_error;
}
