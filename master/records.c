/* Session records: the master's writer; the webhook client is master/webhook.c (contract in
 * master/records.h). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>
#include <jansson.h>

#include "common/grow.h"
#include "common/log.h"
#include "common/mono.h"
#include "conf/conf.h"
#include "master/master.h"
#include "master/records.h"
#include "master/webhook.h"
#include "shm/shm_internal.h"
#include "shm/shm_quota.h"
#include "shm/shm_records.h"

/* The rings hold SHM_REC_RING (512) each; what a burst of ends does not fit waits in its
 * worker's backlog until a drain frees room (shm/shm_records.h). 100 drains a second keep
 * that rare while the master's loop is busy (10,000 ends a second ended by admin
 * disconnects: with 20 drains a second and no backlog yet, 1,800-2,200 of 10,000 were
 * dropped, with 100 none up to 15,000 a second; see bench/records_ends.py and
 * docs/performance.md) and empty a backlog at 51,200 events a second. A drain of empty
 * rings reads two words per slot. */
#define RECORDS_DRAIN_S 0.01

enum rec_out { OUT_NONE, OUT_FILE, OUT_STDOUT, OUT_SYSLOG };

struct records {
	struct master *m;
	ev_timer drain_w;
	bool frozen;
	enum rec_out out;
	char *path;               /* OUT_FILE */
	int fd;                   /* OUT_FILE / OUT_STDOUT, else -1 */

	struct webhook *hook;     /* NULL: no webhook */
	/* gen of the last allocation recorded per table index: the second event of the
	 * same (idx, gen) is skipped. A worker killed between its event and its retire
	 * leaves the record marked ending (shm_alloc_end_mark), which its replacement ends
	 * unrecorded; this still catches a record left by a build before the mark, which
	 * its replacement re-adopts and records again at its end */
	uint64_t *last_gen;
	uint32_t cap;
	int64_t real_off;         /* real_offset's */
};

static struct records *R(struct master *m)
{
	return m->records;
}

static void json_addr(json_t *o, const char *k, const struct shm_addr *a)
{
	char ip[INET6_ADDRSTRLEN], buf[INET6_ADDRSTRLEN + 10];

	if (a->family != AF_INET && a->family != AF_INET6)
		return;
	inet_ntop(a->family, a->addr, ip, sizeof(ip));
	if (a->port != 0)
		snprintf(buf, sizeof(buf), a->family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip,
			 a->port);
	else
		snprintf(buf, sizeof(buf), "%s", ip);
	json_object_set_new(o, k, json_string(buf));
}

static const char *transport_name(unsigned t)
{
	static const char *const names[] = { "none", "udp", "tcp", "tls", "dtls" };

	return t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

/* CLOCK_REALTIME minus CLOCK_MONOTONIC, in ns. Kept while it moves by less than 1 ms, so
 * one allocation's start reads the same in its start and end records (two readings of the
 * clocks differ by a few hundred ns, which can cross a millisecond); a step of the wall
 * clock is taken at once. */
static int64_t real_offset(int64_t *cached)
{
	struct timespec rt;
	int64_t mono = (int64_t)mono_ns(), off;

	clock_gettime(CLOCK_REALTIME, &rt);
	off = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec - mono;
	if (*cached == 0 || off - *cached > 1000000 || *cached - off > 1000000)
		*cached = off;
	return *cached;
}

/* RFC 3339 UTC with milliseconds of a CLOCK_MONOTONIC time. */
static void iso_time(char *buf, size_t cap, uint64_t mono, int64_t off)
{
	int64_t real_ms = ((int64_t)mono + off) / 1000000;
	time_t s = (time_t)(real_ms / 1000);
	struct tm tm;

	gmtime_r(&s, &tm);
	snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 (int)(real_ms % 1000));
}

