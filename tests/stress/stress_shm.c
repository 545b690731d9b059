/* Multi-process stress test of shm/: a master publishes snapshots as fast as it can while
 * reader processes verify every snapshot they use and churn allocation records; readers
 * are SIGKILLed at random and respawned. --broken reclaims without waiting for grace
 * periods, which the same checker must catch.
 *
 * Exit status: 0 no violation, 1 violations found, 2 usage/setup error, 3 a run that
 * proves nothing (no reads, no kills) or a stalled reclamation. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <urcu/arch.h>
#include <urcu/system.h>
#include <urcu/uatomic.h>

#include "shm/shm.h"
#include "shm/shm_alloc.h"

#define MAX_READERS 32
#define MAX_OWNED 16
#define STALL_LIMIT_NS (10ull * 1000000000ull)
#define BROKEN_ENOUGH 100	/* --broken stops early after this many violations */

struct opts {
	unsigned readers;
	unsigned seconds;
	unsigned snap_size;
	unsigned kill_ms;
	unsigned seed;
	bool broken;
};

/* Per-slot results, in a separate shared mapping; single writer per slot. */
struct stats {
	uint64_t reads[MAX_READERS];
	uint64_t violations[MAX_READERS];
	uint64_t alloc_ops[MAX_READERS];
	uint64_t adopted[MAX_READERS];
	uint64_t torn_dropped[MAX_READERS];
	char first_violation[MAX_READERS][96];
	uint64_t tool_copies, tool_retries, tool_records, tool_violations;
	char tool_first_violation[96];
};

