/* Enum names, DNS resolution of STRICT_DNS clusters, listener diffs and the `-t` check entry point. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "conf/conf_internal.h"

const char *conf_auth_type_name(enum conf_auth_type t)
{
	switch (t) {
	case CONF_AUTH_NONE:
		return "none";
	case CONF_AUTH_STATIC:
		return "static";
	case CONF_AUTH_EPHEMERAL:
		return "ephemeral";
	}
	return "?";
}

const char *conf_proto_name(enum conf_proto p)
{
	static const char *const n[] = { "TURN-UDP", "TURN-TCP", "TURN-TLS", "TURN-DTLS" };
	return (unsigned)p < 4 ? n[p] : "?";
}

const char *conf_cluster_type_name(enum conf_cluster_type t)
{
	return t == CONF_CLUSTER_STATIC       ? "STATIC"
	       : t == CONF_CLUSTER_STRICT_DNS ? "STRICT_DNS"
					      : "?";
}

const char *conf_cluster_proto_name(enum conf_cluster_proto p)
{
	return p == CONF_CPROTO_UDP ? "UDP" : p == CONF_CPROTO_TCP ? "TCP" : "?";
}

int conf_resolve_getaddrinfo(void *ctx, const char *name, struct sockaddr_storage *out, size_t max,
			     size_t *n)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM };
	struct addrinfo *res = NULL;
	int rc;
	(void)ctx;
	*n = 0;
	rc = getaddrinfo(name, NULL, &hints, &res);
	if (rc == EAI_MEMORY)
		return -ENOMEM;
#ifdef EAI_NODATA
	if (rc == EAI_NODATA)
		rc = EAI_NONAME;
#endif
	if (rc == EAI_NONAME)
		return -ENOENT; /* an answer: the name has no address */
	if (rc != 0)
		return -EHOSTUNREACH;
	for (struct addrinfo *ai = res; ai != NULL && *n < max; ai = ai->ai_next) {
		if (ai->ai_addrlen > sizeof(*out) ||
		    (ai->ai_family != AF_INET && ai->ai_family != AF_INET6))
			continue;
		memset(&out[*n], 0, sizeof(out[*n]));
		memcpy(&out[*n], ai->ai_addr, ai->ai_addrlen);
		(*n)++;
	}
	freeaddrinfo(res);
	return 0;
}

/* Resolves text into *resolved and *n_resolved (replacing them). A name that does not
 * resolve is a warning at path; so are special-purpose answers in a category that admit
 * (a cluster's admit_special) does not name, when warn_special. */
static int resolve_name(const struct conf *cfg, const char *path, const char *text,
			bool warn_special, unsigned admit, conf_resolve_fn fn, void *ctx,
			struct conf_diags *diags,
			struct sockaddr_storage **resolved, size_t *n_resolved)
{
	struct sockaddr_storage tmp[CONF_MAX_RESOLVED];
	size_t n = 0, special = 0;
	int rc;

	rc = fn(ctx, text, tmp, CONF_MAX_RESOLVED, &n);
	if (rc == -ENOMEM)
		return rc;
	free(*resolved);
	*resolved = NULL;
	*n_resolved = 0;
	if (rc != 0 || n == 0) {
		conf_diag_add(diags, CONF_DIAG_WARNING, cfg->source, 0, 0, path,
			      "'%s' does not resolve (matches nothing until it does)", text);
		return 0;
	}
	for (size_t i = 0; warn_special && i < n && i < CONF_MAX_RESOLVED; i++)
		special += (conf_sockaddr_special((const struct sockaddr *)&tmp[i]) & ~admit) != 0;
	if (special > 0)
		conf_diag_add(diags, CONF_DIAG_WARNING, cfg->source, 0, 0, path,
			      "'%s' resolves to %zu special-purpose address(es), never admitted "
			      "through DNS unless the cluster's admit_special names their category "
			      "(or list them as STATIC endpoints)",
			      text, special);
	*resolved = malloc(n * sizeof(**resolved));
	if (*resolved == NULL)
		return -ENOMEM;
	memcpy(*resolved, tmp, n * sizeof(**resolved));
	*n_resolved = n;
	return 0;
}

