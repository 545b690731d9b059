/* Worker short circuit: client -> peer data whose peer is a relay address of this instance
 * (a listener's relay address or its relay_address_mask, with the relay port of a live
 * allocation) goes straight to that allocation's client, as if it had left one relay
 * socket and arrived at the other, without touching either (docs/relay.md).
 *
 * The receiving allocation is found through the shared relay port index
 * (shm/shm_relay.h) whichever worker owns it, and read under its record's seqlock. Its
 * client is reached from this worker: a UDP client through this worker's socket of the
 * same listener (the SO_REUSEPORT sockets of a listener share its address and port, so
 * the client sees the usual source); a TCP, TLS or DTLS client when this worker owns the
 * allocation (its connection lives here). Another worker's TCP, TLS or DTLS client gets
 * the datagram handed over to its owner (worker/handover.c), which runs the receiving
 * half (wk_sc_accept). Anything else goes the ordinary way, through the relay socket. */
#include "config.h"

#include "worker/wk.h"

#include <errno.h>
#include <string.h>
#include <netinet/in.h>

#include "common/log.h"
#include "shm/shm_relay.h"

static void wk_sc_ip_of(const struct sockaddr_storage *ss, struct wk_sc_ip *out)
{
	struct shm_addr a;

	wk_addr_to_shm((const struct sockaddr *)ss, &a);
	out->family = a.family;
	memcpy(out->addr, a.addr, 16);
}

static void wk_sc_ip_add(struct worker *w, const struct sockaddr_storage *ss)
{
	struct wk_sc_ip ip;

	if (ss->ss_family != AF_INET && ss->ss_family != AF_INET6)
		return;
	wk_sc_ip_of(ss, &ip);
	for (unsigned i = 0; i < w->n_sc_ips; i++)
		if (w->sc_ips[i].family == ip.family && memcmp(w->sc_ips[i].addr, ip.addr, 16) == 0)
			return;
	if (w->n_sc_ips < WK_SC_MAX_IPS)
		w->sc_ips[w->n_sc_ips++] = ip;
}

void wk_sc_refresh(struct worker *w)
{
	w->n_sc_ips = 0;
	for (size_t i = 0; i < w->n_ls; i++) {
		struct wk_listener *l = w->ls[i];

		if (!l->active || !l->snap_ok)
			continue;
		wk_sc_ip_add(w, &l->relay_addr);
		wk_sc_ip_add(w, &l->relay_addr2);
		wk_sc_ip_add(w, &l->mask_addr);
	}
}

bool wk_sc_own_ip(const struct worker *w, const struct sockaddr *peer)
{
	struct shm_addr a;

	wk_addr_to_shm(peer, &a);
	for (unsigned i = 0; i < w->n_sc_ips; i++)
		if (w->sc_ips[i].family == a.family && memcmp(w->sc_ips[i].addr, a.addr, 16) == 0)
			return true;
	return false;
}

void wk_relay_announced(const struct wk_alloc *a, const struct wk_relay *r,
			struct sockaddr_storage *out)
{
	const struct sockaddr_storage *m = &a->l->mask_addr;

	memcpy(out, &r->addr, sizeof(*out));
	if (m->ss_family != r->family)
		return;
	memcpy(out, m, sizeof(*out));
	if (r->family == AF_INET)
		((struct sockaddr_in *)out)->sin_port = htons(r->port);
	else
		((struct sockaddr_in6 *)out)->sin6_port = htons(r->port);
}

void wk_sc_index(struct worker *w, struct wk_alloc *a, const struct wk_relay *r, bool add)
{
	if (a->tcp)
		return; /* only UDP relays take datagrams */
	if (!add) {
		shm_relay_del(w->shm, r->port, a->rec_idx);
		return;
	}
	if (shm_relay_add(w->shm, r->port, a->rec_idx) < 0)
		log_debug("turn", "allocation %u: relay port %u not indexed (every way taken)",
			  a->rec_idx, r->port);
}

/* The listener a record was made on, by its slot (stable across reloads), or NULL (a
 * listener without a slot is never a short circuit's receiver). */
