"""TURN over TLS and DTLS against the real daemon (2 workers).

ALPN and SNI as `openssl s_client` and Python's ssl module see them; an allocation over TLS
that keeps relaying across a certificate rotation while new handshakes get the new
certificate (and a bad certificate on reload leaves the current one serving); hostile
handshakes: garbage instead of a ClientHello, handshakes that never finish, and DTLS
ClientHello floods without and with cookies, during which a UDP allocation keeps relaying
and the daemon's state stays bounded. Relaying over TLS/DTLS with the project's client and
coturn's turnutils_uclient are in test_relay_tls.c and tests/interop.
"""
import base64
import os
import socket
import ssl
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (REQUEST, Daemon, Failure, Peer, build, check, config,  # noqa: E402
                           error_code, free_port, make_cert, parse, relay_range, run_tests,
                           tls_client, tls_connect, wait_for)
from test_security_flood import Relayer, total_rss  # noqa: E402

HS_TIMEOUT_S = 10       # worker/wk.h WK_HS_TIMEOUT_S
MAX_HANDSHAKES = 64     # WK_MAX_HANDSHAKES, per worker
SOURCE_DTLS_HANDSHAKES = 16  # limits.source_dtls_handshakes default


def der_of(crt):
    with open(crt) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def bundle(d, name, parts):
    path = os.path.join(d, name)
    with open(path, "w") as out:
        for p in parts:
            with open(p) as f:
                out.write(f.read())
    return path


def tls_config(d, udp_port, tls_port, dtls_port, crt, key, relay=None, dtls_inline=False):
    """dtls_inline: the DTLS listener gets STUNner's base64 `cert`/`key` instead of files."""
    text = config(d, [("udp", udp_port, "TURN-UDP", ["loopback"]),
                      ("tls", tls_port, "TURN-TLS", ["loopback"]),
                      ("dtls", dtls_port, "TURN-DTLS", ["loopback"])],
                  {"loopback": ["127.0.0.1"]}, relay=relay or relay_range())
    for name in ("tls", "dtls"):
        if name == "dtls" and dtls_inline:
            with open(crt, "rb") as fc, open(key, "rb") as fk:
                tls_keys = "    cert: %s\n    key: %s\n" % (
                    base64.b64encode(fc.read()).decode(), base64.b64encode(fk.read()).decode())
        else:
            tls_keys = "    cert_file: %s\n    key_file: %s\n" % (crt, key)
        marker = "  - name: %s\n" % name
        head, tail = text.split(marker, 1)
        first, rest = tail.split("    routes:", 1)
        text = head + marker + first + tls_keys + "    routes:" + rest
    return text


def start(d, crt, key, dtls_inline=False):
    udp_port, tls_port, dtls_port = free_port(), free_port(), free_port()
    text = tls_config(d, udp_port, tls_port, dtls_port, crt, key, dtls_inline=dtls_inline)
    return Daemon(d, text).start(), udp_port, tls_port, dtls_port


def s_client(port, sni, dtls):
    """`openssl s_client` against the daemon: (subject line, ALPN line)."""
    args = ["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, "-alpn", "stun.turn",
            "-servername", sni] + (["-dtls1_2"] if dtls else [])
    out = subprocess.run(args, input=b"", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=30).stdout.decode(errors="replace")
    subj = next((ln.strip() for ln in out.splitlines() if ln.startswith("subject=")), "")
    alpn = next((ln.strip() for ln in out.splitlines() if "ALPN" in ln), "")
    return subj, alpn


def relay_round(c, peer, relayed, payload):
    """Client -> peer by Send indication, and the peer's answer back: both arrive."""
    c.send("127.0.0.1", peer.port, payload)
    peer.sock.settimeout(2.0)
    try:
        got = peer.sock.recvfrom(70000)
    except socket.timeout:
        got = None
    check(got is not None and got[0] == payload, "peer did not get %r: %r" % (payload, got))
    peer.sock.sendto(b"back-" + payload, relayed)
    back = c.recv_data(3.0)
    check(back == b"back-" + payload, "client did not get the answer: %r" % (back,))


