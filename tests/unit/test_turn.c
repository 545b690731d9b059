/* In-process tests of the worker's TURN methods (worker/turn.c) and its allocation code
 * (worker/table.c): requests go through wk_turn_input of a worker set up as
 * fuzz/fuzz_dispatch.c does it (a shm segment, a snapshot of the config below, one UDP
 * listener on a loopback socket), and each test checks the responses the client socket
 * receives, the allocation table, the shared record and the slot's counters.
 *
 * Relay ports 59000-59999 on 127.0.0.1 (the fuzz harness's window; a port somebody else
 * holds is skipped). The peer is a UDP socket on 127.0.0.1; 10.0.0.1 is outside the
 * routes. Nothing here waits: loopback datagrams are queued when sendto returns, and the
 * worker's loop runs once (EVRUN_NOWAIT) to carry a peer's datagram back. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/log.h"
#include "common/mono.h"
#include "conf/conf.h"
#include "conf/snapshot.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_authfail.h"
#include "shm/shm_ppool.h"
#include "stun/stun.h"
#include "stun/stun_auth.h"
#include "worker/authfail.h"
#include "worker/lifecycle.h"
#include "worker/relay.h"
#include "worker/table.h"
#include "worker/transport.h"
#include "worker/turn.h"
#include "worker/wk.h"

#define USER "alice"
#define PASS "alice-pw"
#define REALM "unit.example"
#define CHAN 0x4000

static const char yaml[] =
	"version: v1\n"
	"admin:\n  loglevel: \"all:ERROR\"\n  relay_port_min: 59000\n  relay_port_max: 59999\n"
	"auth:\n  type: static\n  realm: " REALM "\n"
	"  credentials: {username: " USER ", password: " PASS "}\n"
	"limits:\n  max_permissions: 2\n  max_channels: 2\n  unauth_rate: 0\n"
	"listeners:\n"
	"  - {name: udp, address: 127.0.0.1, port: 3478, routes: [loop]}\n"
	"clusters:\n  - {name: loop, endpoints: [\"127.0.0.0/8\"]}\n";

struct fix {
	struct shm *shm;
	struct conf *cfg;
	void *blob;
	size_t blob_len;
	const struct snap *snap;
	struct worker_heritage h;
	struct worker *w;
	struct wk_listener *l;
	int cli_fd, peer_fd;
	struct sockaddr_in cli, lst, peer;
	struct wk_ep ep;
	uint8_t key[STUN_KEY_MAX];
	size_t key_len;
	char nonce[STUN_NONCE_MAX_LEN + 1];
	uint8_t resp[2048];		/* the last response's bytes, which msg points into */
	struct stun_msg msg;
};

static int udp_socket(struct sockaddr_in *bound)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(*bound);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)bound, &sl), 0);
	return fd;
}

static void snapshot(struct fix *f)
{
	struct conf_diags d = { 0 };
	struct conf_load_opts o = { .now = 1700000000 };
	struct snap_build_params bp = { .generation = 1 };

	for (size_t i = 0; i < sizeof(bp.nonce_key); i++)
		bp.nonce_key[i] = (uint8_t)(0xa5 ^ i);
	assert_int_equal(conf_load_string(yaml, sizeof(yaml) - 1, "test_turn.yaml", &o, &f->cfg,
					  &d), 0);
	conf_diags_free(&d);
	assert_int_equal(snap_build(f->cfg, &bp, &f->blob, &f->blob_len), 0);
	assert_int_equal(snap_open(f->blob, f->blob_len, &f->snap), 0);
}

