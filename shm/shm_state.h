/* State file: the shared segment in a file that outlives every process of the daemon, so
 * a restart (a crash of every process, systemctl restart, a new binary) takes the
 * allocation table over instead of starting empty.
 *
 * Files, all in one directory owned by the daemon's user and writable by nobody else:
 *   NAME.lock   held (flock) by every process of the running daemon: workers inherit the
 *               open file description, so a successor waits until the last one is gone
 *               and never takes over a table that something still writes;
 *   NAME.state  the segment (0600), mapped MAP_SHARED by the master and its workers, and
 *               locked (flock, a description of its own) by the same processes as
 *               NAME.lock: a start that finds NAME.lock removed or replaced (a "stale
 *               lock" clean-up) gets a new lock at once, and this one refuses it;
 *   NAME.state.refused-<UTC>-<pid>  a file that was not taken over, kept for a post-mortem.
 *
 * Take-over (master, before any fork, lock held): the earlier run's file is read with
 * pread (never mapped: a file truncated under us cannot SIGBUS the master), validated
 * completely, and its live UDP allocation records are copied into a freshly created
 * segment of this run's geometry, which then replaces the file (rename). Copying rather
 * than reusing the file in place is one path for every case: another worker count, another
 * max_allocations, another snapshot size. Each copied record is re-owned by the worker
 * slot the listeners' steering program sends its client to (shm_steer_slot), so a
 * different worker count needs no hand-over between workers.
 *
 * Validation refuses the whole file, never a part of it, when anything is not as this
 * build writes it: not a regular file, a symlink, another owner, group/world access,
 * truncated, not a segment (magic), another layout version, a header whose checksum
 * fails, a region table out of bounds, another record format, another boot (the records'
 * CLOCK_MONOTONIC times would mean nothing), or a live record with an impossible field.
 * Torn records (a process killed mid-update), TCP/TLS/DTLS records (their connection died
 * with the process) and expired ones are not refusals: they are released and counted.
 *
 * Any process may call the image functions (the fuzz target does); only the master opens
 * the state file. Errors are 0 / negative errno; reasons for the log in struct
 * shm_takeover (shm/ does not log).
 */
#ifndef TG_SHM_SHM_STATE_H
#define TG_SHM_SHM_STATE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "shm/shm.h"
#include "shm/shm_alloc.h"

/* What was found at NAME.state. */
enum shm_state_verdict {
	SHM_STATE_NONE = 0,      /* no file: a first start */
	SHM_STATE_TAKEN,         /* taken over */
	SHM_STATE_SYMLINK,
	SHM_STATE_NOT_REGULAR,
	SHM_STATE_OWNER,         /* owned by another user */
	SHM_STATE_MODE,          /* group- or world-accessible */
	SHM_STATE_TRUNCATED,     /* shorter (or longer) than its header says */
	SHM_STATE_FOREIGN,       /* not a turngate segment (magic) */
	SHM_STATE_VERSION,       /* another layout version */
	SHM_STATE_FORMAT,        /* another allocation record format */
	SHM_STATE_OTHER_BOOT,    /* written before the last reboot */
	SHM_STATE_CORRUPT,       /* header checksum, region table or a record inconsistent */
	SHM_STATE_IO,            /* could not be opened or read */
};

struct shm_takeover {
	enum shm_state_verdict verdict;
	char why[PATH_MAX + 256]; /* one line for the log (refusal reason or summary) */
	char aside[PATH_MAX + 64]; /* where a refused file was moved, "" if it was not */
	bool have_key;           /* the nonce key came from the file */
	bool have_counters;      /* the earlier run's slot counters were carried over */
	bool counters_format;    /* ... not: its slot table had another format (logged) */
	unsigned old_slots;
	int old_master;          /* pid of the master that wrote the file */
	uint32_t adopted;        /* records copied, to be re-adopted by the workers */
	uint32_t expired, stream, torn, overflow;   /* released (overflow: table too small) */
	uint32_t queued;         /* LIVE records whose end the earlier run recorded (marked
				  * ending, or its event still queued: the worker was killed
				  * before the retire): ended then, not copied */
	struct shm_lifetime ended_life; /* lifetimes of the LIVE records released: added to
					 * the counters with their ends (have_counters) */
	uint32_t revoked;        /* revocation entries carried over (shm/shm_revoke.h) */
	bool revoke_lost;        /* the file's revocation list had another format: dropped */
	bool precopy;            /* shm_image_take_precopied: */
	uint32_t precopied;      /* records whose pre-copy was kept (their counters copied) */
	uint32_t recopied;       /* pre-copied records that had changed: judged again */
	uint32_t precopy_ended;  /* pre-copied records whose end was recorded since (marked,
				  * or unchanged with their end event queued): their copy
				  * undone, ended (in queued); not in recopied */
};

