/* Relay port pool (see portpool.h). */
#include "config.h"

#include "worker/portpool.h"

#include <errno.h>
#include <string.h>

int portpool_init(struct portpool *p, uint16_t min, uint16_t max, unsigned slot,
		  unsigned slot_count)
{
	unsigned span;

	memset(p, 0, sizeof(*p));
	if (min == 0 || max < min)
		return -EINVAL;
	span = (unsigned)max - min + 1;
	p->lo = min;
	p->hi = max;
	p->cursor = (uint16_t)(min + (slot_count ? (uint64_t)span * slot / slot_count % span : 0));
	return 0;
}

void portpool_destroy(struct portpool *p)
{
	if (p)
		memset(p, 0, sizeof(*p));
}

/* port open for tag in this round: unbooked (which implies shm_ppool_is_free, so no
 * record is read) in a hinted round, free by its owners in the checked one. */
static bool portpool_open(struct shm *shm, uint32_t tag, uint16_t port, uint64_t now_ns,
			  bool hinted)
{
	return hinted ? shm_ppool_unbooked(shm, tag, port) :
			shm_ppool_is_free(shm, tag, port, now_ns);
}

/* One round of the range from the cursor. hinted: only ports that no booking names
 * (shm_ppool_unbooked: the pool's words, no record read), so that a search through a
 * nearly full range reads no allocation record for the ports it passes; the checked
 * round (every booking's owner read) finds the ports whose owner let go. */
static int portpool_round(struct portpool *p, struct shm *shm, uint32_t tag, uint32_t idx,
			  bool even, struct shm_ppool_resv *resv, uint64_t now_ns, bool hinted,
			  uint16_t *port)
{
	unsigned n = (unsigned)p->hi - p->lo + 1;
	unsigned cand = p->cursor;

	for (unsigned i = 0; i < n; i++, cand = cand >= p->hi ? p->lo : cand + 1) {
		if (even && (cand & 1))
			continue;
		if (resv && cand + 1 > p->hi)
			continue;
		if (!portpool_open(shm, tag, (uint16_t)cand, now_ns, hinted) ||
		    (resv && !portpool_open(shm, tag, (uint16_t)(cand + 1), now_ns, hinted)))
			continue;
		if (shm_ppool_take(shm, tag, (uint16_t)cand, idx, now_ns) < 0)
			continue;	/* another worker was quicker */
		if (resv) {
			resv->tag = tag;
			resv->port = (uint16_t)(cand + 1);
			if (shm_ppool_reserve(shm, resv, now_ns) < 0) {
				shm_ppool_put(shm, tag, (uint16_t)cand, idx);
				continue;
			}
		}
		cand += resv ? 2 : 1;
		p->cursor = cand > p->hi ? p->lo : (uint16_t)cand;
		*port = (uint16_t)(cand - (resv ? 2 : 1));
		return 0;
	}
	return -EADDRNOTAVAIL;
}

/* portpool_get; checked: the checked round alone, round-robin from the cursor. */
static int portpool_find(struct portpool *p, struct shm *shm, uint32_t tag, uint32_t idx,
			 bool even, struct shm_ppool_resv *resv, uint64_t now_ns, bool checked,
			 uint16_t *port)
{
	if (p->lo == 0)
		return -EADDRNOTAVAIL;	/* never initialised, or the range was unusable */
	if (resv)
		even = true;
	if (!checked && portpool_round(p, shm, tag, idx, even, resv, now_ns, true, port) == 0)
		return 0;
	return portpool_round(p, shm, tag, idx, even, resv, now_ns, false, port);
}

int portpool_get(struct portpool *p, struct shm *shm, uint32_t tag, uint32_t idx, bool even,
		 struct shm_ppool_resv *resv, uint64_t now_ns, uint16_t *port)
{
	return portpool_find(p, shm, tag, idx, even, resv, now_ns, false, port);
}

int portpool_bind(struct portpool *p, struct shm *shm, uint32_t tag, uint32_t idx, bool even,
		  struct shm_ppool_resv *resv, uint64_t now_ns, portpool_bind_fn *bind, void *ctx,
		  uint16_t *port)
{
	bool refused = false;

	for (int tries = 0; tries < PORTPOOL_TRIES; tries++) {
		int rc;

		/* Once a port was refused, only checked rounds: the refused port's word is
		 * empty again, so a hinted round would come back to it (round the range)
		 * before any port whose booking outlived its owner, again and again. */
		if (portpool_find(p, shm, tag, idx, even, resv, now_ns, refused, port) < 0)
			break;
		rc = bind(ctx, *port);
		if (rc == 0)
			return 0;
		/* Held by another socket (a listener sharing the range, another program):
		 * give the booking back and move on; the round-robin cursor has passed
		 * it, so the next tries look elsewhere. Keeping it booked would leak it
		 * for good once its holder lets go. So goes the reservation made with it
		 * (its token was never handed out): redeemed here and given back. */
		shm_ppool_put(shm, tag, *port, idx);
		if (resv) {
			struct shm_ppool_resv spent;

			if (shm_ppool_redeem(shm, resv->token, idx, now_ns, &spent) == 0)
				shm_ppool_put(shm, spent.tag, spent.port, idx);
		}
		if (rc != -EADDRINUSE)
			return rc;
		refused = true;
	}
	return -EADDRNOTAVAIL;
}
