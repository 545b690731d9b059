"""During a live upgrade exactly one master takes each admin connection: from the moment
the old master hands over (stops its workers for the new one) it takes no new connection;
those made in the meantime wait in the socket's queue and the new master answers them once
it serves. Before, the old master took them until it exited: a connection it took in its
last loop (after the new master said "serving") was closed unanswered when it exited, and
its client got "connection reset" (tests/integration/test_upgrade_urelays_older.py failed
so, once in a CI run, on its first status request after the upgrade).

How, without timing: the new master's workers are held at their birth (ptrace,
harness_upgrade.BirthHold), so the old master is in the hand-over, its loop running; a
status request is sent then, and read only after the workers are let go. The master that
answers it must be the new one (the old code's old master answered it at once, with its
own pid). A connection made during the hand-over that sends nothing until the old master
has exited is answered too (the old code's old master took it and closed it at its exit).
When the attempt fails instead (the new binary killed in the hand-over) the old
master answers the queued request itself ("fallback"); when the old master is stopped
during the hand-over it answers it while it waits for the new binary to end, not a reset.
On a connection it took before, the old master refuses from the hand-over on what would
change what the new master copies or act on its stopping workers (revoke, unrevoke,
disconnect, drain, loglevel with a spec: "a live upgrade is handing over: retry ..."); the
new master then applies them. Before, disconnect, drain and loglevel were answered ok and
the change was lost.

Relay ports 45400-45409 (no other test's). Loopback only, every wait bounded. Needs ptrace
on the daemon's processes (root, or ptrace_scope 0): skipped with the reason otherwise.
"""
import json
import os
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Daemon, alive, check, config,  # noqa: E402
                           free_port, run_tests, wait_for)
from harness_upgrade import (held_upgrade, read_reply, teardown,  # noqa: E402
                             upgrade_result)

RELAY = (45400, 45409)
WORKERS = 1


class HeldHandover:
    """A daemon whose live upgrade (`turngatectl upgrade` ARGS, begin) is held in its
    hand-over: the new master's worker held at birth. Fields: daemon, old (its master's pid), hold,
    proc (the upgrade's Popen), pid (the master to stop at the end)."""

    def __init__(self, d):
        port = free_port(avoid=RELAY)
        text = config(d, [("udp", port, "TURN-UDP", ["peers"])], {"peers": ["127.0.0.1"]},
                      workers=WORKERS, relay=RELAY)
        self.daemon = Daemon(d, text, workers=WORKERS).start()
        self.pid, self.proc, self.hold, self.socks = None, None, None, []

    def begin(self, *args):
        # A connection the old master took before the upgrade: it serves it to the end.
        self.early = self.connect()
        check(status_reply(self.early).get("ok"), "status before the upgrade")
        self.old, self.hold, self.proc = held_upgrade(self.daemon, WORKERS, args=args)

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(60.0)
        s.connect(self.daemon.sock)
        self.socks.append(s)
        return s

    def release(self):
        self.hold.release()
        self.pid = self.hold.new

    def close(self):
        """In the test's finally: lets everything go and stops what runs."""
        if self.hold is not None:
            self.release()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        teardown(self.daemon, self.pid, *self.socks)


def status_reply(s):
    """Sends a status request on s and reads its one-line reply (a dict)."""
    s.sendall(b'{"cmd":"status"}\n')
    return read_reply(s)


def run_held(d, fn, *args):
    """fn(HeldHandover) with its end in a finally; the daemon's log scanned after."""
    h = None
    try:
        h = HeldHandover(d)
        h.begin(*args)
        fn(h)
    finally:
        if h is not None:
            h.close()
    if h is not None:
        h.daemon.scan()


def served_by_new(h):
    asked = h.connect()
    asked.sendall(b'{"cmd":"status"}\n')
    silent = h.connect()
    h.release()
    reply = read_reply(asked)
    check(reply.get("pid") == h.hold.new and h.hold.new != h.old,
          "the status asked during the hand-over is answered by pid %r (old %d, new %r)"
          % (reply.get("pid"), h.old, h.hold.new))
    h.pid = upgrade_result(h.proc)
    check(h.pid == h.hold.new, "upgrade says pid %d serves (held %r)" % (h.pid, h.hold.new))
    wait_for(lambda: not alive(h.old), "the old master to exit")
    reply = status_reply(silent)
    check(reply.get("pid") == h.pid, "the connection made during the hand-over: pid %r"
          % reply.get("pid"))


def failed_serves_on(h):
    # The new binary is killed in the hand-over (its held worker with it): the attempt
    # fails, and the old master takes the queued connection again.
    asked = h.connect()
    asked.sendall(b'{"cmd":"status"}\n')
    h.hold.kill()
    reply = read_reply(asked)
    check(reply.get("pid") == h.old, "after the failed attempt: answered by pid %r (old %d)"
          % (reply.get("pid"), h.old))
    st = h.daemon.admin({"cmd": "upgrade_status"})["upgrade"]["state"]
    check(st in ("fallback", "failed"), "upgrade state %r" % st)
    h.release()
    h.proc.communicate(timeout=90)
    check(h.proc.returncode != 0, "turngatectl upgrade says it failed")


def stopped_refuses(h):
    asked = h.connect()
    asked.sendall(b'{"cmd":"status"}\n')
    os.kill(h.old, signal.SIGTERM)
    reply = read_reply(asked)
    # It takes the queued connections again while it waits for the new binary to end.
    check(reply.get("pid") == h.old, "the request queued when the old master stopped: %r"
          % reply)


# What the old master refuses from its hand-over on: the new master has the table (with its
# revocation list and the published snapshot) or is taking it, and the old workers stop: a
# change made now (a revocation, a disconnect, a drain, a log level) would be answered as
# done and lost.
REFUSED = ({"cmd": "revoke", "user": "mallory"}, {"cmd": "unrevoke", "user": "mallory"},
           {"cmd": "disconnect", "user": "mallory"}, {"cmd": "drain"},
           {"cmd": "loglevel", "spec": "all:DEBUG"})


def changes_refused(h):
    for req in REFUSED:
        h.early.sendall(json.dumps(req).encode() + b"\n")
        reply = read_reply(h.early)
        check(reply.get("ok") is False and "live upgrade is handing over: retry" in
              reply.get("error", ""), "%s on the old master during the hand-over: %r"
              % (req["cmd"], reply))
    h.early.sendall(b'{"cmd":"loglevel"}\n')
    check(read_reply(h.early).get("ok") is True, "loglevel without a spec (a read) answered")
    h.release()
    h.pid = upgrade_result(h.proc)
    for req in (REFUSED[0], REFUSED[2], REFUSED[3], REFUSED[4]):
        reply = h.daemon.admin(req)
        check(reply.get("ok") is True, "%s on the new master: %r" % (req["cmd"], reply))
    listed = h.daemon.admin({"cmd": "revocations"})["revocations"]
    check([e["name"] for e in listed] == ["mallory"], "revocations %r" % listed)
    st = h.daemon.admin({"cmd": "status"})
    check(st["pid"] == h.pid, "the new master answers: %r" % st["pid"])


def test_admin_during_handover(d):
    run_held(d, served_by_new)


def test_admin_after_failed_handover(d):
    run_held(d, failed_serves_on)


def test_admin_stop_during_handover(d):
    run_held(d, stopped_refuses)


def test_changes_during_handover(d):
    run_held(d, changes_refused)


if __name__ == "__main__":
    run_tests([test_admin_during_handover, test_admin_after_failed_handover,
               test_admin_stop_during_handover, test_changes_during_handover])
