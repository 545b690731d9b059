/* libyaml node helpers for the config parser: typed scalars, env expansion, mapping walks. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
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
	const char *v;
	if (n == NULL)
		return true;
	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	v = (const char *)n->data.scalar.value;
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
	const char *want = t == YAML_MAPPING_NODE    ? "a mapping"
			   : t == YAML_SEQUENCE_NODE ? "a list"
						     : "a scalar";
	if (n->type == t)
		return true;
	pctx_error(p, n, path, "found %s (expected %s)", pctx_kind(n), want);
	return false;
}

bool pctx_list(struct pctx *p, yaml_node_t *n, const char *path, const char *what, size_t max,
	       size_t *cnt)
{
	if (!pctx_expect(p, n, path, YAML_SEQUENCE_NODE))
		return false;
	*cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	if (*cnt > max) {
		pctx_error(p, n, path, "%zu %s (expected at most %zu)", *cnt, what, max);
		return false;
	}
	return true;
}

/* A plain scalar that YAML 1.1 types as a bool or number reaches a string field of
 * stunnerd as Go formats that value; say so when the text changes. */
static char *y11_string(struct pctx *p, yaml_node_t *n, const char *path, char *s)
{
	struct conf_y11 y;
	char txt[64];
	char *d;
	if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
	    !conf_y11_as_string((conf_y11_resolve(s, &y), &y), txt, sizeof(txt)) ||
	    strcmp(txt, s) == 0)
		return s;
	pctx_warn(p, n, path,
		  "'%s' reads as \"%s\" (a YAML 1.1 %s, as in stunnerd; quote it to "
		  "keep the text)",
		  s, txt, y.kind == CONF_Y11_BOOL ? "boolean" : "number");
	d = conf_strdup(p, txt);
	free(s);
	return d;
}

char *pctx_string(struct pctx *p, yaml_node_t *n, const char *path, unsigned flags)
{
	const char *v;
	char *s;
	size_t before;
	if (!pctx_expect(p, n, path, YAML_SCALAR_NODE))
		return NULL;
	v = (const char *)n->data.scalar.value;
	/* A null is Go's zero value: "" (credentials: `password: ~` is present and empty). */
	if (pctx_is_null(n) && !(flags & CONF_STR_VERBATIM))
		v = "";
	s = flags & CONF_STR_NOENV ? conf_strdup(p, v) : conf_expand_env(p, v, n, path);
	if (s != NULL && !(flags & CONF_STR_VERBATIM))
		s = y11_string(p, n, path, s);
	if (s == NULL)
		return NULL;
	/* YAML aliases let a small file name one big scalar many times. */
	before = p->bytes;
	p->bytes += strlen(s) + 1;
	if (p->bytes > CONF_MAX_BYTES) {
		if (before <= CONF_MAX_BYTES)
			pctx_error(p, n, path,
				   "too much data after alias and variable expansion "
				   "(expected at most %u bytes)",
				   CONF_MAX_BYTES);
		free(s);
		return NULL;
	}
	return s;
}

static int parse_i64(const char *s, int64_t *out)
{
	const char *c = s;
	bool neg = false;
	uint64_t v = 0;
	if (*c == '+' || *c == '-')
		neg = *c++ == '-';
	if (!isdigit((unsigned char)*c))
		return -EINVAL;
	for (; isdigit((unsigned char)*c); c++) {
		if (v > (UINT64_MAX - 9) / 10 ||
		    v * 10 + (uint64_t)(*c - '0') > (uint64_t)INT64_MAX)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*c - '0');
	}
	if (*c != '\0')
		return -EINVAL;
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

/* The integer a plain scalar means to stunnerd's decoder (after expansion, as stunnerd
 * expands before it parses). -ENOENT: null; -ERANGE: beyond int64; -EINVAL: no integer. */
