/* Master: the DNS names of the running config (STRICT_DNS endpoints, admin.siblings given by
 * name) resolved again every DNS_REFRESH_S seconds, as stunnerd re-resolves its STRICT_DNS
 * clusters every 5 s: a media server pod or a replica that comes back with another IP is
 * reached without a reload.
 *
 * getaddrinfo() can block for many seconds (resolver timeouts, a pod's search domains), and
 * the master answers health probes and supervises the workers, so a short-lived child
 * process resolves (fork without exec: the master has one thread) and writes the answers
 * to a pipe that the master reads in its loop. When a name's addresses changed the master
 * updates the running config and publishes it as a new snapshot, which the workers apply
 * as they apply a reload's. An answer that the name has no address (EAI_NONAME,
 * EAI_NODATA) empties it; any other failure (a timeout, an unreachable DNS server) keeps
 * what it had, so a passing DNS outage ends no call. A reload in between makes the
 * answers stale: they are dropped, and the next round asks again. */
#include "config.h"

#include "master/master.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/grow.h"
#include "common/log.h"

#define DNS_REFRESH_S 5.0
/* A resolver child still running after this long is killed (it also alarm()s itself). */
#define DNS_CHILD_LIMIT_S 30
#define DNS_MAX_ADDRS 16	/* addresses kept per name, as at load (CONF_MAX_RESOLVED) */

/* One answer on the pipe: the name's index in walk order, conf_resolve_getaddrinfo's
 * result, then n addresses (port 0, zero-padded). */
struct dns_rec {
	uint32_t idx;
	int32_t rc;
	uint32_t n;
};

/* One name of a config and where its addresses live. */
struct dns_name {
	const char *name;
	struct sockaddr_storage **resolved;
	size_t *n_resolved;
};

struct dnsr {
	ev_timer timer;
	ev_io io;
	pid_t pid;		/* the resolver child, 0 when none */
	int fd;			/* its pipe's reading end, -1 when none */
	double started;
	uint64_t epoch;		/* m->cfg_epoch when it started */
	uint8_t *buf;		/* what it wrote so far */
	size_t len, cap;
	uint64_t runs, changes, failed;
};

/* The names of cfg in a fixed order; *n of them. NULL with *n 0 when there are none. */
static struct dns_name *dns_names(struct conf *cfg, size_t *n)
{
	struct dns_name *v = NULL;
	size_t cap = 0;

	*n = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < cfg->n_clusters; i++) {
			struct conf_cluster *cl = &cfg->clusters[i];

			if (cl->type != CONF_CLUSTER_STRICT_DNS)
				continue;
			for (size_t j = 0; j < cl->n_endpoints; j++) {
				if (pass == 1)
					v[*n] = (struct dns_name){ cl->endpoints[j].text,
								   &cl->endpoints[j].resolved,
								   &cl->endpoints[j].n_resolved };
				(*n)++;
			}
		}
		for (size_t i = 0; i < cfg->admin.n_siblings; i++) {
			struct conf_sibling *s = &cfg->admin.siblings[i];

			if (!s->is_name || s->self)
				continue;
			if (pass == 1)
				v[*n] = (struct dns_name){ s->address, &s->resolved, &s->n_resolved };
			(*n)++;
		}
		if (pass == 0) {
			if (*n == 0)
				return NULL;
			cap = *n;
			*n = 0;
			v = calloc(cap, sizeof(*v));
			if (v == NULL)
				return NULL;
		}
	}
	return v;
}

static bool write_all(int fd, const void *p, size_t len)
{
	const uint8_t *b = p;

	while (len > 0) {
		ssize_t w = write(fd, b, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		b += w;
		len -= (size_t)w;
	}
	return true;
}

/* The child: resolves every name, writes the answers, exits. Never returns. */
static void dns_child(const struct dns_name *names, size_t n, int wfd)
{
	master_helper_child(wfd, DNS_CHILD_LIMIT_S);
	log_set_procname("master/dns");
	for (size_t i = 0; i < n; i++) {
		struct sockaddr_storage out[DNS_MAX_ADDRS];
		struct dns_rec r = { .idx = (uint32_t)i, .n = 0 };
		size_t got = 0;

		r.rc = conf_resolve_getaddrinfo(NULL, names[i].name, out, DNS_MAX_ADDRS, &got);
		r.n = r.rc == 0 ? (uint32_t)got : 0;
		if (!write_all(wfd, &r, sizeof(r)) || !write_all(wfd, out, r.n * sizeof(out[0])))
			_exit(1);
	}
	_exit(0);
}

static int ss_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(struct sockaddr_storage));
}

