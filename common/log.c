/* Scoped, levelled logging to stderr in text or JSON lines. */
#include "config.h"

#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOG_MAX_SCOPES 32
#define LOG_SCOPE_LEN 24

struct log_scope {
	char name[LOG_SCOPE_LEN];
	enum log_level lvl;
};

struct log_state {
	char procname[32];
	enum log_format fmt;
	enum log_level dflt;
	bool journal; /* stderr is systemd-journald's stream: lines start with <PRIORITY> */
	int nscopes;
	struct log_scope scopes[LOG_MAX_SCOPES];
};

/* Process-local logger state: the one piece of global state, set once per process. */
static struct log_state g_log = { "turngate", LOG_FMT_TEXT, LOG_LVL_INFO, false, 0, { { "", 0 } } };

static const char *const level_names[] = { "DISABLE", "ERROR", "WARN", "INFO", "DEBUG", "TRACE" };

/* systemd sets JOURNAL_STREAM=DEV:INODE for a service whose stderr is connected to the
 * journal (systemd.exec(5)). Only then is a "<N>" syslog prefix turned into the entry's
 * PRIORITY; anywhere else (a terminal, a file, a container runtime's log) it would be noise.
 * Comparing the device and inode keeps a variable inherited by a child with another stderr
 * from switching it on. */
static bool stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (e == NULL || sscanf(e, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) != 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_init(const char *procname, enum log_format fmt)
{
	log_set_procname(procname);
	g_log.fmt = fmt;
	g_log.journal = stderr_is_journal();
}

/* syslog(3) priorities of the levels (LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG). */
static int journal_priority(enum log_level lvl)
{
	switch (lvl) {
	case LOG_LVL_ERROR:
		return 3;
	case LOG_LVL_WARN:
		return 4;
	case LOG_LVL_INFO:
		return 6;
	default:
		return 7;
	}
}

void log_set_procname(const char *procname)
{
	snprintf(g_log.procname, sizeof(g_log.procname), "%s", procname ? procname : "turngate");
}

void log_set_format(enum log_format fmt)
{
	g_log.fmt = fmt;
}

int log_level_parse(const char *name, enum log_level *out)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcasecmp(name, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	if (strcasecmp(name, "WARNING") == 0) {
		*out = LOG_LVL_WARN;
		return 0;
	}
	return -EINVAL;
}

const char *log_level_name(enum log_level lvl)
{
	if ((size_t)lvl < sizeof(level_names) / sizeof(level_names[0]))
		return level_names[lvl];
	return "?";
}

/* Parses spec into st (starting from st's current contents). */
static int spec_apply(struct log_state *st, const char *spec)
{
	char buf[512];
	char *save = NULL;

	if (strlen(spec) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, spec);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *colon;
		const char *scope = "all", *lvlname;
		enum log_level lvl;
		int i;

		while (*tok == ' ')
			tok++;
		colon = strchr(tok, ':');
		lvlname = tok;
		if (colon) {
			*colon = '\0';
			scope = tok;
			lvlname = colon + 1;
		}
		if (*scope == '\0' || strlen(scope) >= LOG_SCOPE_LEN ||
		    log_level_parse(lvlname, &lvl) != 0)
			return -EINVAL;
		if (strcmp(scope, "all") == 0) {
			st->dflt = lvl;
			st->nscopes = 0;
			continue;
		}
		for (i = 0; i < st->nscopes; i++)
			if (strcmp(st->scopes[i].name, scope) == 0)
				break;
		if (i == st->nscopes) {
			if (st->nscopes == LOG_MAX_SCOPES)
				return -EINVAL;
			st->nscopes++;
			snprintf(st->scopes[i].name, LOG_SCOPE_LEN, "%s", scope);
		}
		st->scopes[i].lvl = lvl;
	}
	return 0;
}

int log_check_spec(const char *spec)
{
	struct log_state tmp = g_log;
	return spec_apply(&tmp, spec);
}

int log_set_spec(const char *spec)
{
	struct log_state tmp = g_log;
	int rc = spec_apply(&tmp, spec);
	if (rc == 0)
		g_log = tmp;
	return rc;
}

bool log_enabled(const char *scope, enum log_level lvl)
{
	enum log_level lim = g_log.dflt;
	for (int i = 0; i < g_log.nscopes; i++) {
		if (strcmp(g_log.scopes[i].name, scope) == 0) {
			lim = g_log.scopes[i].lvl;
			break;
		}
	}
	return lvl != LOG_LVL_DISABLE && lvl <= lim;
}

