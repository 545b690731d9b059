/* turngatectl: one request/reply exchange with the daemon's admin socket. */
#include "config.h"

#include "ctl/ctl.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/grow.h"

static int connect_unix(const char *path, const char **why)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sun.sun_path)) {
		*why = "socket path too long";
		return -ENAMETOOLONG;
	}
	memcpy(sun.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		*why = "socket";
		return -errno;
	}
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		int rc = -errno;

		*why = "cannot connect to the admin socket";
		close(fd);
		return rc;
	}
	return fd;
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads until the first newline, bounded in size and in time. */
static int read_line(int fd, char **out, size_t *out_len)
{
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap);
	time_t deadline = time(NULL) + CTL_TIMEOUT_S;

	if (buf == NULL)
		return -ENOMEM;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;
		int left = (int)(deadline - time(NULL));

		if (left <= 0 || poll(&p, 1, left * 1000) == 0) {
			free(buf);
			return -ETIMEDOUT;
		}
		if (len == cap && cap >= CTL_REPLY_MAX) {
			free(buf);
			return -EMSGSIZE;
		}
		if (GROW_ARRAY(&buf, &cap, len + 1, 65536) < 0) {
			free(buf);
			return -ENOMEM;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			free(buf);
			return n == 0 ? -ECONNRESET : -errno;
		}
		if (memchr(buf + len, '\n', (size_t)n) != NULL) {
			len += (size_t)n;
			*out = buf;
			*out_len = (size_t)((char *)memchr(buf, '\n', len) - buf);
			return 0;
		}
		len += (size_t)n;
	}
}

int ctl_request(const char *path, json_t *req, json_t **reply, const char **why)
{
	char *line = NULL, *in = NULL;
	size_t in_len = 0;
	json_error_t jerr;
	int fd, rc;

	*reply = NULL;
	fd = connect_unix(path, why);
	if (fd < 0)
		return fd;
	line = json_dumps(req, JSON_COMPACT);
	if (line == NULL) {
		rc = -ENOMEM;
		*why = "out of memory";
		goto out;
	}
	rc = write_all(fd, line, strlen(line));
	if (rc == 0)
		rc = write_all(fd, "\n", 1);
	if (rc < 0) {
		*why = "cannot send the request";
		goto out;
	}
	rc = read_line(fd, &in, &in_len);
	if (rc < 0) {
		*why = rc == -ETIMEDOUT ? "no reply from the daemon" : "cannot read the reply";
		goto out;
	}
	*reply = json_loadb(in, in_len, 0, &jerr);
	if (*reply == NULL || !json_is_object(*reply)) {
		json_decref(*reply);
		*reply = NULL;
		*why = "the daemon's reply is not a JSON object";
		rc = -EBADMSG;
	}
out:
	free(line);
	free(in);
	close(fd);
	return rc;
}

int ctl_call(const char *sock, json_t *req, json_t **reply)
{
	const char *why = "";
	int rc = ctl_request(sock, req, reply, &why);

	json_decref(req);
	if (rc < 0) {
		fprintf(stderr, "turngatectl: %s %s: %s\n", why, sock, strerror(-rc));
		return CTL_EXIT_CONNECT;
	}
	return json_is_true(json_object_get(*reply, "ok")) ? CTL_EXIT_OK : CTL_EXIT_ERROR;
}
