/* Master <-> worker control messages: typed, length-checked frames on a SOCK_SEQPACKET pair.
 *
 * Each frame is one seqpacket record: struct ipc_hdr {type, flags, len} followed by `len`
 * payload bytes (len <= IPC_PAYLOAD_MAX), optionally carrying one file descriptor with
 * SCM_RIGHTS. A seqpacket record is delivered whole or not at all, so there is no framing
 * state to keep between calls and both ends may be non-blocking.
 *
 * Every type has a fixed rule for its payload length and whether it carries a descriptor;
 * ipc_recv() enforces it, so a dispatcher (a flat switch on msg.hdr.type, OpenBSD imsg
 * style) sees only well-formed messages:
 *
 *   type                 direction        payload                          fd
 *   IPC_PING             master->worker   struct ipc_ping                  no
 *   IPC_PONG             worker->master   struct ipc_pong                  no
 *   IPC_READY            worker->master   struct ipc_pong (seq 0)          no
 *   IPC_LISTENER_ADD     master->worker   listener name (1..IPC_NAME_MAX)  yes: the socket
 *   IPC_LISTENER_REMOVE  master->worker   listener name (1..IPC_NAME_MAX)  no
 *   IPC_DRAIN            master->worker   struct ipc_drain                 no
 *   IPC_DISCONNECT       master->worker   struct ipc_disconnect            no
 *   IPC_LOGLEVEL         master->worker   log spec (1..IPC_NAME_MAX)       no
 *   IPC_STOP             master->worker   one byte: IPC_STOP_NOW, the stop   no
 *                                         is immediate (a SIGTERM follows),
 *                                         else 0
 *   IPC_OFFLOAD_MAP      master->worker   one byte: 0 client->peer map,    yes: the map
 *                                         1 peer->client map (the last)
 *   IPC_OFFLOAD_OFF      master->worker   empty                            no
 *   IPC_TCP_HANDOFF      worker->master,  struct ipc_handoff               yes: the TCP
 *                        master->worker   (the master passes it on to          connection
 *                                         `slot`'s worker)
 *   IPC_PARK             master->worker   uint32_t: limits.upgrade_linger  no
 *   IPC_LINGER           worker->master   uint32_t: the TLS calls it keeps no
 *   IPC_STREAM_PART      worker->master,  1..IPC_PAYLOAD_MAX bytes of a    no
 *                        master->master   parked stream's state
 *   IPC_STREAM           worker->master,  0..IPC_PAYLOAD_MAX bytes: the    yes: its socket
 *                        master->master   state's last piece
 *   IPC_STREAM_END       master->master   empty                            no
 *   IPC_FDSTORE          worker->master   FDNAME (common/fdname.h)         yes: the socket
 *   IPC_FDUNSTORE        worker->master   FDNAME (common/fdname.h)         no
 *   IPC_RELAY_CHAN       master->worker,  uint32_t: the slot               yes: an end of
 *                        master->master                                    the slot's relay
 *                                                                          channel
 *   IPC_RELAYS           old worker ->    1..IPC_FDS_MAX uint32_t keys     yes: one relay
 *                        new worker       (IPC_RELAY_KEY)                  socket per key
 *   IPC_HANDED_OVER      worker->master   empty: parked, nothing more to   no
 *                                         hand over, offline, lock closed
 *
 * A live upgrade hands stream connections to the new processes (common/park.h): IPC_PARK
 * tells a worker to send every connection it can hand over and exit; each connection's
 * state (struct park_hdr and its buffered bytes) travels as IPC_STREAM_PART pieces and a
 * last IPC_STREAM piece with the socket, worker to old master and old master to new
 * master (its upgrade channel), which ends the list with IPC_STREAM_END. The UDP
 * allocations' relay sockets go from each old worker to the new worker of its slot on a
 * channel of their own (master/relayho.c): the old master sends the sending end to the old
 * worker and the receiving end to the new master (IPC_RELAY_CHAN), the old worker writes
 * its sockets into it, IPC_FDS_MAX to an IPC_RELAYS frame, each named by its record and
 * which of the allocation's two sockets it is, and the new worker reads them: the new
 * processes never bind them again. Only ipc_recv_fds() takes a frame of more than one.
 * A parked worker that has given everything up (no TLS call to linger with) says
 * IPC_HANDED_OVER as its last frame: the old master counts it stopped before its exit.
 *
 * Names and specs travel without a terminating NUL and must not contain one; ipc_recv()
 * NUL-terminates the payload buffer so ipc_msg_str() can hand it out as a C string.
 * Both processes may call every function here; nothing keeps global state.
 */
#ifndef TG_COMMON_IPC_H
#define TG_COMMON_IPC_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define IPC_PAYLOAD_MAX 4096u
/* Longest listener name or log spec carried in a string payload. */
#define IPC_NAME_MAX 255u
/* Longest username in IPC_DISCONNECT (STUN USERNAME is < 513 bytes), plus its NUL. */
#define IPC_USER_MAX 516u
/* How long the master lets its workers stop before it kills them (master/main.c): after
 * IPC_STOP, and after the SIGTERM of a stop made immediate (SIGINT, SIGQUIT, a second
 * SIGTERM). A worker's own waits at its stop stay well inside them (worker/recflush.c). */
