/* Credential API responses (stunner-auth-service compatible): URIs, minting, JSON. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "conf/conf.h"
#include "http/http_cred.h"
#include "stun/stun_auth.h"

/* STUNner's stand-in for "the node's address", never a usable host. */
#define NODE_ADDR_PLACEHOLDER "__node_address_placeholder"

int http_json_error(struct http_buf *out, int status, const char *msg)
{
	json_t *o = json_pack("{s:i, s:s}", "status", status, "message", msg);
	char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (txt == NULL)
		return -ENOMEM;
	http_buf_puts(out, txt);
	http_buf_puts(out, "\n");
	free(txt);
	return http_buf_error(out);
}

int http_cred_listener_uri(const struct conf *cfg, size_t idx, const char *host_override, char *buf,
			   size_t cap)
{
	const struct conf_listener *l;
	const char *host = host_override;
	bool secure, udp, v6;
	unsigned port;
	int n;

	if (idx >= cfg->n_listeners)
		return -EINVAL;
	l = &cfg->listeners[idx];
	if (host == NULL || *host == '\0')
		host = l->public_address && *l->public_address ? l->public_address : l->address;
	if (host == NULL || *host == '\0' || strcmp(host, NODE_ADDR_PLACEHOLDER) == 0)
		host = "0.0.0.0";
	secure = l->protocol == CONF_PROTO_TURN_TLS || l->protocol == CONF_PROTO_TURN_DTLS;
	udp = l->protocol == CONF_PROTO_TURN_UDP || l->protocol == CONF_PROTO_TURN_DTLS;
	v6 = strchr(host, ':') != NULL;
	port = l->public_port ? l->public_port : l->port;
	n = snprintf(buf, cap, "%s:%s%s%s:%u?transport=%s", secure ? "turns" : "turn",
		     v6 ? "[" : "", host, v6 ? "]" : "", port, udp ? "udp" : "tcp");
	return n < 0 || (size_t)n >= cap ? -ENOBUFS : 0;
}

/* STUNner names listeners "namespace/gateway/listener"; accept the full name or its tail. */
static bool listener_matches(const struct conf_listener *l, const char *want)
{
	const char *slash;

	if (*want == '\0')
		return true;
	if (strcmp(l->name, want) == 0)
		return true;
	slash = strrchr(l->name, '/');
	return slash != NULL && strcmp(slash + 1, want) == 0;
}

/* admin.name is "namespace/gateway" under the operator. */
static bool gateway_matches(const struct conf *cfg, const struct http_cred_query *q)
{
	const char *name = cfg->admin.name ? cfg->admin.name : "";
	size_t nl = strlen(q->namespace_);

	if (nl == 0)
		return true;
	if (strncmp(name, q->namespace_, nl) != 0 || name[nl] != '/')
		return false;
	return q->gateway[0] == '\0' || strcmp(name + nl + 1, q->gateway) == 0;
}

static const struct conf_auth *listener_auth(const struct conf *cfg, size_t i)
{
	return cfg->listeners[i].auth ? cfg->listeners[i].auth : &cfg->auth;
}

/* One credential for auth block a: username/password strings in caller buffers. */
struct minted {
	char user[24 + HTTP_CRED_USER_MAX];
	char pass[STUN_REST_PASSWORD_LEN + 1];
	bool has;   /* false for auth "none" */
};

static int mint(const struct conf_auth *a, const struct http_cred_query *q, int64_t now,
		struct minted *m, const char **why)
{
	uint64_t expiry;
	int rc;

	memset(m, 0, sizeof(*m));
	if (a->type == CONF_AUTH_NONE)
		return 0;
	m->has = true;
	if (a->type == CONF_AUTH_STATIC) {
		if (a->n_users == 0 || strlen(a->users[0].username) >= sizeof(m->user) ||
		    strlen(a->users[0].password) >= sizeof(m->pass)) {
			*why = "no usable static credentials configured";
			return -ENOENT;
		}
		strcpy(m->user, a->users[0].username);
		strcpy(m->pass, a->users[0].password);
		return 0;
	}
	if (a->secret == NULL || *a->secret == '\0') {
		*why = "no shared secret configured";
		return -ENOENT;
	}
	expiry = (uint64_t)(now < 0 ? 0 : now) + q->ttl;
	snprintf(m->user, sizeof(m->user), "%" PRIu64 ":%s", expiry, q->username);
	rc = stun_rest_password((const uint8_t *)a->secret, strlen(a->secret), m->user,
				strlen(m->user), m->pass, sizeof(m->pass));
	if (rc != 0)
		*why = "credential minting failed";
	return rc;
}

/* Adds the URIs of every matching listener using auth block a (NULL: any) to urls.
 * Returns the number added or -ENOMEM. */
