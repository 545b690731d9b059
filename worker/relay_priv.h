/* Worker relay pipeline, between its own files (Varnish's *_priv.h): the pipeline's view
 * of an allocation (struct wk_party), the receiving end (struct wk_rx), the one count,
 * the relay sockets' batches, and what the short circuit, the hand-over channel, the
 * siblings and this instance's own sockets answer. Only the pipeline's files (relay.h
 * lists them) include it. Worker process only. */
#ifndef TG_WORKER_RELAY_PRIV_H
#define TG_WORKER_RELAY_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "shm/shm_bw.h"
#include "shm/shm_relay.h"
#include "worker/relay.h"

/* Client -> peer datagrams of one received UDP batch, grouped (relaysock.c): consecutive
 * datagrams of one allocation to one peer make a run. The iovecs point into the batch's rx
 * slots, so the run is sent before the next recvmmsg and before any STUN message is
 * handled (which may refresh an allocation away). */
struct wk_txg {
	struct wk_alloc *a;
	struct wk_relay *r;
	uint32_t cl;			/* the peer's cluster, for its counters */
	bool sib;			/* the peer is a sibling's relay address */
	struct wk_gso_run run;
};

/* An IP of this instance's relays (a relay address or a mask), for the short circuit. */
struct wk_sc_ip {
	uint8_t family;
	uint8_t addr[16];
};
#define WK_SC_MAX_IPS (3 * WK_MAX_LISTENERS)

/* One of this instance's own sockets (self.c): an address (canonical, conf_addr_canon)
 * or any local address, with a port range. relay: a relay range reached through the
 * short circuit or a sibling's slice, never otherwise. */
struct wk_self_sock {
	uint8_t family;
	bool any, relay;
	uint16_t port_min, port_max;
	uint8_t addr[16];
};
#define WK_SELF_MAX (3 * WK_MAX_LISTENERS + SNAP_HTTP_PORTS)
#define WK_SELF_MAX_LOCAL 64

struct wk_self {
	struct wk_self_sock socks[WK_SELF_MAX];
	unsigned n;
	struct wk_sc_ip local[WK_SELF_MAX_LOCAL]; /* interface addresses, canonical */
	unsigned n_local;
	uint64_t local_ns;                        /* when read; 0: read at the next need */
};

/* A sibling instance's relay address and its slice of the relay ports (sibling.c). */
struct wk_sib {
	uint8_t family;
	uint8_t addr[16];
	uint16_t port_min, port_max;
};
#define WK_MAX_SIBS 256

/* The pipeline's own state (wk_pipeline_init), held by w->pl: the batch's group toward
 * peers, and the addresses the short circuit, the siblings and this instance's own sockets
 * are told apart by, refreshed from each snapshot. */
struct wk_pipeline {
	struct wk_txg txg;
	struct wk_sc_ip sc_ips[WK_SC_MAX_IPS]; /* distinct relay IPs and masks (shortcut.c) */
	unsigned n_sc_ips;
	struct wk_self self; /* this instance's own sockets, never a peer (self.c) */
	struct wk_sc_ip masks[WK_MAX_LISTENERS]; /* distinct masks (sibling.c) */
	unsigned n_masks; /* also: some listener masks (the inbound mapping's guard) */
	struct wk_sib sibs[WK_MAX_SIBS]; /* the snapshot's sibling addresses (sibling.c) */
	unsigned n_sibs;
	uint8_t sc_buf[WK_HEADROOM + WK_DGRAM_MAX]; /* a short-circuited datagram */
};

/* An allocation as the pipeline sees it: its listener here and its record, with its
 * private half (own) when this worker owns it. The receiver of a short-circuited datagram
 * may be another worker's UDP client, known by its record only (shm_relay_target_read). */
struct wk_party {
	struct wk_listener *l;
	struct wk_alloc *own;		/* NULL: another worker's allocation */
	uint32_t idx;			/* its record */
	uint32_t lslot;			/* the record's listener slot */
	uint64_t user_key;		/* not own: its user's key when read (want_user) */
};