def test_alpn_sni(d):
    """Two certificates on one listener (TLS from files, DTLS from STUNner's base64
    cert/key): the SNI name picks one, an unknown name gets the first; ALPN stun.turn is selected over TLS 1.3 and DTLS 1.2; a client offering only
    other protocols still gets TURN (no ALPN); a Binding is answered over TLS."""
    a_crt, a_key = make_cert(d, "turn-a.test", "ec")
    b_crt, b_key = make_cert(d, "turn-b.test", "rsa")
    crt = bundle(d, "ab.crt", [a_crt, b_crt])
    key = bundle(d, "ab.key", [a_key, b_key])
    # TLS from files (ours), DTLS from STUNner's base64 cert/key: the same bundle.
    daemon, udp_port, tls_port, dtls_port = start(d, crt, key, dtls_inline=True)
    try:
        for sni, want in (("turn-a.test", a_crt), ("turn-b.test", b_crt),
                          ("other.test", a_crt), (None, a_crt)):
            s = tls_connect(tls_port, sni)
            check(s.getpeercert(binary_form=True) == der_of(want),
                  "SNI %r: wrong certificate" % sni)
            check(s.selected_alpn_protocol() == "stun.turn", "ALPN %r" % s.selected_alpn_protocol())
            check(s.version() == "TLSv1.3", "version %r" % s.version())
            s.close()
        s = tls_connect(tls_port, "turn-b.test", alpn=("h2",))
        check(s.selected_alpn_protocol() is None, "ALPN without stun.turn offered")
        tid = os.urandom(12)
        s.sendall(build(1, REQUEST, tid, []))
        resp = s.recv(4096)
        p = parse(resp)
        check(p is not None and p[2] == tid and p[1] == 0x100, "no Binding success over TLS")
        s.close()
        for sni, cn in (("turn-a.test", "turn-a.test"), ("turn-b.test", "turn-b.test")):
            for dtls in (False, True):
                subj, alpn = s_client(tls_port if not dtls else dtls_port, sni, dtls)
                print("s_client %s SNI %s: %s; %s" % ("DTLS" if dtls else "TLS", sni, subj,
                                                      alpn))
                check(subj.endswith("CN = " + cn), "s_client got %r for %s" % (subj, sni))
                check(alpn == "ALPN protocol: stun.turn", "s_client ALPN %r" % alpn)
        stats = daemon.admin({"cmd": "stats"})["counters"]
        check(stats.get("tls_handshakes", 0) >= 9, "handshakes counted: %r" % stats)
    finally:
        check(daemon.stop() == 0, "exit status")


def test_rotation(d):
    """An allocation over TLS relays before and after a reload that rotates the listener's
    certificate (same files, new contents: what cert-manager does); handshakes after the
    reload get the new certificate; a broken certificate fails the reload and leaves the
    rotated one serving; the old session still relays at the end."""
    old_crt, old_key = make_cert(d, "old.test")
    crt, key = os.path.join(d, "live.crt"), os.path.join(d, "live.key")
    bundle(d, "live.crt", [old_crt])
    bundle(d, "live.key", [old_key])
    daemon, udp_port, tls_port, dtls_port = start(d, crt, key)
    peer = Peer("127.0.0.1")
    try:
        c = tls_client(tls_port, sni="old.test")
        check(c.sock.getpeercert(binary_form=True) == der_of(old_crt), "first certificate")
        r = c.allocate()
        relayed = c.relayed(r)[0]
        check(error_code(c.perm("127.0.0.1", peer.port)[3]) is None, "CreatePermission")
        relay_round(c, peer, relayed, b"before")
        new_crt, new_key = make_cert(d, "new.test")
        bundle(d, "live.crt", [new_crt])
        bundle(d, "live.key", [new_key])
        rc, out, err = daemon.ctl("reload")
        check(rc == 0, "reload: %r %r" % (out, err))
        relay_round(c, peer, relayed, b"after")
        s = tls_connect(tls_port, "new.test")
        check(s.getpeercert(binary_form=True) == der_of(new_crt), "no new certificate")
        s.close()
        subj, _ = s_client(dtls_port, "new.test", True)
        check(subj.endswith("CN = new.test"), "DTLS after rotation: %r" % subj)
        with open(crt, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
        rc, out, err = daemon.ctl("reload")
        check(rc == 1 and "cert" in out + err, "bad certificate accepted: %r %r" % (out, err))
        s = tls_connect(tls_port, "new.test")
        check(s.getpeercert(binary_form=True) == der_of(new_crt), "bad reload changed it")
        s.close()
        relay_round(c, peer, relayed, b"end")
        check(error_code(c.request(4, [])[3]) is None, "Refresh over the old session")
        c.close()
    finally:
        peer.close()
        check(daemon.stop() == 0, "exit status")


def wait_closed(s, timeout):
    """Seconds until the server closed s (EOF or reset), or None after timeout."""
    t0 = time.monotonic()
    s.settimeout(0.5)
    while time.monotonic() - t0 < timeout:
        try:
            if s.recv(4096) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def test_bad_handshakes(d):
    """Garbage instead of a ClientHello is refused at once; a connection that never
    completes its handshake (silent, or half a ClientHello) is closed at the handshake
    deadline; meanwhile TLS clients are still served."""
    crt, key = make_cert(d, "bad.test")
    daemon, udp_port, tls_port, dtls_port = start(d, crt, key)
    try:
        before = daemon.admin({"cmd": "stats"})["counters"].get("err_tls", 0)
        g = socket.create_connection(("127.0.0.1", tls_port), timeout=5)
        g.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(200))
        t = wait_closed(g, 5)
        check(t is not None, "garbage: connection not closed")
        print("garbage instead of a ClientHello: closed after %.2f s" % t)
        stats = daemon.admin({"cmd": "stats"})["counters"]
        check(stats.get("err_tls", 0) > before, "garbage not counted as a TLS error")
        silent = socket.create_connection(("127.0.0.1", tls_port), timeout=5)
        half = socket.create_connection(("127.0.0.1", tls_port), timeout=5)
        # The first 60 bytes of a real ClientHello (record header announcing more).
        hello = ssl.MemoryBIO(), ssl.MemoryBIO()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        obj = ctx.wrap_bio(hello[0], hello[1])
        try:
            obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        half.sendall(hello[1].read()[:60])
        t0 = time.monotonic()
        s = tls_connect(tls_port, "bad.test")   # served meanwhile
        s.close()
        ts = wait_closed(silent, HS_TIMEOUT_S + 10)
        th = wait_closed(half, HS_TIMEOUT_S + 10 - (time.monotonic() - t0))
        print("silent handshake closed after %s s, half ClientHello after %s s" % (
            ts and "%.1f" % ts, th and "%.1f" % (time.monotonic() - t0)))
        check(ts is not None and ts >= HS_TIMEOUT_S - 2, "silent handshake: %r" % ts)
        check(th is not None, "half ClientHello not closed")
        stats = daemon.admin({"cmd": "stats"})["counters"]
        check(stats.get("conn_timeouts", 0) >= 2, "timeouts not counted: %r" % stats)
    finally:
        check(daemon.stop() == 0, "exit status")


