/* Integration tests of the relay's limits and lifetimes against the real turngated: expiry
 * of allocations, permissions, channels and nonces with short configured lifetimes,
 * per-user quota (486), relay port exhaustion (508), EVEN-PORT/RESERVATION-TOKEN, drain
 * with ALTERNATE-SERVER (300), and a STUNner config used unchanged.
 *
 * Lifetimes are seconds long and the waits leave a margin of a second or more on each
 * side, so scheduling noise cannot flip a verdict. A check that needs a lifetime still
 * running (a roundtrip through a 1 s permission, a refresh under a credential about to
 * expire) has no such margin: when it fails at a time the lifetime may have run out (the
 * machine stalled), the permission, channel or credential is made anew and the check tried
 * again, TRIES times in all, so that only a relay that refuses what it should pass fails
 * it. One worker, so that a reservation is always redeemed on the worker holding it. */
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

#include "common/mono.h"
#include "stun/stun.h"
#include "stun/stun_auth.h"
#include "tests/integration/harness.h"
#include "tests/integration/harness_admin.h"

/* 10 ports, so exhaustion is reachable; above the kernel's ephemeral range (32768..60999),
 * where no other socket on the machine can take one of them while the test counts. */
#define RELAY_MIN 65000
#define RELAY_MAX 65009

#define REST_SECRET "limits-secret"

/* permission_lifetime (1 s): a channel's traffic needs its permission too */
#define PERM_WINDOW_MS 1000
#define TRIES 5

struct fx {
	struct harness h;
	struct harness_echo echo;
	uint16_t port, port_strict, port_lax;
	struct sockaddr_storage srv, srv_strict, srv_lax;
};

static struct fx g;

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* sleep_ms with c's allocation kept (a Refresh every half second): a wait for a permission
 * or channel to expire must not lose the allocation (3 s, at most 4) to a late step on a
 * loaded machine (a refresh after a plain 3 s sleep got 437 in a full-suite run). */
static void sleep_alive(struct hturn *c, long ms)
{
	for (; ms > 0; ms -= 500) {
		sleep_ms(ms < 500 ? ms : 500);
		assert_int_equal(hturn_refresh(c, 4), 0);
	}
}

static void client(struct hturn *c, const char *user)
{
	assert_int_equal(hturn_open(c, sa(&g.srv), false), 0);
	hturn_set_user(c, user, "pw");
}

/* Sends payload to the echo (through channel ch, or a Send indication when ch is 0) and
 * waits until its echo comes back or wait_ms pass. Other payloads are skipped: a late echo of
 * an earlier try must not count for, or against, this one. */
static bool echo_roundtrip_wait(struct hturn *c, uint16_t ch, const char *payload, long wait_ms)
{
	uint64_t end = mono_ms() + (uint64_t)wait_ms;
	size_t len = strlen(payload);

	if (ch)
		assert_int_equal(hturn_chan_send(c, ch, payload, len), 0);
	else
		assert_int_equal(hturn_send(c, sa(&g.echo.addr), payload, len), 0);
	for (int i = 0; i < 32; i++) {
		uint64_t now = mono_ms();
		char buf[128];
		uint16_t got;
		int n;

		if (now >= end)
			break;
		n = hturn_recv_data(c, buf, sizeof(buf), &got, NULL, (int)(end - now));
		if (n < 0)
			break;
		if ((size_t)n == len && memcmp(buf, payload, len) == 0)
			return true;
	}
	return false;
}

static bool echo_roundtrip(struct hturn *c, uint16_t ch, const char *payload)
{
	return echo_roundtrip_wait(c, ch, payload, 800);
}

/* A permission for the echo (ch 0) or ChannelBind of ch to it. */
static int echo_enable(struct hturn *c, uint16_t ch)
{
	if (ch)
		return hturn_channel_bind(c, ch, sa(&g.echo.addr));
	return hturn_permission(c, sa(&g.echo.addr));
}

/* A roundtrip that must pass: through the permission (ch 0) or channel ch that echo_enable
 * made, answered at since (mono_ms). It waits until the permission may have expired at the
 * earliest (PERM_WINDOW_MS after since) and 800 ms at least, so a failure is only seen once
 * the window may be over: a stall of the test, the daemon or the echo is then told from a
 * relay that drops what it should pass by making the permission or channel anew and trying
 * again (TRIES in all). Returns false when every try failed. */