static int y11_int(const yaml_node_t *n, const char *s, int64_t *out)
{
	struct conf_y11 y;
	if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return parse_i64(s, out);
	switch (conf_y11_resolve(s, &y)) {
	case CONF_Y11_NULL:
		return -ENOENT;
	case CONF_Y11_INT:
		if (y.is_uint)
			return -ERANGE;
		*out = y.i;
		return 0;
	case CONF_Y11_FLOAT:
		if (!isfinite(y.f) || y.f != floor(y.f))
			return -EINVAL;
		if (y.f < -9.2e18 || y.f > 9.2e18)
			return -ERANGE;
		*out = (int64_t)y.f;
		return 0;
	default:
		return -EINVAL;
	}
}

int pctx_int64(struct pctx *p, yaml_node_t *n, const char *path, int64_t *out)
{
	char *s = pctx_string(p, n, path, CONF_STR_VERBATIM);
	int64_t v = 0;
	int rc;
	if (s == NULL)
		return -EINVAL;
	rc = y11_int(n, s, &v);
	if (rc == -EINVAL)
		pctx_error(p, n, path, "'%s' is not an integer (expected a number)", s);
	else if (rc == -ERANGE)
		pctx_error(p, n, path, "%s is out of range (expected a 64-bit integer)", s);
	else if (rc == 0 && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
		 (s[0] == '0' || strpbrk(s, "._eExXoObB") != NULL) && strcmp(s, "0") != 0)
		pctx_warn(p, n, path, "'%s' reads as %lld (a YAML 1.1 number, as in stunnerd)", s,
			  (long long)v);
	if (rc == 0)
		*out = v;
	free(s);
	return rc;
}

int pctx_uint(struct pctx *p, yaml_node_t *n, const char *path, uint64_t min, uint64_t max,
	      uint64_t *out)
{
	int64_t v = 0;
	int rc = pctx_int64(p, n, path, &v);
	if (rc != 0)
		return rc;
	if (v < 0 || (uint64_t)v < min || (uint64_t)v > max) {
		pctx_error(p, n, path, "%lld is out of range (%llu..%llu)", (long long)v,
			   (unsigned long long)min, (unsigned long long)max);
		return -EINVAL;
	}
	*out = (uint64_t)v;
	return 0;
}

/* STUNner's user_quota: any integer, negative values mean 0. */
int pctx_int_clamped(struct pctx *p, yaml_node_t *n, const char *path, int64_t *out)
{
	int64_t v = 0;
	int rc = pctx_int64(p, n, path, &v);
	if (rc == 0)
		*out = v < 0 ? 0 : v;
	return rc;
}

int pctx_bool(struct pctx *p, yaml_node_t *n, const char *path, bool *out)
{
	static const char *const yes[] = { "true", "yes", "on", "1" };
	static const char *const no[] = { "false", "no", "off", "0" };
	char *s = pctx_string(p, n, path, CONF_STR_VERBATIM);
	int rc = -EINVAL;
	if (s == NULL)
		return -EINVAL;
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

/* One key/value of a mapping after merge keys are expanded; merged: it came from a `<<`. */
struct map_pair {
	yaml_node_t *k, *v;
	bool merged;
};

struct map_flat {
	struct map_pair pairs[CONF_MAX_KEYS];
	size_t n;
	bool overflow;
};

static bool is_merge_key(const yaml_node_t *k)
{
	return k->type == YAML_SCALAR_NODE && k->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	       strcmp((const char *)k->data.scalar.value, "<<") == 0;
}

static void flatten(struct pctx *p, yaml_node_t *map, const char *path, struct map_flat *f,
		    int depth, bool merged);

/* `<<: *a` or `<<: [*a, *b]`: go-yaml v2 applies a list from its end, so the first entry
 * wins over later ones. */
static void flatten_merge(struct pctx *p, yaml_node_t *v, const char *path, struct map_flat *f,
			  int depth)
{
	if (v->type == YAML_MAPPING_NODE) {
		flatten(p, v, path, f, depth + 1, true);
		return;
	}
	if (v->type == YAML_SEQUENCE_NODE) {
		for (yaml_node_item_t *it = v->data.sequence.items.top;
		     it > v->data.sequence.items.start;) {
			yaml_node_t *m = pctx_node(p, *--it);
			if (m != NULL && m->type == YAML_MAPPING_NODE) {
				flatten(p, m, path, f, depth + 1, true);
				continue;
			}
			pctx_error(p, m ? m : v, path, "merge list holds %s (expected mappings)",
				   m ? pctx_kind(m) : "nothing");
		}
		return;
	}
	pctx_error(p, v, path, "merge key with %s (expected a mapping or a list of mappings)",
		   pctx_kind(v));
}

static void flatten(struct pctx *p, yaml_node_t *map, const char *path, struct map_flat *f,
		    int depth, bool merged)
{
	if (depth > 8) {
		pctx_error(p, map, path, "merge keys nested too deep (expected at most 8 levels)");
		return;
	}
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start;
	     pr < map->data.mapping.pairs.top && !f->overflow; pr++) {
		yaml_node_t *k = pctx_node(p, pr->key), *v = pctx_node(p, pr->value);
		if (k == NULL || v == NULL)
			continue;
		if (is_merge_key(k)) {
			flatten_merge(p, v, path, f, depth);
			continue;
		}
		if (f->n == CONF_MAX_KEYS) {
			/* No section has so many keys; refusing keeps the duplicate check cheap. */
			pctx_error(p, map, path, "more than %d keys (expected at most %d)",
				   CONF_MAX_KEYS, CONF_MAX_KEYS);
			f->overflow = true;
			return;
		}
		f->pairs[f->n++] = (struct map_pair){ k, v, merged };
	}
}

