/* Unit tests for the master's pieces that need no running workers: listener sockets and the
 * admin request parser's error paths. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ipc.h"
#include "common/ipcq.h"
#include "common/log.h"
#include "conf/snapshot.h"
#include "master/admin.h"
#include "master/master.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_revoke.h"
#include "shm/shm_state.h"
#include "tests/unit/conn_fix.h"

static int count_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

static void make_listener(struct conf_listener *l, enum conf_proto proto, const char *relay_ip,
			  uint16_t port)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)&l->relay_addr;

	memset(l, 0, sizeof(*l));
	l->name = (char *)"l0";
	l->protocol = proto;
	l->port = port;
	s4->sin_family = AF_INET;
	assert_int_equal(inet_pton(AF_INET, relay_ip, &s4->sin_addr), 1);
}

static uint16_t port_of(int fd)
{
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);

	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
	return ntohs(sin.sin_port);
}

/* Port 0: the first slot's kernel-chosen port is shared by every slot, and a TCP listener
 * can join the same port number. */
static void test_listener_slots_share_port(void **state)
{
	struct conf_listener cl;
	struct mlistener udp, tcp;
	int type = 0, acc = 0;
	socklen_t sl = sizeof(int);

	(void)state;
	/* The kernel picks a free UDP port, which a TCP socket of a test running beside this
	 * one may hold: then try another (bounded), it is not what this test is about. */
	for (int tries = 0;; tries++) {
		int rc;

		make_listener(&cl, CONF_PROTO_TURN_UDP, "127.0.0.1", 0);
		assert_int_equal(listener_open(&cl, 3, &udp), 0);
		make_listener(&cl, CONF_PROTO_TURN_TCP, "127.0.0.1", udp.port);
		rc = listener_open(&cl, 2, &tcp);
		if (rc != -EADDRINUSE || tries == 20) {
			assert_int_equal(rc, 0);
			break;
		}
		listener_close(&udp);
	}
	assert_int_equal(udp.n_fds, 3);
	assert_true(udp.port != 0);
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(port_of(udp.fds[i]), udp.port);
		assert_int_equal(getsockopt(udp.fds[i], SOL_SOCKET, SO_TYPE, &type, &sl), 0);
		assert_int_equal(type, SOCK_DGRAM);
	}
	assert_int_equal(port_of(tcp.fds[1]), udp.port);
	assert_int_equal(getsockopt(tcp.fds[0], SOL_SOCKET, SO_ACCEPTCONN, &acc, &sl), 0);
	assert_int_equal(acc, 1);
	listener_close(&udp);
	listener_close(&tcp);
	assert_null(udp.fds);
	listener_close(NULL);
}

/* Sends one datagram from each of 40 client sockets to a TURN-UDP listener of n slots on
 * ip and checks that slot shm_steer_slot(client) receives it: the steering program and
 * the take-over's re-owning agree. Returns the number of clients checked. */
static int steer_check(const char *ip, int family, unsigned n)
{
	struct conf_listener cl;
	struct mlistener ml;
	struct sockaddr_storage srv;
	socklen_t sl;
	unsigned hits[8] = { 0 };
	int checked = 0;

	make_listener(&cl, CONF_PROTO_TURN_UDP, "127.0.0.1", 0);
	memset(&cl.relay_addr, 0, sizeof(cl.relay_addr));
	cl.bind_address = (char *)ip;
	if (listener_open(&cl, n, &ml) < 0)
		return 0;	/* no such address family here */
	sl = sizeof(srv);
	assert_int_equal(getsockname(ml.fds[0], (struct sockaddr *)&srv, &sl), 0);
	for (int i = 0; i < 40; i++) {
		int c = socket(family, SOCK_DGRAM, 0), got = -1;
		struct sockaddr_storage me;
		socklen_t ml_len = sizeof(me);
		struct shm_addr a;

		assert_true(c >= 0);
		/* bound to the address, so getsockname() names the source the program sees */
		me = srv;
		if (family == AF_INET)
			((struct sockaddr_in *)&me)->sin_port = 0;
		else
			((struct sockaddr_in6 *)&me)->sin6_port = 0;
		assert_int_equal(bind(c, (struct sockaddr *)&me, sl), 0);
		assert_int_equal(sendto(c, "x", 1, 0, (struct sockaddr *)&srv, sl), 1);
		assert_int_equal(getsockname(c, (struct sockaddr *)&me, &ml_len), 0);
		for (int tries = 0; tries < 100 && got < 0; tries++) {
			struct pollfd p[8];
			char b[4];

			for (unsigned s = 0; s < n; s++)
				p[s] = (struct pollfd){ .fd = ml.fds[s], .events = POLLIN };
			assert_true(poll(p, n, 20) >= 0);
			for (unsigned s = 0; s < n; s++)
				if (p[s].revents && recv(ml.fds[s], b, sizeof(b), 0) == 1)
					got = (int)s;
		}
		memset(&a, 0, sizeof(a));
		a.family = (uint8_t)family;
		if (family == AF_INET) {
			memcpy(a.addr, &((struct sockaddr_in *)&me)->sin_addr, 4);
			a.port = ntohs(((struct sockaddr_in *)&me)->sin_port);
		} else {
			memcpy(a.addr, &((struct sockaddr_in6 *)&me)->sin6_addr, 16);
			a.port = ntohs(((struct sockaddr_in6 *)&me)->sin6_port);
		}
		assert_int_equal(got, (int)shm_steer_slot(&a, n));
		hits[got]++;
		checked++;
		close(c);
	}
	for (unsigned s = 0; s < n; s++)
		assert_true(hits[s] > 0);	/* and it spreads clients of one address */
	listener_close(&ml);
	return checked;
}

