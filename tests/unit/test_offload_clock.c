/* Unit tests: the time namespace offset of the kernel fast path's expiries
 * (offload/offload_clock.h): parsing timens_offsets, reading the file (missing, malformed:
 * offset 0 and a warning), the conversion both ways with its saturation, and, where the
 * process may make a time namespace (root, Linux 5.6), the offset read inside one against
 * the clock there. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/mono.h"
#include "offload/offload_clock.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

#define NS INT64_C(1000000000)

static void parses(const char *text, int64_t want)
{
	int64_t off = 12345;

	assert_int_equal(tgo_clock_parse(text, &off), 0);
	assert_int_equal(off, want);
}

static void test_parse_kernel_format(void **state)
{
	(void)state;
	/* As the kernel shows them (names, right-aligned columns). */
	parses("monotonic       -1000         0\nboottime            0         0\n", -1000 * NS);
	parses("monotonic          5 250000000\nboottime            9         0\n",
	       5 * NS + 250000000);
	/* -1.5 s is -2 s and 0.5 s; the boottime line does not count; no final newline. */
	parses("boottime 7 0\nmonotonic -2 500000000", -1 * NS - 500000000);
	parses("1 3 0\n", 3 * NS); /* the clock's id, as a writer may give it */
	parses("\nmonotonic 0 0\n\n", 0);
	parses("monotonic 9223372035 999999999\n", INT64_C(9223372035999999999));
	parses("monotonic -9223372036 0\n", INT64_C(-9223372036000000000));
}

static void test_parse_refuses_malformed(void **state)
{
	static const char *const bad[] = {
		"",
		"boottime 0 0\n", /* no monotonic line */
		"monotonic x 0\n",
		"monotonic 1\n",
		"monotonic\n",
		"monotonic 1 1000000000\n", /* nsec out of range */
		"monotonic 1 -1\n",
		"monotonic 1 0 x\n",
		"monotonic 9223372036 0\n", /* beyond int64 ns */
		"monotonic -9223372037 0\n",
		"monotonic 99999999999999999999 0\n", /* beyond long long */
		"monotonic 1 0\nmonotonic 2 0\n",
		"monotonic 1 0\nboottime x 0\n",
		"monotonic                                                                     "
		"                                                                           1 0\n",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int64_t off = 12345;

		assert_int_equal(tgo_clock_parse(bad[i], &off), -EINVAL);
		assert_int_equal(off, 0);
	}
}

static void test_convert_both_ways_saturating(void **state)
{
	static const int64_t offs[] = { 0, 120 * NS, -120 * NS, 3600 * NS + 7, -1 };
	static const uint64_t ts[] = { 4000 * NS, UINT64_C(1) << 62 };

	(void)state;
	assert_int_equal(tgo_clock_to_kernel(1000 * NS, 120 * NS), 880 * NS);
	assert_int_equal(tgo_clock_to_kernel(1000 * NS, -120 * NS), 1120 * NS);
	assert_int_equal(tgo_clock_from_kernel(880 * NS, 120 * NS), 1000 * NS);
	assert_int_equal(tgo_clock_from_kernel(1120 * NS, -120 * NS), 1000 * NS);
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++)
		for (size_t j = 0; j < sizeof(ts) / sizeof(ts[0]); j++)
			assert_int_equal(tgo_clock_from_kernel(tgo_clock_to_kernel(ts[j], offs[i]),
							       offs[i]),
					 ts[j]);
	/* Saturation: before the kernel's 0 is long expired, beyond its end is never. */
	assert_int_equal(tgo_clock_to_kernel(5 * NS, 120 * NS), 0);
	assert_int_equal(tgo_clock_to_kernel(UINT64_MAX - 1, -120 * NS), UINT64_MAX);
	assert_int_equal(tgo_clock_from_kernel(5, -6), 0);
	assert_int_equal(tgo_clock_from_kernel(UINT64_MAX - 1, 5), UINT64_MAX);
	assert_int_equal(tgo_clock_to_kernel(1, INT64_MIN), (UINT64_C(1) << 63) + 1);
	assert_int_equal(tgo_clock_from_kernel(UINT64_MAX, INT64_MIN), UINT64_MAX >> 1);
	assert_int_equal(tgo_clock_to_kernel(UINT64_MAX, INT64_MAX), (UINT64_C(1) << 63));
}

