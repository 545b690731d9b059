/* Control frames waiting, in order, for room on their control socket (contract in
 * common/ipcq.h). */
#include "common/ipcq.h"

#include <assert.h>
#include <errno.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/queue.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "common/ipc.h"
#include "common/log.h"
#include "common/mono.h"

/* Not an errno of ipc_send(): the frames ipcq_free() finds still waiting. */
#define IPCQ_E_CLOSED (-ECANCELED)

struct ipcq_frame {
	TAILQ_ENTRY(ipcq_frame) link;
	uint16_t type;
	bool own_fd;
	bool shut;   /* IPCQ_SHUT_ON_DROP */
	int fd;      /* -1: none */
	size_t len;  /* payload bytes at data */
	size_t cost; /* in the bound */
	char *key;   /* after the payload in data, or NULL */
	uint8_t data[];
};

struct ipcq {
	uint32_t magic;
	int sock;
	TAILQ_HEAD(, ipcq_frame) q; /* oldest first */
	size_t n, bytes, max_bytes;
	/* What the queue fills the socket to (SIOCOUTQ: the memory charged for the unread
	 * frames): a share of its send buffer, the rest left to the frames sent directly.
	 * SIZE_MAX: no such limit. */
	size_t fill;
	struct ipcq_fds *fds; /* the owned descriptors' bound, or NULL */
	uint64_t (*now_ms)(void);
	void *keys; /* tsearch tree of the keyed frames that wait */
	/* Drops by type: in all, since the last line, the last line's time (mono ms, 0:
	 * none yet) and the last reason (a negative errno). */
	uint64_t dropped[IPC_TYPE_END], unreported[IPC_TYPE_END];
	uint64_t reported_ms[IPC_TYPE_END];
	int why[IPC_TYPE_END];
	char scope[16];
	char name[64];
};

#define IPCQ_MAGIC 0x69706371u /* "ipcq" */

static struct ipcq *ipcq_checked(struct ipcq *q)
{
	assert(q != NULL && q->magic == IPCQ_MAGIC);
	return q;
}

static int key_cmp(const void *a, const void *b)
{
	return strcmp(((const struct ipcq_frame *)a)->key, ((const struct ipcq_frame *)b)->key);
}

static bool sock_full(int rc)
{
	return rc == -EAGAIN || rc == -ENOBUFS;
}

static const char *why_str(int why)
{
	/* clang-format off */
	switch (why) {
	case -ENOBUFS: return "the queue is full";
	case IPCQ_E_CLOSED: return "still waiting when the queue closed";
	case -EMFILE: return "too many descriptors wait";
	default: return strerror(-why);
	}
	/* clang-format on */
}

/* One [warn] line per type with drops not logged yet, once IPCQ_REPORT_MS has passed
 * since its last (or always: force). Returns the lines logged. */
static size_t report(struct ipcq *q, bool force)
{
	uint64_t now = 0;
	size_t lines = 0;

	for (uint16_t t = 0; t < IPC_TYPE_END; t++) {
		if (q->unreported[t] == 0)
			continue;
		if (now == 0)
			now = q->now_ms() | 1; /* never 0: 0 means no line yet */
		if (!force && q->reported_ms[t] != 0 && now - q->reported_ms[t] < IPCQ_REPORT_MS)
			continue;
		/* One reason per type is kept: of several drops the line names the last's. */
		log_warn(q->scope, "%s: %llu %s frame%s dropped (%s%s), %llu in all", q->name,
			 (unsigned long long)q->unreported[t], ipc_type_name(t),
			 q->unreported[t] == 1 ? "" : "s",
			 q->unreported[t] == 1 ? "" : "last: ", why_str(q->why[t]),
			 (unsigned long long)q->dropped[t]);
		q->unreported[t] = 0;
		q->reported_ms[t] = now;
		lines++;
	}
	return lines;
}

static void count_drop(struct ipcq *q, uint16_t type, int why)
{
	uint16_t t = type < IPC_TYPE_END ? type : 0;

	q->dropped[t]++;
	q->unreported[t]++;
	q->why[t] = why;
}

void ipcq_drop_fd(int fd, unsigned flags)
{
	if ((flags & IPCQ_OWN_FD) == 0 || fd < 0)
		return;
	ipc_drop_fd(fd, (flags & IPCQ_SHUT_ON_DROP) != 0);
}

