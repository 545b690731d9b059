"""During a live upgrade every HTTP request (health, metrics) gets a complete answer: from the
moment the old master hands over (stops its workers for the new one) it takes no new HTTP
connection; those made in the meantime wait in the listening socket's queue for the new
master (or for the old one again when the attempt fails), and the requests it took before
are answered before it exits. Before, both masters took connections through the whole
upgrade and the old one exited with whatever it held: a request it had taken but not yet
read to its end (a scrape or a load balancer's probe landing on it at its exit) was cut
under its client.

How, without timing: the new master is held (ptrace, MasterHold) where it forks its first
worker, before it starts its HTTP servers, so that during the hand-over the old master is
the only one that could take a connection. A connection with half a request and one with a
whole request are made then; a request the old master took before the upgrade (half sent,
its connection taken: /proc/net/tcp) is finished and its answer read: MHD takes the queued
connections in the run that reads it (the listening socket was ready first), so once that
answer is read the old code's old master holds both. The half request is finished only
after the old master exited: the old code had cut it (no answer), the new master must
answer it. A failed attempt (the new binary killed in the hand-over) must leave the old
master taking connections again: the one made during the hand-over is answered by it.

Its exit: a request the old master took before the hand-over and that is still in progress
once the new master serves is served for a second at most (httpd_stop: http_server_finish),
then cut with a log line. To finish such a request only once the old master left its loop,
without timing, the test plays systemd's NOTIFY_SOCKET with its queue full: the old master's
MAINPID= (sent in done(), after the new master said it serves and before its loop ends)
waits in sendmsg (its wchan says so) until the test empties the queue, after it sent the
rest of the request; the old master alone holds that connection (/proc/PID/fd). Without the
wait in httpd_stop its answer is cut. A request never finished: the old master exits anyway
(20 s at most) and logs the cut.
Every answer closes its connection (MHD's "Connection: close"), so no connection is kept.
The old master's answer to a revoke it takes in the hand-over (HTTP /revoke, on a connection
it took before): 503 with the retry message, since the new master has copied (or copies) the
revocation list with the table; the new master then enters it.

Relay ports 45410-45419 (no other test's). Loopback only, every wait bounded. Needs ptrace
on the daemon's processes (root, or ptrace_scope 0): skipped with the reason otherwise.
"""
import array
import http.client
import os
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (BUILD, Daemon, Failure, check, config,  # noqa: E402
                           free_port, run_tests, wait_for)
from harness_upgrade import (PTRACE_EVENT_FORK, PTRACE_EVENT_VFORK,  # noqa: E402
                             BirthHold, connect, event_msg, half, held_upgrade, inode,
                             taken, teardown, upgrade_result)

RELAY = (45410, 45419)
SO_PASSCRED, SCM_CREDENTIALS = 16, 2
WORKERS = 1
READY = b'{"status":200,"message":"READY"}\n'
REST = b"Connection: close\r\n\r\n"
TOKEN = "t0ken"


class MasterHold(BirthHold):
    """A BirthHold of the new master's first worker that also keeps the new master stopped
    in that fork (its PTRACE_EVENT_FORK stop): before it starts its HTTP servers."""

    def __init__(self, master, holder, n):
        check(holder == "new" and n == 1, "MasterHold holds the new master's first worker")
        super().__init__(master, holder, n)
        self.frozen = None

    def _stop(self, pid, status):
        event = status >> 16
        if (pid == self.new and self.frozen is None and os.WSTOPSIG(status) == 5
                and event in (PTRACE_EVENT_FORK, PTRACE_EVENT_VFORK)):
            child = event_msg(pid)
            self.traced.add(child)
            self.born.add(child)
            self.frozen = pid       # not continued: stays in its fork
            return
        super()._stop(pid, status)

    def release(self):
        if self.frozen is not None:
            self.held.add(self.frozen)      # detached from its fork stop, it runs on
        super().release()

    def kill(self):
        super().kill()
        self.frozen = None


