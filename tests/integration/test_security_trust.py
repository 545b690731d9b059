"""Reflection protection that tells a flood from a crowd (issue 18), against the real daemon
with its default limits: addresses that authenticated earn credits in the shared trust
table and their 401s are paid from them, so a crowd behind one address or one /24 sets up
at full speed; a spoofed flood never authenticates and stays on its prefix's small bucket.

Hard assertions are on the daemon's counters (401s dropped, answers paid by credits,
trusted addresses) and on what every client got; times are printed, and bounded only
generously. Every loop is bounded in count and time. Loopback sources: any 127.x.y.z
address can be bound, so 127.0.N.x are distinct /24 prefixes.
"""
import hashlib
import multiprocessing
import os
import re
import selectors
import socket
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (ALLOCATE, A_CHANNEL, A_LIFETIME, A_NONCE, A_PEER,  # noqa: E402
                           A_REALM, A_TRANSPORT, A_USERNAME, CHANNEL_BIND, CREATE_PERMISSION,
                           ERROR, REALM, REFRESH, REQUEST, SUCCESS, Daemon, build, check, config,
                           credentials, error_code, free_port, parse, relay_range, run_tests,
                           xor_addr)
from test_security_ratelimit import (DROPPED, MISSING, daemon_conf, delta, flood,  # noqa: E402
                                     settle, udp_paced)

WORKERS = 2
TRUSTED = "turngate_unauth_responses_trusted_total"
ADDED = "turngate_unauth_trust_added_total"
EVICTED = "turngate_unauth_trust_evictions_total"
GAUGE = "turngate_unauth_trusted_addresses"
KEYS = (DROPPED, MISSING, TRUSTED, ADDED, EVICTED)
PEER = ("127.0.0.1", 9)
RTO, TRIES = 0.5, 7         # RFC 8489 6.2.1: 500 ms doubling, Rc = 7 (39.5 s)


def start(d, limits=None):
    """The daemon (default limits unless given), its UDP port, its metrics port, and the
    limits it runs with as its admin socket reports them (the bounds below use those)."""
    port, mport = free_port(), free_port()
    text = config(d, [("udp", port, "TURN-UDP", ["loopback"])], {"loopback": ["127.0.0.1"]},
                  limits=limits, workers=WORKERS, relay=relay_range())
    text = text.replace("admin:\n", 'admin:\n  metrics_endpoint: "http://127.0.0.1:%d/metrics"\n'
                        % mport, 1)
    daemon = Daemon(d, text).start()
    lim = daemon.admin({"cmd": "config"})["config"]["limits"]
    print("limits: unauth_rate %(unauth_rate)d, unauth_burst %(unauth_burst)d, "
          "unauth_trust_credits %(unauth_trust_credits)d, unauth_trust_window "
          "%(unauth_trust_window)d" % lim)
    return daemon, port, mport, lim


class Walk:
    """One allocation's setup on its own socket: 401 round, Allocate, CreatePermission,
    ChannelBind (the setup time ends here), then Refresh LIFETIME 0 to free the relay port."""
    STEPS = ("a0", "a1", "perm", "bind", "delete")

    def __init__(self, src, cred):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((src, 0))
        self.sock.setblocking(False)
        self.cred, self.nonce, self.step = cred, None, 0
        self.t0, self.setup_s, self.a0_retx, self.retx = time.monotonic(), None, 0, 0

    def message(self):
        name, self.tid = self.STEPS[self.step], os.urandom(12)
        user, key = self.cred
        auth = [(A_USERNAME, user), (A_REALM, REALM.encode()), (A_NONCE, self.nonce)]
        if name == "a0":
            return build(ALLOCATE, REQUEST, self.tid, [(A_TRANSPORT, bytes([17, 0, 0, 0]))])
        if name == "a1":
            return build(ALLOCATE, REQUEST, self.tid,
                         [(A_TRANSPORT, bytes([17, 0, 0, 0]))] + auth, key)
        if name == "perm":
            return build(CREATE_PERMISSION, REQUEST, self.tid,
                         [(A_PEER, xor_addr(PEER[0], PEER[1], self.tid))] + auth, key)
        if name == "bind":
            return build(CHANNEL_BIND, REQUEST, self.tid,
                         [(A_CHANNEL, struct.pack("!HH", 0x4000, 0)),
                          (A_PEER, xor_addr(PEER[0], PEER[1], self.tid))] + auth, key)
        return build(REFRESH, REQUEST, self.tid, [(A_LIFETIME, struct.pack("!I", 0))] + auth,
                     key)

    def send(self, port, now):
        self.msg, self.tries, self.next = self.message(), 1, now + RTO
        self.sock.sendto(self.msg, ("127.0.0.1", port))

    def retransmit(self, port, now):
        """False when the transaction timed out (RFC 8489: Rc tries)."""
        if self.tries >= TRIES:
            return False
        self.sock.sendto(self.msg, ("127.0.0.1", port))
        self.retx += 1
        self.a0_retx += self.step == 0
        self.next = now + RTO * (2 ** self.tries)
        self.tries += 1
        return True

    def answer(self, data, now):
        """Advances on the answer to the current transaction: 'next', 'done', 'fail' or None
        (not ours)."""
        p = parse(data)
        if p is None or p[2] != self.tid or p[1] not in (SUCCESS, ERROR):
            return None
        code = error_code(p[3])
        if self.step == 0:
            if code != 401 or A_NONCE not in p[3]:
                return "fail"
            self.nonce = p[3][A_NONCE][0]
        elif code is not None:
            return "fail"
        if self.STEPS[self.step] == "bind":
            self.setup_s = now - self.t0
        self.step += 1
        return "done" if self.step == len(self.STEPS) else "next"


