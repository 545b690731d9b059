/* The listeners[] section: protocol, relay address, ports, TLS material, routes, per-listener
 * overrides. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "conf/conf_internal.h"
#include "conf/tls_pem.h"

struct lst_state {
	struct conf_listener *l;
	yaml_node_t *node, *name, *protocol, *address, *port, *cert, *key, *cert_file, *key_file;
	yaml_node_t *rmin, *rmax, *routes, *auth, *mask, *dual, *pp;
	bool has_rmin, has_rmax;
	char *cert_b64, *key_b64;
};

static int parse_proto(const char *s, enum conf_proto *out)
{
	static const char *const names[] = { "UDP", "TCP", "TLS", "DTLS" };
	const char *x = strncasecmp(s, "TURN-", 5) == 0 ? s + 5 : s;
	for (int i = 0; i < 4; i++) {
		if (strcasecmp(x, names[i]) == 0) {
			*out = (enum conf_proto)i;
			return 0;
		}
	}
	return -EINVAL;
}

/* `address` must be an IP or localhost (STUNner's rule); "" (an unset $STUNNER_ADDR)
 * means the default, as in stunnerd. */
static void parse_address(struct pctx *p, yaml_node_t *v, const char *path, struct conf_listener *l)
{
	char *s = pctx_string(p, v, path, false);
	int fam;
	uint8_t a[16];
	if (s == NULL || s[0] == '\0') {
		free(s);
		return;
	}
	if (strcasecmp(s, "localhost") == 0) {
		free(s);
		s = conf_strdup(p, "127.0.0.1");
		if (s == NULL)
			return;
	}
	if (conf_parse_ip(s, &fam, a) != 0)
		pctx_error(p, v, path,
			   "'%s' is not an IP address (expected an IP address or "
			   "localhost)",
			   s);
	else
		conf_sockaddr_set(&l->relay_addr, fam, a);
	free(l->address);
	l->address = s;
}

static void set_port(struct pctx *p, yaml_node_t *v, const char *path, uint64_t min, uint16_t *dst)
{
	uint64_t x;
	if (!pctx_is_null(v) && pctx_uint(p, v, path, min, 65535, &x) == 0)
		*dst = (uint16_t)x;
}

/* STUNner's `port`: 0 means the default 3478, anything else must be 1..65535. */
static void set_listen_port(struct pctx *p, yaml_node_t *v, const char *path, uint16_t *dst)
{
	int64_t x;
	if (pctx_is_null(v) || pctx_int64(p, v, path, &x) != 0 || x == 0)
		return;
	if (x < 0 || x > 65535)
		pctx_error(p, v, path, "%lld is out of range (1..65535)", (long long)x);
	else
		*dst = (uint16_t)x;
}

/* STUNner's `public_port` only feeds URIs and stunnerd never checks it: a value that is
 * no port is a warning and unset. */
static void set_public_port(struct pctx *p, yaml_node_t *v, const char *path, uint16_t *dst)
{
	int64_t x;
	if (pctx_is_null(v) || pctx_int64(p, v, path, &x) != 0)
		return;
	if (x < 0 || x > 65535)
		pctx_warn(p, v, path, "%lld is not a port (ignored; expected 0..65535)",
			  (long long)x);
	else
		*dst = (uint16_t)x;
}

static void set_opt_str(struct pctx *p, yaml_node_t *v, const char *path, char **dst)
{
	char *s;
	if (pctx_is_null(v))
		return;
	s = pctx_string(p, v, path, false);
	free(*dst);
	*dst = s;
	if (s != NULL && s[0] == '\0') {
		free(s);
		*dst = NULL;
	}
}

/* TLS keys: STUNner's base64 cert/key and our cert_file/key_file. */
static bool lst_tls_pair(struct pctx *p, const char *key, yaml_node_t *v, const char *path,
			 struct lst_state *st)
{
	if (strcasecmp(key, "cert") == 0) {
		st->cert = v;
		set_opt_str(p, v, path, &st->cert_b64);
	} else if (strcasecmp(key, "key") == 0) {
		st->key = v;
		if (!pctx_is_null(v))
			st->key_b64 = pctx_string(p, v, path, false);
	} else if (strcasecmp(key, "cert_file") == 0) {
		st->cert_file = v;
		set_opt_str(p, v, path, &st->l->cert_file);
	} else if (strcasecmp(key, "key_file") == 0) {
		st->key_file = v;
		set_opt_str(p, v, path, &st->l->key_file);
	} else {
		return false;
	}
	return true;
}

