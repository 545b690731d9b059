"""Password guessing is throttled per source prefix and per username, across workers
(issue 36), and the default user_quota leaves room for a second user.

Against the real daemon with its default limits (limits.auth_fail_prefix 10 and
limits.auth_fail_user 20 failures per minute, user_quota unset). Hard assertions count
answers in bounded runs and read the daemon's counters; times are printed only. Loopback
sources: any 127.x.y.z can be bound, so 127.0.N.x are distinct /24 prefixes. Every loop is
bounded in count and time.
"""
import hashlib
import os
import re
import socket
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (ALLOCATE, A_NONCE, A_REALM, A_TRANSPORT, A_USERNAME,  # noqa: E402
                           ERROR, REALM, REQUEST, SUCCESS, Client, Daemon, StreamClient, build,
                           check, config, credentials, error_code, free_port, parse,
                           relay_range, run_tests, wait_for)

WORKERS = 2
GUESSES = 150             # wrong passwords sent on one connection without waiting
UDP_GUESSES = 60          # within the reflection limiter's burst (100): all answered on main
BUDGET = 10               # limits.auth_fail_prefix's default
USER_BUDGET = 20          # limits.auth_fail_user's default
# 16 relay ports owned by this test: above the port-counting windows (65000..65419,
# harness_admin.relay_range) and test_revoke's 65420..65519.
QUOTA_RANGE = (65520, 65535)


def start(d, limits=None, relay=None):
    port, tport, mport = free_port(), free_port(), free_port()
    text = config(d, [("udp", port, "TURN-UDP", ["loopback"]),
                      ("tcp", tport, "TURN-TCP", ["loopback"])],
                  {"loopback": ["127.0.0.1"]}, limits=limits, workers=WORKERS,
                  relay=relay or relay_range())
    text = text.replace("admin:\n", 'admin:\n  metrics_endpoint: "http://127.0.0.1:%d/metrics"\n'
                        % mport, 1)
    daemon = Daemon(d, text).start()
    daemon.mport = mport
    return daemon, port, tport


