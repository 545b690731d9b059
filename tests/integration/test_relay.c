/* Integration tests of the relay against the real turngated: every TURN method and error
 * code, UDP/TCP/IPv6 transports, asymmetric and symmetric relaying, the peer allowlist.
 * The group runs with 1 worker and with 2 (TG_WORKERS=N runs one), so cross-worker
 * relaying is exercised. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "stun/stun.h"
#include "stun/stun_auth.h"
#include "tests/integration/harness.h"
#include "tests/integration/harness_admin.h"

#define RELAY_MIN 50000
#define RELAY_MAX 50999
#define REST_SECRET "itest-rest-secret"

struct fx {
	struct harness h;
	struct harness_echo echo, echo2, echo6;	/* echo: admitted; echo2: port not admitted */
	uint16_t port, port6, port_rest, port_none;
	struct sockaddr_storage srv, srv6, srv_rest, srv_none;
	unsigned workers;
	bool strict_channels;		/* limits.channel_numbers: rfc8656 */
};

static struct fx g;

static int fx_config(struct fx *f)
{
	char yaml[4096];
	uint16_t ep = ntohs(((struct sockaddr_in *)&f->echo.addr)->sin_port);

	snprintf(yaml, sizeof(yaml),
		 "version: v1\n"
		 "admin:\n"
		 "  name: itest\n"
		 "  loglevel: all:INFO\n"
		 "  healthcheck_endpoint: \"\"\n"
		 "  admin_socket: %s\n"
		 "  relay_port_min: %d\n"
		 "  relay_port_max: %d\n"
		 "  drain_timeout: 1\n"
		 "%s"
		 "auth:\n"
		 "  type: static\n"
		 "  realm: itest.example\n"
		 "  credentials:\n"
		 "    username: user1\n"
		 "    password: pass1\n"
		 "  users:\n"
		 "    - username: user2\n"
		 "      password: pass2\n"
		 "listeners:\n"
		 "  - name: udp\n"
		 "    protocol: TURN-UDP\n"
		 "    address: 127.0.0.4\n"
		 "    port: %u\n"
		 "    routes: [peers, self, peers6]\n"
		 "  - name: tcp\n"
		 "    protocol: TURN-TCP\n"
		 "    address: 127.0.0.4\n"
		 "    port: %u\n"
		 "    routes: [peers, self]\n"
		 "  - name: udp6\n"
		 "    protocol: TURN-UDP\n"
		 "    address: \"::1\"\n"
		 "    port: %u\n"
		 "    routes: [peers6]\n"
		 "  - name: rest\n"
		 "    protocol: TURN-UDP\n"
		 "    address: 127.0.0.4\n"
		 "    port: %u\n"
		 "    routes: [peers]\n"
		 "    auth:\n"
		 "      type: ephemeral\n"
		 "      realm: rest.example\n"
		 "      credentials:\n"
		 "        secret: %s\n"
		 "  - name: none\n"
		 "    protocol: TURN-UDP\n"
		 "    address: 127.0.0.4\n"
		 "    port: %u\n"
		 "    routes: [peers]\n"
		 "    auth:\n"
		 "      type: none\n"
		 "clusters:\n"
		 "  - name: peers\n"
		 "    type: STATIC\n"
		 "    endpoints: [\"127.0.0.1:<%u-%u>\"]\n"
		 "  - name: self\n"
		 "    type: STATIC\n"
		 "    endpoints: [\"127.0.0.4\"]\n"
		 "  - name: peers6\n"
		 "    type: STATIC\n"
		 "    endpoints: [\"::1\"]\n",
		 f->h.sock, RELAY_MIN, RELAY_MAX,
		 f->strict_channels ? "limits:\n  channel_numbers: rfc8656\n" : "", f->port,
		 f->port, f->port6, f->port_rest, REST_SECRET, f->port_none, ep, ep);
	return harness_write_config(&f->h, yaml);
}

