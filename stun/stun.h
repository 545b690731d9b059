/* STUN (RFC 8489) / TURN (RFC 8656, RFC 6062) message codec: zero-copy parser, builder, integrity.
 *
 * No I/O, no allocation, no global state: every function works on caller memory and may be
 * called from any process (master, worker, turngatectl, tests, fuzzers) and any thread as
 * long as the structs passed in are not shared between threads.
 *
 * Errors: functions return 0 or a negative errno-style code:
 *   -EINVAL   bad argument from the caller (NULL, out-of-range value)
 *   -ENOMSG   the buffer is not a STUN message at all (top bits, magic cookie)
 *   -EBADMSG  malformed STUN message or malformed attribute value
 *   -ENOENT   the requested attribute is absent
 *   -ENOBUFS  the builder's buffer is too small
 *   -EACCES   MESSAGE-INTEGRITY(-SHA256) mismatch
 *   -EAFNOSUPPORT  address family not IPv4/IPv6
 *
 * Auth helpers (key derivation, REST credentials, nonces) are in stun/stun_auth.h;
 * ChannelData and stream framing in stun/stun_frame.h.
 */
#ifndef TG_STUN_STUN_H
#define TG_STUN_STUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "stun/stun_frame.h"

#define STUN_HEADER_LEN 20
#define STUN_MAGIC_COOKIE 0x2112A442u
#define STUN_TID_LEN 12
/* Largest message: the 16-bit length field is a multiple of 4. */
#define STUN_MAX_MSG_LEN (STUN_HEADER_LEN + 65532)
#define STUN_FINGERPRINT_XOR 0x5354554Eu

/* RFC limits on string attributes (bytes of UTF-8). */
#define STUN_MAX_USERNAME_LEN 513
#define STUN_MAX_REALM_LEN 763
#define STUN_MAX_NONCE_LEN 763
#define STUN_MAX_SOFTWARE_LEN 763
#define STUN_MAX_REASON_LEN 763

/* Message classes (2 bits). */
enum stun_class {
	STUN_REQUEST = 0,
	STUN_INDICATION = 1,
	STUN_SUCCESS = 2,
	STUN_ERROR = 3,
};

/* Methods (12 bits). */
enum stun_method {
	STUN_BINDING = 0x001,
	STUN_ALLOCATE = 0x003,
	STUN_REFRESH = 0x004,
	STUN_SEND = 0x006,
	STUN_DATA = 0x007,
	STUN_CREATE_PERMISSION = 0x008,
	STUN_CHANNEL_BIND = 0x009,
	STUN_CONNECT = 0x00A,		/* RFC 6062 */
	STUN_CONNECTION_BIND = 0x00B,	/* RFC 6062 */
	STUN_CONNECTION_ATTEMPT = 0x00C, /* RFC 6062 */
};

/* Attribute types. < 0x8000 are comprehension-required. */
enum stun_attr_type {
	STUN_ATTR_MAPPED_ADDRESS = 0x0001,
	STUN_ATTR_USERNAME = 0x0006,
	STUN_ATTR_MESSAGE_INTEGRITY = 0x0008,
	STUN_ATTR_ERROR_CODE = 0x0009,
	STUN_ATTR_UNKNOWN_ATTRIBUTES = 0x000A,
	STUN_ATTR_CHANNEL_NUMBER = 0x000C,
	STUN_ATTR_LIFETIME = 0x000D,
	STUN_ATTR_XOR_PEER_ADDRESS = 0x0012,
	STUN_ATTR_DATA = 0x0013,
	STUN_ATTR_REALM = 0x0014,
	STUN_ATTR_NONCE = 0x0015,
	STUN_ATTR_XOR_RELAYED_ADDRESS = 0x0016,
	STUN_ATTR_REQUESTED_ADDRESS_FAMILY = 0x0017,
	STUN_ATTR_EVEN_PORT = 0x0018,
	STUN_ATTR_REQUESTED_TRANSPORT = 0x0019,
	STUN_ATTR_DONT_FRAGMENT = 0x001A,
	STUN_ATTR_MESSAGE_INTEGRITY_SHA256 = 0x001C,
	STUN_ATTR_PASSWORD_ALGORITHM = 0x001D,
	STUN_ATTR_USERHASH = 0x001E,
	STUN_ATTR_XOR_MAPPED_ADDRESS = 0x0020,
	STUN_ATTR_RESERVATION_TOKEN = 0x0022,
	STUN_ATTR_PRIORITY = 0x0024,		/* ICE (RFC 8445), known so never 420 */
	STUN_ATTR_USE_CANDIDATE = 0x0025,	/* ICE */
	STUN_ATTR_CONNECTION_ID = 0x002A,	/* RFC 6062 */
	STUN_ATTR_ADDITIONAL_ADDRESS_FAMILY = 0x8000,
	STUN_ATTR_ADDRESS_ERROR_CODE = 0x8001,
	STUN_ATTR_PASSWORD_ALGORITHMS = 0x8002,
	STUN_ATTR_ALTERNATE_DOMAIN = 0x8003,
	STUN_ATTR_ICMP = 0x8004,
	STUN_ATTR_SOFTWARE = 0x8022,
	STUN_ATTR_ALTERNATE_SERVER = 0x8023,
	STUN_ATTR_FINGERPRINT = 0x8028,
	STUN_ATTR_ICE_CONTROLLED = 0x8029,
	STUN_ATTR_ICE_CONTROLLING = 0x802A,
};

