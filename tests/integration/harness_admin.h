/* Integration-test helper: one request/reply on turngated's admin socket, from C tests.
 *
 * Test processes only. Every call is bounded (10 s) and returns NULL on any failure.
 */
#ifndef TG_TESTS_HARNESS_ADMIN_H
#define TG_TESTS_HARNESS_ADMIN_H

#include <jansson.h>

/* Sends the JSON request text (one line, no newline needed) to the admin socket at sock
 * and returns the parsed reply object (new reference), or NULL. */
json_t *hadmin_call(const char *sock, const char *request);

/* status' integer field key ("generation", "allocations"), or -1 on failure. */
long long hadmin_status_int(const char *sock, const char *key);

#endif
