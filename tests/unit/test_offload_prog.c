/* Unit tests for the offload programs and maps (offload/offload.h): BPF_PROG_TEST_RUN of
 * the TC and the XDP program on crafted and random frames against one model in C of what
 * they must do (verdict and every output byte, checksums recomputed from scratch; XDP
 * passes up what only the TC program behind it can deliver), in a network namespace of its own with
 * known routes and neighbours; the entry API (set, delete, walk, full maps) and the counters. The
 * channels include short circuits (issue #22: a client's ChannelData rewritten into another
 * allocation's ChannelData to its client), routed and local, IPv4 and IPv6. Needs root (CAP_BPF,
 * CAP_NET_ADMIN, a namespace): exits 77 (skipped) saying why otherwise. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/bpf.h>
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/pkt_cls.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "offload/offload.h"

#ifdef HAVE_OFFLOAD

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "offload/offload_int.h"
#include "offload/relay.skel.h"
#include "offload/tgo_maps.h"

#define SEC_NS UINT64_C(1000000000)
#define FRAME_MAX 3600	/* BPF_PROG_TEST_RUN takes at most about a page */

/* ---- The namespace: lo, tgA (clients' side), tgB (peers' side, MTU 1400). -------------- */

static const uint8_t MAC_A[6] = { 2, 0, 0, 0, 0xa, 1 }, MAC_B[6] = { 2, 0, 0, 0, 0xb, 1 };
static const uint8_t MAC_CLIENT[6] = { 2, 0, 0, 0, 0xc, 2 }, MAC_PEER[6] = { 2, 0, 0, 0, 0xd, 2 };
static const uint8_t MAC_ZERO[6];
static unsigned if_a, if_b;
#define MTU_B 1400

static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

static int sysctl_set(const char *path, const char *v)
{
	FILE *f = fopen(path, "w");
	int ok;

	if (!f)
		return -1;
	ok = fputs(v, f) >= 0;
	return fclose(f) == 0 && ok ? 0 : -1;
}

/* GRO on a veth end gives it NAPI, so that its peer takes XDP frames (xdp_features
 * NDO_XMIT): ethtool -K dev gro on. */
static int gro_on(const char *dev)
{
	struct ethtool_value ev = { ETHTOOL_SGRO, 1 };
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM, 0), rc;

	if (fd < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", dev);
	ifr.ifr_data = (void *)&ev;
	rc = ioctl(fd, SIOCETHTOOL, &ifr);
	close(fd);
	return rc;
}

static int netns_setup(void)
{
	static const char *const cmds[] = {
		"ip link set lo up",
		"ip link add tgA address 02:00:00:00:0a:01 type veth peer name tgA2",
		"ip link add tgB address 02:00:00:00:0b:01 mtu 1400 type veth peer name tgB2 mtu 1400",
		"ip link set tgA up && ip link set tgA2 up && ip link set tgB up && ip link set tgB2 up",
		"ip addr add 10.0.0.1/24 dev tgA && ip addr add 10.0.1.1/24 dev tgB",
		"ip addr add fd00:a::1/64 dev tgA nodad && ip addr add fd00:b::1/64 dev tgB nodad",
		"ip neigh add 10.0.0.2 lladdr 02:00:00:00:0c:02 dev tgA nud permanent",
		"ip neigh add 10.0.1.2 lladdr 02:00:00:00:0d:02 dev tgB nud permanent",
		"ip -6 neigh add fd00:a::2 lladdr 02:00:00:00:0c:02 dev tgA nud permanent",
		"ip -6 neigh add fd00:b::2 lladdr 02:00:00:00:0d:02 dev tgB nud permanent",
	};

	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (sh("%s", cmds[i]) != 0)
			return -1;
	if (sysctl_set("/proc/sys/net/ipv4/conf/all/forwarding", "1") < 0 ||
	    sysctl_set("/proc/sys/net/ipv6/conf/all/forwarding", "1") < 0)
		return -1;
	if (gro_on("tgA2") < 0 || gro_on("tgB2") < 0)
		return -1;
	if_a = if_nametoindex("tgA");
	if_b = if_nametoindex("tgB");
	return if_a && if_b ? 0 : -1;
}

static void fwd_ingress(const char *dev, int on)
{
	char p[128];

	snprintf(p, sizeof(p), "/proc/sys/net/ipv4/conf/%s/forwarding", dev);
	assert_int_equal(sysctl_set(p, on ? "1" : "0"), 0);
	snprintf(p, sizeof(p), "/proc/sys/net/ipv6/conf/%s/forwarding", dev);
	assert_int_equal(sysctl_set(p, on ? "1" : "0"), 0);
}

/* ---- Addresses, channels and sockets of the tests ---------------------------------- */

static void a4(uint8_t a[16], const char *s)
{
	memset(a, 0, 16);
	assert_int_equal(inet_pton(AF_INET, s, a), 1);
}

static void a6(uint8_t a[16], const char *s)
{
	assert_int_equal(inet_pton(AF_INET6, s, a), 1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * SEC_NS + (uint64_t)ts.tv_nsec;
}

#define N_CH 16
static struct tgo_channel chans[N_CH];
static bool gone[N_CH];		/* deleted from the maps */
static size_t n_chans;
static int socks[8];
static size_t n_socks;

static struct tgo_channel *ch_add(int fam, const char *client, uint16_t cport, const char *listener,
				  uint16_t lport, const char *relay, uint16_t rport,
				  const char *peer, uint16_t pport, uint16_t chan, bool expired,
				  uint32_t li, uint32_t ci)
{
	struct tgo_channel *c = &chans[n_chans++];
	void (*conv)(uint8_t *, const char *) = fam == AF_INET ? a4 : a6;

	assert_true(n_chans <= N_CH);
	memset(c, 0, sizeof(*c));
	c->family = fam;
	conv(c->client, client);
	conv(c->listener, listener);
	conv(c->relay, relay);
	conv(c->peer, peer);
	c->client_port = cport;
	c->listener_port = lport;
	c->relay_port = rport;
	c->peer_port = pport;
	c->channel = chan;
	c->expires_ns = expired ? now_ns() - 1 : now_ns() + 3600 * SEC_NS;
	c->listener_idx = li;
	c->cluster_idx = ci;
	return c;
}

/* A short circuit: client:cport -> listener:lport on chan leaves from blistener:blport to
 * bclient:bcport on bchan, counted on li/ci and bli/bci. */
static void sc_add(int fam, const char *client, uint16_t cport, const char *listener,
		   uint16_t lport, uint16_t chan, const char *blistener, uint16_t blport,
		   const char *bclient, uint16_t bcport, uint16_t bchan, uint32_t li, uint32_t ci,
		   uint32_t bli, uint32_t bci)
{
	struct tgo_channel *c = ch_add(fam, client, cport, listener, lport, blistener, blport,
				       bclient, bcport, chan, false, li, ci);

	c->sc_channel = bchan;
	c->sc_listener_idx = bli;
	c->sc_cluster_idx = bci;
}

/* A UDP socket bound in this namespace: a local peer or client that receives. */
static void sock_at(int fam, const char *addr, uint16_t port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd = socket(fam, SOCK_DGRAM, 0);

	assert_true(fd >= 0);
	memset(&ss, 0, sizeof(ss));
	if (fam == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)&ss;

		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		inet_pton(AF_INET, addr, &s->sin_addr);
		len = sizeof(*s);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;

		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		inet_pton(AF_INET6, addr, &s->sin6_addr);
		len = sizeof(*s);
	}
	assert_int_equal(bind(fd, (struct sockaddr *)&ss, len), 0);
	socks[n_socks++] = fd;
}

/* The channels: routed both ways through tgA/tgB, a peer without a neighbour entry, an
 * expired one, local ones on lo with and without a socket, an unroutable peer. */
