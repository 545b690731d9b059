/* Layout of the offload maps, shared by the eBPF programs (relay.bpf.c) and user space
 * (offload_open.c): a change here is a change of the pinned maps' ABI (see TGO_LAYOUT).
 *
 * Every on-wire field (addresses, ports, channel numbers) is kept in network byte order,
 * as it sits in the packet, so the programs compare and copy without swapping. Addresses
 * are 16 bytes: IPv4 as its 4 bytes followed by 12 zeros. Keys have no implicit padding
 * and their explicit pad bytes are zero: the hash covers every byte. */
#ifndef TG_OFFLOAD_TGO_MAPS_H
#define TG_OFFLOAD_TGO_MAPS_H

#include <linux/types.h>

/* Bumped with any change of a struct below; part of the pinned maps' directory name. */
#define TGO_LAYOUT 3

#define TGO_FAMILY_V4 4
#define TGO_FAMILY_V6 6

/* ChannelData: 4-byte header, channel numbers 0x4000..0x7FFF (RFC 5766's range, the
 * widest the worker binds). */
#define TGO_CHAN_HDR 4
#define TGO_CHAN_MIN 0x4000
#define TGO_CHAN_MAX 0x7FFF
/* Over UDP a ChannelData message may carry up to 3 padding bytes after its data. */
#define TGO_CHAN_MAX_PAD 3

/* Client -> peer: a ChannelData datagram client:port -> listener:port on channel.
 *
 * The same map holds the kernel short circuit (issue #22): a channel whose peer is
 * another allocation of this instance, whose client is reached over UDP. Such an entry
 * has sc_channel != 0: the datagram leaves as ChannelData on sc_channel, relay:relay_port
 * -> peer:peer_port, where relay is the other allocation's listener address and peer its
 * client, the payload unchanged. It is counted as client -> peer on listener_idx and
 * cluster_idx (the sender's) and as peer -> client on sc_listener_idx and
 * sc_cluster_idx (the receiver's). */
struct tgo_c2p_key {
	__u8 family;		/* TGO_FAMILY_V4 or TGO_FAMILY_V6 */
	__u8 pad;		/* zero */
	__be16 channel;
	__be16 client_port, listener_port;
	__u8 client[16], listener[16];
};

struct tgo_c2p_val {
	__u64 expires_ns;	/* the kernel's CLOCK_MONOTONIC (bpf_ktime_get_ns), no namespace's */
	__u8 relay[16], peer[16];
	__be16 relay_port, peer_port;
	__u32 listener_idx, cluster_idx;
	__be16 sc_channel;	/* 0: to the peer; else the short circuit's channel */
	__u8 sc_listener_idx, sc_cluster_idx;
	/* What the programs relayed through this entry (client -> peer; a short circuit's
	 * too), added atomically; user space carries them over a refresh and adds them to
	 * the allocation's counters when it deletes the entry (the session record, issue
	 * #40). Bytes: the payload, as in struct tgo_ctr. */
	__u64 pkts, bytes;
};

/* Peer -> client: a UDP datagram peer:port -> relay:port. */
struct tgo_p2c_key {
	__u8 family;
	__u8 pad[3];		/* zero */
	__be16 peer_port, relay_port;
	__u8 peer[16], relay[16];
};

struct tgo_p2c_val {
	__u64 expires_ns;
	__u8 client[16], listener[16];
	__be16 client_port, listener_port;
	__be16 channel;
	__u16 pad;		/* zero */
	__u32 listener_idx, cluster_idx;
	__u64 pkts, bytes;	/* relayed peer -> client, as in struct tgo_c2p_val */
};

/* Counters: a per-CPU array of TGO_CTR_SLOTS, one slot per listener index, one per
 * cluster index, the total, and the short circuit's. Index 0 of each pair: client ->
 * peer, 1: peer -> client; bytes are the relayed payload (ChannelData header excluded).
 * A short-circuited datagram counts in both directions of the total (it left one
 * allocation and reached another) and once (index 0) in the short circuit's slot. */
#define TGO_CTR_LISTENERS 64
#define TGO_CTR_CLUSTERS 64
#define TGO_CTR_LISTENER0 0
#define TGO_CTR_CLUSTER0 TGO_CTR_LISTENERS
#define TGO_CTR_TOTAL (TGO_CTR_LISTENERS + TGO_CTR_CLUSTERS)
#define TGO_CTR_SHORT (TGO_CTR_TOTAL + 1)
#define TGO_CTR_SLOTS (TGO_CTR_TOTAL + 2)

struct tgo_ctr {
	__u64 pkts[2], bytes[2];
};

/* Payload moves go through a per-CPU scratch buffer of this size, in at most
 * TGO_MOVE_CHUNKS pieces: the largest payload relayed is their product. */
#define TGO_MOVE_CHUNK 1024
#define TGO_MOVE_CHUNKS 9
#define TGO_MAX_PAYLOAD (TGO_MOVE_CHUNK * TGO_MOVE_CHUNKS)

struct tgo_scratch {
	__u8 buf[TGO_MOVE_CHUNK];
};

/* What the XDP program knows of an interface (not pinned: each loaded program has its
 * own, filled by tgo_open for the interfaces it was given), keyed by ifindex. */
struct tgo_if {
	__u8 mac[6];		/* the frames the host takes on it are addressed here */
	__u8 xmit;		/* 1: takes XDP frames (ndo_xdp_xmit): a redirect target */
	__u8 pad;		/* zero */
};

#define TGO_MAX_IFS 256

/* The IPv4 TTL and IPv6 hop limit of a relayed datagram: that of a datagram the relay
 * sends itself (Linux's default), not the sender's. */
#define TGO_TTL 64

#endif
