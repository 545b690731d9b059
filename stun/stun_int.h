/* Internal to stun/: helpers shared by the codec's .c files. Not part of the public API. */
#ifndef TG_STUN_STUN_INT_H
#define TG_STUN_STUN_INT_H

#include <stddef.h>
#include <stdint.h>

/* Slot index in struct stun_msg.attr[] for a known attribute type, or -1. */
int stun_slot_of(uint16_t attr_type);

/* HMAC over two pieces (msg prefix with a patched length field, see stun_integrity.c).
 * md_name is "SHA1" or "SHA256". Writes up to 32 bytes to out, *out_len the size.
 * 0 or -EIO. */
int stun_hmac2(const char *md_name, const uint8_t *key, size_t key_len, const uint8_t *a,
	       size_t a_len, const uint8_t *b, size_t b_len, uint8_t *out, size_t *out_len);

/* base64url without padding of n bytes into out (needs 4*ceil(n/3)+1); returns length. */
size_t stun_b64url_encode(const uint8_t *in, size_t n, char *out);
/* Decodes unpadded base64url; returns decoded length or -EINVAL. */
int stun_b64url_decode(const char *in, size_t n, uint8_t *out, size_t cap);

struct stun_builder;
/* Appends a zero-filled final attribute (MI, MI-SHA256, FINGERPRINT) if the builder's stage
 * is <= max_stage, then moves it to new_stage. Returns the value pointer or NULL (err set). */
uint8_t *stun_build_append_final(struct stun_builder *b, uint16_t type, size_t len,
				 uint8_t max_stage, uint8_t new_stage);

/* CRC-32 (ISO-HDLC, as used by FINGERPRINT) of buf[0..n) continuing from crc (start 0). */
uint32_t stun_crc32(uint32_t crc, const uint8_t *buf, size_t n);

#endif
