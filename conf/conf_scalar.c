/* Scalars as stunnerd reads them: os.ExpandEnv's $NAME/${NAME} rules and YAML 1.1 typing of plain
 * scalars. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "conf/conf_internal.h"

static const char *env_lookup(struct pctx *p, const char *name)
{
	return p->getenv ? p->getenv(p->getenv_ctx, name) : getenv(name);
}

/* strconv.Atoi's grammar: optional sign, then decimal digits only. */
static bool go_atoi(const char *s, long long *out)
{
	const char *c = s + (*s == '+' || *s == '-');
	if (*c == '\0' || strspn(c, "0123456789") != strlen(c) || strlen(c) > 18)
		return false;
	*out = strtoll(s, NULL, 10);
	return true;
}

/* stunnerd sets STUNNER_PORT, when unset or not all digits, to strconv.Atoi of
 * STUNNER_PUBLIC_PORT or else 3478, before it expands the config. */
static const char *env_value(struct pctx *p, const char *name, char buf[24])
{
	const char *v = env_lookup(p, name);
	const char *pub;
	long long port = CONF_DEF_PORT;
	if (strcmp(name, "STUNNER_PORT") != 0)
		return v;
	if (v != NULL && v[0] != '\0' && strspn(v, "0123456789") == strlen(v))
		return v;
	pub = env_lookup(p, "STUNNER_PUBLIC_PORT");
	if (pub != NULL)
		go_atoi(pub, &port);
	snprintf(buf, 24, "%lld", port);
	return buf;
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
	if (GROW_ARRAY(&b->s, &b->cap, b->n + n + 1, 64) < 0) {
		b->err = 1;
		return;
	}
	memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = '\0';
}

static bool shell_special(char c)
{
	return c != '\0' && strchr("*#$@!?-0123456789", c) != NULL;
}

static bool shell_alnum(char c)
{
	return c == '_' || isalnum((unsigned char)c);
}

/* os.Expand's getShellName on the text after a '$': the name (start, length) and how many
 * bytes the reference takes after the '$'. len 0 with w > 0 is bad syntax (eaten); len 0
 * with w 0 is a lone '$' (kept). */
static void shell_name(const char *s, const char **name, size_t *len, size_t *w)
{
	*name = s;
	*len = *w = 0;
	if (s[0] == '{') {
		const char *e;
		if (shell_special(s[1]) && s[2] == '}') {
			*name = s + 1;
			*len = 1;
			*w = 3;
			return;
		}
		e = strchr(s + 1, '}');
		if (e == NULL) {
			*w = 1; /* "${" without '}': both eaten */
			return;
		}
		*name = s + 1;
		*len = (size_t)(e - s - 1);
		*w = *len + 2; /* "${}" has len 0: eaten */
		return;
	}
	if (shell_special(s[0])) {
		*len = *w = 1;
		return;
	}
	while (shell_alnum(s[*len]))
		(*len)++;
	*w = *len;
}

/* os.ExpandEnv, byte for byte. An unset variable expands to "" and earns a warning. */
char *conf_expand_env(struct pctx *p, const char *in, const yaml_node_t *n, const char *path)
{
	struct sbuf b = { 0 };
	sb_put(&b, "", 0);
	for (const char *c = in; *c != '\0';) {
		const char *d = strchr(c, '$');
		const char *name;
		size_t len, w;
		char *nm, num[24];
		const char *v;
		if (d == NULL || d[1] == '\0') {
			sb_put(&b, c, strlen(c));
			break;
		}
		sb_put(&b, c, (size_t)(d - c));
		shell_name(d + 1, &name, &len, &w);
		c = d + 1 + w;
		if (len == 0 && w == 0) {
			sb_put(&b, "$", 1);
			continue;
		}
		if (len == 0) {
			pctx_warn(p, n, path,
				  "malformed variable reference '%.*s' (expanded to \"\", "
				  "as os.ExpandEnv does)",
				  (int)(w + 1), d);
			continue;
		}
		nm = strndup(name, len);
		if (nm == NULL) {
			b.err = 1;
			break;
		}
		v = env_value(p, nm, num);
		if (v == NULL)
			pctx_warn(p, n, path,
				  "environment variable %s is not set (expanded to \"\")", nm);
		else
			sb_put(&b, v, strlen(v));
		free(nm);
	}
	if (b.err) {
		free(b.s);
		p->nomem = 1;
		return NULL;
	}
	return b.s;
}

