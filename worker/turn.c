/* Worker TURN/STUN request handling: Binding, Allocate, Refresh, CreatePermission,
 * ChannelBind, Send indications and ChannelData (RFC 8489, RFC 8656). */
#include "config.h"

#include "worker/relay.h"
#include "worker/stream.h"
#include "worker/unauth.h"
#include "worker/turn.h"
#include "worker/wk.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "common/log.h"
#include "common/mono.h"
#include "shm/shm_records.h"
#include "stun/stun_frame.h"

static int wk_error_build(struct worker *w, const struct stun_msg *req, int code,
			  const char *reason, const struct wk_cred *cred, size_t *len)
{
	struct stun_builder b;

	stun_build_init_response(&b, w->txbuf, sizeof(w->txbuf), req, STUN_ERROR);
	stun_build_error_code(&b, code, reason);
	if (code == 420) {
		const uint16_t *types;
		unsigned n = stun_msg_unknown(req, &types);

		stun_build_unknown_attributes(&b, types, n);
	}
	wk_auth_sign(&b, cred, stun_msg_has(req, STUN_ATTR_FINGERPRINT));
	return stun_build_finish(&b, len);
}

/* Error response; signed when the request authenticated (cred with a key). An answer to
 * an unauthenticated request passes the per-prefix limiter (worker/ratelimit.h), and its
 * reason phrase is cut where it alone would make the answer larger than the request
 * (wk_unauth_reason): built once without a phrase to learn the rest's length. */
void wk_reply_error(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req, int code,
		    const char *reason, const struct wk_cred *cred)
{
	bool authed = cred && cred->key_len;
	size_t len;

	if (code == 500)
		shm_ctr_add(w->ctr, SHM_CTR_ERR_INTERNAL, 1);
	if (!authed && !wk_unauth_may_reply(w, ep))
		return;

	log_debug("turn", "%s on listener %s: error %d%s%s", stun_method_name(req->method),
		  ep->l->name, code, reason ? ": " : "", reason ? reason : "");
	if (!authed) {
		if (wk_error_build(w, req, code, "", cred, &len) < 0)
			return;
		reason = wk_unauth_reason(ep, req, len, code, reason);
		if (reason[0] == '\0') {
			wk_send_client(w, ep, w->txbuf, len);
			return;
		}
	}
	if (wk_error_build(w, req, code, reason, cred, &len) == 0)
		wk_send_client(w, ep, w->txbuf, len);
}

/* RFC 8489 Binding: XOR-MAPPED-ADDRESS only (no MAPPED-ADDRESS, no SOFTWARE, no
 * OTHER-ADDRESS or RESPONSE-ORIGIN), FINGERPRINT when the request had one. It never
 * authenticates, so an answer to a datagram client of a UDP listener is reflection like
 * an unauthenticated error and passes the same limiter: a credit of the source address,
 * else a token of its prefix's bucket (docs/security.md). */
static void wk_binding(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req)
{
	struct stun_builder b;
	size_t len;

	if (!wk_unauth_may_reply(w, ep))
		return;
	stun_build_init_response(&b, w->txbuf, sizeof(w->txbuf), req, STUN_SUCCESS);
	stun_build_addr(&b, STUN_ATTR_XOR_MAPPED_ADDRESS, ep->addr);
	if (stun_msg_has(req, STUN_ATTR_FINGERPRINT))
		stun_build_fingerprint(&b);
	if (stun_build_finish(&b, &len) == 0) {
		shm_ctr_add(w->ctr, SHM_CTR_STUN_BINDING, 1);
		wk_send_client(w, ep, w->txbuf, len);
	}
}

/* RFC 8656 7.2 step 9 / 7.3: min(requested, maximum), but never below the default. */
static uint32_t wk_lifetime(struct worker *w, const struct stun_msg *req)
{
	uint32_t want, def = w->hot.alloc_lifetime, max = w->hot.max_alloc_lifetime;

	if (stun_msg_get_lifetime(req, &want) < 0)
		return def < max ? def : max;
	if (want > max)
		want = max;
	return want > def ? want : (def < max ? def : max);
}

static struct wk_alloc *wk_alloc_of(struct worker *w, const struct wk_ep *ep)
{
	if (ep->c)
		return ep->c->alloc;
	return wk_alloc_find(w, ep->l, ep->addr);
}

static bool wk_has_family(const struct wk_alloc *a, int family)
{
	return a->relay[0].family == family ||
	       (a->relay[1].fd >= 0 && a->relay[1].family == family);
}

/* Checks the Allocate attributes that need no state. Returns 0 or the error code; *tcp
 * for an RFC 6062 allocation (REQUESTED-TRANSPORT TCP over a TCP or TLS connection). */
