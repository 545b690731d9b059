/* Worker relay sockets: the pipeline's UDP side. Peer -> client: a relay socket's batch,
 * each datagram through wk_relay_in, sent to its UDP client in one sendmmsg or UDP_SEGMENT
 * send. Client -> peer: admitted datagrams of one listener batch to one peer grouped into
 * one UDP_SEGMENT send (struct wk_txg). Framing of peer data for the client (ChannelData,
 * Data indication). */
#include "config.h"

#include "worker/relay_priv.h"
#include "worker/table.h"
#include "worker/transport.h"
#include "worker/wk.h"

#include <errno.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "stun/stun_frame.h"
#include "stun/stun_wire.h"

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

/* What wk_recv_batch got from a handed-over socket not checked yet (wk_relay_verify) that
 * no UDP socket gives: an error other than "nothing to read" (not a socket, a stream
 * socket not connected: a readable one would report it at every loop iteration, the pass
 * that checks never coming), or a message without a source address (a connected stream
 * socket). */
static bool wk_relay_suspect(int n, const struct mmsghdr *msgs)
{
	if (n < 0)
		return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
	return n > 0 && msgs[0].msg_hdr.msg_namelen == 0;
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
	if (r->unchecked && wk_relay_suspect(n, msgs) && !wk_relay_verify(w, a, r))
		return;	/* not the UDP socket it was handed over as: a ended */
	if (n <= 0)
		return;
	wk_wake_units(&w->wake, (uint32_t)n);
	wk_relay_socket_rx(a, &rx);
	b.n = 0;
	for (int i = 0; i < n; i++) {
		const struct sockaddr *peer = (struct sockaddr *)&from[i];
		uint8_t *payload = w->rx[i] + WK_HEADROOM;
		size_t len = msgs[i].msg_len;
		struct sockaddr_storage ann;

		/* From another allocation of ours or a sibling's: its announced address. */
		rx.relayed = w->pl->n_masks && wk_sc_announced_from(w, a->l, peer, &ann);
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

void wk_txg_flush(struct worker *w)
{
	struct wk_txg *g = &w->pl->txg;
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

void wk_txg_flush_alloc(struct worker *w, struct wk_alloc *a)
{
	if (w->pl->txg.run.n && w->pl->txg.a == a)
		wk_txg_flush(w);
}

void wk_peer_send(struct worker *w, struct wk_alloc *a, struct wk_relay *r,
		  const struct sockaddr *peer, uint32_t cl, const uint8_t *data, size_t len,
		  bool sib)
{
	struct wk_txg *g = &w->pl->txg;
	bool groupable = w->batch_group && !r->gso_off && len > 0 && len <= WK_GSO_SEG_MAX;

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