static void test_listener_steering(void **state)
{
	(void)state;
	assert_int_equal(steer_check("127.0.0.1", AF_INET, 3), 40);
	assert_int_equal(steer_check("127.0.0.1", AF_INET, 2), 40);
	print_message("IPv6: %d clients checked\n", steer_check("::1", AF_INET6, 3));
}

/* A relay address that is not local (behind NAT it is the public one) binds the wildcard;
 * an explicit bind address that is not local is an error. */
static void test_listener_nonlocal_address(void **state)
{
	struct conf_listener cl;
	struct mlistener ml;

	(void)state;
	make_listener(&cl, CONF_PROTO_TURN_UDP, "192.0.2.10", 0);
	assert_int_equal(listener_open(&cl, 1, &ml), 0);
	assert_non_null(strstr(ml.bind_text, "0.0.0.0:"));
	listener_close(&ml);

	cl.bind_address = (char *)"192.0.2.10";
	assert_int_equal(listener_open(&cl, 1, &ml), -EADDRNOTAVAIL);
	cl.bind_address = (char *)"not-an-ip";
	assert_int_equal(listener_open(&cl, 1, &ml), -EINVAL);
}

static void test_listener_failures_leave_nothing_open(void **state)
{
	struct conf_listener cl;
	struct mlistener ml;
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sin);
	int blocker, before;

	(void)state;
	/* TLS listeners are TCP sockets, DTLS listeners UDP sockets. */
	for (int k = 0; k < 2; k++) {
		int type = 0;
		socklen_t tl = sizeof(type);

		make_listener(&cl, k ? CONF_PROTO_TURN_DTLS : CONF_PROTO_TURN_TLS, "127.0.0.1", 0);
		assert_int_equal(listener_open(&cl, 2, &ml), 0);
		assert_int_equal(getsockopt(ml.fds[1], SOL_SOCKET, SO_TYPE, &type, &tl), 0);
		assert_int_equal(type, k ? SOCK_DGRAM : SOCK_STREAM);
		listener_close(&ml);
	}

	/* A port held by a socket without SO_REUSEPORT cannot be joined. */
	blocker = socket(AF_INET, SOCK_DGRAM, 0);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(blocker, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(getsockname(blocker, (struct sockaddr *)&sin, &sl), 0);
	make_listener(&cl, CONF_PROTO_TURN_UDP, "127.0.0.1", ntohs(sin.sin_port));
	before = count_fds();
	assert_int_equal(listener_open(&cl, 4, &ml), -EADDRINUSE);
	assert_int_equal(count_fds(), before);
	assert_null(ml.fds);
	close(blocker);
}

/* The tests talk to the dispatcher as root would. */
static const struct admin_peer test_root_peer = { .pid = 1, .uid = 0, .gid = 0 };

static void expect_error(struct master *m, const char *line, const char *msg)
{
	json_t *r = admin_dispatch(m, &test_root_peer, line, strlen(line));

	assert_non_null(r);
	assert_true(json_is_false(json_object_get(r, "ok")));
	assert_string_equal(json_string_value(json_object_get(r, "error")), msg);
	json_decref(r);
}

/* The parser's error paths never reach a command, so a bare master suffices. */
static void test_admin_malformed(void **state)
{
	struct master m;

	(void)state;
	memset(&m, 0, sizeof(m));
	m.magic = MASTER_MAGIC;
	expect_error(&m, "", "malformed request: expected one JSON object per line");
	expect_error(&m, "{", "malformed request: expected one JSON object per line");
	expect_error(&m, "\"status\"", "malformed request: expected a JSON object");
	expect_error(&m, "null", "malformed request: expected a JSON object");
	expect_error(&m, "{\"cmd\":null}", "missing \"cmd\" (a string)");
	expect_error(&m, "{\"command\":\"status\"}", "missing \"cmd\" (a string)");
	expect_error(&m, "{\"cmd\":\"STATUS\"}", "unknown command");
	expect_error(&m, "{\"cmd\":\"status\"} trailing",
		     "malformed request: expected one JSON "
		     "object per line");
	expect_error(&m, "{\"cmd\":\"a\",\"cmd\":\"b\"}",
		     "malformed request: expected one JSON object per line");
}

/* A master with a real segment and the embedded default config but no workers: enough for
 * every admin command to run for real. */
static struct master *fixture(void)
{
	static struct master m;
	static struct mworker w;
	struct shm_config sc = {
		.n_slots = 1, .snap_count = 4, .snap_size = 1u << 20, .alloc_cap = 64
	};

	memset(&m, 0, sizeof(m));
	memset(&w, 0, sizeof(w));
	m.magic = MASTER_MAGIC;
	m.loop = ev_default_loop(0);
	m.n_slots = 1;
	m.workers = &w;
	w.m = &m;
	w.ctl_fd = -1;
	w.last_status = -1;
	handoffq_init(&m); /* as supervise_init does: no queue until a frame waits */
	assert_int_equal(conf_load_default(NULL, &m.cfg), 0);
	assert_int_equal(shm_create(&sc, "test-master", &m.shm), 0);
	assert_int_equal(reload_publish(&m), 0);
	return &m;
}

static void fixture_free(struct master *m)
{
	conf_free(m->cfg);
	shm_destroy(m->shm);
	reload_result_clear(&m->last_reload);
	snap_blob_free(m->snap_blob, m->snap_len);
	free(m->log_override);
}

