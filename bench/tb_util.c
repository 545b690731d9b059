/* turnbench helpers: clocks, /proc sampling of the server tree, RTT histogram, sockets. */
#include "bench/tb.h"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TB_MAX_TREE 256

uint64_t tb_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double tb_self_cpu_s(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Reads /proc/PID/stat: ppid, utime, stime, cutime, cstime (ticks). The command name may
 * hold spaces and parentheses, so parsing starts after the LAST ')'. */
static int read_stat(pid_t pid, pid_t *ppid, unsigned long long t[4])
{
	char path[64], buf[1024];
	ssize_t n;
	int fd;
	char *p;
	int pp;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p)
		return -EIO;
	/* fields from 3: state ppid pgrp session tty tpgid flags minflt cminflt majflt
	 * cmajflt utime stime cutime cstime */
	if (sscanf(p + 2, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu", &pp,
		   &t[0], &t[1], &t[2], &t[3]) != 5)
		return -EIO;
	*ppid = pp;
	return 0;
}

double tb_pid_cpu_s(pid_t pid)
{
	unsigned long long t[4];
	pid_t pp;

	if (pid <= 0 || read_stat(pid, &pp, t) != 0)
		return -1;
	return (double)(t[0] + t[1]) / (double)sysconf(_SC_CLK_TCK);
}

/* Collects the PIDs of the trees rooted at roots[] by scanning /proc for parent links. */
static unsigned collect_tree(const pid_t *roots, unsigned n_roots, pid_t *out, unsigned cap)
{
	pid_t all[4096], par[4096];
	unsigned n_all = 0, n = 0;
	DIR *d = opendir("/proc");
	struct dirent *de;

	for (unsigned i = 0; i < n_roots && n < cap; i++)
		out[n++] = roots[i];
	if (!d)
		return n;
	while ((de = readdir(d)) && n_all < 4096) {
		unsigned long long t[4];
		pid_t pid, pp;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pid = (pid_t)atoi(de->d_name);
		if (read_stat(pid, &pp, t) == 0) {
			all[n_all] = pid;
			par[n_all++] = pp;
		}
	}
	closedir(d);
	/* Breadth-first over the parent links; the list only grows, so this ends. */
	for (unsigned k = 0; k < n; k++)
		for (unsigned i = 0; i < n_all && n < cap; i++)
			if (par[i] == out[k])
				out[n++] = all[i];
	return n;
}

static uint64_t status_kib(pid_t pid, const char *file, const char *key)
{
	char path[64], line[256];
	size_t kl = strlen(key);
	uint64_t v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, kl) == 0) {
			v = strtoull(line + kl, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

static double sched_s(pid_t pid)
{
	char path[64], file[320];
	unsigned long long ns, total = 0;
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		FILE *f;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		if (snprintf(file, sizeof(file), "%s/%s/schedstat", path, de->d_name) >=
		    (int)sizeof(file))
			continue;
		f = fopen(file, "re");
		if (!f)
			continue;
		if (fscanf(f, "%llu", &ns) == 1)
			total += ns;
		fclose(f);
	}
	closedir(d);
	return (double)total / 1e9;
}

int tb_sample_server(const struct tb_opts *o, struct tb_sample *s)
{
	pid_t tree[TB_MAX_TREE];
	unsigned n = collect_tree(o->srv, o->n_srv, tree, TB_MAX_TREE);
	double hz = (double)sysconf(_SC_CLK_TCK);

	memset(s, 0, sizeof(*s));
	for (unsigned i = 0; i < n; i++) {
		unsigned long long t[4];
		pid_t pp;

		if (read_stat(tree[i], &pp, t) != 0)
			continue;
		/* cutime/cstime hold only reaped children, so adding them never double counts
		 * a live descendant, and a worker that died mid-run is still counted. */
		s->cpu_s += (double)(t[0] + t[1] + t[2] + t[3]) / hz;
		s->sched_s += sched_s(tree[i]);
		s->rss_kib += status_kib(tree[i], "status", "VmRSS:");
		s->pss_kib += status_kib(tree[i], "smaps_rollup", "Pss:");
		s->nproc++;
	}
	return s->nproc ? 0 : -ESRCH;
}

int tb_box_parse(const char *line, long hz, struct tb_box *b)
{
	unsigned long long v[8] = { 0 };

	memset(b, 0, sizeof(*b));
	/* user nice system idle iowait irq softirq steal (guest time is inside user); the
	 * aggregate line only, not "cpu0 ..." */
	if (hz <= 0 || strncmp(line, "cpu ", 4) != 0 ||
	    sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		   &v[4], &v[5], &v[6], &v[7]) != 8)
		return -EINVAL;
	b->busy_s = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
	b->softirq_s = (double)v[6] / (double)hz;
	b->steal_s = (double)v[7] / (double)hz;
	return 0;
}

