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
own pid). A connection made during the hand-over that sends nothing until the upgrade is
over is answered too (the old code's old master took it and closed it when it exited).

Relay ports 45400-45409 (no other test's). Loopback only, every wait bounded. Needs ptrace
on the daemon's processes (root, or ptrace_scope 0): skipped with the reason otherwise.
"""
import json
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATECTL, Daemon, check, config, free_port,  # noqa: E402
                           run_tests, wait_for)
from harness_upgrade import teardown, trace_births  # noqa: E402

RELAY = (45400, 45409)
WORKERS = 1


def connect(daemon):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60.0)
    s.connect(daemon.sock)
    return s


def status_reply(s):
    """Sends a status request on s and reads its one-line reply (a dict)."""
    s.sendall(b'{"cmd":"status"}\n')
    return read_reply(s)


def read_reply(s):
    buf = b""
    while b"\n" not in buf:
        chunk = s.recv(65536)
        check(chunk, "the admin connection ended without a reply (%r)" % buf)
        buf += chunk
    return json.loads(buf.split(b"\n", 1)[0])


def test_admin_during_handover(d):
    port = free_port(avoid=RELAY)
    text = config(d, [("udp", port, "TURN-UDP", ["peers"])], {"peers": ["127.0.0.1"]},
                  workers=WORKERS, relay=RELAY)
    daemon = Daemon(d, text, workers=WORKERS).start()
    pid, asked, silent = None, None, None
    try:
        old, hold = trace_births(daemon, "new", WORKERS)
        proc = subprocess.Popen([TURNGATECTL, "-s", daemon.sock, "upgrade"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            check(hold.wait_held(lambda: proc.poll() is None),
                  "the new worker held at birth (%s)" % daemon.stderr()[-3000:])
            check("stopping the workers" in daemon.stderr(), "the old master hands over")
            asked = connect(daemon)
            asked.sendall(b'{"cmd":"status"}\n')
            silent = connect(daemon)
        finally:
            hold.release()
            pid = hold.new
        reply = read_reply(asked)
        check(reply.get("pid") == hold.new and hold.new != old,
              "the status asked during the hand-over is answered by pid %r (old %d, new %r)"
              % (reply.get("pid"), old, hold.new))
        out, err = proc.communicate(timeout=90)
        check(proc.returncode == 0, "upgrade: rc %s %s%s" % (proc.returncode, out, err))
        pid = int(out.strip().splitlines()[-1])
        check(pid == hold.new, "upgrade says pid %d serves (held %r)" % (pid, hold.new))
        wait_for(lambda: "exiting" in daemon.stderr(), "the old master to exit")
        reply = status_reply(silent)
        check(reply.get("pid") == pid, "the connection made during the hand-over: pid %r"
              % reply.get("pid"))
    finally:
        teardown(daemon, pid, asked, silent)
    daemon.scan()


if __name__ == "__main__":
    run_tests([test_admin_during_handover])
