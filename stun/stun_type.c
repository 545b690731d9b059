/* STUN message type encoding and names of methods, classes and attributes (for logs). */
#include <errno.h>
#include <openssl/rand.h>

#include "stun/stun.h"
#include "stun/stun_int.h"

uint16_t stun_type_make(uint16_t method, uint8_t cls)
{
	/* The class bits C0/C1 sit at bits 4 and 8, splitting the method into three runs. */
	return (uint16_t)((method & 0x000F) | ((method & 0x0070) << 1) | ((method & 0x0F80) << 2) |
			  ((cls & 1) << 4) | ((cls & 2) << 7));
}

uint16_t stun_type_method(uint16_t type)
{
	return (uint16_t)((type & 0x000F) | ((type & 0x00E0) >> 1) | ((type & 0x3E00) >> 2));
}

uint8_t stun_type_class(uint16_t type)
{
	return (uint8_t)(((type >> 4) & 1) | ((type >> 7) & 2));
}

const char *stun_method_name(uint16_t method)
{
	/* clang-format off */
	switch (method) {
	case STUN_BINDING: return "Binding";
	case STUN_ALLOCATE: return "Allocate";
	case STUN_REFRESH: return "Refresh";
	case STUN_SEND: return "Send";
	case STUN_DATA: return "Data";
	case STUN_CREATE_PERMISSION: return "CreatePermission";
	case STUN_CHANNEL_BIND: return "ChannelBind";
	case STUN_CONNECT: return "Connect";
	case STUN_CONNECTION_BIND: return "ConnectionBind";
	case STUN_CONNECTION_ATTEMPT: return "ConnectionAttempt";
	default: return "unknown-method";
	}
	/* clang-format on */
}

const char *stun_class_name(uint8_t cls)
{
	/* clang-format off */
	switch (cls) {
	case STUN_REQUEST: return "request";
	case STUN_INDICATION: return "indication";
	case STUN_SUCCESS: return "success response";
	case STUN_ERROR: return "error response";
	default: return "unknown-class";
	}
	/* clang-format on */
}

