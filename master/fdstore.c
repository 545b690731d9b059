/* Master: systemd's file descriptor store (FDSTORE=1), so that a TURN-TCP or RFC 6062
 * call survives a kill -9 of the whole daemon under systemd.
 *
 * While the daemon runs, the workers send each plain TURN-TCP connection that carries an
 * allocation and each bound RFC 6062 peer/data pair here with its name (IPC_FDSTORE,
 * common/fdname.h; worker/fdstore.c); only the main process may talk to systemd
 * (NotifyAccess=main), so we pass the socket on, close our copy and keep the name, per
 * slot. A connection's end (IPC_FDUNSTORE) and a worker's death take the names out
 * (FDSTOREREMOVE=1): systemd would otherwise hold the sockets open for nobody.
 *
 * At start, systemd passes what the store held (LISTEN_FDS, LISTEN_FDNAMES). Ours become
 * parked connections (master/park.c) with an empty state: the buffers of the dead
 * processes are gone. The state file's take-over keeps the TURN-TCP records then, and
 * each socket goes to the worker whose record its name names, as a live upgrade's do; a
 * socket whose record was not taken over is closed. Every name systemd passed leaves the
 * store: the workers store the sockets they take back again, under their new names.
 *
 * A live upgrade's new master is not the main process until the old one has sent
 * MAINPID= and exited (master/upgrade.c): what it stored before would be refused. It
 * holds a copy of each socket until then (a pidfd of the old master says when), and
 * stores them all at the next tick. */
#include "config.h"

#include "master/master.h"

#include <errno.h>
#include <fcntl.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/fdname.h"
#include "common/grow.h"
#include "common/ipc.h"
#include "common/log.h"
#include "common/park.h"

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

struct held {
	char *name;
	int fd;
};

struct fdstore {
	bool on;		/* $NOTIFY_SOCKET set, libsystemd built in */
	int old_master;		/* pidfd of a live upgrade's old master while it runs, or -1 */
	struct held *held;	/* stored meanwhile */
	size_t n_held, cap_held;
	void **roots;		/* per slot: a tsearch tree of the names stored */
	unsigned n_roots;
	/* what systemd passed at start, until fdstore_adopt */
	int *in_fds;
	char **in_names;
	size_t n_in;
};

#ifdef HAVE_LIBSYSTEMD
static void store_remove(const char *name)
{
	char msg[FDNAME_MAX + 40];

	snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s", name);
	(void)sd_notify(0, msg);
}

static int store_add(const char *name, int fd)
{
	char msg[FDNAME_MAX + 40];

	snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s", name);
	return sd_pid_notify_with_fds(0, 0, msg, &fd, 1);
}

/* Takes what systemd passed: ours wait for fdstore_adopt, the rest close. */
static void take_passed(struct fdstore *s)
{
	char **names = NULL;
	int n = sd_listen_fds_with_names(1, &names);

	if (n <= 0)
		return;
	s->in_fds = calloc((size_t)n, sizeof(*s->in_fds));
	s->in_names = calloc((size_t)n, sizeof(*s->in_names));
	for (int i = 0; i < n; i++) {
		int fd = SD_LISTEN_FDS_START + i;
		struct park_hdr h;
		const char *name = names != NULL && names[i] != NULL ? names[i] : "";

		(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
		if (s->in_fds == NULL || s->in_names == NULL || fdname_parse(name, &h) < 0 ||
		    sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 0) <= 0) {
			log_warn("master", "fd store: passed descriptor %d (%s) is not a stream "
					   "connection of ours: closed", fd, name);
			if (name[0] != '\0')
				store_remove(name);
			close(fd);
			continue;
		}
		s->in_fds[s->n_in] = fd;
		s->in_names[s->n_in++] = strdup(name);
	}
	for (int i = 0; names != NULL && i < n; i++)
		free(names[i]);
	free(names);
}
#else
static void store_remove(const char *name)
{
	(void)name;
}

static int store_add(const char *name, int fd)
{
	(void)name;
	(void)fd;
	return -ENOSYS;
}

static void take_passed(struct fdstore *s)
{
	(void)s;
}
#endif

static int name_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

static void name_gone(void *key)
{
	store_remove(key);
	free(key);
}

int fdstore_init(struct master *m)
{
	struct fdstore *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return -ENOMEM;
	s->old_master = -1;
#ifdef HAVE_LIBSYSTEMD
	s->on = getenv("NOTIFY_SOCKET") != NULL;
#endif
	if (s->on && upgrade_is_child(m)) {
		s->old_master = (int)syscall(SYS_pidfd_open, getppid(), 0);
		if (s->old_master < 0)
			log_warn("master", "fd store: no pidfd of the old master (%s): what the "
					   "workers store before it exits may be refused",
				 strerror(errno));
	}
	take_passed(s);
	m->fdstore = s;
	if (s->on)
		log_info("master", "fd store: TURN-TCP and RFC 6062 connections go in systemd's "
				   "file descriptor store (kept across a crash restart)");
	return 0;
}

bool fdstore_on(const struct master *m)
{
	return m->fdstore != NULL && m->fdstore->on;
}

size_t fdstore_passed(const struct master *m)
{
	return m->fdstore != NULL ? m->fdstore->n_in : 0;
}

/* The connection's state as a live upgrade would have parked it, less the buffers. */
static int passed_blob(const char *name, int fd, uint8_t **blob)
{
	struct park_hdr h;
	socklen_t sl = sizeof(h.peer);

	if (fdname_parse(name, &h) < 0)
		return -EBADMSG;
	h.flags |= PARK_F_CRASH;
	if (h.kind != PARK_TDATA) {
		if (getpeername(fd, (struct sockaddr *)&h.peer, &sl) < 0)
			return -errno;
		h.peer_len = sl;
	}
	*blob = malloc(sizeof(h));
	if (*blob == NULL)
		return -ENOMEM;
	memcpy(*blob, &h, sizeof(h));
	return 0;
}

