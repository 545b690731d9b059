/* turngatectl doctor: the network checks (a STUN Binding to a listener, an allocation with a
 * credential). */
#include "config.h"

#include "ctl/ctl_doctor.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "client/turn_client.h"
#include "common/mono.h"

#define STUN_MAGIC 0x2112A442u
#define STUN_HDR 20

/* Signed, for deadline arithmetic. */
static int64_t now_ms(void)
{
	return (int64_t)mono_ms();
}

int doctor_addr(const char *host, uint16_t port, struct sockaddr_storage *out)
{
	struct addrinfo hints = { .ai_flags = AI_NUMERICSERV }, *res = NULL;
	char ps[8];

	snprintf(ps, sizeof(ps), "%u", port);
	if (getaddrinfo(host, ps, &hints, &res) != 0 || res == NULL)
		return -EHOSTUNREACH;
	memset(out, 0, sizeof(*out));
	memcpy(out, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

/* Waits for fd to be readable until deadline (monotonic ms). */
static int wait_in(int fd, int64_t deadline)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int64_t left = deadline - now_ms();
	int rc;

	if (left <= 0)
		return -ETIMEDOUT;
	rc = poll(&pfd, 1, (int)left);
	if (rc < 0)
		return -errno;
	return rc == 0 ? -ETIMEDOUT : 0;
}

static bool is_answer(const uint8_t *msg, size_t len, const uint8_t tid[12])
{
	uint32_t magic;

	if (len < STUN_HDR)
		return false;
	memcpy(&magic, msg + 4, 4);
	return msg[0] == 0x01 && msg[1] == 0x01 && ntohl(magic) == STUN_MAGIC &&
	       memcmp(msg + 8, tid, 12) == 0;
}

/* UDP: three tries spread over the timeout; TCP: one request, read the 20-byte header
 * and its body. */
static int exchange(int fd, bool tcp, const uint8_t *req, const uint8_t tid[12], int timeout_ms)
{
	uint8_t buf[1500];
	size_t have = 0;
	int64_t end = now_ms() + timeout_ms;

	for (int attempt = 0; attempt < (tcp ? 1 : 3); attempt++) {
		int64_t deadline = tcp ? end : now_ms() + timeout_ms / 3;

		if (send(fd, req, STUN_HDR, MSG_NOSIGNAL) != STUN_HDR)
			return -errno;
		while (wait_in(fd, deadline) == 0) {
			ssize_t n =
				recv(fd, buf + (tcp ? have : 0), sizeof(buf) - (tcp ? have : 0), 0);

			if (n <= 0)
				return n == 0 ? -ECONNRESET : -errno;
			if (!tcp && is_answer(buf, (size_t)n, tid))
				return 0;
			if (tcp) {
				have += (size_t)n;
				if (have >= STUN_HDR)
					return is_answer(buf, have, tid) ? 0 : -EBADMSG;
			}
		}
	}
	return -ETIMEDOUT;
}

int doctor_stun_binding(const struct sockaddr_storage *to, bool tcp, int timeout_ms)
{
	uint8_t req[STUN_HDR] = { 0x00, 0x01, 0x00, 0x00 };
	uint32_t magic = htonl(STUN_MAGIC);
	socklen_t alen = to->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						   : sizeof(struct sockaddr_in);
	int fd, rc;

	memcpy(req + 4, &magic, 4);
	if (getrandom(req + 8, 12, 0) != 12)
		return -EIO;
	fd = socket(to->ss_family, (tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A blocking connect to loopback or a reachable host is quick; a black hole ends
	 * at the kernel's SYN timeout, which an operator sees as "no answer". */
	rc = connect(fd, (const struct sockaddr *)to, alen) < 0 ? -errno : 0;
	if (rc == 0)
		rc = exchange(fd, tcp, req, req + 8, timeout_ms);
	close(fd);
	return rc;
}

int doctor_allocate(const struct sockaddr_storage *server, bool tcp, const char *user,
		    const char *pass, int timeout_ms, int *stun_code, char *why, size_t why_cap)
{
	struct turn_client_opts o = {
		.transport = tcp ? TURN_CLIENT_TCP : TURN_CLIENT_UDP,
		.server = (const struct sockaddr *)server,
		.username = user,
		.password = pass,
		.software = "turngatectl doctor",
		.timeout_ms = timeout_ms,
		.fingerprint = true,
	};
	struct turn_client *c = NULL;
	struct turn_alloc_result r;
	const char *reason = NULL;
	int rc;

	*stun_code = 0;
	why[0] = '\0';
	rc = turn_client_create(&o, &c);
	if (rc == 0)
		rc = turn_client_allocate(c, NULL, &r);
	/* A timed-out Allocate may have made one whose answer got lost: delete that too. */
	if (c != NULL && (rc == 0 || rc == -ETIMEDOUT))
		turn_client_refresh(c, 0, NULL);
	if (rc == -EPROTO && c != NULL) {
		*stun_code = turn_client_last_error(c, &reason);
		snprintf(why, why_cap, "%d %s", *stun_code, reason != NULL ? reason : "");
	} else if (rc < 0) {
		snprintf(why, why_cap, "%s", strerror(-rc));
	}
	turn_client_destroy(c);
	return rc;
}

int doctor_tls_binding(const struct sockaddr_storage *to, bool dtls, const char *sni,
		       int timeout_ms, char *info, size_t cap, int64_t *not_after)
{
	struct turn_client_opts o = {
		.transport = dtls ? TURN_CLIENT_DTLS : TURN_CLIENT_TLS,
		.server = (const struct sockaddr *)to,
		.sni = sni,
		.timeout_ms = timeout_ms,
	};
	struct turn_client *c = NULL;
	struct turn_client_tls_info ti;
	struct sockaddr_storage mapped;
	int rc = turn_client_create(&o, &c);

	info[0] = '\0';
	if (not_after != NULL)
		*not_after = 0;
	if (rc < 0)
		return rc;
	rc = turn_client_binding(c, &mapped);
	if (rc == 0 && turn_client_tls_info(c, &ti) == 0 && not_after != NULL)
		*not_after = ti.not_after;
	if (rc == 0 && turn_client_tls_info(c, &ti) == 0)
		snprintf(info, cap, " over %s (ALPN %s, certificate %s)", ti.version,
			 ti.alpn[0] ? ti.alpn : "none",
			 ti.subject_cn[0] ? ti.subject_cn
			 : ti.dns_san[0]  ? ti.dns_san
					  : "unnamed");
	turn_client_destroy(c);
	return rc;
}
