/* Unit tests for configs stunnerd accepts: the value turngate loads is the one stunnerd would use
 * (issue #20). */
#include "tests/unit/test_conf_util.h"

#include <errno.h>

#include "conf/conf_internal.h"

/* Loads text that must load; the diagnostics stay in *d for the caller. */
static struct conf *load_ok(const char *text, struct conf_diags *d)
{
	struct conf *c = NULL;
	int rc = t_load(text, &c, d);
	if (rc != 0)
		t_dump(d);
	assert_int_equal(rc, 0);
	return c;
}

static void expect_diag(const struct conf_diags *d, const char *line)
{
	if (!t_has(d, line)) {
		t_dump(d);
		fail_msg("missing: %s", line);
	}
}

/* `address: "$STUNNER_ADDR"` outside a pod: "" after expansion, which is 0.0.0.0. */
static void test_unset_stunner_addr(void **state)
{
	(void)state;
	static const char *const env[] = { NULL };
	struct conf_diags d;
	t_env_pairs = env;
	struct conf *c = load_ok(T_HEAD "listeners:\n  - name: l\n    address: \"$STUNNER_ADDR\"\n"
					"    port: $STUNNER_PORT\n",
				 &d);
	t_env_pairs = NULL;
	assert_string_equal(c->listeners[0].address, "0.0.0.0");
	assert_int_equal(c->listeners[0].port, 3478);
	expect_diag(&d, "t.yaml:9:14: warning: listeners[0].address: environment variable "
			"STUNNER_ADDR is not set (expanded to \"\")");
	conf_free(c);
	conf_diags_free(&d);
}

/* Validate() in stunnerd: "" and 0 are the defaults. */
static void test_empty_means_default(void **state)
{
	(void)state;
	struct conf_diags d;
	struct conf *c =
		load_ok("version: v1\nadmin: {name: \"\", loglevel: \"\"}\n"
			"auth: {type: \"\", realm: \"\", credentials: {username: u, "
			"password: \"\"}}\n"
			"listeners:\n  - {name: l, protocol: \"\", address: \"\", port: 0, "
			"routes: [c]}\n"
			"clusters:\n  - {name: c, type: \"\", protocol: \"\", endpoints: "
			"[10.0.0.0/8]}\n",
			&d);
	assert_string_equal(c->admin.name, "default-stunnerd");
	assert_string_equal(c->admin.loglevel, "all:INFO");
	assert_int_equal(c->auth.type, CONF_AUTH_STATIC);
	assert_string_equal(c->auth.realm, "stunner.l7mp.io");
	assert_string_equal(c->auth.users[0].password, "");
	assert_int_equal(c->listeners[0].protocol, CONF_PROTO_TURN_UDP);
	assert_string_equal(c->listeners[0].address, "10.0.0.1"); /* $STUNNER_ADDR, ours */
	assert_int_equal(c->listeners[0].port, 3478);
	assert_int_equal(c->clusters[0].type, CONF_CLUSTER_STATIC);
	assert_int_equal(c->clusters[0].protocol, CONF_CPROTO_UDP);
	assert_int_equal(d.n_errors, 0);
	conf_free(c);
	conf_diags_free(&d);
}

/* The operator renders routes to clusters it could not render; stunnerd matches nothing. */
static void test_unknown_route_warns(void **state)
{
	(void)state;
	struct conf_diags d;
	struct conf *c = load_ok(T_HEAD "listeners:\n  - name: a\n    routes: [x, nope, x]\n"
					"  - name: b\n    port: 3479\n    routes: [nope]\n",
				 &d);
	expect_diag(&d, "t.yaml:9:14: warning: listeners[0].routes[0]: unknown cluster 'x' "
			"(admits no peer until a cluster of that name exists)");
	expect_diag(&d, "t.yaml:9:17: warning: listeners[0].routes[1]: unknown cluster 'nope' "
			"(admits no peer until a cluster of that name exists)");
	assert_int_equal(c->listeners[0].n_routes, 2);
	assert_int_equal(c->n_unknown_routes, 3); /* a: x, nope; b: nope */
	conf_free(c);
	conf_diags_free(&d);
}

