/* STUN message builder: appends attributes into a caller buffer with a sticky error. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "stun/stun.h"
#include "stun/stun_int.h"
#include "stun/stun_wire.h"

enum {
	STAGE_OPEN,
	STAGE_AFTER_MI,
	STAGE_AFTER_MI256,
	STAGE_AFTER_FP
};

static void set_err(struct stun_builder *b, int err)
{
	if (b->err == 0)
		b->err = err;
}

void stun_build_init(struct stun_builder *b, uint8_t *buf, size_t cap, uint16_t method, uint8_t cls,
		     const uint8_t tid[STUN_TID_LEN])
{
	struct wire_wr w;

	memset(b, 0, sizeof(*b));
	b->magic = STUN_BUILDER_MAGIC;
	b->buf = buf;
	b->cap = cap > STUN_MAX_MSG_LEN ? STUN_MAX_MSG_LEN : cap;
	if (buf == NULL || tid == NULL || method > 0x0FFF || cls > 3) {
		b->err = -EINVAL;
		return;
	}
	wire_wr_init(&w, buf, b->cap, 0);
	wire_wr_u16(&w, stun_type_make(method, cls));
	wire_wr_u16(&w, 0);
	wire_wr_u32(&w, STUN_MAGIC_COOKIE);
	wire_wr_bytes(&w, tid, STUN_TID_LEN);
	b->err = w.err;
	b->len = w.err ? 0 : w.pos;
}

void stun_build_init_response(struct stun_builder *b, uint8_t *buf, size_t cap,
			      const struct stun_msg *req, uint8_t cls)
{
	static const uint8_t zero_tid[STUN_TID_LEN];

	if (req == NULL || (cls != STUN_SUCCESS && cls != STUN_ERROR)) {
		stun_build_init(b, buf, cap, 0, 0, zero_tid);
		set_err(b, -EINVAL);
		return;
	}
	stun_build_init(b, buf, cap, req->method, cls, req->tid);
}

/* Appends one TLV without the stage check and returns where its value starts (NULL on
 * error). The header length field is updated so the buffer always holds a valid message. */
static uint8_t *append_attr(struct stun_builder *b, uint16_t type, const void *val, size_t len)
{
	struct wire_wr w;
	size_t voff;

	assert(b->magic == STUN_BUILDER_MAGIC);
	if (b->err)
		return NULL;
	if (len > 0xFFFF - 4) {
		set_err(b, -EINVAL);
		return NULL;
	}
	wire_wr_init(&w, b->buf, b->cap, b->len);
	wire_wr_u16(&w, type);
	wire_wr_u16(&w, (uint16_t)len);
	voff = w.pos;
	if (val)
		wire_wr_bytes(&w, val, len);
	else
		wire_wr_zero(&w, len);
	wire_wr_zero(&w, STUN_PAD4(len) - len);
	if (w.err) {
		set_err(b, w.err);
		return NULL;
	}
	b->len = w.pos;
	wire_put_u16(b->buf + 2, (uint16_t)(b->len - STUN_HEADER_LEN));
	return b->buf + voff;
}

void stun_build_attr(struct stun_builder *b, uint16_t attr_type, const void *val, size_t len)
{
	if (b->err)
		return;
	if (b->stage != STAGE_OPEN || (val == NULL && len != 0)) {
		set_err(b, -EINVAL);
		return;
	}
	(void)append_attr(b, attr_type, val, len);
}

void stun_build_string(struct stun_builder *b, uint16_t attr_type, const char *str)
{
	if (str == NULL) {
		set_err(b, -EINVAL);
		return;
	}
	stun_build_attr(b, attr_type, str, strlen(str));
}

void stun_build_u32(struct stun_builder *b, uint16_t attr_type, uint32_t v)
{
	uint8_t q[4];

	wire_put_u32(q, v);
	stun_build_attr(b, attr_type, q, sizeof(q));
}

void stun_build_u64(struct stun_builder *b, uint16_t attr_type, uint64_t v)
{
	uint8_t q[8];

	wire_put_u32(q, (uint32_t)(v >> 32));
	wire_put_u32(q + 4, (uint32_t)v);
	stun_build_attr(b, attr_type, q, sizeof(q));
}

void stun_build_flag(struct stun_builder *b, uint16_t attr_type)
{
	stun_build_attr(b, attr_type, "", 0);
}

static bool is_xor_type(uint16_t t)
{
	return t == STUN_ATTR_XOR_MAPPED_ADDRESS || t == STUN_ATTR_XOR_PEER_ADDRESS ||
	       t == STUN_ATTR_XOR_RELAYED_ADDRESS;
}

void stun_build_addr(struct stun_builder *b, uint16_t attr_type, const struct sockaddr *sa)
{
	uint8_t v[20], mask[16];
	const uint8_t *a;
	size_t alen;
	uint16_t port;
	bool x;

	if (b->err)
		return;
	if (sa == NULL || b->len < STUN_HEADER_LEN) {
		set_err(b, -EINVAL);
		return;
	}
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
		a = (const uint8_t *)&sin->sin_addr;
		alen = 4;
		port = ntohs(sin->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;
		a = (const uint8_t *)&sin6->sin6_addr;
		alen = 16;
		port = ntohs(sin6->sin6_port);
	} else {
		set_err(b, -EAFNOSUPPORT);
		return;
	}
	x = is_xor_type(attr_type);
	/* Mask = magic cookie || transaction id, exactly as in the header. */
	memcpy(mask, b->buf + 4, 16);
	v[0] = 0;
	v[1] = alen == 4 ? 0x01 : 0x02;
	wire_put_u16(v + 2, x ? (uint16_t)(port ^ (STUN_MAGIC_COOKIE >> 16)) : port);
	for (size_t i = 0; i < alen; i++)
		v[4 + i] = a[i] ^ (x ? mask[i] : 0);
	stun_build_attr(b, attr_type, v, 4 + alen);
}

