/* Master: where the shared segment lives (the instance's state file, or memory only) and
 * what a start took over from an earlier run (shm/shm_state.h). */
#include "config.h"

#include "master/master.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "shm/shm.h"
#include "shm/shm_quota.h"
#include "shm/shm_state.h"

#define STATE_DEFAULT_DIR "/run/turngate"
/* statfs f_type of the file systems that end with the machine (linux/magic.h). */
#define STATE_TMPFS_MAGIC 0x01021994
#define STATE_RAMFS_MAGIC 0x858458f6
/* A master killed with its workers still running: they get SIGTERM from the kernel
 * (PR_SET_PDEATHSIG) and are gone in milliseconds with few allocations, in a second or
 * more at 250,000 on loaded cores (closing their relay sockets); a successor waits this
 * long. */
#define STATE_LOCK_WAIT_MS 10000u

/* admin.state_dir; when unset $TURNGATE_STATE_DIR, else the directory of an absolute
 * admin socket path (the instance's runtime directory: /run/turngate by default), else
 * STATE_DEFAULT_DIR. "" when the table lives in memory only. Returns a malloc'd string or
 * NULL. */
static char *state_dir_of(const struct conf *cfg)
{
	const char *sock = cfg->admin.admin_socket, *slash, *env = getenv("TURNGATE_STATE_DIR");

	if (cfg->admin.state_dir != NULL)
		return strdup(cfg->admin.state_dir);
	if (env != NULL)
		return strdup(env);
	if (sock == NULL || sock[0] != '/' || (slash = strrchr(sock, '/')) == sock)
		return strdup(STATE_DEFAULT_DIR);
	return strndup(sock, (size_t)(slash - sock));
}

/* admin.name as a file name: anything but [A-Za-z0-9._-] becomes '_' ("ns/gw" -> "ns_gw"),
 * and a leading '.' too. */
