"""Bandwidth limits that hold across workers (#23), against the real daemon with 2 workers.

limits.allocation_bps, limits.user_bps and listeners[].max_bps are token buckets in the
shared segment (shm/shm_bw.h): what counts is the relayed payload, each direction on its
own. Each test offers ChannelData at a known rate (paced by the sender) and measures what
arrives at the peer over a window of seconds:
- an allocation sending 3x its allocation_bps arrives at the limit (+-10 % over 5 s) while
  another allocation of the same user, below the limits, loses nothing; then two
  allocations of one user on the two workers, each sending 3x, arrive together at user_bps
  (the user's bucket is shared by the workers);
- a tenant's cap (listeners[].max_bps) does not slow another tenant;
- reloads lower, raise and remove a limit under traffic, on the same allocation;
- `turngatectl top --once --json` lists the heaviest allocation first, throttled by
  "allocation";
- the counts are exact: every datagram the peer did not get was dropped and counted, once
  per allocation (`top`), per listener (turngate_listener_bandwidth_drops_total) and in
  turngate_quota_rejections_total{kind="bandwidth"}.
Rates are measured, so the sender offers 3x a limit (a slow machine still offers more than
the limit) and the bounds are the bucket's own (rate x time + burst), with 10 % around them.
"""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Client, Daemon, Peer, check, config, error_code,  # noqa: E402
                           free_port, relay_range, run_tests, scrape, wait_for)
from test_quota import allocs, as_user, by_worker, user_creds  # noqa: E402

PAYLOAD = 500                   # bytes of relayed payload per datagram
BURST_MS = 100
CHANNEL = 0x4000
DROPS = 'turngate_quota_rejections_total{kind="bandwidth"}'


def start(d, limits, listeners=None):
    """Daemon with the given limits (burst BURST_MS) and a metrics endpoint; returns
    (daemon, ports {listener: port}, metrics port)."""
    names = listeners or {"udp": None}
    ports = {n: free_port() for n in names}
    mport = free_port()
    limits = dict(limits, bandwidth_burst_ms=BURST_MS)
    text = config(d, [(n, ports[n], "TURN-UDP", ["loopback"]) for n in names],
                  {"loopback": ["127.0.0.1"]}, limits=limits, relay=relay_range())
    for n, bps in names.items():
        if bps is not None:
            old = "    port: %d\n    routes: [loopback]\n" % ports[n]
            check(old in text, "config edit")
            text = text.replace(old, old + "    max_bps: %d\n" % bps, 1)
    text = text.replace("admin:\n", 'admin:\n  metrics_endpoint: "http://127.0.0.1:%d/metrics"\n'
                        % mport, 1)
    return Daemon(d, text).start(), ports, mport


def bound(c, peer):
    """c allocated, with CHANNEL bound to peer."""
    c.allocate()
    r = c.bind("127.0.0.1", peer.port, CHANNEL)
    check(error_code(r[3]) is None, "ChannelBind refused: %r" % (error_code(r[3]),))


class Sender:
    """Sends PAYLOAD-byte ChannelData at pps datagrams per second for secs, on a thread."""

    def __init__(self, c, pps, secs):
        self.c, self.pps, self.secs, self.sent = c, pps, secs, 0
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        payload = os.urandom(PAYLOAD)
        t0 = time.monotonic()
        n = int(self.pps * self.secs)
        for i in range(n):
            delay = t0 + i / self.pps - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.c.channel_data(CHANNEL, payload)
            self.sent += 1

    def start(self):
        self.t.start()
        return self

    def join(self):
        self.t.join()
        return self.sent


def pps_for(bps, factor=3):
    """Datagrams per second that offer factor x bps of payload."""
    return factor * bps / 8.0 / PAYLOAD


def within(got, bps, secs, what, tol=0.10):
    """got bytes in secs at a limit of bps: rate x time + the burst, +-tol."""
    want = bps / 8.0 * secs + bps / 8.0 * BURST_MS / 1000.0
    check(abs(got - want) <= tol * want,
          "%s: %d bytes in %.1f s, expected %d +-%d %% (limit %d bit/s)"
          % (what, got, secs, want, tol * 100, bps))