/* strconv.ParseInt/ParseUint(s, 0, 64) after YAML's underscores are gone: optional sign
 * (signed only), then 0x, 0o, 0b, a leading 0 (octal) or decimal digits. */
static bool go_parse_int(const char *s, bool is_signed, bool *neg, uint64_t *mag)
{
	unsigned base = 10;
	uint64_t v = 0;
	*neg = false;
	if (is_signed && (*s == '+' || *s == '-'))
		*neg = *s++ == '-';
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		base = 16, s += 2;
	else if (s[0] == '0' && (s[1] == 'o' || s[1] == 'O'))
		base = 8, s += 2;
	else if (s[0] == '0' && (s[1] == 'b' || s[1] == 'B'))
		base = 2, s += 2;
	else if (s[0] == '0' && s[1] != '\0')
		base = 8, s += 1;
	if (*s == '\0')
		return false;
	for (; *s != '\0'; s++) {
		unsigned d = isdigit((unsigned char)*s)    ? (unsigned)(*s - '0')
			     : isxdigit((unsigned char)*s) ? (unsigned)(tolower(*s) - 'a' + 10)
							   : 99;
		if (d >= base || v > (UINT64_MAX - d) / base)
			return false;
		v = v * base + d;
	}
	if (is_signed && v > (*neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX))
		return false;
	*mag = v;
	return true;
}

/* go-yaml's yamlStyleFloat: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static bool yaml_style_float(const char *s)
{
	size_t n;
	s += *s == '+' || *s == '-';
	n = strspn(s, "0123456789");
	if (n == 0) {
		if (*s != '.' || !isdigit((unsigned char)s[1]))
			return false;
		s += 1 + strspn(s + 1, "0123456789");
	} else {
		s += n;
		if (*s == '.')
			s += 1 + strspn(s + 1, "0123456789");
	}
	if (*s == 'e' || *s == 'E') {
		s++;
		s += *s == '+' || *s == '-';
		n = strspn(s, "0123456789");
		if (n == 0)
			return false;
		s += n;
	}
	return *s == '\0';
}

static bool in_list(const char *s, const char *const *l)
{
	for (; *l != NULL; l++)
		if (strcmp(s, *l) == 0)
			return true;
	return false;
}

static const char *const y11_true[] = { "y",    "Y",    "yes", "Yes", "YES", "true",
					"True", "TRUE", "on",  "On",  "ON",  NULL };
static const char *const y11_false[] = { "n",     "N",     "no",  "No",  "NO",  "false",
					 "False", "FALSE", "off", "Off", "OFF", NULL };
static const char *const y11_null[] = { "", "~", "null", "Null", "NULL", NULL };
static const char *const y11_inf[] = { ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", NULL };
static const char *const y11_ninf[] = { "-.inf", "-.Inf", "-.INF", NULL };
static const char *const y11_nan[] = { ".nan", ".NaN", ".NAN", NULL };

static enum conf_y11_kind resolve_number(const char *in, struct conf_y11 *out)
{
	char plain[64];
	size_t k = 0;
	bool neg;
	uint64_t mag;
	for (const char *c = in; *c != '\0' && k < sizeof(plain) - 1; c++)
		if (*c != '_')
			plain[k++] = *c;
	plain[k] = '\0';
	if (strlen(in) >= sizeof(plain))
		return CONF_Y11_STR;
	if (go_parse_int(plain, true, &neg, &mag)) {
		out->i = neg ? (int64_t)(0 - mag) : (int64_t)mag;
		return CONF_Y11_INT;
	}
	if (go_parse_int(plain, false, &neg, &mag)) {
		out->u = mag;
		out->is_uint = true;
		return CONF_Y11_INT;
	}
	if (yaml_style_float(plain)) {
		out->f = strtod(plain, NULL);
		return CONF_Y11_FLOAT;
	}
	return CONF_Y11_STR;
}

/* go-yaml v2's resolve() of an untagged plain scalar (what sigs.k8s.io/yaml feeds
 * stunnerd's JSON decoder). Timestamps stay strings (no STUNner key takes a date). */
