/* turnbench: TURN load generator (relay, rate, setup, hold, direct, echo, sym over UDP; tcp:
 * the relay's closed loop with TURN over TCP).
 *
 * Prints one line "turnbench mode=... key=value ..." per run for bench/compare.py, and
 * samples the server's CPU (utime+stime of every process of its tree) and memory (sum of
 * VmRSS, and sum of Pss, which counts pages shared between the server's processes, such as
 * a shared-memory segment, once) at the exact edges of the measured window.
 */
#include "bench/tb.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* Indexed by enum tb_mode. */
static const char *const mode_names[] = { "relay", "rate", "setup", "hold", "direct", "echo",
					  "sym", "tcp" };

static void usage(FILE *f)
{
	fputs("usage: turnbench -m relay|rate|setup|hold|direct|echo|sym|tcp [options]\n"
	      "  -s ADDR:PORT  TURN server (127.0.0.1:13478)\n"
	      "  -p ADDR:PORT  UDP echo peer (127.0.0.1:13500)\n"
	      "  -b ADDR       client source address (127.0.0.2)\n"
	      "  -u USER -k PASS   static long-term credentials (bench/bench)\n"
	      "  -S SECRET     TURN REST shared secret instead of -k (username EXPIRY:USER)\n"
	      "  -U N          spread the allocations over N users: USER0..USER<N-1>, same\n"
	      "                password (1 = USER itself; 1..64): one user may hold only half\n"
	      "                of a listener by default (limits.user_quota)\n"
	      "  -n N          allocations (100)          -c N  setup transactions in flight (64)\n"
	      "  -W N          relay/direct: packets in flight over all allocations (256)\n"
	      "  -r PPS        rate: packets/s offered towards the peer, all allocations (20000)\n"
	      "  -l BYTES      payload (172, 16..8192)\n"
	      "  -w SEC        warm-up (1)    -d SEC  measured window (10); echo: lifetime\n"
	      "  -H SEC        hold: seconds to hold (5)  -T SEC  hold: settle before RSS (2)\n"
	      "  -P PID[,PID]  server processes to sample (their descendants are included)\n"
	      "  -E PID        echo peer process to sample\n"
	      "  sym: -n allocations in pairs (even); 2k sends to 2k+1's relayed address, which\n"
	      "       echoes through its own allocation; -W spread over the n/2 senders\n"
	      "  tcp: relay's closed loop with TURN over TCP to the server (one connection per\n"
	      "       allocation, at most 1000; the relay and the echo peer stay UDP); -l a\n"
	      "       multiple of 4 (ChannelData over TCP is padded to 4 bytes)\n",
	      f);
}

static int parse_mode(const char *s, enum tb_mode *m)
{
	for (unsigned i = 0; i < sizeof(mode_names) / sizeof(mode_names[0]); i++)
		if (strcmp(s, mode_names[i]) == 0) {
			*m = (enum tb_mode)i;
			return 0;
		}
	return -EINVAL;
}

static int parse_num(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_pids(const char *s, struct tb_opts *o)
{
	char *dup = strdup(s), *save = NULL;
	int ret = 0;

	if (!dup)
		return -ENOMEM;
	for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		long v = strtol(t, NULL, 10);

		if (v <= 0 || o->n_srv >= TB_MAX_PIDS) {
			ret = -EINVAL;
			break;
		}
		o->srv[o->n_srv++] = (pid_t)v;
	}
	free(dup);
	return ret;
}

static void opts_default(struct tb_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->mode = TB_MODE_RELAY;
	tb_parse_addr("127.0.0.1:13478", &o->server);
	tb_parse_addr("127.0.0.1:13500", &o->peer);
	tb_parse_addr("127.0.0.2:0", &o->bind);
	o->user = "bench";
	o->pass = "bench";
	o->users = 1;
	o->n = 100;
	o->conc = 64;
	o->window = 256;
	o->rate = 20000;
	o->payload = 172;
	o->warmup = 1;
	o->duration = 10;
	o->hold = 5;
	o->settle = 2;
}

