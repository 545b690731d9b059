/* Configuration: loads, validates and describes a STUNner v1 config (YAML or JSON) plus turngate
 * extensions.
 *
 * Input format: STUNner's stunnerd config, API "v1", accepted as is (version, admin, auth,
 * listeners, clusters), plus turngate extensions under keys STUNner does not use; every key
 * is listed in docs/configuration.md. JSON is parsed as YAML flow style by libyaml, whose
 * document API keeps the line and column of each node, so every diagnostic points at one.
 *
 * Process model: the master (and turngatectl / `turngated -t`) loads and validates configs;
 * workers never call this module, they read the snapshot built from a struct conf
 * (conf/snapshot.h). Nothing here keeps global state; every function is reentrant.
 *
 * Ownership: a struct conf is owned by the caller of conf_load_*() and freed with
 * conf_free(); all its strings and arrays belong to it. Secrets inside it are wiped on free.
 */
#ifndef TG_CONF_CONF_H
#define TG_CONF_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <jansson.h>

/* ---- diagnostics -------------------------------------------------------------------- */

enum conf_diag_sev {
	CONF_DIAG_ERROR = 0,
	CONF_DIAG_WARNING
};

/* One problem found while loading. line/col are 1-based; 0 when the problem has no
 * position (a missing file, a cross-check on the whole document). */
struct conf_diag {
	enum conf_diag_sev sev;
	char *file;     /* display name of the source ("turngate.yaml", "<default>") */
	uint32_t line, col;
	char *path;     /* field path: "listeners[1].port"; "" for the document itself */
	char *msg;      /* "70000 is out of range (1..65535)" */
	bool unknown_key; /* a key the parser does not know (ignored, as stunnerd does) */
};

/* Every problem of one load, in document order. Zero-initialise before first use
 * (struct conf_diags d = {0};); conf_diags_free() releases and re-zeroes it. */
struct conf_diags {
	struct conf_diag *v;
	size_t n, cap;
	size_t n_errors, n_warnings;
	/* The text asked for log_format: json, as far as it was read: set even when the load
	 * fails, so that its diagnostics come out in the format the operator asked for. */
	bool json;
};

/* Formats one diagnostic as
 *   FILE:LINE:COL: PATH: MESSAGE              (errors)
 *   FILE:LINE:COL: warning: PATH: MESSAGE     (warnings)
 * with ":LINE:COL" omitted when line is 0 and "PATH: " omitted when path is empty.
 * Writes at most size bytes (NUL-terminated); returns the length snprintf would. */
int conf_diag_format(const struct conf_diag *d, char *buf, size_t size);

/* Prints every diagnostic, one line each, in the format above. */
void conf_diags_print(const struct conf_diags *d, FILE *out);
/* The same as log lines: json false prints conf_diags_print's lines; json true writes one
 * JSON log line per diagnostic (scope "config", level ERROR or WARN, msg the line above,
 * and the fields file, line, column, path, message), as log_json_line() does. */
void conf_diags_log(const struct conf_diags *d, bool json, FILE *out);
/* One line that is not a diagnostic ("configuration ok") in the same form: as is, or a
 * JSON log line of scope "config" at level lvl (enum log_level). */
void conf_diags_note(bool json, int lvl, const char *msg, FILE *out);
void conf_diags_free(struct conf_diags *d);

/* ---- the typed configuration ---------------------------------------------------------- */

enum conf_auth_type {
	CONF_AUTH_NONE = 0,
	CONF_AUTH_STATIC,
	CONF_AUTH_EPHEMERAL
};
enum conf_proto {
	CONF_PROTO_TURN_UDP = 0,
	CONF_PROTO_TURN_TCP,
	CONF_PROTO_TURN_TLS,
	CONF_PROTO_TURN_DTLS
};
enum conf_cluster_type {
	CONF_CLUSTER_STATIC = 0,
	CONF_CLUSTER_STRICT_DNS
};
enum conf_cluster_proto {
	CONF_CPROTO_UDP = 0,
	CONF_CPROTO_TCP
};
enum conf_log_format {
	CONF_LOG_TEXT = 0,
	CONF_LOG_JSON
};
/* limits.channel_numbers: RFC 5766's 0x4000-0x7FFF (default, what stunnerd/pion and
 * coturn's clients use) or RFC 8656's strict 0x4000-0x4FFF. */
