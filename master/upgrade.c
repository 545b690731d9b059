/* Master: live upgrade in place (SIGUSR2, `turngatectl upgrade`), nginx's convention.
 *
 * The running master (the old one) forks and executes the new binary with its own command
 * line. The new master inherits every listening socket (TURN listeners of every slot, the
 * admin socket, the HTTP servers) through $TURNGATE_UPGRADE and a SOCK_SEQPACKET channel
 * to the old one, and goes through its start as far as it can without the allocation
 * table: configuration, sockets, and a dry run of the take-over of the state file. Then:
 *
 *   new -> old  "ready [streams]" the old master stops its workers now (SIGQUIT: their
 *                                 allocations stay LIVE in the table; with "streams",
 *                                 IPC_PARK first: they hand their TURN-TCP connections
 *                                 over), links the state file to NAME.state.upgrade, and
 *                                 once every worker is reaped, lingers or said
 *                                 IPC_HANDED_OVER (offline, its exit follows) lets go of
 *                                 the instance lock (and sends the connections on);
 *   new                           takes the lock and the table over (as a restart does),
 *                                 binds the relay ports, starts its workers;
 *   new -> old  "serving PID"     every worker answered: the old master tells systemd
 *                                 MAINPID=PID (NotifyAccess=main: only the main process
 *                                 may) and exits 0;
 *   new -> old  "fail REASON"     or the channel closes, or the timeout passes: the new
 *                                 master is killed; the old one goes on serving (before
 *                                 "ready": it never stopped; after: it takes the lock back
 *                                 once the new processes are gone, puts its own file back
 *                                 in place and respawns its workers, which re-adopt).
 *
 * Datagrams that reach a listener meanwhile wait in the inherited sockets (the same
 * sockets, not copies); so do those that reach a relay port: a new master that says
 * "ready streams relays" (the old one offered them: relays=1) gets the UDP allocations'
 * relay sockets too, which the old workers write into a channel per slot when they stop
 * (master/relayho.c), and its workers take them instead of binding new ones (the gap: no
 * socket is closed or bound again). The new
 * master keeps the old one's worker count, since the reuseport group and its steering
 * program are inherited with the sockets. TURN-TCP connections are handed over: a new
 * master that says "ready streams" gets them (master/park.c): the old workers send them
 * with their state before they exit, and the old master passes them on once the lock is
 * free, ending with IPC_STREAM_END; with a TURN-TCP call's UDP relay sockets beside its
 * connection only to one that says "urelays" too (offered: urelays=1). A worker with
 * TURN-TLS or TURN-DTLS calls stays to serve them (IPC_LINGER: it counts as stopped;
 * worker/linger.c, master/linger.c; the new workers forward its DTLS clients' datagrams to
 * it, worker/dtlslinger.c). */
#include "config.h"

#include "master/master.h"
#include "master/records.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/mono.h"
#include "common/sockaddr.h"
#include "master/admin.h"
#include "master/cds.h"
#include "master/linger.h"
#include "master/relayho.h"
#include "shm/shm.h"

#define UPGRADE_ENV "TURNGATE_UPGRADE"
#define UPGRADE_MAX_FDS 512
#define UPGRADE_RELOCK_S 0.01
#define UPGRADE_STOP_GRACE_S 5.0
/* How long the old master may take to pass its workers' TCP connections on. */
#define UPGRADE_STREAMS_MS 5000
#define UPGRADE_TEST_HOLD_S 120  /* $TURNGATE_TEST_UPGRADE_HOLD: the longest hold */

enum up_phase {
	UP_IDLE = 0,
	UP_STARTING,  /* the new binary runs, no "ready" yet */
	UP_HANDOVER,  /* our workers stop; the new master takes the table over */
	UP_FALLBACK,  /* it failed after "ready": waiting to take the lock back */
	UP_FAILED,    /* the last attempt failed; we serve */
	UP_DONE,      /* the new master serves; we exit */
};

