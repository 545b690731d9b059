/* turngatectl probe: times allocate, permit (or Connect, RFC 6062) and a relayed round trip. */
#include "config.h"

#include "ctl/ctl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/turn_client.h"
#include "common/mono.h"
#include "stun/stun_auth.h"

#define PROBE_CHAN 0x4001
#define PROBE_TTL_S 3600

struct probe {
	struct sockaddr_storage server;
	enum turn_client_transport transport;
	const char *user, *pass, *secret, *peer;
	const char *tcp_peer;	/* RFC 6062: the TCP echo to Connect to, NULL = none */
	int data_port;		/* its data connection's TURN-TCP port, 0 = the server's */
	char sni[256];		/* TLS/DTLS server name: --sni, else the URI's host name */
	char rest_user[96], rest_pass[STUN_REST_PASSWORD_LEN + 1];
	int timeout_ms;
	bool json;
	const char *indent;  /* printed before each step line (doctor) */
	json_t *steps;
	int failed;
	const char *fail_step;  /* first failed step */
	int fail_code;          /* its STUN error code, 0 for a local/transport error */
	int fail_errno;         /* its negative errno */
	/* The peer the next step asks for (NULL: none); a 403 names it as refused. */
	const struct sockaddr_storage *cur_peer;
	struct sockaddr_storage fail_peer;  /* the failed step's peer, ss_family 0: none */
};

static double now_ms(void)
{
	return (double)mono_ns() / 1e6;
}

static void addr_str(const struct sockaddr_storage *ss, char *buf, size_t cap)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (ss->ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, ip, sizeof(ip));
		snprintf(buf, cap, "[%s]:%u", ip,
			 ntohs(((const struct sockaddr_in6 *)ss)->sin6_port));
	} else {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, ip, sizeof(ip));
		snprintf(buf, cap, "%s:%u", ip, ntohs(((const struct sockaddr_in *)ss)->sin_port));
	}
}

/* Records (and prints) one step; rc < 0 is a failure explained by the client. */
static int step(struct probe *p, const char *name, double t0, int rc, struct turn_client *c,
		const char *detail)
{
	double ms = now_ms() - t0;
	char why[160] = "";
	const char *reason = NULL;

	if (rc < 0) {
		int code = c != NULL ? turn_client_last_error(c, &reason) : 0;

		if (rc == -EPROTO && code != 0)
			snprintf(why, sizeof(why), "%d %s", code, reason != NULL ? reason : "");
		else
			snprintf(why, sizeof(why), "%s", strerror(-rc));
		if (rc == -EPROTO && code == 403 && p->cur_peer != NULL) {
			char pa[64];

			addr_str(p->cur_peer, pa, sizeof(pa));
			snprintf(why + strlen(why), sizeof(why) - strlen(why), ": peer %s refused",
				 pa);
		}
		if (!p->failed) {
			p->fail_step = name;
			p->fail_code = rc == -EPROTO ? code : 0;
			p->fail_errno = rc;
			if (p->cur_peer != NULL)
				memcpy(&p->fail_peer, p->cur_peer, sizeof(p->fail_peer));
		}
		p->failed = 1;
	}
	json_array_append_new(p->steps,
			      json_pack("{s:s, s:b, s:f, s:s}", "step", name, "ok", rc >= 0, "ms",
					ms, "detail", rc < 0 ? why : (detail ? detail : "")));
	if (!p->json)
		printf("%s%-18s %-4s %8.1f ms  %s\n", p->indent ? p->indent : "", name,
		       rc < 0 ? "FAIL" : "ok", ms, rc < 0 ? why : (detail ? detail : ""));
	p->cur_peer = NULL;
	return rc;
}

static const char *transport_name(enum turn_client_transport t)
{
	switch (t) {
	case TURN_CLIENT_TCP:
		return "tcp";
	case TURN_CLIENT_TLS:
		return "tls";
	case TURN_CLIENT_DTLS:
		return "dtls";
	default:
		return "udp";
	}
}