def owner(pid, s):
    """True when process pid holds the server side of the connection s."""
    want, fds = "socket:[%d]" % inode(s), "/proc/%d/fd" % pid
    for fd in os.listdir(fds):
        try:
            if os.readlink(os.path.join(fds, fd)) == want:
                return True
        except OSError:
            pass
    return False


def answer(s, what):
    """Reads one response from s: (status, body); no complete response fails the check."""
    r = http.client.HTTPResponse(s)
    try:
        r.begin()
        return r.status, r.read()
    except (http.client.HTTPException, OSError) as e:
        raise Failure("%s: no complete answer (%s: %s)" % (what, type(e).__name__, e))


def start(d, env=None, cred=None):
    """The daemon and its health and metrics port; cred: a port for the credential API
    (with /revoke, its token TOKEN)."""
    port, hport = free_port(avoid=RELAY), free_port(avoid=RELAY)
    text = config(d, [("udp", port, "TURN-UDP", ["peers"])], {"peers": ["127.0.0.1"]},
                  workers=WORKERS, relay=RELAY)
    # One server for health and metrics (one MHD run takes every queued connection).
    text = text.replace('healthcheck_endpoint: ""',
                        'healthcheck_endpoint: "http://127.0.0.1:%d"\n'
                        '  metrics_endpoint: "http://127.0.0.1:%d/metrics"' % (hport, hport))
    if cred is not None:
        text = text.replace("admin:\n", "admin:\n  credential_api_endpoint: "
                            "\"http://127.0.0.1:%d\"\n  credential_api_token: %s\n"
                            % (cred, TOKEN), 1)
    return Daemon(d, text, workers=WORKERS, env=env).start(), hport


def handover(daemon, hport):
    """A connection the old master took with half a request (before), and an upgrade held in
    its hand-over (MasterHold): (before, hold, turngatectl's Popen)."""
    before = connect(hport, half(b"/live"))
    wait_for(lambda: taken(before), "the old master to take a connection")
    try:
        _, hold, proc = held_upgrade(daemon, 1, MasterHold)
    except BaseException:
        before.close()
        raise
    check(hold.frozen is not None, "the new master held at its first fork")
    return before, hold, proc


def finish_before(before):
    """The request the old master took before the upgrade, finished during the hand-over: it
    answers (and has taken by then what its queue held, where it still takes connections)."""
    before.sendall(REST)
    st, body = answer(before, "the request taken before the hand-over, finished during it")
    check((st, body) == (200, b"{}\n"), "that request: %d %r" % (st, body))


def test_http_during_handover(d):
    daemon, hport = start(d)
    pid, before, halfway, whole = None, None, None, None
    try:
        old = daemon.proc.pid
        before, hold, proc = handover(daemon, hport)
        try:
            halfway = connect(hport, half(b"/ready"))
            whole = connect(hport, half(b"/metrics") + REST)
            finish_before(before)
        finally:
            hold.release()
            pid = hold.new
        pid = upgrade_result(proc)
        check(pid == hold.new and pid != old, "upgrade says pid %d serves (held %r)"
              % (pid, hold.new))
        daemon.wait_exit()
        halfway.sendall(REST)
        st, body = answer(halfway, "the half request made during the hand-over, finished "
                          "after the old master exited")
        check((st, body) == (200, READY), "the half request: %d %r" % (st, body))
        st, body = answer(whole, "the whole request made during the hand-over")
        check(st == 200 and b"turngate_" in body, "metrics: %d %r" % (st, body[:200]))
        with connect(hport, half(b"/ready") + REST) as s:
            check(answer(s, "after the upgrade") == (200, READY), "ready after the upgrade")
    finally:
        teardown(daemon, pid, before, halfway, whole)
    daemon.scan()


