/* Prometheus metrics of turngate: text exposition format 0.0.4, rendered from the shared
 * memory counters (summed over worker slots on each scrape), the current snapshot (for
 * listener and cluster names) and a few master-side values.
 *
 * Names and labels follow STUNner (stunner_*) so existing dashboards work; turngate's own
 * families are turngate_*; process_* describe the master process (the one that serves
 * the scrape, the Prometheus convention) and turngate_worker_* the workers, per slot.
 * Every family is listed, with its meaning, in docs/metrics.md.
 *
 * Process model: http_metrics_render() is pure (reads shm, never writes); the master calls
 * it from its metrics handler. http_proc_read() reads /proc and may be called by any
 * process for any pid it may inspect.
 */
#ifndef TG_HTTP_HTTP_METRICS_H
#define TG_HTTP_HTTP_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "http/http_buf.h"

struct shm;
struct snap;

/* Resource usage of one process, from /proc. */
struct http_proc_stats {
	bool valid;                 /* false: not running / unreadable; no samples rendered */
	double cpu_seconds;         /* user + system */
	uint64_t resident_bytes;
	uint64_t virtual_bytes;
	double start_time;          /* unix seconds */
	uint64_t open_fds;
	uint64_t max_fds;           /* soft RLIMIT_NOFILE; 0 = unknown/unlimited */
};

/* Values only the master knows. */
struct http_master_stats {
	uint64_t generation;        /* config generation of the published snapshot */
	uint64_t reloads_ok, reloads_failed;
	uint64_t reloads_refused;   /* valid configs the reload guard refused */
	bool last_reload_ok;        /* the latest reload (or the start) succeeded */
	uint64_t worker_restarts;   /* respawns of crashed/hung workers since start */
	bool draining;
	struct http_proc_stats master;
	/* Per worker slot, indexed by slot (n_workers entries, may be 0/NULL). */
	const struct http_proc_stats *workers;
	unsigned n_workers;
	/* The kernel fast path (offload/offload.h): what it relayed, added to the workers'
	 * counters (NULL: off), its datagrams per direction (0 client -> peer, 1 peer ->
	 * client) and its entries. */
	const struct shm_counters *offload_add;
	uint64_t offload_pkts[2], offload_entries;
	/* TLS and DTLS listeners' certificates: the listener's name and its earliest notAfter
	 * (Unix s), n_certs entries, and the time to count from. */
	const char *const *cert_listeners;
	const int64_t *cert_not_after;
	size_t n_certs;
	int64_t now;
	/* Old workers lingering after a live upgrade with their TLS and DTLS calls
	 * (master/linger.c), the calls they hold, and the DTLS ones of those. */
	unsigned linger_workers, linger_sessions, linger_dtls;
};

/* Fills *out for pid (0 = the calling process) from /proc/PID/{stat,fd,limits} and
 * /proc/stat (boot time). Returns 0, or -errno (out->valid false) when pid is gone. */
int http_proc_read(pid_t pid, struct http_proc_stats *out);

/* Master: http_proc_read() for every worker slot of shm with a live pid (slot state
 * STARTING/RUNNING/STOPPING) into workers[0..cap) (invalid entries for the others);
 * *n gets min(cap, number of slots). Returns 0 or -EINVAL. */
int http_proc_read_workers(const struct shm *shm, struct http_proc_stats *workers, unsigned cap,
			   unsigned *n);

/* Renders every metric into out. snap may be NULL (then no per-listener/per-cluster
 * series: names are unknown). Listener index i of the snapshot is shm listener counter
 * index i, likewise clusters. Returns 0, -ENOMEM or -EMSGSIZE (buffer cap). */
int http_metrics_render(const struct shm *shm, const struct snap *snap,
			const struct http_master_stats *ms, struct http_buf *out);

/* Appends s to out escaped as a Prometheus label value (\\, \", \n). */
void http_metrics_escape(struct http_buf *out, const char *s);

#endif
