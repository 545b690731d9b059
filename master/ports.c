/* Master: who else holds a listener's address and port (socket diagnostics, /proc), so that
 * turngated never joins a SO_REUSEPORT group it did not create. */
#include "config.h"

#include "master/master.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"

/* TCP states as inet_diag numbers them (include/net/tcp_states.h). An unconnected UDP
 * socket is "CLOSE"; a connected one (a 4-tuple of its own) takes no new traffic. */
#define DIAG_TCP_LISTEN 10
#define DIAG_CLOSE 7
#define DIAG_BUF 32768

/* Does a socket bound to (fam, addr) share traffic with ours at (ours)? Equal addresses, or
 * either a wildcard; an IPv6 wildcard without IPV6_V6ONLY, or a v4-mapped address, covers
 * IPv4 too. Ours are IPV6_V6ONLY (listeners.c). */
static bool overlaps(const struct sockaddr_storage *ours, int fam, const uint32_t *addr,
		     bool v6only)
{
	if (ours->ss_family == AF_INET) {
		uint32_t a = ((const struct sockaddr_in *)ours)->sin_addr.s_addr;
		static const uint32_t mapped[3] = { 0, 0, 0 };

		if (fam == AF_INET)
			return a == INADDR_ANY || addr[0] == INADDR_ANY || addr[0] == a;
		if (memcmp(addr, mapped, 8) != 0)
			return false;
		if (addr[2] == 0 && addr[3] == 0)
			return !v6only; /* [::] */
		return addr[2] == htonl(0xffff) && (a == INADDR_ANY || addr[3] == a);
	}
	if (fam != AF_INET6)
		return false;
	{
		const struct in6_addr *a = &((const struct sockaddr_in6 *)ours)->sin6_addr;
		static const uint32_t any[4] = { 0, 0, 0, 0 };

		return IN6_IS_ADDR_UNSPECIFIED(a) || memcmp(addr, any, 16) == 0 ||
		       memcmp(addr, a, 16) == 0;
	}
}

static void holder_addr_text(int fam, const uint32_t *addr, unsigned port, char *buf,
			     size_t cap)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	inet_ntop(fam, addr, ip, sizeof(ip));
	snprintf(buf, cap, fam == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, port);
}

static bool is_own(unsigned long ino, const unsigned long *own, size_t n_own)
{
	for (size_t i = 0; i < n_own; i++)
		if (own[i] == ino)
			return true;
	return false;
}

/* The IPV6_V6ONLY flag of one answer (INET_DIAG_SKV6ONLY; absent: false). */
static bool msg_v6only(const struct nlmsghdr *h, const struct inet_diag_msg *r)
{
	int len = (int)h->nlmsg_len - NLMSG_LENGTH(sizeof(*r));
	const struct rtattr *a = (const struct rtattr *)(r + 1);

	for (; RTA_OK(a, len); a = RTA_NEXT(a, len))
		if (a->rta_type == INET_DIAG_SKV6ONLY && RTA_PAYLOAD(a) >= 1)
			return *(const uint8_t *)RTA_DATA(a) != 0;
	return false;
}

/* The dump asks for sockets on port only (INET_DIAG_REQ_BYTECODE: sport >= port, then
 * sport <= port; running off the program's end accepts, jumping past it refuses): the
 * kernel filters, so a node with 250,000 relay sockets answers with a few instead of
 * copying every one out (160 ms a listener at a take-over). */
struct diag_port_bc {
	struct rtattr rta;
	struct inet_diag_bc_op op[4];
};

static void diag_port_filter(struct diag_port_bc *bc, unsigned port)
{
	bc->rta.rta_len = RTA_LENGTH(sizeof(bc->op));
	bc->rta.rta_type = INET_DIAG_REQ_BYTECODE;
	bc->op[0] = (struct inet_diag_bc_op){ INET_DIAG_BC_S_GE, 8, 20 };
	bc->op[1] = (struct inet_diag_bc_op){ 0, 0, (unsigned short)port };
	bc->op[2] = (struct inet_diag_bc_op){ INET_DIAG_BC_S_LE, 8, 12 };
	bc->op[3] = (struct inet_diag_bc_op){ 0, 0, (unsigned short)port };
}

static int diag_send(int fd, int fam, int proto, unsigned port)
{
	struct {
		struct nlmsghdr h;
		struct inet_diag_req_v2 r;
		struct diag_port_bc bc;
	} req;
	struct sockaddr_nl nl = { .nl_family = AF_NETLINK };

	memset(&req, 0, sizeof(req));
	req.h.nlmsg_len = sizeof(req);
	req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	req.r.sdiag_family = (uint8_t)fam;
	req.r.sdiag_protocol = (uint8_t)proto;
	req.r.idiag_states = proto == IPPROTO_TCP ? 1u << DIAG_TCP_LISTEN : 1u << DIAG_CLOSE;
	diag_port_filter(&req.bc, port);
	if (sendto(fd, &req, sizeof(req), 0, (struct sockaddr *)&nl, sizeof(nl)) < 0)
		return -errno;
	return 0;
}

