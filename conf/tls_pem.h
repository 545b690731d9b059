/* Reading TLS material: every certificate and every private key of a PEM buffer, for the
 * config check (conf/conf_tls.c) and the worker's contexts (worker/tls.c). Any process. */
#ifndef TG_CONF_TLS_PEM_H
#define TG_CONF_TLS_PEM_H

#include <stddef.h>

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

#endif
