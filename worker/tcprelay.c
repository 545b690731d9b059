/* Worker TCP relaying (RFC 6062): peer connections made by Connect, bound to a client data
 * connection by ConnectionBind, then raw bytes both ways with bounded buffers, flow
 * control, half-close and reset propagation. Every socket is a plain one in the worker's
 * loop; a peer connection belongs to one allocation and ends with it. */
#include "config.h"

#include "worker/turn.h"
#include "worker/relay.h"
#include "worker/stream.h"
#include "worker/wk.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "common/log.h"
#include "common/park.h"

#define WK_TPEER_MAGIC 0x54504552u	/* struct wk_tpeer, checked by wk_tpeer_checked() */

enum wk_tpeer_state {
	WK_TP_CONNECTING,	/* connect in flight, Connect not answered yet */
	WK_TP_WAIT_BIND,	/* connected, CONNECTION-ID handed out */
	WK_TP_BOUND,		/* relaying between fd[0] (peer) and fd[1] (client) */
};

/* fd is the peer connection until the bind; bound, the pipe joins side 0 (the peer, fd)
 * and side 1 (the client's data connection) with bufs as its two buffers. */
struct wk_tpeer {
	uint32_t magic;
	struct worker *w;
	struct wk_alloc *a;
	struct wk_tpeer *anext, **apprev;	/* the allocation's list */
	struct wk_tpeer *hnext;			/* worker's hash by id */
	TAILQ_ENTRY(wk_tpeer) qlink;		/* worker's queue, oldest first */
	uint32_t id;
	enum wk_tpeer_state st;
	struct sockaddr_storage peer;
	/* the Connect request, answered when the connect ends */
	uint8_t tid[STUN_TID_LEN];
	bool sha256, fingerprint;
	int fd;
	size_t cap;			/* bytes per buffer: the snapshot's tcp_buffer when made */
	ev_io cio;			/* connecting: the connect's completion */
	ev_timer tmo;
	struct wk_pipe pipe;		/* bound */
	bool fdstored;			/* bound and in systemd's fd store (fdstore.c) */
	uint8_t bufs[];
};

static struct wk_tpeer *wk_tpeer_checked(struct wk_tpeer *tp)
{
	assert(tp != NULL && tp->magic == WK_TPEER_MAGIC);
	return tp;
}

/* The gauge is this slot's absolute count (never +1/-1, so it cannot drift; a dead
 * worker's slot is left out by the renderer, which sums live slots only). */
static void wk_tpeer_count(struct worker *w)
{
	CMM_STORE_SHARED(w->ctr->v[SHM_CTR_TCP_PEER_CONNS], (uint64_t)w->n_tpeers);
}

/* The allocation's own count, for `turngatectl allocations`. */
static void wk_tpeer_count_alloc(struct worker *w, struct wk_alloc *a)
{
	shm_bw_alloc_tcp_conns(w->shm, a->rec_idx, a->n_tpeers);
}

static struct wk_tpeer **wk_tpeer_bucket(struct worker *w, uint32_t id)
{
	return &w->tphash[id & (WK_TCPR_HASH - 1)];
}

