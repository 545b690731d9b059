/* eBPF programs of the kernel fast path (issue #21): ChannelData over UDP on bound channels,
 * relayed at TC ingress (tgo_tc) or XDP (tgo_xdp); everything else passes up unchanged.
 *
 * Client -> peer: an IPv4 (no options, not a fragment) or IPv6 (no extension header) UDP
 * datagram client:port -> listener:port whose payload is a ChannelData message on a
 * channel with an unexpired entry leaves as a UDP datagram relay:port -> peer:port
 * carrying the message's data (header and padding removed). Peer -> client: a UDP
 * datagram peer:port -> relay:port with an unexpired entry leaves as ChannelData
 * listener:port -> client:port. Short circuit (an entry with sc_channel): the ChannelData
 * datagram client:port -> listener:port leaves as ChannelData on sc_channel from the
 * other allocation's listener:port to its client:port, same length, same payload, only
 * the addresses, ports and channel number rewritten. Routing: bpf_fib_lookup from the new
 * addresses, done before anything is rewritten so that whatever cannot be relayed leaves untouched.
 *
 * Layout of a rewrite (TC): the Ethernet, IP and UDP headers stay where they are and the
 * payload moves by 4 bytes. A CHECKSUM_PARTIAL skb (from a local socket, through a veth or
 * lo) names where its checksum starts (csum_start); moving the headers instead
 * (bpf_skb_adjust_room) would leave csum_start 4 bytes off the new UDP header, and the
 * device that completes the checksum would write it into a port or the ChannelData
 * length. Moving the payload keeps csum_start right for every checksum state.
 *
 * Checksums: the UDP checksum is updated incrementally from the differences, in two
 * parts: the pseudo-header's (addresses, length) with BPF_F_PSEUDO_HDR, which is all a
 * CHECKSUM_PARTIAL field holds, and the rest (ports, length, ChannelData header and
 * padding) without it, which the helper applies only to a full checksum. An IPv4 checksum
 * of 0 (none) stays 0 (BPF_F_MARK_MANGLED_0; a partial field is never 0, as a one's
 * complement sum of the non-zero pseudo-header). An IPv6 datagram with 0 goes up. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "offload/tgo_maps.h"

#define TGO_AF_INET 2
#define TGO_AF_INET6 10
#define TGO_IP4_HLEN 20
#define TGO_IP6_HLEN 40
#define TGO_UDP_HLEN 8
#define TGO_LOOPBACK_IFINDEX 1	/* in every network namespace */
#define TGO_ETH_IP6_UDP (ETH_HLEN + TGO_IP6_HLEN + TGO_UDP_HLEN)
/* XDP verifies a checksum in blocks of bpf_csum_diff's largest size, then in halves. */
#define TGO_CSUM_BLOCK 512
#define TGO_CSUM_BLOCKS \
	((TGO_MAX_PAYLOAD + TGO_UDP_HLEN + TGO_CHAN_HDR + TGO_CHAN_MAX_PAD) / TGO_CSUM_BLOCK + 1)

/* Sizes set by user space before load (bpf_map__set_max_entries). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct tgo_c2p_key);
	__type(value, struct tgo_c2p_val);
	__uint(max_entries, 1024);
} tgo_c2p SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct tgo_p2c_key);
	__type(value, struct tgo_p2c_val);
	__uint(max_entries, 1024);
} tgo_p2c SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tgo_ctr);
	__uint(max_entries, TGO_CTR_SLOTS);
} tgo_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tgo_scratch);
	__uint(max_entries, 1);
} tgo_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct tgo_if);
	__uint(max_entries, TGO_MAX_IFS);
} tgo_ifs SEC(".maps");

/* What the parser found: offsets from the start of the frame, lengths from the headers. */
struct tgo_pkt {
	__u32 l4;		/* UDP header */
	__u32 ulen;		/* UDP length (header included) */
	__u8 v6;
	__u8 tos;		/* IPv4 TOS, for the route lookup */
	__be16 sport, dport;
	__be16 csum;		/* the UDP checksum field as it came */
	__u8 saddr[16], daddr[16];
	__u8 chan_ok;		/* the payload parses as ChannelData */
	__be16 chan;
	__u16 chlen;		/* its length field */
};

/* One relay decided: where the datagram goes and what it becomes. */
struct tgo_out {
	__u64 expires_ns;
	__u8 dir;		/* 0: client -> peer, 1: peer -> client, 2: short circuit */
	__u32 listener_idx, cluster_idx;
	__u32 sc_listener_idx, sc_cluster_idx;	/* dir 2: the receiver's counter slots */
	__u8 saddr[16], daddr[16];
	__be16 sport, dport;
	__be16 chan;		/* peer -> client, short circuit: the channel to write */
	__u32 plen;		/* payload relayed */
	__u32 new_ulen;
	__u64 *ectr;		/* the entry's pkts, bytes (see tgo_c2p_val) */
};