/* PASSWORD-ALGORITHM values (RFC 8489 18.5). */
#define STUN_PWALG_MD5 0x0001
#define STUN_PWALG_SHA256 0x0002

/* REQUESTED-TRANSPORT protocol numbers. */
#define STUN_TRANSPORT_UDP 17
#define STUN_TRANSPORT_TCP 6

/* REQUESTED-/ADDITIONAL-ADDRESS-FAMILY wire values. */
#define STUN_FAMILY_IPV4 0x01
#define STUN_FAMILY_IPV6 0x02

/* Bounds of what the parser records. */
#define STUN_MAX_PEERS 16	/* XOR-PEER-ADDRESS occurrences kept */
#define STUN_MAX_UNKNOWN 16	/* unknown comprehension-required types kept */

/* Index of each known attribute in struct stun_msg.attr[] (internal order, do not store). */
enum stun_slot {
	STUN_SLOT_MAPPED_ADDRESS,
	STUN_SLOT_USERNAME,
	STUN_SLOT_MESSAGE_INTEGRITY,
	STUN_SLOT_ERROR_CODE,
	STUN_SLOT_UNKNOWN_ATTRIBUTES,
	STUN_SLOT_CHANNEL_NUMBER,
	STUN_SLOT_LIFETIME,
	STUN_SLOT_XOR_PEER_ADDRESS,
	STUN_SLOT_DATA,
	STUN_SLOT_REALM,
	STUN_SLOT_NONCE,
	STUN_SLOT_XOR_RELAYED_ADDRESS,
	STUN_SLOT_REQUESTED_ADDRESS_FAMILY,
	STUN_SLOT_EVEN_PORT,
	STUN_SLOT_REQUESTED_TRANSPORT,
	STUN_SLOT_DONT_FRAGMENT,
	STUN_SLOT_MESSAGE_INTEGRITY_SHA256,
	STUN_SLOT_PASSWORD_ALGORITHM,
	STUN_SLOT_USERHASH,
	STUN_SLOT_XOR_MAPPED_ADDRESS,
	STUN_SLOT_RESERVATION_TOKEN,
	STUN_SLOT_PRIORITY,
	STUN_SLOT_USE_CANDIDATE,
	STUN_SLOT_CONNECTION_ID,
	STUN_SLOT_ADDITIONAL_ADDRESS_FAMILY,
	STUN_SLOT_ADDRESS_ERROR_CODE,
	STUN_SLOT_PASSWORD_ALGORITHMS,
	STUN_SLOT_ALTERNATE_DOMAIN,
	STUN_SLOT_ICMP,
	STUN_SLOT_SOFTWARE,
	STUN_SLOT_ALTERNATE_SERVER,
	STUN_SLOT_FINGERPRINT,
	STUN_SLOT_ICE_CONTROLLED,
	STUN_SLOT_ICE_CONTROLLING,
	STUN_SLOT_COUNT
};

/* Where an attribute value lies: offset of the VALUE from the message start and its
 * unpadded length. off == 0 means absent (a value can never start at offset 0). */
struct stun_attr_ref {
	uint32_t off;
	uint16_t len;
};