enum conf_chan_range {
	CONF_CHAN_RFC8656 = 0,
	CONF_CHAN_RFC5766
};

/* Canonical spellings: "none|static|ephemeral", "TURN-UDP|...", "STATIC|STRICT_DNS", "UDP|TCP". */
const char *conf_auth_type_name(enum conf_auth_type t);
const char *conf_proto_name(enum conf_proto p);
const char *conf_cluster_type_name(enum conf_cluster_type t);
const char *conf_cluster_proto_name(enum conf_cluster_proto p);

/* An IP prefix; IPv4 in family AF_INET uses addr[0..3]. Addresses are canonical: an
 * IPv4-mapped/compatible, 6to4 or NAT64 IPv6 form that fully contains an IPv4 part was
 * converted to AF_INET at parse time. */
struct conf_prefix {
	int family;            /* AF_INET or AF_INET6 */
	uint8_t addr[16];      /* network byte order, host bits zeroed */
	uint8_t len;           /* prefix length */
};

/* listeners[].proxy_protocol.trusted: most CIDRs per listener. */
#define CONF_PP_TRUSTED_MAX 16

struct conf_endpoint {
	char *text;            /* as written (after env expansion) */
	struct conf_prefix prefix;   /* STATIC only */
	uint16_t port_min, port_max; /* 1..65535 unless ":<min-max>" given; STATIC only */
	/* STRICT_DNS only: addresses filled by conf_resolve_clusters(); empty until then. */
	struct sockaddr_storage *resolved;
	size_t n_resolved;
};

struct conf_cluster {
	char *name;
	enum conf_cluster_type type;
	enum conf_cluster_proto protocol;
	struct conf_endpoint *endpoints;
	size_t n_endpoints;
	unsigned admit_special; /* ours; CONF_SPECIAL_* bits its endpoints admit, default 0 */
};

struct conf_user {
	char *username;
	char *password;
};

/* Authentication settings: the global `auth` block, or a listener's `auth` override. */
struct conf_auth {
	enum conf_auth_type type;
	char *realm; /* default "stunner.l7mp.io" */
	struct conf_user
		*users; /* static: credentials.username/password first, then auth.users[] */
	size_t n_users;
	char *secret;                /* ephemeral: the secret (credentials.secret or secret_file) */
	char *prev_secret;           /* ephemeral: previous secret accepted until prev_deadline;
				      * NULL if none */
	int64_t prev_deadline;       /* unix seconds; 0 when prev_secret is NULL */
	char *secret_file;           /* ours; `secret_file` as written (after expansion), NULL
				      * when unset. Kept so `turngated -w` watches it. */
	char *prev_secret_file;      /* ours; `previous_secret_file` as written, NULL when unset */
	bool strict_expiry;          /* true: expiry of an ephemeral username is checked on every
				      * authenticated request (STUNner); false (default): only
				      * when an allocation is created, refreshes go on with the
				      * stored key */
};

