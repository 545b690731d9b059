/* Unit tests for admin.siblings: parsing, the self entry, slice checks with their locations, DNS
 * names, the snapshot and JSON. */
#include "tests/unit/test_conf_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>

#include "conf/snapshot.h"

/* This instance: relay ports 50000-50999. */
#define S_HEAD T_HEAD "admin:\n  relay_port_min: 50000\n  relay_port_max: 50999\n  siblings:\n"

/* The list every replica of a StatefulSet shares: itself by name, one sibling by IP, one
 * by the name of its pod under the headless Service. */
static const char cfg_shared[] = T_HEAD
	"admin:\n  relay_port_min: \"$RELAY_PORT_MIN\"\n  relay_port_max: 50999\n"
	"  siblings:\n"
	"    - address: turngate-0.turngate.stunner.svc.cluster.local\n"
	"      relay_port_min: 50000\n      relay_port_max: 50999\n"
	"    - address: 127.0.0.3\n      relay_port_min: 51000\n      relay_port_max: 51999\n"
	"    - address: turngate-2.turngate.stunner.svc.cluster.local\n"
	"      relay_port_min: \"${SLICE2}\"\n      relay_port_max: 52999\n";

static const char *const env_shared[] = { "STUNNER_ADDR=10.0.0.1", "RELAY_PORT_MIN=50000",
					  "SLICE2=52000", NULL };

static struct conf *load_ok(const char *text)
{
	struct conf *c = NULL;
	struct conf_diags d;
	int rc = t_load(text, &c, &d);

	if (rc != 0 || d.n_warnings != 0)
		t_dump(&d);
	assert_int_equal(rc, 0);
	assert_int_equal(d.n_warnings, 0);
	conf_diags_free(&d);
	return c;
}

static void test_shared_list(void **state)
{
	(void)state;
	t_env_pairs = env_shared;
	struct conf *c = load_ok(cfg_shared);
	const struct conf_sibling *s = c->admin.siblings;

	t_env_pairs = NULL;
	assert_int_equal(c->admin.n_siblings, 3);
	assert_true(s[0].self); /* its slice is this instance's: skipped, no error */
	assert_true(s[0].is_name);
	assert_int_equal(s[0].n_resolved, 0);
	assert_false(s[1].self);
	assert_false(s[1].is_name);
	assert_string_equal(s[1].address, "127.0.0.3");
	assert_int_equal(s[1].relay_port_min, 51000);
	assert_int_equal(s[1].relay_port_max, 51999);
	assert_int_equal(s[1].n_resolved, 1);
	assert_int_equal(s[1].resolved[0].ss_family, AF_INET);
	assert_false(s[2].self);
	assert_true(s[2].is_name);
	assert_int_equal(s[2].relay_port_min, 52000); /* ${SLICE2} */
	assert_int_equal(s[2].n_resolved, 0);         /* until conf_resolve_clusters */
	conf_free(c);
}

