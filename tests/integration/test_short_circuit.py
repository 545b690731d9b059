"""Masked relay addresses and the short circuit between two allocations of one instance
(issue 22), through the running daemon.

Listener "masked" announces relay_address_mask 127.0.0.9 (a loopback address that nothing
binds: the relay sockets are bound to 127.0.0.1, so a datagram sent to the mask is lost, and
tests never send anywhere but loopback), listener "plain" its own address 127.0.0.1,
listener "closed" admits neither. Pairs of UDP clients allocate, give each other
permissions or channels for the other's relay address and exchange Send indications and
ChannelData both ways, on 1 worker and on 2 (where the pair spans both workers at least
once). Checked:
- XOR-RELAYED-ADDRESS carries the mask (with the allocation's relay port), and every Data
  indication's XOR-PEER-ADDRESS the sender's masked address; the internal address shows
  only as `relay_internal` in the admin listing;
- every datagram arrives exactly once and turngate_short_circuit_packets_total
  (`short_circuit`) grows by exactly the number sent: a datagram through the relay
  sockets would have gone to 127.0.0.9 (nobody there: nothing delivered) or,
  for the plain listener, arrived a second time or uncounted; no send error either;
- a capture on lo (AF_PACKET, root) sees no datagram between the pair's relay ports: none
  left a relay socket (test_capture_control shows the capture does see one that must go
  through a relay socket: to a relay port that no allocation holds);
- the per-allocation counters (to_peer, from_peer) count them as relayed;
- no permission on the receiving side: dropped, counted as a permission denial;
- a masked address that the sender listener's routes do not admit: 403, as any peer;
- a TURN-TCP or TURN-TLS client (test_stream_receiver) gets the same, whichever worker owns
  it: owned by another worker than its UDP partner's, the datagrams for it are handed to its
  owner (worker/handover.c), through no relay socket either; the hand-over outlives the
  replacement of either worker (kill -9), and what the owner could not take any more (its
  allocation ended with it) is counted as stale.
"""
import os
import signal
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (REALM, SECRET, Client, Daemon, Failure, StreamClient,  # noqa: E402
                           check, dtls_connect, error_code, free_port, make_cert, relay_range,
                           run_tests, tls_connect, wait_for)

MASK = "127.0.0.9"


def config(d, ports, workers, relay, tcp_port=None, tls=None):
    masked, plain, closed = ports
    text = ("version: v1\nadmin:\n  name: sc\n  loglevel: all:INFO\n  workers: %d\n"
            "  admin_socket: %s/admin.sock\n  drain_timeout: 1\n  healthcheck_endpoint: \"\"\n"
            "  relay_port_min: %d\n  relay_port_max: %d\n"
            "auth:\n  type: ephemeral\n  realm: %s\n  credentials:\n    secret: %s\n"
            "listeners:\n" % (workers, d, relay[0], relay[1], REALM, SECRET))
    for name, port, routes, mask in (("masked", masked, "self", MASK),
                                     ("plain", plain, "self", None),
                                     ("closed", closed, "elsewhere", MASK)):
        text += ("  - name: %s\n    protocol: TURN-UDP\n    address: 127.0.0.1\n    port: %d\n"
                 "    routes: [%s]\n" % (name, port, routes))
        if mask:
            text += "    relay_address_mask: %s\n" % mask
    if tcp_port:
        text += ("  - name: tcpmasked\n    protocol: TURN-TCP\n    address: 127.0.0.1\n"
                 "    port: %d\n    routes: [self]\n    relay_address_mask: %s\n"
                 % (tcp_port, MASK))
    if tls:
        port, crt, key = tls
        for name, proto in (("tlsmasked", "TURN-TLS"), ("dtlsmasked", "TURN-DTLS")):
            text += ("  - name: %s\n    protocol: %s\n    address: 127.0.0.1\n"
                     "    port: %d\n    cert_file: %s\n    key_file: %s\n    routes: [self]\n"
                     "    relay_address_mask: %s\n" % (name, proto, port, crt, key, MASK))
    text += ("clusters:\n  - name: self\n    type: STATIC\n    endpoints: [\"%s\", \"127.0.0.1\"]\n"
             "  - name: elsewhere\n    type: STATIC\n    endpoints: [\"10.9.9.9\"]\n" % MASK)
    return text


def start(d, workers):
    ports = (free_port(), free_port(), free_port())
    daemon = Daemon(d, config(d, ports, workers, relay_range()), workers=workers).start()
    return daemon, ports


def counters(daemon):
    return daemon.admin({"cmd": "stats"})["counters"]


