/* Integration-test helper: a bounded request/reply exchange on turngated's admin socket. */
#include "config.h"

#include "tests/integration/harness_admin.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define HADMIN_TIMEOUT_MS 10000
#define HADMIN_MAX (8u << 20)

static int hadmin_connect(const char *sock)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(sock) >= sizeof(sun.sun_path))
		return -1;
	memcpy(sun.sun_path, sock, strlen(sock) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

json_t *hadmin_call(const char *sock, const char *request)
{
	size_t cap = 65536, len = 0;
	char *buf = NULL;
	json_t *reply = NULL;
	int fd = hadmin_connect(sock);

	if (fd < 0)
		return NULL;
	if (send(fd, request, strlen(request), MSG_NOSIGNAL) != (ssize_t)strlen(request) ||
	    send(fd, "\n", 1, MSG_NOSIGNAL) != 1)
		goto out;
	buf = malloc(cap);
	while (buf != NULL && len < HADMIN_MAX) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, HADMIN_TIMEOUT_MS) <= 0)
			goto out;
		if (len == cap) {
			char *g = realloc(buf, cap * 2);

			if (g == NULL)
				goto out;
			buf = g;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n <= 0)
			goto out;
		len += (size_t)n;
		if (memchr(buf, '\n', len) != NULL) {
			reply = json_loadb(buf, (size_t)((char *)memchr(buf, '\n', len) - buf), 0,
					   NULL);
			break;
		}
	}
out:
	free(buf);
	close(fd);
	return reply;
}

long long hadmin_status_int(const char *sock, const char *key)
{
	json_t *r = hadmin_call(sock, "{\"cmd\":\"status\"}");
	json_t *v = json_object_get(r, key);
	long long out = json_is_integer(v) ? (long long)json_integer_value(v) : -1;

	json_decref(r);
	return out;
}
