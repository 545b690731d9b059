"""A reload asked while a live upgrade is in progress is not run by the old master: a SIGHUP
(or a watched file's change) is deferred and run by the master that serves once the attempt
ends (the new one gets it as SIGHUP; after a failure the old one runs it), the admin
`reload` is refused with "retry". Before, the old master ran it at once, in its hand-over:
it opened the added listener's sockets and started the added HTTP server on sockets the new
master never got, and the new master served on with the configuration it had read before
the change, so the reload the operator saw applied was gone after the upgrade (and the old
master's new server took connections that it reset at its exit).
A master told to stop meanwhile runs and passes on nothing: its log says the deferred
reload is not run (before, a stop during the start logged it as not passed on to a new
master "gone").

A failed attempt also removes the new binary's NAME.state.new (its copy of the table,
created before "ready", renamed over NAME.state only once it holds the lock): before, a new
binary killed in between (here: held before "ready") left it on the tmpfs until the next
start.

How, without timing: the new master's worker is held at its birth (ptrace,
harness_upgrade.held_upgrade), so the old master is in its hand-over, its loop running; or
the new master waits at $TURNGATE_TEST_UPGRADE_HOLD's FIFO before "ready" (the old master
in the upgrade's start) and the test kills it there. The configuration then gains a
TURN-UDP listener and a health endpoint, and the old master gets SIGHUP: its log must say
the reload is deferred, and once the attempt ends the master that serves answers on both.
A failed hand-over's new master is killed by the test (harness_upgrade.BirthHold.kill), not
by a short --timeout that would also bound a slow (sanitizer) start.

The new master gets the deferred SIGHUP only once the old one has closed the sockets they
share: a request the old master took before the hand-over and that is never finished keeps
it in its exit (httpd_stop) for a second with its HTTP sockets open, and the reload
restarts that HTTP server on the same port (metrics dropped from the health and metrics
server). Before, the SIGHUP went before that wait and the new master's reload found the port
bound: no health endpoint until the next reload.

Relay ports 45420-45429 (no other test's). Loopback only, every wait bounded. The hand-over
cases need ptrace on the daemon's processes (root, or ptrace_scope 0): skipped with the
reason otherwise.
"""
import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATECTL, Client, Daemon, alive, check,  # noqa: E402
                           config, free_port, run_tests, wait_for)
from harness_upgrade import (connect, end_upgrade, half, held_upgrade,  # noqa: E402
                             hold_open, read_reply, taken, teardown, upgrade_result)

RELAY = (45420, 45429)
WORKERS = 1
DEFERRED = "reload (SIGHUP) deferred: a live upgrade is in progress"


class Setup:
    """A daemon of one TURN-UDP listener; text2: its configuration with a second listener
    (lport) and a health endpoint (hport), both bound only once a reload applies it. hold,
    proc: the upgrade's (held_upgrade); pid: the master to stop at the end; closing: what
    to close then."""

    def __init__(self, d, env=None, hm_port=None):
        port = free_port(avoid=RELAY)
        self.lport = free_port(avoid=RELAY, late=True)
        self.hport = free_port(avoid=RELAY, late=True)
        self.text = config(d, [("udp", port, "TURN-UDP", ["peers"])],
                           {"peers": ["127.0.0.1"]}, workers=WORKERS, relay=RELAY)
        self.text2 = config(d, [("udp", port, "TURN-UDP", ["peers"]),
                                ("late", self.lport, "TURN-UDP", ["peers"])],
                            {"peers": ["127.0.0.1"]}, workers=WORKERS, relay=RELAY).replace(
            'healthcheck_endpoint: ""',
            'healthcheck_endpoint: "http://127.0.0.1:%d"' % self.hport)
        if hm_port is not None:
            # one server for health and metrics; text_health: health alone (a restart)
            self.text_health = self.text.replace(
                'healthcheck_endpoint: ""',
                'healthcheck_endpoint: "http://127.0.0.1:%d"' % hm_port)
            self.text = self.text_health.replace(
                'healthcheck_endpoint:', 'metrics_endpoint: "http://127.0.0.1:%d/metrics"\n'
                '  healthcheck_endpoint:' % hm_port)
        self.hold, self.proc, self.pid, self.closing = None, None, None, []
        self.daemon = Daemon(d, self.text, workers=WORKERS, env=env).start()
        self.old = self.daemon.admin({"cmd": "status"})["pid"]

    def change(self):
        """The new configuration written, SIGHUP to the old master; returns once it took it."""
        self.daemon.write_config(self.text2)
        os.kill(self.old, signal.SIGHUP)
        wait_for(lambda: DEFERRED in self.daemon.stderr() or
                 "reloading configuration (SIGHUP)" in self.daemon.stderr(),
                 "the old master to take the SIGHUP")

    def deferred(self):
        check(DEFERRED in self.daemon.stderr(), "the SIGHUP in the upgrade is not deferred:\n%s"
              % self.daemon.stderr()[-3000:])

    def applied(self, pid, what):
        """The change serves (by master pid): the health endpoint answers, the added
        listener allocates, and the last reload was pid's SIGHUP."""
        wait_for(lambda: http_get(self.hport, "/live") == 200,
                 "%s: the health endpoint the reload added to answer" % what)
        st = self.daemon.admin({"cmd": "status"})
        check(st["pid"] == pid, "%s: pid %r answers (expected %d)" % (what, st["pid"], pid))
        check(st["last_reload"]["ok"] and "SIGHUP" in st["last_reload"]["trigger"],
              "%s: last reload %r" % (what, st["last_reload"]))
        c = Client(self.lport, user="late")
        try:
            check(c.relayed(c.allocate()), "%s: no relayed address on the added listener"
                  % what)
        finally:
            c.close()


