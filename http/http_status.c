/* GET /status body: the redacted config in STUNner's StunnerStatus shape plus live state. */
#include <errno.h>
#include <stdlib.h>

#include <jansson.h>

#include "conf/conf.h"
#include "http/http.h"

static const char *status_name(enum http_readiness r)
{
	return r == HTTP_READY ? "READY" : r == HTTP_DRAINING ? "TERMINATING" : "NOT-READY";
}

int http_status_render(const struct conf *cfg, const struct http_status_info *info,
		       struct http_buf *out)
{
	json_t *o = cfg ? conf_to_json_redacted(cfg) : json_object();
	json_t *w = json_pack("{s:I, s:I}", "running", (json_int_t)info->workers_running, "total",
			      (json_int_t)info->workers_total);
	char *txt = NULL;
	int rc = -ENOMEM;

	if (o == NULL || w == NULL)
		goto out;
	if (json_object_set_new(o, "allocationCount",
				json_integer((json_int_t)info->allocations)) ||
	    json_object_set_new(o, "status", json_string(status_name(info->readiness))) ||
	    json_object_set_new(o, "generation", json_integer((json_int_t)info->generation)) ||
	    json_object_set(o, "workers", w) ||
	    json_object_set_new(o, "lastReload",
				json_string(info->last_reload_ok	 ? "ok"
					    : info->last_reload_refused ? "refused"
									: "failed")) ||
	    json_object_set_new(o, "unknownRoutes",
				json_integer(cfg ? (json_int_t)cfg->n_unknown_routes : 0)))
		goto out;
	txt = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	if (txt == NULL)
		goto out;
	http_buf_puts(out, txt);
	http_buf_puts(out, "\n");
	rc = http_buf_error(out);
out:
	free(txt);
	json_decref(w);
	json_decref(o);
	return rc;
}
