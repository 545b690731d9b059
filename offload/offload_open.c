/* Offload: loading the relay programs, the maps (created, or taken over from pins in
 * bpffs), attaching to the interfaces and closing; the fallback of a build without it. */
#include "config.h"

#include "offload/offload.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#ifdef HAVE_OFFLOAD

#include <assert.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if_arp.h>
#include <linux/magic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "offload/offload_clock.h"
#include "offload/offload_int.h"
#include "offload/relay.skel.h"
#include "offload/tgo_maps.h"

_Static_assert(TGO_MAX_LISTENERS == TGO_CTR_LISTENERS, "listener counter slots");
_Static_assert(TGO_MAX_CLUSTERS == TGO_CTR_CLUSTERS, "cluster counter slots");

#define TGO_DEFAULT_ENTRIES 65536u
#define TGO_MAX_ENTRIES (1u << 24)

/* libbpf's last warning, for why: libbpf reports through a process-wide callback. */
static __thread char tgo_libbpf_msg[200];

static int tgo_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	size_t n;

	if (level != LIBBPF_WARN)
		return 0;
	vsnprintf(tgo_libbpf_msg, sizeof(tgo_libbpf_msg), fmt, ap);
	n = strlen(tgo_libbpf_msg);
	while (n > 0 && tgo_libbpf_msg[n - 1] == '\n')
		tgo_libbpf_msg[--n] = '\0';
	return 0;
}

/* The maps pinned in pin_dir, by file name: the layout version is part of the name so
 * that a daemon of another layout never reads these entries. The scratch map holds no
 * state and is not pinned. */
struct tgo_pin {
	const char *file;
	struct bpf_map *(*map)(struct tgo_relay *s);
};

static struct bpf_map *tgo_map_c2p(struct tgo_relay *s)
{
	return s->maps.tgo_c2p;
}

static struct bpf_map *tgo_map_p2c(struct tgo_relay *s)
{
	return s->maps.tgo_p2c;
}

static struct bpf_map *tgo_map_counts(struct tgo_relay *s)
{
	return s->maps.tgo_counts;
}

#define TGO_STR2(x) #x
#define TGO_STR(x) TGO_STR2(x)
static const struct tgo_pin tgo_pins[] = {
	{ "c2p_v" TGO_STR(TGO_LAYOUT), tgo_map_c2p },
	{ "p2c_v" TGO_STR(TGO_LAYOUT), tgo_map_p2c },
	{ "counts_v" TGO_STR(TGO_LAYOUT), tgo_map_counts },
};
#define TGO_N_PINS (sizeof(tgo_pins) / sizeof(tgo_pins[0]))

static int tgo_path(char *buf, size_t len, const char *dir, const char *file)
{
	int n = snprintf(buf, len, "%s/%s", dir, file);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* pin_dir exists (created, parents too) and lies on bpffs. */
static int tgo_pin_dir(const char *dir, char *why, size_t why_len)
{
	char p[256];
	struct statfs sf;
	size_t n = strlen(dir);

	if (n == 0 || n >= sizeof(p)) {
		snprintf(why, why_len, "pin_dir is empty or too long");
		return -ENAMETOOLONG;
	}
	memcpy(p, dir, n + 1);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0700) < 0 && errno != EEXIST) {
			int err = errno;

			snprintf(why, why_len, "cannot create %s: %s", p, strerror(err));
			return -err;
		}
		*s = '/';
	}
	if (mkdir(p, 0700) < 0 && errno != EEXIST) {
		int err = errno;

		snprintf(why, why_len, "cannot create %s: %s", p, strerror(err));
		return -err;
	}
	if (statfs(p, &sf) < 0 || sf.f_type != BPF_FS_MAGIC) {
		snprintf(why, why_len, "%s is not on bpffs (mount -t bpf bpf /sys/fs/bpf)", p);
		return -ENOTSUP;
	}
	return 0;
}

/* True when the pinned map fd has the type, sizes and flags the program declares. */
static bool tgo_map_fits(int fd, const struct bpf_map *m)
{
	struct bpf_map_info info;
	uint32_t len = sizeof(info);

	memset(&info, 0, sizeof(info));
	if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0)
		return false;
	return info.type == bpf_map__type(m) && info.key_size == bpf_map__key_size(m) &&
	       info.value_size == bpf_map__value_size(m) &&
	       info.max_entries == bpf_map__max_entries(m) &&
	       info.map_flags == bpf_map__map_flags(m);
}

