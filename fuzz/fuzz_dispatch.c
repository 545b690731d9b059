/* libFuzzer target: client datagrams through the worker's TURN dispatcher (wk_turn_input)
 * with the real auth, allocation, permission, channel and relay code behind it.
 *
 * Set up once: a shm segment, a snapshot built from the embedded config below, and a
 * struct worker with three UDP listeners (static users, TURN REST secret, auth none) on
 * real loopback sockets, relay ports 59000-59999 on 127.0.0.1 (and ::1 when lo has it):
 * clear of the windows the integration and interop tests use (a port taken by somebody
 * else is skipped).
 * Client sockets on 127.0.0.1-4 receive the responses, which must all parse. A peer socket
 * on 127.0.0.9:40000 echoes what a relay sends it, and the loop runs once after every
 * message, so peer data comes back through the relay sockets (wk_relay_cb) to the client
 * as a Data indication or ChannelData.
 *
 * Input: a sequence of records [sel][flags][len hi][len lo][len bytes]:
 *   sel bits 0-1 client, bits 2-3 listener (mod 3), bits 4-7 time jump size (flag 6);
 *   flags: 0 sign (USERNAME, REALM, NONCE issued for this client, MESSAGE-INTEGRITY with
 *   the listener's key for alice/bob; the header length is fixed up), 1 add FINGERPRINT,
 *   2 MESSAGE-INTEGRITY-SHA256 instead, 3 PASSWORD-ALGORITHM(S) SHA-256 key, 4 user bob,
 *   5 no USERNAME/REALM/NONCE (the input brings its own), 6 time jump after the message
 *   (every deadline moved into the past, expiry timers run), 7 deliver twice; an empty
 *   record with flag 7 toggles drain mode instead.
 * A signed message's RESERVATION-TOKEN of eight zero bytes becomes the last token the
 * worker handed out, so the fuzzer can redeem reservations.
 * Every allocation and reservation the input made is destroyed afterwards, and the harness
 * checks that nothing leaked: counters, shm records, relay ports, timers. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "conf/conf.h"
#include "conf/snapshot.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "stun/stun.h"
#include "stun/stun_auth.h"
#include "worker/lifecycle.h"
#include "worker/relay.h"
#include "worker/table.h"
#include "worker/transport.h"
#include "worker/turn.h"
#include "worker/wk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_CLIENTS 4
#define FZ_LISTENERS 3
#define FZ_MAX_MSGS 64
#define FZ_PEER_IP 0x7f000009u	/* 127.0.0.9 */
#define FZ_PEER_PORT 40000
#define FZ_REST_EXPIRY "4102444800" /* 2100-01-01: REST credentials that never expire */

static const char fz_yaml[] =
	"version: v1\n"
	"admin:\n  loglevel: \"all:ERROR\"\n  relay_port_min: 59000\n  relay_port_max: 59999\n"
	"  alternate_server: \"127.0.0.1:3999\"\n"
	"auth:\n  type: static\n  realm: fuzz.example\n"
	"  credentials: {username: alice, password: alice-pw}\n"
	"  users:\n    - {username: bob, password: bob-pw}\n"
	"limits:\n  max_allocations: 64\n  user_quota: 3\n  total_quota: 6\n"
	"  max_permissions: 4\n  max_channels: 4\n"
	/* Off: the per-prefix limit would drop most error responses after its burst, by
	 * wall-clock time, making coverage and the replay's counts depend on timing. */
	"  unauth_rate: 0\n"
	"listeners:\n"
	"  - {name: static, address: 127.0.0.1, port: 3478, routes: [loop]}\n"
	"  - name: rest\n    address: 127.0.0.1\n    port: 3479\n    routes: [loop]\n"
	"    auth: {type: ephemeral, realm: rest.example, credentials: {secret: fuzz-secret}}\n"
	"  - name: open\n    address: 127.0.0.1\n    port: 3480\n    routes: [loop]\n"
	"    auth: {type: none}\n"
	"clusters:\n  - {name: loop, endpoints: [\"127.0.0.0/8\", \"::1\"]}\n";

