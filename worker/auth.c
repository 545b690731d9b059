/* Worker authentication: long-term credentials (static users, TURN REST), stateless
 * nonces, MESSAGE-INTEGRITY(-SHA256) and PASSWORD-ALGORITHMS (RFC 8489 9.2).
 *
 * Nothing is stored for a client before its integrity check succeeds: the nonce is
 * stateless (an HMAC over time and the client address with the snapshot's key) and every
 * failure is answered from the request alone. Every answer here goes to a request that
 * has not authenticated, so each is paid for first (worker/unauth.h: a credit of the
 * source address, else a token of its prefix): over UDP the source may be spoofed, and
 * these answers are larger than the request. A request that authenticates earns its
 * source address a credit: the nonce it carries proves the address. */
#include "config.h"

#include "worker/authfail.h"
#include "worker/unauth.h"
#include "worker/turn.h"
#include "worker/wk.h"

#include <errno.h>
#include <string.h>

#include <openssl/crypto.h>

#include "common/log.h"
#include "shm/shm_quota.h"
#include "shm/shm_revoke.h"
#include "shm/shm_trust.h"
#include "stun/stun_auth.h"

static const uint16_t wk_pw_algs[] = { STUN_PWALG_MD5, STUN_PWALG_SHA256 };

static void wk_auth_bind(const struct wk_ep *ep, struct shm_addr *bind)
{
	wk_addr_to_shm(ep->addr, bind);
}

static int wk_challenge_build(struct worker *w, const struct stun_msg *req, const char *realm,
			      const char *nonce, int code, const char *reason, size_t *len)
{
	struct stun_builder b;

	stun_build_init_response(&b, w->txbuf, sizeof(w->txbuf), req, STUN_ERROR);
	stun_build_error_code(&b, code, reason);
	stun_build_string(&b, STUN_ATTR_REALM, realm);
	stun_build_string(&b, STUN_ATTR_NONCE, nonce);
	stun_build_password_algorithms(&b, wk_pw_algs, 2);
	if (stun_msg_has(req, STUN_ATTR_FINGERPRINT))
		stun_build_fingerprint(&b);
	return stun_build_finish(&b, len);
}

/* Sends 401/438 (or 400) with REALM, a fresh NONCE and PASSWORD-ALGORITHMS; the reason
 * phrase only as far as wk_unauth_reason allows (built once without it to learn the
 * rest's length). */
static void wk_auth_challenge(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req,
			      const char *realm_s, size_t realm_len, int code, const char *reason)
{
	char nonce[STUN_NONCE_MAX_LEN + 1];
	char realm[STUN_MAX_REALM_LEN + 1];
	struct shm_addr bind;
	size_t len;

	if (!wk_unauth_may_reply(w, ep))
		return;		/* before the nonce HMAC: a flood costs no crypto either */
	wk_auth_bind(ep, &bind);
	snprintf(realm, sizeof(realm), "%.*s", (int)realm_len, realm_s);
	if (stun_nonce_make(snap_nonce_key(w->snap), SNAP_NONCE_KEY_LEN, (uint64_t)wk_unix_now(),
			    STUN_NONCE_FEAT_PASSWORD_ALGORITHMS, &bind, sizeof(bind), nonce,
			    sizeof(nonce), NULL) < 0)
		return;
	if (wk_challenge_build(w, req, realm, nonce, code, "", &len) < 0)
		return;
	reason = wk_unauth_reason(ep, req, len, code, reason);
	if (reason[0] != '\0' && wk_challenge_build(w, req, realm, nonce, code, reason, &len) < 0)
		return;
	wk_send_client(w, ep, w->txbuf, len);
}

/* An error without a challenge (400, 441), with the code's standard reason phrase (as
 * far as wk_unauth_reason allows), through the limiter like every unauthenticated answer. */
static void wk_auth_error(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req,
			  int code)
{
	wk_reply_error(w, ep, req, code, NULL, NULL);
}

/* RFC 8489 9.2.4/9.2.5: with a nonce carrying the PASSWORD-ALGORITHMS feature the
 * request repeats our list unchanged and names one of it; without both attributes MD5
 * is meant. Returns 0 and *alg, or -EBADMSG (answer 400). */