#define STUN_MSG_MAGIC 0x5354554du

/* A parsed message. It points into the buffer given to stun_msg_parse(), which must stay
 * alive and unchanged while the struct is used. Treat the fields as read-only; use the
 * accessors below rather than the offsets. */
struct stun_msg {
	uint32_t magic;
	const uint8_t *buf;
	size_t len;			/* 20 + header length field */
	uint16_t type;			/* raw message type */
	uint16_t method;		/* enum stun_method */
	uint8_t cls;			/* enum stun_class */
	uint8_t tid[STUN_TID_LEN];
	struct stun_attr_ref attr[STUN_SLOT_COUNT];	/* first occurrence wins */
	struct stun_attr_ref peer[STUN_MAX_PEERS];	/* every XOR-PEER-ADDRESS, in order */
	unsigned n_peers;
	bool peers_truncated;		/* more than STUN_MAX_PEERS were present */
	uint16_t unknown[STUN_MAX_UNKNOWN];	/* unknown comprehension-required types */
	unsigned n_unknown;
	bool unknown_truncated;
	/* Offsets of the attribute HEADERS (type field), 0 if absent. */
	uint32_t mi_off;
	uint32_t mi256_off;
	uint32_t fp_off;
};

/* ---- Message type helpers ---------------------------------------------------------- */

/* Encodes method (12 bits) and class into the 14-bit message type. */
uint16_t stun_type_make(uint16_t method, uint8_t cls);
uint16_t stun_type_method(uint16_t type);
uint8_t stun_type_class(uint16_t type);
/* Human-readable names for logs ("Allocate", "error response"); never NULL. */
const char *stun_method_name(uint16_t method);
const char *stun_class_name(uint8_t cls);
const char *stun_attr_name(uint16_t attr_type);

/* Cheap pre-check on a received buffer: true if it may be STUN (top two bits zero,
 * magic cookie present, length multiple of 4). Does not check the length against len. */
bool stun_is_stun(const uint8_t *buf, size_t len);

/* Fills tid with 12 random bytes from OpenSSL's CSPRNG. 0 or -EIO. */
int stun_tid_random(uint8_t tid[STUN_TID_LEN]);

/* ---- Parsing ----------------------------------------------------------------------- */

/* Parses one complete message occupying exactly buf[0..len) (a datagram, or a frame cut
 * by stun_frame_next()). Validates the header and the attribute TLV structure only;
 * attribute values are validated by the typed getters. Rules:
 *  - first occurrence of a duplicated attribute wins (XOR-PEER-ADDRESS: all are listed);
 *  - after MESSAGE-INTEGRITY only MESSAGE-INTEGRITY-SHA256 and FINGERPRINT are looked at,
 *    after MESSAGE-INTEGRITY-SHA256 only FINGERPRINT; other attributes are ignored;
 *  - FINGERPRINT must be last (-EBADMSG otherwise);
 *  - MESSAGE-INTEGRITY must be 20 bytes, -SHA256 16..32 and a multiple of 4, FINGERPRINT
 *    4 bytes (-EBADMSG otherwise);
 *  - unknown comprehension-required types (< 0x8000) are listed in msg->unknown for a 420.
 * FINGERPRINT and integrity values are NOT checked here, see stun_msg_check_fingerprint()
 * and stun_msg_check_integrity*().
 * Returns 0, -EINVAL, -ENOMSG (not STUN) or -EBADMSG. On error *msg is unspecified. */
int stun_msg_parse(struct stun_msg *msg, const uint8_t *buf, size_t len);

/* True if the attribute is present (first occurrence before the integrity cut-off). */
bool stun_msg_has(const struct stun_msg *msg, uint16_t attr_type);

/* RFC 8489 14 / RFC 8656 18: a fixed-size attribute (LIFETIME, REQUESTED-TRANSPORT,
 * CHANNEL-NUMBER, EVEN-PORT, DONT-FRAGMENT, RESERVATION-TOKEN, the address families,
 * CONNECTION-ID, ICMP, USERHASH and the ICE attributes) whose length is another is
 * malformed: a server answers 400. Returns 0, or -EBADMSG with *bad_type (may be NULL)
 * set to the first such attribute in table order. */
int stun_msg_check_sizes(const struct stun_msg *msg, uint16_t *bad_type);

