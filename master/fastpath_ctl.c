/* Master: the kernel fast path (offload/offload.h). The master loads and attaches the
 * programs before it forks (the workers inherit the map fds and enter their own
 * allocations' channels), garbage-collects entries the table no longer holds, adds the
 * kernel's counters to the metrics, and detaches at exit unless allocations stay in the
 * state file for the next start and the maps are pinned (then the kernel keeps relaying
 * their bound channels until the entries expire or the next start reconciles them with
 * the table it takes over). */
#include "config.h"

#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "common/grow.h"
#include "common/ipc.h"
#include "common/log.h"
#include "common/mono.h"
#include "master/master.h"
#include "shm/shm_alloc.h"

#define BPF_FS_MAGIC_ 0xcafe4a11
#define OFFLOAD_GC_TICKS 20u	/* ticks between two garbage collections of the maps */

static enum tgo_engine engine_of(enum conf_offload e)
{
	switch (e) {
	case CONF_OFFLOAD_AUTO:
		return TGO_ENGINE_AUTO;
	case CONF_OFFLOAD_TC:
		return TGO_ENGINE_TC;
	case CONF_OFFLOAD_XDP:
		return TGO_ENGINE_XDP;
	default:
		return TGO_ENGINE_NONE;
	}
}

static bool addr_in(const struct sockaddr *ifa, const struct sockaddr_storage *want)
{
	if (ifa == NULL || ifa->sa_family != want->ss_family)
		return false;
	if (want->ss_family == AF_INET)
		return memcmp(&((const struct sockaddr_in *)ifa)->sin_addr,
			      &((const struct sockaddr_in *)want)->sin_addr, 4) == 0;
	return memcmp(&((const struct sockaddr_in6 *)ifa)->sin6_addr,
		      &((const struct sockaddr_in6 *)want)->sin6_addr, 16) == 0;
}

/* An IPv4 address of 127.0.0.0/8: local on the loopback interface whichever of them lo
 * carries (the /8 route), e.g. a second instance on 127.0.0.3. */
