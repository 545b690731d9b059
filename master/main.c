/* turngated: the master process entry point (command line, startup, signals, drain, shutdown). */
#include "config.h"

#include "master/master.h"
#include "master/records.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/ipc.h"
#include "common/log.h"
#include "common/mono.h"
#include "conf/snapshot.h"
#include "master/admin.h"
#include "master/cds.h"
#include "master/cpus.h"
#include "master/linger.h"
#include "offload/offload_clock.h"
#include "shm/shm.h"

#define TICK_S 0.25
#define STATE_WATCH_TICKS 8     /* the state file and lock checked every 2 s */
#define PING_EVERY_TICKS 4
#define LOOP_STALL_S 2.0        /* a tick this late means the loop itself stalled */
#define SNAP_SLOTS 8
#define SNAP_MIN_SIZE (1u << 20)

static void usage(FILE *out)
{
	fprintf(out,
		"usage: turngated [-c FILE|file://PATH|http://HOST:PORT] [-t] [-w] [-l LOGSPEC]\n"
		"                 [--workers N] [--udp-thread-num=N] [-i NS/NAME] [-h] [-v]\n"
		"  -c, --config ORIGIN  STUNner v1 config (YAML or JSON) file, or the URL of\n"
		"                       STUNner's config discovery service (watched); default:\n"
		"                       $STUNNER_CONFIG_ORIGIN, else built-in\n"
		"  -i, --id NS/NAME     identity towards the CDS (default: $STUNNER_NAMESPACE/\n"
		"                       $STUNNER_NAME, else default/stunnerd-HOSTNAME)\n"
		"  -t, --test           check the config file and exit (0: ok, 1: problems,\n"
		"                       2: usage error, such as a config discovery origin)\n"
		"  -w, --watch          reload when the config file changes\n"
		"  -l, --log LOGSPEC    log levels, e.g. all:INFO,turn:DEBUG (overrides config)\n"
		"      --workers N      worker processes (default: config, else one per usable CPU:\n"
		"                       affinity and cgroup CPU quota)\n"
		"      --udp-thread-num=N  alias of --workers (stunnerd)\n"
		"  -h, --help           this help\n"
		"  -v, --version        print the version\n"
		"Signals: HUP reloads, TERM drains then exits, a second TERM, INT or QUIT stops\n"
		"now; what is still open stays in the state file for the next start.\n");
}

/* After a usage error's one line (getopt's, or ours): where the whole text is. */
static void usage_hint(void)
{
	fputs("try 'turngated --help'\n", stderr);
}

struct opts {
	const char *config;
	const char *id;
	bool check, watch;
	const char *log;
	unsigned workers;
};

static int parse_uint(const char *s, unsigned max, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || end == s || v == 0 || v > max)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

/* Writes "--a or --b ..." to buf when the long option arg ("--PREFIX[=VALUE]") abbreviates
 * more than one option of longs (as getopt_long refuses it, with the same '?' as an unknown
 * one) and names none exactly; returns false otherwise. */
static bool long_ambiguous(const struct option *longs, const char *arg, char *buf, size_t cap)
{
	size_t len = strcspn(arg + 2, "="), off = 0;
	int n = 0, val = 0;

	buf[0] = '\0';
	for (const struct option *o = longs; o->name != NULL; o++) {
		if (strncmp(o->name, arg + 2, len) != 0)
			continue;
		if (strlen(o->name) == len)
			return false;
		if (n > 0 && o->val == val)
			continue;	/* another spelling of the same option */
		val = o->val;
		off += (size_t)snprintf(buf + off, off < cap ? cap - off : 0, "%s--%s",
					n++ > 0 ? " or " : "", o->name);
	}
	return n > 1;
}