/* The stunnerd image's own stunnerd.conf is v1alpha1. */
static void test_v1alpha1(void **state)
{
	(void)state;
	struct conf_diags d;
	struct conf *c = load_ok("version: v1alpha1\nauth:\n  type: plaintext\n  credentials: "
				 "{username: u, password: p}\nlisteners:\n  - name: l\n"
				 "    min_relay_port: 10000\n    max_relay_port: 20000\n",
				 &d);
	assert_string_equal(c->version, "v1");
	assert_int_equal(c->auth.type, CONF_AUTH_STATIC);
	assert_int_equal(c->listeners[0].relay_port_min, 49152); /* not a relay range */
	expect_diag(&d, "t.yaml:1:10: warning: version: v1alpha1 is read as v1, as stunnerd "
			"converts it");
	expect_diag(&d, "t.yaml:7:5: warning: listeners[0].min_relay_port: v1alpha1 key dropped "
			"by stunnerd's conversion to v1 (ignored; v1 puts peer port ranges on "
			"cluster endpoints)");
	conf_free(c);
	conf_diags_free(&d);
}

/* Go's decoder sees a YAML mapping through a Go map and encoding/json's sorted keys: the
 * last of equal keys wins, and of case variants the greatest spelling. */
static void test_duplicate_keys(void **state)
{
	(void)state;
	struct conf_diags d;
	struct conf *c = load_ok(T_HEAD
				 "admin:\n  name: a\n  name: b\n  loglevel: all:DEBUG\n"
				 "  logLevel: all:WARN\nlisteners:\n  - {name: l, port: 4000, "
				 "Port: 5000}\n",
				 &d);
	assert_string_equal(c->admin.name, "b");
	assert_string_equal(c->admin.loglevel, "all:DEBUG"); /* "loglevel" > "logLevel" */
	assert_int_equal(c->listeners[0].port, 4000);
	expect_diag(&d, "t.yaml:8:3: warning: admin.name: duplicate key (ignored: stunnerd uses "
			"the one at line 9, column 3)");
	expect_diag(&d, "t.yaml:11:3: warning: admin.logLevel: duplicate key (ignored: stunnerd "
			"uses the one at line 10, column 3)");
	assert_int_equal(d.n_errors, 0);
	conf_free(c);
	conf_diags_free(&d);
}

static void test_endpoint_ranges(void **state)
{
	(void)state;
	struct conf_diags d;
	struct conf *c = load_ok(T_HEAD "clusters:\n  - name: c\n    endpoints: "
					"[\"10.0.0.0/8:<2000-1000>\", \"10.1.0.0/16:<1-70000>\", "
					"\"10.2.0.0/16:<70000-80000>\", \"10.3.0.1\"]\n",
				 &d);
	struct conf_cluster *cl = &c->clusters[0];
	assert_int_equal(cl->n_endpoints, 2);
	assert_string_equal(cl->endpoints[0].text, "10.1.0.0/16:<1-70000>");
	assert_int_equal(cl->endpoints[0].port_min, 1);
	assert_int_equal(cl->endpoints[0].port_max, 65535);
	assert_string_equal(cl->endpoints[1].text, "10.3.0.1");
	expect_diag(&d, "t.yaml:9:17: warning: clusters[0].endpoints[0]: port range 2000-1000 "
			"holds no port (the endpoint matches nothing, as in stunnerd)");
	expect_diag(&d, "t.yaml:9:43: warning: clusters[0].endpoints[1]: port range end 70000 is "
			"past 65535 (read as 65535, as stunnerd matches it)");
	assert_int_equal(d.n_errors, 0);
	conf_free(c);
	conf_diags_free(&d);
}

static void test_ports_and_urls(void **state)
{
	(void)state;
	struct conf_diags d;
	struct conf *c = load_ok(T_HEAD "admin:\n  metrics_endpoint: \"https://:8080/metrics\"\n"
					"  offload_engine: None\n  offload_interfaces: []\n"
					"listeners:\n  - {name: l, public_port: 70000}\n",
				 &d);
	assert_string_equal(c->admin.metrics_endpoint, "http://:8080/metrics");
	assert_int_equal(c->listeners[0].public_port, 0);
	expect_diag(&d, "t.yaml:8:21: warning: admin.metrics_endpoint: scheme 'https' served as "
			"plain http (stunnerd uses only the host, port and path)");
	expect_diag(&d, "t.yaml:12:28: warning: listeners[0].public_port: 70000 is not a port "
			"(ignored; expected 0..65535)");
	assert_int_equal(d.n, 2); /* offload_engine: None, as the operator writes it: silent */
	conf_free(c);
	conf_diags_free(&d);
}

