"""Per-allocation caps, relay-port accounting and hostile credentials against the real daemon.

From coturn's history: unbounded permission growth (one allocation, thousands of peers),
EVEN-PORT reservation leaks (commit 4adbd82e: the odd sibling port leaked until 508), and
USERNAME/REALM used as format strings (GHSA-4g7c-p5wg-j4hp). Each test asserts the answer
codes, the state the admin socket reports, and that the daemon keeps serving.
"""
import os
import re
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (ALLOCATE, A_EVEN_PORT, A_NONCE, A_REALM, A_TOKEN,  # noqa: E402
                           A_TRANSPORT, A_USERNAME, ERROR, REALM, REQUEST, Client, Daemon,
                           Failure, Peer, build, check, config, error_code, free_port, parse,
                           relay_range, run_tests)


def shm_max_perms():
    """SHM_ALLOC_MAX_PERMS from the source: the size of the record's inline array."""
    top = os.environ.get("top_srcdir", os.path.join(os.path.dirname(__file__), "..", ".."))
    with open(os.path.join(top, "shm", "shm_alloc.h")) as f:
        return int(re.search(r"#define SHM_ALLOC_MAX_PERMS (\d+)", f.read()).group(1))


def start(d, limits=None, relay=None, routes=("world", "loopback"), loglevel="all:INFO"):
    port = free_port()
    text = config(d, [("udp", port, "TURN-UDP", list(routes))],
                  {"world": ["0.0.0.0/0", "::/0"], "loopback": ["127.0.0.1"]},
                  limits=limits, relay=relay or relay_range(), loglevel=loglevel)
    return Daemon(d, text).start(), port


def relays_ok(port, tag):
    """A fresh allocation relays to a 127.0.0.1 peer and back."""
    sink = Peer("127.0.0.1")
    c = Client(port, user="probe")
    try:
        c.allocate()
        check(error_code(c.perm("127.0.0.1", sink.port)[3]) is None, tag + ": permission")
        c.send("127.0.0.1", sink.port, b"probe")
        got = sink.drain(1.0)
        check([g[0] for g in got] == [b"probe"], tag + ": relay out %r" % (got,))
        sink.sock.sendto(b"echo", got[0][1])
        check(c.recv_data(1.0) == b"echo", tag + ": relay back")
    finally:
        c.close()
        sink.close()


