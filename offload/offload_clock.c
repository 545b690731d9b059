/* Offload: the time namespace offset between the daemon's CLOCK_MONOTONIC and the kernel's
 * (bpf_ktime_get_ns), and the conversion of expiries between the two. */
#include "config.h"

#include "offload/offload_clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

#define TGO_NS INT64_C(1000000000)

/* One line "<clock> <sec> <nsec>" (NUL-terminated, changed in place): 1 and *off for the
 * monotonic clock (its name or its id, 1), 0 for another clock, -EINVAL when malformed. */
static int tgo_clock_line(char *line, int64_t *off)
{
	char *name = line + strspn(line, " \t"), *p, *q;
	long long sec, nsec;

	p = name + strcspn(name, " \t");
	if (p == name || *p == '\0')
		return -EINVAL;
	*p++ = '\0';
	errno = 0;
	sec = strtoll(p, &q, 10);
	if (errno != 0 || q == p)
		return -EINVAL;
	p = q;
	nsec = strtoll(p, &q, 10);
	if (errno != 0 || q == p || nsec < 0 || nsec >= TGO_NS)
		return -EINVAL;
	if (q[strspn(q, " \t")] != '\0')
		return -EINVAL;
	if (strcmp(name, "monotonic") != 0 && strcmp(name, "1") != 0)
		return 0;
	/* sec * 1e9 + nsec within int64 (nsec < 1e9 pulls a negative sec towards 0). */
	if (sec > INT64_MAX / TGO_NS - 1 || sec < INT64_MIN / TGO_NS)
		return -EINVAL;
	*off = sec * TGO_NS + nsec;
	return 1;
}

int tgo_clock_parse(const char *text, int64_t *off_ns)
{
	char line[128];
	int64_t mono = 0;
	int found = 0;

	*off_ns = 0;
	while (*text != '\0') {
		size_t n = strcspn(text, "\n");
		int rc;

		if (n >= sizeof(line))
			return -EINVAL;
		memcpy(line, text, n);
		line[n] = '\0';
		text += n + (text[n] == '\n');
		if (line[strspn(line, " \t")] == '\0')
			continue;	/* a blank line */
		rc = tgo_clock_line(line, &mono);
		if (rc < 0 || found + rc > 1)
			return -EINVAL;
		found += rc;
	}
	if (!found)
		return -EINVAL;
	*off_ns = mono;
	return 0;
}

/* The file's text (at most len - 1 bytes): 0, -errno, or -EFBIG when longer. */
static int tgo_clock_slurp(const char *path, char *buf, size_t len)
{
	size_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), err = 0;

	if (fd < 0)
		return -errno;
	while (n < len - 1) {
		ssize_t r = read(fd, buf + n, len - 1 - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			err = -errno;
			break;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (err == 0 && n == len - 1)
		err = -EFBIG;
	close(fd);
	buf[n] = '\0';
	return err;
}

int64_t tgo_clock_read(const char *path)
{
	char text[512];
	int64_t off = 0;
	int rc = tgo_clock_slurp(path, text, sizeof(text));

	if (rc == -ENOENT)
		return 0;	/* no time namespaces in this kernel: one clock */
	if (rc == 0)
		rc = tgo_clock_parse(text, &off);
	if (rc < 0) {
		log_warn("offload", "%s: %s: offset 0 (the kernel's entries' clock taken for ours)",
			 path, rc == -EINVAL ? "no monotonic offset in it" : strerror(-rc));
		return 0;
	}
	return off;
}

int64_t tgo_clock_offset(void)
{
	/* A constant of the process, read once (every turngate process is single-threaded). */
	static int64_t off;
	static bool known;

	if (!known) {
		off = tgo_clock_read(TGO_CLOCK_TIMENS);
		known = true;
	}
	return off;
}

static uint64_t tgo_clock_add(uint64_t t, uint64_t d)
{
	return t > UINT64_MAX - d ? UINT64_MAX : t + d;
}

static uint64_t tgo_clock_sub(uint64_t t, uint64_t d)
{
	return t > d ? t - d : 0;
}

/* |off| as unsigned (INT64_MIN included). */
static uint64_t tgo_clock_abs(int64_t off)
{
	return off < 0 ? (uint64_t)0 - (uint64_t)off : (uint64_t)off;
}

uint64_t tgo_clock_to_kernel(uint64_t t, int64_t off)
{
	return off < 0 ? tgo_clock_add(t, tgo_clock_abs(off)) : tgo_clock_sub(t, (uint64_t)off);
}

uint64_t tgo_clock_from_kernel(uint64_t k, int64_t off)
{
	return off < 0 ? tgo_clock_sub(k, tgo_clock_abs(off)) : tgo_clock_add(k, (uint64_t)off);
}
