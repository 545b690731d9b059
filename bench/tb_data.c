/* turnbench data phase: ChannelData closed loop (relay, direct, sym) or fixed offered rate
 * (rate). In sym mode the initiators' packets come back from the responders, which send each
 * ChannelData they receive back as it is, through their own allocations (their channel
 * 0x4000 is bound to the initiator's relayed address): two deliveries per round trip, each
 * through two allocations of the server.
 *
 * TCP mode: the relay's loop over TURN-over-TCP connections (the relay and the echo peer
 * still UDP): a burst is written as back-to-back ChannelData messages (the payload a multiple
 * of 4, so no padding), and the echoes are cut out of each connection's byte stream.
 *
 * Payload: 8-byte send time (CLOCK_MONOTONIC ns), 4-byte allocation index, 4-byte sequence,
 * zero padding. A packet counts when its send time lies in the measured window; its echo
 * counts when it comes back before the drain deadline (0.5 s after the window).
 */
#define _GNU_SOURCE
#include "bench/tb.h"
#include "stun/stun_frame.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DRAIN_NS 500000000ull
#define WRITEOFF_NS 100000000ull
#define MIN_PAYLOAD 16

struct tb_data {
	struct tb_ctx *ctx;
	struct tb_result *r;
	unsigned hdr;			/* 4 for ChannelData, 0 for direct */
	unsigned plen;
	uint64_t t_warm, t_end, t_stop;
	bool sending, sampled_before, sampled_after;
	struct tb_box box0;		/* the machine at the start of the window */
	uint8_t *tx, *rx;		/* TB_BATCH buffers each */
	size_t slot;			/* bytes per buffer */
	struct mmsghdr tm[TB_BATCH], rm[TB_BATCH], em[TB_BATCH];
	struct iovec tv[TB_BATCH], rv[TB_BATCH], ev[TB_BATCH];
};

static void put_payload(struct tb_data *d, uint8_t *p, uint32_t idx, uint32_t seq, uint64_t t)
{
	if (d->hdr)
		stun_chan_write_header(p, TB_CHANNEL, d->plen, STUN_CHAN_RFC8656);
	p += d->hdr;
	memcpy(p, &t, 8);
	memcpy(p + 8, &idx, 4);
	memcpy(p + 12, &seq, 4);
}

static bool in_window(const struct tb_data *d, uint64_t t)
{
	return t >= d->t_warm && t < d->t_end;
}

/* Writes all of buf to a TCP connection: a message cut in two would wreck the stream, so a
 * full send buffer is waited out (1 s at most; then the bytes are lost, an error). */
