/* Unit tests of the PROXY protocol header parser (stun/proxyproto.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "stun/proxyproto.h"

#define BOTH (PROXYPROTO_V1 | PROXYPROTO_V2)

static const uint8_t sig[12] = { 0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
				 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A };

static int parse_str(const char *s, unsigned vers, struct proxyproto_hdr *h)
{
	return proxyproto_parse((const uint8_t *)s, strlen(s), vers, h);
}

static void assert_v4(const struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
	char txt[INET_ADDRSTRLEN];

	assert_int_equal(ss->ss_family, AF_INET);
	assert_non_null(inet_ntop(AF_INET, &s4->sin_addr, txt, sizeof(txt)));
	assert_string_equal(txt, ip);
	assert_int_equal(ntohs(s4->sin_port), port);
}

static void t_v1_tcp4(void **state)
{
	const char *s = "PROXY TCP4 127.0.0.5 127.0.0.1 40000 3478\r\nSTUN";
	struct proxyproto_hdr h;
	int n = (int)strlen(s) - 4;

	(void)state;
	assert_int_equal(parse_str(s, BOTH, &h), n);
	assert_int_equal(h.version, 1);
	assert_false(h.local);
	assert_v4(&h.src, "127.0.0.5", 40000);
	assert_v4(&h.dst, "127.0.0.1", 3478);
	/* Every prefix is incomplete: a stream reader may consume it and read on. */
	for (int k = 0; k < n; k++)
		assert_int_equal(proxyproto_parse((const uint8_t *)s, (size_t)k, BOTH, NULL),
				 -EAGAIN);
	assert_int_equal(parse_str(s, PROXYPROTO_V2, &h), -EPROTONOSUPPORT);
}

static void t_v1_tcp6_unknown(void **state)
{
	struct proxyproto_hdr h;

	(void)state;
	assert_int_equal(parse_str("PROXY TCP6 ::1 2001:db8::1 1 65535\r\n", BOTH, &h), 36);
	assert_int_equal(h.src.ss_family, AF_INET6);
	assert_int_equal(ntohs(((struct sockaddr_in6 *)&h.dst)->sin6_port), 65535);
	assert_int_equal(parse_str("PROXY UNKNOWN\r\n", BOTH, &h), 15);
	assert_true(h.local);
	assert_int_equal(parse_str("PROXY UNKNOWN ff 1.2.3.4 x y\r\n", BOTH, &h), 30);
	assert_true(h.local);
}

static void t_v1_malformed(void **state)
{
	static const char *const bad[] = {
		"PROXY TCP4 127.0.0.5 127.0.0.1 40000 3478\n",
		"PROXY TCP4 127.0.0.5 127.0.0.1 40000 3478\rX",
		"PROXY TCP4 127.0.0.5 127.0.0.1 40000\r\n",
		"PROXY TCP4 127.0.0.5 127.0.0.1 40000 3478 9\r\n",
		"PROXY TCP4 127.0.0.5 127.0.0.1 040000 3478\r\n",
		"PROXY TCP4 127.0.0.5 127.0.0.1 65536 3478\r\n",
		"PROXY TCP4 ::1 127.0.0.1 1 2\r\n",
		"PROXY TCP6 127.0.0.5 ::1 1 2\r\n",
		"PROXY TCP4  127.0.0.5 127.0.0.1 1 2\r\n",
		"PROXY UDP4 127.0.0.5 127.0.0.1 1 2\r\n",
		"PROXY UNKNOWNX\r\n",
		"PROXY \r\n",
	};
	char longl[200];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(parse_str(bad[i], BOTH, NULL), -EBADMSG);
	/* No CRLF within 107 bytes. */
	memset(longl, 'a', sizeof(longl) - 1);
	longl[sizeof(longl) - 1] = '\0';
	memcpy(longl, "PROXY UNKNOWN ", 14);
	assert_int_equal(parse_str(longl, BOTH, NULL), -EBADMSG);
	longl[PROXYPROTO_V1_MAX - 2] = '\0';
	assert_int_equal(parse_str(longl, BOTH, NULL), -EAGAIN);
	/* 107 bytes with CRLF is the longest line; 108 is one too many (found by the fuzzer). */
	memcpy(longl + PROXYPROTO_V1_MAX - 2, "\r\n", 3);
	assert_int_equal(parse_str(longl, BOTH, NULL), PROXYPROTO_V1_MAX);
	memmove(longl + 15, longl + 14, PROXYPROTO_V1_MAX - 14 + 1);	/* one more 'a' */
	assert_int_equal(strlen(longl), PROXYPROTO_V1_MAX + 1);
	assert_int_equal(parse_str(longl, BOTH, NULL), -EBADMSG);
	assert_int_equal(parse_str("GET / HTTP/1.1\r\n", BOTH, NULL), -ENOMSG);
	assert_int_equal(parse_str("\x16\x03\x01", BOTH, NULL), -ENOMSG);
}

/* A v2 header: fixed part, then body of blen bytes. */
static size_t v2(uint8_t *b, uint8_t vc, uint8_t fam, const uint8_t *body, size_t blen)
{
	memcpy(b, sig, 12);
	b[12] = vc;
	b[13] = fam;
	b[14] = (uint8_t)(blen >> 8);
	b[15] = (uint8_t)blen;
	memcpy(b + 16, body, blen);
	return 16 + blen;
}

