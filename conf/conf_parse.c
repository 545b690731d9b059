/* Config loader entry points: YAML document, top-level keys, admin/limits sections, conf_free. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "conf/conf_internal.h"

static bool http_url_ok(const char *s)
{
	const char *h, *e;
	if (strncasecmp(s, "http://", 7) != 0)
		return false;
	h = s + 7;
	if (*h == '[') {
		e = strchr(h, ']');
		if (e == NULL)
			return false;
		e++;
	} else {
		e = h + strcspn(h, ":/");
	}
	if (*e == ':') {
		const char *port = e + 1;
		size_t n = strspn(port, "0123456789");
		if (n == 0 || n > 5 || atoi(port) < 1 || atoi(port) > 65535 ||
		    (port[n] != '\0' && port[n] != '/'))
			return false;
		e = port + n;
	}
	return *e == '\0' || *e == '/';
}

/* The host of u (a URL http_url_ok accepts), without brackets, into host; *bracketed says
 * whether it had them. False when it does not fit. */
static bool http_url_host(const char *u, char *host, size_t cap, bool *bracketed)
{
	const char *h = u + 7, *e;
	size_t n;
	*bracketed = *h == '[';
	if (*bracketed)
		e = strchr(++h, ']');
	else
		e = h + strcspn(h, ":/");
	n = e != NULL ? (size_t)(e - h) : 0;
	if (n >= cap)
		return false;
	memcpy(host, h, n);
	host[n] = '\0';
	return true;
}

/* True when the host of u (a URL http_url_ok accepts) is a loopback address: "localhost"
 * (which the HTTP server binds as 127.0.0.1), 127.0.0.0/8, [::1] or [::ffff:127.x.y.z].
 * An empty host and a wildcard are not. */
static bool http_url_loopback(const char *u)
{
	char host[INET6_ADDRSTRLEN];
	struct in6_addr a6;
	struct in_addr a4;
	bool bracketed;
	if (!http_url_host(u, host, sizeof(host), &bracketed) || host[0] == '\0')
		return false;
	if (strcasecmp(host, "localhost") == 0)
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6) ||
		       (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
	return false;
}

/* The host of an endpoint URL is what http_endpoint_parse binds: empty (every address), an
 * IPv4 address, a bracketed IPv6 one or localhost (127.0.0.1, no lookup). A name is an
 * error here rather than looked up: getaddrinfo would block the master's loop at every
 * reload (a DNS server that never answers stalls /live and the worker pings), and a DNS
 * outage would refuse a reload. The URL is then dropped (the load fails anyway; the
 * loopback and shared-socket checks would only repeat the error). */
static void check_url_host(struct pctx *p, yaml_node_t *v, const char *path, char **url)
{
	char host[256];
	struct in6_addr a6;
	struct in_addr a4;
	bool bracketed;
	if (!http_url_host(*url, host, sizeof(host), &bracketed))
		pctx_error(p, v, path, "'%s': the host is too long (expected an IP address)",
			   *url);
	else if (bracketed && inet_pton(AF_INET6, host, &a6) != 1)
		pctx_error(p, v, path,
			   "'%s': [%s] is not an IPv6 address (expected http://[IPv6]...)", *url,
			   host);
	else if (!bracketed && host[0] != '\0' && strcasecmp(host, "localhost") != 0 &&
		 inet_pton(AF_INET, host, &a4) != 1)
		pctx_error(p, v, path,
			   "'%s': host '%s' is a name: write an IP address (0.0.0.0 or the pod's) "
			   "- turngated does not look names up for its endpoints",
			   *url, host);
	else
		return;
	free(*url);
	*url = NULL;
}

/* Replaces *dst with the expanded string of v (NULL/"~" keeps the default). */
static void set_str(struct pctx *p, yaml_node_t *v, const char *path, char **dst)
{
	char *s;
	if (pctx_is_null(v))
		return;
	s = pctx_string(p, v, path, false);
	if (s == NULL)
		return;
	free(*dst);
	*dst = s;
}

/* stunnerd takes any URL url.Parse accepts and serves plain HTTP on its host and port,
 * whatever the scheme: so does turngate, with a warning (the value is kept as http://). */
