#!/usr/bin/env python3
"""RFC 6062 data connections handed to their CONNECTION-ID's worker at burst scale: no
IPC_TCP_HANDOFF is lost when a control socket on its way is full (worker/ctlq.c,
master/handoffq.c, common/ipcq.h). A control socket holds a few dozen hand-offs (each frame
carries about 2.4 KiB and a descriptor, which the kernel charges about 4.3 KiB); a worker that gets more ConnectionBinds for another
worker's peers than that while the master does not read, or a master that passes more
than that to an owner busy elsewhere, must keep the rest and send them when there is
room (before: the connection was closed, logged at debug level only, and its client saw
its data connection end).

Two workers, one TURN-TCP listener, one TCP allocation (its owner decides which worker is
the other one). Its client gives every peer a permission; each of N peers connects to the
relayed address (ConnectionAttempt), then N data connections each send a ConnectionBind
(the kernel's SO_REUSEPORT hash gives about half of them to the other worker, which hands
them over through the master) while

- the master is stopped (SIGSTOP: a master busy elsewhere): the other worker's control
  socket fills, the rest wait in that worker;
- the owner worker is stopped (SIGSTOP: a worker busy elsewhere): the owner's control
  socket fills, the rest wait in the master.

Nothing may close while it is stopped (on main: every hand-off past the socket's room
was closed then), and once it runs again every ConnectionBind is answered with success
and bytes go both ways on every pair. The descriptors of the process that keeps the
waiting connections (the other worker, the master) show that the queue was used. While
the owner is stopped, a drain sent then must still reach it (the queue leaves room on
the socket for the frames the master sends directly), and when the owner is killed
instead, the master's queue for it must go, descriptors and all.

A case skips when a control socket has so much room (a large net.core.wmem_default,
measured in socket_holds) that its ConnectionBinds would not fill it; when every case
would, the run says SKIP and exits 77. In a network namespace of its own (root). Every
wait is bounded; the only pause is the one that lets the stopped side's peer settle
(nothing changes for 1 s, at most 30 s), and nothing is timed.
"""
import array
import os
import resource
import select
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_CONNECTION_ID, A_ERROR, A_PEER, A_RELAYED,  # noqa: E402
                           CLONE_NEWNET, CONNECTION_BIND, INDICATION, REQUEST, SUCCESS,
                           Daemon, StreamClient, check, config, error_code, free_port, parse,
                           parse_xor_addr, run_tests_as_root, unshare, wait_for)

RELAY = (28750, 28759)
LIMITS = {"user_quota": 0, "unauth_burst": 1000000, "unauth_rate": 1000000,
          "source_connections": 0, "prefix_connections": 0, "tcp_connections": 4096}
BATCH = 50     # peer connections at a time: the relay socket's listen backlog is 64
# An IPC_TCP_HANDOFF frame's size: struct ipc_hdr (8 bytes) and struct ipc_handoff (2456
# bytes on x86-64; a little more or less elsewhere changes little: the kernel charges
# about 4.3 KiB for such a frame with its descriptor, and that decides what fits).
HANDOFF_FRAME = 8 + 2456
# The most ConnectionBinds a case makes (test_master_busy).
N_MAX = 1000


def setup():
    unshare(CLONE_NEWNET)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 16384 if hard == resource.RLIM_INFINITY else min(hard, 16384)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    why = socket_too_big(N_MAX)
    if why is not None:
        # Every case would skip (the largest one first): automake's skip.
        print("SKIP: %s: %s" % (os.path.basename(sys.argv[0]), why))
        sys.exit(77)


def start(d):
    port = free_port()
    text = config(d, [("tcp", port, "TURN-TCP", ["peers", "tcp-peers"])],
                  {"peers": ["127.0.0.1"], "tcp-peers": ("TCP", ["127.0.0.1"])},
                  workers=2, relay=RELAY, limits=LIMITS)
    # A master or worker stopped longer than this is killed once the master runs again.
    text = text.replace("  drain_timeout: 1\n", "  drain_timeout: 1\n  worker_ping_timeout: 3600\n")
    return Daemon(d, text, workers=2).start(), port


