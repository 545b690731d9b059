/* Small blocking TURN client (RFC 8656 over UDP, TCP, TLS, DTLS) for tests, probe and bench.
 *
 * One struct turn_client per server connection; no global state, not thread-safe (use one
 * client per thread). Every call blocks at most its timeout (poll()), UDP requests are
 * retransmitted with a doubling RTO a bounded number of times. Long-term credentials:
 * the first Allocate goes out unauthenticated, the 401's REALM/NONCE (and
 * PASSWORD-ALGORITHMS, preferring SHA-256) are remembered and used for every later
 * request; a 438 Stale Nonce is retried once with the new nonce.
 *
 * Returns: 0 or a negative errno code. -EPROTO means the server answered with an error
 * response: turn_client_last_error() gives the STUN error code (e.g. 403, 437, 442).
 * -ETIMEDOUT: no (valid) answer in time. -ECONNREFUSED/-ECONNRESET: transport failure
 * (-ECONNRESET also when a TLS/DTLS server closes the session, close_notify or EOF).
 * -ECONNABORTED: TLS/DTLS protocol failure (handshake alert, certificate not verified,
 * corrupt record).
 * Responses whose MESSAGE-INTEGRITY does not verify are dropped as if never received.
 * Data indications and ChannelData that arrive while waiting for a response are queued
 * (bounded) and returned by turn_client_recv().
 */
#ifndef TG_CLIENT_TURN_CLIENT_H
#define TG_CLIENT_TURN_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "stun/stun.h"

struct turn_client;

enum turn_client_transport {
	TURN_CLIENT_UDP = 0,
	TURN_CLIENT_TCP = 1,
	/* TLS 1.2/1.3 over TCP (RFC 8656 3.1): framing exactly as over TCP (stream of STUN
	 * messages and ChannelData padded to 4 bytes). */
	TURN_CLIENT_TLS = 2,
	/* DTLS 1.2 over a connected UDP socket: one message per record, no padding, STUN
	 * requests retransmitted as over UDP. */
	TURN_CLIENT_DTLS = 3,
};

struct turn_client_opts {
	enum turn_client_transport transport;
	const struct sockaddr *server;	/* IPv4 or IPv6 server address (copied) */
	const struct sockaddr *local;	/* optional local bind address, NULL = any */
	const char *username;		/* long-term credentials, NULL = none (copied) */
	const char *password;		/* copied; wiped on destroy */
	const char *software;		/* SOFTWARE sent in requests, NULL = none */
	int timeout_ms;			/* per transaction, default 5000 */
	int rto_ms;			/* UDP initial RTO, default 200 */
	int max_retrans;		/* UDP retransmissions, default 6 (bounded <= 10) */
	bool fingerprint;		/* add FINGERPRINT to requests */
	/* TLS/DTLS only (ignored for UDP/TCP): */
	const char *sni;		/* server_name sent in the ClientHello, NULL = none; with
					 * ca_file also the host name the certificate must match */
	bool no_alpn;			/* do not offer ALPN (default: offer "stun.turn") */
	const char *ca_file;		/* PEM file of trusted CAs: the server certificate must
					 * verify, else -ECONNABORTED (-ENOENT: file not
					 * loadable). NULL = no verification (tests with
					 * self-signed certificates) */
};

/* Creates a client and connects its socket to the server (TCP: completes the handshake
 * within timeout_ms; TLS/DTLS: TCP connect plus TLS/DTLS handshake, together within
 * timeout_ms, DTLS retransmitting its flights, answering a HelloVerifyRequest cookie).
 * -ETIMEDOUT when the server does not complete the handshake in time. *out is owned by
 * the caller, free with turn_client_destroy(). */
int turn_client_create(const struct turn_client_opts *opts, struct turn_client **out);
/* Sends a TLS/DTLS close_notify (best effort, never blocks), closes the socket, wipes the
 * password and key, frees everything. Accepts NULL. */
void turn_client_destroy(struct turn_client *c);

/* True when data is already buffered inside the client (queued relayed packets, the rest
 * of a TCP/TLS stream read, records decrypted by OpenSSL): call turn_client_recv()
 * (timeout 0 is fine) before poll()ing the fd, which would not wake up for it. */
bool turn_client_pending(const struct turn_client *c);
/* The client's local address. */
int turn_client_local_addr(const struct turn_client *c, struct sockaddr_storage *out);

/* STUN error code of the last -EPROTO result (0 if the last request succeeded); reason
 * (may be NULL) gets the server's reason phrase (owned by c, valid until the next call). */
int turn_client_last_error(const struct turn_client *c, const char **reason);

