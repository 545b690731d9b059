"""Metrics end to end: a real turngated, TURN driven over loopback by a minimal client in this
file, then the scraped counters must equal what the test did, exactly. Exactness is possible
because every counted event is caused by this test alone (one client, one peer, no
retransmissions: a lost reply fails the test instead of being retried) and every wait for a
counter is bounded and checks equality, never "at least".

Also: a strict Prometheus text-format (0.0.4) check of the whole scrape, the TCP connection
gauge going 1 then 0, the UDP listener counting one socket per worker (STUNner semantics).

/ready before a configuration is serving: turngated refuses to start without a valid
configuration, and the window between the HTTP server starting and the first worker
reporting RUNNING is too short to observe without depending on timing, so it is not tested
here; 503 while draining is tested in test_master_http.py.
"""
import base64
import hashlib
import hmac
import os
import re
import socket
import struct
import sys
import time
import urllib.request
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import Daemon, check, config_yaml, free_port, run_tests  # noqa: E402

MAGIC = 0x2112A442
SECRET = "s3cret"
REALM = "test.realm"
ALLOCATE, REFRESH, SEND_IND, CREATE_PERM = 0x003, 0x004, 0x006, 0x008
A_USERNAME, A_MI, A_ERR, A_PEER, A_DATA, A_REALM, A_NONCE = (0x0006, 0x0008, 0x0009, 0x0012,
                                                              0x0013, 0x0014, 0x0015)
A_RELAYED, A_TRANSPORT, A_LIFETIME, A_FP = 0x0016, 0x0019, 0x000D, 0x8028

# ---- minimal STUN/TURN client (RFC 8489 / 8656) -----------------------------------------


def attr(t, v):
    return struct.pack("!HH", t, len(v)) + v + b"\0" * (-len(v) % 4)


def xor_addr(ip, port):
    x = bytes(a ^ b for a, b in zip(socket.inet_aton(ip), struct.pack("!I", MAGIC)))
    return struct.pack("!BBH", 0, 1, port ^ (MAGIC >> 16)) + x


def build(method, tid, attrs, key=None, cls=0):
    """A request (cls 0) or indication (cls 1); MESSAGE-INTEGRITY when key is given."""
    mtype = ((method & 0xF80) << 2) | ((method & 0x70) << 1) | (method & 0xF)
    mtype |= (0x010 if cls == 1 else 0)
    body = b"".join(attrs)
    if key is not None:
        hdr = struct.pack("!HHI", mtype, len(body) + 24, MAGIC) + tid
        body += attr(A_MI, hmac.new(key, hdr + body, hashlib.sha1).digest())
    msg = struct.pack("!HHI", mtype, len(body) + 8, MAGIC) + tid + body
    fp = (zlib.crc32(msg) ^ 0x5354554E) & 0xFFFFFFFF
    return msg + attr(A_FP, struct.pack("!I", fp))


def parse(msg):
    """(class, method, tid, {type: value}) of a STUN message."""
    check(len(msg) >= 20, "short STUN message")
    mtype, length, magic = struct.unpack("!HHI", msg[:8])
    check(magic == MAGIC and length + 20 == len(msg), "bad STUN header")
    cls = ((mtype >> 7) & 2) | ((mtype >> 4) & 1)
    method = (mtype & 0xF) | ((mtype >> 1) & 0x70) | ((mtype >> 2) & 0xF80)
    attrs, p = {}, 20
    while p + 4 <= len(msg):
        t, n = struct.unpack("!HH", msg[p:p + 4])
        attrs.setdefault(t, msg[p + 4:p + 4 + n])
        p += 4 + n + (-n % 4)
    return cls, method, msg[8:20], attrs


def err_code(attrs):
    e = attrs.get(A_ERR)
    return None if e is None else (e[2] & 7) * 100 + e[3]


def rest_user(user="metrics"):
    name = "%d:%s" % (int(time.time()) + 3600, user)
    pw = base64.b64encode(hmac.new(SECRET.encode(), name.encode(), hashlib.sha1).digest())
    return name, pw.decode()


