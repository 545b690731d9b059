/* Session-record rings in the shared segment: each worker slot has one bounded
 * single-producer ring of fixed-size "allocation ended" events; the master is its single
 * consumer and turns the events into session records (master/records.c).
 *
 * Writers
 *   - The producer of ring S is the worker running in slot S (when it ends an allocation,
 *     before shm_alloc_retire), or the master while no worker runs in S (take-over, a
 *     dead slot's records). Never two at once.
 *   - The consumer is the master (shm_records_drain), on its tick.
 *   - A push never blocks or waits: an event a full ring has no room for waits in the
 *     producer's private backlog (memory of its process, in the handle), oldest first,
 *     and every later event of that slot behind it. A worker moves it into the ring as
 *     the master frees room (shm_records_flush, from its loop while the backlog is not
 *     empty, and at its stop with a bounded wait); the master, producer of slots without
 *     a worker (take-over, a dead slot's records), writes its own from shm_records_drain.
 *     A take-over's events are moved out of the rings into the master's held queue
 *     before the first worker is forked (shm_records_hold) and written first.
 *   - Events are lost (counted as dropped) when a backlog has no memory or is full
 *     (2 x the table's capacity: only a master that stopped draining fills it), when a
 *     worker gives its backlog up at its stop (the master did not drain it within the
 *     stop's bounded wait) or dies with events in it, and when the ring is full while
 *     the master writes no records or for a lingering worker (shm_records_want,
 *     shm_records_unbuffered: no backlog). A master killed between the take-over's hold
 *     and its first drain loses the held events uncounted.
 * An event in the ring is in the segment, hence in the state file: a worker crash, a
 * restart or an upgrade that takes the segment over (shm/image.c carries undrained events)
 * loses none of them. An event in a backlog dies with its process: a worker's count of
 * them is in its ring (waiting), which the master adds to dropped at its reap (and a
 * take-over, after a kill -9 of the daemon). */
#ifndef TG_SHM_SHM_RECORDS_H
#define TG_SHM_SHM_RECORDS_H

#include <stdbool.h>
#include <stdint.h>

#include "shm/shm.h"
#include "shm/shm_alloc.h"

#define SHM_REC_RING 512u          /* events per slot ring (a power of two) */
#define SHM_REC_PEERS 4u           /* peer addresses an event keeps */
#define SHM_REC_LISTENER_MAX 64u   /* listener name bytes an event keeps (NUL-padded) */

/* Why an allocation ended. */
enum shm_rec_reason {
	SHM_REC_OTHER = 0,
	SHM_REC_REFRESH0,          /* Refresh with LIFETIME 0 */
	SHM_REC_EXPIRY,            /* its lifetime ran out (also: during a restart gap) */
	SHM_REC_DISCONNECT,        /* the client's TCP/TLS connection or DTLS association closed */
	SHM_REC_REVOKE,            /* turngatectl revoke of its credential */
	SHM_REC_ADMIN,             /* turngatectl disconnect */
	SHM_REC_LISTENER_REMOVED,  /* its listener left the configuration */
	SHM_REC_QUOTA,             /* refused over a quota at its creation (never granted) */
	SHM_REC_SHUTDOWN,          /* the daemon stopped or restarted: a stream allocation
				    * (or one a smaller table has no room for) cannot be
				    * taken over */
	SHM_REC_WORKER_CRASH,      /* its worker died and nobody re-adopted it */
	SHM_REC__COUNT
};

/* "refresh0", "expiry", ... */
const char *shm_rec_reason_name(enum shm_rec_reason r);
/* The reason of wk_alloc_destroy's `why` text; SHM_REC_OTHER for an unknown one. */
enum shm_rec_reason shm_rec_reason_of(const char *why);

/* One ended allocation. */
struct shm_rec_ev {
	uint32_t idx;              /* allocation record index */
	uint8_t reason;            /* enum shm_rec_reason */
	uint8_t transport;         /* enum shm_transport */
	uint16_t listener_idx;     /* its listener's slot (shm/shm_lslot.h) */
	uint64_t gen;              /* the record's gen: (idx, gen) names the allocation */
	uint64_t created_ns;       /* CLOCK_MONOTONIC */
	uint64_t ended_ns;         /* CLOCK_MONOTONIC */
	uint64_t ctr[SHM_ACTR__COUNT]; /* final counters, short-circuited deliveries included */
	struct shm_addr client, server, relay, relay2;
	struct shm_addr peers[SHM_REC_PEERS]; /* permissions' addresses (port 0) */
	uint16_t n_peers;          /* permissions in force at the end */
	uint16_t user_len;
	uint8_t owner;             /* worker slot */
	uint8_t carried;           /* 1: of an earlier run's table (take-over): idx/gen are
				    * not this segment's */
	uint8_t start;             /* 1: the allocation began (a start record): ended_ns is
				    * when it was published, reason SHM_REC_OTHER */
	uint8_t pad;
	char username[SHM_ALLOC_USER_MAX];
	char listener[SHM_REC_LISTENER_MAX]; /* its listener's name when the pusher knows it
					      * (the worker), else empty: the master names it
					      * by its slot */
};

