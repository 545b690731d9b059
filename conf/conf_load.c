/* Config loader: defaults, the YAML document walk in a fixed section order, and conf_free. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "conf/conf_internal.h"

static int conf_defaults(struct conf *c)
{
	c->magic = CONF_MAGIC;
	c->admin.admin_socket_mode = 0600;
	c->admin.relay_port_min = CONF_DEF_RELAY_MIN;
	c->admin.relay_port_max = CONF_DEF_RELAY_MAX;
	c->admin.drain_timeout = 30;
	c->admin.worker_ping_timeout = 15;
	c->admin.worker_stall_timeout = 20;
	c->admin.log_format = CONF_LOG_TEXT;
	c->limits = (struct conf_limits){
		.max_allocations_auto = true,
		.user_quota = CONF_USER_QUOTA_AUTO,
		.max_permissions = 32,
		.max_channels = 32,
		.allocation_lifetime = 600,
		.max_allocation_lifetime = 3600,
		.permission_lifetime = 300,
		.channel_lifetime = 600,
		.nonce_lifetime = 3600,
		.channel_numbers = CONF_CHAN_RFC5766,
		.unauth_rate = 20,
		.unauth_burst = 100,
		.unauth_prefix_v4 = 24,
		.unauth_prefix_v6 = 64,
		.unauth_trust_window = 3600,
		.unauth_trust_credits = 1000,
		.auth_fail_prefix = CONF_DEF_AUTH_FAIL_PREFIX,
		.auth_fail_user = CONF_DEF_AUTH_FAIL_USER,
		.bandwidth_burst_ms = 500,
		.tcp_connections = CONF_DEF_TCP_CONNECTIONS,
		.tcp_pending_connects = CONF_DEF_TCP_PENDING_CONNECTS,
		.tcp_connect_timeout = CONF_DEF_TCP_CONNECT_TIMEOUT,
		.tcp_buffer = CONF_DEF_TCP_BUFFER,
		.source_connections = CONF_DEF_SOURCE_CONNECTIONS,
		.source_tls_handshakes = CONF_DEF_SOURCE_HANDSHAKES,
		.source_dtls_handshakes = CONF_DEF_SOURCE_HANDSHAKES,
		.prefix_connections = CONF_DEF_PREFIX_FACTOR * CONF_DEF_SOURCE_CONNECTIONS,
		.prefix_tls_handshakes = CONF_DEF_PREFIX_FACTOR * CONF_DEF_SOURCE_HANDSHAKES,
		.prefix_dtls_handshakes = CONF_DEF_PREFIX_FACTOR * CONF_DEF_SOURCE_HANDSHAKES,
		.preauth_timeout = CONF_DEF_PREAUTH_TIMEOUT,
		.upgrade_linger = CONF_DEF_UPGRADE_LINGER,
		.wake_coalesce_us = CONF_DEF_WAKE_COALESCE_US,
		.wake_coalesce_rate = CONF_DEF_WAKE_COALESCE_RATE,
	};
	conf_auth_defaults(&c->auth);
	c->admin.name = strdup(CONF_DEF_NAME);
	c->admin.loglevel = strdup(CONF_DEF_LOGLEVEL);
	c->admin.healthcheck_endpoint = strdup(CONF_DEF_HEALTH);
	c->admin.admin_socket = strdup(CONF_DEF_ADMIN_SOCKET);
	if (!c->admin.name || !c->admin.loglevel || !c->admin.healthcheck_endpoint ||
	    !c->admin.admin_socket || conf_auth_default_realm(&c->auth) != 0)
		return -ENOMEM;
	return 0;
}

enum {
	R_VERSION,
	R_ADMIN,
	R_LIMITS,
	R_CLUSTERS,
	R_AUTH,
	R_LISTENERS,
	R_N
};
static const char *const root_keys[R_N + 1] = { "version",  "admin", "limits",
						"clusters", "auth",  "listeners", NULL };

struct root_nodes {
	yaml_node_t *k[R_N], *v[R_N];
};

static void root_pair(struct pctx *p, const char *key, yaml_node_t *k, yaml_node_t *v,
		      const char *path, void *arg)
{
	struct root_nodes *r = arg;
	for (int i = 0; i < R_N; i++) {
		if (strcasecmp(key, root_keys[i]) == 0) {
			r->k[i] = k;
			r->v[i] = v;
			return;
		}
	}
	pctx_unknown_key(p, k, path, root_keys);
}

static void parse_version(struct pctx *p, yaml_node_t *root, yaml_node_t *v)
{
	char *s;
	if (v == NULL || pctx_is_null(v)) {
		pctx_error(p, v ? v : root, "version", "missing (expected v1)");
		return;
	}
	s = pctx_string(p, v, "version", false);
	if (s == NULL)
		return;
	/* stunnerd converts v1alpha1 to v1 (the stunnerd image's own stunnerd.conf is one):
	 * the same keys, less the listeners' min/max_relay_port, and auth.type required. */
	if (strcmp(s, "v1alpha1") == 0) {
		p->v1alpha1 = true;
		pctx_warn(p, v, "version", "v1alpha1 is read as v1, as stunnerd converts it");
		free(s);
		s = conf_strdup(p, "v1");
	} else if (strcmp(s, "v1") != 0) {
		pctx_error(p, v, "version", "unsupported API version '%s' (expected v1)", s);
	}
	free(p->cfg->version);
	p->cfg->version = s;
}

