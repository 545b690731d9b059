/* Validates TLS material at load time: PEM certificates, PEM private keys, and that every
 * key has its certificate. A listener may hold several certificate/key pairs (chosen by
 * SNI): the certificates (with their chains) concatenated in one PEM, the keys in another. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "conf/conf_internal.h"
#include "conf/tls_pem.h"

int conf_pem_read_certs(const void *pem, size_t len, X509 **out, size_t cap, size_t *n)
{
	BIO *b = BIO_new_mem_buf(pem, (int)len);

	*n = 0;
	if (b == NULL)
		return -ENOMEM;
	while (*n < cap && (out[*n] = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL)
		(*n)++;
	BIO_free(b);
	ERR_clear_error();	/* the end of the data reads as an error */
	return 0;
}

int conf_pem_read_keys(const void *pem, size_t len, EVP_PKEY **out, size_t cap, size_t *n)
{
	BIO *b = BIO_new_mem_buf(pem, (int)len);

	*n = 0;
	if (b == NULL)
		return -ENOMEM;
	while (*n < cap && (out[*n] = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL)) != NULL)
		(*n)++;
	BIO_free(b);
	ERR_clear_error();
	return 0;
}

int conf_pem_not_after(const void *pem, size_t len, int64_t *not_after)
{
	X509 *x[CONF_TLS_MAX_CERTS];
	size_t n = 0;
	int rc = -ENOENT;

	if (conf_pem_read_certs(pem, len, x, CONF_TLS_MAX_CERTS, &n) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct tm tm;
		int64_t t;

		if (ASN1_TIME_to_tm(X509_get0_notAfter(x[i]), &tm) != 1)
			continue;
		t = (int64_t)timegm(&tm);
		if (rc < 0 || t < *not_after)
			*not_after = t;
		rc = 0;
	}
	for (size_t i = 0; i < n; i++)
		X509_free(x[i]);
	ERR_clear_error();
	return rc;
}

int conf_tls_check(const char *cert, size_t cert_len, const char *key, size_t key_len, char *err,
		   size_t errlen)
{
	X509 *x[CONF_TLS_MAX_CERTS];
	EVP_PKEY *k[CONF_TLS_MAX_KEYS + 1];
	size_t nx = 0, nk = 0;
	int rc = -EINVAL;

	err[0] = '\0';
	if (cert != NULL && conf_pem_read_certs(cert, cert_len, x, CONF_TLS_MAX_CERTS, &nx) < 0)
		goto oom;
	if (cert != NULL && nx == 0) {
		snprintf(err, errlen,
			 "cert: not a PEM certificate (expected base64 of a "
			 "PEM certificate)");
		goto out;
	}
	if (key != NULL && conf_pem_read_keys(key, key_len, k, CONF_TLS_MAX_KEYS + 1, &nk) < 0)
		goto oom;
	if (key != NULL && nk == 0) {
		snprintf(err, errlen,
			 "key: not a PEM private key (expected base64 of an "
			 "unencrypted PEM private key)");
		goto out;
	}
	if (nk > CONF_TLS_MAX_KEYS) {
		snprintf(err, errlen,
			 "key: more than %d private keys (expected one per "
			 "certificate, at most %d)",
			 CONF_TLS_MAX_KEYS, CONF_TLS_MAX_KEYS);
		goto out;
	}
	for (size_t i = 0; cert != NULL && i < nk; i++) {
		bool found = false;

		for (size_t j = 0; j < nx && !found; j++)
			found = X509_check_private_key(x[j], k[i]) == 1;
		if (!found && nk == 1) {
			snprintf(err, errlen,
				 "key: does not match the certificate (expected the "
				 "certificate's private key)");
			goto out;
		}
		if (!found) {
			snprintf(err, errlen,
				 "key: private key %zu of %zu matches no certificate "
				 "(expected one key per certificate of cert)",
				 i + 1, nk);
			goto out;
		}
	}
	rc = 0;
	goto out;
oom:
	rc = -ENOMEM;
out:
	ERR_clear_error();
	for (size_t j = 0; j < nx; j++)
		X509_free(x[j]);
	for (size_t i = 0; i < nk; i++)
		EVP_PKEY_free(k[i]);
	return rc;
}