/* One's complement sums of 16-bit words as they sit in memory, as the kernel's csum code
 * adds them: the result feeds bpf_l4_csum_replace as a difference. */
static __always_inline __u32 csum_add16(__u32 s, __u16 w)
{
	return s + w;
}

static __always_inline __u32 csum_sub16(__u32 s, __u16 w)
{
	return s + (__u16)~w;
}

/* The difference from the old to the new addresses (4 or 16 bytes each), added to s. */
static __always_inline __u32 csum_addrs(__u32 s, const struct tgo_pkt *p, const struct tgo_out *o)
{
	__u32 n = p->v6 ? 16 : 4;
	__s64 d;

	d = bpf_csum_diff((__be32 *)p->saddr, n, (__be32 *)o->saddr, n, 0);
	if (d < 0)
		return s;
	s = (s & 0xffff) + (s >> 16) + ((__u32)d & 0xffff) + ((__u32)d >> 16);
	d = bpf_csum_diff((__be32 *)p->daddr, n, (__be32 *)o->daddr, n, 0);
	if (d < 0)
		return s;
	return s + ((__u32)d & 0xffff) + ((__u32)d >> 16);
}

static __always_inline void copy_addr(__u8 *dst, const __u8 *src)
{
	__builtin_memcpy(dst, src, 16);
}

static __always_inline void count_slot(__u32 slot, __u32 d, __u32 plen)
{
	struct tgo_ctr *c = bpf_map_lookup_elem(&tgo_counts, &slot);

	if (!c)
		return;
	/* Per-CPU slot: no other writer while the program runs on this CPU. */
	c->pkts[d & 1] += 1;
	c->bytes[d & 1] += plen;
}

/* Counts the datagram on the listener and cluster of its direction and in the total; a
 * short-circuited one as client -> peer on the sender's slots and peer -> client on the
 * receiver's, and in the short circuit's slot. */
static __always_inline void count(const struct tgo_out *o)
{
	__u32 d = o->dir == 1 ? 1 : 0;

	if (o->listener_idx < TGO_CTR_LISTENERS)
		count_slot(TGO_CTR_LISTENER0 + o->listener_idx, d, o->plen);
	if (o->cluster_idx < TGO_CTR_CLUSTERS)
		count_slot(TGO_CTR_CLUSTER0 + o->cluster_idx, d, o->plen);
	count_slot(TGO_CTR_TOTAL, d, o->plen);
	if (o->ectr) {
		/* The entry is shared by every CPU. */
		__sync_fetch_and_add(&o->ectr[0], 1);
		__sync_fetch_and_add(&o->ectr[1], (__u64)o->plen);
	}
	if (o->dir != 2)
		return;
	if (o->sc_listener_idx < TGO_CTR_LISTENERS)
		count_slot(TGO_CTR_LISTENER0 + o->sc_listener_idx, 1, o->plen);
	if (o->sc_cluster_idx < TGO_CTR_CLUSTERS)
		count_slot(TGO_CTR_CLUSTER0 + o->sc_cluster_idx, 1, o->plen);
	count_slot(TGO_CTR_TOTAL, 1, o->plen);
	count_slot(TGO_CTR_SHORT, 0, o->plen);
}

/* Looks the parsed datagram up in both maps (client -> peer first when its payload is
 * ChannelData); fills o. Returns 0 when an unexpired entry relays it. The entry is copied
 * at once: a deleted element of a preallocated hash may be reused under a reader. */
static __always_inline int lookup(const struct tgo_pkt *p, struct tgo_out *o)
{
	__u64 now = bpf_ktime_get_ns();

	if (p->chan_ok) {
		struct tgo_c2p_key k = {};
		struct tgo_c2p_val *v;

		k.family = p->v6 ? TGO_FAMILY_V6 : TGO_FAMILY_V4;
		k.channel = p->chan;
		k.client_port = p->sport;
		k.listener_port = p->dport;
		copy_addr(k.client, p->saddr);
		copy_addr(k.listener, p->daddr);
		v = bpf_map_lookup_elem(&tgo_c2p, &k);
		if (v) {
			o->expires_ns = v->expires_ns;
			o->dir = 0;
			o->listener_idx = v->listener_idx;
			o->cluster_idx = v->cluster_idx;
			copy_addr(o->saddr, v->relay);
			copy_addr(o->daddr, v->peer);
			o->sport = v->relay_port;
			o->dport = v->peer_port;
			o->chan = p->chan;
			o->plen = p->chlen;
			o->new_ulen = TGO_UDP_HLEN + p->chlen;
			o->ectr = &v->pkts;
			if (v->sc_channel) {
				o->dir = 2;
				o->chan = v->sc_channel;
				o->sc_listener_idx = v->sc_listener_idx;
				o->sc_cluster_idx = v->sc_cluster_idx;
				o->new_ulen = p->ulen;	/* the padding stays */
			}
			return o->expires_ns > now ? 0 : -1;
		}
	}
	{
		struct tgo_p2c_key k = {};
		struct tgo_p2c_val *v;

		k.family = p->v6 ? TGO_FAMILY_V6 : TGO_FAMILY_V4;
		k.peer_port = p->sport;
		k.relay_port = p->dport;
		copy_addr(k.peer, p->saddr);
		copy_addr(k.relay, p->daddr);
		v = bpf_map_lookup_elem(&tgo_p2c, &k);
		if (!v)
			return -1;
		o->expires_ns = v->expires_ns;
		o->dir = 1;
		o->listener_idx = v->listener_idx;
		o->cluster_idx = v->cluster_idx;
		copy_addr(o->saddr, v->listener);
		copy_addr(o->daddr, v->client);
		o->sport = v->listener_port;
		o->dport = v->client_port;
		o->chan = v->channel;
		o->plen = p->ulen - TGO_UDP_HLEN;
		o->new_ulen = p->ulen + TGO_CHAN_HDR;
		o->ectr = &v->pkts;
		return o->expires_ns > now ? 0 : -1;
	}
}