static int wk_allocate_validate(const struct wk_ep *ep, const struct stun_msg *req, int *fam,
				int *fam2, bool *tcp)
{
	uint8_t proto;
	int rc;

	if (stun_msg_get_requested_transport(req, &proto) < 0)
		return 400;
	if (proto != STUN_TRANSPORT_UDP && proto != STUN_TRANSPORT_TCP)
		return 442;
	*tcp = proto == STUN_TRANSPORT_TCP;
	/* RFC 6062 5.1: TCP relaying only for a client on a stream, and without the UDP
	 * port options. */
	if (*tcp && (!ep->c || ep->c->dgram || stun_msg_has(req, STUN_ATTR_DONT_FRAGMENT) ||
		     stun_msg_has(req, STUN_ATTR_EVEN_PORT) ||
		     stun_msg_has(req, STUN_ATTR_RESERVATION_TOKEN) ||
		     stun_msg_has(req, STUN_ATTR_ADDITIONAL_ADDRESS_FAMILY)))
		return 400;
	*fam = 0;
	*fam2 = 0;
	if (stun_msg_has(req, STUN_ATTR_RESERVATION_TOKEN) &&
	    (stun_msg_has(req, STUN_ATTR_EVEN_PORT) ||
	     stun_msg_has(req, STUN_ATTR_REQUESTED_ADDRESS_FAMILY) ||
	     stun_msg_has(req, STUN_ATTR_ADDITIONAL_ADDRESS_FAMILY)))
		return 400;
	if (stun_msg_has(req, STUN_ATTR_REQUESTED_ADDRESS_FAMILY) &&
	    stun_msg_has(req, STUN_ATTR_ADDITIONAL_ADDRESS_FAMILY))
		return 400;
	rc = stun_msg_get_family(req, STUN_ATTR_REQUESTED_ADDRESS_FAMILY, fam);
	if (rc == -EAFNOSUPPORT)
		return 440;
	if (rc < 0 && rc != -ENOENT)
		return 400;
	rc = stun_msg_get_family(req, STUN_ATTR_ADDITIONAL_ADDRESS_FAMILY, fam2);
	if (rc == 0 && *fam2 != AF_INET6)
		return 400;		/* RFC 8656 7.2: only IPv6 may be additional */
	if (rc < 0 && rc != -ENOENT)
		return 400;
	if (*fam2)
		*fam = AF_INET;
	return 0;
}

/* Picks the relay family when the client named none: IPv4 per RFC 8656, unless the
 * listener announces no IPv4 address (an IPv6-only listener), then the listener's. */
static int wk_default_family(const struct wk_listener *l)
{
	if (l->relay_addr.ss_family == AF_INET || l->relay_addr2.ss_family == AF_INET)
		return AF_INET;
	return l->relay_addr.ss_family;
}

static void wk_record_fill(struct worker *w, struct wk_alloc *a, const struct wk_ep *ep,
			   const struct stun_msg *req, const struct wk_cred *cred,
			   const struct snap_auth *au, uint64_t token)
{
	struct shm_alloc *rec = a->rec;
	struct sockaddr_storage local;
	socklen_t sl = sizeof(local);

	shm_alloc_begin_write(rec);
	rec->client_transport = !ep->c         ? SHM_TRANSPORT_UDP
				: !ep->c->ssl  ? SHM_TRANSPORT_TCP
				: ep->c->dgram ? SHM_TRANSPORT_DTLS
					       : SHM_TRANSPORT_TLS;
	rec->key_alg = cred->key_alg;
	rec->key_len = (uint8_t)cred->key_len;
	memcpy(rec->key, cred->key, cred->key_len);
	rec->listener_idx = (uint16_t)ep->l->slot;
	wk_addr_to_shm(ep->addr, &rec->client);
	if (getsockname(ep->c ? ep->c->fd : ep->l->fd, (struct sockaddr *)&local, &sl) == 0)
		wk_addr_to_shm((struct sockaddr *)&local, &rec->server);
	wk_addr_to_shm((struct sockaddr *)&a->relay[0].addr, &rec->relay);
	if (a->relay[1].fd >= 0)
		wk_addr_to_shm((struct sockaddr *)&a->relay[1].addr, &rec->relay2);
	rec->created_ns = mono_ns();
	rec->cred_expiry = cred->cred_expiry;
	rec->reservation = token;
	memcpy(rec->txid, req->tid, STUN_TID_LEN);
	rec->user_len = (uint16_t)cred->user_len;
	memcpy(rec->username, cred->user, cred->user_len);
	rec->realm_len = (uint16_t)(au->realm_len < SHM_ALLOC_REALM_MAX ? au->realm_len
									: SHM_ALLOC_REALM_MAX);
	memcpy(rec->realm, au->realm, rec->realm_len);
	shm_alloc_end_write(rec);
}