struct upgrade {
	/* both sides */
	char **argv;
	char exe[PATH_MAX];
	/* old side: the attempt in progress or the last one */
	enum up_phase phase;
	unsigned attempt;
	pid_t child;
	int fd;                   /* our end of the channel, -1 when none */
	ev_io io;
	ev_timer tmo, relock;
	double timeout;
	bool lock_dropped;
	bool reaped;              /* the new binary (child) was reaped */
	bool peer_streams;        /* the new master reads our TCP connections */
	bool peer_relays;         /* ... and our workers' relay sockets (master/relayho.c) */
	bool peer_urelays;        /* ... and a TURN-TCP call's UDP relay sockets (park.c) */
	double fallback_since;
	char backup[PATH_MAX];
	char error[512];
	/* new side: what the old master handed down */
	int ctl;                  /* the channel, -1 when this start is no upgrade */
	pid_t from;
	unsigned slots;
	bool streams;             /* the old master hands its TCP connections over */
	bool relays;              /* ... and its workers' relay sockets */
	bool urelays;             /* ... and a TURN-TCP call's UDP relay sockets */
	int inh[UPGRADE_MAX_FDS];
	size_t n_inh;
	bool serving;
};

static const char *phase_name(enum up_phase p)
{
	static const char *const names[] = { "idle",     "starting", "handover",
					     "fallback", "failed",   "done" };

	return names[p];
}

int upgrade_init(struct master *m, char **argv)
{
	struct upgrade *u = calloc(1, sizeof(*u));
	ssize_t n;

	if (u == NULL)
		return -ENOMEM;
	u->argv = argv;
	u->fd = u->ctl = -1;
	n = readlink("/proc/self/exe", u->exe, sizeof(u->exe) - 1);
	if (n <= 0)
		snprintf(u->exe, sizeof(u->exe), "%s", argv[0]);
	else
		u->exe[n] = '\0';
	m->up = u;
	return 0;
}

/* ---- the new master's side --------------------------------------------------------- */

static void report(struct upgrade *u, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void report(struct upgrade *u, const char *fmt, ...)
{
	char msg[600];
	va_list ap;
	int n;

	if (u->ctl < 0)
		return;
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (send(u->ctl, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1, MSG_NOSIGNAL) <
	    0)
		log_warn("master", "upgrade: cannot report to the old master: %s", strerror(errno));
}

/* "ctl=FD slots=N from=PID fds=FD,FD,..." */
static int parse_env(struct upgrade *u, const char *env)
{
	const char *p = strstr(env, "fds=");
	int ctl, from;
	unsigned slots;

	if (sscanf(env, "ctl=%d slots=%u from=%d", &ctl, &slots, &from) != 3 || ctl < 0 ||
	    slots == 0 || slots > SHM_MAX_SLOTS || from <= 0 || p == NULL)
		return -EINVAL;
	for (p += 4; *p != '\0' && u->n_inh < UPGRADE_MAX_FDS;) {
		char *end;
		long fd = strtol(p, &end, 10);

		if (end == p || fd < 0 || fd > INT_MAX || (*end != ',' && *end != '\0'))
			return -EINVAL;
		u->inh[u->n_inh++] = (int)fd;
		p = *end == ',' ? end + 1 : end;
	}
	u->ctl = ctl;
	u->streams = strstr(env, " streams=1 ") != NULL;
	u->relays = u->streams && strstr(env, " relays=1 ") != NULL;
	/* TURNGATE_TEST_NO_URELAYS: tests play a binary without PARK_URELAY (it neither
	 * asks for them nor keeps one that comes). */
	u->urelays = u->streams && strstr(env, " urelays=1 ") != NULL &&
		     getenv("TURNGATE_TEST_NO_URELAYS") == NULL;
	u->slots = slots;
	u->from = from;
	return 0;
}

int upgrade_inherit(struct master *m)
{
	struct upgrade *u = m->up;
	const char *env = getenv(UPGRADE_ENV);
	int rc;

	if (env == NULL)
		return 0;
	rc = parse_env(u, env);
	unsetenv(UPGRADE_ENV);
	if (rc < 0) {
		log_error("master", "$" UPGRADE_ENV " is malformed: not an upgrade");
		u->n_inh = 0;
		u->ctl = -1;
		return rc;
	}
	/* Ours now, and nobody else's: a later upgrade or a worker gets them explicitly. */
	fcntl(u->ctl, F_SETFD, FD_CLOEXEC);
	for (size_t i = 0; i < u->n_inh; i++)
		if (fcntl(u->inh[i], F_SETFD, FD_CLOEXEC) < 0)
			u->inh[i] = -1;
	m->n_slots = u->slots;
	log_info("master", "live upgrade from pid %d: %zu sockets inherited, %u workers",
		 (int)u->from, u->n_inh, u->slots);
	return 1;
}

bool upgrade_is_child(const struct master *m)
{
	return m->up != NULL && m->up->ctl >= 0;
}

/* a (from getsockname) is b: an IP address and port, or a unix socket's path. */
static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr *b)
{
	if (a->ss_family == AF_UNIX && b->sa_family == AF_UNIX)
		return strncmp(((const struct sockaddr_un *)a)->sun_path,
			       ((const struct sockaddr_un *)b)->sun_path,
			       sizeof(((const struct sockaddr_un *)a)->sun_path)) == 0;
	return sockaddr_equal((const struct sockaddr *)a, b);
}