def peer_connections(ctl, relayed, n):
    """n peers connected to the relayed address, each announced to ctl by a
    ConnectionAttempt: [(peer socket, CONNECTION-ID)]."""
    out = []
    while len(out) < n:
        socks = {}
        for _ in range(min(BATCH, n - len(out))):
            s = socket.create_connection(relayed, timeout=10)
            socks[s.getsockname()[:2]] = s
        for _ in range(len(socks)):
            ind = ctl.read_msg(10)
            check(ind[0] == 0x000C and ind[1] == INDICATION, "ConnectionAttempt: %r" % (ind,))
            addr = parse_xor_addr(ind[3][A_PEER][0], ind[2])
            check(addr in socks, "ConnectionAttempt for an unknown peer %r" % (addr,))
            out.append((socks.pop(addr), ind[3][A_CONNECTION_ID][0]))
    return out


class Binds:
    """One data connection per CONNECTION-ID, its ConnectionBind sent at once (no wait
    for the answer). state[i]: None (nothing yet), "ok", "eof" (closed before an answer),
    or the error answered."""

    def __init__(self, port, ctl, cids):
        self.dcs, self.tids = [], []
        for cid in cids:
            dc = StreamClient(port, creds=ctl.creds())
            dc.nonce = ctl.nonce    # the control connection's, as clients do
            tid = os.urandom(12)
            dc.send_raw(dc.build(CONNECTION_BIND, REQUEST, tid,
                                 [(A_CONNECTION_ID, cid)] + dc.auth_attrs(), dc.key))
            self.dcs.append(dc)
            self.tids.append(tid)
        self.state = [None] * len(cids)
        self.by_fd = {dc.sock.fileno(): i for i, dc in enumerate(self.dcs)}

    def read(self):
        """Takes what arrived, without waiting."""
        p = select.poll()
        for i, dc in enumerate(self.dcs):
            if self.state[i] is None:
                p.register(dc.sock, select.POLLIN)
        for fd, _ in p.poll(0):
            i = self.by_fd[fd]
            try:
                data = self.dcs[i].sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                self.state[i] = "eof"
                continue
            frames = self.dcs[i].feed(data)
            if frames:
                r = parse(frames[0])
                ok = r and r[0] == CONNECTION_BIND and r[2] == self.tids[i]
                self.state[i] = "ok" if ok and r[1] == SUCCESS else \
                    "answer %r" % (error_code(r[3]) if ok else r,)

    def done(self):
        """Reads what arrived; True once every connection was answered or closed."""
        self.read()
        return None not in self.state

    def count(self, what):
        return sum(1 for s in self.state if s == what)

    def settle(self, extra, quiet=1.0, limit=30.0):
        """Reads until neither the states nor extra() changed for quiet s (at most limit
        s): the stopped side's peer has done what it can."""
        t_end = time.monotonic() + limit
        last, since = None, time.monotonic()
        while time.monotonic() < t_end:
            self.read()
            now = (tuple(self.state), extra())
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
            time.sleep(0.05)

    def close(self):
        for dc in self.dcs:
            dc.close()


