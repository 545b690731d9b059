/* Unit tests of the client's RFC 6062 side (Connect, ConnectionBind, data connections)
 * against a fake TURN-TCP server on loopback that checks what the client encodes. */
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
#define CID_BASE 0x12345600u
#define PEER_REFUSED 0x0a000042u	/* 10.0.0.66: 403 */
#define PORT_FAILED 447			/* any peer on this port: 447 */
#define EARLY "bytes right behind the response"
#define SRV_CONNS 8

/* ---- fake server (a forked child) ----------------------------------------------------
 * One listening socket; every connection is a control connection until a ConnectionBind
 * succeeds on it, then it echoes raw bytes. Requests need long-term auth (401 with nonce
 * n1, then 438 with n2, then n2 is good), except that a ConnectionBind must come signed
 * with n2 at once: the client has to reuse the control connection's nonce (else 400). */

struct conn {
	int fd;
	bool raw;
	uint8_t buf[4096];
	size_t have;
};

struct srv {
	uint8_t key[STUN_KEY_MAX];
	size_t key_len;
	struct sockaddr_storage connected[8];	/* peers of the Connects that succeeded */
	unsigned n_connected;
	bool bound[8];
};

static void send_all(int fd, const uint8_t *b, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, b, n);

		if (w <= 0)
			_exit(3);
		b += w;
		n -= (size_t)w;
	}
}

static void srv_error(int fd, const struct stun_msg *req, int code, const char *nonce)
{
	uint8_t out[512];
	size_t len;
	struct stun_error_opts o = { .realm = REALM, .nonce = nonce };

	if (stun_build_error_response(out, sizeof(out), req, code, nonce ? &o : NULL, &len) != 0)
		_exit(5);
	send_all(fd, out, len);
}

static bool nonce_is(const struct stun_msg *m, const char *want)
{
	const char *nonce;
	size_t nl;

	return stun_msg_get_string(m, STUN_ATTR_NONCE, &nonce, &nl) == 0 && nl == strlen(want) &&
	       memcmp(nonce, want, nl) == 0;
}

static bool srv_auth(struct srv *s, int fd, const struct stun_msg *m)
{
	bool signed_ok = stun_msg_has(m, STUN_ATTR_MESSAGE_INTEGRITY) &&
			 stun_msg_check_integrity(m, s->key, s->key_len) == 0;

	if (m->method == STUN_CONNECTION_BIND && !(signed_ok && nonce_is(m, "n2"))) {
		srv_error(fd, m, 400, NULL);
		return false;
	}
	if (!signed_ok) {
		srv_error(fd, m, 401, "n1");
		return false;
	}
	if (!nonce_is(m, "n2")) {
		srv_error(fd, m, 438, "n2");
		return false;
	}
	return true;
}

/* Connect: 403, 447, 446 by the peer's address, else a new CONNECTION-ID. */
static int srv_connect(struct srv *s, const struct stun_msg *m, uint32_t *cid)
{
	struct sockaddr_storage peer;
	const struct sockaddr_in *p4 = (const struct sockaddr_in *)&peer;

	if (stun_msg_get_peer(m, 0, &peer) != 0 || peer.ss_family != AF_INET)
		return 400;
	if (p4->sin_addr.s_addr == htonl(PEER_REFUSED))
		return 403;
	if (ntohs(p4->sin_port) == PORT_FAILED)
		return 447;
	for (unsigned i = 0; i < s->n_connected; i++)
		if (memcmp(&s->connected[i], &peer, sizeof(struct sockaddr_in)) == 0)
			return 446;
	if (s->n_connected == 8)
		return 508;
	s->connected[s->n_connected] = peer;
	*cid = CID_BASE + ++s->n_connected;
	return 0;
}