static int group_setup(void **state)
{
	(void)state;
	if (harness_init(&g.h) < 0 || harness_echo_start("127.0.0.1", 0, &g.echo) < 0 ||
	    harness_echo_start("127.0.0.1", 0, &g.echo2) < 0 ||
	    harness_echo_start("::1", 0, &g.echo6) < 0)
		return -1;
	g.port = harness_free_port();
	g.port6 = harness_free_port();
	g.port_rest = harness_free_port();
	g.port_none = harness_free_port();
	if (!g.port || !g.port6 || !g.port_rest || !g.port_none || fx_config(&g) < 0)
		return -1;
	harness_addr("127.0.0.4", g.port, &g.srv);
	harness_addr("::1", g.port6, &g.srv6);
	harness_addr("127.0.0.4", g.port_rest, &g.srv_rest);
	harness_addr("127.0.0.4", g.port_none, &g.srv_none);
	return harness_start(&g.h, g.workers, (struct sockaddr *)&g.srv) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	harness_echo_stop(&g.echo2);
	harness_echo_stop(&g.echo6);
	return harness_teardown(&g.h, &g.echo);
}

static void client(struct hturn *c, const struct sockaddr_storage *srv, bool tcp)
{
	assert_int_equal(hturn_open(c, (const struct sockaddr *)srv, tcp), 0);
	hturn_set_user(c, "user1", "pass1");
}

/* Waits (3 s at most) until the daemon reports `want` live allocations. */
static long long wait_allocations(long long want)
{
	return hadmin_wait_status_int(g.h.sock, "allocations", want, 60, 50);
}

static struct stun_msg *last_msg(struct hturn *c, struct stun_msg *m)
{
	assert_int_equal(stun_msg_parse(m, c->resp, c->resp_len), 0);
	return m;
}

/* Round trip through the echo peer; returns true when the payload came back. */
static bool echo_roundtrip(struct hturn *c, uint16_t ch, struct sockaddr_storage *peer,
			   const char *payload)
{
	char buf[256];
	uint16_t got_ch = 0xffff;
	int n;

	if (ch)
		assert_int_equal(hturn_chan_send(c, ch, payload, strlen(payload)), 0);
	else
		assert_int_equal(hturn_send(c, sa(peer), payload, strlen(payload)), 0);
	n = hturn_recv_data(c, buf, sizeof(buf), &got_ch, NULL, 1500);
	if (n < 0)
		return false;
	assert_int_equal(got_ch, ch);
	return (size_t)n == strlen(payload) && memcmp(buf, payload, (size_t)n) == 0;
}

/* A 3000-byte payload (more than one Ethernet MTU) both ways: ch 0 = Send/Data. */
static bool big_roundtrip(struct hturn *c, uint16_t ch, struct sockaddr_storage *peer)
{
	static uint8_t out[3000], in[4000];
	uint16_t got = 0xffff;
	int n;

	for (size_t i = 0; i < sizeof(out); i++)
		out[i] = (uint8_t)(i * 7 + ch);
	if (ch)
		assert_int_equal(hturn_chan_send(c, ch, out, sizeof(out)), 0);
	else
		assert_int_equal(hturn_send(c, sa(peer), out, sizeof(out)), 0);
	n = hturn_recv_data(c, in, sizeof(in), &got, NULL, 1500);
	return n == (int)sizeof(out) && got == ch && memcmp(in, out, sizeof(out)) == 0;
}

/* ---- STUN ---- */

static void test_binding_fingerprint(void **state)
{
	struct hturn c;
	struct stun_msg m;
	struct sockaddr_storage mapped;

	(void)state;
	client(&c, &g.srv, false);
	assert_int_equal(hturn_request(&c, STUN_BINDING, NULL, NULL, false), 0);
	last_msg(&c, &m);
	assert_int_equal(stun_msg_get_addr(&m, STUN_ATTR_XOR_MAPPED_ADDRESS, &mapped), 0);
	assert_false(stun_msg_has(&m, STUN_ATTR_FINGERPRINT));
	c.fingerprint = true;
	assert_int_equal(hturn_request(&c, STUN_BINDING, NULL, NULL, false), 0);
	last_msg(&c, &m);
	assert_true(stun_msg_has(&m, STUN_ATTR_FINGERPRINT));
	assert_int_equal(stun_msg_check_fingerprint(&m), 0);
	hturn_close(&c);
}

static void unknown_attr(struct stun_builder *b, void *arg)
{
	uint32_t v = 0;

	(void)arg;
	stun_build_attr(b, 0x0031, &v, 4);	/* comprehension-required, unknown */
}

