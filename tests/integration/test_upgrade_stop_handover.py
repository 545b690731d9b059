"""A stop of the old master during a live upgrade's hand-over leaves its state file as a
stop does: the allocations in NAME.state for the next start, and nothing else beside it.

At "ready" the old master links NAME.state to NAME.state.upgrade (its table, kept for a
failed attempt) and stops its workers; the new master takes the table into a file of its
own and renames that over NAME.state. A stop then (SIGINT, SIGQUIT, a second SIGTERM)
fails the attempt: the old master kills the new binary, waits until it is gone, puts its
own file back as NAME.state and exits (upgrade.c relock_cb, "told to stop meanwhile").
Before, it exited as soon as its own workers were down (they are, in the hand-over),
before any of that: NAME.state.upgrade stayed behind, a second table-sized file on the
tmpfs (55 MiB with the default max_allocations) until the next upgrade removed it, and the
next start took the dead new master's copy of the table.

How, without timing: the new master's worker is held at its birth (ptrace,
harness_upgrade.BirthHold), so the new master has taken the table over and the old one
is in the hand-over. SIGINT to the old master; it must exit (the worker still held: a
process of the new binary it cannot kill must not keep it), leaving its own file as
NAME.state and no NAME.state.upgrade. Then the worker goes (its master is gone: it exits)
and the daemon starts again on the same state directory, as systemd's restart does:
every allocation is taken over and the sampled ones relay and refresh. The second case
does not reap the new master (the test traces it, so the old master never sees its end):
the old master must still exit, at its stop deadline, saying so, and the next start takes
the new master's copy of the table.

Relay ports 28700-28739 (no other test's), below the port-0 range: the wait for the relay
ports to be free reads the sockets there, and waits only for the daemon's own. Loopback
only, every wait bounded. Needs ptrace on the daemon's master (root, or ptrace_scope 0):
skipped with the reason otherwise.
"""
import os
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Daemon, Failure, alive, check, config,  # noqa: E402
                           free_port, peer_socket, run_tests, wait_for)
from harness_upgrade import (check_relaying, daemon_relay_sockets,  # noqa: E402
                             held_upgrade, run_until, setup)

RELAY = (28700, 28739)  # below the port-0 range: the wait below reads every socket there
WORKERS = 1
N = 20


def state_files(d):
    """The names in the state directory that begin with the state file's (sec.state)."""
    return sorted(n for n in os.listdir(d) if n.startswith("sec.state"))


def stop_in_handover(d, daemon, sig, reap):
    """A live upgrade held in its hand-over, sig to the old master; returns once the old
    master exited and the new binary's processes went. reap: the new master's end is
    reaped here as it comes (BirthHold traces it: its real parent, the old master, sees it
    only after its tracer), else only once the old master exited."""
    old, hold, proc = held_upgrade(daemon, WORKERS)
    try:
        check(state_files(d) == ["sec.state", "sec.state.upgrade"],
              "in the hand-over: %r" % state_files(d))
        os.kill(old, sig)
        # The worker stays held: it holds the instance lock and cannot be killed by the
        # old master (not its child), which need not wait for it.
        rc = run_until(daemon.proc, hold, 60) if reap else daemon.wait_exit(60)
        check(rc == 0, "the old master's exit status %r" % rc)
    finally:
        hold.release()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        daemon.err.close()
    gone = [p for p in [hold.new] + sorted(hold.born) if p is not None]
    wait_for(lambda: not any(alive(p) for p in gone), "the new binary's %r to end" % gone)


def stop_and_restart(d, sig, reap, after):
    """A daemon with N UDP allocations stopped (sig) in a live upgrade's hand-over,
    after(d, log, inode of the old master's state file) checks the files and the log, then
    the daemon starts again on the same state directory (what systemd's restart does):
    every allocation must be taken over, the sampled ones relay and refresh."""
    port = free_port(avoid=RELAY)
    peer = peer_socket()
    text = config(d, [("udp", port, "TURN-UDP", ["peers"])], {"peers": ["127.0.0.1"]},
                  workers=WORKERS, relay=RELAY)
    daemon = Daemon(d, text, workers=WORKERS).start()
    clients = []
    try:
        clients, _ = setup(d, daemon, port, N)
        sample = clients[:: N // 5][:5]
        for c, _ in sample:
            c.perm("127.0.0.1", peer.getsockname()[1])
        check_relaying(sample, peer, "before")
        check(daemon_relay_sockets(RELAY), "no relay socket of the daemon found before the stop")
        ino = os.stat(os.path.join(d, "sec.state")).st_ino
        stop_in_handover(d, daemon, sig, reap)
        log = daemon.stderr()
        check("%d allocations stay in" % N in log, "the stop's line:\n%s" % log[-4000:])
        after(d, log, ino)
        # The relay sockets handed over in the channels end with the last of them.
        try:
            wait_for(lambda: not daemon_relay_sockets(RELAY), "the relay ports to be free")
        except Failure:
            raise Failure("the daemon's relay sockets still open: %r"
                          % daemon_relay_sockets(RELAY))
        daemon.start()
        check(len(daemon.allocations()) == N, "allocations after the restart: %d of %d"
              % (len(daemon.allocations()), N))
        check_relaying(sample, peer, "after the restart")
    finally:
        for c, _ in clients:
            c.close()
        peer.close()
        daemon.kill()
    daemon.scan()


def own_file_back(d, log, ino):
    check(state_files(d) == ["sec.state"], "after the stop: %r (no NAME.state.upgrade "
          "or NAME.state.new may stay)\n%s" % (state_files(d), log[-4000:]))
    check(os.stat(os.path.join(d, "sec.state")).st_ino == ino,
          "NAME.state is not the old master's file again")
    check("upgrade failed: the old master was told to stop; this master's table is in "
          "%s/sec.state again" % d in log, "no line of the failed upgrade:\n%s" % log[-4000:])


def left_as_is(d, log, ino):
    check("is not gone at the stop's deadline" in log,
          "no line of the stop's deadline:\n%s" % log[-4000:])
    check(state_files(d) == ["sec.state", "sec.state.upgrade"], "after the stop: %r"
          % state_files(d))


def test_stop_during_handover(d):
    stop_and_restart(d, signal.SIGINT, True, own_file_back)


def test_stop_new_master_not_gone(d):
    # The new master's end is not seen (its tracer, this test, does not reap it): the old
    # master exits at its stop deadline, the new master's copy of the table as NAME.state.
    stop_and_restart(d, signal.SIGQUIT, False, left_as_is)


if __name__ == "__main__":
    run_tests([test_stop_during_handover, test_stop_new_master_not_gone])
