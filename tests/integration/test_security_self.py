"""The instance is never a peer (#35, finding 2), against the real daemon.

Routes that cover the relay's own address (an open 0.0.0.0/0 cluster, an explicit
127.0.0.1 cluster as STUNner's headless self-route would be) must not lead to the
daemon's own sockets: its HTTP endpoints (health, metrics, credential API on 127.0.0.1)
and its TURN listeners are refused through a Send indication, ChannelBind/ChannelData and
an RFC 6062 Connect, and every refusal is counted (perm_denied). A UDP socket on each HTTP
port stands in for what a leak would reach (the HTTP servers hold only the TCP port). An
ordinary peer on another 127.0.0.1 port still works both ways. The short circuit between
this instance's own allocations is tests/integration/test_short_circuit.py. The same for an
interface address of the host (in a network namespace of the test's own, where the
loopback also holds 10.99.0.1) with the health endpoint on the wildcard.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_ADDITIONAL_FAMILY, REQUEST, Client, Daemon, Peer,  # noqa: E402
                           StreamClient, TcpPeer, build, check, config, error_code, free_port,
                           relay_range, run_tests)

BINDING = 0x0001
DUAL = [(A_ADDITIONAL_FAMILY, bytes([2, 0, 0, 0]))]


def start(d):
    ports = {k: free_port() for k in ("udp", "tcp", "health", "metrics", "cred")}
    text = config(d, [("udp", ports["udp"], "TURN-UDP", ["world", "self"]),
                      ("tcp", ports["tcp"], "TURN-TCP", ["tcpworld"])],
                  {"world": ["0.0.0.0/0", "::/0"], "self": ["127.0.0.1", "::1"],
                   "tcpworld": ["0.0.0.0/0", "127.0.0.1"]},
                  relay=relay_range())
    text = text.replace(
        '  healthcheck_endpoint: ""\n',
        '  healthcheck_endpoint: "http://127.0.0.1:%d"\n'
        '  metrics_endpoint: "http://127.0.0.1:%d/metrics"\n'
        '  credential_api_endpoint: "http://127.0.0.1:%d"\n'
        % (ports["health"], ports["metrics"], ports["cred"]))
    # RFC 6062 peers through a TCP cluster (before and after clusters' protocol applies)
    text = text.replace("  - name: tcpworld\n    type: STATIC\n",
                        "  - name: tcpworld\n    type: STATIC\n    protocol: TCP\n")
    return Daemon(d, text).start(), ports


def denied(daemon):
    return daemon.admin({"cmd": "stats"})["counters"].get("perm_denied", 0)


def stun_binding():
    return build(BINDING, REQUEST, os.urandom(12), [])


def test_udp_self_refused(d):
    daemon, ports = start(d)
    http = [ports[k] for k in ("health", "metrics", "cred")]
    sinks = [Peer("127.0.0.1", p) for p in http]
    peer = Peer("127.0.0.1")
    c = Client(ports["udp"])
    try:
        c.allocate(DUAL)
        r = c.perm("127.0.0.1", 9)  # IP only: the explicit 127.0.0.1 endpoint admits it
        check(error_code(r[3]) is None, "CreatePermission 127.0.0.1: %r" % (r,))
        before = denied(daemon)
        for i, port in enumerate(http):
            get = b"GET /api/v1/license HTTP/1.0\r\n\r\n"
            c.send("127.0.0.1", port, get)
            c.send("::ffff:127.0.0.1", port, get)
            r = c.bind("127.0.0.1", port, 0x4000 + i)
            check(error_code(r[3]) == 403, "ChannelBind to own HTTP port %d: %r"
                  % (port, error_code(r[3])))
            c.channel_data(0x4000 + i, get)
        for s in sinks:
            got = s.drain(1.0)
            check(got == [], "a datagram reached own HTTP port %d: %r" % (s.port, got))
        # TURN through its own listener: a Binding request sent to the UDP listener comes
        # back as a Data indication on main.
        c.send("127.0.0.1", ports["udp"], stun_binding())
        r = c.bind("127.0.0.1", ports["udp"], 0x4010)
        check(error_code(r[3]) == 403, "ChannelBind to own listener: %r" % (error_code(r[3]),))
        c.channel_data(0x4010, stun_binding())
        back = c.recv_data(1.0)
        check(back is None, "own listener answered through the relay: %r" % (back,))
        after = denied(daemon)
        check(after - before >= 2 * len(http) + 2,
              "perm_denied %d -> %d: refusals not counted" % (before, after))
        # An ordinary peer on another 127.0.0.1 port: both ways, Send and a channel.
        c.send("127.0.0.1", peer.port, b"hello")
        got = peer.drain(1.0)
        check([g[0] for g in got] == [b"hello"], "ordinary peer: %r" % (got,))
        peer.sock.sendto(b"back", got[0][1])
        check(c.recv_data(1.0) == b"back", "ordinary peer -> client")
        r = c.bind("127.0.0.1", peer.port, 0x4020)
        check(error_code(r[3]) is None, "ChannelBind ordinary peer: %r" % (error_code(r[3]),))
        c.channel_data(0x4020, b"chan")
        check([g[0] for g in peer.drain(1.0)] == [b"chan"], "ChannelData to ordinary peer")
    finally:
        c.close()
        peer.close()
        for s in sinks:
            s.close()
        daemon.stop()


def test_tcp_connect_self_refused(d):
    daemon, ports = start(d)
    ok = TcpPeer("127.0.0.1")
    c = StreamClient(ports["tcp"])
    try:
        c.allocate_tcp()
        before = denied(daemon)
        for k in ("cred", "metrics", "health", "tcp"):
            code = c.connect("127.0.0.1", ports[k], expect="any")
            check(code == 403, "RFC 6062 Connect to own %s port %d: %r" % (k, ports[k], code))
        check(denied(daemon) - before >= 4, "Connect refusals not counted")
        cid = c.connect("127.0.0.1", ok.port, expect="any")
        check(isinstance(cid, bytes) and len(cid) == 4,
              "Connect to an ordinary TCP peer: %r" % (cid,))
    finally:
        c.close()
        ok.stop = True
        daemon.stop()


NS_MARK = "TG_SELF_NETNS"
NS_ADDR = "10.99.0.1"  # an interface address of the namespace, not loopback, not special


def in_netns(case):
    """Runs case in a fresh network namespace (unshare -n, root) whose loopback also holds
    NS_ADDR, so the host's own networks are never touched. Returns True when already
    inside (then run the case), else runs this file there for case and checks it passed."""
    if os.environ.get(NS_MARK) == case:
        return True
    check(os.geteuid() == 0, "%s needs root for a network namespace (unshare -n)" % case)
    script = ("ip link set lo up && ip addr add %s/32 dev lo && exec %s %s %s"
              % (NS_ADDR, sys.executable, os.path.abspath(__file__), case))
    env = dict(os.environ, **{NS_MARK: case})
    rc = subprocess.call(["unshare", "-n", "sh", "-c", script], env=env)
    check(rc == 0, "%s in a network namespace: exit status %d" % (case, rc))
    return False


def test_interface_address_refused(d):
    """The health endpoint on the wildcard: an interface address of the host (not
    loopback: the local addresses the worker reads with getifaddrs) with its port is refused
    through an open route; another port of that address stays a peer. In a network
    namespace of its own."""
    if not in_netns("test_interface_address_refused"):
        return
    ip = NS_ADDR
    port_udp, port_health = free_port(), free_port()
    text = config(d, [("udp", port_udp, "TURN-UDP", ["world"])], {"world": ["0.0.0.0/0"]},
                  relay=relay_range())
    text = text.replace('  healthcheck_endpoint: ""\n',
                        '  healthcheck_endpoint: "http://:%d"\n' % port_health)
    daemon = Daemon(d, text).start()
    sink, peer = Peer(ip, port_health), Peer(ip)
    c = Client(port_udp)
    try:
        c.allocate()
        r = c.perm(ip, 9)
        check(error_code(r[3]) is None, "CreatePermission %s: %r" % (ip, r))
        before = denied(daemon)
        c.send(ip, port_health, b"GET /live HTTP/1.0\r\n\r\n")
        r = c.bind(ip, port_health, 0x4000)
        check(error_code(r[3]) == 403, "ChannelBind %s:%d: %r" % (ip, port_health,
                                                                   error_code(r[3])))
        got = sink.drain(1.0)
        check(got == [], "a datagram reached %s:%d: %r" % (ip, port_health, got))
        check(denied(daemon) - before >= 2, "refusals not counted")
        c.send(ip, peer.port, b"hello")
        check([g[0] for g in peer.drain(1.0)] == [b"hello"], "ordinary peer on %s" % ip)
    finally:
        c.close()
        sink.close()
        peer.close()
        daemon.stop()


if __name__ == "__main__":
    if os.environ.get(NS_MARK):
        run_tests([globals()[os.environ[NS_MARK]]])
    else:
        run_tests([test_udp_self_refused, test_tcp_connect_self_refused,
                   test_interface_address_refused])
