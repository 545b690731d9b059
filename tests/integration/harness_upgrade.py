"""Shared by the live-upgrade tests (test_upgrade_*.py): holding the daemon's processes
with ptrace (at their exit: ExitHold; at their birth: BirthHold, held_upgrade), HTTP
connections a master takes before a hand-over (connect, half, taken), an upgrade that fails
after the hand-over (failed_upgrade), and a daemon with UDP allocations relaying across
upgrades (relaying); teardown, the end of every such test."""
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATECTL, TURNGATED, Client, Daemon, Failure,  # noqa: E402
                           check, config, free_port, listener_port_ok, peer_socket,
                           stop_master, wait_for)

SAMPLE = 5

def teardown(daemon, pid, *closing):
    """The end of a live-upgrade test, in its finally: closes each of closing that is not
    None (clients, sockets), stops the master that an upgrade started (pid: stop_master;
    None or the daemon's own: nothing) and kills the daemon. The test scans the daemon's
    log (daemon.scan) after its finally, so that a failure is reported as it came."""
    for c in closing:
        if c is not None:
            c.close()
    stop_master(daemon, pid)
    daemon.kill()


PTRACE_CONT, PTRACE_DETACH, PTRACE_SEIZE = 7, 17, 0x4206
PTRACE_O_TRACEEXIT, PTRACE_EVENT_EXIT = 0x40, 6
WALL = 0x40000000

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long


def ptrace(req, pid, addr=0, data=0):
    if libc.ptrace(req, pid, ctypes.c_void_p(addr), ctypes.c_void_p(data)) < 0:
        e = ctypes.get_errno()
        raise OSError(e, "ptrace(%d, %d): %s" % (req, pid, os.strerror(e)))


class ExitHold:
    """Holds the traced processes at their exit; passes every other stop on."""

    def __init__(self, pids):
        self.pids, self.held = list(pids), set()
        for p in self.pids:
            ptrace(PTRACE_SEIZE, p, 0, PTRACE_O_TRACEEXIT)

    def poll(self):
        """Handles the stops that happened (never blocks)."""
        for p in self.pids:
            while p not in self.held:
                try:
                    pid, status = os.waitpid(p, os.WNOHANG | WALL)
                except ChildProcessError:
                    break
                if pid == 0 or not os.WIFSTOPPED(status):
                    break
                if status >> 8 == (5 | PTRACE_EVENT_EXIT << 8):    # SIGTRAP | event
                    self.held.add(p)
                    break
                sig = os.WSTOPSIG(status)       # a signal for the tracee: delivered
                ptrace(PTRACE_CONT, p, 0, sig)

    def wait_held(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.held) < len(self.pids):
            self.poll()
            time.sleep(0.01)
        return len(self.held) == len(self.pids)

    def release(self):
        for p in self.pids:
            try:
                ptrace(PTRACE_DETACH, p)
            except OSError:
                pass


def hold_exits(daemon, n):
    """The pids of daemon's n workers and an ExitHold of them; exits 77 (SKIP) with the
    reason where they cannot be traced."""
    olds = [w["pid"] for w in daemon.admin({"cmd": "workers"})["workers"]]
    check(len(olds) == n, "workers listed: %r" % olds)
    try:
        return olds, ExitHold(olds)
    except OSError as e:
        print("SKIP: cannot trace the workers (%s)" % e)
        sys.exit(77)


