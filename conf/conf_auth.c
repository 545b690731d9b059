/* The auth section (global or per listener): type, realm, STUNner credentials and our secret/user
 * extensions. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf_internal.h"
#include "stun/stun.h"

void conf_auth_defaults(struct conf_auth *a)
{
	memset(a, 0, sizeof(*a));
	a->type = CONF_AUTH_STATIC; /* STUNner's default */
}

int conf_auth_default_realm(struct conf_auth *a)
{
	free(a->realm);
	a->realm = strdup(CONF_DEF_REALM);
	return a->realm ? 0 : -ENOMEM;
}

void conf_auth_clear(struct conf_auth *a)
{
	free(a->realm);
	for (size_t i = 0; i < a->n_users; i++) {
		conf_wipe_free(a->users[i].username);
		conf_wipe_free(a->users[i].password);
	}
	free(a->users);
	conf_wipe_free(a->secret);
	conf_wipe_free(a->prev_secret);
	free(a->secret_file);
	free(a->prev_secret_file);
	memset(a, 0, sizeof(*a));
}

/* Where things were written, for the checks that run after the whole block is read. */
struct auth_state {
	struct conf_auth *a;
	yaml_node_t *node, *type, *cred, *username, *password, *secret, *secret_file;
	yaml_node_t *prev, *prev_file, *until, *grace;
	char *cred_user, *cred_pass;
	int64_t until_v, grace_v;
	bool type_given; /* a non-empty auth.type */
};

static int add_user(struct pctx *p, struct conf_auth *a, char *u, char *pw)
{
	struct conf_user *v;
	if (a->n_users >= CONF_MAX_ITEMS)
		return -E2BIG;
	v = realloc(a->users, (a->n_users + 1) * sizeof(*v));
	if (v == NULL) {
		p->nomem = 1;
		return -ENOMEM;
	}
	a->users = v;
	a->users[a->n_users].username = u;
	a->users[a->n_users].password = pw;
	a->n_users++;
	return 0;
}

/* Returns true for a non-empty type (stunnerd reads "" as static). */
static bool parse_type(struct pctx *p, yaml_node_t *v, const char *path, struct conf_auth *a)
{
	char *s = pctx_string(p, v, path, 0);
	bool given;
	if (s == NULL)
		return true; /* reported */
	given = s[0] != '\0';
	if (s[0] == '\0' || strcasecmp(s, "static") == 0 || strcasecmp(s, "plaintext") == 0)
		a->type = CONF_AUTH_STATIC;
	else if (strcasecmp(s, "ephemeral") == 0 || strcasecmp(s, "longterm") == 0 ||
		 strcasecmp(s, "timewindowed") == 0)
		a->type = CONF_AUTH_EPHEMERAL;
	else if (strcasecmp(s, "none") == 0)
		a->type = CONF_AUTH_NONE;
	else
		pctx_error(p, v, path,
			   "'%s' is not an auth type (expected static, ephemeral or "
			   "none)",
			   s);
	free(s);
	return given;
}

static const char *const cred_keys[] = { "username", "password", "secret", NULL };
static const char *const user_keys[] = { "username", "password", NULL };
static const char *const auth_keys[] = { "type", "realm", "credentials", "users", "secret_file",
					 "previous_secret", "previous_secret_file",
					 "previous_secret_until", "previous_secret_grace",
					 "strict_expiry", NULL };

/* auth.credentials is never env-expanded (STUNner issue #102). */
static void cred_pair(struct pctx *p, const char *key, yaml_node_t *k, yaml_node_t *v,
		      const char *path, void *arg)
{
	struct auth_state *st = arg;
	char **dst = NULL;
	char *s;
	if (strcasecmp(key, "username") == 0) {
		dst = &st->cred_user;
		st->username = v;
	} else if (strcasecmp(key, "password") == 0) {
		dst = &st->cred_pass;
		st->password = v;
	} else if (strcasecmp(key, "secret") == 0) {
		dst = &st->a->secret;
		st->secret = v;
	} else {
		pctx_unknown_key(p, k, path, cred_keys);
		return;
	}
	s = pctx_string(p, v, path, CONF_STR_NOENV);
	if (s != NULL) {
		conf_wipe_free(*dst);
		*dst = s;
	}
}