struct master {
	struct opts o;
	struct shm *shm;
	struct stats *st;
	pid_t pids[MAX_READERS];
	pid_t tool;
	uint8_t *blob;
	uint64_t gen, published, busy, freed, kills, respawns, released;
	uint64_t master_violations, copies_checked;
	unsigned max_pending;
	uint64_t rng;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static uint64_t word_for(uint64_t gen, size_t i)
{
	return (gen * UINT64_C(0x9e3779b97f4a7c15)) ^ (i * UINT64_C(0xbf58476d1ce4e5b9)) ^ i;
}

static size_t len_for(uint64_t gen, unsigned snap_size)
{
	size_t words = snap_size / 8;

	return 8 * (1 + (size_t)(gen * 7919 % words));
}

static void blob_build(uint8_t *buf, uint64_t gen, unsigned snap_size)
{
	uint64_t *w = (uint64_t *)buf;
	size_t n = len_for(gen, snap_size) / 8;

	for (size_t i = 0; i < n; i++)
		w[i] = word_for(gen, i);
}

/* The checker: the blob must be exactly what the master built for `gen`. A freed slot
 * is poisoned and a reused slot holds another generation, so both fail here. */
static bool blob_ok(const void *blob, size_t len, uint64_t gen, unsigned snap_size)
{
	const uint64_t *w = blob;

	if (len != len_for(gen, snap_size))
		return false;
	for (size_t i = 0; i < len / 8; i++)
		if (CMM_LOAD_SHARED(w[i]) != word_for(gen, i))
			return false;
	return true;
}

static void violation(struct stats *st, unsigned slot, const char *what, uint64_t gen)
{
	if (st->violations[slot] == 0)
		snprintf(st->first_violation[slot], sizeof(st->first_violation[slot]),
			 "%s (gen %" PRIu64 ")", what, gen);
	CMM_STORE_SHARED(st->violations[slot], st->violations[slot] + 1);
}

/* ---- reader process ---- */

/* Crash points: die by SIGKILL inside a critical window now and then, so adoption and
 * torn-record detection are exercised on every run, not only when a random kill from
 * the master happens to land there. */
static void crashpoint(uint64_t x)
{
	if ((x >> 40) % 97 == 0)
		raise(SIGKILL);
}

static void rec_fill(struct shm_alloc *r, uint64_t x)
{
	shm_alloc_begin_write(r);
	r->cred_expiry = (int64_t)x;
	crashpoint(x);	/* seq odd, fields half written */
	memset(r->username, (int)(x & 0xff), sizeof(r->username));
	r->user_len = sizeof(r->username);
	r->perms[SHM_ALLOC_MAX_PERMS - 1].expires_ns = x;
	r->reservation = ~x;
	shm_alloc_end_write(r);
}

static bool rec_consistent(const struct shm_alloc *r)
{
	uint64_t x = (uint64_t)r->cred_expiry;

	return r->reservation == ~x && r->perms[SHM_ALLOC_MAX_PERMS - 1].expires_ns == x &&
	       (uint8_t)r->username[0] == (uint8_t)(x & 0xff) &&
	       (uint8_t)r->username[127] == (uint8_t)(x & 0xff);
}

struct reader {
	struct shm *shm;
	struct stats *st;
	unsigned slot, snap_size;
	uint32_t owned[MAX_OWNED];
	unsigned n_owned;
	uint64_t rng;
};

/* What a replacement worker does: drop torn records, keep and check the others. */
static void reader_adopt(struct reader *rd)
{
	uint32_t cursor = 0, idx;

	while (shm_alloc_next_owned(rd->shm, rd->slot, &cursor, &idx) == 0) {
		struct shm_alloc *r;
		bool torn;

		shm_alloc_is_torn(rd->shm, idx, &torn, NULL);
		if (torn || rd->n_owned == MAX_OWNED) {
			shm_alloc_release(rd->shm, rd->slot, idx);
			rd->st->torn_dropped[rd->slot] += torn;
			continue;
		}
		if (shm_alloc_get(rd->shm, rd->slot, idx, &r) != 0)
			violation(rd->st, rd->slot, "adopted record not owned", 0);
		else if (!rec_consistent(r))
			violation(rd->st, rd->slot, "adopted record inconsistent", r->gen);
		rd->owned[rd->n_owned++] = idx;
		rd->st->adopted[rd->slot]++;
	}
}

static void reader_alloc_op(struct reader *rd)
{
	uint64_t x = rnd(&rd->rng);
	struct shm_alloc *r;
	uint32_t idx;

	if (rd->n_owned < MAX_OWNED && (x & 3) == 0) {
		if (shm_alloc_claim(rd->shm, rd->slot, &idx, &r) == 0) {
			crashpoint(x >> 3);	/* CLAIMED, never published */
			rec_fill(r, x);
			shm_alloc_publish(rd->shm, rd->slot, idx);
			rd->owned[rd->n_owned++] = idx;
		}
	} else if (rd->n_owned > 0) {
		unsigned k = (unsigned)(x % rd->n_owned);

		if (shm_alloc_get(rd->shm, rd->slot, rd->owned[k], &r) != 0) {
			violation(rd->st, rd->slot, "owned record lost", 0);
			rd->owned[k] = rd->owned[--rd->n_owned];
		} else if ((x & 3) == 1) {
			shm_alloc_release(rd->shm, rd->slot, rd->owned[k]);
			rd->owned[k] = rd->owned[--rd->n_owned];
		} else {
			rec_fill(r, x);
		}
	}
	rd->st->alloc_ops[rd->slot]++;
}

/* One read-side critical section use: take the current snapshot, check it, hold it a
 * while (the window in which a premature free shows), check it again. */
static void reader_use_snapshot(struct reader *rd)
{
	const void *blob;
	size_t len;
	uint64_t gen = 0;
	int rc = shm_snap_current(rd->shm, &blob, &len, &gen);
	unsigned spin;

	if (rc != 0) {
		violation(rd->st, rd->slot,
			  rc == -EBADMSG ? "corrupt snapshot header" : "no snapshot", gen);
		return;
	}
	if (!blob_ok(blob, len, gen, rd->snap_size)) {
		violation(rd->st, rd->slot, "snapshot content wrong at first use", gen);
		return;
	}
	spin = (unsigned)(rnd(&rd->rng) % 4000);
	for (unsigned i = 0; i < spin; i++)
		caa_cpu_relax();
	if (!blob_ok(blob, len, gen, rd->snap_size))
		violation(rd->st, rd->slot, "snapshot changed while held", gen);
	CMM_STORE_SHARED(rd->st->reads[rd->slot], rd->st->reads[rd->slot] + 1);
}

static void reader_main(struct shm *shm, struct stats *st, unsigned slot, unsigned snap_size,
			uint64_t seed, pid_t master)
{
	struct reader rd = {
		.shm = shm, .st = st, .slot = slot, .snap_size = snap_size, .rng = seed | 1
	};

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != master)
		_exit(0);
	shm_slot_set_state(shm, slot, SHM_SLOT_RUNNING);
	reader_adopt(&rd);
	shm_qsbr_online(shm, slot);
	for (;;) {
		unsigned batch = 1 + (unsigned)(rnd(&rd.rng) % 32);

		for (unsigned i = 0; i < batch; i++) {
			reader_use_snapshot(&rd);
			if ((rnd(&rd.rng) & 7) == 0)
				reader_alloc_op(&rd);
			shm_qsbr_quiescent(shm, slot);
		}
		/* like a worker around epoll_wait */
		shm_qsbr_offline(shm, slot);
		if ((rnd(&rd.rng) & 3) == 0)
			sched_yield();
		shm_slot_heartbeat(shm, slot, now_ns());
		shm_qsbr_online(shm, slot);
	}
}

