"""A live upgrade hands a TURN-TCP call's UDP relay socket over with its connection
(issue 41): the new worker takes the old worker's socket instead of binding the port
again, so no other program can take the port inside the gap, and a peer's datagram that
reaches the relay port inside the gap waits in the socket and is delivered after it.

Four TURN-TCP clients with UDP allocations through 2 workers, one of them dual-stack (its
IPv6 relay socket, the allocation's second, goes over too). The gap is held open without
timing: the test traces the master (ptrace, PTRACE_O_TRACEFORK) and holds the workers the
next generation forks at their birth, before they adopt anything, while the old workers
have handed everything over and exited. Inside that gap each relayed port must still be
held by the socket it had before (its inode in /proc/net/udp or udp6), and a peer sends one
datagram to each relayed address; once the workers go on, each client receives its
datagram as a Data indication, and the call relays both ways with the same socket on its
port. The same through an upgrade that fails after the hand-over (the old master's
respawned workers are held at birth; they take the sockets back).

On a build that binds a TURN-TCP call's relay port again the port has no socket inside the
gap (the old worker closed it) and the peer's datagram is lost.

TURN-TLS calls are not checked here: their old worker lingers and keeps serving them with
its own relay sockets (test_upgrade_linger.py).

Relay ports 45100-45199 (no other test's). Loopback only, every wait bounded. Needs ptrace
on the daemon's processes (root, or ptrace_scope 0): skipped with the reason otherwise.
"""
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_ADDITIONAL_FAMILY, TURNGATECTL, Daemon,  # noqa: E402
                           StreamClient, check, config, error_code, free_port, peer_socket,
                           run_tests, wait_for)
from harness_upgrade import (InThread, failed_upgrade, held_socket, teardown,  # noqa: E402
                             trace_births)

RELAY = (45100, 45199)
N = 4
WORKERS = 2

def relay_sockets():
    """{(family, port): [inode, ...]} of the UDP sockets bound to a port of RELAY."""
    out = {}
    for fam, path in ((4, "/proc/net/udp"), (6, "/proc/net/udp6")):
        with open(path) as f:
            next(f)
            for line in f:
                cols = line.split()
                port, inode = int(cols[1].split(":")[1], 16), int(cols[9])
                if RELAY[0] <= port <= RELAY[1] and inode != 0:
                    out.setdefault((fam, port), []).append(inode)
    return out


class Calls:
    """N TURN-TCP clients with UDP allocations relaying with a peer of each family, the
    last a dual-stack allocation (ADDITIONAL-ADDRESS-FAMILY: an IPv6 relayed address too,
    ::1 from lo) where the host has IPv6; relays: [(client, relayed address)]; before:
    their relay ports' socket inodes."""

    def __init__(self, port, peers):
        self.peers, self.clients, self.relays = peers, [], []
        self.next_master = None     # the master an upgrade started
        for i in range(N):
            c = StreamClient(port, user="tcp%d" % i)
            self.clients.append(c)
            dual = [(A_ADDITIONAL_FAMILY, bytes([2, 0, 0, 0]))] if i == N - 1 else []
            for ip, rport in c.relayed(c.allocate(dual)):
                peer = self.peer(ip)
                check(error_code(c.perm(peer.getsockname()[0], peer.getsockname()[1])[3])
                      is None, "CreatePermission")
                self.relays.append((c, (ip, rport)))
        if len(self.relays) == N:
            print("the dual-stack allocation got no IPv6 relayed address (no IPv6 on lo?): "
                  "only IPv4 relay sockets checked")
        self.relaying("before")
        self.before = relay_sockets()
        check(all(len(self.before.get(self.key(a), [])) == 1 for _, a in self.relays),
              "one socket per relay port: %r" % self.before)

    def peer(self, ip):
        return self.peers[":" in ip]

    @staticmethod
    def key(addr):
        return (6 if ":" in addr[0] else 4, addr[1])

    def same_sockets(self, what):
        now = relay_sockets()
        moved = {k: (self.before[k], now.get(k)) for k in map(self.key, (a for _, a in
                                                                           self.relays))
                 if now.get(k) != self.before[k]}
        check(not moved, "%s: relay ports with another socket, or none ((family, port): "
              "(before, now)): %r" % (what, moved))

    def gap_datagrams(self, what):
        for _, a in self.relays:
            self.peer(a[0]).sendto(("%s %s" % (what, a)).encode(), a)

    def check_gap_datagrams(self, what):
        """Each client got the datagram sent to each of its relayed addresses once (those
        of its two relay sockets in either order)."""
        for c in self.clients:
            want = sorted(("%s %s" % (what, a)).encode() for cc, a in self.relays if cc is c)
            got = sorted(c.recv_data(timeout=10.0) or b"" for _ in want)
            check(got == want, "%s: the datagrams the peer sent inside the gap: %r, got %r"
                  % (what, want, got))

    def relaying(self, what):
        """Each client -> its peer (a Send indication), the peer -> each relayed address (a
        Data indication): once each, nothing lost (loopback, one at a time), and a
        Refresh."""
        for c, a in self.relays:
            peer = self.peer(a[0])
            peer.settimeout(10.0)
            out = ("%s to peer %s" % (what, a)).encode()
            c.send(peer.getsockname()[0], peer.getsockname()[1], out)
            data, src = peer.recvfrom(2048)
            check(data == out and src[:2] == a, "%s: client -> peer via %s: %r from %r"
                  % (what, a, data, src))
            back = ("%s from peer %s" % (what, a)).encode()
            peer.sendto(back, a)
            got = c.recv_data(timeout=10.0)
            check(got == back, "%s: peer -> client via %s: %r" % (what, a, got))
            check(c.refresh(600) is None, "%s: Refresh" % what)

    def close(self):
        for c in self.clients:
            c.close()


