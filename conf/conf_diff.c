/* What a reload changes in the listeners: the old and the new configuration compared by
 * listener name (conf_diff_listeners). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf_internal.h"

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
