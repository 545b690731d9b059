/* Worker UDP I/O: listener sockets (recvmmsg) and relay sockets (peer -> client, sendmmsg). */
#include "config.h"

#include "worker/relay.h"

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
	w->txg.on = !l->secure;
	for (int round = 0; round < 8; round++) {
		n = wk_recv_batch(w, l->fd, WK_DGRAM_MAX, msgs, iov, from);
		if (n <= 0)
			break;
		w->batch_ns = mono_ns();
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
		wk_txg_flush(w);	/* before the next recvmmsg reuses the rx slots */
		w->batch_ns = 0;
		if (n < WK_BATCH)
			break;
	}
	w->txg.on = false;
}

static void wk_udp_dgram(struct worker *w, struct wk_listener *l, const struct sockaddr *from,
			 socklen_t fromlen, uint8_t *buf, size_t len)
{
	struct wk_ep ep = { .l = l, .c = NULL, .addr = from, .addr_len = fromlen };

	if (wk_pp_enabled(l)) {
		wk_pp_udp_input(w, l, from, buf, len);
		return;
	}
	wk_turn_input(w, &ep, buf, len);
}

static void wk_udp_listener_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_listener *l = io->data;

	wk_listener_drain(wk_checked(l->w), l, wk_udp_dgram);
}

/* sendto; on EMSGSIZE from a wk_df_fast socket, once more fragmentable (see above). */
static ssize_t wk_sendto_df(int fd, bool df_fast, const void *buf, size_t len,
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
	wk_sockbuf_grow(l->fd, WK_SOCKBUF_LISTENER);
	l->df_fast = wk_df_fast(l->fd, l->family);
	ev_io_init(&l->io, wk_udp_listener_cb, l->fd, EV_READ);
	l->io.data = l;
	ev_io_start(w->loop, &l->io);
	return 0;
}

/* Writes a Data indication header in front of the payload at `payload` (len bytes,
 * with WK_HEADROOM bytes free before it and 3 after for padding). The header is built by
 * the codec into a small scratch and copied: 20 + 24 (XOR-PEER-ADDRESS, IPv6) + 4 (DATA)
 * = 48 bytes at most. Returns the message start, or NULL. */
static uint8_t *wk_data_indication(uint8_t *payload, size_t len, const struct sockaddr *peer,
				   size_t *out_len)
{
	uint8_t hdr[WK_HEADROOM], tid[STUN_TID_LEN];
	struct stun_builder b;
	size_t hlen = 0, padded = STUN_PAD4(len), body;
	uint8_t *m;

	if (stun_tid_random(tid) < 0)
		return NULL;
	stun_build_init(&b, hdr, sizeof(hdr) - 4, STUN_DATA, STUN_INDICATION, tid);
	stun_build_addr(&b, STUN_ATTR_XOR_PEER_ADDRESS, peer);
	if (stun_build_finish(&b, &hlen) < 0 || len > 0xffff)
		return NULL;
	wire_put_u16(hdr + hlen, STUN_ATTR_DATA);
	wire_put_u16(hdr + hlen + 2, (uint16_t)len);
	hlen += 4;
	body = hlen - STUN_HEADER_LEN + padded;
	if (body > 0xffff)
		return NULL;
	wire_put_u16(hdr + 2, (uint16_t)body);	/* the message length field */
	m = payload - hlen;
	memcpy(m, hdr, hlen);
	memset(payload + len, 0, padded - len);
	*out_len = hlen + padded;
	return m;
}

uint8_t *wk_frame_peer(uint8_t *payload, size_t len, const struct sockaddr *peer, uint16_t chan,
		       bool stream, size_t *out_len)
{
	uint8_t *h = payload - STUN_CHANDATA_HEADER_LEN;
	size_t total = STUN_CHANDATA_HEADER_LEN + len;

	if (!chan)
		return wk_data_indication(payload, len, peer, out_len);
	/* The wide range: the channel was checked against the range of its ChannelBind. */
	if (stun_chan_write_header(h, chan, len, STUN_CHAN_RFC5766) < 0)
		return NULL;
	while (stream && (total & 3)) {
		payload[len++] = 0;
		total++;
	}
	*out_len = total;
	return h;
}

void wk_rbatch_add(struct wk_rbatch *b, const struct sockaddr *to, socklen_t to_len, uint8_t *m,
		   size_t mlen)
{
	struct mmsghdr *out = &b->out[b->n];

	b->iov[b->n].iov_base = m;
	b->iov[b->n].iov_len = mlen;
	memset(out, 0, sizeof(*out));
	out->msg_hdr.msg_iov = &b->iov[b->n];
	out->msg_hdr.msg_iovlen = 1;
	out->msg_hdr.msg_name = (void *)to;
	out->msg_hdr.msg_namelen = to_len;
	b->n++;
}

