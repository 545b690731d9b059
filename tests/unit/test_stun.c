/* Unit tests of the STUN message codec: RFC vectors, every attribute, malformed input. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "stun/stun.h"
#include "stun/stun_auth.h"
#include "tests/unit/test_stun_vectors.h"

static const uint8_t tid0[STUN_TID_LEN] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };

static void assert_str_attr(const struct stun_msg *m, uint16_t type, const char *want)
{
	const char *s;
	size_t n;
	assert_int_equal(stun_msg_get_string(m, type, &s, &n), 0);
	assert_int_equal(n, strlen(want));
	assert_memory_equal(s, want, n);
}

static void assert_sin(const struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
	char buf[INET6_ADDRSTRLEN];
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;
		assert_non_null(inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf)));
		assert_int_equal(ntohs(sin->sin_port), port);
	} else {
		assert_int_equal(ss->ss_family, AF_INET6);
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;
		assert_non_null(inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof(buf)));
		assert_int_equal(ntohs(sin6->sin6_port), port);
	}
	assert_string_equal(buf, ip);
}

static void make_sa(struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (strchr(ip, ':')) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		assert_int_equal(inet_pton(AF_INET6, ip, &sin6->sin6_addr), 1);
	} else {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		assert_int_equal(inet_pton(AF_INET, ip, &sin->sin_addr), 1);
	}
}

/* ---- RFC vectors ---------------------------------------------------------------- */

static void t_rfc5769_request(void **state)
{
	struct stun_msg m;
	uint32_t prio;
	uint64_t tie;
	const uint8_t *pw = (const uint8_t *)RFC5769_SHORT_PASS;

	assert_int_equal(stun_msg_parse(&m, rfc5769_request, sizeof(rfc5769_request)), 0);
	assert_int_equal(m.method, STUN_BINDING);
	assert_int_equal(m.cls, STUN_REQUEST);
	assert_memory_equal(m.tid, rfc5769_request + 8, 12);
	assert_str_attr(&m, STUN_ATTR_SOFTWARE, "STUN test client");
	assert_str_attr(&m, STUN_ATTR_USERNAME, "evtj:h6vY");
	assert_int_equal(stun_msg_get_u32(&m, STUN_ATTR_PRIORITY, &prio), 0);
	assert_int_equal(prio, 0x6e0001ff);
	assert_int_equal(stun_msg_get_u64(&m, STUN_ATTR_ICE_CONTROLLED, &tie), 0);
	assert_true(tie == 0x932ff9b151263b36ull);
	assert_int_equal(stun_msg_unknown(&m, NULL), 0);
	assert_int_equal(stun_msg_check_integrity(&m, pw, strlen(RFC5769_SHORT_PASS)), 0);
	assert_int_equal(stun_msg_check_integrity(&m, pw, strlen(RFC5769_SHORT_PASS) - 1), -EACCES);
	assert_int_equal(stun_msg_check_integrity_sha256(&m, pw, 3), -ENOENT);
	assert_int_equal(stun_msg_check_fingerprint(&m), 0);
}

static void t_rfc5769_responses(void **state)
{
	struct stun_msg m;
	struct sockaddr_storage ss;
	const uint8_t *pw = (const uint8_t *)RFC5769_SHORT_PASS;

	assert_int_equal(stun_msg_parse(&m, rfc5769_ipv4_response, sizeof(rfc5769_ipv4_response)),
			 0);
	assert_int_equal(m.cls, STUN_SUCCESS);
	assert_int_equal(m.method, STUN_BINDING);
	assert_str_attr(&m, STUN_ATTR_SOFTWARE, "test vector");
	assert_int_equal(stun_msg_get_addr(&m, STUN_ATTR_XOR_MAPPED_ADDRESS, &ss), 0);
	assert_sin(&ss, "192.0.2.1", 32853);
	assert_int_equal(stun_msg_check_integrity(&m, pw, strlen(RFC5769_SHORT_PASS)), 0);
	assert_int_equal(stun_msg_check_fingerprint(&m), 0);

	assert_int_equal(stun_msg_parse(&m, rfc5769_ipv6_response, sizeof(rfc5769_ipv6_response)),
			 0);
	assert_int_equal(stun_msg_get_addr(&m, STUN_ATTR_XOR_MAPPED_ADDRESS, &ss), 0);
	assert_sin(&ss, "2001:db8:1234:5678:11:2233:4455:6677", 32853);
	assert_int_equal(stun_msg_check_integrity(&m, pw, strlen(RFC5769_SHORT_PASS)), 0);
	assert_int_equal(stun_msg_check_fingerprint(&m), 0);
	/* Not an address attribute type, and absent address attribute. */
	assert_int_equal(stun_msg_get_addr(&m, STUN_ATTR_SOFTWARE, &ss), -EINVAL);
	assert_int_equal(stun_msg_get_addr(&m, STUN_ATTR_MAPPED_ADDRESS, &ss), -ENOENT);
}

static void lt_key(uint16_t alg, uint8_t *key, size_t *key_len)
{
	assert_int_equal(stun_auth_key(alg, RFC5769_LT_USER, strlen(RFC5769_LT_USER), "example.org",
				       11, "TheMatrIX", 9, key, key_len),
			 0);
}

