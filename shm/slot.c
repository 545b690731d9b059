/* Worker slots in the shared segment: lifecycle fields written by the master around
 * fork/waitpid, heartbeat and counters written by the slot's worker. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "shm/shm_internal.h"

static const char *const ctr_names[SHM_CTR__COUNT] = {
	[SHM_CTR_CLIENT_PKTS_IN] = "client_pkts_in",
	[SHM_CTR_CLIENT_BYTES_IN] = "client_bytes_in",
	[SHM_CTR_CLIENT_PKTS_OUT] = "client_pkts_out",
	[SHM_CTR_CLIENT_BYTES_OUT] = "client_bytes_out",
	[SHM_CTR_PEER_PKTS_IN] = "peer_pkts_in",
	[SHM_CTR_PEER_BYTES_IN] = "peer_bytes_in",
	[SHM_CTR_PEER_PKTS_OUT] = "peer_pkts_out",
	[SHM_CTR_PEER_BYTES_OUT] = "peer_bytes_out",
	[SHM_CTR_ALLOCS_CREATED] = "allocs_created",
	[SHM_CTR_ALLOCS_ENDED] = "allocs_ended",
	[SHM_CTR_ALLOCS_ACTIVE] = "allocs_active",
	[SHM_CTR_ALLOCS_ADOPTED] = "allocs_adopted",
	[SHM_CTR_ALLOCS_DROPPED] = "allocs_dropped",
	[SHM_CTR_AUTH_FAIL_MISSING] = "auth_fail_missing",
	[SHM_CTR_AUTH_FAIL_BAD_MAC] = "auth_fail_bad_mac",
	[SHM_CTR_AUTH_FAIL_UNKNOWN_USER] = "auth_fail_unknown_user",
	[SHM_CTR_AUTH_FAIL_EXPIRED] = "auth_fail_expired",
	[SHM_CTR_AUTH_FAIL_STALE_NONCE] = "auth_fail_stale_nonce",
	[SHM_CTR_AUTH_FAIL_WRONG_REALM] = "auth_fail_wrong_realm",
	[SHM_CTR_PERM_DENIED] = "perm_denied",
	[SHM_CTR_QUOTA_USER] = "quota_user",
	[SHM_CTR_QUOTA_TOTAL] = "quota_total",
	[SHM_CTR_QUOTA_BANDWIDTH] = "quota_bandwidth",
	[SHM_CTR_ERR_MALFORMED] = "err_malformed",
	[SHM_CTR_ERR_UNKNOWN_METHOD] = "err_unknown_method",
	[SHM_CTR_ERR_ALLOC_MISMATCH] = "err_alloc_mismatch",
	[SHM_CTR_ERR_RELAY_BIND] = "err_relay_bind",
	[SHM_CTR_ERR_SEND] = "err_send",
	[SHM_CTR_ERR_RECV] = "err_recv",
	[SHM_CTR_ERR_TLS] = "err_tls",
	[SHM_CTR_ERR_INTERNAL] = "err_internal",
	[SHM_CTR_STUN_BINDING] = "stun_binding",
	[SHM_CTR_TLS_HANDSHAKES] = "tls_handshakes",
	[SHM_CTR_DTLS_COOKIES] = "dtls_cookies",
	[SHM_CTR_HANDSHAKES_REFUSED] = "handshakes_refused",
	[SHM_CTR_CONN_TIMEOUTS] = "conn_timeouts",
	[SHM_CTR_UNAUTH_DROPPED] = "unauth_dropped",
	[SHM_CTR_UNAUTH_TRUSTED] = "unauth_trusted",
	[SHM_CTR_UNAUTH_TRUST_NEW] = "unauth_trust_new",
	[SHM_CTR_UNAUTH_TRUST_EVICTED] = "unauth_trust_evicted",
	[SHM_CTR_TCP_PEER_CONNS] = "tcp_peer_conns",
	[SHM_CTR_TCP_CONNECT_OK] = "tcp_connect_ok",
	[SHM_CTR_TCP_CONNECT_DENIED] = "tcp_connect_denied",
	[SHM_CTR_TCP_CONNECT_FAILED] = "tcp_connect_failed",
	[SHM_CTR_TCP_CONNECT_TIMEOUT] = "tcp_connect_timeout",
	[SHM_CTR_TCP_CONNECT_EXISTS] = "tcp_connect_exists",
	[SHM_CTR_TCP_CONNECT_LIMIT] = "tcp_connect_limit",
	[SHM_CTR_TCP_EVICT_PENDING] = "tcp_evict_connects",
	[SHM_CTR_TCP_EVICT_PEER] = "tcp_evict_peer_connections",
	[SHM_CTR_SHORT_CIRCUIT] = "short_circuit",
	[SHM_CTR_SIBLING_OUT] = "sibling_out",
	[SHM_CTR_SIBLING_IN] = "sibling_in",
	[SHM_CTR_SHORT_CIRCUIT_STALE] = "short_circuit_stale",
	[SHM_CTR_AUTH_FAIL_REVOKED] = "auth_fail_revoked",
	[SHM_CTR_AUTH_THROTTLED_PREFIX] = "auth_throttled_prefix",
	[SHM_CTR_AUTH_THROTTLED_USER] = "auth_throttled_user",
	[SHM_CTR_BUDGET_EVICT_ADDR_CONNS] = "budget_evict_address_connections",
	[SHM_CTR_BUDGET_EVICT_PREFIX_CONNS] = "budget_evict_prefix_connections",
	[SHM_CTR_BUDGET_EVICT_ADDR_TLS] = "budget_evict_address_tls_handshakes",
	[SHM_CTR_BUDGET_EVICT_PREFIX_TLS] = "budget_evict_prefix_tls_handshakes",
	[SHM_CTR_BUDGET_EVICT_ADDR_DTLS] = "budget_evict_address_dtls_handshakes",
	[SHM_CTR_BUDGET_EVICT_PREFIX_DTLS] = "budget_evict_prefix_dtls_handshakes",
	[SHM_CTR_BUDGET_EVICT_WORKER_CONNS] = "budget_evict_worker_connections",
	[SHM_CTR_BUDGET_EVICT_WORKER_TLS] = "budget_evict_worker_tls_handshakes",
	[SHM_CTR_BUDGET_EVICT_WORKER_DTLS] = "budget_evict_worker_dtls_handshakes",
	[SHM_CTR_BUDGET_REFUSED_ADDR_CONNS] = "budget_refused_address_connections",
	[SHM_CTR_BUDGET_REFUSED_PREFIX_CONNS] = "budget_refused_prefix_connections",
	[SHM_CTR_BUDGET_REFUSED_ADDR_TLS] = "budget_refused_address_tls_handshakes",
	[SHM_CTR_BUDGET_REFUSED_PREFIX_TLS] = "budget_refused_prefix_tls_handshakes",
	[SHM_CTR_BUDGET_REFUSED_ADDR_DTLS] = "budget_refused_address_dtls_handshakes",
	[SHM_CTR_BUDGET_REFUSED_PREFIX_DTLS] = "budget_refused_prefix_dtls_handshakes",
	[SHM_CTR_BUDGET_REFUSED_WORKER_CONNS] = "budget_refused_worker_connections",
	[SHM_CTR_BUDGET_REFUSED_WORKER_TLS] = "budget_refused_worker_tls_handshakes",
	[SHM_CTR_BUDGET_REFUSED_WORKER_DTLS] = "budget_refused_worker_dtls_handshakes",
	[SHM_CTR_PREAUTH_TIMEOUTS] = "preauth_timeouts",
	[SHM_CTR_ACCEPT_BACKOFF] = "accept_backoff",
	[SHM_CTR_PP_ACCEPTED] = "proxy_protocol_accepted",
	[SHM_CTR_PP_REJ_UNTRUSTED] = "proxy_protocol_rejected_untrusted",
	[SHM_CTR_PP_REJ_MISSING] = "proxy_protocol_rejected_missing",
	[SHM_CTR_PP_REJ_MALFORMED] = "proxy_protocol_rejected_malformed",
	[SHM_CTR_PP_REJ_VERSION] = "proxy_protocol_rejected_version",
	[SHM_CTR_PP_REJ_TIMEOUT] = "proxy_protocol_rejected_timeout",
	[SHM_CTR_STREAMS_HANDED_OVER] = "stream_handovers",
	[SHM_CTR_STREAMS_HANDOVER_ENDED] = "stream_handovers_ended",
	[SHM_CTR_STREAMS_LINGER_ENDED] = "stream_linger_ended",
	[SHM_CTR_WAKES_COALESCED] = "wakes_coalesced",
	[SHM_CTR_BIND_WALKED] = "bind_walked",
	[SHM_CTR_BIND_CACHED] = "bind_cached",
	[SHM_CTR_BIND_LIMITED] = "bind_limited",
};

static const char *const lctr_names[SHM_LCTR__COUNT] = {
	[SHM_LCTR_CLIENT_PKTS_IN] = "client_pkts_in",
	[SHM_LCTR_CLIENT_BYTES_IN] = "client_bytes_in",
	[SHM_LCTR_CLIENT_PKTS_OUT] = "client_pkts_out",
	[SHM_LCTR_CLIENT_BYTES_OUT] = "client_bytes_out",
	[SHM_LCTR_PEER_PKTS_IN] = "peer_pkts_in",
	[SHM_LCTR_PEER_BYTES_IN] = "peer_bytes_in",
	[SHM_LCTR_PEER_PKTS_OUT] = "peer_pkts_out",
	[SHM_LCTR_PEER_BYTES_OUT] = "peer_bytes_out",
	[SHM_LCTR_ALLOCS_CREATED] = "allocs_created",
	[SHM_LCTR_ALLOCS_ACTIVE] = "allocs_active",
	[SHM_LCTR_CONNS_ACTIVE] = "conns_active",
	[SHM_LCTR_CONNS_TOTAL] = "conns_total",
	[SHM_LCTR_PERM_DENIED] = "perm_denied",
};

static const char *const cctr_names[SHM_CCTR__COUNT] = {
	[SHM_CCTR_PEER_PKTS_IN] = "peer_pkts_in",   [SHM_CCTR_PEER_BYTES_IN] = "peer_bytes_in",
	[SHM_CCTR_PEER_PKTS_OUT] = "peer_pkts_out", [SHM_CCTR_PEER_BYTES_OUT] = "peer_bytes_out",
	[SHM_CCTR_PERM_GRANTED] = "perm_granted",
};

const char *shm_ctr_name(enum shm_ctr c)
{
	return (unsigned)c < SHM_CTR__COUNT ? ctr_names[c] : NULL;
}

const char *shm_lctr_name(enum shm_lctr c)
{
	return (unsigned)c < SHM_LCTR__COUNT ? lctr_names[c] : NULL;
}

const char *shm_cctr_name(enum shm_cctr c)
{
	return (unsigned)c < SHM_CCTR__COUNT ? cctr_names[c] : NULL;
}

int shm_slot_spawning(struct shm *shm, unsigned slot, uint64_t *incarnation)
{
	int rc;
	struct shm_slot *s = shm_slot_rw(shm, slot, &rc);
	uint32_t st;
	uint64_t inc;

	if (s == NULL)
		return rc;
	st = CMM_LOAD_SHARED(s->state);
	if (st != SHM_SLOT_EMPTY && st != SHM_SLOT_DEAD)
		return -EBUSY;
	/* No process runs in the slot: the master may write the worker's fields. qs = 0
	 * keeps the slot out of grace periods until the child announces itself online. */
	CMM_STORE_SHARED(s->qs, 0);
	CMM_STORE_SHARED(s->pid, 0);
	CMM_STORE_SHARED(s->heartbeat_ns, 0);
	shm_src_clear(shm, slot); /* the last worker's connections died with it */
	inc = CMM_LOAD_SHARED(s->incarnation) + 1;
	CMM_STORE_SHARED(s->incarnation, inc);
	cmm_smp_wmb();
	CMM_STORE_SHARED(s->state, SHM_SLOT_STARTING);
	cmm_smp_mb();
	if (incarnation != NULL)
		*incarnation = inc;
	return 0;
}

