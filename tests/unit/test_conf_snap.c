/* Unit tests for snapshot blobs: round trip, determinism, corruption, allowlist, auth material. */
#include "tests/unit/test_conf_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>

#include <openssl/evp.h>

#include "conf/snap_format.h"
#include "conf/snapshot.h"

struct blob {
	struct conf *c;
	void *b;
	size_t len;
	const struct snap *s;
};

static int resolve_fixed(void *ctx, const char *name, struct sockaddr_storage *out, size_t max,
			 size_t *n)
{
	(void)ctx;
	(void)max;
	*n = 0;
	if (strcmp(name, "rec.example") != 0 && strcmp(name, "lo.example") != 0)
		return -EHOSTUNREACH;
	struct sockaddr_in *a = (struct sockaddr_in *)&out[0];
	memset(out, 0, sizeof(*out));
	a->sin_family = AF_INET;
	inet_pton(AF_INET, name[0] == 'r' ? "10.200.0.9" : "127.0.0.1", &a->sin_addr);
	*n = 1;
	return 0;
}

static void build(struct blob *x, const char *text, uint64_t gen)
{
	struct conf_diags d;
	memset(x, 0, sizeof(*x));
	int rc = t_load(text, &x->c, &d);
	if (rc != 0)
		t_dump(&d);
	assert_int_equal(rc, 0);
	assert_int_equal(conf_resolve_clusters(x->c, resolve_fixed, NULL, &d), 0);
	conf_diags_free(&d);
	struct snap_build_params p = { .generation = gen };
	for (int i = 0; i < SNAP_NONCE_KEY_LEN; i++)
		p.nonce_key[i] = (uint8_t)i;
	assert_int_equal(snap_build(x->c, &p, &x->b, &x->len), 0);
	assert_int_equal(snap_open(x->b, x->len, &x->s), 0);
}

static void unbuild(struct blob *x)
{
	snap_blob_free(x->b, x->len);
	conf_free(x->c);
}

static const char cfg_main[] =
	"version: v1\n"
	"admin:\n  loglevel: \"all:DEBUG\"\n  log_format: json\n  drain_timeout: 12\n"
	"  alternate_server: \"[2001:db8::7]:3479\"\n"
	"auth:\n  type: ephemeral\n  realm: r.example\n  credentials: {secret: cur}\n"
	"  previous_secret: prev\n  previous_secret_until: 1700000100\n"
	"limits:\n  max_allocations: 77\n  nonce_lifetime: 99\n  unauth_rate: 7\n"
	"  unauth_prefix_v6: 48\n"
	"listeners:\n"
	"  - name: open\n    address: 192.0.2.1\n    routes: [any, any6]\n"
	"  - name: pods\n    address: 2001:db8::1\n    public_address: turn.example\n"
	"    public_port: 443\n    bind_address: \"::\"\n    port: 5000\n"
	"    relay_port_min: 40000\n    relay_port_max: 40100\n    max_allocations: 250\n"
	"    relay_address_mask: \"2001:db8:ffff::7\"\n"
	"    routes: [pods, lo, dns]\n"
	"    auth:\n      type: static\n      users:\n"
	"        - {username: zed, password: zpw}\n        - {username: amy, password: apw}\n"
	"  - name: none\n    address: 192.0.2.1\n    port: 3480\n"
	"clusters:\n"
	"  - name: any\n    endpoints: [\"0.0.0.0/0\"]\n"
	"  - name: any6\n    endpoints: [\"::/0\"]\n"
	"  - name: pods\n    endpoints: [\"10.42.0.0/16:<40000-49999>\", \"10.96.0.1\", "
	"\"10.96.0.2:<53-53>\", \"10.96.0.2:<80-80>\", \"fd00::/8:<1000-2000>\"]\n"
	"  - name: lo\n    endpoints: [\"127.0.0.1\", \"::1\", \"169.254.169.254\"]\n"
	"  - name: dns\n    type: STRICT_DNS\n    endpoints: [rec.example, lo.example, nx.example]\n";

static struct sockaddr_storage sa(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	struct sockaddr_in *a = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *b = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, ip, &a->sin_addr) == 1) {
		a->sin_family = AF_INET;
		a->sin_port = htons(port);
	} else {
		assert_int_equal(inet_pton(AF_INET6, ip, &b->sin6_addr), 1);
		b->sin6_family = AF_INET6;
		b->sin6_port = htons(port);
	}
	return ss;
}

static bool allowed(const struct snap *s, uint32_t l, const char *ip, uint16_t port)
{
	struct sockaddr_storage ss = sa(ip, port);
	return snap_peer_allowed(s, l, (struct sockaddr *)&ss, CONF_CPROTO_UDP);
}

static bool ip_allowed(const struct snap *s, uint32_t l, const char *ip)
{
	struct sockaddr_storage ss = sa(ip, 0);
	return snap_peer_ip_allowed(s, l, (struct sockaddr *)&ss, CONF_CPROTO_UDP);
}

