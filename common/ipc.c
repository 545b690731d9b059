/* Master <-> worker control frames over SOCK_SEQPACKET with optional SCM_RIGHTS descriptor. */
#include "common/ipc.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

enum len_rule {
	LEN_EXACT, /* payload length must equal `size` */
	LEN_STR,   /* 1..IPC_NAME_MAX bytes, no NUL inside */
	LEN_BYTES, /* size..IPC_PAYLOAD_MAX bytes, anything */
};

struct type_rule {
	const char *name;
	enum len_rule rule;
	size_t size;
	bool fd; /* a descriptor is required (true) or forbidden (false) */
};

static const struct type_rule rules[IPC_TYPE_END] = {
	[IPC_PING] = { "PING", LEN_EXACT, sizeof(struct ipc_ping), false },
	[IPC_PONG] = { "PONG", LEN_EXACT, sizeof(struct ipc_pong), false },
	[IPC_READY] = { "READY", LEN_EXACT, sizeof(struct ipc_pong), false },
	[IPC_LISTENER_ADD] = { "LISTENER_ADD", LEN_STR, 0, true },
	[IPC_LISTENER_REMOVE] = { "LISTENER_REMOVE", LEN_STR, 0, false },
	[IPC_DRAIN] = { "DRAIN", LEN_EXACT, sizeof(struct ipc_drain), false },
	[IPC_DISCONNECT] = { "DISCONNECT", LEN_EXACT, sizeof(struct ipc_disconnect), false },
	[IPC_LOGLEVEL] = { "LOGLEVEL", LEN_STR, 0, false },
	[IPC_STOP] = { "STOP", LEN_EXACT, 1, false },
	[IPC_OFFLOAD_MAP] = { "OFFLOAD_MAP", LEN_EXACT, 1, true },
	[IPC_OFFLOAD_OFF] = { "OFFLOAD_OFF", LEN_EXACT, 0, false },
	[IPC_TCP_HANDOFF] = { "TCP_HANDOFF", LEN_EXACT, sizeof(struct ipc_handoff), true },
	[IPC_PARK] = { "PARK", LEN_EXACT, sizeof(uint32_t), false },
	[IPC_STREAM_PART] = { "STREAM_PART", LEN_BYTES, 1, false },
	[IPC_STREAM] = { "STREAM", LEN_BYTES, 0, true },
	[IPC_STREAM_END] = { "STREAM_END", LEN_EXACT, 0, false },
	[IPC_LINGER] = { "LINGER", LEN_EXACT, sizeof(uint32_t), false },
	[IPC_FDSTORE] = { "FDSTORE", LEN_STR, 0, true },
	[IPC_FDUNSTORE] = { "FDUNSTORE", LEN_STR, 0, false },
	[IPC_RELAY_CHAN] = { "RELAY_CHAN", LEN_EXACT, sizeof(uint32_t), true },
	[IPC_RELAYS] = { "RELAYS", LEN_BYTES, sizeof(uint32_t), true },
	[IPC_HANDED_OVER] = { "HANDED_OVER", LEN_EXACT, 0, false },
};

static const struct type_rule *rule_of(uint16_t type)
{
	if (type == 0 || type >= IPC_TYPE_END)
		return NULL;
	return &rules[type];
}

/* Checks payload against its type's rule; the same check runs on both ends. */
static bool frame_valid(uint16_t type, const void *payload, size_t len, bool has_fd)
{
	const struct type_rule *r = rule_of(type);

	if (r == NULL || len > IPC_PAYLOAD_MAX || r->fd != has_fd)
		return false;
	if (len > 0 && payload == NULL)
		return false;
	if (r->rule == LEN_EXACT)
		return len == r->size;
	if (r->rule == LEN_BYTES)
		return len >= r->size;
	return len >= 1 && len <= IPC_NAME_MAX && memchr(payload, '\0', len) == NULL;
}

