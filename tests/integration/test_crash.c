/* Worker crash survival: 100 UDP allocations relaying through 2 workers, kill -9 of one
 * worker 5 times; its allocations are re-adopted by the respawned worker and relay again,
 * refresh and CreatePermission still work, its TCP allocation is released, counters stay
 * exact. The relaying gap of each kill is printed (not asserted: timing). Real turngated,
 * loopback only, every wait bounded. */
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

#include "common/mono.h"
#include "stun/stun.h"
#include "stun/stun_auth.h"
#include "tests/integration/harness.h"
#include "tests/integration/harness_admin.h"

/* Below the kernel's ephemeral ports (32768-60999): the daemon binds these again after
 * a worker's kill -9, and a socket bound to port 0 meanwhile (a test beside this one)
 * could take one: "cannot rebind its relay port", the allocation lost. */
#define RELAY_MIN 26000
#define RELAY_MAX 26999
#define N_ALLOCS 100
#define N_KILLS 5
#define CHAN 0x4000
/* The master respawns at once a worker that ran this long (master/supervise.c). */
#define UPTIME_FOR_IMMEDIATE_RESPAWN 2.2

struct fx {
	struct harness h;
	struct harness_echo echo;
	uint16_t pu, pt;
	struct sockaddr_storage srv, srvt;
};

static struct fx g;

static double now_s(void)
{
	return (double)mono_ns() / 1e9;
}

static int setup(void **state)
{
	char yaml[2048];
	int n;

	(void)state;
	memset(&g, 0, sizeof(g));
	if (harness_init(&g.h) < 0 || harness_echo_start("127.0.0.1", 0, &g.echo) < 0)
		return -1;
	g.pu = harness_free_port();
	g.pt = harness_free_port();
	harness_addr("127.0.0.1", g.pu, &g.srv);
	harness_addr("127.0.0.1", g.pt, &g.srvt);
	n = snprintf(yaml, sizeof(yaml),
		     "version: v1\n"
		     "admin:\n"
		     "  name: crash\n"
		     "  loglevel: all:INFO\n"
		     "  healthcheck_endpoint: \"\"\n"
		     "  admin_socket: %s\n"
		     "  relay_port_min: %d\n"
		     "  relay_port_max: %d\n"
		     "auth:\n"
		     "  type: ephemeral\n"
		     "  realm: crash.example\n"
		     "  credentials:\n"
		     "    secret: crash-secret\n"
		     "listeners:\n"
		     "  - name: udp\n"
		     "    protocol: TURN-UDP\n"
		     "    address: 127.0.0.1\n"
		     "    port: %u\n"
		     "    routes: [echo]\n"
		     "  - name: tcp\n"
		     "    protocol: TURN-TCP\n"
		     "    address: 127.0.0.1\n"
		     "    port: %u\n"
		     "    routes: [echo]\n"
		     "clusters:\n"
		     "  - name: echo\n"
		     "    type: STATIC\n"
		     "    endpoints: [127.0.0.1]\n",
		     g.h.sock, RELAY_MIN, RELAY_MAX, g.pu, g.pt);
	if (n <= 0 || (size_t)n >= sizeof(yaml))
		return -1;
	return harness_launch(&g.h, yaml, 2, sa(&g.srv));
}

static int teardown(void **state)
{
	(void)state;
	harness_teardown_killed(&g.h, &g.echo);
	return 0;
}

static int alloc_user(struct hturn *c, const struct sockaddr *srv, bool tcp, const char *user)
{
	const char *secret = "crash-secret";
	char name[64], pass[64];

	assert_int_equal(stun_rest_mint((const uint8_t *)secret, strlen(secret), user,
					(uint64_t)time(NULL) + 3600, name, sizeof(name), pass,
					sizeof(pass)),
			 0);
	if (hturn_open(c, srv, tcp) < 0)
		return -1;
	hturn_set_user(c, name, pass);
	return hturn_allocate(c, NULL, NULL);
}

