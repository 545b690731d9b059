/* `turngated -t`: loads and resolves a configuration file, prints its diagnostics and says
 * whether it is valid (conf_check_main). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "conf/conf_internal.h"

int conf_check_main(const char *path, FILE *out)
{
	struct conf_diags d = { 0 };
	struct conf *c = NULL;
	char why[512];
	/* A pipe is fine here (cat x.yaml | turngated -t -c /dev/stdin): nothing re-reads it. */
	struct conf_load_opts opts = { .stream_ok = true };
	int rc = path ? conf_load_file(path, &opts, &c, &d) : conf_load_default(NULL, &c);
	if (rc == 0)
		rc = conf_resolve_clusters(c, NULL, NULL, &d);
	/* In the format the file asks for (log_format), as the daemon would log it. */
	conf_diags_log(&d, d.json, out);
	snprintf(why, sizeof(why), "%s: %s", path ? path : "<default>", strerror(-rc));
	if (rc == 0)
		conf_diags_note(d.json, LOG_LVL_INFO, "configuration ok", out);
	else if (d.n_errors == 0)
		conf_diags_note(d.json, LOG_LVL_ERROR, why, out);
	conf_diags_free(&d);
	conf_free(c);
	return rc == 0 ? 0 : 1;
}