static const char *const fz_names[FZ_LISTENERS] = { "static", "rest", "open" };
static const uint32_t fz_jumps[16] = { 1,   2,   30,  31,   60,   299,  300,  301,
				       599, 600, 601, 1800, 3599, 3600, 3601, 86400 };

/* Successful responses seen by the clients, per method (the replay checks them). */
struct fz_seen {
	unsigned long alloc_ok, refresh_ok, perm_ok, chan_ok, binding_ok, errors;
	unsigned long data_ind, chandata;	/* peer data relayed back to a client */
};

struct fz {
	struct shm *shm;
	struct conf *cfg;
	void *blob;
	size_t blob_len;
	const struct snap *snap;
	struct worker_heritage h;
	struct worker *w;
	int cli_fd[FZ_CLIENTS];
	struct sockaddr_in cli[FZ_CLIENTS];
	struct sockaddr_in lst[FZ_LISTENERS];	/* where responses come from */
	int peer_fd;			/* the echoing peer, or -1 */
	struct fz_seen seen;
	uint8_t token[8];		/* last RESERVATION-TOKEN in a response */
	bool got_error;			/* an error response came since the last delivery */
	bool trace;			/* FUZZ_DISPATCH_TRACE set: print every response */
};

static struct fz *fz_state;

static void fz_die(const char *what)
{
	fprintf(stderr, "fuzz_dispatch: %s\n", what);
	abort();
}

