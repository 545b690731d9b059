/* Reading TLS material: every certificate and every private key of a PEM buffer, for the
 * config check (conf/conf_tls.c) and the worker's contexts (worker/tls.c). Any process. */
#ifndef TG_CONF_TLS_PEM_H
#define TG_CONF_TLS_PEM_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/types.h>

/* A listener holds at most this many certificate/key pairs (SNI), and its PEM at most
 * CONF_TLS_MAX_CERTS certificates in all (chains included). */
#define CONF_TLS_MAX_KEYS 8
#define CONF_TLS_MAX_CERTS 64

/* Parses up to cap PEM certificates (keys) of pem[0..len) in order into out[], new
 * references the caller frees; *n gets the count (0 when none parse). Clears OpenSSL's
 * error queue. Returns 0 or -ENOMEM. */
int conf_pem_read_certs(const void *pem, size_t len, X509 **out, size_t cap, size_t *n);
int conf_pem_read_keys(const void *pem, size_t len, EVP_PKEY **out, size_t cap, size_t *n);

/* A certificate closer than this to its notAfter (or past it) is a warning at -t, start,
 * reload and in turngatectl doctor: two weeks leaves room for a renewal that failed
 * once (ACME clients renew 30 days ahead). */
#define CONF_TLS_EXPIRY_WARN_DAYS 14

/* The earliest notAfter (Unix seconds) of the certificates of pem[0..len), chains
 * included: the first one to expire breaks the handshake. Returns 0, -ENOENT (no
 * certificate, or a date that does not convert) or -ENOMEM. Any process. */
int conf_pem_not_after(const void *pem, size_t len, int64_t *not_after);

#endif
