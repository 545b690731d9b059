/* Snapshot reader: validation on open, bounds-checked accessors, and the per-packet peer allowlist
 * check. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "conf/conf_internal.h"
#include "conf/snap_format.h"

uint32_t snap_crc32c(const uint8_t *p, size_t n)
{
	/* Nibble table for the reflected Castagnoli polynomial 0x82f63b78: small, no init. */
	static const uint32_t t[16] = {
		0x00000000, 0x105ec76f, 0x20bd8ede, 0x30e349b1, 0x417b1dbc, 0x5125dad3,
		0x61c69362, 0x7198540d, 0x82f63b78, 0x92a8fc17, 0xa24bb5a6, 0xb21572c9,
		0xc38d26c4, 0xd3d3e1ab, 0xe330a81a, 0xf36e6f75,
	};
	uint32_t crc = 0xffffffffu;
	for (size_t i = 0; i < n; i++) {
		crc ^= p[i];
		crc = (crc >> 4) ^ t[crc & 15];
		crc = (crc >> 4) ^ t[crc & 15];
	}
	return ~crc;
}

static const uint8_t *base(const struct snap *s)
{
	return (const uint8_t *)s;
}

/* Bounds check against the blob's own length: every accessor goes through this. */
static const void *at(const struct snap *s, uint64_t off, uint64_t size)
{
	if (off + size > s->h.len || off < sizeof(struct snap_hdr))
		return NULL;
	return base(s) + off;
}

static const void *rec(const struct snap *s, const struct snap_tab *t, uint32_t i, size_t size)
{
	if (i >= t->count)
		return NULL;
	return at(s, (uint64_t)t->off + (uint64_t)i * size, size);
}

static const char *str_at(const struct snap *s, const struct snap_str *r)
{
	const char *p = at(s, r->off, (uint64_t)r->len + 1);
	return p && p[r->len] == '\0' ? p : NULL;
}

static bool tab_ok(const struct snap_hdr *h, const struct snap_tab *t, size_t size)
{
	return t->off % 8 == 0 && t->off >= sizeof(*h) &&
	       (uint64_t)t->off + (uint64_t)t->count * size <= h->pool_off;
}

static bool str_ok(const struct snap *s, const struct snap_str *r)
{
	return r->off >= s->h.pool_off && str_at(s, r) != NULL;
}

static bool lst_ok(const struct snap *s, const struct snap_lst_rec *l)
{
	const struct snap_hdr *h = &s->h;
	return str_ok(s, &l->name) && str_ok(s, &l->address) && str_ok(s, &l->public_address) &&
	       str_ok(s, &l->bind_address) && (l->cert.off == 0 || str_ok(s, &l->cert)) &&
	       (l->key.off == 0 || str_ok(s, &l->key)) && l->protocol <= CONF_PROTO_TURN_DTLS &&
	       l->auth_idx < h->auths.count && l->relay_min <= l->relay_max &&
	       (l->relay_family == AF_INET || l->relay_family == AF_INET6) &&
	       (l->mask_family == 0 || l->mask_family == l->relay_family) &&
	       (l->dual_family == 0 ||
		(l->dual_family != l->relay_family &&
		 (l->dual_family == AF_INET || l->dual_family == AF_INET6))) &&
	       (uint64_t)l->v4_first + l->v4_count <= h->pfx4.count &&
	       (uint64_t)l->v6_first + l->v6_count <= h->pfx6.count && l->v4_hosts <= l->v4_count &&
	       l->v6_hosts <= l->v6_count && (l->slot < 64 || l->slot == 0xffff);
}

static bool auth_ok(const struct snap *s, const struct snap_auth_rec *a)
{
	return str_ok(s, &a->realm) && a->type <= CONF_AUTH_EPHEMERAL &&
	       (uint64_t)a->user_first + a->user_count <= s->h.users.count &&
	       (uint64_t)a->secret_first + a->secret_count <= s->h.secrets.count &&
	       a->secret_count <= SNAP_MAX_SECRETS;
}