int upgrade_take_socket(struct master *m, int type, const struct sockaddr *addr)
{
	struct upgrade *u = m->up;

	if (u == NULL || u->ctl < 0 || addr == NULL)
		return -1;
	for (size_t i = 0; i < u->n_inh; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int t = 0;
		socklen_t tl = sizeof(t);

		if (u->inh[i] < 0 || getsockopt(u->inh[i], SOL_SOCKET, SO_TYPE, &t, &tl) < 0 ||
		    t != type || getsockname(u->inh[i], (struct sockaddr *)&ss, &sl) < 0 ||
		    !same_addr(&ss, addr))
			continue;
		t = u->inh[i];
		u->inh[i] = -1;
		return t;
	}
	return -1;
}

int upgrade_take_listener(struct master *m, const struct conf_listener *l, struct mlistener *out)
{
	struct sockaddr_storage ss, any;
	int type, fds[SHM_MAX_SLOTS], rc;
	unsigned n = 0;

	if (!upgrade_is_child(m) || listener_bind_addr(l, &ss) < 0)
		return 0;
	type = l->protocol == CONF_PROTO_TURN_UDP || l->protocol == CONF_PROTO_TURN_DTLS
		       ? SOCK_DGRAM
		       : SOCK_STREAM;
	/* listener_open() falls back to the wildcard address for a relay address that is not
	 * local: so did the old master. */
	any = ss;
	if (any.ss_family == AF_INET)
		((struct sockaddr_in *)&any)->sin_addr.s_addr = htonl(INADDR_ANY);
	else
		((struct sockaddr_in6 *)&any)->sin6_addr = in6addr_any;
	while (n < m->n_slots) {
		int fd = upgrade_take_socket(m, type, (struct sockaddr *)&ss);

		if (fd < 0)
			fd = upgrade_take_socket(m, type, (struct sockaddr *)&any);
		if (fd < 0)
			break;
		fds[n++] = fd;
	}
	if (n == 0)
		return 0;
	if (n < m->n_slots) {
		log_error("master", "listener %s: %u of %u sockets inherited", l->name, n,
			  m->n_slots);
		for (unsigned i = 0; i < n; i++)
			close(fds[i]);
		return -EBADF;
	}
	rc = listener_adopt(l, fds, n, out);
	if (rc < 0) {
		for (unsigned i = 0; i < n; i++)
			close(fds[i]);
		return rc;
	}
	return 1;
}

void upgrade_close_unused(struct master *m)
{
	struct upgrade *u = m->up;
	unsigned n = 0;

	if (!upgrade_is_child(m))
		return;
	for (size_t i = 0; i < u->n_inh; i++)
		if (u->inh[i] >= 0) {
			close(u->inh[i]);
			u->inh[i] = -1;
			n++;
		}
	if (n > 0)
		log_info("master",
			 "upgrade: %u inherited sockets are not in this configuration "
			 "(closed)",
			 n);
}

void upgrade_receive_streams(struct master *m)
{
	struct upgrade *u = m->up;

	if (!upgrade_is_child(m) || !u->streams)
		return;
	(void)park_receive(m, u->ctl, UPGRADE_STREAMS_MS);
}

void upgrade_report_ready(struct master *m)
{
	/* "ready streams": we read the TCP connections (an old master that does not hand
	 * any over did not ask, and expects "ready" alone); "relays": and the relay sockets
	 * (only to an old master that offered them: " relays=1 " in the environment);
	 * "urelays": and a TURN-TCP call's UDP relay sockets with its connection
	 * (" urelays=1 "). */
	report(m->up, "ready%s%s%s", m->up->streams ? " streams" : "",
	       m->up->relays ? " relays" : "", m->up->urelays ? " urelays" : "");
}

