/* bench/topscan: what the master's table-wide observability costs (issue 42): a table of
 * CAP records with N LIVE ones, spread over the workers' partitions as the daemon's claims
 * put them, then the ranked `top` (admin_top_rank, and the whole admin command with 20
 * rows), `status` and a /metrics render, each timed REPS times in-process; and the walk
 * alone (what the ranking reads of each record, nothing kept), the floor under it.
 *
 * Usage: bench/topscan N CAP WORKERS [REPS] [USERS] [EVICT_MIB]
 *   e.g. bench/topscan 250000 250000 17 (the scale benchmark's 250,000: 4 relay addresses
 *   of 62,500 ports, 17 workers; 10,000 and 60,000 held 62,500 records, 2 and 4 workers).
 * Between two samples 1 % of the live records relay a little (their counters move) and,
 * with EVICT_MIB > 0 (default 512), a buffer that size is written so the table is not in
 * the cache, as when `top` samples once a second beside relaying workers. Prints each
 * path's median, min and max in ms. Not a test: nothing is asserted. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ev.h>
#include <jansson.h>

#include "common/mono.h"
#include "conf/conf.h"
#include "conf/snapshot.h"
#include "http/http_buf.h"
#include "http/http_metrics.h"
#include "master/admin.h"
#include "master/master.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_quota.h"

#define TOPSCAN_MAX_REPS 1001

static const struct admin_peer root_peer = { .pid = 1, .uid = 0, .gid = 0 };

static int fill(struct shm *shm, unsigned n, unsigned workers, unsigned users)
{
	struct shm_quota_limits lim;

	memset(&lim, 0, sizeof(lim));
	for (unsigned i = 0; i < n; i++) {
		struct shm_alloc *r;
		unsigned slot = i % workers;
		uint32_t idx;
		int len;

		if (shm_alloc_claim(shm, slot, &idx, &r) < 0)
			return -1;
		shm_alloc_begin_write(r);
		len = snprintf(r->username, sizeof(r->username), "%u:user%u", 2000000000u,
			       i % users);
		r->user_len = (uint16_t)len;
		r->listener_idx = 0xffff;
		shm_alloc_end_write(r);
		if (shm_alloc_publish(shm, slot, idx) < 0 || shm_quota_take_rec(shm, r, &lim) < 0)
			return -1;
		shm_alloc_ctr_add(r, SHM_ACTR_BYTES_TO_PEER, 1000u + i % 977);
		shm_alloc_ctr_add(r, SHM_ACTR_PKTS_TO_PEER, 10);
	}
	return 0;
}

/* 1 % of the live records relay something; the rest of the table leaves the cache. */
static void between(struct shm *shm, uint32_t cap, unsigned rep, uint8_t *evict, size_t ev_len)
{
	uint32_t step = 97;

	for (uint32_t i = rep % step; i < cap; i += step) {
		struct shm_alloc *r;
		bool torn;
		unsigned owner;

		if (shm_alloc_is_torn(shm, i, &torn, &owner) < 0 ||
		    shm_alloc_get(shm, owner, i, &r) < 0)
			continue;
		shm_alloc_ctr_add(r, SHM_ACTR_BYTES_FROM_PEER, 1200u * (i % 13 + 1));
		shm_alloc_ctr_add(r, SHM_ACTR_PKTS_FROM_PEER, i % 13 + 1);
	}
	for (size_t i = 0; i < ev_len; i += 64)
		evict[i] += (uint8_t)rep;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *ns, unsigned reps)
{
	qsort(ns, reps, sizeof(*ns), cmp_u64);
	printf("%-22s median %8.3f ms  min %8.3f  max %8.3f  (%u samples)\n", what,
	       (double)ns[reps / 2] / 1e6, (double)ns[0] / 1e6, (double)ns[reps - 1] / 1e6, reps);
}

static uint64_t time_rank(struct master *m, unsigned *live)
{
	struct admin_top_result r;
	uint64_t t0 = mono_ns(), t1;

	if (admin_top_rank(m, 20, &r) < 0) {
		fprintf(stderr, "topscan: admin_top_rank failed\n");
		exit(1);
	}
	t1 = mono_ns();
	*live = r.live;
	admin_top_result_free(&r);
	return t1 - t0;
}

/* The floor under the ranking: the walk alone, each LIVE record's state, generation and
 * counters read as admin_top_rank reads them, nothing kept. */
static uint64_t time_walk(struct master *m, uint64_t *gens, uint32_t cap, unsigned *live)
{
	struct shm_alloc_stat s;
	uint64_t t0 = mono_ns(), t1, sum = 0;

	*live = 0;
	for (uint32_t idx = 0; idx < cap; idx++) {
		shm_alloc_prefetch_ahead(m->shm, idx);
		if (shm_alloc_read_stat(m->shm, idx, gens[idx], &s) < 0)
			continue;
		gens[idx] = s.gen;
		sum += s.ctr[SHM_ACTR_BYTES_TO_PEER];
		(*live)++;
	}
	t1 = mono_ns();
	return sum != 0 ? t1 - t0 : t1 - t0 + 1;
}