/* Bytes of out[0..n). */
static size_t wk_msgs_bytes(const struct mmsghdr *out, unsigned n)
{
	size_t total = 0;

	for (unsigned i = 0; i < n; i++)
		total += out[i].msg_hdr.msg_iov->iov_len;
	return total;
}

/* One sendmsg of n messages of seg bytes each (the last may be shorter), cut into
 * datagrams by the kernel (UDP_SEGMENT): one skb and one route lookup instead of n. */
static ssize_t wk_send_segments(int fd, const struct sockaddr *to, socklen_t to_len,
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
static bool wk_gso_unsupported(int err)
{
	return err == EOPNOTSUPP || err == ENOPROTOOPT || err == EIO;
}

/* All of a relay socket's batch goes to one client: when the messages have one size (the
 * last may be shorter), they leave as one UDP_SEGMENT send instead of a sendmmsg of
 * separate datagrams. Returns false when the batch does not qualify or the kernel refused
 * (the caller then uses sendmmsg). */
static bool wk_relay_gso(struct wk_alloc *a, const struct sockaddr *to, socklen_t to_len,
			 struct mmsghdr *out, unsigned n)
{
	struct iovec iov[WK_BATCH];
	size_t seg = out[0].msg_hdr.msg_iov->iov_len, total = 0;

	if (n < 2 || a->l->gso_off || seg > WK_GSO_SEG_MAX)
		return false;
	for (unsigned i = 0; i < n; i++) {
		size_t len = out[i].msg_hdr.msg_iov->iov_len;

		if (len != seg && !(i == n - 1 && len < seg))
			return false;
		iov[i] = *out[i].msg_hdr.msg_iov;
		total += len;
	}
	if (total > WK_GSO_TOTAL_MAX)
		return false;
	if (wk_send_segments(a->l->fd, to, to_len, iov, n, seg) >= 0)
		return true;
	if (wk_gso_unsupported(errno))
		a->l->gso_off = true;	/* never try again on this socket */
	return false;
}

static void wk_relay_flush(struct worker *w, struct wk_alloc *a, struct mmsghdr *out, unsigned n)
{
	unsigned sent = 0;
	socklen_t to_len;
	const struct sockaddr *to = wk_alloc_dest(a, &to_len);

	if (wk_relay_gso(a, to, to_len, out, n)) {
		wk_client_sent(w, a->l, n, wk_msgs_bytes(out, n));
		return;
	}
	while (sent < n) {
		int r = sendmmsg(a->l->fd, out + sent, n - sent, MSG_DONTWAIT);

		if (r <= 0 && errno == EMSGSIZE &&
		    wk_sendto_df(a->l->fd, a->l->df_fast, out[sent].msg_hdr.msg_iov->iov_base,
				 out[sent].msg_hdr.msg_iov->iov_len, to, to_len) >= 0)
			r = 1;
		if (r <= 0) {
			shm_ctr_add(w->ctr, SHM_CTR_ERR_SEND, n - sent);
			return;
		}
		wk_client_sent(w, a->l, (unsigned)r, wk_msgs_bytes(out + sent, (unsigned)r));
		sent += (unsigned)r;
	}
}

/* Peer -> client for one relay socket: each datagram goes through the relay pipeline
 * (wk_relay_in); UDP clients get them in one sendmmsg batch through the listener socket. */
void wk_relay_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct wk_relay *r = io->data;
	struct wk_alloc *a = wk_alloc_checked(r->a);
	struct worker *w = wk_checked(a->w);
	struct mmsghdr msgs[WK_BATCH];
	struct iovec iov[WK_BATCH];
	struct sockaddr_storage from[WK_BATCH];
	uint64_t now_ns = mono_ns();
	struct wk_rbatch b;
	struct wk_rx rx;
	int n;

	n = wk_recv_batch(w, r->fd, WK_DGRAM_MAX - 4, msgs, iov, from);	/* room for padding */
	if (n <= 0)
		return;
	wk_relay_socket_rx(a, &rx);
	b.n = 0;
	for (int i = 0; i < n; i++) {
		const struct sockaddr *peer = (struct sockaddr *)&from[i];
		uint8_t *payload = w->rx[i] + WK_HEADROOM;
		size_t len = msgs[i].msg_len;
		struct sockaddr_storage ann;

		/* From another allocation of ours or a sibling's: its announced address. */
		rx.relayed = w->n_masks && wk_sc_announced_from(w, a->l, peer, &ann);
		if (rx.relayed)
			peer = (struct sockaddr *)&ann;
		wk_relay_received(w, len);
		if (!(msgs[i].msg_hdr.msg_flags & MSG_TRUNC))
			wk_relay_in(w, &rx, peer, payload, payload, len, now_ns, &b);
	}
	if (b.n)
		wk_relay_flush(w, a, b.out, b.n);
}