static void test_unknown_attribute_420(void **state)
{
	struct hturn c;
	struct stun_msg m;
	uint16_t types[4];
	size_t n = 0;

	(void)state;
	client(&c, &g.srv, false);
	assert_int_equal(hturn_request(&c, STUN_BINDING, unknown_attr, NULL, false), 420);
	last_msg(&c, &m);
	assert_int_equal(stun_msg_get_unknown_attributes(&m, types, 4, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(types[0], 0x0031);
	hturn_close(&c);
}

/* ---- authentication ---- */

static void test_auth_challenge_and_errors(void **state)
{
	struct hturn c;
	struct stun_msg m;
	char nonce[128];

	(void)state;
	client(&c, &g.srv, false);
	c.no_retry = true;
	/* No integrity: 401 with REALM and NONCE, and no state kept. */
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 401);
	last_msg(&c, &m);
	assert_true(stun_msg_has(&m, STUN_ATTR_REALM));
	assert_true(stun_msg_has(&m, STUN_ATTR_NONCE));
	assert_true(stun_msg_has(&m, STUN_ATTR_PASSWORD_ALGORITHMS));
	assert_int_equal(stun_msg_copy_string(&m, STUN_ATTR_NONCE, c.nonce, sizeof(c.nonce)), 0);
	assert_int_equal(stun_msg_copy_string(&m, STUN_ATTR_REALM, c.realm, sizeof(c.realm)), 0);
	/* Wrong password and unknown user: 401. */
	hturn_set_user(&c, "user1", "wrong");
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 401);
	hturn_set_user(&c, "nobody", "pass1");
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 401);
	/* A nonce not ours is checked before the credentials (RFC 8489 9.2.4): 438 with a
	 * fresh nonce under a wrong password and under the right one alike; under the fresh
	 * nonce the wrong password gets its 401 and the right one allocates. */
	snprintf(nonce, sizeof(nonce), "%s", c.nonce);
	nonce[3] ^= 1;
	snprintf(c.nonce, sizeof(c.nonce), "%s", nonce);
	hturn_set_user(&c, "user1", "wrong");
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 438);
	last_msg(&c, &m);
	assert_int_equal(stun_msg_copy_string(&m, STUN_ATTR_NONCE, c.nonce, sizeof(c.nonce)), 0);
	assert_string_not_equal(c.nonce, nonce);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 401);
	snprintf(c.nonce, sizeof(c.nonce), "%s", nonce);
	hturn_set_user(&c, "user1", "pass1");
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 438);
	last_msg(&c, &m);
	assert_int_equal(stun_msg_copy_string(&m, STUN_ATTR_NONCE, c.nonce, sizeof(c.nonce)), 0);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

static void test_auth_sha256(void **state)
{
	struct hturn c;
	struct stun_msg m;

	(void)state;
	client(&c, &g.srv, false);
	c.sha256 = true;
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	last_msg(&c, &m);
	assert_true(stun_msg_has(&m, STUN_ATTR_MESSAGE_INTEGRITY_SHA256));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

static void test_wrong_username_441(void **state)
{
	struct hturn c;

	(void)state;
	client(&c, &g.srv, false);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	hturn_set_user(&c, "user2", "pass2");
	assert_int_equal(hturn_refresh(&c, 600), 441);
	hturn_set_user(&c, "user1", "pass1");
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

static void test_rest_credentials(void **state)
{
	struct hturn c;
	char user[64], pass[64];
	uint64_t now = (uint64_t)time(NULL);

	(void)state;
	assert_int_equal(hturn_open(&c, sa(&g.srv_rest), false), 0);
	assert_int_equal(stun_rest_mint((const uint8_t *)REST_SECRET, strlen(REST_SECRET), "alice",
					now + 3600, user, sizeof(user), pass, sizeof(pass)),
			 0);
	hturn_set_user(&c, user, pass);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_true(echo_roundtrip(&c, 0, &g.echo.addr, "rest") == false); /* no permission yet */
	assert_int_equal(hturn_permission(&c, sa(&g.echo.addr)), 0);
	assert_true(echo_roundtrip(&c, 0, &g.echo.addr, "rest"));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
	/* expired credential */
	assert_int_equal(hturn_open(&c, sa(&g.srv_rest), false), 0);
	assert_int_equal(stun_rest_mint((const uint8_t *)REST_SECRET, strlen(REST_SECRET), "alice",
					now - 10, user, sizeof(user), pass, sizeof(pass)),
			 0);
	hturn_set_user(&c, user, pass);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 401);
	/* wrong secret */
	assert_int_equal(stun_rest_mint((const uint8_t *)"other", 5, "alice", now + 3600, user,
					sizeof(user), pass, sizeof(pass)),
			 0);
	hturn_set_user(&c, user, pass);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 401);
	hturn_close(&c);
}

