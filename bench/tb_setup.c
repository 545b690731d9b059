/* turnbench setup phase: pipelined, authenticated Allocate + CreatePermission + ChannelBind.
 *
 * Each allocation walks 401 round -> Allocate -> CreatePermission -> ChannelBind on its own
 * socket; at most o->conc allocations are between their first request and their last answer.
 * In sym mode the peer of an allocation is its partner's relayed address, so an allocation
 * whose partner has not allocated yet waits (S_WAIT, no transaction open) until it has.
 * Answers are matched by transaction id and success answers are integrity-checked, so a
 * server that signs wrongly fails the benchmark instead of looking fast.
 *
 * TCP mode: the same walk over one TCP connection per allocation (TURN over TCP, the relay
 * still UDP); the answers are cut out of the byte stream, and a request is never resent
 * (a reliable transport): one unanswered for MAX_TRIES RTOs fails the allocation.
 */
#include "bench/tb.h"
#include "stun/stun.h"
#include "stun/stun_auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum tb_state {
	S_IDLE,
	S_A0,
	S_A1,
	S_PERM,
	S_BIND,
	S_READY,
	S_FAIL,
	S_WAIT			/* sym: allocated, waiting for the partner's relayed address */
};

/* A request of this state is outstanding (answers are taken, timers run). */
static bool in_transaction(uint8_t state)
{
	return state >= S_A0 && state <= S_BIND;
}

static const struct sockaddr *peer_of(const struct tb_ctx *ctx, uint32_t idx)
{
	if (ctx->o->mode == TB_MODE_SYM)
		return (const struct sockaddr *)&ctx->a[idx ^ 1].relayed;
	return (const struct sockaddr *)&ctx->o->peer;
}

#define RTO_NS 500000000ull
#define MAX_TRIES 5

static void tid_new(struct tb_alloc *a, uint32_t idx)
{
	/* Unique per allocation and transaction without a CSPRNG call per request. */
	uint32_t w[3] = { idx, 0, 0x74626e63u };

	memcpy(&w[1], a->tid + 4, 4);
	w[1]++;
	memcpy(a->tid, w, sizeof(w));
}

/* The credentials allocation idx uses (-U spreads them over several users). */
static const struct tb_user *user_of(const struct tb_ctx *ctx, uint32_t idx)
{
	return &ctx->user[idx % ctx->o->users];
}

static void add_auth(struct tb_ctx *ctx, struct stun_builder *b, uint32_t idx)
{
	const struct tb_user *u = user_of(ctx, idx);
	const struct tb_alloc *a = &ctx->a[idx];
	char nonce[TB_NONCE_MAX + 1];

	memcpy(nonce, a->nonce, a->nonce_len);
	nonce[a->nonce_len] = '\0';
	stun_build_string(b, STUN_ATTR_USERNAME, u->username);
	stun_build_string(b, STUN_ATTR_REALM, ctx->realm);
	stun_build_string(b, STUN_ATTR_NONCE, nonce);
	stun_build_integrity(b, u->key, u->key_len);
}

/* (Re)sends the request of a's current state with a's current transaction id. */
static int send_request(struct tb_ctx *ctx, uint32_t idx)
{
	struct tb_alloc *a = &ctx->a[idx];
	const struct sockaddr *peer = peer_of(ctx, idx);
	struct stun_builder b;
	uint8_t buf[512];
	size_t len;

	switch (a->state) {
	case S_A0:
	case S_A1:
		stun_build_init(&b, buf, sizeof(buf), STUN_ALLOCATE, STUN_REQUEST, a->tid);
		stun_build_requested_transport(&b, STUN_TRANSPORT_UDP);
		break;
	case S_PERM:
		stun_build_init(&b, buf, sizeof(buf), STUN_CREATE_PERMISSION, STUN_REQUEST, a->tid);
		stun_build_addr(&b, STUN_ATTR_XOR_PEER_ADDRESS, peer);
		break;
	case S_BIND:
		stun_build_init(&b, buf, sizeof(buf), STUN_CHANNEL_BIND, STUN_REQUEST, a->tid);
		stun_build_channel(&b, TB_CHANNEL);
		stun_build_addr(&b, STUN_ATTR_XOR_PEER_ADDRESS, peer);
		break;
	default:
		return -EINVAL;
	}
	if (a->state != S_A0 && ctx->have_key)
		add_auth(ctx, &b, idx);
	if (stun_build_finish(&b, &len) != 0)
		return -ENOBUFS;
	if (ctx->st) {
		/* A few hundred bytes into a 4 MiB send buffer: all of it or the stream is lost. */
		ssize_t w = send(a->fd, buf, len, MSG_NOSIGNAL);

		if (w != (ssize_t)len)
			return w < 0 ? -errno : -EIO;
	} else if (send(a->fd, buf, len, 0) < 0 && errno != EAGAIN) {
		return -errno;
	}
	a->deadline_ns = tb_now_ns() + RTO_NS;
	return 0;
}