/* An image of a segment: the file (pread) or a buffer (tests, fuzzing). */
struct shm_image {
	int fd;                  /* >= 0: read from the file */
	const uint8_t *buf;      /* else from here */
	uint64_t size;
	/* Tests only (NULL otherwise): called between the pre-copy's two reads of each chunk
	 * (shm_image_precopy), with the image's offset and length of the chunk. */
	void (*between_reads)(void *ctx, uint64_t off, size_t n);
	void *between_ctx;
};

/* Validates image `img` completely and, when it is acceptable, copies its live UDP
 * records (not expired at now_ns, CLOCK_MONOTONIC) into `dst`, a freshly created
 * segment in which no worker runs yet, with their owners set by shm_steer_slot();
 * the nonce key and (same slot format) the counters come along. On refusal dst is
 * untouched. Returns 0 (t->verdict TAKEN) or -EBADMSG (t->verdict and t->why say why),
 * -EIO / -ENOMEM. */
int shm_image_take(struct shm *dst, const struct shm_image *img, uint64_t now_ns,
		   struct shm_takeover *t);

/* Pre-copy, for a live upgrade (shm_state_open_upgrade): while the earlier run's workers
 * still write the image, validates its header, listener slots and revocation list as
 * shm_image_take() does and copies every record that looks live and takeable now into
 * dst, remembering each one's state word, seqlock sequence and generation (*out, for
 * shm_image_take_precopied; free it with shm_precopy_free). A record that looks torn or
 * inconsistent is not refused here (it may be being written): the take judges it.
 * The pre-copy is a seqlock read: each chunk of the table is read twice (two preads, in
 * that order), and only a record whose bytes up to its counters are the same in both
 * reads, with an even sequence, is copied. A write bracket that ended during the first
 * read (which may have caught its new sequence with stale fields) shows its new fields to
 * the second; one that began or was under way during the first shows an odd or newer
 * sequence to the second: the bytes differ either way (unless it wrote the same values
 * again, which changes nothing). Every other record is left for the take under the lock,
 * as a torn one is. The file is never mapped (a truncated file must not SIGBUS). Returns
 * 0, -EBADMSG (refused: t says why; dst untouched), -ENOSPC (dst cannot hold them all:
 * dst untouched, take the whole file under the lock instead), -EIO / -ENOMEM. */
struct shm_precopy;
/* The copies' gens (and dst's floor) are set this far above the file's highest gen at the
 * end of the pre-copy, so that the earlier run's claims until the lock (one index claimed
 * more often than this) are what it takes for the take under the lock to write them again. */
#define SHM_PRECOPY_GEN_AHEAD (UINT64_C(1) << 20)
int shm_image_precopy(struct shm *dst, const struct shm_image *img, uint64_t now_ns,
		      struct shm_precopy **out, struct shm_takeover *t);

/* The take-over after a pre-copy, once nothing writes the image any more: the records
 * whose state word, sequence and generation are unchanged keep their copy (their
 * counters are copied again); those that changed, and those whose end event the image's
 * record rings hold, lose it, and every record not kept is judged and copied (or ended)
 * as shm_image_take() does, so that dst ends as shm_image_take() would
 * leave it (same allocations, counts, quota counts, port bookings, take-over list in the
 * image's order). img must be the file the pre-copy read. -ESTALE: the pre-copy cannot be
 * used (the file's geometry changed, or memory ran out; t->why says which), dst holds
 * the pre-copy still: give it back (shm_precopy_undo) and take the whole file
 * (shm_image_take), as shm_state_open_upgrade does. On a refusal dst is left
 * half-taken: destroy it. Returns as shm_image_take(). */
int shm_image_take_precopied(struct shm *dst, const struct shm_image *img,
			     struct shm_precopy *pc, uint64_t now_ns, struct shm_takeover *t);

/* Gives back everything the pre-copy put into dst (another file is to be taken over), and
 * the records pre-copied so far (shm_precopy_copied). */
void shm_precopy_undo(struct shm *dst, struct shm_precopy *pc);
uint32_t shm_precopy_copied(const struct shm_precopy *pc);
void shm_precopy_free(struct shm_precopy *pc);

