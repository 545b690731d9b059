/* Relay checks shared by the integration tests that drive the project's client
 * (client/turn_client.h) against the daemon: test_relay_client (UDP, TCP) and
 * test_relay_tls (TLS, DTLS). cmocka assertions; test processes only. */
#ifndef TG_TESTS_CLIENT_FLOW_H
#define TG_TESTS_CLIENT_FLOW_H

#include <stdint.h>
#include <sys/socket.h>

#include "client/turn_client.h"

/* msg to the echo peer and back: by Send indication to peer (ch 0) or on channel ch;
 * the echo must come back whole, on the same channel (0: a Data indication). */
void cflow_roundtrip(struct turn_client *c, uint16_t ch, struct sockaddr_storage *peer,
		     const char *msg);

/* The whole allocation flow on c: dual-stack Allocate, permissions and indications to
 * the IPv4 and IPv6 echo peers, channels to both (one odd length: padded on streams),
 * Refresh to 1200 s, Refresh 0 (deleted), then a Refresh that gets 437. */
void cflow_relay(struct turn_client *c, struct sockaddr_storage *echo4,
		 struct sockaddr_storage *echo6);

#endif
