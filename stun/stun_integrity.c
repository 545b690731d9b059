/* MESSAGE-INTEGRITY(-SHA256) and FINGERPRINT: computing them in the builder, checking them. */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "stun/stun.h"
#include "stun/stun_int.h"
#include "stun/stun_wire.h"

enum {
	STAGE_OPEN,
	STAGE_AFTER_MI,
	STAGE_AFTER_MI256,
	STAGE_AFTER_FP
};

int stun_hmac2(const char *md_name, const uint8_t *key, size_t key_len, const uint8_t *a,
	       size_t a_len, const uint8_t *b, size_t b_len, uint8_t *out, size_t *out_len)
{
	EVP_MAC *mac = NULL;
	EVP_MAC_CTX *ctx = NULL;
	OSSL_PARAM params[2];
	int rc = -EIO;

	/* EVP_MAC rejects a NULL key even when empty; an empty key is legal in HMAC. */
	static const uint8_t empty = 0;
	if (key == NULL) {
		key = &empty;
		key_len = 0;
	}
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)md_name, 0);
	params[1] = OSSL_PARAM_construct_end();
	mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	if (mac == NULL)
		goto out;
	ctx = EVP_MAC_CTX_new(mac);
	if (ctx == NULL || EVP_MAC_init(ctx, key, key_len, params) != 1)
		goto out;
	if (EVP_MAC_update(ctx, a, a_len) != 1 || (b_len && EVP_MAC_update(ctx, b, b_len) != 1))
		goto out;
	if (EVP_MAC_final(ctx, out, out_len, 32) != 1)
		goto out;
	rc = 0;
out:
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	return rc;
}

uint32_t stun_crc32(uint32_t crc, const uint8_t *buf, size_t n)
{
	/* Nibble table for the reflected polynomial 0xEDB88320: small and constant. */
	static const uint32_t tbl[16] = {
		0x00000000, 0x1DB71064, 0x3B6E20C8, 0x26D930AC, 0x76DC4190, 0x6B6B51F4,
		0x4DB26158, 0x5005713C, 0xEDB88320, 0xF00F9344, 0xD6D6A3E8, 0xCB61B38C,
		0x9B64C2B0, 0x86D3D2D4, 0xA00AE278, 0xBDBDF21C,
	};
	crc = ~crc;
	for (size_t i = 0; i < n; i++) {
		crc ^= buf[i];
		crc = (crc >> 4) ^ tbl[crc & 15];
		crc = (crc >> 4) ^ tbl[crc & 15];
	}
	return ~crc;
}

/* The MAC/CRC covers the message up to the attribute at hoff, with the header's length field
 * set as if the message ended right after that attribute (value length vlen). */
static void patched_header(const struct stun_msg *msg, uint32_t hoff, size_t vlen,
			   uint8_t hdr[STUN_HEADER_LEN])
{
	memcpy(hdr, msg->buf, STUN_HEADER_LEN);
	wire_put_u16(hdr + 2, (uint16_t)(hoff - STUN_HEADER_LEN + 4 + vlen));
}

static int check_mac(const struct stun_msg *msg, uint32_t hoff, const char *md, const uint8_t *key,
		     size_t key_len)
{
	uint8_t hdr[STUN_HEADER_LEN], mac[32];
	size_t mac_len = 0;
	size_t vlen;
	int rc;

	if (msg == NULL || (key == NULL && key_len != 0))
		return -EINVAL;
	assert(msg->magic == STUN_MSG_MAGIC);
	if (hoff == 0)
		return -ENOENT;
	vlen = wire_get_u16(msg->buf + hoff + 2);
	patched_header(msg, hoff, vlen, hdr);
	if (stun_hmac2(md, key, key_len, hdr, sizeof(hdr), msg->buf + STUN_HEADER_LEN,
		       hoff - STUN_HEADER_LEN, mac, &mac_len) != 0)
		return -EIO;
	/* The parser guarantees vlen <= mac_len (20 for SHA1, 16..32 for SHA256). */
	rc = CRYPTO_memcmp(mac, msg->buf + hoff + 4, vlen) == 0 ? 0 : -EACCES;
	explicit_bzero(mac, sizeof(mac));
	return rc;
}