def metric(daemon, sample):
    """The value of one sample line of /metrics (0 when absent)."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % daemon.mport, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(sample + " "):
                return float(line.split()[-1])
    return 0.0


def counters(daemon):
    return daemon.admin({"cmd": "stats"})["counters"]


def key_of(username, password):
    return hashlib.md5(("%s:%s:%s" % (username, REALM, password)).encode()).digest()


def allocate(tid, username=None, nonce=None, key=None):
    attrs = [(A_TRANSPORT, bytes([17, 0, 0, 0]))]
    if username is not None:
        attrs += [(A_USERNAME, username.encode()), (A_REALM, REALM.encode()), (A_NONCE, nonce)]
    return build(ALLOCATE, REQUEST, tid, attrs, key)


class Stream(StreamClient):
    """One TCP connection from src to the TURN-TCP listener (the library's framing),
    answers gathered by transaction id."""

    def __init__(self, src, port):
        super().__init__(port, sock=socket.create_connection(("127.0.0.1", port), timeout=5,
                                                             source_address=(src, 0)))

    def answers(self, want, timeout):
        """{tid: parsed} of the answers read until `want` came or timeout seconds passed."""
        got, deadline = {}, time.monotonic() + timeout
        while len(got) < want:
            f = self.frame(deadline - time.monotonic())
            if f is None:
                break
            p = parse(f)
            if p and p[1] in (SUCCESS, ERROR):
                got[p[2]] = p
        return got


class Dgram:
    """One UDP socket from src, answers gathered by transaction id."""

    def __init__(self, src, port):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((src, 0))
        self.server = ("127.0.0.1", port)

    def send_raw(self, msg):
        self.sock.sendto(msg, self.server)

    def answers(self, want, timeout):
        got, deadline = {}, time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                break
            p = parse(data)
            if p and p[1] in (SUCCESS, ERROR):
                got[p[2]] = p
        return got

    def close(self):
        self.sock.close()


def nonce_of(conn):
    tid = os.urandom(12)
    conn.send_raw(allocate(tid))
    r = conn.answers(1, 3.0).get(tid)
    check(r is not None and error_code(r[3]) == 401 and A_NONCE in r[3],
          "the unauthenticated Allocate got its 401 with a nonce (%r)" % (r,))
    return r[3][A_NONCE][0]


def allocate_with(conn, username, password, timeout=3.0):
    """The answer to an authenticated Allocate on conn (None: not answered)."""
    nonce = nonce_of(conn)
    tid = os.urandom(12)
    conn.send_raw(allocate(tid, username, nonce, key_of(username, password)))
    return conn.answers(1, timeout).get(tid)


def guess_run(conn, n):
    """n wrong passwords for alice, then the right one, all sent without waiting for
    answers (as a guesser on one connection does); returns (wrong answered, right answer
    or None, seconds)."""
    username, password = credentials("alice")
    nonce = nonce_of(conn)
    tids = [os.urandom(12) for _ in range(n)]
    right = os.urandom(12)
    t0 = time.monotonic()
    for i, tid in enumerate(tids):
        conn.send_raw(allocate(tid, username, nonce, key_of(username, "guess-%d" % i)))
    conn.send_raw(allocate(right, username, nonce, key_of(username, password)))
    got = conn.answers(n + 1, 4.0)
    wrong = sum(1 for t in tids if t in got)
    for t in tids:
        if t in got:
            check(error_code(got[t][3]) == 401, "a wrong password is answered 401")
    return wrong, got.get(right), time.monotonic() - t0


def check_guessing(daemon, port, conn, n, other):
    """After conn's run of n guesses: the guesser got about its budget of answers and not
    the right password's; the right password from `other` (another address of the same /24) works at once."""
    before = counters(daemon)
    wrong, right, secs = guess_run(conn, n)
    print("%d wrong passwords sent on one %s: %d answered within %.1f s, the right one "
          "after them: %s" % (n, type(conn).__name__, wrong, secs,
                                        "answered %r" % error_code(right[3])
                                        if right else "not answered"))
    check(wrong <= BUDGET + 1, "at most the budget (%d) of wrong guesses answered, got %d"
          % (BUDGET, wrong))
    check(right is None, "the right password from the guessing prefix is throttled too")
    wait_for(lambda: counters(daemon)["auth_throttled_prefix"]
             - before.get("auth_throttled_prefix", 0) >= n - BUDGET - 1,
             "auth_throttled_prefix counts the dropped guesses", timeout=10)
    check(metric(daemon, 'turngate_auth_throttled_total{reason="prefix"}') >= n - BUDGET - 1,
          "turngate_auth_throttled_total{reason=\"prefix\"} counts them")
    check(metric(daemon, "turngate_auth_throttled_keys") >= 1,
          "turngate_auth_throttled_keys shows the guessing prefix")
    username, password = credentials("alice")
    ok = other(port)
    t0 = time.monotonic()
    r = allocate_with(ok, username, password)
    ok.close()
    check(r is not None and r[1] == SUCCESS,
          "the right password from another address allocates at once (%r)" % (r,))
    print("the right password from another address of the /24: allocated in %.3f s"
          % (time.monotonic() - t0))


def test_guessing_tcp(d):
    """One TCP connection from 127.0.1.5 guesses alice's password without waiting: after
    the budget its guesses (and then its right password) go unanswered; 127.0.1.6, another
    address of its /24, logs in at once. On main every guess was answered and the right
    password found."""
    daemon, port, tport = start(d)
    try:
        conn = Stream("127.0.1.5", tport)
        check_guessing(daemon, tport, conn, GUESSES, lambda p: Stream("127.0.1.6", p))
        conn.close()
        wait_for(lambda: re.search(rb"source 127\.0\.1\.5/32 over its failed-authentication "
                                   rb"budget", open(daemon.errpath, "rb").read()),
                 "one log line names the throttled source", timeout=5)
        lines = re.findall(rb"over its failed-authentication budget",
                           open(daemon.errpath, "rb").read())
        check(len(lines) <= 2, "the trip is logged once, not per guess (%d lines)" % len(lines))
    finally:
        daemon.stop()


def test_guessing_udp(d):
    """The same over UDP from 127.0.4.5 (fewer guesses: on main they stay within the
    reflection limiter's burst, so all are answered there); 127.0.4.6 logs in at once."""
    daemon, port, _ = start(d)
    try:
        conn = Dgram("127.0.4.5", port)
        check_guessing(daemon, port, conn, UDP_GUESSES, lambda p: Dgram("127.0.4.6", p))
        conn.close()
    finally:
        daemon.stop()


def test_guessing_distributed(d):
    """bob's password guessed once each from 30 prefixes (no prefix over its own budget):
    past the username's budget the failures go unanswered; the right password from a
    prefix that never failed works at once, from one that failed it waits (documented)."""
    daemon, port, _ = start(d)
    try:
        username, password = credentials("bob")
        answered = 0
        for i in range(30):
            conn = Dgram("127.0.%d.1" % (10 + i), port)
            nonce = nonce_of(conn)
            tid = os.urandom(12)
            conn.send_raw(allocate(tid, username, nonce, key_of(username, "guess-%d" % i)))
            answered += tid in conn.answers(1, 0.5)
            conn.close()
        print("30 guesses for one username from 30 prefixes: %d answered" % answered)
        check(answered <= USER_BUDGET + 1, "at most the username's budget (%d) answered, got %d"
              % (USER_BUDGET, answered))
        check(counters(daemon)["auth_throttled_user"] >= 30 - USER_BUDGET - 1,
              "auth_throttled_user counts the unanswered failures")
        fresh = Dgram("127.0.60.1", port)
        t0 = time.monotonic()
        r = allocate_with(fresh, username, password)
        fresh.close()
        check(r is not None and r[1] == SUCCESS,
              "the right password from a prefix that never failed allocates (%r)" % (r,))
        print("bob's right password from a clean /24: allocated in %.3f s"
              % (time.monotonic() - t0))
        failed = Dgram("127.0.39.1", port)
        r = allocate_with(failed, username, password, timeout=1.0)
        failed.close()
        check(r is None, "the right password from an address that guessed waits (%r)" % (r,))
    finally:
        daemon.stop()


def test_budget_off(d):
    """limits.auth_fail_prefix and auth_fail_user 0: no throttling (the behaviour of
    before), every guess answered."""
    daemon, port, tport = start(d, {"auth_fail_prefix": 0, "auth_fail_user": 0})
    try:
        conn = Stream("127.0.1.5", tport)
        wrong, right, _ = guess_run(conn, 40)
        conn.close()
        check(wrong == 40 and right is not None and right[1] == SUCCESS,
              "with the budgets off every guess is answered (%d, %r)" % (wrong, right))
    finally:
        daemon.stop()


def test_default_quota_room(d):
    """A 16-port relay range, user_quota unset: alice allocates until refused with 486
    (at 8, half the range), and bob still allocates. On main alice took every port and
    bob got 508."""
    daemon, port, _ = start(d, relay=QUOTA_RANGE)
    clients = []
    try:
        code = None
        for _ in range(24):
            c = Client(port, user="alice", bind="127.0.7.1")
            clients.append(c)
            code = error_code(c.allocate(expect="any")[3])
            if code is not None:
                break
        held = len(clients) - 1
        print("alice on a 16-port range: %d allocations, then %r" % (held, code))
        check(code == 486, "alice is refused by her quota (486), got %r" % code)
        check(held == 8, "the default quota is half the range (8), alice held %d" % held)
        bob = Client(port, user="bob", bind="127.0.7.2")
        clients.append(bob)
        r = bob.allocate(expect="any")
        check(error_code(r[3]) is None, "bob still allocates (%r)" % error_code(r[3]))
    finally:
        for c in clients:
            c.close()
        daemon.stop()


def test_spoofed_failures_block_nobody(d):
    """Found by attackwalk: failures under a nonce that is not ours were charged to the
    source address, and a UDP source address can be spoofed. 30 Allocates with a made-up
    nonce and wrong passwords sent from 127.0.13.5 (all that an off-path attacker who
    spoofs a victim's address can send: it never sees the victim's answers and nonce)
    blocked 127.0.13.5 from allocating on every transport, its own retransmissions keeping
    it blocked. Now a nonce not ours is answered 438 before the credentials are looked at
    (RFC 8489 9.2.4) and charges nothing: the victim's address allocates over UDP and TCP
    at once."""
    daemon, port, tport = start(d)
    try:
        spoofer = Dgram("127.0.13.5", port)
        user = "1999999999:mallory"
        for i in range(3 * BUDGET):
            spoofer.send_raw(allocate(os.urandom(12), user, b"made-up-nonce-%d" % i,
                                      key_of(user, "guess-%d" % i)))
        spoofer.close()
        wait_for(lambda: sum(counters(daemon)[k] for k in ("auth_fail_stale_nonce",
                                                          "auth_throttled_prefix"))
                 >= 3 * BUDGET, "the spoofed Allocates reached the workers", timeout=10)
        username, password = credentials("alice")
        for kind, conn in (("UDP", Dgram("127.0.13.5", port)),
                           ("TCP", Stream("127.0.13.5", tport))):
            r = allocate_with(conn, username, password)
            conn.close()
            check(r is not None and r[1] == SUCCESS,
                  "the spoofed address allocates over %s (%r)" % (kind, r))
    finally:
        daemon.stop()


def test_guessing_udp_foreign_nonce(d):
    """Under a nonce that is not ours the credentials are not looked at: 60 wrong passwords
    for alice and then her right one, under a made-up nonce over UDP from 127.0.14.5, all
    get the same answer (438 with a fresh nonce), so they teach a guesser nothing, and
    nothing is counted as a failure or charged (127.0.14.5 then allocates at once with our
    nonce). A guesser that uses our nonce proves its address and is capped by that
    address's budget, also when it spreads its guesses over 6 usernames (10 each, within
    the username budget): from 127.0.15.5 about limits.auth_fail_prefix wrong passwords
    are answered, and its right password for alice after them is not."""
    daemon, port, _ = start(d)
    try:
        conn = Dgram("127.0.14.5", port)
        username, password = credentials("alice")
        before = counters(daemon)
        tids = [os.urandom(12) for _ in range(UDP_GUESSES)]
        right = os.urandom(12)
        for i, tid in enumerate(tids):
            conn.send_raw(allocate(tid, username, b"made-up-nonce",
                                   key_of(username, "guess-%d" % i)))
        conn.send_raw(allocate(right, username, b"made-up-nonce", key_of(username, password)))
        got = conn.answers(UDP_GUESSES + 1, 4.0)
        codes = sorted(set(error_code(p[3]) for p in got.values()))
        print("%d wrong passwords and the right one under a made-up nonce over UDP: %d "
              "answered, codes %r" % (UDP_GUESSES, len(got), codes))
        check(len(got) == UDP_GUESSES + 1, "every one answered (%d)" % len(got))
        check(codes == [438], "all answered 438, the right password too (%r)" % codes)
        check(all(p[3][A_NONCE][0] != b"made-up-nonce" for p in got.values()),
              "each 438 carries a fresh nonce")
        after = counters(daemon)
        for k in ("auth_fail_bad_mac", "auth_fail_unknown_user", "auth_throttled_prefix",
                  "auth_throttled_user"):
            check(after[k] == before[k], "%s unchanged (%d -> %d)" % (k, before[k], after[k]))
        check(after["auth_fail_stale_nonce"] - before["auth_fail_stale_nonce"]
              == UDP_GUESSES + 1, "counted as stale nonces")
        r = allocate_with(conn, username, password)
        conn.close()
        check(r is not None and r[1] == SUCCESS,
              "127.0.14.5 allocates with our nonce at once (%r)" % (r,))
        spray = Dgram("127.0.15.5", port)
        nonce = nonce_of(spray)
        users = ["1999999999:user%d" % u for u in range(6)]
        tids = [os.urandom(12) for _ in range(UDP_GUESSES)]
        for i, tid in enumerate(tids):
            user = users[i % len(users)]
            spray.send_raw(allocate(tid, user, nonce, key_of(user, "guess-%d" % i)))
        spray.send_raw(allocate(right, username, nonce, key_of(username, password)))
        got = spray.answers(UDP_GUESSES + 1, 4.0)
        spray.close()
        wrong = sum(1 for t in tids if t in got)
        print("%d wrong passwords for %d usernames with our nonce from one address: %d "
              "answered, the right one after them: %r" % (UDP_GUESSES, len(users), wrong,
                                                        got.get(right)))
        check(wrong <= BUDGET + 1, "at most the source's budget (%d) answered, got %d"
              % (BUDGET, wrong))
        check(right not in got, "the right password after the budget is not answered")
        check(counters(daemon)["auth_throttled_prefix"] >= UDP_GUESSES - BUDGET - 1,
              "auth_throttled_prefix counts the dropped guesses")
    finally:
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_guessing_tcp, test_guessing_udp, test_guessing_distributed,
               test_budget_off, test_default_quota_room, test_spoofed_failures_block_nobody,
               test_guessing_udp_foreign_nonce])
