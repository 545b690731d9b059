"""A crash restart under systemd keeps TURN-TCP and RFC 6062 calls (issue 41): the
connections go in the unit's file descriptor store and come back with their allocations.

No systemd runs here, so the test plays its part: it binds $NOTIFY_SOCKET and keeps what
the daemon stores there (FDSTORE=1 with FDNAME=, the descriptors in SCM_RIGHTS; gone again
with FDSTOREREMOVE=1), checking that only the main pid sends (NotifyAccess=main). With a
TURN-TCP call (a channel to a UDP peer) and an RFC 6062 call (a data connection bound to a
TCP echo peer) set up and relaying, it kills the whole daemon with SIGKILL (the master
stopped first, so that it cannot see its workers die, as systemd's kill of the cgroup),
writes numbered frames on both calls while no process runs (they wait in the sockets the
store holds), and starts turngated again as systemd does: the stored descriptors at 3...
with LISTEN_FDS, LISTEN_FDNAMES and LISTEN_PID (a small wrapper sets its own pid and
execs the daemon, so the pid matches). Checked: neither call's connection closes; every
frame the client sent before the kill, during the gap and after the restart reaches the
peer once and in order, and a frame cut by the crash (its head read by the worker that
died, its rest sent in the gap) is skipped up to the next frame, never read as one; every record of the data connection comes back once and in order;
both directions relay again; Refresh succeeds on both control connections; the
allocations are the ones of before (same relayed addresses); the store again holds the
four connections, and a record no connection claims is not left behind. The senders pause
around the kill but for that cut frame (docs/operations.md: what a crash in the middle of
a frame costs).

On a build without the store the restart has no connection to take back and the calls
end (checked on main: nothing is stored, the clients read EOF).

Relay ports 28000-28049 and the listener's port (free_port(late=True)) lie below the
kernel's port-0 range (32768-60999): the restart binds both again, and a socket bound to
port 0 meanwhile could hold one; the UDP echo peer, bound to port 0, can then never get
the TURN-TCP listener's port number either (an instance's own listener port is refused as
a peer, 403, whatever its protocol). Loopback only, every wait bounded.
"""
import array
import os
import signal
import socket
import subprocess
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_ERROR, TURNGATED, Daemon, StreamClient, TcpPeer,  # noqa: E402
                           alive, check, config, error_code, free_port, run_tests,
                           upgrade, wait_for)
from harness_upgrade import read_by_server  # noqa: E402
from test_tcp_relay import open_data  # noqa: E402
from test_upgrade_streams import CHANNEL, DataStream, StreamCall, UdpPeer  # noqa: E402

RELAY = (28000, 28049)
SO_PASSCRED = getattr(socket, "SO_PASSCRED", 16)
SCM_CREDENTIALS = getattr(socket, "SCM_CREDENTIALS", 2)
PYTHON = "/usr/bin/python3"
# Execs the daemon with LISTEN_PID set to its own pid, the passed descriptors (listed in
# TG_PASS, in the order of LISTEN_FDNAMES) moved to 3, 4, ...
WRAPPER = r"""
import fcntl, os, sys
fds = [int(x) for x in os.environ.pop("TG_PASS").split(",") if x]
high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100 + len(fds)) for fd in fds]
for fd in fds:
    os.close(fd)
for i, fd in enumerate(high):
    os.dup2(fd, 3 + i)
    os.close(fd)
os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(sys.argv[1], sys.argv[1:])
"""


class FdStore:
    """systemd's side of NOTIFY_SOCKET: the file descriptor store (name -> descriptors)."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_PASSCRED, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.path = path
        self.fds = {}
        self.senders = set()
        self.main = None         # NotifyAccess=main: the first sender, then MAINPID=
        self.refused = 0
        self.last = time.monotonic()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._rx, daemon=True)
        self.t.start()

    def _rx(self):
        self.sock.settimeout(0.1)
        space = socket.CMSG_SPACE(64 * 4) + socket.CMSG_SPACE(12)
        while not self.stop.is_set():
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, space)
            except socket.timeout:
                continue
            except OSError:
                return
            fds = array.array("i")
            pid = None
            for level, typ, cdata in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                    fds.frombytes(cdata[:len(cdata) - len(cdata) % fds.itemsize])
                elif level == socket.SOL_SOCKET and typ == SCM_CREDENTIALS:
                    pid = struct.unpack("iII", cdata[:12])[0]
            fields = dict(line.split("=", 1) for line in data.decode().splitlines()
                          if "=" in line)
            with self.lock:
                self.last = time.monotonic()
                if self.main is None:
                    self.main = pid
                name = fields.get("FDNAME", "stored")
                if pid != self.main:
                    self.refused += 1
                elif fields.get("MAINPID"):
                    self.main = int(fields["MAINPID"])
                elif fields.get("FDSTORE") == "1":
                    self.senders.add(pid)
                    self.fds.setdefault(name, []).extend(fds)
                    fds = []
                elif fields.get("FDSTOREREMOVE") == "1":
                    self.senders.add(pid)
                    for fd in self.fds.pop(name, []):
                        os.close(fd)
            for fd in fds:
                os.close(fd)

    def names(self):
        with self.lock:
            return sorted(self.fds)

    def quiet(self, for_s=0.5, timeout=10):
        """Waits until nothing came for for_s seconds."""
        wait_for(lambda: time.monotonic() - self.last >= for_s, "the store to settle",
                 timeout=timeout)

    def close(self):
        self.stop.set()
        self.t.join(5)
        self.sock.close()
        for fds in self.fds.values():
            for fd in fds:
                os.close(fd)


def children(pid):
    """The pids whose parent is pid."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/stat" % p) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(p))
            except (OSError, ValueError, IndexError):
                pass
    return out


