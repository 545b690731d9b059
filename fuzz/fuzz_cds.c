/* libFuzzer target: bytes from a config discovery server -> WebSocket handshake and frames. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "master/cds.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The same walk the CDS client makes over its receive buffer: the handshake response,
 * then frames until one is incomplete or bad. Every frame must lie inside the input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char accept[WS_ACCEPT_LEN + 1];
	size_t consumed = 0, off;
	int status = 0, rc;

	ws_accept_of("dGhlIHNhbXBsZSBub25jZQ==", accept);
	rc = ws_handshake_parse((const char *)data, size, accept, &consumed, &status);
	off = rc == 1 ? consumed : 0;
	if (off > size)
		__builtin_trap();
	while (off < size) {
		struct ws_frame f;

		rc = ws_frame_parse(data + off, size - off, 1u << 16, &f);
		if (rc != 1)
			break;
		if (f.total == 0 || f.total > size - off || f.len > f.total ||
		    (f.len && (f.payload < data + off || f.payload + f.len > data + off + f.total)))
			__builtin_trap();
		off += f.total;
	}
	return 0;
}
