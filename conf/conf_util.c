/* Small helpers for the conf module: bounded file reads, base64 decoding, secret wiping. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/conf_internal.h"

int conf_read_file(const char *path, size_t max, bool stream_ok, char **buf, size_t *len)
{
	int fd;
	int rc = 0;
	size_t cap = 4096, n = 0;
	char *b = NULL;
	struct stat st;
	*buf = NULL;
	*len = 0;
	/* The config, secret and certificate files are read by the master at every reload: a
	 * FIFO or device there must not block it, so they are opened non-blocking and must be
	 * regular files. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		goto out;
	}
	if (S_ISDIR(st.st_mode) || (!S_ISREG(st.st_mode) && !stream_ok)) {
		rc = S_ISDIR(st.st_mode) ? -EISDIR : -EFTYPE_CONF;
		goto out;
	}
	if (!S_ISREG(st.st_mode) && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) {
		rc = -errno;
		goto out;
	}
	b = malloc(cap + 1);
	if (b == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	for (;;) {
		ssize_t r;
		if (n == cap) {
			char *nb;
			if (cap >= max) {
				rc = -EFBIG;
				goto out;
			}
			cap = cap * 2 > max ? max : cap * 2;
			nb = realloc(b, cap + 1);
			if (nb == NULL) {
				rc = -ENOMEM;
				goto out;
			}
			b = nb;
		}
		r = read(fd, b + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			goto out;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	b = NULL;
out:
	if (b != NULL) {
		explicit_bzero(b, n);
		free(b);
	}
	close(fd);
	return rc;
}

static int b64_val(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

/* Standard or URL-safe alphabet, whitespace ignored, padding optional. Output is
 * NUL-terminated (PEM is text). Returns 0, -EINVAL or -ENOMEM. */
int conf_base64_decode(const char *in, char **out, size_t *outlen)
{
	size_t n = strlen(in);
	char *o = malloc(n / 4 * 3 + 4);
	uint32_t acc = 0;
	unsigned bits = 0, pad = 0;
	size_t k = 0;
	if (o == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)in[i];
		int v;
		if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
			continue;
		if (c == '=') {
			pad++;
			continue;
		}
		v = b64_val(c);
		if (v < 0 || pad > 0)
			goto bad;
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			o[k++] = (char)(acc >> bits & 0xff);
		}
	}
	/* Leftover bits must be zero padding of a 2- or 3-char final group. */
	if (bits >= 6 || pad > 2 || (acc & ((1u << bits) - 1)) != 0)
		goto bad;
	o[k] = '\0';
	*out = o;
	*outlen = k;
	return 0;
bad:
	explicit_bzero(o, k);
	free(o);
	return -EINVAL;
}

const char *conf_file_strerror(int rc)
{
	if (rc == -EFTYPE_CONF)
		return "not a regular file";
	if (rc == -EFBIG)
		return "file too large";
	return strerror(-rc);
}

void conf_wipe_free(char *s)
{
	if (s == NULL)
		return;
	explicit_bzero(s, strlen(s));
	free(s);
}