/* Binds the relay socket(s). Returns 0 or an error code; *addr_err gets 440 when the
 * additional family of a dual allocation could not be served. */
static int wk_allocate_relays(struct worker *w, struct wk_alloc *a, const struct stun_msg *req,
			      int fam, int fam2, uint64_t *token, int *addr_err)
{
	uint64_t rtoken;
	bool even = false, reserve = false;
	int rc;

	if (stun_msg_get_reservation_token(req, &rtoken) == 0) {
		struct shm_ppool_resv rv;

		/* Any worker's reservation: the shared pool keeps them (shm/shm_ppool.h).
		 * Redeemed, its port is booked by our record; spent either way. */
		if (shm_ppool_redeem(w->shm, rtoken, a->rec_idx, mono_ns(), &rv) < 0)
			return 508;
		if (rv.lkey != shm_quota_listener_key(a->l->slot)) {
			/* A token of another listener: refused, and its port given back
			 * rather than leaked. */
			shm_ppool_put(w->shm, rv.tag, rv.port, a->rec_idx);
			return 508;
		}
		rc = wk_alloc_bind_relay(w, a, rv.family, rv.port, false, NULL);
		if (rc < 0) {
			shm_ppool_put(w->shm, rv.tag, rv.port, a->rec_idx);
			return 508;
		}
		return 0;
	}
	if (stun_msg_get_even_port(req, &reserve) == 0)
		even = true;
	if (reserve) {
		/* The token is the only proof of the reservation: without the CSPRNG there is
		 * none to hand out (a clock value would be guessable), so the request
		 * fails. */
		if (RAND_bytes((uint8_t *)token, sizeof(*token)) != 1 || *token == 0) {
			*token = 0;
			return 500;
		}
		rc = wk_alloc_bind_relay(w, a, fam, 0, even,
					 &(struct shm_ppool_resv){
						 .token = *token,
						 .lkey = shm_quota_listener_key(a->l->slot),
						 .family = (uint8_t)fam,
						 .expires_ns = mono_ns() +
							       WK_RESV_LIFETIME_MS * UINT64_C(1000000),
					 });
	} else {
		rc = wk_alloc_bind_relay(w, a, fam, 0, even, NULL);
	}
	if (rc < 0)
		*token = 0;
	if (rc == -EAFNOSUPPORT)
		return 440;
	if (rc < 0)
		return 508;
	if (fam2 && wk_alloc_bind_relay(w, a, fam2, 0, false, NULL) < 0)
		*addr_err = 440;
	return 0;
}

static void wk_allocate_reply(struct worker *w, const struct wk_ep *ep, struct wk_alloc *a,
			      const struct stun_msg *req, const struct wk_cred *cred,
			      uint32_t lifetime, uint64_t token, int addr_err)
{
	struct stun_builder b;
	size_t len;

	stun_build_init_response(&b, w->txbuf, sizeof(w->txbuf), req, STUN_SUCCESS);
	for (int i = 0; i < 2; i++)
		if (a->relay[i].fd >= 0) {
			struct sockaddr_storage ann;

			wk_alloc_announced(a, &a->relay[i], &ann);
			stun_build_addr(&b, STUN_ATTR_XOR_RELAYED_ADDRESS, (struct sockaddr *)&ann);
		}
	stun_build_lifetime(&b, lifetime);
	stun_build_addr(&b, STUN_ATTR_XOR_MAPPED_ADDRESS, ep->addr);
	if (token)
		stun_build_reservation_token(&b, token);
	if (addr_err)
		stun_build_address_error(&b, AF_INET6, addr_err, NULL);
	wk_auth_sign(&b, cred, stun_msg_has(req, STUN_ATTR_FINGERPRINT));
	if (stun_build_finish(&b, &len) < 0)
		return;
	free(a->resp);
	a->resp = malloc(len);
	if (a->resp) {
		memcpy(a->resp, w->txbuf, len);
		a->resp_len = len;
	}
	wk_send_client(w, ep, w->txbuf, len);
}

/* A draining worker takes no new allocation: 300 with ALTERNATE-SERVER when one is
 * configured (admin.alternate_server), else 403. 0 when not draining. */
static int wk_allocate_draining(const struct worker *w, const char **reason)
{
	if (w->draining) {
		*reason = "Server draining";
		return w->hot.have_alt ? 300 : 403;
	}
	return 0;
}

/* The one quota decision, right before the record is published: counts the allocation
 * for its user, its listener and the total in the shared counts (shm/shm_quota.h), or
 * refuses it: 486 for a user at limits.user_quota, 508 for a listener at its
 * max_allocations, the total at limits.total_quota, or no room in the count table. The
 * limits are this snapshot's: a lower one refuses new allocations and ends none. */