/* Before load: each pinned map that fits is reused (its entries and counts kept); one
 * that does not (another size) is unpinned, and load creates a fresh one. */
static int tgo_pins_reuse(struct tgo *t, char *why, size_t why_len)
{
	char path[PATH_MAX];

	for (size_t i = 0; i < TGO_N_PINS; i++) {
		struct bpf_map *m = tgo_pins[i].map(t->skel);
		int fd, err;

		if (tgo_path(path, sizeof(path), t->pin_dir, tgo_pins[i].file) < 0)
			return -ENAMETOOLONG;
		fd = bpf_obj_get(path);
		if (fd < 0)
			continue;
		if (!tgo_map_fits(fd, m)) {
			close(fd);
			unlink(path);
			continue;
		}
		err = bpf_map__reuse_fd(m, fd);
		close(fd);
		if (err < 0) {
			snprintf(why, why_len, "cannot reuse %s: %s", path, strerror(-err));
			return err;
		}
	}
	return 0;
}

/* After load: pins the maps not reused and the programs (replacing an earlier run's). */
static int tgo_pins_make(struct tgo *t, char *why, size_t why_len)
{
	char path[PATH_MAX];
	struct bpf_program *progs[] = { t->skel->progs.tgo_tc, t->skel->progs.tgo_xdp };

	for (size_t i = 0; i < TGO_N_PINS; i++) {
		struct bpf_map *m = tgo_pins[i].map(t->skel);
		int err;

		if (tgo_path(path, sizeof(path), t->pin_dir, tgo_pins[i].file) < 0)
			return -ENAMETOOLONG;
		if (access(path, F_OK) == 0)
			continue;	/* reused */
		err = bpf_map__pin(m, path);
		if (err < 0) {
			snprintf(why, why_len, "cannot pin %s: %s", path, strerror(-err));
			return err;
		}
	}
	for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
		int err;

		if (tgo_path(path, sizeof(path), t->pin_dir, bpf_program__name(progs[i])) < 0)
			return -ENAMETOOLONG;
		unlink(path);
		err = bpf_program__pin(progs[i], path);
		if (err < 0) {
			snprintf(why, why_len, "cannot pin %s: %s", path, strerror(-err));
			return err;
		}
	}
	/* The maps of an earlier layout (a run before an upgrade) serve no program now. */
	for (int v = 1; v < TGO_LAYOUT; v++)
		for (size_t i = 0; i < TGO_N_PINS; i++) {
			const char *us = strrchr(tgo_pins[i].file, '_');
			char old[64];

			snprintf(old, sizeof(old), "%.*s_v%d", (int)(us - tgo_pins[i].file),
				 tgo_pins[i].file, v);
			if (tgo_path(path, sizeof(path), t->pin_dir, old) == 0)
				unlink(path);
		}
	return 0;
}

static void tgo_pins_remove(const struct tgo *t)
{
	char path[PATH_MAX];

	if (!t->pin_dir[0])
		return;
	for (size_t i = 0; i < TGO_N_PINS; i++)
		if (tgo_path(path, sizeof(path), t->pin_dir, tgo_pins[i].file) == 0)
			unlink(path);
	if (tgo_path(path, sizeof(path), t->pin_dir, TGO_PROG_TC) == 0)
		unlink(path);
	if (tgo_path(path, sizeof(path), t->pin_dir, TGO_PROG_XDP) == 0)
		unlink(path);
	rmdir(t->pin_dir);
}

/* The ARPHRD_ type and link address of an interface of this network namespace (sysfs may
 * show another's). */
static int tgo_iface_type(const char *name, unsigned char mac[6])
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), type = -1;

	if (fd < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(fd, SIOCGIFHWADDR, &ifr) == 0) {
		type = ifr.ifr_hwaddr.sa_family;
		memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
	}
	close(fd);
	return type;
}

/* The interfaces by name: known, Ethernet framing (the programs parse a 14-byte link
 * header; loopback has one too). */
