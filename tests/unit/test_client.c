/* Unit tests of the TURN client against a tiny fake TURN server on loopback (UDP and TCP). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/turn_client.h"
#include "tests/unit/client_fake.h"
#include "stun/stun.h"
#include "stun/stun_auth.h"
#include "stun/stun_frame.h"

#define REALM "test.realm"
#define USER "user"
#define PASS "pass"

/* ---- fake server (runs in a forked child) ------------------------------------------ */

struct srv {
	int fd;
	bool tcp;
	struct sockaddr_storage peer;
	socklen_t plen;
	uint8_t key[STUN_KEY_MAX];
	size_t key_len;
	uint8_t dropped_tid[STUN_TID_LEN];
	bool dropped;
	uint16_t chan;
	struct sockaddr_storage chan_peer;
};

static void srv_send(struct srv *s, const uint8_t *b, size_t n)
{
	if (s->tcp) {
		size_t off = 0;
		while (off < n) {
			ssize_t w = write(s->fd, b + off, n - off);
			if (w <= 0)
				_exit(3);
			off += (size_t)w;
		}
	} else {
		(void)sendto(s->fd, b, n, 0, (struct sockaddr *)&s->peer, s->plen);
	}
}

static void srv_finish(struct srv *s, struct stun_builder *b, bool mi)
{
	size_t len;
	if (mi)
		stun_build_integrity(b, s->key, s->key_len);
	if (stun_build_finish(b, &len) != 0)
		_exit(4);
	srv_send(s, b->buf, len);
}

static void srv_error(struct srv *s, const struct stun_msg *req, int code, const char *nonce)
{
	uint8_t out[512];
	size_t len;
	struct stun_error_opts o = { .realm = REALM, .nonce = nonce };
	if (stun_build_error_response(out, sizeof(out), req, code, nonce ? &o : NULL, &len) != 0)
		_exit(5);
	srv_send(s, out, len);
}

/* Long-term auth as the fake server does it: no MI -> 401 with nonce n1; MI with n1 ->
 * 438 with n2 (so every client run exercises both retries); n2 with a good MI -> ok. */
static bool srv_auth(struct srv *s, const struct stun_msg *m)
{
	const char *nonce;
	size_t nl;

	if (!stun_msg_has(m, STUN_ATTR_MESSAGE_INTEGRITY)) {
		srv_error(s, m, 401, "n1");
		return false;
	}
	if (stun_msg_get_string(m, STUN_ATTR_NONCE, &nonce, &nl) != 0 ||
	    stun_msg_check_integrity(m, s->key, s->key_len) != 0) {
		srv_error(s, m, 401, "n1");
		return false;
	}
	if (nl != 2 || memcmp(nonce, "n2", 2) != 0) {
		srv_error(s, m, 438, "n2");
		return false;
	}
	return true;
}

static void srv_data_indication(struct srv *s, const struct sockaddr_storage *peer, const void *d,
				size_t n)
{
	uint8_t out[1024], tid[STUN_TID_LEN] = { 0 };
	struct stun_builder b;
	stun_build_init(&b, out, sizeof(out), STUN_DATA, STUN_INDICATION, tid);
	stun_build_addr(&b, STUN_ATTR_XOR_PEER_ADDRESS, (const struct sockaddr *)peer);
	stun_build_attr(&b, STUN_ATTR_DATA, d, n);
	srv_finish(s, &b, false);
}

static void srv_channel_data(struct srv *s, uint16_t ch, const void *d, size_t n)
{
	uint8_t out[1024];
	size_t len;
	if (stun_chan_encode(out, sizeof(out), ch, d, n, s->tcp, STUN_CHAN_RFC8656, &len) == 0)
		srv_send(s, out, len);
}

