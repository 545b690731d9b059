/* Relay checks shared by the tests that drive the project's client (see client_flow.h). */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/integration/client_flow.h"

void cflow_roundtrip(struct turn_client *c, uint16_t ch, struct sockaddr_storage *peer,
		     const char *msg)
{
	char buf[256];
	size_t len = 0;
	uint16_t got = 0xffff;

	if (ch)
		assert_int_equal(turn_client_send_channel(c, ch, msg, strlen(msg)), 0);
	else
		assert_int_equal(turn_client_send_indication(c, (struct sockaddr *)peer, msg,
							     strlen(msg), false),
				 0);
	assert_int_equal(turn_client_recv(c, buf, sizeof(buf), &len, NULL, &got, 3000), 0);
	assert_int_equal(len, strlen(msg));
	assert_memory_equal(buf, msg, len);
	assert_int_equal(got, ch);
}

void cflow_relay(struct turn_client *c, struct sockaddr_storage *echo4,
		 struct sockaddr_storage *echo6)
{
	struct turn_alloc_opts ao = { .additional_family = AF_INET6 };
	struct turn_alloc_result r;
	uint32_t granted = 0;

	assert_int_equal(turn_client_allocate(c, &ao, &r), 0);
	assert_int_equal(r.relayed.ss_family, AF_INET);
	assert_int_equal(r.relayed2.ss_family, AF_INET6);
	assert_int_equal(turn_client_create_permission(c, echo4, 1), 0);
	assert_int_equal(turn_client_create_permission(c, echo6, 1), 0);
	cflow_roundtrip(c, 0, echo4, "indication-v4");
	cflow_roundtrip(c, 0, echo6, "indication-v6");
	assert_int_equal(turn_client_channel_bind(c, 0x4abc, (struct sockaddr *)echo4), 0);
	assert_int_equal(turn_client_channel_bind(c, 0x4abd, (struct sockaddr *)echo6), 0);
	cflow_roundtrip(c, 0x4abc, NULL, "channel-v4");
	cflow_roundtrip(c, 0x4abd, NULL, "channel-v6!");
	assert_int_equal(turn_client_refresh(c, 1200, &granted), 0);
	assert_int_equal(granted, 1200);
	assert_int_equal(turn_client_refresh(c, 0, NULL), 0);
	assert_int_equal(turn_client_refresh(c, 600, NULL), -EPROTO);
	assert_int_equal(turn_client_last_error(c, NULL), 437);
}