/* IPC_TCP_HANDOFF: a named listener and a length within the data. */
static bool handoff_valid(const void *payload)
{
	struct ipc_handoff h;

	memcpy(&h, payload, sizeof(h));
	return h.len <= IPC_HANDOFF_DATA_MAX && h.listener[0] != '\0' &&
	       memchr(h.listener, '\0', sizeof(h.listener)) != NULL &&
	       (h.tls == 0 || h.tls == 1) &&
	       (h.client.ss_family == AF_INET || h.client.ss_family == AF_INET6);
}

/* Whether user[from..] is all zero. */
static bool zero_from(const char *user, size_t from)
{
	for (size_t i = from; i < IPC_USER_MAX; i++)
		if (user[i] != '\0')
			return false;
	return true;
}

/* IPC_DISCONNECT carries a string inside a fixed struct: it must be NUL-terminated there.
 * Every field the kind does not use is zero, the pad too, and a user name is zero-padded:
 * the worker tells two frames apart by their bytes (wk_adopt_disc_keep keeps a repeat
 * once). */
static bool disconnect_valid(const void *payload)
{
	struct ipc_disconnect d;
	const char *nul;

	memcpy(&d, payload, sizeof(d));
	if (d.pad != 0)
		return false;
	if (d.by == IPC_DISC_INDEX)
		return zero_from(d.user, 0);
	if (d.index != 0 || d.gen != 0)
		return false;
	if (d.by == IPC_DISC_REVOKED)
		return zero_from(d.user, 0);
	if (d.by != IPC_DISC_USER || d.user[0] == '\0')
		return false;
	nul = memchr(d.user, '\0', sizeof(d.user));
	return nul != NULL && zero_from(d.user, (size_t)(nul - d.user));
}

int ipc_socketpair(int fds[2])
{
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) < 0)
		return -errno;
	return 0;
}

/* IPC_RELAYS: whole keys, one descriptor per key; every other type: at most one. */
static bool fds_valid(uint16_t type, size_t len, size_t nfds)
{
	if (type != IPC_RELAYS)
		return nfds <= 1;
	return len % sizeof(uint32_t) == 0 && len / sizeof(uint32_t) == nfds &&
	       nfds <= IPC_FDS_MAX;
}

/* Room for the SCM_RIGHTS message of a frame's descriptors (at most IPC_FDS_MAX), aligned
 * as a struct cmsghdr. */
union fds_ctl {
	struct cmsghdr align;
	char buf[CMSG_SPACE(sizeof(int) * IPC_FDS_MAX)];
};

