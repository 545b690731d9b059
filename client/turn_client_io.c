/* TURN client transport: send, message-at-a-time receive (plain or TLS/DTLS), relay queue. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/turn_client_int.h"
#include "common/mono.h"

int64_t tc_now_ms(void)
{
	return (int64_t)mono_ms();
}

int tc_wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = { .fd = fd, .events = events };
	/* Bounded by the deadline; EINTR just recomputes the remaining time. */
	for (;;) {
		int64_t left = deadline - tc_now_ms();
		int rc;

		if (left <= 0)
			return -ETIMEDOUT;
		rc = poll(&p, 1, left > 60000 ? 60000 : (int)left);
		if (rc > 0)
			return 0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

int tc_send(struct turn_client *c, const uint8_t *buf, size_t len)
{
	int64_t deadline = tc_now_ms() + c->timeout_ms;
	size_t off = 0;

	if (c->ssl != NULL)
		return tc_tls_write(c, buf, len, deadline);
	if (c->transport == TURN_CLIENT_UDP) {
		ssize_t n = send(c->fd, buf, len, 0);
		if (n < 0)
			return -errno;
		return (size_t)n == len ? 0 : -EMSGSIZE;
	}
	while (off < len) {
		ssize_t n = send(c->fd, buf + off, len - off, MSG_NOSIGNAL);
		int rc;

		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		rc = tc_wait_fd(c->fd, POLLOUT, deadline);
		if (rc != 0)
			return rc;
	}
	return 0;
}

static int recv_udp(struct turn_client *c, int64_t deadline, const uint8_t **msg, size_t *len)
{
	if (c->ssl != NULL) {
		int rc = tc_tls_read(c, c->rx, TC_RX_CAP, deadline, len);
		if (rc == 0)
			*msg = c->rx;
		return rc;
	}
	for (;;) {
		int rc = tc_wait_fd(c->fd, POLLIN, deadline);
		ssize_t n;

		if (rc != 0)
			return rc;
		n = recv(c->fd, c->rx, TC_RX_CAP, MSG_DONTWAIT);
		if (n >= 0) {
			*msg = c->rx;
			*len = (size_t)n;
			return 0;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
	}
}

static int recv_tcp(struct turn_client *c, int64_t deadline, const uint8_t **msg, size_t *len)
{
	/* Drop the frame handed out last time before looking for the next one. */
	if (c->rx_used) {
		memmove(c->rx, c->rx + c->rx_used, c->rx_len - c->rx_used);
		c->rx_len -= c->rx_used;
		c->rx_used = 0;
	}
	for (;;) {
		size_t fl;
		int rc = stun_frame_next(c->rx, c->rx_len, TC_RX_CAP, STUN_CHAN_RFC8656, &fl);
		ssize_t n;

		if (rc == 0) {
			*msg = c->rx;
			*len = fl;
			c->rx_used = fl;
			return 0;
		}
		if (rc != -EAGAIN)
			return rc;
		if (c->ssl != NULL) {
			size_t got = 0;

			rc = tc_tls_read(c, c->rx + c->rx_len, TC_RX_CAP - c->rx_len, deadline,
					 &got);
			if (rc != 0)
				return rc;
			c->rx_len += got;
			continue;
		}
		rc = tc_wait_fd(c->fd, POLLIN, deadline);
		if (rc != 0)
			return rc;
		n = recv(c->fd, c->rx + c->rx_len, TC_RX_CAP - c->rx_len, MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n > 0)
			c->rx_len += (size_t)n;
		else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
	}
}

int tc_recv_msg(struct turn_client *c, int64_t deadline, const uint8_t **msg, size_t *len)
{
	if (tc_is_dgram(c))
		return recv_udp(c, deadline, msg, len);
	return recv_tcp(c, deadline, msg, len);
}

bool turn_client_pending(const struct turn_client *c)
{
	if (c == NULL)
		return false;
	if (c->q_count > 0 || (tc_is_stream(c) && c->rx_len > c->rx_used))
		return true;
	return c->ssl != NULL && SSL_has_pending(c->ssl);
}

bool tc_is_relayed(const uint8_t *msg, size_t len)
{
	uint16_t type;

	if (stun_is_channeldata(msg, len, STUN_CHAN_RFC8656))
		return true;
	if (!stun_is_stun(msg, len))
		return false;
	type = (uint16_t)(msg[0] << 8 | msg[1]);
	return type == stun_type_make(STUN_DATA, STUN_INDICATION);
}

void tc_queue_push(struct turn_client *c, const uint8_t *msg, size_t len)
{
	uint8_t *copy = malloc(len ? len : 1);
	unsigned tail;

	if (copy == NULL)
		return;	/* like a lost datagram */
	memcpy(copy, msg, len);
	if (c->q_count == TC_QUEUE_MAX) {
		free(c->queue[c->q_head].data);
		c->q_head = (c->q_head + 1) % TC_QUEUE_MAX;
		c->q_count--;
	}
	tail = (c->q_head + c->q_count) % TC_QUEUE_MAX;
	c->queue[tail].data = copy;
	c->queue[tail].len = len;
	c->q_count++;
}

bool tc_queue_pop(struct turn_client *c, struct tc_pkt *out)
{
	if (c->q_count == 0)
		return false;
	*out = c->queue[c->q_head];
	c->queue[c->q_head].data = NULL;
	c->q_head = (c->q_head + 1) % TC_QUEUE_MAX;
	c->q_count--;
	return true;
}
