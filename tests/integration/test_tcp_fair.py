"""RFC 6062 pools that every user of a worker shares, against the real daemon (one worker):
one user filling them takes from itself, not from everyone else (DESIGN.md 10, "a full
budget evicts the attacker's oldest item rather than refusing everyone's newest").

- Connects in flight (limits.tcp_pending_connects): an attacker holds all 8 with Connects
  to peers that drop SYNs (their accept queue is full). Its next Connect gets 508; another
  user's Connect to a live peer succeeds, and the attacker's oldest Connect is answered 447
  (counted as tcp_evict_connects, not as a refused Connect: tcp_connect_limit counts the
  508 only).
- Peer connections (the descriptors the worker holds, within its limit less a reserve:
  worker/tcprelay.c wk_tcpr_room): with a table of 40 and the descriptor limit the master
  asks for (2 x 40 + 1024 = 1104), an attacker within its quota (20 allocations) opens 64
  peer connections per TCP allocation to peers that complete the handshake and never
  accept. Another user's UDP Allocate then still succeeds, and so does its Connect: the
  attacker's newest peer connection (bound to a data connection by then) ends for it
  (counted in tcp_evict_peer_connections).
- The same limit, one user alone opening 5 x 64 = 320 peer connections: the worker holds
  some 700 descriptors with them, so all are made, none refused and none ended (a budget
  fixed at (1104 - 2 x 40) / 4 = 256 per worker refused 64 with 508).
- Taken over by a live upgrade, peer connections stay older than any made since and keep
  their age among themselves: one allocation fills the budget, two upgrades, another
  user's Connect ends its newest, not its oldest (restored ones were appended to the
  worker's queue newest first, so the oldest were taken as the newest).
  Relay ports 24600-24619 (no other test's: the upgrade binds them again).
- Peers that connect in to an allocation's relay listener (ConnectionAttempt) count in the
  same budget: refused (reset) once it is full, and the newest of them ends for another
  user's Connect, not the oldest.
- A pair bound over TURN-TLS weighs four descriptors (its bridge's two besides the peer's
  and the data connection's), a plain pair two: K pairs bound over TLS leave room for
  K fewer peer connections than K bound over TCP.
  New daemons: relay ports 24620-24639, 24640-24659 (24600-24699: this file).
Every wait is bounded.
"""
import os
import resource
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_CONNECTION_ID, A_PEER, A_RELAYED, CONNECT, INDICATION,  # noqa: E402
                           REQUEST, Client, Daemon, Failure, StreamClient, TcpPeer, check, config,
                           error_code, free_port, make_cert, parse, parse_xor_addr,
                           peer_socket, relay_range, run_tests, stop_master, tls_connect,
                           upgrade, wait_for, xor_addr)
from test_tcp_relay import close_all  # noqa: E402


def start(d, limits, nofile=None, relay=None, tls=False):
    """A daemon of one worker with a TURN-TCP and a TURN-UDP listener on one port, both
    routed to 127.0.0.1 (TCP and UDP clusters). nofile: the descriptor limit it starts
    under (soft; the master keeps a limit at least as large as it wants). tls: also a
    TURN-TLS listener with the same route, its port in daemon.tls_port."""
    port = free_port()
    listeners = [("tcp", port, "TURN-TCP", ["tcpc"]), ("udp", port, "TURN-UDP", ["udpc"])]
    if tls:
        tls_port = free_port()
        listeners.append(("tls", tls_port, "TURN-TLS", ["tcpc"]))
    text = config(d, listeners, {"tcpc": ("TCP", ["127.0.0.1"]), "udpc": ["127.0.0.1"]},
                  limits=limits, workers=1, relay=relay or relay_range())
    if tls:
        crt, key = make_cert(d, "turn.test")
        text = text.replace("    port: %d\n" % tls_port, "    port: %d\n    cert_file: %s\n"
                            "    key_file: %s\n" % (tls_port, crt, key), 1)
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    if nofile is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, old[1]))
    try:
        daemon = Daemon(d, text, workers=1).start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)
    if tls:
        daemon.tls_port = tls_port
    return daemon, port


def counter(daemon, name):
    return daemon.admin({"cmd": "stats"})["counters"].get(name, 0)