static int setup(void **state)
{
	struct shm_config sc = { .n_slots = 1, .snap_count = 2, .snap_size = 65536, .alloc_cap = 16 };
	struct fix *f = test_calloc(1, sizeof(*f));
	struct worker *w;

	log_set_spec("all:ERROR");
	snapshot(f);
	assert_int_equal(shm_create(&sc, "test-turn", &f->shm), 0);
	f->h = (struct worker_heritage){ .slot = 0, .slot_count = 1, .shm = f->shm,
					 .ctl_fd = -1, .offload = { -1, -1 } };
	w = f->w = test_calloc(1, sizeof(*w));
	w->magic = WK_MAGIC;
	w->h = &f->h;
	w->shm = f->shm;
	w->ctr = shm_slot_counters(f->shm, 0);
	w->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
	assert_non_null(w->ctr);
	assert_non_null(w->loop);
	wk_ctlq_init(w); /* as worker_run does: no queue until a frame waits */
	assert_int_equal(wk_tables_init(w), 0);
	wheel_init(&w->wheel, mono_ms());
	/* The listener as the master hands it over, started as wk_listener_add does. */
	f->l = calloc(1, sizeof(*f->l));
	assert_non_null(f->l);
	f->l->w = w;
	snprintf(f->l->name, sizeof(f->l->name), "udp");
	f->l->proto = WORKER_PROTO_UDP;
	f->l->fd = udp_socket(&f->lst);
	f->l->family = AF_INET;
	f->l->active = true;
	assert_int_equal(wk_udp_start(w, f->l), 0);
	w->ls[w->n_ls++] = f->l;
	wk_snap_use(w, f->snap);
	assert_true(f->l->snap_ok);
	f->cli_fd = udp_socket(&f->cli);
	f->peer_fd = udp_socket(&f->peer);
	f->ep = (struct wk_ep){ .l = f->l, .addr = (struct sockaddr *)&f->cli,
				.addr_len = sizeof(f->cli) };
	assert_int_equal(stun_auth_key(STUN_PWALG_MD5, USER, strlen(USER), REALM, strlen(REALM),
				       PASS, strlen(PASS), f->key, &f->key_len), 0);
	*state = f;
	return 0;
}

static uint64_t ctr(const struct fix *f, enum shm_ctr i)
{
	struct shm_counters c;

	assert_int_equal(shm_counters_read(f->shm, 0, &c), 0);
	return c.v[i];
}

static int teardown(void **state)
{
	struct fix *f = *state;
	struct worker *w = f->w;
	uint32_t cursor = 0, idx;

	/* The allocation code gives everything back: no allocation, timer, port or record
	 * outlives wk_alloc_destroy, and the active gauge is back at 0. */
	while (!LIST_EMPTY(&w->allocs))
		wk_alloc_destroy(w, LIST_FIRST(&w->allocs), "test done");
	assert_int_equal(w->n_allocs, 0);
	assert_int_equal(w->wheel.armed, 0);
	assert_int_equal(shm_ppool_held(f->shm, mono_ns(), NULL), 0);
	assert_int_not_equal(shm_alloc_next_live(f->shm, &cursor, &idx), 0);
	assert_int_equal(ctr(f, SHM_CTR_ALLOCS_ACTIVE), 0);
	wk_listener_close(w, f->l);
	free(f->l);
	close(f->cli_fd);
	close(f->peer_fd);
	wk_tables_free(w);
	ev_loop_destroy(w->loop);
	test_free(w);
	shm_destroy(f->shm);
	snap_blob_free(f->blob, f->blob_len);
	conf_free(f->cfg);
	test_free(f);
	return 0;
}

/* ---- the client's side ------------------------------------------------------------------ */

struct req {
	struct stun_builder b;
	uint8_t buf[1024];
};

static void req_begin(struct req *r, uint16_t method, uint8_t cls)
{
	uint8_t tid[STUN_TID_LEN];

	assert_int_equal(stun_tid_random(tid), 0);
	stun_build_init(&r->b, r->buf, sizeof(r->buf), method, cls, tid);
}

static struct sockaddr_in addr_of(const char *ip, uint16_t port)
{
	struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons(port) };

	assert_int_equal(inet_pton(AF_INET, ip, &s.sin_addr), 1);
	return s;
}

/* Delivers the message as the UDP listener would, then runs the loop once. */
static void deliver(struct fix *f, uint8_t *buf, size_t len)
{
	uint8_t *exact = malloc(len);	/* exact size: a read past the datagram is caught */

	assert_non_null(exact);
	memcpy(exact, buf, len);
	wk_turn_input(f->w, &f->ep, exact, len);
	wk_txg_flush(f->w);
	free(exact);
	ev_run(f->w->loop, EVRUN_NOWAIT);
}

