/* DNS names of the configuration: STRICT_DNS cluster endpoints and admin.siblings given by
 * name, resolved into the loaded conf (the master at load, each reload and every refresh). */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "conf/conf_internal.h"

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