static struct wk_listener *wk_sc_listener(const struct worker *w, uint32_t slot)
{
	for (size_t i = 0; slot != SHM_LSLOT_NONE && i < w->n_ls; i++)
		if (w->ls[i]->slot == slot && w->ls[i]->active && w->ls[i]->snap_ok)
			return w->ls[i];
	return NULL;
}

/* Whether the peer address `to` (its port already matched) names target t: its relay IP,
 * or the mask of its listener tl. */
static bool wk_sc_names(const struct wk_listener *tl, const struct shm_relay_target *t,
			const struct shm_addr *to)
{
	struct shm_addr m;

	if (to->family == t->relay.family && memcmp(to->addr, t->relay.addr, 16) == 0)
		return true;
	if (tl->mask_addr.ss_family == 0)
		return false;
	wk_addr_to_shm((const struct sockaddr *)&tl->mask_addr, &m);
	return to->family == m.family && memcmp(to->addr, m.addr, 16) == 0;
}

/* Where the target's client is reached from this worker: its allocation (owned here) or,
 * for a plain UDP client of another worker, this worker's socket of its listener tl. */
static bool wk_sc_reachable(struct worker *w, const struct wk_listener *tl,
			    const struct shm_relay_target *t, struct wk_alloc **own)
{
	*own = NULL;
	if (t->owner == w->slot) {
		struct wk_alloc *ta = w->by_idx[t->idx];

		if (ta == NULL || wk_alloc_checked(ta)->rec_idx != t->idx)
			return false;
		*own = ta;
		return true;
	}
	return t->transport == SHM_TRANSPORT_UDP && tl->proto == WORKER_PROTO_UDP && !tl->secure;
}

/* Bandwidth of the receiving side (peer -> client), as wk_alloc_bw_admit for a record
 * this worker does not own. */
static bool wk_sc_bw_admit(struct worker *w, const struct wk_listener *tl,
			   const struct shm_relay_target *t, struct wk_alloc *own, size_t len,
			   uint64_t now_ns)
{
	struct shm_bw_limits lim = w->hot.bw;
	struct shm_bw_who who;

	if (own)
		return wk_alloc_bw_admit(w, own, SHM_BW_TO_CLIENT, len, now_ns);
	lim.listener_bps = tl->sl.max_bps;
	if (!shm_bw_on(&lim))
		return true;
	who = (struct shm_bw_who){ .alloc_idx = t->idx,
				   .listener_idx = tl->slot,
				   .user_key = t->user_key,
				   .listener_key = shm_quota_listener_key(t->listener_idx) };
	if (shm_bw_admit(w->shm, &who, SHM_BW_TO_CLIENT, len, now_ns, &lim) == SHM_BW_PASS)
		return true;
	shm_ctr_add(w->ctr, SHM_CTR_QUOTA_BANDWIDTH, 1);
	return false;
}

/* The receiving half, as wk_relay_cb does for a datagram from `from` on the target's relay
 * socket: routes (IP and port), permission (a missing one is counted as a denial here),
 * bandwidth, counters, then the Data indication or ChannelData to its client. */
