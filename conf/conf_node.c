/* libyaml node helpers for the config parser: typed scalars, env expansion, mapping walks. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf_internal.h"

void conf_path_key(char *out, const char *parent, const char *key)
{
	if (parent == NULL || parent[0] == '\0')
		snprintf(out, CONF_PATH_MAX, "%s", key);
	else
		snprintf(out, CONF_PATH_MAX, "%s.%s", parent, key);
}

void conf_path_idx(char *out, const char *parent, size_t i)
{
	snprintf(out, CONF_PATH_MAX, "%s[%zu]", parent, i);
}

char *conf_strdup(struct pctx *p, const char *s)
{
	char *d = strdup(s ? s : "");
	if (d == NULL)
		p->nomem = 1;
	return d;
}

yaml_node_t *pctx_node(struct pctx *p, int idx)
{
	return yaml_document_get_node(p->doc, idx);
}

/* A plain scalar spelled like YAML's null is "absent": Go's JSON gives the zero value. */
bool pctx_is_null(const yaml_node_t *n)
{
	if (n == NULL)
		return true;
	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	const char *v = (const char *)n->data.scalar.value;
	return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
	       strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

const char *pctx_kind(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_SCALAR_NODE:
		return "a scalar";
	case YAML_SEQUENCE_NODE:
		return "a list";
	case YAML_MAPPING_NODE:
		return "a mapping";
	default:
		return "nothing";
	}
}

bool pctx_expect(struct pctx *p, yaml_node_t *n, const char *path, yaml_node_type_t t)
{
	if (n->type == t)
		return true;
	const char *want = t == YAML_MAPPING_NODE ? "a mapping" :
			   t == YAML_SEQUENCE_NODE ? "a list" : "a scalar";
	pctx_error(p, n, path, "found %s (expected %s)", pctx_kind(n), want);
	return false;
}

static bool env_name_char(char c, bool first)
{
	return c == '_' || isalpha((unsigned char)c) || (!first && isdigit((unsigned char)c));
}

static const char *env_lookup(struct pctx *p, const char *name)
{
	return p->getenv ? p->getenv(p->getenv_ctx, name) : getenv(name);
}

/* STUNner sets STUNNER_PORT to STUNNER_PUBLIC_PORT or 3478 when unset or not numeric. */
static const char *env_value(struct pctx *p, const char *name)
{
	const char *v = env_lookup(p, name);
	if (strcmp(name, "STUNNER_PORT") != 0)
		return v;
	if (v != NULL && v[0] != '\0' && strspn(v, "0123456789") == strlen(v))
		return v;
	const char *pub = env_lookup(p, "STUNNER_PUBLIC_PORT");
	if (pub != NULL && pub[0] != '\0' && strspn(pub, "0123456789") == strlen(pub))
		return pub;
	return "3478";
}

struct sbuf {
	char *s;
	size_t n, cap;
	int err;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
	if (b->err)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = (b->n + n + 1) * 2;
		char *ns = realloc(b->s, cap);
		if (ns == NULL) {
			b->err = 1;
			return;
		}
		b->s = ns;
		b->cap = cap;
	}
	memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = '\0';
}

/* Expands $VAR and ${VAR}. A '$' not followed by a name or a closed ${...} stays as is;
 * an unset variable expands to "" (os.ExpandEnv) and earns a warning. */
char *conf_expand_env(struct pctx *p, const char *in, const yaml_node_t *n, const char *path)
{
	struct sbuf b = {0};
	sb_put(&b, "", 0);
	for (const char *c = in; *c != '\0';) {
		const char *d = strchr(c, '$');
		if (d == NULL) {
			sb_put(&b, c, strlen(c));
			break;
		}
		sb_put(&b, c, (size_t)(d - c));
		char name[128];
		size_t len = 0, skip = 0;
		if (d[1] == '{') {
			const char *e = strchr(d + 2, '}');
			len = e ? (size_t)(e - d - 2) : 0;
			skip = len + 3;
			if (e == NULL || len == 0 || len >= sizeof(name))
				len = 0;
			else
				memcpy(name, d + 2, len);
		} else {
			while (env_name_char(d[1 + len], len == 0) && len < sizeof(name) - 1) {
				name[len] = d[1 + len];
				len++;
			}
			skip = len + 1;
		}
		if (len == 0) {
			sb_put(&b, "$", 1);
			c = d + 1;
			continue;
		}
		name[len] = '\0';
		const char *v = env_value(p, name);
		if (v == NULL)
			pctx_warn(p, n, path, "environment variable %s is not set (expanded to \"\")",
				  name);
		else
			sb_put(&b, v, strlen(v));
		c = d + skip;
	}
	if (b.err) {
		free(b.s);
		p->nomem = 1;
		return NULL;
	}
	return b.s;
}

