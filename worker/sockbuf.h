/* Worker: kernel buffer sizes of sockets: larger for UDP listener and relay sockets
 * (docs/performance.md), bounded for RFC 6062 pairs (docs/relay.md). */
#ifndef TG_WORKER_SOCKBUF_H
#define TG_WORKER_SOCKBUF_H

#include <sys/socket.h>

/* A listener socket carries every client of a worker: a burst of 1200-byte datagrams
 * overflowed the default 208 KiB and the kernel dropped 3-4% (bench, flat 1200 B). */
#define WK_SOCKBUF_LISTENER (4 * 1024 * 1024)
/* A relay socket carries one allocation's peer traffic; its limit is not a reservation
 * (memory is charged per queued datagram, and udp_mem caps the total), but with many
 * thousands of allocations a smaller per-socket ceiling keeps a stalled worker's backlog
 * modest. */
#define WK_SOCKBUF_RELAY (1024 * 1024)

/* Any worker socket: asks for `bytes` of receive and send buffer (the kernel doubles it
 * for its bookkeeping; on TCP it also ends autotuning). SO_*BUFFORCE goes past
 * net.core.[rw]mem_max and needs CAP_NET_ADMIN; without it the plain option is capped at
 * the sysctl. Failure keeps the default buffers, which work (UDP: more drops under
 * bursts; TCP: autotuned): never an error. */
static inline void wk_sockbuf_set(int fd, int bytes)
{
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) < 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) < 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
}

#endif
