/* Master integration tests under relay traffic: reloads that rotate secrets and add/remove
 * listeners while allocations relay, SIGTERM drain, kill -9 of one worker, admin listing
 * and disconnect of live allocations. Real turngated, loopback only, every wait bounded. */
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "stun/stun.h"
#include "stun/stun_auth.h"
#include "tests/integration/harness.h"
#include "tests/integration/harness_admin.h"

/* Below the kernel's ephemeral ports (32768-60999): the daemon binds these again after
 * a worker's kill -9, and a socket bound to port 0 meanwhile (a test beside this one)
 * could take one: "cannot rebind its relay port", the allocation lost. */
#define RELAY_MIN 25000
#define RELAY_MAX 25999
#define N_ALLOCS 50
#define N_RELOADS 20
#define CHAN 0x4000

struct fx {
	struct harness h;
	struct harness_echo echo;
	uint16_t p1, p2;
	struct sockaddr_storage srv, srv2;
};

static struct fx g;

/* Config of reload round `round`: secret-<round> is current, secret-<round-1> the previous
 * one until prev_until (0: no previous secret). Odd rounds add the "extra" listener and a
 * second routed cluster and raise a log level; even rounds take them away again. */
static void write_conf(int round, int64_t prev_until)
{
	char yaml[4096], prev[160] = "", extra[256] = "";
	bool odd = round % 2 == 1;
	int n;

	if (prev_until != 0)
		snprintf(prev, sizeof(prev),
			 "  previous_secret: secret-%d\n  previous_secret_until: %lld\n", round - 1,
			 (long long)prev_until);
	if (odd)
		snprintf(extra, sizeof(extra),
			 "  - name: extra\n    protocol: TURN-UDP\n    address: 127.0.0.1\n"
			 "    port: %u\n    routes: [echo]\n",
			 g.p2);
	n = snprintf(yaml, sizeof(yaml),
		     "version: v1\n"
		     "admin:\n"
		     "  name: mtest\n"
		     "  loglevel: %s\n"
		     "  healthcheck_endpoint: \"\"\n"
		     "  admin_socket: %s\n"
		     "  relay_port_min: %d\n"
		     "  relay_port_max: %d\n"
		     "  drain_timeout: 30\n"
		     "auth:\n"
		     "  type: ephemeral\n"
		     "  realm: mtest.example\n"
		     "  credentials:\n"
		     "    secret: secret-%d\n"
		     "%s"
		     "listeners:\n"
		     "  - name: main\n"
		     "    protocol: TURN-UDP\n"
		     "    address: 127.0.0.1\n"
		     "    port: %u\n"
		     "    routes: [%s]\n"
		     "%s"
		     "clusters:\n"
		     "  - name: echo\n"
		     "    type: STATIC\n"
		     "    endpoints: [127.0.0.1]\n"
		     "%s"
		     /* Stale secrets are presented from 127.0.0.1 on purpose, more often
		      * than the guessing budget lets one address fail (test_security_guessing
		      * tests that budget). */
		     "limits:\n"
		     "  auth_fail_prefix: 0\n",
		     odd ? "all:INFO,master:DEBUG" : "all:INFO", g.h.sock, RELAY_MIN, RELAY_MAX,
		     round, prev, g.p1, odd ? "echo, other" : "echo", extra,
		     odd ? "  - name: other\n    type: STATIC\n    endpoints: [10.0.0.0/8]\n" : "");
	assert_true(n > 0 && (size_t)n < sizeof(yaml));
	assert_int_equal(harness_write_config(&g.h, yaml), 0);
}

static int setup(void **state)
{
	(void)state;
	memset(&g, 0, sizeof(g));
	if (harness_init(&g.h) < 0 || harness_echo_start("127.0.0.1", 0, &g.echo) < 0)
		return -1;
	/* Bound late: p1 again by test_kill9_other_worker_keeps_relaying's start after the
	 * drain test's stop, p2 by every odd reload round (10 times); a port of the kernel's
	 * port-0 range could be taken by any socket bound to port 0 in between. */
	g.p1 = harness_free_port_late();
	g.p2 = harness_free_port_late();
	if (g.p1 == 0 || g.p2 == 0)
		return -1; /* the harness said why */
	harness_addr("127.0.0.1", g.p1, &g.srv);
	harness_addr("127.0.0.1", g.p2, &g.srv2);
	write_conf(0, 0);
	return harness_start(&g.h, 2, sa(&g.srv)) == 0 ? 0 : -1;
}

