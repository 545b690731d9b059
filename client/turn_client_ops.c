/* TURN client operations: Binding, Allocate, Refresh, CreatePermission, ChannelBind, data. */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "client/turn_client_int.h"

int tc_run(struct turn_client *c, uint16_t method, turn_client_attrs_fn fn, void *arg,
	   unsigned flags, struct turn_response *rsp)
{
	int rc;

	if (c == NULL)
		return -EINVAL;
	rc = turn_client_request(c, method, fn, arg, flags, rsp);
	if (rc != 0)
		return rc;
	return rsp->error_code ? -EPROTO : 0;
}

int turn_client_binding(struct turn_client *c, struct sockaddr_storage *mapped)
{
	struct turn_response rsp;
	int rc = tc_run(c, STUN_BINDING, NULL, NULL, 0, &rsp);
	if (rc == 0 && mapped)
		rc = stun_msg_get_addr(&rsp.msg, STUN_ATTR_XOR_MAPPED_ADDRESS, mapped);
	return rc;
}

static void alloc_attrs(struct stun_builder *b, void *arg)
{
	const struct turn_alloc_opts *o = arg;

	if (!o->omit_transport)
		stun_build_requested_transport(b, o->transport ? o->transport : STUN_TRANSPORT_UDP);
	if (o->lifetime)
		stun_build_lifetime(b, o->lifetime);
	if (o->family)
		stun_build_family(b, STUN_ATTR_REQUESTED_ADDRESS_FAMILY, o->family);
	if (o->additional_family)
		stun_build_family(b, STUN_ATTR_ADDITIONAL_ADDRESS_FAMILY, o->additional_family);
	if (o->even_port)
		stun_build_even_port(b, o->even_port_reserve);
	if (o->use_token)
		stun_build_reservation_token(b, o->token);
	if (o->dont_fragment)
		stun_build_flag(b, STUN_ATTR_DONT_FRAGMENT);
}

static void alloc_result(const struct stun_msg *m, struct turn_alloc_result *res)
{
	memset(res, 0, sizeof(*res));
	(void)stun_msg_get_addr_nth(m, STUN_ATTR_XOR_RELAYED_ADDRESS, 0, &res->relayed);
	(void)stun_msg_get_addr_nth(m, STUN_ATTR_XOR_RELAYED_ADDRESS, 1, &res->relayed2);
	(void)stun_msg_get_addr(m, STUN_ATTR_XOR_MAPPED_ADDRESS, &res->mapped);
	(void)stun_msg_get_lifetime(m, &res->lifetime);
	res->has_token = stun_msg_get_reservation_token(m, &res->token) == 0;
	(void)stun_msg_get_address_error(m, &res->addr_error_family, &res->addr_error_code, NULL,
					 NULL);
}

int turn_client_allocate(struct turn_client *c, const struct turn_alloc_opts *opts,
			 struct turn_alloc_result *res)
{
	static const struct turn_alloc_opts defaults;
	struct turn_response *rsp = malloc(sizeof(*rsp));
	int rc;

	if (rsp == NULL)
		return -ENOMEM;
	rc = tc_run(c, STUN_ALLOCATE, alloc_attrs, (void *)(opts ? opts : &defaults), TURN_REQ_AUTH,
		    rsp);
	if (rc == 0 && !stun_msg_has(&rsp->msg, STUN_ATTR_XOR_RELAYED_ADDRESS))
		rc = -EBADMSG;
	if (rc == 0 && res)
		alloc_result(&rsp->msg, res);
	free(rsp);
	return rc;
}

static void refresh_attrs(struct stun_builder *b, void *arg)
{
	stun_build_lifetime(b, *(const uint32_t *)arg);
}

int turn_client_refresh(struct turn_client *c, uint32_t lifetime, uint32_t *granted)
{
	struct turn_response rsp;
	int rc = tc_run(c, STUN_REFRESH, refresh_attrs, &lifetime, TURN_REQ_AUTH, &rsp);
	if (rc == 0 && granted && stun_msg_get_lifetime(&rsp.msg, granted) != 0)
		*granted = 0;
	return rc;
}

struct peers_arg {
	const struct sockaddr_storage *peers;
	size_t n;
};

static void perm_attrs(struct stun_builder *b, void *arg)
{
	const struct peers_arg *p = arg;
	for (size_t i = 0; i < p->n; i++)
		stun_build_addr(b, STUN_ATTR_XOR_PEER_ADDRESS,
				(const struct sockaddr *)&p->peers[i]);
}

int turn_client_create_permission(struct turn_client *c, const struct sockaddr_storage *peers,
				  size_t n)
{
	struct turn_response rsp;
	struct peers_arg a = { peers, n };

	if (peers == NULL || n == 0 || n > STUN_MAX_PEERS)
		return -EINVAL;
	return tc_run(c, STUN_CREATE_PERMISSION, perm_attrs, &a, TURN_REQ_AUTH, &rsp);
}

struct chan_arg {
	uint16_t channel;
	const struct sockaddr *peer;
};

static void chan_attrs(struct stun_builder *b, void *arg)
{
	const struct chan_arg *a = arg;
	stun_build_channel(b, a->channel);
	stun_build_addr(b, STUN_ATTR_XOR_PEER_ADDRESS, a->peer);
}

