/* Stream connections parked for a live upgrade: the state one process hands to the next
 * with the connection's socket (IPC_STREAM_PART/IPC_STREAM frames, common/ipc.h).
 *
 * A blob is a struct park_hdr followed by in_len and out_len bytes (what the
 * connection's buffers held, by kind: below). The worker that parks writes it (worker/park.c), each
 * master only routes it by slot and record (master/park.c), and the worker that takes it over
 * checks it with park_check() before it trusts a field. Both processes may call everything here. */
#ifndef TG_COMMON_PARK_H
#define TG_COMMON_PARK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/ipc.h"

#define PARK_MAGIC 0x4b524150u	/* "PARK" */
#define PARK_VERSION 1u
#define PARK_NO_REC UINT32_MAX
/* Larger than any connection's state: a header, a full input buffer (64 KiB + 8) and a
 * full output buffer (256 KiB), worker/wk.h. */
#define PARK_BLOB_MAX (512u * 1024u)

enum park_kind {
	PARK_TCONN = 1,		/* a TURN-TCP client connection (plain TCP) */
	PARK_TPEER,		/* an RFC 6062 peer connection of rec_idx's allocation */
	PARK_TDATA,		/* the client data connection bound to peer connection id */
	PARK_TRELAY,		/* an RFC 6062 allocation's listening relay socket */
	PARK_URELAY,		/* a UDP relay socket of a TCONN's allocation, id: which (0:
				 * the relayed address, 1: the second family's) */
};

#define PARK_F_AUTHED 0x1u	/* TCONN: it sent an authenticated request (not budgeted) */
#define PARK_F_TCPALLOC 0x2u	/* TCONN: its allocation relays TCP (RFC 6062) */
#define PARK_F_BOUND 0x4u	/* TPEER: bound to a data connection (a TDATA follows) */
/* TPEER, bound: which sides of the pair have ended (eof: read an end of stream) or been
 * shut down (shut: our FIN sent), side 0 the peer, side 1 the client. */
#define PARK_F_EOF0 0x10u
#define PARK_F_EOF1 0x20u
#define PARK_F_SHUT0 0x40u
#define PARK_F_SHUT1 0x80u
/* Taken back from systemd's fd store after a crash (master/fdstore.c): no buffers came
 * with it, its name may be older than the table (the worker checks the socket against
 * the record), and a TCONN's dead worker may have read part of a frame (worker/fdstore.c). */
#define PARK_F_CRASH 0x100u

struct park_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t kind;			/* enum park_kind */
	uint32_t slot;			/* the parking worker's slot */
	uint32_t rec_idx;		/* record of the allocation it carries, PARK_NO_REC */
	uint32_t flags;			/* PARK_F_* */
	uint32_t peer_len;
	struct sockaddr_storage peer;	/* the client's address */
	char listener[IPC_NAME_MAX + 1];	/* NUL-terminated; not empty for a TCONN */
	uint32_t id;			/* TPEER, TDATA: the CONNECTION-ID; URELAY: 0, 1 */
	/* Bytes that follow the header, in then out. TCONN: its input buffer (a partial
	 * frame), its output buffer's unwritten bytes. Bound TPEER: read from the peer and
	 * not yet written to the client, read from the client and not yet written to the
	 * peer. */
	uint32_t in_len, out_len;
};

/* Sends blob (len bytes) and the socket sock as IPC_STREAM_PART pieces and a last
 * IPC_STREAM piece on fd, waiting at most timeout_ms in all while the channel is full.
 * Returns 0, -ETIMEDOUT, -EMSGSIZE (len > PARK_BLOB_MAX) or another -errno. */
int park_send(int fd, const uint8_t *blob, size_t len, int sock, int timeout_ms);

/* Reassembles blobs from received frames. */
struct park_asm {
	uint8_t *buf;
	size_t len, cap;
};

/* Adds msg (IPC_STREAM_PART or IPC_STREAM) to a. Returns 1 when the blob is whole (then
 * a->buf/a->len hold it: take them with park_asm_take), 0 when more is due, -EMSGSIZE
 * past PARK_BLOB_MAX (a is emptied), -ENOMEM. */
int park_asm_add(struct park_asm *a, const struct ipc_msg *msg);
/* Hands the whole blob over (the caller frees it) and empties a. */
uint8_t *park_asm_take(struct park_asm *a, size_t *len);
void park_asm_free(struct park_asm *a);

/* Checks a blob: magic, version, kind, a named listener (TCONN), an IPv4/IPv6 peer
 * (TCONN, TPEER), a record (TPEER, TDATA, TRELAY, URELAY), a URELAY's id 0 or 1,
 * lengths that add up. Copies its header to *out. Returns 0 or -EBADMSG. */
int park_check(const uint8_t *blob, size_t len, struct park_hdr *out);

#endif
