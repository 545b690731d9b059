/* Builds snapshot blobs from a struct conf: compiled allowlists, auth keys, limits, string pool. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "common/grow.h"
#include "conf/conf_internal.h"
#include "conf/snap_format.h"
#include "http/http.h" /* the endpoints' default ports, nothing linked */

static_assert(sizeof(struct snap_hdr) % 8 == 0, "header size");
static_assert(sizeof(struct snap_lst_rec) % 8 == 0, "listener record size");
static_assert(sizeof(struct snap_cluster_rec) % 8 == 0, "cluster record size");
static_assert(sizeof(struct snap_auth_rec) % 8 == 0, "auth record size");
static_assert(sizeof(struct snap_user_rec) % 8 == 0, "user record size");
static_assert(sizeof(struct snap_secret_rec) % 8 == 0, "secret record size");
static_assert(sizeof(struct snap_pfx4) % 8 == 0, "pfx4 record size");
static_assert(sizeof(struct snap_pfx6) % 8 == 0, "pfx6 record size");
static_assert(sizeof(struct snap_sib_rec) % 8 == 0, "sibling record size");
static_assert(CONF_SPECIAL_COUNT <= 8, "special categories fit a prefix record's byte");

/* Builder state. Tables are separate arrays until the final copy; strings go to a pool
 * whose final offset (pool_off) is known before the first string is added. */
struct sb {
	const struct conf *cfg;
	struct snap_lst_rec *lst;
	struct snap_cluster_rec *cls;
	struct snap_auth_rec *auths;
	struct snap_user_rec *users;
	struct snap_secret_rec *secrets;
	struct snap_pfx4 *p4;
	struct snap_pfx6 *p6;
	struct snap_sib_rec *sibs;
	size_t n_lst, n_cls, n_auths, n_users, n_secrets, n_p4, n_p6, n_sibs;
	size_t cap_p4, cap_p6;
	uint8_t *pool;
	size_t pool_len, pool_cap;
	uint64_t pool_off;
	int err;
};

static struct snap_str pool_add(struct sb *b, const void *data, size_t len)
{
	struct snap_str r = { 0, 0 };
	int rc;
	if (b->err)
		return r;
	if (b->pool_off + b->pool_len + len + 1 > UINT32_MAX) {
		b->err = -E2BIG;
		return r;
	}
	/* the pool holds secrets (passwords, TLS keys): a grown pool leaves no copy behind */
	rc = GROW_ARRAY_WIPE(&b->pool, &b->pool_cap, b->pool_len + len + 1, 1024);
	if (rc < 0) {
		b->err = rc;
		return r;
	}
	if (len)
		memcpy(b->pool + b->pool_len, data, len);
	b->pool[b->pool_len + len] = 0;
	r.off = (uint32_t)(b->pool_off + b->pool_len);
	r.len = (uint32_t)len;
	b->pool_len += len + 1;
	return r;
}

static struct snap_str pool_str(struct sb *b, const char *s)
{
	return pool_add(b, s ? s : "", s ? strlen(s) : 0);
}

