/* Worker allocations: lifecycle, 5-tuple index, relay sockets, permissions, channels,
 * relay ports from the shared pool (reservations included: shm/shm_ppool.h).
 *
 * The allocation's permissions and channels live in its shm record (we are its only
 * writer, so reading our own record needs no seqlock); every change is bracketed by
 * shm_alloc_begin_write/end_write so admin tools see consistent copies. */
#include "config.h"

#include "worker/sockbuf.h"
#include "worker/table.h"
#include "worker/wk.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "conf/conf.h"
#include "shm/shm_alloc.h"
#include "shm/shm_records.h"
#include "shm/shm_relay.h"

/* A configured cap must fit the shared record, or it would be lowered silently. */
_Static_assert(CONF_MAX_PERMISSIONS <= SHM_ALLOC_MAX_PERMS, "permission cap exceeds the record");
_Static_assert(CONF_MAX_CHANNELS <= SHM_ALLOC_MAX_CHANS, "channel cap exceeds the record");

/* IP part only, as raw family + bytes (permissions are keyed by IP, RFC 8656 9). */
static bool wk_addr_ip(const struct sockaddr *sa, uint8_t *fam, uint8_t ip[16])
{
	memset(ip, 0, 16);
	if (sa->sa_family == AF_INET) {
		memcpy(ip, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		*fam = AF_INET;
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(ip, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		*fam = AF_INET6;
		return true;
	}
	return false;
}

/* The allocation of client on l in 5-tuple hash chain *head. */
static struct wk_alloc *wk_alloc_find_in(struct wk_alloc_list *head, const struct wk_listener *l,
					 const struct sockaddr *client)
{
	struct wk_alloc *a;

	LIST_FOREACH(a, head, hlink)
		if (a->l == l && wk_addr_equal((struct sockaddr *)&a->client, client))
			return a;
	return NULL;
}

static struct wk_alloc_list *wk_alloc_chain(struct worker *w, const struct wk_listener *l,
					    const struct sockaddr *client)
{
	return &w->hash[wk_ep_hash(l, client) & w->hash_mask];
}

struct wk_alloc *wk_alloc_find(struct worker *w, const struct wk_listener *l,
			       const struct sockaddr *client)
{
	return wk_alloc_find_in(wk_alloc_chain(w, l, client), l, client);
}

static void wk_alloc_timer_cb(struct wheel_timer *t, void *arg);

/* Private half of an allocation around record idx, linked into the worker's indexes:
 * the 5-tuple hash for UDP (chain: its chain when the caller has it, else NULL), the
 * connection for TCP (conn != NULL). */
static struct wk_alloc *wk_alloc_new(struct worker *w, struct wk_listener *l, struct wk_tconn *conn,
				     const struct sockaddr *client, socklen_t client_len,
				     uint32_t idx, struct shm_alloc *rec,
				     struct wk_alloc_list *chain)
{
	struct wk_alloc *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->magic = WK_ALLOC_MAGIC;
	a->w = w;
	w->by_idx[idx] = a;
	a->l = l;
	a->conn = conn;
	a->rec_idx = idx;
	a->rec = rec;
	if (client_len > sizeof(a->client))
		client_len = sizeof(a->client);	/* not IPv4/IPv6: never (listeners are IP) */
	memcpy(&a->client, client, client_len);
	a->client_len = client_len;
	for (int i = 0; i < 2; i++) {
		a->relay[i].fd = -1;
		a->relay[i].a = a;
	}
	wheel_timer_init(&a->timer, wk_alloc_timer_cb);
	if (conn) {
		if (w->table_ops)
			w->table_ops->carry(conn, a);
	} else {
		LIST_INSERT_HEAD(chain ? chain : wk_alloc_chain(w, l, client), a, hlink);
	}
	LIST_INSERT_HEAD(&w->allocs, a, link);
	w->n_allocs++;
	return a;
}

int wk_alloc_create(struct worker *w, const struct wk_ep *ep, struct wk_alloc **out)
{
	struct shm_alloc *rec;
	uint32_t idx;
	int rc;

	rc = shm_alloc_claim(w->shm, w->slot, &idx, &rec);
	if (rc < 0)
		return rc;
	shm_bw_alloc_reset(w->shm, idx);
	shm_relay_ctr_reset(w->shm, idx);
	*out = wk_alloc_new(w, ep->l, ep->c, ep->addr, ep->addr_len, idx, rec, NULL);
	if (!*out) {
		shm_alloc_release(w->shm, w->slot, idx);
		return -ENOMEM;
	}
	if (ep->via) {
		(*out)->via_len = ep->via_len <= sizeof((*out)->via) ? ep->via_len
								      : sizeof((*out)->via);
		memcpy(&(*out)->via, ep->via, (*out)->via_len);
	}
	return 0;
}

int wk_alloc_attach(struct worker *w, struct wk_listener *l, uint32_t idx, struct shm_alloc *rec,
		    struct wk_alloc **out)
{
	struct sockaddr_storage client;
	socklen_t len = wk_shm_to_addr(&rec->client, &client);
	struct wk_alloc_list *chain;

	if (len == 0)
		return -EINVAL;
	/* One hash for the look-up and the insertion (a take-over adopts thousands) */
	chain = wk_alloc_chain(w, l, (struct sockaddr *)&client);
	if (wk_alloc_find_in(chain, l, (struct sockaddr *)&client))
		return -EEXIST;
	*out = wk_alloc_new(w, l, NULL, (struct sockaddr *)&client, len, idx, rec, chain);
	return *out ? 0 : -ENOMEM;
}

int wk_alloc_attach_ep(struct worker *w, const struct wk_ep *ep, uint32_t idx,
		       struct shm_alloc *rec, struct wk_alloc **out)
{
	*out = wk_alloc_new(w, ep->l, ep->c, ep->addr, ep->addr_len, idx, rec, NULL);
	return *out ? 0 : -ENOMEM;
}

/* Enters (add) or takes out a's UDP relay r in the shared relay port index (the short
 * circuit's look-up by relay port). */
static void wk_alloc_port_index(struct worker *w, struct wk_alloc *a, const struct wk_relay *r, bool add)
{
	if (a->tcp)
		return; /* only UDP relays take datagrams */
	if (!add) {
		shm_relay_del(w->shm, r->port, a->rec_idx);
		return;
	}
	if (shm_relay_add(w->shm, r->port, a->rec_idx) < 0)
		log_debug("turn", "allocation %u: relay port %u not indexed (every way taken)",
			  a->rec_idx, r->port);
}

static void wk_alloc_unhash(struct wk_alloc *a)
{
	if (a->conn) {
		if (a->w->table_ops)
			a->w->table_ops->carry(a->conn, NULL);
	} else {
		LIST_REMOVE(a, hlink);	/* hashed since wk_alloc_new: conn never changes */
	}
}

/* Closes the relay sockets and unlinks a from every private index; the record is left
 * as it is. */
static void wk_alloc_unlink(struct worker *w, struct wk_alloc *a)
{
	if (w->table_ops)
		w->table_ops->flush(w, a); /* grouped datagrams leave before their socket closes */
	if (w->table_ops)
		w->table_ops->conns_end(w, a);
	for (int i = 0; i < 2; i++) {
		struct wk_relay *r = &a->relay[i];

		if (r->fd < 0)
			continue;
		wk_alloc_port_index(w, a, r, false);
		ev_io_stop(w->loop, &r->io);
		close(r->fd);
		r->fd = -1;
		if (r->pool_tag)
			shm_ppool_put(w->shm, r->pool_tag, r->port, a->rec_idx);
		r->pool_tag = 0;
	}
	wheel_disarm(&w->wheel, &a->timer);
	wk_alloc_unhash(a);
	if (w->by_idx[a->rec_idx] == a)
		w->by_idx[a->rec_idx] = NULL;
	LIST_REMOVE(a, link);
	w->n_allocs--;
	free(a->resp);
	a->magic = 0;
}

void wk_alloc_forget(struct worker *w, struct wk_alloc *a)
{
	wk_alloc_unlink(w, a);
	free(a);
}

void wk_alloc_destroy(struct worker *w, struct wk_alloc *a, const char *why)
{
	log_debug("turn", "allocation %u ended: %s", a->rec_idx, why);
	if (w->table_ops)
		w->table_ops->chans_drop(w, a);	/* its keys need the relay sockets still open */
	wk_alloc_unlink(w, a);
	/* DYING before the uncounting: a crash before the release then tells our
	 * replacement that this record is no longer counted (see shm_alloc_retire). */
	/* The session record's event before the retire, the end marked in the record before
	 * the event (one store, shm_alloc_end_mark): a crash after the retire leaves a DYING
	 * record, which our replacement releases without a second event; one between the
	 * push and the retire a LIVE record marked ending, which our replacement or a
	 * take-over ends without one, whether or not the master drained the event; one
	 * before the mark a LIVE record, re-adopted and recorded when it ends. Never
	 * blocks: beyond a full ring the event waits in our backlog (worker/recflush.c;
	 * lost, and counted, if we die before it reaches the ring). */
	if (a->published) {
		(void)shm_alloc_end_mark(w->shm, w->slot, a->rec_idx);
		(void)shm_records_push(w->shm, w->slot, a->rec_idx, a->rec,
				       shm_rec_reason_of(why), mono_ns(), a->l->name);
	}
	if (a->published && shm_alloc_retire(w->shm, w->slot, a->rec_idx) == 0) {
		shm_ctr_add(w->ctr, SHM_CTR_ALLOCS_ENDED, 1);
		shm_ctr_add(w->ctr, SHM_CTR_ALLOCS_ACTIVE, (uint64_t)-1);
		shm_quota_give_rec(w->shm, a->rec);
		shm_ctr_observe_lifetime(w->ctr, shm_life_seconds(a->rec->created_ns, mono_ns()));
		/* Where it was counted: the record's slot, whether or not its listener is
		 * still in the snapshot (a reload may have removed it). */
		shm_lctr_add(w->ctr, a->rec->listener_idx, SHM_LCTR_ALLOCS_ACTIVE, (uint64_t)-1);
	}
	/* After the retire: a partner's owner that writes the pair meanwhile sees it. */
	if (w->table_ops)
		w->table_ops->retired(w, a);
	shm_alloc_release(w->shm, w->slot, a->rec_idx);
	free(a);
}

/* The timer is armed at the earliest deadline of the allocation, its permissions and its
 * channels; each firing sweeps what expired and re-arms for the next. */
static void wk_alloc_arm_exact(struct worker *w, struct wk_alloc *a)
{
	uint64_t next = a->expires_ms;
	const uint64_t ns_per_ms = 1000000u;

	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS; i++)
		if (a->rec->perms[i].family && a->rec->perms[i].expires_ns / ns_per_ms < next)
			next = a->rec->perms[i].expires_ns / ns_per_ms;
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++)
		if (a->rec->chans[i].number && a->rec->chans[i].expires_ns / ns_per_ms < next)
			next = a->rec->chans[i].expires_ns / ns_per_ms;
	a->arm_pending = false;
	wheel_arm(&w->wheel, &a->timer, next + 1);
}

