#!/usr/bin/env python3
"""Listener identity across reloads (#38): every per-listener figure follows the listener's
name, not its position in the file.

Three UDP listeners a, b, c carry one allocation each and an exact number of datagrams
each way; a reload then removes a, adds d in front and swaps b and c, and more traffic
flows. After it, every per-listener series of /metrics (packets both ways, allocations
active and created, permission denials) and the admin `stats` listener counters are
exactly what was sent through that listener, d starts from zero (it does not inherit a's figures), the admin
`allocations` listing names each allocation's own listener, and its `listener` filter
(and turngatectl's --listener) picks exactly that listener's allocations. Before listener
slots, figures were indexed by the snapshot's order: b read c's counters after the swap,
d inherited a's, and the listing named the wrong listener. The same holds across a restart
that takes the state file over with the listeners reordered.
"""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Daemon, check, config_yaml, error_code, free_port,  # noqa: E402
                           peer_socket, run_tests, wait_equal)
from test_metrics import exact_client  # noqa: E402


def cfg(d, mport, names, ports, state=False):
    extra = '  metrics_endpoint: "http://127.0.0.1:%d/metrics"\n' % mport
    if state:
        extra += "  state_dir: %s\n" % d
    return config_yaml(os.path.join(d, "admin.sock"), [(n, ports[n], "TURN-UDP") for n in names],
                       extra_admin=extra)


def traffic(c, peer, relay, sends, back):
    """sends Send indications to the peer and back datagrams from it, each one checked."""
    pip, pport = peer.getsockname()
    for i in range(sends):
        c.send(pip, pport, b"s%03d" % i)
        data, src = peer.recvfrom(2048)
        check(data == b"s%03d" % i and src == relay, "relayed payload %r from %r" % (data, src))
    for i in range(back):
        peer.sendto(b"b%03d" % i, relay)
        check(c.recv_data(5.0) == b"b%03d" % i, "Data indication payload")


def client_addr(c):
    return "127.0.0.1:%d" % c.sock.getsockname()[1]


def check_listing(daemon, clients):
    """clients: {listener: [Client]}; every live allocation is listed under its listener,
    and the filter returns exactly the listener's."""
    allocs = daemon.admin({"cmd": "allocations"})["allocations"]
    got = {a["client"]: a["listener"] for a in allocs}
    want = {client_addr(c): n for n, cs in clients.items() for c in cs}
    check(got == want, "allocations listing (client: listener) %r, want %r" % (got, want))
    for n, cs in clients.items():
        f = daemon.admin({"cmd": "allocations", "listener": n})["allocations"]
        check(sorted(a["client"] for a in f) == sorted(client_addr(c) for c in cs),
              "filter listener=%s: %r" % (n, f))
        rc, out, err = daemon.ctl("allocations", "--listener", n)
        check(rc == 0, (rc, out, err))
        for c in cs:
            check(client_addr(c) in out, "turngatectl allocations --listener %s: %s" % (n, out))
        for m, others in clients.items():
            for o in others if m != n else ():
                check(client_addr(o) not in out,
                      "turngatectl allocations --listener %s lists %s's: %s" % (n, m, out))


def check_stats(daemon, want):
    """The admin `stats` per-listener counters agree with the scrape's (want: the series
    wait_equal just saw exact); only the configured listeners are listed."""
    lst = daemon.admin({"cmd": "stats"})["listeners"]
    names = {k.split('name="')[1].split('"')[0] for k in want if 'name="' in k}
    check(set(lst) == names, "stats listeners %r, want %r" % (sorted(lst), sorted(names)))
    for n in names:
        key = 'stunner_listener_packets_total{name="%s",direction="rx"}' % n
        check(lst[n]["client_pkts_in"] == want[key],
              "stats %s client_pkts_in %d, want %d" % (n, lst[n]["client_pkts_in"], want[key]))
        key = 'turngate_listener_allocations_active{name="%s"}' % n
        check(lst[n]["allocs_active"] == want[key],
              "stats %s allocs_active %d, want %d" % (n, lst[n]["allocs_active"], want[key]))


def want_for(n, c, sends, back, active, created):
    return {
        'stunner_listener_packets_total{name="%s",direction="rx"}' % n: c.sent if c else 0,
        'stunner_listener_packets_total{name="%s",direction="tx"}' % n:
            c.sent - sends + back if c else 0,
        'turngate_listener_allocations_active{name="%s"}' % n: active,
        'turngate_listener_allocations_created_total{name="%s"}' % n: created,
        'turngate_permission_denied_total{listener="%s"}' % n: 0,
    }


