/* Master: forks workers into their slots, watches them, respawns them with backoff. */
#include "config.h"

#include "master/master.h"
#include "master/linger.h"
#include "master/relayho.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/grow.h"
#include "common/ipc.h"
#include "common/log.h"
#include "common/mono.h"
#include "shm/shm.h"
#include "worker/worker.h"

/* The limits on a silent worker (no pong) and on one holding up a snapshot grace period
 * come from admin.worker_ping_timeout / admin.worker_stall_timeout of the running config. */
/* Respawn backoff. The first respawn is immediate: the replacement re-adopts the dead
 * worker's UDP allocations, so every millisecond of delay is a gap in their relaying.
 * Further deaths of a worker that ran less than BACKOFF_RESET_S wait 0.1 s doubling to
 * 5 s (a crash loop); a worker that served that long starts over at immediate. */
#define BACKOFF_MIN_S 0.1
#define BACKOFF_MAX_S 5.0
#define BACKOFF_RESET_S 2.0
/* A slot that has had no running worker for this long (every start since failed: a spawn
 * that failed, fork or socketpair, or a worker that died before READY) is given up: the
 * daemon stops with MASTER_EXIT_FAILURE, so that a service manager's restart policy acts
 * instead of a master that serves on short of a worker for good. Long enough to ride out a
 * short shortage (pids.max, a shared RLIMIT_NPROC, ENOMEM, EMFILE) at the capped backoff;
 * a worker that reaches READY starts the window over. */
#define SLOT_DOWN_GIVE_UP_S 60.0

