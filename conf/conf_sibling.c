/* The admin.siblings list: the other instances behind one load balancer and their slices of the
 * relay port range. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf_internal.h"

/* One entry while it is parsed: where its keys were written, for the cross-checks. */
struct sib_state {
	struct conf_sibling *s;
	yaml_node_t *node, *address, *min, *max;
	int has_min, has_max; /* 1 set, 0 unset (null, or empty after expansion), -1 reported */
};

static void sib_port(struct pctx *p, yaml_node_t *v, const char *path, uint16_t *dst, int *has)
{
	uint64_t x;
	int rc = pctx_is_null(v) ? -ENOENT : pctx_uint(p, v, path, 1, 65535, &x);

	*has = rc == 0 ? 1 : rc == -ENOENT ? 0 : -1;
	if (rc == 0)
		*dst = (uint16_t)x;
}

static const char *const sib_keys[] = { "address", "relay_port_min", "relay_port_max", NULL };

static void sib_pair(struct pctx *p, const char *key, yaml_node_t *k, yaml_node_t *v,
		     const char *path, void *arg)
{
	struct sib_state *st = arg;
	struct conf_sibling *s = st->s;

	if (strcasecmp(key, "address") == 0) {
		st->address = v;
		free(s->address);
		s->address = pctx_is_null(v) ? NULL : pctx_string(p, v, path, 0);
	} else if (strcasecmp(key, "relay_port_min") == 0) {
		st->min = v;
		sib_port(p, v, path, &s->relay_port_min, &st->has_min);
	} else if (strcasecmp(key, "relay_port_max") == 0) {
		st->max = v;
		sib_port(p, v, path, &s->relay_port_max, &st->has_max);
	} else {
		pctx_unknown_key(p, k, path, sib_keys);
	}
}

/* An IP (kept as the one address in use) or a DNS name (resolved later, as STRICT_DNS
 * endpoints are). Returns false after reporting. */
static bool sib_address(struct pctx *p, struct sib_state *st, const char *path)
{
	struct conf_sibling *s = st->s;
	char sub[CONF_PATH_MAX];
	uint8_t a[16];
	int fam;

	conf_path_key(sub, path, "address");
	if (s->address == NULL || s->address[0] == '\0') {
		pctx_error(p, st->address ? st->address : st->node, sub,
			   "missing (expected the sibling's relay IP address or DNS name)");
		return false;
	}
	if (conf_parse_ip(s->address, &fam, a) != 0) {
		if (conf_valid_hostname(s->address)) {
			s->is_name = true;
			return true;
		}
		pctx_error(p, st->address, sub,
			   "'%s' is not an IP address or a DNS name (expected the sibling's relay "
			   "address, e.g. a StatefulSet pod's name under its headless Service)",
			   s->address);
		return false;
	}
	if (!conf_ip_unicast(fam, a)) {
		pctx_error(p, st->address, sub,
			   "'%s' is an unspecified, multicast or broadcast address (expected a "
			   "unicast address)",
			   s->address);
		return false;
	}
	s->resolved = calloc(1, sizeof(*s->resolved));
	if (s->resolved == NULL) {
		p->nomem = 1;
		return false;
	}
	conf_sockaddr_set(s->resolved, fam, a);
	s->n_resolved = 1;
	return true;
}

static bool sib_ports(struct pctx *p, struct sib_state *st, const char *path)
{
	struct conf_sibling *s = st->s;
	char sub[CONF_PATH_MAX];
	bool ok = true;

	for (int i = 0; i < 2; i++) {
		int has = i == 0 ? st->has_min : st->has_max;
		yaml_node_t *v = i == 0 ? st->min : st->max;

		ok &= has == 1;
		if (has != 0)
			continue;
		conf_path_key(sub, path, i == 0 ? "relay_port_min" : "relay_port_max");
		pctx_error(p, v ? v : st->node, sub,
			   "missing (expected the first and last relay port of the sibling's "
			   "slice)");
	}
	if (!ok)
		return false;
	if (s->relay_port_min > s->relay_port_max) {
		conf_path_key(sub, path, "relay_port_min");
		pctx_error(
			p, st->min, sub,
			"relay_port_min %u is greater than relay_port_max %u (expected MIN <= MAX)",
			s->relay_port_min, s->relay_port_max);
		return false;
	}
	return true;
}

