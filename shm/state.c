/* The state file: directory checks, the instance lock, refusal of unsafe files (moved
 * aside), take-over into a fresh segment file that replaces the old one atomically. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/mono.h"
#include "shm/shm_internal.h"
#include "shm/shm_state.h"

#define LOCK_POLL_US 1000

struct paths {
	char lock[PATH_MAX], state[PATH_MAX], fresh[PATH_MAX];
};

static int paths_make(const char *dir, const char *name, struct paths *p)
{
	if (name[0] == '\0' || name[0] == '.' || strchr(name, '/') != NULL)
		return -EINVAL;
	if (snprintf(p->lock, sizeof(p->lock), "%s/%s.lock", dir, name) >= (int)sizeof(p->lock) ||
	    snprintf(p->state, sizeof(p->state), "%s/%s.state", dir, name) >=
		    (int)sizeof(p->state) ||
	    snprintf(p->fresh, sizeof(p->fresh), "%s/%s.state.new", dir, name) >=
		    (int)sizeof(p->fresh))
		return -ENAMETOOLONG;
	return 0;
}

/* Creates dir (0700) when missing; refuses one that another user owns or may write. */
static int dir_check(const char *dir, struct shm_takeover *t)
{
	struct stat st;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		int rc = -errno;

		snprintf(t->why, sizeof(t->why), "cannot create %s: %s", dir, strerror(-rc));
		return rc;
	}
	if (stat(dir, &st) < 0) {
		int rc = -errno;

		snprintf(t->why, sizeof(t->why), "%s: %s", dir, strerror(-rc));
		return rc;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(t->why, sizeof(t->why), "%s is not a directory", dir);
		return -ENOTDIR;
	}
	if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
		snprintf(t->why, sizeof(t->why),
			 "%s is owned by uid %u with mode %04o: it must "
			 "be the daemon's (uid %u) and writable by nobody else",
			 dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
			 (unsigned)geteuid());
		return -EPERM;
	}
	return 0;
}

/* The lock moves to the highest number the process may have (capped: a bigger table
 * costs memory in every process). That was meant to make it the last thing a dying process
 * lets go of, since the kernel closes a dying process's descriptors in ascending order. It
 * does the opposite: exit only queues each file's release (task_work), and the queue runs
 * last in, first out, so the lock's highest number comes free first and the successor
 * takes it while the kernel is still closing the killed workers' relay sockets (measured
 * on Linux 6.18, 250,000 allocations: the lock free at once, the old processes done
 * exiting 0.5-1.2 s later). It is kept so: the successor creates and fills its table
 * meanwhile, and what binds a port that is still held waits for it (the listeners:
 * master/listeners.c, relay sockets: worker/adopt.c). At the lowest number the lock would
 * come free only after the sockets of the process that let go of it last, not of every
 * process, so the waits would still be needed. On failure the lock stays where it is.
 * The state file's own lock goes just below (below 1), so it comes free right after. */
static int fd_move_high(int fd, int below)
{
	struct rlimit rl;
	long top = 65535;
	int hi;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    (long)rl.rlim_cur - 1 < top)
		top = (long)rl.rlim_cur - 1;
	top -= below;
	if (top <= fd)
		return fd;
	hi = fcntl(fd, F_DUPFD_CLOEXEC, (int)top);
	if (hi < 0)
		return fd;
	close(fd);	/* the lock belongs to the open file, which hi still refers to */
	return hi;
}

static bool same_file(int a, int b);

/* The file path names is the one fd refers to: 0, -ENOENT (no file there), -ESTALE
 * (another file), or -errno. */
static int path_names(const char *path, int fd)
{
	struct stat sp, sf;

	if (stat(path, &sp) < 0)
		return -errno;
	if (fstat(fd, &sf) < 0)
		return -errno;
	return sp.st_dev == sf.st_dev && sp.st_ino == sf.st_ino ? 0 : -ESTALE;
}

/* flock(fd) exclusively, polling up to wait_ms: 0, or -EBUSY / -errno. */
static int flock_wait(int fd, unsigned wait_ms)
{
	for (unsigned waited = 0;; waited += LOCK_POLL_US / 1000) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		if (waited >= wait_ms)
			return -EBUSY;
		usleep(LOCK_POLL_US);
	}
}

