/* Prometheus text rendering of the shm counters and master values (see http_metrics.h). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/mono.h"
#include "conf/snapshot.h"
#include "http/http_metrics.h"
#include "shm/shm.h"
#include "shm/shm_authfail.h"
#include "shm/shm_bw.h"
#include "shm/shm_records.h"
#include "shm/shm_revoke.h"
#include "shm/shm_source.h"
#include "shm/shm_trust.h"

/* Rendering context: the sums are taken once per scrape so every family sees one view. */
struct mctx {
	struct http_buf *b;
	const struct shm *shm;
	const struct snap *snap;
	const struct http_master_stats *ms;
	struct shm_counters sum;
	unsigned n_slots;
	/* Connection view of the live workers: TCP gauges summed over running/stopping slots
	 * only (a dead worker's connections are gone), workers serving UDP sockets. */
	uint64_t live_conns[SHM_MAX_LISTENERS];
	uint64_t n_live, n_started;
	uint64_t live_tcp_peers;	/* SHM_CTR_TCP_PEER_CONNS over live slots */
	uint32_t alloc_cap;        /* allocation records in the shared table */
};

struct label {
	const char *name, *value;
};

void http_metrics_escape(struct http_buf *out, const char *s)
{
	for (const char *p = s; *p; p++) {
		if (*p == '\\')
			http_buf_puts(out, "\\\\");
		else if (*p == '"')
			http_buf_puts(out, "\\\"");
		else if (*p == '\n')
			http_buf_puts(out, "\\n");
		else
			http_buf_append(out, p, 1);
	}
}

