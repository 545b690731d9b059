/* Offload: the TC (clsact ingress) and XDP hooks of one interface, attached and detached
 * so that only a program of ours is ever replaced or removed; whether an interface takes
 * XDP frames (generic netlink). */
#include "config.h"

#include "offload/offload_int.h"

#include <errno.h>
#include <linux/genetlink.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

/* True when the program prog_id is one of ours (by its kernel name). */
static bool tgo_prog_is(uint32_t prog_id, const char *name)
{
	struct bpf_prog_info info;
	uint32_t len = sizeof(info);
	int fd = bpf_prog_get_fd_by_id(prog_id);
	bool ours;

	if (fd < 0)
		return false;
	memset(&info, 0, sizeof(info));
	ours = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && strcmp(info.name, name) == 0;
	close(fd);
	return ours;
}

static void tgo_tc_hook_init(struct bpf_tc_hook *h, int ifindex)
{
	memset(h, 0, sizeof(*h));
	h->sz = sizeof(*h);
	h->ifindex = ifindex;
	h->attach_point = BPF_TC_INGRESS;
}

static void tgo_tc_opts_init(struct bpf_tc_opts *o, int prog_fd, uint32_t flags)
{
	memset(o, 0, sizeof(*o));
	o->sz = sizeof(*o);
	o->handle = TGO_TC_HANDLE;
	o->priority = TGO_TC_PRIO;
	o->prog_fd = prog_fd;
	o->flags = flags;
}

/* The program id of our filter's slot, 0 when empty. */
static uint32_t tgo_tc_current(int ifindex)
{
	struct bpf_tc_hook h;
	struct bpf_tc_opts o;

	tgo_tc_hook_init(&h, ifindex);
	tgo_tc_opts_init(&o, 0, 0);
	if (bpf_tc_query(&h, &o) < 0)
		return 0;
	return o.prog_id;
}

static void tgo_tc_detach(int ifindex, bool destroy_clsact)
{
	struct bpf_tc_hook h;
	struct bpf_tc_opts o;
	uint32_t id = tgo_tc_current(ifindex);

	tgo_tc_hook_init(&h, ifindex);
	if (id && tgo_prog_is(id, TGO_PROG_TC)) {
		tgo_tc_opts_init(&o, 0, 0);
		bpf_tc_detach(&h, &o);
	}
	if (destroy_clsact)
		bpf_tc_hook_destroy(&h);
}

static int tgo_attach_tc(struct tgo_iface *f, int prog_fd, char *why, size_t why_len)
{
	struct bpf_tc_hook h;
	struct bpf_tc_opts o;
	uint32_t id;
	int err;

	tgo_tc_hook_init(&h, f->ifindex);
	err = bpf_tc_hook_create(&h);
	if (err < 0 && err != -EEXIST) {
		snprintf(why, why_len, "%s: cannot create the clsact qdisc: %s", f->name,
			 strerror(-err));
		return err;
	}
	f->created_clsact = err == 0;
	id = tgo_tc_current(f->ifindex);
	if (id && !tgo_prog_is(id, TGO_PROG_TC)) {
		snprintf(why, why_len, "%s: another tc filter holds handle 0x%x priority 0x%x",
			 f->name, TGO_TC_HANDLE, TGO_TC_PRIO);
		return -EBUSY;
	}
	tgo_tc_opts_init(&o, prog_fd, BPF_TC_F_REPLACE);
	err = bpf_tc_attach(&h, &o);
	if (err < 0) {
		snprintf(why, why_len, "%s: tc attach failed: %s", f->name, strerror(-err));
		return err;
	}
	f->hook = TGO_HOOK_TC;
	return 0;
}

/* XDP: our program's id in each mode, or -EBUSY when another program holds a mode. */
struct tgo_xdp_ids {
	uint32_t drv, skb;
};

