/* Integration tests of TURN over TLS and DTLS with the project's client library: a whole
 * relay flow over each (certificate verified against the test's CA, SNI, ALPN), a DTLS
 * association that keeps relaying across a certificate rotation, and the measured cost of
 * a handshake and the memory of an established association (printed for docs/tls.md,
 * bounded loosely), and RFC 6062 over a TLS control connection (data connections on the
 * TURN-TCP listener). 2 workers; TLS on the UDP listener's port number, DTLS and TURN-TCP on
 * their own. */
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/turn_client.h"
#include "stun/stun.h"
#include "tests/integration/client_flow.h"
#include "tests/integration/harness.h"
#include "tests/integration/harness_admin.h"

#define N_CLIENTS 200

struct fx {
	struct harness h;
	struct harness_echo echo, echo6;
	uint16_t port, dtls_port, tcp_port;
	struct sockaddr_storage srv, dsrv, tsrv;
	char crt[256], key[256], ca[256];
	char yaml[4096];
};

static struct fx g;

/* A self-signed certificate for turn.tls.test (and 127.0.0.4), written to crt and key. */
static int make_cert(const char *crt, const char *key, const char *cn)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd),
		 "openssl req -x509 -nodes -days 30 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
		 "-subj /CN=%s -addext subjectAltName=DNS:%s,IP:127.0.0.4 -keyout %s -out %s "
		 ">/dev/null 2>&1",
		 cn, cn, key, crt);
	return system(cmd) == 0 ? 0 : -1;
}

static int setup(void **state)
{
	/* one of the shared windows of tests that do not count ports (harness_admin.py's
	 * relay_range): the others are fixed per test and must stay free for re-adoption */
	static const unsigned windows[] = { 54000, 59000, 60000 };
	unsigned lo = windows[(unsigned)getpid() % 3];

	(void)state;
	if (harness_init(&g.h) < 0 || harness_echo_start("127.0.0.1", 0, &g.echo) < 0 ||
	    harness_echo_start("::1", 0, &g.echo6) < 0)
		return -1;
	snprintf(g.crt, sizeof(g.crt), "%s/tls.crt", g.h.dir);
	snprintf(g.key, sizeof(g.key), "%s/tls.key", g.h.dir);
	snprintf(g.ca, sizeof(g.ca), "%s/ca.crt", g.h.dir);
	if (make_cert(g.crt, g.key, "turn.tls.test") < 0 || link(g.crt, g.ca) < 0)
		return -1;
	g.port = harness_free_port();
	g.dtls_port = harness_free_port();
	/* Free ports are drawn independently: the TURN-TCP one must not be the TLS one. */
	for (int i = 0; i < 8 && (g.tcp_port == 0 || g.tcp_port == g.port); i++)
		g.tcp_port = harness_free_port();
	harness_addr("127.0.0.4", g.tcp_port, &g.tsrv);
	harness_addr("127.0.0.4", g.port, &g.srv);
	harness_addr("127.0.0.4", g.dtls_port, &g.dsrv);
	snprintf(g.yaml, sizeof(g.yaml),
		 "version: v1\n"
		 "admin:\n"
		 "  healthcheck_endpoint: \"\"\n"
		 "  admin_socket: %s\n"
		 "  relay_port_min: %u\n"
		 "  relay_port_max: %u\n"
		 "  drain_timeout: 1\n"
		 /* The cost measurement holds N_CLIENTS established sessions from one address
		  * before any authenticates: above the per-source budget of unauthenticated
		  * connections and, under sanitizers, the pre-auth deadline. */
		 "limits:\n"
		 "  source_connections: 1000\n"
		 "  prefix_connections: 1000\n"
		 "  preauth_timeout: 300\n"
		 "auth:\n"
		 "  type: static\n"
		 "  realm: tls.example\n"
		 "  credentials:\n"
		 "    username: user1\n"
		 "    password: pass1\n"
		 "listeners:\n"
		 "  - name: udp\n"
		 "    protocol: TURN-UDP\n"
		 "    address: 127.0.0.4\n"
		 "    port: %u\n"
		 "    routes: [peers]\n"
		 "  - name: tls\n"
		 "    protocol: TURN-TLS\n"
		 "    address: 127.0.0.4\n"
		 "    port: %u\n"
		 "    cert_file: %s\n"
		 "    key_file: %s\n"
		 "    routes: [peers, peers-tcp]\n"
		 "  - name: dtls\n"
		 "    protocol: TURN-DTLS\n"
		 "    address: 127.0.0.4\n"
		 "    port: %u\n"
		 "    cert_file: %s\n"
		 "    key_file: %s\n"
		 "    routes: [peers]\n"
		 "  - name: tcp\n"
		 "    protocol: TURN-TCP\n"
		 "    address: 127.0.0.4\n"
		 "    port: %u\n"
		 "    routes: [peers, peers-tcp]\n"
		 "clusters:\n"
		 "  - name: peers\n"
		 "    type: STATIC\n"
		 "    endpoints: [\"127.0.0.1\", \"::1\"]\n"
		 "  - name: peers-tcp\n" /* RFC 6062 peers: a TCP cluster only */
		 "    type: STATIC\n"
		 "    protocol: TCP\n"
		 "    endpoints: [\"127.0.0.1\", \"::1\"]\n",
		 g.h.sock, lo, lo + 999, g.port, g.port, g.crt, g.key, g.dtls_port, g.crt, g.key,
		 g.tcp_port);
	return harness_launch(&g.h, g.yaml, 2, sa(&g.srv));
}

