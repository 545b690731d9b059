"""STUNner's own tool against turngate (#39): turncat v1.2.1 (a UDP tunnel through TURN, built
from the pinned Go module by scripts/build-stunner.sh) relays through turngated to a UDP echo
peer, with static auth and with ephemeral auth (a TURN REST credential minted from the
shared secret and given to turncat as user:password, what a REST client does).

turncat listens on udp://127.0.0.1:L; each datagram sent there must come back from the echo
peer through turngated, and turngated's counters must show the allocation. Without STUNner's
programs the test skips, or fails under CI=true (no network at test time: --offline).
"""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse

here = os.path.dirname(os.path.abspath(__file__))
top_srcdir = os.environ.get("top_srcdir", os.path.join(here, "..", ".."))
sys.path.insert(0, os.path.join(top_srcdir, "tests", "integration"))
sys.path.insert(0, here)
from harness_admin import (Daemon, check, credentials, free_port, relay_range,  # noqa: E402
                           run_tests)
from test_stunnerd_behaviour import Echo  # noqa: E402
from test_stunnerd_diff import programs  # noqa: E402

REALM = "stunner.l7mp.io"   # turncat's default realm for a turn:// URI
SECRET = "turncat-s3cret"
BIN = {}


def config(d, port, peer_port, auth):
    relay = relay_range()
    if auth == "static":
        a = "  type: static\n  realm: %s\n  credentials:\n    username: user1\n" \
            "    password: pass1\n" % REALM
    else:
        a = "  type: ephemeral\n  realm: %s\n  credentials:\n    secret: %s\n" % (REALM, SECRET)
    return ("version: v1\nadmin:\n  name: turncat\n  loglevel: all:INFO\n  workers: 1\n"
            "  admin_socket: %s/admin.sock\n  state_dir: %s\n  drain_timeout: 1\n"
            "  healthcheck_endpoint: \"\"\n  relay_port_min: %d\n  relay_port_max: %d\n"
            "auth:\n%slisteners:\n  - name: udp\n    protocol: TURN-UDP\n"
            "    address: 127.0.0.1\n    port: %d\n    routes: [echo]\n"
            "clusters:\n  - name: echo\n    type: STATIC\n    endpoints: [\"127.0.0.1:<%d-%d>\"]\n"
            % (d, d, relay[0], relay[1], a, port, peer_port, peer_port))


def tunnel(d, auth):
    echo = Echo(free_port())
    peer_port = echo.sock.getsockname()[1]
    port = free_port()
    daemon = Daemon(d, config(d, port, peer_port, auth), workers=1).start()
    if auth == "static":
        user, pw = "user1", "pass1"
    else:
        user, pw = credentials("turncat", secret=SECRET)
    local = free_port()
    log = open(os.path.join(d, "turncat.log"), "wb")
    tc = subprocess.Popen([os.path.join(BIN["dir"], "turncat"), "-l", "all:INFO",
                           "udp://127.0.0.1:%d" % local,
                           # a REST user name holds a ':': percent-encoded in the URI
                           "turn://%s:%s@127.0.0.1:%d" % (urllib.parse.quote(user, safe=""),
                                                          urllib.parse.quote(pw, safe=""), port),
                           "udp://127.0.0.1:%d" % peer_port],
                          stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                          env={"PATH": "/usr/bin:/bin"})
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.3)
    try:
        got = 0
        deadline = time.monotonic() + 20
        i = 0
        # turncat listens shortly after it starts and allocates per client: repeat until
        # echoes come back, then count 20 round trips (bounded in count and time)
        while got < 20 and time.monotonic() < deadline:
            check(tc.poll() is None, "turncat exited %s:\n%s" % (
                tc.returncode, open(os.path.join(d, "turncat.log"), errors="replace").read()))
            msg = b"turncat-%d" % i
            i += 1
            s.sendto(msg, ("127.0.0.1", local))
            try:
                while True:
                    data = s.recv(2048)
                    if data.startswith(b"turncat-"):
                        got += 1
                        break
            except socket.timeout:
                pass
        check(got >= 20, "%d of the datagrams came back through turncat and turngated "
              "(%s auth); turncat log:\n%s\nturngated log:\n%s"
              % (got, auth, open(os.path.join(d, "turncat.log"), errors="replace").read(),
                 daemon.stderr()))
        check(echo.count >= 20, "the echo peer saw %d datagrams" % echo.count)
        allocs = daemon.admin({"cmd": "allocations"})
        check("127.0.0.1" in str(allocs), "turngated lists no allocation: %r" % (allocs,))
    finally:
        s.close()
        tc.send_signal(signal.SIGTERM)
        try:
            tc.wait(5)
        except subprocess.TimeoutExpired:
            tc.kill()
            tc.wait()
        log.close()
        daemon.stop(check_clean=False)
        echo.close()


def test_turncat_static(d):
    tunnel(d, "static")


def test_turncat_ephemeral(d):
    tunnel(d, "ephemeral")


if __name__ == "__main__":
    if not os.access(os.path.join(os.environ.get("top_builddir", "."), "turngated"), os.X_OK):
        print("skip: turngated not built")
        sys.exit(77)
    BIN["dir"] = programs()
    run_tests([test_turncat_static, test_turncat_ephemeral])