static void test_round_trip(void **state)
{
	(void)state;
	struct blob x;
	build(&x, cfg_main, 42);
	const struct snap *s = x.s;
	assert_int_equal(snap_generation(s), 42);
	assert_int_equal(snap_size(s), x.len);
	assert_int_equal(snap_listener_count(s), 3);
	struct snap_listener l;
	assert_int_equal(snap_listener_get(s, 1, &l), 0);
	assert_string_equal(l.name, "pods");
	assert_int_equal(l.protocol, CONF_PROTO_TURN_UDP);
	assert_int_equal(l.port, 5000);
	assert_string_equal(l.address, "2001:db8::1");
	assert_int_equal(l.relay_addr.ss_family, AF_INET6);
	assert_string_equal(l.public_address, "turn.example");
	assert_int_equal(l.public_port, 443);
	assert_string_equal(l.bind_address, "::");
	assert_int_equal(l.bind_addr.ss_family, AF_INET6);
	assert_int_equal(l.relay_port_min, 40000);
	assert_int_equal(l.relay_port_max, 40100);
	assert_int_equal(l.max_allocations, 250);
	assert_int_equal(l.relay_mask.ss_family, AF_INET6);
	struct sockaddr_storage mask = sa("2001:db8:ffff::7", 0);
	assert_memory_equal(&((struct sockaddr_in6 *)&l.relay_mask)->sin6_addr,
			    &((struct sockaddr_in6 *)&mask)->sin6_addr, 16);
	assert_int_equal(l.auth_idx, 1);
	assert_null(l.cert_pem);
	assert_int_equal(snap_listener_get(s, 0, &l), 0);
	assert_int_equal(l.auth_idx, 0);
	assert_string_equal(l.public_address, "");
	assert_string_equal(l.bind_address, "");
	assert_int_equal(l.bind_addr.ss_family, AF_UNSPEC);
	assert_int_equal(l.relay_mask.ss_family, AF_UNSPEC);
	assert_int_equal(l.relay_port_min, 49152);
	assert_int_equal(l.max_allocations, 0);
	assert_int_equal(snap_listener_get(s, 3, &l), -ENOENT);
	uint32_t idx = 9;
	assert_int_equal(snap_listener_find(s, "none", &idx), 0);
	assert_int_equal(idx, 2);
	assert_int_equal(snap_listener_find(s, "nope", &idx), -ENOENT);
	assert_int_equal(snap_cluster_count(s), 5);
	assert_string_equal(snap_cluster_name(s, 2), "pods");
	assert_null(snap_cluster_name(s, 5));
	const struct snap_limits *lim = snap_limits(s);
	assert_int_equal(lim->max_allocations, 77);
	assert_int_equal(lim->nonce_lifetime, 99);
	assert_int_equal(lim->unauth_rate, 7);
	assert_int_equal(lim->unauth_burst, 100);
	assert_int_equal(lim->unauth_prefix_v4, 24);
	assert_int_equal(lim->unauth_prefix_v6, 48);
	assert_int_equal(lim->unauth_trust_window, 3600);
	assert_int_equal(lim->unauth_trust_credits, 1000);
	assert_int_equal(lim->allocation_lifetime, 600);
	assert_int_equal(lim->permission_lifetime, 300);
	assert_int_equal(snap_nonce_key(s)[31], 31);
	assert_string_equal(snap_log_spec(s), "all:DEBUG");
	assert_int_equal(snap_log_format(s), CONF_LOG_JSON);
	assert_int_equal(snap_drain_timeout(s), 12);
	struct sockaddr_storage alt;
	assert_int_equal(snap_alternate_server(s, &alt), 0);
	assert_int_equal(alt.ss_family, AF_INET6);
	assert_int_equal(ntohs(((struct sockaddr_in6 *)&alt)->sin6_port), 3479);
	unbuild(&x);
}

static void test_tls_material(void **state)
{
	(void)state;
	char text[1024];
	snprintf(text, sizeof(text),
		 T_HEAD "listeners:\n  - name: t\n    protocol: TURN-DTLS\n"
			"    address: 127.0.0.1\n    cert_file: %s/test-cert.pem\n"
			"    key_file: %s/test-key.pem\n",
		 CONF_SAMPLES, CONF_SAMPLES);
	struct blob x;
	build(&x, text, 1);
	struct snap_listener l;
	assert_int_equal(snap_listener_get(x.s, 0, &l), 0);
	assert_int_equal(l.protocol, CONF_PROTO_TURN_DTLS);
	assert_non_null(l.cert_pem);
	assert_int_equal(l.cert_pem_len, x.c->listeners[0].cert_pem_len);
	assert_memory_equal(l.cert_pem, x.c->listeners[0].cert_pem, l.cert_pem_len);
	assert_memory_equal(l.key_pem, x.c->listeners[0].key_pem, l.key_pem_len);
	struct sockaddr_storage alt;
	assert_int_equal(snap_alternate_server(x.s, &alt), -ENOENT);
	unbuild(&x);
}