def setups(port, srcs, n, conc, user="crowd", limit_s=120.0):
    """n setups from the addresses srcs in turn, conc at once. Returns a dict: done, failed,
    setup times in s, retransmissions of first Allocates (a lost 401) and of all requests,
    wall time."""
    username, password = credentials(user)
    cred = (username.encode(), hashlib.md5(("%s:%s:%s" % (username, REALM, password))
                                           .encode()).digest())
    sel = selectors.DefaultSelector()
    res = dict(done=0, failed=0, times=[], a0_retx=0, retx=0)
    started, t0 = 0, time.monotonic()

    def finish(w, ok):
        sel.unregister(w.sock)
        w.sock.close()
        res["done" if ok else "failed"] += 1
        res["a0_retx"] += w.a0_retx
        res["retx"] += w.retx
        if ok:
            res["times"].append(w.setup_s)

    while res["done"] + res["failed"] < n and time.monotonic() - t0 < limit_s:
        while started < n and started - res["done"] - res["failed"] < conc:
            w = Walk(srcs[started % len(srcs)], cred)
            sel.register(w.sock, selectors.EVENT_READ, w)
            w.send(port, time.monotonic())
            started += 1
        for key, _ in sel.select(0.02):
            w = key.data
            for _ in range(16):
                try:
                    data = w.sock.recv(4096)
                except BlockingIOError:
                    break
                now = time.monotonic()
                r = w.answer(data, now)
                if r == "next":
                    w.send(port, now)
                elif r in ("done", "fail"):
                    finish(w, r == "done")
                    break
        now = time.monotonic()
        for key in list(sel.get_map().values()):
            w = key.data
            if now >= w.next and not w.retransmit(port, now):
                finish(w, False)
    for key in list(sel.get_map().values()):
        finish(key.data, False)
    res["wall"] = time.monotonic() - t0
    res["failed"] += n - started
    return res


def pct(times, q):
    return sorted(times)[min(len(times) - 1, int(q * len(times)))] if times else float("nan")


def report(name, r):
    t = r["times"]
    print("%s: %d setups done, %d failed in %.2f s (%.0f/s); setup p50 %.1f ms, p99 %.1f ms, "
          "max %.1f ms; %d first Allocates retransmitted, %d retransmissions in all"
          % (name, r["done"], r["failed"], r["wall"], r["done"] / r["wall"],
             1000 * (statistics.median(t) if t else float("nan")), 1000 * pct(t, 0.99),
             1000 * (max(t) if t else float("nan")), r["a0_retx"], r["retx"]))


def check_crowd(name, port, mport, lim, srcs, n=2000, conc=64):
    base = settle(mport, KEYS)
    r = setups(port, srcs, n, conc)
    report(name, r)
    after = settle(mport, KEYS)
    d = {k: delta(after, base, k) for k in KEYS}
    print("%s: counters %r, trusted addresses %d" % (name, d, after.get(GAUGE, 0)))
    check(r["done"] == n and r["failed"] == 0,
          "%s: %d of %d setups failed" % (name, r["failed"], n))
    check(d[DROPPED] == 0, "%s: %d 401s dropped" % (name, d[DROPPED]))
    check(d[MISSING] == n + r["a0_retx"], "%s: %d 401s owed for %d setups" % (name, d[MISSING], n))
    # Each address's first setups come from its prefix's bucket (at most unauth_burst per worker
    # before any credit exists); every later one is paid by a credit of its address.
    check(d[TRUSTED] >= n - WORKERS * lim["unauth_burst"],
          "%s: only %d answers on credit" % (name, d[TRUSTED]))
    # One entry per address (two workers entering one new address at the same instant may
    # both claim a way: a spare, never a missing one).
    check(len(srcs) <= d[ADDED] <= len(srcs) + 4 and d[EVICTED] == 0,
          "%s: %d addresses entered, %d evicted" % (name, d[ADDED], d[EVICTED]))
    check(after.get(GAUGE, 0) == d[ADDED], "%s: gauge %r" % (name, after.get(GAUGE)))
    # Printed above; bounded here only far above what a loaded machine shows (the issue
    # asks < 100 ms on a quiet one): a lost 401 costs a 500 ms retransmission.
    check(pct(r["times"], 0.99) < 3.0, "%s: setup p99 %.2f s" % (name, pct(r["times"], 0.99)))
    return r