def fds_of(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def worker_pid(daemon, slot):
    return [w["pid"] for w in daemon.admin({"cmd": "workers"})["workers"] if w["slot"] == slot][0]


def relay_both_ways(pairs, binds):
    for i, ((peer, _), dc) in enumerate(zip(pairs, binds.dcs)):
        up, down = b"to the peer %d." % i, b"to the client %d." % i
        dc.sock.sendall(up)
        got = b""
        peer.settimeout(10)
        while len(got) < len(up):
            chunk = peer.recv(len(up) - len(got))
            check(chunk, "pair %d: the peer read EOF" % i)
            got += chunk
        check(got == up, "pair %d: the peer got %r" % (i, got))
        peer.sendall(down)
        check(dc.recv_exact(len(down)) == down, "pair %d: client <- peer" % i)


def owner_got_drain(ctl):
    """A draining worker refuses a Connect (403): the owner does once the IPC_DRAIN sent
    while its control socket held waiting hand-offs reached it (before: that frame found
    the socket full and was lost, and the owner went on taking new peers)."""
    lsn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        lsn.bind(("127.0.0.1", 0))
        lsn.listen(4)
        code = ctl.connect("127.0.0.1", lsn.getsockname()[1], expect="any")
    finally:
        lsn.close()
    check(code == 403, "Connect on the owner after the drain: %r, not 403: the IPC_DRAIN "
          "sent while hand-offs waited for it was lost" % (code,))
    print("the drain sent while hand-offs waited reached the owner (Connect: 403)")


def socket_holds():
    """How many hand-off frames (HANDOFF_FRAME bytes and a descriptor each) a control socket
    made as the daemon makes them (a SOCK_SEQPACKET socketpair: net.core.wmem_default)
    takes before it says EAGAIN, measured: what the kernel charges per frame decides it,
    not the payload."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    r, w = os.pipe()
    frame, rights = b"\0" * HANDOFF_FRAME, [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                             array.array("i", [r]))]
    n = 0
    try:
        a.setblocking(False)
        while n < 100000:
            try:
                a.sendmsg([frame], rights)
            except BlockingIOError:
                break
            n += 1
    finally:
        for s in (a, b):
            s.close()
        os.close(r)
        os.close(w)
    return n


def socket_too_big(n):
    """A reason to skip when the hand-offs a queue lets onto one control socket (half of
    what it holds, socket_holds(): the queue leaves the other half to the frames sent
    directly, common/ipcq.h) are a third of n or more: about half of n hand-offs go
    through that socket, and with so much room few or none would wait, so the test would
    prove nothing. None when they are fewer."""
    holds = socket_holds()
    room = holds // 2
    if room * 3 < n:
        return None
    return ("a control socket takes %d hand-offs before the queue waits (half of the %d it "
            "holds), too many for %d ConnectionBinds to fill it" % (room, holds, n))


class Scene:
    """The daemon, alice's TCP allocation (owner: its worker's slot) with a permission for
    127.0.0.1, and n peers connected to its relayed address (pairs: peer socket,
    CONNECTION-ID); binds, once made, the data connections. close() ends it all and
    returns the daemon's exit status."""

    def __init__(self, d, n):
        self.daemon, self.port = start(d)
        self.pairs, self.binds = [], None
        try:
            self.ctl = StreamClient(self.port, user="alice")
            r = self.ctl.allocate_tcp()
            self.relayed = parse_xor_addr(r[3][A_RELAYED][0], r[2])
            a = self.ctl.record(self.daemon)
            check(a is not None, "no allocation listed")
            self.owner = a["worker"]
            check(A_ERROR not in self.ctl.perm("127.0.0.1")[3], "CreatePermission failed")
            self.pairs = peer_connections(self.ctl, self.relayed, n)
        except BaseException:
            self.close()
            raise

    def bind_all(self):
        self.binds = Binds(self.port, self.ctl, [cid for _, cid in self.pairs])
        return self.binds

    def close(self):
        if self.binds is not None:
            self.binds.close()
        for peer, _ in self.pairs:
            peer.close()
        return self.daemon.stop()