/* The route of the rewritten datagram, looked up before anything is rewritten. Returns
 * the bpf_fib_lookup result; the MTU check covers the new length (FRAG_NEEDED). */
static __always_inline long route(void *ctx, const struct tgo_pkt *p, const struct tgo_out *o,
				  __u32 ifindex, struct bpf_fib_lookup *fib)
{
	__u32 l3len = o->new_ulen + (p->v6 ? TGO_IP6_HLEN : TGO_IP4_HLEN);

	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = p->v6 ? TGO_AF_INET6 : TGO_AF_INET;
	fib->l4_protocol = IPPROTO_UDP;
	fib->sport = o->sport;
	fib->dport = o->dport;
	fib->tot_len = (__u16)l3len;
	fib->ifindex = ifindex;
	if (p->v6) {
		__builtin_memcpy(fib->ipv6_src, o->saddr, 16);
		__builtin_memcpy(fib->ipv6_dst, o->daddr, 16);
	} else {
		fib->tos = p->tos;
		__builtin_memcpy(&fib->ipv4_src, o->saddr, 4);
		__builtin_memcpy(&fib->ipv4_dst, o->daddr, 4);
	}
	return bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
}

/* The UDP checksum differences of a rewrite: the pseudo-header's in *pseudo, the rest
 * (UDP header, ChannelData header: a short circuit changes only its channel) in *rest. The padding
 * a client -> peer datagram loses is subtracted by the caller. */
static __always_inline void csum_diffs(const struct tgo_pkt *p, const struct tgo_out *o,
				       __u32 *pseudo, __u32 *rest)
{
	__u16 old_len = bpf_htons((__u16)p->ulen), new_len = bpf_htons((__u16)o->new_ulen);
	__u32 ps = 0, r = 0;

	ps = csum_addrs(ps, p, o);
	ps = csum_sub16(csum_add16(ps, new_len), old_len);

	r = csum_add16(r, o->sport);
	r = csum_add16(r, o->dport);
	r = csum_sub16(r, p->sport);
	r = csum_sub16(r, p->dport);
	r = csum_sub16(csum_add16(r, new_len), old_len);
	if (o->dir == 0) {
		r = csum_sub16(r, p->chan);
		r = csum_sub16(r, bpf_htons(p->chlen));
	} else if (o->dir == 2) {
		r = csum_sub16(r, p->chan);
		r = csum_add16(r, o->chan);
	} else {
		r = csum_add16(r, o->chan);
		r = csum_add16(r, bpf_htons((__u16)o->plen));
	}
	*pseudo = ps;
	*rest = r;
}

/* The sum of up to 3 padding bytes as they sit in the datagram: a byte at an even offset
 * from the UDP header is the first of its 16-bit word. */
static __always_inline __u32 csum_padding(const __u8 pad[3], __u32 npad, __u32 first_off)
{
	__u8 w[4] = {};

	if (first_off & 1) {
		w[1] = npad > 0 ? pad[0] : 0;
		w[2] = npad > 1 ? pad[1] : 0;
		w[3] = npad > 2 ? pad[2] : 0;
	} else {
		w[0] = npad > 0 ? pad[0] : 0;
		w[1] = npad > 1 ? pad[1] : 0;
		w[2] = npad > 2 ? pad[2] : 0;
	}
	__u32 s = (__u32)((__u16 *)w)[0] + ((__u16 *)w)[1];

	return (s & 0xffff) + (s >> 16);	/* at most 0xffff */
}

/* Where a client -> peer datagram's padding starts (from the UDP header) and how many
 * bytes it has (0..3, bounded for the verifier). -1: more than ChannelData allows. */
static __always_inline int pad_span(const struct tgo_pkt *p, __u32 *first, __u32 *npad)
{
	__u32 n;

	*first = TGO_UDP_HLEN + TGO_CHAN_HDR + p->chlen;
	n = p->ulen - *first;
	if (n > TGO_CHAN_MAX_PAD)
		return -1;
	barrier_var(n);
	*npad = n & 3;
	return 0;
}