/* Waits for the instance lock; the returned fd holds it. A lock taken on a file that was
 * unlinked or replaced meanwhile (its holder let go of it after removing it) locks nothing
 * the next start would see: the path is opened again, a bounded number of times. */
static int lock_take(const char *path, unsigned wait_ms, struct shm_takeover *t)
{
	int fd = -1, rc = -EBUSY;

	for (int tries = 0; tries < 8; tries++) {
		fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0) {
			rc = -errno;
			snprintf(t->why, sizeof(t->why), "%s: %s", path, strerror(-rc));
			return rc;
		}
		rc = flock_wait(fd, wait_ms);
		if (rc == 0 && path_names(path, fd) == 0)
			return fd_move_high(fd, 0);
		close(fd);
		if (rc < 0)
			break;
		rc = -EBUSY;
	}
	snprintf(t->why, sizeof(t->why),
		 "%s is held by another process (a running turngated, "
		 "or what is left of the previous one)",
		 path);
	return -EBUSY;
}

/* The state file's own lock, on a description of its own of the segment file (the
 * mapping's descriptor is shared with processes that keep it after letting go of the
 * locks: a live upgrade's old master and lingering workers). Taken before NAME.state
 * names the file, held as long as NAME.lock: a start that finds NAME.lock removed (a
 * "stale lock" clean-up) or replaced takes a new NAME.lock at once, and only this lock
 * then tells it that a live daemon still writes NAME.state. Without /proc, path (which
 * must name the same file) is opened instead. Returns the fd or -errno. */