def allocations(daemon):
    return {a["id"]: a for a in daemon.admin({"cmd": "allocations"})["allocations"]}


class Allocated:
    """A UDP client on port with its allocation: c (Client), relayed (ip, port), record
    (admin entry)."""

    def __init__(self, daemon, port, user):
        self.c = Client(port, user)
        self.relayed = self.c.relayed(self.c.allocate())[0]
        self.record = self.c.record(daemon)
        check(self.record is not None,
              "allocation of %r not listed" % (self.c.sock.getsockname(),))

    def close(self):
        self.c.close()


class StreamAllocated(Allocated):
    """Allocated for a TURN-TCP client on listener tcpmasked, or (secure "tls") a TURN-TLS
    one on tlsmasked, or ("dtls") a TURN-DTLS one on dtlsmasked (the same port number, UDP)."""

    def __init__(self, daemon, port, user, secure=None):
        sock = {"tls": tls_connect, "dtls": dtls_connect}[secure](port) if secure else None
        self.c = StreamClient(port, user=user, sock=sock)
        self.relayed = self.c.relayed(self.c.allocate())[0]
        found = [a for a in daemon.allocations() if a["relay"] == "%s:%d" % self.relayed]
        check(len(found) == 1, "TCP allocation %r not listed" % (self.relayed,))
        self.record = found[0]


class Capture:
    """Every frame on lo from now on (AF_PACKET, root); between() counts the IPv4 UDP
    datagrams seen between two ports, either way. Where no packet socket can be made (not
    root), between() returns None and the caller says so."""

    def __init__(self):
        self.why = None
        try:
            self.s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            self.s.bind(("lo", 0))
            self.s.setblocking(False)
        except (OSError, AttributeError) as e:
            self.s, self.why = None, str(e)

    def between(self, p1, p2):
        if self.s is None:
            print("note: no capture on lo (%s): the relay sockets' silence is checked by the "
                  "counters only" % self.why, flush=True)
            return None
        hits = 0
        while True:
            try:
                f = self.s.recv(70000)
            except BlockingIOError:
                break
            # lo frames carry a 14-byte Ethernet header; the pairs here are IPv4.
            if len(f) < 42 or f[12:14] != b"\x08\x00" or f[23] != 17:
                continue
            ihl = (f[14] & 0x0F) * 4
            sp, dp = struct.unpack("!HH", f[14 + ihl:18 + ihl])
            hits += {sp, dp} == {p1, p2}
        self.s.close()
        return hits


def recv_all(peer, n, timeout=2.0):
    """Up to n Data indications or ChannelData for peer: [(kind, channel or sender, data)]."""
    return peer.c.frames(n, timeout)


def expect_quiet(peer, timeout=0.5):
    got = recv_all(peer, 1, timeout)
    check(got == [], "unexpected delivery: %r" % (got,))


def exchange(daemon, a, b, n=5, bound=False):
    """Send indications then ChannelData both ways between a and b (permissions and
    channels installed here); checks delivery, framing, addresses and counters. bound: a
    and b already bound their channels to each other (an earlier exchange), so the Send
    indications arrive as ChannelData too."""
    for x, y in ((a, b), (b, a)):
        r = x.c.perm(*y.relayed)
        check(error_code(r[3]) is None, "CreatePermission for %r: %r" % (y.relayed,
                                                                          error_code(r[3])))
    before, sent, cap = counters(daemon), 0, Capture()
    allocs_before = allocations(daemon)
    for x, y in ((a, b), (b, a)):
        for i in range(n):
            x.c.send(y.relayed[0], y.relayed[1], b"send-%d" % i)
        sent += n
        got = recv_all(y, n + 1, 1.5)
        how = ("chan", 0x4002 if y is b else 0x4001) if bound else ("data", x.relayed)
        check(got == [how + (b"send-%d" % i,) for i in range(n)],
              "Send %r -> %r: %r" % (x.relayed, y.relayed, got))
    for x, y, ch in ((a, b, 0x4001), (b, a, 0x4002)):
        r = x.c.bind(y.relayed[0], y.relayed[1], ch)
        check(error_code(r[3]) is None, "ChannelBind: %r" % (error_code(r[3]),))
    for x, y, ch_x, ch_y in ((a, b, 0x4001, 0x4002), (b, a, 0x4002, 0x4001)):
        for i in range(n):
            x.c.channel_data(ch_x, b"chan-%d" % i)
        sent += n
        got = recv_all(y, n + 1, 1.5)
        check(got == [("chan", ch_y, b"chan-%d" % i) for i in range(n)],
              "ChannelData %r -> %r: %r" % (x.relayed, y.relayed, got))
    after = counters(daemon)
    check(after["short_circuit"] - before["short_circuit"] == sent,
          "short_circuit %d -> %d, %d sent" % (before["short_circuit"], after["short_circuit"],
                                               sent))
    check(after["err_send"] == before["err_send"], "send errors: %r" % (after["err_send"],))
    check(after["short_circuit_stale"] == before["short_circuit_stale"],
          "stale hand-overs: %r" % (after["short_circuit_stale"],))
    seen = cap.between(a.relayed[1], b.relayed[1])
    check(seen in (0, None), "%d datagrams between relay ports %d and %d on lo: they left a "
          "relay socket" % (seen or 0, a.relayed[1], b.relayed[1]))
    for k in ("peer_pkts_out", "peer_pkts_in"):
        check(after[k] - before[k] == sent, "%s grew by %d, %d sent" % (k, after[k] - before[k],
                                                                      sent))
    allocs = allocations(daemon)
    for p in (a, b):
        rec, was = allocs[p.record["id"]], allocs_before[p.record["id"]]
        grew = [rec[k]["packets"] - was[k]["packets"] for k in ("to_peer", "from_peer")]
        check(grew == [2 * n, 2 * n], "per-allocation counters of %r grew by %r (to_peer, "
              "from_peer), %d each way" % (p.relayed, grew, 2 * n))
    return sent


