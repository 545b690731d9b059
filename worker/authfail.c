/* Failed-authentication budgets per source prefix and per username: the rules of
 * worker/authfail.h over the shared table of shm/shm_authfail.h, their counters and log. */
#include "config.h"

#include "worker/authfail.h"
#include "worker/wk.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "common/log.h"
#include "shm/shm_authfail.h"
#include "shm/shm_trust.h"

#define AF_WINDOW_MS SHM_AUTHFAIL_WINDOW_MS	/* every budget is per minute */
#define AF_LOG_BURST 10u		/* log lines a worker may write at once ... */
#define AF_LOG_INTERVAL_NS 1000000000ull	/* ... then one a second */
/* The source a failure is charged to: one IPv4 address (a host or one NAT), one IPv6 /64
 * (one subscriber's link; a host picks any address in it). Never a whole /24: a guesser must
 * not lock out the other addresses of its prefix, whose right passwords are always
 * verified. */
#define AF_SRC_V4 32u
#define AF_SRC_V6 64u

void wk_authfail_configure(struct worker *w, const struct snap_limits *lim)
{
	w->hot.auth_fail_prefix = lim->auth_fail_prefix;
	w->hot.auth_fail_user = lim->auth_fail_user;
}

/* The hash of a tag byte and msg under the trust region's key. */
static uint64_t af_hash(const struct worker *w, uint8_t tag, const void *msg, size_t len,
			const void *msg2, size_t len2)
{
	uint8_t buf[1 + 2 + STUN_MAX_REALM_LEN + SHM_ALLOC_USER_MAX + 2];
	size_t n = 0;

	buf[n++] = tag;
	if (len > STUN_MAX_REALM_LEN + 2)
		len = STUN_MAX_REALM_LEN + 2;
	if (len2 > SHM_ALLOC_USER_MAX)
		len2 = SHM_ALLOC_USER_MAX;
	memcpy(buf + n, msg, len);
	n += len;
	if (len2) {
		memcpy(buf + n, msg2, len2);
		n += len2;
	}
	return wk_siphash24(shm_trust_hkey(w->shm), buf, n);
}

void wk_authfail_keys(struct worker *w, const struct wk_ep *ep, const char *realm,
		      size_t realm_len, const char *user, size_t user_len, struct wk_authfail *af)
{
	uint8_t msg[WK_RL_MSG_MAX];
	uint8_t rmsg[2 + STUN_MAX_REALM_LEN];
	size_t len = wk_rl_prefix_msg(ep->addr, AF_SRC_V4, AF_SRC_V6, msg);

	af->prefix = af_hash(w, 'P', msg, len, NULL, 0);
	/* The realm's length first, so that realm "ab" + user "c" is not realm "a" + "bc". */
	if (realm_len > STUN_MAX_REALM_LEN)
		realm_len = STUN_MAX_REALM_LEN;
	rmsg[0] = (uint8_t)(realm_len >> 8);
	rmsg[1] = (uint8_t)realm_len;
	memcpy(rmsg + 2, realm, realm_len);
	af->user = af_hash(w, 'U', rmsg, 2 + realm_len, user, user_len);
}

static uint64_t af_now_ms(void)
{
	return mono_ns() / 1000000u;
}

/* Milliseconds a budget of `per_min` failures per minute forgives one failure in. */
static uint64_t af_interval_ms(uint32_t per_min)
{
	uint64_t i = AF_WINDOW_MS / per_min;

	return i ? i : 1;
}

/* Over budget: more than a window of failures still owed. */
static bool af_over(uint64_t tat, uint64_t now)
{
	return tat > now + AF_WINDOW_MS;
}

/* Failed within the last window (and not forgiven longer ago than that). */
static bool af_suspect(uint64_t tat, uint64_t now)
{
	return tat != 0 && tat + AF_WINDOW_MS > now;
}

/* Keeps key over its budget for one interval from now (a dropped attempt). */
static void af_hold(struct worker *w, uint64_t key, uint64_t now, uint32_t per_min)
{
	uint64_t t = now + AF_WINDOW_MS + af_interval_ms(per_min);

	(void)shm_authfail_charge(w->shm, key, now, 0, t, t);
}