/* Shared by ERROR-CODE and ADDRESS-ERROR-CODE: first byte is 0 or the family. */
static void build_code(struct stun_builder *b, uint16_t type, uint8_t first, int code,
		       const char *reason)
{
	uint8_t v[4 + STUN_MAX_REASON_LEN];
	size_t n;

	if (b->err)
		return;
	if (code < 300 || code > 699) {
		set_err(b, -EINVAL);
		return;
	}
	if (reason == NULL)
		reason = stun_error_reason(code);
	n = strlen(reason);
	if (n > STUN_MAX_REASON_LEN) {
		set_err(b, -EINVAL);
		return;
	}
	v[0] = first;
	v[1] = 0;
	v[2] = (uint8_t)(code / 100);
	v[3] = (uint8_t)(code % 100);
	memcpy(v + 4, reason, n);
	stun_build_attr(b, type, v, 4 + n);
}

void stun_build_error_code(struct stun_builder *b, int code, const char *reason)
{
	build_code(b, STUN_ATTR_ERROR_CODE, 0, code, reason);
}

static uint8_t af_to_family(int af)
{
	return af == AF_INET ? STUN_FAMILY_IPV4 : af == AF_INET6 ? STUN_FAMILY_IPV6 : (uint8_t)af;
}

void stun_build_address_error(struct stun_builder *b, int af, int code, const char *reason)
{
	build_code(b, STUN_ATTR_ADDRESS_ERROR_CODE, af_to_family(af), code, reason);
}

void stun_build_unknown_attributes(struct stun_builder *b, const uint16_t *types, size_t n)
{
	uint8_t v[2 * 64];

	if (b->err)
		return;
	if ((types == NULL && n) || n > 64) {
		set_err(b, -EINVAL);
		return;
	}
	for (size_t i = 0; i < n; i++)
		wire_put_u16(v + 2 * i, types[i]);
	stun_build_attr(b, STUN_ATTR_UNKNOWN_ATTRIBUTES, v, 2 * n);
}

void stun_build_lifetime(struct stun_builder *b, uint32_t seconds)
{
	stun_build_u32(b, STUN_ATTR_LIFETIME, seconds);
}

void stun_build_channel(struct stun_builder *b, uint16_t channel)
{
	stun_build_u32(b, STUN_ATTR_CHANNEL_NUMBER, (uint32_t)channel << 16);
}

void stun_build_requested_transport(struct stun_builder *b, uint8_t proto)
{
	stun_build_u32(b, STUN_ATTR_REQUESTED_TRANSPORT, (uint32_t)proto << 24);
}

void stun_build_family(struct stun_builder *b, uint16_t attr_type, int af)
{
	stun_build_u32(b, attr_type, (uint32_t)af_to_family(af) << 24);
}

void stun_build_even_port(struct stun_builder *b, bool reserve_next)
{
	uint8_t v = reserve_next ? 0x80 : 0;
	stun_build_attr(b, STUN_ATTR_EVEN_PORT, &v, 1);
}

void stun_build_reservation_token(struct stun_builder *b, uint64_t token)
{
	stun_build_u64(b, STUN_ATTR_RESERVATION_TOKEN, token);
}

void stun_build_connection_id(struct stun_builder *b, uint32_t id)
{
	stun_build_u32(b, STUN_ATTR_CONNECTION_ID, id);
}

void stun_build_icmp(struct stun_builder *b, uint8_t icmp_type, uint8_t icmp_code,
		     uint32_t error_data)
{
	uint8_t v[8] = { 0, 0, icmp_type, icmp_code };

	wire_put_u32(v + 4, error_data);
	stun_build_attr(b, STUN_ATTR_ICMP, v, sizeof(v));
}

void stun_build_password_algorithm(struct stun_builder *b, uint16_t alg)
{
	uint8_t v[4] = { 0 };

	wire_put_u16(v, alg);
	stun_build_attr(b, STUN_ATTR_PASSWORD_ALGORITHM, v, sizeof(v));
}

void stun_build_password_algorithms(struct stun_builder *b, const uint16_t *algs, size_t n)
{
	uint8_t v[4 * 16];

	if (b->err)
		return;
	if (algs == NULL || n == 0 || n > 16) {
		set_err(b, -EINVAL);
		return;
	}
	memset(v, 0, sizeof(v));
	for (size_t i = 0; i < n; i++)
		wire_put_u16(v + 4 * i, algs[i]);
	stun_build_attr(b, STUN_ATTR_PASSWORD_ALGORITHMS, v, 4 * n);
}

uint8_t *stun_build_append_final(struct stun_builder *b, uint16_t type, size_t len,
				 uint8_t max_stage, uint8_t new_stage)
{
	uint8_t *v;

	if (b->err)
		return NULL;
	if (b->stage > max_stage) {
		set_err(b, -EINVAL);
		return NULL;
	}
	v = append_attr(b, type, NULL, len);
	if (v)
		b->stage = new_stage;
	return v;
}

int stun_build_finish(const struct stun_builder *b, size_t *len)
{
	if (b == NULL)
		return -EINVAL;
	assert(b->magic == STUN_BUILDER_MAGIC);
	if (b->err)
		return b->err;
	if (len)
		*len = b->len;
	return 0;
}