static int wk_auth_pw_alg(const struct stun_msg *req, uint32_t features, uint16_t *alg)
{
	bool has_list = stun_msg_has(req, STUN_ATTR_PASSWORD_ALGORITHMS);
	bool has_one = stun_msg_has(req, STUN_ATTR_PASSWORD_ALGORITHM);
	uint16_t list[8];
	size_t n = 0;

	*alg = STUN_PWALG_MD5;
	if (!has_list && !has_one)
		return 0;
	if (!(features & STUN_NONCE_FEAT_PASSWORD_ALGORITHMS) || has_list != has_one)
		return -EBADMSG;
	if (stun_msg_get_password_algorithms(req, list, 8, &n) < 0 || n != 2 ||
	    list[0] != wk_pw_algs[0] || list[1] != wk_pw_algs[1])
		return -EBADMSG;
	if (stun_msg_get_password_algorithm(req, alg) < 0 ||
	    (*alg != STUN_PWALG_MD5 && *alg != STUN_PWALG_SHA256))
		return -EBADMSG;
	return 0;
}

static int wk_auth_verify(const struct stun_msg *req, const uint8_t *key, size_t key_len)
{
	if (stun_msg_has(req, STUN_ATTR_MESSAGE_INTEGRITY_SHA256))
		return stun_msg_check_integrity_sha256(req, key, key_len);
	return stun_msg_check_integrity(req, key, key_len);
}

/* Finds the key for a new allocation's credentials and verifies the request with it. */
static int wk_auth_lookup(struct worker *w, uint32_t auth_idx, const struct snap_auth *au,
			  const struct stun_msg *req, uint16_t pwalg, struct wk_cred *cred,
			  enum shm_ctr *why)
{
	enum snap_key_alg salg = pwalg == STUN_PWALG_SHA256 ? SNAP_KEY_SHA256 : SNAP_KEY_MD5;
	const uint8_t *key;
	size_t klen;

	if (au->type == CONF_AUTH_STATIC) {
		*why = SHM_CTR_AUTH_FAIL_UNKNOWN_USER;
		if (snap_auth_user_key(w->snap, auth_idx, cred->user, cred->user_len, salg, &key,
				       &klen) < 0 ||
		    klen > sizeof(cred->key))
			return -EACCES;
		*why = SHM_CTR_AUTH_FAIL_BAD_MAC;
		if (wk_auth_verify(req, key, klen) < 0)
			return -EACCES;
		memcpy(cred->key, key, klen);
		cred->key_len = klen;
		return 0;
	}
	{
		struct snap_secret sec[SNAP_MAX_SECRETS];
		int64_t now = wk_unix_now();
		size_t n = snap_auth_secrets(w->snap, auth_idx, now, sec);
		uint64_t expiry;

		*why = SHM_CTR_AUTH_FAIL_UNKNOWN_USER;
		if (stun_rest_expiry(cred->user, cred->user_len, &expiry) < 0)
			return -EACCES;
		*why = SHM_CTR_AUTH_FAIL_EXPIRED;
		if ((int64_t)expiry < now)
			return -EACCES;
		*why = SHM_CTR_AUTH_FAIL_BAD_MAC;
		for (size_t i = 0; i < n; i++) {
			char pw[STUN_REST_PASSWORD_LEN + 1];
			int rc = stun_rest_password(sec[i].secret, sec[i].len, cred->user,
						    cred->user_len, pw, sizeof(pw));

			if (rc == 0)
				rc = stun_auth_key(pwalg, cred->user, cred->user_len, au->realm,
						   au->realm_len, pw, strlen(pw), cred->key,
						   &cred->key_len);
			explicit_bzero(pw, sizeof(pw));
			if (rc == 0 && wk_auth_verify(req, cred->key, cred->key_len) == 0) {
				cred->cred_expiry = (int64_t)expiry;
				return 0;
			}
		}
		explicit_bzero(cred->key, sizeof(cred->key));
		return -EACCES;
	}
}

/* The existing allocation's username and stored key decide (RFC 8656 7: requests on an
 * allocation use its credentials), so a rotated secret does not break refreshes. */
