/* Integration test of the kernel fast path (offload/offload.h) across real interfaces:
 * three network namespaces (client, server, peer) joined by veth pairs, the server
 * forwarding; the TC program attached to the server's interfaces through the library;
 * ChannelData from the client reaches the peer as plain UDP and the peer's datagrams
 * reach the client as ChannelData, with nothing in user space relaying (sockets on the
 * server's listener and relay addresses see only what goes up). IPv4 and IPv6, full and
 * CHECKSUM_PARTIAL checksums (the receivers' stacks verify them; their checksum error
 * counters must stay 0), padding, expiry, deletion, the MTU, fragments, take-over of
 * pinned maps by a second open, counters exact. Needs root: skipped otherwise. The
 * namespaces are removed on every path (the tests run in a child; the parent cleans). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <bpf/bpf.h>

#include "offload/offload.h"

#define MS_NS UINT64_C(1000000)

enum {
	NS_C,
	NS_S,
	NS_P
};
static char ns_name[3][32];
static int ns_fd[3] = { -1, -1, -1 };
static char bpffs[64];

static int sh(const char *fmt, ...)
{
	char cmd[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

static void enter(int ns)
{
	assert_int_equal(setns(ns_fd[ns], CLONE_NEWNET), 0);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- The namespaces ---------------------------------------------------------------- */

static void netns_cleanup(void)
{
	for (int i = 0; i < 3; i++)
		if (ns_name[i][0])
			sh("ip netns del %s 2>/dev/null", ns_name[i]);
	if (bpffs[0])
		rmdir(bpffs);
}

/* Namespaces an earlier run left behind when it was killed outright (SIGKILL): named
 * tgon<pid>[csp] after a process that is gone (test_offload.py names its own tgo<pid>). */
static void netns_stale_cleanup(void)
{
	char line[128], kind;
	FILE *f = popen("ip netns list 2>/dev/null", "r");
	int pid;

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "tgon%d%c", &pid, &kind) == 2 && strchr("csp", kind) &&
		    pid != getpid() && kill(pid, 0) < 0 && errno == ESRCH)
			sh("ip netns del tgon%d%c 2>/dev/null", pid, kind);
	pclose(f);
}

static int netns_setup(void)
{
	static const char *const names = "csp";
	char path[96];

	for (int i = 0; i < 3; i++) {
		snprintf(ns_name[i], sizeof(ns_name[i]), "tgon%d%c", (int)getpid(), names[i]);
		if (sh("ip netns add %s", ns_name[i]) != 0)
			return -1;
		if (sh("ip netns exec %s sh -c 'echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad; "
		       "echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad; ip link set lo up'",
		       ns_name[i]) != 0)
			return -1;
		snprintf(path, sizeof(path), "/run/netns/%s", ns_name[i]);
		ns_fd[i] = open(path, O_RDONLY | O_CLOEXEC);
		if (ns_fd[i] < 0)
			return -1;
	}
	if (sh("ip -n %s link add s0 type veth peer name c0 netns %s", ns_name[NS_S],
	       ns_name[NS_C]) != 0 ||
	    sh("ip -n %s link add s1 mtu 1400 type veth peer name p0 mtu 1400 netns %s",
	       ns_name[NS_S], ns_name[NS_P]) != 0)
		return -1;
	if (sh("ip -n %1$s link set c0 up && ip -n %1$s addr add 10.9.1.2/24 dev c0 && "
	       "ip -n %1$s addr add fd09:1::2/64 dev c0 nodad && "
	       "ip -n %1$s route add default via 10.9.1.1 && "
	       "ip -n %1$s -6 route add default via fd09:1::1",
	       ns_name[NS_C]) != 0 ||
	    sh("ip -n %1$s link set p0 up && ip -n %1$s addr add 10.9.2.2/24 dev p0 && "
	       "ip -n %1$s addr add fd09:2::2/64 dev p0 nodad && "
	       "ip -n %1$s route add default via 10.9.2.1 && "
	       "ip -n %1$s -6 route add default via fd09:2::1",
	       ns_name[NS_P]) != 0 ||
	    sh("ip -n %1$s link set s0 up && ip -n %1$s link set s1 up && "
	       "ip -n %1$s addr add 10.9.1.1/24 dev s0 && ip -n %1$s addr add 10.9.2.1/24 dev s1 && "
	       "ip -n %1$s addr add fd09:1::1/64 dev s0 nodad && "
	       "ip -n %1$s addr add fd09:2::1/64 dev s1 nodad && "
	       "ip netns exec %1$s sh -c 'echo 1 > /proc/sys/net/ipv4/conf/all/forwarding; "
	       "echo 1 > /proc/sys/net/ipv6/conf/all/forwarding'",
	       ns_name[NS_S]) != 0)
		return -1;
	return 0;
}

