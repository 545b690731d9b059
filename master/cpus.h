/* The number of CPUs this process may use: its affinity mask and its cgroup's CPU quota
 * (issue #37), for the default worker count. */
#ifndef TG_MASTER_CPUS_H
#define TG_MASTER_CPUS_H

#include <stddef.h>

/* Where the cgroup files live: the defaults are "/proc/self/cgroup" and "/sys/fs/cgroup";
 * the unit tests point them at a fake tree. */
struct cpus_roots {
	const char *proc_cgroup;
	const char *cgroup_fs;
};

/* The CPU quota of the process's cgroup in CPUs (quota / period), the smallest along the
 * path from its cgroup up to the root: cgroup v2's cpu.max ("max" = none), else v1's
 * cpu.cfs_quota_us / cpu.cfs_period_us (-1 = none). roots NULL: the real ones.
 * Returns 2 (cgroup v2) or 1 (v1) with *cpus set, -ENOENT when no level sets a quota (or
 * nothing is readable). */
int cpus_cgroup_quota(const struct cpus_roots *roots, double *cpus);

/* The default worker count: min(CPUs in sched_getaffinity, ceil(cgroup quota)), at least 1,
 * at most max. why (len bytes) gets where it came from, e.g. "auto: affinity 1 of 2 CPUs"
 * or "auto: cgroup cpu.max 1.5 -> 2". Any process; reads files. */
unsigned cpus_auto_workers(const struct cpus_roots *roots, unsigned max, char *why, size_t len);

#endif
