/* Integration-test helper: a bounded request/reply exchange on turngated's admin socket. */
#include "config.h"

#include "tests/integration/harness_admin.h"

#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
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
	const char *dot = strchr(key, '.');
	json_t *v;
	long long out;

	if (dot != NULL) {
		char outer[64];

		snprintf(outer, sizeof(outer), "%.*s", (int)(dot - key), key);
		v = json_object_get(json_object_get(r, outer), dot + 1);
	} else {
		v = json_object_get(r, key);
	}
	out = json_is_integer(v) ? (long long)json_integer_value(v) : -1;

	json_decref(r);
	return out;
}

long long hadmin_wait_status_int(const char *sock, const char *key, long long want, int tries,
				 int interval_ms)
{
	long long n = -1;

	for (int i = 0; i < tries; i++) {
		n = hadmin_status_int(sock, key);
		if (n == want)
			break;
		usleep((useconds_t)interval_ms * 1000);
	}
	return n;
}

long long hadmin_stat(const char *sock, const char *listener, const char *name)
{
	json_t *r = hadmin_call(sock, "{\"cmd\":\"stats\"}"), *o;
	long long v = -1;

	if (listener)
		o = json_object_get(json_object_get(r, "listeners"), listener);
	else
		o = json_object_get(r, "counters");
	if (json_is_integer(json_object_get(o, name)))
		v = json_integer_value(json_object_get(o, name));
	json_decref(r);
	return v;
}

int hadmin_owner_of(const char *sock, const char *transport, uint16_t port)
{
	json_t *r = hadmin_call(sock, "{\"cmd\":\"allocations\"}"), *a;
	char want[32];
	size_t i;
	int owner = -1, matches = 0;

	snprintf(want, sizeof(want), "127.0.0.1:%u", port);
	json_array_foreach(json_object_get(r, "allocations"), i, a)
	{
		const char *client = json_string_value(json_object_get(a, "client"));
		const char *t = json_string_value(json_object_get(a, "transport"));

		if (client != NULL && t != NULL && strcmp(client, want) == 0 &&
		    strcmp(t, transport) == 0) {
			owner = (int)json_integer_value(json_object_get(a, "worker"));
			matches++;
		}
	}
	json_decref(r);
	return matches == 1 ? owner : -1;
}

int hadmin_worker_pid(const char *sock, int slot, double *uptime)
{
	json_t *r = hadmin_call(sock, "{\"cmd\":\"workers\"}");
	json_t *w = json_array_get(json_object_get(r, "workers"), (size_t)slot);
	const char *st = json_string_value(json_object_get(w, "state"));
	int pid = (int)json_integer_value(json_object_get(w, "pid"));
	int out = st == NULL ? -1 : strcmp(st, "running") == 0 ? pid : 0;

	if (uptime)
		*uptime = json_real_value(json_object_get(w, "uptime"));
	json_decref(r);
	return out;
}

int hadmin_wait_worker_replaced(const char *sock, int slot, int old_pid, int tries, int interval_ms)
{
	int pid = -1;

	for (int i = 0; i < tries; i++) {
		pid = hadmin_worker_pid(sock, slot, NULL);
		if (pid > 0 && pid != old_pid)
			break;
		usleep((useconds_t)interval_ms * 1000);
	}
	return pid;
}
