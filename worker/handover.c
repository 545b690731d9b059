/* Worker hand-over: a short-circuited datagram for a client that another worker owns and
 * this one cannot reach (a TCP, TLS or DTLS client: its connection lives in its worker)
 * goes to that worker over its slot's AF_UNIX datagram socketpair (the heritage's
 * handover_tx/handover_rx, made by the master before the first fork and kept for its
 * life), and the owner runs the receiving half as for its own allocations (wk_sc_accept,
 * worker/shortcut.c). Nothing goes through a relay socket or the loopback.
 *
 * One message per datagram: struct wk_ho_hdr, then the payload. Only the daemon's own
 * processes hold these sockets, yet the receiver trusts no field: the lengths are checked
 * here, the record (index, generation, owner, state, relay port) against the table under
 * its seqlock by wk_sc_accept. Messages of one sender to one slot keep their order (one
 * socket queue). A full channel drops the datagram, counted as a send error, as a full
 * relay socket would; it never falls back to the relay sockets (that would reorder the
 * flow, and put back the path this replaces). */
#include "config.h"

#include "worker/relay_priv.h"
#include "worker/wk.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "common/log.h"
#include "shm/shm_relay.h"

#define WK_HO_MAGIC 0x484f5631u /* "HOV1" */
#define WK_HO_ROUNDS 8		/* batches per wakeup, then other sockets run */

/* The header of one message; the payload follows (the datagram's length gives its size). */
struct wk_ho_hdr {
	uint32_t magic;
	uint32_t idx;		/* the receiving record */
	uint64_t gen;		/* its claim generation, as the sender read it */
	struct shm_addr from;	/* the sender's announced address (IP and relay port) */
	uint16_t port;		/* the receiver's relay port that the peer address named */
	uint16_t pad;
};

int wk_ho_send(struct worker *w, const struct shm_relay_target *t, uint16_t port,
	       const struct shm_addr *from, const uint8_t *data, size_t len)
{
	struct wk_ho_hdr h = {
		.magic = WK_HO_MAGIC, .idx = t->idx, .gen = t->gen, .from = *from, .port = port
	};
	struct iovec iov[2] = { { .iov_base = &h, .iov_len = sizeof(h) },
				{ .iov_base = (void *)data, .iov_len = len } };
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };

	if (w->h->handover_tx == NULL || t->owner >= w->h->slot_count || t->owner == w->slot)
		return -ENOTCONN;
	if (sendmsg(w->h->handover_tx[t->owner], &msg, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		int rc = -errno;

		log_debug("turn", "hand-over to slot %u: %s", t->owner, strerror(-rc));
		return rc;
	}
	return 0;
}

/* One received message of n bytes at buf (trunc: it did not fit): the header checked and
 * the payload handed to the receiving half. A message this code cannot have sent is a bug
 * somewhere in the daemon: counted as an internal error. */
static void wk_ho_msg(struct worker *w, const uint8_t *buf, size_t n, bool trunc)
{
	struct wk_ho_hdr h;

	if (trunc || n < sizeof(h)) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_INTERNAL, 1);
		return;
	}
	memcpy(&h, buf, sizeof(h));
	if (h.magic != WK_HO_MAGIC || n - sizeof(h) > WK_DGRAM_MAX - 4) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_INTERNAL, 1);
		return;
	}
	wk_sc_accept(w, h.idx, h.gen, h.port, &h.from, buf + sizeof(h), n - sizeof(h));
}

/* recvmmsg of up to WK_BATCH messages into the worker's rx slots (whole slots: a header
 * and a payload of up to 64 KiB fit, no headroom needed, wk_sc_receive copies). */
static int wk_ho_recv(struct worker *w, struct mmsghdr *msgs, struct iovec *iov)
{
	int n;

	memset(msgs, 0, sizeof(*msgs) * WK_BATCH);
	for (int i = 0; i < WK_BATCH; i++) {
		iov[i].iov_base = w->rx[i];
		iov[i].iov_len = sizeof(w->rx[i]);
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	n = recvmmsg(w->h->handover_rx, msgs, WK_BATCH, MSG_DONTWAIT, NULL);
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		shm_ctr_add(w->ctr, SHM_CTR_ERR_RECV, 1);
	return n;
}

static void wk_ho_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct worker *w = wk_checked(io->data);
	struct mmsghdr msgs[WK_BATCH];
	struct iovec iov[WK_BATCH];

	for (int round = 0; round < WK_HO_ROUNDS; round++) {
		int n = wk_ho_recv(w, msgs, iov);

		if (n <= 0)
			break;
		w->batch_ns = mono_ns();
		for (int i = 0; i < n; i++)
			wk_ho_msg(w, w->rx[i], msgs[i].msg_len,
				  (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0);
		w->batch_ns = 0;
		if (n < WK_BATCH)
			break;
	}
}

void wk_ho_start(struct worker *w)
{
	if (w->h->handover_tx == NULL)
		return;
	ev_io_init(&w->ho_io, wk_ho_cb, w->h->handover_rx, EV_READ);
	w->ho_io.data = w;
	ev_io_start(w->loop, &w->ho_io);
}
