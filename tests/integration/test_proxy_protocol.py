"""PROXY protocol on TURN-TCP, TURN-TLS and TURN-UDP listeners behind a real HAProxy (#40).

A Debian HAProxy runs in the foreground on loopback ports in tcp mode: one frontend sends
TURN-TCP to turngate with send-proxy-v2, the other is the 443 recipe of docs/production.md
(TLS passthrough routing on ALPN: "stun.turn" to turngate's TURN-TLS listener with
send-proxy-v2, anything else to a dummy HTTPS server). Clients bound to 127.0.0.5 must get
their own address (127.0.0.5:port) in XOR-MAPPED-ADDRESS and in `turngatectl allocations`,
not HAProxy's 127.0.0.1. A header from a source outside `trusted`, a malformed one, none at
all, and a datagram without one are refused and counted; a listener without proxy_protocol
never parses a header. The session records (file) of TCP, TLS and UDP-v2 allocations carry
the client's address; limits.source_connections and the UDP unauth_rate limiter count
it, not the proxy's, and the budget's log line names it. Every wait is bounded; nothing depends on timing for correctness.
"""
import os
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_XOR_MAPPED, BINDING, REQUEST, Client, Daemon,  # noqa: E402
                           Failure, StreamClient, binding_request, build, check, config,
                           free_port, make_cert, need_tool, parse, parse_xor_addr,
                           parse_xor_mapped, peer_socket, relay_range, run_tests, wait_for)
from harness_admin import session_records as records  # noqa: E402

CLIENT_IP = "127.0.0.5"
UNTRUSTED_IP = "127.0.0.7"
V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def v2_header(src, sport, dst, dport, dgram=False):
    fam = 0x12 if dgram else 0x11
    return (V2_SIG + bytes([0x21, fam]) + struct.pack("!H", 12) + socket.inet_aton(src)
            + socket.inet_aton(dst) + struct.pack("!HH", sport, dport))


def pp_block(trusted, versions="[1, 2]"):
    return ("    proxy_protocol:\n      versions: %s\n      trusted: [%s]\n"
            % (versions, ", ".join('"%s"' % t for t in trusted)))


def start_daemon(d, limits=None, workers=2):
    """turngate with pp_tcp, pp_tls, pp_udp (trusted 127.0.0.1), pp_far (trusted 10/8 only)
    and plain (no proxy_protocol): (daemon, {name: port}, (crt, key))."""
    names = [("pp_tcp", "TURN-TCP"), ("pp_tls", "TURN-TLS"), ("pp_udp", "TURN-UDP"),
             ("pp_far", "TURN-TCP"), ("plain", "TURN-TCP")]
    ports = {n: free_port() for n, _ in names}
    text = config(d, [(n, ports[n], p, ["loopback"]) for n, p in names],
                  {"loopback": ["127.0.0.0/8"]}, relay=relay_range(), loglevel="all:DEBUG",
                  limits=limits, workers=workers)
    crt, key = make_cert(d, "turn.test")
    extra = {"pp_tcp": pp_block(["127.0.0.1/32"]),
             "pp_tls": pp_block(["127.0.0.1"]) + "    cert_file: %s\n    key_file: %s\n"
             % (crt, key),
             "pp_udp": pp_block(["127.0.0.0/30"], "[2]"),
             "pp_far": pp_block(["10.0.0.0/8", "192.168.0.0/16"])}
    for name, block in extra.items():
        marker = "  - name: %s\n" % name
        head, tail = text.split(marker, 1)
        first, rest = tail.split("    routes:", 1)
        text = head + marker + first + block + "    routes:" + rest
    text = text.replace("  drain_timeout: 1\n", "  drain_timeout: 1\n  session_records:\n"
                        "    file: %s\n" % os.path.join(d, "sessions.jsonl"), 1)
    return Daemon(d, text, workers=workers).start(), ports, (crt, key)