/* ---- read-only tool process ---- */

static void tool_violation(struct stats *st, const char *what)
{
	if (st->tool_violations == 0)
		snprintf(st->tool_first_violation, sizeof(st->tool_first_violation), "%s", what);
	st->tool_violations++;
}

/* What turngatectl does: attach read-only from the fd and take validated copies of the
 * current snapshot and of allocation records, without being a QSBR reader. */
static void tool_main(int fd, struct stats *st, unsigned snap_size, uint64_t seed)
{
	struct shm *ro = NULL;
	struct shm_alloc *copy = malloc(sizeof(struct shm_alloc));
	uint8_t *buf = malloc(snap_size);
	uint64_t rng = seed | 1;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (copy == NULL || buf == NULL || shm_attach_ro(fd, &ro) != 0) {
		tool_violation(st, "attach_ro failed");
		_exit(1);
	}
	for (;;) {
		size_t len;
		uint64_t gen;
		int rc = shm_snap_copy(ro, buf, snap_size, &len, &gen);
		uint32_t idx = (uint32_t)(rnd(&rng) % shm_alloc_capacity(ro));

		if (rc == -EAGAIN)
			st->tool_retries++;
		else if (rc != 0)
			tool_violation(st, "snap_copy failed on a stable snapshot");
		else if (!blob_ok(buf, len, gen, snap_size))
			tool_violation(st, "snap_copy returned a wrong snapshot");
		else
			st->tool_copies++;
		if (shm_alloc_read_copy(ro, idx, copy) == 0 &&
		    SHM_ALLOC_WORD_STATE(copy->state) == SHM_ALLOC_LIVE) {
			st->tool_records++;
			if (!rec_consistent(copy))
				tool_violation(st, "inconsistent record copy");
		}
	}
}

/* ---- master ---- */

static int spawn(struct master *m, unsigned slot)
{
	pid_t pid;
	pid_t me = getpid();
	uint64_t seed = rnd(&m->rng);

	if (shm_slot_spawning(m->shm, slot, NULL) != 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		reader_main(m->shm, m->st, slot, m->o.snap_size, seed, me);
		_exit(0);
	}
	shm_slot_set_pid(m->shm, slot, pid);
	m->pids[slot] = pid;
	return 0;
}

static int slot_of(const struct master *m, pid_t pid)
{
	for (unsigned i = 0; i < m->o.readers; i++)
		if (m->pids[i] == pid)
			return (int)i;
	return -1;
}

/* SIGCHLD path: only after waitpid() may the slot's counter be zeroed. */
static void reap(struct master *m, bool respawn)
{
	pid_t pid;
	int status;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		int slot = slot_of(m, pid);
		unsigned n = 0;

		if (slot < 0) {
			if (pid == m->tool) {
				fprintf(stderr, "tool process died, status 0x%x\n", status);
				m->tool = 0;
				m->master_violations++;
			}
			continue;
		}
		if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
			fprintf(stderr, "reader %d (pid %d) died unexpectedly, status 0x%x\n", slot,
				(int)pid, status);
			m->master_violations++;
		}
		m->pids[slot] = 0;
		shm_slot_reaped(m->shm, (unsigned)slot);
		/* half of the time the master drops the dead slot's records itself, otherwise
		 * the replacement adopts them */
		if ((rnd(&m->rng) & 1) == 0 &&
		    shm_slot_release_all(m->shm, (unsigned)slot, &n) == 0)
			m->released += n;
		if (respawn && spawn(m, (unsigned)slot) == 0)
			m->respawns++;
	}
}

static void check_random_record(struct master *m, struct shm_alloc *copy)
{
	uint32_t cap = shm_alloc_capacity(m->shm);
	uint32_t idx = (uint32_t)(rnd(&m->rng) % cap);

	if (shm_alloc_read_copy(m->shm, idx, copy) != 0)
		return;
	if (SHM_ALLOC_WORD_STATE(copy->state) != SHM_ALLOC_LIVE)
		return;
	m->copies_checked++;
	if (!rec_consistent(copy)) {
		fprintf(stderr, "record %u inconsistent in a seqlock copy\n", idx);
		m->master_violations++;
	}
}

