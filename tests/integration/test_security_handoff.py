#!/usr/bin/env python3
"""An RFC 6062 ConnectionBind for another worker's CONNECTION-ID moves its connection to
that worker only once it authenticates (attacker walk aw2, F3, F4). Two workers.

- TLS, no credentials: 120 TLS connections from one address each send an unauthenticated
  ConnectionBind naming slot 0 or 1 (so about half name the other worker). Each is
  answered 401 where it arrived and stays there: the workers' descriptors stay within the
  per-source budget (64 connections) while they are open, and are back where they were
  once the pre-authentication deadline closed them. (Before: each such connection was
  handed over at once, its TLS session left behind in a bridge (2 descriptors, 2 buffers)
  outside every budget and deadline: +2 descriptors each, still there after the deadline.)
- Ping-pong: one plain TURN-TCP connection sends an unauthenticated ConnectionBind naming
  slot 0, then 1, then 0, ... twice a second. It is closed at limits.preauth_timeout (2 s
  here; checked against a generous 12 s). (Before: each hand-off restarted its deadlines,
  and it was still open after 12 s.)

Legitimate binds across workers (a fresh nonce or the control connection's) are covered
by test_tcp_relay.py, test_relay_tls and test_handoff_burst.py. Every wait is bounded.
"""
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_CONNECTION_ID, CONNECTION_BIND, REQUEST, Daemon,  # noqa: E402
                           build, check, config, daemon_pids, free_port, run_tests,
                           tls_connect, wait_for)

PREAUTH_S = 2
SOURCE_CONNS = 64       # limits.source_connections default
LIMITS = {"preauth_timeout": PREAUTH_S}
RELAY = (20100, 20119)  # never bound (no allocation relays), unique in tests/


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def worker_fds(daemon):
    """Open descriptors of the workers together."""
    return sum(fds(pid) for pid in daemon_pids(daemon)[1:])


def cbind(slot, attrs=()):
    """An unauthenticated ConnectionBind for an unknown CONNECTION-ID of slot."""
    tid = os.urandom(12)
    return build(CONNECTION_BIND, REQUEST, tid,
                 [(A_CONNECTION_ID, struct.pack("!I", 0x5a5a5a00 | slot))] + list(attrs))


def test_tls_unauth_bind_stays(d):
    from test_tcp_relay import tls_tcp_config
    text, tls_port, _ = tls_tcp_config(d)
    text += "limits:\n  preauth_timeout: %d\n" % PREAUTH_S
    daemon = Daemon(d, text).start()
    socks = []
    try:
        base = worker_fds(daemon)
        for i in range(120):
            try:
                s = tls_connect(tls_port)
            except OSError:
                continue    # the budget closed it during the handshake: fine
            s.sendall(cbind(i % 2))
            socks.append(s)
        time.sleep(1.0)     # let hand-offs (there should be none) arrive
        held = worker_fds(daemon) - base
        check(held <= SOURCE_CONNS + 16,
              "workers hold %d more descriptors for 120 unauthenticated connections of one "
              "address (budget %d)" % (held, SOURCE_CONNS))
        # TLS's first deadline is the 10 s handshake one (preauth takes effect from there).
        wait_for(lambda: worker_fds(daemon) <= base + 4,
                 "descriptors back after the pre-auth deadline (base %d)" % base, timeout=30)
    finally:
        for s in socks:
            s.close()
        daemon.stop()


def drain_until(s, deadline):
    """Reads s (answers) until deadline; False once it is closed."""
    for _ in range(64):
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        s.settimeout(left)
        try:
            if s.recv(4096) == b"":
                return False
        except socket.timeout:
            return True
        except OSError:
            return False
    return True


def test_pingpong_closed(d):
    port = free_port()
    text = config(d, [("tcp", port, "TURN-TCP", ["t"])], {"t": ("TCP", ["127.0.0.1"])},
                  limits=LIMITS, relay=RELAY)
    daemon = Daemon(d, text).start()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        t0, closed = time.monotonic(), False
        for i in range(24):     # one every 0.5 s: 12 s in all
            try:
                s.sendall(cbind(i % 2))
            except OSError:
                closed = True
                break
            closed = not drain_until(s, t0 + 0.5 * (i + 1))
            if closed:
                break
        waited = time.monotonic() - t0
        check(closed, "connection bouncing between workers still open after %.1f s "
              "(preauth_timeout %d s)" % (waited, PREAUTH_S))
        s.close()
    finally:
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_tls_unauth_bind_stays, test_pingpong_closed])