static void test_allowlist(void **state)
{
	(void)state;
	struct blob x;
	build(&x, cfg_main, 1);
	const struct snap *s = x.s;
	/* listener 0: 0.0.0.0/0 and ::/0 never admit special-purpose peers */
	assert_true(allowed(s, 0, "8.8.8.8", 53));
	assert_true(allowed(s, 0, "10.1.2.3", 1));
	assert_true(allowed(s, 0, "2600::5", 9));
	assert_false(allowed(s, 0, "::ffff:8.8.8.8", 53)); /* mapped: sent as IPv4, refused */
	assert_true(allowed(s, 0, "100.64.0.1", 9));  /* shared address space: pods */
	assert_true(allowed(s, 0, "fd00:ec2::253", 9)); /* ULA next to the metadata */
	static const char *const special[] = {
		"0.0.0.0",
		"0.1.2.3",
		"127.0.0.1",
		"127.1.2.3",
		"169.254.169.254",
		"169.254.1.1",
		"224.0.0.1",
		"239.1.2.3",
		"240.0.0.1",
		"255.255.255.255",
		"::",
		"::1",
		"fe80::1",
		"fe80::1234:5678",
		"ff02::1",
		"ff05::2",
		"::ffff:127.0.0.1",
		"::ffff:169.254.169.254",
		"::ffff:0.0.0.0",
		"::ffff:255.255.255.255",
		"::127.0.0.1",
		"::169.254.169.254",
		"::2",
		"2002:7f00:1::1",
		"2002:a9fe:a9fe::",
		"2002:e000:1::",
		"64:ff9b::7f00:1",
		"64:ff9b::a9fe:a9fe",
		"64:ff9b::ffff:ffff",
		/* IPv4 disguises of an ordinary address, and the rest of the registries */
		"::ffff:8.8.8.8",
		"64:ff9b::808:808",
		"2002:0808:0808::1",
		"2001:db8::5",
		"fd00:ec2::254",
		"100.100.100.200",
		"fd20:ce::254",
		"fec0::1",
		"64:ff9b:1::1",
		"::ffff:0:0:1",
		"192.0.0.170",
		"198.18.0.1",
	};
	for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++) {
		if (allowed(s, 0, special[i], 5000) || ip_allowed(s, 0, special[i]))
			fail_msg("special %s admitted by a broad prefix", special[i]);
	}
	/* listener 1: explicit endpoints, port ranges, explicit specials, DNS */
	assert_true(allowed(s, 1, "10.42.1.1", 40000));
	assert_true(allowed(s, 1, "10.42.1.1", 49999));
	assert_false(allowed(s, 1, "10.42.1.1", 39999));
	assert_false(allowed(s, 1, "10.42.1.1", 50000));
	assert_true(ip_allowed(s, 1, "10.42.1.1")); /* permission: IP only */
	assert_false(ip_allowed(s, 1, "10.43.0.1"));
	assert_true(allowed(s, 1, "10.96.0.1", 1));
	assert_true(allowed(s, 1, "10.96.0.2", 53));
	assert_true(allowed(s, 1, "10.96.0.2", 80));
	assert_false(allowed(s, 1, "10.96.0.2", 81));
	assert_false(allowed(s, 1, "10.96.0.3", 53));
	assert_true(allowed(s, 1, "fd12::1", 1500));
	assert_false(allowed(s, 1, "fd12::1", 999));
	/* literal family: an IPv6 peer never matches an IPv4 entry */
	assert_false(allowed(s, 1, "::ffff:10.96.0.1", 7));
	assert_false(allowed(s, 1, "64:ff9b::a60:1", 7));
	assert_false(allowed(s, 1, "2002:a60:1::1", 7));
	assert_false(allowed(s, 1, "::10.96.0.1", 7));
	assert_true(allowed(s, 1, "127.0.0.1", 9)); /* listed explicitly */
	assert_false(allowed(s, 1, "::ffff:127.0.0.1", 9));
	assert_false(allowed(s, 1, "64:ff9b::7f00:1", 9));
	assert_false(allowed(s, 1, "127.0.0.2", 9));
	assert_true(allowed(s, 1, "::1", 9));
	assert_true(allowed(s, 1, "169.254.169.254", 80));
	assert_false(allowed(s, 1, "169.254.169.253", 80));
	assert_true(allowed(s, 1, "10.200.0.9", 1)); /* DNS answer */
	assert_false(allowed(s, 1, "8.8.8.8", 53));
	/* listener 2: no routes, nothing */
	assert_false(allowed(s, 2, "8.8.8.8", 53));
	assert_false(allowed(s, 9, "8.8.8.8", 53));
	uint32_t cl = 99;
	struct sockaddr_storage p = sa("10.96.0.1", 5);
	assert_int_equal(snap_peer_match(s, 1, (struct sockaddr *)&p, CONF_CPROTO_UDP, true, &cl), 0);
	assert_string_equal(snap_cluster_name(s, cl), "pods");
	p = sa("10.200.0.9", 5);
	assert_int_equal(snap_peer_match(s, 1, (struct sockaddr *)&p, CONF_CPROTO_UDP, true, &cl), 0);
	assert_string_equal(snap_cluster_name(s, cl), "dns");
	p = sa("8.8.8.8", 5);
	assert_int_equal(snap_peer_match(s, 1, (struct sockaddr *)&p, CONF_CPROTO_UDP, true, &cl), -EACCES);
	assert_int_equal(snap_peer_match(s, 7, (struct sockaddr *)&p, CONF_CPROTO_UDP, true, &cl), -ENOENT);
	struct sockaddr un = { .sa_family = AF_UNIX };
	assert_int_equal(snap_peer_match(s, 1, &un, CONF_CPROTO_UDP, true, &cl), -EAFNOSUPPORT);
	unbuild(&x);
}