static bool same_set(const struct sockaddr_storage *a, size_t na, struct sockaddr_storage *b,
		     size_t nb)
{
	struct sockaddr_storage *sa;
	bool same;

	if (na != nb)
		return false;
	if (na == 0)
		return true;
	sa = malloc(na * sizeof(*sa));
	if (sa == NULL)
		return true; /* no memory: keep what there is */
	memcpy(sa, a, na * sizeof(*sa));
	qsort(sa, na, sizeof(*sa), ss_cmp);
	qsort(b, nb, sizeof(*b), ss_cmp);
	same = memcmp(sa, b, na * sizeof(*sa)) == 0;
	free(sa);
	return same;
}

/* "a, b, c", or "nothing". */
static void format_addrs(const struct sockaddr_storage *v, size_t n, char *out, size_t size)
{
	size_t off = 0;

	snprintf(out, size, "nothing");
	for (size_t i = 0; i < n && off < size; i++) {
		char ip[INET6_ADDRSTRLEN] = "?";
		const void *src = v[i].ss_family == AF_INET
					  ? (const void *)&((const struct sockaddr_in *)&v[i])->sin_addr
					  : (const void *)&((const struct sockaddr_in6 *)&v[i])->sin6_addr;

		inet_ntop(v[i].ss_family, src, ip, sizeof(ip));
		off += (size_t)snprintf(out + off, size - off, "%s%s", i ? ", " : "", ip);
	}
}

/* One name's answer: true when its addresses changed (and were replaced). */
static bool dns_apply_one(struct dnsr *d, const struct dns_name *nm, const struct dns_rec *r,
			  struct sockaddr_storage *addrs)
{
	struct sockaddr_storage *copy = NULL;
	size_t n = r->n;
	char list[512];

	if (r->rc != 0 && r->rc != -ENOENT) {
		d->failed++;
		log_debug("master", "dns: '%s': %s (its addresses stay)", nm->name,
			  strerror(-r->rc));
		return false;
	}
	if (same_set(*nm->resolved, *nm->n_resolved, addrs, n))
		return false;
	if (n > 0) {
		copy = malloc(n * sizeof(*copy));
		if (copy == NULL)
			return false;
		memcpy(copy, addrs, n * sizeof(*copy));
	}
	free(*nm->resolved);
	*nm->resolved = copy;
	*nm->n_resolved = n;
	format_addrs(copy, n, list, sizeof(list));
	if (n == 0)
		log_warn("master", "dns: '%s' no longer resolves (matches nothing until it does)",
			 nm->name);
	else
		log_info("master", "dns: '%s' now resolves to %s", nm->name, list);
	return true;
}

/* The child's answers, once it closed the pipe. */
static void dns_apply(struct master *m, struct dnsr *d)
{
	struct sockaddr_storage addrs[DNS_MAX_ADDRS];
	size_t n = 0, off = 0, changed = 0;
	struct dns_name *names;

	if (d->epoch != m->cfg_epoch || m->cfg == NULL)
		return; /* a reload replaced the config meanwhile */
	names = dns_names(m->cfg, &n);
	while (names != NULL && off + sizeof(struct dns_rec) <= d->len) {
		struct dns_rec r;
		size_t bytes;

		memcpy(&r, d->buf + off, sizeof(r));
		off += sizeof(r);
		if (r.idx >= n || r.n > DNS_MAX_ADDRS)
			break;
		bytes = r.n * sizeof(struct sockaddr_storage);
		if (off + bytes > d->len)
			break;
		memcpy(addrs, d->buf + off, bytes);
		off += bytes;
		changed += dns_apply_one(d, &names[r.idx], &r, addrs);
	}
	free(names);
	if (changed == 0)
		return;
	d->changes += changed;
	if (reload_publish(m) == 0)
		log_info("master", "configuration generation %llu active (DNS: %zu name%s changed)",
			 (unsigned long long)m->generation, changed, changed == 1 ? "" : "s");
}