/* Transmit checksum offload of dev in ns: off makes the stack complete checksums in
 * software (the skb leaves CHECKSUM_NONE, and the receiver's stack verifies it). */
static void tx_csum(int ns, const char *dev, bool on)
{
	struct ethtool_value ev = { ETHTOOL_STXCSUM, on };
	struct ifreq ifr;
	int fd;

	enter(ns);
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	assert_true(fd >= 0);
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", dev);
	ifr.ifr_data = (void *)&ev;
	assert_int_equal(ioctl(fd, SIOCETHTOOL, &ifr), 0);
	close(fd);
}

/* Udp InCsumErrors of ns. */
static unsigned long udp_csum_errors(int ns, bool v6)
{
	char line[1024], hdr[1024] = "";
	unsigned long val = 0;
	FILE *f;

	enter(ns);
	f = fopen(v6 ? "/proc/net/snmp6" : "/proc/net/snmp", "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		if (v6) {
			if (sscanf(line, "Udp6InCsumErrors %lu", &val) == 1)
				break;
			continue;
		}
		if (strncmp(line, "Udp:", 4) != 0)
			continue;
		if (!hdr[0]) {
			snprintf(hdr, sizeof(hdr), "%s", line);
			continue;
		}
		{
			char *hs, *vs, *h = strtok_r(hdr, " \n", &hs),
				       *v = strtok_r(line, " \n", &vs);

			while (h && v) {
				if (strcmp(h, "InCsumErrors") == 0)
					val = strtoul(v, NULL, 10);
				h = strtok_r(NULL, " \n", &hs);
				v = strtok_r(NULL, " \n", &vs);
			}
		}
		break;
	}
	fclose(f);
	return val;
}

/* ---- Endpoints --------------------------------------------------------------------- */

struct ep {
	int fam;
	const char *addr;
	uint16_t port;
};

static const struct ep C4 = { AF_INET, "10.9.1.2", 5000 }, L4 = { AF_INET, "10.9.1.1", 3478 },
		       R4 = { AF_INET, "10.9.2.1", 49152 }, P4 = { AF_INET, "10.9.2.2", 6000 };
static const struct ep C6 = { AF_INET6, "fd09:1::2", 5000 }, L6 = { AF_INET6, "fd09:1::1", 3478 },
		       R6 = { AF_INET6, "fd09:2::1", 49152 }, P6 = { AF_INET6, "fd09:2::2", 6000 };

static socklen_t sa_of(const struct ep *e, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (e->fam == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;

		s->sin_family = AF_INET;
		s->sin_port = htons(e->port);
		inet_pton(AF_INET, e->addr, &s->sin_addr);
		return sizeof(*s);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;

		s->sin6_family = AF_INET6;
		s->sin6_port = htons(e->port);
		inet_pton(AF_INET6, e->addr, &s->sin6_addr);
		return sizeof(*s);
	}
}

/* A UDP socket of ns bound at e. */
static int sock_at(int ns, const struct ep *e)
{
	struct sockaddr_storage ss;
	socklen_t len = sa_of(e, &ss);
	int one = 1, fd;

	enter(ns);
	fd = socket(e->fam, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(fd, (struct sockaddr *)&ss, len), 0);
	return fd;
}