/* Raw value of the first occurrence of a known attribute type: *val points into the
 * message buffer, *len is the unpadded length. 0, -ENOENT, or -EINVAL for a type the
 * parser does not track (unknown types are not recorded). */
int stun_msg_get_raw(const struct stun_msg *msg, uint16_t attr_type, const uint8_t **val,
		     size_t *len);

/* String attribute (USERNAME, REALM, NONCE, SOFTWARE, ALTERNATE-DOMAIN): pointer into the
 * buffer, NOT NUL-terminated. -EBADMSG if longer than the RFC limit for that type or if it
 * contains a NUL byte. */
int stun_msg_get_string(const struct stun_msg *msg, uint16_t attr_type, const char **str,
			size_t *len);

/* Copies a string attribute into out (NUL-terminated). -ENOBUFS if cap is too small. */
int stun_msg_copy_string(const struct stun_msg *msg, uint16_t attr_type, char *out, size_t cap);

/* Address attributes. XOR variants (XOR-MAPPED-, XOR-RELAYED-, XOR-PEER-ADDRESS) are
 * un-XORed with the cookie and transaction id; plain ones (MAPPED-ADDRESS,
 * ALTERNATE-SERVER) are read as is. Writes a sockaddr_in or sockaddr_in6 into *out.
 * -EBADMSG on a bad length/family, -ENOENT if absent, -EINVAL if the type is not an
 * address attribute. */
int stun_msg_get_addr(const struct stun_msg *msg, uint16_t attr_type, struct sockaddr_storage *out);

/* The idx-th occurrence (0-based) of any address attribute, found by walking the message
 * (no storage limit): e.g. the second XOR-RELAYED-ADDRESS of a dual-stack allocation.
 * Same rules and returns as stun_msg_get_addr(); -ENOENT if there are fewer. */
int stun_msg_get_addr_nth(const struct stun_msg *msg, uint16_t attr_type, unsigned idx,
			  struct sockaddr_storage *out);

/* Number of XOR-PEER-ADDRESS occurrences recorded and the idx-th decoded one. */
unsigned stun_msg_peer_count(const struct stun_msg *msg);
int stun_msg_get_peer(const struct stun_msg *msg, unsigned idx, struct sockaddr_storage *out);

/* Unknown comprehension-required attribute types found (for the 420's UNKNOWN-ATTRIBUTES).
 * Returns the count (<= STUN_MAX_UNKNOWN) and sets *types to the array inside msg. */
unsigned stun_msg_unknown(const struct stun_msg *msg, const uint16_t **types);

/* Typed getters: 0, -ENOENT (absent) or -EBADMSG (wrong length/value). */
int stun_msg_get_lifetime(const struct stun_msg *msg, uint32_t *seconds);
/* CHANNEL-NUMBER; -EBADMSG if outside range (stun/stun_frame.h). */
int stun_msg_get_channel(const struct stun_msg *msg, enum stun_chan_range range, uint16_t *channel);
/* ERROR-CODE: code is 300..699; reason points into the buffer (may be NULL/0). */
int stun_msg_get_error(const struct stun_msg *msg, int *code, const char **reason,
		       size_t *reason_len);
/* REQUESTED-TRANSPORT protocol number (17 UDP, 6 TCP). */
int stun_msg_get_requested_transport(const struct stun_msg *msg, uint8_t *proto);
/* REQUESTED-/ADDITIONAL-ADDRESS-FAMILY as AF_INET/AF_INET6; -EAFNOSUPPORT for any other
 * wire value (server answers 440). */
int stun_msg_get_family(const struct stun_msg *msg, uint16_t attr_type, int *af);
/* EVEN-PORT: *reserve_next is the R bit. */
int stun_msg_get_even_port(const struct stun_msg *msg, bool *reserve_next);
/* RESERVATION-TOKEN: 8 opaque bytes returned as a big-endian integer. */
int stun_msg_get_reservation_token(const struct stun_msg *msg, uint64_t *token);
/* CONNECTION-ID (RFC 6062). */
int stun_msg_get_connection_id(const struct stun_msg *msg, uint32_t *id);
/* ADDRESS-ERROR-CODE (RFC 8656 14.12): family as AF_INET/AF_INET6, code 300..699. */
int stun_msg_get_address_error(const struct stun_msg *msg, int *af, int *code, const char **reason,
			       size_t *reason_len);
