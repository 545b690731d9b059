"""Live upgrades keep stream calls (issue 41): TURN-TCP and RFC 6062 calls through five
upgrades each.

A TURN-TCP client (a UDP allocation over a TCP control connection, a channel to a UDP
peer) sends numbered ChannelData at a fixed rate (one every 10 ms) while the peer sends
numbered datagrams to the relayed address at the same rate; meanwhile `turngatectl
upgrade` runs five times in a row (the same binary: each new master takes the table over
and the old workers hand their TCP connections to the new ones with the bytes of any
partial frame), after a sixth upgrade that finds half a ChannelData in the worker's input
buffer (the rest is sent after it: the peer gets the datagram once, whole). Checked: the client's connection never closes (no EOF, no reset); the
peer receives every datagram the client sent exactly once and in order (TCP holds what
the client sends while no worker reads, so nothing of it may be lost); the client
receives every datagram the peer sent exactly once and in order too (the allocation's
relay socket is handed over with the connection: what reaches it inside the gap waits in
it); a Refresh on the connection succeeds after the upgrades, and the
allocation is still the one of before (same relayed address).

An RFC 6062 client (a TCP allocation, a data connection bound to a TCP echo peer) sends
numbered 16-byte records at the same rate through five upgrades: every record comes back
once and in order, the connection never closes, a second peer connection connected before
the upgrades and bound after them relays, and a Refresh on the control connection
succeeds. A TURN-TCP client that reads nothing while its peer sends: the worker's full
output buffer (256 KiB) goes to the new worker, and every datagram it held arrives once
and in order. An upgrade that fails after the old workers handed their connections over gives
them back to the old master's new workers: the TURN-TCP call relays on, every datagram
once and in order. On a build without the hand-over every call is closed at the first
upgrade.

Relay ports 44100-44199 (no other test's: each upgrade binds the same relay port again).
Loopback only, every wait bounded.
"""
import os
import queue
import socket
import ssl
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_LIFETIME, A_NONCE, A_REALM, A_USERNAME, REALM,  # noqa: E402
                           REFRESH, REQUEST, SUCCESS, Daemon, Failure, StreamClient, TcpPeer,
                           build, channel_data, channel_payload, check, config, error_code,
                           free_port, parse, peer_socket, run_tests, upgrade, wait_for)
from harness_upgrade import (failed_upgrade, held_socket, read_by_server,  # noqa: E402
                             teardown)
from test_tcp_relay import open_data  # noqa: E402

RELAY = (44100, 44199)
CHANNEL = 0x4000
PERIOD = 0.01          # one datagram each way every 10 ms
UPGRADES = 5
SO_RCVBUFFORCE = 33    # Linux; not in Python's socket module