static bool records_ok(const struct snap *s)
{
	const struct snap_hdr *h = &s->h;
	uint64_t slots = 0;
	for (uint32_t i = 0; i < h->listeners.count; i++) {
		const struct snap_lst_rec *l = rec(s, &h->listeners, i, sizeof(*l));
		if (!lst_ok(s, l))
			return false;
		/* Two listeners on one slot would mix their figures. */
		if (l->slot != 0xffff && (slots & (UINT64_C(1) << l->slot)) != 0)
			return false;
		if (l->slot != 0xffff)
			slots |= UINT64_C(1) << l->slot;
	}
	for (uint32_t i = 0; i < h->clusters.count; i++) {
		const struct snap_cluster_rec *c = rec(s, &h->clusters, i, sizeof(*c));
		if (!str_ok(s, &c->name) || c->type > CONF_CLUSTER_STRICT_DNS ||
		    c->protocol > CONF_CPROTO_TCP)
			return false;
	}
	for (uint32_t i = 0; i < h->auths.count; i++)
		if (!auth_ok(s, rec(s, &h->auths, i, sizeof(struct snap_auth_rec))))
			return false;
	for (uint32_t i = 0; i < h->users.count; i++)
		if (!str_ok(s, &((const struct snap_user_rec *)rec(s, &h->users, i,
								   sizeof(struct snap_user_rec)))
					->name))
			return false;
	for (uint32_t i = 0; i < h->secrets.count; i++) {
		const struct snap_secret_rec *x = rec(s, &h->secrets, i, sizeof(*x));
		if (!str_ok(s, &x->secret) || x->id >= SNAP_MAX_SECRETS)
			return false;
	}
	for (uint32_t i = 0; i < h->pfx4.count; i++) {
		const struct snap_pfx4 *p = rec(s, &h->pfx4, i, sizeof(*p));
		if (p->len > 32 || p->cluster >= h->clusters.count || p->port_min > p->port_max ||
		    p->proto > CONF_CPROTO_TCP)
			return false;
	}
	for (uint32_t i = 0; i < h->pfx6.count; i++) {
		const struct snap_pfx6 *p = rec(s, &h->pfx6, i, sizeof(*p));
		if (p->len > 128 || p->cluster >= h->clusters.count || p->port_min > p->port_max ||
		    p->proto > CONF_CPROTO_TCP)
			return false;
	}
	for (uint32_t i = 0; i < h->siblings.count; i++) {
		const struct snap_sib_rec *x = rec(s, &h->siblings, i, sizeof(*x));
		if ((x->family != AF_INET && x->family != AF_INET6) || x->port_min == 0 ||
		    x->port_min > x->port_max)
			return false;
	}
	return true;
}

int snap_open(const void *blob, size_t len, const struct snap **out)
{
	const struct snap *s = blob;
	const struct snap_hdr *h;
	*out = NULL;
	if (blob == NULL || ((uintptr_t)blob & 7) != 0 || len < sizeof(struct snap_hdr))
		return -EINVAL;
	h = &s->h;
	if (h->magic != SNAP_MAGIC)
		return -EINVAL;
	if (h->version != SNAP_VERSION)
		return -EPROTO;
	if (h->len != len || h->hdr_size != sizeof(*h) || h->pool_off < sizeof(*h) ||
	    (uint64_t)h->pool_off + h->pool_len != len || h->alt_family > AF_INET6 ||
	    h->log_format > CONF_LOG_JSON)
		return -EINVAL;
	if (snap_crc32c((const uint8_t *)blob + 16, len - 16) != h->crc)
		return -EINVAL;
	if (!tab_ok(h, &h->listeners, sizeof(struct snap_lst_rec)) ||
	    !tab_ok(h, &h->clusters, sizeof(struct snap_cluster_rec)) ||
	    !tab_ok(h, &h->auths, sizeof(struct snap_auth_rec)) ||
	    !tab_ok(h, &h->users, sizeof(struct snap_user_rec)) ||
	    !tab_ok(h, &h->secrets, sizeof(struct snap_secret_rec)) ||
	    !tab_ok(h, &h->pfx4, sizeof(struct snap_pfx4)) ||
	    !tab_ok(h, &h->pfx6, sizeof(struct snap_pfx6)) ||
	    !tab_ok(h, &h->siblings, sizeof(struct snap_sib_rec)) || h->auths.count == 0 ||
	    !str_ok(s, &h->log_spec) || !records_ok(s))
		return -EINVAL;
	*out = s;
	return 0;
}

uint64_t snap_generation(const struct snap *s)
{
	return s->h.generation;
}