void wk_alloc_rearm(struct worker *w, struct wk_alloc *a)
{
	wk_alloc_arm_exact(w, a);
	/* Every change of an expiry ends here: the kernel's entries follow. */
	if (w->table_ops)
		w->table_ops->chans_sync(w, a);
}

void wk_alloc_arm_adopted(struct worker *w, struct wk_alloc *a, uint64_t now_ms)
{
	uint64_t bound = now_ms + WK_ARM_PENDING_MS;

	a->arm_pending = true;
	wheel_arm(&w->wheel, &a->timer, (a->expires_ms < bound ? a->expires_ms : bound) + 1);
	if (w->table_ops)
		w->table_ops->chans_sync(w, a);
}

bool wk_alloc_rearm_pending(struct worker *w, struct wk_alloc *a)
{
	if (!a->arm_pending)
		return false;
	wk_alloc_arm_exact(w, a);	/* the kernel's entries followed at the adoption */
	return true;
}

static void wk_alloc_timer_cb(struct wheel_timer *t, void *arg)
{
	struct worker *w = wk_checked(arg);
	struct wk_alloc *a =
		wk_alloc_checked((struct wk_alloc *)((char *)t - offsetof(struct wk_alloc, timer)));
	uint64_t now_ns = mono_ns();

	if (now_ns / 1000000u >= a->expires_ms) {
		wk_alloc_destroy(w, a, "lifetime expired");
		return;
	}
	/* Armed at a bound: the exact deadline now; a past one (something expired before the
	 * bound) is swept at once, below. Only then: the sweep's wk_alloc_rearm writes the
	 * kernel's entries, which followed at the adoption. */
	if (wk_alloc_rearm_pending(w, a) && a->timer.deadline_ms > now_ns / 1000000u)
		return;
	shm_alloc_begin_write(a->rec);
	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS; i++)
		if (a->rec->perms[i].family && a->rec->perms[i].expires_ns <= now_ns)
			memset(&a->rec->perms[i], 0, sizeof(a->rec->perms[i]));
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++)
		if (a->rec->chans[i].number && a->rec->chans[i].expires_ns <= now_ns) {
			if (w->table_ops)
				w->table_ops->chan_drop(w, a, i);
			memset(&a->rec->chans[i], 0, sizeof(a->rec->chans[i]));
		}
	shm_alloc_end_write(a->rec);
	wk_alloc_rearm(w, a);
}

