#!/usr/bin/python3
"""Wake-up coalescing (limits.wake_coalesce_us, worker/wake.h) through the running daemon.

- With `wake_coalesce_rate: 1` any datagram traffic makes the worker try coalescing: ChannelData
  round trips through an echo peer engage it (the `wakes_coalesced` counter of the admin
  `stats` and turngate_worker_wakes_coalesced_total rise) and every datagram still comes back
  whole and in order, both ways.
- Off (the default, or `wake_coalesce_us: 0` after a live reload) the worker's timer slack
  (/proc/<pid>/timerslack_ns) is the master's, and the counter never moves under an open-loop
  load (several flows sending bursts without waiting for the echoes), the load that keeps it
  engaged while it is on.
Nothing here measures time: the round trips go on until the counter moves (bounded).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATED, Client, Daemon, Peer, check, config,  # noqa: E402
                           error_code, free_port, relay_range, run_tests, scrape,
                           wait_for)

CHANNEL = 0x4000
MAX_ROUNDS = 20000     # round trips before giving up on the counter
FLOWS, BURST = 8, 8    # the open-loop load: clients, datagrams each sends before reading
MAX_BURSTS = 2000      # bursts before giving up on the counter


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


def client(daemon, peer, channel=CHANNEL):
    c = Client(daemon.port)
    c.allocate()
    check(error_code(c.perm("127.0.0.1", peer.port)[3]) is None, "CreatePermission failed")
    check(error_code(c.bind("127.0.0.1", peer.port, channel)[3]) is None, "ChannelBind failed")
    return c


def open_loop(clients, n, tag, until=None):
    """n bursts: every client sends BURST datagrams without waiting, then reads its echoes
    (each checked, in order). Stops early once until() is true. Returns the bursts done."""
    for i in range(n):
        sent = []
        for k, c in enumerate(clients):
            for j in range(BURST):
                data = b"%s-%02d-%06d-%02d" % (tag, k, i, j) + bytes(100)
                c.channel_data(CHANNEL + k, data)
                sent.append(data)
        for k, c in enumerate(clients):
            for j in range(BURST):
                data = sent[k * BURST + j]
                back = c.recv_data(5.0)
                check(back == data, "burst %d flow %d datagram %d came back as %r"
                      % (i, k, j, back and back[:24]))
        if until is not None and i % 10 == 9 and until():
            return i + 1
    return n


def slack(pid):
    with open("/proc/%d/timerslack_ns" % pid) as f:
        return int(f.read())


def worker_pid(daemon):
    return daemon.admin({"cmd": "workers"})["workers"][0]["pid"]


def test_engages_and_relays_intact(d):
    daemon, _ = start(d, {"wake_coalesce_us": 200, "wake_coalesce_rate": 1})
    peer = Peer("127.0.0.1", mode="echo")
    try:
        c = client(daemon, peer)
        done = round_trips(c, MAX_ROUNDS, b"on", until=lambda: coalesced(daemon) > 0)
        n = coalesced(daemon)
        check(n > 0, "no coalesced wake-up after %d round trips" % done)
        m = scrape(daemon.mport)
        check(m.get('turngate_worker_wakes_coalesced_total{worker="0"}', 0) >= n,
              "turngate_worker_wakes_coalesced_total %r, stats %d" % (m, n))
        c.close()
    finally:
        peer.close()
        daemon.stop()


def test_reload_turns_it_off(d):
    """A fresh daemon (no back-off left from closed-loop traffic): an open-loop load keeps it
    engaged; after a live reload to 0 the timer slack is the master's and the same load no
    longer moves the counter."""
    daemon, text = start(d, {"wake_coalesce_us": 200, "wake_coalesce_rate": 1})
    peer = Peer("127.0.0.1", mode="echo")
    master = slack(daemon.proc.pid)
    try:
        wpid = worker_pid(daemon)
        check(slack(wpid) == 200 * 1000 // 8 + 1000, "worker timer slack %d with 200 us"
              % slack(wpid))
        flows = [client(daemon, peer, CHANNEL + k) for k in range(FLOWS)]
        done = open_loop(flows, MAX_BURSTS, b"load", until=lambda: coalesced(daemon) > 0)
        check(coalesced(daemon) > 0, "open-loop load: no coalesced wake-up in %d bursts" % done)
        daemon.reload(text.replace("wake_coalesce_us: 200", "wake_coalesce_us: 0"))
        wait_for(lambda: open_loop(flows, 1, b"reload") and slack(wpid) == master,
                 "the worker's timer slack back to the master's (%d)" % master)
        n = coalesced(daemon)
        open_loop(flows, 200, b"off")
        check(coalesced(daemon) == n, "wakes_coalesced moved with coalescing off: %d -> %d"
              % (n, coalesced(daemon)))
        check(worker_pid(daemon) == wpid, "the worker was replaced")
        for c in flows:
            c.close()
    finally:
        peer.close()
        daemon.stop()


def test_default_off(d):
    daemon, _ = start(d, None)
    peer = Peer("127.0.0.1", mode="echo")
    try:
        flows = [client(daemon, peer, CHANNEL + k) for k in range(FLOWS)]
        open_loop(flows, 200, b"default")
        check(coalesced(daemon) == 0, "wakes_coalesced %d with the default (off)"
              % coalesced(daemon))
        check(slack(worker_pid(daemon)) == slack(daemon.proc.pid),
              "worker timer slack %d, master's %d with the default (off)"
              % (slack(worker_pid(daemon)), slack(daemon.proc.pid)))
        for c in flows:
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
    run_tests([test_engages_and_relays_intact, test_reload_turns_it_off, test_default_off,
               test_bad_values_refused])