static void t_v2_inet_tlv(void **state)
{
	/* 127.0.0.5:40000 -> 127.0.0.1:3478, then an ALPN TLV and a NOOP TLV. */
	static const uint8_t body[] = { 127, 0, 0, 5, 127, 0, 0, 1, 0x9C, 0x40, 0x0D, 0x96,
					0x01, 0x00, 0x09, 's', 't', 'u', 'n', '.', 't', 'u', 'r', 'n',
					0x04, 0x00, 0x00 };
	uint8_t b[128];
	size_t n = v2(b, 0x21, 0x11, body, sizeof(body));
	struct proxyproto_hdr h;

	(void)state;
	assert_int_equal(proxyproto_parse(b, n + 5, BOTH, &h), (int)n);
	assert_int_equal(h.version, 2);
	assert_int_equal(h.sock_type, SOCK_STREAM);
	assert_v4(&h.src, "127.0.0.5", 40000);
	assert_v4(&h.dst, "127.0.0.1", 3478);
	for (size_t k = 0; k < n; k++)
		assert_int_equal(proxyproto_parse(b, k, BOTH, NULL), -EAGAIN);
	assert_int_equal(proxyproto_parse(b, n, PROXYPROTO_V1, NULL), -EPROTONOSUPPORT);
	/* A TLV that runs past the header's length. */
	b[15] = (uint8_t)(sizeof(body) - 1);
	assert_int_equal(proxyproto_parse(b, n, BOTH, NULL), -EBADMSG);
	/* Addresses cut short by the length. */
	b[15] = 8;
	assert_int_equal(proxyproto_parse(b, n, BOTH, NULL), -EBADMSG);
}

static void t_v2_local_udp6(void **state)
{
	uint8_t body[36] = { 0 }, b[128];
	struct proxyproto_hdr h;
	size_t n;

	(void)state;
	n = v2(b, 0x20, 0x00, body, 0);
	assert_int_equal(proxyproto_parse(b, n, BOTH, &h), 16);
	assert_true(h.local);
	/* aw2: LOCAL or UNSPEC with a protocol block (an IPv4 one, which read as TLVs runs
	 * past the header): the block is ignored, not refused; so is LOCAL's family. */
	static const uint8_t fams[] = { 0x00, 0x11, 0x41 };
	static const uint8_t v4[] = { 127, 0, 0, 5, 127, 0, 0, 1, 0x9C, 0x40, 0x0D, 0x96 };
	for (size_t i = 0; i < sizeof(fams); i++) {
		n = v2(b, 0x20, fams[i], v4, sizeof(v4));
		assert_int_equal(proxyproto_parse(b, n, BOTH, &h), 28);
		assert_true(h.local);
	}
	n = v2(b, 0x21, 0x00, v4, sizeof(v4));
	assert_int_equal(proxyproto_parse(b, n, BOTH, &h), 28);
	assert_true(h.local);
	body[15] = 1;		/* ::1 */
	body[35] = 7;		/* dst port 7 */
	n = v2(b, 0x21, 0x22, body, sizeof(body));
	assert_int_equal(proxyproto_parse(b, n, PROXYPROTO_V2, &h), 52);
	assert_false(h.local);
	assert_int_equal(h.sock_type, SOCK_DGRAM);
	assert_int_equal(h.src.ss_family, AF_INET6);
	assert_int_equal(h.addr_len, sizeof(struct sockaddr_in6));
	assert_int_equal(ntohs(((struct sockaddr_in6 *)&h.dst)->sin6_port), 7);
}

static void t_v2_malformed(void **state)
{
	uint8_t b[PROXYPROTO_MAX + 64] = { 0 };

	(void)state;
	v2(b, 0x11, 0x11, b + 100, 12);		/* version 1 in a v2 header */
	assert_int_equal(proxyproto_parse(b, 28, BOTH, NULL), -EBADMSG);
	v2(b, 0x22, 0x11, b + 100, 12);		/* command 2 */
	assert_int_equal(proxyproto_parse(b, 28, BOTH, NULL), -EBADMSG);
	v2(b, 0x21, 0x41, b + 100, 12);		/* family 4 */
	assert_int_equal(proxyproto_parse(b, 28, BOTH, NULL), -EBADMSG);
	v2(b, 0x21, 0x13, b + 100, 12);		/* transport 3 */
	assert_int_equal(proxyproto_parse(b, 28, BOTH, NULL), -EBADMSG);
	v2(b, 0x21, 0x11, b + 100, 12);
	b[14] = (uint8_t)((PROXYPROTO_MAX - 15) >> 8);
	b[15] = (uint8_t)(PROXYPROTO_MAX - 15);
	assert_int_equal(proxyproto_parse(b, sizeof(b), BOTH, NULL), -EMSGSIZE);
	/* Signature broken in its last byte. */
	v2(b, 0x21, 0x11, b + 100, 12);
	b[11] = 0;
	assert_int_equal(proxyproto_parse(b, 28, BOTH, NULL), -ENOMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_v1_tcp4),	   cmocka_unit_test(t_v1_tcp6_unknown),
		cmocka_unit_test(t_v1_malformed),  cmocka_unit_test(t_v2_inet_tlv),
		cmocka_unit_test(t_v2_local_udp6), cmocka_unit_test(t_v2_malformed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