static int send_frame(int fd, uint16_t type, const void *payload, size_t len, const int *fds,
		      size_t nfds)
{
	struct ipc_hdr hdr = { .type = type, .flags = 0, .len = (uint32_t)len };
	union fds_ctl ctl;
	struct iovec iov[2];
	struct msghdr mh;
	ssize_t n;

	if (!frame_valid(type, payload, len, nfds > 0) || !fds_valid(type, len, nfds))
		return -EINVAL;
	if (type == IPC_DISCONNECT && !disconnect_valid(payload))
		return -EINVAL;
	if (type == IPC_TCP_HANDOFF && !handoff_valid(payload))
		return -EINVAL;
	if (nfds > 0)
		hdr.flags |= IPC_F_FD;

	memset(&mh, 0, sizeof(mh));
	iov[0].iov_base = &hdr;
	iov[0].iov_len = sizeof(hdr);
	iov[1].iov_base = (void *)(uintptr_t)payload;
	iov[1].iov_len = len;
	mh.msg_iov = iov;
	mh.msg_iovlen = len > 0 ? 2 : 1;
	if (nfds > 0) {
		struct cmsghdr *cm;

		memset(&ctl, 0, CMSG_SPACE(sizeof(int) * nfds));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
	}
	do {
		n = sendmsg(fd, &mh, MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	if ((size_t)n != sizeof(hdr) + len)
		return -EIO; /* cannot happen on SOCK_SEQPACKET; refuse to pretend it worked */
	return 0;
}

int ipc_send(int fd, uint16_t type, const void *payload, size_t len, int passfd)
{
	return send_frame(fd, type, payload, len, &passfd, passfd >= 0 ? 1 : 0);
}

int ipc_send_fds(int fd, uint16_t type, const void *payload, size_t len, const int *fds,
		 size_t n)
{
	if (fds == NULL || n == 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (fds[i] < 0)
			return -EINVAL;
	return send_frame(fd, type, payload, len, fds, n);
}

/* recv_frame shuts down only a connection its sender gave up (IPC_TCP_HANDOFF, as
 * common/ipcq.h's IPCQ_SHUT_ON_DROP does for the hand-offs a queue drops). Never the other
 * frames' descriptors: a listener's socket (LISTENER_ADD) or a stored connection's copy
 * (FDSTORE) is still served by others. */
void ipc_drop_fd(int fd, bool shut)
{
	if (shut)
		(void)shutdown(fd, SHUT_RDWR);
	close(fd);
}

/* Collects every descriptor the kernel handed us: the first cap into fds, the rest
 * dropped (ipc_drop_fd). Returns how many came. */
static size_t take_fds(struct msghdr *mh, int *fds, size_t cap, bool shut)
{
	size_t count = 0;

	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm != NULL; cm = CMSG_NXTHDR(mh, cm)) {
		size_t nfd;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int f;

			memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (count < cap)
				fds[count] = f;
			else
				ipc_drop_fd(f, shut);
			count++;
		}
	}
	return count;
}

static void drop_fds(const int *fds, size_t n, bool shut)
{
	for (size_t i = 0; i < n; i++)
		ipc_drop_fd(fds[i], shut);
}

/* many: an IPC_RELAYS frame is welcome (fds has IPC_FDS_MAX places). */
static int recv_frame(int fd, struct ipc_msg *msg, int *fds, size_t *nfds, bool many)
{
	union fds_ctl ctl;
	struct iovec iov[2];
	struct msghdr mh;
	ssize_t n;
	size_t got, cap = many ? IPC_FDS_MAX : 1, len;
	bool shut; /* a hand-off's connection: shut down if dropped (ipc_drop_fd) */

	*nfds = 0;
	memset(&mh, 0, sizeof(mh));
	iov[0].iov_base = &msg->hdr;
	iov[0].iov_len = sizeof(msg->hdr);
	/* One byte more than the largest payload, so an oversized frame shows as too long. */
	iov[1].iov_base = msg->payload;
	iov[1].iov_len = sizeof(msg->payload);
	mh.msg_iov = iov;
	mh.msg_iovlen = 2;
	mh.msg_control = ctl.buf;
	mh.msg_controllen = sizeof(ctl.buf);
	do {
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	if (n == 0)
		return -EPIPE; /* a frame is never empty: 0 means the peer closed */

	shut = (size_t)n >= sizeof(msg->hdr) && msg->hdr.type == IPC_TCP_HANDOFF;
	got = take_fds(&mh, fds, cap, shut);
	if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == MSG_CTRUNC &&
	    (size_t)n >= sizeof(msg->hdr)) {
		/* Descriptors that did not fit (the kernel closed them): msg->hdr says
		 * which frame lost them. */
		drop_fds(fds, got < cap ? got : cap, shut);
		return -EMFILE;
	}
	if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || got > cap)
		goto fail;
	if ((size_t)n < sizeof(msg->hdr))
		goto fail;
	len = (size_t)n - sizeof(msg->hdr);
	if (len != msg->hdr.len || len > IPC_PAYLOAD_MAX)
		goto fail;
	if (((msg->hdr.flags & IPC_F_FD) != 0) != (got > 0))
		goto fail;
	if (!frame_valid(msg->hdr.type, msg->payload, len, got > 0) ||
	    !fds_valid(msg->hdr.type, len, got))
		goto fail;
	if (msg->hdr.type == IPC_DISCONNECT && !disconnect_valid(msg->payload))
		goto fail;
	if (msg->hdr.type == IPC_TCP_HANDOFF && !handoff_valid(msg->payload))
		goto fail;
	msg->payload[len] = '\0';
	*nfds = got;
	return 0;
fail:
	drop_fds(fds, got < cap ? got : cap, shut);
	return -EPROTO;
}