/* The party of a's own allocation. */
static inline struct wk_party wk_party_own(struct wk_alloc *a)
{
	return (struct wk_party){
		.l = a->l, .own = a, .idx = a->rec_idx, .lslot = a->rec->listener_idx
	};
}

/* The receiving end of peer -> client datagrams. A relay socket's (wk_relay_socket_rx)
 * is filled once per received batch: the sender's permission and channel are looked up in
 * own's record per datagram. The short circuit's (wk_sc_rx) is filled per datagram from
 * the record as read under its seqlock (sc true: perm and chan are set). */
struct wk_rx {
	struct wk_party p;
	bool sc;			/* perm and chan were read with the record */
	bool perm;			/* sc: the sender holds a permission */
	uint16_t chan;			/* sc: the sender's channel, 0 none */
	bool relayed;			/* the sender is an allocation of this instance or a
					 * sibling's: a missing permission counts as a denial */
	const struct sockaddr *to;	/* where datagrams to a UDP client go (the client or its
					 * proxy); NULL: unknown, each one is a send error */
	socklen_t to_len;
	struct sockaddr_storage client;	/* to's storage for another worker's client */
};

/* Messages of one relay socket's batch to its UDP client (wk_relay_cb), sent together
 * once the batch is read (one UDP_SEGMENT send or one sendmmsg). */
struct wk_rbatch {
	struct mmsghdr out[WK_BATCH];
	struct iovec iov[WK_BATCH];
	unsigned n;
};

/* The one count of n admitted datagrams (bytes in all) between a peer of cluster cl and
 * party p, direction dir: per cluster, per listener, on the record (another worker's:
 * shm_relay_ctr_add); toward a peer also globally (a peer's datagram is counted globally
 * when received, wk_relay_received). TO_PEER: once sent (or taken by a hand-over
 * channel). Always inlined: every caller passes a constant dir, so the counter indexes fold
 * to constants as where the counters were written out by hand (GCC otherwise keeps one
 * out-of-line copy for both directions, at about twice the instructions). */
__attribute__((always_inline))
static inline void wk_relay_count(struct worker *w, const struct wk_party *p,
				  enum shm_bw_dir dir, uint32_t cl, unsigned n, size_t bytes)
{
	bool out = dir == SHM_BW_TO_PEER;

	if (out) {
		shm_ctr_add(w->ctr, SHM_CTR_PEER_PKTS_OUT, n);
		shm_ctr_add(w->ctr, SHM_CTR_PEER_BYTES_OUT, bytes);
	}
	shm_lctr_add(w->ctr, p->l->slot, out ? SHM_LCTR_PEER_PKTS_OUT : SHM_LCTR_PEER_PKTS_IN, n);
	shm_lctr_add(w->ctr, p->l->slot, out ? SHM_LCTR_PEER_BYTES_OUT : SHM_LCTR_PEER_BYTES_IN,
		     bytes);
	shm_cctr_add(w->ctr, cl, out ? SHM_CCTR_PEER_PKTS_OUT : SHM_CCTR_PEER_PKTS_IN, n);
	shm_cctr_add(w->ctr, cl, out ? SHM_CCTR_PEER_BYTES_OUT : SHM_CCTR_PEER_BYTES_IN, bytes);
	if (p->own == NULL) {
		shm_relay_ctr_add(w->shm, p->idx, n, bytes);
		return;
	}
	shm_alloc_ctr_add(p->own->rec, out ? SHM_ACTR_PKTS_TO_PEER : SHM_ACTR_PKTS_FROM_PEER, n);
	shm_alloc_ctr_add(p->own->rec, out ? SHM_ACTR_BYTES_TO_PEER : SHM_ACTR_BYTES_FROM_PEER,
			  bytes);
}

/* A datagram of len bytes reached a relay socket of ours, or was short-circuited to one
 * (counted before any check). */
static inline void wk_relay_received(struct worker *w, size_t len)
{
	shm_ctr_add(w->ctr, SHM_CTR_PEER_PKTS_IN, 1);
	shm_ctr_add(w->ctr, SHM_CTR_PEER_BYTES_IN, len);
}

