/* Worker: kernel buffer sizes of sockets: larger for UDP listener and relay sockets
 * (docs/performance.md), bounded for TURN-TCP/TLS connections and RFC 6062 pairs
 * (docs/relay.md). */
#ifndef TG_WORKER_SOCKBUF_H
#define TG_WORKER_SOCKBUF_H

#include <stddef.h>
#include <sys/socket.h>

/* A listener socket carries every client of a worker: a burst of 1200-byte datagrams
 * overflowed the default 208 KiB and the kernel dropped 3-4% (bench, flat 1200 B). */
#define WK_SOCKBUF_LISTENER (4 * 1024 * 1024)
/* A relay socket carries one allocation's peer traffic; its limit is not a reservation
 * (memory is charged per queued datagram, and udp_mem caps the total), but with many
 * thousands of allocations a smaller per-socket ceiling keeps a stalled worker's backlog
 * modest. */
#define WK_SOCKBUF_RELAY (1024 * 1024)

/* A UDP socket (listener, relay; plain or DTLS): asks for `bytes` of receive and send
 * buffer (the kernel doubles it for its bookkeeping). SO_*BUFFORCE goes past
 * net.core.[rw]mem_max and needs CAP_NET_ADMIN; without it the plain option is capped at
 * the sysctl. Failure keeps the default buffers, which work (more drops under bursts):
 * never an error. Once per socket: not for TCP sockets (wk_sockbuf_stream). */
static inline void wk_sockbuf_set(int fd, int bytes)
{
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) < 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) < 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
}

/* SO_SNDBUF of the client connections of TURN-TCP and TURN-TLS listeners, set once where
 * the socket is accepted or taken over (wk_sock_sndbuf); both sockets of an RFC 6062 pair
 * get receive and send buffers of the larger of this and their tcp_buffer
 * (wk_pipe_sockbuf). Without it the kernel autotunes a send buffer up to
 * net.ipv4.tcp_wmem's maximum (4 MiB) for a reader that never reads: a client with ephemeral credentials pinned 4 MiB of kernel
 * memory per connection beside our WK_TCP_OUT_MAX (wk.h). Sized as that output buffer: the
 * kernel doubles the request for its bookkeeping (ss -m shows tb 512 KiB) and stops
 * autotuning, so a stalled reader costs at most the output buffer plus twice it in the
 * kernel. A connection cannot have more unacknowledged data than its send buffer holds,
 * so one carries about 256 KiB per round trip: 10.5 Mbit/s at 200 ms, 21 Mbit/s
 * at 100 ms, where a WebRTC call over TURN-TCP needs a few Mbit/s. The plain option is
 * capped at net.core.wmem_max (212992 by default: 8.5 Mbit/s at 200 ms). */
#define WK_TCP_SNDBUF (256 * 1024)

/* A TCP socket: asks for rcv bytes of receive and snd of send buffer (0: left as it is),
 * which also ends the kernel's autotuning of it. The plain options only, capped at
 * net.core.rmem_max/wmem_max, so the operator's sysctls bound every client's and peer's
 * connection: SO_*BUFFORCE would ignore them with CAP_NET_ADMIN, and without it fail a
 * capability check on every socket a client makes us open (an audited denial under
 * SELinux). Fails only on a descriptor that is not a socket: the defaults stay. */
static inline void wk_sockbuf_stream(int fd, int rcv, int snd)
{
	if (rcv > 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	if (snd > 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd));
}

/* The receive and send buffer of each TCP socket of an RFC 6062 pair whose pipe buffers
 * are cap bytes (limits.tcp_buffer): the larger of WK_TCP_SNDBUF and cap. */
static inline int wk_sockbuf_pair(size_t cap)
{
	return cap > (size_t)WK_TCP_SNDBUF ? (int)cap : WK_TCP_SNDBUF;
}

/* Bounds the kernel send buffer of a TURN-TCP/TLS connection at WK_TCP_SNDBUF, or
 * net.core.wmem_max when that is lower: autotuning would grow it to 4 MiB for a reader
 * that never reads. Once per socket, where it is accepted or taken over; an RFC 6062
 * pair's sockets get wk_pipe_sockbuf (stream.h) instead. */
static inline void wk_sock_sndbuf(int fd)
{
	wk_sockbuf_stream(fd, 0, WK_TCP_SNDBUF);
}

#endif
