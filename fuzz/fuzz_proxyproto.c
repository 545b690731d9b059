/* libFuzzer target: the PROXY protocol header parser (stun/proxyproto.c, which the
 * worker's TCP, TLS and UDP listeners call) on v1 text and v2 binary with TLVs. Checks
 * the stream contract: a complete header is no longer than the input or the limits, and
 * every shorter prefix of it is reported incomplete, so a reader that consumes an
 * incomplete header's bytes never eats what follows it. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "stun/proxyproto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned vers[] = { PROXYPROTO_V1 | PROXYPROTO_V2, PROXYPROTO_V1,
					 PROXYPROTO_V2 };

	for (size_t v = 0; v < sizeof(vers) / sizeof(vers[0]); v++) {
		struct proxyproto_hdr h;
		int r = proxyproto_parse(data, size, vers[v], &h);

		if (r == 0 || (r < 0 && r != -EAGAIN && r != -ENOMSG && r != -EPROTONOSUPPORT &&
			       r != -EMSGSIZE && r != -EBADMSG))
			__builtin_trap();
		if (r < 0)
			continue;
		if ((size_t)r > size || r > PROXYPROTO_MAX ||
		    (h.version == 1 && r > PROXYPROTO_V1_MAX) ||
		    !(vers[v] & (h.version == 1 ? PROXYPROTO_V1 : PROXYPROTO_V2)))
			__builtin_trap();
		if (!h.local && (h.addr_len == 0 || h.src.ss_family != h.dst.ss_family ||
				 (h.src.ss_family != AF_INET && h.src.ss_family != AF_INET6)))
			__builtin_trap();
		for (size_t k = 0; k < (size_t)r; k++)
			if (proxyproto_parse(data, k, vers[v], NULL) != -EAGAIN)
				__builtin_trap();
	}
	return 0;
}
