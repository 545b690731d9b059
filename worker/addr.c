/* Worker address helpers: sockaddr <-> shm_addr, comparison, lengths, and the hash of
 * (listener, client address) that the 5-tuple and DTLS indexes use. */
#include "config.h"

#include "worker/wk.h"

#include <netinet/in.h>
#include <string.h>

#include "common/sockaddr.h"

socklen_t wk_addr_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

void wk_addr_to_shm(const struct sockaddr *sa, struct shm_addr *out)
{
	memset(out, 0, sizeof(*out));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

		out->family = AF_INET;
		memcpy(out->addr, &s4->sin_addr, 4);
		out->port = ntohs(s4->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		out->family = AF_INET6;
		memcpy(out->addr, &s6->sin6_addr, 16);
		out->port = ntohs(s6->sin6_port);
	}
}

socklen_t wk_shm_to_addr(const struct shm_addr *in, struct sockaddr_storage *out)
{
	memset(out, 0, sizeof(*out));
	if (in->family == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)out;

		s4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, in->addr, 4);
		s4->sin_port = htons(in->port);
		return sizeof(*s4);
	}
	if (in->family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;

		s6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, in->addr, 16);
		s6->sin6_port = htons(in->port);
		return sizeof(*s6);
	}
	return 0;
}

/* Compares address and port (not scope or flow info). */
bool wk_addr_equal(const struct sockaddr *a, const struct sockaddr *b)
{
	return sockaddr_equal(a, b);
}

uint32_t wk_ep_hash(const struct wk_listener *l, const struct sockaddr *sa)
{
	struct shm_addr k;
	uint64_t h = 1469598103934665603ull ^ (uintptr_t)l;

	wk_addr_to_shm(sa, &k);
	for (size_t i = 0; i < 16; i++)
		h = (h ^ k.addr[i]) * 1099511628211ull;
	h = (h ^ k.port) * 1099511628211ull;
	return (uint32_t)(h ^ (h >> 32));
}