/* One ChannelData out, and its echo back within timeout_ms, skipping stale echoes of
 * earlier probes however many there are: while a killed worker is being replaced,
 * kill_and_measure() sends a probe every ~2 ms and all of them come back once the slot
 * serves again (a 750 ms respawn under load leaves ~370 in the client's socket). */
static bool echo_once(struct hturn *c, const char *msg, int timeout_ms)
{
	char buf[128];
	uint16_t ch = 0;
	size_t len = strlen(msg);
	double deadline = now_s() + timeout_ms / 1e3;

	if (hturn_chan_send(c, CHAN, msg, len) < 0)
		return false;
	for (int i = 0; i < 100000; i++) {
		int left = (int)((deadline - now_s()) * 1e3);
		int n = left > 0 ? hturn_recv_data(c, buf, sizeof(buf), &ch, NULL, left) : -1;

		if (n < 0)
			return false;
		if ((size_t)n == len && ch == CHAN && memcmp(buf, msg, len) == 0)
			return true;
	}
	return false;
}

/* Bounded retries: a datagram sent while the worker was down may be lost. */
static bool echo_retry(struct hturn *c, int round, int i)
{
	char msg[48];

	for (int t = 0; t < 5; t++) {
		snprintf(msg, sizeof(msg), "r%d-a%d-t%d", round, i, t);
		if (echo_once(c, msg, 1000))
			return true;
	}
	return false;
}

static void wait_allocations(long long want)
{
	if (hadmin_wait_status_int(g.h.sock, "allocations", want, 500, 20) != want)
		fail_msg("allocation count never reached %lld (now %lld)", want,
			 hadmin_status_int(g.h.sock, "allocations"));
}

/* Kills the worker in `victim` and returns the gap: from the kill to the first echo
 * relayed for an allocation of that worker (probe sent every ~2 ms). */
static double kill_and_measure(int victim, struct hturn *probe, int round)
{
	double up = 0, t0, gap = -1;
	int pid = 0, np;
	char msg[48], prefix[24];

	/* Let the worker serve long enough that the master respawns it at once (a faster
	 * crash loop backs off, by design). */
	for (int i = 0; i < 300; i++) {
		pid = hadmin_worker_pid(g.h.sock, victim, &up);
		if (pid > 0 && up >= UPTIME_FOR_IMMEDIATE_RESPAWN)
			break;
		usleep(20000);
	}
	assert_true(pid > 0);
	t0 = now_s();
	assert_int_equal(kill(pid, SIGKILL), 0);
	snprintf(prefix, sizeof(prefix), "gap-r%d-", round);
	for (int t = 0; t < 2500 && gap < 0; t++) {
		char buf[128];
		uint16_t ch = 0;
		int n;

		snprintf(msg, sizeof(msg), "%s%d", prefix, t);
		if (hturn_chan_send(probe, CHAN, msg, strlen(msg)) < 0)
			continue;
		/* Any probe's echo counts: those sent while the worker was down were queued
		 * on the slot's listening socket and are relayed once it is back. */
		n = hturn_recv_data(probe, buf, sizeof(buf) - 1, &ch, NULL, 2);
		if (n > 0 && ch == CHAN && (size_t)n > strlen(prefix) &&
		    memcmp(buf, prefix, strlen(prefix)) == 0)
			gap = now_s() - t0;
	}
	/* The slot shows the new pid once the master got its READY. */
	np = hadmin_wait_worker_replaced(g.h.sock, victim, pid, 500, 10);
	assert_true(np > 0 && np != pid);
	return gap;
}

static void check_counters(long long want_active, long long want_udp_active)
{
	/* Gauges: the respawned worker continues its slot's counters; adoption must neither
	 * count the adopted allocations again nor lose them. */
	for (int i = 0; i < 100; i++) {
		if (hadmin_stat(g.h.sock, NULL, "allocs_active") == want_active)
			break;
		usleep(20000);
	}
	assert_int_equal(hadmin_stat(g.h.sock, NULL, "allocs_active"), want_active);
	assert_int_equal(hadmin_stat(g.h.sock, "udp", "allocs_active"), want_udp_active);
	assert_int_equal(hadmin_stat(g.h.sock, "tcp", "allocs_active"),
			 want_active - want_udp_active);
	assert_int_equal(hadmin_status_int(g.h.sock, "allocations"), want_active);
}

