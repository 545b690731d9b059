/* Integration-test harness: daemon lifecycle, log scanning, echo peer, minimal TURN client. */
#include "config.h"

#include "tests/integration/harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/mono.h"
#include "stun/stun.h"
#include "stun/stun_auth.h"
#include "stun/stun_frame.h"

static long long h_now_ms(void)
{
	return (long long)mono_ms();
}

int harness_init(struct harness *h)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->dir, sizeof(h->dir), "/tmp/tg-itest-XXXXXX");
	if (!mkdtemp(h->dir))
		return -errno;
	snprintf(h->conf, sizeof(h->conf), "%s/turngate.yaml", h->dir);
	snprintf(h->log, sizeof(h->log), "%s/turngated.log", h->dir);
	snprintf(h->sock, sizeof(h->sock), "%s/admin.sock", h->dir);
	return 0;
}

int harness_write_config(struct harness *h, const char *yaml)
{
	FILE *f = fopen(h->conf, "w");

	if (!f)
		return -errno;
	fputs(yaml, f);
	return fclose(f) == 0 ? 0 : -EIO;
}

int harness_daemon_path(char *out, size_t cap)
{
	const char *top = getenv("top_builddir");
	const char *cand[] = { "turngated", "master/turngated" };

	if (!top)
		top = ".";
	for (size_t i = 0; i < 2; i++) {
		snprintf(out, cap, "%s/%s", top, cand[i]);
		if (access(out, X_OK) == 0)
			return 0;
	}
	return -ENOENT;
}

static void harness_print_tail(const struct harness *h)
{
	char line[1024];
	FILE *f = fopen(h->log, "r");
	long n = 0;

	if (!f)
		return;
	fprintf(stderr, "---- %s (last lines)\n", h->log);
	fseek(f, 0, SEEK_END);
	if (ftell(f) > 8000)
		fseek(f, -8000, SEEK_END);
	else
		fseek(f, 0, SEEK_SET);
	while (fgets(line, sizeof(line), f) && n++ < 200)
		fputs(line, stderr);
	fclose(f);
}

int harness_spawn(struct harness *h, unsigned workers)
{
	char path[512], nw[16];
	int trunc = h->starts++ == 0 ? O_TRUNC : 0;
	pid_t pid;

	if (harness_daemon_path(path, sizeof(path)) < 0) {
		fprintf(stderr, "harness: turngated not found under $top_builddir\n");
		return -ENOENT;
	}
	snprintf(nw, sizeof(nw), "%u", workers);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = open(h->log, O_WRONLY | O_CREAT | trunc | O_APPEND, 0600);

		if (fd >= 0) {
			dup2(fd, 2);
			dup2(fd, 1);
			close(fd);
		}
		execl(path, path, "-c", h->conf, "--workers", nw, (char *)NULL);
		_exit(127);
	}
	h->pid = pid;
	return 0;
}

int harness_start(struct harness *h, unsigned workers, const struct sockaddr *probe)
{
	long long deadline;
	pid_t pid;
	int rc = harness_spawn(h, workers);

	if (rc < 0)
		return rc;
	pid = h->pid;
	deadline = h_now_ms() + 10000;
	while (h_now_ms() < deadline) {
		int st;

		if (waitpid(pid, &st, WNOHANG) == pid) {
			h->pid = 0;
			fprintf(stderr, "harness: turngated exited during startup (status 0x%x)\n",
				st);
			harness_print_tail(h);
			return -ECHILD;
		}
		if (harness_stun_binding(probe, 200) == 0)
			return 0;
	}
	fprintf(stderr, "harness: turngated did not answer a Binding within 10 s\n");
	harness_print_tail(h);
	return -ETIMEDOUT;
}

int harness_launch(struct harness *h, const char *yaml, unsigned workers,
		   const struct sockaddr *probe)
{
	if (harness_write_config(h, yaml) < 0)
		return -1;
	return harness_start(h, workers, probe) == 0 ? 0 : -1;
}