static const char *const seeds[] = {
	"{\"cmd\":\"status\"}",
	"{\"cmd\":\"config\"}",
	"{\"cmd\":\"workers\"}",
	"{\"cmd\":\"stats\"}",
	"{\"cmd\":\"allocations\",\"user\":\"u\",\"listener\":\"x\",\"worker\":0,\"limit\":5}",
	"{\"cmd\":\"disconnect\",\"id\":3}",
	"{\"cmd\":\"disconnect\",\"user\":\"1700000000:alice\"}",
	"{\"cmd\":\"drain\",\"on\":false}",
	"{\"cmd\":\"loglevel\",\"spec\":\"all:ERROR\"}",
	"{\"cmd\":\"reload\"}",
};

/* Deterministic mutations of valid requests (flip, insert, delete, truncate, splice): every
 * reply must be an object with a boolean "ok"; errors must say why. */
static void test_admin_mutations(void **state)
{
	struct master *m = fixture();
	static const char pool[] = "{}[]\":,0123456789e\\u\x80\xff \n";
	char buf[512];
	uint64_t x = 0x9e3779b97f4a7c15ull;
	unsigned replies_ok = 0;

	(void)state;
	for (int it = 0; it < 20000; it++) {
		const char *seed = seeds[it % (sizeof(seeds) / sizeof(seeds[0]))];
		size_t len = strlen(seed);
		int muts;

		memcpy(buf, seed, len);
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		muts = (int)(x % 4);
		for (int k = 0; k < muts; k++) {
			size_t pos;

			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			pos = len ? (size_t)(x >> 8) % len : 0;
			switch (x % 4) {
			case 0:
				buf[pos] = (char)(x >> 32);
				break;
			case 1:
				if (len + 1 < sizeof(buf)) {
					memmove(buf + pos + 1, buf + pos, len - pos);
					buf[pos] = pool[(x >> 40) % (sizeof(pool) - 1)];
					len++;
				}
				break;
			case 2:
				if (len > 0) {
					memmove(buf + pos, buf + pos + 1, len - pos - 1);
					len--;
				}
				break;
			default:
				len = pos;
				break;
			}
		}
		json_t *r = admin_dispatch(m, &test_root_peer, buf, len);

		assert_non_null(r);
		assert_true(json_is_boolean(json_object_get(r, "ok")));
		if (json_is_true(json_object_get(r, "ok")))
			replies_ok++;
		else
			assert_true(json_is_string(json_object_get(r, "error")));
		json_decref(r);
	}
	/* Unmutated seeds (a quarter of the runs) succeed, except a disconnect of nothing. */
	assert_true(replies_ok > 3000);
	log_set_spec("all:INFO");
	fixture_free(m);
}

/* A LIVE record of user in slot's partition: its index. */
static uint32_t live_rec(struct shm *shm, unsigned slot, const char *user)
{
	struct shm_alloc *rec;
	uint32_t idx;

	assert_int_equal(shm_alloc_claim(shm, slot, &idx, &rec), 0);
	rec->user_len = (uint16_t)strlen(user);
	memcpy(rec->username, user, strlen(user));
	assert_int_equal(shm_alloc_publish(shm, slot, idx), 0);
	return idx;
}

static json_t *disconnect_alice(struct master *m)
{
	static const char req[] = "{\"cmd\":\"disconnect\",\"user\":\"alice\"}";

	return admin_dispatch(m, &test_root_peer, req, strlen(req));
}

/* {"cmd":"disconnect","id":idx}, or "id":[idx,gen] where gen >= 0: whether it was ok. */
static bool disconnect_id(struct master *m, uint32_t idx, long long gen)
{
	char req[128];
	json_t *r;
	bool ok;

	if (gen < 0)
		snprintf(req, sizeof(req), "{\"cmd\":\"disconnect\",\"id\":%u}", idx);
	else
		snprintf(req, sizeof(req), "{\"cmd\":\"disconnect\",\"id\":[%u,%lld]}", idx,
			 gen);
	r = admin_dispatch(m, &test_root_peer, req, strlen(req));
	ok = json_is_true(json_object_get(r, "ok"));
	if (!ok)
		assert_string_equal(json_string_value(json_object_get(r, "error")),
				    "no such allocation");
	json_decref(r);
	return ok;
}

/* The IPC_DISC_INDEX frame that disconnect_id sent: its index and generation. */
static void disc_index_sent(int fd, uint32_t idx, uint64_t gen)
{
	struct ipc_disconnect d;
	struct ipc_msg msg;
	int passfd;

	assert_int_equal(ipc_recv(fd, &msg, &passfd), 0);
	assert_int_equal(msg.hdr.type, IPC_DISCONNECT);
	assert_int_equal(ipc_msg_get(&msg, &d, sizeof(d)), 0);
	assert_int_equal(d.by, IPC_DISC_INDEX);
	assert_int_equal(d.index, idx);
	assert_int_equal(d.gen, gen);
}

/* A master of two slots: worker 0 behind the control socket pair sp (sp[0] its end,
 * sp[1] the worker's), worker 1 dead and not respawned yet; their hand-off queues set up
 * as supervise_init does (none made yet). */
static void two_workers(struct master *m, struct mworker w[2], int sp[2])
{
	memset(m, 0, sizeof(*m));
	memset(w, 0, 2 * sizeof(*w));
	m->magic = MASTER_MAGIC;
	m->loop = ev_default_loop(0);
	m->n_slots = 2;
	m->workers = w;
	assert_int_equal(ipc_socketpair(sp), 0);
	for (unsigned i = 0; i < 2; i++) {
		w[i].m = m;
		w[i].slot = i;
		w[i].last_status = -1;
	}
	w[0].ctl_fd = sp[0];
	w[1].ctl_fd = -1;
	m->fd_limit = 1024;
	handoffq_init(m);
}

