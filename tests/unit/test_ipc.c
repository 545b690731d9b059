/* Unit tests for common/ipc: frame round trips, descriptor passing and strict rejection
 * (a refused hand-off's connection shut down). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ipc.h"
#include "tests/unit/conn_fix.h"

struct pair {
	int a, b;
};

static int setup(void **state)
{
	static struct pair p;
	int fds[2];

	if (ipc_socketpair(fds) != 0)
		return -1;
	p.a = fds[0];
	p.b = fds[1];
	*state = &p;
	return 0;
}

static int teardown(void **state)
{
	struct pair *p = *state;

	close(p->a);
	close(p->b);
	return 0;
}

/* Sends a raw seqpacket record, bypassing ipc_send()'s checks, optionally with an fd. */
static void send_raw(int fd, const void *buf, size_t len, int passfd)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { .iov_base = (void *)(uintptr_t)buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (passfd >= 0) {
		struct cmsghdr *cm;

		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &passfd, sizeof(int));
	}
	assert_int_equal(sendmsg(fd, &mh, 0), (ssize_t)len);
}

static int count_open_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < 1024; fd++)
		if (fcntl(fd, F_GETFD) >= 0)
			n++;
	return n;
}

static void test_ping_pong(void **state)
{
	struct pair *p = *state;
	struct ipc_msg msg;
	struct ipc_ping ping;
	struct ipc_pong pong;
	int fd;

	assert_int_equal(ipc_send_ping(p->a, 42), 0);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), 0);
	assert_int_equal(fd, -1);
	assert_int_equal(msg.hdr.type, IPC_PING);
	assert_int_equal(ipc_msg_get(&msg, &ping, sizeof(ping)), 0);
	assert_int_equal(ping.seq, 42);

	assert_int_equal(ipc_send_pong(p->b, IPC_PONG, 42, 3, 1234), 0);
	assert_int_equal(ipc_recv(p->a, &msg, &fd), 0);
	assert_int_equal(msg.hdr.type, IPC_PONG);
	assert_int_equal(ipc_msg_get(&msg, &pong, sizeof(pong)), 0);
	assert_int_equal(pong.seq, 42);
	assert_int_equal(pong.slot, 3);
	assert_int_equal(pong.pid, 1234);
	assert_string_equal(ipc_type_name(msg.hdr.type), "PONG");
	/* Wrong size for the getter is refused. */
	assert_int_equal(ipc_msg_get(&msg, &ping, sizeof(ping)), -EPROTO);
}

/* IPC_STOP carries one byte: IPC_STOP_NOW for a stop made immediate, else 0; an empty
 * STOP (the frame before the byte) is refused both ways. */
static void test_stop(void **state)
{
	struct pair *p = *state;
	struct ipc_hdr h = { .type = IPC_STOP, .flags = 0, .len = 0 };
	struct ipc_msg msg;
	int fd;

	assert_int_equal(ipc_send_stop(p->a, true), 0);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), 0);
	assert_int_equal(fd, -1);
	assert_int_equal(msg.hdr.type, IPC_STOP);
	assert_int_equal(msg.hdr.len, 1);
	assert_int_equal(msg.payload[0], IPC_STOP_NOW);
	assert_int_equal(ipc_send_stop(p->a, false), 0);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), 0);
	assert_int_equal(msg.hdr.len, 1);
	assert_int_equal(msg.payload[0], 0);
	assert_int_equal(ipc_send(p->a, IPC_STOP, NULL, 0, -1), -EINVAL);
	send_raw(p->a, &h, sizeof(h), -1);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);
}

static void test_empty_is_eagain(void **state)
{
	struct pair *p = *state;
	struct ipc_msg msg;
	int fd;

	assert_int_equal(ipc_recv(p->b, &msg, &fd), -EAGAIN);
}

static void test_listener_add_passes_fd(void **state)
{
	struct pair *p = *state;
	struct ipc_msg msg;
	int pipefd[2], fd;
	char c = 0;

	assert_int_equal(pipe(pipefd), 0);
	assert_int_equal(ipc_send_str(p->a, IPC_LISTENER_ADD, "udp-listener", pipefd[1]), 0);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), 0);
	assert_int_equal(msg.hdr.type, IPC_LISTENER_ADD);
	assert_string_equal(ipc_msg_str(&msg), "udp-listener");
	assert_true(fd >= 0);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	/* The received descriptor is the same pipe end. */
	assert_int_equal(write(fd, "x", 1), 1);
	assert_int_equal(read(pipefd[0], &c, 1), 1);
	assert_int_equal(c, 'x');
	close(fd);
	close(pipefd[0]);
	close(pipefd[1]);
}