struct conf_listener {
	char *name;
	enum conf_proto protocol;
	char *address;               /* relay IP advertised in XOR-RELAYED-ADDRESS (text, after
				      * expansion; "localhost" already mapped to 127.0.0.1) */
	struct sockaddr_storage relay_addr;  /* parsed `address`, port 0 */
	char *bind_address;          /* ours; NULL = not set (worker decides: address when local,
				      * else wildcard) */
	uint16_t port;               /* default 3478 */
	char *public_address;        /* NULL when unset */
	uint16_t public_port;        /* 0 when unset */
	uint16_t relay_port_min, relay_port_max;  /* effective range (listener, else global) */
	/* TLS material, PEM, decoded from base64 `cert`/`key` or read from cert_file/key_file.
	 * NULL for TURN-UDP/TURN-TCP when not given. */
	char *cert_pem;
	size_t cert_pem_len;
	char *key_pem;
	size_t key_pem_len;
	char *cert_file, *key_file;  /* ours; as written, NULL when unset */
	int64_t cert_not_after;      /* earliest notAfter of cert_pem (Unix s); 0: no cert */
	char **routes;               /* cluster names, sorted, deduplicated */
	size_t n_routes;
	struct conf_auth *auth;      /* ours: per-listener override, NULL = use conf.auth */
	uint32_t max_allocations;    /* ours: live allocations on this listener over all
				      * workers, 0 = unlimited; live on reload */
	uint64_t max_bps;            /* ours: bandwidth of all its allocations, bits/s of
				      * relayed payload each direction, 0 = unlimited */
	char *relay_mask;            /* ours: `relay_address_mask` as written, NULL = unset */
	struct sockaddr_storage relay_mask_addr; /* parsed, port 0; family 0 when unset:
						   * the IP announced in XOR-RELAYED-ADDRESS
						   * instead of `address` (worker/shortcut.c) */
	char *dual_stack;            /* ours: `dual_stack_address` as written, NULL = unset */
	struct sockaddr_storage dual_stack_addr; /* parsed, port 0; family 0 when unset: the
						   * relay IP of the other family of a
						   * dual-stack allocation (else the
						   * listener's interface decides) */
	/* ours: proxy_protocol (worker/proxyproto.c): versions accepted (bit 0 v1, bit 1 v2;
	 * 0 = off: no header is ever parsed) and the sources trusted to send one. */
	unsigned pp_versions;
	uint32_t pp_n_trusted;
	struct conf_prefix pp_trusted[CONF_PP_TRUSTED_MAX];
};

/* Upper bounds of limits.max_permissions and max_channels: the inline arrays of a shared
 * allocation record (SHM_ALLOC_MAX_PERMS, SHM_ALLOC_MAX_CHANS; the worker checks at build
 * time that they agree), so a configured cap is never silently lowered. */
/* Upper bound of limits.max_allocations, total_quota, user_quota and
 * listeners[].max_allocations. */
#define CONF_MAX_ALLOCATIONS 10000000
/* limits.max_allocations unset (or "auto"): the table covers the relay port space, every
 * port of the listeners' relay ranges on every distinct relay address (conf_capacity.c),
 * at least the global range (admin.relay_port_min..max), so a listener added later on one
 * address fits without a restart. CONF_RELAY_WAYS is how many relay addresses may book
 * one port number in the shared port pool (SHM_PPOOL_WAYS; master/main.c checks they
 * agree), so the port space, and the automatic capacity, is at most
 * CONF_AUTO_ALLOCATIONS_MAX. */
#define CONF_RELAY_WAYS 4u
#define CONF_AUTO_ALLOCATIONS_MAX (CONF_RELAY_WAYS * 65535u)
/* limits.user_quota unset (or "auto"): half of what the listener an Allocate arrives on
 * can hold, the smaller of its relay ports and the allocation table (its
 * max_allocations, limits.max_allocations, limits.total_quota): one user cannot take a
 * tenant's whole relay range or table (worker/turn.c wk_user_quota). */
#define CONF_USER_QUOTA_AUTO UINT32_MAX
/* Upper bound of the bandwidth limits in bits per second (1 Tbit/s). */
#define CONF_MAX_BPS UINT64_C(1000000000000)

/* Defaults of the TCP relaying limits (limits.tcp_*), and bounds of tcp_connections and
 * tcp_buffer (bytes). */
/* Defaults of the per-source budgets (limits.source_*, prefix_*, preauth_timeout). */
#define CONF_DEF_SOURCE_CONNECTIONS 64
#define CONF_DEF_SOURCE_HANDSHAKES 16
#define CONF_DEF_PREFIX_FACTOR 4
#define CONF_DEF_PREAUTH_TIMEOUT 10
/* limits.upgrade_linger: seconds an old worker keeps its TLS calls after a live upgrade. */
#define CONF_DEF_UPGRADE_LINGER 3600
#define CONF_MAX_UPGRADE_LINGER 86400
/* limits.wake_coalesce_us / wake_coalesce_rate (worker/wake.h): the longest wait a worker
 * may put before its poll, and the datagrams per second from which it tries. */
