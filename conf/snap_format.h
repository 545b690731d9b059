/* Private wire layout of snapshot blobs: header, fixed-size records and the string pool (all
 * offsets from blob start). */
#ifndef TG_CONF_SNAP_FORMAT_H
#define TG_CONF_SNAP_FORMAT_H

#include <stdint.h>

#include "conf/snapshot.h"

/* Every table starts 8-byte aligned; records are sized in multiples of 8. Padding is
 * zero, so equal configs give equal bytes. Integers are host byte order (a blob never
 * leaves the machine); addresses are network byte order. */

struct snap_str {
	uint32_t off;   /* from blob start; off + len < blob length and blob[off + len] == 0 */
	uint32_t len;
};

struct snap_tab {
	uint32_t off;   /* from blob start, 8-aligned */
	uint32_t count;
};

struct snap_hdr {
	uint32_t magic;        /* SNAP_MAGIC */
	uint32_t version;      /* SNAP_VERSION */
	uint32_t len;          /* total blob length */
	uint32_t crc;          /* CRC-32C of bytes [16, len) */
	uint32_t hdr_size;     /* sizeof(struct snap_hdr) */
	uint32_t log_format;
	uint64_t generation;
	struct snap_tab listeners, clusters, auths, users, secrets, pfx4, pfx6, siblings;
	struct snap_str log_spec;
	uint8_t nonce_key[SNAP_NONCE_KEY_LEN];
	struct snap_limits limits;
	uint32_t drain_timeout;
	uint16_t alt_family;   /* 0 = no alternate server */
	uint16_t alt_port;
	uint8_t alt_addr[16];
	uint16_t http_ports[SNAP_HTTP_PORTS]; /* health, metrics, credential API; 0 = off */
	uint32_t pool_off, pool_len;
};

struct snap { /* what a const struct snap * points at */
	struct snap_hdr h;
};

struct snap_lst_rec {
	struct snap_str name, address, public_address, bind_address, cert, key;
	uint32_t protocol;
	uint32_t auth_idx;
	uint16_t port, public_port, relay_min, relay_max;
	uint16_t relay_family;
	uint16_t pad0;
	uint8_t relay_addr[16];
	uint32_t v4_first, v4_count, v6_first, v6_count;
	uint32_t v4_hosts, v6_hosts; /* leading exact-host (/32, /128) entries, sorted by address */
	uint32_t max_allocs; /* listeners[].max_allocations, 0 = unlimited (was padding: 0) */
	uint64_t max_bps;    /* listeners[].max_bps, 0 = unlimited */
	uint16_t mask_family; /* relay_address_mask: 0 = unset */
	uint16_t route_protos; /* bit (1 << enum conf_cluster_proto) per routed cluster protocol */
	uint16_t slot;        /* master's listener slot (shm/shm_lslot.h), since SNAP_VERSION 12 */
	uint16_t pad1;
	uint8_t mask_addr[16];
	uint16_t dual_family; /* dual_stack_address: 0 = unset (since SNAP_VERSION 8) */
	uint16_t pad2[3];
	uint8_t dual_addr[16];
	/* proxy_protocol (since SNAP_VERSION 11): versions bits, 0 = off; trusted CIDRs. */
	uint16_t pp_versions, pp_n_trusted;
	struct snap_pp_cidr {
		uint16_t family;
		uint8_t len, pad;
		uint8_t addr[16];
	} pp_trusted[CONF_PP_TRUSTED_MAX];
};

/* One resolved address of an admin.siblings entry (not this instance's), with its slice. */
struct snap_sib_rec {
	uint16_t family;      /* AF_INET or AF_INET6 */
	uint16_t port_min, port_max;
	uint16_t pad0;
	uint8_t addr[16];
};

struct snap_cluster_rec {
	struct snap_str name;
	uint32_t type, protocol;
};

struct snap_auth_rec {
	struct snap_str realm;
	uint32_t type;
	uint32_t strict_expiry;
	uint32_t user_first, user_count;
	uint32_t secret_first, secret_count;
};

struct snap_user_rec {
	struct snap_str name;
	uint8_t md5[SNAP_KEY_MD5_LEN];
	uint8_t sha256[SNAP_KEY_SHA256_LEN];
};

struct snap_secret_rec {
	struct snap_str secret;
	uint32_t id;
	uint32_t pad0;
	int64_t deadline;
};

/* One allowlist entry. Sorted per listener: exact hosts first (by address), then the
 * rest by descending prefix length and address. An entry admits only peers of its
 * cluster's protocol (proto), so a UDP and a TCP cluster covering one address are two
 * entries. */
struct snap_pfx4 {
	uint32_t addr;          /* host byte order, host bits zero */
	uint32_t mask;          /* host byte order */
	uint16_t port_min, port_max;
	uint8_t len, special;   /* special: the CONF_SPECIAL_* categories this entry admits
				 * (conf_prefix_special | the cluster's admit_special) */
	uint8_t proto;          /* enum conf_cluster_proto of the cluster: the peer transport */
	uint8_t pad0;
	uint32_t cluster;
	uint32_t pad1;
};

struct snap_pfx6 {
	uint8_t addr[16];
	uint16_t port_min, port_max;
	uint8_t len, special;
	uint8_t proto;          /* as snap_pfx4.proto */
	uint8_t pad0;
	uint32_t cluster;
	uint32_t pad1;
};

uint32_t snap_crc32c(const uint8_t *p, size_t n);

#endif
