/* turngatectl doctor: walks the troubleshooting order (daemon, listeners, auth, routes, probe) and
 * names the first broken layer. */
#include "config.h"

#include "ctl/ctl.h"
#include "ctl/ctl_doctor.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conf/conf.h"
#include "conf/tls_pem.h"
#include "stun/stun_auth.h"

#define DOCTOR_TTL_S 3600

enum layer {
	L_DAEMON = 0,
	L_LISTENER,
	L_AUTH,
	L_ROUTES,
	L_PROBE
};

static const char *const layer_names[] = {
	"0 daemon and configuration",     "1 listener bound", "2 auth material loaded",
	"3 routes and clusters resolved", "4 live probe",
};

struct doctor {
	const char *sock, *conf_path, *secret, *user, *pass, *rest_name, *peer, *host;
	int timeout_ms;
	json_t *status, *config;    /* the daemon's replies ("status", "config" objects) */
	struct conf *file;          /* -c CONFIG, NULL without */
	json_t *probe_l;            /* running config's listener used for auth and probe */
	struct sockaddr_storage probe_addr;
	bool probe_tcp, have_probe;
	char cred_user[128], cred_pass[STUN_REST_PASSWORD_LEN + 64];
	const char *cred_source;    /* NULL: no credential to test */
};

static void show(const char *check, const char *res, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void show(const char *check, const char *res, const char *fmt, ...)
{
	va_list ap;

	printf("%-24s %-4s ", check, res);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

/* Prints the failing check and the verdict; returns the exit status. */
static int fail(enum layer l, const char *check, const char *detail, const char *fix)
{
	show(check, "FAIL", "%s", detail);
	printf("\nfirst failing layer: %s\nfix: %s\n", layer_names[l], fix);
	return CTL_EXIT_ERROR;
}

static const char *jstr(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));

	return s != NULL ? s : "";
}

static json_t *find_named(json_t *arr, const char *name)
{
	size_t i;
	json_t *v;

	json_array_foreach(arr, i, v) if (strcmp(jstr(v, "name"), name) == 0) return v;
	return NULL;
}

static int ask(struct doctor *d, const char *cmd, json_t **out)
{
	/* status: with the check for other processes on the listeners' ports */
	json_t *req = json_pack("{s:s, s:b}", "cmd", cmd, "ports", strcmp(cmd, "status") == 0);
	const char *why = "";
	int rc = ctl_request(d->sock, req, out, &why);

	json_decref(req);
	return rc;
}

/* Layer 0: the daemon answers, its last reload passed, the given file is valid. */
static int check_daemon(struct doctor *d)
{
	struct conf_diags diags = { 0 };
	json_t *lr, *cfgreply = NULL;
	char detail[512];
	int rc = ask(d, "status", &d->status);

	if (rc < 0) {
		snprintf(detail, sizeof(detail), "admin socket %s: %s", d->sock, strerror(-rc));
		fail(L_DAEMON, "daemon", detail,
		     "start turngated (systemctl start turngate; its "
		     "log says why it stopped), or point -s / $TURNGATE_ADMIN_SOCKET at the "
		     "admin_socket of its config");
		return CTL_EXIT_CONNECT;
	}
	show("daemon", "ok", "turngated %s, pid %lld, generation %lld, config %s",
	     jstr(d->status, "version"), json_integer_value(json_object_get(d->status, "pid")),
	     json_integer_value(json_object_get(d->status, "generation")),
	     jstr(d->status, "config_source"));
	lr = json_object_get(d->status, "last_reload");
	if (strcmp(jstr(lr, "result"), "refused") == 0) {
		snprintf(detail, sizeof(detail), "last reload (%s) refused: %s", jstr(lr, "trigger"),
			 jstr(lr, "reason"));
		return fail(L_DAEMON, "last reload", detail,
			    "fix the configuration (the key named above), then turngatectl "
			    "reload; to remove the listeners on purpose, turngatectl reload "
			    "--force; until then the daemon runs the previous configuration");
	}
	if (!json_is_true(json_object_get(lr, "ok"))) {
		json_t *e = json_array_get(json_object_get(lr, "errors"), 0);

		snprintf(detail, sizeof(detail), "last reload (%s) FAILED: %s", jstr(lr, "trigger"),
			 e != NULL ? json_string_value(e) : "?");
		return fail(L_DAEMON, "last reload", detail,
			    "fix the configuration (turngated -c "
			    "FILE -t lists every problem), then turngatectl reload; until then the "
			    "daemon runs the previous configuration");
	}
	show("last reload", "ok", "%s", jstr(lr, "trigger"));
	if (ask(d, "config", &cfgreply) < 0 ||
	    !json_is_object(json_object_get(cfgreply, "config"))) {
		json_decref(cfgreply);
		return fail(L_DAEMON, "running config", "the daemon did not return its config",
			    "check the daemon's log");
	}
	d->config = json_incref(json_object_get(cfgreply, "config"));
	json_decref(cfgreply);
	if (d->conf_path == NULL)
		return 0;
	rc = conf_load_file(d->conf_path, NULL, &d->file, &diags);
	if (rc < 0) {
		if (diags.n > 0)
			conf_diag_format(&diags.v[0], detail, sizeof(detail));
		else
			snprintf(detail, sizeof(detail), "%s: %s", d->conf_path, strerror(-rc));
		conf_diags_free(&diags);
		return fail(L_DAEMON, "config file", detail,
			    "turngated -c FILE -t lists every "
			    "problem; fix them, then turngatectl reload");
	}
	conf_diags_free(&diags);
	show("config file", "ok", "%s is valid", d->conf_path);
	return 0;
}