int shm_slot_set_pid(struct shm *shm, unsigned slot, pid_t pid)
{
	int rc;
	struct shm_slot *s = shm_slot_rw(shm, slot, &rc);

	if (s == NULL)
		return rc;
	if (pid <= 0)
		return -EINVAL;
	CMM_STORE_SHARED(s->pid, (int32_t)pid);
	return 0;
}

int shm_slot_set_state(struct shm *shm, unsigned slot, enum shm_slot_state state)
{
	int rc;
	struct shm_slot *s = shm_slot_rw(shm, slot, &rc);

	if (s == NULL)
		return rc;
	if (state != SHM_SLOT_RUNNING && state != SHM_SLOT_STOPPING)
		return -EINVAL;
	CMM_STORE_SHARED(s->state, (uint32_t)state);
	return 0;
}

int shm_slot_heartbeat(struct shm *shm, unsigned slot, uint64_t now_ns)
{
	int rc;
	struct shm_slot *s = shm_slot_rw(shm, slot, &rc);

	if (s == NULL)
		return rc;
	CMM_STORE_SHARED(s->heartbeat_ns, now_ns);
	return 0;
}

int shm_slot_reaped(struct shm *shm, unsigned slot)
{
	int rc;
	struct shm_slot *s = shm_slot_rw(shm, slot, &rc);

	if (s == NULL)
		return rc;
	/* waitpid() returned: the worker executes nothing any more, so nothing it held can
	 * be dereferenced again and its "online" announcement is void (see shm/qsbr.c). */
	cmm_smp_mb();
	CMM_STORE_SHARED(s->qs, 0);
	CMM_STORE_SHARED(s->pid, 0);
	CMM_STORE_SHARED(s->state, SHM_SLOT_DEAD);
	cmm_smp_mb();
	shm_records_reaped(shm, slot);
	return 0;
}

