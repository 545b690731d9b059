/* Offload: the entries of bound channels, set, deleted and walked through the map fds
 * (any process that holds them: the workers inherit them from the master).
 *
 * Order: a channel's client -> peer entry is written before its peer -> client entry and
 * deleted before it, so that a peer -> client entry without its partner only exists
 * while a set or a delete is under way; tgo_channel_walk removes the ones it finds (at
 * worst a direction of a channel being set at that moment goes up to the worker until
 * its next refresh sets it again). */
#include "config.h"

#include "offload/offload.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <bpf/bpf.h>

#include "common/grow.h"
#include "offload/offload_clock.h"
#include "offload/offload_int.h"
#include "offload/tgo_maps.h"

static void tgo_addr_in(uint8_t dst[16], const uint8_t src[16], int family)
{
	memset(dst, 0, 16);
	memcpy(dst, src, family == AF_INET ? 4 : 16);
}

static int tgo_check(const struct tgo_channel *ch)
{
	if (ch->family != AF_INET && ch->family != AF_INET6)
		return -EAFNOSUPPORT;
	if (ch->channel < TGO_CHAN_MIN || ch->channel > TGO_CHAN_MAX)
		return -EINVAL;
	if (ch->sc_channel != 0 && (ch->sc_channel < TGO_CHAN_MIN || ch->sc_channel > TGO_CHAN_MAX))
		return -EINVAL;
	return 0;
}

static void tgo_c2p_key_of(const struct tgo_channel *ch, struct tgo_c2p_key *k)
{
	memset(k, 0, sizeof(*k));
	k->family = ch->family == AF_INET ? TGO_FAMILY_V4 : TGO_FAMILY_V6;
	k->channel = htobe16(ch->channel);
	k->client_port = htobe16(ch->client_port);
	k->listener_port = htobe16(ch->listener_port);
	tgo_addr_in(k->client, ch->client, ch->family);
	tgo_addr_in(k->listener, ch->listener, ch->family);
}

static void tgo_p2c_key_of(const struct tgo_channel *ch, struct tgo_p2c_key *k)
{
	memset(k, 0, sizeof(*k));
	k->family = ch->family == AF_INET ? TGO_FAMILY_V4 : TGO_FAMILY_V6;
	k->peer_port = htobe16(ch->peer_port);
	k->relay_port = htobe16(ch->relay_port);
	tgo_addr_in(k->peer, ch->peer, ch->family);
	tgo_addr_in(k->relay, ch->relay, ch->family);
}

/* The channel an entry of the client -> peer map describes, its expiry in our clock
 * (off: tgo_clock_offset). */
static void tgo_channel_of(const struct tgo_c2p_key *k, const struct tgo_c2p_val *v, int64_t off,
			   struct tgo_channel *ch)
{
	memset(ch, 0, sizeof(*ch));
	ch->family = k->family == TGO_FAMILY_V4 ? AF_INET : AF_INET6;
	memcpy(ch->client, k->client, 16);
	memcpy(ch->listener, k->listener, 16);
	memcpy(ch->relay, v->relay, 16);
	memcpy(ch->peer, v->peer, 16);
	ch->client_port = be16toh(k->client_port);
	ch->listener_port = be16toh(k->listener_port);
	ch->relay_port = be16toh(v->relay_port);
	ch->peer_port = be16toh(v->peer_port);
	ch->channel = be16toh(k->channel);
	ch->expires_ns = tgo_clock_from_kernel(v->expires_ns, off);
	ch->listener_idx = v->listener_idx;
	ch->cluster_idx = v->cluster_idx;
	ch->sc_channel = be16toh(v->sc_channel);
	ch->sc_listener_idx = v->sc_listener_idx;
	ch->sc_cluster_idx = v->sc_cluster_idx;
}

static int tgo_update(int fd, const void *k, const void *v)
{
	if (bpf_map_update_elem(fd, k, v, BPF_ANY) == 0)
		return 0;
	return errno == E2BIG || errno == ENOMEM ? -ENOSPC : -errno;
}

/* A refresh replaces the whole value: the counters the programs added so far go over.
 * What they add between the lookup and the update is lost (a refresh's microseconds). */
static void tgo_carry_c2p(const struct tgo_maps *m, const struct tgo_c2p_key *k,
			  struct tgo_c2p_val *v)
{
	struct tgo_c2p_val old;

	if (bpf_map_lookup_elem(m->c2p_fd, k, &old) == 0) {
		v->pkts = old.pkts;
		v->bytes = old.bytes;
	}
}

static void tgo_carry_p2c(const struct tgo_maps *m, const struct tgo_p2c_key *k,
			  struct tgo_p2c_val *v)
{
	struct tgo_p2c_val old;

