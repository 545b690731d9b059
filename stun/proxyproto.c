/* PROXY protocol header parser (v1 text, v2 binary with TLVs skipped), bounds-checked
 * through a cursor with a sticky error; see proxyproto.h for the contract. */
#include "config.h"

#include "stun/proxyproto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

static const uint8_t pp_v2_sig[PROXYPROTO_V2_SIG_LEN] = {
	0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A
};
static const char pp_v1_sig[] = "PROXY ";

/* A read cursor: every read past the end sets err and returns zeros from then on. */
struct pp_cur {
	const uint8_t *p;
	size_t len, off;
	bool err;
};

static const uint8_t *pp_take(struct pp_cur *c, size_t n)
{
	const uint8_t *r;

	if (c->err || n > c->len - c->off) {
		c->err = true;
		return NULL;
	}
	r = c->p + c->off;
	c->off += n;
	return r;
}

static uint16_t pp_u16(struct pp_cur *c)
{
	const uint8_t *b = pp_take(c, 2);

	return b ? (uint16_t)(b[0] << 8 | b[1]) : 0;
}

static void pp_set(struct sockaddr_storage *ss, int fam, const uint8_t *a, uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (fam == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

		s4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, a, 4);
		s4->sin_port = htons(port);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		s6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, a, 16);
		s6->sin6_port = htons(port);
	}
}

/* v2 after the fixed part: the address block of family fam, then TLVs to the end. */
static int pp_v2_body(struct pp_cur *c, unsigned cmd, unsigned fam, struct proxyproto_hdr *o)
{
	const uint8_t *sa = NULL, *da = NULL;
	uint16_t sp = 0, dp = 0;
	int af = 0;
	size_t alen = 0;

	if (cmd == 0 || fam == 0) {
		/* LOCAL, or UNSPEC: the connection's own endpoints; the protocol block is
		 * ignored whatever it holds (the PROXY protocol spec, 2.2), TLVs included. */
		o->local = true;
		return 0;
	}
	if (fam == 1) {
		af = AF_INET;
		alen = 4;
	} else if (fam == 2) {
		af = AF_INET6;
		alen = 16;
	} else if (fam == 3) {
		(void)pp_take(c, 216);	/* AF_UNIX: two 108-byte paths, not used */
	} else {
		return -EBADMSG;
	}
	if (af) {
		sa = pp_take(c, alen);
		da = pp_take(c, alen);
		sp = pp_u16(c);
		dp = pp_u16(c);
	}
	while (!c->err && c->off < c->len) {	/* TLVs: type, length, value */
		(void)pp_take(c, 1);
		(void)pp_take(c, pp_u16(c));
	}
	if (c->err)
		return -EBADMSG;
	o->local = !af;
	if (!o->local) {
		pp_set(&o->src, af, sa, sp);
		pp_set(&o->dst, af, da, dp);
		o->addr_len = af == AF_INET ? sizeof(struct sockaddr_in)
					    : sizeof(struct sockaddr_in6);
	}
	return 0;
}

static int pp_v2(const uint8_t *buf, size_t len, struct proxyproto_hdr *o)
{
	unsigned ver, cmd, fam, proto;
	size_t total;
	struct pp_cur c;
	int rc;

	if (len < PROXYPROTO_V2_FIXED)
		return -EAGAIN;
	ver = buf[12] >> 4;
	cmd = buf[12] & 0xF;
	fam = buf[13] >> 4;
	proto = buf[13] & 0xF;
	if (ver != 2 || cmd > 1 || proto > 2)
		return -EBADMSG;
	total = PROXYPROTO_V2_FIXED + ((size_t)buf[14] << 8 | buf[15]);
	if (total > PROXYPROTO_MAX)
		return -EMSGSIZE;
	if (len < total)
		return -EAGAIN;
	c = (struct pp_cur){ .p = buf + PROXYPROTO_V2_FIXED, .len = total - PROXYPROTO_V2_FIXED };
	o->version = 2;
	o->sock_type = proto == 1 ? SOCK_STREAM : proto == 2 ? SOCK_DGRAM : 0;
	rc = pp_v2_body(&c, cmd, fam, o);
	return rc < 0 ? rc : (int)total;
}

/* The next space-terminated token of the v1 line (at most max - 1 characters), copied
 * NUL-terminated into tok. */
static void pp_v1_tok(struct pp_cur *c, char *tok, size_t max, char end)
{
	size_t n = 0;

	while (!c->err) {
		const uint8_t *b = pp_take(c, 1);

		if (!b)
			break;
		if (*b == (uint8_t)end)
			break;
		if (n + 1 >= max || *b == ' ' || *b == '\r' || *b == '\n')
			c->err = true;
		else
			tok[n++] = (char)*b;
	}
	tok[n] = '\0';
	if (n == 0)
		c->err = true;
}

