/* Parked stream connections: the blob's framing over control channels and its check. */
#include "common/park.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/grow.h"

static long elapsed_ms(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* ipc_send, waiting for room while the channel is full (non-blocking or not). */
static int send_waiting(int fd, uint16_t type, const void *p, size_t len, int sock,
			const struct timespec *t0, int timeout_ms)
{
	for (;;) {
		int rc = ipc_send(fd, type, p, len, sock);
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };
		long left = timeout_ms - elapsed_ms(t0);

		if (rc != -EAGAIN && rc != -ENOBUFS)
			return rc;
		if (left <= 0)
			return -ETIMEDOUT;
		(void)poll(&pfd, 1, (int)(left < 100 ? left : 100));
	}
}

int park_send(int fd, const uint8_t *blob, size_t len, int sock, int timeout_ms)
{
	struct timespec t0;
	size_t off = 0;
	int rc;

	if (len > PARK_BLOB_MAX || sock < 0)
		return len > PARK_BLOB_MAX ? -EMSGSIZE : -EBADF;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (len - off > IPC_PAYLOAD_MAX) {
		rc = send_waiting(fd, IPC_STREAM_PART, blob + off, IPC_PAYLOAD_MAX, -1, &t0,
				  timeout_ms);
		if (rc < 0)
			return rc;
		off += IPC_PAYLOAD_MAX;
	}
	return send_waiting(fd, IPC_STREAM, blob + off, len - off, sock, &t0, timeout_ms);
}

int park_asm_add(struct park_asm *a, const struct ipc_msg *msg)
{
	size_t n = msg->hdr.len;

	if (a->len + n > PARK_BLOB_MAX) {
		park_asm_free(a);
		return -EMSGSIZE;
	}
	if (GROW_ARRAY(&a->buf, &a->cap, a->len + n, 8192) < 0)
		return -ENOMEM;
	memcpy(a->buf + a->len, msg->payload, n);
	a->len += n;
	return msg->hdr.type == IPC_STREAM ? 1 : 0;
}

uint8_t *park_asm_take(struct park_asm *a, size_t *len)
{
	uint8_t *p = a->buf;

	*len = a->len;
	a->buf = NULL;
	a->len = a->cap = 0;
	return p;
}

void park_asm_free(struct park_asm *a)
{
	free(a->buf);
	a->buf = NULL;
	a->len = a->cap = 0;
}

int park_check(const uint8_t *blob, size_t len, struct park_hdr *out)
{
	struct park_hdr h;
	int fam;

	if (blob == NULL || len < sizeof(h))
		return -EBADMSG;
	memcpy(&h, blob, sizeof(h));
	fam = h.peer.ss_family;
	if (h.magic != PARK_MAGIC || h.version != PARK_VERSION || h.kind < PARK_TCONN ||
	    h.kind > PARK_URELAY || (h.kind == PARK_URELAY && h.id > 1) ||
	    memchr(h.listener, '\0', sizeof(h.listener)) == NULL ||
	    (h.kind == PARK_TCONN && h.listener[0] == '\0') ||
	    (h.kind != PARK_TCONN && h.rec_idx == PARK_NO_REC) ||
	    ((h.kind == PARK_TCONN || h.kind == PARK_TPEER) && fam != AF_INET &&
	     fam != AF_INET6) ||
	    h.peer_len > sizeof(h.peer) || (uint64_t)h.in_len + h.out_len != len - sizeof(h))
		return -EBADMSG;
	if (out != NULL)
		*out = h;
	return 0;
}