static int tgo_xdp_ids(const struct tgo_iface *f, struct tgo_xdp_ids *ids, char *why,
		       size_t why_len)
{
	LIBBPF_OPTS(bpf_xdp_query_opts, q);
	int err = bpf_xdp_query(f->ifindex, 0, &q);

	if (err < 0) {
		snprintf(why, why_len, "%s: cannot query XDP: %s", f->name, strerror(-err));
		return err;
	}
	if ((q.drv_prog_id && !tgo_prog_is(q.drv_prog_id, TGO_PROG_XDP)) ||
	    (q.skb_prog_id && !tgo_prog_is(q.skb_prog_id, TGO_PROG_XDP)) || q.hw_prog_id) {
		snprintf(why, why_len, "%s: another XDP program is attached", f->name);
		return -EBUSY;
	}
	ids->drv = q.drv_prog_id;
	ids->skb = q.skb_prog_id;
	return 0;
}

/* Detaches our program id from mode (XDP_FLAGS_DRV_MODE or _SKB_MODE), and only ours:
 * the kernel compares the program it replaces with old_prog_fd. */
static void tgo_xdp_detach_id(int ifindex, uint32_t id, uint32_t mode)
{
	LIBBPF_OPTS(bpf_xdp_attach_opts, a);
	int fd;

	if (!id)
		return;
	fd = bpf_prog_get_fd_by_id(id);
	if (fd < 0)
		return;
	a.old_prog_fd = fd;
	bpf_xdp_detach(ifindex, mode | XDP_FLAGS_REPLACE, &a);
	close(fd);
}

static void tgo_xdp_detach(const struct tgo_iface *f)
{
	struct tgo_xdp_ids ids;
	char why[8];

	if (tgo_xdp_ids(f, &ids, why, sizeof(why)) < 0)
		return;
	tgo_xdp_detach_id(f->ifindex, ids.drv, XDP_FLAGS_DRV_MODE);
	tgo_xdp_detach_id(f->ifindex, ids.skb, XDP_FLAGS_SKB_MODE);
}

/* Attaches prog_fd in mode, replacing our program in that mode in place and removing ours
 * from the other mode (a device runs one XDP mode at a time). */
static int tgo_attach_xdp(struct tgo_iface *f, int prog_fd, uint32_t mode, char *why,
			  size_t why_len)
{
	LIBBPF_OPTS(bpf_xdp_attach_opts, a);
	struct tgo_xdp_ids ids;
	uint32_t same, flags = mode;
	int err, old = -1;

	err = tgo_xdp_ids(f, &ids, why, why_len);
	if (err < 0)
		return err;
	same = mode == XDP_FLAGS_DRV_MODE ? ids.drv : ids.skb;
	tgo_xdp_detach_id(f->ifindex, mode == XDP_FLAGS_DRV_MODE ? ids.skb : ids.drv,
			  mode == XDP_FLAGS_DRV_MODE ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE);
	if (same) {
		old = bpf_prog_get_fd_by_id(same);
		if (old < 0) {
			snprintf(why, why_len, "%s: our XDP program went away", f->name);
			return -errno;
		}
		a.old_prog_fd = old;
		flags |= XDP_FLAGS_REPLACE;
	} else {
		flags |= XDP_FLAGS_UPDATE_IF_NOEXIST;
	}
	err = bpf_xdp_attach(f->ifindex, prog_fd, flags, &a);
	if (old >= 0)
		close(old);
	if (err < 0)
		snprintf(why, why_len, "%s: %s XDP attach failed: %s", f->name,
			 mode == XDP_FLAGS_DRV_MODE ? "native" : "generic", strerror(-err));
	return err;
}

int tgo_iface_attach(struct tgo_iface *f, enum tgo_engine engine, int tc_fd, int xdp_fd, char *why,
		     size_t why_len)
{
	int err = tgo_attach_tc(f, tc_fd, why, why_len);

	if (err < 0)
		return err;
	if (engine == TGO_ENGINE_XDP || engine == TGO_ENGINE_AUTO) {
		if (tgo_attach_xdp(f, xdp_fd, XDP_FLAGS_DRV_MODE, why, why_len) == 0) {
			f->hook = TGO_HOOK_XDP;
			return 0;
		}
		if (engine == TGO_ENGINE_XDP) {
			err = tgo_attach_xdp(f, xdp_fd, XDP_FLAGS_SKB_MODE, why, why_len);
			if (err == 0)
				f->hook = TGO_HOOK_XDP_GENERIC;
			return err;
		}
		/* Auto without native XDP: TC alone, which a foreign XDP program leaves be. */
		why[0] = '\0';
	}
	tgo_xdp_detach(f);
	return 0;
}

