"""turngatectl probe --tcp-peer (RFC 6062 through the project's client library, #24) against
the real daemon: Allocate TCP, Connect, ConnectionBind on a data connection and a round trip
through an echoing TCP peer, over a TURN-TCP control connection (1 and 2 workers) and
over TURN-TLS (data connection over TURN-TLS, or on the TURN-TCP listener with --data-port); a peer outside the
routes fails the tcp-connect step with 403, exit status 1, and no SYN reaches it. Relay
ports from relay_range() (the shared windows of test_tcp_relay.py). Every wait is bounded.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (SECRET, TURNGATECTL, Daemon, TcpPeer, check, run_tests,  # noqa: E402
                           wait_for)
from test_tcp_relay import start, tls_tcp_config  # noqa: E402

STEPS = ["connect", "allocate", "tcp-connect", "connection-bind", "round trip", "delete"]


def probe(uri, *args):
    r = subprocess.run([TURNGATECTL, "probe", uri, "--secret", SECRET, "--timeout", "5000"]
                       + list(args), capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def probe_json(uri, *args):
    rc, out, err = probe(uri, "--json", *args)
    check(out.strip(), "no JSON (rc %d): %s" % (rc, err))
    return rc, json.loads(out)


def check_echo(uri, peer, *args):
    rc, res = probe_json(uri, "--tcp-peer", "127.0.0.1:%d" % peer.port, *args)
    steps = res["steps"]
    check(rc == 0 and res["ok"] is True, "probe failed (rc %d): %r" % (rc, steps))
    check([s["step"] for s in steps] == STEPS, "steps: %r" % (steps,))
    check(all(s["ok"] for s in steps), "a failed step: %r" % (steps,))
    check(steps[2]["detail"].startswith("127.0.0.1:%d connection-id 0x" % peer.port),
          "tcp-connect detail: %r" % (steps[2]["detail"],))
    return steps


def test_echo(d, workers=1, runs=1):
    """Every step ok, the peer accepted exactly one connection per run from the relayed
    address the allocate step reported (RFC 6062 5.2), and the text output names the steps."""
    peer = TcpPeer("127.0.0.1")
    daemon, port = start(d, workers=workers)
    uri = "turn:127.0.0.1:%d?transport=tcp" % port
    try:
        for k in range(runs):
            steps = check_echo(uri, peer)
            relayed = steps[1]["detail"]
            check(relayed.endswith(" tcp"), "allocate detail: %r" % (relayed,))
            wait_for(lambda: len(peer.sources) == k + 1, "the peer's accept", timeout=10)
            check("%s:%d" % peer.sources[k] == relayed[:-4],
                  "peer saw %r, relayed %r" % (peer.sources[k], relayed))
        rc, out, err = probe(uri, "--tcp-peer", "127.0.0.1:%d" % peer.port)
        lines = out.splitlines()
        check(rc == 0 and [ln.split()[0] for ln in lines] ==
              ["connect", "allocate", "tcp-connect", "connection-bind", "round", "delete"],
              "text output (rc %d): %r %s" % (rc, out, err))
        check(all(" ok " in ln for ln in lines), "text output: %r" % (out,))
        check("data connection tcp 127.0.0.1:%d" % port in lines[3], lines[3])
    finally:
        peer.close()
        daemon.stop()


def test_echo_2_workers(d):
    """With 2 workers each of 6 probes succeeds whichever worker the data connection
    reaches. The kernel's SO_REUSEPORT hash sends about half of them to the worker that
    does not own the allocation (handed over through the master), so the handover is
    almost surely among them; the test cannot see which (test_tcp_relay.py checks it)."""
    test_echo(d, workers=2, runs=6)


def test_refused_peer(d):
    """127.0.0.2 is outside the routes: tcp-connect fails with 403, the allocation is
    still deleted, exit status 1, and the listener there accepts nothing."""
    refused = TcpPeer("127.0.0.2")
    daemon, port = start(d)
    uri = "turn:127.0.0.1:%d?transport=tcp" % port
    try:
        rc, res = probe_json(uri, "--tcp-peer", "127.0.0.2:%d" % refused.port)
        steps = res["steps"]
        check(rc == 1 and res["ok"] is False, "rc %d: %r" % (rc, res))
        check([s["step"] for s in steps] == ["connect", "allocate", "tcp-connect", "delete"],
              "steps: %r" % (steps,))
        check(not steps[2]["ok"] and steps[2]["detail"].startswith("403 "),
              "tcp-connect: %r" % (steps[2],))
        check(steps[3]["ok"], "delete: %r" % (steps[3],))
        rc, out, _ = probe(uri, "--tcp-peer", "127.0.0.2:%d" % refused.port)
        line = [ln for ln in out.splitlines() if ln.startswith("tcp-connect")]
        check(rc == 1 and len(line) == 1 and " FAIL " in line[0] and "403 Forbidden" in line[0],
              "text output (rc %d): %r" % (rc, out))
        check(not refused.sources, "the refused peer accepted %r" % (refused.sources,))
    finally:
        refused.close()
        daemon.stop()


def test_tls_control(d):
    """turns: control connection: the data connection over TURN-TLS to the same address by
    default, on the TURN-TCP listener with --data-port."""
    text, tls_port, tcp_port = tls_tcp_config(d)
    peer = TcpPeer("127.0.0.1")
    daemon = Daemon(d, text).start()
    uri = "turns:127.0.0.1:%d" % tls_port
    try:
        steps = check_echo(uri, peer, "--data-port", str(tcp_port))
        check(steps[0]["detail"].startswith("tls TLSv1."), "connect: %r" % (steps[0],))
        check(steps[3]["detail"] == "data connection tcp 127.0.0.1:%d" % tcp_port,
              "connection-bind: %r" % (steps[3],))
        steps = check_echo(uri, peer)
        check(steps[3]["detail"] == "data connection tls 127.0.0.1:%d" % tls_port,
              "connection-bind: %r" % (steps[3],))
    finally:
        peer.close()
        daemon.stop()


def test_usage(d):
    """--tcp-peer needs a TCP or TLS control connection and excludes --peer (exit 2)."""
    for args in (["turn:127.0.0.1:3478", "--tcp-peer", "127.0.0.1:7"],
                 ["turns:127.0.0.1?transport=udp", "--tcp-peer", "127.0.0.1:7",
                  "--data-port", "3478"],
                 ["turn:127.0.0.1?transport=tcp", "--tcp-peer", "127.0.0.1:7", "--peer",
                  "127.0.0.1:7"],
                 ["turn:127.0.0.1?transport=tcp", "--tcp-peer", "localhost"],
                 ["turn:127.0.0.1?transport=tcp", "--data-port", "3478"]):
        rc, out, err = probe(*args)
        check(rc == 2 and err.startswith("turngatectl probe: ") and not out,
              "%r: rc %d %r %r" % (args, rc, out, err))


if __name__ == "__main__":
    run_tests([test_echo, test_echo_2_workers, test_refused_peer, test_tls_control,
               test_usage])
