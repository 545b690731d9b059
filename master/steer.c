/* Master: the reuseport steering program of the TURN-UDP listeners. Each datagram goes to
 * the worker slot shm_steer_slot() names for its source address, so the owner of every
 * allocation is a function of the client alone: a take-over with another worker count
 * re-owns the records by the same function (shm/image.c) and each client keeps reaching
 * its allocation. The kernel's own reuseport hash cannot be computed in user space. */
#include "config.h"

#include "master/master.h"

#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "shm/shm_state.h"

#ifndef SO_ATTACH_REUSEPORT_CBPF
#define SO_ATTACH_REUSEPORT_CBPF 51
#endif

/* The program runs with the packet's data at the UDP payload; SKF_NET_OFF reaches the IP
 * header. Classic BPF arithmetic is 32-bit, like shm_steer_slot(). An index the group
 * does not have (never: n is the group's size) falls back to the kernel's hash. */
#define FINISH(n)                                                                       \
	BPF_STMT(BPF_LDX | BPF_W | BPF_MEM, 0), BPF_STMT(BPF_ALU | BPF_XOR | BPF_X, 0), \
		BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, SHM_STEER_MUL),                     \
		BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, SHM_STEER_SHIFT),                   \
		BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, (n)), BPF_STMT(BPF_RET | BPF_A, 0)

int steer_attach(int fd, int family, unsigned n_slots, const char *name)
{
	struct sock_filter v4[] = {
		/* X = IP header length; M[0] = source address; A = source port */
		BPF_STMT(BPF_LD | BPF_B | BPF_ABS, (uint32_t)SKF_NET_OFF),
		BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x0f),
		BPF_STMT(BPF_ALU | BPF_LSH | BPF_K, 2),
		BPF_STMT(BPF_MISC | BPF_TAX, 0),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)SKF_NET_OFF + 12),
		BPF_STMT(BPF_ST, 0),
		BPF_STMT(BPF_LD | BPF_H | BPF_IND, (uint32_t)SKF_NET_OFF),
		FINISH(n_slots),
	};
	struct sock_filter v6[] = {
		/* M[0] = xor of the source address words; A = source port (a UDP header right
		 * after the fixed header, as the server's traffic has) */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)SKF_NET_OFF + 8),
		BPF_STMT(BPF_MISC | BPF_TAX, 0),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)SKF_NET_OFF + 12),
		BPF_STMT(BPF_ALU | BPF_XOR | BPF_X, 0),
		BPF_STMT(BPF_MISC | BPF_TAX, 0),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)SKF_NET_OFF + 16),
		BPF_STMT(BPF_ALU | BPF_XOR | BPF_X, 0),
		BPF_STMT(BPF_MISC | BPF_TAX, 0),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)SKF_NET_OFF + 20),
		BPF_STMT(BPF_ALU | BPF_XOR | BPF_X, 0),
		BPF_STMT(BPF_ST, 0),
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, (uint32_t)SKF_NET_OFF + 40),
		FINISH(n_slots),
	};
	struct sock_fprog prog;

	if (n_slots == 0)
		return -EINVAL;
	if (family == AF_INET6) {
		prog.len = sizeof(v6) / sizeof(v6[0]);
		prog.filter = v6;
	} else {
		prog.len = sizeof(v4) / sizeof(v4[0]);
		prog.filter = v4;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog)) < 0) {
		int rc = -errno;

		log_warn("master",
			 "listener %s: no reuseport steering (%s): the kernel's hash "
			 "picks the worker, and a restart with another worker count loses "
			 "the allocations it moves",
			 name, strerror(-rc));
		return rc;
	}
	return 0;
}
