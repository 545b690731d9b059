/* The conf unit tests' helpers: load from text with a fake environment, find diagnostics. */
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

/* A config that must fail, and one diagnostic line it must give. */
struct err_case {
	const char *text;
	const char *line;
};

/* Loads every case: each fails, yields no config, and reports its line. */
__attribute__((unused)) static void t_check_errors(const struct err_case *cases, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct conf *c = (struct conf *)1;
		struct conf_diags d;
		int rc = t_load(cases[i].text, &c, &d);
		if (rc == 0 || !t_has(&d, cases[i].line))
			fprintf(stderr, "case %zu rc=%d\n", i, rc);
		assert_int_not_equal(rc, 0);
		assert_null(c);
		assert_diag(&d, cases[i].line);
		assert_true(d.n_errors > 0);
		conf_diags_free(&d);
	}
}

/* Minimal valid prefix; tests append sections. */
#define T_HEAD \
	"version: v1\nauth:\n  type: static\n  credentials:\n    username: u\n    password: p\n"

#endif
