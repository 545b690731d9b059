/* Master: admin unix socket (line-delimited JSON) and its command dispatcher.
 *
 * Protocol: the client writes one JSON object per line, {"cmd":"NAME", ...arguments}; the
 * master answers each with one JSON object on one line: {"ok":true, ...} or
 * {"ok":false,"error":"what went wrong"}. Requests are answered in order, one at a time.
 * Lines are at most ADMIN_LINE_MAX bytes, at most ADMIN_MAX_CLIENTS connections are served,
 * replies are capped at ADMIN_OUT_MAX bytes. A connection that arrives while the table is
 * full takes the place of the client idle longest (nothing being read from it, answered
 * or queued for it) if that one has been idle at least ADMIN_IDLE_EVICT_S, else of the
 * client stalled longest (a request partly sent, or a reply not read) if that one has made
 * no progress for ADMIN_STALL_EVICT_S; otherwise it is refused ("too many admin
 * clients"). Master process only.
 */
#ifndef TG_MASTER_ADMIN_H
#define TG_MASTER_ADMIN_H

#include <jansson.h>
#include <sys/types.h>

#include "master/master.h"

#define ADMIN_LINE_MAX 8192
#define ADMIN_MAX_CLIENTS 16
/* Seconds without a byte either way, with no request partly read and no reply queued,
 * after which a client of a full table gives its place to a new one (never sooner, and
 * never while the table has room: an idle client is otherwise kept as long as it likes). */
#define ADMIN_IDLE_EVICT_S 10
/* Seconds without a byte either way for a client in the middle of a request (partly sent)
 * or of a reply (not read): with no idle client to close, a full table closes the one
 * stalled longest once it has stalled this long (every reply is written at once, so no
 * request waits on the daemon meanwhile). */
#define ADMIN_STALL_EVICT_S 30
#define ADMIN_BACKLOG 16   /* connections the socket queues while no master takes them */
#define ADMIN_OUT_MAX (32u << 20)
#define ADMIN_DEFAULT_LIMIT 1000
/* `allocations` answers in pages: at most ADMIN_PAGE_MAX entries, after reading at most
 * ADMIN_PAGE_SCAN records of the table, so one reply costs the master's loop a bounded
 * time whatever the table's size and the filter; next_cursor says where the next page
 * starts. */
#define ADMIN_PAGE_MAX 5000
#define ADMIN_PAGE_SCAN 65536u
/* `top` with "rows": at most this many of allocations and of users. */
#define ADMIN_TOP_ROWS_MAX 1000

/* Who sent a request: the connecting process's credentials (SO_PEERCRED, taken when it
 * connected). uid (uid_t)-1 and pid 0 when the kernel did not say. */
struct admin_peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
};

/* Creates the socket at path with the given mode (0600 by default in the config), after
 * removing a stale socket file left by a dead daemon (a live one is -EADDRINUSE; a
 * non-socket file is -EEXIST). Returns 0 and *out, or -errno. */
int admin_open(struct master *m, const char *path, unsigned mode, struct admin **out);

/* Closes every connection, removes the socket file (unless the master handed it over to
 * a live upgrade's new master). Accepts NULL. */
void admin_close(struct admin *a);

/* The listening socket, -1 for NULL. */
int admin_fd(const struct admin *a);

/* A socket inherited by a live upgrade is served from here on (no-op otherwise). */
void admin_resume(struct admin *a);

/* The old master of a live upgrade: hold (true) stops taking new connections from the
 * moment it hands over, so that the connections made during the hand-over wait in the
 * socket's queue for the new master, which takes them once it serves, instead of being
 * taken by a master about to exit and reset when it does; false takes them again (the
 * upgrade failed). Connections already taken are served on. Accepts NULL. */
void admin_hold(struct admin *a, bool hold);

/* Runs one request line from peer and returns the reply object (new reference; NULL only
 * when out of memory). Never fails on bad input: malformed JSON, a missing or unknown
 * command and bad arguments all produce {"ok":false,"error":...}. A command that changes
 * something is logged (scope "admin", INFO) with the peer's uid and pid before it runs,
 * and its refusal after; an argument that only a privileged peer (uid 0 or the daemon's
 * own uid) may give is refused to anyone else (upgrade's "binary"). */
json_t *admin_dispatch(struct master *m, const struct admin_peer *peer, const char *line,
		       size_t len);

/* ---- top (master/admin_top.c) ------------------------------------------------------ */

/* One ranked row: an allocation (idx, gen of the record), or a user (idx: one of its
 * records; n: its allocations), with what it relayed since the previous ranked sample. */
struct admin_top_pick {
	uint32_t idx;
	uint64_t gen;
	uint64_t bytes[2], pkts[2];   /* [0] to the peer, [1] from the peer */
	int limited[2];               /* enum shm_bw_verdict of a drop in the interval, 0 none */
	unsigned n;
};

struct admin_top_result {
	uint64_t mono;                /* CLOCK_MONOTONIC ns of this sample */
	double interval;              /* s since the previous ranked sample, 0 for the first */
	unsigned live;                /* live allocations seen */
	unsigned n_users_seen;        /* distinct users seen */
	struct admin_top_pick *allocs, *users; /* best first, n_allocs and n_users of them */
	size_t n_allocs, n_users;
};

/* Ranks every live allocation and user by bytes (then packets) relayed since the
 * previous call, keeping `rows` of each, and makes this sample the baseline of the next.
 * Kept between calls in m->top (freed with admin_top_free): the baseline, 64 bytes per
 * record of the table, allocated at the first call; and the users table, 72 bytes a
 * slot, at least two slots a user of the sample (a power of two), kept only up to
 * 524,288 slots (37.7 MB at 250,000 users): a sample with more than 262,144 users
 * allocates a larger one and frees it before returning. Returns 0 or -ENOMEM; free
 * out with admin_top_result_free. Master only. */
int admin_top_rank(struct master *m, size_t rows, struct admin_top_result *out);
void admin_top_result_free(struct admin_top_result *r);
void admin_top_free(struct admin_top *t);

#endif