static void send_to(int fd, const struct ep *to, const void *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sa_of(to, &ss);

	assert_int_equal(sendto(fd, buf, len, 0, (struct sockaddr *)&ss, sl), (ssize_t)len);
}

/* One datagram within ms, from *from; its length, or -1. */
static ssize_t recv_within(int fd, void *buf, size_t cap, int ms, struct ep *from, char *abuf)
{
	struct pollfd p = { fd, POLLIN, 0 };
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	ssize_t n;

	if (poll(&p, 1, ms) <= 0)
		return -1;
	n = recvfrom(fd, buf, cap, 0, (struct sockaddr *)&ss, &sl);
	if (n >= 0 && from) {
		from->fam = ss.ss_family;
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *s = (struct sockaddr_in *)&ss;

			inet_ntop(AF_INET, &s->sin_addr, abuf, INET6_ADDRSTRLEN);
			from->port = ntohs(s->sin_port);
		} else {
			struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;

			inet_ntop(AF_INET6, &s->sin6_addr, abuf, INET6_ADDRSTRLEN);
			from->port = ntohs(s->sin6_port);
		}
		from->addr = abuf;
	}
	return n;
}

/* ---- The setting: sockets, the channel, the opened offload --------------------------- */

struct fam {
	const struct ep *c, *l, *r, *p;
	int client, peer, listener, relay;	/* sockets: client (C), peer (P), server (S) */
};

static const struct ep LC4 = { AF_INET, "127.0.0.1", 5100 }, LL4 = { AF_INET, "127.0.0.1", 3479 },
		       LR4 = { AF_INET, "127.0.0.1", 49200 }, LP4 = { AF_INET, "127.0.0.1", 6100 };
static const struct ep LC6 = { AF_INET6, "::1", 5100 }, LL6 = { AF_INET6, "::1", 3479 },
		       LR6 = { AF_INET6, "::1", 49200 }, LP6 = { AF_INET6, "::1", 6100 };

static struct fam F[2] = { { &C4, &L4, &R4, &P4, -1, -1, -1, -1 },
			   { &C6, &L6, &R6, &P6, -1, -1, -1, -1 } };
static struct tgo *g_t;
static struct tgo_count want_l, want_c, want_total;	/* expected counts: listener 2, cluster 5 */

static void addr16(uint8_t a[16], const struct ep *e)
{
	memset(a, 0, 16);
	assert_int_equal(inet_pton(e->fam, e->addr, a), 1);
}

static struct tgo_channel chan_of(const struct fam *f, uint16_t number, uint64_t ttl_ns)
{
	struct tgo_channel ch;

	memset(&ch, 0, sizeof(ch));
	ch.family = f->c->fam;
	addr16(ch.client, f->c);
	addr16(ch.listener, f->l);
	addr16(ch.relay, f->r);
	addr16(ch.peer, f->p);
	ch.client_port = f->c->port;
	ch.listener_port = f->l->port;
	ch.relay_port = f->r->port;
	ch.peer_port = f->p->port;
	ch.channel = number;
	ch.expires_ns = now_ns() + ttl_ns;
	ch.listener_idx = 2;
	ch.cluster_idx = 5;
	return ch;
}

/* The engine tgo_iface_engine reports for ifname: XDP runs natively on veth (s0, s1) and
 * generically on lo, which Auto leaves to TC. */
static const char *want_engine(enum tgo_engine engine, const char *ifname)
{
	bool lo = strcmp(ifname, "lo") == 0;

	if (engine == TGO_ENGINE_AUTO)
		return lo ? "tc" : "xdp";
	if (engine == TGO_ENGINE_XDP)
		return lo ? "xdp-generic" : "xdp";
	return "tc";
}

