/* The master process: shared state of supervision, listeners, reload and the admin socket.
 *
 * Process model: exactly one master per daemon, single-threaded, on libev's default loop.
 * Everything the master knows hangs off one struct master that main() creates and passes
 * to every function here; nothing is global. Workers never see this struct (fork copies
 * it, but the child only uses its struct worker_heritage).
 */
#ifndef TG_MASTER_MASTER_H
#define TG_MASTER_MASTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <ev.h>
#include <jansson.h>

#include "common/ipcq.h"
#include "common/ipcq_ev.h"
#include "conf/conf.h"
#include "master/discsent.h"
#include "offload/offload.h"

struct shm;
struct shm_config;
struct admin;
struct admin_top;
struct ipc_handoff;

#define MASTER_MAGIC 0x4d535452u /* "MSTR" */
/* turngated's exit status when it stops because something failed (at start or at run
 * time); a stop that was asked for exits 0, a usage error 2. */
#define MASTER_EXIT_FAILURE 1
#define MASTER_NONCE_KEY_LEN 32

/* Supervision state of one worker slot, as the master sees it. */
enum mworker_state {
	MW_EMPTY = 0, /* never started */
	MW_STARTING,  /* forked, no READY/PONG yet */
	MW_RUNNING,   /* answered */
	MW_STOPPING,  /* sent STOP (shutdown) */
	MW_DEAD,      /* reaped; respawn pending (backoff timer) */
	MW_STOPPED,   /* reaped during shutdown; stays down */
};

struct mworker {
	struct master *m;
	unsigned slot;
	enum mworker_state state;
	pid_t pid;
	int ctl_fd;               /* master's end of the control socketpair, -1 when none */
	ev_io ctl_io;
	ev_timer respawn;
	double started_at;        /* mono_s() of the last fork */
	double last_pong;         /* mono_s() of the last PONG/READY (or the spawn) */
	double unanswered_since;  /* mono_s() of the oldest ping (or the spawn) not answered
				   * by a PONG/READY yet; 0: none */
	uint64_t ping_seq;        /* last ping sent */
	unsigned restarts;        /* respawns so far */
	unsigned backoff_step;    /* consecutive quick deaths */
	double down_since;        /* mono_s() when the slot lost its running worker (or a start
				   * first failed); 0 while a worker is READY */
	int last_status;          /* raw waitpid status of the previous incarnation, -1 none */
	bool kill_sent;           /* SIGKILL already sent for a hang */
	pid_t linger_pid;         /* a live upgrade left it serving its TLS calls
				   * (master/linger.c); 0 none */
	pid_t *handed;            /* n_handed of this slot's workers that said
				   * IPC_HANDED_OVER, counted stopped, not reaped yet: their
				   * exits are logged when reaped (child_cb). Several when the
				   * slot handed over again (a failed upgrade's respawned
				   * worker, in the next upgrade) before the first was reaped */
	size_t n_handed, cap_handed;
	/* Frames to this worker waiting for room on ctl_fd (master/handoffq.c): the queue,
	 * made on first use, its EV_WRITE watcher, active only while some wait, and the
	 * frames dropped when it could not be made (common/ipcq_ev.h). */
	struct ipcq_ev handoffq;
	/* The admin disconnects sent to this slot's worker that the table does not show acted
	 * on yet: re-sent to its replacement if it dies first (master/discsent.h). */
	struct discsent disc;
};

/* One configured listener and its sockets: one per worker slot, kept open by the master so
 * a respawned worker gets the same sockets back. */
struct mlistener {
	char *name;
	enum conf_proto proto;
	int *fds;                 /* n_fds (= n_slots) entries; -1 where not open */
	unsigned n_fds;
	uint16_t port;            /* port actually bound (resolves port 0) */
	char *bind_text;          /* address bound, for logs and status */
};

enum reload_outcome {
	RELOAD_FAILED = 0,        /* invalid config or an error: nothing changed */
	RELOAD_APPLIED,
	RELOAD_REFUSED,           /* valid, but the guard refused it: nothing changed */
};

struct reload_result {
	bool ok;                  /* outcome == RELOAD_APPLIED */
	enum reload_outcome outcome;
	bool forced;              /* applied with force over the guard's refusal */
	char *reason;             /* refused: why; applied: the guard's reason when forced
				   * or from the discovery service (an empty config), else
				   * NULL */
	double at;                /* ev_now */
	char *trigger;            /* "startup", "SIGHUP", "admin", "inotify", "loglevel" */
	json_t *errors;           /* array of diagnostic lines (errors first, then warnings) */
};

struct dnsr;

struct master {
	uint32_t magic;
	struct ev_loop *loop;