static int parse_transport(const char *s, enum turn_client_transport *out)
{
	static const enum turn_client_transport all[] = { TURN_CLIENT_UDP, TURN_CLIENT_TCP,
							  TURN_CLIENT_TLS, TURN_CLIENT_DTLS };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		if (strcmp(s, transport_name(all[i])) == 0) {
			*out = all[i];
			return 0;
		}
	}
	return -EINVAL;
}

/* A host name (not an IP literal) is worth sending as SNI. */
static bool is_host_name(const char *host)
{
	struct in6_addr a6;

	return inet_pton(AF_INET, host, &a6) != 1 && inet_pton(AF_INET6, host, &a6) != 1;
}

/* turn:host:port?transport=udp|tcp (port defaults to 3478, transport to udp);
 * turns:host:port?transport=tcp|udp is TLS or DTLS (port 5349, transport tcp). */
static int parse_uri(const char *uri, struct probe *p)
{
	char host[256], port[16] = "3478";
	const char *rest, *q, *colon;
	struct addrinfo hints = { .ai_socktype = SOCK_DGRAM }, *res = NULL;
	size_t hl;
	bool secure = strncmp(uri, "turns:", 6) == 0;

	if (strncmp(uri, "turn:", 5) != 0 && !secure)
		return -EINVAL;
	rest = uri + (secure ? 6 : 5);
	if (secure)
		snprintf(port, sizeof(port), "5349");
	q = strchr(rest, '?');
	if (rest[0] == '[') {
		const char *end = strchr(rest, ']');

		if (end == NULL || (q != NULL && end > q))
			return -EINVAL;
		hl = (size_t)(end - rest - 1);
		if (hl == 0 || hl >= sizeof(host))
			return -EINVAL;
		memcpy(host, rest + 1, hl);
		colon = end[1] == ':' ? end + 1 : NULL;
	} else {
		colon = strchr(rest, ':');
		if (colon != NULL && q != NULL && colon > q)
			colon = NULL;
		hl = colon ? (size_t)(colon - rest) : (q ? (size_t)(q - rest) : strlen(rest));
		if (hl == 0 || hl >= sizeof(host))
			return -EINVAL;
		memcpy(host, rest, hl);
	}
	host[hl] = '\0';
	if (colon != NULL) {
		size_t pl = q ? (size_t)(q - colon - 1) : strlen(colon + 1);

		if (pl == 0 || pl >= sizeof(port))
			return -EINVAL;
		memcpy(port, colon + 1, pl);
		port[pl] = '\0';
	}
	p->transport = secure ? TURN_CLIENT_TLS : TURN_CLIENT_UDP;
	if (q != NULL) {
		if (strcmp(q, "?transport=tcp") == 0)
			p->transport = secure ? TURN_CLIENT_TLS : TURN_CLIENT_TCP;
		else if (strcmp(q, "?transport=udp") == 0)
			p->transport = secure ? TURN_CLIENT_DTLS : TURN_CLIENT_UDP;
		else
			return -EINVAL;
	}
	if (secure && p->sni[0] == '\0' && is_host_name(host))
		snprintf(p->sni, sizeof(p->sni), "%s", host);
	if (getaddrinfo(host, port, &hints, &res) != 0 || res == NULL)
		return -EHOSTUNREACH;
	memcpy(&p->server, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

static int peer_addr(const char *text, struct sockaddr_storage *out)
{
	char buf[128];
	const char *colon = strrchr(text, ':');
	struct sockaddr_in *s4 = (struct sockaddr_in *)out;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;
	size_t hl;
	long port;

	if (colon == NULL || (hl = (size_t)(colon - text)) == 0 || hl >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, text[0] == '[' ? text + 1 : text, text[0] == '[' ? hl - 2 : hl);
	buf[text[0] == '[' ? hl - 2 : hl] = '\0';
	port = strtol(colon + 1, NULL, 10);
	if (port < 1 || port > 65535)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, buf, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
	} else if (inet_pton(AF_INET6, buf, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
	} else {
		return -EINVAL;
	}
	return 0;
}

static int client_new(struct probe *p, struct turn_client **c)
{
	struct turn_client_opts o = {
		.transport = p->transport,
		.server = (struct sockaddr *)&p->server,
		.username = p->secret != NULL ? p->rest_user : p->user,
		.password = p->secret != NULL ? p->rest_pass : p->pass,
		.software = "turngatectl probe",
		.timeout_ms = p->timeout_ms,
		.fingerprint = true,
		.sni = p->sni[0] != '\0' ? p->sni : NULL,
	};

	return turn_client_create(&o, c);
}

/* Sends "probe" to peer over a channel and waits for the same bytes back on it. */
static int echo_via(struct turn_client *c, const char *payload, int timeout_ms)
{
	char buf[256];
	size_t len = 0;
	uint16_t ch = 0;
	int rc = turn_client_send_channel(c, PROBE_CHAN, payload, strlen(payload));

	if (rc < 0)
		return rc;
	rc = turn_client_recv(c, buf, sizeof(buf), &len, NULL, &ch, timeout_ms);
	if (rc < 0)
		return rc;
	return len == strlen(payload) && memcmp(buf, payload, len) == 0 ? 0 : -EBADMSG;
}

/* Deletes what an Allocate on c may have made: after a success (a step of its own), and
 * silently after a timeout (the answer may be what got lost). Every allocation the probe
 * makes goes through here, so none outlives the probe by its lifetime. */
static void release(struct probe *p, struct turn_client *c, int alloc_rc, const char *name)
{
	double t0 = now_ms();
	int rc;

	if (c == NULL || (alloc_rc != 0 && alloc_rc != -ETIMEDOUT))
		return;
	rc = turn_client_refresh(c, 0, NULL);
	if (alloc_rc == 0)
		step(p, name, t0, rc, c, "refresh lifetime 0");
}

/* Round trip through a second allocation: A -> B's relay, B answers back to A's relay.
 * Each relay address is the other's peer: the listener's routes must admit the relay's
 * own address (a 403 names it). */
static int roundtrip_second(struct probe *p, struct turn_client *a,
			    const struct turn_alloc_result *ra)
{
	struct turn_client *b = NULL, *asked;
	struct turn_alloc_result rb;
	char buf[256], detail[96];
	size_t len = 0;
	double t0 = now_ms();
	int rc, alloc_rc;

	memset(&rb, 0, sizeof(rb));
	rc = client_new(p, &b);
	if (rc == 0)
		rc = turn_client_allocate(b, NULL, &rb);
	alloc_rc = rc;
	addr_str(&rb.relayed, detail, sizeof(detail));
	if (step(p, "allocate (peer)", t0, rc, b, rc == 0 ? detail : NULL) < 0)
		goto out;
	t0 = now_ms();
	asked = b;
	p->cur_peer = &ra->relayed;
	rc = turn_client_create_permission(b, &ra->relayed, 1);
	if (rc == 0) {
		asked = a;
		p->cur_peer = &rb.relayed;
		rc = turn_client_channel_bind(a, PROBE_CHAN, (struct sockaddr *)&rb.relayed);
	}
	if (step(p, "permission (peer)", t0, rc, asked, "both directions") < 0)
		goto out;
	t0 = now_ms();
	rc = turn_client_send_channel(a, PROBE_CHAN, "probe", 5);
	if (rc == 0)
		rc = turn_client_recv(b, buf, sizeof(buf), &len, NULL, NULL, p->timeout_ms);
	if (rc == 0)
		rc = turn_client_send_indication(b, (struct sockaddr *)&ra->relayed, buf, len,
						 false);
	if (rc == 0)
		rc = turn_client_recv(a, buf, sizeof(buf), &len, NULL, NULL, p->timeout_ms);
	if (rc == 0 && (len != 5 || memcmp(buf, "probe", 5) != 0))
		rc = -EBADMSG;
	step(p, "round trip", t0, rc, a, "via the peer allocation");
out:
	release(p, b, alloc_rc, "delete (peer)");
	turn_client_destroy(b);
	return rc;
}

/* Sends payload on the data connection and waits for the same bytes back. */
static int echo_tcp(struct turn_client *d, const char *payload, int timeout_ms)
{
	char buf[256];
	size_t want = strlen(payload), have = 0, n = 0;
	double deadline = now_ms() + timeout_ms;
	int rc = turn_client_data_send(d, payload, want);

	/* Bounded by the deadline; every round gets bytes or ends the loop. */
	while (rc == 0 && have < want) {
		double left = deadline - now_ms();

		if (left <= 0)
			return -ETIMEDOUT;
		rc = turn_client_data_recv(d, buf + have, sizeof(buf) - have, &n, (int)left + 1);
		if (rc == 0 && n == 0)
			rc = -ENODATA;	/* the peer closed before echoing */
		have += n;
	}
	if (rc == 0 && memcmp(buf, payload, want) != 0)
		rc = -EBADMSG;
	return rc;
}

/* RFC 6062 through the TCP echo at --tcp-peer: Connect, a data connection bound to the
 * CONNECTION-ID (over the control connection's transport to the server's address, or
 * over TURN-TCP to --data-port), bytes both ways. */
static void tcp_relay(struct probe *p, struct turn_client *c)
{
	struct sockaddr_storage peer, srv = p->server;
	struct turn_client_opts dopts = {
		.transport = p->data_port != 0 ? TURN_CLIENT_TCP : p->transport,
		.server = (struct sockaddr *)&srv,
		.timeout_ms = p->timeout_ms,
		.sni = p->sni[0] != '\0' ? p->sni : NULL,
	};
	struct turn_client *d = NULL;
	char detail[160], where[64];
	uint32_t cid = 0;
	double t0 = now_ms();
	int rc = peer_addr(p->tcp_peer, &peer);

	p->cur_peer = rc == 0 ? &peer : NULL;
	if (rc == 0)
		rc = turn_client_connect(c, (struct sockaddr *)&peer, &cid);
	snprintf(detail, sizeof(detail), "%s connection-id 0x%08x", p->tcp_peer, cid);
	if (step(p, "tcp-connect", t0, rc, c, detail) < 0)
		return;
	t0 = now_ms();
	if (p->data_port != 0 && srv.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&srv)->sin6_port = htons((uint16_t)p->data_port);
	else if (p->data_port != 0)
		((struct sockaddr_in *)&srv)->sin_port = htons((uint16_t)p->data_port);
	rc = turn_client_connection_bind(c, cid, &dopts, &d);
	addr_str(&srv, where, sizeof(where));
	snprintf(detail, sizeof(detail), "data connection %s %s",
		 dopts.transport == TURN_CLIENT_TLS ? "tls" : "tcp", where);
	if (step(p, "connection-bind", t0, rc, c, detail) < 0)
		return;
	t0 = now_ms();
	rc = echo_tcp(d, "turngate probe", p->timeout_ms);
	step(p, "round trip", t0, rc, NULL, "through the TCP peer echo");
	turn_client_destroy(d);
}

static void run_probe(struct probe *p)
{
	struct turn_client *c = NULL;
	struct turn_alloc_result ra;
	struct turn_alloc_opts ao = { .transport = p->tcp_peer != NULL ? STUN_TRANSPORT_TCP : 0 };
	struct sockaddr_storage peer;
	char detail[384];	/* room for the TLS summary: version, ALPN, CN */
	double t0 = now_ms();
	struct turn_client_tls_info ti;
	int rc;

	rc = client_new(p, &c);
	snprintf(detail, sizeof(detail), "%s", transport_name(p->transport));
	if (rc == 0 && turn_client_tls_info(c, &ti) == 0)
		snprintf(detail, sizeof(detail), "%s %s alpn=%s cn=%s",
			 transport_name(p->transport), ti.version, ti.alpn[0] ? ti.alpn : "-",
			 ti.subject_cn[0] ? ti.subject_cn : "-");
	if (step(p, "connect", t0, rc, NULL, detail) < 0)
		goto out;
	t0 = now_ms();
	memset(&ra, 0, sizeof(ra));
	rc = turn_client_allocate(c, &ao, &ra);
	addr_str(&ra.relayed, detail, sizeof(detail));
	if (p->tcp_peer != NULL)
		snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail), " tcp");
	if (step(p, "allocate", t0, rc, c, rc == 0 ? detail : NULL) < 0) {
		release(p, c, rc, "delete");
		goto out;
	}
	if (p->tcp_peer != NULL) {
		tcp_relay(p, c);
	} else if (p->peer == NULL) {
		roundtrip_second(p, c, &ra);
	} else {
		t0 = now_ms();
		rc = peer_addr(p->peer, &peer);
		p->cur_peer = rc == 0 ? &peer : NULL;
		if (rc == 0)
			rc = turn_client_create_permission(c, &peer, 1);
		if (step(p, "create-permission", t0, rc, c, p->peer) < 0)
			goto refresh;
		t0 = now_ms();
		p->cur_peer = &peer;
		rc = turn_client_channel_bind(c, PROBE_CHAN, (struct sockaddr *)&peer);
		if (step(p, "channel-bind", t0, rc, c, "0x4001") < 0)
			goto refresh;
		t0 = now_ms();
		rc = echo_via(c, "turngate probe", p->timeout_ms);
		step(p, "round trip", t0, rc, c, "through the peer echo");
	}
refresh:
	release(p, c, 0, "delete");
out:
	turn_client_destroy(c);
}