/* disconnect --user: one IPC_DISC_USER frame per worker that owns any of the user's
 * allocations, whatever their number; those of a worker that is not running, or whose
 * frame cannot be sent, are counted not reached, never disconnected. disconnect ID: the
 * frame names the record's generation, and with "id":[ID,GEN] a record of another
 * generation (the id taken by another allocation since the operator's listing) is no such
 * allocation, no frame sent. */
static void test_disconnect_user_frames(void **state)
{
	static const char revoke_req[] = "{\"cmd\":\"revoke\",\"user_id\":\"alice\"}";
	static struct master m;
	static struct mworker w[2];
	struct shm_config sc = {
		.n_slots = 2, .snap_count = 4, .snap_size = 1u << 20, .alloc_cap = 2048
	};
	struct ipc_disconnect d;
	struct ipc_msg msg;
	int sp[2], fd;
	unsigned full = 0;
	struct shm_alloc *rec;
	uint32_t carol;
	uint64_t gen;
	json_t *r;

	(void)state;
	two_workers(&m, w, sp);
	assert_int_equal(conf_load_default(NULL, &m.cfg), 0);
	assert_int_equal(shm_create(&sc, "test-disconnect", &m.shm), 0);
	assert_int_equal(reload_publish(&m), 0);
	/* More than a control socket holds frames, of the REST and the static alice. */
	for (unsigned i = 0; i < 1000; i++)
		live_rec(m.shm, 0, i % 2 ? "1700000000:alice" : "alice");
	live_rec(m.shm, 0, "bob");
	live_rec(m.shm, 0, "team:alice");
	live_rec(m.shm, 1, "alice");
	live_rec(m.shm, 1, "1800000000:alice");
	carol = live_rec(m.shm, 0, "carol");

	r = disconnect_alice(&m);
	assert_true(json_is_true(json_object_get(r, "ok")));
	assert_int_equal(json_integer_value(json_object_get(r, "disconnected")), 1000);
	assert_int_equal(json_integer_value(json_object_get(r, "not_reached")), 2);
	json_decref(r);
	assert_int_equal(ipc_recv(sp[1], &msg, &fd), 0);
	assert_int_equal(msg.hdr.type, IPC_DISCONNECT);
	assert_int_equal(ipc_msg_get(&msg, &d, sizeof(d)), 0);
	assert_int_equal(d.by, IPC_DISC_USER);
	assert_string_equal(d.user, "alice");
	assert_int_equal(ipc_recv(sp[1], &msg, &fd), -EAGAIN);	/* one frame, not 1000 */
	/* Kept for a replacement of worker 0 (master/discsent.h); worker 1 was sent nothing. */
	assert_int_equal(w[0].disc.n_user, 1);
	assert_string_equal(w[0].disc.e[0].user, "alice");
	assert_int_equal(w[1].disc.n, 0);

	/* revoke counts the same records, those the new entry refuses (before it is stored:
	 * master/revoke.c), and sends one IPC_DISC_REVOKED frame; the entry is stored. */
	r = admin_dispatch(&m, &test_root_peer, revoke_req, strlen(revoke_req));
	assert_true(json_is_true(json_object_get(r, "ok")));
	assert_int_equal(json_integer_value(json_object_get(r, "disconnected")), 1000);
	assert_int_equal(json_integer_value(json_object_get(r, "not_reached")), 2);
	json_decref(r);
	assert_true(shm_revoke_match(m.shm, "1900000000:alice", 16, time(NULL)));
	assert_false(shm_revoke_match(m.shm, "team:alice", 10, time(NULL)));
	assert_int_equal(ipc_recv(sp[1], &msg, &fd), 0);
	assert_int_equal(ipc_msg_get(&msg, &d, sizeof(d)), 0);
	assert_int_equal(d.by, IPC_DISC_REVOKED);
	assert_int_equal(ipc_recv(sp[1], &msg, &fd), -EAGAIN);

	assert_int_equal(shm_alloc_get(m.shm, 0, carol, &rec), 0);
	gen = rec->gen;
	assert_false(disconnect_id(&m, carol, (long long)gen - 1));
	assert_false(disconnect_id(&m, carol, (long long)gen + 1));
	assert_int_equal(ipc_recv(sp[1], &msg, &fd), -EAGAIN);
	assert_int_equal(w[0].disc.n, 1);	/* refused: none kept */
	assert_true(disconnect_id(&m, carol, (long long)gen));
	disc_index_sent(sp[1], carol, gen);
	assert_int_equal(w[0].disc.n, 2);
	assert_int_equal(w[0].disc.e[1].idx, carol);
	assert_int_equal(w[0].disc.e[1].gen, gen);
	assert_true(disconnect_id(&m, carol, -1));	/* the id alone, as before */
	disc_index_sent(sp[1], carol, gen);
	assert_int_equal(ipc_recv(sp[1], &msg, &fd), -EAGAIN);

	/* A control socket that takes no more: nothing counted as disconnected. */
	while (ipc_send_ping(sp[0], ++full) == 0 && full < 100000)
		;
	r = disconnect_alice(&m);
	assert_int_equal(json_integer_value(json_object_get(r, "disconnected")), 0);
	assert_int_equal(json_integer_value(json_object_get(r, "not_reached")), 1002);
	json_decref(r);

	close(sp[0]);
	close(sp[1]);
	discsent_free(&w[0].disc);
	conf_free(m.cfg);
	shm_destroy(m.shm);
	reload_result_clear(&m.last_reload);
	snap_blob_free(m.snap_blob, m.snap_len);
	free(m.log_override);
	log_set_spec("all:INFO");
}