/* Returns 0 to run, 1 to exit with status 0 (help, version), -1 for a usage error. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longs[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "test", no_argument, NULL, 't' },
		{ "watch", no_argument, NULL, 'w' },
		{ "id", required_argument, NULL, 'i' },
		{ "log", required_argument, NULL, 'l' },
		{ "workers", required_argument, NULL, 'W' },
		{ "udp-thread-num", required_argument, NULL, 'W' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	const char *bad, *why;
	char names[128];
	int c;

	memset(o, 0, sizeof(*o));
	opterr = 0; /* getopt's messages name argv[0], a path: ours say turngated */
	while ((c = getopt_long(argc, argv, ":c:twl:i:hv", longs, NULL)) != -1) {
		switch (c) {
		case 'c':
			o->config = optarg;
			break;
		case 't':
			o->check = true;
			break;
		case 'w':
			o->watch = true;
			break;
		case 'i':
			o->id = optarg;
			break;
		case 'l':
			o->log = optarg;
			break;
		case 'W':
			if (parse_uint(optarg, SHM_MAX_SLOTS, &o->workers) < 0) {
				fprintf(stderr, "turngated: worker count must be 1..%u\n",
					SHM_MAX_SLOTS);
				usage_hint();
				return -1;
			}
			break;
		case 'h':
			usage(stdout);
			return 1;
		case 'v':
			printf("turngated %s\n", PACKAGE_VERSION);
			return 1;
		default: /* ':' a value missing, '?' an unknown option (opterr is off) */
			bad = argv[optind - 1];
			why = c == ':' ? "needs a value" : "unknown option";
			/* A long one names itself; optopt set there: "=VALUE" to a flag. */
			if (strncmp(bad, "--", 2) == 0 && c == '?' && optopt == 0 &&
			    long_ambiguous(longs, bad, names, sizeof(names)))
				fprintf(stderr, "turngated: %s: ambiguous (%s)\n", bad, names);
			else if (strncmp(bad, "--", 2) == 0)
				fprintf(stderr, "turngated: %s: %s\n", bad,
					c == '?' && optopt != 0 ? "takes no value" : why);
			else
				fprintf(stderr, "turngated: -%c: %s\n", optopt, why);
			usage_hint();
			return -1;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "turngated: unexpected argument: %s\n", argv[optind]);
		usage_hint();
		return -1;
	}
	if (o->config == NULL && getenv("STUNNER_CONFIG_ORIGIN") != NULL &&
	    getenv("STUNNER_CONFIG_ORIGIN")[0] != '\0')
		o->config = getenv("STUNNER_CONFIG_ORIGIN");
	return 0;
}

/* Checks a CDS origin and the identity at startup, so a typo fails fast. Returns 0 or
 * -1 (printed). */
static int check_cds(const struct opts *o, char *id, size_t cap)
{
	char host[256], port[16];
	int rc = cds_parse_origin(o->config, host, sizeof(host), port, sizeof(port));

	if (rc == -EPROTONOSUPPORT) {
		fprintf(stderr,
			"turngated: %s: TLS to the config discovery service is not "
			"supported (use http:// or ws://)\n",
			o->config);
		return -1;
	}
	if (rc < 0) {
		fprintf(stderr, "turngated: malformed config origin: %s\n", o->config);
		return -1;
	}
	if (cds_identity(o->id, id, cap) < 0) {
		fprintf(stderr, "turngated: --id must be NAMESPACE/NAME: %s\n", o->id);
		return -1;
	}
	if (o->check) {
		fprintf(stderr, "turngated: -t checks a config file, not a config discovery "
				"service\n");
		return -1;
	}
	return 0;
}

static void begin_stop(struct master *m, bool immediate)
{
	double deadline;

	if (m->stopping && !immediate)
		return;
	log_info("master", immediate ? "stopping now" : "stopping workers");
	/* Workers leave what is still open in the table (worker.c): the next start takes
	 * it over from the state file. */
	state_watch(m);
	if (m->state_lost != 0)
		log_error("master", "%u allocations end with the daemon: %s was %s while it ran",
			  master_alloc_count(m), m->state_path,
			  m->state_lost == -ENOENT ? "removed" : "replaced by another file");
	else
		log_info("master", "%u allocations stay in %s", master_alloc_count(m),
			 m->state_path != NULL ? m->state_path
					       : "memory and end with the daemon (no state file)");
	notify_stopping();
	supervise_stop_all(m, immediate);
	linger_stop_all(m, "the daemon stops");
	deadline = ev_now(m->loop) +
		   (immediate ? IPC_STOP_NOW_GRACE_MS : IPC_STOP_GRACE_MS) / 1000.0;
	/* A second signal hurries a stop on; it never puts its deadline off (0: none yet). */
	if (m->stop_deadline == 0 || deadline < m->stop_deadline)
		m->stop_deadline = deadline;
}

