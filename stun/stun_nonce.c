/* Stateless nonces: issue time plus a truncated HMAC-SHA256, verifiable by any worker. */
#include <errno.h>
#include <string.h>

#include <openssl/crypto.h>

#include "stun/stun_auth.h"
#include "stun/stun_int.h"
#include "stun/stun_wire.h"

#define NONCE_MAC_LEN 16
#define NONCE_BODY_LEN (8 + NONCE_MAC_LEN)	/* time || mac: 24 bytes = 32 chars */
#define NONCE_BODY_CHARS 32
#define NONCE_COOKIE_LEN 9
#define NONCE_FEAT_CHARS 4
#define NONCE_FUTURE_SLACK 60	/* seconds of clock skew tolerated between replicas */

static const char b64std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t stun_b64url_encode(const uint8_t *in, size_t n, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16;
		size_t chars;

		if (i + 1 < n)
			v |= (uint32_t)in[i + 1] << 8;
		if (i + 2 < n)
			v |= in[i + 2];
		chars = n - i >= 3 ? 4 : n - i + 1;
		for (size_t k = 0; k < chars; k++)
			out[o++] = b64url[(v >> (18 - 6 * k)) & 63];
	}
	out[o] = '\0';
	return o;
}

static int b64_val(const char *alphabet, char c)
{
	const char *p = c ? memchr(alphabet, c, 64) : NULL;
	return p ? (int)(p - alphabet) : -1;
}

/* The 24 feature bits travel as 4 characters of standard base64 (RFC 8489 9.2). */
static void feat_encode(uint32_t features, char out[NONCE_FEAT_CHARS])
{
	for (size_t k = 0; k < NONCE_FEAT_CHARS; k++)
		out[k] = b64std[(features >> (18 - 6 * k)) & 63];
}

static int feat_decode(const char in[NONCE_FEAT_CHARS], uint32_t *features)
{
	uint32_t v = 0;
	for (size_t k = 0; k < NONCE_FEAT_CHARS; k++) {
		int d = b64_val(b64std, in[k]);
		if (d < 0)
			return -EINVAL;
		v = (v << 6) | (uint32_t)d;
	}
	*features = v;
	return 0;
}

int stun_nonce_features(const char *nonce, size_t nonce_len, uint32_t *features)
{
	if (nonce == NULL || features == NULL)
		return -EINVAL;
	*features = 0;
	if (nonce_len < NONCE_COOKIE_LEN + NONCE_FEAT_CHARS ||
	    memcmp(nonce, STUN_NONCE_COOKIE, NONCE_COOKIE_LEN) != 0)
		return -ENOENT;
	return feat_decode(nonce + NONCE_COOKIE_LEN, features) == 0 ? 0 : -ENOENT;
}

int stun_b64url_decode(const char *in, size_t n, uint8_t *out, size_t cap)
{
	size_t o = 0;

	if (n % 4 == 1)
		return -EINVAL;
	for (size_t i = 0; i < n; i += 4) {
		uint32_t v = 0;
		size_t chars = n - i >= 4 ? 4 : n - i;
		for (size_t k = 0; k < 4; k++) {
			int d = k < chars ? b64_val(b64url, in[i + k]) : 0;
			if (d < 0)
				return -EINVAL;
			v = (v << 6) | (uint32_t)d;
		}
		for (size_t k = 0; k + 1 < chars; k++) {
			if (o >= cap)
				return -EINVAL;
			out[o++] = (uint8_t)(v >> (16 - 8 * k));
		}
	}
	return (int)o;
}

/* MAC over prefix (cookie + features, may be empty) || time || bind. */
static int nonce_mac(const uint8_t *key, size_t key_len, const char *prefix, size_t plen,
		     const uint8_t t[8], const void *bind, size_t bind_len, uint8_t mac[32])
{
	uint8_t head[NONCE_COOKIE_LEN + NONCE_FEAT_CHARS + 8];
	size_t n = 0;

	memcpy(head, prefix, plen);
	memcpy(head + plen, t, 8);
	return stun_hmac2("SHA256", key, key_len, head, plen + 8, bind, bind_len, mac, &n);
}