static void t_rfc5769_longterm(void **state)
{
	struct stun_msg m;
	uint8_t key[STUN_KEY_MAX], out[256];
	size_t key_len, len;

	lt_key(STUN_PWALG_MD5, key, &key_len);
	assert_int_equal(key_len, 16);
	assert_int_equal(stun_msg_parse(&m, rfc5769_longterm_request,
					sizeof(rfc5769_longterm_request)),
			 0);
	assert_str_attr(&m, STUN_ATTR_USERNAME, RFC5769_LT_USER);
	assert_str_attr(&m, STUN_ATTR_REALM, "example.org");
	assert_str_attr(&m, STUN_ATTR_NONCE, "f//499k954d6OL34oL9FSTvy64sA");
	assert_int_equal(stun_msg_check_integrity(&m, key, key_len), 0);
	assert_int_equal(stun_msg_check_fingerprint(&m), -ENOENT);
	key[0] ^= 1;
	assert_int_equal(stun_msg_check_integrity(&m, key, key_len), -EACCES);
	key[0] ^= 1;

	/* The builder reproduces the vector byte for byte (its padding is zeros). */
	struct stun_builder b;
	stun_build_init(&b, out, sizeof(out), STUN_BINDING, STUN_REQUEST, m.tid);
	stun_build_string(&b, STUN_ATTR_USERNAME, RFC5769_LT_USER);
	stun_build_string(&b, STUN_ATTR_NONCE, "f//499k954d6OL34oL9FSTvy64sA");
	stun_build_string(&b, STUN_ATTR_REALM, "example.org");
	stun_build_integrity(&b, key, key_len);
	assert_int_equal(stun_build_finish(&b, &len), 0);
	assert_int_equal(len, sizeof(rfc5769_longterm_request));
	assert_memory_equal(out, rfc5769_longterm_request, len);
}

static void t_rfc8489_b1(void **state)
{
	struct stun_msg m;
	uint8_t key[STUN_KEY_MAX], uh[32], out[256];
	const uint8_t *hash;
	size_t key_len, len;
	uint16_t alg;
	const char *nonce;
	size_t nonce_len;
	uint32_t feat;

	assert_int_equal(stun_msg_parse(&m, rfc8489_b1_request, sizeof(rfc8489_b1_request)), 0);
	assert_int_equal(stun_auth_userhash(RFC5769_LT_USER, strlen(RFC5769_LT_USER), "example.org",
					    11, uh),
			 0);
	assert_int_equal(stun_msg_get_userhash(&m, &hash), 0);
	assert_memory_equal(hash, uh, 32);
	assert_int_equal(stun_msg_get_password_algorithm(&m, &alg), 0);
	assert_int_equal(alg, STUN_PWALG_SHA256);
	assert_int_equal(stun_msg_get_string(&m, STUN_ATTR_NONCE, &nonce, &nonce_len), 0);
	assert_int_equal(stun_nonce_features(nonce, nonce_len, &feat), 0);
	assert_int_equal(feat, STUN_NONCE_FEAT_USERNAME_ANONYMITY);

	lt_key(STUN_PWALG_SHA256, key, &key_len);
	assert_int_equal(key_len, 32);
	assert_int_equal(stun_msg_check_integrity_sha256(&m, key, key_len), 0);
	assert_int_equal(stun_msg_check_integrity(&m, key, key_len), -ENOENT);
	lt_key(STUN_PWALG_MD5, key, &key_len);
	assert_int_equal(stun_msg_check_integrity_sha256(&m, key, key_len), -EACCES);

	lt_key(STUN_PWALG_SHA256, key, &key_len);
	struct stun_builder b;
	stun_build_init(&b, out, sizeof(out), STUN_BINDING, STUN_REQUEST, m.tid);
	stun_build_attr(&b, STUN_ATTR_USERHASH, uh, 32);
	stun_build_attr(&b, STUN_ATTR_NONCE, nonce, nonce_len);
	stun_build_string(&b, STUN_ATTR_REALM, "example.org");
	stun_build_password_algorithm(&b, STUN_PWALG_SHA256);
	stun_build_integrity_sha256(&b, key, key_len);
	assert_int_equal(stun_build_finish(&b, &len), 0);
	assert_int_equal(len, sizeof(rfc8489_b1_request));
	assert_memory_equal(out, rfc8489_b1_request, len);
}

/* ---- Message types and reasons --------------------------------------------------- */

static void t_types(void **state)
{
	assert_int_equal(stun_type_make(STUN_BINDING, STUN_REQUEST), 0x0001);
	assert_int_equal(stun_type_make(STUN_BINDING, STUN_SUCCESS), 0x0101);
	assert_int_equal(stun_type_make(STUN_ALLOCATE, STUN_ERROR), 0x0113);
	assert_int_equal(stun_type_make(STUN_SEND, STUN_INDICATION), 0x0016);
	assert_int_equal(stun_type_make(STUN_DATA, STUN_INDICATION), 0x0017);
	assert_int_equal(stun_type_make(STUN_CONNECTION_ATTEMPT, STUN_INDICATION), 0x001c);
	static const uint16_t methods[] = { STUN_BINDING,
					    STUN_ALLOCATE,
					    STUN_REFRESH,
					    STUN_SEND,
					    STUN_DATA,
					    STUN_CREATE_PERMISSION,
					    STUN_CHANNEL_BIND,
					    STUN_CONNECT,
					    STUN_CONNECTION_BIND,
					    STUN_CONNECTION_ATTEMPT,
					    0xFFF };
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
		for (uint8_t c = 0; c < 4; c++) {
			uint16_t t = stun_type_make(methods[i], c);
			assert_int_equal(stun_type_method(t), methods[i]);
			assert_int_equal(stun_type_class(t), c);
			assert_int_equal(t & 0xC000, 0);
		}
		if (methods[i] != 0xFFF)
			assert_string_not_equal(stun_method_name(methods[i]), "unknown-method");
	}
	assert_string_equal(stun_attr_name(STUN_ATTR_XOR_PEER_ADDRESS), "XOR-PEER-ADDRESS");
	assert_string_equal(stun_class_name(STUN_ERROR), "error response");
}