static const char *const lst_keys[] = {
	"name", "protocol", "address", "port", "public_address", "public_port", "cert", "key",
	"cert_file", "key_file", "bind_address", "relay_port_min", "relay_port_max",
	"max_allocations", "max_bps", "relay_address_mask", "dual_stack_address", "routes",
	"auth", "proxy_protocol", NULL
};

static void lst_pair(struct pctx *p, const char *key, yaml_node_t *k, yaml_node_t *v,
		     const char *path, void *arg)
{
	struct lst_state *st = arg;
	struct conf_listener *l = st->l;
	if (strcasecmp(key, "name") == 0) {
		st->name = v;
		set_opt_str(p, v, path, &l->name);
	} else if (strcasecmp(key, "protocol") == 0) {
		char *s = pctx_is_null(v) ? NULL : pctx_string(p, v, path, false);
		if (s && s[0] != '\0' && parse_proto(s, &l->protocol) != 0)
			pctx_error(p, v, path,
				   "'%s' is not a listener protocol (expected TURN-UDP, "
				   "TURN-TCP, TURN-TLS or TURN-DTLS)",
				   s);
		free(s);
	} else if (strcasecmp(key, "address") == 0) {
		st->address = v;
		if (!pctx_is_null(v))
			parse_address(p, v, path, l);
	} else if (strcasecmp(key, "port") == 0) {
		st->port = v;
		set_listen_port(p, v, path, &l->port);
	} else if (strcasecmp(key, "public_address") == 0) {
		set_opt_str(p, v, path, &l->public_address);
	} else if (strcasecmp(key, "public_port") == 0) {
		set_public_port(p, v, path, &l->public_port);
	} else if (lst_tls_pair(p, key, v, path, st)) {
		return;
	} else if (strcasecmp(key, "bind_address") == 0) {
		int fam;
		uint8_t a[16];
		set_opt_str(p, v, path, &l->bind_address);
		if (l->bind_address && conf_parse_ip(l->bind_address, &fam, a) != 0)
			pctx_error(p, v, path, "'%s' is not an IP address (expected an IP address)",
				   l->bind_address);
	} else if (strcasecmp(key, "relay_port_min") == 0) {
		st->rmin = v;
		set_port(p, v, path, 1, &l->relay_port_min);
	} else if (strcasecmp(key, "relay_port_max") == 0) {
		st->rmax = v;
		set_port(p, v, path, 1, &l->relay_port_max);
	} else if (strcasecmp(key, "max_allocations") == 0) {
		uint64_t x;
		if (!pctx_is_null(v) && pctx_uint(p, v, path, 0, CONF_MAX_ALLOCATIONS, &x) == 0)
			l->max_allocations = (uint32_t)x;
	} else if (strcasecmp(key, "max_bps") == 0) {
		if (!pctx_is_null(v))
			pctx_uint(p, v, path, 0, CONF_MAX_BPS, &l->max_bps);
	} else if (strcasecmp(key, "relay_address_mask") == 0) {
		st->mask = v;
		set_opt_str(p, v, path, &l->relay_mask);
	} else if (strcasecmp(key, "dual_stack_address") == 0) {
		st->dual = v;
		set_opt_str(p, v, path, &l->dual_stack);
	} else if (strcasecmp(key, "routes") == 0) {
		st->routes = v;
	} else if (strcasecmp(key, "auth") == 0) {
		st->auth = v;
	} else if (strcasecmp(key, "proxy_protocol") == 0) {
		st->pp = v;
		if (!pctx_is_null(v))
			conf_parse_proxyproto(p, v, path, l);
	} else if (p->v1alpha1 && (strcasecmp(key, "min_relay_port") == 0 ||
				   strcasecmp(key, "max_relay_port") == 0)) {
		pctx_warn(p, k, path,
			  "v1alpha1 key dropped by stunnerd's conversion to v1 "
			  "(ignored; v1 puts peer port ranges on cluster endpoints)");
	} else {
		pctx_unknown_key(p, k, path, lst_keys);
	}
}

