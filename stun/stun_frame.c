/* ChannelData encode/decode and the STUN/ChannelData stream framer for TCP/TLS. */
#include <errno.h>
#include <string.h>

#include "stun/stun.h"
#include "stun/stun_frame.h"
#include "stun/stun_wire.h"

int stun_chan_write_header(uint8_t hdr[STUN_CHANDATA_HEADER_LEN], uint16_t channel, size_t len,
			   enum stun_chan_range range)
{
	if (hdr == NULL || !stun_channel_valid(channel, range) || len > 0xFFFF)
		return -EINVAL;
	wire_put_u16(hdr, channel);
	wire_put_u16(hdr + 2, (uint16_t)len);
	return 0;
}

int stun_chan_encode(uint8_t *buf, size_t cap, uint16_t channel, const void *data, size_t len,
		     bool pad, enum stun_chan_range range, size_t *out_len)
{
	struct wire_wr w;
	uint8_t hdr[STUN_CHANDATA_HEADER_LEN];
	int rc;
	size_t total;

	if (buf == NULL || out_len == NULL || (data == NULL && len != 0))
		return -EINVAL;
	rc = stun_chan_write_header(hdr, channel, len, range);
	if (rc != 0)
		return rc;
	total = STUN_CHANDATA_HEADER_LEN + (pad ? STUN_PAD4(len) : len);
	if (total > cap)
		return -ENOBUFS;
	/* Payload first: data may alias buf + 4, and memmove handles any overlap. */
	wire_wr_init(&w, buf, cap, STUN_CHANDATA_HEADER_LEN);
	wire_wr_bytes(&w, data, len);
	wire_wr_zero(&w, total - STUN_CHANDATA_HEADER_LEN - len);
	memcpy(buf, hdr, sizeof(hdr));
	*out_len = total;
	return w.err;
}

int stun_chan_decode(const uint8_t *buf, size_t len, enum stun_chan_range range, uint16_t *channel,
		     const uint8_t **data, size_t *data_len)
{
	struct wire_rd r;
	uint16_t ch;
	uint16_t n;
	const uint8_t *p;

	if (buf == NULL || channel == NULL || data == NULL || data_len == NULL)
		return -EINVAL;
	wire_rd_init(&r, buf, len);
	ch = wire_rd_u16(&r);
	n = wire_rd_u16(&r);
	p = wire_rd_take(&r, n);
	if (r.err || !stun_channel_valid(ch, range))
		return -EBADMSG;
	*channel = ch;
	*data = p;
	*data_len = n;
	return 0;
}

int stun_frame_next(const uint8_t *buf, size_t len, size_t max_frame, enum stun_chan_range range,
		    size_t *frame_len)
{
	size_t need;

	if ((buf == NULL && len != 0) || frame_len == NULL)
		return -EINVAL;
	if (len == 0)
		return -EAGAIN;
	if ((buf[0] & 0xC0) == 0x00) {
		size_t mlen;

		/* STUN: check the cookie as soon as its bytes are in, to drop garbage early. */
		for (size_t i = 4; i < 8 && i < len; i++)
			if (buf[i] != (uint8_t)(STUN_MAGIC_COOKIE >> (8 * (7 - i))))
				return -EBADMSG;
		/* Judge the length only with the whole cookie in, so that a prefix never says
		 * -EMSGSIZE where the full header says -EBADMSG. */
		if (len < 8)
			return -EAGAIN;
		mlen = wire_get_u16(buf + 2);
		if ((mlen & 3) != 0)
			return -EBADMSG;
		need = STUN_HEADER_LEN + mlen;
	} else if (stun_is_channeldata(buf, len, range)) {
		if (len < 4)
			return -EAGAIN;
		need = STUN_CHANDATA_HEADER_LEN + STUN_PAD4((size_t)wire_get_u16(buf + 2));
	} else {
		return -EBADMSG;
	}
	if (need > max_frame)
		return -EMSGSIZE;
	if (len < need)
		return -EAGAIN;
	*frame_len = need;
	return 0;
}
