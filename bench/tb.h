/* turnbench: shared types and internal API of the TURN load generator (bench/tb_*.c).
 *
 * One process, one thread, one epoll loop. Each allocation owns one non-blocking UDP socket
 * connected to the server, so every allocation has its own 5-tuple. Nothing here is a library
 * for the daemon: it is benchmark tooling, built by `make`, never run by `make check`.
 */
#ifndef TG_BENCH_TB_H
#define TG_BENCH_TB_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TB_MAX_PIDS 8
#define TB_MAX_PAYLOAD 8192
#define TB_BATCH 64
#define TB_NONCE_MAX 128
#define TB_CHANNEL 0x4000
/* RTT histogram: 1 us buckets up to 1 s; slower echoes go to an overflow bucket. */
#define TB_HIST_US 1000000u

enum tb_mode {
	TB_MODE_RELAY,		/* closed loop: a window of packets in flight */
	TB_MODE_RATE,		/* open loop at a fixed offered rate */
	TB_MODE_SETUP,		/* authenticated Allocate + CreatePermission + ChannelBind only */
	TB_MODE_HOLD,		/* set up, then hold the allocations (server RSS) */
	TB_MODE_DIRECT,		/* closed loop straight to the echo peer: the harness ceiling */
	TB_MODE_ECHO,		/* be the UDP echo peer */
	TB_MODE_SYM,		/* closed loop between pairs of allocations (symmetric ICE) */
	TB_MODE_TCP,		/* relay's closed loop with TURN over TCP (client to server) */
};

/* TCP mode: each allocation's byte stream from the server is reassembled here (ChannelData
 * padded to 4 bytes, RFC 8656 section 12.5; STUN messages skipped). At most TB_MAX_TCP
 * allocations, so the buffers stay a few MiB. */
#define TB_STREAM_BUF 32768
#define TB_MAX_TCP 1000
struct tb_stream {
	uint32_t len;
	uint8_t buf[TB_STREAM_BUF];
};

/* Symmetric mode pairs allocation 2k (the initiator, which sends) with 2k + 1 (the
 * responder, which echoes through its own allocation); each is the other's peer, at the
 * XOR-RELAYED-ADDRESS the server announced to it. */
static inline bool tb_sym_initiator(enum tb_mode m, uint32_t idx)
{
	return m != TB_MODE_SYM || (idx & 1) == 0;
}

#define TB_MAX_USERS 64

struct tb_opts {
	enum tb_mode mode;
	struct sockaddr_in server;
	struct sockaddr_in peer;	/* echo peer, as the relay sees it */
	struct sockaddr_in bind;	/* client source address (port 0) */
	const char *user;
	const char *pass;
	const char *secret;		/* TURN REST shared secret (replaces pass) */
	unsigned users;			/* allocation i uses user i % users (1: `user` itself,
					 * more: USER0..USER<users-1>, same password) */
	unsigned n;			/* allocations (sym: 2 per pair, so even) */
	unsigned conc;			/* setup transactions in flight */
	unsigned window;		/* relay/direct/sym: packets in flight, all allocations */
	unsigned rate;			/* rate: packets/s offered towards the peer */
	unsigned payload;		/* ChannelData payload bytes */
	double warmup;			/* seconds before the measured window */
	double duration;		/* measured window, seconds */
	double hold;			/* hold: seconds to keep allocations after setup */
	double settle;			/* hold: seconds between setup and the RSS sample */
	pid_t srv[TB_MAX_PIDS];		/* server root PIDs (their descendants are added) */
	unsigned n_srv;
	pid_t echo_pid;			/* optional: sample the echo peer's CPU too */
	bool verbose;
};

/* Per-allocation state: kept small so 100k allocations stay in a few MiB. */
struct tb_alloc {
	int fd;
	uint8_t state;			/* enum tb_state in tb_setup.c */
	uint8_t tries;
	uint8_t nonce_len;
	uint8_t tid[12];
	uint64_t deadline_ns;		/* retransmission deadline of the open transaction */
	uint64_t last_rx_ns;		/* data phase: last echo or refill */
	uint32_t inflight;		/* data phase: our packets not yet echoed */
	uint32_t seq;
	struct sockaddr_in relayed;	/* XOR-RELAYED-ADDRESS (sym: the partner's peer) */
	char nonce[TB_NONCE_MAX];
};

/* Server resource sample: CPU of all processes of the server tree, memory summed. */
struct tb_sample {
	double cpu_s;			/* utime+stime (+ reaped children) of every process, s */
	double sched_s;			/* sum of /proc/PID/task/ANY/schedstat run time, s */
	uint64_t rss_kib;		/* sum of VmRSS (shared pages counted once per process) */
	uint64_t pss_kib;		/* sum of Pss: every page of the tree counted once */
	unsigned nproc;
};