int ctl_probe_run(const struct ctl_probe_opts *o, struct ctl_probe_result *res)
{
	struct probe p;

	memset(&p, 0, sizeof(p));
	memcpy(&p.server, &o->server, sizeof(p.server));
	p.transport = o->tcp ? TURN_CLIENT_TCP : TURN_CLIENT_UDP;
	p.user = o->user;
	p.pass = o->pass;
	p.peer = o->peer;
	p.timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 3000;
	p.indent = o->indent;
	p.steps = json_array();
	if (p.steps == NULL)
		return -ENOMEM;
	run_probe(&p);
	json_decref(p.steps);
	memset(res, 0, sizeof(*res));
	res->failed_step = p.fail_step;
	res->stun_code = p.fail_code;
	res->err = p.fail_errno;
	memcpy(&res->peer, &p.fail_peer, sizeof(res->peer));
	return p.failed ? 1 : 0;
}

/* --tcp-peer and --data-port against the transport. Returns 0, or -EINVAL after a usage
 * error. */
static int check_tcp_args(const struct probe *p)
{
	struct sockaddr_storage ss;

	if (p->tcp_peer == NULL)
		return p->data_port != 0 ? ctl_usage_error("probe", "--data-port",
							   "goes with --tcp-peer")
					 : 0;
	if (p->peer != NULL)
		return ctl_usage_error("probe", "--tcp-peer", "excludes --peer (a TCP echo, "
							      "or a UDP echo)");
	if (peer_addr(p->tcp_peer, &ss) < 0)
		return ctl_usage_error("probe", "--tcp-peer", "%s is not IP:PORT or [IPv6]:PORT",
				       p->tcp_peer);
	if (p->transport != TURN_CLIENT_TCP && p->transport != TURN_CLIENT_TLS)
		return ctl_usage_error("probe", "--tcp-peer", "needs a TCP or TLS control "
				       "connection (turn:HOST?transport=tcp or turns:HOST)");
	return 0;
}

