/* Held calls under load (calls.h). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/mono.h"
#include "stun/stun.h"
#include "stun/stun_auth.h"
#include "tests/integration/calls.h"
#include "tests/integration/harness_admin.h"

struct fx g;

long long now_us(void)
{
	return (long long)(mono_ns() / 1000u);
}

int calls_config(char *yaml, size_t cap, uint16_t extra_port)
{
	char extra[160] = "";
	int n;

	if (extra_port != 0)
		snprintf(extra, sizeof(extra),
			 "  - name: extra\n"
			 "    protocol: TURN-UDP\n"
			 "    address: 127.0.0.1\n"
			 "    port: %u\n"
			 "    routes: [echo]\n",
			 (unsigned)extra_port);
	n = snprintf(yaml, cap,
		     "version: v1\n"
		     "admin:\n"
		     "  name: restart\n"
		     "  loglevel: all:INFO\n"
		     "  healthcheck_endpoint: \"\"\n"
		     "  admin_socket: %s\n"
		     "  relay_port_min: %d\n"
		     "  relay_port_max: %d\n"
		     "  drain_timeout: 5\n"
		     "auth:\n"
		     "  type: ephemeral\n"
		     "  realm: restart.example\n"
		     "  credentials:\n"
		     "    secret: " SECRET "\n"
		     "listeners:\n"
		     "  - name: udp\n"
		     "    protocol: TURN-UDP\n"
		     "    address: 127.0.0.1\n"
		     "    port: %u\n"
		     "    routes: [echo]\n"
		     "%s"
		     "clusters:\n"
		     "  - name: echo\n"
		     "    type: STATIC\n"
		     "    endpoints: [127.0.0.1]\n",
		     g.h.sock, g.relay_min, g.relay_max, g.pu, extra);
	return n > 0 && (size_t)n < cap ? 0 : -1;
}

int calls_setup(unsigned relay_min, unsigned relay_max)
{
	char yaml[2048];

	memset(&g, 0, sizeof(g));
	g.relay_min = relay_min;
	g.relay_max = relay_max;
	if (harness_init(&g.h) < 0 || harness_echo_start("127.0.0.1", 0, &g.echo) < 0)
		return -1;
	/* test_restart binds it again after each kill or stop: late, clear of port 0's range. */
	g.pu = harness_free_port_late();
	if (g.pu == 0)
		return -1; /* the harness said why */
	harness_addr("127.0.0.1", g.pu, &g.srv);
	/* admin.state_dir unset: the state file goes next to the admin socket */
	snprintf(g.state, sizeof(g.state), "%s/restart.state", g.h.dir);
	if (calls_config(yaml, sizeof(yaml), 0) < 0)
		return -1;
	return harness_write_config(&g.h, yaml);
}

int calls_teardown(void **state)
{
	(void)state;
	harness_teardown_killed(&g.h, &g.echo);
	return 0;
}

void start(unsigned workers)
{
	g.workers = workers;
	assert_int_equal(harness_start(&g.h, workers, sa(&g.srv)), 0);
}

void alloc_user(struct hturn *c, const char *user)
{
	char name[64], pass[64];

	assert_int_equal(stun_rest_mint((const uint8_t *)SECRET, strlen(SECRET), user,
					(uint64_t)time(NULL) + 3600, name, sizeof(name), pass,
					sizeof(pass)),
			 0);
	assert_int_equal(hturn_open(c, sa(&g.srv), false), 0);
	hturn_set_user(c, name, pass);
	assert_int_equal(hturn_allocate(c, NULL, NULL), 0);
	assert_int_equal(hturn_channel_bind(c, CHAN, sa(&g.echo.addr)), 0);
}

/* Drains every echo waiting on client i's socket; true when one came. */
static bool drain_one(int i, long long now)
{
	uint8_t buf[256];
	bool got = false;

	for (;;) {
		ssize_t n = recv(g.c[i].fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n < 0 && errno == ECONNREFUSED)
			continue;	/* an ICMP error of the restart: the next read goes on */
		if (n < 4)
			break;
		if (buf[0] != (CHAN >> 8) || buf[1] != (CHAN & 0xff))
			continue;	/* a late response */
		got = true;
		g.f[i].pkts++;
	}
	if (got) {
		struct flow *f = &g.f[i];

		if (f->rx > 0 && now - f->last_rx > f->max_gap) {
			f->max_gap = now - f->last_rx;
			f->gap_end = now;
		}
		f->last_rx = now;
		f->rx++;
	}
	return got;
}

/* True when every flow received something after `since`. */
static bool all_after(long long since)
{
	for (int i = 0; i < N_ALLOCS; i++)
		if (g.f[i].last_rx <= since)
			return false;
	return true;
}

/* Every client sends one ChannelData each SEND_EVERY_US and counts the echoes, for
 * dur_us, or (recover_since > 0) until every flow has an echo newer than recover_since
 * and dur_us has passed, at most RECOVER_LIMIT_US more. */