static void wk_sc_receive(struct worker *w, struct wk_listener *tl,
			  const struct shm_relay_target *t, struct wk_alloc *own,
			  const struct sockaddr *from, const uint8_t *data, size_t len,
			  uint64_t now_ns)
{
	uint8_t *payload = w->sc_buf + WK_HEADROOM, *m;
	struct sockaddr_storage client;
	socklen_t client_len;
	size_t mlen = 0;
	uint32_t cl;

	shm_ctr_add(w->ctr, SHM_CTR_PEER_PKTS_IN, 1);
	shm_ctr_add(w->ctr, SHM_CTR_PEER_BYTES_IN, len);
	if (wk_peer_allowed(w, tl, from, CONF_CPROTO_UDP, true, &cl) < 0)
		return;
	if (!t->perm) {
		wk_peer_deny(w, tl);
		return;
	}
	if (!wk_sc_bw_admit(w, tl, t, own, len, now_ns))
		return;
	shm_cctr_add(w->ctr, cl, SHM_CCTR_PEER_PKTS_IN, 1);
	shm_cctr_add(w->ctr, cl, SHM_CCTR_PEER_BYTES_IN, len);
	shm_lctr_add(w->ctr, tl->slot, SHM_LCTR_PEER_PKTS_IN, 1);
	shm_lctr_add(w->ctr, tl->slot, SHM_LCTR_PEER_BYTES_IN, len);
	if (own) {
		shm_alloc_ctr_add(own->rec, SHM_ACTR_PKTS_FROM_PEER, 1);
		shm_alloc_ctr_add(own->rec, SHM_ACTR_BYTES_FROM_PEER, len);
	} else {
		shm_relay_ctr_add(w->shm, t->idx, 1, len);
	}
	memcpy(payload, data, len);
	m = wk_frame_peer(payload, len, from, t->chan, own && own->conn && !own->conn->dgram,
			  &mlen);
	if (!m)
		return;
	if (own && own->conn) {
		struct wk_ep ep = { .l = own->l,
				    .c = own->conn,
				    .addr = (struct sockaddr *)&own->client,
				    .addr_len = own->client_len };

		wk_send_client(w, &ep, m, mlen);
		return;
	}
	/* A UDP client, ours or another worker's: grouped with the batch's other messages to
	 * it (one UDP_SEGMENT send), as the relay sockets' path groups them. */
	if (own) {
		const struct sockaddr *to = wk_alloc_dest(own, &client_len);

		if (to)
			wk_ctg_send(w, own->l, to, client_len, m, mlen);
	} else if (wk_pp_enabled(tl)) {
		/* Another worker's client behind a PROXY protocol proxy: the proxy's address
		 * is that worker's to know, and the client's own is not where it listens. */
		shm_ctr_add(w->ctr, SHM_CTR_ERR_SEND, 1);
	} else if ((client_len = wk_shm_to_addr(&t->client, &client)) != 0) {
		wk_ctg_send(w, tl, (struct sockaddr *)&client, client_len, m, mlen);
	}
}

int wk_sc_target(struct worker *w, const struct shm_addr *to, const struct shm_addr *from,
		 uint64_t now_ns, bool want_user, struct shm_relay_target *t,
		 struct wk_listener **tl)
{
	uint32_t cand[SHM_RELAY_WAYS];
	unsigned n = shm_relay_find(w->shm, to->port, cand);

	for (unsigned i = 0; i < n; i++)
		if (shm_relay_target_read(w->shm, cand[i], to->port, from, now_ns, want_user, t) ==
			    0 &&
		    (*tl = wk_sc_listener(w, t->listener_idx)) != NULL && wk_sc_names(*tl, t, to))
			return 0;
	return -ENOENT;
}

/* Without a hand-over channel (harnesses): through the relay sockets to the target's
 * internal relay address, where the owner's relay socket takes it and gives it our
 * announced address (wk_sc_announced_from). */
static bool wk_sc_via_relays(struct worker *w, struct wk_alloc *a, struct wk_relay *r,
			     struct shm_relay_target *t, uint16_t port, uint32_t cl,
			     const uint8_t *data, size_t len)
{
	struct sockaddr_storage in;

	t->relay.port = port;
	if (wk_shm_to_addr(&t->relay, &in) == 0)
		return false;
	wk_peer_send(w, a, r, (struct sockaddr *)&in, cl, data, len, false);
	return true;
}

/* Its client is another worker's connection: the datagram goes to that worker, counted
 * on the sending side once the channel took it, as a relay socket's send is. A full
 * channel drops it as a full relay socket would (a send error). */
static bool wk_sc_hand_over(struct worker *w, struct wk_alloc *a, struct wk_relay *r,
			    struct shm_relay_target *t, const struct shm_addr *to,
			    const struct shm_addr *from, uint32_t cl, const uint8_t *data,
			    size_t len)
{
	int rc = wk_ho_send(w, t, to->port, from, data, len);

	if (rc == -ENOTCONN)
		return wk_sc_via_relays(w, a, r, t, to->port, cl, data, len);
	if (rc < 0) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_SEND, 1);
		return true;
	}
	wk_peer_count(w, a, cl, 1, len);
	shm_ctr_add(w->ctr, SHM_CTR_SHORT_CIRCUIT, 1);
	return true;
}