	/* command line */
	const char *config_path;  /* NULL: the embedded default */
	char *log_override;       /* -l or admin loglevel: wins over the config's loglevel */
	unsigned workers_cli;     /* --workers / --udp-thread-num; 0: from config */
	bool watch;               /* -w: reload on config file change (inotify) */

	/* configuration */
	struct conf *cfg;         /* the running config (owned) */
	uint64_t generation;      /* of the published snapshot */
	struct reload_result last_reload;
	/* A reload asked (SIGHUP, inotify) while a live upgrade was in progress: its trigger,
	 * "" when none (reload_defer, reload_deferred_tick, reload_deferred_pass). */
	char reload_deferred[32];
	uint8_t nonce_key[MASTER_NONCE_KEY_LEN];
	double started_at;

	/* shared memory and workers */
	struct shm *shm;
	char *state_path;         /* the state file, NULL when the table lives in memory */
	bool state_created;       /* this start made it (no takeover): a failed start removes it */
	unsigned takeover_adopted; /* records taken over from an earlier run at start */
	int state_lost;           /* 0, or why the state file is no longer ours (state_watch):
				   * -ENOENT removed, -ESTALE replaced; logged once */
	bool lock_lost;           /* NAME.lock removed or replaced (logged once) */
	unsigned n_slots;
	char workers_why[96];     /* where n_slots came from, for status ("auto: ...") */
	uint64_t fd_limit, fd_wanted, fd_hard; /* RLIMIT_NOFILE set at start (master/sizing.c) */
	struct admin_top *top;    /* baseline of `top`'s ranking (master/admin_top.c), NULL */
	struct mworker *workers;  /* n_slots entries */
	/* The descriptors that wait in every worker's hand-off queue together (handoffq.c):
	 * at most a quarter of RLIMIT_NOFILE, so that a flood of hand-offs for a worker that
	 * does not read leaves the master descriptors for its own work. */
	struct ipcq_fds handoff_fds;
	/* The short circuit's hand-over channel (worker/handover.c): per slot, a SOCK_DGRAM
	 * socketpair made before the first fork and kept open for the master's life, so a
	 * respawned worker reads the same receiving end and every worker keeps sending to
	 * it. ho_rx[s]: slot s's receiving end (its worker only); ho_tx[s]: the sending end
	 * every worker inherits. n_slots entries each, NULL before supervise_init. */
	int *ho_rx, *ho_tx;
	ev_child child_w;

	/* listeners */
	struct mlistener *listeners;
	size_t n_listeners;

	/* live upgrade (master/upgrade.c) */
	struct upgrade *up;
	bool handing_over;        /* our workers stop for a new binary: do not respawn */
	bool handed_over;         /* the new binary serves: exit, leave the shared sockets */
	/* The new master that serves (handed_over), while it is not reaped: where main() sends
	 * a reload deferred by the upgrade once this master let go of every socket; 0: none. */
	pid_t successor;
	pid_t upgraded_from;      /* this master took over from that pid (0: it did not) */
	struct park_list *parked; /* stream connections handed over (master/park.c) */
	struct relay_list *relays; /* relay channels of an upgrade (master/relayho.c) */
	struct fdstore *fdstore;  /* systemd's fd store (master/fdstore.c) */

	/* lifecycle */
	bool draining;            /* refusing new allocations (SIGTERM or admin drain) */
	bool exiting;             /* SIGTERM drain: exit once allocations reach 0 */
	bool stopping;            /* workers told to stop; exit when all reaped */
	double drain_deadline;
	double stop_deadline;
	bool publish_pending;     /* a snapshot waits for a free arena slot */
	/* main()'s status once the loop ends: 0 for a stop asked for (a signal, a live
	 * upgrade handed over), MASTER_EXIT_FAILURE when something failed at run time (set
	 * where it failed; main.c's lifecycle step then stops the daemon now). */
	int exit_code;

	ev_signal sighup_w, sigterm_w, sigint_w, sigquit_w, sigusr2_w;
	ev_timer tick_w;          /* reclaim, pings, drain progress */
	unsigned long tick_count;
	double last_tick;             /* mono_s() of the last tick (0: not serving yet) */
	ev_timer watchdog_w;
	uint64_t watchdog_usec;

	struct admin *admin;
	void *watcher;            /* inotify state (master/watch.c) */
	void *httpd;              /* HTTP servers (master/httpd.c) */
	uint64_t reloads_ok, reloads_failed, reloads_refused;
	/* Snapshot reclamation, as of the last reclaim pass (each tick and before a publish
	 * that found the arena full): freed so far, still waiting for a grace period. */
	uint64_t snaps_reclaimed;
	unsigned snaps_pending;
	/* A private copy of the last published snapshot blob (for metrics' names). */
	void *snap_blob;
	size_t snap_len;

