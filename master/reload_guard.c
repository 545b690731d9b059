/* Master: the reload guard; a reload that would silently empty the gateway is refused. */
#include "config.h"

#include "master/master.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "master/cds.h"

/* The first unknown key whose path starts with prefix followed by '.' or '[' (prefix ""
 * : a top-level key), or NULL. */
static const struct conf_diag *typo_under(const struct conf_diags *d, const char *prefix)
{
	size_t n = strlen(prefix);

	for (size_t i = 0; i < d->n; i++) {
		const char *path = d->v[i].path;

		if (!d->v[i].unknown_key || path == NULL)
			continue;
		if (n == 0 ? strpbrk(path, ".[") == NULL
			   : strncmp(path, prefix, n) == 0 && (path[n] == '.' || path[n] == '['))
			return &d->v[i];
	}
	return NULL;
}

/* The typo to name when every listener goes: one at the top level (`listners:`) first,
 * else one in a listener. */
static const struct conf_diag *empty_typo(const struct conf_diags *d)
{
	const struct conf_diag *t = typo_under(d, "");

	return t != NULL ? t : typo_under(d, "listeners");
}

/* "; FILE:LINE:COL: PATH: MESSAGE" of t ("" for none). */
static void typo_text(const struct conf_diag *t, char *out, size_t cap)
{
	out[0] = '\0';
	if (t != NULL)
		snprintf(out, cap, "; %s:%u:%u: %s: %s", t->file, t->line, t->col, t->path, t->msg);
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

/* A listener restarted (its allocations end) while a key of its own is not recognised: a
 * misspelled protocol, port or bind_address fell back to its default. */
static bool restart_objects(const struct conf_diags *diags,
			    const struct conf_listener_delta *delta, size_t n, char *why,
			    size_t cap)
{
	char pre[48], at[512];

	for (size_t i = 0; i < n; i++) {
		const struct conf_diag *t;

		if (delta[i].change != CONF_LISTENER_RESTART || delta[i].new_idx < 0)
			continue;
		snprintf(pre, sizeof(pre), "listeners[%zd]", delta[i].new_idx);
		t = typo_under(diags, pre);
		if (t == NULL)
			continue;
		typo_text(t, at, sizeof(at));
		snprintf(why, cap,
			 "would restart listener %s (its allocations end) while its key is not "
			 "recognised%s",
			 delta[i].name, at);
		return true;
	}
	return false;
}

/* The reload guard: a valid config is still refused when it would remove every listener
 * (a misspelled or missing `listeners:` key lands here: the typo, when there is one, is
 * named), remove listeners while a key in a listener was not recognised, or restart a
 * listener while a key of its own was not (changes the operator did not write). A
 * listener left out of an understood `listeners:` list is a deliberate removal, whatever
 * other top-level keys the file has (YAML anchors under `x-...` keys are common). Returns
 * true with why filled when the guard objects. A start removes nothing: it never objects
 * there. */
static bool guard_objects(const struct conf *nc, const struct conf_diags *diags,
			  const struct conf_listener_delta *delta, size_t n, char *why, size_t cap)
{
	const struct conf_diag *typo;
	char names[256], at[512];
	size_t removed = 0;

	for (size_t i = 0; i < n; i++)
		removed += delta[i].change == CONF_LISTENER_REMOVED;
	if (removed == 0)
		return restart_objects(diags, delta, n, why, cap);
	removed_names(delta, n, names, sizeof(names));
	if (nc->n_listeners == 0) {
		typo_text(empty_typo(diags), at, sizeof(at));
		snprintf(why, cap, "would remove every listener (%s)%s", names, at);
		return true;
	}
	typo = typo_under(diags, "listeners");
	typo_text(typo, at, sizeof(at));
	if (typo != NULL) {
		snprintf(why, cap, "would remove listener%s %s while a key is not recognised%s",
			 removed == 1 ? "" : "s", names, at);
		return true;
	}
	return restart_objects(diags, delta, n, why, cap);
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