/* ICMP (RFC 8656 14.13). */
int stun_msg_get_icmp(const struct stun_msg *msg, uint8_t *icmp_type, uint8_t *icmp_code,
		      uint32_t *error_data);
/* PASSWORD-ALGORITHM: algorithm number (parameters must be empty for MD5/SHA256). */
int stun_msg_get_password_algorithm(const struct stun_msg *msg, uint16_t *alg);
/* PASSWORD-ALGORITHMS: up to max algorithm numbers into algs, count into *n;
 * -EBADMSG if malformed. Entries beyond max are skipped (still validated). */
int stun_msg_get_password_algorithms(const struct stun_msg *msg, uint16_t *algs, size_t max,
				     size_t *n);
/* UNKNOWN-ATTRIBUTES (in a 420 response): up to max types, count into *n. */
int stun_msg_get_unknown_attributes(const struct stun_msg *msg, uint16_t *types, size_t max,
				    size_t *n);
/* USERHASH: 32 bytes. */
int stun_msg_get_userhash(const struct stun_msg *msg, const uint8_t **hash);
/* A 32-bit attribute value (PRIORITY, generic): -EBADMSG unless exactly 4 bytes. */
int stun_msg_get_u32(const struct stun_msg *msg, uint16_t attr_type, uint32_t *v);
/* A 64-bit attribute value (ICE-CONTROLLED/-CONTROLLING, RESERVATION-TOKEN). */
int stun_msg_get_u64(const struct stun_msg *msg, uint16_t attr_type, uint64_t *v);

/* ---- Integrity and fingerprint ----------------------------------------------------- */

/* Checks MESSAGE-INTEGRITY (HMAC-SHA1) with key (long-term: the MD5/SHA-256 key from
 * stun_auth_key(); short-term: the password). Constant-time comparison.
 * 0 ok, -ENOENT absent, -EACCES mismatch, -EIO crypto failure. */
int stun_msg_check_integrity(const struct stun_msg *msg, const uint8_t *key, size_t key_len);
/* Same for MESSAGE-INTEGRITY-SHA256 (HMAC-SHA256, truncated value of 16..32 bytes). */
int stun_msg_check_integrity_sha256(const struct stun_msg *msg, const uint8_t *key, size_t key_len);
/* Checks FINGERPRINT (CRC-32 ^ 0x5354554E). 0 ok, -ENOENT absent, -EBADMSG mismatch. */
int stun_msg_check_fingerprint(const struct stun_msg *msg);

/* ---- Building ---------------------------------------------------------------------- */

#define STUN_BUILDER_MAGIC 0x53544e42u

/* Message builder writing into caller memory. Every stun_build_* call is a no-op once
 * err is set (sticky), so a sequence of calls is checked once with stun_build_finish(). */
struct stun_builder {
	uint32_t magic;
	uint8_t *buf;
	size_t cap;
	size_t len;		/* bytes written so far, header included */
	int err;		/* first error, 0 if none */
	uint8_t stage;		/* internal: 0 normal, 1 after MI, 2 after MI-SHA256, 3 after FP */
};

/* Starts a message of the given method and class with transaction id tid (copied) in
 * buf[0..cap). cap < 20 sets err = -ENOBUFS. */
void stun_build_init(struct stun_builder *b, uint8_t *buf, size_t cap, uint16_t method, uint8_t cls,
		     const uint8_t tid[STUN_TID_LEN]);
/* Starts a response (class STUN_SUCCESS or STUN_ERROR) to req: same method and tid. */
void stun_build_init_response(struct stun_builder *b, uint8_t *buf, size_t cap,
			      const struct stun_msg *req, uint8_t cls);

/* Appends an attribute with an opaque value (padding added). len > 65531 -> -EINVAL.
 * After MESSAGE-INTEGRITY only the integrity/fingerprint calls are allowed (-EINVAL). */
