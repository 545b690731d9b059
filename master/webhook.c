/* The session records' webhook client: batches over HTTP or HTTPS from the master's loop
 * (contract in master/webhook.h). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/log.h"
#include "master/master.h"
#include "master/webhook.h"
#include "shm/shm_internal.h"
#include "shm/shm_records.h"

#define HOOK_TIMEOUT_S 5.0        /* connect, TLS handshake, request and status line */
#define HOOK_BACKOFF_MIN_S 0.25
#define HOOK_BACKOFF_MAX_S 5.0
#define HOOK_RESP_MAX 1024u
#define HOOK_ADDRS 8u             /* addresses of a name kept; tried in turn */
#define HOOK_DNS_LIMIT_S 30       /* a resolver child running longer kills itself */
#define HOOK_DNS_AGAIN_S 5.0      /* a failed delivery resolves a name again, this often */
#define WEBHOOK_MAGIC 0x57484f4bu /* "WHOK" */

/* One request's steps; each runs until it would block, then waits on the socket. */
enum hook_step { HS_IDLE, HS_CONNECT, HS_HANDSHAKE, HS_SEND, HS_RECV };

struct webhook {
	uint32_t magic;
	struct master *m;
	bool paused;

	/* where: set by webhook_configure */
	char *url, *ca_file, *server_name;
	bool tls;
	struct sockaddr_storage addrs[HOOK_ADDRS];
	socklen_t alens[HOOK_ADDRS];
	unsigned n_addrs, cur;         /* 0 addresses: unresolved, nothing is sent */
	char rhost[256], rport[8];     /* what is resolved */
	bool numeric;                  /* rhost is an address: never resolved again */
	char host[256];                /* the Host header: the URL's authority */
	char name[256];                /* the name the certificate must carry (https) */
	char *path;
	SSL_CTX *ctx;                  /* https; NULL: its CA file did not load */

	json_t *backlog;               /* records not yet delivered, oldest first */
	size_t batch_n;                /* the first batch_n are in flight */
	double backoff;
	uint64_t dropped;

	/* a name's resolution: a child process (getaddrinfo can block for seconds) */
	pid_t dns_pid;
	int dns_fd;
	ev_io dns_io;
	struct hook_dns_ans {
		int32_t rc;                    /* getaddrinfo's */
		uint32_t n;
		uint32_t lens[HOOK_ADDRS];
		struct sockaddr_storage ss[HOOK_ADDRS];
	} dns_ans;
	size_t dns_got;
	double dns_at;                 /* ev_now of the last start */

	/* the request in flight */
	enum hook_step step;
	uint64_t seq;                  /* requests started */
	int fd;
	SSL *ssl;
	ev_io io;
	int io_events;
	ev_timer tmo, retry;
	char *req;
	size_t req_len, req_off;
	char resp[HOOK_RESP_MAX];
	size_t resp_len;
};

static struct webhook *hook_of(void *data)
{
	struct webhook *h = data;

	assert(h != NULL && h->magic == WEBHOOK_MAGIC);
	return h;
}

static void hook_close(struct webhook *h)
{
	if (h->fd >= 0) {
		ev_io_stop(h->m->loop, &h->io);
		close(h->fd);
		h->fd = -1;
	}
	SSL_free(h->ssl);	/* no close_notify: the request said Connection: close */
	h->ssl = NULL;
	ev_timer_stop(h->m->loop, &h->tmo);
	free(h->req);
	h->req = NULL;
	h->req_len = h->req_off = 0;
	h->resp_len = 0;
	h->io_events = 0;
	h->step = HS_IDLE;
}

static void dns_start(struct webhook *h);

/* The backlog's size (and what a full one dropped) where the metrics read them. */
static void hook_note(struct webhook *h, uint64_t dropped)
{
	/* paused: the segment is another master's (live upgrade) */
	if (h->m->shm != NULL && !h->paused)
		shm_records_hook_note(h->m->shm, dropped, json_array_size(h->backlog));
}