#define CONF_DEF_WAKE_COALESCE_US 0
#define CONF_MAX_WAKE_COALESCE_US 1000
#define CONF_DEF_WAKE_COALESCE_RATE 20000
#define CONF_MAX_WAKE_COALESCE_RATE 100000000

#define CONF_DEF_TCP_CONNECTIONS 64
#define CONF_DEF_TCP_PENDING_CONNECTS 256
#define CONF_DEF_TCP_CONNECT_TIMEOUT 10
#define CONF_DEF_TCP_BUFFER 65536
#define CONF_MAX_TCP_CONNECTIONS 4096
#define CONF_MIN_TCP_BUFFER 4096
#define CONF_MAX_TCP_BUFFER (16 * 1024 * 1024)

/* Defaults and bound of limits.auth_fail_* (failed authentications per minute). */
#define CONF_DEF_AUTH_FAIL_PREFIX 10
#define CONF_DEF_AUTH_FAIL_USER 20
#define CONF_MAX_AUTH_FAIL 60000

#define CONF_MAX_PERMISSIONS 32
#define CONF_MAX_CHANNELS 32

struct conf_limits {
	uint32_t max_allocations;       /* capacity of the allocation table; default auto,
					 * resolved once the listeners are known */
	bool max_allocations_auto;      /* not written down (or "auto"): the port space */
	uint32_t relay_addrs;           /* distinct relay addresses the port space counts */
	uint32_t relay_ports;           /* their relay ports (the port space, before the
					 * floor of the global range) */
	uint32_t user_quota;            /* allocations per user, 0 = unlimited (admin.user_quota
					 * too); default CONF_USER_QUOTA_AUTO */
	uint32_t total_quota;           /* admitted allocations overall, 0 = max_allocations */
	uint32_t max_permissions;       /* per allocation; default 32 */
	uint32_t max_channels;          /* per allocation; default 32 */
	uint32_t allocation_lifetime;   /* seconds, default 600 */
	uint32_t max_allocation_lifetime; /* seconds, default 3600 */
	uint32_t permission_lifetime;   /* seconds, default 300 */
	uint32_t channel_lifetime;      /* seconds, default 600 */
	uint32_t nonce_lifetime;        /* seconds, default 3600 */
	uint32_t channel_numbers;       /* ours; enum conf_chan_range, default RFC5766 */
	/* ours: error responses to unauthenticated UDP requests, per source prefix and per
	 * worker (docs/security.md "Reflection") */
	uint32_t unauth_rate;           /* per second, default 20; 0 = unlimited */
	uint32_t unauth_burst;          /* bucket size, default 100 */
	uint32_t unauth_prefix_v4;      /* bits, default 24 */
	uint32_t unauth_prefix_v6;      /* bits, default 64 */
	/* ours: credits of addresses that authenticated (shm/shm_trust.h) */
	uint32_t unauth_trust_window;   /* seconds an earned credit stays, default 3600 */
	uint32_t unauth_trust_credits;  /* credits an address may hold, default 1000; 0 = off */
	/* ours: failed authentications of new allocations per minute, decaying
	 * (worker/authfail.h); 0 = no budget */
	uint32_t auth_fail_prefix;      /* per source prefix (unauth_prefix_*), default 10 */
	uint32_t auth_fail_user;        /* per username, default 20 */
	/* ours: bandwidth limits (shm/shm_bw.h), bits per second of relayed payload, each
	 * direction separately, 0 = unlimited; live on reload */
	uint32_t bandwidth_burst_ms;    /* bucket size as time at the rate, default 500 */
	uint64_t allocation_bps;        /* each allocation */
	uint64_t user_bps;              /* all allocations of a user on this node */
	/* ours: TCP relaying (RFC 6062, worker/tcprelay.c); live on reload for what starts
	 * after it */
	uint32_t tcp_connections;      /* peer connections per allocation, default 64 */
	uint32_t tcp_pending_connects; /* Connects in flight per worker, default 256 */
	uint32_t tcp_connect_timeout;  /* seconds before 447, default 10 */
	uint32_t tcp_buffer; /* bytes buffered per connection and direction, default 65536 */
	/* ours: what an unauthenticated client may hold (worker/budget.c), per source address
	 * and per source prefix (/24, /64), counted across workers; 0 = unlimited. A full
	 * budget evicts the source's oldest unauthenticated connection. */
	uint32_t source_connections;     /* unauthenticated connections, default 64 */
	uint32_t source_tls_handshakes;  /* TLS handshakes in progress, default 16 */
	uint32_t source_dtls_handshakes; /* DTLS handshakes in progress, default 16 */
	uint32_t prefix_connections;     /* default 256 */
	uint32_t prefix_tls_handshakes;  /* default 64 */
	uint32_t prefix_dtls_handshakes; /* default 64 */
	uint32_t preauth_timeout; /* seconds to the first authenticated request, default 10 */
	/* ours: seconds an old worker may keep serving its TLS calls after a live upgrade
	 * (worker/linger.c); 0: they end at the upgrade. Default CONF_DEF_UPGRADE_LINGER. */
	uint32_t upgrade_linger;
	/* ours: wake-up coalescing (worker/wake.h): microseconds a worker's loop may wait
	 * before it polls while single-datagram wake-ups come at wake_coalesce_rate datagrams
	 * per second or more; 0 = never. */
	uint32_t wake_coalesce_us;
	uint32_t wake_coalesce_rate;
};