/* The address to test for a listener bound at bind_text (status "address": "IP:PORT",
 * "[IP6]:PORT"); buf holds the host part. */
static const char *test_host(const struct doctor *d, const char *bind_text, char *buf, size_t cap)
{
	const char *bind = buf, *colon = strrchr(bind_text, ':');

	if (bind_text[0] == '[' && strchr(bind_text, ']') != NULL)
		snprintf(buf, cap, "%.*s", (int)(strchr(bind_text, ']') - bind_text - 1),
			 bind_text + 1);
	else if (colon != NULL && strchr(bind_text, ':') == colon)
		snprintf(buf, cap, "%.*s", (int)(colon - bind_text), bind_text);
	else
		snprintf(buf, cap, "%s", bind_text);
	if (d->host != NULL)
		return d->host;
	if (bind[0] == '\0' || strcmp(bind, "0.0.0.0") == 0)
		return "127.0.0.1";
	if (strcmp(bind, "::") == 0 || strcmp(bind, "[::]") == 0)
		return "::1";
	return bind;
}

/* One listener: open in the daemon, on the expected port, answering STUN. */
/* A served certificate past or within CONF_TLS_EXPIRY_WARN_DAYS of its notAfter: a
 * warning line (the listener works; its clients will not for long). */
static void warn_expiry(const char *name, int64_t not_after)
{
	int64_t left = not_after - (int64_t)time(NULL);
	char check[64];

	if (not_after == 0 || left >= (int64_t)CONF_TLS_EXPIRY_WARN_DAYS * 86400)
		return;
	snprintf(check, sizeof(check), "certificate %s", name);
	if (left < 0)
		show(check, "WARN", "expired %lld days ago: clients that verify it refuse the "
		     "handshake; renew it and turngatectl reload", (long long)(-left / 86400));
	else
		show(check, "WARN", "expires in %lld days (under %d): renew it and turngatectl "
		     "reload", (long long)(left / 86400), CONF_TLS_EXPIRY_WARN_DAYS);
}