static int enter(struct tb_ctx *ctx, uint32_t idx, uint8_t state)
{
	struct tb_alloc *a = &ctx->a[idx];

	a->state = state;
	a->tries = 0;
	tid_new(a, idx);
	return send_request(ctx, idx);
}

static void fail(struct tb_ctx *ctx, uint32_t idx, const char *why, int code)
{
	if (ctx->failed < 5)
		fprintf(stderr, "turnbench: allocation %u failed in state %u: %s %d\n", idx,
			ctx->a[idx].state, why, code);
	ctx->a[idx].state = S_FAIL;
	ctx->failed++;
	/* A partner waiting for this allocation's address would wait for ever. */
	if (ctx->o->mode == TB_MODE_SYM && ctx->a[idx ^ 1].state == S_WAIT)
		fail(ctx, idx ^ 1, "partner failed", 0);
}

/* Allocate succeeded: keep the relayed address; go on to the permission, in sym mode once
 * the partner has its address too (then both go on). */
static void on_allocated(struct tb_ctx *ctx, uint32_t idx, const struct stun_msg *m)
{
	struct tb_alloc *a = &ctx->a[idx];
	struct sockaddr_storage ss;

	if (stun_msg_get_addr(m, STUN_ATTR_XOR_RELAYED_ADDRESS, &ss) != 0 ||
	    ss.ss_family != AF_INET) {
		fail(ctx, idx, "no IPv4 XOR-RELAYED-ADDRESS", 0);
		return;
	}
	memcpy(&a->relayed, &ss, sizeof(a->relayed));
	if (ctx->o->mode != TB_MODE_SYM) {
		if (enter(ctx, idx, S_PERM) != 0)
			fail(ctx, idx, "send", 0);
		return;
	}
	a->state = S_WAIT;
	if (ctx->a[idx ^ 1].state != S_WAIT)
		return;
	for (uint32_t k = idx & ~1u; k <= (idx | 1u); k++)
		if (enter(ctx, k, S_PERM) != 0)
			fail(ctx, k, "send", 0);
}

/* User k's username (the user itself, or USER<k> with -U) and key for ctx->realm. */
static int derive_user(struct tb_ctx *ctx, unsigned k)
{
	struct tb_user *u = &ctx->user[k];
	char id[128], pass[64];
	const char *pw = ctx->o->pass;
	int rc = 0;

	if (ctx->o->users > 1)
		snprintf(id, sizeof(id), "%s%u", ctx->o->user, k);
	else
		snprintf(id, sizeof(id), "%s", ctx->o->user);
	if (ctx->o->secret) {
		uint64_t exp = (uint64_t)time(NULL) + 86400;

		if (stun_rest_mint((const uint8_t *)ctx->o->secret, strlen(ctx->o->secret), id,
				   exp, u->username, sizeof(u->username), pass, sizeof(pass)) != 0)
			return -EINVAL;
		pw = pass;
	} else {
		snprintf(u->username, sizeof(u->username), "%s", id);
	}
	if (stun_auth_key(STUN_PWALG_MD5, u->username, strlen(u->username), ctx->realm,
			  strlen(ctx->realm), pw, strlen(pw), u->key, &u->key_len) != 0)
		rc = -EIO;
	explicit_bzero(pass, sizeof(pass));
	return rc;
}

