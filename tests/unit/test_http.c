/* Unit tests of the http module's pure parts: endpoint URLs, credential queries, credential
 * responses (shape, URIs, filters, minting that verifies). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include <cmocka.h>
#include <jansson.h>

#include "conf/conf.h"
#include "http/http.h"
#include "http/http_cred.h"
#include "stun/stun_auth.h"

#define NOW 1700000000

/* ---- endpoint URLs --------------------------------------------------------------- */

static void test_endpoint_ok(void **state)
{
	struct http_endpoint ep;
	const char *why;
	(void)state;

	assert_int_equal(http_endpoint_parse("http://:8086", 1, &ep, &why), 0);
	assert_true(ep.any_host);
	assert_int_equal(ep.port, 8086);
	assert_string_equal(ep.path, "");
	assert_int_equal(ep.addr.ss_family, AF_INET6);

	assert_int_equal(http_endpoint_parse("http://127.0.0.1:9000/metrics", 1, &ep, &why), 0);
	assert_false(ep.any_host);
	assert_int_equal(ep.port, 9000);
	assert_string_equal(ep.path, "/metrics");
	struct sockaddr_in *v4 = (struct sockaddr_in *)&ep.addr;
	assert_int_equal(v4->sin_family, AF_INET);
	assert_int_equal(ntohs(v4->sin_port), 9000);
	assert_int_equal(ntohl(v4->sin_addr.s_addr), 0x7f000001);

	assert_int_equal(http_endpoint_parse("http://", 8080, &ep, &why), 0);
	assert_true(ep.any_host);
	assert_int_equal(ep.port, 8080);

	assert_int_equal(http_endpoint_parse("HTTP://[::1]:8088/", 1, &ep, &why), 0);
	assert_int_equal(ep.addr.ss_family, AF_INET6);
	assert_false(ep.any_host);
	assert_string_equal(ep.path, "");

	assert_int_equal(http_endpoint_parse("http://localhost/x/y", 8080, &ep, &why), 0);
	assert_int_equal(ep.port, 8080);
	assert_string_equal(ep.path, "/x/y");
	assert_int_equal(ep.addr.ss_family, AF_INET);

	assert_int_equal(http_endpoint_parse("http://0.0.0.0:0", 8080, &ep, &why), 0);
	assert_true(ep.any_host);
	assert_int_equal(ep.port, 0);
}

static void test_endpoint_bad(void **state)
{
	static const char *const bad[] = {
		"",
		":8086",
		"8086",
		"http:/:8086",
		"http://:99999",
		"http://:",
		"http://:80a",
		"http://example.com:80",
		"http://[::1:80",
		"http://[zz]:80",
		"http://u@:80",
		"http://:80metrics",
		"http://:80/a b",
		"http://:80/a?b",
		"http://:80/a#b",
		"http://1.2.3.4.5:80",
		"http://:123456",
	};
	struct http_endpoint ep;
	const char *why = NULL;
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(http_endpoint_parse(bad[i], 80, &ep, &why), -EINVAL);
		assert_non_null(why);
	}
	assert_int_equal(http_endpoint_parse(NULL, 80, &ep, &why), -EINVAL);
	assert_int_equal(http_endpoint_parse("https://:443", 80, &ep, &why), -EPROTONOSUPPORT);
	char longp[600] = "http://:80/";
	memset(longp + 11, 'a', 500);
	assert_int_equal(http_endpoint_parse(longp, 80, &ep, &why), -EINVAL);
}

static void test_endpoint_same(void **state)
{
	struct http_endpoint a, b;
	(void)state;
	assert_int_equal(http_endpoint_parse("http://:8086", 0, &a, NULL), 0);
	assert_int_equal(http_endpoint_parse("http://127.0.0.1:8086/metrics", 0, &b, NULL), 0);
	assert_true(http_endpoint_same_socket(&a, &b));
	assert_int_equal(http_endpoint_parse("http://127.0.0.1:8080/metrics", 0, &b, NULL), 0);
	assert_false(http_endpoint_same_socket(&a, &b));
	assert_int_equal(http_endpoint_parse("http://127.0.0.2:8080", 0, &a, NULL), 0);
	assert_false(http_endpoint_same_socket(&a, &b));
	assert_int_equal(http_endpoint_parse("http://127.0.0.1:8080", 0, &a, NULL), 0);
	assert_true(http_endpoint_same_socket(&a, &b));
}

