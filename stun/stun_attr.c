/* Typed getters over a parsed STUN message: address decoding, numbers, strings, lists. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "stun/stun.h"
#include "stun/stun_frame.h"
#include "stun/stun_int.h"
#include "stun/stun_wire.h"

static const struct stun_attr_ref *find_ref(const struct stun_msg *msg, uint16_t attr_type)
{
	int slot;

	assert(msg->magic == STUN_MSG_MAGIC);
	slot = stun_slot_of(attr_type);
	if (slot < 0)
		return NULL;
	return &msg->attr[slot];
}

bool stun_msg_has(const struct stun_msg *msg, uint16_t attr_type)
{
	const struct stun_attr_ref *ref;

	if (msg == NULL)
		return false;
	ref = find_ref(msg, attr_type);
	return ref != NULL && ref->off != 0;
}

int stun_msg_get_raw(const struct stun_msg *msg, uint16_t attr_type, const uint8_t **val,
		     size_t *len)
{
	const struct stun_attr_ref *ref;

	if (msg == NULL || val == NULL || len == NULL)
		return -EINVAL;
	ref = find_ref(msg, attr_type);
	if (ref == NULL)
		return -EINVAL;
	if (ref->off == 0)
		return -ENOENT;
	*val = msg->buf + ref->off;
	*len = ref->len;
	return 0;
}

/* Attributes whose value has one size (the getters below read them with it). */
static const struct {
	uint16_t type;
	uint16_t len;
} fixed_sizes[] = {
	{ STUN_ATTR_CHANNEL_NUMBER, 4 },
	{ STUN_ATTR_LIFETIME, 4 },
	{ STUN_ATTR_REQUESTED_ADDRESS_FAMILY, 4 },
	{ STUN_ATTR_ADDITIONAL_ADDRESS_FAMILY, 4 },
	{ STUN_ATTR_EVEN_PORT, 1 },
	{ STUN_ATTR_REQUESTED_TRANSPORT, 4 },
	{ STUN_ATTR_DONT_FRAGMENT, 0 },
	{ STUN_ATTR_RESERVATION_TOKEN, 8 },
	{ STUN_ATTR_CONNECTION_ID, 4 },
	{ STUN_ATTR_ICMP, 8 },
	{ STUN_ATTR_USERHASH, 32 },
	{ STUN_ATTR_PRIORITY, 4 },
	{ STUN_ATTR_USE_CANDIDATE, 0 },
	{ STUN_ATTR_ICE_CONTROLLED, 8 },
	{ STUN_ATTR_ICE_CONTROLLING, 8 },
};

int stun_msg_check_sizes(const struct stun_msg *msg, uint16_t *bad_type)
{
	if (msg == NULL)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(fixed_sizes) / sizeof(fixed_sizes[0]); i++) {
		const struct stun_attr_ref *ref = find_ref(msg, fixed_sizes[i].type);

		if (ref != NULL && ref->off != 0 && ref->len != fixed_sizes[i].len) {
			if (bad_type)
				*bad_type = fixed_sizes[i].type;
			return -EBADMSG;
		}
	}
	return 0;
}

/* Reads an attribute into a cursor over its value. */
static int attr_reader(const struct stun_msg *msg, uint16_t attr_type, struct wire_rd *r)
{
	const uint8_t *val;
	size_t len;
	int rc = stun_msg_get_raw(msg, attr_type, &val, &len);
	if (rc == 0)
		wire_rd_init(r, val, len);
	return rc;
}

static size_t string_limit(uint16_t attr_type)
{
	/* clang-format off */
	switch (attr_type) {
	case STUN_ATTR_USERNAME: return STUN_MAX_USERNAME_LEN;
	case STUN_ATTR_REALM: return STUN_MAX_REALM_LEN;
	case STUN_ATTR_NONCE: return STUN_MAX_NONCE_LEN;
	case STUN_ATTR_SOFTWARE: return STUN_MAX_SOFTWARE_LEN;
	case STUN_ATTR_ALTERNATE_DOMAIN: return 255;
	default: return 0;
	}
	/* clang-format on */
}