def send_connect(c, ip, port):
    """A Connect sent without waiting for its answer; its transaction id."""
    tid = os.urandom(12)
    attrs = [(A_PEER, xor_addr(ip, port, tid))] + c.auth_attrs()
    c.send_raw(c.build(CONNECT, REQUEST, tid, attrs, c.key))
    return tid


def answers(c, n, timeout, cids=None):
    """{tid: error code or None} of up to n Connect answers read within timeout; cids (a
    dict): the CONNECTION-ID of each success by tid."""
    got = {}
    for _ in range(n):
        f = c.frame(timeout)
        if f is None:
            break
        p = parse(f)
        if p and p[0] == CONNECT:
            got[p[2]] = error_code(p[3])
            if got[p[2]] is None and cids is not None:
                cids[p[2]] = p[3][A_CONNECTION_ID][0]
    return got


def ended(sock, timeout):
    """Whether stream sock (a data connection's, a peer's) reads EOF or a reset within
    timeout."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def victim_connects(port, clients, peer_port, when):
    """Another user's TCP allocation Connects to a live peer: checks it succeeds."""
    v = StreamClient(port, user="victor")
    clients.append(v)
    v.allocate_tcp()
    cid = v.connect("127.0.0.1", peer_port, expect="any")
    check(isinstance(cid, bytes) and len(cid) == 4, "the victim's Connect %s: %r" % (when, cid))


def blackhole():
    """A listening socket whose accept queue is full: SYNs to it are dropped, so a Connect
    to it stays in flight until tcp_connect_timeout."""
    s = peer_socket(kind=socket.SOCK_STREAM)
    s.listen(0)
    filler = socket.create_connection(s.getsockname(), timeout=5)
    return s, filler


def test_pending_pool(d):
    holes = [blackhole() for _ in range(9)]
    good = TcpPeer("127.0.0.1")
    daemon, port = start(d, {"tcp_pending_connects": 8, "tcp_connect_timeout": 60})
    clients = []
    try:
        atk = StreamClient(port, user="mallory")
        clients.append(atk)
        atk.allocate_tcp()
        tids = [send_connect(atk, "127.0.0.1", s.getsockname()[1]) for s, _ in holes[:8]]
        wait_for(lambda: counter(daemon, "tcp_peer_conns") == 8,
                 "the attacker's 8 Connects in flight", timeout=10)
        atk.connect("127.0.0.1", holes[8][0].getsockname()[1], expect=508)
        victim_connects(port, clients, good.port, "while the attacker holds the pool")
        got = answers(atk, 1, 5.0)
        check(got == {tids[0]: 447}, "the attacker's oldest Connect ends with 447: %r"
              % ({k.hex(): v for k, v in got.items()},))
        check((counter(daemon, "tcp_connect_limit"), counter(daemon, "tcp_evict_connects"))
              == (1, 1), "the 508 and the ending counted apart: limit %r, evicted %r"
              % (counter(daemon, "tcp_connect_limit"), counter(daemon, "tcp_evict_connects")))
    finally:
        for c in clients:
            c.close()
        for s, f in holes:
            f.close()
            s.close()
        good.stop = True
        daemon.stop()


def test_peer_budget(d):
    sinks = [peer_socket(kind=socket.SOCK_STREAM) for _ in range(64)]
    for s in sinks:
        s.listen(128)  # completes the handshakes, accepts nothing
    good = TcpPeer("127.0.0.1")
    daemon, port = start(d, {"max_allocations": 40}, nofile=2 * 40 + 1024)
    clients = []
    try:
        codes, cids, newest = {}, {}, None
        for _ in range(20):  # the auto user quota: half the table
            c = StreamClient(port, user="mallory")
            clients.append(c)
            try:
                c.allocate_tcp()
            except Failure:
                break  # the worker has no descriptor left for it
            tids = [send_connect(c, "127.0.0.1", s.getsockname()[1]) for s in sinks]
            for code in answers(c, len(sinks), 15.0, cids).values():
                codes[code] = codes.get(code, 0) + 1
            newest = ([(c, cids[t]) for t in tids if t in cids] or [newest])[-1]
        v = Client(port, user="victor")
        clients.append(v)
        code = error_code(v.allocate(expect="any")[3])
        check(code is None, "the victim's Allocate while the attacker holds %r peer "
              "connections (Connect answers %r): %r"
              % (counter(daemon, "tcp_peer_conns"), codes, code))
        check(codes.get(508, 0) > 0, "the attacker was refused some: %r" % (codes,))
        # The attacker's newest peer connection, bound, is the one the victim's Connect ends.
        dc = StreamClient(port, creds=newest[0].creds())
        clients.append(dc)
        check(dc.connection_bind(newest[1]) is None, "the attacker binds its newest")
        victim_connects(port, clients, good.port, "with the budget full")
        check(ended(dc.sock, 10.0), "the attacker's newest (bound) peer connection ended")
        check(counter(daemon, "tcp_evict_peer_connections") > 0, "the ending counted: %r"
              % (counter(daemon, "tcp_evict_peer_connections"),))
    finally:
        for c in clients:
            c.close()
        for s in sinks:
            s.close()
        good.stop = True
        daemon.stop()


