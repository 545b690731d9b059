"""A live upgrade whose old master cannot take every handed-over socket (its descriptor
limit) counts each one it loses: every socket of a TURN-TCP call (its connection, its UDP
relay socket) is either taken over by the new workers (stream_handovers) or counted ended
(stream_handovers_ended), and the old master says why in its log.

How: 30 TURN-TCP calls with UDP allocations through 2 workers (60 sockets to hand over);
then the old master's soft descriptor limit (prlimit, the master only: its workers keep
theirs) is lowered to 30 free descriptors, and the upgrade runs. The new master, which
inherits it, raises it again at its start (up to the hard limit), so the losses are the
old master's. On a build that takes a socket over its limit for a malformed frame
neither it nor the next one of that worker is counted: the sum falls short of 60.

Relay ports 45350-45399 (no other test's). Loopback only, every wait bounded.
"""
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Daemon, Failure, StreamClient, check, config,  # noqa: E402
                           free_port, run_tests, wait_for)
from harness_upgrade import teardown  # noqa: E402

RELAY = (45350, 45399)
N = 30
WORKERS = 2
SLACK = 30  # the upgrade's own: turngatectl's connection, the channel


def test_sockets_over_the_limit_counted(d):
    port = free_port(avoid=RELAY)
    text = config(d, [("tcp", port, "TURN-TCP", ["peers"])], {"peers": ["127.0.0.1"]},
                  workers=WORKERS, relay=RELAY)
    daemon = Daemon(d, text, workers=WORKERS).start()
    calls, pid = [], None
    try:
        for i in range(N):
            c = StreamClient(port, user="tcp%d" % i)
            calls.append(c)
            check(len(c.relayed(c.allocate())) == 1, "call %d: one relayed address" % i)
        old = daemon.admin({"cmd": "status"})["pid"]
        # A limit with SLACK free numbers below it (some of the master's descriptors
        # sit high up; a new one takes the lowest free number).
        held, limit = {int(f) for f in os.listdir("/proc/%d/fd" % old)}, 0
        while limit - len([f for f in held if f < limit]) < SLACK:
            limit += 1
        # The soft limit only: the new master inherits it and raises it again at its
        # start (sizing: up to the hard limit).
        hard = resource.prlimit(old, resource.RLIMIT_NOFILE)[1]
        resource.prlimit(old, resource.RLIMIT_NOFILE, (limit, hard))
        rc, out, err = daemon.ctl("upgrade")
        check(rc == 0, "upgrade: rc %d %s%s" % (rc, out, err))
        pid = int(out.strip().splitlines()[-1])
        wait_for(lambda: daemon.admin({"cmd": "status"})["pid"] == pid and
                 daemon.admin({"cmd": "status"})["workers"]["running"] == WORKERS,
                 "the new master to serve")
        # Each socket is counted once: by the old master when it did not fit, by the new
        # worker it went to once that one has adopted. (Not "each new worker logs what it
        # got": a worker whose every socket was lost at the old master gets none and logs
        # nothing, which left this wait to time out now and then.)
        def counted():
            st = daemon.admin({"cmd": "stats"})["counters"]
            return st["stream_handovers"], st["stream_handovers_ended"]
        try:
            wait_for(lambda: sum(counted()) >= 2 * N, "every socket to be counted")
        except Failure:
            pass  # the checks below say what is missing
        got, ended = counted()
        log = daemon.stderr()
        print("%d sockets taken over, %d ended" % (got, ended))
        check(ended > 0 and "did not fit under this master's limit" in log,
              "no socket over the old master's limit (ended %d):\n%s" % (ended, log[-3000:]))
        check(got + ended == 2 * N, "stream_handovers %d + ended %d != %d sockets"
              % (got, ended, 2 * N))
    finally:
        teardown(daemon, pid, *calls)
    daemon.scan()


if __name__ == "__main__":
    run_tests([test_sockets_over_the_limit_counted])
