/* Unit tests of the CDS client's pure pieces: origin and identity parsing, WebSocket handshake and
 * framing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "master/cds.h"

static void test_origin(void **state)
{
	char host[64], port[16];

	(void)state;
	assert_true(cds_is_origin("http://a"));
	assert_true(cds_is_origin("ws://a:1"));
	assert_false(cds_is_origin("/etc/turngate.yaml"));
	assert_false(cds_is_origin("file:///x"));
	assert_false(cds_is_origin(NULL));
	/* stunnerd reads an origin without a scheme as http:// */
	assert_true(cds_is_origin("10.0.0.1:13478"));
	assert_true(cds_is_origin("cds.stunner-system.svc:13478"));
	assert_false(cds_is_origin("turngate.yaml"));
	assert_false(cds_is_origin("./a:1"));
	assert_int_equal(cds_parse_origin("10.0.0.2:1", host, sizeof(host), port, sizeof(port)), 0);
	assert_string_equal(host, "10.0.0.2");
	assert_string_equal(port, "1");
	/* The operator's default origin, http://:13478: the local host. */
	assert_int_equal(cds_parse_origin("http://:13478", host, sizeof(host), port, sizeof(port)),
			 0);
	assert_string_equal(host, "");
	assert_string_equal(port, "13478");
	assert_int_equal(cds_parse_origin("http://10.0.0.1:13478", host, sizeof(host), port,
					  sizeof(port)),
			 0);
	assert_string_equal(host, "10.0.0.1");
	assert_string_equal(port, "13478");
	assert_int_equal(cds_parse_origin("ws://cds.example/api", host, sizeof(host), port,
					  sizeof(port)),
			 0);
	assert_string_equal(host, "cds.example");
	assert_string_equal(port, CDS_DEFAULT_PORT);
	assert_int_equal(cds_parse_origin("http://[::1]:99", host, sizeof(host), port,
					  sizeof(port)),
			 0);
	assert_string_equal(host, "::1");
	assert_string_equal(port, "99");
	assert_int_equal(cds_parse_origin("https://a", host, sizeof(host), port, sizeof(port)),
			 -EPROTONOSUPPORT);
	assert_int_equal(cds_parse_origin("http://", host, sizeof(host), port, sizeof(port)),
			 -EINVAL);
	assert_int_equal(cds_parse_origin("http://a:", host, sizeof(host), port, sizeof(port)),
			 -EINVAL);
	assert_int_equal(cds_parse_origin("http://a:1x", host, sizeof(host), port, sizeof(port)),
			 -EINVAL);
	assert_int_equal(cds_parse_origin("http://[::1", host, sizeof(host), port, sizeof(port)),
			 -EINVAL);
}

static void test_identity(void **state)
{
	char id[128];

	(void)state;
	assert_int_equal(cds_identity("ns/name", id, sizeof(id)), 0);
	assert_string_equal(id, "ns/name");
	assert_int_equal(cds_identity("nsname", id, sizeof(id)), -EINVAL);
	assert_int_equal(cds_identity("/x", id, sizeof(id)), -EINVAL);
	assert_int_equal(cds_identity("a/b/c", id, sizeof(id)), -EINVAL);
	setenv("STUNNER_NAMESPACE", "stunner", 1);
	setenv("STUNNER_NAME", "udp-gateway", 1);
	assert_int_equal(cds_identity(NULL, id, sizeof(id)), 0);
	assert_string_equal(id, "stunner/udp-gateway");
	unsetenv("STUNNER_NAME");
	assert_int_equal(cds_identity(NULL, id, sizeof(id)), 0);
	assert_memory_equal(id, "default/stunnerd-", 17);
}

static void test_accept(void **state)
{
	char out[WS_ACCEPT_LEN + 1], key[WS_KEY_LEN + 1];

	(void)state;
	/* The example of RFC 6455 section 1.3. */
	ws_accept_of("dGhlIHNhbXBsZSBub25jZQ==", out);
	assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	assert_int_equal(ws_key_new(key), 0);
	assert_int_equal(strlen(key), WS_KEY_LEN);
	assert_int_equal(key[22], '=');
}

