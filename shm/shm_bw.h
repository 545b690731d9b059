/* Bandwidth limits in the shared segment: token buckets per allocation, per user and per
 * listener, one 64-bit word each and direction, CAS-updated by whichever worker relays a
 * datagram, so a limit holds however the kernel spreads a user's or a tenant's traffic
 * over the workers.
 *
 * What counts: the relayed payload, the bytes of the UDP datagram sent to the peer
 * (client -> peer: a ChannelData's or a Send indication's data) or received from it
 * (peer -> client, before the Data indication or ChannelData framing is added): the same
 * bytes as turngate_peer_bytes_total. IP, UDP and TURN headers do not count. Each direction
 * has its own bucket of the configured rate, as coturn's max-bps treats input and output
 * separately: a limit of 1 Mbit/s lets 1 Mbit/s to the peer and 1 Mbit/s back.
 *
 * Bucket: a theoretical arrival time (GCRA, ns of CLOCK_MONOTONIC). A datagram of b bytes
 * costs b * 8 / rate seconds; it passes when the bucket, once charged, is at most `burst`
 * ahead of now (a bucket that is not ahead at all passes any one datagram); a datagram
 * that does not pass is dropped and charges nothing. A datagram is charged to all of its
 * buckets or to none (a later bucket's refusal gives back the earlier charges).
 * One word per bucket: no lock, nothing a killed worker can leave held; a changed rate
 * applies from the next datagram.
 *
 * Where the words live: in the quota region after its count entries (shm/shm_quota.h):
 * two per count entry (the user's and the listener's buckets live at their count's
 * entry, which exists while the key has a live allocation), two buckets and two drop
 * counts per allocation record, drop counts per listener index. A count entry taken by a
 * new key starts with full buckets. The buckets are not carried across a take-over
 * (restart or upgrade): they start full. */
#ifndef TG_SHM_SHM_BW_H
#define TG_SHM_SHM_BW_H

#include <stddef.h>
#include <stdint.h>

#include "shm/shm.h"

enum shm_bw_dir {
	SHM_BW_TO_PEER = 0,     /* client -> peer */
	SHM_BW_TO_CLIENT = 1,   /* peer -> client */
	SHM_BW_DIRS
};

/* Which bucket refused a datagram. */
enum shm_bw_verdict {
	SHM_BW_PASS = 0,
	SHM_BW_ALLOC,
	SHM_BW_USER,
	SHM_BW_LISTENER,
};

/* Rates in bits per second, 0 = unlimited; burst_ns: how far ahead of now a bucket may
 * be charged (the bucket's size as time at its rate). */
struct shm_bw_limits {
	uint64_t alloc_bps, user_bps, listener_bps;
	uint64_t burst_ns;
};

/* The buckets of one allocation: its record, its user key (shm_quota_user_key), its
 * listener key (shm_quota_listener_key of its slot, 0: none) and its listener slot (for
 * the drop count; >= SHM_MAX_LISTENERS: not counted per listener). */
struct shm_bw_who {
	uint32_t alloc_idx;
	uint32_t listener_idx;
	uint64_t user_key, listener_key;
};

/* True when any rate of lim is set (else every datagram passes: skip the call). */
static inline int shm_bw_on(const struct shm_bw_limits *lim)
{
	return (lim->alloc_bps | lim->user_bps | lim->listener_bps) != 0;
}

/* Charges bytes to who's buckets in direction dir at now_ns, or refuses: returns
 * SHM_BW_PASS, or the first bucket that refused (then the allocation's and the listener's
 * drop counts are incremented). A user or listener key without a count entry is not
 * limited. Any writer process (workers). */
enum shm_bw_verdict shm_bw_admit(struct shm *shm, const struct shm_bw_who *who,
				 enum shm_bw_dir dir, size_t bytes, uint64_t now_ns,
				 const struct shm_bw_limits *lim);

/* Full buckets, no drops and no TCP peer connections for record idx (its owner, when it
 * claims the record). */
void shm_bw_alloc_reset(struct shm *shm, uint32_t idx);

/* Owner: record idx now holds n TCP peer connections (RFC 6062), for listings. */
void shm_bw_alloc_tcp_conns(struct shm *shm, uint32_t idx, uint32_t n);

/* What the limits did to record idx since its reset, per direction: datagrams dropped
 * and the bucket that refused the last of them (SHM_BW_PASS: none yet); and the TCP peer
 * connections it holds. */
struct shm_bw_stat {
	uint64_t drops[SHM_BW_DIRS];
	enum shm_bw_verdict last[SHM_BW_DIRS];
	uint32_t tcp_conns;
};

/* Readers (admin). Returns 0, or -EINVAL for an index out of range. */
int shm_bw_alloc_stat(const struct shm *shm, uint32_t idx, struct shm_bw_stat *out);

/* Datagrams dropped at listener index i (both directions). */
uint64_t shm_bw_listener_drops(const struct shm *shm, unsigned i);

#endif
