/* Unit tests of ChannelData encoding/decoding and the STUN/ChannelData stream framer. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "stun/stun.h"
#include "stun/stun_frame.h"

#include "tests/unit/test_stun_vectors.h"

#define STRICT STUN_CHAN_RFC8656
#define LEGACY STUN_CHAN_RFC5766

static void t_chan_roundtrip(void **state)
{
	uint8_t buf[64];
	size_t len, dl;
	uint16_t ch;
	const uint8_t *d;

	assert_int_equal(stun_chan_encode(buf, sizeof(buf), 0x4000, "abcde", 5, false, STRICT,
					  &len),
			 0);
	assert_int_equal(len, 9);
	assert_int_equal(buf[0], 0x40);
	assert_int_equal(buf[3], 5);
	assert_true(stun_is_channeldata(buf, len, STRICT));
	assert_int_equal(stun_chan_decode(buf, len, STRICT, &ch, &d, &dl), 0);
	assert_int_equal(ch, 0x4000);
	assert_int_equal(dl, 5);
	assert_memory_equal(d, "abcde", 5);
	/* Stream transports pad to 4; decode ignores the padding. */
	assert_int_equal(stun_chan_encode(buf, sizeof(buf), 0x4FFF, "abcde", 5, true, STRICT, &len),
			 0);
	assert_int_equal(len, 12);
	assert_int_equal(buf[9] | buf[10] | buf[11], 0);
	assert_int_equal(stun_chan_decode(buf, len, STRICT, &ch, &d, &dl), 0);
	assert_int_equal(ch, 0x4FFF);
	assert_int_equal(dl, 5);
	/* Empty payload, payload already in place (aliasing). */
	assert_int_equal(stun_chan_encode(buf, sizeof(buf), 0x4001, NULL, 0, true, STRICT, &len),
			 0);
	assert_int_equal(len, 4);
	memcpy(buf + 4, "xyz", 3);
	assert_int_equal(stun_chan_encode(buf, sizeof(buf), 0x4002, buf + 4, 3, false, STRICT,
					  &len),
			 0);
	assert_int_equal(stun_chan_decode(buf, len, STRICT, &ch, &d, &dl), 0);
	assert_memory_equal(d, "xyz", 3);
	uint8_t hdr[4];
	assert_int_equal(stun_chan_write_header(hdr, 0x4abc, 300, STRICT), 0);
	assert_int_equal(hdr[0], 0x4a);
	assert_int_equal(hdr[1], 0xbc);
	assert_int_equal(hdr[2], 0x01);
	assert_int_equal(hdr[3], 0x2c);
}

static void t_chan_errors(void **state)
{
	uint8_t buf[64];
	size_t len, dl;
	uint16_t ch;
	const uint8_t *d;

	assert_int_equal(stun_chan_encode(buf, sizeof(buf), 0x3FFF, "a", 1, false, STRICT, &len),
			 -EINVAL);
	assert_int_equal(stun_chan_encode(buf, sizeof(buf), 0x5000, "a", 1, false, STRICT, &len),
			 -EINVAL);
	assert_int_equal(stun_chan_encode(buf, 8, 0x4000, "abcde", 5, false, STRICT, &len),
			 -ENOBUFS);
	assert_int_equal(stun_chan_encode(buf, 9, 0x4000, "abcde", 5, true, STRICT, &len),
			 -ENOBUFS);
	assert_false(stun_channel_valid(0x3FFF, STRICT));
	assert_true(stun_channel_valid(0x4000, STRICT));
	assert_false(stun_channel_valid(0x5000, STRICT));
	/* Length beyond the datagram. */
	assert_int_equal(stun_chan_encode(buf, sizeof(buf), 0x4000, "abcde", 5, false, STRICT,
					  &len),
			 0);
	assert_int_equal(stun_chan_decode(buf, len - 1, STRICT, &ch, &d, &dl), -EBADMSG);
	buf[2] = 0xFF;
	assert_int_equal(stun_chan_decode(buf, len, STRICT, &ch, &d, &dl), -EBADMSG);
	/* Truncated header and invalid channel numbers. */
	assert_int_equal(stun_chan_decode(buf, 3, STRICT, &ch, &d, &dl), -EBADMSG);
	static const uint8_t bad_ch[] = { 0x50, 0x00, 0x00, 0x00 };
	assert_int_equal(stun_chan_decode(bad_ch, 4, STRICT, &ch, &d, &dl), -EBADMSG);
	assert_false(stun_is_channeldata(rfc5769_request, sizeof(rfc5769_request), STRICT));
	assert_false(stun_is_channeldata(buf, 0, STRICT));
}