/* SIGTERM, a second one after 5 s, SIGKILL after 15 s. 0 when it exited with status 0. */
static int harness_terminate(struct harness *h)
{
	int st = 0, rc = 0;
	long long deadline;
	bool second = false;

	if (h->pid <= 0)
		return 0;
	/* TERM drains (up to drain_timeout while allocations live); a second TERM after
	 * 5 s stops at once; KILL after 15 s is a failure. */
	kill(h->pid, SIGTERM);
	deadline = h_now_ms() + 15000;
	while (waitpid(h->pid, &st, WNOHANG) == 0) {
		if (!second && h_now_ms() > deadline - 10000) {
			kill(h->pid, SIGTERM);
			second = true;
		}
		if (h_now_ms() > deadline) {
			fprintf(stderr, "harness: turngated ignored SIGTERM for 15 s: SIGKILL\n");
			kill(h->pid, SIGKILL);
			waitpid(h->pid, &st, 0);
			rc = -1;
			break;
		}
		usleep(20000);
	}
	h->pid = 0;
	if (rc == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		fprintf(stderr, "harness: turngated ended with status 0x%x\n", st);
		rc = -1;
	}
	return rc;
}

int harness_stop(struct harness *h)
{
	char why[1024];
	int rc = harness_terminate(h);

	if (harness_scan_log(h->log, why, sizeof(why)) < 0) {
		fprintf(stderr, "harness: daemon log shows a failure: %s\n", why);
		rc = -1;
	}
	if (rc < 0)
		harness_print_tail(h);
	return rc;
}

int harness_stop_killed(struct harness *h, int kills)
{
	static const char *const bad[] = { "Sanitizer", "runtime error", "Assertion", "[crit]" };
	int rc = harness_terminate(h), n = harness_log_count(h, "killed by signal");

	if (n != kills) {
		fprintf(stderr, "harness: %d worker deaths in the log, the test caused %d\n", n,
			kills);
		rc = -1;
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (harness_log_count(h, bad[i]) != 0) {
			fprintf(stderr, "harness: daemon log shows \"%s\"\n", bad[i]);
			rc = -1;
		}
	if (rc < 0)
		harness_print_tail(h);
	return rc;
}

void harness_abort(struct harness *h)
{
	if (h->pid <= 0)
		return;
	fprintf(stderr, "harness: the test ended with turngated still running\n");
	harness_print_tail(h);
	kill(h->pid, SIGKILL);
	waitpid(h->pid, NULL, 0);
	h->pid = 0;
}

static void harness_free_clients(struct harness *h)
{
	for (size_t i = 0; i < h->n_clients; i++)
		hturn_close(&h->clients[i]);
	free(h->clients);
	h->clients = NULL;
	h->n_clients = 0;
}

struct hturn *harness_clients(struct harness *h, size_t n)
{
	harness_free_clients(h);
	h->clients = calloc(n, sizeof(*h->clients));
	if (h->clients == NULL) {
		fprintf(stderr, "harness: out of memory for %zu clients\n", n);
		abort();
	}
	h->n_clients = n;
	for (size_t i = 0; i < n; i++)
		h->clients[i].fd = -1;
	return h->clients;
}

void harness_cleanup(struct harness *h)
{
	char p[512];
	DIR *d;
	struct dirent *de;

	harness_free_clients(h);
	if (!h->dir[0])
		return;
	if (getenv("TG_KEEP_TMP"))
		return;
	/* Everything the test and the daemon left: config, log, admin socket, state files. */
	d = opendir(h->dir);
	while (d != NULL && (de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(p, sizeof(p), "%s/%s", h->dir, de->d_name);
		unlink(p);
	}
	if (d != NULL)
		closedir(d);
	rmdir(h->dir);
	h->dir[0] = 0;
}

void harness_teardown_killed(struct harness *h, struct harness_echo *e)
{
	harness_abort(h);
	if (e != NULL)
		harness_echo_stop(e);
	harness_cleanup(h);
}

int harness_teardown(struct harness *h, struct harness_echo *e)
{
	int rc = harness_stop(h);

	if (e != NULL)
		harness_echo_stop(e);
	harness_cleanup(h);
	return rc;
}

int harness_scan_log(const char *path, char *why, size_t cap)
{
	static const char *const bad[] = {
		"AddressSanitizer",           "LeakSanitizer", "runtime error:",
		"UndefinedBehaviorSanitizer", "[crit]",        "CRIT",
		"killed by signal",           "Assertion",     "assertion",
	};
	char line[2048];
	FILE *f = fopen(path, "r");
	int rc = 0;

	if (!f)
		return 0;
	while (rc == 0 && fgets(line, sizeof(line), f)) {
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			if (strstr(line, bad[i]))
				rc = -1;
		/* A worker that exits non-zero died unexpectedly. */
		if (strstr(line, "exited with status") && !strstr(line, "exited with status 0"))
			rc = -1;
		if (rc < 0)
			snprintf(why, cap, "%s", line);
	}
	fclose(f);
	return rc;
}

int harness_log_count(const struct harness *h, const char *needle)
{
	char line[2048];
	FILE *f = fopen(h->log, "r");
	int n = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, needle))
			n++;
	fclose(f);
	return n;
}