def settled(fn, what):
    """fn() once it returns the same value twice 0.3 s apart (a worker counts a drop right
    after the datagram it dropped; the test reads after the traffic ended)."""
    last = [None]

    def same():
        time.sleep(0.3)
        v = fn()
        ok = v == last[0]
        last[0] = v
        return ok
    wait_for(same, what)
    return last[0]


def alloc_of(daemon, c):
    a = c.record(daemon)
    check(a is not None, "no allocation of %r" % (c.sock.getsockname(),))
    return a


def top_entry(daemon, aid):
    for a in daemon.admin({"cmd": "top"})["allocations"]:
        if a["id"] == aid:
            return a
    raise AssertionError("allocation %d not in top" % aid)


def test_allocation_and_user(d):
    alloc_bps, user_bps = 400000, 600000
    daemon, ports, mport = start(d, {"allocation_bps": alloc_bps, "user_bps": user_bps})
    peers = []
    try:
        w0, w1 = by_worker(daemon, ports["udp"], want=1)
        a, b = w0[0], w1[0]
        u = user_creds("bwuser")
        as_user(a, u)
        as_user(b, u)
        pa, pb = Peer(mode="count"), Peer(mode="count")
        peers += [pa, pb]
        bound(a, pa)
        bound(b, pb)
        ida, idb = alloc_of(daemon, a)["id"], alloc_of(daemon, b)["id"]
        check(alloc_of(daemon, a)["worker"] != alloc_of(daemon, b)["worker"], "same worker")

        # A offers 3x allocation_bps for 5 s, B a tenth of it (below every limit); top
        # sees A first, throttled by its allocation limit, B unthrottled.
        t0 = time.monotonic()
        sa = Sender(a, pps_for(alloc_bps), 5).start()
        sb = Sender(b, pps_for(alloc_bps, 0.1), 5).start()
        time.sleep(1.5)
        rc, jout, err = daemon.ctl("top", "--once", "--json")
        check(rc == 0, "top failed: %s" % err)
        rc, out, err = daemon.ctl("top", "--once", "--interval", "0.5")
        lines = out.splitlines()
        check(rc == 0 and lines[0].startswith("turngate top: 2 allocations, 1 users") and
              lines[2].split()[:2] == ["ID", "USER"] and lines[3].split()[0] == str(ida) and
              lines[3].split()[-1] == "allocation", "top, human: %r %r" % (out, err))
        sent_a, sent_b = sa.join(), sb.join()
        t1 = time.monotonic()
        top = json.loads(jout)
        rows = top["allocations"]
        check(len(rows) == 2 and rows[0]["id"] == ida and rows[1]["id"] == idb,
              "top order: %r" % ([(r["id"], r["bps"]) for r in rows],))
        check(rows[0]["throttled"] == "allocation" and rows[1]["throttled"] is None,
              "top throttled: %r" % (rows,))
        check(0.5 * alloc_bps <= rows[0]["to_peer_bps"] <= 1.5 * alloc_bps,
              "top rate of A: %r" % rows[0]["to_peer_bps"])
        check(rows[0]["channels"] == 1 and rows[0]["permissions"] == 1, "top counts")
        check(top["users"][0]["user"] == "bwuser" and top["users"][0]["allocations"] == 2,
              "top users: %r" % top["users"])
        time.sleep(0.5)
        got_a = pa.bytes_between(t0, t1 + 1)
        within(got_a, alloc_bps, 5, "allocation limit")
        check(pb.total() == sent_b * PAYLOAD, "B lost %d of %d datagrams"
              % (sent_b - pb.total() // PAYLOAD, sent_b))
        # Exact: what A's peer did not get was dropped and counted once.
        lost_a = sent_a - got_a // PAYLOAD
        check(lost_a > sent_a // 2, "too few drops: %d of %d" % (lost_a, sent_a))
        e = settled(lambda: top_entry(daemon, ida)["dropped"], "A's drop count")
        check(e == [lost_a, 0], "A's drops %r, peer missed %d" % (e, lost_a))
        check(top_entry(daemon, idb)["dropped"] == [0, 0], "B dropped")

        # Both offer 3x allocation_bps from the two workers: together they arrive at
        # user_bps (one shared bucket), each at most at allocation_bps.
        ta, tb = pa.total(), pb.total()
        t0 = time.monotonic()
        sa = Sender(a, pps_for(alloc_bps), 5).start()
        sb = Sender(b, pps_for(alloc_bps), 5).start()
        sent2 = sa.join() + sb.join()
        time.sleep(0.5)
        ga, gb = pa.total() - ta, pb.total() - tb
        within(ga + gb, user_bps, 5, "user limit over two workers")
        check(max(ga, gb) <= 1.1 * (alloc_bps / 8.0 * 5.1), "one allocation over its limit")
        lost = sent_a + sent2 + sent_b - (pa.total() + pb.total()) // PAYLOAD
        m = settled(lambda: scrape(mport).get(DROPS), "drop counter")
        check(m == lost, "%s = %r, peers missed %d" % (DROPS, m, lost))
        lm = scrape(mport).get('turngate_listener_bandwidth_drops_total{name="udp"}')
        check(lm == lost, "listener drops %r, peers missed %d" % (lm, lost))
        check(time.monotonic() - t0 < 30, "took too long")
    finally:
        for p in peers:
            p.close()
        daemon.stop()


def test_tenant_cap(d):
    cap = 400000
    daemon, ports, mport = start(d, {}, {"capped": cap, "free": None})
    peers = []
    try:
        c1, c2 = Client(ports["capped"]), Client(ports["free"])
        p1, p2 = Peer(mode="count"), Peer(mode="count")
        peers += [p1, p2]
        bound(c1, p1)
        bound(c2, p2)
        t0 = time.monotonic()
        s1 = Sender(c1, pps_for(cap), 5).start()
        s2 = Sender(c2, pps_for(cap), 5).start()
        n1, n2 = s1.join(), s2.join()
        time.sleep(0.5)
        within(p1.bytes_between(t0, time.monotonic()), cap, 5, "tenant cap")
        check(p2.total() == n2 * PAYLOAD, "the other tenant lost %d datagrams"
              % (n2 - p2.total() // PAYLOAD))
        lost = n1 - p1.total() // PAYLOAD
        # The turngate series, not process_*: under ASan the master's RSS grows at each
        # scrape (its quarantine), so the whole scrape never reads the same twice.
        got = settled(lambda: {k: v for k, v in scrape(mport).items()
                               if k.startswith("turngate_")}, "metrics")
        check(got.get('turngate_listener_bandwidth_drops_total{name="capped"}') == lost and
              got.get('turngate_listener_bandwidth_drops_total{name="free"}') == 0 and
              got.get(DROPS) == lost, "drop counters: %r, lost %d"
              % ({k: v for k, v in got.items() if "drops" in k or "rejections" in k}, lost))
    finally:
        for p in peers:
            p.close()
        daemon.stop()


def test_reload_under_traffic(d):
    daemon, ports, mport = start(d, {"allocation_bps": 800000})
    peers = []
    try:
        c = Client(ports["udp"])
        p = Peer(mode="count")
        peers.append(p)
        bound(c, p)
        aid = alloc_of(daemon, c)["id"]
        offered = 1200000
        with open(daemon.conf) as f:
            text = f.read()
        check("allocation_bps: 800000" in text, "config text")
        s = Sender(c, pps_for(offered, 1), 13).start()
        marks = [time.monotonic()]
        time.sleep(4)
        daemon.reload(text.replace("allocation_bps: 800000", "allocation_bps: 400000"))
        marks.append(time.monotonic())
        time.sleep(4)
        daemon.reload(text.replace("allocation_bps: 800000", "allocation_bps: 0"))
        marks.append(time.monotonic())
        sent = s.join()
        time.sleep(0.5)
        # The middle 3 s of each window (clear of the reloads and of the start).
        for (t, bps) in zip(marks, (800000, 400000, offered)):
            got = p.bytes_between(t + 0.5, t + 3.5)
            want = bps / 8.0 * 3
            check(abs(got - want) <= 0.15 * want, "%d bit/s window: %d bytes, expected %d"
                  % (bps, got, want))
        check([a["id"] for a in allocs(daemon)] == [aid], "the allocation did not stay")
        lost = sent - p.total() // PAYLOAD
        check(lost > 0, "nothing was dropped")
        check(settled(lambda: scrape(mport).get(DROPS), "drops") == lost, "drops not exact")
    finally:
        for p in peers:
            p.close()
        daemon.stop()


if __name__ == "__main__":
    sys.exit(run_tests([test_allocation_and_user, test_tenant_cap, test_reload_under_traffic]))