static int fz_udp_socket(uint32_t ip, struct sockaddr_in *bound)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t sl = sizeof(*bound);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	a.sin_addr.s_addr = htonl(ip);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 && ip != INADDR_LOOPBACK) {
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);	/* lo without 127/8 routing */
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
			close(fd);
			return -1;
		}
	}
	if (getsockname(fd, (struct sockaddr *)bound, &sl) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The echoing peer at FZ_PEER_IP:FZ_PEER_PORT; -1 when the port is taken (then no data
 * comes back from peers, which only costs coverage). */
static int fz_peer_socket(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(FZ_PEER_PORT) };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(FZ_PEER_IP);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* A listener as the master would hand it over, started like wk_listener_add does. */
static void fz_add_listener(struct worker *w, const char *name, struct sockaddr_in *bound)
{
	struct wk_listener *l = calloc(1, sizeof(*l));

	if (!l)
		fz_die("out of memory");
	l->w = w;
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->proto = WORKER_PROTO_UDP;
	l->fd = fz_udp_socket(INADDR_LOOPBACK, bound);
	l->family = AF_INET;
	l->active = true;
	if (l->fd < 0 || wk_udp_start(w, l) < 0)
		fz_die("cannot open a listener socket");
	w->ls[w->n_ls++] = l;
}

static void fz_init_snapshot(struct fz *f)
{
	struct conf_diags d = { 0 };
	struct conf_load_opts o = { .now = 1700000000 };
	struct snap_build_params bp = { .generation = 1 };

	for (size_t i = 0; i < sizeof(bp.nonce_key); i++)
		bp.nonce_key[i] = (uint8_t)(0x5a ^ i);
	if (conf_load_string(fz_yaml, sizeof(fz_yaml) - 1, "fuzz_dispatch.yaml", &o, &f->cfg, &d) <
	    0) {
		conf_diags_print(&d, stderr);
		fz_die("embedded config rejected");
	}
	conf_diags_free(&d);
	if (snap_build(f->cfg, &bp, &f->blob, &f->blob_len) < 0 ||
	    snap_open(f->blob, f->blob_len, &f->snap) < 0)
		fz_die("cannot build the snapshot");
}

static struct fz *fz_init(void)
{
	struct shm_config sc = {
		.n_slots = 1, .snap_count = 2, .snap_size = 65536, .alloc_cap = 64
	};
	struct fz *f = calloc(1, sizeof(*f));
	struct worker *w;

	if (!f)
		fz_die("out of memory");
	log_set_spec("all:ERROR");
	f->trace = getenv("FUZZ_DISPATCH_TRACE") != NULL;
	fz_init_snapshot(f);
	if (shm_create(&sc, "fuzz-dispatch", &f->shm) < 0)
		fz_die("cannot create the shm segment");
	f->h = (struct worker_heritage){
		.slot = 0, .slot_count = 1, .shm = f->shm, .ctl_fd = -1, .offload = { -1, -1 }
	};
	w = f->w = calloc(1, sizeof(*w));
	if (!w)
		fz_die("out of memory");
	w->magic = WK_MAGIC;
	w->h = &f->h;
	w->shm = f->shm;
	w->slot = 0;
	w->ctr = shm_slot_counters(f->shm, 0);
	w->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
	if (!w->ctr || wk_tables_init(w) < 0 || !w->loop)
		fz_die("worker setup failed");
	wk_ctlq_init(w); /* as worker_run does: no queue until a frame waits */
	wheel_init(&w->wheel, mono_ms());
	for (int i = 0; i < FZ_LISTENERS; i++)
		fz_add_listener(w, fz_names[i], &f->lst[i]);
	wk_snap_use(w, f->snap);
	for (int i = 0; i < FZ_LISTENERS; i++)
		if (!w->ls[i]->snap_ok)
			fz_die("listener not resolved in the snapshot");
	for (int i = 0; i < FZ_CLIENTS; i++) {
		f->cli_fd[i] = fz_udp_socket(INADDR_LOOPBACK + (uint32_t)i, &f->cli[i]);
		if (f->cli_fd[i] < 0)
			fz_die("cannot open a client socket");
	}
	f->peer_fd = fz_peer_socket();
	return f;
}

/* The listener's long-term key for user under the PASSWORD-ALGORITHM alg. */
static int fz_key(struct fz *f, const struct wk_listener *l, const char *user, uint16_t alg,
		  uint8_t key[STUN_KEY_MAX], size_t *key_len)
{
	struct snap_auth au;
	const uint8_t *k;
	struct snap_secret sec[SNAP_MAX_SECRETS];
	char pw[STUN_REST_PASSWORD_LEN + 1];
	int rc;

	if (snap_auth_get(f->snap, l->sl.auth_idx, &au) < 0)
		return -1;
	if (au.type == CONF_AUTH_STATIC) {
		if (snap_auth_user_key(f->snap, l->sl.auth_idx, user, strlen(user),
				       alg == STUN_PWALG_SHA256 ? SNAP_KEY_SHA256 : SNAP_KEY_MD5,
				       &k, key_len) < 0)
			return -1;
		memcpy(key, k, *key_len);
		return 0;
	}
	if (au.type != CONF_AUTH_EPHEMERAL ||
	    snap_auth_secrets(f->snap, l->sl.auth_idx, wk_unix_now(), sec) == 0)
		return -1;
	rc = stun_rest_password(sec[0].secret, sec[0].len, user, strlen(user), pw, sizeof(pw));
	if (rc == 0)
		rc = stun_auth_key(alg, user, strlen(user), au.realm, au.realm_len, pw, strlen(pw),
				   key, key_len);
	explicit_bzero(pw, sizeof(pw));
	return rc;
}

/* Puts the last issued reservation token into a zeroed RESERVATION-TOKEN attribute. */
static void fz_put_token(const struct fz *f, uint8_t *buf, size_t len)
{
	static const uint8_t zero[8];
	size_t off = STUN_HEADER_LEN;

	while (off + 4 <= len) {
		uint16_t type = (uint16_t)(buf[off] << 8 | buf[off + 1]);
		size_t alen = (size_t)(buf[off + 2] << 8 | buf[off + 3]);

		if (type == STUN_ATTR_RESERVATION_TOKEN && alen == 8 && off + 12 <= len &&
		    memcmp(buf + off + 4, zero, 8) == 0)
			memcpy(buf + off + 4, f->token, 8);
		off += 4 + ((alen + 3) & ~(size_t)3);
	}
}

/* Appends credentials and MESSAGE-INTEGRITY(-SHA256) (flags bits 0, 2-5) and FINGERPRINT
 * (bit 1) to the message in buf[0..len), as a client would. Returns the new length, or
 * len unchanged when the message is too short to be signed. */
static size_t fz_sign(struct fz *f, const struct wk_ep *ep, uint8_t flags, uint8_t *buf, size_t len,
		      size_t cap)
{
	static const uint16_t algs[] = { STUN_PWALG_MD5, STUN_PWALG_SHA256 };
	struct stun_builder b = { .magic = STUN_BUILDER_MAGIC, .buf = buf, .cap = cap };
	struct snap_auth au;
	struct shm_addr bind;
	char user[64], realm[STUN_MAX_REALM_LEN + 1], nonce[STUN_NONCE_MAX_LEN + 1];
	uint16_t alg = flags & 0x08 ? STUN_PWALG_SHA256 : STUN_PWALG_MD5;
	uint8_t key[STUN_KEY_MAX];
	size_t key_len = 0, out;

	if (len < STUN_HEADER_LEN || len > cap - 512)
		return len;
	while (len & 3)
		buf[len++] = 0;
	b.len = len;
	fz_put_token(f, buf, len);
	if ((flags & 0x01) && snap_auth_get(f->snap, ep->l->sl.auth_idx, &au) == 0) {
		const char *who = flags & 0x10 ? "bob" : "alice";

		if (au.type == CONF_AUTH_EPHEMERAL)
			snprintf(user, sizeof(user), FZ_REST_EXPIRY ":%s", who);
		else
			snprintf(user, sizeof(user), "%s", who);
		snprintf(realm, sizeof(realm), "%.*s", (int)au.realm_len, au.realm);
		wk_addr_to_shm(ep->addr, &bind);
		if (stun_nonce_make(snap_nonce_key(f->snap), SNAP_NONCE_KEY_LEN,
				    (uint64_t)wk_unix_now(), STUN_NONCE_FEAT_PASSWORD_ALGORITHMS,
				    &bind, sizeof(bind), nonce, sizeof(nonce), NULL) < 0)
			return len;
		if (!(flags & 0x20)) {
			stun_build_string(&b, STUN_ATTR_USERNAME, user);
			stun_build_string(&b, STUN_ATTR_REALM, realm);
			stun_build_string(&b, STUN_ATTR_NONCE, nonce);
			if (alg == STUN_PWALG_SHA256) {
				stun_build_password_algorithms(&b, algs, 2);
				stun_build_password_algorithm(&b, alg);
			}
		}
		if (fz_key(f, ep->l, user, alg, key, &key_len) < 0)
			key_len = 0;
		if (key_len && (flags & 0x04))
			stun_build_integrity_sha256(&b, key, key_len);
		else if (key_len)
			stun_build_integrity(&b, key, key_len);
		explicit_bzero(key, sizeof(key));
	}
	if (flags & 0x02)
		stun_build_fingerprint(&b);
	if (stun_build_finish(&b, &out) < 0)
		return len;
	return out;
}

static void fz_check_response(struct fz *f, const uint8_t *buf, size_t len)
{
	struct stun_msg m;
	const uint8_t *tok;
	size_t tok_len;

	if (len >= 1 && (buf[0] & 0xc0) == 0x40) {
		/* Peer data on a channel: over UDP exactly header + data, no padding. */
		if (len < 4 || (size_t)(buf[2] << 8 | buf[3]) != len - 4)
			fz_die("ChannelData to a client is malformed");
		f->seen.chandata++;
		return;
	}
	/* The server's own messages must be what its parser accepts. */
	if (stun_msg_parse(&m, buf, len) < 0)
		fz_die("a response does not parse");
	if (m.fp_off && stun_msg_check_fingerprint(&m) < 0)
		fz_die("a response has a bad FINGERPRINT");
	if (f->trace) {
		int code = 0;
		const char *reason = NULL;
		size_t rlen = 0;

		stun_msg_get_error(&m, &code, &reason, &rlen);
		fprintf(stderr, "fuzz_dispatch: %s %s %d %.*s\n", stun_method_name(m.method),
			stun_class_name(m.cls), code, (int)rlen, reason ? reason : "");
	}
	if (m.cls == STUN_ERROR) {
		f->got_error = true;
		f->seen.errors++;
		return;
	}
	if (m.cls == STUN_INDICATION && m.method == STUN_DATA)
		f->seen.data_ind++;
	if (m.cls != STUN_SUCCESS)
		return;
	if (stun_msg_get_raw(&m, STUN_ATTR_RESERVATION_TOKEN, &tok, &tok_len) == 0 &&
	    tok_len == sizeof(f->token))
		memcpy(f->token, tok, sizeof(f->token));
	switch (m.method) {
	case STUN_BINDING:
		f->seen.binding_ok++;
		break;
	case STUN_ALLOCATE:
		f->seen.alloc_ok++;
		break;
	case STUN_REFRESH:
		f->seen.refresh_ok++;
		break;
	case STUN_CREATE_PERMISSION:
		f->seen.perm_ok++;
		break;
	case STUN_CHANNEL_BIND:
		f->seen.chan_ok++;
		break;
	default:
		break;
	}
}

/* Reads what reached the clients (responses from the listeners are checked; data a relay
 * sent to a client's address is not a response) and empties the listener sockets. */
static void fz_drain(struct fz *f)
{
	uint8_t buf[4096];

	for (int i = 0; i < FZ_CLIENTS; i++)
		for (int n = 0; n < 64; n++) {
			struct sockaddr_in from;
			socklen_t fl = sizeof(from);
			ssize_t r = recvfrom(f->cli_fd[i], buf, sizeof(buf),
					     MSG_DONTWAIT | MSG_TRUNC, (struct sockaddr *)&from,
					     &fl);
			bool from_listener = false;

			if (r < 0)
				break;
			for (int k = 0; k < FZ_LISTENERS; k++)
				if (wk_addr_equal((struct sockaddr *)&f->lst[k],
						  (struct sockaddr *)&from))
					from_listener = true;
			if (from_listener && (size_t)r > sizeof(buf))
				fz_die("a response is larger than any the worker can build");
			if (from_listener)
				fz_check_response(f, buf, (size_t)r);
		}
	for (size_t k = 0; k < f->w->n_ls; k++)
		for (int n = 0; n < 64; n++)
			if (recv(f->w->ls[k]->fd, buf, sizeof(buf), MSG_DONTWAIT) < 0)
				break;
}

static uint64_t fz_sub(uint64_t v, uint64_t d)
{
	return v > d ? v - d : 1;
}

/* Moves every deadline secs into the past (instead of moving the clock, which the worker
 * reads itself) and runs the expiry timers that are due. */
static void fz_time_jump(struct worker *w, uint32_t secs)
{
	uint64_t d_ms = (uint64_t)secs * 1000u, d_ns = d_ms * 1000000u, now_ms;

	struct wk_alloc *a;

	LIST_FOREACH(a, &w->allocs, link) {
		struct shm_alloc *rec = a->rec;

		a->expires_ms = fz_sub(a->expires_ms, d_ms);
		shm_alloc_begin_write(rec);
		rec->expires_ns = fz_sub(rec->expires_ns, d_ns);
		for (unsigned i = 0; i < SHM_ALLOC_MAX_PERMS; i++)
			if (rec->perms[i].family)
				rec->perms[i].expires_ns = fz_sub(rec->perms[i].expires_ns, d_ns);
		for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++)
			if (rec->chans[i].number)
				rec->chans[i].expires_ns = fz_sub(rec->chans[i].expires_ns, d_ns);
		shm_alloc_end_write(rec);
		wk_alloc_rearm(w, a);
	}
	/* Reservations live in the shared pool with their own expiry: not moved. */
	/* A deadline now in the past was filed in the slot after the wheel's last tick: run
	 * that one, even when an earlier jump already took the wheel past the real time. */
	now_ms = mono_ms();
	if (now_ms < (w->wheel.tick + 1) * WHEEL_TICK_MS)
		now_ms = (w->wheel.tick + 1) * WHEEL_TICK_MS;
	wheel_advance(&w->wheel, now_ms, w);
}

