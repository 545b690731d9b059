#!/usr/bin/env python3
"""Scale (issue 42), reduced for make check: 20,000 UDP allocations against the default
table capacity.

The config writes down no limits: the table's capacity is the default (auto: the relay
port space). Two listeners on two relay addresses (127.0.10.1 and .2) with a relay range
of the default range's size (16,384 ports), moved below the kernel's ephemeral range
(8000-24383) so that no other program's socket takes one of the ports while the daemon
is down for the restart below. 2 workers.

- 20,000 clients (8 sockets, 2,500 loopback source addresses, 500 users) allocate: every
  Allocate succeeds (no 508 while ports are free; with the former fixed capacity of
  10,000 the 10,001st got 508), each with its own relay port.
- a sample of 200 relays: CreatePermission to a UDP echo, a Send indication comes back as
  a Data indication.
- /metrics: the scrape takes under a generous bound (2 s; the figure is printed), and the
  number of series is the same with 200 allocations of 200 users as with 20,000 of 500
  (no series per allocation or user).
- the listing pages: at most 5,000 entries a reply, a cursor walk returns each allocation
  once, and turngatectl allocations pages by itself (--page, --limit, --cursor).
- top ranks in the daemon: a ranked sample of 5 rows is a few KB with 20,000 allocations
  held, and the 5 allocations that relayed since the previous sample rank first.
- the whole daemon killed -9 (master and workers) and started again: the start takes
  all 20,000 over (status, taken_over), and the sample relays again.
"""
import json
import os
import random
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import Daemon, check, echo_peer, free_port, run_tests, wait_for  # noqa: E402
import scale_clients  # noqa: E402
import harness_admin as ts  # noqa: E402

N = 20000
SAMPLE = 200
RELAYS = ("127.0.10.1", "127.0.10.2")
RELAY_MIN, RELAY_MAX = 8000, 8000 + 16384 - 1
SCRAPE_BOUND_S = 2.0


def config(d, ports, mport):
    text = ("version: v1\nadmin:\n  name: scale\n  loglevel: all:INFO\n  workers: 2\n"
            "  admin_socket: %s/admin.sock\n  drain_timeout: 1\n  healthcheck_endpoint: \"\"\n"
            "  metrics_endpoint: \"http://127.0.0.1:%d/metrics\"\n"
            "  relay_port_min: %d\n  relay_port_max: %d\n"
            "auth:\n  type: ephemeral\n  realm: %s\n  credentials:\n    secret: %s\n"
            "listeners:\n" % (d, mport, RELAY_MIN, RELAY_MAX, ts.REALM, ts.SECRET))
    for k, (ip, port) in enumerate(zip(RELAYS, ports)):
        text += ("  - name: udp%d\n    protocol: TURN-UDP\n    address: %s\n    port: %d\n"
                 "    routes: [loopback]\n" % (k, ip, port))
    text += "clusters:\n  - name: loopback\n    type: STATIC\n    endpoints: [127.0.0.0/8]\n"
    return text


def scrape(mport):
    t0 = time.monotonic()
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=30) as r:
        body = r.read().decode()
    return time.monotonic() - t0, body


def series(body):
    return sorted(line.rsplit(" ", 1)[0] for line in body.splitlines()
                  if line and not line.startswith("#"))


