/* Shared helpers for the conf unit tests: load from text with a fake environment, find diagnostics. */
#ifndef TG_TEST_CONF_UTIL_H
#define TG_TEST_CONF_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conf/conf.h"

#define T_NOW 1700000000

/* Fake environment: "NAME=value" pairs, NULL-terminated. */
static const char *const *t_env_pairs;

__attribute__((unused)) static const char *t_getenv(void *ctx, const char *name)
{
	(void)ctx;
	size_t n = strlen(name);
	for (const char *const *e = t_env_pairs; e && *e; e++)
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

static const char *const t_default_env[] = { "STUNNER_ADDR=10.0.0.1", NULL };

/* Loads text as "t.yaml"; returns the rc, fills *c and *d. */
__attribute__((unused)) static int t_load(const char *text, struct conf **c, struct conf_diags *d)
{
	struct conf_load_opts o = { .getenv = t_getenv, .now = T_NOW };
	if (t_env_pairs == NULL)
		t_env_pairs = t_default_env;
	memset(d, 0, sizeof(*d));
	return conf_load_string(text, strlen(text), "t.yaml", &o, c, d);
}

/* True when some diagnostic formats exactly as line. */
__attribute__((unused)) static int t_has(const struct conf_diags *d, const char *line)
{
	char buf[1024];
	for (size_t i = 0; i < d->n; i++) {
		conf_diag_format(&d->v[i], buf, sizeof(buf));
		if (strcmp(buf, line) == 0)
			return 1;
	}
	return 0;
}

/* Prints the diagnostics when an expectation fails, to make the failure readable. */
__attribute__((unused)) static void t_dump(const struct conf_diags *d)
{
	conf_diags_print(d, stderr);
}

#define assert_diag(d, line)                                             \
	do {                                                             \
		if (!t_has((d), (line))) {                               \
			fprintf(stderr, "missing: %s\nhave:\n", (line)); \
			t_dump(d);                                       \
		}                                                        \
		assert_true(t_has((d), (line)));                         \
	} while (0)

/* Minimal valid prefix; tests append sections. */
#define T_HEAD \
	"version: v1\nauth:\n  type: static\n  credentials:\n    username: u\n    password: p\n"

#endif