static int tgo_ifaces(struct tgo *t, const struct tgo_opts *o, char *why, size_t why_len)
{
	t->ifs = calloc(o->n_ifaces, sizeof(*t->ifs));
	if (!t->ifs) {
		snprintf(why, why_len, "out of memory");
		return -ENOMEM;
	}
	/* Every name resolved first: a failure detaches our filter from all that exist. */
	t->n_ifs = o->n_ifaces;
	for (size_t i = 0; i < o->n_ifaces; i++)
		if (o->ifaces[i] && strlen(o->ifaces[i]) < sizeof(t->ifs[i].name)) {
			strcpy(t->ifs[i].name, o->ifaces[i]);
			t->ifs[i].ifindex = (int)if_nametoindex(t->ifs[i].name);
		}
	for (size_t i = 0; i < o->n_ifaces; i++) {
		struct tgo_iface *f = &t->ifs[i];
		int type;

		if (!f->name[0]) {
			snprintf(why, why_len, "bad interface name");
			return -EINVAL;
		}
		if (f->ifindex == 0) {
			snprintf(why, why_len, "%s: no such interface", f->name);
			return -ENODEV;
		}
		type = tgo_iface_type(f->name, f->mac);
		if (type != ARPHRD_ETHER && type != ARPHRD_LOOPBACK) {
			snprintf(why, why_len, "%s: not an Ethernet interface (type %d)", f->name,
				 type);
			return -EOPNOTSUPP;
		}
		for (size_t j = 0; j < i; j++)
			if (t->ifs[j].ifindex == f->ifindex) {
				snprintf(why, why_len, "%s: listed twice", f->name);
				return -EINVAL;
			}
	}
	return 0;
}

static int tgo_load(struct tgo *t, const struct tgo_opts *o, char *why, size_t why_len)
{
	uint32_t entries = o->max_entries ? o->max_entries : TGO_DEFAULT_ENTRIES;
	int err;

	if (entries > TGO_MAX_ENTRIES) {
		snprintf(why, why_len, "max_entries %u above %u", entries, TGO_MAX_ENTRIES);
		return -EINVAL;
	}
	t->skel = tgo_relay__open();
	if (!t->skel) {
		err = errno ? errno : EINVAL;
		snprintf(why, why_len, "cannot open the programs: %s", strerror(err));
		return -err;
	}
	if (bpf_map__set_max_entries(t->skel->maps.tgo_c2p, entries) < 0 ||
	    bpf_map__set_max_entries(t->skel->maps.tgo_p2c, entries) < 0) {
		snprintf(why, why_len, "cannot size the maps");
		return -EINVAL;
	}
	if (t->pin_dir[0]) {
		err = tgo_pin_dir(t->pin_dir, why, why_len);
		if (err == 0)
			err = tgo_pins_reuse(t, why, why_len);
		if (err < 0)
			return err;
	}
	tgo_libbpf_msg[0] = '\0';
	err = tgo_relay__load(t->skel);
	if (err < 0) {
		if (err == -EPERM || err == -EACCES)
			snprintf(why, why_len,
				 "the kernel refused the programs (%s: needs CAP_BPF "
				 "and CAP_NET_ADMIN)%s%s",
				 strerror(-err), tgo_libbpf_msg[0] ? ": " : "", tgo_libbpf_msg);
		else
			snprintf(why, why_len, "cannot load the programs: %s%s%s", strerror(-err),
				 tgo_libbpf_msg[0] ? ": " : "", tgo_libbpf_msg);
		return err;
	}
	if (t->pin_dir[0])
		return tgo_pins_make(t, why, why_len);
	return 0;
}

/* What the XDP program knows of the interfaces: their link addresses, and which take XDP
 * frames. Read once here: a veth whose peer turns GRO on later is not a redirect target
 * until the next open (the TC program behind relays for it meanwhile). */
static int tgo_ifs_fill(struct tgo *t, char *why, size_t why_len)
{
	int fd = bpf_map__fd(t->skel->maps.tgo_ifs);

	for (size_t i = 0; i < t->n_ifs; i++) {
		struct tgo_if v;
		uint32_t k = (uint32_t)t->ifs[i].ifindex;

		memset(&v, 0, sizeof(v));
		memcpy(v.mac, t->ifs[i].mac, sizeof(v.mac));
		v.xmit = tgo_iface_xmit(t->ifs[i].ifindex);
		if (bpf_map_update_elem(fd, &k, &v, BPF_ANY) < 0) {
			int err = errno;

			snprintf(why, why_len, "%s: cannot enter the interface: %s", t->ifs[i].name,
				 strerror(err));
			return -err;
		}
	}
	return 0;
}