/* go-yaml v2 types plain scalars as YAML 1.1 does; sigs.k8s.io/yaml turns a bool or number
 * into text for a string field. */
static void test_yaml11_scalars(void **state)
{
	(void)state;
	struct conf_diags d;
	struct conf *c = load_ok("version: v1\nadmin: {name: 0x10}\nauth:\n  realm: yes\n"
				 "  credentials: {username: on, password: 1.50}\n"
				 "listeners:\n  - {name: a, port: 3478.0}\n"
				 "  - {name: b, port: 0xD96, address: 127.0.0.1}\n"
				 "  - {name: c, port: 0o15_000, address: 127.0.0.2}\n",
				 &d);
	assert_string_equal(c->admin.name, "16");
	assert_string_equal(c->auth.realm, "true");
	assert_string_equal(c->auth.users[0].username, "true");
	assert_string_equal(c->auth.users[0].password, "1.5");
	assert_int_equal(c->listeners[0].port, 3478);
	assert_int_equal(c->listeners[1].port, 3478);
	assert_int_equal(c->listeners[2].port, 6656);
	expect_diag(&d, "t.yaml:4:10: warning: auth.realm: 'yes' reads as \"true\" (a YAML 1.1 "
			"boolean, as in stunnerd; quote it to keep the text)");
	expect_diag(&d, "t.yaml:7:21: warning: listeners[0].port: '3478.0' reads as 3478 (a YAML "
			"1.1 number, as in stunnerd)");
	conf_free(c);
	conf_diags_free(&d);
	/* Quoted, a YAML 1.1 word stays text: "yes" is no IP address. */
	assert_int_equal(t_load(T_HEAD "listeners:\n  - {name: c, address: \"yes\"}\n", &c, &d),
			 -EINVAL);
	conf_diags_free(&d);
}

/* `<<: *anchor` carries address, port and routes (the listener lost them before). */
static void test_merge_keys(void **state)
{
	(void)state;
	struct conf_diags d;
	struct conf *c =
		load_ok(T_HEAD "clusters: [{name: c, endpoints: [10.0.0.0/8]}]\n"
			       "listeners:\n"
			       "  - &base {name: a, address: 192.0.2.1, port: 4000, routes: [c]}\n"
			       "  - {<<: *base, name: b, port: 4001}\n"
			       "  - {port: 1, <<: [{name: x, port: 4002}, *base]}\n",
			&d);
	assert_int_equal(c->n_listeners, 3);
	struct conf_listener *b = &c->listeners[1], *x = &c->listeners[2];
	assert_string_equal(b->name, "b");
	assert_string_equal(b->address, "192.0.2.1");
	assert_int_equal(b->port, 4001);
	assert_int_equal(b->n_routes, 1);
	assert_string_equal(b->routes[0], "c");
	/* go-yaml v2: the first of a merge list wins, and a merge overrides earlier keys */
	assert_string_equal(x->name, "x");
	assert_int_equal(x->port, 4002);
	assert_string_equal(x->address, "192.0.2.1");
	assert_int_equal(d.n_errors, 0);
	conf_free(c);
	conf_diags_free(&d);
	/* A merge that refers to itself ends at the depth limit, as an error. */
	assert_int_equal(t_load(T_HEAD "admin: &a {name: n, <<: *a}\n", &c, &d), -EINVAL);
	conf_diags_free(&d);
}

/* stunnerd's logger applies the good items of a spec and skips the rest. */
static void test_loglevel_items(void **state)
{
	(void)state;
	struct conf_diags d;
	struct conf *c =
		load_ok(T_HEAD "admin: {loglevel: \"all:DEBUG,bogus,turn:WARN,x:LOUD\"}\n", &d);
	assert_string_equal(c->admin.loglevel, "all:DEBUG,turn:WARN");
	expect_diag(&d, "t.yaml:7:19: warning: admin.loglevel: item 'bogus' is malformed "
			"(skipped, as stunnerd does; expected SCOPE:LEVEL with "
			"DISABLE|ERROR|WARN|INFO|DEBUG|TRACE)");
	conf_free(c);
	conf_diags_free(&d);
	c = load_ok(T_HEAD "admin: {loglevel: \"nonsense\"}\n", &d);
	assert_string_equal(c->admin.loglevel, "all:INFO");
	conf_free(c);
	conf_diags_free(&d);
}