/* Finishes r (credentials and MESSAGE-INTEGRITY when sign), sends it. */
static void send_req(struct fix *f, struct req *r, bool sign)
{
	size_t len;

	if (sign) {
		stun_build_string(&r->b, STUN_ATTR_USERNAME, USER);
		stun_build_string(&r->b, STUN_ATTR_REALM, REALM);
		stun_build_string(&r->b, STUN_ATTR_NONCE, f->nonce);
		stun_build_integrity(&r->b, f->key, f->key_len);
	}
	assert_int_equal(stun_build_finish(&r->b, &len), 0);
	deliver(f, r->buf, len);
}

/* The next datagram from the listener to the client, or 0 when none is queued. */
static size_t recv_cli(struct fix *f)
{
	ssize_t n = recv(f->cli_fd, f->resp, sizeof(f->resp), MSG_DONTWAIT);

	return n < 0 ? 0 : (size_t)n;
}

/* Sends r and parses the response; returns its error code (0 on success). */
static int transact(struct fix *f, struct req *r, bool sign)
{
	int code = 0;
	size_t n;

	send_req(f, r, sign);
	n = recv_cli(f);
	assert_true(n > 0);
	assert_int_equal(stun_msg_parse(&f->msg, f->resp, n), 0);
	assert_memory_equal(f->msg.tid, r->buf + 8, STUN_TID_LEN);
	if (f->msg.cls == STUN_ERROR)
		assert_int_equal(stun_msg_get_error(&f->msg, &code, NULL, NULL), 0);
	else
		assert_int_equal(f->msg.cls, STUN_SUCCESS);
	if (code == 0 && f->msg.method != STUN_BINDING)
		assert_int_equal(stun_msg_check_integrity(&f->msg, f->key, f->key_len), 0);
	return code;
}

/* An unsigned Allocate: 401 with the nonce to use. */
static void challenge(struct fix *f)
{
	struct req r;
	const char *s;
	size_t len;

	req_begin(&r, STUN_ALLOCATE, STUN_REQUEST);
	stun_build_requested_transport(&r.b, 17);
	assert_int_equal(transact(f, &r, false), 401);
	assert_int_equal(stun_msg_get_string(&f->msg, STUN_ATTR_NONCE, &s, &len), 0);
	assert_true(len < sizeof(f->nonce));
	memcpy(f->nonce, s, len);
	f->nonce[len] = 0;
	assert_int_equal(stun_msg_get_string(&f->msg, STUN_ATTR_REALM, &s, &len), 0);
	assert_int_equal(len, strlen(REALM));
}

static int allocate(struct fix *f)
{
	struct req r;

	req_begin(&r, STUN_ALLOCATE, STUN_REQUEST);
	stun_build_requested_transport(&r.b, 17);
	return transact(f, &r, true);
}

static struct wk_alloc *allocated(struct fix *f)
{
	struct sockaddr_storage relay;

	challenge(f);
	assert_int_equal(allocate(f), 0);
	assert_int_equal(stun_msg_get_addr(&f->msg, STUN_ATTR_XOR_RELAYED_ADDRESS, &relay), 0);
	assert_int_equal(relay.ss_family, AF_INET);
	return wk_alloc_find(f->w, f->l, (struct sockaddr *)&f->cli);
}

static int peer_req(struct fix *f, uint16_t method, const struct sockaddr_in *peer, int chan)
{
	struct req r;

	req_begin(&r, method, STUN_REQUEST);
	if (chan >= 0)
		stun_build_channel(&r.b, (uint16_t)chan);
	stun_build_addr(&r.b, STUN_ATTR_XOR_PEER_ADDRESS, (const struct sockaddr *)peer);
	return transact(f, &r, true);
}

