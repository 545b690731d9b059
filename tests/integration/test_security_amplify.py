"""Unauthenticated answers do not amplify (issue 35, finding 7 and two coturn CVE classes),
against the real daemon.

- STUN Binding answers to UDP sources go through the limiter of unauthenticated answers
  (limits.unauth_*): a flood of spoofable Bindings from one prefix gets at most
  burst + rate * elapsed answers per worker, the rest counted in unauth_dropped
  (turngate_unauth_responses_dropped_total); an address that authenticated is answered on
  its credits meanwhile, another prefix from its own bucket, TCP without limit.
- Sizes: a Binding success carries XOR-MAPPED-ADDRESS (and FINGERPRINT when asked) and
  nothing else; an unauthenticated UDP error answer carries its reason phrase only where the
  answer stays no larger than the request (RFC 8489 14.8: the phrase is diagnostics only).
- coturn CVE-2020-6061/6062 class: every unauthenticated error the daemon can produce is a
  well-formed STUN message, its reason phrase printable and free of request bytes, its
  padding zero, and two requests that differ only in padding bytes and transaction id get
  answers equal but for the transaction id (and the NONCE's time and the FINGERPRINT).
- DTLS flood before the cookie: 2000 cookie-less ClientHellos from 500 source ports get a
  HelloVerifyRequest each at most, never larger than the ClientHello; no association, no
  handshake, no RSS growth stays behind, and a real DTLS client completes its handshake.

Exact assertions use the daemon's own counters (admin `stats`), never timing; the one bound
involving time is the limiter's own promise, with elapsed measured generously.
"""
import hashlib
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (ALLOCATE, A_ERROR, A_FINGERPRINT, A_LIFETIME, A_NONCE,  # noqa: E402
                           A_REALM, A_TRANSPORT, A_USERNAME, A_XOR_MAPPED, ERROR, MAGIC, REALM,
                           REFRESH, REQUEST, SUCCESS, Client, Daemon, DtlsSocket, Failure, build,
                           check, config, credentials, error_code, free_port, header, integrity,
                           make_cert, parse, parse_xor_addr, relay_range, run_tests, wait_for)

BINDING = 1
A_SOFTWARE, A_PW_ALGS = 0x8022, 0x8002
WORKERS = 2
RATE, BURST = 5, 10


def start(d, limits=None, v6=False, proto="TURN-UDP", auth_none=False):
    """A daemon with UDP and TCP listeners on one port (and a UDP listener on ::1 with v6;
    auth type none with auth_none). Returns (daemon, port, v6 port or None)."""
    port, port6 = free_port(), (free_port() if v6 else None)
    text = config(d, [("udp", port, proto, ["loopback"]),
                      ("tcp", port, "TURN-TCP", ["loopback"])], {"loopback": ["127.0.0.1"]},
                  limits=limits, workers=WORKERS, relay=relay_range())
    if v6:
        text = text.replace("clusters:\n", "  - name: udp6\n    protocol: TURN-UDP\n"
                            "    address: \"::1\"\n    port: %d\n    routes: [loopback]\n"
                            "clusters:\n" % port6, 1)
    if auth_none:
        text = text.replace("  type: ephemeral\n", "  type: none\n", 1)
        text = text[:text.index("  credentials:\n")] + text[text.index("listeners:\n"):]
    return Daemon(d, text).start(), port, port6


def counters(daemon):
    return daemon.admin({"cmd": "stats"})["counters"]


def settled(daemon, key, at_least):
    """The counters once counters[key] reached at_least (a worker counts right after the
    send the test observed), or as they are after 5 s."""
    try:
        return wait_for(lambda: (lambda c: c if c.get(key, 0) >= at_least else None)(
            counters(daemon)), key, timeout=5.0)
    except Failure:
        return counters(daemon)


def binding(tid=None, fingerprint=False, attrs=()):
    return build(BINDING, REQUEST, tid or os.urandom(12), list(attrs), fingerprint=fingerprint)


def udp_answer(sock, msg, dest, timeout=1.0, tries=3):
    """Sends msg from sock to dest until an answer with its transaction id comes: raw bytes,
    or None."""
    for _ in range(tries):
        sock.sendto(msg, dest)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = sock.recv(4096)
            except socket.timeout:
                break
            if data[8:20] == msg[8:20]:
                return data
    return None


