/* Worker peer policy: the one allowlist check of a peer address and its denied counter.
 * CreatePermission asks with the IP only; ChannelBind, Send indications, ChannelData
 * and every peer datagram with IP and port; all against the current snapshot, with the
 * peer's transport (UDP datagrams, or RFC 6062 TCP connections) against the clusters'
 * protocol. Where the port is asked (ChannelBind included: a channel names its port), one
 * of this instance's masks is refused with a port in no instance's slice (wk_sib_refused),
 * and so is one of this instance's own sockets (wk_self_refused: its listeners, HTTP
 * endpoints, relay ports outside the short circuit), whatever the routes say.
 * CreatePermission names no port: such a peer gets its permission, and every packet to or
 * from it is refused and counted. */
#include "config.h"

#include "worker/relay_priv.h"
#include "worker/wk.h"

#include <errno.h>

int wk_peer_deny(struct worker *w, const struct wk_listener *l)
{
	shm_ctr_add(w->ctr, SHM_CTR_PERM_DENIED, 1);
	if (w->snap != NULL && l->snap_ok)
		shm_lctr_add(w->ctr, l->slot, SHM_LCTR_PERM_DENIED, 1);
	return -EACCES;
}

/* The port-bound refusals that no route lifts: a mask's port in no instance's slice, and
 * this instance's own sockets (self.c). */
static bool wk_peer_port_refused(struct worker *w, const struct sockaddr *peer)
{
	return wk_sib_refused(w, peer) || wk_self_refused(w, peer);
}

int wk_peer_match(struct worker *w, const struct wk_listener *l, const struct sockaddr *peer,
		  enum conf_cluster_proto proto, bool check_port, uint32_t *cl)
{
	if (w->snap != NULL && l->snap_ok &&
	    snap_peer_match(w->snap, l->snap_idx, peer, proto, check_port, cl) == 0 &&
	    !(check_port && wk_peer_port_refused(w, peer)))
		return 0;
	return -EACCES;
}

int wk_peer_allowed(struct worker *w, const struct wk_listener *l, const struct sockaddr *peer,
		    enum conf_cluster_proto proto, bool check_port, uint32_t *cl)
{
	if (wk_peer_match(w, l, peer, proto, check_port, cl) == 0)
		return 0;
	return wk_peer_deny(w, l);
}

/* A channel names a port, and every datagram on it would be checked with that port: a
 * port outside the cluster's range is refused at the bind (403), not dropped afterwards. */
int wk_peer_bind_allowed(struct worker *w, const struct wk_listener *l, const struct sockaddr *peer,
			 enum conf_cluster_proto proto, uint32_t *cl)
{
	/* A channel names its port, and every ChannelData on it would be checked with that
	 * port: one outside the cluster's range is refused at the bind (403), not dropped
	 * afterwards. */
	return wk_peer_allowed(w, l, peer, proto, true, cl);
}
