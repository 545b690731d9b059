#!/usr/bin/env python3
"""One relay port pool shared by the workers (issue #37, worker/portpool.c, shm/ppool.c).

Through the running daemon, 2 workers, a relay range of 8 ports:
- 8 Allocates from 5-tuples the kernel spreads 6 on one worker and 2 on the other (chosen
  with the allocations listing) all succeed and get 8 distinct ports; the 9th is 508;
  freeing one makes room for one more. (Fixed per-worker slices of 4 ports answered 508
  to the 5th on one worker while ports were free.)
- kill -9 of a worker that holds allocations: its replacement re-adopts them and their
  ports stay taken (still full: 508), and after freeing some, the range fills again with
  8 distinct ports (no port used twice).
- a restart with the state file (master and workers killed -9, a new daemon takes the
  table over): the new workers rebuild the pool from the allocation table, so the range
  is still full (508) and refills with 8 distinct ports after some are freed.
- EVEN-PORT with the R bit: the RESERVATION-TOKEN redeems on the first try from fresh
  5-tuples, also when the redeeming client is served by the other worker than the one
  that made the reservation (checked with the allocations listing), and gets port + 1.
"""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_TOKEN, Client, Daemon, check, config, error_code,  # noqa: E402
                           free_port, run_tests, wait_for)
from test_security_limits import EVEN_R, bindable, free_all  # noqa: E402

N = 8


def start(d):
    # 65420..65515: a port-counting window of its own (see relay_range in
    # harness_admin.py), above the kernel's ephemeral range.
    lo = 65420 + (os.getpid() % 12) * N
    port = free_port(late=True)     # test_restart_keeps_ports binds it again after a kill
    # One user for every client: its quota (by default half of what the listener can
    # hold) must not be what refuses.
    text = config(d, [("udp", port, "TURN-UDP", ["loopback"])], {"loopback": ["127.0.0.1"]},
                  limits={"user_quota": 100}, relay=(lo, lo + N - 1))
    daemon = Daemon(d, text).start()
    busy = [p for p in range(lo, lo + N) if not bindable(p)]
    check(not busy, "ports %r of the test's window are held by another program" % busy)
    return daemon, port, lo


def allocs_by_port(daemon):
    """{relay port: worker slot} of the live allocations (admin listing)."""
    out = {}
    for a in daemon.admin({"cmd": "allocations"})["allocations"]:
        out[int(str(a["relay"]).rsplit(":", 1)[1])] = a["worker"]
    return out


def fill(port, want, tag):
    """Allocates from fresh 5-tuples; each must succeed. Returns [(client, relayed port)]."""
    got = []
    for i in range(want):
        c = Client(port)
        r = c.allocate(expect="any")
        check(error_code(r[3]) is None, "%s: allocation %d of %d answered %r (got %r)"
              % (tag, i + 1, want, error_code(r[3]), [p for _, p in got]))
        got.append((c, c.relayed(r)[0][1]))
    return got


def fill_split(daemon, port, want, tag):
    """Fills the range with want[slot] allocations on each worker: allocations that land on
    a worker that has its count already are freed again (bounded). An uneven split, so
    that fixed per-worker slices could not hold it. Returns [(client, relayed port)]."""
    got, have = [], {s: 0 for s in want}
    for _ in range(200):
        if len(got) == sum(want.values()):
            return got
        c = Client(port)
        r = c.allocate(expect="any")
        check(error_code(r[3]) is None, "%s: allocation %d answered %r with %r on the workers"
              " (ports %r)" % (tag, len(got) + 1, error_code(r[3]), have,
                              sorted(p for _, p in got)))
        p = c.relayed(r)[0][1]
        slot = allocs_by_port(daemon)[p]
        if have[slot] < want[slot]:
            have[slot] += 1
            got.append((c, p))
        else:
            free_all([c])
    check(False, "%s: no %r split in 200 tries (%r)" % (tag, want, have))


def refused(port, tag):
    c = Client(port)
    code = error_code(c.allocate(expect="any")[3])
    c.close()
    check(code == 508, "%s: an allocation beyond the range answered %r, not 508" % (tag, code))


def test_any_worker_any_port(d):
    daemon, port, lo = start(d)
    try:
        got = fill_split(daemon, port, {0: 6, 1: 2}, "full range")
        ports = sorted(p for _, p in got)
        check(ports == list(range(lo, lo + N)), "ports %r, not the range" % ports)
        slots = allocs_by_port(daemon)
        print("8 allocations on workers %r" % sorted(slots.values()))
        refused(port, "9th")
        free_all([got[0][0]])
        again = fill(port, 1, "after freeing one")
        check(again[0][1] == got[0][1], "freed port %d, got %d" % (got[0][1], again[0][1]))
        refused(port, "full again")
        free_all([c for c, _ in got[1:] + again])
    finally:
        daemon.stop()