/* A record of slot owned by user, created at created_ns: LIVE. */
static uint32_t live_rec_at(struct shm *shm, unsigned slot, const char *user, uint64_t created_ns)
{
	struct shm_alloc *rec;
	uint32_t idx = live_rec(shm, slot, user);

	assert_int_equal(shm_alloc_get(shm, slot, idx, &rec), 0);
	rec->created_ns = created_ns;
	return idx;
}

static void rec_end(struct shm *shm, unsigned slot, uint32_t idx)
{
	assert_int_equal(shm_alloc_retire(shm, slot, idx), 0);
	assert_int_equal(shm_alloc_release(shm, slot, idx), 0);
}

static uint64_t rec_gen(struct shm *shm, unsigned slot, uint32_t idx)
{
	struct shm_alloc *rec;

	assert_int_equal(shm_alloc_get(shm, slot, idx, &rec), 0);
	return rec->gen;
}

/* The kept disconnects of a slot (master/discsent.h): bounded (the oldest dropped and
 * counted, a repeat kept once); an index entry goes once its record is not LIVE with that
 * generation and owner; a user entry once no LIVE record of the slot created before the
 * send matches the user; a dead worker's entries are owed to its replacement and sent in
 * order until the control socket is full, the rest at a later flush. */
static void test_discsent(void **state)
{
	struct shm_config sc = {
		.n_slots = 2, .snap_count = 4, .snap_size = 1u << 20, .alloc_cap = 64
	};
	struct discsent ds = { 0 };
	struct ipc_disconnect dm;
	struct ipc_msg msg;
	struct shm *shm;
	uint32_t a, b, c, old, young, other;
	unsigned sent, full = 0;
	int sp[2], fd;

	(void)state;
	for (uint32_t i = 0; i < DISCSENT_MAX + 44; i++)
		assert_int_equal(discsent_add_index(&ds, NULL, 0, i, 7), 0);
	assert_int_equal(ds.n, DISCSENT_MAX);
	assert_int_equal(ds.dropped, 44);
	assert_int_equal(ds.e[0].idx, 44);	/* the oldest went */
	assert_int_equal(discsent_add_index(&ds, NULL, 0, 100, 7), 0);	/* a repeat */
	assert_int_equal(ds.n, DISCSENT_MAX);
	assert_int_equal(discsent_add_user(&ds, NULL, 0, "alice", 5), 0);
	assert_int_equal(discsent_add_user(&ds, NULL, 0, "alice", 9), 0);
	assert_int_equal(ds.n_user, 1);
	assert_int_equal(ds.e[DISCSENT_MAX - 1].sent_ns, 9);	/* the later send */
	assert_int_equal(ds.dropped, 45);
	discsent_report(&ds, 0);
	assert_int_equal(ds.dropped, 0);
	discsent_free(&ds);
	assert_int_equal(ds.n, 0);

	assert_int_equal(shm_create(&sc, "test-discsent", &shm), 0);
	a = live_rec_at(shm, 0, "carol", 10);
	b = live_rec_at(shm, 0, "dave", 10);
	c = live_rec_at(shm, 1, "erin", 10);
	assert_int_equal(discsent_add_index(&ds, NULL, 0, a, rec_gen(shm, 0, a)), 0);
	assert_int_equal(discsent_add_index(&ds, NULL, 0, b, rec_gen(shm, 0, b) + 1), 0); /* other gen */
	assert_int_equal(discsent_add_index(&ds, NULL, 0, c, rec_gen(shm, 1, c)), 0);	 /* other slot */
	assert_int_equal(discsent_add_index(&ds, NULL, 0, 63, 1), 0);			 /* FREE */
	discsent_prune(&ds, shm, 0);
	assert_int_equal(ds.n, 1);
	assert_int_equal(ds.e[0].idx, a);
	rec_end(shm, 0, a);
	discsent_prune(&ds, shm, 0);
	assert_int_equal(ds.n, 0);

	/* alice on slot 0 from before the send, and after; on slot 1 from before. */
	old = live_rec_at(shm, 0, "1700000000:alice", 100);
	young = live_rec_at(shm, 0, "alice", 300);
	other = live_rec_at(shm, 1, "alice", 100);
	assert_int_equal(discsent_add_user(&ds, NULL, 0, "alice", 200), 0);
	assert_int_equal(discsent_add_user(&ds, NULL, 0, "bob", 200), 0);	/* no record */
	discsent_prune(&ds, shm, 0);
	assert_int_equal(ds.n, 1);
	assert_string_equal(ds.e[0].user, "alice");
	rec_end(shm, 0, old);
	discsent_prune(&ds, shm, 0);	/* young and other do not keep it */
	assert_int_equal(ds.n, 0);
	assert_int_equal(ds.n_user, 0);
	(void)young;
	(void)other;

	/* A dead worker's entries, to its replacement in order. */
	assert_int_equal(ipc_socketpair(sp), 0);
	assert_int_equal(discsent_add_index(&ds, NULL, 0, b, 3), 0);
	assert_int_equal(discsent_add_user(&ds, NULL, 0, "carol", 200), 0);
	assert_int_equal(discsent_flush(&ds, sp[0]), 0);	/* nothing owed yet */
	discsent_worker_died(&ds, 4242);
	assert_int_equal(ds.dead_pid, 4242);
	assert_int_equal(discsent_flush(&ds, -1), 0);		/* no worker yet */
	assert_int_equal(discsent_flush(&ds, sp[0]), 2);
	disc_index_sent(sp[1], b, 3);
	assert_int_equal(ipc_recv(sp[1], &msg, &fd), 0);
	assert_int_equal(ipc_msg_get(&msg, &dm, sizeof(dm)), 0);
	assert_int_equal(dm.by, IPC_DISC_USER);
	assert_string_equal(dm.user, "carol");
	assert_int_equal(ipc_recv(sp[1], &msg, &fd), -EAGAIN);
	assert_int_equal(discsent_flush(&ds, sp[0]), 0);	/* sent once */
	assert_int_equal(ds.n, 2);	/* kept until the table shows them acted on */

	/* A control socket that takes no more: what did not fit goes at a later flush. */
	discsent_worker_died(&ds, 4243);
	while (ipc_send_ping(sp[0], ++full) == 0 && full < 100000)
		;
	assert_int_equal(discsent_flush(&ds, sp[0]), 0);
	while (ipc_recv(sp[1], &msg, &fd) == 0)
		;
	sent = discsent_flush(&ds, sp[0]);
	assert_int_equal(sent, 2);
	disc_index_sent(sp[1], b, 3);

	close(sp[0]);
	close(sp[1]);
	discsent_free(&ds);
	shm_destroy(shm);
}