/* A client authenticated with a REST credential minted under secret-<secret_round>. */
static int alloc_with(struct hturn *c, int secret_round, const char *user)
{
	char name[64], pass[64], secret[32];

	snprintf(secret, sizeof(secret), "secret-%d", secret_round);
	assert_int_equal(stun_rest_mint((const uint8_t *)secret, strlen(secret), user,
					(uint64_t)time(NULL) + 3600, name, sizeof(name), pass,
					sizeof(pass)),
			 0);
	assert_int_equal(hturn_open(c, sa(&g.srv), false), 0);
	hturn_set_user(c, name, pass);
	return hturn_allocate(c, NULL, NULL);
}

/* One new allocation under secret-<secret_round>: its result, and it is deleted again. */
static int try_secret(int secret_round)
{
	static struct hturn c; /* not harness_clients(): the caller's clients stay open */
	int rc;

	rc = alloc_with(&c, secret_round, "probe");
	if (rc == 0)
		assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
	return rc;
}

static bool echo_round(struct hturn *c, int round, int i)
{
	char msg[32], buf[64];
	uint16_t ch = 0;
	int n;

	snprintf(msg, sizeof(msg), "r%d-a%d", round, i);
	if (hturn_chan_send(c, CHAN, msg, strlen(msg)) < 0)
		return false;
	n = hturn_recv_data(c, buf, sizeof(buf), &ch, NULL, 3000);
	return n == (int)strlen(msg) && ch == CHAN && memcmp(buf, msg, (size_t)n) == 0;
}

static void wait_generation(long long want)
{
	for (int i = 0; i < 500; i++) {
		if (hadmin_status_int(g.h.sock, "generation") >= want)
			return;
		usleep(20000);
	}
	fail_msg("generation %lld never reached", want);
}

/* Allocations end in their workers, asynchronously to the client's view: bounded wait. */
static void wait_allocations(long long want)
{
	if (hadmin_wait_status_int(g.h.sock, "allocations", want, 500, 20) != want)
		fail_msg("allocation count never reached %lld (now %lld)", want,
			 hadmin_status_int(g.h.sock, "allocations"));
}

/* Binding on the extra listener until it answers (want) or stays silent (!want). */
static void wait_extra(bool want)
{
	for (int i = 0; i < 25; i++) {
		if ((harness_stun_binding(sa(&g.srv2), 200) == 0) == want)
			return;
	}
	fail_msg("extra listener %s", want ? "never answered" : "kept answering");
}