int stun_msg_get_string(const struct stun_msg *msg, uint16_t attr_type, const char **str,
			size_t *len)
{
	const uint8_t *val;
	size_t vlen;
	size_t limit = string_limit(attr_type);
	int rc;

	if (limit == 0 || str == NULL || len == NULL)
		return -EINVAL;
	rc = stun_msg_get_raw(msg, attr_type, &val, &vlen);
	if (rc != 0)
		return rc;
	/* A NUL inside would silently truncate the string for C callers. */
	if (vlen > limit || memchr(val, 0, vlen) != NULL)
		return -EBADMSG;
	*str = (const char *)val;
	*len = vlen;
	return 0;
}

int stun_msg_copy_string(const struct stun_msg *msg, uint16_t attr_type, char *out, size_t cap)
{
	const char *s;
	size_t n;
	int rc;

	if (out == NULL)
		return -EINVAL;
	rc = stun_msg_get_string(msg, attr_type, &s, &n);
	if (rc != 0)
		return rc;
	if (n >= cap)
		return -ENOBUFS;
	memcpy(out, s, n);
	out[n] = '\0';
	return 0;
}

static bool is_xor_addr(uint16_t t)
{
	return t == STUN_ATTR_XOR_MAPPED_ADDRESS || t == STUN_ATTR_XOR_PEER_ADDRESS ||
	       t == STUN_ATTR_XOR_RELAYED_ADDRESS;
}

static bool is_plain_addr(uint16_t t)
{
	return t == STUN_ATTR_MAPPED_ADDRESS || t == STUN_ATTR_ALTERNATE_SERVER;
}

/* Decodes an address value (family, port, address), un-XORing when asked. */
static int decode_addr(const struct stun_msg *msg, const uint8_t *val, size_t len, bool xored,
		       struct sockaddr_storage *out)
{
	struct wire_rd r;
	uint8_t mask[16];
	uint8_t fam;
	uint16_t port;
	size_t alen;
	const uint8_t *a;

	wire_put_u32(mask, STUN_MAGIC_COOKIE);
	memcpy(mask + 4, msg->tid, STUN_TID_LEN);
	wire_rd_init(&r, val, len);
	wire_rd_skip(&r, 1);
	fam = wire_rd_u8(&r);
	port = wire_rd_u16(&r);
	if (xored)
		port ^= (uint16_t)(STUN_MAGIC_COOKIE >> 16);
	alen = fam == 0x01 ? 4 : fam == 0x02 ? 16 : 0;
	if (alen == 0 || len != 4 + alen)
		return -EBADMSG;
	a = wire_rd_take(&r, alen);
	if (r.err)
		return -EBADMSG;
	memset(out, 0, sizeof(*out));
	if (alen == 4) {
		struct sockaddr_in *sin = (struct sockaddr_in *)out;
		uint8_t *dst = (uint8_t *)&sin->sin_addr;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		for (size_t i = 0; i < 4; i++)
			dst[i] = a[i] ^ (xored ? mask[i] : 0);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)out;
		uint8_t *dst = (uint8_t *)&sin6->sin6_addr;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		for (size_t i = 0; i < 16; i++)
			dst[i] = a[i] ^ (xored ? mask[i] : 0);
	}
	return 0;
}

int stun_msg_get_addr(const struct stun_msg *msg, uint16_t attr_type, struct sockaddr_storage *out)
{
	const uint8_t *val;
	size_t len;
	int rc;

	if (out == NULL || (!is_xor_addr(attr_type) && !is_plain_addr(attr_type)))
		return -EINVAL;
	rc = stun_msg_get_raw(msg, attr_type, &val, &len);
	if (rc != 0)
		return rc;
	return decode_addr(msg, val, len, is_xor_addr(attr_type), out);
}