/* Review of the kept disconnects: a record read torn (its owner writing) keeps its index
 * entry a tick longer; a full list is pruned before its oldest entry is dropped; one
 * prune of all slots keeps each slot's user entries by that slot's records only; an entry
 * re-sent to a replacement and still not acted on DISCSENT_REOWE_TICKS ticks later is
 * owed again (the replacement may have dropped it while its adoption was deferred). */
static void test_discsent_review(void **state)
{
	struct shm_config sc = {
		.n_slots = 2, .snap_count = 4, .snap_size = 1u << 20, .alloc_cap = 64
	};
	struct discsent ds = { 0 }, ds1 = { 0 };
	struct discsent *lists[2] = { &ds, &ds1 };
	struct shm_alloc *rec;
	struct ipc_msg msg;
	struct shm *shm;
	uint32_t a, b;
	int sp[2], fd;

	(void)state;
	assert_int_equal(shm_create(&sc, "test-discsent-review", &shm), 0);
	a = live_rec_at(shm, 0, "carol", 10);
	assert_int_equal(discsent_add_index(&ds, shm, 0, a, rec_gen(shm, 0, a)), 0);
	assert_int_equal(shm_alloc_get(shm, 0, a, &rec), 0);
	shm_alloc_begin_write(rec);	/* seq odd: read_copy says -EAGAIN */
	discsent_prune(&ds, shm, 0);
	assert_int_equal(ds.n, 1);	/* torn: kept */
	shm_alloc_end_write(rec);
	discsent_prune(&ds, shm, 0);
	assert_int_equal(ds.n, 1);	/* clean, LIVE, same gen: kept */
	rec_end(shm, 0, a);
	discsent_prune(&ds, shm, 0);
	assert_int_equal(ds.n, 0);

	/* Full of entries the table shows acted on (FREE records): pruned, none dropped. */
	for (uint32_t i = 0; i < DISCSENT_MAX; i++)
		assert_int_equal(discsent_add_index(&ds, shm, 0, 60 + i % 4, 100 + i), 0);
	assert_int_equal(ds.n, DISCSENT_MAX);
	b = live_rec_at(shm, 0, "dave", 10);
	assert_int_equal(discsent_add_index(&ds, shm, 0, b, rec_gen(shm, 0, b)), 0);
	assert_int_equal(ds.dropped, 0);
	assert_int_equal(ds.n, 1);
	/* Full of entries still pending (b's record read torn: its owner writing): the oldest
	 * goes. */
	assert_int_equal(shm_alloc_get(shm, 0, b, &rec), 0);
	shm_alloc_begin_write(rec);
	for (uint32_t i = 0; i < DISCSENT_MAX; i++)
		assert_int_equal(discsent_add_index(&ds, shm, 0, b, 1000 + i), 0);
	assert_int_equal(ds.n, DISCSENT_MAX);
	assert_int_equal(ds.dropped, 1);
	assert_int_equal(ds.e[0].gen, 1000);
	shm_alloc_end_write(rec);
	discsent_report(&ds, 0);
	discsent_free(&ds);

	/* One prune for both slots: each user entry by its own slot's records. */
	(void)live_rec_at(shm, 0, "alice", 100);
	(void)live_rec_at(shm, 1, "bob", 100);
	assert_int_equal(discsent_add_user(&ds, shm, 0, "alice", 200), 0);
	assert_int_equal(discsent_add_user(&ds, shm, 0, "bob", 200), 0);
	assert_int_equal(discsent_add_user(&ds1, shm, 1, "alice", 200), 0);
	assert_int_equal(discsent_add_user(&ds1, shm, 1, "bob", 200), 0);
	discsent_prune_all(lists, 2, shm);
	assert_int_equal(ds.n, 1);
	assert_string_equal(ds.e[0].user, "alice");
	assert_int_equal(ds1.n, 1);
	assert_string_equal(ds1.e[0].user, "bob");
	discsent_free(&ds1);

	discsent_free(&ds);

	/* Re-sent to the replacement, still not acted on: owed again after the ticks. */
	b = live_rec_at(shm, 0, "dave", 10);
	assert_int_equal(discsent_add_index(&ds, shm, 0, b, rec_gen(shm, 0, b)), 0);
	assert_int_equal(ipc_socketpair(sp), 0);
	discsent_worker_died(&ds, 4242);
	assert_int_equal(discsent_flush(&ds, sp[0]), 1);
	for (unsigned t = 1; t < DISCSENT_REOWE_TICKS; t++) {
		discsent_prune(&ds, shm, 0);
		discsent_tick(&ds);
		assert_int_equal(discsent_flush(&ds, sp[0]), 0);
	}
	discsent_prune(&ds, shm, 0);
	discsent_tick(&ds);
	assert_int_equal(discsent_flush(&ds, sp[0]), 1);
	assert_int_equal(ipc_recv(sp[1], &msg, &fd), 0);
	assert_int_equal(ipc_recv(sp[1], &msg, &fd), 0);
	assert_int_equal(ipc_recv(sp[1], &msg, &fd), -EAGAIN);

	close(sp[0]);
	close(sp[1]);
	discsent_free(&ds);
	shm_destroy(shm);
}