static int wk_auth_existing(struct worker *w, const struct shm_alloc *rec,
			    const struct snap_auth *au, const struct stun_msg *req,
			    struct wk_cred *cred, enum shm_ctr *why, int *code)
{
	*code = 401;
	if (rec->user_len != cred->user_len ||
	    CRYPTO_memcmp(rec->username, cred->user, cred->user_len) != 0) {
		*code = 441;
		*why = SHM_CTR_AUTH_FAIL_UNKNOWN_USER;
		return -EACCES;
	}
	*why = SHM_CTR_AUTH_FAIL_BAD_MAC;
	if (wk_auth_verify(req, rec->key, rec->key_len) < 0)
		return -EACCES;
	*why = SHM_CTR_AUTH_FAIL_EXPIRED;
	if (au->strict_expiry && rec->cred_expiry && rec->cred_expiry < wk_unix_now())
		return -EACCES;
	memcpy(cred->key, rec->key, rec->key_len);
	cred->key_len = rec->key_len;
	cred->key_alg = rec->key_alg;
	cred->cred_expiry = rec->cred_expiry;
	return 0;
}

/* The realm a request must name: an allocation keeps the realm its key was made with,
 * so a reload that changes the realm does not break its refreshes. */
struct wk_realm {
	const char *s;
	size_t len;
};

/* Whether nonce is ours, fresh and bound to ep's address (*features: what it carries). */
static bool wk_auth_nonce_fresh(struct worker *w, const struct wk_ep *ep, const char *nonce,
				size_t nonce_len, uint32_t *features)
{
	struct shm_addr bind;

	wk_auth_bind(ep, &bind);
	return stun_nonce_check(snap_nonce_key(w->snap), SNAP_NONCE_KEY_LEN, nonce, nonce_len,
				(uint64_t)wk_unix_now(), w->hot.nonce_lifetime, &bind, sizeof(bind),
				features) == 0;
}

/* RFC 8489 9.2.4: the nonce is checked before the credentials. One that is not ours
 * (forged, another address's, another master's key) or ours but aged gets 438 with a fresh
 * nonce, whatever else the request says: the username is not looked up, the MAC not
 * verified, no failed-auth budget consulted or charged. Over UDP such a request may carry
 * a spoofed source: nothing it sends may count against that address (else 12 datagrams
 * lock any address out), and with no credential checked its answer teaches a guesser
 * nothing. Returns 0 when the nonce is ours and fresh, with the features it carries.
 * foreign: a ConnectionBind about to move to another worker (wk_auth_check_bind), whose
 * nonce may be one we gave its control connection, another address (RFC 6062 clients
 * reuse it; only the owner knows that address): accepted unverified, with the features
 * all our nonces carry. The credentials decide, and a failure is charged (a stream's
 * source is not spoofed). */
static int wk_auth_nonce(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req,
			 const struct wk_realm *want, const char *nonce, size_t nonce_len,
			 bool foreign, uint32_t *features)
{
	if (wk_auth_nonce_fresh(w, ep, nonce, nonce_len, features))
		return 0;
	if (foreign) {
		*features = STUN_NONCE_FEAT_PASSWORD_ALGORITHMS;
		return 0;
	}
	shm_ctr_add(w->ctr, SHM_CTR_AUTH_FAIL_STALE_NONCE, 1);
	wk_auth_challenge(w, ep, req, want->s, want->len, 438, NULL);
	return -1;
}

/* A foreign ConnectionBind (wk_auth_check_bind) that got as far as its record lookup and
 * does not authenticate, whatever the reason (no record and an expired REST username, a
 * wrong REALM, a bad PASSWORD-ALGORITHM, a bad MAC, a revoked user): charged to the
 * failed-auth budgets (af), so that the lookups one source causes are bounded by its budget
 * and its answers do not tell whether the user has an allocation there. True when the
 * answer is to be dropped (a budget is over). */
static bool wk_bind_charged(struct worker *w, const struct wk_ep *ep, const struct wk_authfail *af,
			    bool foreign, const struct wk_cred *cred)
{
	return foreign && wk_authfail_failed(w, ep, af, cred->user, cred->user_len);
}

/* Steps that need no credential: integrity present, USERNAME/REALM/NONCE well formed,
 * nonce ours and fresh, realm right, PASSWORD-ALGORITHM(S) consistent. Returns 0 with
 * cred->user and *pwalg set, or -1 after answering (or dropping). With af (a new
 * allocation's credentials, a foreign ConnectionBind), a source or username over its
 * failed-auth budget (keyed with realm kr: the listener's) is dropped once the nonce is
 * known to be ours, before the credentials' HMAC (worker/authfail.h): every request
 * charged or refused there carries our nonce, an HMAC over its source address, so a
 * spoofed UDP source never reaches the failure table. */