class Client:
    """One UDP TURN client. Every request is sent once: a lost reply fails the test (a
    retransmission would make the counters inexact)."""

    def __init__(self, port):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.settimeout(5.0)
        self.s.connect(("127.0.0.1", port))
        self.sent = 0
        self.user, self.pw = rest_user()
        self.key = hashlib.md5(("%s:%s:%s" % (self.user, REALM, self.pw)).encode()).digest()
        self.nonce = None

    def send(self, msg):
        self.s.send(msg)
        self.sent += 1

    def request(self, method, attrs, key=None, auth=True):
        tid = os.urandom(12)
        if auth:
            attrs = attrs + [attr(A_USERNAME, self.user.encode()), attr(A_REALM, REALM.encode()),
                             attr(A_NONCE, self.nonce)]
        self.send(build(method, tid, attrs, key if auth else None))
        while True:
            cls, m, rtid, a = parse(self.s.recv(2048))
            if rtid == tid:
                check(m == method, "reply to another method")
                return cls, a

    def challenge(self):
        cls, a = self.request(ALLOCATE, [attr(A_TRANSPORT, b"\x11\0\0\0")], auth=False)
        check(cls == 3 and err_code(a) == 401, "first Allocate not challenged: %r" % (a,))
        self.nonce = a[A_NONCE]

    def allocate(self):
        cls, a = self.request(ALLOCATE, [attr(A_TRANSPORT, b"\x11\0\0\0")], self.key)
        check(cls == 2, "Allocate failed: %r" % err_code(a))
        r = a[A_RELAYED]
        port = struct.unpack("!H", r[2:4])[0] ^ (MAGIC >> 16)
        ip = socket.inet_ntoa(bytes(x ^ y for x, y in zip(r[4:8], struct.pack("!I", MAGIC))))
        return ip, port

    def permission(self, ip):
        cls, a = self.request(CREATE_PERM, [attr(A_PEER, xor_addr(ip, 9))], self.key)
        return 0 if cls == 2 else err_code(a)

    def send_ind(self, ip, port, data):
        self.send(build(SEND_IND, os.urandom(12),
                        [attr(A_PEER, xor_addr(ip, port)), attr(A_DATA, data)], cls=1))

    def release(self):
        cls, _ = self.request(REFRESH, [attr(A_LIFETIME, b"\0\0\0\0")], self.key)
        check(cls == 2, "Refresh(0) failed")


# ---- scraping and the strict exposition check -------------------------------------------

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(r"^(%s)(\{%s(?:,%s)*\})? (\S+)$" % (NAME, LABEL, LABEL))
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


def prom_check(text):
    """Strict text format 0.0.4 as turngate writes it: HELP then TYPE for every family,
    samples contiguous after their family's TYPE, names valid (counters end in _total,
    histograms only _bucket/_sum/_count with le on buckets ending at +Inf), labels escaped,
    values numbers, no duplicate series, final newline. Returns {series: float}."""
    check(text.endswith("\n") and "\0" not in text, "no final newline or NUL inside")
    fams, cur, series, last = {}, None, {}, None
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            name, _, help_ = line[7:].partition(" ")
            check(re.fullmatch(NAME, name) and help_ and name not in fams, "bad HELP: " + line)
            fams[name], cur, last = None, None, name
        elif line.startswith("# TYPE "):
            name, _, typ = line[7:].partition(" ")
            check(name == last and fams[name] is None and typ in TYPES, "bad TYPE: " + line)
            fams[name], cur = typ, name
        elif line.startswith("#"):
            continue
        else:
            m = SAMPLE.match(line)
            check(m and cur is not None, "bad sample or sample outside a family: " + line)
            name, labels, value = m.group(1), m.group(2) or "", m.group(3)
            if fams[cur] == "histogram":
                check(name in (cur + "_bucket", cur + "_sum", cur + "_count"),
                      "bad histogram sample: " + line)
                check(name != cur + "_bucket" or 'le="' in labels, "bucket without le")
            else:
                check(name == cur, "sample outside its family: " + line)
            check(fams[cur] != "counter" or name.endswith("_total"), "counter name: " + line)
            v = float(value)  # raises on a bad value: NaN/+Inf/-Inf parse, garbage does not
            key = name + labels
            check(key not in series, "duplicate series " + key)
            series[key] = v
    check(all(t is not None for t in fams.values()), "family without TYPE")
    for f, t in fams.items():
        if t == "histogram":
            les = [k for k in series if k.startswith(f + "_bucket{")]
            check(les and les[-1].endswith('le="+Inf"}'), "histogram not ending at +Inf")
            vals = [series[k] for k in les]
            check(vals == sorted(vals), "histogram buckets not cumulative")
            check(series[f + '_bucket{le="+Inf"}'] == series[f + "_count"], "+Inf != count")
    return series


def scrape(mport):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=10) as r:
        check(r.status == 200, "scrape status")
        check(r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), "content type")
        return prom_check(r.read().decode())


def wait_equal(mport, want, timeout=20.0):
    """Scrapes until every series in want has exactly its value (a worker bumps a counter
    right after the send the test observed, so the first scrape may miss the last bump).
    A value above the wanted one can never come back down: that fails at once."""
    deadline = time.monotonic() + timeout
    while True:
        got = scrape(mport)
        diff = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
        over = {k: gv for k, gv in diff.items() if gv[0] is not None and gv[0] > gv[1]
                and not k.startswith("stunner_listener_connections{")}
        check(not over, "counters above the exact values (got, want): %r" % over)
        if not diff:
            return got
        check(time.monotonic() < deadline, "counters not exact (got, want): %r" % diff)
        time.sleep(0.05)


def start(d, workers=2):
    port, mport = free_port(), free_port()
    text = config_yaml(os.path.join(d, "admin.sock"),
                       [("udp", port, "TURN-UDP"), ("tcp", port, "TURN-TCP")], workers=workers,
                       secret=SECRET,
                       extra_admin='  metrics_endpoint: "http://127.0.0.1:%d/metrics"\n' % mport)
    return Daemon(d, text, workers=workers).start(), port, mport


# ---- tests -------------------------------------------------------------------------------

