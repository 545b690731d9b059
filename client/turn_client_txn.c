/* TURN client transactions: build, send, retransmit, match the response, long-term auth. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/turn_client_int.h"

/* Appends USERNAME/REALM/NONCE (+ PASSWORD-ALGORITHMS/-ALGORITHM) and the integrity
 * attributes. MESSAGE-INTEGRITY is always sent so servers that only know RFC 5389 can
 * check it; -SHA256 is added when the server advertised PASSWORD-ALGORITHMS. */
static void add_auth(struct turn_client *c, struct stun_builder *b)
{
	stun_build_string(b, STUN_ATTR_USERNAME, c->username);
	stun_build_string(b, STUN_ATTR_REALM, c->realm);
	stun_build_string(b, STUN_ATTR_NONCE, c->nonce);
	if (c->pwalgs_len) {
		stun_build_attr(b, STUN_ATTR_PASSWORD_ALGORITHMS, c->pwalgs, c->pwalgs_len);
		stun_build_password_algorithm(b, c->pw_alg);
	}
	stun_build_integrity(b, c->key, c->key_len);
	if (c->pwalgs_len)
		stun_build_integrity_sha256(b, c->key, c->key_len);
}

static int build_request(struct turn_client *c, uint16_t method, turn_client_attrs_fn fn, void *arg,
			 bool auth, uint8_t *buf, size_t cap, size_t *len,
			 uint8_t tid[STUN_TID_LEN])
{
	struct stun_builder b;
	int rc = stun_tid_random(tid);
	if (rc != 0)
		return rc;
	stun_build_init(&b, buf, cap, method, STUN_REQUEST, tid);
	if (fn)
		fn(&b, arg);
	if (c->software)
		stun_build_string(&b, STUN_ATTR_SOFTWARE, c->software);
	if (auth)
		add_auth(c, &b);
	if (c->fingerprint)
		stun_build_fingerprint(&b);
	return stun_build_finish(&b, len);
}

/* Checks one received message against the outstanding transaction: 1 if it is the
 * response (copied into rsp), 0 if it is something else (relayed data gets queued). */
static int match_response(struct turn_client *c, const uint8_t *m, size_t n,
			  const uint8_t tid[STUN_TID_LEN], bool auth, struct turn_response *rsp)
{
	struct stun_msg msg;

	if (tc_is_relayed(m, n)) {
		tc_queue_push(c, m, n);
		return 0;
	}
	if (stun_msg_parse(&msg, m, n) != 0 || memcmp(msg.tid, tid, STUN_TID_LEN) != 0 ||
	    (msg.cls != STUN_SUCCESS && msg.cls != STUN_ERROR) || n > sizeof(rsp->buf))
		return 0;
	/* A forged response fails integrity and is ignored (RFC 8489 9.2.5). */
	if (auth && msg.mi_off && stun_msg_check_integrity(&msg, c->key, c->key_len) != 0)
		return 0;
	memcpy(rsp->buf, m, n);
	rsp->len = n;
	if (stun_msg_parse(&rsp->msg, rsp->buf, n) != 0)
		return 0;
	rsp->error_code = 0;
	if (msg.cls == STUN_ERROR &&
	    stun_msg_get_error(&rsp->msg, &rsp->error_code, NULL, NULL) != 0)
		rsp->error_code = 500;	/* error response without a usable ERROR-CODE */
	return 1;
}

/* One transaction: send, retransmit over UDP/DTLS with a doubling RTO, wait for the match. */
static int txn_once(struct turn_client *c, const uint8_t *req, size_t len,
		    const uint8_t tid[STUN_TID_LEN], bool auth, struct turn_response *rsp)
{
	int64_t now = tc_now_ms();
	int64_t deadline = now + c->timeout_ms;
	int64_t rto = c->rto_ms, next = now + rto;
	int sent = 0;
	int rc = tc_send(c, req, len);

	if (rc != 0)
		return rc;
	/* Bounded: each round either receives a message or advances to the next
	 * retransmission; both run out by the deadline. */
	for (;;) {
		bool udp = tc_is_dgram(c);
		int64_t until = udp && sent < c->max_retrans && next < deadline ? next : deadline;
		const uint8_t *m;
		size_t n;
		rc = tc_recv_msg(c, until, &m, &n);
		if (rc == 0) {
			if (match_response(c, m, n, tid, auth, rsp))
				return 0;
			continue;
		}
		if (rc != -ETIMEDOUT || until == deadline)
			return rc;
		rto *= 2;
		next = tc_now_ms() + rto;
		sent++;
		rc = tc_send(c, req, len);
		if (rc != 0)
			return rc;
	}
}