static bool overlap(unsigned a_min, unsigned a_max, unsigned b_min, unsigned b_max)
{
	return a_min <= b_max && b_min <= a_max;
}

/* The slice against this instance's (equal: this instance, skipped), every listener's own
 * range and the slices before it: a port must name one instance. */
static void sib_slice(struct pctx *p, struct sib_state *st, const char *path, size_t idx)
{
	const struct conf *c = p->cfg;
	struct conf_sibling *s = st->s;
	unsigned lo = s->relay_port_min, hi = s->relay_port_max;
	char sub[CONF_PATH_MAX];

	conf_path_key(sub, path, "relay_port_min");
	if (lo == c->admin.relay_port_min && hi == c->admin.relay_port_max) {
		s->self = true;
		free(s->resolved);
		s->resolved = NULL;
		s->n_resolved = 0;
		return;
	}
	if (overlap(lo, hi, c->admin.relay_port_min, c->admin.relay_port_max)) {
		pctx_error(p, st->min, sub,
			   "relay ports %u-%u overlap this instance's admin.relay_port_min..max "
			   "%u-%u (expected exactly this instance's slice, or a disjoint one)",
			   lo, hi, c->admin.relay_port_min, c->admin.relay_port_max);
		return;
	}
	for (size_t i = 0; i < c->n_listeners; i++) {
		const struct conf_listener *l = &c->listeners[i];

		if (overlap(lo, hi, l->relay_port_min, l->relay_port_max)) {
			pctx_error(p, st->min, sub,
				   "relay ports %u-%u overlap those of listeners[%zu] (%u-%u) "
				   "(expected a slice disjoint from this instance's relay ports)",
				   lo, hi, i, l->relay_port_min, l->relay_port_max);
			return;
		}
	}
	for (size_t i = 0; i < idx; i++) {
		const struct conf_sibling *o = &c->admin.siblings[i];

		if (!o->self && o->relay_port_min &&
		    overlap(lo, hi, o->relay_port_min, o->relay_port_max)) {
			pctx_error(p, st->min, sub,
				   "relay ports %u-%u overlap those of admin.siblings[%zu] (%u-%u) "
				   "(expected disjoint slices)",
				   lo, hi, i, o->relay_port_min, o->relay_port_max);
			return;
		}
	}
}

void conf_parse_siblings(struct pctx *p, yaml_node_t *n, const char *path)
{
	struct conf_admin *a = &p->cfg->admin;
	size_t cnt;

	if (!pctx_list(p, n, path, "siblings", CONF_MAX_SIBLINGS, &cnt))
		return;
	a->siblings = calloc(cnt ? cnt : 1, sizeof(*a->siblings));
	if (a->siblings == NULL) {
		p->nomem = 1;
		return;
	}
	for (size_t i = 0; i < cnt && !p->nomem; i++) {
		struct sib_state st = { .s = &a->siblings[i],
					.node = pctx_node(p, n->data.sequence.items.start[i]) };
		char sub[CONF_PATH_MAX];
		bool ok;

		conf_path_idx(sub, path, i);
		a->n_siblings++;
		if (!pctx_expect(p, st.node, sub, YAML_MAPPING_NODE))
			continue;
		pctx_map_each(p, st.node, sub, sib_pair, &st);
		if (p->nomem)
			break;
		ok = sib_ports(p, &st, sub);
		if (sib_address(p, &st, sub) && ok)
			sib_slice(p, &st, sub, i);
		else
			st.s->relay_port_min = st.s->relay_port_max = 0; /* no cross-checks on it */
	}
}
