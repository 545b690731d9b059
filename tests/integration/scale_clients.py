"""Many TURN-UDP clients from few sockets: the load generator of test_scale.py and
bench/scale.py (issue 42). Not a test by itself.

Each client is its own 5-tuple without a socket of its own: a few UDP sockets are bound to
the wildcard address, and each sends from many loopback addresses (127.a.b.c, all local on
Linux without configuring them) by naming the source in IP_PKTINFO; the answer's
destination address (IP_PKTINFO again) says which client it is for. So 20,000 clients
take 8 descriptors, not 20,000.

The unauthenticated first Allocate of each client is answered 401 under the daemon's
reflection limit (limits.unauth_burst, 100 answers per /24 at once, then unauth_rate a
second): the addresses are spread so that no /24 carries more than PER_PREFIX clients.

Every loop is bounded: a transaction is sent at most TRIES times, RTO seconds apart, and
each phase ends by a deadline.
"""
import hashlib
import hmac
import base64
import os
import select
import socket
import struct
import time

import harness_admin as ts

PER_PREFIX = 96      # clients per /24 (under the default unauth_burst of 100)
TRIES = 6
RTO = 1.0
REQUESTED_UDP = b"\x11\0\0\0"
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)


def client_address(j, per_prefix_addrs, first_octet=64):
    """The j-th client address: 127.A.B.C, per_prefix_addrs of them per /24."""
    prefix, host = divmod(j, per_prefix_addrs)
    a, b = divmod(prefix, 250)
    return "127.%d.%d.%d" % (first_octet + a, b + 1, host + 1)


