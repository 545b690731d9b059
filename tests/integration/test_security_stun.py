"""Shared TURN client and daemon helpers for the hostile-input tests (not a test by itself).

A minimal RFC 8489/8656 client written for these tests: it builds requests byte by byte so a
test can put attributes where a real client never would (after MESSAGE-INTEGRITY, 10 KB
usernames, disguised peer addresses). Every receive has a timeout and every loop a bound.
"""
import base64
import hashlib
import hmac
import os
import random
import socket
import struct
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import Daemon, Failure, check, free_port  # noqa: E402

REEXPORTED = (Daemon, free_port)  # the tests import the harness through this module

MAGIC = 0x2112A442
SECRET = "sec-s3cret"
REALM = "sec.realm"

# methods
ALLOCATE, REFRESH, SEND, DATA, CREATE_PERMISSION, CHANNEL_BIND = 3, 4, 6, 7, 8, 9
# attributes
A_USERNAME, A_MI, A_ERROR, A_CHANNEL, A_LIFETIME = 0x0006, 0x0008, 0x0009, 0x000C, 0x000D
A_PEER, A_DATA, A_REALM, A_NONCE, A_RELAYED = 0x0012, 0x0013, 0x0014, 0x0015, 0x0016
A_EVEN_PORT, A_TRANSPORT, A_TOKEN, A_XOR_MAPPED = 0x0018, 0x0019, 0x0022, 0x0020
A_ADDITIONAL_FAMILY, A_FINGERPRINT = 0x8000, 0x8028

REQUEST, INDICATION, SUCCESS, ERROR = 0x000, 0x010, 0x100, 0x110


def attr(atype, value):
    pad = (4 - len(value) % 4) % 4
    return struct.pack("!HH", atype, len(value)) + value + b"\0" * pad


def xor_addr(ip, port, tid):
    """XOR-PEER-ADDRESS / XOR-RELAYED-ADDRESS value for ip (v4 or v6 text) and port."""
    xport = port ^ (MAGIC >> 16)
    if ":" in ip:
        raw = socket.inet_pton(socket.AF_INET6, ip)
        key = struct.pack("!I", MAGIC) + tid
        return struct.pack("!BBH", 0, 2, xport) + bytes(a ^ b for a, b in zip(raw, key))
    raw = struct.unpack("!I", socket.inet_aton(ip))[0] ^ MAGIC
    return struct.pack("!BBHI", 0, 1, xport, raw)


def parse_xor_addr(val, tid):
    fam, xport = val[1], struct.unpack("!H", val[2:4])[0]
    port = xport ^ (MAGIC >> 16)
    if fam == 1:
        raw = struct.unpack("!I", val[4:8])[0] ^ MAGIC
        return socket.inet_ntoa(struct.pack("!I", raw)), port
    key = struct.pack("!I", MAGIC) + tid
    raw = bytes(a ^ b for a, b in zip(val[4:20], key))
    return socket.inet_ntop(socket.AF_INET6, raw), port


def build(method, cls, tid, attrs, key=None, after_mi=(), fingerprint=False):
    """A STUN message: attrs [(type, value)], then MESSAGE-INTEGRITY when key is given, then
    the attributes of after_mi (which the server must ignore), then FINGERPRINT."""
    mtype = (method & 0xF) | ((method & 0x70) << 1) | ((method & 0xF80) << 2) | cls
    body = b"".join(attr(t, v) for t, v in attrs)
    if key is not None:
        hdr = struct.pack("!HHI", mtype, len(body) + 24, MAGIC) + tid
        body += attr(A_MI, hmac.new(key, hdr + body, hashlib.sha1).digest())
    body += b"".join(attr(t, v) for t, v in after_mi)
    if fingerprint:
        hdr = struct.pack("!HHI", mtype, len(body) + 8, MAGIC) + tid
        crc = (zlib.crc32(hdr + body) ^ 0x5354554E) & 0xFFFFFFFF
        body += attr(A_FINGERPRINT, struct.pack("!I", crc))
    return struct.pack("!HHI", mtype, len(body), MAGIC) + tid + body