int shm_slot_read(const struct shm *shm, unsigned slot, struct shm_slot_info *out)
{
	const struct shm_slot *s;

	shm_check_handle(shm);
	s = shm_slot_at(shm, slot);
	if (s == NULL || out == NULL)
		return -EINVAL;
	out->pid = CMM_LOAD_SHARED(s->pid);
	out->state = (enum shm_slot_state)CMM_LOAD_SHARED(s->state);
	out->incarnation = CMM_LOAD_SHARED(s->incarnation);
	out->heartbeat_ns = CMM_LOAD_SHARED(s->heartbeat_ns);
	out->qs = CMM_LOAD_SHARED(s->qs);
	return 0;
}

struct shm_counters *shm_slot_counters(struct shm *shm, unsigned slot)
{
	int rc;
	struct shm_slot *s = shm_slot_rw(shm, slot, &rc);

	return s != NULL ? &s->ctr : NULL;
}

/* Word by word with single 64-bit loads: each value is untorn, the set is not a snapshot
 * (counters move while we read; metrics do not need more). */
static void counters_accumulate(struct shm_counters *dst, const struct shm_counters *src)
{
	const uint64_t *s = (const uint64_t *)src;
	uint64_t *d = (uint64_t *)dst;
	size_t n = sizeof(*src) / sizeof(uint64_t);

	for (size_t i = 0; i < n; i++)
		d[i] += CMM_LOAD_SHARED(s[i]);
}

int shm_counters_read(const struct shm *shm, unsigned slot, struct shm_counters *out)
{
	const struct shm_slot *s;

	shm_check_handle(shm);
	s = shm_slot_at(shm, slot);
	if (s == NULL || out == NULL)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	counters_accumulate(out, &s->ctr);
	return 0;
}

void shm_counters_add(struct shm_counters *dst, const struct shm_counters *src)
{
	counters_accumulate(dst, src);
}

int shm_counters_sum(const struct shm *shm, struct shm_counters *out)
{
	shm_check_handle(shm);
	if (out == NULL)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < shm->cfg.n_slots; i++)
		counters_accumulate(out, &shm_slot_at(shm, i)->ctr);
	return 0;
}
