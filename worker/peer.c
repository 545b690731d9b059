/* Worker peer policy: the one allowlist check of a peer address and its denied counter.
 * CreatePermission and ChannelBind ask with the IP only, Send indications, ChannelData
 * and every peer datagram with IP and port; all against the current snapshot. */
#include "config.h"

#include "worker/wk.h"

#include <errno.h>

int wk_peer_allowed(struct worker *w, const struct wk_listener *l, const struct sockaddr *peer,
		    bool check_port, uint32_t *cl)
{
	bool listed = w->snap != NULL && l->snap_ok;

	if (listed && snap_peer_match(w->snap, l->snap_idx, peer, check_port, cl) == 0)
		return 0;
	shm_ctr_add(w->ctr, SHM_CTR_PERM_DENIED, 1);
	if (listed)
		shm_lctr_add(w->ctr, l->snap_idx, SHM_LCTR_PERM_DENIED, 1);
	return -EACCES;
}
