/* Redacted JSON rendering of a loaded config, for the admin `config` command and HTTP /status. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf_internal.h"

#define REDACTED "<redacted>"

static void set_s(json_t *o, const char *k, const char *v)
{
	json_object_set_new(o, k, v ? json_string(v) : json_null());
}

static void set_i(json_t *o, const char *k, json_int_t v)
{
	json_object_set_new(o, k, json_integer(v));
}

static json_t *auth_json(const struct conf_auth *a)
{
	json_t *o = json_object(), *cred = json_object(), *users = json_array();
	if (o == NULL || cred == NULL || users == NULL) {
		json_decref(o);
		json_decref(cred);
		json_decref(users);
		return NULL;
	}
	set_s(o, "type", conf_auth_type_name(a->type));
	set_s(o, "realm", a->realm);
	if (a->type == CONF_AUTH_STATIC && a->n_users > 0) {
		set_s(cred, "username", a->users[0].username);
		set_s(cred, "password", REDACTED);
	}
	for (size_t i = 1; a->type == CONF_AUTH_STATIC && i < a->n_users; i++) {
		json_t *u = json_object();
		set_s(u, "username", a->users[i].username);
		set_s(u, "password", REDACTED);
		json_array_append_new(users, u);
	}
	if (a->type == CONF_AUTH_EPHEMERAL && a->secret)
		set_s(cred, "secret", REDACTED);
	json_object_set_new(o, "credentials", cred);
	json_object_set_new(o, "users", users);
	if (a->prev_secret) {
		set_s(o, "previous_secret", REDACTED);
		set_i(o, "previous_secret_until", a->prev_deadline);
	}
	json_object_set_new(o, "strict_expiry", json_boolean(a->strict_expiry));
	return o;
}

static json_t *proxyproto_json(const struct conf_listener *l)
{
	json_t *o = json_object(), *v = json_array(), *t = json_array();

	for (unsigned i = 0; i < 2; i++)
		if (l->pp_versions & (1u << i))
			json_array_append_new(v, json_integer(i + 1));
	for (uint32_t i = 0; i < l->pp_n_trusted; i++) {
		char ip[INET6_ADDRSTRLEN], txt[INET6_ADDRSTRLEN + 8];

		if (!inet_ntop(l->pp_trusted[i].family, l->pp_trusted[i].addr, ip, sizeof(ip)))
			continue;
		snprintf(txt, sizeof(txt), "%s/%u", ip, l->pp_trusted[i].len);
		json_array_append_new(t, json_string(txt));
	}
	json_object_set_new(o, "versions", v);
	json_object_set_new(o, "trusted", t);
	return o;
}

static json_t *listener_json(const struct conf_listener *l)
{
	json_t *o = json_object(), *routes = json_array();
	if (o == NULL || routes == NULL) {
		json_decref(o);
		json_decref(routes);
		return NULL;
	}
	set_s(o, "name", l->name);
	set_s(o, "protocol", conf_proto_name(l->protocol));
	set_s(o, "address", l->address);
	set_i(o, "port", l->port);
	set_s(o, "public_address", l->public_address);
	set_i(o, "public_port", l->public_port);
	set_s(o, "bind_address", l->bind_address);
	set_s(o, "relay_address_mask", l->relay_mask);
	set_s(o, "dual_stack_address", l->dual_stack);
	set_i(o, "relay_port_min", l->relay_port_min);
	set_i(o, "relay_port_max", l->relay_port_max);
	set_i(o, "max_allocations", l->max_allocations);
	set_i(o, "max_bps", (json_int_t)l->max_bps);
	set_s(o, "cert", l->cert_pem ? REDACTED : NULL);
	set_s(o, "key", l->key_pem ? REDACTED : NULL);
	set_s(o, "cert_file", l->cert_file);
	set_s(o, "key_file", l->key_file);
	for (size_t i = 0; i < l->n_routes; i++)
		json_array_append_new(routes, json_string(l->routes[i]));
	json_object_set_new(o, "routes", routes);
	if (l->pp_versions)
		json_object_set_new(o, "proxy_protocol", proxyproto_json(l));
	if (l->auth)
		json_object_set_new(o, "auth", auth_json(l->auth));
	return o;
}

static json_t *cluster_json(const struct conf_cluster *c)
{
	json_t *o = json_object(), *eps = json_array();
	if (o == NULL || eps == NULL) {
		json_decref(o);
		json_decref(eps);
		return NULL;
	}
	set_s(o, "name", c->name);
	set_s(o, "type", conf_cluster_type_name(c->type));
	set_s(o, "protocol", conf_cluster_proto_name(c->protocol));
	for (size_t i = 0; i < c->n_endpoints; i++)
		json_array_append_new(eps, json_string(c->endpoints[i].text));
	json_object_set_new(o, "endpoints", eps);
	if (c->admit_special != 0) {
		json_t *adm = json_array();
		for (unsigned i = 0; adm != NULL && i < CONF_SPECIAL_COUNT; i++)
			if (c->admit_special & (1u << i))
				json_array_append_new(adm, json_string(conf_special_name(1u << i)));
		json_object_set_new(o, "admit_special", adm);
	}
	return o;
}

static json_t *addr_text(const struct sockaddr_storage *ss)
{
	char buf[INET6_ADDRSTRLEN] = "";
	const void *a = ss->ss_family == AF_INET
				? (const void *)&((const struct sockaddr_in *)ss)->sin_addr
				: (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;

	if (inet_ntop(ss->ss_family, a, buf, sizeof(buf)) == NULL)
		return json_string("?");
	return json_string(buf);
}

json_t *conf_siblings_json(const struct conf *c)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < c->admin.n_siblings && arr != NULL; i++) {
		const struct conf_sibling *s = &c->admin.siblings[i];
		json_t *o = json_object(), *res = json_array();

		for (size_t j = 0; j < s->n_resolved && res != NULL; j++)
			json_array_append_new(res, addr_text(&s->resolved[j]));
		if (o == NULL || res == NULL || json_array_append_new(arr, o) != 0) {
			json_decref(res);
			json_decref(arr);
			return NULL;
		}
		set_s(o, "address", s->address);
		set_i(o, "relay_port_min", s->relay_port_min);
		set_i(o, "relay_port_max", s->relay_port_max);
		json_object_set_new(o, "self", json_boolean(s->self));
		json_object_set_new(o, "resolved", res);
	}
	return arr;
}

static json_t *admin_json(const struct conf *c)
{
	const struct conf_admin *a = &c->admin;
	json_t *o = json_object();
	char mode[8];
	if (o == NULL)
		return NULL;
	set_s(o, "name", a->name);
	set_s(o, "loglevel", a->loglevel);
	set_s(o, "metrics_endpoint", a->metrics_endpoint ? a->metrics_endpoint : "");
	set_s(o, "healthcheck_endpoint", a->healthcheck_endpoint);
	if (c->limits.user_quota == CONF_USER_QUOTA_AUTO)
		set_s(o, "user_quota", "auto");
	else
		set_i(o, "user_quota", c->limits.user_quota);
	set_i(o, "workers", a->workers);
	set_s(o, "admin_socket", a->admin_socket);
	/* As an operator writes it ("0600"): a string that parse_mode reads back as the same
	 * mode, where the decimal 384 would be refused. */
	snprintf(mode, sizeof(mode), "%04o", (unsigned)(a->admin_socket_mode & 0777));
	set_s(o, "admin_socket_mode", mode);
	set_s(o, "state_dir", a->state_dir);
	set_s(o, "log_format", a->log_format == CONF_LOG_JSON ? "json" : "text");
	set_i(o, "relay_port_min", a->relay_port_min);
	set_i(o, "relay_port_max", a->relay_port_max);
	set_i(o, "drain_timeout", a->drain_timeout);
	set_i(o, "worker_ping_timeout", a->worker_ping_timeout);
	set_i(o, "worker_stall_timeout", a->worker_stall_timeout);
	set_s(o, "alternate_server", a->alternate_server);
	set_s(o, "credential_api_endpoint", a->credential_api_endpoint);
	if (a->credential_api_token != NULL)
		set_s(o, "credential_api_token", REDACTED);
	set_s(o, "credential_api_token_file", a->credential_api_token_file);
	if (a->records_file != NULL || a->records_webhook != NULL) {
		json_t *r = json_object();

		if (r != NULL) {
			set_s(r, "file", a->records_file);
			set_s(r, "webhook", a->records_webhook);
			if (a->records_start)
				json_object_set_new(r, "start", json_true());
			if (a->records_webhook_ca_file != NULL)
				set_s(r, "webhook_ca_file", a->records_webhook_ca_file);
			if (a->records_webhook_server_name != NULL)
				set_s(r, "webhook_server_name", a->records_webhook_server_name);
			json_object_set_new(o, "session_records", r);
		}
	}
	set_s(o, "offload_engine", conf_offload_name(a->offload_engine));
	{
		json_t *ifs = json_array();

		for (size_t i = 0; i < a->n_offload_ifaces && ifs != NULL; i++)
			json_array_append_new(ifs, json_string(a->offload_ifaces[i]));
		json_object_set_new(o, "offload_interfaces", ifs ? ifs : json_null());
	}
	json_object_set_new(o, "siblings", conf_siblings_json(c));
	return o;
}

