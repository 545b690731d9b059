/* Unit-test fixture for the worker's channels: a shm table and hand-made workers on it, as
 * worker_run leaves them for the part under test (test_handover.c, test_dtlslinger.c). */
#ifndef TG_TESTS_WORKER_FIX_H
#define TG_TESTS_WORKER_FIX_H

#include <stdint.h>

#include "shm/shm.h"
#include "worker/wk.h"

/* Creates the table name (n slots) in *shm and n workers in w[]: magic, heritage h[s] (its
 * slot, no control socket, no offload maps; the caller adds the fields its test needs),
 * counters and a fresh loop. Fails the test on any error. */
void worker_fix_create(const char *name, unsigned n, struct shm **shm,
		       struct worker_heritage *h, struct worker **w);

/* Destroys what worker_fix_create made: each worker's loop and the worker, then the table.
 * The caller frees what its test added to the workers first. */
void worker_fix_destroy(struct shm *shm, unsigned n, struct worker **w);

/* Slot's counter i as the table holds it now. */
uint64_t worker_fix_ctr(struct shm *shm, unsigned slot, enum shm_ctr i);

#endif
