/* libFuzzer target: stream framer fed in input-chosen chunk sizes; frames must agree. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "stun/stun.h"
#include "stun/stun_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FRAME 4096

/* The first byte seeds the chunk sizes, the rest is the stream. The framer's verdict on
 * every prefix must be consistent with its verdict on the whole buffer. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t seed = data[0];
	const uint8_t *s = data + 1;
	size_t len = size - 1, have = 0, pos = 0;

	/* Bounded: every round either grows have or advances pos (frames are >= 4 bytes). */
	while (pos < len) {
		size_t fl = 0;
		int rc = stun_frame_next(s + pos, have - pos, MAX_FRAME, STUN_CHAN_RFC8656, &fl);
		if (rc == -EAGAIN) {
			if (have == len)
				break;	/* stream ended mid-frame */
			size_t chunk = 1 + (seed % 13);
			seed = (uint8_t)(seed * 33 + 7);
			have = have + chunk > len ? len : have + chunk;
			continue;
		}
		size_t whole_fl = 0;
		int whole = stun_frame_next(s + pos, len - pos, MAX_FRAME, STUN_CHAN_RFC8656,
					    &whole_fl);
		if (whole != rc || (rc == 0 && whole_fl != fl))
			__builtin_trap();
		if (rc != 0)
			break;	/* -EBADMSG / -EMSGSIZE: the connection would close */
		if (fl < 4 || fl > MAX_FRAME || fl > have - pos)
			__builtin_trap();
		if (stun_is_channeldata(s + pos, fl, STUN_CHAN_RFC8656)) {
			uint16_t ch;
			const uint8_t *d;
			size_t dl;
			if (stun_chan_decode(s + pos, fl, STUN_CHAN_RFC8656, &ch, &d, &dl) != 0)
				__builtin_trap();
		} else {
			struct stun_msg m;
			(void)stun_msg_parse(&m, s + pos, fl);
		}
		pos += fl;
	}
	return 0;
}