/* Drives drain -> stop -> exit; runs from the tick and after each signal. */
static void lifecycle_step(struct master *m)
{
	double now = ev_now(m->loop);

	/* Something failed for good (m->exit_code set where it failed): stop now, so that
	 * the service manager restarts the daemon, which takes the table over. A drain in
	 * progress (SIGTERM) finishes first; the exit status is then still the failure's. */
	if (m->exit_code != 0 && !m->exiting && !m->stopping) {
		upgrade_stop(m);
		begin_stop(m, true);
	}
	if (m->exiting && !m->stopping) {
		unsigned n = master_alloc_count(m);

		if (n == 0 || now >= m->drain_deadline) {
			if (n > 0)
				log_warn("master", "drain timeout: %u allocations still open", n);
			begin_stop(m, false);
		}
	}
	if (!m->stopping)
		return;
	if (supervise_all_down(m)) {
		if (!upgrade_stop_waits(m, now >= m->stop_deadline))
			ev_break(m->loop, EVBREAK_ALL);
		return;
	}
	if (now >= m->stop_deadline)
		supervise_kill_all(m);
}

static void tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct master *m = t->data;
	double now = mono_s();

	(void)loop;
	(void)revents;
	if (m->last_tick > 0 && now - m->last_tick > LOOP_STALL_S)
		log_warn("master", "the master's loop stalled %.1f s", now - m->last_tick);
	m->last_tick = now;
	reload_reclaim(m);
	if (m->publish_pending)
		reload_publish(m);
	m->tick_count++;
	fdstore_tick(m);
	handoffq_tick(m);
	supervise_disc_tick(m);
	if (m->tick_count % PING_EVERY_TICKS == 0 && !m->stopping && m->workers != NULL)
		supervise_tick(m);
	master_offload_tick(m);
	reload_deferred_tick(m);
	if (m->tick_count % STATE_WATCH_TICKS == 0)
		state_watch(m);
	lifecycle_step(m);
}

static void sighup_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
	struct master *m = s->data;

	(void)loop;
	(void)revents;
	if (!m->stopping)
		reload_run(m, "SIGHUP", 0);
}

static void sigterm_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
	struct master *m = s->data;

	(void)loop;
	(void)revents;
	upgrade_stop(m);
	if (m->exiting || s->signum == SIGINT || s->signum == SIGQUIT) {
		begin_stop(m, true);
	} else {
		m->exiting = true;
		m->drain_deadline = ev_now(m->loop) + m->cfg->admin.drain_timeout;
		log_info("master", "SIGTERM: draining for up to %u s (send again to stop now)",
			 m->cfg->admin.drain_timeout);
		notify_stopping();
		master_set_drain(m, true);
	}
	lifecycle_step(m);
}

/* SIGUSR2: a live upgrade to the running binary's path (master/upgrade.c). */
static void sigusr2_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
	struct master *m = s->data;
	char why[PATH_MAX + 128];

	(void)loop;
	(void)revents;
	if (upgrade_begin(m, NULL, 0, why, sizeof(why)) < 0)
		log_error("master", "SIGUSR2: no upgrade: %s", why);
}

/* SIGUSR1: the session record file is reopened (logrotate's postrotate). */
static void sigusr1_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
	(void)loop;
	(void)revents;
	records_reopen(s->data);
}

static void watchdog_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)t;
	(void)revents;
	notify_watchdog();
}

/* The worker count and, in why, where it came from (status shows it): --workers, the
 * config, else the CPUs this process may use (affinity and cgroup quota, master/cpus.c). */