/* Each cluster admits only peers of its protocol; where a UDP and a TCP cluster cover one
 * address (host or prefix, same ports), the lookup finds the one of the peer's transport. */
static const char cfg_proto[] =
	"version: v1\n"
	"auth:\n  type: static\n  credentials: {username: u, password: p}\n"
	"listeners:\n"
	"  - name: both\n    address: 192.0.2.1\n    routes: [media, api, media6]\n"
	"  - name: udp\n    address: 192.0.2.1\n    port: 3480\n    routes: [media]\n"
	"clusters:\n"
	"  - name: media\n    endpoints: [\"10.0.0.0/8\", \"10.1.1.1\"]\n"
	"  - name: api\n    protocol: TCP\n    endpoints: [\"10.0.0.0/8\", \"10.1.1.1\", "
	"\"10.2.0.0/16:<443-443>\"]\n"
	"  - name: media6\n    protocol: UDP\n    endpoints: [\"fd00::/8\"]\n";

static int proto_match(const struct snap *s, uint32_t l, const char *ip, uint16_t port,
		       enum conf_cluster_proto proto, uint32_t *cl)
{
	struct sockaddr_storage ss = sa(ip, port);
	return snap_peer_match(s, l, (struct sockaddr *)&ss, proto, true, cl);
}

static void test_allowlist_proto(void **state)
{
	(void)state;
	struct blob x;
	struct snap_listener l;
	uint32_t cl = 99;
	build(&x, cfg_proto, 1);
	const struct snap *s = x.s;
	assert_int_equal(proto_match(s, 0, "10.9.9.9", 53, CONF_CPROTO_UDP, &cl), 0);
	assert_string_equal(snap_cluster_name(s, cl), "media");
	assert_int_equal(proto_match(s, 0, "10.9.9.9", 53, CONF_CPROTO_TCP, &cl), 0);
	assert_string_equal(snap_cluster_name(s, cl), "api");
	assert_int_equal(proto_match(s, 0, "10.1.1.1", 80, CONF_CPROTO_UDP, &cl), 0);
	assert_string_equal(snap_cluster_name(s, cl), "media");
	assert_int_equal(proto_match(s, 0, "10.1.1.1", 80, CONF_CPROTO_TCP, &cl), 0);
	assert_string_equal(snap_cluster_name(s, cl), "api");
	assert_int_equal(proto_match(s, 0, "fd00::1", 80, CONF_CPROTO_UDP, &cl), 0);
	assert_int_equal(proto_match(s, 0, "fd00::1", 80, CONF_CPROTO_TCP, &cl), -EACCES);
	/* listener udp: only the UDP cluster */
	assert_int_equal(proto_match(s, 1, "10.9.9.9", 53, CONF_CPROTO_UDP, &cl), 0);
	assert_int_equal(proto_match(s, 1, "10.9.9.9", 53, CONF_CPROTO_TCP, &cl), -EACCES);
	assert_int_equal(proto_match(s, 1, "10.1.1.1", 6443, CONF_CPROTO_TCP, &cl), -EACCES);
	assert_true(snap_peer_ip_allowed(s, 1, (struct sockaddr *)&(struct sockaddr_storage){ 0 },
					 CONF_CPROTO_UDP) == false);
	assert_int_equal(snap_listener_get(s, 0, &l), 0);
	assert_true(l.tcp_routes);
	assert_int_equal(snap_listener_get(s, 1, &l), 0);
	assert_false(l.tcp_routes);
	unbuild(&x);
}

/* listeners[].proxy_protocol through the snapshot: versions and trusted CIDRs, matched with
 * an IPv4-mapped IPv6 source as its IPv4 (a dual-stack socket's view). */
static bool pp_trusted(const struct snap_listener *l, const char *ip)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	if (strchr(ip, ':')) {
		ss.ss_family = AF_INET6;
		inet_pton(AF_INET6, ip, &((struct sockaddr_in6 *)&ss)->sin6_addr);
	} else {
		ss.ss_family = AF_INET;
		inet_pton(AF_INET, ip, &((struct sockaddr_in *)&ss)->sin_addr);
	}
	return snap_listener_pp_trusted(l, (struct sockaddr *)&ss);
}