static json_t *ev_json(const struct master *m, const struct shm_rec_ev *ev, int64_t off)
{
	char start[96], end[96];
	size_t ulen = ev->user_len <= SHM_ALLOC_USER_MAX ? ev->user_len : SHM_ALLOC_USER_MAX;
	size_t uoff = shm_quota_user_off(ev->username, ulen);
	json_t *o, *peers;
	unsigned n = ev->n_peers < SHM_REC_PEERS ? ev->n_peers : SHM_REC_PEERS;
	const char *lname = "?";
	size_t lname_len = 1;
	char slot_name[SHM_LSLOT_NAME_MAX];

	iso_time(start, sizeof(start), ev->created_ns, off);
	iso_time(end, sizeof(end), ev->ended_ns, off);
	if (ev->listener[0] != '\0') {
		lname = ev->listener;
		lname_len = strnlen(ev->listener, sizeof(ev->listener));
	} else if (shm_lslot_name(m->shm, ev->listener_idx, slot_name, sizeof(slot_name),
				  NULL) == 0) {
		/* By its slot (shm/shm_lslot.h): a removed listener's name too. */
		lname = slot_name;
		lname_len = strlen(lname);
	}
	o = json_pack("{s:s, s:i, s:I, s:s%, s:s%, s:s%, s:s, s:i, s:s}", "type",
		      ev->start ? "session_start" : "session_end", "id", (int)ev->idx, "gen",
		      (json_int_t)ev->gen, "listener", lname, lname_len, "username", ev->username,
		      ulen, "user", ev->username + uoff, ulen - uoff, "transport",
		      transport_name(ev->transport), "worker", (int)ev->owner, "start", start);
	if (o == NULL)
		return NULL;
	if (!ev->start) {
		json_object_set_new(o, "end", json_string(end));
		json_object_set_new(o, "duration",
				    json_real(ev->ended_ns > ev->created_ns
						      ? (double)(ev->ended_ns - ev->created_ns) / 1e9
						      : 0.0));
		json_object_set_new(o, "reason", json_string(shm_rec_reason_name(
							 (enum shm_rec_reason)ev->reason)));
	}
	json_addr(o, "client", &ev->client);
	json_addr(o, "server", &ev->server);
	json_addr(o, "relay", &ev->relay);
	json_addr(o, "relay2", &ev->relay2);
	if (ev->start)
		return o;	/* no peers and no traffic yet */
	peers = json_array();
	for (unsigned i = 0; i < n && peers != NULL; i++) {
		json_t *p = json_object();

		json_addr(p, "a", &ev->peers[i]);
		json_array_append(peers, json_object_get(p, "a"));
		json_decref(p);
	}
	json_object_set_new(o, "peers",
			    json_pack("{s:i, s:o}", "count", (int)ev->n_peers, "addresses",
				      peers != NULL ? peers : json_array()));
	json_object_set_new(o, "to_peer",
			    json_pack("{s:I, s:I}", "packets",
				      (json_int_t)ev->ctr[SHM_ACTR_PKTS_TO_PEER], "bytes",
				      (json_int_t)ev->ctr[SHM_ACTR_BYTES_TO_PEER]));
	json_object_set_new(o, "from_peer",
			    json_pack("{s:I, s:I}", "packets",
				      (json_int_t)ev->ctr[SHM_ACTR_PKTS_FROM_PEER], "bytes",
				      (json_int_t)ev->ctr[SHM_ACTR_BYTES_FROM_PEER]));
	return o;
}

/* ---- the line output ----------------------------------------------------------------- */