class Notify:
    """systemd's side of NOTIFY_SOCKET, there to hold the old master where it leaves its loop:
    while the socket's queue is full, the old master's MAINPID= (done(), upgrade.c) waits
    in its sendmsg, after the new master said it serves and before the old one stops its
    HTTP servers. recv() empties the queue and lets it on."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_PASSCRED, 1)
        self.sock.setblocking(False)
        self.filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.filler.setblocking(False)

    def recv(self):
        """Empties the queue: [(sender pid, text)], the filler's left out."""
        got = []
        for _ in range(10000):
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(64 * 4) +
                                                    socket.CMSG_SPACE(12))
            except BlockingIOError:
                return got
            fds, pid = array.array("i"), None
            for level, typ, cdata in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                    fds.frombytes(cdata[:len(cdata) - len(cdata) % fds.itemsize])
                elif level == socket.SOL_SOCKET and typ == SCM_CREDENTIALS:
                    pid = struct.unpack("iII", cdata[:12])[0]
            for fd in fds:      # the fd store's (FDSTORE=1): not kept
                os.close(fd)
            if pid != os.getpid():
                got.append((pid, data.decode(errors="replace")))
        raise Failure("the notify socket's queue never emptied")

    def fill(self):
        """Fills the queue (our own datagrams), so that the next sender waits."""
        for _ in range(10000):
            try:
                self.filler.sendto(b"X=1", self.path)
            except BlockingIOError:
                return
        raise Failure("the notify socket's queue never filled")

    def close(self):
        self.sock.close()
        self.filler.close()