static bool echo_roundtrip_live(struct hturn *c, uint16_t ch, const char *payload, uint64_t since)
{
	for (int i = 0; i < TRIES; i++) {
		uint64_t now = mono_ms();
		long wait = 800;

		if (since + PERM_WINDOW_MS + 200 > now + 800)
			wait = (long)(since + PERM_WINDOW_MS + 200 - now);
		if (echo_roundtrip_wait(c, ch, payload, wait))
			return true;
		/* Only reached past the window: the relay may rightly have dropped it. The
		 * allocation (3 s) must outlast the tries too. */
		assert_int_equal(hturn_refresh(c, 4), 0);
		assert_int_equal(echo_enable(c, ch), 0);
		since = mono_ms();
	}
	return false;
}

/* echo_enable, then a roundtrip through it that must pass. */
static bool echo_enable_roundtrip(struct hturn *c, uint16_t ch, const char *payload)
{
	assert_int_equal(echo_enable(c, ch), 0);
	return echo_roundtrip_live(c, ch, payload, mono_ms());
}

static int limits_setup(void **state)
{
	char yaml[6144];
	char users[1024] = "";

	(void)state;
	for (int i = 0; i < 8; i++) {
		size_t n = strlen(users);

		snprintf(users + n, sizeof(users) - n, "    - username: u%d\n      password: pw\n",
			 i);
	}
	if (harness_init(&g.h) < 0 || harness_echo_start("127.0.0.1", 0, &g.echo) < 0)
		return -1;
	g.port = harness_free_port();
	g.port_strict = harness_free_port();
	g.port_lax = harness_free_port();
	harness_addr("127.0.0.4", g.port, &g.srv);
	harness_addr("127.0.0.4", g.port_strict, &g.srv_strict);
	harness_addr("127.0.0.4", g.port_lax, &g.srv_lax);
	snprintf(yaml, sizeof(yaml),
		 "version: v1\n"
		 "admin:\n"
		 "  healthcheck_endpoint: \"\"\n"
		 "  admin_socket: %s\n"
		 "  relay_port_min: %d\n"
		 "  relay_port_max: %d\n"
		 "  drain_timeout: 2\n"
		 "  alternate_server: 127.0.0.5:3478\n"
		 "auth:\n"
		 "  type: static\n"
		 "  realm: limits.example\n"
		 "  users:\n%s"
		 "limits:\n"
		 "  user_quota: 2\n"
		 "  allocation_lifetime: 3\n"
		 "  max_allocation_lifetime: 4\n"
		 "  permission_lifetime: 1\n"
		 "  channel_lifetime: 2\n"
		 "  nonce_lifetime: 2\n"
		 "listeners:\n"
		 "  - name: udp\n"
		 "    protocol: TURN-UDP\n"
		 "    address: 127.0.0.4\n"
		 "    port: %u\n"
		 "    routes: [peers]\n"
		 "  - name: strict\n"
		 "    protocol: TURN-UDP\n"
		 "    address: 127.0.0.4\n"
		 "    port: %u\n"
		 "    routes: [peers]\n"
		 "    auth:\n"
		 "      type: ephemeral\n"
		 "      realm: strict.example\n"
		 "      strict_expiry: true\n"
		 "      credentials:\n"
		 "        secret: " REST_SECRET "\n"
		 "  - name: lax\n"
		 "    protocol: TURN-UDP\n"
		 "    address: 127.0.0.4\n"
		 "    port: %u\n"
		 "    routes: [peers]\n"
		 "    auth:\n"
		 "      type: ephemeral\n"
		 "      realm: lax.example\n"
		 "      credentials:\n"
		 "        secret: " REST_SECRET "\n"
		 "clusters:\n"
		 "  - name: peers\n"
		 "    type: STATIC\n"
		 "    endpoints: [\"127.0.0.1\"]\n",
		 g.h.sock, RELAY_MIN, RELAY_MAX, users, g.port, g.port_strict, g.port_lax);
	return harness_launch(&g.h, yaml, 1, sa(&g.srv));
}

static int limits_teardown(void **state)
{
	(void)state;
	return harness_teardown(&g.h, &g.echo);
}