size_t snap_size(const struct snap *s)
{
	return s->h.len;
}

uint32_t snap_listener_count(const struct snap *s)
{
	return s->h.listeners.count;
}

static const struct snap_lst_rec *lst(const struct snap *s, uint32_t idx)
{
	return rec(s, &s->h.listeners, idx, sizeof(struct snap_lst_rec));
}

static const uint8_t *bytes_or_null(const struct snap *s, const struct snap_str *r, size_t *len)
{
	const char *p = r->off ? str_at(s, r) : NULL;
	*len = p ? r->len : 0;
	return (const uint8_t *)p;
}

int snap_listener_get(const struct snap *s, uint32_t idx, struct snap_listener *out)
{
	const struct snap_lst_rec *l = lst(s, idx);
	if (l == NULL)
		return -ENOENT;
	memset(out, 0, sizeof(*out));
	out->name = str_at(s, &l->name);
	out->address = str_at(s, &l->address);
	out->public_address = str_at(s, &l->public_address);
	out->bind_address = str_at(s, &l->bind_address);
	if (!out->name || !out->address || !out->public_address || !out->bind_address)
		return -EINVAL;
	out->protocol = (enum conf_proto)l->protocol;
	out->port = l->port;
	out->public_port = l->public_port;
	out->relay_port_min = l->relay_min;
	out->relay_port_max = l->relay_max;
	out->max_allocations = l->max_allocs;
	out->max_bps = l->max_bps;
	conf_sockaddr_set(&out->relay_addr, l->relay_family, l->relay_addr);
	if (l->mask_family != 0)
		conf_sockaddr_set(&out->relay_mask, l->mask_family, l->mask_addr);
	if (l->dual_family != 0)
		conf_sockaddr_set(&out->dual_addr, l->dual_family, l->dual_addr);
	out->pp_versions = l->pp_versions;
	out->pp_n_trusted = l->pp_n_trusted < CONF_PP_TRUSTED_MAX ? l->pp_n_trusted
								   : CONF_PP_TRUSTED_MAX;
	for (uint32_t i = 0; i < out->pp_n_trusted; i++) {
		out->pp_trusted[i].family = l->pp_trusted[i].family;
		out->pp_trusted[i].len = l->pp_trusted[i].len;
		memcpy(out->pp_trusted[i].addr, l->pp_trusted[i].addr, 16);
	}
	out->auth_idx = l->auth_idx;
	out->cert_pem = bytes_or_null(s, &l->cert, &out->cert_pem_len);
	out->key_pem = bytes_or_null(s, &l->key, &out->key_pem_len);
	out->n_allow_v4 = l->v4_count;
	out->n_allow_v6 = l->v6_count;
	out->tcp_routes = (l->route_protos & (1u << CONF_CPROTO_TCP)) != 0;
	out->slot = l->slot;
	if (out->bind_address[0] != '\0') {
		int fam;
		uint8_t a[16];
		if (conf_parse_ip(out->bind_address, &fam, a) != 0)
			return -EINVAL;
		conf_sockaddr_set(&out->bind_addr, fam, a);
	}
	return 0;
}

int snap_listener_find(const struct snap *s, const char *name, uint32_t *idx)
{
	for (uint32_t i = 0; i < s->h.listeners.count; i++) {
		const struct snap_lst_rec *l = lst(s, i);
		const char *n = l ? str_at(s, &l->name) : NULL;
		if (n != NULL && strcmp(n, name) == 0) {
			*idx = i;
			return 0;
		}
	}
	return -ENOENT;
}

uint32_t snap_cluster_count(const struct snap *s)
{
	return s->h.clusters.count;
}

const char *snap_cluster_name(const struct snap *s, uint32_t idx)
{
	const struct snap_cluster_rec *c = rec(s, &s->h.clusters, idx, sizeof(*c));
	return c ? str_at(s, &c->name) : NULL;
}

/* What one lookup asks of an entry besides its address: the peer's port (when check),
 * the peer's special-purpose category (then only an entry that admits that category
 * admits it: one inside a range of it, or of a cluster that names it in admit_special)
 * and its transport (the entry's cluster protocol must be it). */
struct peer_q {
	uint16_t port;
	bool check;
	uint8_t special; /* CONF_SPECIAL_* bit, 0 for an ordinary address */
	uint8_t proto;
};