static void test_reload_under_traffic(void **state)
{
	struct hturn *c = harness_clients(&g.h, N_ALLOCS);
	long long gen = hadmin_status_int(g.h.sock, "generation");
	char user[16];

	(void)state;
	assert_true(gen >= 1);
	for (int i = 0; i < N_ALLOCS; i++) {
		snprintf(user, sizeof(user), "user%d", i);
		assert_int_equal(alloc_with(&c[i], 0, user), 0);
		assert_int_equal(hturn_channel_bind(&c[i], CHAN, sa(&g.echo.addr)), 0);
		assert_true(echo_round(&c[i], 0, i));
	}
	for (int round = 1; round <= N_RELOADS; round++) {
		write_conf(round, (int64_t)time(NULL) + 3600);
		kill(g.h.pid, SIGHUP);
		/* Traffic while the master reloads, then again once the new generation is live. */
		for (int i = 0; i < N_ALLOCS; i++)
			assert_true(echo_round(&c[i], round, i));
		wait_generation(gen + round);
		for (int i = 0; i < N_ALLOCS; i++)
			assert_true(echo_round(&c[i], round, i));
		/* Credentials: the new secret and the previous one verify, older ones do not. */
		assert_int_equal(try_secret(round), 0);
		assert_int_equal(try_secret(round - 1), 0);
		if (round >= 2)
			assert_int_equal(try_secret(round - 2), 401);
		wait_extra(round % 2 == 1);
	}
	/* The previous secret's grace deadline has passed: it stops verifying. */
	write_conf(N_RELOADS + 1, (int64_t)time(NULL) - 10);
	kill(g.h.pid, SIGHUP);
	wait_generation(gen + N_RELOADS + 1);
	assert_int_equal(try_secret(N_RELOADS), 401);
	assert_int_equal(try_secret(N_RELOADS + 1), 0);
	/* Allocations made under secret-0 keep refreshing (stored key) and relaying. The
	 * probe allocations of try_secret() end in their workers asynchronously. */
	wait_allocations(N_ALLOCS);
	for (int i = 0; i < N_ALLOCS; i++) {
		assert_int_equal(hturn_refresh(&c[i], 600), 0);
		assert_true(echo_round(&c[i], 99, i));
	}
	for (int i = 0; i < N_ALLOCS; i++) {
		assert_int_equal(hturn_refresh(&c[i], 0), 0);
		hturn_close(&c[i]);
	}
	wait_allocations(0);
}

static void test_admin_allocations_and_disconnect(void **state)
{
	struct hturn *c = harness_clients(&g.h, 2);
	json_t *r, *a;
	char req[128];
	long long id;

	long long gen = hadmin_status_int(g.h.sock, "generation");

	(void)state;
	write_conf(0, 0);
	kill(g.h.pid, SIGHUP);
	wait_generation(gen + 1);
	assert_int_equal(alloc_with(&c[0], 0, "alice"), 0);
	assert_int_equal(alloc_with(&c[1], 0, "bob"), 0);
	assert_int_equal(hturn_channel_bind(&c[0], CHAN, sa(&g.echo.addr)), 0);
	assert_true(echo_round(&c[0], 1, 0));

	r = hadmin_call(g.h.sock, "{\"cmd\":\"allocations\",\"user\":\"alice\"}");
	assert_non_null(r);
	assert_int_equal(json_array_size(json_object_get(r, "allocations")), 1);
	a = json_array_get(json_object_get(r, "allocations"), 0);
	assert_non_null(strstr(json_string_value(json_object_get(a, "user")), ":alice"));
	assert_string_equal(json_string_value(json_object_get(a, "listener")), "main");
	assert_string_equal(json_string_value(json_object_get(a, "transport")), "udp");
	assert_int_equal(json_array_size(json_object_get(a, "channels")), 1);
	assert_int_equal(json_array_size(json_object_get(a, "permissions")), 1);
	assert_true(json_integer_value(json_object_get(json_object_get(a, "to_peer"), "packets")) >=
		    1);
	assert_true(json_real_value(json_object_get(a, "lifetime_left")) > 0);
	id = json_integer_value(json_object_get(a, "id"));
	json_decref(r);

	snprintf(req, sizeof(req), "{\"cmd\":\"disconnect\",\"id\":%lld}", id);
	r = hadmin_call(g.h.sock, req);
	assert_true(json_is_true(json_object_get(r, "ok")));
	json_decref(r);
	r = hadmin_call(g.h.sock, "{\"cmd\":\"disconnect\",\"user\":\"bob\"}");
	assert_int_equal(json_integer_value(json_object_get(r, "disconnected")), 1);
	json_decref(r);
	/* Both end (asynchronously, in their workers), then a refresh gets 437. */
	wait_allocations(0);
	assert_int_equal(hturn_refresh(&c[0], 600), 437);
	assert_int_equal(hturn_refresh(&c[1], 600), 437);
	hturn_close(&c[0]);
	hturn_close(&c[1]);
}

/* SIGTERM: new Allocates are refused, the existing allocation keeps relaying, and the
 * daemon exits 0 by itself once it has ended. */