static int check_one_listener(struct doctor *d, const char *name, const char *proto,
			      unsigned want_port)
{
	json_t *st = find_named(json_object_get(d->status, "listeners"), name);
	struct sockaddr_storage to;
	char check[64], detail[256], hostbuf[128], info[400] = "";
	const char *host;
	bool tcp = strcmp(proto, "TURN-TCP") == 0, dtls = strcmp(proto, "TURN-DTLS") == 0;
	bool secure = dtls || strcmp(proto, "TURN-TLS") == 0;
	int64_t not_after = 0;
	unsigned port;
	int rc;

	snprintf(check, sizeof(check), "listener %s", name);
	if (!tcp && !secure && strcmp(proto, "TURN-UDP") != 0) {
		show(check, "skip", "%s is not checked by doctor", proto);
		return 0;
	}
	if (st == NULL) {
		snprintf(detail, sizeof(detail), "%s %s:%u is not open in the daemon", proto,
			 d->file ? "configured" : "running config", want_port);
		return fail(L_LISTENER, check, detail,
			    "if the file differs from the running "
			    "config, run turngatectl reload; otherwise the daemon's log names the "
			    "bind error (port in use, address not local, port < 1024 without "
			    "CAP_NET_BIND_SERVICE)");
	}
	port = (unsigned)json_integer_value(json_object_get(st, "port"));
	if (json_is_string(json_object_get(st, "shared_with"))) {
		snprintf(detail, sizeof(detail), "%s port %u is also held by %s: it answers part "
			 "of the clients", proto, port, jstr(st, "shared_with"));
		return fail(L_LISTENER, check, detail,
			    "stop the other server, or move one of the two to another port");
	}
	if (want_port != 0 && port != want_port) {
		snprintf(detail, sizeof(detail),
			 "the config says port %u, the daemon listens on "
			 "%u",
			 want_port, port);
		return fail(L_LISTENER, check, detail,
			    "turngatectl reload to apply the file, or "
			    "correct the port in the file (and the load balancer's target port)");
	}
	host = test_host(d, jstr(st, "address"), hostbuf, sizeof(hostbuf));
	rc = doctor_addr(host, (uint16_t)port, &to);
	if (rc == 0 && secure)
		rc = doctor_tls_binding(&to, dtls, NULL, d->timeout_ms, info, sizeof(info),
					&not_after);
	else if (rc == 0)
		rc = doctor_stun_binding(&to, tcp, d->timeout_ms);
	if (rc < 0) {
		snprintf(detail, sizeof(detail), "%s %s:%u: no STUN answer (%s)", proto, host, port,
			 strerror(-rc));
		return fail(
			L_LISTENER, check, detail,
			secure ? "the handshake or the Binding "
				 "failed: the daemon's log names handshake errors; check the "
				 "certificate and key (turngatectl check), a firewall rule on the "
				 "port, and that --host reaches the bind address"
			       : "the daemon holds "
				 "the socket but nothing answers: check turngatectl workers, a firewall "
				 "rule on the port (nft list ruleset), and that --host reaches the bind "
				 "address");
	}
	show(check, "ok", "%s %s:%u answers a STUN Binding%s", proto, host, port, info);
	if (secure)
		warn_expiry(name, not_after);
	if (!d->have_probe && !secure) {	/* the allocation probe speaks UDP/TCP */
		d->have_probe = true;
		d->probe_tcp = tcp;
		memcpy(&d->probe_addr, &to, sizeof(to));
		d->probe_l = find_named(json_object_get(d->config, "listeners"), name);
	}
	return 0;
}