const char *supervise_state_name(enum mworker_state s)
{
	/* clang-format off */
	switch (s) {
	case MW_EMPTY: return "empty";
	case MW_STARTING: return "starting";
	case MW_RUNNING: return "running";
	case MW_STOPPING: return "stopping";
	case MW_DEAD: return "dead";
	case MW_STOPPED: return "stopped";
	}
	/* clang-format on */
	return "?";
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/* close_all_but in the gaps between the sorted keep[] (Linux 5.9): one call per gap, so a
 * master holding a live upgrade's hundreds of thousands of relay sockets forks in
 * milliseconds. -errno when the kernel has no close_range. */
static int close_gaps(const int *keep, size_t n)
{
	unsigned from = 3;

	for (size_t i = 0; i < n; i++) {
		if (keep[i] < 0 || (unsigned)keep[i] < from)
			continue;
		if ((unsigned)keep[i] > from && close_range(from, (unsigned)keep[i] - 1, 0) < 0)
			return -errno;
		from = (unsigned)keep[i] + 1;
	}
	return close_range(from, ~0u, 0) < 0 ? -errno : 0;
}

/* Child side: closes every descriptor except stdio and those in keep[], libraries' too
 * (libev's epoll and signal fds): by ranges, else by walking /proc. */
static void close_all_but(int *keep, size_t n)
{
	int fds[1024];
	size_t count = 0;
	DIR *d;
	struct dirent *de;

	qsort(keep, n, sizeof(int), cmp_int);
	if (close_gaps(keep, n) == 0)
		return;
	/* In rounds: a master holding handed-over connections may have more than fit. */
	do {
		count = 0;
		d = opendir("/proc/self/fd");
		if (d == NULL)
			return;
		while ((de = readdir(d)) != NULL && count < sizeof(fds) / sizeof(fds[0])) {
			char *end;
			long fd = strtol(de->d_name, &end, 10);

			if (*end != '\0' || end == de->d_name || fd <= 2 || fd == dirfd(d))
				continue;
			if (bsearch(&(int){ (int)fd }, keep, n, sizeof(int), cmp_int) == NULL)
				fds[count++] = (int)fd;
		}
		closedir(d);
		for (size_t i = 0; i < count; i++)
			close(fds[i]);
	} while (count == sizeof(fds) / sizeof(fds[0]));
}

void master_child_signals(void)
{
	sigset_t none;
	int sigs[] = { SIGTERM, SIGINT, SIGQUIT, SIGCHLD, SIGHUP, SIGUSR1, SIGUSR2 };

	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
	/* A SIGHUP meant for the master (terminal hangup, a broad kill) must not end workers. */
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

void master_helper_child(int wfd, unsigned limit_s)
{
	master_child_signals();
	signal(SIGALRM, SIG_DFL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Nothing of the master's stays open here (the state file's lock among them). */
	if ((wfd > 3 && close_range(3, (unsigned)wfd - 1, 0) < 0) ||
	    close_range((unsigned)wfd + 1, ~0U, 0) < 0) {
		long max = sysconf(_SC_OPEN_MAX);

		for (int fd = 3; fd < (max > 0 && max < 65536 ? max : 65536); fd++)
			if (fd != wfd)
				close(fd);
	}
	alarm(limit_s);
}

/* Runs in the child after fork: never returns. */
static void child_main(struct master *m, unsigned slot, int ctl_fd, struct worker_listener *wl,
		       size_t n_wl, pid_t parent)
{
	struct worker_heritage h = {
		.slot = slot,
		.slot_count = m->n_slots,
		.shm = m->shm,
		.ctl_fd = ctl_fd,
		.listeners = wl,
		.n_listeners = n_wl,
		.offload = { -1, -1 },
		.handover_rx = m->ho_rx[slot],
		.handover_tx = m->ho_tx,
		.state_path = m->state_path,
		.fdstore = fdstore_on(m),
	};
	uint32_t n_taken = 0;
	struct worker_parked *parked;
	size_t n_parked = 0, nk = 0, cap;
	int *keep;
	char name[32];

	/* The slot's first worker after a take-over adopts from the take-over's list; a
	 * respawn scans (allocations made since are in no list). */
	if (m->workers[slot].last_status == -1 &&
	    (h.adopt = shm_taken_slot(m->shm, slot, &n_taken)) != NULL)
		h.n_adopt = n_taken;
	/* libev records, per signal, the loop that owns it in process-wide state the child
	 * inherits: the master's watchers must be detached or the worker's own loop could not
	 * watch the same signals. (No signalfd is used, so this touches nothing shared.) */
	ev_signal_stop(m->loop, &m->sighup_w);
	ev_signal_stop(m->loop, &m->sigterm_w);
	ev_signal_stop(m->loop, &m->sigint_w);
	ev_signal_stop(m->loop, &m->sigquit_w);
	master_child_signals();
	/* Own process group: a terminal's ^C or a group-wide SIGTERM reaches the master only,
	 * which then drains and stops the workers in order. */
	setpgid(0, 0);
	/* If the master dies the worker must not serve on unsupervised. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(1);
	/* Connections a live upgrade handed over to this slot (master/park.c). */
	parked = park_heritage(m, slot, &n_parked);
	h.parked = parked;
	h.n_parked = n_parked;
	cap = SHM_MAX_LISTENERS + SHM_MAX_SLOTS + 8 + n_parked;
	keep = malloc(cap * sizeof(*keep));
	if (keep == NULL)
		_exit(1);
	for (size_t i = 0; i < n_parked; i++)
		keep[nk++] = parked[i].fd;
	/* The relay sockets a live upgrade handed over to this slot (master/relayho.c). */
	h.relay_rx = relayho_rx(m, slot);
	h.relay_chan = h.relay_rx >= 0;
	if (h.relay_chan)
		keep[nk++] = h.relay_rx;
	keep[nk++] = ctl_fd;
	keep[nk++] = shm_fd(m->shm);
	/* The hand-over channel: the slot's receiving end, every slot's sending end. */
	keep[nk++] = m->ho_rx[slot];
	for (unsigned i = 0; i < m->n_slots; i++)
		keep[nk++] = m->ho_tx[i];
	/* The state file lock: held until the last process of this daemon is gone. */
	if (shm_lock_fd(m->shm) >= 0)
		keep[nk++] = shm_lock_fd(m->shm);
	if (shm_file_lock_fd(m->shm) >= 0)
		keep[nk++] = shm_file_lock_fd(m->shm);
	if (m->offload != NULL) {
		h.offload = m->off_maps;
		keep[nk++] = m->off_maps.c2p_fd;
		keep[nk++] = m->off_maps.p2c_fd;
	}
	for (size_t i = 0; i < n_wl && nk < cap; i++)
		keep[nk++] = wl[i].fd;
	close_all_but(keep, nk);
	snprintf(name, sizeof(name), "worker/%u", slot);
	log_set_procname(name);
	_exit(worker_run(&h));
}

static void ctl_cb(struct ev_loop *loop, ev_io *w, int revents);
static void ctl_linger(struct mworker *w, const struct ipc_msg *msg);
static void ctl_handed_over(struct mworker *w);
static void disc_resend(struct mworker *w);

/* The slot's current listener sockets, as the heritage lists them. */
static size_t slot_listeners(struct master *m, unsigned slot, struct worker_listener *wl,
			     size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < m->n_listeners && n < cap; i++) {
		struct mlistener *l = &m->listeners[i];

		if (l->fds == NULL || l->fds[slot] < 0)
			continue;
		wl[n].name = l->name;
		wl[n].proto = l->proto == CONF_PROTO_TURN_UDP || l->proto == CONF_PROTO_TURN_DTLS
				      ? WORKER_PROTO_UDP
				      : WORKER_PROTO_TCP;
		wl[n].fd = l->fds[slot];
		n++;
	}
	return n;
}

int supervise_spawn(struct master *m, unsigned slot)
{
	struct mworker *w = &m->workers[slot];
	struct worker_listener *wl;
	size_t n_wl;
	int fds[2], rc;
	pid_t pid, parent = getpid();

	assert(m->magic == MASTER_MAGIC && slot < m->n_slots);
	wl = calloc(SHM_MAX_LISTENERS, sizeof(*wl));
	if (wl == NULL)
		return -ENOMEM;
	n_wl = slot_listeners(m, slot, wl, SHM_MAX_LISTENERS);
	rc = ipc_socketpair(fds);
	if (rc < 0)
		goto out;
	rc = shm_slot_spawning(m->shm, slot, NULL);
	if (rc < 0) {
		log_error("master", "slot %u: cannot spawn: %s", slot, strerror(-rc));
		close(fds[0]);
		close(fds[1]);
		goto out;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		log_error("master", "slot %u: fork: %s", slot, strerror(-rc));
		close(fds[0]);
		close(fds[1]);
		/* No child exists: put the slot back to DEAD so the next try may spawn. */
		shm_slot_reaped(m->shm, slot);
		goto out;
	}
	if (pid == 0)
		child_main(m, slot, fds[1], wl, n_wl, parent);
	close(fds[1]);
	shm_slot_set_pid(m->shm, slot, pid);
	w->pid = pid;
	w->ctl_fd = fds[0];
	w->state = MW_STARTING;
	w->started_at = mono_s();
	w->last_pong = w->unanswered_since = w->started_at;
	w->kill_sent = false;
	ev_io_init(&w->ctl_io, ctl_cb, w->ctl_fd, EV_READ);
	w->ctl_io.data = w;
	ev_io_start(m->loop, &w->ctl_io);
	log_info("master", "worker %u started (pid %d, %zu listeners)", slot, (int)pid, n_wl);
	/* A worker forked while draining must refuse new allocations too. */
	if (m->draining)
		ipc_send_drain(w->ctl_fd, 1);
	/* Its frames wait on the socket until its first iteration has adopted the table (or
	 * are kept for a deferred adoption: wk_adopt_disc_keep), so none is applied early. */
	discsent_prune(&w->disc, m->shm, slot);
	disc_resend(w);
	rc = 0;
out:
	free(wl);
	return rc;
}

/* A worker's TURN-TCP connection for another worker (RFC 6062 ConnectionBind): passed on
 * to the owner slot's worker, or dropped (master/handoffq.c, handoffq_pass); the
 * connection is ours from the call on (*fd -1). Every drop shuts it down: the sender may
 * have left a copy in systemd's fd store. A malformed frame never comes here: ipc_recv
 * refuses it (its length included) and shuts its connection down. */
static void ctl_handoff(struct mworker *w, const struct ipc_msg *msg, int *fd)
{
	struct ipc_handoff h;
	int rc = ipc_msg_get(msg, &h, sizeof(h));

	assert(rc == 0);
	(void)rc;
	(void)handoffq_pass(w->m, w->slot, &h, *fd); /* drops logged there */
	*fd = -1;
}

static void ctl_msg(struct mworker *w, const struct ipc_msg *msg, int *fd)
{
	struct ipc_pong pong;

	switch (msg->hdr.type) {
	case IPC_TCP_HANDOFF:
		ctl_handoff(w, msg, fd);
		break;
	case IPC_STREAM_PART:
	case IPC_STREAM:
		park_collect(w, msg, fd);
		break;
	case IPC_LINGER:
		ctl_linger(w, msg);
		break;
	case IPC_HANDED_OVER:
		ctl_handed_over(w);
		break;
	case IPC_FDSTORE:
	case IPC_FDUNSTORE:
		fdstore_msg(w, msg, fd);
		break;
	case IPC_READY:
	case IPC_PONG:
		if (ipc_msg_get(msg, &pong, sizeof(pong)) < 0)
			return;
		if (pong.slot != w->slot || pong.pid != w->pid) {
			log_warn("master", "worker %u: pong claims slot %u pid %d", w->slot,
				 pong.slot, (int)pong.pid);
			return;
		}
		w->last_pong = mono_s();
		w->unanswered_since = 0;
		if (w->state == MW_STARTING) {
			w->state = MW_RUNNING;
			w->down_since = 0;
			upgrade_worker_running(w->m);
		}
		break;
	default:
		log_warn("master", "worker %u: unexpected %s", w->slot,
			 ipc_type_name(msg->hdr.type));
		break;
	}
}

/* The disconnects a dead predecessor had not acted on, to its replacement (what does not
 * fit on the control socket goes at the next tick). */
static void disc_resend(struct mworker *w)
{
	unsigned k = discsent_flush(&w->disc, w->ctl_fd), again = w->disc.repeats;

	if (k > again)
		log_warn("master", "worker %u: %u disconnects re-sent that worker pid %d had not "
			 "acted on", w->slot, k - again, (int)w->disc.dead_pid);
	/* From the 1 s tick: one line a second at most. */
	if (again > 0)
		log_warn("master", "worker %u: %u disconnect(s) by id re-sent again to worker "
			 "pid %d (a repeat: not acted on %u s after the last send)", w->slot, again,
			 (int)w->pid, DISCSENT_REOWE_TICKS);
}

void supervise_disc_tick(struct master *m)
{
	struct discsent *lists[DISCSENT_SLOTS_MAX] = { NULL };
	unsigned n = m->n_slots < DISCSENT_SLOTS_MAX ? m->n_slots : DISCSENT_SLOTS_MAX;

	if (m->workers == NULL)
		return;
	for (unsigned i = 0; i < n; i++)
		lists[i] = &m->workers[i].disc;
	discsent_prune_all(lists, n, m->shm);	/* one table walk for all slots */
	for (unsigned i = 0; i < n; i++) {
		struct mworker *w = &m->workers[i];

		discsent_tick(&w->disc);
		disc_resend(w);
		discsent_report(&w->disc, i);
	}
}

static void ctl_close(struct master *m, struct mworker *w)
{
	if (w->ctl_fd < 0)
		return;
	handoffq_close(w);
	ev_io_stop(m->loop, &w->ctl_io);
	close(w->ctl_fd);
	w->ctl_fd = -1;
}

/* A live upgrade's worker that keeps its TLS calls (worker/linger.c): stopped for the
 * upgrade, which goes on without waiting for its exit. */
static void ctl_linger(struct mworker *w, const struct ipc_msg *msg)
{
	struct master *m = w->m;
	uint32_t n;

	if (!m->handing_over || w->pid <= 0 || ipc_msg_get(msg, &n, sizeof(n)) < 0)
		return;
	linger_worker_detached(w, n);
	ctl_close(m, w);
	w->pid = 0;
	w->state = MW_STOPPED;
	if (supervise_all_down(m))
		upgrade_workers_down(m);
}

/* A live upgrade's worker that handed everything over and went offline (worker.c,
 * wk_handed_over): stopped for the upgrade now, its exit runs beside the take-over. It
 * closed its copy of the instance lock and touches the table no more, so its slot is
 * as a reaped one's; the child watcher logs its exit if we still run then. */
static void ctl_handed_over(struct mworker *w)
{
	struct master *m = w->m;

	if (!m->handing_over || w->pid <= 0)
		return;	/* not parked: its exit is awaited as usual */
	log_info("master", "worker %u (pid %d) handed everything over: stopped, its exit follows",
		 w->slot, (int)w->pid);
	shm_slot_reaped(m->shm, w->slot);
	ctl_close(m, w);
	if (GROW_ARRAY(&w->handed, &w->cap_handed, w->n_handed + 1, 2) == 0)
		w->handed[w->n_handed++] = w->pid;
	else
		log_warn("master", "worker %u (pid %d): out of memory: its exit will not be logged",
			 w->slot, (int)w->pid);
	w->pid = 0;
	w->state = MW_STOPPED;
	if (supervise_all_down(m))
		upgrade_workers_down(m);
}

/* Reads at most max frames from w's channel. */
static void ctl_read(struct mworker *w, int max)
{
	struct ipc_msg *msg = malloc(sizeof(*msg));

	if (msg == NULL)
		return;
	for (int i = 0; i < max && w->ctl_fd >= 0; i++) {
		int fd, rc = ipc_recv(w->ctl_fd, msg, &fd);

		if (rc == -EAGAIN)
			break;
		if (rc == -EPROTO) {
			log_warn("master", "worker %u: malformed control frame", w->slot);
			continue;
		}
		if (rc == -EMFILE) {	/* our descriptor limit */
			park_collect_lost(w, msg);
			continue;
		}
		if (rc < 0) {
			/* EOF: the worker is exiting; ev_child will tell how. */
			ctl_close(w->m, w);
			break;
		}
		ctl_msg(w, msg, &fd);
		if (fd >= 0)
			close(fd);
	}
	free(msg);
}

static void ctl_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	(void)loop;
	(void)revents;
	/* Bounded: a worker cannot keep the master in this callback forever. */
	ctl_read(io->data, 64);
}

