/* Worker relay pipeline, its entry points: every datagram between a client and a peer
 * goes through one admit, one count and one deliver (relay.c; relay_priv.h holds what the
 * pipeline's own files share). The layer above the transports (transport.h) and the
 * allocation table (table.h), below the TURN methods (turn.h): the methods hand it a
 * client's data (wk_relay_out) and ask it about peers (wk_peer_allowed); the worker
 * registers its relay socket watcher and fast path upkeep with the table (struct
 * wk_table_ops) and refreshes its views of the instance after each snapshot. Its files:
 * relay.c, relaysock.c (relay sockets), shortcut.c, handover.c, sibling.c, self.c,
 * peer.c, fastpath.c (the kernel fast path). Worker process only. */
#ifndef TG_WORKER_RELAY_H
#define TG_WORKER_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ev.h>

#include "conf/snapshot.h"
#include "worker/table.h"
#include "worker/transport.h"
#include "worker/wk.h"

/* ---- relay.c ---- */
/* The pipeline's own state (w->pl; relay_priv.h): 0 or -ENOMEM. Freed by wk_pipeline_free
 * (NULL-safe). */
int wk_pipeline_init(struct worker *w);
void wk_pipeline_free(struct worker *w);
/* Client -> peer: data of a's client to peer (Send indication, ChannelData): admitted on
 * a's side (a relay socket of peer's family, a UDP allocation), then delivered by the
 * short circuit when peer is a live allocation of this instance (counted as sent from a,
 * received by the other), to another worker through the hand-over channel when its client
 * is that worker's, to a sibling's relay address when peer is a mask in a sibling's slice,
 * else through the relay socket. */
void wk_relay_out(struct worker *w, struct wk_alloc *a, const struct sockaddr *peer,
		  const uint8_t *data, size_t len);

/* ---- relaysock.c ---- */
/* Sends the pending client -> peer group and the pending short-circuited group to a
 * client, if any. */
void wk_txg_flush(struct worker *w);
/* The same when some of the pending client -> peer group are a's (the table's flush). */
void wk_txg_flush_alloc(struct worker *w, struct wk_alloc *a);
/* A UDP allocation's relay socket is readable: its batch goes through wk_relay_in. */
void wk_relay_cb(struct ev_loop *loop, ev_io *io, int revents);

/* ---- peer.c ---- */
/* The one peer decision, nothing counted: with check_port, one of this instance's own
 * sockets (wk_self_refused) or a mask's port in no slice (wk_sib_refused) is refused
 * whatever the routes say; then the listener's allowlist in the current snapshot
 * (snap_peer_match: the special ranges, the routes; proto is the peer's transport,
 * CONF_CPROTO_UDP for datagrams and UDP allocations, CONF_CPROTO_TCP for RFC 6062
 * connections and the permissions of TCP allocations; check_port: the admitting cluster's
 * port range too). No snapshot, or a listener without an entry, refuses. Returns 0 and
 * *cl (may be NULL), or -EACCES. The kernel fast path's entries (fastpath.c) ask this too. */
int wk_peer_match(struct worker *w, const struct wk_listener *l, const struct sockaddr *peer,
		  enum conf_cluster_proto proto, bool check_port, uint32_t *cl);
/* wk_peer_match, and a refusal counted (perm_denied, and at the listener while it is
 * listed). Returns 0 and *cl, or -EACCES. */
int wk_peer_allowed(struct worker *w, const struct wk_listener *l, const struct sockaddr *peer,
		    enum conf_cluster_proto proto, bool check_port, uint32_t *cl);
/* ChannelBind's form: IP and port, as a packet's (a channel names the port every
 * ChannelData on it goes to: a port outside the admitting cluster's range, a masked
 * address that names no instance, or one of this instance's own sockets, is refused). */
int wk_peer_bind_allowed(struct worker *w, const struct wk_listener *l, const struct sockaddr *peer,
			 enum conf_cluster_proto proto, uint32_t *cl);

/* ---- after a snapshot is applied, in this order ---- */
/* After a snapshot is applied: the set of this instance's relay IPs and masks, and every
 * listener's name key. */
void wk_sc_refresh(struct worker *w);
/* After a snapshot is applied (and wk_sc_refresh): the siblings' addresses and slices, and
 * the set of this instance's masks. */
void wk_sib_refresh(struct worker *w);
/* After a snapshot is applied (and wk_sc_refresh, wk_sib_refresh): the listeners' sockets
 * as bound, their public addresses and ports, the HTTP ports, and the relay ranges whose
 * sockets bind the wildcard. */
void wk_self_refresh(struct worker *w);

/* ---- handover.c ---- */
/* Starts reading the slot's hand-over channel (no-op without one). */
void wk_ho_start(struct worker *w);

/* ---- fastpath.c: the kernel fast path's entries of this worker's allocations ---- */
/* Rewrites the kernel fast path entries of a's channels from its record (after anything
 * that changes them or their eligibility); no-op when the fast path is off. */
void wk_offload_sync(struct worker *w, struct wk_alloc *a);
/* Removes the entry of channel slot i (before the slot is overwritten or cleared). */
void wk_offload_drop(struct worker *w, struct wk_alloc *a, unsigned i);
/* Removes every entry of a (the allocation ends). */
void wk_offload_drop_all(struct worker *w, struct wk_alloc *a);
/* After a's record is retired: the kernel short circuit's entries of a's channels, both
 * ways (a's own and its partners' back to a), go. */
void wk_offload_sc_forget(struct worker *w, struct wk_alloc *a);
/* A record this worker owns ends without a private half (it waited for its relay port,
 * or the adoption releases it; adopt.c), in two steps around its retire as
 * wk_alloc_destroy's: wk_offload_rec_drop while it is still LIVE (every kernel entry of its
 * channels; what the kernel relayed is added to the record's counters first), then, once
 * the record is DYING, wk_offload_rec_forget (its short circuits' entries both ways; needs
 * l, the listener it came in on, for its announced address: NULL, none left, leaves them
 * to the master's garbage collection). No-op when the fast path is off or the client is
 * not UDP. Where another allocation of l now serves its client's 5-tuple, the client ->
 * peer entry of a channel that one binds too goes only if it is still this record's
 * (tgo_channel_take_if_ours): the other's own entry stays. */
void wk_offload_rec_drop(struct worker *w, struct wk_listener *l, uint32_t idx,
			 struct shm_alloc *rec);
void wk_offload_rec_forget(struct worker *w, struct wk_listener *l, uint32_t idx,
			   struct shm_alloc *rec);
/* wk_offload_sync of every allocation of the worker (a new snapshot). */
void wk_offload_sync_all(struct worker *w);
/* A reload changed the fast path (IPC_OFFLOAD_MAP/OFF): which 0 takes fd as the client ->
 * peer map, 1 as the peer -> client map and then enters every channel in the new maps;
 * 2 turns the fast path off. Takes fd. */
void wk_offload_map(struct worker *w, unsigned which, int fd);

#endif
