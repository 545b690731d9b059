/* Held calls under load, for the tests of restarts and live upgrades (test_restart.c,
 * test_upgrade.c): N_ALLOCS UDP allocations through the real turngated, each sending one
 * ChannelData to an echo peer every SEND_EVERY_US and counting what comes back, so that a
 * gap in relaying (a restart, an upgrade) shows per allocation. One fixture per process
 * (g), as cmocka runs the tests one after the other. */
#ifndef TG_TESTS_INTEGRATION_CALLS_H
#define TG_TESTS_INTEGRATION_CALLS_H

#include <stdbool.h>
#include <stdint.h>

#include "tests/integration/harness.h"

#define N_ALLOCS 100
#define N_ROUNDS 5
#define CHAN 0x4000
#define SEND_EVERY_US 25000		/* 40 packets/s per allocation */
#define RECOVER_LIMIT_US 15000000	/* an allocation silent this long after a restart stalled */
#define SECRET "restart-secret"

struct flow {
	long long last_rx, max_gap, rx;
	long long gap_end;		/* when the longest gap ended */
	long long pkts;			/* echoes received, one by one */
};

struct fx {
	struct harness h;
	struct harness_echo echo;
	uint16_t pu;
	unsigned relay_min, relay_max;
	struct sockaddr_storage srv;
	char state[256];
	struct hturn *c;
	struct flow f[N_ALLOCS];
	unsigned workers;
	long long sent;			/* ChannelData sent by load() */
};

extern struct fx g;

long long now_us(void);

/* The fixture: a temp directory, an echo peer, the config (ephemeral auth with SECRET, one
 * TURN-UDP listener, relay ports relay_min..relay_max, the state file next to the admin
 * socket). Returns 0 or -1. */
int calls_setup(unsigned relay_min, unsigned relay_max);
/* The fixture's config text; extra_port != 0 adds a second TURN-UDP listener there. */
int calls_config(char *yaml, size_t cap, uint16_t extra_port);
int calls_teardown(void **state);

void start(unsigned workers);
/* One allocation of REST user `user` with channel CHAN to the echo. */
void alloc_user(struct hturn *c, const char *user);
/* N_ALLOCS allocations with a channel to the echo, relaying. */
void alloc_all(void);
/* Every client sends one ChannelData each SEND_EVERY_US and counts the echoes, for
 * dur_us, or (recover_since > 0) until every flow has an echo newer than recover_since
 * and dur_us has passed, at most RECOVER_LIMIT_US more. */
void load(long long dur_us, long long recover_since);
/* Receives for ms without sending (what is in flight arrives). */
void quiet(int ms);
long long echoes_total(void);
/* Datagrams the kernel dropped at a full receive queue, summed over every UDP socket of
 * this network namespace (/proc/net/udp and udp6, the "drops" column); -1 if unreadable.
 * Other programs' sockets count too: a bound that subtracts it only gets more lenient. */
long long udp_queue_drops(void);
/* Prints the longest relaying gap of round (what: "restart", "upgrade"). */
void gaps_print(const char *what, int round, unsigned from, unsigned to);
void gaps_reset(void);
/* Every allocation relays again since `since` and refreshes with the credentials and
 * nonce it had; the table holds N_ALLOCS, each owned by a running worker. */
void check_all_serving(long long since);
/* Deletes every allocation and stops the daemon (no worker deaths in the log). */
void end_all(void);

#endif