/* Opens on the server's s0, s1 and lo (and an interface that does not exist: bad). */
static int open_offload_on(struct tgo **t, const char *pin, enum tgo_engine engine, bool bad)
{
	const char *ifs[] = { "s0", "s1", "lo", "tgo-nonesuch" };
	struct tgo_opts o = { engine, ifs, bad ? 4 : 3, pin, 1024, false };
	char why[256];
	int err;

	enter(NS_S);
	err = tgo_open(&o, t, why, sizeof(why));
	if (err && !bad)
		fprintf(stderr, "tgo_open: %s\n", why);
	if (err == 0) {
		assert_int_equal(tgo_iface_count(*t), 3);
		for (size_t i = 0; i < 3; i++) {
			assert_string_equal(tgo_iface_name(*t, i), ifs[i]);
			assert_string_equal(tgo_iface_engine(*t, i), want_engine(engine, ifs[i]));
		}
	}
	return err;
}

static int open_offload(struct tgo **t, const char *pin)
{
	return open_offload_on(t, pin, TGO_ENGINE_TC, false);
}

static int group_setup(void **state)
{
	(void)state;
	for (int i = 0; i < 2; i++) {
		F[i].client = sock_at(NS_C, F[i].c);
		F[i].peer = sock_at(NS_P, F[i].p);
		F[i].listener = sock_at(NS_S, F[i].l);
		F[i].relay = sock_at(NS_S, F[i].r);
	}
	return open_offload(&g_t, NULL) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	tgo_close(g_t, false);
	return 0;
}

/* ---- Traffic ----------------------------------------------------------------------- */

static uint8_t g_data[4000];

static size_t chandata(uint8_t *m, uint16_t ch, size_t n, size_t pad, unsigned seed)
{
	m[0] = (uint8_t)(ch >> 8);
	m[1] = (uint8_t)ch;
	m[2] = (uint8_t)(n >> 8);
	m[3] = (uint8_t)n;
	for (size_t i = 0; i < n; i++)
		m[4 + i] = (uint8_t)(seed + i * 31);
	for (size_t i = 0; i < pad; i++)
		m[4 + n + i] = 0xaa;
	return 4 + n + pad;
}

static void expect(struct tgo_count *c, int dir, size_t n)
{
	c->pkts[dir]++;
	c->bytes[dir] += n;
}

static void expect_relayed(int dir, size_t n)
{
	expect(&want_l, dir, n);
	expect(&want_c, dir, n);
	expect(&want_total, dir, n);
}

/* The client sends n bytes on channel ch (pad bytes of padding): relayed says whether the
 * peer must get them from the relay address (else the listener socket gets the message,
 * untouched, and the peer nothing). */
static void c2p(struct fam *f, uint16_t ch, size_t n, size_t pad, bool relayed)
{
	uint8_t m[4000], got[4000];
	char abuf[INET6_ADDRSTRLEN];
	struct ep from;
	size_t len = chandata(m, ch, n, pad, (unsigned)n);
	ssize_t r;

	send_to(f->client, f->l, m, len);
	if (relayed) {
		r = recv_within(f->peer, got, sizeof(got), 2000, &from, abuf);
		assert_int_equal(r, (ssize_t)n);
		assert_memory_equal(got, m + 4, n);
		assert_string_equal(from.addr, f->r->addr);
		assert_int_equal(from.port, f->r->port);
		assert_int_equal(recv_within(f->listener, got, sizeof(got), 0, NULL, NULL), -1);
		expect_relayed(0, n);
	} else {
		r = recv_within(f->listener, got, sizeof(got), 2000, NULL, NULL);
		assert_int_equal(r, (ssize_t)len);
		assert_memory_equal(got, m, len);
		assert_int_equal(recv_within(f->peer, got, sizeof(got), 100, NULL, NULL), -1);
	}
}

/* The peer sends n bytes to the relay address: relayed, the client gets them as
 * ChannelData on ch from the listener address; else the relay socket gets them. */