class UdpPeer:
    """A UDP peer: records the numbered datagrams it receives, sends its own numbered
    datagrams to `dest` (the relayed address) every PERIOD once started."""

    def __init__(self):
        self.sock = peer_socket()
        # What the client sends while no worker reads its connection waits in it and
        # reaches us in one burst once a worker reads again: a default receive buffer
        # (212992 bytes, 256 of these datagrams: 2.5 s of them) drops the rest of a
        # longer gap's burst before this thread reads it (seen: a failed upgrade whose new
        # master took 4.6 s to fail on a loaded machine lost 115 here, none in turngated).
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
        except OSError:     # not root: as much as net.core.rmem_max allows
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.port = self.sock.getsockname()[1]
        self.got, self.sent, self.halves = [], 0, []
        self.stop_tx = threading.Event()
        self.stop_rx = threading.Event()
        self.rx = threading.Thread(target=self._rx, daemon=True)
        self.rx.start()

    def _rx(self):
        self.sock.settimeout(0.1)
        while not self.stop_rx.is_set():
            try:
                data = self.sock.recv(2048)
            except socket.timeout:
                continue
            except OSError:
                return
            if len(data) >= 5 and data[:1] == b"C":
                self.got.append(struct.unpack("!I", data[1:5])[0])
            elif data[:1] == b"H":
                self.halves.append(data)

    def start_tx(self, dest):
        def tx():
            nxt = time.monotonic()
            while not self.stop_tx.is_set():
                self.sock.sendto(b"P" + struct.pack("!I", self.sent) + b"p" * 60, dest)
                self.sent += 1
                nxt += PERIOD
                time.sleep(max(0.0, nxt - time.monotonic()))
        self.tx = threading.Thread(target=tx, daemon=True)
        self.tx.start()

    def dropped(self):
        """The datagrams the kernel dropped at this socket (its receive buffer full):
        the drops column of /proc/net/udp."""
        with open("/proc/net/udp") as f:
            for line in f:
                cols = line.split()
                if cols[1] == "0100007F:%04X" % self.port:
                    return int(cols[-1])
        return 0

    def check_all(self, sent):
        """Waits until the peer holds the client's sent numbered datagrams, then checks
        it got each once and in order; one the kernel dropped at our own full socket is
        no loss of turngated's, and says so."""
        try:
            wait_for(lambda: len(self.got) + self.dropped() >= sent,
                     "every datagram at the peer", timeout=10)
        except Failure:
            pass    # the checks say what is missing
        dropped = self.dropped()
        check(dropped == 0, "the peer's socket dropped %d datagrams (its receive buffer: "
              "%d bytes)" % (dropped, self.sock.getsockopt(socket.SOL_SOCKET,
                                                          socket.SO_RCVBUF)))
        check(self.got == list(range(sent)),
              "client -> peer: %d sent, %d received, first difference at %r" %
              (sent, len(self.got), next((k for k, (a, b) in enumerate(
                  zip(self.got, range(sent))) if a != b), None)))

    def close(self):
        self.stop_tx.set()
        self.stop_rx.set()
        self.sock.close()


def send_paced(sender, send):
    """A sender thread's loop: send(n) for n = sender.sent, counted in sender.sent, one
    every PERIOD until sender.stop_tx is set, or an error, which sender.closed then
    says."""
    nxt = time.monotonic()
    while not sender.stop_tx.is_set():
        try:
            send(sender.sent)
        except OSError as e:
            sender.closed = sender.closed or "send: %s" % e
            return
        sender.sent += 1
        nxt += PERIOD
        time.sleep(max(0.0, nxt - time.monotonic()))


def read_stream(reader, handle, before=None):
    """A reader thread's loop: reads reader.sock (with a timeout set) until reader.stop_rx
    is set, or an error or EOF, which reader.closed then says; before() runs before each
    read (where one thread also writes: it may write and set the read's timeout); each
    read goes to handle(data), which returns False to stop. A read that times out is
    tried again."""
    while not reader.stop_rx.is_set():
        try:
            if before:
                before()
            data = reader.sock.recv(65536)
        except (socket.timeout, ssl.SSLWantReadError):
            continue
        except OSError as e:
            reader.closed = reader.closed or "recv: %s" % e
            return
        if not data:
            reader.closed = reader.closed or "EOF from the server"
            return
        if handle(data) is False:
            return


def file_frames(call, data):
    """Files the whole frames that data (read from call's connection) completes: the peer's
    numbers in call.got, STUN messages (parsed) in call.stun."""
    for f in call.ctl.feed(data):
        cd = channel_payload(f)
        if cd is None:
            call.stun.put(parse(f))
        elif cd[1][:1] == b"P":
            call.got.append(struct.unpack("!I", cd[1][1:5])[0])


def call_refresh(call, send, lifetime=600):
    """A Refresh on call's control connection, written by send(message), its response
    taken from call.stun (a 438 teaches a fresh nonce): the error code, None for
    success."""
    c = call.ctl
    for _ in range(3):
        tid = os.urandom(12)
        send(build(REFRESH, REQUEST, tid,
                   [(A_LIFETIME, struct.pack("!I", lifetime)),
                    (A_USERNAME, c.username.encode()), (A_REALM, REALM.encode()),
                    (A_NONCE, c.nonce)], c.key))
        deadline = time.monotonic() + 10
        while True:
            left = deadline - time.monotonic()
            check(left > 0, "no answer to the Refresh (%s)" % call.closed)
            try:
                p = call.stun.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if p and p[2] == tid:
                break
        code = error_code(p[3])
        if code == 438:
            c.nonce = p[3][A_NONCE][0]
            continue
        check(code is not None or p[1] == SUCCESS, "Refresh: %r" % (p,))
        return code
    return 438