/* Read every frame waiting on fd; returns how many. */
static unsigned frames_drain(int fd)
{
	struct ipc_msg msg;
	unsigned n = 0;
	int rfd;

	while (n < 1000 && ipc_recv(fd, &msg, &rfd) == 0)
		n++;
	return n;
}

/* One tick of the master for ds: prune, tick, flush to fd; returns how many were sent. */
static unsigned disc_tick(struct discsent *ds, struct shm *shm, int fd)
{
	discsent_prune(ds, shm, 0);
	discsent_tick(ds);
	return discsent_flush(ds, fd);
}

/* A table of two slots and a control socketpair for a slot's kept disconnects. */
struct dsfix {
	struct discsent ds;
	struct shm *shm;
	int sp[2];
};

static void dsfix_up(struct dsfix *f, const char *name)
{
	struct shm_config sc = {
		.n_slots = 2, .snap_count = 4, .snap_size = 1u << 20, .alloc_cap = 64
	};

	memset(f, 0, sizeof(*f));
	assert_int_equal(shm_create(&sc, name, &f->shm), 0);
	assert_int_equal(ipc_socketpair(f->sp), 0);
}

/* A LIVE record of user on slot 0 whose index entry a dead worker (pid dead) left: sent to
 * its replacement (one frame on f->sp[0]). Returns the record's index. */
static uint32_t dsfix_resent(struct dsfix *f, const char *user, pid_t dead)
{
	uint32_t idx = live_rec_at(f->shm, 0, user, 10);

	assert_int_equal(discsent_add_index(&f->ds, f->shm, 0, idx, rec_gen(f->shm, 0, idx)), 0);
	discsent_worker_died(&f->ds, dead);
	assert_int_equal(discsent_flush(&f->ds, f->sp[0]), 1);
	return idx;
}

/* Frames sent to f's worker over n ticks (disc_tick). */
static unsigned dsfix_ticks(struct dsfix *f, unsigned n)
{
	unsigned sent = 0;

	for (unsigned t = 0; t < n; t++)
		sent += disc_tick(&f->ds, f->shm, f->sp[0]);
	return sent;
}

static void dsfix_down(struct dsfix *f)
{
	close(f->sp[0]);
	close(f->sp[1]);
	discsent_free(&f->ds);
	shm_destroy(f->shm);
}

/* The frame of a user entry carries no time: a replacement is sent it once, at its spawn,
 * and not again on later ticks while the entry is kept (an IPC_DISC_USER repeat would end
 * the user's allocations made since, on the replacement too). */
static void test_discsent_user_once(void **state)
{
	struct dsfix f;

	(void)state;
	dsfix_up(&f, "test-discsent-user-once");
	(void)live_rec_at(f.shm, 0, "alice", 100);	/* stays LIVE: the entry is kept */
	assert_int_equal(discsent_add_user(&f.ds, f.shm, 0, "alice", 200), 0);
	discsent_worker_died(&f.ds, 4242);
	assert_int_equal(discsent_flush(&f.ds, f.sp[0]), 1);
	assert_int_equal(frames_drain(f.sp[1]), 1);
	assert_int_equal(dsfix_ticks(&f, 8 * DISCSENT_REOWE_TICKS), 0);
	assert_int_equal(frames_drain(f.sp[1]), 0);
	assert_int_equal(f.ds.n, 1);	/* still kept: a later replacement gets it once more */
	discsent_worker_died(&f.ds, 4243);
	assert_int_equal(discsent_flush(&f.ds, f.sp[0]), 1);
	assert_int_equal(frames_drain(f.sp[1]), 1);

	dsfix_down(&f);
}

/* An index entry still kept is owed again to the same worker at most DISCSENT_REOWE_MAX
 * times, DISCSENT_REOWE_TICKS apart (each counted as a repeat), then no more: counted once
 * as given up for discsent_report. */
static void test_discsent_reowe_cap(void **state)
{
	struct dsfix f;
	unsigned sent = 0;

	(void)state;
	dsfix_up(&f, "test-discsent-reowe-cap");
	(void)dsfix_resent(&f, "carol", 4243);
	assert_int_equal(f.ds.repeats, 0);
	for (unsigned t = 0; t < 8 * DISCSENT_REOWE_TICKS; t++) {
		unsigned k = disc_tick(&f.ds, f.shm, f.sp[0]);

		assert_int_equal(f.ds.repeats, k);	/* each one to the same worker */
		sent += k;
	}
	assert_int_equal(sent, DISCSENT_REOWE_MAX);
	assert_int_equal(frames_drain(f.sp[1]), 1 + DISCSENT_REOWE_MAX);
	assert_int_equal(f.ds.gave_up, 1);
	discsent_report(&f.ds, 0);
	assert_int_equal(f.ds.gave_up, 0);
	assert_int_equal(f.ds.n, 1);
	/* A new replacement: sent again, and re-owed afresh. */
	discsent_worker_died(&f.ds, 4244);
	assert_int_equal(discsent_flush(&f.ds, f.sp[0]), 1);
	assert_int_equal(dsfix_ticks(&f, DISCSENT_REOWE_TICKS), 1);
	(void)frames_drain(f.sp[1]);

	dsfix_down(&f);
}