static void user_pair(struct pctx *p, const char *key, yaml_node_t *k, yaml_node_t *v,
		      const char *path, void *arg)
{
	char **up = arg;
	char **dst = strcasecmp(key, "username") == 0   ? &up[0]
		     : strcasecmp(key, "password") == 0 ? &up[1]
							: NULL;
	char *s;
	if (dst == NULL) {
		pctx_unknown_key(p, k, path, user_keys);
		return;
	}
	s = pctx_string(p, v, path, CONF_STR_NOENV | CONF_STR_VERBATIM);
	if (s != NULL) {
		conf_wipe_free(*dst);
		*dst = s;
	}
}

/* Ours: auth.users, a list of {username, password}, never env-expanded. */
static void parse_users(struct pctx *p, yaml_node_t *n, const char *path, struct conf_auth *a)
{
	size_t i = 0;
	if (!pctx_expect(p, n, path, YAML_SEQUENCE_NODE))
		return;
	for (yaml_node_item_t *it = n->data.sequence.items.start;
	     it < n->data.sequence.items.top && !p->nomem; it++, i++) {
		yaml_node_t *u = pctx_node(p, *it);
		char sub[CONF_PATH_MAX];
		char *up[2] = { NULL, NULL };
		bool dup = false;
		conf_path_idx(sub, path, i);
		pctx_map_each(p, u, sub, user_pair, up);
		if (u->type == YAML_MAPPING_NODE && (up[0] == NULL || up[1] == NULL))
			pctx_error(p, u, sub, "missing %s (expected username and password)",
				   up[0] == NULL ? "username" : "password");
		for (size_t j = 0; up[0] && j < a->n_users && !dup; j++)
			dup = strcmp(a->users[j].username, up[0]) == 0;
		if (dup)
			pctx_error(p, u, sub, "duplicate user '%s' (expected each username once)",
				   up[0]);
		if (up[0] && up[1] && !dup && add_user(p, a, up[0], up[1]) == 0)
			continue;
		conf_wipe_free(up[0]);
		conf_wipe_free(up[1]);
	}
}

char *conf_read_secret_file(struct pctx *p, yaml_node_t *v, const char *path, char **name)
{
	char *fname = pctx_string(p, v, path, false), *buf = NULL;
	size_t len = 0;
	int rc;
	if (fname == NULL)
		return NULL;
	rc = conf_read_file(fname, 64 * 1024, false, &buf, &len);
	if (rc != 0) {
		pctx_error(p, v, path, "cannot read '%s': %s (expected a readable secret file)",
			   fname, conf_file_strerror(rc));
	} else {
		while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' ||
				   buf[len - 1] == ' ' || buf[len - 1] == '\t'))
			buf[--len] = '\0';
		if (len == 0 || strlen(buf) != len) {
			pctx_error(p, v, path,
				   "'%s' holds no usable secret (expected one line of "
				   "text)",
				   fname);
			conf_wipe_free(buf);
			buf = NULL;
		}
	}
	if (name != NULL) {
		free(*name);
		*name = fname;
	} else {
		free(fname);
	}
	return buf;
}

