/* Master: opt-in (-w) reload when the config file or a file it names (cert/key, secret, token)
 * changes (inotify); a CDS origin is handed to master/cds.c. */
#include "config.h"

#include "master/master.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "common/log.h"
#include "master/cds.h"

/* Editors, cert-manager and Kubernetes replace files by rename (a mounted ConfigMap or
 * Secret swaps its "..data" link), so directories are watched, not files; a short delay
 * folds a burst of events into one reload. */
#define WATCH_DELAY_S 0.2
#define WATCH_MAX_LISTENERS 64
/* Per listener: cert, key and its own auth's two secret files; globally: the config, the
 * two secret files and the credential API token file. */
#define WATCH_MAX_FILES (4 * WATCH_MAX_LISTENERS + 4)

struct watch_file {
	int wd;
	char *base;
};

struct watch {
	int fd;
	ev_io io;
	ev_timer delay;
	struct watch_file files[WATCH_MAX_FILES];
	size_t n;
	struct master *m;
};

static void delay_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct watch *w = t->data;

	(void)loop;
	(void)revents;
	/* A successful reload rebuilds the watch, freeing w: touch nothing after this. */
	reload_run(w->m, "inotify", 0);
}

static bool relevant(const struct watch *w, const struct inotify_event *ev)
{
	if (ev->len == 0)
		return false;
	for (size_t i = 0; i < w->n; i++)
		if (w->files[i].wd == ev->wd &&
		    (strcmp(ev->name, w->files[i].base) == 0 || strcmp(ev->name, "..data") == 0))
			return true;
	return false;
}

static void io_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct watch *w = io->data;
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool hit = false;

	(void)revents;
	for (int i = 0; i < 16; i++) {
		ssize_t n = read(w->fd, buf, sizeof(buf));

		if (n <= 0)
			break;
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			if (relevant(w, ev))
				hit = true;
			p += sizeof(*ev) + ev->len;
		}
	}
	if (hit) {
		ev_timer_stop(loop, &w->delay);
		ev_timer_set(&w->delay, WATCH_DELAY_S, 0.);
		ev_timer_start(loop, &w->delay);
	}
}

/* Adds path's directory to the watch and remembers its base name. */
static int watch_path(struct watch *w, const char *path)
{
	char *d = NULL, *b = NULL;
	int rc = 0, wd;

	if (strncmp(path, "file://", 7) == 0)
		path += 7;
	if (w->n >= WATCH_MAX_FILES)
		return -ENOSPC;
	d = strdup(path);
	b = strdup(path);
	if (d == NULL || b == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	wd = inotify_add_watch(w->fd, dirname(d),
			       IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE);
	if (wd < 0) {
		rc = -errno;
		log_error("master", "cannot watch %s: %s", path, strerror(-rc));
		goto out;
	}
	w->files[w->n].wd = wd;
	w->files[w->n].base = strdup(basename(b));
	if (w->files[w->n].base == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	w->n++;
out:
	free(d);
	free(b);
	return rc;
}

static void watch_free(struct master *m, struct watch *w)
{
	if (w == NULL)
		return;
	ev_io_stop(m->loop, &w->io);
	ev_timer_stop(m->loop, &w->delay);
	if (w->fd >= 0)
		close(w->fd);
	for (size_t i = 0; i < w->n; i++)
		free(w->files[i].base);
	free(w);
}

/* Adds each non-NULL path of a list; stops at the first error. */
static int watch_paths(struct watch *w, const char *const *paths, size_t n)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < n; i++)
		if (paths[i] != NULL)
			rc = watch_path(w, paths[i]);
	return rc;
}

/* Every file the config names whose content a reload reads again. */
static int watch_config_files(struct watch *w, const struct conf *c)
{
	const char *global[] = { c->auth.secret_file, c->auth.prev_secret_file,
				 c->admin.credential_api_token_file };
	int rc = watch_paths(w, global, sizeof(global) / sizeof(global[0]));

	for (size_t i = 0; rc == 0 && i < c->n_listeners; i++) {
		const struct conf_listener *l = &c->listeners[i];
		const char *own[] = { l->cert_file, l->key_file,
				      l->auth ? l->auth->secret_file : NULL,
				      l->auth ? l->auth->prev_secret_file : NULL };

		rc = watch_paths(w, own, sizeof(own) / sizeof(own[0]));
	}
	return rc;
}

int watch_start(struct master *m)
{
	struct watch *w;
	int rc = 0;

	/* A CDS origin is watched by master/cds.c (cds_start), not here. */
	if (m->config_path == NULL || cds_is_origin(m->config_path))
		return 0;
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return -ENOMEM;
	w->m = m;
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->fd < 0) {
		rc = -errno;
		free(w);
		return rc;
	}
	rc = watch_path(w, m->config_path);
	if (rc == 0)
		rc = watch_config_files(w, m->cfg);
	if (rc < 0) {
		watch_free(m, w);
		return rc;
	}
	ev_io_init(&w->io, io_cb, w->fd, EV_READ);
	w->io.data = w;
	ev_io_start(m->loop, &w->io);
	ev_timer_init(&w->delay, delay_cb, WATCH_DELAY_S, 0.);
	w->delay.data = w;
	m->watcher = w;
	log_debug("master", "watching %zu files for changes", w->n);
	return 0;
}

void watch_stop(struct master *m)
{
	if (cds_is_origin(m->config_path)) {
		cds_stop(m);
		return;
	}
	watch_free(m, m->watcher);
	m->watcher = NULL;
}

/* The set of files depends on the config (cert/key files): rebuild after each reload. */
void watch_refresh(struct master *m)
{
	if (m->watcher == NULL || cds_is_origin(m->config_path))
		return;
	watch_stop(m);
	if (watch_start(m) < 0)
		log_error("master", "config file watch stopped");
}
