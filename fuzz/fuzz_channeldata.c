/* libFuzzer target: ChannelData decode on datagrams, re-encode and compare. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "stun/stun_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t out[STUN_CHANDATA_MAX_LEN];
	uint16_t ch, ch2;
	const uint8_t *d, *d2;
	size_t dl, dl2, len;

	(void)stun_is_channeldata(data, size);
	if (stun_chan_decode(data, size, &ch, &d, &dl) != 0)
		return 0;
	if (dl > size - 4 || d != data + 4)
		__builtin_trap();
	for (int pad = 0; pad < 2; pad++) {
		if (stun_chan_encode(out, sizeof(out), ch, d, dl, pad, &len) != 0)
			__builtin_trap();
		if (stun_chan_decode(out, len, &ch2, &d2, &dl2) != 0 || ch2 != ch || dl2 != dl ||
		    memcmp(d, d2, dl) != 0)
			__builtin_trap();
	}
	return 0;
}