static void test_send_rejects_bad_frames(void **state)
{
	struct pair *p = *state;
	char big[IPC_NAME_MAX + 2];
	int pipefd[2];

	assert_int_equal(pipe(pipefd), 0);
	/* Listener add without its socket, stop with an fd, unknown types. */
	assert_int_equal(ipc_send_str(p->a, IPC_LISTENER_ADD, "x", -1), -EINVAL);
	assert_int_equal(ipc_send(p->a, IPC_STOP, "", 1, pipefd[0]), -EINVAL);
	assert_int_equal(ipc_send(p->a, 0, NULL, 0, -1), -EINVAL);
	assert_int_equal(ipc_send(p->a, IPC_TYPE_END, NULL, 0, -1), -EINVAL);
	/* Wrong fixed length, empty and overlong names, NUL inside a name. */
	assert_int_equal(ipc_send(p->a, IPC_PING, "abc", 3, -1), -EINVAL);
	assert_int_equal(ipc_send_str(p->a, IPC_LISTENER_REMOVE, "", -1), -EINVAL);
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(ipc_send_str(p->a, IPC_LISTENER_REMOVE, big, -1), -EINVAL);
	assert_int_equal(ipc_send(p->a, IPC_LOGLEVEL, "a\0b", 3, -1), -EINVAL);
	assert_int_equal(ipc_send_disconnect_user(p->a, ""), -EINVAL);
	assert_int_equal(ipc_send_pong(p->a, IPC_PING, 1, 1, 1), -EINVAL);
	close(pipefd[0]);
	close(pipefd[1]);
}

static void test_recv_rejects_unknown_and_bad_length(void **state)
{
	struct pair *p = *state;
	struct ipc_msg msg;
	struct {
		struct ipc_hdr h;
		uint8_t body[8];
	} f;
	int fd;

	memset(&f, 0, sizeof(f));
	f.h.type = 999;
	send_raw(p->a, &f, sizeof(f.h), -1);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);

	/* Header claims 8 bytes, frame has 4. */
	f.h.type = IPC_PING;
	f.h.len = 8;
	send_raw(p->a, &f, sizeof(f.h) + 4, -1);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);

	/* Shorter than a header. */
	send_raw(p->a, &f, 3, -1);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);

	/* Valid frame after the bad ones: the channel is still usable. */
	send_raw(p->a, &f, sizeof(f.h) + 8, -1);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), 0);
	assert_int_equal(msg.hdr.type, IPC_PING);
}

static void test_recv_oversized(void **state)
{
	struct pair *p = *state;
	static uint8_t buf[sizeof(struct ipc_hdr) + IPC_PAYLOAD_MAX + 64];
	struct ipc_hdr h = { .type = IPC_LOGLEVEL, .len = IPC_PAYLOAD_MAX + 64 };
	struct ipc_msg msg;
	int fd;

	memset(buf, 'a', sizeof(buf));
	memcpy(buf, &h, sizeof(h));
	send_raw(p->a, buf, sizeof(buf), -1);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);
}

/* IPC_RELAYS: IPC_FDS_MAX descriptors and their keys in one frame, only through
 * ipc_recv_fds; keys and descriptors must pair up; ipc_recv refuses such a frame and
 * closes what came. */