class Fleet:
    """n clients on sockets bound to 0.0.0.0 at the given ports (0: the kernel picks; the
    caller keeps them off the relay range), one socket per port, spread round-robin over the servers [(ip, port)], with
    users users (ephemeral credentials of secret/realm)."""

    def __init__(self, n, ports, servers, secret=ts.SECRET, realm=ts.REALM, users=50,
                 lifetime=3600):
        self.n = n
        self.servers = servers
        self.socks = []
        for port in ports:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
            s.bind(("0.0.0.0", port))
            s.setblocking(False)
            self.socks.append(s)
        self.fdmap = {s.fileno(): s for s in self.socks}
        per_addr = max(1, PER_PREFIX // len(self.socks))
        self.src = [client_address(i // len(self.socks), per_addr) for i in range(n)]
        self.src_raw = [socket.inet_aton(a) for a in self.src]
        self.by_src = {}
        for i in range(n):
            self.by_src[(self.src_raw[i], i % len(self.socks))] = i
        self.realm = realm.encode()
        expiry = int(time.time()) + lifetime
        self.users = []
        for u in range(users):
            name = "%d:scale%d" % (expiry, u)
            pw = base64.b64encode(hmac.new(secret.encode(), name.encode(),
                                           hashlib.sha1).digest()).decode()
            key = hashlib.md5(("%s:%s:%s" % (name, realm, pw)).encode()).digest()
            self.users.append((name.encode(), key))
        self.nonce = [None] * n
        self.relayed = [None] * n
        self.errors = {}          # client -> error code of its last failed transaction
        self.sent = 0

    def user(self, i):
        return self.users[i % len(self.users)]

    def server(self, i):
        return self.servers[i % len(self.servers)]

    def send(self, i, msg, dst=None):
        k = i % len(self.socks)
        pktinfo = struct.pack("=I4s4s", 0, self.src_raw[i], b"\0\0\0\0")
        self.socks[k].sendmsg([msg], [(socket.IPPROTO_IP, IP_PKTINFO, pktinfo)],
                              0, dst or self.server(i))
        self.sent += 1

    def receive(self, timeout):
        """[(client, data)] of what arrived within timeout (at least one wait)."""
        out = []
        r, _, _ = select.select(self.socks, [], [], timeout)
        for s in r:
            k = self.socks.index(s)
            for _ in range(4096):
                try:
                    data, anc, _, _ = s.recvmsg(2048, socket.CMSG_SPACE(12))
                except BlockingIOError:
                    break
                dst = None
                for lvl, typ, val in anc:
                    if lvl == socket.IPPROTO_IP and typ == IP_PKTINFO:
                        dst = val[8:12]
                i = self.by_src.get((dst, k))
                if i is not None:
                    out.append((i, data))
        return out

    def authed(self, i, method, attrs):
        name, key = self.user(i)
        return [(ts.A_USERNAME, name), (ts.A_REALM, self.realm),
                (ts.A_NONCE, self.nonce[i])] + attrs, key

    def run(self, todo, first, on_answer, window=512, deadline=120.0, rate=None):
        """Runs one transaction per client of todo, at most window at once: first(i)
        gives its request (bytes) or None to skip; on_answer(i, parsed) returns None
        when the client is done, or the next request (a 401 with a nonce, say). rate:
        start at most this many clients a second (an open-loop pace, in 2 ms steps, so
        that what the server is offered does not depend on how fast this process runs);
        None: as fast as answers come back (closed loop). Returns the clients that never
        got a final answer."""
        pending = list(reversed(todo))
        open_tx = {}              # tid -> [client, msg, sent_at, tries]
        by_client = {}
        t0 = time.monotonic()
        end = t0 + deadline
        started = 0
        wait = 0.05 if rate is None else 0.002
        while (pending or open_tx) and time.monotonic() < end:
            due = len(todo) if rate is None else rate * (time.monotonic() - t0)
            while pending and len(open_tx) < window and started < due:
                started += 1
                i = pending.pop()
                msg = first(i)
                if msg is None:
                    continue
                tid = msg[8:20]
                open_tx[tid] = [i, msg, time.monotonic(), 1]
                by_client[i] = tid
                self.send(i, msg)
            for i, data in self.receive(wait):
                p = ts.parse(data)
                if p is None or p[2] not in open_tx or open_tx[p[2]][0] != i:
                    continue
                del open_tx[p[2]]
                nxt = on_answer(i, p)
                if nxt is not None:
                    open_tx[nxt[8:20]] = [i, nxt, time.monotonic(), 1]
                    self.send(i, nxt)
            now = time.monotonic()
            for tid, tx in list(open_tx.items()):
                if now - tx[2] < RTO:
                    continue
                if tx[3] >= TRIES:
                    del open_tx[tid]
                    continue
                tx[2], tx[3] = now, tx[3] + 1
                self.send(tx[0], tx[1])
        return sorted(tx[0] for tx in open_tx.values()) + sorted(pending)

    # ---- the transactions ----------------------------------------------------------

    def allocate(self, todo, window=512, deadline=120.0, rate=None):
        """Allocates for every client of todo (401, then authenticated), at most rate
        clients started a second (None: closed loop, see run). Returns the clients
        without an answer; self.relayed / self.errors have the rest."""
        def first(i):
            return ts.build(ts.ALLOCATE, ts.REQUEST, os.urandom(12),
                            [(ts.A_TRANSPORT, REQUESTED_UDP)])

        def answer(i, p):
            _, cls, tid, attrs = p
            code = ts.error_code(attrs)
            if cls == ts.ERROR and code in (401, 438) and ts.A_NONCE in attrs and \
                    (self.nonce[i] is None or code == 438):
                self.nonce[i] = attrs[ts.A_NONCE][0]
                a, key = self.authed(i, ts.ALLOCATE, [(ts.A_TRANSPORT, REQUESTED_UDP)])
                return ts.build(ts.ALLOCATE, ts.REQUEST, os.urandom(12), a, key=key)
            if cls == ts.SUCCESS and ts.A_RELAYED in attrs:
                self.relayed[i] = ts.parse_xor_addr(attrs[ts.A_RELAYED][0], tid)
                self.errors.pop(i, None)
            else:
                self.errors[i] = code
            return None
        return self.run(todo, first, answer, window, deadline, rate)

    def permit(self, todo, peer, window=256, deadline=60.0):
        """CreatePermission for peer (ip, port) on every client of todo."""
        def first(i):
            tid = os.urandom(12)
            a, key = self.authed(i, ts.CREATE_PERMISSION,
                                 [(ts.A_PEER, ts.xor_addr(peer[0], peer[1], tid))])
            return ts.build(ts.CREATE_PERMISSION, ts.REQUEST, tid, a, key=key)

        def answer(i, p):
            if p[1] != ts.SUCCESS:
                self.errors[i] = ts.error_code(p[3])
            return None
        return self.run(todo, first, answer, window, deadline)

    def probe(self, todo, peer, deadline=30.0, resend=1.0, when=None):
        """Send indications to peer (an echo) from every client of todo; returns the
        clients whose payload came back as a Data indication (resent every resend s).
        when: a dict that gets {client: time.monotonic() its first echo came back}."""
        want = {i: b"probe-%d" % i for i in todo}
        got = set()
        end = time.monotonic() + deadline
        last = 0.0
        while len(got) < len(want) and time.monotonic() < end:
            if time.monotonic() - last >= resend:
                last = time.monotonic()
                for i in want:
                    if i in got:
                        continue
                    tid = os.urandom(12)
                    self.send(i, ts.build(ts.SEND, ts.INDICATION, tid, [
                        (ts.A_PEER, ts.xor_addr(peer[0], peer[1], tid)),
                        (ts.A_DATA, want[i])]))
            for i, data in self.receive(min(0.05, resend)):
                p = ts.parse(data)
                if p and p[0] == ts.DATA and p[1] == ts.INDICATION and \
                        p[3].get(ts.A_DATA, [None])[0] == want.get(i):
                    got.add(i)
                    if when is not None:
                        when.setdefault(i, time.monotonic())
        return got

    def close(self):
        for s in self.socks:
            s.close()