static void p2c(struct fam *f, uint16_t ch, size_t n, bool relayed)
{
	uint8_t got[4000];
	char abuf[INET6_ADDRSTRLEN];
	struct ep from;
	ssize_t r;

	for (size_t i = 0; i < n; i++)
		g_data[i] = (uint8_t)(n + i * 7);
	send_to(f->peer, f->r, g_data, n);
	if (relayed) {
		r = recv_within(f->client, got, sizeof(got), 2000, &from, abuf);
		assert_int_equal(r, (ssize_t)n + 4);
		assert_int_equal(got[0] << 8 | got[1], ch);
		assert_int_equal(got[2] << 8 | got[3], n);
		assert_memory_equal(got + 4, g_data, n);
		assert_string_equal(from.addr, f->l->addr);
		assert_int_equal(from.port, f->l->port);
		assert_int_equal(recv_within(f->relay, got, sizeof(got), 0, NULL, NULL), -1);
		expect_relayed(1, n);
	} else {
		r = recv_within(f->relay, got, sizeof(got), 2000, NULL, NULL);
		assert_int_equal(r, (ssize_t)n);
		assert_int_equal(recv_within(f->client, got, sizeof(got), 100, NULL, NULL), -1);
	}
}

static void check_counts(void)
{
	struct tgo_count got;
	uint64_t entries;

	assert_int_equal(tgo_listener_counts(g_t, 2, &got), 0);
	assert_memory_equal(&got, &want_l, sizeof(got));
	assert_int_equal(tgo_cluster_counts(g_t, 5, &got), 0);
	assert_memory_equal(&got, &want_c, sizeof(got));
	assert_int_equal(tgo_totals(g_t, &got, &entries), 0);
	assert_memory_equal(&got, &want_total, sizeof(got));
	assert_int_equal(tgo_listener_counts(g_t, 0, &got), 0);
	assert_int_equal(got.pkts[0] + got.pkts[1], 0);
}

static void check_no_csum_errors(void)
{
	for (int v6 = 0; v6 < 2; v6++) {
		assert_int_equal(udp_csum_errors(NS_C, v6), 0);
		assert_int_equal(udp_csum_errors(NS_P, v6), 0);
		assert_int_equal(udp_csum_errors(NS_S, v6), 0);
	}
}

/* Both ways, sizes from empty to the MTU, padding, both families; checksums completed by
 * the senders (full) or, offloaded by the senders, by the server's egress in software
 * (CHECKSUM_PARTIAL through the program: csum_start must still name the UDP header). */
static void run_both_ways(void)
{
	struct tgo_maps m;

	tgo_maps_of(g_t, &m);
	for (int i = 0; i < 2; i++) {
		struct fam *f = &F[i];
		struct tgo_channel ch = chan_of(f, 0x4000 + (uint16_t)i, 60000 * MS_NS);
		static const size_t sizes[] = { 0, 1, 2, 3, 4, 5, 100, 501, 1024, 1300 };

		assert_int_equal(tgo_channel_set(&m, &ch), 0);
		for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
			c2p(f, ch.channel, sizes[k], k % 4, true);
			p2c(f, ch.channel, sizes[k], true);
		}
		/* The largest the peer's link takes (MTU 1400), and one more byte: up. */
		c2p(f, ch.channel, 1400 - 28 - 20 * (size_t)i, 0, true);
		c2p(f, ch.channel, 1400 - 27 - 20 * (size_t)i, 0, false);
		assert_int_equal(tgo_channel_del(&m, &ch), 0);
	}
	check_counts();
	check_no_csum_errors();
}

static void test_full_checksums(void **state)
{
	(void)state;
	tx_csum(NS_C, "c0", false);
	tx_csum(NS_P, "p0", false);
	run_both_ways();
	tx_csum(NS_C, "c0", true);
	tx_csum(NS_P, "p0", true);
}

static void test_partial_checksums(void **state)
{
	(void)state;
	tx_csum(NS_S, "s0", false);
	tx_csum(NS_S, "s1", false);
	run_both_ways();
	tx_csum(NS_S, "s0", true);
	tx_csum(NS_S, "s1", true);
}