def test_respawn_keeps_ports(d):
    daemon, port, lo = start(d)
    try:
        got = fill_split(daemon, port, {0: 2, 1: 6}, "before the kill")
        slots = allocs_by_port(daemon)
        counts = [list(slots.values()).count(s) for s in (0, 1)]
        slot = 0 if counts[0] >= counts[1] else 1
        workers = daemon.admin({"cmd": "workers"})["workers"]
        victim = workers[slot]["pid"]
        daemon.allowed_deaths += 1
        os.kill(victim, signal.SIGKILL)

        def back():
            w = daemon.admin({"cmd": "workers"})["workers"][slot]
            return w["state"] == "running" and w["pid"] not in (0, victim)
        wait_for(back, "worker %d respawned" % slot)
        wait_for(lambda: len(allocs_by_port(daemon)) == N, "8 allocations listed again")
        after = allocs_by_port(daemon)
        check(after == slots, "allocations moved: %r -> %r" % (slots, after))
        # The re-adopted ports stay taken: the range is still full.
        refused(port, "after the respawn")
        # Free 3 of the killed worker's allocations (its replacement serves them) and
        # fill the range again: 8 distinct ports, none used twice.
        mine = [(c, p) for c, p in got if slots[p] == slot][:3]
        free_all([c for c, _ in mine])
        rest = [(c, p) for c, p in got if (c, p) not in mine]
        new = fill(port, len(mine), "after freeing the re-adopted ones")
        ports = sorted(p for _, p in rest + new)
        check(ports == list(range(lo, lo + N)), "ports after the respawn %r" % ports)
        refused(port, "full after the respawn")
        free_all([c for c, _ in rest + new])
        print("killed worker %d with %d allocations; re-adopted, ports kept, refilled %r"
              % (slot, counts[slot], sorted(p for _, p in new)))
    finally:
        daemon.stop()


def refill(daemon, port, lo, got, free_n, tag):
    """Frees free_n of got and fills the range again: 8 distinct ports, then 508."""
    freed = got[:free_n]
    free_all([c for c, _ in freed])
    rest = got[free_n:]
    new = fill(port, free_n, tag)
    ports = sorted(p for _, p in rest + new)
    check(ports == list(range(lo, lo + N)), "%s: ports %r" % (tag, ports))
    refused(port, tag + ", full")
    return rest + new


def test_restart_keeps_ports(d):
    daemon, port, lo = start(d)
    try:
        got = fill_split(daemon, port, {0: 5, 1: 3}, "before the restart")
        daemon.kill_all()
        daemon = Daemon(d, open(daemon.conf).read()).start()
        wait_for(lambda: len(allocs_by_port(daemon)) == N, "8 allocations taken over")
        refused(port, "after the restart")
        live = refill(daemon, port, lo, got, 3, "after the restart")
        free_all([c for c, _ in live])
        print("restart: 8 allocations taken over, range still full, refilled")
    finally:
        daemon.stop()


def test_token_redeems_on_any_worker(d):
    daemon, port, lo = start(d)
    try:
        cross = same = 0
        for rnd in range(24):
            a = Client(port)
            r = a.allocate(EVEN_R)
            (_, pa), = a.relayed(r)
            token = r[3][A_TOKEN][0]
            check(pa % 2 == 0, "EVEN-PORT gave odd port %d" % pa)
            b = Client(port)
            rb = b.allocate([(A_TOKEN, token)], expect="any")
            check(error_code(rb[3]) is None, "round %d: token redeemed with %r (made on %r)"
                  % (rnd, error_code(rb[3]), allocs_by_port(daemon)))
            (_, pb), = b.relayed(rb)
            check(pb == pa + 1, "token gave port %d for reservation %d" % (pb, pa + 1))
            slots = allocs_by_port(daemon)
            if slots[pa] != slots[pb]:
                cross += 1
            else:
                same += 1
            free_all([a, b])
            if cross >= 3 and same >= 1 and rnd >= 5:
                break
        check(cross > 0, "no token was redeemed on the other worker in %d rounds" % (rnd + 1))
        print("tokens redeemed: %d on the other worker, %d on the same" % (cross, same))
    finally:
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_any_worker_any_port, test_respawn_keeps_ports, test_restart_keeps_ports,
               test_token_redeems_on_any_worker])