def parse(msg):
    """Returns (method, class, tid, {type: [values]}) or None for anything that is not STUN."""
    if len(msg) < 20:
        return None
    mtype, mlen, magic = struct.unpack("!HHI", msg[:8])
    if magic != MAGIC or mtype & 0xC000 or len(msg) < 20 + mlen:
        return None
    method = (mtype & 0xF) | ((mtype >> 1) & 0x70) | ((mtype >> 2) & 0xF80)
    attrs, pos = {}, 20
    while pos + 4 <= 20 + mlen:
        t, ln = struct.unpack("!HH", msg[pos:pos + 4])
        attrs.setdefault(t, []).append(msg[pos + 4:pos + 4 + ln])
        pos += 4 + ((ln + 3) & ~3)
    return method, mtype & 0x110, msg[8:20], attrs


def error_code(attrs):
    v = attrs.get(A_ERROR, [None])[0]
    return None if v is None else v[2] * 100 + v[3]


def credentials(user="alice", lifetime=3600):
    username = "%d:%s" % (int(time.time()) + lifetime, user)
    pw = base64.b64encode(hmac.new(SECRET.encode(), username.encode(), hashlib.sha1).digest())
    return username, pw.decode()


class Client:
    """One TURN client on one UDP socket (one 5-tuple) against 127.0.0.1:port, from the
    loopback address bind (another /24 than a flood's keeps clear of its rate limit). An
    IPv6 server gets an IPv6 socket (bound to ::1 unless bind says otherwise)."""

    def __init__(self, port, user="alice", server="127.0.0.1", bind=None):
        v6 = ":" in server
        self.server = (server, port)
        self.sock = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((bind or ("::1" if v6 else "127.0.0.1"), 0))
        self.username, self.password = credentials(user)
        self.nonce = None
        self.key = hashlib.md5(("%s:%s:%s" % (self.username, REALM, self.password))
                               .encode()).digest()

    def close(self):
        self.sock.close()

    def transact(self, msg, tid, timeout=2.0, tries=3):
        """Sends msg, returns the parsed response with transaction id tid, or None."""
        for _ in range(tries):
            self.sock.sendto(msg, self.server)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    data = self.sock.recv(70000)
                except socket.timeout:
                    break
                p = parse(data)
                if p and p[2] == tid and p[1] in (SUCCESS, ERROR):
                    return p
        return None

    def request(self, method, attrs, after_mi=(), auth=True):
        """An authenticated request (learning the nonce from a 401/438 first when needed)."""
        for _ in range(3):
            tid = os.urandom(12)
            full = list(attrs)
            key = None
            if auth and self.nonce is not None:
                full += [(A_USERNAME, self.username.encode()), (A_REALM, REALM.encode()),
                         (A_NONCE, self.nonce)]
                key = self.key
            r = self.transact(build(method, REQUEST, tid, full, key, after_mi), tid)
            check(r is not None, "no response to method %d" % method)
            code = error_code(r[3])
            if auth and code in (401, 438) and A_NONCE in r[3] and (
                    key is None or code == 438):
                self.nonce = r[3][A_NONCE][0]
                continue
            return r
        raise Failure("could not authenticate (last %r)" % (r,))

    def allocate(self, extra=(), expect=None):
        """Allocate (UDP). Returns the response; with expect, checks its error code (None =
        success)."""
        r = self.request(ALLOCATE, [(A_TRANSPORT, bytes([17, 0, 0, 0]))] + list(extra))
        if expect != "any":
            check(error_code(r[3]) == expect, "Allocate: expected %r, got %r"
                  % (expect, error_code(r[3])))
        return r

    def relayed(self, r):
        return [parse_xor_addr(v, r[2]) for v in r[3].get(A_RELAYED, [])]

    def perm(self, ip, port=9, after_mi=()):
        return self._peer_request(CREATE_PERMISSION, [], ip, port, after_mi)

    def _peer_request(self, method, extra, ip, port, after_mi=()):
        # XOR-PEER-ADDRESS of IPv6 is XORed with the transaction id: a fresh one per try.
        # after_mi values may be callables of the tid for the same reason.
        for _ in range(3):
            tid = os.urandom(12)
            full = list(extra) + [(A_PEER, xor_addr(ip, port, tid))]
            full += [(A_USERNAME, self.username.encode()), (A_REALM, REALM.encode()),
                     (A_NONCE, self.nonce)]
            post = [(t, v(tid) if callable(v) else v) for t, v in after_mi]
            r = self.transact(build(method, REQUEST, tid, full, self.key, post), tid)
            check(r is not None, "no response to method %d" % method)
            if error_code(r[3]) == 438:
                self.nonce = r[3][A_NONCE][0]
                continue
            return r
        raise Failure("stale nonce loop")

    def bind(self, ip, port, channel):
        return self._peer_request(CHANNEL_BIND, [(A_CHANNEL, struct.pack("!HH", channel, 0))],
                                  ip, port)

    def send(self, ip, port, payload):
        tid = os.urandom(12)
        self.sock.sendto(build(SEND, INDICATION, tid, [(A_PEER, xor_addr(ip, port, tid)),
                                                       (A_DATA, payload)]), self.server)

    def channel_data(self, channel, payload):
        self.sock.sendto(struct.pack("!HH", channel, len(payload)) + payload, self.server)

    def recv_data(self, timeout=1.0):
        """The payload of the next Data indication or ChannelData, or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(70000)
            except socket.timeout:
                return None
            if 0x40 <= data[0] <= 0x7F:
                return data[4:4 + struct.unpack("!H", data[2:4])[0]]
            p = parse(data)
            if p and p[0] == DATA and p[1] == INDICATION:
                return p[3].get(A_DATA, [None])[0]
        return None


def config(d, listeners, clusters, limits=None, workers=2, relay=(54000, 54999),
           loglevel="all:INFO"):
    """Config text: listeners [(name, port, proto, [routes])], clusters {name: [endpoints]}
    (a UDP cluster, the default) or {name: ("TCP" or "UDP", [endpoints])}."""
    text = ("version: v1\nadmin:\n  name: sec\n  loglevel: %s\n  workers: %d\n"
            "  admin_socket: %s/admin.sock\n  drain_timeout: 1\n  healthcheck_endpoint: \"\"\n"
            "  relay_port_min: %d\n  relay_port_max: %d\n"
            "auth:\n  type: ephemeral\n  realm: %s\n  credentials:\n    secret: %s\n"
            "listeners:\n" % (loglevel, workers, d, relay[0], relay[1], REALM, SECRET))
    for name, port, proto, routes in listeners:
        text += ("  - name: %s\n    protocol: %s\n    address: 127.0.0.1\n    port: %d\n"
                 "    routes: [%s]\n" % (name, proto, port, ", ".join(routes)))
    text += "clusters:\n"
    for name, eps in clusters.items():
        cproto = ""
        if isinstance(eps, tuple):
            cproto, eps = "    protocol: %s\n" % eps[0], eps[1]
        text += ("  - name: %s\n    type: STATIC\n%s    endpoints: [%s]\n"
                 % (name, cproto, ", ".join('"%s"' % e for e in eps)))
    if limits:
        text += "limits:\n" + "".join("  %s: %s\n" % kv for kv in limits.items())
    return text


def relay_range():
    """A random one of the shared 1000-port windows 54000, 59000 and 60000 for tests that do
    not count ports (test_relay_tls draws from the same): clear of the windows that one test
    each owns because its daemon must bind the same relay ports again after a kill or a
    restart (50000 test_relay, 51000 test_relay_client, 52000 test_master_traffic, 53000
    test_crash, 55000 test_restart, 56000 test_upgrade, 57000 test_quota.py, 58000 the
    turnutils_uclient interop test), the interop slices (61000..64999) and the
    port-counting windows (65000..65419, and 65420..65515 of test_portpool.py)."""
    lo = random.choice((54000, 59000, 60000))
    return (lo, lo + 999)


def rss_kb(pids):
    """{pid: VmRSS in KiB} from /proc."""
    out = {}
    for pid in pids:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out[pid] = int(line.split()[1])
    return out


def daemon_pids(daemon):
    w = daemon.admin({"cmd": "workers"})
    return [daemon.proc.pid] + [x["pid"] for x in w["workers"]]


class Listener:
    """A UDP socket standing in for a peer (or a service that must not be reached)."""

    def __init__(self, ip, port=0):
        fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_DGRAM)
        self.sock.bind((ip, port))
        self.port = self.sock.getsockname()[1]

    def drain(self, timeout=0.3, limit=1000):
        """Everything that arrives within timeout (at most limit): [(data, addr)]."""
        got = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(got) < limit:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                got.append(self.sock.recvfrom(70000))
            except socket.timeout:
                break
        return got

    def close(self):
        self.sock.close()
