"""The same requests, the same answers: stunnerd v1.2.1 and turngated side by side (#39).

One config (the STUNner v1 keys both read; turngate's own admin keys, which stunnerd's
decoder ignores), ephemeral auth, a TURN-UDP listener on 127.0.0.1 and a STATIC cluster
admitting the echo peer 127.0.0.1:<P-P> only (then again with a STRICT_DNS cluster naming it
localhost, which has no port range), is given to stunnerd (built from the pinned Go
module by scripts/build-stunner.sh) and then to turngated. The same scripted requests go to
each, over TURN-UDP and over TURN-TCP (a second listener on the same port): Allocate with
good, wrong and expired credentials (and an RFC 6062 TCP Allocate over TURN-TCP);
CreatePermission and ChannelBind to the admitted peer, to a peer no cluster covers
(10.9.9.9, 127.0.0.2) and to the admitted address on a port outside the endpoint's range;
Send to each (TURN-UDP), with the echo peers counting what reaches them. Each outcome
(success, error code, relayed or not) must match, or EXPECTED names the row of
docs/configuration.md's "Differences from stunnerd" that explains it (the row must exist,
and a listed difference that no longer differs fails).

Without STUNner's programs (no Go, modules never fetched) the test skips, or fails under
CI=true; the programs are built with --offline (no network at test time).
"""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
top_srcdir = os.environ.get("top_srcdir", os.path.join(here, "..", ".."))
sys.path.insert(0, os.path.join(top_srcdir, "tests", "integration"))
sys.path.insert(0, here)
from harness_admin import (A_ERROR, A_TRANSPORT, ALLOCATE, REALM, SECRET, SUCCESS,  # noqa: E402
                           Client, Daemon, StreamClient, binding_request, credentials,
                           error_code, free_port, relay_range)
from test_stunnerd_diff import difference_rows, programs  # noqa: E402

# step -> (stunnerd's outcome, turngate's outcome, the configuration.md row that says why)
EXPECTED = {
    "Allocate, wrong password": ("error 400", "error 401", "A wrong password"),
    "Allocate, expired credential": ("error 400", "error 401", "A wrong password"),
    "CreatePermission 10.9.9.9": (
        "error without ERROR-CODE", "error 403", "A refused peer at CreatePermission"),
    "CreatePermission 127.0.0.2": (
        "error without ERROR-CODE", "error 403", "A refused peer at CreatePermission"),
    "ChannelBind 10.9.9.9": ("error 401", "error 403", "A refused peer at CreatePermission"),
    "ChannelBind 127.0.0.1 port outside the range": (
        "success", "error 403", "ChannelBind to a port outside"),
    "TURN-TCP: Allocate TCP (RFC 6062)": ("error 508", "error 403", "TCP Allocate (RFC 6062)"),
}
# The STRICT_DNS cluster names localhost: stunnerd admits what it resolves to (127.0.0.1, any
# port), turngated leaves a special-purpose answer out unless admit_special names it.
for _step, _st, _tg in (("CreatePermission 127.0.0.1", "success", "error 403"),
                        ("ChannelBind 127.0.0.1", "success", "error 403"),
                        ("ChannelBind 127.0.0.1 port outside the range", "success", "error 403"),
                        ("Send to admitted peer", "relayed", "not relayed"),
                        ("Data back from admitted peer", "received", "none"),
                        ("Send to port outside the range", "relayed", "not relayed"),
                        ("Data back from port outside the range", "received", "none")):
    EXPECTED["STRICT_DNS: " + _step] = (_st, _tg, "Special-purpose peers")


def expected(step):
    """The EXPECTED key of a step: a TURN-TCP step shares its UDP twin's."""
    tcp = step.replace("TURN-TCP: ", "", 1)
    for k in (step, tcp, step.replace("STRICT_DNS: ", "", 1),
              tcp.replace("STRICT_DNS: ", "", 1)):
        if k in EXPECTED:
            return k
    return None


def outcome(r):
    if r is None:
        return "no answer"
    if r[1] == SUCCESS:
        return "success"
    if A_ERROR not in r[3]:
        return "error without ERROR-CODE"
    return "error %d" % error_code(r[3])


class Echo:
    """A UDP echo on 127.0.0.1 that counts what it received (bounded, stops on close)."""

    def __init__(self, port):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", port))
        self.sock.settimeout(0.1)
        self.count = 0
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop and self.count < 1000:
            try:
                data, src = self.sock.recvfrom(70000)
            except socket.timeout:
                continue
            except OSError:
                return
            self.count += 1
            self.sock.sendto(data, src)

    def close(self):
        self.stop = True
        self.t.join(2)
        self.sock.close()