/* Sections are parsed in dependency order (clusters before the listeners whose routes
 * name them); conf_diags_sort() restores document order for the report. */
static void parse_root(struct pctx *p, yaml_node_t *root)
{
	struct root_nodes r;
	memset(&r, 0, sizeof(r));
	if (!pctx_expect(p, root, "", YAML_MAPPING_NODE))
		return;
	pctx_map_each(p, root, "", root_pair, &r);
	parse_version(p, root, r.v[R_VERSION]);
	if (r.v[R_ADMIN] && !pctx_is_null(r.v[R_ADMIN]))
		conf_parse_admin(p, r.v[R_ADMIN], "admin");
	if (r.v[R_LIMITS] && !pctx_is_null(r.v[R_LIMITS]))
		conf_parse_limits(p, r.v[R_LIMITS], "limits");
	if (r.v[R_CLUSTERS] && !pctx_is_null(r.v[R_CLUSTERS]))
		conf_parse_clusters(p, r.v[R_CLUSTERS], "clusters");
	if (r.v[R_AUTH] && !pctx_is_null(r.v[R_AUTH]))
		conf_parse_auth(p, r.v[R_AUTH], "auth", &p->cfg->auth, NULL);
	else
		pctx_error(p, root, "auth",
			   "missing (expected an auth section; STUNner's "
			   "default static auth needs credentials)");
	if (r.v[R_LISTENERS] && !pctx_is_null(r.v[R_LISTENERS]))
		conf_parse_listeners(p, r.v[R_LISTENERS], "listeners");
	if (p->siblings && !pctx_is_null(p->siblings))
		conf_parse_siblings(p, p->siblings, "admin.siblings");
	conf_resolve_capacity(p);
}

static void yaml_failed(struct pctx *p, const yaml_parser_t *yp)
{
	const yaml_mark_t *m = &yp->problem_mark;
	if (yp->error == YAML_MEMORY_ERROR) {
		p->nomem = 1;
		return;
	}
	if (yp->context != NULL)
		conf_diag_add(p->diags, CONF_DIAG_ERROR, p->file, (uint32_t)m->line + 1,
			      (uint32_t)m->column + 1, "", "syntax error: %s %s",
			      yp->problem ? yp->problem : "malformed YAML", yp->context);
	else
		conf_diag_add(p->diags, CONF_DIAG_ERROR, p->file, (uint32_t)m->line + 1,
			      (uint32_t)m->column + 1, "", "syntax error: %s",
			      yp->problem ? yp->problem : "malformed YAML");
}

static int load_doc(struct pctx *p, const char *buf, size_t len)
{
	yaml_parser_t yp;
	yaml_document_t doc;
	int rc = 0;
	yaml_node_t *root;
	rc = conf_prescan(p, buf, len);
	if (rc != 0)
		return rc;
	if (!yaml_parser_initialize(&yp))
		return -ENOMEM;
	yaml_parser_set_input_string(&yp, (const unsigned char *)buf, len);
	if (!yaml_parser_load(&yp, &doc)) {
		yaml_failed(p, &yp);
		rc = p->nomem ? -ENOMEM : -EINVAL;
		goto out;
	}
	p->doc = &doc;
	root = yaml_document_get_root_node(&doc);
	if (root == NULL)
		conf_diag_add(p->diags, CONF_DIAG_ERROR, p->file, 0, 0, "",
			      "empty document (expected a STUNner v1 config)");
	else
		parse_root(p, root);
	p->doc = NULL;
	yaml_document_delete(&doc);
out:
	yaml_parser_delete(&yp);
	return rc;
}

