/* Worker: the UDP allocations' relay sockets across a live upgrade. The old worker writes
 * them into its slot's relay channel when it stops (IPC_RELAYS frames, common/ipc.h); the
 * new worker of the slot reads them and takes each with the allocation it adopts instead
 * of binding a new socket (master/relayho.c makes the channel and passes its ends on). A
 * socket keeps its port, its buffers, its DF mode and the datagrams that arrived meanwhile;
 * nothing is closed or bound again. */
#ifndef TG_WORKER_RELAYHO_H
#define TG_WORKER_RELAYHO_H

#include <stddef.h>
#include <stdint.h>

struct worker;

/* IPC_RELAY_CHAN: fd, the sending end of this slot's relay channel, is w's now. */
void wk_relayho_chan(struct worker *w, int fd);

/* Old worker, after IPC_PARK and its stop: writes the relay socket of every UDP client's
 * allocation it holds into the channel (none came: nothing), IPC_FDS_MAX a frame, and
 * stops watching each one written (the new processes read it from then on; the record
 * stays LIVE). Nobody reads the channel yet: what does not fit in it closes with the
 * worker, and the new one binds those ports again. Returns how many went. */
size_t wk_relayho_send(struct worker *w);

/* Old worker, leaving the table after wk_relayho_send: takes the allocations whose
 * sockets went off its list without tearing their private half down (closing each socket,
 * unbooking its port, unindexing it), as a crash leaves them: the process exits next and
 * the kernel closes what it holds; that work, 15,000 times a worker, lengthened a live
 * upgrade's gap. Returns how many. */
size_t wk_relayho_abandon(struct worker *w);

/* New worker: the sockets of its heritage's relay channel by record, for its adoption. */
struct wk_relayho {
	int *fd1;		/* by IPC_RELAY_KEY in this table: the descriptor + 1, 0 none */
	uint32_t n_keys;
	size_t left;		/* not taken yet */
};

/* Reads the whole channel (h->relay_chan; closes it) and indexes its sockets by record:
 * after a take-over (h->adopt) renamed from the image's records to this table's. Returns
 * 0 (none: an empty map) or -ENOMEM (the channel is left unread). */
int wk_relayho_open(struct worker *w, struct wk_relayho *m);
/* The handed-over socket `which` (0, 1) of record idx, now the caller's; -1 when none. */
int wk_relayho_take(struct wk_relayho *m, uint32_t idx, unsigned which);
/* Closes what was not taken (records that could not be adopted), frees m. Returns how
 * many it closed. Accepts an empty map. */
size_t wk_relayho_close(struct wk_relayho *m);

#endif