void load(long long dur_us, long long recover_since)
{
	struct pollfd pfd[N_ALLOCS];
	long long t0 = now_us(), next = t0, now;
	static const char msg[] = "restart-load-0123456789";

	for (int i = 0; i < N_ALLOCS; i++)
		pfd[i] = (struct pollfd){ .fd = g.c[i].fd, .events = POLLIN };
	for (;;) {
		now = now_us();
		if (now - t0 >= dur_us && (recover_since == 0 || all_after(recover_since) ||
					   now - t0 >= dur_us + RECOVER_LIMIT_US))
			break;
		if (now >= next) {
			for (int i = 0; i < N_ALLOCS; i++)
				if (hturn_chan_send(&g.c[i], CHAN, msg, sizeof(msg) - 1) == 0)
					g.sent++;
			next += SEND_EVERY_US;
			if (next < now)
				next = now + SEND_EVERY_US;
		}
		if (poll(pfd, N_ALLOCS, (int)((next - now) / 1000) + 1) <= 0)
			continue;
		now = now_us();
		for (int i = 0; i < N_ALLOCS; i++)
			if (pfd[i].revents)
				drain_one(i, now);
	}
}

void quiet(int ms)
{
	struct pollfd pfd[N_ALLOCS];
	long long end = now_us() + ms * 1000LL, now;

	for (int i = 0; i < N_ALLOCS; i++)
		pfd[i] = (struct pollfd){ .fd = g.c[i].fd, .events = POLLIN };
	while ((now = now_us()) < end) {
		if (poll(pfd, N_ALLOCS, (int)((end - now) / 1000) + 1) <= 0)
			continue;
		for (int i = 0; i < N_ALLOCS; i++)
			if (pfd[i].revents)
				drain_one(i, now_us());
	}
}

long long echoes_total(void)
{
	long long n = 0;

	for (int i = 0; i < N_ALLOCS; i++)
		n += g.f[i].pkts;
	return n;
}

long long udp_queue_drops(void)
{
	static const char *const files[] = { "/proc/net/udp", "/proc/net/udp6" };
	long long n = 0;
	char line[512];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		FILE *f = fopen(files[i], "r");
		char *last;

		if (f == NULL)
			continue;
		if (fgets(line, sizeof(line), f) == NULL) {	/* the header */
			fclose(f);
			return -1;
		}
		while (fgets(line, sizeof(line), f) != NULL) {
			/* the drops column is the line's last field */
			line[strcspn(line, "\n")] = '\0';
			last = strrchr(line, ' ');
			if (last != NULL)
				n += strtoll(last + 1, NULL, 10);
		}
		fclose(f);
	}
	return n;
}

void gaps_reset(void)
{
	for (int i = 0; i < N_ALLOCS; i++)
		g.f[i].max_gap = 0;
}

void gaps_print(const char *what, int round, unsigned from, unsigned to)
{
	long long worst = 0, sum = 0;
	int worst_i = 0;

	for (int i = 0; i < N_ALLOCS; i++) {
		sum += g.f[i].max_gap;
		if (g.f[i].max_gap > worst) {
			worst = g.f[i].max_gap;
			worst_i = i;
		}
	}
	print_message("%s %d (%u -> %u workers): longest gap %.1f ms (allocation %d), "
		      "mean of the per-allocation longest gaps %.1f ms (target <= %d ms)\n",
		      what, round, from, to, worst / 1e3, worst_i, sum / 1e3 / N_ALLOCS,
		      strcmp(what, "upgrade") == 0 ? 100 : 1000);
}

/* Every allocation relays again and refreshes with the credentials and nonce it had:
 * a 401 or 438 would come back as that error code (no_retry). */
void check_all_serving(long long since)
{
	int stalled = 0, refreshed = 0;

	for (int i = 0; i < N_ALLOCS; i++)
		stalled += g.f[i].last_rx <= since;
	assert_int_equal(stalled, 0);
	for (int i = 0; i < N_ALLOCS; i++) {
		g.c[i].no_retry = true;
		if (hturn_refresh(&g.c[i], 600) == 0)
			refreshed++;
		else
			print_message("allocation %d: refresh failed\n", i);
	}
	print_message("%d of %d refreshes with the original credentials succeeded\n", refreshed,
		      N_ALLOCS);
	assert_int_equal(refreshed, N_ALLOCS);
	assert_int_equal(hadmin_status_int(g.h.sock, "allocations"), N_ALLOCS);
	for (int i = 0; i < N_ALLOCS; i++) {
		int owner = hadmin_owner_of(g.h.sock, "udp", hturn_local_port(&g.c[i]));

		assert_true(owner >= 0 && owner < (int)g.workers);
	}
}

void alloc_all(void)
{
	char user[32];

	g.c = harness_clients(&g.h, N_ALLOCS);
	memset(g.f, 0, sizeof(g.f));
	for (int i = 0; i < N_ALLOCS; i++) {
		snprintf(user, sizeof(user), "restart%d", i);
		alloc_user(&g.c[i], user);
	}
	load(500000, 0);
	for (int i = 0; i < N_ALLOCS; i++)
		assert_true(g.f[i].rx > 0);
}

void end_all(void)
{
	for (int i = 0; i < N_ALLOCS; i++) {
		g.c[i].no_retry = false;
		assert_int_equal(hturn_refresh(&g.c[i], 0), 0);
	}
	assert_int_equal(hadmin_wait_status_int(g.h.sock, "allocations", 0, 500, 20), 0);
	/* SIGKILLed runs log no worker deaths: their master died with them */
	assert_int_equal(harness_stop_killed(&g.h, 0), 0);
}
