/* Unit test: figures the docs state that the code can derive (sizes from sizeof, counts
 * from the enums, limits from their macros) still agree with the code.
 *
 * Each rule names a doc, an extended regex whose first group captures the figure, and the
 * value the code gives. A rule must match at least once (a rephrased sentence fails the
 * test rather than escaping it), and every match must agree. The doc text is read with
 * line breaks and runs of spaces folded to one space, so a figure may wrap; thousands
 * separators (a space or a comma between digits, "9 544", "65,000") are ignored. */
#include "config.h"

#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/ipc.h"
#include "common/ipcq.h"
#include "conf/conf.h"
#include "conf/conf_internal.h"
#include "conf/snapshot.h"
#include "shm/shm.h"
#include "shm/shm_alloc.h"
#include "shm/shm_internal.h"
#include "shm/shm_quota.h"
#include "shm/shm_records.h"
#include "master/admin.h"
#include "master/master.h"
#include "master/webhook.h"
#include "stun/stun.h"
#include "stun/stun_frame.h"
#include "worker/sockbuf.h"
#include "worker/turn.h"
#include "worker/wk.h"

struct rule {
	const char *doc;	/* under docs/ */
	const char *re;		/* group 1: the figure */
	int base;		/* 10 or 16 */
	unsigned long long want;
};

#define ROUND_UP(n, a) ((((unsigned long long)(n)) + (a)-1) / (a) * (a))

