/* Long-term credential keys, USERHASH and TURN REST API (ephemeral) credentials. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "stun/stun.h"
#include "stun/stun_auth.h"
#include "stun/stun_int.h"

/* Digest of "a:b[:c]" without building the joined string. */
static int digest3(const char *md_name, const char *a, size_t an, const char *b, size_t bn,
		   const char *c, size_t cn, uint8_t *out, size_t *out_len)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	EVP_MD *md = EVP_MD_fetch(NULL, md_name, NULL);
	unsigned int n = 0;
	int rc = -EIO;

	if (ctx == NULL || md == NULL || EVP_DigestInit_ex(ctx, md, NULL) != 1)
		goto out;
	if (EVP_DigestUpdate(ctx, a, an) != 1 || EVP_DigestUpdate(ctx, ":", 1) != 1 ||
	    EVP_DigestUpdate(ctx, b, bn) != 1)
		goto out;
	if (c != NULL && (EVP_DigestUpdate(ctx, ":", 1) != 1 || EVP_DigestUpdate(ctx, c, cn) != 1))
		goto out;
	if (EVP_DigestFinal_ex(ctx, out, &n) != 1)
		goto out;
	*out_len = n;
	rc = 0;
out:
	EVP_MD_free(md);
	EVP_MD_CTX_free(ctx);
	return rc;
}

int stun_auth_key(uint16_t alg, const char *user, size_t user_len, const char *realm,
		  size_t realm_len, const char *pass, size_t pass_len, uint8_t *key,
		  size_t *key_len)
{
	const char *md;

	if (user == NULL || realm == NULL || pass == NULL || key == NULL || key_len == NULL)
		return -EINVAL;
	if (alg == STUN_PWALG_MD5)
		md = "MD5";
	else if (alg == STUN_PWALG_SHA256)
		md = "SHA256";
	else
		return -EINVAL;
	return digest3(md, user, user_len, realm, realm_len, pass, pass_len, key, key_len);
}

int stun_auth_userhash(const char *user, size_t user_len, const char *realm, size_t realm_len,
		       uint8_t out[32])
{
	size_t n;

	if (user == NULL || realm == NULL || out == NULL)
		return -EINVAL;
	return digest3("SHA256", user, user_len, realm, realm_len, NULL, 0, out, &n);
}

int stun_rest_password(const uint8_t *secret, size_t secret_len, const char *username,
		       size_t username_len, char *password, size_t cap)
{
	uint8_t mac[32];
	size_t mac_len = 0;

	if (secret == NULL || username == NULL || password == NULL)
		return -EINVAL;
	if (cap < STUN_REST_PASSWORD_LEN + 1)
		return -ENOBUFS;
	if (stun_hmac2("SHA1", secret, secret_len, (const uint8_t *)username, username_len, NULL, 0,
		       mac, &mac_len) != 0)
		return -EIO;
	/* 20 bytes -> 28 base64 characters with one '=' of padding. */
	EVP_EncodeBlock((unsigned char *)password, mac, (int)mac_len);
	explicit_bzero(mac, sizeof(mac));
	return 0;
}

int stun_rest_mint(const uint8_t *secret, size_t secret_len, const char *user, uint64_t expiry,
		   char *username, size_t username_cap, char *password, size_t password_cap)
{
	int n;

	if (username == NULL || password == NULL)
		return -EINVAL;
	if (user != NULL && user[0] != '\0')
		n = snprintf(username, username_cap, "%" PRIu64 ":%s", expiry, user);
	else
		n = snprintf(username, username_cap, "%" PRIu64, expiry);
	if (n < 0 || (size_t)n >= username_cap)
		return -ENOBUFS;
	return stun_rest_password(secret, secret_len, username, (size_t)n, password, password_cap);
}

int stun_rest_expiry(const char *username, size_t username_len, uint64_t *expiry)
{
	uint64_t v = 0;
	size_t i;

	if (username == NULL || expiry == NULL)
		return -EINVAL;
	for (i = 0; i < username_len && username[i] != ':'; i++) {
		if (username[i] < '0' || username[i] > '9')
			return -EINVAL;
		if (i >= 19)	/* 19 digits always fit in 64 bits */
			return -EINVAL;
		v = v * 10 + (uint64_t)(username[i] - '0');
	}
	if (i == 0)
		return -EINVAL;
	*expiry = v;
	return 0;
}

int stun_rest_verify(const uint8_t *secret, size_t secret_len, const char *username,
		     size_t username_len, const char *password, size_t password_len, uint64_t now)
{
	char want[STUN_REST_PASSWORD_LEN + 1];
	uint64_t expiry;
	int rc;

	if (password == NULL)
		return -EINVAL;
	rc = stun_rest_expiry(username, username_len, &expiry);
	if (rc != 0)
		return rc;
	rc = stun_rest_password(secret, secret_len, username, username_len, want, sizeof(want));
	if (rc != 0)
		return rc;
	/* Length is public (always 28); the content comparison is constant-time. */
	if (password_len != STUN_REST_PASSWORD_LEN ||
	    CRYPTO_memcmp(want, password, STUN_REST_PASSWORD_LEN) != 0)
		rc = -EACCES;
	else if (expiry < now)
		rc = -ETIMEDOUT;
	explicit_bzero(want, sizeof(want));
	return rc;
}