/* The next try at w's slot after its backoff (ran: how long its last worker served), or,
 * once the slot has had no running worker for SLOT_DOWN_GIVE_UP_S, the daemon's stop with
 * MASTER_EXIT_FAILURE (main.c's lifecycle step begins it, after a drain in progress). */
static void respawn_schedule(struct mworker *w, double ran)
{
	double now = mono_s(), delay;

	if (w->down_since == 0)
		w->down_since = now;
	if (now - w->down_since >= SLOT_DOWN_GIVE_UP_S) {
		log_error("master",
			  "worker %u: no running worker for %.0f s (every start failed): giving "
			  "up, the daemon stops with status %d (what is open stays in the table)",
			  w->slot, SLOT_DOWN_GIVE_UP_S, MASTER_EXIT_FAILURE);
		w->m->exit_code = MASTER_EXIT_FAILURE;
		return;
	}
	if (ran >= BACKOFF_RESET_S)
		w->backoff_step = 0;
	delay = w->backoff_step == 0 ? 0.0 : BACKOFF_MIN_S;
	for (unsigned i = 1; i < w->backoff_step && delay < BACKOFF_MAX_S; i++)
		delay *= 2;
	if (delay > BACKOFF_MAX_S)
		delay = BACKOFF_MAX_S;
	w->backoff_step++;
	log_info("master", "worker %u: respawning in %.1f s", w->slot, delay);
	ev_timer_set(&w->respawn, delay, 0.);
	ev_timer_start(w->m->loop, &w->respawn);
}

