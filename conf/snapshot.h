/* Snapshot: a loaded config compiled into an immutable, position-independent blob for workers.
 *
 * The master builds a blob from a struct conf (snap_build), copies it wherever it likes
 * (the shared-memory snapshot arena) and publishes it; workers open it (snap_open) and read
 * it only through the accessors below. Inside the blob everything refers to everything else
 * by byte offset from the blob start, never by pointer, so the blob can be mapped at any
 * address, copied with memcpy, and compared byte for byte: building twice from the same
 * config and params gives identical bytes.
 *
 * Layout (little detail the callers need): a header with magic SNAP_MAGIC, format version
 * SNAP_VERSION, total length and a CRC-32C of everything after the header, then tables of
 * fixed-size records (listeners, clusters, auth blocks, users, secrets, v4 and v6 allowlist
 * prefixes, sibling addresses) and a string/bytes pool. snap_open() validates header,
 * checksum and every offset/length/index once; the accessors still bound-check the offsets
 * they follow against the total length (cheap compares) so a blob corrupted after opening
 * cannot make them read outside it.
 *
 * Alignment: the blob must start at an 8-byte aligned address (malloc and the shm arena are).
 *
 * Secrets: the blob holds secrets, static users' long-term keys, TLS private keys and the
 * nonce key. Free it with snap_blob_free() (wipes) and keep shm copies out of reach of
 * anything but master and workers.
 *
 * Process model: snap_build()/snap_blob_free() in the master (and tests/tools); snap_open()
 * and every accessor in any process; accessors never allocate, never block, and are safe on
 * a per-packet path. A const struct snap * stays valid as long as the blob memory does.
 */
#ifndef TG_CONF_SNAPSHOT_H
#define TG_CONF_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "conf/conf.h"

#define SNAP_MAGIC 0x50414e53u   /* "SNAP" little endian */
#define SNAP_VERSION 13u  /* 9: limits.auth_fail_*; 10: limits.source_*, prefix_*, preauth_timeout;
			   * 11: listeners[].proxy_protocol; 12: a listener's slot;
			   * 13: limits.wake_coalesce_* */
#define SNAP_NONCE_KEY_LEN 32
#define SNAP_MAX_SECRETS 2       /* current + previous */

/* Opaque: points at the blob start once snap_open() accepted it. */
struct snap;

struct snap_build_params {
	uint64_t generation;                      /* master's config generation */
	uint8_t nonce_key[SNAP_NONCE_KEY_LEN];    /* kept by the master across reloads */
	const uint16_t *listener_slots;           /* cfg->n_listeners slots (shm/shm_lslot.h);
						   * NULL: slot = position */
};

/* Compiles cfg (with STRICT_DNS already resolved, see conf_resolve_clusters) into a new
 * blob. *blob is malloc'd and owned by the caller (free with snap_blob_free).
 * Returns 0, -EINVAL (cfg is not a valid struct conf), -E2BIG (over 4 GiB) or -ENOMEM. */
int snap_build(const struct conf *cfg, const struct snap_build_params *params, void **blob,
	       size_t *len);

/* Wipes len bytes and frees blob; accepts NULL. */
void snap_blob_free(void *blob, size_t len);

/* Validates blob[0..len) (magic, version, length, checksum, every offset and index) and
 * returns a handle to it. Returns 0, -EINVAL (corrupt or not a snapshot), -EPROTO (other
 * SNAP_VERSION). The handle aliases blob: no copy, nothing to free. */
int snap_open(const void *blob, size_t len, const struct snap **out);

uint64_t snap_generation(const struct snap *s);
size_t snap_size(const struct snap *s);

/* ---- listeners ----------------------------------------------------------------------- */