char *pctx_string(struct pctx *p, yaml_node_t *n, const char *path, bool raw)
{
	if (!pctx_expect(p, n, path, YAML_SCALAR_NODE))
		return NULL;
	const char *v = (const char *)n->data.scalar.value;
	char *s = raw ? conf_strdup(p, v) : conf_expand_env(p, v, n, path);
	if (s == NULL)
		return NULL;
	/* YAML aliases let a small file name one big scalar many times. */
	size_t before = p->bytes;
	p->bytes += strlen(s) + 1;
	if (p->bytes > CONF_MAX_BYTES) {
		if (before <= CONF_MAX_BYTES)
			pctx_error(p, n, path, "too much data after alias and variable expansion "
				   "(expected at most %u bytes)", CONF_MAX_BYTES);
		free(s);
		return NULL;
	}
	return s;
}

static int parse_i64(const char *s, int64_t *out)
{
	const char *c = s;
	bool neg = false;
	if (*c == '+' || *c == '-')
		neg = *c++ == '-';
	if (!isdigit((unsigned char)*c))
		return -EINVAL;
	uint64_t v = 0;
	for (; isdigit((unsigned char)*c); c++) {
		if (v > (UINT64_MAX - 9) / 10 || v * 10 + (uint64_t)(*c - '0') > (uint64_t)INT64_MAX)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*c - '0');
	}
	if (*c != '\0')
		return -EINVAL;
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

int pctx_uint(struct pctx *p, yaml_node_t *n, const char *path, uint64_t min, uint64_t max,
	      uint64_t *out)
{
	char *s = pctx_string(p, n, path, false);
	if (s == NULL)
		return -EINVAL;
	int64_t v = 0;
	int rc = parse_i64(s, &v);
	if (rc == -EINVAL)
		pctx_error(p, n, path, "'%s' is not an integer (expected %llu..%llu)", s,
			   (unsigned long long)min, (unsigned long long)max);
	else if (rc != 0 || v < 0 || (uint64_t)v < min || (uint64_t)v > max)
		pctx_error(p, n, path, "%s is out of range (%llu..%llu)", s,
			   (unsigned long long)min, (unsigned long long)max);
	else
		*out = (uint64_t)v;
	free(s);
	return rc == 0 && v >= 0 && (uint64_t)v >= min && (uint64_t)v <= max ? 0 : -EINVAL;
}

/* STUNner's user_quota: any integer, negative values mean 0. */
int pctx_int_clamped(struct pctx *p, yaml_node_t *n, const char *path, int64_t *out)
{
	char *s = pctx_string(p, n, path, false);
	if (s == NULL)
		return -EINVAL;
	int64_t v = 0;
	int rc = parse_i64(s, &v);
	if (rc != 0)
		pctx_error(p, n, path, "'%s' is not an integer (expected a number)", s);
	else
		*out = v < 0 ? 0 : v;
	free(s);
	return rc;
}

int pctx_bool(struct pctx *p, yaml_node_t *n, const char *path, bool *out)
{
	static const char *const yes[] = {"true", "yes", "on", "1"};
	static const char *const no[] = {"false", "no", "off", "0"};
	char *s = pctx_string(p, n, path, false);
	if (s == NULL)
		return -EINVAL;
	int rc = -EINVAL;
	for (size_t i = 0; i < 4 && rc != 0; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			rc = 0;
		} else if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			rc = 0;
		}
	}
	if (rc != 0)
		pctx_error(p, n, path, "'%s' is not a boolean (expected true or false)", s);
	free(s);
	return rc;
}

void pctx_unknown_key(struct pctx *p, yaml_node_t *key, const char *path)
{
	pctx_warn(p, key, path, "unknown key (ignored)");
}

void pctx_map_each(struct pctx *p, yaml_node_t *map, const char *path, pctx_pair_fn fn,
		   void *arg)
{
	if (!pctx_expect(p, map, path, YAML_MAPPING_NODE))
		return;
	yaml_node_pair_t *start = map->data.mapping.pairs.start;
	yaml_node_pair_t *top = map->data.mapping.pairs.top;
	if (top - start > CONF_MAX_KEYS) {
		/* No section has that many keys; refusing keeps the duplicate check cheap. */
		pctx_error(p, map, path, "%td keys (expected at most %d)", top - start,
			   CONF_MAX_KEYS);
		return;
	}
	for (yaml_node_pair_t *pr = start; pr < top && !p->nomem; pr++) {
		yaml_node_t *k = pctx_node(p, pr->key), *v = pctx_node(p, pr->value);
		if (k == NULL || v == NULL)
			continue;
		if (k->type != YAML_SCALAR_NODE) {
			pctx_error(p, k, path, "found %s as a key (expected a string)",
				   pctx_kind(k));
			continue;
		}
		const char *key = (const char *)k->data.scalar.value;
		char sub[CONF_PATH_MAX];
		conf_path_key(sub, path, key);
		bool dup = false;
		for (yaml_node_pair_t *q = start; q < pr && !dup; q++) {
			yaml_node_t *qk = pctx_node(p, q->key);
			dup = qk && qk->type == YAML_SCALAR_NODE &&
			      strcasecmp((const char *)qk->data.scalar.value, key) == 0;
		}
		if (dup) {
			pctx_error(p, k, sub, "duplicate key (expected each key once)");
			continue;
		}
		fn(p, key, k, v, sub, arg);
	}
}
