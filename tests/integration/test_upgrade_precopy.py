"""A live upgrade copies the table before the old workers stop (issue 42): what the old
workers change between that pre-copy and their stop is right after the upgrade.

40 UDP allocations through 2 workers. The daemon runs with $TURNGATE_TEST_UPGRADE_HOLD
naming a FIFO: the new master, once it has pre-copied the table, waits there before it
says ready, while the old workers still serve. Meanwhile the test ends 5 allocations,
refreshes 5 to another lifetime, gives 5 a permission, binds a channel on 5, relays
from 5 (their counters only), and makes 5 new ones (with a permission). It notes the
listing, lets the new master go on, and after the upgrade the new master must list
exactly that: no ended allocation back, every new one there, the lifetimes, permissions,
channels and counters as they were at the stop; the log says that all 40 were copied
before the lock and that the changed ones were copied again. New and refreshed allocations
relay. On main there is no pre-copy (nor the hook): the new master never says it copied
anything before the lock.

Relay ports 44900-44979 (no other test's). Loopback only, every wait bounded.
"""
import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATECTL, Client, Daemon, alive,  # noqa: E402
                           check, config, error_code, free_port, peer_socket, run_tests, wait_for)
from harness_upgrade import hold_open, teardown  # noqa: E402

RELAY = (44900, 44979)
N = 40
WORKERS = 2


def key(relayed):
    return "%s:%d" % relayed


def listing(daemon):
    """{relayed address: allocation} of the admin listing."""
    return {a["relay"]: a for a in daemon.allocations()}


def ok(r):
    return error_code(r[3]) is None


def relays(c, relayed, peer):
    """A datagram from peer to relayed reaches client c (bounded retries)."""
    payload = ("to %d" % relayed[1]).encode()
    for _ in range(10):
        peer.sendto(payload, relayed)
        if c.recv_data(timeout=1.0) == payload:
            return True
    return False


def new_master(daemon):
    """The pid of the new master of the upgrade in progress (from its first log line), or
    None: a test that fails before the upgrade ends stops it, or it would serve on."""
    m = re.search(r"master\[(\d+)\] master: live upgrade from pid", daemon.stderr())
    return int(m.group(1)) if m else None


def summary(a):
    """What must survive the upgrade as it was at the old workers' stop."""
    return (a["user"], sorted(p["peer"] for p in a["permissions"]),
            sorted((ch["number"], str(ch["peer"])) for ch in a["channels"]),
            a["to_peer"]["packets"], a["to_peer"]["bytes"])