static void set_url(struct pctx *p, yaml_node_t *v, const char *path, char **dst)
{
	char *u;
	size_t sl;
	set_str(p, v, path, dst);
	u = *dst;
	if (u == NULL || u[0] == '\0')
		return;
	sl = strspn(u, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.");
	if (sl > 0 && isalpha((unsigned char)u[0]) && strncmp(u + sl, "://", 3) == 0 &&
	    strncasecmp(u, "http", sl > 4 ? sl : 4) != 0) {
		char *h = malloc(strlen(u + sl) + 5);
		if (h == NULL) {
			p->nomem = 1;
			return;
		}
		pctx_warn(p, v, path,
			  "scheme '%.*s' served as plain http (stunnerd uses only the "
			  "host, port and path)",
			  (int)sl, u);
		strcpy(h, "http");
		strcat(h, u + sl);
		free(u);
		*dst = u = h;
	}
	if (!http_url_ok(u))
		pctx_error(p, v, path,
			   "'%s' is not a valid URL (expected http://[HOST][:PORT][/PATH])", u);
	else
		check_url_host(p, v, path, dst);
}

static void set_u32(struct pctx *p, yaml_node_t *v, const char *path, uint64_t min, uint64_t max,
		    uint32_t *dst)
{
	uint64_t x;
	if (!pctx_is_null(v) && pctx_uint(p, v, path, min, max, &x) == 0)
		*dst = (uint32_t)x;
}

/* Where keys checked after the whole admin block were written. */
struct range_nodes {
	yaml_node_t *min, *max;
	yaml_node_t *token, *token_file, *cred_endpoint;
};

static void parse_mode(struct pctx *p, yaml_node_t *v, const char *path, uint32_t *mode)
{
	char *s = pctx_string(p, v, path, CONF_STR_VERBATIM);
	const char *d;
	size_t n;
	unsigned long m;
	if (s == NULL)
		return;
	d = strncasecmp(s, "0o", 2) == 0 ? s + 2 : s;
	n = strspn(d, "01234567");
	m = n > 0 && n <= 4 && d[n] == '\0' ? strtoul(d, NULL, 8) : 01000;
	if (m > 0777)
		pctx_error(p, v, path, "'%s' is not a file mode (expected octal 0000..0777)", s);
	else
		*mode = (uint32_t)m;
	free(s);
}

static void parse_log_format(struct pctx *p, yaml_node_t *v, const char *path,
			     enum conf_log_format *out)
{
	char *s = pctx_is_null(v) ? NULL : pctx_string(p, v, path, false);
	if (s && strcasecmp(s, "text") == 0)
		*out = CONF_LOG_TEXT;
	else if (s && strcasecmp(s, "json") == 0)
		*out = CONF_LOG_JSON;
	else if (s)
		pctx_error(p, v, path, "'%s' is not a log format (expected text or json)", s);
	free(s);
}

static void parse_chan_range(struct pctx *p, yaml_node_t *v, const char *path, uint32_t *out)
{
	char *s = pctx_is_null(v) ? NULL : pctx_string(p, v, path, false);
	if (s && strcasecmp(s, "rfc8656") == 0)
		*out = CONF_CHAN_RFC8656;
	else if (s && strcasecmp(s, "rfc5766") == 0)
		*out = CONF_CHAN_RFC5766;
	else if (s)
		pctx_error(p, v, path,
			   "'%s' is not a channel number range (expected rfc8656 or rfc5766)", s);
	free(s);
}

static const char *const records_keys[] = { "file", "start", "webhook", "webhook_ca_file",
					    "webhook_server_name", NULL };

/* http://... or https://... of the shape http_url_ok accepts. */
static bool webhook_url_ok(const char *u)
{
	char buf[1024];

	if (strncasecmp(u, "http://", 7) == 0)
		return http_url_ok(u);
	if (strncasecmp(u, "https://", 8) != 0 || strlen(u) >= sizeof(buf))
		return false;
	snprintf(buf, sizeof(buf), "http://%s", u + 8);
	return http_url_ok(buf);
}

/* admin.session_records: {file: PATH | stdout | syslog, start: BOOL, webhook: URL,
 * webhook_ca_file: PATH, webhook_server_name: NAME}. */
static void records_pair(struct pctx *p, const char *key, yaml_node_t *k, yaml_node_t *v,
			 const char *path, void *arg)
{
	struct conf_admin *a = &p->cfg->admin;

	(void)arg;
	if (strcasecmp(key, "file") == 0) {
		set_str(p, v, path, &a->records_file);
		if (a->records_file != NULL && a->records_file[0] != '/' &&
		    strcmp(a->records_file, "stdout") != 0 && strcmp(a->records_file, "syslog") != 0)
			pctx_error(p, v, path,
				   "'%s' is not a session record output (expected an absolute "
				   "path, stdout or syslog)",
				   a->records_file);
	} else if (strcasecmp(key, "webhook") == 0) {
		set_str(p, v, path, &a->records_webhook);
		if (a->records_webhook != NULL && !webhook_url_ok(a->records_webhook))
			pctx_error(p, v, path,
				   "'%s' is not a webhook URL (expected http://HOST[:PORT][/PATH] "
				   "or https://HOST[:PORT][/PATH])",
				   a->records_webhook);
	} else if (strcasecmp(key, "start") == 0) {
		(void)pctx_bool(p, v, path, &a->records_start);
	} else if (strcasecmp(key, "webhook_ca_file") == 0) {
		set_str(p, v, path, &a->records_webhook_ca_file);
		if (a->records_webhook_ca_file != NULL && a->records_webhook_ca_file[0] != '/')
			pctx_error(p, v, path, "'%s' is not an absolute path",
				   a->records_webhook_ca_file);
		else if (a->records_webhook_ca_file != NULL &&
			 access(a->records_webhook_ca_file, R_OK) != 0)
			pctx_error(p, v, path, "cannot read '%s': %s (expected a PEM file of CA "
					       "certificates)",
				   a->records_webhook_ca_file, strerror(errno));
	} else if (strcasecmp(key, "webhook_server_name") == 0) {
		struct in6_addr a6;

		set_str(p, v, path, &a->records_webhook_server_name);
		if (a->records_webhook_server_name != NULL &&
		    inet_pton(AF_INET6, a->records_webhook_server_name, &a6) != 1 &&
		    (a->records_webhook_server_name[0] == '\0' ||
		     strlen(a->records_webhook_server_name) > 253 ||
		     strpbrk(a->records_webhook_server_name, " /:@\t") != NULL))
			pctx_error(p, v, path, "'%s' is not a host name or address",
				   a->records_webhook_server_name);
	} else {
		pctx_unknown_key(p, k, path, records_keys);
	}
}

/* The TLS keys of session_records belong to an https:// webhook. */
static void records_check(struct pctx *p, yaml_node_t *v, const char *path)
{
	const struct conf_admin *a = &p->cfg->admin;
	bool https = a->records_webhook != NULL &&
		     strncasecmp(a->records_webhook, "https://", 8) == 0;

	if (!https && (a->records_webhook_ca_file != NULL ||
		       a->records_webhook_server_name != NULL))
		pctx_error(p, v, path,
			   "webhook_ca_file and webhook_server_name need an https:// webhook");
}

/* Our admin keys; returns false for a key that is not one of them. */
static bool admin_ext_pair(struct pctx *p, const char *key, yaml_node_t *v, const char *path,
			   struct range_nodes *rn)
{
	struct conf_admin *a = &p->cfg->admin;
	uint32_t x;
	if (strcasecmp(key, "workers") == 0) {
		set_u32(p, v, path, 0, 255, &a->workers); /* SHM_MAX_SLOTS worker slots */
	} else if (strcasecmp(key, "admin_socket") == 0) {
		set_str(p, v, path, &a->admin_socket);
	} else if (strcasecmp(key, "state_dir") == 0) {
		set_str(p, v, path, &a->state_dir);
		if (a->state_dir && a->state_dir[0] != '\0' && a->state_dir[0] != '/')
			pctx_error(p, v, path, "'%s' is not an absolute path", a->state_dir);
	} else if (strcasecmp(key, "admin_socket_mode") == 0) {
		if (!pctx_is_null(v))
			parse_mode(p, v, path, &a->admin_socket_mode);
		/* Whoever may connect may reload, drain, disconnect and upgrade. */
		if (a->admin_socket_mode & 07)
			pctx_error(p, v, path,
				   "%04o lets every local user use the admin socket (expected "
				   "owner and group only, such as \"0660\")",
				   (unsigned)a->admin_socket_mode);
	} else if (strcasecmp(key, "log_format") == 0) {
		parse_log_format(p, v, path, &a->log_format);
	} else if (strcasecmp(key, "relay_port_min") == 0) {
		x = a->relay_port_min;
		set_u32(p, v, path, 1, 65535, &x);
		a->relay_port_min = (uint16_t)x;
		rn->min = v;
	} else if (strcasecmp(key, "relay_port_max") == 0) {
		x = a->relay_port_max;
		set_u32(p, v, path, 1, 65535, &x);
		a->relay_port_max = (uint16_t)x;
		rn->max = v;
	} else if (strcasecmp(key, "drain_timeout") == 0) {
		set_u32(p, v, path, 0, 86400, &a->drain_timeout);
	} else if (strcasecmp(key, "worker_ping_timeout") == 0) {
		set_u32(p, v, path, 1, 3600, &a->worker_ping_timeout);
	} else if (strcasecmp(key, "worker_stall_timeout") == 0) {
		set_u32(p, v, path, 1, 3600, &a->worker_stall_timeout);
	} else if (strcasecmp(key, "alternate_server") == 0) {
		struct sockaddr_storage ss;
		set_str(p, v, path, &a->alternate_server);
		if (a->alternate_server && a->alternate_server[0] &&
		    conf_parse_hostport(a->alternate_server, &ss) != 0)
			pctx_error(p, v, path,
				   "'%s' is not an address (expected IP, IP:PORT or "
				   "[IPV6]:PORT)",
				   a->alternate_server);
	} else if (strcasecmp(key, "credential_api_endpoint") == 0) {
		set_url(p, v, path, &a->credential_api_endpoint);
		rn->cred_endpoint = v;
	} else if (strcasecmp(key, "credential_api_token") == 0) {
		rn->token = v;
		conf_wipe_free(a->credential_api_token);
		a->credential_api_token =
			pctx_is_null(v)
				? NULL
				: pctx_string(p, v, path, CONF_STR_NOENV | CONF_STR_VERBATIM);
	} else if (strcasecmp(key, "credential_api_token_file") == 0) {
		rn->token_file = v;
	} else if (strcasecmp(key, "session_records") == 0) {
		if (!pctx_is_null(v) && pctx_expect(p, v, path, YAML_MAPPING_NODE)) {
			pctx_map_each(p, v, path, records_pair, NULL);
			records_check(p, v, path);
		}
	} else if (strcasecmp(key, "siblings") == 0) {
		p->siblings = v; /* conf_parse_siblings, once the listeners are known */
	} else {
		return false;
	}
	return true;
}

/* stunnerd's logger applies the items of a spec one by one and skips the malformed ones;
 * keep the good items (in order) and warn about the rest. */
static void parse_loglevel(struct pctx *p, yaml_node_t *v, const char *path, char **dst)
{
	char *spec = *dst, *out = calloc(1, strlen(spec) + 1);
	if (out == NULL) {
		p->nomem = 1;
		return;
	}
	for (char *save = NULL, *it = strtok_r(spec, ",", &save); it != NULL;
	     it = strtok_r(NULL, ",", &save)) {
		if (log_check_spec(it) != 0) {
			pctx_warn(p, v, path,
				  "item '%s' is malformed (skipped, as stunnerd does; "
				  "expected SCOPE:LEVEL with DISABLE|ERROR|WARN|INFO|DEBUG|TRACE)",
				  it);
			continue;
		}
		if (out[0] != '\0')
			strcat(out, ",");
		strcat(out, it);
	}
	free(spec);
	*dst = out;
	if (out[0] == '\0') {
		free(out);
		*dst = conf_strdup(p, CONF_DEF_LOGLEVEL);
	}
}

static const char *const offload_names[] = { "None", "Auto", "TC", "XDP" };

const char *conf_offload_name(enum conf_offload e)
{
	return (unsigned)e < 4 ? offload_names[e] : "None";
}

/* offload_engine: STUNner's names, case-insensitive; unknown engines are refused, as
 * stunnerd does. */
static void parse_offload(struct pctx *p, yaml_node_t *v, const char *path)
{
	const char *const *names = offload_names;
	char *s = pctx_is_null(v) ? NULL : pctx_string(p, v, path, 0);
	size_t i = 0;

	if (s == NULL || s[0] == '\0') {
		p->cfg->admin.offload_engine = CONF_OFFLOAD_NONE;
		free(s);
		return;
	}
	while (i < 4 && strcasecmp(s, names[i]) != 0)
		i++;
	if (i < 4)
		p->cfg->admin.offload_engine = (enum conf_offload)i;
	else
		pctx_error(p, v, path,
			   "'%s' is not an offload engine (expected None, XDP, TC or "
			   "Auto)",
			   s);
	free(s);
}

/* offload_interfaces: interface names (at most IFNAMSIZ - 1 bytes each). */
static void parse_offload_ifaces(struct pctx *p, yaml_node_t *v, const char *path)
{
	struct conf_admin *a = &p->cfg->admin;
	size_t cnt;

	if (pctx_is_null(v) ||
	    !pctx_list(p, v, path, "interfaces", CONF_MAX_OFFLOAD_IFACES, &cnt))
		return;
	a->offload_ifaces = calloc(cnt ? cnt : 1, sizeof(char *));
	if (a->offload_ifaces == NULL) {
		p->nomem = 1;
		return;
	}
	for (size_t i = 0; i < cnt && !p->nomem; i++) {
		char item[CONF_PATH_MAX];
		yaml_node_t *n = pctx_node(p, v->data.sequence.items.start[i]);
		char *s;

		conf_path_idx(item, path, i);
		s = pctx_string(p, n, item, false);
		if (s == NULL)
			continue;
		if (s[0] == '\0' || strlen(s) > 15 || strchr(s, '/') != NULL) {
			pctx_error(p, n, item, "'%s' is not an interface name (expected 1 to 15 "
				   "bytes, no '/')", s);
			free(s);
			continue;
		}
		a->offload_ifaces[a->n_offload_ifaces++] = s;
	}
}

static const char *const admin_keys[] = {
	"name", "loglevel", "metrics_endpoint", "healthcheck_endpoint", "user_quota",
	"offload_engine", "offload_interfaces", "license_config", "workers", "admin_socket",
	"state_dir", "admin_socket_mode", "log_format", "relay_port_min", "relay_port_max",
	"drain_timeout", "worker_ping_timeout", "worker_stall_timeout", "alternate_server",
	"credential_api_endpoint", "credential_api_token", "credential_api_token_file",
	"siblings", "session_records", NULL
};

static void admin_pair(struct pctx *p, const char *key, yaml_node_t *k, yaml_node_t *v,
		       const char *path, void *arg)
{
	struct conf_admin *a = &p->cfg->admin;
	int64_t q;
	if (strcasecmp(key, "name") == 0) {
		set_str(p, v, path, &a->name);
		if (a->name && a->name[0] == '\0') {
			free(a->name);
			a->name = conf_strdup(p, CONF_DEF_NAME);
		}
	} else if (strcasecmp(key, "loglevel") == 0) {
		set_str(p, v, path, &a->loglevel);
		if (a->loglevel)
			parse_loglevel(p, v, path, &a->loglevel);
	} else if (strcasecmp(key, "metrics_endpoint") == 0) {
		set_url(p, v, path, &a->metrics_endpoint);
	} else if (strcasecmp(key, "healthcheck_endpoint") == 0) {
		set_url(p, v, path, &a->healthcheck_endpoint);
	} else if (strcasecmp(key, "user_quota") == 0) {
		if (!pctx_is_null(v) && pctx_int_clamped(p, v, path, &q) == 0)
			p->cfg->limits.user_quota =
				q > CONF_MAX_ALLOCATIONS ? CONF_MAX_ALLOCATIONS : (uint32_t)q;
	} else if (strcasecmp(key, "offload_engine") == 0) {
		parse_offload(p, v, path);
	} else if (strcasecmp(key, "offload_interfaces") == 0) {
		parse_offload_ifaces(p, v, path);
	} else if (strcasecmp(key, "license_config") == 0) {
		if (!pctx_is_null(v))
			pctx_warn(p, k, path,
				  "STUNner's premium license is not used by turngate "
				  "(ignored)");
	} else if (!admin_ext_pair(p, key, v, path, arg)) {
		pctx_unknown_key(p, k, path, admin_keys);
	}
}

/* The credential API's bearer token: inline or from a file, not both; "" means none. */
static void finish_token(struct pctx *p, const struct range_nodes *rn, const char *path)
{
	struct conf_admin *a = &p->cfg->admin;
	char sub[CONF_PATH_MAX];
	if (rn->token_file != NULL && !pctx_is_null(rn->token_file)) {
		conf_path_key(sub, path, "credential_api_token_file");
		if (a->credential_api_token != NULL)
			pctx_error(p, rn->token_file, sub,
				   "given together with credential_api_token "
				   "(expected one of them)");
		else
			a->credential_api_token =
				conf_read_secret_file(p, rn->token_file, sub,
						      &a->credential_api_token_file);
	}
	if (a->credential_api_token != NULL && a->credential_api_token[0] == '\0') {
		conf_wipe_free(a->credential_api_token);
		a->credential_api_token = NULL;
	}
}

/* The credential API mints credentials for whoever asks: without a token it is served on
 * loopback only (a wildcard host is every address). */
static void check_cred_exposure(struct pctx *p, const struct range_nodes *rn, const char *path)
{
	const char *u = p->cfg->admin.credential_api_endpoint;
	char sub[CONF_PATH_MAX];
	if (u == NULL || u[0] == '\0' || p->cfg->admin.credential_api_token != NULL ||
	    rn->cred_endpoint == NULL || !http_url_ok(u) || http_url_loopback(u))
		return;
	conf_path_key(sub, path, "credential_api_endpoint");
	pctx_error(p, rn->cred_endpoint, sub,
		   "'%s' is served beyond loopback without credential_api_token: anyone who "
		   "reaches it could mint credentials (expected a 127.0.0.1, [::1] or localhost "
		   "host, or a token)",
		   u);
}

void conf_parse_admin(struct pctx *p, yaml_node_t *n, const char *path)
{
	struct range_nodes rn = { 0 };
	struct conf_admin *a = &p->cfg->admin;
	pctx_map_each(p, n, path, admin_pair, &rn);
	finish_token(p, &rn, path);
	check_cred_exposure(p, &rn, path);
	if (rn.cred_endpoint != NULL && a->credential_api_endpoint != NULL &&
	    http_url_ok(a->credential_api_endpoint)) {
		char sub[CONF_PATH_MAX];
		conf_path_key(sub, path, "credential_api_endpoint");
		conf_check_cred_socket(p, rn.cred_endpoint, sub);
	}
	if (a->relay_port_min > a->relay_port_max) {
		char sub[CONF_PATH_MAX];
		conf_path_key(sub, path, rn.min ? "relay_port_min" : "relay_port_max");
		pctx_error(
			p, rn.min ? rn.min : rn.max, sub,
			"relay_port_min %u is greater than relay_port_max %u (expected MIN <= MAX)",
			a->relay_port_min, a->relay_port_max);
	}
	if (a->alternate_server && a->alternate_server[0] == '\0') {
		free(a->alternate_server);
		a->alternate_server = NULL;
	}
}

struct limit_key {
	const char *key;
	size_t off;
	uint32_t min, max;
};

#define LIM(k, lo, hi)                                      \
	{                                                   \
#k, offsetof(struct conf_limits, k), lo, hi \
	}
static const struct limit_key limit_keys[] = {
	LIM(max_allocations, 1, CONF_MAX_ALLOCATIONS),
	LIM(user_quota, 0, CONF_MAX_ALLOCATIONS),
	LIM(total_quota, 0, CONF_MAX_ALLOCATIONS),
	LIM(max_permissions, 1, CONF_MAX_PERMISSIONS),
	LIM(max_channels, 1, CONF_MAX_CHANNELS),
	LIM(allocation_lifetime, 1, 86400),
	LIM(max_allocation_lifetime, 1, 86400),
	LIM(permission_lifetime, 1, 86400),
	LIM(channel_lifetime, 1, 86400),
	LIM(nonce_lifetime, 1, 86400),
	LIM(unauth_rate, 0, 1000000),
	LIM(unauth_burst, 1, 1000000),
	LIM(unauth_prefix_v4, 0, 32),
	LIM(unauth_prefix_v6, 0, 128),
	LIM(unauth_trust_window, 1, 86400),
	LIM(unauth_trust_credits, 0, 65535),
	LIM(auth_fail_prefix, 0, CONF_MAX_AUTH_FAIL),
	LIM(auth_fail_user, 0, CONF_MAX_AUTH_FAIL),
	LIM(bandwidth_burst_ms, 1, 60000),
	LIM(tcp_connections, 1, CONF_MAX_TCP_CONNECTIONS),
	LIM(tcp_pending_connects, 1, 65536),
	LIM(tcp_connect_timeout, 1, 300),
	LIM(tcp_buffer, CONF_MIN_TCP_BUFFER, CONF_MAX_TCP_BUFFER),
	LIM(source_connections, 0, 1000000),
	LIM(source_tls_handshakes, 0, 1000000),
	LIM(source_dtls_handshakes, 0, 1000000),
	LIM(prefix_connections, 0, 1000000),
	LIM(prefix_tls_handshakes, 0, 1000000),
	LIM(prefix_dtls_handshakes, 0, 1000000),
	LIM(preauth_timeout, 1, 3600),
	LIM(upgrade_linger, 0, CONF_MAX_UPGRADE_LINGER),
	LIM(wake_coalesce_us, 0, CONF_MAX_WAKE_COALESCE_US),
	LIM(wake_coalesce_rate, 1, CONF_MAX_WAKE_COALESCE_RATE),
};

struct limit_nodes {
	yaml_node_t *n[sizeof(limit_keys) / sizeof(limit_keys[0])];
};

/* The limits' keys for the "did you mean": the table's and the three parsed apart. */
static void limits_unknown(struct pctx *p, yaml_node_t *k, const char *path)
{
	static const char *const apart[] = { "channel_numbers", "allocation_bps", "user_bps" };
	const char *known[sizeof(limit_keys) / sizeof(limit_keys[0]) + 4];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(apart) / sizeof(apart[0]); i++)
		known[n++] = apart[i];
	for (size_t i = 0; i < sizeof(limit_keys) / sizeof(limit_keys[0]); i++)
		known[n++] = limit_keys[i].key;
	known[n] = NULL;
	pctx_unknown_key(p, k, path, known);
}

