/* STUN/TURN error codes: reason phrases and the error-response builder. */
#include <errno.h>
#include <string.h>

#include "stun/stun.h"

const char *stun_error_reason(int code)
{
	/* clang-format off */
	switch (code) {
	case 300: return "Try Alternate";
	case 400: return "Bad Request";
	case 401: return "Unauthenticated";
	case 403: return "Forbidden";
	case 405: return "Mobility Forbidden";
	case 420: return "Unknown Attribute";
	case 437: return "Allocation Mismatch";
	case 438: return "Stale Nonce";
	case 440: return "Address Family not Supported";
	case 441: return "Wrong Credentials";
	case 442: return "Unsupported Transport Protocol";
	case 443: return "Peer Address Family Mismatch";
	case 446: return "Connection Already Exists";
	case 447: return "Connection Timeout or Failure";
	case 486: return "Allocation Quota Reached";
	case 487: return "Role Conflict";
	case 500: return "Server Error";
	case 508: return "Insufficient Capacity";
	default: return "Error";
	}
	/* clang-format on */
}

int stun_build_error_response(uint8_t *buf, size_t cap, const struct stun_msg *req, int code,
			      const struct stun_error_opts *opts, size_t *len)
{
	struct stun_builder b;
	static const struct stun_error_opts none;

	if (req == NULL || buf == NULL || len == NULL)
		return -EINVAL;
	/* Indications and responses are never answered (RFC 8489 6.3). */
	if (req->cls != STUN_REQUEST)
		return -EINVAL;
	if (opts == NULL)
		opts = &none;
	stun_build_init_response(&b, buf, cap, req, STUN_ERROR);
	stun_build_error_code(&b, code, NULL);
	if (opts->n_unknown)
		stun_build_unknown_attributes(&b, opts->unknown, opts->n_unknown);
	if (opts->realm)
		stun_build_string(&b, STUN_ATTR_REALM, opts->realm);
	if (opts->nonce)
		stun_build_string(&b, STUN_ATTR_NONCE, opts->nonce);
	if (opts->n_pw_algs)
		stun_build_password_algorithms(&b, opts->pw_algs, opts->n_pw_algs);
	if (opts->software)
		stun_build_string(&b, STUN_ATTR_SOFTWARE, opts->software);
	if (opts->key)
		stun_build_integrity(&b, opts->key, opts->key_len);
	if (opts->fingerprint)
		stun_build_fingerprint(&b);
	return stun_build_finish(&b, len);
}
