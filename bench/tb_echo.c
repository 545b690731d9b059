/* turnbench echo peer: returns every UDP datagram to its sender, batched with recvmmsg and
 * sendmmsg, so the peer side costs far less per packet than any relay under test. */
#define _GNU_SOURCE
#include "bench/tb.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define ECHO_SLOT 2048

struct tb_echo {
	uint8_t buf[TB_BATCH][ECHO_SLOT];
	struct sockaddr_in from[TB_BATCH];
	struct iovec iov[TB_BATCH];
	struct mmsghdr m[TB_BATCH];
	uint64_t packets;
};

/* Reads and echoes until the socket is empty. */
static void echo_drain(struct tb_echo *e, int fd)
{
	for (int round = 0; round < 64; round++) {
		int n, sent = 0;

		for (int j = 0; j < TB_BATCH; j++) {
			e->iov[j] = (struct iovec){ e->buf[j], ECHO_SLOT };
			e->m[j].msg_hdr = (struct msghdr){ .msg_name = &e->from[j],
							   .msg_namelen = sizeof(e->from[j]),
							   .msg_iov = &e->iov[j],
							   .msg_iovlen = 1 };
		}
		n = recvmmsg(fd, e->m, TB_BATCH, MSG_DONTWAIT, NULL);
		if (n <= 0)
			return;
		for (int j = 0; j < n; j++)
			e->iov[j].iov_len = e->m[j].msg_len;
		/* A full send buffer drops the rest: UDP semantics, counted as loss upstream. */
		while (sent < n) {
			int k = sendmmsg(fd, e->m + sent, (unsigned)(n - sent), MSG_DONTWAIT);

			if (k <= 0)
				break;
			sent += k;
		}
		e->packets += (uint64_t)n;
		if (n < TB_BATCH)
			return;
	}
}

int tb_echo_run(const struct tb_opts *o)
{
	struct tb_echo *e = calloc(1, sizeof(*e));
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = -1 };
	sigset_t set;
	int fd = -1, ep = -1, sfd = -1, ret;
	uint64_t end;

	if (!e)
		return -ENOMEM;
	ret = tb_udp_open(&o->peer, NULL, &fd);
	if (ret != 0)
		goto out;
	ep = epoll_create1(EPOLL_CLOEXEC);
	ev.data.fd = fd;
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
		ret = -errno;
		goto out;
	}
	/* SIGINT/SIGTERM end the loop through a signalfd (no work in signal context). */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sfd = signalfd(-1, &set, SFD_CLOEXEC);
	ev.data.fd = sfd;
	if (sfd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev) != 0) {
		ret = -errno;
		goto out;
	}
	end = tb_now_ns() + (uint64_t)((o->duration > 0 ? o->duration : 3600) * 1e9);
	printf("echo ready\n");
	fflush(stdout);
	for (bool stop = false; !stop && tb_now_ns() < end;) {
		struct epoll_event got[2];
		int n = epoll_wait(ep, got, 2, 100);

		for (int k = 0; k < n; k++) {
			if (got[k].data.fd == sfd)
				stop = true;
			else
				echo_drain(e, fd);
		}
	}
	printf("echo packets=%llu cpu_s=%.3f\n", (unsigned long long)e->packets, tb_self_cpu_s());
	ret = 0;
out:
	if (sfd >= 0)
		close(sfd);
	if (ep >= 0)
		close(ep);
	if (fd >= 0)
		close(fd);
	free(e);
	return ret;
}
