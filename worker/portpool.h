/* Relay port pool: where a worker looks for a free port of a listener's relay range.
 *
 * The bookings are shared by every worker (shm/shm_ppool.h): any worker takes any free
 * port of the range, and a port is booked by the allocation record (or the reservation)
 * that holds it, so a crashed worker's ports stay with the allocations its replacement
 * re-adopts. What stays private is only the search cursor: each worker starts its
 * round-robin at its own place in the range (fewer races for the same port), and a freed
 * port is reused after every other port without a booking, which keeps a late packet for
 * an old allocation from reaching a new one. A port whose booking outlived its owner (a
 * record killed between booking and writing its port, an expired reservation whose
 * entry is not reused yet) comes back only once no port without a booking, the freed one
 * included, is left: the search passes booked ports on the pool's words alone, without
 * reading their records, so that it stays cheap when the range is nearly full. The pool
 * only books ports: binding the socket is the caller's job (portpool_bind tries them),
 * and a port the kernel refuses (EADDRINUSE, another program) is given back and skipped
 * by trying the next one.
 */
#ifndef TG_WORKER_PORTPOOL_H
#define TG_WORKER_PORTPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "shm/shm_ppool.h"

struct portpool {
	uint16_t lo, hi;	/* the listener's relay range, inclusive; lo 0: unusable */
	uint16_t cursor;	/* next port to try */
};

/* Sets the pool up for the range [min,max]; worker `slot` of `slot_count` starts its
 * search at its share of the range. Returns 0 or -EINVAL (an empty range). */
int portpool_init(struct portpool *p, uint16_t min, uint16_t max, unsigned slot,
		  unsigned slot_count);

/* Forgets the range (nothing to free); accepts a zeroed pool. */
void portpool_destroy(struct portpool *p);

/* Books a free port of the range for record idx on relay address tag (shm_ppool_tag).
 * even: the port is even. resv non-NULL: EVEN-PORT with the R bit: the port is even and
 * port + 1 is reserved with resv's token, listener key, family and expiry (resv->tag and
 * resv->port are set here). Returns 0 and *port, or -EADDRNOTAVAIL when none is free. */
int portpool_get(struct portpool *p, struct shm *shm, uint32_t tag, uint32_t idx, bool even,
		 struct shm_ppool_resv *resv, uint64_t now_ns, uint16_t *port);

/* Binds the caller's socket to port, already booked for the caller's record: returns 0,
 * -EADDRINUSE (the kernel refuses the port: try another) or another negative errno. */
typedef int portpool_bind_fn(void *ctx, uint16_t port);

#define PORTPOOL_TRIES 64	/* ports tried for one relay socket */

/* Books a port as portpool_get does and binds it with bind(ctx, port); a port the kernel
 * refuses (-EADDRINUSE) is given back (with its reservation, resv non-NULL) and another
 * tried, up to PORTPOOL_TRIES; after a refusal the tries search as the checked round,
 * round-robin from the cursor, so a refused port (its word empty again) hides no port
 * whose booking outlived its owner. Returns 0 and *port (booked and bound), bind's error
 * other than -EADDRINUSE (nothing left booked), or -EADDRNOTAVAIL (no port free, or every
 * port tried was refused). */
int portpool_bind(struct portpool *p, struct shm *shm, uint32_t tag, uint32_t idx, bool even,
		  struct shm_ppool_resv *resv, uint64_t now_ns, portpool_bind_fn *bind, void *ctx,
		  uint16_t *port);

#endif