def make_config(d, port, peer_port, relay, kind="STATIC"):
    # STRICT_DNS: the same peer by name (localhost, /etc/hosts), resolved by each daemon
    # (no port range: stunnerd resolves "localhost:<A-B>" as a whole, which never resolves;
    # configuration.md's STRICT_DNS row)
    ep = "localhost" if kind == "STRICT_DNS" else "127.0.0.1:<%d-%d>" % (peer_port, peer_port)
    return ("version: v1\nadmin:\n  name: diff\n  loglevel: all:WARN\n  workers: 1\n"
            "  admin_socket: %s/admin.sock\n  state_dir: %s\n  drain_timeout: 1\n"
            "  healthcheck_endpoint: \"\"\n  relay_port_min: %d\n  relay_port_max: %d\n"
            "auth:\n  type: ephemeral\n  realm: %s\n  credentials:\n    secret: %s\n"
            "listeners:\n  - name: udp\n    protocol: TURN-UDP\n    address: 127.0.0.1\n"
            "    port: %d\n    routes: [echo]\n"
            "  - name: tcp\n    protocol: TURN-TCP\n    address: 127.0.0.1\n"
            "    port: %d\n    routes: [echo]\n"
            "clusters:\n  - name: echo\n    type: %s\n    protocol: UDP\n"
            "    endpoints: [\"%s\"]\n"
            % (d, d, relay[0], relay[1], REALM, SECRET, port, port, kind, ep))


def wait_stun(port, proc, timeout=20.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.2)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit("stunnerd exited %d" % proc.returncode)
            msg, _ = binding_request()
            s.sendto(msg, ("127.0.0.1", port))
            try:
                s.recv(1500)
                return
            except socket.timeout:
                pass
        raise SystemExit("stunnerd does not answer on 127.0.0.1:%d" % port)
    finally:
        s.close()


def wait_resolved(port, peer_port, proc, timeout=30.0):
    """stunnerd resolves a STRICT_DNS cluster in the background: until it has, it refuses
    the peer the name stands for (the first CI run on record sent the script too early and
    saw an error for 127.0.0.1 over TURN-UDP and success over TURN-TCP seconds later: a failed
    first resolution is retried every 5 s). Wait, bounded, until a CreatePermission to it
    succeeds."""
    c = Client(port, "alice")
    try:
        if c.allocate(expect="any")[1] != SUCCESS:
            raise SystemExit("stunnerd refuses the probe's Allocate")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit("stunnerd exited %d" % proc.returncode)
            r = c.perm("127.0.0.1", peer_port)
            if r is not None and r[1] == SUCCESS:
                print("note: stunnerd admitted localhost after %.1f s"
                      % (timeout - deadline + time.monotonic()))
                return
            time.sleep(0.2)
        print("note: stunnerd has not admitted localhost after %.0f s" % timeout)
    finally:
        c.close()


def with_user(c, username, password):
    c.username, c.password = username, password
    c.key = c.key_of(password)
    c.nonce = None


def script(port, peer, outside, tcp=False):
    """The scripted requests; returns [(step, outcome)]. tcp: over TURN-TCP (the control
    steps, UDP relaying; no Send, whose answers would need stream framing here), with an
    RFC 6062 TCP Allocate too."""
    res = []
    make = StreamClient if tcp else Client
    pre = "TURN-TCP: " if tcp else ""
    if tcp:
        t = StreamClient(port, "dave")
        r = t.request(ALLOCATE, [(A_TRANSPORT, bytes([6, 0, 0, 0]))])
        res.append(("TURN-TCP: Allocate TCP (RFC 6062)", outcome(r)))
        t.close()
    bad = make(port, "bob")
    with_user(bad, bad.username, "d3Jvbmc=")
    res.append((pre + "Allocate, wrong password", outcome(bad.allocate(expect="any"))))
    bad.close()
    old = make(port, "carol")
    with_user(old, *credentials("carol", lifetime=-60))
    res.append((pre + "Allocate, expired credential", outcome(old.allocate(expect="any"))))
    old.close()

    c = make(port, "alice")
    r = c.allocate(expect="any")
    res.append((pre + "Allocate, good credential", outcome(r)))
    if r[1] != SUCCESS:
        return res
    pport = peer.sock.getsockname()[1]
    for ip in ("127.0.0.1", "10.9.9.9", "127.0.0.2"):
        res.append((pre + "CreatePermission %s" % ip, outcome(c.perm(ip, pport))))
    res.append((pre + "ChannelBind 127.0.0.1", outcome(c.bind("127.0.0.1", pport, 0x4000))))
    res.append((pre + "ChannelBind 10.9.9.9", outcome(c.bind("10.9.9.9", 3478, 0x4001))))
    res.append((pre + "ChannelBind 127.0.0.1 port outside the range",
                outcome(c.bind("127.0.0.1", outside.sock.getsockname()[1], 0x4002))))
    if tcp:
        c.close()
        return res
    # Send: one datagram to each peer, the echo's count and the answer tell what was relayed
    for name, ip, echo in (("admitted peer", "127.0.0.1", peer),
                           ("port outside the range", "127.0.0.1", outside)):
        before = echo.count
        c.send(ip, echo.sock.getsockname()[1], b"ping-" + name.encode())
        got = c.recv_data(timeout=1.0)
        time.sleep(0.1)
        res.append(("Send to %s" % name, "relayed" if echo.count > before else "not relayed"))
        res.append(("Data back from %s" % name, "received" if got else "none"))
    c.send("127.0.0.2", peer.sock.getsockname()[1], b"ping-refused")
    res.append(("Send to 127.0.0.2 (no permission)", "relayed" if c.recv_data(0.5) else
                "not relayed"))
    c.close()
    return res