static void test_auth_none_binding_only(void **state)
{
	struct hturn c;

	(void)state;
	assert_int_equal(hturn_open(&c, sa(&g.srv_none), false), 0);
	assert_int_equal(hturn_request(&c, STUN_BINDING, NULL, NULL, false), 0);
	hturn_set_user(&c, "user1", "pass1");
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 403);
	hturn_close(&c);
}

/* ---- Allocate ---- */

static void req_transport(struct stun_builder *b, void *arg)
{
	stun_build_requested_transport(b, (uint8_t)(uintptr_t)arg);
}

static void req_family(struct stun_builder *b, void *arg)
{
	stun_build_requested_transport(b, STUN_TRANSPORT_UDP);
	stun_build_family(b, STUN_ATTR_REQUESTED_ADDRESS_FAMILY, (int)(intptr_t)arg);
}

static void test_allocate_errors(void **state)
{
	struct hturn c;

	(void)state;
	client(&c, &g.srv, false);
	/* 400: TCP relaying over a UDP control connection (RFC 6062 5.1). */
	assert_int_equal(hturn_request(&c, STUN_ALLOCATE, req_transport,
				       (void *)(uintptr_t)STUN_TRANSPORT_TCP, true),
			 400);
	/* 442: a transport that is neither UDP nor TCP. */
	assert_int_equal(hturn_request(&c, STUN_ALLOCATE, req_transport, (void *)(uintptr_t)132,
				       true),
			 442);
	/* 400: REQUESTED-TRANSPORT missing. */
	assert_int_equal(hturn_request(&c, STUN_ALLOCATE, NULL, NULL, true), 400);
	/* 440: unknown address family value. */
	assert_int_equal(hturn_request(&c, STUN_ALLOCATE, req_family, (void *)(intptr_t)3, true),
			 440);
	/* 437 for requests without an allocation. */
	assert_int_equal(hturn_refresh(&c, 600), 437);
	assert_int_equal(hturn_permission(&c, sa(&g.echo.addr)), 437);
	assert_int_equal(hturn_channel_bind(&c, 0x4000, sa(&g.echo.addr)), 437);
	hturn_close(&c);
}

static void test_allocate_437_and_retransmit(void **state)
{
	struct hturn c;
	uint8_t first[4096];
	size_t first_len;
	int n;

	(void)state;
	client(&c, &g.srv, false);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	memcpy(first, c.resp, c.resp_len);
	first_len = c.resp_len;
	/* A retransmission (same transaction id) gets the same success again. */
	assert_int_equal(hturn_send_raw(&c, c.req, c.req_len), 0);
	n = hturn_recv_raw(&c, c.resp, sizeof(c.resp), 2000);
	assert_int_equal(n, (int)first_len);
	assert_memory_equal(c.resp, first, first_len);
	/* A new Allocate on the same 5-tuple: 437. */
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 437);
	assert_int_equal(hturn_refresh(&c, 0), 0);
	assert_int_equal(hturn_refresh(&c, 600), 437);	/* Refresh 0 deleted it */
	hturn_close(&c);
}

