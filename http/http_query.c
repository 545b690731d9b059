/* Query-string parsing for the credential API (pure; fuzzed by fuzz/fuzz_http_query.c). */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "http/http_cred.h"

/* Bounds-checked cursor over the raw query with a sticky error. */
struct q_cur {
	const char *p, *end;
	const char *why;
};

static void q_fail(struct q_cur *c, const char *why)
{
	if (c->why == NULL)
		c->why = why;
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Decodes one key or value (up to '&', or also '=' when stop_eq) into buf[cap]; *n gets
 * the decoded length (buf is NUL-terminated). Too long or a bad escape sets the error. */
static void q_decode(struct q_cur *c, bool stop_eq, char *buf, size_t cap, size_t *n)
{
	*n = 0;
	buf[0] = '\0';
	while (c->why == NULL && c->p < c->end && *c->p != '&' && !(stop_eq && *c->p == '=')) {
		int ch = (unsigned char)*c->p++;
		if (ch == '+') {
			ch = ' ';
		} else if (ch == '%') {
			int hi = c->end - c->p >= 2 ? hexval(c->p[0]) : -1;
			int lo = c->end - c->p >= 2 ? hexval(c->p[1]) : -1;
			if (hi < 0 || lo < 0) {
				q_fail(c, "malformed percent-encoding in query");
				break;
			}
			ch = hi * 16 + lo;
			c->p += 2;
		}
		if (*n + 1 >= cap) {
			q_fail(c, "query parameter too long");
			break;
		}
		buf[(*n)++] = (char)ch;
	}
	buf[*n] = '\0';
}

/* Accepts UTF-8 text without control characters (it ends up in JSON and a STUN USERNAME). */
static bool text_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned char ch = (unsigned char)s[i];
		size_t len = ch < 0x80             ? 1
			     : (ch & 0xe0) == 0xc0 ? 2
			     : (ch & 0xf0) == 0xe0 ? 3
			     : (ch & 0xf8) == 0xf0 ? 4
						   : 0;
		if (len == 0 || i + len > n || ch < 0x20 || ch == 0x7f)
			return false;
		if ((len == 2 && ch < 0xc2) || (len == 4 && ch > 0xf4))
			return false;
		for (size_t k = 1; k < len; k++)
			if (((unsigned char)s[i + k] & 0xc0) != 0x80)
				return false;
		if (len == 3) {
			unsigned char c1 = (unsigned char)s[i + 1];
			if ((ch == 0xe0 && c1 < 0xa0) || (ch == 0xed && c1 >= 0xa0))
				return false;  /* overlong, surrogates */
		}
		if (len == 4) {
			unsigned char c1 = (unsigned char)s[i + 1];
			if ((ch == 0xf0 && c1 < 0x90) || (ch == 0xf4 && c1 >= 0x90))
				return false;
		}
		i += len;
	}
	return true;
}

/* Host for a URI: letters, digits, '.', '-', ':' (IPv6), at most HTTP_CRED_HOST_MAX. */
static bool host_ok(const char *s, size_t n)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == ':'))
			return false;
	}
	return true;
}