static void test_proxy_protocol(void **state)
{
	(void)state;
	struct blob x;
	struct snap_listener l;
	build(&x,
	      "version: v1\nauth:\n  type: ephemeral\n  credentials: {secret: s}\n"
	      "listeners:\n  - name: t\n    protocol: TURN-TCP\n    address: 192.0.2.1\n"
	      "    proxy_protocol:\n      versions: [2]\n"
	      "      trusted: [\"10.0.0.0/8\", \"192.168.1.7\", \"fd00::/8\", \"172.16.0.0/13\"]\n"
	      "  - name: u\n    protocol: TURN-UDP\n    address: 192.0.2.1\n",
	      1);
	assert_int_equal(snap_listener_get(x.s, 0, &l), 0);
	assert_int_equal(l.pp_versions, 2);
	assert_int_equal(l.pp_n_trusted, 4);
	assert_true(pp_trusted(&l, "10.255.0.1"));
	assert_false(pp_trusted(&l, "11.0.0.1"));
	assert_true(pp_trusted(&l, "192.168.1.7"));
	assert_false(pp_trusted(&l, "192.168.1.8"));
	assert_true(pp_trusted(&l, "::ffff:10.1.2.3"));
	assert_true(pp_trusted(&l, "fd12::1"));
	assert_false(pp_trusted(&l, "fe80::1"));
	assert_true(pp_trusted(&l, "172.23.255.255"));
	assert_false(pp_trusted(&l, "172.24.0.0"));
	assert_int_equal(snap_listener_get(x.s, 1, &l), 0);
	assert_int_equal(l.pp_versions, 0);
	assert_false(pp_trusted(&l, "10.0.0.1"));
	unbuild(&x);
}

static void test_dns_special_not_admitted(void **state)
{
	(void)state;
	struct blob x;
	build(&x,
	      T_HEAD "listeners:\n  - name: l\n    address: 1.2.3.4\n    routes: [d]\n"
		     "clusters:\n  - name: d\n    type: STRICT_DNS\n    endpoints: [lo.example]\n",
	      1);
	assert_false(allowed(x.s, 0, "127.0.0.1", 5)); /* special via DNS: never */
	unbuild(&x);
	build(&x,
	      T_HEAD "listeners:\n  - name: l\n    address: 1.2.3.4\n    routes: [s]\n"
		     "clusters:\n  - name: s\n    endpoints: [\"127.0.0.0/8\", \"fe80::/10\", "
		     "\"2002:7f00::/24\"]\n",
	      1);
	assert_true(allowed(x.s, 0, "127.0.0.1", 5));
	assert_true(allowed(x.s, 0, "127.9.9.9", 5));
	assert_true(allowed(x.s, 0, "fe80::9", 5));
	assert_false(allowed(x.s, 0, "169.254.169.254", 5));
	unbuild(&x);
}

/* admit_special names the categories a cluster's endpoints admit where they cover them;
 * a category it does not name stays refused, even inside an admitted neighbour. */
static void test_admit_special(void **state)
{
	(void)state;
	struct blob x;
	build(&x,
	      T_HEAD "listeners:\n  - name: l\n    address: 1.2.3.4\n    routes: [open, meta]\n"
		     "clusters:\n  - name: open\n    endpoints: [\"0.0.0.0/0\", \"::/0\"]\n"
		     "  - name: meta\n    admit_special: [metadata]\n"
		     "    endpoints: [\"169.254.0.0/16\", \"fd00::/8\"]\n",
	      1);
	assert_true(allowed(x.s, 0, "8.8.8.8", 5));
	assert_false(allowed(x.s, 0, "100.100.100.200", 80)); /* only through 0.0.0.0/0 */
	assert_true(allowed(x.s, 0, "169.254.169.254", 80));
	assert_true(allowed(x.s, 0, "fd00:ec2::254", 80));
	assert_true(allowed(x.s, 0, "169.254.1.1", 80)); /* link-local: inside the endpoint */
	assert_true(allowed(x.s, 0, "fd20:ce::254", 80)); /* fd00::/8 holds it too */
	assert_false(allowed(x.s, 0, "127.0.0.1", 80));
	unbuild(&x);
	/* an explicit endpoint admits its own categories only */
	build(&x,
	      T_HEAD "listeners:\n  - name: l\n    address: 1.2.3.4\n    routes: [ll]\n"
		     "clusters:\n  - name: ll\n    endpoints: [\"169.254.0.0/16\", \"fd00::/8\"]\n",
	      1);
	assert_true(allowed(x.s, 0, "169.254.1.1", 80));
	assert_false(allowed(x.s, 0, "169.254.169.254", 80));
	assert_false(allowed(x.s, 0, "fd00:ec2::254", 80));
	assert_true(allowed(x.s, 0, "fd00:ec2::253", 80));
	unbuild(&x);
	/* DNS: a special answer only through a category the cluster names */
	build(&x,
	      T_HEAD "listeners:\n  - name: l\n    address: 1.2.3.4\n    routes: [d]\n"
		     "clusters:\n  - name: d\n    type: STRICT_DNS\n    admit_special: [loopback]\n"
		     "    endpoints: [lo.example]\n",
	      1);
	assert_true(allowed(x.s, 0, "127.0.0.1", 5));
	unbuild(&x);
}

