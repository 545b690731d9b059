/* Worker glue of the unauthenticated-error rate limiter: configuration from the snapshot,
 * the transport check and the drop counter (the limiter itself is worker/ratelimit.c). */
#include "config.h"

#include "worker/wk.h"
#include "worker/ratelimit.h"

#include "common/log.h"

void wk_unauth_configure(struct worker *w, const struct snap_limits *lim)
{
	struct wk_rl_conf c = {
		.rate = lim->unauth_rate,
		.burst = lim->unauth_burst,
		.prefix_v4 = lim->unauth_prefix_v4,
		.prefix_v6 = lim->unauth_prefix_v6,
	};

	if (w->rl.magic == WK_RL_MAGIC) {
		wk_rl_set(&w->rl, &c);
		return;
	}
	/* No key, no limiter: wk_rl_admit then refuses everything (fail closed), and the
	 * next snapshot tries again. */
	if (wk_rl_init(&w->rl, &c, NULL) < 0)
		log_error("worker", "no random key for the unauthenticated-error limiter");
}

/* Reflection needs a spoofable source: only datagram clients of a UDP listener have one.
 * A TCP client has completed a handshake from its address. */
static bool wk_unauth_spoofable(const struct wk_ep *ep)
{
	return ep->c == NULL && ep->l->proto == WORKER_PROTO_UDP;
}

bool wk_unauth_may_reply(struct worker *w, const struct wk_ep *ep)
{
	if (!wk_unauth_spoofable(ep) || wk_rl_admit(&w->rl, ep->addr, mono_ns()))
		return true;
	shm_ctr_add(w->ctr, SHM_CTR_UNAUTH_DROPPED, 1);
	return false;
}
