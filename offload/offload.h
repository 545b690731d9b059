/* Kernel fast path for bound channels (issue #21): eBPF programs that relay ChannelData over
 * UDP on bound channels in both directions, and the maps the daemon fills.
 *
 * The shared allocation table stays the truth; the maps are a cache of the channels the
 * owner worker bound after the allowlist check. An entry carries its own expiry (the
 * earlier of the channel's and the permission's), which the programs check themselves
 * against bpf_ktime_get_ns(), so a missed deletion never extends a permission. The caller
 * speaks its own CLOCK_MONOTONIC (mono_ns); the maps hold the kernel's, which differs in a
 * time namespace: tgo_channel_set and tgo_channel_walk convert (offload_clock.h).
 * Anything the programs do not handle goes up to the worker unchanged (TC_ACT_OK /
 * XDP_PASS): STUN messages, Send/Data indications, fragments, IP options, IPv6 extension
 * headers, GSO packets, unknown 5-tuples, expired entries, a route the kernel cannot
 * forward on.
 *
 * Who calls: the master loads and attaches (tgo_open) before it forks, so the workers
 * inherit the map fds; a worker sets and deletes the entries of its own allocations
 * (tgo_channel_set/del through the fds); the master reads the counters for metrics and
 * closes (detaching unless the daemon restarts or upgrades: pinned maps and attached
 * programs then keep relaying). Built only with --enable-offload (HAVE_OFFLOAD); without
 * it tgo_open fails with -EOPNOTSUPP and every other call is a no-op. */
#ifndef TG_OFFLOAD_OFFLOAD_H
#define TG_OFFLOAD_OFFLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum tgo_engine {
	TGO_ENGINE_NONE = 0,	/* user space only */
	TGO_ENGINE_AUTO,	/* XDP where the driver runs it natively, else TC */
	TGO_ENGINE_TC,
	TGO_ENGINE_XDP,
};

/* Counter slots: one per listener index and one per cluster index of the snapshot. */
#define TGO_MAX_LISTENERS 64u
#define TGO_MAX_CLUSTERS 64u

struct tgo_opts {
	enum tgo_engine engine;
	const char *const *ifaces;	/* interface names to attach to; n_ifaces > 0 */
	size_t n_ifaces;
	const char *pin_dir;		/* this instance's bpffs folder (created); NULL: no pin */
	uint32_t max_entries;		/* channels per direction the maps hold */
	bool force_fail;		/* tests: fail as if the kernel refused the programs */
};

struct tgo;

/* Loads the programs, creates the maps (or reuses the ones pinned in pin_dir by an earlier
 * run: entries kept), attaches to every interface, pins. Returns 0 and *out, or -errno with
 * a one-line reason in why (no privilege, no bpffs, verifier refusal, unknown interface,
 * -EOPNOTSUPP in a build without offload). An interface the engine cannot attach to is a
 * failure of the whole call (nothing stays attached). */
int tgo_open(const struct tgo_opts *o, struct tgo **out, char *why, size_t why_len);

/* Per attached interface: its name and the engine in use ("tc" or "xdp"). i < count. */
size_t tgo_iface_count(const struct tgo *t);
const char *tgo_iface_name(const struct tgo *t, size_t i);
const char *tgo_iface_engine(const struct tgo *t, size_t i);

/* Detaches (unless keep) and closes. keep: the programs stay attached and the maps pinned
 * (a restart or upgrade follows, whose tgo_open takes them over). */
void tgo_close(struct tgo *t, bool keep);

/* One bound channel, both directions. Addresses: 16 bytes, IPv4 as its 4 bytes followed by
 * zeros; ports in host byte order.
 *
 * A short circuit (sc_channel != 0, issue #22): the channel's peer is another allocation
 * of this instance whose client speaks UDP. Then relay/relay_port is that allocation's
 * listener address, peer/peer_port its client, sc_channel its channel bound to this
 * allocation, sc_listener_idx and sc_cluster_idx its counter slots; there is one entry,
 * client -> client (the other allocation's channel back is an entry of its own). */