static void test_auth_material(void **state)
{
	(void)state;
	struct blob x;
	build(&x, cfg_main, 1);
	const struct snap *s = x.s;
	assert_int_equal(snap_auth_count(s), 2);
	struct snap_auth a;
	assert_int_equal(snap_auth_get(s, 0, &a), 0);
	assert_int_equal(a.type, CONF_AUTH_EPHEMERAL);
	assert_string_equal(a.realm, "r.example");
	assert_int_equal(a.realm_len, 9);
	assert_int_equal(a.n_secrets, 2);
	struct snap_secret sec[SNAP_MAX_SECRETS];
	assert_int_equal(snap_auth_secrets(s, 0, 1700000099, sec), 2);
	assert_int_equal(sec[0].id, 0);
	assert_int_equal(sec[0].len, 3);
	assert_memory_equal(sec[0].secret, "cur", 3);
	assert_int_equal(sec[1].id, 1);
	assert_memory_equal(sec[1].secret, "prev", 4);
	assert_int_equal(sec[1].deadline, 1700000100);
	assert_int_equal(snap_auth_secrets(s, 0, 1700000100, sec), 1); /* grace over */
	assert_int_equal(sec[0].id, 0);
	assert_int_equal(snap_auth_secrets(s, 1, 0, sec), 0);          /* static block */
	assert_int_equal(snap_auth_secrets(s, 5, 0, sec), 0);

	assert_int_equal(snap_auth_get(s, 1, &a), 0);
	assert_int_equal(a.type, CONF_AUTH_STATIC);
	assert_string_equal(a.realm, "r.example"); /* inherited */
	assert_int_equal(a.n_users, 2);
	assert_string_equal(snap_auth_user_name(s, 1, 0), "amy"); /* sorted */
	assert_string_equal(snap_auth_user_name(s, 1, 1), "zed");
	assert_null(snap_auth_user_name(s, 1, 2));
	const uint8_t *key;
	size_t kl;
	assert_int_equal(snap_auth_user_key(s, 1, "zed", 3, SNAP_KEY_MD5, &key, &kl), 0);
	assert_int_equal(kl, 16);
	unsigned char want[32];
	unsigned int wl;
	EVP_Digest("zed:r.example:zpw", 17, want, &wl, EVP_md5(), NULL);
	assert_memory_equal(key, want, 16);
	assert_int_equal(snap_auth_user_key(s, 1, "amy", 3, SNAP_KEY_SHA256, &key, &kl), 0);
	assert_int_equal(kl, 32);
	EVP_Digest("amy:r.example:apw", 17, want, &wl, EVP_sha256(), NULL);
	assert_memory_equal(key, want, 32);
	assert_int_equal(snap_auth_user_key(s, 1, "am", 2, SNAP_KEY_MD5, &key, &kl), -ENOENT);
	assert_int_equal(snap_auth_user_key(s, 1, "amyx", 4, SNAP_KEY_MD5, &key, &kl), -ENOENT);
	assert_int_equal(snap_auth_user_key(s, 0, "amy", 3, SNAP_KEY_MD5, &key, &kl), -ENOENT);
	assert_int_equal(snap_auth_user_key(s, 1, "amy", 3, (enum snap_key_alg)7, &key, &kl),
			 -EINVAL);
	unbuild(&x);
}

/* Users left in a non-static auth block (conf_auth.c clears them, a hand-built conf
 * need not) stay out of the snapshot: counted and written by one rule, no overflow. */
static void test_users_static_only(void **state)
{
	(void)state;
	struct blob x;
	build(&x, cfg_main, 1);
	struct conf_user extra[3] = {
		{ .username = "u1", .password = "p1" },
		{ .username = "u2", .password = "p2" },
		{ .username = "u3", .password = "p3" },
	};
	struct conf_auth *eph = &x.c->auth;
	assert_int_equal(eph->type, CONF_AUTH_EPHEMERAL);
	struct conf_user *saved = eph->users;
	size_t saved_n = eph->n_users;
	eph->users = extra;
	eph->n_users = 3;
	struct snap_build_params p = { .generation = 2 };
	void *blob;
	size_t len;
	const struct snap *s;
	assert_int_equal(snap_build(x.c, &p, &blob, &len), 0);
	eph->users = saved;
	eph->n_users = saved_n;
	assert_int_equal(snap_open(blob, len, &s), 0);
	struct snap_auth a;
	assert_int_equal(snap_auth_get(s, 0, &a), 0);
	assert_int_equal(a.n_users, 0);
	const uint8_t *key;
	size_t kl;
	assert_int_equal(snap_auth_user_key(s, 0, "u1", 2, SNAP_KEY_MD5, &key, &kl), -ENOENT);
	assert_int_equal(snap_auth_get(s, 1, &a), 0);
	assert_int_equal(a.n_users, 2);
	assert_string_equal(snap_auth_user_name(s, 1, 0), "amy");
	snap_blob_free(blob, len);
	unbuild(&x);
}

