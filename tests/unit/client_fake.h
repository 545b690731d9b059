/* Pieces the client unit tests with a forked fake server share (test_client.c,
 * test_client_tcp.c). */
#ifndef TG_TESTS_UNIT_CLIENT_FAKE_H
#define TG_TESTS_UNIT_CLIENT_FAKE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "client/turn_client.h"

/* The client, then the fake server process. */
static inline void fake_stop(struct turn_client *c, pid_t pid)
{
	turn_client_destroy(c);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}

static inline void sa4(struct sockaddr_storage *ss, uint32_t ip, uint16_t port)
{
	struct sockaddr_in *a = (struct sockaddr_in *)ss;

	memset(ss, 0, sizeof(*ss));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(ip);
	a->sin_port = htons(port);
}

#endif