static void test_handshake(void **state)
{
	const char *acc = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";
	const char ok[] = "HTTP/1.1 101 Switching Protocols\r\nupgrade: WebSocket\r\n"
			  "Connection: keep-alive, Upgrade\r\n"
			  "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\x81\x00";
	char buf[512];
	size_t used = 0;
	int status = 0;

	(void)state;
	assert_int_equal(ws_handshake_parse(ok, sizeof(ok) - 1, acc, &used, &status), 1);
	assert_int_equal(used, sizeof(ok) - 3);
	assert_int_equal(ws_handshake_parse(ok, 40, acc, &used, &status), 0);
	assert_int_equal(ws_handshake_parse(ok, sizeof(ok) - 1, "AAAA", &used, &status), -EACCES);
	snprintf(buf, sizeof(buf), "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
	assert_int_equal(ws_handshake_parse(buf, strlen(buf), acc, &used, &status), -EPROTO);
	assert_int_equal(status, 404);
	snprintf(buf, sizeof(buf),
		 "HTTP/1.1 101 x\r\nConnection: Upgrade\r\n"
		 "Sec-WebSocket-Accept: %s\r\n\r\n",
		 acc);
	assert_int_equal(ws_handshake_parse(buf, strlen(buf), acc, &used, &status), -EBADMSG);
	snprintf(buf, sizeof(buf), "garbage\r\n\r\n");
	assert_int_equal(ws_handshake_parse(buf, strlen(buf), acc, &used, &status), -EBADMSG);
	{
		char *big = calloc(1, WS_MAX_HEADERS + 10);

		assert_non_null(big);
		memset(big, 'a', WS_MAX_HEADERS + 9);
		assert_int_equal(ws_handshake_parse(big, WS_MAX_HEADERS + 9, acc, &used, &status),
				 -EMSGSIZE);
		free(big);
	}
}

static void test_frames(void **state)
{
	uint8_t buf[70000];
	struct ws_frame f;

	(void)state;
	memcpy(buf, "\x81\x05hello", 7);
	assert_int_equal(ws_frame_parse(buf, 7, 100, &f), 1);
	assert_true(f.fin);
	assert_int_equal(f.opcode, WS_TEXT);
	assert_int_equal(f.len, 5);
	assert_int_equal(f.total, 7);
	assert_memory_equal(f.payload, "hello", 5);
	assert_int_equal(ws_frame_parse(buf, 6, 100, &f), 0);
	assert_int_equal(ws_frame_parse(buf, 1, 100, &f), 0);
	assert_int_equal(ws_frame_parse(buf, 7, 4, &f), -EMSGSIZE);
	buf[1] = 0x85;  /* masked: a server must not */
	assert_int_equal(ws_frame_parse(buf, 7, 100, &f), -EBADMSG);
	buf[0] = 0xc1;  /* RSV1 */
	buf[1] = 0x05;
	assert_int_equal(ws_frame_parse(buf, 7, 100, &f), -EBADMSG);
	buf[0] = 0x09;  /* fragmented ping */
	assert_int_equal(ws_frame_parse(buf, 7, 100, &f), -EBADMSG);
	/* 16-bit length */
	buf[0] = 0x01;
	buf[1] = 126;
	buf[2] = 0x01;
	buf[3] = 0x00;
	assert_int_equal(ws_frame_parse(buf, 100, 1000, &f), 0);
	assert_int_equal(ws_frame_parse(buf, 260, 1000, &f), 1);
	assert_false(f.fin);
	assert_int_equal(f.len, 256);
	/* 64-bit length, over the bound, rejected before the payload arrives */
	memcpy(buf, "\x81\x7f\x00\x00\x00\x01\x00\x00\x00\x00", 10);
	assert_int_equal(ws_frame_parse(buf, 10, CDS_MAX_MESSAGE, &f), -EMSGSIZE);
	memcpy(buf, "\x81\x7f\xff\xff\xff\xff\xff\xff\xff\xff", 10);
	assert_int_equal(ws_frame_parse(buf, 10, CDS_MAX_MESSAGE, &f), -EMSGSIZE);
}

static void test_build(void **state)
{
	uint8_t out[300], payload[200];
	size_t n = 0;

	(void)state;
	assert_int_equal(ws_frame_build(WS_PONG, (const uint8_t *)"abc", 3, out, sizeof(out), &n),
			 0);
	assert_int_equal(n, 9);
	assert_int_equal(out[0], 0x8a);
	assert_int_equal(out[1], 0x83);
	for (int i = 0; i < 3; i++)
		assert_int_equal(out[6 + i] ^ out[2 + i], "abc"[i]);
	memset(payload, 'x', sizeof(payload));
	assert_int_equal(ws_frame_build(WS_TEXT, payload, 200, out, sizeof(out), &n), 0);
	assert_int_equal(n, 208);
	assert_int_equal(out[1], 0x80 | 126);
	assert_int_equal(out[3], 200);
	assert_int_equal(ws_frame_build(WS_TEXT, payload, 200, out, 100, &n), -EMSGSIZE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_origin), cmocka_unit_test(test_identity),
		cmocka_unit_test(test_accept), cmocka_unit_test(test_handshake),
		cmocka_unit_test(test_frames), cmocka_unit_test(test_build),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