/* ---- Shared by TC and XDP ---------------------------------------------------------- */

/* Parses the IP and UDP headers of a frame (Ethernet framing) whose first bytes lie at
 * data..data_end (at least the UDP header, and the ChannelData header when the datagram is
 * long enough) and whose whole length is len; when present, the ChannelData header.
 * Returns 0 for a candidate datagram. */
static __always_inline int parse_ip(void *data, void *data_end, __u32 len, struct tgo_pkt *p)
{
	__u32 l3 = ETH_HLEN, l4 = l3 + (p->v6 ? TGO_IP6_HLEN : TGO_IP4_HLEN), l3len;
	struct udphdr *uh;
	__u8 *ch;

	if (data + l4 + TGO_UDP_HLEN > data_end)
		return -1;
	if (!p->v6) {
		struct iphdr *ip = data + l3;

		const __u16 *w = (const __u16 *)ip;
		__u32 sum = 0;

		if (ip->version != 4 || ip->ihl != 5 || ip->protocol != IPPROTO_UDP ||
		    (ip->frag_off & bpf_htons(0x3FFF)))
			return -1;
			/* A damaged header goes up for the stack to drop, not relayed afresh. */
#pragma unroll
		for (int i = 0; i < TGO_IP4_HLEN / 2; i++)
			sum += w[i];
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		if (sum != 0xffff)
			return -1;
		l3len = bpf_ntohs(ip->tot_len);
		p->tos = ip->tos;
		__builtin_memset(p->saddr, 0, 16);
		__builtin_memset(p->daddr, 0, 16);
		__builtin_memcpy(p->saddr, &ip->saddr, 4);
		__builtin_memcpy(p->daddr, &ip->daddr, 4);
		uh = data + l4;
		p->ulen = bpf_ntohs(uh->len);
		if (l3len != TGO_IP4_HLEN + p->ulen)
			return -1;
	} else {
		struct ipv6hdr *ip6 = data + l3;

		if (ip6->version != 6 || ip6->nexthdr != IPPROTO_UDP)
			return -1;
		l3len = TGO_IP6_HLEN + bpf_ntohs(ip6->payload_len);
		__builtin_memcpy(p->saddr, &ip6->saddr, 16);
		__builtin_memcpy(p->daddr, &ip6->daddr, 16);
		uh = data + l4;
		p->ulen = bpf_ntohs(uh->len);
		if (l3len != TGO_IP6_HLEN + p->ulen || !uh->check)
			return -1;
	}
	/* Ethernet padding may follow the datagram, never less than it. */
	if (p->ulen < TGO_UDP_HLEN || l3 + l3len > len)
		return -1;
	p->l4 = l4;
	p->sport = uh->source;
	p->dport = uh->dest;
	p->csum = uh->check;
	p->chan_ok = 0;
	ch = data + l4 + TGO_UDP_HLEN;
	if (p->ulen >= TGO_UDP_HLEN + TGO_CHAN_HDR && (void *)(ch + TGO_CHAN_HDR) <= data_end) {
		__u16 c = ((__u16)ch[0] << 8) | ch[1];
		__u16 n = ((__u16)ch[2] << 8) | ch[3];
		__u32 room = p->ulen - TGO_UDP_HLEN - TGO_CHAN_HDR;

		if (c >= TGO_CHAN_MIN && c <= TGO_CHAN_MAX && n <= room &&
		    room - n <= TGO_CHAN_MAX_PAD) {
			p->chan_ok = 1;
			p->chan = bpf_htons(c);
			p->chlen = n;
		}
	}
	return 0;
}

/* Writes the new IP and UDP headers (and the ChannelData header toward a client) of a
 * frame whose payload is in place and whose length is final; the UDP checksum is the
 * caller's. data..data_end covers at least the headers. */
static __always_inline int hdr_write(void *data, void *data_end, const struct tgo_pkt *p,
				     const struct tgo_out *o)
{
	struct udphdr *uh;

	if (!p->v6) {
		struct iphdr *ip = data + ETH_HLEN;
		__u16 *w = (__u16 *)ip;
		__u32 sum = 0;

		if ((void *)(ip + 1) + TGO_UDP_HLEN > data_end)
			return -1;
		__builtin_memcpy(&ip->saddr, o->saddr, 4);
		__builtin_memcpy(&ip->daddr, o->daddr, 4);
		ip->tot_len = bpf_htons((__u16)(TGO_IP4_HLEN + o->new_ulen));
		ip->ttl = TGO_TTL;
		ip->check = 0;
#pragma unroll
		for (int i = 0; i < TGO_IP4_HLEN / 2; i++)
			sum += w[i];
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		ip->check = (__u16)~sum;
		uh = (void *)(ip + 1);
	} else {
		struct ipv6hdr *ip6 = data + ETH_HLEN;

		if ((void *)(ip6 + 1) + TGO_UDP_HLEN > data_end)
			return -1;
		__builtin_memcpy(&ip6->saddr, o->saddr, 16);
		__builtin_memcpy(&ip6->daddr, o->daddr, 16);
		ip6->payload_len = bpf_htons((__u16)o->new_ulen);
		ip6->hop_limit = TGO_TTL;
		uh = (void *)(ip6 + 1);
	}
	uh->source = o->sport;
	uh->dest = o->dport;
	uh->len = bpf_htons((__u16)o->new_ulen);
	if (o->dir != 0) {
		__u8 *ch = (__u8 *)(uh + 1);

		if ((void *)(ch + TGO_CHAN_HDR) > data_end)
			return -1;
		__builtin_memcpy(ch, &o->chan, 2);
		ch[2] = (__u8)(o->plen >> 8);
		ch[3] = (__u8)o->plen;
	}
	return 0;
}

