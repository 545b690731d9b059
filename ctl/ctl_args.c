/* turngatectl: command-line argument checks that say what is wrong (usage errors). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl.h"

int ctl_usage_error(const char *cmd, const char *arg, const char *fmt, ...)
{
	va_list ap;

	/* One line, the first thing read; main() adds only where the whole usage is. */
	fprintf(stderr, "turngatectl%s%s: ", cmd != NULL ? " " : "", cmd != NULL ? cmd : "");
	if (arg != NULL)
		fprintf(stderr, "%s: ", arg);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return -EINVAL;
}

int ctl_arg_unexpected(const char *cmd, const char *arg, const char *hint)
{
	return ctl_usage_error(cmd, arg, "%s%s%s",
			       arg[0] == '-' ? "unknown option" : "unexpected argument",
			       hint[0] != '\0' ? " " : "", hint);
}

int ctl_arg_option(const char *cmd, const char *const *opts, int argc, char **argv, int *i,
		   const char **val)
{
	int k = 0;

	while (opts[k] != NULL && strcmp(opts[k], argv[*i]) != 0)
		k++;
	if (opts[k] == NULL)
		return ctl_arg_unexpected(cmd, argv[*i], "");
	if (*i + 1 >= argc)
		return ctl_usage_error(cmd, argv[*i], "needs a value");
	*i += 1;
	*val = argv[*i];
	return k;
}

int ctl_arg_int(const char *cmd, const char *arg, const char *s, json_int_t min, json_int_t max,
		json_int_t *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno == 0 && end != s && *end == '\0' && v >= min && v <= max) {
		*out = v;
		return 0;
	}
	if (max < INT64_MAX)
		return ctl_usage_error(cmd, arg, "%s is not an integer from %lld to %lld", s,
				       (long long)min, (long long)max);
	if (min == 0 || min == 1)
		return ctl_usage_error(cmd, arg, "%s is not a %s integer", s,
				       min == 0 ? "non-negative" : "positive");
	return ctl_usage_error(cmd, arg, "%s is not an integer >= %lld", s, (long long)min);
}

int ctl_arg_seconds(const char *cmd, const char *arg, const char *s, double min, double max,
		    double *out)
{
	char *end;
	double v = strtod(s, &end);

	/* NaN fails both comparisons; "inf" is above any max */
	if (end != s && *end == '\0' && v >= min && v <= max) {
		*out = v;
		return 0;
	}
	return ctl_usage_error(cmd, arg, "%s is not a number of seconds from %g to %g", s, min,
			       max);
}