def record_of(d, listener):
    got = wait_for(lambda: [r for r in records(d) if r["listener"] == listener],
                   "the session record of %s" % listener, 10)
    return got[0]


class Https:
    """The dummy HTTPS backend: answers every request with 'hello from https'."""

    def __init__(self, crt, key):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(crt, key)
        self.ctx.set_alpn_protocols(["http/1.1"])
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while True:
            try:
                c, _ = self.sock.accept()
                c.settimeout(5)
                with self.ctx.wrap_socket(c, server_side=True) as t:
                    t.recv(4096)
                    t.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 16\r\n\r\nhello from https")
            except OSError:
                continue


def start_haproxy(d, ports, https_port):
    """HAProxy in the foreground: {frontend: port}; stopped by the caller."""
    fe = {"tcp": free_port(), "443": free_port(), "far": free_port()}
    cfg = os.path.join(d, "haproxy.cfg")
    with open(cfg, "w") as f:
        f.write("""global
    maxconn 200
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend turn_tcp
    bind 127.0.0.1:%(tcp)d
    default_backend tg_tcp
backend tg_tcp
    server tg 127.0.0.1:%(tg_tcp)d send-proxy-v2
frontend far
    bind 127.0.0.1:%(far)d
    default_backend tg_far
backend tg_far
    server tg 127.0.0.1:%(tg_far)d send-proxy-v2
# The 443 recipe (docs/production.md): TLS passthrough, routed on the ClientHello's ALPN.
frontend port443
    bind 127.0.0.1:%(p443)d
    tcp-request inspect-delay 5s
    tcp-request content accept if { req.ssl_hello_type 1 }
    use_backend tg_tls if { req.ssl_alpn stun.turn }
    default_backend https
backend tg_tls
    server tg 127.0.0.1:%(tg_tls)d send-proxy-v2
backend https
    server web 127.0.0.1:%(https)d
""" % {"tcp": fe["tcp"], "far": fe["far"], "p443": fe["443"], "tg_tcp": ports["pp_tcp"],
       "tg_far": ports["pp_far"], "tg_tls": ports["pp_tls"], "https": https_port})
    log = open(os.path.join(d, "haproxy.log"), "w")
    proc = subprocess.Popen([need_tool("haproxy", "haproxy"), "-db", "-f", cfg],
                            stdout=log, stderr=subprocess.STDOUT)

    def up():
        try:
            socket.create_connection(("127.0.0.1", fe["tcp"]), timeout=1).close()
            return True
        except OSError:
            check(proc.poll() is None, "haproxy exited: %s" % open(log.name).read())
            return False
    wait_for(up, "haproxy listening", 20)
    return proc, fe


def connect(port, src=CLIENT_IP, tls=False, alpn=("stun.turn",)):
    s = socket.socket()
    s.settimeout(5)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    if not tls:
        return s
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.set_alpn_protocols(list(alpn))
    t = ctx.wrap_socket(s, server_hostname="turn.test")
    t.settimeout(5)
    return t


def on_stream(s, fn):
    """fn(the library's StreamClient on stream s); s keeps its timeout."""
    t = s.gettimeout()
    try:
        return fn(StreamClient(0, sock=s))
    finally:
        s.settimeout(t)


def binding(s):
    """XOR-MAPPED-ADDRESS of a Binding over stream s, or None (closed, no answer)."""
    msg, tid = binding_request()
    try:
        s.sendall(msg)
    except OSError:
        return None
    f = on_stream(s, lambda c: c.frame(5.0))
    return parse_xor_mapped(f, tid) if f else None


def allocate(s):
    """An authenticated Allocate over stream s (kept open by the caller): its mapped address."""
    r = on_stream(s, lambda c: c.allocate())
    return parse_xor_addr(r[3][A_XOR_MAPPED][0], r[2])