static __always_inline int set_macs(void *data, void *data_end, const struct bpf_fib_lookup *fib)
{
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return -1;
	__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	return 0;
}

/* Rewrite results: TGO_UNTOUCHED when the frame could not be changed and is as it came
 * (pass it up); TGO_DAMAGED once it is no longer intact (drop). */
#define TGO_UNTOUCHED (-1)
#define TGO_DAMAGED (-2)

/* ---- TC ---------------------------------------------------------------------------- */

/* Parses an skb: pulls the headers into the linear part, then parse_ip. */
static __always_inline int tc_parse(struct __sk_buff *skb, struct tgo_pkt *p)
{
	__u32 l4, need;

	if (skb->protocol == bpf_htons(ETH_P_IP))
		p->v6 = 0;
	else if (skb->protocol == bpf_htons(ETH_P_IPV6))
		p->v6 = 1;
	else
		return -1;
	l4 = ETH_HLEN + (p->v6 ? TGO_IP6_HLEN : TGO_IP4_HLEN);
	if (skb->len < l4 + TGO_UDP_HLEN)
		return -1;
	need = skb->len >= l4 + TGO_UDP_HLEN + TGO_CHAN_HDR ? l4 + TGO_UDP_HLEN + TGO_CHAN_HDR
							    : l4 + TGO_UDP_HLEN;
	if ((void *)(long)skb->data + need > (void *)(long)skb->data_end &&
	    bpf_skb_pull_data(skb, need))
		return -1;
	return parse_ip((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, p);
}

/* Moves len bytes at src to dst (|src - dst| = 4) through the per-CPU scratch buffer, in
 * the order that never overwrites what is still to be read. BPF_F_RECOMPUTE_CSUM keeps a
 * CHECKSUM_COMPLETE skb's csum right (and costs nothing for the other states). */
static __always_inline int tc_move(struct __sk_buff *skb, __u64 src, __u64 dst, __u64 len)
{
	__u32 zero = 0;
	struct tgo_scratch *s = bpf_map_lookup_elem(&tgo_scratch, &zero);

	if (!s || len > TGO_MAX_PAYLOAD)
		return -1;
	for (int i = 0; i < TGO_MOVE_CHUNKS; i++) {
		__u64 done = (__u64)i * TGO_MOVE_CHUNK, n, off;

		if (done >= len)
			break;
		n = len - done;
		if (n > TGO_MOVE_CHUNK)
			n = TGO_MOVE_CHUNK;
		/* Toward the front: front piece first; toward the back: back piece first. */
		off = dst < src ? done : len - done - n;
		barrier_var(n);
		barrier_var(off);
		if (n == 0 || n > TGO_MOVE_CHUNK || off > TGO_MAX_PAYLOAD)
			break;
		if (bpf_skb_load_bytes(skb, src + off, s->buf, n) < 0)
			return -1;
		if (bpf_skb_store_bytes(skb, dst + off, s->buf, n, BPF_F_RECOMPUTE_CSUM) < 0)
			return -1;
	}
	return 0;
}

/* Makes the headers linear and writable, then hdr_write. */
static __always_inline int tc_write_headers(struct __sk_buff *skb, const struct tgo_pkt *p,
					    const struct tgo_out *o)
{
	__u32 hdr = p->l4 + TGO_UDP_HLEN + (o->dir != 0 ? TGO_CHAN_HDR : 0);

	if (bpf_skb_pull_data(skb, hdr) < 0)
		return -1;
	return hdr_write((void *)(long)skb->data, (void *)(long)skb->data_end, p, o);
}

/* The padding bytes of a client -> peer datagram, summed as the checksum saw them. */
static __always_inline int tc_padding_sum(struct __sk_buff *skb, const struct tgo_pkt *p,
					  __u32 *sum)
{
	__u32 first, npad;
	__u8 pad[4] = {};

	*sum = 0;
	if (pad_span(p, &first, &npad) < 0)
		return -1;
	if (npad && bpf_skb_load_bytes(skb, p->l4 + first, pad, npad) < 0)
		return -1;
	*sum = csum_padding(pad, npad, first);
	return 0;
}

/* Rewrites the datagram in place. Returns 0, TGO_UNTOUCHED or TGO_DAMAGED. The first
 * change of length doubles as the test of every later step's preconditions:
 * bpf_skb_change_tail refuses an encapsulated skb, and once it succeeded the frame is
 * linear and writable, so the moves and stores after it do not fail. */
static __always_inline int tc_rewrite(struct __sk_buff *skb, const struct tgo_pkt *p,
				      const struct tgo_out *o, __u32 padsum)
{
	__u32 payload = p->l4 + TGO_UDP_HLEN, new_len = payload + TGO_CHAN_HDR + o->plen;
	__u32 pseudo, rest, mm0 = BPF_F_MARK_MANGLED_0;

	if (o->dir == 2) {
		/* Nothing moves; the Ethernet padding, if any, is cut. */
		if (bpf_skb_change_tail(skb, p->l4 + o->new_ulen, 0) < 0)
			return TGO_UNTOUCHED;
	} else if (o->dir == 0) {
		/* Shrinking must wait for the move: change the length to itself first. */
		new_len = payload + o->plen;
		if (bpf_skb_change_tail(skb, skb->len, 0) < 0)
			return TGO_UNTOUCHED;
		if (tc_move(skb, payload + TGO_CHAN_HDR, payload, o->plen) < 0)
			return TGO_DAMAGED;
		if (bpf_skb_change_tail(skb, new_len, 0) < 0)
			return TGO_DAMAGED;
	} else {
		if (bpf_skb_change_tail(skb, new_len, 0) < 0)
			return TGO_UNTOUCHED;
		if (tc_move(skb, payload, payload + TGO_CHAN_HDR, o->plen) < 0)
			return TGO_DAMAGED;
	}
	if (tc_write_headers(skb, p, o) < 0)
		return TGO_DAMAGED;
	csum_diffs(p, o, &pseudo, &rest);
	rest = csum_sub16(rest, (__u16)padsum);
	if (bpf_l4_csum_replace(skb, p->l4 + 6, 0, pseudo, BPF_F_PSEUDO_HDR | mm0) < 0 ||
	    bpf_l4_csum_replace(skb, p->l4 + 6, 0, rest, mm0) < 0)
		return TGO_DAMAGED;
	return 0;
}

/* 127.0.0.0/8 or ::1 */
static __always_inline int is_loopback(const struct tgo_pkt *p, const struct tgo_out *o)
{
	const __u32 *a = (const __u32 *)o->daddr;

	if (!p->v6)
		return o->daddr[0] == 127;
	return a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == bpf_htonl(1);
}

/* A local destination (NOT_FWDED) is relayed only when the datagram arrived on loopback,
 * whose skb keeps the route to local delivery (elsewhere the stack would drop a datagram
 * from a local address as a martian), and a socket of this namespace takes it; an
 * unroutable destination also reads NOT_FWDED and goes up like any other. */
static __always_inline int tc_local_ok(struct __sk_buff *skb, const struct tgo_pkt *p,
				       const struct tgo_out *o)
{
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk;
	__u32 size;

	if (skb->ingress_ifindex != TGO_LOOPBACK_IFINDEX)
		return 0;
	if (p->v6) {
		__builtin_memcpy(t.ipv6.saddr, o->saddr, 16);
		__builtin_memcpy(t.ipv6.daddr, o->daddr, 16);
		t.ipv6.sport = o->sport;
		t.ipv6.dport = o->dport;
		size = sizeof(t.ipv6);
	} else {
		__builtin_memcpy(&t.ipv4.saddr, o->saddr, 4);
		__builtin_memcpy(&t.ipv4.daddr, o->daddr, 4);
		t.ipv4.sport = o->sport;
		t.ipv4.dport = o->dport;
		size = sizeof(t.ipv4);
	}
	sk = bpf_sk_lookup_udp(skb, &t, size, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	bpf_sk_release(sk);
	return 1;
}

SEC("tc")
int tgo_tc(struct __sk_buff *skb)
{
	struct bpf_fib_lookup fib;
	struct tgo_pkt p;
	struct tgo_out o;
	__u32 padsum = 0;
	long rc;
	int err;

	if (skb->gso_size || skb->pkt_type != PACKET_HOST)
		return TC_ACT_OK;
	if (tc_parse(skb, &p) < 0 || lookup(&p, &o) < 0 || o.plen > TGO_MAX_PAYLOAD)
		return TC_ACT_OK;
	/* Loopback to a loopback address is local by definition: no route lookup, hence no
	 * need for forwarding on lo (the daemon's tests run so). */
	if (skb->ingress_ifindex == TGO_LOOPBACK_IFINDEX && is_loopback(&p, &o))
		rc = BPF_FIB_LKUP_RET_NOT_FWDED;
	else
		rc = route(skb, &p, &o, skb->ingress_ifindex ? skb->ingress_ifindex : skb->ifindex,
			   &fib);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH &&
	    (rc != BPF_FIB_LKUP_RET_NOT_FWDED || !tc_local_ok(skb, &p, &o)))
		return TC_ACT_OK;
	if (o.dir == 0 && tc_padding_sum(skb, &p, &padsum) < 0)
		return TC_ACT_OK;
	err = tc_rewrite(skb, &p, &o, padsum);
	if (err == TGO_UNTOUCHED)
		return TC_ACT_OK;
	if (err < 0)
		return TC_ACT_SHOT;
	count(&o);
	if (rc == BPF_FIB_LKUP_RET_NOT_FWDED)
		return TC_ACT_OK;	/* a local destination: the stack delivers it */
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		struct bpf_redir_neigh nh = {};

		nh.nh_family = fib.family;
		__builtin_memcpy(nh.ipv6_nh, fib.ipv6_dst, 16);
		return bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
	}
	if (set_macs((void *)(long)skb->data, (void *)(long)skb->data_end, &fib) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(fib.ifindex, 0);
}

/* ---- XDP ---------------------------------------------------------------------------- */

/* The one's complement sum of the UDP pseudo-header and datagram is all ones: the
 * checksum is full and right. XDP sees no skb and cannot tell a CHECKSUM_PARTIAL field
 * (a datagram of a local socket through a veth, or any in generic mode) from a full one:
 * an incremental update of a partial field would send a wrong checksum. What does not
 * verify goes up, to the TC program behind (which knows the skb's checksum state) or the
 * stack. The datagram lies in data..data_end: XDP frames without frags are linear. */
static __always_inline int xdp_csum_ok(void *data, void *data_end, const struct tgo_pkt *p)
{
	__u32 left = p->ulen, n = p->v6 ? 16 : 4, s;
	__u8 *cur = data + p->l4;
	__u8 tail[4] = {};
	__s64 d;

	d = bpf_csum_diff(0, 0, (__be32 *)p->saddr, n, 0);
	if (d < 0)
		return 0;
	d = bpf_csum_diff(0, 0, (__be32 *)p->daddr, n, (__u32)d);
	if (d < 0)
		return 0;
	s = (__u32)d;
	s = (s & 0xffff) + (s >> 16) + bpf_htons(IPPROTO_UDP) + bpf_htons((__u16)p->ulen);
	for (int i = 0; i < TGO_CSUM_BLOCKS; i++) {
		if (left < TGO_CSUM_BLOCK)
			break;
		if ((void *)(cur + TGO_CSUM_BLOCK) > data_end)
			return 0;
		d = bpf_csum_diff(0, 0, (__be32 *)cur, TGO_CSUM_BLOCK, s);
		if (d < 0)
			return 0;
		s = (__u32)d;
		cur += TGO_CSUM_BLOCK;
		left -= TGO_CSUM_BLOCK;
	}
	if (left >= TGO_CSUM_BLOCK)
		return 0;
#pragma unroll
	for (__u32 sz = TGO_CSUM_BLOCK / 2; sz >= 4; sz /= 2) {
		if (!(left & sz))
			continue;
		if ((void *)(cur + sz) > data_end)
			return 0;
		d = bpf_csum_diff(0, 0, (__be32 *)cur, sz, s);
		if (d < 0)
			return 0;
		s = (__u32)d;
		cur += sz;
	}
	/* The last 1 to 3 bytes, zero-filled to a word as the checksum pads them. */
	if (left & 3) {
		if ((void *)(cur + 1) > data_end)
			return 0;
		tail[0] = cur[0];
		if ((left & 3) > 1) {
			if ((void *)(cur + 2) > data_end)
				return 0;
			tail[1] = cur[1];
		}
		if ((left & 3) > 2) {
			if ((void *)(cur + 3) > data_end)
				return 0;
			tail[2] = cur[2];
		}
		d = bpf_csum_diff(0, 0, (__be32 *)tail, 4, s);
		if (d < 0)
			return 0;
		s = (__u32)d;
	}
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return s == 0xffff;
}

static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4]) |
		(a[5] ^ b[5])) == 0;
}