static int teardown(void **state)
{
	int rc;

	(void)state;
	/* test_crash_releases stops the daemon and checks its log itself; otherwise (a test
	 * failed before it) harness_stop checks the log. */
	rc = g.h.pid > 0 ? harness_stop(&g.h) : 0;
	harness_echo_stop(&g.echo);
	harness_echo_stop(&g.echo6);
	harness_cleanup(&g.h);
	return rc;
}

static int mk_opt(enum turn_client_transport t, const char *ca, struct turn_client **c)
{
	struct turn_client_opts o = {
		.transport = t,
		.server = sa(t == TURN_CLIENT_DTLS ? &g.dsrv : &g.srv),
		.username = "user1",
		.password = "pass1",
		.timeout_ms = 5000,
		.sni = "turn.tls.test",
		.ca_file = ca,
	};

	*c = NULL;
	return turn_client_create(&o, c);
}

static struct turn_client *mk(enum turn_client_transport t)
{
	struct turn_client *c;

	assert_int_equal(mk_opt(t, g.ca, &c), 0);
	return c;
}

static void relay_flow(enum turn_client_transport t, const char *version)
{
	struct turn_client *c = mk(t);
	struct turn_client_tls_info ti;

	assert_int_equal(turn_client_tls_info(c, &ti), 0);
	assert_string_equal(ti.version, version);
	assert_string_equal(ti.alpn, "stun.turn");
	assert_string_equal(ti.subject_cn, "turn.tls.test");
	cflow_relay(c, &g.echo.addr, &g.echo6.addr);	/* "channel-v6!" is padded on TLS */
	/* A new allocation on the same TLS connection / DTLS association works. */
	assert_int_equal(turn_client_allocate(c, NULL, NULL), 0);
	turn_client_destroy(c);
}

static void test_tls_flow(void **state)
{
	(void)state;
	relay_flow(TURN_CLIENT_TLS, "TLSv1.3");
}

static void test_dtls_flow(void **state)
{
	(void)state;
	relay_flow(TURN_CLIENT_DTLS, "DTLSv1.2");
}

/* Reads exactly n bytes from a data connection within 5 s. */
static void data_read(struct turn_client *d, char *buf, size_t n)
{
	size_t have = 0, got = 0;

	while (have < n) {
		assert_int_equal(turn_client_data_recv(d, buf + have, n - have, &got, 5000), 0);
		assert_true(got > 0);
		have += got;
	}
}

/* One peer connection through data connection d: ping to the peer accepted on lfd, pong
 * back, then the peer's FIN read as the end (over TLS the server sends close_notify). */
