/* Worker address helpers: sockaddr <-> shm_addr, comparison, lengths, the hash of
 * (listener, client address) that the 5-tuple and DTLS indexes use, and the relay address
 * of the other family for dual-stack allocations. */
#include "config.h"

#include "worker/wk.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* The address alone decides: with IP_BIND_ADDRESS_NO_PORT the bind to port 0 takes no
 * ephemeral port, so an address whose ephemeral ports are all held (relay sockets filling
 * a range that covers the kernel's, a worker respawned with 250,000 allocations held)
 * still reads as local. Without it such a worker bound its re-adopted relay sockets to
 * the wildcard, where the same port of another relay address refused them: 7,248 of
 * 14,383 allocations lost (issue 42). */
bool wk_addr_bindable(const struct sockaddr_storage *ss)
{
	int fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0), one = 1;
	bool ok;

	if (fd < 0)
		return false;
	(void)setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
	ok = bind(fd, (const struct sockaddr *)ss, wk_addr_len((const struct sockaddr *)ss)) == 0;
	close(fd);
	return ok;
}

/* True when a lies in the network of interface address ifa (its netmask): 127.0.0.4 is
 * on lo although lo lists only 127.0.0.1/8. */
static bool wk_on_ifa(const struct sockaddr *a, const struct ifaddrs *ifa)
{
	const uint8_t *x, *y, *m;
	size_t n;

	if (!ifa->ifa_addr || !ifa->ifa_netmask || a->sa_family != ifa->ifa_addr->sa_family)
		return false;
	if (a->sa_family == AF_INET) {
		x = (const uint8_t *)&((const struct sockaddr_in *)a)->sin_addr;
		y = (const uint8_t *)&((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr;
		m = (const uint8_t *)&((const struct sockaddr_in *)ifa->ifa_netmask)->sin_addr;
		n = 4;
	} else {
		x = (const uint8_t *)&((const struct sockaddr_in6 *)a)->sin6_addr;
		y = (const uint8_t *)&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr;
		m = (const uint8_t *)&((const struct sockaddr_in6 *)ifa->ifa_netmask)->sin6_addr;
		n = 16;
	}
	for (size_t i = 0; i < n; i++)
		if ((x[i] & m[i]) != (y[i] & m[i]))
			return false;
	return true;
}

/* Same family and address (ports, scope and flow info aside). */
static bool wk_ip_equal(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return a->sa_family == AF_INET6 &&
	       memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		      &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
}

/* The interface that holds a: the one that lists it, else (an address of a loopback
 * network that is local without being listed: 127.0.0.4) a loopback interface whose
 * network holds it. A network that merely contains a (10.0.0.0/8 on another interface
 * than the one holding 10.1.2.3/24) says nothing about where a lives. */
static const char *wk_ifa_holding(const struct sockaddr *a, const struct ifaddrs *ifa)
{
	const struct ifaddrs *i;

	for (i = ifa; i; i = i->ifa_next)
		if (i->ifa_addr && wk_ip_equal(a, i->ifa_addr))
			return i->ifa_name;
	for (i = ifa; i; i = i->ifa_next)
		if ((i->ifa_flags & IFF_LOOPBACK) && wk_on_ifa(a, i))
			return i->ifa_name;
	return NULL;
}

/* Link-local IPv6 is skipped (it needs a scope a peer cannot know). */
void wk_relay2_find(struct wk_listener *l)
{
	struct ifaddrs *ifa = NULL, *j;
	int want = l->relay_addr.ss_family == AF_INET ? AF_INET6 : AF_INET;
	const char *name;

	memset(&l->relay_addr2, 0, sizeof(l->relay_addr2));
	l->relay2_local = false;
	if (l->mask_addr.ss_family != 0)
		return;	/* no internal address of the other family is announced */
	if (l->sl.dual_addr.ss_family != 0) {
		/* Configured: announced as is; bound when local, else the wildcard (as
		 * `address` is). */
		memcpy(&l->relay_addr2, &l->sl.dual_addr, sizeof(l->relay_addr2));
		l->relay2_local = wk_addr_bindable(&l->relay_addr2);
		return;
	}
	if (!l->relay_local || getifaddrs(&ifa) < 0)
		return;
	name = wk_ifa_holding((struct sockaddr *)&l->relay_addr, ifa);
	for (j = ifa; name && j; j = j->ifa_next) {
		if (!j->ifa_addr || j->ifa_addr->sa_family != want || strcmp(j->ifa_name, name) != 0)
			continue;
		if (want == AF_INET6 &&
		    IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)j->ifa_addr)->sin6_addr))
			continue;
		memcpy(&l->relay_addr2, j->ifa_addr, wk_addr_len(j->ifa_addr));
		if (want == AF_INET6)
			((struct sockaddr_in6 *)&l->relay_addr2)->sin6_port = 0;
		else
			((struct sockaddr_in *)&l->relay_addr2)->sin_port = 0;
		l->relay2_local = true;
		break;
	}
	freeifaddrs(ifa);
}

/* IPv4 datagrams leave with DF set either way: the kernel's default (IP_PMTUDISC_WANT)
 * sets it on every datagram that fits the path MTU. Under WANT the IP ID of each one
 * comes from a hashed per-destination counter (__ip_select_ident, a few percent of the
 * relay's CPU); under IP_PMTUDISC_DO it is 0, which RFC 6864 allows for datagrams that
 * cannot be fragmented. What DO changes is the datagram above the path MTU: it fails with
 * EMSGSIZE instead of being fragmented, so wk_sendto_df sends it once more under WANT,
 * fragmented as before. Sockets of a DONT-FRAGMENT allocation are not touched here: they
 * are in DO mode for good and an oversized datagram is dropped (RFC 8656 7.2). */
bool wk_df_fast(int fd, int family)
{
	int v = IP_PMTUDISC_DO;

	return family == AF_INET && setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &v, sizeof(v)) == 0;
}