class StreamCall:
    """A TURN-TCP client's call once set up: a sender of numbered ChannelData and a reader
    that files ChannelData (the peer's numbers) and STUN responses (a queue) apart."""

    def __init__(self, ctl):
        self.ctl = ctl
        self.sock = ctl.sock
        self.sock.settimeout(None)
        self.wlock = threading.Lock()
        self.got, self.sent = [], 0
        self.closed = None
        self.stun = queue.Queue()
        self.stop_tx = threading.Event()
        self.stop_rx = threading.Event()
        self.sock.settimeout(0.1)
        self.rx = threading.Thread(target=self._rx, daemon=True)
        self.rx.start()
        self.tx = threading.Thread(target=self._tx, daemon=True)
        self.tx.start()

    def write(self, data):
        with self.wlock:
            self.sock.sendall(data)

    def _tx(self):
        send_paced(self, lambda n: self.write(
            channel_data(CHANNEL, b"C" + struct.pack("!I", n) + b"c" * 59)))

    def _rx(self):
        read_stream(self, lambda data: file_frames(self, data))

    def refresh(self, lifetime=600):
        return call_refresh(self, self.write, lifetime)

    def stop(self):
        self.stop_tx.set()
        self.tx.join(5)

    def close(self):
        self.stop_tx.set()
        self.stop_rx.set()
        self.sock.close()


def counter(stats, name):
    """A counter of `turngatectl stats` (summed over the slots)."""
    return stats["counters"][name]


def test_tcp_call_survives_upgrades(d):
    workers = 2
    port = free_port(avoid=RELAY)
    text = config(d, [("tcp", port, "TURN-TCP", ["peers"]), ("udp", port, "TURN-UDP",
                                                             ["peers"])],
                  {"peers": ["127.0.0.1"]}, workers=workers, relay=RELAY)
    daemon = Daemon(d, text, workers=workers).start()
    peer, call, pid = UdpPeer(), None, None
    try:
        ctl = StreamClient(port)
        r = ctl.allocate()
        relayed = ctl.relayed(r)[0]
        check(error_code(ctl.perm("127.0.0.1", peer.port)[3]) is None, "CreatePermission")
        check(error_code(ctl.bind("127.0.0.1", peer.port, CHANNEL)[3]) is None,
              "ChannelBind")
        # A partial frame in the worker's input buffer across an upgrade: the first 10
        # bytes of a ChannelData before it (the worker reads them and waits for the
        # rest), the rest after; the peer gets the datagram once, whole.
        half = b"H" + b"h" * 63
        frame = struct.pack("!HH", CHANNEL, len(half)) + half
        ctl.sock.sendall(frame[:10])
        wait_for(lambda: read_by_server(ctl.sock), "the worker to read the frame's head",
                 timeout=30)
        pid = upgrade(daemon, workers)
        ctl.sock.sendall(frame[10:])
        wait_for(lambda: peer.halves, "the frame split by the upgrade at the peer",
                 timeout=10)
        call = StreamCall(ctl)
        peer.start_tx(relayed)
        wait_for(lambda: len(peer.got) >= 20 and len(call.got) >= 20, "relaying both ways",
                 timeout=10)
        for i in range(UPGRADES):
            pid = upgrade(daemon, workers)
            n_peer, n_call = len(peer.got), len(call.got)
            # Both directions go on through the new workers before the next upgrade.
            wait_for(lambda: len(peer.got) > n_peer + 10 and len(call.got) > n_call + 10,
                     "relaying after upgrade %d%s" % (i + 1, " (%s)" % call.closed
                                                       if call.closed else ""),
                     timeout=10)
            check(call.closed is None, "upgrade %d: %s" % (i + 1, call.closed))
        call.stop()
        peer.stop_tx.set()
        peer.tx.join(5)
        peer.check_all(call.sent)
        try:
            wait_for(lambda: len(call.got) >= peer.sent or call.closed,
                     "every datagram at the client", timeout=10)
        except Failure:
            pass    # the check below says what is missing
        check(call.closed is None, "the connection: %s" % call.closed)
        got = call.got
        check(got == list(range(peer.sent)),
              "peer -> client: %d sent, %d received, first difference at %r" %
              (peer.sent, len(got), next((k for k, v in enumerate(got) if v != k),
                                         None)))
        print("%d upgrades: client -> peer %d sent, peer -> client %d sent, all received "
              "once in order" % (UPGRADES, call.sent, peer.sent))
        check(peer.halves == [b"H" + b"h" * 63], "the split frame: %r" % (peer.halves,))
        check(call.refresh() is None, "Refresh after the upgrades")
        st = daemon.admin({"cmd": "stats"})
        check(counter(st, "stream_handovers") == 2 * (UPGRADES + 1) and
              counter(st, "stream_handovers_ended") == 0,
              "the connection and its relay socket handed over per upgrade: %r" % (st,))
        allocs = daemon.admin({"cmd": "allocations"})["allocations"]
        check(len(allocs) == 1 and allocs[0]["relay"].endswith(":%d" % relayed[1]),
              "the same allocation: %r" % (allocs,))
        check(call.refresh(0) is None, "Refresh 0")
        wait_for(lambda: daemon.admin({"cmd": "allocations"})["allocations"] == [],
                 "the allocation to end")
    finally:
        teardown(daemon, pid, call, peer)
    daemon.scan()