static void hook_done(struct webhook *h, bool ok, const char *why)
{
	hook_close(h);
	if (ok) {
		for (size_t i = 0; i < h->batch_n && json_array_size(h->backlog) > 0; i++)
			json_array_remove(h->backlog, 0);
		h->batch_n = 0;
		h->backoff = 0;
		hook_note(h, 0);
		webhook_kick(h);
		return;
	}
	h->batch_n = 0;
	if (h->n_addrs > 1)
		h->cur = (h->cur + 1) % h->n_addrs;	/* the name's next address next time */
	if (!h->numeric && ev_now(h->m->loop) - h->dns_at >= HOOK_DNS_AGAIN_S)
		dns_start(h);	/* it may have moved */
	if (h->m->shm != NULL) {
		struct shm_records_hdr *hdr = shm_records_hdr(h->m->shm);

		CMM_STORE_SHARED(hdr->webhook_failures, hdr->webhook_failures + 1);
	}
	h->backoff = h->backoff == 0 ? HOOK_BACKOFF_MIN_S : h->backoff * 2;
	if (h->backoff > HOOK_BACKOFF_MAX_S)
		h->backoff = HOOK_BACKOFF_MAX_S;
	log_warn("records", "webhook %s: %s (%zu records wait, retry in %.2f s)", h->url, why,
		 json_array_size(h->backlog), h->backoff);
	ev_timer_set(&h->retry, h->backoff, 0.);
	ev_timer_start(h->m->loop, &h->retry);
}

/* Waits for events on the socket (the same ones: nothing to change). */
static void hook_wait(struct webhook *h, int events)
{
	if (h->io_events == events)
		return;
	ev_io_stop(h->m->loop, &h->io);
	ev_io_set(&h->io, h->fd, events);
	ev_io_start(h->m->loop, &h->io);
	h->io_events = events;
}

/* Why a TLS call failed, for the log: the certificate's verdict first. */
static const char *tls_why(struct webhook *h, int err, char *buf, size_t cap)
{
	long v = SSL_get_verify_result(h->ssl);
	unsigned long e = ERR_peek_last_error();

	if (v != X509_V_OK)
		snprintf(buf, cap, "certificate verification failed: %s",
			 X509_verify_cert_error_string(v));
	else if (e != 0)
		snprintf(buf, cap, "TLS: %s", ERR_reason_error_string(e) != NULL
						      ? ERR_reason_error_string(e)
						      : "error");
	else if (err == SSL_ERROR_SYSCALL && errno != 0)
		snprintf(buf, cap, "TLS: %s", strerror(errno));
	else
		snprintf(buf, cap, "TLS: connection closed");
	ERR_clear_error();
	return buf;
}

/* A TLS call's outcome: 1 done, 0 waits (the socket armed), -1 failed (logged, counted). */
static int tls_result(struct webhook *h, int rc)
{
	char why[256];
	int err;

	if (rc > 0)
		return 1;
	err = SSL_get_error(h->ssl, rc);
	if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
		hook_wait(h, err == SSL_ERROR_WANT_READ ? EV_READ : EV_WRITE);
		return 0;
	}
	hook_done(h, false, tls_why(h, err, why, sizeof(why)));
	return -1;
}

/* The TLS session of this request: the configured name is sent as SNI (unless it is an
 * address) and must be in the certificate, which must chain to the CA store. */
static int tls_start(struct webhook *h)
{
	unsigned char a[16];
	bool literal = inet_pton(AF_INET, h->name, a) == 1 || inet_pton(AF_INET6, h->name, a) == 1;

	if (h->ctx == NULL)
		return -EINVAL;
	h->ssl = SSL_new(h->ctx);
	if (h->ssl == NULL || SSL_set_fd(h->ssl, h->fd) != 1)
		return -ENOMEM;
	if (literal) {
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(h->ssl), h->name) != 1)
			return -EINVAL;
	} else if (SSL_set_tlsext_host_name(h->ssl, h->name) != 1 ||
		   SSL_set1_host(h->ssl, h->name) != 1) {
		return -EINVAL;
	}
	SSL_set_hostflags(h->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	return 0;
}