/* Layer 1: every listener of the given file (else of the running config). */
static int check_listeners(struct doctor *d)
{
	json_t *ls = json_object_get(d->config, "listeners"), *l;
	size_t i;
	int rc = 0;

	if (d->file != NULL) {
		if (d->file->n_listeners == 0)
			return fail(L_LISTENER, "listeners", "the config file has none",
				    "add a listener (listeners[] in the config)");
		for (i = 0; rc == 0 && i < d->file->n_listeners; i++)
			rc = check_one_listener(d, d->file->listeners[i].name,
						conf_proto_name(d->file->listeners[i].protocol),
						d->file->listeners[i].port);
		return rc;
	}
	if (json_array_size(ls) == 0)
		return fail(L_LISTENER, "listeners", "the running config has none",
			    "add a listener (listeners[] in the config), then turngatectl reload");
	json_array_foreach(ls, i, l)
	{
		rc = check_one_listener(d, jstr(l, "name"), jstr(l, "protocol"),
					(unsigned)json_integer_value(json_object_get(l, "port")));
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* The file's auth block for the probed listener (its own, else the global one). */
static const struct conf_auth *file_auth(const struct doctor *d)
{
	const char *name = jstr(d->probe_l, "name");

	for (size_t i = 0; d->file != NULL && i < d->file->n_listeners; i++)
		if (strcmp(d->file->listeners[i].name, name) == 0 && d->file->listeners[i].auth)
			return d->file->listeners[i].auth;
	return d->file != NULL ? &d->file->auth : NULL;
}

/* Picks the credential to test: the options first, then the config file's. */
static void pick_credential(struct doctor *d, const char *type)
{
	const struct conf_auth *fa = file_auth(d);
	const char *secret = d->secret;

	d->cred_source = NULL;
	if (strcmp(type, "ephemeral") == 0) {
		d->cred_source = "--secret";
		if (secret == NULL && fa != NULL && fa->secret != NULL) {
			secret = fa->secret;
			d->cred_source = "the config file's secret";
		}
		if (secret == NULL ||
		    stun_rest_mint((const uint8_t *)secret, strlen(secret), d->rest_name,
				   (uint64_t)time(NULL) + DOCTOR_TTL_S, d->cred_user,
				   sizeof(d->cred_user), d->cred_pass, sizeof(d->cred_pass)) < 0)
			d->cred_source = NULL;
	} else if (strcmp(type, "static") == 0) {
		if (d->user != NULL) {
			snprintf(d->cred_user, sizeof(d->cred_user), "%s", d->user);
			snprintf(d->cred_pass, sizeof(d->cred_pass), "%s", d->pass);
			d->cred_source = "-u/-p";
		} else if (fa != NULL && fa->n_users > 0) {
			snprintf(d->cred_user, sizeof(d->cred_user), "%s", fa->users[0].username);
			snprintf(d->cred_pass, sizeof(d->cred_pass), "%s", fa->users[0].password);
			d->cred_source = "the config file's first user";
		}
	}
}

/* Layer 2: the daemon has auth material, and a credential built from ours allocates. */
static int check_auth(struct doctor *d)
{
	json_t *a = json_object_get(d->probe_l, "auth"), *cred;
	const char *type;
	char detail[256];
	int code = 0, rc;

	if (!json_is_object(a))
		a = json_object_get(d->config, "auth");
	type = jstr(a, "type");
	cred = json_object_get(a, "credentials");
	if (strcmp(type, "none") == 0) {
		show("auth", "ok", "none: STUN only, nothing is relayed (no probe)");
		return 0;
	}
	if (strcmp(type, "ephemeral") == 0 && !json_is_string(json_object_get(cred, "secret")))
		return fail(L_AUTH, "auth", "ephemeral auth without a secret",
			    "set "
			    "auth.credentials.secret or auth.secret_file, then turngatectl reload");
	if (strcmp(type, "static") == 0 && !json_is_string(json_object_get(cred, "username")) &&
	    json_array_size(json_object_get(a, "users")) == 0)
		return fail(L_AUTH, "auth", "static auth without users",
			    "set "
			    "auth.credentials.username/password or auth.users[]");
	show("auth", "ok", "%s, realm %s, %s loaded", type, jstr(a, "realm"),
	     strcmp(type, "ephemeral") == 0 ? "secret" : "users");
	pick_credential(d, type);
	if (!d->have_probe)
		d->cred_source = NULL;
	if (d->cred_source == NULL) {
		show("credential", "skip",
		     "nothing to test with: pass --secret (ephemeral), "
		     "-u/-p (static) or -c CONFIG");
		return 0;
	}
	rc = doctor_allocate(&d->probe_addr, d->probe_tcp, d->cred_user, d->cred_pass,
			     d->timeout_ms, &code, detail, sizeof(detail));
	if (rc == 0) {
		show("credential", "ok", "a credential from %s allocates on listener %s",
		     d->cred_source, jstr(d->probe_l, "name"));
		return 0;
	}
	snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail),
		 " with a credential from %s", d->cred_source);
	return fail(
		L_AUTH, "credential", detail,
		code == 401
			? (strcmp(type, "ephemeral") == 0
				   ? "the secret differs from the daemon's: put the minting service's secret in "
				     "auth.secret_file (or credentials.secret) and reload, or mint with the "
				     "daemon's; also check the minting host's clock"
				   : "the username/password is not one of the daemon's static users")
			: "the allocation failed for another reason: see the error code");
}

/* A STRICT_DNS endpoint is "name" or "name:ports": resolve the name part. */
static bool dns_resolves(const char *text)
{
	char host[256];
	const char *colon = strchr(text, ':');
	size_t n = colon ? (size_t)(colon - text) : strlen(text);
	struct addrinfo *res = NULL;

	if (n == 0 || n >= sizeof(host))
		return false;
	memcpy(host, text, n);
	host[n] = '\0';
	if (getaddrinfo(host, NULL, NULL, &res) != 0)
		return false;
	freeaddrinfo(res);
	return true;
}