void upgrade_test_hold(void)
{
	const char *path = getenv("TURNGATE_TEST_UPGRADE_HOLD");
	uint64_t until;
	struct stat st;
	char c;
	int fd;

	if (path == NULL || path[0] == '\0')
		return;
	/* Said before the FIFO is opened: a writer may open it (and the test read the log)
	 * as soon as it is. Never blocks for good: the FIFO is opened without waiting for a
	 * writer, and the wait for its byte (or its writer's close) is bounded. */
	log_warn("master",
		 "upgrade: a test's hook is active: held before ready until %s is written "
		 "(at most %d s)",
		 path, UPGRADE_TEST_HOLD_S);
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		log_warn("master", "upgrade: $TURNGATE_TEST_UPGRADE_HOLD %s: %s (ignored)", path,
			 strerror(errno));
		return;
	}
	if (fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode)) {
		log_warn("master", "upgrade: $TURNGATE_TEST_UPGRADE_HOLD %s is not a FIFO (ignored)",
			 path);
		close(fd);
		return;
	}
	until = mono_ns() + (uint64_t)UPGRADE_TEST_HOLD_S * 1000000000u;
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t now = mono_ns();
		int n;

		if (now >= until) {
			log_warn("master", "upgrade: %s not written within %d s: going on", path,
				 UPGRADE_TEST_HOLD_S);
			break;
		}
		n = poll(&pfd, 1, (int)((until - now) / 1000000u) + 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != 0)
			break;	/* its byte, its writer's close, or an error */
	}
	while (read(fd, &c, 1) < 0 && errno == EINTR)
		;
	close(fd);
}

bool upgrade_peer_relays(const struct master *m)
{
	return m->up != NULL && m->up->peer_relays;
}

bool upgrade_urelays(const struct master *m)
{
	const struct upgrade *u = m->up;

	/* the old master's side: what the new one asked for; the new one's: what it did */
	return u != NULL && (upgrade_is_child(m) ? u->urelays : u->peer_urelays);
}

void upgrade_report_failure(struct master *m, const char *why)
{
	report(m->up, "fail %s", why);
}

void upgrade_worker_running(struct master *m)
{
	struct upgrade *u = m->up;

	if (!upgrade_is_child(m) || u->serving || m->workers == NULL)
		return;
	for (unsigned i = 0; i < m->n_slots; i++)
		if (m->workers[i].state != MW_RUNNING)
			return;
	u->serving = true;
	report(u, "serving %d", (int)getpid());
	close(u->ctl);
	u->ctl = -1;
	m->upgraded_from = u->from;
	admin_resume(m->admin);
	log_info("master", "upgrade: serving; the old master (pid %d) exits", (int)u->from);
}

/* ---- the old master's side --------------------------------------------------------- */

static void child_env(const struct master *m, int ctl, char *env, size_t cap)
{
	size_t len;
	int fds[UPGRADE_MAX_FDS];
	size_t n = upgrade_collect_fds(m, fds, UPGRADE_MAX_FDS);

	len = (size_t)snprintf(env, cap,
			       UPGRADE_ENV "=ctl=%d slots=%u from=%d streams=1 relays=1 urelays=1 fds=",
			       ctl,
			       m->n_slots, (int)getppid());
	for (size_t i = 0; i < n && len + 16 < cap; i++) {
		len += (size_t)snprintf(env + len, cap - len, i ? ",%d" : "%d", fds[i]);
		fcntl(fds[i], F_SETFD, 0);
	}
}

size_t upgrade_collect_fds(const struct master *m, int *fds, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < m->n_listeners; i++)
		for (unsigned s = 0; s < m->listeners[i].n_fds && n < cap; s++)
			if (m->listeners[i].fds[s] >= 0)
				fds[n++] = m->listeners[i].fds[s];
	if (admin_fd(m->admin) >= 0 && n < cap)
		fds[n++] = admin_fd(m->admin);
	n += httpd_fds(m, fds + n, cap - n);
	return n;
}

static void stop_watchers(struct master *m)
{
	struct upgrade *u = m->up;

	ev_timer_stop(m->loop, &u->tmo);
	if (u->fd >= 0) {
		ev_io_stop(m->loop, &u->io);
		close(u->fd);
		u->fd = -1;
	}
}

static void restore_file(struct master *m)
{
	struct upgrade *u = m->up;

	if (u->backup[0] == '\0')
		return;
	/* Both names may still be the same file (the new master never renamed): then
	 * rename() does nothing and the unlink removes the second name. */
	if (rename(u->backup, m->state_path) < 0)
		log_error("master", "upgrade: cannot put %s back: %s", m->state_path,
			  strerror(errno));
	unlink(u->backup);
	u->backup[0] = '\0';
}

