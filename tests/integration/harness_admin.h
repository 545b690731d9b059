/* Integration-test helper: one request/reply on turngated's admin socket, from C tests.
 *
 * Test processes only. Every call is bounded (10 s) and returns NULL on any failure.
 */
#ifndef TG_TESTS_HARNESS_ADMIN_H
#define TG_TESTS_HARNESS_ADMIN_H

#include <jansson.h>
#include <stdint.h>

/* Sends the JSON request text (one line, no newline needed) to the admin socket at sock
 * and returns the parsed reply object (new reference), or NULL. */
json_t *hadmin_call(const char *sock, const char *request);

/* status' integer field key ("generation", "allocations"; "state.taken_over" for a field
 * of an object), or -1 on failure. */
long long hadmin_status_int(const char *sock, const char *key);

/* Polls status' integer field key up to tries times, interval_ms apart, until it equals
 * want. Returns the last value read (want on success, -1 when status failed). */
long long hadmin_wait_status_int(const char *sock, const char *key, long long want, int tries,
				 int interval_ms);

/* Counter name of `stats` (summed over the workers); listener != NULL: that listener's
 * counter. -1 on failure. */
long long hadmin_stat(const char *sock, const char *listener, const char *name);

/* Worker slot that owns the one allocation whose client is 127.0.0.1:port over transport
 * ("udp", "tcp", "tls", "dtls"), or -1 when there is none or more than one. The transport
 * is part of the key: a TCP client and a UDP client may have the same local port. */
int hadmin_owner_of(const char *sock, const char *transport, uint16_t port);

/* pid of the worker in slot while its state is "running", 0 while it is in any other
 * state (starting, dead, stopping: a respawn in progress), -1 when the query failed (no
 * reply, no such slot). *uptime (may be NULL) gets its uptime in seconds. */
int hadmin_worker_pid(const char *sock, int slot, double *uptime);

/* Polls slot up to tries times, interval_ms apart, until it runs a worker other than
 * old_pid; each poll is one query, so the answer is one consistent sample. Returns the
 * new pid, or the last value hadmin_worker_pid() returned (0, -1 or old_pid). */
int hadmin_wait_worker_replaced(const char *sock, int slot, int old_pid, int tries,
				int interval_ms);

#endif