/* ConnectionBind: the success response and, in the same write, the first peer bytes. */
static void srv_bind(struct srv *s, struct conn *c, const struct stun_msg *m)
{
	uint8_t out[512];
	struct stun_builder b;
	uint32_t cid;
	size_t len;
	unsigned i;

	if (stun_msg_get_connection_id(m, &cid) != 0 || cid <= CID_BASE ||
	    (i = cid - CID_BASE - 1) >= s->n_connected || s->bound[i]) {
		srv_error(c->fd, m, 400, NULL);
		return;
	}
	s->bound[i] = true;
	stun_build_init_response(&b, out, sizeof(out), m, STUN_SUCCESS);
	stun_build_integrity(&b, s->key, s->key_len);
	if (stun_build_finish(&b, &len) != 0 || len + strlen(EARLY) > sizeof(out))
		_exit(4);
	memcpy(out + len, EARLY, strlen(EARLY));
	send_all(c->fd, out, len + strlen(EARLY));
	c->raw = true;
}

static void srv_request(struct srv *s, struct conn *c, const struct stun_msg *m)
{
	uint8_t out[512];
	struct stun_builder b;
	struct sockaddr_storage relay;
	struct sockaddr_in *r4 = (struct sockaddr_in *)&relay;
	uint8_t proto = 0;
	uint32_t cid = 0;
	size_t len;
	int code;

	if (!srv_auth(s, c->fd, m))
		return;
	if (m->method == STUN_CONNECTION_BIND) {
		srv_bind(s, c, m);
		return;
	}
	stun_build_init_response(&b, out, sizeof(out), m, STUN_SUCCESS);
	if (m->method == STUN_ALLOCATE) {
		if (stun_msg_get_requested_transport(m, &proto) != 0 || proto != 6) {
			srv_error(c->fd, m, 400, NULL);
			return;
		}
		memset(&relay, 0, sizeof(relay));
		r4->sin_family = AF_INET;
		r4->sin_port = htons(50000);
		r4->sin_addr.s_addr = htonl(0x7f000001);
		stun_build_addr(&b, STUN_ATTR_XOR_RELAYED_ADDRESS, (struct sockaddr *)&relay);
		stun_build_lifetime(&b, 600);
	} else if (m->method == STUN_CONNECT) {
		code = srv_connect(s, m, &cid);
		if (code != 0) {
			srv_error(c->fd, m, code, NULL);
			return;
		}
		stun_build_connection_id(&b, cid);
	} else if (m->method != STUN_REFRESH) {
		srv_error(c->fd, m, 400, NULL);
		return;
	}
	stun_build_integrity(&b, s->key, s->key_len);
	if (stun_build_finish(&b, &len) != 0)
		_exit(4);
	send_all(c->fd, out, len);
}

/* Reads what is there; false when the connection is done. */
static bool srv_input(struct srv *s, struct conn *c)
{
	ssize_t n = read(c->fd, c->buf + c->have, sizeof(c->buf) - c->have);
	struct stun_msg msg;
	size_t fl;

	if (n <= 0)
		return false;
	if (c->raw) {
		send_all(c->fd, c->buf, (size_t)n);	/* the echoing peer */
		return true;
	}
	c->have += (size_t)n;
	while (!c->raw &&
	       stun_frame_next(c->buf, c->have, sizeof(c->buf), STUN_CHAN_RFC8656, &fl) == 0) {
		if (stun_msg_parse(&msg, c->buf, fl) == 0 && msg.cls == STUN_REQUEST)
			srv_request(s, c, &msg);
		memmove(c->buf, c->buf + fl, c->have - fl);
		c->have -= fl;
	}
	return true;
}

