/* Worker allocation table (worker/table.c): the private half of each allocation this
 * worker owns (its relay sockets, its 5-tuple or connection link, its timer) beside its
 * record in the shared table, which holds its permissions and channels; relay ports from
 * the shared pool. The layer above the worker core (wk.h): it calls nothing above it, and
 * what the layers above must do when an allocation's sockets or channels change reaches
 * them through the hooks they registered (struct wk_table_ops). Worker process only. */
#ifndef TG_WORKER_TABLE_H
#define TG_WORKER_TABLE_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ev.h>

#include "shm/shm_alloc.h"
#include "shm/shm_ppool.h"
#include "worker/wheel.h"
#include "worker/wk.h"

#define WK_ALLOC_MAGIC 0x574b4131u	/* struct wk_alloc, checked by wk_alloc_checked() */

/* One relay socket of an allocation (two for a dual-stack allocation). */
struct wk_relay {
	struct wk_alloc *a;
	int fd;				/* -1 when unused */
	int family;
	uint16_t port;
	ev_io io;
	union wk_sa addr;		/* announced address with port */
	bool gso_off;			/* UDP_SEGMENT refused on this socket */
	bool df_fast;			/* IP_PMTUDISC_DO set by wk_df_fast */
	bool untuned;			/* adopted: buffers and DF still to set (adopt.c) */
	bool unchecked;			/* handed over: type and port still to verify */
	uint32_t pool_tag;		/* shm_ppool_tag its port is booked on, 0 none */
};

struct wk_alloc {
	uint32_t magic;
	struct worker *w;
	LIST_ENTRY(wk_alloc) hlink;	/* its 5-tuple hash chain (UDP only: conn == NULL) */
	LIST_ENTRY(wk_alloc) link;	/* the worker's list of all allocations */
	struct wk_listener *l;
	struct wk_tconn *conn;		/* TCP: the control connection; NULL for UDP */
	union wk_sa client;
	socklen_t client_len;
	/* A UDP allocation of a proxy_protocol listener: client is the header's source (the
	 * 5-tuple), via the proxy that last forwarded its datagrams, where every datagram to
	 * the client goes (wk_alloc_dest); via_len 0 until known (after a take-over). */
	union wk_sa via;
	socklen_t via_len;
	struct wk_relay relay[2];
	uint32_t rec_idx;
	struct shm_alloc *rec;		/* our record in the shm table (we are its only writer) */
	uint64_t user_key;		/* shm_quota_user_key of its username, 0 until needed */
	uint32_t off_mask;		/* channel slots with a kernel fast path entry (fastpath.c) */
	uint64_t expires_ms;
	struct wheel_timer timer;	/* earliest of allocation/permission/channel expiry */
	bool dont_fragment;
	bool tcp;			/* RFC 6062 allocation: relay[0] is a bound TCP socket */
	struct wk_tpeer *tpeers;	/* its peer connections (tcprelay.c) */
	unsigned n_tpeers;
	bool published;			/* counted in ALLOCS_ACTIVE */
	/* timer armed by wk_alloc_arm_adopted at a bound, not yet at the earliest expiry of
	 * the record's permissions and channels (wk_alloc_rearm_pending) */
	bool arm_pending;
	uint8_t *resp;			/* cached Allocate success (retransmissions) */
	size_t resp_len;
};

/* What the table tells the layers above (the pipeline, the TURN methods), registered
 * once by the worker (wk_tables_init, worker.c) in w->table_ops, so that the table calls
 * nothing above it by name. w->table_ops NULL (a harness that runs the table alone): none
 * is told, and no relay socket may be bound. */