/* One PEM source: base64 `cert`/`key` (STUNner) or a file (ours), not both. */
static void load_pem(struct pctx *p, const char *path, const char *what, yaml_node_t *b64n,
		     char *b64, yaml_node_t *filen, const char *file, char **pem, size_t *len)
{
	char sub[CONF_PATH_MAX];
	if (b64n && filen) {
		conf_path_key(sub, path, what);
		pctx_error(p, filen, sub, "given together with %.*s (expected one of them)",
			   (int)strcspn(what, "_"), what);
		return;
	}
	if (b64 != NULL) {
		int rc;
		conf_path_key(sub, path, strcmp(what, "cert_file") == 0 ? "cert" : "key");
		rc = conf_base64_decode(b64, pem, len);
		if (rc == -ENOMEM)
			p->nomem = 1;
		else if (rc != 0)
			pctx_error(p, b64n, sub,
				   "base64-decode error (expected base64 of a PEM %s)",
				   strcmp(what, "cert_file") == 0 ? "certificate" : "private key");
	} else if (file != NULL) {
		int rc;
		conf_path_key(sub, path, what);
		rc = conf_read_file(file, 1 << 20, false, pem, len);
		if (rc != 0)
			pctx_error(p, filen, sub,
				   "cannot read '%s': %s (expected a readable PEM "
				   "file)",
				   file, conf_file_strerror(rc));
	}
}

/* A certificate past its notAfter, or within CONF_TLS_EXPIRY_WARN_DAYS of it, is a
 * warning (the listener still serves it: clients decide; an expired one fails theirs). */
static void warn_expiry(struct pctx *p, yaml_node_t *n, const char *path, const char *key,
			int64_t not_after)
{
	int64_t left = not_after - (int64_t)time(NULL);
	char sub[CONF_PATH_MAX], when[32];
	time_t t = (time_t)not_after;
	struct tm tm;

	if (left >= (int64_t)CONF_TLS_EXPIRY_WARN_DAYS * 86400)
		return;
	if (gmtime_r(&t, &tm) == NULL || strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm) == 0)
		snprintf(when, sizeof(when), "%lld", (long long)not_after);
	conf_path_key(sub, path, key);
	if (left < 0)
		pctx_warn(p, n, sub,
			  "certificate expired %lld days ago (notAfter %s UTC); TLS clients "
			  "that check it refuse the handshake: renew it",
			  (long long)(-left / 86400), when);
	else
		pctx_warn(p, n, sub,
			  "certificate expires in %lld days (notAfter %s UTC), under %d days: "
			  "renew it",
			  (long long)(left / 86400), when, CONF_TLS_EXPIRY_WARN_DAYS);
}