static void srv_request(struct srv *s, const struct stun_msg *m)
{
	uint8_t out[1024];
	struct stun_builder b;
	struct sockaddr_storage ss, relay;
	uint8_t proto = 0;
	uint32_t lt;

	if (m->method == STUN_BINDING) {
		stun_build_init_response(&b, out, sizeof(out), m, STUN_SUCCESS);
		stun_build_addr(&b, STUN_ATTR_XOR_MAPPED_ADDRESS, (struct sockaddr *)&s->peer);
		srv_finish(s, &b, false);
		return;
	}
	if (m->method == STUN_REFRESH && !s->tcp && !s->dropped) {
		/* Lose the first Refresh datagram: the client must retransmit. */
		memcpy(s->dropped_tid, m->tid, STUN_TID_LEN);
		s->dropped = true;
		return;
	}
	if (!srv_auth(s, m))
		return;
	stun_build_init_response(&b, out, sizeof(out), m, STUN_SUCCESS);
	switch (m->method) {
	case STUN_ALLOCATE:
		if (stun_msg_get_requested_transport(m, &proto) != 0 || proto != 17) {
			srv_error(s, m, proto == 6 ? 442 : 400, NULL);
			return;
		}
		memset(&relay, 0, sizeof(relay));
		((struct sockaddr_in *)&relay)->sin_family = AF_INET;
		((struct sockaddr_in *)&relay)->sin_port = htons(50000);
		((struct sockaddr_in *)&relay)->sin_addr.s_addr = htonl(0x7f000001);
		stun_build_addr(&b, STUN_ATTR_XOR_RELAYED_ADDRESS, (struct sockaddr *)&relay);
		stun_build_addr(&b, STUN_ATTR_XOR_MAPPED_ADDRESS, (struct sockaddr *)&s->peer);
		stun_build_lifetime(&b, 600);
		break;
	case STUN_REFRESH:
		if (stun_msg_get_lifetime(m, &lt) != 0)
			lt = 600;
		stun_build_lifetime(&b, lt > 3600 ? 3600 : lt);
		break;
	case STUN_CREATE_PERMISSION:
		for (unsigned i = 0; i < stun_msg_peer_count(m); i++) {
			if (stun_msg_get_peer(m, i, &ss) == 0 &&
			    ((struct sockaddr_in *)&ss)->sin_addr.s_addr == htonl(0x0a000042)) {
				srv_error(s, m, 403, NULL);
				return;
			}
		}
		break;
	case STUN_CHANNEL_BIND:
		if (stun_msg_get_channel(m, STUN_CHAN_RFC8656, &s->chan) != 0 ||
		    stun_msg_get_peer(m, 0, &s->chan_peer) != 0) {
			srv_error(s, m, 400, NULL);
			return;
		}
		/* Relayed data racing the response: the client must queue it. */
		srv_channel_data(s, s->chan, "early", 5);
		break;
	default:
		srv_error(s, m, 400, NULL);
		return;
	}
	srv_finish(s, &b, true);
}

static void srv_handle(struct srv *s, const uint8_t *m, size_t n)
{
	struct stun_msg msg;
	struct sockaddr_storage peer;
	const uint8_t *d;
	size_t dl;
	uint16_t ch;

	if (stun_is_channeldata(m, n, STUN_CHAN_RFC8656)) {
		if (stun_chan_decode(m, n, STUN_CHAN_RFC8656, &ch, &d, &dl) == 0)
			srv_channel_data(s, ch, d, dl);	/* echo */
		return;
	}
	if (stun_msg_parse(&msg, m, n) != 0)
		return;
	if (msg.cls == STUN_REQUEST) {
		srv_request(s, &msg);
	} else if (msg.cls == STUN_INDICATION && msg.method == STUN_SEND &&
		   stun_msg_get_peer(&msg, 0, &peer) == 0 &&
		   stun_msg_get_raw(&msg, STUN_ATTR_DATA, &d, &dl) == 0) {
		srv_data_indication(s, &peer, d, dl);	/* echo as if from the peer */
	}
}

static void srv_loop_udp(struct srv *s)
{
	uint8_t buf[2048];
	/* Bounded: the child exits after 20 s of silence or when killed. */
	for (;;) {
		struct pollfd p = { .fd = s->fd, .events = POLLIN };
		if (poll(&p, 1, 20000) <= 0)
			_exit(0);
		s->plen = sizeof(s->peer);
		ssize_t n =
			recvfrom(s->fd, buf, sizeof(buf), 0, (struct sockaddr *)&s->peer, &s->plen);
		if (n > 0)
			srv_handle(s, buf, (size_t)n);
	}
}

