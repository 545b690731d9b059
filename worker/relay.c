/* Worker relay pipeline: every datagram between a client and a peer goes through one
 * admit (routes, permission, bandwidth), one count (per cluster, listener and record) and
 * one deliver, whichever path it takes: client -> peer through the short circuit, the
 * hand-over channel, a sibling or the relay socket; peer -> client from a relay socket or
 * the short circuit, framed in place and sent to its stream or UDP client. A path added
 * later is one more branch of a deliver, never another copy of the checks. */
#include "config.h"

#include "worker/relay_priv.h"
#include "worker/table.h"
#include "worker/transport.h"
#include "worker/wk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The user's key of an owned allocation, computed once it is needed. */
int wk_pipeline_init(struct worker *w)
{
	w->pl = calloc(1, sizeof(*w->pl));
	return w->pl ? 0 : -ENOMEM;
}

void wk_pipeline_free(struct worker *w)
{
	free(w->pl);
	w->pl = NULL;
}

static bool wk_relay_bw_admit(struct worker *w, const struct wk_party *p, enum shm_bw_dir dir,
			      size_t len, uint64_t now_ns)
{
	struct shm_bw_limits lim = w->hot.bw;
	struct shm_bw_who who;

	lim.listener_bps = p->l->sl.max_bps;
	if (!shm_bw_on(&lim))
		return true;
	who = (struct shm_bw_who){ .alloc_idx = p->idx,
				   .listener_idx = p->lslot,
				   .user_key = p->own ? wk_alloc_user_key(p->own) : p->user_key,
				   .listener_key = shm_quota_listener_key(p->lslot) };
	if (shm_bw_admit(w->shm, &who, dir, len, now_ns, &lim) == SHM_BW_PASS)
		return true;
	shm_ctr_add(w->ctr, SHM_CTR_QUOTA_BANDWIDTH, 1);
	return false;
}

/* The one admission of a datagram of len bytes between peer and party p, direction dir:
 * p's listener's routes (IP and port, a refusal counted), a permission for peer (perm; a
 * missing one counted as a refusal when deny_counted), the bandwidth limits
 * (limits.allocation_bps, user_bps, the listener's max_bps; shm/shm_bw.h; a refusal
 * counted in SHM_CTR_QUOTA_BANDWIDTH and the shared drop counts). *cl: peer's cluster. */
static bool wk_relay_admit(struct worker *w, const struct wk_party *p,
			   const struct sockaddr *peer, bool perm, bool deny_counted,
			   enum shm_bw_dir dir, size_t len, uint64_t now_ns, uint32_t *cl)
{
	if (wk_peer_allowed(w, p->l, peer, CONF_CPROTO_UDP, true, cl) < 0)
		return false;
	if (!perm) {
		if (deny_counted)
			wk_peer_deny(w, p->l);
		return false;
	}
	return wk_relay_bw_admit(w, p, dir, len, now_ns);
}

/* ---- peer -> client ---- */

void wk_relay_socket_rx(struct wk_alloc *a, struct wk_rx *rx)
{
	rx->p = wk_party_own(a);
	rx->sc = false;
	rx->relayed = false;
	rx->to = wk_alloc_dest(a, &rx->to_len);
}

/* The sender's channel with rx's allocation, 0 none. */
static uint16_t wk_relay_chan(const struct wk_rx *rx, const struct sockaddr *from,
			      uint64_t now_ns)
{
	const struct shm_chan *ch;

	if (rx->sc)
		return rx->chan;
	ch = wk_alloc_chan_by_peer(rx->p.own, from, now_ns);
	return ch ? ch->number : 0;
}

void wk_relay_in(struct worker *w, const struct wk_rx *rx, const struct sockaddr *from,
		 const uint8_t *data, uint8_t *payload, size_t len, uint64_t now_ns,
		 struct wk_rbatch *b)
{
	struct wk_alloc *own = rx->p.own;
	struct wk_tconn *conn = own ? own->conn : NULL;
	bool perm = rx->sc ? rx->perm : wk_alloc_perm_ok(own, from, now_ns);
	size_t mlen = 0;
	uint8_t *m;
	uint32_t cl;

	if (!wk_relay_admit(w, &rx->p, from, perm, rx->relayed, SHM_BW_TO_CLIENT, len, now_ns, &cl))
		return;
	wk_relay_count(w, &rx->p, SHM_BW_TO_CLIENT, cl, 1, len);
	if (data != payload)
		memcpy(payload, data, len);
	m = wk_frame_peer(payload, len, from, wk_relay_chan(rx, from, now_ns),
			  conn && !conn->dgram, &mlen);
	if (!m)
		return;
	if (conn) {
		struct wk_ep ep = { .l = own->l,
				    .c = conn,
				    .addr = (struct sockaddr *)&own->client,
				    .addr_len = own->client_len };

		wk_send_client(w, &ep, m, mlen);	/* into the stream buffer */
		return;
	}
	if (!rx->to) {
		/* A PROXY protocol client whose proxy is not known here (taken over, or
		 * another worker's): until its next datagram nothing can reach it. */
		shm_ctr_add(w->ctr, SHM_CTR_ERR_SEND, 1);
		return;
	}
	if (b)
		wk_rbatch_add(b, rx->to, rx->to_len, m, mlen);
	else /* grouped with the listener batch's other messages to that client */
		wk_ctg_send(w, own ? own->l : rx->p.l, rx->to, rx->to_len, m, mlen);
}