static void check_y11(const char *in, enum conf_y11_kind kind, const char *as_string)
{
	struct conf_y11 y;
	char buf[64];
	assert_int_equal(conf_y11_resolve(in, &y), kind);
	if (as_string != NULL) {
		assert_true(conf_y11_as_string(&y, buf, sizeof(buf)));
		assert_string_equal(buf, as_string);
	}
}

static void test_y11_resolver(void **state)
{
	(void)state;
	check_y11("yes", CONF_Y11_BOOL, "true");
	check_y11("Off", CONF_Y11_BOOL, "false");
	check_y11("y", CONF_Y11_BOOL, "true");
	check_y11("TRUE", CONF_Y11_BOOL, "true");
	check_y11("tRUE", CONF_Y11_STR, NULL);
	check_y11("~", CONF_Y11_NULL, NULL);
	check_y11("", CONF_Y11_NULL, NULL);
	check_y11("0777", CONF_Y11_INT, "511");
	check_y11("08", CONF_Y11_FLOAT, "8"); /* no octal: go-yaml falls through to a float */
	check_y11("0b101", CONF_Y11_INT, "5");
	check_y11("-0x10", CONF_Y11_INT, "-16");
	check_y11("1_000", CONF_Y11_INT, "1000");
	check_y11("18446744073709551615", CONF_Y11_INT, "18446744073709551615");
	check_y11("1e6", CONF_Y11_FLOAT, "1e+06");
	check_y11("1e40", CONF_Y11_FLOAT, "+Inf"); /* past float32: Go formats +Inf */
	check_y11("-1e300", CONF_Y11_FLOAT, "-Inf");
	check_y11("123456.0", CONF_Y11_FLOAT, "123456");
	check_y11("0.1", CONF_Y11_FLOAT, "0.1");
	check_y11(".5", CONF_Y11_FLOAT, "0.5");
	check_y11("1.0e-5", CONF_Y11_FLOAT, "1e-05");
	check_y11(".inf", CONF_Y11_FLOAT, "+Inf");
	check_y11("-.Inf", CONF_Y11_FLOAT, "-Inf");
	check_y11(".NaN", CONF_Y11_FLOAT, "NaN");
	check_y11("1.2.3.4", CONF_Y11_STR, NULL);
	check_y11("10.0.0.0/8", CONF_Y11_STR, NULL);
	check_y11("+", CONF_Y11_STR, NULL);
	check_y11("0x", CONF_Y11_STR, NULL);
	check_y11("all:INFO", CONF_Y11_STR, NULL);
}

/* The pod environment of tests/conf/stunner.sh, in part. */
static const char *const pod_env[] = { "STUNNER_ADDR=10.0.0.1",
				       "STUNNER_AUTH_TYPE=plaintext",
				       "STUNNER_USERNAME=12user34",
				       "STUNNER_PORT=3478",
				       "STUNNER_REALM=stunner.l7mp.io",
				       "STUNNER_LOGLEVEL=all:INFO",
				       NULL };

static struct conf *load_corpus(const char *name, struct conf_diags *d)
{
	char path[512];
	struct conf *c = NULL;
	struct conf_load_opts o = { .getenv = t_getenv, .now = T_NOW };
	snprintf(path, sizeof(path), "%s/stunner/%s", CONF_SAMPLES, name);
	memset(d, 0, sizeof(*d));
	t_env_pairs = pod_env;
	int rc = conf_load_file(path, &o, &c, d);
	t_env_pairs = NULL;
	if (rc != 0)
		t_dump(d);
	assert_int_equal(rc, 0);
	return c;
}

/* The values stunnerd's own tests assert (l7mp/stunner config_test.go checkDefaultConfig,
 * the operator's render_pipeline_managed_mode_test.go) and what its parser makes of the
 * image's default config. */