/* Master, before any fork: opens or creates DIR/NAME.lock and waits (up to lock_wait_ms)
 * for the lock, then takes over DIR/NAME.state if it is valid (else moves it aside) and
 * leaves a segment of geometry cfg in its place, mapped and owned by *out (which also
 * keeps the lock: shm_lock_fd). DIR is created (0700) when missing; it must belong to
 * the effective user and be writable by nobody else. NAME must be a plain file name.
 * Returns 0 (t says what happened to an earlier file), -EBUSY (the lock, or the lock of
 * NAME.state itself, is still held: another turngated, or a process of the previous one,
 * runs; the latter while NAME.lock was removed or replaced under it), -ENOTDIR/-EPERM (DIR
 * unusable, t->why says why), or another -errno. */
int shm_state_open(const char *dir, const char *name, const struct shm_config *cfg, uint64_t now_ns,
		   unsigned lock_wait_ms, struct shm **out, struct shm_takeover *t);

/* shm_state_open, keeping the TURN-TCP records too when keep_tcp (a start that systemd's
 * file descriptor store gave their connections back to: master/fdstore.c); a worker
 * releases those no connection claims. */
int shm_state_open_streams(const char *dir, const char *name, const struct shm_config *cfg,
			   uint64_t now_ns, unsigned lock_wait_ms, bool keep_tcp, struct shm **out,
			   struct shm_takeover *t);

/* As shm_state_open(), for the new binary of a live upgrade, whose predecessor still holds the lock
 * (now_ns is not used: the records are judged at the clock's time of the pre-copy, and again at its
 * time once the lock is held, since the predecessor's workers make and refresh allocations until
 * they stop): the new segment is created first and the file pre-copied into it (shm_image_precopy:
 * the records its workers do not change meanwhile are copied once, here), then ready(ctx, n, why)
 * is called with n the records pre-copied and why NULL, or n 0 and why the reason no pre-copy was
 * made (the predecessor then stops its workers and lets go of the lock), then the lock is awaited
 * and what changed since is copied (shm_image_take_precopied), so that neither creating the segment
 * nor copying the unchanged records is part of the gap. A file that cannot be taken over is left
 * where it is and -EBADMSG returned (t says why), since the running binary still serves from it and
 * goes on doing so when the upgrade fails. */
int shm_state_open_upgrade(const char *dir, const char *name, const struct shm_config *cfg,
			   uint64_t now_ns, unsigned lock_wait_ms,
			   void (*ready)(void *, uint32_t, const char *), void *ctx,
			   struct shm **out, struct shm_takeover *t);

/* A dry run of the take-over, without the lock and without touching any file: validates
 * DIR/NAME.state as shm_state_open() would and copies it into a throw-away memory segment
 * of geometry cfg. Returns 0 (t->verdict TAKEN: it could be taken over), -ENOENT (no
 * file), -EBADMSG (refused: t says why), or another -errno. A file that processes still
 * write may show torn records: those are counted, never refused. */
int shm_state_check(const char *dir, const char *name, const struct shm_config *cfg,
		    uint64_t now_ns, struct shm_takeover *t);

/* Master: takes the instance lock DIR/NAME.lock again without waiting, into shm (after
 * shm_lock_set(shm, -1)). Returns 0, -EBUSY (another process holds it), or -errno. */
int shm_state_relock(const char *dir, const char *name, struct shm *shm);

/* Master, while it runs (cheap: two stat and two fstat): whether DIR/NAME.state and
 * DIR/NAME.lock still name the files shm maps and locks. *state and *lock: 0 (yes),
 * -ENOENT (removed), -ESTALE (replaced by another file) or another -errno; a NAME.lock that
 * was removed is created again and locked (O_EXCL: never one another process made), *lock
 * then 1. A state file removed or replaced cannot be put back (a file without a name cannot
 * be linked again): what it holds ends with the daemon. Returns 0, -ENOLCK (shm holds no
 * lock: in memory, or a live upgrade let go of it), or -errno. */
int shm_state_verify(const char *dir, const char *name, struct shm *shm, int *state, int *lock);

/* One word for a verdict ("symlink", "truncated", ...), for logs and tests. */
const char *shm_state_verdict_name(enum shm_state_verdict v);

/* Steering: the worker slot (< n_slots) for a client address, computed exactly as the
 * listeners' SO_ATTACH_REUSEPORT_CBPF program (master/steer.c) computes the socket index
 * from the packet: h = (folded address ^ port) * SHM_STEER_MUL, (h >> SHM_STEER_SHIFT)
 * % n_slots, in 32-bit arithmetic. The fold is the IPv4 address, or the xor of the four
 * 32-bit words of an IPv6 address, each read in network byte order. */
#define SHM_STEER_MUL 0x9e3779b1u
#define SHM_STEER_SHIFT 16
unsigned shm_steer_slot(const struct shm_addr *client, unsigned n_slots);

#endif
