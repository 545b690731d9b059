/* Restarts that keep the calls (issue 19): 100 UDP allocations relaying 40 packets/s each
 * through the real turngated, SIGKILL of every process of the daemon at once, then the
 * same command again: the new run takes the state file over, and every allocation must
 * relay again (0 stalled) and refresh with its original credentials and nonce (no
 * 401/438). Five times with the same worker count, then 2 -> 1 -> 3 workers, then a
 * SIGKILL of the master alone, a SIGQUIT and a SIGTERM (drain, then stop). Then state
 * files that must be refused (another layout version, truncated, random bytes, 0644, a
 * symlink, another owner): each with its own log line, serving from an empty table; the
 * unmodified file is taken over (the control). The longest relaying gap per allocation is
 * printed, not asserted (timing). Loopback only, every wait bounded. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "shm/shm_internal.h"
#include "common/mono.h"
#include "stun/stun.h"
#include "stun/stun_auth.h"
#include "tests/integration/calls.h"
#include "tests/integration/harness.h"
#include "tests/integration/harness_admin.h"


/* SIGKILL to the master and every worker, as close together as a loop of kill() gets. */
static void kill_everything(void)
{
	int pids[SHM_MAX_SLOTS], n = 0;

	for (unsigned s = 0; s < g.workers; s++) {
		int pid = hadmin_worker_pid(g.h.sock, (int)s, NULL);

		assert_true(pid > 0);
		pids[n++] = pid;
	}
	assert_int_equal(kill(g.h.pid, SIGKILL), 0);
	for (int i = 0; i < n; i++)
		kill(pids[i], SIGKILL);
	waitpid(g.h.pid, NULL, 0);
	g.h.pid = 0;
}

/* How a run ends before the next start. */
enum end_how {
	END_KILL_ALL,	/* SIGKILL to every process */
	END_KILL_MASTER,	/* SIGKILL to the master only: its workers get SIGTERM from the
			 * kernel (PR_SET_PDEATHSIG), leave their allocations and exit; the new
			 * master waits on the state file lock until they are gone */
	END_QUIT,	/* SIGQUIT: stop now (as SIGINT); the workers leave the table */
	END_TERM,	/* SIGTERM (systemctl restart): drain for drain_timeout while the
			 * allocations relay on, then stop; what is open stays in the table */
};

/* Ends the run; returns the time from which relaying may stop (the signal, or for the
 * drain the daemon's exit: the allocations relay during the drain). */
static long long end_run(enum end_how how)
{
	long long t = now_us(), limit = t + 30000000;
	int st = -1;
	pid_t r;

	if (how == END_KILL_ALL) {
		kill_everything();
		return t;
	}
	assert_int_equal(kill(g.h.pid, how == END_TERM   ? SIGTERM
				       : how == END_QUIT ? SIGQUIT
							 : SIGKILL),
			 0);
	while ((r = waitpid(g.h.pid, &st, how == END_TERM ? WNOHANG : 0)) == 0 && now_us() < limit)
		load(50000, 0);
	assert_int_equal(r, g.h.pid);
	if (how != END_KILL_MASTER)
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	g.h.pid = 0;
	return how == END_TERM ? now_us() : t;
}

static void restart_round_how(int round, unsigned workers, enum end_how how)
{
	unsigned from = g.workers;
	long long t_kill;
	char needle[96];
	int n0;

	load(1000000, 0);
	gaps_reset();
	snprintf(needle, sizeof(needle), "%d allocations taken over from %u workers", N_ALLOCS,
		 from);
	n0 = harness_log_count(&g.h, needle);
	t_kill = end_run(how);
	g.workers = workers;
	assert_int_equal(harness_spawn(&g.h, workers), 0);
	load(1000000, t_kill);
	gaps_print("restart", round, from, workers);
	assert_int_equal(harness_log_count(&g.h, needle), n0 + 1);
	check_all_serving(t_kill);
	assert_int_equal(hadmin_status_int(g.h.sock, "state.taken_over"), N_ALLOCS);
}

static void restart_round(int round, unsigned workers)
{
	restart_round_how(round, workers, END_KILL_ALL);
}

static void test_kill_all_restart(void **state)
{
	(void)state;
	start(2);
	alloc_all();
	for (int round = 1; round <= N_ROUNDS; round++)
		restart_round(round, 2);
	/* the take-over counts what it re-adopted: each round adopts all of them */
	assert_int_equal(hadmin_stat(g.h.sock, NULL, "allocs_adopted"),
			 (long long)N_ALLOCS * N_ROUNDS);
	assert_int_equal(hadmin_stat(g.h.sock, NULL, "allocs_active"), N_ALLOCS);
	end_all();
}

/* A crash of the master alone, SIGQUIT, and SIGTERM's drain: each keeps every
 * allocation. */
static void test_master_crash_and_quit(void **state)
{
	(void)state;
	start(2);
	alloc_all();
	print_message("SIGKILL to the master only:\n");
	restart_round_how(1, 2, END_KILL_MASTER);
	print_message("SIGQUIT:\n");
	restart_round_how(2, 2, END_QUIT);
	print_message("SIGTERM (drain_timeout 5 s, then stop):\n");
	restart_round_how(3, 2, END_TERM);
	assert_int_equal(harness_log_count(&g.h, "100 allocations stay in"), 2);
	assert_int_equal(harness_log_count(&g.h, "drain timeout: 100 allocations still open"), 1);
	end_all();
}

static void test_worker_counts(void **state)
{
	static const unsigned counts[] = { 1, 3 };

	(void)state;
	start(2);
	alloc_all();
	for (size_t r = 0; r < sizeof(counts) / sizeof(counts[0]); r++)
		restart_round((int)r + 1, counts[r]);
	assert_int_equal(hadmin_stat(g.h.sock, NULL, "allocs_active"), N_ALLOCS);
	end_all();
}

