/* Unit tests for common/park: a parked connection's state across a control channel (one
 * frame and many, with its socket), reassembly bounds, and the checks a receiver relies
 * on before it trusts a field. */
#include <errno.h>
#include <pthread.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ipc.h"
#include "common/park.h"

/* A TCONN blob with in_len and out_len bytes of a pattern. */
static uint8_t *mk_blob(size_t in_len, size_t out_len, size_t *len)
{
	struct park_hdr h;
	struct sockaddr_in *sin = (struct sockaddr_in *)&h.peer;
	uint8_t *b;

	memset(&h, 0, sizeof(h));
	h.magic = PARK_MAGIC;
	h.version = PARK_VERSION;
	h.kind = PARK_TCONN;
	h.slot = 1;
	h.rec_idx = 42;
	sin->sin_family = AF_INET;
	sin->sin_port = htons(5000);
	h.peer_len = sizeof(*sin);
	strcpy(h.listener, "tcp");
	h.in_len = (uint32_t)in_len;
	h.out_len = (uint32_t)out_len;
	*len = sizeof(h) + in_len + out_len;
	b = malloc(*len);
	assert_non_null(b);
	memcpy(b, &h, sizeof(h));
	for (size_t i = sizeof(h); i < *len; i++)
		b[i] = (uint8_t)(i * 7);
	return b;
}

struct sender {
	int fd, sock, rc;
	const uint8_t *blob;
	size_t len;
};

static void *send_main(void *arg)
{
	struct sender *s = arg;

	s->rc = park_send(s->fd, s->blob, s->len, s->sock, 5000);
	return NULL;
}

/* Sends blob over a fresh non-blocking pair with a socket (from a thread: the channel
 * holds less than the blob), receives and reassembles it. */
static void round_trip(size_t in_len, size_t out_len)
{
	struct sender snd;
	pthread_t t;
	int ch[2], sock[2], got = -1, fd;
	size_t len, rlen;
	uint8_t *blob = mk_blob(in_len, out_len, &len), *back;
	struct ipc_msg *msg = malloc(sizeof(*msg));
	struct park_asm a = { 0 };
	struct park_hdr h;
	struct stat st1, st2;
	int rc = 0, frames = 0;

	assert_non_null(msg);
	assert_int_equal(ipc_socketpair(ch), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sock), 0);
	snd = (struct sender){ ch[0], sock[0], -1, blob, len };
	assert_int_equal(pthread_create(&t, NULL, send_main, &snd), 0);
	while (rc == 0) {
		int r = ipc_recv(ch[1], msg, &fd);

		if (r == -EAGAIN) {
			usleep(1000);
			continue;
		}
		assert_int_equal(r, 0);
		frames++;
		rc = park_asm_add(&a, msg);
		if (fd >= 0)
			got = fd;
	}
	assert_int_equal(rc, 1);
	pthread_join(t, NULL);
	assert_int_equal(snd.rc, 0);
	assert_int_equal(frames, (int)((len + IPC_PAYLOAD_MAX - 1) / IPC_PAYLOAD_MAX));
	back = park_asm_take(&a, &rlen);
	assert_int_equal(rlen, len);
	assert_memory_equal(back, blob, len);
	assert_int_equal(park_check(back, rlen, &h), 0);
	assert_int_equal(h.rec_idx, 42);
	assert_int_equal(h.in_len, in_len);
	/* The same socket, not a copy of its data. */
	assert_true(got >= 0);
	assert_int_equal(fstat(got, &st1), 0);
	assert_int_equal(fstat(sock[0], &st2), 0);
	assert_int_equal(st1.st_ino, st2.st_ino);
	close(got);
	free(back);
	free(blob);
	free(msg);
	park_asm_free(&a);
	close(sock[0]);
	close(sock[1]);
	close(ch[0]);
	close(ch[1]);
}

static void test_one_frame(void **state)
{
	(void)state;
	round_trip(10, 0);
}

static void test_many_frames(void **state)
{
	(void)state;
	/* A full input buffer and a large output buffer: 80 pieces. */
	round_trip(65544, 262144);
}