static void test_kill9_readopts(void **state)
{
	struct hturn *c = harness_clients(&g.h, N_ALLOCS + 1);
	struct hturn *tc = &c[N_ALLOCS];
	int owner[N_ALLOCS], victim, n_victim = 0, probe = -1;
	long long adopted0;
	double gaps[N_KILLS];
	char user[32];

	(void)state;
	for (int i = 0; i < N_ALLOCS; i++) {
		snprintf(user, sizeof(user), "crash%d", i);
		assert_int_equal(alloc_user(&c[i], sa(&g.srv), false, user), 0);
		assert_int_equal(hturn_channel_bind(&c[i], CHAN, sa(&g.echo.addr)), 0);
		assert_true(echo_retry(&c[i], 0, i));
	}
	assert_int_equal(alloc_user(tc, sa(&g.srvt), true, "crash-tcp"), 0);
	victim = hadmin_owner_of(g.h.sock, "tcp", hturn_local_port(tc));
	assert_true(victim == 0 || victim == 1);
	for (int i = 0; i < N_ALLOCS; i++) {
		owner[i] = hadmin_owner_of(g.h.sock, "udp", hturn_local_port(&c[i]));
		assert_true(owner[i] == 0 || owner[i] == 1);
		if (owner[i] == victim) {
			n_victim++;
			if (probe < 0)
				probe = i;
		}
	}
	print_message("worker %d holds %d of %d UDP allocations and the TCP one\n", victim,
		      n_victim, N_ALLOCS);
	assert_true(n_victim > 0 && n_victim < N_ALLOCS);
	check_counters(N_ALLOCS + 1, N_ALLOCS);
	adopted0 = hadmin_stat(g.h.sock, NULL, "allocs_adopted");
	assert_int_equal(adopted0, 0);

	for (int round = 1; round <= N_KILLS; round++) {
		gaps[round - 1] = kill_and_measure(victim, &c[probe], round);
		print_message("kill %d: relaying gap %.1f ms (target < 200 ms)\n", round,
			      gaps[round - 1] * 1e3);
		for (int i = 0; i < N_ALLOCS; i++) {
			assert_true(echo_retry(&c[i], round, i));
			assert_int_equal(hturn_refresh(&c[i], 600), 0);
			assert_int_equal(hturn_permission(&c[i], sa(&g.echo.addr)), 0);
		}
		/* the TCP allocation died with its connection; everything else is counted
		 * exactly once */
		check_counters(N_ALLOCS, N_ALLOCS);
		assert_int_equal(hadmin_stat(g.h.sock, NULL, "allocs_adopted"),
				 (long long)n_victim * round);
		assert_int_equal(hadmin_stat(g.h.sock, NULL, "allocs_dropped"), 1);
		for (int i = 0; i < N_ALLOCS; i++)
			assert_int_equal(hadmin_owner_of(g.h.sock, "udp", hturn_local_port(&c[i])),
					 owner[i]);
	}
	/* relaying still correct after the last round, then a clean end */
	for (int i = 0; i < N_ALLOCS; i++) {
		assert_true(echo_retry(&c[i], 99, i));
		assert_int_equal(hturn_refresh(&c[i], 0), 0);
		hturn_close(&c[i]);
	}
	hturn_close(tc);
	wait_allocations(0);
	check_counters(0, 0);
	assert_int_equal(hadmin_stat(g.h.sock, NULL, "allocs_ended"),
			 hadmin_stat(g.h.sock, NULL, "allocs_created"));

	/* Stop by hand: the log has exactly the deaths this test caused, nothing else. */
	assert_int_equal(harness_stop_killed(&g.h, N_KILLS), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill9_readopts),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
