/* Unit tests of the TURN client over TLS and DTLS against a tiny in-test OpenSSL server. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "client/turn_client.h"
#include "stun/stun.h"
#include "stun/stun_frame.h"

#define HOST "turn.example.test"
#define IO_TIMEOUT_MS 5000

static const unsigned char srv_alpn[] = "\x09stun.turn";

/* Two self-signed certificates (same names, different keys) made once for all tests. */
struct certs {
	EVP_PKEY *key[2];
	X509 *crt[2];
	char pem[2][64];	/* each certificate as a PEM file, for ca_file */
};

enum srv_mode {
	SRV_SERVE,	/* answer Binding, echo ChannelData until the client closes */
	SRV_CLOSE,	/* read one message, then close_notify and close */
	SRV_ABORT,	/* read one message, then close the socket without close_notify */
};

/* One server, serving one client connection in its own thread. */
struct tsrv {
	bool dtls;
	enum srv_mode mode;
	bool drop_first;		/* DTLS: discard the first datagram (a lost ClientHello) */
	int fd;				/* listening TCP or bound UDP socket */
	struct sockaddr_in addr;
	SSL_CTX *ctx;
	pthread_t th;
	bool running;
	uint8_t cookie[16];
	/* Written by the server thread, read by the test after pthread_join(). */
	char sni[256];
	bool cookie_verified;
	bool handshake_done;
	unsigned answered;		/* Binding responses + ChannelData echoes sent */
};

/* ---- certificates ------------------------------------------------------------------- */

static X509 *make_cert(EVP_PKEY *key, long serial)
{
	X509 *x = X509_new();
	X509V3_CTX v;
	X509_EXTENSION *ext;

	assert_non_null(x);
	assert_int_equal(X509_set_version(x, 2), 1);
	ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
	X509_gmtime_adj(X509_getm_notBefore(x), -3600);
	X509_gmtime_adj(X509_getm_notAfter(x), 86400);
	assert_int_equal(X509_set_pubkey(x, key), 1);
	X509_NAME *n = X509_get_subject_name(x);
	assert_int_equal(X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
						    (const unsigned char *)HOST, -1, -1, 0),
			 1);
	assert_int_equal(X509_set_issuer_name(x, n), 1);
	X509V3_set_ctx_nodb(&v);
	X509V3_set_ctx(&v, x, x, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &v, NID_subject_alt_name, "DNS:" HOST);
	assert_non_null(ext);
	assert_int_equal(X509_add_ext(x, ext, -1), 1);
	X509_EXTENSION_free(ext);
	assert_true(X509_sign(x, key, EVP_sha256()) > 0);
	return x;
}

static void write_pem(X509 *x, char *path, size_t cap)
{
	snprintf(path, cap, "/tmp/test_client_tls.XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	FILE *f = fdopen(fd, "w");
	assert_non_null(f);
	assert_int_equal(PEM_write_X509(f, x), 1);
	assert_int_equal(fclose(f), 0);
}

static int group_setup(void **state)
{
	struct certs *cs = calloc(1, sizeof(*cs));

	if (cs == NULL)
		return -1;
	for (int i = 0; i < 2; i++) {
		cs->key[i] = EVP_EC_gen("P-256");
		if (cs->key[i] == NULL)
			return -1;
		cs->crt[i] = make_cert(cs->key[i], i + 1);
		write_pem(cs->crt[i], cs->pem[i], sizeof(cs->pem[i]));
	}
	*state = cs;
	return 0;
}

static int group_teardown(void **state)
{
	struct certs *cs = *state;

	for (int i = 0; cs != NULL && i < 2; i++) {
		unlink(cs->pem[i]);
		X509_free(cs->crt[i]);
		EVP_PKEY_free(cs->key[i]);
	}
	free(cs);
	return 0;
}

/* ---- server callbacks --------------------------------------------------------------- */

static int alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		   const unsigned char *in, unsigned int inlen, void *arg)
{
	(void)ssl;
	(void)arg;
	if (SSL_select_next_proto((unsigned char **)out, outlen, srv_alpn, sizeof(srv_alpn) - 1, in,
				  inlen) == OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_OK;
	return SSL_TLSEXT_ERR_NOACK;
}

static int sni_cb(SSL *ssl, int *alert, void *arg)
{
	struct tsrv *s = SSL_get_app_data(ssl);
	const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);

	(void)alert;
	(void)arg;
	if (s != NULL && name != NULL)
		snprintf(s->sni, sizeof(s->sni), "%s", name);
	return SSL_TLSEXT_ERR_OK;
}

