/* Worker TLS/DTLS contexts: certificates from the snapshot (several per listener, picked
 * by SNI), ALPN "stun.turn", stateless DTLS cookies, and the datagram BIO that lets one
 * shared UDP listener socket carry every DTLS association. */
#include "config.h"

#include "worker/transport.h"
#include "worker/wk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "common/log.h"
#include "conf/tls_pem.h"

#define WK_TLS_MAX_CERTS CONF_TLS_MAX_KEYS
#define WK_TLS_MAX_CHAIN 8
#define WK_TLS_CIPHERS "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!SHA1"
#define WK_DTLS_MTU 1200		/* records fit any path's MTU: no IP fragmentation */
#define WK_COOKIE_LEN 20		/* 4 bytes epoch + 16 bytes MAC */
#define WK_COOKIE_EPOCH_S 60

/* ALPN identifier of TURN (RFC 7443), in wire format: length byte, then the name. */
static const unsigned char wk_alpn_turn[] = "\x09stun.turn";

/* The certificates of one listener, hung on its default context (ex_data) so that the
 * SNI callback's argument lives exactly as long as that context: a handshake that
 * started before a rotation keeps both alive through its own SSL reference. */
struct wk_tls_set {
	size_t n;
	X509 *leaf[WK_TLS_MAX_CERTS];
	SSL_CTX *ctx[WK_TLS_MAX_CERTS];	/* ctx[0] is the owner: not referenced here */
};

static void wk_tls_set_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
			    void *argp)
{
	struct wk_tls_set *set = ptr;

	if (!set)
		return;
	for (size_t i = 0; i < set->n; i++) {
		X509_free(set->leaf[i]);
		if (i > 0)
			SSL_CTX_free(set->ctx[i]);
	}
	free(set);
}

int wk_tls_init(struct worker *w)
{
	w->tls_set_idx = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, wk_tls_set_free);
	if (w->tls_set_idx < 0 || RAND_bytes(w->cookie_key, sizeof(w->cookie_key)) != 1)
		return -EIO;
	return 0;
}

/* ---- callbacks ----------------------------------------------------------------------- */

/* ALPN: pick stun.turn when offered; a client offering only other protocols still gets
 * TURN (no ALPN in the answer) rather than a failed handshake. */
static int wk_alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		      const unsigned char *in, unsigned int inlen, void *arg)
{
	unsigned char *sel;

	if (SSL_select_next_proto(&sel, outlen, wk_alpn_turn, sizeof(wk_alpn_turn) - 1, in,
				  inlen) == OPENSSL_NPN_NEGOTIATED) {
		*out = sel;
		return SSL_TLSEXT_ERR_OK;
	}
	return SSL_TLSEXT_ERR_NOACK;
}

static int wk_sni_cb(SSL *ssl, int *alert, void *arg)
{
	const struct wk_tls_set *set = arg;
	const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);

	if (!name || !set)
		return SSL_TLSEXT_ERR_OK;
	for (size_t i = 0; i < set->n; i++) {
		if (X509_check_host(set->leaf[i], name, 0, 0, NULL) != 1)
			continue;
		if (i > 0 && !SSL_set_SSL_CTX(ssl, set->ctx[i]))
			return SSL_TLSEXT_ERR_ALERT_FATAL;
		return SSL_TLSEXT_ERR_OK;
	}
	return SSL_TLSEXT_ERR_OK;	/* unknown name: the default certificate */
}

/* Cookie = epoch (minutes) || HMAC-SHA256(worker key, epoch || client address)[0..16):
 * stateless, bound to the source address, valid for one to two minutes. */
static void wk_cookie_mac(const struct worker *w, uint32_t epoch, const struct wk_dbio *d,
			  uint8_t out[16])
{
	uint8_t msg[4 + sizeof(struct shm_addr)], mac[EVP_MAX_MD_SIZE];
	unsigned int maclen = 0;
	struct shm_addr a;

	memset(&a, 0, sizeof(a));
	wk_addr_to_shm((const struct sockaddr *)&d->peer, &a);
	memcpy(msg, &epoch, 4);
	memcpy(msg + 4, &a, sizeof(a));
	if (!HMAC(EVP_sha256(), w->cookie_key, sizeof(w->cookie_key), msg, sizeof(msg), mac,
		  &maclen))
		memset(mac, 0, sizeof(mac));
	memcpy(out, mac, 16);
}

static struct wk_dbio *wk_dbio_of(SSL *ssl)
{
	BIO *b = SSL_get_rbio(ssl);

	return b ? BIO_get_data(b) : NULL;
}

static int wk_cookie_gen(SSL *ssl, unsigned char *cookie, unsigned int *len)
{
	struct wk_dbio *d = wk_dbio_of(ssl);
	uint32_t epoch;

	if (!d)
		return 0;
	epoch = (uint32_t)(mono_ms() / 1000 / WK_COOKIE_EPOCH_S);
	memcpy(cookie, &epoch, 4);
	wk_cookie_mac(d->w, epoch, d, cookie + 4);
	*len = WK_COOKIE_LEN;
	return 1;
}

