/* The kernel fast path's entries of this worker's allocations (offload/offload.h): the
 * maps are a cache of the channels in the shared records, which stay the truth.
 *
 * An allocation's channel has an entry while all of these hold (wk_off_fill): the client
 * speaks UDP (not TCP, TLS or DTLS: the kernel relays plain ChannelData over UDP), the
 * allocation asked for no DONT-FRAGMENT, no bandwidth limit applies (the programs do not
 * charge the buckets of shm/shm_bw.h: limited traffic stays in user space), the channel's
 * peer has the family of the client and a live permission, the current snapshot's routes
 * admit the peer (IP and port), the relay socket is bound to its own address, and the
 * listener socket to its own (not the wildcard: the entry's key is the address the client
 * reached). Its expiry is the earliest of the
 * channel's, the permission's and the allocation's, so a missed deletion never extends
 * any of them. wk_offload_sync() rewrites every entry of an allocation after anything
 * that can change these (ChannelBind, CreatePermission, Refresh, a timer sweep, a reload,
 * an adoption); a channel slot is un-entered (wk_offload_drop) before its contents are
 * overwritten or cleared, since the entry's key comes from them. a->off_mask says which
 * slots have entries.
 *
 * The kernel short circuit (issue #22): a channel whose peer is another live allocation of
 * this instance (wk_sc_target) gets an entry that rewrites its ChannelData straight into
 * the other allocation's ChannelData to its client, and the other allocation's channel
 * back gets the mirror entry (wk_off_sc_pair). Both need what the user-space short
 * circuit needs to frame ChannelData both ways: each side a plain UDP client on a UDP
 * listener with a non-wildcard address of the clients' family, no bandwidth limit, a
 * live channel bound to the other's announced address and a live permission for it, and
 * the routes of each side's listener admitting the other's announced address. Both
 * entries expire with the earliest of the two allocations', permissions' and channels'
 * expiries. Either owner's sync writes both (so the second ChannelBind of a pair enters
 * them, and a refresh on either side moves them) or, when they no longer qualify,
 * deletes both; the owner of an ending allocation deletes both after retiring its record,
 * and re-reads its partner after writing, so that a partner ending meanwhile leaves no
 * entry behind (the master's garbage collection checks both ends as well). */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "shm/shm_relay.h"
#include "worker/relay_priv.h"
#include "worker/table.h"
#include "worker/transport.h"
#include "worker/wk.h"

static bool wk_off_on(const struct worker *w)
{
	return w->off.c2p_fd >= 0 && w->off.p2c_fd >= 0;
}

static void wk_off_ip(const struct shm_addr *s, uint8_t out[16])
{
	memset(out, 0, 16);
	memcpy(out, s->addr, s->family == AF_INET ? 4 : 16);
}

