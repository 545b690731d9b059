/* Master: what a start reserves for the allocation table (its records, the worker's
 * descriptor limit, the kernel maps), and the one log line that says so and why. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/resource.h>

#include "common/log.h"
#include "master/master.h"
#include "shm/shm.h"
#include "shm/shm_ppool.h"

_Static_assert(CONF_RELAY_WAYS == SHM_PPOOL_WAYS,
	       "the automatic capacity counts the ways the port pool books");

/* Descriptors beside the relay sockets: listeners, TCP clients, the admin and HTTP
 * sockets, TCP relaying's peer connections (a worker's budget of those takes at most half
 * of what the relay sockets leave: wk_tcpr_init, worker/tcprelay.c). */
#define SIZING_FD_SPARE 1024u

static rlim_t sizing_nr_open(void)
{
	FILE *f = fopen("/proc/sys/fs/nr_open", "re");
	unsigned long v = 1048576;

	if (f != NULL) {
		if (fscanf(f, "%lu", &v) != 1)
			v = 1048576;
		fclose(f);
	}
	return (rlim_t)v;
}

/* Every process may open one relay socket per record, two for a dual-stack allocation
 * (the steering may put any share of the table on one worker; a respawned worker adopts
 * its predecessor's). The soft limit goes up to that, the hard one too where the process
 * may raise it (CAP_SYS_RESOURCE); workers inherit both. */
static void sizing_descriptors(uint32_t cap, rlim_t *got, rlim_t *want, rlim_t *hard)
{
	struct rlimit rl;

	*want = (rlim_t)cap * 2 + SIZING_FD_SPARE;
	if (*want > sizing_nr_open())
		*want = sizing_nr_open();
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		*got = *hard = 0;
		return;
	}
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= *want) {
		*got = rl.rlim_cur;
		*hard = rl.rlim_max;
		return;
	}
	if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= *want) {
		rl.rlim_cur = *want;
	} else {
		struct rlimit up = { .rlim_cur = *want, .rlim_max = *want };

		if (setrlimit(RLIMIT_NOFILE, &up) == 0) {
			*got = *hard = *want;
			return;
		}
		rl.rlim_cur = rl.rlim_max;
	}
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		getrlimit(RLIMIT_NOFILE, &rl);
	*got = rl.rlim_cur;
	*hard = rl.rlim_max;
}

void master_sizing_descriptors(struct master *m)
{
	sizing_descriptors(m->cfg->limits.max_allocations, &m->fd_limit, &m->fd_wanted,
			   &m->fd_hard);
}

void master_sizing_log(const struct master *m)
{
	const struct conf_limits *l = &m->cfg->limits;
	uint32_t cap = m->shm != NULL ? shm_alloc_capacity(m->shm) : l->max_allocations;
	double mib = m->shm != NULL ? (double)shm_size(m->shm) / (1024.0 * 1024.0) : 0.0;
	char why[160];

	if (l->max_allocations_auto)
		snprintf(why, sizeof(why),
			 "auto: %" PRIu32 " relay ports on %" PRIu32 " relay address%s, at least "
			 "the %u of admin.relay_port_min..max, at most %u",
			 l->relay_ports, l->relay_addrs, l->relay_addrs == 1 ? "" : "es",
			 (unsigned)m->cfg->admin.relay_port_max - m->cfg->admin.relay_port_min + 1,
			 CONF_AUTO_ALLOCATIONS_MAX);
	else
		snprintf(why, sizeof(why), "limits.max_allocations; the relay port space is %" PRIu32
			 " ports on %" PRIu32 " relay address%s",
			 l->relay_ports, l->relay_addrs, l->relay_addrs == 1 ? "" : "es");
	log_info("master", "allocation table: %" PRIu32 " allocations (%s), shared segment "
			   "%.1f MiB; offload maps %" PRIu64 " entries each when on",
		 cap, why, mib, (uint64_t)cap * 4);
	if (m->fd_limit < m->fd_wanted)
		log_warn("master", "descriptors: %llu per process, of the %llu a full table may "
				   "need (two per allocation and %u spare; hard limit %llu, not "
				   "raised: raise LimitNOFILE): a worker at its limit answers 508",
			 (unsigned long long)m->fd_limit, (unsigned long long)m->fd_wanted,
			 SIZING_FD_SPARE, (unsigned long long)m->fd_hard);
	else
		log_info("master", "descriptors: %llu per process (a full table needs %llu: two "
				   "per allocation and %u spare)",
			 (unsigned long long)m->fd_limit, (unsigned long long)m->fd_wanted,
			 SIZING_FD_SPARE);
}

json_t *master_sizing_json(const struct master *m)
{
	const struct conf_limits *l = &m->cfg->limits;

	return json_pack("{s:I, s:s, s:I, s:I, s:I, s:I, s:I}", "capacity",
			 (json_int_t)(m->shm != NULL ? shm_alloc_capacity(m->shm)
						     : l->max_allocations),
			 "source", l->max_allocations_auto ? "auto" : "configured", "relay_ports",
			 (json_int_t)l->relay_ports, "relay_addresses", (json_int_t)l->relay_addrs,
			 "segment_bytes", (json_int_t)(m->shm != NULL ? shm_size(m->shm) : 0),
			 "descriptors", (json_int_t)m->fd_limit, "descriptors_wanted",
			 (json_int_t)m->fd_wanted);
}
