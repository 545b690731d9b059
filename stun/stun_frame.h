/* TURN ChannelData (RFC 8656 12) encoding/decoding and STUN/ChannelData stream framing.
 *
 * No I/O, no allocation, no state: callable from any process. Returns 0 or negative errno.
 */
#ifndef TG_STUN_STUN_FRAME_H
#define TG_STUN_STUN_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STUN_CHANNEL_MIN 0x4000
#define STUN_CHANNEL_MAX 0x4FFF		/* RFC 8656 12 */
#define STUN_CHANNEL_LEGACY_MAX 0x7FFF	/* RFC 5766 11 */
#define STUN_CHANDATA_HEADER_LEN 4
/* Largest ChannelData frame: 4-byte header + 65535 payload, padded to 65540 on streams. */
#define STUN_CHANDATA_MAX_LEN (STUN_CHANDATA_HEADER_LEN + 65535 + 1)

/* Which channel numbers a peer may use: RFC 8656's 0x4000-0x4FFF, or RFC 5766's
 * 0x4000-0x7FFF that deployed clients (coturn's turnutils_uclient among them) still pick
 * from. Every function below takes it; the range decides whether a first byte 0x50-0x7F
 * is ChannelData or not STUN at all. */
enum stun_chan_range {
	STUN_CHAN_RFC8656 = 0,
	STUN_CHAN_RFC5766,
};

/* True if channel is a valid TURN channel number in range. Inline: the worker calls it
 * per datagram. */
static inline bool stun_channel_valid(uint16_t channel, enum stun_chan_range range)
{
	return channel >= STUN_CHANNEL_MIN &&
	       channel <= (range == STUN_CHAN_RFC5766 ? STUN_CHANNEL_LEGACY_MAX : STUN_CHANNEL_MAX);
}

/* True if the first byte says ChannelData of range (0x40..0x4F, or 0x40..0x7F for
 * RFC 5766); false for len 0 or NULL. Use this to demultiplex a datagram before
 * stun_msg_parse(); stun_chan_decode() then checks the rest. Inline, per datagram. */
static inline bool stun_is_channeldata(const uint8_t *buf, size_t len, enum stun_chan_range range)
{
	return buf != NULL && len >= 1 && stun_channel_valid((uint16_t)(buf[0] << 8), range);
}

/* Writes the 4-byte ChannelData header (for scatter/gather sends, and in place in front
 * of a payload). -EINVAL if the channel is outside range or len > 65535. */
int stun_chan_write_header(uint8_t hdr[STUN_CHANDATA_HEADER_LEN], uint16_t channel, size_t len,
			   enum stun_chan_range range);

/* Encodes header + data into buf[0..cap); with pad (stream transports) zero-pads to a
 * multiple of 4. *out_len gets the total. data may alias buf + 4 (payload already in
 * place). 0, -EINVAL (channel outside range, len > 65535), -ENOBUFS. */
int stun_chan_encode(uint8_t *buf, size_t cap, uint16_t channel, const void *data, size_t len,
		     bool pad, enum stun_chan_range range, size_t *out_len);

/* Decodes a ChannelData message in buf[0..len) (a datagram or a frame from
 * stun_frame_next()). *data points into buf. Trailing bytes after the payload (padding)
 * are allowed and ignored. -EBADMSG if shorter than 4, the channel is outside range, or
 * the length field runs past len. The worker's ChannelData path (worker/turn.c) and every
 * client in the tree decode through it. */
int stun_chan_decode(const uint8_t *buf, size_t len, enum stun_chan_range range, uint16_t *channel,
		     const uint8_t **data, size_t *data_len);

/* Stream framer for TCP/TLS: looks at the start of buf[0..len) (bytes received and not yet
 * consumed) and says how long the next complete frame is:
 *   STUN        20 + length field          (length must be a multiple of 4, cookie checked)
 *   ChannelData 4 + length rounded up to 4 (RFC 8656 12.5 padding on streams), first
 *               byte as stun_is_channeldata() says for range
 * Returns 0 with *frame_len set when buf holds at least one full frame (consume
 * *frame_len bytes, then call again); -EAGAIN when more bytes are needed (len may be 0);
 * -EMSGSIZE when the frame would exceed max_frame; -EBADMSG for bytes that are neither
 * (the connection should be closed). Works on any partial prefix: the verdict for a
 * prefix never contradicts the verdict for the whole frame. */
int stun_frame_next(const uint8_t *buf, size_t len, size_t max_frame, enum stun_chan_range range,
		    size_t *frame_len);

#endif