/* Fills *out with the entry of channel c of a, or returns false when it must have none. */
static bool wk_off_fill(struct worker *w, const struct wk_alloc *a, const struct shm_chan *c,
			uint64_t now_ns, struct tgo_channel *out)
{
	const struct shm_alloc *rec = a->rec;
	const struct wk_relay *r = NULL;
	struct shm_addr client;
	struct sockaddr_storage peer;
	uint64_t exp = c->expires_ns;
	bool perm = false;
	uint32_t cl = 0;

	if (a->conn || a->dont_fragment || !a->l->snap_ok || c->number == 0 ||
	    c->expires_ns <= now_ns || shm_bw_on(&w->hot.bw) || a->l->sl.max_bps != 0)
		return false;
	wk_addr_to_shm((const struct sockaddr *)&a->client, &client);
	if (client.family != c->peer.family || rec->server.family != client.family ||
	    memcmp(rec->server.addr, (const uint8_t[16]){ 0 }, 16) == 0)
		return false;	/* a wildcard listener: the address the client reached is unknown */
	for (int i = 0; i < 2; i++)
		if (a->relay[i].fd >= 0 && a->relay[i].family == c->peer.family)
			r = &a->relay[i];
	if (r == NULL || !(r->family == a->l->relay_addr.ss_family ? a->l->relay_local
								    : a->l->relay2_local))
		return false;
	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS; i++) {
		const struct shm_perm *p = &rec->perms[i];

		if (p->family == c->peer.family && p->expires_ns > now_ns &&
		    memcmp(p->addr, c->peer.addr, 16) == 0) {
			perm = true;
			exp = p->expires_ns < exp ? p->expires_ns : exp;
		}
	}
	exp = rec->expires_ns < exp ? rec->expires_ns : exp;
	wk_shm_to_addr(&c->peer, &peer);
	/* A peer that is (or may become) one of our own relays is short-circuited in user
	 * space; a sibling's relay address is translated there to the mask (wk_sib_from),
	 * which a kernel entry keyed on the real address would not do. The kernel relays
	 * datagrams only: the peer is asked for as a UDP peer, as wk_relay_out asks. */
	if (!perm || w->snap == NULL || wk_sc_maybe_relay(w, (struct sockaddr *)&peer) ||
	    wk_sib_addr(w, (struct sockaddr *)&peer) ||
	    wk_peer_match(w, a->l, (struct sockaddr *)&peer, CONF_CPROTO_UDP, true, &cl) != 0)
		return false;
	memset(out, 0, sizeof(*out));
	out->family = c->peer.family;
	wk_off_ip(&client, out->client);
	wk_off_ip(&rec->server, out->listener);
	wk_off_ip(&c->peer, out->peer);
	{
		struct shm_addr ra;

		wk_addr_to_shm((const struct sockaddr *)&r->addr, &ra);
		wk_off_ip(&ra, out->relay);
		out->relay_port = ra.port;
	}
	out->client_port = client.port;
	out->listener_port = rec->server.port;
	out->peer_port = c->peer.port;
	out->channel = c->number;
	out->expires_ns = exp;
	out->listener_idx = a->rec->listener_idx;
	out->cluster_idx = cl;
	return out->listener_idx < TGO_MAX_LISTENERS && out->cluster_idx < TGO_MAX_CLUSTERS;
}

/* The key of slot i's entry, rebuilt from the slot (only the 5-tuples and the channel). */
static void wk_off_key(const struct wk_alloc *a, const struct shm_chan *c, struct tgo_channel *k)
{
	struct shm_addr client;

	memset(k, 0, sizeof(*k));
	wk_addr_to_shm((const struct sockaddr *)&a->client, &client);
	k->family = c->peer.family;
	wk_off_ip(&client, k->client);
	wk_off_ip(&a->rec->server, k->listener);
	wk_off_ip(&c->peer, k->peer);
	/* The record's relayed address of the peer's family: what the relay socket is bound
	 * to (wk_off_fill enters only a socket bound to its announced address, which the
	 * record holds), and all there is of a record without sockets (wk_offload_rec_drop). */
	{
		const struct shm_addr *ra = a->rec->relay.family == c->peer.family
						    ? &a->rec->relay
						    : &a->rec->relay2;

		if (ra->family == c->peer.family) {
			wk_off_ip(ra, k->relay);
			k->relay_port = ra->port;
		}
	}
	k->client_port = client.port;
	k->listener_port = a->rec->server.port;
	k->peer_port = c->peer.port;
	k->channel = c->number;
}

/* The address relay address `relay` of an allocation on listener tl is announced as: tl's
 * mask of its family with its port, else itself (wk_alloc_announced, from the record). */
static void wk_off_sc_announced(const struct wk_listener *tl, const struct shm_addr *relay,
				struct shm_addr *out)
{
	*out = *relay;
	if (tl->mask_addr.ss_family == relay->family) {
		wk_addr_to_shm((const struct sockaddr *)&tl->mask_addr, out);
		out->port = relay->port;
	}
}