def test_budget_follows_load(d):
    sinks = [peer_socket(kind=socket.SOCK_STREAM) for _ in range(64)]
    for s in sinks:
        s.listen(128)  # completes the handshakes, accepts nothing
    daemon, port = start(d, {"max_allocations": 40}, nofile=2 * 40 + 1024)
    clients = []
    try:
        codes = {}
        for _ in range(5):
            c = StreamClient(port, user="alice")
            clients.append(c)
            c.allocate_tcp()
            tids = [send_connect(c, "127.0.0.1", s.getsockname()[1]) for s in sinks]
            got = answers(c, len(tids), 15.0)
            for t in tids:
                codes[got.get(t, "none")] = codes.get(got.get(t, "none"), 0) + 1
        check(codes == {None: 320}, "all 320 Connects succeed: %r" % (codes,))
        check(counter(daemon, "tcp_peer_conns") == 320, "320 peer connections held: %r"
              % (counter(daemon, "tcp_peer_conns"),))
        check(counter(daemon, "tcp_connect_limit") == 0, "none refused or ended: %r"
              % (counter(daemon, "tcp_connect_limit"),))
    finally:
        for c in clients:
            c.close()
        for s in sinks:
            s.close()
        daemon.stop()


def sinks_of(n):
    """n listening sockets that complete the handshakes and accept nothing."""
    sinks = [peer_socket(kind=socket.SOCK_STREAM) for _ in range(n)]
    for s in sinks:
        s.listen(4)
    return sinks


def fill(c, sinks):
    """c's allocation Connects to each of sinks, 40 at a time (under tcp_pending_connects),
    until the worker's peer connection budget refuses one (508): the CONNECTION-IDs of
    those that succeeded, oldest first. Checks that one was refused and over 100 made."""
    order, codes = [], {}
    for i in range(0, len(sinks), 40):
        cids = {}
        tids = [send_connect(c, "127.0.0.1", s.getsockname()[1]) for s in sinks[i:i + 40]]
        got = answers(c, len(tids), 15.0, cids)
        order += [cids[t] for t in tids if t in cids]
        for code in got.values():
            codes[code] = codes.get(code, 0) + 1
        if 508 in codes:
            break
    check(codes.get(508, 0) > 0 and len(order) > 100,
          "%s fills the budget: %r" % (c.username, codes))
    return order


def newest_ended(port, owner, order, clients, what):
    """Checks with a ConnectionBind of each (on new connections added to clients) that
    owner's newest connection (order: their CONNECTION-IDs, oldest first) ended and its
    oldest is still there."""
    newest = StreamClient(port, creds=owner.creds())
    oldest = StreamClient(port, creds=owner.creds())
    clients += [newest, oldest]
    check(newest.connection_bind(order[-1]) == 400,
          "the attacker's newest %s ended for the victim's" % what)
    check(oldest.connection_bind(order[0]) is None, "its oldest is still there")


def test_restored_are_older(d):
    sinks = sinks_of(440)
    good = TcpPeer("127.0.0.1")
    daemon, port = start(d, {"max_allocations": 40, "tcp_connections": 1000},
                         nofile=2 * 40 + 1024, relay=(24600, 24619))
    clients, pid = [], None
    try:
        atk = StreamClient(port, user="mallory")
        clients.append(atk)
        atk.allocate_tcp()
        order = fill(atk, sinks)
        for _ in range(2):  # the second takes over what the first restored
            pid = upgrade(daemon, workers=1)
        victim_connects(port, clients, good.port, "after the upgrade, with the budget full")
        newest_ended(port, atk, order, clients, "connection")
    finally:
        for c in clients:
            c.close()
        for s in sinks:
            s.close()
        good.stop = True
        if pid:
            stop_master(daemon, pid)
        daemon.stop()