/* Applies a checksum difference to a full UDP checksum field (as
 * inet_proto_csum_replace_by_diff does); an IPv4 field of 0 (no checksum) stays 0, a
 * computed 0 is sent as 0xFFFF. */
static __always_inline void csum_apply(__u16 *field, __u32 diff)
{
	__u32 s;

	if (*field == 0)
		return;
	s = (__u16) ~*field;
	s += (diff & 0xffff) + (diff >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	*field = (__u16)~s ? (__u16)~s : 0xffff;
}

/* Copies the Ethernet, IP and UDP headers (hdr bytes, a constant) from the frame's start
 * to where they belong after bpf_xdp_adjust_head(delta): the ChannelData header is
 * dropped (delta 4) or made room for (delta -4). */
static __always_inline int xdp_move_headers(struct xdp_md *ctx, int delta, const __u32 hdr)
{
	__u8 buf[TGO_ETH_IP6_UDP];
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;

	if (hdr > sizeof(buf) || data + hdr > data_end)
		return TGO_UNTOUCHED;
	__builtin_memcpy(buf, data, hdr);
	if (bpf_xdp_adjust_head(ctx, delta) < 0)
		return TGO_UNTOUCHED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + hdr > data_end)
		return TGO_DAMAGED;
	__builtin_memcpy(data, buf, hdr);
	return 0;
}