static void lst_tls(struct pctx *p, struct lst_state *st, const char *path)
{
	struct conf_listener *l = st->l;
	bool tls = l->protocol == CONF_PROTO_TURN_TLS || l->protocol == CONF_PROTO_TURN_DTLS;
	char sub[CONF_PATH_MAX];
	char err[160];
	int rc;
	load_pem(p, path, "cert_file", st->cert, st->cert_b64, st->cert_file, l->cert_file,
		 &l->cert_pem, &l->cert_pem_len);
	load_pem(p, path, "key_file", st->key, st->key_b64, st->key_file, l->key_file, &l->key_pem,
		 &l->key_pem_len);
	if (tls && (l->cert_pem == NULL || l->key_pem == NULL)) {
		bool nocert = l->cert_pem == NULL;
		bool given = nocert ? (st->cert || st->cert_file) : (st->key || st->key_file);
		conf_path_key(sub, path, nocert ? "cert" : "key");
		if (!given)
			pctx_error(p, st->node, sub,
				   "missing: %s listener without %s (expected %s "
				   "or %s_file)",
				   conf_proto_name(l->protocol),
				   nocert ? "certificate" : "private key", nocert ? "cert" : "key",
				   nocert ? "cert" : "key");
		return;
	}
	if (!tls && (l->cert_pem || l->key_pem)) {
		conf_path_key(sub, path, l->cert_pem ? "cert" : "key");
		pctx_warn(p,
			  st->cert        ? st->cert
			  : st->key       ? st->key
			  : st->cert_file ? st->cert_file
					  : st->key_file,
			  sub, "not used by %s listeners (ignored)", conf_proto_name(l->protocol));
		return;
	}
	if (!tls)
		return;
	rc = conf_tls_check(l->cert_pem, l->cert_pem_len, l->key_pem, l->key_pem_len, err,
			    sizeof(err));
	if (rc == -ENOMEM) {
		p->nomem = 1;
	} else if (rc != 0) {
		bool k = strncmp(err, "key", 3) == 0;
		yaml_node_t *n = k ? (st->key ? st->key : st->key_file)
				   : (st->cert ? st->cert : st->cert_file);
		conf_path_key(sub, path,
			      k ? (st->key ? "key" : "key_file")
				: (st->cert ? "cert" : "cert_file"));
		pctx_error(p, n, sub, "%s", err + (k ? 5 : 6));
	} else if (conf_pem_not_after(l->cert_pem, l->cert_pem_len, &l->cert_not_after) == 0) {
		warn_expiry(p, st->cert ? st->cert : st->cert_file, path, st->cert ? "cert" : "cert_file",
			    l->cert_not_after);
	}
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool cluster_known(const struct conf *c, const char *name)
{
	for (size_t i = 0; i < c->n_clusters; i++)
		if (c->clusters[i].name && strcmp(c->clusters[i].name, name) == 0)
			return true;
	return false;
}

/* STUNner sorts routes; we also drop repeats so the compiled allowlist has no duplicates. */
static void lst_routes(struct pctx *p, struct lst_state *st, const char *path)
{
	struct conf_listener *l = st->l;
	yaml_node_t *n = st->routes;
	char sub[CONF_PATH_MAX];
	size_t cnt, w = 0;
	conf_path_key(sub, path, "routes");
	if (n == NULL || pctx_is_null(n) || !pctx_list(p, n, sub, "routes", CONF_MAX_ITEMS, &cnt))
		return;
	l->routes = calloc(cnt ? cnt : 1, sizeof(char *));
	if (l->routes == NULL) {
		p->nomem = 1;
		return;
	}
	for (size_t i = 0; i < cnt && !p->nomem; i++) {
		char item[CONF_PATH_MAX];
		yaml_node_t *r = pctx_node(p, n->data.sequence.items.start[i]);
		char *s;
		conf_path_idx(item, sub, i);
		s = pctx_string(p, r, item, false);
		if (s == NULL)
			continue;
		/* The operator renders a route whose backend it cannot render this way, and
		 * stunnerd matches nothing for it: a warning, not an outage. */
		if (!cluster_known(p->cfg, s)) {
			pctx_warn(p, r, item,
				  "unknown cluster '%s' (admits no peer until a cluster "
				  "of that name exists)",
				  s);
		}
		l->routes[l->n_routes++] = s;
	}
	qsort(l->routes, l->n_routes, sizeof(char *), str_cmp);
	for (size_t i = 0; i < l->n_routes; i++) {
		if (w > 0 && strcmp(l->routes[w - 1], l->routes[i]) == 0)
			free(l->routes[i]);
		else
			l->routes[w++] = l->routes[i];
	}
	l->n_routes = w;
	for (size_t i = 0; i < l->n_routes; i++)
		p->cfg->n_unknown_routes += !cluster_known(p->cfg, l->routes[i]);
}

/* No `address`: STUNner's operator passes $STUNNER_ADDR (the pod IP); we use it when set,
 * else 0.0.0.0 like stunnerd, which advertises an unusable relay address: warn. */
static void lst_default_address(struct pctx *p, struct lst_state *st, const char *path)
{
	struct conf_listener *l = st->l;
	const char *env = p->getenv ? p->getenv(p->getenv_ctx, "STUNNER_ADDR")
				    : getenv("STUNNER_ADDR");
	int fam;
	uint8_t a[16];
	char sub[CONF_PATH_MAX];
	conf_path_key(sub, path, "address");
	if (env != NULL && conf_parse_ip(env, &fam, a) == 0) {
		l->address = conf_strdup(p, env);
	} else {
		pctx_warn(p, st->node, sub,
			  "not set and $STUNNER_ADDR is not an IP: relay "
			  "addresses will be advertised as 0.0.0.0");
		l->address = conf_strdup(p, "0.0.0.0");
		conf_parse_ip("0.0.0.0", &fam, a);
	}
	conf_sockaddr_set(&l->relay_addr, fam, a);
}

static bool lst_udp(const struct conf_listener *l)
{
	return l->protocol == CONF_PROTO_TURN_UDP || l->protocol == CONF_PROTO_TURN_DTLS;
}

/* Two listeners of the same transport on the same port and local address cannot both
 * bind. Without bind_address the worker binds `address` or the wildcard, so listeners
 * are only compared when that choice is the same for both. */
static void lst_port_clash(struct pctx *p, struct lst_state *st, const char *path, size_t idx)
{
	const struct conf_listener *l = st->l;
	const char *mine = l->bind_address ? l->bind_address : l->address;
	/* A port or protocol that failed to parse kept its default: comparing it would only
	 * report a clash the user never wrote. */
	if (p->lst_bad[idx])
		return;
	for (size_t i = 0; mine && i < idx; i++) {
		const struct conf_listener *o = &p->cfg->listeners[i];
		const char *other;
		char sub[CONF_PATH_MAX];
		if (p->lst_bad[i])
			continue;
		other = o->bind_address ? o->bind_address : o->address;
		if (o->port != l->port || lst_udp(o) != lst_udp(l) || other == NULL ||
		    strcmp(mine, other) != 0 ||
		    (o->bind_address == NULL) != (l->bind_address == NULL))
			continue;
		conf_path_key(sub, path, "port");
		pctx_error(p, st->port ? st->port : st->node, sub,
			   "%u/%s on %s is already used by "
			   "listeners[%zu] (expected a different port or address)",
			   l->port, lst_udp(l) ? "udp" : "tcp", mine, i);
		return;
	}
}

/* relay_address_mask: one unicast IP of the family of `address` (the relay sockets are of
 * that family; an announced address of another family would be unreachable). */
static void lst_mask(struct pctx *p, struct lst_state *st, const char *path)
{
	struct conf_listener *l = st->l;
	char sub[CONF_PATH_MAX];
	uint8_t a[16];
	int fam;
	if (l->relay_mask == NULL)
		return;
	conf_path_key(sub, path, "relay_address_mask");
	if (conf_parse_ip(l->relay_mask, &fam, a) != 0) {
		pctx_error(p, st->mask, sub,
			   "'%s' is not an IP address (expected the IP address to announce in "
			   "XOR-RELAYED-ADDRESS, usually the public load balancer's)",
			   l->relay_mask);
		return;
	}
	if (l->relay_addr.ss_family != 0 && fam != l->relay_addr.ss_family) {
		pctx_error(p, st->mask, sub,
			   "'%s' is an %s address but address '%s' is %s (expected an address "
			   "of the relay address's family)",
			   l->relay_mask, fam == AF_INET ? "IPv4" : "IPv6", l->address,
			   l->relay_addr.ss_family == AF_INET ? "IPv4" : "IPv6");
		return;
	}
	if (!conf_ip_unicast(fam, a)) {
		pctx_error(p, st->mask, sub,
			   "'%s' is an unspecified, multicast or broadcast address (expected a "
			   "unicast address)",
			   l->relay_mask);
		return;
	}
	conf_sockaddr_set(&l->relay_mask_addr, fam, a);
}

/* dual_stack_address: one unicast IP of the other family than `address` (the second relay
 * socket of a dual-stack allocation), global enough for a peer to reach (no link-local
 * IPv6, which needs a scope); nothing to do on a masked listener, which makes no
 * dual-stack allocations. */
static void lst_dual(struct pctx *p, struct lst_state *st, const char *path)
{
	struct conf_listener *l = st->l;
	char sub[CONF_PATH_MAX];
	uint8_t a[16];
	int fam;
	if (l->dual_stack == NULL)
		return;
	conf_path_key(sub, path, "dual_stack_address");
	if (conf_parse_ip(l->dual_stack, &fam, a) != 0) {
		pctx_error(p, st->dual, sub,
			   "'%s' is not an IP address (expected the relay IP of the other family "
			   "for dual-stack allocations)",
			   l->dual_stack);
		return;
	}
	if (l->relay_addr.ss_family != 0 && fam == l->relay_addr.ss_family) {
		pctx_error(p, st->dual, sub,
			   "'%s' is of the family of address '%s' (expected an %s address: the "
			   "relay IP of the other family)",
			   l->dual_stack, l->address, fam == AF_INET ? "IPv6" : "IPv4");
		return;
	}
	if (!conf_ip_unicast(fam, a) ||
	    (fam == AF_INET6 && IN6_IS_ADDR_LINKLOCAL((const struct in6_addr *)a))) {
		pctx_error(p, st->dual, sub,
			   "'%s' is an unspecified, multicast, broadcast or link-local address "
			   "(expected a unicast address a peer can reach)",
			   l->dual_stack);
		return;
	}
	if (l->relay_mask != NULL) {
		pctx_error(p, st->dual, sub,
			   "given with relay_address_mask (expected one of them: a masked "
			   "listener makes no dual-stack allocations)");
		return;
	}
	conf_sockaddr_set(&l->dual_stack_addr, fam, a);
}

static void lst_finish(struct pctx *p, struct lst_state *st, const char *path, size_t idx)
{
	struct conf *c = p->cfg;
	struct conf_listener *l = st->l;
	char sub[CONF_PATH_MAX];
	conf_path_key(sub, path, "name");
	if (l->name == NULL)
		pctx_error(p, st->name ? st->name : st->node, sub,
			   "missing name (expected a "
			   "non-empty listener name)");
	for (size_t i = 0; l->name && i < idx; i++)
		if (c->listeners[i].name && strcmp(c->listeners[i].name, l->name) == 0)
			pctx_error(p, st->name, sub,
				   "duplicate listener name '%s' (expected unique "
				   "names; first used by listeners[%zu])",
				   l->name, i);
	if (l->address == NULL)
		lst_default_address(p, st, path);
	lst_port_clash(p, st, path, idx);
	lst_mask(p, st, path);
	lst_dual(p, st, path);
	if (!st->rmin)
		l->relay_port_min = c->admin.relay_port_min;
	if (!st->rmax)
		l->relay_port_max = c->admin.relay_port_max;
	if (l->relay_port_min > l->relay_port_max) {
		conf_path_key(sub, path, st->rmin ? "relay_port_min" : "relay_port_max");
		pctx_error(
			p,
			st->rmin   ? st->rmin
			: st->rmax ? st->rmax
				   : st->node,
			sub,
			"relay_port_min %u is greater than relay_port_max %u (expected MIN <= MAX)",
			l->relay_port_min, l->relay_port_max);
	} else {
		conf_check_relay_ports(p, idx, st->node, st->port, st->rmin, st->rmax, path);
	}
	lst_tls(p, st, path);
	lst_routes(p, st, path);
	if (st->pp && l->pp_versions)
		conf_check_proxyproto(p, st->pp, path, l);
	if (st->auth && !pctx_is_null(st->auth)) {
		l->auth = calloc(1, sizeof(*l->auth));
		if (l->auth == NULL) {
			p->nomem = 1;
			return;
		}
		conf_auth_defaults(l->auth);
		conf_path_key(sub, path, "auth");
		conf_parse_auth(p, st->auth, sub, l->auth, &c->auth);
	}
}

void conf_parse_listeners(struct pctx *p, yaml_node_t *n, const char *path)
{
	struct conf *c = p->cfg;
	size_t cnt;
	if (!pctx_list(p, n, path, "listeners", CONF_MAX_ITEMS, &cnt))
		return;
	c->listeners = calloc(cnt ? cnt : 1, sizeof(*c->listeners));
	p->lst_bad = calloc(cnt ? cnt : 1, sizeof(bool));
	if (c->listeners == NULL || p->lst_bad == NULL) {
		p->nomem = 1;
		goto out;
	}
	for (size_t i = 0; i < cnt && !p->nomem; i++) {
		struct conf_listener *l = &c->listeners[i];
		struct lst_state st = { .l = l,
					.node = pctx_node(p, n->data.sequence.items.start[i]) };
		char sub[CONF_PATH_MAX];
		size_t errors;
		conf_path_idx(sub, path, i);
		c->n_listeners++;
		l->port = CONF_DEF_PORT;
		l->protocol = CONF_PROTO_TURN_UDP;
		errors = p->diags->n_errors;
		pctx_map_each(p, st.node, sub, lst_pair, &st);
		p->lst_bad[i] = p->diags->n_errors > errors;
		if (st.node->type == YAML_MAPPING_NODE && !p->nomem)
			lst_finish(p, &st, sub, i);
		free(st.cert_b64);
		conf_wipe_free(st.key_b64);
	}
out:
	free(p->lst_bad);
	p->lst_bad = NULL;
}