bool wk_sc_deliver(struct worker *w, struct wk_alloc *a, struct wk_relay *r,
		   const struct sockaddr *peer, uint32_t cl, const uint8_t *data, size_t len)
{
	struct sockaddr_storage from;
	struct shm_addr to, from_shm;
	struct shm_relay_target t;
	struct wk_listener *tl;
	struct wk_alloc *own;
	uint64_t now_ns;

	if (!wk_sc_own_ip(w, peer) || len > WK_DGRAM_MAX - 4)
		return false;
	now_ns = wk_batch_ns(w);
	wk_addr_to_shm(peer, &to);
	wk_relay_announced(a, r, &from);
	wk_addr_to_shm((struct sockaddr *)&from, &from_shm);
	if (wk_sc_target(w, &to, &from_shm, now_ns, w->hot.bw.user_bps != 0, &t, &tl) < 0)
		return false;
	if (!wk_sc_reachable(w, tl, &t, &own))
		return wk_sc_hand_over(w, a, r, &t, &to, &from_shm, cl, data, len);
	/* The sending half, as if it had left relay socket r. */
	wk_peer_count(w, a, cl, 1, len);
	shm_ctr_add(w->ctr, SHM_CTR_SHORT_CIRCUIT, 1);
	wk_sc_receive(w, tl, &t, own, (struct sockaddr *)&from, data, len, now_ns);
	return true;
}

void wk_sc_accept(struct worker *w, uint32_t idx, uint64_t gen, uint16_t port,
		  const struct shm_addr *from, const uint8_t *data, size_t len)
{
	uint64_t now_ns = wk_batch_ns(w);
	struct sockaddr_storage fa;
	struct shm_relay_target t;
	struct wk_listener *tl;
	struct wk_alloc *own;

	/* The sender read the record a moment ago: since then it may have ended, been
	 * claimed again (another generation) or gone to another slot (a take-over), and its
	 * permission and channel may have changed: all read again, as the sender did. */
	if (!w->snap || wk_shm_to_addr(from, &fa) == 0 ||
	    shm_relay_target_read(w->shm, idx, port, from, now_ns, false, &t) < 0 ||
	    t.owner != w->slot || t.gen != gen ||
	    (tl = wk_sc_listener(w, t.listener_idx)) == NULL ||
	    !wk_sc_reachable(w, tl, &t, &own)) {
		shm_ctr_add(w->ctr, SHM_CTR_SHORT_CIRCUIT_STALE, 1);
		return;
	}
	wk_sc_receive(w, tl, &t, own, (struct sockaddr *)&fa, data, len, now_ns);
}

bool wk_sc_announced_from(struct worker *w, const struct wk_listener *l,
			  const struct sockaddr *from, struct sockaddr_storage *out)
{
	uint32_t cand[SHM_RELAY_WAYS];
	struct shm_addr f;
	unsigned n;

	if (!w->n_masks)
		return false;
	if (!wk_sc_own_ip(w, from))
		return wk_sib_from(w, l, from, out);
	wk_addr_to_shm(from, &f);
	n = shm_relay_find(w->shm, f.port, cand);
	for (unsigned i = 0; i < n; i++) {
		struct shm_relay_target t;
		const struct wk_listener *tl;

		if (shm_relay_target_read(w->shm, cand[i], f.port, &f, wk_batch_ns(w), false, &t) <
			    0 ||
		    t.relay.family != f.family || memcmp(t.relay.addr, f.addr, 16) != 0)
			continue;
		tl = wk_sc_listener(w, t.listener_idx);
		if (tl == NULL || tl->mask_addr.ss_family != from->sa_family)
			return false;
		memcpy(out, &tl->mask_addr, sizeof(*out));
		if (from->sa_family == AF_INET)
			((struct sockaddr_in *)out)->sin_port = htons(f.port);
		else
			((struct sockaddr_in6 *)out)->sin6_port = htons(f.port);
		return true;
	}
	return false;
}

bool wk_sc_maybe_relay(const struct worker *w, const struct sockaddr *peer)
{
	struct shm_addr a;

	if (!wk_sc_own_ip(w, peer))
		return false;
	wk_addr_to_shm(peer, &a);
	return wk_sib_is_mask(w, &a) || wk_sib_own_port(w, a.port);
}