/* Rewrites the frame: the headers move by 4 bytes over the ChannelData header (toward
 * the peer) or away from where it goes (toward the client; a short circuit moves
 * nothing), the Ethernet padding and (toward the peer) the ChannelData padding are cut,
 * the headers are written, the checksum updated by diff. Returns 0, TGO_UNTOUCHED or
 * TGO_DAMAGED. */
static __always_inline int xdp_rewrite(struct xdp_md *ctx, const struct tgo_pkt *p,
				       const struct tgo_out *o, __u32 diff)
{
	int delta = o->dir == 0 ? TGO_CHAN_HDR : -TGO_CHAN_HDR, err = 0, cut;
	void *data, *data_end;
	__u16 *csum;

	if (o->dir == 2)
		;	/* the short circuit keeps every byte where it is */
	else if (p->v6)
		err = xdp_move_headers(ctx, delta, ETH_HLEN + TGO_IP6_HLEN + TGO_UDP_HLEN);
	else
		err = xdp_move_headers(ctx, delta, ETH_HLEN + TGO_IP4_HLEN + TGO_UDP_HLEN);
	if (err < 0)
		return err;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	cut = (int)(p->l4 + o->new_ulen) - (int)(data_end - data);
	if (cut > 0 || (cut < 0 && bpf_xdp_adjust_tail(ctx, cut) < 0))
		return TGO_DAMAGED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (hdr_write(data, data_end, p, o) < 0)
		return TGO_DAMAGED;
	csum = data + p->l4 + 6;
	if ((void *)(csum + 1) > data_end)
		return TGO_DAMAGED;
	csum_apply(csum, diff);
	return 0;
}