void tgo_iface_detach(const struct tgo_iface *f)
{
	if (f->ifindex <= 0)
		return;
	tgo_xdp_detach(f);
	tgo_tc_detach(f->ifindex, f->created_clsact);
}

/* ---- Whether an interface takes XDP frames: the netdev generic netlink family's
 * xdp-features (linux/netdev.h, not in every distribution's headers). */
#define TGO_NETDEV_CMD_DEV_GET 1
#define TGO_NETDEV_A_DEV_IFINDEX 1
#define TGO_NETDEV_A_DEV_XDP_FEATURES 3
#define TGO_NETDEV_XDP_ACT_NDO_XMIT (1ull << 2)

struct tgo_genl_msg {
	struct nlmsghdr n;
	struct genlmsghdr g;
	char attrs[64];
};

static void tgo_nla_put(struct tgo_genl_msg *m, uint16_t type, const void *data, uint16_t len)
{
	struct nlattr *a = (struct nlattr *)((char *)m + NLMSG_ALIGN(m->n.nlmsg_len));

	a->nla_type = type;
	a->nla_len = (uint16_t)(NLA_HDRLEN + len);
	memcpy((char *)a + NLA_HDRLEN, data, len);
	m->n.nlmsg_len = NLMSG_ALIGN(m->n.nlmsg_len) + NLA_ALIGN(a->nla_len);
}

/* Sends m and finds attribute type in the reply (len bytes into out). 0 or -errno. */
static int tgo_genl_ask(int fd, struct tgo_genl_msg *m, uint16_t type, void *out, size_t len)
{
	char buf[8192];
	struct nlmsghdr *n = (struct nlmsghdr *)buf;
	ssize_t got;

	if (send(fd, m, m->n.nlmsg_len, 0) < 0)
		return -errno;
	got = recv(fd, buf, sizeof(buf), 0);
	if (got < 0)
		return -errno;
	if (!NLMSG_OK(n, (size_t)got) || n->nlmsg_type == NLMSG_ERROR)
		return -ENOENT;
	for (struct nlattr *a = (struct nlattr *)((char *)NLMSG_DATA(n) + GENL_HDRLEN);
	     (char *)a + NLA_HDRLEN <= (char *)n + n->nlmsg_len && a->nla_len >= NLA_HDRLEN;
	     a = (struct nlattr *)((char *)a + NLA_ALIGN(a->nla_len))) {
		if ((a->nla_type & NLA_TYPE_MASK) != type ||
		    (size_t)(a->nla_len - NLA_HDRLEN) < len)
			continue;
		memcpy(out, (char *)a + NLA_HDRLEN, len);
		return 0;
	}
	return -ENOENT;
}

static void tgo_genl_init(struct tgo_genl_msg *m, uint16_t family, uint8_t cmd)
{
	memset(m, 0, sizeof(*m));
	m->n.nlmsg_len = NLMSG_LENGTH(GENL_HDRLEN);
	m->n.nlmsg_type = family;
	m->n.nlmsg_flags = NLM_F_REQUEST;
	m->g.cmd = cmd;
	m->g.version = 1;
}

bool tgo_iface_xmit(int ifindex)
{
	struct tgo_genl_msg m;
	uint64_t features = 0;
	uint32_t idx = (uint32_t)ifindex;
	uint16_t family = 0;
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
	bool ok;

	if (fd < 0)
		return false;
	tgo_genl_init(&m, GENL_ID_CTRL, CTRL_CMD_GETFAMILY);
	tgo_nla_put(&m, CTRL_ATTR_FAMILY_NAME, "netdev", sizeof("netdev"));
	ok = tgo_genl_ask(fd, &m, CTRL_ATTR_FAMILY_ID, &family, sizeof(family)) == 0;
	if (ok) {
		tgo_genl_init(&m, family, TGO_NETDEV_CMD_DEV_GET);
		tgo_nla_put(&m, TGO_NETDEV_A_DEV_IFINDEX, &idx, sizeof(idx));
		ok = tgo_genl_ask(fd, &m, TGO_NETDEV_A_DEV_XDP_FEATURES, &features,
				  sizeof(features)) == 0;
	}
	close(fd);
	return ok && (features & TGO_NETDEV_XDP_ACT_NDO_XMIT);
}