static void limits_pair(struct pctx *p, const char *key, yaml_node_t *k, yaml_node_t *v,
			const char *path, void *arg)
{
	struct limit_nodes *ln = arg;
	if (strcasecmp(key, "channel_numbers") == 0) {
		parse_chan_range(p, v, path, &p->cfg->limits.channel_numbers);
		return;
	}
	if (strcasecmp(key, "max_allocations") == 0 && v->type == YAML_SCALAR_NODE &&
	    strcasecmp((const char *)v->data.scalar.value, "auto") == 0) {
		p->cfg->limits.max_allocations_auto = true;
		return;
	}
	if (strcasecmp(key, "max_allocations") == 0 && !pctx_is_null(v))
		p->cfg->limits.max_allocations_auto = false;
	if (strcasecmp(key, "user_quota") == 0 && v->type == YAML_SCALAR_NODE &&
	    strcasecmp((const char *)v->data.scalar.value, "auto") == 0) {
		p->cfg->limits.user_quota = CONF_USER_QUOTA_AUTO;
		return;
	}
	if (strcasecmp(key, "allocation_bps") == 0 || strcasecmp(key, "user_bps") == 0) {
		uint64_t *dst = strcasecmp(key, "user_bps") == 0 ? &p->cfg->limits.user_bps
								  : &p->cfg->limits.allocation_bps;
		if (!pctx_is_null(v))
			pctx_uint(p, v, path, 0, CONF_MAX_BPS, dst);
		return;
	}
	for (size_t i = 0; i < sizeof(limit_keys) / sizeof(limit_keys[0]); i++) {
		uint32_t *dst;
		if (strcasecmp(key, limit_keys[i].key) != 0)
			continue;
		dst = (uint32_t *)((char *)&p->cfg->limits + limit_keys[i].off);
		set_u32(p, v, path, limit_keys[i].min, limit_keys[i].max, dst);
		ln->n[i] = v;
		return;
	}
	limits_unknown(p, k, path);
}

void conf_parse_limits(struct pctx *p, yaml_node_t *n, const char *path)
{
	struct limit_nodes ln = { { 0 } };
	struct conf_limits *l = &p->cfg->limits;
	char sub[CONF_PATH_MAX];
	pctx_map_each(p, n, path, limits_pair, &ln);
	if (l->allocation_lifetime > l->max_allocation_lifetime) {
		conf_path_key(sub, path, "allocation_lifetime");
		pctx_error(p, ln.n[5] ? ln.n[5] : n, sub,
			   "%u is greater than max_allocation_lifetime %u (expected at most that)",
			   l->allocation_lifetime, l->max_allocation_lifetime);
	}
	p->limits_node = n;
	p->total_quota_node = ln.n[2];
}
