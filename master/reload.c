/* Master: the one reload path (parse, validate, open new listeners, publish, diff, reclaim). */
#include "config.h"

#include "master/master.h"
#include "master/records.h"

#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/ipc.h"
#include "common/log.h"
#include "common/mono.h"
#include "conf/snapshot.h"
#include "master/admin.h"
#include "master/cds.h"
#include "shm/shm.h"
#include "shm/shm_lslot.h"
#include "shm/shm_alloc.h"

void reload_result_clear(struct reload_result *r)
{
	json_decref(r->errors);
	free(r->trigger);
	free(r->reason);
	memset(r, 0, sizeof(*r));
}

/* Errors first, then warnings: the reply to `reload` should lead with what failed. */
static json_t *diags_to_json(const struct conf_diags *d)
{
	json_t *arr = json_array();
	char line[1024];

	for (int pass = 0; pass < 2 && arr != NULL; pass++) {
		enum conf_diag_sev want = pass == 0 ? CONF_DIAG_ERROR : CONF_DIAG_WARNING;

		for (size_t i = 0; i < d->n; i++) {
			if (d->v[i].sev != want)
				continue;
			conf_diag_format(&d->v[i], line, sizeof(line));
			json_array_append_new(arr, json_string(line));
		}
	}
	return arr;
}

static void record_outcome(struct master *m, const char *trigger, enum reload_outcome o,
			   json_t *errors, const char *reason)
{
	reload_result_clear(&m->last_reload);
	if (o == RELOAD_APPLIED)
		m->reloads_ok++;
	else if (o == RELOAD_REFUSED)
		m->reloads_refused++;
	else
		m->reloads_failed++;
	m->last_reload.ok = o == RELOAD_APPLIED;
	m->last_reload.outcome = o;
	m->last_reload.reason = reason != NULL && reason[0] != '\0' ? strdup(reason) : NULL;
	m->last_reload.at = ev_now(m->loop);
	m->last_reload.trigger = strdup(trigger);
	m->last_reload.errors = errors != NULL ? errors : json_array();
}

static void record_result(struct master *m, const char *trigger, bool ok, json_t *errors)
{
	record_outcome(m, trigger, ok ? RELOAD_APPLIED : RELOAD_FAILED, errors, NULL);
}

static void record_error(struct master *m, const char *trigger, const char *what, int err)
{
	char line[256];
	json_t *arr = json_array();

	snprintf(line, sizeof(line), "%s: %s", what, strerror(-err));
	json_array_append_new(arr, json_string(line));
	log_error("master", "reload (%s) failed: %s", trigger, line);
	record_result(m, trigger, false, arr);
}

static const char *effective_loglevel(const struct master *m, const struct conf *cfg)
{
	if (m->log_override != NULL)
		return m->log_override;
	return cfg->admin.loglevel != NULL ? cfg->admin.loglevel : "all:INFO";
}

static void apply_logging(struct master *m, const struct conf *cfg)
{
	if (log_set_spec(effective_loglevel(m, cfg)) < 0)
		log_warn("master", "invalid log spec \"%s\" ignored", effective_loglevel(m, cfg));
	log_set_format(cfg->admin.log_format == CONF_LOG_JSON ? LOG_FMT_JSON : LOG_FMT_TEXT);
}

/* Builds the blob of cfg with the effective log level (the override, when any, is what
 * workers must apply, so it travels inside the snapshot like everything else). */
static int build_blob(struct master *m, struct conf *cfg, uint64_t gen, const uint16_t *slots,
		      void **blob, size_t *len)
{
	struct snap_build_params p;
	char *saved = cfg->admin.loglevel;
	int rc;

	memset(&p, 0, sizeof(p));
	p.generation = gen;
	p.listener_slots = slots;
	memcpy(p.nonce_key, m->nonce_key, sizeof(p.nonce_key));
	cfg->admin.loglevel = (char *)effective_loglevel(m, cfg);
	rc = snap_build(cfg, &p, blob, len);
	cfg->admin.loglevel = saved;
	explicit_bzero(&p, sizeof(p));
	return rc;
}

/* The slot of each of cfg's listeners, by name (shm/shm_lslot.h): *out is malloc'd
 * (cfg->n_listeners entries, NULL when none). 0 or -ENOMEM / -EINVAL. */