	/* DNS names re-resolved (master/dns.c); cfg_epoch counts the configs a reload
	 * installed, so that answers asked for an earlier one are dropped. */
	struct dnsr *dns;
	uint64_t cfg_epoch;

	/* session records (master/records.c) */
	struct records *records;
	ev_signal sigusr1_w;      /* reopen the session record file */

	/* kernel fast path (master/fastpath_ctl.c): NULL and -1 fds when off */
	struct tgo *offload;
	struct tgo_maps off_maps;
	enum conf_offload off_engine;  /* the engine the running programs were opened for */
	bool off_pinned;               /* the maps are pinned in bpffs (shared with the old
					* master of a live upgrade, until this one serves) */
	struct tgo_count off_base[TGO_MAX_LISTENERS];  /* a listener slot's kernel counts
							* when it was last freed */
};

/* ---- listeners (master/listeners.c) --------------------------------------------- */

/* Opens one SO_REUSEPORT socket per slot for listener l of cfg (TURN-UDP and TURN-DTLS:
 * bound datagram socket; TURN-TCP and TURN-TLS: listening stream socket). Returns 0 and
 * fills *out, or -errno after logging (nothing left open). */
int listener_open(const struct conf_listener *l, unsigned n_slots, struct mlistener *out);

/* Attaches the steering program (master/steer.c) to the reuseport group of fd, a bound
 * UDP socket of the given family whose group has n_slots sockets in slot order: each
 * datagram goes to slot shm_steer_slot(source). Returns 0 or -errno (logged). */
int steer_attach(int fd, int family, unsigned n_slots, const char *name);

/* The address listener l binds (its bind_address, else its address, and port). */
int listener_bind_addr(const struct conf_listener *l, struct sockaddr_storage *ss);

/* Fills *out with n sockets of listener l that are already open and bound (inherited by a
 * live upgrade: its reuseport group and steering program come with them). Takes the fds.
 * Returns 0 or -ENOMEM. */
int listener_adopt(const struct conf_listener *l, const int *fds, unsigned n,
		   struct mlistener *out);

/* Closes every socket and frees the strings. Accepts NULL / a zeroed struct. */
void listener_close(struct mlistener *l);

/* Index of the listener named name in m->listeners, or -1. */
ssize_t listener_find(const struct master *m, const char *name);

/* Refuses a SO_REUSEPORT group turngated did not create: l's address and port (its
 * protocol's UDP or listening TCP sockets) may be held only by sockets of m->listeners,
 * of pend[0..n_pend) (listeners opened by the same start or reload) and of l itself, which
 * a live upgrade shares with the old master and its workers. Returns 0, or -EADDRINUSE
 * after logging the other holder (pid and program where /proc shows them). Without socket
 * diagnostics in the kernel it logs a warning and returns 0. */
int listener_check_owned(const struct master *m, const struct mlistener *pend, size_t n_pend,
			 const struct mlistener *l);
/* For status and doctor: whether another process holds l's address and port now, and who
 * (ports_holder_text() into buf). */
bool listener_foreign_holder(const struct master *m, const struct mlistener *l, char *buf,
			     size_t cap);

/* ---- port ownership (master/ports.c) --------------------------------------------- */

/* Another process's socket on a listener's address and port. */
struct port_holder {
	pid_t pid;                /* 0: not found under /proc (another user's, another pid ns) */
	char comm[17];            /* its program (/proc/PID/comm) */
	unsigned uid;             /* the socket's owner */
	unsigned long inode;
	char addr[INET6_ADDRSTRLEN + 8]; /* the address it is bound to */
};

/* Looks, with socket diagnostics (NETLINK_SOCK_DIAG), for a socket of type (SOCK_DGRAM:
 * unconnected UDP; SOCK_STREAM: listening TCP) whose address and port overlap ours and whose
 * inode is none of own[0..n_own). Returns 1 (*out filled), 0 (none), -errno (diagnostics
 * unavailable). Any process; reads /proc only when it finds one. */
int ports_foreign_holder(int type, const struct sockaddr_storage *ours, const unsigned long *own,
			 size_t n_own, struct port_holder *out);
/* "pid 123 (turnserver) on 127.0.0.1:3478", or the uid and inode when the pid is unknown. */
void ports_holder_text(const struct port_holder *h, char *buf, size_t cap);
/* The socket inode of fd (what socket diagnostics and /proc/PID/fd name), 0 on error. */
unsigned long ports_inode(int fd);

/* ---- workers (master/supervise.c) ------------------------------------------------ */

/* The worker slots' supervision state and their hand-over socketpairs (before any fork).
 * Returns 0 or -errno (logged). */
int supervise_init(struct master *m);
/* Forks the worker of one slot. Returns 0 or -errno (logged). */
int supervise_spawn(struct master *m, unsigned slot);
/* Forks the worker of a slot that has none; when that fails, tries again after the slot's
 * backoff, and once the slot has had no running worker for 60 s (SLOT_DOWN_GIVE_UP_S in
 * supervise.c) sets m->exit_code (the daemon stops, after a drain in progress). */