/* Attributes the parser honoured end where the first integrity/fingerprint one starts. */
static size_t attr_end(const struct stun_msg *msg)
{
	size_t end = msg->len;
	if (msg->mi_off)
		end = msg->mi_off;
	else if (msg->mi256_off)
		end = msg->mi256_off;
	else if (msg->fp_off)
		end = msg->fp_off;
	return end;
}

int stun_msg_get_addr_nth(const struct stun_msg *msg, uint16_t attr_type, unsigned idx,
			  struct sockaddr_storage *out)
{
	struct wire_rd r;

	if (msg == NULL || out == NULL || (!is_xor_addr(attr_type) && !is_plain_addr(attr_type)))
		return -EINVAL;
	assert(msg->magic == STUN_MSG_MAGIC);
	wire_rd_init(&r, msg->buf, attr_end(msg));
	wire_rd_skip(&r, STUN_HEADER_LEN);
	/* The parser already validated the TLV chain, so this walk cannot overrun. */
	while (wire_rd_left(&r) >= 4) {
		uint16_t type = wire_rd_u16(&r);
		uint16_t vlen = wire_rd_u16(&r);
		const uint8_t *val = wire_rd_take(&r, vlen);
		wire_rd_skip(&r, STUN_PAD4(vlen) - vlen);
		if (r.err)
			return -EBADMSG;
		if (type == attr_type && idx-- == 0)
			return decode_addr(msg, val, vlen, is_xor_addr(attr_type), out);
	}
	return -ENOENT;
}

unsigned stun_msg_peer_count(const struct stun_msg *msg)
{
	return msg ? msg->n_peers : 0;
}

int stun_msg_get_peer(const struct stun_msg *msg, unsigned idx, struct sockaddr_storage *out)
{
	if (msg == NULL || out == NULL)
		return -EINVAL;
	assert(msg->magic == STUN_MSG_MAGIC);
	if (idx >= msg->n_peers)
		return -ENOENT;
	return decode_addr(msg, msg->buf + msg->peer[idx].off, msg->peer[idx].len, true, out);
}

unsigned stun_msg_unknown(const struct stun_msg *msg, const uint16_t **types)
{
	if (msg == NULL)
		return 0;
	if (types)
		*types = msg->unknown;
	return msg->n_unknown;
}

/* Reads an attribute whose value must be exactly len bytes; out is the caller's result
 * pointer, checked here so both fixed-width getters fail the same way in the same order. */
static int attr_reader_fixed(const struct stun_msg *msg, uint16_t attr_type, const void *out,
			     size_t len, struct wire_rd *r)
{
	int rc = attr_reader(msg, attr_type, r);
	if (rc != 0)
		return rc;
	if (out == NULL)
		return -EINVAL;
	if (r->len != len)
		return -EBADMSG;
	return 0;
}

int stun_msg_get_u32(const struct stun_msg *msg, uint16_t attr_type, uint32_t *v)
{
	struct wire_rd r;
	int rc = attr_reader_fixed(msg, attr_type, v, 4, &r);
	if (rc != 0)
		return rc;
	*v = wire_rd_u32(&r);
	return 0;
}

int stun_msg_get_u64(const struct stun_msg *msg, uint16_t attr_type, uint64_t *v)
{
	struct wire_rd r;
	int rc = attr_reader_fixed(msg, attr_type, v, 8, &r);
	if (rc != 0)
		return rc;
	*v = wire_rd_u64(&r);
	return 0;
}

int stun_msg_get_lifetime(const struct stun_msg *msg, uint32_t *seconds)
{
	return stun_msg_get_u32(msg, STUN_ATTR_LIFETIME, seconds);
}