class DataStream:
    """An RFC 6062 data connection to an echo peer: a sender of numbered 16-byte records
    every PERIOD and a reader that checks the echo is exactly what was sent."""

    def __init__(self, dc):
        self.dc = dc
        self.sock = dc.sock
        self.sent, self.echoed, self.closed = 0, 0, None
        self.rx_buf = dc.buf
        self.stop_tx = threading.Event()
        self.stop_rx = threading.Event()
        self.sock.settimeout(0.1)
        self.rx = threading.Thread(target=self._rx, daemon=True)
        self.rx.start()
        self.tx = threading.Thread(target=self._tx, daemon=True)
        self.tx.start()

    @staticmethod
    def record(n):
        return struct.pack("!IIQ", 0x5EC0D00D, n, n * 2654435761)

    def _tx(self):
        send_paced(self, lambda n: self.sock.sendall(self.record(n)))

    def _rx(self):
        read_stream(self, self._echoes)

    def _echoes(self, data):
        self.rx_buf += data
        while len(self.rx_buf) >= 16:
            rec, self.rx_buf = self.rx_buf[:16], self.rx_buf[16:]
            if rec != self.record(self.echoed):
                self.closed = self.closed or "record %d: got %r" % (self.echoed, rec)
                return False
            self.echoed += 1
        return True

    def close(self):
        self.stop_tx.set()
        self.stop_rx.set()
        self.sock.close()


