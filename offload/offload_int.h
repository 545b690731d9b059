/* Offload module internals shared by offload.c (open, pins, close) and offload_attach.c
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

/* Kernel name of the program (as bpftool shows it). */
#define TGO_PROG_TC "tgo_tc"

enum tgo_hook {
	TGO_HOOK_NONE = 0,
	TGO_HOOK_TC,
};

struct tgo_iface {
	char name[IF_NAMESIZE];
	int ifindex;
	enum tgo_hook hook;
	bool created_clsact;	/* this open created the clsact qdisc */
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

/* Attaches the TC program tc_fd to f->ifindex for engine (every engine is TC: there is
 * no XDP program yet); replaces a filter of ours already there (a take-over), refuses to
 * replace anyone else's. Fills f->hook. 0 or -errno with why. */
int tgo_iface_attach(struct tgo_iface *f, enum tgo_engine engine, int tc_fd, char *why,
		     size_t why_len);
/* Detaches our filter from f->ifindex, whoever attached it (this open or an earlier
 * run's), and the clsact qdisc if this open created it. */
void tgo_iface_detach(const struct tgo_iface *f);

/* The entries in the hash map fd, or -errno. */
int tgo_map_count(int fd);

#endif