static int send_all(int fd, const uint8_t *buf, size_t len)
{
	uint64_t limit = tb_now_ns() + 1000000000ull;

	while (len > 0) {
		ssize_t w = send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (w > 0) {
			buf += w;
			len -= (size_t)w;
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (tb_now_ns() > limit)
			return -ETIMEDOUT;
		poll(&(struct pollfd){ .fd = fd, .events = POLLOUT }, 1, 10);
	}
	return 0;
}

/* TCP: count packets as one write of back-to-back ChannelData messages. */
static unsigned send_stream(struct tb_data *d, uint32_t idx, unsigned count)
{
	struct tb_alloc *a = &d->ctx->a[idx];
	size_t each = d->hdr + d->plen, max = TB_BATCH * d->slot / each;
	unsigned total = 0;

	if (a->fd < 0)
		return 0;
	while (count > 0) {
		unsigned k = count < max ? count : (unsigned)max;
		uint64_t t = tb_now_ns();

		for (unsigned j = 0; j < k; j++)
			put_payload(d, d->tx + j * each, idx, a->seq + j, t);
		if (send_all(a->fd, d->tx, k * each) != 0) {
			fprintf(stderr, "turnbench: allocation %u: TCP write failed\n", idx);
			break;
		}
		a->seq += k;
		a->inflight += k;
		d->r->sent_all += k;
		if (in_window(d, t))
			d->r->sent += k;
		total += k;
		count -= k;
	}
	return total;
}

/* Sends count packets on allocation idx with sendmmsg; returns how many left. */
static unsigned send_burst(struct tb_data *d, uint32_t idx, unsigned count)
{
	struct tb_alloc *a = &d->ctx->a[idx];
	unsigned total = 0;

	if (d->ctx->st)
		return send_stream(d, idx, count);
	while (count > 0) {
		unsigned k = count < TB_BATCH ? count : TB_BATCH;
		uint64_t t = tb_now_ns();
		int n;

		for (unsigned j = 0; j < k; j++) {
			put_payload(d, d->tx + j * d->slot, idx, a->seq + j, t);
			d->tv[j].iov_len = d->hdr + d->plen;
		}
		n = sendmmsg(a->fd, d->tm, k, MSG_DONTWAIT);
		if (n <= 0)
			break;
		a->seq += (uint32_t)n;
		a->inflight += (uint32_t)n;
		d->r->sent_all += (uint64_t)n;
		if (in_window(d, t))
			d->r->sent += (uint64_t)n;
		total += (unsigned)n;
		count -= (unsigned)n;
		if ((unsigned)n < k)
			break;
	}
	return total;
}

/* A packet of ours: long enough, and on our channel when relayed. */
static bool is_ours(const struct tb_data *d, const uint8_t *p, size_t len)
{
	if (len < d->hdr + MIN_PAYLOAD)
		return false;
	return !d->hdr || (p[0] == (TB_CHANNEL >> 8) && p[1] == (TB_CHANNEL & 0xff));
}

static uint64_t sent_at(const struct tb_data *d, const uint8_t *p)
{
	uint64_t t;

	memcpy(&t, p + d->hdr, 8);
	return t;
}

static void take_echo(struct tb_data *d, struct tb_alloc *a, const uint8_t *p, size_t len,
		      uint64_t now)
{
	uint64_t t;

	if (!is_ours(d, p, len))
		return;
	t = sent_at(d, p);
	if (a->inflight)
		a->inflight--;
	if (in_window(d, t)) {
		d->r->received++;
		tb_hist_add(&d->r->hist, now - t);
	}
}

/* Sym responder: sends the n received packets back as they are, through its allocation. */
static void echo_back(struct tb_data *d, struct tb_alloc *a, int n)
{
	unsigned k = 0;

	for (int j = 0; j < n; j++) {
		uint8_t *p = d->rx + (size_t)j * d->slot;

		if (!is_ours(d, p, d->rm[j].msg_len))
			continue;
		if (in_window(d, sent_at(d, p)))
			d->r->echoed++;
		d->ev[k] = (struct iovec){ p, d->rm[j].msg_len };
		d->em[k].msg_hdr = (struct msghdr){ .msg_iov = &d->ev[k], .msg_iovlen = 1 };
		k++;
	}
	/* What a full buffer refuses is lost; the initiator writes it off. */
	if (k)
		sendmmsg(a->fd, d->em, k, MSG_DONTWAIT);
}

/* TCP: reads what the connection has and takes every whole ChannelData message of it;
 * STUN messages (none are asked for) are skipped. A closed or unframeable stream is taken
 * out of the loop: its window is lost (the write-off frees it) and the run goes on. */
static void on_stream(struct tb_data *d, uint32_t idx)
{
	struct tb_alloc *a = &d->ctx->a[idx];
	struct tb_stream *st = &d->ctx->st[idx];

	for (int round = 0; round < 8; round++) {
		ssize_t n = recv(a->fd, st->buf + st->len, sizeof(st->buf) - st->len, 0);
		uint64_t now = tb_now_ns();
		size_t off = 0;
		long f;

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0)
			goto broken;
		st->len += (uint32_t)n;
		while ((f = tb_stream_frame(st->buf + off, st->len - off)) > 0) {
			const uint8_t *p = st->buf + off;

			if ((p[0] & 0xc0) == 0x40)
				take_echo(d, a, p, STUN_CHANDATA_HEADER_LEN + ((size_t)p[2] << 8 | p[3]),
					  now);
			off += (size_t)f;
		}
		if (f < 0)
			goto broken;
		memmove(st->buf, st->buf + off, st->len - off);
		st->len -= (uint32_t)off;
		if (st->len == sizeof(st->buf))
			goto broken;
		a->last_rx_ns = now;
	}
	return;
broken:
	fprintf(stderr, "turnbench: allocation %u: the server's TCP stream %s\n", idx,
		st->len == sizeof(st->buf) ? "overflowed" : "closed or unframeable");
	epoll_ctl(d->ctx->ep, EPOLL_CTL_DEL, a->fd, NULL);
	close(a->fd);
	a->fd = -1;		/* send_stream writes no more to it */
	d->r->broken++;
}