struct wk_table_ops {
	/* Watchers: a UDP allocation's relay socket is readable (peer datagrams, relay.h:
	 * wk_relay_cb); an RFC 6062 allocation's listening relay socket is (a peer connects,
	 * turn.h: wk_tcpr_accept_cb). */
	void (*relay_rx)(struct ev_loop *loop, ev_io *io, int revents);
	void (*relay_accept)(struct ev_loop *loop, ev_io *io, int revents);
	/* a's relay sockets are about to close: the batch's grouped client -> peer datagrams
	 * leave now if some are a's (wk_txg_flush_alloc). */
	void (*flush)(struct worker *w, struct wk_alloc *a);
	/* a ends or is forgotten: its RFC 6062 peer connections close (wk_tcpr_alloc_end). */
	void (*conns_end)(struct worker *w, struct wk_alloc *a);
	/* The kernel fast path's entries of a (relay.h: wk_offload_*): a's channels or their
	 * expiry changed (sync); channel slot i is about to be overwritten or cleared (drop);
	 * a ends, its relay sockets still open (drop_all); a's record was retired, so the
	 * short circuit's entries toward it go (retired). */
	void (*chans_sync)(struct worker *w, struct wk_alloc *a);
	void (*chan_drop)(struct worker *w, struct wk_alloc *a, unsigned i);
	void (*chans_drop)(struct worker *w, struct wk_alloc *a);
	void (*retired)(struct worker *w, struct wk_alloc *a);
	/* A TCP allocation's control connection c carries a from now (a NULL: no more; the
	 * transports' wk_tconn_carry): the table never looks inside a connection. */
	void (*carry)(struct wk_tconn *c, struct wk_alloc *a);
};

/* The allocation a callback was handed, checked (as wk_checked). */
static inline struct wk_alloc *wk_alloc_checked(struct wk_alloc *a)
{
	assert(a != NULL && a->magic == WK_ALLOC_MAGIC);
	return a;
}

struct wk_alloc *wk_alloc_find(struct worker *w, const struct wk_listener *l,
			       const struct sockaddr *client);
int wk_alloc_create(struct worker *w, const struct wk_ep *ep, struct wk_alloc **out);
void wk_alloc_destroy(struct worker *w, struct wk_alloc *a, const char *why);
/* Adoption: the private half of a UDP allocation around record idx, which this slot
 * already owns (left LIVE by a dead predecessor), linked into the 5-tuple index. No
 * relay socket, timer or counter yet. Returns 0, -EINVAL (no client address), -EEXIST
 * (that 5-tuple is already served), -ENOMEM. */
int wk_alloc_attach(struct worker *w, struct wk_listener *l, uint32_t idx, struct shm_alloc *rec,
		    struct wk_alloc **out);
/* Adoption after a live upgrade: the same around record idx of a TURN-TCP allocation,
 * for the handed-over connection ep->c of client ep->addr on ep->l (transport.h:
 * wk_alloc_attach_conn). Returns 0 or -ENOMEM. */
int wk_alloc_attach_ep(struct worker *w, const struct wk_ep *ep, uint32_t idx,
		       struct shm_alloc *rec, struct wk_alloc **out);
/* Adoption: binds the next relay socket of a to exactly the relayed address the record
 * announces (same port, booked in the pool) and starts its watcher. Returns 0 or
 * negative errno (-EADDRINUSE: the pool gives the port to another record; -EBUSY: the
 * kernel refused the bind, a socket still holds the port, the record keeps its booking;
 * -EAFNOSUPPORT,
 * -EADDRNOTAVAIL: announced address moved). */
int wk_alloc_rebind_relay(struct worker *w, struct wk_alloc *a, const struct shm_addr *relay,
			  int fd);
/* A handed-over UDP relay socket is taken unchecked (wk_alloc_rebind_relay with fd >= 0):
 * the check that it is the UDP socket bound to the record's family and port runs later,
 * here, in the pass after the adoption (adopt.c) or at once when receiving on it fails.
 * Returns true when r is checked now or was; else ends a (freed: the caller touches
 * neither again), as a refused socket ended the adoption before, and returns false.
 * Until then a wrong descriptor serves a: a UDP socket bound to another port would pass
 * its datagrams on as a's peers' (those with a permission) and send a's from its port;
 * anything else fails its receives and sends (ERR_RECV, ERR_SEND) and is checked at its
 * first failed receive (wk_relay_cb), so it neither spins nor crashes. Acceptable for
 * that one pass: the sender is the previous worker of this same instance, on a channel
 * the master made for it, trusted no less than the shared table it leaves. */
