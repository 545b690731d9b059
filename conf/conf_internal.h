/* Private helpers shared by the conf module's files (parser context, address parsing, defaults). */
#ifndef TG_CONF_INTERNAL_H
#define TG_CONF_INTERNAL_H

#include <stdarg.h>
#include <yaml.h>

#include "conf/conf.h"

#define CONF_PATH_MAX 256
#define CONF_MAX_INPUT (4u << 20)      /* bigger configs are refused outright */
#define CONF_MAX_DIAGS 1000            /* then one "too many problems" line */
#define CONF_DIAG_MSG_MAX 400          /* longer messages are cut with "..." */
#define CONF_MAX_RESOLVED 16           /* addresses kept per STRICT_DNS name */
#define CONF_MAX_BYTES (64u << 20)     /* string data after alias and env expansion */
#define CONF_MAX_DEPTH 64u             /* nested lists and mappings (conf_prescan.c says why) */
#define CONF_MAX_KEYS 256              /* keys in one mapping */
#define CONF_MAX_ITEMS 4096            /* listeners, clusters, routes, endpoints, users */

#define CONF_DEF_REALM "stunner.l7mp.io"
#define CONF_DEF_NAME "default-stunnerd"
#define CONF_DEF_LOGLEVEL "all:INFO"
#define CONF_DEF_HEALTH "http://:8086"
#define CONF_DEF_ADMIN_SOCKET "/run/turngate/admin.sock"
#define CONF_DEF_PORT 3478
#define CONF_DEF_RELAY_MIN 49152
#define CONF_DEF_RELAY_MAX 65535

/* Parser state for one document. nomem is sticky: once set, callers unwind. */
struct pctx {
	yaml_document_t *doc;
	const char *file;
	struct conf_diags *diags;
	conf_getenv_fn getenv;
	void *getenv_ctx;
	int64_t now;
	struct conf *cfg;
	bool *lst_bad;   /* per listener: its own keys had errors (skip cross-checks on it) */
	size_t bytes;    /* string bytes produced so far (aliases can repeat one scalar) */
	bool v1alpha1;   /* version: v1alpha1, read as stunnerd's ConvertToV1 does */
	yaml_node_t *siblings; /* admin.siblings, parsed once the listeners are known */
	yaml_node_t *limits_node, *total_quota_node; /* checked once the listeners are known */
	int nomem;
};

/* Diagnostics (conf_diag.c). Positions are libyaml marks (0-based) or NULL. */
void conf_diag_addv(struct conf_diags *d, enum conf_diag_sev sev, const char *file, uint32_t line,
		    uint32_t col, const char *path, const char *fmt, va_list ap)
	__attribute__((format(printf, 7, 0)));
void conf_diag_add(struct conf_diags *d, enum conf_diag_sev sev, const char *file, uint32_t line,
		   uint32_t col, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));
