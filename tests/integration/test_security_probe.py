"""The hardening probe (issue 35): what the public TURN hardening guides try, written here from
their list of cases, over TURN-UDP, TURN-TCP, TURN-TLS and the RFC 6062 path, against the real
daemon in a network namespace of its own.

The namespace's lo plays a small cluster: the relay's pod address 10.99.0.1 (every listener and
every HTTP endpoint of the daemon), an SFU at 10.99.0.10 (UDP and TCP), a Kubernetes API port on
10.99.0.20, a private host outside the routes at 192.168.50.1, an "external" peer at 10.77.0.5,
and the cloud metadata addresses 169.254.169.254, 100.100.100.200 and fd00:ec2::254. Sinks
listen on each; a leak is a datagram or connection that reaches one of them, or an answer from
the daemon's own ports that comes back through the relay.

Two configurations are probed in one daemon: the media-plane listeners (routes to a UDP
cluster 10.99.0.0/24 and a TCP cluster of the SFU only: the pod CIDR covers the relay's own
address) and the open listeners (STUNner's headless 0.0.0.0/0 and ::/0, UDP and TCP). What must
hold: the SFU and the external peer are reached; loopback, RFC 1918 outside the routes,
link-local, metadata, each in its ::ffff: and other IPv6 disguises, the instance's own listener,
health, metrics and credential API ports, and a TCP port of a pod behind a UDP-only cluster are
refused; an unauthenticated Allocate gets 401 on every transport; a TLS allocation relays. The
coturn CVE classes ride along: loopback through 0.0.0.0 and :: (CVE-2020-26262, over RFC 6062
Connect), IPv4-mapped peers (CVE-2026-27624), SSRF through Connect (CVE-2026-73212). Without
root it SKIPs (exit 77) and says why.
"""
import os
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (ALLOCATE, A_ADDITIONAL_FAMILY, A_TRANSPORT, CLONE_NEWNET,  # noqa: E402
                           REALM, SECRET, Client, Daemon, Peer, StreamClient, TcpPeer, build,
                           check, error_code, free_port, make_cert, relay_range,
                           run_tests_as_root, unshare)

POD, SFU, KUBE, PRIVATE, EXTERNAL = "10.99.0.1", "10.99.0.10", "10.99.0.20", "192.168.50.1", \
    "10.77.0.5"
METADATA4 = ("169.254.169.254", "100.100.100.200")
METADATA6 = ("fd00:ec2::254",)
V4_ADDRS = (POD, SFU, KUBE, PRIVATE, EXTERNAL) + METADATA4
V6_ADDRS = ("fd99::1",) + METADATA6
DUAL = [(A_ADDITIONAL_FAMILY, bytes([2, 0, 0, 0]))]
V6 = [(0x0017, bytes([2, 0, 0, 0]))]   # REQUESTED-ADDRESS-FAMILY IPv6


def own_namespace():
    """This process and its daemon in a new network namespace whose lo holds the cluster."""
    unshare(CLONE_NEWNET)
    for ip in V4_ADDRS:
        subprocess.run(["ip", "addr", "add", ip + "/32", "dev", "lo"], check=True)
    for ip in V6_ADDRS:
        subprocess.run(["ip", "-6", "addr", "add", ip + "/128", "dev", "lo", "nodad"],
                       check=True)


def v6_disguises(ip):
    """The IPv6 forms of an IPv4 address that canonicalisation used to fold onto it."""
    a, b, c, e = (int(x) for x in ip.split("."))
    hi, lo = "%x" % (a << 8 | b), "%x" % (c << 8 | e)
    return ["::ffff:" + ip, "::%s:%s" % (hi, lo), "64:ff9b::%s:%s" % (hi, lo),
            "64:ff9b:1::%s:%s" % (hi, lo), "2002:%s:%s::1" % (hi, lo)]


