"""Allocation quotas that hold across workers (#23), against the real daemon with 2 workers.

The counts live in the shared segment (shm/shm_quota.h): a user at limits.user_quota on one
worker is refused (486) on the other (a user is its REST user id: another credential of it
counts too), a listener at listeners[].max_allocations answers 508 whichever worker the
client reaches, and the counts follow every way an allocation ends:
Refresh 0, a worker killed with SIGKILL (its allocations re-adopted by its replacement), and
a reload that lowers a limit (existing allocations stay, new ones are refused). Which worker
serves a client is read back from the admin socket's `allocations` (the steering sends each
client address to one worker). Exactness is shown by admission: at the limit exactly N are
admitted, and one more exactly when one ended. Relay ports 29000-29999 (no other test's;
below the kernel's ephemeral ports, as the killed worker's replacement binds them again).
"""
import hashlib
import os
import signal
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_LIFETIME, REALM, REFRESH, Client, Daemon, StreamClient,  # noqa: E402
                           check, config, credentials, error_code, free_port, run_tests, wait_for)


RELAY = (29000, 29999)
LONG = [(A_LIFETIME, struct.pack("!I", 600))]     # an allocation's LIFETIME of 600 s


def make_config(d, port, limits, listener_max=None, port2=None):
    lst = [("udp", port, "TURN-UDP", ["loopback"])]
    if port2:
        lst.append(("other", port2, "TURN-UDP", ["loopback"]))
    text = config(d, lst, {"loopback": ["127.0.0.1"]}, limits=limits, relay=RELAY)
    if listener_max is not None:
        text = text.replace("    port: %d\n    routes: [loopback]\n" % port,
                            "    port: %d\n    routes: [loopback]\n    max_allocations: %d\n"
                            % (port, listener_max), 1)
        check("max_allocations: %d" % listener_max in text, "config edit")
    return text


def allocs(daemon):
    return daemon.admin({"cmd": "allocations"})["allocations"]


def owner(daemon, c):
    """The worker owning c's allocation (by client address), or None."""
    a = c.record(daemon)
    return a and a["worker"]


def refresh0(c):
    r = c.request(REFRESH, [(A_LIFETIME, struct.pack("!I", 0))])
    check(error_code(r[3]) is None, "Refresh 0 refused: %r" % (error_code(r[3]),))


def as_user(c, user):
    """c now authenticates as user (a REST credential; same expiry for all of them, so they
    all carry one username)."""
    c.username, c.password, c.key = user
    c.nonce = None


def by_worker(daemon, port, want=4, most=64):
    """Clients on port sorted by the worker their address is steered to, at least want on
    each: each allocates once under its own probe user, the admin socket says where, and
    Refresh 0 ends it."""
    out = {0: [], 1: []}
    for i in range(most):
        if min(len(out[0]), len(out[1])) >= want:
            break
        c = Client(port, user="probe%d" % i)
        c.allocate()
        w = owner(daemon, c)
        check(w in out, "probe allocation not listed (worker %r)" % (w,))
        refresh0(c)
        out[w].append(c)
    check(min(len(out[0]), len(out[1])) >= want,
          "steering put %d and %d clients on the workers" % (len(out[0]), len(out[1])))
    wait_for(lambda: not allocs(daemon), "probe allocations to end")
    return out[0], out[1]


def user_creds(name, lifetime=3600):
    """(username, password, key) of a REST credential of user id name."""
    username, password = credentials(name, lifetime)
    return (username, password,
            hashlib.md5(("%s:%s:%s" % (username, REALM, password)).encode()).digest())


def worker_pid(daemon, slot):
    return [w["pid"] for w in daemon.admin({"cmd": "workers"})["workers"] if w["slot"] == slot][0]


def kill_worker(daemon, slot):
    """SIGKILL to the worker of slot (a death the log scan allows); waits until its
    replacement runs beside the other workers."""
    old = worker_pid(daemon, slot)
    daemon.allowed_deaths += 1
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: worker_pid(daemon, slot) not in (0, old) and daemon.admin(
        {"cmd": "status"})["workers"]["running"] == daemon.workers,
        "worker %d respawned" % slot)


