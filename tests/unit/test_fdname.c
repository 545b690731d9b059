/* Unit tests: names of stream connections in systemd's fd store (common/fdname.h). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/fdname.h"

static void test_round_trip(void **state)
{
	char name[FDNAME_MAX + 1];
	struct park_hdr h;

	(void)state;
	assert_int_equal(fdname_make(name, sizeof(name), PARK_TCONN, 3, 1234, 0,
				     PARK_F_AUTHED | PARK_F_TCPALLOC, "tcp:a%b c"), 0);
	assert_string_equal(name, "tg1.c.3.1234.0.3.tcp%3Aa%25b%20c");
	assert_int_equal(fdname_parse(name, &h), 0);
	assert_int_equal(h.kind, PARK_TCONN);
	assert_int_equal(h.slot, 3);
	assert_int_equal(h.rec_idx, 1234);
	assert_int_equal(h.flags, PARK_F_AUTHED | PARK_F_TCPALLOC);
	assert_string_equal(h.listener, "tcp:a%b c");
	assert_int_equal(h.magic, PARK_MAGIC);
	assert_int_equal(fdname_make(name, sizeof(name), PARK_TDATA, 0, 7, 0xdeadbeef, 0, NULL), 0);
	assert_int_equal(fdname_parse(name, &h), 0);
	assert_int_equal(h.kind, PARK_TDATA);
	assert_int_equal(h.id, 0xdeadbeef);
	assert_int_equal(h.listener[0], '\0');
}

static void test_refused(void **state)
{
	char name[FDNAME_MAX + 1], big[300];
	struct park_hdr h;

	(void)state;
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(fdname_make(name, sizeof(name), PARK_TCONN, 0, 1, 0, 0, big),
			 -ENAMETOOLONG);
	assert_int_equal(fdname_make(name, sizeof(name), PARK_TRELAY, 0, 1, 0, 0, NULL), -EINVAL);
	/* Not ours, or malformed: never a park header. */
	assert_int_equal(fdname_parse("stored", &h), -EBADMSG);
	assert_int_equal(fdname_parse("tg1.x.0.1.0.0.", &h), -EBADMSG);
	assert_int_equal(fdname_parse("tg1.c.0.1.0.0.", &h), -EBADMSG);	/* no listener */
	assert_int_equal(fdname_parse("tg1.p.0.1.0.4.l", &h), -EBADMSG);	/* a listener */
	assert_int_equal(fdname_parse("tg1.c.0.99999999999.0.0.l", &h), -EBADMSG);
	assert_int_equal(fdname_parse("tg1.c.0.1.0.0.l%0", &h), -EBADMSG);
	assert_int_equal(fdname_parse("tg1.c.0.1.0.0.l%00", &h), -EBADMSG);
	assert_int_equal(fdname_parse("tg1.c.-1.1.0.0.l", &h), -EBADMSG);
	assert_int_equal(fdname_parse(NULL, &h), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