socklen_t harness_addr(const char *ip, uint16_t port, struct sockaddr_storage *out)
{
	memset(out, 0, sizeof(*out));
	if (strchr(ip, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;

		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		return inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1 ? sizeof(*s6) : 0;
	}
	{
		struct sockaddr_in *s4 = (struct sockaddr_in *)out;

		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		return inet_pton(AF_INET, ip, &s4->sin_addr) == 1 ? sizeof(*s4) : 0;
	}
}

static socklen_t h_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static int h_wait_readable(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int rc = poll(&p, 1, timeout_ms);

	return rc > 0 ? 0 : rc == 0 ? -ETIMEDOUT : -errno;
}

int harness_stun_binding(const struct sockaddr *srv, int timeout_ms)
{
	uint8_t buf[512], tid[STUN_TID_LEN];
	struct stun_builder b;
	struct stun_msg m;
	size_t len;
	int fd = socket(srv->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = -ETIMEDOUT;
	long long deadline = h_now_ms() + timeout_ms;

	if (fd < 0)
		return -errno;
	stun_tid_random(tid);
	stun_build_init(&b, buf, sizeof(buf), STUN_BINDING, STUN_REQUEST, tid);
	stun_build_finish(&b, &len);
	sendto(fd, buf, len, 0, srv, h_len(srv));
	while (h_now_ms() < deadline) {
		ssize_t n;

		if (h_wait_readable(fd, (int)(deadline - h_now_ms())) < 0)
			break;
		n = recv(fd, buf, sizeof(buf), 0);
		if (n > 0 && stun_msg_parse(&m, buf, (size_t)n) == 0 && m.cls == STUN_SUCCESS &&
		    memcmp(m.tid, tid, STUN_TID_LEN) == 0) {
			rc = 0;
			break;
		}
		if (n < 0) {
			usleep(10000);	/* ECONNREFUSED before the daemon binds */
			sendto(fd, buf, len, 0, srv, h_len(srv));
		}
	}
	close(fd);
	return rc;
}

/* ---- echo peer ---- */

int harness_echo_start(const char *ip, uint16_t port, struct harness_echo *e)
{
	int fd;
	pid_t pid;

	memset(e, 0, sizeof(*e));
	e->addr_len = harness_addr(ip, port, &e->addr);
	fd = socket(e->addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&e->addr, e->addr_len) < 0 ||
	    getsockname(fd, (struct sockaddr *)&e->addr, &e->addr_len) < 0) {
		int err = -errno;

		if (fd >= 0)
			close(fd);
		return err;
	}
	pid = fork();
	if (pid < 0) {
		close(fd);
		return -errno;
	}
	if (pid == 0) {
		long long end = h_now_ms() + 120000;
		uint8_t buf[65536];
		int big = 4 << 20;

		/* A relay that was paused (a restart, an upgrade) sends its backlog at once:
		 * the default buffer (about 270 small datagrams) would drop some of it here. */
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));

		while (h_now_ms() < end) {
			struct sockaddr_storage from;
			socklen_t fl = sizeof(from);
			ssize_t n;

			if (h_wait_readable(fd, 1000) < 0)
				continue;
			n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl);
			if (n >= 0)
				sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, fl);
		}
		_exit(0);
	}
	close(fd);
	e->pid = pid;
	return 0;
}

void harness_echo_stop(struct harness_echo *e)
{
	if (e->pid <= 0)
		return;
	kill(e->pid, SIGKILL);
	waitpid(e->pid, NULL, 0);
	e->pid = 0;
}

/* ---- minimal TURN client (blocking, for tests) ---- */