def probe_config(d, ports, crt, key):
    """Media-plane listeners mp-* (routes media, media-tcp), open listeners open-* (routes
    open, open-tcp); health, metrics and credential API on the pod address."""
    relay = relay_range()
    text = ("version: v1\nadmin:\n  name: probe\n  loglevel: all:INFO\n  workers: 2\n"
            "  admin_socket: %s/admin.sock\n  drain_timeout: 1\n"
            "  healthcheck_endpoint: \"http://%s:%d\"\n  metrics_endpoint: \"http://%s:%d/metrics\"\n"
            "  credential_api_endpoint: \"http://%s:%d\"\n  credential_api_token: probe-token\n"
            "  relay_port_min: %d\n  relay_port_max: %d\n"
            "auth:\n  type: ephemeral\n  realm: %s\n  credentials:\n    secret: %s\n"
            "listeners:\n" % (d, POD, ports["health"], POD, ports["metrics"], POD,
                              ports["cred"], relay[0], relay[1], REALM, SECRET))
    for name, proto, routes in (("mp-udp", "TURN-UDP", "media, media-tcp"),
                                ("mp-tcp", "TURN-TCP", "media, media-tcp"),
                                ("mp-tls", "TURN-TLS", "media, media-tcp"),
                                ("mp-udponly", "TURN-TCP", "media"),
                                ("open-udp", "TURN-UDP", "open, open-tcp"),
                                ("open-tcp", "TURN-TCP", "open, open-tcp")):
        text += ("  - name: %s\n    protocol: %s\n    address: %s\n    port: %d\n"
                 "    routes: [%s]\n" % (name, proto, POD, ports[name], routes))
        text += "    dual_stack_address: fd99::1\n"
        if proto == "TURN-TLS":
            text += "    cert_file: %s\n    key_file: %s\n" % (crt, key)
    text += "clusters:\n"
    for name, proto, eps in (("media", "UDP", ["10.99.0.0/24"]),
                             ("media-tcp", "TCP", [SFU]),
                             ("open", "UDP", ["0.0.0.0/0", "::/0"]),
                             ("open-tcp", "TCP", ["0.0.0.0/0", "::/0"])):
        text += ("  - name: %s\n    type: STATIC\n    protocol: %s\n    endpoints: [%s]\n"
                 % (name, proto, ", ".join('"%s"' % e for e in eps)))
    return text


class Probe:
    """The daemon, its ports and the sinks of one run."""

    def __init__(self, d):
        crt, key = make_cert(d, "turn.test")
        self.ports = {n: free_port() for n in ("mp-udp", "mp-tcp", "mp-tls", "mp-udponly",
                                               "open-udp", "open-tcp", "health", "metrics",
                                               "cred")}
        # free_port() probes 127.0.0.1; in this namespace nothing else holds ports, so the
        # same numbers are free on the pod address.
        self.daemon = Daemon(d, probe_config(d, self.ports, crt, key)).start()
        self.udp = {ip: Peer(ip) for ip in (SFU, KUBE, PRIVATE, EXTERNAL, "127.0.0.1",
                                                "::1") + METADATA4 + METADATA6}
        self.tcp = {ip: TcpPeer(ip) for ip in (SFU, KUBE, PRIVATE, EXTERNAL, "127.0.0.1",
                                               "::1") + METADATA4 + METADATA6}

    def close(self):
        for s in list(self.udp.values()) + list(self.tcp.values()):
            s.close()
        self.daemon.stop()

    def leaks(self, exclude=()):
        """{sink: what arrived} for every sink but exclude (drained)."""
        out = {}
        for ip, s in self.udp.items():
            got = s.drain(0.2)
            if got and ip not in exclude:
                out["udp " + ip] = got
        for ip, p in self.tcp.items():
            if p.sources and ip not in exclude:
                out["tcp " + ip] = list(p.sources)
        return out


def udp_client(port, server=POD):
    return Client(port, server=server)


def tcp_client(port, creds=None):
    return StreamClient(port, creds=creds, sock=socket.create_connection((POD, port), timeout=5))


def tls_client(port):
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["stun.turn"])
    raw = socket.create_connection((POD, port), timeout=5)
    return StreamClient(port, sock=ctx.wrap_socket(raw))