static int cookie_gen(SSL *ssl, unsigned char *cookie, unsigned int *len)
{
	struct tsrv *s = SSL_get_app_data(ssl);

	memcpy(cookie, s->cookie, sizeof(s->cookie));
	*len = sizeof(s->cookie);
	return 1;
}

static int cookie_verify(SSL *ssl, const unsigned char *cookie, unsigned int len)
{
	struct tsrv *s = SSL_get_app_data(ssl);

	if (len != sizeof(s->cookie) || memcmp(cookie, s->cookie, len) != 0)
		return 0;
	s->cookie_verified = true;
	return 1;
}

/* ---- server ------------------------------------------------------------------------- */

static void set_timeouts(int fd, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Answers one message: Binding request -> success with XOR-MAPPED-ADDRESS of the client,
 * ChannelData -> echoed unchanged (with its padding on TLS), anything else ignored. */
static void srv_handle(struct tsrv *s, SSL *ssl, int cfd, const uint8_t *m, size_t n)
{
	uint8_t out[512];
	size_t len = 0;
	struct stun_msg msg;
	struct sockaddr_storage peer;
	socklen_t plen = sizeof(peer);

	if (stun_is_channeldata(m, n, STUN_CHAN_RFC8656)) {
		if (SSL_write_ex(ssl, m, n, &len) == 1)
			s->answered++;
		return;
	}
	if (stun_msg_parse(&msg, m, n) != 0 || msg.method != STUN_BINDING ||
	    msg.cls != STUN_REQUEST || getpeername(cfd, (struct sockaddr *)&peer, &plen) != 0)
		return;
	struct stun_builder b;
	stun_build_init_response(&b, out, sizeof(out), &msg, STUN_SUCCESS);
	stun_build_addr(&b, STUN_ATTR_XOR_MAPPED_ADDRESS, (struct sockaddr *)&peer);
	size_t w;
	if (stun_build_finish(&b, &len) == 0 && SSL_write_ex(ssl, out, len, &w) == 1)
		s->answered++;
}

/* Serves until the client closes or goes quiet (socket timeouts bound every read). */
static void srv_serve(struct tsrv *s, SSL *ssl, int cfd)
{
	uint8_t buf[4096];
	size_t have = 0, n, fl;

	for (int round = 0; round < 1000; round++) {
		if (SSL_read_ex(ssl, buf + have, sizeof(buf) - have, &n) != 1)
			return;
		have += n;
		if (s->mode != SRV_SERVE)
			break;
		if (s->dtls) {
			srv_handle(s, ssl, cfd, buf, have);
			have = 0;
			continue;
		}
		while (stun_frame_next(buf, have, sizeof(buf), STUN_CHAN_RFC8656, &fl) == 0) {
			srv_handle(s, ssl, cfd, buf, fl);
			memmove(buf, buf + fl, have - fl);
			have -= fl;
		}
	}
	if (s->mode == SRV_ABORT)
		return;
	/* SRV_CLOSE: close_notify, then (TLS) half-close and drain so that the client reads
	 * the alert rather than a reset. */
	SSL_shutdown(ssl);
	if (!s->dtls) {
		shutdown(cfd, SHUT_WR);
		for (int i = 0; i < 100 && read(cfd, buf, sizeof(buf)) > 0; i++)
			;
	}
}

/* Server threads keep SIGPIPE to themselves (blocked, left pending): the test program
 * does not ignore it, so a client write to a closed TLS connection would kill it unless
 * the client library guards its writes. */
static void block_sigpipe(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void *srv_tls_thread(void *arg)
{
	struct tsrv *s = arg;
	struct pollfd p = { .fd = s->fd, .events = POLLIN };

	block_sigpipe();
	if (poll(&p, 1, IO_TIMEOUT_MS) != 1)
		return NULL;
	int cfd = accept(s->fd, NULL, NULL);
	if (cfd < 0)
		return NULL;
	set_timeouts(cfd, IO_TIMEOUT_MS);
	SSL *ssl = SSL_new(s->ctx);
	if (ssl != NULL) {
		SSL_set_app_data(ssl, s);
		SSL_set_fd(ssl, cfd);
		if (SSL_accept(ssl) == 1) {
			s->handshake_done = true;
			srv_serve(s, ssl, cfd);
		}
		SSL_free(ssl);
	}
	close(cfd);
	return NULL;
}

static void *srv_dtls_thread(void *arg)
{
	struct tsrv *s = arg;
	SSL *ssl = SSL_new(s->ctx);
	BIO_ADDR *client = BIO_ADDR_new();
	BIO *bio = BIO_new_dgram(s->fd, BIO_NOCLOSE);
	int r = 0;

	block_sigpipe();
	if (ssl == NULL || client == NULL || bio == NULL)
		goto out;
	SSL_set_app_data(ssl, s);
	SSL_set_bio(ssl, bio, bio);
	bio = NULL;
	if (s->drop_first) {
		uint8_t tmp[2048];
		set_timeouts(s->fd, IO_TIMEOUT_MS);
		if (recv(s->fd, tmp, sizeof(tmp), 0) <= 0)
			goto out;
	}
	/* Bounded: 40 reads of at most 250 ms each (the first is answered with a cookie). */
	set_timeouts(s->fd, 250);
	for (int i = 0; i < 40 && r == 0; i++)
		r = DTLSv1_listen(ssl, client);
	if (r != 1)
		goto out;
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = BIO_ADDR_rawport(client) };
	size_t alen = sizeof(sin.sin_addr);
	if (BIO_ADDR_family(client) != AF_INET ||
	    BIO_ADDR_rawaddress(client, &sin.sin_addr, &alen) != 1 ||
	    connect(s->fd, (struct sockaddr *)&sin, sizeof(sin)) != 0)
		goto out;
	BIO_ctrl_set_connected(SSL_get_rbio(ssl), client);
	set_timeouts(s->fd, IO_TIMEOUT_MS);
	for (int i = 0; i < 20; i++) {
		r = SSL_accept(ssl);
		if (r == 1 || SSL_get_error(ssl, r) != SSL_ERROR_WANT_READ)
			break;
		DTLSv1_handle_timeout(ssl);
	}
	if (r == 1) {
		s->handshake_done = true;
		srv_serve(s, ssl, s->fd);
	}
out:
	BIO_free(bio);
	BIO_ADDR_free(client);
	SSL_free(ssl);
	return NULL;
}

/* Opens the server socket on 127.0.0.1 port 0 (listening for TCP, bound for UDP). */
static void srv_socket(struct tsrv *s)
{
	socklen_t len = sizeof(s->addr);

	s->fd = socket(AF_INET, (s->dtls ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0);
	assert_true(s->fd >= 0);
	memset(&s->addr, 0, sizeof(s->addr));
	s->addr.sin_family = AF_INET;
	s->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(s->fd, (struct sockaddr *)&s->addr, sizeof(s->addr)), 0);
	if (!s->dtls)
		assert_int_equal(listen(s->fd, 4), 0);
	assert_int_equal(getsockname(s->fd, (struct sockaddr *)&s->addr, &len), 0);
}

static void srv_start_ex(struct tsrv *s, const struct certs *cs, int cert, bool dtls,
			 enum srv_mode mode, bool drop_first)
{
	memset(s, 0, sizeof(*s));
	s->dtls = dtls;
	s->mode = mode;
	s->drop_first = drop_first;
	srv_socket(s);
	s->ctx = SSL_CTX_new(dtls ? DTLS_server_method() : TLS_server_method());
	assert_non_null(s->ctx);
	assert_int_equal(SSL_CTX_use_certificate(s->ctx, cs->crt[cert]), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey(s->ctx, cs->key[cert]), 1);
	SSL_CTX_set_alpn_select_cb(s->ctx, alpn_cb, NULL);
	SSL_CTX_set_tlsext_servername_callback(s->ctx, sni_cb);
	if (dtls) {
		assert_int_equal(RAND_bytes(s->cookie, sizeof(s->cookie)), 1);
		SSL_CTX_set_options(s->ctx, SSL_OP_COOKIE_EXCHANGE);
		SSL_CTX_set_cookie_generate_cb(s->ctx, cookie_gen);
		SSL_CTX_set_cookie_verify_cb(s->ctx, cookie_verify);
	}
	assert_int_equal(pthread_create(&s->th, NULL, dtls ? srv_dtls_thread : srv_tls_thread, s),
			 0);
	s->running = true;
}

static void srv_start(struct tsrv *s, const struct certs *cs, int cert, bool dtls,
		      enum srv_mode mode)
{
	srv_start_ex(s, cs, cert, dtls, mode, false);
}

/* Waits for the server thread (bounded by its socket timeouts) and frees it. */
static void srv_stop(struct tsrv *s)
{
	if (s->running)
		pthread_join(s->th, NULL);
	s->running = false;
	SSL_CTX_free(s->ctx);
	s->ctx = NULL;
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}

/* ---- client helpers ----------------------------------------------------------------- */

struct copts {
	const char *sni;
	bool no_alpn;
	const char *ca_file;
	int timeout_ms;
};

static int mk_client(const struct sockaddr_in *addr, bool dtls, const struct copts *co,
		     struct turn_client **c)
{
	struct turn_client_opts o = {
		.transport = dtls ? TURN_CLIENT_DTLS : TURN_CLIENT_TLS,
		.server = (const struct sockaddr *)addr,
		.timeout_ms = co->timeout_ms ? co->timeout_ms : IO_TIMEOUT_MS,
		.rto_ms = 100,
		.sni = co->sni,
		.no_alpn = co->no_alpn,
		.ca_file = co->ca_file,
	};
	*c = NULL;
	return turn_client_create(&o, c);
}

static void check_binding(struct turn_client *c)
{
	struct sockaddr_storage mapped, local;

	assert_int_equal(turn_client_binding(c, &mapped), 0);
	assert_int_equal(turn_client_local_addr(c, &local), 0);
	assert_int_equal(mapped.ss_family, AF_INET);
	const struct sockaddr_in *m = (const struct sockaddr_in *)&mapped;
	const struct sockaddr_in *l = (const struct sockaddr_in *)&local;
	assert_int_equal(m->sin_port, l->sin_port);
	assert_int_equal(m->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
}

static void check_cert(const struct turn_client_tls_info *ti, X509 *crt)
{
	uint8_t md[32];
	unsigned md_len = 0;

	assert_true(ti->has_cert);
	assert_string_equal(ti->subject_cn, HOST);
	assert_string_equal(ti->dns_san, HOST);
	assert_int_equal(X509_digest(crt, EVP_sha256(), md, &md_len), 1);
	assert_int_equal(md_len, 32);
	assert_memory_equal(ti->cert_sha256, md, 32);
	assert_true(ti->cipher[0] != '\0');
}

/* ChannelData round trip; the raw echo shows the framing (padded on TLS only). */
static void check_channel(struct turn_client *c, bool dtls)
{
	uint8_t buf[64];
	size_t len = 0;
	uint16_t ch = 0;
	static const char payload[] = "odd-7"; /* 5 bytes: padded to 8 on a stream */

	assert_int_equal(turn_client_send_channel(c, 0x4001, payload, 5), 0);
	assert_int_equal(turn_client_recv(c, buf, sizeof(buf), &len, NULL, &ch, IO_TIMEOUT_MS), 0);
	assert_int_equal(ch, 0x4001);
	assert_int_equal(len, 5);
	assert_memory_equal(buf, payload, 5);
	assert_int_equal(turn_client_send_channel(c, 0x4002, payload, 5), 0);
	assert_int_equal(turn_client_recv_raw(c, buf, sizeof(buf), &len, IO_TIMEOUT_MS), 0);
	assert_int_equal(len, dtls ? 4 + 5 : 4 + 8);
	assert_int_equal(buf[0] << 8 | buf[1], 0x4002);
	assert_false(turn_client_pending(c));
}

/* ---- tests -------------------------------------------------------------------------- */

static void session(void **state, bool dtls)
{
	const struct certs *cs = *state;
	struct tsrv s;
	struct turn_client *c;
	struct turn_client_tls_info ti;
	int cert = dtls ? 1 : 0;
	struct copts co = { .sni = HOST };

	srv_start(&s, cs, cert, dtls, SRV_SERVE);
	assert_int_equal(mk_client(&s.addr, dtls, &co, &c), 0);
	check_binding(c);
	assert_int_equal(turn_client_tls_info(c, &ti), 0);
	assert_string_equal(ti.version, dtls ? "DTLSv1.2" : "TLSv1.3");
	assert_string_equal(ti.alpn, "stun.turn");
	check_cert(&ti, cs->crt[cert]);
	check_channel(c, dtls);
	turn_client_destroy(c);
	srv_stop(&s);
	assert_true(s.handshake_done);
	assert_string_equal(s.sni, HOST);
	assert_int_equal(s.answered, 3);
	if (dtls)
		assert_true(s.cookie_verified);
}

static void t_tls_session(void **state)
{
	session(state, false);
}

/* The first ClientHello is lost: the client's DTLS timer retransmits it (after ~1 s). */
static void t_dtls_lost_hello(void **state)
{
	const struct certs *cs = *state;
	struct tsrv s;
	struct turn_client *c;
	struct copts co = { 0 };

	srv_start_ex(&s, cs, 0, true, SRV_SERVE, true);
	assert_int_equal(mk_client(&s.addr, true, &co, &c), 0);
	check_binding(c);
	turn_client_destroy(c);
	srv_stop(&s);
	assert_true(s.cookie_verified);
}
static void t_dtls_session(void **state)
{
	session(state, true);
}

/* No ALPN offered -> none selected; no SNI set -> the server saw none. */
static void no_alpn(void **state, bool dtls)
{
	const struct certs *cs = *state;
	struct tsrv s;
	struct turn_client *c;
	struct turn_client_tls_info ti;
	struct copts co = { .no_alpn = true };

	srv_start(&s, cs, 0, dtls, SRV_SERVE);
	assert_int_equal(mk_client(&s.addr, dtls, &co, &c), 0);
	check_binding(c);
	assert_int_equal(turn_client_tls_info(c, &ti), 0);
	assert_string_equal(ti.alpn, "");
	check_cert(&ti, cs->crt[0]);
	turn_client_destroy(c);
	srv_stop(&s);
	assert_string_equal(s.sni, "");
}

static void t_tls_no_alpn(void **state)
{
	no_alpn(state, false);
}
static void t_dtls_no_alpn(void **state)
{
	no_alpn(state, true);
}

/* A server that closes after the first request: the client sees -ECONNRESET. */
static void server_close(void **state, bool dtls)
{
	struct tsrv s;
	struct turn_client *c;
	struct sockaddr_storage mapped;
	struct copts co = { 0 };

	srv_start(&s, *state, 0, dtls, SRV_CLOSE);
	assert_int_equal(mk_client(&s.addr, dtls, &co, &c), 0);
	assert_int_equal(turn_client_binding(c, &mapped), -ECONNRESET);
	turn_client_destroy(c);
	srv_stop(&s);
	assert_true(s.handshake_done);
}

static void t_tls_server_close(void **state)
{
	server_close(state, false);
}

/* A TLS server that drops the connection without close_notify: -ECONNRESET, then writes
 * fail with an error (EPIPE, ECONNRESET) instead of a SIGPIPE killing the program. */
static void t_tls_server_abort(void **state)
{
	struct tsrv s;
	struct turn_client *c;
	struct sockaddr_storage mapped;
	struct copts co = { 0 };
	int rc = 0;

	srv_start(&s, *state, 0, false, SRV_ABORT);
	assert_int_equal(mk_client(&s.addr, false, &co, &c), 0);
	assert_int_equal(turn_client_binding(c, &mapped), -ECONNRESET);
	srv_stop(&s);
	/* Bounded: the peer's RST comes back after the first write on loopback. */
	for (int i = 0; i < 200 && rc == 0; i++) {
		rc = turn_client_send_channel(c, 0x4001, "x", 1);
		if (rc == 0)
			usleep(10000);
	}
	assert_true(rc == -EPIPE || rc == -ECONNRESET);
	turn_client_destroy(c);
}
static void t_dtls_server_close(void **state)
{
	server_close(state, true);
}

/* A server that never answers the handshake: -ETIMEDOUT, within the timeout. */
static void silent(bool dtls)
{
	struct tsrv s;
	struct turn_client *c;
	struct copts co = { .timeout_ms = 500 };

	memset(&s, 0, sizeof(s));
	s.dtls = dtls;
	srv_socket(&s);	/* TCP: accepted by the kernel, never by anybody; UDP: never read */
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(mk_client(&s.addr, dtls, &co, &c), -ETIMEDOUT);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_null(c);
	long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	/* Generous upper bound: the point is that it ends, not how fast. */
	assert_true(ms >= 450 && ms < 4000);
	close(s.fd);
}

static void t_tls_silent(void **state)
{
	(void)state;
	silent(false);
}
static void t_dtls_silent(void **state)
{
	(void)state;
	silent(true);
}

/* ca_file: the right CA and host name verify; a wrong host or CA is -ECONNABORTED. */
static void verify(void **state, bool dtls)
{
	const struct certs *cs = *state;
	struct tsrv s;
	struct turn_client *c;
	struct copts good = { .sni = HOST, .ca_file = cs->pem[0] };
	struct copts bad_host = { .sni = "other.example.test", .ca_file = cs->pem[0] };
	struct copts bad_ca = { .sni = HOST, .ca_file = cs->pem[1] };
	struct copts no_file = { .ca_file = "/nonexistent/ca.pem" };

	srv_start(&s, cs, 0, dtls, SRV_SERVE);
	assert_int_equal(mk_client(&s.addr, dtls, &good, &c), 0);
	check_binding(c);
	turn_client_destroy(c);
	srv_stop(&s);

	srv_start(&s, cs, 0, dtls, SRV_SERVE);
	assert_int_equal(mk_client(&s.addr, dtls, &bad_host, &c), -ECONNABORTED);
	srv_stop(&s);
	assert_false(s.handshake_done);

	srv_start(&s, cs, 0, dtls, SRV_SERVE);
	assert_int_equal(mk_client(&s.addr, dtls, &bad_ca, &c), -ECONNABORTED);
	srv_stop(&s);
	assert_false(s.handshake_done);

	/* Fails before any packet is sent, so no server is needed. */
	memset(&s, 0, sizeof(s));
	s.dtls = dtls;
	srv_socket(&s);
	assert_int_equal(mk_client(&s.addr, dtls, &no_file, &c), -ENOENT);
	close(s.fd);
}

static void t_tls_verify(void **state)
{
	verify(state, false);
}
static void t_dtls_verify(void **state)
{
	verify(state, true);
}

static void t_info_errors(void **state)
{
	struct turn_client_tls_info ti;
	struct tsrv s;
	struct turn_client *c;

	(void)state;
	assert_int_equal(turn_client_tls_info(NULL, &ti), -EINVAL);
	memset(&s, 0, sizeof(s));
	s.dtls = true;
	srv_socket(&s);
	struct turn_client_opts o = { .transport = TURN_CLIENT_UDP,
				      .server = (struct sockaddr *)&s.addr };
	assert_int_equal(turn_client_create(&o, &c), 0);
	assert_int_equal(turn_client_tls_info(c, &ti), -ENOTCONN);
	assert_int_equal(turn_client_tls_info(c, NULL), -EINVAL);
	turn_client_destroy(c);
	close(s.fd);
	o.transport = (enum turn_client_transport)7;
	assert_int_equal(turn_client_create(&o, &c), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_tls_session),       cmocka_unit_test(t_dtls_session),
		cmocka_unit_test(t_dtls_lost_hello),   cmocka_unit_test(t_tls_no_alpn),
		cmocka_unit_test(t_dtls_no_alpn),      cmocka_unit_test(t_tls_server_close),
		cmocka_unit_test(t_dtls_server_close), cmocka_unit_test(t_tls_server_abort),
		cmocka_unit_test(t_tls_silent),        cmocka_unit_test(t_dtls_silent),
		cmocka_unit_test(t_tls_verify),        cmocka_unit_test(t_dtls_verify),
		cmocka_unit_test(t_info_errors),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