static void tcp_pair_roundtrip(struct turn_client *d, int lfd)
{
	struct timeval tv = { .tv_sec = 5 };
	char buf[16];
	size_t len = 1;
	int pfd = accept(lfd, NULL, NULL); /* connected already: in the backlog */

	assert_true(pfd >= 0);
	assert_int_equal(setsockopt(pfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(turn_client_data_send(d, "ping", 4), 0);
	assert_int_equal(recv(pfd, buf, 4, MSG_WAITALL), 4);
	assert_memory_equal(buf, "ping", 4);
	assert_int_equal(send(pfd, "pong", 4, 0), 4);
	data_read(d, buf, 4);
	assert_memory_equal(buf, "pong", 4);
	close(pfd);
	assert_int_equal(turn_client_data_recv(d, buf, sizeof(buf), &len, 5000), 0);
	assert_int_equal(len, 0);
}

/* RFC 6062 through the library over a TLS control connection: Allocate TCP, Connect to a
 * listening TCP peer, the data connection bound over TURN-TLS (the server bridges its TLS
 * session to the relay), bytes both ways and the peer's FIN; a second Connect's data
 * connection bound over TURN-TCP the same way; a CONNECTION-ID bound once gets 400 the
 * second time. */
static void test_tcp_relay(void **state)
{
	struct turn_client *c = mk(TURN_CLIENT_TLS), *d = NULL, *e = NULL;
	struct turn_client_opts tls = { .transport = TURN_CLIENT_TLS,
					.sni = "turn.tls.test",
					.ca_file = g.ca };
	struct turn_client_opts tcp = { .transport = TURN_CLIENT_TCP, .server = sa(&g.tsrv) };
	struct turn_alloc_opts ao = { .transport = STUN_TRANSPORT_TCP };
	struct sockaddr_storage peer, peer2;
	socklen_t pl = sizeof(peer), pl2 = sizeof(peer2);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int lfd2 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	uint32_t cid = 0, cid2 = 0;

	(void)state;
	harness_addr("127.0.0.1", 0, &peer);
	harness_addr("127.0.0.1", 0, &peer2);
	assert_int_equal(bind(lfd, sa(&peer), sizeof(struct sockaddr_in)), 0);
	assert_int_equal(bind(lfd2, sa(&peer2), sizeof(struct sockaddr_in)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(listen(lfd2, 4), 0);
	assert_int_equal(getsockname(lfd, sa(&peer), &pl), 0);
	assert_int_equal(getsockname(lfd2, sa(&peer2), &pl2), 0);
	assert_int_equal(turn_client_allocate(c, &ao, NULL), 0);
	assert_int_equal(turn_client_connect(c, sa(&peer), &cid), 0);
	assert_int_equal(turn_client_connection_bind(c, cid, &tls, &d), 0);
	tcp_pair_roundtrip(d, lfd);
	assert_int_equal(turn_client_connection_bind(c, cid, &tls, &e), -EPROTO);
	assert_int_equal(turn_client_last_error(c, NULL), 400);
	/* Another peer, bound over TURN-TCP. */
	assert_int_equal(turn_client_connect(c, sa(&peer2), &cid2), 0);
	assert_int_equal(turn_client_connection_bind(c, cid2, &tcp, &e), 0);
	tcp_pair_roundtrip(e, lfd2);
	turn_client_destroy(e);
	turn_client_destroy(d);
	turn_client_destroy(c);
	close(lfd);
	close(lfd2);
}

/* The certificate is verified against the test's CA: a client trusting another CA fails
 * the handshake, and the daemon goes on serving. */
static void test_verify(void **state)
{
	char other[256], okey[256];
	struct turn_client *c;

	(void)state;
	snprintf(other, sizeof(other), "%s/other.crt", g.h.dir);
	snprintf(okey, sizeof(okey), "%s/other.key", g.h.dir);
	assert_int_equal(make_cert(other, okey, "turn.tls.test"), 0);
	assert_int_equal(mk_opt(TURN_CLIENT_TLS, other, &c), -ECONNABORTED);
	assert_int_equal(mk_opt(TURN_CLIENT_DTLS, other, &c), -ECONNABORTED);
	c = mk(TURN_CLIENT_DTLS);
	turn_client_destroy(c);
}

/* Rotation: the same files get a new certificate, SIGHUP reloads. The DTLS and TLS
 * sessions established before keep their allocations relaying; new handshakes get the
 * new certificate (bounded wait for the reload to reach both workers). */
static void test_rotation(void **state)
{
	struct turn_client *d = mk(TURN_CLIENT_DTLS), *t = mk(TURN_CLIENT_TLS), *n = NULL;
	struct turn_client_tls_info before, after;
	char cmd[2048];

	(void)state;
	assert_int_equal(turn_client_tls_info(d, &before), 0);
	assert_int_equal(turn_client_allocate(d, NULL, NULL), 0);
	assert_int_equal(turn_client_allocate(t, NULL, NULL), 0);
	assert_int_equal(turn_client_channel_bind(d, 0x4001, sa(&g.echo.addr)), 0);
	assert_int_equal(turn_client_channel_bind(t, 0x4002, sa(&g.echo.addr)), 0);
	cflow_roundtrip(d, 0x4001, NULL, "dtls-before");
	cflow_roundtrip(t, 0x4002, NULL, "tls-before");
	assert_int_equal(make_cert(g.crt, g.key, "turn.tls.test"), 0);
	snprintf(cmd, sizeof(cmd), "cp %s %s.new && mv %s.new %s", g.crt, g.ca, g.ca, g.ca);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(kill(g.h.pid, SIGHUP), 0);
	for (int i = 0; i < 100; i++) {		/* until both workers serve the new one */
		int same = 0;

		for (int k = 0; k < 8; k++) {
			if (mk_opt(TURN_CLIENT_DTLS, NULL, &n) == 0 &&
			    turn_client_tls_info(n, &after) == 0 &&
			    memcmp(after.cert_sha256, before.cert_sha256, 32) == 0)
				same++;
			turn_client_destroy(n);
			n = NULL;
		}
		if (!same)
			break;
		usleep(100 * 1000);
	}
	assert_int_not_equal(memcmp(after.cert_sha256, before.cert_sha256, 32), 0);
	/* Verified against the new CA file (the rotated certificate) over both. */
	n = mk(TURN_CLIENT_TLS);
	turn_client_destroy(n);
	n = mk(TURN_CLIENT_DTLS);
	turn_client_destroy(n);
	cflow_roundtrip(d, 0x4001, NULL, "dtls-after");
	cflow_roundtrip(t, 0x4002, NULL, "tls-after");
	assert_int_equal(turn_client_refresh(d, 600, NULL), 0);
	assert_int_equal(turn_client_refresh(t, 600, NULL), 0);
	turn_client_destroy(d);
	turn_client_destroy(t);
}

/* Worker pids: the daemon's children. */
static size_t worker_pids(pid_t *out, size_t cap)
{
	char path[64], buf[512];
	FILE *f;
	size_t n = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)g.h.pid, (int)g.h.pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fgets(buf, sizeof(buf), f)) {
		char *save = NULL;

		for (char *tok = strtok_r(buf, " \n", &save); tok && n < cap;
		     tok = strtok_r(NULL, " \n", &save))
			out[n++] = (pid_t)atoi(tok);
	}
	fclose(f);
	return n;
}

/* Sum over the workers of RSS (KiB) and CPU time (utime + stime, seconds). */
static void workers_usage(long *rss_kb, double *cpu_s)
{
	pid_t pids[16];
	size_t n = worker_pids(pids, 16);
	long tck = sysconf(_SC_CLK_TCK);

	*rss_kb = 0;
	*cpu_s = 0;
	for (size_t i = 0; i < n; i++) {
		char path[64], line[1024];
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/status", (int)pids[i]);
		f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f))
			if (strncmp(line, "VmRSS:", 6) == 0)
				*rss_kb += atol(line + 6);
		if (f)
			fclose(f);
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pids[i]);
		f = fopen(path, "r");
		if (f && fgets(line, sizeof(line), f)) {
			char *p = strrchr(line, ')');
			unsigned long ut = 0, st = 0;

			/* fields after ") ": state ppid ... utime is field 14, stime 15 */
			if (p &&
			    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
				   &ut, &st) == 2)
				*cpu_s += (double)(ut + st) / (double)tck;
		}
		if (f)
			fclose(f);
	}
}

