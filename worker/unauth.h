/* Worker glue of the limit of error responses to unauthenticated UDP requests: applies
 * limits.unauth_* from the snapshot and decides, per response, whether it may be sent
 * (the limiter itself is worker/ratelimit.h; docs/security.md says why).
 *
 * Worker process only; every function takes the worker that owns the limiter.
 */
#ifndef TG_WORKER_UNAUTH_H
#define TG_WORKER_UNAUTH_H

#include <stdbool.h>

struct worker;
struct wk_ep;
struct snap_limits;

/* Applies limits.unauth_* of the current snapshot to w's limiter (first call: draws the
 * hash key). Called on every new snapshot. */
void wk_unauth_configure(struct worker *w, const struct snap_limits *lim);

/* Before an error response to a request that did not authenticate: true when it may be
 * sent, paid by a credit of the source address in the trust table (counted in
 * SHM_CTR_UNAUTH_TRUSTED) or else by a token of the source prefix's bucket; false when
 * there is neither (counted in SHM_CTR_UNAUTH_DROPPED; the caller sends nothing).
 * Always true for stream clients (ep->c set: TCP completed a handshake, the source is
 * real, no reflection). */
bool wk_unauth_may_reply(struct worker *w, const struct wk_ep *ep);

/* After a request authenticated (its nonce, an HMAC over the client's transport address,
 * and its MESSAGE-INTEGRITY verified): the source address proved that it receives our
 * answers, so it earns one credit in the shared trust table (up to
 * limits.unauth_trust_credits; new entries counted in SHM_CTR_UNAUTH_TRUST_NEW,
 * evictions in SHM_CTR_UNAUTH_TRUST_EVICTED). Any transport: a TCP client's address is
 * just as proven. Nothing when the limit or the trust is off. */
void wk_unauth_trust(struct worker *w, const struct wk_ep *ep);

#endif