static void dns_end_child(struct master *m, struct dnsr *d, bool kill_it)
{
	if (d->fd >= 0) {
		ev_io_stop(m->loop, &d->io);
		close(d->fd);
		d->fd = -1;
	}
	if (kill_it && d->pid > 0)
		kill(d->pid, SIGKILL);
	/* libev's child watcher (supervise.c, pid 0) reaps it; it belongs to no slot. */
	d->pid = 0;
	d->len = 0;
}

static void dns_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct master *m = w->data;
	struct dnsr *d = m->dns;

	(void)loop;
	(void)revents;
	for (;;) {
		ssize_t r;

		if (GROW_ARRAY(&d->buf, &d->cap, d->len + 1, 4096) < 0) {
			dns_end_child(m, d, true);
			return;
		}
		r = read(d->fd, d->buf + d->len, d->cap - d->len);
		if (r > 0) {
			d->len += (size_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		break; /* EOF: the child wrote everything (or died) */
	}
	dns_apply(m, d);
	dns_end_child(m, d, false);
}

static void dns_start_child(struct master *m, struct dnsr *d)
{
	struct dns_name *names;
	size_t n = 0;
	int p[2];
	pid_t pid;

	names = dns_names(m->cfg, &n);
	if (names == NULL)
		return;
	if (pipe2(p, O_CLOEXEC) < 0) {
		free(names);
		return;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		dns_child(names, n, p[1]);
	}
	free(names);
	close(p[1]);
	if (pid < 0 || fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
		log_warn("master", "dns: cannot start the resolver: %s", strerror(errno));
		if (pid > 0)
			kill(pid, SIGKILL);
		close(p[0]);
		return;
	}
	d->pid = pid;
	d->fd = p[0];
	d->len = 0;
	d->started = ev_now(m->loop);
	d->epoch = m->cfg_epoch;
	d->runs++;
	ev_io_init(&d->io, dns_read_cb, d->fd, EV_READ);
	d->io.data = m;
	ev_io_start(m->loop, &d->io);
}

static void dns_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct master *m = t->data;
	struct dnsr *d = m->dns;

	(void)loop;
	(void)revents;
	if (d->pid > 0) {
		if (ev_now(m->loop) - d->started > DNS_CHILD_LIMIT_S) {
			log_warn("master", "dns: the resolver ran over %d s: killed", DNS_CHILD_LIMIT_S);
			dns_end_child(m, d, true);
		}
		return;
	}
	if (m->stopping || m->handing_over || m->cfg == NULL)
		return;
	dns_start_child(m, d);
}

int dns_refresh_start(struct master *m)
{
	struct dnsr *d = calloc(1, sizeof(*d));

	if (d == NULL)
		return -ENOMEM;
	d->fd = -1;
	m->dns = d;
	ev_timer_init(&d->timer, dns_timer_cb, DNS_REFRESH_S, DNS_REFRESH_S);
	d->timer.data = m;
	ev_timer_start(m->loop, &d->timer);
	return 0;
}

void dns_refresh_stop(struct master *m)
{
	struct dnsr *d = m->dns;

	if (d == NULL)
		return;
	ev_timer_stop(m->loop, &d->timer);
	dns_end_child(m, d, true);
	free(d->buf);
	free(d);
	m->dns = NULL;
}

json_t *dns_refresh_json(const struct master *m)
{
	const struct dnsr *d = m->dns;
	size_t n = 0;
	struct dns_name *names = m->cfg != NULL ? dns_names(m->cfg, &n) : NULL;

	free(names);
	return json_pack("{s:i, s:f, s:I, s:I, s:I}", "names", (int)n, "interval_s", DNS_REFRESH_S,
			 "runs", (json_int_t)(d ? d->runs : 0), "changes",
			 (json_int_t)(d ? d->changes : 0), "failures",
			 (json_int_t)(d ? d->failed : 0));
}