/* Layer 3: each listener's routes name clusters that have (resolvable) endpoints. */
static int check_routes(struct doctor *d)
{
	json_t *clusters = json_object_get(d->config, "clusters"), *l, *r, *c, *e;
	char check[64], detail[256];
	size_t i, j, k;

	json_array_foreach(json_object_get(d->config, "listeners"), i, l)
	{
		size_t eps = 0;

		snprintf(check, sizeof(check), "routes %s", jstr(l, "name"));
		if (json_array_size(json_object_get(l, "routes")) == 0)
			return fail(
				L_ROUTES, check, "no routes: every peer is refused",
				"add routes: [CLUSTER] to the listener, then turngatectl reload");
		json_array_foreach(json_object_get(l, "routes"), j, r)
		{
			c = find_named(clusters, json_string_value(r));
			snprintf(detail, sizeof(detail), "route %s", json_string_value(r));
			if (c == NULL)
				return fail(L_ROUTES, check, strcat(detail, " names no cluster"),
					    "route names must equal a clusters[].name exactly: "
					    "fix the name or add the cluster");
			if (json_array_size(json_object_get(c, "endpoints")) == 0)
				return fail(L_ROUTES, check,
					    strcat(detail, ": cluster has no "
							   "endpoints"),
					    "add the media servers' addresses (pod "
					    "IPs or a prefix) to the cluster's endpoints");
			json_array_foreach(json_object_get(c, "endpoints"), k, e)
			{
				if (strcmp(jstr(c, "type"), "STRICT_DNS") == 0 &&
				    !dns_resolves(json_string_value(e))) {
					snprintf(detail, sizeof(detail),
						 "cluster %s: %s does not "
						 "resolve",
						 jstr(c, "name"), json_string_value(e));
					return fail(
						L_ROUTES, check, detail,
						"fix the DNS name "
						"(a headless Service's FQDN) or its DNS record");
				}
				eps++;
			}
		}
		show(check, "ok", "%zu cluster(s), %zu endpoint(s)",
		     json_array_size(json_object_get(l, "routes")), eps);
	}
	return 0;
}

/* The first cluster routed from listener l whose STATIC endpoints cover peer's address
 * ("" when none); *first gets the first routed cluster's name ("" when none). */
static const char *covering_cluster(const struct doctor *d, json_t *l,
				    const struct sockaddr_storage *peer, const char **first)
{
	json_t *clusters = json_object_get(d->config, "clusters"), *r, *c, *e;
	size_t i, k;

	*first = "";
	json_array_foreach(json_object_get(l, "routes"), i, r)
	{
		c = find_named(clusters, json_string_value(r));
		if (c == NULL)
			continue;
		if ((*first)[0] == '\0')
			*first = jstr(c, "name");
		json_array_foreach(json_object_get(c, "endpoints"), k, e)
		{
			const char *t = json_string_value(e);

			if (t != NULL && conf_endpoint_covers(t, (const struct sockaddr *)peer) == 1)
				return jstr(c, "name");
		}
	}
	return "";
}

/* A 403 on the probe: names the refused peer and what would admit it. */
static int refused_peer(const struct doctor *d, const struct ctl_probe_result *res)
{
	const char *lname = jstr(d->probe_l, "name"), *first, *cover;
	char ip[INET6_ADDRSTRLEN] = "?", detail[400], fix[900], own[200] = "";
	const void *a = res->peer.ss_family == AF_INET6
				? (const void *)&((const struct sockaddr_in6 *)&res->peer)->sin6_addr
				: (const void *)&((const struct sockaddr_in *)&res->peer)->sin_addr;

	if (res->peer.ss_family == 0)
		return fail(L_ROUTES, "probe", "STUN error 403 (Forbidden)",
			    "the peer is not admitted: add its address (and port) to a cluster "
			    "routed from this listener");
	inet_ntop(res->peer.ss_family, a, ip, sizeof(ip));
	cover = covering_cluster(d, d->probe_l, &res->peer, &first);
	if (d->peer == NULL)
		snprintf(own, sizeof(own),
			 " (without --peer the probe relays between two of its own allocations, "
			 "so the relay address %s is its peer; or pass --peer IP:PORT, a UDP echo "
			 "inside a routed cluster)",
			 ip);
	if (cover[0] == '\0') {
		snprintf(detail, sizeof(detail),
			 "%s: peer %s refused (403 Forbidden): no route of listener %s admits it",
			 res->failed_step, ip, lname);
		if (first[0] != '\0')
			snprintf(fix, sizeof(fix),
				 "add it to a cluster routed from %s, e.g. endpoints: [..., "
				 "%s%s] in cluster %s, then turngatectl reload%s",
				 lname, ip, res->peer.ss_family == AF_INET6 ? "/128" : "/32", first,
				 own);
		else
			snprintf(fix, sizeof(fix),
				 "add it to a cluster routed from %s (clusters[].endpoints: [%s], "
				 "routes: [CLUSTER] in listener %s), then turngatectl reload%s",
				 lname, ip, lname, own);
		return fail(L_ROUTES, "probe", detail, fix);
	}
	snprintf(detail, sizeof(detail),
		 "%s: peer %s refused (403 Forbidden), although cluster %s routed from %s "
		 "covers its address",
		 res->failed_step, ip, cover, lname);
	snprintf(fix, sizeof(fix),
		 "a special-purpose address (127.0.0.0/8, ::1, 169.254.0.0/16, ...) is admitted "
		 "only by an endpoint listed inside its range or by a cluster whose admit_special "
		 "names its category, never by a broad prefix; the instance's own sockets (its "
		 "listener and HTTP ports, relay ports outside the short circuit) are never peers; "
		 "and an endpoint's :<MIN-MAX> range limits the ports: see configuration.md, "
		 "\"Peer safety\"%s",
		 own);
	return fail(L_ROUTES, "probe", detail, fix);
}