/* IPv4 without a UDP checksum (SO_NO_CHECK) is relayed without one. */
static void test_no_checksum(void **state)
{
	struct tgo_maps m;
	struct tgo_channel ch = chan_of(&F[0], 0x7fff, 60000 * MS_NS);
	int one = 1;

	(void)state;
	tgo_maps_of(g_t, &m);
	assert_int_equal(tgo_channel_set(&m, &ch), 0);
	tx_csum(NS_C, "c0", false);
	tx_csum(NS_P, "p0", false);
	assert_int_equal(setsockopt(F[0].client, SOL_SOCKET, SO_NO_CHECK, &one, sizeof(one)), 0);
	assert_int_equal(setsockopt(F[0].peer, SOL_SOCKET, SO_NO_CHECK, &one, sizeof(one)), 0);
	c2p(&F[0], ch.channel, 33, 3, true);
	p2c(&F[0], ch.channel, 33, true);
	one = 0;
	setsockopt(F[0].client, SOL_SOCKET, SO_NO_CHECK, &one, sizeof(one));
	setsockopt(F[0].peer, SOL_SOCKET, SO_NO_CHECK, &one, sizeof(one));
	tx_csum(NS_C, "c0", true);
	tx_csum(NS_P, "p0", true);
	assert_int_equal(tgo_channel_del(&m, &ch), 0);
	check_counts();
	check_no_csum_errors();
}

/* What is not a bound channel goes up untouched: STUN, another channel, a fragmented
 * datagram, an expired entry, a deleted one. Expiry is the kernel's own check. */
static void test_goes_up(void **state)
{
	struct tgo_maps m;

	(void)state;
	tgo_maps_of(g_t, &m);
	for (int i = 0; i < 2; i++) {
		struct fam *f = &F[i];
		struct tgo_channel ch = chan_of(f, 0x4abc, 1500 * MS_NS);
		uint8_t stun[20] = { 0x00, 0x01, 0x00, 0x00, 0x21, 0x12, 0xa4, 0x42 }, got[64];
		uint8_t big[3000];
		ssize_t r;

		assert_int_equal(tgo_channel_set(&m, &ch), 0);
		send_to(f->client, f->l, stun, sizeof(stun));
		r = recv_within(f->listener, got, sizeof(got), 2000, NULL, NULL);
		assert_int_equal(r, (ssize_t)sizeof(stun));
		c2p(f, 0x4abd, 10, 0, false);
		c2p(f, ch.channel, 10, 0, true);
		/* Fragments (the client's link MTU is 1500): reassembled up in user space. */
		send_to(f->client, f->l, big, chandata(big, ch.channel, 2500, 0, 1));
		r = recv_within(f->listener, big, sizeof(big), 2000, NULL, NULL);
		assert_int_equal(r, 2504);
		/* Expired: no deletion needed. */
		while (now_ns() < ch.expires_ns + 10 * MS_NS)
			usleep(20000);
		c2p(f, ch.channel, 10, 0, false);
		p2c(f, ch.channel, 10, false);
		/* Deleted: gone at once. */
		ch = chan_of(f, 0x4abc, 60000 * MS_NS);
		assert_int_equal(tgo_channel_set(&m, &ch), 0);
		c2p(f, ch.channel, 11, 0, true);
		p2c(f, ch.channel, 11, true);
		assert_int_equal(tgo_channel_del(&m, &ch), 0);
		c2p(f, ch.channel, 12, 0, false);
		p2c(f, ch.channel, 12, false);
	}
	check_counts();
	check_no_csum_errors();
}

/* Every end on the server's loopback (the daemon's own tests): the programs on lo
 * deliver locally (NOT_FWDED) to a socket that takes the datagram, and send up what no
 * socket would take. */