/* A view of one listener; every pointer points into the blob. Strings are NUL-terminated. */
struct snap_listener {
	const char *name;
	enum conf_proto protocol;
	uint16_t port;
	uint16_t public_port;                     /* 0 when unset */
	uint16_t relay_port_min, relay_port_max;
	const char *address;                      /* relay IP as text */
	struct sockaddr_storage relay_addr;       /* advertised relay IP, port 0 */
	const char *public_address;               /* "" when unset */
	const char *bind_address;                 /* "" when unset: worker decides */
	uint32_t auth_idx;                        /* index for snap_auth_*() */
	const uint8_t *cert_pem, *key_pem;        /* NULL when none */
	size_t cert_pem_len, key_pem_len;
	uint32_t n_allow_v4, n_allow_v6;          /* compiled allowlist sizes */
	struct sockaddr_storage bind_addr;        /* parsed bind_address, port 0;
						   * ss_family AF_UNSPEC when unset */
	uint32_t max_allocations;                 /* live allocations over all workers, 0 none */
	uint64_t max_bps;                         /* listeners[].max_bps, 0 none */
	struct sockaddr_storage relay_mask;       /* relay_address_mask, port 0; ss_family
						   * AF_UNSPEC when unset */
	bool tcp_routes;                          /* a route reaches a protocol: TCP cluster
						   * (an RFC 6062 TCP Allocate may succeed) */
	struct sockaddr_storage dual_addr;        /* dual_stack_address, port 0; ss_family
						   * AF_UNSPEC when unset */
	unsigned pp_versions;                     /* proxy_protocol: PROXYPROTO_V1/V2 bits,
						   * 0 = off */
	uint32_t pp_n_trusted;
	struct conf_prefix pp_trusted[CONF_PP_TRUSTED_MAX];
	uint32_t slot;                            /* its stable slot for every per-listener
						   * figure (shm/shm_lslot.h); 0xffff: none */
};

/* Whether sa (AF_INET/AF_INET6; IPv4-mapped IPv6 as its IPv4) lies in one of l's
 * proxy_protocol.trusted CIDRs. Any process. */
bool snap_listener_pp_trusted(const struct snap_listener *l, const struct sockaddr *sa);

uint32_t snap_listener_count(const struct snap *s);

/* Fills *out for listener idx. Returns 0 or -ENOENT (idx out of range) / -EINVAL. */
int snap_listener_get(const struct snap *s, uint32_t idx, struct snap_listener *out);

/* Finds a listener by name. Returns 0 and *idx, or -ENOENT. */
int snap_listener_find(const struct snap *s, const char *name, uint32_t *idx);

/* ---- peer allowlist ------------------------------------------------------------------ */

/* Checks peer against the allowlist compiled from listener idx's routes, for a peer of
 * transport proto (CONF_CPROTO_UDP: datagrams, CreatePermission and ChannelBind of a UDP
 * allocation, the kernel fast path; CONF_CPROTO_TCP: RFC 6062 Connect, ConnectionAttempt
 * and the permissions of a TCP allocation): only prefixes of clusters whose protocol is
 * proto admit it. The address is matched in its literal family: an IPv6 peer only against
 * IPv6 prefixes, an IPv4 peer only against IPv4 prefixes. An IPv6 address that embeds an
 * IPv4 one (NAT64, 6to4, compatible; conf_addr_canon) is refused when the embedded IPv4
 * is special, and an IPv4-mapped one (::ffff:a.b.c.d, which the kernel sends as IPv4) is
 * always refused. A special-purpose address (conf_addr_special of the literal address)
 * only matches entries that admit its category: an endpoint that lies entirely in a range
 * of that category (listed explicitly, such as 127.0.0.1), or one of a cluster that names
 * the category in admit_special.
 * check_port: also require the peer port inside the endpoint's ":<min-max>" range (the per
 * packet check); false for CreatePermission/ChannelBind, which check the IP only.
 * Returns 0 and, when cluster_idx is not NULL, the index of the admitting cluster
 * (snap_cluster_name); -EACCES when denied; -ENOENT bad listener; -EAFNOSUPPORT. */
int snap_peer_match(const struct snap *s, uint32_t listener_idx, const struct sockaddr *peer,
		    enum conf_cluster_proto proto, bool check_port, uint32_t *cluster_idx);

/* Per-packet form: IP and port. */
bool snap_peer_allowed(const struct snap *s, uint32_t listener_idx, const struct sockaddr *peer,
		       enum conf_cluster_proto proto);

/* Permission form: IP only. */
bool snap_peer_ip_allowed(const struct snap *s, uint32_t listener_idx, const struct sockaddr *peer,
			  enum conf_cluster_proto proto);

uint32_t snap_cluster_count(const struct snap *s);
/* Cluster name, or NULL when idx is out of range. */
const char *snap_cluster_name(const struct snap *s, uint32_t idx);

/* ---- siblings ----------------------------------------------------------------------- */

/* One resolved address of another instance (admin.siblings, less the entry that is this
 * instance and names that did not resolve); a name with several addresses gives several,
 * in the order resolved. */
struct snap_sibling {
	struct sockaddr_storage addr;             /* port 0 */
	uint16_t relay_port_min, relay_port_max;  /* its slice of the relay ports */
};

uint32_t snap_sibling_count(const struct snap *s);
/* Fills *out for sibling address idx. Returns 0 or -ENOENT (idx out of range). */
int snap_sibling_get(const struct snap *s, uint32_t idx, struct snap_sibling *out);