/* N established sessions of each kind, each with an allocation: the workers' RSS per
 * session and CPU per handshake are printed (docs/tls.md quotes them) and loosely bounded. */
static void measure(enum turn_client_transport t, const char *name)
{
	static struct turn_client *cs[N_CLIENTS];
	long rss0, rss1, rss2;
	double cpu0, cpu1, cpu2;
	struct sockaddr_storage mapped;

	for (int i = 0; i < 8; i++) {		/* warm: code paths and allocator arenas */
		cs[i] = mk(t);
		assert_int_equal(turn_client_binding(cs[i], &mapped), 0);
	}
	for (int i = 0; i < 8; i++)
		turn_client_destroy(cs[i]);
	workers_usage(&rss0, &cpu0);
	for (int i = 0; i < N_CLIENTS; i++) {
		assert_int_equal(mk_opt(t, NULL, &cs[i]), 0);
	}
	workers_usage(&rss1, &cpu1);
	for (int i = 0; i < N_CLIENTS; i++) {
		int rc = turn_client_allocate(cs[i], NULL, NULL);

		if (rc != 0)
			printf("# allocation %d: %d (STUN error %d)\n", i, rc,
			       turn_client_last_error(cs[i], NULL));
		assert_int_equal(rc, 0);
	}
	workers_usage(&rss2, &cpu2);
	printf("# %s: %d handshakes: %.3f ms of worker CPU each; %.1f KiB of worker RSS per "
	       "established session, %.1f KiB with an allocation\n",
	       name, N_CLIENTS, (cpu1 - cpu0) * 1000.0 / N_CLIENTS,
	       (double)(rss1 - rss0) / N_CLIENTS, (double)(rss2 - rss0) / N_CLIENTS);
#if defined(__SANITIZE_ADDRESS__)
	printf("# RSS bound not checked: AddressSanitizer's allocator and quarantine inflate it\n");
#else
	assert_true(rss2 - rss0 < N_CLIENTS * 128);	/* 128 KiB each: a loose bound */
#endif
	for (int i = 0; i < N_CLIENTS; i++)
		turn_client_destroy(cs[i]);
}