int stun_msg_get_channel(const struct stun_msg *msg, enum stun_chan_range range, uint16_t *channel)
{
	uint32_t v;
	int rc = stun_msg_get_u32(msg, STUN_ATTR_CHANNEL_NUMBER, &v);
	if (rc != 0)
		return rc;
	if (channel == NULL)
		return -EINVAL;
	/* Channel number in the top 16 bits, RFFU in the low 16. */
	if (!stun_channel_valid((uint16_t)(v >> 16), range))
		return -EBADMSG;
	*channel = (uint16_t)(v >> 16);
	return 0;
}

int stun_msg_get_connection_id(const struct stun_msg *msg, uint32_t *id)
{
	return stun_msg_get_u32(msg, STUN_ATTR_CONNECTION_ID, id);
}

int stun_msg_get_reservation_token(const struct stun_msg *msg, uint64_t *token)
{
	return stun_msg_get_u64(msg, STUN_ATTR_RESERVATION_TOKEN, token);
}

/* Reads class/number and an optional reason; shared by ERROR-CODE and ADDRESS-ERROR-CODE. */
static int read_code(struct wire_rd *r, int *code, const char **reason, size_t *reason_len)
{
	uint8_t cls;
	uint8_t num;
	size_t n;

	wire_rd_skip(r, 2);
	cls = wire_rd_u8(r) & 0x07;
	num = wire_rd_u8(r);
	if (r->err || cls < 3 || cls > 6 || num > 99)
		return -EBADMSG;
	n = wire_rd_left(r);
	if (n > STUN_MAX_REASON_LEN)
		return -EBADMSG;
	if (code)
		*code = cls * 100 + num;
	if (reason)
		*reason = n ? (const char *)wire_rd_take(r, n) : NULL;
	if (reason_len)
		*reason_len = n;
	return 0;
}

int stun_msg_get_error(const struct stun_msg *msg, int *code, const char **reason,
		       size_t *reason_len)
{
	struct wire_rd r;
	int rc = attr_reader(msg, STUN_ATTR_ERROR_CODE, &r);
	return rc != 0 ? rc : read_code(&r, code, reason, reason_len);
}

static int family_to_af(uint8_t fam)
{
	return fam == STUN_FAMILY_IPV4 ? AF_INET : fam == STUN_FAMILY_IPV6 ? AF_INET6 : -1;
}

int stun_msg_get_address_error(const struct stun_msg *msg, int *af, int *code, const char **reason,
			       size_t *reason_len)
{
	struct wire_rd r;
	int rc = attr_reader(msg, STUN_ATTR_ADDRESS_ERROR_CODE, &r);
	int a;

	if (rc != 0)
		return rc;
	if (r.len < 4)
		return -EBADMSG;
	a = family_to_af(r.p[0]);
	if (a < 0)
		return -EBADMSG;
	if (af)
		*af = a;
	return read_code(&r, code, reason, reason_len);
}

int stun_msg_get_requested_transport(const struct stun_msg *msg, uint8_t *proto)
{
	uint32_t v;
	int rc = stun_msg_get_u32(msg, STUN_ATTR_REQUESTED_TRANSPORT, &v);
	if (rc == 0 && proto)
		*proto = (uint8_t)(v >> 24);
	return rc;
}

int stun_msg_get_family(const struct stun_msg *msg, uint16_t attr_type, int *af)
{
	uint32_t v;
	int rc;
	int a;

	if (attr_type != STUN_ATTR_REQUESTED_ADDRESS_FAMILY &&
	    attr_type != STUN_ATTR_ADDITIONAL_ADDRESS_FAMILY)
		return -EINVAL;
	rc = stun_msg_get_u32(msg, attr_type, &v);
	if (rc != 0)
		return rc;
	a = family_to_af((uint8_t)(v >> 24));
	if (a < 0)
		return -EAFNOSUPPORT;
	if (af)
		*af = a;
	return 0;
}

int stun_msg_get_even_port(const struct stun_msg *msg, bool *reserve_next)
{
	struct wire_rd r;
	int rc = attr_reader(msg, STUN_ATTR_EVEN_PORT, &r);
	if (rc != 0)
		return rc;
	if (r.len != 1)
		return -EBADMSG;
	if (reserve_next)
		*reserve_next = (r.p[0] & 0x80) != 0;
	return 0;
}

