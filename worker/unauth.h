/* Worker glue of the limit of answers to unauthenticated UDP requests (error responses
 * and Binding successes): applies limits.unauth_* from the snapshot, decides, per answer,
 * whether it may be sent and how long its reason phrase may be (the limiter itself is
 * worker/ratelimit.h; docs/security.md says why).
 *
 * Worker process only; every function takes the worker that owns the limiter.
 */
#ifndef TG_WORKER_UNAUTH_H
#define TG_WORKER_UNAUTH_H

#include <stdbool.h>
#include <stddef.h>

struct worker;
struct wk_ep;
struct snap_limits;
struct stun_msg;

/* Applies limits.unauth_* of the current snapshot to w's limiter (first call: draws the
 * hash key). Called on every new snapshot. */
void wk_unauth_configure(struct worker *w, const struct snap_limits *lim);

/* Before an answer to a request that did not authenticate (an error response, or a
 * Binding success: a STUN Binding never authenticates): true when it may be
 * sent, paid by a credit of the source address in the trust table (counted in
 * SHM_CTR_UNAUTH_TRUSTED) or else by a token of the source prefix's bucket; false when
 * there is neither (counted in SHM_CTR_UNAUTH_DROPPED; the caller sends nothing).
 * Always true for stream clients (ep->c set: TCP completed a handshake, the source is
 * real, no reflection). */
bool wk_unauth_may_reply(struct worker *w, const struct wk_ep *ep);

/* The reason phrase of an error response to req that did not authenticate, given
 * bare_len, the response's length with an empty phrase: to a spoofable source (a datagram
 * client of a UDP listener) the answer must not be larger than the request because of its
 * phrase, so this is reason (NULL: the code's standard phrase, stun_error_reason) when
 * the answer then stays within req->len bytes, else the standard phrase when that does,
 * else "" (RFC 8489 14.8: the phrase is for diagnostics only; the code and the attributes
 * the code needs, REALM and NONCE of a 401, stay). Stream clients get reason. Never NULL;
 * the result is reason or a static string. */
const char *wk_unauth_reason(const struct wk_ep *ep, const struct stun_msg *req, size_t bare_len,
			     int code, const char *reason);

/* After a request authenticated (its nonce, an HMAC over the client's transport address,
 * and its MESSAGE-INTEGRITY verified): the source address proved that it receives our
 * answers, so it earns one credit in the shared trust table (up to
 * limits.unauth_trust_credits; new entries counted in SHM_CTR_UNAUTH_TRUST_NEW,
 * evictions in SHM_CTR_UNAUTH_TRUST_EVICTED). Any transport: a TCP client's address is
 * just as proven. Nothing when the limit or the trust is off. */
void wk_unauth_trust(struct worker *w, const struct wk_ep *ep);

#endif