static int out_open(struct records *r)
{
	if (r->out == OUT_FILE) {
		r->fd = open(r->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
		if (r->fd < 0) {
			int e = errno;

			log_error("records", "cannot open %s: %s (session records are dropped "
					     "until a reload or logrotate)",
				  r->path, strerror(e));
			return -e;
		}
	} else if (r->out == OUT_STDOUT) {
		r->fd = STDOUT_FILENO;
	}
	return 0;
}

static void out_close(struct records *r)
{
	if (r->out == OUT_FILE && r->fd >= 0)
		close(r->fd);
	r->fd = -1;
}

static bool write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

struct drain_ctx {
	struct records *r;
	char *buf;
	size_t len, cap;
	unsigned lines;
	bool nomem;
};

static void on_event(const struct shm_rec_ev *ev, void *arg)
{
	struct drain_ctx *c = arg;
	struct records *r = c->r;
	json_t *o;
	char *line;
	size_t n;

	if (!ev->carried && !ev->start && ev->idx < r->cap && r->last_gen != NULL) {
		if (r->last_gen[ev->idx] == ev->gen)
			return;
		r->last_gen[ev->idx] = ev->gen;
	}
	if (r->out == OUT_NONE && r->hook == NULL)
		return;	/* session records are off: the rings are drained all the same */
	o = ev_json(r->m, ev, real_offset(&r->real_off));
	if (o == NULL) {
		CMM_STORE_SHARED(shm_records_hdr(r->m->shm)->master_dropped,
				 shm_records_hdr(r->m->shm)->master_dropped + 1);
		return;
	}
	if (r->out != OUT_NONE) {
		line = json_dumps(o, JSON_COMPACT);
		n = line != NULL ? strlen(line) : 0;
		if (line != NULL && r->out == OUT_SYSLOG) {
			syslog(LOG_INFO, "%s", line);
			c->lines++;
		} else if (line != NULL && c->len + n + 1 <= c->cap) {
			memcpy(c->buf + c->len, line, n);
			c->buf[c->len + n] = '\n';
			c->len += n + 1;
			c->lines++;
		} else if (line != NULL) {
			if (GROW_ARRAY(&c->buf, &c->cap, c->len + n + 1, 65536) < 0) {
				CMM_STORE_SHARED(shm_records_hdr(r->m->shm)->master_dropped,
						 shm_records_hdr(r->m->shm)->master_dropped + 1);
			} else {
				memcpy(c->buf + c->len, line, n);
				c->buf[c->len + n] = '\n';
				c->len += n + 1;
				c->lines++;
			}
		}
		free(line);
	}
	if (r->hook != NULL)
		(void)webhook_push(r->hook, o);
	json_decref(o);
}

static void drain(struct records *r)
{
	struct drain_ctx c = { .r = r };
	struct shm_records_hdr *h;

	if (r->frozen || r->m->shm == NULL)
		return;
	if (shm_records_drain(r->m->shm, on_event, &c) == 0)
		return;
	h = shm_records_hdr(r->m->shm);
	if (r->out == OUT_SYSLOG) {
		CMM_STORE_SHARED(h->written, h->written + c.lines);
	} else if (c.len > 0) {
		if (r->fd >= 0 && write_all(r->fd, c.buf, c.len))
			CMM_STORE_SHARED(h->written, h->written + c.lines);
		else
			CMM_STORE_SHARED(h->master_dropped, h->master_dropped + c.lines);
	}
	free(c.buf);
	webhook_kick(r->hook);
}

static void drain_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)revents;
	drain(t->data);
}

/* ---- life cycle ----------------------------------------------------------------------- */

static void apply(struct records *r)
{
	const struct conf_admin *a = &r->m->cfg->admin;
	enum rec_out out = OUT_NONE;
	bool on;

	if (a->records_file == NULL || a->records_file[0] == '\0')
		out = OUT_NONE;
	else if (strcmp(a->records_file, "stdout") == 0)
		out = OUT_STDOUT;
	else if (strcmp(a->records_file, "syslog") == 0)
		out = OUT_SYSLOG;
	else
		out = OUT_FILE;
	if (out != r->out || (out == OUT_FILE && strcmp(r->path, a->records_file) != 0)) {
		out_close(r);
		free(r->path);
		r->path = out == OUT_FILE ? strdup(a->records_file) : NULL;
		r->out = out == OUT_FILE && r->path == NULL ? OUT_NONE : out;
		(void)out_open(r);
	}
	on = r->out != OUT_NONE || (a->records_webhook != NULL && a->records_webhook[0] != '\0');
	if (r->m->shm != NULL) {
		shm_records_want(r->m->shm, on);
		shm_records_want_start(r->m->shm, a->records_start && on);
	}
	if (a->records_webhook == NULL || a->records_webhook[0] == '\0') {
		webhook_free(r->hook);	/* its backlog too: no webhook, nothing to deliver */
		r->hook = NULL;
		if (r->m->shm != NULL && !r->frozen)
			shm_records_hook_note(r->m->shm, 0, 0);
		return;
	}
	if (r->hook == NULL) {
		r->hook = webhook_new(r->m);
		if (r->hook == NULL) {
			log_error("records", "webhook %s: no memory: no records are sent",
				  a->records_webhook);
			return;
		}
		if (r->frozen)
			webhook_pause(r->hook);
	}
	(void)webhook_configure(r->hook, a->records_webhook, a->records_webhook_ca_file,
				a->records_webhook_server_name);
}