static int assign_slots(struct master *m, const struct conf *cfg, uint16_t **out)
{
	const char **names;
	uint64_t freed = 0;
	int rc;

	*out = NULL;
	names = calloc(cfg->n_listeners + 1, sizeof(*names));
	*out = calloc(cfg->n_listeners + 1, sizeof(**out));
	if (names == NULL || *out == NULL) {
		free(names);
		free(*out);
		*out = NULL;
		return -ENOMEM;
	}
	for (size_t i = 0; i < cfg->n_listeners; i++)
		names[i] = cfg->listeners[i].name;
	rc = shm_lslot_assign(m->shm, names, cfg->n_listeners, *out, &freed);
	if (rc == 0)
		master_offload_slots_freed(m, freed);
	free(names);
	if (rc < 0) {
		free(*out);
		*out = NULL;
	}
	return rc;
}

/* Publishes cfg as generation m->generation + 1; on success bumps m->generation. */
static int publish_cfg(struct master *m, struct conf *cfg)
{
	void *blob = NULL;
	uint16_t *slots;
	size_t len = 0;
	int rc;

	rc = assign_slots(m, cfg, &slots);
	if (rc < 0)
		return rc;
	rc = build_blob(m, cfg, m->generation + 1, slots, &blob, &len);
	free(slots);
	if (rc < 0)
		return rc;
	rc = shm_snap_publish(m->shm, blob, len, m->generation + 1, mono_ns());
	if (rc == -EBUSY) {
		/* Every arena slot is current or waiting for readers: reclaim what is due. */
		reload_reclaim(m);
		rc = shm_snap_publish(m->shm, blob, len, m->generation + 1, mono_ns());
	}
	if (rc == 0) {
		m->generation++;
		snap_blob_free(m->snap_blob, m->snap_len);
		m->snap_blob = blob;
		m->snap_len = len;
	} else {
		snap_blob_free(blob, len);
	}
	return rc;
}

void reload_reclaim(struct master *m)
{
	unsigned freed = 0, pending = 0;

	if (shm_snap_reclaim(m->shm, &freed, &pending) < 0)
		return;
	m->snaps_reclaimed += freed;
	m->snaps_pending = pending;
}

int reload_snap_size(struct master *m, size_t *len)
{
	void *blob = NULL;
	int rc = build_blob(m, m->cfg, 1, NULL, &blob, len);

	snap_blob_free(blob, *len);
	return rc;
}

int reload_publish(struct master *m)
{
	int rc = publish_cfg(m, m->cfg);

	m->publish_pending = rc == -EBUSY;
	if (rc < 0 && rc != -EBUSY)
		log_error("master", "cannot publish snapshot: %s", strerror(-rc));
	return rc;
}

static int load_config(struct master *m, struct conf **out, struct conf_diags *diags)
{
	struct conf_load_opts opts = { .getenv = NULL, .getenv_ctx = NULL, .now = 0 };
	int rc;

	if (m->config_path == NULL) {
		rc = conf_load_default(&opts, out);
	} else if (cds_is_origin(m->config_path)) {
		char *text = NULL;
		size_t len = 0;

		rc = cds_config_text(m, &text, &len);
		if (rc == 0)
			rc = conf_load_string(text, len, "cds", &opts, out, diags);
		free(text);
	} else {
		rc = conf_load_file(m->config_path, &opts, out, diags);
	}
	if (rc < 0)
		return rc;
	rc = conf_resolve_clusters(*out, NULL, NULL, diags);
	if (rc < 0) {
		conf_free(*out);
		*out = NULL;
	}
	return rc;
}

int reload_initial(struct master *m)
{
	struct conf_diags diags = { 0 };
	int rc;

	rc = load_config(m, &m->cfg, &diags);
	/* The format the file asks for applies from its own diagnostics on, even when it
	 * fails to load (then the lines that end the start are in that format too). */
	log_set_format(diags.json ? LOG_FMT_JSON : LOG_FMT_TEXT);
	conf_diags_log(&diags, diags.json, stderr);
	record_result(m, "startup", rc == 0, diags_to_json(&diags));
	/* Diagnosed errors were printed above; only an undiagnosed failure needs a line. */
	if (rc < 0 && diags.n_errors == 0)
		log_error("master", "cannot load configuration: %s", strerror(-rc));
	conf_diags_free(&diags);
	if (rc < 0)
		return rc;
	apply_logging(m, m->cfg);
	return 0;
}