def tcp_answer(port, msg):
    """msg over a fresh TCP connection; the raw answer (one STUN message)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(msg)
        data = b""
        while len(data) < 20 or len(data) < 20 + struct.unpack("!H", data[2:4])[0]:
            chunk = s.recv(4096)
            check(chunk, "TCP connection closed without an answer")
            data += chunk
        return data


def flood_bindings(port, srcs, total):
    """total Bindings without attributes from the loopback addresses srcs (round robin), in
    rounds of 50 with the answers read in between; then reads until 1 s of quiet.
    Returns (answers, bytes sent, bytes answered, t0, t_last)."""
    socks = []
    for ip in srcs:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((ip, 0))
        s.setblocking(False)
        socks.append(s)
    answers, sbytes, abytes, t_last = 0, 0, 0, 0.0

    def drain():
        nonlocal answers, abytes, t_last
        for s in socks:
            for _ in range(10000):
                try:
                    data = s.recv(4096)
                except OSError:
                    break
                p = parse(data)
                check(p is not None and p[1] == SUCCESS, "not a Binding success: %r" % data)
                answers += 1
                abytes += len(data)
                t_last = time.monotonic()

    t0 = time.monotonic()
    for i in range(total):
        m = binding()
        socks[i % len(socks)].sendto(m, ("127.0.0.1", port))
        sbytes += len(m)
        if i % 50 == 49:
            drain()
    quiet = time.monotonic()
    while time.monotonic() - quiet < 1.0 and time.monotonic() - t0 < 60:
        n = answers
        drain()
        if answers != n:
            quiet = time.monotonic()
        time.sleep(0.01)
    for s in socks:
        s.close()
    return answers, sbytes, abytes, t0, t_last or t0


def allowed(elapsed):
    """What the limiter may let through for one prefix: each worker has its own bucket."""
    return WORKERS * (BURST + RATE * elapsed) + 2


def test_binding_flood_limited(d):
    """500 spoofable Bindings from 127.0.0.0/24: within the limiter's budget, the rest
    counted as dropped, fewer bytes out than in; a client that authenticated before is
    answered on its credits, another prefix from its bucket, TCP always."""
    daemon, port, _ = start(d, {"unauth_rate": RATE, "unauth_burst": BURST})
    try:
        known = Client(port, bind="127.0.0.40")
        known.allocate()
        c0 = counters(daemon)
        sent = 500
        answered, sbytes, abytes, t0, t_last = flood_bindings(
            port, ["127.0.0.%d" % (11 + i) for i in range(8)], sent)
        elapsed = t_last - t0
        c1 = settled(daemon, "stun_binding", c0.get("stun_binding", 0) + answered)
        bind_n = c1.get("stun_binding", 0) - c0.get("stun_binding", 0)
        dropped = c1.get("unauth_dropped", 0) - c0.get("unauth_dropped", 0)
        print("Binding flood: %d sent in %.2f s, %d answered (limit %.0f), %d dropped; "
              "bytes %d in, %d out (ratio %.3f)"
              % (sent, elapsed, answered, allowed(elapsed), dropped, sbytes, abytes,
                 abytes / sbytes))
        check(answered == bind_n, "answers %d, counted %d" % (answered, bind_n))
        check(answered <= allowed(elapsed), "%d answers in %.2f s exceed the limit %.0f"
              % (answered, elapsed, allowed(elapsed)))
        check(answered >= 1, "not even the burst was answered")
        check(dropped >= 1 and answered + dropped <= sent,
              "dropped %d, answered %d of %d" % (dropped, answered, sent))
        check(abytes < sbytes, "byte amplification %.2f under flood" % (abytes / sbytes))
        # The flooded prefix's buckets are empty now: a client of it that authenticated
        # (one credit per authenticated request, here an Allocate and 20 Refreshes) is
        # answered on its credits, one credit per Binding (a browser's keepalives).
        for _ in range(20):
            check(error_code(known.request(REFRESH, [])[3]) is None, "Refresh refused")
        c1 = counters(daemon)
        s = known.sock
        for i in range(20):
            check(udp_answer(s, binding(), ("127.0.0.1", port), tries=1) is not None,
                  "keepalive Binding %d of an authenticated client not answered" % i)
        c2 = settled(daemon, "stun_binding", c1.get("stun_binding", 0) + 20)
        check(c2.get("unauth_trusted", 0) - c1.get("unauth_trusted", 0) == 20 and
              c2.get("unauth_dropped", 0) == c1.get("unauth_dropped", 0),
              "keepalives not paid by credits: %r" % c2)
        # Another prefix has its own bucket; TCP is never limited.
        other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        other.bind(("127.0.1.5", 0))
        check(udp_answer(other, binding(), ("127.0.0.1", port)) is not None,
              "a Binding from another prefix not answered")
        other.close()
        for i in range(3 * BURST):
            r = parse(tcp_answer(port, binding()))
            check(r is not None and r[1] == SUCCESS, "TCP Binding %d: %r" % (i, r))
        known.close()
    finally:
        check(daemon.stop() == 0, "exit status")


def attr_list(raw):
    """[(type, value)] of a raw STUN message, checking lengths and zero padding."""
    mlen = struct.unpack("!H", raw[2:4])[0]
    check(len(raw) == 20 + mlen and mlen % 4 == 0, "bad length %d / %d" % (len(raw), mlen))
    check(struct.unpack("!I", raw[4:8])[0] == MAGIC, "no magic cookie")
    out, pos = [], 20
    while pos < len(raw):
        check(pos + 4 <= len(raw), "truncated attribute header")
        t, ln = struct.unpack("!HH", raw[pos:pos + 4])
        end = pos + 4 + ln
        pad = (4 - ln % 4) % 4
        check(end + pad <= len(raw), "attribute 0x%04x overruns the message" % t)
        check(raw[end:end + pad] == b"\0" * pad, "padding of 0x%04x not zero: %r"
              % (t, raw[end:end + pad]))
        out.append((t, raw[pos + 4:end]))
        pos = end + pad
    return out


def test_answer_sizes(d):
    """Binding success: XOR-MAPPED-ADDRESS (+ FINGERPRINT when asked) only, 32/40 bytes for
    IPv4 and 44/52 for IPv6. Error answers to small unauthenticated UDP requests carry no
    reason phrase (answer = request + 8 bytes of ERROR-CODE at most, 401 adds its REALM,
    NONCE and PASSWORD-ALGORITHMS); with room in the request the phrase is there; over TCP
    it always is."""
    daemon, port, port6 = start(d, v6=True)
    try:
        s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s4.bind(("127.0.0.1", 0))
        s6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s6.bind(("::1", 0))
        for sock, dest, base in ((s4, ("127.0.0.1", port), 32), (s6, ("::1", port6), 44)):
            for fp in (False, True):
                req = binding(fingerprint=fp)
                raw = udp_answer(sock, req, dest)
                check(raw is not None, "no Binding answer from %r" % (dest,))
                types = [t for t, _ in attr_list(raw)]
                want = [A_XOR_MAPPED] + ([A_FINGERPRINT] if fp else [])
                check(types == want, "Binding answer attributes %r" % types)
                check(len(raw) == base + (8 if fp else 0), "Binding answer of %d bytes" % len(raw))
                ip, p = parse_xor_addr(dict(attr_list(raw))[A_XOR_MAPPED], raw[8:20])
                check((ip, p) == sock.getsockname()[:2], "mapped %r" % ((ip, p),))
                print("Binding %s, %s FINGERPRINT: request %d bytes, answer %d (ratio %.2f)"
                      % (dest[0], "with" if fp else "without", len(req), len(raw),
                         len(raw) / len(req)))
        small = [("unknown method", build(0x0FF, REQUEST, os.urandom(12), []), 400),
                 ("unknown method + FINGERPRINT",
                  build(0x0FF, REQUEST, os.urandom(12), [], fingerprint=True), 400),
                 ("LIFETIME of 0 bytes",
                  build(ALLOCATE, REQUEST, os.urandom(12),
                        [(A_TRANSPORT, bytes([17, 0, 0, 0])), (A_LIFETIME, b"")]), 400),
                 ("unknown attribute",
                  build(ALLOCATE, REQUEST, os.urandom(12), [(0x0031, b"\1\2\3\4")]), 420)]
        for what, req, code in small:
            raw = udp_answer(s4, req, ("127.0.0.1", port))
            check(raw is not None, "%s: no answer" % what)
            p = parse(raw)
            check(error_code(p[3]) == code, "%s: %r" % (what, error_code(p[3])))
            reason = p[3][A_ERROR][0][4:]
            print("%s: request %d bytes, answer %d, reason %r" % (what, len(req), len(raw),
                                                                  reason))
            check(len(raw) <= len(req) + 8, "%s: answer %d bytes for %d" % (what, len(raw),
                                                                            len(req)))
            check(reason == b"" or len(raw) <= len(req), "%s: reason %r makes %d > %d bytes"
                  % (what, reason, len(raw), len(req)))
            # Over TCP (not spoofable) the same request gets its diagnostic phrase.
            t = parse(tcp_answer(port, req))
            check(error_code(t[3]) == code and len(t[3][A_ERROR][0]) > 4,
                  "%s over TCP: %r" % (what, t[3].get(A_ERROR)))
        req = build(ALLOCATE, REQUEST, os.urandom(12), [(A_TRANSPORT, bytes([17, 0, 0, 0]))])
        raw = udp_answer(s4, req, ("127.0.0.1", port))
        types = [t for t, _ in attr_list(raw)]
        check(error_code(parse(raw)[3]) == 401 and
              types == [A_ERROR, A_REALM, A_NONCE, A_PW_ALGS], "401 attributes %r" % types)
        check(parse(raw)[3][A_ERROR][0][4:] == b"", "401 to a 28-byte request with a phrase")
        print("401: request %d bytes, answer %d (REALM, NONCE, PASSWORD-ALGORITHMS)"
              % (len(req), len(raw)))
        # Room in the request: the phrase is there, and the answer is no larger.
        big = build(0x0FF, REQUEST, os.urandom(12), [(A_SOFTWARE, b"x" * 40)])
        raw = udp_answer(s4, big, ("127.0.0.1", port))
        check(parse(raw)[3][A_ERROR][0][4:] == b"Unsupported method" and len(raw) <= len(big),
              "phrase with room: %r" % raw)
        s4.close()
        s6.close()
    finally:
        check(daemon.stop() == 0, "exit status")


def error_cases():
    """(name, method, attrs with a padded attribute whose pad byte is {pad}, key) for every
    error the daemon gives a request that did not authenticate."""
    user = b"1999999999:mallory"
    good, password = credentials("alice")
    good_key = hashlib.md5(("%s:%s:%s" % (good, REALM, password)).encode()).digest()
    soft = (A_SOFTWARE, b"AAAA-request-bytes-Z")   # 20 bytes: no padding, a marker
    return [
        ("400 unknown method", 0x0FF, [soft, (0x8030, b"odd")], None),
        ("400 malformed LIFETIME", ALLOCATE,
         [(A_TRANSPORT, bytes([17, 0, 0, 0])), (A_LIFETIME, b"\xff"), soft], None),
        ("400 malformed REQUESTED-TRANSPORT", ALLOCATE, [(A_TRANSPORT, b"\x11"), soft], None),
        ("420 unknown attribute", ALLOCATE, [(0x0031, b"odd"), (0x0033, b"x"), soft], None),
        ("401 no credentials", ALLOCATE, [(A_TRANSPORT, bytes([17, 0, 0, 0])), soft], None),
        ("438 wrong key, foreign nonce", ALLOCATE,
         [(A_TRANSPORT, bytes([17, 0, 0, 0])), (A_USERNAME, user), (A_REALM, b"sec.realm"),
          (A_NONCE, b"odd-nonce")], b"\0" * 16),
        ("400 integrity without NONCE", ALLOCATE,
         [(A_TRANSPORT, bytes([17, 0, 0, 0])), (A_USERNAME, user), (A_REALM, b"sec.realm")],
         b"\0" * 16),
        ("438 right key, foreign nonce", ALLOCATE,
         [(A_TRANSPORT, bytes([17, 0, 0, 0])), (A_USERNAME, good.encode()),
          (A_REALM, REALM.encode()), (A_NONCE, b"odd-foreign-nonce")], good_key),
    ]


def with_pad(msg, pad_byte):
    """msg with every attribute's padding bytes set to pad_byte (FINGERPRINT-less, no
    integrity over it changes meaning: the server ignores padding, RFC 8489 14)."""
    out, pos = bytearray(msg), 20
    while pos < len(msg):
        t, ln = struct.unpack("!HH", msg[pos:pos + 4])
        end = pos + 4 + ln
        pad = (4 - ln % 4) % 4
        out[end:end + pad] = bytes([pad_byte]) * pad
        pos = end + pad
    return bytes(out)


def build_padded(method, tid, attrs, key, pad_byte):
    """A request whose attributes' padding bytes are pad_byte, MESSAGE-INTEGRITY (when key)
    computed over them as a client with odd padding would."""
    body = with_pad(build(method, REQUEST, tid, attrs), pad_byte)[20:]
    if key is not None:
        body += integrity(method, REQUEST, tid, body, key)
    return header(method, REQUEST, len(body), tid) + body


def comparable(raw):
    """The attributes of an answer with what may differ between two requests blanked: the
    NONCE's value (it carries the time) and the FINGERPRINT (over the transaction id)."""
    return [(t, b"" if t in (A_NONCE, A_FINGERPRINT) else v) for t, v in attr_list(raw)]


