"""A live upgrade hands the UDP allocations' relay sockets over (issue 42): the new workers
take the old workers' sockets instead of binding new ones.

300 UDP allocations through 2 workers; the kernel's socket of each relayed port (its inode
in /proc/net/udp) is noted, `turngatectl upgrade` runs (the same binary), and every relayed
port must still be held by the same socket, the only one on that port: nothing was closed
or bound again, and no allocation was lost (the new master lists all 300). A peer's
datagram to a handed-over relay port reaches its client as a Data indication, a Refresh
succeeds. Then an upgrade that fails after the old workers handed their sockets over (the
new binary's configuration names a listener on a port the test holds): the old master's
respawned workers take them back, again the same sockets, all 300 allocations, relaying.
On a build that binds the relay ports again every inode changes at the first upgrade.

Relay ports 44400-44799 (no other test's). Loopback only, every wait bounded.
"""
import contextlib
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Client, Daemon, check, config, free_port,  # noqa: E402
                           run_tests, stop_master, upgrade)
from test_upgrade_streams import failed_upgrade  # noqa: E402

RELAY = (44400, 44799)
N = 300
SAMPLE = 5


def relay_inodes(relay=RELAY):
    """{port: [inode, ...]} of the UDP sockets bound to a port of relay (IPv4)."""
    out = {}
    with open("/proc/net/udp") as f:
        next(f)
        for line in f:
            cols = line.split()
            port, inode = int(cols[1].split(":")[1], 16), int(cols[9])
            if relay[0] <= port <= relay[1] and inode != 0:
                out.setdefault(port, []).append(inode)
    return out


def check_same_sockets(before, ports, what, relay=RELAY):
    """Every relayed port is held by one socket, the one of before."""
    now = relay_inodes(relay)
    moved = [p for p in ports if now.get(p) != before[p]]
    check(not moved, "%s: %d of %d relay ports have another socket (e.g. port %d: %r, "
          "was %r)" % (what, len(moved), len(ports), moved[0] if moved else 0,
                       now.get(moved[0]) if moved else None,
                       before[moved[0]] if moved else None))


def check_relaying(clients, peer, what):
    """A datagram from peer to each sampled relayed address reaches its client; a Refresh
    succeeds."""
    for c, (ip, port) in clients:
        payload = ("%s %d" % (what, port)).encode()
        got = None
        for _ in range(10):     # bounded: a lost datagram is sent again
            peer.sendto(payload, (ip, port))
            got = c.recv_data(timeout=1.0)
            if got is not None:
                break
        check(got == payload, "%s: relayed port %d: %r" % (what, port, got))
        check(c.refresh(600) is None, "%s: Refresh" % what)


def setup(d, daemon, port, n=N):
    clients, ports = [], []
    for i in range(n):
        c = Client(port, user="u%d" % i)
        r = c.allocate()
        (ip, rport), = c.relayed(r)
        ports.append(rport)
        clients.append((c, (ip, rport)))
    check(len(set(ports)) == n, "relayed ports not distinct")
    check(len(daemon.allocations()) == n, "allocations listed before the upgrade")
    return clients, ports


class Run:
    """A daemon of `workers` workers with n UDP allocations on relay ports relay, a sample
    of them relaying from peer, the relay sockets' inodes (before), a socket held on a
    port for failed_upgrade (held); pid: the master that serves after an upgrade."""


@contextlib.contextmanager
def relaying(d, relay=RELAY, n=N, workers=2):
    r = Run()
    r.relay, r.n, r.workers, r.pid, r.clients = relay, n, workers, None, []
    port = free_port(avoid=relay)
    r.held = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.held.bind(("127.0.0.1", 0))
    r.peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.peer.bind(("127.0.0.1", 0))
    r.listeners = [("udp", port, "TURN-UDP", ["peers"])]
    r.text = config(d, r.listeners, {"peers": ["127.0.0.1"]}, workers=workers, relay=relay)
    r.daemon = Daemon(d, r.text, workers=workers).start()
    try:
        r.clients, r.ports = setup(d, r.daemon, port, n)
        r.sample = r.clients[:: n // SAMPLE][:SAMPLE]
        for c, _ in r.sample:
            c.perm("127.0.0.1", r.peer.getsockname()[1])
        check_relaying(r.sample, r.peer, "before")
        r.before = relay_inodes(relay)
        check(all(len(r.before.get(p, [])) == 1 for p in r.ports), "one socket per relay port")
        yield r
    finally:
        for c, _ in r.clients:
            c.close()
        r.held.close()
        r.peer.close()
        stop_master(r.daemon, r.pid)
        r.daemon.kill()
    r.daemon.scan()


def check_failed_upgrade(d, r):
    """A failed upgrade after the hand-over: the old master (now r.pid) takes them back."""
    failed_upgrade(r.daemon, d, r.text, r.listeners, r.held, r.workers, relay=r.relay)
    check(len(r.daemon.allocations()) == r.n, "allocations listed after the failed upgrade")
    check_same_sockets(r.before, r.ports, "after the failed upgrade", r.relay)
    check_relaying(r.sample, r.peer, "after the failed upgrade")


def test_upgrade_hands_relay_sockets_over(d):
    with relaying(d) as r:
        r.pid = upgrade(r.daemon, r.workers)
        check(len(r.daemon.allocations()) == N, "allocations listed after the upgrade")
        check_same_sockets(r.before, r.ports, "after the upgrade")
        check("relay sockets handed over" in r.daemon.stderr(), "no hand-over in the log")
        check_relaying(r.sample, r.peer, "after the upgrade")
        check_failed_upgrade(d, r)


if __name__ == "__main__":
    run_tests([test_upgrade_hands_relay_sockets_over])
