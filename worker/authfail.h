/* Worker glue of the failed-authentication budgets (limits.auth_fail_prefix and
 * limits.auth_fail_user): password guessing is throttled per source prefix and per
 * username across workers, through the shared table of shm/shm_authfail.h.
 *
 * Only the credentials of a new allocation (an Allocate) are guessed: a request on an
 * existing allocation is checked against that allocation's own key. A ConnectionBind for
 * another worker's connection is charged too, for any failure (worker/auth.c,
 * wk_bind_charged), its keys made with the listener's realm. Each budget is N
 * failures per minute, forgiven one every 60/N seconds (a GCRA cell).
 *
 * The rules (docs/security.md "Password guessing" says why):
 * - Only a request under a nonce of ours gets here (worker/auth.c answers a nonce that is
 *   not ours 438 before anything below): the nonce is an HMAC over the source address, so
 *   a spoofed UDP source can neither be charged nor refused.
 * - A failure (MESSAGE-INTEGRITY that does not verify, for a known or unknown user) is
 *   charged to the source (AF_SRC_V4/V6: an address, an IPv6 /64) and to the username.
 * - A source over its budget: every Allocate with MESSAGE-INTEGRITY from it is dropped
 *   before the credentials' HMAC, the right password too (else a client that sends guesses
 *   without waiting for answers would still learn the right one from the one answer it
 *   gets). Each dropped attempt keeps the prefix over budget for one interval more: a
 *   source that keeps trying never gets a guess; one that waits an interval gets one.
 * - A username over its budget: only prefixes that failed within the last minute are
 *   refused before the credentials' HMAC; a prefix without failures is verified as usual,
 *   so the right password from anywhere else works at once. A failure for that username
 *   is not answered. Someone else's guessing can slow a user only when it comes from the
 *   user's own prefix.
 * Dropped means no answer on any transport: the worker holds nothing and never blocks,
 * and a client waits out its own timeout.
 *
 * Worker process only.
 */
#ifndef TG_WORKER_AUTHFAIL_H
#define TG_WORKER_AUTHFAIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct worker;
struct wk_ep;
struct snap_limits;

/* The keys of one attempt, computed once (wk_authfail_keys). */
struct wk_authfail {
	uint64_t prefix;		/* keyed hash of the source prefix */
	uint64_t user;			/* keyed hash of realm and username */
};

/* Applies limits.auth_fail_* of a new snapshot. */
void wk_authfail_configure(struct worker *w, const struct snap_limits *lim);

/* Fills af for an Allocate from ep naming user in realm. */
void wk_authfail_keys(struct worker *w, const struct wk_ep *ep, const char *realm,
		      size_t realm_len, const char *user, size_t user_len, struct wk_authfail *af);

/* Before the credentials are verified: true when the attempt is to be dropped unverified
 * (counted in SHM_CTR_AUTH_THROTTLED_*). */
bool wk_authfail_refused(struct worker *w, const struct wk_authfail *af);

/* After the credentials did not verify: charges the failure; true when its answer is to be
 * dropped (a budget is over; counted as above, and logged once when it trips). */
bool wk_authfail_failed(struct worker *w, const struct wk_ep *ep, const struct wk_authfail *af,
			const char *user, size_t user_len);

#endif
