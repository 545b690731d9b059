/* Worker output toward clients, whatever the transport: one entry that sends a message to
 * the client behind an endpoint, and the one counter of what reached it. */
#include "config.h"

#include "worker/stream.h"
#include "worker/transport.h"
#include "worker/wk.h"

void wk_send_client(struct worker *w, const struct wk_ep *ep, const uint8_t *buf, size_t len)
{
	if (ep->c)
		wk_tconn_send(w, ep->c, buf, len);
	else
		wk_udp_send(w, ep->l, ep->via ? ep->via : ep->addr,
			    ep->via ? ep->via_len : ep->addr_len, buf, len);
}

void wk_client_sent(struct worker *w, const struct wk_listener *l, unsigned n, size_t bytes)
{
	shm_ctr_add(w->ctr, SHM_CTR_CLIENT_PKTS_OUT, n);
	shm_ctr_add(w->ctr, SHM_CTR_CLIENT_BYTES_OUT, bytes);
	/* Responses count at the listener too: STUNner counts every datagram it sends. */
	if (l->snap_ok) {
		shm_lctr_add(w->ctr, l->slot, SHM_LCTR_CLIENT_PKTS_OUT, n);
		shm_lctr_add(w->ctr, l->slot, SHM_LCTR_CLIENT_BYTES_OUT, bytes);
	}
}