static bool entry_ok(const struct peer_q *q, uint8_t special, uint8_t proto, uint16_t min,
		     uint16_t max)
{
	return proto == q->proto && (q->special & ~special) == 0 &&
	       (!q->check || (q->port >= min && q->port <= max));
}

/* Exact hosts: binary search for the first entry with this address, then its neighbours
 * (same host, other port ranges or protocols). Rest: linear scan, longest prefix first. */
static int match_v4(const struct snap_pfx4 *t, uint32_t n, uint32_t hosts, uint32_t a,
		    const struct peer_q *q, uint32_t *cluster)
{
	uint32_t lo = 0, hi = hosts;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (t[mid].addr < a)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (uint32_t i = lo; i < hosts && t[i].addr == a; i++) {
		if (entry_ok(q, t[i].special, t[i].proto, t[i].port_min, t[i].port_max)) {
			*cluster = t[i].cluster;
			return 0;
		}
	}
	for (uint32_t i = hosts; i < n; i++) {
		if ((a & t[i].mask) == t[i].addr &&
		    entry_ok(q, t[i].special, t[i].proto, t[i].port_min, t[i].port_max)) {
			*cluster = t[i].cluster;
			return 0;
		}
	}
	return -EACCES;
}

static bool v6_in(const uint8_t *a, const uint8_t *pfx, unsigned len)
{
	unsigned full = len / 8, rem = len % 8;
	if (memcmp(a, pfx, full) != 0)
		return false;
	return rem == 0 || ((a[full] ^ pfx[full]) & (uint8_t)(0xffu << (8 - rem))) == 0;
}

static int match_v6(const struct snap_pfx6 *t, uint32_t n, uint32_t hosts, const uint8_t *a,
		    const struct peer_q *q, uint32_t *cluster)
{
	uint32_t lo = 0, hi = hosts;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (memcmp(t[mid].addr, a, 16) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (uint32_t i = lo; i < hosts && memcmp(t[i].addr, a, 16) == 0; i++) {
		if (entry_ok(q, t[i].special, t[i].proto, t[i].port_min, t[i].port_max)) {
			*cluster = t[i].cluster;
			return 0;
		}
	}
	for (uint32_t i = hosts; i < n; i++) {
		if (v6_in(a, t[i].addr, t[i].len) &&
		    entry_ok(q, t[i].special, t[i].proto, t[i].port_min, t[i].port_max)) {
			*cluster = t[i].cluster;
			return 0;
		}
	}
	return -EACCES;
}

/* Embedded IPv4 is used to deny only: the datagram goes to the literal IPv6 address, so
 * it is the literal address that the routes must cover (a 64:ff9b::/96 or 2002::/16 peer
 * never matches an IPv4 prefix), but a NAT64 or 6to4 gateway on the path would deliver it
 * to the embedded IPv4 host, which must not be one a route could never name. An
 * IPv4-mapped address is not an IPv6 destination at all: a dual-stack socket sends it as
 * IPv4, to an address the IPv6 check did not look at; it is refused outright (as coturn
 * does since CVE-2020-26262). */
static bool v6_embed_denied(const struct sockaddr_in6 *sin6)
{
	int fam = AF_INET6;
	uint8_t v4[16];
	if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr))
		return true;
	memcpy(v4, &sin6->sin6_addr, 16);
	conf_canon_addr(&fam, v4);
	return fam == AF_INET && conf_addr_is_special(AF_INET, v4);
}

