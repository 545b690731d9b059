/* Names of stream connections in systemd's file descriptor store (common/fdname.h). */
#include "common/fdname.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char kind_letter(enum park_kind kind)
{
	switch (kind) {
	case PARK_TCONN:
		return 'c';
	case PARK_TPEER:
		return 'p';
	case PARK_TDATA:
		return 'd';
	default:
		return 0;
	}
}

int fdname_make(char *buf, size_t cap, enum park_kind kind, unsigned slot, uint32_t rec,
		uint32_t id, uint32_t flags, const char *listener)
{
	char k = kind_letter(kind);
	size_t max = cap - 1 < FDNAME_MAX ? cap - 1 : FDNAME_MAX;
	int n;

	if (k == 0 || cap == 0)
		return -EINVAL;
	n = snprintf(buf, cap, "tg1.%c.%u.%" PRIu32 ".%" PRIu32 ".%" PRIx32 ".", k, slot, rec, id,
		     flags);
	if (n < 0 || (size_t)n > max)
		return -ENAMETOOLONG;
	for (const unsigned char *p = (const unsigned char *)(listener ? listener : ""); *p;
	     p++) {
		bool plain = *p > ' ' && *p <= '~' && *p != ':' && *p != '%';

		if ((size_t)n + (plain ? 1 : 3) > max)
			return -ENAMETOOLONG;
		if (plain)
			buf[n++] = (char)*p;
		else
			n += snprintf(buf + n, cap - (size_t)n, "%%%02X", *p);
	}
	buf[n] = '\0';
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A decimal or hex field up to the next '.', into *v; *p moves past the dot. */
static bool field(const char **p, int base, uint32_t *v)
{
	char *end;
	unsigned long x;

	if (**p < '0' || **p > (base == 16 ? 'f' : '9'))
		return false;
	errno = 0;
	x = strtoul(*p, &end, base);
	if (errno != 0 || end == *p || *end != '.' || x > UINT32_MAX)
		return false;
	*v = (uint32_t)x;
	*p = end + 1;
	return true;
}

int fdname_parse(const char *name, struct park_hdr *h)
{
	const char *p = name;
	uint32_t slot, rec, id, flags;
	size_t n = 0;

	memset(h, 0, sizeof(*h));
	if (name == NULL || strncmp(p, "tg1.", 4) != 0 || strlen(name) > FDNAME_MAX)
		return -EBADMSG;
	p += 4;
	h->kind = p[0] == 'c' ? PARK_TCONN : p[0] == 'p' ? PARK_TPEER : p[0] == 'd' ? PARK_TDATA : 0;
	if (h->kind == 0 || p[1] != '.')
		return -EBADMSG;
	p += 2;
	if (!field(&p, 10, &slot) || !field(&p, 10, &rec) || !field(&p, 10, &id) ||
	    !field(&p, 16, &flags))
		return -EBADMSG;
	for (; *p; p++) {
		int hi, lo;

		if (n >= IPC_NAME_MAX)
			return -EBADMSG;
		if (*p != '%') {
			h->listener[n++] = *p;
			continue;
		}
		hi = hexval(p[1]);
		lo = hi < 0 ? -1 : hexval(p[2]);
		if (lo < 0 || (hi == 0 && lo == 0))
			return -EBADMSG;
		h->listener[n++] = (char)(hi * 16 + lo);
		p += 2;
	}
	if ((h->kind == PARK_TCONN) != (n > 0))
		return -EBADMSG;
	h->magic = PARK_MAGIC;
	h->version = PARK_VERSION;
	h->slot = slot;
	h->rec_idx = rec;
	h->id = id;
	h->flags = flags;
	return 0;
}