/* "a.b.c.d/32" or "2001:db8::/64": the source ep's failures are charged to. */
static void af_prefix_str(const struct worker *w, const struct wk_ep *ep, char *out, size_t cap)
{
	uint8_t msg[WK_RL_MSG_MAX];
	size_t len = wk_rl_prefix_msg(ep->addr, AF_SRC_V4, AF_SRC_V6, msg);
	char a[INET6_ADDRSTRLEN] = "?";

	(void)w;

	if (len == 2 + 4)
		inet_ntop(AF_INET, msg + 2, a, sizeof(a));
	else if (len == 2 + 16)
		inet_ntop(AF_INET6, msg + 2, a, sizeof(a));
	snprintf(out, cap, "%s/%u", a, msg[1]);
}

/* One line when a budget trips, through a per-worker bucket (AF_LOG_BURST lines, then one
 * a second), so that a guessing crowd cannot flood the log either. */
static void af_log_trip(struct worker *w, const struct wk_ep *ep, bool prefix, const char *user,
			size_t user_len)
{
	uint64_t now = mono_ns(), t = w->authfail_log_tat > now ? w->authfail_log_tat : now;
	char p[INET6_ADDRSTRLEN + 8];

	if (t + AF_LOG_INTERVAL_NS - now > AF_LOG_BURST * AF_LOG_INTERVAL_NS)
		return;
	w->authfail_log_tat = t + AF_LOG_INTERVAL_NS;
	af_prefix_str(w, ep, p, sizeof(p));
	if (prefix)
		log_warn("auth",
			 "source %s over its failed-authentication budget (limits.auth_fail_prefix "
			 "%u per minute): its Allocate attempts are dropped until it waits",
			 p, w->hot.auth_fail_prefix);
	else
		log_warn("auth",
			 "username %.*s over its failed-authentication budget (limits.auth_fail_user "
			 "%u per minute, last failure from %s): its failures are not answered",
			 (int)user_len, user, w->hot.auth_fail_user, p);
}

bool wk_authfail_refused(struct worker *w, const struct wk_authfail *af)
{
	uint32_t rp = w->hot.auth_fail_prefix, ru = w->hot.auth_fail_user;
	uint64_t now = af_now_ms(), tp = 0;

	if (rp) {
		tp = shm_authfail_tat(w->shm, af->prefix);
		if (af_over(tp, now)) {
			af_hold(w, af->prefix, now, rp);
			shm_ctr_add(w->ctr, SHM_CTR_AUTH_THROTTLED_PREFIX, 1);
			return true;
		}
	}
	if (ru && rp && af_suspect(tp, now) &&
	    af_over(shm_authfail_tat(w->shm, af->user), now)) {
		af_hold(w, af->user, now, ru);
		/* and the prefix stays one that failed for another window */
		(void)shm_authfail_charge(w->shm, af->prefix, now, 0, now, now + AF_WINDOW_MS +
							     af_interval_ms(rp));
		shm_ctr_add(w->ctr, SHM_CTR_AUTH_THROTTLED_USER, 1);
		return true;
	}
	return false;
}

/* Charges one failure to key; true when that made it (or left it) over budget; *tripped
 * when this failure was the one that crossed. */
static bool af_charge_fail(struct worker *w, uint64_t key, uint64_t now, uint32_t per_min,
			   bool *tripped)
{
	uint64_t i = af_interval_ms(per_min);
	uint64_t t = shm_authfail_charge(w->shm, key, now, i, 0, now + AF_WINDOW_MS + i);

	*tripped = false;
	if (t == 0)
		return false;	/* not recorded (every race lost): not counted either */
	*tripped = af_over(t, now) && !af_over(t - i, now);
	return af_over(t, now);
}

bool wk_authfail_failed(struct worker *w, const struct wk_ep *ep, const struct wk_authfail *af,
			const char *user, size_t user_len)
{
	uint32_t rp = w->hot.auth_fail_prefix, ru = w->hot.auth_fail_user;
	uint64_t now = af_now_ms();
	bool over_p = false, over_u = false, trip_p = false, trip_u = false;

	if (rp)
		over_p = af_charge_fail(w, af->prefix, now, rp, &trip_p);
	if (ru)
		over_u = af_charge_fail(w, af->user, now, ru, &trip_u);
	if (trip_p)
		af_log_trip(w, ep, true, user, user_len);
	if (trip_u)
		af_log_trip(w, ep, false, user, user_len);
	if (over_p)
		shm_ctr_add(w->ctr, SHM_CTR_AUTH_THROTTLED_PREFIX, 1);
	else if (over_u)
		shm_ctr_add(w->ctr, SHM_CTR_AUTH_THROTTLED_USER, 1);
	return over_p || over_u;
}