def refused(c, ip, port):
    """CreatePermission for ip refused (403; 443 where the allocation lacks the family), and a
    Send indication to ip:port delivered nowhere (checked by the caller's sinks)."""
    r = c.perm(ip, port)
    code = error_code(r[3])
    c.send(ip, port, b"leak " + ip.encode())
    return code in (403, 443), code


def stun_binding():
    tid = os.urandom(12)
    return build(1, 0x000, tid, []), tid


def admitted_roundtrip(c, ip, sink):
    """A Send to ip reaches the sink; the sink's answer comes back as data."""
    r = c.perm(ip, sink.port)
    check(error_code(r[3]) is None, "CreatePermission %s: %r" % (ip, error_code(r[3])))
    c.send(ip, sink.port, b"hello " + ip.encode())
    got = sink.drain(2.0, limit=1)
    check(got and got[0][0] == b"hello " + ip.encode(), "%s got %r" % (ip, got))
    sink.sock.sendto(b"answer", got[0][1])
    check(c.recv_data(2.0) == b"answer", "the answer of %s came back" % ip)


def probe_udp_like(p, c, media):
    """The peer cases of one allocation on a UDP, TCP or TLS control connection (UDP relay)."""
    bad = []
    ips = ["127.0.0.1", "::1", "0.0.0.0", "::", "fe80::1", "ff02::1", "224.0.0.1"] + \
        list(METADATA4) + list(METADATA6)
    for v4 in ("127.0.0.1",) + METADATA4 + ((SFU,) if media else ()):
        ips += v6_disguises(v4)
    if media:
        ips += [PRIVATE, EXTERNAL]
    for ip in ips:
        ok, code = refused(c, ip, p.udp.get(ip, p.udp[SFU]).port if ip in p.udp else 80)
        if not ok:
            bad.append("%s admitted (%r)" % (ip, code))
    # The instance's own ports: its TURN listeners answer a Binding request, which would
    # come back through the relay as data.
    for name in ("mp-udp", "open-udp"):
        c.perm(POD, p.ports[name])
        msg, _ = stun_binding()
        c.send(POD, p.ports[name], msg)
        got = c.recv_data(1.0)
        if got is not None:
            bad.append("own listener %s answered through the relay: %r" % (name, got[:20]))
    return bad


def test_udp_tcp_tls_peers(d):
    """Per transport: the admitted peer relays, every refused case gets 403/443 and reaches
    no sink, the instance's own listeners never answer through the relay."""
    p = Probe(d)
    failures = []
    try:
        for name, mk, media in (("mp-udp", udp_client, True), ("mp-tcp", tcp_client, True),
                                ("mp-tls", tls_client, True), ("open-udp", udp_client, False),
                                ("open-tcp", tcp_client, False)):
            c = mk(p.ports[name])
            c.allocate(DUAL, expect="any")
            admitted_roundtrip(c, SFU if media else EXTERNAL, p.udp[SFU if media else EXTERNAL])
            failures += ["%s: %s" % (name, b) for b in probe_udp_like(p, c, media)]
            c.close()
        leaks = p.leaks()
        check(not leaks and not failures, "sinks reached: %r; %s" % (leaks, "; ".join(failures)))
    finally:
        p.close()


def test_unauthenticated_allocate(d):
    """An Allocate without credentials gets 401 on UDP, TCP and TLS, and no relay address."""
    p = Probe(d)
    try:
        for name, mk in (("mp-udp", udp_client), ("mp-tcp", tcp_client),
                         ("mp-tls", tls_client)):
            c = mk(p.ports[name])
            r = c.request(ALLOCATE, [(A_TRANSPORT, bytes([17, 0, 0, 0]))], auth=False)
            check(error_code(r[3]) == 401, "%s: unauthenticated Allocate got %r"
                  % (name, error_code(r[3])))
            c.close()
    finally:
        p.close()


