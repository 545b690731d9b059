"""TCP_NODELAY on every TCP connection of the relay (#37): the client side (TURN-TCP and
TURN-TLS connections), the peer side (RFC 6062 Connect sockets) and the project's client
library (`turngatectl probe`).

Without it a small write that follows another unacknowledged one waits for the other end's
delayed ACK (~40 ms on Linux): `turngatectl probe` over TCP and TLS took 40-45 ms per round
trip on loopback. Here the median of the probe's round-trip step over 10 runs, and of 20 raw
RFC 6062 round trips from a Python client that sets TCP_NODELAY on its own sockets (so only
the server's Nagle can delay them, each preceded by two back-to-back writes of ours), must be
under 20 ms: far above loopback's fraction of a millisecond, far below the 40 ms of Nagle
against delayed ACK. Every wait is bounded.
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (DATA, INDICATION, SECRET, TURNGATECTL, Daemon,  # noqa: E402
                           StreamClient, TcpPeer, check, peer_socket, run_tests, tls_connect)
from test_tcp_relay import start, tls_tcp_config  # noqa: E402

BOUND_MS = 20.0


def probe_rtt(uri, peer, *args):
    r = subprocess.run([TURNGATECTL, "probe", uri, "--secret", SECRET, "--timeout", "5000",
                        "--json", "--tcp-peer", "127.0.0.1:%d" % peer.port] + list(args),
                       capture_output=True, text=True, timeout=60)
    res = json.loads(r.stdout)
    check(r.returncode == 0 and res["ok"], "probe failed: %r %s" % (res, r.stderr))
    return [s["ms"] for s in res["steps"] if s["step"] == "round trip"][0]


def median_ok(what, times):
    med = statistics.median(times)
    print("%s: median %.2f ms of %d (max %.2f)" % (what, med, len(times), max(times)))
    check(med < BOUND_MS, "%s: median round trip %.1f ms >= %.0f ms (Nagle?): %r"
          % (what, med, BOUND_MS, [round(t, 1) for t in times]))


def test_probe_tcp_tls(d):
    """turngatectl probe over TURN-TCP and TURN-TLS (data connection over TLS): the round
    trip step's median over 10 runs each is under the bound."""
    text, tls_port, tcp_port = tls_tcp_config(d)
    peer = TcpPeer("127.0.0.1")
    daemon = Daemon(d, text).start()
    try:
        median_ok("probe tcp", [probe_rtt("turn:127.0.0.1:%d?transport=tcp" % tcp_port, peer)
                                for _ in range(10)])
        median_ok("probe tls", [probe_rtt("turns:127.0.0.1:%d" % tls_port, peer)
                                for _ in range(10)])
    finally:
        peer.close()
        daemon.stop()


def nodelay(sock):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


FIRSTS = 5     # fresh data connections whose first round trip is measured


def round_trip(dc, i):
    """One round trip on dc sent as two writes (ms)."""
    t0 = time.monotonic()
    dc.sock.sendall(b"a%03d" % i)
    dc.sock.sendall(b"b" * 60)
    got = dc.recv_exact(64)
    check(got == b"a%03d" % i + b"b" * 60, "echo %d: %r" % (i, got))
    return (time.monotonic() - t0) * 1000


def bound_call(port, peer):
    """Allocate TCP, Connect to peer, ConnectionBind: (control, data connection)."""
    ctl = StreamClient(port)
    nodelay(ctl.sock)
    ctl.allocate_tcp()
    cid = ctl.connect("127.0.0.1", peer.port)
    dc = StreamClient(port, creds=ctl.creds())
    nodelay(dc.sock)
    code = dc.connection_bind(cid)
    check(code is None, "ConnectionBind: %r" % (code,))
    return ctl, dc


def test_raw_rfc6062(d):
    """A Python RFC 6062 client (TCP_NODELAY on its side): Allocate TCP, Connect, then the
    first bytes right after the ConnectionBind answer (on FIRSTS fresh calls: one sample
    of a latency is a scheduler's, 90 ms once on a loaded machine) and 20 more round trips,
    each sent as two writes. The server's writes to the peer (Connect socket) and to the
    data connection must not wait for delayed ACKs."""
    peer = TcpPeer("127.0.0.1")
    daemon, port = start(d)
    try:
        firsts = []
        for k in range(FIRSTS):
            ctl, dc = bound_call(port, peer)
            firsts.append(round_trip(dc, 0))
            if k < FIRSTS - 1:
                dc.sock.close()
                ctl.sock.close()
        times = [round_trip(dc, i) for i in range(1, 21)]
        print("first relayed round trip after the ConnectionBind answer: median %.2f ms of "
              "%d (%s)" % (statistics.median(firsts), FIRSTS,
                           " ".join("%.2f" % t for t in firsts)))
        median_ok("raw rfc6062", times)
        check(statistics.median(firsts) < 2 * BOUND_MS,
              "first round trips %r ms" % [round(t, 1) for t in firsts])
        dc.sock.close()
        ctl.sock.close()
    finally:
        peer.close()
        daemon.stop()


def control_then_data(ctl, what):
    """20 times: a CreatePermission answered, then at once a datagram from the UDP peer: the
    time from the peer's send to the Data indication on ctl (the server's second write
    while its answer may not be acknowledged yet)."""
    peer = peer_socket()
    try:
        nodelay(ctl.sock)
        r = ctl.allocate()
        relayed = ctl.relayed(r)[0]
        times = []
        for i in range(20):
            r = ctl.perm("127.0.0.1", peer.getsockname()[1])
            check(r[1] != 0x110, "CreatePermission %d: %r" % (i, r))
            t0 = time.monotonic()
            peer.sendto(b"x%02d" % i, relayed)
            while True:
                p = ctl.read_msg(timeout=5.0)
                if p and p[0] == DATA and p[1] == INDICATION:
                    break
            times.append((time.monotonic() - t0) * 1000)
        median_ok(what, times)
    finally:
        peer.close()


def test_control_then_data(d):
    """The first relayed packet after each control answer, over TURN-TCP and TURN-TLS."""
    text, tls_port, tcp_port = tls_tcp_config(d)
    daemon = Daemon(d, text).start()
    try:
        ctl = StreamClient(tcp_port)
        control_then_data(ctl, "tcp: data after answer")
        ctl.sock.close()
        ctl = StreamClient(tcp_port, sock=tls_connect(tls_port))
        control_then_data(ctl, "tls: data after answer")
        ctl.sock.close()
    finally:
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_probe_tcp_tls, test_raw_rfc6062, test_control_then_data])
