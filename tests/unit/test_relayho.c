/* Unit tests of the relay sockets a live upgrade hands over (worker/relayho.c), as a new
 * worker's adoption takes them (worker/adopt.c, worker/table.c): each is taken unchecked
 * with its allocation, and the pass after the adoption (or its first failed receive)
 * checks that it is the UDP socket bound to its record's family and port. A wrong one
 * (a TCP socket, a UDP socket of another port) ends its allocation there, as a refused
 * socket ended its adoption before; the right one stays, the very descriptor sent. The
 * whole upgrade through the daemon is the integration tests' (test_upgrade_relays.py).
 * Also an RFC 6062 allocation's listening relay socket that was not handed over: bound
 * again beside the listener an older process may still hold on its port, while a new
 * allocation skips a port where another socket listens (worker/table.c). */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <netinet/in.h>

#include "common/ipc.h"
#include "common/mono.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "tests/unit/worker_fix.h"
#include "worker/lifecycle.h"
#include "worker/portpool.h"
#include "worker/relay.h"
#include "worker/table.h"
#include "worker/wk.h"

#define N 3u			/* records: [0] right socket, [1] TCP one, [2] another port's */

struct fix {
	struct shm *shm;
	struct worker_heritage h;
	struct worker *w;
	struct wk_listener l;
	int chan[2];		/* the relay channel: [0] the worker reads, [1] we write */
	int fds[N];		/* what we hand over for each record */
	int spare;		/* the socket bound to record 2's port (not handed over) */
	uint16_t port[N];
	uint32_t idx[N];
};

/* A LIVE UDP record of slot 0 for a client on the listener, relayed at 127.0.0.1:port. */
static uint32_t mk_rec(struct fix *f, unsigned i, uint16_t port)
{
	struct shm_alloc *rec;
	uint32_t idx;

	worker_fix_rec(f->shm, &f->l, (uint16_t)(40000 + i), port, mono_ns() + 600000000000ull,
		       &idx, &rec);
	worker_fix_rec_publish(f->shm, &f->l, idx, rec);
	return idx;
}

static int fix_setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	uint16_t other;
	uint32_t keys[N];

	assert_non_null(f);
	worker_fix_create("test-relayho", 1, &f->shm, &f->h, &f->w);
	worker_fix_adopter(f->w, &f->l);
	f->fds[0] = worker_fix_bound(SOCK_DGRAM, &f->port[0]);	/* the right one */
	f->fds[1] = worker_fix_bound(SOCK_STREAM, &f->port[1]);	/* a TCP one on "its" port */
	f->spare = worker_fix_bound(SOCK_DGRAM, &f->port[2]);
	f->fds[2] = worker_fix_bound(SOCK_DGRAM, &other);	/* UDP, but another port */
	for (unsigned i = 0; i < N; i++) {
		f->idx[i] = mk_rec(f, i, f->port[i]);
		keys[i] = IPC_RELAY_KEY(f->idx[i], 0);
	}
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
				    f->chan), 0);
	assert_int_equal(ipc_send_fds(f->chan[1], IPC_RELAYS, keys, sizeof(keys), f->fds, N), 0);
	close(f->chan[1]);	/* every writer gone: the worker reads to the end */
	f->h.relay_chan = true;
	f->h.relay_rx = f->chan[0];
	*state = f;
	return 0;
}

static int fix_teardown(void **state)
{
	struct fix *f = *state;
	struct wk_alloc *a;

	while ((a = LIST_FIRST(&f->w->allocs)) != NULL)
		wk_alloc_forget(f->w, a);
	if (ev_is_active(&f->w->tune))
		ev_idle_stop(f->w->loop, &f->w->tune);
	wk_tables_free(f->w);
	for (unsigned i = 0; i < N; i++)
		close(f->fds[i]);	/* ours: the worker took duplicates */
	close(f->spare);
	close(f->l.fd);
	worker_fix_destroy(f->shm, 1, &f->w);
	free(f);
	return 0;
}

/* Whether descriptor fd is the same open socket as ours (the worker's is a duplicate). */
static bool same_socket(int fd, int ours)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && fstat(ours, &b) == 0 && a.st_ino == b.st_ino &&
	       a.st_dev == b.st_dev;
}

/* The adoption takes all three unchecked: every allocation relays at once on the
 * descriptor sent for it. */
static void adopt_all(struct fix *f)
{
	wk_adopt_run(f->w);
	for (unsigned i = 0; i < N; i++) {
		struct wk_alloc *a = f->w->by_idx[f->idx[i]];

		assert_non_null(a);
		assert_true(same_socket(a->relay[0].fd, f->fds[i]));
		assert_true(a->relay[0].unchecked);
		assert_true(ev_is_active(&a->relay[0].io));
	}
	assert_int_equal(worker_fix_ctr(f->shm, 0, SHM_CTR_ALLOCS_ADOPTED), N);
	assert_true(ev_is_active(&f->w->tune));
}

