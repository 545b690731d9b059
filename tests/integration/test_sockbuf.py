"""Socket buffers of a real turngated (docs/performance.md, docs/relay.md): the UDP listener
sockets ask for 4 MiB and the relay sockets for 1 MiB of receive and send buffer; TURN-TCP
and TURN-TLS connections are bounded at 256 KiB of send buffer, where autotuning gave a
client that never reads up to 4 MiB (net.ipv4.tcp_wmem) each; both sockets of an RFC 6062
pair at the larger of 256 KiB and limits.tcp_buffer of receive and send buffer, where the
receive buffer grew toward net.ipv4.tcp_rmem's maximum, through the plain options, so that
net.core.[rw]mem_max caps them even with CAP_NET_ADMIN. Read back with `ss -m` (iproute2): the
kernel reports twice the granted size, and grants UDP sockets without CAP_NET_ADMIN and TCP
sockets always at most net.core.[rw]mem_max, so the check is against what this host
permits."""
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (SUCCESS, Daemon, Peer, StreamClient, TcpPeer, check,  # noqa: E402
                           config_yaml, free_port, hostport, run_tests, tls_connect)
from test_metrics import SECRET, exact_client  # noqa: E402
from test_tcp_relay import open_data, tls_tcp_config  # noqa: E402

MIB = 1024 * 1024


def sysctl(name):
    with open("/proc/sys/net/core/" + name) as f:
        return int(f.read())


def skmem(port):
    """(rb, tb) of every UDP socket bound to 127.0.0.1:port."""
    out = subprocess.run(["ss", "-uanmH", "sport = :%d" % port], capture_output=True,
                         text=True, timeout=10, check=True).stdout
    return [(int(a), int(b)) for a, b in re.findall(r"rb(\d+),t\d+,tb(\d+)", out)]


def want(req, limit):
    """Lowest size the kernel may report: 2 x the request, capped by the sysctl unless
    FORCE worked (then more, which also passes)."""
    return 2 * min(req, limit)


def start(d):
    """A daemon with one TURN-UDP listener and two workers; returns (port, daemon)."""
    check(shutil.which("ss") is not None, "ss missing: install the Debian package iproute2")
    # test_buffers_after_takeover's restart binds the listener and the relay port again:
    # both below the kernel's port-0 range, where no socket bound to port 0 meanwhile (a
    # test beside this one) can hold one. Relay ports 28300-28399: no other test's.
    port = free_port(late=True)
    text = config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")], workers=2,
                       secret=SECRET,
                       extra_admin="  relay_port_min: 28300\n  relay_port_max: 28399\n")
    return port, Daemon(d, text, workers=2).start()


def test_buffers(d):
    port, daemon = start(d)
    try:
        rmax, wmax = sysctl("rmem_max"), sysctl("wmem_max")
        lst = skmem(port)
        check(len(lst) == 2, "expected one listener socket per worker, got %r" % lst)
        for rb, tb in lst:
            check(rb >= want(4 * MIB, rmax) and tb >= want(4 * MIB, wmax),
                  "listener buffers %d/%d below 4 MiB (rmem_max %d)" % (rb, tb, rmax))
        c = exact_client(port)
        c.challenge()
        _, rport = c.relayed(c.allocate())[0]
        rel = skmem(rport)
        check(len(rel) == 1, "relay socket not found: %r" % rel)
        rb, tb = rel[0]
        check(rb >= want(MIB, rmax) and tb >= want(MIB, wmax),
              "relay buffers %d/%d below 1 MiB (rmem_max %d)" % (rb, tb, rmax))
        c.release()
        daemon.stop()
    finally:
        if daemon.proc.poll() is None:
            daemon.kill()


def test_buffers_after_takeover(d):
    """A restart's new worker binds the adopted relay socket first and sets its buffers
    once it has adopted everything (worker/adopt.c): they still end at 1 MiB."""
    port, daemon = start(d)
    try:
        rmax, wmax = sysctl("rmem_max"), sysctl("wmem_max")
        c = exact_client(port)
        c.challenge()
        _, rport = c.relayed(c.allocate())[0]
        daemon.kill()           # SIGKILL to the master; its workers leave the record LIVE
        deadline = time.monotonic() + 10
        while skmem(rport) and time.monotonic() < deadline:
            time.sleep(0.05)
        daemon.start()
        deadline = time.monotonic() + 10
        rel = []
        while time.monotonic() < deadline:
            rel = skmem(rport)
            if len(rel) == 1 and rel[0][0] >= want(MIB, rmax) and rel[0][1] >= want(MIB, wmax):
                break
            time.sleep(0.05)
        check(len(rel) == 1, "adopted relay socket not found: %r\n%s" % (rel, daemon.stderr()))
        rb, tb = rel[0]
        check(rb >= want(MIB, rmax) and tb >= want(MIB, wmax),
              "adopted relay buffers %d/%d below 1 MiB (rmem_max %d)" % (rb, tb, rmax))
        check("1 adopted" in daemon.stderr(), "no adoption:\n" + daemon.stderr())
        c.release()
        daemon.stop()
    finally:
        if daemon.proc.poll() is None:
            daemon.kill()