/* ---- client -> peer ---- */

static struct wk_relay *wk_relay_of(struct wk_alloc *a, int family)
{
	if (a->relay[0].fd >= 0 && a->relay[0].family == family)
		return &a->relay[0];
	if (a->relay[1].fd >= 0 && a->relay[1].family == family)
		return &a->relay[1];
	return NULL;
}

/* The short circuit's receiver is another worker's stream client: the datagram goes to
 * that worker. Returns 1 when the channel took it (then counted on the sending side, as a
 * relay socket's send is); 0 when it is dealt with otherwise: a full channel drops it as
 * a full relay socket would (a send error), and without a hand-over channel (harnesses)
 * it goes through the relay sockets to the receiver's internal relay address, where the
 * owner's relay socket takes it and gives it our announced address
 * (wk_sc_announced_from); -ENOENT when that address is unusable. */
static int wk_relay_hand_over(struct worker *w, const struct wk_party *p, struct wk_relay *r,
			      const struct wk_sc_hit *h, uint32_t cl, const uint8_t *data,
			      size_t len)
{
	int rc = wk_ho_send(w, &h->t, h->to.port, &h->from, data, len);
	struct shm_addr internal = h->t.relay;
	struct sockaddr_storage in;

	if (rc == 0)
		return 1;
	if (rc != -ENOTCONN) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_SEND, 1);
		return 0;
	}
	internal.port = h->to.port;
	if (wk_shm_to_addr(&internal, &in) == 0)
		return -ENOENT;
	wk_peer_send(w, p->own, r, (struct sockaddr *)&in, cl, data, len, false);
	return 0;
}

/* peer (a relay IP or mask of ours) names a live UDP allocation of this instance: the
 * sending half counted as if the datagram had left relay socket r, then the receiving
 * half as if it had arrived on the other's relay socket (or on its owner's, through the
 * hand-over channel). false: no such allocation, the datagram takes another path. */
static bool wk_relay_short_circuit(struct worker *w, const struct wk_party *p,
				   struct wk_relay *r, const struct sockaddr *peer, uint32_t cl,
				   const uint8_t *data, size_t len)
{
	struct wk_sc_hit h;
	int rc = 1;

	if (len > WK_DGRAM_MAX - 4 || wk_sc_find(w, p->own, r, peer, &h) < 0)
		return false;
	if (!h.reachable && (rc = wk_relay_hand_over(w, p, r, &h, cl, data, len)) <= 0)
		return rc == 0;
	wk_relay_count(w, p, SHM_BW_TO_PEER, cl, 1, len);
	shm_ctr_add(w->ctr, SHM_CTR_SHORT_CIRCUIT, 1);
	if (h.reachable)
		wk_sc_receive(w, &h, data, len, wk_batch_ns(w));
	return true;
}

/* The one deliver of an admitted client -> peer datagram. Every mask is among the relay
 * IPs (wk_sc_refresh), so one look-up tells whether the short circuit or a sibling may
 * apply; an ordinary peer goes straight to the relay socket. */
static void wk_relay_deliver(struct worker *w, const struct wk_party *p, struct wk_relay *r,
			     const struct sockaddr *peer, uint32_t cl, const uint8_t *data,
			     size_t len)
{
	struct sockaddr_storage sib;

	if (wk_sc_own_ip(w, peer)) {
		if (wk_relay_short_circuit(w, p, r, peer, cl, data, len))
			return;
		if (wk_sib_target(w, peer, &sib)) {
			wk_peer_send(w, p->own, r, (struct sockaddr *)&sib, cl, data, len, true);
			return;
		}
	}
	wk_peer_send(w, p->own, r, peer, cl, data, len, false);
}

void wk_relay_out(struct worker *w, struct wk_alloc *a, const struct sockaddr *peer,
		  const uint8_t *data, size_t len)
{
	struct wk_relay *r = wk_relay_of(a, peer->sa_family);
	struct wk_party p = wk_party_own(a);
	uint64_t now_ns = wk_batch_ns(w);
	uint32_t cl;

	if (!r || a->tcp ||
	    !wk_relay_admit(w, &p, peer, wk_alloc_perm_ok(a, peer, now_ns), false,
			    SHM_BW_TO_PEER, len, now_ns, &cl))
		return;
	wk_relay_deliver(w, &p, r, peer, cl, data, len);
}