void pctx_error(struct pctx *p, const yaml_node_t *n, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void pctx_warn(struct pctx *p, const yaml_node_t *n, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Sorts the diagnostics added since index `from` into document order. */
void conf_diags_sort(struct conf_diags *d, size_t from);

/* Paths: "parent.key" and "parent[i]". */
void conf_path_key(char *out, const char *parent, const char *key);
void conf_path_idx(char *out, const char *parent, size_t i);

/* Node helpers (conf_node.c). */
yaml_node_t *pctx_node(struct pctx *p, int idx);
bool pctx_is_null(const yaml_node_t *n);
const char *pctx_kind(const yaml_node_t *n);
/* pctx_string flags. Default: env-expanded, and a plain scalar that YAML 1.1 reads as a
 * bool or a number becomes the text stunnerd's decoder would see ("yes" -> "true",
 * "0x10" -> "16"), with a warning. NOENV: no $VAR expansion (secrets). VERBATIM: the text
 * as written (our own keys whose syntax YAML typing would break, such as file modes). */
#define CONF_STR_NOENV 1u
#define CONF_STR_VERBATIM 2u
/* Returns the scalar as a new string, or NULL after reporting "expected a string". */
char *pctx_string(struct pctx *p, yaml_node_t *n, const char *path, unsigned flags);
/* Integers as stunnerd's decoder reads them: decimal, YAML 1.1 forms (0x, 0o, 0b, leading
 * 0 octal, underscores) and floats with an integral value (3478.0), plus quoted decimal
 * text (ours). Returns 0, -ENOENT when the value is empty after expansion (means "not
 * set", nothing reported), or -EINVAL after reporting. */
int pctx_int64(struct pctx *p, yaml_node_t *n, const char *path, int64_t *out);
/* pctx_int64 within min..max (reported otherwise); -ENOENT as above. */
int pctx_uint(struct pctx *p, yaml_node_t *n, const char *path, uint64_t min, uint64_t max,
	      uint64_t *out);
int pctx_int_clamped(struct pctx *p, yaml_node_t *n, const char *path, int64_t *out);
int pctx_bool(struct pctx *p, yaml_node_t *n, const char *path, bool *out);
bool pctx_expect(struct pctx *p, yaml_node_t *n, const char *path, yaml_node_type_t t);
/* A list (pctx_expect) of at most max items: true with *cnt its items; false after
 * reporting "N <what> (expected at most max)" (what: "listeners") or the wrong kind. */
bool pctx_list(struct pctx *p, yaml_node_t *n, const char *path, const char *what, size_t max,
	       size_t *cnt);
/* Warns "unknown key (ignored)" at key, with "did you mean `K`?" when conf_key_suggest()
 * finds K among known (NULL-terminated: the keys of the mapping the key is in); the
 * diagnostic is marked unknown_key (conf_keys.c). */
void pctx_unknown_key(struct pctx *p, yaml_node_t *key, const char *path,
		      const char *const *known);
/* The known key closest to key (case-insensitive, at most 2 edits and fewer than half
 * its length), or NULL. */
const char *conf_key_suggest(const char *key, const char *const *known);
/* Walks a mapping: calls fn for each pair whose key is a scalar, with YAML merge keys
 * (`<<: *anchor`, or a list of them) expanded as go-yaml v2 does (a key written after
 * the merge overrides it, earlier list entries win). Keys that match case-insensitively
 * are one key: fn sees only the value stunnerd's JSON decoder keeps (the last in byte
 * order of the spelling, then in document order), and explicit repeats are warnings. */
typedef void (*pctx_pair_fn)(struct pctx *p, const char *key, yaml_node_t *k, yaml_node_t *v,
			     const char *path, void *arg);
void pctx_map_each(struct pctx *p, yaml_node_t *map, const char *path, pctx_pair_fn fn, void *arg);
/* os.ExpandEnv (conf_scalar.c): $NAME, ${NAME}, ${special}, a malformed reference expands
 * to "" (warned), a lone '$' stays. */
char *conf_expand_env(struct pctx *p, const char *in, const yaml_node_t *n, const char *path);
enum conf_y11_kind {
	CONF_Y11_STR,
	CONF_Y11_NULL,
	CONF_Y11_BOOL,
	CONF_Y11_INT,
	CONF_Y11_FLOAT
};
struct conf_y11 {
	enum conf_y11_kind kind;
	bool b, is_uint;
	int64_t i;
	uint64_t u;
	double f;
};
/* Types a plain scalar the way go-yaml v2 does (YAML 1.1). */
enum conf_y11_kind conf_y11_resolve(const char *in, struct conf_y11 *out);
/* The string sigs.k8s.io/yaml gives a string field for a bool or number; false for others. */
bool conf_y11_as_string(const struct conf_y11 *y, char *out, size_t n);
char *conf_strdup(struct pctx *p, const char *s);

/* Sections (conf_parse.c, conf_auth.c, conf_listener.c, conf_cluster.c). */
void conf_parse_admin(struct pctx *p, yaml_node_t *n, const char *path);
void conf_parse_limits(struct pctx *p, yaml_node_t *n, const char *path);
/* Once the listeners are parsed: limits.max_allocations "auto" from the relay port space
 * (conf_capacity.c), then total_quota checked against it. */
void conf_resolve_capacity(struct pctx *p);
void conf_parse_auth(struct pctx *p, yaml_node_t *n, const char *path, struct conf_auth *a,
		     const struct conf_auth *inherit);
void conf_parse_listeners(struct pctx *p, yaml_node_t *n, const char *path);
void conf_parse_clusters(struct pctx *p, yaml_node_t *n, const char *path);
/* listeners[].proxy_protocol (conf_proxyproto.c): the map n into l; path is the listener's.
 * conf_check_proxyproto: once the listener is parsed, against its protocol. */
void conf_parse_proxyproto(struct pctx *p, yaml_node_t *n, const char *path,
			   struct conf_listener *l);
void conf_check_proxyproto(struct pctx *p, yaml_node_t *n, const char *path,
			   const struct conf_listener *l);
/* admin.siblings (conf_sibling.c): after admin and listeners, whose relay port ranges the
 * slices are checked against. */
void conf_parse_siblings(struct pctx *p, yaml_node_t *n, const char *path);
/* conf_ports.c: listeners[idx] (parsed, its relay range final) against the listeners
 * before it and the admin HTTP endpoints: no relay port range may hold a listener's port
 * or an HTTP port on an address its relay sockets may bind (a relay socket would take
 * it). Errors at the listener's port or relay range key (node: the listener, for an
 * inherited range). */
void conf_check_relay_ports(struct pctx *p, size_t idx, const yaml_node_t *node,
			    const yaml_node_t *port_node, const yaml_node_t *rmin,
			    const yaml_node_t *rmax, const char *path);
/* Cross-check of the admin section (conf_ports.c): an error at node (admin's
 * credential_api_endpoint value, path its key) when that endpoint shares the health
 * endpoint's socket (conf_http_same_socket). */
void conf_check_cred_socket(struct pctx *p, const yaml_node_t *node, const char *path);
void conf_auth_defaults(struct conf_auth *a);
void conf_auth_clear(struct conf_auth *a);
int conf_auth_default_realm(struct conf_auth *a);

/* Addresses (conf_addr.c). */
int conf_parse_ip(const char *s, int *family, uint8_t addr[16]);
/* False for an unspecified, multicast or (IPv4) broadcast or 0/8 address. */
bool conf_ip_unicast(int family, const uint8_t addr[16]);
int conf_parse_prefix(const char *s, struct conf_prefix *out, bool *host_bits);
/* Parses a STATIC endpoint. Returns 0 (err: "" or a warning), -ENOENT for an endpoint
 * stunnerd accepts that matches nothing (err says why), or -EINVAL with a message in err. */
int conf_parse_endpoint(const char *s, struct conf_endpoint *ep, char *err, size_t errlen);
int conf_split_port_range(const char *s, size_t *iplen, uint16_t *min, uint16_t *max,
			  bool *has_range, char *err, size_t errlen);
bool conf_valid_hostname(const char *s);
void conf_canon_addr(int *family, uint8_t addr[16]);
void conf_canon_prefix(struct conf_prefix *p);
int conf_parse_hostport(const char *s, struct sockaddr_storage *out);
/* Fills ss with family fam (AF_INET/AF_INET6), address a, port 0. */
void conf_sockaddr_set(struct sockaddr_storage *ss, int fam, const uint8_t a[16]);

/* The pass before the document load (conf_prescan.c): fails with a diagnostic (-EINVAL)
 * when lists and mappings nest deeper than CONF_MAX_DEPTH, warns that documents after the
 * first are ignored. A syntax error is left to the load. Returns 0, -EINVAL or -ENOMEM. */
int conf_prescan(struct pctx *p, const char *buf, size_t len);

/* Helpers for files and base64 (conf_util.c). */
/* Reads a whole file (at most max bytes, NUL-terminated). Refuses anything but a regular
 * file (-EFTYPE_CONF) and never blocks, unless stream_ok: then a pipe or device is read to
 * its end, blocking (turngated -t -c /dev/stdin; never a daemon that re-reads it). Returns
 * 0 or a negative errno. */
#define EFTYPE_CONF 1001
int conf_read_file(const char *path, size_t max, bool stream_ok, char **buf, size_t *len);
/* Message for a conf_read_file() error. */
const char *conf_file_strerror(int rc);
int conf_base64_decode(const char *in, char **out, size_t *outlen);
void conf_wipe_free(char *s);
/* Reads a one-line secret from the file named by scalar v (trailing blanks dropped); on
 * failure reports at v and returns NULL. The file name is stored in *name (replacing and
 * freeing the old value) when name is not NULL, even when the read failed, so a watch can
 * still see the file appear. Returns a string for conf_wipe_free(). */
char *conf_read_secret_file(struct pctx *p, yaml_node_t *v, const char *path, char **name);

/* Checks PEM cert and/or key (either may be NULL) and that they match (conf_tls.c).
 * Returns 0, -EINVAL with "cert: ..." or "key: ..." in err, or -ENOMEM. */
int conf_tls_check(const char *cert, size_t cert_len, const char *key, size_t key_len, char *err,
		   size_t errlen);

#endif