/* admin.siblings[] (ours): another instance behind the same load balancer, with its slice
 * of the relay port range. A masked address (listeners[].relay_address_mask) whose port
 * lies in a sibling's slice is that sibling's allocation (docs/relay.md, "Siblings"). */
struct conf_sibling {
	char *address;               /* as written (after expansion): an IP or a DNS name */
	bool is_name;                /* a DNS name, resolved by conf_resolve_clusters() */
	bool self;                   /* its slice is admin.relay_port_min..max: this instance,
				      * skipped (one list serves every replica) */
	uint16_t relay_port_min, relay_port_max;
	/* An IP: that address (port 0), set at load. A DNS name: what conf_resolve_clusters()
	 * found (empty until then, and while it does not resolve). Empty when self. */
	struct sockaddr_storage *resolved;
	size_t n_resolved;
};

/* Upper bound of admin.siblings entries. */
#define CONF_MAX_SIBLINGS 64

/* admin.offload_engine (STUNner's names, case-insensitive). */
enum conf_offload {
	CONF_OFFLOAD_NONE = 0,       /* user space only (default) */
	CONF_OFFLOAD_AUTO,           /* XDP where the driver runs it natively, else TC */
	CONF_OFFLOAD_TC,
	CONF_OFFLOAD_XDP,
};

/* "None", "Auto", "TC" or "XDP". */
const char *conf_offload_name(enum conf_offload e);

/* Upper bound of admin.offload_interfaces. */
#define CONF_MAX_OFFLOAD_IFACES 16