/* The probe's command line as given, before it is checked as a whole. */
struct probe_args {
	const char *uri, *rest_name, *transport, *sni;
};

static int probe_parse(struct probe *p, struct probe_args *a, int argc, char **argv)
{
	static const char *const opts[] = { "-u", "-p", "--secret", "--user", "--peer",
					    "--tcp-peer", "--transport", "--sni", "--data-port",
					    "--timeout", NULL };
	const char **dst[] = { &p->user, &p->pass, &p->secret, &a->rest_name, &p->peer,
			       &p->tcp_peer, &a->transport, &a->sni, NULL, NULL };

	for (int i = 0; i < argc; i++) {
		bool port;
		const char *v;
		json_int_t n;
		int k;

		if (strcmp(argv[i], "--json") == 0) {
			p->json = true;
			continue;
		}
		if (argv[i][0] != '-' && a->uri == NULL) {
			a->uri = argv[i];
			continue;
		}
		k = ctl_arg_option("probe", opts, argc, argv, &i, &v);
		if (k < 0)
			return k;
		if (dst[k] != NULL) {
			*dst[k] = v;
			continue;
		}
		port = strcmp(opts[k], "--data-port") == 0;
		if (ctl_arg_int("probe", opts[k], v, 1, port ? 65535 : 3600000, &n) < 0)
			return -EINVAL;
		*(port ? &p->data_port : &p->timeout_ms) = (int)n;
	}
	return 0;
}

