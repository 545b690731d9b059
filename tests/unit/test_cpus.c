/* Unit tests of master/cpus.c: the cgroup CPU quota read from a fake /proc/self/cgroup and
 * cgroup tree (v2 cpu.max walked up to the root, v1 CFS quota, none, malformed files), and
 * the worker count and its reason that status shows. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "master/cpus.h"

struct fake {
	char root[64];
	char proc[PATH_MAX];
	char fs[PATH_MAX];
	struct cpus_roots roots;
};

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* dir (relative to the fake cgroup fs, created with its parents) gets file = text. */
static void put_in(struct fake *f, const char *dir, const char *file, const char *text)
{
	char path[PATH_MAX * 2], cmd[PATH_MAX * 3];

	snprintf(cmd, sizeof(cmd), "mkdir -p '%s/%s'", f->fs, dir);
	assert_int_equal(system(cmd), 0);
	snprintf(path, sizeof(path), "%s/%s/%s", f->fs, dir, file);
	put(path, text);
}

static int setup(void **state)
{
	struct fake *f = calloc(1, sizeof(*f));

	snprintf(f->root, sizeof(f->root), "/tmp/tg-cpus-XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->proc, sizeof(f->proc), "%s/cgroup", f->root);
	snprintf(f->fs, sizeof(f->fs), "%s/fs", f->root);
	assert_int_equal(mkdir(f->fs, 0700), 0);
	f->roots.proc_cgroup = f->proc;
	f->roots.cgroup_fs = f->fs;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fake *f = *state;
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

/* cgroup v2: the container's own cpu.max says max, its pod's 1.5 CPUs: the pod binds. */
static void test_v2_walks_up(void **state)
{
	struct fake *f = *state;
	double q = 0;

	put(f->proc, "0::/kubepods/pod1/ctr\n");
	put_in(f, "kubepods/pod1/ctr", "cpu.max", "max 100000\n");
	put_in(f, "kubepods/pod1", "cpu.max", "150000 100000\n");
	put_in(f, "kubepods", "cpu.max", "400000 100000\n");
	assert_int_equal(cpus_cgroup_quota(&f->roots, &q), 2);
	assert_true(q > 1.49 && q < 1.51);
	/* The cgroup's own limit when it is the smallest. */
	put_in(f, "kubepods/pod1/ctr", "cpu.max", "50000 100000\n");
	assert_int_equal(cpus_cgroup_quota(&f->roots, &q), 2);
	assert_true(q > 0.49 && q < 0.51);
}

/* A cgroup namespace: the process sees itself at "/", and the namespace root's cpu.max
 * is the container's. */
static void test_v2_namespace_root(void **state)
{
	struct fake *f = *state;
	double q = 0;

	put(f->proc, "0::/\n");
	put_in(f, ".", "cpu.max", "200000 100000\n");
	assert_int_equal(cpus_cgroup_quota(&f->roots, &q), 2);
	assert_true(q > 1.99 && q < 2.01);
}

/* No quota anywhere, no files, malformed ones: -ENOENT. */
static void test_none(void **state)
{
	struct fake *f = *state;
	double q = 0;

	assert_int_equal(cpus_cgroup_quota(&f->roots, &q), -ENOENT);	/* no proc file */
	put(f->proc, "0::/a\n");
	assert_int_equal(cpus_cgroup_quota(&f->roots, &q), -ENOENT);	/* no cpu.max */
	put_in(f, "a", "cpu.max", "max 100000\n");
	assert_int_equal(cpus_cgroup_quota(&f->roots, &q), -ENOENT);
	put_in(f, "a", "cpu.max", "garbage\n");
	assert_int_equal(cpus_cgroup_quota(&f->roots, &q), -ENOENT);
	put_in(f, "a", "cpu.max", "12x 100000\n");
	assert_int_equal(cpus_cgroup_quota(&f->roots, &q), -ENOENT);
	put_in(f, "a", "cpu.max", "100000 0\n");
	assert_int_equal(cpus_cgroup_quota(&f->roots, &q), -ENOENT);
	put(f->proc, "garbage without colons\n\n0:\n");
	assert_int_equal(cpus_cgroup_quota(&f->roots, &q), -ENOENT);
}

/* cgroup v1: the cpu controller's hierarchy (mounted as "cpu,cpuacct" or "cpu"), quota -1
 * is none; other controllers' lines are ignored. */
static void test_v1(void **state)
{
	struct fake *f = *state;
	double q = 0;

	put(f->proc, "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n");
	put_in(f, "cpu,cpuacct/docker/abc", "cpu.cfs_quota_us", "-1\n");
	put_in(f, "cpu,cpuacct/docker/abc", "cpu.cfs_period_us", "100000\n");
	assert_int_equal(cpus_cgroup_quota(&f->roots, &q), -ENOENT);
	put_in(f, "cpu,cpuacct/docker/abc", "cpu.cfs_quota_us", "250000\n");
	assert_int_equal(cpus_cgroup_quota(&f->roots, &q), 1);
	assert_true(q > 2.49 && q < 2.51);
	put(f->proc, "1:cpu:/t\n");
	put_in(f, "cpu/t", "cpu.cfs_quota_us", "100000\n");
	put_in(f, "cpu/t", "cpu.cfs_period_us", "100000\n");
	assert_int_equal(cpus_cgroup_quota(&f->roots, &q), 1);
	assert_true(q > 0.99 && q < 1.01);
}

/* The worker count: ceil of the quota when below the affinity, with the reason; the
 * affinity otherwise; never above max, never 0. */
static void test_auto_workers(void **state)
{
	struct fake *f = *state;
	cpu_set_t set;
	char why[96];
	unsigned aff, n;

	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	aff = (unsigned)CPU_COUNT(&set);
	put(f->proc, "0::/c\n");
	n = cpus_auto_workers(&f->roots, 64, why, sizeof(why));
	assert_int_equal(n, aff);
	assert_true(strncmp(why, "auto: ", 6) == 0);
	put_in(f, "c", "cpu.max", "1000 100000\n");	/* 0.01 CPU: still one worker */
	n = cpus_auto_workers(&f->roots, 64, why, sizeof(why));
	assert_int_equal(n, 1);
	if (aff > 1)
		assert_string_equal(why, "auto: cgroup cpu.max 0.01 -> 1");
	put_in(f, "c", "cpu.max", "max 100000\n");
	n = cpus_auto_workers(&f->roots, 1, why, sizeof(why));
	assert_int_equal(n, 1);
	if (aff > 1)
		assert_non_null(strstr(why, ", capped at 1"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_v2_walks_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_v2_namespace_root, setup, teardown),
		cmocka_unit_test_setup_teardown(test_none, setup, teardown),
		cmocka_unit_test_setup_teardown(test_v1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_auto_workers, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