static bool wk_off_sc_udp(const struct worker *w, const struct wk_listener *l,
			  const struct shm_relay_target *t)
{
	return t->transport == SHM_TRANSPORT_UDP && l->proto == WORKER_PROTO_UDP && !l->secure &&
	       l->snap_ok && l->sl.max_bps == 0 && t->perm && t->chan != 0 &&
	       l->slot < TGO_MAX_LISTENERS && t->client.family == t->server.family &&
	       memcmp(t->server.addr, (const uint8_t[16]){ 0 }, 16) != 0 && w->snap != NULL;
}

/* One direction of a pair: from s (its listener sl, cluster scl) to d. */
static void wk_off_sc_entry(const struct shm_relay_target *s, uint32_t sl, uint32_t scl,
			    const struct shm_relay_target *d, uint32_t dl, uint32_t dcl,
			    uint64_t exp, struct tgo_channel *out)
{
	memset(out, 0, sizeof(*out));
	out->family = s->client.family;
	wk_off_ip(&s->client, out->client);
	wk_off_ip(&s->server, out->listener);
	wk_off_ip(&d->server, out->relay);
	wk_off_ip(&d->client, out->peer);
	out->client_port = s->client.port;
	out->listener_port = s->server.port;
	out->relay_port = d->server.port;
	out->peer_port = d->client.port;
	out->channel = s->chan;
	out->expires_ns = exp;
	out->listener_idx = sl;
	out->cluster_idx = scl;
	out->sc_channel = d->chan;
	out->sc_listener_idx = dl;
	out->sc_cluster_idx = dcl;
}

/* The two ends of channel c of a when its peer is another allocation of this instance:
 * *ta (a, read for the other's announced address) and *tb, their listeners and the
 * record index of the other. Returns false when c's peer is none. */
static bool wk_off_sc_ends(struct worker *w, struct wk_alloc *a, const struct shm_chan *c,
			   uint64_t now_ns, struct shm_relay_target *ta, struct shm_relay_target *tb,
			   struct wk_listener **lb)
{
	const struct shm_addr *rel;
	struct sockaddr_storage peer;
	struct shm_addr from_a, to_b;

	if (c->number == 0 || c->expires_ns <= now_ns)
		return false;
	wk_shm_to_addr(&c->peer, &peer);
	if (!wk_sc_own_ip(w, (struct sockaddr *)&peer))
		return false;
	/* From the record, not the sockets: an ending allocation's are closed already. */
	rel = a->rec->relay.family == c->peer.family ? &a->rec->relay : &a->rec->relay2;
	if (rel->family != c->peer.family)
		return false;
	wk_off_sc_announced(a->l, rel, &from_a);
	if (wk_sc_target(w, &c->peer, &from_a, now_ns, false, tb, lb) < 0)
		return false;
	wk_off_sc_announced(*lb, &tb->relay, &to_b);
	/* Our own record, whose fields only this worker writes (also while it is DYING). */
	if (shm_relay_target_fill(a->rec, rel->port, &to_b, now_ns, ta) < 0)
		return false;
	ta->idx = a->rec_idx;
	return true;
}

/* Both entries of the pair of channel c of a: a -> b in *ab, b -> a in *ba. false when
 * they must not exist (*ab and *ba then hold the keys there may be, *ba's only when
 * *has_ba: b's channel back is bound to what c names, so the pair is c's). */