enum conf_y11_kind conf_y11_resolve(const char *in, struct conf_y11 *out)
{
	memset(out, 0, sizeof(*out));
	if (in_list(in, y11_null))
		return out->kind = CONF_Y11_NULL;
	if (in_list(in, y11_true) || in_list(in, y11_false)) {
		out->b = in_list(in, y11_true);
		return out->kind = CONF_Y11_BOOL;
	}
	if (in_list(in, y11_inf) || in_list(in, y11_ninf) || in_list(in, y11_nan)) {
		out->f = in_list(in, y11_nan) ? NAN : in_list(in, y11_inf) ? INFINITY : -INFINITY;
		return out->kind = CONF_Y11_FLOAT;
	}
	if (in[0] == '.') {
		char *end;
		out->f = strtod(in, &end);
		return out->kind = (*end == '\0' && isdigit((unsigned char)in[1])) ? CONF_Y11_FLOAT
										   : CONF_Y11_STR;
	}
	if (!isdigit((unsigned char)in[0]) && in[0] != '+' && in[0] != '-')
		return out->kind = CONF_Y11_STR;
	return out->kind = resolve_number(in, out);
}

/* strconv.FormatFloat(f, 'g', -1, 32): the shortest digits that read back as the same
 * float32, %e when the exponent is < -4 or >= 6 (Go's rule for the shortest form). */
static void go_format_float32(double f, char *out, size_t n)
{
	float want;
	char e[48];
	int digits = 1;
	int exp, decimals;
	if (isnan(f)) {
		snprintf(out, n, "NaN");
		return;
	}
	/* Beyond float32's range the value is an infinity, as Go's float32 conversion makes it. */
	want = fabs(f) > 3.4028234663852886e38 ? (f > 0 ? INFINITY : -INFINITY) : (float)f;
	if (isinf(want)) {
		snprintf(out, n, want > 0 ? "+Inf" : "-Inf");
		return;
	}
	for (; digits < 9; digits++) {
		snprintf(e, sizeof(e), "%.*e", digits - 1, (double)want);
		if ((float)strtod(e, NULL) == want)
			break;
	}
	snprintf(e, sizeof(e), "%.*e", digits - 1, (double)want);
	exp = atoi(strchr(e, 'e') + 1);
	if (want == 0.0f)
		exp = 0;
	if (exp < -4 || exp >= 6) {
		snprintf(out, n, "%s", e);
		return;
	}
	decimals = digits - (exp + 1);
	snprintf(out, n, "%.*f", decimals > 0 ? decimals : 0, (double)want);
}

bool conf_y11_as_string(const struct conf_y11 *y, char *out, size_t n)
{
	switch (y->kind) {
	case CONF_Y11_BOOL:
		snprintf(out, n, "%s", y->b ? "true" : "false");
		return true;
	case CONF_Y11_INT:
		if (y->is_uint)
			snprintf(out, n, "%llu", (unsigned long long)y->u);
		else
			snprintf(out, n, "%lld", (long long)y->i);
		return true;
	case CONF_Y11_FLOAT:
		go_format_float32(y->f, out, n);
		return true;
	default:
		return false;
	}
}
