/* libFuzzer target: credential API query parsing and response rendering (http/http_cred.h),
 * and the endpoint URL parser (http/http.h) on the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "conf/conf.h"
#include "http/http.h"
#include "http/http_cred.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A fixed config built by hand (no YAML) so the target links only libhttp and libstun. */
static void fake_conf(struct conf *cfg, struct conf_listener *l, struct conf_auth *st,
		      struct conf_user *u)
{
	memset(cfg, 0, sizeof(*cfg));
	memset(l, 0, 3 * sizeof(*l));
	memset(st, 0, sizeof(*st));
	cfg->magic = CONF_MAGIC;
	cfg->admin.name = "ns/gw";
	cfg->auth.type = CONF_AUTH_EPHEMERAL;
	cfg->auth.secret = "fuzz-secret";
	u->username = "bob";
	u->password = "pw";
	st->type = CONF_AUTH_STATIC;
	st->users = u;
	st->n_users = 1;
	l[0] = (struct conf_listener){ .name = "ns/gw/udp",
				       .protocol = CONF_PROTO_TURN_UDP,
				       .address = "10.0.0.1",
				       .port = 3478,
				       .public_address = "203.0.113.1" };
	l[1] = (struct conf_listener){ .name = "tls",
				       .protocol = CONF_PROTO_TURN_TLS,
				       .address = "2001:db8::1",
				       .port = 443,
				       .public_port = 8443 };
	l[2] = (struct conf_listener){ .name = "st",
				       .protocol = CONF_PROTO_TURN_TCP,
				       .address = "10.0.0.2",
				       .port = 3479,
				       .auth = st };
	cfg->listeners = l;
	cfg->n_listeners = 3;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_cred_query q;
	const char *why = NULL;
	struct conf cfg;
	struct conf_listener l[3];
	struct conf_auth st;
	struct conf_user u;

	struct http_endpoint ep;
	char *url = malloc(size + 1);
	if (url == NULL)
		return 0;
	memcpy(url, data, size);
	url[size] = '\0';
	int erc = http_endpoint_parse(url, 8080, &ep, &why);
	free(url);
	if (erc != 0 && why == NULL)
		abort();
	if (erc == 0 && ep.path[0] != '\0' && ep.path[0] != '/')
		abort();
	why = NULL;
	if (http_cred_query_parse((const char *)data, size, &q, &why) != 0) {
		if (why == NULL)
			abort();
		return 0;
	}
	fake_conf(&cfg, l, &st, &u);
	for (int form = HTTP_CRED_REST; form <= HTTP_CRED_ICE; form++) {
		struct http_buf b = HTTP_BUF_INIT;
		int status = 0;
		if (http_cred_render(&cfg, &q, (enum http_cred_form)form, 1700000000, &b,
				     &status) != 0)
			abort();
		if (status != 200 && status != 404)
			abort();
		/* Whatever the query, the body must be one valid JSON object. */
		json_t *j = json_loadb(b.data, b.len, 0, NULL);
		if (j == NULL || !json_is_object(j))
			abort();
		json_decref(j);
		http_buf_free(&b);
	}
	return 0;
}
