/* Worker PROXY protocol (listeners[].proxy_protocol): the header a trusted proxy sends
 * before a TCP or TLS connection's first byte (v1 or v2), or in front of every UDP datagram
 * (v2), gives the client's address, which then stands for the client everywhere: the
 * budgets, XOR-MAPPED-ADDRESS, the allocation's 5-tuple, quotas, logs and the listing.
 * A listener with proxy_protocol requires the header and refuses every other source:
 * an untrusted source, no header, a malformed one or a disabled version closes the
 * connection (drops the datagram), counted by reason; nothing is ever parsed as STUN. */
#include "config.h"

#include "worker/transport.h"
#include "worker/wk.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "stun/proxyproto.h"

bool wk_pp_enabled(const struct wk_listener *l)
{
	return l->snap_ok && l->sl.pp_versions != 0;
}

void wk_pp_reject(struct worker *w, const struct wk_listener *l, const struct sockaddr *from,
		  enum wk_pp_reason r)
{
	static const char *const why[] = { "untrusted source", "no header", "malformed header",
					   "version not enabled", "no header in time" };
	char txt[INET6_ADDRSTRLEN] = "?";

	shm_ctr_add(w->ctr, (enum shm_ctr)(SHM_CTR_PP_REJ_UNTRUSTED + r), 1);
	if (!log_enabled("worker", LOG_LVL_DEBUG))
		return;
	if (from->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)from)->sin_addr, txt, sizeof(txt));
	else if (from->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)from)->sin6_addr, txt,
			  sizeof(txt));
	log_debug("worker", "listener %s: PROXY protocol: %s refused: %s", l->name, txt,
		  why[r]);
}

bool wk_pp_admit_source(struct worker *w, const struct wk_listener *l,
			const struct sockaddr *from)
{
	if (snap_listener_pp_trusted(&l->sl, from))
		return true;
	wk_pp_reject(w, l, from, WK_PP_UNTRUSTED);
	return false;
}

/* The reason of a parse error. */
static enum wk_pp_reason wk_pp_reason_of(int rc)
{
	switch (rc) {
	case -ENOMSG:
		return WK_PP_MISSING;
	case -EPROTONOSUPPORT:
		return WK_PP_VERSION;
	default:
		return WK_PP_MALFORMED;
	}
}

/* c's source is now the header's client: its budgets are counted again under that
 * address (they counted the proxy's while the header was due). */
static int wk_pp_apply(struct worker *w, struct wk_tconn *c, const struct proxyproto_hdr *h)
{
	shm_ctr_add(w->ctr, SHM_CTR_PP_ACCEPTED, 1);
	if (h->local)
		return 0;	/* LOCAL (a proxy's health check): the connection's own */
	wk_budget_detach(w, c);
	memcpy(&c->peer, &h->src, h->addr_len);
	c->peer_len = h->addr_len;
	if (wk_budget_admit(w, (const struct sockaddr *)&c->peer, SHM_SRC_CONNS) < 0 ||
	    (c->ssl && wk_budget_admit(w, (const struct sockaddr *)&c->peer, SHM_SRC_TLS_HS) < 0))
		return -1;
	wk_budget_attach(w, c);
	return 0;
}

/* Reads only bytes known to be the header's: peeks, and consumes what the parser says
 * is header (all of an incomplete one, exactly the header of a complete one), so the
 * next byte on the socket is the first of TLS or STUN. c->in holds the partial header. */
int wk_pp_stream(struct worker *w, struct wk_tconn *c)
{
	struct proxyproto_hdr h;
	ssize_t n, got;
	int rc;

	n = recv(c->fd, c->in + c->in_len, PROXYPROTO_MAX - c->in_len, MSG_PEEK);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
	if (n == 0)
		return -1;	/* closed before a header: a proxy's TCP check, not counted */
	rc = proxyproto_parse(c->in, c->in_len + (size_t)n, c->l->sl.pp_versions, &h);
	if (rc == -EAGAIN) {
		got = recv(c->fd, c->in + c->in_len, (size_t)n, 0);
		if (got != n)
			return -1;
		c->in_len += (size_t)n;
		return 0;
	}
	if (rc < 0) {
		wk_pp_reject(w, c->l, (const struct sockaddr *)&c->peer, wk_pp_reason_of(rc));
		return -1;
	}
	n = (ssize_t)((size_t)rc - c->in_len);
	got = recv(c->fd, c->in + c->in_len, (size_t)n, 0);
	if (got != n)
		return -1;
	c->in_len = 0;
	return wk_pp_apply(w, c, &h) < 0 ? -1 : 1;
}

int wk_pp_dgram(struct worker *w, const struct wk_listener *l, const struct sockaddr *from,
		const uint8_t *buf, size_t len, struct sockaddr_storage *client,
		socklen_t *client_len)
{
	struct proxyproto_hdr h;
	int rc;

	if (!wk_pp_admit_source(w, l, from))
		return -1;
	rc = proxyproto_parse(buf, len, l->sl.pp_versions & PROXYPROTO_V2, &h);
	if (rc == -EAGAIN)
		rc = -EBADMSG;	/* a datagram is whole: a short header is malformed */
	if (rc < 0) {
		wk_pp_reject(w, l, from, wk_pp_reason_of(rc));
		return -1;
	}
	shm_ctr_add(w->ctr, SHM_CTR_PP_ACCEPTED, 1);
	if (h.local) {
		*client_len = wk_addr_len(from);
		memcpy(client, from, *client_len);
	} else {
		memcpy(client, &h.src, h.addr_len);
		*client_len = h.addr_len;
	}
	return rc;
}

const struct sockaddr *wk_alloc_dest(const struct wk_alloc *a, socklen_t *len)
{
	if (a->via_len) {
		*len = a->via_len;
		return (const struct sockaddr *)&a->via;
	}
	if (!a->conn && wk_pp_enabled(a->l))
		return NULL;
	*len = a->client_len;
	return (const struct sockaddr *)&a->client;
}

void wk_pp_udp_input(struct worker *w, struct wk_listener *l, const struct sockaddr *from,
		     uint8_t *buf, size_t len)
{
	struct sockaddr_storage client;
	socklen_t client_len = 0;
	struct wk_alloc *a;
	int hl = wk_pp_dgram(w, l, from, buf, len, &client, &client_len);
	struct wk_ep ep = { .l = l, .addr = (struct sockaddr *)&client, .addr_len = client_len,
			    .via = from, .via_len = wk_addr_len(from) };

	if (hl < 0)
		return;
	/* The proxy may change (another replica, a new source port): replies follow the
	 * latest one that forwarded a datagram of this client. */
	a = wk_alloc_find(w, l, (struct sockaddr *)&client);
	if (a && !a->conn) {
		a->via_len = ep.via_len <= sizeof(a->via) ? ep.via_len : sizeof(a->via);
		memcpy(&a->via, from, a->via_len);
	}
	w->up->input(w, &ep, buf + hl, len - (size_t)hl);
}