/* ---- authentication ------------------------------------------------------------------- */

/* Auth block 0 is the global `auth`; listeners with their own `auth` have further ones. */
struct snap_auth {
	enum conf_auth_type type;
	const char *realm;
	size_t realm_len;
	bool strict_expiry;
	uint32_t n_users;
	uint32_t n_secrets;          /* configured, ignoring deadlines */
};

enum snap_key_alg {
	SNAP_KEY_MD5 = 0,
	SNAP_KEY_SHA256
};
#define SNAP_KEY_MD5_LEN 16
#define SNAP_KEY_SHA256_LEN 32

uint32_t snap_auth_count(const struct snap *s);
int snap_auth_get(const struct snap *s, uint32_t auth_idx, struct snap_auth *out);

/* Static users: the long-term key of username (not NUL-terminated, ulen bytes) for alg:
 * MD5(username ":" realm ":" password) or SHA-256 of the same string (RFC 8489 §9.2.2; no
 * SASLprep/OpaqueString applied). *key points into the blob. Binary search, no allocation.
 * Returns 0, -ENOENT (no such user, or auth block not static), -EINVAL. */
int snap_auth_user_key(const struct snap *s, uint32_t auth_idx, const char *username, size_t ulen,
		       enum snap_key_alg alg, const uint8_t **key, size_t *key_len);

/* The i-th static username (sorted order), for listings; NULL when out of range. */
const char *snap_auth_user_name(const struct snap *s, uint32_t auth_idx, uint32_t i);

/* One ephemeral (TURN REST) secret valid at some time. */
struct snap_secret {
	const uint8_t *secret;       /* points into the blob */
	size_t len;
	uint32_t id;                 /* 0 = current, 1 = previous */
	int64_t deadline;            /* unix seconds after which it stops verifying; 0 = none */
};

/* Writes the secrets valid at now into out (current first, then previous while
 * now < its deadline) and returns their number (0..SNAP_MAX_SECRETS; 0 also for a bad index
 * or a non-ephemeral block). */
size_t snap_auth_secrets(const struct snap *s, uint32_t auth_idx, int64_t now,
			 struct snap_secret out[SNAP_MAX_SECRETS]);

/* ---- limits, lifetimes, misc ---------------------------------------------------------- */

/* Same fields and meaning as struct conf_limits (conf/conf.h); lives inside the blob. */
struct snap_limits {
	uint32_t max_allocations, user_quota, total_quota, max_permissions, max_channels;
	uint32_t allocation_lifetime, max_allocation_lifetime, permission_lifetime;
	uint32_t channel_lifetime, nonce_lifetime;
	uint32_t channel_numbers;       /* enum conf_chan_range */
	uint32_t unauth_rate, unauth_burst, unauth_prefix_v4, unauth_prefix_v6;
	uint32_t unauth_trust_window, unauth_trust_credits;
	uint32_t auth_fail_prefix, auth_fail_user;
	uint32_t bandwidth_burst_ms;
	uint64_t allocation_bps, user_bps;
	uint32_t tcp_connections, tcp_pending_connects, tcp_connect_timeout, tcp_buffer;
	uint32_t source_connections, source_tls_handshakes, source_dtls_handshakes;
	uint32_t prefix_connections, prefix_tls_handshakes, prefix_dtls_handshakes;
	uint32_t preauth_timeout;
	uint32_t wake_coalesce_us, wake_coalesce_rate;	/* since SNAP_VERSION 13 */
};

/* Pointer into the blob; never NULL for an opened snapshot. */
const struct snap_limits *snap_limits(const struct snap *s);

/* 32 bytes, pointer into the blob. */
const uint8_t *snap_nonce_key(const struct snap *s);

const char *snap_log_spec(const struct snap *s);           /* admin.loglevel */
enum conf_log_format snap_log_format(const struct snap *s);
uint32_t snap_drain_timeout(const struct snap *s);         /* seconds */

/* ALTERNATE-SERVER for drain: 0 and *out (port 0 means the listener's own port), or
 * -ENOENT when none is configured. */
int snap_alternate_server(const struct snap *s, struct sockaddr_storage *out);

/* The TCP ports of the master's HTTP endpoints (health, metrics, credential API; an
 * endpoint that is off, or asks for any free port with ":0", gives none): never a peer
 * port on this instance's addresses (worker/self.c). Fills out and returns how many. */
#define SNAP_HTTP_PORTS 4
size_t snap_http_ports(const struct snap *s, uint16_t out[SNAP_HTTP_PORTS]);

#endif