def kill_all(daemon, master, master_only=False):
    """kill -9 of the whole daemon: the master stopped first (it must not see its workers
    die and clean up), then every process killed. master_only: kill -9 of the master alone
    (its workers get SIGTERM from the kernel and stop, leaving their records LIVE)."""
    workers = children(master)
    if not master_only:
        os.kill(master, signal.SIGSTOP)
        for w in workers:
            os.kill(w, signal.SIGKILL)
    os.kill(master, signal.SIGKILL)
    if master == daemon.proc.pid:
        daemon.proc.wait()
    for p in workers + [master]:
        wait_for(lambda: not alive(p), "process %d to die" % p)
    return workers


def restart(daemon, store):
    """Starts turngated as systemd does after a crash, with what the store holds."""
    with store.lock:
        store.main = None
        names, fds = [], []
        for name, v in sorted(store.fds.items()):
            for fd in v:
                names.append(name)
                fds.append(fd)
    env = dict(os.environ, NOTIFY_SOCKET=store.path, LISTEN_FDS=str(len(fds)),
               LISTEN_FDNAMES=":".join(names), TG_PASS=",".join(map(str, fds)))
    daemon.proc = subprocess.Popen([PYTHON, "-c", WRAPPER, TURNGATED, "-c", daemon.conf],
                                   stdin=subprocess.DEVNULL, stdout=daemon.err,
                                   stderr=daemon.err, env=env, pass_fds=fds)
    daemon.wait_running(daemon.workers)
    return names


def send_frames(call, n):
    """n more numbered ChannelData on the TURN-TCP call."""
    for _ in range(n):
        payload = b"C" + struct.pack("!I", call.sent) + b"c" * 59
        call.write(struct.pack("!HH", CHANNEL, len(payload)) + payload)
        call.sent += 1


def send_records(stream, n):
    for _ in range(n):
        stream.sock.sendall(stream.record(stream.sent))
        stream.sent += 1


def resume(obj):
    obj.stop_tx.clear()
    obj.tx = threading.Thread(target=obj._tx, daemon=True)
    obj.tx.start()


def pause(obj):
    obj.stop_tx.set()
    obj.tx.join(5)


def quiesce(call, stream, peer, what):
    """Stops the three senders and waits until what each sent has arrived."""
    for sender in (call, stream, peer):
        pause(sender)
    wait_for(lambda: len(peer.got) == call.sent and stream.echoed == stream.sent, what,
             timeout=10)


def stale_socket():
    """A TCP connection from another client (a loopback pair), under a real connection's
    name: what a name older than the table would give. Returns (the server's end for the
    store, the client's end to watch)."""
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    cl = socket.create_connection(ls.getsockname())
    sv, _ = ls.accept()
    ls.close()
    return os.dup(sv.fileno()), sv, cl