def check_paging(daemon, fleet):
    """The listing pages: a limit above the page size gets one page (5,000) and a cursor;
    walking the cursors returns every allocation once; turngatectl pages by itself."""
    r = daemon.admin({"cmd": "allocations", "limit": 100000})
    check(len(r["allocations"]) == 5000 and isinstance(r["next_cursor"], int) and
          r["truncated"], "limit 100000: %d entries, next_cursor %r"
          % (len(r["allocations"]), r.get("next_cursor")))
    seen, cursor, pages, slowest, by_client = [], 0, 0, 0.0, {}
    while cursor is not None and pages < 100:
        t0 = time.monotonic()
        r = daemon.admin({"cmd": "allocations", "limit": 3000, "cursor": cursor})
        slowest = max(slowest, time.monotonic() - t0)
        check(len(r["allocations"]) <= 3000, "page of %d" % len(r["allocations"]))
        seen += [a["id"] for a in r["allocations"]]
        by_client.update((a["client"], a["id"]) for a in r["allocations"])
        cursor, pages = r["next_cursor"], pages + 1
    check(cursor is None and len(seen) == N and len(set(seen)) == N,
          "cursor walk: %d entries (%d distinct) in %d pages, last cursor %r"
          % (len(seen), len(set(seen)), pages, cursor))
    relays = {tuple(a["relay"].rsplit(":", 1)) for a in
              daemon.admin({"cmd": "allocations", "limit": 10, "cursor": 0})["allocations"]}
    check(relays <= {(ip, str(p)) for ip, p in (fleet.relayed[i] for i in range(N))},
          "listed relays %r unknown" % relays)
    rc, out, err = daemon.ctl("allocations", "--limit", "25000", "--page", "4000")
    rows = [line.split()[0] for line in out.splitlines()[1:]]
    check(rc == 0 and out.startswith("ID ") and sorted(map(int, rows)) == sorted(seen),
          "turngatectl allocations --page 4000: rc %d, %d rows for %d: %s"
          % (rc, len(rows), N, err))
    rc, out, _ = daemon.ctl("allocations", "--limit", "7", "--page", "3")
    lines = out.splitlines()
    check(rc == 0 and len(lines) == 9 and lines[-1].startswith("(stopped at --limit 7: "
                                                               "--cursor "),
          "turngatectl allocations --limit 7 --page 3:\n%s" % out)
    after = int(lines[-1].split("--cursor ")[1].split()[0])
    rc, out2, _ = daemon.ctl("allocations", "--limit", "1", "--cursor", str(after))
    check(rc == 0 and int(out2.splitlines()[1].split()[0]) >= after and
          int(out2.splitlines()[1].split()[0]) not in [int(x.split()[0]) for x in lines[1:8]],
          "--cursor %d went on with:\n%s" % (after, out2))
    print("listing: %d pages of 3,000, slowest %.1f ms" % (pages, slowest * 1000))
    return by_client


def check_top(daemon, fleet, peer, by_client, sample):
    """top ranks in the daemon: a reply of `rows` rows whatever the table's size; the
    allocations that relayed between two samples rank first; turngatectl top prints."""
    busy = sample[:5]
    ids = {by_client["%s:%d" % (fleet.src[i], fleet.socks[i % len(fleet.socks)]
                                .getsockname()[1])] for i in busy}
    daemon.admin({"cmd": "top", "rows": 5})
    check(len(fleet.probe(busy, peer)) == len(busy), "the busy allocations relay")
    t0 = time.monotonic()
    raw = daemon.admin_raw(b'{"cmd":"top","rows":5}\n')
    took = time.monotonic() - t0
    r = json.loads(raw)
    top = {a["id"] for a in r["allocations"]}
    check(r["live"] == N and r["users_live"] == 500 and len(r["allocations"]) == 5 and
          len(r["users"]) == 5 and top == ids and
          all(a["bps"] > 0 and a["to_peer_pps"] > 0 for a in r["allocations"]),
          "ranked top: live %r, users %r, top %r (busy %r)\n%r"
          % (r["live"], r["users_live"], top, ids, r["allocations"]))
    check(len(raw) < 20000, "a ranked top of 5 rows is %d bytes with %d allocations"
          % (len(raw), N))
    rc, out, err = daemon.ctl("top", "--once", "--interval", "0.1", "--rows", "3")
    check(rc == 0 and out.startswith("turngate top: %d allocations, 500 users" % N),
          "turngatectl top --once: rc %d\n%s%s" % (rc, out, err))
    print("top: a ranked sample of 20,000 in %.1f ms, %d bytes" % (took * 1000, len(raw)))


def allocate_all(fleet, todo, what):
    lost = fleet.allocate(todo)
    codes = {}
    for i in todo:
        if fleet.relayed[i] is None:
            c = fleet.errors.get(i)
            codes[c] = codes.get(c, 0) + 1
    check(not lost and not codes,
          "%s: %d of %d allocations failed (error codes %r, %d without an answer)"
          % (what, sum(codes.values()) + len(lost), len(todo), codes, len(lost)))


