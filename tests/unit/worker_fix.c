/* Unit-test fixture for the worker's channels (worker_fix.h). */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <cmocka.h>

#include "common/mono.h"
#include "tests/unit/worker_fix.h"
#include "worker/lifecycle.h"
#include "worker/table.h"

void worker_fix_create(const char *name, unsigned n, struct shm **shm,
		       struct worker_heritage *h, struct worker **w)
{
	struct shm_config cfg = { n, 4, 4096, 32 };

	assert_int_equal(shm_create(&cfg, name, shm), 0);
	for (unsigned s = 0; s < n; s++) {
		w[s] = calloc(1, sizeof(*w[s]));
		assert_non_null(w[s]);
		h[s] = (struct worker_heritage){ .slot = s, .slot_count = n, .shm = *shm,
						 .ctl_fd = -1, .offload = { -1, -1 } };
		w[s]->magic = WK_MAGIC;
		w[s]->h = &h[s];
		w[s]->shm = *shm;
		w[s]->slot = s;
		w[s]->ctr = shm_slot_counters(*shm, s);
		w[s]->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
		assert_non_null(w[s]->loop);
		wk_ctlq_init(w[s]); /* as worker_run does: no queue until a frame waits */
	}
}

void worker_fix_destroy(struct shm *shm, unsigned n, struct worker **w)
{
	for (unsigned s = 0; s < n; s++) {
		ev_loop_destroy(w[s]->loop);
		free(w[s]);
	}
	shm_destroy(shm);
}

uint64_t worker_fix_ctr(struct shm *shm, unsigned slot, enum shm_ctr i)
{
	struct shm_counters out;

	assert_int_equal(shm_counters_read(shm, slot, &out), 0);
	return out.v[i];
}

struct sockaddr_in worker_fix_sin4(uint32_t ip, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	a.sin_addr.s_addr = htonl(ip);
	return a;
}

int worker_fix_bound(int type, uint16_t *port)
{
	struct sockaddr_in a = worker_fix_sin4(INADDR_LOOPBACK, 0);
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

void worker_fix_adopter(struct worker *w, struct wk_listener *l)
{
	struct sockaddr_in relay = worker_fix_sin4(INADDR_LOOPBACK, 0);
	uint16_t lport;

	assert_int_equal(wk_tables_init(w), 0);
	wheel_init(&w->wheel, mono_ms());
	l->w = w;
	l->proto = WORKER_PROTO_UDP;
	l->family = AF_INET;
	l->active = l->snap_ok = true;
	l->slot = 1;
	strcpy(l->name, "udp");
	l->fd = worker_fix_bound(SOCK_DGRAM, &lport);
	memcpy(&l->relay_addr, &relay, sizeof(relay));
	l->relay_local = true;
	w->ls[0] = l;
	w->n_ls = 1;
}

void worker_fix_rec(struct shm *shm, const struct wk_listener *l, uint16_t client_port,
		    uint16_t relay_port, uint64_t expires_ns, uint32_t *idx,
		    struct shm_alloc **rec)
{
	struct sockaddr_in client = worker_fix_sin4(INADDR_LOOPBACK, client_port);
	struct sockaddr_in relay = worker_fix_sin4(INADDR_LOOPBACK, relay_port), server;
	socklen_t sl = sizeof(server);

	assert_int_equal(getsockname(l->fd, (struct sockaddr *)&server, &sl), 0);
	assert_int_equal(shm_alloc_claim(shm, 0, idx, rec), 0);
	shm_alloc_begin_write(*rec);
	(*rec)->client_transport = SHM_TRANSPORT_UDP;
	(*rec)->listener_idx = (uint16_t)l->slot;
	(*rec)->expires_ns = expires_ns;
	wk_addr_to_shm((struct sockaddr *)&client, &(*rec)->client);
	wk_addr_to_shm((struct sockaddr *)&server, &(*rec)->server);
	wk_addr_to_shm((struct sockaddr *)&relay, &(*rec)->relay);
}

void worker_fix_rec_publish(struct shm *shm, const struct wk_listener *l, uint32_t idx,
			    struct shm_alloc *rec)
{
	struct shm_counters *c = shm_slot_counters(shm, 0);

	shm_alloc_end_write(rec);
	assert_int_equal(shm_alloc_publish(shm, 0, idx), 0);
	shm_ctr_add(c, SHM_CTR_ALLOCS_CREATED, 1);
	shm_ctr_add(c, SHM_CTR_ALLOCS_ACTIVE, 1);
	shm_lctr_add(c, l->slot, SHM_LCTR_ALLOCS_ACTIVE, 1);
}