def wchan(pid):
    try:
        with open("/proc/%d/wchan" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def wchan_names():
    """Whether /proc/PID/wchan names where a process sleeps (kernel symbols readable): a
    sleeping child's says hrtimer_nanosleep or the like, not "0" or nothing."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        name = ""
        for _ in range(200):    # bounded: until it sleeps, 2 s at most
            name = wchan(child.pid)
            if name not in ("", "0"):
                break
            time.sleep(0.01)
        return name not in ("", "0")
    finally:
        child.kill()
        child.wait()


def test_http_finished_after_upgrade(d):
    """A request the old master took before the hand-over, finished only once the new master
    serves and the old one left its loop (held there, Notify): the old master answers it
    (http_server_finish in httpd_stop) before it exits."""
    with open(os.path.join(BUILD, "config.h")) as f:
        if "#define HAVE_LIBSYSTEMD 1" not in f.read():
            print("skip test_http_finished_after_upgrade: built without libsystemd, the old "
                  "master sends no MAINPID= to hold it at")
            return
    if not wchan_names():
        print("skip test_http_finished_after_upgrade: /proc/PID/wchan names no kernel "
              "function here (kernel symbols hidden), so the old master's hold cannot be seen")
        return
    notify = Notify(os.path.join(d, "notify"))
    daemon, hport = start(d, {"NOTIFY_SOCKET": notify.path})
    pid, before = None, None
    try:
        old = daemon.proc.pid
        before, hold, proc = handover(daemon, hport)
        try:
            notify.recv()
            notify.fill()
        finally:
            hold.release()
            pid = hold.new
        # turngatectl's answer comes from the new master: it may come before the hold.
        wait_for(lambda: "unix_wait_for_peer" in wchan(old) or proc.poll() is not None,
                 "the old master held in its MAINPID=")
        pid = upgrade_result(proc)
        check(pid == hold.new and pid != old, "upgrade says pid %d serves (held %r)"
              % (pid, hold.new))
        check("unix_wait_for_peer" in wchan(old), "the old master still held")
        check(owner(old, before) and not owner(pid, before),
              "the old master alone holds the request taken before the hand-over")
        check("HTTP requests not over" not in daemon.stderr(), "nothing cut yet")
        before.sendall(REST)
        said, mainpid = [], (old, "MAINPID=%d\nREADY=1" % pid)
        wait_for(lambda: said.extend(notify.recv()) or mainpid in said,
                 "the old master's MAINPID=")
        st, body = answer(before, "the request taken before the hand-over, finished once "
                          "the new master served")
        check((st, body) == (200, b"{}\n"), "that request: %d %r" % (st, body))
        daemon.wait_exit()
        check("HTTP requests not over" not in daemon.stderr(), "nothing cut")
    finally:
        teardown(daemon, pid, before)
        notify.close()
    daemon.scan()


def test_http_never_finished(d):
    """A request the old master took before the hand-over and never finished: the old master
    waits for it a second at most (http_server_finish), says so, and exits."""
    daemon, hport = start(d)
    pid, before = None, None
    try:
        old = daemon.proc.pid
        before = connect(hport, half(b"/live"))
        wait_for(lambda: taken(before), "the old master to take a connection")
        rc, out, err = daemon.ctl("upgrade")
        check(rc == 0, "upgrade: rc %s %s%s" % (rc, out, err))
        pid = int(out.strip().splitlines()[-1])
        check(pid != old, "upgrade says pid %d serves" % pid)
        daemon.wait_exit(timeout=20)
        check("upgrade: 1 HTTP requests not over after 1 s: cut" in daemon.stderr(),
              "the old master's cut line:\n%s" % daemon.stderr()[-3000:])
        check(before.recv(100) == b"", "the cut request's connection closed unanswered")
        with connect(hport, half(b"/ready") + REST) as s:
            check(answer(s, "after the upgrade") == (200, READY), "ready after the upgrade")
    finally:
        teardown(daemon, pid, before)
    daemon.scan()


def revoke(user):
    """Half a POST /revoke?user=USER with the token (REST finishes it)."""
    return (b"POST /revoke?user=%s HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
            b"Content-Length: 0\r\n" % (user.encode(), TOKEN.encode()))


def test_http_revoke_during_handover(d):
    """revoke over HTTP (/revoke on the credential API server) on a connection the old master
    took before the hand-over, finished during it: 503 and the retry message (the new master
    copies the revocation list with the table: a change made now would be answered as done
    and lost); the same request once the new master serves: 200, and the entry listed."""
    cport = free_port(avoid=RELAY)
    daemon, _ = start(d, cred=cport)
    pid, before = None, None
    try:
        old = daemon.proc.pid
        before = connect(cport, revoke("mallory"))
        wait_for(lambda: taken(before), "the old master to take a connection")
        _, hold, proc = held_upgrade(daemon, WORKERS)
        try:
            before.sendall(REST)
            st, body = answer(before, "revoke taken before the hand-over, sent during it")
            check(st == 503 and b"live upgrade is handing over: retry" in body,
                  "revoke on the old master in the hand-over: %d %r" % (st, body))
        finally:
            hold.release()
            pid = hold.new
        pid = upgrade_result(proc)
        check(pid != old, "upgrade says pid %d serves" % pid)
        check(daemon.admin({"cmd": "revocations"})["count"] == 0,
              "the refused revoke was entered")
        with connect(cport, revoke("mallory") + REST) as s:
            st, body = answer(s, "revoke on the new master")
        check(st == 200, "revoke on the new master: %d %r" % (st, body))
        listed = daemon.admin({"cmd": "revocations"})["revocations"]
        check([e["name"] for e in listed] == ["mallory"], "revocations %r" % listed)
    finally:
        teardown(daemon, pid, before)
    daemon.scan()


def test_http_failed_handover(d):
    daemon, hport = start(d)
    before, asked = None, None
    try:
        old = daemon.proc.pid
        before, hold, proc = handover(daemon, hport)
        try:
            asked = connect(hport, half(b"/live") + REST)
            finish_before(before)
            hold.kill()
        finally:
            hold.release()
        st, body = answer(asked, "the request made during the failed hand-over")
        check((st, body) == (200, b"{}\n"), "that request: %d %r" % (st, body))
        upgrade_result(proc, ok=False)
        wait_for(lambda: daemon.admin({"cmd": "status"})["workers"]["running"] == WORKERS,
                 "the old master's workers")
        check(daemon.admin({"cmd": "status"})["pid"] == old, "the old master serves")
        with connect(hport, half(b"/ready") + REST) as s:
            check(answer(s, "after the failed upgrade") == (200, READY),
                  "ready after the failed upgrade")
    finally:
        teardown(daemon, None, before, asked)
    daemon.scan()


if __name__ == "__main__":
    run_tests([test_http_during_handover, test_http_failed_handover,
               test_http_finished_after_upgrade, test_http_never_finished,
               test_http_revoke_during_handover])