def capture_dtls_hello():
    """The first datagram of `openssl s_client -dtls1_2`: a ClientHello without a cookie."""
    trap = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    trap.bind(("127.0.0.1", 0))
    trap.settimeout(10)
    p = subprocess.Popen(["openssl", "s_client", "-dtls1_2", "-connect",
                          "127.0.0.1:%d" % trap.getsockname()[1]],
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        hello, _ = trap.recvfrom(4096)
    finally:
        p.kill()
        p.wait()
        trap.close()
    check(hello[0] == 22 and hello[13] == 1, "not a DTLS ClientHello")
    return hello


def with_cookie(hello, cookie):
    """The same ClientHello carrying cookie: message_seq 1, record sequence 1."""
    body = hello[25:]
    sid_len = body[34]
    old_cookie_len = body[35 + sid_len]
    nb = (body[:35 + sid_len] + bytes([len(cookie)]) + cookie +
          body[36 + sid_len + old_cookie_len:])
    hs = (bytes([1]) + len(nb).to_bytes(3, "big") + (1).to_bytes(2, "big") +
          (0).to_bytes(3, "big") + len(nb).to_bytes(3, "big") + nb)
    return hello[:3] + hello[3:5] + (1).to_bytes(6, "big") + len(hs).to_bytes(2, "big") + hs


def cookie_of(hvr):
    """The cookie of a HelloVerifyRequest datagram, or None."""
    if len(hvr) < 28 or hvr[0] != 22 or hvr[13] != 3:
        return None
    n = hvr[27]
    return hvr[28:28 + n]


def test_dtls_floods(d):
    """Cookie-less ClientHellos from 2000 source ports: each gets a cookie, no association
    or memory is kept. Then 300 sources (ports of one address) that answer their cookie and
    then stall: about the address's DTLS handshake budget of associations exists (16, across
    workers; at most twice that), each newer one evicts the oldest (counted), all are gone after the handshake
    deadline. A UDP allocation keeps relaying on both workers throughout."""
    crt, key = make_cert(d, "flood.test")
    daemon, udp_port, tls_port, dtls_port = start(d, crt, key)
    hello = capture_dtls_hello()
    socks = []
    try:
        warm = Relayer(udp_port)
        for i in range(4):
            warm.round(i)
        before, per = total_rss(daemon)
        st0 = daemon.admin({"cmd": "stats"})["counters"]
        with Relayer(udp_port, daemon) as rel:
            answered = 0
            for i in range(2000):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.bind(("127.0.0.1", 0))
                s.settimeout(2)
                s.sendto(hello, ("127.0.0.1", dtls_port))
                try:
                    if cookie_of(s.recv(4096)):
                        answered += 1
                except socket.timeout:
                    pass
                s.close()
            after, _ = total_rss(daemon)
            # The worker counts a cookie after its send returned, which can be after the
            # client read it: wait (bounded) for the count instead of sampling once.
            def counted():
                c = daemon.admin({"cmd": "stats"})["counters"]
                return c if c.get("dtls_cookies", 0) - st0.get("dtls_cookies", 0) >= answered \
                    else None

            try:
                st1 = wait_for(counted, "the cookie counter", timeout=5.0)
            except Failure:
                st1 = daemon.admin({"cmd": "stats"})["counters"]
            conns = daemon.admin({"cmd": "status"})
            print("cookie-less DTLS hellos: 2000 sent, %d cookies back; RSS %d -> %d KiB"
                  % (answered, before, after))
            check(answered >= 1990, "only %d HelloVerifyRequests" % answered)
            check(st1.get("dtls_cookies", 0) - st0.get("dtls_cookies", 0) >= answered,
                  "cookies not counted")
            check(st1.get("tls_handshakes", 0) == st0.get("tls_handshakes", 0),
                  "handshakes completed from cookie-less hellos")
            # AddressSanitizer's allocator keeps per-size-class caches: a looser bound.
            bound = 8192 if "ASAN_OPTIONS" in os.environ else 2048
            check(after - before <= bound, "RSS grew %d KiB" % (after - before))
            # Sources that come back with their cookie, then stall: all hellos first,
            # then all cookies, so the handshake deadline cannot free slots meanwhile.
            t0 = time.monotonic()
            for i in range(300):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.bind(("127.0.0.1", 0))
                s.sendto(hello, ("127.0.0.1", dtls_port))
                socks.append(s)
            for s in socks:
                s.settimeout(max(0.05, 3 - (time.monotonic() - t0)))
                try:
                    ck = cookie_of(s.recv(4096))
                except socket.timeout:
                    ck = None
                if ck:
                    s.sendto(with_cookie(hello, ck), ("127.0.0.1", dtls_port))
            time.sleep(0.5)
            held_rss, _ = total_rss(daemon)
            stats2 = daemon.admin({"cmd": "stats"})
            st2 = stats2["counters"]
            held = stats2["listeners"]["dtls"]["conns_active"]
            refused = st2.get("handshakes_refused", 0) - st1.get("handshakes_refused", 0)
            evicted = (st2.get("budget_evict_address_dtls_handshakes", 0)
                       - st1.get("budget_evict_address_dtls_handshakes", 0))
            flights = 0
            for s in socks:
                s.setblocking(False)
                try:
                    while s.recv(4096):
                        flights += 1
                        break
                except OSError:
                    pass
            print("stalled DTLS handshakes: 300 sources, %d got a server flight, %d held, %d "
                  "evicted by the address's budget, %d refused; RSS while held %d KiB (+%d "
                  "KiB)" % (flights, held, evicted, refused, held_rss, held_rss - after))
            # The budget, plus at most a fair share of it on the other worker.
            check(held <= 2 * SOURCE_DTLS_HANDSHAKES, "%d associations held" % held)
            check(held >= SOURCE_DTLS_HANDSHAKES - 2, "only %d handshakes held" % held)
            check(evicted + refused >= flights - held - 10,
                  "evicted %d, refused %d, flights %d" % (evicted, refused, flights))
            left = HS_TIMEOUT_S + 5 - (time.monotonic() - t0)
            time.sleep(max(0, left))
            stats3 = daemon.admin({"cmd": "stats"})
            st3 = stats3["counters"]
            check(stats3["listeners"]["dtls"]["conns_active"] == 0, "associations left: %r"
                  % stats3["listeners"]["dtls"])
            timeouts = st3.get("conn_timeouts", 0) - st2.get("conn_timeouts", 0)
            print("after the deadline: %d stalled handshakes closed" % timeouts)
            check(timeouts >= held, "stalled handshakes not closed: %d of %d"
                  % (timeouts, held))
            # Service again after the bound emptied: a real DTLS handshake works.
            subj, _ = s_client(dtls_port, "flood.test", True)
            check(subj.endswith("CN = flood.test"), "DTLS not served after the flood")
        print("UDP service meanwhile: %d allocations, %d relayed round trips, slowest %.2f s,"
              " failures %r, workers %r" % (rel.allocs, rel.relays, rel.slowest,
                                            rel.failures[:5], sorted(rel.workers)))
        check(not rel.failures and rel.relays >= 5, "UDP service stalled")
        check(len(rel.workers) == 2, "allocations reached workers %r only" % (rel.workers,))
        check(conns is not None, "status")
    finally:
        for s in socks:
            s.close()
        check(daemon.stop() == 0, "exit status")


if __name__ == "__main__":
    run_tests([test_alpn_sni, test_rotation, test_bad_handshakes, test_dtls_floods])
