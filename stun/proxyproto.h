/* PROXY protocol v1 (text) and v2 (binary) header parser: no I/O, no allocation; the
 * worker's TCP, TLS and UDP listeners and the fuzz target call it.
 *
 * Contract: proxyproto_parse() looks at the first len bytes of a stream (or a datagram)
 * and says whether they start with a whole PROXY header of an enabled version. An
 * incomplete header (-EAGAIN) means every byte seen so far belongs to the header, so a
 * stream reader may consume them all and read on: partial headers across reads work
 * without ever consuming a byte of what follows the header. */
#ifndef TURNGATE_STUN_PROXYPROTO_H
#define TURNGATE_STUN_PROXYPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define PROXYPROTO_V1 0x1u		/* versions bit: v1 text */
#define PROXYPROTO_V2 0x2u		/* versions bit: v2 binary */
#define PROXYPROTO_V1_MAX 107		/* longest v1 line, CRLF included (the spec's) */
#define PROXYPROTO_V2_SIG_LEN 12
#define PROXYPROTO_V2_FIXED 16		/* signature, ver/cmd, family, length */
/* Largest header accepted: v2 addresses (216) plus TLVs. The spec lets a receiver refuse
 * longer ones; HAProxy's send-proxy-v2 without options sends 28 or 52 bytes. */
#define PROXYPROTO_MAX 1024

struct proxyproto_hdr {
	unsigned version;		/* 1 or 2 */
	/* v2 LOCAL, v1 UNKNOWN, or a v2 family without usable addresses (UNSPEC, UNIX):
	 * the connection's own addresses apply; src/dst are unset. */
	bool local;
	int sock_type;			/* v2: SOCK_STREAM, SOCK_DGRAM or 0 (unspecified);
					 * v1: SOCK_STREAM */
	struct sockaddr_storage src, dst;	/* the client's and the proxy's destination */
	socklen_t addr_len;		/* of src and dst; 0 when local */
};

/* Parses the header at buf[0..len) of a version in versions (PROXYPROTO_V1|V2 bits).
 * Returns the header's length (> 0) and fills *out; -EAGAIN: a valid but incomplete
 * header (every byte so far is part of it); -ENOMSG: no PROXY signature (no header);
 * -EPROTONOSUPPORT: a header of a version not in versions; -EMSGSIZE: longer than
 * PROXYPROTO_MAX (v2); -EBADMSG: malformed. out may be NULL. Any thread. */
int proxyproto_parse(const uint8_t *buf, size_t len, unsigned versions,
		     struct proxyproto_hdr *out);

#endif