static void on_readable(struct tb_data *d, uint32_t idx)
{
	struct tb_alloc *a = &d->ctx->a[idx];
	bool initiator = tb_sym_initiator(d->ctx->o->mode, idx);

	if (d->ctx->st) {
		on_stream(d, idx);
		return;
	}

	for (int round = 0; round < 8; round++) {
		int n = recvmmsg(a->fd, d->rm, TB_BATCH, MSG_DONTWAIT, NULL);
		uint64_t now = tb_now_ns();

		if (n <= 0)
			break;
		if (!initiator)
			echo_back(d, a, n);
		else
			for (int j = 0; j < n; j++)
				take_echo(d, a, d->rx + (size_t)j * d->slot, d->rm[j].msg_len, now);
		a->last_rx_ns = now;
		if (n < TB_BATCH)
			break;
	}
}

/* The window is spread evenly over the senders (sym: the initiators; responders send
 * nothing of their own). */
static unsigned window_of(const struct tb_opts *o, uint32_t idx)
{
	bool sym = o->mode == TB_MODE_SYM;
	unsigned senders = sym ? o->n / 2 : o->n;
	uint32_t k = sym ? idx / 2 : idx;

	if (!tb_sym_initiator(o->mode, idx))
		return 0;
	return o->window / senders + (k < o->window % senders);
}

static void refill(struct tb_data *d, uint32_t idx)
{
	struct tb_alloc *a = &d->ctx->a[idx];
	unsigned w = window_of(d->ctx->o, idx);

	if (d->sending && a->inflight < w)
		send_burst(d, idx, w - a->inflight);
}

/* A window silent for WRITEOFF_NS lost its packets: forget them so the loop cannot stall. */
static void write_off(struct tb_data *d, uint64_t now)
{
	for (uint32_t i = 0; i < d->ctx->o->n; i++) {
		struct tb_alloc *a = &d->ctx->a[i];

		if (a->inflight && now - a->last_rx_ns > WRITEOFF_NS) {
			a->inflight = 0;
			a->last_rx_ns = now;
			refill(d, i);
		}
	}
}

static void edges(struct tb_data *d, uint64_t now)
{
	const struct tb_opts *o = d->ctx->o;
	struct tb_result *r = d->r;

	if (!d->sampled_before && now >= d->t_warm) {
		d->sampled_before = true;
		r->gen_cpu_s = -tb_self_cpu_s();
		r->echo_cpu_s = -tb_pid_cpu_s(o->echo_pid);
		r->box_ok = tb_box_sample(&d->box0) == 0;
		if (o->n_srv)
			r->sampled = tb_sample_server(o, &r->before) == 0;
	}
	if (!d->sampled_after && now >= d->t_end) {
		d->sampled_after = true;
		d->sending = false;
		r->gen_cpu_s += tb_self_cpu_s();
		r->echo_cpu_s += tb_pid_cpu_s(o->echo_pid);
		r->box_ok = tb_box_sample(&r->box) == 0 && r->box_ok;
		r->box.busy_s -= d->box0.busy_s;
		r->box.softirq_s -= d->box0.softirq_s;
		r->box.steal_s -= d->box0.steal_s;
		if (o->n_srv && r->sampled)
			r->sampled = tb_sample_server(o, &r->after) == 0;
	}
}

static bool all_back(const struct tb_data *d)
{
	for (uint32_t i = 0; i < d->ctx->o->n; i++)
		if (d->ctx->a[i].inflight)
			return false;
	return true;
}