int stun_msg_get_icmp(const struct stun_msg *msg, uint8_t *icmp_type, uint8_t *icmp_code,
		      uint32_t *error_data)
{
	struct wire_rd r;
	int rc = attr_reader(msg, STUN_ATTR_ICMP, &r);
	uint8_t t;
	uint8_t c;
	uint32_t d;

	if (rc != 0)
		return rc;
	if (r.len != 8)
		return -EBADMSG;
	wire_rd_skip(&r, 2);
	t = wire_rd_u8(&r);
	c = wire_rd_u8(&r);
	d = wire_rd_u32(&r);
	if (icmp_type)
		*icmp_type = t;
	if (icmp_code)
		*icmp_code = c;
	if (error_data)
		*error_data = d;
	return 0;
}

/* Walks PASSWORD-ALGORITHM(S) entries: u16 alg, u16 param len, params padded to 4. */
static int read_pwalg(struct wire_rd *r, uint16_t *alg)
{
	uint16_t plen;

	*alg = wire_rd_u16(r);
	plen = wire_rd_u16(r);
	wire_rd_skip(r, STUN_PAD4(plen));
	if (r->err)
		return -EBADMSG;
	/* MD5 and SHA-256 take no parameters (RFC 8489 18.5). */
	if ((*alg == STUN_PWALG_MD5 || *alg == STUN_PWALG_SHA256) && plen != 0)
		return -EBADMSG;
	return 0;
}

int stun_msg_get_password_algorithm(const struct stun_msg *msg, uint16_t *alg)
{
	struct wire_rd r;
	uint16_t a;
	int rc = attr_reader(msg, STUN_ATTR_PASSWORD_ALGORITHM, &r);
	if (rc != 0)
		return rc;
	rc = read_pwalg(&r, &a);
	if (rc == 0 && wire_rd_left(&r) != 0)
		rc = -EBADMSG;
	if (rc == 0 && alg)
		*alg = a;
	return rc;
}

int stun_msg_get_password_algorithms(const struct stun_msg *msg, uint16_t *algs, size_t max,
				     size_t *n)
{
	struct wire_rd r;
	size_t count = 0;
	int rc = attr_reader(msg, STUN_ATTR_PASSWORD_ALGORITHMS, &r);
	if (rc != 0)
		return rc;
	if (r.len == 0)
		return -EBADMSG;
	/* Bounded by the attribute length: each entry takes at least 4 bytes. */
	while (wire_rd_left(&r) > 0) {
		uint16_t a;
		rc = read_pwalg(&r, &a);
		if (rc != 0)
			return rc;
		if (algs && count < max)
			algs[count] = a;
		count++;
	}
	if (n)
		*n = count < max ? count : max;
	return 0;
}

int stun_msg_get_unknown_attributes(const struct stun_msg *msg, uint16_t *types, size_t max,
				    size_t *n)
{
	struct wire_rd r;
	size_t count = 0;
	int rc = attr_reader(msg, STUN_ATTR_UNKNOWN_ATTRIBUTES, &r);
	if (rc != 0)
		return rc;
	if ((r.len & 1) != 0)
		return -EBADMSG;
	while (wire_rd_left(&r) > 0) {
		uint16_t t = wire_rd_u16(&r);
		if (types && count < max)
			types[count++] = t;
	}
	if (n)
		*n = count;
	return 0;
}

int stun_msg_get_userhash(const struct stun_msg *msg, const uint8_t **hash)
{
	const uint8_t *val;
	size_t len;
	int rc = stun_msg_get_raw(msg, STUN_ATTR_USERHASH, &val, &len);
	if (rc != 0)
		return rc;
	if (len != 32)
		return -EBADMSG;
	if (hash)
		*hash = val;
	return 0;
}