static void channels_make(void)
{
	n_chans = 0;
	ch_add(AF_INET, "10.0.0.2", 5000, "10.0.0.1", 3478, "10.0.1.1", 49152, "10.0.1.2", 6000,
	       0x4000, false, 0, 1);
	ch_add(AF_INET, "10.0.0.2", 5000, "10.0.0.1", 3478, "10.0.1.1", 49152, "10.0.1.3", 6001,
	       0x4001, false, 0, 2);
	ch_add(AF_INET, "10.0.0.2", 5000, "10.0.0.1", 3478, "10.0.1.1", 49152, "10.0.1.2", 6002,
	       0x4002, true, 0, 1);
	ch_add(AF_INET, "127.0.0.1", 5001, "127.0.0.1", 3478, "127.0.0.1", 49153, "127.0.0.1", 7000,
	       0x7fff, false, 3, 63);
	ch_add(AF_INET, "127.0.0.1", 5002, "127.0.0.1", 3478, "127.0.0.1", 49154, "127.0.0.1", 7001,
	       0x5000, false, 3, 5);
	ch_add(AF_INET, "10.0.0.2", 5003, "10.0.0.1", 3478, "10.0.1.1", 49155, "198.51.100.7", 6000,
	       0x4000, false, 1, 1);
	ch_add(AF_INET6, "fd00:a::2", 5000, "fd00:a::1", 3478, "fd00:b::1", 49152, "fd00:b::2",
	       6000, 0x4000, false, 2, 3);
	ch_add(AF_INET6, "fd00:a::2", 5000, "fd00:a::1", 3478, "fd00:b::1", 49152, "fd00:b::3",
	       6001, 0x4001, false, 2, 3);
	ch_add(AF_INET6, "fd00:a::2", 5000, "fd00:a::1", 3478, "fd00:b::1", 49152, "fd00:b::2",
	       6002, 0x4002, true, 2, 3);
	ch_add(AF_INET6, "::1", 5001, "::1", 3478, "::1", 49153, "::1", 7000, 0x7abc, false, 63, 0);
	/* Short circuits: back out of tgA to another client, and locally on lo. */
	sc_add(AF_INET, "10.0.0.5", 5010, "10.0.0.1", 3478, 0x4010, "10.0.0.1", 3479, "10.0.0.2",
	       5011, 0x4011, 4, 6, 5, 7);
	sc_add(AF_INET, "127.0.0.1", 5003, "127.0.0.1", 3478, 0x4020, "127.0.0.1", 3478,
	       "127.0.0.1", 5001, 0x4021, 3, 5, 4, 6);
	sc_add(AF_INET6, "fd00:a::5", 5010, "fd00:a::1", 3478, 0x4010, "fd00:a::1", 3479,
	       "fd00:a::2", 5011, 0x7ffe, 2, 3, 62, 63);
}

static bool sock_exists(int v6, const uint8_t *addr, uint16_t port)
{
	(void)addr;
	if (v6)
		return port == 7000 || port == 5001;
	return port == 7000 || port == 5001;
}

/* ---- Checksums, computed from scratch ---------------------------------------------- */

static uint32_t sum16(const uint8_t *p, size_t n, uint32_t s)
{
	size_t i;

	for (i = 0; i + 1 < n; i += 2)
		s += (uint32_t)(p[i] << 8 | p[i + 1]);
	if (n & 1)
		s += (uint32_t)p[n - 1] << 8;
	return s;
}