int records_start(struct master *m)
{
	struct records *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return -ENOMEM;
	r->m = m;
	r->fd = -1;
	r->cap = m->shm != NULL ? shm_alloc_capacity(m->shm) : 0;
	r->last_gen = calloc(r->cap ? r->cap : 1, sizeof(*r->last_gen));
	if (r->last_gen == NULL) {
		free(r);
		return -ENOMEM;
	}
	ev_timer_init(&r->drain_w, drain_cb, RECORDS_DRAIN_S, RECORDS_DRAIN_S);
	r->drain_w.data = r;
	m->records = r;
	apply(r);
	ev_timer_start(m->loop, &r->drain_w);
	/* A take-over's events, its ends beyond the rings' room included (our own backlog,
	 * shm/shm_records.h), out of the rings before any worker runs (master/main.c) and
	 * written by the first drain, after the forks: nothing is encoded or written in the
	 * restart's or upgrade's gap, and they still precede every event a new worker
	 * pushes. Without memory they stay where they are (written at the first drain,
	 * the ring's before the new workers', the backlog's after). */
	if (m->shm != NULL && shm_records_hold(m->shm) < 0)
		log_warn("records", "no memory to hold the take-over's session records: some "
				    "may be written after later ones");
	return 0;
}

void records_apply(struct master *m)
{
	if (R(m) != NULL)
		apply(R(m));
}

void records_reopen(struct master *m)
{
	struct records *r = R(m);

	if (r == NULL || r->out != OUT_FILE)
		return;
	drain(r);	/* what ended before the rotation goes to the old file */
	out_close(r);
	if (out_open(r) == 0)
		log_info("records", "reopened %s", r->path);
}

void records_flush(struct master *m)
{
	if (R(m) != NULL)
		drain(R(m));
}

void records_freeze(struct master *m)
{
	struct records *r = R(m);

	if (r == NULL)
		return;
	drain(r);
	r->frozen = true;
	ev_timer_stop(m->loop, &r->drain_w);
	if (r->hook != NULL)
		webhook_pause(r->hook);
}

void records_thaw(struct master *m)
{
	struct records *r = R(m);

	if (r == NULL || !r->frozen)
		return;
	r->frozen = false;
	ev_timer_start(m->loop, &r->drain_w);
	if (r->hook != NULL)
		webhook_run(r->hook);
}

/* At exit without a state file, what is still open ends with the daemon: a shutdown
 * record each (with a state file, the next start takes them over and records them when
 * they end). */
static void record_open_ones(struct records *r)
{
	struct shm *shm = r->m->shm;
	struct drain_ctx c = { .r = r };
	struct shm_alloc *copy;
	uint32_t cursor = 0, idx;
	struct shm_records_hdr *h;

	if (shm == NULL || r->m->state_path != NULL || r->frozen || r->m->handed_over ||
	    (r->out == OUT_NONE && r->hook == NULL))
		return;
	copy = malloc(sizeof(*copy));
	if (copy == NULL)
		return;
	while (shm_alloc_next_live(shm, &cursor, &idx) == 0) {
		struct shm_rec_ev ev;

		if (shm_alloc_read_copy(shm, idx, copy) == 0 &&
		    shm_records_event(shm, idx, copy, SHM_REC_SHUTDOWN, mono_ns(), &ev) == 0)
			on_event(&ev, &c);
	}
	explicit_bzero(copy, sizeof(*copy));
	free(copy);
	h = shm_records_hdr(shm);
	if (r->out == OUT_SYSLOG)
		h->written += c.lines;
	else if (c.len > 0 && r->fd >= 0 && write_all(r->fd, c.buf, c.len))
		h->written += c.lines;
	free(c.buf);
}

void records_free(struct master *m)
{
	struct records *r = R(m);

	if (r == NULL)
		return;
	drain(r);
	record_open_ones(r);
	ev_timer_stop(m->loop, &r->drain_w);
	webhook_free(r->hook);
	out_close(r);
	free(r->path);
	free(r->last_gen);
	free(r);
	m->records = NULL;
}