void fdstore_adopt(struct master *m)
{
	struct fdstore *s = m->fdstore;
	size_t before = park_count(m), lost = 0;

	if (s == NULL || s->n_in == 0)
		return;
	for (size_t i = 0; i < s->n_in; i++) {
		uint8_t *blob = NULL;

		if (s->in_names[i] == NULL || passed_blob(s->in_names[i], s->in_fds[i], &blob) < 0) {
			close(s->in_fds[i]);
			lost++;
		} else if (park_add(m, blob, sizeof(struct park_hdr), s->in_fds[i]) < 0) {
			lost++;	/* park_add closed it */
		}
		if (s->in_names[i] != NULL)
			store_remove(s->in_names[i]);
		free(s->in_names[i]);
	}
	lost += park_remap_from(m, before);
	log_info("master", "fd store: %zu stream connections taken back from systemd, %zu "
			   "closed (no allocation of theirs was taken over)",
		 park_count(m) - before, lost);
	free(s->in_fds);
	free(s->in_names);
	s->in_fds = NULL;
	s->in_names = NULL;
	s->n_in = 0;
}

static void **slot_root(struct master *m, unsigned slot)
{
	struct fdstore *s = m->fdstore;

	if (s->roots == NULL) {
		s->roots = calloc(m->n_slots, sizeof(*s->roots));
		if (s->roots == NULL)
			return NULL;
		s->n_roots = m->n_slots;
	}
	return slot < s->n_roots ? &s->roots[slot] : NULL;
}

/* Stores name's socket now, or holds a copy while the old master is the main process. */
static void store_or_hold(struct fdstore *s, const char *name, int fd)
{
	int copy;

	if (s->old_master < 0) {
		if (store_add(name, fd) < 0)
			log_warn("master", "fd store: cannot store %s", name);
		return;
	}
	if (GROW_ARRAY(&s->held, &s->cap_held, s->n_held + 1, 64) < 0)
		return;
	copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (copy < 0)
		return;
	s->held[s->n_held].name = strdup(name);
	if (s->held[s->n_held].name == NULL) {
		close(copy);
		return;
	}
	s->held[s->n_held++].fd = copy;
}

/* Drops the held copies of name (all of them when name is NULL), or those of slot's
 * names when slot_only. */
static void unhold(struct fdstore *s, const char *name, bool slot_only, unsigned slot)
{
	size_t k = 0;

	for (size_t i = 0; i < s->n_held; i++) {
		struct park_hdr h;
		bool drop = name == NULL || strcmp(s->held[i].name, name) == 0;

		if (slot_only)
			drop = fdname_parse(s->held[i].name, &h) == 0 && h.slot == slot;
		if (!drop) {
			s->held[k++] = s->held[i];
			continue;
		}
		close(s->held[i].fd);
		free(s->held[i].name);
	}
	s->n_held = k;
}

void fdstore_tick(struct master *m)
{
	struct fdstore *s = m->fdstore;
	struct pollfd pfd;

	if (s == NULL || s->old_master < 0)
		return;
	pfd = (struct pollfd){ .fd = s->old_master, .events = POLLIN };
	if (poll(&pfd, 1, 0) <= 0)
		return;
	close(s->old_master);
	s->old_master = -1;
	for (size_t i = 0; i < s->n_held; i++)
		store_or_hold(s, s->held[i].name, s->held[i].fd);
	if (s->n_held)
		log_info("master", "fd store: the old master is gone: %zu stream connections "
				   "stored", s->n_held);
	unhold(s, NULL, false, 0);
}

void fdstore_msg(struct mworker *w, const struct ipc_msg *msg, int *fd)
{
	struct master *m = w->m;
	const char *name = ipc_msg_str(msg);
	void **root;
	struct park_hdr h;
	char *key;
	void *found;

	if (!fdstore_on(m) || name == NULL || fdname_parse(name, &h) < 0 || h.slot != w->slot ||
	    (root = slot_root(m, w->slot)) == NULL)
		return;	/* *fd, if any, closes with the message */
	found = tfind(name, root, name_cmp);
	if (msg->hdr.type == IPC_FDUNSTORE) {
		if (found == NULL)
			return;
		key = *(char **)found;
		tdelete(name, root, name_cmp);
		unhold(m->fdstore, key, false, 0);
		name_gone(key);
		return;
	}
	if (found != NULL || (key = strdup(name)) == NULL)
		return;
	if (tsearch(key, root, name_cmp) == NULL) {
		free(key);
		return;
	}
	store_or_hold(m->fdstore, name, *fd);
}

void fdstore_slot_gone(struct master *m, unsigned slot)
{
	void **root;

	if (!fdstore_on(m) || (root = slot_root(m, slot)) == NULL || *root == NULL)
		return;
	unhold(m->fdstore, NULL, true, slot);
	tdestroy(*root, name_gone);
	*root = NULL;
}

void fdstore_free(struct master *m)
{
	struct fdstore *s = m->fdstore;

	if (s == NULL)
		return;
	for (unsigned i = 0; i < s->n_roots; i++)
		if (s->roots[i] != NULL)
			tdestroy(s->roots[i], free);	/* a stop: systemd drops the store itself */
	for (size_t i = 0; i < s->n_in; i++) {
		close(s->in_fds[i]);
		free(s->in_names[i]);
	}
	unhold(s, NULL, false, 0);
	free(s->held);
	if (s->old_master >= 0)
		close(s->old_master);
	free(s->in_fds);
	free(s->in_names);
	free(s->roots);
	free(s);
	m->fdstore = NULL;
}