struct conf_admin {
	char *name;                  /* default "default-stunnerd" */
	char *loglevel;              /* default "all:INFO" */
	char *metrics_endpoint;      /* NULL/"" = off (default) */
	char *healthcheck_endpoint;  /* default "http://:8086"; "" = off */
	uint32_t workers;            /* ours; 0 = one per CPU (default) */
	char *admin_socket;          /* ours; default "/run/turngate/admin.sock" */
	char *state_dir;             /* ours; directory of the state file NAME.state that keeps
				      * the allocation table across restarts. NULL (unset): the
				      * admin socket's directory, else /run/turngate; "": none */
	uint32_t admin_socket_mode;  /* ours; default 0600 */
	enum conf_log_format log_format; /* ours; default text */
	uint16_t relay_port_min, relay_port_max; /* ours; default 49152..65535 */
	uint32_t drain_timeout;      /* ours; seconds, default 30 */
	uint32_t worker_ping_timeout;  /* ours; seconds 1..3600 without a pong before a worker
					* is killed, default 15 */
	uint32_t worker_stall_timeout; /* ours; seconds 1..3600 a worker may hold up a snapshot
					* grace period before it is killed, default 20 */
	char *alternate_server;      /* ours; "IP[:port]" sent as ALTERNATE-SERVER while
				      * draining; NULL */
	char *credential_api_endpoint; /* ours; NULL = off (default), e.g.
					* "http://127.0.0.1:8088" */
	char *credential_api_token;  /* ours; bearer token the credential API requires (from
				      * credential_api_token or the file); NULL = none. Secret:
				      * redacted in JSON, wiped on free. */
	char *credential_api_token_file; /* ours; as written, NULL when unset (watched by -w) */
	enum conf_offload offload_engine; /* STUNner's; default None */
	char **offload_ifaces;       /* STUNner's offload_interfaces; NULL/0: the interfaces that
				      * carry the listeners' and relays' addresses */
	size_t n_offload_ifaces;
	char *records_file;          /* ours; admin.session_records.file: a path, "stdout" or
				      * "syslog"; NULL = no session records (default) */
	char *records_webhook;       /* ours; admin.session_records.webhook: http:// or https://
				      * URL the records are POSTed to in batches; NULL = none */
	bool records_start;          /* ours; admin.session_records.start: a record when an
				      * allocation begins too (default false) */
	char *records_webhook_ca_file; /* ours; its CA certificates (PEM); NULL = the system's */
	char *records_webhook_server_name; /* ours; the name its certificate must carry; NULL =
					    * the URL's host */
	struct conf_sibling *siblings; /* ours; admin.siblings in document order */
	size_t n_siblings;
};

#define CONF_MAGIC 0x434f4e46u  /* "CONF" */

struct conf {
	uint32_t magic;              /* CONF_MAGIC */
	char *source;                /* display name of the file */
	char *version;               /* "v1" */
	struct conf_admin admin;
	struct conf_auth auth;
	struct conf_listener *listeners;
	size_t n_listeners;
	struct conf_cluster *clusters;
	size_t n_clusters;
	struct conf_limits limits;
	int64_t loaded_at;           /* unix seconds, from conf_load_opts.now */
	size_t n_unknown_routes;     /* listener routes naming no cluster (admit nobody; warned;
				      * counted in /status and the admin `status`) */
};

/* ---- loading ------------------------------------------------------------------------ */

/* Environment lookup used for $VAR/${VAR} expansion: returns the value or NULL. */
typedef const char *(*conf_getenv_fn)(void *ctx, const char *name);

struct conf_load_opts {
	conf_getenv_fn getenv;       /* NULL: getenv(3) */
	void *getenv_ctx;
	int64_t now;                 /* unix seconds; 0: time(NULL). For previous_secret_grace */
	bool stream_ok;              /* the file may be a pipe or device, read blocking: for -t
				      * only (a daemon re-reads it at every reload) */
};

/* Parses and validates a config. path may be "file://PATH". buf need not be NUL-terminated;
 * name is the display name used in diagnostics. opts may be NULL.
 * Every problem found is appended to diags (which the caller zero-initialised); loading
 * does not stop at the first error.
 * Returns 0 and *out (owned by the caller) when there is no error (warnings allowed);
 * -EINVAL when the config has errors, -ENOENT/-EACCES/-EIO... when the file cannot be read,
 * -ENOMEM; in every failure case *out is NULL and diags says why.
 * STRICT_DNS endpoints are not resolved here: call conf_resolve_clusters(). */
int conf_load_file(const char *path, const struct conf_load_opts *opts, struct conf **out,
		   struct conf_diags *diags);
int conf_load_string(const char *buf, size_t len, const char *name,
		     const struct conf_load_opts *opts, struct conf **out,
		     struct conf_diags *diags);

/* The embedded default (turngated without -c): TURN-UDP and TURN-TCP listeners on
 * 127.0.0.1:3478, ephemeral auth with a random 32-byte (hex) secret generated now, one
 * cluster "loopback" = 127.0.0.0/8 and ::1 routed from both. Returns 0 or -ENOMEM/-EIO. */
int conf_load_default(const struct conf_load_opts *opts, struct conf **out);

/* Prints how to mint a credential for cfg's global auth: for ephemeral auth, a ready
 * username:password valid for one day from now and the formula; for static, the users;
 * for none, a note. Used by turngated when it starts with the embedded default. */