def http_get(port, path):
    """The status of GET path on 127.0.0.1:port, 0 when nothing answers."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", path)
        return c.getresponse().status
    except OSError:
        return 0


@contextlib.contextmanager
def running(d, env=None, hm_port=None):
    """A Setup, its end (the upgrade let go, its masters stopped: a new master let go by a
    test that failed before it knew the outcome too) and the log's scan."""
    s = Setup(d, env, hm_port)
    try:
        yield s
    finally:
        end_upgrade(s.proc, s.hold)
        if s.pid is None and s.hold is not None:
            s.pid = s.hold.new
        teardown(s.daemon, s.pid, *s.closing)
    s.daemon.scan()


def early_connection(daemon):
    """An admin connection the old master takes before the upgrade (it serves it to its
    end: the hand-over holds only new ones)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60.0)
    s.connect(daemon.sock)
    s.sendall(b'{"cmd":"status"}\n')
    check(read_reply(s).get("ok"), "status before the upgrade")
    return s


def test_reload_during_handover(d):
    """Admin `reload` in the hand-over: refused, retry; SIGHUP: deferred, passed on to the
    new master, which applies it once it serves."""
    with running(d) as s:
        early = early_connection(s.daemon)
        s.closing.append(early)
        _, s.hold, s.proc = held_upgrade(s.daemon, WORKERS)
        s.daemon.write_config(s.text2)
        early.sendall(b'{"cmd":"reload"}\n')
        reply = read_reply(early)
        check(reply.get("ok") is False and "live upgrade is in progress" in
              reply.get("error", "") and "retry" in reply["error"],
              "admin reload in the hand-over: %r" % reply)
        s.change()
        s.deferred()
        s.hold.release()
        s.pid = upgrade_result(s.proc)
        wait_for(lambda: not alive(s.old), "the old master to exit")
        check("upgrade: the reload (SIGHUP) asked during it is passed on to pid %d" % s.pid
              in s.daemon.stderr(), "the old master's line of the reload passed on:\n%s"
              % s.daemon.stderr()[-3000:])
        s.applied(s.pid, "after the upgrade")


def test_reload_passed_on_after_sockets(d):
    """The deferred SIGHUP reaches the new master only once the old one closed the sockets
    they share: the reload drops metrics from the health and metrics server, so the new
    master restarts it on the same port. The old master holds that port at its exit for up
    to a second (httpd_stop: a request it took before the hand-over, here never finished);
    before, the SIGHUP went in done(), before that wait, and the new master's reload found
    the port bound ("Address already in use (not served)", the reload said ok) and served
    no health endpoint until the next reload."""
    hport = free_port(avoid=RELAY)
    with running(d, hm_port=hport) as s:
        before = connect(hport, half(b"/live"))
        s.closing.append(before)
        wait_for(lambda: taken(before), "the old master to take a connection")
        _, s.hold, s.proc = held_upgrade(s.daemon, WORKERS)
        s.daemon.write_config(s.text_health)
        os.kill(s.old, signal.SIGHUP)
        wait_for(lambda: DEFERRED in s.daemon.stderr(), "the old master to defer the SIGHUP")
        s.hold.release()
        s.pid = upgrade_result(s.proc)
        s.daemon.wait_exit()
        wait_for(lambda: "SIGHUP" in s.daemon.admin({"cmd": "status"})["last_reload"]
                 ["trigger"], "the new master's reload")
        log = s.daemon.stderr()
        check("Address already in use" not in log, "a port still bound at the new master's "
              "reload:\n%s" % log[-3000:])
        check(http_get(hport, "/live") == 200, "/live after the reload")
        check(http_get(hport, "/metrics") == 404, "/metrics after the reload dropped it")


def test_reload_after_failed_handover(d):
    """SIGHUP in a hand-over that fails (the new binary killed): the old master runs it
    once it serves again."""
    with running(d) as s:
        early = early_connection(s.daemon)     # a new one waits out the hand-over
        s.closing.append(early)
        _, s.hold, s.proc = held_upgrade(s.daemon, WORKERS)
        s.change()
        s.deferred()
        early.sendall(b'{"cmd":"upgrade_status"}\n')
        check(read_reply(early)["upgrade"]["reload_deferred"] == "SIGHUP",
              "upgrade_status shows the deferred reload")
        s.hold.kill()
        upgrade_result(s.proc, ok=False)
        s.pid = s.old       # serves on: nothing else to stop
        s.applied(s.old, "after the failed upgrade")
        check("reloading configuration (SIGHUP, deferred by the upgrade)" in s.daemon.stderr(),
              "the deferred reload's line")


def test_failed_before_ready(d):
    """The new binary killed before "ready" (held at the FIFO after it created
    NAME.state.new): the old master removes that file once the new binary is gone; the
    SIGHUP it got meanwhile it runs then."""
    fifo = os.path.join(d, "hold")
    os.mkfifo(fifo, 0o600)
    fresh = os.path.join(d, "sec.state.new")
    with running(d, env={"TURNGATE_TEST_UPGRADE_HOLD": fifo}) as s:
        s.proc = subprocess.Popen([TURNGATECTL, "-s", s.daemon.sock, "upgrade"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wfd = hold_open(fifo)
        s.closing.append(os.fdopen(wfd, "wb"))
        s.pid = s.daemon.admin({"cmd": "upgrade_status"})["upgrade"]["new_pid"]
        check(os.path.exists(fresh), "the new master waits before ready without %s" % fresh)
        s.change()
        os.kill(s.pid, signal.SIGKILL)
        upgrade_result(s.proc, ok=False)
        s.pid = s.old       # serves on: nothing else to stop
        wait_for(lambda: not os.path.exists(fresh), "%s to be removed after the failed "
                 "upgrade (%r)" % (fresh, sorted(os.listdir(d))), timeout=20)
        check("upgrade: %s removed" % fresh in s.daemon.stderr(), "the removal's line")
        s.deferred()
        s.applied(s.old, "after the upgrade failed before ready")


def test_stopped_before_ready(d):
    """SIGHUP while the new binary starts (held at the FIFO), then the old master is told to
    stop (SIGINT): the attempt fails, nothing is reloaded or passed on, and the deferred
    reload is logged as not run (not as passed on to a new master that never served)."""
    fifo = os.path.join(d, "hold")
    os.mkfifo(fifo, 0o600)
    with running(d, env={"TURNGATE_TEST_UPGRADE_HOLD": fifo}) as s:
        s.proc = subprocess.Popen([TURNGATECTL, "-s", s.daemon.sock, "upgrade"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        s.closing.append(os.fdopen(hold_open(fifo), "wb"))
        s.pid = s.daemon.admin({"cmd": "upgrade_status"})["upgrade"]["new_pid"]
        s.change()
        s.deferred()
        os.kill(s.old, signal.SIGINT)
        s.daemon.wait_exit()
        s.pid = None        # killed by the old master at its stop
        log = s.daemon.stderr()
        check("reload (SIGHUP, deferred by the upgrade) not run: the daemon stops" in log or
              "reload (SIGHUP) not run: the daemon stops" in log,
              "the deferred reload's not-run line:\n%s" % log[-3000:])
        check("passed on" not in log and "reloading configuration" not in log,
              "a reload passed on or run:\n%s" % log[-3000:])


if __name__ == "__main__":
    run_tests([test_reload_during_handover, test_reload_passed_on_after_sockets,
               test_reload_after_failed_handover, test_failed_before_ready,
               test_stopped_before_ready])