/* conf's copy of the rule (conf_http_same_socket, which refuses a credential API on the
 * health socket at load) answers as the master's plan does (master/httpd.c same_socket:
 * http_endpoint_parse, then http_endpoint_same_socket) on every pair of these URLs. */
static bool plan_same(const char *a, uint16_t da, const char *b, uint16_t db)
{
	struct http_endpoint ea, eb;

	if (http_endpoint_parse(a, da, &ea, NULL) < 0 || http_endpoint_parse(b, db, &eb, NULL) < 0)
		return false;
	return http_endpoint_same_socket(&ea, &eb);
}

static void test_endpoint_same_as_conf(void **state)
{
	static const char *const urls[] = {
		"http://:8086", "http://0.0.0.0:8086", "http://[::]:8086", "http://127.0.0.1:8086",
		"http://localhost:8086/x", "http://127.0.0.2:8086", "http://[::1]:8086",
		"http://[::ffff:127.0.0.1]:8086", "http://127.0.0.1", "http://[::1]", "http://",
		"http://:8088", "http://127.0.0.1:8088/", "http://name.example:8086",
		"http://LOCALHOST", "http://[::]",
	};
	size_t n = sizeof(urls) / sizeof(urls[0]), same = 0;

	(void)state;
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++) {
			bool want = plan_same(urls[i], HTTP_HEALTH_PORT, urls[j], HTTP_CRED_PORT);

			if (conf_http_same_socket(urls[i], HTTP_HEALTH_PORT, urls[j],
						  HTTP_CRED_PORT) != want)
				fail_msg("%s (health) and %s (credential API): conf says %s, the "
					 "plan %s", urls[i], urls[j], want ? "no" : "yes",
					 want ? "yes" : "no");
			same += want;
		}
	assert_true(same > n && same < n * n);  /* both answers occur */
}

/* ---- queries --------------------------------------------------------------------- */

static int qparse(const char *s, struct http_cred_query *q, const char **why)
{
	return http_cred_query_parse(s, strlen(s), q, why);
}

static void test_query_ok(void **state)
{
	struct http_cred_query q;
	const char *why = NULL;
	(void)state;

	assert_int_equal(qparse("service=turn", &q, &why), 0);
	assert_string_equal(q.username, "");
	assert_int_equal(q.ttl, HTTP_CRED_TTL_DEFAULT);
	assert_int_equal(q.policy, HTTP_ICE_ALL);

	assert_int_equal(qparse("service=turn&username=al%20ice+b%3Ac&ttl=3600&key=x"
				"&iceTransportPolicy=relay&namespace=ns&gateway=gw&listener=udp"
				"&public-addr=1.2.3.4&unknown=%zz-ignored-not",
				&q, &why),
			 -EINVAL);
	assert_string_equal(why, "malformed percent-encoding in query");

	assert_int_equal(qparse("service=turn&username=al%20ice+b%3Ac&ttl=3600&key=x"
				"&iceTransportPolicy=relay&namespace=ns&gateway=gw&listener=udp"
				"&public-addr=1.2.3.4&unknown=zz&&=x&novalue",
				&q, &why),
			 0);
	assert_string_equal(q.username, "al ice b:c");
	assert_int_equal(q.ttl, 3600);
	assert_int_equal(q.policy, HTTP_ICE_RELAY);
	assert_string_equal(q.namespace_, "ns");
	assert_string_equal(q.gateway, "gw");
	assert_string_equal(q.listener, "udp");
	assert_string_equal(q.public_addr, "1.2.3.4");

	/* First value wins, as Go's url.Values.Get. */
	assert_int_equal(qparse("username=a&service=turn&username=b&ttl=5&ttl=x", &q, &why), 0);
	assert_string_equal(q.username, "a");
	assert_int_equal(q.ttl, 5);
	/* UTF-8 user ids pass. */
	assert_int_equal(qparse("service=turn&username=%C3%A9t%C3%A9", &q, &why), 0);
	assert_string_equal(q.username, "\xc3\xa9t\xc3\xa9");
	/* A very long unknown key is skipped. */
	char buf[300] = "service=turn&";
	memset(buf + 13, 'k', 100);
	strcpy(buf + 113, "=v&ttl=7");
	assert_int_equal(qparse(buf, &q, &why), 0);
	assert_int_equal(q.ttl, 7);
}