static const struct rule rules[] = {
	/* The config text's limits (conf/conf_internal.h) and the REALM bound (stun/stun.h). */
	{ "configuration.md", "nest at most ([0-9]+) levels deep", 10, CONF_MAX_DEPTH },
	{ "configuration.md", "nested deeper than ([0-9]+) levels \\(expected at most", 10,
	  CONF_MAX_DEPTH },
	{ "configuration.md", "text is at most ([0-9]+) MiB", 10, CONF_MAX_INPUT >> 20 },
	{ "configuration.md", "`realm` .* At most ([0-9]+) bytes \\(the most REALM", 10,
	  STUN_MAX_REALM_LEN },
	/* The admin socket's clients (master/admin.h). */
	{ "operations.md", "at most ([0-9]+) clients are served at once", 10, ADMIN_MAX_CLIENTS },
	{ "operations.md", "When all ([0-9]+) places are taken", 10, ADMIN_MAX_CLIENTS },
	{ "operations.md", "idle for at least ([0-9]+) s \\(`ADMIN_IDLE_EVICT_S`\\)", 10,
	  ADMIN_IDLE_EVICT_S },
	{ "operations.md", "once one of them has been quiet for ([0-9]+) s", 10,
	  ADMIN_IDLE_EVICT_S },
	{ "operations.md", "asks again more often than every ([0-9]+) s", 10, ADMIN_IDLE_EVICT_S },
	{ "security.md", "when all ([0-9]+) are taken, a new connection", 10, ADMIN_MAX_CLIENTS },
	{ "security.md", "if it has been idle ≥ ([0-9]+) s", 10, ADMIN_IDLE_EVICT_S },
	{ "operations.md", "for ([0-9]+) s \\(`ADMIN_STALL_EVICT_S`\\)", 10, ADMIN_STALL_EVICT_S },
	{ "security.md", "made no progress for ≥ ([0-9]+) s", 10, ADMIN_STALL_EVICT_S },
	/* The master's kept disconnects (master/discsent.h) and the worker's bound. */
	{ "operations.md", "at most ([0-9]+) per worker \\(past that", 10, DISCSENT_MAX },
	{ "operations.md", "still not done again ([0-9]+) seconds after", 10,
	  DISCSENT_REOWE_TICKS },
	{ "architecture.md", "at most ([0-9]+) a slot \\(a full list", 10, DISCSENT_MAX },
	{ "architecture.md", "again every ([0-9]+) ticks while", 10, DISCSENT_REOWE_TICKS },
	{ "architecture.md", "keeps only ([0-9]+) while its adoption", 10, WK_DISC_PENDING_MAX },
	/* The automatic table capacity's ceiling (conf/conf_capacity.c). */
	{ "configuration.md", "at most ([0-9][0-9 ,]*): the shared port pool", 10,
	  CONF_AUTO_ALLOCATIONS_MAX },
	{ "configuration.md", "books one port number on at most ([0-9]+) relay addresses", 10,
	  CONF_RELAY_WAYS },
	/* Shared memory: the counter block and the allocation record. */
	{ "architecture.md", "\\(([0-9]+) named counters", 10, SHM_CTR__COUNT },
	{ "architecture.md", "named counters, ([0-9]+) listeners ×", 10, SHM_MAX_LISTENERS },
	{ "architecture.md", "listeners × ([0-9]+),", 10, SHM_LCTR__COUNT },
	{ "architecture.md", "([0-9]+) clusters ×", 10, SHM_MAX_CLUSTERS },
	{ "architecture.md", "clusters × ([0-9]+),", 10, SHM_CCTR__COUNT },
	{ "architecture.md", "lifetime histogram; ([0-9][0-9 ,]*) bytes\\)", 10,
	  sizeof(struct shm_counters) },
	{ "architecture.md", "`lst\\[([0-9]+)\\]", 10, SHM_MAX_LISTENERS },
	{ "architecture.md", "`cls\\[([0-9]+)\\]", 10, SHM_MAX_CLUSTERS },
	/* Listener slots: one per name, 0..63, and the snapshot layout that carries them. */
	{ "architecture.md", "each name a \\*\\*slot\\*\\* \\(0\\.\\.([0-9]+)\\)", 10,
	  SHM_MAX_LISTENERS - 1 },
	{ "architecture.md", "A ([0-9]+)th name gets no slot", 10, SHM_MAX_LISTENERS + 1 },
	{ "architecture.md", "`SNAP_VERSION` ([0-9]+)", 10, SNAP_VERSION },
	{ "architecture.md", "histogram of allocation lifetimes: ([0-9]+) buckets", 10,
	  SHM_LIFE_BUCKETS + 1 },
	{ "architecture.md", "`struct shm_alloc`,? ([0-9][0-9 ,]*) bytes", 10,
	  sizeof(struct shm_alloc) },
	{ "architecture.md", "stride ([0-9][0-9 ,]*[0-9])", 10,
	  ROUND_UP(sizeof(struct shm_alloc), SHM_ALLOC_STRIDE_ALIGN) },
	{ "architecture.md", "up to ([0-9]+) permissions and [0-9]+ channel bindings", 10,
	  SHM_ALLOC_MAX_PERMS },
	{ "architecture.md", "up to [0-9]+ permissions and ([0-9]+) channel bindings", 10,
	  SHM_ALLOC_MAX_CHANS },
	{ "architecture.md", "record's ([0-9]+) inline entries", 10, SHM_ALLOC_MAX_CHANS },
	/* Revocation list. */
	{ "architecture.md", "then ([0-9 ,]*[0-9]) entries \\(`SHM_REVOKE_MAX`\\)", 10, SHM_REVOKE_MAX },
	{ "architecture.md", "`SHM_REVOKE_MAX`\\) of ([0-9]+) bytes", 10,
	  sizeof(struct shm_revoke_ent) },
	{ "architecture.md", "At most ([0-9 ,]*[0-9]) \\(`SHM_REVOKE_MAX`\\)", 10, SHM_REVOKE_MAX },
	{ "operations.md", "holds at most ([0-9 ,]*[0-9]) entries", 10, SHM_REVOKE_MAX },
	/* Allocation counts. */
	{ "architecture.md", "among the ([0-9]+) from `key % entries`", 10, SHM_QUOTA_WINDOW },
	{ "architecture.md", "none of a key's ([0-9]+) entries has", 10, SHM_QUOTA_WINDOW },
	{ "architecture.md", "a key's top ([0-9]+) bits \\(the tag\\)", 10,
	  64 - SHM_QUOTA_COUNT_BITS },
	{ "architecture.md", "the tag\\) and a ([0-9]+)-bit count", 10, SHM_QUOTA_COUNT_BITS },
	{ "architecture.md", "a power of two, at least ([0-9]+) and at least 4", 10,
	  SHM_QUOTA_MIN_ENTRIES },
	/* TCP relaying (RFC 6062). */
	{ "relay.md", "connecting \\(([0-9]+) s, `tcp_connect_timeout`\\)", 10,
	  CONF_DEF_TCP_CONNECT_TIMEOUT },
	{ "relay.md", "ConnectionBind \\(([0-9]+) s, `WK_TCPR_BIND_TIMEOUT_S`\\)", 10,
	  (unsigned long long)WK_TCPR_BIND_TIMEOUT_S },
	{ "relay.md", "one buffer of ([0-9]+) KiB per direction \\(`tcp_buffer`\\)", 10,
	  CONF_DEF_TCP_BUFFER / 1024 },
	{ "relay.md", "([0-9]+) peer connections per allocation \\(`tcp_connections`\\)", 10,
	  CONF_DEF_TCP_CONNECTIONS },
	{ "relay.md", "([0-9]+) connects in flight per worker \\(`tcp_pending_connects`\\)", 10,
	  CONF_DEF_TCP_PENDING_CONNECTS },
	{ "relay.md", "more than ([0-9]+) per allocation → 508", 10, CONF_DEF_TCP_CONNECTIONS },
	{ "relay.md", "with ([0-9]+) connects in flight in the worker", 10,
	  CONF_DEF_TCP_PENDING_CONNECTS },
	{ "relay.md", "less a reserve of ([0-9]+) descriptors", 10, WK_TCPR_FD_RESERVE },
	{ "relay.md", "\\(1024 − ([0-9]+)\\) / 2 = [0-9]+ plus", 10, WK_TCPR_FD_RESERVE },
	{ "relay.md", "\\(1024 − [0-9]+\\) / 2 = ([0-9]+) plus", 10,
	  (1024 - WK_TCPR_FD_RESERVE) / 2 },
	{ "relay.md", "or none within ([0-9]+) s → 447", 10, CONF_DEF_TCP_CONNECT_TIMEOUT },
	{ "relay.md", "not bound within ([0-9]+) s is reset", 10,
	  (unsigned long long)WK_TCPR_BIND_TIMEOUT_S },
	{ "configuration.md", "\\| `source_connections` \\| 0\\.\\.[0-9]+ \\| `([0-9]+)`", 10,
	  CONF_DEF_SOURCE_CONNECTIONS },
	{ "configuration.md", "\\| `source_tls_handshakes` \\| 0\\.\\.[0-9]+ \\| `([0-9]+)`", 10,
	  CONF_DEF_SOURCE_HANDSHAKES },
	{ "configuration.md", "\\| `source_dtls_handshakes` \\| 0\\.\\.[0-9]+ \\| `([0-9]+)`", 10,
	  CONF_DEF_SOURCE_HANDSHAKES },
	{ "configuration.md", "\\| `prefix_connections` \\| 0\\.\\.[0-9]+ \\| `([0-9]+)`", 10,
	  CONF_DEF_PREFIX_FACTOR * CONF_DEF_SOURCE_CONNECTIONS },
	{ "configuration.md", "\\| `prefix_tls_handshakes` \\| 0\\.\\.[0-9]+ \\| `([0-9]+)`", 10,
	  CONF_DEF_PREFIX_FACTOR * CONF_DEF_SOURCE_HANDSHAKES },
	{ "configuration.md", "\\| `prefix_dtls_handshakes` \\| 0\\.\\.[0-9]+ \\| `([0-9]+)`", 10,
	  CONF_DEF_PREFIX_FACTOR * CONF_DEF_SOURCE_HANDSHAKES },
	{ "configuration.md", "\\| `preauth_timeout` \\| 1\\.\\.[0-9]+ \\| `([0-9]+)`", 10,
	  CONF_DEF_PREAUTH_TIMEOUT },
	{ "configuration.md", "\\| `wake_coalesce_us` \\| 0\\.\\.([0-9]+)", 10,
	  CONF_MAX_WAKE_COALESCE_US },
	{ "configuration.md", "\\| `wake_coalesce_us` \\| 0\\.\\.[0-9]+ \\| `([0-9]+)`", 10,
	  CONF_DEF_WAKE_COALESCE_US },
	{ "configuration.md", "\\| `wake_coalesce_rate` \\| 1\\.\\.[0-9]+ \\| `([0-9]+)`", 10,
	  CONF_DEF_WAKE_COALESCE_RATE },
	{ "configuration.md", "wake-ups each carry fewer than ([0-9]+) datagrams", 10,
	  WK_WAKE_FEW },
	{ "configuration.md", "tries again after ([0-9]+) ms, then", 10,
	  WK_WAKE_BACKOFF_MIN_NS / 1000000 },
	{ "configuration.md", "tries again after [0-9]+ ms, then [0-9]+ ms, … up to ([0-9]+) s", 10,
	  WK_WAKE_BACKOFF_MAX_NS / 1000000000 },
	{ "architecture.md", "windows of ([0-9]+) ms of loop iterations", 10,
	  WK_WAKE_WINDOW_NS / 1000000 },
	{ "architecture.md", "timer slack to 1/([0-9]+) of the interval", 10, WK_WAKE_SLACK_DIV },
	{ "architecture.md", "timer slack to 1/[0-9]+ of the interval plus ([0-9]+) µs", 10,
	  WK_WAKE_SLACK_PLUS_NS / 1000 },
	{ "architecture.md", "so every ([0-9]+) s engaged it leaves one window", 10,
	  WK_WAKE_REMEASURE_NS / 1000000000 },
	{ "tls.md", "`limits.source_tls_handshakes` \\(([0-9]+)\\)", 10, CONF_DEF_SOURCE_HANDSHAKES },
	{ "tls.md", "`limits.preauth_timeout` \\(([0-9]+) s\\)", 10, CONF_DEF_PREAUTH_TIMEOUT },
	{ "configuration.md", "\\| `tcp_connections` \\| 1\\.\\.[0-9]+ \\| `([0-9]+)`", 10,
	  CONF_DEF_TCP_CONNECTIONS },
	{ "configuration.md", "\\| `tcp_connections` \\| 1\\.\\.([0-9]+)", 10,
	  CONF_MAX_TCP_CONNECTIONS },
	{ "configuration.md", "\\| `tcp_pending_connects` \\| 1\\.\\.[0-9]+ \\| `([0-9]+)`", 10,
	  CONF_DEF_TCP_PENDING_CONNECTS },
	{ "configuration.md", "\\| `tcp_connect_timeout` \\| 1\\.\\.[0-9]+ \\| `([0-9]+)`", 10,
	  CONF_DEF_TCP_CONNECT_TIMEOUT },
	{ "configuration.md", "\\| `tcp_buffer` \\| [0-9]+\\.\\.[0-9]+ \\| `([0-9]+)`", 10,
	  CONF_DEF_TCP_BUFFER },
	{ "configuration.md", "\\| `siblings` \\| list of [^|]*, at most ([0-9]+) \\|", 10,
	  CONF_MAX_SIBLINGS },
	{ "architecture.md", "the bytes read \\(≤ ([0-9]+)\\)", 10, IPC_HANDOFF_DATA_MAX },
	/* Control frames that wait for room (common/ipcq.h): the bounds, what a frame costs,
	 * how often drops are logged, and the hand-offs a bound holds. */
	{ "architecture.md", "`worker/ctlq.c`, ([0-9]+) MiB, `WK_CTLQ_MAX_BYTES`", 10,
	  WK_CTLQ_MAX_BYTES >> 20 },
	{ "architecture.md", "`master/handoffq.c`, ([0-9]+) MiB, `MASTER_HANDOFFQ_MAX_BYTES`", 10,
	  MASTER_HANDOFFQ_MAX_BYTES >> 20 },
	{ "architecture.md", "a frame's payload, key and ([0-9]+) bytes", 10, IPCQ_FRAME_COST },
	{ "architecture.md", "at most one a type every ([0-9]+) s", 10, IPCQ_REPORT_MS / 1000 },
	{ "operations.md", "worker \\(up to ([0-9]+) MiB of frames", 10, WK_CTLQ_MAX_BYTES >> 20 },
	{ "operations.md", "MiB of frames, about ([0-9][0-9 ,]*[0-9]) hand-offs", 10,
	  WK_CTLQ_MAX_BYTES / (sizeof(struct ipc_handoff) + IPCQ_FRAME_COST) / 1000 * 1000 },
	{ "operations.md", "in the master \\(up to ([0-9]+) MiB, about", 10,
	  MASTER_HANDOFFQ_MAX_BYTES >> 20 },
	{ "operations.md", "MiB, about ([0-9][0-9 ,]*[0-9]), per owner worker", 10,
	  MASTER_HANDOFFQ_MAX_BYTES / (sizeof(struct ipc_handoff) + IPCQ_FRAME_COST) / 100 * 100 },
	{ "operations.md", "at most every ([0-9]+) s per frame type and queue", 10,
	  IPCQ_REPORT_MS / 1000 },
	{ "operations.md", "at most one every ([0-9]+) s per frame type", 10, IPCQ_REPORT_MS / 1000 },
	{ "operations.md", "past the queue's bound of ([0-9]+) MiB", 10, WK_CTLQ_MAX_BYTES >> 20 },
	{ "operations.md", "each its name and ([0-9]+) bytes", 10, IPCQ_FRAME_COST },
	/* Worker I/O. */
	{ "architecture.md", "`recvmmsg` of up to ([0-9]+) datagrams \\(`WK_BATCH`\\)", 10,
	  WK_BATCH },
	{ "architecture.md", "buffers of ([0-9][0-9 ,]*) bytes \\(any UDP payload", 10,
	  WK_DGRAM_MAX },
	{ "architecture.md", "behind ([0-9]+) bytes of headroom", 10, WK_HEADROOM },
	{ "architecture.md", "is at most ([0-9][0-9,]*) bytes, and the group", 10, WK_GSO_SEG_MAX },
	{ "architecture.md", "within ([0-9][0-9 ,]*[0-9]) bytes; otherwise the group", 10,
	  WK_GSO_TOTAL_MAX },
	{ "architecture.md", "at most ([0-9]+) connections per listener per worker", 10,
	  WK_TCP_MAX_CONNS },
	{ "architecture.md", "`WK_TCP_IN_START` \\(([0-9]+) KiB\\)", 10, WK_TCP_IN_START / 1024 },
	{ "architecture.md", "`WK_TCP_IN_MAX` \\(64 KiB \\+ ([0-9]+) bytes\\)", 10,
	  WK_TCP_IN_MAX - 65536 },
	{ "architecture.md", "output buffer that grows up to ([0-9]+) KiB", 10,
	  WK_TCP_OUT_MAX / 1024 },
	{ "architecture.md", "kernel send buffer is bounded at the same ([0-9]+) KiB", 10,
	  WK_TCP_SNDBUF / 1024 },
	{ "relay.md", "`SO_SNDBUF` at ([0-9]+) KiB \\(`WK_TCP_SNDBUF`", 10, WK_TCP_SNDBUF / 1024 },
	{ "relay.md", "\\(`ss -tm` shows `tb([0-9]+)`\\)", 10, 2 * WK_TCP_SNDBUF },
	{ "relay.md", "a connection carries about ([0-9]+) KiB per", 10, WK_TCP_SNDBUF / 1024 },
	{ "relay.md", "send buffer of the larger of ([0-9]+) KiB", 10, WK_TCP_SNDBUF / 1024 },
	{ "configuration.md", "buffers of the larger of this and ([0-9]+) KiB", 10,
	  WK_TCP_SNDBUF / 1024 },
	{ "architecture.md", "`WK_IDLE_TIMEOUT_S` \\(([0-9]+) s\\)", 10,
	  (unsigned long long)WK_IDLE_TIMEOUT_S },
	{ "architecture.md", "`WK_FRAME_TIMEOUT_S` \\(([0-9]+) s\\)", 10,
	  (unsigned long long)WK_FRAME_TIMEOUT_S },
	{ "architecture.md", "`WK_HS_TIMEOUT_S` \\(([0-9]+) s\\)", 10,
	  (unsigned long long)WK_HS_TIMEOUT_S },
	{ "architecture.md", "`WK_MAX_HANDSHAKES` \\(([0-9]+)\\)", 10, WK_MAX_HANDSHAKES },
	{ "security.md", "grows once to ([0-9][0-9 ,]*) bytes", 10, WK_TCP_IN_MAX },
	/* Channel numbers: the default (RFC 5766's, as stunnerd) range and the strict one. */
	{ "security.md", "\\| Channel numbers \\| 0x4000–0x([0-9A-Fa-f]+) by default \\(RFC 5766", 16,
	  STUN_CHANNEL_LEGACY_MAX },
	{ "security.md", "0x4000–0x([0-9A-Fa-f]+) with `limits.channel_numbers: rfc8656`", 16,
	  STUN_CHANNEL_MAX },
	{ "relay.md", "first byte is 0x40–0x([0-9A-Fa-f]+) \\(0x40", 16,
	  STUN_CHANNEL_LEGACY_MAX >> 8 },
	/* Session records: the workers' queues, the webhook's batch and backlog. */
	{ "production.md", "shared segment \\(([0-9]+) records\\)", 10, SHM_REC_RING },
	{ "metrics.md", "queue of ([0-9]+) had no room", 10, SHM_REC_RING },
	{ "architecture.md", "then ([0-9]+) \\(`SHM_REC_RING`\\)", 10, SHM_REC_RING },
	{ "architecture.md", "a copy of ([0-9]+) bytes \\(`struct shm_rec_ev`\\)", 10,
	  sizeof(struct shm_rec_ev) },
	{ "production.md", "waiting records of ([0-9]+) bytes each", 10, sizeof(struct shm_rec_ev) },
	{ "production.md", "250,000 × ([0-9]+) B", 10, sizeof(struct shm_rec_ev) },
	{ "production.md", "up to ([0-9]+) per request", 10, WEBHOOK_BATCH },
	{ "production.md", "with up to ([0-9][0-9 ,]*[0-9]) records waiting", 10, WEBHOOK_BACKLOG },
	{ "configuration.md", "up to ([0-9][0-9 ,]*[0-9]) records wait,", 10, WEBHOOK_BACKLOG },
	{ "metrics.md", "webhook's backlog \\(([0-9][0-9 ,]*[0-9]) records", 10, WEBHOOK_BACKLOG },
};

