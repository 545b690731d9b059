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
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import TURNGATECTL, check, run_tests  # noqa: E402
from test_upgrade_relays import (check_failed_upgrade, check_relaying,  # noqa: E402
                                 check_same_sockets, relaying)

RELAY = (44800, 44899)
N = 60
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


def hold_exits(daemon, n):
    """The pids of daemon's n workers and an ExitHold of them; exits 77 (SKIP) with the
    reason where they cannot be traced."""
    olds = [w["pid"] for w in daemon.admin({"cmd": "workers"})["workers"]]
    check(len(olds) == n, "workers listed: %r" % olds)
    try:
        return olds, ExitHold(olds)
    except OSError as e:
        print("SKIP: cannot trace the workers (%s)" % e)
        sys.exit(77)


def upgrade_holding(r, hold):
    """turngatectl upgrade while hold's stops are handled; returns the new master's pid."""
    ctl = subprocess.Popen([TURNGATECTL, "-s", r.daemon.sock, "upgrade"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90     # beyond the upgrade's own timeout
        while ctl.poll() is None and time.monotonic() < deadline:
            hold.poll()
            time.sleep(0.01)
        hold.poll()
    finally:
        if ctl.poll() is None:
            ctl.kill()
        out, err = ctl.communicate()
    check(ctl.returncode == 0, "upgrade with the old workers held at their exit: rc %s"
          "\n%s%s" % (ctl.returncode, out, err))
    return int(out.strip().splitlines()[-1])


def test_upgrade_goes_on_while_old_workers_exit(d):
    with relaying(d, RELAY, N, WORKERS) as r:
        old = r.daemon.admin({"cmd": "status"})["pid"]
        olds, hold = hold_exits(r.daemon, WORKERS)
        try:
            r.pid = upgrade_holding(r, hold)
            check(r.pid != old, "no new master")
            # Both old workers reached their exit and are still held there (not reaped).
            check(hold.wait_held(), "old workers at their exit: %r of %r"
                  % (sorted(hold.held), olds))
            st = r.daemon.admin({"cmd": "status"})
            check(st["pid"] == r.pid and st["workers"]["running"] == WORKERS,
                  "the new master serves with its workers: %r" % st["workers"])
            check(len(r.daemon.allocations()) == N, "allocations listed after the upgrade")
            check_relaying(r.sample, r.peer, "after the upgrade, old workers held")
            check("handed everything over" in r.daemon.stderr(),
                  "no hand-over line in the log")
        finally:
            hold.release()
        check_same_sockets(r.before, r.ports, "after the upgrade", RELAY)
        # Everything goes back to the old generation.
        check_failed_upgrade(d, r)


if __name__ == "__main__":
    run_tests([test_upgrade_goes_on_while_old_workers_exit])