void supervise_respawn(struct master *m, unsigned slot);
/* Sends one frame to every live worker; returns how many got it. */
/* listener_idx >= 0 attaches that listener's socket of each worker's slot. */
unsigned supervise_broadcast(struct master *m, uint16_t type, const void *payload, size_t len,
			     int listener_idx);
/* The same frame with the same descriptor fd to every live worker. */
unsigned supervise_broadcast_fd(struct master *m, uint16_t type, const void *payload, size_t len,
				int fd);
/* From the tick timer: pings, hang detection, QSBR stall detection. */
void supervise_tick(struct master *m);
/* From the 1 s tick timer: each slot's kept disconnects (master/discsent.h) pruned, those
 * owed to a respawned worker that did not fit at its spawn sent, drops reported. */
void supervise_disc_tick(struct master *m);
/* Asks every worker to stop (IPC_STOP, then SIGTERM at the deadline, SIGKILL after). */
void supervise_stop_all(struct master *m, bool immediate);
/* SIGKILLs every worker still alive (stop deadline passed). */
void supervise_kill_all(struct master *m);
/* Live upgrade: SIGQUIT (stop now, allocations stay in the table) to every worker, after
 * IPC_PARK (hand the TURN-TCP connections over at exit) when park; the slots stay down
 * (no respawn) while m->handing_over. */
void supervise_suspend_all(struct master *m, bool park);
/* True when no worker process is alive. */
bool supervise_all_down(const struct master *m);
const char *supervise_state_name(enum mworker_state s);
/* In a child of the master: the master's signals back to their defaults (SIGHUP and
 * SIGPIPE ignored), none blocked. */
void master_child_signals(void);
/* In a helper child of the master that answers through wfd (a DNS resolver): the master's
 * signals reset, killed with the master, every other descriptor closed, and a SIGALRM
 * after limit_s seconds ends it. */
void master_helper_child(int wfd, unsigned limit_s);
void supervise_free(struct master *m);

/* ---- frames to a worker that must not be lost (master/handoffq.c) ------------------- */

/* What waits for one worker's control socket: at most this many bytes (common/ipcq.h),
 * about 3,300 RFC 6062 hand-offs; a frame past that is dropped (logged). */
#define MASTER_HANDOFFQ_MAX_BYTES (8u * 1024u * 1024u)
/* Sends a frame to w's worker, or queues it behind what waits for that worker when its
 * control socket is full; the queue goes in order as the socket has room (an EV_WRITE
 * watcher while some wait). Frames sent directly (ipc_send, broadcasts) may overtake it:
 * only frames that need no order with those may use it (today the IPC_TCP_HANDOFF the
 * master passes on). flags and the returns as ipcq_send() (with IPCQ_OWN_FD, fd is the
 * queue's from the call on, closed whatever the outcome, and shut down first when it is
 * dropped unsent: IPCQ_SHUT_ON_DROP), and -ESRCH when the slot has no worker now
 * (w->ctl_fd -1: dropped, logged at debug level). */
int handoffq_send(struct mworker *w, uint16_t type, const void *payload, size_t len, int fd,
		  unsigned flags);
/* Sets up every slot's hand-off queue, none made yet (supervise_init, once m->workers and
 * m->fd_limit are there): the queues together hold at most a quarter of m->fd_limit's
 * descriptors (m->handoff_fds). */
void handoffq_init(struct master *m);
/* A worker's IPC_TCP_HANDOFF (from its slot `from`) for h->slot's worker: passed on
 * through handoffq_send(), or dropped, shut down and closed, when h->slot is not another
 * worker's slot (-EINVAL, logged at debug level). fd is ours from the call on, whatever
 * the outcome. Returns 0 or handoffq_send()'s error. */
int handoffq_pass(struct master *m, unsigned from, const struct ipc_handoff *h, int fd);
/* w's worker went away (its control socket closes: an exit, a crash, a stop, the end of
 * its part in a live upgrade): what waits for it is dropped, logged, the descriptors the
 * queue owns closed (a waiting hand-off's client sees its connection close). Called by
 * the control socket's close; safe when nothing waits. */
void handoffq_close(struct mworker *w);
/* From the master's tick: logs the drops of every hand-off queue held back by the drop
 * lines' rate, and those of the frames that found no queue (common/ipcq_ev.h,
 * ipcq_ev_report). */
void handoffq_tick(struct master *m);

/* ---- reload (master/reload.c) ---------------------------------------------------- */

/* Loads the config (path or default) for the first time; on error prints the diagnostics
 * to stderr. Returns 0 or -errno. */
