/* Master: the WebSocket client pieces (RFC 6455) the CDS client needs: handshake and framing. */
#include "config.h"

#include "master/cds.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

int ws_key_new(char key[WS_KEY_LEN + 1])
{
	unsigned char raw[16];

	if (getrandom(raw, sizeof(raw), 0) != sizeof(raw))
		return -EIO;
	EVP_EncodeBlock((unsigned char *)key, raw, sizeof(raw));
	return 0;
}

void ws_accept_of(const char *key, char out[WS_ACCEPT_LEN + 1])
{
	unsigned char digest[SHA_DIGEST_LENGTH];
	char buf[WS_KEY_LEN + sizeof(WS_GUID)];

	snprintf(buf, sizeof(buf), "%s%s", key, WS_GUID);
	SHA1((const unsigned char *)buf, strlen(buf), digest);
	EVP_EncodeBlock((unsigned char *)out, digest, sizeof(digest));
}

/* Value of header name in the block [p, end) of "Name: value\r\n" lines; copies it
 * (trimmed) into val. Returns 0 or -ENOENT. */
static int header_get(const char *p, const char *end, const char *name, char *val, size_t cap)
{
	size_t nl = strlen(name);

	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *v, *ve;

		if (eol == NULL)
			eol = end;
		if ((size_t)(eol - p) > nl && p[nl] == ':' && strncasecmp(p, name, nl) == 0) {
			v = p + nl + 1;
			ve = eol;
			while (v < ve && (*v == ' ' || *v == '\t'))
				v++;
			while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
				ve--;
			snprintf(val, cap, "%.*s", (int)(ve - v), v);
			return 0;
		}
		p = eol + 1;
	}
	return -ENOENT;
}

int ws_handshake_parse(const char *buf, size_t len, const char *accept, size_t *consumed,
		       int *status)
{
	const char *end = NULL, *hdr;
	char val[128];
	int code = 0;

	for (size_t i = 0; i + 3 < len; i++)
		if (memcmp(buf + i, "\r\n\r\n", 4) == 0) {
			end = buf + i + 2;
			*consumed = i + 4;
			break;
		}
	if (end == NULL)
		return len > WS_MAX_HEADERS ? -EMSGSIZE : 0;
	/* "HTTP/1.x NNN", read within the header block: buf is not NUL-terminated (the
	 * fuzzer found sscanf running off its end). */
	if (end - buf < 12 || memcmp(buf, "HTTP/1.", 7) != 0 || (buf[7] != '0' && buf[7] != '1') ||
	    buf[8] != ' ')
		return -EBADMSG;
	for (int i = 9; i < 12; i++) {
		if (buf[i] < '0' || buf[i] > '9')
			return -EBADMSG;
		code = code * 10 + (buf[i] - '0');
	}
	*status = code;
	if (code != 101)
		return -EPROTO;
	hdr = memchr(buf, '\n', (size_t)(end - buf));
	if (hdr == NULL)
		return -EBADMSG;
	hdr++;
	if (header_get(hdr, end, "Upgrade", val, sizeof(val)) < 0 ||
	    strcasecmp(val, "websocket") != 0)
		return -EBADMSG;
	if (header_get(hdr, end, "Connection", val, sizeof(val)) < 0 ||
	    strcasestr(val, "upgrade") == NULL)
		return -EBADMSG;
	if (header_get(hdr, end, "Sec-WebSocket-Accept", val, sizeof(val)) < 0 ||
	    strcmp(val, accept) != 0)
		return -EACCES;
	return 1;
}

int ws_frame_parse(const uint8_t *buf, size_t len, size_t max_payload, struct ws_frame *f)
{
	uint64_t plen;
	size_t hl = 2;

	if (len < 2)
		return 0;
	if ((buf[0] & 0x70) != 0)
		return -EBADMSG;  /* RSV bits: no extension was negotiated */
	if ((buf[1] & 0x80) != 0)
		return -EBADMSG;  /* a server never masks (RFC 6455 5.1) */
	f->fin = (buf[0] & 0x80) != 0;
	f->opcode = buf[0] & 0x0f;
	plen = buf[1] & 0x7f;
	if (plen == 126) {
		if (len < 4)
			return 0;
		plen = (uint64_t)buf[2] << 8 | buf[3];
		hl = 4;
	} else if (plen == 127) {
		if (len < 10)
			return 0;
		plen = 0;
		for (int i = 0; i < 8; i++)
			plen = plen << 8 | buf[2 + i];
		hl = 10;
	}
	if (f->opcode >= 8 && (plen > 125 || !f->fin))
		return -EBADMSG;  /* control frames: short and never fragmented */
	if (plen > max_payload)
		return -EMSGSIZE;
	if (len < hl + plen)
		return 0;
	f->payload = buf + hl;
	f->len = (size_t)plen;
	f->total = hl + (size_t)plen;
	return 1;
}

int ws_frame_build(uint8_t opcode, const uint8_t *payload, size_t len, uint8_t *out, size_t cap,
		   size_t *out_len)
{
	uint8_t mask[4];
	size_t hl = len < 126 ? 2 : 4;

	if (len > 0xffff || cap < hl + 4 + len)
		return -EMSGSIZE;
	if (getrandom(mask, sizeof(mask), 0) != sizeof(mask))
		return -EIO;
	out[0] = 0x80 | (opcode & 0x0f);
	if (len < 126) {
		out[1] = 0x80 | (uint8_t)len;
	} else {
		out[1] = 0x80 | 126;
		out[2] = (uint8_t)(len >> 8);
		out[3] = (uint8_t)len;
	}
	memcpy(out + hl, mask, 4);
	for (size_t i = 0; i < len; i++)
		out[hl + 4 + i] = payload[i] ^ mask[i & 3];
	*out_len = hl + 4 + len;
	return 0;
}