/* The doc with whitespace runs folded to one space (NUL-terminated, caller frees). */
static char *doc_read(const char *name)
{
	char path[4096];
	FILE *f;
	char *out;
	size_t n = 0;
	int c, prev = 0;

	snprintf(path, sizeof(path), "%s/docs/%s", TOP_SRCDIR, name);
	f = fopen(path, "r");
	if (f == NULL)
		fail_msg("cannot open %s", path);
	fseek(f, 0, SEEK_END);
	out = malloc((size_t)ftell(f) + 1);
	assert_non_null(out);
	rewind(f);
	while ((c = fgetc(f)) != EOF) {
		if (c == '\n' || c == '\t')
			c = ' ';
		if (c == ' ' && prev == ' ')
			continue;
		out[n++] = (char)c;
		prev = c;
	}
	out[n] = '\0';
	fclose(f);
	return out;
}

/* The captured figure without its thousands separators. */
static unsigned long long figure(const char *s, size_t len, int base)
{
	char digits[64];
	size_t n = 0;

	for (size_t i = 0; i < len && n + 1 < sizeof(digits); i++)
		if (s[i] != ' ' && s[i] != ',')
			digits[n++] = s[i];
	digits[n] = '\0';
	return strtoull(digits, NULL, base);
}

/* Checks one rule; returns the number of its failures (each printed). */
static unsigned check_rule(const struct rule *r)
{
	char *text = doc_read(r->doc);
	regex_t re;
	regmatch_t m[2];
	const char *p = text;
	unsigned matches = 0, bad = 0;

	assert_int_equal(regcomp(&re, r->re, REG_EXTENDED), 0);
	while (regexec(&re, p, 2, m, 0) == 0) {
		unsigned long long got =
			figure(p + m[1].rm_so, (size_t)(m[1].rm_eo - m[1].rm_so), r->base);

		matches++;
		if (got != r->want) {
			bad++;
			print_error("docs/%s: /%s/ says %llu, the code %llu\n", r->doc, r->re, got,
				    r->want);
		}
		p += m[0].rm_eo;
	}
	if (matches == 0) {
		bad++;
		print_error("docs/%s: /%s/ not found (reworded? update the rule)\n", r->doc, r->re);
	}
	regfree(&re);
	free(text);
	return bad;
}

/* Every rule runs, so one run reports every drifted figure. */
static void test_doc_figures(void **state)
{
	unsigned failed = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
		failed += check_rule(&rules[i]);
	assert_int_equal(failed, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_doc_figures),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
