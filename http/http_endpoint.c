/* Parser for STUNner-style endpoint URLs ("http://:8086", "http://127.0.0.1:9000/metrics"). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "http/http.h"

/* Bounds-checked cursor with a sticky error: every step is a no-op once err is set. */
struct ep_cur {
	const char *p, *end;
	const char *why;
	int err;
};

static void cur_fail(struct ep_cur *c, int err, const char *why)
{
	if (c->err == 0) {
		c->err = err;
		c->why = why;
	}
}

static bool cur_skip(struct ep_cur *c, const char *lit)
{
	size_t n = strlen(lit);
	if (c->err || (size_t)(c->end - c->p) < n || strncasecmp(c->p, lit, n) != 0)
		return false;
	c->p += n;
	return true;
}

/* Copies bytes up to (not including) any char of stops into buf[cap]. */
static size_t cur_take_until(struct ep_cur *c, const char *stops, char *buf, size_t cap)
{
	size_t n = 0;
	while (!c->err && c->p < c->end && strchr(stops, *c->p) == NULL) {
		if (n + 1 >= cap) {
			cur_fail(c, -EINVAL, "component too long");
			break;
		}
		buf[n++] = *c->p++;
	}
	buf[n] = '\0';
	return n;
}

static void ep_host(struct ep_cur *c, struct http_endpoint *out)
{
	char host[64];
	struct sockaddr_in *v4 = (struct sockaddr_in *)&out->addr;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&out->addr;
	size_t n;

	if (cur_skip(c, "[")) {
		cur_take_until(c, "]", host, sizeof(host));
		if (!cur_skip(c, "]"))
			cur_fail(c, -EINVAL, "unterminated [IPv6] host");
		if (c->err)
			return;
		v6->sin6_family = AF_INET6;
		if (inet_pton(AF_INET6, host, &v6->sin6_addr) != 1)
			cur_fail(c, -EINVAL, "bad IPv6 address");
		out->any_host = IN6_IS_ADDR_UNSPECIFIED(&v6->sin6_addr);
		out->addr_len = sizeof(*v6);
		return;
	}
	n = cur_take_until(c, ":/", host, sizeof(host));
	if (c->err)
		return;
	if (n == 0 || strcmp(host, "0.0.0.0") == 0) {
		out->any_host = true;
		v6->sin6_family = AF_INET6;
		v6->sin6_addr = in6addr_any;
		out->addr_len = sizeof(*v6);
		return;
	}
	if (strcasecmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");
	v4->sin_family = AF_INET;
	out->addr_len = sizeof(*v4);
	if (inet_pton(AF_INET, host, &v4->sin_addr) != 1)
		cur_fail(c, -EINVAL, "host must be empty, an IP address or localhost");
}

static void ep_port(struct ep_cur *c, uint16_t default_port, struct http_endpoint *out)
{
	unsigned long v = 0;
	size_t digits = 0;

	out->port = default_port;
	if (!cur_skip(c, ":"))
		return;
	while (!c->err && c->p < c->end && *c->p >= '0' && *c->p <= '9' && digits < 6) {
		v = v * 10 + (unsigned long)(*c->p++ - '0');
		digits++;
	}
	if (digits == 0 || digits > 5 || v > 65535)
		cur_fail(c, -EINVAL, "port must be 0..65535");
	out->port = (uint16_t)v;
}

static void ep_path(struct ep_cur *c, struct http_endpoint *out)
{
	if (c->err || c->p == c->end)
		return;
	if (*c->p != '/') {
		cur_fail(c, -EINVAL, "expected '/' before the path");
		return;
	}
	for (const char *q = c->p; q < c->end; q++)
		if (*q <= 0x20 || *q >= 0x7f || *q == '?' || *q == '#')
			cur_fail(c, -EINVAL, "path must be printable ASCII without '?' or '#'");
	cur_take_until(c, "", out->path, sizeof(out->path));
	if (strcmp(out->path, "/") == 0)
		out->path[0] = '\0';
}

int http_endpoint_parse(const char *url, uint16_t default_port, struct http_endpoint *out,
			const char **why)
{
	struct ep_cur c = { url, url ? url + strlen(url) : NULL, NULL, 0 };

	memset(out, 0, sizeof(*out));
	if (url == NULL || *url == '\0') {
		cur_fail(&c, -EINVAL, "empty endpoint");
	} else if (!cur_skip(&c, "http://")) {
		if (strstr(url, "://") != NULL)
			cur_fail(&c, -EPROTONOSUPPORT, "only http:// endpoints are supported");
		else
			cur_fail(&c, -EINVAL, "endpoint must start with http://");
	}
	if (c.err == 0 && memchr(c.p, '@', (size_t)(c.end - c.p)) != NULL)
		cur_fail(&c, -EINVAL, "user info is not allowed");
	ep_host(&c, out);
	ep_port(&c, default_port, out);
	ep_path(&c, out);
	if (c.err == 0) {
		if (out->addr.ss_family == AF_INET)
			((struct sockaddr_in *)&out->addr)->sin_port = htons(out->port);
		else
			((struct sockaddr_in6 *)&out->addr)->sin6_port = htons(out->port);
	}
	if (why != NULL)
		*why = c.why;
	return c.err;
}

bool http_endpoint_same_socket(const struct http_endpoint *a, const struct http_endpoint *b)
{
	if (a->port != b->port)
		return false;
	/* An "any" socket conflicts with every specific address on the same port. */
	if (a->any_host || b->any_host)
		return true;
	if (a->addr.ss_family != b->addr.ss_family)
		return false;
	if (a->addr.ss_family == AF_INET)
		return ((const struct sockaddr_in *)&a->addr)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)&b->addr)->sin_addr.s_addr;
	return memcmp(&((const struct sockaddr_in6 *)&a->addr)->sin6_addr,
		      &((const struct sockaddr_in6 *)&b->addr)->sin6_addr,
		      sizeof(struct in6_addr)) == 0;
}