static void test_cost_tls(void **state)
{
	(void)state;
	measure(TURN_CLIENT_TLS, "TLS 1.3, ECDSA P-256");
}

static void test_cost_dtls(void **state)
{
	(void)state;
	measure(TURN_CLIENT_DTLS, "DTLS 1.2, ECDSA P-256");
}

static uint16_t local_port(const struct turn_client *c)
{
	struct sockaddr_storage ss;

	assert_int_equal(turn_client_local_addr(c, &ss), 0);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* kill -9 of the worker holding a TLS allocation: stream allocations (TLS, and DTLS when
 * on the same worker) are released at re-adoption, counted once in allocs_dropped; the
 * client sees its connection gone; the respawned worker serves TLS again. Runs last and
 * stops the daemon itself (its log then holds the death this test caused). */
static void test_crash_releases(void **state)
{
	struct turn_client *t = mk(TURN_CLIENT_TLS), *d = mk(TURN_CLIENT_DTLS);
	long long dropped0, active0;
	int victim, owner_d, drops, pid;

	(void)state;
	assert_int_equal(turn_client_allocate(t, NULL, NULL), 0);
	assert_int_equal(turn_client_allocate(d, NULL, NULL), 0);
	victim = hadmin_owner_of(g.h.sock, "tls", local_port(t));
	owner_d = hadmin_owner_of(g.h.sock, "dtls", local_port(d));
	assert_true(victim == 0 || victim == 1);
	assert_true(owner_d == 0 || owner_d == 1);
	drops = 1 + (owner_d == victim);
	dropped0 = hadmin_stat(g.h.sock, NULL, "allocs_dropped");
	active0 = hadmin_status_int(g.h.sock, "allocations");
	pid = hadmin_worker_pid(g.h.sock, victim, NULL);
	assert_true(pid > 0);
	assert_int_equal(kill(pid, SIGKILL), 0);
	for (int i = 0;
	     i < 500 && hadmin_stat(g.h.sock, NULL, "allocs_dropped") != dropped0 + drops; i++)
		usleep(20000);
	assert_int_equal(hadmin_stat(g.h.sock, NULL, "allocs_dropped"), dropped0 + drops);
	assert_int_equal(hadmin_wait_status_int(g.h.sock, "allocations", active0 - drops, 100, 20),
			 active0 - drops);
	print_message("worker %d killed: %d stream allocation(s) released (DTLS on worker %d)\n",
		      victim, drops, owner_d);
	assert_true(turn_client_refresh(t, 600, NULL) < 0);
	if (owner_d != victim)
		assert_int_equal(turn_client_refresh(d, 600, NULL), 0);
	turn_client_destroy(t);
	turn_client_destroy(d);
	t = mk(TURN_CLIENT_TLS);
	assert_int_equal(turn_client_allocate(t, NULL, NULL), 0);
	turn_client_destroy(t);
	assert_int_equal(harness_stop_killed(&g.h, 1), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tls_flow),  cmocka_unit_test(test_dtls_flow),
		cmocka_unit_test(test_verify),    cmocka_unit_test(test_cost_tls),
		cmocka_unit_test(test_cost_dtls), cmocka_unit_test(test_rotation),
		cmocka_unit_test(test_tcp_relay), cmocka_unit_test(test_crash_releases),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, setup, teardown);
}
