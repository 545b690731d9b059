"""A live upgrade's old worker that said it handed everything over (IPC_HANDED_OVER) is
counted stopped at once, before its exit; its master still logs that exit when it reaps
it (`worker N (pid P) exited with status S`), as it logs every other worker's (issue 42).

How, without timing: both old workers are held at their exit (ptrace, PTRACE_O_TRACEEXIT:
stopped in exit(), after their last frame, so their master has read IPC_HANDED_OVER and
cannot have reaped them yet) through an upgrade that fails after the hand-over, so the old
master serves on and is the one that reaps them. Once the test lets them go, its log must
say how each exited. On a build that forgets a handed-over worker when it counts it
stopped, no line ever names them.

The same slots can hand over twice before their master reaps the first: the old workers
stay held through a second failed upgrade, in which the workers the first one respawned
hand over and exit; the master must still log the first ones' exits once they are let go.
On a build that keeps one handed-over worker per slot, the second replaces the first and
the first's exit goes unlogged.

(After an upgrade that succeeds the old master exits as soon as the new one serves; a
worker still exiting then is reaped by whoever adopts orphans, init or systemd, and its
exit is not logged: docs/operations.md, *Live upgrade*.)

Relay ports 45200-45249 (no other test's). Loopback only, every wait bounded. Needs ptrace
on the daemon's workers (root, or ptrace_scope 0): skipped with the reason otherwise.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import check, run_tests, wait_for  # noqa: E402
from harness_upgrade import (InThread, check_relaying, failed_upgrade,  # noqa: E402
                             hold_exits, relaying, run_until)

RELAY = (45200, 45249)
N = 10
WORKERS = 2


def exits_logged(text, pids):
    """{pid: the exit line of the master about worker pid} for those of pids it logged."""
    got = {}
    for m in re.finditer(r"worker \d+ \(pid (\d+)\) (exited with status \d+|killed by "
                         r"signal \d+[^\n]*)", text):
        if int(m.group(1)) in pids:
            got[int(m.group(1))] = m.group(0)
    return got


def failed_upgrade_holding(d, r, hold, olds):
    """check_failed_upgrade's upgrade, with hold's stops (SIGQUIT among them) passed on
    meanwhile; then olds are held at their exit."""
    t = InThread(failed_upgrade, r.daemon, d, r.text, r.listeners, r.held, WORKERS, RELAY)
    run_until(t, hold, 120)    # beyond the upgrade's own timeout
    t.communicate(1)
    check(t.returncode == 0, "the failed upgrade did not end")
    check(hold.wait_held(), "old workers at their exit: %r of %r" % (sorted(hold.held), olds))


def check_exits_logged(r, pids, what):
    """Waits (bounded) until the master has logged the exit of each of pids: status 0."""
    wait_for(lambda: len(exits_logged(r.daemon.stderr(), pids)) == len(pids),
             "the master to log the exits of %s" % what, timeout=30)
    lines = exits_logged(r.daemon.stderr(), pids)
    check(all(v.endswith("exited with status 0") for v in lines.values()),
          "the exits of %s: %r" % (what, lines))
    print("%s: %s" % (what, "; ".join(lines.values())))


def test_handed_over_worker_exit_logged(d):
    with relaying(d, RELAY, N, WORKERS) as r:
        olds, hold = hold_exits(r.daemon, WORKERS)
        try:
            failed_upgrade_holding(d, r, hold, olds)
            log = r.daemon.stderr()
            for p in olds:
                check("(pid %d) handed everything over" % p in log,
                      "worker %d did not say it handed everything over:\n%s" % (p, log))
            check(not exits_logged(log, olds), "an exit logged before it happened")
        finally:
            hold.release()
        check_exits_logged(r, olds, "the handed-over workers")
        check_relaying(r.sample, r.peer, "after the failed upgrade")


def test_slot_handed_over_twice_exits_logged(d):
    with relaying(d, RELAY, N, WORKERS) as r:
        olds, hold = hold_exits(r.daemon, WORKERS)
        try:
            failed_upgrade_holding(d, r, hold, olds)
            seconds = [w["pid"] for w in r.daemon.admin({"cmd": "workers"})["workers"]]
            check(len(seconds) == WORKERS and not set(seconds) & set(olds),
                  "respawned workers: %r (old %r)" % (seconds, olds))
            t = InThread(failed_upgrade, r.daemon, d, r.text, r.listeners, r.held, WORKERS,
                         RELAY)
            t.communicate(120)
            check(t.returncode == 0, "the second failed upgrade did not end")
            check_exits_logged(r, seconds, "the second hand-over's workers")
            check(not exits_logged(r.daemon.stderr(), olds),
                  "an exit logged before it happened")
        finally:
            hold.release()
        check_exits_logged(r, olds, "the first hand-over's workers, held through the second")
        check_relaying(r.sample, r.peer, "after the second failed upgrade")


if __name__ == "__main__":
    run_tests([test_handed_over_worker_exit_logged, test_slot_handed_over_twice_exits_logged])