static unsigned slot_count(const struct master *m, char *why, size_t len)
{
	if (m->workers_cli > 0) {
		snprintf(why, len, "configured: --workers");
		return m->workers_cli;
	}
	if (m->cfg->admin.workers > 0) {
		snprintf(why, len, "configured");
		return m->cfg->admin.workers > SHM_MAX_SLOTS ? SHM_MAX_SLOTS
							     : m->cfg->admin.workers;
	}
	return cpus_auto_workers(NULL, SHM_MAX_SLOTS, why, len);
}

static int shm_geometry(struct master *m, struct shm_config *sc)
{
	size_t len = 0;
	int rc;

	rc = reload_snap_size(m, &len);
	if (rc < 0)
		return rc;
	memset(sc, 0, sizeof(*sc));
	sc->n_slots = m->n_slots;
	sc->snap_count = SNAP_SLOTS;
	/* Room for the config to grow fourfold by reloads (users, listeners, certificates). */
	sc->snap_size = len * 4 < SNAP_MIN_SIZE ? SNAP_MIN_SIZE : (uint32_t)(len * 4);
	sc->alloc_cap = m->cfg->limits.max_allocations;
	return 0;
}

/* A live upgrade's new master: everything that could fail without the table has been
 * done; the dry run of the take-over says whether the table can be read. Only then does
 * it say ready (from state_segment_open, once its own segment exists) and the old master
 * stop its workers (master/upgrade.c). */
static int upgrade_ready(struct master *m, const struct shm_config *sc)
{
	char why[PATH_MAX + 256];
	int rc = state_upgrade_check(m, sc, why, sizeof(why));

	if (rc < 0) {
		log_error("master", "upgrade: %s", why);
		upgrade_report_failure(m, why);
	}
	return rc;
}

static int create_shm(struct master *m)
{
	struct shm_config sc;
	int rc = shm_geometry(m, &sc);

	if (rc == 0 && upgrade_is_child(m))
		rc = upgrade_ready(m, &sc);
	if (rc < 0)
		return rc;
	return state_segment_open(m, &sc);
}

/* A live socket at the path means another turngated runs with this config: starting a
 * second one would silently share its SO_REUSEPORT ports, so that is fatal. Any other
 * failure only costs the admin interface and is logged. */
static int open_admin(struct master *m)
{
	const char *path = m->cfg->admin.admin_socket;
	unsigned mode = m->cfg->admin.admin_socket_mode ? m->cfg->admin.admin_socket_mode : 0600;
	int rc;

	if (path == NULL || path[0] == '\0')
		return 0;
	rc = admin_open(m, path, mode, &m->admin);
	if (rc == -EADDRINUSE) {
		log_error("master", "admin socket %s is in use: another turngated is running",
			  path);
		return rc;
	}
	if (rc < 0)
		log_error("master",
			  "admin socket %s: %s (turngatectl will not reach this "
			  "daemon)",
			  path, strerror(-rc));
	else
		log_info("master", "admin socket %s (mode %04o)", path, mode);
	return 0;
}

static void start_watchers(struct master *m)
{
	ev_signal_init(&m->sighup_w, sighup_cb, SIGHUP);
	ev_signal_init(&m->sigterm_w, sigterm_cb, SIGTERM);
	ev_signal_init(&m->sigint_w, sigterm_cb, SIGINT);
	ev_signal_init(&m->sigquit_w, sigterm_cb, SIGQUIT);
	ev_signal_init(&m->sigusr2_w, sigusr2_cb, SIGUSR2);
	m->sighup_w.data = m->sigterm_w.data = m->sigint_w.data = m->sigquit_w.data = m;
	m->sigusr2_w.data = m;
	ev_signal_start(m->loop, &m->sigusr2_w);
	ev_signal_init(&m->sigusr1_w, sigusr1_cb, SIGUSR1);
	m->sigusr1_w.data = m;
	ev_signal_start(m->loop, &m->sigusr1_w);
	ev_signal_start(m->loop, &m->sigquit_w);
	ev_signal_start(m->loop, &m->sighup_w);
	ev_signal_start(m->loop, &m->sigterm_w);
	ev_signal_start(m->loop, &m->sigint_w);
	ev_timer_init(&m->tick_w, tick_cb, TICK_S, TICK_S);
	m->tick_w.data = m;
	ev_timer_start(m->loop, &m->tick_w);
	m->watchdog_usec = notify_watchdog_usec();
	if (m->watchdog_usec > 0) {
		double every = (double)m->watchdog_usec / 2e6;

		ev_timer_init(&m->watchdog_w, watchdog_cb, every, every);
		ev_timer_start(m->loop, &m->watchdog_w);
	}
	if (m->watch)
		watch_start(m);
	if (dns_refresh_start(m) < 0)
		log_warn("master", "dns: no memory: names are resolved at reloads only");
}