/* RFC 5389 long-term key example: MD5("user:realm:pass"). */
static void test_static_key_vector(void **state)
{
	(void)state;
	struct blob x;
	build(&x,
	      "version: v1\nauth:\n  type: static\n  realm: realm\n"
	      "  credentials: {username: user, password: pass}\n",
	      1);
	const uint8_t *key;
	size_t kl;
	assert_int_equal(snap_auth_user_key(x.s, 0, "user", 4, SNAP_KEY_MD5, &key, &kl), 0);
	static const uint8_t md5[16] = { 0x84, 0x93, 0xfb, 0xc5, 0x3b, 0xa5, 0x82, 0xfb,
					 0x4c, 0x04, 0x4c, 0x45, 0x6b, 0xdc, 0x40, 0xeb };
	assert_memory_equal(key, md5, 16);
	unbuild(&x);
}

static void test_deterministic(void **state)
{
	(void)state;
	struct blob a, b;
	build(&a, cfg_main, 5);
	build(&b, cfg_main, 5);
	assert_int_equal(a.len, b.len);
	assert_memory_equal(a.b, b.b, a.len);
	/* position independence: a copy at another address opens and answers the same */
	void *copy = NULL;
	assert_int_equal(posix_memalign(&copy, 64, a.len), 0);
	memcpy(copy, a.b, a.len);
	snap_blob_free(a.b, a.len);
	a.b = NULL;
	const struct snap *s;
	assert_int_equal(snap_open(copy, a.len, &s), 0);
	assert_true(allowed(s, 1, "10.96.0.1", 1));
	assert_false(allowed(s, 0, "127.0.0.1", 1));
	free(copy);
	unbuild(&a);
	unbuild(&b);
	build(&a, cfg_main, 6);
	build(&b, cfg_main, 5);
	assert_memory_not_equal(a.b, b.b, a.len); /* generation differs */
	unbuild(&a);
	unbuild(&b);
}

/* Prefix records are zeroed before they are filled: their pad bytes go into the blob and
 * the builder drops duplicates by comparing records byte for byte, pad0 included. Enough
 * prefixes to make the builder's tables grow several times, with malloc filling fresh memory
 * with a non-zero byte (glibc's M_PERTURB; ASan's own fill in the sanitizer build). */
static void test_prefix_records_zeroed(void **state)
{
	(void)state;
	char text[8192];
	size_t n = (size_t)snprintf(text, sizeof(text),
				    "version: v1\n"
				    "auth:\n  type: static\n  credentials: {username: u, password: p}\n"
				    "listeners:\n  - name: l\n    address: 192.0.2.1\n"
				    "    routes: [many]\n"
				    "clusters:\n  - name: many\n    endpoints: [\"10.255.0.1\"");
	for (int i = 0; i < 45; i++) /* 40 distinct of each family, the first 5 twice */
		n += (size_t)snprintf(text + n, sizeof(text) - n,
				      ", \"10.0.%d.0/24\", \"fd00:%x::/32\"", i % 40, i % 40);
	n += (size_t)snprintf(text + n, sizeof(text) - n, "]\n");
	assert_true(n < sizeof(text));
	struct blob x;
	(void)mallopt(M_PERTURB, 0x5a); /* refused under ASan, which fills fresh memory itself */
	build(&x, text, 1);
	mallopt(M_PERTURB, 0);
	const struct snap_hdr *h = x.b;
	const struct snap_pfx4 *p4 = (const struct snap_pfx4 *)((const uint8_t *)x.b + h->pfx4.off);
	const struct snap_pfx6 *p6 = (const struct snap_pfx6 *)((const uint8_t *)x.b + h->pfx6.off);
	assert_int_equal(h->pfx4.count, 41);
	assert_int_equal(h->pfx6.count, 40);
	for (uint32_t i = 0; i < h->pfx4.count; i++) {
		assert_int_equal(p4[i].pad0, 0);
		assert_int_equal(p4[i].pad1, 0);
	}
	for (uint32_t i = 0; i < h->pfx6.count; i++) {
		assert_int_equal(p6[i].pad0, 0);
		assert_int_equal(p6[i].pad1, 0);
	}
	assert_true(ip_allowed(x.s, 0, "10.0.39.7"));
	assert_true(ip_allowed(x.s, 0, "fd00:27::1"));
	assert_false(ip_allowed(x.s, 0, "10.0.40.7"));
	unbuild(&x);
}