int stun_nonce_make(const uint8_t *key, size_t key_len, uint64_t now, uint32_t features,
		    const void *bind, size_t bind_len, char *out, size_t cap, size_t *out_len)
{
	uint8_t body[NONCE_BODY_LEN], mac[32];
	char prefix[NONCE_COOKIE_LEN + NONCE_FEAT_CHARS + 1];
	size_t plen = 0;
	size_t n;

	if (key == NULL || out == NULL || (bind == NULL && bind_len != 0) || features > 0xFFFFFF)
		return -EINVAL;
	if (cap < STUN_NONCE_MAX_LEN + 1)
		return -ENOBUFS;
	if (features != 0) {
		memcpy(prefix, STUN_NONCE_COOKIE, NONCE_COOKIE_LEN);
		feat_encode(features, prefix + NONCE_COOKIE_LEN);
		plen = NONCE_COOKIE_LEN + NONCE_FEAT_CHARS;
	}
	wire_put_u32(body, (uint32_t)(now >> 32));
	wire_put_u32(body + 4, (uint32_t)now);
	if (nonce_mac(key, key_len, prefix, plen, body, bind, bind_len, mac) != 0)
		return -EIO;
	memcpy(body + 8, mac, NONCE_MAC_LEN);
	memcpy(out, prefix, plen);
	n = plen + stun_b64url_encode(body, sizeof(body), out + plen);
	explicit_bzero(mac, sizeof(mac));
	if (out_len)
		*out_len = n;
	return 0;
}

/* Splits off and decodes the optional cookie prefix; returns its length or -EACCES. */
static int nonce_prefix(const char *nonce, size_t len, uint32_t *features)
{
	*features = 0;
	if (len == NONCE_BODY_CHARS)
		return 0;
	if (len != NONCE_COOKIE_LEN + NONCE_FEAT_CHARS + NONCE_BODY_CHARS ||
	    memcmp(nonce, STUN_NONCE_COOKIE, NONCE_COOKIE_LEN) != 0)
		return -EACCES;
	if (feat_decode(nonce + NONCE_COOKIE_LEN, features) != 0 || *features == 0)
		return -EACCES;
	return NONCE_COOKIE_LEN + NONCE_FEAT_CHARS;
}

int stun_nonce_check(const uint8_t *key, size_t key_len, const char *nonce, size_t nonce_len,
		     uint64_t now, uint32_t max_age, const void *bind, size_t bind_len,
		     uint32_t *features)
{
	uint8_t body[NONCE_BODY_LEN], mac[32];
	uint32_t feat;
	int plen;
	int rc;
	uint64_t issued;

	if (key == NULL || nonce == NULL || (bind == NULL && bind_len != 0))
		return -EINVAL;
	plen = nonce_prefix(nonce, nonce_len, &feat);
	if (plen < 0)
		return plen;
	if (stun_b64url_decode(nonce + plen, NONCE_BODY_CHARS, body, sizeof(body)) !=
	    NONCE_BODY_LEN)
		return -EACCES;
	if (nonce_mac(key, key_len, nonce, (size_t)plen, body, bind, bind_len, mac) != 0)
		return -EIO;
	rc = CRYPTO_memcmp(mac, body + 8, NONCE_MAC_LEN) == 0 ? 0 : -EACCES;
	explicit_bzero(mac, sizeof(mac));
	if (rc != 0)
		return rc;
	issued = (uint64_t)wire_get_u32(body) << 32 | wire_get_u32(body + 4);
	if (issued > now + NONCE_FUTURE_SLACK)
		return -EACCES;
	if (now > issued && now - issued > max_age)
		return -ETIMEDOUT;
	if (features)
		*features = feat;
	return 0;
}