int stun_msg_check_integrity(const struct stun_msg *msg, const uint8_t *key, size_t key_len)
{
	return check_mac(msg, msg ? msg->mi_off : 0, "SHA1", key, key_len);
}

int stun_msg_check_integrity_sha256(const struct stun_msg *msg, const uint8_t *key, size_t key_len)
{
	return check_mac(msg, msg ? msg->mi256_off : 0, "SHA256", key, key_len);
}

int stun_msg_check_fingerprint(const struct stun_msg *msg)
{
	uint8_t hdr[STUN_HEADER_LEN];
	uint32_t crc;

	if (msg == NULL)
		return -EINVAL;
	assert(msg->magic == STUN_MSG_MAGIC);
	if (msg->fp_off == 0)
		return -ENOENT;
	patched_header(msg, msg->fp_off, 4, hdr);
	crc = stun_crc32(0, hdr, sizeof(hdr));
	crc = stun_crc32(crc, msg->buf + STUN_HEADER_LEN, msg->fp_off - STUN_HEADER_LEN);
	crc ^= STUN_FINGERPRINT_XOR;
	return wire_get_u32(msg->buf + msg->fp_off + 4) == crc ? 0 : -EBADMSG;
}

/* In the builder the buffer is ours and its length field already counts the new attribute,
 * so the MAC is taken over the prefix as it stands. */
static void build_mac(struct stun_builder *b, uint16_t type, const char *md, size_t vlen,
		      uint8_t max_stage, uint8_t new_stage, const uint8_t *key, size_t key_len)
{
	uint8_t mac[32];
	size_t mac_len = 0;
	uint8_t *v;
	size_t hoff;

	if (b->err)
		return;
	if (key == NULL && key_len != 0) {
		b->err = -EINVAL;
		return;
	}
	v = stun_build_append_final(b, type, vlen, max_stage, new_stage);
	if (v == NULL)
		return;
	hoff = (size_t)(v - b->buf) - 4;
	if (stun_hmac2(md, key, key_len, b->buf, hoff, NULL, 0, mac, &mac_len) != 0) {
		b->err = -EIO;
		return;
	}
	memcpy(v, mac, vlen);
	explicit_bzero(mac, sizeof(mac));
}

void stun_build_integrity(struct stun_builder *b, const uint8_t *key, size_t key_len)
{
	build_mac(b, STUN_ATTR_MESSAGE_INTEGRITY, "SHA1", 20, STAGE_OPEN, STAGE_AFTER_MI, key,
		  key_len);
}

void stun_build_integrity_sha256_len(struct stun_builder *b, const uint8_t *key, size_t key_len,
				     size_t len)
{
	if (len < 16 || len > 32 || (len & 3) != 0) {
		if (b->err == 0)
			b->err = -EINVAL;
		return;
	}
	build_mac(b, STUN_ATTR_MESSAGE_INTEGRITY_SHA256, "SHA256", len, STAGE_AFTER_MI,
		  STAGE_AFTER_MI256, key, key_len);
}

void stun_build_integrity_sha256(struct stun_builder *b, const uint8_t *key, size_t key_len)
{
	stun_build_integrity_sha256_len(b, key, key_len, 32);
}

void stun_build_fingerprint(struct stun_builder *b)
{
	uint8_t *v = stun_build_append_final(b, STUN_ATTR_FINGERPRINT, 4, STAGE_AFTER_MI256,
					     STAGE_AFTER_FP);
	size_t hoff;

	if (v == NULL)
		return;
	hoff = (size_t)(v - b->buf) - 4;
	wire_put_u32(v, stun_crc32(0, b->buf, hoff) ^ STUN_FINGERPRINT_XOR);
}
