#!/usr/bin/env python3
"""Ports are owned: turngated never joins a SO_REUSEPORT group it did not create (a python
socket, coturn's turnserver, a second turngated), at start and at reload, and names the
other holder; a start that fails removes the state file it created, never one it took over;
a state directory that is not on a tmpfs is a warning."""
import os
import shutil
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Client, Daemon, check, config, free_port,  # noqa: E402
                           relay_range, run_tests, start_fails, wait_for)

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


if __name__ == "__main__":
    run_tests([test_python_udp_reuseport_refused, test_python_tcp_reuseport_refused,
               test_python_udp_reuseaddr_refused, test_coturn_refused,
               test_second_turngated_refused, test_reload_onto_held_port_refused,
               test_doctor_names_late_joiner,
               test_state_dir_not_tmpfs_warns, test_failed_start_keeps_taken_over_state,
               test_restart_after_kill_without_state_file])