/* A decimal port: 0..65535 without leading zeros. */
static uint16_t pp_v1_port(struct pp_cur *c, char end)
{
	char tok[8];
	unsigned long v = 0;

	pp_v1_tok(c, tok, sizeof(tok), end);
	if (c->err || (tok[0] == '0' && tok[1] != '\0'))
		goto bad;
	for (const char *s = tok; *s; s++) {
		if (*s < '0' || *s > '9')
			goto bad;
		v = v * 10 + (unsigned long)(*s - '0');
	}
	if (v > 65535)
		goto bad;
	return (uint16_t)v;
bad:
	c->err = true;
	return 0;
}

/* line: the v1 header up to and including its CRLF. */
static int pp_v1_line(const uint8_t *line, size_t len, struct proxyproto_hdr *o)
{
	struct pp_cur c = { .p = line, .len = len - 2 };	/* without CRLF */
	char proto[8], sa[INET6_ADDRSTRLEN], da[INET6_ADDRSTRLEN];
	uint8_t sbin[16], dbin[16];
	uint16_t sp, dp;
	int af;

	(void)pp_take(&c, sizeof(pp_v1_sig) - 1);
	o->version = 1;
	o->sock_type = SOCK_STREAM;
	if (len - 2 - c.off >= 7 && memcmp(line + c.off, "UNKNOWN", 7) == 0 &&
	    (len - 2 - c.off == 7 || line[c.off + 7] == ' ')) {
		o->local = true;	/* whatever follows is to be ignored */
		return (int)len;
	}
	pp_v1_tok(&c, proto, sizeof(proto), ' ');
	af = strcmp(proto, "TCP4") == 0 ? AF_INET : strcmp(proto, "TCP6") == 0 ? AF_INET6 : 0;
	pp_v1_tok(&c, sa, sizeof(sa), ' ');
	pp_v1_tok(&c, da, sizeof(da), ' ');
	sp = pp_v1_port(&c, ' ');
	c.len++;			/* the last token ends at the CR */
	dp = pp_v1_port(&c, '\r');
	if (c.err || !af || c.off != len - 1 || inet_pton(af, sa, sbin) != 1 ||
	    inet_pton(af, da, dbin) != 1)
		return -EBADMSG;
	o->local = false;
	pp_set(&o->src, af, sbin, sp);
	pp_set(&o->dst, af, dbin, dp);
	o->addr_len = af == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	return (int)len;
}

static int pp_v1(const uint8_t *buf, size_t len, struct proxyproto_hdr *o)
{
	/* The CR is at most at PROXYPROTO_V1_MAX - 2 (the line, CRLF included, fits). */
	size_t lim = len < PROXYPROTO_V1_MAX - 1 ? len : PROXYPROTO_V1_MAX - 1;

	for (size_t i = 0; i < lim; i++) {
		if (buf[i] == '\n')
			return -EBADMSG;	/* a LF before the CR */
		if (buf[i] != '\r')
			continue;
		if (i + 1 == len)
			return -EAGAIN;
		if (buf[i + 1] != '\n')
			return -EBADMSG;
		return pp_v1_line(buf, i + 2, o);
	}
	return len >= PROXYPROTO_V1_MAX - 1 ? -EBADMSG : -EAGAIN;
}

int proxyproto_parse(const uint8_t *buf, size_t len, unsigned versions,
		     struct proxyproto_hdr *out)
{
	struct proxyproto_hdr scratch;
	size_t n1 = sizeof(pp_v1_sig) - 1;
	struct proxyproto_hdr *o = out ? out : &scratch;

	memset(o, 0, sizeof(*o));
	if (len == 0)
		return -EAGAIN;
	if (memcmp(buf, pp_v2_sig, len < sizeof(pp_v2_sig) ? len : sizeof(pp_v2_sig)) == 0) {
		if (!(versions & PROXYPROTO_V2))
			return -EPROTONOSUPPORT;
		return len < sizeof(pp_v2_sig) ? -EAGAIN : pp_v2(buf, len, o);
	}
	if (memcmp(buf, pp_v1_sig, len < n1 ? len : n1) == 0) {
		if (!(versions & PROXYPROTO_V1))
			return -EPROTONOSUPPORT;
		return len < n1 ? -EAGAIN : pp_v1(buf, len, o);
	}
	return -ENOMSG;
}