static bool str_eq(const char *a, const char *b)
{
	return (a == NULL || b == NULL) ? a == b : strcmp(a, b) == 0;
}

/* Settings fixed at start: a reload that changes them applies the rest and says so. */
static void warn_restart_only(struct master *m, const struct conf *nc)
{
	const struct conf *oc = m->cfg;

	if (oc->admin.workers != nc->admin.workers && m->workers_cli == 0)
		log_warn("master", "admin.workers changed: takes effect at the next restart");
	if (!str_eq(oc->admin.state_dir, nc->admin.state_dir))
		log_warn("master", "admin.state_dir changed: takes effect at the next restart");
	if (oc->limits.max_allocations != nc->limits.max_allocations)
		log_warn("master", "max_allocations changed to %u%s (was %u): the table holds %u "
				   "until the next restart",
			 nc->limits.max_allocations,
			 nc->limits.max_allocations_auto ? " (auto: the relay port space)" : "",
			 oc->limits.max_allocations,
			 m->shm != NULL ? shm_alloc_capacity(m->shm) : oc->limits.max_allocations);
	/* From a CDS the socket is the bootstrap's ($TURNGATE_ADMIN_SOCKET): pushed configs
	 * rarely name one, and the warning would repeat on every update. */
	if (!str_eq(oc->admin.admin_socket, nc->admin.admin_socket) &&
	    !cds_is_origin(m->config_path))
		log_warn("master", "admin socket path changed: takes effect at the next restart");
}

struct pending {
	struct mlistener *opened; /* new sockets, index-parallel to delta */
	struct conf_listener_delta *delta;
	size_t n;
};

static void pending_free(struct pending *p, bool close_sockets)
{
	for (size_t i = 0; p->opened != NULL && i < p->n; i++)
		if (close_sockets)
			listener_close(&p->opened[i]);
	free(p->opened);
	free(p->delta);
	memset(p, 0, sizeof(*p));
}

/* Opens the sockets of every added or restarted listener before anything is published, so
 * a port that cannot be bound fails the reload with nothing changed. A restarted listener
 * may keep its port: SO_REUSEPORT lets the new sockets join while the old ones still hold
 * it, and the old ones are closed at commit. */
