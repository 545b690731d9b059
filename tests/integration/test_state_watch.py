#!/usr/bin/python3
"""The state file and its lock under a running daemon (found by the aw3 walk).

A "stale lock" clean-up that removes or replaces NAME.lock lets a second daemon on the same
state directory take a lock at once: it is refused while the first one lives (the state file
has a lock of its own), and the first one's calls survive its own restart. Before: the
second daemon took the live table over, ended the first's allocations, and the first's
restart adopted 0.

Relay ports 28790-28799 (no other test's): the first daemon's restart binds the taken-over
allocation's relay port again.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (SUCCESS, Client, Daemon, check, config, echo_peer,  # noqa: E402
                           echo_relays, free_port, run_tests, start_fails)

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
    own lock refuses it. The first relays on, and its restart takes its allocation over."""
    daemon, c, echo = serving(d, (28790, 28796))
    try:
        lock = os.path.join(d, "sec.lock")
        os.unlink(lock)
        open(lock, "w").close()
        log = second_start(os.path.join(d, "second"), d)
        check("sec.state is held by a running turngated although" in log,
              "refusal not explained:\n" + log)
        check(echo_relays(c, echo, b"during"), "the first daemon's call ended")
        check(daemon.stop() == 0, "exit status")
        check("1 allocations stay in %s/sec.state" % d in daemon.stderr(), daemon.stderr())
        daemon.start()
        check("1 allocations taken over" in daemon.stderr(), daemon.stderr())
        check(echo_relays(c, echo, b"after"), "the call did not survive the restart")
    finally:
        c.close()
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_lock_replaced_second_refused])