/* Writes s as a JSON string body (without quotes). */
static size_t json_escape(char *out, size_t cap, const char *s)
{
	size_t o = 0;
	for (; *s && o + 7 < cap; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else if (c < 0x20) {
			o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
		} else {
			out[o++] = (char)c;
		}
	}
	out[o] = '\0';
	return o;
}

enum log_format log_get_format(void)
{
	return g_log.fmt;
}

/* Message text with control characters written as \xNN: messages carry client-supplied
 * strings (usernames, realms), and a control character must not start a forged line or
 * hide one. */
static void log_sanitize(const char *msg, char *safe, size_t cap)
{
	size_t o = 0;

	for (const char *p = msg; *p && o + 5 < cap; p++) {
		unsigned char c = (unsigned char)*p;
		if (c < 0x20 || c == 0x7f)
			o += (size_t)snprintf(safe + o, cap - o, "\\x%02x", c);
		else
			safe[o++] = (char)c;
	}
	safe[o] = '\0';
}

static void log_when(char *when, size_t cap)
{
	struct timespec ts;
	struct tm tm;
	size_t w;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	w = strftime(when, cap, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(when + w, cap - w, ".%06ldZ", ts.tv_nsec / 1000);
}

/* One write per line so lines of different processes never interleave; a line cut to
 * fit still ends with a newline (and, for JSON, is the one thing that may not parse). */
static void log_write(int fd, char *line, size_t cap, int n)
{
	ssize_t wr;

	if (n < 0)
		return;
	if ((size_t)n >= cap) {
		n = (int)cap - 1;
		line[n - 1] = '\n';
	}
	wr = write(fd, line, (size_t)n);
	(void)wr;
}

/* The JSON line of a message (already sanitized) with extra fields. */
static void log_emit_json(int fd, const char *scope, enum log_level lvl, const char *safe,
			  const struct log_field *fields, size_t nf)
{
	char when[40], prio[8] = "", esc[4096 + 64], line[8192];
	size_t o;
	int n;

	log_when(when, sizeof(when));
	if (g_log.journal)
		snprintf(prio, sizeof(prio), "<%d>", journal_priority(lvl));
	json_escape(esc, sizeof(esc), safe);
	n = snprintf(line, sizeof(line),
		     "%s{\"ts\":\"%s\",\"level\":\"%s\",\"proc\":\"%s\",\"pid\":%d,"
		     "\"scope\":\"%s\",\"msg\":\"%s\"",
		     prio, when, log_level_name(lvl), g_log.procname, (int)getpid(), scope, esc);
	for (size_t i = 0; i < nf && n > 0 && (size_t)n < sizeof(line); i++) {
		char v[1024];

		o = (size_t)n;
		if (fields[i].str != NULL) {
			char safe_v[sizeof(v) / 4];

			log_sanitize(fields[i].str, safe_v, sizeof(safe_v));
			json_escape(v, sizeof(v), safe_v);
			n += snprintf(line + o, sizeof(line) - o, ",\"%s\":\"%s\"", fields[i].key, v);
		} else {
			n += snprintf(line + o, sizeof(line) - o, ",\"%s\":%lld", fields[i].key,
				      fields[i].num);
		}
	}
	if (n > 0 && (size_t)n < sizeof(line))
		n += snprintf(line + n, sizeof(line) - (size_t)n, "}\n");
	log_write(fd, line, sizeof(line), n);
}

void log_json_line(int fd, const char *scope, enum log_level lvl, const char *msg,
		   const struct log_field *fields, size_t n)
{
	char safe[4096];

	log_sanitize(msg, safe, sizeof(safe));
	log_emit_json(fd, scope, lvl, safe, fields, n);
}

void log_msg(const char *scope, enum log_level lvl, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	char when[40];
	char safe[sizeof(msg) * 4];
	char line[sizeof(safe) + 200], prio[8] = "";
	int n;

	if (!log_enabled(scope, lvl))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_sanitize(msg, safe, sizeof(safe));
	if (g_log.fmt == LOG_FMT_JSON) {
		log_emit_json(STDERR_FILENO, scope, lvl, safe, NULL, 0);
		return;
	}
	log_when(when, sizeof(when));
	if (g_log.journal)
		snprintf(prio, sizeof(prio), "<%d>", journal_priority(lvl));
	n = snprintf(line, sizeof(line), "%s%s %-5s %s[%d] %s: %s\n", prio, when,
		     log_level_name(lvl), g_log.procname, (int)getpid(), scope, safe);
	log_write(STDERR_FILENO, line, sizeof(line), n);
}