static void test_query_bad(void **state)
{
	static const struct {
		const char *q, *why;
	} bad[] = {
		{ "", "\"service\" must be \"turn\"" },
		{ "username=a", "\"service\" must be \"turn\"" },
		{ "service=stun", "\"service\" must be \"turn\"" },
		{ "service=turn&ttl=0", "\"ttl\" out of range (1..315360000)" },
		{ "service=turn&ttl=315360001", "\"ttl\" out of range (1..315360000)" },
		{ "service=turn&ttl=-5", "\"ttl\" must be a number of seconds" },
		{ "service=turn&ttl=", "\"ttl\" must be a number of seconds" },
		{ "service=turn&ttl=99999999999", "\"ttl\" must be a number of seconds" },
		{ "service=turn&ttl=1e3", "\"ttl\" must be a number of seconds" },
		{ "service=turn&iceTransportPolicy=none",
		  "\"iceTransportPolicy\" must be all, public or relay" },
		{ "service=turn&username=a%0Ab",
		  "\"username\" must be UTF-8 text of at most 256 bytes" },
		{ "service=turn&username=%C3",
		  "\"username\" must be UTF-8 text of at most 256 bytes" },
		{ "service=turn&username=%ED%A0%80",
		  "\"username\" must be UTF-8 text of at most 256 bytes" },
		{ "service=turn&username=a%00b", "NUL byte in query parameter" },
		{ "service=turn&public-addr=a/b",
		  "\"public-addr\" must be an IP address or host name" },
		{ "service=turn&public-addr=",
		  "\"public-addr\" must be an IP address or host name" },
		{ "service=turn&gateway=g", "\"gateway\" requires \"namespace\"" },
		{ "service=turn&listener=%1", "malformed percent-encoding in query" },
		{ "service=turn&listener=%", "malformed percent-encoding in query" },
		{ "service=turn&namespace=a%7Fb",
		  "namespace, gateway and listener must be UTF-8 text" },
	};
	struct http_cred_query q;
	const char *why;
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why = NULL;
		assert_int_equal(qparse(bad[i].q, &q, &why), -EINVAL);
		assert_non_null(why);
		assert_string_equal(why, bad[i].why);
	}
	char big[600] = "service=turn&username=";
	memset(big + 22, 'u', 257);
	assert_int_equal(qparse(big, &q, &why), -EINVAL);
	char *huge = malloc(HTTP_CRED_QUERY_MAX + 2);
	assert_non_null(huge);
	memset(huge, 'a', HTTP_CRED_QUERY_MAX + 1);
	huge[HTTP_CRED_QUERY_MAX + 1] = '\0';
	assert_int_equal(qparse(huge, &q, &why), -EINVAL);
	assert_string_equal(why, "query too long");
	free(huge);
	assert_int_equal(http_cred_query_parse(NULL, 0, &q, &why), -EINVAL);
	assert_int_equal(http_cred_query_parse(NULL, 3, &q, &why), -EINVAL);
}

/* ---- credential responses --------------------------------------------------------- */

static const char cfg_yaml[] = "version: v1\n"
			       "admin:\n"
			       "  name: ns1/gw1\n"
			       "auth:\n"
			       "  type: ephemeral\n"
			       "  realm: turn.example.org\n"
			       "  credentials:\n"
			       "    secret: s3cret\n"
			       "listeners:\n"
			       "  - name: ns1/gw1/udp\n"
			       "    protocol: TURN-UDP\n"
			       "    address: 10.0.0.1\n"
			       "    public_address: 203.0.113.5\n"
			       "    public_port: 30478\n"
			       "    port: 3478\n"
			       "    routes: [pods]\n"
			       "  - name: ns1/gw1/tcp\n"
			       "    protocol: TURN-TCP\n"
			       "    address: 10.0.0.1\n"
			       "    port: 3479\n"
			       "    routes: [pods]\n"
			       "  - name: ns1/gw1/v6\n"
			       "    protocol: TURN-UDP\n"
			       "    address: \"2001:db8::1\"\n"
			       "    port: 3480\n"
			       "    routes: [pods]\n"
			       "  - name: st\n"
			       "    protocol: TURN-TCP\n"
			       "    address: 10.0.0.2\n"
			       "    port: 3481\n"
			       "    auth:\n"
			       "      type: static\n"
			       "      users:\n"
			       "        - {username: bob, password: bobpw}\n"
			       "    routes: [pods]\n"
			       "clusters:\n"
			       "  - name: pods\n"
			       "    type: STATIC\n"
			       "    endpoints: [\"10.0.0.0/8\"]\n";