/* The receiving end of a's relay sockets (to: its destination, once per batch). */
void wk_relay_socket_rx(struct wk_alloc *a, struct wk_rx *rx);
/* Peer -> client: a datagram from `from` (a's announced address as rx->relayed says)
 * for rx's client: admitted (TO_CLIENT), counted, copied to payload unless it is there
 * already (payload: WK_HEADROOM free before it, 3 bytes after), framed there (ChannelData
 * or a Data indication) and sent: to a stream client at once; to a UDP client into b when
 * not NULL, else into the listener batch's group (wk_ctg_send). */
void wk_relay_in(struct worker *w, const struct wk_rx *rx, const struct sockaddr *from,
		 const uint8_t *data, uint8_t *payload, size_t len, uint64_t now_ns,
		 struct wk_rbatch *b);

/* ---- shortcut.c: what the short circuit finds ---- */
/* A live UDP allocation of this instance that a peer address names (wk_sc_find). */
struct wk_sc_hit {
	struct shm_relay_target t;	/* its record, read for the sender */
	struct wk_listener *tl;		/* its listener here */
	struct wk_alloc *own;		/* its private half, when this worker owns it */
	bool reachable;			/* its client is reached from this worker */
	struct shm_addr to;		/* the peer address (its relay IP or mask, and port) */
	struct shm_addr from;		/* the sender's announced address */
	struct sockaddr_storage from_sa;
};
/* Whether peer (one of this instance's relay IPs or masks, wk_sc_own_ip) names a live UDP
 * allocation of this instance, read for a's relay r as the sender: 0 and *h, or -ENOENT. */
int wk_sc_find(struct worker *w, struct wk_alloc *a, const struct wk_relay *r,
	       const struct sockaddr *peer, struct wk_sc_hit *h);
/* The receiving half of a short-circuited datagram to h's allocation (reachable): counted
 * as received, then wk_relay_in. */
void wk_sc_receive(struct worker *w, const struct wk_sc_hit *h, const uint8_t *data, size_t len,
		   uint64_t now_ns);

/* ---- sibling.c ---- */
/* When peer is one of this instance's masks with a port in a sibling's slice: *to = that
 * sibling's relay address (same family) and port, true. */
bool wk_sib_target(const struct worker *w, const struct sockaddr *peer,
		   struct sockaddr_storage *to);

/* ---- relaysock.c: the relay sockets ---- */
/* Sends an admitted client -> peer datagram from relay socket r (cl: the peer's cluster):
 * joins the current batch's group when it can (struct wk_txg), else goes at once. sib:
 * peer is a sibling's relay address (wk_sib_target), counted as such once sent. */
void wk_peer_send(struct worker *w, struct wk_alloc *a, struct wk_relay *r,
		  const struct sockaddr *peer, uint32_t cl, const uint8_t *data, size_t len,
		  bool sib);
/* Frames a peer datagram for the client in place: payload (len bytes, WK_HEADROOM free
 * before it, 3 after) becomes ChannelData of channel chan (padded to 4 bytes when stream)
 * or, chan 0, a Data indication from peer. Returns the message start, or NULL. */
uint8_t *wk_frame_peer(uint8_t *payload, size_t len, const struct sockaddr *peer, uint16_t chan,
		       bool stream, size_t *out_len);
/* Queues message m (mlen bytes) to `to` in b. */
void wk_rbatch_add(struct wk_rbatch *b, const struct sockaddr *to, socklen_t to_len, uint8_t *m,
		   size_t mlen);

/* ---- shortcut.c (relay to relay inside the instance) ---- */
/* Whether peer's IP is one of this instance's relay addresses or masks. */
bool wk_sc_own_ip(const struct worker *w, const struct sockaddr *peer);
/* Whether peer may be (now or later) one of this instance's relays: a mask, any port; a
 * relay address with a port in a listener's relay port range. Such a peer is never
 * offloaded (the short circuit, or the sibling translation, decides in user space); a
 * peer that merely shares the relay's IP (a media server on the same host) is. */
