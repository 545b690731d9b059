#!/usr/bin/env python3
"""An RFC 6062 ConnectionBind for another worker's CONNECTION-ID moves its connection to
that worker only once it authenticates (attacker walk aw2, F3, F4, F6). Two workers.

- TLS, no credentials: 120 TLS connections from one address each send an unauthenticated
  ConnectionBind naming slot 0 or 1 (so about half name the other worker). Each is
  answered 401 where it arrived and stays there: the workers' descriptors stay within the
  per-source budget (64 connections) while they are open, and are back where they were
  once the pre-authentication deadline closed them. (Before: each such connection was
  handed over at once, its TLS session left behind in a bridge (2 descriptors, 2 buffers)
  outside every budget and deadline: +2 descriptors each, still there after the deadline.)
- Ping-pong: one plain TURN-TCP connection sends an unauthenticated ConnectionBind naming
  slot 0, then 1, then 0, ... twice a second. It is closed at limits.preauth_timeout (2 s
  here; checked against a generous 12 s). (Before: each hand-off restarted its deadlines,
  and it was still open after 12 s.)
- The same with credentials but another connection's nonce: the ConnectionBind
  authenticates where it arrives and moves, the owner refuses the nonce (438), and so on
  back and forth. The hand-off carries the connection's age: closed at preauth_timeout.
  (Before: each hop restarted its deadlines.)
- TLS bridge: a TLS data connection bound through the worker that does not own its
  allocation is bridged there; when the owner closes the plain end (the allocation ended
  with its control connection), the bridge closes too, though the client stays silent.
  (Before: it sent close_notify and waited for the client's end for ever.)
- PROXY protocol: behind a TURN-TCP listener with proxy_protocol, a connection whose
  header says 10.1.2.3 sends an authenticated ConnectionBind for an unknown CONNECTION-ID
  of slot s (s = 0, 1: one of the two names the other worker, which the connection then
  moves to), gets 400, and a Binding on it then still maps to 10.1.2.3. (Before: after the
  hand-off the connection was the proxy's address.)

- Stored key: a TCP allocation makes 8 peer connections; then its REST username expires
  (strict_expiry off, the default), or the secret is rotated by a reload, or nothing
  changes (control); then each gets a new data connection whose ConnectionBind carries the
  allocation's credentials. Every bind succeeds, wherever the kernel puts it: the worker
  that does not own the allocation checks the allocation's stored key, as the owner does.
  (Before: it checked the listener's current credentials and answered 401 to the binds
  it received, about half of them, in the first two cases.)
- Bounded lookups: one connection sends 2,000 ConnectionBinds naming a user with an
  allocation, with a bad MAC, for the other worker's slot. With the failed-auth budget, past
  it they are dropped before the record is looked for (about 10 walks of the table); with
  none, the worker's walks stop at its bucket (64 at once, 64 a second) and the rest are
  counted as limited. The user's own binds succeed after each. (Before: every one walked.)
- Failures charged: the same floods with an expired REST username ("1:alice") of a user
  with an allocation, a wrong REALM, and an expired username of a user with none: each
  walks at most about the source budget and is refused past it, whether or not the user
  has an allocation; after a realm change the user budget refuses under the key it was
  charged with (the listener's realm). (Before: none was charged: 65 walks, every bind
  answered.)

Legitimate binds across workers (a fresh nonce or the control connection's) are covered
by test_tcp_relay.py, test_relay_tls and test_handoff_burst.py. Every wait is bounded.
"""
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_CONNECTION_ID, A_NONCE, A_REALM, A_USERNAME,  # noqa: E402
                           CONNECTION_BIND, REQUEST, SECRET, Daemon, StreamClient, TcpPeer,
                           binding_request, build, check, config, credentials, daemon_pids,
                           error_code, free_port, parse, parse_xor_mapped, run_tests,
                           take_frame, tls_connect, wait_for)

