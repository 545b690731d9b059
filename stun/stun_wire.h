/* Bounds-checked read/write cursors with a sticky error flag, and big-endian loads and
 * stores.
 *
 * Every operation is a no-op once err is set, so a parser or writer performs a sequence of
 * reads/writes and checks err once at the end. Used by stun/ and by the worker's hot paths
 * that write headers in place (worker/udp.c): no hand-written shifts elsewhere. Not part
 * of the library's public API (no ABI promise).
 */
#ifndef TG_STUN_STUN_WIRE_H
#define TG_STUN_STUN_WIRE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct wire_rd {
	const uint8_t *p;
	size_t len;
	size_t pos;
	int err;
};

static inline void wire_rd_init(struct wire_rd *r, const uint8_t *p, size_t len)
{
	r->p = p;
	r->len = len;
	r->pos = 0;
	r->err = 0;
}

static inline size_t wire_rd_left(const struct wire_rd *r)
{
	return r->err ? 0 : r->len - r->pos;
}

/* Claims n bytes; returns a pointer to them or NULL (and sets err) if they are not there. */
static inline const uint8_t *wire_rd_take(struct wire_rd *r, size_t n)
{
	const uint8_t *q;

	if (r->err)
		return NULL;
	if (n > r->len - r->pos) {
		r->err = -EBADMSG;
		return NULL;
	}
	q = r->p + r->pos;
	r->pos += n;
	return q;
}

static inline uint8_t wire_rd_u8(struct wire_rd *r)
{
	const uint8_t *q = wire_rd_take(r, 1);
	return q ? q[0] : 0;
}

static inline uint16_t wire_rd_u16(struct wire_rd *r)
{
	const uint8_t *q = wire_rd_take(r, 2);
	return q ? (uint16_t)((q[0] << 8) | q[1]) : 0;
}

static inline uint32_t wire_rd_u32(struct wire_rd *r)
{
	const uint8_t *q = wire_rd_take(r, 4);
	return q ? ((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) | q[3]
		 : 0;
}

static inline uint64_t wire_rd_u64(struct wire_rd *r)
{
	uint64_t hi = wire_rd_u32(r);
	return (hi << 32) | wire_rd_u32(r);
}

static inline void wire_rd_skip(struct wire_rd *r, size_t n)
{
	(void)wire_rd_take(r, n);
}

struct wire_wr {
	uint8_t *p;
	size_t cap;
	size_t pos;
	int err;
};

static inline void wire_wr_init(struct wire_wr *w, uint8_t *p, size_t cap, size_t pos)
{
	w->p = p;
	w->cap = cap;
	w->pos = pos;
	w->err = pos > cap ? -ENOBUFS : 0;
}

/* Reserves n bytes; returns where to write them or NULL (and sets err). */
static inline uint8_t *wire_wr_take(struct wire_wr *w, size_t n)
{
	uint8_t *q;

	if (w->err)
		return NULL;
	if (n > w->cap - w->pos) {
		w->err = -ENOBUFS;
		return NULL;
	}
	q = w->p + w->pos;
	w->pos += n;
	return q;
}

static inline void wire_wr_u8(struct wire_wr *w, uint8_t v)
{
	uint8_t *q = wire_wr_take(w, 1);
	if (q)
		q[0] = v;
}

static inline void wire_wr_u16(struct wire_wr *w, uint16_t v)
{
	uint8_t *q = wire_wr_take(w, 2);
	if (q) {
		q[0] = (uint8_t)(v >> 8);
		q[1] = (uint8_t)v;
	}
}

static inline void wire_wr_u32(struct wire_wr *w, uint32_t v)
{
	uint8_t *q = wire_wr_take(w, 4);
	if (q) {
		q[0] = (uint8_t)(v >> 24);
		q[1] = (uint8_t)(v >> 16);
		q[2] = (uint8_t)(v >> 8);
		q[3] = (uint8_t)v;
	}
}

static inline void wire_wr_u64(struct wire_wr *w, uint64_t v)
{
	wire_wr_u32(w, (uint32_t)(v >> 32));
	wire_wr_u32(w, (uint32_t)v);
}

/* memmove, not memcpy: callers may append data that already sits in the buffer. */
static inline void wire_wr_bytes(struct wire_wr *w, const void *src, size_t n)
{
	uint8_t *q = wire_wr_take(w, n);
	if (q && n)
		memmove(q, src, n);
}

static inline void wire_wr_zero(struct wire_wr *w, size_t n)
{
	uint8_t *q = wire_wr_take(w, n);
	if (q && n)
		memset(q, 0, n);
}

static inline uint16_t wire_get_u16(const uint8_t *q)
{
	return (uint16_t)((q[0] << 8) | q[1]);
}

static inline uint32_t wire_get_u32(const uint8_t *q)
{
	return ((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) | q[3];
}

static inline void wire_put_u16(uint8_t *q, uint16_t v)
{
	q[0] = (uint8_t)(v >> 8);
	q[1] = (uint8_t)v;
}

static inline void wire_put_u32(uint8_t *q, uint32_t v)
{
	q[0] = (uint8_t)(v >> 24);
	q[1] = (uint8_t)(v >> 16);
	q[2] = (uint8_t)(v >> 8);
	q[3] = (uint8_t)v;
}

#define STUN_PAD4(n) (((n) + 3u) & ~(size_t)3u)

#endif