static int wk_auth_precheck(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req,
			    const struct wk_realm *want, const struct wk_realm *kr,
			    struct wk_cred *cred, uint16_t *pwalg, struct wk_authfail *af,
			    bool foreign)
{
	const char *nonce, *realm;
	size_t nonce_len, realm_len;
	uint32_t features = 0;

	if (!stun_msg_has(req, STUN_ATTR_MESSAGE_INTEGRITY) &&
	    !stun_msg_has(req, STUN_ATTR_MESSAGE_INTEGRITY_SHA256)) {
		shm_ctr_add(w->ctr, SHM_CTR_AUTH_FAIL_MISSING, 1);
		wk_auth_challenge(w, ep, req, want->s, want->len, 401, NULL);
		return -1;
	}
	if (stun_msg_get_string(req, STUN_ATTR_NONCE, &nonce, &nonce_len) < 0 ||
	    stun_msg_get_string(req, STUN_ATTR_REALM, &realm, &realm_len) < 0 ||
	    stun_msg_copy_string(req, STUN_ATTR_USERNAME, cred->user, sizeof(cred->user)) < 0) {
		wk_auth_error(w, ep, req, 400);
		return -1;
	}
	cred->user_len = strlen(cred->user);
	if (wk_auth_nonce(w, ep, req, want, nonce, nonce_len, foreign, &features) < 0)
		return -1;
	if (af) {
		wk_authfail_keys(w, ep, kr->s, kr->len, cred->user, cred->user_len, af);
		if (wk_authfail_refused(w, af))
			return -1;
	}
	if (realm_len != want->len || memcmp(realm, want->s, realm_len) != 0) {
		shm_ctr_add(w->ctr, SHM_CTR_AUTH_FAIL_WRONG_REALM, 1);
		if (!wk_bind_charged(w, ep, af, foreign, cred))
			wk_auth_challenge(w, ep, req, want->s, want->len, 401, NULL);
		return -1;
	}
	if (wk_auth_pw_alg(req, features, pwalg) < 0) {
		if (!wk_bind_charged(w, ep, af, foreign, cred))
			wk_auth_error(w, ep, req, 400);
		return -1;
	}
	return 0;
}

/* rec: the allocation whose stored key decides (its owner's record, or a consistent copy
 * of another worker's: wk_bind_record), or NULL for a new allocation's credentials (the
 * listener's). The failed-auth budgets apply to new allocations and to every foreign
 * ConnectionBind (any TCP connection may send one, naming any user). */