bool wk_relay_verify(struct worker *w, struct wk_alloc *a, struct wk_relay *r);
/* Unlinks and frees the private half, closing its relay sockets; the record and the
 * counters are left alone (a failed adoption: the caller releases the record). */
void wk_alloc_forget(struct worker *w, struct wk_alloc *a);
void wk_alloc_set_expiry(struct worker *w, struct wk_alloc *a, uint32_t lifetime_s);
void wk_alloc_rearm(struct worker *w, struct wk_alloc *a);
/* An adoption's cheap wk_alloc_rearm: the kernel's entries follow at once, but the timer
 * is armed at the allocation's expiry or WK_ARM_PENDING_MS after now_ms (the adoption's
 * start, mono_ms), whichever comes first, without reading the record's 32 permission and
 * 32 channel expiries (2.5 KiB a record: a fifth of a take-over's adoption, its page
 * faults included). The exact deadline comes with wk_alloc_rearm_pending (the pass after
 * the adoption, adopt.c) or the timer's firing. Meanwhile an expired permission or channel
 * relays nothing (every reader checks its expiry: wk_alloc_perm_ok, wk_alloc_chan_by_*,
 * the kernel's entries); only its sweep from the record may come later than its expiry's
 * next tick: at the tick after that pass, or at the bound's tick itself (the timer's firing
 * sweeps at once what expired before the bound), so no later than the tick of now_ms +
 * WK_ARM_PENDING_MS + 1. */
#define WK_ARM_PENDING_MS 1000u
void wk_alloc_arm_adopted(struct worker *w, struct wk_alloc *a, uint64_t now_ms);
/* Arms a's timer at its exact deadline if wk_alloc_arm_adopted left it pending; returns
 * whether it did. */
bool wk_alloc_rearm_pending(struct worker *w, struct wk_alloc *a);
/* Binds relay socket number (0 or 1) of family. port_hint > 0: that port, already booked
 * for a's record (a redeemed reservation); else a port from the shared pool (even on
 * request; resv non-NULL: an even port whose port + 1 is reserved with resv, see
 * portpool_bind). Returns 0, -EADDRNOTAVAIL (no port: 508), -EAFNOSUPPORT (no relay
 * address of that family: 440). */
int wk_alloc_bind_relay(struct worker *w, struct wk_alloc *a, int family, int port_hint, bool even,
			struct shm_ppool_resv *resv);
int wk_alloc_perm_add(struct worker *w, struct wk_alloc *a, const struct sockaddr *peer);
/* The user a counts for (shm_quota_user_key of its username: a REST username's id), read
 * once and kept in a->user_key. */
uint64_t wk_alloc_user_key(struct wk_alloc *a);
bool wk_alloc_perm_ok(const struct wk_alloc *a, const struct sockaddr *peer, uint64_t now_ns);
int wk_alloc_chan_bind(struct worker *w, struct wk_alloc *a, uint16_t ch,
		       const struct sockaddr *peer);
const struct shm_chan *wk_alloc_chan_by_num(const struct wk_alloc *a, uint16_t ch, uint64_t now_ns);
const struct shm_chan *wk_alloc_chan_by_peer(const struct wk_alloc *a, const struct sockaddr *peer,
					     uint64_t now_ns);
/* The address relay r of a is announced as (XOR-RELAYED-ADDRESS, the short circuit's
 * sender): its listener's relay_address_mask with r's port when the listener masks that
 * family, else r's own address. */
void wk_alloc_announced(const struct wk_alloc *a, const struct wk_relay *r,
			struct sockaddr_storage *out);
/* The shm_ppool_tag of l's relay address of family (its bookings in the shared pool). */
uint32_t wk_pool_tag(const struct wk_listener *l, int family);

#endif