int snap_peer_match(const struct snap *s, uint32_t listener_idx, const struct sockaddr *peer,
		    enum conf_cluster_proto proto, bool check_port, uint32_t *cluster_idx)
{
	const struct snap_lst_rec *l = lst(s, listener_idx);
	struct peer_q q = { .check = check_port, .proto = (uint8_t)proto };
	uint8_t a[16] = { 0 };
	uint32_t cl = 0;
	int rc;
	if (l == NULL)
		return -ENOENT;
	if (peer->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)peer;
		const struct snap_pfx4 *t = at(s,
					       s->h.pfx4.off + (uint64_t)l->v4_first * sizeof(*t),
					       (uint64_t)l->v4_count * sizeof(*t));
		memcpy(a, &sin->sin_addr, 4);
		q.port = ntohs(sin->sin_port);
		q.special = (uint8_t)conf_addr_special(AF_INET, a);
		rc = t ? match_v4(t, l->v4_count, l->v4_hosts <= l->v4_count ? l->v4_hosts : 0,
				  ntohl(sin->sin_addr.s_addr), &q, &cl)
		       : -EACCES;
	} else if (peer->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)peer;
		const struct snap_pfx6 *t = at(s,
					       s->h.pfx6.off + (uint64_t)l->v6_first * sizeof(*t),
					       (uint64_t)l->v6_count * sizeof(*t));
		if (v6_embed_denied(sin6))
			return -EACCES;
		memcpy(a, &sin6->sin6_addr, 16);
		q.port = ntohs(sin6->sin6_port);
		q.special = (uint8_t)conf_addr_special(AF_INET6, a);
		rc = t ? match_v6(t, l->v6_count, l->v6_hosts <= l->v6_count ? l->v6_hosts : 0, a,
				  &q, &cl)
		       : -EACCES;
	} else {
		return -EAFNOSUPPORT;
	}
	if (rc == 0 && cluster_idx != NULL)
		*cluster_idx = cl;
	return rc;
}

bool snap_peer_allowed(const struct snap *s, uint32_t listener_idx, const struct sockaddr *peer,
		       enum conf_cluster_proto proto)
{
	return snap_peer_match(s, listener_idx, peer, proto, true, NULL) == 0;
}

bool snap_peer_ip_allowed(const struct snap *s, uint32_t listener_idx, const struct sockaddr *peer,
			  enum conf_cluster_proto proto)
{
	return snap_peer_match(s, listener_idx, peer, proto, false, NULL) == 0;
}

uint32_t snap_auth_count(const struct snap *s)
{
	return s->h.auths.count;
}

static const struct snap_auth_rec *auth_rec(const struct snap *s, uint32_t idx)
{
	return rec(s, &s->h.auths, idx, sizeof(struct snap_auth_rec));
}

int snap_auth_get(const struct snap *s, uint32_t auth_idx, struct snap_auth *out)
{
	const struct snap_auth_rec *a = auth_rec(s, auth_idx);
	if (a == NULL)
		return -ENOENT;
	out->type = (enum conf_auth_type)a->type;
	out->realm = str_at(s, &a->realm);
	out->realm_len = a->realm.len;
	out->strict_expiry = a->strict_expiry != 0;
	out->n_users = a->user_count;
	out->n_secrets = a->secret_count;
	return out->realm ? 0 : -EINVAL;
}

static int name_cmp(const struct snap *s, const struct snap_user_rec *u, const char *name,
		    size_t len)
{
	const char *un = str_at(s, &u->name);
	size_t ul;
	int c;
	if (un == NULL)
		return 1;
	ul = u->name.len;
	c = memcmp(un, name, ul < len ? ul : len);
	return c ? c : (ul > len) - (ul < len);
}