static void q_ttl(struct q_cur *c, const char *v, size_t n, uint32_t *ttl)
{
	uint64_t x = 0;
	if (n == 0 || n > 10)
		q_fail(c, "\"ttl\" must be a number of seconds");
	for (size_t i = 0; c->why == NULL && i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			q_fail(c, "\"ttl\" must be a number of seconds");
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	if (c->why == NULL && (x == 0 || x > HTTP_CRED_TTL_MAX))
		q_fail(c, "\"ttl\" out of range (1..315360000)");
	if (c->why == NULL)
		*ttl = (uint32_t)x;
}

static void q_policy(struct q_cur *c, const char *v, enum http_ice_policy *out)
{
	if (strcmp(v, "all") == 0)
		*out = HTTP_ICE_ALL;
	else if (strcmp(v, "public") == 0)
		*out = HTTP_ICE_PUBLIC;
	else if (strcmp(v, "relay") == 0)
		*out = HTTP_ICE_RELAY;
	else
		q_fail(c, "\"iceTransportPolicy\" must be all, public or relay");
}

enum q_key {
	QK_SERVICE,
	QK_USERNAME,
	QK_TTL,
	QK_POLICY,
	QK_NS,
	QK_GW,
	QK_LISTENER,
	QK_PUBADDR,
	QK__COUNT
};
static const char *const q_names[QK__COUNT] = {
	"service",   "username", "ttl",      "iceTransportPolicy",
	"namespace", "gateway",  "listener", "public-addr",
};

static void q_apply(struct q_cur *c, enum q_key k, const char *v, size_t n,
		    struct http_cred_query *out)
{
	switch (k) {
	case QK_SERVICE:
		if (strcmp(v, "turn") != 0)
			q_fail(c, "\"service\" must be \"turn\"");
		break;
	case QK_USERNAME:
		if (n > HTTP_CRED_USER_MAX || !text_ok(v, n))
			q_fail(c, "\"username\" must be UTF-8 text of at most 256 bytes");
		else
			memcpy(out->username, v, n + 1);
		break;
	case QK_TTL:
		q_ttl(c, v, n, &out->ttl);
		break;
	case QK_POLICY:
		q_policy(c, v, &out->policy);
		break;
	case QK_PUBADDR:
		if (n > HTTP_CRED_HOST_MAX || !host_ok(v, n))
			q_fail(c, "\"public-addr\" must be an IP address or host name");
		else
			memcpy(out->public_addr, v, n + 1);
		break;
	default: {
		char *dst = k == QK_NS   ? out->namespace_
			    : k == QK_GW ? out->gateway
					 : out->listener;
		if (n > HTTP_CRED_FIELD_MAX || !text_ok(v, n))
			q_fail(c, "namespace, gateway and listener must be UTF-8 text");
		else
			memcpy(dst, v, n + 1);
	}
	}
}

int http_cred_query_parse(const char *query, size_t len, struct http_cred_query *out,
			  const char **why)
{
	struct q_cur c = { query, query ? query + len : query, NULL };
	bool seen[QK__COUNT] = { false };
	char key[32], val[HTTP_CRED_QUERY_MAX + 1];
	size_t kn, vn;

	memset(out, 0, sizeof(*out));
	out->ttl = HTTP_CRED_TTL_DEFAULT;
	if (query == NULL && len != 0)
		q_fail(&c, "bad query");
	if (len > HTTP_CRED_QUERY_MAX)
		q_fail(&c, "query too long");
	while (c.why == NULL && c.p < c.end) {
		q_decode(&c, true, key, sizeof(key), &kn);
		if (c.why != NULL && kn + 1 >= sizeof(key))
			c.why = NULL, kn = 0, key[0] = '\0';  /* long unknown key: skip it */
		while (c.why == NULL && c.p < c.end && *c.p != '=' && *c.p != '&')
			c.p++;
		vn = 0;
		val[0] = '\0';
		if (c.p < c.end && *c.p == '=') {
			c.p++;
			q_decode(&c, false, val, sizeof(val), &vn);
		}
		if (c.p < c.end && *c.p == '&')
			c.p++;
		for (int k = 0; c.why == NULL && k < QK__COUNT; k++) {
			if (strcmp(key, q_names[k]) != 0 || strlen(key) != kn || seen[k])
				continue;
			seen[k] = true;
			if (strlen(val) != vn)
				q_fail(&c, "NUL byte in query parameter");
			else
				q_apply(&c, (enum q_key)k, val, vn, out);
		}
	}
	if (c.why == NULL && !seen[QK_SERVICE])
		q_fail(&c, "\"service\" must be \"turn\"");
	if (c.why == NULL && out->gateway[0] != '\0' && out->namespace_[0] == '\0')
		q_fail(&c, "\"gateway\" requires \"namespace\"");
	if (why != NULL)
		*why = c.why;
	return c.why == NULL ? 0 : -EINVAL;
}