static void t_reasons(void **state)
{
	static const int codes[] = { 300, 400, 401, 403, 420, 437, 438, 440,
				     441, 442, 443, 446, 447, 486, 500, 508 };
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		assert_string_not_equal(stun_error_reason(codes[i]), "Error");
	assert_string_equal(stun_error_reason(438), "Stale Nonce");
	assert_string_equal(stun_error_reason(599), "Error");
}

/* ---- Round trip of every attribute ------------------------------------------------ */

static size_t build_all(uint8_t *buf, size_t cap)
{
	struct stun_builder b;
	struct sockaddr_storage a4, a6, p1, p2;
	static const uint16_t unk[] = { 0x0777, 0x0031 };
	static const uint16_t algs[] = { STUN_PWALG_SHA256, STUN_PWALG_MD5 };
	uint8_t uh[32];
	size_t len;

	memset(uh, 0xAB, sizeof(uh));
	make_sa(&a4, "198.51.100.7", 4000);
	make_sa(&a6, "2001:db8::1", 65535);
	make_sa(&p1, "10.0.0.1", 1);
	make_sa(&p2, "fe80::abcd", 5000);
	stun_build_init(&b, buf, cap, STUN_ALLOCATE, STUN_SUCCESS, tid0);
	stun_build_addr(&b, STUN_ATTR_MAPPED_ADDRESS, (struct sockaddr *)&a4);
	stun_build_addr(&b, STUN_ATTR_XOR_MAPPED_ADDRESS, (struct sockaddr *)&a6);
	stun_build_addr(&b, STUN_ATTR_XOR_RELAYED_ADDRESS, (struct sockaddr *)&a4);
	stun_build_addr(&b, STUN_ATTR_XOR_PEER_ADDRESS, (struct sockaddr *)&p1);
	stun_build_addr(&b, STUN_ATTR_XOR_PEER_ADDRESS, (struct sockaddr *)&p2);
	stun_build_addr(&b, STUN_ATTR_ALTERNATE_SERVER, (struct sockaddr *)&a6);
	stun_build_string(&b, STUN_ATTR_USERNAME, "1700000000:alice");
	stun_build_attr(&b, STUN_ATTR_USERHASH, uh, sizeof(uh));
	stun_build_error_code(&b, 420, NULL);
	stun_build_unknown_attributes(&b, unk, 2);
	stun_build_string(&b, STUN_ATTR_REALM, "turngate.test");
	stun_build_string(&b, STUN_ATTR_NONCE, "abcdef");
	stun_build_password_algorithms(&b, algs, 2);
	stun_build_password_algorithm(&b, STUN_PWALG_SHA256);
	stun_build_string(&b, STUN_ATTR_SOFTWARE, "turngate");
	stun_build_string(&b, STUN_ATTR_ALTERNATE_DOMAIN, "turn.example.org");
	stun_build_channel(&b, 0x4001);
	stun_build_lifetime(&b, 600);
	stun_build_attr(&b, STUN_ATTR_DATA, "hello", 5);
	stun_build_even_port(&b, true);
	stun_build_requested_transport(&b, STUN_TRANSPORT_UDP);
	stun_build_flag(&b, STUN_ATTR_DONT_FRAGMENT);
	stun_build_reservation_token(&b, 0x0102030405060708ull);
	stun_build_family(&b, STUN_ATTR_REQUESTED_ADDRESS_FAMILY, AF_INET6);
	stun_build_family(&b, STUN_ATTR_ADDITIONAL_ADDRESS_FAMILY, AF_INET6);
	stun_build_address_error(&b, AF_INET6, 440, NULL);
	stun_build_icmp(&b, 3, 1, 0xdeadbeef);
	stun_build_connection_id(&b, 0xcafe);
	stun_build_integrity(&b, (const uint8_t *)"k", 1);
	stun_build_integrity_sha256(&b, (const uint8_t *)"k", 1);
	stun_build_fingerprint(&b);
	assert_int_equal(stun_build_finish(&b, &len), 0);
	return len;
}

