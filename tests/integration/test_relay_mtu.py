#!/usr/bin/python3
"""Relayed datagrams and the path MTU, against the real daemon in a network namespace.

The test re-runs itself under `unshare -n` (root) with the namespace's loopback at MTU 1400,
so datagrams above the MTU exist on loopback. It checks what docs/performance.md promises
of the relay's send path:
- IPv4 datagrams that fit leave with DF set and IP ID 0 (IP_PMTUDISC_DO), as the kernel's
  default would send them apart from the ID; larger ones are fragmented and arrive whole,
  client -> peer (relay socket) and peer -> client (listener socket), unless the allocation
  asked for DONT-FRAGMENT: then they are dropped and smaller ones still pass.
- Bursts of ChannelData that the worker groups into one UDP_SEGMENT send arrive complete and
  in order, whatever their sizes (groups end at a size change, a peer change, a larger
  datagram, another allocation), and the peer counters count every datagram once.
- A peer -> client send that fails (the client's address gone) counts as a send error, not
  as client output.
"""
import os
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Client, Daemon, Peer, check, config, error_code,  # noqa: E402
                           free_port, relay_range, run_tests, wait_equal)

MTU = 1400
A_DONT_FRAGMENT = 0x001A
NS_MARK = "TG_MTU_NETNS"


def enter_netns():
    """Re-executes this test in a fresh network namespace whose loopback has MTU 1400."""
    if os.environ.get(NS_MARK):
        return
    if os.geteuid() != 0:
        print("FAIL test_relay_mtu: needs root for a network namespace (unshare -n)")
        sys.exit(1)
    script = ("ip link set lo up && ip link set lo mtu %d && exec %s %s"
              % (MTU, sys.executable, os.path.abspath(__file__)))
    env = dict(os.environ, **{NS_MARK: "1"})
    sys.exit(subprocess.call(["unshare", "-n", "sh", "-c", script], env=env))


def start(d, workers=1):
    port, mport = free_port(), free_port()
    text = config(d, [("udp", port, "TURN-UDP", ["lo"])], {"lo": ["127.0.0.1"]},
                  workers=workers, relay=relay_range())
    text = text.replace("admin:\n", "admin:\n  metrics_endpoint: \"http://127.0.0.1:%d/metrics\"\n"
                        % mport, 1)
    daemon = Daemon(d, text, workers=workers).start()
    daemon.mport = mport
    return daemon, port


def setup_client(port, peer, channel=0x4000, extra=()):
    c = Client(port)
    c.allocate(extra=list(extra))
    check(error_code(c.perm("127.0.0.1", peer.port)[3]) is None, "CreatePermission failed")
    check(error_code(c.bind("127.0.0.1", peer.port, channel)[3]) is None, "ChannelBind failed")
    return c


