#!/usr/bin/env python3
"""Relay ports that fill the kernel's ephemeral range (issue 42; root: a network namespace
of its own).

At 250,000 allocations on four relay addresses (ports 1024-63523, which hold the whole
ephemeral range of each address), kill -9 of one worker lost 7,248 of its 14,383
allocations, "not rebindable" (EADDRINUSE). A worker tests whether a relay address is
local at every snapshot by binding it to port 0, which fails once the address has no free
ephemeral port: it then took its own relay address for a foreign one and bound relay
sockets to the wildcard, where the same port of the other relay address refuses them.

Reduced: in a new network namespace the ephemeral range is 10 ports (40000-40009), and two
relay addresses (127.0.10.1 and .2) have exactly those as relay range; 20 allocations
fill both, 2 workers.
- a reload (a new snapshot, applied while every ephemeral port is held), then one
  allocation ends: the next Allocate on its address gets the freed port (on main: 508,
  the wildcard bind refused by the other address's socket on that port).
- kill -9 of worker 0: its replacement re-adopts every one of its allocations (none
  "not rebindable"), all 20 relay.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (CLONE_NEWNET, Daemon, check, echo_peer, run_tests_as_root,  # noqa
                           unshare, wait_for)
import scale_clients  # noqa: E402
import harness_admin as ts  # noqa: E402

RELAYS = ("127.0.10.1", "127.0.10.2")
EPH = (40000, 40009)
N = 2 * (EPH[1] - EPH[0] + 1)


def setup():
    unshare(CLONE_NEWNET)
    with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
        f.write("%d %d\n" % EPH)


def config(d):
    text = ("version: v1\nadmin:\n  name: respawn\n  loglevel: all:INFO\n  workers: 2\n"
            "  admin_socket: %s/admin.sock\n  drain_timeout: 1\n  healthcheck_endpoint: \"\"\n"
            "  relay_port_min: %d\n  relay_port_max: %d\n"
            "auth:\n  type: ephemeral\n  realm: %s\n  credentials:\n    secret: %s\n"
            "listeners:\n" % (d, EPH[0], EPH[1], ts.REALM, ts.SECRET))
    for k, ip in enumerate(RELAYS):
        text += ("  - {name: udp%d, protocol: TURN-UDP, address: %s, port: %d, "
                 "routes: [loopback]}\n" % (k, ip, 30000 + k))
    return text + "clusters:\n  - {name: loopback, type: STATIC, endpoints: [127.0.0.0/8]}\n"


def refresh0(fleet, i):
    """Refresh with LIFETIME 0 (the allocation ends); the clients without an answer."""
    def first(j):
        a, key = fleet.authed(j, ts.REFRESH, [(ts.A_LIFETIME, b"\0\0\0\0")])
        return ts.build(ts.REFRESH, ts.REQUEST, os.urandom(12), a, key=key)
    return fleet.run([i], first, lambda j, p: None, 1, 10.0)


def test_ports_exhausted(d):
    peer = ("127.0.0.1", echo_peer())
    daemon = Daemon(d, config(d)).start()
    fleet = None
    try:
        fleet = scale_clients.Fleet(N, [31000 + k for k in range(4)],
                                    [(ip, 30000 + k) for k, ip in enumerate(RELAYS)],
                                    users=4)
        check(not fleet.allocate(list(range(N))) and not fleet.errors,
              "allocations failed: %r" % fleet.errors)
        ports = {ip: sorted(p for a, p in fleet.relayed if a == ip) for ip in RELAYS}
        check(all(v == list(range(EPH[0], EPH[1] + 1)) for v in ports.values()),
              "the relay ports do not fill both addresses' ephemeral ranges: %r" % ports)
        owners = {}
        for a in daemon.admin({"cmd": "allocations"})["allocations"]:
            owners[a["worker"]] = owners.get(a["worker"], 0) + 1
        check(len(owners) == 2, "both workers hold allocations: %r" % owners)
        r = daemon.admin({"cmd": "reload"})
        check(r["ok"], "reload: %r" % r)
        time.sleep(0.5)    # the workers apply the new snapshot
        gone = next(i for i in range(N) if fleet.relayed[i][0] == RELAYS[0])
        check(not refresh0(fleet, gone), "Refresh 0 of client %d unanswered" % gone)
        wait_for(lambda: daemon.admin({"cmd": "status"})["allocations"] == N - 1,
                 "the allocation ended")
        freed = fleet.relayed[gone]
        fleet.relayed[gone], fleet.nonce[gone] = None, None
        fleet.allocate([gone])
        check(fleet.relayed[gone] == freed,
              "an Allocate with port %d free on %s got %r (error %r)"
              % (freed[1], freed[0], fleet.relayed[gone], fleet.errors.get(gone)))
        fleet.permit(list(range(N)), peer)
        w0 = daemon.admin({"cmd": "workers"})["workers"][0]["pid"]
        daemon.allowed_deaths = 1
        os.kill(w0, signal.SIGKILL)
        wait_for(lambda: "slot 0: predecessor's allocations" in daemon.stderr(),
                 "worker 0's replacement adopting")
        line = [x for x in daemon.stderr().splitlines()
                if "slot 0: predecessor's allocations" in x][-1]
        check(line.endswith(" 0 not rebindable") and "%d adopted" % owners[0] in line,
              "worker 0 held %d: %s" % (owners[0], line))
        # Once libev watches the adopted relay sockets, the CPU line (bench/scale.py ends
        # a take-over's gap there)
        wait_for(lambda: "slot 0: %d adopted in " % owners[0] in daemon.stderr(),
                 "worker 0's replacement watching its relay sockets")
        line = [x for x in daemon.stderr().splitlines() if "slot 0: %d adopted in " % owners[0]
                in x][-1]
        check("us once its relay sockets are watched (minor page faults: " in line, line)
        got = fleet.probe(list(range(N)), peer)
        check(len(got) == N and daemon.admin({"cmd": "status"})["allocations"] == N,
              "after the respawn %d of %d relay" % (len(got), N))
        print("worker 0's %d allocations re-adopted with every ephemeral port held"
              % owners[0])
    finally:
        if fleet is not None:
            fleet.close()
        daemon.stop()


if __name__ == "__main__":
    run_tests_as_root([test_ports_exhausted],
                      "a network namespace with a 10-port ephemeral range", setup)