/* Takes REALM and NONCE from a 401/438 answer; derives the keys on the first realm. */
static int take_nonce(struct tb_ctx *ctx, struct tb_alloc *a, const struct stun_msg *m)
{
	const char *nonce;
	size_t nl;

	if (stun_msg_get_string(m, STUN_ATTR_NONCE, &nonce, &nl) != 0 || nl > TB_NONCE_MAX)
		return -EBADMSG;
	memcpy(a->nonce, nonce, nl);
	a->nonce_len = (uint8_t)nl;
	if (ctx->have_key)
		return 0;
	if (stun_msg_copy_string(m, STUN_ATTR_REALM, ctx->realm, sizeof(ctx->realm)) != 0)
		return -EBADMSG;
	for (unsigned k = 0; k < ctx->o->users; k++) {
		int rc = derive_user(ctx, k);

		if (rc != 0)
			return rc;
	}
	ctx->have_key = true;
	return 0;
}

static void on_error(struct tb_ctx *ctx, uint32_t idx, const struct stun_msg *m)
{
	struct tb_alloc *a = &ctx->a[idx];
	int code = 0;

	stun_msg_get_error(m, &code, NULL, NULL);
	if ((code == 401 && a->state == S_A0) || (code == 438 && a->tries < MAX_TRIES)) {
		uint8_t tries;

		if (take_nonce(ctx, a, m) != 0) {
			fail(ctx, idx, "bad REALM/NONCE in", code);
			return;
		}
		if (code == 438)
			ctx->stale++;
		tries = a->tries;
		if (enter(ctx, idx, a->state == S_A0 ? S_A1 : a->state) != 0)
			fail(ctx, idx, "send", 0);
		a->tries = (uint8_t)(tries + (code == 438));
		return;
	}
	fail(ctx, idx, "error response", code);
}

static void on_success(struct tb_ctx *ctx, uint32_t idx, const struct stun_msg *m)
{
	struct tb_alloc *a = &ctx->a[idx];

	const struct tb_user *u = user_of(ctx, idx);

	if (ctx->have_key && stun_msg_check_integrity(m, u->key, u->key_len) != 0) {
		fail(ctx, idx, "bad MESSAGE-INTEGRITY on success", 0);
		return;
	}
	switch (a->state) {
	case S_A0:
	case S_A1:
		on_allocated(ctx, idx, m);
		break;
	case S_PERM:
		if (enter(ctx, idx, S_BIND) != 0)
			fail(ctx, idx, "send", 0);
		break;
	case S_BIND:
		a->state = S_READY;
		ctx->done++;
		break;
	default:
		break;
	}
}

static void on_message(struct tb_ctx *ctx, uint32_t idx, const uint8_t *buf, size_t n)
{
	struct tb_alloc *a = &ctx->a[idx];
	struct stun_msg m;

	if (!in_transaction(a->state))
		return;
	if (stun_msg_parse(&m, buf, n) != 0 || memcmp(m.tid, a->tid, 12) != 0)
		return;	/* late answer to an earlier transaction */
	if (m.cls == STUN_SUCCESS)
		on_success(ctx, idx, &m);
	else if (m.cls == STUN_ERROR)
		on_error(ctx, idx, &m);
}

/* TCP: appends what the connection has to its stream buffer and takes every whole STUN
 * message out of it (nothing else comes before the channel is bound). */
static void on_stream(struct tb_ctx *ctx, uint32_t idx)
{
	struct tb_stream *st = &ctx->st[idx];
	ssize_t n = recv(ctx->a[idx].fd, st->buf + st->len, sizeof(st->buf) - st->len, 0);
	long f;

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		epoll_ctl(ctx->ep, EPOLL_CTL_DEL, ctx->a[idx].fd, NULL);
		if (ctx->a[idx].state != S_FAIL)
			fail(ctx, idx, n == 0 ? "server closed the connection" : "recv", n ? errno : 0);
		return;
	}
	st->len += (uint32_t)n;
	while ((f = tb_stream_frame(st->buf, st->len)) > 0) {
		on_message(ctx, idx, st->buf, (size_t)f);
		memmove(st->buf, st->buf + f, st->len - (size_t)f);
		st->len -= (uint32_t)f;
	}
	if (f < 0 || st->len == sizeof(st->buf)) {
		epoll_ctl(ctx->ep, EPOLL_CTL_DEL, ctx->a[idx].fd, NULL);
		if (ctx->a[idx].state != S_FAIL)
			fail(ctx, idx, "unframeable bytes from the server", 0);
	}
}

