/* Master: the UDP allocations' relay sockets across a live upgrade (the workers' side is
 * worker/relayho.c; frames: IPC_RELAYS, common/ipc.h).
 *
 *   old worker -> old master   its relay sockets, IPC_FDS_MAX a frame, each named by its
 *                              record, when it stops for the upgrade;
 *   old master -> new master   once the lock is free, on the upgrade channel, before
 *                              IPC_STREAM_END (only to a new master that said it takes
 *                              them: "ready streams relays");
 *   new master -> new workers  after the take-over copied the table, each socket goes in
 *                              the heritage of the slot that owns its record now.
 *
 * The old master keeps its copies until the new master serves: when the upgrade fails its
 * respawned workers take them back with its own table. A new master that did not get
 * every socket the old one sent fails its start (the old master's copies would keep those
 * ports bound): the old master then serves on with all of them. */
#ifndef TG_MASTER_RELAYHO_H
#define TG_MASTER_RELAYHO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct master;
struct mworker;
struct ipc_msg;
struct worker_relayfd;

/* Old master: an IPC_RELAYS frame from worker w with its n descriptors (taken: kept, or
 * closed when no upgrade that takes them is handing over). */
void relayho_collect(struct mworker *w, const struct ipc_msg *msg, const int *fds, size_t n);
/* Old master: sends every kept socket on fd within timeout_ms, keeping its copies.
 * Returns 0 or -errno. */
int relayho_forward(struct master *m, int fd, int timeout_ms);
/* New master: an IPC_RELAYS frame from the old master (fds taken). */
void relayho_receive(struct master *m, const struct ipc_msg *msg, const int *fds, size_t n);
/* New master: a frame of them that did not arrive whole (a descriptor limit). */
void relayho_lost(struct master *m);
/* New master, after the take-over copied the table: renames each received socket's record
 * to this table's and gives it to the slot that owns it now; closes those whose record was
 * not taken over. Returns -EPIPE when sockets were lost on the way, else 0. */
int relayho_remap(struct master *m);
/* Sockets kept (old master) or received (new master). */
size_t relayho_count(const struct master *m);
/* The sockets for slot's worker (an array to free; the fds stay ours), or NULL with *n 0.
 * Called in the child before worker_run. */
struct worker_relayfd *relayho_heritage(const struct master *m, unsigned slot, size_t *n);
/* Closes our copies: after the workers that take them were forked, when the new master
 * serves, after a failed upgrade's respawn. */
void relayho_release(struct master *m);

#endif