static void test_corpus_values(void **state)
{
	(void)state;
	struct conf_diags d;
	struct conf *c = load_corpus("config-test-v1.json", &d);
	assert_string_equal(c->admin.name, "ns1/tester");
	assert_string_equal(c->admin.loglevel, "all:ERROR");
	assert_string_equal(c->auth.users[0].username, "user1");
	assert_string_equal(c->auth.users[0].password, "passwd1");
	assert_string_equal(c->listeners[0].address, "1.2.3.4");
	assert_int_equal(c->listeners[0].port, 3478);
	assert_int_equal(c->clusters[0].type, CONF_CLUSTER_STATIC);
	assert_string_equal(c->clusters[0].endpoints[0].text, "1.2.3.5");
	conf_free(c);
	conf_diags_free(&d);

	c = load_corpus("config-test-dollar-passwd.json", &d);
	assert_string_equal(c->auth.users[0].password, "pa$ss");
	conf_free(c);
	conf_diags_free(&d);

	c = load_corpus("operator-managed-static.json", &d);
	assert_string_equal(c->admin.name, "testnamespace/gateway-1");
	assert_string_equal(c->admin.loglevel, "all:INFO"); /* "testloglevel" applies nothing */
	assert_string_equal(c->auth.realm, "testrealm");
	assert_string_equal(c->listeners[0].address, "10.0.0.1");
	assert_int_equal(c->listeners[0].port, 1);
	assert_string_equal(c->listeners[0].public_address, "1.2.3.4");
	assert_int_equal(c->listeners[1].port, 2);
	assert_int_equal(c->listeners[1].n_routes, 0);
	assert_int_equal(c->clusters[0].n_endpoints, 5);
	conf_free(c);
	conf_diags_free(&d);

	c = load_corpus("operator-missing-backend.json", &d);
	assert_int_equal(c->listeners[0].n_routes, 2);
	assert_int_equal(c->n_unknown_routes, 1);
	assert_int_equal(c->clusters[0].endpoints[0].port_min, 5000);
	assert_int_equal(c->clusters[0].endpoints[0].port_max, 5010);
	conf_free(c);
	conf_diags_free(&d);

	/* credentials are restored from before expansion (STUNner #102), the rest expanded */
	c = load_corpus("stunnerd-image-default.conf", &d);
	assert_int_equal(c->auth.type, CONF_AUTH_STATIC);
	assert_string_equal(c->auth.users[0].username, "$STUNNER_USERNAME");
	assert_string_equal(c->auth.realm, "stunner.l7mp.io");
	assert_string_equal(c->listeners[1].address, "10.0.0.1");
	assert_int_equal(c->listeners[1].port, 3478);
	assert_string_equal(c->admin.metrics_endpoint, "http://0.0.0.0:8080/metrics");
	conf_free(c);
	conf_diags_free(&d);

	c = load_corpus("edge-merge-keys.yaml", &d);
	assert_int_equal(c->listeners[1].protocol, CONF_PROTO_TURN_TCP);
	assert_string_equal(c->listeners[1].address, "10.0.0.7");
	assert_string_equal(c->listeners[1].routes[0], "media");
	conf_free(c);
	conf_diags_free(&d);

	c = load_corpus("edge-yaml11.yaml", &d);
	assert_string_equal(c->admin.name, "true");
	assert_string_equal(c->auth.users[0].password, "31");
	conf_free(c);
	conf_diags_free(&d);

	c = load_corpus("edge-duplicates.yaml", &d);
	assert_string_equal(c->admin.name, "second");
	assert_int_equal(c->listeners[0].port, 3478);
	conf_free(c);
	conf_diags_free(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unset_stunner_addr),
		cmocka_unit_test(test_empty_means_default),
		cmocka_unit_test(test_unknown_route_warns),
		cmocka_unit_test(test_v1alpha1),
		cmocka_unit_test(test_duplicate_keys),
		cmocka_unit_test(test_endpoint_ranges),
		cmocka_unit_test(test_ports_and_urls),
		cmocka_unit_test(test_yaml11_scalars),
		cmocka_unit_test(test_merge_keys),
		cmocka_unit_test(test_loglevel_items),
		cmocka_unit_test(test_y11_resolver),
		cmocka_unit_test(test_corpus_values),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