# ---- stream send buffers -------------------------------------------------------------------

SNDBUF = 256 * 1024     # worker/wk.h: WK_TCP_SNDBUF, the size of WK_TCP_OUT_MAX
CHUNK = 60000           # ChannelData payload pushed through the echo peer


def stream_tb_max():
    """The largest skmem tb a bounded stream socket may show: twice the request, which the
    plain SO_SNDBUF caps at net.core.wmem_max."""
    return 2 * min(SNDBUF, sysctl("wmem_max"))


def tcp_skmem(local, remote):
    """skmem {r, rb, t, tb, f, w, o, bl, d} of the established loopback TCP socket from port
    local to port remote (the server's side of a connection)."""
    out = subprocess.run(["ss", "-tnmH", "state", "established",
                          "( sport = :%d and dport = :%d )" % (local, remote)],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    found = re.findall(r"skmem:\(([^)]*)\)", out)
    check(len(found) == 1, "socket :%d -> :%d not found: %r" % (local, remote, out))
    return {k: int(v) for k, v in re.findall(r"([a-z]+)(\d+)", found[0])}


def full(mem):
    """The send queue holds at least half of what the bound lets it: the socket was pushed
    to its bound, not measured idle."""
    return mem["w"] >= stream_tb_max() // 2


def bounded(what, mem):
    print("%s: skmem tb %d, queued w %d (bound %d)" % (what, mem["tb"], mem["w"],
                                                        stream_tb_max()))
    check(mem["tb"] <= stream_tb_max(),
          "%s: send buffer tb %d above %d: %r" % (what, mem["tb"], stream_tb_max(), mem))
    check(full(mem), "%s: send queue %d never filled (tb %d): the test pushed too little"
          % (what, mem["w"], mem["tb"]))


def err_send(daemon):
    return daemon.admin({"cmd": "stats"})["counters"]["err_send"]


def turn_stream_fills(daemon, c, port, chan):
    """Pushes ChannelData through the echo peer on c, which never reads, until the server's
    socket toward c has a full send queue and the worker dropped what its own output
    buffer could not take (err_send). Returns that socket's skmem."""
    cport = c.sock.getsockname()[1]
    payload = b"x" * CHUNK
    c.sock.settimeout(10)       # the server reads on: a write waits briefly at most
    mem, err0 = tcp_skmem(port, cport), err_send(daemon)
    for _ in range(40):            # at most 40 x 16 x 60 KB = 38 MB
        for _ in range(16):
            c.channel_data(chan, payload)
        mem = tcp_skmem(port, cport)
        if full(mem) and err_send(daemon) > err0:
            break
    return mem


def relays_again(c, chan):
    """c reads what waits for it (bounded), then a marker goes through the echo and back."""
    for _ in range(5000):
        f = c.frame(1.0)
        if f is None:
            break
    for i in range(5):
        marker = b"after %d " % i + os.urandom(8)
        c.channel_data(chan, marker)
        for _ in range(100):
            f = c.frame(2.0)
            if f is None:
                break
            if f[4:4 + len(marker)] == marker:
                return True
    return False


def one_turn_stream(daemon, c, port, what):
    """On TURN stream c to port: Allocate, a channel to a UDP echo on loopback, checked
    once; then c stops reading while the echo fills the server's socket toward it (the
    bound holds, the worker drops past its own buffer), then c reads and relays again."""
    peer = Peer("127.0.0.1", mode="echo")
    try:
        c.allocate()
        r = c.bind("127.0.0.1", peer.port, 0x4000)
        check(r[1] == SUCCESS, "ChannelBind: %r" % (r,))
        c.channel_data(0x4000, b"first")
        check(c.recv_data(timeout=5.0) == b"first", "%s: no echo" % what)
        bounded(what, turn_stream_fills(daemon, c, port, 0x4000))
        check(relays_again(c, 0x4000), "%s: no echo after reading again" % what)
        me = hostport(c.sock.getsockname())
        check([a for a in daemon.allocations() if a["client"] == me],
              "%s: allocation of %s gone: %r" % (what, me, daemon.allocations()))
    finally:
        peer.close()


def test_stream_sndbuf(d):
    """A TURN-TCP and a TURN-TLS client that never read: the server's socket toward each
    keeps a send buffer of at most 256 KiB (skmem tb 512 KiB; 4 MiB before the bound), its
    send queue full, the frames past the worker's own 256 KiB counted in err_send; then the
    client reads and the allocation relays as before."""
    check(shutil.which("ss") is not None, "ss missing: install the Debian package iproute2")
    why = cannot_fail("tcp_wmem", stream_tb_max())
    if why:
        print("SKIP test_stream_sndbuf: " + why)
        return
    text, tls_port, tcp_port = tls_tcp_config(d)
    daemon = Daemon(d, text).start()
    try:
        c = StreamClient(tcp_port)
        one_turn_stream(daemon, c, tcp_port, "TURN-TCP")
        c.sock.close()
        c = StreamClient(tls_port, sock=tls_connect(tls_port))
        one_turn_stream(daemon, c, tls_port, "TURN-TLS")
        c.sock.close()
    finally:
        daemon.stop()


def push_raw(sock, h, limit):
    """Writes to sock without blocking until 1 s passes without progress (everything
    between here and the far end is full), limit bytes or 30 s; h hashes what went.
    Returns the bytes written."""
    chunk = os.urandom(65536)
    sock.setblocking(False)
    sent, idle, deadline = 0, 0, time.monotonic() + 30
    while sent < limit and idle < 100 and time.monotonic() < deadline:
        try:
            n = sock.send(chunk)
        except BlockingIOError:
            idle += 1
            time.sleep(0.01)
            continue
        h.update(chunk[:n])
        sent += n
        idle = 0
    sock.setblocking(True)
    return sent


def read_back(dc, n, h):
    """Reads n bytes from data connection dc into hash h (60 s at most)."""
    got, deadline = len(dc.buf), time.monotonic() + 60
    h.update(dc.buf)
    dc.buf = b""
    while got < n:
        left = deadline - time.monotonic()
        check(left > 0, "read back %d of %d bytes" % (got, n))
        dc.sock.settimeout(left)
        data = dc.sock.recv(min(1 << 20, n - got))
        check(data, "EOF after %d of %d bytes" % (got, n))
        h.update(data)
        got += len(data)


def fast_phase(dc, n):
    """n bytes through the pair to the echo and back at loopback speed, a thread reading
    as fast as the client writes: while the worker keeps up, Linux autotunes the receive
    buffers of the pair's sockets up (without a bound, toward net.ipv4.tcp_rmem's max)."""
    chunk = os.urandom(1 << 20)
    out, back = hashlib.sha256(), hashlib.sha256()
    t = threading.Thread(target=read_back, args=(dc, n, back), daemon=True)
    t.start()
    for _ in range(n // len(chunk)):
        dc.sock.sendall(chunk)
        out.update(chunk)
    t.join(70)
    check(not t.is_alive() and back.digest() == out.digest(), "fast phase: echo differs")


def pair_max(cap=SNDBUF):
    """The largest skmem tb or rb a socket of an RFC 6062 pair with cap-byte pipe buffers
    may show: twice the larger of WK_TCP_SNDBUF and cap (or less, where
    net.core.[rw]mem_max caps it)."""
    return 2 * max(SNDBUF, cap)


def pair_bounded(what, mem):
    """Both kernel buffers of a stalled pair socket within the pair's bound, its send
    queue full and its receive queue at most the receive buffer."""
    print("%s: skmem rb %d, queued r %d; tb %d, queued w %d (bound %d)"
          % (what, mem["rb"], mem["r"], mem["tb"], mem["w"], pair_max()))
    for buf in ("rb", "tb"):
        check(mem[buf] <= pair_max(), "%s: %s %d above %d: %r"
              % (what, buf, mem[buf], pair_max(), mem))
    # The kernel checks the receive buffer before it queues a segment: one segment (64 KiB
    # on loopback) may go past it.
    check(mem["r"] <= pair_max() + 65536, "%s: %d bytes queued to receive, above %d: %r"
          % (what, mem["r"], pair_max(), mem))
    check(full(mem), "%s: send queue %d never filled (tb %d): the test pushed too little"
          % (what, mem["w"], mem["tb"]))


def tcp_max(name):
    """The maximum (third field) of net.ipv4.tcp_wmem or net.ipv4.tcp_rmem."""
    with open("/proc/sys/net/ipv4/" + name) as f:
        return int(f.read().split()[2])


def cannot_fail(name, bound):
    """Why a bound on buffers cannot be seen to hold on this host: tcp_wmem's (tcp_rmem's)
    maximum at most bound, so autotuning never passes it even without the bound; else
    None."""
    if tcp_max(name) > bound:
        return None
    return ("net.ipv4.%s maximum %d <= the bound %d: autotuning cannot pass the bound on "
            "this host, so the check cannot fail here" % (name, tcp_max(name), bound))


def test_stream_buffers_rfc6062(d):
    """RFC 6062 (Allocate TCP, Connect to a TCP echo, ConnectionBind): first a fast phase
    (32 MB echoed at loopback speed, read as fast as written: the receive buffers
    autotune up while the worker keeps up), then a client that writes on its data
    connection but never reads: the echo's answers fill the server's data connection,
    the echo stops reading and the server's peer connection fills, the pipe stops
    reading both. Both sockets keep their send and receive buffers, and what waits to be
    received, within the pair's bound (2 x 256 KiB), their send queues full; then the
    client reads every byte back, in order, and the pair still relays."""
    check(shutil.which("ss") is not None, "ss missing: install the Debian package iproute2")
    whys = [w for w in (cannot_fail("tcp_wmem", pair_max()), cannot_fail("tcp_rmem", pair_max()))
            if w]
    if len(whys) == 2:
        print("SKIP test_stream_buffers_rfc6062: " + "; ".join(whys))
        return
    for why in whys:
        print("note: test_stream_buffers_rfc6062 runs, but " + why)
    text, _, tcp_port = tls_tcp_config(d)
    peer = TcpPeer("127.0.0.1")
    daemon = Daemon(d, text).start()
    try:
        ctl = StreamClient(tcp_port)
        r = ctl.allocate_tcp()
        rport = ctl.relayed(r)[0][1]
        dc = open_data(tcp_port, ctl.creds(), ctl.connect("127.0.0.1", peer.port))
        dport = dc.sock.getsockname()[1]
        fast_phase(dc, 32 << 20)
        out, back = hashlib.sha256(), hashlib.sha256()
        sent = 0
        for _ in range(5):          # at most 5 x 64 MB
            sent += push_raw(dc.sock, out, 64 << 20)
            dmem, pmem = tcp_skmem(tcp_port, dport), tcp_skmem(rport, peer.port)
            if full(dmem) and full(pmem):
                break
        print("RFC 6062: %d bytes written before the pair stopped taking more" % sent)
        pair_bounded("RFC 6062 data connection", dmem)
        pair_bounded("RFC 6062 peer connection", pmem)
        read_back(dc, sent, back)
        check(back.digest() == out.digest(), "the echo differs from what was sent")
        dc.sock.sendall(b"again")
        check(dc.recv_exact(5) == b"again", "no echo after reading again")
        dc.sock.close()
        ctl.sock.close()
    finally:
        peer.close()
        daemon.stop()


def pair_buffers(d, cap, what):
    """limits.tcp_buffer cap: both sockets of an RFC 6062 pair, the peer connection and the
    data connection (bounded at 256 KiB as a TURN-TCP or TURN-TLS connection until its
    ConnectionBind; over TLS the TCP socket under the bridge), get cap of send and receive
    buffer through the plain options: exactly 2 x min(cap, net.core.[rw]mem_max) (the
    kernel doubles the request, and caps it at the sysctl, whatever the capabilities)."""
    check(shutil.which("ss") is not None, "ss missing: install the Debian package iproute2")
    want = {"tb": 2 * min(cap, sysctl("wmem_max")), "rb": 2 * min(cap, sysctl("rmem_max"))}
    text, tls_port, tcp_port = tls_tcp_config(d)
    peers = [TcpPeer("127.0.0.1") for _ in range(2)]
    daemon = Daemon(d, text + "limits:\n  tcp_buffer: %d\n" % cap).start()
    try:
        ctl = StreamClient(tcp_port)
        rport = ctl.relayed(ctl.allocate_tcp())[0][1]
        dcs = [(tcp_port, open_data(tcp_port, ctl.creds(), ctl.connect("127.0.0.1",
                                                                      peers[0].port)))]
        dc = StreamClient(tls_port, creds=ctl.creds(), sock=tls_connect(tls_port))
        check(dc.connection_bind(ctl.connect("127.0.0.1", peers[1].port)) is None,
              "ConnectionBind over TLS")
        dcs.append((tls_port, dc))
        socks = []
        for (port, dc), peer, kind in zip(dcs, peers, ("TCP", "TLS")):
            dc.sock.sendall(b"ping")
            check(dc.recv_exact(4) == b"ping", "no echo over %s" % kind)
            socks += [("TURN-%s data connection" % kind, port, dc.sock.getsockname()[1]),
                      ("TURN-%s pair's peer connection" % kind, rport, peer.port)]
        for sock, local, remote in socks:
            mem = tcp_skmem(local, remote)
            print("tcp_buffer %s, %s: skmem rb %d, tb %d (want %d, %d)"
                  % (what, sock, mem["rb"], mem["tb"], want["rb"], want["tb"]))
            for buf in ("rb", "tb"):
                check(mem[buf] == want[buf], "%s: %s %d, want %d: %r"
                      % (sock, buf, mem[buf], want[buf], mem))
        for _, dc in dcs:
            dc.close()
        ctl.close()
    finally:
        for peer in peers:
            peer.close()
        daemon.stop()


def test_relay_listener_buffers(d):
    """The listening relay socket of a TCP allocation has the pair's buffers already
    (2 x min(256 KiB, net.core.[rw]mem_max) under the default tcp_buffer), so a peer's
    connection is accepted with them and its SYN-ACK announces a window scale that fits
    them; it had the defaults (net.ipv4.tcp_rmem's), set only after the accept."""
    check(shutil.which("ss") is not None, "ss missing: install the Debian package iproute2")
    want = {"tb": 2 * min(SNDBUF, sysctl("wmem_max")), "rb": 2 * min(SNDBUF, sysctl("rmem_max"))}
    text, _, tcp_port = tls_tcp_config(d)
    daemon = Daemon(d, text).start()
    try:
        ctl = StreamClient(tcp_port)
        rport = ctl.relayed(ctl.allocate_tcp())[0][1]
        out = subprocess.run(["ss", "-ltnmH", "( sport = :%d )" % rport], capture_output=True,
                             text=True, timeout=10, check=True).stdout
        found = re.findall(r"skmem:\(([^)]*)\)", out)
        check(len(found) == 1, "relay listener :%d not found: %r" % (rport, out))
        mem = {k: int(v) for k, v in re.findall(r"([a-z]+)(\d+)", found[0])}
        print("relay listener: skmem rb %d, tb %d (want %d, %d)"
              % (mem["rb"], mem["tb"], want["rb"], want["tb"]))
        check(mem["rb"] == want["rb"] and mem["tb"] == want["tb"],
              "relay listener buffers %r, want %r" % (mem, want))
        ctl.close()
    finally:
        daemon.stop()


def test_pair_follows_tcp_buffer(d):
    """limits.tcp_buffer 1 MiB (above WK_TCP_SNDBUF): the pair's sockets get 1 MiB, so the
    operator who raised it keeps the rate (where net.core.[rw]mem_max allow it)."""
    if 2 * min(sysctl("wmem_max"), sysctl("rmem_max"), MIB) <= pair_max():
        print("SKIP test_pair_follows_tcp_buffer: net.core.[rw]mem_max %d/%d at most "
              "256 KiB: a raised tcp_buffer cannot show here"
              % (sysctl("wmem_max"), sysctl("rmem_max")))
        return
    pair_buffers(d, MIB, "1 MiB")


def test_pair_capped_by_mem_max(d):
    """limits.tcp_buffer at twice net.core.[rw]mem_max: the pair's buffers stop at the
    sysctls, also for a daemon with CAP_NET_ADMIN (as root here), which SO_*BUFFORCE let
    past them (twice as much)."""
    cap = 2 * max(sysctl("wmem_max"), sysctl("rmem_max"))
    if cap > 16 * MIB or os.geteuid() != 0:
        print("SKIP test_pair_capped_by_mem_max: net.core.[rw]mem_max %d/%d above 8 MiB "
              "(tcp_buffer's maximum is 16 MiB), or not root (SO_*BUFFORCE failed anyway)"
              % (sysctl("wmem_max"), sysctl("rmem_max")))
        return
    pair_buffers(d, cap, "%d MiB" % (cap // MIB))


if __name__ == "__main__":
    run_tests([test_buffers, test_buffers_after_takeover, test_stream_sndbuf,
               test_stream_buffers_rfc6062, test_relay_listener_buffers,
               test_pair_follows_tcp_buffer,
               test_pair_capped_by_mem_max])