static void master_step(struct master *m)
{
	unsigned freed = 0, pending = 0;
	uint64_t age = 0;
	int rc;

	blob_build(m->blob, m->gen + 1, m->o.snap_size);
	rc = shm_snap_publish(m->shm, m->blob, len_for(m->gen + 1, m->o.snap_size), m->gen + 1,
			      now_ns());
	if (rc == 0) {
		m->gen++;
		m->published++;
	} else if (rc == -EBUSY) {
		m->busy++;
	} else {
		fprintf(stderr, "publish: %s\n", strerror(-rc));
		m->master_violations++;
	}
	if (m->o.broken)
		shm_snap_reclaim_unsafe(m->shm, &freed);
	else
		shm_snap_reclaim(m->shm, &freed, &pending);
	m->freed += freed;
	if (pending > m->max_pending)
		m->max_pending = pending;
	shm_qsbr_oldest_pending_ns(m->shm, now_ns(), &age);
	if (age > STALL_LIMIT_NS) {
		unsigned blk = 0;

		shm_qsbr_blocker(m->shm, shm_snap_oldest_token(m->shm), &blk);
		fprintf(stderr, "reclamation stalled %" PRIu64 " ms, slot %u\n", age / 1000000,
			blk);
		m->master_violations++;
	}
}

static void kill_random(struct master *m)
{
	unsigned slot = (unsigned)(rnd(&m->rng) % m->o.readers);

	if (m->pids[slot] > 0 && kill(m->pids[slot], SIGKILL) == 0)
		m->kills++;
}

/* Kill everything, reap, and check that with every reader gone nothing stays pending. */
static void master_finish(struct master *m)
{
	unsigned freed = 0, pending = 0;

	if (m->tool > 0) {
		kill(m->tool, SIGKILL);
		waitpid(m->tool, NULL, 0);
		m->tool = 0;
	}
	for (unsigned i = 0; i < m->o.readers; i++)
		if (m->pids[i] > 0)
			kill(m->pids[i], SIGKILL);
	for (unsigned i = 0; i < m->o.readers; i++) {
		int status;

		if (m->pids[i] > 0 && waitpid(m->pids[i], &status, 0) == m->pids[i]) {
			shm_slot_reaped(m->shm, i);
			m->pids[i] = 0;
		}
	}
	shm_snap_reclaim(m->shm, &freed, &pending);
	m->freed += freed;
	if (pending != 0) {
		fprintf(stderr, "%u snapshots still pending with no reader left\n", pending);
		m->master_violations++;
	}
}

static uint64_t reader_violations(const struct master *m)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < m->o.readers; i++)
		v += CMM_LOAD_SHARED(m->st->violations[i]);
	return v;
}

static int master_run(struct master *m)
{
	uint64_t start = now_ns(), deadline = start + m->o.seconds * 1000000000ull;
	uint64_t next_kill = start + m->o.kill_ms * 1000000ull;
	struct shm_alloc *copy = malloc(sizeof(*copy));
	uint64_t steps = 0;

	if (copy == NULL)
		return -1;
	for (unsigned i = 0; i < m->o.readers; i++)
		if (spawn(m, i) != 0)
			goto fail;
	m->tool = fork();
	if (m->tool < 0)
		goto fail;
	if (m->tool == 0)
		tool_main(shm_fd(m->shm), m->st, m->o.snap_size, rnd(&m->rng));
	while (now_ns() < deadline) {
		/* the broken control has made its point once it has been caught enough */
		if (m->o.broken && steps % 256 == 0 && reader_violations(m) >= BROKEN_ENOUGH)
			break;
		master_step(m);
		reap(m, true);
		if (++steps % 64 == 0)
			check_random_record(m, copy);
		if (now_ns() >= next_kill) {
			kill_random(m);
			next_kill = now_ns() + (1 + rnd(&m->rng) % (2 * m->o.kill_ms)) * 1000000ull;
		}
	}
	master_finish(m);
	free(copy);
	return 0;
fail:
	master_finish(m);
	free(copy);
	return -1;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "readers", required_argument, NULL, 'r' },
		{ "seconds", required_argument, NULL, 's' },
		{ "snap-size", required_argument, NULL, 'z' },
		{ "kill-ms", required_argument, NULL, 'k' },
		{ "seed", required_argument, NULL, 'x' },
		{ "broken", no_argument, NULL, 'b' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct opts){ .readers = 4,
			    .seconds = 15,
			    .snap_size = 16384,
			    .kill_ms = 20,
			    .seed = (unsigned)getpid() };
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'r':
			o->readers = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 's':
			o->seconds = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'z':
			o->snap_size = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'k':
			o->kill_ms = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'x':
			o->seed = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'b':
			o->broken = true;
			break;
		default:
			return -1;
		}
	}
	if (o->readers < 1 || o->readers > MAX_READERS || o->seconds < 1 || o->seconds > 600 ||
	    o->snap_size < 256 || o->snap_size > (1u << 24) || o->snap_size % 8 || o->kill_ms < 1)
		return -1;
	return 0;
}