/* Unlinks and frees tp; abort: close with a RST (SO_LINGER 0) instead of a FIN. */
static void wk_tpeer_free(struct worker *w, struct wk_tpeer *tp, bool abort_conn)
{
	struct wk_tpeer **pp;

	for (pp = wk_tpeer_bucket(w, tp->id); *pp; pp = &(*pp)->hnext)
		if (*pp == tp) {
			*pp = tp->hnext;
			break;
		}
	*tp->apprev = tp->anext;
	if (tp->anext)
		tp->anext->apprev = tp->apprev;
	TAILQ_REMOVE(&w->tpq, tp, qlink);
	w->tpq_gen++;
	tp->a->n_tpeers--;
	w->n_tpeers--;
	wk_tpeer_count(w);
	wk_tpeer_count_alloc(w, tp->a);
	if (tp->st == WK_TP_CONNECTING)
		w->n_tconnecting--;
	ev_timer_stop(w->loop, &tp->tmo);
	if (tp->fdstored)
		/* a reset waits for the store's copy to go: a shutdown would send a FIN */
		wk_fdstore_pair_end(w, tp->a->rec_idx, tp->id, abort_conn ? -1 : tp->pipe.fd[0],
				    abort_conn ? -1 : tp->pipe.fd[1]);
	if (tp->st == WK_TP_BOUND && tp->pipe.w) {
		wk_pipe_close(&tp->pipe, abort_conn);
	} else if (tp->fd >= 0) {
		ev_io_stop(w->loop, &tp->cio);
		if (abort_conn) {
			struct linger lg = { .l_onoff = 1, .l_linger = 0 };

			setsockopt(tp->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		}
		close(tp->fd);
	}
	tp->magic = 0;
	free(tp);
}

static void wk_tpeer_answer(struct worker *w, struct wk_tpeer *tp, int code);
static void wk_tpeer_ccb(struct ev_loop *loop, ev_io *io, int revents);
static void wk_tpeer_tmo_cb(struct ev_loop *loop, ev_timer *t, int revents);

void wk_tcpr_alloc_end(struct worker *w, struct wk_alloc *a)
{
	while (a->tpeers)
		wk_tpeer_free(w, a->tpeers, false);
}

void wk_tcpr_recheck_all(struct worker *w)
{
	struct wk_alloc *a;

	LIST_FOREACH(a, &w->allocs, link) {
		struct wk_tpeer *tp = a->tpeers, *next;
		uint32_t cl;

		for (; tp; tp = next) {
			next = tp->anext;
			if (wk_peer_allowed(w, a->l, (struct sockaddr *)&tp->peer, CONF_CPROTO_TCP,
					    true, &cl) == 0)
				continue;
			log_debug("turn", "allocation %u: connection %08x reset: route removed",
				  a->rec_idx, tp->id);
			if (tp->st == WK_TP_CONNECTING)
				wk_tpeer_answer(w, tp, 403);
			wk_tpeer_free(w, tp, true);
		}
	}
	wk_tpeer_count(w);	/* also the first snapshot: a predecessor's value goes */
}

/* The deferred answer to the Connect, on the allocation's control connection, signed
 * with the allocation's key as the request was. */
static void wk_tpeer_answer(struct worker *w, struct wk_tpeer *tp, int code)
{
	struct wk_alloc *a = tp->a;
	struct wk_cred cred = { .key_len = a->rec->key_len, .sha256 = tp->sha256 };
	struct wk_ep ep = { .l = a->l,
			    .c = a->conn,
			    .addr = (struct sockaddr *)&a->client,
			    .addr_len = a->client_len };
	struct stun_builder b;
	size_t len;

	memcpy(cred.key, a->rec->key, a->rec->key_len);
	stun_build_init(&b, w->txbuf, sizeof(w->txbuf), STUN_CONNECT,
			code ? STUN_ERROR : STUN_SUCCESS, tp->tid);
	if (code)
		stun_build_error_code(&b, code, NULL);
	else
		stun_build_connection_id(&b, tp->id);
	wk_auth_sign(&b, &cred, tp->fingerprint);
	if (stun_build_finish(&b, &len) == 0 && a->conn)
		wk_send_client(w, &ep, w->txbuf, len);
	explicit_bzero(&cred, sizeof(cred));
}

static void wk_tpeer_tmo_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct wk_tpeer *tp = wk_tpeer_checked(t->data);
	struct worker *w = wk_checked(tp->w);

	(void)loop;
	(void)revents;
	if (tp->st == WK_TP_CONNECTING) {
		log_debug("turn", "allocation %u: Connect timed out", tp->a->rec_idx);
		shm_ctr_add(w->ctr, SHM_CTR_TCP_CONNECT_TIMEOUT, 1);
		wk_tpeer_answer(w, tp, 447);
	} else {
		log_debug("turn", "allocation %u: connection %08x not bound in time",
			  tp->a->rec_idx, tp->id);
	}
	wk_tpeer_free(w, tp, true);
}

static struct wk_tpeer *wk_tpeer_of_pipe(struct wk_pipe *p)
{
	return wk_tpeer_checked((struct wk_tpeer *)((char *)p - offsetof(struct wk_tpeer, pipe)));
}

/* Bytes through a bound pair: side 0 the peer, side 1 the client. */
static void wk_tpeer_moved(struct wk_pipe *p, int side, bool write, size_t n)
{
	struct wk_tpeer *tp = wk_tpeer_of_pipe(p);
	struct worker *w = tp->w;

	if (!write) {
		shm_ctr_add(w->ctr, side == 0 ? SHM_CTR_PEER_BYTES_IN : SHM_CTR_CLIENT_BYTES_IN, n);
		return;
	}
	shm_ctr_add(w->ctr, side == 1 ? SHM_CTR_CLIENT_BYTES_OUT : SHM_CTR_PEER_BYTES_OUT, n);
	shm_alloc_ctr_add(tp->a->rec, side == 1 ? SHM_ACTR_BYTES_FROM_PEER : SHM_ACTR_BYTES_TO_PEER,
			  n);
}

static void wk_tpeer_done(struct wk_pipe *p, bool reset)
{
	struct wk_tpeer *tp = wk_tpeer_of_pipe(p);

	wk_tpeer_free(tp->w, tp, reset);
}

static const struct wk_pipe_ops wk_tpeer_ops = { .moved = wk_tpeer_moved,
						 .done = wk_tpeer_done };