def inbound(c, relayed, n, peers, order):
    """n peers connect in to c's TCP allocation at relayed (added to peers); each is then
    announced (a ConnectionAttempt: its CONNECTION-ID added to order) or refused (reset;
    the daemon writes nothing to a peer not bound; the reset may come before the connect
    returns). How many were refused. Bounded: 20 s."""
    left, refused = {}, 0
    for _ in range(n):
        try:
            s = socket.create_connection(relayed, timeout=5)
        except ConnectionResetError:
            refused += 1
            continue
        peers.append(s)
        left[s.getsockname()] = s
    deadline = time.monotonic() + 20
    while left and time.monotonic() < deadline:
        f = c.frame(0.2)
        p = parse(f) if f else None
        if p and p[0] == 0x000C and p[1] == INDICATION:  # ConnectionAttempt
            if left.pop(parse_xor_addr(p[3][A_PEER][0], p[2]), None) is not None:
                order.append(p[3][A_CONNECTION_ID][0])
            continue
        for s in select.select(list(left.values()), [], [], 0)[0]:
            if ended(s, 1.0):
                del left[s.getsockname()]
                refused += 1
    check(not left, "%d of %d peers neither announced nor refused" % (len(left), n))
    return refused


def test_inbound_peers(d):
    """Peers that connect in to a TCP allocation's relay listener (RFC 6062
    ConnectionAttempt) take from the same budget: an attacker's allocation admits them
    until the budget refuses one (reset), with descriptors to spare (the worker's limit
    is 1104, the budget 1104 - 256), and another user's Connect then ends the attacker's
    newest inbound connection, not its oldest."""
    good = TcpPeer("127.0.0.1")
    daemon, port = start(d, {"max_allocations": 40, "tcp_connections": 1000},
                         nofile=2 * 40 + 1024, relay=(24620, 24639))
    clients, peers, order = [], [], []
    try:
        atk = StreamClient(port, user="mallory")
        clients.append(atk)
        r = atk.allocate_tcp()
        relayed = parse_xor_addr(r[3][A_RELAYED][0], r[2])
        check(error_code(atk.perm("127.0.0.1")[3]) is None, "CreatePermission")
        refused = 0
        for _ in range(12):  # at most 600 peers: a budget that did not count them takes ~1000
            refused = inbound(atk, relayed, 50, peers, order)
            if refused:
                break
        check(refused > 0 and len(order) > 100, "the budget refused inbound peers: %d "
              "announced, %d refused" % (len(order), refused))
        check(counter(daemon, "tcp_peer_conns") == len(order), "peer connections held: %r "
              "of %d" % (counter(daemon, "tcp_peer_conns"), len(order)))
        e0 = counter(daemon, "tcp_evict_peer_connections")
        victim_connects(port, clients, good.port, "with the budget full of inbound peers")
        check(counter(daemon, "tcp_evict_peer_connections") > e0, "an eviction counted")
        newest_ended(port, atk, order, clients, "inbound connection")
    finally:
        good.stop = True
        close_all(daemon, clients + peers)


def bind_pairs(c, port, sinks, tls_port=None):
    """A pair for each of sinks: c's Connect, then a data connection (over TURN-TLS to
    tls_port, else TURN-TCP to port) bound to it. The data connections."""
    out = []
    for s in sinks:
        cid = c.connect("127.0.0.1", s.getsockname()[1])
        dc = StreamClient(port, creds=c.creds(), sock=tls_connect(tls_port) if tls_port
                          else None)
        out.append(dc)
        check(dc.connection_bind(cid) is None, "ConnectionBind")
    return out


