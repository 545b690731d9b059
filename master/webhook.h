/* The session records' webhook client (master/webhook.c): POSTs the records in JSON array
 * batches to an http:// or https:// URL from the master's event loop, one request at a
 * time, with retries and a bounded backlog. Every socket and TLS operation is
 * non-blocking; a slow, failing or absent server never holds the loop. Master only. */
#ifndef TG_MASTER_WEBHOOK_H
#define TG_MASTER_WEBHOOK_H

#include <stdbool.h>

#include <jansson.h>

struct master;
struct webhook;

#define WEBHOOK_BATCH 100u        /* records per POST */
#define WEBHOOK_BACKLOG 10000u    /* records waiting for delivery; the oldest dropped beyond */

/* A client of m's loop that counts its failed deliveries in m's segment. Returns NULL
 * without memory. */
struct webhook *webhook_new(struct master *m);

/* Points the client at url (http://HOST[:PORT][/PATH] or https://...) with ca_file (NULL:
 * the system's CA store) and server_name (NULL: the URL's host) for https. The same url,
 * ca_file and server_name as before change nothing (the backlog and an in-flight request
 * are kept); others drop the in-flight request and keep the backlog. The CA file is read
 * now; a host given by name is resolved by a child process (fork, no exec: the master has
 * one thread; libev's child watcher reaps it), again after a failure at most every
 * HOOK_DNS_AGAIN_S. Returns 0, or -errno (logged): the records wait in the backlog, every
 * attempt counted as a failure, until a reload fixes it. */
int webhook_configure(struct webhook *h, const char *url, const char *ca_file,
		      const char *server_name);

/* Queues one record (the caller keeps its reference) and returns true when the backlog
 * was full and its oldest waiting record was dropped. Sends nothing: see webhook_kick. */
bool webhook_push(struct webhook *h, json_t *rec);

/* Sends the next batch when none is in flight, no retry waits and the client runs. */
void webhook_kick(struct webhook *h);

/* Paused: nothing is sent until webhook_run (the segment belongs to another master). */
void webhook_pause(struct webhook *h);
void webhook_run(struct webhook *h);

/* Records waiting, the in-flight batch included. */
size_t webhook_backlog(const struct webhook *h);

/* Closes its connection and frees everything; NULL is fine. */
void webhook_free(struct webhook *h);

#endif
