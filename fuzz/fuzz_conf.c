/* libFuzzer target: config text -> conf_load_string -> snap_build -> snap_open -> accessors. */
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "conf/snap_format.h"
#include "conf/snapshot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Deterministic environment: fuzzing must not depend on the host's variables. */
static const char *fuzz_getenv(void *ctx, const char *name)
{
	(void)ctx;
	if (strcmp(name, "STUNNER_ADDR") == 0)
		return "10.0.0.1";
	if (strcmp(name, "STUNNER_PORT") == 0)
		return "3478";
	return NULL;
}

static int fuzz_resolve(void *ctx, const char *name, struct sockaddr_storage *out, size_t max,
			size_t *n)
{
	(void)ctx;
	*n = 0;
	if (max == 0 || strlen(name) % 2)
		return -2;
	struct sockaddr_in *a = (struct sockaddr_in *)&out[0];
	memset(out, 0, sizeof(*out));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(0x0a000000u | (uint32_t)strlen(name));
	*n = 1;
	return 0;
}

/* strict: the snapshot is a fresh build, so every accessor must succeed. A corrupted
 * snapshot that snap_open accepted may fail an accessor, but must stay in bounds. */
static void probe(const struct snap *s, bool strict)
{
	struct sockaddr_in p4 = { .sin_family = AF_INET, .sin_port = htons(40000) };
	struct sockaddr_in6 p6 = { .sin6_family = AF_INET6, .sin6_port = htons(40000) };
	p4.sin_addr.s_addr = htonl(0x0a2a0001u);
	p6.sin6_addr.s6_addr[0] = 0xfd;
	for (uint32_t i = 0; i < snap_listener_count(s); i++) {
		struct snap_listener l;
		struct snap_secret sec[SNAP_MAX_SECRETS];
		const uint8_t *key;
		size_t kl;
		if (snap_listener_get(s, i, &l) != 0) {
			if (strict)
				abort();
			continue;
		}
		(void)snap_peer_allowed(s, i, (struct sockaddr *)&p4, CONF_CPROTO_UDP);
		(void)snap_peer_ip_allowed(s, i, (struct sockaddr *)&p6, CONF_CPROTO_TCP);
		(void)snap_auth_secrets(s, l.auth_idx, 1, sec);
		(void)snap_auth_user_key(s, l.auth_idx, "user", 4, SNAP_KEY_SHA256, &key, &kl);
	}
	for (uint32_t i = 0; i < snap_sibling_count(s); i++) {
		struct snap_sibling sib;

		if (snap_sibling_get(s, i, &sib) != 0 && strict)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct conf_diags d = { 0 };
	struct conf *c = NULL;
	struct conf_load_opts o = { .getenv = fuzz_getenv, .now = 1700000000 };
	if (conf_load_string((const char *)data, size, "fuzz.yaml", &o, &c, &d) == 0) {
		json_t *j = conf_to_json_redacted(c);
		json_decref(j);
		if (conf_resolve_clusters(c, fuzz_resolve, NULL, &d) == 0) {
			struct snap_build_params bp = { .generation = 1 };
			void *blob = NULL;
			size_t len = 0;
			const struct snap *s = NULL;
			if (snap_build(c, &bp, &blob, &len) == 0) {
				if (snap_open(blob, len, &s) != 0)
					abort(); /* a fresh build must always open */
				probe(s, true);
				/* Corrupt one byte past the magic and fix the checksum, so the
				 * structural checks (not the CRC) must catch it or the accessors
				 * must stay in bounds. */
				uint8_t *b = blob;
				b[16 + size % (len - 16)] ^= (uint8_t)(data[size / 2] | 1);
				((struct snap_hdr *)b)->crc = snap_crc32c(b + 16, len - 16);
				if (snap_open(blob, len, &s) == 0)
					probe(s, false);
				snap_blob_free(blob, len);
			}
		}
	}
	char line[1024];
	for (size_t i = 0; i < d.n; i++)
		conf_diag_format(&d.v[i], line, sizeof(line));
	conf_diags_free(&d);
	conf_free(c);
	return 0;
}