static int refresh(struct fix *f, uint32_t lifetime)
{
	struct req r;

	req_begin(&r, STUN_REFRESH, STUN_REQUEST);
	stun_build_lifetime(&r.b, lifetime);
	return transact(f, &r, true);
}

static unsigned n_perms(const struct wk_alloc *a)
{
	unsigned n = 0;

	for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS; i++)
		n += a->rec->perms[i].family != 0;
	return n;
}

/* What reached the peer: the payload's length, -1 for nothing. */
static ssize_t peer_got(struct fix *f, uint8_t *buf, size_t cap, struct sockaddr_in *from)
{
	socklen_t fl = sizeof(*from);

	return recvfrom(f->peer_fd, buf, cap, MSG_DONTWAIT, (struct sockaddr *)from, &fl);
}

/* ---- Allocate and Refresh ---------------------------------------------------------------- */

/* No credentials: 401 with REALM and NONCE, no state; a signed Allocate then creates one
 * allocation (record LIVE, counted); a second Allocate on the 5-tuple is 437. */
static void test_allocate(void **state)
{
	struct fix *f = *state;
	struct wk_alloc *a;
	uint32_t life;

	challenge(f);
	assert_null(wk_alloc_find(f->w, f->l, (struct sockaddr *)&f->cli));
	assert_int_equal(ctr(f, SHM_CTR_AUTH_FAIL_MISSING), 1);
	assert_int_equal(ctr(f, SHM_CTR_ALLOCS_ACTIVE), 0);
	assert_int_equal(allocate(f), 0);
	assert_int_equal(stun_msg_get_lifetime(&f->msg, &life), 0);
	assert_true(life > 0);
	a = wk_alloc_find(f->w, f->l, (struct sockaddr *)&f->cli);
	assert_non_null(a);
	assert_int_equal(SHM_ALLOC_WORD_STATE(a->rec->state), SHM_ALLOC_LIVE);
	assert_int_equal(f->w->n_allocs, 1);
	assert_int_equal(ctr(f, SHM_CTR_ALLOCS_CREATED), 1);
	assert_int_equal(ctr(f, SHM_CTR_ALLOCS_ACTIVE), 1);
	assert_int_equal(allocate(f), 437);
	assert_int_equal(f->w->n_allocs, 1);
}

/* A wrong key is refused (401, counted as bad_mac) and allocates nothing. */
static void test_allocate_bad_key(void **state)
{
	struct fix *f = *state;

	challenge(f);
	f->key[0] ^= 1;
	assert_int_equal(allocate(f), 401);
	f->key[0] ^= 1;
	assert_int_equal(ctr(f, SHM_CTR_AUTH_FAIL_BAD_MAC), 1);
	assert_null(wk_alloc_find(f->w, f->l, (struct sockaddr *)&f->cli));
}

/* The answer's NONCE: a fresh one, never the one the request carried. */
static void fresh_nonce(struct fix *f, const char *sent, char *out, size_t cap)
{
	const char *s;
	size_t len;

	assert_int_equal(stun_msg_get_string(&f->msg, STUN_ATTR_NONCE, &s, &len), 0);
	assert_true(len < cap);
	memcpy(out, s, len);
	out[len] = 0;
	assert_string_not_equal(out, sent);
}

/* RFC 8489 9.2.4, the nonce before the credentials: a nonce that is not ours (here one
 * of ours with a character changed: forged, or another address's) is answered 438 with a
 * fresh nonce, the right key and a wrong one alike, without looking at the credentials or
 * the failed-auth budget. 3 times limits.auth_fail_prefix (10) wrong keys under it, as an
 * off-path attacker spoofing the client's UDP address can send, charge nothing: the
 * address still allocates with our nonce, and a wrong key under our nonce is then a
 * counted failure as before. The same for a request on an existing allocation. On the
 * code before, a wrong key under a foreign nonce was charged to the address and answered
 * 401, and past the budget not at all. */