def pair_on_workers(daemon, port, want_split, tries=24):
    """Two Allocated on listener port, on two different workers when want_split, else on one."""
    first = Allocated(daemon, port, "alice")
    spare = []
    for i in range(tries):
        p = Allocated(daemon, port, "bob%d" % i)
        if (p.record["worker"] != first.record["worker"]) == want_split:
            for s in spare:
                s.close()
            return first, p
        spare.append(p)
    raise Failure("no pair with split=%r in %d tries" % (want_split, tries))


def check_masked(a):
    ip, port = a.relayed
    check(ip == MASK, "XOR-RELAYED-ADDRESS %r, expected the mask %s" % (a.relayed, MASK))
    rec = a.record
    check(rec["relay"] == "%s:%d" % (MASK, port), "listing relay %r" % (rec["relay"],))
    check(rec.get("relay_internal") == "127.0.0.1:%d" % port,
          "listing relay_internal %r" % (rec.get("relay_internal"),))


def run_pairs(d, workers, splits):
    daemon, (masked, plain, _) = start(d, workers)
    try:
        for port, is_masked in ((masked, True), (plain, False)):
            for split in splits:
                a, b = pair_on_workers(daemon, port, split)
                try:
                    for p in (a, b):
                        if is_masked:
                            check_masked(p)
                        else:
                            check(p.relayed[0] == "127.0.0.1" and
                                  "relay_internal" not in p.record,
                                  "plain listener announced %r" % (p.relayed,))
                    exchange(daemon, a, b)
                finally:
                    a.close()
                    b.close()
    finally:
        daemon.stop()


def test_one_worker(d):
    run_pairs(d, 1, (False,))


def test_two_workers(d):
    run_pairs(d, 2, (True, False))


def test_no_permission_dropped(d):
    daemon, (masked, _, _) = start(d, 2)
    a, b = Allocated(daemon, masked, "alice"), Allocated(daemon, masked, "bob")
    try:
        r = a.c.perm(*b.relayed)
        check(error_code(r[3]) is None, "CreatePermission: %r" % (error_code(r[3]),))
        before = counters(daemon)
        lst_before = daemon.admin({"cmd": "stats"})["listeners"]["masked"]
        for i in range(3):
            a.c.send(b.relayed[0], b.relayed[1], b"no-perm-%d" % i)
        expect_quiet(b)
        after = counters(daemon)
        lst_after = daemon.admin({"cmd": "stats"})["listeners"]["masked"]
        check(after["perm_denied"] - before["perm_denied"] == 3,
              "perm_denied %d -> %d" % (before["perm_denied"], after["perm_denied"]))
        check(lst_after["perm_denied"] - lst_before["perm_denied"] == 3,
              "listener perm_denied %r -> %r" % (lst_before, lst_after))
        check(after["short_circuit"] - before["short_circuit"] == 3 and
              after["err_send"] == before["err_send"],
              "dropped datagrams left through a relay socket: %r" % (after,))
        # The permission installed, the same datagrams arrive.
        r = b.c.perm(*a.relayed)
        check(error_code(r[3]) is None, "CreatePermission: %r" % (error_code(r[3]),))
        a.c.send(b.relayed[0], b.relayed[1], b"now")
        got = recv_all(b, 2, 1.5)
        check(got == [("data", a.relayed, b"now")], "after the permission: %r" % (got,))
    finally:
        a.close()
        b.close()
        daemon.stop()


