"""A peer's transport against its cluster's protocol, and its literal address family
against the cluster's prefixes, through the real daemon (issue 35, findings 1 and 4).

Finding 1: an RFC 6062 Connect reached any TCP port of any address a route covered, even
through a cluster declared `protocol: UDP`. Now a TCP peer (Connect, ConnectionAttempt,
the permissions of a TCP allocation) is admitted only through `protocol: TCP` clusters and
a UDP peer only through UDP ones, also where a UDP and a TCP cluster cover one address; a
TCP Allocate on a listener whose routes reach no TCP cluster is refused at once (403).

Finding 4: an IPv4-only cluster admitted 2002:a2a:32:ffff::1234, 64:ff9b::a2a:32 and
::a2a:32 (matched as 10.42.0.50, sent to the IPv6 address). Now an IPv6 peer matches only
IPv6 prefixes and an IPv4-mapped one (sent by the kernel as IPv4) is always refused.
Every wait is bounded.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_ADDITIONAL_FAMILY, Client, Daemon, Peer, StreamClient,  # noqa: E402
                           TcpPeer, check, config, error_code, free_port, relay_range, run_tests,
                           wait_for)
from test_tcp_relay import open_data  # noqa: E402

DUAL = [(A_ADDITIONAL_FAMILY, bytes([2, 0, 0, 0]))]  # IPv4 + IPv6 relay: no 443 shortcut


def start_proto(d, tcp_peer_port):
    """Listeners on 127.0.0.1: `mixed` (TURN-TCP and TURN-UDP on one port) routes to the
    UDP cluster `media` (all of 127.0.0.1) and the TCP cluster `api` (127.0.0.1 only on
    tcp_peer_port, and 127.0.0.3); `udponly` (TURN-TCP) routes to media alone; `tcponly`
    (TURN-UDP) to api alone. Returns (daemon, ports)."""
    ports = {"mixed": free_port(), "udponly": free_port(), "tcponly": free_port()}
    text = config(d, [("mixed-tcp", ports["mixed"], "TURN-TCP", ["media", "api"]),
                      ("mixed-udp", ports["mixed"], "TURN-UDP", ["media", "api"]),
                      ("udponly", ports["udponly"], "TURN-TCP", ["media"]),
                      ("tcponly", ports["tcponly"], "TURN-UDP", ["api"])],
                  {"media": ("UDP", ["127.0.0.1"]),
                   "api": ("TCP", ["127.0.0.1:<%d-%d>" % (tcp_peer_port, tcp_peer_port),
                                   "127.0.0.3"])},
                  workers=1, relay=relay_range())
    return Daemon(d, text, workers=1).start(), ports


def test_connect_needs_tcp_cluster(d):
    """Connect to a TCP port of 127.0.0.1 that only the UDP cluster covers: 403 and no SYN
    reaches it (on main: connected, as a pod's 6443 was); the port the TCP cluster lists
    connects and relays."""
    ok, hidden = TcpPeer("127.0.0.1"), TcpPeer("127.0.0.1")
    daemon, ports = start_proto(d, ok.port)
    try:
        ctl = StreamClient(ports["mixed"])
        ctl.allocate_tcp()
        code = ctl.connect("127.0.0.1", hidden.port, expect="any")
        check(code == 403, "Connect to a port only a UDP cluster covers: %r" % (code,))
        cid = ctl.connect("127.0.0.1", ok.port)
        wait_for(lambda: len(ok.sources) == 1, "the TCP cluster's peer accepts", timeout=10)
        dc = open_data(ports["mixed"], ctl.creds(), cid)
        dc.sock.sendall(b"ping")
        check(dc.recv_exact(4) == b"ping", "echo through the TCP cluster")
        time.sleep(0.5)  # a SYN would have been accepted long before this
        check(hidden.sources == [], "a TCP connection reached the UDP-only port: %r"
              % (hidden.sources,))
        dc.sock.close()
        ctl.sock.close()
    finally:
        ok.close()
        hidden.close()
        daemon.stop()


def test_tcp_allocate_without_tcp_route(d):
    """A TCP Allocate on a listener whose routes reach no TCP cluster fails at once (403);
    a UDP Allocate on the same TURN-TCP connection still works."""
    daemon, ports = start_proto(d, 9)
    try:
        ctl = StreamClient(ports["udponly"])
        ctl.allocate_tcp(expect=403)
        ctl.allocate()  # UDP relaying over the stream: unaffected
        ctl.sock.close()
        ctl = StreamClient(ports["mixed"])
        ctl.allocate_tcp()
        ctl.sock.close()
    finally:
        daemon.stop()


def test_udp_peer_needs_udp_cluster(d):
    """A UDP allocation on a listener routed only to a TCP cluster: CreatePermission,
    ChannelBind refused and no datagram reaches the peer; through `mixed` (a UDP cluster
    covers 127.0.0.1 too) the same peer is admitted."""
    sink = Peer("127.0.0.3")
    sink1 = Peer("127.0.0.1")
    daemon, ports = start_proto(d, sink1.port)
    c = Client(ports["tcponly"])
    try:
        c.allocate()
        for ip, port in (("127.0.0.3", sink.port), ("127.0.0.1", sink1.port)):
            r = c.perm(ip, port)
            check(error_code(r[3]) == 403, "CreatePermission %s through a TCP cluster: %r"
                  % (ip, error_code(r[3])))
            r = c.bind(ip, port, 0x4001)
            check(error_code(r[3]) == 403, "ChannelBind %s through a TCP cluster: %r"
                  % (ip, error_code(r[3])))
            c.send(ip, port, b"leak")
        check(sink.drain(0.5) == [] and sink1.drain(0.5) == [], "a datagram leaked")
        c.close()
        c = Client(ports["mixed"])
        c.allocate()
        r = c.perm("127.0.0.1", sink1.port)
        check(error_code(r[3]) is None, "UDP cluster peer refused: %r" % (error_code(r[3]),))
        c.send("127.0.0.1", sink1.port, b"hello")
        got = sink1.drain(1.0)
        check([g[0] for g in got] == [b"hello"], "Send through the UDP cluster: %r" % (got,))
        r = c.perm("127.0.0.3", sink.port)  # only the TCP cluster covers it
        check(error_code(r[3]) == 403, "127.0.0.3 admitted for UDP: %r" % (error_code(r[3]),))
    finally:
        c.close()
        sink.close()
        sink1.close()
        daemon.stop()


# IPv6 forms that embed an IPv4 address the IPv4 cluster admits (10.42.0.50, 127.0.0.1).
EMBEDDED = ["2002:a2a:32:ffff::1234", "64:ff9b::a2a:32", "::a2a:32", "::ffff:10.42.0.50",
            "2002:7f00:1::1", "64:ff9b::7f00:1", "::127.0.0.1", "::ffff:127.0.0.1"]


def test_embedded_v4_not_in_v4_cluster(d):
    """An IPv4-only cluster admits its IPv4 addresses and none of their IPv6 forms
    (CreatePermission and ChannelBind 403, nothing sent); a ::/0 cluster beside it does not
    bring the IPv4-mapped forms back."""
    v4sink = Peer("127.0.0.1")
    port, port6 = free_port(), free_port()
    text = config(d, [("v4", port, "TURN-UDP", ["v4"]),
                      ("both", port6, "TURN-UDP", ["v4", "v6"])],
                  {"v4": ["10.42.0.0/16", "127.0.0.1"], "v6": ["::/0"]},
                  workers=1, relay=relay_range())
    daemon = Daemon(d, text, workers=1).start()
    c = Client(port)
    try:
        r = c.allocate(DUAL)
        check(len(c.relayed(r)) == 2, "dual-stack allocation expected: %r" % (c.relayed(r),))
        for ip in ("10.42.0.50", "127.0.0.1"):
            r = c.perm(ip, 9)
            check(error_code(r[3]) is None, "IPv4 %s refused: %r" % (ip, error_code(r[3])))
        for i, ip in enumerate(EMBEDDED):
            r = c.perm(ip, v4sink.port)
            check(error_code(r[3]) == 403, "CreatePermission %s through an IPv4 cluster: %r"
                  % (ip, error_code(r[3])))
            r = c.bind(ip, v4sink.port, 0x4000 + i)
            check(error_code(r[3]) == 403, "ChannelBind %s: %r" % (ip, error_code(r[3])))
            c.send(ip, v4sink.port, b"leak " + ip.encode())
        check(v4sink.drain(0.5) == [], "a datagram leaked to 127.0.0.1")
        c.close()
        c = Client(port6)
        c.allocate(DUAL)
        for ip in ("::ffff:10.42.0.50", "::ffff:127.0.0.1", "64:ff9b::7f00:1"):
            r = c.perm(ip, 9)
            check(error_code(r[3]) == 403, "%s admitted beside ::/0: %r"
                  % (ip, error_code(r[3])))
        r = c.perm("2600::5", 9)  # global unicast (2001:db8::/32 is documentation: special)
        check(error_code(r[3]) is None, "::/0 refused 2600::5: %r" % (error_code(r[3]),))
    finally:
        c.close()
        v4sink.close()
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_connect_needs_tcp_cluster, test_tcp_allocate_without_tcp_route,
               test_udp_peer_needs_udp_cluster, test_embedded_v4_not_in_v4_cluster])
