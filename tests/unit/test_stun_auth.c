/* Unit tests of STUN auth helpers: long-term keys, TURN REST credentials, stateless nonces. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "stun/stun.h"
#include "stun/stun_auth.h"

static const uint8_t secret[] = "north";
#define SECRET_LEN 5

static void t_key_md5(void **state)
{
	uint8_t key[STUN_KEY_MAX];
	size_t n;
	/* MD5("user:realm:pass") computed independently (python hashlib). */
	static const uint8_t want[16] = { 0x84, 0x93, 0xfb, 0xc5, 0x3b, 0xa5, 0x82, 0xfb,
					  0x4c, 0x04, 0x4c, 0x45, 0x6b, 0xdc, 0x40, 0xeb };
	assert_int_equal(stun_auth_key(STUN_PWALG_MD5, "user", 4, "realm", 5, "pass", 4, key, &n),
			 0);
	assert_int_equal(n, 16);
	assert_memory_equal(key, want, 16);
	assert_int_equal(stun_auth_key(7, "user", 4, "realm", 5, "pass", 4, key, &n), -EINVAL);
	assert_int_equal(stun_auth_key(STUN_PWALG_SHA256, NULL, 0, "r", 1, "p", 1, key, &n),
			 -EINVAL);
}

static void t_rest_mint_verify(void **state)
{
	char user[64], pass[64];

	assert_int_equal(stun_rest_mint(secret, SECRET_LEN, "alice", 1700000000, user, sizeof(user),
					pass, sizeof(pass)),
			 0);
	assert_string_equal(user, "1700000000:alice");
	/* base64(HMAC-SHA1("north", "1700000000:alice")), computed with python. */
	assert_string_equal(pass, "Cd/49soE35ICqcJF/bCTn8Z4OyE=");
	assert_int_equal(strlen(pass), STUN_REST_PASSWORD_LEN);
	assert_int_equal(stun_rest_mint(secret, SECRET_LEN, NULL, 1700000000, user, sizeof(user),
					pass, sizeof(pass)),
			 0);
	assert_string_equal(user, "1700000000");
	assert_string_equal(pass, "CWyHi3zCeWqXBir9thl4m+iZPRY=");

	assert_int_equal(stun_rest_mint(secret, SECRET_LEN, "alice", 1700000000, user, sizeof(user),
					pass, sizeof(pass)),
			 0);
	/* valid until and including the expiry second */
	assert_int_equal(stun_rest_verify(secret, SECRET_LEN, user, strlen(user), pass,
					  strlen(pass), 1699999999),
			 0);
	assert_int_equal(stun_rest_verify(secret, SECRET_LEN, user, strlen(user), pass,
					  strlen(pass), 1700000000),
			 0);
	assert_int_equal(stun_rest_verify(secret, SECRET_LEN, user, strlen(user), pass,
					  strlen(pass), 1700000001),
			 -ETIMEDOUT);
	/* wrong secret, wrong password, tampered expiry */
	assert_int_equal(stun_rest_verify((const uint8_t *)"south", 5, user, strlen(user), pass,
					  strlen(pass), 0),
			 -EACCES);
	pass[3] ^= 1;
	assert_int_equal(stun_rest_verify(secret, SECRET_LEN, user, strlen(user), pass,
					  strlen(pass), 0),
			 -EACCES);
	pass[3] ^= 1;
	user[0] = '2';
	assert_int_equal(stun_rest_verify(secret, SECRET_LEN, user, strlen(user), pass,
					  strlen(pass), 0),
			 -EACCES);
	assert_int_equal(stun_rest_verify(secret, SECRET_LEN, user, strlen(user), pass, 27, 0),
			 -EACCES);
	/* too small buffers */
	assert_int_equal(stun_rest_mint(secret, SECRET_LEN, "alice", 1, user, 4, pass,
					sizeof(pass)),
			 -ENOBUFS);
	assert_int_equal(stun_rest_mint(secret, SECRET_LEN, "alice", 1, user, sizeof(user), pass,
					28),
			 -ENOBUFS);
}

static void t_rest_expiry(void **state)
{
	uint64_t e;

	assert_int_equal(stun_rest_expiry("123:bob", 7, &e), 0);
	assert_true(e == 123);
	assert_int_equal(stun_rest_expiry("123", 3, &e), 0);
	assert_int_equal(stun_rest_expiry("18446744073709551615", 20, &e), -EINVAL);
	assert_int_equal(stun_rest_expiry("bob:123", 7, &e), -EINVAL);
	assert_int_equal(stun_rest_expiry(":123", 4, &e), -EINVAL);
	assert_int_equal(stun_rest_expiry("", 0, &e), -EINVAL);
	assert_int_equal(stun_rest_expiry("12a:x", 5, &e), -EINVAL);
	/* not a REST username: verify says malformed */
	assert_int_equal(stun_rest_verify(secret, SECRET_LEN, "alice", 5, "x", 1, 0), -EINVAL);
}

static const uint8_t nkey[STUN_NONCE_KEY_LEN] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
static const uint8_t bind_a[] = { 127, 0, 0, 1, 0x13, 0x88 };
static const uint8_t bind_b[] = { 127, 0, 0, 2, 0x13, 0x88 };