def closed(s, timeout=5.0):
    """Whether the server closes s (EOF or reset) within timeout, without answering."""
    s.settimeout(timeout)
    try:
        return s.recv(4096) == b""
    except ConnectionResetError:
        return True
    except (socket.timeout, ssl.SSLError, OSError):
        return False


def ctr(daemon, name):
    return daemon.admin({"cmd": "stats"})["counters"].get("proxy_protocol_" + name, 0)


def listing(daemon):
    rc, out, err = daemon.ctl("allocations")
    check(rc == 0, "turngatectl allocations: %s" % err)
    return out


def test_behind_haproxy(d):
    """TURN-TCP and TURN-TLS (the 443 recipe) through HAProxy with send-proxy-v2: the
    client's own address in XOR-MAPPED-ADDRESS (Binding and Allocate) and in the listing;
    HTTPS on the same port still reaches its backend; a proxy outside `trusted` is
    refused. On main the mapped address was HAProxy's and the header broke the framing."""
    daemon, ports, (crt, key) = start_daemon(d)
    https = Https(crt, key)
    hap, fe = start_haproxy(d, ports, https.port)
    keep = []
    try:
        s = connect(fe["tcp"])
        got = binding(s)
        check(got == (CLIENT_IP, s.getsockname()[1]),
              "TCP via haproxy: mapped %r, expected %r" % (got, s.getsockname()))
        check(allocate(s) == (CLIENT_IP, s.getsockname()[1]), "TCP Allocate mapped address")
        keep.append(s)
        t = connect(fe["443"], tls=True)
        check(t.selected_alpn_protocol() in (None, "stun.turn"), t.selected_alpn_protocol())
        got = binding(t)
        check(got == (CLIENT_IP, t.getsockname()[1]),
              "TLS via haproxy: mapped %r, expected %r" % (got, t.getsockname()))
        check(allocate(t) == (CLIENT_IP, t.getsockname()[1]), "TLS Allocate mapped address")
        keep.append(t)
        out = listing(daemon)
        for sock in keep:
            check("%s:%d" % (CLIENT_IP, sock.getsockname()[1]) in out,
                  "listing lacks %r:\n%s" % (sock.getsockname(), out))
        # the session record of each: the client's address, not HAProxy's
        for sock, lst, transport in ((keep[0], "pp_tcp", "tcp"), (keep[1], "pp_tls", "tls")):
            port = sock.getsockname()[1]
            sock.close()
            r = record_of(d, lst)
            check(r["client"] == "%s:%d" % (CLIENT_IP, port) and r["transport"] == transport
                  and r["reason"] == "disconnect", "record %r" % r)
        keep = []
        h = connect(fe["443"], tls=True, alpn=("http/1.1",))
        h.sendall(b"GET / HTTP/1.0\r\n\r\n")
        body = b""
        while True:
            try:
                chunk = h.recv(4096)
            except (OSError, ssl.SSLError):
                break
            if not chunk:
                break
            body += chunk
        check(b"hello from https" in body, "HTTPS behind 443: %r" % body)
        h.close()
        before = ctr(daemon, "rejected_untrusted")
        f = connect(fe["far"])
        check(binding(f) is None, "a proxy outside trusted was served")
        f.close()
        wait_for(lambda: ctr(daemon, "rejected_untrusted") > before, "untrusted counted", 10)
        check(ctr(daemon, "accepted") >= 2, "accepted counter")
    finally:
        for sock in keep:
            sock.close()
        hap.terminate()
        hap.wait(10)
        daemon.stop()


