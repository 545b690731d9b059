/* Relay port pool: which ports of this worker's share of the relay range are free.
 *
 * Worker-private. The configured relay range [min,max] is split into slot_count
 * contiguous shares so workers never race for the same port; each worker hands out ports
 * of its share round-robin (a freed port is reused last, which keeps a late packet for an
 * old allocation from reaching a new one). The pool only books ports: binding the socket
 * is the caller's job, and a port the kernel refuses (EADDRINUSE, another program) is
 * returned with portpool_put and skipped by retrying portpool_get.
 */
#ifndef TG_WORKER_PORTPOOL_H
#define TG_WORKER_PORTPOOL_H

#include <stdbool.h>
#include <stdint.h>

struct portpool {
	uint16_t lo, hi;	/* this worker's share, inclusive */
	uint16_t cursor;	/* next port to try */
	unsigned in_use;
	uint8_t *used;		/* one byte per port of the share */
};

/* Builds the pool for share `slot` of `slot_count` of [min,max]. Returns 0, -EINVAL when
 * the range is empty or smaller than slot_count, or -ENOMEM. */
int portpool_init(struct portpool *p, uint16_t min, uint16_t max, unsigned slot,
		  unsigned slot_count);

/* Frees the pool's memory; accepts a zeroed or already-destroyed pool. */
void portpool_destroy(struct portpool *p);

/* Books a free port. even: the port is even; even_pair: even and port+1 is booked too
 * (EVEN-PORT with the R bit; the caller releases both). Returns 0 and *port, or
 * -EADDRNOTAVAIL when none (also for a pool whose init failed). */
int portpool_get(struct portpool *p, bool even_pair, bool even, uint16_t *port);

/* Books one specific port (a reservation being redeemed); -EADDRINUSE if taken,
 * -ERANGE when outside the share, -EADDRNOTAVAIL for a pool whose init failed. */
int portpool_take(struct portpool *p, uint16_t port);

/* Releases a port booked by get/take; ports outside the share are ignored. */
void portpool_put(struct portpool *p, uint16_t port);

#endif