def test_crowd_one_address(d):
    """2000 setups from one address, 64 in flight, default limits: no 401 dropped."""
    daemon, port, mport, lim = start(d)
    try:
        check_crowd("one address", port, mport, lim, ["127.0.0.1"])
    finally:
        daemon.stop()


def test_crowd_one_prefix(d):
    """The same from 50 addresses of one /24."""
    daemon, port, mport, lim = start(d)
    try:
        check_crowd("one /24, 50 addresses", port, mport, lim,
                    ["127.0.7.%d" % i for i in range(1, 51)])
    finally:
        daemon.stop()


def test_credits_off(d):
    """unauth_trust_credits: 0 is the limit of before: the crowd's 401s beyond its prefix's
    buckets are dropped (the control that shows the crowd tests can fail)."""
    daemon, port, mport, _ = start(d, {"unauth_trust_credits": 0})
    try:
        base = settle(mport, KEYS)
        r = setups(port, ["127.0.0.1"], 400, 64, limit_s=15.0)
        report("one address, credits off", r)
        after = settle(mport, KEYS)
        dd = {k: delta(after, base, k) for k in KEYS}
        print("credits off: counters %r" % dd)
        check(dd[DROPPED] > 0 and r["a0_retx"] > 0, "credits off, yet nothing dropped")
        check(dd[TRUSTED] == 0 and dd[ADDED] == 0 and after.get(GAUGE, 0) == 0,
              "credits off, yet the trust table was used: %r" % dd)
    finally:
        daemon.stop()


def test_trust_reload(d):
    """Credits live in the shared segment: a reload to unauth_trust_credits 0 stops their
    use at once (the prefix's bucket alone answers), a reload back finds them again."""
    daemon, port, mport, _ = start(d, {"unauth_trust_credits": 1000})
    try:
        r = setups(port, ["127.0.12.1"], 200, 16)
        check(r["done"] == 200, "setups failed")
        for credits in (0, 1000):
            daemon.write_config(re.sub(r"unauth_trust_credits: \d+",
                                       "unauth_trust_credits: %d" % credits,
                                       daemon_conf(daemon)))
            res = daemon.admin({"cmd": "reload"})
            check(res.get("ok") is True, "reload failed: %r" % res)
            base = settle(mport, KEYS)
            answered = udp_paced(port, "127.0.12.1", 300)
            after = settle(mport, KEYS)
            dd = {k: delta(after, base, k) for k in KEYS}
            print("unauth_trust_credits %d after reload: %d of 300 answered, counters %r"
                  % (credits, answered, dd))
            check(dd[MISSING] == 300 and answered == 300 - dd[DROPPED],
                  "answers and drops do not add up: %d, %r" % (answered, dd))
            if credits == 0:
                check(dd[TRUSTED] == 0 and dd[DROPPED] > 0, "credits used while off: %r" % dd)
            else:
                # 200 setups earned 4 each and spent at most 1 each: 300 are in store.
                check(dd[TRUSTED] == 300 and dd[DROPPED] == 0, "credits lost: %r" % dd)
    finally:
        daemon.stop()


def run_flood(port, srcs, rate, secs):
    """rate * secs unauthenticated Allocates from srcs, paced (ratelimit's flood helper)."""
    q = multiprocessing.Queue()
    p = multiprocessing.Process(target=flood, args=(port, srcs, int(rate * secs), None, q),
                                kwargs={"rate": rate})
    p.start()
    return p, q


def join_flood(p, q, name):
    """(sent, bytes, answers, answer bytes, seconds from the first request to the last
    answer) of a flood, printed."""
    sent, sbytes, answers, abytes, _, t0, t_last = q.get(timeout=90)
    p.join(10)
    secs = max(t_last - t0, 0.001)
    amp = abytes / sbytes if sbytes else 0.0
    print("%s: %d unauthenticated Allocates (%d B), %d answered (%d B) in %.1f s: byte "
          "amplification %.4f" % (name, sent, sbytes, answers, abytes, secs, amp))
    return sent, sbytes, answers, abytes, secs


def prefix_bound(secs, lim):
    """Answers one prefix that never authenticated can get: each worker's bucket."""
    return WORKERS * (lim["unauth_burst"] + lim["unauth_rate"] * secs) + 2