/* limits.user_quota of an Allocate on ep's listener: as configured, or when unset half of
 * what the listener can hold (CONF_USER_QUOTA_AUTO): the smaller of its relay ports and
 * the allocation table (its max_allocations, limits.max_allocations and total_quota). */
static uint32_t wk_user_quota(const struct worker *w, const struct wk_ep *ep)
{
	const struct snap_limits *lim = snap_limits(w->snap);
	uint32_t cap = (uint32_t)ep->l->sl.relay_port_max - ep->l->sl.relay_port_min + 1;

	if (w->hot.user_quota != CONF_USER_QUOTA_AUTO)
		return w->hot.user_quota;
	if (ep->l->sl.max_allocations && ep->l->sl.max_allocations < cap)
		cap = ep->l->sl.max_allocations;
	if (lim->max_allocations < cap)
		cap = lim->max_allocations;
	if (lim->total_quota && lim->total_quota < cap)
		cap = lim->total_quota;
	return cap > 1 ? cap / 2 : 1;
}

static int wk_quota_take(struct worker *w, const struct wk_ep *ep, const struct wk_alloc *a)
{
	const struct shm_quota_limits lim = {
		.user = wk_user_quota(w, ep),
		.listener = ep->l->sl.max_allocations,
		.total = w->hot.total_quota,
	};
	int rc = shm_quota_take_rec(w->shm, a->rec, &lim);

	if (rc == 0)
		return 0;
	if (rc == -EDQUOT) {
		shm_ctr_add(w->ctr, SHM_CTR_QUOTA_USER, 1);
		return 486;
	}
	if (rc != -EUSERS && rc != -EBUSY)
		log_warn("turn", "allocation for %.*s on %s not counted: %s", (int)a->rec->user_len,
			 a->rec->username, ep->l->name, strerror(-rc));
	shm_ctr_add(w->ctr, SHM_CTR_QUOTA_TOTAL, 1);
	return 508;
}

static void wk_reply_alternate(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req,
			       const struct wk_cred *cred)
{
	struct stun_builder b;
	struct sockaddr_storage alt = w->hot.alt;
	size_t len;

	if (alt.ss_family == AF_INET && ((struct sockaddr_in *)&alt)->sin_port == 0)
		((struct sockaddr_in *)&alt)->sin_port = htons(ep->l->sl.port);
	if (alt.ss_family == AF_INET6 && ((struct sockaddr_in6 *)&alt)->sin6_port == 0)
		((struct sockaddr_in6 *)&alt)->sin6_port = htons(ep->l->sl.port);
	stun_build_init_response(&b, w->txbuf, sizeof(w->txbuf), req, STUN_ERROR);
	stun_build_error_code(&b, 300, NULL);
	stun_build_addr(&b, STUN_ATTR_ALTERNATE_SERVER, (struct sockaddr *)&alt);
	wk_auth_sign(&b, cred, stun_msg_has(req, STUN_ATTR_FINGERPRINT));
	if (stun_build_finish(&b, &len) == 0)
		wk_send_client(w, ep, w->txbuf, len);
}