/* Ends everything the input created and checks that nothing was left behind. */
static void fz_reset(struct fz *f)
{
	struct worker *w = f->w;
	struct shm_counters c;
	uint32_t cursor = 0, idx;

	while (!LIST_EMPTY(&w->allocs))
		wk_alloc_destroy(w, LIST_FIRST(&w->allocs), "fuzz input done");
	shm_ppool_resv_clear(f->shm);
	if (w->n_allocs != 0 || w->wheel.armed != 0)
		fz_die("allocations or timers left after destroying them all");
	if (shm_ppool_held(f->shm, mono_ns(), NULL) != 0)
		fz_die("relay ports still booked after every allocation ended");
	if (shm_alloc_next_live(f->shm, &cursor, &idx) == 0)
		fz_die("a LIVE shm record outlived its allocation");
	if (shm_counters_read(f->shm, 0, &c) < 0 || c.v[SHM_CTR_ALLOCS_ACTIVE] != 0)
		fz_die("ALLOCS_ACTIVE is not 0 with no allocation");
	for (int n = 0; f->peer_fd >= 0 && n < 64; n++)
		if (recv(f->peer_fd, f->w->rx[0], WK_DGRAM_MAX, MSG_DONTWAIT) < 0)
			break;
	wheel_init(&w->wheel, mono_ms());
	w->draining = false;
	memset(f->token, 0, sizeof(f->token));
}