static void auth_pair(struct pctx *p, const char *key, yaml_node_t *k, yaml_node_t *v,
		      const char *path, void *arg)
{
	struct auth_state *st = arg;
	struct conf_auth *a = st->a;
	uint64_t x;
	if (strcasecmp(key, "type") == 0) {
		st->type = v;
		if (!pctx_is_null(v))
			st->type_given = parse_type(p, v, path, a);
	} else if (strcasecmp(key, "realm") == 0) {
		char *s = pctx_is_null(v) ? NULL : pctx_string(p, v, path, 0);
		if (s != NULL && s[0] == '\0') {
			free(s); /* stunnerd: an empty realm is the default one */
			s = conf_strdup(p, CONF_DEF_REALM);
		}
		/* The 401 carries REALM, at most 763 bytes (RFC 8489 14.9): a longer one would
		 * be cut there and no client could answer it. */
		if (s != NULL && strlen(s) > STUN_MAX_REALM_LEN) {
			pctx_error(p, v, path, "%zu bytes is too long (expected at most %d bytes, "
				   "RFC 8489 14.9)", strlen(s), STUN_MAX_REALM_LEN);
			free(s);
			s = NULL;
		}
		if (s != NULL) {
			free(a->realm);
			a->realm = s;
		}
	} else if (strcasecmp(key, "credentials") == 0) {
		st->cred = v;
		if (!pctx_is_null(v))
			pctx_map_each(p, v, path, cred_pair, st);
	} else if (strcasecmp(key, "users") == 0) {
		if (!pctx_is_null(v))
			parse_users(p, v, path, a);
	} else if (strcasecmp(key, "secret_file") == 0) {
		st->secret_file = v;
	} else if (strcasecmp(key, "previous_secret") == 0) {
		st->prev = v;
		conf_wipe_free(a->prev_secret);
		a->prev_secret = pctx_string(p, v, path, CONF_STR_NOENV | CONF_STR_VERBATIM);
	} else if (strcasecmp(key, "previous_secret_file") == 0) {
		st->prev_file = v;
	} else if (strcasecmp(key, "previous_secret_until") == 0) {
		if (pctx_uint(p, v, path, 1, INT64_MAX, &x) == 0) {
			st->until = v;
			st->until_v = (int64_t)x;
		}
	} else if (strcasecmp(key, "previous_secret_grace") == 0) {
		if (pctx_uint(p, v, path, 0, 365 * 86400, &x) == 0) {
			st->grace = v;
			st->grace_v = (int64_t)x;
		}
	} else if (strcasecmp(key, "strict_expiry") == 0) {
		pctx_bool(p, v, path, &a->strict_expiry);
	} else {
		pctx_unknown_key(p, k, path, auth_keys);
	}
}

static void finish_static(struct pctx *p, struct auth_state *st, const char *path)
{
	struct conf_auth *a = st->a;
	char sub[CONF_PATH_MAX];
	conf_path_key(sub, path, "credentials");
	if ((st->cred_user == NULL) != (st->cred_pass == NULL)) {
		char miss[CONF_PATH_MAX];
		conf_path_key(miss, sub, st->cred_user ? "password" : "username");
		pctx_error(p, st->cred, miss,
			   "missing (expected both username and password for "
			   "static auth)");
	}
	if (st->cred_user && st->cred_pass) {
		bool dup = false;
		for (size_t j = 0; j < a->n_users && !dup; j++)
			dup = strcmp(a->users[j].username, st->cred_user) == 0;
		if (dup) {
			pctx_error(p, st->username, sub,
				   "user '%s' is also listed in users "
				   "(expected each username once)",
				   st->cred_user);
		} else if (add_user(p, a, st->cred_user, st->cred_pass) == 0) {
			/* credentials' pair goes first: STUNner users expect it as "the" user */
			struct conf_user u = a->users[a->n_users - 1];
			memmove(a->users + 1, a->users, (a->n_users - 1) * sizeof(u));
			a->users[0] = u;
			st->cred_user = st->cred_pass = NULL;
		}
	} else if (a->n_users == 0 && !((st->cred_user == NULL) != (st->cred_pass == NULL))) {
		pctx_error(p, st->cred ? st->cred : st->node, sub,
			   "static auth without users "
			   "(expected username and password, or users)");
	}
	if (st->secret || st->secret_file || st->prev || st->prev_file)
		pctx_warn(p,
			  st->secret        ? st->secret
			  : st->secret_file ? st->secret_file
			  : st->prev        ? st->prev
					    : st->prev_file,
			  path, "secrets are not used by static auth (ignored)");
}