static void test_bounds(void **state)
{
	struct park_asm a = { 0 };
	struct ipc_msg *msg = calloc(1, sizeof(*msg));
	size_t len;
	uint8_t *big = mk_blob(PARK_BLOB_MAX, 0, &len);
	int ch[2];

	(void)state;
	assert_non_null(msg);
	assert_int_equal(ipc_socketpair(ch), 0);
	assert_int_equal(park_send(ch[0], big, len, 0, 100), -EMSGSIZE);
	assert_int_equal(park_send(ch[0], big, 100, -1, 100), -EBADF);
	/* Pieces past PARK_BLOB_MAX: refused, the assembly emptied. */
	msg->hdr.type = IPC_STREAM_PART;
	msg->hdr.len = IPC_PAYLOAD_MAX;
	for (size_t n = 0; n + IPC_PAYLOAD_MAX <= PARK_BLOB_MAX; n += IPC_PAYLOAD_MAX)
		assert_int_equal(park_asm_add(&a, msg), 0);
	assert_int_equal(park_asm_add(&a, msg), -EMSGSIZE);
	assert_int_equal(a.len, 0);
	assert_null(a.buf);
	/* A full channel that nobody reads: the send gives up in time. */
	{
		uint8_t *b = mk_blob(300000, 0, &len);
		int sock[2];

		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sock), 0);
		assert_int_equal(park_send(ch[0], b, len, sock[0], 200), -ETIMEDOUT);
		close(sock[0]);
		close(sock[1]);
		free(b);
	}
	free(big);
	free(msg);
	close(ch[0]);
	close(ch[1]);
}

static void test_check(void **state)
{
	size_t len;
	uint8_t *b = mk_blob(8, 8, &len);
	struct park_hdr h, bad;

	(void)state;
	memcpy(&h, b, sizeof(h));
	assert_int_equal(park_check(b, len, NULL), 0);
	assert_int_equal(park_check(NULL, len, NULL), -EBADMSG);
	assert_int_equal(park_check(b, sizeof(h) - 1, NULL), -EBADMSG);
	assert_int_equal(park_check(b, len - 1, NULL), -EBADMSG);	/* lengths */
#define BAD(stmt)                                                                 \
	do {                                                                      \
		bad = h;                                                          \
		stmt;                                                             \
		memcpy(b, &bad, sizeof(bad));                                     \
		assert_int_equal(park_check(b, len, NULL), -EBADMSG);             \
	} while (0)
	BAD(bad.magic ^= 1);
	BAD(bad.version++);
	BAD(bad.kind = 0);
	BAD(bad.kind = PARK_URELAY + 1);
	BAD(memset(bad.listener, 'x', sizeof(bad.listener)));	/* no NUL */
	BAD(bad.listener[0] = '\0');				/* a TCONN names one */
	BAD(bad.peer.ss_family = AF_UNIX);
	BAD(bad.peer_len = sizeof(bad.peer) + 1);
	BAD(bad.in_len = UINT32_MAX);
	BAD((bad.kind = PARK_TPEER, bad.rec_idx = PARK_NO_REC));	/* no allocation */
	BAD((bad.kind = PARK_URELAY, bad.rec_idx = PARK_NO_REC));
	BAD((bad.kind = PARK_URELAY, bad.id = 2));	/* a relay socket is 0 or 1 */
#undef BAD
	/* A TDATA needs no peer address, a TRELAY neither. */
	bad = h;
	bad.kind = PARK_TDATA;
	bad.peer.ss_family = 0;
	memcpy(b, &bad, sizeof(bad));
	assert_int_equal(park_check(b, len, NULL), 0);
	/* A URELAY: the second of an allocation's two relay sockets, no peer. */
	bad.kind = PARK_URELAY;
	bad.id = 1;
	memcpy(b, &bad, sizeof(bad));
	assert_int_equal(park_check(b, len, NULL), 0);
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_frame),
		cmocka_unit_test(test_many_frames),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_check),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
