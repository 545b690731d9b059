/* TURN client TLS (over TCP) and DTLS (over connected UDP): handshake, record I/O, info. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "client/turn_client_int.h"

/* ALPN for TURN (RFC 7443), in wire format: length byte then the name. */
static const unsigned char tc_alpn[] = "\x09stun.turn";

/* OpenSSL writes TLS with write(), which raises SIGPIPE when the server has gone: keep the
 * signal blocked around writes and swallow one we caused, so a library call never kills
 * the calling program nor eats a SIGPIPE that was already pending for someone else. */
struct pipe_guard {
	sigset_t old;
	bool was_pending;
};

static void pipe_guard_on(struct pipe_guard *g)
{
	sigset_t set, pend;

	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	sigemptyset(&pend);
	sigpending(&pend);
	g->was_pending = sigismember(&pend, SIGPIPE) == 1;
	pthread_sigmask(SIG_BLOCK, &set, &g->old);
}

static void pipe_guard_off(struct pipe_guard *g)
{
	sigset_t set, pend;
	struct timespec zero = { 0, 0 };

	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	sigemptyset(&pend);
	sigpending(&pend);
	if (!g->was_pending && sigismember(&pend, SIGPIPE) == 1)
		sigtimedwait(&set, NULL, &zero);
	pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* Maps a failed SSL call to an errno code; sys_errno is errno right after the call.
 * OpenSSL forbids SSL_shutdown() after a SYSCALL or SSL error: remember one. */
static int tls_error(struct turn_client *c, int err, int sys_errno)
{
	if (err == SSL_ERROR_SYSCALL || err == SSL_ERROR_SSL)
		c->ssl_failed = true;
	switch (err) {
	case SSL_ERROR_ZERO_RETURN:
		return -ECONNRESET;
	case SSL_ERROR_SYSCALL:
		/* EOF without close_notify is ZERO_RETURN (SSL_OP_IGNORE_UNEXPECTED_EOF). */
		return sys_errno > 0 ? -sys_errno : -ECONNRESET;
	default:
		return -ECONNABORTED;
	}
}

/* Waits for what OpenSSL wants (err is WANT_READ/WANT_WRITE). DTLS: wakes up early when
 * the retransmission timer fires and retransmits the flight. 0 = try again. */
static int tls_wait(struct turn_client *c, int err, int64_t deadline)
{
	short ev = err == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN;
	int64_t until = deadline;
	struct timeval tv;
	bool timer = false;
	int rc;

	if (c->transport == TURN_CLIENT_DTLS && DTLSv1_get_timeout(c->ssl, &tv) == 1) {
		int64_t t = tc_now_ms() + (int64_t)tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;
		if (t < until) {
			until = t;
			timer = true;
		}
	}
	rc = tc_wait_fd(c->fd, ev, until);
	if (rc == -ETIMEDOUT && timer) {
		ERR_clear_error();
		/* -1: the flight was retransmitted too often; the server is not there. */
		return DTLSv1_handle_timeout(c->ssl) < 0 ? -ETIMEDOUT : 0;
	}
	return rc;
}

/* Builds the session: context with the caller's options, socket attached. */
static int tls_new(struct turn_client *c, const struct turn_client_opts *o)
{
	bool dtls = c->transport == TURN_CLIENT_DTLS;
	SSL_CTX *ctx = SSL_CTX_new(dtls ? DTLS_client_method() : TLS_client_method());
	int rc = -ENOMEM;

	if (ctx == NULL)
		return -ENOMEM;
	SSL_CTX_set_min_proto_version(ctx, dtls ? DTLS1_2_VERSION : TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
	if (o->ca_file != NULL) {
		if (SSL_CTX_load_verify_locations(ctx, o->ca_file, NULL) != 1) {
			rc = -ENOENT;
			goto out;
		}
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	}
	c->ssl = SSL_new(ctx);
	if (c->ssl == NULL)
		goto out;
	if (o->sni != NULL && (SSL_set_tlsext_host_name(c->ssl, o->sni) != 1 ||
			       (o->ca_file != NULL && SSL_set1_host(c->ssl, o->sni) != 1))) {
		rc = -EINVAL;
		goto out;
	}
	/* SSL_set_alpn_protos() returns 0 on success. */
	if (!o->no_alpn && SSL_set_alpn_protos(c->ssl, tc_alpn, sizeof(tc_alpn) - 1) != 0)
		goto out;
	if (dtls) {
		BIO *bio = BIO_new_dgram(c->fd, BIO_NOCLOSE);
		if (bio == NULL)
			goto out;
		BIO_ctrl_set_connected(bio, &c->server);
		SSL_set_bio(c->ssl, bio, bio);
	} else if (SSL_set_fd(c->ssl, c->fd) != 1) {
		goto out;
	}
	SSL_set_connect_state(c->ssl);
	rc = 0;
out:
	SSL_CTX_free(ctx);	/* the session holds its own reference */
	return rc;
}

int tc_tls_start(struct turn_client *c, const struct turn_client_opts *o, int64_t deadline)
{
	int rc = tls_new(c, o);

	if (rc != 0)
		return rc;
	/* Bounded: each round makes progress or waits, and waits end at the deadline. */
	for (;;) {
		struct pipe_guard g;
		int r, e, err;

		pipe_guard_on(&g);
		ERR_clear_error();
		errno = 0;
		r = SSL_do_handshake(c->ssl);
		e = errno;
		pipe_guard_off(&g);
		if (r == 1)
			return 0;
		err = SSL_get_error(c->ssl, r);
		if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
			return tls_error(c, err, e);
		rc = tls_wait(c, err, deadline);
		if (rc != 0)
			return rc;
	}
}

/* After an SSL_*_ex call that returned r (errno e): waits for what OpenSSL wants and
 * returns 0 to retry, or the transport error. */
static int tls_retry(struct turn_client *c, int r, int e, int64_t deadline)
{
	int err = SSL_get_error(c->ssl, r);

	if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
		return tls_error(c, err, e);
	return tls_wait(c, err, deadline);
}

int tc_tls_write(struct turn_client *c, const uint8_t *buf, size_t len, int64_t deadline)
{
	size_t off = 0;

	/* Retries pass the same buffer and length, as OpenSSL requires. */
	while (off < len) {
		struct pipe_guard g;
		size_t w = 0;
		int r, e, rc;

		pipe_guard_on(&g);
		ERR_clear_error();
		errno = 0;
		r = SSL_write_ex(c->ssl, buf + off, len - off, &w);
		e = errno;
		pipe_guard_off(&g);
		if (r == 1) {
			off += w;
			continue;
		}
		rc = tls_retry(c, r, e, deadline);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int tc_tls_read(struct turn_client *c, uint8_t *buf, size_t cap, int64_t deadline, size_t *n)
{
	/* Reading first, polling second: OpenSSL may hold decrypted data or whole records
	 * while the socket has nothing left to read. */
	for (;;) {
		int r, e, rc;

		ERR_clear_error();
		errno = 0;
		r = SSL_read_ex(c->ssl, buf, cap, n);
		e = errno;
		if (r == 1)
			return 0;
		rc = tls_retry(c, r, e, deadline);
		if (rc != 0)
			return rc;
	}
}

void tc_tls_close(struct turn_client *c)
{
	struct pipe_guard g;

	if (c->ssl == NULL)
		return;
	/* One non-blocking attempt: close_notify goes out if the socket takes it. */
	if (!c->ssl_failed && SSL_is_init_finished(c->ssl) &&
	    !(SSL_get_shutdown(c->ssl) & SSL_SENT_SHUTDOWN)) {
		pipe_guard_on(&g);
		ERR_clear_error();
		SSL_shutdown(c->ssl);
		pipe_guard_off(&g);
	}
	ERR_clear_error();
	SSL_free(c->ssl);
	c->ssl = NULL;
}

/* Copies an ASN.1 string as printable text: control bytes and non-ASCII become '?'. */
static void copy_asn1(char *dst, size_t cap, const ASN1_STRING *s)
{
	const unsigned char *d = ASN1_STRING_get0_data(s);
	int len = ASN1_STRING_length(s);
	size_t n = 0;

	for (int i = 0; d != NULL && i < len && n + 1 < cap; i++)
		dst[n++] = d[i] >= 0x20 && d[i] < 0x7f ? (char)d[i] : '?';
	dst[n] = '\0';
}

static void cert_info(X509 *x, struct turn_client_tls_info *out)
{
	int i = X509_NAME_get_index_by_NID(X509_get_subject_name(x), NID_commonName, -1);
	GENERAL_NAMES *sans = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	unsigned md_len = 0;
	struct tm tm;

	if (i >= 0) {
		X509_NAME_ENTRY *e = X509_NAME_get_entry(X509_get_subject_name(x), i);
		copy_asn1(out->subject_cn, sizeof(out->subject_cn), X509_NAME_ENTRY_get_data(e));
	}
	for (int k = 0; sans != NULL && k < sk_GENERAL_NAME_num(sans); k++) {
		const GENERAL_NAME *gn = sk_GENERAL_NAME_value(sans, k);
		if (gn->type == GEN_DNS) {
			copy_asn1(out->dns_san, sizeof(out->dns_san), gn->d.dNSName);
			break;
		}
	}
	GENERAL_NAMES_free(sans);
	if (X509_digest(x, EVP_sha256(), out->cert_sha256, &md_len) != 1 ||
	    md_len != sizeof(out->cert_sha256))
		memset(out->cert_sha256, 0, sizeof(out->cert_sha256));
	if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) == 1)
		out->not_after = (int64_t)timegm(&tm);
	out->has_cert = true;
}

int turn_client_tls_info(const struct turn_client *c, struct turn_client_tls_info *out)
{
	const unsigned char *alpn = NULL;
	unsigned alpn_len = 0;
	const SSL_CIPHER *ci;
	X509 *x;

	if (c == NULL || out == NULL)
		return -EINVAL;
	if (c->ssl == NULL)
		return -ENOTCONN;
	memset(out, 0, sizeof(*out));
	snprintf(out->version, sizeof(out->version), "%s", SSL_get_version(c->ssl));
	SSL_get0_alpn_selected(c->ssl, &alpn, &alpn_len);
	if (alpn != NULL && alpn_len < sizeof(out->alpn))
		memcpy(out->alpn, alpn, alpn_len);
	ci = SSL_get_current_cipher(c->ssl);
	snprintf(out->cipher, sizeof(out->cipher), "%s", ci ? SSL_CIPHER_get_name(ci) : "");
	x = SSL_get0_peer_certificate(c->ssl);
	if (x != NULL)
		cert_info(x, out);
	return 0;
}
