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
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import TURNGATECTL, check, run_tests  # noqa: E402
from harness_upgrade import (check_failed_upgrade, check_relaying,  # noqa: E402
                             check_same_sockets, hold_exits, relaying, run_until)

RELAY = (44800, 44899)
N = 60
WORKERS = 2

def upgrade_holding(r, hold):
    """turngatectl upgrade while hold's stops are handled; returns the new master's pid."""
    ctl = subprocess.Popen([TURNGATECTL, "-s", r.daemon.sock, "upgrade"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_until(ctl, hold, 90)     # beyond the upgrade's own timeout
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
