/* Worker UDP I/O: listener sockets (recvmmsg, each datagram to the TURN dispatcher), sends to
 * UDP clients (one by one, or grouped into UDP_SEGMENT runs), and the send helpers the
 * relay sockets share (relaysock.c). */
#include "config.h"

#include "worker/transport.h"
#include "worker/wk.h"

#include <errno.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "stun/stun_frame.h"
#include "stun/stun_wire.h"
#include "worker/sockbuf.h"

int wk_recv_batch(struct worker *w, int fd, size_t cap, struct mmsghdr *msgs, struct iovec *iov,
		  struct sockaddr_storage *from)
{
	int n;

	memset(msgs, 0, sizeof(*msgs) * WK_BATCH);
	for (int i = 0; i < WK_BATCH; i++) {
		iov[i].iov_base = w->rx[i] + WK_HEADROOM;
		iov[i].iov_len = cap;
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
		msgs[i].msg_hdr.msg_name = &from[i];
		msgs[i].msg_hdr.msg_namelen = sizeof(from[i]);
	}
	n = recvmmsg(fd, msgs, WK_BATCH, MSG_DONTWAIT, NULL);
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		shm_ctr_add(w->ctr, SHM_CTR_ERR_RECV, 1);
	return n;
}

void wk_listener_drain(struct worker *w, struct wk_listener *l, wk_dgram_fn *fn)
{
	struct mmsghdr msgs[WK_BATCH];
	struct iovec iov[WK_BATCH];
	struct sockaddr_storage from[WK_BATCH];
	int n;

	/* Bounded: a few batches per wakeup, then let other sockets run. Client -> peer
	 * datagrams of a plain UDP batch may be grouped; DTLS plaintext lives in one scratch
	 * buffer per datagram, so it goes at once. */
	w->batch_group = !l->secure;
	for (int round = 0; round < 8; round++) {
		n = wk_recv_batch(w, l->fd, WK_DGRAM_MAX, msgs, iov, from);
		if (n <= 0)
			break;
		w->batch_ns = mono_ns();
		wk_wake_units(&w->wake, (uint32_t)n);
		for (int i = 0; i < n; i++) {
			size_t len = msgs[i].msg_len;

			shm_ctr_add(w->ctr, SHM_CTR_CLIENT_PKTS_IN, 1);
			shm_ctr_add(w->ctr, SHM_CTR_CLIENT_BYTES_IN, len);
			if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
				shm_ctr_add(w->ctr, SHM_CTR_ERR_MALFORMED, 1);
				continue;
			}
			if (!l->snap_ok || !w->snap)
				continue;
			shm_lctr_add(w->ctr, l->slot, SHM_LCTR_CLIENT_PKTS_IN, 1);
			shm_lctr_add(w->ctr, l->slot, SHM_LCTR_CLIENT_BYTES_IN, len);
			fn(w, l, (struct sockaddr *)&from[i], msgs[i].msg_hdr.msg_namelen,
			   w->rx[i] + WK_HEADROOM, len);
		}
		w->up->batch_end(w);	/* before the next recvmmsg reuses the rx slots */
		w->batch_ns = 0;
		if (n < WK_BATCH)
			break;
	}
	w->batch_group = false;
}

static void wk_udp_dgram(struct worker *w, struct wk_listener *l, const struct sockaddr *from,
			 socklen_t fromlen, uint8_t *buf, size_t len)
{
	struct wk_ep ep = { .l = l, .c = NULL, .addr = from, .addr_len = fromlen };

	if (wk_pp_enabled(l)) {
		wk_pp_udp_input(w, l, from, buf, len);
		return;
	}
	w->up->input(w, &ep, buf, len);
}

static void wk_udp_listener_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_listener *l = io->data;

	wk_listener_drain(wk_checked(l->w), l, wk_udp_dgram);
}

/* sendto; on EMSGSIZE from a wk_df_fast socket, once more fragmentable (see above). */
ssize_t wk_sendto_df(int fd, bool df_fast, const void *buf, size_t len,
		     const struct sockaddr *to, socklen_t to_len)
{
	int want = IP_PMTUDISC_WANT, err;
	ssize_t rc = sendto(fd, buf, len, MSG_DONTWAIT, to, to_len);

	if (rc >= 0 || errno != EMSGSIZE || !df_fast)
		return rc;
	if (setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &want, sizeof(want)) < 0) {
		errno = EMSGSIZE;
		return -1;
	}
	rc = sendto(fd, buf, len, MSG_DONTWAIT, to, to_len);
	err = errno;
	wk_df_fast(fd, AF_INET);
	errno = err;
	return rc;
}