def test_user_quota_across_workers(d):
    port = free_port()
    text = make_config(d, port, {"user_quota": 2})
    daemon = Daemon(d, text).start()
    try:
        w0, w1 = by_worker(daemon, port)
        u = user_creds("quser")
        for c in w0 + w1:
            as_user(c, u)
        # At quota on worker 0: refused on worker 1 (and on 0).
        w0[0].allocate()
        w0[1].allocate()
        w1[0].allocate(expect=486)
        w0[2].allocate(expect=486)
        # Another credential of the same REST user id (another expiry) shares the count.
        as_user(w1[2], user_creds("quser", 7200))
        check(w1[2].username != u[0], "a second credential")
        w1[2].allocate(expect=486)
        check(sorted(a["worker"] for a in allocs(daemon)) == [0, 0], "allocations on 0")
        # Refresh 0 gives one back: exactly one more is admitted, on the other worker.
        refresh0(w0[0])
        w1[0].allocate()
        w1[1].allocate(expect=486)
        check(sorted(a["worker"] for a in allocs(daemon)) == [0, 1], "allocations on 0 and 1")
        # SIGKILL worker 1: its replacement adopts w1[0]'s allocation, which stays counted.
        kill_worker(daemon, 1)
        wait_for(lambda: owner(daemon, w1[0]) == 1, "allocation re-adopted")
        time.sleep(0.2)
        w1[1].allocate(expect=486)
        w0[2].allocate(expect=486)
        # The adopted allocation ends through the new worker: one more admitted, exactly.
        refresh0(w1[0])
        w0[2].allocate()
        w1[1].allocate(expect=486)
        # A reload lowering the quota ends nothing and refuses new allocations.
        daemon.reload(text.replace("user_quota: 2", "user_quota: 1"))
        check(len(allocs(daemon)) == 2, "a lower quota ended allocations")
        w1[1].allocate(expect=486)
        refresh0(w0[1])
        w1[1].allocate(expect=486)   # 1 left, quota 1
        refresh0(w0[2])
        w1[1].allocate()
        w1[2].allocate(expect=486)
        # Other users are not counted with this one.
        as_user(w0[0], user_creds("other"))
        w0[0].allocate()
    finally:
        daemon.stop()


def test_listener_cap_across_workers(d):
    port, port2 = free_port(), free_port()
    text = make_config(d, port, {}, listener_max=3, port2=port2)
    daemon = Daemon(d, text).start()
    try:
        w0, w1 = by_worker(daemon, port)
        w0[0].allocate()
        w1[0].allocate()
        w1[1].allocate()
        w0[1].allocate(expect=508)
        w1[2].allocate(expect=508)
        # Another listener (tenant) is not capped by this one's count.
        other = [Client(port2, user="t2-%d" % i) for i in range(4)]
        for c in other:
            c.allocate()
        # Refresh 0 frees one place, on either worker.
        refresh0(w1[0])
        w0[1].allocate()
        w0[2].allocate(expect=508)
        # SIGKILL worker 0: the cap still counts its re-adopted allocations.
        kill_worker(daemon, 0)
        wait_for(lambda: owner(daemon, w0[0]) == 0 and owner(daemon, w0[1]) == 0,
                 "allocations re-adopted")
        time.sleep(0.2)
        w1[2].allocate(expect=508)
        # Lowering the cap ends nothing; raising it admits again.
        daemon.reload(text.replace("max_allocations: 3", "max_allocations: 1"))
        check(len(allocs(daemon)) == 3 + len(other), "a lower cap ended allocations")
        refresh0(w0[0])
        w1[2].allocate(expect=508)   # 2 left, cap 1
        daemon.reload(text.replace("max_allocations: 3", "max_allocations: 4"))
        w1[2].allocate()
        w0[2].allocate()
        w0[0].allocate(expect=508)
        for c in other:
            refresh0(c)
    finally:
        daemon.stop()