static void test_allocate_relayed_address(void **state)
{
	struct hturn c;
	char ip[64];

	(void)state;
	client(&c, &g.srv, false);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_int_equal(c.relay.ss_family, AF_INET);
	inet_ntop(AF_INET, &((struct sockaddr_in *)&c.relay)->sin_addr, ip, sizeof(ip));
	assert_string_equal(ip, "127.0.0.4");
	assert_in_range(harness_port(&c.relay), RELAY_MIN, RELAY_MAX);
	assert_int_equal(c.lifetime, 600);	/* default */
	assert_int_equal(hturn_refresh(&c, 100000), 0);
	assert_int_equal(c.lifetime, 3600);	/* clamped to the maximum */
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

static void req_additional(struct stun_builder *b, void *arg)
{
	(void)arg;
	stun_build_family(b, STUN_ATTR_ADDITIONAL_ADDRESS_FAMILY, AF_INET6);
}

static void req_v6(struct stun_builder *b, void *arg)
{
	(void)arg;
	stun_build_family(b, STUN_ATTR_REQUESTED_ADDRESS_FAMILY, AF_INET6);
}

static void req_dont_fragment(struct stun_builder *b, void *arg)
{
	(void)arg;
	stun_build_flag(b, STUN_ATTR_DONT_FRAGMENT);
}

static void test_dual_allocation(void **state)
{
	struct hturn c;

	(void)state;
	client(&c, &g.srv, false);
	assert_int_equal(hturn_allocate(&c, req_additional, NULL), 0);
	assert_int_equal(c.relay.ss_family, AF_INET);
	assert_int_equal(c.relay2.ss_family, AF_INET6);
	/* Both families relay: IPv4 and IPv6 echo peers. */
	assert_int_equal(hturn_permission(&c, sa(&g.echo.addr)), 0);
	assert_int_equal(hturn_permission(&c, sa(&g.echo6.addr)), 0);
	assert_true(echo_roundtrip(&c, 0, &g.echo.addr, "dual-v4"));
	assert_true(echo_roundtrip(&c, 0, &g.echo6.addr, "dual-v6"));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

static void test_dont_fragment(void **state)
{
	struct hturn c;

	(void)state;
	client(&c, &g.srv, false);
	assert_int_equal(hturn_allocate(&c, req_dont_fragment, NULL), 0);
	assert_int_equal(hturn_permission(&c, sa(&g.echo.addr)), 0);
	assert_true(echo_roundtrip(&c, 0, &g.echo.addr, "df"));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

/* ---- permissions, channels, data ---- */

static void test_asymmetric_udp(void **state)
{
	struct hturn c;

	(void)state;
	client(&c, &g.srv, false);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	/* Without a permission nothing is relayed. */
	assert_false(echo_roundtrip(&c, 0, &g.echo.addr, "no-perm"));
	assert_int_equal(hturn_permission(&c, sa(&g.echo.addr)), 0);
	assert_true(echo_roundtrip(&c, 0, &g.echo.addr, "send-indication"));
	assert_true(big_roundtrip(&c, 0, &g.echo.addr));
	assert_int_equal(hturn_channel_bind(&c, 0x4001, sa(&g.echo.addr)), 0);
	assert_true(echo_roundtrip(&c, 0x4001, NULL, "channel-data"));
	assert_true(echo_roundtrip(&c, 0x4001, NULL, "odd")); /* unpadded length */
	assert_true(big_roundtrip(&c, 0x4001, NULL));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

struct two_peers {
	struct sockaddr_storage *a, *b;
};

static void two_peer_attrs(struct stun_builder *b, void *arg)
{
	struct two_peers *p = arg;

	stun_build_addr(b, STUN_ATTR_XOR_PEER_ADDRESS, sa(p->a));
	stun_build_addr(b, STUN_ATTR_XOR_PEER_ADDRESS, sa(p->b));
}

static void test_permission_errors(void **state)
{
	struct hturn c;
	struct sockaddr_storage denied, v6;
	struct two_peers tp = { &g.echo.addr, &denied };

	(void)state;
	long long denied_before = hadmin_stat(g.h.sock, NULL, "perm_denied");

	harness_addr("127.0.0.9", 4000, &denied);
	harness_addr("::1", 4000, &v6);
	client(&c, &g.srv, false);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_true(denied_before >= 0);
	assert_int_equal(hturn_permission(&c, sa(&denied)), 403);
	assert_true(hadmin_stat(g.h.sock, NULL, "perm_denied") > denied_before);
	assert_int_equal(hturn_channel_bind(&c, 0x4002, sa(&denied)), 403);
	assert_int_equal(hturn_permission(&c, sa(&v6)), 443);
	assert_int_equal(hturn_channel_bind(&c, 0x4002, sa(&v6)), 443);
	/* Several peers at once: all or nothing. */
	assert_int_equal(hturn_request(&c, STUN_CREATE_PERMISSION, two_peer_attrs, &tp, true), 403);
	assert_false(echo_roundtrip(&c, 0, &g.echo.addr, "not-installed"));
	tp.b = &g.echo2.addr;
	assert_int_equal(hturn_request(&c, STUN_CREATE_PERMISSION, two_peer_attrs, &tp, true), 0);
	assert_true(echo_roundtrip(&c, 0, &g.echo.addr, "installed"));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

static void test_channel_bind_rules(void **state)
{
	struct hturn c;
	struct sockaddr_storage other;

	(void)state;
	client(&c, &g.srv, false);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_int_equal(hturn_channel_bind(&c, 0x3fff, sa(&g.echo.addr)), 400);
	assert_int_equal(hturn_channel_bind(&c, 0x8000, sa(&g.echo.addr)), 400);
	assert_int_equal(hturn_channel_bind(&c, 0xffff, sa(&g.echo.addr)), 400);
	assert_int_equal(hturn_channel_bind(&c, 0x4010, sa(&g.echo.addr)), 0);
	/* same channel, other (admitted) peer; same peer, other channel: 400 */
	harness_addr("127.0.0.4", 9, &other);
	assert_int_equal(hturn_channel_bind(&c, 0x4010, sa(&other)), 400);
	assert_int_equal(hturn_channel_bind(&c, 0x4011, sa(&g.echo.addr)), 400);
	/* rebinding the same pair refreshes it */
	assert_int_equal(hturn_channel_bind(&c, 0x4010, sa(&g.echo.addr)), 0);
	assert_true(echo_roundtrip(&c, 0x4010, NULL, "rebound"));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

/* Raw ChannelData (any channel number, the codec only builds 0x4000-0x4FFF) to the echo
 * peer; true when it comes back on the same channel with the same payload. */
static bool raw_chan_roundtrip(struct hturn *c, uint16_t ch, const char *payload)
{
	uint8_t out[64], in[256];
	size_t len = strlen(payload);
	int n;

	assert_true(len <= sizeof(out) - 4);
	out[0] = (uint8_t)(ch >> 8);
	out[1] = (uint8_t)ch;
	out[2] = 0;
	out[3] = (uint8_t)len;
	memcpy(out + 4, payload, len);
	memset(out + 4 + len, 0, (4 - len % 4) % 4);
	assert_int_equal(hturn_send_raw(c, out, 4 + len + (4 - len % 4) % 4), 0);
	for (int i = 0; i < 4; i++) {	/* skip anything that is not ChannelData */
		n = hturn_recv_raw(c, in, sizeof(in), 1500);
		if (n < 0)
			return false;
		if (n >= 4 && (in[0] & 0xc0) == 0x40)
			return (in[0] << 8 | in[1]) == ch && (in[2] << 8 | in[3]) == (int)len &&
			       (size_t)n >= 4 + len && memcmp(in + 4, payload, len) == 0;
	}
	return false;
}

/* limits.channel_numbers: rfc8656 (strict RFC 8656 12): only 0x4000-0x4FFF; 0x5000-0x7FFF
 * get 400, and ChannelData in that range is not relayed. */
static void test_channel_numbers_strict(void **state)
{
	struct hturn c;

	(void)state;
	client(&c, &g.srv, false);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_int_equal(hturn_channel_bind(&c, 0x5000, sa(&g.echo.addr)), 400);
	assert_int_equal(hturn_channel_bind(&c, 0x7fff, sa(&g.echo.addr)), 400);
	assert_false(raw_chan_roundtrip(&c, 0x5000, "strict"));
	assert_int_equal(hturn_channel_bind(&c, 0x4fff, sa(&g.echo.addr)), 0);
	assert_true(raw_chan_roundtrip(&c, 0x4fff, "top-of-range"));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

/* The default (RFC 5766's range, as stunnerd; coturn's turnutils_uclient picks from it):
 * 0x4000-0x7FFF bind and relay; 0x8000 and above still get 400. */
static void test_channel_numbers_default(void **state)
{
	struct hturn c;
	struct sockaddr_storage other;	/* admitted by the "self" cluster, any port */

	(void)state;
	harness_addr("127.0.0.4", 9, &other);
	client(&c, &g.srv, false);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_int_equal(hturn_channel_bind(&c, 0x5000, sa(&g.echo.addr)), 0);
	assert_true(raw_chan_roundtrip(&c, 0x5000, "legacy"));
	assert_int_equal(hturn_channel_bind(&c, 0x7fff, sa(&other)), 0);
	assert_int_equal(hturn_channel_bind(&c, 0x8000, sa(&g.echo.addr)), 400);
	assert_int_equal(hturn_channel_bind(&c, 0x4000, sa(&other)), 400); /* peer taken */
	assert_true(raw_chan_roundtrip(&c, 0x5000, "still"));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

static void test_port_range_denial(void **state)
{
	struct hturn c;

	(void)state;
	client(&c, &g.srv, false);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	/* Permissions are per IP: 127.0.0.1 is admitted... */
	assert_int_equal(hturn_permission(&c, sa(&g.echo.addr)), 0);
	/* ...but only the echo port is in the cluster's port range: data to echo2 is dropped
	 * (it would echo back), data to echo (positive control) flows. */
	assert_false(echo_roundtrip(&c, 0, &g.echo2.addr, "out-of-range"));
	assert_true(echo_roundtrip(&c, 0, &g.echo.addr, "in-range"));
	/* A channel names its port: one outside the range is refused at the bind (403), not
	 * bound and then silently dropped (#37). */
	assert_int_equal(hturn_channel_bind(&c, 0x4020, sa(&g.echo2.addr)), 403);
	assert_false(echo_roundtrip(&c, 0x4020, NULL, "out-of-range-channel"));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

/* Inbound direction: an unadmitted source reaching the relay port is dropped. */
static void test_inbound_denial(void **state)
{
	struct hturn c;
	struct sockaddr_storage src;
	socklen_t sl;
	char buf[64];
	uint16_t ch;
	int fd_ok, fd_bad, n;

	(void)state;
	client(&c, &g.srv, false);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_int_equal(hturn_permission(&c, sa(&g.echo.addr)), 0);
	/* A socket bound to the admitted echo port is impossible (echo holds it); use the
	 * echo itself as positive control and a fresh 127.0.0.1 port as the unadmitted one. */
	fd_bad = socket(AF_INET, SOCK_DGRAM, 0);
	sl = harness_addr("127.0.0.1", 0, &src);
	assert_int_equal(bind(fd_bad, sa(&src), sl), 0);
	assert_int_equal(sendto(fd_bad, "intruder", 8, 0, sa(&c.relay), sizeof(struct sockaddr_in)),
			 8);
	n = hturn_recv_data(&c, buf, sizeof(buf), &ch, NULL, 800);
	assert_int_equal(n, -ETIMEDOUT);
	/* positive control: the admitted peer's traffic arrives */
	assert_true(echo_roundtrip(&c, 0, &g.echo.addr, "admitted"));
	fd_ok = -1;
	(void)fd_ok;
	close(fd_bad);
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

/* Symmetric ICE: two allocations, on different workers when there are several, relay to
 * each other's relayed addresses. */
static void test_symmetric(void **state)
{
	struct hturn c[16];
	int a = -1, b = -1, n = 0;
	uint16_t mid = RELAY_MIN + (RELAY_MAX - RELAY_MIN + 1) / 2;
	char buf[64];
	uint16_t ch;
	struct sockaddr_storage from;

	(void)state;
	for (n = 0; n < 16; n++) {
		client(&c[n], &g.srv, false);
		assert_int_equal(hturn_allocate(&c[n], NULL, NULL), 0);
		if (a < 0)
			a = n;
		else if (g.workers < 2 ||
			 (harness_port(&c[a].relay) < mid) != (harness_port(&c[n].relay) < mid))
			b = n;
		if (b >= 0) {
			n++;
			break;
		}
	}
	assert_true(b >= 0);
	assert_int_equal(hturn_permission(&c[a], sa(&c[b].relay)), 0);
	assert_int_equal(hturn_permission(&c[b], sa(&c[a].relay)), 0);
	assert_int_equal(hturn_send(&c[a], sa(&c[b].relay), "ping", 4), 0);
	assert_int_equal(hturn_recv_data(&c[b], buf, sizeof(buf), &ch, &from, 2000), 4);
	assert_memory_equal(buf, "ping", 4);
	/* The source is the announced relay address of a: relay sockets bind to it. */
	assert_int_equal(harness_port(&from), harness_port(&c[a].relay));
	assert_memory_equal(&((struct sockaddr_in *)&from)->sin_addr,
			    &((struct sockaddr_in *)&c[a].relay)->sin_addr, 4);
	assert_int_equal(hturn_channel_bind(&c[b], 0x4444, sa(&c[a].relay)), 0);
	assert_int_equal(hturn_chan_send(&c[b], 0x4444, "pong", 4), 0);
	assert_int_equal(hturn_recv_data(&c[a], buf, sizeof(buf), &ch, &from, 2000), 4);
	assert_memory_equal(buf, "pong", 4);
	for (int i = 0; i < n; i++) {
		assert_int_equal(hturn_refresh(&c[i], 0), 0);
		hturn_close(&c[i]);
	}
}

static void test_tcp(void **state)
{
	struct hturn c;

	(void)state;
	client(&c, &g.srv, true);
	assert_int_equal(hturn_request(&c, STUN_BINDING, NULL, NULL, false), 0);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_int_equal(hturn_permission(&c, sa(&g.echo.addr)), 0);
	assert_true(echo_roundtrip(&c, 0, &g.echo.addr, "tcp-send"));
	assert_true(big_roundtrip(&c, 0, &g.echo.addr));
	assert_int_equal(hturn_channel_bind(&c, 0x4100, sa(&g.echo.addr)), 0);
	assert_true(echo_roundtrip(&c, 0x4100, NULL, "tcp-chan"));
	assert_true(echo_roundtrip(&c, 0x4100, NULL, "pad"));
	assert_true(big_roundtrip(&c, 0x4100, NULL));
	/* Closing the connection ends the allocation. */
	assert_int_equal(wait_allocations(1), 1);
	hturn_close(&c);
	assert_int_equal(wait_allocations(0), 0);
	client(&c, &g.srv, true);
	assert_int_equal(hturn_refresh(&c, 600), 437);
	hturn_close(&c);
}

static void test_ipv6(void **state)
{
	struct hturn c;
	char ip[64];

	(void)state;
	client(&c, &g.srv6, false);
	assert_int_equal(hturn_allocate(&c, req_v6, NULL), 0);
	assert_int_equal(c.relay.ss_family, AF_INET6);
	inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&c.relay)->sin6_addr, ip, sizeof(ip));
	assert_string_equal(ip, "::1");
	assert_int_equal(hturn_permission(&c, sa(&g.echo6.addr)), 0);
	assert_true(echo_roundtrip(&c, 0, &g.echo6.addr, "v6-send"));
	assert_true(big_roundtrip(&c, 0, &g.echo6.addr));
	assert_int_equal(hturn_channel_bind(&c, 0x4600, sa(&g.echo6.addr)), 0);
	assert_true(echo_roundtrip(&c, 0x4600, NULL, "v6-chan"));
	assert_true(big_roundtrip(&c, 0x4600, NULL));
	assert_int_equal(hturn_permission(&c, sa(&g.echo.addr)), 443);
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

/* SIGTERM makes the master drain: without an alternate server new Allocates get 403 while
 * live allocations keep working. Runs last: the daemon is stopping afterwards. */
static void test_drain_403(void **state)
{
	struct hturn c, d;

	(void)state;
	client(&c, &g.srv, false);
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	kill(g.h.pid, SIGTERM);
	client(&d, &g.srv, false);
	assert_int_equal(hturn_allocate_until(&d, 403), 403);
	assert_int_equal(hturn_permission(&c, sa(&g.echo.addr)), 0);
	assert_true(echo_roundtrip(&c, 0, &g.echo.addr, "draining"));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
	hturn_close(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_binding_fingerprint),
		cmocka_unit_test(test_unknown_attribute_420),
		cmocka_unit_test(test_auth_challenge_and_errors),
		cmocka_unit_test(test_auth_sha256),
		cmocka_unit_test(test_wrong_username_441),
		cmocka_unit_test(test_rest_credentials),
		cmocka_unit_test(test_auth_none_binding_only),
		cmocka_unit_test(test_allocate_errors),
		cmocka_unit_test(test_allocate_437_and_retransmit),
		cmocka_unit_test(test_allocate_relayed_address),
		cmocka_unit_test(test_dual_allocation),
		cmocka_unit_test(test_dont_fragment),
		cmocka_unit_test(test_asymmetric_udp),
		cmocka_unit_test(test_permission_errors),
		cmocka_unit_test(test_channel_bind_rules),
		cmocka_unit_test(test_channel_numbers_default),
		cmocka_unit_test(test_port_range_denial),
		cmocka_unit_test(test_inbound_denial),
		cmocka_unit_test(test_symmetric),
		cmocka_unit_test(test_tcp),
		cmocka_unit_test(test_ipv6),
		cmocka_unit_test(test_drain_403),
	};

	const char *nw = getenv("TG_WORKERS");
	int failed = 0;

	/* The whole group with 1 worker, then with 2 (TG_WORKERS picks one). */
	for (unsigned workers = 1; workers <= 2; workers++) {
		if (nw && (unsigned)atoi(nw) != workers)
			continue;
		g.workers = workers;
		fprintf(stderr, "==== turngated with %u worker(s)\n", workers);
		failed += cmocka_run_group_tests(tests, group_setup, group_teardown);
	}
	/* The strict channel range needs its own daemon (a config key); one worker. */
	const struct CMUnitTest strict[] = { cmocka_unit_test(test_channel_numbers_strict) };
	if (!nw || atoi(nw) == 1) {
		g.workers = 1;
		g.strict_channels = true;
		fprintf(stderr, "==== turngated with limits.channel_numbers: rfc8656\n");
		failed += cmocka_run_group_tests(strict, group_setup, group_teardown);
	}
	return failed ? 1 : 0;
}