static int wk_cookie_verify(SSL *ssl, const unsigned char *cookie, unsigned int len)
{
	struct wk_dbio *d = wk_dbio_of(ssl);
	uint32_t epoch, now = (uint32_t)(mono_ms() / 1000 / WK_COOKIE_EPOCH_S);
	uint8_t mac[16];

	if (!d || len != WK_COOKIE_LEN)
		return 0;
	memcpy(&epoch, cookie, 4);
	if (epoch != now && epoch + 1 != now)
		return 0;
	wk_cookie_mac(d->w, epoch, d, mac);
	return CRYPTO_memcmp(mac, cookie + 4, sizeof(mac)) == 0;
}

/* ---- contexts ------------------------------------------------------------------------ */

static SSL_CTX *wk_tls_ctx_new(struct worker *w, bool dtls)
{
	SSL_CTX *ctx = SSL_CTX_new(dtls ? DTLS_server_method() : TLS_server_method());

	if (!ctx)
		return NULL;
	SSL_CTX_set_min_proto_version(ctx, dtls ? DTLS1_2_VERSION : TLS1_2_VERSION);
	/* No resumption: tickets and caches would be per worker and per rotation anyway. */
	SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_CIPHER_SERVER_PREFERENCE |
					 SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
					 (dtls ? SSL_OP_NO_QUERY_MTU : 0));
	SSL_CTX_set_num_tickets(ctx, 0);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
				      SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (SSL_CTX_set_cipher_list(ctx, WK_TLS_CIPHERS) != 1) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_alpn_select_cb(ctx, wk_alpn_cb, NULL);
	if (dtls) {
		SSL_CTX_set_cookie_generate_cb(ctx, wk_cookie_gen);
		SSL_CTX_set_cookie_verify_cb(ctx, wk_cookie_verify);
	}
	SSL_CTX_set_app_data(ctx, w);
	return ctx;
}

/* Loads leaf+key into ctx and the chain that issued leaf, found among certs by issuer. */
static int wk_ctx_use(SSL_CTX *ctx, X509 *leaf, EVP_PKEY *key, X509 **certs, size_t n)
{
	X509 *cur = leaf;

	if (SSL_CTX_use_certificate(ctx, leaf) != 1 || SSL_CTX_use_PrivateKey(ctx, key) != 1)
		return -EINVAL;
	for (int depth = 0; depth < WK_TLS_MAX_CHAIN; depth++) {
		X509 *up = NULL;

		if (X509_check_issued(cur, cur) == X509_V_OK)
			break;		/* self-issued: the top */
		for (size_t i = 0; i < n && !up; i++)
			if (certs[i] != cur && X509_check_issued(certs[i], cur) == X509_V_OK)
				up = certs[i];
		if (!up || SSL_CTX_add1_chain_cert(ctx, up) != 1)
			break;
		cur = up;
	}
	return SSL_CTX_check_private_key(ctx) == 1 ? 0 : -EINVAL;
}

int wk_tls_ctx_build(struct worker *w, const struct snap_listener *sl, bool dtls, SSL_CTX **out)
{
	X509 *certs[CONF_TLS_MAX_CERTS] = { 0 };
	EVP_PKEY *keys[WK_TLS_MAX_CERTS] = { 0 };
	size_t nc = 0, nk = 0;
	struct wk_tls_set *set = calloc(1, sizeof(*set));
	int rc = -EINVAL;

	*out = NULL;
	if (!set || !sl->cert_pem || !sl->key_pem) {
		free(set);
		return set ? -EINVAL : -ENOMEM;
	}
	if (conf_pem_read_certs(sl->cert_pem, sl->cert_pem_len, certs, CONF_TLS_MAX_CERTS, &nc) <
		    0 ||
	    conf_pem_read_keys(sl->key_pem, sl->key_pem_len, keys, WK_TLS_MAX_CERTS, &nk) < 0)
		goto out;
	/* Each key serves the certificate it matches; the others are intermediates. */
	for (size_t k = 0; k < nk; k++) {
		X509 *leaf = NULL;
		SSL_CTX *ctx;

		for (size_t i = 0; i < nc && !leaf; i++)
			if (X509_check_private_key(certs[i], keys[k]) == 1)
				leaf = certs[i];
		ERR_clear_error();
		if (!leaf || !(ctx = wk_tls_ctx_new(w, dtls)))
			goto out;
		if (wk_ctx_use(ctx, leaf, keys[k], certs, nc) < 0) {
			SSL_CTX_free(ctx);
			goto out;
		}
		X509_up_ref(leaf);
		set->leaf[set->n] = leaf;
		set->ctx[set->n++] = ctx;
	}
	if (set->n == 0)
		goto out;
	if (!SSL_CTX_set_ex_data(set->ctx[0], w->tls_set_idx, set))
		goto out;
	SSL_CTX_set_tlsext_servername_callback(set->ctx[0], wk_sni_cb);
	SSL_CTX_set_tlsext_servername_arg(set->ctx[0], set);
	*out = set->ctx[0];
	set = NULL;
	rc = 0;
out:
	if (set) {
		for (size_t i = 0; i < set->n; i++) {
			X509_free(set->leaf[i]);
			SSL_CTX_free(set->ctx[i]);
		}
		free(set);
	}
	for (size_t i = 0; i < nc; i++)
		X509_free(certs[i]);
	for (size_t k = 0; k < nk; k++)
		EVP_PKEY_free(keys[k]);
	ERR_clear_error();
	return rc;
}

