/* Scoped, levelled logging to stderr in text or JSON lines; shared by every process.
 *
 * Levels follow STUNner's spec syntax: "all:INFO,turn:DEBUG" sets the default level
 * for every scope to INFO and the "turn" scope to DEBUG. Level names are
 * case-insensitive: DISABLE, ERROR, WARN, INFO, DEBUG, TRACE.
 *
 * Process model: each process (master, worker, turngatectl) calls log_init() once;
 * the level table is process-local, a worker changes its copy when the snapshot's
 * loglevel changes. Not thread-safe (every turngate process is single-threaded).
 */
#ifndef TG_COMMON_LOG_H
#define TG_COMMON_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_level {
	LOG_LVL_DISABLE = 0,
	LOG_LVL_ERROR,
	LOG_LVL_WARN,
	LOG_LVL_INFO,
	LOG_LVL_DEBUG,
	LOG_LVL_TRACE,
};

enum log_format {
	LOG_FMT_TEXT = 0,
	LOG_FMT_JSON
};

/* Sets the process name shown in each line ("master", "worker/3") and the format. */
void log_init(const char *procname, enum log_format fmt);
void log_set_procname(const char *procname);
void log_set_format(enum log_format fmt);

/* Parses a level name; returns 0 and writes *out, or -EINVAL. */
int log_level_parse(const char *name, enum log_level *out);
const char *log_level_name(enum log_level lvl);

/* Applies a spec such as "all:INFO,turn:DEBUG". Returns 0, or -EINVAL and changes
 * nothing when any part is malformed. */
int log_set_spec(const char *spec);

/* Checks a spec without applying it: 0 or -EINVAL. */
int log_check_spec(const char *spec);

bool log_enabled(const char *scope, enum log_level lvl);

void log_msg(const char *scope, enum log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The format set by log_init()/log_set_format(). */
enum log_format log_get_format(void);

/* One extra member of a JSON line: a string when str is not NULL, else the integer num. */
struct log_field {
	const char *key;
	const char *str;
	long long num;
};

/* Writes one JSON line to fd whatever the level filter and the format say (for output the
 * operator asked for, such as config diagnostics): the members of log_msg's JSON lines
 * (ts, level, proc, pid, scope, msg) followed by the n fields, with the same escaping.
 * Keys are the caller's constants, values may be anything. */
void log_json_line(int fd, const char *scope, enum log_level lvl, const char *msg,
		   const struct log_field *fields, size_t n);

#define log_error(scope, ...) log_msg((scope), LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(scope, ...) log_msg((scope), LOG_LVL_WARN, __VA_ARGS__)
#define log_info(scope, ...) log_msg((scope), LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(scope, ...)                                         \
	do {                                                          \
		if (log_enabled((scope), LOG_LVL_DEBUG))              \
			log_msg((scope), LOG_LVL_DEBUG, __VA_ARGS__); \
	} while (0)

#endif
