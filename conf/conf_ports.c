/* Config cross-check: no relay port range holds a port of the instance's own listeners or HTTP
 * endpoints. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <strings.h>
#include <sys/socket.h>

#include "conf/conf_internal.h"

/* STUNner's default HTTP ports (as http/http.h; conf does not link the HTTP module). */
#define PORTS_HEALTH 8086
#define PORTS_METRICS 8080
#define PORTS_CRED 8088

/* A socket address as far as a config tells it: family 0 = the wildcard (or not known,
 * which must be taken as the wildcard). */
struct ports_addr {
	int family;
	uint8_t ip[16];
};

static void ports_addr_of(const char *s, struct ports_addr *out)
{
	memset(out, 0, sizeof(*out));
	if (s == NULL || conf_parse_ip(s, &out->family, out->ip) != 0)
		out->family = 0;
	else if (memcmp(out->ip, (const uint8_t[16]){ 0 }, 16) == 0)
		out->family = 0;	/* 0.0.0.0 and :: take every address */
}

/* A relay socket of listener l on address b? The relay sockets of l are bound to its
 * `address` (or to the wildcard when that is not local, which a config cannot tell), and
 * without relay_address_mask a dual-stack allocation binds one more of the other family:
 * on dual_stack_address, else on an address the host decides (b of the other family may
 * be that address). */
static bool ports_relay_meets(const struct conf_listener *l, const struct ports_addr *b)
{
	struct ports_addr r;

	ports_addr_of(l->address, &r);
	if (r.family == 0 || b->family == 0)
		return true;
	if (r.family != b->family) {
		if (l->relay_mask != NULL)
			return false;
		if (l->dual_stack_addr.ss_family == 0)
			return true;
		ports_addr_of(l->dual_stack, &r);
		if (r.family == 0)
			return true;
	}
	return r.family == b->family && memcmp(r.ip, b->ip, r.family == AF_INET ? 4 : 16) == 0;
}

/* The listener's own socket address: bind_address, else address (or the wildcard, when
 * that is not local: again unknown here, so a specific address is taken at its word). */
static void ports_listener_addr(const struct conf_listener *l, struct ports_addr *out)
{
	ports_addr_of(l->bind_address ? l->bind_address : l->address, out);
}

static bool ports_in(const struct conf_listener *l, unsigned port)
{
	return port >= l->relay_port_min && port <= l->relay_port_max;
}

/* Splits an http://[HOST][:PORT][/PATH] the admin parser accepted into its host (without
 * brackets; *bracketed tells them) and port (defport when absent). False for an unset
 * endpoint or a host longer than any address. */
static bool ports_http_split(const char *url, unsigned defport, char host[64], bool *bracketed,
			     unsigned *port)
{
	const char *h, *e;
	size_t n;

	if (url == NULL || strncasecmp(url, "http://", 7) != 0)
		return false;
	h = url + 7;
	*bracketed = *h == '[';
	if (*bracketed) {
		e = strchr(++h, ']');
		if (e == NULL)
			return false;
	} else {
		e = h + strcspn(h, ":/");
	}
	n = (size_t)(e - h);
	if (n >= 64)
		return false;
	memcpy(host, h, n);
	host[n] = '\0';
	e += *bracketed;
	*port = *e == ':' ? (unsigned)atoi(e + 1) : defport;
	return true;
}

/* Host and port of an http://[HOST][:PORT][/PATH] the admin parser accepted. A host name
 * other than localhost is taken as every address. Returns false for an unset endpoint. */
static bool ports_http(const char *url, unsigned defport, struct ports_addr *a,
		       unsigned *port)
{
	char host[64];
	bool bracketed;

	if (!ports_http_split(url, defport, host, &bracketed, port))
		return false;
	ports_addr_of(strcasecmp(host, "localhost") == 0 ? "127.0.0.1" : host, a);
	return true;
}

/* The socket the master's HTTP server binds for url, by http_endpoint_parse's host rules:
 * empty, 0.0.0.0 or [::] is every address (family 0), localhost is 127.0.0.1, an IPv4
 * literal unbracketed, an IPv6 one bracketed (a mapped one stays IPv6). False for what it
 * refuses (a host name): no socket. */
static bool ports_http_socket(const char *url, unsigned defport, struct ports_addr *a,
			      unsigned *port)
{
	char host[64];
	bool bracketed;

	memset(a, 0, sizeof(*a));
	if (!ports_http_split(url, defport, host, &bracketed, port))
		return false;
	if (bracketed) {
		if (inet_pton(AF_INET6, host, a->ip) != 1)
			return false;
		if (memcmp(a->ip, (const uint8_t[16]){ 0 }, 16) != 0)
			a->family = AF_INET6;
		return true;
	}
	if (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0)
		return true;
	if (inet_pton(AF_INET, strcasecmp(host, "localhost") == 0 ? "127.0.0.1" : host, a->ip) != 1)
		return false;
	a->family = AF_INET;
	return true;
}

bool conf_http_same_socket(const char *a, unsigned default_a, const char *b,
			   unsigned default_b)
{
	struct ports_addr x, y;
	unsigned px, py;

	if (!ports_http_socket(a, default_a, &x, &px) ||
	    !ports_http_socket(b, default_b, &y, &py) || px != py)
		return false;
	/* A wildcard socket takes the port on every address, so it meets any other. */
	if (x.family == 0 || y.family == 0)
		return true;
	return x.family == y.family && memcmp(x.ip, y.ip, x.family == AF_INET ? 4 : 16) == 0;
}

