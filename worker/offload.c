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
 * slots have entries. */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
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
	 * which a kernel entry keyed on the real address would not do. */
	if (!perm || w->snap == NULL || wk_sc_maybe_relay(w, (struct sockaddr *)&peer) ||
	    wk_sib_addr(w, (struct sockaddr *)&peer) ||
	    snap_peer_match(w->snap, a->l->snap_idx, (struct sockaddr *)&peer, true, &cl) != 0)
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
	out->listener_idx = a->l->snap_idx;
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
	for (int i = 0; i < 2; i++)
		if (a->relay[i].fd >= 0 && a->relay[i].family == c->peer.family) {
			struct shm_addr ra;

			wk_addr_to_shm((const struct sockaddr *)&a->relay[i].addr, &ra);
			wk_off_ip(&ra, k->relay);
			k->relay_port = ra.port;
		}
	k->client_port = client.port;
	k->listener_port = a->rec->server.port;
	k->peer_port = c->peer.port;
	k->channel = c->number;
}

void wk_offload_drop(struct worker *w, struct wk_alloc *a, unsigned i)
{
	struct tgo_channel k;

	if (i >= SHM_ALLOC_MAX_CHANS || !(a->off_mask & (1u << i)))
		return;
	a->off_mask &= ~(1u << i);
	if (!wk_off_on(w))
		return;
	wk_off_key(a, &a->rec->chans[i], &k);
	(void)tgo_channel_del(&w->off, &k);
}

void wk_offload_drop_all(struct worker *w, struct wk_alloc *a)
{
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS && a->off_mask; i++)
		wk_offload_drop(w, a, i);
}

void wk_offload_sync(struct worker *w, struct wk_alloc *a)
{
	uint64_t now_ns = mono_ns();

	if (!wk_off_on(w))
		return;
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++) {
		struct tgo_channel ch;
		int rc;

		if (!wk_off_fill(w, a, &a->rec->chans[i], now_ns, &ch)) {
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

	/* The new maps hold nothing of ours (or the fast path is gone). */
	for (struct wk_alloc *a = w->allocs; a; a = a->next)
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
	if (!wk_off_on(w))
		return;
	for (struct wk_alloc *a = w->allocs; a; a = a->next)
		wk_offload_sync(w, a);
}