static void test_sigterm_drain(void **state)
{
	struct hturn *c = harness_clients(&g.h, 2);
	int rc = 0, st = 0;

	(void)state;
	assert_int_equal(alloc_with(&c[0], 0, "carol"), 0);
	assert_int_equal(hturn_channel_bind(&c[0], CHAN, sa(&g.echo.addr)), 0);
	assert_true(echo_round(&c[0], 1, 0));
	kill(g.h.pid, SIGTERM);
	/* The drain order reaches the workers asynchronously: retry (bounded) until refused. */
	for (int i = 0; i < 100; i++) {
		rc = alloc_with(&c[1], 0, "dave");
		if (rc == 0)
			hturn_refresh(&c[1], 0);
		hturn_close(&c[1]);
		if (rc != 0)
			break;
		usleep(20000);
	}
	assert_int_equal(rc, 403);
	for (int i = 0; i < 5; i++)
		assert_true(echo_round(&c[0], 2, i));
	assert_int_equal(waitpid(g.h.pid, &st, WNOHANG), 0); /* still serving carol */
	assert_int_equal(hturn_refresh(&c[0], 0), 0);
	hturn_close(&c[0]);
	for (int i = 0; i < 750 && waitpid(g.h.pid, &st, WNOHANG) == 0; i++)
		usleep(20000);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	g.h.pid = 0;
	assert_int_equal(harness_stop(&g.h), 0); /* scans the log */
}

/* kill -9 of worker 0: worker 1's allocations keep relaying, slot 0 comes back. */
static void test_kill9_other_worker_keeps_relaying(void **state)
{
	struct hturn *c = harness_clients(&g.h, 16);
	int owner[16], n, on1 = 0, pid0, pid1;
	char user[16];

	(void)state;
	write_conf(0, 0);
	assert_int_equal(harness_start(&g.h, 2, sa(&g.srv)), 0);
	for (n = 0; n < 16; n++) {
		snprintf(user, sizeof(user), "k%d", n);
		assert_int_equal(alloc_with(&c[n], 0, user), 0);
		assert_int_equal(hturn_channel_bind(&c[n], CHAN, sa(&g.echo.addr)), 0);
		owner[n] = hadmin_owner_of(g.h.sock, "udp", hturn_local_port(&c[n]));
		assert_true(owner[n] == 0 || owner[n] == 1);
		on1 += owner[n] == 1;
		if (on1 > 0 && on1 < n + 1) {
			n++;
			break;
		}
	}
	assert_true(on1 > 0 && on1 < n);
	pid0 = hadmin_worker_pid(g.h.sock, 0, NULL);
	assert_true(pid0 > 0);
	kill(pid0, SIGKILL);
	for (int i = 0; i < n; i++)
		if (owner[i] == 1)
			assert_true(echo_round(&c[i], 1, i));
	/* One sample per poll: two queries could see slot 0 still running pid0 (not reaped
	 * yet) and then starting its successor (not READY yet), neither of them the new pid. */
	pid1 = hadmin_wait_worker_replaced(g.h.sock, 0, pid0, 500, 20);
	assert_true(pid1 > 0 && pid1 != pid0);
	for (int i = 0; i < n; i++)
		if (owner[i] == 1)
			assert_true(echo_round(&c[i], 2, i));
	for (int i = 0; i < n; i++) {
		hturn_refresh(&c[i], 0); /* slot 0's may be gone (437): either is fine here */
		hturn_close(&c[i]);
	}
	/* Stop by hand: the log has exactly the one death this test caused, nothing else. */
	assert_int_equal(harness_stop_killed(&g.h, 1), 0);
}

static int teardown_killed(void **state)
{
	(void)state;
	harness_teardown_killed(&g.h, &g.echo);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reload_under_traffic),
		cmocka_unit_test(test_admin_allocations_and_disconnect),
		cmocka_unit_test(test_sigterm_drain),
		cmocka_unit_test(test_kill9_other_worker_keeps_relaying),
	};

	return cmocka_run_group_tests(tests, setup, teardown_killed);
}