static void test_relays_many_fds(void **state)
{
	struct pair *p = *state;
	uint32_t keys[IPC_FDS_MAX];
	int fds[IPC_FDS_MAX], got[IPC_FDS_MAX], pipefd[2], one, before;
	struct ipc_msg msg;
	size_t n = 0;

	assert_int_equal(pipe(pipefd), 0);
	for (size_t i = 0; i < IPC_FDS_MAX; i++) {
		keys[i] = IPC_RELAY_KEY(i, i & 1);
		fds[i] = pipefd[1];
	}
	before = count_open_fds();
	assert_int_equal(ipc_send_fds(p->a, IPC_RELAYS, keys, sizeof(keys), fds, IPC_FDS_MAX), 0);
	assert_int_equal(ipc_recv_fds(p->b, &msg, got, IPC_FDS_MAX, &n), 0);
	assert_int_equal(msg.hdr.type, IPC_RELAYS);
	assert_int_equal(n, IPC_FDS_MAX);
	assert_memory_equal(msg.payload, keys, sizeof(keys));
	assert_int_equal(IPC_RELAY_IDX(keys[7]), 7);
	assert_int_equal(IPC_RELAY_WHICH(keys[7]), 1);
	for (size_t i = 0; i < n; i++) {
		assert_true(fcntl(got[i], F_GETFD) & FD_CLOEXEC);
		close(got[i]);
	}
	/* Keys and descriptors that do not pair up, more than a frame holds. */
	assert_int_equal(ipc_send_fds(p->a, IPC_RELAYS, keys, sizeof(keys), fds, 2), -EINVAL);
	assert_int_equal(ipc_send_fds(p->a, IPC_RELAYS, keys, 6, fds, 1), -EINVAL);
	assert_int_equal(ipc_send_fds(p->a, IPC_RELAYS, keys, sizeof(keys), fds, 0), -EINVAL);
	/* ipc_recv: refused, nothing left open. */
	assert_int_equal(ipc_send_fds(p->a, IPC_RELAYS, keys, 8, fds, 2), 0);
	assert_int_equal(ipc_recv(p->b, &msg, &one), -EPROTO);
	assert_int_equal(one, -1);
	assert_int_equal(count_open_fds(), before);
	close(pipefd[0]);
	close(pipefd[1]);
}

/* A descriptor over the receiver's limit (MSG_CTRUNC): -EMFILE with the frame's header,
 * nothing left open, and the channel goes on. */
static void test_fd_over_limit(void **state)
{
	struct pair *p = *state;
	struct ipc_msg msg;
	struct rlimit rl, low;
	int pipefd[2], fd, before, free_fd = 0;

	assert_int_equal(pipe(pipefd), 0);
	before = count_open_fds();
	while (fcntl(free_fd, F_GETFD) >= 0)	/* the lowest free one */
		free_fd++;
	assert_int_equal(ipc_send(p->a, IPC_STREAM, "x", 1, pipefd[0]), 0);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	low = rl;
	low.rlim_cur = (rlim_t)free_fd;	/* every one below is open: no place for another */
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	fd = 7;
	assert_int_equal(ipc_recv(p->b, &msg, &fd), -EMFILE);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	assert_int_equal(fd, -1);
	assert_int_equal(msg.hdr.type, IPC_STREAM);
	assert_int_equal(count_open_fds(), before);
	/* The next frame comes whole. */
	assert_int_equal(ipc_send(p->a, IPC_STREAM, "y", 1, pipefd[1]), 0);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), 0);
	assert_true(fd >= 0);
	close(fd);
	close(pipefd[0]);
	close(pipefd[1]);
}

static void test_unexpected_fd_is_closed(void **state)
{
	struct pair *p = *state;
	struct ipc_hdr h = { .type = IPC_OFFLOAD_OFF, .flags = IPC_F_FD, .len = 0 };
	struct ipc_msg msg;
	int pipefd[2], fd, before;

	assert_int_equal(pipe(pipefd), 0);
	before = count_open_fds();
	send_raw(p->a, &h, sizeof(h), pipefd[0]);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);
	assert_int_equal(fd, -1);
	assert_int_equal(count_open_fds(), before);

	/* Flag says an fd rides along but none came. */
	h.type = IPC_LISTENER_ADD;
	h.len = 1;
	{
		uint8_t buf[sizeof(h) + 1];

		memcpy(buf, &h, sizeof(h));
		buf[sizeof(h)] = 'x';
		send_raw(p->a, buf, sizeof(buf), -1);
	}
	assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);
	close(pipefd[0]);
	close(pipefd[1]);
}

/* Sends an IPC_TCP_HANDOFF frame of payload len bytes (h's, cut or padded with zeros)
 * with conn, bypassing ipc_send()'s checks, and gives conn up as a worker does. */
