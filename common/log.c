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

void log_msg(const char *scope, enum log_level lvl, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	struct timespec ts;
	struct tm tm;
	char when[40];
	size_t w;
	char safe[sizeof(msg) * 4];
	size_t o = 0;
	char line[sizeof(safe) + 200], prio[8] = "";
	int n;
	ssize_t wr;

	if (!log_enabled(scope, lvl))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	w = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(when + w, sizeof(when) - w, ".%06ldZ", ts.tv_nsec / 1000);

	/* Messages carry client-supplied strings (usernames, realms): a control character
	 * must not start a forged line or hide one, so it is written as \xNN. */
	for (const char *p = msg; *p && o + 5 < sizeof(safe); p++) {
		unsigned char c = (unsigned char)*p;
		if (c < 0x20 || c == 0x7f)
			o += (size_t)snprintf(safe + o, sizeof(safe) - o, "\\x%02x", c);
		else
			safe[o++] = (char)c;
	}
	safe[o] = '\0';

	if (g_log.journal)
		snprintf(prio, sizeof(prio), "<%d>", journal_priority(lvl));
	if (g_log.fmt == LOG_FMT_JSON) {
		char esc[sizeof(safe) + 64];
		json_escape(esc, sizeof(esc), safe);
		n = snprintf(
			line, sizeof(line),
			"%s{\"ts\":\"%s\",\"level\":\"%s\",\"proc\":\"%s\",\"pid\":%d,\"scope\":\"%s\",\"msg\":\"%s\"}\n",
			prio, when, log_level_name(lvl), g_log.procname, (int)getpid(), scope, esc);
	} else {
		n = snprintf(line, sizeof(line), "%s%s %-5s %s[%d] %s: %s\n", prio, when,
			     log_level_name(lvl), g_log.procname, (int)getpid(), scope, safe);
	}
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line)) {
		n = sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	/* One write per line so lines of different processes never interleave. */
	wr = write(STDERR_FILENO, line, (size_t)n);
	(void)wr;
}
