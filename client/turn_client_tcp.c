/* TURN client side of TCP relaying (RFC 6062): Connect, ConnectionBind, raw data connections. */
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ssl.h>

#include "client/turn_client_int.h"

static void connect_attrs(struct stun_builder *b, void *arg)
{
	stun_build_addr(b, STUN_ATTR_XOR_PEER_ADDRESS, arg);
}

int turn_client_connect(struct turn_client *c, const struct sockaddr *peer, uint32_t *connection_id)
{
	struct turn_response rsp;
	uint32_t id = 0;
	int rc;

	if (peer == NULL)
		return -EINVAL;
	rc = tc_run(c, STUN_CONNECT, connect_attrs, (void *)peer, TURN_REQ_AUTH, &rsp);
	if (rc == 0 && stun_msg_get_connection_id(&rsp.msg, &id) != 0)
		rc = -EBADMSG;
	if (rc == 0 && connection_id != NULL)
		*connection_id = id;
	return rc;
}

static void bind_attrs(struct stun_builder *b, void *arg)
{
	stun_build_connection_id(b, *(const uint32_t *)arg);
}

/* The data connection's options: transport, address and TLS fields from o, the rest
 * from the control connection c. */
static int data_opts(const struct turn_client *c, const struct turn_client_opts *o,
		     struct turn_client_opts *out)
{
	static const struct turn_client_opts plain = { .transport = TURN_CLIENT_TCP };

	if (o == NULL)
		o = &plain;
	if (o->transport != TURN_CLIENT_TCP && o->transport != TURN_CLIENT_TLS)
		return -EINVAL;
	*out = *o;
	if (out->server == NULL)
		out->server = (const struct sockaddr *)&c->server;
	out->username = c->username;
	out->password = c->password;
	out->software = c->software;
	out->timeout_ms = c->timeout_ms;
	out->fingerprint = c->fingerprint;
	return 0;
}

/* ConnectionBind goes out authenticated at once with what the control connection learnt:
 * a server that binds nonces to the client's transport address (turngate) checks it as if
 * it came from the control connection, and a fresh challenge would be one more round. */
static void inherit_challenge(struct turn_client *d, const struct turn_client *c)
{
	d->have_challenge = c->have_challenge;
	memcpy(d->realm, c->realm, sizeof(d->realm));
	memcpy(d->nonce, c->nonce, sizeof(d->nonce));
	memcpy(d->key, c->key, sizeof(d->key));
	d->key_len = c->key_len;
	d->pw_alg = c->pw_alg;
	memcpy(d->pwalgs, c->pwalgs, sizeof(d->pwalgs));
	d->pwalgs_len = c->pwalgs_len;
}

int turn_client_connection_bind(struct turn_client *c, uint32_t connection_id,
				const struct turn_client_opts *o, struct turn_client **data)
{
	struct turn_client_opts dopts;
	struct turn_client *d = NULL;
	struct turn_response *rsp = NULL;
	int rc;

	if (c == NULL || data == NULL)
		return -EINVAL;
	assert(c->magic == TC_MAGIC);
	rc = data_opts(c, o, &dopts);
	if (rc == 0)
		rc = turn_client_create(&dopts, &d);
	if (rc != 0)
		return rc;
	inherit_challenge(d, c);
	rsp = malloc(sizeof(*rsp));
	if (rsp == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = tc_run(d, STUN_CONNECTION_BIND, bind_attrs, &connection_id, TURN_REQ_AUTH, rsp);
	/* The caller asks c for the error code: d is not theirs unless it succeeded. */
	c->last_error = d->last_error;
	memcpy(c->last_reason, d->last_reason, sizeof(c->last_reason));
	free(rsp);
	if (rc != 0)
		goto fail;
	d->raw = true;
	*data = d;
	return 0;
fail:
	turn_client_destroy(d);
	return rc;
}

int turn_client_data_send(struct turn_client *d, const void *buf, size_t len)
{
	if (d == NULL || !d->raw || (buf == NULL && len))
		return -EINVAL;
	assert(d->magic == TC_MAGIC);
	return tc_send(d, buf, len);
}

int turn_client_data_recv(struct turn_client *d, void *buf, size_t cap, size_t *len, int timeout_ms)
{
	int64_t deadline = tc_now_ms() + timeout_ms;

	if (d == NULL || !d->raw || buf == NULL || len == NULL || cap == 0)
		return -EINVAL;
	assert(d->magic == TC_MAGIC);
	/* First what arrived behind the ConnectionBind response. */
	if (d->rx_len > d->rx_used) {
		size_t k = d->rx_len - d->rx_used < cap ? d->rx_len - d->rx_used : cap;

		memcpy(buf, d->rx + d->rx_used, k);
		d->rx_used += k;
		*len = k;
		return 0;
	}
	if (d->ssl != NULL) {
		int rc = tc_tls_read(d, buf, cap, deadline, len);

		/* The end of the session (SSL_OP_IGNORE_UNEXPECTED_EOF: a bare FIN too) is
		 * the end of the stream, as a FIN is over TCP. */
		if (rc == -ECONNRESET && (SSL_get_shutdown(d->ssl) & SSL_RECEIVED_SHUTDOWN)) {
			*len = 0;
			return 0;
		}
		return rc;
	}
	/* Bounded by the deadline (tc_wait_fd). */
	for (;;) {
		int rc = tc_wait_fd(d->fd, POLLIN, deadline);
		ssize_t n;

		if (rc != 0)
			return rc;
		n = recv(d->fd, buf, cap, MSG_DONTWAIT);
		if (n >= 0) {
			*len = (size_t)n;
			return 0;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
	}
}
