/* libFuzzer target: STUN parser, every getter, the size check, integrity/fingerprint, rebuild. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "stun/stun.h"
#include "stun/stun_auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise_getters(const struct stun_msg *m)
{
	static const uint16_t addr_types[] = {
		STUN_ATTR_MAPPED_ADDRESS, STUN_ATTR_XOR_MAPPED_ADDRESS, STUN_ATTR_XOR_PEER_ADDRESS,
		STUN_ATTR_XOR_RELAYED_ADDRESS, STUN_ATTR_ALTERNATE_SERVER
	};
	static const uint16_t str_types[] = { STUN_ATTR_USERNAME, STUN_ATTR_REALM, STUN_ATTR_NONCE,
					      STUN_ATTR_SOFTWARE, STUN_ATTR_ALTERNATE_DOMAIN };
	struct sockaddr_storage ss;
	const char *s;
	const uint8_t *raw;
	size_t n;
	uint32_t u32, feat;
	uint64_t u64;
	uint16_t u16, list[8];
	uint8_t u8a, u8b;
	int i1, i2;
	bool b;
	char copy[64];

	for (size_t i = 0; i < sizeof(addr_types) / sizeof(addr_types[0]); i++)
		(void)stun_msg_get_addr(m, addr_types[i], &ss);
	for (size_t i = 0; i < sizeof(str_types) / sizeof(str_types[0]); i++) {
		(void)stun_msg_get_string(m, str_types[i], &s, &n);
		(void)stun_msg_copy_string(m, str_types[i], copy, sizeof(copy));
	}
	for (unsigned i = 0; i < 3; i++)
		(void)stun_msg_get_addr_nth(m, STUN_ATTR_XOR_RELAYED_ADDRESS, i, &ss);
	for (unsigned i = 0; i < stun_msg_peer_count(m) + 1; i++)
		(void)stun_msg_get_peer(m, i, &ss);
	(void)stun_msg_get_raw(m, STUN_ATTR_DATA, &raw, &n);
	(void)stun_msg_get_lifetime(m, &u32);
	(void)stun_msg_get_channel(m, STUN_CHAN_RFC8656, &u16);
	(void)stun_msg_get_error(m, &i1, &s, &n);
	(void)stun_msg_get_requested_transport(m, &u8a);
	(void)stun_msg_get_family(m, STUN_ATTR_REQUESTED_ADDRESS_FAMILY, &i1);
	(void)stun_msg_get_family(m, STUN_ATTR_ADDITIONAL_ADDRESS_FAMILY, &i1);
	(void)stun_msg_get_even_port(m, &b);
	(void)stun_msg_get_reservation_token(m, &u64);
	(void)stun_msg_get_connection_id(m, &u32);
	(void)stun_msg_get_address_error(m, &i1, &i2, &s, &n);
	(void)stun_msg_get_icmp(m, &u8a, &u8b, &u32);
	(void)stun_msg_get_password_algorithm(m, &u16);
	(void)stun_msg_get_password_algorithms(m, list, 8, &n);
	(void)stun_msg_get_unknown_attributes(m, list, 8, &n);
	(void)stun_msg_get_userhash(m, &raw);
	(void)stun_msg_get_u32(m, STUN_ATTR_PRIORITY, &u32);
	(void)stun_msg_get_u64(m, STUN_ATTR_ICE_CONTROLLING, &u64);
	if (stun_msg_get_string(m, STUN_ATTR_NONCE, &s, &n) == 0) {
		static const uint8_t nkey[32] = { 7 };
		(void)stun_nonce_features(s, n, &feat);
		(void)stun_nonce_check(nkey, sizeof(nkey), s, n, 1000, 600, NULL, 0, &feat);
	}
	if (stun_msg_get_string(m, STUN_ATTR_USERNAME, &s, &n) == 0)
		(void)stun_rest_expiry(s, n, &u64);
}

/* The size check the server runs before authentication (stun_msg_check_sizes): a failure
 * names an attribute the message has; a pass means the fixed-size getters read theirs
 * (CONNECTION-ID of Connect/ConnectionBind/ConnectionAttempt among them). */
static void exercise_sizes(const struct stun_msg *m)
{
	uint16_t bad = 0;
	uint32_t u32;
	uint64_t u64;

	if (stun_msg_check_sizes(m, &bad) != 0) {
		if (!stun_msg_has(m, bad))
			__builtin_trap();
		return;
	}
	if ((stun_msg_has(m, STUN_ATTR_CONNECTION_ID) &&
	     stun_msg_get_connection_id(m, &u32) != 0) ||
	    (stun_msg_has(m, STUN_ATTR_LIFETIME) && stun_msg_get_lifetime(m, &u32) != 0) ||
	    (stun_msg_has(m, STUN_ATTR_RESERVATION_TOKEN) &&
	     stun_msg_get_reservation_token(m, &u64) != 0))
		__builtin_trap();
}

/* Answers the message as a server would: an error response echoing its unknowns. */
static void exercise_reply(const struct stun_msg *m)
{
	static uint8_t out[2048];
	const uint16_t *unk;
	size_t len;
	struct stun_msg again;
	unsigned n = stun_msg_unknown(m, &unk);
	struct stun_error_opts o = {
		.unknown = unk, .n_unknown = n, .realm = "r", .nonce = "n", .fingerprint = true
	};
	if (stun_build_error_response(out, sizeof(out), m, n ? 420 : 400, &o, &len) == 0) {
		if (stun_msg_parse(&again, out, len) != 0 ||
		    stun_msg_check_fingerprint(&again) != 0)
			__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct stun_msg m;
	static const uint8_t key[] = "VOkJxbRl1RmTxUk/WvJxBt";

	(void)stun_is_stun(data, size);
	if (stun_msg_parse(&m, data, size) != 0)
		return 0;
	exercise_getters(&m);
	exercise_sizes(&m);
	(void)stun_msg_check_integrity(&m, key, sizeof(key) - 1);
	(void)stun_msg_check_integrity_sha256(&m, key, sizeof(key) - 1);
	(void)stun_msg_check_fingerprint(&m);
	exercise_reply(&m);
	return 0;
}