def test_refusals(d):
    """Direct to the proxy_protocol listeners: a header from an untrusted source (127.0.0.7,
    not in 127.0.0.1/32), a malformed header, no header at all (a bare Binding), and a
    version the listener does not take are closed without an answer and counted by reason;
    a header dribbled a byte at a time still works (partial header across reads); one
    never finished is closed at the connection's first deadline (limits.preauth_timeout,
    2 s here) and counted as a timeout."""
    daemon, ports, _ = start_daemon(d, limits={"preauth_timeout": 2})
    try:
        cases = [
            ("untrusted", UNTRUSTED_IP, "pp_tcp", v2_header(CLIENT_IP, 1000, "127.0.0.1", 1)),
            ("malformed", "127.0.0.1", "pp_tcp", b"PROXY TCP4 127.0.0.5 nothere 1 2\r\n"),
            ("malformed", "127.0.0.1", "pp_tls", V2_SIG + b"\x21\x11\x00\x08" + b"\x00" * 8),
            ("missing", "127.0.0.1", "pp_tcp", build(BINDING, REQUEST, os.urandom(12), [])),
        ]
        for reason, src, lst, data in cases:
            before = ctr(daemon, "rejected_" + reason)
            s = connect(ports[lst], src=src)
            s.sendall(data + build(BINDING, REQUEST, os.urandom(12), []))
            check(closed(s), "%s on %s: connection not closed" % (reason, lst))
            s.close()
            wait_for(lambda: ctr(daemon, "rejected_" + reason) > before,
                     "rejected_%s counted" % reason, 10)
        s = connect(ports["pp_tcp"], src="127.0.0.1")
        hdr = b"PROXY TCP4 127.0.0.5 127.0.0.1 4242 3478\r\n"
        for b in hdr:
            s.sendall(bytes([b]))
            time.sleep(0.005)
        check(binding(s) == (CLIENT_IP, 4242), "header sent a byte at a time")
        s.close()
        before = ctr(daemon, "rejected_timeout")
        s = connect(ports["pp_tcp"], src="127.0.0.1")
        s.sendall(V2_SIG[:7])
        check(closed(s, 15.0), "a header never finished: connection not closed")
        s.close()
        wait_for(lambda: ctr(daemon, "rejected_timeout") > before, "rejected_timeout counted",
                 10)
    finally:
        daemon.stop()


class ProxiedSocket:
    """A UDP socket as a v2 proxy's: every datagram sent gets a header for client."""

    def __init__(self, sock, client, port):
        self.sock, self.client, self.port = sock, client, port

    def sendto(self, data, to):
        self.sock.sendto(v2_header(self.client[0], self.client[1], "127.0.0.1", self.port,
                                   dgram=True) + data, to)

    def __getattr__(self, name):
        return getattr(self.sock, name)


