"""Integration helpers for the master tests: run turngated on loopback, talk to its admin socket.

Every wait is bounded; nothing depends on timing beyond generous timeouts. A daemon's stderr
goes to a file that stop() scans for sanitizer reports, assertion failures and unexpected
worker deaths, so every test that stops a daemon also checks it stayed healthy.
"""
import ctypes
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

BUILD = os.environ.get("top_builddir", os.getcwd())
TURNGATED = os.path.join(BUILD, "turngated")
TURNGATECTL = os.path.join(BUILD, "turngatectl")

BAD_PATTERNS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                "Assertion", "[crit]", "AddressSanitizer:DEADLYSIGNAL")


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def wait_for(pred, what, timeout=30.0):
    """Polls pred() until it returns something true (returned), else Failure after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise Failure("timed out waiting for " + what)


def need_tool(name, package):
    """Path of the program name. Missing: exit 77 (automake's skip) with the reason, or 1 in
    CI (CI=true), where every tool must be installed (scripts/setup.sh)."""
    import shutil
    path = shutil.which(name)
    if path is None:
        ci = os.environ.get("CI") == "true"
        print("%s: %s not installed (Debian package %s, scripts/setup.sh)%s"
              % (os.path.basename(sys.argv[0]), name, package, "" if ci else ": skipped"))
        sys.exit(1 if ci else 77)
    return path


def free_port():
    """A port free for both UDP and TCP on 127.0.0.1 (TURN-UDP and TURN-TCP may share it),
    below the default relay port range (a listener or HTTP port in it is a config error)."""
    for _ in range(200):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        port = u.getsockname()[1]
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if port >= 49152:
                continue
            t.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            t.close()
            u.close()
    raise Failure("no free port")


def echo_peer():
    """A UDP echo on 127.0.0.1 (daemon thread, ends with the test process); its port."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))

    def loop():
        while True:
            data, addr = s.recvfrom(4096)
            s.sendto(data, addr)
    threading.Thread(target=loop, daemon=True).start()
    return s.getsockname()[1]


def listener_yaml(name, port, proto="TURN-UDP"):
    return ("  - name: %s\n    protocol: %s\n    address: 127.0.0.1\n    port: %d\n"
            "    routes: [loopback]\n" % (name, proto, port))


def config_yaml(sock, listeners, workers=2, secret="s3cret", loglevel="all:INFO",
                extra_auth="", extra_admin=""):
    """listeners: list of (name, port, proto)."""
    if "healthcheck_endpoint" not in extra_admin:
        extra_admin = "  healthcheck_endpoint: \"\"\n" + extra_admin
    text = ("version: v1\n"
            "admin:\n  name: test\n  loglevel: %s\n"
            "  workers: %d\n  admin_socket: %s\n  drain_timeout: 10\n%s"
            "auth:\n  type: ephemeral\n  realm: test.realm\n  credentials:\n    secret: %s\n%s"
            "listeners:\n" % (loglevel, workers, sock, extra_admin, secret, extra_auth))
    for name, port, proto in listeners:
        text += listener_yaml(name, port, proto)
    text += ("clusters:\n  - name: loopback\n    type: STATIC\n"
             "    endpoints: [127.0.0.0/8]\n")
    return text


class Daemon:
    def __init__(self, workdir, config_text, args=(), workers=2):
        self.dir = workdir
        self.conf = os.path.join(workdir, "turngate.yaml")
        self.sock = os.path.join(workdir, "admin.sock")
        self.errpath = os.path.join(workdir, "stderr.log")
        self.workers = workers
        self.args = list(args)
        self.proc = None
        self.allowed_deaths = 0
        self.write_config(config_text)

    def write_config(self, text):
        tmp = self.conf + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, self.conf)

    def start(self, wait=True):
        self.err = open(self.errpath, "ab")
        self.proc = subprocess.Popen([TURNGATED, "-c", self.conf] + self.args,
                                     stdin=subprocess.DEVNULL, stdout=self.err,
                                     stderr=self.err)
        if wait:
            self.wait_running(self.workers)
        return self

    def wait_running(self, n, timeout=30.0):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            check(self.proc.poll() is None,
                  "turngated exited early (%s):\n%s" % (self.proc.returncode, self.stderr()))
            try:
                last = self.admin({"cmd": "status"})
                if last.get("workers", {}).get("running") == n:
                    return last
            except OSError:
                pass
            time.sleep(0.05)
        raise Failure("daemon not running %d workers within %.0fs (last status %r)\n%s"
                      % (n, timeout, last, self.stderr()))

    def admin_raw(self, data, timeout=30.0):
        """Sends raw bytes, returns the raw reply line (bytes, without newline)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(self.sock)
            s.sendall(data)
            buf = b""
            while b"\n" not in buf:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            return buf.split(b"\n", 1)[0]
        finally:
            s.close()

    def admin(self, req):
        return json.loads(self.admin_raw(json.dumps(req).encode() + b"\n"))

    def ctl(self, *args):
        r = subprocess.run([TURNGATECTL, "-s", self.sock] + list(args), capture_output=True,
                           text=True, timeout=60)
        return r.returncode, r.stdout, r.stderr

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stderr(self):
        try:
            with open(self.errpath, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def wait_exit(self, timeout=60.0):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise Failure("turngated did not exit within %.0fs\n%s" % (timeout, self.stderr()))

    def stop(self, check_clean=True):
        """SIGTERM (graceful drain), wait, then scan stderr. Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.wait_exit()
        self.err.close()
        if check_clean:
            self.scan()
        return rc

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def scan(self):
        text = self.stderr()
        for pat in BAD_PATTERNS:
            check(pat not in text, "daemon log contains %r:\n%s" % (pat, text))
        deaths = text.count("killed by signal")
        check(deaths <= self.allowed_deaths,
              "unexpected worker deaths (%d > %d):\n%s" % (deaths, self.allowed_deaths, text))