struct tgo_channel {
	int family;			/* AF_INET or AF_INET6 (client and peer sides alike) */
	uint8_t client[16], listener[16], relay[16], peer[16];
	uint16_t client_port, listener_port, relay_port, peer_port;
	uint16_t channel;		/* 0x4000..0x7FFF */
	uint64_t expires_ns;		/* min(channel, permission) expiry, mono_ns's clock */
	uint32_t listener_idx;		/* counter slot, < TGO_MAX_LISTENERS */
	uint32_t cluster_idx;		/* counter slot, < TGO_MAX_CLUSTERS */
	uint16_t sc_channel;		/* 0, or the short circuit's channel (0x4000..0x7FFF) */
	uint32_t sc_listener_idx;	/* short circuit: the receiver's slots */
	uint32_t sc_cluster_idx;
};

/* The map fds, inherited by forked workers (the handle itself is the master's). */
struct tgo_maps {
	int c2p_fd, p2c_fd;		/* -1: offload off */
};
void tgo_maps_of(const struct tgo *t, struct tgo_maps *m);

/* Inserts or replaces both entries of ch (a refresh moves expires_ns), or the one entry
 * of a short circuit. Returns 0 or -errno (-ENOSPC: the maps are full; the channel stays
 * in user space). */
int tgo_channel_set(const struct tgo_maps *m, const struct tgo_channel *ch);
/* Deletes both entries of ch (only the 5-tuples, channel and sc_channel are used; a short
 * circuit's one entry: only the client, listener and channel); 0 or -ENOENT. */
int tgo_channel_del(const struct tgo_maps *m, const struct tgo_channel *ch);
/* What the programs relayed through one channel's entries: index 0 client -> peer (a
 * short circuit's included), 1 peer -> client; bytes are the payload. */
struct tgo_chan_ctr {
	uint64_t pkts[2], bytes[2];
};
/* tgo_channel_del that first reads the entries' counters into *out (zeroed first; left
 * zero where an entry is gone). A refresh (tgo_channel_set) carries them over. */
int tgo_channel_take(const struct tgo_maps *m, const struct tgo_channel *ch,
		     struct tgo_chan_ctr *out);
/* tgo_channel_take, but the client -> peer entry only if it is still ch's: its value's
 * relay address and port, peer and short circuit channel are ch's (a short circuit's:
 * its target). For a record whose client may have allocated again on the same 5-tuple:
 * the new allocation's entry for the same channel has the same key and is kept; an entry
 * the new one never wrote (it has none in the kernel) is still the old record's and goes.
 * The peer -> client entry, keyed on ch's relay port, is always ch's. */
int tgo_channel_take_if_ours(const struct tgo_maps *m, const struct tgo_channel *ch,
			     struct tgo_chan_ctr *out);

/* Visits every client -> peer entry (as a tgo_channel rebuilt from both entries); fn returns
 * true to keep it, false to delete both of its entries. Returns the entries kept, or -errno.
 * For a take-over's reconciliation and a reload's route check. */
int tgo_channel_walk(const struct tgo_maps *m, bool (*fn)(const struct tgo_channel *ch, void *arg),
		     void *arg);

/* Counters summed over CPUs. dir 0: client -> peer, 1: peer -> client. bytes: relayed
 * payload (what the peer side sees; the client side has 4 more per packet). */
struct tgo_count {
	uint64_t pkts[2], bytes[2];
};
int tgo_listener_counts(const struct tgo *t, uint32_t idx, struct tgo_count *out);
int tgo_cluster_counts(const struct tgo *t, uint32_t idx, struct tgo_count *out);
/* Datagrams the programs relayed in total, and the entries in the client -> peer map. A
 * short-circuited datagram counts in both directions. */
int tgo_totals(const struct tgo *t, struct tgo_count *out, uint64_t *entries);
/* Datagrams (pkts[0]) and payload bytes (bytes[0]) the programs short-circuited. */
int tgo_short_counts(const struct tgo *t, struct tgo_count *out);

#endif
