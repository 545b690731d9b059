/* Unit tests for the master's pieces that need no running workers: listener sockets and the
 * admin request parser's error paths. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "master/admin.h"
#include "master/master.h"

static int count_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

static void make_listener(struct conf_listener *l, enum conf_proto proto, const char *relay_ip,
			  uint16_t port)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)&l->relay_addr;

	memset(l, 0, sizeof(*l));
	l->name = (char *)"l0";
	l->protocol = proto;
	l->port = port;
	s4->sin_family = AF_INET;
	assert_int_equal(inet_pton(AF_INET, relay_ip, &s4->sin_addr), 1);
}

static uint16_t port_of(int fd)
{
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);

	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
	return ntohs(sin.sin_port);
}

/* Port 0: the first slot's kernel-chosen port is shared by every slot, and a TCP listener
 * can join the same port number. */
static void test_listener_slots_share_port(void **state)
{
	struct conf_listener cl;
	struct mlistener udp, tcp;
	int type = 0, acc = 0;
	socklen_t sl = sizeof(int);

	(void)state;
	make_listener(&cl, CONF_PROTO_TURN_UDP, "127.0.0.1", 0);
	assert_int_equal(listener_open(&cl, 3, &udp), 0);
	assert_int_equal(udp.n_fds, 3);
	assert_true(udp.port != 0);
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(port_of(udp.fds[i]), udp.port);
		assert_int_equal(getsockopt(udp.fds[i], SOL_SOCKET, SO_TYPE, &type, &sl), 0);
		assert_int_equal(type, SOCK_DGRAM);
	}
	make_listener(&cl, CONF_PROTO_TURN_TCP, "127.0.0.1", udp.port);
	assert_int_equal(listener_open(&cl, 2, &tcp), 0);
	assert_int_equal(port_of(tcp.fds[1]), udp.port);
	assert_int_equal(getsockopt(tcp.fds[0], SOL_SOCKET, SO_ACCEPTCONN, &acc, &sl), 0);
	assert_int_equal(acc, 1);
	listener_close(&udp);
	listener_close(&tcp);
	assert_null(udp.fds);
	listener_close(NULL);
}

/* A relay address that is not local (behind NAT it is the public one) binds the wildcard;
 * an explicit bind address that is not local is an error. */
static void test_listener_nonlocal_address(void **state)
{
	struct conf_listener cl;
	struct mlistener ml;

	(void)state;
	make_listener(&cl, CONF_PROTO_TURN_UDP, "192.0.2.10", 0);
	assert_int_equal(listener_open(&cl, 1, &ml), 0);
	assert_non_null(strstr(ml.bind_text, "0.0.0.0:"));
	listener_close(&ml);

	cl.bind_address = (char *)"192.0.2.10";
	assert_int_equal(listener_open(&cl, 1, &ml), -EADDRNOTAVAIL);
	cl.bind_address = (char *)"not-an-ip";
	assert_int_equal(listener_open(&cl, 1, &ml), -EINVAL);
}

static void test_listener_failures_leave_nothing_open(void **state)
{
	struct conf_listener cl;
	struct mlistener ml;
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sin);
	int blocker, before;

	(void)state;
	make_listener(&cl, CONF_PROTO_TURN_TLS, "127.0.0.1", 0);
	assert_int_equal(listener_open(&cl, 2, &ml), -EOPNOTSUPP);
	make_listener(&cl, CONF_PROTO_TURN_DTLS, "127.0.0.1", 0);
	assert_int_equal(listener_open(&cl, 2, &ml), -EOPNOTSUPP);

	/* A port held by a socket without SO_REUSEPORT cannot be joined. */
	blocker = socket(AF_INET, SOCK_DGRAM, 0);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(blocker, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(getsockname(blocker, (struct sockaddr *)&sin, &sl), 0);
	make_listener(&cl, CONF_PROTO_TURN_UDP, "127.0.0.1", ntohs(sin.sin_port));
	before = count_fds();
	assert_int_equal(listener_open(&cl, 4, &ml), -EADDRINUSE);
	assert_int_equal(count_fds(), before);
	assert_null(ml.fds);
	close(blocker);
}

static void expect_error(struct master *m, const char *line, const char *msg)
{
	json_t *r = admin_dispatch(m, line, strlen(line));

	assert_non_null(r);
	assert_true(json_is_false(json_object_get(r, "ok")));
	assert_string_equal(json_string_value(json_object_get(r, "error")), msg);
	json_decref(r);
}

/* The parser's error paths never reach a command, so a bare master suffices. */
static void test_admin_malformed(void **state)
{
	struct master m;

	(void)state;
	memset(&m, 0, sizeof(m));
	m.magic = MASTER_MAGIC;
	expect_error(&m, "", "malformed request: expected one JSON object per line");
	expect_error(&m, "{", "malformed request: expected one JSON object per line");
	expect_error(&m, "\"status\"", "malformed request: expected a JSON object");
	expect_error(&m, "null", "malformed request: expected a JSON object");
	expect_error(&m, "{\"cmd\":null}", "missing \"cmd\" (a string)");
	expect_error(&m, "{\"command\":\"status\"}", "missing \"cmd\" (a string)");
	expect_error(&m, "{\"cmd\":\"STATUS\"}", "unknown command");
	expect_error(&m, "{\"cmd\":\"status\"} trailing", "malformed request: expected one JSON "
							  "object per line");
	expect_error(&m, "{\"cmd\":\"a\",\"cmd\":\"b\"}",
		     "malformed request: expected one JSON object per line");
}

static void test_state_names(void **state)
{
	(void)state;
	assert_string_equal(supervise_state_name(MW_RUNNING), "running");
	assert_string_equal(supervise_state_name(MW_DEAD), "dead");
	assert_string_equal(supervise_state_name((enum mworker_state)99), "?");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_listener_slots_share_port),
		cmocka_unit_test(test_listener_nonlocal_address),
		cmocka_unit_test(test_listener_failures_leave_nothing_open),
		cmocka_unit_test(test_admin_malformed),
		cmocka_unit_test(test_state_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