def test_udp_v2(d):
    """TURN-UDP with a PROXY v2 header in front of each datagram (crafted here, from the
    trusted 127.0.0.1): the Binding's XOR-MAPPED-ADDRESS is the header's source, the
    response goes back to the sender (the proxy) without a header; a datagram without a
    header, with a v1 header, or from an untrusted source is dropped and counted."""
    daemon, ports, _ = start_daemon(d)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    u.settimeout(2)
    try:
        tid = os.urandom(12)
        u.sendto(v2_header(CLIENT_IP, 5555, "127.0.0.1", ports["pp_udp"], dgram=True)
                 + build(BINDING, REQUEST, tid, []), ("127.0.0.1", ports["pp_udp"]))
        p = parse(u.recv(2048))
        check(p and p[2] == tid, "no Binding response over UDP PROXY v2")
        check(parse_xor_addr(p[3][A_XOR_MAPPED][0], tid) == (CLIENT_IP, 5555),
              "UDP mapped %r" % (parse_xor_addr(p[3][A_XOR_MAPPED][0], tid),))
        # aw2: a LOCAL header of family UNSPEC with an address block (which the spec says
        # to ignore) was refused as malformed; it keeps the sender's own address.
        tid = os.urandom(12)
        u.sendto(V2_SIG + bytes([0x20, 0x00]) + struct.pack("!H", 12)
                 + v2_header(CLIENT_IP, 5555, "127.0.0.1", 1)[16:] + build(BINDING, REQUEST, tid, []), ("127.0.0.1", ports["pp_udp"]))
        p = parse(u.recv(2048))
        check(p and p[2] == tid, "no Binding response behind a LOCAL UNSPEC header")
        check(parse_xor_addr(p[3][A_XOR_MAPPED][0], tid) == u.getsockname(),
              "LOCAL mapped %r" % (parse_xor_addr(p[3][A_XOR_MAPPED][0], tid),))
        # An allocation through the "proxy": its 5-tuple is the header's client (in the
        # listing), relayed data comes back to the proxy's socket without a header.
        echo = peer_socket()
        threading.Thread(target=lambda: [echo.sendto(*echo.recvfrom(4096))
                                         for _ in iter(int, 1)], daemon=True).start()
        c = Client(ports["pp_udp"])
        c.sock.close()
        c.sock = ProxiedSocket(u, (CLIENT_IP, 6666), ports["pp_udp"])
        r = c.allocate()
        check(parse_xor_addr(r[3][A_XOR_MAPPED][0], r[2]) == (CLIENT_IP, 6666),
              "UDP Allocate mapped address")
        out = listing(daemon)
        check("%s:6666" % CLIENT_IP in out, "UDP listing lacks the client:\n" + out)
        check(c.perm("127.0.0.1", echo.getsockname()[1]) is not None, "CreatePermission")
        c.send("127.0.0.1", echo.getsockname()[1], b"ping through the proxy")
        check(c.recv_data(3.0) == b"ping through the proxy", "relayed data back at the proxy")
        check(c.refresh(0) is None, "Refresh 0 through the proxy")
        r = record_of(d, "pp_udp")
        check(r["client"] == "%s:6666" % CLIENT_IP and r["reason"] == "refresh0" and
              r["to_peer"]["packets"] == 1, "UDP record %r" % r)
        for reason, src, data in (
                ("missing", "127.0.0.1", b""),
                ("version", "127.0.0.1", b"PROXY TCP4 127.0.0.5 127.0.0.1 1 2\r\n"),
                ("untrusted", UNTRUSTED_IP, v2_header(CLIENT_IP, 1, "127.0.0.1", 2, True))):
            before = ctr(daemon, "rejected_" + reason)
            x = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            x.bind((src, 0))
            x.settimeout(0.5)
            x.sendto(data + build(BINDING, REQUEST, os.urandom(12), []),
                     ("127.0.0.1", ports["pp_udp"]))
            try:
                x.recv(2048)
                raise Failure("UDP %s: answered" % reason)
            except socket.timeout:
                pass
            x.close()
            wait_for(lambda: ctr(daemon, "rejected_" + reason) > before,
                     "UDP rejected_%s counted" % reason, 10)
    finally:
        u.close()
        daemon.stop()


def test_plain_listener_ignores_header(d):
    """A listener without proxy_protocol never parses a header: a client that sends one
    gets no answer carrying the header's address, its own address in a Binding, and the
    PROXY counters do not move."""
    daemon, ports, _ = start_daemon(d)
    try:
        s = connect(ports["plain"])
        check(binding(s) == (CLIENT_IP, s.getsockname()[1]), "plain listener: own address")
        s.close()
        s = connect(ports["plain"])
        s.sendall(b"PROXY TCP4 192.0.2.9 127.0.0.1 9 9\r\n")
        got = binding(s)
        check(got is None or got[0] != "192.0.2.9", "plain listener parsed a header: %r" % (got,))
        s.close()
        check(ctr(daemon, "accepted") == 0, "a header was accepted on a plain listener")
    finally:
        daemon.stop()