void wk_alloc_set_expiry(struct worker *w, struct wk_alloc *a, uint32_t lifetime_s)
{
	uint64_t now_ns = mono_ns();

	a->expires_ms = now_ns / 1000000u + (uint64_t)lifetime_s * 1000u;
	shm_alloc_begin_write(a->rec);
	a->rec->expires_ns = now_ns + (uint64_t)lifetime_s * 1000000000u;
	shm_alloc_end_write(a->rec);
	wk_alloc_rearm(w, a);
}

/* r's socket fd, bound to port of family, announced as ann with that port. */
static void wk_relay_set(struct wk_relay *r, int fd, int family, uint16_t port,
			 const struct sockaddr_storage *ann, bool gso_off)
{
	r->fd = fd;
	r->family = family;
	r->port = port;
	r->gso_off = gso_off;
	r->unchecked = false;
	memcpy(&r->addr, ann, sizeof(r->addr));
	if (family == AF_INET)
		((struct sockaddr_in *)&r->addr)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)&r->addr)->sin6_port = htons(port);
}

static void wk_relay_watch(struct worker *w, struct wk_relay *r,
			   void (*cb)(struct ev_loop *, ev_io *, int))
{
	ev_io_init(&r->io, cb, r->fd, EV_READ);
	r->io.data = r;
	ev_io_start(w->loop, &r->io);
}