static const struct err_case err_cases[] = {
	{ S_HEAD "    - address: 127.0.0.3\n      relay_port_min: 51000\n",
	  "t.yaml:11:7: admin.siblings[0].relay_port_max: missing (expected the first and last "
	  "relay port of the sibling's slice)" },
	{ S_HEAD "    - relay_port_min: 51000\n      relay_port_max: 51999\n",
	  "t.yaml:11:7: admin.siblings[0].address: missing (expected the sibling's relay IP "
	  "address or DNS name)" },
	{ S_HEAD "    - address: \"not an ip!\"\n      relay_port_min: 51000\n"
		 "      relay_port_max: 51999\n",
	  "t.yaml:11:16: admin.siblings[0].address: 'not an ip!' is not an IP address or a DNS "
	  "name (expected the sibling's relay address, e.g. a StatefulSet pod's name under its "
	  "headless Service)" },
	{ S_HEAD "    - address: 224.0.0.1\n      relay_port_min: 51000\n"
		 "      relay_port_max: 51999\n",
	  "t.yaml:11:16: admin.siblings[0].address: '224.0.0.1' is an unspecified, multicast or "
	  "broadcast address (expected a unicast address)" },
	{ S_HEAD "    - address: 127.0.0.3\n      relay_port_min: 52000\n"
		 "      relay_port_max: 51999\n",
	  "t.yaml:12:23: admin.siblings[0].relay_port_min: relay_port_min 52000 is greater than "
	  "relay_port_max 51999 (expected MIN <= MAX)" },
	{ S_HEAD "    - address: 127.0.0.3\n      relay_port_min: 51000\n"
		 "      relay_port_max: 70000\n",
	  "t.yaml:13:23: admin.siblings[0].relay_port_max: 70000 is out of range (1..65535)" },
	{ S_HEAD "    - address: 127.0.0.3\n      relay_port_min: 50500\n"
		 "      relay_port_max: 51499\n",
	  "t.yaml:12:23: admin.siblings[0].relay_port_min: relay ports 50500-51499 overlap this "
	  "instance's admin.relay_port_min..max 50000-50999 (expected exactly this instance's "
	  "slice, or a disjoint one)" },
	{ S_HEAD "    - address: 127.0.0.3\n      relay_port_min: 49000\n"
		 "      relay_port_max: 51999\n",
	  "t.yaml:12:23: admin.siblings[0].relay_port_min: relay ports 49000-51999 overlap this "
	  "instance's admin.relay_port_min..max 50000-50999 (expected exactly this instance's "
	  "slice, or a disjoint one)" },
	{ S_HEAD "    - address: 127.0.0.3\n      relay_port_min: 51000\n"
		 "      relay_port_max: 51999\n"
		 "    - address: 127.0.0.4\n      relay_port_min: 51500\n"
		 "      relay_port_max: 52499\n",
	  "t.yaml:15:23: admin.siblings[1].relay_port_min: relay ports 51500-52499 overlap those "
	  "of admin.siblings[0] (51000-51999) (expected disjoint slices)" },
	{ S_HEAD "    - address: 127.0.0.3\n      relay_port_min: 51000\n"
		 "      relay_port_max: 51999\n"
		 "listeners:\n  - name: a\n    relay_port_min: 51500\n    relay_port_max: 51600\n",
	  "t.yaml:12:23: admin.siblings[0].relay_port_min: relay ports 51000-51999 overlap those "
	  "of listeners[0] (51500-51600) (expected a slice disjoint from this instance's relay "
	  "ports)" },
	{ T_HEAD "admin:\n  siblings: 127.0.0.3\n",
	  "t.yaml:8:13: admin.siblings: found a scalar (expected a list)" },
	{ S_HEAD "    - 127.0.0.3\n",
	  "t.yaml:11:7: admin.siblings[0]: found a scalar (expected a mapping)" },
};

static void test_errors(void **state)
{
	(void)state;
	t_check_errors(err_cases, sizeof(err_cases) / sizeof(err_cases[0]));
}

static void test_unknown_key_and_two_selves(void **state)
{
	(void)state;
	struct conf *c = NULL;
	struct conf_diags d;

	/* Two entries naming this instance's slice (a copy-paste in a shared list): both
	 * are this instance, neither is an overlap. */
	assert_int_equal(t_load(S_HEAD "    - address: 127.0.0.1\n      relay_port_min: 50000\n"
				       "      relay_port_max: 50999\n      weight: 3\n"
				       "    - address: 127.0.0.2\n      relay_port_min: 50000\n"
				       "      relay_port_max: 50999\n",
				&c, &d),
			 0);
	assert_diag(&d, "t.yaml:14:7: warning: admin.siblings[0].weight: unknown key (ignored)");
	assert_true(c->admin.siblings[0].self && c->admin.siblings[1].self);
	assert_int_equal(c->admin.siblings[1].n_resolved, 0);
	conf_diags_free(&d);
	conf_free(c);
}

static int fake_resolve(void *ctx, const char *name, struct sockaddr_storage *out, size_t max,
			size_t *n)
{
	int *calls = ctx;

	(*calls)++;
	*n = 0;
	if (strcmp(name, "turngate-2.turngate.stunner.svc.cluster.local") != 0 || max < 2)
		return -EHOSTUNREACH;
	memset(out, 0, 2 * sizeof(*out));
	((struct sockaddr_in *)&out[0])->sin_family = AF_INET;
	inet_pton(AF_INET, "10.244.1.7", &((struct sockaddr_in *)&out[0])->sin_addr);
	((struct sockaddr_in6 *)&out[1])->sin6_family = AF_INET6;
	inet_pton(AF_INET6, "fd00::7", &((struct sockaddr_in6 *)&out[1])->sin6_addr);
	*n = 2;
	return 0;
}

static const char cfg_dns[] = S_HEAD
	"    - address: turngate-0.turngate.stunner.svc.cluster.local\n"
	"      relay_port_min: 50000\n      relay_port_max: 50999\n"
	"    - address: 127.0.0.3\n      relay_port_min: 51000\n      relay_port_max: 51999\n"
	"    - address: turngate-2.turngate.stunner.svc.cluster.local\n"
	"      relay_port_min: 52000\n      relay_port_max: 52999\n"
	"    - address: turngate-3.turngate.stunner.svc.cluster.local\n"
	"      relay_port_min: 53000\n      relay_port_max: 53999\n";

