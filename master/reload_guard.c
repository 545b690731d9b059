/* Master: the reload guard; a reload that would silently empty the gateway is refused. */
#include "config.h"

#include "master/master.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "master/cds.h"

/* An unknown key at the top level or in a listener: the kind of typo that takes listeners
 * away (`listners:`, a listener's key misspelled). */
static const struct conf_diag *listener_typo(const struct conf_diags *d)
{
	for (size_t i = 0; i < d->n; i++) {
		const char *path = d->v[i].path;

		if (!d->v[i].unknown_key || path == NULL)
			continue;
		if (strpbrk(path, ".[") == NULL || strncmp(path, "listeners[", 10) == 0)
			return &d->v[i];
	}
	return NULL;
}

/* "a, b, c" (the removed listeners' names), cut to fit. */
static void removed_names(const struct conf_listener_delta *delta, size_t n, char *out,
			  size_t cap)
{
	size_t len = 0;

	out[0] = '\0';
	for (size_t i = 0; i < n && len < cap; i++) {
		if (delta[i].change != CONF_LISTENER_REMOVED)
			continue;
		len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "",
					delta[i].name);
	}
}

/* The reload guard: a valid config is still refused when it would remove every listener,
 * or remove listeners while a key at the top level or in a listener was not recognised
 * (a removal the operator did not write). A listener left out of a `listeners:` list
 * that is otherwise understood is a deliberate removal. Returns true with why filled when
 * the guard objects. A start removes nothing: it never objects there. */
static bool guard_objects(const struct conf *nc, const struct conf_diags *diags,
			  const struct conf_listener_delta *delta, size_t n, char *why, size_t cap)
{
	const struct conf_diag *typo = listener_typo(diags);
	char names[256], at[512] = "";
	size_t removed = 0;

	for (size_t i = 0; i < n; i++)
		removed += delta[i].change == CONF_LISTENER_REMOVED;
	if (removed == 0)
		return false;
	if (typo != NULL)
		snprintf(at, sizeof(at), "; %s:%u:%u: %s: %s", typo->file, typo->line, typo->col,
			 typo->path, typo->msg);
	removed_names(delta, n, names, sizeof(names));
	if (nc->n_listeners == 0) {
		snprintf(why, cap, "would remove every listener (%s)%s", names, at);
		return true;
	}
	if (typo != NULL) {
		snprintf(why, cap, "would remove listener%s %s while a key is not recognised%s",
			 removed == 1 ? "" : "s", names, at);
		return true;
	}
	return false;
}

bool reload_guard_pass(struct master *m, const char *trigger, unsigned flags,
		       const struct conf *nc, const struct conf_diags *diags,
		       const struct conf_listener_delta *delta, size_t n, char *reason, size_t cap)
{
	bool objects = guard_objects(nc, diags, delta, n, reason, cap);

	if (cds_is_origin(m->config_path)) {
		if (!objects && nc->n_listeners == 0)
			snprintf(reason, cap, "the configuration has no listeners");
		if (objects || nc->n_listeners == 0)
			log_warn("master",
				 "reload (%s): applied the discovery service's configuration, "
				 "which is authoritative: %s%s",
				 trigger, reason,
				 nc->n_listeners == 0 ? "; nothing serves until it sends listeners"
						      : "");
		return true;
	}
	if (!objects)
		return true;
	if (flags & RELOAD_FORCE) {
		log_warn("master", "reload (%s) forced: %s", trigger, reason);
		return true;
	}
	log_error("master",
		  "reload (%s) refused: %s; the running configuration is unchanged (`turngatectl "
		  "reload --force` applies it)",
		  trigger, reason);
	return false;
}