/* The arguments as a whole, and the URI and the transport into p. Returns 0, or -EINVAL
 * after a usage error. */
static int probe_check(struct probe *p, const struct probe_args *a)
{
	int rc;

	if (a->uri == NULL)
		return ctl_usage_error("probe", NULL, "missing TURN-URI "
				       "(turn[s]:HOST[:PORT][?transport=udp|tcp])");
	if (p->secret != NULL && p->user != NULL)
		return ctl_usage_error("probe", "--secret", "excludes -u USER -p PASS");
	if (p->secret == NULL && p->user == NULL && p->pass == NULL)
		return ctl_usage_error("probe", NULL, "missing credential: -u USER -p PASS, or "
						      "--secret SECRET");
	if ((p->user != NULL) != (p->pass != NULL))
		return ctl_usage_error("probe", p->user != NULL ? "-u" : "-p", "needs %s too",
				       p->user != NULL ? "-p PASS" : "-u USER");
	if (a->sni != NULL && strlen(a->sni) >= sizeof(p->sni))
		return ctl_usage_error("probe", "--sni", "longer than %zu bytes",
				       sizeof(p->sni) - 1);
	if (a->sni != NULL)
		snprintf(p->sni, sizeof(p->sni), "%s", a->sni);
	rc = parse_uri(a->uri, p);
	if (rc == -EHOSTUNREACH)
		return ctl_usage_error("probe", "TURN-URI", "%s: the host does not resolve",
				       a->uri);
	if (rc < 0)
		return ctl_usage_error("probe", "TURN-URI", "%s is not "
				       "turn[s]:HOST[:PORT][?transport=udp|tcp]", a->uri);
	if (a->transport != NULL && parse_transport(a->transport, &p->transport) < 0)
		return ctl_usage_error("probe", "--transport", "%s is not one of udp, tcp, tls, "
				       "dtls", a->transport);
	return check_tcp_args(p);
}

