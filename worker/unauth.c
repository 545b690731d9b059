/* Worker glue of the limit of answers to unauthenticated UDP requests: the
 * configuration from the snapshot, the trust table's credits (shm/shm_trust.h), the
 * per-prefix buckets (worker/ratelimit.c) and their counters. */
#include "config.h"

#include "worker/unauth.h"
#include "worker/wk.h"

#include <string.h>

#include "common/log.h"
#include "shm/shm_trust.h"
#include "stun/stun.h"

#define NS_PER_S 1000000000ull

void wk_unauth_configure(struct worker *w, const struct snap_limits *lim)
{
	struct wk_rl_conf c = {
		.rate = lim->unauth_rate,
		.burst = lim->unauth_burst,
		.prefix_v4 = lim->unauth_prefix_v4,
		.prefix_v6 = lim->unauth_prefix_v6,
		.trust_window = lim->unauth_trust_window,
		.trust_credits = lim->unauth_trust_credits,
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

/* Trust is kept while the limit is on and has credits to give. */
static bool wk_unauth_trust_on(const struct worker *w)
{
	return w->rl.magic == WK_RL_MAGIC && w->rl.conf.rate != 0 && w->rl.conf.trust_credits;
}

/* The trust table's hash of the whole source address (one entry per address, not per
 * prefix: a credit earned by one host is spent only on answers to that host). */
static uint64_t wk_unauth_hash(const struct worker *w, const struct sockaddr *src)
{
	uint8_t msg[WK_RL_MSG_MAX];
	size_t len = wk_rl_prefix_msg(src, 32, 128, msg);

	return wk_siphash24(shm_trust_hkey(w->shm), msg, len);
}

static uint32_t wk_unauth_now_s(void)
{
	return (uint32_t)(mono_ns() / NS_PER_S);
}

void wk_unauth_trust(struct worker *w, const struct wk_ep *ep)
{
	int rc;

	if (!wk_unauth_trust_on(w))
		return;
	rc = shm_trust_earn(w->shm, wk_unauth_hash(w, ep->addr), wk_unauth_now_s(),
			    w->rl.conf.trust_window, w->rl.conf.trust_credits);
	if (rc == SHM_TRUST_NEW || rc == SHM_TRUST_EVICTED)
		shm_ctr_add(w->ctr, SHM_CTR_UNAUTH_TRUST_NEW, 1);
	if (rc == SHM_TRUST_EVICTED)
		shm_ctr_add(w->ctr, SHM_CTR_UNAUTH_TRUST_EVICTED, 1);
}

/* The address's own credits first: a trusted crowd then leaves its prefix's bucket to
 * the strangers of that prefix. */
bool wk_unauth_may_reply(struct worker *w, const struct wk_ep *ep)
{
	if (!wk_unauth_spoofable(ep))
		return true;
	if (wk_unauth_trust_on(w) && shm_trust_spend(w->shm, wk_unauth_hash(w, ep->addr),
						     wk_unauth_now_s(), w->rl.conf.trust_window)) {
		shm_ctr_add(w->ctr, SHM_CTR_UNAUTH_TRUSTED, 1);
		return true;
	}
	if (wk_rl_admit(&w->rl, ep->addr, mono_ns()))
		return true;
	shm_ctr_add(w->ctr, SHM_CTR_UNAUTH_DROPPED, 1);
	return false;
}

static size_t wk_unauth_pad4(size_t n)
{
	return (n + 3) & ~(size_t)3;
}

const char *wk_unauth_reason(const struct wk_ep *ep, const struct stun_msg *req, size_t bare_len,
			     int code, const char *reason)
{
	const char *std = stun_error_reason(code);

	if (reason == NULL)
		reason = std;
	if (!wk_unauth_spoofable(ep))
		return reason;
	if (bare_len + wk_unauth_pad4(strlen(reason)) <= req->len)
		return reason;
	if (bare_len + wk_unauth_pad4(strlen(std)) <= req->len)
		return std;
	return "";
}
