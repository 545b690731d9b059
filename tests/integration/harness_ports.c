/* Integration-test harness: free ports for the daemons' listeners, each reserved for the
 * drawing process against every other test process on the machine (Python's included). */
#include "config.h"

#include "tests/integration/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mono.h"

/* The reservations' file, as harness_admin.PORT_LOCK; TG_PORT_LOCK names another. */
#define H_PORT_LOCK "/tmp/turngate-test-ports"

/* This process's reservations: its open file description of the lock file and the ports it
 * holds. A forked child opens its own description (the pid tells), so that its draws and
 * its parent's exclude each other: locks of one description never conflict. */
static struct {
	int fd;
	pid_t pid;
	uint8_t held[65536 / 8];
} h_res = { .fd = -1 };

static const char *h_lock_path(void)
{
	const char *p = getenv("TG_PORT_LOCK");

	return p != NULL && *p != '\0' ? p : H_PORT_LOCK;
}

/* Opened without O_CREAT when it exists: with fs.protected_regular, O_CREAT on another
 * user's file in /tmp fails even for root. */
static int h_lock_fd(void)
{
	const char *path = h_lock_path();

	if (h_res.fd >= 0 && h_res.pid == getpid())
		return h_res.fd;
	if (h_res.fd >= 0)
		close(h_res.fd); /* the parent's description: its locks stay the parent's */
	h_res.fd = -1;
	for (int tries = 0; tries < 3; tries++) { /* bounded: lost a create race at most twice */
		int fd = open(path, O_RDWR | O_CLOEXEC);

		if (fd < 0 && errno == ENOENT) {
			fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
			if (fd < 0 && errno == EEXIST)
				continue;
			/* whatever the umask: every user's tests share it */
			if (fd >= 0)
				(void)fchmod(fd, 0666);
		}
		if (fd < 0) {
			int err = errno;

			fprintf(stderr,
				"harness: cannot open the port reservations' file %s: %s "
				"(TG_PORT_LOCK names another)\n",
				path, strerror(err));
			return -err;
		}
		h_res.fd = fd;
		h_res.pid = getpid();
		return fd;
	}
	fprintf(stderr, "harness: cannot open the port reservations' file %s\n", path);
	return -EAGAIN;
}

int harness_port_reserve(uint16_t port)
{
	struct flock lk = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = port, .l_len = 1 };
	int fd;

	if (h_res.held[port / 8] & (1u << (port % 8)))
		return -EBUSY;
	fd = h_lock_fd();
	if (fd < 0)
		return fd;
	if (fcntl(fd, F_OFD_SETLK, &lk) < 0) {
		int err = errno;

		if (err == EAGAIN || err == EACCES)
			return -EBUSY;
		fprintf(stderr, "harness: cannot reserve port %u: %s\n", port, strerror(err));
		return -err;
	}
	h_res.held[port / 8] |= (uint8_t)(1u << (port % 8));
	return 0;
}

/* Free on every address of the family: a wildcard bind without SO_REUSEADDR fails while any
 * socket holds the port on any address (127.0.0.4 included, where tests run daemons whose
 * SO_REUSEPORT listeners another daemon could otherwise silently join), and UDP's
 * SO_REUSEADDR would let a duplicate bind pass. */
static bool h_port_free(int family, int type, uint16_t port)
{
	struct sockaddr_storage ss;
	int fd = socket(family, type, 0), one = 1;
	bool ok;

	if (fd < 0)
		return family == AF_INET6; /* no IPv6 at all: nothing to clash with */
	harness_addr(family == AF_INET ? "0.0.0.0" : "::", port, &ss);
	if (family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	ok = bind(fd, sa(&ss),
		  family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)) ==
	     0;
	close(fd);
	return ok;
}

/* Free for UDP and TCP on every IPv4 and IPv6 address, then reserved: 1 when port is this
 * process's now, 0 when bound or reserved elsewhere, negative when reserving cannot work. */
static int h_port_take(uint16_t port)
{
	int rc;

	if (!h_port_free(AF_INET, SOCK_DGRAM, port) || !h_port_free(AF_INET, SOCK_STREAM, port) ||
	    !h_port_free(AF_INET6, SOCK_DGRAM, port) || !h_port_free(AF_INET6, SOCK_STREAM, port))
		return 0;
	rc = harness_port_reserve(port);
	return rc == 0 ? 1 : rc == -EBUSY ? 0 : rc;
}