static uint64_t time_cmd(struct master *m, const char *line)
{
	uint64_t t0 = mono_ns(), t1;
	json_t *r = admin_dispatch(m, &root_peer, line, strlen(line));

	t1 = mono_ns();
	if (r == NULL || !json_is_true(json_object_get(r, "ok"))) {
		fprintf(stderr, "topscan: %s failed\n", line);
		exit(1);
	}
	json_decref(r);
	return t1 - t0;
}

static uint64_t time_metrics(struct master *m)
{
	struct http_master_stats ms;
	struct http_buf b;
	const struct snap *snap = NULL;
	uint64_t t0 = mono_ns(), t1;

	memset(&ms, 0, sizeof(ms));
	memset(&b, 0, sizeof(b));
	if (snap_open(m->snap_blob, m->snap_len, &snap) < 0 ||
	    http_metrics_render(m->shm, snap, &ms, &b) < 0) {
		fprintf(stderr, "topscan: metrics failed\n");
		exit(1);
	}
	t1 = mono_ns();
	http_buf_free(&b);
	return t1 - t0;
}

int main(int argc, char **argv)
{
	static struct master m;
	static uint64_t t_rank[TOPSCAN_MAX_REPS], t_top[TOPSCAN_MAX_REPS], t_walk[TOPSCAN_MAX_REPS],
		t_status[TOPSCAN_MAX_REPS], t_metrics[TOPSCAN_MAX_REPS];
	struct shm_config sc = { .snap_count = 4, .snap_size = 1u << 20 };
	unsigned n, workers, reps = 21, users = 500, live = 0, walked = 0;
	size_t ev_len = (size_t)512 << 20;
	uint8_t *evict = NULL;
	uint64_t *gens;
	struct mworker *w;

	if (argc < 4) {
		fprintf(stderr, "usage: %s N CAP WORKERS [REPS] [USERS] [EVICT_MIB]\n", argv[0]);
		return 2;
	}
	n = (unsigned)strtoul(argv[1], NULL, 10);
	sc.alloc_cap = (uint32_t)strtoul(argv[2], NULL, 10);
	workers = (unsigned)strtoul(argv[3], NULL, 10);
	if (argc > 4)
		reps = (unsigned)strtoul(argv[4], NULL, 10);
	if (argc > 5)
		users = (unsigned)strtoul(argv[5], NULL, 10);
	if (argc > 6)
		ev_len = (size_t)strtoul(argv[6], NULL, 10) << 20;
	if (n > sc.alloc_cap || workers == 0 || workers > SHM_MAX_SLOTS || reps == 0 ||
	    reps > TOPSCAN_MAX_REPS || users == 0) {
		fprintf(stderr, "topscan: N <= CAP, 1 <= WORKERS <= 255, 1 <= REPS <= %u\n",
			TOPSCAN_MAX_REPS);
		return 2;
	}
	sc.n_slots = workers;
	w = calloc(workers, sizeof(*w));
	gens = calloc(sc.alloc_cap ? sc.alloc_cap : 1, sizeof(*gens));
	if (w == NULL || gens == NULL || (ev_len > 0 && (evict = calloc(1, ev_len)) == NULL))
		return 1;
	m.magic = MASTER_MAGIC;
	m.loop = ev_default_loop(0);
	m.n_slots = workers;
	m.workers = w;
	for (unsigned i = 0; i < workers; i++) {
		w[i].m = &m;
		w[i].ctl_fd = -1;
		w[i].last_status = -1;
	}
	handoffq_init(&m); /* as supervise_init does: no queue until a frame waits */
	if (conf_load_default(NULL, &m.cfg) < 0 || shm_create(&sc, "topscan", &m.shm) < 0 ||
	    reload_publish(&m) < 0 || fill(m.shm, n, workers, users) < 0) {
		fprintf(stderr, "topscan: setup failed\n");
		return 1;
	}
	(void)time_rank(&m, &live);	/* the baseline's first allocation is not a sample */
	for (unsigned i = 0; i < reps; i++) {
		between(m.shm, sc.alloc_cap, i, evict, ev_len);
		t_rank[i] = time_rank(&m, &live);
		between(m.shm, sc.alloc_cap, i, evict, ev_len);
		t_top[i] = time_cmd(&m, "{\"cmd\":\"top\",\"rows\":20}");
		t_status[i] = time_cmd(&m, "{\"cmd\":\"status\"}");
		t_metrics[i] = time_metrics(&m);
		between(m.shm, sc.alloc_cap, i, evict, ev_len);
		t_walk[i] = time_walk(&m, gens, sc.alloc_cap, &walked);
	}
	printf("topscan: %u live of %u records, %u workers, %u users, evict %zu MiB; live seen %u\n",
	       n, sc.alloc_cap, workers, users, ev_len >> 20, live);
	report("admin_top_rank", t_rank, reps);
	report("top rows 20 (command)", t_top, reps);
	report("status (command)", t_status, reps);
	report("metrics render", t_metrics, reps);
	report("walk alone (floor)", t_walk, reps);
	admin_top_free(m.top);
	shm_destroy(m.shm);
	conf_free(m.cfg);
	snap_blob_free(m.snap_blob, m.snap_len);
	free(evict);
	free(gens);
	free(w);
	return live == n && walked == n ? 0 : 1;
}