/* Writes text to path. */
static void file_with(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* tgo_clock_read(path) with stderr captured into log (NUL-terminated). */
static int64_t read_logged(const char *path, char *log, size_t len)
{
	char tmpl[] = "/tmp/tg-clock-log-XXXXXX";
	int fd = mkstemp(tmpl), saved = dup(STDERR_FILENO);
	int64_t off;
	ssize_t n;

	assert_true(fd >= 0 && saved >= 0);
	unlink(tmpl);
	fflush(stderr);
	dup2(fd, STDERR_FILENO);
	off = tgo_clock_read(path);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	n = pread(fd, log, len - 1, 0);
	log[n > 0 ? n : 0] = '\0';
	close(fd);
	return off;
}

static void test_read_missing_or_malformed_is_zero(void **state)
{
	char dir[] = "/tmp/tg-clock-XXXXXX", log[1024], absent[64], ok[64], bad[64];

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(absent, sizeof(absent), "%s/absent", dir);
	snprintf(ok, sizeof(ok), "%s/ok", dir);
	snprintf(bad, sizeof(bad), "%s/bad", dir);
	/* A kernel without time namespaces has no file: one clock, nothing said. */
	assert_int_equal(read_logged(absent, log, sizeof(log)), 0);
	assert_string_equal(log, "");
	file_with(ok, "monotonic 42 7\nboottime 0 0\n");
	assert_int_equal(read_logged(ok, log, sizeof(log)), 42 * NS + 7);
	assert_string_equal(log, "");
	/* Malformed: offset 0 and a warning naming the file. */
	file_with(bad, "monotonic forty-two 0\n");
	assert_int_equal(read_logged(bad, log, sizeof(log)), 0);
	assert_non_null(strstr(log, "offload"));
	assert_non_null(strstr(log, bad));
	unlink(ok);
	unlink(bad);
	rmdir(dir);
}

static void test_offset_read_once_and_kept(void **state)
{
	(void)state;
	assert_int_equal(tgo_clock_offset(), tgo_clock_read(TGO_CLOCK_TIMENS));
	assert_int_equal(tgo_clock_offset(), tgo_clock_offset());
}

/* In a child: a time namespace whose monotonic clock runs 77 s ahead of the kernel's, and a
 * grandchild inside it that sends its clock and the offset it reads. 0, or -1 when the
 * namespace cannot be made (not root, no CONFIG_TIME_NS). */
static int timens_child(int wfd)
{
	int fd, st;
	pid_t pid;

	if (unshare(CLONE_NEWTIME) < 0)
		return -1;
	fd = open(TGO_CLOCK_TIMENS, O_WRONLY);
	if (fd < 0 || write(fd, "monotonic 77 0", 14) != 14)
		return -1;
	close(fd);
	pid = fork();
	if (pid == 0) {
		uint64_t v[2] = { mono_ns(), (uint64_t)tgo_clock_read(TGO_CLOCK_TIMENS) };

		_exit(write(wfd, v, sizeof(v)) == (ssize_t)sizeof(v) ? 0 : 1);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return 1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

static void test_offset_inside_a_time_namespace(void **state)
{
	int fds[2], st;
	uint64_t v[2], before, after;
	pid_t pid;

	(void)state;
	assert_int_equal(pipe(fds), 0);
	/* The kernel's clock (bpf_ktime_get_ns) around the child's reading: ours less our own
	 * offset (make check may run in a time namespace itself). */
	before = tgo_clock_to_kernel(mono_ns(), tgo_clock_read(TGO_CLOCK_TIMENS));
	pid = fork();
	if (pid == 0)
		_exit(timens_child(fds[1]) == 0 ? 0 : 77);
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	after = tgo_clock_to_kernel(mono_ns(), tgo_clock_read(TGO_CLOCK_TIMENS));
	close(fds[1]);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
		close(fds[0]);
		skip();	/* not root, or no time namespaces here */
	}
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(read(fds[0], v, sizeof(v)), sizeof(v));
	close(fds[0]);
	assert_int_equal((int64_t)v[1], 77 * NS);
	assert_in_range(tgo_clock_to_kernel(v[0], (int64_t)v[1]), before, after);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_kernel_format),
		cmocka_unit_test(test_parse_refuses_malformed),
		cmocka_unit_test(test_convert_both_ways_saturating),
		cmocka_unit_test(test_read_missing_or_malformed_is_zero),
		cmocka_unit_test(test_offset_read_once_and_kept),
		cmocka_unit_test(test_offset_inside_a_time_namespace),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