/* The relayed address of a TCP allocation (RFC 6062): a TCP socket listening on the
 * relayed address and port for peers (ConnectionAttempt, worker/tcprelay.c); Connects bind
 * their sockets to the same address and port (wk_tpeer_socket). The port is the
 * allocation's alone: the listening socket is bound without SO_REUSEPORT, so a port that
 * another program's listening socket holds (another turngated's TCP allocation, any
 * SO_REUSEPORT group) fails the bind with EADDRINUSE and the pool moves on, and a
 * turngated's TCP allocation never binds it later; with SO_REUSEPORT both were bound and
 * the kernel shared the peers' connections between them. (A SO_REUSEPORT socket of the
 * same user cannot bind it either until a Connect of the allocation has bound beside it:
 * from then on the kernel's bind bucket lets such a bind through unchecked.) SO_REUSEADDR
 * lets it bind beside the peer connections that hold the port already (a restart's or a
 * live upgrade's, TIME_WAIT ones). */
static int wk_relay_tcp_bind(struct worker *w, struct wk_relay *r, int fd,
			     const struct sockaddr_storage *bind_to,
			     const struct sockaddr_storage *ann, int family, uint16_t port)
{
	const struct sockaddr *sa = (const struct sockaddr *)bind_to;
	int one = 1;

	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, sa, wk_addr_len(sa)) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	wk_relay_set(r, fd, family, port, ann, true);
	/* A peer's connection is accepted with these buffers (the SYN-ACK's window scale
	 * follows them): an RFC 6062 pair's, set again by wk_pipe_sockbuf (stream.h) with
	 * the tcp_buffer of that moment. */
	wk_sockbuf_stream(fd, wk_sockbuf_pair(w->hot.tcp_buf), wk_sockbuf_pair(w->hot.tcp_buf));
	if (listen(fd, 64) < 0) {
		int err = -errno;

		close(fd);
		r->fd = -1;
		return err;
	}
	wk_relay_watch(w, r, w->table_ops->relay_accept);
	return 0;
}