/* A live upgrade's old master, its loop ended: the service is the new master's pid. A
 * SIGHUP sent here now is not run (its watcher no longer dispatches), and once master_free
 * stopped that watcher (libev puts SIG_DFL back) it would end this process before it
 * passes a deferred reload on: blocked, it is dropped. */
static void drop_sighup(void)
{
	sigset_t hup;

	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	(void)sigprocmask(SIG_BLOCK, &hup, NULL);
}

static void master_free(struct master *m)
{
	records_free(m);	/* the last events (a stop's), while the segment is ours */
	httpd_stop(m);
	admin_close(m->admin);
	admin_top_free(m->top);
	watch_stop(m);
	dns_refresh_stop(m);
	supervise_free(m);
	for (size_t i = 0; i < m->n_listeners; i++)
		listener_close(&m->listeners[i]);
	free(m->listeners);
	master_offload_close(m);
	if (m->shm != NULL)
		shm_destroy(m->shm);
	free(m->state_path);
	conf_free(m->cfg);
	reload_result_clear(&m->last_reload);
	snap_blob_free(m->snap_blob, m->snap_len);
	free(m->log_override);
	explicit_bzero(m->nonce_key, sizeof(m->nonce_key));
	if (ev_is_active(&m->watchdog_w))
		ev_timer_stop(m->loop, &m->watchdog_w);
	ev_timer_stop(m->loop, &m->tick_w);
	ev_signal_stop(m->loop, &m->sighup_w);
	ev_signal_stop(m->loop, &m->sigterm_w);
	ev_signal_stop(m->loop, &m->sigint_w);
	ev_signal_stop(m->loop, &m->sigquit_w);
	ev_signal_stop(m->loop, &m->sigusr2_w);
	if (ev_is_active(&m->sigusr1_w))
		ev_signal_stop(m->loop, &m->sigusr1_w);
	park_release(m);
	fdstore_free(m);
	upgrade_free(m);
}

static int master_start(struct master *m)
{
	int rc;

	if (getrandom(m->nonce_key, sizeof(m->nonce_key), 0) != sizeof(m->nonce_key))
		return -EIO;
	rc = reload_initial(m);
	if (rc < 0)
		return rc;
	if (m->config_path == NULL)
		conf_print_credential_help(m->cfg, (int64_t)time(NULL), stderr);
	m->n_slots = slot_count(m, m->workers_why, sizeof(m->workers_why));
	if (upgrade_inherit(m) == 1 && m->n_slots != slot_count(m, m->workers_why,
								 sizeof(m->workers_why))) {
		log_warn("master", "upgrade: %u workers as before (a live upgrade keeps the "
				   "worker count; restart to change it)",
			 m->n_slots);
		snprintf(m->workers_why, sizeof(m->workers_why), "kept by the live upgrade");
	}
	log_info("master", "%u workers (%s)", m->n_slots, m->workers_why);
	rc = open_admin(m);
	if (rc < 0)
		return rc;
	master_sizing_descriptors(m);
	rc = fdstore_init(m);
	if (rc < 0)
		return rc;
	rc = create_shm(m);
	if (rc < 0)
		return rc;
	master_sizing_log(m);
	upgrade_receive_streams(m);
	fdstore_adopt(m);
	rc = reload_open_listeners(m);
	if (rc < 0)
		return rc;
	master_offload_open(m);
	/* The time namespace's offset for the fast path's expiries, read before any fork
	 * whether or not the fast path is on now: workers inherit it, and a reload that turns
	 * the fast path on later finds it known in each of them (no worker reads the file,
	 * where a worker at its descriptor limit would fail and keep 0). */
	(void)tgo_clock_offset();
	rc = reload_publish(m);
	if (rc < 0)
		return rc;
	/* Before the first worker: the take-over's events leave the rings for the master's
	 * held queue (records_start: copies only, nothing encoded in the gap), which the
	 * first drain writes before any worker's event, of the same allocation too. */
	if (records_start(m) < 0)
		log_error("master", "session records: no memory: none are written");
	rc = supervise_init(m);
	if (rc < 0)
		return rc;
	/* Each first worker adopts its own share of the take-over, not the whole list. */
	(void)shm_taken_group(m->shm);
	for (unsigned i = 0; i < m->n_slots; i++) {
		rc = supervise_spawn(m, i);
		if (rc < 0)
			return rc;
	}
	park_release(m);	/* the workers hold the handed-over connections now */
	start_watchers(m);
	rc = httpd_start(m);
	upgrade_close_unused(m);
	return rc;
}