static int collect_uris(const struct conf *cfg, const struct http_cred_query *q,
			const struct conf_auth *a, json_t *urls)
{
	char uri[HTTP_CRED_HOST_MAX + 64];
	int n = 0;
	for (size_t i = 0; i < cfg->n_listeners; i++) {
		if (!listener_matches(&cfg->listeners[i], q->listener))
			continue;
		if (a != NULL && listener_auth(cfg, i) != a)
			continue;
		if (http_cred_listener_uri(cfg, i, q->public_addr, uri, sizeof(uri)) != 0)
			continue;
		if (json_array_append_new(urls, json_string(uri)) != 0)
			return -ENOMEM;
		n++;
	}
	return n;
}

static const char *policy_name(enum http_ice_policy p)
{
	return p == HTTP_ICE_RELAY ? "relay" : p == HTTP_ICE_PUBLIC ? "public" : "all";
}

/* One iceServers entry per distinct auth block among the matching listeners. */
static int render_ice(const struct conf *cfg, const struct http_cred_query *q, int64_t now,
		      json_t *root, const char **why)
{
	json_t *servers = json_array();
	int rc = servers ? json_object_set_new(root, "iceServers", servers) : -ENOMEM;
	for (size_t i = 0; rc == 0 && i < cfg->n_listeners; i++) {
		const struct conf_auth *a = listener_auth(cfg, i);
		bool seen = !listener_matches(&cfg->listeners[i], q->listener);
		struct minted m;
		json_t *urls, *srv;

		for (size_t k = 0; !seen && k < i; k++)
			seen = listener_auth(cfg, k) == a &&
			       listener_matches(&cfg->listeners[k], q->listener);
		if (seen)
			continue;
		urls = json_array();
		srv = json_object();
		rc = urls && srv ? 0 : -ENOMEM;
		if (rc == 0 && collect_uris(cfg, q, a, urls) < 0)
			rc = -ENOMEM;
		if (rc == 0)
			rc = mint(a, q, now, &m, why);
		if (rc == 0 && json_object_set(srv, "urls", urls) != 0)
			rc = -ENOMEM;
		if (rc == 0 && m.has &&
		    (json_object_set_new(srv, "username", json_string(m.user)) ||
		     json_object_set_new(srv, "credential", json_string(m.pass))))
			rc = -ENOMEM;
		if (rc == 0 && json_array_append(servers, srv) != 0)
			rc = -ENOMEM;
		explicit_bzero(&m, sizeof(m));
		json_decref(urls);
		json_decref(srv);
	}
	if (rc == 0 && json_object_set_new(root, "iceTransportPolicy",
					   json_string(policy_name(q->policy))) != 0)
		rc = -ENOMEM;
	return rc;
}

static int render_rest(const struct conf *cfg, const struct http_cred_query *q, int64_t now,
		       json_t *root, const char **why)
{
	const struct conf_auth *a = NULL;
	json_t *uris = json_array();
	struct minted m;
	int rc = uris ? 0 : -ENOMEM;

	for (size_t i = 0; a == NULL && i < cfg->n_listeners; i++)
		if (listener_matches(&cfg->listeners[i], q->listener))
			a = listener_auth(cfg, i);
	if (rc == 0 && collect_uris(cfg, q, a, uris) < 0)
		rc = -ENOMEM;
	if (rc == 0)
		rc = mint(a, q, now, &m, why);
	if (rc == 0 && (json_object_set_new(root, "username", json_string(m.has ? m.user : "")) ||
			json_object_set_new(root, "password", json_string(m.has ? m.pass : "")) ||
			json_object_set_new(root, "ttl", json_integer(q->ttl)) ||
			json_object_set(root, "uris", uris)))
		rc = -ENOMEM;
	explicit_bzero(&m, sizeof(m));
	json_decref(uris);
	return rc;
}

int http_cred_render(const struct conf *cfg, const struct http_cred_query *q,
		     enum http_cred_form form, int64_t now, struct http_buf *out, int *status)
{
	const char *why = NULL;
	json_t *root = NULL, *probe = json_array();
	char *txt = NULL;
	int rc = probe ? 0 : -ENOMEM;

	*status = 200;
	if (rc == 0 && (!gateway_matches(cfg, q) || collect_uris(cfg, q, NULL, probe) == 0)) {
		*status = 404;
		rc = http_json_error(out, 404, "no valid listener found");
		goto out;
	}
	root = json_object();
	if (root == NULL)
		rc = -ENOMEM;
	if (rc == 0)
		rc = form == HTTP_CRED_ICE ? render_ice(cfg, q, now, root, &why)
					   : render_rest(cfg, q, now, root, &why);
	if (rc == -ENOENT || (rc != 0 && why != NULL)) {
		*status = 500;
		rc = http_json_error(out, 500, why ? why : "no credentials configured");
		goto out;
	}
	if (rc == 0 && (txt = json_dumps(root, JSON_COMPACT)) == NULL)
		rc = -ENOMEM;
	if (rc == 0) {
		http_buf_puts(out, txt);
		http_buf_puts(out, "\n");
		rc = http_buf_error(out);
	}
out:
	if (txt != NULL) {
		explicit_bzero(txt, strlen(txt));
		free(txt);
	}
	json_decref(root);
	json_decref(probe);
	return rc;
}
