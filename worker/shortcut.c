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

#include "worker/relay_priv.h"
#include "worker/table.h"
#include "worker/transport.h"
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
	for (unsigned i = 0; i < w->pl->n_sc_ips; i++)
		if (w->pl->sc_ips[i].family == ip.family && memcmp(w->pl->sc_ips[i].addr, ip.addr, 16) == 0)
			return;
	if (w->pl->n_sc_ips < WK_SC_MAX_IPS)
		w->pl->sc_ips[w->pl->n_sc_ips++] = ip;
}

void wk_sc_refresh(struct worker *w)
{
	w->pl->n_sc_ips = 0;
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
	for (unsigned i = 0; i < w->pl->n_sc_ips; i++)
		if (w->pl->sc_ips[i].family == a.family && memcmp(w->pl->sc_ips[i].addr, a.addr, 16) == 0)
			return true;
	return false;
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

/* The receiving end of h's allocation for wk_relay_in, from its record as read: the
 * sender's permission and channel, and where a UDP client is reached from here (an owned
 * one through its own destination; another worker's through this worker's socket of the
 * same listener, unless a PROXY protocol proxy stands between: the proxy's address is
 * that worker's to know, and the client's own is not where it listens). */
static void wk_sc_rx(const struct wk_sc_hit *h, struct wk_rx *rx)
{
	const struct shm_relay_target *t = &h->t;

	rx->p = (struct wk_party){ .l = h->tl,
				   .own = h->own,
				   .idx = t->idx,
				   .lslot = h->own ? h->own->rec->listener_idx : t->listener_idx,
				   .user_key = t->user_key };
	rx->sc = true;
	rx->perm = t->perm;
	rx->chan = t->chan;
	rx->relayed = true;
	rx->to = NULL;
	rx->to_len = 0;
	if (h->own)
		rx->to = wk_alloc_dest(h->own, &rx->to_len);
	else if (!wk_pp_enabled(h->tl) && (rx->to_len = wk_shm_to_addr(&t->client, &rx->client)))
		rx->to = (struct sockaddr *)&rx->client;
}

void wk_sc_receive(struct worker *w, const struct wk_sc_hit *h, const uint8_t *data, size_t len,
		   uint64_t now_ns)
{
	struct wk_rx rx;

	wk_relay_received(w, len);
	wk_sc_rx(h, &rx);
	wk_relay_in(w, &rx, (const struct sockaddr *)&h->from_sa, data, w->pl->sc_buf + WK_HEADROOM,
		    len, now_ns, NULL);
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

int wk_sc_find(struct worker *w, struct wk_alloc *a, const struct wk_relay *r,
	       const struct sockaddr *peer, struct wk_sc_hit *h)
{
	wk_addr_to_shm(peer, &h->to);
	wk_alloc_announced(a, r, &h->from_sa);
	wk_addr_to_shm((struct sockaddr *)&h->from_sa, &h->from);
	if (wk_sc_target(w, &h->to, &h->from, wk_batch_ns(w), w->hot.bw.user_bps != 0, &h->t,
			 &h->tl) < 0)
		return -ENOENT;
	h->reachable = wk_sc_reachable(w, h->tl, &h->t, &h->own);
	return 0;
}

void wk_sc_accept(struct worker *w, uint32_t idx, uint64_t gen, uint16_t port,
		  const struct shm_addr *from, const uint8_t *data, size_t len)
{
	uint64_t now_ns = wk_batch_ns(w);
	struct wk_sc_hit h = { .from = *from };

	/* The sender read the record a moment ago: since then it may have ended, been
	 * claimed again (another generation) or gone to another slot (a take-over), and its
	 * permission and channel may have changed: all read again, as the sender did. */
	if (!w->snap || wk_shm_to_addr(from, &h.from_sa) == 0 ||
	    shm_relay_target_read(w->shm, idx, port, from, now_ns, false, &h.t) < 0 ||
	    h.t.owner != w->slot || h.t.gen != gen ||
	    (h.tl = wk_sc_listener(w, h.t.listener_idx)) == NULL ||
	    !wk_sc_reachable(w, h.tl, &h.t, &h.own)) {
		shm_ctr_add(w->ctr, SHM_CTR_SHORT_CIRCUIT_STALE, 1);
		return;
	}
	wk_sc_receive(w, &h, data, len, now_ns);
}

bool wk_sc_announced_from(struct worker *w, const struct wk_listener *l,
			  const struct sockaddr *from, struct sockaddr_storage *out)
{
	uint32_t cand[SHM_RELAY_WAYS];
	struct shm_addr f;
	unsigned n;

	if (!w->pl->n_masks)
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