static void wk_allocate(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req)
{
	struct wk_alloc *a = wk_alloc_of(w, ep);
	struct wk_cred cred;
	struct snap_auth au;
	const char *reason = NULL;
	uint64_t token = 0;
	int fam, fam2, code, addr_err = 0;
	bool tcp = false;
	uint32_t lifetime;

	if (a && a->resp && memcmp(a->rec->txid, req->tid, STUN_TID_LEN) == 0) {
		wk_send_client(w, ep, a->resp, a->resp_len);	/* retransmission */
		return;
	}
	if (wk_auth_check(w, ep, req, NULL, &cred) != WK_AUTH_OK)
		return;
	if (a) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_ALLOC_MISMATCH, 1);
		code = 437;
		goto fail;
	}
	code = wk_allocate_draining(w, &reason);
	if (code == 300) {
		wk_reply_alternate(w, ep, req, &cred);
		goto out;
	}
	if (!code)
		code = wk_allocate_validate(ep, req, &fam, &fam2, &tcp);
	if (!code && tcp && !(ep->l->snap_ok && ep->l->sl.tcp_routes)) {
		/* No TCP peer could ever be admitted: refused at once, as RFC 6062 5.1 refuses
		 * a transport that local policy forbids. */
		code = 403;
		reason = "No route to a TCP cluster";
	}
	if (code)
		goto fail;
	if (!fam)
		fam = wk_default_family(ep->l);
	if (wk_alloc_create(w, ep, &a) < 0) {
		shm_ctr_add(w->ctr, SHM_CTR_QUOTA_TOTAL, 1);
		code = 508;
		goto fail;
	}
	a->dont_fragment = stun_msg_has(req, STUN_ATTR_DONT_FRAGMENT);
	a->tcp = tcp;
	code = wk_allocate_relays(w, a, req, fam, fam2, &token, &addr_err);
	if (code || snap_auth_get(w->snap, ep->l->sl.auth_idx, &au) < 0) {
		wk_alloc_destroy(w, a, "relay setup failed");
		code = code ? code : 500;
		goto fail;
	}
	lifetime = wk_lifetime(w, req);
	wk_record_fill(w, a, ep, req, &cred, &au, token);
	wk_alloc_set_expiry(w, a, lifetime);
	/* Counted before it is LIVE: a crash in between leaves the counts one high (a
	 * CLAIMED record is released uncounted), never low; a restart's take-over recounts. */
	code = wk_quota_take(w, ep, a);
	if (code) {
		/* Never granted, so wk_alloc_destroy records nothing: the refusal's own record
		 * (reason quota: who asked, from where, on which listener). */
		(void)shm_records_push(w->shm, w->slot, a->rec_idx, a->rec, SHM_REC_QUOTA, mono_ns(),
				       ep->l->name);
		wk_alloc_destroy(w, a, "over quota");
		goto fail;
	}
	shm_alloc_publish(w->shm, w->slot, a->rec_idx);
	a->published = true;
	if (a->conn)
		wk_fdstore_conn(w, a->conn);
	(void)shm_records_push_start(w->shm, w->slot, a->rec_idx, a->rec, mono_ns(), ep->l->name);
	shm_ctr_add(w->ctr, SHM_CTR_ALLOCS_CREATED, 1);
	shm_ctr_add(w->ctr, SHM_CTR_ALLOCS_ACTIVE, 1);
	shm_lctr_add(w->ctr, ep->l->slot, SHM_LCTR_ALLOCS_CREATED, 1);
	shm_lctr_add(w->ctr, ep->l->slot, SHM_LCTR_ALLOCS_ACTIVE, 1);
	log_debug("turn", "allocation %u for %s on %s, lifetime %u s", a->rec_idx, cred.user,
		  ep->l->name, lifetime);
	wk_allocate_reply(w, ep, a, req, &cred, lifetime, token, addr_err);
	goto out;
fail:
	wk_reply_error(w, ep, req, code, reason, &cred);
out:
	explicit_bzero(&cred, sizeof(cred));
}

/* Authenticates a request on an existing allocation; answers 437 when there is none.
 * Returns the allocation or NULL (already answered). */
static struct wk_alloc *wk_auth_alloc(struct worker *w, const struct wk_ep *ep,
				      const struct stun_msg *req, struct wk_cred *cred)
{
	struct wk_alloc *a = wk_alloc_of(w, ep);

	if (wk_auth_check(w, ep, req, a, cred) != WK_AUTH_OK)
		return NULL;
	if (!a) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_ALLOC_MISMATCH, 1);
		wk_reply_error(w, ep, req, 437, NULL, cred);
		return NULL;
	}
	return a;
}

void wk_reply_ok(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req,
		 const struct wk_cred *cred, bool with_lifetime, uint32_t lifetime)
{
	struct stun_builder b;
	size_t len;

	stun_build_init_response(&b, w->txbuf, sizeof(w->txbuf), req, STUN_SUCCESS);
	if (with_lifetime)
		stun_build_lifetime(&b, lifetime);
	wk_auth_sign(&b, cred, stun_msg_has(req, STUN_ATTR_FINGERPRINT));
	if (stun_build_finish(&b, &len) == 0)
		wk_send_client(w, ep, w->txbuf, len);
}

static void wk_refresh(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req)
{
	struct wk_cred cred;
	struct wk_alloc *a = wk_auth_alloc(w, ep, req, &cred);
	uint32_t want;
	int fam;

	if (!a)
		goto out;
	if (stun_msg_get_family(req, STUN_ATTR_REQUESTED_ADDRESS_FAMILY, &fam) == 0 &&
	    !wk_has_family(a, fam)) {
		wk_reply_error(w, ep, req, 443, NULL, &cred);
		goto out;
	}
	if (stun_msg_get_lifetime(req, &want) == 0 && want == 0) {
		/* End it before answering: whoever the answer reaches first (the client, then
		 * an admin query) must find it gone. */
		wk_alloc_destroy(w, a, "refreshed with lifetime 0");
		wk_reply_ok(w, ep, req, &cred, true, 0);
		goto out;
	}
	want = wk_lifetime(w, req);
	wk_alloc_set_expiry(w, a, want);
	wk_reply_ok(w, ep, req, &cred, true, want);
out:
	explicit_bzero(&cred, sizeof(cred));
}