static int setup_conf(void **state)
{
	struct conf_diags d = { 0 };
	struct conf *cfg = NULL;
	struct conf_load_opts opts = { .now = NOW };
	int rc = conf_load_string(cfg_yaml, sizeof(cfg_yaml) - 1, "test.yaml", &opts, &cfg, &d);
	if (rc != 0)
		conf_diags_print(&d, stderr);
	conf_diags_free(&d);
	*state = cfg;
	return rc == 0 ? 0 : -1;
}

static int teardown_conf(void **state)
{
	conf_free(*state);
	return 0;
}

/* Renders, checks the status and parses the body. */
static json_t *render(const struct conf *cfg, const char *query, enum http_cred_form form,
		      int want_status)
{
	struct http_cred_query q;
	struct http_buf b = HTTP_BUF_INIT;
	int status = 0;
	assert_int_equal(http_cred_query_parse(query, strlen(query), &q, NULL), 0);
	assert_int_equal(http_cred_render(cfg, &q, form, NOW, &b, &status), 0);
	assert_int_equal(status, want_status);
	assert_non_null(b.data);
	assert_int_equal(b.data[b.len - 1], '\n');
	json_error_t err;
	json_t *j = json_loads(b.data, 0, &err);
	assert_non_null(j);
	http_buf_free(&b);
	return j;
}

static void assert_verifies(const char *secret, const char *user, const char *pass, uint64_t now)
{
	assert_int_equal(stun_rest_verify((const uint8_t *)secret, strlen(secret), user,
					  strlen(user), pass, strlen(pass), now),
			 0);
}

static void test_cred_rest(void **state)
{
	const struct conf *cfg = *state;
	json_t *j = render(cfg, "service=turn&username=alice&ttl=600", HTTP_CRED_REST, 200);

	assert_string_equal(json_string_value(json_object_get(j, "username")), "1700000600:alice");
	const char *pass = json_string_value(json_object_get(j, "password"));
	assert_non_null(pass);
	assert_int_equal(strlen(pass), STUN_REST_PASSWORD_LEN);
	assert_int_equal(json_integer_value(json_object_get(j, "ttl")), 600);
	assert_verifies("s3cret", "1700000600:alice", pass, NOW + 599);
	/* Expired after ttl. */
	assert_int_equal(stun_rest_verify((const uint8_t *)"s3cret", 6, "1700000600:alice", 16,
					  pass, strlen(pass), NOW + 601),
			 -ETIMEDOUT);
	/* Another secret does not verify it. */
	assert_int_equal(stun_rest_verify((const uint8_t *)"other", 5, "1700000600:alice", 16, pass,
					  strlen(pass), NOW),
			 -EACCES);
	/* The REST form lists the listeners of the first auth block (the global one). */
	json_t *uris = json_object_get(j, "uris");
	assert_int_equal(json_array_size(uris), 3);
	assert_string_equal(json_string_value(json_array_get(uris, 0)),
			    "turn:203.0.113.5:30478?transport=udp");
	assert_string_equal(json_string_value(json_array_get(uris, 1)),
			    "turn:10.0.0.1:3479?transport=tcp");
	assert_string_equal(json_string_value(json_array_get(uris, 2)),
			    "turn:[2001:db8::1]:3480?transport=udp");
	assert_int_equal(json_object_size(j), 4);
	json_decref(j);

	/* No user id: STUNner keeps the trailing colon. */
	j = render(cfg, "service=turn", HTTP_CRED_REST, 200);
	assert_string_equal(json_string_value(json_object_get(j, "username")), "1700086400:");
	assert_verifies("s3cret", "1700086400:", json_string_value(json_object_get(j, "password")),
			NOW);
	json_decref(j);
}

