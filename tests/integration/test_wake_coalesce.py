#!/usr/bin/python3
"""Wake-up coalescing (limits.wake_coalesce_us, worker/wake.h) through the running daemon.

- With `wake_coalesce_rate: 1` any datagram traffic makes the worker try coalescing: ChannelData
  round trips through an echo peer engage it (the `wakes_coalesced` counter of the admin
  `stats` and turngate_worker_wakes_coalesced_total rise) and every datagram still comes back
  whole and in order, both ways.
- Off (the default, or `wake_coalesce_us: 0` after a live reload) the counter never moves
  under the same traffic.
Nothing here measures time: the round trips go on until the counter moves (bounded).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATED, Client, Daemon, Peer, check, config,  # noqa: E402
                           error_code, free_port, relay_range, run_tests, scrape)

CHANNEL = 0x4000
MAX_ROUNDS = 20000     # round trips before giving up on the counter


def start(d, limits):
    port, mport = free_port(), free_port()
    text = config(d, [("udp", port, "TURN-UDP", ["lo"])], {"lo": ["127.0.0.1"]},
                  limits=limits, workers=1, relay=relay_range())
    text = text.replace("admin:\n", "admin:\n  metrics_endpoint: \"http://127.0.0.1:%d/metrics\"\n"
                        % mport, 1)
    daemon = Daemon(d, text, workers=1).start()
    daemon.mport, daemon.port = mport, port
    return daemon, text


def coalesced(daemon):
    return daemon.admin({"cmd": "stats"})["counters"].get("wakes_coalesced", 0)


def round_trips(c, n, tag, until=None):
    """n ChannelData round trips through the echo peer (each payload checked); stops early
    once until() is true. Returns the number done."""
    for i in range(n):
        data = b"%s-%06d" % (tag, i) + bytes(100)
        c.channel_data(CHANNEL, data)
        back = c.recv_data(5.0)
        check(back == data, "round trip %d came back as %r" % (i, back and back[:16]))
        if until is not None and i % 50 == 49 and until():
            return i + 1
    return n


def client(daemon, peer):
    c = Client(daemon.port)
    c.allocate()
    check(error_code(c.perm("127.0.0.1", peer.port)[3]) is None, "CreatePermission failed")
    check(error_code(c.bind("127.0.0.1", peer.port, CHANNEL)[3]) is None, "ChannelBind failed")
    return c


def test_engages_and_relays_intact(d):
    daemon, text = start(d, {"wake_coalesce_us": 200, "wake_coalesce_rate": 1})
    peer = Peer("127.0.0.1", mode="echo")
    try:
        c = client(daemon, peer)
        done = round_trips(c, MAX_ROUNDS, b"on", until=lambda: coalesced(daemon) > 0)
        n = coalesced(daemon)
        check(n > 0, "no coalesced wake-up after %d round trips" % done)
        m = scrape(daemon.mport)
        check(m.get("turngate_worker_wakes_coalesced_total", 0) >= n,
              "turngate_worker_wakes_coalesced_total %r, stats %d"
              % (m.get("turngate_worker_wakes_coalesced_total"), n))
        # Switched off by a live reload: the counter stays where it is.
        daemon.reload(text.replace("wake_coalesce_us: 200", "wake_coalesce_us: 0"))
        round_trips(c, 20, b"reload")    # the reload is applied at the next iteration
        n = coalesced(daemon)
        round_trips(c, 500, b"off")
        check(coalesced(daemon) == n, "wakes_coalesced moved with coalescing off: %d -> %d"
              % (n, coalesced(daemon)))
        c.close()
    finally:
        peer.close()
        daemon.stop()


def test_default_off(d):
    daemon, _ = start(d, None)
    peer = Peer("127.0.0.1", mode="echo")
    try:
        c = client(daemon, peer)
        round_trips(c, 1000, b"default")
        check(coalesced(daemon) == 0, "wakes_coalesced %d with the default (off)"
              % coalesced(daemon))
        c.close()
    finally:
        peer.close()
        daemon.stop()


def test_bad_values_refused(d):
    """Out of range: the config is refused, the error names the key."""
    for limits in ({"wake_coalesce_us": 1001}, {"wake_coalesce_rate": 0}):
        path = os.path.join(d, "bad.yaml")
        with open(path, "w") as f:
            f.write(config(d, [("udp", free_port(), "TURN-UDP", ["lo"])],
                           {"lo": ["127.0.0.1"]}, limits=limits, workers=1))
        r = subprocess.run([TURNGATED, "-t", "-c", path],
                           capture_output=True, text=True, timeout=30)
        key = list(limits)[0]
        check(r.returncode != 0 and key in r.stderr + r.stdout,
              "%s accepted or not named: rc %d %s" % (limits, r.returncode, r.stderr))


if __name__ == "__main__":
    run_tests([test_engages_and_relays_intact, test_default_off, test_bad_values_refused])