void supervise_respawn(struct master *m, unsigned slot)
{
	struct mworker *w = &m->workers[slot];

	w->state = MW_DEAD;
	if (supervise_spawn(m, slot) < 0)
		respawn_schedule(w, 0.0);
}

static void respawn_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct mworker *w = t->data;

	(void)loop;
	(void)revents;
	if (w->m->stopping || w->state != MW_DEAD)
		return;
	w->restarts++;
	supervise_respawn(w->m, w->slot);
}

static void log_exit(unsigned slot, pid_t pid, int status)
{
	if (WIFEXITED(status))
		log_msg("master", WEXITSTATUS(status) == 0 ? LOG_LVL_INFO : LOG_LVL_ERROR,
			"worker %u (pid %d) exited with status %d", slot, (int)pid,
			WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		log_error("master", "worker %u (pid %d) killed by signal %d (%s)%s", slot,
			  (int)pid, WTERMSIG(status), strsignal(WTERMSIG(status)),
			  WCOREDUMP(status) ? ", core dumped" : "");
}

/* Takes pid off w's workers counted stopped at their IPC_HANDED_OVER; false: not one. */
static bool handed_take(struct mworker *w, pid_t pid)
{
	for (size_t i = 0; i < w->n_handed; i++)
		if (w->handed[i] == pid) {
			w->handed[i] = w->handed[--w->n_handed];
			return true;
		}
	return false;
}

/* A worker counted stopped at its IPC_HANDED_OVER, reaped now: only logged. */
static void reap_handed_over(struct master *m, pid_t pid, int status)
{
	for (unsigned i = 0; i < m->n_slots; i++)
		if (pid > 0 && handed_take(&m->workers[i], pid)) {
			log_exit(i, pid, status);
			return;
		}
}

static void child_cb(struct ev_loop *loop, ev_child *c, int revents)
{
	struct master *m = c->data;
	struct mworker *w = NULL;

	(void)revents;
	for (unsigned i = 0; i < m->n_slots; i++)
		if (m->workers[i].pid == c->rpid)
			w = &m->workers[i];
	if (w == NULL) {
		reap_handed_over(m, c->rpid, c->rstatus);
		upgrade_reaped(m, c->rpid);
		return;
	}
	log_exit(w->slot, w->pid, c->rstatus);
	/* waitpid() returned: the worker can run no more instructions, so its slot may be
	 * forced offline (it can no longer hold a snapshot pointer). */
	shm_slot_reaped(m->shm, w->slot);
	/* What it sent before it exited (a live upgrade's connections) is read first. */
	if (m->handing_over) {
		ctl_read(w, INT32_MAX);
		if (w->pid == 0) {
			handed_take(w, c->rpid);	/* logged above */
			return;	/* its last frame said IPC_HANDED_OVER: counted stopped there */
		}
	}
	ctl_close(m, w);
	w->last_status = c->rstatus;
	w->pid = 0;
	if (m->handing_over && !m->stopping) {
		/* A live upgrade: the slot stays down until the new binary serves (or failed). It
		 * did not hand over (that returned above): if the upgrade fails, its respawn gets
		 * the disconnects it may not have read. */
		discsent_worker_died(&w->disc, (pid_t)c->rpid);
		w->state = MW_STOPPED;
		if (supervise_all_down(m))
			upgrade_workers_down(m);
		return;
	}
	if (m->stopping) {
		w->state = MW_STOPPED;
		/* The last one: exit now rather than at the next tick (a restart waits for it). */
		if (supervise_all_down(m) && !upgrade_stop_waits(m, false))
			ev_break(loop, EVBREAK_ALL);
		return;
	}
	w->state = MW_DEAD;
	/* The disconnects it may not have read go to its replacement, which adopts its
	 * allocations from the table. */
	discsent_worker_died(&w->disc, (pid_t)c->rpid);
	/* A respawn cannot take the dead worker's connections back: out of the store. */
	fdstore_slot_gone(m, w->slot);
	respawn_schedule(w, mono_s() - w->started_at);
}

/* The sending end is shared by every worker and carries what all of them hand to one
 * slot: a larger buffer than the default 208 KiB absorbs a burst while the owner is busy
 * (memory is charged per queued message, not reserved). Above the sysctl ceiling only
 * with CAP_NET_ADMIN; the default works, with more drops under bursts. */
#define HANDOVER_SNDBUF (4 * 1024 * 1024)

/* One SOCK_DGRAM socketpair per slot for the short circuit's hand-over (worker/handover.c).
 * Made once, before the first fork, and never replaced: a respawned worker inherits the
 * same receiving end, and what was sent to the slot meanwhile waits there (the receiver
 * checks each message against the table). Close-on-exec: a live upgrade's new binary
 * makes its own. A socketpair, not sockets bound to names: only the daemon's processes
 * can reach it, and the kernel limits a connected pair by the send buffer alone (no
 * net.unix.max_dgram_qlen). */
static int handover_open(struct master *m)
{
	int bytes = HANDOVER_SNDBUF;

	m->ho_rx = malloc(m->n_slots * sizeof(int));
	m->ho_tx = malloc(m->n_slots * sizeof(int));
	if (m->ho_rx == NULL || m->ho_tx == NULL) {
		free(m->ho_rx);
		free(m->ho_tx);
		m->ho_rx = m->ho_tx = NULL;
		return -ENOMEM;
	}
	for (unsigned i = 0; i < m->n_slots; i++)
		m->ho_rx[i] = m->ho_tx[i] = -1;
	for (unsigned i = 0; i < m->n_slots; i++) {
		int sp[2];

		if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sp) < 0) {
			int rc = -errno;

			log_error("master", "slot %u: hand-over socketpair: %s", i, strerror(-rc));
			return rc;
		}
		m->ho_rx[i] = sp[0];
		m->ho_tx[i] = sp[1];
		if (setsockopt(sp[1], SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) < 0)
			(void)setsockopt(sp[1], SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
	}
	return 0;
}