def calls_survive_crash_restart(d, upgrades, master_only=False, stale=False):
    workers = 2
    port = free_port(late=True)
    text = config(d, [("tcp", port, "TURN-TCP", ["peers", "tpeers"])],
                  {"peers": ["127.0.0.1"], "tpeers": ("TCP", ["127.0.0.1"])},
                  workers=workers, relay=RELAY)
    store = FdStore(os.path.join(d, "notify.sock"))
    daemon = Daemon(d, text, workers=workers, env={"NOTIFY_SOCKET": store.path}).start()
    peer, tpeer, call, stream = UdpPeer(), TcpPeer("127.0.0.1"), None, None
    master = daemon.proc.pid
    try:
        ctl = StreamClient(port)
        relayed = ctl.relayed(ctl.allocate())[0]
        for what, r in (("CreatePermission", ctl.perm("127.0.0.1", peer.port)),
                        ("ChannelBind", ctl.bind("127.0.0.1", peer.port, CHANNEL))):
            check(error_code(r[3]) is None, "%s to the UDP peer 127.0.0.1:%d (listener %d, "
                  "relay %r): %r %r" % (what, peer.port, port, relayed, error_code(r[3]),
                                        r[3].get(A_ERROR)))
        tctl = StreamClient(port, user="bob")
        trelayed = tctl.relayed(tctl.allocate_tcp())[0]
        cid = tctl.connect("127.0.0.1", tpeer.port)
        stream = DataStream(open_data(port, tctl.creds(), cid))
        call = StreamCall(ctl)
        peer.start_tx(relayed)
        wait_for(lambda: len(peer.got) >= 20 and len(call.got) >= 20 and stream.echoed >= 20,
                 "relaying before the crash", timeout=10)
        # Two TURN-TCP connections (one carrying the RFC 6062 allocation), a peer
        # connection and its data connection.
        wait_for(lambda: [n.split(".")[1] for n in store.names()] == ["c", "c", "d", "p"],
                 "the four connections in the store (%r)" % (store.names(),), timeout=10)
        for i in range(upgrades):
            # A live upgrade first: the new workers store the connections again, and the
            # new master may only once the old one is gone (NotifyAccess=main).
            master = upgrade(daemon, workers)
            n = len(peer.got)
            wait_for(lambda: len(peer.got) > n + 10, "relaying after the upgrade", timeout=10)
            wait_for(lambda: store.main == master and
                     [n.split(".")[1] for n in store.names()] == ["c", "c", "d", "p"] and
                     master in store.senders,
                     "the new master (pid %d) to store the four connections (%r)"
                     % (master, store.names()), timeout=10)
        quiesce(call, stream, peer, "everything sent before the crash delivered")
        # A frame cut by the crash: its first 10 bytes read by the worker that dies, the
        # rest written during the gap. The new worker skips the rest (as a lost datagram)
        # up to the next frame: it must not read it as a frame header.
        half = b"H" + b"h" * 63
        frame = struct.pack("!HH", CHANNEL, len(half)) + half
        call.write(frame[:10])
        wait_for(lambda: read_by_server(call.sock), "the worker to read the cut frame's head",
                 timeout=30)
        store.quiet()
        before = store.names()
        workers_pids = kill_all(daemon, master, master_only)
        store.quiet()
        check(store.names() == before, "the store after the kill: %r, before %r"
              % (store.names(), before))
        check(store.main == master, "main pid %r, the master %d" % (store.main, master))
        if stale:
            # A foreign socket under the TURN-TCP call's name, first in the list: the
            # worker must not give it the call's allocation.
            real = next(n for n in store.names()
                        if n.startswith("tg1.c.") and n.endswith(".0.1.tcp"))
            fd, sv, cl = stale_socket()
            with store.lock:
                store.fds[real].insert(0, fd)
            sv.close()
        # While no process runs: the clients write on (the kernel holds it).
        call.write(frame[10:])
        send_frames(call, 20)
        send_records(stream, 20)
        time.sleep(0.2)
        names = restart(daemon, store)
        if stale:
            cl.settimeout(10)
            check(cl.recv(1) == b"", "the foreign socket was not closed")
            cl.close()
        print("%d upgrades, then killed master %d and workers %r; restarted with %d stored "
              "connections: %s" % (upgrades, master, workers_pids, len(names), " ".join(names)))
        wait_for(lambda: len(peer.got) == call.sent or call.closed,
                 "the frames sent during the gap at the peer (%d of %d)"
                 % (len(peer.got), call.sent), timeout=10)
        wait_for(lambda: stream.echoed == stream.sent or stream.closed,
                 "the records sent during the gap echoed (%d of %d)"
                 % (stream.echoed, stream.sent), timeout=10)
        check(call.closed is None, "the TURN-TCP connection: %s" % call.closed)
        check(stream.closed is None, "the data connection: %s" % stream.closed)
        # Both ways again, at the fixed rate.
        n_call = len(call.got)
        resume(call)
        resume(stream)
        peer.stop_tx.clear()
        peer.start_tx(relayed)
        wait_for(lambda: len(call.got) > n_call + 20 and len(peer.got) > call.sent - 30 and
                 stream.echoed > stream.sent - 30 and len(peer.got) > 60,
                 "relaying after the restart", timeout=10)
        quiesce(call, stream, peer, "everything delivered")
        check(call.closed is None and stream.closed is None,
              "closed: %s / %s" % (call.closed, stream.closed))
        check(peer.got == list(range(call.sent)),
              "client -> peer: %d sent, %d received, not once each in order"
              % (call.sent, len(peer.got)))
        check(peer.halves == [], "the cut frame reached the peer: %r" % (peer.halves,))
        check("58 bytes of a frame cut by the crash skipped" in daemon.stderr(),
              "no skipped cut frame in the log:\n%s" % daemon.stderr())
        got = call.got
        check(all(a < b for a, b in zip(got, got[1:])), "peer -> client: out of order or twice")
        print("TURN-TCP: %d frames sent (20 during the gap), all received once in order; "
              "peer -> client %d of %d (the gap's datagrams are lost as UDP's are); "
              "RFC 6062: %d records echoed once in order"
              % (call.sent, len(got), peer.sent, stream.echoed))
        check(call.refresh() is None, "Refresh on the TURN-TCP call after the restart")
        code = tctl.refresh(600)
        check(code is None, "Refresh on the RFC 6062 control connection: %r" % (code,))
        allocs = daemon.admin({"cmd": "allocations"})["allocations"]
        relays = sorted(a["relay"].rsplit(":", 1)[1] for a in allocs)
        check(relays == sorted([str(relayed[1]), str(trelayed[1])]),
              "the same allocations: %r" % (allocs,))
        wait_for(lambda: [n.split(".")[1] for n in store.names()] == ["c", "c", "d", "p"],
                 "the four connections stored again (%r)" % (store.names(),), timeout=10)
        st = daemon.admin({"cmd": "stats"})["counters"]
        # Each upgrade hands over six sockets (the TURN-TCP call's UDP relay socket and
        # the RFC 6062 relay's listening one too), the restart four.
        check(st["stream_handovers"] == 6 * upgrades + 4 and
              st["stream_handovers_ended"] == (1 if stale else 0),
              "taken back: %r" % ({k: v for k, v in st.items() if "stream" in k},))
        text = daemon.stderr()
        check("%d stream connections taken back from systemd, 0 closed" % (5 if stale else 4)
              in text,
              "the master's line:\n%s" % text)
    finally:
        if call is not None:
            call.close()
        if stream is not None:
            stream.close()
        peer.close()
        tpeer.close()
        daemon.kill()
        if master != daemon.proc.pid and alive(master):
            os.kill(master, signal.SIGKILL)
        store.close()
    daemon.scan()