def test_reload_remove_add_reorder(d):
    ports = {n: free_port(late=True) for n in "abcd"}   # d: bound at the reload
    mport = free_port()
    peer = peer_socket()
    peer.settimeout(5.0)
    daemon = Daemon(d, cfg(d, mport, "abc", ports)).start()
    try:
        # Different counts per listener, so that a figure read at another's slot shows.
        plan = {"a": (3, 1), "b": (5, 2), "c": (8, 4)}
        cl, relay, sent = {}, {}, {}
        for n in "abc":
            c = cl[n] = exact_client(ports[n])
            c.challenge()
            relay[n] = c.relayed(c.allocate())[0]
            check(error_code(c.perm("127.0.0.1")[3]) is None, "CreatePermission")
            traffic(c, peer, relay[n], *plan[n])
            sent[n] = list(plan[n])
        want = {}
        for n in "abc":
            want.update(want_for(n, cl[n], sent[n][0], sent[n][1], 1, 1))
        wait_equal(mport, want)
        check_stats(daemon, want)
        check_listing(daemon, {n: [cl[n]] for n in "abc"})

        # Remove a, add d first, swap b and c; more traffic on b and c, d's own.
        daemon.write_config(cfg(d, mport, "dcb", ports))
        r = daemon.admin({"cmd": "reload"})
        check(r.get("ok") is True, "reload: %r" % (r,))
        for n, (s, b) in (("b", (2, 3)), ("c", (1, 1))):
            traffic(cl[n], peer, relay[n], s, b)
            sent[n][0] += s
            sent[n][1] += b
        cd = exact_client(ports["d"])
        cd.challenge()
        relay["d"] = cd.relayed(cd.allocate())[0]
        check(error_code(cd.perm("127.0.0.1")[3]) is None, "CreatePermission on d")
        traffic(cd, peer, relay["d"], 2, 2)
        want = {}
        for n in "bc":
            want.update(want_for(n, cl[n], sent[n][0], sent[n][1], 1, 1))
        want.update(want_for("d", cd, 2, 2, 1, 1))
        want["stunner_allocations_active"] = 3
        got = wait_equal(mport, want)
        check(not any('name="a"' in k or 'listener="a"' in k for k in got),
              "the removed listener is still rendered")
        check_stats(daemon, want)
        check_listing(daemon, {"b": [cl["b"]], "c": [cl["c"]], "d": [cd]})

        # b's allocation ends: only b's gauge goes down.
        cl["b"].release()
        want['turngate_listener_allocations_active{name="b"}'] = 0
        want['stunner_listener_packets_total{name="b",direction="rx"}'] = cl["b"].sent
        want['stunner_listener_packets_total{name="b",direction="tx"}'] = \
            cl["b"].sent - sent["b"][0] + sent["b"][1]
        want["stunner_allocations_active"] = 2
        wait_equal(mport, want)
        check_stats(daemon, want)
        check_listing(daemon, {"b": [], "c": [cl["c"]], "d": [cd]})
        check(daemon.stop() == 0, "exit status")
    finally:
        peer.close()
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill()


def test_restart_keeps_slots(d):
    """A restart that takes the state file over, with the listeners reordered and one
    added in front: the carried counters stay with their listeners' names."""
    # Bound again (d first) by the restart, mport too.
    ports = {n: free_port(late=True) for n in "abd"}
    mport = free_port(late=True)
    peer = peer_socket()
    peer.settimeout(5.0)
    daemon = Daemon(d, cfg(d, mport, "ab", ports, state=True)).start()
    try:
        cl = {}
        want = {}
        for n, (s, b) in (("a", (3, 1)), ("b", (6, 2))):
            c = cl[n] = exact_client(ports[n])
            c.challenge()
            relay = c.relayed(c.allocate())[0]
            check(error_code(c.perm("127.0.0.1")[3]) is None, "CreatePermission")
            traffic(c, peer, relay, s, b)
            c.release()
            want.update(want_for(n, c, s, b, 0, 1))
        wait_equal(mport, want)
        check(daemon.stop() == 0, "exit status")
        daemon = Daemon(d, cfg(d, mport, "dba", ports, state=True)).start()
        check("taken over" in daemon.stderr() or "allocations taken over" in daemon.stderr(),
              "no take-over:\n%s" % daemon.stderr())
        want.update(want_for("d", None, 0, 0, 0, 0))
        wait_equal(mport, want)
        check_stats(daemon, want)
        check(daemon.stop() == 0, "exit status")
    finally:
        peer.close()
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill()


if __name__ == "__main__":
    run_tests([test_reload_remove_add_reorder, test_restart_keeps_slots])