def test_routes_refuse_mask(d):
    daemon, (masked, _, closed) = start(d, 2)
    a, b = Allocated(daemon, masked, "alice"), Allocated(daemon, closed, "bob")
    try:
        check(b.relayed[0] == MASK, "closed listener announced %r" % (b.relayed,))
        r = b.c.perm(*a.relayed)
        check(error_code(r[3]) == 403, "CreatePermission to %r: %r" % (a.relayed,
                                                                       error_code(r[3])))
        r = b.c.bind(a.relayed[0], a.relayed[1], 0x4003)
        check(error_code(r[3]) == 403, "ChannelBind to %r: %r" % (a.relayed, error_code(r[3])))
        r = a.c.perm(*b.relayed)
        check(error_code(r[3]) is None, "CreatePermission: %r" % (error_code(r[3]),))
        before = counters(daemon)
        b.c.send(a.relayed[0], a.relayed[1], b"refused")
        expect_quiet(a)
        after = counters(daemon)
        check(after["short_circuit"] == before["short_circuit"],
              "a refused peer was short-circuited")
    finally:
        a.close()
        b.close()
        daemon.stop()


def test_bad_mask_refused(d):
    for mask, what in (("not-an-ip", "is not an IP address"), ("::1", "IPv6 address"),
                       ("224.0.0.1", "unicast")):
        text = config(d, (free_port(), free_port(), free_port()), 1, relay_range())
        text = text.replace("relay_address_mask: %s" % MASK, "relay_address_mask: %s" % mask, 1)
        daemon = Daemon(d, text, workers=1)
        daemon.start(wait=False)
        rc = daemon.wait_exit(30)
        daemon.err.close()
        err = daemon.stderr()
        check(rc != 0 and "relay_address_mask" in err and what in err,
              "mask %r: exit %r, stderr:\n%s" % (mask, rc, err))
        os.unlink(daemon.errpath)


def stream_pair(daemon, ports, tcp_port, split, tag, tries=24, stream_slot=None, secure=None):
    """An Allocated on listener masked and a StreamAllocated on tcp_port (secure: its
    transport), owned by different workers when split (the UDP one's worker receives its datagrams:
    its datagrams for the stream client must be handed over), else by one. stream_slot:
    the stream client's worker must be that one. Bounded: tries new clients until the
    owners fit."""
    rejected = []  # open until the end: a freed port must not come back in this loop
    try:
        for i in range(tries):
            a = Allocated(daemon, ports[0], "alice-%s%d" % (tag, i))
            t = StreamAllocated(daemon, tcp_port, "tcp-%s%d" % (tag, i), secure)
            wa, wt = a.record["worker"], t.record["worker"]
            if (wa != wt) == split and stream_slot in (None, wt):
                check(t.relayed[0] == MASK, "TCP client's relayed address %r" % (t.relayed,))
                return a, t
            rejected += [a, t]
    finally:
        for p in rejected:
            p.close()
    raise Failure("no UDP/TCP pair with split=%r (TCP on %r) in %d tries"
                  % (split, stream_slot, tries))


def worker_pid(daemon, slot):
    return [w for w in daemon.admin({"cmd": "workers"})["workers"] if w["slot"] == slot][0]["pid"]


def kill_worker(daemon, slot):
    """kill -9 of slot's worker; returns once its successor runs."""
    pid = worker_pid(daemon, slot)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: worker_pid(daemon, slot) not in (0, pid) and
             daemon.admin({"cmd": "status"})["workers"]["running"] == 2,
             "slot %d respawned" % slot)


def stream_daemon(d, tls_port=None, relay=None):
    ports, tcp_port = (free_port(), free_port(), free_port()), free_port()
    tls = (tls_port,) + make_cert(d, "turn.test") if tls_port else None
    daemon = Daemon(d, config(d, ports, 2, relay or relay_range(), tcp_port, tls),
                    workers=2).start()
    return daemon, ports, tcp_port


def pair_exchange(daemon, ports, port, split, tag, **kw):
    """A fresh stream pair (stream_pair) that exchanges once, then closes."""
    a, t = stream_pair(daemon, ports, port, split, tag, **kw)
    try:
        exchange(daemon, a, t)
    finally:
        a.close()
        t.close()


