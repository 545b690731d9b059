/* Socket address comparison shared by the master and the workers (header only). */
#ifndef TG_COMMON_SOCKADDR_H
#define TG_COMMON_SOCKADDR_H

#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

/* Same family, address and port (IPv4, IPv6: not scope or flow info); false for any
 * other family. */
static inline bool sockaddr_equal(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->sa_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

		return x->sin6_port == y->sin6_port &&
		       memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
	}
	return false;
}

#endif