void conf_print_credential_help(const struct conf *cfg, int64_t now, FILE *out);

/* TURN REST API (ephemeral) password for username: base64(HMAC-SHA1(secret, username)),
 * 28 characters plus NUL in out. Returns 0 or -EIO. Any process. */
int conf_mint_password(const char *secret, const char *username, char out[29]);

/* Destructor; accepts NULL. Wipes secrets. */
void conf_free(struct conf *cfg);

/* Loads path (NULL: the embedded default), resolves STRICT_DNS clusters with getaddrinfo,
 * prints every diagnostic to out and then "configuration ok" when there is no error.
 * Returns 0 when ok, 1 otherwise. For `turngated -c FILE -t`. */
int conf_check_main(const char *path, FILE *out);

/* ---- DNS (STRICT_DNS clusters) ------------------------------------------------------- */

/* Resolves name to at most max addresses (port 0) in out; writes the count to *n.
 * Returns 0 (n may be 0) or a negative errno / EAI code mapped to -EHOSTUNREACH. */
typedef int (*conf_resolve_fn)(void *ctx, const char *name, struct sockaddr_storage *out,
			       size_t max, size_t *n);

/* The getaddrinfo(3) resolver (blocking; master only). */
int conf_resolve_getaddrinfo(void *ctx, const char *name, struct sockaddr_storage *out, size_t max,
			     size_t *n);

/* Fills every STRICT_DNS endpoint's resolved[], and that of every admin.siblings entry
 * given by DNS name (not the one that is this instance), with fn (NULL: getaddrinfo),
 * replacing earlier results. A name that does not resolve, or (a cluster's) resolves to
 * special-purpose addresses (never admitted through DNS unless the cluster's
 * admit_special names their category), is a warning in
 * diags, not an error: it matches nothing until a reload resolves it.
 * Returns 0 or -ENOMEM. */
int conf_resolve_clusters(struct conf *cfg, conf_resolve_fn fn, void *ctx,
			  struct conf_diags *diags);

/* ---- introspection ------------------------------------------------------------------- */

/* The config as JSON (STUNner's key names plus ours) with every secret, password,
 * certificate and key replaced by "<redacted>". Returns a new reference or NULL on ENOMEM.
 * For the admin `config` command and HTTP /status. */
json_t *conf_to_json_redacted(const struct conf *cfg);

/* admin.siblings as a JSON array: each entry's address, relay_port_min, relay_port_max,
 * self, and resolved (the addresses in use, as text). Returns a new reference or NULL on
 * ENOMEM. Part of conf_to_json_redacted's admin object; the admin `status` shows it too. */
json_t *conf_siblings_json(const struct conf *cfg);

/* ---- reload support ------------------------------------------------------------------- */

enum conf_listener_change {
	CONF_LISTENER_UNCHANGED = 0,
	CONF_LISTENER_ADDED,
	CONF_LISTENER_REMOVED,
	/* Sockets must be replaced: protocol, port or bind address changed (the listener's
	 * allocations end, as if removed and added). */
	CONF_LISTENER_RESTART,
	/* Same sockets; something else changed (routes, auth, relay address, TLS material,
	 * relay ports, public address): applied through the new snapshot. */
	CONF_LISTENER_UPDATED,
};

struct conf_listener_delta {
	const char *name;            /* points into old or new; valid while both live */
	enum conf_listener_change change;
	ssize_t old_idx, new_idx;    /* -1 when absent on that side */
};

/* Compares the listeners of two configs by name. *out (caller frees with free()) gets one
 * entry per name in old or new: new's order first, then the removed ones in old's order.
 * Returns 0 or -ENOMEM. */
int conf_diff_listeners(const struct conf *old, const struct conf *new_cfg,
			struct conf_listener_delta **out, size_t *n);

/* True when the admin HTTP endpoints a and b (http://[HOST][:PORT][/PATH], each with its
 * default port) bind one socket: the rule master/httpd.c plans its servers by
 * (http_endpoint_same_socket, which conf does not link; tests/unit/test_http.c checks the
 * two agree). Same port and the same address, or a wildcard host (empty, 0.0.0.0, [::]) on
 * either. False when either is unset or has a host the HTTP server refuses (a name).
 * Pure; any process. */