static enum wk_auth_result wk_auth_run(struct worker *w, const struct wk_ep *ep,
				       const struct stun_msg *req, const struct shm_alloc *rec,
				       bool foreign, struct wk_cred *cred)
{
	uint32_t auth_idx = ep->l->sl.auth_idx;
	enum shm_ctr why = SHM_CTR_AUTH_FAIL_MISSING;
	struct snap_auth au;
	struct wk_realm want, kr;
	uint16_t pwalg;
	struct wk_authfail af;
	bool budget = !rec || foreign;
	int rc, code = 401;

	memset(cred, 0, sizeof(*cred));
	if (snap_auth_get(w->snap, auth_idx, &au) < 0)
		return WK_AUTH_REPLIED;
	want.s = rec ? rec->realm : au.realm;
	want.len = rec ? rec->realm_len : au.realm_len;
	/* The budgets' keys: the listener's realm, also for a foreign bind checked against an
	 * allocation made under another (wk_bind_gate keys them so before the lookup). */
	kr.s = au.realm;
	kr.len = au.realm_len;
	if (wk_auth_precheck(w, ep, req, &want, &kr, cred, &pwalg, budget ? &af : NULL,
			     foreign) < 0)
		return WK_AUTH_REPLIED;
	cred->key_alg = pwalg == STUN_PWALG_SHA256 ? SHM_KEY_SHA256 : SHM_KEY_MD5;
	if (rec)
		rc = wk_auth_existing(w, rec, &au, req, cred, &why, &code);
	else
		rc = wk_auth_lookup(w, auth_idx, &au, req, pwalg, cred, &why);
	/* A guess: credentials that do not verify under our nonce (an expired REST username
	 * is no guess, its MAC was not even checked), or any failure of a foreign
	 * ConnectionBind (wk_bind_charged). Charged, and not answered once a budget is over. */
	if (rc < 0 && budget && (foreign || why != SHM_CTR_AUTH_FAIL_EXPIRED) &&
	    wk_authfail_failed(w, ep, &af, cred->user, cred->user_len)) {
		shm_ctr_add(w->ctr, why, 1);
		explicit_bzero(cred->key, sizeof(cred->key));
		return WK_AUTH_REPLIED;
	}
	if (rc < 0) {
		shm_ctr_add(w->ctr, why, 1);
		explicit_bzero(cred->key, sizeof(cred->key));
		if (code == 441)
			wk_auth_error(w, ep, req, 441);
		else
			wk_auth_challenge(w, ep, req, want.s, want.len, 401, NULL);
		return WK_AUTH_REPLIED;
	}
	/* Checked once the credentials verify, so that nobody learns from the answer whether
	 * a username they cannot authenticate as is revoked. 403 (not 401): trying again
	 * with the same credentials will not help. */
	if (shm_revoke_match(w->shm, cred->user, cred->user_len, wk_unix_now())) {
		shm_ctr_add(w->ctr, SHM_CTR_AUTH_FAIL_REVOKED, 1);
		explicit_bzero(cred->key, sizeof(cred->key));
		log_debug("auth", "credential of revoked user %.*s refused", (int)cred->user_len,
			  cred->user);
		if (!wk_bind_charged(w, ep, &af, foreign, cred))
			wk_auth_error(w, ep, req, 403);
		return WK_AUTH_REPLIED;
	}
	cred->sha256 = stun_msg_has(req, STUN_ATTR_MESSAGE_INTEGRITY_SHA256);
	wk_unauth_trust(w, ep);
	wk_budget_authed(w, ep->c);	/* out of the source budgets and pre-auth deadline */
	return WK_AUTH_OK;
}

enum wk_auth_result wk_auth_check(struct worker *w, const struct wk_ep *ep,
				  const struct stun_msg *req, const struct wk_alloc *a,
				  struct wk_cred *cred)
{
	return wk_auth_run(w, ep, req, a ? a->rec : NULL, false, cred);
}

/* Whether copy (of a record read consistently) is a LIVE allocation of slot, not ending,
 * for username user[0..len), with lengths in bounds (it is another process's record). */
static bool wk_bind_candidate(const struct shm_alloc *copy, unsigned slot, const uint8_t *user,
			      size_t len)
{
	return copy->state == SHM_ALLOC_WORD(SHM_ALLOC_LIVE, slot) && copy->owner == slot &&
	       copy->user_len == len && memcmp(copy->username, user, len) == 0 &&
	       copy->realm_len <= SHM_ALLOC_REALM_MAX && copy->key_len <= SHM_ALLOC_KEY_MAX;
}

/* What one foreign ConnectionBind may cost. Without a hint (below) finding its record is a
 * walk of the table's state words, each on a line (and often a page) of its own: measured
 * (8d50fbb, 16 384 records, the default table of one relay address) 0.08 ms warm, 0.4 ms
 * with the table out of the cache, 0.25 / 1.2 ms with every record LIVE. 64 a second, 64
 * at once, holds a stream of binds to at most ~8 % of a core and a burst to ~80 ms, worst
 * case; a legitimate client's binds come once per peer connection and, after the first of
 * a user in a slot, find the hint. */
#define WK_BIND_WALK_RATE 64u
#define WK_BIND_WALK_BURST 64u
#define WK_BIND_WALK_INTERVAL_NS (1000000000ull / WK_BIND_WALK_RATE)

/* One token of the walks' bucket (false: none left). */
static bool wk_bind_walk_take(struct worker *w)
{
	uint64_t now = mono_ns(), t = w->bind_walk_tat > now ? w->bind_walk_tat : now;

	if (t + WK_BIND_WALK_INTERVAL_NS - now > WK_BIND_WALK_BURST * WK_BIND_WALK_INTERVAL_NS)
		return false;
	w->bind_walk_tat = t + WK_BIND_WALK_INTERVAL_NS;
	return true;
}