static void remember_channel(struct turn_client *c, uint16_t channel, const struct sockaddr *peer)
{
	unsigned i;
	for (i = 0; i < c->n_chan && c->chan[i].channel != channel; i++)
		;
	if (i == TC_CHANNELS_MAX)
		return;	/* table full: ChannelData on it is reported without a peer */
	if (i == c->n_chan)
		c->n_chan++;
	c->chan[i].channel = channel;
	memset(&c->chan[i].peer, 0, sizeof(c->chan[i].peer));
	memcpy(&c->chan[i].peer, peer,
	       peer->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
					   : sizeof(struct sockaddr_in));
}

int turn_client_channel_bind(struct turn_client *c, uint16_t channel, const struct sockaddr *peer)
{
	struct turn_response rsp;
	struct chan_arg a = { channel, peer };
	int rc;

	if (peer == NULL)
		return -EINVAL;
	rc = tc_run(c, STUN_CHANNEL_BIND, chan_attrs, &a, TURN_REQ_AUTH, &rsp);
	if (rc == 0)
		remember_channel(c, channel, peer);
	return rc;
}

int turn_client_send_indication(struct turn_client *c, const struct sockaddr *peer,
				const void *data, size_t len, bool dont_fragment)
{
	struct stun_builder b;
	uint8_t tid[STUN_TID_LEN];
	size_t n;
	int rc;

	if (c == NULL || peer == NULL || (data == NULL && len) || c->raw)
		return -EINVAL;
	rc = stun_tid_random(tid);
	if (rc != 0)
		return rc;
	stun_build_init(&b, c->tx, TC_RX_CAP, STUN_SEND, STUN_INDICATION, tid);
	stun_build_addr(&b, STUN_ATTR_XOR_PEER_ADDRESS, peer);
	if (dont_fragment)
		stun_build_flag(&b, STUN_ATTR_DONT_FRAGMENT);
	stun_build_attr(&b, STUN_ATTR_DATA, data, len);
	if (c->fingerprint)
		stun_build_fingerprint(&b);
	rc = stun_build_finish(&b, &n);
	return rc == 0 ? tc_send(c, c->tx, n) : rc;
}

/* Reuses the client's transmit buffer: no allocation per packet (the benchmark's path). */
int turn_client_send_channel(struct turn_client *c, uint16_t channel, const void *data, size_t len)
{
	size_t n;
	int rc;

	if (c == NULL || c->raw)
		return -EINVAL;
	rc = stun_chan_encode(c->tx, TC_RX_CAP, channel, data, len, tc_is_stream(c),
			      STUN_CHAN_RFC8656, &n);
	return rc == 0 ? tc_send(c, c->tx, n) : rc;
}

/* Extracts the payload of a relayed packet. -ENOMSG if m is not one. */
static int deliver(struct turn_client *c, const uint8_t *m, size_t n, void *buf, size_t cap,
		   size_t *len, struct sockaddr_storage *peer, uint16_t *channel)
{
	struct sockaddr_storage p;
	const uint8_t *d;
	size_t dl;
	uint16_t ch = 0;
	struct stun_msg msg;

	memset(&p, 0, sizeof(p));
	if (stun_is_channeldata(m, n, STUN_CHAN_RFC8656)) {
		if (stun_chan_decode(m, n, STUN_CHAN_RFC8656, &ch, &d, &dl) != 0)
			return -ENOMSG;
		for (unsigned i = 0; i < c->n_chan; i++)
			if (c->chan[i].channel == ch)
				p = c->chan[i].peer;
	} else {
		if (stun_msg_parse(&msg, m, n) != 0 || msg.method != STUN_DATA ||
		    msg.cls != STUN_INDICATION ||
		    stun_msg_get_addr(&msg, STUN_ATTR_XOR_PEER_ADDRESS, &p) != 0 ||
		    stun_msg_get_raw(&msg, STUN_ATTR_DATA, &d, &dl) != 0)
			return -ENOMSG;
	}
	if (dl > cap)
		return -EMSGSIZE;
	memcpy(buf, d, dl);
	*len = dl;
	if (peer)
		*peer = p;
	if (channel)
		*channel = ch;
	return 0;
}

int turn_client_recv(struct turn_client *c, void *buf, size_t cap, size_t *len,
		     struct sockaddr_storage *peer, uint16_t *channel, int timeout_ms)
{
	int64_t deadline = tc_now_ms() + timeout_ms;
	struct tc_pkt p;
	int rc;

	if (c == NULL || buf == NULL || len == NULL || c->raw)
		return -EINVAL;
	/* Bounded by the queue length, then by the deadline. */
	while (tc_queue_pop(c, &p)) {
		rc = deliver(c, p.data, p.len, buf, cap, len, peer, channel);
		free(p.data);
		if (rc != -ENOMSG)
			return rc;
	}
	for (;;) {
		const uint8_t *m;
		size_t n;
		rc = tc_recv_msg(c, deadline, &m, &n);
		if (rc != 0)
			return rc;
		rc = deliver(c, m, n, buf, cap, len, peer, channel);
		if (rc != -ENOMSG)
			return rc;
	}
}
