/* listeners[].proxy_protocol (ours): PROXY protocol versions and the trusted sources. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf_internal.h"

struct pp_state {
	struct conf_listener *l;
	yaml_node_t *versions, *trusted;
};

static const char *const pp_keys[] = { "versions", "trusted", NULL };

static void pp_versions(struct pctx *p, yaml_node_t *n, const char *path,
			struct conf_listener *l)
{
	size_t cnt;

	if (!pctx_expect(p, n, path, YAML_SEQUENCE_NODE))
		return;
	cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	for (size_t i = 0; i < cnt; i++) {
		char item[CONF_PATH_MAX];
		yaml_node_t *e = pctx_node(p, n->data.sequence.items.start[i]);
		uint64_t v;

		conf_path_idx(item, path, i);
		if (pctx_uint(p, e, item, 1, 2, &v) == 0)
			l->pp_versions |= 1u << (v - 1);
	}
	if (cnt == 0)
		pctx_error(p, n, path, "empty list (expected the versions to accept: [1, 2], [1] "
			   "or [2])");
}

static void pp_trusted(struct pctx *p, yaml_node_t *n, const char *path,
		       struct conf_listener *l)
{
	size_t cnt;

	if (!pctx_expect(p, n, path, YAML_SEQUENCE_NODE))
		return;
	cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	if (cnt == 0 || cnt > CONF_PP_TRUSTED_MAX) {
		pctx_error(p, n, path,
			   "%zu CIDRs (expected 1 to %d: the addresses of the proxies that send "
			   "the header)",
			   cnt, CONF_PP_TRUSTED_MAX);
		return;
	}
	for (size_t i = 0; i < cnt && !p->nomem; i++) {
		char item[CONF_PATH_MAX];
		yaml_node_t *e = pctx_node(p, n->data.sequence.items.start[i]);
		bool host_bits = false;
		char *s;

		conf_path_idx(item, path, i);
		s = pctx_string(p, e, item, false);
		if (s == NULL)
			continue;
		if (conf_parse_prefix(s, &l->pp_trusted[l->pp_n_trusted], &host_bits) == 0)
			l->pp_n_trusted++;
		else
			pctx_error(p, e, item,
				   "'%s' is not a CIDR (expected an IP or IP/len, such as "
				   "10.0.0.0/8)",
				   s);
		free(s);
	}
}

static void pp_pair(struct pctx *p, const char *key, yaml_node_t *k, yaml_node_t *v,
		    const char *path, void *arg)
{
	struct pp_state *st = arg;

	if (strcasecmp(key, "versions") == 0) {
		st->versions = v;
		pp_versions(p, v, path, st->l);
	} else if (strcasecmp(key, "trusted") == 0) {
		st->trusted = v;
		pp_trusted(p, v, path, st->l);
	} else {
		pctx_unknown_key(p, k, path, pp_keys);
	}
}

/* path: the key's own (listeners[i].proxy_protocol). */
void conf_parse_proxyproto(struct pctx *p, yaml_node_t *n, const char *path,
			   struct conf_listener *l)
{
	struct pp_state st = { .l = l };

	if (!pctx_expect(p, n, path, YAML_MAPPING_NODE))
		return;
	pctx_map_each(p, n, path, pp_pair, &st);
	if (!st.versions)
		pctx_error(p, n, path, "missing versions (expected versions: [1, 2], [1] or [2])");
	if (!st.trusted)
		pctx_error(p, n, path,
			   "missing trusted (expected the CIDRs of the proxies that send the "
			   "header)");
	if (!st.versions || !st.trusted)
		l->pp_versions = 0;
}

void conf_check_proxyproto(struct pctx *p, yaml_node_t *n, const char *path,
			   const struct conf_listener *l)
{
	char sub[CONF_PATH_MAX];

	conf_path_key(sub, path, "proxy_protocol");
	if (l->protocol == CONF_PROTO_TURN_DTLS)
		pctx_error(p, n, sub,
			   "not supported on a TURN-DTLS listener (expected TURN-UDP, TURN-TCP "
			   "or TURN-TLS)");
	else if (l->protocol == CONF_PROTO_TURN_UDP && (l->pp_versions & 1u))
		pctx_error(p, n, sub,
			   "version 1 on a TURN-UDP listener (expected versions: [2]: v1 is "
			   "for streams only)");
}