int reload_initial(struct master *m);
/* Startup, before the workers exist: opens the listeners of m->cfg through the reload
 * path, as a reload from a configuration without listeners would (one path opens
 * listeners, nginx's ngx_init_cycle); a listener that cannot be opened fails the start.
 * Returns 0 or -errno (what was opened is closed again). */
int reload_open_listeners(struct master *m);
/* Size of the blob m->cfg compiles to, to size the shm snapshot arena. */
int reload_snap_size(struct master *m, size_t *len);
/* Publishes the current m->cfg as a new snapshot (used at start and by loglevel). */
int reload_publish(struct master *m);
/* Frees the old snapshots whose grace period completed; updates m->snaps_reclaimed and
 * m->snaps_pending. Never blocks. */
void reload_reclaim(struct master *m);
/* reload_run flags. FORCE: apply a config that the guard refuses. */
#define RELOAD_FORCE 1u
/* Parse, validate, guard, build, publish, listener diff. Records the result in
 * m->last_reload. The guard (reload_guard_pass) refuses a config that would remove every
 * listener (a typo such as `listners:`), or remove or restart listeners while a listener
 * key was not recognised, unless flags has RELOAD_FORCE; a config from the discovery service is
 * authoritative (applied, the reason logged as a warning and kept in m->last_reload).
 * Returns 0 on success, -EINVAL for an invalid config, -ECANCELED when the guard refused
 * it (nothing changed either way), -EAGAIN while a live upgrade is in progress
 * (upgrade_in_progress: nothing is read, the reload is deferred, reload_defer), other
 * -errno. */
int reload_run(struct master *m, const char *trigger, unsigned flags);
/* The admin `reload`'s answer while a live upgrade is in progress: it is refused, not
 * deferred (its client is told and may retry). */
#define RELOAD_UPGRADE_BUSY "a live upgrade is in progress: nothing reloaded; retry once " \
	"it ends (the master that serves then reloads)"
/* Old master: a reload asked (trigger) while a live upgrade is in progress is remembered,
 * logged, and run once the attempt ends: passed on to the new master (SIGHUP) when it
 * serves, once this master has let go of the sockets they share (reload_deferred_pass),
 * or run here, from the tick, once the attempt failed, the new binary is reaped and this
 * master serves again (reload_deferred_tick); dropped, logged, when it stops or drains. A
 * reload here would open listeners and HTTP servers the new master never gets, and change
 * what it already read or copied. */
void reload_defer(struct master *m, const char *trigger);
/* From the tick: runs the deferred reload once no upgrade is in progress; drops it,
 * logged, while the master stops or drains (SIGTERM). */
void reload_deferred_tick(struct master *m);
/* Old master, from main() after master_free (every shared socket closed: a reload of the
 * new master may bind their ports again): the deferred reload goes to m->successor as
 * SIGHUP, logged; or, when the new master is gone, it is logged as not passed on; a master
 * that did not hand over logs it as not run. Reads only m->reload_deferred,
 * m->handed_over and m->successor. */
void reload_deferred_pass(struct master *m);
/* The reload guard (master/reload_guard.c), between validation and anything changing:
 * objects when the diff delta[0..n) from m->cfg to nc removes every listener, removes
 * listeners while diags has an unknown key in a listener, or
 * restarts a listener while diags has an unknown key in that listener. Returns
 * false (refused: logged as an error, reason filled) when it objects and flags has no
 * RELOAD_FORCE; true to go on, with reason filled when it objected and was overridden
 * (forced, logged as a warning) or when the config comes from the discovery service,
 * which is authoritative (the objection, or an empty config, logged as a warning). */
bool reload_guard_pass(struct master *m, const char *trigger, unsigned flags,
		       const struct conf *nc, const struct conf_diags *diags,
		       const struct conf_listener_delta *delta, size_t n, char *reason, size_t cap);
/* Sets (spec) or clears (NULL) the log override, in the master and the workers.
 * Returns 0 or -EINVAL for a malformed spec. */
int reload_set_loglevel(struct master *m, const char *spec);

/* ---- kernel fast path (master/fastpath_ctl.c) ------------------------------------ */

/* Loads and attaches the programs of admin.offload_engine (before the workers are
 * forked: they inherit m->off_maps). A failure is one log line and user space, never an
 * error: returns 0. */
/* master/sizing.c, at start: raises RLIMIT_NOFILE towards what the allocation table may
 * need (before the first fork: workers inherit it), and logs what the table reserved and
 * why (after the segment exists). */
void master_sizing_descriptors(struct master *m);
void master_sizing_log(const struct master *m);
/* For status: {capacity, source (auto|configured), relay_ports, relay_addresses,
 * segment_bytes, descriptors, descriptors_wanted}. The table's capacity is the running
 * segment's (a reload that changes the port space resizes it at the next start). */
