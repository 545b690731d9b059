/* Live upgrades that keep the calls (issue 19): 100 UDP allocations relaying 40 packets/s
 * each through the real turngated; SIGUSR2 to the master five times: each time a new
 * master (the same binary) inherits the listening sockets, takes the table over and the
 * old one exits. 0 allocations stalled, every allocation refreshes with its original
 * credentials and nonce, and no datagram is lost on the listener sockets (they are the same
 * sockets): what the clients sent and what came back are counted one by one, and the
 * loss, which can only be echoes that reached a relay port in the gap, is printed and
 * bounded far below what a lost listener queue would cost. Then `turngatectl upgrade`
 * (prints the new PID), and failed upgrades: a binary that exits at once, one that never
 * becomes ready, one that says it serves as pid 0 after "ready", and one that fails after
 * the old workers stopped (its config cannot bind a port the test holds): each time the
 * old master serves on and every allocation relays.
 * The test is a child subreaper, so each new master becomes its child when the old one
 * exits. The longest gap is printed, not asserted (timing). Loopback only, every wait
 * bounded. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/integration/calls.h"
#include "tests/integration/harness.h"
#include "tests/integration/harness_admin.h"

#define RELAY_MIN 56000
#define RELAY_MAX 56999
#define UPGRADE_WAIT_US 30000000

static char tmpfs_dir[64];

/* The state file on a tmpfs, as in production (/run): the segment's pages exist from the
 * start there, where a disk-backed /tmp faults each one in during the take-over. */
static int setup(void **state)
{
	(void)state;
	snprintf(tmpfs_dir, sizeof(tmpfs_dir), "/dev/shm/tg-upgrade-XXXXXX");
	if (mkdtemp(tmpfs_dir) == NULL)
		snprintf(tmpfs_dir, sizeof(tmpfs_dir), "%s", "");
	else
		setenv("TURNGATE_STATE_DIR", tmpfs_dir, 1);
	return calls_setup(RELAY_MIN, RELAY_MAX);
}

static int teardown(void **state)
{
	char cmd[128];

	calls_teardown(state);
	if (tmpfs_dir[0] != '\0') {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpfs_dir);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", tmpfs_dir);
	}
	unsetenv("TURNGATE_STATE_DIR");
	return 0;
}

/* The old master exits 0 once the new one serves; the new one answers on the socket. */
static void wait_handover(pid_t old, long long t0)
{
	int st = -1;
	pid_t r;
	long long pid;

	while ((r = waitpid(old, &st, WNOHANG)) == 0 && now_us() - t0 < UPGRADE_WAIT_US)
		load(20000, 0);
	assert_int_equal(r, old);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	pid = hadmin_status_int(g.h.sock, "pid");
	assert_true(pid > 0 && pid != old);
	g.h.pid = (pid_t)pid;
}

/* The upgrade state the serving master reports, polled under load until it is `want`. */
static void wait_state(const char *want)
{
	long long t0 = now_us();

	for (;;) {
		json_t *r = hadmin_call(g.h.sock, "{\"cmd\":\"upgrade_status\"}");
		const char *s =
			json_string_value(json_object_get(json_object_get(r, "upgrade"), "state"));
		bool done = s != NULL && strcmp(s, want) == 0;

		json_decref(r);
		if (done)
			return;
		assert_true(now_us() - t0 < UPGRADE_WAIT_US);
		load(20000, 0);
	}
}

static void upgrade_round(int round)
{
	pid_t old = g.h.pid;
	long long t;

	load(1000000, 0);
	gaps_reset();
	t = now_us();
	assert_int_equal(kill(old, SIGUSR2), 0);
	wait_handover(old, t);
	load(1000000, t);
	gaps_print("upgrade", round, g.workers, g.workers);
	print_message("  allocation 0's gap: %.1f ms to %.1f ms after SIGUSR2\n",
		      (g.f[0].gap_end - g.f[0].max_gap - t) / 1e3, (g.f[0].gap_end - t) / 1e3);
	check_all_serving(t);
	assert_int_equal(hadmin_status_int(g.h.sock, "state.taken_over"), N_ALLOCS);
	assert_int_equal(hadmin_status_int(g.h.sock, "workers.running"), g.workers);
}

static void test_sigusr2(void **state)
{
	long long sent0, rx0, drops0, sent, lost, drops;

	(void)state;
	start(2);
	alloc_all();
	quiet(200);
	sent0 = g.sent;
	rx0 = echoes_total();
	drops0 = udp_queue_drops();
	for (int round = 1; round <= N_ROUNDS; round++)
		upgrade_round(round);
	quiet(300);
	sent = g.sent - sent0;
	lost = sent - (echoes_total() - rx0);
	drops = drops0 >= 0 && udp_queue_drops() >= drops0 ? udp_queue_drops() - drops0 : 0;
	print_message("%d live upgrades: %lld ChannelData sent, %lld echoed, %lld lost (%.3f %%; "
		      "target <= 0.1 %%); the kernel dropped %lld datagrams at full receive "
		      "queues meanwhile\n",
		      N_ROUNDS, sent, sent - lost, lost, 100.0 * (double)lost / (double)sent, drops);
	/* The listener and relay sockets are the same sockets before and after: what queued
	 * in the gap is relayed after it. A datagram can be lost where a queue overflowed
	 * (a long gap on a loaded machine: the kernel counts those drops), and a queue
	 * thrown away at a close would cost about 400 in one upgrade alone (4 %): what the
	 * kernel's drops do not explain stays under 1 %. */
	assert_true(lost >= 0 && (lost - drops) * 100 <= sent);
	assert_int_equal(harness_log_count(&g.h, "upgrade: serving"), N_ROUNDS);
	end_all();
}

