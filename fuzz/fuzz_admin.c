/* libFuzzer target: the admin socket protocol (JSON request lines → dispatcher → reply lines). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "common/ipc.h"
#include "common/log.h"
#include "conf/conf.h"
#include "master/admin.h"
#include "master/master.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"

/*
 * What it drives: exactly what master/admin.c does with bytes read from a client, without
 * the socket: the input is cut into lines at '\n' (a trailing '\r' dropped, empty lines
 * skipped, lines over ADMIN_LINE_MAX refused as admin.c does), each line goes through
 * admin_dispatch() and the reply is serialised as admin.c sends it.
 *
 * Against what: a master with the embedded default config, a real shared-memory segment
 * holding a few live allocations (so `allocations` and `disconnect` walk real records) and
 * one worker slot whose control channel is a socketpair (so `disconnect` really sends), all
 * built once on the first input. libFuzzer has no per-run constructor we could share with
 * the corpus replay driver, hence one lazily built process-wide fixture.
 *
 * Invariants checked (abort on violation): every reply is a JSON object with a boolean
 * "ok"; a failure carries a string "error"; the serialised reply is one line.
 */

#define FUZZ_ALLOCS 3

struct fuzz_admin {
	struct master m;
	struct mworker w;
	int peer_fd;            /* the "worker" end of slot 0's control channel */
};

static struct fuzz_admin *fixture;

static void add_alloc(struct shm *shm, unsigned i)
{
	static const char *const users[FUZZ_ALLOCS] = { "1700000000:alice", "bob", "1:alice" };
	struct shm_alloc *r;
	uint32_t idx;

	if (shm_alloc_claim(shm, 0, &idx, &r) < 0)
		abort();
	shm_alloc_begin_write(r);
	r->client_transport = SHM_TRANSPORT_UDP;
	r->client.family = 4;
	r->client.addr[0] = 127, r->client.addr[3] = 1, r->client.port = (uint16_t)(40000 + i);
	r->relay = r->client;
	r->relay.port = (uint16_t)(50000 + i);
	r->user_len = (uint16_t)strlen(users[i]);
	memcpy(r->username, users[i], r->user_len);
	r->realm_len = 4;
	memcpy(r->realm, "test", 4);
	r->perms[0].family = 4;
	r->perms[0].addr[0] = 10;
	r->chans[0].number = 0x4000;
	r->chans[0].peer = r->client;
	r->expires_ns = UINT64_MAX / 2;
	shm_alloc_end_write(r);
	if (shm_alloc_publish(shm, 0, idx) < 0)
		abort();
}

static struct fuzz_admin *fixture_get(void)
{
	struct shm_config sc = {
		.n_slots = 1, .snap_count = 4, .snap_size = 1u << 20, .alloc_cap = 16
	};
	struct fuzz_admin *f;
	int fds[2];

	if (fixture != NULL)
		return fixture;
	f = calloc(1, sizeof(*f));
	if (f == NULL || ipc_socketpair(fds) < 0)
		abort();
	/* Quiet: loglevel requests may raise it, each run lowers it again. */
	log_set_spec("all:DISABLE");
	f->m.magic = MASTER_MAGIC;
	f->m.loop = ev_default_loop(0);
	f->m.n_slots = 1;
	f->m.workers = &f->w;
	f->w.m = &f->m;
	f->w.ctl_fd = fds[0];
	f->w.last_status = -1;
	f->peer_fd = fds[1];
	handoffq_init(&f->m); /* as supervise_init does: no queue until a frame waits */
	if (conf_load_default(NULL, &f->m.cfg) < 0 ||
	    shm_create(&sc, "fuzz-admin", &f->m.shm) < 0 || reload_publish(&f->m) < 0)
		abort();
	for (unsigned i = 0; i < FUZZ_ALLOCS; i++)
		add_alloc(f->m.shm, i);
	fixture = f;
	return f;
}

/* As root: every command's own checks are reached. */
static const struct admin_peer fuzz_root_peer = { .pid = 1, .uid = 0, .gid = 0 };

static void check_reply(json_t *r)
{
	json_t *ok = json_object_get(r, "ok");
	char *s;

	if (r == NULL || !json_is_object(r) || !json_is_boolean(ok))
		abort();
	if (json_is_false(ok) && !json_is_string(json_object_get(r, "error")))
		abort();
	s = json_dumps(r, JSON_COMPACT);
	if (s == NULL || strchr(s, '\n') != NULL)
		abort();
	free(s);
}

/* State a request may leave behind that would make runs depend on their order. */
static void reset(struct fuzz_admin *f)
{
	uint8_t buf[IPC_PAYLOAD_MAX + 64];

	while (read(f->peer_fd, buf, sizeof(buf)) > 0)
		;
	f->m.draining = false;
	if (f->m.log_override != NULL) {
		free(f->m.log_override);
		f->m.log_override = NULL;
	}
	log_set_spec("all:DISABLE");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_admin *f = fixture_get();
	const char *p = (const char *)data, *end = p + size;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = (size_t)((nl != NULL ? nl : end) - p);
		json_t *r;

		if (len > 0 && p[len - 1] == '\r')
			len--;
		if (len > 0 && len <= ADMIN_LINE_MAX) {
			r = admin_dispatch(&f->m, &fuzz_root_peer, p, len);
			check_reply(r);
			json_decref(r);
		}
		p = nl != NULL ? nl + 1 : end;
	}
	reset(f);
	return 0;
}