void stun_build_attr(struct stun_builder *b, uint16_t attr_type, const void *val, size_t len);
/* NUL-terminated string value (USERNAME, REALM, NONCE, SOFTWARE, ALTERNATE-DOMAIN). */
void stun_build_string(struct stun_builder *b, uint16_t attr_type, const char *str);
void stun_build_u32(struct stun_builder *b, uint16_t attr_type, uint32_t v);
void stun_build_u64(struct stun_builder *b, uint16_t attr_type, uint64_t v);
/* Zero-length flag attribute (DONT-FRAGMENT, USE-CANDIDATE). */
void stun_build_flag(struct stun_builder *b, uint16_t attr_type);
/* Address attribute; XORed automatically for the XOR-* types. sa is sockaddr_in/_in6. */
void stun_build_addr(struct stun_builder *b, uint16_t attr_type, const struct sockaddr *sa);
/* ERROR-CODE; reason NULL -> stun_error_reason(code). code must be 300..699. */
void stun_build_error_code(struct stun_builder *b, int code, const char *reason);
void stun_build_unknown_attributes(struct stun_builder *b, const uint16_t *types, size_t n);
void stun_build_lifetime(struct stun_builder *b, uint32_t seconds);
/* CHANNEL-NUMBER (value not range-checked so tests can send bad ones). */
void stun_build_channel(struct stun_builder *b, uint16_t channel);
void stun_build_requested_transport(struct stun_builder *b, uint8_t proto);
/* REQUESTED-/ADDITIONAL-ADDRESS-FAMILY from AF_INET/AF_INET6 (other values: raw byte). */
void stun_build_family(struct stun_builder *b, uint16_t attr_type, int af);
void stun_build_even_port(struct stun_builder *b, bool reserve_next);
void stun_build_reservation_token(struct stun_builder *b, uint64_t token);
void stun_build_connection_id(struct stun_builder *b, uint32_t id);
void stun_build_address_error(struct stun_builder *b, int af, int code, const char *reason);
void stun_build_icmp(struct stun_builder *b, uint8_t icmp_type, uint8_t icmp_code,
		     uint32_t error_data);
void stun_build_password_algorithm(struct stun_builder *b, uint16_t alg);
void stun_build_password_algorithms(struct stun_builder *b, const uint16_t *algs, size_t n);

/* Appends MESSAGE-INTEGRITY (HMAC-SHA1 over the message so far, with the length field
 * covering the MI attribute as RFC 8489 14.5 says). */
void stun_build_integrity(struct stun_builder *b, const uint8_t *key, size_t key_len);
/* Appends MESSAGE-INTEGRITY-SHA256 (full 32 bytes). May follow MESSAGE-INTEGRITY. */
void stun_build_integrity_sha256(struct stun_builder *b, const uint8_t *key, size_t key_len);
/* Same with the value truncated to len bytes (16..32, multiple of 4; else -EINVAL). */
void stun_build_integrity_sha256_len(struct stun_builder *b, const uint8_t *key, size_t key_len,
				     size_t len);
/* Appends FINGERPRINT; nothing may follow. */
void stun_build_fingerprint(struct stun_builder *b);

/* Returns b->err (0 on success) and the total message length in *len. The header length
 * field is kept current after every call, so the buffer is a valid message at any time. */
int stun_build_finish(const struct stun_builder *b, size_t *len);

/* ---- Errors ------------------------------------------------------------------------ */

/* Reason phrase for a STUN/TURN error code (300, 400, 401, 403, 420, 437, 438, 440, 441,
 * 442, 443, 446, 447, 486, 500, 508 and a few more); "Error" for unknown codes. */
const char *stun_error_reason(int code);

/* Optional parts of an error response. All fields may be NULL/0. */
struct stun_error_opts {
	const uint16_t *unknown;	/* UNKNOWN-ATTRIBUTES (for 420) */
	size_t n_unknown;
	const char *realm;		/* REALM (401, 438) */
	const char *nonce;		/* NONCE (401, 438) */
	const uint16_t *pw_algs;	/* PASSWORD-ALGORITHMS (401/438 with RFC 8489 cookie) */
	size_t n_pw_algs;
	const char *software;		/* SOFTWARE */
	const uint8_t *key;		/* if set, MESSAGE-INTEGRITY with this key */
	size_t key_len;
	bool fingerprint;		/* append FINGERPRINT */
};

/* Builds the complete error response for req with code (reason from stun_error_reason)
 * into buf[0..cap); *len gets its size. opts may be NULL. Returns 0, -ENOBUFS, -EINVAL. */
int stun_build_error_response(uint8_t *buf, size_t cap, const struct stun_msg *req, int code,
			      const struct stun_error_opts *opts, size_t *len);

#endif