/* What the TLS/DTLS handshake negotiated (strings NUL-terminated, truncated to fit). */
struct turn_client_tls_info {
	char version[16];		/* "TLSv1.2", "TLSv1.3", "DTLSv1.2" */
	char alpn[32];			/* selected ALPN protocol, "" if none */
	char cipher[64];		/* OpenSSL cipher name */
	char subject_cn[256];		/* server leaf certificate: subject CN, "" if none */
	char dns_san[256];		/* first DNS subjectAltName, "" if none */
	uint8_t cert_sha256[32];	/* SHA-256 of the leaf certificate (DER) */
	int64_t not_after;		/* the leaf's notAfter (Unix s), 0 if unknown */
	bool has_cert;			/* false: no server certificate (then the above are 0) */
};

/* Fills *out for a TLS/DTLS client. -ENOTCONN for a UDP/TCP client, -EINVAL for NULL. */
int turn_client_tls_info(const struct turn_client *c, struct turn_client_tls_info *out);

/* Binding request (no auth): writes the XOR-MAPPED-ADDRESS. */
int turn_client_binding(struct turn_client *c, struct sockaddr_storage *mapped);

/* Allocate options; zero-initialised = plain UDP allocation with server defaults. */
struct turn_alloc_opts {
	uint32_t lifetime;		/* LIFETIME, 0 = omit */
	int family;			/* REQUESTED-ADDRESS-FAMILY: AF_INET/AF_INET6, 0 = omit */
	int additional_family;		/* ADDITIONAL-ADDRESS-FAMILY (AF_INET6), 0 = omit */
	bool even_port;			/* send EVEN-PORT ... */
	bool even_port_reserve;		/* ... with the R bit */
	bool use_token;			/* send RESERVATION-TOKEN token */
	uint64_t token;
	bool dont_fragment;
	bool omit_transport;		/* leave REQUESTED-TRANSPORT out (expects 400) */
	uint8_t transport;		/* REQUESTED-TRANSPORT protocol, 0 = UDP (17); TCP (6):
					 * RFC 6062, over a TCP or TLS client */
};

struct turn_alloc_result {
	struct sockaddr_storage relayed;	/* first XOR-RELAYED-ADDRESS */
	struct sockaddr_storage relayed2;	/* second one (dual stack), ss_family 0 if none */
	struct sockaddr_storage mapped;		/* XOR-MAPPED-ADDRESS, ss_family 0 if none */
	uint32_t lifetime;
	bool has_token;				/* RESERVATION-TOKEN returned */
	uint64_t token;
	int addr_error_family;			/* ADDRESS-ERROR-CODE family, 0 if none */
	int addr_error_code;
};

/* Allocate with long-term auth (401 -> retry with REALM/NONCE, 438 -> retry).
 * opts may be NULL; res may be NULL. */
int turn_client_allocate(struct turn_client *c, const struct turn_alloc_opts *opts,
			 struct turn_alloc_result *res);

/* Refresh with LIFETIME lifetime (0 deletes the allocation); *granted (may be NULL) gets
 * the server's LIFETIME. */
int turn_client_refresh(struct turn_client *c, uint32_t lifetime, uint32_t *granted);

/* CreatePermission for n peers (one request carrying n XOR-PEER-ADDRESS, n <= 16). */
int turn_client_create_permission(struct turn_client *c, const struct sockaddr_storage *peers,
				  size_t n);

/* ChannelBind channel (0x4000..0x4FFF, not checked so tests can send bad ones) to peer;
 * on success the client remembers the binding to label received ChannelData. */
int turn_client_channel_bind(struct turn_client *c, uint16_t channel, const struct sockaddr *peer);

/* Send indication to peer (no auth, no response). */
int turn_client_send_indication(struct turn_client *c, const struct sockaddr *peer,
				const void *data, size_t len, bool dont_fragment);

/* ChannelData on channel (padded to 4 bytes on TCP and TLS). */
int turn_client_send_channel(struct turn_client *c, uint16_t channel, const void *data, size_t len);

/* Receives the next relayed payload: a Data indication or ChannelData, queued ones first.
 * Copies up to cap bytes into buf (-EMSGSIZE if larger, the packet is dropped), *len the
 * size, *peer (may be NULL) the peer address (for ChannelData: from the channel binding,
 * ss_family 0 if unknown), *channel (may be NULL) the channel or 0 for a Data indication.
 * Other STUN messages are ignored. -ETIMEDOUT after timeout_ms. */
int turn_client_recv(struct turn_client *c, void *buf, size_t cap, size_t *len,
		     struct sockaddr_storage *peer, uint16_t *channel, int timeout_ms);