def test_scale(d):
    # The restart after the kill binds them again, seconds later (20,000 allocations taken
    # over): below the kernel's port-0 range, where no socket bound to port 0 meanwhile
    # (a test beside this one) can hold one.
    ports = [free_port(late=True) for _ in RELAYS]
    mport = free_port(late=True)
    cports = [0] * 8       # the kernel's choice: free on every address (the relays are below)
    peer = ("127.0.0.1", echo_peer())
    daemon = Daemon(d, config(d, ports, mport)).start()
    fleet = None
    try:
        fleet = scale_clients.Fleet(N, cports, list(zip(RELAYS, ports)), users=500)
        table = daemon.admin({"cmd": "status"})["table"]
        check(table["capacity"] >= N and table["source"] == "auto",
              "default table capacity %r below %d" % (table, N))
        print("table: %r" % table)

        allocate_all(fleet, list(range(SAMPLE)), "first 200")
        _, body = scrape(mport)
        few = series(body)

        t0 = time.monotonic()
        allocate_all(fleet, list(range(SAMPLE, N)), "20,000 from the default config")
        took = time.monotonic() - t0
        relays = {fleet.relayed[i] for i in range(N)}
        check(len(relays) == N, "%d distinct relayed addresses for %d allocations"
              % (len(relays), N))
        st = daemon.admin({"cmd": "status"})
        check(st["allocations"] == N, "status says %r allocations" % st["allocations"])
        print("%d allocations in %.1f s (%.0f/s), %d messages sent"
              % (N - SAMPLE, took, (N - SAMPLE) / took, fleet.sent))

        sample = random.Random(42).sample(range(N), SAMPLE)
        check(not fleet.permit(sample, peer) and not any(i in fleet.errors for i in sample),
              "CreatePermission failed: %r" % {i: fleet.errors[i] for i in sample
                                              if i in fleet.errors})
        got = fleet.probe(sample, peer)
        check(len(got) == SAMPLE, "%d of %d sampled allocations relayed" % (len(got), SAMPLE))

        took, body = scrape(mport)
        many = series(body)
        print("/metrics with %d allocations: %.1f ms, %d bytes, %d series"
              % (N, took * 1000, len(body), len(many)))
        check(took < SCRAPE_BOUND_S, "/metrics took %.2f s with %d allocations" % (took, N))
        check(many == few, "the series differ with 200 and 20,000 allocations: %r"
              % sorted(set(many) ^ set(few))[:20])

        by_client = check_paging(daemon, fleet)
        check_top(daemon, fleet, peer, by_client, sample)

        daemon.kill_all()
        t0 = time.monotonic()
        daemon = Daemon(d, open(daemon.conf).read()).start()
        st = daemon.admin({"cmd": "status"})
        print("restart: serving %.2f s after the kill" % (time.monotonic() - t0))
        check(st["state"]["taken_over"] == N, "after the restart: %d taken over of %d"
              % (st["state"]["taken_over"], N))
        # The count is the allocation counts' total. Once, on a loaded machine, the first
        # status after the start read 17,434 (not reproduced in 8 runs since, cause not
        # established): the count is waited for, and a lost allocation still fails here
        # with the workers' adoption lines.
        last = []
        try:
            wait_for(lambda: last.append(daemon.admin({"cmd": "status"})["allocations"]) or
                     last[-1] == N, "all 20,000 counted after the restart", timeout=10)
        except Exception:
            adopted = [x[x.index("slot"):] for x in daemon.stderr().splitlines()
                       if "predecessor's allocations" in x or "cannot rebind" in x][-6:]
            raise AssertionError("after the restart %r allocations of %d\n%s"
                                 % (last[-3:], N, "\n".join(adopted)))
        got = fleet.probe(sample, peer)
        print("restart: the sample relays %.2f s after the kill" % (time.monotonic() - t0))
        check(len(got) == SAMPLE, "after the restart %d of %d sampled allocations relayed"
              % (len(got), SAMPLE))
        wait_for(lambda: daemon.admin({"cmd": "status"})["allocations"] == N,
                 "20,000 allocations after the restart")
    finally:
        if fleet is not None:
            fleet.close()
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_scale])
