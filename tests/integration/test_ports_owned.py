#!/usr/bin/env python3
"""Ports are owned: turngated never joins a SO_REUSEPORT group it did not create (a python
socket, coturn's turnserver, a second turngated), at start and at reload, and names the
other holder; a start that fails removes the state file it created, never one it took over;
a state directory that is not on a tmpfs is a warning. An RFC 6062 allocation's relay port is
owned too (relay ports 24620-24629, no other test's)."""
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_PEER, A_RELAYED, Client, Daemon, Failure,  # noqa: E402
                           StreamClient, TcpPeer, check, config, error_code, free_port,
                           parse, parse_xor_addr, relay_range, run_tests, start_fails,
                           wait_for)

ROUTES = {"lo": ["127.0.0.0/8"]}


def held_by(log, port, pid, comm):
    return ("127.0.0.1:%d is already held by pid %d (%s)" % (port, pid, comm)) in log


def reuseport_socket(kind, port):
    s = socket.socket(socket.AF_INET, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    if kind == socket.SOCK_STREAM:
        s.listen(8)
    return s


def authenticate_all(port, n=20):
    """n fresh clients against port: how many got an Allocate success."""
    ok = 0
    for _ in range(n):
        c = Client(port)
        try:
            r = c.allocate(expect="any")
            ok += 1 if c.relayed(r) else 0
        except Exception:  # a foreign server's answer or none: not ours
            pass
        finally:
            c.close()
    return ok


def test_python_udp_reuseport_refused(d):
    port = free_port()
    holder = reuseport_socket(socket.SOCK_DGRAM, port)
    try:
        log = start_fails(d, config(d, [("udp", port, "TURN-UDP", ["lo"])], ROUTES,
                                    relay=relay_range()), "python UDP holder")
        check(held_by(log, port, os.getpid(), "python3"), "holder not named:\n" + log)
        check(not os.path.exists(os.path.join(d, "sec.state")),
              "the failed start left its state file: %r" % os.listdir(d))
    finally:
        holder.close()


def test_python_tcp_reuseport_refused(d):
    port = free_port()
    holder = reuseport_socket(socket.SOCK_STREAM, port)
    try:
        log = start_fails(d, config(d, [("tcp", port, "TURN-TCP", ["lo"])], ROUTES,
                                    relay=relay_range()), "python TCP holder")
        check(held_by(log, port, os.getpid(), "python3"), "holder not named:\n" + log)
    finally:
        holder.close()


def test_python_udp_reuseaddr_refused(d):
    """SO_REUSEADDR alone (coturn's UDP listeners): on UDP it lets a second bind succeed."""
    port = free_port()
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("0.0.0.0", port))
    try:
        log = start_fails(d, config(d, [("udp", port, "TURN-UDP", ["lo"])], ROUTES,
                                    relay=relay_range()), "python wildcard holder")
        check(("is already held by pid %d (python3)" % os.getpid()) in log,
              "holder not named:\n" + log)
    finally:
        holder.close()