/* ---- refused state files ------------------------------------------------------------ */

static void copy_file(const char *from, const char *to, off_t len)
{
	char buf[65536];
	int in = open(from, O_RDONLY), out;
	off_t done = 0;

	assert_true(in >= 0);
	unlink(to);
	out = open(to, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(out >= 0);
	while (len < 0 || done < len) {
		size_t want = len < 0 || len - done > (off_t)sizeof(buf) ? sizeof(buf)
									 : (size_t)(len - done);
		ssize_t n = read(in, buf, want);

		if (n <= 0)
			break;
		assert_int_equal(write(out, buf, (size_t)n), n);
		done += n;
	}
	close(in);
	close(out);
}

static void patch(const char *path, off_t off, const void *v, size_t n)
{
	int fd = open(path, O_WRONLY);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, v, n, off), (ssize_t)n);
	close(fd);
}

static int count_aside(void)
{
	char pat[300];
	glob_t gl;
	int n;

	snprintf(pat, sizeof(pat), "%s/restart.state.refused-*", g.h.dir);
	n = glob(pat, 0, NULL, &gl) == 0 ? (int)gl.gl_pathc : 0;
	globfree(&gl);
	return n;
}

/* Starts on what is at g.state; the daemon must say `verdict` once more than before, move
 * the file aside and serve from an empty table (a new allocation works). */
static void expect_refused(const char *verdict)
{
	static struct hturn c;	/* not harness_clients(): the test's 3 clients live on */
	char needle[96];
	int n0, all0, a0 = count_aside();

	snprintf(needle, sizeof(needle), "refused (%s)", verdict);
	n0 = harness_log_count(&g.h, needle);
	all0 = harness_log_count(&g.h, "refused (");
	start(2);
	/* its own line, and only one */
	assert_int_equal(harness_log_count(&g.h, needle), n0 + 1);
	assert_int_equal(harness_log_count(&g.h, "refused ("), all0 + 1);
	assert_int_equal(count_aside(), a0 + 1);
	assert_int_equal(hadmin_status_int(g.h.sock, "allocations"), 0);
	assert_int_equal(hadmin_status_int(g.h.sock, "state.taken_over"), 0);
	memset(&c, 0, sizeof(c));
	c.fd = -1;
	alloc_user(&c, "after-refusal");
	assert_int_equal(hturn_refresh(&c, 0), 0);
	hturn_close(&c);
	assert_int_equal(hadmin_wait_status_int(g.h.sock, "allocations", 0, 500, 20), 0);
	assert_int_equal(harness_stop(&g.h), 0);
	print_message("%s: refused, moved aside, served from an empty table\n", verdict);
}

static void test_refused_files(void **state)
{
	char good[300], target[300];
	uint32_t v32 = SHM_LAYOUT_VERSION + 1;
	uint8_t junk[65536];
	struct hturn *c;
	int fd;

	(void)state;
	snprintf(good, sizeof(good), "%s/good.img", g.h.dir);
	snprintf(target, sizeof(target), "%s/elsewhere.img", g.h.dir);
	/* a valid file with 3 live allocations, from a run killed with them */
	start(2);
	c = harness_clients(&g.h, 3);
	for (int i = 0; i < 3; i++) {
		char user[16];

		snprintf(user, sizeof(user), "keep%d", i);
		alloc_user(&c[i], user);
	}
	kill_everything();
	copy_file(g.state, good, -1);

	copy_file(good, g.state, -1);
	patch(g.state, offsetof(struct shm_hdr, layout_version), &v32, sizeof(v32));
	expect_refused("version");

	copy_file(good, g.state, 100000);
	expect_refused("truncated");

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(rand() >> 7);
	unlink(g.state);
	fd = open(g.state, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	expect_refused("foreign");

	copy_file(good, g.state, -1);
	assert_int_equal(chmod(g.state, 0644), 0);
	expect_refused("mode");

	copy_file(good, target, -1);
	unlink(g.state);
	assert_int_equal(symlink(target, g.state), 0);
	expect_refused("symlink");

	if (geteuid() == 0) {
		copy_file(good, g.state, -1);
		assert_int_equal(chown(g.state, 65534, 65534), 0);
		expect_refused("owner");
	}

	/* the control: the same file, unmodified, is taken over */
	copy_file(good, g.state, -1);
	start(2);
	assert_int_equal(harness_log_count(&g.h, "3 allocations taken over from 2 workers"), 1);
	assert_int_equal(hadmin_status_int(g.h.sock, "allocations"), 3);
	assert_int_equal(hadmin_status_int(g.h.sock, "state.taken_over"), 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(hturn_refresh(&c[i], 0), 0);
	assert_int_equal(hadmin_wait_status_int(g.h.sock, "allocations", 0, 500, 20), 0);
	assert_int_equal(harness_stop(&g.h), 0);
}

/* Below the kernel's ephemeral ports (32768-60999): the daemon binds these again after
 * a kill -9 of every process, and a socket bound to port 0 meanwhile (a test beside this one)
 * could take one: "cannot rebind its relay port", the allocation lost. */
#define RELAY_MIN 27000
#define RELAY_MAX 27999

static int setup(void **state)
{
	(void)state;
	return calls_setup(RELAY_MIN, RELAY_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_kill_all_restart, setup, calls_teardown),
		cmocka_unit_test_setup_teardown(test_worker_counts, setup, calls_teardown),
		cmocka_unit_test_setup_teardown(test_master_crash_and_quit, setup, calls_teardown),
		cmocka_unit_test_setup_teardown(test_refused_files, setup, calls_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