def upgrade_held(daemon, calls, holder, run):
    """run() (an upgrade, in the background: a Popen) while BirthHold(holder) holds the
    next workers at birth: inside that gap the relay ports keep their sockets and the peer
    sends a datagram to each; then the workers go on and each datagram arrives."""
    _, hold = trace_births(daemon, holder, WORKERS)
    what = "upgrade" if holder == "new" else "failed upgrade"
    proc = None
    try:
        proc = run()
        check(hold.wait_held(lambda: proc.poll() is None),
              "%s: the next workers held at birth: %d of %d (%s; %s)"
              % (what, len(hold.held), WORKERS, getattr(proc, "exc", None),
                 daemon.stderr()[-3000:]))
        # The gap: no worker of either generation runs.
        calls.same_sockets("inside the %s's gap" % what)
        calls.gap_datagrams(what)
        hold.poll()
    finally:
        hold.release()
        calls.next_master = hold.new
    out, err = proc.communicate(timeout=90)
    calls.check_gap_datagrams(what)
    return proc.returncode, out, err


def test_tcp_call_keeps_its_relay_socket(d):
    port = free_port(avoid=RELAY)
    held = held_socket(RELAY, (port,))
    peer = peer_socket()
    peer6 = None
    try:
        peer6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        peer6.bind(("::1", 0))
    except OSError as e:    # the dual-stack allocation gets no IPv6 relayed address then
        print("no IPv6 peer on ::1 (%s): only IPv4 relay sockets checked" % e)
        if peer6 is not None:
            peer6.close()
        peer6 = None
    listeners = [("tcp", port, "TURN-TCP", ["peers"]), ("udp", port, "TURN-UDP", ["peers"])]
    text = config(d, listeners, {"peers": ["127.0.0.1", "::1"]}, workers=WORKERS,
                  relay=RELAY)
    daemon = Daemon(d, text, workers=WORKERS).start()
    calls, pid = None, None
    try:
        calls = Calls(port, (peer, peer6))

        rc, out, err = upgrade_held(daemon, calls, "new", lambda: subprocess.Popen(
            [TURNGATECTL, "-s", daemon.sock, "upgrade"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True))
        check(rc == 0, "upgrade: rc %s\n%s%s" % (rc, out, err))
        pid = int(out.strip().splitlines()[-1])
        wait_for(lambda: daemon.admin({"cmd": "status"})["pid"] == pid and
                 daemon.admin({"cmd": "status"})["workers"]["running"] == WORKERS,
                 "the new master to serve")
        calls.same_sockets("after the upgrade")
        calls.relaying("after the upgrade")
        st = daemon.admin({"cmd": "stats"})["counters"]
        # Per call: its connection and its relay sockets.
        want = N + len(calls.relays)
        check(st["stream_handovers"] == want and st["stream_handovers_ended"] == 0,
              "stream_handovers %d (want %d), ended %d" % (
                  st["stream_handovers"], want, st["stream_handovers_ended"]))

        # A failed upgrade after the hand-over: the old master's respawned workers take
        # the sockets back.
        rc, _, _ = upgrade_held(daemon, calls, "old", lambda: InThread(
            failed_upgrade, daemon, d, text, listeners, held, WORKERS, RELAY))
        check(rc == 0, "failed upgrade")
        calls.same_sockets("after the failed upgrade")
        calls.relaying("after the failed upgrade")
    finally:
        # an upgrade that a failed check left running serves on: stopped too
        teardown(daemon, pid or (calls and calls.next_master), calls, peer, peer6, held)
    daemon.scan()


if __name__ == "__main__":
    run_tests([test_tcp_call_keeps_its_relay_socket])
