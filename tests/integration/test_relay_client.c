/* Integration tests of the relay driven by the project's client library (client/): the
 * client verifies every response's integrity and prefers SHA-256 (PASSWORD-ALGORITHMS),
 * so this checks the server's signing as a second, independent client does. Also feeds
 * malformed datagrams and streams and checks the daemon keeps serving. 2 workers. */
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
#include <unistd.h>

#include <cmocka.h>

#include "client/turn_client.h"
#include "tests/integration/client_flow.h"
#include "tests/integration/harness.h"

struct fx {
	struct harness h;
	struct harness_echo echo, echo6;
	uint16_t port;
	struct sockaddr_storage srv;
};

static struct fx g;

static int setup(void **state)
{
	char yaml[2048];

	(void)state;
	if (harness_init(&g.h) < 0 || harness_echo_start("127.0.0.1", 0, &g.echo) < 0 ||
	    harness_echo_start("::1", 0, &g.echo6) < 0)
		return -1;
	g.port = harness_free_port();
	harness_addr("127.0.0.4", g.port, &g.srv);
	snprintf(yaml, sizeof(yaml),
		 "version: v1\n"
		 "admin:\n"
		 "  healthcheck_endpoint: \"\"\n"
		 "  admin_socket: %s\n"
		 "  relay_port_min: 51000\n"
		 "  relay_port_max: 51999\n"
		 "  drain_timeout: 1\n"
		 "auth:\n"
		 "  type: static\n"
		 "  realm: client.example\n"
		 "  credentials:\n"
		 "    username: user1\n"
		 "    password: pass1\n"
		 "listeners:\n"
		 "  - name: udp\n"
		 "    protocol: TURN-UDP\n"
		 "    address: 127.0.0.4\n"
		 "    port: %u\n"
		 "    routes: [peers]\n"
		 "  - name: tcp\n"
		 "    protocol: TURN-TCP\n"
		 "    address: 127.0.0.4\n"
		 "    port: %u\n"
		 "    routes: [peers]\n"
		 "clusters:\n"
		 "  - name: peers\n"
		 "    type: STATIC\n"
		 "    endpoints: [\"127.0.0.1\", \"::1\"]\n",
		 g.h.sock, g.port, g.port);
	return harness_launch(&g.h, yaml, 2, sa(&g.srv));
}

static int teardown(void **state)
{
	(void)state;
	harness_echo_stop(&g.echo6);
	return harness_teardown(&g.h, &g.echo);
}

static struct turn_client *mk(enum turn_client_transport t, const char *pass)
{
	struct turn_client_opts o = {
		.transport = t,
		.server = sa(&g.srv),
		.username = "user1",
		.password = pass,
		.timeout_ms = 3000,
		.fingerprint = true,
	};
	struct turn_client *c = NULL;

	assert_int_equal(turn_client_create(&o, &c), 0);
	return c;
}

static void relay_flow(enum turn_client_transport t)
{
	struct turn_client *c = mk(t, "pass1");

	cflow_relay(c, &g.echo.addr, &g.echo6.addr);
	turn_client_destroy(c);
}

static void test_udp_flow(void **state)
{
	(void)state;
	relay_flow(TURN_CLIENT_UDP);
}

static void test_tcp_flow(void **state)
{
	(void)state;
	relay_flow(TURN_CLIENT_TCP);
}

static void test_errors(void **state)
{
	struct turn_client *c = mk(TURN_CLIENT_UDP, "pass1");
	struct turn_alloc_opts tcp = { .transport = 6 }, none = { .omit_transport = true };
	struct sockaddr_storage denied;

	(void)state;
	harness_addr("10.1.2.3", 5000, &denied);
	/* TCP relaying over UDP: 400 (RFC 6062 5.1). */
	assert_int_equal(turn_client_allocate(c, &tcp, NULL), -EPROTO);
	assert_int_equal(turn_client_last_error(c, NULL), 400);
	assert_int_equal(turn_client_allocate(c, &none, NULL), -EPROTO);
	assert_int_equal(turn_client_last_error(c, NULL), 400);
	assert_int_equal(turn_client_allocate(c, NULL, NULL), 0);
	assert_int_equal(turn_client_create_permission(c, &denied, 1), -EPROTO);
	assert_int_equal(turn_client_last_error(c, NULL), 403);
	assert_int_equal(turn_client_refresh(c, 0, NULL), 0);
	turn_client_destroy(c);
	c = mk(TURN_CLIENT_UDP, "wrong");
	assert_int_equal(turn_client_allocate(c, NULL, NULL), -EPROTO);
	assert_int_equal(turn_client_last_error(c, NULL), 401);
	turn_client_destroy(c);
}