def test_total_quota_across_workers(d):
    port, port2 = free_port(), free_port()
    text = make_config(d, port, {"total_quota": 3}, port2=port2)
    daemon = Daemon(d, text).start()
    try:
        w0, w1 = by_worker(daemon, port)
        w0[0].allocate()
        w1[0].allocate()
        o = [Client(port2, user="t2-%d" % i) for i in range(2)]
        o[0].allocate()
        o[1].allocate(expect=508)
        w0[1].allocate(expect=508)
        w1[1].allocate(expect=508)
        refresh0(w0[0])
        w1[1].allocate()
        w0[1].allocate(expect=508)
        # Removing a listener by reload ends its allocations and gives their counts back.
        daemon.reload(make_config(d, port, {"total_quota": 3}))
        wait_for(lambda: len(allocs(daemon)) == 2, "the removed listener's allocation to end")
        w0[1].allocate()
        w0[2].allocate(expect=508)
    finally:
        daemon.stop()


def refused_while_held(daemon, holder, other):
    """holder allocates with the default lifetime (1 s), then other, of the same user, must
    get 486 while holder's allocation lives. Once 1 s has passed since holder's Allocate
    was sent, it may have expired (the machine stalled): then wait until no allocation is
    left and try again, 5 tries in all; a success sooner is a failure."""
    for _ in range(5):
        sent = time.monotonic()
        holder.allocate()
        got = error_code(other.allocate(expect="any")[3])
        if got == 486:
            return
        check(time.monotonic() - sent >= 1.0,
              "Allocate over the quota while the first allocation lived: %r" % (got,))
        wait_for(lambda: not allocs(daemon), "the allocations to expire", timeout=10)
    check(False, "no 486 in 5 tries")


def test_other_endings(d):
    """Expiry, a closed TURN-TCP connection, the admin's disconnect and the release of a
    killed worker's TURN-TCP allocation by its replacement give the counts back. The
    allocations meant to end otherwise than by expiry ask for 600 s: the default (1 s)
    could end them first on a stalled machine."""
    port = free_port()
    text = make_config(d, port, {"user_quota": 1, "allocation_lifetime": 1,
                                 "max_allocation_lifetime": 600})
    text = text.replace("listeners:\n", "listeners:\n  - name: tcp\n    protocol: TURN-TCP\n"
                        "    address: 127.0.0.1\n    port: %d\n    routes: [loopback]\n"
                        % port, 1)
    daemon = Daemon(d, text).start()
    try:
        a, b = Client(port, user="e"), Client(port, user="e")
        as_user(b, (a.username, a.password, a.key))
        refused_while_held(daemon, a, b)
        wait_for(lambda: not allocs(daemon), "the allocation to expire", timeout=10)
        b.allocate()
        wait_for(lambda: not allocs(daemon), "the second allocation to expire", timeout=10)
        # TURN-TCP: the allocation ends with its connection.
        t = StreamClient(port, user="t")
        t.allocate(extra=LONG)
        check([x["transport"] for x in allocs(daemon)] == ["tcp"], "a TCP allocation")
        u = Client(port, user="t")
        as_user(u, (t.username, t.password, t.key))
        u.allocate(extra=LONG, expect=486)
        t.sock.close()
        wait_for(lambda: not allocs(daemon), "the TCP allocation to end")
        u.allocate(extra=LONG)
        # The admin's disconnect.
        r = daemon.admin({"cmd": "disconnect", "user": u.username})
        check(r.get("ok") is True, "disconnect: %r" % (r,))
        wait_for(lambda: not allocs(daemon), "the disconnected allocation to end")
        v = Client(port, user="t")
        as_user(v, (t.username, t.password, t.key))
        v.allocate(extra=LONG)
        refresh0(v)
        # A TURN-TCP allocation of a worker killed with SIGKILL: its replacement releases
        # the record (the connection died) and gives the counts back.
        t2 = StreamClient(port, user="t")
        as_user(t2, (t.username, t.password, t.key))
        t2.allocate(extra=LONG)
        slot = allocs(daemon)[0]["worker"]
        kill_worker(daemon, slot)
        wait_for(lambda: not allocs(daemon), "the dead worker's TCP allocation released")
        v.allocate()
        t2.sock.close()
    finally:
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_user_quota_across_workers, test_listener_cap_across_workers,
               test_total_quota_across_workers, test_other_endings])
