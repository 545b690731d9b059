/* Integration-test harness: runs the real turngated on loopback with a generated config,
 * a UDP echo peer, and a minimal blocking TURN client built on stun/ (the tests' own
 * client half, independent of the daemon's code).
 *
 * Process model: the test process forks turngated (stderr to a file in a private temp
 * directory) and echo peers; nothing is shared but sockets. Every wait is bounded.
 * A test is failed by harness_stop() when the daemon's log shows a sanitizer report,
 * a [crit] line, or a worker that died (signal or non-zero exit), or when the daemon
 * does not exit cleanly on SIGTERM.
 */
#ifndef TG_TESTS_HARNESS_H
#define TG_TESTS_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

struct hturn;
struct harness_echo;

struct harness {
	char dir[128];		/* private temp directory (config, log, admin socket) */
	char conf[192];		/* dir/turngate.yaml */
	char log[192];		/* dir/turngated.log: the daemon's stderr */
	char sock[192];		/* dir/admin.sock: use as admin.admin_socket */
	pid_t pid;		/* turngated, 0 when not running */
	unsigned starts;	/* daemons started: the first truncates the log, later ones
				 * (restarts) append to it */
	struct hturn *clients;	/* of harness_clients(), owned here */
	size_t n_clients;
};

/* Creates the temp directory. Returns 0 or -errno. */
int harness_init(struct harness *h);

/* For teardowns: when turngated still runs (the test failed before stopping it), prints
 * the tail of its log, so the failure comes with the daemon's side of it, then kills and
 * reaps it. Does nothing when the daemon was stopped. */
void harness_abort(struct harness *h);

/* n unopened TURN clients (fd -1) owned by h: their sockets are closed and their memory
 * freed by the next call or by harness_cleanup(), so a test whose assertion fails half
 * way (cmocka jumps out of it) leaks nothing. Aborts when out of memory. */
struct hturn *harness_clients(struct harness *h, size_t n);

/* Writes the YAML config (text as given) to h->conf. Returns 0 or -errno. */
int harness_write_config(struct harness *h, const char *yaml);

/* Path of the daemon: $top_builddir/turngated (or master/turngated). */
int harness_daemon_path(char *out, size_t cap);

/* Starts turngated -c h->conf --workers N (extra_args may be NULL) and waits (10 s at
 * most) until it answers a STUN Binding on probe (UDP). Returns 0, -ETIMEDOUT (the log
 * tail is printed), or -errno. */
int harness_start(struct harness *h, unsigned workers, const struct sockaddr *probe);

/* Starts turngated -c h->conf --workers N and returns at once (h->pid set): for a test
 * that keeps traffic going while the daemon starts. Returns 0 or -errno. */
int harness_spawn(struct harness *h, unsigned workers);

/* harness_write_config() then harness_start(): the usual end of a fixture's setup.
 * Returns 0, or -1 when either step failed. */
int harness_launch(struct harness *h, const char *yaml, unsigned workers,
		   const struct sockaddr *probe);

/* SIGTERM, a second SIGTERM after 5 s (stop now), SIGKILL after 15 s; then scans the log. Returns 0
 * when the daemon exited with status 0 and the log is clean, -1 otherwise (reasons printed).
 * Idempotent. */
int harness_stop(struct harness *h);

/* For a test that killed workers on purpose: stops the daemon like harness_stop, then
 * requires exactly `kills` worker deaths in the log and no sanitizer report, runtime
 * error, assertion or [crit] line. Returns 0 or -1 (reasons printed). Idempotent. */
int harness_stop_killed(struct harness *h, int kills);
/* Removes the temp directory and everything in it (after harness_stop). */
void harness_cleanup(struct harness *h);

/* A fixture's teardown after a test that may have failed half way: harness_abort(), then
 * stops the echo peer (e may be NULL) and removes the directory. */
void harness_teardown_killed(struct harness *h, struct harness_echo *e);

/* A fixture's teardown: harness_stop(), then stops the echo peer (e may be NULL) and
 * removes the directory. Returns harness_stop()'s verdict. */
int harness_teardown(struct harness *h, struct harness_echo *e);

/* 0 when the log file has no failure marker; else -1 and the offending line in why. */
int harness_scan_log(const char *path, char *why, size_t cap);

/* Number of lines of h->log containing needle. */
int harness_log_count(const struct harness *h, const char *needle);

/* Ports (harness_ports.c). Every port the two draws below return is reserved for the calling
 * process until it exits, against every test process on the machine, the Python harness's
 * (harness_admin.free_port) included: two tests running at once (make -j2 check) never draw
 * the same port. Reservations live in /tmp/turngate-test-ports (TG_PORT_LOCK names another
 * file) as open file description locks, one byte per port, which the kernel drops when the
 * process ends however it ends: a crashed test leaves none behind. */

/* Reserves port for this process: 0, -EBUSY when this process or another live one already
 * holds it, or another negative errno when the file cannot be used (said on stderr). */
int harness_port_reserve(uint16_t port);

/* A port free for both UDP and TCP on every IPv4 and IPv6 address right now, reserved:
 * from harness_free_port_late's span where it has one free (a port-0 pick could be taken
 * by a client socket of the test beside this one before the daemon binds it), else
 * kernel-chosen (20000-49151). 0 when none is free (said on stderr). */
uint16_t harness_free_port(void);