PREAUTH_S = 2
SOURCE_CONNS = 64       # limits.source_connections default
LIMITS = {"preauth_timeout": PREAUTH_S}
RELAY = (20100, 20119)  # never bound (no allocation relays), unique in tests/
STORED_RELAY = (20140, 20159)   # test_bind_stored_key's, unique in tests/
LOOKUP_RELAY = (20160, 20179)   # test_bind_lookups_bounded's, unique in tests/
CHARGED_RELAY = (20200, 20219)  # test_bind_failures_charged's, unique in tests/
CHARGED_USER_BUDGET = 5         # its limits.auth_fail_user after the realm change
FLOOD = 2000            # ConnectionBinds one connection sends in test_bind_lookups_bounded
AUTH_FAIL_PREFIX = 10   # limits.auth_fail_prefix (the default, written down)
WALK_BURST = WALK_RATE = 64     # a worker's walks of the table for them (worker/auth.c)


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def worker_fds(daemon):
    """Open descriptors of the workers together."""
    return sum(fds(pid) for pid in daemon_pids(daemon)[1:])


def cbind(slot, attrs=(), key=None):
    """A ConnectionBind for an unknown CONNECTION-ID of slot (signed with key)."""
    tid = os.urandom(12)
    return build(CONNECTION_BIND, REQUEST, tid,
                 [(A_CONNECTION_ID, struct.pack("!I", 0x5a5a5a00 | slot))] + list(attrs), key)


def test_tls_unauth_bind_stays(d):
    from test_tcp_relay import tls_tcp_config
    text, tls_port, _ = tls_tcp_config(d)
    text += "limits:\n  preauth_timeout: %d\n" % PREAUTH_S
    daemon = Daemon(d, text).start()
    socks = []
    try:
        base = worker_fds(daemon)
        for i in range(120):
            try:
                s = tls_connect(tls_port)
            except OSError:
                continue    # the budget closed it during the handshake: fine
            s.sendall(cbind(i % 2))
            socks.append(s)
        time.sleep(1.0)     # let hand-offs (there should be none) arrive
        held = worker_fds(daemon) - base
        check(held <= SOURCE_CONNS + 16,
              "workers hold %d more descriptors for 120 unauthenticated connections of one "
              "address (budget %d)" % (held, SOURCE_CONNS))
        # TLS's first deadline is the 10 s handshake one (preauth takes effect from there).
        wait_for(lambda: worker_fds(daemon) <= base + 4,
                 "descriptors back after the pre-auth deadline (base %d)" % base, timeout=30)
    finally:
        for s in socks:
            s.close()
        daemon.stop()


def drain_until(s, deadline):
    """Reads s (answers) until deadline; False once it is closed."""
    for _ in range(64):
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        s.settimeout(left)
        try:
            if s.recv(4096) == b"":
                return False
        except socket.timeout:
            return True
        except OSError:
            return False
    return True


def test_tls_bridge_ends_with_plain_end(d):
    """A data connection that came over TURN-TLS to the worker that does not own its
    allocation is bridged there (its TLS session cannot move). When the owner closes the
    plain end (here: the allocation ends with its control connection), the bridge closes
    too, although the client keeps its side open. (Before: the bridge sent close_notify
    and waited for the client's end for ever, 2 descriptors and 2 buffers.)"""
    from test_tcp_relay import close_all, open_data, tls_tcp_config
    text, tls_port, _ = tls_tcp_config(d)
    peers = [TcpPeer("127.0.0.1") for _ in range(16)]
    daemon = Daemon(d, text).start()
    dcs = []
    try:
        ctl = StreamClient(tls_port, sock=tls_connect(tls_port))
        ctl.allocate_tcp()
        me = "127.0.0.1:%d" % ctl.sock.getsockname()[1]
        owner = [a["worker"] for a in daemon.allocations() if a["client"] == me][0]
        other = daemon_pids(daemon)[1 + (1 - owner)]
        base = fds(other)
        for p in peers:     # until the kernel gives one to the other worker (1 in 2)
            dcs.append(open_data(tls_port, ctl.creds(), ctl.connect("127.0.0.1", p.port),
                                 tls=True))
            if fds(other) >= base + 2:
                break
        check(fds(other) >= base + 2, "no data connection bridged by the other worker")
        ctl.close()
        wait_for(lambda: fds(other) <= base,
                 "the other worker's bridges closed with their plain ends", timeout=15)
    finally:
        close_all(daemon, dcs + peers)