json_t *master_sizing_json(const struct master *m);

int master_offload_open(struct master *m);
/* True when a reload from oc to nc changes admin.offload_engine or offload_interfaces. */
bool master_offload_changed(const struct conf *oc, const struct conf *nc);
/* Such a reload: detaches, opens with the new settings, hands the workers the new maps
 * (IPC_OFFLOAD_MAP; IPC_OFFLOAD_OFF when it is now off), which enter their channels again. */
void master_offload_reopen(struct master *m);
/* At exit: after a live upgrade (handed_over) the programs and maps stay for the new
 * master, and in a new master that failed before it served (pinned maps) for the old
 * one; any other end empties the maps and detaches (the allocations stay in the state
 * file: a next start's workers enter their channels again). */
void master_offload_close(struct master *m);
/* Removes the entries that expired or whose channel the table no longer holds. */
void master_offload_gc(struct master *m);
/* From the tick timer: master_offload_gc every few seconds. */
void master_offload_tick(struct master *m);
struct shm_counters;
/* Adds what the kernel relayed to per-listener, per-cluster and global counters. */
void master_offload_add(const struct master *m, struct shm_counters *sum);
/* Listener slots freed by a publish (bit i: slot i, shm/shm_lslot.h): the kernel's
 * counters of those slots count from zero for their next listener. */
void master_offload_slots_freed(struct master *m, uint64_t freed);
/* {"engine", "active", "interfaces": [{"name", "engine"}], "entries", "packets_to_peer",
 * "packets_to_client"} for status. */
json_t *master_offload_json(const struct master *m);
void reload_result_clear(struct reload_result *r);

/* Starts (on=true) or ends the refusal of new allocations (IPC_DRAIN to every worker). */
void master_set_drain(struct master *m, bool on);

/* ---- state file (master/segment.c) ----------------------------------------------- */

/* Creates m->shm of geometry sc: in the instance's state file under admin.state_dir,
 * taking over the allocation table an earlier run left there (or refusing it, logged),
 * or in memory when admin.state_dir is "" or unusable (logged). m->nonce_key is replaced
 * by the taken-over one, else stored in the segment. Before any fork.
 * Returns 0, -EBUSY (another daemon holds the state file: fatal), or -errno. */
int state_segment_open(struct master *m, const struct shm_config *sc);

/* A live upgrade's new master, before the old one stops anything: would the take-over
 * of the state file succeed with geometry sc? Returns 0, else -errno with why filled. */
int state_upgrade_check(struct master *m, const struct shm_config *sc, char *why, size_t cap);

/* Takes the instance lock again after a failed live upgrade let go of it. Returns 0,
 * -EBUSY (a process of the new binary still holds it) or -errno. */
int state_relock(struct master *m);
/* Master, from its tick (every few seconds) and at the stop: notices its state file or
 * lock file removed or replaced under it (an ERROR once each: the allocations will not
 * survive a restart), re-creates a removed lock file. Nothing while no lock is held (in
 * memory, or a live upgrade let go of it) or during an upgrade. */
void state_watch(struct master *m);
/* A start that fails before it serves: removes the state file it created (never one it took
 * over, nor a live upgrade's, nor one that holds allocations). */
void state_forget_created(struct master *m);
/* Number of allocations in the shared table (the counts' total, O(1)). */
unsigned master_alloc_count(const struct master *m);

/* ---- stream connections across a live upgrade (master/park.c) -------------------- */

struct ipc_msg;
struct worker_parked;
/* Old master, while its workers hand over (m->handing_over): a piece of a parked
 * connection from worker w; a whole one is kept with its socket (*fd taken: -1). */
void park_collect(struct mworker *w, const struct ipc_msg *msg, int *fd);
/* Old master: a frame of w's whose descriptor did not fit under our limit (ipc_recv's
 * -EMFILE): an IPC_STREAM's socket ends with the pieces before it, counted. */
void park_collect_lost(struct mworker *w, const struct ipc_msg *msg);
/* The handed-over sockets that ended in this master (too large, malformed, over the
 * descriptor limit, a record the take-over did not keep) into
 * stream_handovers_ended: while none of its workers runs. */
void park_count_lost(struct master *m);
/* Connections kept (old master) or received (new master). */
size_t park_count(const struct master *m);
/* Old master: sends every kept connection to the new master on fd, then the relay
 * channels when it takes them (master/relayho.c), then IPC_STREAM_END, within timeout_ms.
 * Keeps its copies. Returns 0 or -errno. */
int park_forward(struct master *m, int fd, int timeout_ms);
/* New master, after the take-over copied the table: receives the old master's
 * connections from fd until IPC_STREAM_END (or timeout_ms), each given to the slot that
 * owns its allocation's record now (one without a record: its old slot). Returns 0 or
 * -errno (what came is kept). */