static void send_handoff_raw(int fd, const struct ipc_handoff *h, size_t len, int conn)
{
	static uint8_t buf[sizeof(struct ipc_hdr) + sizeof(struct ipc_handoff) + 8];
	struct ipc_hdr hdr = { .type = IPC_TCP_HANDOFF, .flags = IPC_F_FD, .len = (uint32_t)len };

	assert_true(len <= sizeof(buf) - sizeof(hdr));
	memset(buf, 0, sizeof(buf));
	memcpy(buf, &hdr, sizeof(hdr));
	memcpy(buf + sizeof(hdr), h, len < sizeof(*h) ? len : sizeof(*h));
	send_raw(fd, buf, sizeof(hdr) + len, conn);
	close(conn);
}

/* A malformed IPC_TCP_HANDOFF (a bad payload, a wrong length) is refused and its
 * connection, which the sender gave up, shut down before it is closed: its client sees the
 * end although the fd store's copy stays open. Another frame's unwanted descriptor is only
 * closed (a listener's socket is not ours to end). */
static void test_malformed_handoff_shut(void **state)
{
	struct pair *p = *state;
	struct ipc_handoff h;
	struct ipc_hdr other = { .type = IPC_OFFLOAD_OFF, .flags = IPC_F_FD, .len = 0 };
	struct ipc_msg msg;
	int peer[4], copy[4], s[4], fd, before;

	memset(&h, 0, sizeof(h));
	h.len = 4;
	memcpy(h.listener, "tcp", 3);
	h.client.ss_family = AF_INET;
	before = count_open_fds();
	for (int i = 0; i < 4; i++)
		s[i] = conn_with_copy(&peer[i], &copy[i]);
	/* Well formed: it comes, not shut down. */
	send_handoff_raw(p->a, &h, sizeof(h), s[0]);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), 0);
	assert_true(fd >= 0);
	close(fd);
	assert_false(peer_sees_eof(peer[0]));
	/* No listener name. */
	h.listener[0] = '\0';
	send_handoff_raw(p->a, &h, sizeof(h), s[1]);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);
	assert_int_equal(fd, -1);
	assert_true(peer_sees_eof(peer[1]));
	/* Too short. */
	memcpy(h.listener, "tcp", 3);
	send_handoff_raw(p->a, &h, sizeof(h) - 1, s[2]);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);
	assert_true(peer_sees_eof(peer[2]));
	/* A descriptor where none belongs: closed, not shut down. */
	send_raw(p->a, &other, sizeof(other), s[3]);
	close(s[3]);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);
	assert_false(peer_sees_eof(peer[3]));
	for (int i = 0; i < 4; i++) {
		close(peer[i]);
		close(copy[i]);
	}
	assert_int_equal(count_open_fds(), before);
}