static void fam(struct mctx *m, const char *name, const char *type, const char *help)
{
	http_buf_printf(m->b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void labels(struct mctx *m, const struct label *l, unsigned n)
{
	if (n == 0)
		return;
	http_buf_puts(m->b, "{");
	for (unsigned i = 0; i < n; i++) {
		http_buf_printf(m->b, "%s%s=\"", i ? "," : "", l[i].name);
		http_metrics_escape(m->b, l[i].value);
		http_buf_puts(m->b, "\"");
	}
	http_buf_puts(m->b, "}");
}

static void sample_u(struct mctx *m, const char *name, const struct label *l, unsigned n,
		     uint64_t v)
{
	http_buf_puts(m->b, name);
	labels(m, l, n);
	http_buf_printf(m->b, " %" PRIu64 "\n", v);
}

static void sample_i(struct mctx *m, const char *name, const struct label *l, unsigned n, int64_t v)
{
	http_buf_puts(m->b, name);
	labels(m, l, n);
	http_buf_printf(m->b, " %" PRId64 "\n", v);
}

static void sample_f(struct mctx *m, const char *name, const struct label *l, unsigned n, double v)
{
	http_buf_puts(m->b, name);
	labels(m, l, n);
	http_buf_printf(m->b, " %.17g\n", v);
}

/* A family with one unlabelled sample: the name is written once so the HELP/TYPE lines and
 * the sample cannot disagree. */
static void scalar_u(struct mctx *m, const char *name, const char *type, const char *help,
		     uint64_t v)
{
	fam(m, name, type, help);
	sample_u(m, name, NULL, 0, v);
}

static void scalar_f(struct mctx *m, const char *name, const char *type, const char *help, double v)
{
	fam(m, name, type, help);
	sample_f(m, name, NULL, 0, v);
}

/* Gauges kept as per-slot deltas: the sum wraps to the true value; clamp a transiently
 * negative total (a decrement seen before its increment) to 0. */
static int64_t gauge(uint64_t v)
{
	return (int64_t)v < 0 ? 0 : (int64_t)v;
}

static const char *listener_name(struct mctx *m, uint32_t i)
{
	struct snap_listener l;
	if (m->snap == NULL || i >= SHM_MAX_LISTENERS || snap_listener_get(m->snap, i, &l) != 0)
		return NULL;
	return l.name;
}

static uint32_t n_listeners(struct mctx *m)
{
	return m->snap ? snap_listener_count(m->snap) : 0;
}

/* Listener i's slot (shm/shm_lslot.h): where its figures are, whatever its position in
 * this snapshot; SHM_MAX_LISTENERS when it has none (its figures read 0). */
static uint32_t lslot(struct mctx *m, uint32_t i)
{
	struct snap_listener l;

	if (m->snap == NULL || snap_listener_get(m->snap, i, &l) != 0 ||
	    l.slot >= SHM_MAX_LISTENERS)
		return SHM_MAX_LISTENERS;
	return l.slot;
}

/* Listener i's counter c, summed over the slots. */
static uint64_t lctr(struct mctx *m, uint32_t i, unsigned c)
{
	uint32_t s = lslot(m, i);

	return s < SHM_MAX_LISTENERS ? m->sum.lst[s][c] : 0;
}

static uint64_t lconns(struct mctx *m, uint32_t i)
{
	uint32_t s = lslot(m, i);

	return s < SHM_MAX_LISTENERS ? m->live_conns[s] : 0;
}

static uint32_t n_clusters(struct mctx *m)
{
	uint32_t n = m->snap ? snap_cluster_count(m->snap) : 0;
	return n > SHM_MAX_CLUSTERS ? SHM_MAX_CLUSTERS : n;
}

/* A {name,direction} family over listeners (rx_i/tx_i index lst[][]). */
static void listener_dir(struct mctx *m, const char *name, const char *help, int rx_i, int tx_i)
{
	fam(m, name, "counter", help);
	for (uint32_t i = 0; i < n_listeners(m); i++) {
		const char *ln = listener_name(m, i);
		struct label l[2] = { { "name", ln }, { "direction", "rx" } };

		if (ln == NULL)
			continue;
		sample_u(m, name, l, 2, lctr(m, i, rx_i));
		l[1].value = "tx";
		sample_u(m, name, l, 2, lctr(m, i, tx_i));
	}
}

static void cluster_dir(struct mctx *m, const char *name, const char *help, int rx_i, int tx_i)
{
	fam(m, name, "counter", help);
	for (uint32_t i = 0; i < n_clusters(m); i++) {
		const char *cn = snap_cluster_name(m->snap, i);
		struct label l[2] = { { "name", cn }, { "direction", "rx" } };

		if (cn == NULL)
			continue;
		sample_u(m, name, l, 2, m->sum.cls[i][rx_i]);
		l[1].value = "tx";
		sample_u(m, name, l, 2, m->sum.cls[i][tx_i]);
	}
}

static bool listener_is_dgram(struct mctx *m, uint32_t i)
{
	struct snap_listener l;

	return snap_listener_get(m->snap, i, &l) == 0 &&
	       (l.protocol == CONF_PROTO_TURN_UDP || l.protocol == CONF_PROTO_TURN_DTLS);
}

/* STUNner semantics: a UDP/DTLS listener counts its socket, one per live worker (each
 * worker serves every listener) and, cumulatively, one per worker start; a TCP/TLS
 * listener counts accepted connections. */
static void render_connections(struct mctx *m)
{
	static const char *const g = "stunner_listener_connections";
	static const char *const t = "stunner_listener_connections_total";

	fam(m, g, "gauge", "Open client connections at a listener (UDP: listener sockets).");
	for (uint32_t i = 0; i < n_listeners(m); i++) {
		struct label l = { "name", listener_name(m, i) };
		if (l.value != NULL)
			sample_u(m, g, &l, 1,
				 listener_is_dgram(m, i) ? m->n_live : lconns(m, i));
	}
	fam(m, t, "counter",
	    "Client connections accepted at a listener (UDP: listener sockets opened).");
	for (uint32_t i = 0; i < n_listeners(m); i++) {
		struct label l = { "name", listener_name(m, i) };
		if (l.value != NULL)
			sample_u(m, t, &l, 1,
				 listener_is_dgram(m, i) ? m->n_started
							 : lctr(m, i, SHM_LCTR_CONNS_TOTAL));
	}
}

/* DTLS associations (handshaking or established) per TURN-DTLS listener: STUNner's
 * connection gauge counts the socket there, so they get a gauge of their own. */
static void render_dtls(struct mctx *m)
{
	static const char *const g = "turngate_dtls_associations";
	struct snap_listener sl;

	fam(m, g, "gauge", "DTLS associations open at a TURN-DTLS listener, all workers.");
	for (uint32_t i = 0; i < n_listeners(m); i++) {
		struct label l = { "listener", listener_name(m, i) };
		if (l.value != NULL && snap_listener_get(m->snap, i, &sl) == 0 &&
		    sl.protocol == CONF_PROTO_TURN_DTLS)
			sample_u(m, g, &l, 1, lconns(m, i));
	}
}

static void render_stunner(struct mctx *m)
{
	fam(m, "stunner_allocations_active", "gauge",
	    "Number of active TURN allocations over all listeners.");
	sample_i(m, "stunner_allocations_active", NULL, 0, gauge(m->sum.v[SHM_CTR_ALLOCS_ACTIVE]));
	listener_dir(m, "stunner_listener_packets_total",
		     "Packets received (rx) from and sent (tx) to clients at a listener.",
		     SHM_LCTR_CLIENT_PKTS_IN, SHM_LCTR_CLIENT_PKTS_OUT);
	listener_dir(m, "stunner_listener_bytes_total",
		     "Bytes received (rx) from and sent (tx) to clients at a listener.",
		     SHM_LCTR_CLIENT_BYTES_IN, SHM_LCTR_CLIENT_BYTES_OUT);
	render_connections(m);
	render_dtls(m);
	cluster_dir(
		m, "stunner_cluster_packets_total",
		"Packets received from (rx) and sent to (tx) peers of a cluster on relay sockets.",
		SHM_CCTR_PEER_PKTS_IN, SHM_CCTR_PEER_PKTS_OUT);
	cluster_dir(
		m, "stunner_cluster_bytes_total",
		"Bytes received from (rx) and sent to (tx) peers of a cluster on relay sockets.",
		SHM_CCTR_PEER_BYTES_IN, SHM_CCTR_PEER_BYTES_OUT);
}

static void render_listeners(struct mctx *m)
{
	fam(m, "turngate_listener_allocations_active", "gauge",
	    "Active allocations created through a listener.");
	for (uint32_t i = 0; i < n_listeners(m); i++) {
		struct label l = { "name", listener_name(m, i) };
		if (l.value != NULL)
			sample_i(m, "turngate_listener_allocations_active", &l, 1,
				 gauge(lctr(m, i, SHM_LCTR_ALLOCS_ACTIVE)));
	}
	/* The capacity the relay-port alert compares allocations_active with: every UDP
	 * relay of the listener's allocations takes a port of this range. */
	fam(m, "turngate_listener_relay_ports", "gauge",
	    "Relay ports in a listener's range (relay_port_min..relay_port_max), all workers.");
	for (uint32_t i = 0; i < n_listeners(m); i++) {
		struct snap_listener sl;
		struct label l = { "name", listener_name(m, i) };
		if (l.value != NULL && snap_listener_get(m->snap, i, &sl) == 0)
			sample_u(m, "turngate_listener_relay_ports", &l, 1,
				 (uint64_t)sl.relay_port_max - sl.relay_port_min + 1);
	}
	fam(m, "turngate_listener_allocations_created_total", "counter",
	    "Allocations created through a listener.");
	for (uint32_t i = 0; i < n_listeners(m); i++) {
		struct label l = { "name", listener_name(m, i) };
		if (l.value != NULL)
			sample_u(m, "turngate_listener_allocations_created_total", &l, 1,
				 lctr(m, i, SHM_LCTR_ALLOCS_CREATED));
	}
	fam(m, "turngate_listener_bandwidth_drops_total", "counter",
	    "Datagrams of a listener's allocations dropped by a bandwidth limit, both directions.");
	for (uint32_t i = 0; i < n_listeners(m); i++) {
		struct label l = { "name", listener_name(m, i) };
		if (l.value != NULL)
			sample_u(m, "turngate_listener_bandwidth_drops_total", &l, 1,
				 lslot(m, i) < SHM_MAX_LISTENERS
					 ? shm_bw_listener_drops(m->shm, lslot(m, i))
					 : 0);
	}
	fam(m, "turngate_cluster_permissions_granted_total", "counter",
	    "Permissions (CreatePermission/ChannelBind) admitted by a cluster.");
	for (uint32_t i = 0; i < n_clusters(m); i++) {
		struct label l = { "name", snap_cluster_name(m->snap, i) };
		if (l.value != NULL)
			sample_u(m, "turngate_cluster_permissions_granted_total", &l, 1,
				 m->sum.cls[i][SHM_CCTR_PERM_GRANTED]);
	}
}

/* A family with one label whose values map to global counters. */
struct lc {
	const char *value;
	enum shm_ctr ctr;
};

static void labelled(struct mctx *m, const char *name, const char *help, const char *label,
		     const struct lc *v, unsigned n)
{
	fam(m, name, "counter", help);
	for (unsigned i = 0; i < n; i++) {
		struct label l = { label, v[i].value };
		sample_u(m, name, &l, 1, m->sum.v[v[i].ctr]);
	}
}

static void listener_single(struct mctx *m, const char *name, const char *help, enum shm_lctr c)
{
	fam(m, name, "counter", help);
	for (uint32_t i = 0; i < n_listeners(m); i++) {
		struct label l = { "listener", listener_name(m, i) };
		if (l.value != NULL)
			sample_u(m, name, &l, 1, lctr(m, i, c));
	}
}

/* Live entries of the trust table under the served configuration's window. */
static void render_trust(struct mctx *m)
{
	uint32_t n = 0;

	if (m->snap != NULL)
		n = shm_trust_count(m->shm, (uint32_t)(mono_ns() / 1000000000u),
				    snap_limits(m->snap)->unauth_trust_window);
	scalar_u(m, "turngate_unauth_trusted_addresses", "gauge",
		 "Source addresses in the trust table that authenticated within "
		 "limits.unauth_trust_window.",
		 n);
	scalar_u(m, "turngate_auth_throttled_keys", "gauge",
		 "Source prefixes and usernames over their failed-authentication budget now "
		 "(limits.auth_fail_prefix, limits.auth_fail_user).",
		 shm_authfail_count(m->shm, mono_ns() / 1000000u, SHM_AUTHFAIL_WINDOW_MS));
}

static void single(struct mctx *m, const char *name, const char *help, enum shm_ctr c)
{
	scalar_u(m, name, "counter", help, m->sum.v[c]);
}

/* PROXY protocol headers (worker/proxyproto.c): accepted, and refused by reason (the
 * counters in the order of the names). */
static void render_proxyproto(struct mctx *m)
{
	static const char *const reasons[] = { "untrusted", "missing", "malformed", "version",
					       "timeout" };

	single(m, "turngate_proxy_protocol_accepted_total",
	       "PROXY protocol headers accepted (connections and datagrams whose client "
	       "address came from the header).",
	       SHM_CTR_PP_ACCEPTED);
	fam(m, "turngate_proxy_protocol_rejected_total", "counter",
	    "Connections closed and datagrams dropped on a proxy_protocol listener, by reason.");
	for (unsigned r = 0; r < sizeof(reasons) / sizeof(reasons[0]); r++) {
		struct label l = { "reason", reasons[r] };

		sample_u(m, "turngate_proxy_protocol_rejected_total", &l, 1,
			 m->sum.v[SHM_CTR_PP_REJ_UNTRUSTED + r]);
	}
}

/* A counter family by the per-source budget that was full (worker/budget.c): the reason
 * label is shm_src_reason_name, the counters from first on in the same order. */
static void by_budget(struct mctx *m, const char *name, const char *help, enum shm_ctr first)
{
	fam(m, name, "counter", help);
	for (unsigned r = 0; r < SHM_SRC_REASONS; r++) {
		struct label l = { "reason", shm_src_reason_name((enum shm_src_reason)r) };

		sample_u(m, name, &l, 1, m->sum.v[first + r]);
	}
}

/* Per-source budgets: evictions and refusals by the budget that was full. */
static void render_budgets(struct mctx *m)
{
	by_budget(m, "turngate_budget_evictions_total",
		  "Unauthenticated connections closed to make room when a budget was full (the "
		  "source's oldest, or the worker's oldest for worker_* reasons), by budget.",
		  SHM_CTR_BUDGET_EVICT_ADDR_CONNS);
	by_budget(m, "turngate_budget_refusals_total",
		  "New connections or DTLS associations closed because a budget was full and "
		  "this worker held nothing of the source's to evict, by budget.",
		  SHM_CTR_BUDGET_REFUSED_ADDR_CONNS);
	single(m, "turngate_preauth_timeouts_total",
	       "Connections closed because they sent no authenticated request within "
	       "limits.preauth_timeout.",
	       SHM_CTR_PREAUTH_TIMEOUTS);
	single(m, "turngate_accept_backoffs_total",
	       "Times a worker paused accepting for 100 ms because it was out of file "
	       "descriptors (EMFILE/ENFILE).",
	       SHM_CTR_ACCEPT_BACKOFF);
	single(m, "turngate_stream_handovers_total",
	       "Sockets of TURN-TCP and RFC 6062 calls that a live upgrade handed to the new "
	       "workers.",
	       SHM_CTR_STREAMS_HANDED_OVER);
	single(m, "turngate_stream_handovers_ended_total",
	       "Sockets of stream calls that a live upgrade could not hand over or take back "
	       "(their connections ended).",
	       SHM_CTR_STREAMS_HANDOVER_ENDED);
	single(m, "turngate_stream_linger_ended_total",
	       "TLS and DTLS calls that an old worker lingering after a live upgrade ended at "
	       "limits.upgrade_linger.",
	       SHM_CTR_STREAMS_LINGER_ENDED);
	scalar_u(m, "turngate_upgrade_lingering_workers", "gauge",
		 "Old workers that a live upgrade left serving their TLS and DTLS calls.",
		 m->ms->linger_workers);
	scalar_u(m, "turngate_upgrade_lingering_sessions", "gauge",
		 "TLS and DTLS calls that lingering old workers still serve.",
		 m->ms->linger_sessions);
	scalar_u(m, "turngate_upgrade_lingering_dtls_sessions", "gauge",
		 "DTLS calls that lingering old workers still serve (in "
		 "turngate_upgrade_lingering_sessions too).",
		 m->ms->linger_dtls);
	render_proxyproto(m);
}

/* The kernel fast path: its share of the datagrams (already in every other counter). */
static void render_offload(struct mctx *m)
{
	static const char *const dirs[] = { "to_peer", "to_client" };

	fam(m, "turngate_offload_packets_total", "counter",
	    "Datagrams of bound channels relayed by the kernel fast path (eBPF), by direction; "
	    "they are counted in the listener, cluster and peer counters as well.");
	for (unsigned d = 0; d < 2; d++) {
		struct label l = { "direction", dirs[d] };

		sample_u(m, "turngate_offload_packets_total", &l, 1, m->ms->offload_pkts[d]);
	}
	fam(m, "turngate_offload_entries", "gauge",
	    "Bound channels entered in the kernel fast path's maps (0 when it is off).");
	sample_u(m, "turngate_offload_entries", NULL, 0, m->ms->offload_entries);
}

static void render_global(struct mctx *m)
{
	static const struct lc auth[] = {
		{ "missing", SHM_CTR_AUTH_FAIL_MISSING },
		{ "bad_mac", SHM_CTR_AUTH_FAIL_BAD_MAC },
		{ "unknown_user", SHM_CTR_AUTH_FAIL_UNKNOWN_USER },
		{ "expired", SHM_CTR_AUTH_FAIL_EXPIRED },
		{ "stale_nonce", SHM_CTR_AUTH_FAIL_STALE_NONCE },
		{ "wrong_realm", SHM_CTR_AUTH_FAIL_WRONG_REALM },
		{ "revoked", SHM_CTR_AUTH_FAIL_REVOKED },
	};
	static const struct lc throttled[] = {
		{ "prefix", SHM_CTR_AUTH_THROTTLED_PREFIX },
		{ "username", SHM_CTR_AUTH_THROTTLED_USER },
	};
	static const struct lc bind[] = {
		{ "walked", SHM_CTR_BIND_WALKED },
		{ "cached", SHM_CTR_BIND_CACHED },
		{ "limited", SHM_CTR_BIND_LIMITED },
	};
	static const struct lc quota[] = {
		{ "user", SHM_CTR_QUOTA_USER },
		{ "total", SHM_CTR_QUOTA_TOTAL },
		{ "bandwidth", SHM_CTR_QUOTA_BANDWIDTH },
	};
	static const struct lc tcpc[] = {
		{ "ok", SHM_CTR_TCP_CONNECT_OK },
		{ "denied", SHM_CTR_TCP_CONNECT_DENIED },
		{ "failed", SHM_CTR_TCP_CONNECT_FAILED },
		{ "timeout", SHM_CTR_TCP_CONNECT_TIMEOUT },
		{ "exists", SHM_CTR_TCP_CONNECT_EXISTS },
		{ "limit", SHM_CTR_TCP_CONNECT_LIMIT },
	};
	static const struct lc tcpev[] = {
		{ "connects_in_flight", SHM_CTR_TCP_EVICT_PENDING },
		{ "peer_connections", SHM_CTR_TCP_EVICT_PEER },
	};
	static const struct lc errs[] = {
		{ "malformed", SHM_CTR_ERR_MALFORMED },
		{ "unknown_method", SHM_CTR_ERR_UNKNOWN_METHOD },
		{ "allocation_mismatch", SHM_CTR_ERR_ALLOC_MISMATCH },
		{ "relay_bind", SHM_CTR_ERR_RELAY_BIND },
		{ "send", SHM_CTR_ERR_SEND },
		{ "recv", SHM_CTR_ERR_RECV },
		{ "tls", SHM_CTR_ERR_TLS },
		{ "internal", SHM_CTR_ERR_INTERNAL },
	};
	static const struct lc cpk[] = { { "rx", SHM_CTR_CLIENT_PKTS_IN },
					 { "tx", SHM_CTR_CLIENT_PKTS_OUT } };
	static const struct lc cby[] = { { "rx", SHM_CTR_CLIENT_BYTES_IN },
					 { "tx", SHM_CTR_CLIENT_BYTES_OUT } };
	static const struct lc ppk[] = { { "rx", SHM_CTR_PEER_PKTS_IN },
					 { "tx", SHM_CTR_PEER_PKTS_OUT } };
	static const struct lc pby[] = { { "rx", SHM_CTR_PEER_BYTES_IN },
					 { "tx", SHM_CTR_PEER_BYTES_OUT } };
	static const struct lc sib[] = { { "out", SHM_CTR_SIBLING_OUT },
					 { "in", SHM_CTR_SIBLING_IN } };

	labelled(m, "turngate_auth_failures_total", "Authentication failures by reason.", "reason",
		 auth, sizeof(auth) / sizeof(auth[0]));
	labelled(m, "turngate_auth_throttled_total",
		 "Allocate authentications dropped unverified or unanswered: the source prefix "
		 "(limits.auth_fail_prefix) or the username (limits.auth_fail_user) was over its "
		 "failed-authentication budget.",
		 "reason", throttled, sizeof(throttled) / sizeof(throttled[0]));
	labelled(m, "turngate_bind_lookups_total",
		 "RFC 6062 ConnectionBinds for another worker's CONNECTION-ID, of a user with "
		 "an allocation, by how the allocation's record was looked for: a walk of the "
		 "table, the worker's hint, or not at all (the walks' budget was spent; the "
		 "listener's credentials decided).",
		 "result", bind, sizeof(bind) / sizeof(bind[0]));
	scalar_u(m, "turngate_revocations", "gauge",
		 "Entries of the revocation list in force (turngatectl revoke): usernames and "
		 "user ids whose credentials every worker refuses.",
		 shm_revoke_count(m->shm, (int64_t)time(NULL)));
	listener_single(m, "turngate_permission_denied_total",
			"Peer addresses refused by the route allowlist (403, or a dropped packet), "
			"by the client's listener.",
			SHM_LCTR_PERM_DENIED);
	labelled(m, "turngate_quota_rejections_total", "Requests refused by a quota, by kind.",
		 "kind", quota, sizeof(quota) / sizeof(quota[0]));
	labelled(m, "turngate_tcp_connects_total", "RFC 6062 Connect requests by result.", "result",
		 tcpc, sizeof(tcpc) / sizeof(tcpc[0]));
	labelled(m, "turngate_tcp_evictions_total",
		 "RFC 6062 connections of the user holding the most ended to make room for "
		 "another user's in a full worker pool, by pool.",
		 "pool", tcpev, sizeof(tcpev) / sizeof(tcpev[0]));
	scalar_u(m, "turngate_tcp_peer_connections", "gauge",
		 "RFC 6062 peer connections (connecting, waiting for ConnectionBind, relaying) "
		 "of the live workers.",
		 m->live_tcp_peers);
	single(m, "turngate_allocations_created_total", "Allocations created.",
	       SHM_CTR_ALLOCS_CREATED);
	single(m, "turngate_allocations_ended_total",
	       "Allocations ended (expired, deleted, dropped).", SHM_CTR_ALLOCS_ENDED);
	single(m, "turngate_allocations_adopted_total",
	       "Allocations re-adopted by a respawned worker or by a start that took the state file over.",
	       SHM_CTR_ALLOCS_ADOPTED);
	single(m, "turngate_allocations_dropped_total",
	       "Allocations dropped at adoption after a worker restart or at a take-over (torn, TCP/TLS/DTLS, expired, over capacity).",
	       SHM_CTR_ALLOCS_DROPPED);
	single(m, "turngate_stun_binding_requests_total", "STUN Binding requests answered.",
	       SHM_CTR_STUN_BINDING);
	single(m, "turngate_tls_handshakes_total",
	       "TLS and DTLS handshakes completed (failures: turngate_errors_total{kind=\"tls\"}).",
	       SHM_CTR_TLS_HANDSHAKES);
	single(m, "turngate_dtls_cookie_exchanges_total",
	       "DTLS ClientHellos answered with a stateless cookie.", SHM_CTR_DTLS_COOKIES);
	single(m, "turngate_handshakes_refused_total",
	       "DTLS ClientHellos with a valid cookie dropped: a budget was full and there was "
	       "nothing to evict for them.",
	       SHM_CTR_HANDSHAKES_REFUSED);
	render_budgets(m);
	single(m, "turngate_connection_timeouts_total",
	       "Connections closed by the handshake, idle or slow-sender deadline.",
	       SHM_CTR_CONN_TIMEOUTS);
	single(m, "turngate_unauth_responses_dropped_total",
	       "Answers to unauthenticated UDP requests (errors, Binding successes) not sent: "
	       "the source prefix was over limits.unauth_rate (reflection protection).",
	       SHM_CTR_UNAUTH_DROPPED);
	single(m, "turngate_unauth_responses_trusted_total",
	       "Answers to unauthenticated UDP requests (errors, Binding successes) sent on a "
	       "credit of the source address (it authenticated within "
	       "limits.unauth_trust_window).",
	       SHM_CTR_UNAUTH_TRUSTED);
	single(m, "turngate_unauth_trust_added_total",
	       "Source addresses entered into the trust table after an authenticated request.",
	       SHM_CTR_UNAUTH_TRUST_NEW);
	single(m, "turngate_unauth_trust_evictions_total",
	       "Trust table entries displaced by a new address while still live (full set).",
	       SHM_CTR_UNAUTH_TRUST_EVICTED);
	render_trust(m);
	single(m, "turngate_short_circuit_packets_total",
	       "Datagrams from one allocation to another of this instance that went from one to "
	       "the other without a relay socket (also in the peer, listener and cluster "
	       "counters).",
	       SHM_CTR_SHORT_CIRCUIT);
	single(m, "turngate_short_circuit_stale_total",
	       "Short-circuited datagrams handed to the worker that owns the receiving "
	       "allocation's connection, dropped there because that allocation had ended or "
	       "changed meanwhile.",
	       SHM_CTR_SHORT_CIRCUIT_STALE);
	labelled(m, "turngate_sibling_packets_total",
		 "Datagrams for masked addresses of sibling instances: sent to a sibling's relay "
		 "address (out), and from one translated to the mask (in).",
		 "direction", sib, 2);
	labelled(m, "turngate_errors_total", "Protocol and I/O errors, by kind.", "kind", errs,
		 sizeof(errs) / sizeof(errs[0]));
	labelled(m, "turngate_client_packets_total",
		 "Packets from (rx) and to (tx) clients, all listeners.", "direction", cpk, 2);
	labelled(m, "turngate_client_bytes_total",
		 "Bytes from (rx) and to (tx) clients, all listeners.", "direction", cby, 2);
	labelled(m, "turngate_peer_packets_total",
		 "Packets from (rx) and to (tx) peers, all relays.", "direction", ppk, 2);
	labelled(m, "turngate_peer_bytes_total", "Bytes from (rx) and to (tx) peers, all relays.",
		 "direction", pby, 2);
}

/* Buckets are stored per bucket; Prometheus wants them cumulative, ending at +Inf with
 * the count. */
static void render_lifetime(struct mctx *m)
{
	static const char *const name = "turngate_allocation_lifetime_seconds";
	const struct shm_lifetime *h = &m->sum.life;
	uint64_t cum = 0;
	char le[32];

	fam(m, name, "histogram", "Lifetime of ended allocations in seconds.");
	for (unsigned i = 0; i <= SHM_LIFE_BUCKETS; i++) {
		struct label l = { "le", le };
		cum += h->bucket[i];
		if (i < SHM_LIFE_BUCKETS)
			snprintf(le, sizeof(le), "%" PRIu64, shm_life_bound(i));
		else
			snprintf(le, sizeof(le), "+Inf");
		http_buf_printf(m->b, "%s_bucket", name);
		labels(m, &l, 1);
		http_buf_printf(m->b, " %" PRIu64 "\n", cum);
	}
	http_buf_printf(m->b, "%s_sum %" PRIu64 "\n%s_count %" PRIu64 "\n", name, h->sum_s, name,
			cum);
}

/* What an Allocate is refused beyond: total_quota when set (the workers count live
 * records against it), else the table, which is sized at start and fixed. */
static uint64_t alloc_limit(struct mctx *m)
{
	uint32_t q = m->snap ? snap_limits(m->snap)->total_quota : 0;

	return q != 0 && q < m->alloc_cap ? q : m->alloc_cap;
}

static void render_master(struct mctx *m)
{
	const struct http_master_stats *ms = m->ms;
	struct label l = { "result", "success" };

	fam(m, "turngate_reloads_total", "counter", "Configuration reloads, by result.");
	sample_u(m, "turngate_reloads_total", &l, 1, ms->reloads_ok);
	l.value = "failure";
	sample_u(m, "turngate_reloads_total", &l, 1, ms->reloads_failed);
	l.value = "refused";
	sample_u(m, "turngate_reloads_total", &l, 1, ms->reloads_refused);
	scalar_u(m, "turngate_config_generation", "gauge",
		 "Generation of the configuration snapshot being served.", ms->generation);
	/* Prometheus's own prometheus_config_last_reload_successful: an alert on the state,
	 * not on the failure counter, clears with the next good reload. */
	scalar_u(m, "turngate_config_last_reload_successful", "gauge",
		 "1 when the latest reload (or the start) was applied, 0 after a failed or "
		 "refused one.",
		 ms->last_reload_ok ? 1 : 0);
	scalar_u(m, "turngate_allocations_limit", "gauge",
		 "Concurrent allocations admitted: limits.total_quota, else the table size.",
		 alloc_limit(m));
	scalar_u(m, "turngate_worker_restarts_total", "counter",
		 "Worker processes respawned after dying or hanging.", ms->worker_restarts);
	scalar_u(m, "turngate_draining", "gauge", "1 while draining (refusing new allocations).",
		 ms->draining ? 1 : 0);
	{
		struct label b[2] = { { "version", PACKAGE_VERSION }, { "commit", TG_COMMIT } };
		uint64_t written, hook_failures, hook_dropped, hook_backlog;

		fam(m, "turngate_build_info", "gauge",
		    "Always 1; the labels name the running binary's version and git commit.");
		sample_u(m, "turngate_build_info", b, 2, 1);
		shm_records_counts(m->shm, &written, &hook_failures);
		fam(m, "turngate_session_records_total", "counter",
		    "Session records (one per ended allocation), by result: written to "
		    "admin.session_records.file, or dropped (a full queue or a failed write).");
		l.value = "written";
		sample_u(m, "turngate_session_records_total", &l, 1, written);
		l.value = "dropped";
		sample_u(m, "turngate_session_records_total", &l, 1, shm_records_dropped(m->shm));
		scalar_u(m, "turngate_session_webhook_failures_total", "counter",
			 "Failed deliveries of a batch of session records to "
			 "admin.session_records.webhook (each retried later).",
			 hook_failures);
		shm_records_hook_counts(m->shm, &hook_dropped, &hook_backlog);
		scalar_u(m, "turngate_session_webhook_dropped_total", "counter",
			 "Session records the webhook's full backlog dropped (the oldest "
			 "waiting) before they were delivered.",
			 hook_dropped);
		scalar_u(m, "turngate_session_webhook_backlog", "gauge",
			 "Session records waiting for the webhook.", hook_backlog);
	}
	fam(m, "turngate_tls_certificate_expiry_seconds", "gauge",
	    "Seconds until the earliest notAfter of a TLS/DTLS listener's certificates "
	    "(negative: expired).");
	for (size_t i = 0; i < ms->n_certs; i++) {
		struct label c = { "listener", ms->cert_listeners[i] };

		sample_i(m, "turngate_tls_certificate_expiry_seconds", &c, 1,
			 ms->cert_not_after[i] - ms->now);
	}
}

/* Slots that ever ran a worker; counters of dead slots are kept (they stay monotonic). */
static bool slot_used(struct mctx *m, unsigned s, struct shm_slot_info *info)
{
	return shm_slot_read(m->shm, s, info) == 0 && info->state != SHM_SLOT_EMPTY;
}

static void render_workers(struct mctx *m)
{
	const char *name = "turngate_worker_packets_total";
	struct shm_slot_info info;
	struct shm_counters c;
	char slot[16];

	fam(m, name, "counter",
	    "Packets received (rx: clients and peers) and sent (tx) by the worker of a slot.");
	for (unsigned s = 0; s < m->n_slots; s++) {
		struct label l[2] = { { "worker", slot }, { "direction", "rx" } };

		if (!slot_used(m, s, &info) || shm_counters_read(m->shm, s, &c) != 0)
			continue;
		snprintf(slot, sizeof(slot), "%u", s);
		sample_u(m, name, l, 2, c.v[SHM_CTR_CLIENT_PKTS_IN] + c.v[SHM_CTR_PEER_PKTS_IN]);
		l[1].value = "tx";
		sample_u(m, name, l, 2, c.v[SHM_CTR_CLIENT_PKTS_OUT] + c.v[SHM_CTR_PEER_PKTS_OUT]);
	}
	name = "turngate_worker_wakes_coalesced_total";
	fam(m, name, "counter",
	    "Loop iterations the worker of a slot ran while wake-up coalescing was engaged (a "
	    "wait of up to limits.wake_coalesce_us before each poll).");
	for (unsigned s = 0; s < m->n_slots; s++) {
		struct label l = { "worker", slot };

		if (!slot_used(m, s, &info) || shm_counters_read(m->shm, s, &c) != 0)
			continue;
		snprintf(slot, sizeof(slot), "%u", s);
		sample_u(m, name, &l, 1, c.v[SHM_CTR_WAKES_COALESCED]);
	}
	fam(m, "turngate_worker_up", "gauge", "1 while the worker of a slot is running.");
	for (unsigned s = 0; s < m->n_slots; s++) {
		struct label l = { "worker", slot };

		if (!slot_used(m, s, &info))
			continue;
		snprintf(slot, sizeof(slot), "%u", s);
		sample_u(m, "turngate_worker_up", &l, 1, info.state == SHM_SLOT_RUNNING);
	}
}

/* One per-worker process family; field selects the value. */
enum pfield {
	PF_CPU,
	PF_RSS,
	PF_FDS
};

static void worker_proc(struct mctx *m, const char *name, const char *type, const char *help,
			enum pfield f)
{
	char slot[16];
	fam(m, name, type, help);
	for (unsigned s = 0; m->ms->workers != NULL && s < m->ms->n_workers; s++) {
		const struct http_proc_stats *p = &m->ms->workers[s];
		struct label l = { "worker", slot };

		if (!p->valid)
			continue;
		snprintf(slot, sizeof(slot), "%u", s);
		if (f == PF_CPU)
			sample_f(m, name, &l, 1, p->cpu_seconds);
		else
			sample_u(m, name, &l, 1, f == PF_RSS ? p->resident_bytes : p->open_fds);
	}
}

static void render_process(struct mctx *m)
{
	const struct http_proc_stats *p = &m->ms->master;
	if (p->valid) {
		scalar_f(m, "process_cpu_seconds_total", "counter",
			 "Total user and system CPU time of the master process in seconds.",
			 p->cpu_seconds);
		scalar_u(m, "process_resident_memory_bytes", "gauge",
			 "Resident memory size of the master process in bytes.", p->resident_bytes);
		scalar_u(m, "process_virtual_memory_bytes", "gauge",
			 "Virtual memory size of the master process in bytes.", p->virtual_bytes);
		scalar_f(m, "process_start_time_seconds", "gauge",
			 "Start time of the master process since the unix epoch in seconds.",
			 p->start_time);
		scalar_u(m, "process_open_fds", "gauge",
			 "Open file descriptors of the master process.", p->open_fds);
		if (p->max_fds != 0) {
			scalar_u(m, "process_max_fds", "gauge",
				 "Maximum open file descriptors of the master process.",
				 p->max_fds);
		}
	}
	worker_proc(m, "turngate_worker_cpu_seconds_total", "counter",
		    "Total user and system CPU time of a worker process in seconds.", PF_CPU);
	worker_proc(m, "turngate_worker_resident_memory_bytes", "gauge",
		    "Resident memory size of a worker process in bytes.", PF_RSS);
	worker_proc(m, "turngate_worker_open_fds", "gauge",
		    "Open file descriptors of a worker process.", PF_FDS);
}

static void live_view(struct mctx *m)
{
	struct shm_slot_info info;
	struct shm_counters c;

	for (unsigned s = 0; s < m->n_slots; s++) {
		if (shm_slot_read(m->shm, s, &info) != 0 || info.state == SHM_SLOT_EMPTY)
			continue;
		m->n_started += info.incarnation;
		if ((info.state != SHM_SLOT_RUNNING && info.state != SHM_SLOT_STOPPING) ||
		    shm_counters_read(m->shm, s, &c) != 0)
			continue;
		m->n_live++;
		m->live_tcp_peers += c.v[SHM_CTR_TCP_PEER_CONNS];
		for (unsigned i = 0; i < SHM_MAX_LISTENERS; i++)
			m->live_conns[i] += c.lst[i][SHM_LCTR_CONNS_ACTIVE];
	}
}

int http_metrics_render(const struct shm *shm, const struct snap *snap,
			const struct http_master_stats *ms, struct http_buf *out)
{
	struct mctx m = { .b = out, .shm = shm, .snap = snap, .ms = ms };
	struct shm_config cfg;

	if (shm == NULL || ms == NULL)
		return -EINVAL;
	shm_get_config(shm, &cfg);
	m.n_slots = cfg.n_slots;
	m.alloc_cap = cfg.alloc_cap;
	if (shm_counters_sum(shm, &m.sum) != 0)
		return -EIO;
	if (ms->offload_add != NULL)
		shm_counters_add(&m.sum, ms->offload_add);
	live_view(&m);
	render_stunner(&m);
	render_listeners(&m);
	render_global(&m);
	render_lifetime(&m);
	render_offload(&m);
	render_master(&m);
	render_workers(&m);
	render_process(&m);
	return http_buf_error(out);
}