/* Garbage of every kind must be dropped (UDP) or end the connection (TCP), never crash or
 * wedge a worker: the daemon still answers afterwards (and the log scan at teardown finds
 * no sanitizer report). */
static void test_malformed_input(void **state)
{
	static const uint8_t bad[][24] = {
		{ 0x00, 0x01, 0x00, 0x04, 0x21, 0x12, 0xa4, 0x42 },	/* length past the end */
		{ 0x40, 0x00, 0xff, 0xff, 1, 2, 3 },			/* ChannelData too long */
		{ 0x7f, 0xff, 0x00, 0x02, 1, 2 },			/* unbound channel */
		{ 0x00, 0x03, 0x00, 0x00, 0x21, 0x12, 0xa4, 0x42, 1,  2,
		  3,    4,    5,    6,    7,    8,    9,    10,   11, 12 }, /* Allocate, no attrs */
		{ 0xff, 0xff, 0xff, 0xff },
		{ 0x01 },
	};
	struct turn_client *c = mk(TURN_CLIENT_UDP, "pass1");
	struct turn_client *t = mk(TURN_CLIENT_TCP, "pass1");
	struct sockaddr_storage mapped;
	uint8_t junk[512];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(turn_client_send_raw(c, bad[i], i == 5 ? 1 : i < 3 ? 8 : 20), 0);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 37 + 11);
	for (size_t n = 1; n < sizeof(junk); n += 61)
		assert_int_equal(turn_client_send_raw(c, junk, n), 0);
	assert_int_equal(turn_client_binding(c, &mapped), 0);
	/* A stream that is neither STUN nor ChannelData: the server closes it. */
	assert_int_equal(turn_client_send_raw(t, "\xff\xff\xff\xff garbage", 13), 0);
	assert_true(turn_client_binding(t, &mapped) < 0);
	turn_client_destroy(t);
	t = mk(TURN_CLIENT_TCP, "pass1");
	assert_int_equal(turn_client_binding(t, &mapped), 0);
	turn_client_destroy(t);
	turn_client_destroy(c);
}

/* A peer's burst to one allocation: the worker sends a relay socket's batch to the client
 * in one UDP_SEGMENT (GSO) send when the messages have one size (the last may be shorter),
 * else one by one. Either way every datagram must arrive whole, in order, on its channel:
 * equal sizes, a shorter last one, and mixed sizes. */
static void test_peer_burst(void **state)
{
	static const size_t sizes[][2] = { { 172, 172 }, { 1000, 333 }, { 64, 0 } };
	struct turn_client *c = mk(TURN_CLIENT_UDP, "pass1");
	struct turn_alloc_result r;
	struct sockaddr_storage peer;
	socklen_t pl = sizeof(peer);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	(void)state;
	assert_true(fd >= 0);
	harness_addr("127.0.0.1", 0, &peer);
	assert_int_equal(bind(fd, sa(&peer), sizeof(struct sockaddr_in)), 0);
	assert_int_equal(getsockname(fd, sa(&peer), &pl), 0);
	assert_int_equal(turn_client_allocate(c, NULL, &r), 0);
	assert_int_equal(turn_client_channel_bind(c, 0x4100, sa(&peer)), 0);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint8_t out[1000], in[1100];

		for (int i = 0; i < 24; i++) {
			size_t len = sizes[k][1] == 0 ? (size_t)(64 + i * 37)
				     : i == 23        ? sizes[k][1]
						      : sizes[k][0];

			memset(out, (int)(k * 24 + (size_t)i), len);
			assert_int_equal(sendto(fd, out, len, 0, sa(&r.relayed),
						sizeof(struct sockaddr_in)),
					 (ssize_t)len);
		}
		for (int i = 0; i < 24; i++) {
			size_t want = sizes[k][1] == 0 ? (size_t)(64 + i * 37)
				      : i == 23        ? sizes[k][1]
						       : sizes[k][0],
			       len = 0;
			uint16_t ch = 0;

			assert_int_equal(turn_client_recv(c, in, sizeof(in), &len, NULL, &ch, 3000),
					 0);
			assert_int_equal(ch, 0x4100);
			assert_int_equal(len, want);
			memset(out, (int)(k * 24 + (size_t)i), want);
			assert_memory_equal(in, out, want);
		}
	}
	close(fd);
	turn_client_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_udp_flow),   cmocka_unit_test(test_tcp_flow),
		cmocka_unit_test(test_errors),     cmocka_unit_test(test_malformed_input),
		cmocka_unit_test(test_peer_burst),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
