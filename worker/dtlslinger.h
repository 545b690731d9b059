/* Worker: TURN-DTLS calls through a live upgrade (dtlslinger.c).
 *
 * An old worker that lingers with DTLS associations (worker/linger.c) no longer reads the
 * TURN-DTLS listener sockets: the new generation's workers do. It listens on an AF_UNIX
 * SOCK_SEQPACKET socket beside its status file (STATE.linger.PID.sock, mode 0600) and
 * lists its associations' client addresses in that file ("dtls ..." lines after the first,
 * master/linger.h); every worker that starts reads those lists once (the old worker wrote
 * them before the new master could start anyone) and forwards each datagram it receives
 * from such a client on that listener to the old worker, which feeds it to its
 * association and answers from the listener socket it kept open for sending.
 *
 * One message per datagram: struct wk_dl_hdr, then the DTLS datagram. The receiver trusts
 * nothing in it (lengths, magic, address, listener slot checked; an address it holds no
 * association for is dropped). Bounded: a sender's queue is its socket's send buffer (a
 * full one drops the datagram, counted as a send error, as a full UDP socket would); the
 * old worker accepts WK_DL_MAX_CONNS forwarders and reads WK_DL_ROUNDS messages each per
 * wakeup. Only worker processes call these. */
#ifndef TG_WORKER_DTLSLINGER_H
#define TG_WORKER_DTLSLINGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

struct worker;
struct wk_listener;
struct wk_tconn;

#define WK_DL_MAGIC 0x444c4631u	/* "DLF1" */
#define WK_DL_MAX_CONNS 256	/* forwarders one lingering worker serves */
#define WK_DL_MAX_PEERS 64	/* lingering workers one worker forwards to */
#define WK_DL_MAX_ROUTES 65536	/* client addresses one worker forwards */

/* ---- the lingering worker ---- */

/* Opens the forwarding socket at w->linger_path + ".sock". 0, or a negative errno (no
 * status path, a path too long for AF_UNIX, bind): then no DTLS call can linger. */
int wk_dl_listen(struct worker *w);
/* Whether the forwarding socket is open: DTLS associations may linger. */
bool wk_dl_ready(const struct worker *w);
/* Writes one "dtls LSLOT ADDR PORT" line to f per DTLS association that keeps(c). */
void wk_dl_write_routes(struct worker *w, FILE *f, bool (*keeps)(const struct wk_tconn *c));
/* Closes the forwarding socket and its connections and removes the path. */
void wk_dl_stop(struct worker *w);

/* ---- every worker ---- */

/* Reads the lingering workers' client lists once (later calls do nothing). */
void wk_dl_load(struct worker *w);
/* A datagram on TURN-DTLS listener l from a client with no association here: true when it
 * belongs to a lingering worker's association (forwarded, or dropped on a full channel);
 * false: this worker handles it (an epoch-0 ClientHello always is: a new client). */
bool wk_dl_forward(struct worker *w, const struct wk_listener *l, const struct sockaddr *from,
		   const uint8_t *buf, size_t len);
/* Frees everything of both sides (wk_teardown). NULL-safe on w->dl. */
void wk_dl_free(struct worker *w);

/* ---- dtls.c ---- */

/* A datagram forwarded to this (lingering) worker: fed to the association of `from` on l,
 * dropped when there is none or it opens a new client's hello. */
void wk_dtls_forwarded(struct worker *w, struct wk_listener *l, const struct sockaddr *from,
		       const uint8_t *buf, size_t len);
/* Whether buf opens with an epoch-0 ClientHello record. */
bool wk_dtls_is_hello(const uint8_t *buf, size_t len);

#endif
