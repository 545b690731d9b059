"""A live upgrade to a binary that does not take a TURN-TCP call's UDP relay sockets over
(PARK_URELAY: an older one, or one rolled back to) keeps the call: the old master asks it
("urelays=1" in $TURNGATE_UPGRADE), and when the new master does not answer "urelays" the
relay sockets are not handed over: the old worker's and the old master's copies close, and
the new worker binds the port again, as before the hand-over existed.

The older binary is played by this one with TURNGATE_TEST_NO_URELAYS in its environment:
its master neither says "urelays" nor keeps a PARK_URELAY entry that comes (an older
binary's park_check rejects the kind). On a build that hands the sockets over anyway the
old master still holds its copy of each when the new worker binds the port again: that
fails (EADDRINUSE), the allocation is forgotten and the call ends
(stream_handovers_ended 1).

How, without timing: the old master keeps its copies until the new one says "serving",
which it says once its workers run; they adopt right after, so either may come first. The
test holds the new workers at their birth (ptrace, test_upgrade_stream_relays.py's
BirthHold), stops the old master (SIGSTOP: it has passed everything on and waits for
"serving"), lets the workers go, and lets the old master go on only once they have taken
the call over: the new worker binds the port while the old master still runs and holds
whatever it kept.

Relay ports 28050-28099 (no other test's), below the kernel's port-0 range: the new worker
binds the call's relay port again once the old copies are closed, its birth held meanwhile,
and a socket bound to port 0 in between (a test beside this one) could hold it. Loopback
only, every wait bounded. Needs ptrace on the daemon's processes (root, or ptrace_scope 0):
skipped with the reason otherwise.
"""
import os
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Daemon, StreamClient, check, config,  # noqa: E402
                           error_code, free_port, peer_socket, run_tests, wait_for)
from harness_upgrade import held_upgrade, teardown  # noqa: E402

RELAY = (28050, 28099)
WORKERS = 2


def bound(port):
    """A UDP socket is bound to 127.0.0.1:port or the wildcard (/proc/net/udp)."""
    with open("/proc/net/udp") as f:
        next(f)
        return any(int(line.split()[1].split(":")[1], 16) == port for line in f)


def relaying(c, peer, relayed, what):
    """The client -> the peer (a Send indication), the peer -> the relayed address (a Data
    indication), once each."""
    out = ("%s to peer" % what).encode()
    c.send("127.0.0.1", peer.getsockname()[1], out)
    data, src = peer.recvfrom(2048)
    check(data == out and src[:2] == relayed, "%s: client -> peer: %r from %r (relayed %r)"
          % (what, data, src, relayed))
    back = ("%s from peer" % what).encode()
    peer.sendto(back, relayed)
    got = c.recv_data(timeout=10.0)
    check(got == back, "%s: peer -> client: %r" % (what, got))


def test_tcp_call_survives_upgrade_to_older(d):
    port = free_port(avoid=RELAY)
    peer = peer_socket()
    peer.settimeout(10.0)
    text = config(d, [("tcp", port, "TURN-TCP", ["peers"])], {"peers": ["127.0.0.1"]},
                  workers=WORKERS, relay=RELAY)
    daemon = Daemon(d, text, workers=WORKERS, env={"TURNGATE_TEST_NO_URELAYS": "1"}).start()
    c, pid = None, None
    try:
        c = StreamClient(port)
        relayed = tuple(c.relayed(c.allocate())[0])
        check(error_code(c.perm("127.0.0.1", peer.getsockname()[1])[3]) is None,
              "CreatePermission")
        relaying(c, peer, relayed, "before")

        old, hold, proc = held_upgrade(daemon, WORKERS)
        stopped = False
        try:
            os.kill(old, signal.SIGSTOP)
            stopped = True
            hold.release()
            # The new worker has adopted the call, or ended it, the old master stopped.
            wait_for(lambda: "stream connections taken over" in daemon.stderr(),
                     "the new worker to take the call over")
            log = daemon.stderr()
            check("cannot rebind its relay port" not in log, "the relay port:\n%s"
                  % log[-3000:])
        finally:
            hold.release()
            if stopped:
                os.kill(old, signal.SIGCONT)
            pid = hold.new
        out, err = proc.communicate(timeout=90)
        check(proc.returncode == 0, "upgrade: rc %s %s%s" % (proc.returncode, out, err))
        pid = int(out.strip().splitlines()[-1])
        wait_for(lambda: daemon.admin({"cmd": "status"})["pid"] == pid and
                 daemon.admin({"cmd": "status"})["workers"]["running"] == WORKERS,
                 "the new master to serve")
        check(bound(relayed[1]), "relay port %d bound again" % relayed[1])
        relaying(c, peer, relayed, "after the upgrade")
        check(c.refresh(600) is None, "Refresh after the upgrade")
        st = daemon.admin({"cmd": "stats"})["counters"]
        # The connection went over; its relay socket did not (bound again).
        check(st["stream_handovers"] == 1 and st["stream_handovers_ended"] == 0,
              "stream_handovers %d (want 1), ended %d (want 0)"
              % (st["stream_handovers"], st["stream_handovers_ended"]))
    finally:
        teardown(daemon, pid, c, peer)
    daemon.scan()


if __name__ == "__main__":
    run_tests([test_tcp_call_survives_upgrade_to_older])