/* The hint of (slot, user): a keyed hash (an attacker's usernames cannot aim at another
 * user's entry), never 0 (empty). Its input starts with a tag byte of its own ('H'), as
 * the failed-auth keys' do ('P', 'U': worker/authfail.c), which share the key. */
static struct wk_bind_hint *wk_bind_hint(struct worker *w, unsigned slot, const uint8_t *user,
					 size_t len, uint64_t *h)
{
	uint8_t buf[2 + SHM_ALLOC_USER_MAX];

	buf[0] = 'H';
	buf[1] = (uint8_t)slot;
	memcpy(buf + 2, user, len);
	*h = wk_siphash24(shm_trust_hkey(w->shm), buf, 2 + len) | 1u;
	return &w->bind_hint[(*h >> 32) & (WK_BIND_HINTS - 1)];
}

/* The record that hint names, when it still is a LIVE allocation of slot for user whose
 * key verifies req (copied into *out); any other case is a miss. */
static bool wk_bind_hinted(struct worker *w, const struct wk_bind_hint *e, uint64_t h,
			   unsigned slot, const struct stun_msg *req, const uint8_t *user,
			   size_t len, struct shm_alloc *out)
{
	if (e->h != h || shm_alloc_read_copy(w->shm, e->idx, out) < 0)
		return false;
	if (wk_bind_candidate(out, slot, user, len) &&
	    wk_auth_verify(req, out->key, out->key_len) == 0)
		return true;
	explicit_bzero(out, sizeof(*out));
	return false;
}

/* The walk: of slot's LIVE records with user, the first whose key verifies req, else the
 * first (*idx: which). */
static bool wk_bind_walk(struct worker *w, unsigned slot, const struct stun_msg *req,
			 const uint8_t *user, size_t len, struct shm_alloc *out, uint32_t *at)
{
	uint32_t cursor = 0, idx;
	struct shm_alloc_stat st;
	struct shm_alloc copy;
	bool found = false;

	while (shm_alloc_next_owned(w->shm, slot, &cursor, &idx) == 0) {
		if (shm_alloc_read_stat(w->shm, idx, 0, &st) < 0 || st.user_len != len ||
		    memcmp(st.username, user, len) != 0 ||
		    shm_alloc_read_copy(w->shm, idx, &copy) < 0 ||
		    !wk_bind_candidate(&copy, slot, user, len))
			continue;
		if (wk_auth_verify(req, copy.key, copy.key_len) == 0) {
			*out = copy;
			*at = idx;
			found = true;
			break;
		}
		if (!found) {
			*out = copy;
			*at = idx;
		}
		found = true;
	}
	explicit_bzero(&copy, sizeof(copy));
	return found;
}

/* The record whose stored key the owner checks a ConnectionBind against: a LIVE allocation
 * of slot (the CONNECTION-ID's) with the request's USERNAME, copied into *out. Of several
 * (one user's allocations made before and after a rotation), the first whose key verifies
 * the request, else the first. Other workers' records are read only as seqlock-validated
 * copies (shm_alloc_read_copy; one being written counts as absent). Returns false when
 * none matches or none was looked for (the listener's credentials decide then). Cost,
 * bounded per message whatever a connection sends: nothing for a user with no allocation
 * (its quota count); a record copy when the hint of (slot, user) names a record that
 * verifies; else a walk of the table (wk_bind_walk), at most WK_BIND_WALK_RATE a second
 * per worker (beyond it none: counted in SHM_CTR_BIND_LIMITED), which leaves its find in
 * the hint. */
static bool wk_bind_record(struct worker *w, unsigned slot, const struct stun_msg *req,
			   struct shm_alloc *out)
{
	const uint8_t *user;
	size_t len;
	uint64_t h;
	uint32_t idx;
	struct wk_bind_hint *e;

	if (stun_msg_get_raw(req, STUN_ATTR_USERNAME, &user, &len) < 0 || len == 0 ||
	    len > SHM_ALLOC_USER_MAX ||
	    shm_quota_count(w->shm, shm_quota_user_key((const char *)user, len)) == 0)
		return false;
	e = wk_bind_hint(w, slot, user, len, &h);
	if (wk_bind_hinted(w, e, h, slot, req, user, len, out)) {
		shm_ctr_add(w->ctr, SHM_CTR_BIND_CACHED, 1);
		return true;
	}
	if (!wk_bind_walk_take(w)) {
		shm_ctr_add(w->ctr, SHM_CTR_BIND_LIMITED, 1);
		return false;
	}
	shm_ctr_add(w->ctr, SHM_CTR_BIND_WALKED, 1);
	if (!wk_bind_walk(w, slot, req, user, len, out, &idx))
		return false;
	e->h = h;
	e->idx = idx;
	return true;
}