static void instance_file_name(const char *name, char *out, size_t cap)
{
	size_t n = 0;

	for (const char *p = name != NULL && name[0] ? name : "turngate"; *p && n + 1 < cap; p++) {
		char c = *p;
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '-' || c == '_' || (c == '.' && n > 0);

		out[n++] = ok ? c : '_';
	}
	out[n] = '\0';
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void log_takeover(const char *dir, const char *file, const struct shm_takeover *t)
{
	switch (t->verdict) {
	case SHM_STATE_NONE:
		log_info("master",
			 "state file %s/%s.state created (allocations will survive a "
			 "restart)",
			 dir, file);
		break;
	case SHM_STATE_TAKEN:
		log_info("master", "state file %s/%s.state: %s", dir, file, t->why);
		if (t->counters_format)
			log_warn("master",
				 "state file %s/%s.state: counters not carried: slot format "
				 "differs (the earlier build had other counters; they start from 0)",
				 dir, file);
		break;
	default:
		log_warn("master",
			 "state file %s/%s.state refused (%s): %s; %s%s; starting with "
			 "an empty allocation table",
			 dir, file, shm_state_verdict_name(t->verdict), t->why,
			 t->aside[0] ? "moved to " : "replaced", t->aside);
		break;
	}
}

/* The instance's state directory (malloc'd; "" when the table lives in memory) and its
 * file name without the extension (file). NULL when out of memory. */
static char *state_names(const struct master *m, char *file, size_t cap)
{
	char *dir = state_dir_of(m->cfg);

	if (dir != NULL)
		instance_file_name(m->cfg->admin.name, file, cap);
	return dir;
}

/* The state file is the daemon's shared memory: on a disk every page it dirties is written
 * back, and after a reboot the file is refused anyway (another boot) and moved aside. */
static void warn_not_memory(const char *dir)
{
	struct statfs fs;

	if (statfs(dir, &fs) < 0 || (unsigned long)fs.f_type == STATE_TMPFS_MAGIC ||
	    (unsigned long)fs.f_type == STATE_RAMFS_MAGIC)
		return;
	log_warn("master",
		 "state directory %s is not on a tmpfs: the allocation table is written back "
		 "to disk as it changes, and after a reboot its file is not taken over "
		 "(written during another boot) but moved aside, one more file on the disk "
		 "per boot; put admin.state_dir on a tmpfs such as /run",
		 dir);
}

static void say_ready(void *ctx, uint32_t precopied, const char *why)
{
	if (why != NULL)
		log_info("master",
			 "upgrade: no allocations copied before the old workers stop (%s): the "
			 "whole table is copied under the lock",
			 why);
	else
		log_info("master",
			 "upgrade: %u allocations copied before the old workers stop (what "
			 "changes meanwhile is copied again under the lock)",
			 precopied);
	upgrade_test_hold();
	upgrade_report_ready(ctx);
}

int state_segment_open(struct master *m, const struct shm_config *sc)
{
	struct shm_takeover t;
	char file[256];
	char *dir = state_names(m, file, sizeof(file));
	int rc;

	if (dir == NULL)
		return -ENOMEM;
	if (dir[0] == '\0' && upgrade_is_child(m)) {
		log_error("master",
			  "admin.state_dir is empty: a live upgrade needs the state file");
		rc = -ENOENT;
		goto out;
	}
	if (dir[0] == '\0') {
		log_info("master", "admin.state_dir is empty: the allocation table lives in memory "
				   "and ends with the daemon");
		rc = -ENOENT;
	} else {
		rc = upgrade_is_child(m)
			     ? shm_state_open_upgrade(dir, file, sc, mono_ns(), STATE_LOCK_WAIT_MS,
						      say_ready, m, &m->shm, &t)
			     : shm_state_open_streams(dir, file, sc, mono_ns(), STATE_LOCK_WAIT_MS,
						      fdstore_passed(m) > 0, &m->shm, &t);
		if (rc < 0 && upgrade_is_child(m)) {
			/* Never an empty table: the old master serves on from this file. */
			log_error("master", "state file %s/%s.state: %s", dir, file, t.why);
			goto out;
		}
		if (rc == -EBUSY) {
			log_error("master", "state file %s/%s.state: %s", dir, file, t.why);
			goto out;
		}
		if (rc < 0)
			log_error("master",
				  "state directory %s unusable: %s; the allocation table "
				  "lives in memory and ends with the daemon",
				  dir, t.why);
	}
	if (rc < 0) {
		rc = shm_create(sc, "turngate", &m->shm);
		if (rc < 0)
			log_error("master", "cannot create shared memory: %s", strerror(-rc));
		else
			shm_nonce_key_set(m->shm, m->nonce_key);
		goto out;
	}
	log_takeover(dir, file, &t);
	warn_not_memory(dir);
	m->state_created = t.verdict != SHM_STATE_TAKEN && !upgrade_is_child(m);
	m->takeover_adopted = t.verdict == SHM_STATE_TAKEN ? t.adopted : 0;
	if (t.have_key)
		shm_nonce_key_get(m->shm, m->nonce_key);
	else
		shm_nonce_key_set(m->shm, m->nonce_key);
	free(m->state_path);
	m->state_path = malloc(strlen(dir) + strlen(file) + 8);
	if (m->state_path != NULL)
		sprintf(m->state_path, "%s/%s.state", dir, file);
out:
	free(dir);
	return rc;
}

int state_upgrade_check(struct master *m, const struct shm_config *sc, char *why, size_t cap)
{
	struct shm_takeover t;
	char file[256];
	char *dir = state_names(m, file, sizeof(file));
	int rc;

	if (dir == NULL)
		return -ENOMEM;
	rc = dir[0] == '\0' ? -ENOENT : shm_state_check(dir, file, sc, mono_ns(), &t);
	if (rc < 0)
		snprintf(why, cap, "state file %s/%s.state: %s", dir, file,
			 dir[0] == '\0' ? "admin.state_dir is empty" : t.why);
	free(dir);
	return rc;
}

/* The directory (malloc'd) and file name without the extension (file) of the state file
 * this master opened (m->state_path), whatever a reload has made of admin.name and
 * admin.state_dir since. NULL when out of memory or the name does not fit. */
static char *state_opened_names(const struct master *m, char *file, size_t cap)
{
	const char *slash = strrchr(m->state_path, '/');
	size_t n;

	if (slash == NULL)
		return NULL;
	n = strlen(slash + 1);
	if (n <= strlen(".state") || n - strlen(".state") >= cap)
		return NULL;
	memcpy(file, slash + 1, n - strlen(".state"));
	file[n - strlen(".state")] = '\0';
	return strndup(m->state_path, (size_t)(slash - m->state_path));
}

int state_relock(struct master *m)
{
	char file[256];
	char *dir = m->state_path != NULL ? state_opened_names(m, file, sizeof(file))
					  : state_names(m, file, sizeof(file));
	int rc;

	if (dir == NULL)
		return -ENOMEM;
	rc = shm_state_relock(dir, file, m->shm);
	free(dir);
	return rc;
}

static void state_watch_log(struct master *m, const char *dir, const char *file, int st,
			    int lk)
{
	if (st < 0 && m->state_lost == 0 && (st == -ENOENT || st == -ESTALE)) {
		m->state_lost = st;
		log_error("master",
			  "state file %s/%s.state was %s while this daemon runs: its %u "
			  "allocations will NOT survive a restart or live upgrade (%s); keep "
			  "it running until its calls have ended, and leave the files in %s alone",
			  dir, file, st == -ENOENT ? "removed" : "replaced by another file",
			  master_alloc_count(m),
			  st == -ENOENT ? "the next start begins with an empty table"
					: "the next start takes the other file over instead",
			  dir);
	}
	if (lk == 1)
		log_warn("master", "lock file %s/%s.lock was removed while this daemon runs: "
				   "created and locked again", dir, file);
	else if (lk < 0 && !m->lock_lost && (lk == -ENOENT || lk == -ESTALE)) {
		m->lock_lost = true;
		log_error("master",
			  "lock file %s/%s.lock was %s while this daemon runs: a second turngated "
			  "on this state directory is refused by the state file's own lock only; "
			  "leave the files in %s alone",
			  dir, file, lk == -ENOENT ? "removed" : "replaced by another file", dir);
	}
}

void state_watch(struct master *m)
{
	char file[256];
	char *dir;
	int st, lk;

	if (m->state_path == NULL || m->shm == NULL || upgrade_in_progress(m))
		return;
	dir = state_opened_names(m, file, sizeof(file));
	if (dir == NULL)
		return;
	if (dir[0] != '\0' && shm_state_verify(dir, file, m->shm, &st, &lk) == 0)
		state_watch_log(m, dir, file, st, lk);
	free(dir);
}

void state_forget_created(struct master *m)
{
	if (!m->state_created || m->state_path == NULL || m->shm == NULL ||
	    master_alloc_count(m) > 0)
		return;
	if (unlink(m->state_path) == 0)
		log_info("master", "state file %s removed (this start failed)", m->state_path);
	else
		log_warn("master", "state file %s: cannot remove: %s", m->state_path,
			 strerror(errno));
	m->state_created = false;
}

/* The allocation counts' exact total (shm/shm_quota.h: taken when a record is published,
 * given back when it ends or is released), in O(1): a scan of the table read one page per
 * record, a cost that grew with the capacity, on every status, /status and stats (issue
 * 42). */
unsigned master_alloc_count(const struct master *m)
{
	return (unsigned)shm_quota_total(m->shm);
}
