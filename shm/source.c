/* Per-source budget counts and refused sources in the worker slots (shm/shm_source.h). */
#include "config.h"

#include <string.h>

#include "shm/shm_internal.h"
#include "shm/shm_source.h"

static const char *const reason_names[SHM_SRC_REASONS] = {
	[SHM_SRC_R_ADDR_CONNS] = "address_connections",
	[SHM_SRC_R_PREFIX_CONNS] = "prefix_connections",
	[SHM_SRC_R_ADDR_TLS] = "address_tls_handshakes",
	[SHM_SRC_R_PREFIX_TLS] = "prefix_tls_handshakes",
	[SHM_SRC_R_ADDR_DTLS] = "address_dtls_handshakes",
	[SHM_SRC_R_PREFIX_DTLS] = "prefix_dtls_handshakes",
	[SHM_SRC_R_WORKER_CONNS] = "worker_connections",
	[SHM_SRC_R_WORKER_TLS] = "worker_tls_handshakes",
	[SHM_SRC_R_WORKER_DTLS] = "worker_dtls_handshakes",
};

const char *shm_src_reason_name(enum shm_src_reason r)
{
	return (unsigned)r < SHM_SRC_REASONS ? reason_names[r] : NULL;
}

static struct shm_src *src_rw(struct shm *shm, unsigned slot)
{
	int rc;
	struct shm_slot *s = shm_slot_rw(shm, slot, &rc);

	return s ? &s->src : NULL;
}

void shm_src_add(struct shm *shm, unsigned slot, enum shm_src_kind k, uint32_t b, int delta)
{
	struct shm_src *s = src_rw(shm, slot);
	uint32_t *p, v;

	if (!s || (unsigned)k >= SHM_SRC_KINDS)
		return;
	p = &s->n[k][b & (SHM_SRC_BUCKETS - 1)];
	v = CMM_LOAD_SHARED(*p);
	if (delta < 0 && v < (uint32_t)-delta)
		v = 0;
	else
		v += (uint32_t)delta;
	CMM_STORE_SHARED(*p, v);
}

/* A worker that may be alive: its counts belong in the sum. */
static bool src_slot_live(const struct shm_slot *s)
{
	uint32_t st = CMM_LOAD_SHARED(s->state);

	return st == SHM_SLOT_STARTING || st == SHM_SLOT_RUNNING || st == SHM_SLOT_STOPPING;
}

uint32_t shm_src_share(const struct shm *shm, enum shm_src_kind k, uint32_t b, unsigned slot,
		       uint32_t *own, unsigned *live)
{
	uint64_t sum = 0;

	shm_check_handle(shm);
	*own = 0;
	*live = 1;
	if ((unsigned)k >= SHM_SRC_KINDS)
		return 0;
	*live = 0;
	for (unsigned i = 0; i < shm->cfg.n_slots; i++) {
		const struct shm_slot *s = shm_slot_at(shm, i);
		uint32_t v;

		if (!src_slot_live(s))
			continue;
		v = CMM_LOAD_SHARED(s->src.n[k][b & (SHM_SRC_BUCKETS - 1)]);
		sum += v;
		(*live)++;
		if (i == slot)
			*own = v;
	}
	if (*live == 0)
		*live = 1;
	return sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
}

uint32_t shm_src_sum(const struct shm *shm, enum shm_src_kind k, uint32_t b)
{
	uint32_t own;
	unsigned live;

	return shm_src_share(shm, k, b, UINT32_MAX, &own, &live);
}

void shm_src_clear(struct shm *shm, unsigned slot)
{
	struct shm_src *s = src_rw(shm, slot);

	if (s)
		memset(s->n, 0, sizeof(s->n));
}

static bool src_addr_eq(const struct shm_addr *a, const struct shm_addr *b)
{
	return a->family == b->family && memcmp(a->addr, b->addr, sizeof(a->addr)) == 0;
}

bool shm_src_trip(struct shm *shm, unsigned slot, const struct shm_addr *addr,
		  enum shm_src_reason r, uint64_t now_ns, uint64_t log_every_ns)
{
	struct shm_src *s = src_rw(shm, slot);
	struct shm_src_top *t = NULL;
	bool log;

	if (!s)
		return false;
	for (unsigned i = 0; i < SHM_SRC_TOP && !t; i++)
		if (s->top[i].trips && src_addr_eq(&s->top[i].addr, addr))
			t = &s->top[i];
	if (!t) {
		/* A new source takes the entry that tripped least recently. */
		t = &s->top[0];
		for (unsigned i = 1; i < SHM_SRC_TOP; i++)
			if (s->top[i].last_ns < t->last_ns)
				t = &s->top[i];
		CMM_STORE_SHARED(t->trips, 0);
		t->addr = *addr;
		t->addr.port = 0;
		t->logged_ns = 0;
	}
	CMM_STORE_SHARED(t->reason, (uint32_t)r);
	CMM_STORE_SHARED(t->last_ns, now_ns);
	CMM_STORE_SHARED(t->trips, t->trips + 1);
	log = t->logged_ns == 0 || now_ns - t->logged_ns >= log_every_ns;
	if (log)
		t->logged_ns = now_ns;
	return log;
}

size_t shm_src_top_read(const struct shm *shm, struct shm_src_top *out, size_t max)
{
	struct shm_src_top all[64];
	size_t n = 0;

	shm_check_handle(shm);
	/* Merge by address into a bounded list; a source past it is left out. */
	for (unsigned i = 0; i < shm->cfg.n_slots; i++) {
		const struct shm_slot *s = shm_slot_at(shm, i);

		for (unsigned j = 0; j < SHM_SRC_TOP; j++) {
			struct shm_src_top t = s->src.top[j];
			size_t k;

			if (CMM_LOAD_SHARED(s->src.top[j].trips) == 0)
				continue;
			for (k = 0; k < n && !src_addr_eq(&all[k].addr, &t.addr); k++)
				;
			if (k == n) {
				if (n == sizeof(all) / sizeof(all[0]))
					continue;
				all[n++] = t;
				continue;
			}
			all[k].trips += t.trips;
			if (t.last_ns > all[k].last_ns) {
				all[k].last_ns = t.last_ns;
				all[k].reason = t.reason;
			}
		}
	}
	/* Most trips first (insertion sort: at most 64 entries). */
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && all[j].trips > all[j - 1].trips; j--) {
			struct shm_src_top tmp = all[j];

			all[j] = all[j - 1];
			all[j - 1] = tmp;
		}
	if (n > max)
		n = max;
	memcpy(out, all, n * sizeof(*out));
	return n;
}