static void test_cred_ice(void **state)
{
	const struct conf *cfg = *state;
	json_t *j = render(cfg, "service=turn&username=u1&ttl=60&iceTransportPolicy=relay",
			   HTTP_CRED_ICE, 200);

	assert_string_equal(json_string_value(json_object_get(j, "iceTransportPolicy")), "relay");
	json_t *servers = json_object_get(j, "iceServers");
	assert_int_equal(json_array_size(servers), 2);   /* global auth, listener "st" */
	json_t *s0 = json_array_get(servers, 0), *s1 = json_array_get(servers, 1);
	assert_string_equal(json_string_value(json_object_get(s0, "username")), "1700000060:u1");
	assert_verifies("s3cret", "1700000060:u1",
			json_string_value(json_object_get(s0, "credential")), NOW);
	assert_int_equal(json_array_size(json_object_get(s0, "urls")), 3);
	assert_string_equal(json_string_value(json_object_get(s1, "username")), "bob");
	assert_string_equal(json_string_value(json_object_get(s1, "credential")), "bobpw");
	assert_string_equal(json_string_value(json_array_get(json_object_get(s1, "urls"), 0)),
			    "turn:10.0.0.2:3481?transport=tcp");
	json_decref(j);
}

static void test_cred_filters(void **state)
{
	const struct conf *cfg = *state;
	json_t *j = render(cfg, "service=turn&listener=tcp&public-addr=198.51.100.7", HTTP_CRED_ICE,
			   200);
	json_t *servers = json_object_get(j, "iceServers");
	assert_int_equal(json_array_size(servers), 1);
	json_t *urls = json_object_get(json_array_get(servers, 0), "urls");
	assert_int_equal(json_array_size(urls), 1);
	assert_string_equal(json_string_value(json_array_get(urls, 0)),
			    "turn:198.51.100.7:3479?transport=tcp");
	assert_string_equal(json_string_value(json_object_get(j, "iceTransportPolicy")), "all");
	json_decref(j);

	j = render(cfg, "service=turn&listener=st", HTTP_CRED_REST, 200);
	assert_string_equal(json_string_value(json_object_get(j, "username")), "bob");
	json_decref(j);

	j = render(cfg, "service=turn&namespace=ns1&gateway=gw1&listener=ns1/gw1/udp",
		   HTTP_CRED_REST, 200);
	assert_int_equal(json_array_size(json_object_get(j, "uris")), 1);
	json_decref(j);

	j = render(cfg, "service=turn&namespace=ns1", HTTP_CRED_REST, 200);
	json_decref(j);

	static const char *const nomatch[] = {
		"service=turn&listener=nope",
		"service=turn&namespace=ns2",
		"service=turn&namespace=ns1&gateway=gw2",
		"service=turn&namespace=ns",
	};
	for (size_t i = 0; i < sizeof(nomatch) / sizeof(nomatch[0]); i++) {
		j = render(cfg, nomatch[i], HTTP_CRED_ICE, 404);
		assert_int_equal(json_integer_value(json_object_get(j, "status")), 404);
		assert_string_equal(json_string_value(json_object_get(j, "message")),
				    "no valid listener found");
		json_decref(j);
	}
}

static void test_cred_no_secret(void **state)
{
	struct conf *cfg = *state;
	char *saved = cfg->auth.secret;
	cfg->auth.secret = NULL;
	json_t *j = render(cfg, "service=turn", HTTP_CRED_REST, 500);
	assert_string_equal(json_string_value(json_object_get(j, "message")),
			    "no shared secret configured");
	json_decref(j);
	cfg->auth.secret = saved;
}