static bool loopback4(const struct sockaddr_storage *a)
{
	return a->ss_family == AF_INET &&
	       (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
}

static size_t add_name(char names[][IF_NAMESIZE], size_t n, size_t cap, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return n;
	if (n < cap)
		snprintf(names[n++], IF_NAMESIZE, "%s", name);
	return n;
}

/* The interfaces that carry a listener's or a relay address (admin.offload_interfaces
 * empty); the loopback interface for one of 127.0.0.0/8. Returns their number. */
static size_t auto_ifaces(const struct conf *c, char names[][IF_NAMESIZE], size_t cap)
{
	struct ifaddrs *ifs = NULL;
	size_t n = 0;

	if (getifaddrs(&ifs) < 0)
		return 0;
	for (size_t i = 0; i < c->n_listeners; i++) {
		const struct conf_listener *l = &c->listeners[i];
		struct sockaddr_storage bind;

		if (listener_bind_addr(l, &bind) < 0)
			memset(&bind, 0, sizeof(bind));
		for (struct ifaddrs *f = ifs; f != NULL; f = f->ifa_next)
			if ((bind.ss_family != 0 && addr_in(f->ifa_addr, &bind)) ||
			    addr_in(f->ifa_addr, &l->relay_addr) ||
			    ((f->ifa_flags & IFF_LOOPBACK) &&
			     (loopback4(&bind) || loopback4(&l->relay_addr))))
				n = add_name(names, n, cap, f->ifa_name);
	}
	freeifaddrs(ifs);
	return n;
}

/* /sys/fs/bpf/turngate/NAME when bpffs is mounted there, else NULL (nothing pinned: the
 * kernel does not keep relaying across a restart). */
static const char *pin_dir(const struct conf *c, char *buf, size_t len)
{
	struct statfs st;

	if (statfs("/sys/fs/bpf", &st) < 0 || (unsigned long)st.f_type != BPF_FS_MAGIC_)
		return NULL;
	snprintf(buf, len, "/sys/fs/bpf/turngate/%s", c->admin.name);
	return buf;
}

int master_offload_open(struct master *m)
{
	const struct conf_admin *a = &m->cfg->admin;
	char names[CONF_MAX_OFFLOAD_IFACES][IF_NAMESIZE], why[256] = "", pin[PATH_MAX];
	const char *ifs[CONF_MAX_OFFLOAD_IFACES];
	struct tgo_opts o = { .engine = engine_of(a->offload_engine) };
	size_t n = 0;
	int rc;

	m->off_maps.c2p_fd = m->off_maps.p2c_fd = -1;
	m->off_engine = a->offload_engine;
	o.pin_dir = pin_dir(m->cfg, pin, sizeof(pin));
	if (o.engine == TGO_ENGINE_NONE && (o.pin_dir == NULL || access(o.pin_dir, F_OK) != 0))
		return 0;
	for (size_t i = 0; i < a->n_offload_ifaces && n < CONF_MAX_OFFLOAD_IFACES; i++)
		n = add_name(names, n, CONF_MAX_OFFLOAD_IFACES, a->offload_ifaces[i]);
	if (a->n_offload_ifaces == 0)
		n = auto_ifaces(m->cfg, names, CONF_MAX_OFFLOAD_IFACES);
	if (n == 0 && o.engine == TGO_ENGINE_NONE)
		return 0;
	if (n == 0) {
		log_warn("master", "offload %s: no interface carries a listener's or a relay "
				   "address: relaying in user space",
			 conf_offload_name(a->offload_engine));
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		ifs[i] = names[i];
	o.ifaces = ifs;
	o.n_ifaces = n;
	o.max_entries = m->cfg->limits.max_allocations * 4u;
	o.force_fail = getenv("TURNGATE_OFFLOAD_FAIL") != NULL;
	if (o.engine == TGO_ENGINE_NONE) {
		/* An earlier run stopped with allocations and left its programs attached and
		 * its maps pinned; this one relays in user space: take them over and remove
		 * them, so that nothing relays on entries no one updates. */
		o.engine = TGO_ENGINE_TC;
		if (tgo_open(&o, &m->offload, why, sizeof(why)) == 0) {
			tgo_close(m->offload, false);
			log_info("master", "offload: removed the programs an earlier run left "
					   "attached (maps pinned in %s)", o.pin_dir);
		}
		m->offload = NULL;
		return 0;
	}
	rc = tgo_open(&o, &m->offload, why, sizeof(why));
	if (rc < 0) {
		log_warn("master", "offload %s: relaying in user space: %s",
			 conf_offload_name(a->offload_engine), why);
		m->offload = NULL;
		return 0;
	}
	tgo_maps_of(m->offload, &m->off_maps);
	m->off_pinned = o.pin_dir != NULL;
	for (size_t i = 0; i < tgo_iface_count(m->offload); i++)
		log_info("master", "offload %s: %s on %s%s", conf_offload_name(a->offload_engine),
			 tgo_iface_engine(m->offload, i), tgo_iface_name(m->offload, i),
			 o.pin_dir ? "" : " (bpffs not mounted: not kept across restarts)");
	master_offload_gc(m);
	return 0;
}

bool master_offload_changed(const struct conf *oc, const struct conf *nc)
{
	const struct conf_admin *a = &oc->admin, *b = &nc->admin;

	if (a->offload_engine != b->offload_engine || a->n_offload_ifaces != b->n_offload_ifaces)
		return true;
	for (size_t i = 0; i < a->n_offload_ifaces; i++)
		if (strcmp(a->offload_ifaces[i], b->offload_ifaces[i]) != 0)
			return true;
	return false;
}

void master_offload_reopen(struct master *m)
{
	if (m->offload != NULL) {
		tgo_close(m->offload, false);
		m->offload = NULL;
		log_info("master", "offload: detached for the new settings");
	}
	master_offload_open(m);
	if (m->offload != NULL) {
		uint8_t which = 0;

		supervise_broadcast_fd(m, IPC_OFFLOAD_MAP, &which, 1, m->off_maps.c2p_fd);
		which = 1;
		supervise_broadcast_fd(m, IPC_OFFLOAD_MAP, &which, 1, m->off_maps.p2c_fd);
	} else {
		supervise_broadcast_fd(m, IPC_OFFLOAD_OFF, NULL, 0, -1);
	}
}

static bool drop_entry(const struct tgo_channel *ch, void *arg)
{
	size_t *n = arg;

	(void)ch;
	(*n)++;
	return false;
}

void master_offload_close(struct master *m)
{
	size_t n = 0;

	if (m->offload == NULL)
		return;
	if (m->handed_over || (upgrade_is_child(m) && m->off_pinned)) {
		/* A live upgrade: the new master holds the same programs and maps; or this is
		 * a new master that failed before it served: the old one, whose pinned maps
		 * this one took over, serves on and keeps relaying with them. */
		log_info("master", m->handed_over ? "offload: programs stay attached for the new "
						    "master"
						  : "offload: programs stay attached for the old "
						    "master");
		tgo_close(m->offload, true);
	} else {
		/* Any other end (a stop, which may or may not be a restart, or a failed start)
		 * empties the maps and detaches: no entry may relay without a daemon that
		 * updates it, or a stop would go on relaying every channel until its
		 * permission expires. The entries go first, explicitly: a filter that an
		 * earlier run left on an interface this run does not list holds the maps too.
		 * The allocations stay in the state file, and a next start's workers enter
		 * their channels again as they adopt them. Only a crash or SIGKILL (no code
		 * runs) leaves the pinned maps relaying, for the next start to take over. */
		int rc = tgo_channel_walk(&m->off_maps, drop_entry, &n);

		if (rc < 0)
			log_warn("master", "offload: cannot empty the maps: %s", strerror(-rc));
		log_info("master", "offload: removed %zu entries and detached", n);
		tgo_close(m->offload, false);
	}
	m->offload = NULL;
	m->off_maps.c2p_fd = m->off_maps.p2c_fd = -1;
}

/* One entry as the table must hold it: a LIVE UDP record of that client and listener port
 * with a live channel of that number; a short circuit's entry needs its receiver's as
 * well (its client, listener port and channel back). */
struct gc_key {
	uint8_t ip[16];
	uint16_t port, lport, channel, pad;
};

static int gc_cmp(const void *x, const void *y)
{
	return memcmp(x, y, sizeof(struct gc_key));
}

static void gc_key_of(const uint8_t ip[16], uint16_t port, uint16_t lport, uint16_t ch,
		      struct gc_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->ip, ip, 16);
	k->port = port;
	k->lport = lport;
	k->channel = ch;
}

struct gc_state {
	struct tgo_channel *ents;
	size_t n, cap;
};

static bool gc_collect(const struct tgo_channel *ch, void *arg)
{
	struct gc_state *s = arg;

	if (GROW_ARRAY(&s->ents, &s->cap, s->n + 1, 256) < 0)
		return true;
	s->ents[s->n++] = *ch;
	return true;
}

/* The channels of the table's LIVE records, sorted. */
static struct gc_key *gc_table(struct master *m, size_t *n)
{
	struct gc_key *keys = NULL;
	size_t cap = 0;
	uint32_t cursor = 0, idx;
	uint64_t now = mono_ns();
	struct shm_alloc *rec = malloc(sizeof(*rec));

	*n = 0;
	while (rec != NULL && shm_alloc_next_live(m->shm, &cursor, &idx) == 0) {
		if (shm_alloc_read_copy(m->shm, idx, rec) < 0 ||
		    SHM_ALLOC_WORD_STATE(rec->state) != SHM_ALLOC_LIVE)
			continue;
		for (unsigned i = 0; i < SHM_ALLOC_MAX_CHANS; i++) {
			const struct shm_chan *c = &rec->chans[i];
			uint8_t ip[16] = { 0 };

			if (c->number == 0 || c->expires_ns <= now)
				continue;
			if (GROW_ARRAY(&keys, &cap, *n + 1, 256) < 0)
				goto out;
			memcpy(ip, rec->client.addr, rec->client.family == AF_INET ? 4 : 16);
			gc_key_of(ip, rec->client.port, rec->server.port, c->number, &keys[(*n)++]);
		}
	}
out:
	if (rec != NULL)
		explicit_bzero(rec, sizeof(*rec));
	free(rec);
	if (keys != NULL)
		qsort(keys, *n, sizeof(*keys), gc_cmp);
	return keys;
}

void master_offload_gc(struct master *m)
{
	struct gc_state s = { NULL, 0, 0 };
	struct gc_key *keys;
	size_t nk, removed = 0;
	uint64_t now = mono_ns();

	if (m->offload == NULL || m->shm == NULL)
		return;
	/* The entries first, then the table: a channel bound in between is in the table
	 * (a worker writes its record before its entry), so no live entry is removed. */
	if (tgo_channel_walk(&m->off_maps, gc_collect, &s) < 0 || s.n == 0) {
		free(s.ents);
		return;
	}
	keys = gc_table(m, &nk);
	for (size_t i = 0; i < s.n; i++) {
		const struct tgo_channel *e = &s.ents[i];
		struct gc_key k;

		gc_key_of(e->client, e->client_port, e->listener_port, e->channel, &k);
		if (e->expires_ns > now && keys != NULL &&
		    bsearch(&k, keys, nk, sizeof(k), gc_cmp) != NULL) {
			if (e->sc_channel == 0)
				continue;
			gc_key_of(e->peer, e->peer_port, e->relay_port, e->sc_channel, &k);
			if (bsearch(&k, keys, nk, sizeof(k), gc_cmp) != NULL)
				continue;
		}
		removed += tgo_channel_del(&m->off_maps, e) == 0;
	}
	if (removed)
		log_debug("master", "offload: %zu entries the table no longer holds removed",
			  removed);
	free(keys);
	free(s.ents);
}

void master_offload_tick(struct master *m)
{
	if (m->offload != NULL && m->tick_count % OFFLOAD_GC_TICKS == 0)
		master_offload_gc(m);
}

/* The kernel's counters of slot i less what they held when the slot was last freed
 * (the kernel map has no reset that the programs' per-CPU adds would not race). */
static int listener_counts(const struct master *m, uint32_t i, struct tgo_count *c)
{
	int rc = tgo_listener_counts(m->offload, i, c);

	if (rc < 0)
		return rc;
	for (unsigned d = 0; d < 2; d++) {
		c->pkts[d] -= m->off_base[i].pkts[d];
		c->bytes[d] -= m->off_base[i].bytes[d];
	}
	return 0;
}

void master_offload_slots_freed(struct master *m, uint64_t freed)
{
	for (uint32_t i = 0; i < TGO_MAX_LISTENERS && i < SHM_MAX_LISTENERS; i++) {
		if (!(freed & (UINT64_C(1) << i)))
			continue;
		if (m->offload == NULL || tgo_listener_counts(m->offload, i, &m->off_base[i]) < 0)
			memset(&m->off_base[i], 0, sizeof(m->off_base[i]));
	}
}

void master_offload_add(const struct master *m, struct shm_counters *sum)
{
	struct tgo_count c;

	if (m->offload == NULL)
		return;
	for (uint32_t i = 0; i < TGO_MAX_LISTENERS && i < SHM_MAX_LISTENERS; i++) {
		uint64_t *l = sum->lst[i];

		if (listener_counts(m, i, &c) < 0)
			continue;
		/* The client side carries the 4-byte ChannelData header as well. */
		l[SHM_LCTR_CLIENT_PKTS_IN] += c.pkts[0];
		l[SHM_LCTR_CLIENT_BYTES_IN] += c.bytes[0] + 4 * c.pkts[0];
		l[SHM_LCTR_PEER_PKTS_OUT] += c.pkts[0];
		l[SHM_LCTR_PEER_BYTES_OUT] += c.bytes[0];
		l[SHM_LCTR_PEER_PKTS_IN] += c.pkts[1];
		l[SHM_LCTR_PEER_BYTES_IN] += c.bytes[1];
		l[SHM_LCTR_CLIENT_PKTS_OUT] += c.pkts[1];
		l[SHM_LCTR_CLIENT_BYTES_OUT] += c.bytes[1] + 4 * c.pkts[1];
		sum->v[SHM_CTR_CLIENT_PKTS_IN] += c.pkts[0];
		sum->v[SHM_CTR_CLIENT_BYTES_IN] += c.bytes[0] + 4 * c.pkts[0];
		sum->v[SHM_CTR_PEER_PKTS_OUT] += c.pkts[0];
		sum->v[SHM_CTR_PEER_BYTES_OUT] += c.bytes[0];
		sum->v[SHM_CTR_PEER_PKTS_IN] += c.pkts[1];
		sum->v[SHM_CTR_PEER_BYTES_IN] += c.bytes[1];
		sum->v[SHM_CTR_CLIENT_PKTS_OUT] += c.pkts[1];
		sum->v[SHM_CTR_CLIENT_BYTES_OUT] += c.bytes[1] + 4 * c.pkts[1];
	}
	for (uint32_t i = 0; i < TGO_MAX_CLUSTERS && i < SHM_MAX_CLUSTERS; i++) {
		if (tgo_cluster_counts(m->offload, i, &c) < 0)
			continue;
		sum->cls[i][SHM_CCTR_PEER_PKTS_OUT] += c.pkts[0];
		sum->cls[i][SHM_CCTR_PEER_BYTES_OUT] += c.bytes[0];
		sum->cls[i][SHM_CCTR_PEER_PKTS_IN] += c.pkts[1];
		sum->cls[i][SHM_CCTR_PEER_BYTES_IN] += c.bytes[1];
	}
	if (tgo_short_counts(m->offload, &c) == 0)
		sum->v[SHM_CTR_SHORT_CIRCUIT] += c.pkts[0];
}

json_t *master_offload_json(const struct master *m)
{
	json_t *o, *ifs = json_array();
	struct tgo_count c = { { 0 }, { 0 } }, sc = { { 0 }, { 0 } };
	uint64_t entries = 0;

	if (m->offload != NULL) {
		tgo_totals(m->offload, &c, &entries);
		tgo_short_counts(m->offload, &sc);
	}
	for (size_t i = 0; m->offload != NULL && i < tgo_iface_count(m->offload) && ifs; i++)
		json_array_append_new(ifs, json_pack("{s:s, s:s}", "name",
						     tgo_iface_name(m->offload, i), "engine",
						     tgo_iface_engine(m->offload, i)));
	o = json_pack("{s:s, s:b, s:o, s:I, s:I, s:I, s:I}", "engine",
		      conf_offload_name(m->cfg->admin.offload_engine), "active",
		      m->offload != NULL, "interfaces", ifs, "entries", (json_int_t)entries,
		      "packets_to_peer", (json_int_t)c.pkts[0], "packets_to_client",
		      (json_int_t)c.pkts[1], "packets_short_circuit", (json_int_t)sc.pkts[0]);
	return o;
}
