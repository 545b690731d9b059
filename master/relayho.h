/* Master: the UDP allocations' relay sockets across a live upgrade (the workers' side is
 * worker/relayho.c; frames: IPC_RELAY_CHAN, IPC_RELAYS in common/ipc.h).
 *
 * A relay channel per slot (an AF_UNIX SOCK_SEQPACKET pair) carries them from the old
 * worker to the new one, without any master holding them (a master's descriptor limit is
 * a worker's, and 250,000 sockets are many workers' shares):
 *
 *   old master -> old worker   at the hand-over, before IPC_PARK, when the new master takes
 *                              them ("ready streams relays"): the sending end;
 *   old worker                 writes its relay sockets into it as it stops, and exits:
 *                              they wait in the channel;
 *   old master -> new master   once the lock is free, with the TCP connections: the
 *                              receiving ends;
 *   new master -> new worker   in the heritage of the slot (the worker count is kept).
 *
 * The old master keeps its receiving ends until the new master serves: when the upgrade
 * fails, its respawned workers read them instead (the same table: nothing to rename). */
#ifndef TG_MASTER_RELAYHO_H
#define TG_MASTER_RELAYHO_H

struct master;
struct ipc_msg;

/* Old master, at the hand-over: a channel for every slot whose worker runs; the sending
 * end goes to the worker (IPC_RELAY_CHAN), the receiving end is kept. A slot whose channel
 * cannot be made binds its ports again. */
void relayho_channels(struct master *m);
/* Old master: sends the receiving ends on fd (IPC_RELAY_CHAN, one a slot) within
 * timeout_ms, keeping its copies. Returns 0 or -errno. */
int relayho_forward(struct master *m, int fd, int timeout_ms);
/* New master: an IPC_RELAY_CHAN frame from the old master; fd is taken. */
void relayho_receive(struct master *m, const struct ipc_msg *msg, int fd);
/* The receiving end for slot's worker (ours: the child takes its copy), or -1. */
int relayho_rx(const struct master *m, unsigned slot);
/* Closes our ends: after the workers that read them were forked, when the new master
 * serves, after a failed upgrade's respawn. */
void relayho_release(struct master *m);

#endif