static void step_connect(struct webhook *h)
{
	int err = 0;
	socklen_t l = sizeof(err);

	if (getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
		err = errno;
	if (err != 0) {
		hook_done(h, false, strerror(err));
		return;
	}
	if (!h->tls) {
		h->step = HS_SEND;
		return;
	}
	err = tls_start(h);
	if (err < 0) {
		hook_done(h, false, h->ctx == NULL ? "no CA store (see the error at load)"
						   : "cannot set up TLS");
		return;
	}
	h->step = HS_HANDSHAKE;
}

static void step_send(struct webhook *h)
{
	ssize_t n;

	if (h->tls) {
		ERR_clear_error();
		n = SSL_write(h->ssl, h->req + h->req_off, (int)(h->req_len - h->req_off));
		if (tls_result(h, (int)n) <= 0)
			return;
	} else {
		n = send(h->fd, h->req + h->req_off, h->req_len - h->req_off, MSG_NOSIGNAL);
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			hook_wait(h, EV_WRITE);
			return;
		}
		if (n < 0) {
			hook_done(h, false, strerror(errno));
			return;
		}
	}
	h->req_off += (size_t)n;
	if (h->req_off == h->req_len)
		h->step = HS_RECV;
}

/* The status line is all we read: 2xx delivers the batch. */
static void step_recv(struct webhook *h)
{
	char *buf = h->resp + h->resp_len;
	size_t cap = sizeof(h->resp) - 1 - h->resp_len;
	ssize_t n;
	int code = 0;

	if (h->tls) {
		int rc;

		ERR_clear_error();
		rc = SSL_read(h->ssl, buf, (int)cap);
		if (rc <= 0 && SSL_get_error(h->ssl, rc) == SSL_ERROR_ZERO_RETURN)
			n = 0;
		else if (tls_result(h, rc) <= 0)
			return;
		else
			n = rc;
	} else {
		n = recv(h->fd, buf, cap, 0);
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			hook_wait(h, EV_READ);
			return;
		}
		if (n < 0) {
			hook_done(h, false, strerror(errno));
			return;
		}
	}
	h->resp_len += (size_t)n;
	h->resp[h->resp_len] = '\0';
	if (n != 0 && strchr(h->resp, '\n') == NULL && h->resp_len < sizeof(h->resp) - 1)
		return;	/* more of the status line to come: the loop reads again */
	if (sscanf(h->resp, "HTTP/1.%*d %d", &code) == 1 && code >= 200 && code < 300)
		hook_done(h, true, NULL);
	else
		hook_done(h, false, n == 0 && h->resp_len == 0 ? "connection closed"
							      : "not a 2xx answer");
}

/* Runs the request's steps until one waits on the socket or the request ends. */
static void hook_run(struct webhook *h)
{
	uint64_t seq = h->seq;

	/* a request that ends starts the next one (hook_done): that one waits for its
	 * socket's first event */
	while (h->step != HS_IDLE && h->seq == seq) {
		enum hook_step before = h->step;
		size_t off = h->req_off, got = h->resp_len;

		switch (h->step) {
		case HS_CONNECT:
			step_connect(h);
			break;
		case HS_HANDSHAKE:
			ERR_clear_error();
			if (tls_result(h, SSL_connect(h->ssl)) == 1)
				h->step = HS_SEND;
			break;
		case HS_SEND:
			step_send(h);
			break;
		case HS_RECV:
			step_recv(h);
			break;
		case HS_IDLE:
			break;
		}
		/* armed and waiting: the socket's next event goes on */
		if (h->step == before && h->req_off == off && h->resp_len == got)
			return;
	}
}

static void hook_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	hook_run(hook_of(w->data));
}

static void hook_tmo_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)revents;
	hook_done(hook_of(t->data), false, "timed out");
}

static void hook_retry_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)revents;
	webhook_kick(hook_of(t->data));
}

/* The next batch's request: headers and a JSON array of up to WEBHOOK_BATCH records. */
static int hook_request(struct webhook *h, size_t n)
{
	json_t *batch = json_array();
	char *body, head[768];
	size_t blen;
	int hl;

	for (size_t i = 0; i < n && batch != NULL; i++)
		json_array_append(batch, json_array_get(h->backlog, i));
	body = batch != NULL ? json_dumps(batch, JSON_COMPACT) : NULL;
	json_decref(batch);
	if (body == NULL)
		return -ENOMEM;
	blen = strlen(body);
	hl = snprintf(head, sizeof(head),
		      "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: turngated/" PACKAGE_VERSION
		      "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
		      "Connection: close\r\n\r\n",
		      h->path, h->host, blen);
	h->req = hl > 0 && (size_t)hl < sizeof(head) ? malloc((size_t)hl + blen) : NULL;
	if (h->req == NULL) {
		free(body);
		return -ENOMEM;
	}
	memcpy(h->req, head, (size_t)hl);
	memcpy(h->req + hl, body, blen);
	free(body);
	h->req_len = (size_t)hl + blen;
	h->req_off = 0;
	return 0;
}