int wk_udp_start(struct worker *w, struct wk_listener *l)
{
	wk_sockbuf_set(l->fd, WK_SOCKBUF_LISTENER);
	l->df_fast = wk_df_fast(l->fd, l->family);
	ev_io_init(&l->io, wk_udp_listener_cb, l->fd, EV_READ);
	l->io.data = l;
	ev_io_start(w->loop, &l->io);
	return 0;
}

/* One sendmsg of n messages of seg bytes each (the last may be shorter), cut into
 * datagrams by the kernel (UDP_SEGMENT): one skb and one route lookup instead of n. */
ssize_t wk_send_segments(int fd, const struct sockaddr *to, socklen_t to_len,
			 struct iovec *iov, unsigned n, size_t seg)
{
	union {
		char buf[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} ctl;
	struct msghdr m = { .msg_name = (void *)to,
			    .msg_namelen = to_len,
			    .msg_iov = iov,
			    .msg_iovlen = n,
			    .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm;
	uint16_t gso = (uint16_t)seg;

	memset(&ctl, 0, sizeof(ctl));
	cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_UDP;
	cm->cmsg_type = UDP_SEGMENT;
	cm->cmsg_len = CMSG_LEN(sizeof(gso));
	memcpy(CMSG_DATA(cm), &gso, sizeof(gso));
	return sendmsg(fd, &m, MSG_DONTWAIT);
}

/* After a failed UDP_SEGMENT send: true when the socket will never take one (no GSO on
 * this path); EINVAL (a segment above the MTU) and EAGAIN only fail this send. */
bool wk_gso_unsupported(int err)
{
	return err == EOPNOTSUPP || err == ENOPROTOOPT || err == EIO;
}

/* Sends run g (not empty) on fd as one UDP_SEGMENT message when it holds several and the
 * socket takes them; true when it went so. false: the caller sends the datagrams one by
 * one (a socket that lacks UDP_SEGMENT gets *gso_off). The run is empty afterwards. */
bool wk_run_send(struct wk_gso_run *g, int fd, bool *gso_off)
{
	unsigned n = g->n;

	g->n = 0;
	if (n < 2 || *gso_off)
		return false;
	if (wk_send_segments(fd, (struct sockaddr *)&g->to, g->to_len, g->iov, n, g->seg) >= 0)
		return true;
	if (wk_gso_unsupported(errno))
		*gso_off = true;
	return false;
}

void wk_ctg_flush(struct worker *w)
{
	struct wk_ctg *g = w->ctg;
	struct wk_gso_run *run = &g->run;
	unsigned n = run->n;

	if (!n)
		return;
	if (wk_run_send(run, g->l->fd, &g->l->gso_off)) {
		wk_client_sent(w, g->l, n, run->total);
		return;
	}
	for (unsigned i = 0; i < n; i++)
		wk_udp_send(w, g->l, (struct sockaddr *)&run->to, run->to_len, run->iov[i].iov_base,
			    run->iov[i].iov_len);
}

void wk_ctg_send(struct worker *w, struct wk_listener *l, const struct sockaddr *to,
		 socklen_t to_len, const uint8_t *buf, size_t len)
{
	struct wk_ctg *g = w->ctg;
	bool groupable = w->batch_group && !l->secure && !l->gso_off && len > 0 &&
			 len <= WK_GSO_SEG_MAX;

	if (g->run.n && !(groupable && g->l == l && wk_run_takes(&g->run, to, len)))
		wk_ctg_flush(w);
	if (!groupable) {
		wk_udp_send(w, l, to, to_len, buf, len);
		return;
	}
	g->l = l;
	memcpy(g->slot[g->run.n], buf, len);
	wk_run_add(&g->run, to, to_len, g->slot[g->run.n], len);
}

void wk_udp_send(struct worker *w, struct wk_listener *l, const struct sockaddr *to,
		 socklen_t to_len, const uint8_t *buf, size_t len)
{
	if (wk_sendto_df(l->fd, l->df_fast, buf, len, to, to_len) < 0) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_SEND, 1);
		return;
	}
	wk_client_sent(w, l, 1, len);
}
