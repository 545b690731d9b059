/* Unit tests of the DTLS forwarding channel to lingering old workers (worker/dtlslinger.c):
 * the socket beside the status file (mode 0600, gone at the stop), which client lists a
 * worker reads (only running workers' files, only well-formed lines), which datagrams it
 * forwards (a listed client on its listener, never a ClientHello), that the lingering side
 * drops what it cannot have been sent, that a full channel drops at once instead of
 * blocking, and that a gone worker's clients are no longer forwarded. Feeding a forwarded
 * datagram to a live association is the integration test's (test_upgrade_dtls.py). */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cmocka.h>

#include "shm/shm.h"
#include "tests/unit/worker_fix.h"
#include "worker/dtlslinger.h"
#include "worker/wk.h"

struct fix {
	char dir[64], state[128];
	const char *status;		/* the lingering worker's status file */
	struct shm *shm;
	struct worker_heritage h[2];
	struct worker *w[2];		/* [0] forwards, [1] lingers */
	struct wk_listener l;
};

static int fix_setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	strcpy(f->dir, "/tmp/tg-dtlslinger-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->state, sizeof(f->state), "%s/turngate.state", f->dir);
	worker_fix_create("test-dtlslinger", 2, &f->shm, f->h, f->w);
	for (unsigned s = 0; s < 2; s++) {
		f->h[s].state_path = f->state;
		f->w[s]->rx = calloc(WK_BATCH, sizeof(*f->w[s]->rx));
		assert_non_null(f->w[s]->rx);
	}
	snprintf(f->w[1]->linger_path, sizeof(f->w[1]->linger_path), "%s.linger.%d", f->state,
		 (int)getpid());
	f->status = f->w[1]->linger_path;
	f->l.slot = 7;
	*state = f;
	return 0;
}

static int fix_teardown(void **state)
{
	struct fix *f = *state;
	char path[256];

	unlink(f->status);
	snprintf(path, sizeof(path), "%s/turngate.state.linger.1", f->dir);
	unlink(path);
	for (unsigned s = 0; s < 2; s++) {
		wk_dl_free(f->w[s]);
		free(f->w[s]->rx);
	}
	assert_int_equal(rmdir(f->dir), 0);	/* nothing else left, no socket */
	worker_fix_destroy(f->shm, 2, f->w);
	free(f);
	return 0;
}

static uint64_t ctr(struct fix *f, unsigned slot, enum shm_ctr i)
{
	return worker_fix_ctr(f->shm, slot, i);
}

static void write_file(const char *path, const char *text)
{
	FILE *fp = fopen(path, "w");

	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
}

static struct sockaddr_in sin4(const char *ip, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	assert_int_equal(inet_pton(AF_INET, ip, &a.sin_addr), 1);
	return a;
}

/* The lingering side listening, with one client in its file (and lines to skip). */
static void linger_with_client(struct fix *f)
{
	char text[512];

	assert_int_equal(wk_dl_listen(f->w[1]), 0);
	assert_true(wk_dl_ready(f->w[1]));
	snprintf(text, sizeof(text),
		 "turngate-linger 1 pid=%d slot=1 sessions=1 ended_limit=0 deadline=9 done=0 "
		 "dtls=1\n"
		 "dtls 7 127.0.0.9 54000\n"
		 "dtls 7 not-an-address 54001\n"
		 "dtls 7 127.0.0.10 70000\n"
		 "tls 7 127.0.0.11 54002\n"
		 "dtls 7 ::1\n",
		 (int)getpid());
	write_file(f->status, text);
}

/* Runs the lingering worker's loop until its connections are read (bounded). */
static void drain(struct fix *f)
{
	for (int i = 0; i < 16; i++)
		ev_run(f->w[1]->loop, EVRUN_NOWAIT);
}

static const uint8_t APPDATA[] = { 23, 0xfe, 0xfd, 0, 1, 0, 0, 0, 0, 0, 5, 0, 4, 1, 2, 3, 4 };