bool wk_sc_maybe_relay(const struct worker *w, const struct sockaddr *peer);
struct shm_relay_target;
/* The live UDP allocation of this instance that relay address `to` (a relay IP or a mask,
 * with its port) names, read for the sender's announced address `from` (permission,
 * channel) at now_ns, and *tl its listener here. 0, or -ENOENT (none). */
int wk_sc_target(struct worker *w, const struct shm_addr *to, const struct shm_addr *from,
		 uint64_t now_ns, bool want_user, struct shm_relay_target *t,
		 struct wk_listener **tl);
/* Peer -> client on a relay socket of listener l: when from is the relay address of a live
 * allocation of this instance whose listener masks it, *out = the announced (masked)
 * address, which the permission check and the Data indication then use (what
 * the short circuit sends through the relay sockets, for a client it cannot reach without a
 * hand-over channel, arrives so); when from is a sibling's relay address, l's mask with
 * from's port (wk_sib_from).
 * Returns true when set. */
bool wk_sc_announced_from(struct worker *w, const struct wk_listener *l,
			  const struct sockaddr *from, struct sockaddr_storage *out);

/* The owner's half of a hand-over (handover.c): a datagram for record idx (claim
 * generation gen, relay port `port`) from the sender's announced address `from`, that
 * another worker found by the short circuit and could not deliver. Re-read under the
 * record's seqlock: when it is no longer LIVE, no longer holds the port, is of another
 * generation or owned by another slot, or its client is not this worker's, the datagram
 * is dropped and counted (SHM_CTR_SHORT_CIRCUIT_STALE); else the receiving half runs as
 * for this worker's own short circuit (routes, permission, bandwidth, counters, framing,
 * the send to its client). */
void wk_sc_accept(struct worker *w, uint32_t idx, uint64_t gen, uint16_t port,
		  const struct shm_addr *from, const uint8_t *data, size_t len);

/* ---- handover.c (the short circuit's datagrams for another worker's client) ---- */
/* Sends data (len bytes, at most WK_DGRAM_MAX - 4), from the sender's announced address
 * `from` to relay port `port` of target t, to t's owner worker without blocking. Returns
 * 0 (sent: the owner decides the rest), -ENOTCONN (no channel to t->owner: none in the
 * heritage, t->owner out of range or this worker), or -errno of the send (-EAGAIN: the
 * channel is full). */
int wk_ho_send(struct worker *w, const struct shm_relay_target *t, uint16_t port,
	       const struct shm_addr *from, const uint8_t *data, size_t len);

/* ---- sibling.c (masked addresses of other instances, admin.siblings) ---- */
/* Whether a is one of this instance's masks. */
bool wk_sib_is_mask(const struct worker *w, const struct shm_addr *a);
/* Whether port lies in the relay port range of one of this instance's listeners. */
bool wk_sib_own_port(const struct worker *w, uint16_t port);
/* Whether peer is one of this instance's masks with a port in no slice: neither a
 * listener's relay port range nor a sibling's (of peer's family). Such a peer is refused
 * as the routes refuse one (wk_peer_allowed, ChannelBind). */
bool wk_sib_refused(const struct worker *w, const struct sockaddr *peer);
/* Whether peer is a sibling's relay address with a port in its slice. */
bool wk_sib_addr(const struct worker *w, const struct sockaddr *peer);
/* Peer -> client on a relay socket of listener l: when from is a sibling's relay address
 * with a port in its slice and l masks from's family, *out = l's mask with from's port,
 * counted (before any check) as received from a sibling. Returns true when set. */
bool wk_sib_from(struct worker *w, const struct wk_listener *l, const struct sockaddr *from,
		 struct sockaddr_storage *out);

/* ---- self.c (this instance's own sockets, never a peer) ---- */
/* Whether peer (address and port) is one of this instance's own sockets, other than a
 * relay address or mask of ours (the short circuit's) or a sibling's slice. */
bool wk_self_refused(struct worker *w, const struct sockaddr *peer);

/* ---- peer.c ---- */
/* The one count of a refused peer: perm_denied, globally and at l while it is listed.
 * Returns -EACCES. */
int wk_peer_deny(struct worker *w, const struct wk_listener *l);

#endif