def test_tls_pairs_weigh_more(d):
    """A pair bound over TURN-TLS holds four descriptors (the peer's, the TLS connection,
    and the two ends of its bridge's socket pair), a plain pair two: with the same budget,
    a user who binds K pairs over TURN-TLS then fills the budget with Connects has about
    K peer connections fewer when refused than one who does the same over TURN-TCP."""
    k = 40
    daemon, port = start(d, {"max_allocations": 40, "tcp_connections": 1000},
                         nofile=2 * 40 + 1024, relay=(24640, 24659), tls=True)
    held, socks = {}, []
    try:
        for kind in ("tcp", "tls"):
            sinks = sinks_of(440)
            socks += sinks
            c = (StreamClient(daemon.tls_port, user=kind, sock=tls_connect(daemon.tls_port))
                 if kind == "tls" else StreamClient(port, user=kind))
            socks.append(c.sock)
            c.allocate_tcp()
            dcs = bind_pairs(c, port, sinks[:k], daemon.tls_port if kind == "tls" else None)
            socks += [dc.sock for dc in dcs]
            fill(c, sinks[k:])
            held[kind] = counter(daemon, "tcp_peer_conns")
            for s in [c.sock] + [dc.sock for dc in dcs]:
                s.close()
            wait_for(lambda: counter(daemon, "tcp_peer_conns") == 0,
                     "the %s user's peer connections end" % kind, timeout=20)
        check(held["tls"] <= held["tcp"] - k // 2, "peer connections at the refusal with %d "
              "pairs bound over TURN-TCP %d, over TURN-TLS %d" % (k, held["tcp"], held["tls"]))
    finally:
        close_all(daemon, socks)


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def pin_descriptors(pid, hard):
    """Sets pid's soft descriptor limit to its lowest free descriptor number, so that it can
    open no new one, once the set it holds has settled and until no number below the limit
    is free (a descriptor the worker held for a moment, an fd-store hand-off's, closed
    after the limit was set would let the next accept in). Bounded: 50 tries."""
    def held():
        return {int(n) for n in os.listdir("/proc/%d/fd" % pid)}
    for _ in range(50):
        before = held()
        time.sleep(0.2)
        now = held()
        if now != before:
            continue
        lowest = min(set(range(len(now) + 1)) - now)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (lowest, hard))
        time.sleep(0.2)
        if all(n in held() for n in range(lowest)):
            return
    raise Failure("the worker's descriptors did not settle")


def test_relay_listener_out_of_descriptors(d):
    """Found while fixing review12: a TCP allocation's relay listener whose accept4 failed
    with EMFILE, with no peer connection to end for room, returned with the connection
    still in the backlog, and its level-triggered watcher fired again at once: the worker
    spun at full CPU for as long as the peer waited. It now pauses with the client
    listeners (counted in accept_backoff) and serves the peers once descriptors are back.
    (A peer accepted through a descriptor the worker closed after its limit was set is
    followed by another, the limit set again: bounded.) Each peer is announced by its
    address: in full suite runs another test's daemon on the same relay window shared the
    relayed port and took some (test_ports_owned.py test_tcp_relay_port_owned)."""
    daemon, port = start(d, None)
    ctl, peers = None, []
    try:
        ctl = StreamClient(port)
        r = ctl.allocate_tcp()
        relayed = parse_xor_addr(r[3][A_RELAYED][0], r[2])
        check(error_code(ctl.perm("127.0.0.1")[3]) is None, "CreatePermission")
        pid = daemon.admin({"cmd": "workers"})["workers"][0]["pid"]
        old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        b0 = counter(daemon, "accept_backoff")
        try:
            def paused():
                pin_descriptors(pid, old[1])
                if counter(daemon, "accept_backoff") > b0:
                    return True
                check(len(peers) < 20, "20 peers and no pause")
                peers.append(socket.create_connection(relayed, timeout=5))
                return False
            wait_for(paused, "the relay listener's pause counted", timeout=60)
            c0 = cpu_s(pid)
            time.sleep(1.0)
            cpu = cpu_s(pid) - c0
            check(cpu < 0.5, "the worker spins at its descriptor limit: %.0f %% of a core"
                  % (100 * cpu))
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
        want, got = sorted(p.getsockname() for p in peers), []
        for _ in peers:
            f = ctl.frame(10)
            ind = f and parse(f)
            check(ind and ind[0] == 0x000C, "a ConnectionAttempt for each of the peers %r "
                  "once descriptors were back; announced %r, then %r" % (want, got, ind))
            got.append(parse_xor_addr(ind[3][A_PEER][0], ind[2]))
        check(sorted(got) == want, "ConnectionAttempts for %r, peers %r" % (got, want))
    finally:
        for s in peers + [ctl and ctl.sock]:
            if s:
                s.close()
        check(daemon.stop() == 0, "exit status")

if __name__ == "__main__":
    run_tests([test_pending_pool, test_peer_budget, test_budget_follows_load,
               test_restored_are_older, test_relay_listener_out_of_descriptors,
               test_inbound_peers, test_tls_pairs_weigh_more])