/* Producer of `slot`: one event built from record idx (a copy the caller owns or the live
 * record of its own slot) with `reason` at now_ns; listener (NULL: unknown) is its
 * listener's name. Returns 0 (in the ring, or in the backlog behind a full one), -ENOMEM
 * (no memory for the backlog: counted as dropped), -ENOBUFS (a worker's backlog at its cap,
 * records off or an unbuffered handle: counted as dropped), -EINVAL, -EROFS. */
int shm_records_push(struct shm *shm, unsigned slot, uint32_t idx, const struct shm_alloc *rec,
		     enum shm_rec_reason reason, uint64_t now_ns, const char *listener);

/* Producer of `slot`, at the publish of record idx: a start event, pushed only while the
 * master wants them (shm_records_want_start). Returns 0 (pushed or not wanted), or as
 * shm_records_push. */
int shm_records_push_start(struct shm *shm, unsigned slot, uint32_t idx,
			   const struct shm_alloc *rec, uint64_t now_ns, const char *listener);

/* Producer of `slot`: moves what its backlog holds into the ring, as far as there is
 * room. Returns the events still waiting (0: the backlog is empty). */
uint64_t shm_records_flush(struct shm *shm, unsigned slot);
/* Producer of `slot`: the events its backlog holds (process-local; a load). */
uint64_t shm_records_waiting(const struct shm *shm, unsigned slot);
/* Producer of `slot`, giving up (its stop found the master not draining): the backlog's
 * events are counted as dropped and freed. */
void shm_records_abandon(struct shm *shm, unsigned slot);
/* A worker, first thing after the fork: the backlog inherited with the master's handle
 * is the master's to write; it is forgotten here (not counted). From now on this handle's
 * backlog is capped at twice the table's capacity per slot (a push beyond: -ENOBUFS,
 * counted dropped); the master's, which never calls this, is not (a take-over's ends are
 * all written). */
void shm_records_disown(struct shm *shm);
/* Producer of `slot` whose events no master writes any more (a worker lingering after a
 * live upgrade: the new master recorded its calls' ends at its take-over): its backlog is
 * forgotten (not counted) and from now on a full ring drops and counts, never waits. */
void shm_records_unbuffered(struct shm *shm, unsigned slot);
/* Master, after a take-over and before the first worker is forked: moves every ring's
 * pending events and the master's own backlog into its held queue (raw copies, slot by
 * slot, each slot's in push order; nothing is encoded or written), so that the rings are
 * empty for the workers. shm_records_drain writes the held queue before anything the
 * workers push. Returns 0, -EROFS, or -ENOMEM (no held queue: none moved, they stay
 * where they are); an event without memory for its copy is dropped (counted). */
int shm_records_hold(struct shm *shm);
/* Master: whether it writes records (a file, syslog, stdout or a webhook). Off: its
 * drain discards the events, so workers keep no backlog and a full ring drops. */
void shm_records_want(struct shm *shm, bool on);
/* Whether the master writes records (shm_records_want; a load). */
bool shm_records_on(const struct shm *shm);

/* Master: whether workers push start events (admin.session_records.start). */
void shm_records_want_start(struct shm *shm, bool on);

/* The event of record idx (a copy) without queueing it (the master's own records). */
int shm_records_event(const struct shm *shm, uint32_t idx, const struct shm_alloc *rec,
		      enum shm_rec_reason reason, uint64_t now_ns, struct shm_rec_ev *out);

/* Consumer (master): calls fn for each event of the held queue (shm_records_hold), in
 * its order; then for each pending event of every slot, oldest first per slot, and marks
 * them consumed; then for each event of this handle's own backlog (what it pushed as a
 * slot's producer beyond the ring), oldest first per slot. Returns the number of
 * events. */
unsigned shm_records_drain(struct shm *shm, void (*fn)(const struct shm_rec_ev *ev, void *arg),
			   void *arg);

/* Events lost by producers (a backlog without memory, a worker that died or gave up with
 * events in its backlog), plus records the master could not write, since the segment was
 * created (take-overs add the earlier run's). */
uint64_t shm_records_dropped(const struct shm *shm);
/* Records written, and failed webhook deliveries (master's counts, for metrics). */
void shm_records_counts(const struct shm *shm, uint64_t *written, uint64_t *hook_failures);
/* The webhook's records dropped from its full backlog (a counter), and waiting now. */
void shm_records_hook_counts(const struct shm *shm, uint64_t *dropped, uint64_t *backlog);
/* Master: its webhook's figures (dropped: added; backlog: set). */
void shm_records_hook_note(struct shm *shm, uint64_t dropped, uint64_t backlog);

#endif