def test_rfc6062_call_survives_upgrades(d):
    """An RFC 6062 allocation through five upgrades: its control connection, a bound data
    connection echoing numbered records at a fixed rate through a TCP peer (every byte
    back once and in order: no gap may lose any), and a second peer connection that was
    connected but not yet bound, which binds after the upgrades."""
    workers = 2
    port = free_port(avoid=RELAY)
    text = config(d, [("tcp", port, "TURN-TCP", ["peers"]), ("udp", port, "TURN-UDP",
                                                             ["peers"])],
                  {"peers": ("TCP", ["127.0.0.1"])}, workers=workers, relay=RELAY)
    daemon = Daemon(d, text, workers=workers).start()
    peer, peer2, stream, pid = TcpPeer("127.0.0.1"), TcpPeer("127.0.0.1"), None, None
    try:
        ctl = StreamClient(port)
        r = ctl.allocate_tcp()
        relayed = ctl.relayed(r)[0]
        cid = ctl.connect("127.0.0.1", peer.port)
        stream = DataStream(open_data(port, ctl.creds(), cid))
        cid2 = ctl.connect("127.0.0.1", peer2.port)   # connected, bound after the upgrades
        wait_for(lambda: stream.echoed >= 20, "echoes before the upgrades", timeout=10)
        for i in range(UPGRADES):
            pid = upgrade(daemon, workers)
            n = stream.echoed
            wait_for(lambda: stream.echoed > n + 10 or stream.closed,
                     "echoes after upgrade %d" % (i + 1), timeout=10)
            check(stream.closed is None, "upgrade %d: %s" % (i + 1, stream.closed))
        stream.stop_tx.set()
        stream.tx.join(5)
        wait_for(lambda: stream.echoed == stream.sent or stream.closed,
                 "every record back (%d of %d)" % (stream.echoed, stream.sent), timeout=10)
        check(stream.closed is None, "the data connection: %s" % stream.closed)
        print("%d upgrades: RFC 6062 data connection: %d records sent, all echoed once in "
              "order" % (UPGRADES, stream.sent))
        # Per upgrade: the control connection, the listening relay socket, two peer
        # connections, one data connection.
        st = daemon.admin({"cmd": "stats"})
        check(counter(st, "stream_handovers") == 5 * UPGRADES and
              counter(st, "stream_handovers_ended") == 0,
              "five sockets handed over per upgrade: %r" % (st["counters"],))
        check(len(peer.sources) == 1 and tuple(peer.sources[0]) == tuple(relayed),
              "one peer connection from the relayed address: %r" % (peer.sources,))
        # The peer connection that waited for its bind through the upgrades.
        dc2 = open_data(port, ctl.creds(), cid2)
        payload = os.urandom(4096)
        dc2.sock.sendall(payload)
        check(dc2.recv_exact(len(payload)) == payload, "echo on the late-bound connection")
        dc2.close()
        r = ctl.request(REFRESH, [(A_LIFETIME, struct.pack("!I", 600))])
        check(error_code(r[3]) is None, "Refresh: %r" % (error_code(r[3]),))
        allocs = daemon.admin({"cmd": "allocations"})["allocations"]
        check(len(allocs) == 1 and allocs[0]["relay"].endswith(":%d" % relayed[1]),
              "the same allocation: %r" % (allocs,))
        ctl.close()
    finally:
        teardown(daemon, pid, stream, peer, peer2)
    daemon.scan()