static void test_allocation_expiry(void **state)
{
	struct hturn c;

	(void)state;
	client(&c, "u0");
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_int_equal(c.lifetime, 3);	/* configured default */
	sleep_ms(4500);
	/* The timing wheel ended it: 437 (after a 438 for the aged nonce, answered). */
	assert_int_equal(hturn_refresh(&c, 3), 437);
	/* its relay port went back to the pool: a new allocation works */
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

static void test_permission_and_channel_expiry(void **state)
{
	struct hturn c;
	uint64_t since;

	(void)state;
	client(&c, "u0");
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_true(echo_enable_roundtrip(&c, 0, "fresh"));
	sleep_alive(&c, 2200);			/* permission (1 s) is gone */
	assert_false(echo_roundtrip(&c, 0, "expired-permission"));
	assert_true(echo_enable_roundtrip(&c, 0x4321, "channel"));
	sleep_alive(&c, 3000);			/* channel (2 s) and its permission are gone */
	assert_int_equal(echo_enable(&c, 0), 0);
	since = mono_ms();
	/* with the permission back, the channel stays gone */
	assert_false(echo_roundtrip(&c, 0x4321, "expired-channel"));
	assert_true(echo_roundtrip_live(&c, 0, "permission-again", since));
	/* the expired channel number is free again */
	assert_true(echo_enable_roundtrip(&c, 0x4321, "rebound"));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

static void test_stale_nonce_438(void **state)
{
	struct hturn c;
	struct stun_msg m;
	char old[128];
	int code = 0;

	(void)state;
	client(&c, "u1");
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	snprintf(old, sizeof(old), "%s", c.nonce);
	/* Refresh with the first nonce every second until it is stale: its lifetime (2 s) is
	 * counted in whole seconds, so it is stale 3 s after it was issued at the latest. Each
	 * success keeps the allocation 4 s more, so a late refresh on a loaded machine cannot
	 * lose it (a fixed wait against the 3 s default lifetime did: 437), and no fixed wait
	 * can miss the nonce's last second (2.5 s did: 0 instead of 438). */
	c.no_retry = true;
	for (int i = 0; i < 10 && code == 0; i++) {
		sleep_ms(1000);
		snprintf(c.nonce, sizeof(c.nonce), "%s", old);
		code = hturn_refresh(&c, 4);
	}
	assert_int_equal(code, 438);
	assert_int_equal(stun_msg_parse(&m, c.resp, c.resp_len), 0);
	assert_true(stun_msg_has(&m, STUN_ATTR_NONCE));
	assert_true(stun_msg_has(&m, STUN_ATTR_REALM));
	c.no_retry = false;
	assert_int_equal(hturn_refresh(&c, 4), 0);	/* 438 again, then the fresh nonce */
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

/* One run of test_rest_strict_expiry; false when a stall let the credential expire before
 * s could use it, so that the run proves nothing and is made anew. */
static bool rest_strict_try(void)
{
	struct hturn s, l;
	char user[64], pass[64];
	/* valid while the daemon's time(NULL) <= expiry: 3 s at least from here */
	uint64_t expiry = (uint64_t)time(NULL) + 3;
	int rc_s, rc_l, passed = 0;

	assert_int_equal(stun_rest_mint((const uint8_t *)REST_SECRET, strlen(REST_SECRET), "bob",
					expiry, user, sizeof(user), pass, sizeof(pass)),
			 0);
	assert_int_equal(hturn_open(&s, sa(&g.srv_strict), false), 0);
	assert_int_equal(hturn_open(&l, sa(&g.srv_lax), false), 0);
	hturn_set_user(&s, user, pass);
	hturn_set_user(&l, user, pass);
	rc_s = hturn_allocate(&s, NULL, NULL);
	rc_l = hturn_allocate(&l, NULL, NULL);
	/* Refreshed every 250 ms: s passes up to its expiry and is refused after it (a
	 * refusal before it is a failure); l goes on. */
	for (int i = 0; i < 40 && rc_s == 0 && rc_l == 0; i++) {
		sleep_ms(250);
		rc_s = hturn_refresh(&s, 4);
		if (rc_s != 0)
			break;
		passed++;
		assert_int_equal(hturn_refresh(&l, 4), 0);
	}
	assert_true(rc_s == 0 || rc_s == 401);
	assert_true(rc_l == 0 || rc_l == 401);
	assert_true(rc_s != 0 || rc_l != 0);		/* strict_expiry refused at last */
	assert_true((uint64_t)time(NULL) > expiry);	/* and not before the expiry */
	if (rc_l == 0 && passed > 0) {
		assert_int_equal(hturn_refresh(&s, 4), 401);	/* and from then on */
		assert_int_equal(hturn_refresh(&l, 4), 0);	/* l goes on */
		assert_int_equal(hturn_refresh(&l, 0), 0);
	} else if (rc_l == 0) {
		assert_int_equal(hturn_refresh(&l, 0), 0);
	}
	hturn_close(&s);
	hturn_close(&l);
	return rc_l == 0 && passed > 0;
}

/* A REST credential that expires during the allocation: with strict_expiry its requests
 * are refused from then on (401); without, the allocation goes on with its stored key. */
static void test_rest_strict_expiry(void **state)
{
	int tries = 1;

	(void)state;
	while (!rest_strict_try())
		assert_true(++tries <= TRIES);
}

static void test_user_quota_486(void **state)
{
	struct hturn c[3];

	(void)state;
	for (int i = 0; i < 3; i++)
		client(&c[i], "u2");
	assert_int_equal(hturn_allocate(&c[0], NULL, NULL), 0);
	assert_int_equal(hturn_allocate(&c[1], NULL, NULL), 0);
	assert_int_equal(hturn_allocate(&c[2], NULL, NULL), 486);
	assert_int_equal(hturn_refresh(&c[0], 0), 0);
	assert_int_equal(hturn_allocate(&c[2], NULL, NULL), 0);
	assert_int_equal(hturn_refresh(&c[1], 0), 0);
	assert_int_equal(hturn_refresh(&c[2], 0), 0);
	for (int i = 0; i < 3; i++)
		hturn_close(&c[i]);
}

static void even_port_r(struct stun_builder *b, void *arg)
{
	stun_build_even_port(b, arg != NULL);
}

static void with_token(struct stun_builder *b, void *arg)
{
	stun_build_reservation_token(b, *(uint64_t *)arg);
}

static void token_and_even(struct stun_builder *b, void *arg)
{
	stun_build_reservation_token(b, *(uint64_t *)arg);
	stun_build_even_port(b, false);
}

static void test_even_port_reservation(void **state)
{
	struct hturn a, b, e;
	struct stun_msg m;
	uint64_t token = 0, bogus = 0x0123456789abcdefull;

	(void)state;
	client(&e, "u3");
	assert_int_equal(hturn_allocate(&e, even_port_r, NULL), 0);
	assert_int_equal(harness_port(&e.relay) % 2, 0);
	client(&a, "u3");
	assert_int_equal(hturn_allocate(&a, even_port_r, (void *)1), 0);
	assert_int_equal(harness_port(&a.relay) % 2, 0);
	assert_int_equal(stun_msg_parse(&m, a.resp, a.resp_len), 0);
	assert_int_equal(stun_msg_get_reservation_token(&m, &token), 0);
	client(&b, "u4");
	assert_int_equal(hturn_allocate(&b, token_and_even, &token), 400);
	assert_int_equal(hturn_allocate(&b, with_token, &bogus), 508);
	assert_int_equal(hturn_allocate(&b, with_token, &token), 0);
	assert_int_equal(harness_port(&b.relay), harness_port(&a.relay) + 1);
	assert_int_equal(hturn_refresh(&a, 0), 0);
	assert_int_equal(hturn_refresh(&b, 0), 0);
	assert_int_equal(hturn_refresh(&e, 0), 0);
	hturn_close(&a);
	hturn_close(&b);
	hturn_close(&e);
}

static void test_no_relay_port_508(void **state)
{
	struct hturn c[12];
	int ok = 0, n;

	(void)state;
	for (n = 0; n < 12; n++) {
		int rc;
		char user[8];

		snprintf(user, sizeof(user), "u%d", n / 2 + 2);
		client(&c[n], user);
		rc = hturn_allocate(&c[n], NULL, NULL);
		if (rc == 508)
			break;
		assert_int_equal(rc, 0);
		ok++;
	}
	assert_int_equal(ok, RELAY_MAX - RELAY_MIN + 1);
	assert_int_equal(n, ok);
	for (int i = 0; i < ok; i++)
		assert_int_equal(hturn_refresh(&c[i], 0), 0);
	/* all returned: the failed client now succeeds */
	assert_int_equal(hturn_allocate(&c[n], NULL, NULL), 0);
	assert_int_equal(hturn_refresh(&c[n], 0), 0);
	for (int i = 0; i <= n; i++)
		hturn_close(&c[i]);
}

/* SIGTERM makes the master drain: new Allocates get 300 with ALTERNATE-SERVER, live
 * allocations keep working. Must run last in the group. */
static void test_drain_alternate_server(void **state)
{
	struct hturn c, d;
	struct stun_msg m;
	struct sockaddr_storage alt;
	char ip[64];

	(void)state;
	client(&c, "u0");
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	kill(g.h.pid, SIGTERM);
	client(&d, "u1");
	assert_int_equal(hturn_allocate_until(&d, 300), 300);
	assert_int_equal(stun_msg_parse(&m, d.resp, d.resp_len), 0);
	assert_int_equal(stun_msg_get_addr(&m, STUN_ATTR_ALTERNATE_SERVER, &alt), 0);
	inet_ntop(AF_INET, &((struct sockaddr_in *)&alt)->sin_addr, ip, sizeof(ip));
	assert_string_equal(ip, "127.0.0.5");
	assert_int_equal(harness_port(&alt), 3478);
	assert_int_equal(hturn_refresh(&c, 4), 0);	/* existing allocation still served */
	hturn_close(&c);
	hturn_close(&d);
}

/* ---- a STUNner config, unchanged (only STUNner keys; $STUNNER_ADDR expanded) ---- */

static const char stunner_yaml[] = "version: v1\n"
				   "admin:\n"
				   "  name: stunner/stunnerd\n"
				   "  loglevel: all:INFO\n"
				   "  healthcheck_endpoint: \"\"\n"
				   "%s"
				   "auth:\n"
				   "  type: plaintext\n"
				   "  realm: %s\n"
				   "  credentials:\n"
				   "    username: user1\n"
				   "    password: pw\n"
				   "listeners:\n"
				   "  - name: stunner/udp-gateway/udp-listener\n"
				   "    protocol: TURN-UDP\n"
				   "    public_address: 203.0.113.10\n"
				   "    public_port: 3478\n"
				   "    address: \"$STUNNER_ADDR\"\n"
				   "    port: %u\n"
				   "    routes: %s\n"
				   "clusters:\n"
				   "  - name: stunner/media-plane\n"
				   "    type: STATIC\n"
				   "    protocol: udp\n"
				   "    endpoints:\n"
				   "      - 127.0.0.1\n";

/* extensions: "" for the STUNner config as is; the reload group adds turngate's own
 * admin socket in the temp dir (its admin `status` tells when a reload is live). */
static const char *g_ext = "";

static int stunner_write(const char *realm, const char *routes)
{
	char yaml[2048];

	snprintf(yaml, sizeof(yaml), stunner_yaml, g_ext, realm, g.port, routes);
	return harness_write_config(&g.h, yaml);
}

static int stunner_start(bool isolated)
{
	static char ext[256];

	if (harness_init(&g.h) < 0 || harness_echo_start("127.0.0.1", 0, &g.echo) < 0)
		return -1;
	g_ext = "";
	if (isolated) {
		snprintf(ext, sizeof(ext), "  admin_socket: %s\n  drain_timeout: 1\n", g.h.sock);
		g_ext = ext;
	}
	g.port = harness_free_port();
	harness_addr("127.0.0.4", g.port, &g.srv);
	setenv("STUNNER_ADDR", "127.0.0.4", 1);
	/* The unchanged STUNner config names no state_dir: keep its table in the test's
	 * directory, not in /run/turngate shared with every other run on the machine. */
	setenv("TURNGATE_STATE_DIR", g.h.dir, 1);
	if (stunner_write("stunner.l7mp.io", "[stunner/media-plane]") < 0)
		return -1;
	return harness_start(&g.h, 2, sa(&g.srv)) == 0 ? 0 : -1;
}

static int stunner_setup(void **state)
{
	(void)state;
	return stunner_start(false);
}

static int reload_setup(void **state)
{
	(void)state;
	return stunner_start(true);
}

/* Sends SIGHUP and waits (60 s at most) until the admin socket reports a newer
 * generation, so the checks after it never race the reload. */
static void reload_and_wait(void)
{
	long long gen = hadmin_status_int(g.h.sock, "generation"), now = gen;

	assert_true(gen >= 1);
	kill(g.h.pid, SIGHUP);
	for (int i = 0; i < 600 && now <= gen; i++) {
		sleep_ms(100);
		now = hadmin_status_int(g.h.sock, "generation");
	}
	assert_true(now > gen);
}

static void test_stunner_config(void **state)
{
	struct hturn c;
	char ip[64];

	(void)state;
	client(&c, "user1");
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	inet_ntop(AF_INET, &((struct sockaddr_in *)&c.relay)->sin_addr, ip, sizeof(ip));
	assert_string_equal(ip, "127.0.0.4");
	assert_int_equal(c.lifetime, 600);
	assert_int_equal(hturn_permission(&c, sa(&g.echo.addr)), 0);
	assert_int_equal(hturn_channel_bind(&c, 0x4000, sa(&g.echo.addr)), 0);
	assert_true(echo_roundtrip(&c, 0x4000, "stunner"));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

/* A route removed by a reload stops live allocations' traffic at once (the per-packet
 * check reads the current snapshot), while the allocation itself survives. */
static void test_reload_removes_route(void **state)
{
	struct hturn c;

	(void)state;
	client(&c, "user1");
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_int_equal(hturn_channel_bind(&c, 0x4001, sa(&g.echo.addr)), 0);
	assert_true(echo_roundtrip(&c, 0x4001, "before-reload"));
	assert_int_equal(stunner_write("stunner.l7mp.io", "[]"), 0);
	reload_and_wait();
	/* Published: the very next packet is checked against the new snapshot. */
	assert_false(echo_roundtrip(&c, 0x4001, "after-reload"));
	assert_false(echo_roundtrip(&c, 0x4001, "still-dropped"));
	assert_int_equal(hturn_refresh(&c, 600), 0);	/* the allocation survived */
	assert_int_equal(hturn_permission(&c, sa(&g.echo.addr)), 403);
	/* and back */
	assert_int_equal(stunner_write("stunner.l7mp.io", "[stunner/media-plane]"), 0);
	reload_and_wait();
	assert_true(echo_roundtrip(&c, 0x4001, "restored"));
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
}

/* A reload that changes the realm keeps existing allocations: their requests are still
 * challenged with, and verified under, the realm and key they were made with; new
 * allocations use the new realm. */
static void test_reload_realm_change(void **state)
{
	struct hturn c, d;
	struct stun_msg m;
	char realm[64];

	(void)state;
	client(&c, "user1");
	assert_int_equal(hturn_allocate(&c, NULL, NULL), 0);
	assert_int_equal(stunner_write("new.example", "[stunner/media-plane]"), 0);
	reload_and_wait();
	client(&d, "user1");
	d.no_retry = true;
	assert_int_equal(hturn_allocate(&d, NULL, NULL), 401);
	assert_int_equal(stun_msg_parse(&m, d.resp, d.resp_len), 0);
	assert_int_equal(stun_msg_copy_string(&m, STUN_ATTR_REALM, realm, sizeof(realm)), 0);
	assert_string_equal(realm, "new.example");
	d.no_retry = false;
	assert_int_equal(hturn_allocate(&d, NULL, NULL), 0);
	assert_string_equal(d.realm, "new.example");
	/* the old allocation still refreshes with its own realm and key */
	assert_int_equal(hturn_refresh(&c, 600), 0);
	assert_string_equal(c.realm, "stunner.l7mp.io");
	assert_int_equal(hturn_refresh(&c, 0), 0);
	assert_int_equal(hturn_refresh(&d, 0), 0);
	hturn_close(&c);
	hturn_close(&d);
}

int main(void)
{
	const struct CMUnitTest limits[] = {
		cmocka_unit_test(test_allocation_expiry),
		cmocka_unit_test(test_permission_and_channel_expiry),
		cmocka_unit_test(test_stale_nonce_438),
		cmocka_unit_test(test_user_quota_486),
		cmocka_unit_test(test_even_port_reservation),
		cmocka_unit_test(test_no_relay_port_508),
		cmocka_unit_test(test_rest_strict_expiry),	/* leaves one allocation */
		cmocka_unit_test(test_drain_alternate_server),
	};
	const struct CMUnitTest stunner[] = {
		cmocka_unit_test(test_stunner_config),
	};
	const struct CMUnitTest reload[] = {
		cmocka_unit_test(test_stunner_config),
		cmocka_unit_test(test_reload_removes_route),
		cmocka_unit_test(test_reload_realm_change),
	};
	int failed = 0;

	failed += cmocka_run_group_tests_name("limits", limits, limits_setup, limits_teardown);
	failed += cmocka_run_group_tests_name("stunner", stunner, stunner_setup, limits_teardown);
	failed += cmocka_run_group_tests_name("reload", reload, reload_setup, limits_teardown);
	return failed ? 1 : 0;
}
