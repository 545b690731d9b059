/* Worker TURN methods: the handler of every STUN message and ChannelData a client sends
 * (turn.c: Binding, Allocate, Refresh, CreatePermission, ChannelBind, Send; wk_turn_input
 * is what the transports hand input to), long-term credentials (auth.c, with the
 * unauthenticated answers' and failed authentications' budgets, unauth.h, authfail.h),
 * and RFC 6062's Connect and ConnectionBind with their peer connections (tcprelay.c).
 * The top of the request path: it calls the relay pipeline (relay.h), the allocation
 * table (table.h) and the transports (transport.h), never the reverse; the worker
 * registers wk_turn_input and the RFC 6062 hooks with the layers below. Worker process
 * only. */
#ifndef TG_WORKER_TURN_H
#define TG_WORKER_TURN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ev.h>

#include "shm/shm_alloc.h"
#include "stun/stun.h"
#include "worker/table.h"
#include "worker/transport.h"
#include "worker/wk.h"

struct park_hdr;		/* common/park.h */

/* TCP relaying (RFC 6062, worker/tcprelay.c), bounded by the snapshot's limits (struct
 * wk_hot): a Connect must complete within tcp_connect_timeout seconds (else 447); a
 * connected peer must be bound by a ConnectionBind within WK_TCPR_BIND_TIMEOUT_S (RFC 6062
 * 5.3: 30 s) or it is closed. An allocation holds at most tcp_connections peer
 * connections and a worker runs at most tcp_pending_connects connects at once (508 beyond
 * either). Each direction of a bound connection buffers at most tcp_buffer bytes (fixed
 * for the connection when it starts): a full buffer stops reading the side that fills it
 * until the other side drains it. */
#define WK_TCPR_BIND_TIMEOUT_S 30.0
#define WK_TCPR_HASH 1024u		/* peer connections by CONNECTION-ID (power of two) */
/* Descriptors of a worker that peer connections never take (wk_tcpr_init; docs/relay.md):
 * for its listeners (up to 64), the master's channel, the loop, logs and the kernel fast
 * path's maps, and for the allocations and connections that come after them. */
#define WK_TCPR_FD_RESERVE 256u

/* ---- auth.c ---- */
enum wk_auth_result {
	WK_AUTH_OK = 0,
	WK_AUTH_REPLIED
};
/* A request's credentials, once authenticated. */
struct wk_cred {
	char user[SHM_ALLOC_USER_MAX + 1];
	size_t user_len;
	uint8_t key[SHM_ALLOC_KEY_MAX];
	size_t key_len;
	uint8_t key_alg;		/* enum shm_key_alg */
	bool sha256;			/* request used MESSAGE-INTEGRITY-SHA256 */
	int64_t cred_expiry;
};
/* Authenticates req for a new allocation (a == NULL) or an existing one. On success
 * writes the key (and its algorithm, username, credential expiry) into *cred and
 * returns WK_AUTH_OK; otherwise the error response was sent. */
enum wk_auth_result wk_auth_check(struct worker *w, const struct wk_ep *ep,
				  const struct stun_msg *req, const struct wk_alloc *a,
				  struct wk_cred *cred);
/* A ConnectionBind for a CONNECTION-ID of another worker (slot), before its connection
 * moves there: req is checked as the owner checks it, with the stored key and realm of a
 * LIVE allocation of slot with req's USERNAME (read from the shared table), so that what
 * no longer opens a new allocation (a rotated secret, an expired REST username, a changed
 * password or realm) still binds, as on the owner; with the listener's credentials, as
 * wk_auth_check does for a new allocation, only when slot has no such allocation.
 * Failures are charged to the failed-auth budgets either way (any connection may send
 * one). A nonce not bound to ep's address is not refused (it may be the control
 * connection's, which only the owner can check: the owner authenticates the request
 * again). WK_AUTH_OK, or the error response was sent. */
enum wk_auth_result wk_auth_check_bind(struct worker *w, const struct wk_ep *ep,
				       const struct stun_msg *req, unsigned slot,
				       struct wk_cred *cred);
/* Whether req's NONCE is ours, fresh and bound to ep's address (nothing answered). */
bool wk_auth_nonce_ours(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req);
/* Appends MESSAGE-INTEGRITY(-SHA256) as the request used, then FINGERPRINT if asked. */
void wk_auth_sign(struct stun_builder *b, const struct wk_cred *cred, bool fingerprint);
/* Whether the revocation list refuses record rec's username at unix time now. */
bool wk_rec_revoked(struct worker *w, const struct shm_alloc *rec, int64_t now);
/* Ends this worker's allocations whose username the revocation list now refuses, when the
 * list changed since the last sweep (shm/shm_revoke.h). The master also ends them at
 * once by index when it revokes; this catches an Allocate that raced it (the adoption
 * checks each record itself: worker/adopt.c). Called every second (the heartbeat).
 * Returns whether it swept
 * (the list changed): the caller sweeps what is not in w->allocs too. */
bool wk_revoke_sweep(struct worker *w);

