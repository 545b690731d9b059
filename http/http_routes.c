/* Request dispatch of the HTTP endpoints: health, metrics and the credential API. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "http/http_cred.h"
#include "http/http_int.h"

#define CT_JSON "application/json"
#define CT_PROM "text/plain; version=0.0.4; charset=utf-8"

/* Queues body (taken from b) with status and content type. On an error inside b a bare
 * 500 is sent instead. */
static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *ctype,
			     struct http_buf *b, const char *extra_hdr, const char *extra_val)
{
	size_t len;
	char *body = http_buf_take(b, &len);
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (body == NULL) {
		status = MHD_HTTP_INTERNAL_SERVER_ERROR;
		ctype = CT_JSON;
		body = strdup("{\"status\":500,\"message\":\"internal error\"}\n");
		if (body == NULL)
			return MHD_NO;
		len = strlen(body);
		extra_hdr = NULL;
	}
	r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (r == NULL) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	/* Every answer ends its connection, whatever libmicrohttpd decides by itself (0.9.75
	 * does, a later one may keep it): a live upgrade's old master, at its exit, takes an
	 * open connection for a request in progress (http_server_finish). */
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	if (extra_hdr != NULL)
		MHD_add_response_header(r, extra_hdr, extra_val);
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned status, const char *msg,
				   const char *hdr, const char *val)
{
	struct http_buf b = HTTP_BUF_INIT;

	http_json_error(&b, (int)status, msg);
	return reply(conn, status, CT_JSON, &b, hdr, val);
}

/* A callback's body, or 500 when it failed. */
static enum MHD_Result reply_cb(struct MHD_Connection *conn, int rc, const char *ctype,
				struct http_buf *b)
{
	if (rc != 0) {
		http_buf_free(b);
		return reply_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal error", NULL,
				   NULL);
	}
	return reply(conn, MHD_HTTP_OK, ctype, b, NULL, NULL);
}

static enum MHD_Result route_health(struct http_server *s, struct MHD_Connection *conn,
				    const char *url)
{
	struct http_buf b = HTTP_BUF_INIT;
	int rc;

	if (strcmp(url, "/live") == 0) {
		bool live = s->h.is_live == NULL || s->h.is_live(s->ctx);
		if (!live)
			return reply_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "not live", NULL,
					   NULL);
		http_buf_puts(&b, "{}\n");
		return reply(conn, MHD_HTTP_OK, CT_JSON, &b, NULL, NULL);
	}
	if (strcmp(url, "/ready") == 0) {
		if (s->h.readiness(s->ctx) == HTTP_READY) {
			http_buf_puts(&b, "{\"status\":200,\"message\":\"READY\"}\n");
			return reply(conn, MHD_HTTP_OK, CT_JSON, &b, NULL, NULL);
		}
		return reply_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "stunnerd not ready", NULL,
				   NULL);
	}
	/* /status */
	if (s->h.status_json == NULL)
		return reply_error(conn, MHD_HTTP_NOT_FOUND, "not found", NULL, NULL);
	rc = s->h.status_json(s->ctx, &b);
	return reply_cb(conn, rc, CT_JSON, &b);
}

/* Compares the Authorization header with "Bearer <token>" in constant time (hashes first,
 * so neither the length nor the content leaks through timing). */
static bool bearer_ok(struct http_server *s, struct MHD_Connection *conn)
{
	const char *tok = s->h.cred_token ? s->h.cred_token(s->ctx) : NULL;
	const char *got;
	unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];

	if (tok == NULL || *tok == '\0')
		return true;
	got = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (got == NULL || strncasecmp(got, "Bearer ", 7) != 0)
		return false;
	SHA256((const unsigned char *)got + 7, strlen(got + 7), a);
	SHA256((const unsigned char *)tok, strlen(tok), b);
	return CRYPTO_memcmp(a, b, sizeof(a)) == 0;
}

