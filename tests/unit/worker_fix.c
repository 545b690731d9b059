/* Unit-test fixture for the worker's channels (worker_fix.h). */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "tests/unit/worker_fix.h"

void worker_fix_create(const char *name, unsigned n, struct shm **shm,
		       struct worker_heritage *h, struct worker **w)
{
	struct shm_config cfg = { n, 4, 4096, 32 };

	assert_int_equal(shm_create(&cfg, name, shm), 0);
	for (unsigned s = 0; s < n; s++) {
		w[s] = calloc(1, sizeof(*w[s]));
		assert_non_null(w[s]);
		h[s] = (struct worker_heritage){ .slot = s, .slot_count = n, .shm = *shm,
						 .ctl_fd = -1, .offload = { -1, -1 } };
		w[s]->magic = WK_MAGIC;
		w[s]->h = &h[s];
		w[s]->shm = *shm;
		w[s]->slot = s;
		w[s]->ctr = shm_slot_counters(*shm, s);
		w[s]->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
		assert_non_null(w[s]->loop);
	}
}

void worker_fix_destroy(struct shm *shm, unsigned n, struct worker **w)
{
	for (unsigned s = 0; s < n; s++) {
		ev_loop_destroy(w[s]->loop);
		free(w[s]);
	}
	shm_destroy(shm);
}

uint64_t worker_fix_ctr(struct shm *shm, unsigned slot, enum shm_ctr i)
{
	struct shm_counters out;

	assert_int_equal(shm_counters_read(shm, slot, &out), 0);
	return out.v[i];
}