static void test_loopback(void **state)
{
	struct fam lo[2] = { { &LC4, &LL4, &LR4, &LP4, -1, -1, -1, -1 },
			     { &LC6, &LL6, &LR6, &LP6, -1, -1, -1, -1 } };
	struct tgo_maps m;

	(void)state;
	tgo_maps_of(g_t, &m);
	for (int i = 0; i < 2; i++) {
		struct fam *f = &lo[i];
		struct tgo_channel ch = chan_of(f, 0x5555, 60000 * MS_NS);

		f->client = sock_at(NS_S, f->c);
		f->peer = sock_at(NS_S, f->p);
		f->listener = sock_at(NS_S, f->l);
		f->relay = sock_at(NS_S, f->r);
		assert_int_equal(tgo_channel_set(&m, &ch), 0);
		c2p(f, ch.channel, 0, 0, true);
		c2p(f, ch.channel, 1200, 3, true);
		/* Without forwarding on lo (the default of a host) as well. */
		assert_int_equal(
			sh("ip netns exec %s sh -c 'echo 0 > /proc/sys/net/ipv4/conf/lo/forwarding;"
			   " echo 0 > /proc/sys/net/ipv6/conf/lo/forwarding'",
			   ns_name[NS_S]),
			0);
		c2p(f, ch.channel, 7, 0, true);
		p2c(f, ch.channel, 8, true);
		assert_int_equal(
			sh("ip netns exec %s sh -c 'echo 1 > /proc/sys/net/ipv4/conf/lo/forwarding;"
			   " echo 1 > /proc/sys/net/ipv6/conf/lo/forwarding'",
			   ns_name[NS_S]),
			0);
		p2c(f, ch.channel, 0, true);
		p2c(f, ch.channel, 3000, true);
		/* No socket at the peer's address: up, as the worker would get it. */
		close(f->peer);
		f->peer = -1;
		c2p(f, ch.channel, 10, 0, false);
		f->peer = sock_at(NS_S, f->p);
		c2p(f, ch.channel, 11, 0, true);
		assert_int_equal(tgo_channel_del(&m, &ch), 0);
		c2p(f, ch.channel, 12, 0, false);
		p2c(f, ch.channel, 13, false);
		close(f->client);
		close(f->peer);
		close(f->listener);
		close(f->relay);
	}
	check_counts();
	check_no_csum_errors();
}

/* Pinned: a close that keeps leaves the kernel relaying; a second open takes the maps
 * over (entries and counts kept); a failed open leaves nothing attached (not even the
 * earlier run's filters), the pins stay; a close that does not keep stops it all. */