static void srv_loop(struct srv *s, int lfd)
{
	static struct conn conns[SRV_CONNS];
	struct pollfd p[SRV_CONNS + 1];
	unsigned n = 0;

	/* Bounded: the child exits after 20 s of silence or when killed. */
	for (;;) {
		p[0] = (struct pollfd){ .fd = lfd, .events = n < SRV_CONNS ? POLLIN : 0 };
		for (unsigned i = 0; i < n; i++)
			p[i + 1] = (struct pollfd){ .fd = conns[i].fd, .events = POLLIN };
		if (poll(p, n + 1, 20000) <= 0)
			_exit(0);
		for (unsigned i = n; i > 0; i--) {
			if (p[i].revents == 0 || srv_input(s, &conns[i - 1]))
				continue;
			close(conns[i - 1].fd);
			conns[i - 1] = conns[--n];
		}
		if (p[0].revents & POLLIN) {
			memset(&conns[n], 0, sizeof(conns[n]));
			conns[n].fd = accept(lfd, NULL, NULL);
			if (conns[n].fd >= 0)
				n++;
		}
	}
}

/* ---- fixture ----------------------------------------------------------------------- */

struct fixture {
	pid_t pid;
	struct sockaddr_in addr;
	struct turn_client *c;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	socklen_t len = sizeof(f->addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct srv s = { 0 };
	struct turn_client_opts o = {
		.transport = TURN_CLIENT_TCP,
		.server = (struct sockaddr *)&f->addr,
		.username = USER,
		.password = PASS,
		.timeout_ms = 5000,
		.fingerprint = true,
	};

	f->addr.sin_family = AF_INET;
	f->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&f->addr, sizeof(f->addr)) != 0 ||
	    listen(fd, 8) != 0 || getsockname(fd, (struct sockaddr *)&f->addr, &len) != 0)
		return -1;
	f->pid = fork();
	if (f->pid < 0)
		return -1;
	if (f->pid == 0) {
		if (stun_auth_key(STUN_PWALG_MD5, USER, 4, REALM, strlen(REALM), PASS, 4, s.key,
				  &s.key_len) != 0)
			_exit(1);
		srv_loop(&s, fd);
		_exit(0);
	}
	close(fd);
	if (turn_client_create(&o, &f->c) != 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	fake_stop(f->c, f->pid);
	free(f);
	return 0;
}

static void allocate_tcp(struct turn_client *c)
{
	struct turn_alloc_opts ao = { .transport = STUN_TRANSPORT_TCP };
	struct turn_alloc_result res;

	assert_int_equal(turn_client_allocate(c, &ao, &res), 0);
	assert_int_equal(ntohs(((struct sockaddr_in *)&res.relayed)->sin_port), 50000);
}

/* ---- tests ------------------------------------------------------------------------- */

/* Connect answers: the CONNECTION-ID of a success, each error code of a failure. */
static void t_connect(void **state)
{
	struct fixture *f = *state;
	struct sockaddr_storage peer;
	const char *reason = NULL;
	uint32_t cid = 0;

	allocate_tcp(f->c);
	sa4(&peer, 0x0a000001, 7000);
	assert_int_equal(turn_client_connect(f->c, (struct sockaddr *)&peer, &cid), 0);
	assert_int_equal(cid, CID_BASE + 1);
	assert_int_equal(turn_client_last_error(f->c, NULL), 0);
	assert_int_equal(turn_client_connect(f->c, (struct sockaddr *)&peer, &cid), -EPROTO);
	assert_int_equal(turn_client_last_error(f->c, &reason), 446);
	assert_string_equal(reason, "Connection Already Exists");
	assert_int_equal(cid, CID_BASE + 1);	/* untouched by a failure */
	sa4(&peer, PEER_REFUSED, 7000);
	assert_int_equal(turn_client_connect(f->c, (struct sockaddr *)&peer, NULL), -EPROTO);
	assert_int_equal(turn_client_last_error(f->c, &reason), 403);
	sa4(&peer, 0x0a000001, PORT_FAILED);
	assert_int_equal(turn_client_connect(f->c, (struct sockaddr *)&peer, NULL), -EPROTO);
	assert_int_equal(turn_client_last_error(f->c, &reason), 447);
	assert_string_equal(reason, "Connection Timeout or Failure");
	assert_int_equal(turn_client_connect(f->c, NULL, NULL), -EINVAL);
}

/* ConnectionBind on a new connection with the control connection's nonce, the bytes
 * behind its response, raw bytes both ways, and the refusals. */