def check_reason(what, raw, req):
    p = parse(raw)
    check(p is not None and p[1] == ERROR, "%s: not an error response" % what)
    val = p[3][A_ERROR][0]
    check(val[:2] == b"\0\0", "%s: reserved bits set %r" % (what, val[:4]))
    reason = val[4:]
    try:
        text = reason.decode("utf-8")
    except UnicodeDecodeError:
        raise Failure("%s: reason not UTF-8: %r" % (what, reason))
    check(all(0x20 <= ord(ch) < 0x7F for ch in text), "%s: unprintable reason %r"
          % (what, reason))
    check(len(text) < 128, "%s: reason of %d characters" % (what, len(text)))
    for marker in (b"AAAA", b"request", b"mallory", b"odd"):
        check(marker not in reason, "%s: request bytes in the reason %r" % (what, reason))
    return reason


def test_error_reasons_clean(d):
    """coturn CVE-2020-6061/6062 class: every unauthenticated error answer, over UDP and
    TCP, is well formed, its reason printable and free of request bytes, and independent of
    the request's padding bytes and transaction id."""
    daemon, port, _ = start(d)
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        seen = {}
        for name, method, attrs, key in error_cases():
            for transport in ("udp", "tcp"):
                answers = []
                for pad in (0x00, 0xA5):
                    tid = bytes([pad]) * 12
                    req = build_padded(method, tid, attrs, key, pad)
                    raw = (udp_answer(s, req, ("127.0.0.1", port)) if transport == "udp"
                           else tcp_answer(port, req))
                    check(raw is not None, "%s over %s: no answer" % (name, transport))
                    check(raw[8:20] == tid, "%s: transaction id not echoed" % name)
                    reason = check_reason("%s over %s" % (name, transport), raw, req)
                    answers.append(raw)
                code = error_code(parse(answers[0])[3])
                check(code == int(name[:3]), "%s over %s: got %r" % (name, transport, code))
                check(comparable(answers[0]) == comparable(answers[1]),
                      "%s over %s: answers differ with padding: %r / %r"
                      % (name, transport, answers[0], answers[1]))
                seen["%s/%s" % (name, transport)] = (len(answers[0]), reason)
        s.close()
    finally:
        check(daemon.stop() == 0, "exit status")
    # auth type none: the one answer with a long explanation (403 "TURN disabled ...").
    daemon, port, _ = start(d, auth_none=True)
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        for transport in ("udp", "tcp"):
            answers = []
            for pad in (0x00, 0xA5):
                req = build_padded(ALLOCATE, bytes([pad]) * 12,
                                   [(A_TRANSPORT, bytes([17, 0, 0, 0])),
                                    (A_SOFTWARE, b"AAAA-request-bytes-Zodd")], None, pad)
                raw = (udp_answer(s, req, ("127.0.0.1", port)) if transport == "udp"
                       else tcp_answer(port, req))
                check(raw is not None and error_code(parse(raw)[3]) == 403,
                      "auth none, %s: %r" % (transport, raw))
                reason = check_reason("403 auth none over %s" % transport, raw, req)
                answers.append(raw)
            check(comparable(answers[0]) == comparable(answers[1]),
                  "403 over %s: answers differ with padding" % transport)
            seen["403 auth none/%s" % transport] = (len(answers[0]), reason)
        s.close()
    finally:
        check(daemon.stop() == 0, "exit status")
    for k, v in sorted(seen.items()):
        print("%-45s answer %3d bytes, reason %r" % (k, v[0], v[1]))