/* RFC 5766's range (limits.channel_numbers: RFC5766) takes 0x5000-0x7FFF as well; the
 * strict range refuses them in every function, and both agree below 0x5000. */
static void t_chan_legacy_range(void **state)
{
	uint8_t buf[64];
	const uint8_t *d;
	uint16_t ch;
	size_t len, dl, fl;

	(void)state;
	assert_false(stun_channel_valid(0x5000, STRICT));
	assert_true(stun_channel_valid(0x5000, LEGACY));
	assert_true(stun_channel_valid(0x7FFF, LEGACY));
	assert_false(stun_channel_valid(0x8000, LEGACY));
	assert_false(stun_channel_valid(0x3FFF, LEGACY));
	assert_int_equal(stun_chan_encode(buf, sizeof(buf), 0x7ABC, "xyz", 3, true, STRICT, &len),
			 -EINVAL);
	assert_int_equal(stun_chan_encode(buf, sizeof(buf), 0x7ABC, "xyz", 3, true, LEGACY, &len),
			 0);
	assert_int_equal(len, 8);
	assert_false(stun_is_channeldata(buf, len, STRICT));
	assert_true(stun_is_channeldata(buf, len, LEGACY));
	assert_int_equal(stun_chan_decode(buf, len, STRICT, &ch, &d, &dl), -EBADMSG);
	assert_int_equal(stun_chan_decode(buf, len, LEGACY, &ch, &d, &dl), 0);
	assert_int_equal(ch, 0x7ABC);
	assert_int_equal(dl, 3);
	assert_int_equal(stun_frame_next(buf, len, 4096, STRICT, &fl), -EBADMSG);
	assert_int_equal(stun_frame_next(buf, len, 4096, LEGACY, &fl), 0);
	assert_int_equal(fl, 8);
	assert_int_equal(stun_chan_write_header(buf, 0x4FFF, 10, STRICT), 0);
	assert_true(stun_is_channeldata(buf, 4, STRICT) && stun_is_channeldata(buf, 4, LEGACY));
	assert_int_equal(stun_chan_write_header(buf, 0x8000, 10, LEGACY), -EINVAL);
}

static void t_framer_basic(void **state)
{
	uint8_t buf[256];
	size_t fl = 0, len;

	/* A STUN message: complete only with all 108 bytes. */
	memcpy(buf, rfc5769_request, sizeof(rfc5769_request));
	for (size_t n = 0; n < sizeof(rfc5769_request); n++)
		assert_int_equal(stun_frame_next(buf, n, 4096, STRICT, &fl), -EAGAIN);
	assert_int_equal(stun_frame_next(buf, sizeof(rfc5769_request), 4096, STRICT, &fl), 0);
	assert_int_equal(fl, sizeof(rfc5769_request));
	/* ChannelData with 5 bytes of payload takes 12 bytes on a stream. */
	assert_int_equal(stun_chan_encode(buf, sizeof(buf), 0x4000, "abcde", 5, true, STRICT, &len),
			 0);
	for (size_t n = 0; n < 12; n++)
		assert_int_equal(stun_frame_next(buf, n, 4096, STRICT, &fl), -EAGAIN);
	assert_int_equal(stun_frame_next(buf, 12, 4096, STRICT, &fl), 0);
	assert_int_equal(fl, 12);
	assert_int_equal(stun_frame_next(buf, 100, 4096, STRICT, &fl), 0);
	assert_int_equal(fl, 12);
}