/* Writable while connecting: the connect finished. */
static void wk_tpeer_ccb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_tpeer *tp = wk_tpeer_checked(io->data);
	struct worker *w = wk_checked(tp->w);
	int err = 0;
	socklen_t el = sizeof(err);

	(void)loop;
	(void)revents;
	if (getsockopt(tp->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		err = errno;
	if (err) {
		log_debug("turn", "allocation %u: Connect failed: %s", tp->a->rec_idx,
			  strerror(err));
		shm_ctr_add(w->ctr, SHM_CTR_TCP_CONNECT_FAILED, 1);
		wk_tpeer_answer(w, tp, 447);
		wk_tpeer_free(w, tp, false);
		return;
	}
	ev_io_stop(w->loop, &tp->cio);
	tp->st = WK_TP_WAIT_BIND;
	w->n_tconnecting--;
	w->tpq_gen++;	/* out of the Connects in flight */
	ev_timer_stop(w->loop, &tp->tmo);
	ev_timer_set(&tp->tmo, WK_TCPR_BIND_TIMEOUT_S, 0.0);
	ev_timer_start(w->loop, &tp->tmo);
	shm_ctr_add(w->ctr, SHM_CTR_TCP_CONNECT_OK, 1);
	wk_tpeer_answer(w, tp, 0);
}

/* A fresh CONNECTION-ID: 24 bits from the CSPRNG (never all 0), unique in the worker,
 * above the owner's slot in the low byte, so that a worker that receives a ConnectionBind
 * for it knows where to hand the connection (wk_tcpr_slot). Guessing one gains nothing
 * without the allocation user's credentials. */
static int wk_tpeer_new_id(struct worker *w, uint32_t *id)
{
	static_assert(SHM_MAX_SLOTS <= 256, "the slot fits the CONNECTION-ID's low byte");
	for (int tries = 0; tries < 8; tries++) {
		struct wk_tpeer *p;

		if (RAND_bytes((uint8_t *)id, sizeof(*id)) != 1)
			return -EIO;
		*id = (*id & ~0xffu) | w->slot;
		if ((*id & ~0xffu) == 0)
			continue;
		for (p = *wk_tpeer_bucket(w, *id); p && p->id != *id; p = p->hnext)
			;
		if (!p)
			return 0;
	}
	return -EAGAIN;
}

static int wk_tcpr_make_room(struct worker *w, struct wk_alloc *a);

/* fd bound to src, the relayed address and port, beside the allocation's listening socket
 * lfd. Linux lets a socket bind beside a listening one only when both set SO_REUSEPORT;
 * the listening one sets it for this bind alone (wk_relay_tcp_bind: a turngated's
 * listening socket, which sets none, never binds a port held so). */
static int wk_tpeer_bind(int lfd, int fd, const struct sockaddr *src, socklen_t sl)
{
	int one = 1, zero = 0, rc;

	(void)setsockopt(lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	rc = bind(fd, src, sl);
	(void)setsockopt(lfd, SOL_SOCKET, SO_REUSEPORT, &zero, sizeof(zero));
	return rc;
}

/* The connecting socket, not connected yet: bound to the allocation's relayed address and
 * port (the source the peer sees, RFC 6062 5.2), its buffers sized before the SYN (which
 * fixes the window scale). Out of descriptors (EMFILE, ENFILE), the user holding the most
 * peer connections gives one up first (wk_tcpr_make_room) and it is tried once more. */
static int wk_tpeer_socket(struct worker *w, struct wk_alloc *a, const struct sockaddr *peer)
{
	struct sockaddr_storage src;
	socklen_t sl = sizeof(src);
	int one = 1, fd;

	if (getsockname(a->relay[0].fd, (struct sockaddr *)&src, &sl) < 0)
		return -1;
	fd = socket(peer->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 && (errno == EMFILE || errno == ENFILE) && wk_tcpr_make_room(w, a) == 0)
		fd = socket(peer->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (peer->sa_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	wk_sock_nodelay(fd);
	wk_pipe_sockbuf(fd, w->hot.tcp_buf);
	if (wk_tpeer_bind(a->relay[0].fd, fd, (struct sockaddr *)&src, sl) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* A peer connection of a on fd (connecting, or accepted and waiting for its bind), linked
 * into the allocation, the id hash and the counts, with its deadline running. restored:
 * taken over from a predecessor (live upgrade, kill -9 and the fd store), so older than
 * anything made here: it goes to the head of the worker's queue, not the tail, or eviction
 * (the newest first) would end the connections a call has held longest. An allocation's
 * come newest first (wk_tcpr_park walks a->tpeers; the heritage keeps their order within
 * a record), so each at the head rebuilds their age; across allocations the order is
 * the records', not their age: it is not sent. */
static struct wk_tpeer *wk_tpeer_new(struct worker *w, struct wk_alloc *a, int fd, uint32_t id,
				     const struct sockaddr *peer, enum wk_tpeer_state st,
				     bool restored)
{
	size_t cap = w->hot.tcp_buf;
	struct wk_tpeer *tp = calloc(1, sizeof(*tp) + 2 * cap);

	if (!tp)
		return NULL;
	tp->magic = WK_TPEER_MAGIC;
	tp->cap = cap;
	if (st != WK_TP_CONNECTING)
		wk_pipe_sockbuf(fd, cap);	/* accepted or taken over (a Connect's: its socket) */
	tp->w = w;
	tp->a = a;
	tp->id = id;
	tp->fd = fd;
	tp->st = st;
	memcpy(&tp->peer, peer, wk_addr_len(peer));
	ev_io_init(&tp->cio, wk_tpeer_ccb, fd, EV_WRITE);
	tp->cio.data = tp;
	ev_timer_init(&tp->tmo, wk_tpeer_tmo_cb,
		      st == WK_TP_CONNECTING ? w->hot.tcp_connect_timeout : WK_TCPR_BIND_TIMEOUT_S,
		      0.0);
	tp->tmo.data = tp;
	ev_timer_start(w->loop, &tp->tmo);
	tp->hnext = *wk_tpeer_bucket(w, id);
	*wk_tpeer_bucket(w, id) = tp;
	/* a's list: newest first, as wk_tcpr_park sends it (a restored one after the rest) */
	for (tp->apprev = &a->tpeers; restored && *tp->apprev; tp->apprev = &(*tp->apprev)->anext)
		;
	tp->anext = *tp->apprev;
	if (tp->anext)
		tp->anext->apprev = &tp->anext;
	*tp->apprev = tp;
	if (restored)
		TAILQ_INSERT_HEAD(&w->tpq, tp, qlink);
	else
		TAILQ_INSERT_TAIL(&w->tpq, tp, qlink);
	w->tpq_gen++;
	a->n_tpeers++;
	if (st == WK_TP_CONNECTING)
		w->n_tconnecting++;
	w->n_tpeers++;
	wk_tpeer_count(w);
	wk_tpeer_count_alloc(w, a);
	return tp;
}

static struct wk_tpeer *wk_tpeer_of_peer(struct wk_alloc *a, const struct sockaddr *peer)
{
	struct wk_tpeer *tp;

	for (tp = a->tpeers; tp; tp = tp->anext)
		if (wk_addr_equal((struct sockaddr *)&tp->peer, peer))
			return tp;
	return NULL;
}

/* ---- the worker's pools, shared by every user (DESIGN.md 10: a full budget takes from
 * the one holding the most, not everyone's newest) ---- */

/* The users' keys of one pool, sorted, as of w->tpq_gen: computed when the pool is full
 * and it changed, so that Connects refused meanwhile cost a look-up, not a sort. */
struct wk_tcpr_census {
	uint64_t gen;
	bool ok;
	unsigned n, cap, most;	/* most: the largest count of one key */
	uint64_t *keys;
};

void wk_tcpr_fini(struct worker *w)
{
	ev_timer_stop(w->loop, &w->tcpr_resume_tmo);
	for (int i = 0; w->tcensus != NULL && i < 2; i++)
		free(w->tcensus[i].keys);
	free(w->tcensus);
	w->tcensus = NULL;
}

static void wk_tcpr_resume_cb(struct ev_loop *loop, ev_timer *t, int revents);

/* The descriptors peer connections may take in this worker: its limit less
 * WK_TCPR_FD_RESERVE (turn.h), judged against what the worker holds (wk_tcpr_fds_held), so
 * that it follows the load rather than a share of the table fixed at start. */
void wk_tcpr_init(struct worker *w)
{
	uint64_t lim = 0;
	struct rlimit rl;

	TAILQ_INIT(&w->tpq);
	ev_timer_init(&w->tcpr_resume_tmo, wk_tcpr_resume_cb, 0.0, 0.0);
	w->tcpr_resume_tmo.data = w;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		lim = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
	w->tpeer_fd_limit = lim > WK_TCPR_FD_RESERVE ? lim - WK_TCPR_FD_RESERVE : 0;
	log_info("turn", "slot %u: RFC 6062 peer connections may use descriptors up to %llu "
			 "(limit %llu, %u kept for listeners and the rest)",
		 w->slot, (unsigned long long)w->tpeer_fd_limit, (unsigned long long)lim,
		 WK_TCPR_FD_RESERVE);
}

/* The descriptors this worker holds, counted from what holds them (O(listeners)): two per
 * allocation (its relay sockets), one per stream connection, two per TLS bridge (its TLS
 * socket and its end of the socket pair) and two per peer connection (the peer's, and the
 * client's data connection it is or will be bound to: counted from the Connect, so that a
 * Connect admitted has room for its bind). */
static uint64_t wk_tcpr_fds_held(const struct worker *w)
{
	uint64_t n = 2 * ((uint64_t)w->n_allocs + w->n_tpeers + w->n_tlsbs);

	for (size_t i = 0; i < w->n_ls; i++)
		n += w->ls[i]->n_conns;
	return n;
}

static int wk_tcpr_key_cmp(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* How many times key is in keys[0..n), sorted. */
static unsigned wk_tcpr_key_count(const uint64_t *keys, unsigned n, uint64_t key)
{
	unsigned lo = 0, hi = n, first;

	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;

		if (keys[mid] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	first = lo;
	for (hi = n; lo < hi;) {
		unsigned mid = lo + (hi - lo) / 2;

		if (keys[mid] <= key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - first;
}

/* In the pool: the Connects in flight (pending), or every peer connection. */
static bool wk_tcpr_in_pool(const struct wk_tpeer *tp, bool pending)
{
	return !pending || tp->st == WK_TP_CONNECTING;
}

/* One that may end now: not claimed by a ConnectionBind still being answered (its data
 * connection holds it: wk_tcpr_claim, until wk_tcpr_attach or wk_tcpr_drop). */
static bool wk_tcpr_evictable(const struct wk_tpeer *tp, bool pending)
{
	return wk_tcpr_in_pool(tp, pending) && !(tp->st == WK_TP_BOUND && !tp->pipe.w);
}

/* The one the user of key with most in the pool gives up, other than skip: its oldest
 * Connect in flight (the nearest to its own timeout), or its newest peer connection (the
 * least relied on: a call in progress keeps the connections it has had longest). */
static struct wk_tpeer *wk_tcpr_victim(struct worker *w, const uint64_t *keys, unsigned n,
				       unsigned most, bool pending, const struct wk_tpeer *skip)
{
	struct wk_tpeer *tp;

	if (pending) {
		TAILQ_FOREACH(tp, &w->tpq, qlink)
			if (tp != skip && wk_tcpr_evictable(tp, pending) &&
			    wk_tcpr_key_count(keys, n, wk_alloc_user_key(tp->a)) == most)
				return tp;
		return NULL;
	}
	TAILQ_FOREACH_REVERSE(tp, &w->tpq, wk_tpeer_q, qlink)
		if (tp != skip && wk_tcpr_evictable(tp, pending) &&
		    wk_tcpr_key_count(keys, n, wk_alloc_user_key(tp->a)) == most)
			return tp;
	return NULL;
}

/* The census of a pool, current: sorted again only when the pool changed since. */
static struct wk_tcpr_census *wk_tcpr_census(struct worker *w, bool pending)
{
	struct wk_tcpr_census *c;
	struct wk_tpeer *tp;
	unsigned i, j;

	if (w->tcensus == NULL && (w->tcensus = calloc(2, sizeof(*w->tcensus))) == NULL)
		return NULL;
	c = &w->tcensus[pending];
	if (c->ok && c->gen == w->tpq_gen)
		return c;
	if (c->cap < w->n_tpeers) {
		uint64_t *k = realloc(c->keys, sizeof(*k) * w->n_tpeers);

		if (k == NULL)
			return NULL;
		c->keys = k;
		c->cap = w->n_tpeers;
	}
	c->n = c->most = 0;
	TAILQ_FOREACH(tp, &w->tpq, qlink)
		if (wk_tcpr_in_pool(tp, pending))
			c->keys[c->n++] = wk_alloc_user_key(tp->a);
	if (c->n > 1)
		qsort(c->keys, c->n, sizeof(*c->keys), wk_tcpr_key_cmp);
	for (i = 0; i < c->n; i = j) {
		for (j = i + 1; j < c->n && c->keys[j] == c->keys[i]; j++)
			;
		if (j - i > c->most)
			c->most = j - i;
	}
	c->gen = w->tpq_gen;
	c->ok = true;
	return c;
}

/* The connection a's user may take the place of in a full pool (pending: the
 * tcp_pending_connects Connects in flight; else the peer connections): one of the user
 * holding the most in it (wk_tcpr_victim; a tie goes against the one found first), never
 * skip. NULL when a's user holds as many as anyone (it is the one to refuse) or the
 * census fails. Costs a sort of the pool when it changed since the last one
 * (wk_tcpr_census), else a binary search. Ends nothing. */
static struct wk_tpeer *wk_tcpr_pick(struct worker *w, struct wk_alloc *a, bool pending,
				     const struct wk_tpeer *skip)
{
	struct wk_tcpr_census *c = wk_tcpr_census(w, pending);

	if (c == NULL || wk_tcpr_key_count(c->keys, c->n, wk_alloc_user_key(a)) >= c->most)
		return NULL;
	return wk_tcpr_victim(w, c->keys, c->n, c->most, pending, skip);
}

/* Ends tp to make room, as a failed connection ends (a Connect in flight answered 447, a
 * connection reset). */
static void wk_tcpr_evict(struct worker *w, struct wk_tpeer *tp, bool pending)
{
	log_debug("turn", "allocation %u: connection %08x ended: the worker's %s are full and "
			  "its user holds the most",
		  tp->a->rec_idx, tp->id, pending ? "Connects in flight" : "peer connections");
	/* not a refused Connect (it was counted ok, or is no Connect at all) */
	shm_ctr_add(w->ctr, pending ? SHM_CTR_TCP_EVICT_PENDING : SHM_CTR_TCP_EVICT_PEER, 1);
	if (tp->st == WK_TP_CONNECTING)
		wk_tpeer_answer(w, tp, 447);
	wk_tpeer_free(w, tp, true);
}

/* need peer connections of the user holding the most end, its newest first (never skip),
 * for one of a's user. 0; or -EBUSY, nothing ended, when a's user would then hold more
 * than that user does (it is the one to refuse) or that user has fewer that may end.
 * Costs one census (wk_tcpr_pick) and two walks of the worker's queue. */
static int wk_tcpr_take(struct worker *w, struct wk_alloc *a, uint64_t need,
			const struct wk_tpeer *skip)
{
	struct wk_tpeer *tp = need ? wk_tcpr_pick(w, a, false, skip) : NULL, *prev;
	uint64_t key, n = 0;

	if (need == 0)
		return 0;
	if (tp == NULL || wk_tcpr_key_count(w->tcensus[0].keys, w->tcensus[0].n,
					    wk_alloc_user_key(a)) + need > w->tcensus[0].most)
		return -EBUSY;
	key = wk_alloc_user_key(tp->a);
	for (; tp && n < need; tp = TAILQ_PREV(tp, wk_tpeer_q, qlink))
		n += tp != skip && wk_tcpr_evictable(tp, false) && wk_alloc_user_key(tp->a) == key;
	if (n < need)
		return -EBUSY;
	for (tp = TAILQ_LAST(&w->tpq, wk_tpeer_q); tp && n > 0; tp = prev) {
		prev = TAILQ_PREV(tp, wk_tpeer_q, qlink);
		if (tp != skip && wk_tcpr_evictable(tp, false) && wk_alloc_user_key(tp->a) == key) {
			wk_tcpr_evict(w, tp, false);
			n--;
		}
	}
	return 0;
}

/* Out of descriptors for a's user (a socket or accept failed with EMFILE or ENFILE): one
 * peer connection of the user holding the most ends. 0, or -EBUSY when none may. */
static int wk_tcpr_make_room(struct worker *w, struct wk_alloc *a)
{
	return wk_tcpr_take(w, a, 1, NULL);
}

/* Room for one more peer connection of a (pending: a Connect) in the worker's pools: the
 * Connects in flight below tcp_pending_connects, and the descriptors it needs (two,
 * wk_tcpr_fds_held) within tpeer_fd_limit. A full pool makes room by ending connections
 * of the user holding the most (wk_tcpr_pick): its oldest Connect in flight; its newest
 * peer connections until the descriptors fit (more than one when allocations and
 * connections came since they filled). Decided before anything ends: false, nothing
 * ended, when the request will not go ahead. */
static bool wk_tcpr_room(struct worker *w, struct wk_alloc *a, bool pending)
{
	struct wk_tpeer *pend = NULL;
	uint64_t held = wk_tcpr_fds_held(w), need = 0;

	if (pending && w->n_tconnecting >= w->hot.tcp_pending &&
	    (pend = wk_tcpr_pick(w, a, true, NULL)) == NULL)
		return false;
	if (pend)
		held -= 2;	/* what ending it gives back */
	if (held + 2 > w->tpeer_fd_limit)
		need = (held + 2 - w->tpeer_fd_limit + 1) / 2;
	if (need > w->n_tpeers)
		return false;	/* more than peer connections can give back */
	if (wk_tcpr_take(w, a, need, pend) < 0)
		return false;
	if (pend)
		wk_tcpr_evict(w, pend, true);
	return true;
}

int wk_tcpr_connect(struct worker *w, struct wk_alloc *a, const struct sockaddr *peer,
		    const struct stun_msg *req, bool sha256)
{
	struct wk_tpeer *tp;
	uint32_t id;
	int fd;

	if (wk_tpeer_of_peer(a, peer)) {
		shm_ctr_add(w->ctr, SHM_CTR_TCP_CONNECT_EXISTS, 1);
		return 446;
	}
	if (a->n_tpeers >= w->hot.tcp_conns) {
		shm_ctr_add(w->ctr, SHM_CTR_TCP_CONNECT_LIMIT, 1);
		return 508;
	}
	/* What can fail without anyone's fault comes before a pool makes room (which ends
	 * another user's connection): the id, then the socket. */
	if (wk_tpeer_new_id(w, &id) < 0)
		return 500;
	fd = wk_tpeer_socket(w, a, peer);
	if (fd < 0) {
		shm_ctr_add(w->ctr, SHM_CTR_TCP_CONNECT_FAILED, 1);
		return 447;
	}
	if (!wk_tcpr_room(w, a, true)) {
		close(fd);
		shm_ctr_add(w->ctr, SHM_CTR_TCP_CONNECT_LIMIT, 1);
		return 508;
	}
	if (connect(fd, peer, wk_addr_len(peer)) < 0 && errno != EINPROGRESS) {
		close(fd);
		shm_ctr_add(w->ctr, SHM_CTR_TCP_CONNECT_FAILED, 1);
		return 447;
	}
	tp = wk_tpeer_new(w, a, fd, id, peer, WK_TP_CONNECTING, false);
	if (!tp) {
		close(fd);
		return 508;
	}
	memcpy(tp->tid, req->tid, STUN_TID_LEN);
	tp->sha256 = sha256;
	tp->fingerprint = stun_msg_has(req, STUN_ATTR_FINGERPRINT);
	ev_io_start(w->loop, &tp->cio);
	return 0;
}

/* ConnectionAttempt indication (RFC 6062 5.3) on the control connection: the peer and the
 * CONNECTION-ID to bind. */
static void wk_tpeer_announce(struct worker *w, struct wk_tpeer *tp)
{
	struct wk_alloc *a = tp->a;
	struct wk_ep ep = { .l = a->l,
			    .c = a->conn,
			    .addr = (struct sockaddr *)&a->client,
			    .addr_len = a->client_len };
	uint8_t tid[STUN_TID_LEN];
	struct stun_builder b;
	size_t len;

	if (RAND_bytes(tid, sizeof(tid)) != 1)
		memset(tid, 0, sizeof(tid));
	stun_build_init(&b, w->txbuf, sizeof(w->txbuf), STUN_CONNECTION_ATTEMPT, STUN_INDICATION,
			tid);
	stun_build_addr(&b, STUN_ATTR_XOR_PEER_ADDRESS, (struct sockaddr *)&tp->peer);
	stun_build_connection_id(&b, tp->id);
	if (stun_build_finish(&b, &len) == 0 && a->conn)
		wk_send_client(w, &ep, w->txbuf, len);
}

/* An inbound peer connection is admitted only with a live permission for its IP and
 * when the routes admit its address and port (as a datagram from it would be); then it
 * waits for a ConnectionBind like a connected Connect. Returns false to refuse it. */
static bool wk_tcpr_inbound(struct worker *w, struct wk_alloc *a, int fd,
			    const struct sockaddr *peer)
{
	struct wk_tpeer *tp;
	uint32_t id, cl;

	if (a->n_tpeers >= w->hot.tcp_conns || wk_tpeer_of_peer(a, peer) ||
	    !wk_alloc_perm_ok(a, peer, mono_ns()) ||
	    wk_peer_allowed(w, a->l, peer, CONF_CPROTO_TCP, true, &cl) < 0 ||
	    wk_tpeer_new_id(w, &id) < 0 || !wk_tcpr_room(w, a, false))
		return false;
	tp = wk_tpeer_new(w, a, fd, id, peer, WK_TP_WAIT_BIND, false);
	if (!tp)
		return false;
	log_debug("turn", "allocation %u: inbound connection %08x", a->rec_idx, id);
	wk_tpeer_announce(w, tp);
	return true;
}

void wk_tcpr_accept_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_relay *r = io->data;
	struct wk_alloc *a = wk_alloc_checked(r->a);
	struct worker *w = wk_checked(a->w);

	(void)revents;
	for (int i = 0; i < 16; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(r->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0 && (errno == EMFILE || errno == ENFILE) &&
		    wk_tcpr_make_room(w, a) == 0)
			continue;	/* out of descriptors: as wk_tpeer_socket */
		if (fd < 0) {
			/* Nothing to end for room: the connection stays in the backlog and
			 * this listener waits with the client listeners, rather than its
			 * level-triggered watcher spinning at full CPU. */
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				ev_io_stop(loop, io);
				wk_tcp_pause(w);
				if (!ev_is_active(&w->tcpr_resume_tmo)) {
					ev_timer_set(&w->tcpr_resume_tmo, WK_ACCEPT_BACKOFF_S, 0.0);
					ev_timer_start(loop, &w->tcpr_resume_tmo);
				}
			}
			return;
		}
		wk_sock_nodelay(fd);
		if (!wk_tcpr_inbound(w, a, fd, (struct sockaddr *)&ss)) {
			struct linger lg = { .l_onoff = 1, .l_linger = 0 };

			setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
			close(fd);	/* refused: a RST */
		}
	}
}

/* The relay listeners that a want of descriptors paused (wk_tcpr_accept_cb) go on. */
static void wk_tcpr_resume_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = wk_checked(t->data);
	struct wk_alloc *a;

	(void)loop;
	(void)revents;
	if (w->lingering)
		return;
	LIST_FOREACH(a, &w->allocs, link)
		for (int i = 0; i < 2; i++) {
			struct wk_relay *r = &a->relay[i];

			if (r->fd >= 0 && ev_cb(&r->io) == wk_tcpr_accept_cb &&
			    !ev_is_active(&r->io))
				ev_io_start(w->loop, &r->io);
		}
}

struct wk_tpeer *wk_tcpr_find(struct worker *w, uint32_t id, const char *user, size_t user_len)
{
	struct wk_tpeer *tp;

	for (tp = *wk_tpeer_bucket(w, id); tp; tp = tp->hnext)
		if (tp->id == id)
			break;
	if (!tp || tp->st != WK_TP_WAIT_BIND || tp->a->rec->user_len != user_len ||
	    memcmp(tp->a->rec->username, user, user_len) != 0)
		return NULL;
	return tp;
}

void wk_tcpr_drop(struct worker *w, struct wk_tpeer *tp)
{
	wk_tpeer_free(w, wk_tpeer_checked(tp), true);
}

struct wk_alloc *wk_tcpr_alloc(const struct wk_tpeer *tp)
{
	return wk_alloc_checked(tp->a);
}

void wk_tcpr_claim(struct worker *w, struct wk_tpeer *tp, struct wk_tconn *c)
{
	(void)w;
	tp->st = WK_TP_BOUND;	/* not found by another ConnectionBind any more */
	c->bind_to = tp;
}

void wk_tcpr_attach(struct worker *w, struct wk_tpeer *tp, int fd, const uint8_t *pre,
		    size_t pre_len, const uint8_t *out, size_t out_len)
{
	tp = wk_tpeer_checked(tp);
	if (pre_len > tp->cap || out_len > tp->cap) {
		close(fd);
		wk_tpeer_free(w, tp, true);
		return;
	}
	ev_timer_stop(w->loop, &tp->tmo);
	/* The data connection was bounded at accept as a TURN-TCP connection: now it gets
	 * the pair's buffers (a TLS bridge's AF_UNIX end is left as it is: the bridge set its
	 * TCP side). */
	wk_pipe_sockbuf(fd, tp->cap);
	/* The bytes the client sent after its ConnectionBind go to the peer; the response
	 * (out) goes first to the client. */
	wk_pipe_init(&tp->pipe, w, &wk_tpeer_ops, tp->bufs, tp->cap);
	wk_pipe_side(&tp->pipe, 0, tp->fd, NULL, out, out_len);
	wk_pipe_side(&tp->pipe, 1, fd, NULL, pre, pre_len);
	tp->fd = -1;
	log_debug("turn", "allocation %u: connection %08x bound", tp->a->rec_idx, tp->id);
	tp->fdstored = wk_fdstore_pair(w, tp->a->rec_idx, tp->id, tp->pipe.fd[0], tp->pipe.fd[1]);
	wk_pipe_start(&tp->pipe);
}

/* ---- live upgrade (worker/park.c) ------------------------------------------------- */

/* A side of a bound pair that a new worker can take: a plain socket of its own (not the
 * AF_UNIX end of a TLS bridge that stays in this process). */
static bool wk_tpeer_plain(const struct wk_pipe *p, int i)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	return p->fd[i] >= 0 && !p->ssl[i] &&
	       getsockname(p->fd[i], (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family != AF_UNIX;
}

/* The whole parking of one worker waits at most this long for the master to read. */
#define WK_PARK_TIMEOUT_MS 5000

int wk_park_send(struct worker *w, struct park_hdr *h, const uint8_t *in, size_t in_len,
		 const uint8_t *out, size_t out_len, int fd)
{
	uint64_t spent = mono_ms() - w->park_start;
	size_t len = sizeof(*h) + in_len + out_len;
	uint8_t *blob;
	int rc;

	if (spent >= WK_PARK_TIMEOUT_MS)
		return -ETIMEDOUT;
	blob = malloc(len);
	if (!blob)
		return -ENOMEM;
	h->magic = PARK_MAGIC;
	h->version = PARK_VERSION;
	h->slot = w->slot;
	h->in_len = (uint32_t)in_len;
	h->out_len = (uint32_t)out_len;
	memcpy(blob, h, sizeof(*h));
	if (in_len)
		memcpy(blob + sizeof(*h), in, in_len);
	if (out_len)
		memcpy(blob + sizeof(*h) + in_len, out, out_len);
	rc = park_send(w->h->ctl_fd, blob, len, fd, (int)(WK_PARK_TIMEOUT_MS - spent));
	free(blob);
	return rc;
}

static int wk_tpeer_park(struct worker *w, struct wk_tpeer *tp)
{
	struct wk_pipe *p = &tp->pipe;
	struct park_hdr h;
	int rc;

	memset(&h, 0, sizeof(h));
	h.kind = PARK_TPEER;
	h.rec_idx = tp->a->rec_idx;
	h.id = tp->id;
	h.peer_len = wk_addr_len((struct sockaddr *)&tp->peer);
	memcpy(&h.peer, &tp->peer, h.peer_len);
	if (tp->st == WK_TP_WAIT_BIND)
		return wk_park_send(w, &h, NULL, 0, NULL, 0, tp->fd);
	if (tp->st != WK_TP_BOUND || !p->w || !wk_tpeer_plain(p, 0) || !wk_tpeer_plain(p, 1))
		return -EOPNOTSUPP;	/* connecting, or bridged to TLS: it ends */
	h.flags = PARK_F_BOUND | (p->eof[0] ? PARK_F_EOF0 : 0) | (p->eof[1] ? PARK_F_EOF1 : 0) |
		  (p->shut[0] ? PARK_F_SHUT0 : 0) | (p->shut[1] ? PARK_F_SHUT1 : 0);
	rc = wk_park_send(w, &h, p->buf[0] + p->off[0], p->len[0] - p->off[0],
			  p->buf[1] + p->off[1], p->len[1] - p->off[1], p->fd[0]);
	if (rc < 0)
		return rc;
	memset(&h, 0, sizeof(h));
	h.kind = PARK_TDATA;
	h.rec_idx = tp->a->rec_idx;
	h.id = tp->id;
	return wk_park_send(w, &h, NULL, 0, NULL, 0, p->fd[1]);
}

unsigned wk_tcpr_park(struct worker *w, struct wk_alloc *a)
{
	struct wk_tpeer *tp, *next;
	struct park_hdr h;
	unsigned n = 0;

	/* The listening relay socket: the same socket in the new worker, so a peer's
	 * connection attempt meanwhile waits in its backlog instead of being reset. */
	memset(&h, 0, sizeof(h));
	h.kind = PARK_TRELAY;
	h.rec_idx = a->rec_idx;
	if (a->relay[0].fd >= 0 && wk_park_send(w, &h, NULL, 0, NULL, 0, a->relay[0].fd) == 0)
		n++;

	for (tp = a->tpeers; tp; tp = next) {
		next = tp->anext;
		if (wk_tpeer_park(w, tp) < 0)
			continue;
		n += tp->st == WK_TP_BOUND ? 2 : 1;
		wk_tpeer_free(w, tp, false);	/* our copies only: no FIN, no RST */
	}
	return n;
}

int wk_tcpr_restore(struct worker *w, struct wk_alloc *a, const struct park_hdr *h,
		    const uint8_t *body, int fd, int data_fd)
{
	bool bound = (h->flags & PARK_F_BOUND) != 0;
	struct wk_tpeer *tp;

	if (h->in_len > w->hot.tcp_buf || h->out_len > w->hot.tcp_buf || (bound && data_fd < 0) ||
	    (!bound && (h->in_len || h->out_len)))
		return -EINVAL;
	for (tp = *wk_tpeer_bucket(w, h->id); tp; tp = tp->hnext)
		if (tp->id == h->id)
			return -EEXIST;
	tp = wk_tpeer_new(w, a, fd, h->id, (const struct sockaddr *)&h->peer, WK_TP_WAIT_BIND,
			  true);
	if (!tp)
		return -ENOMEM;
	if (!bound)
		return 0;	/* its bind deadline starts again */
	ev_timer_stop(w->loop, &tp->tmo);
	tp->st = WK_TP_BOUND;
	wk_pipe_sockbuf(data_fd, tp->cap);	/* a predecessor's may predate the bound */
	wk_pipe_init(&tp->pipe, w, &wk_tpeer_ops, tp->bufs, tp->cap);
	wk_pipe_side(&tp->pipe, 0, fd, NULL, body, h->in_len);
	wk_pipe_side(&tp->pipe, 1, data_fd, NULL, body + h->in_len, h->out_len);
	tp->pipe.eof[0] = (h->flags & PARK_F_EOF0) != 0;
	tp->pipe.eof[1] = (h->flags & PARK_F_EOF1) != 0;
	tp->pipe.shut[0] = (h->flags & PARK_F_SHUT0) != 0;
	tp->pipe.shut[1] = (h->flags & PARK_F_SHUT1) != 0;
	tp->fd = -1;
	tp->fdstored = wk_fdstore_pair(w, a->rec_idx, tp->id, fd, data_fd);
	wk_pipe_start(&tp->pipe);
	return 0;
}