void webhook_kick(struct webhook *h)
{
	size_t n;

	if (h == NULL || h->url == NULL || h->step != HS_IDLE || ev_is_active(&h->retry) ||
	    h->paused || json_array_size(h->backlog) == 0)
		return;
	if (h->n_addrs == 0) {
		/* a name that did not resolve: asked again while records wait */
		if (!h->numeric && ev_now(h->m->loop) - h->dns_at >= HOOK_DNS_AGAIN_S)
			dns_start(h);
		return;
	}
	n = json_array_size(h->backlog);
	if (n > WEBHOOK_BATCH)
		n = WEBHOOK_BATCH;
	if (hook_request(h, n) < 0)
		return;	/* no memory now: the next drain tries again */
	h->batch_n = n;
	h->seq++;
	h->fd = socket(h->addrs[h->cur].ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (h->fd < 0) {
		hook_done(h, false, strerror(errno));
		return;
	}
	ev_io_init(&h->io, hook_io_cb, h->fd, EV_WRITE);
	h->io.data = h;
	h->io_events = 0;
	ev_timer_set(&h->tmo, HOOK_TIMEOUT_S, 0.);
	ev_timer_start(h->m->loop, &h->tmo);
	h->step = HS_CONNECT;
	if (connect(h->fd, (struct sockaddr *)&h->addrs[h->cur], h->alens[h->cur]) < 0 &&
	    errno != EINPROGRESS) {
		hook_done(h, false, strerror(errno));
		return;
	}
	hook_wait(h, EV_WRITE);	/* connected or not: writable says, SO_ERROR tells */
}

/* ---- resolving the host ---------------------------------------------------------------- */

static void dns_end(struct webhook *h, bool kill_it)
{
	if (h->dns_fd >= 0) {
		ev_io_stop(h->m->loop, &h->dns_io);
		close(h->dns_fd);
		h->dns_fd = -1;
	}
	if (kill_it && h->dns_pid > 0)
		kill(h->dns_pid, SIGKILL);
	/* libev's child watcher (supervise.c, pid 0) reaps it; it belongs to no slot */
	h->dns_pid = 0;
	h->dns_got = 0;
}

static _Noreturn void dns_child(const char *host, const char *port, int wfd)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL, *ai;
	struct hook_dns_ans a;
	const char *p = (const char *)&a;
	size_t left = sizeof(a);

	master_helper_child(wfd, HOOK_DNS_LIMIT_S);
	memset(&a, 0, sizeof(a));
	a.rc = getaddrinfo(host, port, &hints, &res);
	for (ai = a.rc == 0 ? res : NULL; ai != NULL && a.n < HOOK_ADDRS; ai = ai->ai_next) {
		if (ai->ai_addrlen > sizeof(a.ss[0]))
			continue;
		memcpy(&a.ss[a.n], ai->ai_addr, ai->ai_addrlen);
		a.lens[a.n++] = ai->ai_addrlen;
	}
	while (left > 0) {
		ssize_t w = write(wfd, p, left);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(1);
		p += w;
		left -= (size_t)w;
	}
	_exit(0);
}