static void handover_close(struct master *m)
{
	for (unsigned i = 0; m->ho_rx != NULL && i < m->n_slots; i++)
		if (m->ho_rx[i] >= 0)
			close(m->ho_rx[i]);
	for (unsigned i = 0; m->ho_tx != NULL && i < m->n_slots; i++)
		if (m->ho_tx[i] >= 0)
			close(m->ho_tx[i]);
	free(m->ho_rx);
	free(m->ho_tx);
	m->ho_rx = m->ho_tx = NULL;
}

int supervise_init(struct master *m)
{
	int rc = handover_open(m);

	if (rc < 0)
		return rc;
	m->workers = calloc(m->n_slots, sizeof(*m->workers));
	if (m->workers == NULL)
		return -ENOMEM;
	for (unsigned i = 0; i < m->n_slots; i++) {
		struct mworker *w = &m->workers[i];

		w->m = m;
		w->slot = i;
		w->ctl_fd = -1;
		w->last_status = -1;
		ev_timer_init(&w->respawn, respawn_cb, 0., 0.);
		w->respawn.data = w;
	}
	handoffq_init(m);
	ev_child_init(&m->child_w, child_cb, 0, 0);
	m->child_w.data = m;
	ev_child_start(m->loop, &m->child_w);
	return 0;
}