/* Learns realm/nonce/algorithms from a 401 or 438 and derives the key. */
static int take_challenge(struct turn_client *c, const struct stun_msg *m)
{
	uint16_t algs[8];
	size_t n = 0;
	const uint8_t *raw;
	size_t raw_len;
	uint32_t feat = 0;
	int rc;

	if (c->username == NULL || c->password == NULL)
		return -EACCES;
	if (stun_msg_copy_string(m, STUN_ATTR_REALM, c->realm, sizeof(c->realm)) != 0 ||
	    stun_msg_copy_string(m, STUN_ATTR_NONCE, c->nonce, sizeof(c->nonce)) != 0)
		return -EBADMSG;
	c->pw_alg = STUN_PWALG_MD5;
	c->pwalgs_len = 0;
	if (stun_msg_get_password_algorithms(m, algs, 8, &n) == 0 &&
	    stun_msg_get_raw(m, STUN_ATTR_PASSWORD_ALGORITHMS, &raw, &raw_len) == 0 &&
	    raw_len <= sizeof(c->pwalgs)) {
		for (size_t i = 0; i < n; i++)
			if (algs[i] == STUN_PWALG_SHA256)
				c->pw_alg = STUN_PWALG_SHA256;
		memcpy(c->pwalgs, raw, raw_len);
		c->pwalgs_len = raw_len;
	} else if (stun_nonce_features(c->nonce, strlen(c->nonce), &feat) == 0 &&
		   (feat & STUN_NONCE_FEAT_PASSWORD_ALGORITHMS)) {
		return -EBADMSG;	/* bid-down: the cookie promised the list */
	}
	rc = stun_auth_key(c->pw_alg, c->username, strlen(c->username), c->realm, strlen(c->realm),
			   c->password, strlen(c->password), c->key, &c->key_len);
	c->have_challenge = rc == 0;
	return rc;
}

static void note_result(struct turn_client *c, const struct turn_response *rsp)
{
	const char *reason = NULL;
	size_t rl = 0;

	c->last_error = rsp->error_code;
	c->last_reason[0] = '\0';
	if (rsp->error_code && stun_msg_get_error(&rsp->msg, NULL, &reason, &rl) == 0 &&
	    reason != NULL) {
		if (rl >= sizeof(c->last_reason))
			rl = sizeof(c->last_reason) - 1;
		memcpy(c->last_reason, reason, rl);
		c->last_reason[rl] = '\0';
	}
}

int turn_client_request(struct turn_client *c, uint16_t method, turn_client_attrs_fn fn, void *arg,
			unsigned flags, struct turn_response *rsp)
{
	uint8_t req[TURN_RESPONSE_MAX];
	uint8_t tid[STUN_TID_LEN];
	size_t len;

	if (c == NULL || rsp == NULL || c->raw)
		return -EINVAL;
	assert(c->magic == TC_MAGIC);
	memset(rsp, 0, offsetof(struct turn_response, msg));
	/* At most three rounds: unauthenticated, after 401, after one 438. */
	for (int attempt = 0; attempt < 3; attempt++) {
		bool auth = (flags & TURN_REQ_AUTH) && c->have_challenge;
		int rc = build_request(c, method, fn, arg, auth, req, sizeof(req), &len, tid);
		int code;
		char old_nonce[sizeof(c->nonce)];

		if (rc == 0)
			rc = txn_once(c, req, len, tid, auth, rsp);
		if (rc != 0)
			return rc;
		note_result(c, rsp);
		code = rsp->error_code;
		if ((code != 401 && code != 438) || !(flags & TURN_REQ_AUTH))
			return 0;
		/* A 401 to an authenticated request means wrong credentials, unless the
		 * server just rotated its nonce (some servers answer 401, not 438). */
		memcpy(old_nonce, c->nonce, sizeof(old_nonce));
		if (take_challenge(c, &rsp->msg) != 0 || (flags & TURN_REQ_NO_RETRY))
			return 0;
		if (code == 401 && auth && strcmp(old_nonce, c->nonce) == 0)
			return 0;
	}
	return 0;
}

int turn_client_send_raw(struct turn_client *c, const void *buf, size_t len)
{
	if (c == NULL || (buf == NULL && len))
		return -EINVAL;
	return tc_send(c, buf, len);
}

int turn_client_recv_raw(struct turn_client *c, void *buf, size_t cap, size_t *len, int timeout_ms)
{
	struct tc_pkt p;
	const uint8_t *m;
	size_t n;
	int rc;

	if (c == NULL || buf == NULL || len == NULL || c->raw)
		return -EINVAL;
	if (tc_queue_pop(c, &p)) {
		rc = p.len <= cap ? 0 : -EMSGSIZE;
		if (rc == 0) {
			memcpy(buf, p.data, p.len);
			*len = p.len;
		}
		free(p.data);
		return rc;
	}
	rc = tc_recv_msg(c, tc_now_ms() + timeout_ms, &m, &n);
	if (rc != 0)
		return rc;
	if (n > cap)
		return -EMSGSIZE;
	memcpy(buf, m, n);
	*len = n;
	return 0;
}