static void t_bind(void **state)
{
	struct fixture *f = *state;
	struct turn_client *d = NULL, *d2 = NULL;
	struct turn_client_opts dtls = { .transport = TURN_CLIENT_DTLS };
	struct turn_response rsp;
	struct sockaddr_storage peer;
	char buf[128];
	size_t len = 0, got = 0;
	uint32_t cid = 0;

	allocate_tcp(f->c);
	sa4(&peer, 0x0a000001, 7001);
	assert_int_equal(turn_client_connect(f->c, (struct sockaddr *)&peer, &cid), 0);
	/* Unknown CONNECTION-ID: the server's 400 is read from the control client. */
	assert_int_equal(turn_client_connection_bind(f->c, cid + 1, NULL, &d), -EPROTO);
	assert_int_equal(turn_client_last_error(f->c, NULL), 400);
	assert_null(d);
	assert_int_equal(turn_client_connection_bind(f->c, cid, &dtls, &d), -EINVAL);
	assert_int_equal(turn_client_connection_bind(f->c, cid, NULL, &d), 0);
	assert_int_equal(turn_client_last_error(f->c, NULL), 0);
	assert_true(turn_client_pending(d));
	/* What came behind the response, in pieces no larger than asked for. */
	assert_int_equal(turn_client_data_recv(d, buf, 5, &len, 1000), 0);
	assert_int_equal(len, 5);
	while (len < strlen(EARLY) &&
	       turn_client_data_recv(d, buf + len, sizeof(buf) - len, &got, 1000) == 0 && got)
		len += got;
	assert_int_equal(len, strlen(EARLY));
	assert_memory_equal(buf, EARLY, strlen(EARLY));
	assert_false(turn_client_pending(d));
	/* Raw: bytes that look like STUN or ChannelData are only bytes. */
	assert_int_equal(turn_client_data_send(d, "\x40\x01\x00\x04ping", 8), 0);
	len = 0;
	while (len < 8 && turn_client_data_recv(d, buf + len, sizeof(buf) - len, &got, 2000) == 0 &&
	       got)
		len += got;
	assert_int_equal(len, 8);
	assert_memory_equal(buf, "\x40\x01\x00\x04ping", 8);
	assert_int_equal(turn_client_data_recv(d, buf, sizeof(buf), &len, 100), -ETIMEDOUT);
	/* STUN calls refuse the data connection, data calls the control connection. */
	assert_int_equal(turn_client_request(d, STUN_BINDING, NULL, NULL, 0, &rsp), -EINVAL);
	assert_int_equal(turn_client_send_channel(d, 0x4001, "x", 1), -EINVAL);
	assert_int_equal(turn_client_recv(d, buf, sizeof(buf), &len, NULL, NULL, 10), -EINVAL);
	assert_int_equal(turn_client_data_send(f->c, "x", 1), -EINVAL);
	assert_int_equal(turn_client_data_recv(f->c, buf, sizeof(buf), &len, 10), -EINVAL);
	/* Bound already: 400. */
	assert_int_equal(turn_client_connection_bind(f->c, cid, NULL, &d2), -EPROTO);
	assert_int_equal(turn_client_last_error(f->c, NULL), 400);
	turn_client_destroy(d);
}

/* Before any Allocate the client has no nonce: its ConnectionBind goes out unsigned and
 * the fake server (like one that lost the challenge) answers 400. */
static void t_bind_needs_challenge(void **state)
{
	struct fixture *f = *state;
	struct turn_client *d = NULL;

	assert_int_equal(turn_client_connection_bind(f->c, CID_BASE + 1, NULL, &d), -EPROTO);
	assert_int_equal(turn_client_last_error(f->c, NULL), 400);
	assert_null(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(t_connect, setup, teardown),
		cmocka_unit_test_setup_teardown(t_bind, setup, teardown),
		cmocka_unit_test_setup_teardown(t_bind_needs_challenge, setup, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
