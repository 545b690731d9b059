/* libFuzzer target: ChannelData decode on datagrams in both channel ranges (the worker's
 * ChannelData path calls this decoder), re-encode and compare. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "stun/stun_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Decodes in one range; returns 1 when it decoded (then re-encoding must round-trip). */
static int one_range(const uint8_t *data, size_t size, enum stun_chan_range range, uint16_t *ch,
		     size_t *dl)
{
	static uint8_t out[STUN_CHANDATA_MAX_LEN];
	uint16_t ch2;
	const uint8_t *d, *d2;
	size_t dl2, len;

	if (stun_chan_decode(data, size, range, ch, &d, dl) != 0)
		return 0;
	if (!stun_is_channeldata(data, size, range) || *dl > size - 4 || d != data + 4)
		__builtin_trap();
	for (int pad = 0; pad < 2; pad++) {
		if (stun_chan_encode(out, sizeof(out), *ch, d, *dl, pad, range, &len) != 0)
			__builtin_trap();
		if (stun_chan_decode(out, len, range, &ch2, &d2, &dl2) != 0 || ch2 != *ch ||
		    dl2 != *dl || memcmp(d, d2, *dl) != 0)
			__builtin_trap();
	}
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint16_t ch, ch_l;
	size_t dl, dl_l;
	int strict = one_range(data, size, STUN_CHAN_RFC8656, &ch, &dl);
	int legacy = one_range(data, size, STUN_CHAN_RFC5766, &ch_l, &dl_l);

	/* The legacy range contains the strict one: what decodes strictly decodes the same. */
	if (strict && (!legacy || ch != ch_l || dl != dl_l))
		__builtin_trap();
	return 0;
}