static bool wk_off_sc_pair(struct worker *w, struct wk_alloc *a, const struct shm_chan *c,
			   uint64_t now_ns, struct tgo_channel *ab, struct tgo_channel *ba,
			   bool *has_ba, struct shm_relay_target *tb_out)
{
	struct shm_relay_target ta, tb;
	struct wk_listener *lb;
	struct sockaddr_storage ann_a, ann_b;
	struct shm_addr s;
	uint32_t cla = 0, clb = 0;
	bool ok, mine;

	*has_ba = false;
	memset(ab, 0, sizeof(*ab));
	memset(ba, 0, sizeof(*ba));
	if (!wk_off_sc_ends(w, a, c, now_ns, &ta, &tb, &lb))
		return false;
	*tb_out = tb;
	wk_off_sc_announced(a->l, &ta.relay, &s);
	wk_shm_to_addr(&s, &ann_a);
	wk_off_sc_announced(lb, &tb.relay, &s);
	wk_shm_to_addr(&s, &ann_b);
	mine = ta.chan == c->number;	/* c is bound to b's announced address */
	ok = wk_off_sc_udp(w, a->l, &ta) && wk_off_sc_udp(w, lb, &tb) && a->conn == NULL &&
	     mine && ta.client.family == tb.client.family &&
	     !shm_bw_on(&w->hot.bw) &&
	     wk_peer_match(w, a->l, (struct sockaddr *)&ann_b, CONF_CPROTO_UDP, true, &cla) == 0 &&
	     wk_peer_match(w, lb, (struct sockaddr *)&ann_a, CONF_CPROTO_UDP, true, &clb) == 0 &&
	     cla < TGO_MAX_CLUSTERS && clb < TGO_MAX_CLUSTERS;
	{
		uint64_t exp = ta.until_ns < tb.until_ns ? ta.until_ns : tb.until_ns;

		ta.chan = c->number;
		wk_off_sc_entry(&ta, a->rec->listener_idx, cla, &tb, lb->slot, clb, exp, ab);
		if (tb.chan != 0 && mine) {
			wk_off_sc_entry(&tb, lb->slot, clb, &ta, a->rec->listener_idx, cla, exp, ba);
			*has_ba = true;
		}
	}
	return ok;
}

static void wk_off_sc_del(struct worker *w, const struct tgo_channel *ab,
			  const struct tgo_channel *ba, bool has_ba)
{
	if (ab->channel != 0)
		(void)tgo_channel_del(&w->off, ab);
	if (has_ba)
		(void)tgo_channel_del(&w->off, ba);
}

/* Deletes both entries of the short circuit of c (a's channel), whichever exists. */
static void wk_off_sc_unpair(struct worker *w, struct wk_alloc *a, const struct shm_chan *c,
			     uint64_t now_ns)
{
	struct tgo_channel ab, ba;
	struct shm_relay_target tb;
	bool has_ba;

	if (!wk_off_on(w))
		return;
	(void)wk_off_sc_pair(w, a, c, now_ns, &ab, &ba, &has_ba, &tb);
	wk_off_sc_del(w, &ab, &ba, has_ba);
}

/* Writes both entries of the pair of a's slot i; true when they are in. */
static bool wk_off_sc_set(struct worker *w, struct wk_alloc *a, unsigned i, uint64_t now_ns)
{
	const struct shm_chan *c = &a->rec->chans[i];
	struct tgo_channel ab, ba;
	struct shm_relay_target tb, again;
	bool has_ba;

	if (!wk_off_sc_pair(w, a, c, now_ns, &ab, &ba, &has_ba, &tb)) {
		wk_off_sc_del(w, &ab, &ba, has_ba);
		return false;
	}
	if (tgo_channel_set(&w->off, &ab) < 0 || tgo_channel_set(&w->off, &ba) < 0)
		goto undo;
	/* The partner may have ended between the read and the writes: its owner deletes
	 * after retiring its record, so either it saw our entries or we see it gone. */
	if (shm_relay_target_read(w->shm, tb.idx, tb.relay.port, &tb.relay, now_ns, false,
				  &again) < 0 ||
	    again.gen != tb.gen)
		goto undo;
	return true;
undo:
	wk_off_sc_del(w, &ab, &ba, true);
	return false;
}