static void test_disconnect(void **state)
{
	struct pair *p = *state;
	struct ipc_disconnect d;
	struct ipc_msg msg;
	int fd;

	assert_int_equal(ipc_send_disconnect_user(p->a, "1700000000:alice"), 0);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), 0);
	assert_int_equal(ipc_msg_get(&msg, &d, sizeof(d)), 0);
	assert_int_equal(d.by, IPC_DISC_USER);
	assert_string_equal(d.user, "1700000000:alice");

	/* By index, with the generation of the record the master read (whole 64 bits). */
	assert_int_equal(ipc_send_disconnect_index(p->a, 17, 0x100000005ull), 0);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), 0);
	assert_int_equal(ipc_msg_get(&msg, &d, sizeof(d)), 0);
	assert_int_equal(d.by, IPC_DISC_INDEX);
	assert_int_equal(d.index, 17);
	assert_int_equal(d.gen, 0x100000005ull);

	assert_int_equal(ipc_send_disconnect_revoked(p->a), 0);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), 0);
	assert_int_equal(ipc_msg_get(&msg, &d, sizeof(d)), 0);
	assert_int_equal(d.by, IPC_DISC_REVOKED);
	assert_int_equal(d.index, 0);
	assert_int_equal(d.gen, 0);
	assert_int_equal(d.user[0], 0);

	/* A user field without a terminating NUL is refused on receive. */
	{
		struct {
			struct ipc_hdr h;
			struct ipc_disconnect d;
		} f;

		memset(&f, 0, sizeof(f));
		f.h.type = IPC_DISCONNECT;
		f.h.len = sizeof(f.d);
		f.d.by = IPC_DISC_USER;
		memset(f.d.user, 'u', sizeof(f.d.user));
		send_raw(p->a, &f, sizeof(f), -1);
		assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);
		f.d.by = 7;
		f.d.user[0] = '\0';
		send_raw(p->a, &f, sizeof(f), -1);
		assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);
	}
	/* Fields the kind does not use must be zero (the worker's dedup of kept frames
	 * compares bytes): an index or gen on a user or revocation frame, bytes after a
	 * user's NUL, a user on an index or revocation frame are refused, on send and on
	 * receive. */
	{
		struct {
			struct ipc_hdr h;
			struct ipc_disconnect d;
		} f;
		static const struct {
			uint32_t by, index;
			uint64_t gen;
			const char *user;    /* user[0..], then "x" at user[40] when extra */
			bool extra;
		} bad[] = {
			{ IPC_DISC_USER, 3, 0, "alice", false },
			{ IPC_DISC_USER, 0, 5, "alice", false },
			{ IPC_DISC_USER, 0, 0, "alice", true },
			{ IPC_DISC_REVOKED, 1, 0, "", false },
			{ IPC_DISC_REVOKED, 0, 1, "", false },
			{ IPC_DISC_REVOKED, 0, 0, "bob", false },
			{ IPC_DISC_REVOKED, 0, 0, "", true },
			{ IPC_DISC_INDEX, 4, 2, "bob", false },
			{ IPC_DISC_INDEX, 4, 2, "", true },
		};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			memset(&f, 0, sizeof(f));
			f.h.type = IPC_DISCONNECT;
			f.h.len = sizeof(f.d);
			f.d.by = bad[i].by;
			f.d.index = bad[i].index;
			f.d.gen = bad[i].gen;
			memcpy(f.d.user, bad[i].user, strlen(bad[i].user));
			if (bad[i].extra)
				f.d.user[40] = 'x';
			assert_int_equal(ipc_send(p->a, IPC_DISCONNECT, &f.d, sizeof(f.d), -1),
					 -EINVAL);
			send_raw(p->a, &f, sizeof(f), -1);
			assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);
		}
	}
	/* The struct's last bytes (its pad, implicit padding before it had one: not
	 * checked, and two frames that differ only there were two to the dedup) must be
	 * zero too, whatever the kind. */
	{
		struct {
			struct ipc_hdr h;
			struct ipc_disconnect d;
		} f;
		static const uint32_t kinds[] = { IPC_DISC_INDEX, IPC_DISC_USER, IPC_DISC_REVOKED };

		for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
			memset(&f, 0, sizeof(f));
			f.h.type = IPC_DISCONNECT;
			f.h.len = sizeof(f.d);
			f.d.by = kinds[i];
			if (kinds[i] == IPC_DISC_USER)
				memcpy(f.d.user, "alice", 5);
			/* the frame as it is is good: sent and received */
			assert_int_equal(ipc_send(p->a, IPC_DISCONNECT, &f.d, sizeof(f.d), -1), 0);
			assert_int_equal(ipc_recv(p->b, &msg, &fd), 0);
			((uint8_t *)&f.d)[sizeof(f.d) - 1] = 1;
			assert_int_equal(ipc_send(p->a, IPC_DISCONNECT, &f.d, sizeof(f.d), -1),
					 -EINVAL);
			send_raw(p->a, &f, sizeof(f), -1);
			assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPROTO);
		}
	}
}

static void test_eof(void **state)
{
	struct pair *p = *state;
	struct ipc_msg msg;
	int fd;

	close(p->a);
	p->a = open("/dev/null", O_RDONLY);
	assert_int_equal(ipc_recv(p->b, &msg, &fd), -EPIPE);
	assert_int_equal(ipc_send_ping(p->b, 1), -EPIPE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ping_pong, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_is_eagain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_listener_add_passes_fd, setup, teardown),
		cmocka_unit_test_setup_teardown(test_send_rejects_bad_frames, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recv_rejects_unknown_and_bad_length, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_recv_oversized, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unexpected_fd_is_closed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_handoff_shut, setup, teardown),
		cmocka_unit_test_setup_teardown(test_relays_many_fds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disconnect, setup, teardown),
		cmocka_unit_test_setup_teardown(test_eof, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fd_over_limit, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