/* After a send succeeded: the peer counters, and the sibling one when it went to one. */
static void wk_peer_sent(struct worker *w, struct wk_alloc *a, uint32_t cl, unsigned n,
			 size_t bytes, bool sib)
{
	struct wk_party p = wk_party_own(a);

	wk_relay_count(w, &p, SHM_BW_TO_PEER, cl, n, bytes);
	if (sib)
		shm_ctr_add(w->ctr, SHM_CTR_SIBLING_OUT, n);
}

static void wk_peer_send_one(struct worker *w, struct wk_alloc *a, const struct wk_relay *r,
			     const struct sockaddr *peer, uint32_t cl, const void *data, size_t len,
			     bool sib)
{
	if (wk_sendto_df(r->fd, r->df_fast, data, len, peer, wk_addr_len(peer)) < 0) {
		shm_ctr_add(w->ctr, SHM_CTR_ERR_SEND, 1);
		return;
	}
	wk_peer_sent(w, a, cl, 1, len, sib);
}

/* Whether run g can take a datagram of len bytes to `to`. */
static bool wk_run_takes(const struct wk_gso_run *g, const struct sockaddr *to, size_t len)
{
	return !g->closed && len <= g->seg && g->n < WK_BATCH &&
	       g->total + len <= WK_GSO_TOTAL_MAX &&
	       wk_addr_equal(to, (const struct sockaddr *)&g->to);
}

/* Appends data (len bytes, which stay where they are until the run is sent), starting the
 * run when it is empty. */
static void wk_run_add(struct wk_gso_run *g, const struct sockaddr *to, socklen_t to_len,
		       const void *data, size_t len)
{
	if (!g->n) {
		memcpy(&g->to, to, to_len);
		g->to_len = to_len;
		g->seg = len;
		g->total = 0;
		g->closed = false;
	}
	g->iov[g->n].iov_base = (void *)data;
	g->iov[g->n].iov_len = len;
	g->n++;
	g->total += len;
	if (len < g->seg)
		g->closed = true;
}

/* Sends run g (not empty) on fd as one UDP_SEGMENT message when it holds several and the
 * socket takes them; true when it went so. false: the caller sends the datagrams one by
 * one (a socket that lacks UDP_SEGMENT gets *gso_off). The run is empty afterwards. */
static bool wk_run_send(struct wk_gso_run *g, int fd, bool *gso_off)
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

static void wk_ctg_flush(struct worker *w)
{
	struct wk_ctg *g = &w->ctg;
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
	struct wk_ctg *g = &w->ctg;
	bool groupable = w->txg.on && !l->secure && !l->gso_off && len > 0 &&
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

void wk_txg_flush(struct worker *w)
{
	struct wk_txg *g = &w->txg;
	struct wk_gso_run *run = &g->run;
	unsigned n = run->n;

	wk_ctg_flush(w);
	if (!n)
		return;
	if (wk_run_send(run, g->r->fd, &g->r->gso_off)) {
		wk_peer_sent(w, g->a, g->cl, n, run->total, g->sib);
		return;
	}
	for (unsigned i = 0; i < n; i++)
		wk_peer_send_one(w, g->a, g->r, (struct sockaddr *)&run->to, g->cl,
				 run->iov[i].iov_base, run->iov[i].iov_len, g->sib);
}

void wk_peer_send(struct worker *w, struct wk_alloc *a, struct wk_relay *r,
		  const struct sockaddr *peer, uint32_t cl, const uint8_t *data, size_t len,
		  bool sib)
{
	struct wk_txg *g = &w->txg;
	bool groupable = g->on && !r->gso_off && len > 0 && len <= WK_GSO_SEG_MAX;

	if (g->run.n &&
	    !(groupable && g->r == r && g->sib == sib && wk_run_takes(&g->run, peer, len)))
		wk_txg_flush(w);
	if (!groupable) {
		wk_peer_send_one(w, a, r, peer, cl, data, len, sib);
		return;
	}
	if (!g->run.n) {
		g->a = a;
		g->r = r;
		g->cl = cl;
		g->sib = sib; /* the run's one peer is or is not a sibling */
	}
	wk_run_add(&g->run, peer, wk_addr_len(peer), data, len);
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
