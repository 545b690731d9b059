/* The CPUs the process may use (affinity, cgroup v2 cpu.max, cgroup v1 CFS quota), for
 * the default worker count: one worker per host CPU in a container limited to two CPUs
 * only adds processes that the quota throttles. */
#include "config.h"

#include "master/cpus.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CPUS_PROC_CGROUP "/proc/self/cgroup"
#define CPUS_CGROUP_FS "/sys/fs/cgroup"

typedef int (*cpus_quota_fn)(const char *dir, double *cpus);

/* The first line of path into buf; 0 or -errno. */
static int read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	int rc = 0;

	if (f == NULL)
		return -errno;
	if (fgets(buf, (int)len, f) == NULL)
		rc = -EIO;
	fclose(f);
	return rc;
}

/* cgroup v2: "<quota> <period>" or "max <period>". */
static int quota_v2(const char *dir, double *cpus)
{
	char path[PATH_MAX], buf[128], q[32], *end;
	long long quota, period;

	if (snprintf(path, sizeof(path), "%s/cpu.max", dir) >= (int)sizeof(path) ||
	    read_line(path, buf, sizeof(buf)) < 0 ||
	    sscanf(buf, "%31s %lld", q, &period) != 2 || strcmp(q, "max") == 0 || period <= 0)
		return -ENOENT;
	quota = strtoll(q, &end, 10);
	if (*end != '\0' || quota <= 0)
		return -ENOENT;
	*cpus = (double)quota / (double)period;
	return 0;
}

/* cgroup v1: cpu.cfs_quota_us (-1: none) over cpu.cfs_period_us. */
static int quota_v1(const char *dir, double *cpus)
{
	char path[PATH_MAX], buf[64];
	long long quota, period;

	if (snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir) >= (int)sizeof(path) ||
	    read_line(path, buf, sizeof(buf)) < 0 || sscanf(buf, "%lld", &quota) != 1 ||
	    quota <= 0)
		return -ENOENT;
	if (snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir) >= (int)sizeof(path) ||
	    read_line(path, buf, sizeof(buf)) < 0 || sscanf(buf, "%lld", &period) != 1 ||
	    period <= 0)
		return -ENOENT;
	*cpus = (double)quota / (double)period;
	return 0;
}

/* The smallest quota of base + cgpath and of each parent up to base itself: a parent's
 * limit binds its children too. */
static int walk_up(const char *base, const char *cgpath, cpus_quota_fn fn, double *best)
{
	char path[PATH_MAX], dir[PATH_MAX * 2];
	bool found = false;

	if (cgpath[0] != '/' || snprintf(path, sizeof(path), "%s", cgpath) >= (int)sizeof(path))
		return -ENOENT;
	for (;;) {
		double c;
		size_t n = strlen(path);
		char *slash;

		while (n > 1 && path[n - 1] == '/')	/* "/a/" -> "/a" */
			path[--n] = '\0';
		snprintf(dir, sizeof(dir), "%s%s", base, strcmp(path, "/") == 0 ? "" : path);
		if (fn(dir, &c) == 0 && (!found || c < *best)) {
			*best = c;
			found = true;
		}
		slash = strrchr(path, '/');
		if (slash == NULL || strcmp(path, "/") == 0)
			break;
		slash[slash == path ? 1 : 0] = '\0';
	}
	return found ? 0 : -ENOENT;
}

/* One line of /proc/self/cgroup ("id:controllers:path"): its quota, if it has one. */
static int line_quota(const char *fs, char *line, double *cpus)
{
	char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
	char base[PATH_MAX], list[256], *ctrls, *path, *save = NULL;
	bool has_cpu = false;

	if (c2 == NULL)
		return -ENOENT;
	*c2 = '\0';
	*c1 = '\0';
	ctrls = c1 + 1;
	path = c2 + 1;
	path[strcspn(path, "\n")] = '\0';
	if (strcmp(line, "0") == 0 && *ctrls == '\0')	/* cgroup v2 */
		return walk_up(fs, path, quota_v2, cpus) == 0 ? 2 : -ENOENT;
	/* cgroup v1: the hierarchy with the cpu controller, mounted as its list or as "cpu". */
	snprintf(list, sizeof(list), "%s", ctrls);
	for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
		has_cpu |= strcmp(t, "cpu") == 0;
	if (!has_cpu)
		return -ENOENT;
	snprintf(base, sizeof(base), "%s/%s", fs, ctrls);
	if (walk_up(base, path, quota_v1, cpus) == 0)
		return 1;
	snprintf(base, sizeof(base), "%s/cpu", fs);
	return walk_up(base, path, quota_v1, cpus) == 0 ? 1 : -ENOENT;
}

int cpus_cgroup_quota(const struct cpus_roots *roots, double *cpus)
{
	const char *pc = roots && roots->proc_cgroup ? roots->proc_cgroup : CPUS_PROC_CGROUP;
	const char *fs = roots && roots->cgroup_fs ? roots->cgroup_fs : CPUS_CGROUP_FS;
	char line[PATH_MAX + 300];
	int found = -ENOENT, v;
	FILE *f = fopen(pc, "re");

	if (f == NULL)
		return -ENOENT;
	while (fgets(line, sizeof(line), f) != NULL) {
		double c;

		v = line_quota(fs, line, &c);
		if (v > 0 && (found < 0 || c < *cpus)) {
			*cpus = c;
			found = v;
		}
	}
	fclose(f);
	return found;
}

unsigned cpus_auto_workers(const struct cpus_roots *roots, unsigned max, char *why, size_t len)
{
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned aff, n;
	int v;
	cpu_set_t set;
	double quota;

	if (online < 1)
		online = 1;
	CPU_ZERO(&set);
	aff = sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0
		      ? (unsigned)CPU_COUNT(&set)
		      : (unsigned)online;
	n = aff;
	v = cpus_cgroup_quota(roots, &quota);
	if (v > 0) {
		unsigned q = quota >= (double)UINT_MAX ? UINT_MAX : (unsigned)quota;

		q += quota > (double)q || q == 0;	/* ceil, at least 1 */
		if (q < n) {
			n = q;
			snprintf(why, len, "auto: cgroup %s %g -> %u",
				 v == 2 ? "cpu.max" : "cpu.cfs_quota_us", quota, n);
		}
	}
	if (n == aff && aff < (unsigned)online)
		snprintf(why, len, "auto: affinity %u of %ld CPUs", aff, online);
	else if (n == aff)
		snprintf(why, len, "auto: %u CPUs", aff);
	if (n > max) {
		size_t used = strlen(why);

		n = max;
		snprintf(why + used, len - used, ", capped at %u", max);
	}
	return n;
}