/* stunnerd's decoder sees the keys of a mapping in byte order (sigs.k8s.io/yaml builds a Go
 * map, encoding/json sorts it) and each key that folds to a field's name overwrites the
 * field: the winner is the greatest spelling, and of equal spellings the last (go-yaml
 * keeps the last). Returns the index of the pair that wins over i, or i. */
static size_t key_winner(const struct map_flat *f, size_t i)
{
	const char *ki = (const char *)f->pairs[i].k->data.scalar.value;
	size_t w = i;
	for (size_t j = 0; j < f->n; j++) {
		const yaml_node_t *kj = f->pairs[j].k;
		int c;
		if (j == i || kj->type != YAML_SCALAR_NODE ||
		    strcasecmp((const char *)kj->data.scalar.value, ki) != 0)
			continue;
		c = strcmp((const char *)kj->data.scalar.value,
			   (const char *)f->pairs[w].k->data.scalar.value);
		if (c > 0 || (c == 0 && j > w))
			w = j;
	}
	return w;
}

void pctx_map_each(struct pctx *p, yaml_node_t *map, const char *path, pctx_pair_fn fn, void *arg)
{
	struct map_flat *f;
	if (!pctx_expect(p, map, path, YAML_MAPPING_NODE))
		return;
	f = calloc(1, sizeof(*f));
	if (f == NULL) {
		p->nomem = 1;
		return;
	}
	flatten(p, map, path, f, 0, false);
	for (size_t i = 0; i < f->n && !f->overflow && !p->nomem; i++) {
		yaml_node_t *k = f->pairs[i].k, *v = f->pairs[i].v;
		const char *key;
		char sub[CONF_PATH_MAX];
		size_t w;
		if (k->type != YAML_SCALAR_NODE) {
			pctx_error(p, k, path, "found %s as a key (expected a string)",
				   pctx_kind(k));
			continue;
		}
		key = (const char *)k->data.scalar.value;
		conf_path_key(sub, path, key);
		w = key_winner(f, i);
		if (w != i) {
			/* A merged value that an explicit key overrides is what merges are for. */
			if (!f->pairs[i].merged)
				pctx_warn(p, k, sub,
					  "duplicate key (ignored: stunnerd uses the one at "
					  "line %zu, column %zu)",
					  f->pairs[w].k->start_mark.line + 1,
					  f->pairs[w].k->start_mark.column + 1);
			continue;
		}
		fn(p, key, k, v, sub, arg);
	}
	free(f);
}