def perm_cap_run(d, configured, n=2000):
    daemon, port = start(d, limits={"max_permissions": configured})
    c = Client(port)
    try:
        c.allocate()
        codes = {}
        granted = 0
        t0 = time.monotonic()
        for i in range(n):
            ip = "10.%d.%d.%d" % (1 + i // 65536, (i // 256) % 256, i % 256)
            code = error_code(c.perm(ip, 9)[3])
            codes[code] = codes.get(code, 0) + 1
            if code is None:
                check(granted == i, "permission granted after a refusal (peer %d)" % i)
                granted += 1
        expect = min(configured, shm_max_perms())
        print("max_permissions %d: %d granted, answers %r, %.1fs (effective cap %d)"
              % (configured, granted, codes, time.monotonic() - t0, expect))
        check(granted == expect and codes.get(508) == n - expect and len(codes) == 2,
              "cap: expected %d granted and 508 for the rest, got %r" % (expect, codes))
        # Refreshing an existing permission is not a new one: still admitted at the cap.
        check(error_code(c.perm("10.1.0.0", 9)[3]) is None, "refresh at the cap refused")
        a = daemon.admin({"cmd": "allocations"})["allocations"]
        mine = [x for x in a if x["user"] == c.username]
        check(len(mine) == 1 and len(mine[0]["permissions"]) == expect,
              "admin shows %r permissions" % ([len(x["permissions"]) for x in mine],))
        relays_ok(port, "after %d CreatePermission" % n)
    finally:
        c.close()
        daemon.stop()


def test_permission_cap_configured(d):
    perm_cap_run(d, 8)


def test_permission_cap_record_size(d):
    # limits.max_permissions accepts up to the record's inline array (a larger value is a
    # config error); at that cap, thousands of peers must still stop there.
    perm_cap_run(d, shm_max_perms())


EVEN_R = [(A_EVEN_PORT, bytes([0x80]))]
RNG_SEEN = []  # the EVEN-PORT test's relay ports, for the failure message


def alloc_until(port, extra, want, tries, tag):
    """Allocates from fresh 5-tuples until `want` succeed (others on a worker whose share is
    exhausted get 508). Returns (clients, responses)."""
    clients, resps, codes = [], [], {}
    for _ in range(tries):
        if len(clients) == want:
            break
        c = Client(port)
        r = c.allocate(extra, expect="any")
        code = error_code(r[3])
        codes[code] = codes.get(code, 0) + 1
        if code is None:
            clients.append(c)
            resps.append(r)
        else:
            check(code == 508, tag + ": unexpected %r" % code)
            c.close()
    if len(clients) != want:
        got = sorted(c.relayed(r)[0][1] for c, r in zip(clients, resps))
        busy = subprocess.run(["ss", "-uanH"], capture_output=True, text=True).stdout
        raise Failure("%s: only %d of %d allocations (%r), ports %r; sockets on the range "
                      "held by others: %r" % (tag, len(clients), want, codes, got,
                                              [ln for ln in busy.splitlines()
                                               if any(":%d " % p in ln for p in RNG_SEEN)]))
    return clients, resps


def bindable(port):
    """Whether 127.0.0.1:port (UDP) is free right now."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_all(clients):
    for c in clients:
        r = c.request(4, [(0x000D, struct.pack("!I", 0))])
        check(error_code(r[3]) is None, "Refresh 0: %r" % (error_code(r[3]),))
        c.close()


def test_even_port_no_leak(d):
    # 12 ports (6 even pairs, shared by both workers) in 65100..65339: above the kernel's
    # ephemeral range and a window no other test uses, so every port of it can be counted.
    lo = 65100 + (os.getpid() % 20) * 12
    rng = (lo, lo + 11)
    RNG_SEEN[:] = range(lo, lo + 12)
    # One user takes every port of the window: this test counts ports, so user_quota is
    # unlimited here (its default stops a user at half a listener's range).
    daemon, port = start(d, relay=rng, limits={"user_quota": 0})
    try:
        # Redeemed reservations: A takes the even port and reserves the odd one, B redeems
        # the token (on any worker since the shared pool, issue 37; test_portpool.py
        # checks the first try succeeds).
        for rnd in range(24):
            a = Client(port)
            r = a.allocate(EVEN_R)
            (_, pa), = a.relayed(r)
            token = r[3][A_TOKEN][0]
            check(pa % 2 == 0, "EVEN-PORT gave odd port %d" % pa)
            got = None
            for _ in range(40):
                b = Client(port)
                rb = b.allocate([(A_TOKEN, token)], expect="any")
                if error_code(rb[3]) is None:
                    got = b
                    break
                check(error_code(rb[3]) == 508, "redeem: %r" % error_code(rb[3]))
                b.close()
            check(got is not None, "round %d: token never redeemed" % rnd)
            (_, pb), = got.relayed(rb)
            check(pb == pa + 1, "token gave port %d for reservation %d" % (pb, pa + 1))
            free_all([a, got])
        # EVEN-PORT without R (coturn leaked the odd sibling here) and unredeemed R=1
        # reservations, left to expire (30 s).
        for rnd in range(12):
            a = Client(port)
            a.allocate([(A_EVEN_PORT, bytes([0]))])
            free_all([a])
        stale = []
        for rnd in range(6):
            a = Client(port)
            r = a.allocate(EVEN_R, expect="any")
            if error_code(r[3]) is None:
                stale.append(r[3][A_TOKEN][0])
                free_all([a])
            else:  # the even pairs are all held by reservations now
                check(error_code(r[3]) == 508, "EVEN-PORT R: %r" % error_code(r[3]))
                a.close()
        check(stale, "no reservation was made")
        time.sleep(31.5)  # reservation lifetime 30 s + a wheel tick; bounded
        for token in stale:
            c = Client(port)
            code = error_code(c.allocate([(A_TOKEN, token)], expect="any")[3])
            check(code == 508, "expired token redeemed: %r" % code)
            c.close()
        # Every port of the range is allocatable again, and then the range is full. The
        # range lies in the kernel's ephemeral range, so another program's socket may hold
        # a port right now: such a port is one we cannot bind either (a port the worker
        # leaked is only booked in its pool, not bound, so this does not hide a leak).
        busy = [p for p in range(rng[0], rng[1] + 1) if not bindable(p)]
        want = [p for p in range(rng[0], rng[1] + 1) if p not in busy]
        clients, resps = alloc_until(port, [], len(want), 300, "after reservation loops")
        ports = sorted(c.relayed(r)[0][1] for c, r in zip(clients, resps))
        check(ports == want, "ports %r != range %r less busy %r" % (ports, rng, busy))
        extra = Client(port)
        check(error_code(extra.allocate(expect="any")[3]) == 508, "13th allocation admitted")
        extra.close()
        free_all(clients)
        print("EVEN-PORT: 24 redeemed, 12 R=0, %d expired reservations; all %d ports free "
              "(held by other programs: %r)" % (len(stale), len(want), busy))
    finally:
        daemon.stop()


HOSTILE = [b"%s%n%x%n%s%p", b"9999999999:%s%n%x", b"\"quoted' `back`\\", b"a\nb\r\n[crit] forged",
           b"\x00nul", b"B" * 200, b"%n" * 5120, b"A" * 10240, "\u00e9\u202e".encode()]


def raw_allocate(port, username, realm, nonce=None, timeout=2.0):
    """Allocate with the given USERNAME/REALM/NONCE and a MESSAGE-INTEGRITY under a key that
    matches nothing; returns the error code (None for success, 'none' for no answer).
    Without a nonce, the one the server gives this socket's address (an unauthenticated
    Allocate's 401) is used: a nonce not ours is answered 438 before the credentials are
    looked at (RFC 8489 9.2.4)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        if nonce is None:
            tid = os.urandom(12)
            s.sendto(build(ALLOCATE, REQUEST, tid, [(A_TRANSPORT, bytes([17, 0, 0, 0]))]),
                     ("127.0.0.1", port))
            p = parse(s.recv(70000))
            check(p is not None and p[2] == tid and error_code(p[3]) == 401,
                  "no 401 challenge: %r" % (p,))
            nonce = p[3][A_NONCE][0]
        tid = os.urandom(12)
        attrs = [(A_TRANSPORT, bytes([17, 0, 0, 0])), (A_USERNAME, username),
                 (A_REALM, realm), (A_NONCE, nonce)]
        s.sendto(build(ALLOCATE, REQUEST, tid, attrs, key=b"k" * 16), ("127.0.0.1", port))
        try:
            p = parse(s.recv(70000))
        except socket.timeout:
            return "none"
        check(p is not None and p[2] == tid and p[1] == ERROR, "bad answer %r" % (p,))
        return error_code(p[3])
    finally:
        s.close()


def test_hostile_username_realm(d):
    # Every auth failure reaches the log; every hostile request gets its answer checked, so
    # the guessing budgets (which drop failures past 10 a minute from one prefix,
    # test_security_guessing.py) are off here.
    daemon, port = start(d, loglevel="all:TRACE",
                         limits={"auth_fail_prefix": 0, "auth_fail_user": 0})
    try:
        c = Client(port)
        c.allocate()
        results = []
        for u in HOSTILE:
            results.append(("username", u[:12], len(u),
                            raw_allocate(port, u, REALM.encode())))
            results.append(("realm", u[:12], len(u),
                            raw_allocate(port, c.username.encode(), u)))
            results.append(("nonce", u[:12], len(u),
                            raw_allocate(port, c.username.encode(), REALM.encode(), u)))
        for what, head, n, code in results:
            print("%-8s %-16r len %5d -> %s" % (what, head, n, code))
            # Malformed (a NUL, or longer than the record holds: 128 bytes of username,
            # docs/relay.md; RFC 8489's 763 bytes of realm or nonce) is 400; a hostile nonce
            # (not ours) is 438 with a fresh one; anything else that does not verify is 401.
            limit = 128 if what == "username" else 763
            want = 400 if (b"\0" in head or n > limit) else 438 if what == "nonce" else 401
            check(code == want, "%s %r: answer %r, want %r" % (what, head, code, want))
        # Valid credentials whose user id is hostile: the username reaches the log line of
        # the allocation and the admin socket's JSON.
        valid = 1
        # (A newline in it forges log lines: test_security_loginject.py, not in make check.)
        for uid in ("%s%n%x%n", "q\"'`\\", "\u202eevil", "tab\there"):
            v = Client(port, user=uid)
            code = error_code(v.allocate(expect="any")[3])
            print("valid credential, user id %r -> %s" % (uid, code))
            check(code in (None, 400), "user id %r: %r" % (uid, code))
            valid += code is None
            v.close()
        users = [a["user"] for a in daemon.admin({"cmd": "allocations"})["allocations"]]
        check(len(users) == valid, "admin lists %r" % (users,))
        st = daemon.admin({"cmd": "status"})
        check(st["allocations"] == valid, "allocations %r" % st["allocations"])
        relays_ok(port, "after hostile credentials")
        c.close()
    finally:
        daemon.stop()
    log = daemon.stderr()
    lines = log.splitlines()
    check(not any(line.startswith("[crit] forged") or line.startswith("b\r")
                  for line in lines), "a newline in a username forged a log line")
    longest = max(len(line) for line in lines)
    print("log: %d lines, longest %d chars" % (len(lines), longest))
    check(longest < 4096, "a log line of %d chars" % longest)
    check("%n" * 20 not in log, "a 10 KB username was logged verbatim")


if __name__ == "__main__":
    run_tests([test_permission_cap_configured, test_permission_cap_record_size,
               test_hostile_username_realm, test_even_port_no_leak])