bool conf_http_same_socket(const char *a, unsigned default_a, const char *b,
			   unsigned default_b);

/* ---- peer safety --------------------------------------------------------------------- */

/* Canonicalises sa into (family, addr): IPv4-mapped (::ffff:0:0/96), IPv4-compatible
 * (::/96, except :: and ::1), 6to4 (2002::/16, the embedded v4 of 2002:AABB:CCDD::/48) and
 * NAT64 (64:ff9b::/96) become AF_INET. Returns 0 or -EAFNOSUPPORT. Fast, no allocation. */
/* The relay port space of a config: *ports, the ports of the listeners' relay ranges on
 * every distinct relay address (a port number counted on at most CONF_RELAY_WAYS
 * addresses), *addrs, the distinct relay addresses. Returns 0 or -ENOMEM. */
int conf_relay_port_space(const struct conf *c, uint32_t *ports, uint32_t *addrs);

int conf_addr_canon(const struct sockaddr *sa, int *family, uint8_t addr[16]);

/* Categories of never-admitted addresses (conf_addr.c's table: the IANA special-purpose
 * registries, the rest of IPv6 outside global unicast, cloud metadata addresses; the
 * private ranges 10/8, 172.16/12, 192.168/16, 100.64/10 and fc00::/7 are not among them).
 * One bit each: clusters[].admit_special names them (conf_special_parse). */
#define CONF_SPECIAL_RESERVED 0x01u
#define CONF_SPECIAL_LOOPBACK 0x02u
#define CONF_SPECIAL_LINK_LOCAL 0x04u
#define CONF_SPECIAL_MULTICAST 0x08u
#define CONF_SPECIAL_METADATA 0x10u
#define CONF_SPECIAL_DOCUMENTATION 0x20u
#define CONF_SPECIAL_PROTOCOL 0x40u
#define CONF_SPECIAL_TRANSLATION 0x80u
#define CONF_SPECIAL_COUNT 8u

/* The category bit of the longest special range that holds the address (family, addr as
 * written, not canonicalised), or 0 when it is in none. Fast, no allocation. */
unsigned conf_addr_special(int family, const uint8_t addr[16]);

/* The categories of a peer address as written and canonicalised (conf_addr_canon): an
 * IPv6 address that embeds an IPv4 one is in both its own category and the IPv4 one's.
 * CONF_SPECIAL_RESERVED for a family other than IPv4/IPv6. The form every check uses. */
unsigned conf_sockaddr_special(const struct sockaddr *sa);

/* conf_addr_special(family, addr) != 0. */
bool conf_addr_is_special(int family, const uint8_t addr[16]);

/* The categories of every special range that holds all of p (an "explicit" special
 * endpoint: 127.0.0.1 lies in loopback, 169.254.169.254 in link-local and metadata); 0 for
 * a prefix that no special range holds whole (0.0.0.0/0, 10.0.0.0/8, fd00::/8). */
unsigned conf_prefix_special(const struct conf_prefix *p);

/* conf_prefix_special(p) != 0. */
bool conf_prefix_is_special(const struct conf_prefix *p);

/* Name of one category bit ("loopback", ...), NULL for anything else. */
const char *conf_special_name(unsigned cat);

/* Category bit of name (case-insensitive). Returns 0, or -ENOENT for an unknown name. */
int conf_special_parse(const char *name, unsigned *cat);

/* The table itself (tests and docs): its size, and entry i as a prefix and its category.
 * conf_special_get returns 0 or -ENOENT. */
size_t conf_special_count(void);
int conf_special_get(size_t i, struct conf_prefix *p, unsigned *cat);

/* Whether the STATIC endpoint text ("IP", "IP/LEN", either with ":<MIN-MAX>") covers the
 * peer's address (canonical, port not looked at): 1 or 0; -EINVAL when text is no STATIC
 * endpoint. For turngatectl doctor, which explains a 403 with the running clusters; the
 * relay's own check is snap_peer_match. */
int conf_endpoint_covers(const char *text, const struct sockaddr *peer);

#endif