/* One option; returns 0, -EINVAL on a bad value, 1 for --help. */
static int opts_one(struct tb_opts *o, int c, const char *v)
{
	double x = 0;

	switch (c) {
	case 'm':
		return parse_mode(v, &o->mode);
	case 's':
		return tb_parse_addr(v, &o->server);
	case 'p':
		return tb_parse_addr(v, &o->peer);
	case 'b':
		return tb_parse_addr(v, &o->bind);
	case 'u':
		o->user = v;
		return 0;
	case 'k':
		o->pass = v;
		return 0;
	case 'S':
		o->secret = v;
		return 0;
	case 'U':
		if (parse_num(v, 1, TB_MAX_USERS, &x))
			return -EINVAL;
		o->users = (unsigned)x;
		return 0;
	case 'P':
		return parse_pids(v, o);
	case 'v':
		o->verbose = true;
		return 0;
	case 'h':
		return 1;
	default:
		break;
	}
	switch (c) {
	case 'n':
		if (parse_num(v, 1, 100000, &x))
			return -EINVAL;
		o->n = (unsigned)x;
		break;
	case 'c':
		if (parse_num(v, 1, 4096, &x))
			return -EINVAL;
		o->conc = (unsigned)x;
		break;
	case 'W':
		if (parse_num(v, 1, 1000000, &x))
			return -EINVAL;
		o->window = (unsigned)x;
		break;
	case 'r':
		if (parse_num(v, 1, 10000000, &x))
			return -EINVAL;
		o->rate = (unsigned)x;
		break;
	case 'l':
		if (parse_num(v, 16, TB_MAX_PAYLOAD, &x))
			return -EINVAL;
		o->payload = (unsigned)x;
		break;
	case 'w':
		return parse_num(v, 0, 3600, &o->warmup);
	case 'd':
		return parse_num(v, 0, 3600, &o->duration);
	case 'H':
		return parse_num(v, 0, 3600, &o->hold);
	case 'T':
		return parse_num(v, 0, 3600, &o->settle);
	case 'E':
		if (parse_num(v, 1, 4194304, &x))
			return -EINVAL;
		o->echo_pid = (pid_t)x;
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

static int opts_parse(int argc, char **argv, struct tb_opts *o)
{
	int c;

	opts_default(o);
	while ((c = getopt(argc, argv, "m:s:p:b:u:k:S:U:n:c:W:r:l:w:d:H:T:P:E:vh")) != -1) {
		int r = opts_one(o, c, optarg);

		if (r == 1) {
			usage(stdout);
			exit(0);
		}
		if (r != 0) {
			fprintf(stderr, "turnbench: bad option -%c %s\n", c, optarg ? optarg : "");
			return -EINVAL;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "turnbench: unexpected argument %s\n", argv[optind]);
		return -EINVAL;
	}
	if (o->mode == TB_MODE_TCP && (o->n > TB_MAX_TCP || o->payload % 4)) {
		fprintf(stderr, "turnbench: tcp needs -n at most %u and -l a multiple of 4\n",
			TB_MAX_TCP);
		return -EINVAL;
	}
	if ((o->mode == TB_MODE_RELAY || o->mode == TB_MODE_DIRECT || o->mode == TB_MODE_TCP) &&
	    o->window < o->n) {
		fprintf(stderr, "turnbench: -W must be at least -n\n");
		return -EINVAL;
	}
	if (o->mode == TB_MODE_SYM && (o->n % 2 || o->window < o->n / 2 || o->conc < 2)) {
		fprintf(stderr,
			"turnbench: sym needs an even -n, -W at least -n/2, -c at least 2\n");
		return -EINVAL;
	}
	return 0;
}

/* Every allocation needs a socket: raise the descriptor limit to the hard limit. */
static int raise_nofile(unsigned need)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return -errno;
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < need + 64) {
		fprintf(stderr, "turnbench: %u allocations need %u descriptors, limit is %llu\n",
			need, need + 64, (unsigned long long)rl.rlim_cur);
		return -EMFILE;
	}
	return 0;
}

/* The first allocation's XOR-RELAYED-ADDRESS: shows whether the server masked it. */
static void print_relayed(const struct sockaddr_in *sa)
{
	char ip[INET_ADDRSTRLEN];

	if (inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof(ip)))
		printf(" relayed0=%s:%u", ip, ntohs(sa->sin_port));
}

/* relayed_pps counts both directions of every round trip: packets delivered to a client or
 * to the echo peer (sym: to a client, each through two allocations). */