int ipc_recv(int fd, struct ipc_msg *msg, int *passfd)
{
	size_t n;
	int rc = recv_frame(fd, msg, passfd, &n, false);

	if (rc < 0 || n == 0)
		*passfd = -1;
	return rc;
}

int ipc_recv_fds(int fd, struct ipc_msg *msg, int *fds, size_t cap, size_t *n)
{
	if (cap < IPC_FDS_MAX)
		return -EINVAL;
	return recv_frame(fd, msg, fds, n, true);
}

int ipc_send_str(int fd, uint16_t type, const char *s, int passfd)
{
	if (s == NULL)
		return -EINVAL;
	return ipc_send(fd, type, s, strlen(s), passfd);
}

int ipc_send_ping(int fd, uint64_t seq)
{
	struct ipc_ping p = { .seq = seq };

	return ipc_send(fd, IPC_PING, &p, sizeof(p), -1);
}

int ipc_send_pong(int fd, uint16_t type, uint64_t seq, uint32_t slot, int32_t pid)
{
	struct ipc_pong p = { .seq = seq, .slot = slot, .pid = pid };

	if (type != IPC_PONG && type != IPC_READY)
		return -EINVAL;
	return ipc_send(fd, type, &p, sizeof(p), -1);
}

int ipc_send_drain(int fd, int on)
{
	struct ipc_drain d = { .on = on ? 1 : 0, .reserved = 0 };

	return ipc_send(fd, IPC_DRAIN, &d, sizeof(d), -1);
}

int ipc_send_stop(int fd, bool now)
{
	uint8_t b = now ? IPC_STOP_NOW : 0;

	return ipc_send(fd, IPC_STOP, &b, sizeof(b), -1);
}

int ipc_send_disconnect_index(int fd, uint32_t index, uint64_t gen)
{
	struct ipc_disconnect d;

	memset(&d, 0, sizeof(d));
	d.by = IPC_DISC_INDEX;
	d.index = index;
	d.gen = gen;
	return ipc_send(fd, IPC_DISCONNECT, &d, sizeof(d), -1);
}

int ipc_send_disconnect_user(int fd, const char *user)
{
	struct ipc_disconnect d;
	size_t n;

	if (user == NULL)
		return -EINVAL;
	n = strlen(user);
	if (n == 0 || n >= sizeof(d.user))
		return -EINVAL;
	memset(&d, 0, sizeof(d));
	d.by = IPC_DISC_USER;
	memcpy(d.user, user, n);
	return ipc_send(fd, IPC_DISCONNECT, &d, sizeof(d), -1);
}

int ipc_send_disconnect_revoked(int fd)
{
	struct ipc_disconnect d;

	memset(&d, 0, sizeof(d));
	d.by = IPC_DISC_REVOKED;
	return ipc_send(fd, IPC_DISCONNECT, &d, sizeof(d), -1);
}

const char *ipc_msg_str(const struct ipc_msg *msg)
{
	return (const char *)msg->payload;
}

int ipc_msg_get(const struct ipc_msg *msg, void *out, size_t size)
{
	if (msg->hdr.len != size)
		return -EPROTO;
	memcpy(out, msg->payload, size);
	return 0;
}

const char *ipc_type_name(uint16_t type)
{
	const struct type_rule *r = rule_of(type);

	return r != NULL && r->name != NULL ? r->name : "?";
}