static int open_new_listeners(struct master *m, const struct conf *nc, struct pending *p)
{
	int rc;

	p->opened = calloc(p->n ? p->n : 1, sizeof(*p->opened));
	if (p->opened == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < p->n; i++) {
		const struct conf_listener_delta *d = &p->delta[i];

		if (d->change != CONF_LISTENER_ADDED && d->change != CONF_LISTENER_RESTART)
			continue;
		/* A live upgrade's new master finds the sockets already open: the old master's
		 * own, checked when they were opened (the check dumps every socket on the
		 * node's ports: with 250,000 relay sockets, a tenth of a second a listener). */
		rc = upgrade_take_listener(m, &nc->listeners[d->new_idx], &p->opened[i]);
		if (rc == 0) {
			rc = listener_open(&nc->listeners[d->new_idx], m->n_slots, &p->opened[i]);
			if (rc >= 0)
				rc = listener_check_owned(m, p->opened, i, &p->opened[i]);
		}
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void remove_listener(struct master *m, const char *name)
{
	ssize_t li = listener_find(m, name);

	if (li < 0)
		return;
	supervise_broadcast(m, IPC_LISTENER_REMOVE, name, strlen(name), -1);
	log_info("master", "listener %s removed", name);
	listener_close(&m->listeners[li]);
	memmove(&m->listeners[li], &m->listeners[li + 1],
		(m->n_listeners - (size_t)li - 1) * sizeof(*m->listeners));
	m->n_listeners--;
}

static int add_listener(struct master *m, struct mlistener *l)
{
	struct mlistener *grown;

	grown = realloc(m->listeners, (m->n_listeners + 1) * sizeof(*grown));
	if (grown == NULL)
		return -ENOMEM;
	m->listeners = grown;
	m->listeners[m->n_listeners] = *l;
	memset(l, 0, sizeof(*l));
	m->n_listeners++;
	if (m->workers == NULL)
		return 0;	/* startup: workers inherit every listener at fork */
	supervise_broadcast(m, IPC_LISTENER_ADD, m->listeners[m->n_listeners - 1].name,
			    strlen(m->listeners[m->n_listeners - 1].name),
			    (int)(m->n_listeners - 1));
	return 0;
}

/* After the new snapshot is published: workers find new listeners in it by name. A
 * restarted listener is removed first (its allocations end), then added again. */
static void commit_listeners(struct master *m, struct pending *p)
{
	for (size_t i = 0; i < p->n; i++) {
		const struct conf_listener_delta *d = &p->delta[i];

		if (d->change == CONF_LISTENER_REMOVED || d->change == CONF_LISTENER_RESTART)
			remove_listener(m, d->name);
	}
	for (size_t i = 0; i < p->n; i++) {
		if (p->opened[i].fds == NULL)
			continue;
		if (add_listener(m, &p->opened[i]) < 0)
			log_error("master", "listener %s: out of memory", p->delta[i].name);
		else if (m->workers != NULL)
			log_info("master", "listener %s added", p->delta[i].name);
	}
}

int reload_open_listeners(struct master *m)
{
	static const struct conf before_start;	/* no listeners */
	struct pending p = { 0 };
	int rc;

	assert(m->magic == MASTER_MAGIC && m->n_listeners == 0 && m->workers == NULL);
	rc = conf_diff_listeners(&before_start, m->cfg, &p.delta, &p.n);
	if (rc == 0)
		rc = open_new_listeners(m, m->cfg, &p);
	if (rc == 0)
		commit_listeners(m, &p);
	pending_free(&p, true);
	return rc;
}

/* A daemon that started without its admin socket (a CDS bootstrap config, or a path that
 * could not be created) opens the one a reloaded config names. Moving a socket that is
 * open still waits for a restart (warn_restart_only). */
static void open_admin_late(struct master *m)
{
	const char *path = m->cfg->admin.admin_socket;
	unsigned mode = m->cfg->admin.admin_socket_mode ? m->cfg->admin.admin_socket_mode : 0600;
	int rc;

	/* Not during a live upgrade's hand-over: connections go to the new master then. */
	if (m->admin != NULL || m->handing_over || path == NULL || path[0] == '\0')
		return;
	rc = admin_open(m, path, mode, &m->admin);
	if (rc < 0)
		log_error("master", "admin socket %s: %s", path, strerror(-rc));
	else
		log_info("master", "admin socket %s (mode %04o)", path, mode);
}

int reload_run(struct master *m, const char *trigger, unsigned flags)
{
	struct conf_diags diags = { 0 };
	struct pending p = { 0 };
	struct conf *nc = NULL;
	char reason[1024] = "";
	bool off_changed;
	int rc;

	assert(m->magic == MASTER_MAGIC);
	if (upgrade_in_progress(m)) {
		reload_defer(m, trigger);
		return -EAGAIN;
	}
	notify_reloading();
	log_info("master", "reloading configuration (%s)", trigger);
	rc = load_config(m, &nc, &diags);
	if (rc < 0) {
		/* Rejected: the running configuration's log format still applies. */
		conf_diags_log(&diags, log_get_format() == LOG_FMT_JSON, stderr);
		if (diags.n_errors == 0)
			record_error(m, trigger, "cannot load configuration", rc);
		else
			record_result(m, trigger, false, diags_to_json(&diags));
		log_error("master",
			  "reload (%s) rejected: %zu errors; the running configuration "
			  "is unchanged",
			  trigger, diags.n_errors);
		rc = -EINVAL;
		goto out;
	}
	rc = conf_diff_listeners(m->cfg, nc, &p.delta, &p.n);
	if (rc < 0) {
		record_error(m, trigger, "cannot compare the listeners", rc);
		goto out;
	}
	if (!reload_guard_pass(m, trigger, flags, nc, &diags, p.delta, p.n, reason,
			       sizeof(reason))) {
		/* Refused: the running configuration's log format still applies. */
		conf_diags_log(&diags, log_get_format() == LOG_FMT_JSON, stderr);
		record_outcome(m, trigger, RELOAD_REFUSED, diags_to_json(&diags), reason);
		rc = -ECANCELED;
		goto out;
	}
	warn_restart_only(m, nc);
	rc = open_new_listeners(m, nc, &p);
	if (rc < 0) {
		record_error(m, trigger, "cannot open new listeners", rc);
		goto out;
	}
	rc = publish_cfg(m, nc);
	if (rc < 0) {
		record_error(m, trigger, "cannot publish the new snapshot", rc);
		goto out;
	}
	commit_listeners(m, &p);
	off_changed = master_offload_changed(m->cfg, nc);
	records_flush(m);	/* events of the old config's listener indexes, with its names */
	conf_free(m->cfg);
	m->cfg = nc;
	m->cfg_epoch++;
	nc = NULL;
	if (off_changed)
		master_offload_reopen(m);
	m->publish_pending = false;
	apply_logging(m, m->cfg);
	records_apply(m);
	/* Applied: its warnings (an expiring certificate's among them), in the format it
	 * asks for. */
	conf_diags_log(&diags, log_get_format() == LOG_FMT_JSON, stderr);
	httpd_reload(m);
	open_admin_late(m);
	record_outcome(m, trigger, RELOAD_APPLIED, diags_to_json(&diags), reason);
	m->last_reload.forced = (flags & RELOAD_FORCE) && reason[0] != '\0' &&
				!cds_is_origin(m->config_path);
	log_info("master", "configuration generation %llu active (%s)",
		 (unsigned long long)m->generation, trigger);
	watch_refresh(m);
out:
	pending_free(&p, true);
	conf_free(nc);
	conf_diags_free(&diags);
	notify_ready();
	return rc;
}

void reload_defer(struct master *m, const char *trigger)
{
	log_warn("master",
		 "reload (%s) deferred: a live upgrade is in progress; the master that serves "
		 "once it ends reloads",
		 trigger);
	snprintf(m->reload_deferred, sizeof(m->reload_deferred), "%s", trigger);
}

void reload_deferred_tick(struct master *m)
{
	char trigger[sizeof(m->reload_deferred) + 32];

	if (m->reload_deferred[0] == '\0')
		return;
	snprintf(trigger, sizeof(trigger), "%s, deferred by the upgrade", m->reload_deferred);
	/* A drain (SIGTERM) is a stop with a grace period: dropped as at a stop. */
	if (m->stopping || m->exiting) {
		m->reload_deferred[0] = '\0';
		log_warn("master", "reload (%s) not run: the daemon stops", trigger);
		return;
	}
	if (upgrade_in_progress(m))
		return;
	m->reload_deferred[0] = '\0';
	reload_run(m, trigger, 0);
}

void reload_deferred_pass(struct master *m)
{
	if (m->reload_deferred[0] == '\0')
		return;
	if (!m->handed_over)	/* stopped before the tick dropped it: no new master */
		log_warn("master", "reload (%s) not run: the daemon stops", m->reload_deferred);
	else if (m->successor <= 0)
		log_error("master", "upgrade: the reload (%s) asked during it is not passed on: "
				    "the new master is gone",
			  m->reload_deferred);
	else if (kill(m->successor, SIGHUP) == 0)
		log_info("master", "upgrade: the reload (%s) asked during it is passed on to pid %d "
				   "(SIGHUP)",
			 m->reload_deferred, (int)m->successor);
	else
		log_error("master", "upgrade: cannot pass the reload (%s) asked during it on to "
				    "pid %d: %s; send it SIGHUP",
			  m->reload_deferred, (int)m->successor, strerror(errno));
	m->reload_deferred[0] = '\0';
}

int reload_set_loglevel(struct master *m, const char *spec)
{
	char *copy = NULL;
	int rc;

	if (spec != NULL) {
		if (log_check_spec(spec) < 0)
			return -EINVAL;
		copy = strdup(spec);
		if (copy == NULL)
			return -ENOMEM;
	}
	free(m->log_override);
	m->log_override = copy;
	apply_logging(m, m->cfg);
	log_info("master", "log level now %s (%s)", effective_loglevel(m, m->cfg),
		 copy != NULL ? "override" : "config");
	/* Workers apply the level from the snapshot; the frame makes it immediate even for a
	 * worker that is between snapshot checks. */
	rc = reload_publish(m);
	supervise_broadcast(m, IPC_LOGLEVEL, effective_loglevel(m, m->cfg),
			    strlen(effective_loglevel(m, m->cfg)), -1);
	return rc == -EBUSY ? 0 : rc;
}