/* admin.siblings given by name, except the entry that is this instance. */
static int resolve_siblings(struct conf *cfg, conf_resolve_fn fn, void *ctx,
			    struct conf_diags *diags)
{
	for (size_t i = 0; i < cfg->admin.n_siblings; i++) {
		struct conf_sibling *s = &cfg->admin.siblings[i];
		char path[CONF_PATH_MAX];
		int rc;

		if (!s->is_name || s->self)
			continue;
		snprintf(path, sizeof(path), "admin.siblings[%zu].address", i);
		rc = resolve_name(cfg, path, s->address, false, 0, fn, ctx, diags, &s->resolved,
				  &s->n_resolved);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int conf_resolve_clusters(struct conf *cfg, conf_resolve_fn fn, void *ctx, struct conf_diags *diags)
{
	if (fn == NULL)
		fn = conf_resolve_getaddrinfo;
	for (size_t i = 0; i < cfg->n_clusters; i++) {
		struct conf_cluster *cl = &cfg->clusters[i];
		if (cl->type != CONF_CLUSTER_STRICT_DNS)
			continue;
		for (size_t j = 0; j < cl->n_endpoints; j++) {
			struct conf_endpoint *ep = &cl->endpoints[j];
			char path[CONF_PATH_MAX];
			int rc;

			snprintf(path, sizeof(path), "clusters[%zu].endpoints[%zu]", i, j);
			rc = resolve_name(cfg, path, ep->text, true, cl->admit_special, fn, ctx, diags, &ep->resolved,
					  &ep->n_resolved);
			if (rc != 0)
				return rc;
		}
	}
	return resolve_siblings(cfg, fn, ctx, diags);
}

static bool str_eq(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static bool mem_eq(const char *a, size_t al, const char *b, size_t bl)
{
	return al == bl && (al == 0 || (a && b && memcmp(a, b, al) == 0));
}

static bool auth_eq(const struct conf_auth *a, const struct conf_auth *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	if (a->type != b->type || !str_eq(a->realm, b->realm) || a->n_users != b->n_users ||
	    !str_eq(a->secret, b->secret) || !str_eq(a->prev_secret, b->prev_secret) ||
	    a->prev_deadline != b->prev_deadline || a->strict_expiry != b->strict_expiry)
		return false;
	for (size_t i = 0; i < a->n_users; i++)
		if (!str_eq(a->users[i].username, b->users[i].username) ||
		    !str_eq(a->users[i].password, b->users[i].password))
			return false;
	return true;
}

static enum conf_listener_change lst_compare(const struct conf_listener *a,
					     const struct conf_listener *b)
{
	/* Without bind_address the sockets are bound to `address` (when it is local), so a
	 * new address needs new sockets as much as a new bind_address does. */
	bool bound_to_address = a->bind_address == NULL && b->bind_address == NULL;
	bool same;
	if (a->protocol != b->protocol || a->port != b->port ||
	    !str_eq(a->bind_address, b->bind_address) ||
	    (bound_to_address && !str_eq(a->address, b->address)))
		return CONF_LISTENER_RESTART;
	same = str_eq(a->address, b->address) && str_eq(a->public_address, b->public_address) &&
	       a->public_port == b->public_port && a->relay_port_min == b->relay_port_min &&
	       a->relay_port_max == b->relay_port_max &&
	       mem_eq(a->cert_pem, a->cert_pem_len, b->cert_pem, b->cert_pem_len) &&
	       mem_eq(a->key_pem, a->key_pem_len, b->key_pem, b->key_pem_len) &&
	       a->n_routes == b->n_routes && auth_eq(a->auth, b->auth) &&
	       a->max_allocations == b->max_allocations && a->max_bps == b->max_bps &&
	       str_eq(a->relay_mask, b->relay_mask) && str_eq(a->dual_stack, b->dual_stack);
	for (size_t i = 0; same && i < a->n_routes; i++)
		same = strcmp(a->routes[i], b->routes[i]) == 0;
	return same ? CONF_LISTENER_UNCHANGED : CONF_LISTENER_UPDATED;
}

static ssize_t lst_find(const struct conf *c, const char *name)
{
	for (size_t i = 0; c != NULL && i < c->n_listeners; i++)
		if (str_eq(c->listeners[i].name, name))
			return (ssize_t)i;
	return -1;
}

int conf_diff_listeners(const struct conf *old, const struct conf *new_cfg,
			struct conf_listener_delta **out, size_t *n)
{
	size_t no = old ? old->n_listeners : 0, nn = new_cfg ? new_cfg->n_listeners : 0, k = 0;
	struct conf_listener_delta *d = calloc(no + nn + 1, sizeof(*d));
	*out = NULL;
	*n = 0;
	if (d == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < nn; i++) {
		const struct conf_listener *l = &new_cfg->listeners[i];
		ssize_t o = lst_find(old, l->name);
		d[k++] = (struct conf_listener_delta){
			.name = l->name,
			.old_idx = o,
			.new_idx = (ssize_t)i,
			.change = o < 0 ? CONF_LISTENER_ADDED : lst_compare(&old->listeners[o], l),
		};
	}
	for (size_t i = 0; i < no; i++) {
		if (lst_find(new_cfg, old->listeners[i].name) >= 0)
			continue;
		d[k++] = (struct conf_listener_delta){ .name = old->listeners[i].name,
						       .change = CONF_LISTENER_REMOVED,
						       .old_idx = (ssize_t)i,
						       .new_idx = -1 };
	}
	*out = d;
	*n = k;
	return 0;
}

int conf_check_main(const char *path, FILE *out)
{
	struct conf_diags d = { 0 };
	struct conf *c = NULL;
	char why[512];
	int rc = path ? conf_load_file(path, NULL, &c, &d) : conf_load_default(NULL, &c);
	if (rc == 0)
		rc = conf_resolve_clusters(c, NULL, NULL, &d);
	/* In the format the file asks for (log_format), as the daemon would log it. */
	conf_diags_log(&d, d.json, out);
	snprintf(why, sizeof(why), "%s: %s", path ? path : "<default>", strerror(-rc));
	if (rc == 0)
		conf_diags_note(d.json, LOG_LVL_INFO, "configuration ok", out);
	else if (d.n_errors == 0)
		conf_diags_note(d.json, LOG_LVL_ERROR, why, out);
	conf_diags_free(&d);
	conf_free(c);
	return rc == 0 ? 0 : 1;
}