/* One table drives both the slot lookup and the names, so they cannot disagree. */
static const struct {
	uint16_t type;
	int8_t slot;
	const char *name;
} attr_table[] = {
	{ STUN_ATTR_MAPPED_ADDRESS, STUN_SLOT_MAPPED_ADDRESS, "MAPPED-ADDRESS" },
	{ STUN_ATTR_USERNAME, STUN_SLOT_USERNAME, "USERNAME" },
	{ STUN_ATTR_MESSAGE_INTEGRITY, STUN_SLOT_MESSAGE_INTEGRITY, "MESSAGE-INTEGRITY" },
	{ STUN_ATTR_ERROR_CODE, STUN_SLOT_ERROR_CODE, "ERROR-CODE" },
	{ STUN_ATTR_UNKNOWN_ATTRIBUTES, STUN_SLOT_UNKNOWN_ATTRIBUTES, "UNKNOWN-ATTRIBUTES" },
	{ STUN_ATTR_CHANNEL_NUMBER, STUN_SLOT_CHANNEL_NUMBER, "CHANNEL-NUMBER" },
	{ STUN_ATTR_LIFETIME, STUN_SLOT_LIFETIME, "LIFETIME" },
	{ STUN_ATTR_XOR_PEER_ADDRESS, STUN_SLOT_XOR_PEER_ADDRESS, "XOR-PEER-ADDRESS" },
	{ STUN_ATTR_DATA, STUN_SLOT_DATA, "DATA" },
	{ STUN_ATTR_REALM, STUN_SLOT_REALM, "REALM" },
	{ STUN_ATTR_NONCE, STUN_SLOT_NONCE, "NONCE" },
	{ STUN_ATTR_XOR_RELAYED_ADDRESS, STUN_SLOT_XOR_RELAYED_ADDRESS, "XOR-RELAYED-ADDRESS" },
	{ STUN_ATTR_REQUESTED_ADDRESS_FAMILY, STUN_SLOT_REQUESTED_ADDRESS_FAMILY,
	  "REQUESTED-ADDRESS-FAMILY" },
	{ STUN_ATTR_EVEN_PORT, STUN_SLOT_EVEN_PORT, "EVEN-PORT" },
	{ STUN_ATTR_REQUESTED_TRANSPORT, STUN_SLOT_REQUESTED_TRANSPORT, "REQUESTED-TRANSPORT" },
	{ STUN_ATTR_DONT_FRAGMENT, STUN_SLOT_DONT_FRAGMENT, "DONT-FRAGMENT" },
	{ STUN_ATTR_MESSAGE_INTEGRITY_SHA256, STUN_SLOT_MESSAGE_INTEGRITY_SHA256,
	  "MESSAGE-INTEGRITY-SHA256" },
	{ STUN_ATTR_PASSWORD_ALGORITHM, STUN_SLOT_PASSWORD_ALGORITHM, "PASSWORD-ALGORITHM" },
	{ STUN_ATTR_USERHASH, STUN_SLOT_USERHASH, "USERHASH" },
	{ STUN_ATTR_XOR_MAPPED_ADDRESS, STUN_SLOT_XOR_MAPPED_ADDRESS, "XOR-MAPPED-ADDRESS" },
	{ STUN_ATTR_RESERVATION_TOKEN, STUN_SLOT_RESERVATION_TOKEN, "RESERVATION-TOKEN" },
	{ STUN_ATTR_PRIORITY, STUN_SLOT_PRIORITY, "PRIORITY" },
	{ STUN_ATTR_USE_CANDIDATE, STUN_SLOT_USE_CANDIDATE, "USE-CANDIDATE" },
	{ STUN_ATTR_CONNECTION_ID, STUN_SLOT_CONNECTION_ID, "CONNECTION-ID" },
	{ STUN_ATTR_ADDITIONAL_ADDRESS_FAMILY, STUN_SLOT_ADDITIONAL_ADDRESS_FAMILY,
	  "ADDITIONAL-ADDRESS-FAMILY" },
	{ STUN_ATTR_ADDRESS_ERROR_CODE, STUN_SLOT_ADDRESS_ERROR_CODE, "ADDRESS-ERROR-CODE" },
	{ STUN_ATTR_PASSWORD_ALGORITHMS, STUN_SLOT_PASSWORD_ALGORITHMS, "PASSWORD-ALGORITHMS" },
	{ STUN_ATTR_ALTERNATE_DOMAIN, STUN_SLOT_ALTERNATE_DOMAIN, "ALTERNATE-DOMAIN" },
	{ STUN_ATTR_ICMP, STUN_SLOT_ICMP, "ICMP" },
	{ STUN_ATTR_SOFTWARE, STUN_SLOT_SOFTWARE, "SOFTWARE" },
	{ STUN_ATTR_ALTERNATE_SERVER, STUN_SLOT_ALTERNATE_SERVER, "ALTERNATE-SERVER" },
	{ STUN_ATTR_FINGERPRINT, STUN_SLOT_FINGERPRINT, "FINGERPRINT" },
	{ STUN_ATTR_ICE_CONTROLLED, STUN_SLOT_ICE_CONTROLLED, "ICE-CONTROLLED" },
	{ STUN_ATTR_ICE_CONTROLLING, STUN_SLOT_ICE_CONTROLLING, "ICE-CONTROLLING" },
};

int stun_slot_of(uint16_t attr_type)
{
	for (size_t i = 0; i < sizeof(attr_table) / sizeof(attr_table[0]); i++)
		if (attr_table[i].type == attr_type)
			return attr_table[i].slot;
	return -1;
}

const char *stun_attr_name(uint16_t attr_type)
{
	for (size_t i = 0; i < sizeof(attr_table) / sizeof(attr_table[0]); i++)
		if (attr_table[i].type == attr_type)
			return attr_table[i].name;
	return "unknown-attribute";
}

bool stun_is_stun(const uint8_t *buf, size_t len)
{
	if (buf == NULL || len < STUN_HEADER_LEN)
		return false;
	if ((buf[0] & 0xC0) != 0 || (buf[3] & 3) != 0)
		return false;
	return ((uint32_t)buf[4] << 24 | (uint32_t)buf[5] << 16 | (uint32_t)buf[6] << 8 | buf[7]) ==
	       STUN_MAGIC_COOKIE;
}

int stun_tid_random(uint8_t tid[STUN_TID_LEN])
{
	if (tid == NULL)
		return -EINVAL;
	return RAND_bytes(tid, STUN_TID_LEN) == 1 ? 0 : -EIO;
}