/* The peer sends back what it got, to where it came from (a relay socket). */
static void fz_echo(struct fz *f)
{
	uint8_t buf[2048];

	for (int n = 0; f->peer_fd >= 0 && n < 16; n++) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t r = recvfrom(f->peer_fd, buf, sizeof(buf), MSG_DONTWAIT,
				     (struct sockaddr *)&from, &fl);

		if (r < 0)
			break;
		sendto(f->peer_fd, buf, (size_t)r, MSG_DONTWAIT, (struct sockaddr *)&from, fl);
	}
}

/* One datagram through the dispatcher. A request answered with an error must leave the
 * client's allocation as it was (RFC 8656: a failed request changes no state). */
static void fz_input(struct fz *f, const struct wk_ep *ep, uint8_t *buf, size_t len)
{
	struct worker *w = f->w;
	struct wk_alloc *a = wk_alloc_find(w, ep->l, ep->addr);
	struct shm_perm perms[SHM_ALLOC_MAX_PERMS];
	struct shm_chan chans[SHM_ALLOC_MAX_CHANS];
	uint32_t idx = a ? a->rec_idx : 0;

	if (a) {
		memcpy(perms, a->rec->perms, sizeof(perms));
		memcpy(chans, a->rec->chans, sizeof(chans));
	}
	f->got_error = false;
	wk_turn_input(w, ep, buf, len);
	fz_echo(f);
	ev_run(w->loop, EVRUN_NOWAIT);	/* relay sockets (and listeners) with data */
	fz_drain(f);	/* loopback: responses and relayed data are already queued */
	if (a && f->got_error && wk_alloc_find(w, ep->l, ep->addr) == a && a->rec_idx == idx &&
	    (memcmp(perms, a->rec->perms, sizeof(perms)) != 0 ||
	     memcmp(chans, a->rec->chans, sizeof(chans)) != 0))
		fz_die("a request answered with an error changed permissions or channels");
}

