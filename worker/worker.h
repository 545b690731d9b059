/* Worker process entry point: the heritage a worker receives from the master at fork.
 *
 * Process model: the master opens every listening socket (one SO_REUSEPORT socket per
 * listener per worker slot), creates the shared-memory segment, a control socketpair
 * per slot and a hand-over socketpair per slot, then forks. In the child it closes
 * everything the heritage does not list and calls worker_run(). The worker never opens
 * listening sockets itself; listeners added by a reload arrive later over the control fd
 * (LISTENER_ADD with SCM_RIGHTS, common/ipc.h).
 */
#ifndef TG_WORKER_WORKER_H
#define TG_WORKER_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offload/offload.h"

struct shm; /* shm/shm.h: the mapped segment handle, created by the master before fork */

/* Socket type of a listening socket: TURN-DTLS listeners are UDP sockets and TURN-TLS
 * ones TCP sockets; the worker learns from the snapshot that they are secured. */
enum worker_proto {
	WORKER_PROTO_UDP = 0,
	WORKER_PROTO_TCP = 1,
};

/* One inherited listening socket of this worker's slot.
 * name: the listener's name in the configuration (matches the snapshot's listener
 *       entry; the worker looks up address, routes and auth by this name).
 * fd:   bound socket (UDP: bound; TCP: bound and listening), O_NONBLOCK not required
 *       (the worker sets it). Ownership passes to the worker, which may close it
 *       (LISTENER_REMOVE, exit). The master keeps its own copy open. */
struct worker_listener {
	const char *name;
	enum worker_proto proto;
	int fd;
};

/* A stream connection a live upgrade handed over (common/park.h): its state blob, its
 * socket, and the record of the allocation it carries in this table (PARK_NO_REC:
 * none). The worker takes fd; the blob stays the master's. */
struct worker_parked {
	const uint8_t *blob;
	size_t len;
	int fd;
	uint32_t rec_idx;
	uint32_t seq;	/* its place in what the master received: the order within a record */
};

/* Everything a worker inherits. Memory pointed to (name strings, listener array, shm
 * handle) belongs to the master's address space as copied by fork and must stay valid
 * in the child for the whole of worker_run(); the worker never frees it.
 * slot:       this worker's index, 0 <= slot < slot_count (its shm slot, its counters,
 *             its partition of the allocation table).
 * slot_count: the number of worker slots configured.
 * shm:        the shared segment mapped before fork.
 * ctl_fd:     the worker's end of the control socketpair (SOCK_SEQPACKET or
 *             SOCK_STREAM, frames per common/ipc.h). EOF on it means the master is gone:
 *             the worker exits.
 * listeners/n_listeners: the slot's listening sockets at fork time. */
struct worker_heritage {
	unsigned slot;
	unsigned slot_count;
	struct shm *shm;
	int ctl_fd;
	const struct worker_listener *listeners;
	size_t n_listeners;
	/* The records a take-over gave the table (shm_taken): the first worker of a slot
	 * adopts those it owns from this list; NULL: it scans the whole table (a respawn). */
	const uint32_t *adopt;
	size_t n_adopt;
	/* The kernel fast path's map fds (offload/offload.h), -1 when it is off: the worker
	 * enters its allocations' bound channels. */
	struct tgo_maps offload;
	/* The short circuit's hand-over channel (worker/handover.c), one AF_UNIX SOCK_DGRAM
	 * socketpair per slot that the master keeps for its life (a respawn gets the same):
	 * handover_rx is this slot's receiving end, which the worker reads; handover_tx has
	 * slot_count entries, slot s's sending end at [s], which any worker writes to reach
	 * the worker of slot s. handover_tx NULL: no channel (harnesses); a datagram for
	 * another worker's stream or DTLS client then goes through the relay sockets. */
	int handover_rx;
	const int *handover_tx;
	/* The slot's stream connections a live upgrade handed over (worker/park.c), taken
	 * over with the allocations, sorted by rec_idx (PARK_NO_REC last); NULL when none. */
	const struct worker_parked *parked;
	size_t n_parked;
	/* relay_chan: relay_rx is the receiving end of the slot's relay channel after a live
	 * upgrade, with the old worker's relay sockets (worker/relayho.c), taken with the
	 * allocations they belong to instead of binding new ones. The worker takes it. */
	bool relay_chan;
	int relay_rx;
	/* The state file's path (a lingering worker's status file goes beside it), NULL when
	 * the table lives in memory. */
	const char *state_path;
	/* The master keeps systemd's file descriptor store (master/fdstore.c): the worker
	 * sends it its stream connections (worker/fdstore.c). */
	bool fdstore;
};

/* Runs the worker: creates a fresh libev loop with ev_loop_new (never the default loop,
 * whose state the master used before fork), registers the listeners and the control fd,
 * marks the slot online and serves until STOP, EOF on ctl_fd, or SIGTERM/SIGINT
 * (after which it drains nothing: it closes allocations and returns).
 * Call only in the child after fork; call once. Returns the process exit status
 * (0 on orderly stop, 1 on a fatal setup error, logged first). The caller should
 * _exit() with it. */
int worker_run(const struct worker_heritage *h);

#endif
