/* Worker siblings: masked addresses whose port lies in another instance's slice of the relay
 * ports (admin.siblings) go to that instance's relay address, and what its relay sockets
 * send back is given the receiving listener's mask before any check (docs/relay.md).
 *
 * Which instance a masked address names is told by its port alone: every instance behind
 * the load balancer announces the same mask, each with relay ports of its own slice (the
 * config refuses overlapping slices). A sibling is trusted by its source address: the pod
 * network must stop address spoofing, and only the configured siblings are translated. */
#include "config.h"

#include "worker/relay_priv.h"
#include "worker/wk.h"

#include <string.h>
#include <netinet/in.h>

#include "common/log.h"

static bool wk_sib_ip_eq(uint8_t fam, const uint8_t *addr, const struct shm_addr *a)
{
	return fam == a->family && memcmp(addr, a->addr, 16) == 0;
}

void wk_sib_refresh(struct worker *w)
{
	uint32_t n = snap_sibling_count(w->snap);

	w->pl->n_sibs = 0;
	w->pl->n_masks = 0;
	for (uint32_t i = 0; i < n && w->pl->n_sibs < WK_MAX_SIBS; i++) {
		struct snap_sibling s;
		struct shm_addr a;

		if (snap_sibling_get(w->snap, i, &s) < 0)
			continue;
		wk_addr_to_shm((const struct sockaddr *)&s.addr, &a);
		w->pl->sibs[w->pl->n_sibs++] = (struct wk_sib){ .family = a.family,
							.port_min = s.relay_port_min,
							.port_max = s.relay_port_max };
		memcpy(w->pl->sibs[w->pl->n_sibs - 1].addr, a.addr, 16);
	}
	if (n > WK_MAX_SIBS)
		log_warn("worker", "%u sibling addresses, the first %u used", n, WK_MAX_SIBS);
	for (size_t i = 0; i < w->n_ls; i++) {
		const struct wk_listener *l = w->ls[i];
		struct shm_addr m;
		bool dup = false;

		if (!l->active || !l->snap_ok || l->mask_addr.ss_family == 0)
			continue;
		wk_addr_to_shm((const struct sockaddr *)&l->mask_addr, &m);
		for (unsigned j = 0; j < w->pl->n_masks; j++)
			dup |= wk_sib_ip_eq(w->pl->masks[j].family, w->pl->masks[j].addr, &m);
		if (!dup && w->pl->n_masks < WK_MAX_LISTENERS) {
			w->pl->masks[w->pl->n_masks].family = m.family;
			memcpy(w->pl->masks[w->pl->n_masks++].addr, m.addr, 16);
		}
	}
}

bool wk_sib_is_mask(const struct worker *w, const struct shm_addr *a)
{
	for (unsigned i = 0; i < w->pl->n_masks; i++)
		if (wk_sib_ip_eq(w->pl->masks[i].family, w->pl->masks[i].addr, a))
			return true;
	return false;
}

bool wk_sib_own_port(const struct worker *w, uint16_t port)
{
	for (size_t i = 0; i < w->n_ls; i++) {
		const struct wk_listener *l = w->ls[i];

		if (l->active && l->snap_ok && port >= l->sl.relay_port_min &&
		    port <= l->sl.relay_port_max)
			return true;
	}
	return false;
}

static bool wk_sib_holds(const struct wk_sib *s, uint16_t port)
{
	return port >= s->port_min && port <= s->port_max;
}

/* The first sibling address of the family whose slice holds port, or NULL. */
static const struct wk_sib *wk_sib_of_port(const struct worker *w, uint8_t family, uint16_t port)
{
	for (unsigned i = 0; i < w->pl->n_sibs; i++)
		if (w->pl->sibs[i].family == family && wk_sib_holds(&w->pl->sibs[i], port))
			return &w->pl->sibs[i];
	return NULL;
}

bool wk_sib_refused(const struct worker *w, const struct sockaddr *peer)
{
	struct shm_addr a;

	if (w->pl->n_masks == 0)
		return false;
	wk_addr_to_shm(peer, &a);
	return wk_sib_is_mask(w, &a) && !wk_sib_own_port(w, a.port) &&
	       wk_sib_of_port(w, a.family, a.port) == NULL;
}

bool wk_sib_target(const struct worker *w, const struct sockaddr *peer,
		   struct sockaddr_storage *to)
{
	const struct wk_sib *s;
	struct shm_addr p;

	if (w->pl->n_sibs == 0)
		return false;
	wk_addr_to_shm(peer, &p);
	if (!wk_sib_is_mask(w, &p) || (s = wk_sib_of_port(w, p.family, p.port)) == NULL)
		return false;
	memcpy(p.addr, s->addr, 16);
	return wk_shm_to_addr(&p, to) != 0;
}

bool wk_sib_addr(const struct worker *w, const struct sockaddr *peer)
{
	struct shm_addr a;

	if (w->pl->n_sibs == 0)
		return false;
	wk_addr_to_shm(peer, &a);
	for (unsigned i = 0; i < w->pl->n_sibs; i++)
		if (wk_sib_ip_eq(w->pl->sibs[i].family, w->pl->sibs[i].addr, &a) &&
		    wk_sib_holds(&w->pl->sibs[i], a.port))
			return true;
	return false;
}

bool wk_sib_from(struct worker *w, const struct wk_listener *l, const struct sockaddr *from,
		 struct sockaddr_storage *out)
{
	struct shm_addr m;

	if (l->mask_addr.ss_family != from->sa_family || !wk_sib_addr(w, from))
		return false;
	wk_addr_to_shm((const struct sockaddr *)&l->mask_addr, &m);
	m.port = ntohs(from->sa_family == AF_INET ? ((const struct sockaddr_in *)from)->sin_port
						  : ((const struct sockaddr_in6 *)from)->sin6_port);
	wk_shm_to_addr(&m, out);
	shm_ctr_add(w->ctr, SHM_CTR_SIBLING_IN, 1);
	return true;
}
