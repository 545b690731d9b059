#!/usr/bin/python3
"""The state file and its lock under a running daemon (found by the aw3 walk).

A "stale lock" clean-up that removes or replaces NAME.lock lets a second daemon on the same
state directory take a lock at once: it is refused while the first one lives (the state file
has a lock of its own), and the first one's calls survive its own restart. Before: the
second daemon took the live table over, ended the first's allocations, and the first's
restart adopted 0. A removed NAME.lock is created and locked again by the running daemon
(before: nothing noticed it).

NAME.state removed or replaced under a running daemon is logged (ERROR, once), and the stop
line says the allocations end with the daemon. Before: nothing was logged, the stop said
"N allocations stay in ...", and the restart dropped every call silently (or took a stale
copy over).

Relay ports 28790-28799 (no other test's): the first daemon's restart binds the taken-over
allocation's relay port again.
"""
import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (SUCCESS, Client, Daemon, check, config, echo_peer,  # noqa: E402
                           echo_relays, free_port, run_tests, start_fails, wait_for)

ROUTES = {"loopback": ["127.0.0.0/8"]}


def serving(d, relay):
    """A daemon on a fresh port with one allocation that relays to an echo; (daemon, client,
    echo port)."""
    port = free_port()
    daemon = Daemon(d, config(d, [("udp", port, "TURN-UDP", ["loopback"])], ROUTES,
                              relay=relay, workers=1), workers=1)
    daemon.start()
    echo = echo_peer()
    c = Client(port)
    c.allocate()
    check(c.perm("127.0.0.1", echo)[1] == SUCCESS, "CreatePermission")
    check(echo_relays(c, echo, b"before"), "no relay before")
    return daemon, c, echo


def second_start(d, state_dir):
    """turngated on its own admin socket and port but state_dir's state file (same
    admin.name): it must be refused within 30 s. Its log."""
    os.mkdir(d)
    text = config(d, [("udp", free_port(), "TURN-UDP", ["loopback"])], ROUTES,
                  relay=(28797, 28799), workers=1)
    text = text.replace("  drain_timeout:", "  state_dir: %s\n  drain_timeout:" % state_dir)
    return start_fails(d, text, "a second daemon on the live state file")


def test_lock_replaced_second_refused(d):
    """NAME.lock removed and a new empty one put in its place (what a clean-up followed by
    any open(O_CREAT) leaves): the second daemon locks the new file, and the state file's
    own lock refuses it. The first logs the replaced lock, relays on, and its restart takes
    its allocation over."""
    daemon, c, echo = serving(d, (28790, 28796))
    try:
        lock = os.path.join(d, "sec.lock")
        os.unlink(lock)
        open(lock, "w").close()
        log = second_start(os.path.join(d, "second"), d)
        check("sec.state is held by a running turngated although" in log,
              "refusal not explained:\n" + log)
        wait_for(lambda: "lock file %s was replaced by another file" % lock in daemon.stderr(),
                 "the first daemon's error about its lock file", timeout=15)
        check(echo_relays(c, echo, b"during"), "the first daemon's call ended")
        check(daemon.stop() == 0, "exit status")
        check("1 allocations stay in %s/sec.state" % d in daemon.stderr(), daemon.stderr())
        daemon.start()
        check("1 allocations taken over" in daemon.stderr(), daemon.stderr())
        check(echo_relays(c, echo, b"after"), "the call did not survive the restart")
    finally:
        c.close()
        daemon.stop()


def test_lock_removed_recreated(d):
    """NAME.lock removed: the running daemon creates and locks it again at its next check;
    a second daemon is then refused by the lock file itself."""
    daemon, c, echo = serving(d, (28790, 28796))
    try:
        lock = os.path.join(d, "sec.lock")
        os.unlink(lock)
        wait_for(lambda: "lock file %s was removed while this daemon runs: created and locked "
                 "again" % lock in daemon.stderr(), "the lock file re-created", timeout=15)
        log = second_start(os.path.join(d, "second"), d)
        check("sec.lock is held by another process" in log, "refusal not explained:\n" + log)
        check(echo_relays(c, echo, b"during"), "the first daemon's call ended")
    finally:
        c.close()
        daemon.stop()


