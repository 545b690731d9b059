/* Master: the disconnects sent to each slot's worker, kept until the table shows them acted
 * on, so that a replacement of a worker killed before it read them gets them again.
 *
 * An admin disconnect (IPC_DISC_INDEX, IPC_DISC_USER) goes straight to the worker's control
 * socket; a worker that dies (crash, SIGKILL, heartbeat kill) before it reads the frame
 * takes it with it, and its successor adopts the allocation from the table. So each slot
 * keeps what was sent to its worker: an index entry until record idx is no longer LIVE
 * with that generation and owner, a user entry until no LIVE record of the slot that was
 * created before it was sent matches the user. IPC_DISC_REVOKED needs no entry: the
 * adoption ends the records the shm revocation list refuses (worker/adopt.c). Master
 * process only, on its loop. */
#ifndef TG_MASTER_DISCSENT_H
#define TG_MASTER_DISCSENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct shm;

#define DISCSENT_MAX 256u	/* entries per slot; past it the oldest is dropped */
#define DISCSENT_SLOTS_MAX 256u	/* slots (a record's owner is 8 bits) */
/* Ticks after a re-send to a replacement at which an INDEX entry still not acted on is
 * owed to it again: the replacement keeps at most WK_DISC_PENDING_MAX (16) frames while
 * its adoption is deferred and drops the rest, and the master cannot tell when it adopted.
 * A second index frame is exact: it names the record's generation. A user entry is NOT
 * owed again: its frame carries no time, so the worker would end every allocation of the
 * user it holds, also those made after the request (on the replacement too); it is re-sent
 * once, at the replacement's spawn, and even that one may end the user's allocations made
 * on the slot between the request and the crash. */
#define DISCSENT_REOWE_TICKS 5u
/* Times an index entry is owed again to the same worker (DISCSENT_REOWE_TICKS apart);
 * after the last one it is no longer re-sent to that worker (discsent_report says so). */
#define DISCSENT_REOWE_MAX 3u

struct discsent_entry {
	char *user;         /* IPC_DISC_USER: the user (owned); NULL for IPC_DISC_INDEX */
	uint64_t gen;       /* IPC_DISC_INDEX: the record's generation */
	uint64_t sent_ns;   /* CLOCK_MONOTONIC when first sent (user entries' prune test) */
	uint32_t idx;       /* IPC_DISC_INDEX: the record */
	bool owed;          /* to be sent to the slot's current worker (discsent_flush) */
	bool keep;          /* scratch of discsent_prune_all */
	uint8_t reowe;      /* ticks until owed again after a re-send (discsent_tick); 0 none */
	uint8_t reowed;     /* times owed again to the current worker (<= DISCSENT_REOWE_MAX) */
	bool replaced;      /* owed to a replacement since it was recorded (re-owe applies) */
};

/* One slot's list, oldest first. Zeroed is empty. */
struct discsent {
	struct discsent_entry *e;  /* DISCSENT_MAX entries, made on first use */
	unsigned n, n_user;        /* entries, of which user entries */
	uint64_t dropped;          /* dropped for the bound since the last discsent_report */
	uint64_t gave_up;          /* index entries sent for the last time (DISCSENT_REOWE_MAX)
				    * since the last discsent_report */
	unsigned repeats;          /* of the last discsent_flush's sends, those owed again to
				    * the same worker (not the first send to a replacement) */
	pid_t dead_pid;            /* the worker that died with entries not acted on; 0 */
};

/* Records a disconnect sent to the worker of slot: by index (idx, gen), or by user with
 * now_ns (CLOCK_MONOTONIC) read BEFORE the frame was sent (a record created after the
 * stamp must not keep the entry). A repeat updates the entry kept (a user's send time to
 * the later one) and takes no second one: it is not owed (it was just sent), and an index
 * entry's re-owe countdown keeps running (starts, if it was owed to a replacement). A
 * full list is pruned first (with shm; NULL: not), and drops its oldest entry only if
 * still full (counted for discsent_report). 0 or -ENOMEM (nothing recorded). */
int discsent_add_index(struct discsent *d, const struct shm *shm, unsigned slot, uint32_t idx,
		       uint64_t gen);
int discsent_add_user(struct discsent *d, const struct shm *shm, unsigned slot, const char *user,
		      uint64_t now_ns);

/* Drops the entries the table shows acted on (see the file comment) from every slot's
 * list, d[s] for slot s < n_slots (NULL: none). Reads one record per index entry, and
 * walks the table once for all slots, and only while some list holds a user entry; in
 * that walk the others' records have their state word alone read, and a record of a slot
 * with user entries its generation and username, copied in full (for its creation time)
 * only when the name matches one of the slot's user entries. */
void discsent_prune_all(struct discsent *const *d, unsigned n_slots, const struct shm *shm);
/* The same for slot's list alone. */
void discsent_prune(struct discsent *d, const struct shm *shm, unsigned slot);

/* From the 1 s tick, after the prune: an index entry re-sent DISCSENT_REOWE_TICKS ticks ago
 * and still kept is owed again, at most DISCSENT_REOWE_MAX times (see
 * DISCSENT_REOWE_TICKS); user entries never. */
void discsent_tick(struct discsent *d);

/* The slot's worker (pid) died: every entry left is owed to its replacement. */
void discsent_worker_died(struct discsent *d, pid_t pid);

/* Sends the owed entries on ctl_fd (the slot's new worker), in order, until one does not
 * fit (retried at the next call); each index entry sent is owed again DISCSENT_REOWE_TICKS
 * ticks later if still kept then (up to DISCSENT_REOWE_MAX times). Returns how many were
 * sent; d->repeats, how many of those were owed again rather than first re-sent. */
unsigned discsent_flush(struct discsent *d, int ctl_fd);

/* Logs, for the slot, the entries dropped for the bound, and those sent for the last time,
 * since the last call (from the 1 s tick: at most one line of each a second). */
void discsent_report(struct discsent *d, unsigned slot);

/* Frees the list; accepts a zeroed one. */
void discsent_free(struct discsent *d);

#endif