static int wk_relay_socket(struct worker *w, struct wk_alloc *a, struct wk_relay *r, int family,
			   uint16_t port)
{
	struct wk_listener *l = a->l;
	struct sockaddr_storage bind_to;
	const struct sockaddr_storage *ann = family == l->relay_addr.ss_family ? &l->relay_addr
									       : &l->relay_addr2;
	bool local = family == l->relay_addr.ss_family ? l->relay_local : l->relay2_local;
	int one = 1, fd;

	memset(&bind_to, 0, sizeof(bind_to));
	if (local)
		memcpy(&bind_to, ann, sizeof(bind_to));
	else
		bind_to.ss_family = (sa_family_t)family;
	if (family == AF_INET)
		((struct sockaddr_in *)&bind_to)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)&bind_to)->sin6_port = htons(port);
	fd = socket(family, (a->tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (a->tcp)
		return wk_relay_tcp_bind(w, r, fd, &bind_to, ann, family, port);
	/* An adoption defers what relaying does not need to the idle watcher (adopt.c) */
	r->untuned = w->adopting && !a->dont_fragment;
	r->df_fast = !a->dont_fragment && !r->untuned && wk_df_fast(fd, family);
	if (a->dont_fragment) {
		int v = family == AF_INET ? IP_PMTUDISC_DO : IPV6_PMTUDISC_DO;

		if (family == AF_INET)
			setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &v, sizeof(v));
		else
			setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &v, sizeof(v));
	}
	if (bind(fd, (struct sockaddr *)&bind_to, wk_addr_len((struct sockaddr *)&bind_to)) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	/* Here rather than in the Allocate handler, so relay sockets rebound by re-adoption
	 * after a worker crash get the same buffers. */
	if (!r->untuned)
		wk_sockbuf_set(fd, WK_SOCKBUF_RELAY);
	wk_relay_set(r, fd, family, port, ann, false);
	wk_relay_watch(w, r, w->table_ops->relay_rx);
	wk_alloc_port_index(w, a, r, true);
	return 0;
}

/* A relay socket a live upgrade handed over: of type, bound to family and port (the
 * old worker's, but the receiver trusts no descriptor it did not make). */
static bool wk_relay_handed_ok(int fd, int type, int family, uint16_t port)
{
	struct sockaddr_storage got;
	socklen_t gl = sizeof(got), tl = sizeof(int);
	struct shm_addr bound;
	int t = 0;

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &t, &tl) < 0 || t != type ||
	    getsockname(fd, (struct sockaddr *)&got, &gl) < 0 || got.ss_family != family)
		return false;
	wk_addr_to_shm((struct sockaddr *)&got, &bound);
	return bound.port == port;
}