#define IPC_STOP_GRACE_MS 5000u
#define IPC_STOP_NOW_GRACE_MS 1000u
/* IPC_STOP's byte for a stop made immediate: the worker that reads it takes the shorter
 * grace, though the SIGTERM sent after it may reach it only once its loop has ended. */
#define IPC_STOP_NOW 1u

enum ipc_type {
	IPC_PING = 1,
	IPC_PONG,
	IPC_READY,
	IPC_LISTENER_ADD,
	IPC_LISTENER_REMOVE,
	IPC_DRAIN,
	IPC_DISCONNECT,
	IPC_LOGLEVEL,
	IPC_STOP,
	IPC_OFFLOAD_MAP,
	IPC_OFFLOAD_OFF,
	IPC_TCP_HANDOFF,
	IPC_PARK,
	IPC_STREAM_PART,
	IPC_STREAM,
	IPC_STREAM_END,
	IPC_LINGER,
	IPC_FDSTORE,
	IPC_FDUNSTORE,
	IPC_RELAY_CHAN,
	IPC_RELAYS,
	IPC_HANDED_OVER,
	IPC_TYPE_END, /* one past the last valid type */
};

/* Most descriptors one frame carries (the kernel's SCM_MAX_FD is 253). */
#define IPC_FDS_MAX 253u
/* IPC_RELAYS: relay socket which (0, 1: an allocation's second family) of record idx. */
#define IPC_RELAY_KEY(idx, which) (((uint32_t)(idx) << 1) | ((which) & 1u))
#define IPC_RELAY_IDX(key) ((key) >> 1)
#define IPC_RELAY_WHICH(key) ((key) & 1u)

/* Set by ipc_send() when a descriptor rides along; checked against the type's rule. */
#define IPC_F_FD 0x0001u

struct ipc_hdr {
	uint16_t type;
	uint16_t flags;
	uint32_t len;
};

struct ipc_ping {
	uint64_t seq; /* echoed in the pong so the master can match replies to pings */
};

struct ipc_pong {
	uint64_t seq;  /* the ping's seq; 0 in IPC_READY */
	uint32_t slot; /* the worker's slot index */
	int32_t pid;   /* the worker's pid */
};

struct ipc_drain {
	uint32_t on; /* 1: refuse new Allocates (403, or 300 + ALTERNATE-SERVER per snapshot);
		      * 0: accept them again */
	uint32_t reserved;
};

/* IPC_TCP_HANDOFF: a client's TURN-TCP connection whose ConnectionBind (RFC 6062) names a
 * peer connection of an allocation that another worker owns (the CONNECTION-ID's low
 * byte is the owner's slot): its socket travels with the frame, and data holds the bytes
 * read from it so far (the ConnectionBind first), which the owner handles as if it had
 * read them itself. The listener is named so the owner serves it as its own. A data
 * connection that came over TURN-TLS stays in the worker that holds its TLS session: what
 * travels (tls 1) is the plain end of a socket pair bridged to it. The client's address
 * travels in every case (behind a PROXY protocol listener it is the header's, which the
 * socket does not know), and so does the connection's age, so that the owner keeps its
 * deadlines rather than starting them again. The sender authenticated the ConnectionBind
 * first (worker/turn.c). */
#define IPC_HANDOFF_DATA_MAX 2048u
struct ipc_handoff {
	uint32_t slot;				/* the owner's slot */
	uint32_t len;				/* bytes of data, <= IPC_HANDOFF_DATA_MAX */
	char listener[IPC_NAME_MAX + 1];	/* NUL-terminated, not empty */
	uint8_t data[IPC_HANDOFF_DATA_MAX];
	uint32_t tls;                   /* 1: a TLS bridge's plain end (above) */
	struct sockaddr_storage client; /* the client's address (AF_INET or AF_INET6) */
	uint32_t age_ms;                /* how long the connection has been open */
	uint32_t reserved;              /* 0 */
};

/* One IPC_DISC_USER or IPC_DISC_REVOKED frame ends every allocation of a user on the
 * worker, however many: the master sends one to each worker that owns any (a frame per
 * allocation would fill the control socket, master/disconnect.h). */
enum ipc_disconnect_by {
	IPC_DISC_INDEX = 1,   /* end the allocation at table index `index` whose record's
			       * generation is `gen` (if this worker owns it): end reason
			       * "disconnected by admin". The generation is the one the master
			       * read: an index that was released and claimed again since (another
			       * allocation, maybe another user's) is not ended */
	IPC_DISC_USER = 2,    /* end every allocation this worker owns whose username `user`
			       * names (shm_quota_user_match: the whole username or the user
			       * id of a REST username): "disconnected by admin" */
	IPC_DISC_REVOKED = 3, /* end every allocation this worker owns that the revocation
			       * list refuses now (a sweep at once): "credential revoked" */
};