static uint16_t fold(uint32_t s)
{
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

/* The one's complement sum over the pseudo-header and the datagram (field included):
 * 0xffff for a valid checksum. */
static uint16_t udp_residual(int v6, const uint8_t *src, const uint8_t *dst, const uint8_t *udp,
			     size_t ulen)
{
	size_t alen = v6 ? 16 : 4;
	uint32_t s = sum16(src, alen, 0);

	s = sum16(dst, alen, s);
	s += 17 + (uint32_t)ulen;
	return fold(sum16(udp, ulen, s));
}

static void udp_csum_set(int v6, const uint8_t *src, const uint8_t *dst, uint8_t *udp, size_t ulen)
{
	uint16_t c;

	udp[6] = udp[7] = 0;
	c = (uint16_t)~udp_residual(v6, src, dst, udp, ulen);
	if (c == 0)
		c = 0xffff;
	udp[6] = (uint8_t)(c >> 8);
	udp[7] = (uint8_t)c;
}

static void ip4_csum_set(uint8_t *ip)
{
	uint16_t c;

	ip[10] = ip[11] = 0;
	c = (uint16_t)~fold(sum16(ip, 20, 0));
	ip[10] = (uint8_t)(c >> 8);
	ip[11] = (uint8_t)c;
}

static void put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static unsigned get16(const uint8_t *p)
{
	return (unsigned)p[0] << 8 | p[1];
}

/* ---- Frames ------------------------------------------------------------------------ */

struct spec {
	int v6;
	const uint8_t *dmac;
	uint8_t src[16], dst[16];
	uint16_t sport, dport;
	const uint8_t *payload;	/* the UDP payload */
	size_t plen;
	uint8_t tos, ttl;
	uint16_t ipid, frag;
	bool zero_csum;		/* IPv4: no checksum */
	int ip_opts;		/* IPv4: option words (ihl 5 + n) */
	bool v6_ext;		/* IPv6: a hop-by-hop header before UDP */
};

/* An Ethernet frame of s; returns its length. */
static size_t frame_build(uint8_t *f, const struct spec *s)
{
	size_t l3 = 14, ihl = s->v6 ? 40 : 20 + 4 * (size_t)s->ip_opts, ext = s->v6_ext ? 8 : 0;
	size_t l4 = l3 + ihl + ext, ulen = 8 + s->plen;
	uint8_t *ip = f + l3, *udp = f + l4;

	memcpy(f, s->dmac, 6);
	memcpy(f + 6, MAC_CLIENT, 6);
	put16(f + 12, s->v6 ? 0x86dd : 0x0800);
	memset(ip, 0, ihl + ext);
	if (!s->v6) {
		ip[0] = (uint8_t)(0x40 | (ihl / 4));
		ip[1] = s->tos;
		put16(ip + 2, (unsigned)(ihl + ulen));
		put16(ip + 4, s->ipid);
		put16(ip + 6, s->frag);
		ip[8] = s->ttl;
		ip[9] = 17;
		memcpy(ip + 12, s->src, 4);
		memcpy(ip + 16, s->dst, 4);
		for (int i = 0; i < s->ip_opts; i++)
			ip[20 + 4 * i] = 1;	/* NOP options */
		ip4_csum_set(ip);
	} else {
		ip[0] = 0x60 | (s->tos >> 4);
		ip[1] = (uint8_t)(s->tos << 4);
		put16(ip + 4, (unsigned)(ext + ulen));
		ip[6] = s->v6_ext ? 0 : 17;
		ip[7] = s->ttl;
		memcpy(ip + 8, s->src, 16);
		memcpy(ip + 24, s->dst, 16);
		if (ext)
			ip[40] = 17;	/* hop-by-hop: next UDP, length 0, PadN */
	}
	put16(udp, s->sport);
	put16(udp + 2, s->dport);
	put16(udp + 4, (unsigned)ulen);
	memcpy(udp + 8, s->payload, s->plen);
	if (s->zero_csum && !s->v6)
		udp[6] = udp[7] = 0;
	else
		udp_csum_set(s->v6, s->src, s->dst, udp, ulen);
	return l4 + ulen;
}

/* ---- The model --------------------------------------------------------------------- */

enum {
	M_PASS,
	M_REDIRECT,
	M_LOCAL,
	M_DROP
};

struct verdict {
	int kind;
	bool bad_csum;		/* the input's UDP checksum is wrong: the output's is too */
	size_t csum_off;	/* where the output's UDP checksum is */
	uint8_t out[FRAME_MAX + 8];
	size_t out_len;
	int dir;		/* 0: client -> peer, 1: peer -> client, 2: short circuit */
	uint32_t li, ci, plen;
	uint32_t sli, sci;	/* dir 2: the receiver's counter slots */
	bool xdp_pass;		/* relayed by TC, passed up untouched by XDP */
};

struct run_ctx {
	unsigned ingress;
	uint32_t gso;		/* TC only: an XDP frame has no GSO */
	bool fwd_off;		/* forwarding disabled on the ingress */
};

/* The program under test: the TC one, or the XDP one (set by each test's setup). */
static bool g_xdp;

/* Where the FIB sends a destination: SUCCESS with MACs, NO_NEIGH, or local/none. */
enum {
	RT_FWD,
	RT_NONEIGH,
	RT_LOCAL,
	RT_NONE
};

static int model_route(int v6, const uint8_t *dst, unsigned *egress, const uint8_t **dmac,
		       const uint8_t **smac, unsigned *mtu)
{
	uint8_t a[16];

	*mtu = 1500;
	if (!v6) {
		a4(a, "10.0.0.2");
		if (!memcmp(dst, a, 4)) {
			*egress = if_a, *dmac = MAC_CLIENT, *smac = MAC_A;
			return RT_FWD;
		}
		a4(a, "10.0.1.2");
		if (!memcmp(dst, a, 4)) {
			*egress = if_b, *dmac = MAC_PEER, *smac = MAC_B, *mtu = MTU_B;
			return RT_FWD;
		}
		if (dst[0] == 10 && dst[1] == 0 && dst[2] == 1 && dst[3] != 1) {
			*egress = if_b, *mtu = MTU_B;
			return RT_NONEIGH;
		}
		if (dst[0] == 10 && dst[1] == 0 && dst[2] == 0 && dst[3] != 1) {
			*egress = if_a;
			return RT_NONEIGH;
		}
		if (dst[0] == 127 || (dst[0] == 10 && dst[1] == 0 && dst[3] == 1 && dst[2] < 2))
			return RT_LOCAL;
		return RT_NONE;
	}
	a6(a, "fd00:a::2");
	if (!memcmp(dst, a, 16)) {
		*egress = if_a, *dmac = MAC_CLIENT, *smac = MAC_A;
		return RT_FWD;
	}
	a6(a, "fd00:b::2");
	if (!memcmp(dst, a, 16)) {
		*egress = if_b, *dmac = MAC_PEER, *smac = MAC_B, *mtu = MTU_B;
		return RT_FWD;
	}
	a6(a, "::1");
	if (!memcmp(dst, a, 16))
		return RT_LOCAL;
	a6(a, "fd00:b::");
	if (!memcmp(dst, a, 8)) {
		*egress = if_b, *mtu = MTU_B;
		return dst[15] == 1 && !memcmp(dst + 8, a + 8, 7) ? RT_LOCAL : RT_NONEIGH;
	}
	a6(a, "fd00:a::");
	if (!memcmp(dst, a, 8)) {
		*egress = if_a;
		return dst[15] == 1 && !memcmp(dst + 8, a + 8, 7) ? RT_LOCAL : RT_NONEIGH;
	}
	return RT_NONE;
}

static const uint8_t *dev_mac(unsigned ifindex)
{
	return ifindex == if_a ? MAC_A : ifindex == if_b ? MAC_B : MAC_ZERO;
}

static unsigned dev_mtu(unsigned ifindex)
{
	return ifindex == if_a ? 1500 : ifindex == if_b ? MTU_B : 65536;
}

static const struct tgo_channel *model_c2p(int fam, const uint8_t *src, uint16_t sport,
					   const uint8_t *dst, uint16_t dport, uint16_t chan)
{
	size_t alen = fam == AF_INET ? 4 : 16;

	for (size_t i = 0; i < n_chans; i++) {
		const struct tgo_channel *c = &chans[i];

		if (!gone[i] && c->family == fam && c->channel == chan && c->client_port == sport &&
		    c->listener_port == dport && !memcmp(c->client, src, alen) &&
		    !memcmp(c->listener, dst, alen))
			return c;
	}
	return NULL;
}

static const struct tgo_channel *model_p2c(int fam, const uint8_t *src, uint16_t sport,
					   const uint8_t *dst, uint16_t dport)
{
	size_t alen = fam == AF_INET ? 4 : 16;

	for (size_t i = 0; i < n_chans; i++) {
		const struct tgo_channel *c = &chans[i];

		if (!gone[i] && !c->sc_channel && c->family == fam && c->peer_port == sport &&
		    c->relay_port == dport && !memcmp(c->peer, src, alen) &&
		    !memcmp(c->relay, dst, alen))
			return c;
	}
	return NULL;
}

/* What the program must do with frame f: the verdict and the exact output frame. */
static void model(const uint8_t *f, size_t len, const struct run_ctx *rc, struct verdict *v)
{
	size_t l4, ulen, l3len, alen, payload_off, plen;
	const uint8_t *ip = f + 14, *udp, *dmac = NULL, *smac = NULL;
	const struct tgo_channel *c = NULL;
	uint8_t src[16] = { 0 }, dst[16] = { 0 };
	uint16_t sport, dport, chan = 0;
	unsigned egress = 0, mtu, chlen = 0;
	int v6, route, dir = -1;
	bool chan_ok = false;
	uint8_t *o;

	v->kind = M_PASS;
	v->bad_csum = false;
	v->xdp_pass = false;
	memcpy(v->out, f, len);
	v->out_len = len;
	if ((rc->gso && !g_xdp) || len < 14 || memcmp(f, dev_mac(rc->ingress), 6) != 0)
		return;
	if (get16(f + 12) == 0x0800) {
		v6 = 0;
		if (len < 14 + 20 + 8 || ip[0] != 0x45 || ip[9] != 17 || (get16(ip + 6) & 0x3fff) ||
		    fold(sum16(ip, 20, 0)) != 0xffff)
			return;
		l4 = 14 + 20;
		l3len = get16(ip + 2);
		ulen = get16(f + l4 + 4);
		if (l3len != 20 + ulen)
			return;
		memcpy(src, ip + 12, 4);
		memcpy(dst, ip + 16, 4);
	} else if (get16(f + 12) == 0x86dd) {
		v6 = 1;
		if (len < 14 + 40 + 8 || (ip[0] >> 4) != 6 || ip[6] != 17)
			return;
		l4 = 14 + 40;
		ulen = get16(f + l4 + 4);
		l3len = 40 + get16(ip + 4);
		if (l3len != 40 + ulen || get16(f + l4 + 6) == 0)
			return;
		memcpy(src, ip + 8, 16);
		memcpy(dst, ip + 24, 16);
	} else {
		return;
	}
	if (ulen < 8 || 14 + l3len > len)
		return;
	alen = v6 ? 16 : 4;
	udp = f + l4;
	sport = (uint16_t)get16(udp);
	dport = (uint16_t)get16(udp + 2);
	payload_off = l4 + 8;
	if (ulen >= 12) {
		unsigned cn = get16(f + payload_off), n = get16(f + payload_off + 2);

		if (cn >= 0x4000 && cn <= 0x7fff && n <= ulen - 12 && ulen - 12 - n <= 3) {
			chan_ok = true;
			chan = (uint16_t)cn;
			chlen = n;
		}
	}
	if (chan_ok)
		c = model_c2p(v6 ? AF_INET6 : AF_INET, src, sport, dst, dport, chan);
	if (c) {
		dir = c->sc_channel ? 2 : 0;
	} else {
		c = model_p2c(v6 ? AF_INET6 : AF_INET, src, sport, dst, dport);
		if (c)
			dir = 1;
	}
	if (!c || c->expires_ns <= now_ns())
		return;
	plen = dir == 1 ? ulen - 8 : chlen;
	if (plen > TGO_MAX_PAYLOAD)
		return;
	{
		const uint8_t *ndst = dir == 1 ? c->client : c->peer;
		bool lo_dst = v6 ? !memcmp(ndst, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1", 16)
				 : ndst[0] == 127;

		if (rc->fwd_off && !(rc->ingress == 1 && lo_dst))
			return;
		size_t new_l3 = (v6 ? 40 : 20) + (dir == 2 ? ulen : 8 + plen + (dir == 1 ? 4 : 0));

		route = model_route(v6, ndst, &egress, &dmac, &smac, &mtu);
		if (route == RT_NONE)
			return;
		if ((route == RT_FWD || route == RT_NONEIGH) && new_l3 > mtu)
			return;
		if (route == RT_LOCAL &&
		    (rc->ingress != 1 ||
		     !sock_exists(v6, ndst, dir == 1 ? c->client_port : c->peer_port)))
			return;
	}
	/* The relayed frame, built afresh. */
	o = v->out;
	memcpy(o, f, l4);
	if (route == RT_FWD) {
		memcpy(o, dmac, 6);
		memcpy(o + 6, smac, 6);
	}
	{
		const uint8_t *nsrc = dir == 1 ? c->listener : c->relay,
			      *ndst = dir == 1 ? c->client : c->peer;
		unsigned nsport = dir == 1 ? c->listener_port : c->relay_port;
		unsigned ndport = dir == 1 ? c->client_port : c->peer_port;
		size_t new_ulen = dir == 2 ? ulen : 8 + plen + (dir == 1 ? 4 : 0);
		uint8_t *oip = o + 14, *oudp = o + l4;

		if (!v6) {
			memcpy(oip + 12, nsrc, 4);
			memcpy(oip + 16, ndst, 4);
			put16(oip + 2, (unsigned)(20 + new_ulen));
			oip[8] = 64;
			ip4_csum_set(oip);
		} else {
			memcpy(oip + 8, nsrc, 16);
			memcpy(oip + 24, ndst, 16);
			put16(oip + 4, (unsigned)new_ulen);
			oip[7] = 64;
		}
		put16(oudp, nsport);
		put16(oudp + 2, ndport);
		put16(oudp + 4, (unsigned)new_ulen);
		if (dir == 0) {
			memcpy(oudp + 8, f + payload_off + 4, plen);
		} else if (dir == 2) {
			/* The whole message, padding included, onto the receiver's channel. */
			memcpy(oudp + 8, f + payload_off, ulen - 8);
			put16(oudp + 8, c->sc_channel);
		} else {
			put16(oudp + 8, c->channel);
			put16(oudp + 10, (unsigned)plen);
			memcpy(oudp + 12, f + payload_off, plen);
		}
		if (v6 || get16(udp + 6) != 0)
			udp_csum_set(v6, nsrc, ndst, oudp, new_ulen);
		v->out_len = l4 + new_ulen;
		v->csum_off = l4 + 6;
		v->bad_csum = (v6 || get16(udp + 6) != 0) &&
			      udp_residual(v6, src, dst, udp, ulen) != 0xffff;
	}
	(void)alen;
	v->kind = route == RT_LOCAL ? M_LOCAL : M_REDIRECT;
	/* XDP delivers only what it can send itself: a frame within the ingress MTU (a longer
	 * one is a GRO packet), a checksum it verified (a partial or wrong one goes up), a
	 * route with a neighbour out of an interface that takes XDP frames (tgA and tgB).
	 * The rest goes up untouched, to the TC program behind. */
	v->xdp_pass = len - 14 > dev_mtu(rc->ingress) || v->bad_csum || route != RT_FWD;
	v->dir = dir;
	v->li = c->listener_idx;
	v->ci = c->cluster_idx;
	v->sli = c->sc_listener_idx;
	v->sci = c->sc_cluster_idx;
	v->plen = (uint32_t)plen;
}

/* ---- Running the program ----------------------------------------------------------- */

static struct tgo *g_t;
static int g_prog = -1, g_prog_xdp = -1;
static unsigned g_mode_relayed;	/* relayed by the program under test */
static struct tgo_count g_lcount[TGO_MAX_LISTENERS], g_ccount[TGO_MAX_CLUSTERS], g_total, g_short;
static unsigned g_relayed, g_passed;

static void count_expect(const struct tgo_channel *c, int dir, uint32_t plen)
{
	g_lcount[c->listener_idx].pkts[dir]++;
	g_lcount[c->listener_idx].bytes[dir] += plen;
	g_ccount[c->cluster_idx].pkts[dir]++;
	g_ccount[c->cluster_idx].bytes[dir] += plen;
	g_total.pkts[dir]++;
	g_total.bytes[dir] += plen;
	g_relayed++;
}

static int prog_run(const uint8_t *f, size_t len, const struct run_ctx *rc, uint8_t *out,
		    size_t *out_len)
{
	struct __sk_buff ctx;
	struct xdp_md xctx;
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	int err;

	memset(&ctx, 0, sizeof(ctx));
	ctx.ifindex = rc->ingress;
	ctx.ingress_ifindex = rc->ingress;
	ctx.gso_size = rc->gso;
	if (rc->gso)
		ctx.gso_segs = 2;
	memset(&xctx, 0, sizeof(xctx));
	xctx.ingress_ifindex = rc->ingress;
	xctx.data_end = (uint32_t)len;	/* the kernel wants the frame's length here */
	opts.data_in = f;
	opts.data_size_in = (uint32_t)len;
	opts.data_out = out;
	opts.data_size_out = FRAME_MAX + 8;
	opts.ctx_in = g_xdp ? (void *)&xctx : (void *)&ctx;
	opts.ctx_size_in = g_xdp ? sizeof(xctx) : sizeof(ctx);
	err = bpf_prog_test_run_opts(g_xdp ? g_prog_xdp : g_prog, &opts);
	/* The kernel refuses to test an skb shorter than its IP header; such a frame passes
	 * up by the length check the program starts with. */
	if (err == -EINVAL && len < 14 + 40 && !g_xdp) {
		memcpy(out, f, len);
		*out_len = len;
		return TC_ACT_OK;
	}
	if (err != 0)
		fprintf(stderr, "test run of %zu bytes (ingress %u, gso %u): %s\n", len,
			rc->ingress, rc->gso, strerror(-err));
	assert_int_equal(err, 0);
	*out_len = opts.data_size_out;
	return (int)opts.retval;
}

static void hexdiff(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
	for (size_t i = 0; i < (alen > blen ? alen : blen) && i < 120; i++)
		fprintf(stderr, "%s%02x/%02x", i % 16 ? " " : "\n  ", i < alen ? a[i] : 0,
			i < blen ? b[i] : 0);
	fprintf(stderr, "\n");
}

/* Runs f, checks the program against the model, and checks the output's checksums from
 * scratch; returns the model's verdict kind. */
static int check_frame(const uint8_t *f, size_t len, const struct run_ctx *rc)
{
	static struct verdict v;
	static uint8_t out[FRAME_MAX + 8];
	size_t out_len;
	int ret = prog_run(f, len, rc, out, &out_len);
	int want = g_xdp ? XDP_PASS : TC_ACT_OK, kind;

	model(f, len, rc, &v);
	kind = v.kind;
	if (g_xdp && v.xdp_pass && v.kind != M_PASS) {
		v.kind = M_PASS;
		memcpy(v.out, f, len);
		v.out_len = len;
		v.bad_csum = false;
	}
	if (v.kind == M_REDIRECT)
		want = g_xdp ? XDP_REDIRECT : TC_ACT_REDIRECT;
	if (v.bad_csum && out_len == v.out_len) {
		/* The checksum stays wrong by as much as the input's (checked below). */
		size_t l4 = v.csum_off - 6;
		int v6 = get16(f + 12) == 0x86dd;
		const uint8_t *ip = f + 14, *oip = out + 14;
		uint16_t r_in = udp_residual(v6, v6 ? ip + 8 : ip + 12, v6 ? ip + 24 : ip + 16,
					     f + l4, get16(f + l4 + 4));

		assert_int_equal(udp_residual(v6, v6 ? oip + 8 : oip + 12, v6 ? oip + 24 : oip + 16,
					      out + l4, out_len - l4),
				 r_in);
		v.out[v.csum_off] = out[v.csum_off];
		v.out[v.csum_off + 1] = out[v.csum_off + 1];
	}
	if (ret != want || out_len != v.out_len || memcmp(out, v.out, out_len) != 0) {
		fprintf(stderr, "mismatch: ret %d want %d, len %zu want %zu (model kind %d)\n", ret,
			want, out_len, v.out_len, v.kind);
		hexdiff(out, out_len, v.out, v.out_len);
		fail();
	}
	if (v.kind == M_REDIRECT || v.kind == M_LOCAL) {
		int v6 = get16(out + 12) == 0x86dd;
		const uint8_t *ip = out + 14, *udp = out + 14 + (v6 ? 40 : 20);
		size_t ulen = get16(udp + 4);

		if (!v6)
			assert_int_equal(fold(sum16(ip, 20, 0)), 0xffff);
		if ((v6 || get16(udp + 6)) && !v.bad_csum)
			assert_int_equal(udp_residual(v6, v6 ? ip + 8 : ip + 12,
						      v6 ? ip + 24 : ip + 16, udp, ulen),
					 0xffff);
		int d = v.dir == 1;

		g_lcount[v.li].pkts[d]++;
		g_lcount[v.li].bytes[d] += v.plen;
		g_ccount[v.ci].pkts[d]++;
		g_ccount[v.ci].bytes[d] += v.plen;
		g_total.pkts[d]++;
		g_total.bytes[d] += v.plen;
		if (v.dir == 2) {
			/* Sent by one allocation, received by the other. */
			g_lcount[v.sli].pkts[1]++;
			g_lcount[v.sli].bytes[1] += v.plen;
			g_ccount[v.sci].pkts[1]++;
			g_ccount[v.sci].bytes[1] += v.plen;
			g_total.pkts[1]++;
			g_total.bytes[1] += v.plen;
			g_short.pkts[0]++;
			g_short.bytes[0] += v.plen;
		}
		g_relayed++;
		g_mode_relayed++;
	} else {
		g_passed++;
	}
	return kind;
}

/* ---- Frame makers ------------------------------------------------------------------ */

static uint8_t g_payload[FRAME_MAX];

/* A ChannelData datagram of c's client (n data bytes, pad bytes of padding). */
static struct spec spec_c2p(const struct tgo_channel *c, uint16_t chan, size_t n, size_t pad,
			    unsigned len_field)
{
	struct spec s;

	memset(&s, 0, sizeof(s));
	s.v6 = c->family == AF_INET6;
	s.dmac = c->client[0] == 127 || (s.v6 && c->client[15] == 1 && c->client[0] == 0) ? MAC_ZERO
											  : MAC_A;
	memcpy(s.src, c->client, 16);
	memcpy(s.dst, c->listener, 16);
	s.sport = c->client_port;
	s.dport = c->listener_port;
	put16(g_payload, chan);
	put16(g_payload + 2, len_field);
	for (size_t i = 0; i < n + pad; i++)
		g_payload[4 + i] = (uint8_t)(i * 7 + 3);
	s.payload = g_payload;
	s.plen = 4 + n + pad;
	s.ttl = 17;
	s.ipid = 0x1234;
	s.frag = 0x4000;	/* DF */
	s.tos = 0xb8;
	return s;
}

static struct spec spec_p2c(const struct tgo_channel *c, size_t n)
{
	struct spec s;

	memset(&s, 0, sizeof(s));
	s.v6 = c->family == AF_INET6;
	s.dmac = c->peer[0] == 127 || (s.v6 && c->peer[15] == 1 && c->peer[0] == 0) ? MAC_ZERO
										    : MAC_B;
	memcpy(s.src, c->peer, 16);
	memcpy(s.dst, c->relay, 16);
	s.sport = c->peer_port;
	s.dport = c->relay_port;
	for (size_t i = 0; i < n; i++)
		g_payload[i] = (uint8_t)(0x40 + i * 13);
	s.payload = g_payload;
	s.plen = n;
	s.ttl = 3;
	return s;
}

static unsigned ingress_of(const struct spec *s)
{
	return s->dmac == MAC_ZERO ? 1 : s->dmac == MAC_A ? if_a : if_b;
}

static int run_spec(const struct spec *s, size_t trail)
{
	static uint8_t f[FRAME_MAX + 64];
	struct run_ctx rc = { ingress_of(s), 0, false };
	size_t len = frame_build(f, s);

	for (size_t i = 0; i < trail; i++)
		f[len++] = 0xee;
	return check_frame(f, len, &rc);
}

/* ---- Tests ------------------------------------------------------------------------- */

static int group_setup(void **state)
{
	/* tgA and tgB for the XDP program's interface table (their link addresses, and that
	 * they take XDP frames: their peers have GRO on). */
	const char *ifs[] = { "lo", "tgA", "tgB" };
	struct tgo_opts o = { TGO_ENGINE_TC, ifs, 3, NULL, 64, false };
	struct tgo_maps m;
	char why[256];

	(void)state;
	if (tgo_open(&o, &g_t, why, sizeof(why)) != 0) {
		fprintf(stderr, "tgo_open: %s\n", why);
		return -1;
	}
	g_prog = bpf_program__fd(g_t->skel->progs.tgo_tc);
	g_prog_xdp = bpf_program__fd(g_t->skel->progs.tgo_xdp);
	if (!tgo_iface_xmit((int)if_a) || !tgo_iface_xmit((int)if_b) || tgo_iface_xmit(1)) {
		fprintf(stderr, "tgA and tgB must take XDP frames, lo not\n");
		return -1;
	}
	channels_make();
	tgo_maps_of(g_t, &m);
	for (size_t i = 0; i < n_chans; i++)
		if (tgo_channel_set(&m, &chans[i]) != 0)
			return -1;
	sock_at(AF_INET, "127.0.0.1", 7000);
	sock_at(AF_INET, "127.0.0.1", 5001);
	sock_at(AF_INET6, "::1", 7000);
	sock_at(AF_INET6, "::1", 5001);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	tgo_close(g_t, false);
	for (size_t i = 0; i < n_socks; i++)
		close(socks[i]);
	return 0;
}

static void test_relay_both_ways(void **state)
{
	struct spec s;

	(void)state;
	for (size_t i = 0; i < n_chans; i++) {
		const struct tgo_channel *c = &chans[i];
		int want_c2p = M_REDIRECT, want_p2c = M_REDIRECT;

		if (c->expires_ns < now_ns())
			want_c2p = want_p2c = M_PASS;
		else if (c->sc_channel)	/* one entry: nothing comes back to a relay port */
			want_c2p = c->peer[0] == 127 ? M_LOCAL : M_REDIRECT, want_p2c = M_PASS;
		else if (c->peer[0] == 198)	/* no route to the peer; the client has one */
			want_c2p = M_PASS;
		else if (c->peer[0] == 127 || (c->family == AF_INET6 && c->peer[0] == 0))
			want_c2p = want_p2c = c->peer_port == 7000 ? M_LOCAL : M_PASS;
		s = spec_c2p(c, c->channel, 100, 0, 100);
		assert_int_equal(run_spec(&s, 0), want_c2p);
		s = spec_p2c(c, 101);
		assert_int_equal(run_spec(&s, 0), want_p2c);
	}
}

static void test_lengths_and_padding(void **state)
{
	const struct tgo_channel *c4 = &chans[0], *c6 = &chans[6];
	struct spec s;

	(void)state;
	for (int v = 0; v < 2; v++) {
		const struct tgo_channel *c = v ? c6 : c4;

		for (size_t n = 0; n < 8; n++)
			for (size_t pad = 0; pad <= 5; pad++) {
				s = spec_c2p(c, c->channel, n, pad, (unsigned)n);
				assert_int_equal(run_spec(&s, 0), pad <= 3 ? M_REDIRECT : M_PASS);
			}
		/* Length field beyond the datagram; shorter than the data by 4 (padding 4). */
		s = spec_c2p(c, c->channel, 10, 0, 11);
		assert_int_equal(run_spec(&s, 0), M_PASS);
		s = spec_c2p(c, c->channel, 10, 0, 0xffff);
		assert_int_equal(run_spec(&s, 0), M_PASS);
		/* Ethernet padding after the datagram: relayed, trimmed. */
		s = spec_c2p(c, c->channel, 3, 1, 3);
		assert_int_equal(run_spec(&s, 18), M_REDIRECT);
		s = spec_p2c(c, 0);
		assert_int_equal(run_spec(&s, 18), M_REDIRECT);
		/* The MTU of tgB (1400) toward the peer; 1500 toward the client. */
		s = spec_c2p(c, c->channel, MTU_B - 28 - 20 * v, 0, MTU_B - 28 - 20 * v);
		assert_int_equal(run_spec(&s, 0), M_REDIRECT);
		s = spec_c2p(c, c->channel, MTU_B - 27 - 20 * v, 0, MTU_B - 27 - 20 * v);
		assert_int_equal(run_spec(&s, 0), M_PASS);
		s = spec_p2c(c, 1500 - 32 - 20 * v);
		assert_int_equal(run_spec(&s, 0), M_REDIRECT);
		s = spec_p2c(c, 1500 - 31 - 20 * v);
		assert_int_equal(run_spec(&s, 0), M_PASS);
		/* Several move chunks. */
		s = spec_p2c(&chans[v ? 9 : 3], 3000);
		assert_int_equal(run_spec(&s, 0), M_LOCAL);
		s = spec_c2p(&chans[v ? 9 : 3], chans[v ? 9 : 3].channel, 3001, 2, 3001);
		assert_int_equal(run_spec(&s, 0), M_LOCAL);
	}
}

static void test_headers_refused(void **state)
{
	const struct tgo_channel *c4 = &chans[0], *c6 = &chans[6];
	static uint8_t f[FRAME_MAX];
	struct run_ctx rc = { 0, 0, false };
	struct spec s;
	size_t len;

	(void)state;
	/* IP options, fragments (MF, offset), IPv6 extension header. */
	s = spec_c2p(c4, c4->channel, 20, 0, 20);
	s.ip_opts = 1;
	assert_int_equal(run_spec(&s, 0), M_PASS);
	s.ip_opts = 0;
	s.frag = 0x2000;
	assert_int_equal(run_spec(&s, 0), M_PASS);
	s.frag = 0x0001;
	assert_int_equal(run_spec(&s, 0), M_PASS);
	s.frag = 0;
	assert_int_equal(run_spec(&s, 0), M_REDIRECT);
	s = spec_c2p(c6, c6->channel, 20, 0, 20);
	s.v6_ext = true;
	assert_int_equal(run_spec(&s, 0), M_PASS);
	/* Channel numbers outside 0x4000-0x7fff; an unbound one; no entry at all. */
	s = spec_c2p(c4, 0x3fff, 20, 0, 20);
	assert_int_equal(run_spec(&s, 0), M_PASS);
	s = spec_c2p(c4, 0x8000, 20, 0, 20);
	assert_int_equal(run_spec(&s, 0), M_PASS);
	s = spec_c2p(c4, 0x4003, 20, 0, 20);
	assert_int_equal(run_spec(&s, 0), M_PASS);
	s = spec_c2p(c4, c4->channel, 20, 0, 20);
	s.sport = 5999;
	assert_int_equal(run_spec(&s, 0), M_PASS);
	/* Truncated frames: every length below the whole one. */
	s = spec_c2p(c4, c4->channel, 9, 0, 9);
	len = frame_build(f, &s);
	rc.ingress = if_a;
	for (size_t l = 14; l < len; l++)
		assert_int_equal(check_frame(f, l, &rc), M_PASS);
	s = spec_p2c(c6, 5);
	len = frame_build(f, &s);
	rc.ingress = if_b;
	for (size_t l = 14; l < len; l++)
		assert_int_equal(check_frame(f, l, &rc), M_PASS);
	/* IPv6 without a checksum; IPv4 without one is relayed with none. */
	s = spec_p2c(c6, 30);
	len = frame_build(f, &s);
	f[len - 30 - 2] = f[len - 30 - 1] = 0;
	assert_int_equal(check_frame(f, len, &rc), M_PASS);
	s = spec_p2c(c4, 30);
	s.zero_csum = true;
	assert_int_equal(run_spec(&s, 0), M_REDIRECT);
	s = spec_c2p(c4, c4->channel, 31, 1, 31);
	s.zero_csum = true;
	assert_int_equal(run_spec(&s, 0), M_REDIRECT);
	/* A damaged IPv4 header; a frame for another host; GSO. */
	s = spec_c2p(c4, c4->channel, 20, 0, 20);
	len = frame_build(f, &s);
	f[14 + 8] ^= 1;
	rc.ingress = if_a;
	assert_int_equal(check_frame(f, len, &rc), M_PASS);
	f[14 + 8] ^= 1;
	f[0] ^= 2;
	assert_int_equal(check_frame(f, len, &rc), M_PASS);
	f[0] ^= 2;
	rc.gso = 1000;
	if (!g_xdp)
		assert_int_equal(check_frame(f, len, &rc), M_PASS);
}

/* A datagram with a wrong checksum stays wrong by the same amount: the peer's stack drops
 * it as it would have dropped the original. */
static void test_bad_checksum_kept(void **state)
{
	static uint8_t f[FRAME_MAX], out[FRAME_MAX + 8];
	struct run_ctx rc = { 0, 0, false };
	size_t len, out_len;
	struct spec s;

	(void)state;
	for (int dir = 0; dir < 2; dir++)
		for (int v = 0; v < 2; v++) {
			const struct tgo_channel *c = &chans[v ? 6 : 0];
			size_t l4 = 14 + (v ? 40 : 20);
			uint16_t r_in, r_out;
			const uint8_t *ip = out + 14;

			s = dir ? spec_p2c(c, 77) : spec_c2p(c, c->channel, 77, 2, 77);
			len = frame_build(f, &s);
			f[l4 + 6] ^= 0x10;
			r_in = udp_residual(v, s.src, s.dst, f + l4, len - l4);
			rc.ingress = ingress_of(&s);
			if (g_xdp) {
				/* Up to the TC program behind, untouched. */
				assert_int_equal(prog_run(f, len, &rc, out, &out_len), XDP_PASS);
				assert_int_equal(out_len, len);
				assert_memory_equal(out, f, len);
				continue;
			}
			assert_int_equal(prog_run(f, len, &rc, out, &out_len), TC_ACT_REDIRECT);
			count_expect(c, dir, 77);
			r_out = udp_residual(v, v ? ip + 8 : ip + 12, v ? ip + 24 : ip + 16,
					     out + l4, out_len - l4);
			assert_int_not_equal(r_in, 0xffff);
			assert_int_equal(r_in, r_out);
		}
}

static void test_route_results(void **state)
{
	struct spec s;

	(void)state;
	/* NO_NEIGH: redirect_neigh, MACs left to the neighbour code. */
	s = spec_c2p(&chans[1], chans[1].channel, 50, 0, 50);
	assert_int_equal(run_spec(&s, 0), M_REDIRECT);
	s = spec_c2p(&chans[7], chans[7].channel, 50, 0, 50);
	assert_int_equal(run_spec(&s, 0), M_REDIRECT);
	/* Forwarding off on the ingress: untouched. */
	fwd_ingress("tgA", 0);
	{
		static uint8_t f[FRAME_MAX];
		struct run_ctx rc = { if_a, 0, true };
		size_t len;

		s = spec_c2p(&chans[0], chans[0].channel, 50, 0, 50);
		len = frame_build(f, &s);
		assert_int_equal(check_frame(f, len, &rc), M_PASS);
		s = spec_c2p(&chans[6], chans[6].channel, 50, 0, 50);
		len = frame_build(f, &s);
		assert_int_equal(check_frame(f, len, &rc), M_PASS);
	}
	fwd_ingress("tgA", 1);
	/* Loopback to a loopback address needs no forwarding on lo. */
	fwd_ingress("lo", 0);
	{
		static uint8_t f[FRAME_MAX];
		struct run_ctx rc = { 1, 0, true };
		size_t len;

		s = spec_c2p(&chans[3], chans[3].channel, 50, 0, 50);
		len = frame_build(f, &s);
		assert_int_equal(check_frame(f, len, &rc), M_LOCAL);
		s = spec_p2c(&chans[9], 50);
		len = frame_build(f, &s);
		assert_int_equal(check_frame(f, len, &rc), M_LOCAL);
	}
	fwd_ingress("lo", 1);
	/* A local destination arriving on tgA (not lo): up to user space. */
	{
		static uint8_t f[FRAME_MAX];
		struct run_ctx rc = { if_a, 0, false };
		size_t len;

		s = spec_c2p(&chans[3], chans[3].channel, 50, 0, 50);
		s.dmac = MAC_A;
		len = frame_build(f, &s);
		assert_int_equal(check_frame(f, len, &rc), M_PASS);
	}
}

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return (uint32_t)(rnd_state >> 11);
}

/* Random frames: valid ones of every channel and direction, then mutated (truncated,
 * padded, a header byte or length changed, another channel, a random byte anywhere). */
static void test_random_frames(void **state)
{
	static uint8_t f[FRAME_MAX + 64];
	unsigned kinds[4] = { 0 }, relayed = g_mode_relayed;

	(void)state;
	for (int iter = 0; iter < 60000; iter++) {
		const struct tgo_channel *c = &chans[rnd() % n_chans];
		size_t n = rnd() % 4 == 0 ? rnd() % 1600 : rnd() % 64;
		struct run_ctx rc = { 0, 0, false };
		struct spec s;
		size_t len;

		if (rnd() & 1)
			s = spec_c2p(c, rnd() % 8 ? c->channel : (uint16_t)rnd(), n, rnd() % 5,
				     rnd() % 8 ? (unsigned)n : (unsigned)(n + rnd() % 9 - 4));
		else
			s = spec_p2c(c, n);
		s.zero_csum = !s.v6 && rnd() % 8 == 0;
		if (rnd() % 16 == 0)
			s.ip_opts = 1 + (int)(rnd() % 3);
		if (rnd() % 16 == 0)
			s.v6_ext = s.v6;
		if (rnd() % 16 == 0)
			s.frag = (uint16_t)rnd();
		len = frame_build(f, &s);
		rc.ingress = ingress_of(&s);
		switch (rnd() % 8) {
		case 0:
			len = 14 + rnd() % (len - 13);
			break;
		case 1:
			for (unsigned k = rnd() % 20; k > 0 && len < FRAME_MAX; k--)
				f[len++] = (uint8_t)rnd();
			break;
		case 2:
			f[14 + rnd() % (len - 14)] = (uint8_t)rnd();
			break;
		case 3:
			f[rnd() % (len < 80 ? len : 80)] ^= (uint8_t)(1u << (rnd() % 8));
			break;
		case 4:
			rc.gso = rnd() % 4 == 0 ? 1400 : 0;
			break;
		default:
			break;
		}
		kinds[check_frame(f, len, &rc)]++;
	}
	print_message("random frames: %u passed up, %u redirected, %u delivered locally\n",
		      kinds[M_PASS], kinds[M_REDIRECT], kinds[M_LOCAL]);
	assert_true(kinds[M_PASS] > 1000 && kinds[M_REDIRECT] > 1000 && kinds[M_LOCAL] > 100);
	print_message("%s relayed %u\n", g_xdp ? "XDP" : "TC", g_mode_relayed - relayed);
	assert_true(g_mode_relayed - relayed > 1000);
}

/* The counters: every relayed datagram once, per listener, per cluster and in total. */
static void test_counters(void **state)
{
	struct tgo_count got;
	uint64_t entries;

	(void)state;
	for (uint32_t i = 0; i < TGO_MAX_LISTENERS; i++) {
		assert_int_equal(tgo_listener_counts(g_t, i, &got), 0);
		assert_memory_equal(&got, &g_lcount[i], sizeof(got));
	}
	for (uint32_t i = 0; i < TGO_MAX_CLUSTERS; i++) {
		assert_int_equal(tgo_cluster_counts(g_t, i, &got), 0);
		assert_memory_equal(&got, &g_ccount[i], sizeof(got));
	}
	assert_int_equal(tgo_totals(g_t, &got, &entries), 0);
	assert_memory_equal(&got, &g_total, sizeof(got));
	assert_int_equal(entries, n_chans);
	assert_int_equal(tgo_short_counts(g_t, &got), 0);
	assert_memory_equal(&got, &g_short, sizeof(got));
	assert_true(g_short.pkts[0] > 100);	/* the short circuits were exercised */
	assert_int_equal(tgo_listener_counts(g_t, TGO_MAX_LISTENERS, &got), -EINVAL);
	assert_int_equal(tgo_cluster_counts(g_t, TGO_MAX_CLUSTERS, &got), -EINVAL);
	print_message("%u relayed, %u passed up in all\n", g_relayed, g_passed);
}

static int mode_tc(void **state)
{
	(void)state;
	g_xdp = false;
	return 0;
}

static int mode_xdp(void **state)
{
	(void)state;
	g_xdp = true;
	return 0;
}

/* What XDP leaves to the TC program behind (each relayed by TC, passed up untouched by
 * XDP): no neighbour entry, a local destination, a frame over the ingress MTU, a partial
 * checksum, an egress that does not take XDP frames. */
static void test_xdp_only(void **state)
{
	static uint8_t f[FRAME_MAX], out[FRAME_MAX + 8];
	struct run_ctx rc = { 0, 0, false };
	const struct tgo_channel *c4 = &chans[0];
	struct tgo_if ifv;
	uint32_t k = if_b;
	size_t len, out_len;
	/* No neighbour entry, a local destination, over tgB's MTU, a partial checksum. */
	const struct tgo_channel *cs[4] = { &chans[1], &chans[3], c4, &chans[6] };
	struct spec sp;

	(void)state;
	for (size_t i = 0; i < 4; i++) {
		/* Each spec is built here: they share one payload buffer. */
		sp = i < 2 ? spec_c2p(cs[i], cs[i]->channel, 40, 0, 40)
			   : spec_p2c(cs[i], i == 2 ? 1400 - 28 + 1 : 40);
		len = frame_build(f, &sp);
		rc.ingress = ingress_of(&sp);
		if (i == 3) {
			/* CHECKSUM_PARTIAL: the field holds the pseudo-header's sum only. */
			const uint8_t *ip = f + 14;
			uint8_t *udp = f + 14 + 40;
			uint16_t ps =
				fold(sum16(ip + 24, 16, sum16(ip + 8, 16, 17 + get16(udp + 4))));

			put16(udp + 6, ps);
		}
		g_xdp = true;
		assert_int_equal(prog_run(f, len, &rc, out, &out_len), XDP_PASS);
		assert_int_equal(out_len, len);
		assert_memory_equal(out, f, len);
		g_xdp = false;
		assert_int_equal(prog_run(f, len, &rc, out, &out_len),
				 i == 1 ? TC_ACT_OK : TC_ACT_REDIRECT);
		assert_true(out_len != len || memcmp(out, f, len) != 0);	/* relayed */
		count_expect(cs[i], i < 2 ? 0 : 1, i < 2 ? 40 : (uint32_t)sp.plen);
	}
	/* An egress that does not take XDP frames (tgB's entry says so): up, untouched. */
	assert_int_equal(bpf_map_lookup_elem(bpf_map__fd(g_t->skel->maps.tgo_ifs), &k, &ifv), 0);
	assert_int_equal(ifv.xmit, 1);
	ifv.xmit = 0;
	assert_int_equal(bpf_map_update_elem(bpf_map__fd(g_t->skel->maps.tgo_ifs), &k, &ifv, 0), 0);
	g_xdp = true;
	sp = spec_c2p(c4, c4->channel, 40, 0, 40);
	len = frame_build(f, &sp);
	rc.ingress = if_a;
	assert_int_equal(prog_run(f, len, &rc, out, &out_len), XDP_PASS);
	assert_memory_equal(out, f, len);
	ifv.xmit = 1;
	assert_int_equal(bpf_map_update_elem(bpf_map__fd(g_t->skel->maps.tgo_ifs), &k, &ifv, 0), 0);
	assert_int_equal(check_frame(f, len, &rc), M_REDIRECT);
	g_xdp = false;
}

/* ---- The entry API ------------------------------------------------------------------ */

struct walk_arg {
	unsigned seen;
	uint16_t drop_below;	/* delete channels numbered below */
	bool ok;
};

static bool walk_fn(const struct tgo_channel *ch, void *arg)
{
	struct walk_arg *w = arg;
	bool found = false;

	w->seen++;
	for (size_t i = 0; i < n_chans; i++)
		if (memcmp(&chans[i], ch, sizeof(*ch)) == 0)
			found = true;
	if (!found)
		w->ok = false;
	return ch->channel >= w->drop_below;
}

static void test_entries_api(void **state)
{
	struct tgo_maps m;
	struct tgo_channel bad;
	struct walk_arg w = { 0, 0, true };
	uint64_t entries;
	struct tgo_count cnt;
	unsigned left = 0, left_p2c = 0;

	(void)state;
	tgo_maps_of(g_t, &m);
	assert_true(m.c2p_fd >= 0 && m.p2c_fd >= 0);
	/* The walk rebuilds each channel exactly as it was set. */
	assert_int_equal(tgo_channel_walk(&m, walk_fn, &w), (int)n_chans);
	assert_true(w.ok);
	assert_int_equal(w.seen, n_chans);
	/* Refusals. */
	bad = chans[0];
	bad.channel = 0x3fff;
	assert_int_equal(tgo_channel_set(&m, &bad), -EINVAL);
	bad.channel = 0x8000;
	assert_int_equal(tgo_channel_set(&m, &bad), -EINVAL);
	bad = chans[0];
	bad.listener_idx = TGO_MAX_LISTENERS;
	assert_int_equal(tgo_channel_set(&m, &bad), -EINVAL);
	bad = chans[0];
	bad.cluster_idx = TGO_MAX_CLUSTERS;
	assert_int_equal(tgo_channel_set(&m, &bad), -EINVAL);
	bad = chans[0];
	bad.family = AF_UNIX;
	assert_int_equal(tgo_channel_set(&m, &bad), -EAFNOSUPPORT);
	bad = chans[n_chans - 1];	/* a short circuit */
	bad.sc_channel = 0x3fff;
	assert_int_equal(tgo_channel_set(&m, &bad), -EINVAL);
	bad = chans[n_chans - 1];
	bad.sc_listener_idx = TGO_MAX_LISTENERS;
	assert_int_equal(tgo_channel_set(&m, &bad), -EINVAL);
	bad = chans[n_chans - 1];
	bad.sc_cluster_idx = TGO_MAX_CLUSTERS;
	assert_int_equal(tgo_channel_set(&m, &bad), -EINVAL);
	/* Delete: both entries go; then -ENOENT; the datagrams go up. */
	assert_int_equal(tgo_channel_del(&m, &chans[0]), 0);
	assert_int_equal(tgo_channel_del(&m, &chans[0]), -ENOENT);
	gone[0] = true;
	{
		struct spec s = spec_c2p(&chans[0], chans[0].channel, 10, 0, 10);

		assert_int_equal(run_spec(&s, 0), M_PASS);
		s = spec_p2c(&chans[0], 10);
		assert_int_equal(run_spec(&s, 0), M_PASS);
	}
	assert_int_equal(tgo_channel_set(&m, &chans[0]), 0);
	gone[0] = false;
	/* A walk that deletes the channels below 0x4002. */
	w = (struct walk_arg){ 0, 0x4002, true };
	for (size_t i = 0; i < n_chans; i++) {
		left += chans[i].channel >= 0x4002;
		left_p2c += chans[i].channel >= 0x4002 && !chans[i].sc_channel;
	}
	assert_int_equal(tgo_channel_walk(&m, walk_fn, &w), (int)left);
	assert_int_equal(tgo_totals(g_t, &cnt, &entries), 0);
	assert_int_equal(entries, left);
	assert_int_equal(tgo_map_count(m.p2c_fd), (int)left_p2c);
	/* An orphan peer -> client entry goes at the next walk. */
	assert_int_equal(tgo_channel_set(&m, &chans[0]), 0);
	{
		struct tgo_c2p_key k;

		memset(&k, 0, sizeof(k));
		k.family = TGO_FAMILY_V4;
		k.channel = htons(chans[0].channel);
		k.client_port = htons(chans[0].client_port);
		k.listener_port = htons(chans[0].listener_port);
		memcpy(k.client, chans[0].client, 4);
		memcpy(k.listener, chans[0].listener, 4);
		assert_int_equal(bpf_map_delete_elem(m.c2p_fd, &k), 0);
	}
	assert_int_equal(tgo_map_count(m.p2c_fd), (int)left_p2c + 1);
	w = (struct walk_arg){ 0, 0, true };
	assert_int_equal(tgo_channel_walk(&m, walk_fn, &w), (int)left);
	assert_int_equal(tgo_map_count(m.p2c_fd), (int)left_p2c);
	/* Back to every channel for the tests after this one. */
	for (size_t i = 0; i < n_chans; i++)
		assert_int_equal(tgo_channel_set(&m, &chans[i]), 0);
}

/* A map of 4 channels refuses the 5th with -ENOSPC and keeps nothing of it. */
static void test_full(void **state)
{
	const char *ifs[] = { "tgA" };
	struct tgo_opts o = { TGO_ENGINE_TC, ifs, 1, NULL, 4, false };
	struct tgo *t;
	struct tgo_maps m;
	char why[256];
	uint64_t entries;
	struct tgo_count cnt;

	(void)state;
	assert_int_equal(tgo_open(&o, &t, why, sizeof(why)), 0);
	assert_int_equal(tgo_iface_count(t), 1);
	assert_string_equal(tgo_iface_name(t, 0), "tgA");
	assert_string_equal(tgo_iface_engine(t, 0), "tc");
	tgo_maps_of(t, &m);
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(tgo_channel_set(&m, &chans[i]), 0);
	assert_int_equal(tgo_channel_set(&m, &chans[4]), -ENOSPC);
	assert_int_equal(tgo_channel_set(&m, &chans[0]), 0);	/* a refresh still fits */
	assert_int_equal(tgo_totals(t, &cnt, &entries), 0);
	assert_int_equal(entries, 4);
	assert_int_equal(tgo_map_count(m.p2c_fd), 4);
	tgo_close(t, false);
	/* Refusals of tgo_open. */
	o.force_fail = true;
	assert_int_equal(tgo_open(&o, &t, why, sizeof(why)), -EPERM);
	assert_null(t);
	o.force_fail = false;
	ifs[0] = "tgo-nonesuch";
	assert_int_equal(tgo_open(&o, &t, why, sizeof(why)), -ENODEV);
	assert_non_null(strstr(why, "tgo-nonesuch"));
	o.engine = TGO_ENGINE_NONE;
	assert_int_equal(tgo_open(&o, &t, why, sizeof(why)), -EINVAL);
	tgo_close(NULL, false);
}

/* The XDP program of an open, in which mode, and whether it is ours. */
static uint32_t xdp_prog_on(const char *dev, bool *native)
{
	LIBBPF_OPTS(bpf_xdp_query_opts, q);

	assert_int_equal(bpf_xdp_query((int)if_nametoindex(dev), 0, &q), 0);
	*native = q.drv_prog_id != 0;
	return q.drv_prog_id ? q.drv_prog_id : q.skb_prog_id;
}

/* Engines: XDP natively on a veth, generically on lo; Auto natively on a veth, TC on lo;
 * a take-over replaces our program in place; a foreign XDP program is never displaced
 * (XDP fails, Auto keeps TC); a close detaches unless keep. */
static void test_xdp_attach(void **state)
{
	const char *ifs[] = { "tgB", "lo" };
	struct tgo_opts o = { TGO_ENGINE_XDP, ifs, 2, NULL, 64, false };
	struct bpf_insn pass[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 0, .imm = XDP_PASS },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	struct tgo *t, *t2;
	char why[256];
	bool native;
	uint32_t id;
	int other;

	(void)state;
	assert_int_equal(tgo_open(&o, &t, why, sizeof(why)), 0);
	assert_string_equal(tgo_iface_engine(t, 0), "xdp");
	assert_string_equal(tgo_iface_engine(t, 1), "xdp-generic");
	id = xdp_prog_on("tgB", &native);
	assert_true(id != 0 && native);
	assert_true(xdp_prog_on("lo", &native) != 0 && !native);
	tgo_close(t, true);
	assert_int_equal(xdp_prog_on("tgB", &native), id); /* kept */
	o.engine = TGO_ENGINE_AUTO;
	assert_int_equal(tgo_open(&o, &t2, why, sizeof(why)), 0);
	assert_string_equal(tgo_iface_engine(t2, 0), "xdp");
	assert_string_equal(tgo_iface_engine(t2, 1), "tc");
	assert_true(xdp_prog_on("tgB", &native) != id && native); /* replaced */
	assert_int_equal(xdp_prog_on("lo", &native), 0);          /* Auto: TC alone on lo */
	tgo_close(t2, false);
	assert_int_equal(xdp_prog_on("tgB", &native), 0);
	/* A foreign program: XDP refuses, Auto leaves it and relays with TC. */
	other = bpf_prog_load(BPF_PROG_TYPE_XDP, "other", "GPL", pass, 2, NULL);
	assert_true(other >= 0);
	assert_int_equal(bpf_xdp_attach((int)if_nametoindex("tgB"), other, XDP_FLAGS_DRV_MODE,
					NULL),
			 0);
	o.engine = TGO_ENGINE_XDP;
	assert_int_equal(tgo_open(&o, &t, why, sizeof(why)), -EBUSY);
	assert_non_null(strstr(why, "another XDP program"));
	o.engine = TGO_ENGINE_AUTO;
	assert_int_equal(tgo_open(&o, &t, why, sizeof(why)), 0);
	assert_string_equal(tgo_iface_engine(t, 0), "tc");
	tgo_close(t, false);
	id = xdp_prog_on("tgB", &native);
	assert_true(id != 0);
	assert_int_equal(bpf_xdp_detach((int)if_nametoindex("tgB"), XDP_FLAGS_DRV_MODE, NULL), 0);
	close(other);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define BOTH(t) cmocka_unit_test_setup(t, mode_tc), cmocka_unit_test_setup(t, mode_xdp)
		BOTH(test_relay_both_ways),
		BOTH(test_lengths_and_padding),
		BOTH(test_headers_refused),
		BOTH(test_bad_checksum_kept),
		BOTH(test_route_results),
		BOTH(test_random_frames),
		cmocka_unit_test(test_xdp_only),
		cmocka_unit_test(test_counters),
		cmocka_unit_test_setup(test_entries_api, mode_tc),
		cmocka_unit_test_setup(test_entries_api, mode_xdp),
		cmocka_unit_test(test_full),
		cmocka_unit_test(test_xdp_attach),
	};
	struct tgo_relay *probe;

	if (geteuid() != 0) {
		printf("SKIP test_offload_prog: needs root (CAP_BPF, CAP_NET_ADMIN, a network "
		       "namespace)\n");
		return 77;
	}
	if (unshare(CLONE_NEWNET) < 0) {
		printf("SKIP test_offload_prog: cannot create a network namespace: %s\n",
		       strerror(errno));
		return 77;
	}
	libbpf_set_print(NULL);
	probe = tgo_relay__open_and_load();
	if (!probe) {
		printf("SKIP test_offload_prog: the kernel refuses the programs: %s\n",
		       strerror(errno));
		return 77;
	}
	tgo_relay__destroy(probe);
	if (netns_setup() < 0) {
		printf("SKIP test_offload_prog: cannot set up the namespace (iproute2, veth)\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

#else /* !HAVE_OFFLOAD: the fallback fails to open and does nothing else. */

static void test_fallback(void **state)
{
	const char *ifs[] = { "lo" };
	struct tgo_opts o = { TGO_ENGINE_TC, ifs, 1, NULL, 64, false };
	struct tgo *t = (struct tgo *)&o;
	struct tgo_maps m;
	struct tgo_channel ch;
	struct tgo_count cnt;
	uint64_t entries = 1;
	char why[64];

	(void)state;
	assert_int_equal(tgo_open(&o, &t, why, sizeof(why)), -EOPNOTSUPP);
	assert_null(t);
	assert_string_equal(why, "built without offload");
	tgo_maps_of(NULL, &m);
	assert_int_equal(m.c2p_fd, -1);
	assert_int_equal(m.p2c_fd, -1);
	memset(&ch, 0, sizeof(ch));
	assert_int_equal(tgo_channel_set(&m, &ch), 0);
	assert_int_equal(tgo_channel_del(&m, &ch), 0);
	assert_int_equal(tgo_totals(NULL, &cnt, &entries), 0);
	assert_int_equal(entries, 0);
	assert_int_equal(tgo_iface_count(NULL), 0);
	tgo_close(NULL, false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fallback),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