int park_receive(struct master *m, int fd, int timeout_ms);
/* The connections for slot's worker (an array to free; its blobs and fds stay ours),
 * sorted by record, or NULL with *n 0. Called in the child before worker_run. */
struct worker_parked *park_heritage(const struct master *m, unsigned slot, size_t *n);
/* Closes our copies and frees the list: after the workers that take them were forked, or
 * when the new master serves. */
void park_release(struct master *m);

/* Takes blob (a checked park blob) and fd (closed on failure) into the list. 0 or
 * -EBADMSG. */
int park_add(struct master *m, uint8_t *blob, size_t len, int fd);
/* After a take-over: renumbers the records the connections from the before'th on name
 * (as they were in the image) to this table's, and closes those whose record was not
 * taken over. Returns how many it closed. */
size_t park_remap_from(struct master *m, size_t before);

/* ---- systemd's file descriptor store (master/fdstore.c) ---------------------------- */

/* Before the state file is opened: whether to keep the store ($NOTIFY_SOCKET), and takes
 * the stream connections systemd passed (LISTEN_FDS, LISTEN_FDNAMES): those not named by
 * us are closed and removed from the store. 0 or -ENOMEM. */
int fdstore_init(struct master *m);
bool fdstore_on(const struct master *m);
/* Connections systemd passed, not yet adopted: the take-over keeps TURN-TCP records. */
size_t fdstore_passed(const struct master *m);
/* After the take-over: the passed connections join the parked ones (master/park.c), for
 * the workers of the slots that own their records now; names leave the store. */
void fdstore_adopt(struct master *m);
/* IPC_FDSTORE (*fd: the socket, closed by the caller after) or IPC_FDUNSTORE from w. */
void fdstore_msg(struct mworker *w, const struct ipc_msg *msg, int *fd);
/* Worker of slot is gone: its names leave the store (their sockets closed with it). */
void fdstore_slot_gone(struct master *m, unsigned slot);
/* From the master's tick: a live upgrade's new master stores what it held once the old
 * master is gone (it is the main process then). */
void fdstore_tick(struct master *m);
void fdstore_free(struct master *m);

/* ---- live upgrade (master/upgrade.c) --------------------------------------------- */

#define UPGRADE_TIMEOUT_S 30.0

/* Both sides: remembers argv (the new binary gets the same command line) and the path of
 * the running binary (the default new binary). Returns 0 or -ENOMEM. */
int upgrade_init(struct master *m, char **argv);
/* Old master: starts binary (NULL: the running binary's path) as the new master; the
 * outcome is logged and shown by upgrade_status(). Returns 0 when it started, else
 * -errno with why filled. */
int upgrade_begin(struct master *m, const char *binary, double timeout, char *why, size_t cap);
/* Old master, from the supervisor: every worker stopped during a handover. */
void upgrade_workers_down(struct master *m);
/* Old master told to stop during an upgrade: the new binary is killed. */
void upgrade_stop(struct master *m);
/* Old master: true from upgrade_begin until the attempt failed, the new binary is reaped
 * (the sockets it inherited closed) and this master serves again (state starting,
 * handover, fallback; failed until reaped), and once the new master serves (done). */
bool upgrade_in_progress(const struct master *m);
/* Old master: from the hand-over on (handing_over, handed_over) the new master copies the
 * table, the revocation list and the published snapshot: a change made here (revoke,
 * disconnect, drain, loglevel) would be answered as done and lost. Returns
 * UPGRADE_HANDOVER_BUSY then, else NULL. */
const char *upgrade_handover_busy(const struct master *m);
#define UPGRADE_HANDOVER_BUSY "a live upgrade is handing over: retry, the new master " \
	"answers once it serves"
/* Old master, from the supervisor: a child that is no worker was reaped. The new binary's
 * end after a failed attempt removes its NAME.state.new, which it may have left. */
void upgrade_reaped(struct master *m, pid_t pid);
/* Old master stopping, its workers down: true while a failed hand-over's fallback still
 * waits for the new master's end (it then puts this master's state file back and ends the
 * loop itself); false when there is none, or once deadline is true (logged: the files stay
 * as they are). */
bool upgrade_stop_waits(struct master *m, bool deadline);
/* The sockets a new master inherits: every listener's, the admin socket, HTTP servers. */
size_t upgrade_collect_fds(const struct master *m, int *fds, size_t cap);
/* New master, first thing: reads $TURNGATE_UPGRADE. Returns 1 (this start is an
 * upgrade: m->n_slots set), 0 (it is not), -EINVAL (malformed: not an upgrade). */
