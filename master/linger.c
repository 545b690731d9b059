/* Master: old workers lingering after a live upgrade with their TLS and DTLS calls (status files,
 * master/linger.h), and the old master's side of a worker that starts to linger. */
#include "config.h"

#include "master/linger.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "master/master.h"
#include "shm/shm.h"

#define LINGER_MAX 64

struct linger_file {
	struct linger_info i;
	bool done;
};

/* Parses one status file's line; the pid must be the one its name carries. */
static int linger_parse(const char *path, pid_t name_pid, struct linger_file *out)
{
	char line[256];
	long long deadline;
	int pid, done;
	FILE *f = fopen(path, "re");
	int rc = -EBADMSG;

	if (f == NULL)
		return -errno;
	memset(out, 0, sizeof(*out));
	if (fgets(line, sizeof(line), f) != NULL &&
	    sscanf(line,
		   "turngate-linger 1 pid=%d slot=%u sessions=%u ended_limit=%u deadline=%lld "
		   "done=%d",
		   &pid, &out->i.slot, &out->i.sessions, &out->i.ended_limit, &deadline,
		   &done) == 6 &&
	    pid == name_pid) {
		const char *d = strstr(line, " dtls=");

		if (d == NULL || sscanf(d, " dtls=%u", &out->i.dtls) != 1 ||
		    out->i.dtls > out->i.sessions)
			out->i.dtls = 0;
		out->i.pid = pid;
		out->i.deadline = deadline;
		out->done = done != 0;
		rc = 0;
	}
	fclose(f);
	return rc;
}

static bool pid_alive(pid_t pid)
{
	char path[64], st[256];
	FILE *f;
	bool zombie = false;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return false;
	/* A lingering worker whose old master is still reaping may sit as a zombie. */
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (f != NULL) {
		const char *p;

		if (fgets(st, sizeof(st), f) != NULL && (p = strrchr(st, ')')) != NULL)
			zombie = p[1] == ' ' && p[2] == 'Z';
		fclose(f);
	}
	return !zombie;
}

/* Removes a finished file and counts its calls ended by the limit, once: only the
 * process whose unlink succeeds counts. */
static void linger_harvest(struct master *m, const char *path, const struct linger_file *lf)
{
	char sock[PATH_MAX * 2 + 8];

	if (unlink(path) < 0)
		return;
	/* its forwarding socket, left behind when it was killed */
	snprintf(sock, sizeof(sock), "%s.sock", path);
	(void)unlink(sock);
	if (lf->i.ended_limit > 0 && m->shm != NULL)
		/* Slot 0's counters: no worker writes this one, only the master. */
		shm_ctr_add(shm_slot_counters(m->shm, 0), SHM_CTR_STREAMS_LINGER_ENDED,
			    lf->i.ended_limit);
	log_info("master", "lingering worker pid %d is gone: %u TLS/DTLS calls ended by the "
			   "linger limit",
		 (int)lf->i.pid, lf->i.ended_limit);
}

size_t linger_scan(struct master *m, struct linger_info *out, size_t cap)
{
	char dir[PATH_MAX], prefix[PATH_MAX], path[PATH_MAX * 2];
	const char *slash;
	struct dirent *de;
	size_t n = 0, plen;
	DIR *d;

	if (m->state_path == NULL || (slash = strrchr(m->state_path, '/')) == NULL)
		return 0;
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - m->state_path), m->state_path);
	snprintf(prefix, sizeof(prefix), "%s.linger.", slash + 1);
	plen = strlen(prefix);
	d = opendir(dir[0] != '\0' ? dir : "/");
	if (d == NULL)
		return 0;
	while ((de = readdir(d)) != NULL) {
		struct linger_file lf;
		char *end;
		long pid;

		if (strncmp(de->d_name, prefix, plen) != 0)
			continue;
		pid = strtol(de->d_name + plen, &end, 10);
		if (end == de->d_name + plen || *end != '\0' || pid <= 0 || pid > INT_MAX)
			continue;	/* a .tmp being written, or not ours */
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (linger_parse(path, (pid_t)pid, &lf) < 0)
			continue;
		if (lf.done || !pid_alive((pid_t)pid)) {
			linger_harvest(m, path, &lf);
			continue;
		}
		if (n < cap)
			out[n] = lf.i;
		n++;
	}
	closedir(d);
	return n;
}

json_t *linger_status(struct master *m)
{
	struct linger_info li[LINGER_MAX];
	size_t n = linger_scan(m, li, LINGER_MAX);
	json_t *a = json_array();
	int64_t now = (int64_t)time(NULL);

	for (size_t i = 0; a != NULL && i < n && i < LINGER_MAX; i++)
		json_array_append_new(a, json_pack("{s:i, s:i, s:i, s:i, s:I}", "pid",
						   (int)li[i].pid, "slot", (int)li[i].slot,
						   "sessions", (int)li[i].sessions,
						   "dtls_sessions", (int)li[i].dtls, "ends_in_s",
						   (json_int_t)(li[i].deadline > now
									? li[i].deadline - now
									: 0)));
	return a;
}

void linger_totals(struct master *m, unsigned *workers, unsigned *sessions, unsigned *dtls)
{
	struct linger_info li[LINGER_MAX];
	size_t n = linger_scan(m, li, LINGER_MAX);

	*workers = (unsigned)n;
	*sessions = *dtls = 0;
	for (size_t i = 0; i < n && i < LINGER_MAX; i++) {
		*sessions += li[i].sessions;
		*dtls += li[i].dtls;
	}
}

void linger_stop_all(struct master *m, const char *why)
{
	struct linger_info li[LINGER_MAX];
	size_t n = linger_scan(m, li, LINGER_MAX);

	for (size_t i = 0; i < n && i < LINGER_MAX; i++) {
		log_info("master", "stopping the lingering worker pid %d (%u TLS calls): %s",
			 (int)li[i].pid, li[i].sessions, why);
		kill(li[i].pid, SIGTERM);
	}
}

void linger_worker_detached(struct mworker *w, uint32_t sessions)
{
	log_info("master", "worker %u (pid %d) lingers with %u TLS calls", w->slot, (int)w->pid,
		 (unsigned)sessions);
	w->linger_pid = w->pid;
}

void linger_kill_children(struct master *m)
{
	for (unsigned i = 0; i < m->n_slots; i++) {
		struct mworker *w = &m->workers[i];

		if (w->linger_pid <= 0)
			continue;
		log_warn("master", "worker %u: the lingering pid %d ends its TLS calls (the upgrade "
				   "failed)",
			 w->slot, (int)w->linger_pid);
		if (kill(w->linger_pid, SIGKILL) == 0)
			(void)waitpid(w->linger_pid, NULL, 0);
		/* Reaped here, not by the child watcher: its slot is free for the respawn. */
		shm_slot_reaped(m->shm, w->slot);
		w->linger_pid = 0;
	}
}