def tcp_daemon(d):
    """Two workers, one TURN-TCP listener: (daemon, port)."""
    port = free_port()
    text = config(d, [("tcp", port, "TURN-TCP", ["t"])], {"t": ("TCP", ["127.0.0.1"])},
                  limits=LIMITS, relay=RELAY)
    return Daemon(d, text).start(), port


def bounce(port, msg, what):
    """A new connection sends msg(i), a ConnectionBind for slot i % 2, every 0.5 s (24 at
    most); fails the test unless the server closes it within those 12 s."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    t0, closed = time.monotonic(), False
    for i in range(24):
        try:
            s.sendall(msg(i))
        except OSError:
            closed = True
            break
        closed = not drain_until(s, t0 + 0.5 * (i + 1))
        if closed:
            break
    s.close()
    check(closed, "%s bouncing between workers still open after %.1f s (preauth_timeout "
          "%d s)" % (what, time.monotonic() - t0, PREAUTH_S))


def test_pingpong_closed(d):
    daemon, port = tcp_daemon(d)
    try:
        bounce(port, lambda i: cbind(i % 2), "unauthenticated connection")
    finally:
        daemon.stop()


def test_pingpong_deadline_kept(d):
    """With credentials but another connection's nonce, a ConnectionBind for the other
    worker's slot authenticates where it arrives (the nonce may be the control
    connection's) and moves; the owner refuses the nonce (438) and the connection is
    unauthenticated there. Bouncing so keeps it moving, but the hand-off carries its age:
    it is closed at preauth_timeout (2 s; checked against 12 s). (Before: each hop
    restarted its deadlines.)"""
    daemon, port = tcp_daemon(d)
    try:
        other = StreamClient(port)
        other.challenge()       # a nonce bound to other's address, not the bouncer's
        bounce(port, lambda i: cbind(i % 2, other.auth_attrs(), other.key),
               "authenticated connection")
        other.close()
    finally:
        daemon.stop()


def bind_all(port, ctl, peers, what):
    """ctl's TCP allocation connects to each peer, then one data connection per
    CONNECTION-ID binds with ctl's credentials: every ConnectionBind must succeed. Returns
    the data connections (to close)."""
    cids = [ctl.connect("127.0.0.1", p.port) for p in peers]
    dcs = [StreamClient(port, creds=ctl.creds()) for _ in cids]
    codes = [dc.connection_bind(cid) for dc, cid in zip(dcs, cids)]
    check(codes == [None] * len(cids), "%s: ConnectionBind answers %r (None: success)"
          % (what, codes))
    return dcs


def binds_after(d, what, lifetime, change):
    """A TCP allocation of a REST user valid for lifetime s, 8 connected peer connections,
    change(daemon, config text, username), then one data connection per CONNECTION-ID
    with the allocation's credentials: every ConnectionBind must succeed."""
    from test_tcp_relay import close_all
    port = free_port()
    text = config(d, [("tcp", port, "TURN-TCP", ["t"])], {"t": ("TCP", ["127.0.0.1"])},
                  relay=STORED_RELAY)
    peers = [TcpPeer("127.0.0.1") for _ in range(8)]
    daemon = Daemon(d, text).start()
    ctl = StreamClient(port)
    socks = peers + [ctl]
    try:
        ctl.username, ctl.password = credentials("alice", lifetime=lifetime)
        ctl.key = ctl.key_of(ctl.password)
        ctl.allocate_tcp()
        cids = [ctl.connect("127.0.0.1", p.port) for p in peers]
        change(daemon, text, ctl.username)
        codes = []
        for cid in cids:
            dc = StreamClient(port, creds=ctl.creds())
            socks.append(dc)
            codes.append(dc.connection_bind(cid))
        check(codes == [None] * len(cids), "%s: ConnectionBind answers %r (None: success)"
              % (what, codes))
    finally:
        close_all(daemon, socks)