static void test_dns(void **state)
{
	(void)state;
	struct conf *c = load_ok(cfg_dns);
	struct conf_diags d = { 0 };
	int calls = 0;

	assert_int_equal(conf_resolve_clusters(c, fake_resolve, &calls, &d), 0);
	assert_int_equal(calls, 2); /* not this instance's own name, not the IP */
	assert_int_equal(d.n_errors, 0);
	assert_int_equal(c->admin.siblings[0].n_resolved, 0);
	assert_int_equal(c->admin.siblings[1].n_resolved, 1);
	assert_int_equal(c->admin.siblings[2].n_resolved, 2);
	assert_int_equal(c->admin.siblings[3].n_resolved, 0);
	assert_diag(&d, "t.yaml: warning: admin.siblings[3].address: "
			"'turngate-3.turngate.stunner.svc.cluster.local' does not resolve (matches "
			"nothing until it does)");
	/* Every reload resolves again and replaces the answers. */
	assert_int_equal(conf_resolve_clusters(c, fake_resolve, &calls, &d), 0);
	assert_int_equal(calls, 4);
	assert_int_equal(c->admin.siblings[2].n_resolved, 2);
	conf_diags_free(&d);
	conf_free(c);
}

static void test_snapshot(void **state)
{
	(void)state;
	struct conf *c = load_ok(cfg_dns);
	struct conf_diags d = { 0 };
	struct snap_build_params p = { .generation = 1 };
	const struct snap *s;
	struct snap_sibling sib;
	char txt[INET6_ADDRSTRLEN];
	void *blob;
	size_t len;
	int calls = 0;

	assert_int_equal(conf_resolve_clusters(c, fake_resolve, &calls, &d), 0);
	assert_int_equal(snap_build(c, &p, &blob, &len), 0);
	assert_int_equal(snap_open(blob, len, &s), 0);
	/* 127.0.0.3, then both addresses of turngate-2; neither this instance nor the name
	 * that did not resolve. */
	assert_int_equal(snap_sibling_count(s), 3);
	assert_int_equal(snap_sibling_get(s, 0, &sib), 0);
	assert_int_equal(sib.addr.ss_family, AF_INET);
	inet_ntop(AF_INET, &((struct sockaddr_in *)&sib.addr)->sin_addr, txt, sizeof(txt));
	assert_string_equal(txt, "127.0.0.3");
	assert_int_equal(sib.relay_port_min, 51000);
	assert_int_equal(sib.relay_port_max, 51999);
	assert_int_equal(snap_sibling_get(s, 2, &sib), 0);
	assert_int_equal(sib.addr.ss_family, AF_INET6);
	inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sib.addr)->sin6_addr, txt, sizeof(txt));
	assert_string_equal(txt, "fd00::7");
	assert_int_equal(sib.relay_port_min, 52000);
	assert_int_equal(snap_sibling_get(s, 3, &sib), -ENOENT);
	snap_blob_free(blob, len);
	conf_diags_free(&d);
	conf_free(c);

	/* No siblings: an empty table. */
	c = load_ok(T_HEAD);
	assert_int_equal(snap_build(c, &p, &blob, &len), 0);
	assert_int_equal(snap_open(blob, len, &s), 0);
	assert_int_equal(snap_sibling_count(s), 0);
	snap_blob_free(blob, len);
	conf_free(c);
}

static void test_json(void **state)
{
	(void)state;
	struct conf *c = load_ok(cfg_dns);
	struct conf_diags d = { 0 };
	int calls = 0;
	json_t *cfg, *arr, *e;
	char *txt;

	assert_int_equal(conf_resolve_clusters(c, fake_resolve, &calls, &d), 0);
	cfg = conf_to_json_redacted(c);
	assert_non_null(cfg);
	arr = json_object_get(json_object_get(cfg, "admin"), "siblings");
	assert_int_equal(json_array_size(arr), 4);
	e = json_array_get(arr, 0);
	assert_true(json_is_true(json_object_get(e, "self")));
	assert_int_equal(json_array_size(json_object_get(e, "resolved")), 0);
	e = json_array_get(arr, 2);
	txt = json_dumps(e, JSON_SORT_KEYS | JSON_COMPACT);
	assert_string_equal(txt, "{\"address\":\"turngate-2.turngate.stunner.svc.cluster.local\","
				 "\"relay_port_max\":52999,\"relay_port_min\":52000,"
				 "\"resolved\":[\"10.244.1.7\",\"fd00::7\"],\"self\":false}");
	free(txt);
	json_decref(cfg);
	conf_diags_free(&d);
	conf_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shared_list),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_unknown_key_and_two_selves),
		cmocka_unit_test(test_dns),
		cmocka_unit_test(test_snapshot),
		cmocka_unit_test(test_json),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