static void finish_secrets(struct pctx *p, struct auth_state *st, const char *path)
{
	struct conf_auth *a = st->a;
	char sub[CONF_PATH_MAX];
	if (st->secret_file) {
		conf_path_key(sub, path, "secret_file");
		if (st->secret)
			pctx_error(p, st->secret_file, sub,
				   "given together with credentials.secret "
				   "(expected one of them)");
		else
			a->secret = conf_read_secret_file(p, st->secret_file, sub, &a->secret_file);
	}
	if (a->secret == NULL && st->secret_file == NULL) {
		conf_path_key(sub, path, "credentials.secret");
		pctx_error(p, st->cred ? st->cred : st->node, sub,
			   "missing (expected a secret "
			   "for ephemeral auth, or secret_file)");
	} else if (a->secret && a->secret[0] == '\0') {
		conf_path_key(sub, path, "credentials.secret");
		pctx_warn(p, st->secret, sub, "empty secret (anyone can mint credentials)");
	}
	if (st->prev_file) {
		conf_path_key(sub, path, "previous_secret_file");
		if (st->prev)
			pctx_error(p, st->prev_file, sub,
				   "given together with previous_secret "
				   "(expected one of them)");
		else
			a->prev_secret =
				conf_read_secret_file(p, st->prev_file, sub, &a->prev_secret_file);
	}
	conf_path_key(sub, path, "previous_secret_grace");
	if (st->until && st->grace)
		pctx_error(p, st->grace, sub,
			   "given together with previous_secret_until "
			   "(expected one of them)");
	if ((st->prev || st->prev_file) && !st->until && !st->grace) {
		conf_path_key(sub, path, st->prev ? "previous_secret" : "previous_secret_file");
		pctx_error(p, st->prev ? st->prev : st->prev_file, sub,
			   "has no deadline "
			   "(expected previous_secret_until or previous_secret_grace)");
	}
	if (!st->prev && !st->prev_file && (st->until || st->grace))
		pctx_warn(p, st->until ? st->until : st->grace, path,
			  "previous secret deadline without previous_secret (ignored)");
	if (a->prev_secret != NULL)
		a->prev_deadline = st->until ? st->until_v : p->now + st->grace_v;
	if (st->cred_user || st->cred_pass || a->n_users)
		pctx_warn(p,
			  st->username   ? st->username
			  : st->password ? st->password
					 : st->node,
			  path, "usernames and passwords are not used by ephemeral auth (ignored)");
}

void conf_parse_auth(struct pctx *p, yaml_node_t *n, const char *path, struct conf_auth *a,
		     const struct conf_auth *inherit)
{
	struct auth_state st = { .a = a, .node = n };
	if (inherit != NULL) {
		a->realm = conf_strdup(p, inherit->realm);
		a->strict_expiry = inherit->strict_expiry;
	}
	pctx_map_each(p, n, path, auth_pair, &st);
	/* stunnerd's ConvertToV1 runs NewAuthType on auth.type before any default applies. */
	if (p->v1alpha1 && inherit == NULL && !st.type_given) {
		char sub[CONF_PATH_MAX];
		conf_path_key(sub, path, "type");
		pctx_error(
			p, st.type ? st.type : n, sub,
			"missing in a v1alpha1 config (stunnerd's "
			"conversion to v1 needs static, plaintext, ephemeral, longterm or none)");
	}
	if (n->type == YAML_MAPPING_NODE && !p->nomem) {
		if (a->type == CONF_AUTH_STATIC)
			finish_static(p, &st, path);
		else if (a->type == CONF_AUTH_EPHEMERAL)
			finish_secrets(p, &st, path);
	}
	if (a->type != CONF_AUTH_EPHEMERAL) {
		conf_wipe_free(a->secret);
		conf_wipe_free(a->prev_secret);
		a->secret = a->prev_secret = NULL;
		a->prev_deadline = 0;
	}
	if (a->type != CONF_AUTH_STATIC) {
		for (size_t i = 0; i < a->n_users; i++) {
			conf_wipe_free(a->users[i].username);
			conf_wipe_free(a->users[i].password);
		}
		a->n_users = 0;
	}
	conf_wipe_free(st.cred_user);
	conf_wipe_free(st.cred_pass);
}