int upgrade_inherit(struct master *m);
bool upgrade_is_child(const struct master *m);
/* New master: an inherited socket of this type bound to addr (the fd, now ours), or -1. */
int upgrade_take_socket(struct master *m, int type, const struct sockaddr *addr);
/* New master: listener l's inherited sockets into *out. Returns 1 (adopted), 0 (none
 * inherited: open them), -errno. */
int upgrade_take_listener(struct master *m, const struct conf_listener *l, struct mlistener *out);
/* New master: closes the inherited sockets that no listener or server took. */
void upgrade_close_unused(struct master *m);
void upgrade_report_ready(struct master *m);
/* Tests only: with $TURNGATE_TEST_UPGRADE_HOLD naming a FIFO, the new master waits there
 * for one byte (or the writer's close) before it says ready, after its pre-copy, so that
 * a test can change the table while the old workers still serve. */
void upgrade_test_hold(void);
/* New master, after the take-over: the old master's TCP connections (park_receive) and
 * relay channels (master/relayho.c). */
void upgrade_receive_streams(struct master *m);
/* Old master: the new master takes the relay sockets ("ready streams relays"). */
bool upgrade_peer_relays(const struct master *m);
/* A TURN-TCP call's UDP relay sockets (PARK_URELAY) go over with its connection: on the
 * old master's side the new one said "urelays", on the new one's it said so (the old one
 * offered them: " urelays=1 "). Otherwise they are closed as they come, and the new
 * worker binds the port again once the old worker's copy is closed too. */
bool upgrade_urelays(const struct master *m);
void upgrade_report_failure(struct master *m, const char *why);
/* New master, from the supervisor: a worker answered; once all have, it serves. */
void upgrade_worker_running(struct master *m);
/* {"state",...} for the admin socket. */
json_t *upgrade_status(const struct master *m);
void upgrade_free(struct master *m);

/* ---- systemd notification (master/notify.c) ------------------------------------- */

/* MAINPID=pid and READY=1, from the old master of a live upgrade: the new master is the
 * service's main process from now on. */
void notify_mainpid(pid_t pid);

void notify_ready(void);
void notify_reloading(void);
void notify_stopping(void);
void notify_status(const char *text);
/* Returns the watchdog interval in usec (0: disabled). */
uint64_t notify_watchdog_usec(void);
void notify_watchdog(void);

/* ---- HTTP: health, /status, metrics, credential API (master/httpd.c) ------------ */

/* Starts a server per distinct endpoint of m->cfg (health, metrics, credential API);
 * a server that cannot start is logged and skipped. Metrics on the health endpoint's
 * socket share its server, which binds the health endpoint's address and port and serves
 * metrics on the metrics URL's path. The credential API may share the metrics server but
 * never the health port (logged as an error, not served). Returns 0 or -ENOMEM. */
int httpd_start(struct master *m);
/* After a reload installed m->cfg: stops each server whose URL or routes changed, then
 * starts the new ones; unchanged servers keep running (and their connections). A server
 * that failed to start before is retried. A master whose httpd_start() never ran (unit
 * tests, the admin fuzzer) starts nothing. Returns 0. */
int httpd_reload(struct master *m);
/* At exit after a live upgrade (handed_over, the servers held), first serves the requests in
 * progress, for a second at most (http_server_finish). */
void httpd_stop(struct master *m);
/* A live upgrade's old master: hold (true) from the hand-over on, so that the connections
 * made meanwhile wait in the sockets' queues for the new master instead of being taken by a
 * master about to exit; false when the upgrade failed (http_server_hold). */
void httpd_hold(struct master *m, bool hold);
/* The listening sockets of the running HTTP servers (for a live upgrade). */
size_t httpd_fds(const struct master *m, int *fds, size_t cap);

/* ---- DNS refresh (master/dns.c) -------------------------------------------------- */

/* Every 5 s a child process resolves the STRICT_DNS endpoints and the siblings given by
 * name again; a name whose addresses changed updates m->cfg, and the master publishes it
 * as a new snapshot. Returns 0 or -ENOMEM. */
int dns_refresh_start(struct master *m);
void dns_refresh_stop(struct master *m);
/* {names, interval_s, runs, changes, failures} for the admin status. */
json_t *dns_refresh_json(const struct master *m);

/* ---- config file watch (master/watch.c) ------------------------------------------ */

/* Starts an inotify watch on the directories of the config file and of every file it names
 * whose content a reload reads (listeners' cert_file/key_file, auth secret_file and
 * previous_secret_file, global or per listener, admin.credential_api_token_file): reload
 * 200 ms after one of them changes.
 * Returns 0, or -errno (logged; the daemon serves on without it). */
int watch_start(struct master *m);
void watch_stop(struct master *m);
/* Rebuilds the watch for the current config (its cert/key files may have changed). May
 * free the watch state of the callback that triggered the reload. */
void watch_refresh(struct master *m);

#endif