static void test_foreign_nonce_first(void **state)
{
	struct fix *f = *state;
	char ours[STUN_NONCE_MAX_LEN + 1], fresh[STUN_NONCE_MAX_LEN + 1];
	struct wk_authfail af;

	challenge(f);
	snprintf(ours, sizeof(ours), "%s", f->nonce);
	f->nonce[3] ^= 1;
	for (int i = 0; i < 31; i++) {
		f->key[0] ^= i < 30 ? 1 : 0;	/* 30 wrong keys, then the right one */
		assert_int_equal(allocate(f), 438);
		f->key[0] ^= i < 30 ? 1 : 0;
		fresh_nonce(f, f->nonce, fresh, sizeof(fresh));
	}
	assert_int_equal(ctr(f, SHM_CTR_AUTH_FAIL_STALE_NONCE), 31);
	assert_int_equal(ctr(f, SHM_CTR_AUTH_FAIL_BAD_MAC), 0);
	assert_int_equal(ctr(f, SHM_CTR_AUTH_THROTTLED_PREFIX), 0);
	assert_int_equal(ctr(f, SHM_CTR_AUTH_THROTTLED_USER), 0);
	wk_authfail_keys(f->w, &f->ep, REALM, strlen(REALM), USER, strlen(USER), &af);
	assert_int_equal(shm_authfail_tat(f->shm, af.prefix), 0);
	assert_int_equal(shm_authfail_tat(f->shm, af.user), 0);
	/* Our nonce: a wrong key is a counted failure (401), the right one allocates. */
	snprintf(f->nonce, sizeof(f->nonce), "%s", ours);
	f->key[0] ^= 1;
	assert_int_equal(allocate(f), 401);
	f->key[0] ^= 1;
	assert_int_equal(ctr(f, SHM_CTR_AUTH_FAIL_BAD_MAC), 1);
	assert_int_not_equal(shm_authfail_tat(f->shm, af.prefix), 0);
	assert_int_equal(allocate(f), 0);
	/* On the allocation: 438 for the wrong key and the right one, then the fresh nonce
	 * refreshes. */
	f->nonce[3] ^= 1;
	f->key[0] ^= 1;
	assert_int_equal(refresh(f, 600), 438);
	f->key[0] ^= 1;
	assert_int_equal(refresh(f, 600), 438);
	fresh_nonce(f, f->nonce, fresh, sizeof(fresh));
	snprintf(f->nonce, sizeof(f->nonce), "%s", fresh);
	assert_int_equal(refresh(f, 600), 0);
	assert_int_equal(ctr(f, SHM_CTR_AUTH_FAIL_STALE_NONCE), 33);
	assert_int_equal(ctr(f, SHM_CTR_AUTH_FAIL_BAD_MAC), 1);
}

/* Refresh extends the lifetime; Refresh 0 ends the allocation: gone from the table, its
 * record freed, the gauge down, the end counted. A Refresh without allocation is 437. */
static void test_refresh(void **state)
{
	struct fix *f = *state;
	uint32_t life;

	assert_non_null(allocated(f));
	assert_int_equal(refresh(f, 700), 0);
	assert_int_equal(stun_msg_get_lifetime(&f->msg, &life), 0);
	assert_int_equal(life, 700);
	assert_int_equal(refresh(f, 0), 0);
	assert_null(wk_alloc_find(f->w, f->l, (struct sockaddr *)&f->cli));
	assert_int_equal(f->w->n_allocs, 0);
	assert_int_equal(ctr(f, SHM_CTR_ALLOCS_ACTIVE), 0);
	assert_int_equal(ctr(f, SHM_CTR_ALLOCS_ENDED), 1);
	assert_int_equal(refresh(f, 600), 437);
}

/* ---- CreatePermission, ChannelBind -------------------------------------------------------- */

/* A permission for a routed peer is written to the shared record; a peer outside the
 * routes is 403 and writes nothing; past limits.max_permissions (2) a new peer is 508
 * while an existing one is still refreshed. */