def test_calls_survive_crash_restart(d):
    calls_survive_crash_restart(d, 0)


def test_master_kill_then_restart(d):
    """kill -9 of the master alone: its workers stop (SIGTERM from the kernel), leave
    their records and the store as they are, and the start takes both back. A socket of
    another client under the TURN-TCP call's name (a name older than the table) is closed,
    not given the call's allocation."""
    calls_survive_crash_restart(d, 0, master_only=True, stale=True)


def test_upgrade_then_crash_restart(d):
    """Two live upgrades, then the crash: the store follows the connections to the new
    processes."""
    calls_survive_crash_restart(d, 2)


def test_worker_crash_empties_store(d):
    """A connection that ends leaves the store. A worker killed alone (the master respawns it): its connections leave the store,
    so that systemd does not hold them open for nobody, and the client reads the end as
    before."""
    workers = 1
    port = free_port()
    text = config(d, [("tcp", port, "TURN-TCP", ["peers"])], {"peers": ["127.0.0.1"]},
                  workers=workers, relay=RELAY)
    store = FdStore(os.path.join(d, "notify.sock"))
    daemon = Daemon(d, text, workers=workers, env={"NOTIFY_SOCKET": store.path}).start()
    daemon.allowed_deaths = 1
    try:
        gone = StreamClient(port, user="carol")
        gone.allocate()
        ctl = StreamClient(port)
        ctl.allocate()
        wait_for(lambda: len(store.names()) == 2, "the connections in the store", timeout=10)
        # A connection that ends leaves the store.
        gone.close()
        wait_for(lambda: len(store.names()) == 1, "the closed connection out of the store "
                 "(%r)" % (store.names(),), timeout=10)
        for w in children(daemon.proc.pid):
            os.kill(w, signal.SIGKILL)
        wait_for(lambda: store.names() == [], "the store to empty (%r)" % (store.names(),),
                 timeout=10)
        try:
            eof = ctl.recv_eof(timeout=10)
        except ConnectionResetError:
            eof = True
        check(eof, "the client's connection did not end with its worker")
        daemon.wait_running(workers)
    finally:
        daemon.stop()
        store.close()


if __name__ == "__main__":
    run_tests([test_calls_survive_crash_restart, test_master_kill_then_restart,
               test_upgrade_then_crash_restart,
               test_worker_crash_empties_store])