int hturn_open(struct hturn *c, const struct sockaddr *srv, bool tcp)
{
	memset(c, 0, sizeof(*c));
	c->tcp = tcp;
	c->timeout_ms = 2000;
	c->srv_len = h_len(srv);
	memcpy(&c->srv, srv, c->srv_len);
	c->fd = socket(srv->sa_family, (tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	if (connect(c->fd, srv, c->srv_len) < 0) {
		int err = -errno;

		close(c->fd);
		c->fd = -1;
		return err;
	}
	return 0;
}

uint16_t hturn_local_port(const struct hturn *c)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (getsockname(c->fd, (struct sockaddr *)&ss, &sl) != 0)
		return 0;
	return harness_port(&ss);
}

uint16_t harness_port(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	return ss->ss_family == AF_INET ? ntohs(((const struct sockaddr_in *)ss)->sin_port) : 0;
}

void hturn_close(struct hturn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

void hturn_set_user(struct hturn *c, const char *user, const char *pass)
{
	snprintf(c->user, sizeof(c->user), "%s", user);
	snprintf(c->pass, sizeof(c->pass), "%s", pass);
}

int hturn_send_raw(struct hturn *c, const void *buf, size_t len)
{
	ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);

	return n == (ssize_t)len ? 0 : -EIO;
}

/* One datagram, or one stream frame (ChannelData padding included). */
int hturn_recv_raw(struct hturn *c, uint8_t *buf, size_t cap, int timeout_ms)
{
	long long deadline = h_now_ms() + timeout_ms;

	if (!c->tcp) {
		ssize_t n;

		if (h_wait_readable(c->fd, timeout_ms) < 0)
			return -ETIMEDOUT;
		n = recv(c->fd, buf, cap, 0);
		return n < 0 ? -errno : (int)n;
	}
	for (;;) {
		size_t flen;
		int rc = stun_frame_next(c->stream, c->stream_len, sizeof(c->stream),
					 STUN_CHAN_RFC8656, &flen);
		ssize_t n;

		if (rc == 0) {
			size_t copy = flen < cap ? flen : cap;

			memcpy(buf, c->stream, copy);
			memmove(c->stream, c->stream + flen, c->stream_len - flen);
			c->stream_len -= flen;
			return (int)copy;
		}
		if (rc != -EAGAIN)
			return -EBADMSG;
		if (h_now_ms() >= deadline ||
		    h_wait_readable(c->fd, (int)(deadline - h_now_ms())) < 0)
			return -ETIMEDOUT;
		n = recv(c->fd, c->stream + c->stream_len, sizeof(c->stream) - c->stream_len, 0);
		if (n <= 0)
			return n == 0 ? -ECONNRESET : -errno;
		c->stream_len += (size_t)n;
	}
}

static int hturn_key(const struct hturn *c, uint8_t *key, size_t *klen)
{
	return stun_auth_key(c->sha256 ? STUN_PWALG_SHA256 : STUN_PWALG_MD5, c->user,
			     strlen(c->user), c->realm, strlen(c->realm), c->pass, strlen(c->pass),
			     key, klen);
}

static int hturn_build(struct hturn *c, uint8_t *buf, size_t cap, uint16_t method,
		       const uint8_t tid[STUN_TID_LEN], hturn_attrs_fn *attrs, void *arg, bool auth,
		       size_t *len)
{
	struct stun_builder b;

	stun_build_init(&b, buf, cap, method, STUN_REQUEST, tid);
	if (attrs)
		attrs(&b, arg);
	if (auth && c->nonce[0]) {
		uint8_t key[STUN_KEY_MAX];
		size_t klen;
		static const uint16_t algs[] = { STUN_PWALG_MD5, STUN_PWALG_SHA256 };

		if (hturn_key(c, key, &klen) < 0)
			return -EIO;
		stun_build_string(&b, STUN_ATTR_USERNAME, c->user);
		stun_build_string(&b, STUN_ATTR_REALM, c->realm);
		stun_build_string(&b, STUN_ATTR_NONCE, c->nonce);
		if (c->sha256) {
			stun_build_password_algorithms(&b, algs, 2);
			stun_build_password_algorithm(&b, STUN_PWALG_SHA256);
			stun_build_integrity_sha256(&b, key, klen);
		} else {
			stun_build_integrity(&b, key, klen);
		}
	}
	if (c->fingerprint)
		stun_build_fingerprint(&b);
	return stun_build_finish(&b, len);
}

int hturn_request(struct hturn *c, uint16_t method, hturn_attrs_fn *attrs, void *arg, bool auth)
{
	uint8_t buf[2048], tid[STUN_TID_LEN];

	for (int attempt = 0; attempt < 3; attempt++) {
		long long deadline = h_now_ms() + c->timeout_ms;
		/* UDP: retransmit like a real client (RFC 8489 6.2.1, RTO 500 ms): an
		 * unauthenticated request's 401 may be dropped by the per-prefix limit. */
		long long rto = 500, next_tx = h_now_ms() + rto;
		size_t len;
		int code = 0;

		stun_tid_random(tid);
		if (hturn_build(c, buf, sizeof(buf), method, tid, attrs, arg, auth, &len) < 0)
			return -EINVAL;
		memcpy(c->req, buf, len);
		c->req_len = len;
		if (hturn_send_raw(c, buf, len) < 0)
			return -EIO;
		for (;;) {
			struct stun_msg m;
			long long until = c->tcp || next_tx > deadline ? deadline : next_tx;
			long long wait = until - h_now_ms();
			int n = hturn_recv_raw(c, c->resp, sizeof(c->resp),
					       wait > 0 ? (int)wait : 0);

			if (n == -ETIMEDOUT && until < deadline) {
				if (hturn_send_raw(c, buf, len) < 0)
					return -EIO;
				rto *= 2;
				next_tx = h_now_ms() + rto;
				continue;
			}
			if (n < 0)
				return n;
			if (stun_msg_parse(&m, c->resp, (size_t)n) < 0 ||
			    memcmp(m.tid, tid, STUN_TID_LEN) != 0 || m.cls == STUN_INDICATION)
				continue;	/* data or a stale response */
			c->resp_len = (size_t)n;
			if (m.cls == STUN_SUCCESS)
				return 0;
			if (stun_msg_get_error(&m, &code, NULL, NULL) < 0)
				return -EBADMSG;
			if (auth && !c->no_retry && (code == 401 || code == 438) && attempt < 2 &&
			    stun_msg_copy_string(&m, STUN_ATTR_NONCE, c->nonce, sizeof(c->nonce)) ==
				    0 &&
			    stun_msg_copy_string(&m, STUN_ATTR_REALM, c->realm, sizeof(c->realm)) ==
				    0 &&
			    (code == 438 || attempt == 0 || !c->user[0]))
				break;	/* retry with the fresh nonce */
			return code;
		}
	}
	return -EPROTO;
}

static void hturn_udp_attr(struct stun_builder *b, void *arg)
{
	struct {
		hturn_attrs_fn *fn;
		void *arg;
	} *x = arg;

	stun_build_requested_transport(b, STUN_TRANSPORT_UDP);
	if (x->fn)
		x->fn(b, x->arg);
}

int hturn_allocate(struct hturn *c, hturn_attrs_fn *attrs, void *arg)
{
	struct {
		hturn_attrs_fn *fn;
		void *arg;
	} x = { attrs, arg };
	struct stun_msg m;
	int rc = hturn_request(c, STUN_ALLOCATE, hturn_udp_attr, &x, true);

	if (rc != 0)
		return rc;
	if (stun_msg_parse(&m, c->resp, c->resp_len) < 0 ||
	    stun_msg_get_addr(&m, STUN_ATTR_XOR_RELAYED_ADDRESS, &c->relay) < 0)
		return -EBADMSG;
	memset(&c->relay2, 0, sizeof(c->relay2));
	/* A second XOR-RELAYED-ADDRESS (dual allocation) follows the first. */
	{
		size_t off = STUN_HEADER_LEN;
		int seen = 0;

		while (off + 4 <= m.len) {
			uint16_t t = (uint16_t)(m.buf[off] << 8 | m.buf[off + 1]);
			uint16_t l = (uint16_t)(m.buf[off + 2] << 8 | m.buf[off + 3]);

			if (t == STUN_ATTR_XOR_RELAYED_ADDRESS && ++seen == 2) {
				struct stun_msg m2 = m;

				m2.attr[STUN_SLOT_XOR_RELAYED_ADDRESS].off = (uint32_t)(off + 4);
				m2.attr[STUN_SLOT_XOR_RELAYED_ADDRESS].len = l;
				stun_msg_get_addr(&m2, STUN_ATTR_XOR_RELAYED_ADDRESS, &c->relay2);
			}
			off += 4 + ((l + 3u) & ~3u);
		}
	}
	stun_msg_get_addr(&m, STUN_ATTR_XOR_MAPPED_ADDRESS, &c->mapped);
	stun_msg_get_lifetime(&m, &c->lifetime);
	return 0;
}

int hturn_allocate_until(struct hturn *c, int code)
{
	int rc = -1;

	for (int i = 0; i < 20 && rc != code; i++) {
		rc = hturn_allocate(c, NULL, NULL);
		if (rc == 0 && hturn_refresh(c, 0) != 0)
			return -EPROTO;
		if (rc != code)
			usleep(50000);
	}
	return rc;
}

static void hturn_lifetime_attr(struct stun_builder *b, void *arg)
{
	stun_build_lifetime(b, *(uint32_t *)arg);
}

int hturn_refresh(struct hturn *c, uint32_t lifetime)
{
	struct stun_msg m;
	int rc = hturn_request(c, STUN_REFRESH, hturn_lifetime_attr, &lifetime, true);

	if (rc == 0 && stun_msg_parse(&m, c->resp, c->resp_len) == 0)
		stun_msg_get_lifetime(&m, &c->lifetime);
	return rc;
}

static void hturn_peer_attr(struct stun_builder *b, void *arg)
{
	stun_build_addr(b, STUN_ATTR_XOR_PEER_ADDRESS, arg);
}

int hturn_permission(struct hturn *c, const struct sockaddr *peer)
{
	return hturn_request(c, STUN_CREATE_PERMISSION, hturn_peer_attr, (void *)peer, true);
}

struct hturn_cb {
	uint16_t ch;
	const struct sockaddr *peer;
};

static void hturn_chan_attr(struct stun_builder *b, void *arg)
{
	const struct hturn_cb *x = arg;

	stun_build_channel(b, x->ch);
	stun_build_addr(b, STUN_ATTR_XOR_PEER_ADDRESS, x->peer);
}

int hturn_channel_bind(struct hturn *c, uint16_t ch, const struct sockaddr *peer)
{
	struct hturn_cb x = { ch, peer };

	return hturn_request(c, STUN_CHANNEL_BIND, hturn_chan_attr, &x, true);
}

int hturn_send(struct hturn *c, const struct sockaddr *peer, const void *data, size_t len)
{
	uint8_t buf[4096], tid[STUN_TID_LEN];
	struct stun_builder b;
	size_t n;

	stun_tid_random(tid);
	stun_build_init(&b, buf, sizeof(buf), STUN_SEND, STUN_INDICATION, tid);
	stun_build_addr(&b, STUN_ATTR_XOR_PEER_ADDRESS, peer);
	stun_build_attr(&b, STUN_ATTR_DATA, data, len);
	if (stun_build_finish(&b, &n) < 0)
		return -EINVAL;
	return hturn_send_raw(c, buf, n);
}

int hturn_chan_send(struct hturn *c, uint16_t ch, const void *data, size_t len)
{
	uint8_t buf[4100];
	size_t n;

	if (stun_chan_encode(buf, sizeof(buf), ch, data, len, c->tcp, STUN_CHAN_RFC8656, &n) < 0)
		return -EINVAL;
	return hturn_send_raw(c, buf, n);
}

int hturn_recv_data(struct hturn *c, void *out, size_t cap, uint16_t *ch,
		    struct sockaddr_storage *peer, int timeout_ms)
{
	long long deadline = h_now_ms() + timeout_ms;
	uint8_t buf[70000];

	while (h_now_ms() < deadline) {
		int n = hturn_recv_raw(c, buf, sizeof(buf), (int)(deadline - h_now_ms()));
		struct stun_msg m;
		const uint8_t *d;
		size_t dl;
		uint16_t chn;

		if (n < 0)
			return n;
		if (stun_is_channeldata(buf, (size_t)n, STUN_CHAN_RFC8656) &&
		    stun_chan_decode(buf, (size_t)n, STUN_CHAN_RFC8656, &chn, &d, &dl) == 0) {
			*ch = chn;
		} else if (stun_msg_parse(&m, buf, (size_t)n) == 0 && m.method == STUN_DATA &&
			   m.cls == STUN_INDICATION &&
			   stun_msg_get_raw(&m, STUN_ATTR_DATA, &d, &dl) == 0) {
			*ch = 0;
			if (peer)
				stun_msg_get_addr(&m, STUN_ATTR_XOR_PEER_ADDRESS, peer);
		} else {
			continue;
		}
		if (dl > cap)
			dl = cap;
		memcpy(out, d, dl);
		return (int)dl;
	}
	return -ETIMEDOUT;
}
