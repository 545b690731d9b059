/* STUN message parser: validates the header and attribute TLVs and indexes attributes. */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "stun/stun.h"
#include "stun/stun_int.h"
#include "stun/stun_wire.h"

/* Which attributes still count, given what integrity/fingerprint attributes came before
 * (RFC 8489 14.5/14.6: everything after MESSAGE-INTEGRITY except MI-SHA256 and FINGERPRINT
 * is ignored; FINGERPRINT is always last). */
enum parse_stage {
	STAGE_OPEN,
	STAGE_AFTER_MI,
	STAGE_AFTER_MI256,
	STAGE_AFTER_FP
};

static int parse_header(struct stun_msg *msg, const uint8_t *buf, size_t len)
{
	struct wire_rd r;
	uint16_t type;
	uint16_t mlen;
	uint32_t cookie;
	const uint8_t *tid;

	wire_rd_init(&r, buf, len);
	type = wire_rd_u16(&r);
	mlen = wire_rd_u16(&r);
	cookie = wire_rd_u32(&r);
	tid = wire_rd_take(&r, STUN_TID_LEN);
	if (r.err)
		return -EBADMSG;
	if ((type & 0xC000) != 0 || cookie != STUN_MAGIC_COOKIE)
		return -ENOMSG;
	if ((mlen & 3) != 0 || (size_t)mlen + STUN_HEADER_LEN != len)
		return -EBADMSG;
	msg->magic = STUN_MSG_MAGIC;
	msg->buf = buf;
	msg->len = len;
	msg->type = type;
	msg->method = stun_type_method(type);
	msg->cls = stun_type_class(type);
	memcpy(msg->tid, tid, STUN_TID_LEN);
	return 0;
}

static void note_unknown(struct stun_msg *msg, uint16_t type)
{
	for (unsigned i = 0; i < msg->n_unknown; i++)
		if (msg->unknown[i] == type)
			return;
	if (msg->n_unknown < STUN_MAX_UNKNOWN)
		msg->unknown[msg->n_unknown++] = type;
	else
		msg->unknown_truncated = true;
}

static void note_known(struct stun_msg *msg, int slot, uint32_t voff, uint16_t vlen)
{
	if (slot == STUN_SLOT_XOR_PEER_ADDRESS) {
		if (msg->n_peers < STUN_MAX_PEERS) {
			msg->peer[msg->n_peers].off = voff;
			msg->peer[msg->n_peers].len = vlen;
			msg->n_peers++;
		} else {
			msg->peers_truncated = true;
		}
	}
	if (msg->attr[slot].off == 0) {
		msg->attr[slot].off = voff;
		msg->attr[slot].len = vlen;
	}
}

/* Handles the integrity/fingerprint attributes; returns the new stage or -EBADMSG. */
static int note_integrity(struct stun_msg *msg, uint16_t type, uint32_t hoff, uint16_t vlen,
			  int stage)
{
	switch (type) {
	case STUN_ATTR_MESSAGE_INTEGRITY:
		/* Sizes are checked only for attributes that count: an ignored one may be
		 * anything (a second MI, or MI after MI-SHA256). */
		if (stage != STAGE_OPEN)
			return stage;
		if (vlen != 20)
			return -EBADMSG;
		msg->mi_off = hoff;
		note_known(msg, STUN_SLOT_MESSAGE_INTEGRITY, hoff + 4, vlen);
		return STAGE_AFTER_MI;
	case STUN_ATTR_MESSAGE_INTEGRITY_SHA256:
		if (stage >= STAGE_AFTER_MI256)
			return stage;
		if (vlen < 16 || vlen > 32 || (vlen & 3) != 0)
			return -EBADMSG;
		msg->mi256_off = hoff;
		note_known(msg, STUN_SLOT_MESSAGE_INTEGRITY_SHA256, hoff + 4, vlen);
		return STAGE_AFTER_MI256;
	default: /* FINGERPRINT */
		if (vlen != 4)
			return -EBADMSG;
		msg->fp_off = hoff;
		note_known(msg, STUN_SLOT_FINGERPRINT, hoff + 4, vlen);
		return STAGE_AFTER_FP;
	}
}

static bool is_integrity_type(uint16_t type)
{
	return type == STUN_ATTR_MESSAGE_INTEGRITY || type == STUN_ATTR_MESSAGE_INTEGRITY_SHA256 ||
	       type == STUN_ATTR_FINGERPRINT;
}

static int parse_attrs(struct stun_msg *msg)
{
	struct wire_rd r;
	int stage = STAGE_OPEN;

	wire_rd_init(&r, msg->buf, msg->len);
	wire_rd_skip(&r, STUN_HEADER_LEN);
	/* Bounded: each round consumes at least 4 bytes of a buffer of at most 64 KiB. */
	while (wire_rd_left(&r) > 0) {
		uint32_t hoff = (uint32_t)r.pos;
		uint16_t type = wire_rd_u16(&r);
		uint16_t vlen = wire_rd_u16(&r);
		int slot;

		wire_rd_skip(&r, STUN_PAD4(vlen));
		if (r.err)
			return -EBADMSG;	/* header or value overflows the message */
		if (stage == STAGE_AFTER_FP)
			return -EBADMSG;	/* FINGERPRINT must be last */
		if (is_integrity_type(type)) {
			stage = note_integrity(msg, type, hoff, vlen, stage);
			if (stage < 0)
				return stage;
			continue;
		}
		if (stage != STAGE_OPEN)
			continue;
		slot = stun_slot_of(type);
		if (slot >= 0)
			note_known(msg, slot, hoff + 4, vlen);
		else if (type < 0x8000)
			note_unknown(msg, type);
	}
	return 0;
}

int stun_msg_parse(struct stun_msg *msg, const uint8_t *buf, size_t len)
{
	int rc;

	if (msg == NULL || buf == NULL)
		return -EINVAL;
	memset(msg, 0, sizeof(*msg));
	rc = parse_header(msg, buf, len);
	if (rc == 0)
		rc = parse_attrs(msg);
	if (rc != 0)
		msg->magic = 0;
	return rc;
}