def past_expiry(username):
    """Sleeps until a second after the REST username's expiry (at most 10 s)."""
    time.sleep(min(10.0, max(0.0, int(username.split(":")[0]) + 1.5 - time.time())))


def test_bind_stored_key(d):
    binds_after(d, "control", 3600, lambda daemon, text, user: None)
    binds_after(d, "REST username expired", 4, lambda daemon, text, user: past_expiry(user))
    binds_after(d, "secret rotated by a reload", 3600,
                lambda daemon, text, user: daemon.reload(text.replace(SECRET, SECRET + "new",
                                                                      1)))


def lookups(daemon):
    """The workers' bind_walked, bind_cached, bind_limited and auth_throttled_prefix."""
    c = daemon.admin({"cmd": "stats"})["counters"]
    return [c.get(k, 0) for k in ("bind_walked", "bind_cached", "bind_limited",
                                  "auth_throttled_prefix")]


def flood_binds(port, user, src="127.0.0.2", realm=None):
    """A connection from src (budgets of its own) and the ConnectionBind it floods with:
    naming user (who has an allocation), with a MAC that does not verify, in realm (the
    listener's by default), for the slot of the worker it did not reach (a probe tells
    which: the own slot answers 438 to a nonce that is not ours, another's checks the
    credentials). Returns (its socket, its StreamClient, the ConnectionBind)."""
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    sc = StreamClient(port, sock=s)
    attrs = [(A_USERNAME, user.encode()), (A_REALM, (realm or sc.realm).encode()),
             (A_NONCE, b"not-a-nonce-of-ours")]

    def cb(slot):
        return build(CONNECTION_BIND, REQUEST, os.urandom(12),
                     [(A_CONNECTION_ID, struct.pack("!I", 0x5a5a5a00 | slot))] + attrs,
                     b"\x00" * 16)
    probe = cb(0)
    r = sc.transact(probe, probe[8:20], timeout=10)
    check(r is not None and error_code(r[3]) in (401, 438), "probe: %r" % (r,))
    msg = cb(0 if error_code(r[3]) == 401 else 1)
    return s, sc, msg


def flood(daemon, s, sc, msg):
    """Sends msg FLOOD times on s, reading what comes back, then a Binding and waits for
    its answer (30 s at most). Returns (counters before, seconds taken)."""
    import select
    before = lookups(daemon)
    t0 = time.monotonic()
    for _ in range(FLOOD):
        s.sendall(msg)
        while select.select([s], [], [], 0)[0]:
            data = s.recv(65536)
            check(data, "the flooding connection was closed")
            sc.buf += data
            while take_frame(sc.buf)[0] is not None:
                sc.buf = take_frame(sc.buf)[1]
    req, tid = binding_request()
    s.sendall(req)
    deadline = t0 + 30
    for _ in range(FLOOD + 8):
        f = sc.frame(deadline - time.monotonic())
        check(f is not None, "no Binding answer after the ConnectionBinds")
        p = parse(f)
        if p and p[2] == tid:
            break
    return before, time.monotonic() - t0


def alice_daemon(d, relay):
    """A daemon (2 workers, one TURN-TCP listener, the default failed-auth budget per
    source written down) and alice's TCP allocation on it with 8 peers ready to connect
    in: (daemon, port, text, ctl, peers). The caller closes them (close_all), this on a
    failure of its own."""
    port = free_port()
    limits = {"preauth_timeout": 120, "auth_fail_prefix": AUTH_FAIL_PREFIX}
    text = config(d, [("tcp", port, "TURN-TCP", ["t"])], {"t": ("TCP", ["127.0.0.1"])},
                  limits=limits, relay=relay)
    daemon = Daemon(d, text).start()
    peers = [TcpPeer("127.0.0.1") for _ in range(8)]
    ctl = StreamClient(port)
    try:
        ctl.username, ctl.password = credentials("alice", lifetime=3600)
        ctl.key = ctl.key_of(ctl.password)
        ctl.allocate_tcp()
    except BaseException:
        from test_tcp_relay import close_all
        close_all(daemon, peers + [ctl])
        raise
    return daemon, port, text, ctl, peers