static void test_create_permission(void **state)
{
	struct fix *f = *state;
	struct wk_alloc *a = allocated(f);
	struct sockaddr_in out = addr_of("10.0.0.1", 5000), p2 = addr_of("127.0.0.2", 5000);
	struct sockaddr_in p3 = addr_of("127.0.0.3", 5000);

	assert_non_null(a);
	assert_int_equal(peer_req(f, STUN_CREATE_PERMISSION, &f->peer, -1), 0);
	assert_int_equal(n_perms(a), 1);
	assert_int_equal(peer_req(f, STUN_CREATE_PERMISSION, &out, -1), 403);
	assert_int_equal(n_perms(a), 1);
	assert_int_equal(peer_req(f, STUN_CREATE_PERMISSION, &p2, -1), 0);
	assert_int_equal(peer_req(f, STUN_CREATE_PERMISSION, &p3, -1), 508);
	assert_int_equal(n_perms(a), 2);
	assert_int_equal(peer_req(f, STUN_CREATE_PERMISSION, &f->peer, -1), 0);
}

/* ChannelBind writes the channel and a permission; a number outside 0x4000-0x4FFF is 400;
 * the channel bound to another peer, or the peer to another channel, is 400; rebinding
 * the same pair refreshes it. */
static void test_channel_bind(void **state)
{
	struct fix *f = *state;
	struct wk_alloc *a = allocated(f);
	struct sockaddr_in p2 = addr_of("127.0.0.2", 5000);

	assert_non_null(a);
	assert_int_equal(peer_req(f, STUN_CHANNEL_BIND, &f->peer, 0x3FFF), 400);
	assert_int_equal(peer_req(f, STUN_CHANNEL_BIND, &f->peer, CHAN), 0);
	assert_non_null(wk_alloc_chan_by_num(a, CHAN, mono_ns()));
	assert_int_equal(n_perms(a), 1);
	assert_int_equal(peer_req(f, STUN_CHANNEL_BIND, &p2, CHAN), 400);
	assert_int_equal(peer_req(f, STUN_CHANNEL_BIND, &f->peer, CHAN + 1), 400);
	assert_int_equal(peer_req(f, STUN_CHANNEL_BIND, &f->peer, CHAN), 0);
	assert_null(wk_alloc_chan_by_num(a, CHAN + 1, mono_ns()));
}

/* ---- Send and ChannelData, and back ------------------------------------------------------- */

static void send_ind(struct fix *f, const struct sockaddr_in *peer, const char *payload)
{
	struct req r;

	req_begin(&r, STUN_SEND, STUN_INDICATION);
	stun_build_addr(&r.b, STUN_ATTR_XOR_PEER_ADDRESS, (const struct sockaddr *)peer);
	stun_build_attr(&r.b, STUN_ATTR_DATA, payload, strlen(payload));
	send_req(f, &r, false);
}

/* A Send indication reaches the peer only with a permission, from the relayed address; the
 * peer's answer comes back to the client as a Data indication. */