/* The flags that drop f's descriptor unsent (ipcq_drop_fd), or close it once it is sent. */
static unsigned fd_flags(const struct ipcq_frame *f, bool sent)
{
	return (f->own_fd ? IPCQ_OWN_FD : 0u) | (f->shut && !sent ? IPCQ_SHUT_ON_DROP : 0u);
}

static bool costs_fd(const struct ipcq_frame *f)
{
	return f->own_fd && f->fd >= 0;
}

/* Takes f out of the queue and frees it (its descriptor closed when the queue owns it,
 * shut down first when it was not sent and f asks for that). */
static void unlink_frame(struct ipcq *q, struct ipcq_frame *f, bool sent)
{
	TAILQ_REMOVE(&q->q, f, link);
	q->n--;
	q->bytes -= f->cost;
	if (costs_fd(f) && q->fds != NULL)
		q->fds->used--;
	if (f->key != NULL)
		(void)tdelete(f, &q->keys, key_cmp);
	ipcq_drop_fd(f->fd, fd_flags(f, sent));
	free(f);
}

/* Below the share of the socket's buffer the queue may fill (or the socket cannot say):
 * the rest stays for the frames sent directly (a PING, a LOGLEVEL), which a queue that
 * filled the socket would have the socket refuse. The kernel says a unix socket is
 * writable (EV_WRITE) only while its unread bytes are at most a quarter of its send
 * buffer, so the watcher never wakes a flush that may send nothing. */
static bool has_room(const struct ipcq *q)
{
	int unread;

	if (q->fill == SIZE_MAX || ioctl(q->sock, SIOCOUTQ, &unread) < 0)
		return true;
	return (size_t)unread < q->fill;
}

struct ipcq *ipcq_new(int sock, size_t max_bytes, const char *scope, const char *name)
{
	struct ipcq *q = calloc(1, sizeof(*q));
	socklen_t optlen = sizeof(int);
	int sndbuf = 0;

	if (q == NULL)
		return NULL;
	q->magic = IPCQ_MAGIC;
	q->sock = sock;
	q->max_bytes = max_bytes;
	q->fill = SIZE_MAX;
	/* Read once: nothing sets SO_SNDBUF on a control socket after it is made
	 * (ipc_socketpair() leaves net.core.wmem_default); one that did must make a new queue. */
	if (getsockopt(sock, SOL_SOCKET, SO_SNDBUF, &sndbuf, &optlen) == 0 && sndbuf > 0)
		q->fill = (size_t)sndbuf / IPCQ_FILL_SHARE;
	q->now_ms = mono_ms;
	TAILQ_INIT(&q->q);
	snprintf(q->scope, sizeof(q->scope), "%s", scope);
	snprintf(q->name, sizeof(q->name), "%s", name);
	return q;
}

void ipcq_free(struct ipcq *q)
{
	struct ipcq_frame *f;

	if (q == NULL)
		return;
	(void)ipcq_checked(q);
	while ((f = TAILQ_FIRST(&q->q)) != NULL) {
		count_drop(q, f->type, IPCQ_E_CLOSED);
		unlink_frame(q, f, false);
	}
	report(q, true);
	q->magic = 0;
	free(q);
}

/* Queues a frame behind what waits. */
static int push(struct ipcq *q, uint16_t type, const void *payload, size_t len, int fd,
		unsigned flags, const char *key)
{
	bool own = (flags & IPCQ_OWN_FD) != 0, shut = (flags & IPCQ_SHUT_ON_DROP) != 0;
	size_t klen = key != NULL ? strlen(key) + 1 : 0, cost = IPCQ_FRAME_COST + len + klen;
	struct ipcq_frame *f;
	int rc = -ENOMEM;

	if (key != NULL) {
		struct ipcq_frame probe = { .key = (char *)(uintptr_t)key };

		if (tfind(&probe, &q->keys, key_cmp) != NULL) {
			ipcq_drop_fd(fd, flags);
			return -EEXIST;
		}
	}
	if (q->bytes + cost > q->max_bytes) {
		rc = -ENOBUFS;
		goto fail;
	}
	if (own && fd >= 0 && q->fds != NULL && q->fds->used >= q->fds->max) {
		rc = -EMFILE;
		goto fail;
	}
	f = malloc(sizeof(*f) + len + klen);
	if (f == NULL)
		goto fail;
	f->type = type;
	f->own_fd = own;
	f->shut = shut;
	f->fd = fd;
	f->len = len;
	f->cost = cost;
	f->key = NULL;
	if (len > 0)
		memcpy(f->data, payload, len);
	if (key != NULL) {
		f->key = (char *)f->data + len;
		memcpy(f->key, key, klen);
		if (tsearch(f, &q->keys, key_cmp) == NULL) {
			free(f);
			goto fail;
		}
	}
	TAILQ_INSERT_TAIL(&q->q, f, link);
	q->n++;
	q->bytes += cost;
	if (costs_fd(f) && q->fds != NULL)
		q->fds->used++;
	return 0;
fail:
	count_drop(q, type, rc);
	ipcq_drop_fd(fd, flags);
	report(q, false);
	return rc;
}