def run_until(proc, hold, timeout):
    """Handles hold's stops (hold.poll) until proc (a Popen or an InThread) ends or timeout
    seconds pass; returns proc.poll()."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        hold.poll()
        time.sleep(0.01)
    hold.poll()
    return proc.poll()


PTRACE_GETEVENTMSG, PTRACE_INTERRUPT = 0x4201, 0x4207
PTRACE_O_TRACEFORK, PTRACE_O_TRACEVFORK = 0x02, 0x04
PTRACE_EVENT_FORK, PTRACE_EVENT_VFORK, PTRACE_EVENT_STOP = 1, 2, 128


def event_msg(pid):
    v = ctypes.c_ulong(0)
    ptrace(PTRACE_GETEVENTMSG, pid, 0, ctypes.addressof(v))
    return v.value


class BirthHold:
    """Traces master (fork events); the first child it forks is the next generation's
    master (an upgrade's). Holds the first `n` children that `holder` forks at their
    birth (their first instruction not run): holder "new" is that new master (its
    workers), "old" the traced master itself (a failed upgrade's respawned workers).
    Every other stop is passed on, every other child let go."""

    def __init__(self, master, holder, n):
        self.master, self.holder, self.n = master, holder, n
        self.new = None
        self.traced = {master}
        self.held, self.born = set(), set()
        ptrace(PTRACE_SEIZE, master, 0, PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK)

    def _forker(self):
        return self.new if self.holder == "new" else self.master

    def _stop(self, pid, status):
        event = status >> 16
        if os.WSTOPSIG(status) == 5 and event in (PTRACE_EVENT_FORK, PTRACE_EVENT_VFORK):
            child = event_msg(pid)
            self.traced.add(child)
            if pid == self.master and self.new is None:
                self.new = child
                if self.holder == "new":    # its forks are what we hold, not ours
                    self.traced.discard(pid)
                    ptrace(PTRACE_DETACH, pid)
                    return
            elif pid == self._forker() and len(self.born) < self.n:
                self.born.add(child)
            ptrace(PTRACE_CONT, pid)
            return
        if event == PTRACE_EVENT_STOP:
            if pid in self.born:
                self.held.add(pid)          # stays stopped
            elif pid == self.new and self.holder == "new":
                ptrace(PTRACE_CONT, pid)
            else:                           # a child we do not hold
                self.traced.discard(pid)
                ptrace(PTRACE_DETACH, pid)
            return
        ptrace(PTRACE_CONT, pid, 0, os.WSTOPSIG(status))   # a signal: delivered

    def poll(self):
        """Handles the stops that happened (never blocks)."""
        for p in list(self.traced):
            while p in self.traced and p not in self.held:
                try:
                    pid, status = os.waitpid(p, os.WNOHANG | WALL)
                except ChildProcessError:
                    self.traced.discard(p)
                    break
                if pid == 0:
                    break
                if not os.WIFSTOPPED(status):
                    self.traced.discard(p)  # exited
                    break
                self._stop(p, status)

    def wait_held(self, busy, timeout=60.0):
        """Polls until n children are held (True), or busy() says no more will come, or
        timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.held) < self.n:
            self.poll()
            if len(self.held) < self.n and not busy():
                self.poll()
                break
            time.sleep(0.005)
        return len(self.held) == self.n

    def _let_go(self, pid):
        """Detaches pid, running or stopped, passing on a signal it stopped for."""
        try:
            if pid not in self.held:
                ptrace(PTRACE_INTERRUPT, pid)
                deadline = time.monotonic() + 10
                status = None
                while time.monotonic() < deadline:
                    got, status = os.waitpid(pid, os.WNOHANG | WALL)
                    if got != 0:
                        break
                    time.sleep(0.001)
                if status is None or not os.WIFSTOPPED(status):
                    return
                sig = os.WSTOPSIG(status) if status >> 16 == 0 else 0
                ptrace(PTRACE_DETACH, pid, 0, sig)
                return
            ptrace(PTRACE_DETACH, pid)
        except (OSError, ChildProcessError):
            pass

    def kill(self):
        """The new binary dies in the hand-over, whatever the upgrade's timeout (a short
        --timeout would also bound a slow sanitizer start): SIGKILLs the held children (they
        hold the upgrade's channel and the table's lock) and the new master and reaps them
        as their tracer (then their parents can: the old master reads the channel's end and
        falls back)."""
        for p in list(self.held) + ([self.new] if self.new is not None else []):
            try:
                os.kill(p, signal.SIGKILL)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    got, status = os.waitpid(p, os.WNOHANG | WALL)
                    if got != 0 and not os.WIFSTOPPED(status):
                        break
                    time.sleep(0.01)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.held.discard(p)
            self.traced.discard(p)

    def release(self):
        for p in list(self.held):
            self._let_go(p)
        self.held.clear()
        for p in list(self.traced):
            self._let_go(p)
        self.traced.clear()


def trace_births(daemon, holder, n, kind=None):
    """(the daemon's master pid, BirthHold(it, holder, n), or kind(it, holder, n): a
    subclass); SKIP (exit 77) with the reason when the master cannot be traced (ptrace needs
    root or ptrace_scope 0)."""
    master = daemon.admin({"cmd": "status"})["pid"]
    try:
        return master, (kind or BirthHold)(master, holder, n)
    except OSError as e:
        print("SKIP: cannot trace the master (%s)" % e)
        sys.exit(77)


def held_upgrade(daemon, n, kind=None, args=()):
    """`turngatectl upgrade ARGS` with the new master's first n children held at birth
    (trace_births: BirthHold, or kind), returned once they are held and the old master is in
    its hand-over: (old master pid, hold, the upgrade's Popen). A failure before that lets
    everything go (a hold with kill() kills what it holds: the new binary) and ends the
    upgrade's client."""
    old, hold = trace_births(daemon, "new", n, kind)
    proc = subprocess.Popen([TURNGATECTL, "-s", daemon.sock, "upgrade"] + list(args),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        check(hold.wait_held(lambda: proc.poll() is None),
              "the new master's children held at birth: %d of %d (%s)"
              % (len(hold.held), n, daemon.stderr()[-3000:]))
        check("stopping the workers" in daemon.stderr(), "the old master hands over")
    except BaseException:
        hold.kill()     # a new master left running would outlive the test
        hold.release()
        proc.kill()
        proc.communicate()
        raise
    return old, hold, proc


def upgrade_result(proc, ok=True, timeout=90):
    """Waits for `turngatectl upgrade` (proc, a Popen with text pipes) and checks its outcome:
    ok, it succeeded (returns the pid it says serves); else it said "upgrade failed"."""
    out, err = proc.communicate(timeout=timeout)
    if not ok:
        check(proc.returncode == 1 and "upgrade failed" in err,
              "upgrade: rc %s %s%s" % (proc.returncode, out, err))
        return None
    check(proc.returncode == 0, "upgrade: rc %s %s%s" % (proc.returncode, out, err))
    return int(out.strip().splitlines()[-1])


def end_upgrade(proc, hold=None):
    """In a test's finally: lets hold (a BirthHold) go and ends turngatectl upgrade (proc)
    when it still runs; either may be None."""
    if hold is not None:
        hold.release()
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.communicate()


def read_reply(s):
    """One admin reply (a dict) read from the connection s."""
    buf = b""
    while b"\n" not in buf:
        chunk = s.recv(65536)
        check(chunk, "the admin connection ended without a reply (%r)" % buf)
        buf += chunk
    return json.loads(buf.split(b"\n", 1)[0])


def hold_open(fifo, timeout=60.0):
    """Opens the FIFO of $TURNGATE_TEST_UPGRADE_HOLD to write once the new master waits at
    it, before "ready" (bounded); writing a byte to it, or closing it, lets it go on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:     # ENXIO: no reader yet
            time.sleep(0.02)
    raise Failure("the new master did not wait at %s within %.0f s" % (fifo, timeout))


def half(path):
    """Half an HTTP GET of path: the headers not ended."""
    return b"GET %s HTTP/1.1\r\nHost: t\r\n" % path


def connect(port, sent=b""):
    """A TCP connection to 127.0.0.1:port that has sent `sent`."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60.0)
    s.sendall(sent)
    return s


def tcp_row(local, remote):
    """The columns of /proc/net/tcp's line of the loopback TCP socket from port local to
    port remote (both on 127.0.0.1), or None when there is none."""
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            c = line.split()
            if c[1] == "0100007F:%04X" % local and c[2] == "0100007F:%04X" % remote:
                return c
    return None


def inode(s):
    """The inode of the server side of the connection s (/proc/net/tcp): 0 while it waits in
    the listening socket's queue (no process took it yet), None once gone."""
    c = tcp_row(s.getpeername()[1], s.getsockname()[1])
    return None if c is None else int(c[9])


def taken(s):
    """True once a process took the connection s."""
    return bool(inode(s))


def read_by_server(s):
    """True once the process at the server end of the connection s has read every byte s
    sent: s's side has them all acknowledged (tx_queue 0), and then the server's side
    holds none unread (rx_queue 0; read in that order, so a byte still on its way cannot
    pass for one read)."""
    mine = tcp_row(s.getsockname()[1], s.getpeername()[1])
    if mine is None or int(mine[4].split(":")[0], 16) != 0:
        return False
    theirs = tcp_row(s.getpeername()[1], s.getsockname()[1])
    return theirs is not None and int(theirs[4].split(":")[1], 16) == 0


class InThread:
    """fn(*args) in a thread, with the part of Popen's interface upgrade_held uses:
    returncode 0 once it returned; communicate() raises what it raised."""

    def __init__(self, fn, *args):
        self.returncode, self.exc = None, None
        self.t = threading.Thread(target=self._run, args=(fn,) + args, daemon=True)
        self.t.start()

    def _run(self, fn, *args):
        try:
            fn(*args)
            self.returncode = 0
        except BaseException as e:     # raised again by communicate
            self.exc = e
            self.returncode = 1

    def poll(self):
        return None if self.t.is_alive() else self.returncode

    def communicate(self, timeout):
        self.t.join(timeout)
        if self.exc is not None:
            raise self.exc
        return "", ""


def held_socket(relay, taken=()):
    """A UDP socket on 127.0.0.1 holding a port for failed_upgrade: one its busy listener
    may name (listener_port_ok: outside relay and below 49152) and none of taken (the
    test's listener ports). A port the kernel picks (bind to port 0, 32768-60999) can lie
    in the test's relay range: the new master's configuration is then refused (a
    listener in a relay port range) and it stops before "ready" with EINVAL instead of
    failing after the hand-over. The socket holds its port from the check on (no race)."""
    for _ in range(200):    # bounded: a port in the range is drawn again
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        if listener_port_ok(port, relay) and port not in taken:
            return s
        s.close()
    raise Failure("no port outside the relay port range %d-%d to hold" % relay)


def failed_upgrade(daemon, d, text, listeners, held, workers, relay):
    """An upgrade that fails after the old workers handed over (the new binary's
    configuration names a listener on held's port, which it cannot bind): checks that
    turngatectl reports it and that the old master serves on with all its workers."""
    check(listener_port_ok(held.getsockname()[1], relay),
          "held port %d lies in a relay port range: the new configuration would be "
          "refused before \"ready\", not fail after the hand-over (held_socket)"
          % held.getsockname()[1])
    old = daemon.admin({"cmd": "status"})["pid"]
    daemon.write_config(config(d, listeners + [("busy", held.getsockname()[1],
                                                "TURN-UDP", ["peers"])],
                               {"peers": ["127.0.0.1"]}, workers=workers, relay=relay))
    rc, out, err = daemon.ctl("upgrade")
    check(rc == 1 and "upgrade failed" in err, "upgrade: rc %d %s%s" % (rc, out, err))
    daemon.write_config(text)
    wait_for(lambda: daemon.admin({"cmd": "status"})["workers"]["running"] == workers,
             "the old master's workers")
    check(daemon.admin({"cmd": "status"})["pid"] == old, "the old master serves")


def relay_inodes(relay):
    """{port: [inode, ...]} of the UDP sockets bound to a port of relay (IPv4)."""
    out = {}
    with open("/proc/net/udp") as f:
        next(f)
        for line in f:
            cols = line.split()
            port, inode = int(cols[1].split(":")[1], 16), int(cols[9])
            if relay[0] <= port <= relay[1] and inode != 0:
                out.setdefault(port, []).append(inode)
    return out


def socket_holders(inodes):
    """{inode: [(pid, comm, exe), ...]} of the processes holding the sockets inodes."""
    out = {i: [] for i in inodes}
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
            with open("/proc/%s/comm" % pid) as f:
                comm = f.read().strip()
            exe = os.path.realpath("/proc/%s/exe" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("/proc/%s/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith("socket:[") and int(link[8:-1]) in out:
                out[int(link[8:-1])].append((int(pid), comm, exe))
    return out


def daemon_relay_sockets(relay):
    """{inode: [(pid, comm, exe), ...]} of the UDP sockets bound to a port of relay that a
    turngated process of this build holds (another program's socket there is not the
    daemon's: a client bound to port 0 may land in a window inside the port-0 range)."""
    exe = os.path.realpath(TURNGATED)
    held = socket_holders({i for inodes in relay_inodes(relay).values() for i in inodes})
    return {i: who for i, who in held.items() if any(w[2] == exe for w in who)}


def check_same_sockets(before, ports, what, relay):
    """Every relayed port is held by one socket, the one of before."""
    now = relay_inodes(relay)
    moved = [p for p in ports if now.get(p) != before[p]]
    check(not moved, "%s: %d of %d relay ports have another socket (e.g. port %d: %r, "
          "was %r)" % (what, len(moved), len(ports), moved[0] if moved else 0,
                       now.get(moved[0]) if moved else None,
                       before[moved[0]] if moved else None))


def check_relaying(clients, peer, what):
    """A datagram from peer to each sampled relayed address reaches its client; a Refresh
    succeeds."""
    for c, (ip, port) in clients:
        payload = ("%s %d" % (what, port)).encode()
        got = None
        for _ in range(10):     # bounded: a lost datagram is sent again
            peer.sendto(payload, (ip, port))
            got = c.recv_data(timeout=1.0)
            if got is not None:
                break
        check(got == payload, "%s: relayed port %d: %r" % (what, port, got))
        check(c.refresh(600) is None, "%s: Refresh" % what)


def setup(d, daemon, port, n):
    clients, ports = [], []
    for i in range(n):
        c = Client(port, user="u%d" % i)
        r = c.allocate()
        (ip, rport), = c.relayed(r)
        ports.append(rport)
        clients.append((c, (ip, rport)))
    check(len(set(ports)) == n, "relayed ports not distinct")
    check(len(daemon.allocations()) == n, "allocations listed before the upgrade")
    return clients, ports


class Run:
    """A daemon of `workers` workers with n UDP allocations on relay ports relay, a sample
    of them relaying from peer, the relay sockets' inodes (before), a socket held on a
    port for failed_upgrade (held); pid: the master that serves after an upgrade."""


@contextlib.contextmanager
def relaying(d, relay, n, workers=2):
    r = Run()
    r.relay, r.n, r.workers, r.pid, r.clients = relay, n, workers, None, []
    port = free_port(avoid=relay)
    r.held = held_socket(relay, (port,))
    r.peer = peer_socket()
    r.listeners = [("udp", port, "TURN-UDP", ["peers"])]
    r.text = config(d, r.listeners, {"peers": ["127.0.0.1"]}, workers=workers, relay=relay)
    r.daemon = Daemon(d, r.text, workers=workers).start()
    try:
        r.clients, r.ports = setup(d, r.daemon, port, n)
        r.sample = r.clients[:: n // SAMPLE][:SAMPLE]
        for c, _ in r.sample:
            c.perm("127.0.0.1", r.peer.getsockname()[1])
        check_relaying(r.sample, r.peer, "before")
        r.before = relay_inodes(relay)
        check(all(len(r.before.get(p, [])) == 1 for p in r.ports), "one socket per relay port")
        yield r
    finally:
        teardown(r.daemon, r.pid, *[c for c, _ in r.clients], r.held, r.peer)
    r.daemon.scan()


def check_failed_upgrade(d, r):
    """A failed upgrade after the hand-over: the old master (now r.pid) takes them back."""
    failed_upgrade(r.daemon, d, r.text, r.listeners, r.held, r.workers, relay=r.relay)
    check(len(r.daemon.allocations()) == r.n, "allocations listed after the failed upgrade")
    check_same_sockets(r.before, r.ports, "after the failed upgrade", r.relay)
    check_relaying(r.sample, r.peer, "after the failed upgrade")