void conf_check_cred_socket(struct pctx *p, const yaml_node_t *node, const char *path)
{
	const struct conf_admin *ad = &p->cfg->admin;
	const char *h = ad->healthcheck_endpoint, *u = ad->credential_api_endpoint;

	if (node == NULL || h == NULL || h[0] == '\0' || u == NULL || u[0] == '\0' ||
	    !conf_http_same_socket(h, PORTS_HEALTH, u, PORTS_CRED))
		return;
	pctx_error(p, node, path,
		   "'%s' shares the socket of healthcheck_endpoint '%s' (the health port is for "
		   "probes, often reachable by anyone who reaches the pod): the credential API "
		   "would never be served (expected a port of its own)",
		   u, h);
}

static const char *ports_proto(const struct conf_listener *l)
{
	bool udp = l->protocol == CONF_PROTO_TURN_UDP || l->protocol == CONF_PROTO_TURN_DTLS;

	return udp ? "udp" : "tcp";
}

/* Where listeners[idx]'s problems are reported. */
struct ports_ctx {
	struct pctx *p;
	size_t idx;
	const yaml_node_t *port_node, *range_node;
	char psub[CONF_PATH_MAX], rsub[CONF_PATH_MAX];
	const char *inherited; /* "" or a note that the range is admin's */
};

/* Its port against the relay ranges before it; its range against every port up to and
 * including its own: each pair is reported once, at the later of the two. */
static bool ports_vs_listeners(struct ports_ctx *x)
{
	const struct conf *c = x->p->cfg;
	const struct conf_listener *l = &c->listeners[x->idx];
	struct ports_addr mine, a;

	ports_listener_addr(l, &mine);
	for (size_t i = 0; i <= x->idx; i++) {
		const struct conf_listener *o = &c->listeners[i];

		if (x->p->lst_bad[i])
			continue;
		if (i < x->idx && ports_in(o, l->port) && ports_relay_meets(o, &mine)) {
			pctx_error(x->p, x->port_node, x->psub,
				   "%u/%s on %s lies in the relay port range %u-%u of "
				   "listeners[%zu] (expected a port outside every relay port range "
				   "on that address: a relay socket could take it)",
				   l->port, ports_proto(l), l->bind_address ? l->bind_address : l->address,
				   o->relay_port_min, o->relay_port_max, i);
			return false;
		}
		ports_listener_addr(o, &a);
		if (ports_in(l, o->port) && ports_relay_meets(l, &a)) {
			pctx_error(x->p, x->range_node, x->rsub,
				   "relay port range %u-%u%s holds %s port %u/%s on %s (expected "
				   "a range that holds none of this instance's listener ports)",
				   l->relay_port_min, l->relay_port_max, x->inherited,
				   i == x->idx ? "this listener's own" : "a listener's", o->port,
				   ports_proto(o), o->bind_address ? o->bind_address : o->address);
			return false;
		}
	}
	return true;
}

static void ports_vs_http(struct ports_ctx *x)
{
	const struct conf_admin *ad = &x->p->cfg->admin;
	const struct conf_listener *l = &x->p->cfg->listeners[x->idx];
	const char *keys[] = { "healthcheck_endpoint", "metrics_endpoint",
			       "credential_api_endpoint" };
	const char *urls[] = { ad->healthcheck_endpoint, ad->metrics_endpoint,
			       ad->credential_api_endpoint };
	const unsigned defs[] = { PORTS_HEALTH, PORTS_METRICS, PORTS_CRED };
	struct ports_addr a;
	unsigned port;

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		if (!ports_http(urls[i], defs[i], &a, &port) || !ports_in(l, port) ||
		    !ports_relay_meets(l, &a))
			continue;
		pctx_error(x->p, x->range_node, x->rsub,
			   "relay port range %u-%u%s holds port %u of admin.%s %s (expected a "
			   "range that holds none of this instance's HTTP ports)",
			   l->relay_port_min, l->relay_port_max, x->inherited, port, keys[i],
			   urls[i]);
		return;
	}
}

void conf_check_relay_ports(struct pctx *p, size_t idx, const yaml_node_t *node,
			    const yaml_node_t *port_node, const yaml_node_t *rmin,
			    const yaml_node_t *rmax, const char *path)
{
	struct ports_ctx x = { .p = p, .idx = idx, .port_node = port_node ? port_node : node,
			       .range_node = rmin ? rmin : rmax ? rmax : node, .inherited = "" };

	if (p->lst_bad[idx])
		return;
	conf_path_key(x.psub, path, "port");
	/* An inherited range is reported at the listener (admin's keys are not kept). */
	if (rmin || rmax) {
		conf_path_key(x.rsub, path, rmin ? "relay_port_min" : "relay_port_max");
	} else {
		snprintf(x.rsub, sizeof(x.rsub), "%s", path);
		x.inherited = " (admin.relay_port_min..max)";
	}
	if (ports_vs_listeners(&x))
		ports_vs_http(&x);
}
