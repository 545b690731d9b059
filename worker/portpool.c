/* Relay port pool (see portpool.h). */
#include "config.h"

#include "worker/portpool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int portpool_init(struct portpool *p, uint16_t min, uint16_t max, unsigned slot,
		  unsigned slot_count)
{
	unsigned span, share, lo, hi;

	memset(p, 0, sizeof(*p));
	if (min == 0 || max < min || slot_count == 0 || slot >= slot_count)
		return -EINVAL;
	span = (unsigned)max - min + 1;
	if (span < slot_count)
		return -EINVAL;
	share = span / slot_count;
	lo = min + slot * share;
	hi = slot + 1 == slot_count ? max : lo + share - 1;
	p->used = calloc(hi - lo + 1, 1);
	if (!p->used)
		return -ENOMEM;
	p->lo = (uint16_t)lo;
	p->hi = (uint16_t)hi;
	p->cursor = p->lo;
	return 0;
}

void portpool_destroy(struct portpool *p)
{
	if (!p)
		return;
	free(p->used);
	p->used = NULL;
}

static bool portpool_free_at(const struct portpool *p, unsigned port)
{
	return port >= p->lo && port <= p->hi && !p->used[port - p->lo];
}

int portpool_get(struct portpool *p, bool even_pair, bool even, uint16_t *port)
{
	unsigned n = (unsigned)p->hi - p->lo + 1;
	unsigned cand = p->cursor;

	if (!p->used)
		return -EADDRNOTAVAIL;	/* never initialised, or the range was unusable */

	for (unsigned i = 0; i < n; i++, cand = cand >= p->hi ? p->lo : cand + 1) {
		if ((even || even_pair) && (cand & 1))
			continue;
		if (!portpool_free_at(p, cand))
			continue;
		if (even_pair && !portpool_free_at(p, cand + 1))
			continue;
		p->used[cand - p->lo] = 1;
		p->in_use++;
		if (even_pair) {
			p->used[cand + 1 - p->lo] = 1;
			p->in_use++;
		}
		p->cursor = cand + 1 + even_pair > p->hi ? p->lo : (uint16_t)(cand + 1 + even_pair);
		*port = (uint16_t)cand;
		return 0;
	}
	return -EADDRNOTAVAIL;
}

int portpool_take(struct portpool *p, uint16_t port)
{
	if (!p->used)
		return -EADDRNOTAVAIL;
	if (port < p->lo || port > p->hi)
		return -ERANGE;
	if (p->used[port - p->lo])
		return -EADDRINUSE;
	p->used[port - p->lo] = 1;
	p->in_use++;
	return 0;
}

void portpool_put(struct portpool *p, uint16_t port)
{
	if (!p->used || port < p->lo || port > p->hi || !p->used[port - p->lo])
		return;
	p->used[port - p->lo] = 0;
	p->in_use--;
}