void wk_offload_sc_forget(struct worker *w, struct wk_alloc *a)
{
	uint64_t now_ns = mono_ns();

	/* The kernel path sends to the client's address: a PROXY protocol client is reached
	 * through its proxy (wk_alloc_dest), in user space only. */
	if (!wk_off_on(w) || (!a->conn && wk_pp_enabled(a->l)))
		return;
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++)
		if (a->rec->chans[i].number != 0)
			wk_off_sc_unpair(w, a, &a->rec->chans[i], now_ns);
}

/* Deletes the entries of a's slot i (the client -> peer one only if it is still a's:
 * if_ours, tgo_channel_take_if_ours). What the kernel relayed through them goes into the
 * allocation's counters (the listing, the session record) before they go. */
static void wk_off_take(struct worker *w, struct wk_alloc *a, unsigned i, bool if_ours)
{
	struct tgo_chan_ctr c;
	struct tgo_channel k;
	int rc;

	wk_off_key(a, &a->rec->chans[i], &k);
	rc = if_ours ? tgo_channel_take_if_ours(&w->off, &k, &c)
		     : tgo_channel_take(&w->off, &k, &c);
	if (rc == 0) {
		shm_alloc_ctr_add(a->rec, SHM_ACTR_PKTS_TO_PEER, c.pkts[0]);
		shm_alloc_ctr_add(a->rec, SHM_ACTR_BYTES_TO_PEER, c.bytes[0]);
		shm_alloc_ctr_add(a->rec, SHM_ACTR_PKTS_FROM_PEER, c.pkts[1]);
		shm_alloc_ctr_add(a->rec, SHM_ACTR_BYTES_FROM_PEER, c.bytes[1]);
	}
}

void wk_offload_drop(struct worker *w, struct wk_alloc *a, unsigned i)
{
	if (i >= SHM_ALLOC_MAX_CHANS || !(a->off_mask & (1u << i)))
		return;
	a->off_mask &= ~(1u << i);
	if (wk_off_on(w))
		wk_off_take(w, a, i, false);
}

void wk_offload_drop_all(struct worker *w, struct wk_alloc *a)
{
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS && a->off_mask; i++)
		wk_offload_drop(w, a, i);
}

/* Whether allocation n binds channel number `number`. */
static bool wk_off_binds(const struct wk_alloc *n, uint16_t number)
{
	for (unsigned i = 0; n != NULL && i < SHM_ALLOC_MAX_CHANS; i++)
		if (n->rec->chans[i].number == number)
			return true;
	return false;
}

/* A view *v of record idx as its allocation would have it (no socket, no index, every
 * bound channel's slot possibly entered, by the predecessor or at the take-over), and in
 * *n the allocation of l that now serves its client's 5-tuple, if any (its client
 * allocated again: why the adoption releases it). false: nothing of it is in the kernel. */
static bool wk_off_rec_view(struct worker *w, struct wk_listener *l, uint32_t idx,
			    struct shm_alloc *rec, struct wk_alloc *v, struct wk_alloc **n)
{
	struct sockaddr_storage client;
	socklen_t len;

	if (!wk_off_on(w) || rec->client_transport != SHM_TRANSPORT_UDP)
		return false;
	len = wk_shm_to_addr(&rec->client, &client);
	if (len == 0)
		return false;
	*n = l != NULL ? wk_alloc_find(w, l, (struct sockaddr *)&client) : NULL;
	memset(v, 0, sizeof(*v));
	v->magic = WK_ALLOC_MAGIC;
	v->w = w;
	v->l = l;
	v->rec = rec;
	v->rec_idx = idx;
	memcpy(&v->client, &client, len);
	v->client_len = len;
	v->relay[0].fd = v->relay[1].fd = -1;
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++)
		if (rec->chans[i].number != 0)
			v->off_mask |= 1u << i;
	return true;
}

/* Where n (the client allocated again on the same 5-tuple) binds channel X too, the
 * client -> peer key of X is the same for both: it is n's entry only if n wrote it (it
 * may not have: a channel it cannot offload, full maps), so it goes only if its value is
 * still this record's (tgo_channel_take_if_ours); left behind, it would send n's
 * ChannelData on X to our peer from our released relay port. Our peer -> client entry,
 * keyed on our relay port (still booked by this record), is ours. */
