/* Growable text buffer with a sticky error (see http_buf.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "http/http_buf.h"

static int buf_reserve(struct http_buf *b, size_t extra)
{
	size_t need;

	if (b->err)
		return b->err;
	if (extra > HTTP_BUF_MAX || b->len + extra + 1 > HTTP_BUF_MAX) {
		b->err = -EMSGSIZE;
		return b->err;
	}
	need = b->len + extra + 1;
	if (GROW_ARRAY(&b->data, &b->cap, need, 1024) < 0)
		b->err = -ENOMEM;
	return b->err;
}

void http_buf_append(struct http_buf *b, const char *s, size_t len)
{
	if (buf_reserve(b, len) != 0)
		return;
	memcpy(b->data + b->len, s, len);
	b->len += len;
	b->data[b->len] = '\0';
}

void http_buf_puts(struct http_buf *b, const char *s)
{
	http_buf_append(b, s, strlen(s));
}

void http_buf_printf(struct http_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->err)
		return;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->err = -EINVAL;
		return;
	}
	if (buf_reserve(b, (size_t)n) != 0)
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

int http_buf_error(const struct http_buf *b)
{
	return b->err;
}

char *http_buf_take(struct http_buf *b, size_t *len)
{
	char *p;

	if (b->err) {
		http_buf_free(b);
		*len = 0;
		return NULL;
	}
	if (b->data == NULL && buf_reserve(b, 0) != 0) {
		*len = 0;
		return NULL;
	}
	p = b->data;
	p[b->len] = '\0';
	*len = b->len;
	b->data = NULL;
	b->len = b->cap = 0;
	return p;
}

void http_buf_free(struct http_buf *b)
{
	if (b == NULL)
		return;
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
	b->err = 0;
}