def run_stunnerd(bindir, d, text, port, kind):
    conf = os.path.join(d, "stunnerd.yaml")
    with open(conf, "w") as f:
        f.write(text)
    log = open(os.path.join(d, "stunnerd.log"), "wb")
    p = subprocess.Popen([os.path.join(bindir, "stunnerd"), "-c", "file://" + conf,
                          "--udp-thread-num=1"], stdout=log, stderr=log,
                         stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"})
    try:
        wait_stun(port, p)
        if kind == "STRICT_DNS":
            wait_resolved(port, STATE["peer"].sock.getsockname()[1], p)
        return script_on(port)
    finally:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()


STATE = {}


def script_on(port):
    return (script(port, STATE["peer"], STATE["outside"]) +
            script(port, STATE["peer"], STATE["outside"], tcp=True))


def main():
    if not os.access(os.path.join(os.environ.get("top_builddir", "."), "turngated"), os.X_OK):
        print("skip: turngated not built")
        sys.exit(77)
    bindir = programs()
    rows = difference_rows()
    STATE["peer"] = Echo(free_port())
    STATE["outside"] = Echo(free_port())
    fail = 0
    st, tgr = [], []
    try:
        for kind in ("STATIC", "STRICT_DNS"):
            pre = "" if kind == "STATIC" else kind + ": "
            with tempfile.TemporaryDirectory(prefix="tg-stunnerd-") as d:
                relay = relay_range()
                port = free_port()
                text = make_config(d, port, STATE["peer"].sock.getsockname()[1], relay, kind)
                st += [(pre + k, v) for k, v in run_stunnerd(bindir, d, text, port, kind)]
                port = free_port()
                text = make_config(d, port, STATE["peer"].sock.getsockname()[1], relay, kind)
                tg = Daemon(d, text, workers=1).start()
                try:
                    tgr += [(pre + k, v) for k, v in script_on(port)]
                finally:
                    tg.stop()
    finally:
        STATE["peer"].close()
        STATE["outside"].close()
    tgd = dict(tgr)
    seen = set()
    for step, so in st:
        to = tgd.get(step, "not run")
        key = expected(step)
        exp = EXPECTED.get(key)
        line = "%-46s stunnerd: %-24s turngated: %s" % (step, so, to)
        if exp is not None:
            seen.add(key)
            if not any(r.startswith("| " + exp[2]) for r in rows):
                print("FAIL %s: no row \"%s\" in configuration.md" % (line, exp[2]))
                fail = 1
            elif (so, to) != exp[:2]:
                print("FAIL %s: expected the listed difference %r / %r" % (line, exp[0], exp[1]))
                fail = 1
            else:
                print("ok   %s (listed difference: %s)" % (line, exp[2]))
        elif so != to:
            print("FAIL %s: they differ" % line)
            fail = 1
        else:
            print("ok   %s" % line)
    if len(st) != len(tgr) or [s for s, _ in st] != [s for s, _ in tgr]:
        print("FAIL: the scripts ran different steps:\n  %r\n  %r" % (st, tgr))
        fail = 1
    for k in set(EXPECTED) - seen:
        print("FAIL: EXPECTED lists %r, a step that did not run" % k)
        fail = 1
    sys.exit(fail)


if __name__ == "__main__":
    main()
