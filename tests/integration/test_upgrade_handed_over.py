"""A live upgrade does not wait for the old workers' exits (issue 42): an old worker that
handed everything over says so (IPC_HANDED_OVER) and its master counts it stopped at once,
so the new master takes the table over while the kernel still releases the old worker's
descriptors and memory.

How, without timing: every old worker is held at its exit (ptrace, PTRACE_O_TRACEEXIT: the
tracee stops in exit() before the kernel closes its descriptors, and its parent cannot reap
it). `turngatectl upgrade` must still succeed, the new master serve with all its workers
and every allocation, and each sampled UDP allocation relay, while both old workers are
still held there. On a build whose old master waits for its workers' exits the upgrade
cannot end while they are held (it fails when its timeout passes). Then the held workers
go, and a failed upgrade after the hand-over still gives the old generation everything
back (test_upgrade_relays.py's check: the same relay sockets, all allocations relaying).

Relay ports 44800-44899 (no other test's). Loopback only, every wait bounded. Needs
ptrace on the daemon's workers (root, or ptrace_scope 0): skipped with the reason
otherwise.
"""
import ctypes
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATECTL, Daemon, check, config,  # noqa: E402
                           free_port, run_tests)
from test_upgrade_relays import (check_relaying, check_same_sockets,  # noqa: E402
                                 relay_inodes, setup)
from test_upgrade_streams import failed_upgrade, stop_master  # noqa: E402

import test_upgrade_relays  # noqa: E402

RELAY = (44800, 44899)
N = 60
SAMPLE = 4
WORKERS = 2

PTRACE_CONT, PTRACE_DETACH, PTRACE_SEIZE = 7, 17, 0x4206
PTRACE_O_TRACEEXIT, PTRACE_EVENT_EXIT = 0x40, 6
WALL = 0x40000000

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long


def ptrace(req, pid, addr=0, data=0):
    if libc.ptrace(req, pid, ctypes.c_void_p(addr), ctypes.c_void_p(data)) < 0:
        e = ctypes.get_errno()
        raise OSError(e, "ptrace(%d, %d): %s" % (req, pid, os.strerror(e)))


class ExitHold:
    """Holds the traced processes at their exit; passes every other stop on."""

    def __init__(self, pids):
        self.pids, self.held = list(pids), set()
        for p in self.pids:
            ptrace(PTRACE_SEIZE, p, 0, PTRACE_O_TRACEEXIT)

    def poll(self):
        """Handles the stops that happened (never blocks)."""
        for p in self.pids:
            while p not in self.held:
                try:
                    pid, status = os.waitpid(p, os.WNOHANG | WALL)
                except ChildProcessError:
                    break
                if pid == 0 or not os.WIFSTOPPED(status):
                    break
                if status >> 8 == (5 | PTRACE_EVENT_EXIT << 8):    # SIGTRAP | event
                    self.held.add(p)
                    break
                sig = os.WSTOPSIG(status)       # a signal for the tracee: delivered
                ptrace(PTRACE_CONT, p, 0, sig)

    def wait_held(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.held) < len(self.pids):
            self.poll()
            time.sleep(0.01)
        return len(self.held) == len(self.pids)

    def release(self):
        for p in self.pids:
            try:
                ptrace(PTRACE_DETACH, p)
            except OSError:
                pass


def test_upgrade_goes_on_while_old_workers_exit(d):
    port = free_port(avoid=RELAY)
    held = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    held.bind(("127.0.0.1", 0))
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    listeners = [("udp", port, "TURN-UDP", ["peers"])]
    text = config(d, listeners, {"peers": ["127.0.0.1"]}, workers=WORKERS, relay=RELAY)
    daemon = Daemon(d, text, workers=WORKERS).start()
    clients, pid, hold, ctl = [], None, None, None
    try:
        clients, ports = setup(d, daemon, port)
        sample = clients[:: N // SAMPLE][:SAMPLE]
        for c, _ in sample:
            c.perm("127.0.0.1", peer.getsockname()[1])
        check_relaying(sample, peer, "before")
        before = relay_inodes()
        old = daemon.admin({"cmd": "status"})["pid"]
        olds = [w["pid"] for w in daemon.admin({"cmd": "workers"})["workers"]]
        check(len(olds) == WORKERS, "workers listed: %r" % olds)
        try:
            hold = ExitHold(olds)
        except OSError as e:
            print("SKIP: cannot trace the workers (%s)" % e)
            sys.exit(77)

        ctl = subprocess.Popen([TURNGATECTL, "-s", daemon.sock, "upgrade"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 90     # beyond the upgrade's own timeout
        while ctl.poll() is None and time.monotonic() < deadline:
            hold.poll()
            time.sleep(0.01)
        hold.poll()
        if ctl.poll() is None:
            ctl.kill()
        out, err = ctl.communicate()
        check(ctl.returncode == 0, "upgrade with the old workers held at their exit: rc %s"
              "\n%s%s" % (ctl.returncode, out, err))
        pid = int(out.strip().splitlines()[-1])
        check(pid != old, "no new master")
        # Both old workers reached their exit and are still held there (not reaped).
        check(hold.wait_held(), "old workers at their exit: %r of %r" % (sorted(hold.held),
                                                                          olds))
        st = daemon.admin({"cmd": "status"})
        check(st["pid"] == pid and st["workers"]["running"] == WORKERS,
              "the new master serves with its workers: %r" % st["workers"])
        check(len(daemon.allocations()) == N, "allocations listed after the upgrade")
        check_relaying(sample, peer, "after the upgrade, old workers held")
        check("handed everything over" in daemon.stderr(), "no hand-over line in the log")
        hold.release()
        hold = None
        check_same_sockets(before, ports, "after the upgrade")

        # A failed upgrade after the hand-over: everything goes back to the old generation.
        failed_upgrade(daemon, d, text, listeners, held, WORKERS, relay=RELAY)
        check(len(daemon.allocations()) == N, "allocations listed after the failed upgrade")
        check_same_sockets(before, ports, "after the failed upgrade")
        check_relaying(sample, peer, "after the failed upgrade")
    finally:
        if ctl is not None and ctl.poll() is None:
            ctl.kill()
            ctl.wait()
        if hold is not None:
            hold.release()
        for c, _ in clients:
            c.close()
        held.close()
        peer.close()
        stop_master(daemon, pid)
        daemon.kill()
    daemon.scan()


if __name__ == "__main__":
    test_upgrade_relays.RELAY = RELAY
    test_upgrade_relays.N = N
    run_tests([test_upgrade_goes_on_while_old_workers_exit])