static void test_send_indication(void **state)
{
	struct fix *f = *state;
	struct wk_alloc *a = allocated(f);
	struct sockaddr_storage relay, from_peer;
	struct sockaddr_in from;
	uint8_t buf[256];
	const uint8_t *data;
	size_t n, dlen;

	assert_non_null(a);
	assert_int_equal(stun_msg_get_addr(&f->msg, STUN_ATTR_XOR_RELAYED_ADDRESS, &relay), 0);
	send_ind(f, &f->peer, "no permission");
	assert_true(peer_got(f, buf, sizeof(buf), &from) < 0);
	assert_int_equal(ctr(f, SHM_CTR_PEER_PKTS_OUT), 0);
	assert_int_equal(peer_req(f, STUN_CREATE_PERMISSION, &f->peer, -1), 0);
	send_ind(f, &f->peer, "hello");
	assert_int_equal(peer_got(f, buf, sizeof(buf), &from), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_true(wk_addr_equal((struct sockaddr *)&from, (struct sockaddr *)&relay));
	assert_int_equal(ctr(f, SHM_CTR_PEER_PKTS_OUT), 1);
	assert_int_equal(sendto(f->peer_fd, "back", 4, 0, (struct sockaddr *)&from, sizeof(from)), 4);
	ev_run(f->w->loop, EVRUN_NOWAIT);
	n = recv_cli(f);
	assert_true(n > 0);
	assert_int_equal(stun_msg_parse(&f->msg, f->resp, n), 0);
	assert_int_equal(f->msg.cls, STUN_INDICATION);
	assert_int_equal(f->msg.method, STUN_DATA);
	assert_int_equal(stun_msg_get_raw(&f->msg, STUN_ATTR_DATA, &data, &dlen), 0);
	assert_int_equal(dlen, 4);
	assert_memory_equal(data, "back", 4);
	assert_int_equal(stun_msg_get_peer(&f->msg, 0, &from_peer), 0);
	assert_true(wk_addr_equal((struct sockaddr *)&from_peer, (struct sockaddr *)&f->peer));
	assert_int_equal(ctr(f, SHM_CTR_PEER_PKTS_IN), 1);
}

/* ChannelData on a bound channel reaches the peer; on an unbound one nothing does; the
 * peer's answer comes back as ChannelData on the channel. */
static void test_channel_data(void **state)
{
	struct fix *f = *state;
	struct wk_alloc *a = allocated(f);
	uint8_t cd[8] = { CHAN >> 8, CHAN & 0xff, 0, 4, 'p', 'i', 'n', 'g' };
	struct sockaddr_in from;
	uint8_t buf[256];
	size_t n;

	assert_non_null(a);
	deliver(f, cd, sizeof(cd));
	assert_true(peer_got(f, buf, sizeof(buf), &from) < 0);
	assert_int_equal(peer_req(f, STUN_CHANNEL_BIND, &f->peer, CHAN), 0);
	deliver(f, cd, sizeof(cd));
	assert_int_equal(peer_got(f, buf, sizeof(buf), &from), 4);
	assert_memory_equal(buf, "ping", 4);
	assert_int_equal(sendto(f->peer_fd, "pong", 4, 0, (struct sockaddr *)&from, sizeof(from)), 4);
	ev_run(f->w->loop, EVRUN_NOWAIT);
	n = recv_cli(f);
	assert_int_equal(n, 8);
	assert_int_equal(f->resp[0] << 8 | f->resp[1], CHAN);
	assert_int_equal(f->resp[2] << 8 | f->resp[3], 4);
	assert_memory_equal(f->resp + 4, "pong", 4);
}

/* ---- the allocation code's lifetime -------------------------------------------------------- */

/* An allocation whose deadline passed is ended by its timer: the table, the record, the
 * relay port and the gauge are given back (teardown checks them), and the end is
 * counted. The deadline is moved into the past rather than the clock forward. */
static void test_expiry(void **state)
{
	struct fix *f = *state;
	struct wk_alloc *a = allocated(f);
	uint64_t now_ms;

	assert_non_null(a);
	a->expires_ms = 1;
	shm_alloc_begin_write(a->rec);
	a->rec->expires_ns = 1;
	shm_alloc_end_write(a->rec);
	wk_alloc_rearm(f->w, a);
	now_ms = mono_ms();
	if (now_ms < (f->w->wheel.tick + 1) * WHEEL_TICK_MS)
		now_ms = (f->w->wheel.tick + 1) * WHEEL_TICK_MS;
	wheel_advance(&f->w->wheel, now_ms, f->w);
	assert_null(wk_alloc_find(f->w, f->l, (struct sockaddr *)&f->cli));
	assert_int_equal(ctr(f, SHM_CTR_ALLOCS_ENDED), 1);
	assert_int_equal(ctr(f, SHM_CTR_ALLOCS_ACTIVE), 0);
	assert_int_equal(refresh(f, 600), 437);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_allocate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_allocate_bad_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_foreign_nonce_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refresh, setup, teardown),
		cmocka_unit_test_setup_teardown(test_create_permission, setup, teardown),
		cmocka_unit_test_setup_teardown(test_channel_bind, setup, teardown),
		cmocka_unit_test_setup_teardown(test_send_indication, setup, teardown),
		cmocka_unit_test_setup_teardown(test_channel_data, setup, teardown),
		cmocka_unit_test_setup_teardown(test_expiry, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
