/* Master: opt-in (-w) reload when the config file changes, seen through inotify on its directory. */
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

/* Editors and Kubernetes replace files by rename (a ConfigMap swaps its "..data" link), so
 * the directory is watched, not the file; a short delay folds a burst of events into one
 * reload. */
#define WATCH_DELAY_S 0.2

struct watch {
	int fd;
	ev_io io;
	ev_timer delay;
	char *dir;
	char *base;
	struct master *m;
};

static void delay_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct watch *w = t->data;

	(void)loop;
	(void)revents;
	reload_run(w->m, "inotify");
}

static bool relevant(const struct watch *w, const struct inotify_event *ev)
{
	if (ev->len == 0)
		return false;
	return strcmp(ev->name, w->base) == 0 || strcmp(ev->name, "..data") == 0;
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

int watch_start(struct master *m)
{
	struct watch *w;
	char *p1 = NULL, *p2 = NULL;
	const char *path = m->config_path;
	int rc;

	if (path == NULL)
		return 0;
	if (strncmp(path, "file://", 7) == 0)
		path += 7;
	w = calloc(1, sizeof(*w));
	p1 = strdup(path);
	p2 = strdup(path);
	if (w == NULL || p1 == NULL || p2 == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	w->dir = strdup(dirname(p1));
	w->base = strdup(basename(p2));
	w->m = m;
	if (w->dir == NULL || w->base == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->fd < 0 || inotify_add_watch(w->fd, w->dir, IN_CLOSE_WRITE | IN_MOVED_TO |
							    IN_CREATE | IN_DELETE) < 0) {
		rc = -errno;
		if (w->fd >= 0)
			close(w->fd);
		log_error("master", "cannot watch %s: %s", w->dir, strerror(-rc));
		goto fail;
	}
	ev_io_init(&w->io, io_cb, w->fd, EV_READ);
	w->io.data = w;
	ev_io_start(m->loop, &w->io);
	ev_timer_init(&w->delay, delay_cb, WATCH_DELAY_S, 0.);
	w->delay.data = w;
	m->watcher = w;
	log_info("master", "watching %s for changes", path);
	free(p1);
	free(p2);
	return 0;
fail:
	if (w != NULL) {
		free(w->dir);
		free(w->base);
	}
	free(w);
	free(p1);
	free(p2);
	return rc;
}

void watch_stop(struct master *m)
{
	struct watch *w = m->watcher;

	if (w == NULL)
		return;
	ev_io_stop(m->loop, &w->io);
	ev_timer_stop(m->loop, &w->delay);
	close(w->fd);
	free(w->dir);
	free(w->base);
	free(w);
	m->watcher = NULL;
}