static void dns_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct webhook *h = hook_of(w->data);
	struct hook_dns_ans *a = &h->dns_ans;

	(void)loop;
	(void)revents;
	for (;;) {
		ssize_t r = read(h->dns_fd, (char *)a + h->dns_got, sizeof(*a) - h->dns_got);

		if (r > 0) {
			h->dns_got += (size_t)r;
			if (h->dns_got < sizeof(*a))
				continue;
			break;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		break;	/* EOF: the child wrote all or died */
	}
	if (h->dns_got == sizeof(*a) && a->rc == 0 && a->n > 0 && a->n <= HOOK_ADDRS) {
		bool moved = a->n != h->n_addrs ||
			     memcmp(a->ss, h->addrs, a->n * sizeof(a->ss[0])) != 0;

		memcpy(h->addrs, a->ss, a->n * sizeof(a->ss[0]));
		memcpy(h->alens, a->lens, a->n * sizeof(a->lens[0]));
		if (moved)
			h->cur = 0;
		h->n_addrs = a->n;
	} else {
		log_warn("records", "webhook %s: cannot resolve %s: %s (%s)", h->url, h->rhost,
			 h->dns_got == sizeof(*a) && a->rc != 0 ? gai_strerror(a->rc)
								 : "the resolver failed",
			 h->n_addrs > 0 ? "its last addresses are used"
					: "records wait in the backlog; tried again after 5 s");
	}
	dns_end(h, false);
	webhook_kick(h);
}

/* Resolves h->rhost in a child process; the answer comes to the loop (dns_read_cb). */
static void dns_start(struct webhook *h)
{
	int p[2];
	pid_t pid;

	if (h->dns_pid > 0 || h->numeric)
		return;
	h->dns_at = ev_now(h->m->loop);
	if (pipe2(p, O_CLOEXEC) < 0) {
		log_warn("records", "webhook %s: cannot resolve %s: %s", h->url, h->rhost,
			 strerror(errno));
		return;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		dns_child(h->rhost, h->rport, p[1]);
	}
	close(p[1]);
	if (pid < 0 || fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
		log_warn("records", "webhook %s: cannot start the resolver: %s", h->url,
			 strerror(errno));
		if (pid > 0)
			kill(pid, SIGKILL);
		close(p[0]);
		return;
	}
	h->dns_pid = pid;
	h->dns_fd = p[0];
	h->dns_got = 0;
	ev_io_init(&h->dns_io, dns_read_cb, h->dns_fd, EV_READ);
	h->dns_io.data = h;
	ev_io_start(h->m->loop, &h->dns_io);
}

/* SCHEME://HOST[:PORT][/PATH] (the config checked its shape) into the Host header, the
 * verified name, the path and the address: an IP at once, a name by a resolver child. */
static int hook_parse(struct webhook *h, const char *url)
{
	const char *a = strstr(url, "://"), *slash, *colon;
	char host[256], port[8];
	size_t hl;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST },
			*res = NULL;

	if (a == NULL)
		return -EINVAL;
	h->tls = strncasecmp(url, "https://", 8) == 0;
	snprintf(port, sizeof(port), "%s", h->tls ? "443" : "80");
	a += 3;
	slash = strchr(a, '/');
	hl = slash ? (size_t)(slash - a) : strlen(a);
	if (hl == 0 || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, a, hl);
	host[hl] = '\0';
	snprintf(h->host, sizeof(h->host), "%s", host);
	colon = strrchr(host, ':');
	if (colon != NULL && strchr(host, ']') < colon) {
		snprintf(port, sizeof(port), "%s", colon + 1);
		host[colon - host] = '\0';
	}
	if (host[0] == '[') {
		memmove(host, host + 1, strlen(host));
		host[strcspn(host, "]")] = '\0';
	}
	snprintf(h->name, sizeof(h->name), "%s",
		 h->server_name != NULL ? h->server_name : host);
	free(h->path);
	h->path = strdup(slash ? slash : "/");
	h->n_addrs = h->cur = 0;
	if (h->path == NULL)
		return -ENOMEM;
	snprintf(h->rhost, sizeof(h->rhost), "%s", host);
	snprintf(h->rport, sizeof(h->rport), "%s", port);
	h->numeric = getaddrinfo(host, port, &hints, &res) == 0 && res != NULL &&
		     res->ai_addrlen <= sizeof(h->addrs[0]);
	if (h->numeric) {
		memcpy(&h->addrs[0], res->ai_addr, res->ai_addrlen);
		h->alens[0] = res->ai_addrlen;
		h->n_addrs = 1;
	}
	if (res != NULL)
		freeaddrinfo(res);
	return 0;
}

/* The client context: TLS 1.2 or later, the peer verified against ca_file or the system
 * store. NULL (logged) when the store cannot be read. */