def test_output_buffer_handed_over(d):
    """What the worker had queued for a TURN-TCP client that does not read goes to the new
    worker with the connection: the peer sends 5000 numbered 1000-byte datagrams while
    the client reads nothing (its small receive buffer and the kernel's send buffer fill,
    then the worker's 256 KiB output buffer, and what does not fit is dropped and counted
    as a send error), then the upgrade, then the client reads: every datagram that was
    not dropped, once and in order. The old worker's log line says how many bytes it
    handed over (not 0: the output buffer was really in use)."""
    workers = 1
    port = free_port(avoid=RELAY)
    text = config(d, [("tcp", port, "TURN-TCP", ["peers"]), ("udp", port, "TURN-UDP",
                                                             ["peers"])],
                  {"peers": ["127.0.0.1"]}, workers=workers, relay=RELAY)
    daemon = Daemon(d, text, workers=workers).start()
    peer, pid, n = UdpPeer(), None, 5000
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        ctl = StreamClient(port, sock=s)
        relayed = ctl.relayed(ctl.allocate())[0]
        check(error_code(ctl.bind("127.0.0.1", peer.port, CHANNEL)[3]) is None,
              "ChannelBind")
        for i in range(n):
            peer.sock.sendto(b"P" + struct.pack("!I", i) + b"p" * 995, relayed)
            if i % 50 == 49:
                time.sleep(0.005)
        time.sleep(0.5)
        pid = upgrade(daemon, workers)
        # The worker queues a whole frame or drops it (a full 256 KiB buffer, counted as
        # a send error): the client's kernel buffers and the worker's held the first
        # n - dropped, which must all arrive, once and in order.
        dropped = counter(daemon.admin({"cmd": "stats"}), "err_send")
        # Kept: at least what fills the output buffer (1004-byte frames); the kernel's
        # send buffer holds at most 256 KiB more (WK_TCP_SNDBUF), so most are dropped.
        check(0 < dropped <= n - 256 * 1024 // 1004,
              "frames dropped by the full output buffer: %d of %d" % (dropped, n))
        got = []
        s.settimeout(10)
        while len(got) < n - dropped:
            try:
                data = s.recv(65536)
            except socket.timeout:
                break   # fewer than n: the check below says how many
            check(data, "EOF after %d of %d" % (len(got), n))
            for f in ctl.feed(data):
                cd = channel_payload(f)
                check(cd is not None, "a STUN message among the datagrams: %r" % (parse(f),))
                got.append(struct.unpack("!I", cd[1][1:5])[0])
        time.sleep(0.2)     # nothing more may come
        s.setblocking(False)
        try:
            extra = s.recv(65536)
        except BlockingIOError:
            extra = b""
        check(ctl.buf == b"" and extra == b"", "more than the kept datagrams came")
        check(got == list(range(n - dropped)),
              "%d received of %d kept, first difference at %r" % (
                  len(got), n - dropped,
                  next((k for k, v in enumerate(got) if v != k), None)))
        out = [int(x.split(", ")[1].split(" out")[0]) for x in daemon.stderr().splitlines()
               if "stream connections handed over" in x for x in [x.split("bytes in")[1]]]
        check(out and out[0] > 0, "the worker's output buffer was empty at the hand-over: "
              "%r" % (out,))
        print("output buffer handed over: %d bytes; %d datagrams kept (%d dropped by the "
              "full buffer before the upgrade), all once and in order"
              % (out[0], n - dropped, dropped))
        ctl.close()
    finally:
        teardown(daemon, pid, peer)
    daemon.scan()


def test_failed_upgrade_gives_them_back(d):
    """An upgrade that fails after the old workers handed their connections over (the new
    binary's configuration names a listener on a port the test holds): the old master
    gives the TURN-TCP connection back to its own new workers and the call relays on."""
    workers = 2
    port = free_port(avoid=RELAY)
    held = held_socket(RELAY, (port,))
    listeners = [("tcp", port, "TURN-TCP", ["peers"]), ("udp", port, "TURN-UDP", ["peers"])]
    text = config(d, listeners, {"peers": ["127.0.0.1"]}, workers=workers, relay=RELAY)
    daemon = Daemon(d, text, workers=workers).start()
    peer, call = UdpPeer(), None
    try:
        ctl = StreamClient(port)
        ctl.allocate()
        check(error_code(ctl.bind("127.0.0.1", peer.port, CHANNEL)[3]) is None,
              "ChannelBind")
        call = StreamCall(ctl)
        wait_for(lambda: len(peer.got) >= 10, "relaying", timeout=10)
        failed_upgrade(daemon, d, text, listeners, held, workers, RELAY)
        n = len(peer.got)
        wait_for(lambda: len(peer.got) > n + 20 or call.closed,
                 "relaying after the failed upgrade", timeout=10)
        call.stop()
        peer.check_all(call.sent)
        check(call.closed is None, "the connection: %s" % call.closed)
        check(call.refresh() is None, "Refresh after the failed upgrade")
    finally:
        if call is not None:
            call.close()
        peer.close()
        held.close()
        daemon.stop()
    check("upgrade failed" in daemon.stderr(), "no failed upgrade in the log")


if __name__ == "__main__":
    run_tests([test_tcp_call_survives_upgrades, test_rfc6062_call_survives_upgrades,
               test_output_buffer_handed_over, test_failed_upgrade_gives_them_back])