/* A draw that found nothing (where: " in LO-HI" or ""): 0, and why on stderr. */
static uint16_t h_port_none(const char *where, unsigned tries)
{
	fprintf(stderr,
		"harness: no free port%s: %u tried, each bound or reserved by this test or another "
		"running one (%s)\n",
		where, tries, h_lock_path());
	return 0;
}

/* The kernel draws (port 0), 20000-49151 only. */
static uint16_t h_free_port0(void)
{
	for (int tries = 0; tries < 200; tries++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		uint16_t port;
		int fd = socket(AF_INET, SOCK_DGRAM, 0), rc;

		if (fd < 0)
			return 0;
		harness_addr("127.0.0.1", 0, &ss);
		if (bind(fd, sa(&ss), sizeof(struct sockaddr_in)) < 0 ||
		    getsockname(fd, sa(&ss), &sl) < 0) {
			close(fd);
			return 0;
		}
		port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		close(fd);
		if (port < 20000 || port >= 49152)
			continue; /* keep clear of the relay ranges tests configure */
		rc = h_port_take(port);
		if (rc != 0)
			return rc > 0 ? port : 0;
	}
	return h_port_none("", 200);
}

/* The late ports: TG_LATE_PORTS=LO-HI (test_port_reserve's tiny ranges), else 31100 (above
 * the tests' fixed ports: relay windows up to 29999, test_scale_respawn's listeners up to
 * 31003, as harness_admin.late_port_range) up to below the kernel's port-0 range. 0, else
 * -ENOENT where there is none (a port-0 range from 31200 down), -EINVAL where TG_LATE_PORTS
 * is malformed. */
static int h_late_range(unsigned *lo, unsigned *hi)
{
	const char *env = getenv("TG_LATE_PORTS");
	unsigned low = 0, high = 0;
	char extra;
	FILE *f;

	if (env != NULL && *env != '\0') {
		if (sscanf(env, "%u-%u%c", lo, hi, &extra) == 2 && *lo >= 1 && *lo <= *hi &&
		    *hi <= 65535)
			return 0;
		fprintf(stderr, "harness: TG_LATE_PORTS=%s: not LO-HI\n", env);
		return -EINVAL;
	}
	f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (f == NULL)
		return -ENOENT;
	if (fscanf(f, "%u %u", &low, &high) != 2)
		low = 0;
	fclose(f);
	if (low <= 31200)
		return -ENOENT;
	*lo = 31100;
	*hi = low - 1;
	return 0;
}

/* Every port of lo-hi once, from a random one on: a range mostly held by the tests
 * running beside this one still gives its last free port. 0 when none is (said on stderr
 * when loud), or when reserving cannot work. */
static uint16_t h_free_in(unsigned lo, unsigned hi, bool loud)
{
	unsigned span = hi - lo + 1, start, tries;
	char where[32];

	start = ((unsigned)getpid() ^ (unsigned)mono_ns()) * 2654435761u % span;
	tries = span < 4096 ? span : 4096;
	for (unsigned i = 0; i < tries; i++) {
		uint16_t port = (uint16_t)(lo + (start + i) % span);
		int rc = h_port_take(port);

		if (rc != 0)
			return rc > 0 ? port : 0;
	}
	if (!loud)
		return 0;
	snprintf(where, sizeof(where), " in %u-%u", lo, hi);
	return h_port_none(where, tries);
}

uint16_t harness_free_port(void)
{
	unsigned lo, hi;
	uint16_t port;

	/* Below the kernel's port-0 range first: a port-0 pick could be taken before the
	 * daemon binds it by any client socket of a test running beside this one. */
	if (h_late_range(&lo, &hi) == 0 && (port = h_free_in(lo, hi, false)) != 0)
		return port;
	return h_free_port0();
}

uint16_t harness_free_port_late(void)
{
	unsigned lo, hi;
	int rc = h_late_range(&lo, &hi);

	if (rc < 0)
		return rc == -ENOENT ? h_free_port0() : 0;
	return h_free_in(lo, hi, true);
}