/* One frame to every live worker, with listener listener_idx's socket of its slot, or
 * else fd_all (-1: none). */
static unsigned broadcast(struct master *m, uint16_t type, const void *payload, size_t len,
			  int listener_idx, int fd_all)
{
	unsigned sent = 0;

	for (unsigned i = 0; i < m->n_slots; i++) {
		struct mworker *w = &m->workers[i];
		int fd = fd_all, rc;

		if (w->ctl_fd < 0)
			continue;
		if (listener_idx >= 0)
			fd = m->listeners[listener_idx].fds[i];
		rc = ipc_send(w->ctl_fd, type, payload, len, fd);
		if (rc < 0)
			log_warn("master", "worker %u: cannot send %s: %s", i, ipc_type_name(type),
				 strerror(-rc));
		else
			sent++;
	}
	return sent;
}

unsigned supervise_broadcast(struct master *m, uint16_t type, const void *payload, size_t len,
			     int listener_idx)
{
	return broadcast(m, type, payload, len, listener_idx, -1);
}

unsigned supervise_broadcast_fd(struct master *m, uint16_t type, const void *payload, size_t len,
				int fd)
{
	return broadcast(m, type, payload, len, -1, fd);
}

static void kill_worker(struct mworker *w, const char *why)
{
	if (w->pid <= 0 || w->kill_sent)
		return;
	log_error("master", "worker %u (pid %d) %s: killing it", w->slot, (int)w->pid, why);
	kill(w->pid, SIGKILL);
	w->kill_sent = true;
}