/* Layer 4: the probe; a 401 or 403 on the way names layer 2 or 3. */
static int check_probe(struct doctor *d)
{
	struct ctl_probe_opts o = { .tcp = d->probe_tcp,
				    .user = d->cred_user,
				    .pass = d->cred_pass,
				    .peer = d->peer,
				    .timeout_ms = d->timeout_ms,
				    .indent = "  probe: " };
	struct ctl_probe_result res;
	char detail[256];

	if (d->cred_source == NULL ||
	    strcmp(jstr(json_object_get(d->config, "auth"), "type"), "none") == 0) {
		show("probe", "skip", "no credential (see above)");
		return 0;
	}
	memcpy(&o.server, &d->probe_addr, sizeof(o.server));
	if (ctl_probe_run(&o, &res) == 0) {
		show("probe", "ok", "allocate, permission, round trip on listener %s%s%s",
		     jstr(d->probe_l, "name"), d->peer ? " to " : "", d->peer ? d->peer : "");
		return 0;
	}
	if (res.stun_code == 403)
		return refused_peer(d, &res);
	if (res.stun_code != 0)
		snprintf(detail, sizeof(detail), "%s: STUN error %d", res.failed_step,
			 res.stun_code);
	else
		snprintf(detail, sizeof(detail), "%s: %s", res.failed_step, strerror(-res.err));
	if (res.stun_code == 401)
		return fail(L_AUTH, "probe", detail, "the credential was refused: see layer 2");
	if (strcmp(res.failed_step, "round trip") == 0)
		return fail(L_PROBE, "probe", detail,
			    "a timeout on the round trip means the peer did not echo, or the "
			    "relay ports (relay_port_min..max) are filtered");
	return fail(L_PROBE, "probe", detail,
		    "the step failed for another reason than the peer policy: see the error "
		    "and the daemon's log");
}

static int parse_args(struct doctor *d, int argc, char **argv)
{
	static const char *const opts[] = { "-c", "--config", "--secret", "--user", "-u", "-p",
					    "--peer", "--host", "--timeout", NULL };
	const char **dst[] = { &d->conf_path, &d->conf_path, &d->secret, &d->rest_name,
			       &d->user, &d->pass, &d->peer, &d->host, NULL };

	for (int i = 0; i < argc; i++) {
		const char *v;
		json_int_t ms;
		int k = ctl_arg_option("doctor", opts, argc, argv, &i, &v);

		if (k < 0)
			return k;
		if (dst[k] != NULL)
			*dst[k] = v;
		else if (ctl_arg_int("doctor", opts[k], v, 1, 3600000, &ms) < 0)
			return -EINVAL;
		else
			d->timeout_ms = (int)ms;
	}
	if ((d->user != NULL) != (d->pass != NULL))
		return ctl_usage_error("doctor", d->user != NULL ? "-u" : "-p", "needs %s too",
				       d->user != NULL ? "-p PASS" : "-u USER");
	return 0;
}

int ctl_doctor_main(const char *sock, int argc, char **argv)
{
	struct doctor d;
	int rc;

	memset(&d, 0, sizeof(d));
	d.sock = sock;
	d.rest_name = "doctor";
	d.timeout_ms = 3000;
	if (parse_args(&d, argc, argv) < 0)
		return CTL_EXIT_USAGE;
	rc = check_daemon(&d);
	if (rc == 0)
		rc = check_listeners(&d);
	if (rc == 0)
		rc = check_auth(&d);
	if (rc == 0)
		rc = check_routes(&d);
	if (rc == 0)
		rc = check_probe(&d);
	if (rc == 0)
		printf("\nall layers ok%s\n", d.cred_source == NULL ? " (credential and probe "
								      "not tested)"
								    : "");
	explicit_bzero(d.cred_pass, sizeof(d.cred_pass));
	json_decref(d.status);
	json_decref(d.config);
	conf_free(d.file);
	return rc;
}
