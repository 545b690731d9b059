/* turngatectl doctor: network checks shared by the doctor's layers.
 *
 * Process model: the short-lived turngatectl process only.
 */
#ifndef TG_CTL_CTL_DOCTOR_H
#define TG_CTL_CTL_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Resolves host (numeric or a name) and port into *out. Returns 0 or -EHOSTUNREACH. */
int doctor_addr(const char *host, uint16_t port, struct sockaddr_storage *out);

/* Sends a STUN Binding request to `to` over UDP (three tries) or a new TCP connection and
 * waits up to timeout_ms for the matching success response. Returns 0 when it answered,
 * -ETIMEDOUT, -ECONNREFUSED (nothing bound), other -errno. */
int doctor_stun_binding(const struct sockaddr_storage *to, bool tcp, int timeout_ms);

/* The same over TLS (dtls false) or DTLS with the project's client: handshake (ALPN
 * stun.turn offered, SNI sni when not NULL, the certificate not verified: doctor checks the
 * listener, not the PKI), then a Binding. info (cap bytes) gets the protocol version, ALPN
 * and the certificate's name; *not_after (when not NULL) the served certificate's notAfter
 * (Unix s), 0 if unknown. Returns 0 or the client's negative errno. */
int doctor_tls_binding(const struct sockaddr_storage *to, bool dtls, const char *sni,
		       int timeout_ms, char *info, size_t cap, int64_t *not_after);

/* Allocates on server with user/pass, then deletes the allocation. Returns 0, or -EPROTO
 * with *stun_code (401, 403, ...) and why "CODE REASON", or another -errno with why its
 * text. */
int doctor_allocate(const struct sockaddr_storage *server, bool tcp, const char *user,
		    const char *pass, int timeout_ms, int *stun_code, char *why, size_t why_cap);

#endif