/* A worker that blocks a snapshot grace period too long is stuck inside a callback. */
static void check_gp_stall(struct master *m)
{
	uint64_t age = 0, token;
	unsigned slot = 0;

	if (shm_qsbr_oldest_pending_ns(m->shm, mono_ns(), &age) < 0 ||
	    age < (uint64_t)m->cfg->admin.worker_stall_timeout * 1000000000ull)
		return;
	token = shm_snap_oldest_token(m->shm);
	while (token != 0 && shm_qsbr_blocker(m->shm, token, &slot) == 0 && slot < m->n_slots) {
		kill_worker(&m->workers[slot], "blocks snapshot reclamation");
		slot++;
	}
}

/* A worker is judged by its oldest ping not answered (pings the master never sent, while
 * its own loop stalled, count for nothing), after reading the answers its loop has not
 * read yet: a master that was stopped or blocked finds them queued. */
static bool ping_overdue(struct mworker *w, double now)
{
	double limit = (double)w->m->cfg->admin.worker_ping_timeout;

	if (w->unanswered_since == 0 || now - w->unanswered_since <= limit)
		return false;
	ctl_read(w, 64);
	return w->ctl_fd >= 0 && w->unanswered_since != 0 && now - w->unanswered_since > limit;
}

void supervise_tick(struct master *m)
{
	double now = mono_s();

	for (unsigned i = 0; i < m->n_slots; i++) {
		struct mworker *w = &m->workers[i];

		if (w->ctl_fd < 0 || (w->state != MW_STARTING && w->state != MW_RUNNING))
			continue;
		if (ping_overdue(w, now)) {
			kill_worker(w, "does not answer pings");
			continue;
		}
		if (w->ctl_fd < 0 || (w->state != MW_STARTING && w->state != MW_RUNNING))
			continue;
		if (ipc_send_ping(w->ctl_fd, ++w->ping_seq) == 0 && w->unanswered_since == 0)
			w->unanswered_since = now;
	}
	check_gp_stall(m);
}