/* The padding bytes of a client -> peer datagram, summed as the checksum saw them. */
static __always_inline int xdp_padding_sum(struct xdp_md *ctx, const struct tgo_pkt *p, __u32 *sum)
{
	__u32 first, npad;
	__u8 pad[4] = {};

	*sum = 0;
	if (pad_span(p, &first, &npad) < 0)
		return -1;
	if (npad && bpf_xdp_load_bytes(ctx, p->l4 + first, pad, npad) < 0)
		return -1;
	*sum = csum_padding(pad, npad, first);
	return 0;
}

/* The same relay as tgo_tc, for what XDP can deliver itself: a frame addressed to the
 * interface, no longer than its MTU (in generic mode a GRO packet would be), with a full
 * and right UDP checksum (or none, IPv4), routed (SUCCESS) to an interface that takes XDP
 * frames. Everything else passes up untouched: the TC program behind relays what it can
 * (a local destination, no neighbour entry, a partial checksum), user space the rest. */
SEC("xdp")
int tgo_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct bpf_fib_lookup fib;
	__u32 ifindex = ctx->ingress_ifindex, mtu = 0, pseudo, rest, padsum = 0;
	struct tgo_if *in, *out;
	struct tgo_pkt p;
	struct tgo_out o;
	int err;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	in = bpf_map_lookup_elem(&tgo_ifs, &ifindex);
	if (!in || !mac_eq(eth->h_dest, in->mac))
		return XDP_PASS;
	if (bpf_check_mtu(ctx, 0, &mtu, 0, 0) != BPF_MTU_CHK_RET_SUCCESS)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		p.v6 = 0;
	else if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		p.v6 = 1;
	else
		return XDP_PASS;
	if (parse_ip(data, data_end, (__u32)(data_end - data), &p) < 0 || lookup(&p, &o) < 0 ||
	    o.plen > TGO_MAX_PAYLOAD)
		return XDP_PASS;
	if (route(ctx, &p, &o, ifindex, &fib) != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;
	out = bpf_map_lookup_elem(&tgo_ifs, &fib.ifindex);
	if (!out || !out->xmit)
		return XDP_PASS;
	if ((p.v6 || p.csum) && !xdp_csum_ok(data, data_end, &p))
		return XDP_PASS;
	if (o.dir == 0 && xdp_padding_sum(ctx, &p, &padsum) < 0)
		return XDP_PASS;
	csum_diffs(&p, &o, &pseudo, &rest);
	rest = csum_sub16(rest, (__u16)padsum);
	pseudo = (pseudo & 0xffff) + (pseudo >> 16);
	rest = (rest & 0xffff) + (rest >> 16);
	err = xdp_rewrite(ctx, &p, &o, pseudo + rest);
	if (err == TGO_UNTOUCHED)
		return XDP_PASS;
	if (err < 0)
		return XDP_DROP;
	if (set_macs((void *)(long)ctx->data, (void *)(long)ctx->data_end, &fib) < 0)
		return XDP_DROP;
	count(&o);
	return bpf_redirect(fib.ifindex, 0);
}

char _license[] SEC("license") = "GPL";