def http_get_through(dc, host, path):
    dc.sock.sendall(("GET %s HTTP/1.0\r\nHost: %s\r\nAuthorization: Bearer probe-token\r\n\r\n"
                     % (path, host)).encode())
    dc.sock.settimeout(2)
    try:
        return dc.sock.recv(200)
    except OSError:
        return b""


def test_rfc6062_connect(d):
    """RFC 6062 Connect: the SFU's TCP port through the TCP cluster works; a pod's TCP port
    covered only by the UDP cluster, the instance's own health, metrics and credential API
    and TURN ports, loopback through 0.0.0.0 and ::, metadata and RFC 1918 outside the
    routes are refused with 403 before any SYN; a listener whose routes reach no TCP cluster
    refuses a TCP Allocate."""
    p = Probe(d)
    bad = []
    try:
        # The instance's own HTTP really answers on the pod address (so a 403 means refused).
        with urllib.request.urlopen("http://%s:%d/live" % (POD, p.ports["health"]),
                                    timeout=5) as r:
            check(r.status == 200, "health endpoint answers directly")
        for name, fam in (("mp-tcp", ()), ("open-tcp", ()), ("open-tcp", V6)):
            ctl = tcp_client(p.ports[name])
            ctl.allocate_tcp(fam)
            target = SFU if name == "mp-tcp" else EXTERNAL
            if not fam:   # the admitted peer is IPv4
                cid = ctl.connect(target, p.tcp[target].port)
                dc = tcp_client(p.ports[name], ctl.creds())
                check(dc.connection_bind(cid) is None, "%s: ConnectionBind" % name)
                dc.sock.sendall(b"to the peer")
                check(dc.recv_exact(11) == b"to the peer", "%s: echo from %s" % (name, target))
                dc.close()
            own = [(POD, p.ports[k]) for k in ("health", "metrics", "cred", "mp-tcp",
                                                "open-tcp")]
            cases = own + [("0.0.0.0", p.tcp["127.0.0.1"].port),
                           ("::", p.tcp["::1"].port), ("127.0.0.1", p.tcp["127.0.0.1"].port),
                           ("::ffff:127.0.0.1", p.tcp["127.0.0.1"].port)]
            cases += [(ip, p.tcp[ip].port) for ip in METADATA4 + METADATA6]
            cases += [("::ffff:" + ip, p.tcp[ip].port) for ip in METADATA4]
            if name == "mp-tcp":
                cases += [(KUBE, p.tcp[KUBE].port), (PRIVATE, p.tcp[PRIVATE].port),
                          ("::ffff:" + SFU, p.tcp[SFU].port)]
            for ip, port in cases:
                code = ctl.connect(ip, port, expect="any")
                if code not in (403, 443):
                    bad.append("%s: Connect %s:%d got %r" % (name, ip, port, code))
            ctl.close()
        time.sleep(0.5)
        leaks = p.leaks(exclude=(SFU, EXTERNAL))
        if leaks:
            bad.append("sinks reached: %r" % (leaks,))
        # A TURN-TCP listener routed to the UDP cluster only: TCP allocations fail early.
        ctl = tcp_client(p.ports["mp-udponly"])
        r = ctl.request(ALLOCATE, [(A_TRANSPORT, bytes([6, 0, 0, 0]))])
        code = error_code(r[3])
        if code is None:
            bad.append("mp-udponly: TCP Allocate admitted")
            code = ctl.connect(KUBE, p.tcp[KUBE].port, expect="any")
            if code != 403:
                bad.append("mp-udponly: Connect to the Kubernetes API port got %r" % (code,))
        ctl.close()
        time.sleep(0.3)
        check(not p.tcp[KUBE].sources, "the Kubernetes API port accepted %r"
              % (p.tcp[KUBE].sources,))
        check(not bad, "; ".join(bad))
    finally:
        p.close()


if __name__ == "__main__":
    run_tests_as_root([test_udp_tcp_tls_peers, test_unauthenticated_allocate,
                       test_rfc6062_connect],
                      "its own network namespace (the cluster's addresses on lo)",
                      own_namespace)