/* The new master is reaped (fail() killed it): it alone could still rename its copy of the
 * table over the state file. Not kill(pid, 0): once reaped, the pid may be another's. */
static bool child_gone(const struct upgrade *u)
{
	return u->child <= 0 || u->reaped;
}

static void relock_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct master *m = t->data;
	struct upgrade *u = m->up;

	(void)revents;
	if (!supervise_all_down(m)) {
		/* ours got SIGQUIT at the handover; one that hangs is killed, as at a stop */
		if (ev_now(loop) - u->fallback_since > UPGRADE_STOP_GRACE_S)
			supervise_kill_all(m);
		return;
	}
	/* A master that stops writes the table no more: it needs no lock, only the new master
	 * gone, whose workers (they die with it) may hold the lock a while yet. */
	if (m->stopping ? !child_gone(u) : u->lock_dropped && state_relock(m) < 0)
		return;	/* a process of the new binary still runs */
	ev_timer_stop(loop, t);
	u->lock_dropped = false;
	restore_file(m);
	records_thaw(m);	/* ours again: its workers' session records are ours to write */
	m->handing_over = false;
	u->phase = UP_FAILED;
	if (m->stopping) {
		/* told to stop meanwhile: the table stays in our file for the next start */
		log_warn("master", "upgrade failed: %s; this master's table is in %s again",
			 u->error, m->state_path);
		reload_deferred_tick(m);	/* says it is not run */
		park_release(m);
		ev_break(loop, EVBREAK_ALL);
		return;
	}
	log_error("master", "upgrade failed: %s; this master (pid %d) serves on", u->error,
		  (int)getpid());
	/* Our workers' TCP connections go back to their slots with our own table. */
	linger_kill_children(m);
	for (unsigned i = 0; i < m->n_slots; i++)
		supervise_respawn(m, i);
	park_release(m);
}

/* The new binary is gone after a failed attempt: the segment file it creates before
 * "ready" and renames over NAME.state only once it holds the lock is still there when it
 * was killed (or crashed) in between: a table-sized file on the tmpfs until the next
 * start. Never before it is reaped: a process being killed may still finish a call. */
static void forget_fresh(struct master *m)
{
	char path[PATH_MAX];

	if (m->state_path == NULL ||
	    snprintf(path, sizeof(path), "%s.new", m->state_path) >= (int)sizeof(path))
		return;
	if (unlink(path) == 0)
		log_info("master", "upgrade: %s removed (the failed new binary's copy of the "
				   "table)",
			 path);
	else if (errno != ENOENT)
		log_warn("master", "upgrade: cannot remove %s: %s", path, strerror(errno));
}

void upgrade_reaped(struct master *m, pid_t pid)
{
	struct upgrade *u = m->up;

	if (u == NULL || u->child <= 0 || pid != u->child)
		return;
	u->reaped = true;
	if (u->phase == UP_DONE) {
		m->successor = 0;	/* its pid may be another's now */
		return;
	}
	if (u->phase == UP_FAILED || u->phase == UP_FALLBACK)
		forget_fresh(m);	/* else fail() follows, which does it */
}

static void fail(struct master *m, const char *why)
{
	struct upgrade *u = m->up;

	if (u->phase != UP_STARTING && u->phase != UP_HANDOVER)
		return;
	snprintf(u->error, sizeof(u->error), "%s", why);
	stop_watchers(m);
	admin_hold(m->admin, false);	/* we serve on: the queued connections are ours */
	httpd_hold(m, false);
	if (u->reaped)
		forget_fresh(m);	/* it ended before we read its end */
	else if (u->child > 0)
		kill(u->child, SIGKILL);	/* reaped by the supervisor's child watcher */
	if (u->phase == UP_STARTING) {
		u->phase = UP_FAILED;
		log_error("master", "upgrade failed: %s; this master (pid %d) serves on", why,
			  (int)getpid());
		return;
	}
	/* After "ready": our workers are stopping or gone. */
	u->phase = UP_FALLBACK;
	u->fallback_since = ev_now(m->loop);
	ev_timer_init(&u->relock, relock_cb, 0., UPGRADE_RELOCK_S);
	u->relock.data = m;
	ev_timer_start(m->loop, &u->relock);
}