/* limits.channel_numbers: RFC 5766's range by default (what stunnerd accepts and coturn's
 * clients pick from); the strict RFC 8656 range only when the snapshot asks for it. */
enum stun_chan_range wk_chan_range(const struct worker *w)
{
	return w->snap != NULL && snap_limits(w->snap)->channel_numbers == CONF_CHAN_RFC8656
		       ? STUN_CHAN_RFC8656
		       : STUN_CHAN_RFC5766;
}

/* Peer checks shared by CreatePermission and ChannelBind: 443 for a family the
 * allocation does not have, 403 outside the listener's allowlist (IP only; for a channel
 * also the port, wk_peer_bind_allowed). */
static int wk_peer_check(struct worker *w, const struct wk_alloc *a, const struct sockaddr *peer,
			 bool chan)
{
	uint32_t cl;
	enum conf_cluster_proto proto = a->tcp ? CONF_CPROTO_TCP : CONF_CPROTO_UDP;

	if (!wk_has_family(a, peer->sa_family))
		return 443;
	if ((chan ? wk_peer_bind_allowed(w, a->l, peer, proto, &cl)
		  : wk_peer_allowed(w, a->l, peer, proto, false, &cl)) < 0)
		return 403;
	shm_cctr_add(w->ctr, cl, SHM_CCTR_PERM_GRANTED, 1);
	return 0;
}

/* Installs a permission for every peer of req, or none: when the table fills up midway
 * the ones already installed or refreshed are put back as they were. 0 or 508. */
static int wk_perms_install(struct worker *w, struct wk_alloc *a, const struct stun_msg *req)
{
	struct shm_perm saved[SHM_ALLOC_MAX_PERMS];
	struct sockaddr_storage peer;
	unsigned n = stun_msg_peer_count(req);

	memcpy(saved, a->rec->perms, sizeof(saved));
	for (unsigned i = 0; i < n; i++)
		if (stun_msg_get_peer(req, i, &peer) == 0 &&
		    wk_alloc_perm_add(w, a, (struct sockaddr *)&peer) < 0) {
			shm_alloc_begin_write(a->rec);
			memcpy(a->rec->perms, saved, sizeof(saved));
			shm_alloc_end_write(a->rec);
			wk_alloc_rearm(w, a);
			return 508;
		}
	return 0;
}

static void wk_create_permission(struct worker *w, const struct wk_ep *ep,
				 const struct stun_msg *req)
{
	struct wk_cred cred;
	struct wk_alloc *a = wk_auth_alloc(w, ep, req, &cred);
	struct sockaddr_storage peer;
	unsigned n;
	int code = 0;

	if (!a)
		goto out;
	n = stun_msg_peer_count(req);
	if (n == 0 || req->peers_truncated)
		code = 400;
	/* All or nothing (RFC 8656 9.2): check every peer before installing any. */
	for (unsigned i = 0; i < n && !code; i++) {
		if (stun_msg_get_peer(req, i, &peer) < 0)
			code = 400;
		else
			code = wk_peer_check(w, a, (struct sockaddr *)&peer, false);
	}
	if (!code)
		code = wk_perms_install(w, a, req);
	if (code)
		wk_reply_error(w, ep, req, code, NULL, &cred);
	else
		wk_reply_ok(w, ep, req, &cred, false, 0);
out:
	explicit_bzero(&cred, sizeof(cred));
}

static void wk_channel_bind(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req)
{
	struct wk_cred cred;
	struct wk_alloc *a = wk_auth_alloc(w, ep, req, &cred);
	struct sockaddr_storage peer;
	const char *reason = NULL;
	uint16_t ch;
	int code, rc;

	if (!a)
		goto out;
	if (stun_msg_get_channel(req, wk_chan_range(w), &ch) < 0) {
		code = 400;
		reason = "Bad CHANNEL-NUMBER";
		goto fail;
	}
	if (stun_msg_get_peer(req, 0, &peer) < 0) {
		code = 400;
		reason = "Bad XOR-PEER-ADDRESS";
		goto fail;
	}
	if (a->tcp) {
		code = 400;
		reason = "No channels on a TCP allocation";
		goto fail;
	}
	code = wk_peer_check(w, a, (struct sockaddr *)&peer, true);
	if (code)
		goto fail;
	rc = wk_alloc_chan_bind(w, a, ch, (struct sockaddr *)&peer);
	if (rc == -EEXIST) {
		code = 400;
		reason = "Channel or peer bound otherwise";
		goto fail;
	}
	if (rc < 0) {
		code = 508;
		goto fail;
	}
	wk_alloc_rearm(w, a);
	wk_reply_ok(w, ep, req, &cred, false, 0);
	goto out;
fail:
	wk_reply_error(w, ep, req, code, reason, &cred);
out:
	explicit_bzero(&cred, sizeof(cred));
}