int tgo_open(const struct tgo_opts *o, struct tgo **out, char *why, size_t why_len)
{
	struct tgo *t;
	int err;

	*out = NULL;
	if (!o || o->engine == TGO_ENGINE_NONE || o->n_ifaces == 0 || !o->ifaces) {
		snprintf(why, why_len, "no engine or no interface");
		return -EINVAL;
	}
	if (o->force_fail) {
		snprintf(why, why_len, "the kernel refused the programs (forced failure)");
		return -EPERM;
	}
	libbpf_set_print(tgo_libbpf_print);
	(void)tgo_clock_offset();	/* read here, before the master forks its workers */
	t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(why, why_len, "out of memory");
		return -ENOMEM;
	}
	t->magic = TGO_MAGIC;
	t->maps.c2p_fd = t->maps.p2c_fd = t->ctr_fd = -1;
	if (o->pin_dir &&
	    snprintf(t->pin_dir, sizeof(t->pin_dir), "%s", o->pin_dir) >= (int)sizeof(t->pin_dir)) {
		snprintf(why, why_len, "pin_dir too long");
		err = -ENAMETOOLONG;
		goto fail;
	}
	err = tgo_ifaces(t, o, why, why_len);
	if (err == 0)
		err = tgo_load(t, o, why, why_len);
	if (err < 0)
		goto fail;
	err = tgo_ifs_fill(t, why, why_len);
	for (size_t i = 0; err == 0 && i < t->n_ifs; i++)
		err = tgo_iface_attach(&t->ifs[i], o->engine,
				       bpf_program__fd(t->skel->progs.tgo_tc),
				       bpf_program__fd(t->skel->progs.tgo_xdp), why, why_len);
	if (err < 0)
		goto fail;
	t->maps.c2p_fd = bpf_map__fd(t->skel->maps.tgo_c2p);
	t->maps.p2c_fd = bpf_map__fd(t->skel->maps.tgo_p2c);
	t->ctr_fd = bpf_map__fd(t->skel->maps.tgo_counts);
	*out = t;
	return 0;
fail:
	/* Nothing stays attached, not even an earlier run's filter on a listed interface. */
	for (size_t i = 0; i < t->n_ifs; i++)
		tgo_iface_detach(&t->ifs[i]);
	if (t->skel)
		tgo_relay__destroy(t->skel);
	free(t->ifs);
	free(t);
	return err;
}

size_t tgo_iface_count(const struct tgo *t)
{
	return t ? t->n_ifs : 0;
}

const char *tgo_iface_name(const struct tgo *t, size_t i)
{
	assert(t->magic == TGO_MAGIC && i < t->n_ifs);
	return t->ifs[i].name;
}

const char *tgo_iface_engine(const struct tgo *t, size_t i)
{
	assert(t->magic == TGO_MAGIC && i < t->n_ifs);
	switch (t->ifs[i].hook) {
	case TGO_HOOK_TC:
		return "tc";
	case TGO_HOOK_XDP:
		return "xdp";
	case TGO_HOOK_XDP_GENERIC:
		return "xdp-generic";
	default:
		return "none";
	}
}

void tgo_close(struct tgo *t, bool keep)
{
	if (!t)
		return;
	assert(t->magic == TGO_MAGIC);
	if (!keep) {
		for (size_t i = 0; i < t->n_ifs; i++)
			tgo_iface_detach(&t->ifs[i]);
		tgo_pins_remove(t);
	}
	/* No bpf_link holds the programs: the netlink attachments and the pins outlive the
	 * fds closed here, which is what keep relies on. */
	tgo_relay__destroy(t->skel);
	t->magic = 0;
	free(t->ifs);
	free(t);
}

void tgo_maps_of(const struct tgo *t, struct tgo_maps *m)
{
	if (!t) {
		m->c2p_fd = m->p2c_fd = -1;
		return;
	}
	assert(t->magic == TGO_MAGIC);
	*m = t->maps;
}

