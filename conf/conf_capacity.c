/* limits.max_allocations "auto": the allocation table sized to the relay port space. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "conf/conf_internal.h"

struct cap_range {
	uint8_t addr[17];   /* family, then the canonical address */
	uint16_t lo, hi;
};

static int cap_range_cmp(const void *a, const void *b)
{
	const struct cap_range *x = a, *y = b;
	int d = memcmp(x->addr, y->addr, sizeof(x->addr));

	if (d != 0)
		return d;
	return (int)x->lo - (int)y->lo;
}

/* Adds one address's merged ranges to the per-port count of relay addresses (diff[] is a
 * difference array over ports 0..65536). */
static void cap_add_address(const struct cap_range *r, size_t n, int32_t *diff)
{
	unsigned lo = r[0].lo, hi = r[0].hi;

	for (size_t i = 1; i <= n; i++) {
		if (i < n && r[i].lo <= hi + 1) {
			if (r[i].hi > hi)
				hi = r[i].hi;
			continue;
		}
		diff[lo]++;
		diff[hi + 1]--;
		if (i < n) {
			lo = r[i].lo;
			hi = r[i].hi;
		}
	}
}

/* Ports of the relay ranges on every distinct relay address, counting a port number on at
 * most CONF_RELAY_WAYS addresses (what the shared port pool can book). */
int conf_relay_port_space(const struct conf *c, uint32_t *ports, uint32_t *addrs)
{
	struct cap_range *r = calloc(c->n_listeners ? c->n_listeners : 1, sizeof(*r));
	int32_t *diff = calloc(65537, sizeof(*diff));
	size_t n = 0, first = 0;
	int32_t cover = 0;
	uint64_t sum = 0;

	*ports = *addrs = 0;
	if (r == NULL || diff == NULL) {
		free(r);
		free(diff);
		return -ENOMEM;
	}
	for (size_t i = 0; i < c->n_listeners; i++) {
		const struct conf_listener *l = &c->listeners[i];
		int fam;

		if (conf_addr_canon((const struct sockaddr *)&l->relay_addr, &fam, r[n].addr + 1) < 0)
			continue;
		if (l->relay_port_min == 0 || l->relay_port_min > l->relay_port_max)
			continue;
		r[n].addr[0] = (uint8_t)fam;
		r[n].lo = l->relay_port_min;
		r[n].hi = l->relay_port_max;
		n++;
	}
	qsort(r, n, sizeof(*r), cap_range_cmp);
	for (size_t i = 1; i <= n; i++) {
		if (i < n && memcmp(r[i].addr, r[first].addr, sizeof(r[i].addr)) == 0)
			continue;
		cap_add_address(r + first, i - first, diff);
		(*addrs)++;
		first = i;
	}
	for (unsigned p = 0; p <= 65535; p++) {
		cover += diff[p];
		sum += cover < (int32_t)CONF_RELAY_WAYS ? (uint32_t)cover : CONF_RELAY_WAYS;
	}
	*ports = (uint32_t)sum;
	free(r);
	free(diff);
	return 0;
}

void conf_resolve_capacity(struct pctx *p)
{
	struct conf_limits *l = &p->cfg->limits;
	const struct conf_admin *a = &p->cfg->admin;
	uint32_t global = 0;

	if (conf_relay_port_space(p->cfg, &l->relay_ports, &l->relay_addrs) < 0) {
		p->nomem = 1;
		return;
	}
	if (a->relay_port_min > 0 && a->relay_port_min <= a->relay_port_max)
		global = (uint32_t)a->relay_port_max - a->relay_port_min + 1;
	if (l->max_allocations_auto) {
		l->max_allocations = l->relay_ports > global ? l->relay_ports : global;
		if (l->max_allocations > CONF_AUTO_ALLOCATIONS_MAX)
			l->max_allocations = CONF_AUTO_ALLOCATIONS_MAX;
		if (l->max_allocations == 0)
			l->max_allocations = 1;
	}
	if (l->total_quota > l->max_allocations) {
		char sub[CONF_PATH_MAX];

		conf_path_key(sub, "limits", "total_quota");
		pctx_error(p, p->total_quota_node ? p->total_quota_node : p->limits_node, sub,
			   "%u is greater than max_allocations %u%s (expected at most that)",
			   l->total_quota, l->max_allocations,
			   l->max_allocations_auto ? " (auto: the relay port space)" : "");
	}
}