void upgrade_workers_down(struct master *m)
{
	struct upgrade *u = m->up;

	if (u->phase != UP_HANDOVER || u->lock_dropped)
		return;
	/* Nothing of ours writes the table any more: the new master may take it. Our
	 * workers' last session records are written now; the rest is the new master's. */
	records_freeze(m);
	park_count_lost(m);	/* before the new master copies the counters */
	shm_lock_set(m->shm, -1);
	u->lock_dropped = true;
	log_info("master", "upgrade: workers stopped, the new master (pid %d) takes over",
		 (int)u->child);
	/* After the lock: the new master reads them once it has copied the table. */
	if (u->fd >= 0 && u->peer_streams) {
		struct timeval tv = { .tv_sec = 1 };
		int rc;

		/* A new master that does not read cannot hold us beyond UPGRADE_STREAMS_MS. */
		(void)setsockopt(u->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		rc = park_forward(m, u->fd, UPGRADE_STREAMS_MS);

		if (rc < 0)
			log_warn("master", "upgrade: cannot pass %zu sockets of TCP calls on: %s",
				 park_count(m), strerror(-rc));
		else if (park_count(m) > 0)
			log_info("master", "upgrade: %zu sockets of TCP calls passed on "
					   "(connections and their relay and peer sockets)",
				 park_count(m));
	}
}

static void handover(struct master *m)
{
	struct upgrade *u = m->up;

	snprintf(u->backup, sizeof(u->backup), "%s.upgrade", m->state_path);
	unlink(u->backup);
	if (link(m->state_path, u->backup) < 0) {
		char why[PATH_MAX + 64];

		snprintf(why, sizeof(why), "cannot link %s: %s", u->backup, strerror(errno));
		u->backup[0] = '\0';
		fail(m, why);
		return;
	}
	u->phase = UP_HANDOVER;
	m->handing_over = true;
	ev_timer_stop(m->loop, &u->tmo);
	ev_timer_set(&u->tmo, u->timeout, 0.);
	ev_timer_start(m->loop, &u->tmo);
	log_info("master", "upgrade: the new master (pid %d) is ready; stopping the workers",
		 (int)u->child);
	/* From here the admin socket's new connections wait for the new master: one we took
	 * now could be left unanswered when we exit (reset under its client). */
	admin_hold(m->admin, true);
	httpd_hold(m, true);	/* the same for health probes and scrapes */
	if (u->peer_relays)
		relayho_channels(m);	/* before IPC_PARK, on the same channels */
	supervise_suspend_all(m, u->peer_streams);
	if (supervise_all_down(m))
		upgrade_workers_down(m);
}

static void done(struct master *m)
{
	struct upgrade *u = m->up;

	stop_watchers(m);
	if (u->backup[0] != '\0')
		unlink(u->backup);
	u->backup[0] = '\0';
	u->phase = UP_DONE;
	m->handed_over = true;
	/* A deferred reload goes to it from main(), once this master closed the sockets they
	 * share: before, a reload there that restarts an HTTP server on the same port finds
	 * it bound by us (httpd_stop waits up to a second for our requests in progress). */
	m->successor = u->reaped ? 0 : u->child;
	park_release(m);	/* the new workers hold them */
	/* From the main process (NotifyAccess=main): the new master is the service now. */
	notify_mainpid(u->child);
	log_info("master", "upgrade: pid %d serves; exiting", (int)u->child);
	ev_break(m->loop, EVBREAK_ALL);
}

/* "ready[ streams[ relays][ urelays]]": what the new master reads. A new master that
 * does not read them must not get them: closing its end with frames unread would reset
 * the channel under its "serving"; one that rejects a kind it does not know (PARK_URELAY)
 * would close the last copy of its socket only once it serves. */
static bool parse_ready(struct upgrade *u, const char *msg)
{
	bool streams = false, relays = false, urelays = false;

	if (strncmp(msg, "ready", 5) != 0)
		return false;
	for (msg += 5; *msg == ' ';) {
		size_t n = strcspn(msg + 1, " ");

		if (n == 7 && strncmp(msg + 1, "streams", n) == 0 && !streams)
			streams = true;
		else if (n == 6 && strncmp(msg + 1, "relays", n) == 0 && streams && !relays)
			relays = true;
		else if (n == 7 && strncmp(msg + 1, "urelays", n) == 0 && streams && !urelays)
			urelays = true;
		else
			return false;
		msg += 1 + n;
	}
	if (*msg != '\0')
		return false;
	u->peer_streams = streams;
	u->peer_relays = relays;
	u->peer_urelays = urelays;
	return true;
}

static void io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct master *m = w->data;
	struct upgrade *u = m->up;
	char msg[600], why[700];
	ssize_t n;
	int pid;

	(void)loop;
	(void)revents;
	n = recv(u->fd, msg, sizeof(msg) - 1, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		fail(m, "the new binary exited before it served (see its log lines above)");
		return;
	}
	msg[n] = '\0';
	/* The phase first: a second "ready" during the hand-over must not change the peer's
	 * flags (parse_ready sets them) that the hand-over goes by. */
	if (u->phase == UP_STARTING && parse_ready(u, msg)) {
		handover(m);
	} else if (sscanf(msg, "serving %d", &pid) == 1 && u->phase == UP_HANDOVER &&
		   pid == (int)u->child) {
		done(m);	/* any other pid (0 and -1 signal groups) is unexpected */
	} else if (strncmp(msg, "fail ", 5) == 0) {
		snprintf(why, sizeof(why), "the new binary: %s", msg + 5);
		fail(m, why);
	} else {
		fail(m, "the new binary sent an unexpected message");
	}
}

