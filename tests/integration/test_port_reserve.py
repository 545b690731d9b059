"""Ports drawn by two tests running at once (make -j2 check) are never the same: each draw
of the C harness (harness_free_port, harness_free_port_late) and of the Python one
(free_port) is reserved for the drawing process until it exits, in one reservations' file
shared by both (open file description locks, one byte per port).

Drawer processes (this file with --draw, and the C harness's port_draw) draw from a late
range narrowed to two or three ports (TG_LATE_PORTS) with a reservations' file of this
test's own (TG_PORT_LOCK): two drawers, Python or C in any pairing, get different ports,
and a third finds none and says so; a holder killed with SIGKILL leaves nothing reserved;
a port of the default draw (late=False) is refused to the other process while its drawer
lives.
Before the reservations each process avoided only the ports it gave itself, so both
drawers got the same port. The narrow ranges are ports this test reserved in the real
reservations' file first, so no test beside it binds them meanwhile. Loopback only; every
wait is bounded.
"""
import os
import random
import select
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (BUILD, Failure, check, free_port, late_port_range,  # noqa: E402
                           reserve_port, run_tests)

PORT_DRAW = os.path.join(BUILD, "tests", "integration", "port_draw")


def block(k):
    """k consecutive ports, each free on 127.0.0.1 for UDP and TCP and reserved by this
    process in the real reservations' file (no other test draws them meanwhile)."""
    lo, hi = late_port_range() or (31100, 32767)
    for _ in range(100):
        first = random.randint(lo, hi - k + 1)
        ports = range(first, first + k)
        if all(bindable(p) for p in ports) and all([reserve_port(p) for p in ports]):
            return first, first + k - 1
    raise Failure("no %d consecutive free ports in %d-%d" % (k, lo, hi))


def bindable(port):
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


class Drawer:
    """A process that draws n ports (mode late or any) or reserves port n (mode reserve)
    with the C harness (lang "c") or the Python one ("py"), prints one line each and holds
    its reservations until stop() or kill()."""

    def __init__(self, d, lang, mode, n, span=None):
        env = dict(os.environ, TG_PORT_LOCK=os.path.join(d, "ports"))
        if span:
            env["TG_LATE_PORTS"] = "%d-%d" % span
        argv = ([PORT_DRAW] if lang == "c" else
                [sys.executable, os.path.abspath(__file__), "--draw"]) + [mode, str(n)]
        self.name = "%s %s %d" % (lang, mode, n)
        self.err = open(os.path.join(d, "drawer%d.err" % random.getrandbits(32)), "w+")
        self.p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err)
        self.out = self.lines(1 if mode == "reserve" else n)

    def lines(self, n, timeout=30.0):
        buf, deadline = b"", time.monotonic() + timeout
        while buf.count(b"\n") < n:
            left = deadline - time.monotonic()
            check(left > 0 and select.select([self.p.stdout], [], [], left)[0],
                  "%s: no answer within %.0f s" % (self.name, timeout))
            chunk = os.read(self.p.stdout.fileno(), 4096)
            check(chunk, "%s exited: %s" % (self.name, self.stderr()))
            buf += chunk
        return [int(x) for x in buf.split()]

    def stderr(self):
        self.err.seek(0)
        return self.err.read().strip()

    def stop(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)
        self.p.stdout.close()
        self.err.close()

    def kill(self):
        self.p.kill()
        self.p.wait(timeout=30)
        self.p.stdin.close()
        self.p.stdout.close()
        self.err.close()


def test_late_draws_differ(d):
    """Two drawers in a range of two: different ports, whichever harness each uses; a third
    finds none free and says why."""
    span = block(2)
    for first, second, third in (("py", "py", "c"), ("c", "c", "py"), ("py", "c", "py"),
                                 ("c", "py", "c")):
        a = Drawer(d, first, "late", 1, span)
        b = Drawer(d, second, "late", 1, span)
        c = Drawer(d, third, "late", 1, span)
        try:
            check(sorted(a.out + b.out) == list(range(span[0], span[1] + 1)),
                  "%s and %s drew %s from %d-%d" % (a.name, b.name, a.out + b.out, *span))
            check(c.out == [0] and "no free port in %d-%d" % span in c.stderr(),
                  "%s beside them drew %s (%s)" % (c.name, c.out, c.stderr()))
        finally:
            for x in (a, b, c):
                x.stop()


def test_one_process_many_draws(d):
    """One drawer's own draws differ too, and a second drawer takes what is left."""
    span = block(3)
    for lang, other in (("py", "c"), ("c", "py")):
        a = Drawer(d, lang, "late", 2, span)
        b = Drawer(d, other, "late", 1, span)
        try:
            check(sorted(a.out + b.out) == list(range(span[0], span[1] + 1)),
                  "%s and %s drew %s from %d-%d" % (a.name, b.name, a.out + b.out, *span))
        finally:
            a.stop()
            b.stop()


def test_killed_holder_frees(d):
    """A holder killed with SIGKILL leaves no reservation: the range is whole again."""
    span = block(2)
    for lang, other in (("py", "c"), ("c", "py")):
        a = Drawer(d, lang, "late", 2, span)
        check(sorted(a.out) == list(range(span[0], span[1] + 1)), "%s drew %s" % (a.name, a.out))
        a.kill()
        b = Drawer(d, other, "late", 2, span)
        try:
            check(sorted(b.out) == list(range(span[0], span[1] + 1)),
                  "%s after %s's kill drew %s" % (b.name, a.name, b.out))
        finally:
            b.stop()


def test_default_draw_reserved(d):
    """A port of the default draw (late=False: the late range, port 0 where that has none)
    is refused to another process while its drawer lives, and free once it is gone."""
    for lang, other in (("py", "c"), ("c", "py")):
        a = Drawer(d, lang, "any", 1)
        port = a.out[0]
        check(port != 0, "%s drew nothing: %s" % (a.name, a.stderr()))
        b = Drawer(d, other, "reserve", port)
        b.stop()
        check(b.out == [0], "%s took port %d held by %s" % (b.name, port, a.name))
        a.stop()
        c = Drawer(d, other, "reserve", port)
        c.stop()
        check(c.out == [1], "%s could not take port %d after %s ended" % (c.name, port, a.name))


def draw(mode, n):
    """The Python drawer: one line per draw (0 when it failed, the reason on stderr), then
    holds the reservations until stdin closes."""
    if mode == "reserve":
        print(1 if reserve_port(n) else 0)
    for _ in range(n if mode != "reserve" else 0):
        try:
            print(free_port(late=mode == "late"))
        except Failure as e:
            print(e, file=sys.stderr, flush=True)     # before the 0 is read
            print(0)
    sys.stdout.flush()
    sys.stdin.read()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--draw"]:
        draw(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    check(os.access(PORT_DRAW, os.X_OK), PORT_DRAW + " not built (make check builds it)")
    run_tests([test_late_draws_differ, test_one_process_many_draws, test_killed_holder_frees,
               test_default_draw_reserved])