# ---- STUN -------------------------------------------------------------------------------

MAGIC = 0x2112A442


def binding_request():
    tid = os.urandom(12)
    return struct.pack("!HHI", 0x0001, 0, MAGIC) + tid, tid


def parse_xor_mapped(msg, tid):
    if len(msg) < 20:
        return None
    mtype, mlen, magic = struct.unpack("!HHI", msg[:8])
    if mtype != 0x0101 or magic != MAGIC or msg[8:20] != tid:
        return None
    pos = 20
    while pos + 4 <= 20 + mlen and pos + 4 <= len(msg):
        atype, alen = struct.unpack("!HH", msg[pos:pos + 4])
        val = msg[pos + 4:pos + 4 + alen]
        if atype == 0x0020 and alen >= 8 and val[1] == 1:
            port = struct.unpack("!H", val[2:4])[0] ^ (MAGIC >> 16)
            ip = struct.unpack("!I", val[4:8])[0] ^ MAGIC
            return (socket.inet_ntoa(struct.pack("!I", ip)), port)
        pos += 4 + ((alen + 3) & ~3)
    return None


def stun_binding_udp(port, timeout=2.0, tries=3):
    """Sends a Binding request to 127.0.0.1:port; returns (ip, port) mapped, or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        for _ in range(tries):
            req, tid = binding_request()
            s.sendto(req, ("127.0.0.1", port))
            try:
                while True:
                    data, _ = s.recvfrom(2048)
                    got = parse_xor_mapped(data, tid)
                    if got is not None:
                        return got
            except socket.timeout:
                continue
        return None
    finally:
        s.close()


def stun_binding_tcp(port, timeout=3.0):
    """Binding over a new TCP connection; returns the mapped address or None."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError:
        return None
    try:
        req, tid = binding_request()
        s.sendall(req)
        buf = b""
        while len(buf) < 20 or len(buf) < 20 + struct.unpack("!H", buf[2:4])[0]:
            chunk = s.recv(4096)
            if not chunk:
                return None
            buf += chunk
        return parse_xor_mapped(buf, tid)
    except OSError:
        return None
    finally:
        s.close()


CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000


def unshare(flags):
    """This process, and what it starts from now on, in new namespaces (CLONE_NEW* flags;
    root). A new network namespace gets its lo up; a new mount namespace is made private
    first, so that nothing mounted in it reaches the host's."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), "unshare(0x%x)" % flags)
    if flags & CLONE_NEWNS:
        subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    if flags & CLONE_NEWNET:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def run_tests_as_root(tests, why, setup):
    """run_tests after setup() (which may unshare), or, when not root, SKIP (exit 77) with
    the reason: why root is needed."""
    if os.geteuid() != 0:
        print("SKIP: %s needs root: %s" % (os.path.basename(sys.argv[0]), why))
        sys.exit(77)
    setup()
    run_tests(tests)


def run_tests(tests):
    """Runs each test function with a fresh temp dir; exit status 1 on any failure."""
    failed = 0
    for fn in tests:
        with tempfile.TemporaryDirectory(prefix="tg-master-") as d:
            t0 = time.monotonic()
            try:
                fn(d)
                print("ok   %s (%.1fs)" % (fn.__name__, time.monotonic() - t0))
            except Exception as e:  # report every failure, keep running the rest
                failed += 1
                print("FAIL %s: %s: %s" % (fn.__name__, type(e).__name__, e))
    sys.stdout.flush()
    sys.exit(1 if failed else 0)