static void test_listener_uri(void **state)
{
	struct conf *cfg = *state;
	char buf[128];
	enum conf_proto saved = cfg->listeners[1].protocol;

	cfg->listeners[1].protocol = CONF_PROTO_TURN_TLS;
	assert_int_equal(http_cred_listener_uri(cfg, 1, NULL, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "turns:10.0.0.1:3479?transport=tcp");
	cfg->listeners[1].protocol = CONF_PROTO_TURN_DTLS;
	assert_int_equal(http_cred_listener_uri(cfg, 1, "", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "turns:10.0.0.1:3479?transport=udp");
	cfg->listeners[1].protocol = saved;
	assert_int_equal(http_cred_listener_uri(cfg, 1, NULL, buf, 10), -ENOBUFS);
	assert_int_equal(http_cred_listener_uri(cfg, 99, NULL, buf, sizeof(buf)), -EINVAL);
}

static void test_status(void **state)
{
	const struct conf *cfg = *state;
	struct http_status_info info = { .readiness = HTTP_DRAINING,
					 .allocations = 12,
					 .generation = 4,
					 .workers_running = 2,
					 .workers_total = 3,
					 .last_reload_ok = true };
	struct http_buf b = HTTP_BUF_INIT;

	assert_int_equal(http_status_render(cfg, &info, &b), 0);
	assert_null(strstr(b.data, "s3cret"));
	assert_null(strstr(b.data, "bobpw"));
	json_t *j = json_loads(b.data, 0, NULL);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "status")), "TERMINATING");
	assert_int_equal(json_integer_value(json_object_get(j, "allocationCount")), 12);
	assert_int_equal(json_integer_value(json_object_get(j, "generation")), 4);
	assert_int_equal(json_integer_value(
				 json_object_get(json_object_get(j, "workers"), "running")),
			 2);
	assert_string_equal(json_string_value(json_object_get(j, "lastReload")), "ok");
	assert_int_equal(json_integer_value(json_object_get(j, "unknownRoutes")), 0);
	assert_int_equal(json_array_size(json_object_get(j, "listeners")), 4);
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "admin"), "name")),
			    "ns1/gw1");
	json_decref(j);
	http_buf_free(&b);

	info.readiness = HTTP_NOT_READY;
	info.last_reload_ok = false;
	assert_int_equal(http_status_render(NULL, &info, &b), 0);
	j = json_loads(b.data, 0, NULL);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "status")), "NOT-READY");
	assert_string_equal(json_string_value(json_object_get(j, "lastReload")), "failed");
	assert_null(json_object_get(j, "listeners"));
	json_decref(j);
	http_buf_free(&b);

	info.last_reload_refused = true; /* the reload guard's refusal is not a failure */
	assert_int_equal(http_status_render(NULL, &info, &b), 0);
	j = json_loads(b.data, 0, NULL);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "lastReload")), "refused");
	json_decref(j);
	http_buf_free(&b);
	info.readiness = HTTP_READY;
	assert_int_equal(http_status_render(NULL, &info, &b), 0);
	assert_non_null(strstr(b.data, "\"status\":\"READY\""));
	http_buf_free(&b);
}

static void test_buf(void **state)
{
	struct http_buf b = HTTP_BUF_INIT;
	size_t len;
	(void)state;
	char *p = http_buf_take(&b, &len);
	assert_non_null(p);
	assert_string_equal(p, "");
	free(p);
	for (int i = 0; i < 1000; i++)
		http_buf_printf(&b, "%04d", i);
	assert_int_equal(b.len, 4000);
	assert_memory_equal(b.data + 3996, "0999", 4);
	char *big = malloc(HTTP_BUF_MAX);
	assert_non_null(big);
	memset(big, 'x', HTTP_BUF_MAX);
	http_buf_append(&b, big, HTTP_BUF_MAX);
	free(big);
	assert_int_equal(http_buf_error(&b), -EMSGSIZE);
	http_buf_puts(&b, "more");
	assert_int_equal(b.len, 4000);
	assert_null(http_buf_take(&b, &len));
	http_buf_free(&b);
	http_buf_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_endpoint_ok),
		cmocka_unit_test(test_endpoint_bad),
		cmocka_unit_test(test_endpoint_same),
		cmocka_unit_test(test_endpoint_same_as_conf),
		cmocka_unit_test(test_query_ok),
		cmocka_unit_test(test_query_bad),
		cmocka_unit_test(test_buf),
		cmocka_unit_test_setup_teardown(test_cred_rest, setup_conf, teardown_conf),
		cmocka_unit_test_setup_teardown(test_cred_ice, setup_conf, teardown_conf),
		cmocka_unit_test_setup_teardown(test_cred_filters, setup_conf, teardown_conf),
		cmocka_unit_test_setup_teardown(test_cred_no_secret, setup_conf, teardown_conf),
		cmocka_unit_test_setup_teardown(test_listener_uri, setup_conf, teardown_conf),
		cmocka_unit_test_setup_teardown(test_status, setup_conf, teardown_conf),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