static void tmo_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct master *m = t->data;
	char why[96];

	(void)loop;
	(void)revents;
	snprintf(why, sizeof(why), "the new binary did not %s within %.0f s",
		 m->up->phase == UP_STARTING ? "become ready" : "serve", m->up->timeout);
	fail(m, why);
}

/* Executes the binary through bin, the descriptor that binary_open checked: a rename or
 * a symlink swapped in meanwhile changes nothing. A script needs its descriptor across the
 * exec (its interpreter reads /dev/fd/N): only then is it kept open (ENOENT, fexecve(3)). */
static void exec_child(struct master *m, int bin, const char *binary, int ctl)
{
	char env[8192];
	sigset_t none;
	int err;

	child_env(m, ctl, env, sizeof(env));
	fcntl(ctl, F_SETFD, 0);
	putenv(env);
	/* sd_watchdog_enabled() only believes a WATCHDOG_PID that names the caller. */
	if (getenv("WATCHDOG_PID") != NULL) {
		char pid[16];

		snprintf(pid, sizeof(pid), "%d", (int)getpid());
		setenv("WATCHDOG_PID", pid, 1);
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	fexecve(bin, m->up->argv, environ);
	err = errno;
	if (err == ENOENT && fcntl(bin, F_SETFD, 0) == 0) {
		fexecve(bin, m->up->argv, environ);
		err = errno;
	}
	dprintf(ctl, "fail cannot execute %s: %s", binary, strerror(err));
	_exit(127);
}

/* Opens what a live upgrade executes, as the daemon's user: a regular file with an execute
 * bit, owned by root or by the daemon's own user (either could run it anyway), that its
 * group and others cannot write. Returns the descriptor (O_PATH, close-on-exec), or -errno
 * with the reason in why. */
static int binary_open(const char *binary, char *why, size_t cap)
{
	struct stat st;
	int fd = open(binary, O_PATH | O_CLOEXEC), rc;

	if (fd < 0 || fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(why, cap, "cannot execute %s: %s", binary, strerror(-rc));
		goto fail;
	}
	rc = -EPERM;
	if (!S_ISREG(st.st_mode) || (st.st_mode & 0111) == 0) {
		rc = -EACCES;
		snprintf(why, cap, "cannot execute %s: not an executable file", binary);
	} else if (st.st_uid != 0 && st.st_uid != geteuid()) {
		snprintf(why, cap,
			 "refused to execute %s: owned by uid %u (expected root's or the "
			 "daemon's own user's)",
			 binary, (unsigned)st.st_uid);
	} else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(why, cap,
			 "refused to execute %s: mode %04o lets its group or others write it",
			 binary, (unsigned)(st.st_mode & 07777));
	} else {
		return fd;
	}
fail:
	if (fd >= 0)
		close(fd);
	return rc;
}

static int start_child(struct master *m, const char *binary, char *why, size_t cap)
{
	struct upgrade *u = m->up;
	int sp[2], bin, rc;
	pid_t pid;

	bin = binary_open(binary, why, cap);
	if (bin < 0)
		return bin;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
		rc = -errno;
		snprintf(why, cap, "socketpair: %s", strerror(-rc));
		close(bin);
		return rc;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		snprintf(why, cap, "fork: %s", strerror(-rc));
		close(sp[0]);
		close(sp[1]);
		close(bin);
		return rc;
	}
	if (pid == 0) {
		close(sp[0]);
		exec_child(m, bin, binary, sp[1]);
	}
	close(bin);
	close(sp[1]);
	u->child = pid;
	u->fd = sp[0];
	return 0;
}