static int find_cluster(const struct conf *c, const char *name)
{
	for (size_t i = 0; i < c->n_clusters; i++)
		if (c->clusters[i].name && strcmp(c->clusters[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* The port of an admin.*_endpoint URL as http_endpoint_parse (http/http_endpoint.c, which
 * the master binds with) reads it: "http://HOST[:PORT][/PATH]", HOST empty, an IPv4
 * literal, "localhost" or a bracketed IPv6 literal; dflt when absent; 0 for an unset URL or
 * ":0". Only the port is needed: the worker treats it as a port of every local address. */
static uint16_t http_port(const char *url, uint16_t dflt)
{
	const char *p, *end;
	unsigned long v = 0;
	if (url == NULL || strncmp(url, "http://", 7) != 0)
		return 0;
	p = url + 7;
	end = p + strcspn(p, "/");
	if (*p == '[') {
		const char *rb = memchr(p, ']', (size_t)(end - p));
		p = rb ? rb + 1 : end;
	} else {
		const char *colon = memchr(p, ':', (size_t)(end - p));
		p = colon ? colon : end;
	}
	if (p >= end || *p != ':')
		return dflt;
	for (p++; p < end && *p >= '0' && *p <= '9' && v <= 65535; p++)
		v = v * 10 + (unsigned long)(*p - '0');
	return v <= 65535 ? (uint16_t)v : 0;
}

/* Each entry is zeroed before it is filled: its pad bytes go into the blob and sort_dedup
 * compares entries with memcmp up to the cluster field (pad0 included). */
static void add_prefix(struct sb *b, const struct conf_prefix *p, uint16_t pmin, uint16_t pmax,
		       unsigned admit, uint8_t proto, uint32_t cluster)
{
	int rc;
	if (b->err)
		return;
	if (p->family == AF_INET) {
		struct snap_pfx4 *e;
		uint32_t a;
		rc = GROW_ARRAY(&b->p4, &b->cap_p4, b->n_p4 + 1, 16);
		if (rc < 0) {
			b->err = rc;
			return;
		}
		e = &b->p4[b->n_p4++];
		memset(e, 0, sizeof(*e));
		memcpy(&a, p->addr, 4);
		e->addr = ntohl(a);
		e->mask = p->len ? (uint32_t)(0xffffffffu << (32 - p->len)) : 0;
		e->len = p->len;
		e->port_min = pmin;
		e->port_max = pmax;
		e->special = (uint8_t)admit;
		e->proto = proto;
		e->cluster = cluster;
	} else {
		struct snap_pfx6 *e;
		rc = GROW_ARRAY(&b->p6, &b->cap_p6, b->n_p6 + 1, 16);
		if (rc < 0) {
			b->err = rc;
			return;
		}
		e = &b->p6[b->n_p6++];
		memset(e, 0, sizeof(*e));
		memcpy(e->addr, p->addr, 16);
		e->len = p->len;
		e->port_min = pmin;
		e->port_max = pmax;
		e->special = (uint8_t)admit;
		e->proto = proto;
		e->cluster = cluster;
	}
}

/* DNS answers are exact hosts, all ports; special-purpose answers are left out unless the
 * cluster names their category in admit_special (a name never reaches one by itself). */
static void add_resolved(struct sb *b, const struct conf_cluster *cl,
			 const struct conf_endpoint *ep, uint32_t cluster)
{
	for (size_t k = 0; k < ep->n_resolved; k++) {
		struct conf_prefix p = { 0 };
		unsigned cats = conf_sockaddr_special((const struct sockaddr *)&ep->resolved[k]);
		if (conf_addr_canon((const struct sockaddr *)&ep->resolved[k], &p.family, p.addr) !=
			    0 ||
		    (cats & ~cl->admit_special) != 0)
			continue;
		p.len = p.family == AF_INET ? 32 : 128;
		add_prefix(b, &p, 0, 65535, cl->admit_special, (uint8_t)cl->protocol, cluster);
	}
}

/* Tie-break shared by both prefix orders once length and address are equal: port range,
 * protocol, then cluster index, all ascending. */
static int cmp_ports_cluster(uint16_t amin, uint16_t amax, uint8_t aproto, uint32_t acl,
			     uint16_t bmin, uint16_t bmax, uint8_t bproto, uint32_t bcl)
{
	if (amin != bmin)
		return amin < bmin ? -1 : 1;
	if (amax != bmax)
		return amax < bmax ? -1 : 1;
	if (aproto != bproto)
		return aproto < bproto ? -1 : 1;
	if (acl != bcl)
		return acl < bcl ? -1 : 1;
	return 0;
}

static int cmp_p4(const void *x, const void *y)
{
	const struct snap_pfx4 *a = x, *b = y;
	if (a->len != b->len)
		return a->len > b->len ? -1 : 1;
	if (a->addr != b->addr)
		return a->addr < b->addr ? -1 : 1;
	return cmp_ports_cluster(a->port_min, a->port_max, a->proto, a->cluster, b->port_min,
				 b->port_max, b->proto, b->cluster);
}

static int cmp_p6(const void *x, const void *y)
{
	const struct snap_pfx6 *a = x, *b = y;
	int c;
	if (a->len != b->len)
		return a->len > b->len ? -1 : 1;
	c = memcmp(a->addr, b->addr, 16);
	if (c != 0)
		return c;
	return cmp_ports_cluster(a->port_min, a->port_max, a->proto, a->cluster, b->port_min,
				 b->port_max, b->proto, b->cluster);
}

/* Sorts [first, n) and drops entries that repeat an earlier one's prefix, ports and
 * protocol (the earlier, lower cluster index, is the one a lookup would report anyway). */
static size_t sort_dedup(void *base, size_t first, size_t n, size_t size,
			 int (*cmp)(const void *, const void *), size_t cmp_len)
{
	char *v;
	size_t cnt, w = 0;
	if (n == first)
		return n; /* base may be NULL: nothing was added */
	v = (char *)base + first * size;
	cnt = n - first;
	qsort(v, cnt, size, cmp);
	for (size_t i = 0; i < cnt; i++) {
		if (w > 0 && memcmp(v + (w - 1) * size, v + i * size, cmp_len) == 0)
			continue;
		if (w != i)
			memcpy(v + w * size, v + i * size, size);
		w++;
	}
	memset(v + w * size, 0, (cnt - w) * size);
	return first + w;
}

static void compile_allowlist(struct sb *b, const struct conf_listener *l, struct snap_lst_rec *r)
{
	size_t f4 = b->n_p4, f6 = b->n_p6;
	for (size_t i = 0; i < l->n_routes && !b->err; i++) {
		int ci = find_cluster(b->cfg, l->routes[i]);
		const struct conf_cluster *cl;
		if (ci < 0)
			continue; /* validation rejects these; a snapshot just matches nothing */
		cl = &b->cfg->clusters[ci];
		r->route_protos |= (uint16_t)(1u << cl->protocol);
		for (size_t j = 0; j < cl->n_endpoints && !b->err; j++) {
			const struct conf_endpoint *ep = &cl->endpoints[j];
			if (cl->type == CONF_CLUSTER_STRICT_DNS)
				add_resolved(b, cl, ep, (uint32_t)ci);
			else
				add_prefix(b, &ep->prefix, ep->port_min, ep->port_max,
					   conf_prefix_special(&ep->prefix) | cl->admit_special,
					   (uint8_t)cl->protocol, (uint32_t)ci);
		}
	}
	if (b->err)
		return;
	b->n_p4 = sort_dedup(b->p4, f4, b->n_p4, sizeof(*b->p4), cmp_p4,
			     offsetof(struct snap_pfx4, cluster));
	b->n_p6 = sort_dedup(b->p6, f6, b->n_p6, sizeof(*b->p6), cmp_p6,
			     offsetof(struct snap_pfx6, cluster));
	r->v4_first = (uint32_t)f4;
	r->v4_count = (uint32_t)(b->n_p4 - f4);
	r->v6_first = (uint32_t)f6;
	r->v6_count = (uint32_t)(b->n_p6 - f6);
	while (r->v4_hosts < r->v4_count && b->p4[f4 + r->v4_hosts].len == 32)
		r->v4_hosts++;
	while (r->v6_hosts < r->v6_count && b->p6[f6 + r->v6_hosts].len == 128)
		r->v6_hosts++;
}

static int user_cmp(const void *x, const void *y)
{
	const struct conf_user *a = *(const struct conf_user *const *)x;
	const struct conf_user *b = *(const struct conf_user *const *)y;
	size_t la = strlen(a->username), lb = strlen(b->username);
	int c = memcmp(a->username, b->username, la < lb ? la : lb);
	return c ? c : (la > lb) - (la < lb);
}

static void long_term_key(const struct conf_user *u, const char *realm, const EVP_MD *md,
			  uint8_t *out, int *err)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (ctx == NULL || EVP_DigestInit_ex(ctx, md, NULL) != 1 ||
	    EVP_DigestUpdate(ctx, u->username, strlen(u->username)) != 1 ||
	    EVP_DigestUpdate(ctx, ":", 1) != 1 ||
	    EVP_DigestUpdate(ctx, realm, strlen(realm)) != 1 ||
	    EVP_DigestUpdate(ctx, ":", 1) != 1 ||
	    EVP_DigestUpdate(ctx, u->password, strlen(u->password)) != 1 ||
	    EVP_DigestFinal_ex(ctx, out, NULL) != 1)
		*err = -ENOMEM;
	EVP_MD_CTX_free(ctx);
}

/* Users go into the snapshot for static auth only: counted (count_auth) and written
 * (add_auth) through this one function, whatever the parser left in a->users. */
static size_t auth_users(const struct conf_auth *a)
{
	return a->type == CONF_AUTH_STATIC ? a->n_users : 0;
}

static void add_auth(struct sb *b, const struct conf_auth *a)
{
	size_t n_users = auth_users(a);
	struct snap_auth_rec *r = &b->auths[b->n_auths++];
	const struct conf_user **sorted;
	const char *sec[2] = { a->secret, a->prev_secret };
	r->type = (uint32_t)a->type;
	r->realm = pool_str(b, a->realm);
	r->strict_expiry = a->strict_expiry;
	r->user_first = (uint32_t)b->n_users;
	r->secret_first = (uint32_t)b->n_secrets;
	sorted = calloc(n_users + 1, sizeof(*sorted));
	if (sorted == NULL) {
		b->err = -ENOMEM;
		return;
	}
	for (size_t i = 0; i < n_users; i++)
		sorted[i] = &a->users[i];
	qsort(sorted, n_users, sizeof(*sorted), user_cmp);
	for (size_t i = 0; i < n_users && !b->err; i++) {
		struct snap_user_rec *u = &b->users[b->n_users++];
		u->name = pool_str(b, sorted[i]->username);
		long_term_key(sorted[i], a->realm, EVP_md5(), u->md5, &b->err);
		long_term_key(sorted[i], a->realm, EVP_sha256(), u->sha256, &b->err);
		r->user_count++;
	}
	free(sorted);
	for (uint32_t i = 0; i < 2 && a->type == CONF_AUTH_EPHEMERAL; i++) {
		struct snap_secret_rec *s;
		if (sec[i] == NULL)
			continue;
		s = &b->secrets[b->n_secrets++];
		s->secret = pool_str(b, sec[i]);
		s->id = i;
		s->deadline = i ? a->prev_deadline : 0;
		r->secret_count++;
	}
}

static void count_auth(const struct conf_auth *a, size_t *users, size_t *secrets)
{
	*users += auth_users(a);
	*secrets += a->type == CONF_AUTH_EPHEMERAL ? (a->secret != NULL) + (a->prev_secret != NULL)
						   : 0;
}

/* The address of ss into a record's 16 bytes: 4 of them for AF_INET, all for AF_INET6.
 * Returns false (a untouched) for any other family. */
static bool addr_bytes(uint8_t a[16], const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		memcpy(a, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	else if (ss->ss_family == AF_INET6)
		memcpy(a, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
	else
		return false;
	return true;
}

static void fill_listener(struct sb *b, const struct conf_listener *l, struct snap_lst_rec *r)
{
	r->name = pool_str(b, l->name);
	r->address = pool_str(b, l->address);
	r->public_address = pool_str(b, l->public_address);
	r->bind_address = pool_str(b, l->bind_address);
	if (l->cert_pem)
		r->cert = pool_add(b, l->cert_pem, l->cert_pem_len);
	if (l->key_pem)
		r->key = pool_add(b, l->key_pem, l->key_pem_len);
	r->protocol = (uint32_t)l->protocol;
	r->port = l->port;
	r->public_port = l->public_port;
	r->relay_min = l->relay_port_min;
	r->relay_max = l->relay_port_max;
	r->max_allocs = l->max_allocations;
	r->max_bps = l->max_bps;
	r->relay_family = (uint16_t)l->relay_addr.ss_family;
	(void)addr_bytes(r->relay_addr, &l->relay_addr);
	r->mask_family = (uint16_t)l->relay_mask_addr.ss_family;
	(void)addr_bytes(r->mask_addr, &l->relay_mask_addr);
	r->dual_family = (uint16_t)l->dual_stack_addr.ss_family;
	(void)addr_bytes(r->dual_addr, &l->dual_stack_addr);
	r->pp_versions = (uint16_t)l->pp_versions;
	r->pp_n_trusted = (uint16_t)l->pp_n_trusted;
	for (uint32_t i = 0; i < l->pp_n_trusted; i++) {
		r->pp_trusted[i].family = (uint16_t)l->pp_trusted[i].family;
		r->pp_trusted[i].len = l->pp_trusted[i].len;
		memcpy(r->pp_trusted[i].addr, l->pp_trusted[i].addr, 16);
	}
	if (l->auth) {
		r->auth_idx = (uint32_t)b->n_auths;
		add_auth(b, l->auth);
	}
}

static size_t count_siblings(const struct conf *c)
{
	size_t n = 0;

	for (size_t i = 0; i < c->admin.n_siblings; i++)
		if (!c->admin.siblings[i].self)
			n += c->admin.siblings[i].n_resolved;
	return n;
}

/* One record per resolved address of every sibling but this instance. */
static void fill_siblings(struct sb *b)
{
	const struct conf_admin *a = &b->cfg->admin;

	for (size_t i = 0; i < a->n_siblings; i++) {
		const struct conf_sibling *s = &a->siblings[i];

		for (size_t j = 0; !s->self && j < s->n_resolved; j++) {
			const struct sockaddr_storage *ss = &s->resolved[j];
			struct snap_sib_rec *r = &b->sibs[b->n_sibs];

			if (!addr_bytes(r->addr, ss))
				continue;
			r->family = (uint16_t)ss->ss_family;
			r->port_min = s->relay_port_min;
			r->port_max = s->relay_port_max;
			b->n_sibs++;
		}
	}
}

static void fill_header(struct sb *b, struct snap_hdr *h, const struct snap_build_params *pp)
{
	const struct conf *c = b->cfg;
	struct sockaddr_storage alt;
	h->magic = SNAP_MAGIC;
	h->version = SNAP_VERSION;
	h->hdr_size = sizeof(*h);
	h->generation = pp->generation;
	h->log_format = (uint32_t)c->admin.log_format;
	memcpy(h->nonce_key, pp->nonce_key, SNAP_NONCE_KEY_LEN);
	h->limits = (struct snap_limits){
		c->limits.max_allocations,
		c->limits.user_quota,
		c->limits.total_quota,
		c->limits.max_permissions,
		c->limits.max_channels,
		c->limits.allocation_lifetime,
		c->limits.max_allocation_lifetime,
		c->limits.permission_lifetime,
		c->limits.channel_lifetime,
		c->limits.nonce_lifetime,
		c->limits.channel_numbers,
		c->limits.unauth_rate,
		c->limits.unauth_burst,
		c->limits.unauth_prefix_v4,
		c->limits.unauth_prefix_v6,
		c->limits.unauth_trust_window,
		c->limits.unauth_trust_credits,
		c->limits.auth_fail_prefix,
		c->limits.auth_fail_user,
		c->limits.bandwidth_burst_ms,
		c->limits.allocation_bps,
		c->limits.user_bps,
		c->limits.tcp_connections,
		c->limits.tcp_pending_connects,
		c->limits.tcp_connect_timeout,
		c->limits.tcp_buffer,
		c->limits.source_connections,
		c->limits.source_tls_handshakes,
		c->limits.source_dtls_handshakes,
		c->limits.prefix_connections,
		c->limits.prefix_tls_handshakes,
		c->limits.prefix_dtls_handshakes,
		c->limits.preauth_timeout,
		c->limits.wake_coalesce_us,
		c->limits.wake_coalesce_rate,
	};
	h->drain_timeout = c->admin.drain_timeout;
	if (c->admin.alternate_server &&
	    conf_parse_hostport(c->admin.alternate_server, &alt) == 0) {
		h->alt_family = alt.ss_family;
		if (alt.ss_family == AF_INET) {
			const struct sockaddr_in *s4 = (const struct sockaddr_in *)&alt;
			memcpy(h->alt_addr, &s4->sin_addr, 4);
			h->alt_port = ntohs(s4->sin_port);
		} else {
			const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&alt;
			memcpy(h->alt_addr, &s6->sin6_addr, 16);
			h->alt_port = ntohs(s6->sin6_port);
		}
	}
	h->http_ports[0] = http_port(c->admin.healthcheck_endpoint, HTTP_HEALTH_PORT);
	h->http_ports[1] = http_port(c->admin.metrics_endpoint, HTTP_METRICS_PORT);
	h->http_ports[2] = http_port(c->admin.credential_api_endpoint, HTTP_CRED_PORT);
	h->log_spec = pool_str(b, c->admin.loglevel ? c->admin.loglevel : CONF_DEF_LOGLEVEL);
}

static uint64_t place(uint64_t *cur, size_t n, size_t size, struct snap_tab *t)
{
	uint64_t off = *cur;
	t->off = (uint32_t)off;
	t->count = (uint32_t)n;
	*cur += (uint64_t)n * size; /* every record size is a multiple of 8: stays aligned */
	return off;
}

static int sb_alloc(struct sb *b)
{
	const struct conf *c = b->cfg;
	size_t n_auth = 1, n_users = 0, n_secrets = 0;
	count_auth(&c->auth, &n_users, &n_secrets);
	for (size_t i = 0; i < c->n_listeners; i++) {
		if (c->listeners[i].auth) {
			n_auth++;
			count_auth(c->listeners[i].auth, &n_users, &n_secrets);
		}
	}
	b->lst = calloc(c->n_listeners + 1, sizeof(*b->lst));
	b->cls = calloc(c->n_clusters + 1, sizeof(*b->cls));
	b->auths = calloc(n_auth, sizeof(*b->auths));
	b->users = calloc(n_users + 1, sizeof(*b->users));
	b->secrets = calloc(n_secrets + 1, sizeof(*b->secrets));
	b->sibs = calloc(count_siblings(c) + 1, sizeof(*b->sibs));
	if (!b->lst || !b->cls || !b->auths || !b->users || !b->secrets || !b->sibs)
		return -ENOMEM;
	return 0;
}

static void sb_free(struct sb *b)
{
	free(b->lst);
	free(b->cls);
	free(b->auths);
	if (b->users)
		explicit_bzero(b->users, b->n_users * sizeof(*b->users));
	free(b->users);
	free(b->secrets);
	free(b->p4);
	free(b->p6);
	free(b->sibs);
	if (b->pool)
		explicit_bzero(b->pool, b->pool_len);
	free(b->pool);
}

static int sb_emit(struct sb *b, struct snap_hdr *h, void **blob, size_t *len)
{
	uint64_t cur = sizeof(*h);
	uint64_t o[8];
	uint64_t total;
	uint8_t *out;
	o[0] = place(&cur, b->n_lst, sizeof(*b->lst), &h->listeners);
	o[1] = place(&cur, b->n_cls, sizeof(*b->cls), &h->clusters);
	o[2] = place(&cur, b->n_auths, sizeof(*b->auths), &h->auths);
	o[3] = place(&cur, b->n_users, sizeof(*b->users), &h->users);
	o[4] = place(&cur, b->n_secrets, sizeof(*b->secrets), &h->secrets);
	o[5] = place(&cur, b->n_p4, sizeof(*b->p4), &h->pfx4);
	o[6] = place(&cur, b->n_p6, sizeof(*b->p6), &h->pfx6);
	o[7] = place(&cur, b->n_sibs, sizeof(*b->sibs), &h->siblings);
	if (cur != b->pool_off)
		return -EINVAL; /* pool_off was computed from the same counts */
	total = cur + b->pool_len;
	if (total > UINT32_MAX)
		return -E2BIG;
	h->pool_off = (uint32_t)cur;
	h->pool_len = (uint32_t)b->pool_len;
	h->len = (uint32_t)total;
	out = calloc(1, total);
	if (out == NULL)
		return -ENOMEM;
	memcpy(out + o[0], b->lst, b->n_lst * sizeof(*b->lst));
	memcpy(out + o[1], b->cls, b->n_cls * sizeof(*b->cls));
	memcpy(out + o[2], b->auths, b->n_auths * sizeof(*b->auths));
	memcpy(out + o[3], b->users, b->n_users * sizeof(*b->users));
	memcpy(out + o[4], b->secrets, b->n_secrets * sizeof(*b->secrets));
	if (b->n_p4)
		memcpy(out + o[5], b->p4, b->n_p4 * sizeof(*b->p4));
	if (b->n_p6)
		memcpy(out + o[6], b->p6, b->n_p6 * sizeof(*b->p6));
	if (b->n_sibs)
		memcpy(out + o[7], b->sibs, b->n_sibs * sizeof(*b->sibs));
	if (b->pool_len)
		memcpy(out + cur, b->pool, b->pool_len);
	memcpy(out, h, sizeof(*h));
	((struct snap_hdr *)out)->crc = snap_crc32c(out + 16, total - 16);
	*blob = out;
	*len = total;
	return 0;
}

int snap_build(const struct conf *cfg, const struct snap_build_params *pp, void **blob, size_t *len)
{
	struct sb b = { .cfg = cfg };
	struct snap_hdr h;
	int rc;
	size_t n_auth = 1, n_users = 0, n_secrets = 0;
	*blob = NULL;
	*len = 0;
	if (cfg == NULL || cfg->magic != CONF_MAGIC || pp == NULL)
		return -EINVAL;
	memset(&h, 0, sizeof(h));
	rc = sb_alloc(&b);
	if (rc != 0)
		goto out;
	/* Allowlists first: their sizes fix where the string pool starts. */
	b.n_lst = cfg->n_listeners;
	for (size_t i = 0; i < cfg->n_listeners && !b.err; i++)
		compile_allowlist(&b, &cfg->listeners[i], &b.lst[i]);
	b.n_cls = cfg->n_clusters;
	fill_siblings(&b);
	b.pool_off = sizeof(h) + b.n_lst * sizeof(*b.lst) + b.n_cls * sizeof(*b.cls) +
		     b.n_p4 * sizeof(*b.p4) + b.n_p6 * sizeof(*b.p6) + b.n_sibs * sizeof(*b.sibs);
	count_auth(&cfg->auth, &n_users, &n_secrets);
	for (size_t i = 0; i < cfg->n_listeners; i++)
		if (cfg->listeners[i].auth) {
			n_auth++;
			count_auth(cfg->listeners[i].auth, &n_users, &n_secrets);
		}
	b.pool_off += n_auth * sizeof(*b.auths) + n_users * sizeof(*b.users) +
		      n_secrets * sizeof(*b.secrets);
	add_auth(&b, &cfg->auth);
	for (size_t i = 0; i < cfg->n_listeners && !b.err; i++) {
		fill_listener(&b, &cfg->listeners[i], &b.lst[i]);
		b.lst[i].slot = pp->listener_slots ? pp->listener_slots[i]
			      : i < 64 ? (uint16_t)i : (uint16_t)0xffff;
	}
	for (size_t i = 0; i < cfg->n_clusters && !b.err; i++) {
		b.cls[i].name = pool_str(&b, cfg->clusters[i].name);
		b.cls[i].type = (uint32_t)cfg->clusters[i].type;
		b.cls[i].protocol = (uint32_t)cfg->clusters[i].protocol;
	}
	fill_header(&b, &h, pp);
	rc = b.err ? b.err : sb_emit(&b, &h, blob, len);
out:
	explicit_bzero(&h, sizeof(h));
	sb_free(&b);
	return rc;
}

void snap_blob_free(void *blob, size_t len)
{
	if (blob == NULL)
		return;
	explicit_bzero(blob, len);
	free(blob);
}