static json_t *limits_json(const struct conf_limits *l)
{
	json_t *o = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
			 "max_allocations", (json_int_t)l->max_allocations, "user_quota",
			 (json_int_t)l->user_quota, "total_quota", (json_int_t)l->total_quota,
			 "max_permissions", (json_int_t)l->max_permissions, "max_channels",
			 (json_int_t)l->max_channels, "allocation_lifetime",
			 (json_int_t)l->allocation_lifetime, "max_allocation_lifetime",
			 (json_int_t)l->max_allocation_lifetime, "permission_lifetime",
			 (json_int_t)l->permission_lifetime, "channel_lifetime",
			 (json_int_t)l->channel_lifetime, "nonce_lifetime",
			 (json_int_t)l->nonce_lifetime, "channel_numbers",
			 l->channel_numbers == CONF_CHAN_RFC5766 ? "rfc5766" : "rfc8656",
			 "unauth_rate", (json_int_t)l->unauth_rate, "unauth_burst",
			 (json_int_t)l->unauth_burst, "unauth_prefix_v4",
			 (json_int_t)l->unauth_prefix_v4, "unauth_prefix_v6",
			 (json_int_t)l->unauth_prefix_v6, "unauth_trust_window",
			 (json_int_t)l->unauth_trust_window, "unauth_trust_credits",
			 (json_int_t)l->unauth_trust_credits, "allocation_bps",
			 (json_int_t)l->allocation_bps, "user_bps", (json_int_t)l->user_bps,
			 "bandwidth_burst_ms", (json_int_t)l->bandwidth_burst_ms);

	if (o != NULL) {
		set_i(o, "tcp_connections", l->tcp_connections);
		set_i(o, "tcp_pending_connects", l->tcp_pending_connects);
		set_i(o, "tcp_connect_timeout", l->tcp_connect_timeout);
		set_i(o, "tcp_buffer", l->tcp_buffer);
		set_i(o, "auth_fail_prefix", l->auth_fail_prefix);
		set_i(o, "auth_fail_user", l->auth_fail_user);
		if (l->user_quota == CONF_USER_QUOTA_AUTO)
			json_object_set_new(o, "user_quota", json_string("auto"));
		set_i(o, "source_connections", l->source_connections);
		set_i(o, "source_tls_handshakes", l->source_tls_handshakes);
		set_i(o, "source_dtls_handshakes", l->source_dtls_handshakes);
		set_i(o, "prefix_connections", l->prefix_connections);
		set_i(o, "prefix_tls_handshakes", l->prefix_tls_handshakes);
		set_i(o, "prefix_dtls_handshakes", l->prefix_dtls_handshakes);
		set_i(o, "preauth_timeout", l->preauth_timeout);
		set_i(o, "upgrade_linger", l->upgrade_linger);
		set_i(o, "wake_coalesce_us", l->wake_coalesce_us);
		set_i(o, "wake_coalesce_rate", l->wake_coalesce_rate);
	}
	return o;
}

json_t *conf_to_json_redacted(const struct conf *c)
{
	json_t *o = json_object(), *ls = json_array(), *cs = json_array();
	if (o == NULL || ls == NULL || cs == NULL)
		goto fail;
	set_s(o, "version", c->version ? c->version : "v1");
	if (json_object_set_new(o, "admin", admin_json(c)) != 0 ||
	    json_object_set_new(o, "auth", auth_json(&c->auth)) != 0 ||
	    json_object_set_new(o, "limits", limits_json(&c->limits)) != 0)
		goto fail;
	for (size_t i = 0; i < c->n_listeners; i++)
		if (json_array_append_new(ls, listener_json(&c->listeners[i])) != 0)
			goto fail;
	for (size_t i = 0; i < c->n_clusters; i++)
		if (json_array_append_new(cs, cluster_json(&c->clusters[i])) != 0)
			goto fail;
	json_object_set_new(o, "listeners", ls);
	json_object_set_new(o, "clusters", cs);
	return o;
fail:
	json_decref(o);
	json_decref(ls);
	json_decref(cs);
	return NULL;
}