static void print_data(const struct tb_ctx *ctx, const struct tb_result *r)
{
	const struct tb_opts *o = ctx->o;
	double relayed = 2.0 * (double)r->received;
	double loss = r->sent ? 1.0 - (double)r->received / (double)r->sent : 0;
	double cpu = r->sampled ? r->after.cpu_s - r->before.cpu_s : 0;

	printf("turnbench mode=%s n=%u payload=%u window=%u rate=%u duration=%.3f sent=%llu "
	       "received=%llu loss=%.6f relayed_pps=%.0f rtt_p50_us=%ld rtt_p99_us=%ld "
	       "rtt_p999_us=%ld rtt_over_1s=%llu gen_cpu_s=%.3f echo_cpu_s=%.3f "
	       "sent_all=%llu",
	       mode_names[o->mode], o->n, o->payload, o->mode == TB_MODE_RATE ? 0 : o->window,
	       o->mode == TB_MODE_RATE ? o->rate : 0, r->window_s, (unsigned long long)r->sent,
	       (unsigned long long)r->received, loss < 0 ? 0 : loss, relayed / r->window_s,
	       tb_hist_quantile(&r->hist, 0.5), tb_hist_quantile(&r->hist, 0.99),
	       tb_hist_quantile(&r->hist, 0.999), (unsigned long long)r->hist.over, r->gen_cpu_s,
	       o->echo_pid ? r->echo_cpu_s : -1.0, (unsigned long long)r->sent_all);
	if (o->mode != TB_MODE_DIRECT)
		print_relayed(&ctx->a[0].relayed);
	/* Sym: the first leg (initiator -> responder) apart, so a loss shows its direction. */
	if (o->mode == TB_MODE_TCP)
		printf(" broken=%u", r->broken);
	if (o->mode == TB_MODE_SYM)
		printf(" echoed=%llu fwd_loss=%.6f", (unsigned long long)r->echoed,
		       r->sent && r->echoed < r->sent ? 1.0 - (double)r->echoed / (double)r->sent
						       : 0.0);
	if (r->sampled) {
		double sch = r->after.sched_s - r->before.sched_s;

		printf(" server_cpu_s=%.3f server_sched_s=%.3f server_cpu_pct=%.1f "
		       "cpu_s_per_mpkt=%.3f sched_s_per_mpkt=%.3f server_rss_kib=%llu "
		       "server_pss_kib=%llu server_nproc=%u",
		       cpu, sch, 100.0 * cpu / r->window_s, relayed ? cpu * 1e6 / relayed : -1,
		       relayed ? sch * 1e6 / relayed : -1, (unsigned long long)r->after.rss_kib,
		       (unsigned long long)r->after.pss_kib, r->after.nproc);
	}
	/* Busy time of the box not explained by the server, us or the echo peer: other
	 * tenants (and softirq work that ran while none of them was on a CPU). Steal stays
	 * out of it, as before the machine-wide figure existed. Direct mode has no server. */
	if (r->box_ok && (r->sampled || o->mode == TB_MODE_DIRECT))
		printf(" foreign_cpu_s=%.3f", r->box.busy_s - r->box.steal_s - cpu - r->gen_cpu_s -
						      (o->echo_pid ? r->echo_cpu_s : 0));
	/* The whole machine, every CPU, softirq included: a kernel fast path relays in softirq,
	 * charged to whatever process it interrupted (the generator, the echo peer) or to none,
	 * never to the server, so only this figure compares a relay with and without it. */
	if (r->box_ok)
		printf(" machine_cpu_s=%.3f machine_softirq_s=%.3f machine_steal_s=%.3f "
		       "machine_cpu_pct=%.1f machine_s_per_mpkt=%.3f machine_ncpu=%ld",
		       r->box.busy_s, r->box.softirq_s, r->box.steal_s,
		       100.0 * r->box.busy_s / r->window_s,
		       relayed ? r->box.busy_s * 1e6 / relayed : -1, sysconf(_SC_NPROCESSORS_ONLN));
	printf("\n");
}

