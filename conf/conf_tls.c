/* Validates TLS material at load time: PEM certificate, PEM private key, and that they match. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "conf/conf_internal.h"

int conf_tls_check(const char *cert, size_t cert_len, const char *key, size_t key_len,
		   char *err, size_t errlen)
{
	int rc = -EINVAL;
	X509 *x = NULL;
	EVP_PKEY *k = NULL;
	BIO *b = NULL;
	err[0] = '\0';
	if (cert != NULL) {
		b = BIO_new_mem_buf(cert, (int)cert_len);
		if (b == NULL)
			goto oom;
		x = PEM_read_bio_X509(b, NULL, NULL, NULL);
		BIO_free(b);
		if (x == NULL) {
			snprintf(err, errlen, "cert: not a PEM certificate (expected base64 of a "
				 "PEM certificate)");
			goto out;
		}
	}
	if (key != NULL) {
		b = BIO_new_mem_buf(key, (int)key_len);
		if (b == NULL)
			goto oom;
		k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
		BIO_free(b);
		if (k == NULL) {
			snprintf(err, errlen, "key: not a PEM private key (expected base64 of an "
				 "unencrypted PEM private key)");
			goto out;
		}
	}
	if (x != NULL && k != NULL && X509_check_private_key(x, k) != 1) {
		snprintf(err, errlen, "key: does not match the certificate (expected the "
			 "certificate's private key)");
		goto out;
	}
	rc = 0;
	goto out;
oom:
	rc = -ENOMEM;
out:
	ERR_clear_error();
	X509_free(x);
	EVP_PKEY_free(k);
	return rc;
}