int ipcq_send(struct ipcq *q, uint16_t type, const void *payload, size_t len, int fd,
	      unsigned flags, const char *key)
{
	int rc;

	(void)ipcq_checked(q);
	/* Behind what waits, never before it. */
	if (q->n == 0 && has_room(q)) {
		rc = ipc_send(q->sock, type, payload, len, fd);
		if (!sock_full(rc)) {
			if (rc < 0) {
				count_drop(q, type, rc);
				report(q, false);
			}
			ipcq_drop_fd(fd, rc < 0 ? flags : flags & ~IPCQ_SHUT_ON_DROP);
			return rc;
		}
	}
	return push(q, type, payload, len, fd, flags, key);
}

size_t ipcq_flush(struct ipcq *q)
{
	struct ipcq_frame *f;

	(void)ipcq_checked(q);
	while ((f = TAILQ_FIRST(&q->q)) != NULL && has_room(q)) {
		int rc = ipc_send(q->sock, f->type, f->data, f->len, f->fd);

		if (sock_full(rc))
			break;
		if (rc < 0)
			count_drop(q, f->type, rc); /* the peer gone: nothing reads any more */
		unlink_frame(q, f, rc == 0);
	}
	report(q, false);
	return q->n;
}

bool ipcq_cancel(struct ipcq *q, const char *key)
{
	struct ipcq_frame probe = { .key = (char *)(uintptr_t)key };
	void *found;

	(void)ipcq_checked(q);
	if (q->keys == NULL || (found = tfind(&probe, &q->keys, key_cmp)) == NULL)
		return false;
	unlink_frame(q, *(struct ipcq_frame **)found, false);
	return true;
}

size_t ipcq_waiting(const struct ipcq *q)
{
	return q->n;
}

uint64_t ipcq_dropped(const struct ipcq *q, uint16_t type)
{
	uint64_t n = 0;

	if (type != 0)
		return type < IPC_TYPE_END ? q->dropped[type] : 0;
	for (uint16_t t = 0; t < IPC_TYPE_END; t++)
		n += q->dropped[t];
	return n;
}

size_t ipcq_report(struct ipcq *q)
{
	return report(ipcq_checked(q), false);
}

void ipcq_set_fds(struct ipcq *q, struct ipcq_fds *fds)
{
	(void)ipcq_checked(q);
	assert(q->n == 0);
	q->fds = fds;
}

size_t ipcq_lost_report(struct ipcq_lost *lost, const char *scope, const char *name)
{
	uint64_t now;

	if (lost->unreported == 0)
		return 0;
	now = (lost->now_ms != NULL ? lost->now_ms() : mono_ms()) | 1; /* never 0: no line yet */
	if (lost->reported_ms != 0 && now - lost->reported_ms < IPCQ_REPORT_MS)
		return 0;
	log_warn(scope, "%s: %llu frame%s dropped unqueued (last: %s, %s), %llu in all", name,
		 (unsigned long long)lost->unreported, lost->unreported == 1 ? "" : "s",
		 ipc_type_name(lost->type), strerror(-lost->why),
		 (unsigned long long)lost->dropped);
	lost->unreported = 0;
	lost->reported_ms = now;
	return 1;
}

void ipcq_lost(struct ipcq_lost *lost, const char *scope, const char *name, uint16_t type, int fd,
	       unsigned flags, int why)
{
	ipcq_drop_fd(fd, flags);
	lost->dropped++;
	lost->unreported++;
	lost->type = type;
	lost->why = why;
	(void)ipcq_lost_report(lost, scope, name);
}

size_t ipcq_fd_share(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return IPCQ_FDS_FALLBACK;
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur / 4 > SIZE_MAX)
		return SIZE_MAX;
	return (size_t)(rl.rlim_cur / 4);
}

void ipcq_set_clock(struct ipcq *q, uint64_t (*now_ms)(void))
{
	ipcq_checked(q)->now_ms = now_ms;
}
