/* Worker: the UDP allocations' relay sockets across a live upgrade. The old worker sends
 * them to the master when it stops (IPC_RELAYS, common/ipc.h), the new worker of the slot
 * that owns each record then takes them with the allocations it adopts instead of binding
 * new ones (master/relayho.c routes them). A socket keeps its port, its buffers, its DF
 * mode and the datagrams that arrived meanwhile; nothing is closed or bound again. */
#ifndef TG_WORKER_RELAYHO_H
#define TG_WORKER_RELAYHO_H

#include <stddef.h>
#include <stdint.h>

struct worker;

/* Old worker, after IPC_PARK and its stop: sends the relay socket of every UDP allocation
 * it holds, in frames of IPC_FDS_MAX, within a few seconds in all; stops watching each one
 * sent (the new processes read it from then on; the record stays LIVE). What could not be
 * sent closes with the worker and is bound again by the new one. Returns how many went. */
size_t wk_relayho_send(struct worker *w);

/* New worker: the heritage's relay sockets by record, for its adoption run. */
struct wk_relayho {
	int *fd1;		/* by IPC_RELAY_KEY: the descriptor + 1, 0 none */
	uint32_t n_keys;
	size_t left;		/* not taken yet */
};

/* Indexes w's heritage (h->relays). Returns 0 (none: an empty map) or -ENOMEM. */
int wk_relayho_open(struct worker *w, struct wk_relayho *m);
/* The handed-over socket `which` (0, 1) of record idx, now the caller's; -1 when none. */
int wk_relayho_take(struct wk_relayho *m, uint32_t idx, unsigned which);
/* Closes what was not taken (records that could not be adopted), frees m. Returns how
 * many it closed. Accepts an empty map. */
size_t wk_relayho_close(struct wk_relayho *m);

#endif