def test_dtls_flood_before_cookie(d):
    """2000 cookie-less ClientHellos from 500 source ports: at most one
    HelloVerifyRequest each, never larger than the ClientHello; the daemon's counters show
    no handshake and no association afterwards, its RSS does not grow; then a real DTLS
    client completes its handshake and gets a Binding answer."""
    from test_security_flood import total_rss
    from test_tls import capture_dtls_hello, cookie_of, tls_config
    crt, key = make_cert(d, "amp.test")
    udp_port, tls_port, dtls_port = free_port(), free_port(), free_port()
    daemon = Daemon(d, tls_config(d, udp_port, tls_port, dtls_port, crt, key)).start()
    socks = []
    try:
        hello = capture_dtls_hello()
        before, _ = total_rss(daemon)
        st0 = daemon.admin({"cmd": "stats"})
        c0 = st0["counters"]
        for _ in range(500):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
            socks.append(s)
        got, gbytes, biggest = 0, 0, 0

        def drain():
            nonlocal got, gbytes, biggest
            for s in socks:
                for _ in range(100):
                    try:
                        data = s.recv(4096)
                    except OSError:
                        break
                    check(cookie_of(data) is not None, "not a HelloVerifyRequest: %r" % data)
                    got += 1
                    gbytes += len(data)
                    biggest = max(biggest, len(data))

        for rnd in range(4):
            for s in socks:
                s.sendto(hello, ("127.0.0.1", dtls_port))
            drain()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.0:
            n = got
            drain()
            if got == 2000:
                break
            if got == n:
                time.sleep(0.05)
        st1 = daemon.admin({"cmd": "stats"})
        c1 = st1["counters"]
        after, _ = total_rss(daemon)
        cookies = c1.get("dtls_cookies", 0) - c0.get("dtls_cookies", 0)
        print("2000 cookie-less ClientHellos of %d bytes: %d HelloVerifyRequests (largest %d "
              "bytes, %d bytes in, %d out: ratio %.3f), %d counted; RSS %d -> %d KiB"
              % (len(hello), got, biggest, 2000 * len(hello), gbytes,
                 gbytes / (2000 * len(hello)), cookies, before, after))
        check(got <= 2000, "%d answers to 2000 hellos" % got)
        check(got >= 1000, "only %d HelloVerifyRequests" % got)
        check(biggest <= len(hello), "HelloVerifyRequest of %d bytes > ClientHello of %d"
              % (biggest, len(hello)))
        check(cookies <= 2000, "%d cookies counted" % cookies)
        check(c1.get("tls_handshakes", 0) == c0.get("tls_handshakes", 0),
              "handshakes completed from cookie-less hellos")
        check(c1.get("handshakes_refused", 0) == c0.get("handshakes_refused", 0),
              "handshake slots taken by cookie-less hellos")
        check(st1["listeners"]["dtls"]["conns_active"] == 0,
              "associations kept: %r" % st1["listeners"]["dtls"])
        check(st1["listeners"]["dtls"]["conns_total"] == st0["listeners"]["dtls"]["conns_total"],
              "connections made for cookie-less hellos: %r" % st1["listeners"]["dtls"])
        bound = 8192 if "ASAN_OPTIONS" in os.environ else 2048
        check(after - before <= bound, "RSS grew %d KiB" % (after - before))
        c = DtlsSocket(dtls_port)
        req = binding()
        c.sendall(req)
        c.settimeout(5)
        p = parse(c.recv(4096))
        check(p is not None and p[1] == SUCCESS and p[2] == req[8:20],
              "Binding over DTLS after the flood: %r" % (p,))
        c.close()
        c2 = daemon.admin({"cmd": "stats"})["counters"]
        check(c2.get("tls_handshakes", 0) == c1.get("tls_handshakes", 0) + 1,
              "the real handshake not counted")
    finally:
        for s in socks:
            s.close()
        check(daemon.stop() == 0, "exit status")


if __name__ == "__main__":
    run_tests([test_binding_flood_limited, test_answer_sizes, test_error_reasons_clean,
               test_dtls_flood_before_cookie])
