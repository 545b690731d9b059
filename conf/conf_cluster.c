/* The clusters[] section: STATIC prefixes with peer port ranges and STRICT_DNS names. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf_internal.h"

struct cl_state {
	struct conf_cluster *cl;
	yaml_node_t *node, *name, *endpoints;
};

/* admit_special (ours): names of special-purpose categories (conf_special_parse) that
 * this cluster's endpoints admit where they cover them. */
static void cl_admit_special(struct pctx *p, struct conf_cluster *cl, yaml_node_t *n,
			     const char *path)
{
	size_t cnt;
	cl->admit_special = 0;
	if (pctx_is_null(n) || !pctx_expect(p, n, path, YAML_SEQUENCE_NODE))
		return;
	cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	for (size_t i = 0; i < cnt && !p->nomem; i++) {
		char item[CONF_PATH_MAX];
		yaml_node_t *e = pctx_node(p, n->data.sequence.items.start[i]);
		unsigned cat;
		char *s;
		conf_path_idx(item, path, i);
		s = pctx_string(p, e, item, false);
		if (s == NULL)
			continue;
		if (conf_special_parse(s, &cat) == 0)
			cl->admit_special |= cat;
		else
			pctx_error(p, e, item,
				   "'%s' is not a special-purpose category (expected loopback, "
				   "link-local, metadata, multicast, reserved, documentation, "
				   "protocol or translation)",
				   s);
		free(s);
	}
}

static const char *const cl_keys[] = { "name", "endpoints", "admit_special", "type", "protocol",
				       NULL };

static void cl_pair(struct pctx *p, const char *key, yaml_node_t *k, yaml_node_t *v,
		    const char *path, void *arg)
{
	struct cl_state *st = arg;
	struct conf_cluster *cl = st->cl;
	char *s = NULL;
	if (strcasecmp(key, "name") == 0) {
		st->name = v;
		s = pctx_is_null(v) ? NULL : pctx_string(p, v, path, false);
		free(cl->name);
		cl->name = s && s[0] ? s : NULL;
		if (cl->name == NULL)
			free(s);
		return;
	}
	if (strcasecmp(key, "endpoints") == 0) {
		st->endpoints = v;
		return;
	}
	if (strcasecmp(key, "admit_special") == 0) {
		cl_admit_special(p, cl, v, path);
		return;
	}
	if (strcasecmp(key, "type") != 0 && strcasecmp(key, "protocol") != 0) {
		pctx_unknown_key(p, k, path, cl_keys);
		return;
	}
	s = pctx_is_null(v) ? NULL : pctx_string(p, v, path, false);
	if (s == NULL)
		return;
	if (strcasecmp(key, "type") == 0) {
		if (s[0] == '\0' || strcasecmp(s, "STATIC") == 0) /* "": stunnerd's default */
			cl->type = CONF_CLUSTER_STATIC;
		else if (strcasecmp(s, "STRICT_DNS") == 0)
			cl->type = CONF_CLUSTER_STRICT_DNS;
		else
			pctx_error(p, v, path,
				   "'%s' is not a cluster type (expected STATIC or "
				   "STRICT_DNS)",
				   s);
	} else {
		if (s[0] == '\0' || strcasecmp(s, "UDP") == 0)
			cl->protocol = CONF_CPROTO_UDP;
		else if (strcasecmp(s, "TCP") == 0)
			cl->protocol = CONF_CPROTO_TCP;
		else
			pctx_error(p, v, path,
				   "'%s' is not a cluster protocol (expected UDP or TCP)", s);
	}
	free(s);
}

/* Returns false for an endpoint that matches nothing (warned; the caller drops it). */
static bool parse_static_ep(struct pctx *p, yaml_node_t *n, const char *path,
			    struct conf_endpoint *ep)
{
	char err[200];
	int rc = conf_parse_endpoint(ep->text, ep, err, sizeof(err));
	if (rc == -EINVAL)
		pctx_error(p, n, path, "%s", err);
	else if (err[0] != '\0')
		pctx_warn(p, n, path, "%s", err);
	return rc != -ENOENT;
}