def test_bind_lookups_bounded(d):
    """A connection that sends ConnectionBinds in a loop for another worker's slot, naming
    a user with an allocation, costs that worker a bounded number of walks of the table.
    With the default failed-auth budget, its bad MACs are refused before any lookup once
    the budget is spent (about AUTH_FAIL_PREFIX walks of FLOOD); with no budget, the
    walks stop at the worker's bucket (each bind is looked up once: walked or limited).
    The allocation's own binds succeed after either. (Before: every one of the FLOOD binds
    walked the table.)"""
    from test_tcp_relay import close_all
    daemon, port, text, ctl, peers = alice_daemon(d, LOOKUP_RELAY)
    socks = peers + [ctl]
    try:
        s, sc, msg = flood_binds(port, ctl.username)
        socks.append(sc)
        before, _ = flood(daemon, s, sc, msg)
        after = lookups(daemon)
        walked, _, limited, refused = [a - b for a, b in zip(after, before)]
        check(walked <= AUTH_FAIL_PREFIX + 2 and limited == 0 and
              refused >= FLOOD - AUTH_FAIL_PREFIX - 2,
              "%d bad-MAC binds with a budget of %d: walked %d, limited %d, refused %d"
              % (FLOOD, AUTH_FAIL_PREFIX, walked, limited, refused))
        socks += bind_all(port, ctl, peers[:4], "after the budgeted flood")

        daemon.reload(text.replace("  auth_fail_prefix: %d\n" % AUTH_FAIL_PREFIX,
                                   "  auth_fail_prefix: 0\n  auth_fail_user: 0\n", 1))
        s, sc, msg = flood_binds(port, ctl.username)
        socks.append(sc)
        before, took = flood(daemon, s, sc, msg)
        after = lookups(daemon)
        walked, cached, limited, _ = [a - b for a, b in zip(after, before)]
        most = WALK_BURST + WALK_RATE * (int(took) + 1)
        check(walked + limited == FLOOD and walked <= most and cached == 0,
              "%d bad-MAC binds without a budget in %.1f s: walked %d (at most %d), cached "
              "%d, limited %d" % (FLOOD, took, walked, most, cached, limited))
        socks += bind_all(port, ctl, peers[4:], "after the unbudgeted flood")
    finally:
        close_all(daemon, socks)