static void fz_deliver(struct fz *f, uint8_t sel, uint8_t flags, const uint8_t *msg, size_t len)
{
	struct worker *w = f->w;
	struct wk_ep ep = { .l = w->ls[((sel >> 2) & 3) % FZ_LISTENERS],
			    .addr = (struct sockaddr *)&f->cli[sel & 3],
			    .addr_len = sizeof(f->cli[0]) };
	size_t cap = len + 512, n;
	uint8_t *buf = malloc(cap), *exact;

	if (!buf)
		return;
	if (len == 0 && (flags & 0x80)) {
		w->draining = !w->draining;	/* what IPC_DRAIN does */
		free(buf);
		return;
	}
	memcpy(buf, msg, len);
	n = flags & 0x03 ? fz_sign(f, &ep, flags, buf, len, cap) : len;
	/* Exact size, so a read past the datagram is caught. Client -> peer datagrams are
	 * grouped as in a UDP listener batch (struct wk_txg): a repeated datagram can join
	 * the first one's group, sent before its buffer goes. */
	exact = malloc(n ? n : 1);
	w->batch_group = true;
	for (int k = 0; exact && k < (flags & 0x80 ? 2 : 1); k++) {
		memcpy(exact, buf, n);
		fz_input(f, &ep, exact, n);
	}
	wk_txg_flush(w);
	w->batch_group = false;
	free(exact);
	free(buf);
	wheel_advance(&w->wheel, mono_ms(), w);
	if (flags & 0x40) {
		size_t before = w->n_allocs;

		fz_time_jump(w, fz_jumps[sel >> 4]);
		if (f->trace)
			fprintf(stderr, "fuzz_dispatch: +%u s: %zu of %zu allocations left\n",
				fz_jumps[sel >> 4], w->n_allocs, before);
	}
}