/* ---- turn.c ---- */
/* Error response to req (signed when cred has a key; unsigned ones are rate limited). */
void wk_reply_error(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req, int code,
		    const char *reason, const struct wk_cred *cred);
/* Success response to req with no attributes (signed as cred says). */
void wk_reply_ok(struct worker *w, const struct wk_ep *ep, const struct stun_msg *req,
		 const struct wk_cred *cred, bool with_lifetime, uint32_t lifetime);
/* The channel numbers clients may use (limits.channel_numbers): RFC 5766's wide range
 * unless the current snapshot says strict RFC 8656 (no snapshot: RFC 5766). */
enum stun_chan_range wk_chan_range(const struct worker *w);
/* Handles one datagram or frame from a client (STUN or ChannelData). */
void wk_turn_input(struct worker *w, const struct wk_ep *ep, uint8_t *buf, size_t len);

/* ---- tcprelay.c (RFC 6062) ---- */
/* Live upgrade (park.c, and wk_tcpr_park here): sends one parked socket's state (h completed:
 * magic, version, slot, lengths) and socket fd to the master, within what is left of the worker's
 * parking time. */
int wk_park_send(struct worker *w, struct park_hdr *h, const uint8_t *in, size_t in_len,
		 const uint8_t *out, size_t out_len, int fd);
/* The worker's RFC 6062 state before its first allocation: the queue of peer connections
 * and their budget, derived from the descriptor limit the master set (what the table's
 * relay sockets do not need, shared with the other descriptors beside them). */
void wk_tcpr_init(struct worker *w);
/* Frees what wk_tcpr_init and the pools' census hold (not the peer connections). */
void wk_tcpr_fini(struct worker *w);
/* Connect: a is a TCP allocation, peer passed its checks; starts a non-blocking connect
 * from a's relayed address and answers req (success with CONNECTION-ID, or 447) when it
 * ends. A full worker pool (tcp_pending_connects Connects in flight, or the peer
 * connection budget) makes room by ending one of the user holding the most in it (see
 * wk_tcpr_make_room). Returns 0 (the answer comes later) or an error code to answer now:
 * 446 (a connection to peer exists), 508 (a's own limit; a full pool where a's user holds
 * the most; no memory, no socket). */
int wk_tcpr_connect(struct worker *w, struct wk_alloc *a, const struct sockaddr *peer,
		    const struct stun_msg *req, bool sha256);
/* The relay socket of a TCP allocation is listening: accepts peers that have a permission
 * and that the routes admit, announcing each with a ConnectionAttempt; refuses others
 * with a RST. */
void wk_tcpr_accept_cb(struct ev_loop *loop, ev_io *io, int revents);
/* The connected peer connection id, waiting for its ConnectionBind, owned by this worker
 * and by an allocation of user (user_len bytes), or NULL. */
struct wk_tpeer *wk_tcpr_find(struct worker *w, uint32_t id, const char *user, size_t user_len);
/* The slot whose worker owns CONNECTION-ID id (its low byte, see wk_tpeer_new_id). */
static inline unsigned wk_tcpr_slot(uint32_t id)
{
	return id & 0xffu;
}
/* The allocation tp belongs to. */
struct wk_alloc *wk_tcpr_alloc(const struct wk_tpeer *tp);
/* A claimed tp whose data connection could not be attached: reset and freed. */
void wk_tcpr_drop(struct worker *w, struct wk_tpeer *tp);
/* ConnectionBind answered on c: after the frame, c's socket becomes tp's client side. */
void wk_tcpr_claim(struct worker *w, struct wk_tpeer *tp, struct wk_tconn *c);
/* Live upgrade (park.c): hands a's peer connections waiting for their bind, and bound
 * pairs of plain sockets, to the master (wk_park_send) and frees them here without a
 * FIN; the others end with a. Returns the number of sockets handed over. */
unsigned wk_tcpr_park(struct worker *w, struct wk_alloc *a);
/* Restores a parked peer connection of a (fd; data_fd its bound data connection, or -1)
 * from its header h and the bytes after it. Takes the fds on success only. Returns 0 or
 * -errno. */
int wk_tcpr_restore(struct worker *w, struct wk_alloc *a, const struct park_hdr *h,
		    const uint8_t *body, int fd, int data_fd);
/* Takes fd over as tp's client data connection; pre (pre_len bytes: the client's bytes
 * after the ConnectionBind) goes to the peer, out (out_len bytes: the response not yet
 * written) to the client first. Closes fd on failure. */
void wk_tcpr_attach(struct worker *w, struct wk_tpeer *tp, int fd, const uint8_t *pre,
		    size_t pre_len, const uint8_t *out, size_t out_len);
/* A new snapshot: resets every peer connection of the worker whose peer the listener's
 * routes (IP and port) no longer admit, as the UDP path's per-packet check drops its
 * datagrams. */
void wk_tcpr_recheck_all(struct worker *w);
/* Closes every peer connection of a (the allocation ends). */
void wk_tcpr_alloc_end(struct worker *w, struct wk_alloc *a);

#endif
