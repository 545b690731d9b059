/* Unit tests' helpers for a connection handed over while systemd's fd store keeps a copy
 * (test_ipc, test_ipcq, test_master, test_wkctl): whether a drop shut it down shows at
 * its other end. */
#ifndef TG_TEST_CONN_FIX_H
#define TG_TEST_CONN_FIX_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

/* A connected stream socket to hand over (*peer: its other end) and a copy of it kept
 * open, as the fd store keeps one: a plain close of the handed end does not end it. */
__attribute__((unused)) static int conn_with_copy(int *peer, int *copy)
{
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	*peer = sv[1];
	*copy = dup(sv[0]);
	assert_true(*copy >= 0);
	return sv[0];
}

/* The connection's other end sees its end (EOF), not merely nothing to read. */
__attribute__((unused)) static bool peer_sees_eof(int peer)
{
	char c;

	return recv(peer, &c, 1, MSG_DONTWAIT) == 0;
}

#endif