def test_bind_failures_charged(d):
    """Every foreign ConnectionBind that fails once it is well formed is charged to the
    failed-auth budget, whatever the reason, so a source's walks of the table stay within
    its budget (review15 items 1, 2). One connection each (its own source) floods FLOOD
    binds for the other worker's slot with a bad MAC: an expired REST username of a user
    with an allocation ("1:alice": no record has that username, the listener's lookup says
    expired), the allocation's username with a wrong REALM, and an expired username of a
    user with none ("1:zed", which walks nothing). Each walks at most about AUTH_FAIL_PREFIX
    times and the rest are refused before any lookup; "1:zed" is refused as often as
    "1:alice", so the answers do not tell whether a user has an allocation. The user's own
    binds succeed after them. Then, with a user budget below the source one and the realm
    changed by a reload, binds in the allocation's (old) realm are charged and refused under
    the same key, the listener's realm: walks stay within the user budget (review15 item
    3). (Before: "1:alice" and the wrong REALM were never charged: each bind was looked up,
    walked 65 (the worker's bucket), limited the rest, refused none; "1:zed" was answered
    every time; after the realm change the user key refused before the lookup was not the
    one charged: walked 65.)"""
    from test_tcp_relay import close_all
    daemon, port, text, ctl, peers = alice_daemon(d, CHARGED_RELAY)
    socks = peers + [ctl]
    try:
        floods = [("expired username 1:alice", "1:alice", None, "127.0.0.3"),
                  ("wrong REALM", ctl.username, "not." + ctl.realm, "127.0.0.4"),
                  ("expired username of a user without allocation", "1:zed", None,
                   "127.0.0.5")]
        for what, user, realm, src in floods:
            s, sc, msg = flood_binds(port, user, src, realm)
            socks.append(sc)
            before, _ = flood(daemon, s, sc, msg)
            walked, cached, limited, refused = [a - b for a, b in
                                                zip(lookups(daemon), before)]
            check(walked <= AUTH_FAIL_PREFIX + 2 and limited == 0 and
                  refused >= FLOOD - AUTH_FAIL_PREFIX - 2,
                  "%d binds, %s, with a budget of %d: walked %d, cached %d, limited %d, "
                  "refused %d" % (FLOOD, what, AUTH_FAIL_PREFIX, walked, cached, limited,
                                  refused))
        socks += bind_all(port, ctl, peers[:4], "after the floods")

        # Item 3: a user budget (5) below the source's (1000), the realm changed.
        old_realm = ctl.realm
        text = text.replace("  auth_fail_prefix: %d\n" % AUTH_FAIL_PREFIX,
                            "  auth_fail_prefix: 1000\n  auth_fail_user: %d\n"
                            % CHARGED_USER_BUDGET, 1)
        line = "  realm: %s\n" % old_realm
        check(line in text, "no realm line in the configuration")
        daemon.reload(text.replace(line, "  realm: new.%s\n" % old_realm, 1))
        s, sc, msg = flood_binds(port, ctl.username, "127.0.0.6", old_realm)
        socks.append(sc)
        before = lookups(daemon)
        c0 = daemon.admin({"cmd": "stats"})["counters"].get("auth_throttled_user", 0)
        flood(daemon, s, sc, msg)
        walked, _, limited, _ = [a - b for a, b in zip(lookups(daemon), before)]
        c1 = daemon.admin({"cmd": "stats"})["counters"].get("auth_throttled_user", 0)
        check(walked <= CHARGED_USER_BUDGET + 2 and limited == 0 and
              c1 - c0 >= FLOOD - CHARGED_USER_BUDGET - 2,
              "%d binds in the allocation's realm after a realm change, user budget %d: "
              "walked %d, limited %d, refused for the username %d"
              % (FLOOD, CHARGED_USER_BUDGET, walked, limited, c1 - c0))
        socks += bind_all(port, ctl, peers[4:], "after the realm change")
    finally:
        close_all(daemon, socks)


V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def pp_v2(src, sport, dport):
    return (V2_SIG + bytes([0x21, 0x11]) + struct.pack("!H", 12) + socket.inet_aton(src)
            + socket.inet_aton("127.0.0.1") + struct.pack("!HH", sport, dport))


def test_proxy_address_survives_handoff(d):
    port = free_port()
    text = config(d, [("pp", port, "TURN-TCP", ["t"])], {"t": ("TCP", ["127.0.0.1"])},
                  limits=LIMITS, relay=RELAY)
    text = text.replace("    routes: [t]\n", "    proxy_protocol:\n      versions: [2]\n"
                        "      trusted: [\"127.0.0.1/32\"]\n    routes: [t]\n", 1)
    daemon = Daemon(d, text).start()
    try:
        for slot in (0, 1):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(pp_v2("10.1.2.3", 4444 + slot, port))
            sc = StreamClient(port, sock=s)
            r = sc.request(CONNECTION_BIND,
                           [(A_CONNECTION_ID, struct.pack("!I", 0x5a5a5a00 | slot))])
            check(error_code(r[3]) == 400, "ConnectionBind of an unknown id of slot %d: %r"
                  % (slot, error_code(r[3])))
            req, tid = binding_request()
            r = sc.transact(req, tid)
            check(r is not None, "no Binding answer")
            got = parse_xor_mapped(sc.last_raw, tid)
            check(tuple(got) == ("10.1.2.3", 4444 + slot),
                  "XOR-MAPPED-ADDRESS after a ConnectionBind for slot %d: %r" % (slot, got))
            sc.close()
    finally:
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_tls_unauth_bind_stays, test_tls_bridge_ends_with_plain_end,
               test_pingpong_closed, test_pingpong_deadline_kept,
               test_proxy_address_survives_handoff, test_bind_stored_key,
               test_bind_lookups_bounded, test_bind_failures_charged])