int main(int argc, char **argv)
{
	struct master m;
	struct opts o;
	char cds_id[300] = "";
	int rc;

	log_init("master", LOG_FMT_TEXT);
	rc = parse_args(argc, argv, &o);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	if (cds_is_origin(o.config) && check_cds(&o, cds_id, sizeof(cds_id)) < 0)
		return 2;
	if (o.check)
		return conf_check_main(o.config, stdout);
	if (o.log != NULL && log_check_spec(o.log) < 0) {
		fprintf(stderr, "turngated: malformed log spec: %s\n", o.log);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	memset(&m, 0, sizeof(m));
	m.magic = MASTER_MAGIC;
	m.loop = ev_default_loop(EVFLAG_AUTO);
	m.config_path = o.config;
	/* A CDS origin is always watched: without -w stunnerd reads it once and could never
	 * follow its operator, which is the reason to use the CDS at all. */
	m.watch = o.watch || cds_is_origin(o.config);
	m.workers_cli = o.workers;
	m.log_override = o.log != NULL ? strdup(o.log) : NULL;
	m.started_at = ev_now(m.loop);
	rc = upgrade_init(&m, argv);
	if (rc == 0)
		rc = master_start(&m);
	if (rc == 0 && cds_is_origin(m.config_path))
		rc = cds_start(&m, cds_id);
	if (rc == 0) {
		log_info("master", "turngated %s serving with %u workers (generation %llu)",
			 PACKAGE_VERSION, m.n_slots, (unsigned long long)m.generation);
		/* From a CDS, ready means configured: the first applied config says READY. */
		if (!cds_is_origin(m.config_path) && !upgrade_is_child(&m))
			notify_ready();
		m.last_tick = mono_s();
		ev_run(m.loop, 0);
		log_info("master", "exiting");
		if (m.handed_over)
			drop_sighup();
	} else {
		log_error("master", "startup failed: %s", strerror(-rc));
		if (m.up != NULL) {
			char why[128];

			snprintf(why, sizeof(why), "startup failed: %s", strerror(-rc));
			upgrade_report_failure(&m, why);
		}
		if (m.workers != NULL) {
			supervise_stop_all(&m, true);
			m.stop_deadline = ev_now(m.loop) + 2.0;
			ev_timer_init(&m.tick_w, tick_cb, TICK_S, TICK_S);
			m.tick_w.data = &m;
			ev_timer_start(m.loop, &m.tick_w);
			ev_run(m.loop, 0);
		}
		state_forget_created(&m);
	}
	master_free(&m);
	reload_deferred_pass(&m);	/* a live upgrade's: to the new master, sockets closed */
	ev_loop_destroy(m.loop);
	return rc == 0 ? m.exit_code : MASTER_EXIT_FAILURE;
}
