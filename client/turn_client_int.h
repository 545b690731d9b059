/* Internal to client/: the TURN client's state and the helpers its .c files share. */
#ifndef TG_CLIENT_TURN_CLIENT_INT_H
#define TG_CLIENT_TURN_CLIENT_INT_H

#include <stdint.h>

#include <openssl/ssl.h>

#include "client/turn_client.h"
#include "stun/stun.h"
#include "stun/stun_auth.h"
#include "stun/stun_frame.h"

#define TC_MAGIC 0x54434c54u
#define TC_QUEUE_MAX 64		/* relayed packets kept while waiting for a response */
#define TC_CHANNELS_MAX 64	/* channel bindings remembered for labelling ChannelData */
#define TC_RX_CAP (STUN_MAX_MSG_LEN + 8)
#define TC_PWALGS_MAX 64	/* bytes of PASSWORD-ALGORITHMS echoed back */

struct tc_pkt {
	uint8_t *data;
	size_t len;
};

struct turn_client {
	uint32_t magic;
	int fd;
	enum turn_client_transport transport;
	SSL *ssl;			/* TLS/DTLS session, NULL for UDP/TCP */
	bool ssl_failed;		/* fatal TLS error seen: no close_notify on destroy */
	struct sockaddr_storage server;
	char *username;
	char *password;
	char *software;
	int timeout_ms;
	int rto_ms;
	int max_retrans;
	bool fingerprint;
	/* Long-term auth state learnt from the last 401/438. */
	bool have_challenge;
	char realm[STUN_MAX_REALM_LEN + 1];
	char nonce[STUN_MAX_NONCE_LEN + 1];
	uint8_t key[STUN_KEY_MAX];
	size_t key_len;
	uint16_t pw_alg;
	uint8_t pwalgs[TC_PWALGS_MAX];
	size_t pwalgs_len;		/* 0: server sent no PASSWORD-ALGORITHMS */
	int last_error;
	char last_reason[STUN_MAX_REASON_LEN + 1];
	struct {
		uint16_t channel;
		struct sockaddr_storage peer;
	} chan[TC_CHANNELS_MAX];
	unsigned n_chan;
	struct tc_pkt queue[TC_QUEUE_MAX];
	unsigned q_head;
	unsigned q_count;
	uint8_t *rx;			/* TC_RX_CAP bytes: datagram or TCP stream buffer */
	uint8_t *tx;			/* TC_RX_CAP bytes: indications and ChannelData out */
	size_t rx_len;			/* TCP: bytes buffered */
	size_t rx_used;			/* TCP: bytes of the frame handed out last */
	/* RFC 6062 data connection after its ConnectionBind: raw bytes, no STUN (the
	 * bytes of rx past rx_used came right behind the response). */
	bool raw;
};

/* Stream framing (TCP, TLS) vs one message per datagram/record (UDP, DTLS). */
static inline bool tc_is_stream(const struct turn_client *c)
{
	return c->transport == TURN_CLIENT_TCP || c->transport == TURN_CLIENT_TLS;
}

/* Datagram transports retransmit requests (UDP, DTLS). */
static inline bool tc_is_dgram(const struct turn_client *c)
{
	return !tc_is_stream(c);
}

/* Runs turn_client_request() and folds an error response into -EPROTO (the code in
 * c->last_error). */
int tc_run(struct turn_client *c, uint16_t method, turn_client_attrs_fn fn, void *arg,
	   unsigned flags, struct turn_response *rsp);

/* Monotonic milliseconds. */
int64_t tc_now_ms(void);

/* Sends a whole message (TCP: all bytes, bounded by the client's timeout). */
int tc_send(struct turn_client *c, const uint8_t *buf, size_t len);

/* Waits until deadline (tc_now_ms() scale) for one whole message; *msg points into the
 * client's buffer and stays valid until the next tc_recv_msg(). -ETIMEDOUT, transport
 * errors, -EBADMSG for an unframeable TCP stream. */
int tc_recv_msg(struct turn_client *c, int64_t deadline, const uint8_t **msg, size_t *len);

/* Polls fd for events until deadline; -ETIMEDOUT once it has passed. */
int tc_wait_fd(int fd, short events, int64_t deadline);

/* TLS/DTLS (turn_client_tls.c). Handshake on the connected socket c->fd, bounded by
 * deadline: sets c->ssl. 0, -ETIMEDOUT, -ECONNABORTED, -ECONNRESET, -ENOMEM, -errno. */
int tc_tls_start(struct turn_client *c, const struct turn_client_opts *o, int64_t deadline);
/* Writes all len bytes (DTLS: one record) by deadline. */
int tc_tls_write(struct turn_client *c, const uint8_t *buf, size_t len, int64_t deadline);
/* Reads what is available (DTLS: one record) into buf[cap], waiting until deadline when
 * nothing is; tries OpenSSL's buffer before looking at the deadline, so a past deadline
 * still returns decrypted data already there. -ECONNRESET when the server closed. */
int tc_tls_read(struct turn_client *c, uint8_t *buf, size_t cap, int64_t deadline, size_t *n);
/* Sends close_notify without blocking and frees the session. Accepts c->ssl == NULL. */
void tc_tls_close(struct turn_client *c);

/* True for ChannelData and Data indications (what turn_client_recv() returns). */
bool tc_is_relayed(const uint8_t *msg, size_t len);

/* Queues a copy of a relayed packet; drops the oldest when full. */
void tc_queue_push(struct turn_client *c, const uint8_t *msg, size_t len);
/* Pops the oldest queued packet (caller frees data) or returns false. */
bool tc_queue_pop(struct turn_client *c, struct tc_pkt *out);

#endif