def test_exact_counters(d):
    daemon, port, mport = start(d)
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        peer.bind(("127.0.0.1", 0))
        peer.settimeout(5.0)
        pip, pport = peer.getsockname()
        base = wait_equal(mport, {"turngate_auth_failures_total{reason=\"missing\"}": 0})
        check(base["stunner_listener_connections{name=\"udp\"}"] == 2,
              "UDP listener: one socket per worker")
        c = Client(port)
        c.challenge()                                   # auth failure "missing": 1
        bad_mac = 3
        good_key = c.key
        c.key = hashlib.md5(("%s:%s:wrong" % (c.user, REALM)).encode()).digest()
        for _ in range(bad_mac):                        # auth failure "bad_mac": 3
            cls, a = c.request(ALLOCATE, [attr(A_TRANSPORT, b"\x11\0\0\0")], c.key)
            check(cls == 3 and err_code(a) == 401, "wrong password not refused")
        c.key = good_key
        rip, rport = c.allocate()
        check(c.permission(pip) == 0, "CreatePermission for the peer")
        check(c.permission("10.9.8.7") == 403, "peer outside the routes must get 403")
        sends = 25
        for i in range(sends):                          # client -> peer: 25 packets
            c.send_ind(pip, pport, b"m%03d" % i)
            data, src = peer.recvfrom(2048)
            check(data == b"m%03d" % i and src == (rip, rport), "relayed payload")
        back = 7
        for i in range(back):                           # peer -> client: 7 packets
            peer.sendto(b"b%d" % i, (rip, rport))
            _, _, _, a = parse(c.s.recv(2048))
            check(a.get(A_DATA) == b"b%d" % i, "Data indication payload")
        want = {
            'turngate_auth_failures_total{reason="missing"}': 1,
            'turngate_auth_failures_total{reason="bad_mac"}': bad_mac,
            'turngate_auth_failures_total{reason="stale_nonce"}': 0,
            'turngate_permission_denied_total{listener="udp"}': 1,
            'turngate_permission_denied_total{listener="tcp"}': 0,
            'turngate_peer_packets_total{direction="tx"}': sends,
            'turngate_peer_packets_total{direction="rx"}': back,
            'stunner_cluster_packets_total{name="loopback",direction="tx"}': sends,
            'stunner_cluster_packets_total{name="loopback",direction="rx"}': back,
            # every datagram this client sent, and every one it received
            'stunner_listener_packets_total{name="udp",direction="rx"}': c.sent,
            'stunner_listener_packets_total{name="udp",direction="tx"}': c.sent - sends + back,
            'turngate_allocations_created_total': 1,
            'stunner_allocations_active': 1,
            'stunner_listener_connections{name="udp"}': 2,
            'stunner_listener_connections_total{name="udp"}': 2,
        }
        wait_equal(mport, want)
        c.release()
        want['stunner_listener_packets_total{name="udp",direction="rx"}'] = c.sent
        want['stunner_listener_packets_total{name="udp",direction="tx"}'] = c.sent - sends + back
        want['stunner_allocations_active'] = 0
        want['turngate_allocations_ended_total'] = 1
        # one ended allocation observed (its bucket depends on how long the test ran)
        want['turngate_allocation_lifetime_seconds_count'] = 1
        want['turngate_allocation_lifetime_seconds_bucket{le="+Inf"}'] = 1
        wait_equal(mport, want)
        daemon.stop()
    finally:
        peer.close()
        if daemon.proc.poll() is None:
            daemon.kill()


def test_tcp_connection_gauge(d):
    daemon, port, mport = start(d)
    try:
        wait_equal(mport, {'stunner_listener_connections{name="tcp"}': 0,
                           'stunner_listener_connections_total{name="tcp"}': 0})
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        wait_equal(mport, {'stunner_listener_connections{name="tcp"}': 1,
                           'stunner_listener_connections_total{name="tcp"}': 1})
        s.close()
        wait_equal(mport, {'stunner_listener_connections{name="tcp"}': 0,
                           'stunner_listener_connections_total{name="tcp"}': 1})
        daemon.stop()
    finally:
        if daemon.proc.poll() is None:
            daemon.kill()


def test_checker_rejects(d):
    """The format check itself must fail on broken text (else it proves nothing)."""
    bad = ["a_total 1\n", "# HELP a x\n# TYPE a counter\na 1\n",
           "# HELP g x\n# TYPE g gauge\ng{x=\"a\\q\"} 1\n", "# HELP g x\n# TYPE g gauge\ng 1",
           "# HELP g x\n# TYPE g gauge\ng  1\n", "# HELP g x\ng 1\n",
           "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
           "h_sum 1\nh_count 1\n",
           "# HELP g x\n# TYPE g gauge\ng 1\ng 2\n"]
    for text in bad:
        try:
            prom_check(text)
        except Exception:
            continue
        raise AssertionError("checker accepted %r" % text)
    prom_check("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
               "h_sum 7\nh_count 2\n")


if __name__ == "__main__":
    run_tests([test_checker_rejects, test_exact_counters, test_tcp_connection_gauge])