/* ---- the DTLS datagram BIO ----------------------------------------------------------- */

/* Reads hand out the one datagram the caller set (then "retry"); writes are datagrams sent
 * to the association's peer through the listener socket. */
static int wk_dbio_write(BIO *b, const char *buf, int len)
{
	struct wk_dbio *d = BIO_get_data(b);

	BIO_clear_retry_flags(b);
	if (!d || len < 0)
		return -1;
	if (sendto(d->fd, buf, (size_t)len, MSG_DONTWAIT, (struct sockaddr *)&d->peer,
		   d->peer_len) < 0) {
		/* A full socket buffer loses the datagram, as on any UDP path; DTLS
		 * retransmits handshake flights and TURN tolerates data loss. */
		shm_ctr_add(d->w->ctr, SHM_CTR_ERR_SEND, 1);
	}
	return len;
}

static int wk_dbio_read(BIO *b, char *buf, int len)
{
	struct wk_dbio *d = BIO_get_data(b);
	size_t n;

	BIO_clear_retry_flags(b);
	if (!d || !d->rbuf) {
		BIO_set_retry_read(b);
		return -1;
	}
	n = d->rlen < (size_t)len ? d->rlen : (size_t)len;	/* a datagram is never split */
	memcpy(buf, d->rbuf, n);
	d->rbuf = NULL;
	d->rlen = 0;
	return (int)n;
}

static long wk_dbio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	struct wk_dbio *d = BIO_get_data(b);

	switch (cmd) {
	case BIO_CTRL_FLUSH:
	case BIO_CTRL_DGRAM_SET_NEXT_TIMEOUT:
		return 1;
	case BIO_CTRL_DGRAM_GET_PEER:
		if (!d || !ptr)
			return 0;
		if (d->peer.ss_family == AF_INET) {
			const struct sockaddr_in *s = (const struct sockaddr_in *)&d->peer;

			return BIO_ADDR_rawmake(ptr, AF_INET, &s->sin_addr, sizeof(s->sin_addr),
						s->sin_port);
		} else if (d->peer.ss_family == AF_INET6) {
			const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&d->peer;

			return BIO_ADDR_rawmake(ptr, AF_INET6, &s->sin6_addr, sizeof(s->sin6_addr),
						s->sin6_port);
		}
		return 0;
	case BIO_CTRL_DGRAM_QUERY_MTU:
	case BIO_CTRL_DGRAM_GET_FALLBACK_MTU:
		return WK_DTLS_MTU;
	case BIO_CTRL_DGRAM_GET_MTU_OVERHEAD:
		return 48;	/* IPv6 + UDP headers: the larger case */
	default:
		return 0;
	}
}

static int wk_dbio_destroy(BIO *b)
{
	free(BIO_get_data(b));
	BIO_set_data(b, NULL);
	return 1;
}

static int wk_dbio_create(BIO *b)
{
	BIO_set_init(b, 1);
	return 1;
}

int wk_dtls_meth_init(struct worker *w)
{
	BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "turngate-dgram");

	if (!m || !BIO_meth_set_write(m, wk_dbio_write) || !BIO_meth_set_read(m, wk_dbio_read) ||
	    !BIO_meth_set_ctrl(m, wk_dbio_ctrl) || !BIO_meth_set_create(m, wk_dbio_create) ||
	    !BIO_meth_set_destroy(m, wk_dbio_destroy)) {
		BIO_meth_free(m);
		return -ENOMEM;
	}
	w->dbio_meth = m;
	return 0;
}

SSL *wk_dtls_ssl_new(struct worker *w, SSL_CTX *ctx, int fd)
{
	SSL *ssl = SSL_new(ctx);
	BIO *b = ssl ? BIO_new(w->dbio_meth) : NULL;
	struct wk_dbio *d = b ? calloc(1, sizeof(*d)) : NULL;

	if (!d) {
		BIO_free(b);
		SSL_free(ssl);
		return NULL;
	}
	d->w = w;
	d->fd = fd;
	BIO_set_data(b, d);
	SSL_set_bio(ssl, b, b);		/* one reference serves both directions */
	SSL_set_mtu(ssl, WK_DTLS_MTU);
	DTLS_set_link_mtu(ssl, WK_DTLS_MTU);
	SSL_set_accept_state(ssl);
	return ssl;
}

struct wk_dbio *wk_dtls_dbio(SSL *ssl)
{
	return wk_dbio_of(ssl);
}

void wk_tls_describe(SSL *ssl, char *buf, size_t len)
{
	const unsigned char *alpn = NULL;
	unsigned int alen = 0;

	SSL_get0_alpn_selected(ssl, &alpn, &alen);
	snprintf(buf, len, "%s %s alpn=%.*s", SSL_get_version(ssl), SSL_get_cipher_name(ssl),
		 (int)alen, alen ? (const char *)alpn : "-");
}