#ifdef FUZZ_CORPUS
/* Replay build: the checked-in corpus must keep reaching the authenticated paths, so a
 * harness or server change that locks it out fails the test instead of passing quietly. */
static void fz_replay_report(void)
{
	struct fz *f = fz_state;
	struct shm_counters c;

	if (!f || shm_counters_read(f->shm, 0, &c) < 0)
		return;
	printf("dispatch: allocations created %llu, Allocate ok %lu, Refresh ok %lu, "
	       "CreatePermission ok %lu, ChannelBind ok %lu, Binding ok %lu, errors %lu, "
	       "packets to peers %llu, from peers %lu Data indications and %lu ChannelData, "
	       "allocations ended %llu\n",
	       (unsigned long long)c.v[SHM_CTR_ALLOCS_CREATED], f->seen.alloc_ok,
	       f->seen.refresh_ok, f->seen.perm_ok, f->seen.chan_ok, f->seen.binding_ok,
	       f->seen.errors, (unsigned long long)c.v[SHM_CTR_PEER_PKTS_OUT], f->seen.data_ind,
	       f->seen.chandata, (unsigned long long)c.v[SHM_CTR_ALLOCS_ENDED]);
	fflush(stdout);
	if (!c.v[SHM_CTR_ALLOCS_CREATED] || !f->seen.alloc_ok || !f->seen.refresh_ok ||
	    !f->seen.perm_ok || !f->seen.chan_ok || !f->seen.binding_ok ||
	    !c.v[SHM_CTR_PEER_PKTS_OUT] ||
	    (f->peer_fd >= 0 && (!f->seen.data_ind || !f->seen.chandata))) {
		fprintf(stderr, "dispatch: the corpus no longer reaches every TURN method\n");
		_exit(1);
	}
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz *f = fz_state;
	size_t off = 0;

	if (!f) {
		f = fz_state = fz_init();
#ifdef FUZZ_CORPUS
		atexit(fz_replay_report);
#endif
	}
	for (int n = 0; n < FZ_MAX_MSGS && size - off >= 4; n++) {
		uint8_t sel = data[off], flags = data[off + 1];
		size_t len = (size_t)data[off + 2] << 8 | data[off + 3];

		off += 4;
		if (len > size - off)
			len = size - off;
		fz_deliver(f, sel, flags, data + off, len);
		off += len;
	}
	fz_reset(f);
	return 0;
}