/* Before a foreign ConnectionBind's record is looked for: -1 when it is dropped, its
 * source or username over its failed-auth budget (limits.auth_fail_*, keyed with the
 * listener's realm, as wk_auth_run charges it): the drop that wk_auth_precheck would give
 * it after the lookup, without the lookup; 0 when it is not well formed (no integrity,
 * NONCE, REALM or USERNAME malformed or missing: the precheck answers it, uncharged, and
 * nothing is looked up); 1 when its record is to be looked for (and any failure after that
 * is charged: wk_bind_charged). A foreign bind's nonce is not checked here. */
static int wk_bind_gate(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req)
{
	char user[SHM_ALLOC_USER_MAX + 1];
	const char *s;
	size_t n;
	struct snap_auth au;
	struct wk_authfail af;

	if ((!stun_msg_has(req, STUN_ATTR_MESSAGE_INTEGRITY) &&
	     !stun_msg_has(req, STUN_ATTR_MESSAGE_INTEGRITY_SHA256)) ||
	    stun_msg_get_string(req, STUN_ATTR_NONCE, &s, &n) < 0 ||
	    stun_msg_get_string(req, STUN_ATTR_REALM, &s, &n) < 0 ||
	    stun_msg_copy_string(req, STUN_ATTR_USERNAME, user, sizeof(user)) < 0 ||
	    snap_auth_get(w->snap, ep->l->sl.auth_idx, &au) < 0)
		return 0;
	wk_authfail_keys(w, ep, au.realm, au.realm_len, user, strlen(user), &af);
	return wk_authfail_refused(w, &af) ? -1 : 1;
}

enum wk_auth_result wk_auth_check_bind(struct worker *w, const struct wk_ep *ep,
				       const struct stun_msg *req, unsigned slot,
				       struct wk_cred *cred)
{
	struct shm_alloc rec;
	enum wk_auth_result r;
	bool have = false;
	int gate = wk_bind_gate(w, ep, req);

	memset(cred, 0, sizeof(*cred));
	if (gate < 0)
		return WK_AUTH_REPLIED;
	if (gate > 0)
		have = wk_bind_record(w, slot, req, &rec);
	r = wk_auth_run(w, ep, req, have ? &rec : NULL, true, cred);
	explicit_bzero(&rec, sizeof(rec));
	return r;
}

bool wk_auth_nonce_ours(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req)
{
	const char *nonce;
	size_t nonce_len;
	uint32_t features;

	return stun_msg_get_string(req, STUN_ATTR_NONCE, &nonce, &nonce_len) == 0 &&
	       wk_auth_nonce_fresh(w, ep, nonce, nonce_len, &features);
}

bool wk_rec_revoked(struct worker *w, const struct shm_alloc *rec, int64_t now)
{
	size_t len = rec->user_len < SHM_ALLOC_USER_MAX ? rec->user_len : SHM_ALLOC_USER_MAX;

	return shm_revoke_match(w->shm, rec->username, len, now);
}

bool wk_revoke_sweep(struct worker *w)
{
	uint64_t seq = shm_revoke_seq(w->shm);
	int64_t now = wk_unix_now();
	struct wk_alloc *a, *next;

	if (seq == w->revoke_seq || (seq & 1u) != 0)
		return false;
	w->revoke_seq = seq;
	for (a = LIST_FIRST(&w->allocs); a; a = next) {
		next = LIST_NEXT(a, link);
		if (wk_rec_revoked(w, a->rec, now))
			wk_alloc_destroy(w, a, "credential revoked");
	}
	return true;
}

void wk_auth_sign(struct stun_builder *b, const struct wk_cred *cred, bool fingerprint)
{
	if (cred && cred->key_len) {
		if (cred->sha256)
			stun_build_integrity_sha256(b, cred->key, cred->key_len);
		else
			stun_build_integrity(b, cred->key, cred->key_len);
	}
	if (fingerprint)
		stun_build_fingerprint(b);
}