int conf_load_string(const char *buf, size_t len, const char *name,
		     const struct conf_load_opts *opts, struct conf **out, struct conf_diags *diags)
{
	struct conf_diags local = { 0 };
	struct conf *c;
	struct pctx p;
	size_t first, errors0;
	int rc = 0;
	*out = NULL;
	if (diags == NULL)
		diags = &local; /* errors must still be counted */
	c = calloc(1, sizeof(*c));
	p = (struct pctx){ .file = name ? name : "<config>", .diags = diags };
	first = diags->n;
	errors0 = diags->n_errors;
	if (c == NULL || conf_defaults(c) != 0 || (c->source = strdup(p.file)) == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	if (opts != NULL) {
		p.getenv = opts->getenv;
		p.getenv_ctx = opts->getenv_ctx;
		p.now = opts->now;
	}
	if (p.now == 0)
		p.now = (int64_t)time(NULL);
	c->loaded_at = p.now;
	p.cfg = c;
	if (len > CONF_MAX_INPUT) {
		conf_diag_add(diags, CONF_DIAG_ERROR, p.file, 0, 0, "",
			      "%zu bytes is too large (expected at most %u)", len, CONF_MAX_INPUT);
		rc = -EFBIG;
		goto out;
	}
	rc = load_doc(&p, buf, len);
	conf_diags_sort(diags, first);
	if (rc == 0 && p.nomem)
		rc = -ENOMEM;
	if (rc == 0 && diags->n_errors > errors0)
		rc = -EINVAL;
out:
	if (rc == -ENOMEM)
		conf_diag_add(diags, CONF_DIAG_ERROR, p.file, 0, 0, "", "out of memory");
	conf_diags_free(&local);
	if (c != NULL)
		diags->json = c->admin.log_format == CONF_LOG_JSON;
	if (rc != 0) {
		conf_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int conf_load_file(const char *path, const struct conf_load_opts *opts, struct conf **out,
		   struct conf_diags *diags)
{
	char *buf = NULL;
	size_t len = 0;
	int rc;
	*out = NULL;
	if (strncmp(path, "file://", 7) == 0)
		path += 7;
	rc = conf_read_file(path, CONF_MAX_INPUT + 1, opts != NULL && opts->stream_ok, &buf,
			    &len);
	if (rc != 0) {
		conf_diag_add(diags, CONF_DIAG_ERROR, path, 0, 0, "", "cannot read: %s",
			      conf_file_strerror(rc));
		return rc;
	}
	rc = conf_load_string(buf, len, path, opts, out, diags);
	explicit_bzero(buf, len);
	free(buf);
	return rc;
}

static void listener_free(struct conf_listener *l)
{
	free(l->name);
	free(l->address);
	free(l->bind_address);
	free(l->public_address);
	free(l->relay_mask);
	free(l->dual_stack);
	free(l->cert_pem);
	if (l->key_pem)
		explicit_bzero(l->key_pem, l->key_pem_len);
	free(l->key_pem);
	free(l->cert_file);
	free(l->key_file);
	for (size_t j = 0; j < l->n_routes; j++)
		free(l->routes[j]);
	free(l->routes);
	if (l->auth) {
		conf_auth_clear(l->auth);
		free(l->auth);
	}
}

void conf_free(struct conf *c)
{
	if (c == NULL)
		return;
	free(c->source);
	free(c->version);
	free(c->admin.name);
	free(c->admin.loglevel);
	free(c->admin.metrics_endpoint);
	free(c->admin.healthcheck_endpoint);
	free(c->admin.admin_socket);
	free(c->admin.state_dir);
	free(c->admin.alternate_server);
	free(c->admin.credential_api_endpoint);
	conf_wipe_free(c->admin.credential_api_token);
	free(c->admin.credential_api_token_file);
	free(c->admin.records_file);
	free(c->admin.records_webhook);
	free(c->admin.records_webhook_ca_file);
	free(c->admin.records_webhook_server_name);
	for (size_t i = 0; i < c->admin.n_offload_ifaces; i++)
		free(c->admin.offload_ifaces[i]);
	free(c->admin.offload_ifaces);
	for (size_t i = 0; i < c->admin.n_siblings; i++) {
		free(c->admin.siblings[i].address);
		free(c->admin.siblings[i].resolved);
	}
	free(c->admin.siblings);
	conf_auth_clear(&c->auth);
	for (size_t i = 0; i < c->n_listeners; i++)
		listener_free(&c->listeners[i]);
	free(c->listeners);
	for (size_t i = 0; i < c->n_clusters; i++) {
		struct conf_cluster *cl = &c->clusters[i];
		free(cl->name);
		for (size_t j = 0; j < cl->n_endpoints; j++) {
			free(cl->endpoints[j].text);
			free(cl->endpoints[j].resolved);
		}
		free(cl->endpoints);
	}
	free(c->clusters);
	explicit_bzero(c, sizeof(*c));
	free(c);
}
