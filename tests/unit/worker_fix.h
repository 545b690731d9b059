/* Unit-test fixture for the worker's channels: a shm table and hand-made workers on it, as
 * worker_run leaves them for the part under test (test_handover.c, test_dtlslinger.c,
 * test_relayho.c, test_adopt_expiry.c, test_wkctl.c). */
#ifndef TG_TESTS_WORKER_FIX_H
#define TG_TESTS_WORKER_FIX_H

#include <stdint.h>

#include <netinet/in.h>

#include "shm/shm.h"
#include "shm/shm_alloc.h"
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

/* The IPv4 address ip (host order), port port. */
struct sockaddr_in worker_fix_sin4(uint32_t ip, uint16_t port);

/* A non-blocking socket of type bound to 127.0.0.1, an ephemeral port; *port gets it. */
int worker_fix_bound(int type, uint16_t *port);

/* For an adoption's tests (test_relayho.c, test_adopt_expiry.c): w's tables and wheel, and
 * l its only listener, a UDP one named "udp" in slot 1, bound to 127.0.0.1 (l->fd, the
 * caller closes it), relaying on 127.0.0.1. */
void worker_fix_adopter(struct worker *w, struct wk_listener *l);

/* Claims a record of slot 0 for a UDP client at 127.0.0.1:client_port on l, relayed at
 * 127.0.0.1:relay_port, its lifetime ending at expires_ns, and leaves its write open in
 * *rec (the caller adds what its test needs); *idx gets its index. worker_fix_rec_publish
 * ends the write, publishes it LIVE and counts it as the worker does. */
void worker_fix_rec(struct shm *shm, const struct wk_listener *l, uint16_t client_port,
		    uint16_t relay_port, uint64_t expires_ns, uint32_t *idx,
		    struct shm_alloc **rec);
void worker_fix_rec_publish(struct shm *shm, const struct wk_listener *l, uint32_t idx,
			    struct shm_alloc *rec);

#endif