static void test_takeover(void **state)
{
	struct tgo *t;
	struct tgo_maps m;
	struct tgo_channel ch = chan_of(&F[0], 0x6000, 60000 * MS_NS);
	struct tgo_channel ch6 = chan_of(&F[1], 0x6001, 60000 * MS_NS);
	char pin[128], old[192];
	struct stat st;
	struct tgo_count got;
	uint64_t entries;
	int fd;

	(void)state;
	tgo_close(g_t, false);
	g_t = NULL;
	c2p(&F[0], 0x4000, 5, 0, false);	/* detached */
	snprintf(pin, sizeof(pin), "%s/turngate/test", bpffs);
	/* A map pinned by an earlier layout (a run before an upgrade) goes at the open. */
	snprintf(old, sizeof(old), "%s/turngate", bpffs);
	assert_true(mkdir(old, 0700) == 0 || errno == EEXIST);
	assert_true(mkdir(pin, 0700) == 0 || errno == EEXIST);
	snprintf(old, sizeof(old), "%s/c2p_v1", pin);
	fd = bpf_map_create(BPF_MAP_TYPE_HASH, NULL, 4, 4, 1, NULL);
	assert_true(fd >= 0);
	assert_int_equal(bpf_obj_pin(fd, old), 0);
	close(fd);
	assert_int_equal(open_offload_on(&t, pin, TGO_ENGINE_AUTO, false), 0);
	assert_int_equal(stat(old, &st), -1);
	g_t = t;
	memset(&want_l, 0, sizeof(want_l));
	want_c = want_total = want_l;
	tgo_maps_of(t, &m);
	assert_int_equal(tgo_channel_set(&m, &ch), 0);
	assert_int_equal(tgo_channel_set(&m, &ch6), 0);
	c2p(&F[0], ch.channel, 40, 0, true);
	p2c(&F[1], ch6.channel, 41, true);
	tgo_close(t, true);
	g_t = NULL;
	/* Nobody holds a handle: the kernel still relays. */
	c2p(&F[0], ch.channel, 42, 0, true);
	p2c(&F[0], ch.channel, 43, true);
	c2p(&F[1], ch6.channel, 44, 1, true);
	/* A new open: the same maps, the programs replaced in place. */
	assert_int_equal(open_offload_on(&t, pin, TGO_ENGINE_XDP, false), 0);
	g_t = t;
	assert_int_equal(tgo_totals(t, &got, &entries), 0);
	assert_int_equal(entries, 2);
	check_counts();
	c2p(&F[0], ch.channel, 45, 0, true);
	p2c(&F[1], ch6.channel, 46, true);
	check_counts();
	tgo_close(t, true);
	g_t = NULL;
	/* A failed open: nothing relays any more; the pins stay for the next one. */
	assert_int_equal(open_offload_on(&t, pin, TGO_ENGINE_TC, true), -ENODEV);
	assert_null(t);
	c2p(&F[0], ch.channel, 47, 0, false);
	p2c(&F[1], ch6.channel, 48, false);
	assert_int_equal(open_offload(&t, pin), 0);
	g_t = t;
	assert_int_equal(tgo_totals(t, &got, &entries), 0);
	assert_int_equal(entries, 2);
	c2p(&F[0], ch.channel, 49, 0, true);
	check_counts();
	tgo_maps_of(t, &m);
	assert_int_equal(tgo_channel_del(&m, &ch), 0);
	c2p(&F[0], ch.channel, 50, 0, false);
	tgo_close(t, false);
	g_t = NULL;
	c2p(&F[1], ch6.channel, 51, 0, false);
	assert_int_equal(stat(pin, &st), -1);
	/* The group's handle again, unpinned, for the tests after this one. */
	assert_int_equal(open_offload(&g_t, NULL), 0);
	memset(&want_l, 0, sizeof(want_l));
	want_c = want_total = want_l;
	check_no_csum_errors();
}

static int run_all(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_checksums), cmocka_unit_test(test_partial_checksums),
		cmocka_unit_test(test_no_checksum),    cmocka_unit_test(test_goes_up),
		cmocka_unit_test(test_loopback),       cmocka_unit_test(test_takeover),
	};

	/* A bpffs of this test's own, in a mount namespace of its own. */
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("bpf", bpffs, "bpf", 0, NULL) < 0) {
		printf("SKIP test_offload_netns: cannot mount a bpffs: %s\n", strerror(errno));
		return 77;
	}
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

static pid_t child;

static void on_signal(int sig)
{
	if (child > 0)
		kill(child, SIGKILL);
	(void)sig;
}

int main(void)
{
	int status = 0, rc;

	if (geteuid() != 0) {
		printf("SKIP test_offload_netns: needs root (network namespaces, CAP_BPF)\n");
		return 77;
	}
	snprintf(bpffs, sizeof(bpffs), "/tmp/tgo-bpffs-XXXXXX");
	if (!mkdtemp(bpffs)) {
		bpffs[0] = '\0';
		printf("SKIP test_offload_netns: mkdtemp: %s\n", strerror(errno));
		return 77;
	}
	netns_stale_cleanup();
	if (netns_setup() < 0) {
		netns_cleanup();
		printf("SKIP test_offload_netns: cannot create the namespaces and veth pairs\n");
		return 77;
	}
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	child = fork();
	if (child == 0)
		_exit(run_all());
	while (child > 0 && waitpid(child, &status, 0) < 0 && errno == EINTR)
		;
	netns_cleanup();
	if (WIFEXITED(status))
		rc = WEXITSTATUS(status);
	else
		rc = 1, fprintf(stderr, "test_offload_netns: the tests died of signal %d\n",
				WTERMSIG(status));
	return rc;
}
