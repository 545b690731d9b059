/* Growable text buffer with a sticky error, for HTTP response bodies and metrics text.
 *
 * Every append is a no-op once an error is set (allocation failure or the size cap), so a
 * renderer appends freely and checks http_buf_error() once at the end. Any process; not
 * thread-safe. The buffer is always NUL-terminated when data != NULL.
 */
#ifndef TG_HTTP_HTTP_BUF_H
#define TG_HTTP_HTTP_BUF_H

#include <stddef.h>

/* Hard cap on a body (metrics of 64 listeners x 64 clusters x 255 workers fit easily). */
#define HTTP_BUF_MAX (16u << 20)

struct http_buf {
	char *data;     /* NUL-terminated text, NULL until the first append */
	size_t len;     /* bytes, excluding the NUL */
	size_t cap;
	int err;        /* 0, -ENOMEM or -EMSGSIZE (over HTTP_BUF_MAX) */
};

#define HTTP_BUF_INIT         \
	{                     \
		NULL, 0, 0, 0 \
	}

/* Appends len bytes of s. */
void http_buf_append(struct http_buf *b, const char *s, size_t len);

/* Appends a NUL-terminated string. */
void http_buf_puts(struct http_buf *b, const char *s);

/* Appends printf-style formatted text. */
void http_buf_printf(struct http_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* 0 or the first error hit. */
int http_buf_error(const struct http_buf *b);

/* Hands the text to the caller (who frees it with free()) and resets b; *len gets the
 * length. Returns NULL (and frees) when b is in error; an empty buffer gives "". */
char *http_buf_take(struct http_buf *b, size_t *len);

/* Frees the text and resets b; accepts NULL. */
void http_buf_free(struct http_buf *b);

#endif