static void wk_send_indication(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req)
{
	struct wk_alloc *a = wk_alloc_of(w, ep);
	struct sockaddr_storage peer;
	const uint8_t *data;
	size_t len;

	if (!a || req->n_unknown || stun_msg_get_peer(req, 0, &peer) < 0 ||
	    stun_msg_get_raw(req, STUN_ATTR_DATA, &data, &len) < 0)
		return;
	wk_relay_out(w, a, (struct sockaddr *)&peer, data, len);
}

/* The fast path: no allocation, no copy; 5-tuple -> allocation -> channel -> peer. */
static void wk_channel_data(struct worker *w, const struct wk_ep *ep, const uint8_t *buf,
			    size_t len)
{
	struct wk_alloc *a = wk_alloc_of(w, ep);
	const struct shm_chan *c;
	struct sockaddr_storage peer;
	const uint8_t *data;
	size_t dlen;
	uint16_t ch;

	/* Trailing bytes (stream padding) are ignored by the decoder. */
	if (!a || stun_chan_decode(buf, len, wk_chan_range(w), &ch, &data, &dlen) < 0)
		return;
	c = wk_alloc_chan_by_num(a, ch, wk_batch_ns(w));
	if (!c || !wk_shm_to_addr(&c->peer, &peer))
		return;
	wk_relay_out(w, a, (struct sockaddr *)&peer, data, dlen);
}

static unsigned wk_slot_count(const struct worker *w)
{
	struct shm_config cfg;

	shm_get_config(w->shm, &cfg);
	return cfg.n_slots;
}

/* RFC 6062 5.2: the peer is checked against the routes (IP and port) before any packet
 * leaves; a permission is installed for it; then the connect runs and is answered when
 * it ends (tcprelay.c). */
static void wk_connect(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req)
{
	struct wk_cred cred;
	struct wk_alloc *a = wk_auth_alloc(w, ep, req, &cred);
	struct sockaddr_storage peer;
	const char *reason = NULL;
	uint32_t cl;
	int code;

	if (!a)
		goto out;
	if (!a->tcp) {
		code = 400;
		reason = "Not a TCP allocation";
		goto fail;
	}
	if (stun_msg_get_peer(req, 0, &peer) < 0) {
		code = 400;
		reason = "Bad XOR-PEER-ADDRESS";
		goto fail;
	}
	if (w->draining) {
		code = 403;
		reason = "Server draining";
		goto fail;
	}
	if (!wk_has_family(a, peer.ss_family)) {
		code = 443;
		goto fail;
	}
	if (wk_peer_allowed(w, a->l, (struct sockaddr *)&peer, CONF_CPROTO_TCP, true, &cl) < 0) {
		shm_ctr_add(w->ctr, SHM_CTR_TCP_CONNECT_DENIED, 1);
		code = 403;
		goto fail;
	}
	if (wk_alloc_perm_add(w, a, (struct sockaddr *)&peer) < 0) {
		code = 508;
		goto fail;
	}
	wk_alloc_rearm(w, a);
	code = wk_tcpr_connect(w, a, (struct sockaddr *)&peer, req, cred.sha256);
	if (code)
		goto fail;
	shm_cctr_add(w->ctr, cl, SHM_CCTR_PERM_GRANTED, 1);
	goto out;
fail:
	wk_reply_error(w, ep, req, code, reason, &cred);
out:
	explicit_bzero(&cred, sizeof(cred));
}

/* The waiting peer connection a ConnectionBind names, when its USERNAME is the
 * allocation's (nothing is decided on it before authentication), else NULL. */
static struct wk_tpeer *wk_bind_target(struct worker *w, const struct stun_msg *req, uint32_t id)
{
	const uint8_t *user;
	size_t user_len;

	if (stun_msg_get_raw(req, STUN_ATTR_USERNAME, &user, &user_len) < 0)
		return NULL;
	return wk_tcpr_find(w, id, (const char *)user, user_len);
}

/* RFC 6062 5.4: on a fresh TCP connection (no allocation on it), with credentials of the
 * user whose allocation made the connection. A CONNECTION-ID of another worker moves the
 * connection there once the request authenticates here with the stored key of that
 * worker's allocation of the user (wk_auth_check_bind): one that does not is answered here
 * like any request and stays, under this worker's budgets and deadlines. The owner
 * authenticates it again. For its
 * own peer connection the request is verified with the allocation's key, and its nonce
 * as if it came from the control connection's address (clients reuse that nonce, coturn's
 * do; a stateless nonce is bound to an address) unless it is bound to this connection's
 * own (a client that learnt it here, or from the worker that moved it). Anything else
 * (unknown, bound, another user's) gets 400 once the request authenticates; nothing is
 * learnt before. */
