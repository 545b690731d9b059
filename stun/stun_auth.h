/* STUN/TURN authentication material: long-term keys, USERHASH, TURN REST credentials, nonces.
 *
 * Pure functions over caller memory (OpenSSL for the hashes), no global state; callable from
 * any process. Secrets passed in are not kept; intermediate copies are wiped with
 * explicit_bzero. Returns 0 or a negative errno code as documented per function.
 */
#ifndef TG_STUN_STUN_AUTH_H
#define TG_STUN_STUN_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest long-term key (SHA-256). MD5 keys are 16 bytes. */
#define STUN_KEY_MAX 32

/* Long-term credential key (RFC 8489 9.2.2): alg STUN_PWALG_MD5 -> MD5(user:realm:pass)
 * (16 bytes), STUN_PWALG_SHA256 -> SHA-256(user:realm:pass) (32 bytes). The strings are
 * used as given: SASLprep/OpaqueString is NOT applied, so callers must pass credentials
 * already in their canonical form (ASCII credentials, which is what TURN REST and STUNner
 * produce, are unaffected). key must hold STUN_KEY_MAX bytes; *key_len gets the size.
 * 0, -EINVAL (unknown alg, NULL), -EIO (crypto failure). */
int stun_auth_key(uint16_t alg, const char *user, size_t user_len, const char *realm,
		  size_t realm_len, const char *pass, size_t pass_len, uint8_t *key,
		  size_t *key_len);

/* USERHASH (RFC 8489 14.4): SHA-256(user ":" realm) into out[32]. 0, -EINVAL, -EIO. */
int stun_auth_userhash(const char *user, size_t user_len, const char *realm, size_t realm_len,
		       uint8_t out[32]);

/* ---- TURN REST API credentials (coturn / STUNner "ephemeral" convention) -------------
 * username = "<expiry>:<user>" (or just "<expiry>"), expiry = unix seconds, decimal;
 * password = base64(HMAC-SHA1(secret, username)), standard alphabet with '=' padding
 * (28 characters). */
#define STUN_REST_PASSWORD_LEN 28

/* Mints a credential valid until expiry for user (user NULL or "" -> username is just the
 * expiry). Writes NUL-terminated strings; -ENOBUFS if a buffer is too small (username
 * needs 21 + strlen(user) + 1, password STUN_REST_PASSWORD_LEN + 1). */
int stun_rest_mint(const uint8_t *secret, size_t secret_len, const char *user, uint64_t expiry,
		   char *username, size_t username_cap, char *password, size_t password_cap);

/* Server side, step 1: parses the expiry out of a REST username (not NUL-terminated).
 * 0 and *expiry if "<digits>" or "<digits>:...", -EINVAL if not in REST format. */
int stun_rest_expiry(const char *username, size_t username_len, uint64_t *expiry);

/* Server side, step 2: derives the password for username under secret (NUL-terminated,
 * STUN_REST_PASSWORD_LEN chars) into password[cap]. 0, -ENOBUFS, -EINVAL, -EIO. */
int stun_rest_password(const uint8_t *secret, size_t secret_len, const char *username,
		       size_t username_len, char *password, size_t cap);

/* Full check of a username/password pair at time now (injectable clock):
 * 0 valid, -ETIMEDOUT expired (expiry < now), -EACCES wrong password, -EINVAL malformed.
 * Password comparison is constant-time. */
int stun_rest_verify(const uint8_t *secret, size_t secret_len, const char *username,
		     size_t username_len, const char *password, size_t password_len, uint64_t now);

/* ---- Stateless nonces ---------------------------------------------------------------
 * nonce = [ "obMatJos2" + base64(3-byte security feature set) ]   (only if features != 0)
 *         + base64url( 8-byte big-endian issue time || HMAC-SHA256(key, prefix || time ||
 *                      bind)[0..16) )
 * i.e. 32 characters without the RFC 8489 cookie, 45 with it; always < 128 characters and
 * printable (quoted-string safe). bind is caller data the nonce is tied to (typically the
 * client's transport address), so a nonce cannot be replayed from another address. Any
 * worker with the same key verifies any other's nonce: no per-client state. */
#define STUN_NONCE_KEY_LEN 32		/* recommended key size; any length >= 16 works */
#define STUN_NONCE_MAX_LEN 45		/* excluding the NUL */
#define STUN_NONCE_COOKIE "obMatJos2"
/* Security feature bits (RFC 8489 18.1). Bit 0 is the LEAST significant of the 24, as the
 * verified errata 6290 says and the corrected Appendix B.1 vector (errata 6268, "AAAC" =
 * username anonymity) uses; the RFC's 9.2 text says otherwise. */
#define STUN_NONCE_FEAT_PASSWORD_ALGORITHMS 0x000001u
#define STUN_NONCE_FEAT_USERNAME_ANONYMITY 0x000002u

/* Issues a nonce at time now. features: 0 for a plain nonce (no cookie), else the 24-bit
 * feature set (only set STUN_NONCE_FEAT_PASSWORD_ALGORITHMS if the server implements the
 * RFC 8489 9.2 PASSWORD-ALGORITHMS downgrade checks). out must hold STUN_NONCE_MAX_LEN + 1;
 * *out_len (may be NULL) gets the length. 0, -EINVAL, -ENOBUFS, -EIO. */
int stun_nonce_make(const uint8_t *key, size_t key_len, uint64_t now, uint32_t features,
		    const void *bind, size_t bind_len, char *out, size_t cap, size_t *out_len);

/* Verifies a nonce (not NUL-terminated) at time now: 0 valid and younger than max_age
 * seconds; -ETIMEDOUT valid MAC but older than max_age (server answers 438 Stale Nonce);
 * -EACCES anything else (bad format, bad MAC, other bind data, issued more than 60 s in the
 * future): answer 401 with a fresh nonce. *features (may be NULL) gets the feature set
 * carried by the nonce (0 when there is no cookie). MAC comparison is constant-time. */
int stun_nonce_check(const uint8_t *key, size_t key_len, const char *nonce, size_t nonce_len,
		     uint64_t now, uint32_t max_age, const void *bind, size_t bind_len,
		     uint32_t *features);

/* Client side: reads the security feature set from any server's nonce. 0 and *features
 * if the nonce starts with "obMatJos2" and 4 base64 characters, -ENOENT if it carries no
 * cookie (features 0), -EINVAL on NULL. Used for the RFC 8489 9.2.5 bid-down check. */
int stun_nonce_features(const char *nonce, size_t nonce_len, uint32_t *features);

#endif
