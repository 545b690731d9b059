/* Config pre-pass over libyaml's events: bounds the nesting depth and notes ignored documents
 * before the document tree is built. */
#include <errno.h>
#include <stdbool.h>

#include "conf/conf_internal.h"

/* libyaml's scanner keeps one possible simple key per open flow collection and re-checks them
 * all for every token, so a document of flow collections N deep costs O(N^2) to load: 40k
 * levels of `[` took 10 s, the 4 MiB input cap allows hours, and the master's loop waits
 * meanwhile (a CDS message is enough). This pass counts collection starts and stops at the
 * first one past the limit: the scanner never sees the deep part, so it costs O(limit) per
 * token, linear in the file like the load that follows. */
static void prescan_deep(struct pctx *p, const yaml_mark_t *m)
{
	conf_diag_add(p->diags, CONF_DIAG_ERROR, p->file, (uint32_t)m->line + 1,
		      (uint32_t)m->column + 1, "",
		      "lists and mappings nested deeper than %u levels (expected at most %u)",
		      CONF_MAX_DEPTH, CONF_MAX_DEPTH);
}

/* stunnerd reads the first document of a stream and ignores the rest without a word
 * (checked with stunner-validate: even a broken second document passes); so do we, but
 * we say so, since an operator who appended a config with `---` expects it to count. */
static void prescan_more_docs(struct pctx *p, const yaml_mark_t *m)
{
	conf_diag_add(p->diags, CONF_DIAG_WARNING, p->file, (uint32_t)m->line + 1,
		      (uint32_t)m->column + 1, "",
		      "a second YAML document: it and everything after it is ignored (expected "
		      "one document, as stunnerd reads only the first)");
}

int conf_prescan(struct pctx *p, const char *buf, size_t len)
{
	yaml_parser_t yp;
	yaml_event_t ev;
	unsigned depth = 0, docs = 0;
	bool stop = false;
	int rc = 0;
	if (!yaml_parser_initialize(&yp))
		return -ENOMEM;
	yaml_parser_set_input_string(&yp, (const unsigned char *)buf, len);
	while (!stop) {
		/* A syntax error is left to the load, which stops at the same place. */
		if (!yaml_parser_parse(&yp, &ev)) {
			rc = yp.error == YAML_MEMORY_ERROR ? -ENOMEM : 0;
			break;
		}
		if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT) {
			if (++depth > CONF_MAX_DEPTH) {
				prescan_deep(p, &ev.start_mark);
				rc = -EINVAL;
			}
		} else if (ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT) {
			depth--;
		} else if (ev.type == YAML_DOCUMENT_START_EVENT && ++docs > 1) {
			prescan_more_docs(p, &ev.start_mark);
			stop = true; /* the rest is not ours to check */
		}
		stop = stop || rc != 0 || ev.type == YAML_STREAM_END_EVENT;
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&yp);
	return rc;
}
