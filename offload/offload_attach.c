/* Offload: the TC (clsact ingress) hook of one interface, attached and detached so that
 * only a filter of ours is ever replaced or removed. */
#include "config.h"

#include "offload/offload_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
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

int tgo_iface_attach(struct tgo_iface *f, enum tgo_engine engine, int tc_fd, char *why,
		     size_t why_len)
{
	/* No XDP program yet (docs/offload.md, Engines): every engine is TC. */
	(void)engine;
	return tgo_attach_tc(f, tc_fd, why, why_len);
}

void tgo_iface_detach(const struct tgo_iface *f)
{
	if (f->ifindex > 0)
		tgo_tc_detach(f->ifindex, f->created_clsact);
}