static int file_lock(int seg_fd, const char *path)
{
	char proc[64];
	int fd, rc;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", seg_fd);
	fd = open(proc, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	rc = !same_file(fd, seg_fd) ? -ESTALE : flock(fd, LOCK_EX | LOCK_NB) < 0 ? -errno : 0;
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd_move_high(fd, 1);
}

/* Renames a refused file out of the way, so the next start does not refuse it again and
 * an operator can look at it; never over an earlier one (NAME.state.refused-UTC-PID[.N]). */
static void move_aside(const struct paths *p, struct shm_takeover *t)
{
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	for (int n = 0; n < 100; n++) {
		int len = n == 0 ? snprintf(t->aside, sizeof(t->aside), "%s.refused-%s-%d",
					    p->state, stamp, (int)getpid())
				 : snprintf(t->aside, sizeof(t->aside), "%s.refused-%s-%d.%d",
					    p->state, stamp, (int)getpid(), n);

		if (len >= (int)sizeof(t->aside))
			break;
		if (renameat2(AT_FDCWD, p->state, AT_FDCWD, t->aside, RENAME_NOREPLACE) == 0)
			return;
		if (errno != EEXIST)
			break;
	}
	t->aside[0] = '\0';
}

static int refuse_file(struct shm_takeover *t, enum shm_state_verdict v, const char *why)
{
	t->verdict = v;
	snprintf(t->why, sizeof(t->why), "%s", why);
	return -EBADMSG;
}

/* Opens the earlier run's file for reading if it is safe to read: *fd -1 when there is
 * none. Returns 0, or -EBADMSG with t set (refused; the caller moves it aside). */
static int old_open(const struct paths *p, int *fd, uint64_t *size, struct shm_takeover *t)
{
	struct stat st;
	char why[96];

	*fd = open(p->state, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (*fd < 0) {
		if (errno == ENOENT)
			return 0;
		if (errno == ELOOP)
			return refuse_file(t, SHM_STATE_SYMLINK, "is a symbolic link");
		snprintf(why, sizeof(why), "cannot be opened: %s", strerror(errno));
		return refuse_file(t, SHM_STATE_IO, why);
	}
	if (fstat(*fd, &st) < 0 || !S_ISREG(st.st_mode))
		return refuse_file(t, SHM_STATE_NOT_REGULAR, "is not a regular file");
	if (st.st_uid != geteuid()) {
		snprintf(why, sizeof(why), "belongs to uid %u, not to the daemon's uid %u",
			 (unsigned)st.st_uid, (unsigned)geteuid());
		return refuse_file(t, SHM_STATE_OWNER, why);
	}
	if ((st.st_mode & 077) != 0) {
		snprintf(why, sizeof(why), "has mode %04o: group or others may access it",
			 (unsigned)(st.st_mode & 07777));
		return refuse_file(t, SHM_STATE_MODE, why);
	}
	*size = (uint64_t)st.st_size;
	return 0;
}

/* A new segment file of geometry cfg at p->fresh, mapped into *out. */
static int fresh_create(const struct paths *p, const struct shm_config *cfg, struct shm **out)
{
	int fd, rc;

	if (unlink(p->fresh) < 0 && errno != ENOENT)
		return -errno;
	fd = open(p->fresh, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (fchmod(fd, 0600) < 0) {
		rc = -errno;
		goto fail;
	}
	rc = shm_init_fd(fd, false, cfg, out);
	if (rc == 0)
		return 0;
fail:
	close(fd);
	unlink(p->fresh);
	return rc;
}

/* A live upgrade's pre-copy (shm_image_precopy) of the file its predecessor's workers
 * still write, before it says ready: into shm, *pre_fd the file it read (kept open, so that
 * the take under the lock can tell whether NAME.state is still that file). Only ever an
 * optimisation: whatever goes wrong (no file, a refusal, a record or revocation being
 * written that looks inconsistent now) leaves *pc NULL and t cleared, and the take under
 * the lock judges the whole file as always; why (cap bytes) then says what went wrong. */
static void precopy(const struct paths *p, struct shm *shm, uint64_t now_ns, int *pre_fd,
		    struct shm_precopy **pc, struct shm_takeover *t, char *why, size_t cap)
{
	uint64_t size = 0;
	int fd = -1, rc;

	*pc = NULL;
	*pre_fd = -1;
	rc = old_open(p, &fd, &size, t);
	if (rc == 0 && fd < 0)
		snprintf(why, cap, "no state file");
	else if (rc < 0)
		snprintf(why, cap, "the state file %.1000s", t->why);
	if (rc == 0 && fd >= 0) {
		struct shm_image img = { .fd = fd, .buf = NULL, .size = size };

		rc = shm_image_precopy(shm, &img, now_ns, pc, t);
		if (rc == 0) {
			*pre_fd = fd;
			fd = -1;
		} else if (rc == -EBADMSG) {
			snprintf(why, cap, "%s", t->why);
		} else if (rc == -ENOSPC) {
			snprintf(why, cap, "the new table cannot hold all its records");
		} else {
			snprintf(why, cap, "cannot read the state file: %s", strerror(-rc));
		}
	}
	if (fd >= 0)
		close(fd);
	memset(t, 0, sizeof(*t));
}

static bool same_file(int a, int b)
{
	struct stat sa, sb;

	return a >= 0 && b >= 0 && fstat(a, &sa) == 0 && fstat(b, &sb) == 0 &&
	       sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* upgrade: a live upgrade's new binary (shm_state_open_upgrade), which creates its segment and
 * pre-copies the file before it says ready (ready(ctx, n)) and only then waits for the lock, and
 * which keeps a state file it cannot take where it is (its predecessor wrote it): an error, not a
 * file moved aside. keep_tcp: the take-over keeps TURN-TCP records too (as an upgrade does), for a
 * start that systemd's fd store gave their connections back to. */
static int state_open(const char *dir, const char *name, const struct shm_config *cfg,
		      uint64_t now_ns, unsigned lock_wait_ms, bool upgrade, bool keep_tcp,
		      void (*ready)(void *, uint32_t, const char *), void *ctx, struct shm **out,
		      struct shm_takeover *t)
{
	struct paths p;
	struct shm *shm = NULL;
	struct shm_precopy *pc = NULL;
	uint64_t size = 0;
	int lock_fd = -1, old_fd = -1, pre_fd = -1, rc;

	if (dir == NULL || name == NULL || out == NULL || t == NULL)
		return -EINVAL;
	memset(t, 0, sizeof(*t));
	rc = paths_make(dir, name, &p);
	if (rc < 0) {
		snprintf(t->why, sizeof(t->why), "instance name \"%s\" cannot name a file", name);
		return rc;
	}
	rc = dir_check(dir, t);
	if (rc < 0)
		return rc;
	if (!upgrade) {
		lock_fd = lock_take(p.lock, lock_wait_ms, t);
		if (lock_fd < 0)
			return lock_fd;
	}
	rc = fresh_create(&p, cfg, &shm);
	if (rc < 0) {
		snprintf(t->why, sizeof(t->why), "cannot create %s: %s", p.fresh, strerror(-rc));
		goto fail;
	}
	if (upgrade) {
		char why[sizeof(t->why)] = "";

		/* Most of the copy before the old workers stop: under the lock only what
		 * changed since is copied again (the gap). */
		shm->keep_tcp = true;
		precopy(&p, shm, mono_ns(), &pre_fd, &pc, t, why, sizeof(why));
		if (ready != NULL)
			ready(ctx, shm_precopy_copied(pc), pc != NULL ? NULL : why);
		lock_fd = lock_take(p.lock, lock_wait_ms, t);
		if (lock_fd < 0) {
			rc = lock_fd;
			goto fail;
		}
		/* The records are judged as of now: the old workers made and refreshed
		 * allocations until they stopped, after the caller's now_ns (a record
		 * created after "now" is not one this daemon could have written). */
		now_ns = mono_ns();
	}
	if (old_open(&p, &old_fd, &size, t) == 0 && old_fd >= 0) {
		struct shm_image img = { .fd = old_fd, .buf = NULL, .size = size };
		char why[128] = "";

		/* Held by a live daemon although we hold NAME.lock: its NAME.lock was removed
		 * or replaced. Its allocations are its own; taking them would end them. */
		rc = flock_wait(old_fd, lock_wait_ms);
		if (rc < 0) {
			snprintf(t->why, sizeof(t->why),
				 "%.2000s is held by a running turngated although %.2000s is not "
				 "(was it removed or replaced?): stop that daemon first",
				 p.state, p.lock);
			rc = -EBUSY;
			goto fail;
		}

		/* A live upgrade's old workers hand their TURN-TCP connections over: their
		 * records come along, and a new worker releases those no connection claims. */
		shm->keep_tcp = upgrade || keep_tcp;
		rc = -ESTALE;
		if (pc != NULL && same_file(pre_fd, old_fd)) {
			rc = shm_image_take_precopied(shm, &img, pc, now_ns, t);
			if (rc == -ESTALE)
				snprintf(why, sizeof(why), "%.100s", t->why);
		}
		if (rc == -ESTALE) {
			/* another file, or a pre-copy that cannot be used: the whole file */
			shm_precopy_undo(shm, pc);
			memset(t, 0, sizeof(*t));
			rc = shm_image_take(shm, &img, now_ns, t);
			if (rc == 0 && why[0] != '\0') {
				size_t len = strlen(t->why);

				snprintf(t->why + len, sizeof(t->why) - len,
					 "; the pre-copy was given back (%s)", why);
			}
		}
		if (rc < 0 && rc != -EBADMSG) {
			snprintf(t->why, sizeof(t->why), "cannot read %s: %s", p.state,
				 strerror(-rc));
			goto fail;
		}
	}
	if (t->verdict != SHM_STATE_NONE && t->verdict != SHM_STATE_TAKEN) {
		if (upgrade) {
			rc = -EBADMSG;
			goto fail;
		}
		move_aside(&p, t);
	}
	if (old_fd < 0)
		shm_precopy_undo(shm, pc);	/* the file went away: an empty table */
	if (old_fd >= 0)
		close(old_fd);
	old_fd = -1;
	shm->file_lock_fd = file_lock(shm->fd, p.fresh);
	if (shm->file_lock_fd < 0) {
		rc = shm->file_lock_fd;
		snprintf(t->why, sizeof(t->why), "cannot lock %s: %s", p.fresh, strerror(-rc));
		goto fail;
	}
	if (rename(p.fresh, p.state) < 0) {
		rc = -errno;
		snprintf(t->why, sizeof(t->why), "cannot rename %s: %s", p.fresh, strerror(-rc));
		goto fail;
	}
	shm->lock_fd = lock_fd;
	*out = shm;
	if (pre_fd >= 0)
		close(pre_fd);
	shm_precopy_free(pc);
	return 0;
fail:
	if (pre_fd >= 0)
		close(pre_fd);
	shm_precopy_free(pc);
	if (old_fd >= 0)
		close(old_fd);
	if (shm != NULL) {
		shm_destroy(shm);
		unlink(p.fresh);
	}
	if (lock_fd >= 0)
		close(lock_fd);
	return rc;
}

int shm_state_open(const char *dir, const char *name, const struct shm_config *cfg, uint64_t now_ns,
		   unsigned lock_wait_ms, struct shm **out, struct shm_takeover *t)
{
	return state_open(dir, name, cfg, now_ns, lock_wait_ms, false, false, NULL, NULL, out, t);
}

int shm_state_open_streams(const char *dir, const char *name, const struct shm_config *cfg,
			   uint64_t now_ns, unsigned lock_wait_ms, bool keep_tcp, struct shm **out,
			   struct shm_takeover *t)
{
	return state_open(dir, name, cfg, now_ns, lock_wait_ms, false, keep_tcp, NULL, NULL, out,
			  t);
}

int shm_state_open_upgrade(const char *dir, const char *name, const struct shm_config *cfg,
			   uint64_t now_ns, unsigned lock_wait_ms,
			   void (*ready)(void *, uint32_t, const char *), void *ctx,
			   struct shm **out, struct shm_takeover *t)
{
	return state_open(dir, name, cfg, now_ns, lock_wait_ms, true, true, ready, ctx, out, t);
}

int shm_state_check(const char *dir, const char *name, const struct shm_config *cfg,
		    uint64_t now_ns, struct shm_takeover *t)
{
	struct paths p;
	struct shm *dry = NULL;
	uint64_t size = 0;
	int fd = -1, rc;

	if (dir == NULL || name == NULL || t == NULL)
		return -EINVAL;
	memset(t, 0, sizeof(*t));
	rc = paths_make(dir, name, &p);
	if (rc < 0)
		return rc;
	rc = old_open(&p, &fd, &size, t);
	if (rc == 0 && fd < 0) {
		snprintf(t->why, sizeof(t->why), "%s does not exist", p.state);
		return -ENOENT;
	}
	if (rc == 0)
		rc = shm_create(cfg, "turngate-check", &dry);
	if (rc == 0) {
		struct shm_image img = { .fd = fd, .buf = NULL, .size = size };

		rc = shm_image_take(dry, &img, now_ns, t);
		shm_destroy(dry);
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

/* A lock file that went away is put back only where nothing is: O_EXCL, so one that a
 * second daemon created meanwhile is never taken from it. The new one replaces only the
 * master's own copy of the instance lock (its workers keep the old file's); what guards
 * the table while a worker outlives the master is the state file's own lock. */
static int lock_again(const char *path, struct shm *shm)
{
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	close(shm->lock_fd);
	shm->lock_fd = fd_move_high(fd, 0);
	return 0;
}

int shm_state_verify(const char *dir, const char *name, struct shm *shm, int *state, int *lock)
{
	struct paths p;
	int rc;

	shm_check_handle(shm);
	*state = *lock = 0;
	rc = paths_make(dir, name, &p);
	if (rc < 0)
		return rc;
	if (shm->lock_fd < 0)
		return -ENOLCK;
	*state = path_names(p.state, shm->fd);
	*lock = path_names(p.lock, shm->lock_fd);
	if (*lock == -ENOENT && lock_again(p.lock, shm) == 0)
		*lock = 1;
	return 0;
}

int shm_state_relock(const char *dir, const char *name, struct shm *shm)
{
	struct paths p;
	int fd, rc;

	rc = paths_make(dir, name, &p);
	if (rc < 0)
		return rc;
	fd = open(p.lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = -errno;
		close(fd);
		return rc == -EWOULDBLOCK ? -EBUSY : rc;
	}
	shm_lock_set(shm, fd_move_high(fd, 0));
	rc = file_lock(shm->fd, p.state);
	if (rc < 0) {
		shm_lock_set(shm, -1);
		return rc == -EWOULDBLOCK ? -EBUSY : rc;
	}
	shm->file_lock_fd = rc;
	return 0;
}