static void on_readable(struct tb_ctx *ctx, uint32_t idx)
{
	struct tb_alloc *a = &ctx->a[idx];
	uint8_t buf[2048];

	if (ctx->st) {
		on_stream(ctx, idx);
		return;
	}

	for (int k = 0; k < 16; k++) {
		ssize_t n = recv(a->fd, buf, sizeof(buf), 0);

		if (n < 0)
			return;	/* EAGAIN, or an ICMP error: the retransmission timer decides */
		on_message(ctx, idx, buf, (size_t)n);
	}
}

static int start_one(struct tb_ctx *ctx, uint32_t idx)
{
	struct tb_alloc *a = &ctx->a[idx];
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = idx };
	int r = ctx->st ? tb_tcp_open(&ctx->o->bind, &ctx->o->server, &a->fd)
			: tb_udp_open(&ctx->o->bind, &ctx->o->server, &a->fd);

	if (r != 0)
		return r;
	if (epoll_ctl(ctx->ep, EPOLL_CTL_ADD, a->fd, &ev) != 0)
		return -errno;
	/* Like a fresh client (browser), every allocation starts with the 401 round. */
	return enter(ctx, idx, S_A0);
}

/* Retransmits overdue requests among allocations [lo, hi). */
static void check_timers(struct tb_ctx *ctx, uint32_t lo, uint32_t hi, uint64_t now)
{
	for (uint32_t i = lo; i < hi; i++) {
		struct tb_alloc *a = &ctx->a[i];

		if (!in_transaction(a->state) || now < a->deadline_ns)
			continue;
		if (++a->tries >= MAX_TRIES) {
			fail(ctx, i, "no answer after retries", a->tries);
			continue;
		}
		if (ctx->st) {		/* TCP: wait on, never resend */
			a->deadline_ns = now + RTO_NS;
			continue;
		}
		ctx->retrans++;
		if (send_request(ctx, i) != 0) {
			fail(ctx, i, "send", 0);
			continue;
		}
		a->deadline_ns = now + (RTO_NS << a->tries);
	}
}

int tb_setup_run(struct tb_ctx *ctx)
{
	const struct tb_opts *o = ctx->o;
	uint64_t t0 = tb_now_ns(), limit = t0 + 30000000000ull + (uint64_t)o->n * 10000000ull;
	uint32_t next = 0, lo = 0;
	struct epoll_event ev[256];

	while (ctx->done + ctx->failed < o->n) {
		uint64_t now = tb_now_ns();
		int n;

		if (now > limit) {
			fprintf(stderr, "turnbench: setup timed out (%u ready)\n", ctx->done);
			return -ETIMEDOUT;
		}
		/* Allocations below lo are finished; timers are checked from lo on. */
		while (lo < next && (ctx->a[lo].state == S_READY || ctx->a[lo].state == S_FAIL))
			lo++;
		/* Every started allocation is finished (done/failed) or in flight. */
		while (next < o->n && next - (ctx->done + ctx->failed) < o->conc) {
			int r = start_one(ctx, next);

			if (r != 0) {
				fprintf(stderr, "turnbench: socket for allocation %u: %s\n", next,
					strerror(-r));
				return r;
			}
			next++;
		}
		n = epoll_wait(ctx->ep, ev, 256, 5);
		for (int k = 0; k < n; k++)
			on_readable(ctx, ev[k].data.u32);
		check_timers(ctx, lo, next, tb_now_ns());
	}
	ctx->setup_ns = tb_now_ns() - t0;
	return ctx->failed ? -EIO : 0;
}