def test_changes_during_precopy(d):
    fifo = os.path.join(d, "hold")
    os.mkfifo(fifo, 0o600)
    port = free_port(avoid=RELAY)
    peer = peer_socket()
    pport = peer.getsockname()[1]
    text = config(d, [("udp", port, "TURN-UDP", ["peers"])], {"peers": ["127.0.0.1"]},
                  workers=WORKERS, relay=RELAY)
    daemon = Daemon(d, text, workers=WORKERS,
                    env={"TURNGATE_TEST_UPGRADE_HOLD": fifo}).start()
    clients, new, pid, proc, wfd = [], [], None, None, None
    try:
        for i in range(N):
            c = Client(port, user="u%d" % i)
            (ip, rport), = c.relayed(c.allocate())
            clients.append((c, (ip, rport)))
        for c, _ in clients[20:25]:
            check(ok(c.perm("127.0.0.1", pport)), "permission before the upgrade")
        check(len(daemon.allocations()) == N, "allocations listed before the upgrade")
        old = daemon.admin({"cmd": "status"})["pid"]

        proc = subprocess.Popen([TURNGATECTL, "-s", daemon.sock, "upgrade"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wfd = hold_open(fifo)
        check("a test's hook is active" in daemon.stderr(),
              "no warning that the hold hook is active in the log")
        check(re.search(r"upgrade: %d allocations copied before the old workers stop" % N,
                        daemon.stderr()), "no pre-copy of all %d in the log" % N)
        # The old workers serve on: change the table under the pre-copy.
        for c, _ in clients[0:5]:
            check(c.refresh(0) is None, "release during the pre-copy window")
        for c, _ in clients[5:10]:
            check(c.refresh(1200) is None, "refresh during the pre-copy window")
        for c, _ in clients[10:15]:
            check(ok(c.perm("127.0.0.1", 9)), "permission during the pre-copy window")
        for k, (c, _) in enumerate(clients[15:20]):
            check(ok(c.bind("127.0.0.1", pport, 0x4001 + k)),
                  "channel during the pre-copy window")
        for c, _ in clients[20:25]:
            for _ in range(3):
                c.send("127.0.0.1", pport, b"x" * 100)
        for i in range(5):
            c = Client(port, user="n%d" % i)
            (ip, rport), = c.relayed(c.allocate())
            check(ok(c.perm("127.0.0.1", pport)), "permission of a new allocation")
            new.append((c, (ip, rport)))
        # The indications are counted when the old worker reads them: wait until all are.
        sent = {key(r) for _, r in clients[20:25]}
        wait_for(lambda: all(a["to_peer"]["packets"] == 3 for r, a in listing(daemon).items()
                             if r in sent), "the indications counted")
        want = listing(daemon)
        check(len(want) == N - 5 + 5, "listing before the stop: %d" % len(want))

        os.write(wfd, b"go")
        os.close(wfd)
        wfd = None
        out, err = proc.communicate(timeout=90)
        check(proc.returncode == 0, "turngatectl upgrade: rc %d\n%s%s\n%s"
              % (proc.returncode, out, err, daemon.stderr()))
        pid = int(out.strip().splitlines()[-1])
        wait_for(lambda: daemon.admin({"cmd": "status"})["pid"] == pid and
                 daemon.admin({"cmd": "status"})["workers"]["running"] == WORKERS,
                 "the new master to serve")
        wait_for(lambda: not alive(old), "the old master to exit")

        got = listing(daemon)
        check(sorted(got) == sorted(want), "allocations after the upgrade: %d, %d missing, "
              "%d not expected" % (len(got), len(set(want) - set(got)),
                                   len(set(got) - set(want))))
        for r, a in want.items():
            check(summary(got[r]) == summary(a), "allocation %s: %r after, %r before"
                  % (r, summary(got[r]), summary(a)))
            check(got[r]["lifetime_left"] <= a["lifetime_left"] + 0.5,
                  "allocation %s: lifetime grew" % r)
        for _, r in clients[5:10]:
            check(got[key(r)]["lifetime_left"] > 900, "refresh lost: %r" % got[key(r)])
        for _, r in clients[0:5]:
            check(key(r) not in got, "an ended allocation came back: %s" % (r,))
        log = daemon.stderr()
        m = re.search(r"(\d+) copied before the lock, (\d+) of them changed since", log)
        check(m is not None, "no pre-copy summary in the log")
        check(int(m.group(1)) == N, "copied before the lock: %s" % m.group(1))
        check(int(m.group(2)) >= 20, "changed since: %s (20 were changed)" % m.group(2))
        st = daemon.admin({"cmd": "status"})
        check(st["allocations"] == N, "status counts %r allocations" % st["allocations"])
        for c, r in new + clients[20:25]:
            check(relays(c, r, peer), "relayed port %d after the upgrade" % r[1])
        for c, _ in clients[5:10] + new:
            check(c.refresh(600) is None, "Refresh after the upgrade")
    finally:
        if wfd is not None:
            os.close(wfd)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if pid is None and proc is not None and new_master(daemon) is not None:
            try:
                os.kill(new_master(daemon), signal.SIGKILL)
            except ProcessLookupError:
                pass
        teardown(daemon, pid, *[c for c, _ in clients + new], peer)
    daemon.scan()


if __name__ == "__main__":
    run_tests([test_changes_during_precopy])
