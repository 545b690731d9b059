/* Worker self-exclusion: this instance's own sockets are never a peer, whatever the routes
 * say (docs/relay.md "The instance is never a peer"). An own socket is a listener's
 * (every protocol, at the address its socket is bound to, every local address for a
 * wildcard, and its public address and port), an HTTP endpoint of the master's (health,
 * metrics, credential API: every local address), and, where relay sockets bind the
 * wildcard because the relay address is not local, the relay port range on every local
 * address. The paths built for reaching this instance stay open: a relay address or mask
 * of ours is the short circuit's (worker/shortcut.c), a sibling's slice is the sibling's
 * (worker/sibling.c).
 *
 * The per-packet cost is a scan of a few port ranges; the address test runs only for a
 * peer port that is one of ours. Local addresses come from getifaddrs, read again at
 * most every WK_SELF_LOCAL_NS. */
#include "config.h"

#include "worker/relay_priv.h"
#include "worker/wk.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/log.h"

#define WK_SELF_LOCAL_NS (5ull * 1000000000ull)

static void wk_self_add(struct worker *w, const struct sockaddr *sa, bool any, uint16_t lo,
			uint16_t hi, bool relay)
{
	struct wk_self_sock *e;
	int fam = AF_INET;
	uint8_t a[16] = { 0 };

	if (w->pl->self.n >= WK_SELF_MAX || lo == 0 || lo > hi)
		return;
	if (sa != NULL && conf_addr_canon(sa, &fam, a) != 0)
		return;
	e = &w->pl->self.socks[w->pl->self.n++];
	e->family = (uint8_t)fam;
	memcpy(e->addr, a, 16);
	e->any = any || sa == NULL;
	e->relay = relay;
	e->port_min = lo;
	e->port_max = hi;
}

static bool wk_self_unspecified(int fam, const uint8_t a[16])
{
	static const uint8_t zero[16];

	return memcmp(a, zero, fam == AF_INET ? 4 : 16) == 0;
}

/* An IP literal (a public address may also be a name: then false). */
static bool wk_self_ip(const char *s, struct sockaddr_storage *ss)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, s, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		return true;
	}
	if (inet_pton(AF_INET6, s, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		return true;
	}
	return false;
}

/* A listener's socket as bound (getsockname: the master chose the address), its public
 * address and port where that is an IP, and its relay range where relay sockets bind the
 * wildcard. */
static void wk_self_listener(struct worker *w, const struct wk_listener *l)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	uint8_t a[16];
	int fam;

	if (l->fd >= 0 && getsockname(l->fd, (struct sockaddr *)&ss, &len) == 0 &&
	    conf_addr_canon((struct sockaddr *)&ss, &fam, a) == 0) {
		uint16_t port = ntohs(ss.ss_family == AF_INET
					      ? ((struct sockaddr_in *)&ss)->sin_port
					      : ((struct sockaddr_in6 *)&ss)->sin6_port);
		wk_self_add(w, (struct sockaddr *)&ss, wk_self_unspecified(fam, a), port, port,
			    false);
	}
	if (l->sl.public_address != NULL && l->sl.public_port != 0 &&
	    wk_self_ip(l->sl.public_address, &ss))
		wk_self_add(w, (struct sockaddr *)&ss, false, l->sl.public_port,
			    l->sl.public_port, false);
	if (!l->relay_local)
		wk_self_add(w, NULL, true, l->sl.relay_port_min, l->sl.relay_port_max, true);
}

void wk_self_refresh(struct worker *w)
{
	uint16_t http[SNAP_HTTP_PORTS];
	size_t n;

	w->pl->self.n = 0;
	w->pl->self.local_ns = 0; /* addresses may have come with the listeners: read again */
	for (size_t i = 0; i < w->n_ls; i++)
		if (w->ls[i]->active && w->ls[i]->snap_ok)
			wk_self_listener(w, w->ls[i]);
	n = w->snap != NULL ? snap_http_ports(w->snap, http) : 0;
	for (size_t i = 0; i < n; i++)
		wk_self_add(w, NULL, true, http[i], http[i], false);
	if (w->pl->self.n == WK_SELF_MAX)
		log_warn("worker", "%u own sockets listed for the self-exclusion: the rest "
			 "left to the routes", WK_SELF_MAX);
}

static void wk_self_local_read(struct worker *w, uint64_t now_ns)
{
	struct ifaddrs *ifa = NULL;

	w->pl->self.n_local = 0;
	w->pl->self.local_ns = now_ns;
	if (getifaddrs(&ifa) < 0)
		return;
	for (struct ifaddrs *i = ifa; i != NULL && w->pl->self.n_local < WK_SELF_MAX_LOCAL;
	     i = i->ifa_next) {
		struct wk_sc_ip *ip = &w->pl->self.local[w->pl->self.n_local];
		int fam;

		if (i->ifa_addr == NULL ||
		    (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6) ||
		    conf_addr_canon(i->ifa_addr, &fam, ip->addr) != 0)
			continue;
		ip->family = (uint8_t)fam;
		w->pl->self.n_local++;
	}
	freeifaddrs(ifa);
}

/* Whether (fam, a) reaches this host: loopback, the unspecified address (the kernel takes
 * it for a local one) or an address on one of its interfaces. */
static bool wk_self_local(struct worker *w, int fam, const uint8_t a[16])
{
	uint64_t now = wk_batch_ns(w);

	if (fam == AF_INET && (a[0] == 127 || a[0] == 0))
		return true;
	if (fam == AF_INET6 && (wk_self_unspecified(fam, a) ||
				IN6_IS_ADDR_LOOPBACK((const struct in6_addr *)a)))
		return true;
	if (w->pl->self.local_ns == 0 || now - w->pl->self.local_ns > WK_SELF_LOCAL_NS)
		wk_self_local_read(w, now);
	for (unsigned i = 0; i < w->pl->self.n_local; i++)
		if (w->pl->self.local[i].family == fam &&
		    memcmp(w->pl->self.local[i].addr, a, fam == AF_INET ? 4 : 16) == 0)
			return true;
	return false;
}

static bool wk_self_hit(struct worker *w, const struct wk_self_sock *e, const struct sockaddr *peer,
			int fam, const uint8_t a[16])
{
	if (e->relay && (wk_sc_own_ip(w, peer) || wk_sib_addr(w, peer)))
		return false;
	if (e->any)
		return wk_self_local(w, fam, a);
	return wk_self_unspecified(fam, a) ||
	       (e->family == fam && memcmp(e->addr, a, fam == AF_INET ? 4 : 16) == 0);
}

bool wk_self_refused(struct worker *w, const struct sockaddr *peer)
{
	uint16_t port;
	uint8_t a[16];
	int fam;
	bool canon = false;
	const struct wk_self *self = &w->pl->self;

	if (peer->sa_family != AF_INET && peer->sa_family != AF_INET6)
		return false;
	port = ntohs(peer->sa_family == AF_INET ? ((const struct sockaddr_in *)peer)->sin_port
						: ((const struct sockaddr_in6 *)peer)->sin6_port);
	for (unsigned i = 0; i < self->n; i++) {
		const struct wk_self_sock *e = &self->socks[i];

		if (port < e->port_min || port > e->port_max)
			continue;
		if (!canon && conf_addr_canon(peer, &fam, a) != 0)
			return false;
		canon = true;
		if (wk_self_hit(w, e, peer, fam, a))
			return true;
	}
	return false;
}