def test_flood_and_crowds(d):
    """A spoofed flood of 127.0.8.0/24 (addresses that never authenticate) at 20,000/s for
    10 s: amplification <= 1 and bounded answers. Meanwhile a crowd from 127.0.9.0/24 and
    the flooded prefix's own client 127.0.8.200 (which authenticated before) set up."""
    daemon, port, mport, lim = start(d)
    try:
        warm = setups(port, ["127.0.8.200"], 8, 8, user="regular")
        check(warm["done"] == 8, "regular client could not set up before the flood")
        base = settle(mport, KEYS)
        fp, fq = run_flood(port, ["127.0.8.%d" % i for i in range(1, 9)], 20000, 10)
        time.sleep(1.0)     # the flood has taken its prefix's burst by now
        crowd = setups(port, ["127.0.9.%d" % i for i in range(1, 6)], 300, 16)
        report("during the flood, crowd of 127.0.9.0/24", crowd)
        own = setups(port, ["127.0.8.200"], 150, 16, user="regular")
        report("during the flood, 127.0.8.200 (authenticated before)", own)
        check(fp.is_alive(), "the flood ended before the clients did: not measured under flood")
        sent, sbytes, answers, abytes, secs = join_flood(fp, fq, "flood of 127.0.8.1-8")
        after = settle(mport, KEYS)
        dd = {k: delta(after, base, k) for k in KEYS}
        print("counters during the flood: %r" % dd)
        check(sent >= 150000, "flood sent only %d" % sent)
        check(answers <= prefix_bound(secs, lim), "flood: %d answers in %.1f s (bound %d)"
              % (answers, secs, prefix_bound(secs, lim)))
        check(abytes <= sbytes, "flood: byte amplification %.3f" % (abytes / sbytes))
        for name, r, n in (("crowd", crowd, 300), ("own client", own, 150)):
            check(r["done"] == n and r["failed"] == 0,
                  "%s: %d of %d failed" % (name, r["failed"], n))
            # A 401 lost to the flood would show as a retransmitted first Allocate; a busy
            # machine may lose a datagram now and then, a limit would lose most.
            check(r["a0_retx"] <= n // 10, "%s: %d first Allocates retransmitted"
                  % (name, r["a0_retx"]))
        # What the crowds got on credit is exactly what they asked beyond their first
        # round: the flood spent none (its addresses hold none).
        check(dd[TRUSTED] <= 300 + 150 + crowd["a0_retx"] + own["a0_retx"],
              "%d answers on credit" % dd[TRUSTED])
        check(dd[TRUSTED] >= 150 + 300 - WORKERS * lim["unauth_burst"],
              "%d answers on credit" % dd[TRUSTED])
    finally:
        daemon.stop()


def test_attacker_gains_nothing(d):
    """An attacker that authenticates a lot from 127.0.10.1 holds credits for that address
    only: a flood spoofing a victim prefix (127.0.11.0/24) or its own neighbour
    (127.0.10.2) gets its prefix's bucket and not one credit; a flood from its own address
    spends at most what it earned."""
    daemon, port, mport, lim = start(d)
    try:
        earn = setups(port, ["127.0.10.1"], 300, 16, user="mallory")
        check(earn["done"] == 300, "attacker could not set up")
        victims = ["127.0.11.%d" % i for i in range(1, 9)]
        for name, srcs in (("victim prefix 127.0.11.0/24", victims),
                           ("neighbour 127.0.10.2", ["127.0.10.2"])):
            base = settle(mport, KEYS)
            fp, fq = run_flood(port, srcs, 5000, 2)
            sent, sbytes, answers, abytes, secs = join_flood(fp, fq, "flood of " + name)
            after = settle(mport, KEYS)
            check(delta(after, base, TRUSTED) == 0, "%s: %d answers on the attacker's credit"
                  % (name, delta(after, base, TRUSTED)))
            check(answers <= prefix_bound(secs, lim), "%s: %d answers" % (name, answers))
            check(answers + delta(after, base, DROPPED) == delta(after, base, MISSING),
                  "%s: answers and drops do not add up" % name)
        # Positive control: the attacker's own address does spend its credits, and no more
        # than it earned (4 authenticated requests per setup, at most unauth_trust_credits held).
        base = settle(mport, KEYS)
        fp, fq = run_flood(port, ["127.0.10.1"], 5000, 2)
        sent, sbytes, answers, abytes, secs = join_flood(fp, fq, "flood from its own address")
        after = settle(mport, KEYS)
        spent = delta(after, base, TRUSTED)
        print("own address: %d answers on credit" % spent)
        check(0 < spent <= min(lim["unauth_trust_credits"], 4 * 300),
              "own address: %d answers on credit" % spent)
        check(answers <= spent + prefix_bound(secs, lim), "own address: %d answers" % answers)
    finally:
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_crowd_one_address, test_crowd_one_prefix, test_credits_off,
               test_trust_reload, test_flood_and_crowds, test_attacker_gains_nothing])