/* An admin repeat of a kept index entry sends the frame itself (not owed) but does not
 * switch the re-send off: a re-owe countdown running keeps running, and one owed to a new
 * replacement (not flushed yet) starts from the repeat's frame. */
static void test_discsent_repeat_keeps_reowe(void **state)
{
	struct dsfix f;
	uint32_t b;

	(void)state;
	dsfix_up(&f, "test-discsent-repeat");
	b = dsfix_resent(&f, "dave", 4244);
	assert_int_equal(disc_tick(&f.ds, f.shm, f.sp[0]), 0);
	assert_int_equal(discsent_add_index(&f.ds, f.shm, 0, b, rec_gen(f.shm, 0, b)), 0);
	assert_int_equal(dsfix_ticks(&f, DISCSENT_REOWE_TICKS - 1), 1);

	discsent_worker_died(&f.ds, 4245);
	assert_int_equal(discsent_add_index(&f.ds, f.shm, 0, b, rec_gen(f.shm, 0, b)), 0);
	assert_int_equal(discsent_flush(&f.ds, f.sp[0]), 0);	/* the repeat sent it */
	assert_int_equal(dsfix_ticks(&f, DISCSENT_REOWE_TICKS), 1);
	(void)frames_drain(f.sp[1]);

	dsfix_down(&f);
}

static void test_state_names(void **state)
{
	(void)state;
	assert_string_equal(supervise_state_name(MW_RUNNING), "running");
	assert_string_equal(supervise_state_name(MW_DEAD), "dead");
	assert_string_equal(supervise_state_name((enum mworker_state)99), "?");
}

/* handoffq_pass: a hand-off for a slot without a worker now, for the sender's own slot or
 * for no slot is dropped shut down (its client sees the end although the fd store's copy
 * stays open); one for a worker that is there reaches it, not shut down. */
static void test_handoff_pass(void **state)
{
	static struct master m;
	static struct mworker w[2];
	struct ipc_handoff h;
	struct ipc_msg msg;
	int sp[2], peer[4], copy[4], s[4], fd;

	(void)state;
	memset(&h, 0, sizeof(h));
	snprintf(h.listener, sizeof(h.listener), "l0");
	h.client.ss_family = AF_INET;
	two_workers(&m, w, sp);
	for (int i = 0; i < 4; i++)
		s[i] = conn_with_copy(&peer[i], &copy[i]);
	h.slot = 1;
	assert_int_equal(handoffq_pass(&m, 0, &h, s[0]), -ESRCH);
	assert_true(peer_sees_eof(peer[0]));
	h.slot = 0;
	assert_int_equal(handoffq_pass(&m, 0, &h, s[1]), -EINVAL);
	assert_true(peer_sees_eof(peer[1]));
	h.slot = 7;
	assert_int_equal(handoffq_pass(&m, 1, &h, s[2]), -EINVAL);
	assert_true(peer_sees_eof(peer[2]));
	h.slot = 0;
	assert_int_equal(handoffq_pass(&m, 1, &h, s[3]), 0);
	assert_int_equal(ipc_recv(sp[1], &msg, &fd), 0);
	assert_int_equal(msg.hdr.type, IPC_TCP_HANDOFF);
	assert_true(fd >= 0);
	assert_false(peer_sees_eof(peer[3]));
	assert_int_equal(send(fd, "x", 1, 0), 1);
	close(fd);
	handoffq_close(&w[0]);
	for (int i = 0; i < 4; i++) {
		close(peer[i]);
		close(copy[i]);
	}
	close(sp[0]);
	close(sp[1]);
}

static uint64_t fake_ms = 5000000; /* the lost drops' clock in test_handoff_lost_tick */

static uint64_t fake_now(void)
{
	return fake_ms;
}

/* The master's 1 s tick (handoffq_tick, through ipcq_ev_report) logs the hand-offs dropped
 * unqueued (no memory for a queue: ipcq_lost) that the 10 s rate held back, without
 * another drop: the held-back count is reported (and so reset) once 10 s have passed. */
static void test_handoff_lost_tick(void **state)
{
	static struct master m;
	static struct mworker w[2];
	struct ipcq_lost *lost = &w[0].handoffq.lost;
	int sp[2];

	(void)state;
	two_workers(&m, w, sp);
	lost->now_ms = fake_now;
	ipcq_lost(lost, "master", "worker 0", IPC_TCP_HANDOFF, -1, 0, -ENOMEM); /* logged */
	ipcq_lost(lost, "master", "worker 0", IPC_TCP_HANDOFF, -1, 0, -ENOMEM); /* held back */
	assert_int_equal(lost->unreported, 1);
	fake_ms += 1000;
	handoffq_tick(&m);
	assert_int_equal(lost->unreported, 1);
	fake_ms += 10000;
	handoffq_tick(&m);
	assert_int_equal(lost->unreported, 0);
	assert_int_equal(lost->dropped, 2);
	close(sp[0]);
	close(sp[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_listener_slots_share_port),
		cmocka_unit_test(test_listener_nonlocal_address),
		cmocka_unit_test(test_listener_steering),
		cmocka_unit_test(test_listener_failures_leave_nothing_open),
		cmocka_unit_test(test_admin_malformed),
		cmocka_unit_test(test_admin_mutations),
		cmocka_unit_test(test_disconnect_user_frames),
		cmocka_unit_test(test_discsent),
		cmocka_unit_test(test_discsent_review),
		cmocka_unit_test(test_discsent_user_once),
		cmocka_unit_test(test_discsent_reowe_cap),
		cmocka_unit_test(test_discsent_repeat_keeps_reowe),
		cmocka_unit_test(test_state_names),
		cmocka_unit_test(test_handoff_pass),
		cmocka_unit_test(test_handoff_lost_tick),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