static void srv_loop_tcp(struct srv *s, int lfd)
{
	static uint8_t buf[8192];
	size_t have = 0;
	struct pollfd lp = { .fd = lfd, .events = POLLIN };
	if (poll(&lp, 1, 20000) <= 0)
		_exit(0);
	s->plen = sizeof(s->peer);
	s->fd = accept(lfd, (struct sockaddr *)&s->peer, &s->plen);
	if (s->fd < 0)
		_exit(2);
	for (;;) {
		size_t fl;
		int rc = stun_frame_next(buf, have, sizeof(buf), STUN_CHAN_RFC8656, &fl);
		if (rc == 0) {
			srv_handle(s, buf, fl);
			memmove(buf, buf + fl, have - fl);
			have -= fl;
			continue;
		}
		if (rc != -EAGAIN)
			_exit(6);
		struct pollfd p = { .fd = s->fd, .events = POLLIN };
		if (poll(&p, 1, 20000) <= 0)
			_exit(0);
		ssize_t n = read(s->fd, buf + have, sizeof(buf) - have);
		if (n <= 0)
			_exit(0);
		have += (size_t)n;
	}
}

struct fixture {
	pid_t pid;
	struct sockaddr_storage addr;
	struct turn_client *c;
};

static int start_server(struct fixture *f, bool tcp, int family)
{
	struct srv s;
	socklen_t len = sizeof(f->addr);
	memset(&s, 0, sizeof(s));
	memset(&f->addr, 0, sizeof(f->addr));
	if (family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&f->addr;
		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_loopback;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&f->addr;
		a->sin_family = AF_INET;
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	}
	int fd = socket(family, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&f->addr,
			   family == AF_INET6 ? sizeof(struct sockaddr_in6)
					      : sizeof(struct sockaddr_in)) != 0)
		return -1;
	if (tcp && listen(fd, 1) != 0)
		return -1;
	getsockname(fd, (struct sockaddr *)&f->addr, &len);
	f->pid = fork();
	if (f->pid < 0)
		return -1;
	if (f->pid == 0) {
		s.tcp = tcp;
		s.fd = fd;
		if (stun_auth_key(STUN_PWALG_MD5, USER, 4, REALM, strlen(REALM), PASS, 4, s.key,
				  &s.key_len) != 0)
			_exit(1);
		if (tcp)
			srv_loop_tcp(&s, fd);
		else
			srv_loop_udp(&s);
		_exit(0);
	}
	close(fd);
	return 0;
}

static int setup(void **state, bool tcp, int family)
{
	struct fixture *f = calloc(1, sizeof(*f));
	if (f == NULL || start_server(f, tcp, family) != 0)
		return -1;
	struct turn_client_opts o = {
		.transport = tcp ? TURN_CLIENT_TCP : TURN_CLIENT_UDP,
		.server = (struct sockaddr *)&f->addr,
		.username = USER,
		.password = PASS,
		.software = "test_client",
		.timeout_ms = 5000,
		.rto_ms = 50,
		.fingerprint = true,
	};
	if (turn_client_create(&o, &f->c) != 0)
		return -1;
	*state = f;
	return 0;
}

static int setup_udp4(void **state)
{
	return setup(state, false, AF_INET);
}
static int setup_udp6(void **state)
{
	return setup(state, false, AF_INET6);
}
static int setup_tcp4(void **state)
{
	return setup(state, true, AF_INET);
}
static int setup_tcp6(void **state)
{
	return setup(state, true, AF_INET6);
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	fake_stop(f->c, f->pid);
	free(f);
	return 0;
}

/* ---- tests ----------------------------------------------------------------------- */