static enum MHD_Result route_cred(struct http_server *s, struct MHD_Connection *conn,
				  const char *url, const struct http_req *req)
{
	struct http_cred_query q;
	const struct conf *cfg = NULL;
	struct http_buf b = HTTP_BUF_INIT;
	const char *why = NULL;
	int status = 0;
	int64_t now;
	enum http_cred_form form = strcmp(url, "/ice") == 0 ? HTTP_CRED_ICE : HTTP_CRED_REST;
	int rc;

	if (!bearer_ok(s, conn))
		return reply_error(conn, MHD_HTTP_UNAUTHORIZED, "bearer token required",
				   MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (req == NULL || req->query_too_long)
		return reply_error(conn, MHD_HTTP_BAD_REQUEST, "query too long", NULL, NULL);
	if (http_cred_query_parse(req->query, req->query_len, &q, &why) != 0)
		return reply_error(conn, MHD_HTTP_BAD_REQUEST, why, NULL, NULL);
	if (s->h.cred_config(s->ctx, &cfg) != 0 || cfg == NULL)
		return reply_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
				   "no STUNner configuration available", NULL, NULL);
	now = s->h.now ? s->h.now(s->ctx) : (int64_t)time(NULL);
	rc = http_cred_render(cfg, &q, form, now, &b, &status);
	explicit_bzero(&q, sizeof(q));
	if (rc != 0) {
		http_buf_free(&b);
		return reply_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal error", NULL,
				   NULL);
	}
	return reply(conn, (unsigned)status, CT_JSON, &b, NULL, NULL);
}

/* /revoke: changes what every worker admits, so it is never open: without a configured
 * token it is refused outright, whatever the credential API does without one. */
static enum MHD_Result route_revoke(struct http_server *s, struct MHD_Connection *conn,
				    const char *method, const struct http_req *req)
{
	const char *tok = s->h.cred_token ? s->h.cred_token(s->ctx) : NULL;
	struct http_buf b = HTTP_BUF_INIT;
	unsigned status = 500;
	int rc;

	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_POST) != 0 &&
	    strcmp(method, MHD_HTTP_METHOD_DELETE) != 0)
		return reply_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed",
				   MHD_HTTP_HEADER_ALLOW, "GET, POST, DELETE");
	if (tok == NULL || *tok == '\0')
		return reply_error(conn, MHD_HTTP_FORBIDDEN,
				   "revocation over HTTP needs admin.credential_api_token", NULL,
				   NULL);
	if (!bearer_ok(s, conn))
		return reply_error(conn, MHD_HTTP_UNAUTHORIZED, "bearer token required",
				   MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (req == NULL || req->query_too_long)
		return reply_error(conn, MHD_HTTP_BAD_REQUEST, "query too long", NULL, NULL);
	rc = s->h.revoke(s->ctx, method, req->query, req->query_len, &b, &status);
	if (rc != 0) {
		http_buf_free(&b);
		return reply_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal error", NULL,
				   NULL);
	}
	return reply(conn, status, CT_JSON, &b, NULL, NULL);
}

enum MHD_Result http_route(void *cls, struct MHD_Connection *conn, const char *url,
			   const char *method, const char *version, const char *upload_data,
			   size_t *upload_data_size, void **req_cls)
{
	struct http_server *s = cls;
	const struct http_req *req = *req_cls;
	assert(s->magic == HTTP_SERVER_MAGIC);
	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	http_conn_headed(conn);

	if (s->h.revoke != NULL && strcmp(url, "/revoke") == 0)
		return route_revoke(s, conn, method, req);
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return reply_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed",
				   MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	if (s->h.readiness != NULL && (strcmp(url, "/live") == 0 || strcmp(url, "/ready") == 0 ||
				       strcmp(url, "/status") == 0))
		return route_health(s, conn, url);
	if (s->h.metrics != NULL &&
	    (strcmp(url, s->metrics_path) == 0 || (s->metrics_at_root && strcmp(url, "/") == 0))) {
		struct http_buf b = HTTP_BUF_INIT;
		int rc = s->h.metrics(s->ctx, &b);
		return reply_cb(conn, rc, CT_PROM, &b);
	}
	if (s->h.cred_config != NULL && (strcmp(url, "/ice") == 0 || strcmp(url, "/") == 0))
		return route_cred(s, conn, url, req);
	return reply_error(conn, MHD_HTTP_NOT_FOUND, "not found", NULL, NULL);
}