/* Sums slot over the possible CPUs. */
static int tgo_slot(const struct tgo *t, uint32_t slot, struct tgo_count *out)
{
	int ncpu = libbpf_num_possible_cpus();
	struct tgo_ctr *v;
	int err = 0;

	memset(out, 0, sizeof(*out));
	if (!t)
		return 0;
	assert(t->magic == TGO_MAGIC);
	if (ncpu <= 0)
		return ncpu < 0 ? ncpu : -EINVAL;
	v = calloc((size_t)ncpu, sizeof(*v));	/* 32-byte values: no per-CPU rounding */
	if (!v)
		return -ENOMEM;
	if (bpf_map_lookup_elem(t->ctr_fd, &slot, v) < 0) {
		err = -errno;
	} else {
		for (int c = 0; c < ncpu; c++)
			for (int d = 0; d < 2; d++) {
				out->pkts[d] += v[c].pkts[d];
				out->bytes[d] += v[c].bytes[d];
			}
	}
	free(v);
	return err;
}

int tgo_listener_counts(const struct tgo *t, uint32_t idx, struct tgo_count *out)
{
	if (idx >= TGO_MAX_LISTENERS)
		return -EINVAL;
	return tgo_slot(t, TGO_CTR_LISTENER0 + idx, out);
}

int tgo_cluster_counts(const struct tgo *t, uint32_t idx, struct tgo_count *out)
{
	if (idx >= TGO_MAX_CLUSTERS)
		return -EINVAL;
	return tgo_slot(t, TGO_CTR_CLUSTER0 + idx, out);
}

int tgo_totals(const struct tgo *t, struct tgo_count *out, uint64_t *entries)
{
	int err = tgo_slot(t, TGO_CTR_TOTAL, out);
	int n;

	*entries = 0;
	if (err < 0 || !t)
		return err;
	n = tgo_map_count(t->maps.c2p_fd);
	if (n < 0)
		return n;
	*entries = (uint64_t)n;
	return 0;
}

int tgo_short_counts(const struct tgo *t, struct tgo_count *out)
{
	return tgo_slot(t, TGO_CTR_SHORT, out);
}

#else /* !HAVE_OFFLOAD: the fallback; tgo_open fails, the rest does nothing. */

int tgo_open(const struct tgo_opts *o, struct tgo **out, char *why, size_t why_len)
{
	(void)o;
	*out = NULL;
	snprintf(why, why_len, "built without offload");
	return -EOPNOTSUPP;
}

size_t tgo_iface_count(const struct tgo *t)
{
	(void)t;
	return 0;
}

const char *tgo_iface_name(const struct tgo *t, size_t i)
{
	(void)t;
	(void)i;
	return "";
}

const char *tgo_iface_engine(const struct tgo *t, size_t i)
{
	(void)t;
	(void)i;
	return "";
}

void tgo_close(struct tgo *t, bool keep)
{
	(void)t;
	(void)keep;
}

void tgo_maps_of(const struct tgo *t, struct tgo_maps *m)
{
	(void)t;
	m->c2p_fd = m->p2c_fd = -1;
}

int tgo_channel_set(const struct tgo_maps *m, const struct tgo_channel *ch)
{
	(void)m;
	(void)ch;
	return 0;
}

int tgo_channel_del(const struct tgo_maps *m, const struct tgo_channel *ch)
{
	(void)m;
	(void)ch;
	return 0;
}

int tgo_channel_take(const struct tgo_maps *m, const struct tgo_channel *ch,
		     struct tgo_chan_ctr *out)
{
	(void)m;
	(void)ch;
	memset(out, 0, sizeof(*out));
	return 0;
}

int tgo_channel_take_if_ours(const struct tgo_maps *m, const struct tgo_channel *ch,
			     struct tgo_chan_ctr *out)
{
	return tgo_channel_take(m, ch, out);
}

int tgo_channel_walk(const struct tgo_maps *m, bool (*fn)(const struct tgo_channel *ch, void *arg),
		     void *arg)
{
	(void)m;
	(void)fn;
	(void)arg;
	return 0;
}

int tgo_listener_counts(const struct tgo *t, uint32_t idx, struct tgo_count *out)
{
	(void)t;
	(void)idx;
	memset(out, 0, sizeof(*out));
	return 0;
}

int tgo_cluster_counts(const struct tgo *t, uint32_t idx, struct tgo_count *out)
{
	(void)t;
	(void)idx;
	memset(out, 0, sizeof(*out));
	return 0;
}

int tgo_totals(const struct tgo *t, struct tgo_count *out, uint64_t *entries)
{
	(void)t;
	memset(out, 0, sizeof(*out));
	*entries = 0;
	return 0;
}

int tgo_short_counts(const struct tgo *t, struct tgo_count *out)
{
	(void)t;
	memset(out, 0, sizeof(*out));
	return 0;
}

#endif