	if (bpf_map_lookup_elem(m->p2c_fd, k, &old) == 0) {
		v->pkts = old.pkts;
		v->bytes = old.bytes;
	}
}

int tgo_channel_set(const struct tgo_maps *m, const struct tgo_channel *ch)
{
	struct tgo_c2p_key ck;
	struct tgo_c2p_val cv;
	struct tgo_p2c_key pk;
	struct tgo_p2c_val pv;
	uint64_t exp;	/* the programs compare it with bpf_ktime_get_ns() */
	int err = tgo_check(ch);

	if (err < 0)
		return err;
	if (ch->listener_idx >= TGO_MAX_LISTENERS || ch->cluster_idx >= TGO_MAX_CLUSTERS ||
	    ch->sc_listener_idx >= TGO_MAX_LISTENERS || ch->sc_cluster_idx >= TGO_MAX_CLUSTERS)
		return -EINVAL;
	if (m->c2p_fd < 0 || m->p2c_fd < 0)
		return 0;
	tgo_c2p_key_of(ch, &ck);
	tgo_p2c_key_of(ch, &pk);
	exp = tgo_clock_to_kernel(ch->expires_ns, tgo_clock_offset());
	memset(&cv, 0, sizeof(cv));
	cv.expires_ns = exp;
	memcpy(cv.relay, pk.relay, 16);
	memcpy(cv.peer, pk.peer, 16);
	cv.relay_port = pk.relay_port;
	cv.peer_port = pk.peer_port;
	cv.listener_idx = ch->listener_idx;
	cv.cluster_idx = ch->cluster_idx;
	if (ch->sc_channel) {
		/* A short circuit: one entry, nothing comes back through a relay port. */
		cv.sc_channel = htobe16(ch->sc_channel);
		cv.sc_listener_idx = (uint8_t)ch->sc_listener_idx;
		cv.sc_cluster_idx = (uint8_t)ch->sc_cluster_idx;
		tgo_carry_c2p(m, &ck, &cv);
		return tgo_update(m->c2p_fd, &ck, &cv);
	}
	memset(&pv, 0, sizeof(pv));
	pv.expires_ns = exp;
	memcpy(pv.client, ck.client, 16);
	memcpy(pv.listener, ck.listener, 16);
	pv.client_port = ck.client_port;
	pv.listener_port = ck.listener_port;
	pv.channel = ck.channel;
	pv.listener_idx = ch->listener_idx;
	pv.cluster_idx = ch->cluster_idx;
	tgo_carry_c2p(m, &ck, &cv);
	tgo_carry_p2c(m, &pk, &pv);
	err = tgo_update(m->c2p_fd, &ck, &cv);
	if (err == 0) {
		err = tgo_update(m->p2c_fd, &pk, &pv);
		if (err < 0)
			bpf_map_delete_elem(m->c2p_fd, &ck);	/* both or neither */
	}
	return err;
}

int tgo_channel_del(const struct tgo_maps *m, const struct tgo_channel *ch)
{
	struct tgo_chan_ctr c;

	return tgo_channel_take(m, ch, &c);
}

/* Whether the client -> peer value cv is what ch writes (tgo_channel_set): the same relay
 * address and port, peer and short circuit channel. */
static bool tgo_c2p_is(const struct tgo_c2p_val *cv, const struct tgo_p2c_key *pk,
		       const struct tgo_channel *ch)
{
	return memcmp(cv->relay, pk->relay, 16) == 0 && cv->relay_port == pk->relay_port &&
	       memcmp(cv->peer, pk->peer, 16) == 0 && cv->peer_port == pk->peer_port &&
	       cv->sc_channel == htobe16(ch->sc_channel);
}

/* tgo_channel_take (all), or tgo_channel_take_if_ours (!all). */
static int tgo_take(const struct tgo_maps *m, const struct tgo_channel *ch, bool all,
		    struct tgo_chan_ctr *out)
{
	struct tgo_c2p_key ck;
	struct tgo_p2c_key pk;
	struct tgo_c2p_val cv;
	struct tgo_p2c_val pv;
	int err = tgo_check(ch);
	int gone = 0;
	bool c2p = all;