def test_coturn_refused(d):
    turnserver = shutil.which("turnserver")
    if turnserver is None:
        print("     (coturn's turnserver not installed: case skipped)")
        return
    port = free_port()
    lo = relay_range()[0]
    log = open(os.path.join(d, "coturn.log"), "w")
    coturn = subprocess.Popen(
        [turnserver, "-n", "--listening-ip=127.0.0.1", "--listening-port=%d" % port,
         "--relay-ip=127.0.0.1", "--min-port=%d" % (lo + 900), "--max-port=%d" % (lo + 999),
         "--no-tls", "--no-dtls", "--no-cli", "--use-auth-secret",
         "--static-auth-secret=other", "--realm=coturn", "--pidfile=%s/coturn.pid" % d,
         "--log-file=stdout", "--simple-log"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        def bound():
            r = subprocess.run(["ss", "-Huln", "sport = :%d" % port], capture_output=True,
                               text=True)
            return r.returncode == 0 and str(port) in r.stdout
        wait_for(bound, "coturn on port %d" % port)
        text = config(d, [("udp", port, "TURN-UDP", ["lo"]), ("tcp", port, "TURN-TCP", ["lo"])],
                      ROUTES, relay=(lo, lo + 899))
        out = start_fails(d, text, "coturn holder")
        check(held_by(out, port, coturn.pid, "turnserver"), "coturn not named:\n" + out)
    finally:
        coturn.terminate()
        coturn.wait(timeout=30)
        log.close()


def test_second_turngated_refused(d):
    port = free_port()
    d1, d2 = os.path.join(d, "one"), os.path.join(d, "two")
    os.mkdir(d1)
    os.mkdir(d2)
    first = Daemon(d1, config(d1, [("udp", port, "TURN-UDP", ["lo"]),
                                   ("tcp", port, "TURN-TCP", ["lo"])],
                              ROUTES, relay=(59000, 59499))).start()
    try:
        pid = first.proc.pid
        log = start_fails(d2, config(d2, [("udp", port, "TURN-UDP", ["lo"])], ROUTES,
                                     relay=(59500, 59999)), "second turngated")
        # The first instance's workers hold the sockets too; any of its processes is named.
        check("127.0.0.1:%d is already held by pid" % port in log and "(turngated)" in log,
              "first instance not named:\n" + log)
        st = first.admin({"cmd": "status"})
        check(st["workers"]["running"] == 2, st)
        ok = authenticate_all(port)
        check(ok == 20, "the first instance's clients: %d of 20 authenticated" % ok)
        check(pid == first.proc.pid and first.proc.poll() is None, "first instance ended")
    finally:
        first.stop()


def test_reload_onto_held_port_refused(d):
    port, other = free_port(), free_port()
    holder = reuseport_socket(socket.SOCK_DGRAM, other)
    rng = relay_range()
    base = [("udp", port, "TURN-UDP", ["lo"])]
    daemon = Daemon(d, config(d, base, ROUTES, relay=rng)).start()
    try:
        gen = daemon.admin({"cmd": "status"})["generation"]
        daemon.write_config(config(d, base + [("udp2", other, "TURN-UDP", ["lo"])], ROUTES,
                                   relay=rng))
        daemon.signal(signal.SIGHUP)
        st = wait_for(lambda: (lambda s: s if s.get("last_reload", {}).get("trigger") == "SIGHUP"
                               else None)(daemon.admin({"cmd": "status"})),
                      "the SIGHUP reload result")
        check(st["last_reload"]["ok"] is False, st["last_reload"])
        check(st["generation"] == gen, "generation moved: %r" % st)
        names = [x["name"] for x in st["listeners"]]
        check(names == ["udp"], "listeners after the refused reload: %r" % names)
        check(held_by(daemon.stderr(), other, os.getpid(), "python3"),
              "holder not named:\n" + daemon.stderr())
        ok = authenticate_all(port, 5)
        check(ok == 5, "old listener after the refused reload: %d of 5" % ok)
    finally:
        holder.close()
        daemon.stop()


def test_doctor_names_late_joiner(d):
    """A socket that joins the group after the start (same user, SO_REUSEPORT): doctor's
    listener layer fails and names it."""
    port = free_port()
    daemon = Daemon(d, config(d, [("udp", port, "TURN-UDP", ["lo"])], ROUTES,
                              relay=relay_range())).start()
    try:
        rc, out, err = daemon.ctl("doctor")
        check("listener udp" in out and "also held" not in out, (rc, out, err))
        joiner = reuseport_socket(socket.SOCK_DGRAM, port)
        try:
            rc, out, err = daemon.ctl("doctor")
            check(rc == 1 and ("port %d is also held by pid %d (python3)" % (port, os.getpid()))
                  in out, (rc, out, err))
        finally:
            joiner.close()
    finally:
        daemon.stop()


def test_state_dir_not_tmpfs_warns(d):
    port = free_port()
    fs = subprocess.run(["stat", "-f", "-c", "%T", d], capture_output=True, text=True).stdout
    daemon = Daemon(d, config(d, [("udp", port, "TURN-UDP", ["lo"])], ROUTES,
                              relay=relay_range())).start()
    try:
        warned = "is not on a tmpfs" in daemon.stderr()
        if fs.strip() in ("tmpfs", "ramfs"):
            check(not warned, "warned on a tmpfs:\n" + daemon.stderr())
        else:
            check(warned, "no warning for a state dir on %s:\n%s" % (fs.strip(), daemon.stderr()))
    finally:
        daemon.stop()


def test_failed_start_keeps_taken_over_state(d):
    """A killed run's state file holds calls: a start that then fails must not remove it."""
    # The good start after the kill binds the listener and the call's relay port again:
    # below the kernel's port-0 range, where no socket bound to port 0 meanwhile (a test
    # beside this one) can hold one. 28400-28499: no other test's.
    port, other = free_port(late=True), free_port()
    rng = (28400, 28499)
    daemon = Daemon(d, config(d, [("udp", port, "TURN-UDP", ["lo"])], ROUTES,
                              relay=rng)).start()
    c = Client(port)
    try:
        check(c.relayed(c.allocate()), "no allocation")
    finally:
        c.close()
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait()
        daemon.err.close()
    state = os.path.join(d, "sec.state")
    check(os.path.exists(state), "no state file after kill -9")
    holder = reuseport_socket(socket.SOCK_DGRAM, other)
    try:
        log = start_fails(d, config(d, [("udp", port, "TURN-UDP", ["lo"]),
                                        ("udp2", other, "TURN-UDP", ["lo"])], ROUTES,
                                    relay=rng), "restart onto a held port")
        check(held_by(log, other, os.getpid(), "python3"), "holder not named:\n" + log)
        check(os.path.exists(state), "the failed start removed a state file it took over")
    finally:
        holder.close()
    # The calls are still there for the next good start.
    again = Daemon(d, config(d, [("udp", port, "TURN-UDP", ["lo"])], ROUTES, relay=rng))
    again.start()
    try:
        wait_for(lambda: "taken over" in again.stderr(), "the take-over line")
        check("1 allocations taken over" in again.stderr(), again.stderr())
    finally:
        again.stop()


def test_restart_after_kill_without_state_file(d):
    """kill -9 of the master with state_dir "": nothing to wait on, the old workers may
    still hold the sockets for a moment; an immediate restart still starts."""
    port = free_port(late=True)     # bound again by the restart
    text = config(d, [("udp", port, "TURN-UDP", ["lo"]), ("tcp", port, "TURN-TCP", ["lo"])],
                  ROUTES, relay=relay_range())
    text = text.replace('  healthcheck_endpoint: ""\n',
                        '  healthcheck_endpoint: ""\n  state_dir: ""\n')
    daemon = Daemon(d, text).start()
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait()
    daemon.err.close()
    again = Daemon(d, text).start()
    try:
        check(authenticate_all(port, 5) == 5, "restarted daemon does not serve")
    finally:
        again.stop()


TCP_RELAY = (24620, 24629)


def tcp_relay_daemon(d):
    """A daemon of one worker in directory d (made here): TURN-TCP routed to a TCP cluster
    on loopback, relaying from TCP_RELAY. The daemon, an RFC 6062 control connection with a
    permission for 127.0.0.1, and its allocation's relayed address."""
    os.mkdir(d)
    port = free_port()
    text = config(d, [("tcp", port, "TURN-TCP", ["lotcp"])], {"lotcp": ("TCP", ["127.0.0.1"])},
                  workers=1, relay=TCP_RELAY)
    daemon = Daemon(d, text, workers=1).start()
    c = StreamClient(port)
    r = c.allocate_tcp()
    check(error_code(c.perm("127.0.0.1")[3]) is None, "CreatePermission")
    return daemon, c, parse_xor_addr(r[3][A_RELAYED][0], r[2])


def announced(c, n, timeout):
    """The XOR-PEER-ADDRESS of each of up to n ConnectionAttempts read within timeout."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        f = c.frame(max(0.01, deadline - time.monotonic()))
        if f is None:
            break
        p = parse(f)
        if p and p[0] == 0x000C:
            got.append(parse_xor_addr(p[3][A_PEER][0], p[2]))
    return got


def test_tcp_relay_port_owned(d):
    """An RFC 6062 allocation's relay port is its own (worker/table.c wk_relay_tcp_bind).
    Its listening socket set SO_REUSEPORT, so a port that another program's SO_REUSEPORT
    listener held was bound anyway, and so was the same port by a second turngated's TCP
    allocation: the kernel then shared the peers' connections between the two, and a
    client missed the ConnectionAttempts of the peers the other one took (test_tcp_fair's
    test_relay_listener_out_of_descriptors failed so in full suite runs, beside other
    tests' daemons on the shared relay windows). Now a port held so is passed over; a
    SO_REUSEPORT listener cannot join the relayed port later; a Connect still comes from
    it; a second turngated on the same range (after that Connect) takes another port, and
    every peer of the first one's relayed address reaches its client."""
    holders = [reuseport_socket(socket.SOCK_STREAM, p) for p in range(*TCP_RELAY)]
    one = two = None
    socks = []
    try:
        one, c1, relayed = tcp_relay_daemon(os.path.join(d, "one"))
        socks.append(c1.sock)
        check(relayed[1] == TCP_RELAY[1], "the TCP allocation took port %d, held by a "
              "SO_REUSEPORT socket of another program (only %d was free)"
              % (relayed[1], TCP_RELAY[1]))
        for h in holders:
            h.close()
        holders = []
        try:
            reuseport_socket(socket.SOCK_STREAM, relayed[1]).close()
            raise Failure("a SO_REUSEPORT listener joined the relayed port %d" % relayed[1])
        except OSError as e:
            check(e.errno == errno.EADDRINUSE, "the late joiner: %r" % e)
        peer = TcpPeer("127.0.0.1")
        try:
            check(len(c1.connect("127.0.0.1", peer.port)) == 4, "Connect")
            wait_for(lambda: peer.sources, "the Connect's peer connection")
            check(peer.sources[0][1] == relayed[1], "the Connect came from %r, not from "
                  "the relayed port" % (peer.sources[0],))
        finally:
            peer.close()
        two, c2, relayed2 = tcp_relay_daemon(os.path.join(d, "two"))
        socks.append(c2.sock)
        check(relayed2 != relayed, "a second turngated's TCP allocation shares %r" % (relayed,))
        peers = [socket.create_connection(relayed, timeout=5) for _ in range(8)]
        socks += peers
        want = sorted(p.getsockname() for p in peers)
        got = sorted(announced(c1, len(peers), 10))
        check(got == want, "ConnectionAttempts for %r, peers %r" % (got, want))
        check(announced(c2, 1, 0.5) == [], "the second turngated announced a peer of the first")
    finally:
        for s in holders + socks:
            s.close()
        for daemon in (one, two):
            if daemon:
                check(daemon.stop() == 0, "exit status")


if __name__ == "__main__":
    run_tests([test_python_udp_reuseport_refused, test_python_tcp_reuseport_refused,
               test_python_udp_reuseaddr_refused, test_coturn_refused,
               test_second_turngated_refused, test_reload_onto_held_port_refused,
               test_doctor_names_late_joiner,
               test_state_dir_not_tmpfs_warns, test_failed_start_keeps_taken_over_state,
               test_restart_after_kill_without_state_file, test_tcp_relay_port_owned])