int tb_box_sample(struct tb_box *b)
{
	char line[512];
	FILE *f = fopen("/proc/stat", "re");
	int ret = -EIO;

	memset(b, 0, sizeof(*b));
	if (!f)
		return -errno;
	if (fgets(line, sizeof(line), f))
		ret = tb_box_parse(line, sysconf(_SC_CLK_TCK), b);
	fclose(f);
	return ret;
}

int tb_hist_init(struct tb_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->us = calloc(TB_HIST_US, sizeof(*h->us));
	return h->us ? 0 : -ENOMEM;
}

void tb_hist_free(struct tb_hist *h)
{
	if (!h)
		return;
	free(h->us);
	h->us = NULL;
}

void tb_hist_add(struct tb_hist *h, uint64_t ns)
{
	uint64_t us = ns / 1000;

	if (us >= TB_HIST_US)
		h->over++;
	else
		h->us[us]++;
	h->n++;
}

long tb_hist_quantile(const struct tb_hist *h, double q)
{
	uint64_t want, acc = 0;

	if (h->n == 0)
		return -1;
	want = (uint64_t)(q * (double)h->n);
	if (want >= h->n)
		want = h->n - 1;
	for (uint32_t i = 0; i < TB_HIST_US; i++) {
		acc += h->us[i];
		if (acc > want)
			return (long)i;
	}
	return (long)TB_HIST_US;
}

int tb_udp_open(const struct sockaddr_in *bind_addr, const struct sockaddr_in *dst, int *out)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int sz = 4 << 20;
	int e;

	if (fd < 0)
		return -errno;
	/* Large buffers so that a burst of a whole window never overflows our side. */
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	if (bind_addr && bind(fd, (const struct sockaddr *)bind_addr, sizeof(*bind_addr)) != 0)
		goto fail;
	if (dst && connect(fd, (const struct sockaddr *)dst, sizeof(*dst)) != 0)
		goto fail;
	*out = fd;
	return 0;
fail:
	e = -errno;
	close(fd);
	return e;
}

int tb_parse_addr(const char *s, struct sockaddr_in *out)
{
	char host[64];
	const char *colon = strrchr(s, ':');
	size_t hl;
	char *end;
	long port = 0;

	memset(out, 0, sizeof(*out));
	out->sin_family = AF_INET;
	hl = colon ? (size_t)(colon - s) : strlen(s);
	if (hl == 0 || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	if (inet_pton(AF_INET, host, &out->sin_addr) != 1)
		return -EINVAL;
	if (colon) {
		port = strtol(colon + 1, &end, 10);
		if (*end || port < 0 || port > 65535)
			return -EINVAL;
	}
	out->sin_port = htons((uint16_t)port);
	return 0;
}

int tb_tcp_open(const struct sockaddr_in *bind_addr, const struct sockaddr_in *dst, int *out)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int sz = 4 << 20, one = 1;
	int e;

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	/* A round trip measures the relay, not Nagle's algorithm waiting for an ACK. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (bind_addr && bind(fd, (const struct sockaddr *)bind_addr, sizeof(*bind_addr)) != 0)
		goto fail;
	if (connect(fd, (const struct sockaddr *)dst, sizeof(*dst)) != 0)
		goto fail;
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
		goto fail;
	*out = fd;
	return 0;
fail:
	e = -errno;
	close(fd);
	return e;
}

long tb_stream_frame(const uint8_t *p, size_t len)
{
	size_t need;

	if (len < 4)
		return 0;
	if ((p[0] & 0xc0) == 0x40)	/* ChannelData: 0x4000-0x7fff, padded over TCP */
		need = 4 + (((size_t)p[2] << 8 | p[3]) + 3) / 4 * 4;
	else if ((p[0] & 0xc0) == 0)	/* STUN: 20-byte header + length */
		need = 20 + ((size_t)p[2] << 8 | p[3]);
	else
		return -EBADMSG;
	return len >= need ? (long)need : 0;
}