def state_lost_logged(d, lose, how):
    """NAME.state lost by lose(path) under the daemon: an ERROR saying the allocations will
    not survive, once; the stop line says they end with the daemon, not that they stay."""
    daemon, c, echo = serving(d, (28790, 28796))
    try:
        path = os.path.join(d, "sec.state")
        lose(path)
        want = "state file %s was %s while this daemon runs: its 1 allocations will NOT" \
            % (path, how)
        wait_for(lambda: want in daemon.stderr(), "the error about the state file", timeout=15)
        check(echo_relays(c, echo, b"during"), "the call ended")
        daemon.signal(signal.SIGINT)
        daemon.wait_exit()
        log = daemon.stderr()
        check(log.count(want) == 1, "logged more than once:\n" + log)
        check("allocations stay in %s" % path not in log, "the stop claims they stay:\n" + log)
        check("1 allocations end with the daemon: %s was %s while it ran" % (path, how) in log,
              "no true stop line:\n" + log)
    finally:
        c.close()
        daemon.stop()


def test_state_removed_logged(d):
    """NAME.state removed (rm)."""
    state_lost_logged(d, os.unlink, "removed")


def test_state_replaced_logged(d):
    """NAME.state replaced by a copy of itself (a new file: what a restore from a backup
    does); the next start would take the stale copy over."""
    def replace(path):
        shutil.copy(path, path + ".cp")
        os.rename(path + ".cp", path)
    state_lost_logged(d, replace, "replaced by another file")



def test_reload_renames_instance(d):
    """Found by review13: the checks followed admin.name and admin.state_dir of the running
    config, not the files opened at start. A reload that renames the instance (a CDS's
    first push renames the bootstrap instance) made the daemon report its state file
    removed, create and lock NEW.lock (letting go of its real lock) and refuse a real
    instance of that name; its stop line said its allocations end with it. The files it
    opened are the ones it watches: nothing is logged, a daemon of the new name starts,
    the stop line says the allocations stay, and its restart (under the new name) starts
    afresh while the old file is left to the old name."""
    daemon, c, echo = serving(d, (28790, 28796))
    try:
        with open(daemon.conf) as f:
            text = f.read()
        daemon.reload(text.replace("  name: sec\n", "  name: renamed\n", 1))
        time.sleep(4.5)   # two of the master's checks (every 2 s) at least
        log = daemon.stderr()
        check("while this daemon runs" not in log, "a rename taken for a loss:\n" + log)
        check(not os.path.exists(os.path.join(d, "renamed.lock")), "renamed.lock created")
        check(echo_relays(c, echo, b"during"), "the call ended")
        other = os.path.join(d, "other")
        os.mkdir(other)
        text2 = config(other, [("udp", free_port(), "TURN-UDP", ["loopback"])], ROUTES,
                       relay=(28797, 28799), workers=1)
        text2 = text2.replace("  name: sec\n", "  name: renamed\n", 1).replace(
            "  drain_timeout:", "  state_dir: %s\n  drain_timeout:" % d, 1)
        second = Daemon(other, text2, workers=1)
        second.start()
        check(second.stop() == 0, "the instance named renamed: exit status")
        check(daemon.stop() == 0, "exit status")
        check("1 allocations stay in %s/sec.state" % d in daemon.stderr(), daemon.stderr())
    finally:
        c.close()
        daemon.stop()

if __name__ == "__main__":
    run_tests([test_lock_replaced_second_refused, test_lock_removed_recreated,
               test_state_removed_logged, test_state_replaced_logged,
               test_reload_renames_instance])