struct tb_hist {
	uint32_t *us;			/* TB_HIST_US buckets */
	uint64_t over;			/* >= 1 s */
	uint64_t n;
};

struct tb_ctx {
	const struct tb_opts *o;
	int ep;
	struct tb_alloc *a;
	struct tb_user {
		char username[160];
		uint8_t key[32];
		size_t key_len;
	} user[TB_MAX_USERS];		/* o->users of them, keys derived on the first realm */
	char realm[TB_NONCE_MAX];
	bool have_key;
	struct tb_stream *st;		/* TCP mode: one per allocation, else NULL */
	/* setup results */
	unsigned done, failed, retrans, stale;
	uint64_t setup_ns;
};

/* ---- tb_util.c ---- */
uint64_t tb_now_ns(void);
/* CPU seconds used by this process (user + system). */
double tb_self_cpu_s(void);
/* Samples the server tree rooted at o->srv[] (0 on success, -ESRCH if no process). */
int tb_sample_server(const struct tb_opts *o, struct tb_sample *s);
/* The whole machine's CPU time (the aggregate "cpu" line of /proc/stat, all CPUs), s. */
struct tb_box {
	double busy_s;			/* user+nice+system+irq+softirq+steal: not idle/iowait */
	double softirq_s;		/* softirq (also in busy_s) */
	double steal_s;			/* steal (also in busy_s) */
};
/* Parses the aggregate line "cpu  user nice system idle iowait irq softirq steal ..." in
 * USER_HZ ticks; 0 or -EINVAL. Pure, for the unit test. */
int tb_box_parse(const char *line, long hz, struct tb_box *b);
/* Samples /proc/stat; 0 or -errno (then *b is zero). */
int tb_box_sample(struct tb_box *b);
/* CPU seconds (utime+stime) of one process, -1 if gone. */
double tb_pid_cpu_s(pid_t pid);
int tb_hist_init(struct tb_hist *h);
void tb_hist_free(struct tb_hist *h);
void tb_hist_add(struct tb_hist *h, uint64_t ns);
/* q in 0..1; returns microseconds, or -1 when empty; 1000000 means ">= 1 s". */
long tb_hist_quantile(const struct tb_hist *h, double q);
/* Opens a non-blocking UDP socket bound to bind and connected to dst; 4 MiB buffers. */
int tb_udp_open(const struct sockaddr_in *bind, const struct sockaddr_in *dst, int *fd);
int tb_parse_addr(const char *s, struct sockaddr_in *out);
/* Opens a TCP connection from bind to dst (blocking connect, then non-blocking), with
 * TCP_NODELAY and 4 MiB buffers. */
int tb_tcp_open(const struct sockaddr_in *bind, const struct sockaddr_in *dst, int *fd);
/* The length of the first frame of a TURN-over-TCP stream (ChannelData padded to 4 bytes,
 * or a STUN message) when p[0..len) holds all of it; 0 when more bytes are needed; -EBADMSG
 * when p starts with neither. Pure, for the unit test. */
long tb_stream_frame(const uint8_t *p, size_t len);

/* ---- tb_setup.c ---- */
/* Creates o->n allocations (sockets, 401 round, Allocate, CreatePermission, ChannelBind)
 * with at most o->conc transactions in flight; in sym mode each allocation's permission and
 * channel go to its partner's relayed address, once both have allocated. Registers each
 * socket in ctx->ep with data.u32 = index. 0 when every allocation is ready, -EIO when some
 * failed (counts in ctx->failed), other negative errno on a local error. */
int tb_setup_run(struct tb_ctx *ctx);

/* ---- tb_data.c ---- */
struct tb_result {
	uint64_t sent, received, late;
	uint64_t sent_all;		/* every packet sent, warm-up included (the echo peer's
					 * count over the run compares with it) */
	uint64_t echoed;		/* sym: packets of the window that reached a responder */
	unsigned broken;		/* tcp: connections closed or unframeable mid-run */
	double window_s;
	double gen_cpu_s;
	double echo_cpu_s;
	struct tb_box box;		/* whole machine over the window (after - before) */
	bool box_ok;			/* both /proc/stat samples were read */
	struct tb_sample before, after;
	bool sampled;
	struct tb_hist hist;
};
/* Runs the data phase of relay, rate, direct or sym mode on ctx's allocations. */
int tb_data_run(struct tb_ctx *ctx, struct tb_result *r);

/* ---- tb_echo.c ---- */
/* UDP echo peer on o->peer until SIGINT/SIGTERM or o->duration seconds (0 = 1 hour). */
int tb_echo_run(const struct tb_opts *o);

#endif