int ctl_probe_main(int argc, char **argv)
{
	struct probe p;
	struct probe_args a = { .rest_name = "probe" };

	memset(&p, 0, sizeof(p));
	p.timeout_ms = 3000;
	if (probe_parse(&p, &a, argc, argv) < 0 || probe_check(&p, &a) < 0)
		return CTL_EXIT_USAGE;
	if (p.secret != NULL &&
	    stun_rest_mint((const uint8_t *)p.secret, strlen(p.secret), a.rest_name,
			   (uint64_t)time(NULL) + PROBE_TTL_S, p.rest_user, sizeof(p.rest_user),
			   p.rest_pass, sizeof(p.rest_pass)) < 0) {
		ctl_usage_error("probe", "--user", "cannot mint a REST credential for %s (too "
			        "long?)", a.rest_name);
		return CTL_EXIT_USAGE;
	}
	p.steps = json_array();
	run_probe(&p);
	if (p.json) {
		json_t *out = json_pack("{s:b, s:o}", "ok", !p.failed, "steps", p.steps);

		json_dumpf(out, stdout, JSON_COMPACT);
		fputc('\n', stdout);
		json_decref(out);
	} else {
		json_decref(p.steps);
	}
	explicit_bzero(p.rest_pass, sizeof(p.rest_pass));
	return p.failed ? CTL_EXIT_ERROR : CTL_EXIT_OK;
}