def payload(tag, i, size):
    head = struct.pack("!HI", tag, i)
    return (head * (size // len(head) + 1))[:size]


class Capture:
    """IPv4 UDP headers seen on the namespace's loopback (AF_PACKET, root)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
        self.sock.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)    # SO_RCVBUFFORCE
        self.sock.bind(("lo", 0))
        self.sock.setblocking(False)

    def frames(self, dport):
        """[(df, mf, ip_id, total_len)] of IPv4 fragments/datagrams to dport seen so far
        (non-first fragments match by the IP ID of a first fragment to dport)."""
        out, ids = [], set()
        while True:
            try:
                f = self.sock.recv(70000)
            except BlockingIOError:
                return out
            ip = f[14:]
            if len(ip) < 20 or ip[9] != 17:
                continue
            flags = struct.unpack("!H", ip[6:8])[0]
            ip_id = struct.unpack("!H", ip[4:6])[0]
            offset = flags & 0x1FFF
            ihl = (ip[0] & 15) * 4
            if offset == 0 and struct.unpack("!H", ip[ihl + 2:ihl + 4])[0] == dport:
                ids.add(ip_id)
            elif offset == 0 or ip_id not in ids:
                continue
            out.append((bool(flags & 0x4000), bool(flags & 0x2000), ip_id,
                        struct.unpack("!H", ip[2:4])[0]))

    def close(self):
        self.sock.close()


def test_df_and_fragmentation(d):
    daemon, port = start(d)
    peer = Peer("127.0.0.1")
    cap = Capture()
    c = setup_client(port, peer)
    try:
        small, big = payload(1, 0, 1000), payload(1, 1, 3000)
        c.channel_data(0x4000, small)
        c.channel_data(0x4000, big)
        got = peer.drain(3.0, limit=2)
        check([g[0] for g in got] == [small, big],
              "client -> peer: got %r" % [len(g[0]) for g in got])
        frames = cap.frames(peer.port)
        whole = [f for f in frames if not f[1] and f[3] == 1000 + 28]
        check(whole and all(f[0] and f[2] == 0 for f in whole),
              "a datagram that fits leaves with DF and IP ID 0: %r" % frames)
        frags = [f for f in frames if f[1]]
        check(frags and not any(f[0] for f in frags),
              "3000 bytes over MTU %d are fragmented without DF: %r" % (MTU, frames))
        relay = got[0][1]
        # Peer -> client through the listener socket: the same two sizes come back whole.
        peer.sock.sendto(small, relay)
        peer.sock.sendto(big, relay)
        back = [c.recv_data(2.0), c.recv_data(2.0)]
        check(back == [small, big], "peer -> client: got %r"
              % [len(b) if b else b for b in back])
        # Three datagrams of 1390 bytes read in one batch (the worker stopped meanwhile):
        # as ChannelData they are 1394 bytes, too large for one GSO segment at MTU 1400,
        # so the batch goes per datagram and each is retried fragmentable.
        worker = daemon.admin({"cmd": "workers"})["workers"][0]["pid"]
        near = [payload(3, i, 1390) for i in range(3)]
        os.kill(worker, signal.SIGSTOP)
        try:
            for x in near:
                peer.sock.sendto(x, relay)
        finally:
            os.kill(worker, signal.SIGCONT)
        back = [c.recv_data(2.0) for _ in near]
        check(back == near, "peer -> client at the MTU: got %r"
              % [len(b) if b else b for b in back])
        # A Send indication above the MTU takes the same fallback.
        c.send("127.0.0.1", peer.port, big)
        got = peer.drain(3.0, limit=1)
        check([g[0] for g in got] == [big], "Send indication of 3000 bytes not relayed")
    finally:
        cap.close()
        c.close()
        peer.close()
        daemon.stop()


def test_dont_fragment_drops_oversize(d):
    daemon, port = start(d)
    peer = Peer("127.0.0.1")
    c = setup_client(port, peer, extra=[(A_DONT_FRAGMENT, b"")])
    try:
        big, small = payload(2, 0, 3000), payload(2, 1, 1000)
        c.channel_data(0x4000, big)
        c.channel_data(0x4000, small)
        got = peer.drain(1.5, limit=2)
        check([g[0] for g in got] == [small],
              "DONT-FRAGMENT: 3000 bytes must be dropped, 1000 pass; got %r"
              % [len(g[0]) for g in got])
    finally:
        c.close()
        peer.close()
        daemon.stop()


def test_grouped_bursts(d):
    daemon, port = start(d)
    p1, p2 = Peer("127.0.0.1"), Peer("127.0.0.1")
    a = setup_client(port, p1, 0x4000)
    check(error_code(a.perm("127.0.0.1", p2.port)[3]) is None, "CreatePermission p2")
    check(error_code(a.bind("127.0.0.1", p2.port, 0x4001)[3]) is None, "ChannelBind p2")
    b = setup_client(port, p1, 0x4000)
    for sk in (p1.sock, p2.sock):   # the whole burst waits in the peers' buffers (root)
        sk.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)    # SO_RCVBUFFORCE
    cap = Capture()
    try:
        # Sizes chosen to cut groups every way: equal runs, a shorter last one, a larger
        # one after a shorter, one above the GSO segment limit, a peer change, another
        # client, and a run the kernel cannot segment at this MTU.
        plan = [(a, 0x4000, 1200), (a, 0x4000, 1200), (a, 0x4000, 1200), (a, 0x4000, 700),
                (a, 0x4000, 1200), (a, 0x4000, 1300), (a, 0x4000, 2500), (a, 0x4000, 100),
                (a, 0x4001, 100), (a, 0x4001, 100), (a, 0x4000, 100), (b, 0x4000, 1200),
                (b, 0x4000, 1200), (a, 0x4000, 1200), (a, 0x4000, 1),
                # 1390 + 28 > MTU 1400: the kernel refuses the GSO send, each goes alone
                (a, 0x4000, 1390), (a, 0x4000, 1390), (a, 0x4000, 1390)]
        expect = {(id(a), p1.port): [], (id(a), p2.port): [], (id(b), p1.port): []}
        # The worker is stopped while a round is sent, so the round waits in its socket
        # and is read as one batch, the case grouping is for (a burst of video packets).
        worker = daemon.admin({"cmd": "workers"})["workers"][0]["pid"]
        for rnd in range(20):
            os.kill(worker, signal.SIGSTOP)
            try:
                for i, (cl, ch, size) in enumerate(plan):
                    data = payload(rnd, i, size)
                    cl.channel_data(ch, data)
                    expect[(id(cl), p1.port if ch == 0x4000 else p2.port)].append(data)
            finally:
                os.kill(worker, signal.SIGCONT)
        total = sum(len(v) for v in expect.values())
        got1 = p1.drain(5.0, limit=sum(len(expect[k]) for k in expect if k[1] == p1.port))
        got2 = p2.drain(5.0, limit=len(expect[(id(a), p2.port)]))
        # Per 5-tuple order must hold; the two clients' streams may interleave.
        by_src = {}
        for data, src in got1:
            by_src.setdefault(src, []).append(data)
        streams = sorted(by_src.values(), key=len)
        want = sorted([expect[(id(a), p1.port)], expect[(id(b), p1.port)]], key=len)
        check(streams == want, "peer 1: %d datagrams, order or content differs"
              % len(got1))
        check([g[0] for g in got2] == expect[(id(a), p2.port)],
              "peer 2: %d datagrams, order or content differs" % len(got2))
        # Loopback takes UDP_SEGMENT sends whole: a group shows on the wire tap as one
        # unfragmented IP datagram above the MTU (the receiving socket gets it cut).
        supers = [f for f in cap.frames(p1.port) if not f[1] and f[3] > MTU]
        check(len(supers) >= 20, "expected grouped sends to peer 1, saw %d" % len(supers))
        print("grouped sends seen on the tap: %d (sizes %s)"
              % (len(supers), sorted(set(f[3] for f in supers))))
        nbytes = sum(len(x) for v in expect.values() for x in v)
        wait_equal(daemon.mport, {'turngate_peer_packets_total{direction="tx"}': total,
                                  'stunner_cluster_packets_total{name="lo",direction="tx"}':
                                  total,
                                  'stunner_cluster_bytes_total{name="lo",direction="tx"}':
                                  nbytes})
    finally:
        cap.close()
        a.close()
        b.close()
        p1.close()
        p2.close()
        daemon.stop()


def client_out_and_errors(daemon):
    ctr = daemon.admin({"cmd": "stats"})["counters"]
    return ctr["client_pkts_out"], ctr["err_send"]


def test_failed_send_counts_as_error_only(d):
    """Peer -> client datagrams whose send to the client fails count as send errors and not
    as client output (wk_client_sent counts after the send succeeded; the relay batch used
    to count before sendmmsg, so a failed batch counted as sent and as failed). The client
    sits on an address of the namespace's loopback that is deleted once it has allocated:
    the listener's sends then fail with ENETUNREACH."""
    client_ip = "10.77.0.1"
    subprocess.check_call(["ip", "addr", "add", client_ip + "/32", "dev", "lo"])
    daemon, port = start(d)
    peer = Peer("127.0.0.1")
    c = Client(port, bind=client_ip)
    try:
        relay = c.relayed(c.allocate())[0]
        check(error_code(c.perm("127.0.0.1", peer.port)[3]) is None, "CreatePermission failed")
        before = client_out_and_errors(daemon)[0]
        peer.sock.sendto(b"reaches", relay)
        check(c.recv_data(2.0) == b"reaches", "peer -> client before the address goes")
        # The worker counts a datagram to the client after its send returned, which can be
        # after the client read it (this one, and the responses before it): wait until the
        # count has it and holds still, or a late +1 lands between out0 and out1.
        deadline = time.monotonic() + 10.0
        out0 = client_out_and_errors(daemon)[0]
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = client_out_and_errors(daemon)[0]
            if now == out0 and now > before:
                break
            out0 = now
        out0, err0 = client_out_and_errors(daemon)
        subprocess.check_call(["ip", "addr", "del", client_ip + "/32", "dev", "lo"])
        # One batch of three (a UDP_SEGMENT try, then sendmmsg) and one datagram alone.
        worker = daemon.admin({"cmd": "workers"})["workers"][0]["pid"]
        os.kill(worker, signal.SIGSTOP)
        try:
            for i in range(3):
                peer.sock.sendto(payload(5, i, 200), relay)
        finally:
            os.kill(worker, signal.SIGCONT)
        time.sleep(0.3)
        peer.sock.sendto(payload(5, 3, 200), relay)
        deadline = time.monotonic() + 10.0
        while client_out_and_errors(daemon)[1] - err0 < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        out1, err1 = client_out_and_errors(daemon)
        check(err1 - err0 == 4, "send errors: %d, want 4" % (err1 - err0))
        check(out1 == out0, "client_pkts_out grew by %d for sends that failed" % (out1 - out0))
    finally:
        subprocess.call(["ip", "addr", "del", client_ip + "/32", "dev", "lo"],
                        stderr=subprocess.DEVNULL)
        c.close()
        peer.close()
        daemon.stop()


if __name__ == "__main__":
    enter_netns()
    run_tests([test_df_and_fragmentation, test_dont_fragment_drops_oversize,
               test_grouped_bursts, test_failed_send_counts_as_error_only])