int snap_auth_user_key(const struct snap *s, uint32_t auth_idx, const char *username, size_t ulen,
		       enum snap_key_alg alg, const uint8_t **key, size_t *key_len)
{
	const struct snap_auth_rec *a = auth_rec(s, auth_idx);
	uint32_t lo = 0, hi;
	if (a == NULL || a->type != CONF_AUTH_STATIC)
		return -ENOENT;
	if (alg != SNAP_KEY_MD5 && alg != SNAP_KEY_SHA256)
		return -EINVAL;
	hi = a->user_count;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const struct snap_user_rec *u =
			rec(s, &s->h.users, a->user_first + mid, sizeof(*u));
		int c;
		if (u == NULL)
			return -EINVAL;
		c = name_cmp(s, u, username, ulen);
		if (c == 0) {
			*key = alg == SNAP_KEY_MD5 ? u->md5 : u->sha256;
			*key_len = alg == SNAP_KEY_MD5 ? SNAP_KEY_MD5_LEN : SNAP_KEY_SHA256_LEN;
			return 0;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -ENOENT;
}

const char *snap_auth_user_name(const struct snap *s, uint32_t auth_idx, uint32_t i)
{
	const struct snap_auth_rec *a = auth_rec(s, auth_idx);
	const struct snap_user_rec *u;
	if (a == NULL || i >= a->user_count)
		return NULL;
	u = rec(s, &s->h.users, a->user_first + i, sizeof(*u));
	return u ? str_at(s, &u->name) : NULL;
}

size_t snap_auth_secrets(const struct snap *s, uint32_t auth_idx, int64_t now,
			 struct snap_secret out[SNAP_MAX_SECRETS])
{
	const struct snap_auth_rec *a = auth_rec(s, auth_idx);
	size_t n = 0;
	if (a == NULL || a->type != CONF_AUTH_EPHEMERAL)
		return 0;
	for (uint32_t i = 0; i < a->secret_count && n < SNAP_MAX_SECRETS; i++) {
		const struct snap_secret_rec *x =
			rec(s, &s->h.secrets, a->secret_first + i, sizeof(*x));
		const char *p = x ? str_at(s, &x->secret) : NULL;
		if (p == NULL || (x->deadline != 0 && now >= x->deadline))
			continue;
		out[n++] = (struct snap_secret){ (const uint8_t *)p, x->secret.len, x->id,
						 x->deadline };
	}
	return n;
}

uint32_t snap_sibling_count(const struct snap *s)
{
	return s->h.siblings.count;
}

int snap_sibling_get(const struct snap *s, uint32_t idx, struct snap_sibling *out)
{
	const struct snap_sib_rec *x = rec(s, &s->h.siblings, idx, sizeof(*x));

	memset(out, 0, sizeof(*out));
	if (x == NULL)
		return -ENOENT;
	out->relay_port_min = x->port_min;
	out->relay_port_max = x->port_max;
	conf_sockaddr_set(&out->addr, x->family, x->addr); /* AF_INET or AF_INET6 (open) */
	return 0;
}

const struct snap_limits *snap_limits(const struct snap *s)
{
	return &s->h.limits;
}

const uint8_t *snap_nonce_key(const struct snap *s)
{
	return s->h.nonce_key;
}

const char *snap_log_spec(const struct snap *s)
{
	const char *p = str_at(s, &s->h.log_spec);
	return p ? p : CONF_DEF_LOGLEVEL;
}

enum conf_log_format snap_log_format(const struct snap *s)
{
	return s->h.log_format == CONF_LOG_JSON ? CONF_LOG_JSON : CONF_LOG_TEXT;
}

uint32_t snap_drain_timeout(const struct snap *s)
{
	return s->h.drain_timeout;
}

size_t snap_http_ports(const struct snap *s, uint16_t out[SNAP_HTTP_PORTS])
{
	size_t n = 0;
	for (size_t i = 0; i < SNAP_HTTP_PORTS; i++)
		if (s->h.http_ports[i] != 0)
			out[n++] = s->h.http_ports[i];
	return n;
}

int snap_alternate_server(const struct snap *s, struct sockaddr_storage *out)
{
	memset(out, 0, sizeof(*out));
	if (s->h.alt_family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)out;
		a->sin_family = AF_INET;
		a->sin_port = htons(s->h.alt_port);
		memcpy(&a->sin_addr, s->h.alt_addr, 4);
		return 0;
	}
	if (s->h.alt_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)out;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(s->h.alt_port);
		memcpy(&a->sin6_addr, s->h.alt_addr, 16);
		return 0;
	}
	return -ENOENT;
}

/* A prefix match on whole bytes, then the remaining bits. */
static bool pp_in_prefix(const struct conf_prefix *p, const uint8_t *a)
{
	unsigned full = p->len / 8u, rest = p->len % 8u;

	if (memcmp(p->addr, a, full) != 0)
		return false;
	return rest == 0 || ((p->addr[full] ^ a[full]) & (uint8_t)(0xFF00u >> rest)) == 0;
}

bool snap_listener_pp_trusted(const struct snap_listener *l, const struct sockaddr *sa)
{
	const uint8_t *a;
	int fam = sa->sa_family;

	if (fam == AF_INET) {
		a = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
	} else if (fam == AF_INET6) {
		a = (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)a)) {
			fam = AF_INET;
			a += 12;
		}
	} else {
		return false;
	}
	for (uint32_t i = 0; i < l->pp_n_trusted; i++)
		if (l->pp_trusted[i].family == fam && pp_in_prefix(&l->pp_trusted[i], a))
			return true;
	return false;
}