static void wk_connection_bind(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req)
{
	struct wk_cred cred = { 0 };
	struct wk_tpeer *tp = NULL;
	struct wk_alloc *a = NULL;
	struct wk_ep nep = *ep;
	uint32_t id = 0;
	bool usable = ep->c && !ep->c->dgram && !ep->c->alloc && !ep->c->bind_to &&
		      stun_msg_get_connection_id(req, &id) == 0;

	if (usable && wk_tcpr_slot(id) != w->slot && wk_tcpr_slot(id) < wk_slot_count(w)) {
		/* Another worker's: the connection goes there, this request with it, and the
		 * owner answers (worker/tcp.c, the master passes it on). */
		if (wk_auth_check_bind(w, ep, req, wk_tcpr_slot(id), &cred) == WK_AUTH_OK)
			ep->c->handoff_slot = wk_tcpr_slot(id) + 1;
		goto out;
	}
	if (usable && (tp = wk_bind_target(w, req, id)) != NULL) {
		a = wk_tcpr_alloc(tp);
		if (!wk_auth_nonce_ours(w, ep, req)) {
			nep.addr = (struct sockaddr *)&a->client;
			nep.addr_len = a->client_len;
		}
	}
	if (wk_auth_check(w, &nep, req, a, &cred) != WK_AUTH_OK)
		goto out;
	if (!tp) {
		wk_reply_error(w, ep, req, 400, "Bad CONNECTION-ID", &cred);
		goto out;
	}
	wk_reply_ok(w, ep, req, &cred, false, 0);
	wk_tcpr_claim(w, tp, ep->c);
out:
	explicit_bzero(&cred, sizeof(cred));
}

static void wk_request(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req)
{
	struct snap_auth au;
	uint16_t bad;

	if (req->n_unknown) {
		wk_reply_error(w, ep, req, 420, NULL, NULL);
		return;
	}
	if (stun_msg_check_sizes(req, &bad) < 0) {
		/* RFC 8489 6.3.1.1: a malformed attribute gets 400, before any other check
		 * (a 0-length LIFETIME must not read as "no LIFETIME"). */
		char reason[64];

		snprintf(reason, sizeof(reason), "Malformed %s", stun_attr_name(bad));
		shm_ctr_add(w->ctr, SHM_CTR_ERR_MALFORMED, 1);
		wk_reply_error(w, ep, req, 400, reason, NULL);
		return;
	}
	if (req->method == STUN_BINDING) {
		wk_binding(w, ep, req);
		return;
	}
	if (snap_auth_get(w->snap, ep->l->sl.auth_idx, &au) < 0 || au.type == CONF_AUTH_NONE) {
		wk_reply_error(w, ep, req, 403, "TURN disabled: auth type none serves STUN only",
			       NULL);
		return;
	}
	switch (req->method) {
	case STUN_ALLOCATE:
		wk_allocate(w, ep, req);
		break;
	case STUN_REFRESH:
		wk_refresh(w, ep, req);
		break;
	case STUN_CREATE_PERMISSION:
		wk_create_permission(w, ep, req);
		break;
	case STUN_CHANNEL_BIND:
		wk_channel_bind(w, ep, req);
		break;
	case STUN_CONNECT:
		wk_connect(w, ep, req);
		break;
	case STUN_CONNECTION_BIND:
		wk_connection_bind(w, ep, req);
		break;
	default:
		shm_ctr_add(w->ctr, SHM_CTR_ERR_UNKNOWN_METHOD, 1);
		wk_reply_error(w, ep, req, 400, "Unsupported method", NULL);
		break;
	}
}

void wk_turn_input(struct worker *w, const struct wk_ep *ep, uint8_t *buf, size_t len)
{
	struct stun_msg msg;

	/* ChannelData fast path: first byte 0x40-0x4F, or 0x50-0x7F with legacy channel
	 * numbers, and a whole header. In strict mode 0x50-0x7F falls through to the STUN
	 * parser, which counts it as malformed: no such channel can have been bound. */
	if (len >= STUN_CHANDATA_HEADER_LEN && stun_is_channeldata(buf, len, wk_chan_range(w))) {
		wk_channel_data(w, ep, buf, len);
		return;
	}
	wk_txg_flush(w);	/* a request may take the grouped datagrams' allocation away */
	if (stun_msg_parse(&msg, buf, len) < 0) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_MALFORMED, 1);
		return;
	}
	if (msg.fp_off && stun_msg_check_fingerprint(&msg) < 0) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_MALFORMED, 1);
		return;
	}
	if (msg.cls == STUN_REQUEST)
		wk_request(w, ep, &msg);
	else if (msg.cls == STUN_INDICATION && msg.method == STUN_SEND)
		wk_send_indication(w, ep, &msg);
}