static void loop_closed(struct tb_data *d)
{
	struct epoll_event ev[256];
	uint64_t next_check = 0;

	for (uint32_t i = 0; i < d->ctx->o->n; i++) {
		d->ctx->a[i].last_rx_ns = tb_now_ns();
		refill(d, i);
	}
	for (;;) {
		int n = epoll_wait(d->ctx->ep, ev, 256, 1);
		uint64_t now;

		for (int k = 0; k < n; k++) {
			on_readable(d, ev[k].data.u32);
			refill(d, ev[k].data.u32);
		}
		now = tb_now_ns();
		edges(d, now);
		if (now >= d->t_stop || (!d->sending && all_back(d)))
			break;
		if (d->sending && now >= next_check) {
			write_off(d, now);
			next_check = now + WRITEOFF_NS / 2;
		}
	}
}

static void loop_rate(struct tb_data *d)
{
	const struct tb_opts *o = d->ctx->o;
	uint64_t interval = 1000000000ull / o->rate, due = tb_now_ns(), k = 0;
	struct epoll_event ev[256];
	uint8_t *pkt = d->tx;

	/* Wake up on time: the default 50 us timer slack would bunch the sends. */
	prctl(PR_SET_TIMERSLACK, 1000UL);
	for (;;) {
		uint64_t now = tb_now_ns();
		struct timespec ts;
		int n;
		uint64_t wait;

		while (d->sending && due <= now) {
			uint32_t idx = (uint32_t)(k % o->n);
			struct tb_alloc *a = &d->ctx->a[idx];

			put_payload(d, pkt, idx, a->seq++, now);
			if (send(a->fd, pkt, d->hdr + d->plen, MSG_DONTWAIT) > 0) {
				d->r->sent_all++;
				if (in_window(d, now))
					d->r->sent++;
			}
			k++;
			due += interval;
		}
		edges(d, now);
		if (now >= d->t_stop)
			break;
		wait = d->sending && due > now ? due - now : (d->sending ? 0 : 1000000);
		ts.tv_sec = (time_t)(wait / 1000000000ull);
		ts.tv_nsec = (long)(wait % 1000000000ull);
		n = epoll_pwait2(d->ctx->ep, ev, 256, &ts, NULL);
		for (int j = 0; j < n; j++)
			on_readable(d, ev[j].data.u32);
	}
}

int tb_data_run(struct tb_ctx *ctx, struct tb_result *r)
{
	const struct tb_opts *o = ctx->o;
	struct tb_data *d = calloc(1, sizeof(*d));
	uint64_t t0 = tb_now_ns();
	int ret = -ENOMEM;

	if (!d)
		return -ENOMEM;
	d->ctx = ctx;
	d->r = r;
	d->hdr = o->mode == TB_MODE_DIRECT ? 0 : STUN_CHANDATA_HEADER_LEN;
	d->plen = o->payload;
	d->slot = (STUN_CHANDATA_HEADER_LEN + TB_MAX_PAYLOAD + 64 + 63) & ~(size_t)63;
	d->tx = calloc(TB_BATCH, d->slot);
	d->rx = calloc(TB_BATCH, d->slot);
	if (!d->tx || !d->rx || tb_hist_init(&r->hist) != 0)
		goto out;
	for (int j = 0; j < TB_BATCH; j++) {
		d->tv[j] = (struct iovec){ d->tx + (size_t)j * d->slot, 0 };
		d->tm[j].msg_hdr = (struct msghdr){ .msg_iov = &d->tv[j], .msg_iovlen = 1 };
		d->rv[j] = (struct iovec){ d->rx + (size_t)j * d->slot, d->slot };
		d->rm[j].msg_hdr = (struct msghdr){ .msg_iov = &d->rv[j], .msg_iovlen = 1 };
	}
	d->t_warm = t0 + (uint64_t)(o->warmup * 1e9);
	d->t_end = d->t_warm + (uint64_t)(o->duration * 1e9);
	d->t_stop = d->t_end + DRAIN_NS;
	d->sending = true;
	if (o->mode == TB_MODE_RATE)
		loop_rate(d);
	else
		loop_closed(d);
	r->window_s = o->duration;
	ret = 0;
out:
	free(d->tx);
	free(d->rx);
	free(d);
	return ret;
}