/* One dump of (fam, proto): the first socket on our port and address that is not ours.
 * Returns 1 (found, *out filled but pid), 0, or -errno (no socket diagnostics). */
static int diag_scan(int fam, int proto, const struct sockaddr_storage *ours, unsigned port,
		     const unsigned long *own, size_t n_own, struct port_holder *out)
{
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	char *buf = malloc(DIAG_BUF);
	int rc = fd < 0 ? -errno : buf == NULL ? -ENOMEM : diag_send(fd, fam, proto, port),
	    found = 0;

	while (rc == 0) {
		ssize_t n = recv(fd, buf, DIAG_BUF, 0);
		const struct nlmsghdr *h = (const struct nlmsghdr *)buf;

		if (n < 0) {
			rc = -errno;
			break;
		}
		for (int len = (int)n; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
			const struct inet_diag_msg *r = NLMSG_DATA(h);

			if (h->nlmsg_type == NLMSG_DONE)
				goto out;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);

				rc = e->error < 0 ? e->error : -EIO;
				goto out;
			}
			if (found || h->nlmsg_len < NLMSG_LENGTH(sizeof(*r)) ||
			    ntohs(r->id.idiag_sport) != port ||
			    !overlaps(ours, r->idiag_family, r->id.idiag_src, msg_v6only(h, r)) ||
			    is_own(r->idiag_inode, own, n_own))
				continue;
			found = 1;
			out->inode = r->idiag_inode;
			out->uid = r->idiag_uid;
			holder_addr_text(r->idiag_family, r->id.idiag_src, port, out->addr,
					 sizeof(out->addr));
		}
	}
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	return rc < 0 ? rc : found;
}

/* The process holding socket inode ino (the first found under /proc/PID/fd), with its
 * comm; stays 0 when no process we may look into has it. */
static void holder_pid(struct port_holder *h)
{
	char want[48], path[300], link[64];
	DIR *proc = opendir("/proc");
	struct dirent *p;

	h->pid = 0;
	if (proc == NULL)
		return;
	snprintf(want, sizeof(want), "socket:[%lu]", h->inode);
	while (h->pid == 0 && (p = readdir(proc)) != NULL) {
		DIR *fds;
		struct dirent *f;

		if (p->d_name[0] < '1' || p->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/fd", p->d_name);
		fds = opendir(path);
		if (fds == NULL)
			continue;
		while ((f = readdir(fds)) != NULL) {
			ssize_t n;

			n = readlinkat(dirfd(fds), f->d_name, link, sizeof(link) - 1);
			if (n <= 0)
				continue;
			link[n] = '\0';
			if (strcmp(link, want) == 0) {
				h->pid = atoi(p->d_name);
				break;
			}
		}
		closedir(fds);
	}
	closedir(proc);
	if (h->pid > 0) {
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/comm", (int)h->pid);
		f = fopen(path, "re");
		if (f != NULL && fgets(h->comm, sizeof(h->comm), f) != NULL)
			h->comm[strcspn(h->comm, "\n")] = '\0';
		if (f != NULL)
			fclose(f);
	}
}

int ports_foreign_holder(int type, const struct sockaddr_storage *ours, const unsigned long *own,
			 size_t n_own, struct port_holder *out)
{
	int proto = type == SOCK_STREAM ? IPPROTO_TCP : IPPROTO_UDP;
	unsigned port = ours->ss_family == AF_INET
				? ntohs(((const struct sockaddr_in *)ours)->sin_port)
				: ntohs(((const struct sockaddr_in6 *)ours)->sin6_port);
	int rc;

	memset(out, 0, sizeof(*out));
	rc = diag_scan(ours->ss_family, proto, ours, port, own, n_own, out);
	/* An IPv6 wildcard socket may take our IPv4 traffic too. */
	if (rc == 0 && ours->ss_family == AF_INET)
		rc = diag_scan(AF_INET6, proto, ours, port, own, n_own, out);
	if (rc == 1)
		holder_pid(out);
	return rc;
}

void ports_holder_text(const struct port_holder *h, char *buf, size_t cap)
{
	if (h->pid > 0)
		snprintf(buf, cap, "pid %d (%s) on %s", (int)h->pid, h->comm[0] ? h->comm : "?",
			 h->addr);
	else
		snprintf(buf, cap, "a socket of uid %u (inode %lu; its process is not visible to turngated) on %s",
			 h->uid, h->inode, h->addr);
}

unsigned long ports_inode(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? (unsigned long)st.st_ino : 0;
}