/* STRICT_DNS: names are resolved later (conf_resolve_clusters). stunnerd resolves each
 * string as written, so one that is no host name (a "name:<a-b>" port range, which does
 * not apply to DNS clusters) matches nothing there: turngate drops it with a warning
 * rather than guess which peers were meant. */
static bool parse_dns_ep(struct pctx *p, yaml_node_t *n, const char *path, struct conf_endpoint *ep)
{
	ep->port_min = 1;
	ep->port_max = 65535;
	if (conf_valid_hostname(ep->text))
		return true;
	if (strstr(ep->text, ":<") != NULL)
		pctx_warn(p, n, path,
			  "port ranges do not apply to STRICT_DNS clusters: '%s' "
			  "matches nothing (as in stunnerd, which resolves the whole text; write "
			  "the name alone)",
			  ep->text);
	else
		pctx_warn(p, n, path,
			  "'%s' is not a DNS name (matches nothing, as in stunnerd; "
			  "expected a host name such as svc.ns.svc.cluster.local)",
			  ep->text);
	return false;
}

static void cl_endpoints(struct pctx *p, struct cl_state *st, const char *path)
{
	struct conf_cluster *cl = st->cl;
	yaml_node_t *n = st->endpoints;
	char sub[CONF_PATH_MAX];
	size_t cnt;
	conf_path_key(sub, path, "endpoints");
	if (n == NULL || pctx_is_null(n) ||
	    !pctx_list(p, n, sub, "endpoints", CONF_MAX_ITEMS, &cnt))
		return;
	cl->endpoints = calloc(cnt ? cnt : 1, sizeof(*cl->endpoints));
	if (cl->endpoints == NULL) {
		p->nomem = 1;
		return;
	}
	for (size_t i = 0; i < cnt && !p->nomem; i++) {
		char item[CONF_PATH_MAX];
		yaml_node_t *e = pctx_node(p, n->data.sequence.items.start[i]);
		char *s;
		struct conf_endpoint *ep;
		conf_path_idx(item, sub, i);
		s = pctx_string(p, e, item, false);
		if (s == NULL)
			continue;
		ep = &cl->endpoints[cl->n_endpoints];
		memset(ep, 0, sizeof(*ep));
		ep->text = s;
		if (cl->type == CONF_CLUSTER_STATIC ? parse_static_ep(p, e, item, ep)
						    : parse_dns_ep(p, e, item, ep))
			cl->n_endpoints++;
		else
			free(s);
	}
}

void conf_parse_clusters(struct pctx *p, yaml_node_t *n, const char *path)
{
	struct conf *c = p->cfg;
	size_t cnt;
	if (!pctx_list(p, n, path, "clusters", CONF_MAX_ITEMS, &cnt))
		return;
	c->clusters = calloc(cnt ? cnt : 1, sizeof(*c->clusters));
	if (c->clusters == NULL) {
		p->nomem = 1;
		return;
	}
	for (size_t i = 0; i < cnt && !p->nomem; i++) {
		struct conf_cluster *cl = &c->clusters[i];
		struct cl_state st = { .cl = cl,
				       .node = pctx_node(p, n->data.sequence.items.start[i]) };
		char sub[CONF_PATH_MAX], nm[CONF_PATH_MAX];
		conf_path_idx(sub, path, i);
		conf_path_key(nm, sub, "name");
		c->n_clusters++;
		pctx_map_each(p, st.node, sub, cl_pair, &st);
		if (st.node->type != YAML_MAPPING_NODE || p->nomem)
			continue;
		if (cl->name == NULL)
			pctx_error(p, st.name ? st.name : st.node, nm,
				   "missing name (expected a "
				   "non-empty cluster name)");
		for (size_t j = 0; cl->name && j < i; j++)
			if (c->clusters[j].name && strcmp(c->clusters[j].name, cl->name) == 0)
				pctx_error(p, st.name, nm,
					   "duplicate cluster name '%s' (expected unique "
					   "names; first used by clusters[%zu])",
					   cl->name, j);
		cl_endpoints(p, &st, sub);
	}
}
