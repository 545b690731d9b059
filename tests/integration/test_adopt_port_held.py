#!/usr/bin/env python3
"""A relay port still held when the workers re-adopt after kill -9 of the whole daemon
(issue 42; root: a network namespace of its own).

The instance lock comes free before the kernel has closed a killed worker's relay sockets
(it releases a dying process's files in the reverse order of their numbers, the lock's
high one first: shm/state.c), so a successor's worker can find a relay port still bound
by its predecessor's socket. It released that allocation ("not rebindable": lost); it now
waits for the port, tried again for up to 10 s, then releases it as before.

Here a socket of the test stands in for the dying predecessor's: 8 allocations on two
relay addresses, 2 workers, every process killed -9 and gone, then the test binds the
relay address and port of two allocations and starts the daemon again.
- the worker that owns each says it waits for the port, and adopts the others at once;
- the first port let go: its allocation is adopted and relays;
- the second held on: after the bound its allocation is released (counted: status says
  7 allocations), the other 7 relay.
"""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (CLONE_NEWNET, Daemon, alive, check, echo_peer,  # noqa: E402
                           run_tests_as_root, unshare, wait_for)
import scale_clients  # noqa: E402
import harness_admin as ts  # noqa: E402

RELAYS = ("127.0.10.1", "127.0.10.2")
RELAY_MIN, RELAY_MAX = 42000, 42099
N = 8
WAIT = "allocations wait for their relay ports"
CAME_FREE = "allocations adopted once their relay ports came free"


def setup():
    unshare(CLONE_NEWNET)


def config(d):
    text = ("version: v1\nadmin:\n  name: portheld\n  loglevel: all:INFO\n  workers: 2\n"
            "  admin_socket: %s/admin.sock\n  drain_timeout: 1\n  healthcheck_endpoint: \"\"\n"
            "  relay_port_min: %d\n  relay_port_max: %d\n"
            "auth:\n  type: ephemeral\n  realm: %s\n  credentials:\n    secret: %s\n"
            "listeners:\n" % (d, RELAY_MIN, RELAY_MAX, ts.REALM, ts.SECRET))
    for k, ip in enumerate(RELAYS):
        text += ("  - {name: udp%d, protocol: TURN-UDP, address: %s, port: %d, "
                 "routes: [loopback]}\n" % (k, ip, 30000 + k))
    return text + "clusters:\n  - {name: loopback, type: STATIC, endpoints: [127.0.0.0/8]}\n"


def lines(daemon, pat):
    return [x for x in daemon.stderr().splitlines() if pat in x]


def test_port_held_at_adoption(d):
    peer = ("127.0.0.1", echo_peer())
    daemon = Daemon(d, config(d)).start()
    fleet = None
    held = []
    try:
        fleet = scale_clients.Fleet(N, [31000 + k for k in range(2)],
                                    [(ip, 30000 + k) for k, ip in enumerate(RELAYS)],
                                    users=2)
        check(not fleet.allocate(list(range(N))) and not fleet.errors,
              "allocations failed: %r" % fleet.errors)
        fleet.permit(list(range(N)), peer)
        check(len(fleet.probe(list(range(N)), peer)) == N, "all relay before the kill")
        pids = [w["pid"] for w in daemon.admin({"cmd": "workers"})["workers"]]
        pids.append(daemon.proc.pid)
        daemon.kill_all()
        # gone, their files released (a zombie's are)
        wait_for(lambda: not any(alive(p) for p in pids), "the killed processes gone")
        # a predecessor's sockets not closed yet: the test holds two relay ports
        freed, kept = 0, N - 1
        for i in (freed, kept):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(fleet.relayed[i])
            held.append(s)
        daemon = Daemon(d, open(daemon.conf).read()).start()
        wait_for(lambda: lines(daemon, WAIT) or lines(daemon, "predecessor's allocations"),
                 "the adoption")
        wait_for(lambda: len(lines(daemon, "predecessor's allocations")) == 2,
                 "both workers' adoption lines")
        waiting = sum(int(x.split(WAIT)[0].split()[-1]) for x in lines(daemon, WAIT))
        lost = sum(int(x.split(" not rebindable")[0].split()[-1])
                   for x in lines(daemon, "predecessor's allocations"))
        check(waiting == 2 and lost == 0,
              "%d allocations wait for their ports, %d not rebindable (want 2, 0):\n%s"
              % (waiting, lost, "\n".join(lines(daemon, "slot"))))
        held.pop(0).close()
        got = fleet.probe([freed], peer, deadline=8)
        check(got == {freed}, "the allocation whose port came free relays")
        def tried():
            ends = lines(daemon, CAME_FREE)
            return (sum(int(x.split(CAME_FREE)[0].split()[-1]) for x in ends),
                    sum(int(x.split(CAME_FREE)[1].split(",")[1].split()[0]) for x in ends))
        wait_for(lambda: sum(tried()) == 2, "the last try (10 s)", timeout=30)
        adopted, released = tried()
        ends = lines(daemon, CAME_FREE)
        check(adopted == 1 and released == 1,
              "after the tries: %d adopted, %d released (want 1, 1):\n%s"
              % (adopted, released, "\n".join(ends)))
        held.pop(0).close()
        got = fleet.probe(list(range(N)), peer, deadline=5)
        check(got == set(range(N)) - {kept}, "the others relay: %r" % sorted(got))
        wait_for(lambda: daemon.admin({"cmd": "status"})["allocations"] == N - 1,
                 "%d allocations counted" % (N - 1))
        print("adopted after its port came free; released after the bound when it did not")
    finally:
        for s in held:
            s.close()
        if fleet is not None:
            fleet.close()
        daemon.stop()


if __name__ == "__main__":
    run_tests_as_root([test_port_held_at_adoption], "a network namespace", setup)