/* ---- TCP relaying (RFC 6062) --------------------------------------------------------
 * The control connection is a TCP or TLS client that allocated with REQUESTED-TRANSPORT
 * TCP (turn_alloc_opts.transport = STUN_TRANSPORT_TCP). Each peer connection then gets a
 * data connection of its own: a second client, bound to the peer connection with
 * ConnectionBind, which carries raw bytes afterwards (turn_client_data_send/_recv; the
 * STUN calls refuse it with -EINVAL). */

/* Connect (RFC 6062 4.3): asks the server to open a TCP connection from the relayed
 * address to peer; *connection_id (may be NULL) gets the CONNECTION-ID of the success
 * response. The server answers once its connect completed, which may take longer than
 * c's timeout (turngate gives up after 10 s with 447): then -ETIMEDOUT. -EPROTO with
 * turn_client_last_error(): 403 (the peer is not admitted), 446 (the allocation already
 * has a connection to peer), 447 (connect failed or timed out), 400 (no TCP allocation),
 * 508 (connection limits). -EBADMSG: a success response without CONNECTION-ID. */
int turn_client_connect(struct turn_client *c, const struct sockaddr *peer,
			uint32_t *connection_id);

/* Opens a data connection and binds it to connection_id (RFC 6062 4.3, 5.4): connects to
 * the server, sends ConnectionBind with CONNECTION-ID, authenticated with c's credentials
 * and the realm and nonce c learnt (servers check the nonce as if it came over the
 * control connection; a 401/438 is retried as for any request). On success *data (owned
 * by the caller, turn_client_destroy()) is the data connection, raw from here on, and
 * bytes the server sent right behind the response are kept for turn_client_data_recv().
 * o: the data connection's transport and address; NULL = TURN_CLIENT_TCP to c's server
 * address. Of o only transport (TURN_CLIENT_TCP or TURN_CLIENT_TLS, else -EINVAL),
 * server (NULL = c's), local and the TLS fields (sni, no_alpn, ca_file) are used;
 * credentials, SOFTWARE, FINGERPRINT and the timeout are c's. RFC 6062 puts the data
 * connection on the control connection's address and transport (turngate takes it over
 * TURN-TCP and TURN-TLS alike). -EPROTO with turn_client_last_error(c):
 * 400 (unknown, expired, already bound or another user's CONNECTION-ID), 401. */
int turn_client_connection_bind(struct turn_client *c, uint32_t connection_id,
				const struct turn_client_opts *o, struct turn_client **data);

/* Sends len bytes on a bound data connection (all of them, bounded by its timeout). */
int turn_client_data_send(struct turn_client *d, const void *buf, size_t len);
/* Receives what the peer sent on a bound data connection, up to cap bytes: *len > 0, or
 * *len == 0 when the server closed the connection's reading side (the peer's FIN; over
 * TLS a close_notify, or a FIN without one). -ETIMEDOUT after timeout_ms, -ECONNRESET on a
 * reset. */
int turn_client_data_recv(struct turn_client *d, void *buf, size_t cap, size_t *len,
			  int timeout_ms);

/* ---- Raw access for tests ------------------------------------------------------------ */

#define TURN_RESPONSE_MAX 4096

/* A full response: raw bytes and the parsed view into them. */
struct turn_response {
	uint8_t buf[TURN_RESPONSE_MAX];
	size_t len;
	struct stun_msg msg;		/* valid when len > 0; points into buf */
	int error_code;			/* 0 for a success response */
};

/* Adds the caller's attributes to a request being built. */
typedef void (*turn_client_attrs_fn)(struct stun_builder *b, void *arg);

/* Request flags. */
#define TURN_REQ_AUTH 0x1		/* USERNAME/REALM/NONCE/MESSAGE-INTEGRITY; retry 401/438 */
#define TURN_REQ_NO_RETRY 0x2		/* return the first response, even 401/438 */

/* Sends a request of method with attributes added by fn (may be NULL) and waits for the
 * matching response. Returns 0 when a response arrived (success OR error: check
 * rsp->error_code and rsp->msg), -ETIMEDOUT, or a transport error. Also updates the
 * client's realm/nonce from 401/438 responses. */
int turn_client_request(struct turn_client *c, uint16_t method, turn_client_attrs_fn fn, void *arg,
			unsigned flags, struct turn_response *rsp);

/* Sends bytes as they are (UDP datagram, DTLS record, or TCP/TLS stream bytes) for
 * malformed-input tests. */
int turn_client_send_raw(struct turn_client *c, const void *buf, size_t len);
/* Receives the next whole message (datagram or DTLS record, or frame on TCP/TLS) into
 * buf[cap]. */
int turn_client_recv_raw(struct turn_client *c, void *buf, size_t cap, size_t *len, int timeout_ms);

#endif
