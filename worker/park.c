/* Worker: TURN-TCP connections across a live upgrade. The old worker parks each plain
 * TURN-TCP connection (its socket, the partial frame its input buffer holds, the bytes
 * its output buffer has not written, the record of its allocation) with the master and
 * leaves the record LIVE; the new worker of the slot the record was copied to restores
 * the connection with the allocation around it, as it adopts a UDP allocation. Nothing
 * is read from or written to the socket in between: what the client sends meanwhile
 * waits in the socket, and it never sees a reset. */
#include "config.h"

#include "worker/wk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/park.h"

/* The whole parking of one worker waits at most this long for the master to read. */
#define WK_PARK_TIMEOUT_MS 5000

static int wk_park_one(struct worker *w, struct wk_tconn *c, int timeout_ms)
{
	size_t out_len = c->out_len - c->out_off, len;
	struct park_hdr h;
	uint8_t *blob;
	int rc;

	if (strlen(c->l->name) > IPC_NAME_MAX)
		return -ENAMETOOLONG;
	len = sizeof(h) + c->in_len + out_len;
	blob = malloc(len);
	if (!blob)
		return -ENOMEM;
	memset(&h, 0, sizeof(h));
	h.magic = PARK_MAGIC;
	h.version = PARK_VERSION;
	h.kind = PARK_TCONN;
	h.slot = w->slot;
	h.rec_idx = c->alloc ? c->alloc->rec_idx : PARK_NO_REC;
	h.flags = c->authed ? PARK_F_AUTHED : 0;
	h.peer_len = c->peer_len;
	memcpy(&h.peer, &c->peer, c->peer_len);
	memcpy(h.listener, c->l->name, strlen(c->l->name));
	h.in_len = (uint32_t)c->in_len;
	h.out_len = (uint32_t)out_len;
	memcpy(blob, &h, sizeof(h));
	memcpy(blob + sizeof(h), c->in, c->in_len);
	if (out_len)
		memcpy(blob + sizeof(h) + c->in_len, c->out + c->out_off, out_len);
	rc = park_send(w->h->ctl_fd, blob, len, c->fd, timeout_ms);
	free(blob);
	return rc;
}

void wk_park_all(struct worker *w)
{
	uint64_t start = mono_ms();
	unsigned parked = 0, failed = 0;

	for (size_t i = 0; i < w->n_ls; i++) {
		struct wk_listener *l = w->ls[i];
		struct wk_tconn *c, *next;

		if (!l->active || l->proto != WORKER_PROTO_TCP)
			continue;
		for (c = l->conns; c; c = next) {
			uint64_t spent = mono_ms() - start;

			next = c->next;
			if (!wk_tconn_parkable(c))
				continue;
			if (spent >= WK_PARK_TIMEOUT_MS ||
			    wk_park_one(w, c, (int)(WK_PARK_TIMEOUT_MS - spent)) < 0) {
				failed++;
				continue;
			}
			/* The master holds the socket now: ours closes, the record stays. */
			if (c->alloc)
				wk_alloc_forget(w, c->alloc);
			wk_tconn_close(w, c);
			parked++;
		}
	}
	if (parked || failed)
		log_info("worker", "slot %u: %u TCP connections handed over%s", w->slot, parked,
			 failed ? " (some could not be: they end)" : "");
}

static struct wk_listener *wk_park_listener(struct worker *w, const char *name)
{
	for (size_t i = 0; i < w->n_ls; i++) {
		struct wk_listener *l = w->ls[i];

		if (l->active && l->snap_ok && l->proto == WORKER_PROTO_TCP && !l->secure &&
		    strcmp(l->name, name) == 0)
			return l;
	}
	return NULL;
}

/* Restores h->parked[i] (not yet restored) as a connection, or NULL. */
static struct wk_tconn *wk_park_restore(struct worker *w, size_t i)
{
	const struct worker_parked *p = &w->h->parked[i];
	const uint8_t *body = p->blob + sizeof(struct park_hdr);
	struct wk_listener *l;
	struct wk_tconn *c;
	struct park_hdr h;

	if (!w->park_used || w->park_used[i] || park_check(p->blob, p->len, &h) < 0)
		return NULL;
	l = wk_park_listener(w, h.listener);
	if (!l)
		return NULL;
	c = wk_tcp_restore(w, l, p->fd, (const struct sockaddr *)&h.peer, h.peer_len, body,
			   h.in_len, body + h.in_len, h.out_len, (h.flags & PARK_F_AUTHED) != 0);
	if (c)
		w->park_used[i] = true;
	return c;
}

static void wk_park_init(struct worker *w)
{
	if (w->park_used || w->h->n_parked == 0)
		return;
	w->park_used = calloc(w->h->n_parked, sizeof(*w->park_used));
}

int wk_park_adopt(struct worker *w, uint32_t idx, struct shm_alloc *rec)
{
	struct wk_tconn *c = NULL;
	struct wk_alloc *a;
	int rc;

	wk_park_init(w);
	for (size_t i = 0; i < w->h->n_parked && !c; i++)
		if (w->h->parked[i].rec_idx == idx)
			c = wk_park_restore(w, i);
	if (!c)
		return -ENOENT;
	rc = wk_alloc_attach_conn(w, c, idx, rec, &a);
	if (rc == 0)
		rc = wk_adopt_relay(w, a, idx, rec);
	if (rc < 0) {
		wk_tconn_close(w, c);
		return rc;
	}
	(void)wk_tconn_restart(w, c);
	return 0;
}

void wk_park_rest(struct worker *w)
{
	unsigned restored = 0, ended = 0;

	wk_park_init(w);
	for (size_t i = 0; i < w->h->n_parked; i++) {
		const struct worker_parked *p = &w->h->parked[i];
		struct wk_tconn *c;

		if (w->park_used && w->park_used[i]) {
			restored++;
			continue;
		}
		c = p->rec_idx == PARK_NO_REC ? wk_park_restore(w, i) : NULL;
		if (c) {
			restored++;
			(void)wk_tconn_restart(w, c);
			continue;
		}
		/* Its allocation could not be adopted, or no listener serves it now. */
		close(p->fd);
		ended++;
	}
	free(w->park_used);
	w->park_used = NULL;
	if (restored || ended)
		log_info("worker", "slot %u: %u TCP connections taken over, %u ended", w->slot,
			 restored, ended);
}
