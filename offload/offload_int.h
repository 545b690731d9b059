/* Offload module internals shared by offload_open.c (open, pins, close) and offload_attach.c
 * (the TC and XDP hooks of one interface). Built only with HAVE_OFFLOAD. */
#ifndef TG_OFFLOAD_OFFLOAD_INT_H
#define TG_OFFLOAD_OFFLOAD_INT_H

#include <net/if.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offload/offload.h"

#define TGO_MAGIC 0x54474f46u /* "TGOF" */

/* The clsact ingress filter: a handle and priority of our own, so that a filter of
 * another tool is never replaced, and a take-over replaces ours in place. */
#define TGO_TC_HANDLE 0x7467u
#define TGO_TC_PRIO 0x7467u

/* Kernel names of the programs (as bpftool shows them). */
#define TGO_PROG_TC "tgo_tc"
#define TGO_PROG_XDP "tgo_xdp"

/* What relays on an interface: the TC program alone, or XDP in front of it (native, in
 * the driver, or generic, on the skb) with the TC program behind for what XDP passes up. */
enum tgo_hook {
	TGO_HOOK_NONE = 0,
	TGO_HOOK_TC,
	TGO_HOOK_XDP,
	TGO_HOOK_XDP_GENERIC,
};

struct tgo_iface {
	char name[IF_NAMESIZE];
	int ifindex;
	enum tgo_hook hook;
	bool created_clsact;	/* this open created the clsact qdisc */
	unsigned char mac[6];	/* the link address the host takes frames at */
};

struct tgo_relay;

struct tgo {
	uint32_t magic;
	struct tgo_relay *skel;
	char pin_dir[256];	/* "" when not pinned */
	struct tgo_iface *ifs;
	size_t n_ifs;
	struct tgo_maps maps;
	int ctr_fd;
};

/* Attaches to f->ifindex for engine: the TC program tc_fd always; for TGO_ENGINE_XDP the
 * XDP program xdp_fd in front, native where the driver runs it, else generic; for
 * TGO_ENGINE_AUTO native XDP where the driver runs it, else TC alone; for TGO_ENGINE_TC
 * TC alone (an earlier run's XDP program of ours goes). Replaces a program of ours
 * already there (a take-over), refuses to replace anyone else's. Fills f->hook. 0 or
 * -errno with why. */
int tgo_iface_attach(struct tgo_iface *f, enum tgo_engine engine, int tc_fd, int xdp_fd, char *why,
		     size_t why_len);
/* Detaches our programs from f->ifindex, whoever attached them (this open or an earlier
 * run's), and the clsact qdisc if this open created it. */
void tgo_iface_detach(const struct tgo_iface *f);

/* Whether the interface takes XDP frames from a redirect (its xdp_features has
 * NDO_XMIT; a veth only while its peer runs XDP or has GRO on). false when unknown. */
bool tgo_iface_xmit(int ifindex);

/* The entries in the hash map fd, or -errno. */
int tgo_map_count(int fd);

#endif