static void t_roundtrip_all(void **state)
{
	uint8_t buf[1024];
	struct stun_msg m;
	struct sockaddr_storage ss;
	uint32_t u32;
	uint64_t u64;
	uint16_t ch, alg, algs[4], types[4];
	uint8_t proto, it, ic;
	int af, code;
	bool r;
	size_t n, rl;
	const char *reason;
	const uint8_t *raw;

	size_t len = build_all(buf, sizeof(buf));
	assert_int_equal(stun_msg_parse(&m, buf, len), 0);
	assert_int_equal(m.method, STUN_ALLOCATE);
	assert_int_equal(m.cls, STUN_SUCCESS);
	assert_int_equal(stun_msg_get_addr(&m, STUN_ATTR_MAPPED_ADDRESS, &ss), 0);
	assert_sin(&ss, "198.51.100.7", 4000);
	assert_int_equal(stun_msg_get_addr(&m, STUN_ATTR_XOR_MAPPED_ADDRESS, &ss), 0);
	assert_sin(&ss, "2001:db8::1", 65535);
	assert_int_equal(stun_msg_get_addr(&m, STUN_ATTR_XOR_RELAYED_ADDRESS, &ss), 0);
	assert_sin(&ss, "198.51.100.7", 4000);
	assert_int_equal(stun_msg_get_addr(&m, STUN_ATTR_ALTERNATE_SERVER, &ss), 0);
	assert_sin(&ss, "2001:db8::1", 65535);
	assert_int_equal(stun_msg_peer_count(&m), 2);
	assert_int_equal(stun_msg_get_addr(&m, STUN_ATTR_XOR_PEER_ADDRESS, &ss), 0);
	assert_sin(&ss, "10.0.0.1", 1);
	assert_int_equal(stun_msg_get_peer(&m, 1, &ss), 0);
	assert_sin(&ss, "fe80::abcd", 5000);
	assert_int_equal(stun_msg_get_peer(&m, 2, &ss), -ENOENT);
	assert_int_equal(stun_msg_get_addr_nth(&m, STUN_ATTR_XOR_PEER_ADDRESS, 1, &ss), 0);
	assert_sin(&ss, "fe80::abcd", 5000);
	assert_int_equal(stun_msg_get_addr_nth(&m, STUN_ATTR_XOR_PEER_ADDRESS, 2, &ss), -ENOENT);
	assert_int_equal(stun_msg_get_addr_nth(&m, STUN_ATTR_XOR_RELAYED_ADDRESS, 0, &ss), 0);
	assert_sin(&ss, "198.51.100.7", 4000);
	assert_str_attr(&m, STUN_ATTR_USERNAME, "1700000000:alice");
	assert_int_equal(stun_msg_get_userhash(&m, &raw), 0);
	assert_int_equal(raw[31], 0xAB);
	assert_int_equal(stun_msg_get_error(&m, &code, &reason, &rl), 0);
	assert_int_equal(code, 420);
	assert_int_equal(rl, strlen("Unknown Attribute"));
	assert_memory_equal(reason, "Unknown Attribute", rl);
	assert_int_equal(stun_msg_get_unknown_attributes(&m, types, 4, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(types[0], 0x0777);
	assert_int_equal(types[1], 0x0031);
	assert_str_attr(&m, STUN_ATTR_REALM, "turngate.test");
	assert_str_attr(&m, STUN_ATTR_NONCE, "abcdef");
	assert_int_equal(stun_msg_get_password_algorithms(&m, algs, 4, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(algs[0], STUN_PWALG_SHA256);
	assert_int_equal(algs[1], STUN_PWALG_MD5);
	assert_int_equal(stun_msg_get_password_algorithm(&m, &alg), 0);
	assert_int_equal(alg, STUN_PWALG_SHA256);
	assert_str_attr(&m, STUN_ATTR_SOFTWARE, "turngate");
	assert_str_attr(&m, STUN_ATTR_ALTERNATE_DOMAIN, "turn.example.org");
	assert_int_equal(stun_msg_get_channel(&m, STUN_CHAN_RFC8656, &ch), 0);
	assert_int_equal(ch, 0x4001);
	assert_int_equal(stun_msg_get_lifetime(&m, &u32), 0);
	assert_int_equal(u32, 600);
	assert_int_equal(stun_msg_get_raw(&m, STUN_ATTR_DATA, &raw, &n), 0);
	assert_int_equal(n, 5);
	assert_memory_equal(raw, "hello", 5);
	assert_int_equal(stun_msg_get_even_port(&m, &r), 0);
	assert_true(r);
	assert_int_equal(stun_msg_get_requested_transport(&m, &proto), 0);
	assert_int_equal(proto, 17);
	assert_true(stun_msg_has(&m, STUN_ATTR_DONT_FRAGMENT));
	assert_int_equal(stun_msg_get_reservation_token(&m, &u64), 0);
	assert_true(u64 == 0x0102030405060708ull);
	assert_int_equal(stun_msg_get_family(&m, STUN_ATTR_REQUESTED_ADDRESS_FAMILY, &af), 0);
	assert_int_equal(af, AF_INET6);
	assert_int_equal(stun_msg_get_family(&m, STUN_ATTR_ADDITIONAL_ADDRESS_FAMILY, &af), 0);
	assert_int_equal(af, AF_INET6);
	assert_int_equal(stun_msg_get_address_error(&m, &af, &code, &reason, &rl), 0);
	assert_int_equal(af, AF_INET6);
	assert_int_equal(code, 440);
	assert_int_equal(stun_msg_get_icmp(&m, &it, &ic, &u32), 0);
	assert_int_equal(it, 3);
	assert_int_equal(ic, 1);
	assert_int_equal(u32, 0xdeadbeef);
	assert_int_equal(stun_msg_get_connection_id(&m, &u32), 0);
	assert_int_equal(u32, 0xcafe);
	assert_int_equal(stun_msg_check_integrity(&m, (const uint8_t *)"k", 1), 0);
	assert_int_equal(stun_msg_check_integrity_sha256(&m, (const uint8_t *)"k", 1), 0);
	assert_int_equal(stun_msg_check_integrity_sha256(&m, (const uint8_t *)"x", 1), -EACCES);
	assert_int_equal(stun_msg_check_fingerprint(&m), 0);
	assert_false(stun_msg_has(&m, STUN_ATTR_PRIORITY));
	assert_int_equal(stun_msg_get_u32(&m, STUN_ATTR_PRIORITY, &u32), -ENOENT);
	assert_int_equal(stun_msg_get_raw(&m, 0x7777, &raw, &n), -EINVAL);
}

static void t_error_response(void **state)
{
	uint8_t req[128], rsp[512];
	struct stun_builder b;
	struct stun_msg mreq, m;
	size_t len, n;
	int code;
	uint16_t types[4];
	static const uint16_t unk[] = { 0x0777 };

	stun_build_init(&b, req, sizeof(req), STUN_ALLOCATE, STUN_REQUEST, tid0);
	stun_build_u32(&b, 0x0777, 1);
	assert_int_equal(stun_build_finish(&b, &len), 0);
	assert_int_equal(stun_msg_parse(&mreq, req, len), 0);
	assert_int_equal(stun_msg_unknown(&mreq, NULL), 1);

	struct stun_error_opts o = { .unknown = unk,
				     .n_unknown = 1,
				     .realm = "r",
				     .nonce = "n",
				     .software = "tg",
				     .fingerprint = true };
	assert_int_equal(stun_build_error_response(rsp, sizeof(rsp), &mreq, 420, &o, &len), 0);
	assert_int_equal(stun_msg_parse(&m, rsp, len), 0);
	assert_int_equal(m.cls, STUN_ERROR);
	assert_int_equal(m.method, STUN_ALLOCATE);
	assert_memory_equal(m.tid, tid0, 12);
	assert_int_equal(stun_msg_get_error(&m, &code, NULL, NULL), 0);
	assert_int_equal(code, 420);
	assert_int_equal(stun_msg_get_unknown_attributes(&m, types, 4, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(types[0], 0x0777);
	assert_str_attr(&m, STUN_ATTR_REALM, "r");
	assert_str_attr(&m, STUN_ATTR_NONCE, "n");
	assert_int_equal(stun_msg_check_fingerprint(&m), 0);
	/* Too small a buffer, and indications never get a response. */
	assert_int_equal(stun_build_error_response(rsp, 30, &mreq, 400, NULL, &len), -ENOBUFS);
	mreq.cls = STUN_INDICATION;
	assert_int_equal(stun_build_error_response(rsp, sizeof(rsp), &mreq, 400, NULL, &len),
			 -EINVAL);
}

static void t_builder_errors(void **state)
{
	uint8_t buf[64];
	struct stun_builder b;
	size_t len;
	struct sockaddr_storage ss;

	stun_build_init(&b, buf, 10, STUN_BINDING, STUN_REQUEST, tid0);
	assert_int_equal(stun_build_finish(&b, &len), -ENOBUFS);

	stun_build_init(&b, buf, sizeof(buf), STUN_BINDING, STUN_REQUEST, tid0);
	stun_build_attr(&b, STUN_ATTR_DATA, buf, 60);
	assert_int_equal(stun_build_finish(&b, &len), -ENOBUFS);
	stun_build_lifetime(&b, 1);	/* sticky: stays -ENOBUFS */
	assert_int_equal(stun_build_finish(&b, &len), -ENOBUFS);

	stun_build_init(&b, buf, sizeof(buf), STUN_BINDING, STUN_REQUEST, tid0);
	stun_build_integrity(&b, (const uint8_t *)"k", 1);
	stun_build_lifetime(&b, 1);
	assert_int_equal(stun_build_finish(&b, &len), -EINVAL);

	stun_build_init(&b, buf, sizeof(buf), STUN_BINDING, STUN_REQUEST, tid0);
	stun_build_fingerprint(&b);
	stun_build_integrity(&b, (const uint8_t *)"k", 1);
	assert_int_equal(stun_build_finish(&b, &len), -EINVAL);

	stun_build_init(&b, buf, sizeof(buf), STUN_BINDING, STUN_REQUEST, tid0);
	memset(&ss, 0, sizeof(ss));
	ss.ss_family = AF_UNIX;
	stun_build_addr(&b, STUN_ATTR_XOR_PEER_ADDRESS, (struct sockaddr *)&ss);
	assert_int_equal(stun_build_finish(&b, &len), -EAFNOSUPPORT);

	stun_build_init(&b, buf, sizeof(buf), STUN_BINDING, STUN_REQUEST, tid0);
	stun_build_error_code(&b, 200, NULL);
	assert_int_equal(stun_build_finish(&b, &len), -EINVAL);
}

/* ---- Malformed input --------------------------------------------------------------- */

/* A message with the given attribute bytes appended raw (no padding added). */
static size_t raw_msg(uint8_t *buf, const uint8_t *attrs, size_t n, uint16_t hdr_len)
{
	memcpy(buf, rfc5769_ipv4_response, 20);
	buf[0] = 0x00;
	buf[1] = 0x01;
	buf[2] = (uint8_t)(hdr_len >> 8);
	buf[3] = (uint8_t)hdr_len;
	memcpy(buf + 20, attrs, n);
	return 20 + n;
}

/* Fixed-size attributes of another length parse (the message is well formed) but are
 * malformed attributes: stun_msg_check_sizes names the first (the daemon answers 400). */
static void t_fixed_sizes(void **state)
{
	struct stun_msg m;
	uint8_t buf[1024];
	uint16_t bad = 0;
	size_t n, len;

	(void)state;
	len = build_all(buf, sizeof(buf));
	assert_int_equal(stun_msg_parse(&m, buf, len), 0);
	assert_int_equal(stun_msg_check_sizes(&m, &bad), 0);
	static const uint8_t life0[] = {
		0x00, 0x0d, 0x00, 0x00, 0x00, 0x19, 0x00, 0x04, 17, 0, 0, 0
	};
	n = raw_msg(buf, life0, sizeof(life0), sizeof(life0));
	assert_int_equal(stun_msg_parse(&m, buf, n), 0);
	assert_int_equal(stun_msg_check_sizes(&m, &bad), -EBADMSG);
	assert_int_equal(bad, STUN_ATTR_LIFETIME);
	static const uint8_t df4[] = { 0x00, 0x1a, 0x00, 0x04, 0, 0, 0, 0 };
	n = raw_msg(buf, df4, sizeof(df4), sizeof(df4));
	assert_int_equal(stun_msg_parse(&m, buf, n), 0);
	assert_int_equal(stun_msg_check_sizes(&m, NULL), -EBADMSG);
	static const uint8_t even1[] = { 0x00, 0x18, 0x00, 0x01, 0x80, 0, 0, 0 };
	n = raw_msg(buf, even1, sizeof(even1), sizeof(even1));
	assert_int_equal(stun_msg_parse(&m, buf, n), 0);
	assert_int_equal(stun_msg_check_sizes(&m, &bad), 0);
	assert_int_equal(stun_msg_check_sizes(NULL, &bad), -EINVAL);
}

static void t_bad_header(void **state)
{
	struct stun_msg m;
	uint8_t buf[256];

	memcpy(buf, rfc5769_request, sizeof(rfc5769_request));
	/* truncated header */
	assert_int_equal(stun_msg_parse(&m, buf, 19), -EBADMSG);
	assert_int_equal(stun_msg_parse(&m, buf, 0), -EBADMSG);
	/* buffer shorter / longer than the length field says */
	assert_int_equal(stun_msg_parse(&m, buf, sizeof(rfc5769_request) - 4), -EBADMSG);
	assert_int_equal(stun_msg_parse(&m, buf, sizeof(rfc5769_request) + 4), -EBADMSG);
	/* length not a multiple of 4 */
	buf[3] = 0x57;
	assert_int_equal(stun_msg_parse(&m, buf, 20 + 0x57), -EBADMSG);
	buf[3] = 0x58;
	/* length beyond the buffer */
	buf[2] = 0x01;
	assert_int_equal(stun_msg_parse(&m, buf, sizeof(rfc5769_request)), -EBADMSG);
	buf[2] = 0x00;
	/* bad magic cookie */
	buf[4] ^= 0xFF;
	assert_int_equal(stun_msg_parse(&m, buf, sizeof(rfc5769_request)), -ENOMSG);
	assert_false(stun_is_stun(buf, sizeof(rfc5769_request)));
	buf[4] ^= 0xFF;
	assert_true(stun_is_stun(buf, sizeof(rfc5769_request)));
	/* top bits set (ChannelData / other protocol) */
	buf[0] = 0x40;
	assert_int_equal(stun_msg_parse(&m, buf, sizeof(rfc5769_request)), -ENOMSG);
	assert_int_equal(stun_msg_parse(NULL, buf, 20), -EINVAL);
}

static void t_bad_attrs(void **state)
{
	struct stun_msg m;
	uint8_t buf[256];
	size_t n;

	/* attribute length overflowing the message */
	static const uint8_t over[] = { 0x80, 0x22, 0x00, 0x64, 'a', 'b', 'c', 'd' };
	n = raw_msg(buf, over, sizeof(over), sizeof(over));
	assert_int_equal(stun_msg_parse(&m, buf, n), -EBADMSG);
	/* truncated attribute header */
	static const uint8_t half[] = { 0x80, 0x22, 0x00, 0x00, 0x00, 0x0d, 0x00, 0x04 };
	n = raw_msg(buf, half, sizeof(half), sizeof(half));
	assert_int_equal(stun_msg_parse(&m, buf, n), -EBADMSG);
	/* odd-aligned: second attribute written without the first one's padding */
	static const uint8_t odd[] = { 0x80, 0x22, 0x00, 0x01, 'a', 0x80, 0x22, 0x00,
				       0x07, 'a',  'b',  'c',  'd', 'e',  'f',  'g' };
	n = raw_msg(buf, odd, sizeof(odd), sizeof(odd));
	assert_int_equal(stun_msg_parse(&m, buf, n), -EBADMSG);
	/* padding present but value length odd: fine */
	static const uint8_t padded[] = { 0x80, 0x22, 0x00, 0x01, 'a', 0, 0, 0 };
	n = raw_msg(buf, padded, sizeof(padded), sizeof(padded));
	assert_int_equal(stun_msg_parse(&m, buf, n), 0);
	assert_str_attr(&m, STUN_ATTR_SOFTWARE, "a");
	/* integrity of wrong size */
	static const uint8_t mi16[20] = { 0x00, 0x08, 0x00, 0x10 };
	n = raw_msg(buf, mi16, sizeof(mi16), sizeof(mi16));
	assert_int_equal(stun_msg_parse(&m, buf, n), -EBADMSG);
	static const uint8_t mi256_12[16] = { 0x00, 0x1c, 0x00, 0x0c };
	n = raw_msg(buf, mi256_12, sizeof(mi256_12), sizeof(mi256_12));
	assert_int_equal(stun_msg_parse(&m, buf, n), -EBADMSG);
	static const uint8_t fp8[12] = { 0x80, 0x28, 0x00, 0x08 };
	n = raw_msg(buf, fp8, sizeof(fp8), sizeof(fp8));
	assert_int_equal(stun_msg_parse(&m, buf, n), -EBADMSG);
	/* something after FINGERPRINT */
	static const uint8_t after_fp[16] = { 0x80, 0x28, 0x00, 0x04, 0,    0,
					      0,    0,    0x00, 0x0d, 0x00, 0x04 };
	n = raw_msg(buf, after_fp, sizeof(after_fp), sizeof(after_fp));
	assert_int_equal(stun_msg_parse(&m, buf, n), -EBADMSG);
	/* malformed values are caught by the getters */
	static const uint8_t bad_vals[] = {
		0x00, 0x0d, 0x00, 0x02, 0,    0,    0,   0,             /* LIFETIME of 2 bytes */
		0x00, 0x20, 0x00, 0x08, 0,    0x03, 0,   0, 1, 2, 3, 4, /* XOR-MAPPED family 3 */
		0x00, 0x0c, 0x00, 0x04, 0x30, 0x00, 0,   0,             /* CHANNEL-NUMBER 0x3000 */
		0x00, 0x09, 0x00, 0x04, 0,    0,    7,   0,             /* ERROR-CODE class 7 */
		0x00, 0x17, 0x00, 0x04, 0x03, 0,    0,   0, /* REQUESTED-ADDRESS-FAMILY 3 */
		0x00, 0x06, 0x00, 0x03, 'a',  0,    'b', 0, /* USERNAME with a NUL */
		0x00, 0x12, 0x00, 0x14, 0,    0x01, 0,   0, 1, 2, 3, 4, 1,
		2,    3,    4,    1,    2,    3,    4,   1, 2, 3, 4, /* IPv4 peer with 16 bytes */
	};
	uint32_t u32;
	uint16_t ch;
	int code, af;
	struct sockaddr_storage ss;
	const char *s;
	size_t sl;
	n = raw_msg(buf, bad_vals, sizeof(bad_vals), sizeof(bad_vals));
	assert_int_equal(stun_msg_parse(&m, buf, n), 0);
	assert_int_equal(stun_msg_get_lifetime(&m, &u32), -EBADMSG);
	assert_int_equal(stun_msg_get_addr(&m, STUN_ATTR_XOR_MAPPED_ADDRESS, &ss), -EBADMSG);
	assert_int_equal(stun_msg_get_channel(&m, STUN_CHAN_RFC8656, &ch), -EBADMSG);
	assert_int_equal(stun_msg_get_error(&m, &code, NULL, NULL), -EBADMSG);
	assert_int_equal(stun_msg_get_family(&m, STUN_ATTR_REQUESTED_ADDRESS_FAMILY, &af),
			 -EAFNOSUPPORT);
	assert_int_equal(stun_msg_get_string(&m, STUN_ATTR_USERNAME, &s, &sl), -EBADMSG);
	assert_int_equal(stun_msg_get_peer(&m, 0, &ss), -EBADMSG);
}

static void t_length_limits(void **state)
{
	static uint8_t big[STUN_MAX_MSG_LEN + 8];
	struct stun_builder b;
	struct stun_msg m;
	size_t len;
	const uint8_t *raw;
	size_t n;

	/* The largest legal message: length field 65532. */
	stun_build_init(&b, big, sizeof(big), STUN_SEND, STUN_INDICATION, tid0);
	stun_build_attr(&b, STUN_ATTR_DATA, NULL, 0);
	assert_int_equal(stun_build_finish(&b, &len), 0);
	stun_build_init(&b, big, sizeof(big), STUN_SEND, STUN_INDICATION, tid0);
	memset(big + 24, 'x', 65528);
	stun_build_attr(&b, STUN_ATTR_DATA, big + 24, 65528);
	assert_int_equal(stun_build_finish(&b, &len), 0);
	assert_int_equal(len, STUN_MAX_MSG_LEN);
	assert_int_equal(stun_msg_parse(&m, big, len), 0);
	assert_int_equal(stun_msg_get_raw(&m, STUN_ATTR_DATA, &raw, &n), 0);
	assert_int_equal(n, 65528);
	/* One more attribute does not fit in 16 bits. */
	stun_build_lifetime(&b, 1);
	assert_int_equal(stun_build_finish(&b, &len), -ENOBUFS);
	/* Length field 65535 is not a multiple of 4; an attribute of 65535 overflows. */
	big[2] = 0xFF;
	big[3] = 0xFF;
	assert_int_equal(stun_msg_parse(&m, big, 20 + 65535), -EBADMSG);
	big[2] = 0xFF;
	big[3] = 0xFC;
	big[22] = 0xFF;
	big[23] = 0xFF;
	assert_int_equal(stun_msg_parse(&m, big, 20 + 65532), -EBADMSG);
}

static void t_after_integrity(void **state)
{
	uint8_t buf[256];
	struct stun_builder b;
	struct stun_msg m;
	size_t len;
	uint32_t u32;
	const uint8_t key[] = "secret";

	stun_build_init(&b, buf, sizeof(buf), STUN_REFRESH, STUN_REQUEST, tid0);
	stun_build_lifetime(&b, 100);
	stun_build_integrity(&b, key, 6);
	assert_int_equal(stun_build_finish(&b, &len), 0);
	/* Append LIFETIME, an unknown comprehension-required attribute and a second,
	 * wrongly sized MI by hand after MESSAGE-INTEGRITY: all must be ignored. */
	static const uint8_t tail[] = { 0x00, 0x0d, 0x00, 0x04, 0,    0,    0, 1, 0x07, 0x77,
					0x00, 0x00, 0x00, 0x08, 0x00, 0x04, 0, 0, 0,    0 };
	memcpy(buf + len, tail, sizeof(tail));
	len += sizeof(tail);
	buf[2] = (uint8_t)((len - 20) >> 8);
	buf[3] = (uint8_t)(len - 20);
	assert_int_equal(stun_msg_parse(&m, buf, len), 0);
	assert_int_equal(stun_msg_get_lifetime(&m, &u32), 0);
	assert_int_equal(u32, 100);
	assert_int_equal(stun_msg_unknown(&m, NULL), 0);
	/* MI covers only what precedes it, so it still verifies. */
	assert_int_equal(stun_msg_check_integrity(&m, key, 6), 0);
}

static void t_sha256_truncated_and_after(void **state)
{
	uint8_t buf[256];
	struct stun_builder b;
	struct stun_msg m;
	size_t len;
	uint32_t u32;
	const uint8_t key[] = "k256";

	stun_build_init(&b, buf, sizeof(buf), STUN_REFRESH, STUN_REQUEST, tid0);
	stun_build_lifetime(&b, 5);
	stun_build_integrity_sha256_len(&b, key, 4, 16);
	assert_int_equal(stun_build_finish(&b, &len), 0);
	assert_int_equal(len, 20 + 8 + 20);
	/* After MESSAGE-INTEGRITY-SHA256: a second LIFETIME and an MI are ignored. */
	static const uint8_t tail[] = { 0x00, 0x0d, 0x00, 0x04, 0,  0,  0,  9,  0x00, 0x08, 0x00,
					0x14, 1,    2,    3,    4,  5,  6,  7,  8,    9,    10,
					11,   12,   13,   14,   15, 16, 17, 18, 19,   20 };
	memcpy(buf + len, tail, sizeof(tail));
	len += sizeof(tail);
	buf[2] = (uint8_t)((len - 20) >> 8);
	buf[3] = (uint8_t)(len - 20);
	assert_int_equal(stun_msg_parse(&m, buf, len), 0);
	assert_int_equal(stun_msg_get_lifetime(&m, &u32), 0);
	assert_int_equal(u32, 5);
	assert_false(stun_msg_has(&m, STUN_ATTR_MESSAGE_INTEGRITY));
	assert_int_equal(stun_msg_check_integrity_sha256(&m, key, 4), 0);
	assert_int_equal(stun_msg_check_integrity_sha256(&m, key, 3), -EACCES);
	assert_int_equal(m.fp_off, 0);
	/* Bad truncation lengths are refused by the builder. */
	stun_build_init(&b, buf, sizeof(buf), STUN_REFRESH, STUN_REQUEST, tid0);
	stun_build_integrity_sha256_len(&b, key, 4, 18);
	assert_int_equal(stun_build_finish(&b, &len), -EINVAL);
}

static void t_duplicates_unknown_peers(void **state)
{
	uint8_t buf[1024];
	struct stun_builder b;
	struct stun_msg m;
	size_t len;
	uint32_t u32;
	struct sockaddr_storage p, out;
	const uint16_t *unk;

	stun_build_init(&b, buf, sizeof(buf), STUN_CREATE_PERMISSION, STUN_REQUEST, tid0);
	stun_build_lifetime(&b, 1);
	stun_build_lifetime(&b, 2);
	stun_build_u32(&b, 0x0777, 0);
	stun_build_u32(&b, 0x8777, 0);	/* optional: never reported */
	stun_build_u32(&b, 0x7fff, 0);
	stun_build_u32(&b, 0x0777, 0);	/* reported once */
	for (int i = 0; i < STUN_MAX_PEERS + 3; i++) {
		make_sa(&p, "192.0.2.9", (uint16_t)(1000 + i));
		stun_build_addr(&b, STUN_ATTR_XOR_PEER_ADDRESS, (struct sockaddr *)&p);
	}
	assert_int_equal(stun_build_finish(&b, &len), 0);
	assert_int_equal(stun_msg_parse(&m, buf, len), 0);
	assert_int_equal(stun_msg_get_lifetime(&m, &u32), 0);
	assert_int_equal(u32, 1);
	assert_int_equal(stun_msg_unknown(&m, &unk), 2);
	assert_int_equal(unk[0], 0x0777);
	assert_int_equal(unk[1], 0x7fff);
	assert_int_equal(stun_msg_peer_count(&m), STUN_MAX_PEERS);
	assert_true(m.peers_truncated);
	assert_int_equal(stun_msg_get_peer(&m, STUN_MAX_PEERS - 1, &out), 0);
	assert_sin(&out, "192.0.2.9", 1000 + STUN_MAX_PEERS - 1);
}

static void t_bad_fingerprint(void **state)
{
	uint8_t buf[sizeof(rfc5769_request)];
	struct stun_msg m;

	memcpy(buf, rfc5769_request, sizeof(buf));
	buf[sizeof(buf) - 1] ^= 1;
	assert_int_equal(stun_msg_parse(&m, buf, sizeof(buf)), 0);
	assert_int_equal(stun_msg_check_fingerprint(&m), -EBADMSG);
	/* A changed byte inside the covered region also fails, and fails integrity. */
	memcpy(buf, rfc5769_request, sizeof(buf));
	buf[30] ^= 1;
	assert_int_equal(stun_msg_parse(&m, buf, sizeof(buf)), 0);
	assert_int_equal(stun_msg_check_fingerprint(&m), -EBADMSG);
	assert_int_equal(stun_msg_check_integrity(&m, (const uint8_t *)RFC5769_SHORT_PASS,
						  strlen(RFC5769_SHORT_PASS)),
			 -EACCES);
}

static void t_tid_random(void **state)
{
	uint8_t a[STUN_TID_LEN], b[STUN_TID_LEN];
	assert_int_equal(stun_tid_random(a), 0);
	assert_int_equal(stun_tid_random(b), 0);
	assert_memory_not_equal(a, b, STUN_TID_LEN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_rfc5769_request),
		cmocka_unit_test(t_rfc5769_responses),
		cmocka_unit_test(t_rfc5769_longterm),
		cmocka_unit_test(t_rfc8489_b1),
		cmocka_unit_test(t_types),
		cmocka_unit_test(t_reasons),
		cmocka_unit_test(t_roundtrip_all),
		cmocka_unit_test(t_error_response),
		cmocka_unit_test(t_builder_errors),
		cmocka_unit_test(t_bad_header),
		cmocka_unit_test(t_bad_attrs),
		cmocka_unit_test(t_fixed_sizes),
		cmocka_unit_test(t_length_limits),
		cmocka_unit_test(t_after_integrity),
		cmocka_unit_test(t_sha256_truncated_and_after),
		cmocka_unit_test(t_duplicates_unknown_peers),
		cmocka_unit_test(t_bad_fingerprint),
		cmocka_unit_test(t_tid_random),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