static SSL_CTX *hook_ctx(const char *url, const char *ca_file)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int ok;

	if (ctx == NULL)
		return NULL;
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE);
	/* a server that closes without close_notify after its answer is not an error here */
	SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
	ok = ca_file != NULL ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL)
			     : SSL_CTX_set_default_verify_paths(ctx);
	if (ok != 1) {
		unsigned long e = ERR_peek_last_error();

		log_error("records", "webhook %s: cannot load the CA certificates of %s: %s "
				     "(records wait in the backlog until a reload)",
			  url, ca_file != NULL ? ca_file : "the system store",
			  e != 0 && ERR_reason_error_string(e) != NULL ? ERR_reason_error_string(e)
								     : "error");
		ERR_clear_error();
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

static bool same(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static char *dup_or_null(const char *s, bool *nomem)
{
	char *d = s != NULL ? strdup(s) : NULL;

	if (s != NULL && d == NULL)
		*nomem = true;
	return d;
}

int webhook_configure(struct webhook *h, const char *url, const char *ca_file,
		      const char *server_name)
{
	bool nomem = false;
	int rc;

	if (same(h->url, url) && same(h->ca_file, ca_file) && same(h->server_name, server_name))
		return 0;
	hook_close(h);
	dns_end(h, true);
	ev_timer_stop(h->m->loop, &h->retry);
	h->batch_n = 0;
	h->backoff = 0;
	free(h->url);
	free(h->ca_file);
	free(h->server_name);
	SSL_CTX_free(h->ctx);
	h->ctx = NULL;
	h->n_addrs = 0;
	h->numeric = false;
	h->url = dup_or_null(url, &nomem);
	h->ca_file = dup_or_null(ca_file, &nomem);
	h->server_name = dup_or_null(server_name, &nomem);
	if (url == NULL) {
		json_array_clear(h->backlog);
		hook_note(h, 0);
		return 0;
	}
	if (nomem)
		return -ENOMEM;
	rc = hook_parse(h, h->url);
	if (rc < 0) {
		log_error("records", "webhook %s: %s", h->url, strerror(-rc));
		return rc;
	}
	if (h->tls) {
		h->ctx = hook_ctx(h->url, h->ca_file);
		if (h->ctx == NULL)
			return -EINVAL;
	}
	dns_start(h);		/* a name: its addresses come to the loop, then it sends */
	webhook_kick(h);	/* what waited goes to the new place now */
	return 0;
}

bool webhook_push(struct webhook *h, json_t *rec)
{
	bool full = json_array_size(h->backlog) >= WEBHOOK_BACKLOG;

	if (full) {
		/* keep the newest; the in-flight batch is at the front: never cut it */
		json_array_remove(h->backlog, h->batch_n);
		if (h->dropped++ % 1000 == 0)
			log_warn("records", "webhook backlog full (%u records): dropping the oldest",
				 WEBHOOK_BACKLOG);
	}
	json_array_append(h->backlog, rec);
	hook_note(h, full ? 1 : 0);
	return full;
}

void webhook_pause(struct webhook *h)
{
	h->paused = true;
}

void webhook_run(struct webhook *h)
{
	h->paused = false;
	webhook_kick(h);
}

size_t webhook_backlog(const struct webhook *h)
{
	return json_array_size(h->backlog);
}

struct webhook *webhook_new(struct master *m)
{
	struct webhook *h = calloc(1, sizeof(*h));

	if (h == NULL)
		return NULL;
	h->magic = WEBHOOK_MAGIC;
	h->m = m;
	h->fd = -1;
	h->dns_fd = -1;
	h->backlog = json_array();
	if (h->backlog == NULL) {
		free(h);
		return NULL;
	}
	ev_timer_init(&h->tmo, hook_tmo_cb, HOOK_TIMEOUT_S, 0.);
	h->tmo.data = h;
	ev_timer_init(&h->retry, hook_retry_cb, 1., 0.);
	h->retry.data = h;
	return h;
}

void webhook_free(struct webhook *h)
{
	if (h == NULL)
		return;
	hook_close(h);
	dns_end(h, true);
	ev_timer_stop(h->m->loop, &h->retry);
	SSL_CTX_free(h->ctx);
	free(h->url);
	free(h->ca_file);
	free(h->server_name);
	free(h->path);
	json_decref(h->backlog);
	h->magic = 0;
	free(h);
}