int upgrade_begin(struct master *m, const char *binary, double timeout, char *why, size_t cap)
{
	struct upgrade *u = m->up;
	int rc;

	if (binary == NULL || binary[0] == '\0')
		binary = u->exe;
	if (u->phase == UP_STARTING || u->phase == UP_HANDOVER || u->phase == UP_FALLBACK) {
		snprintf(why, cap, "an upgrade is already in progress (to pid %d)", (int)u->child);
		return -EBUSY;
	}
	if (m->stopping || m->exiting || m->handed_over) {
		snprintf(why, cap, "the daemon is stopping");
		return -ESHUTDOWN;
	}
	if (upgrade_is_child(m)) {
		snprintf(why, cap, "this master is itself still taking over");
		return -EBUSY;
	}
	if (cds_is_origin(m->config_path)) {
		/* The new master would start on the bootstrap config, without the listeners
		 * whose sockets it inherits, until the service answers. */
		snprintf(why, cap, "the configuration comes from a config discovery service: "
				   "restart instead (the table is kept)");
		return -EOPNOTSUPP;
	}
	if (m->state_path == NULL) {
		snprintf(why, cap,
			 "the allocation table lives in memory (admin.state_dir is "
			 "empty or unusable): a live upgrade needs the state file");
		return -ENOENT;
	}
	rc = start_child(m, binary, why, cap);
	if (rc < 0)
		return rc;
	u->attempt++;
	u->phase = UP_STARTING;
	u->reaped = false;
	u->timeout = timeout > 0 ? timeout : UPGRADE_TIMEOUT_S;
	u->error[0] = '\0';
	ev_io_init(&u->io, io_cb, u->fd, EV_READ);
	u->io.data = m;
	ev_io_start(m->loop, &u->io);
	ev_timer_init(&u->tmo, tmo_cb, u->timeout, 0.);
	u->tmo.data = m;
	ev_timer_start(m->loop, &u->tmo);
	log_info("master", "upgrade %u: started %s as pid %d", u->attempt, binary, (int)u->child);
	return 0;
}

void upgrade_stop(struct master *m)
{
	struct upgrade *u = m->up;

	if (u == NULL || (u->phase != UP_STARTING && u->phase != UP_HANDOVER))
		return;
	fail(m, "the old master was told to stop");
}

bool upgrade_stop_waits(struct master *m, bool deadline)
{
	struct upgrade *u = m->up;

	if (u == NULL || u->phase != UP_FALLBACK)
		return false;
	if (!deadline)
		return true;
	log_error("master",
		  "upgrade: the new binary (pid %d) is not gone at the stop's deadline: %s stays "
		  "as it is, and this master's table in %s",
		  (int)u->child, m->state_path, u->backup);
	u->phase = UP_FAILED;
	reload_deferred_tick(m);	/* says it is not run */
	return false;
}

bool upgrade_in_progress(const struct master *m)
{
	const struct upgrade *u = m->up;

	/* failed: a new binary killed in its start may hold the inherited sockets until it
	 * is reaped, and a reload here may bind their ports again */
	return u != NULL && u->phase != UP_IDLE && (u->phase != UP_FAILED || !child_gone(u));
}

const char *upgrade_handover_busy(const struct master *m)
{
	return m->handing_over || m->handed_over ? UPGRADE_HANDOVER_BUSY : NULL;
}

json_t *upgrade_status(const struct master *m)
{
	const struct upgrade *u = m->up;

	if (u == NULL)
		return json_object();
	/* serving: this master serves (a new master is not until its workers all run) */
	return json_pack("{s:s, s:i, s:b, s:i, s:i, s:i, s:s, s:s, s:s?}", "state",
			 phase_name(u->phase), "pid", (int)getpid(), "serving",
			 !upgrade_is_child(m), "from_pid", (int)m->upgraded_from, "attempt",
			 (int)u->attempt, "new_pid", (int)u->child, "error", u->error, "binary",
			 u->exe, "reload_deferred",
			 m->reload_deferred[0] != '\0' ? m->reload_deferred : NULL);
}

void upgrade_free(struct master *m)
{
	struct upgrade *u = m->up;

	if (u == NULL)
		return;
	stop_watchers(m);
	ev_timer_stop(m->loop, &u->relock);
	if (u->ctl >= 0)
		close(u->ctl);
	for (size_t i = 0; i < u->n_inh; i++)
		if (u->inh[i] >= 0)
			close(u->inh[i]);
	free(u);
	m->up = NULL;
}