/* The right socket stays, checked; the two wrong ones ended their allocations. */
static void check_refused(struct fix *f)
{
	struct wk_alloc *a = f->w->by_idx[f->idx[0]];

	assert_non_null(a);
	assert_false(a->relay[0].unchecked);
	assert_true(same_socket(a->relay[0].fd, f->fds[0]));
	assert_null(f->w->by_idx[f->idx[1]]);
	assert_null(f->w->by_idx[f->idx[2]]);
	assert_int_equal(f->w->n_allocs, 1);
	assert_int_equal(shm_alloc_get(f->shm, 0, f->idx[1], NULL), -EPERM);	/* released */
	assert_int_equal(shm_alloc_get(f->shm, 0, f->idx[2], NULL), -EPERM);
	assert_int_equal(worker_fix_ctr(f->shm, 0, SHM_CTR_ALLOCS_DROPPED), 2);
	assert_int_equal(worker_fix_ctr(f->shm, 0, SHM_CTR_ALLOCS_ACTIVE), 1);
}

/* The pass after the adoption (the idle watcher) checks and refuses. It comes only
 * because the TCP socket, ready at every iteration (a closed one polls as hung up), is
 * refused at its first failed receive: without that the loop never idles. */
static void test_deferred_check_refuses(void **state)
{
	struct fix *f = *state;

	adopt_all(f);
	for (int i = 0; i < 16 && ev_is_active(&f->w->tune); i++)	/* bounded */
		ev_run(f->w->loop, EVRUN_NOWAIT);
	assert_false(ev_is_active(&f->w->tune));
	check_refused(f);
}

/* A receive that fails on an unchecked socket (a TCP socket never connected: ENOTCONN)
 * checks it at once: the pass may never come while such a descriptor stays ready. */
static void test_failed_receive_checks(void **state)
{
	struct fix *f = *state;
	struct wk_alloc *a;

	adopt_all(f);
	a = f->w->by_idx[f->idx[1]];
	wk_relay_cb(f->w->loop, &a->relay[0].io, EV_READ);
	assert_null(f->w->by_idx[f->idx[1]]);
	assert_int_equal(worker_fix_ctr(f->shm, 0, SHM_CTR_ALLOCS_DROPPED), 1);
	/* the right one is left unchecked by a receive with nothing to read (EAGAIN) */
	a = f->w->by_idx[f->idx[0]];
	wk_relay_cb(f->w->loop, &a->relay[0].io, EV_READ);
	assert_true(a->relay[0].unchecked);
	for (int i = 0; i < 16 && ev_is_active(&f->w->tune); i++)	/* bounded */
		ev_run(f->w->loop, EVRUN_NOWAIT);
	check_refused(f);
}

/* A TCP socket listening on 127.0.0.1, an ephemeral port (*port), with SO_REUSEADDR and
 * SO_REUSEPORT: another program's (or a relay listener of an older build's), which a
 * listening socket that also set SO_REUSEPORT would share the port with. */
static int tcp_listener(uint16_t *port)
{
	struct sockaddr_in a = worker_fix_sin4(INADDR_LOOPBACK, 0);
	socklen_t al = sizeof(a);
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	assert_int_equal(listen(fd, 1), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* With another socket listening on the only port of the range, a new TCP allocation gets
 * no port (508; SO_REUSEPORT would have let it share the port and its peers' SYNs), and
 * the record that the port is announced for does not bind it beside that socket either
 * (an adoption: park.c, when its listening socket did not come with its connection): it
 * gets -EBUSY and waits for the port (w->adopt_wait), as beside a killed predecessor's. */
static void test_tcp_relay_port_never_shared(void **state)
{
	struct shm *shm;
	struct worker_heritage h;
	struct worker *w;
	struct wk_listener l;
	struct shm_alloc *rec;
	struct wk_alloc *a;
	uint16_t port;
	uint32_t idx;
	int other;

	(void)state;
	memset(&l, 0, sizeof(l));
	worker_fix_create("test-relayho-tcp", 1, &shm, &h, &w);
	worker_fix_adopter(w, &l);
	other = tcp_listener(&port);
	assert_int_equal(portpool_init(&l.pool, port, port, 0, 1), 0);
	worker_fix_rec(shm, &l, 40000, port, mono_ns() + 600000000000ull, &idx, &rec);
	worker_fix_rec_publish(shm, &l, idx, rec);
	assert_int_equal(wk_alloc_attach(w, &l, idx, rec, &a), 0);
	a->tcp = true;

	assert_int_equal(wk_alloc_bind_relay(w, a, AF_INET, 0, false, NULL), -EADDRNOTAVAIL);
	assert_true(a->relay[0].fd < 0);
	assert_int_equal(worker_fix_ctr(shm, 0, SHM_CTR_ERR_RELAY_BIND), 1);

	assert_int_equal(wk_alloc_rebind_relay(w, a, &rec->relay, -1), -EBUSY);
	assert_true(a->relay[0].fd < 0);

	wk_alloc_forget(w, a);
	wk_tables_free(w);
	close(other);
	close(l.fd);
	worker_fix_destroy(shm, 1, &w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_deferred_check_refuses, fix_setup,
						fix_teardown),
		cmocka_unit_test_setup_teardown(test_failed_receive_checks, fix_setup,
						fix_teardown),
		cmocka_unit_test(test_tcp_relay_port_never_shared),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