static uint64_t report(const struct master *m)
{
	uint64_t reads = 0, viol = 0, ops = 0, adopted = 0, dropped = 0;

	for (unsigned i = 0; i < m->o.readers; i++) {
		reads += m->st->reads[i];
		viol += m->st->violations[i];
		ops += m->st->alloc_ops[i];
		adopted += m->st->adopted[i];
		dropped += m->st->torn_dropped[i];
		if (m->st->violations[i])
			printf("slot %u: %" PRIu64 " violations, first: %s\n", i,
			       m->st->violations[i], m->st->first_violation[i]);
	}
	printf("%s: readers %u, published %" PRIu64 ", reclaimed %" PRIu64
	       ", publish deferred %" PRIu64 ", max pending %u, kills %" PRIu64
	       ", respawns %" PRIu64 "\n",
	       m->o.broken ? "BROKEN (reclaim without grace period)" : "protocol", m->o.readers,
	       m->published, m->freed, m->busy, m->max_pending, m->kills, m->respawns);
	printf("reads %" PRIu64 ", alloc ops %" PRIu64 ", adopted %" PRIu64
	       ", torn dropped %" PRIu64 ", released by master %" PRIu64
	       ", seqlock copies checked %" PRIu64 "\n",
	       reads, ops, adopted, dropped, m->released, m->copies_checked);
	printf("tool (read-only attach): snapshot copies %" PRIu64 ", retries %" PRIu64
	       ", record copies %" PRIu64 "\n",
	       m->st->tool_copies, m->st->tool_retries, m->st->tool_records);
	if (m->st->tool_violations)
		printf("tool: %" PRIu64 " violations, first: %s\n", m->st->tool_violations,
		       m->st->tool_first_violation);
	printf("violations: readers %" PRIu64 ", tool %" PRIu64 ", master %" PRIu64 "\n", viol,
	       m->st->tool_violations, m->master_violations);
	return reads;
}

int main(int argc, char **argv)
{
	struct master m = { 0 };
	struct shm_config cfg;
	uint64_t reads, viol = 0;
	int rc = 2;

	if (parse_opts(argc, argv, &m.o) < 0) {
		fprintf(stderr,
			"usage: %s [--readers N] [--seconds S] [--snap-size B] "
			"[--kill-ms MS] [--seed X] [--broken]\n",
			argv[0]);
		return 2;
	}
	m.rng = (uint64_t)m.o.seed * 2654435761u + 1;
	cfg = (struct shm_config){ m.o.readers, 4, m.o.snap_size, m.o.readers * 64 };
	m.st = mmap(NULL, sizeof(*m.st), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	m.blob = malloc(m.o.snap_size);
	if (m.st == MAP_FAILED || m.blob == NULL || shm_create(&cfg, "stress-shm", &m.shm) < 0) {
		fprintf(stderr, "setup failed\n");
		goto out;
	}
	blob_build(m.blob, 1, m.o.snap_size);
	m.gen = 1;
	if (shm_snap_publish(m.shm, m.blob, len_for(1, m.o.snap_size), 1, now_ns()) < 0 ||
	    master_run(&m) < 0) {
		fprintf(stderr, "setup failed\n");
		goto out;
	}
	reads = report(&m);
	for (unsigned i = 0; i < m.o.readers; i++)
		viol += m.st->violations[i];
	viol += m.master_violations + m.st->tool_violations;
	if (viol > 0)
		rc = 1;
	else if (reads == 0 || m.kills == 0 || m.published < 100)
		rc = 3;	/* exercised nothing: not a pass */
	else
		rc = 0;
out:
	shm_destroy(m.shm);
	free(m.blob);
	if (m.st != MAP_FAILED && m.st != NULL)
		munmap(m.st, sizeof(*m.st));
	return rc;
}