/* As harness_free_port, for a listener port the daemon binds again or first later (a
 * restart, a reload that adds it): drawn from 31100 up to below the kernel's port-0
 * range (/proc/sys/net/ipv4/ip_local_port_range), where no socket bound to port 0 (a
 * client of this test or of the one beside it) can take it meanwhile; the Python
 * harness's free_port(late=True) draws from the same span, and TG_LATE_PORTS=LO-HI sets
 * another for both. Every port of the span is tried once, from a random one on. Falls
 * back to a kernel-chosen port where there is no such span. 0 when none is free (said on
 * stderr). */
uint16_t harness_free_port_late(void);

/* The generic view of a socket address (saves the cast at every call). */
static inline struct sockaddr *sa(struct sockaddr_storage *ss)
{
	return (struct sockaddr *)ss;
}

/* The port of an IPv4 or IPv6 address, in host order (0 for another family). */
uint16_t harness_port(const struct sockaddr_storage *ss);

/* Fills a sockaddr_in/_in6 from text. Returns its length, 0 on a bad address. */
socklen_t harness_addr(const char *ip, uint16_t port, struct sockaddr_storage *out);

/* Sends one STUN Binding over UDP; 0 when a success response comes within timeout_ms. */
int harness_stun_binding(const struct sockaddr *srv, int timeout_ms);

/* ---- UDP echo peer ---------------------------------------------------------------- */

struct harness_echo {
	pid_t pid;
	struct sockaddr_storage addr;	/* where it listens */
	socklen_t addr_len;
};

/* Forks a peer that echoes every datagram back to its sender (for 120 s at most).
 * port 0: kernel-chosen (reported in e->addr). Returns 0 or -errno. */
int harness_echo_start(const char *ip, uint16_t port, struct harness_echo *e);
void harness_echo_stop(struct harness_echo *e);

/* ---- minimal TURN client ---------------------------------------------------------- */

struct stun_builder;
typedef void hturn_attrs_fn(struct stun_builder *b, void *arg);

struct hturn {
	int fd;
	bool tcp;
	struct sockaddr_storage srv;
	socklen_t srv_len;
	char user[160], pass[128], realm[256], nonce[128];
	bool sha256;			/* sign with MESSAGE-INTEGRITY-SHA256 + SHA-256 key */
	bool fingerprint;		/* add FINGERPRINT to requests */
	struct sockaddr_storage relay, relay2, mapped;
	uint32_t lifetime;
	uint8_t stream[70000];		/* TCP receive buffer */
	size_t stream_len;
	uint8_t resp[4096];		/* last response to a request */
	size_t resp_len;
	int timeout_ms;			/* per wait; default 2000 */
	bool no_retry;			/* return 401/438 instead of answering the challenge */
	uint8_t req[2048];		/* last request sent (retransmission tests) */
	size_t req_len;
};

/* Connects (TCP) or creates a UDP socket towards srv. local_ip may be NULL. */
int hturn_open(struct hturn *c, const struct sockaddr *srv, bool tcp);
void hturn_close(struct hturn *c);
void hturn_set_user(struct hturn *c, const char *user, const char *pass);

/* Sends a request and waits for its response, answering 401/438 challenges (at most
 * twice) when auth is true; over UDP it retransmits after 500 ms, 1 s, ... within
 * c->timeout_ms. Returns 0 for success, the STUN error code (300..699) for an
 * error response, or -errno (-ETIMEDOUT when nothing came). The response stays in
 * c->resp. attrs adds the method's attributes (may be NULL). */
int hturn_request(struct hturn *c, uint16_t method, hturn_attrs_fn *attrs, void *arg, bool auth);

/* Allocate with REQUESTED-TRANSPORT UDP (+ attrs); fills c->relay, c->relay2, c->mapped,
 * c->lifetime on success. */
int hturn_allocate(struct hturn *c, hturn_attrs_fn *attrs, void *arg);
/* Allocates until the answer is code (a draining daemon's 403, or 300 with an alternate
 * server), at most 20 tries 50 ms apart; an allocation still granted is released at once.
 * Returns the last answer, or -EPROTO when a release failed. */
int hturn_allocate_until(struct hturn *c, int code);
int hturn_refresh(struct hturn *c, uint32_t lifetime);
int hturn_permission(struct hturn *c, const struct sockaddr *peer);
int hturn_channel_bind(struct hturn *c, uint16_t ch, const struct sockaddr *peer);

/* Data: Send indication / ChannelData out; recv waits for Data indication or ChannelData
 * (whichever comes) and returns the payload length, *ch (0 for Data indication) and the
 * peer (for a Data indication). -ETIMEDOUT when nothing came within timeout_ms. */
int hturn_send(struct hturn *c, const struct sockaddr *peer, const void *data, size_t len);
int hturn_chan_send(struct hturn *c, uint16_t ch, const void *data, size_t len);
int hturn_recv_data(struct hturn *c, void *buf, size_t cap, uint16_t *ch,
		    struct sockaddr_storage *peer, int timeout_ms);

/* Local port of the client's socket (host order), 0 when it cannot be read. */
uint16_t hturn_local_port(const struct hturn *c);

/* Raw I/O on the client's socket (TCP: one frame). */
int hturn_send_raw(struct hturn *c, const void *buf, size_t len);
int hturn_recv_raw(struct hturn *c, uint8_t *buf, size_t cap, int timeout_ms);

#endif