/* A handed-over relay socket taken as a's relay r and watched as wk_relay_tcp_bind (an
 * RFC 6062 relay's listening socket) or wk_relay_socket (UDP) leaves one. A UDP socket
 * keeps what the old worker set (buffers, DF mode: IP_PMTUDISC_DO on IPv4, wk_df_fast)
 * and the datagrams that arrived meanwhile. Its check (wk_relay_handed_ok, two system
 * calls of the four a socket cost) waits for wk_relay_verify, off the path to relaying;
 * an RFC 6062 relay's (few, handed over with their connections) is made at once. */
static int wk_relay_take(struct worker *w, struct wk_alloc *a, struct wk_relay *r, int fd,
			 int family, uint16_t port)
{
	struct wk_listener *l = a->l;
	const struct sockaddr_storage *ann = family == l->relay_addr.ss_family ? &l->relay_addr
									       : &l->relay_addr2;

	if (a->tcp && !wk_relay_handed_ok(fd, SOCK_STREAM, family, port))
		return -EINVAL;
	wk_relay_set(r, fd, family, port, ann, a->tcp);
	if (a->tcp) {
		wk_relay_watch(w, r, w->table_ops->relay_accept);
		return 0;
	}
	r->untuned = false;
	r->unchecked = true;
	r->df_fast = family == AF_INET && !a->dont_fragment;
	wk_relay_watch(w, r, w->table_ops->relay_rx);
	wk_alloc_port_index(w, a, r, true);
	return 0;
}

bool wk_relay_verify(struct worker *w, struct wk_alloc *a, struct wk_relay *r)
{
	uint16_t port = r->port;

	if (!r->unchecked)
		return true;
	r->unchecked = false;
	if (wk_relay_handed_ok(r->fd, SOCK_DGRAM, r->family, port))
		return true;
	log_warn("worker", "slot %u: allocation %u: the socket handed over for relay port %u "
			   "is not its UDP socket: the allocation ends",
		 w->slot, a->rec_idx, port);
	shm_ctr_add(w->ctr, SHM_CTR_ALLOCS_DROPPED, 1);
	wk_alloc_destroy(w, a, "relay socket refused");
	return false;
}

int wk_alloc_rebind_relay(struct worker *w, struct wk_alloc *a, const struct shm_addr *relay,
			  int fd)
{
	struct wk_listener *l = a->l;
	struct wk_relay *r = a->relay[0].fd < 0 ? &a->relay[0] : &a->relay[1];
	struct shm_addr got;
	uint32_t tag;
	int rc, family = relay->family;
	bool have = family != 0 &&
		    (family == l->relay_addr.ss_family || family == l->relay_addr2.ss_family);

	if (!have || relay->port == 0)
		return -EAFNOSUPPORT;
	/* Its record books the port already (a respawn: the pool kept it; a take-over: the
	 * rebuild entered it); booking it again is a no-op, or the booking if it had none. */
	tag = wk_pool_tag(l, family);
	rc = shm_ppool_take(w->shm, tag, relay->port, a->rec_idx, mono_ns());
	if (rc < 0)
		return rc == -ENOSPC ? -EADDRINUSE : rc;
	rc = fd >= 0 ? wk_relay_take(w, a, r, fd, family, relay->port)
		     : wk_relay_socket(w, a, r, family, relay->port);
	/* The pool let us have the port, the kernel did not: a socket still holds it (a
	 * killed predecessor's that the kernel is still releasing, or another program's),
	 * unlike a port the pool gives to another allocation. The record keeps its booking
	 * while it waits (adopt.c); a release gives it back. */
	if (rc < 0 && fd < 0 && rc == -EADDRINUSE)
		return -EBUSY;
	if (rc < 0) {
		shm_ppool_put(w->shm, tag, relay->port, a->rec_idx);
		return rc;
	}
	r->pool_tag = tag;
	/* The client was told this relayed address: if the announced address moved since,
	 * serving it from another one would break the client's peers. */
	wk_addr_to_shm((struct sockaddr *)&r->addr, &got);
	if (memcmp(&got, relay, sizeof(got)) != 0)
		return -EADDRNOTAVAIL;	/* the caller forgets a, which closes r */
	return 0;
}

