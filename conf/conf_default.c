/* Embedded default config (loopback TURN with a random ephemeral secret) and credential help. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "conf/conf_internal.h"

static const char default_fmt[] = "version: v1\n"
				  "admin:\n"
				  "  name: turngate-default\n"
				  "  healthcheck_endpoint: \"http://127.0.0.1:8086\"\n"
				  "auth:\n"
				  "  type: ephemeral\n"
				  "  realm: " CONF_DEF_REALM "\n"
				  "  credentials:\n"
				  "    secret: \"%s\"\n"
				  "listeners:\n"
				  "  - name: default-udp\n"
				  "    protocol: TURN-UDP\n"
				  "    address: 127.0.0.1\n"
				  "    port: 3478\n"
				  "    routes: [loopback]\n"
				  "  - name: default-tcp\n"
				  "    protocol: TURN-TCP\n"
				  "    address: 127.0.0.1\n"
				  "    port: 3478\n"
				  "    routes: [loopback]\n"
				  "clusters:\n"
				  "  - name: loopback\n"
				  "    type: STATIC\n"
				  "    endpoints: [\"127.0.0.0/8\", \"::1\"]\n";

int conf_load_default(const struct conf_load_opts *opts, struct conf **out)
{
	uint8_t raw[32];
	char hex[65], text[sizeof(default_fmt) + 64];
	struct conf_diags d = { 0 };
	int n, rc;
	*out = NULL;
	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return -EIO;
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	n = snprintf(text, sizeof(text), default_fmt, hex);
	rc = conf_load_string(text, (size_t)n, "<default>", opts, out, &d);
	explicit_bzero(raw, sizeof(raw));
	explicit_bzero(hex, sizeof(hex));
	explicit_bzero(text, sizeof(text));
	/* The embedded text is fixed: anything but ENOMEM here is a bug in this file. */
	if (rc == -EINVAL) {
		conf_diags_print(&d, stderr);
		rc = -EIO;
	}
	conf_diags_free(&d);
	return rc;
}

/* TURN REST API password: base64(HMAC-SHA1(secret, username)). out needs 29 bytes. */
int conf_mint_password(const char *secret, const char *username, char out[29])
{
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int maclen = 0;
	if (HMAC(EVP_sha1(), secret, (int)strlen(secret), (const unsigned char *)username,
		 strlen(username), mac, &maclen) == NULL ||
	    maclen != 20)
		return -EIO;
	EVP_EncodeBlock((unsigned char *)out, mac, 20);
	explicit_bzero(mac, sizeof(mac));
	return 0;
}

static void help_ephemeral(const struct conf *c, int64_t now, FILE *out)
{
	char user[64], pw[29];
	snprintf(user, sizeof(user), "%" PRId64 ":user", now + 86400);
	if (conf_mint_password(c->auth.secret, user, pw) != 0)
		return;
	fprintf(out,
		"ephemeral credential valid for 24 hours (realm %s):\n"
		"  %s:%s\n"
		"  username: %s\n"
		"  password: %s\n"
		"mint more: username = \"<unix expiry time>:<user id>\", "
		"password = base64(HMAC-SHA1(secret, username))\n"
		"  u=\"$(( $(date +%%s) + 86400 )):me\"; "
		"p=$(printf %%s \"$u\" | openssl dgst -sha1 -hmac \"$SECRET\" -binary | base64)\n"
		"  with SECRET=%s\n",
		c->auth.realm, user, pw, user, pw, c->auth.secret);
	explicit_bzero(pw, sizeof(pw));
}

void conf_print_credential_help(const struct conf *c, int64_t now, FILE *out)
{
	if (c == NULL)
		return;
	if (now == 0)
		now = (int64_t)time(NULL);
	for (size_t i = 0; i < c->n_listeners; i++)
		fprintf(out, "listener %s: %s on %s:%u\n", c->listeners[i].name,
			conf_proto_name(c->listeners[i].protocol), c->listeners[i].address,
			c->listeners[i].port);
	switch (c->auth.type) {
	case CONF_AUTH_EPHEMERAL:
		if (c->auth.secret != NULL)
			help_ephemeral(c, now, out);
		break;
	case CONF_AUTH_STATIC:
		for (size_t i = 0; i < c->auth.n_users; i++)
			fprintf(out, "static user: %s (password as configured)\n",
				c->auth.users[i].username);
		break;
	case CONF_AUTH_NONE:
		fprintf(out, "auth type none: STUN only, TURN allocations are refused\n");
		break;
	}
}