static void test_corrupt(void **state)
{
	(void)state;
	struct blob x;
	build(&x, cfg_main, 1);
	const struct snap *s;
	uint8_t *b = x.b;
	struct snap_hdr *h = x.b;
	/* truncated */
	for (size_t cut = 0; cut < x.len; cut += 1 + cut / 3)
		assert_int_equal(snap_open(b, cut, &s), -EINVAL);
	assert_int_equal(snap_open(NULL, x.len, &s), -EINVAL);
	assert_int_equal(snap_open(b + 1, x.len - 1, &s), -EINVAL); /* misaligned */
	/* every single-byte flip past the magic is caught by the checksum */
	for (size_t i = 16; i < x.len; i += 7) {
		b[i] ^= 0x40;
		assert_int_equal(snap_open(b, x.len, &s), -EINVAL);
		b[i] ^= 0x40;
	}
	/* version */
	h->version = 99;
	assert_int_equal(snap_open(b, x.len, &s), -EPROTO);
	h->version = SNAP_VERSION;
	/* structural damage with a valid checksum: bad offsets and indexes */
#define FIXED(stmt)                                                 \
	do {                                                        \
		uint8_t *save = malloc(x.len);                      \
		memcpy(save, b, x.len);                             \
		stmt;                                               \
		h->crc = snap_crc32c(b + 16, x.len - 16);           \
		assert_int_equal(snap_open(b, x.len, &s), -EINVAL); \
		memcpy(b, save, x.len);                             \
		free(save);                                         \
	} while (0)
	struct snap_lst_rec *l = (struct snap_lst_rec *)(b + h->listeners.off);
	struct snap_auth_rec *a = (struct snap_auth_rec *)(b + h->auths.off);
	struct snap_pfx4 *p4 = (struct snap_pfx4 *)(b + h->pfx4.off);
	FIXED(h->listeners.off = (uint32_t)x.len);
	FIXED(h->listeners.off += 4);
	FIXED(h->listeners.count = 1000000);
	FIXED(h->pfx4.count += 1);
	FIXED(h->pool_off += 8);
	FIXED(h->log_spec.off = 0);
	FIXED(h->log_spec.len = (uint32_t)x.len);
	FIXED(l[0].name.off = (uint32_t)x.len - 1);
	FIXED(l[0].name.len += 1); /* no NUL where it should be */
	FIXED(l[1].name.off = 8); /* points into the header */
	FIXED(l[0].auth_idx = 7);
	FIXED(l[0].v4_count = 1000);
	FIXED(l[0].v4_hosts = l[0].v4_count + 1);
	FIXED(l[0].protocol = 9);
	FIXED(l[0].relay_min = 60000; l[0].relay_max = 50000);
	FIXED(a[0].secret_count = 3);
	FIXED(a[0].user_first = 100);
	FIXED(a[0].type = 5);
	FIXED(p4[0].cluster = 77);
	FIXED(p4[0].len = 33);
	FIXED(h->auths.count = 0);
	FIXED(h->hdr_size = 8);
#undef FIXED
	assert_int_equal(snap_open(b, x.len, &s), 0); /* restored intact */
	unbuild(&x);
}

static void test_empty_listeners(void **state)
{
	(void)state;
	struct blob x;
	build(&x, "version: v1\nauth:\n  type: none\n", 3);
	assert_int_equal(snap_listener_count(x.s), 0);
	assert_int_equal(snap_cluster_count(x.s), 0);
	struct snap_auth a;
	assert_int_equal(snap_auth_get(x.s, 0, &a), 0);
	assert_int_equal(a.type, CONF_AUTH_NONE);
	assert_string_equal(a.realm, "stunner.l7mp.io");
	assert_string_equal(snap_log_spec(x.s), "all:INFO");
	unbuild(&x);
	struct snap_build_params p = { 0 };
	void *blob;
	size_t len;
	struct conf bad = { 0 };
	assert_int_equal(snap_build(&bad, &p, &blob, &len), -EINVAL);
}

static void test_samples_build(void **state)
{
	(void)state;
	static const char *const names[] = { "headless.yaml", "media-plane.yaml",
					     "multi-listener.json", "extensions.yaml" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char path[512];
		struct conf *c;
		struct conf_diags d = { 0 };
		struct conf_load_opts o = { .getenv = t_getenv, .now = T_NOW };
		t_env_pairs = t_default_env;
		snprintf(path, sizeof(path), "%s/%s", CONF_SAMPLES, names[i]);
		assert_int_equal(conf_load_file(path, &o, &c, &d), 0);
		assert_int_equal(conf_resolve_clusters(c, resolve_fixed, NULL, &d), 0);
		struct snap_build_params p = { .generation = i };
		void *blob;
		size_t len;
		const struct snap *s;
		assert_int_equal(snap_build(c, &p, &blob, &len), 0);
		assert_int_equal(snap_open(blob, len, &s), 0);
		assert_int_equal(snap_listener_count(s), c->n_listeners);
		snap_blob_free(blob, len);
		conf_free(c);
		conf_diags_free(&d);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_tls_material),
		cmocka_unit_test(test_allowlist),
		cmocka_unit_test(test_allowlist_proto),
		cmocka_unit_test(test_proxy_protocol),
		cmocka_unit_test(test_dns_special_not_admitted),
		cmocka_unit_test(test_admit_special),
		cmocka_unit_test(test_auth_material),
		cmocka_unit_test(test_users_static_only),
		cmocka_unit_test(test_static_key_vector),
		cmocka_unit_test(test_deterministic),
		cmocka_unit_test(test_prefix_records_zeroed),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_empty_listeners),
		cmocka_unit_test(test_samples_build),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