static void t_nonce_ok_expired(void **state)
{
	char n[STUN_NONCE_MAX_LEN + 1];
	size_t len;
	uint32_t feat = 99;

	assert_int_equal(stun_nonce_make(nkey, sizeof(nkey), 1000, 0, bind_a, sizeof(bind_a), n,
					 sizeof(n), &len),
			 0);
	assert_int_equal(len, 32);
	assert_int_equal(strlen(n), len);
	for (size_t i = 0; i < len; i++)
		assert_true((n[i] >= 'A' && n[i] <= 'Z') || (n[i] >= 'a' && n[i] <= 'z') ||
			    (n[i] >= '0' && n[i] <= '9') || n[i] == '-' || n[i] == '_');
	assert_int_equal(stun_nonce_check(nkey, sizeof(nkey), n, len, 1000, 600, bind_a,
					  sizeof(bind_a), &feat),
			 0);
	assert_int_equal(feat, 0);
	assert_int_equal(stun_nonce_check(nkey, sizeof(nkey), n, len, 1600, 600, bind_a,
					  sizeof(bind_a), NULL),
			 0);
	assert_int_equal(stun_nonce_check(nkey, sizeof(nkey), n, len, 1601, 600, bind_a,
					  sizeof(bind_a), NULL),
			 -ETIMEDOUT);
	/* clock skew: slightly in the future is fine, far in the future is not */
	assert_int_equal(stun_nonce_check(nkey, sizeof(nkey), n, len, 990, 600, bind_a,
					  sizeof(bind_a), NULL),
			 0);
	assert_int_equal(stun_nonce_check(nkey, sizeof(nkey), n, len, 100, 600, bind_a,
					  sizeof(bind_a), NULL),
			 -EACCES);
	assert_int_equal(stun_nonce_check(nkey, sizeof(nkey), n, len, 1000, 600, bind_b,
					  sizeof(bind_b), NULL),
			 -EACCES);
}

static void t_nonce_tampered(void **state)
{
	char n[STUN_NONCE_MAX_LEN + 1];
	size_t len;
	uint8_t other[STUN_NONCE_KEY_LEN] = { 9 };

	assert_int_equal(stun_nonce_make(nkey, sizeof(nkey), 5000, 0, NULL, 0, n, sizeof(n), &len),
			 0);
	assert_int_equal(stun_nonce_check(other, sizeof(other), n, len, 5000, 60, NULL, 0, NULL),
			 -EACCES);
	for (size_t i = 0; i < len; i++) {
		char c = n[i];
		n[i] = c == 'A' ? 'B' : 'A';
		assert_int_equal(stun_nonce_check(nkey, sizeof(nkey), n, len, 5000, 60, NULL, 0,
						  NULL),
				 -EACCES);
		n[i] = c;
	}
	assert_int_equal(stun_nonce_check(nkey, sizeof(nkey), n, len - 1, 5000, 60, NULL, 0, NULL),
			 -EACCES);
	assert_int_equal(stun_nonce_check(nkey, sizeof(nkey), "f//499k954d6OL34oL9FSTvy64sA", 28,
					  5000, 60, NULL, 0, NULL),
			 -EACCES);
	n[5] = '*';
	assert_int_equal(stun_nonce_check(nkey, sizeof(nkey), n, len, 5000, 60, NULL, 0, NULL),
			 -EACCES);
	assert_int_equal(stun_nonce_make(nkey, sizeof(nkey), 5000, 0, NULL, 0, n, 10, &len),
			 -ENOBUFS);
}

static void t_nonce_cookie(void **state)
{
	char n[STUN_NONCE_MAX_LEN + 1];
	size_t len;
	uint32_t feat = 0;
	uint32_t want = STUN_NONCE_FEAT_PASSWORD_ALGORITHMS | STUN_NONCE_FEAT_USERNAME_ANONYMITY;

	assert_int_equal(stun_nonce_make(nkey, sizeof(nkey), 7, want, NULL, 0, n, sizeof(n), &len),
			 0);
	assert_int_equal(len, STUN_NONCE_MAX_LEN);
	assert_memory_equal(n, "obMatJos2AAAD", 13);
	assert_int_equal(stun_nonce_features(n, len, &feat), 0);
	assert_int_equal(feat, want);
	feat = 0;
	assert_int_equal(stun_nonce_check(nkey, sizeof(nkey), n, len, 7, 60, NULL, 0, &feat), 0);
	assert_int_equal(feat, want);
	/* Downgrading the advertised features breaks the MAC. */
	n[12] = 'B';
	assert_int_equal(stun_nonce_check(nkey, sizeof(nkey), n, len, 7, 60, NULL, 0, &feat),
			 -EACCES);
	assert_int_equal(stun_nonce_features("abc", 3, &feat), -ENOENT);
	assert_int_equal(feat, 0);
	assert_int_equal(stun_nonce_make(nkey, sizeof(nkey), 7, 0x1000000, NULL, 0, n, sizeof(n),
					 &len),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_key_md5),        cmocka_unit_test(t_rest_mint_verify),
		cmocka_unit_test(t_rest_expiry),    cmocka_unit_test(t_nonce_ok_expired),
		cmocka_unit_test(t_nonce_tampered), cmocka_unit_test(t_nonce_cookie),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