def test_budget_by_client_address(d):
    """limits.source_connections counts the header's client, not the proxy: with a budget
    of 2, three unauthenticated connections from 127.0.0.1 (the trusted proxy) for client
    127.0.0.5 close the oldest of them, logged as source 127.0.0.5; two more for other
    clients through the same proxy are served; no budget line names the proxy. One worker:
    with two, which connection goes depends on where each landed (a worker evicts only its
    own), which is the budget's business, not the address's."""
    daemon, ports, _ = start_daemon(d, limits={"source_connections": 2}, workers=1)
    conns = []
    try:
        def via_proxy(client, sport):
            s = connect(ports["pp_tcp"], src="127.0.0.1")
            s.sendall(("PROXY TCP4 %s 127.0.0.1 %d %d\r\n"
                       % (client, sport, ports["pp_tcp"])).encode())
            conns.append(s)
            return s
        for i in range(3):
            s = via_proxy(CLIENT_IP, 4000 + i)
            check(binding(s) == (CLIENT_IP, 4000 + i), "connection %d of 127.0.0.5" % i)
        check(closed(conns[0], 5.0), "the oldest connection of 127.0.0.5 not evicted")
        for i, other in enumerate(("127.0.0.6", "127.0.0.9")):
            s = via_proxy(other, 5000 + i)
            check(binding(s) == (other, 5000 + i), "%s through the same proxy" % other)
        check(binding(conns[2]) == (CLIENT_IP, 4002), "the newest of 127.0.0.5 closed")
        text = wait_for(lambda: "source %s: budget" % CLIENT_IP in daemon.stderr() and
                        daemon.stderr(), "the budget's log line", 10)
        check("source 127.0.0.1: budget" not in text, "a budget counted the proxy")
        ev = daemon.admin({"cmd": "stats"})["counters"]
        check(sum(v for k, v in ev.items() if k.startswith("budget_evict")) >= 1,
              "no eviction counted: %r" % {k: v for k, v in ev.items() if "budget" in k})
    finally:
        for s in conns:
            s.close()
        daemon.stop()


def test_udp_limiter_by_client_address(d):
    """limits.unauth_rate on a TURN-UDP listener with PROXY v2 limits the header's client,
    not the proxy: through one proxy socket (127.0.0.1, one 4-tuple: one worker), 6 quick
    Bindings for 127.0.0.5 get at most the burst (2) plus what 1 a second refills, and the
    drops are counted; 2 for 127.0.0.6 right after are both answered."""
    daemon, ports, _ = start_daemon(d, limits={"unauth_rate": 1, "unauth_burst": 2,
                                               "unauth_prefix_v4": 32})
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    u.settimeout(0.5)

    def answered(client, n):
        got = 0
        t0 = time.monotonic()
        tids = []
        for i in range(n):
            tid = os.urandom(12)
            tids.append(tid)
            u.sendto(v2_header(client, 7000 + i, "127.0.0.1", ports["pp_udp"], dgram=True)
                     + build(BINDING, REQUEST, tid, []), ("127.0.0.1", ports["pp_udp"]))
        while True:
            try:
                p = parse(u.recv(2048))
            except socket.timeout:
                break
            if p and p[2] in tids:
                check(parse_xor_addr(p[3][A_XOR_MAPPED][0], p[2])[0] == client, "mapped")
                got += 1
        return got, time.monotonic() - t0
    try:
        before = daemon.admin({"cmd": "stats"})["counters"].get("unauth_dropped", 0)
        a, took = answered(CLIENT_IP, 6)
        check(1 <= a <= 2 + int(took) + 1, "127.0.0.5: %d of 6 answered in %.1f s" % (a, took))
        b, _ = answered("127.0.0.6", 2)
        check(b == 2, "127.0.0.6 through the same proxy: %d of 2 answered" % b)
        wait_for(lambda: daemon.admin({"cmd": "stats"})["counters"].get(
            "unauth_dropped", 0) >= before + 6 - a, "the drops counted", 10)
    finally:
        u.close()
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_behind_haproxy, test_refusals, test_udp_v2,
               test_plain_listener_ignores_header, test_budget_by_client_address,
               test_udp_limiter_by_client_address])