def burst(d, n, stop_owner):
    """n binds while the master (stop_owner False) or the owner worker is stopped."""
    why = socket_too_big(n)
    if why is not None:
        print("skipped: " + why)
        return
    sc = Scene(d, n)
    daemon = sc.daemon
    try:
        stopped = worker_pid(daemon, sc.owner) if stop_owner else daemon.proc.pid
        keeper = daemon.proc.pid if stop_owner else worker_pid(daemon, 1 - sc.owner)
        before = fds_of(keeper)
        os.kill(stopped, signal.SIGSTOP)
        try:
            binds = sc.bind_all()
            binds.settle(lambda: fds_of(keeper))
            waiting = fds_of(keeper) - before
            closed, answered = binds.count("eof"), binds.count("ok")
            if stop_owner:
                # A frame the master sends directly while hand-offs wait for the owner
                # (the queue leaves room for those: common/ipcq.h).
                dr = daemon.admin({"cmd": "drain"})
                check(dr.get("draining") is True, "drain: %r" % (dr,))
        finally:
            os.kill(stopped, signal.SIGCONT)
        wait_for(binds.done, "every ConnectionBind answered or closed", timeout=60)
        ok = binds.count("ok")
        what = "the owner worker" if stop_owner else "the master"
        print("%d ConnectionBinds while %s was stopped: %d answered by the owner then, %d "
              "closed then, %d descriptors waiting in %s; %d of %d succeeded in the end"
              % (n, what, answered, closed, waiting,
                 "the master" if stop_owner else "the other worker", ok, n))
        check(closed == 0, "%d data connections closed while %s was stopped (their "
              "hand-off dropped)" % (closed, what))
        bad = [s for s in binds.state if s != "ok"]
        check(ok == n, "%d of %d ConnectionBinds failed: %r" % (n - ok, n, bad[:5]))
        check(waiting > 0, "no hand-off waited in %s: the burst did not fill the control "
              "socket" % ("the master" if stop_owner else "the other worker"))
        relay_both_ways(sc.pairs, binds)
        print("%d pairs relay both ways" % n)
        if stop_owner:
            owner_got_drain(sc.ctl)
        sc.ctl.close()
    finally:
        rc = sc.close()
    check(rc == 0, "exit status %r" % rc)


def test_master_busy(d):
    burst(d, N_MAX, stop_owner=False)


def test_owner_busy(d):
    # The owner's share waits in its listener's accept queue meanwhile (511): fewer pairs.
    burst(d, 600, stop_owner=True)


def test_owner_dies(d):
    """The owner is killed while hand-offs wait for it in the master: the master's queue
    goes with its control socket, every waiting descriptor closed (the master's count back
    where it was), and each of those clients sees its data connection end."""
    n = 600
    why = socket_too_big(n)
    if why is not None:
        print("skipped: " + why)
        return
    sc = Scene(d, n)
    sc.daemon.allowed_deaths = 1   # the kill below
    try:
        owner = worker_pid(sc.daemon, sc.owner)
        master = sc.daemon.proc.pid
        before = fds_of(master)
        os.kill(owner, signal.SIGSTOP)
        binds = sc.bind_all()
        binds.settle(lambda: fds_of(master))
        waiting = fds_of(master) - before
        os.kill(owner, signal.SIGKILL)   # a stopped process dies too: no SIGCONT
        wait_for(binds.done, "every ConnectionBind answered or closed", timeout=60)
        wait_for(lambda: fds_of(master) <= before, "the master's descriptors back to %d "
                 "(now %d)" % (before, fds_of(master)), timeout=30)
        eof = binds.count("eof")
        print("%d ConnectionBinds, the owner killed with %d waiting in the master: %d data "
              "connections closed, %d answered, master descriptors back to %d"
              % (n, waiting, eof, n - eof, fds_of(master)))
        check(waiting > 0, "no hand-off waited in the master")
        check(eof >= waiting, "%d waited in the master but only %d clients saw their "
              "connection end" % (waiting, eof))
        check(binds.count("ok") == 0, "a ConnectionBind succeeded with its owner dead")
        sc.ctl.close()
    finally:
        rc = sc.close()
    check(rc == 0, "exit status %r" % rc)


if __name__ == "__main__":
    run_tests_as_root([test_master_busy, test_owner_busy, test_owner_dies],
                      "a network namespace of its own", setup)
