/* Diagnostics list for config loading: collection, FILE:LINE:COL formatting and printing. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "common/grow.h"
#include "common/log.h"
#include "conf/conf_internal.h"

__attribute__((format(printf, 1, 0))) static char *vfmt(const char *fmt, va_list ap)
{
	va_list ap2;
	int n;
	char *s;
	va_copy(ap2, ap);
	n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	s = n < 0 ? NULL : malloc((size_t)n + 1);
	if (s == NULL)
		return NULL;
	vsnprintf(s, (size_t)n + 1, fmt, ap);
	/* Messages quote config values, which can be huge: keep one line readable. */
	if (n > CONF_DIAG_MSG_MAX)
		memcpy(s + CONF_DIAG_MSG_MAX - 3, "...", 4);
	return s;
}

static int diags_grow(struct conf_diags *d)
{
	return GROW_ARRAY(&d->v, &d->cap, d->n + 1, 16) < 0 ? -ENOMEM : 0;
}

void conf_diag_addv(struct conf_diags *d, enum conf_diag_sev sev, const char *file, uint32_t line,
		    uint32_t col, const char *path, const char *fmt, va_list ap)
{
	struct conf_diag *x;
	bool last;
	if (d == NULL)
		return;
	if (d->n >= CONF_MAX_DIAGS) {
		/* The last slot says the list was cut; counting goes on so callers still
		 * see that errors exist. */
		if (sev == CONF_DIAG_ERROR)
			d->n_errors++;
		return;
	}
	if (diags_grow(d) != 0)
		goto nomem;
	x = &d->v[d->n];
	memset(x, 0, sizeof(*x));
	x->sev = sev;
	x->line = line;
	x->col = col;
	x->file = strdup(file ? file : "<config>");
	last = d->n + 1 == CONF_MAX_DIAGS;
	x->path = strdup(path && !last ? path : "");
	if (last) {
		x->sev = CONF_DIAG_ERROR;
		x->line = x->col = 0;
		x->msg = strdup("too many problems, the rest are not shown");
	} else {
		x->msg = vfmt(fmt, ap);
	}
	if (x->file == NULL || x->path == NULL || x->msg == NULL) {
		free(x->file);
		free(x->path);
		free(x->msg);
		goto nomem;
	}
	d->n++;
	if (x->sev == CONF_DIAG_ERROR)
		d->n_errors++;
	else
		d->n_warnings++;
	return;
nomem:
	/* Out of memory while reporting: still count it so the load fails. */
	d->n_errors++;
}

void conf_diag_add(struct conf_diags *d, enum conf_diag_sev sev, const char *file, uint32_t line,
		   uint32_t col, const char *path, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	conf_diag_addv(d, sev, file, line, col, path, fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 5, 0))) static void pctx_report(struct pctx *p,
							      enum conf_diag_sev sev,
							      const yaml_node_t *n,
							      const char *path, const char *fmt,
							      va_list ap)
{
	uint32_t line = 0, col = 0;
	if (n != NULL) {
		line = (uint32_t)n->start_mark.line + 1;
		col = (uint32_t)n->start_mark.column + 1;
	}
	conf_diag_addv(p->diags, sev, p->file, line, col, path, fmt, ap);
}

void pctx_error(struct pctx *p, const yaml_node_t *n, const char *path, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	pctx_report(p, CONF_DIAG_ERROR, n, path, fmt, ap);
	va_end(ap);
}

void pctx_warn(struct pctx *p, const yaml_node_t *n, const char *path, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	pctx_report(p, CONF_DIAG_WARNING, n, path, fmt, ap);
	va_end(ap);
}

int conf_diag_format(const struct conf_diag *d, char *buf, size_t size)
{
	char loc[64] = "";
	const char *path = d->path ? d->path : "";
	if (d->line > 0)
		snprintf(loc, sizeof(loc), ":%u:%u", d->line, d->col);
	return snprintf(buf, size, "%s%s: %s%s%s%s", d->file ? d->file : "<config>", loc,
			d->sev == CONF_DIAG_WARNING ? "warning: " : "", path, path[0] ? ": " : "",
			d->msg ? d->msg : "");
}

void conf_diags_print(const struct conf_diags *d, FILE *out)
{
	char line[1024];
	for (size_t i = 0; d != NULL && i < d->n; i++) {
		conf_diag_format(&d->v[i], line, sizeof(line));
		fprintf(out, "%s\n", line);
	}
}

void conf_diags_log(const struct conf_diags *d, bool json, FILE *out)
{
	char line[1024];

	if (!json) {
		conf_diags_print(d, out);
		return;
	}
	fflush(out);
	for (size_t i = 0; d != NULL && i < d->n; i++) {
		const struct conf_diag *x = &d->v[i];
		struct log_field f[] = {
			{ "file", x->file ? x->file : "<config>", 0 },
			{ "line", NULL, x->line },
			{ "column", NULL, x->col },
			{ "path", x->path ? x->path : "", 0 },
			{ "message", x->msg ? x->msg : "", 0 },
		};

		conf_diag_format(x, line, sizeof(line));
		log_json_line(fileno(out), "config",
			      x->sev == CONF_DIAG_ERROR ? LOG_LVL_ERROR : LOG_LVL_WARN, line, f,
			      sizeof(f) / sizeof(f[0]));
	}
}

void conf_diags_note(bool json, int lvl, const char *msg, FILE *out)
{
	if (!json) {
		fprintf(out, "%s\n", msg);
		return;
	}
	fflush(out);
	log_json_line(fileno(out), "config", (enum log_level)lvl, msg, NULL, 0);
}

void conf_diags_free(struct conf_diags *d)
{
	if (d == NULL)
		return;
	for (size_t i = 0; i < d->n; i++) {
		free(d->v[i].file);
		free(d->v[i].path);
		free(d->v[i].msg);
	}
	free(d->v);
	memset(d, 0, sizeof(*d));
}

void conf_diags_sort(struct conf_diags *d, size_t from)
{
	if (d == NULL || d->n <= from + 1)
		return;
	/* Stable insertion sort: equal positions keep the order they were found in, and the
	 * list is capped at CONF_MAX_DIAGS. Positionless problems go last. */
	for (size_t i = from + 1; i < d->n; i++) {
		struct conf_diag t = d->v[i];
		uint64_t kt = t.line ? ((uint64_t)t.line << 32 | t.col) : UINT64_MAX;
		size_t j = i;
		while (j > from) {
			const struct conf_diag *y = &d->v[j - 1];
			uint64_t ky = y->line ? ((uint64_t)y->line << 32 | y->col) : UINT64_MAX;
			if (ky <= kt)
				break;
			d->v[j] = d->v[j - 1];
			j--;
		}
		d->v[j] = t;
	}
}