static void t_session(void **state)
{
	struct fixture *f = *state;
	struct turn_client *c = f->c;
	struct turn_alloc_result res;
	struct sockaddr_storage mapped, local, peers[2], from;
	uint32_t granted = 0;
	uint8_t buf[64];
	size_t len;
	uint16_t ch;

	assert_int_equal(turn_client_binding(c, &mapped), 0);
	assert_int_equal(turn_client_local_addr(c, &local), 0);
	assert_int_equal(mapped.ss_family, local.ss_family);

	struct turn_alloc_opts ao = { .lifetime = 300, .dont_fragment = true };
	assert_int_equal(turn_client_allocate(c, &ao, &res), 0);
	assert_int_equal(res.relayed.ss_family, AF_INET);
	assert_int_equal(ntohs(((struct sockaddr_in *)&res.relayed)->sin_port), 50000);
	assert_int_equal(res.relayed2.ss_family, 0);
	assert_int_equal(res.lifetime, 600);
	assert_int_equal(turn_client_last_error(c, NULL), 0);

	/* Refresh: the UDP server drops the first datagram, the retransmission works. */
	assert_int_equal(turn_client_refresh(c, 7200, &granted), 0);
	assert_int_equal(granted, 3600);
	assert_int_equal(turn_client_refresh(c, 0, &granted), 0);
	assert_int_equal(granted, 0);

	sa4(&peers[0], 0x0a000001, 1000);
	sa4(&peers[1], 0x0a000002, 2000);
	assert_int_equal(turn_client_create_permission(c, peers, 2), 0);
	sa4(&peers[1], 0x0a000042, 2000);
	assert_int_equal(turn_client_create_permission(c, peers, 2), -EPROTO);
	assert_int_equal(turn_client_last_error(c, NULL), 403);

	assert_int_equal(turn_client_channel_bind(c, 0x4001, (struct sockaddr *)&peers[0]), 0);
	/* The ChannelData sent before the response was queued, with the bound peer. */
	assert_int_equal(turn_client_recv(c, buf, sizeof(buf), &len, &from, &ch, 2000), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(buf, "early", 5);
	assert_int_equal(ch, 0x4001);
	assert_memory_equal(&from, &peers[0], sizeof(struct sockaddr_in));

	assert_int_equal(turn_client_send_channel(c, 0x4001, "hello", 5), 0);
	assert_int_equal(turn_client_recv(c, buf, sizeof(buf), &len, &from, &ch, 2000), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(ch, 0x4001);

	assert_int_equal(turn_client_send_indication(c, (struct sockaddr *)&peers[0], "ind", 3,
						     false),
			 0);
	assert_int_equal(turn_client_recv(c, buf, sizeof(buf), &len, &from, &ch, 2000), 0);
	assert_int_equal(len, 3);
	assert_memory_equal(buf, "ind", 3);
	assert_int_equal(ch, 0);
	assert_memory_equal(&from, &peers[0], sizeof(struct sockaddr_in));

	/* Too small a buffer, and nothing more to receive. */
	assert_int_equal(turn_client_send_channel(c, 0x4001, "hello", 5), 0);
	assert_int_equal(turn_client_recv(c, buf, 2, &len, &from, &ch, 2000), -EMSGSIZE);
	assert_int_equal(turn_client_recv(c, buf, sizeof(buf), &len, &from, &ch, 100), -ETIMEDOUT);
}

static void set_tcp_transport(struct stun_builder *b, void *arg)
{
	stun_build_requested_transport(b, STUN_TRANSPORT_TCP);
}

static void t_errors_and_raw(void **state)
{
	struct fixture *f = *state;
	struct turn_client *c = f->c;
	struct turn_response rsp;
	const char *reason;

	/* Without retries the first 401 is returned as is (but its nonce is learnt). */
	assert_int_equal(turn_client_request(c, STUN_ALLOCATE, set_tcp_transport, NULL,
					     TURN_REQ_AUTH | TURN_REQ_NO_RETRY, &rsp),
			 0);
	assert_int_equal(rsp.error_code, 401);
	assert_true(stun_msg_has(&rsp.msg, STUN_ATTR_NONCE));
	assert_int_equal(turn_client_last_error(c, NULL), 401);

	struct turn_alloc_opts ao = { .transport = STUN_TRANSPORT_TCP };
	assert_int_equal(turn_client_allocate(c, &ao, NULL), -EPROTO);
	assert_int_equal(turn_client_last_error(c, &reason), 442);
	assert_string_equal(reason, "Unsupported Transport Protocol");
	struct turn_alloc_opts missing = { .omit_transport = true };
	assert_int_equal(turn_client_allocate(c, &missing, NULL), -EPROTO);
	assert_int_equal(turn_client_last_error(c, NULL), 400);

	/* Raw request: the full error response comes back for inspection. */
	assert_int_equal(turn_client_request(c, STUN_ALLOCATE, set_tcp_transport, NULL,
					     TURN_REQ_AUTH, &rsp),
			 0);
	assert_int_equal(rsp.error_code, 442);
	assert_int_equal(rsp.msg.cls, STUN_ERROR);
	assert_int_equal(rsp.msg.method, STUN_ALLOCATE);

	/* Raw bytes: a Binding request by hand. */
	uint8_t req[64], tid[STUN_TID_LEN] = { 5 }, back[256];
	struct stun_builder b;
	size_t len;
	struct stun_msg m;
	stun_build_init(&b, req, sizeof(req), STUN_BINDING, STUN_REQUEST, tid);
	assert_int_equal(stun_build_finish(&b, &len), 0);
	assert_int_equal(turn_client_send_raw(c, req, len), 0);
	assert_int_equal(turn_client_recv_raw(c, back, sizeof(back), &len, 2000), 0);
	assert_int_equal(stun_msg_parse(&m, back, len), 0);
	assert_int_equal(m.cls, STUN_SUCCESS);
	assert_memory_equal(m.tid, tid, STUN_TID_LEN);
}

static void t_timeout_udp(void **state)
{
	/* A UDP port nobody answers on: bounded retransmissions then -ETIMEDOUT (or the
	 * ICMP port unreachable the kernel reports as -ECONNREFUSED). */
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_storage a;
	socklen_t al = sizeof(struct sockaddr_in);
	sa4(&a, INADDR_LOOPBACK, 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, al), 0);
	al = sizeof(a);
	getsockname(fd, (struct sockaddr *)&a, &al);
	struct turn_client_opts o = { .transport = TURN_CLIENT_UDP,
				      .server = (struct sockaddr *)&a,
				      .timeout_ms = 300,
				      .rto_ms = 20,
				      .max_retrans = 3 };
	struct turn_client *c;
	struct sockaddr_storage mapped;
	assert_int_equal(turn_client_create(&o, &c), 0);
	assert_int_equal(turn_client_binding(c, &mapped), -ETIMEDOUT);
	/* The silent server saw the request and its retransmissions: 1 + 3 at most. */
	uint8_t buf[128];
	int got = 0;
	while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		got++;
	assert_true(got >= 2 && got <= 4);
	turn_client_destroy(c);
	close(fd);
	close(socket(AF_INET, SOCK_DGRAM, 0));
}

static void t_create_errors(void **state)
{
	struct turn_client *c = NULL;
	struct turn_client_opts o = { 0 };
	assert_int_equal(turn_client_create(&o, &c), -EINVAL);
	assert_int_equal(turn_client_create(NULL, &c), -EINVAL);
	turn_client_destroy(NULL);
	/* TCP to a closed port: refused. */
	struct sockaddr_storage a;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	socklen_t al = sizeof(struct sockaddr_in);
	sa4(&a, INADDR_LOOPBACK, 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, al), 0);
	al = sizeof(a);
	getsockname(fd, (struct sockaddr *)&a, &al);
	close(fd);	/* bound, never listening: the port is closed */
	o.transport = TURN_CLIENT_TCP;
	o.server = (struct sockaddr *)&a;
	o.timeout_ms = 2000;
	assert_int_equal(turn_client_create(&o, &c), -ECONNREFUSED);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(t_session, setup_udp4, teardown),
		cmocka_unit_test_setup_teardown(t_session, setup_tcp4, teardown),
		cmocka_unit_test_setup_teardown(t_session, setup_udp6, teardown),
		cmocka_unit_test_setup_teardown(t_session, setup_tcp6, teardown),
		cmocka_unit_test_setup_teardown(t_errors_and_raw, setup_udp4, teardown),
		cmocka_unit_test_setup_teardown(t_errors_and_raw, setup_tcp4, teardown),
		cmocka_unit_test(t_timeout_udp),
		cmocka_unit_test(t_create_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