void supervise_stop_all(struct master *m, bool immediate)
{
	m->stopping = true;
	for (unsigned i = 0; i < m->n_slots; i++) {
		struct mworker *w = &m->workers[i];

		ev_timer_stop(m->loop, &w->respawn);
		if (w->pid <= 0) {
			if (w->state == MW_DEAD || w->state == MW_EMPTY)
				w->state = MW_STOPPED;
			continue;
		}
		w->state = MW_STOPPING;
		/* The byte says the stop is immediate: a worker that reads the frame first
		 * leaves its loop before the SIGTERM's handler can run. */
		if (w->ctl_fd >= 0)
			ipc_send_stop(w->ctl_fd, immediate);
		if (immediate)
			kill(w->pid, SIGTERM);
	}
}

void supervise_suspend_all(struct master *m, bool park)
{
	for (unsigned i = 0; i < m->n_slots; i++) {
		struct mworker *w = &m->workers[i];

		ev_timer_stop(m->loop, &w->respawn);
		if (w->pid <= 0) {
			w->state = MW_STOPPED;
			continue;
		}
		w->state = MW_STOPPING;
		/* IPC_PARK first: the worker that SIGQUIT stops hands its TURN-TCP
		 * connections over as it exits (one that cannot be told closes them). */
		if (park && w->ctl_fd >= 0) {
			/* with the linger limit: a worker with TLS calls keeps them that long */
			uint32_t linger = m->cfg != NULL ? m->cfg->limits.upgrade_linger : 0;

			(void)ipc_send(w->ctl_fd, IPC_PARK, &linger, sizeof(linger), -1);
		}
		kill(w->pid, SIGQUIT);
	}
}

void supervise_kill_all(struct master *m)
{
	for (unsigned i = 0; i < m->n_slots; i++)
		kill_worker(&m->workers[i], "did not stop in time");
}

bool supervise_all_down(const struct master *m)
{
	for (unsigned i = 0; i < m->n_slots; i++)
		if (m->workers[i].pid > 0)
			return false;
	return true;
}

void supervise_free(struct master *m)
{
	handover_close(m);
	if (m->workers == NULL)
		return;
	for (unsigned i = 0; i < m->n_slots; i++) {
		ctl_close(m, &m->workers[i]);
		ev_timer_stop(m->loop, &m->workers[i].respawn);
		free(m->workers[i].handed);
		discsent_free(&m->workers[i].disc);
	}
	ev_child_stop(m->loop, &m->child_w);
	free(m->workers);
	m->workers = NULL;
}

void master_set_drain(struct master *m, bool on)
{
	struct ipc_drain d = { .on = on ? 1 : 0, .reserved = 0 };

	if (m->draining != on)
		log_info("master", on ? "draining: new allocations are refused"
				      : "drain ended: new allocations are accepted");
	m->draining = on;
	supervise_broadcast(m, IPC_DRAIN, &d, sizeof(d), -1);
}