void wk_offload_rec_drop(struct worker *w, struct wk_listener *l, uint32_t idx,
			 struct shm_alloc *rec)
{
	struct wk_alloc v, *n;

	if (!wk_off_rec_view(w, l, idx, rec, &v, &n))
		return;
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++)
		if (v.off_mask & (1u << i))
			wk_off_take(w, &v, i, wk_off_binds(n, rec->chans[i].number));
}

void wk_offload_rec_forget(struct worker *w, struct wk_listener *l, uint32_t idx,
			   struct shm_alloc *rec)
{
	struct wk_alloc v, *n;
	uint64_t now_ns = mono_ns();

	/* Its listener's mask names its announced address: without it (removed), the
	 * master's garbage collection removes them. As wk_offload_sc_forget: not for a PROXY
	 * protocol listener's client. */
	if (l == NULL || wk_pp_enabled(l) || !wk_off_rec_view(w, l, idx, rec, &v, &n))
		return;
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++) {
		const struct shm_chan *c = &rec->chans[i];
		struct tgo_channel ab, ba;
		struct tgo_chan_ctr cc;
		struct shm_relay_target tb;
		bool has_ba;

		if (c->number == 0)
			continue;
		(void)wk_off_sc_pair(w, &v, c, now_ns, &ab, &ba, &has_ba, &tb);
		/* n's key too: ours only if its value still is (wk_offload_rec_drop). */
		if (wk_off_binds(n, c->number) && ab.channel != 0) {
			(void)tgo_channel_take_if_ours(&w->off, &ab, &cc);
			ab.channel = 0;
		}
		wk_off_sc_del(w, &ab, &ba, has_ba);
	}
}

void wk_offload_sync(struct worker *w, struct wk_alloc *a)
{
	uint64_t now_ns;

	if (!wk_off_on(w))
		return;
	now_ns = mono_ns();
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++) {
		struct tgo_channel ch;
		int rc;

		if (!wk_off_fill(w, a, &a->rec->chans[i], now_ns, &ch)) {
			if (wk_off_sc_set(w, a, i, now_ns)) {
				a->off_mask |= 1u << i;
				continue;
			}
			wk_offload_drop(w, a, i);
			continue;
		}
		rc = tgo_channel_set(&w->off, &ch);
		if (rc == 0) {
			a->off_mask |= 1u << i;
		} else {
			/* Full maps: this channel stays in user space. */
			log_debug("turn", "allocation %u channel %#x not offloaded: %s", a->rec_idx,
				  ch.channel, strerror(-rc));
			wk_offload_drop(w, a, i);
		}
	}
}

void wk_offload_map(struct worker *w, unsigned which, int fd)
{
	int *slot = which == 0 ? &w->off.c2p_fd : which == 1 ? &w->off.p2c_fd : NULL;
	struct wk_alloc *a;

	/* The new maps hold nothing of ours (or the fast path is gone). */
	LIST_FOREACH(a, &w->allocs, link)
		a->off_mask = 0;
	if (slot == NULL) {
		if (w->off.c2p_fd >= 0)
			close(w->off.c2p_fd);
		if (w->off.p2c_fd >= 0)
			close(w->off.p2c_fd);
		w->off.c2p_fd = w->off.p2c_fd = -1;
		if (fd >= 0)
			close(fd);
		log_info("worker", "offload off");
		return;
	}
	if (*slot >= 0)
		close(*slot);
	*slot = fd;
	if (which == 1)
		wk_offload_sync_all(w);
}

void wk_offload_sync_all(struct worker *w)
{
	struct wk_alloc *a;

	if (!wk_off_on(w))
		return;
	LIST_FOREACH(a, &w->allocs, link)
		wk_offload_sync(w, a);
}