uint32_t wk_pool_tag(const struct wk_listener *l, int family)
{
	struct shm_addr a;

	wk_addr_to_shm((const struct sockaddr *)(family == l->relay_addr.ss_family
							 ? &l->relay_addr
							 : &l->relay_addr2),
		       &a);
	return shm_ppool_tag(&a);
}

/* portpool_bind's callback: relay r of a bound to a pool port. */
struct wk_pool_bind {
	struct worker *w;
	struct wk_alloc *a;
	struct wk_relay *r;
	int family;
};

static int wk_pool_bind(void *ctx, uint16_t port)
{
	struct wk_pool_bind *b = ctx;

	return wk_relay_socket(b->w, b->a, b->r, b->family, port);
}

int wk_alloc_bind_relay(struct worker *w, struct wk_alloc *a, int family, int port_hint, bool even,
			struct shm_ppool_resv *resv)
{
	struct wk_listener *l = a->l;
	struct wk_relay *r = a->relay[0].fd < 0 ? &a->relay[0] : &a->relay[1];
	bool have = family == l->relay_addr.ss_family ||
		    (l->relay_addr2.ss_family == family && family != 0);
	struct wk_pool_bind b = { w, a, r, family };
	uint32_t tag;
	uint16_t port;
	int rc;

	if (!have)
		return -EAFNOSUPPORT;
	tag = wk_pool_tag(l, family);
	if (port_hint > 0) {
		rc = wk_relay_socket(w, a, r, family, (uint16_t)port_hint);
		if (rc == 0)
			r->pool_tag = tag;
		return rc;
	}
	rc = portpool_bind(&l->pool, w->shm, tag, a->rec_idx, even, resv, mono_ns(),
			   wk_pool_bind, &b, &port);
	if (rc == 0)
		r->pool_tag = tag;
	if (rc != -EADDRNOTAVAIL)
		return rc;
	shm_ctr_add(w->ctr, SHM_CTR_ERR_RELAY_BIND, 1);
	return -EADDRNOTAVAIL;
}

int wk_alloc_perm_add(struct worker *w, struct wk_alloc *a, const struct sockaddr *peer)
{
	uint8_t fam, ip[16];
	uint64_t now_ns = mono_ns(), exp = now_ns + (uint64_t)w->hot.perm_lifetime * 1000000000u;
	struct shm_perm *same = NULL, *spare = NULL, *slot;
	unsigned used = 0;

	if (!wk_addr_ip(peer, &fam, ip))
		return -EAFNOSUPPORT;
	/* Count every live entry but the peer's own: whatever slot is reused (empty, or
	 * expired and not yet swept), a peer without a live permission adds one. */
	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS; i++) {
		struct shm_perm *p = &a->rec->perms[i];

		if (p->family == fam && memcmp(p->addr, ip, 16) == 0)
			same = p;
		else if (p->family && p->expires_ns > now_ns)
			used++;
		else if (!spare)
			spare = p;
	}
	slot = same ? same : spare;
	if (!slot || ((!same || same->expires_ns <= now_ns) && used >= w->hot.max_perms))
		return -ENOSPC;
	shm_alloc_begin_write(a->rec);
	slot->family = fam;
	memcpy(slot->addr, ip, 16);
	slot->expires_ns = exp;
	shm_alloc_end_write(a->rec);
	wk_alloc_rearm(w, a);
	return 0;
}

uint64_t wk_alloc_user_key(struct wk_alloc *a)
{
	if (a->user_key == 0)
		a->user_key = shm_quota_user_key(a->rec->username,
						 a->rec->user_len < SHM_ALLOC_USER_MAX
							 ? a->rec->user_len
							 : SHM_ALLOC_USER_MAX);
	return a->user_key;
}