struct ipc_disconnect {
	uint32_t by;    /* enum ipc_disconnect_by */
	uint32_t index; /* allocation table index when by == IPC_DISC_INDEX, else 0 */
	uint64_t gen;   /* that record's gen (shm/shm_alloc.h) when by == IPC_DISC_INDEX, else 0 */
	char user[IPC_USER_MAX]; /* NUL-terminated when by == IPC_DISC_USER, else all zero */
	uint32_t pad;   /* 0: the struct has no implicit padding (below) */
};
/* The worker tells two frames apart by their bytes (wk_adopt_disc_keep: memcmp over
 * sizeof), and disconnect_valid checks every one: a byte of implicit padding would be
 * neither checked nor zeroed by the sender's memset alone. */
static_assert(sizeof(struct ipc_disconnect) == 2 * sizeof(uint32_t) + sizeof(uint64_t) +
							IPC_USER_MAX + sizeof(uint32_t),
	      "struct ipc_disconnect has no implicit padding");

/* A received message. payload has one spare byte so string payloads are NUL-terminated. */
struct ipc_msg {
	struct ipc_hdr hdr;
	uint8_t payload[IPC_PAYLOAD_MAX + 1];
};

/* Creates a non-blocking, close-on-exec SOCK_SEQPACKET pair in fds[0..1].
 * Returns 0 or -errno. */
int ipc_socketpair(int fds[2]);

/* Sends one frame. payload may be NULL when len is 0; passfd is a descriptor to attach, or -1.
 * The descriptor stays owned by the caller (the kernel duplicates it into the peer).
 * Checks the frame against the type's rule before sending.
 * Returns 0; -EINVAL for a frame that breaks its type's rule; -EAGAIN when the socket buffer
 * is full (non-blocking socket); -EPIPE when the peer is gone; other -errno from sendmsg. */
int ipc_send(int fd, uint16_t type, const void *payload, size_t len, int passfd);

/* Sends one frame with n (1..IPC_FDS_MAX) descriptors, as ipc_send() does with one; only
 * IPC_RELAYS carries more than one (n keys, n descriptors). */
int ipc_send_fds(int fd, uint16_t type, const void *payload, size_t len, const int *fds,
		 size_t n);

/* Typed conveniences over ipc_send(). */
int ipc_send_str(int fd, uint16_t type, const char *s, int passfd);
int ipc_send_ping(int fd, uint64_t seq);
int ipc_send_pong(int fd, uint16_t type, uint64_t seq, uint32_t slot, int32_t pid);
int ipc_send_drain(int fd, int on);
int ipc_send_stop(int fd, bool now);
int ipc_send_disconnect_index(int fd, uint32_t index, uint64_t gen);
int ipc_send_disconnect_user(int fd, const char *user);
int ipc_send_disconnect_revoked(int fd);

/* Receives one frame into *msg. *passfd receives the attached descriptor (close-on-exec,
 * now owned by the caller) or -1 when none came.
 * Returns 0 for a valid message; -EAGAIN when none is waiting (non-blocking socket);
 * -EPIPE when the peer closed; -EPROTO for an unknown type, a length that breaks the type's
 * rule, a truncated frame, or a descriptor where none belongs or none where one is required
 * (a descriptor that came with a refused frame is closed; an IPC_TCP_HANDOFF's connection
 * is shut down first, so that its client sees the end although systemd's fd store may hold
 * a copy: its sender gave it up); -EMFILE when the frame's descriptors did not all come
 * (MSG_CTRUNC: this process's descriptor limit; the kernel closed them, so did we any that
 * came, an IPC_TCP_HANDOFF's shut down first): msg->hdr is its header, its payload
 * unchecked. After -EPROTO or -EMFILE the channel is still usable: each frame stands
 * alone. */
int ipc_recv(int fd, struct ipc_msg *msg, int *passfd);

/* ipc_recv() that also takes an IPC_RELAYS frame: its descriptors (close-on-exec, the
 * caller's) in fds[0..*n-1], cap >= IPC_FDS_MAX; any other frame's one descriptor in fds[0]
 * (*n 1) or none (*n 0). Same returns; a frame whose descriptors did not all come (the
 * process's descriptor limit) is -EMFILE, what came closed. */
int ipc_recv_fds(int fd, struct ipc_msg *msg, int *fds, size_t cap, size_t *n);

/* Closes a descriptor of a frame that is dropped, shut down first (SHUT_RDWR) when shut:
 * a connection that another process holds a copy of (systemd's fd store) would not end
 * with our close, and its client would wait for an end that never comes. */
void ipc_drop_fd(int fd, bool shut);

/* The payload as a C string (IPC_LISTENER_ADD/REMOVE, IPC_LOGLEVEL). */
const char *ipc_msg_str(const struct ipc_msg *msg);

/* Copies a fixed-size payload out (memcpy, so alignment does not matter). Returns 0, or
 * -EPROTO when the message length differs from size. */
int ipc_msg_get(const struct ipc_msg *msg, void *out, size_t size);

/* A stable name for logs ("PING", "LISTENER_ADD", "?" for unknown). */
const char *ipc_type_name(uint16_t type);

#endif