/* `turngatectl upgrade` prints the new master's PID and exits 0. */
static void test_ctl_upgrade(void **state)
{
	char cmd[PATH_MAX * 2], out[64] = "";
	const char *top = getenv("top_builddir");
	pid_t old;
	FILE *p;
	long long t;

	(void)state;
	start(1);
	alloc_all();
	old = g.h.pid;
	snprintf(cmd, sizeof(cmd), "%s/turngatectl -s %s upgrade --timeout 20",
		 top != NULL ? top : ".", g.h.sock);
	t = now_us();
	p = popen(cmd, "r");
	assert_non_null(p);
	assert_non_null(fgets(out, sizeof(out), p));
	assert_int_equal(pclose(p), 0);
	wait_handover(old, t);
	assert_int_equal(atoi(out), g.h.pid);
	load(1000000, t);
	check_all_serving(t);
	end_all();
}

/* Starts an upgrade to binary over the admin socket; the old master must say it failed
 * and go on relaying every allocation. */
static void failed_upgrade(const char *binary, double timeout, const char *why)
{
	char req[PATH_MAX + 128];
	pid_t old = g.h.pid;
	long long t = now_us();
	json_t *r;

	snprintf(req, sizeof(req), "{\"cmd\":\"upgrade\",\"binary\":\"%s\",\"timeout\":%g}", binary,
		 timeout);
	r = hadmin_call(g.h.sock, req);
	assert_non_null(r);
	assert_true(json_is_true(json_object_get(r, "ok")));
	json_decref(r);
	wait_state("failed");
	assert_int_equal(hadmin_status_int(g.h.sock, "pid"), old);
	assert_int_equal(kill(old, 0), 0);
	load(1000000, t);
	check_all_serving(t);
	assert_int_equal(harness_log_count(&g.h, why), 1);
	print_message("failed upgrade (%s): the old master serves on, 0 stalled\n", why);
}

/* A script that starts the real daemon on another config: one more listener, on a port
 * the test holds, so it fails after the old workers stopped. */
static void write_bad_binary(const char *path, uint16_t port)
{
	char daemon[PATH_MAX], abs[PATH_MAX], conf[PATH_MAX], yaml[2048];
	FILE *f;

	assert_int_equal(harness_daemon_path(daemon, sizeof(daemon)), 0);
	assert_non_null(realpath(daemon, abs));
	snprintf(conf, sizeof(conf), "%s/bad.yaml", g.h.dir);
	assert_int_equal(calls_config(yaml, sizeof(yaml), port), 0);
	f = fopen(conf, "w");
	assert_non_null(f);
	fputs(yaml, f);
	fclose(f);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "#!/bin/sh\nexec %s -c %s --workers %u\n", abs, conf, g.workers);
	fclose(f);
	assert_int_equal(chmod(path, 0700), 0);
}

static void test_failed_upgrades(void **state)
{
	char bad[PATH_MAX], slow[PATH_MAX];
	struct sockaddr_storage held;
	int hold = socket(AF_INET, SOCK_DGRAM, 0);
	uint16_t port = harness_free_port();
	FILE *f;

	(void)state;
	start(2);
	alloc_all();
	failed_upgrade("/bin/false", 10, "upgrade failed: the new binary exited before it served");
	snprintf(slow, sizeof(slow), "%s/slow.sh", g.h.dir);
	f = fopen(slow, "w");
	assert_non_null(f);
	fputs("#!/bin/sh\nexec sleep 20\n", f);
	fclose(f);
	assert_int_equal(chmod(slow, 0700), 0);
	failed_upgrade(slow, 1, "did not become ready within 1 s");
	/* "serving 0" after "ready": a pid that is not the new binary's is no outcome (a
	 * SIGHUP passed on to pid 0 would reach the whole process group) */
	snprintf(slow, sizeof(slow), "%s/pid0.sh", g.h.dir);
	f = fopen(slow, "w");
	assert_non_null(f);
	fputs("#!/bin/bash\nctl=${TURNGATE_UPGRADE#ctl=}\nctl=${ctl%% *}\n"
	      "printf ready >&\"$ctl\"\nprintf 'serving 0' >&\"$ctl\"\nexec sleep 20\n", f);
	fclose(f);
	assert_int_equal(chmod(slow, 0700), 0);
	failed_upgrade(slow, 20, "upgrade failed: the new binary sent an unexpected message");
	harness_addr("127.0.0.1", port, &held);
	assert_true(hold >= 0);
	assert_int_equal(bind(hold, sa(&held), sizeof(struct sockaddr_in)), 0);
	snprintf(bad, sizeof(bad), "%s/bad.sh", g.h.dir);
	write_bad_binary(bad, port);
	failed_upgrade(bad, 20, "the new binary: startup failed: Address already in use");
	close(hold);
	/* after the fall-back, the state file is the old master's again: an upgrade that
	 * works takes every allocation over */
	upgrade_round(1);
	end_all();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_sigusr2, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ctl_upgrade, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_upgrades, setup, teardown),
	};

	/* Each new master is forked by the old one: it becomes our child when that exits. */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