bool wk_alloc_perm_ok(const struct wk_alloc *a, const struct sockaddr *peer, uint64_t now_ns)
{
	uint8_t fam, ip[16];

	if (!wk_addr_ip(peer, &fam, ip))
		return false;
	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS; i++) {
		const struct shm_perm *p = &a->rec->perms[i];

		if (p->family == fam && p->expires_ns > now_ns && memcmp(p->addr, ip, 16) == 0)
			return true;
	}
	return false;
}

const struct shm_chan *wk_alloc_chan_by_num(const struct wk_alloc *a, uint16_t ch, uint64_t now_ns)
{
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++)
		if (a->rec->chans[i].number == ch && a->rec->chans[i].expires_ns > now_ns)
			return &a->rec->chans[i];
	return NULL;
}

const struct shm_chan *wk_alloc_chan_by_peer(const struct wk_alloc *a, const struct sockaddr *peer,
					     uint64_t now_ns)
{
	struct shm_addr k;

	wk_addr_to_shm(peer, &k);
	for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++) {
		const struct shm_chan *c = &a->rec->chans[i];

		if (c->number && c->expires_ns > now_ns && c->peer.family == k.family &&
		    c->peer.port == k.port && memcmp(c->peer.addr, k.addr, 16) == 0)
			return c;
	}
	return NULL;
}

void wk_alloc_announced(const struct wk_alloc *a, const struct wk_relay *r,
			struct sockaddr_storage *out)
{
	const struct sockaddr_storage *m = &a->l->mask_addr;

	memset(out, 0, sizeof(*out));
	memcpy(out, &r->addr, sizeof(r->addr));
	if (m->ss_family != r->family)
		return;
	memcpy(out, m, sizeof(*out));
	if (r->family == AF_INET)
		((struct sockaddr_in *)out)->sin_port = htons(r->port);
	else
		((struct sockaddr_in6 *)out)->sin6_port = htons(r->port);
}

/* RFC 8656 11.2: a channel number bound to another peer, or a peer bound to another
 * channel, is refused (-EEXIST -> 400); rebinding the same pair refreshes it. A channel
 * that expired is free again at once (the RFC's 5-minute quarantine is not applied:
 * stale ChannelData for it can only reach the peer the client now names). */
int wk_alloc_chan_bind(struct worker *w, struct wk_alloc *a, uint16_t ch,
		       const struct sockaddr *peer)
{
	uint64_t now_ns = mono_ns();
	const struct shm_chan *by_num = wk_alloc_chan_by_num(a, ch, now_ns);
	const struct shm_chan *by_peer = wk_alloc_chan_by_peer(a, peer, now_ns);
	struct shm_chan *slot = NULL;
	unsigned used = 0;
	int rc;

	if (by_num != by_peer)
		return -EEXIST;
	if (by_num) {
		slot = (struct shm_chan *)by_num;
	} else {
		for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++) {
			struct shm_chan *c = &a->rec->chans[i];

			if (c->number && c->expires_ns > now_ns)
				used++;
			else if (!slot)
				slot = c;
		}
		if (!slot || used >= w->hot.max_chans)
			return -ENOSPC;
	}
	/* The permission first: when the table is full the request fails with nothing
	 * bound (a channel left without its permission would block the number). */
	rc = wk_alloc_perm_add(w, a, peer);
	if (rc < 0)
		return rc;
	if (!by_num)	/* a free or expired slot: its old channel's entry goes first */
		if (w->table_ops)
			w->table_ops->chan_drop(w, a, (unsigned)(slot - a->rec->chans));
	shm_alloc_begin_write(a->rec);
	wk_addr_to_shm(peer, &slot->peer);
	slot->number = ch;
	slot->expires_ns = now_ns + (uint64_t)w->hot.chan_lifetime * 1000000000u;
	shm_alloc_end_write(a->rec);
	return 0;
}