static void t_framer_interleaved(void **state)
{
	uint8_t stream[512];
	size_t len = 0, n;

	/* STUN, ChannelData, STUN, ChannelData(empty) back to back, fed in chunks of 1..7. */
	memcpy(stream, rfc5769_ipv4_response, sizeof(rfc5769_ipv4_response));
	len = sizeof(rfc5769_ipv4_response);
	assert_int_equal(stun_chan_encode(stream + len, sizeof(stream) - len, 0x4123, "hello!", 6,
					  true, STRICT, &n),
			 0);
	len += n;
	memcpy(stream + len, rfc5769_ipv6_response, sizeof(rfc5769_ipv6_response));
	len += sizeof(rfc5769_ipv6_response);
	assert_int_equal(stun_chan_encode(stream + len, sizeof(stream) - len, 0x4fff, NULL, 0, true,
					  STRICT, &n),
			 0);
	len += n;
	static const size_t want[] = { 80, 12, 92, 4 };

	for (size_t chunk = 1; chunk <= 7; chunk++) {
		size_t have = 0, consumed = 0, frames = 0;
		while (consumed < len) {
			size_t fl;
			int rc = stun_frame_next(stream + consumed, have - consumed, 1024, STRICT,
						 &fl);
			if (rc == -EAGAIN) {
				assert_true(have < len);
				have = have + chunk > len ? len : have + chunk;
				continue;
			}
			assert_int_equal(rc, 0);
			assert_true(frames < 4);
			assert_int_equal(fl, want[frames]);
			consumed += fl;
			frames++;
		}
		assert_int_equal(frames, 4);
	}
}

static void t_framer_errors(void **state)
{
	uint8_t buf[64];
	size_t fl;

	/* oversized STUN and ChannelData */
	memcpy(buf, rfc5769_request, 20);
	assert_int_equal(stun_frame_next(buf, 20, 100, STRICT, &fl), -EMSGSIZE);
	assert_int_equal(stun_frame_next(buf, 4, 100, STRICT, &fl), -EAGAIN);
	assert_int_equal(stun_frame_next(buf, 8, 100, STRICT, &fl), -EMSGSIZE);
	static const uint8_t bigcd[] = { 0x40, 0x00, 0xff, 0xff };
	assert_int_equal(stun_frame_next(bigcd, 4, 65536, STRICT, &fl), -EMSGSIZE);
	assert_int_equal(stun_frame_next(bigcd, 4, 65540, STRICT, &fl), -EAGAIN);
	/* garbage first byte */
	static const uint8_t tls[] = { 0x16, 0x03, 0x01, 0x00 };
	buf[0] = 0x80;
	assert_int_equal(stun_frame_next(buf, 1, 4096, STRICT, &fl), -EBADMSG);
	buf[0] = 0x50;
	assert_int_equal(stun_frame_next(buf, 1, 4096, STRICT, &fl), -EBADMSG);
	/* STUN-looking start, bad cookie: rejected as soon as the first bad byte arrives */
	memcpy(buf, tls, 4);
	buf[4] = 0x21;
	buf[5] = 0x00;
	assert_int_equal(stun_frame_next(buf, 5, 4096, STRICT, &fl), -EAGAIN);
	assert_int_equal(stun_frame_next(buf, 6, 4096, STRICT, &fl), -EBADMSG);
	/* STUN length not a multiple of 4 */
	memcpy(buf, rfc5769_request, 20);
	buf[3] = 0x57;
	assert_int_equal(stun_frame_next(buf, 20, 4096, STRICT, &fl), -EBADMSG);
	assert_int_equal(stun_frame_next(NULL, 0, 4096, STRICT, &fl), -EAGAIN);
	assert_int_equal(stun_frame_next(buf, 20, 4096, STRICT, NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_chan_roundtrip),     cmocka_unit_test(t_chan_errors),
		cmocka_unit_test(t_chan_legacy_range),  cmocka_unit_test(t_framer_basic),
		cmocka_unit_test(t_framer_interleaved), cmocka_unit_test(t_framer_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