static int run_data(struct tb_ctx *ctx)
{
	struct tb_result r;
	int ret;

	memset(&r, 0, sizeof(r));
	if (ctx->o->mode == TB_MODE_DIRECT) {
		for (uint32_t i = 0; i < ctx->o->n; i++) {
			struct epoll_event ev = { .events = EPOLLIN, .data.u32 = i };

			ret = tb_udp_open(&ctx->o->bind, &ctx->o->peer, &ctx->a[i].fd);
			if (ret != 0)
				return ret;
			if (epoll_ctl(ctx->ep, EPOLL_CTL_ADD, ctx->a[i].fd, &ev) != 0)
				return -errno;
		}
	} else {
		ret = tb_setup_run(ctx);
		if (ret != 0) {
			fprintf(stderr, "turnbench: setup failed: %u of %u ready\n", ctx->done,
				ctx->o->n);
			return ret;
		}
	}
	ret = tb_data_run(ctx, &r);
	if (ret == 0)
		print_data(ctx, &r);
	tb_hist_free(&r.hist);
	return ret;
}

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int run_setup(struct tb_ctx *ctx)
{
	const struct tb_opts *o = ctx->o;
	struct tb_sample before = { 0 }, after = { 0 }, held = { 0 };
	bool sampled = o->n_srv && tb_sample_server(o, &before) == 0;
	double gen = tb_self_cpu_s(), secs;
	int ret = tb_setup_run(ctx);

	secs = (double)ctx->setup_ns / 1e9;
	if (sampled)
		sampled = tb_sample_server(o, &after) == 0;
	printf("turnbench mode=%s n=%u conc=%u ready=%u failed=%u retrans=%u stale=%u "
	       "setup_s=%.3f allocs_per_s=%.0f gen_cpu_s=%.3f",
	       o->mode == TB_MODE_HOLD ? "hold" : "setup", o->n, o->conc, ctx->done, ctx->failed,
	       ctx->retrans, ctx->stale, secs, secs > 0 ? ctx->done / secs : 0,
	       tb_self_cpu_s() - gen);
	if (sampled && ctx->done)
		printf(" server_cpu_s=%.3f server_sched_s=%.3f cpu_ms_per_alloc=%.4f "
		       "sched_ms_per_alloc=%.4f",
		       after.cpu_s - before.cpu_s, after.sched_s - before.sched_s,
		       (after.cpu_s - before.cpu_s) * 1e3 / ctx->done,
		       (after.sched_s - before.sched_s) * 1e3 / ctx->done);
	if (o->mode == TB_MODE_HOLD && sampled && ctx->done) {
		fflush(stdout);
		sleep_s(o->settle);
		if (tb_sample_server(o, &held) == 0)
			printf(" rss_idle_kib=%llu rss_held_kib=%llu pss_idle_kib=%llu "
			       "pss_held_kib=%llu rss_per_alloc_b=%.0f pss_per_alloc_b=%.0f "
			       "server_nproc=%u",
			       (unsigned long long)before.rss_kib, (unsigned long long)held.rss_kib,
			       (unsigned long long)before.pss_kib, (unsigned long long)held.pss_kib,
			       ((double)held.rss_kib - (double)before.rss_kib) * 1024.0 / ctx->done,
			       ((double)held.pss_kib - (double)before.pss_kib) * 1024.0 / ctx->done,
			       held.nproc);
	}
	printf("\n");
	fflush(stdout);
	if (o->mode == TB_MODE_HOLD && ret == 0)
		sleep_s(o->hold);
	return ret;
}

int main(int argc, char **argv)
{
	struct tb_opts o;
	struct tb_ctx ctx;
	int ret;

	if (opts_parse(argc, argv, &o) != 0) {
		usage(stderr);
		return 2;
	}
	if (o.mode == TB_MODE_ECHO) {
		ret = tb_echo_run(&o);
		if (ret != 0)
			fprintf(stderr, "turnbench: echo: %s\n", strerror(-ret));
		return ret ? 1 : 0;
	}
	memset(&ctx, 0, sizeof(ctx));
	ctx.o = &o;
	if (raise_nofile(o.n) != 0)
		return 1;
	ctx.a = calloc(o.n, sizeof(*ctx.a));
	ctx.ep = epoll_create1(EPOLL_CLOEXEC);
	if (!ctx.a || ctx.ep < 0) {
		fprintf(stderr, "turnbench: out of memory or epoll\n");
		return 1;
	}
	for (uint32_t i = 0; i < o.n; i++)
		ctx.a[i].fd = -1;
	if (o.mode == TB_MODE_TCP) {
		ctx.st = calloc(o.n, sizeof(*ctx.st));
		if (!ctx.st) {
			fprintf(stderr, "turnbench: out of memory\n");
			return 1;
		}
	}
	if (o.mode == TB_MODE_SETUP || o.mode == TB_MODE_HOLD)
		ret = run_setup(&ctx);
	else
		ret = run_data(&ctx);
	for (uint32_t i = 0; i < o.n; i++)
		if (ctx.a[i].fd >= 0)
			close(ctx.a[i].fd);
	close(ctx.ep);
	free(ctx.a);
	free(ctx.st);
	explicit_bzero(ctx.user, sizeof(ctx.user));
	if (ret != 0)
		fprintf(stderr, "turnbench: %s\n", strerror(-ret));
	return ret ? 1 : 0;
}