	memset(out, 0, sizeof(*out));
	if (err < 0)
		return err;
	if (m->c2p_fd < 0 || m->p2c_fd < 0)
		return 0;
	tgo_c2p_key_of(ch, &ck);
	tgo_p2c_key_of(ch, &pk);
	/* Read just before the delete: a datagram relayed between the two is not counted. */
	if (bpf_map_lookup_elem(m->c2p_fd, &ck, &cv) == 0 && (all || tgo_c2p_is(&cv, &pk, ch))) {
		out->pkts[0] = cv.pkts;
		out->bytes[0] = cv.bytes;
		c2p = true;
	}
	if (ch->sc_channel == 0 && bpf_map_lookup_elem(m->p2c_fd, &pk, &pv) == 0) {
		out->pkts[1] = pv.pkts;
		out->bytes[1] = pv.bytes;
	}
	if (c2p)
		gone += bpf_map_delete_elem(m->c2p_fd, &ck) == 0;
	if (ch->sc_channel == 0)
		gone += bpf_map_delete_elem(m->p2c_fd, &pk) == 0;
	return gone ? 0 : -ENOENT;
}

int tgo_channel_take(const struct tgo_maps *m, const struct tgo_channel *ch,
		     struct tgo_chan_ctr *out)
{
	return tgo_take(m, ch, true, out);
}

int tgo_channel_take_if_ours(const struct tgo_maps *m, const struct tgo_channel *ch,
			     struct tgo_chan_ctr *out)
{
	return tgo_take(m, ch, false, out);
}

/* Every key of the hash map fd, copied out first: deleting while iterating with
 * get_next_key restarts the iteration. *keys is malloc'ed; returns the count or -errno. */
static long tgo_keys(int fd, size_t key_size, void **keys)
{
	size_t n = 0, cap = 0;
	uint8_t *buf = NULL, prev[64], cur[64];
	const void *from = NULL;

	*keys = NULL;
	if (key_size > sizeof(cur))
		return -EINVAL;
	while (bpf_map_get_next_key(fd, from, cur) == 0) {
		if (grow_array(&buf, &cap, n + 1, key_size, 256) < 0) {
			free(buf);
			return -ENOMEM;
		}
		memcpy(buf + n * key_size, cur, key_size);
		n++;
		memcpy(prev, cur, key_size);
		from = prev;
	}
	if (errno != ENOENT) {
		free(buf);
		return -errno;
	}
	*keys = buf;
	return (long)n;
}

int tgo_map_count(int fd)
{
	uint8_t cur[64], prev[64];
	const void *from = NULL;
	int n = 0;

	while (bpf_map_get_next_key(fd, from, cur) == 0) {
		n++;
		memcpy(prev, cur, sizeof(prev));
		from = prev;
	}
	return errno == ENOENT ? n : -errno;
}

/* Deletes the peer -> client entries whose client -> peer partner is gone. */
static int tgo_sweep_p2c(const struct tgo_maps *m)
{
	struct tgo_p2c_key *keys;
	long n = tgo_keys(m->p2c_fd, sizeof(*keys), (void **)&keys);

	if (n < 0)
		return (int)n;
	for (long i = 0; i < n; i++) {
		struct tgo_p2c_val pv;
		struct tgo_c2p_key ck;
		struct tgo_c2p_val cv;

		if (bpf_map_lookup_elem(m->p2c_fd, &keys[i], &pv) < 0)
			continue;
		memset(&ck, 0, sizeof(ck));
		ck.family = keys[i].family;
		ck.channel = pv.channel;
		ck.client_port = pv.client_port;
		ck.listener_port = pv.listener_port;
		memcpy(ck.client, pv.client, 16);
		memcpy(ck.listener, pv.listener, 16);
		if (bpf_map_lookup_elem(m->c2p_fd, &ck, &cv) < 0 ||
		    memcmp(cv.peer, keys[i].peer, 16) != 0 || cv.peer_port != keys[i].peer_port ||
		    memcmp(cv.relay, keys[i].relay, 16) != 0 || cv.relay_port != keys[i].relay_port)
			bpf_map_delete_elem(m->p2c_fd, &keys[i]);
	}
	free(keys);
	return 0;
}

int tgo_channel_walk(const struct tgo_maps *m, bool (*fn)(const struct tgo_channel *ch, void *arg),
		     void *arg)
{
	struct tgo_c2p_key *keys;
	long n;
	int kept = 0, err;
	int64_t off = tgo_clock_offset();

	if (m->c2p_fd < 0 || m->p2c_fd < 0)
		return 0;
	n = tgo_keys(m->c2p_fd, sizeof(*keys), (void **)&keys);
	if (n < 0)
		return (int)n;
	for (long i = 0; i < n; i++) {
		struct tgo_c2p_val v;
		struct tgo_channel ch;

		if (bpf_map_lookup_elem(m->c2p_fd, &keys[i], &v) < 0)
			continue;	/* deleted meanwhile */
		tgo_channel_of(&keys[i], &v, off, &ch);
		if (fn(&ch, arg))
			kept++;
		else
			tgo_channel_del(m, &ch);
	}
	free(keys);
	err = tgo_sweep_p2c(m);
	return err < 0 ? err : kept;
}