def test_stream_receiver(d):
    """A TURN-TCP client (masked listener) and a UDP one exchange Send indications and
    ChannelData both ways, 2 workers: on one worker, and across workers, where the TCP
    client's connection lives in the worker that does not receive the UDP client's
    datagrams; then a TURN-TLS and a TURN-DTLS client across workers. Each time every
    datagram arrives once, framed as from the masked address, counted once in
    short_circuit, and none crosses the relay sockets (exchange)."""
    tls_port = free_port()
    daemon, ports, tcp_port = stream_daemon(d, tls_port)
    try:
        for split, port, secure in ((True, tcp_port, None), (False, tcp_port, None),
                                    (True, tls_port, "tls"), (True, tls_port, "dtls")):
            pair_exchange(daemon, ports, port, split, "s%d%s" % (split, secure),
                          secure=secure)
    finally:
        daemon.stop()


def test_stream_receiver_respawn(d):
    """The hand-over outlives its workers: the master made each slot's channel before the
    first fork and keeps it. kill -9 of the sending worker: its successor adopts the UDP
    allocation and hands over as before. The receiving worker stopped (SIGSTOP) while
    datagrams are handed to it, then killed: its successor reads them from the same
    channel, finds the TCP allocation gone (it died with its connection) and counts each
    as stale; a new TCP client in that worker is reached again across workers.
    Relay ports 28500-28599 (no other test's), below the kernel's port-0 range: the sending
    worker's successor binds the UDP allocation's relay port again."""
    daemon, ports, tcp_port = stream_daemon(d, relay=(28500, 28599))
    daemon.allowed_deaths = 2
    try:
        a, t = stream_pair(daemon, ports, tcp_port, True, "r")
        sender, owner = a.record["worker"], t.record["worker"]
        try:
            exchange(daemon, a, t)
            kill_worker(daemon, sender)
            exchange(daemon, a, t, bound=True)
            before = counters(daemon)
            os.kill(worker_pid(daemon, owner), signal.SIGSTOP)
            for i in range(3):
                a.c.send(t.relayed[0], t.relayed[1], b"late-%d" % i)
            wait_for(lambda: counters(daemon)["short_circuit"] - before["short_circuit"] == 3,
                     "3 datagrams handed over to the stopped worker")
            kill_worker(daemon, owner)
            wait_for(lambda: counters(daemon)["short_circuit_stale"] -
                     before["short_circuit_stale"] == 3, "3 stale hand-overs counted")
            after = counters(daemon)
            check(after["err_send"] == before["err_send"], "send errors: %r" % (after,))
        finally:
            a.close()
            t.close()
        # A new pair across workers whose TCP client lives in the respawned worker.
        pair_exchange(daemon, ports, tcp_port, True, "again", tries=48, stream_slot=owner)
    finally:
        daemon.stop()


def test_capture_control(d):
    """The capture's positive control: a datagram that does leave a relay socket is seen.
    A UDP client of the plain listener sends to 127.0.0.1 with a port of the relay range
    that no allocation holds (a socket of this test): no allocation of this instance holds
    it, so it goes the ordinary way, from the client's relay port to that port on lo,
    arrives from the relay address, is not short-circuited, and the capture sees it."""
    ports, (lo, hi) = (free_port(), free_port(), free_port()), relay_range()
    daemon = Daemon(d, config(d, ports, 2, (lo, hi)), workers=2).start()
    plain = ports[1]
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a = Allocated(daemon, plain, "alice")
    try:
        for port in range(hi, lo, -1):
            try:
                sink.bind(("127.0.0.1", port))
                break
            except OSError:
                continue
        port = sink.getsockname()[1]
        check(lo <= port <= hi, "no free port in the relay range %d-%d" % (lo, hi))
        r = a.c.perm("127.0.0.1", port)
        check(error_code(r[3]) is None, "CreatePermission: %r" % (error_code(r[3]),))
        before, cap = counters(daemon), Capture()
        a.c.send("127.0.0.1", port, b"through-the-relay")
        sink.settimeout(2.0)
        data, src = sink.recvfrom(70000)
        check(data == b"through-the-relay" and src == ("127.0.0.1", a.relayed[1]),
              "at the sink: %r from %r" % (data, src))
        after = counters(daemon)
        check(after["short_circuit"] == before["short_circuit"], "short-circuited")
        hits = cap.between(a.relayed[1], port)
        check(hits is None or hits >= 1, "the capture missed the relayed datagram")
    finally:
        a.close()
        sink.close()
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_one_worker, test_two_workers, test_no_permission_dropped,
               test_routes_refuse_mask, test_bad_mask_refused, test_stream_receiver,
               test_stream_receiver_respawn, test_capture_control])