static void test_socket_and_routes(void **state)
{
	struct fix *f = *state;
	struct sockaddr_in known = sin4("127.0.0.9", 54000), other = sin4("127.0.0.9", 54001);
	char sock[sizeof(f->w[1]->linger_path) + 8];
	struct stat st;
	uint8_t hello[80] = { 22, 0xfe, 0xff, 0, 0 };

	linger_with_client(f);
	snprintf(sock, sizeof(sock), "%s.sock", f->status);
	assert_int_equal(stat(sock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 077, 0);
	/* A finished worker's file, and one of another instance: not read. */
	snprintf(sock, sizeof(sock), "%s/turngate.state.linger.1", f->dir);
	write_file(sock, "turngate-linger 1 pid=1 slot=0 sessions=1 ended_limit=0 deadline=9 "
			 "done=1 dtls=1\ndtls 7 127.0.0.8 54000\n");
	wk_dl_load(f->w[0]);
	assert_false(wk_dl_forward(f->w[0], &f->l, (struct sockaddr *)&other, APPDATA,
				   sizeof(APPDATA)));
	known.sin_addr.s_addr = htonl(0x7f000008);
	assert_false(wk_dl_forward(f->w[0], &f->l, (struct sockaddr *)&known, APPDATA,
				   sizeof(APPDATA)));
	known = sin4("127.0.0.9", 54000);
	/* A ClientHello from a listed client is a new client: this worker's. */
	hello[13] = 1;
	assert_false(wk_dl_forward(f->w[0], &f->l, (struct sockaddr *)&known, hello,
				   sizeof(hello)));
	/* Another listener's slot: not the listed client's. */
	f->l.slot = 8;
	assert_false(wk_dl_forward(f->w[0], &f->l, (struct sockaddr *)&known, APPDATA,
				   sizeof(APPDATA)));
	f->l.slot = 7;
	assert_true(wk_dl_forward(f->w[0], &f->l, (struct sockaddr *)&known, APPDATA,
				  sizeof(APPDATA)));
	/* The lingering worker has no listener of slot 7 here: dropped, counted. */
	drain(f);
	assert_int_equal(ctr(f, 1, SHM_CTR_ERR_MALFORMED), 1);
	/* Loaded once: a second call reads nothing again. */
	wk_dl_load(f->w[0]);
	assert_true(wk_dl_forward(f->w[0], &f->l, (struct sockaddr *)&known, APPDATA,
				  sizeof(APPDATA)));
	drain(f);
	assert_int_equal(ctr(f, 1, SHM_CTR_ERR_MALFORMED), 2);
	/* It stops: the path goes, and its clients are anyone's. */
	wk_dl_stop(f->w[1]);
	snprintf(sock, sizeof(sock), "%s.sock", f->status);
	assert_int_equal(stat(sock, &st), -1);
	assert_false(wk_dl_forward(f->w[0], &f->l, (struct sockaddr *)&known, APPDATA,
				   sizeof(APPDATA)));
	assert_false(wk_dl_forward(f->w[0], &f->l, (struct sockaddr *)&known, APPDATA,
				   sizeof(APPDATA)));
	assert_int_equal(ctr(f, 0, SHM_CTR_ERR_SEND), 0);
}

/* What a forwarder never writes: empty of a header, a short one, another magic, an
 * address of no family, a payload past WK_DGRAM_MAX - 4. Each dropped and counted; the
 * channel still carries the next good message. */
static void test_bad_input(void **state)
{
	struct fix *f = *state;
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct sockaddr_in known = sin4("127.0.0.9", 54000);
	size_t big = WK_DGRAM_MAX - 4 + 1 + 64;
	uint8_t *buf = calloc(1, big);
	uint32_t magic = WK_DL_MAGIC;
	int fd;

	assert_non_null(buf);
	linger_with_client(f);
	assert_true(strlen(f->status) + 5 < sizeof(sun.sun_path));
	memcpy(sun.sun_path, f->status, strlen(f->status));
	memcpy(sun.sun_path + strlen(f->status), ".sock", 5);
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	assert_int_equal(send(fd, "x", 1, 0), 1);			/* short */
	memset(buf, 0x5a, 64);
	assert_int_equal(send(fd, buf, 64, 0), 64);			/* another magic */
	memset(buf, 0, 64);
	memcpy(buf, &magic, sizeof(magic));
	assert_int_equal(send(fd, buf, 64, 0), 64);			/* no family */
	buf[8 + 16 + 2] = AF_INET;
	assert_int_equal(send(fd, buf, big, 0), (ssize_t)big);	/* too long */
	drain(f);
	assert_int_equal(ctr(f, 1, SHM_CTR_ERR_MALFORMED), 4);
	wk_dl_load(f->w[0]);
	assert_true(wk_dl_forward(f->w[0], &f->l, (struct sockaddr *)&known, APPDATA,
				  sizeof(APPDATA)));
	drain(f);
	assert_int_equal(ctr(f, 1, SHM_CTR_ERR_MALFORMED), 5);	/* no listener 7 here */
	close(fd);
	free(buf);
}

/* A lingering worker that does not read: the forwarder's sends fail at once, each counted
 * as a send error and reported as handled (the datagram is dropped, not processed here);
 * once it reads, forwarding goes on. */
static void test_full_channel(void **state)
{
	struct fix *f = *state;
	struct sockaddr_in known = sin4("127.0.0.9", 54000);
	uint8_t data[1000] = { 23, 0xfe, 0xfd };
	unsigned n;

	linger_with_client(f);
	wk_dl_load(f->w[0]);
	drain(f);	/* no connection yet */
	for (n = 0; n < 100000 && ctr(f, 0, SHM_CTR_ERR_SEND) == 0; n++)
		assert_true(wk_dl_forward(f->w[0], &f->l, (struct sockaddr *)&known, data,
					  sizeof(data)));
	assert_int_equal(ctr(f, 0, SHM_CTR_ERR_SEND), 1);
	assert_true(n > 10);	/* more than net.unix.max_dgram_qlen's default */
	for (int i = 0; i < 100000 && ctr(f, 1, SHM_CTR_ERR_MALFORMED) < n - 1; i++)
		ev_run(f->w[1]->loop, EVRUN_NOWAIT);
	assert_int_equal(ctr(f, 1, SHM_CTR_ERR_MALFORMED), n - 1);
	assert_true(wk_dl_forward(f->w[0], &f->l, (struct sockaddr *)&known, data, sizeof(data)));
	assert_int_equal(ctr(f, 0, SHM_CTR_ERR_SEND), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_socket_and_routes, fix_setup, fix_teardown),
		cmocka_unit_test_setup_teardown(test_bad_input, fix_setup, fix_teardown),
		cmocka_unit_test_setup_teardown(test_full_channel, fix_setup, fix_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
