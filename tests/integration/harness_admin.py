"""The test library of the Python tests: run turngated, talk to it, be its clients and peers.

One module for every Python test (integration, deploy, interop, bench): the daemon fixture
(Daemon: start, stop, reload, admin, ctl; its stderr scanned for sanitizer reports,
assertion failures and unexpected worker deaths at every stop), configurations (config,
config_yaml), ports (free_port, relay_range), the STUN/TURN encoding written once (build,
parse, xor_addr, MESSAGE-INTEGRITY, FINGERPRINT), TURN clients over UDP (Client) and
streams (StreamClient: TCP, TLS, DTLS), peers (Peer, TcpPeer), TLS certificates and
connections, and namespaces (unshare). Every receive has a timeout and every loop a bound;
nothing depends on timing beyond generous timeouts.
"""
import base64
import ctypes
import errno
import fcntl
import hashlib
import hmac
import json
import os
import random
import re
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
import zlib

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


def listener_port_ok(port, avoid=None):
    """port may be a test daemon's listener: below the default relay port range and
    outside avoid (lo, hi), a test's own relay port range below 49152 (a listener or HTTP
    port in a relay port range is a config error)."""
    return port < 49152 and (avoid is None or not avoid[0] <= port <= avoid[1])


PORT_LOCK = "/tmp/turngate-test-ports"  # the reservations' file; TG_PORT_LOCK names another
_RESERVED = set()     # the ports this process holds a reservation on (free_port gave them)
_LOCK = [None, 0]     # [fd, pid] of this process's open file description of PORT_LOCK


class _Flock(ctypes.Structure):
    _fields_ = [("l_type", ctypes.c_short), ("l_whence", ctypes.c_short),
                ("l_start", ctypes.c_int64), ("l_len", ctypes.c_int64), ("l_pid", ctypes.c_int)]


def _port_lock_fd():
    """This process's descriptor of the reservations' file, opened once per process (a
    forked child opens its own, so that its draws and its parent's exclude each other).
    Opened without O_CREAT when it exists: with fs.protected_regular, O_CREAT on another
    user's file in /tmp fails even for root."""
    if _LOCK[0] is not None and _LOCK[1] == os.getpid():
        return _LOCK[0]
    if _LOCK[0] is not None:
        os.close(_LOCK[0])      # the parent's description: its locks stay the parent's
        _LOCK[0] = None
    path = os.environ.get("TG_PORT_LOCK", PORT_LOCK)
    for _ in range(3):      # bounded: lost a create race at most twice
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
                os.fchmod(fd, 0o666)    # whatever the umask: every user's tests share it
            except FileExistsError:
                continue
            except OSError as e:
                raise Failure("cannot create the port reservations' file %s: %s (TG_PORT_LOCK "
                              "names another)" % (path, e.strerror))
        except OSError as e:
            raise Failure("cannot open the port reservations' file %s: %s (TG_PORT_LOCK "
                          "names another)" % (path, e.strerror))
        _LOCK[:] = [fd, os.getpid()]
        return fd
    raise Failure("cannot open the port reservations' file %s" % path)


def reserve_port(port):
    """True when this process now holds port's reservation, False when it or another live
    process already does. A reservation is an open file description lock (F_OFD_SETLK) on
    byte `port` of PORT_LOCK, shared with the C harness (harness_port_reserve): it lasts
    until the process exits, and the kernel drops it then however the process ended, so a
    crashed test never leaves one behind. It keeps two tests running at once (make -j2
    check) from drawing the same port before either binds it, or while a daemon is down."""
    if port in _RESERVED:
        return False
    lk = _Flock(fcntl.F_WRLCK, os.SEEK_SET, port, 1, 0)
    try:
        fcntl.fcntl(_port_lock_fd(), fcntl.F_OFD_SETLK, bytes(lk))
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise Failure("cannot reserve port %d: %s" % (port, e.strerror))
    _RESERVED.add(port)
    return True


def late_port_range():
    """Ports for a listener bound long after it is drawn (a later config, a restart): below
    the kernel's port-0 range, so that no client socket of this or a parallel test can take
    it meanwhile, and above the tests' fixed ports (test_scale's relay window ends at 24383,
    relay_range()'s at 29999, test_scale_respawn's listeners at 31003). None where that
    leaves no range. TG_LATE_PORTS=LO-HI sets another (test_port_reserve's tiny ones)."""
    env = os.environ.get("TG_LATE_PORTS")
    if env:
        m = re.fullmatch(r"(\d+)-(\d+)", env)
        check(m and 1 <= int(m.group(1)) <= int(m.group(2)) <= 65535,
              "TG_LATE_PORTS=%s: not LO-HI" % env)
        return int(m.group(1)), int(m.group(2))
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return (31100, low - 1) if low > 31200 else None


def free_port(addr="127.0.0.1", avoid=None, late=False):
    """A port free for both UDP and TCP on addr (TURN-UDP and TURN-TCP may share it) that
    may be a listener's (listener_port_ok), reserved for this process (reserve_port) until
    it exits: no other draw of this process or of a test running beside it gives it again
    (the kernel draws port 0's port at random, so two draws for one config, nothing bound
    to either yet, could give the same port, about 1 in 1,600 for five listeners).
    From late_port_range() where there is one (every port of it tried once, from a random
    one on), below the kernel's port-0 range: a port drawn from that range could be taken
    before the daemon binds it by any client socket of a test running beside this one (a
    connect, a bind to port 0: test_security_flood's TCP listener was, in CI). Where that
    range has none free, or there is none, the kernel draws (port 0); late: no such
    fallback, for a port the daemon binds only later (a later config, a restart)."""
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    span = late_port_range()
    if span is not None:
        n = span[1] - span[0] + 1
        start, tries = random.randrange(n), min(n, 4096)
        for i in range(tries):
            port = _take_port(fam, addr, span[0] + (start + i) % n, avoid)
            if port:
                return port
        if late:
            raise Failure("no free port in %d-%d: %d tried, each bound or reserved by this "
                          "test or another running one (%s)"
                          % (span[0], span[1], tries, os.environ.get("TG_PORT_LOCK", PORT_LOCK)))
    for _ in range(200):
        port = _take_port(fam, addr, 0, avoid)
        if port:
            return port
    raise Failure("no free port: 200 tried, each bound or reserved by this test or another "
                  "running one (%s)" % os.environ.get("TG_PORT_LOCK", PORT_LOCK))


def _take_port(fam, addr, want, avoid):
    """Port want (0: the kernel's pick) when it is free for UDP and TCP on addr, may be a
    listener's and is now reserved for this process; else None."""
    u = socket.socket(fam, socket.SOCK_DGRAM)
    t = socket.socket(fam, socket.SOCK_STREAM)
    try:
        u.bind((addr, want))
        port = u.getsockname()[1]
        if not listener_port_ok(port, avoid) or port in _RESERVED:
            return None
        t.bind((addr, port))
        return port if reserve_port(port) else None
    except OSError:
        return None
    finally:
        t.close()
        u.close()


def peer_socket(ip="127.0.0.1", kind=socket.SOCK_DGRAM, reuse=False, avoid=()):
    """A socket bound to ip, port 0, for a peer (a UDP echo, a TCP server), on no port
    free_port gave this process. A daemon's own listener and HTTP ports are refused as
    peers in every protocol (worker/self.c: ChannelBind and Connect 403, datagrams
    dropped), and the port of a TURN-TCP listener or an HTTP endpoint is free for UDP, that
    of a TURN-UDP or DTLS listener for TCP: a peer the kernel put there (about 1 in 28,000)
    would be refused. reuse: SO_REUSEADDR before the bind. avoid: more ports not to take."""
    fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
    held = []
    try:
        for _ in range(50):     # bounded; the kernel's choices held, so each try is new
            s = socket.socket(fam, kind)
            if reuse:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((ip, 0))
            if s.getsockname()[1] not in _RESERVED and s.getsockname()[1] not in avoid:
                return s
            held.append(s)
        raise Failure("no peer port outside the ports free_port gave")
    finally:
        for h in held:
            h.close()


def hostport(addr):
    """"ip:port" or "[ip]:port", as the admin listing writes addresses."""
    return ("[%s]:%d" if ":" in addr[0] else "%s:%d") % addr[:2]


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


def line_col(text, needle, name="check.yaml"):
    """NAME:LINE:COL: of the value after needle in text, a config written to name (1-based,
    as the loader reports a node's position)."""
    for i, ln in enumerate(text.splitlines()):
        if needle in ln:
            return "%s:%d:%d:" % (name, i + 1, ln.index(needle) + len(needle) + 1)
    raise AssertionError(needle)


def start_fails(d, text, what):
    """Runs turngated on config text in d; it must exit non-zero within 30 s. Its log."""
    path = os.path.join(d, "turngate.yaml")
    with open(path, "w") as f:
        f.write(text)
    try:
        r = subprocess.run([TURNGATED, "-c", path], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as e:
        raise Failure("%s: turngated started and kept running (stopped after 30 s)" % what) from e
    check(r.returncode == 1, "%s: turngated exited %d, not 1:\n%s" % (what, r.returncode, r.stderr))
    for pat in BAD_PATTERNS:  # a refused start is clean too (sanitizer builds: no leak)
        check(pat not in r.stderr, "%s: %r in the log:\n%s" % (what, pat, r.stderr))
    return r.stderr


class Daemon:
    def __init__(self, workdir, config_text, args=(), workers=2, env=None, wrap=()):
        """wrap: a command that runs the daemon (its arguments before turngated's), one that
        execs it in place, so that proc is the master (unshare -T …)."""
        self.dir = workdir
        self.env = None if env is None else dict(os.environ, **env)
        self.conf = os.path.join(workdir, "turngate.yaml")
        self.sock = os.path.join(workdir, "admin.sock")
        self.errpath = os.path.join(workdir, "stderr.log")
        self.workers = workers
        self.args = list(args)
        self.wrap = list(wrap)
        self.proc = None
        self.allowed_deaths = 0
        self.write_config(config_text)

    def write_config(self, text):
        tmp = self.conf + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, self.conf)

    def reload(self, text=None):
        """Writes text as the new configuration (when given) and reloads through the admin
        socket; fails the test unless the reload succeeded. Returns the reply."""
        if text is not None:
            self.write_config(text)
        r = self.admin({"cmd": "reload"})
        check(r.get("ok") is True, "reload failed: %r" % (r,))
        return r

    def allocations(self):
        """The admin listing of the allocations (a list of dicts)."""
        return self.admin({"cmd": "allocations"})["allocations"]

    def start(self, wait=True):
        self.err = open(self.errpath, "ab")
        self.proc = subprocess.Popen(self.wrap + [TURNGATED, "-c", self.conf] + self.args,
                                     stdin=subprocess.DEVNULL, stdout=self.err,
                                     stderr=self.err, env=self.env)
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

    def kill_all(self):
        """kill -9 of the master and every worker at once (a crash that tells nobody);
        waits for the master. start() starts the daemon again on the same files."""
        pids = [w["pid"] for w in self.admin({"cmd": "workers"})["workers"]]
        self.proc.kill()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)
        self.err.close()

    def scan(self):
        text = self.stderr()
        for pat in BAD_PATTERNS:
            check(pat not in text, "daemon log contains %r:\n%s" % (pat, text))
        deaths = text.count("killed by signal")
        check(deaths <= self.allowed_deaths,
              "unexpected worker deaths (%d > %d):\n%s" % (deaths, self.allowed_deaths, text))


# ---- STUN: the one encoder and decoder of the Python tests (RFC 8489, 8656, 6062) ----------

MAGIC = 0x2112A442
SECRET = "sec-s3cret"   # config()'s ephemeral secret and realm (config_yaml has its own)
REALM = "sec.realm"

# methods
BINDING, ALLOCATE, REFRESH, SEND, DATA, CREATE_PERMISSION, CHANNEL_BIND = 1, 3, 4, 6, 7, 8, 9
CONNECT, CONNECTION_BIND = 0x000A, 0x000B
# attributes
A_USERNAME, A_MI, A_ERROR, A_CHANNEL, A_LIFETIME = 0x0006, 0x0008, 0x0009, 0x000C, 0x000D
A_PEER, A_DATA, A_REALM, A_NONCE, A_RELAYED = 0x0012, 0x0013, 0x0014, 0x0015, 0x0016
A_REQ_FAMILY, A_EVEN_PORT, A_TRANSPORT, A_TOKEN = 0x0017, 0x0018, 0x0019, 0x0022
A_XOR_MAPPED, A_CONNECTION_ID = 0x0020, 0x002A
A_ADDITIONAL_FAMILY, A_FINGERPRINT = 0x8000, 0x8028

REQUEST, INDICATION, SUCCESS, ERROR = 0x000, 0x010, 0x100, 0x110


def upgrade(daemon, workers=2):
    """turngatectl upgrade (the running binary again); waits for the new master to serve
    with every worker and for the old one to exit. Returns the new master's pid (stop it
    with stop_master)."""
    old = daemon.admin({"cmd": "status"})["pid"]
    rc, out, err = daemon.ctl("upgrade")
    check(rc == 0, "turngatectl upgrade: rc %d\n%s%s\n%s" % (rc, out, err, daemon.stderr()))
    pid = int(out.strip().splitlines()[-1])
    check(pid != old, "no new master")

    def serving():
        st = daemon.admin({"cmd": "status"})
        return st["pid"] == pid and st["workers"]["running"] == workers
    try:
        wait_for(serving, "the new master (pid %d) to serve" % pid)
        wait_for(lambda: not alive(old), "the old master (pid %d) to exit" % old)
    except Failure:
        stop_master(daemon, pid)    # the caller has no pid to stop
        raise
    return pid


def session_records(d, name="sessions.jsonl"):
    """The session records written so far to d/name (admin.session_records.file). A last
    line without its newline is one the master is still writing: left for the next
    read."""
    try:
        with open(os.path.join(d, name)) as f:
            return [json.loads(line) for line in f
                    if line.endswith("\n") and line.strip()]
    except FileNotFoundError:
        return []


# Shifts the wall clock (CLOCK_REALTIME, gettimeofday, time) of the process it is preloaded
# into by the seconds written in the file $TG_SHIFT_FILE, read at each call; the monotonic
# clock is untouched: a clock stepped by NTP or an operator, seen by one process only.
SHIFT_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long shift(void)
{
	const char *p = getenv("TG_SHIFT_FILE");
	FILE *f = p ? fopen(p, "r") : NULL;
	long s = 0;

	if (f) {
		if (fscanf(f, "%ld", &s) != 1)
			s = 0;
		fclose(f);
	}
	return s;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
	static int (*real)(clockid_t, struct timespec *);
	int rc;

	if (!real)
		real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
	rc = real(id, ts);
	if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
		ts->tv_sec += shift();
	return rc;
}

int gettimeofday(struct timeval *tv, void *tz)
{
	struct timespec ts;

	(void)tz;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return -1;
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *t)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (t)
		*t = ts.tv_sec;
	return ts.tv_sec;
}
"""


def clock_shift(d):
    """A preloaded shim (SHIFT_C, built in d) that steps a daemon's wall clock: (env for
    Daemon, shift) where shift(seconds) steps it from then on."""
    src, lib, path = (os.path.join(d, n) for n in ("shift.c", "shift.so", "shift"))
    with open(src, "w") as f:
        f.write(SHIFT_C)
    r = subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-o", lib, src,
                        "-ldl"], capture_output=True, text=True)
    check(r.returncode == 0, "cannot build the clock shim: %s" % r.stderr)

    def shift(seconds):
        with open(path, "w") as f:
            f.write("%d\n" % seconds)
    shift(0)
    # the sanitizer build's runtime would refuse to come second
    return ({"LD_PRELOAD": lib, "TG_SHIFT_FILE": path,
             "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"},
            shift)


def alive(pid):
    """Whether process pid runs (a zombie does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def stop_master(daemon, pid):
    """SIGTERM to the master pid that an upgrade started (None or the daemon's own
    process: nothing) and waits until it exits."""
    if pid is None or pid == daemon.proc.pid:
        return
    try:
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not alive(pid), "the master (pid %d) to exit" % pid)
    except ProcessLookupError:
        pass


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


def header(method, cls, length, tid):
    """The 20-byte STUN header of a message of `length` attribute bytes."""
    mtype = (method & 0xF) | ((method & 0x70) << 1) | ((method & 0xF80) << 2) | cls
    return struct.pack("!HHI", mtype, length, MAGIC) + tid


def fingerprint_of(msg):
    """FINGERPRINT's value for msg (a whole message whose length already counts it)."""
    return (zlib.crc32(msg) ^ 0x5354554E) & 0xFFFFFFFF


def integrity(method, cls, tid, body, key):
    """The MESSAGE-INTEGRITY attribute that follows body (the attributes before it)."""
    hdr = header(method, cls, len(body) + 24, tid)
    return attr(A_MI, hmac.new(key, hdr + body, hashlib.sha1).digest())


def build(method, cls, tid, attrs, key=None, after_mi=(), fingerprint=False):
    """A STUN message: attrs [(type, value)], then MESSAGE-INTEGRITY when key is given, then
    the attributes of after_mi (which the server must ignore), then FINGERPRINT."""
    body = b"".join(attr(t, v) for t, v in attrs)
    if key is not None:
        body += integrity(method, cls, tid, body, key)
    body += b"".join(attr(t, v) for t, v in after_mi)
    if fingerprint:
        crc = fingerprint_of(header(method, cls, len(body) + 8, tid) + body)
        body += attr(A_FINGERPRINT, struct.pack("!I", crc))
    return header(method, cls, len(body), tid) + body


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
    return None if v is None else (v[2] & 7) * 100 + v[3]


def mi_ok(raw, key):
    """True when raw (a whole STUN message) carries a MESSAGE-INTEGRITY made with key."""
    pos = 20
    while pos + 4 <= len(raw):
        t, ln = struct.unpack("!HH", raw[pos:pos + 4])
        if t == A_MI:
            hdr = raw[:2] + struct.pack("!H", pos + 24 - 20) + raw[4:20]
            mac = hmac.new(key, hdr + raw[20:pos], hashlib.sha1).digest()
            return hmac.compare_digest(mac, raw[pos + 4:pos + 24])
        pos += 4 + ((ln + 3) & ~3)
    return False


def channel_data(channel, payload, pad=False):
    """A ChannelData message; pad: to 4 bytes, as a stream carries it (RFC 8656 12.5)."""
    return (struct.pack("!HH", channel, len(payload)) + payload
            + (b"\0" * (-len(payload) % 4) if pad else b""))


def take_frame(buf):
    """The first whole frame of bytes read from a stream (a STUN message, or ChannelData
    with its padding to 4 bytes, RFC 8656 12.5): (frame, the rest of buf), or (None, buf)
    while it is incomplete."""
    if len(buf) < 4:
        return None, buf
    ln = struct.unpack("!H", buf[2:4])[0]
    need = 4 + ((ln + 3) & ~3) if 0x40 <= buf[0] <= 0x7F else 20 + ln
    if len(buf) < need:
        return None, buf
    return buf[:need], buf[need:]


def channel_payload(frame):
    """(channel, payload) of a ChannelData message (padded or not), or None for a STUN
    message."""
    if not 0x40 <= frame[0] <= 0x7F:
        return None
    ch, ln = struct.unpack("!HH", frame[:4])
    return ch, frame[4:4 + ln]


def stream_framed(record):
    """A record's message as a stream carries it: over DTLS a ChannelData message need not
    be padded to 4 bytes (RFC 8656 12.5), on a stream it is."""
    if len(record) >= 4 and 0x40 <= record[0] <= 0x4F:
        total = 4 + struct.unpack("!H", record[2:4])[0]
        return record[:total] + b"\0" * (-total % 4)
    return record


def credentials(user="alice", lifetime=3600, secret=SECRET):
    """Ephemeral (TURN REST) username and password for user, valid for lifetime seconds."""
    username = "%d:%s" % (int(time.time()) + lifetime, user)
    pw = base64.b64encode(hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest())
    return username, pw.decode()


def binding_request():
    tid = os.urandom(12)
    return build(BINDING, REQUEST, tid, []), tid


def parse_xor_mapped(msg, tid):
    """The XOR-MAPPED-ADDRESS of a Binding success with transaction id tid, or None."""
    p = parse(msg)
    if p is None or p[0] != BINDING or p[1] != SUCCESS or p[2] != tid:
        return None
    for val in p[3].get(A_XOR_MAPPED, []):
        if len(val) >= (8 if val[1] == 1 else 20):
            return parse_xor_addr(val, tid)
    return None


def stun_binding_udp(port, timeout=2.0, tries=3, addr="127.0.0.1"):
    """Sends a Binding request to addr:port; returns (ip, port) mapped, or None."""
    s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        for _ in range(tries):
            req, tid = binding_request()
            s.sendto(req, (addr, port))
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


# ---- TURN clients ---------------------------------------------------------------------------


class Client:
    """One TURN client on one UDP socket (one 5-tuple) against server:port, from the
    loopback address bind (another /24 than a flood's keeps clear of its rate limit). An
    IPv6 server gets an IPv6 socket (bound to ::1 unless bind says otherwise).

    secret and realm: the daemon's (config()'s by default). tries: how often a request is
    sent before it counts as lost (1 where a retransmission would make counters inexact).
    fingerprint: every request carries FINGERPRINT. timeout: seconds a try waits for its
    response. sent counts the messages sent."""

    def __init__(self, port, user="alice", server="127.0.0.1", bind=None, secret=SECRET,
                 realm=REALM, tries=3, fingerprint=False, timeout=2.0):
        v6 = ":" in server
        self.server = (server, port)
        self.sock = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((bind or ("::1" if v6 else "127.0.0.1"), 0))
        self.realm, self.tries, self.fingerprint = realm, tries, fingerprint
        self.timeout = timeout
        self.sent = 0
        self.username, self.password = credentials(user, secret=secret)
        self.nonce = None
        self.key = self.key_of(self.password)

    def key_of(self, password):
        """The long-term key (RFC 8489 9.2.2) of this client's username with password."""
        return hashlib.md5(("%s:%s:%s" % (self.username, self.realm, password))
                           .encode()).digest()

    def close(self):
        self.sock.close()

    def send_raw(self, msg):
        self.sock.sendto(msg, self.server)
        self.sent += 1

    def transact(self, msg, tid, timeout=None, tries=None):
        """Sends msg, returns the parsed response with transaction id tid, or None."""
        for _ in range(tries or self.tries):
            self.send_raw(msg)
            deadline = time.monotonic() + (timeout or self.timeout)
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

    def build(self, method, cls, tid, attrs, key=None, after_mi=()):
        return build(method, cls, tid, attrs, key, after_mi, self.fingerprint)

    def auth_attrs(self):
        return [(A_USERNAME, self.username.encode()), (A_REALM, self.realm.encode()),
                (A_NONCE, self.nonce)]

    def request(self, method, attrs, after_mi=(), auth=True):
        """An authenticated request (learning the nonce from a 401/438 first when needed).
        auth=False: sent once as is (no credentials, no retry)."""
        for _ in range(3):
            tid = os.urandom(12)
            full = list(attrs)
            key = None
            if auth and self.nonce is not None:
                full += self.auth_attrs()
                key = self.key
            r = self.transact(self.build(method, REQUEST, tid, full, key, after_mi), tid)
            check(r is not None, "no response to method %d" % method)
            code = error_code(r[3])
            if auth and code in (401, 438) and A_NONCE in r[3] and (
                    key is None or code == 438):
                self.nonce = r[3][A_NONCE][0]
                continue
            return r
        raise Failure("could not authenticate (last %r)" % (r,))

    def challenge(self):
        """An unauthenticated Allocate: checks the 401 and learns the nonce from it."""
        r = self.request(ALLOCATE, [(A_TRANSPORT, bytes([17, 0, 0, 0]))], auth=False)
        check(error_code(r[3]) == 401 and A_NONCE in r[3],
              "first Allocate not challenged: %r" % (r,))
        self.nonce = r[3][A_NONCE][0]

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

    def record(self, daemon):
        """The daemon's admin listing entry of this client's allocation (by the client's
        address), or None."""
        me = hostport(self.sock.getsockname())
        found = [a for a in daemon.allocations() if a["client"] == me]
        check(len(found) <= 1, "two allocations of %s" % me)
        return found[0] if found else None

    def refresh(self, lifetime):
        """Refresh with LIFETIME lifetime (0 releases); the error code (None = success)."""
        r = self.request(REFRESH, [(A_LIFETIME, struct.pack("!I", lifetime))])
        return error_code(r[3])

    def release(self):
        """Refresh with LIFETIME 0; fails the test unless it succeeded."""
        check(self.refresh(0) is None, "Refresh(0) failed")

    def perm(self, ip, port=9, after_mi=()):
        return self._peer_request(CREATE_PERMISSION, [], ip, port, after_mi)

    def _peer_request(self, method, extra, ip, port, after_mi=()):
        # XOR-PEER-ADDRESS of IPv6 is XORed with the transaction id: a fresh one per try.
        # after_mi values may be callables of the tid for the same reason.
        for _ in range(3):
            tid = os.urandom(12)
            full = list(extra) + [(A_PEER, xor_addr(ip, port, tid))] + self.auth_attrs()
            post = [(t, v(tid) if callable(v) else v) for t, v in after_mi]
            r = self.transact(self.build(method, REQUEST, tid, full, self.key, post), tid)
            check(r is not None, "no response to method %d" % method)
            if error_code(r[3]) == 438:
                self.nonce = r[3][A_NONCE][0]
                continue
            return r
        raise Failure("stale nonce loop")

    def bind(self, ip, port, channel):
        return self._peer_request(CHANNEL_BIND, [(A_CHANNEL, struct.pack("!HH", channel, 0))],
                                  ip, port)

    def send_indication(self, ip, port, payload):
        tid = os.urandom(12)
        return self.build(SEND, INDICATION, tid, [(A_PEER, xor_addr(ip, port, tid)),
                                                  (A_DATA, payload)])

    def send(self, ip, port, payload):
        self.send_raw(self.send_indication(ip, port, payload))

    def channel_data(self, channel, payload):
        self.send_raw(channel_data(channel, payload))

    def frames(self, n, timeout=2.0):
        """Up to n Data indications or ChannelData that arrive within timeout:
        [("chan", channel, data) or ("data", (ip, port) of the sender, data)]."""
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(70000)
            except OSError:
                break
            if 0x40 <= data[0] <= 0x7F:
                ch, ln = struct.unpack("!HH", data[:4])
                got.append(("chan", ch, data[4:4 + ln]))
                continue
            p = parse(data)
            if p and p[0] == DATA and p[1] == INDICATION:
                got.append(("data", parse_xor_addr(p[3][A_PEER][0], p[2]), p[3][A_DATA][0]))
        return got

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


class StreamClient(Client):
    """Client's requests on one stream: TURN-TCP to 127.0.0.1:port, or sock, a connected
    stream of another kind (tls_connect, dtls_connect). Messages go back to back, ChannelData
    padded to 4 bytes (RFC 8656 11.5); each request is sent once. Also the RFC 6062 requests;
    after a ConnectionBind the connection is raw (the bytes read past the response stay in
    self.buf). creds: (username, password, key) of another client, to share its user."""

    def __init__(self, port, user="alice", creds=None, sock=None, **kw):
        super().__init__(port, user=user, tries=1, timeout=12.0, **kw)
        self.sock.close()
        self.sock = sock or socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""
        self.last_raw = None
        if creds:
            self.username, self.password, self.key = creds

    def creds(self):
        return self.username, self.password, self.key

    def send_raw(self, msg):
        self.sock.sendall(msg)
        self.sent += 1

    def channel_data(self, channel, payload):
        self.send_raw(channel_data(channel, payload, pad=True))

    def _fill(self, deadline):
        """Reads once more into buf; False on timeout or EOF."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(70000)
        except OSError:     # timeout, SSLWantReadError, reset: nothing more to read
            return False
        self.buf += data
        return bool(data)

    def _take(self):
        """The next whole frame (STUN message or padded ChannelData) in buf, or None."""
        f, self.buf = take_frame(self.buf)
        return f

    def feed(self, data):
        """For a caller that reads the stream itself (a thread that drives it): adds data
        to buf and returns the whole frames now in it, in order, without reading; the
        start of an incomplete one stays in buf."""
        self.buf += data
        got = []
        f = self._take()
        while f is not None:
            got.append(f)
            f = self._take()
        return got

    def frame(self, timeout):
        """The next whole frame, or None after timeout or at EOF."""
        deadline = time.monotonic() + timeout
        while True:
            f = self._take()
            if f is not None:
                return f
            if not self._fill(deadline):
                return None

    def read_msg(self, timeout=5.0):
        """The next STUN message, parsed (self.last_raw: its bytes); fails the test after
        timeout or at EOF."""
        f = self.frame(timeout)
        check(f is not None, "no message in %.0f s (or the server closed)" % timeout)
        self.last_raw = f
        return parse(f)

    def transact(self, msg, tid, timeout=None, tries=1):
        """Sends msg once; the response with tid (Data indications and ChannelData before it
        are skipped, anything else fails the test), or None after timeout."""
        self.send_raw(msg)
        deadline = time.monotonic() + (timeout or self.timeout)
        for _ in range(64):
            f = self.frame(deadline - time.monotonic())
            if f is None:
                return None
            if 0x40 <= f[0] <= 0x7F:
                continue
            self.last_raw = f
            p = parse(f)
            if p and p[2] == tid and p[1] in (SUCCESS, ERROR):
                return p
            check(p is not None and p[1] == INDICATION, "unexpected message %r" % (p,))
        return None

    def recv_data(self, timeout=2.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            f = self.frame(deadline - time.monotonic())
            if f is None:
                return None
            cd = channel_payload(f)
            if cd:
                return cd[1]
            p = parse(f)
            if p and p[0] == DATA and p[1] == INDICATION:
                return p[3].get(A_DATA, [None])[0]
        return None

    def next_frame(self):
        """The next whole Data indication or ChannelData already read: ("chan", channel,
        payload) or ("data", (ip, port), payload); False when none is complete yet, None for
        another message (skipped)."""
        f = self._take()
        if f is None:
            return False
        cd = channel_payload(f)
        if cd:
            return ("chan",) + cd
        p = parse(f)
        if p and p[0] == DATA and p[1] == INDICATION:
            return ("data", parse_xor_addr(p[3][A_PEER][0], p[2]), p[3][A_DATA][0])
        return None

    def frames(self, n, timeout=2.0):
        """Client.frames on the stream."""
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < n:
            f = self.next_frame()
            if f:
                got.append(f)
                continue
            if f is None:
                continue
            if not self._fill(deadline):
                break
        return got

    def allocate_tcp(self, extra=(), expect=None):
        r = self.request(ALLOCATE, [(A_TRANSPORT, bytes([6, 0, 0, 0]))] + list(extra))
        check(error_code(r[3]) == expect, "Allocate TCP: expected %r, got %r"
              % (expect, error_code(r[3])))
        return r

    def connect(self, ip, port, expect=None):
        """Connect; returns the CONNECTION-ID (bytes) or the error code when expected."""
        r = self._peer_request(CONNECT, [], ip, port)
        code = error_code(r[3])
        if expect == "any":
            return code if code is not None else r[3].get(A_CONNECTION_ID, [b""])[0]
        check(code == expect, "Connect %s:%d: expected %r, got %r" % (ip, port, expect, code))
        check(mi_ok(self.last_raw, self.key), "Connect response not signed with the key")
        if code is None:
            cid = r[3].get(A_CONNECTION_ID, [b""])[0]
            check(len(cid) == 4, "CONNECTION-ID of 4 bytes: %r" % (cid,))
            return cid
        return code

    def connection_bind(self, cid):
        r = self.request(CONNECTION_BIND, [(A_CONNECTION_ID, cid)])
        return error_code(r[3])

    def recv_exact(self, n, timeout=10.0):
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            check(left > 0, "got %d of %d bytes" % (len(self.buf), n))
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            check(data, "EOF after %d of %d bytes" % (len(self.buf), n))
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_eof(self, timeout=10.0):
        """True when the data connection reads EOF (nothing else) within timeout."""
        self.sock.settimeout(timeout)
        return self.buf == b"" and self.sock.recv(1) == b""


# ---- peers ----------------------------------------------------------------------------------


class Peer:
    """A UDP socket standing in for a peer (or a service that must not be reached) on ip.
    mode None: the test reads it (drain, sock); "echo": a thread answers every datagram with
    itself; "count": a thread records (arrival time, size) of each datagram in times."""

    def __init__(self, ip="127.0.0.1", port=0, mode=None):
        fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
        if port == 0:
            self.sock = peer_socket(ip)
        else:
            self.sock = socket.socket(fam, socket.SOCK_DGRAM)
            self.sock.bind((ip, port))
        self.port = self.sock.getsockname()[1]
        self.times = []
        self.stop = False
        self.t = None
        if mode is not None:
            self.sock.settimeout(0.1)
            self.t = threading.Thread(target={"echo": self._echo, "count": self._count}[mode],
                                      daemon=True)
            self.t.start()

    def _echo(self):
        while not self.stop:
            try:
                data, addr = self.sock.recvfrom(70000)
                self.sock.sendto(data, addr)
            except OSError:
                continue

    def _count(self):
        while not self.stop:
            try:
                data = self.sock.recv(70000)
            except OSError:
                continue
            self.times.append((time.monotonic(), len(data)))

    def bytes_between(self, t0, t1):
        return sum(n for t, n in list(self.times) if t0 <= t < t1)

    def total(self):
        return sum(n for _, n in list(self.times))

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
        self.stop = True
        if self.t is not None:
            self.t.join()
        self.sock.close()


Listener = Peer  # the hostile-input tests' name: a socket that must not be reached


def echo_peer():
    """A UDP echo on 127.0.0.1 (daemon thread, ends with the test process); its port."""
    return Peer("127.0.0.1", mode="echo").port


def echo_relays(c, peer_port, payload):
    """Whether c's allocation (a Client with a permission for 127.0.0.1) relays payload to
    the echo at peer_port and back (a few tries: a datagram may be lost)."""
    for _ in range(5):
        c.send("127.0.0.1", peer_port, payload)
        if c.recv_data(timeout=1.0) == payload:
            return True
    return False


class TcpPeer:
    """A TCP server on ip: mode 'echo' (echoes until EOF, then closes), 'sink' (accepts and
    never reads), 'reset' (accepts, reads a byte, answers with a RST). Counts accepts and
    records the source address of each."""

    def __init__(self, ip, mode="echo"):
        self.ls = peer_socket(ip, socket.SOCK_STREAM, reuse=True)
        self.ls.listen(256)
        self.port = self.ls.getsockname()[1]
        self.mode = mode
        self.sources, self.conns = [], []
        self.stop = False
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()

    def _accept(self):
        self.ls.settimeout(0.2)
        while not self.stop:
            try:
                c, addr = self.ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.sources.append(addr[:2])
            self.conns.append(c)
            if self.mode == "echo":
                threading.Thread(target=self._echo, args=(c,), daemon=True).start()
            elif self.mode == "reset":
                threading.Thread(target=self._reset, args=(c,), daemon=True).start()

    @staticmethod
    def _echo(c):
        try:
            c.settimeout(30)
            while True:
                d = c.recv(65536)
                if not d:
                    break
                c.sendall(d)
        except OSError:
            pass
        c.close()

    @staticmethod
    def _reset(c):
        try:
            c.settimeout(30)
            c.recv(1)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        c.close()

    def close(self):
        self.stop = True
        self.t.join(2)
        self.ls.close()
        for c in self.conns:
            c.close()


# ---- TLS and DTLS --------------------------------------------------------------------------


def make_cert(d, name, kind="ec"):
    """A self-signed certificate for DNS name `name`: (cert path, key path)."""
    crt, key = os.path.join(d, name + ".crt"), os.path.join(d, name + ".key")
    alg = (["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"] if kind == "ec"
           else ["-newkey", "rsa:2048"])
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "30", "-subj", "/CN=" + name,
                    "-addext", "subjectAltName=DNS:" + name, "-keyout", key, "-out", crt] + alg,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return crt, key


def tls_connect(port, sni=None, alpn=("stun.turn",)):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return ctx.wrap_socket(raw, server_hostname=sni)


_DTLS_PORTS = set()


def dtls_udp_socket():
    """A UDP socket on 127.0.0.1 whose port no DtlsSocket of this process had: a closed
    DTLS client's allocation outlives its socket, and a new client on the same 5-tuple
    would get 437."""
    s = peer_socket(avoid=_DTLS_PORTS)
    _DTLS_PORTS.add(s.getsockname()[1])
    return s


class DtlsSocket:
    """A DTLS 1.2 client on a connected UDP socket (pyOpenSSL over memory BIOs, no
    certificate check, ALPN stun.turn) with the calls the stream clients make: sendall
    (one record, one datagram), recv (the plaintext of the records of the next datagram
    that has some; b"" once the server closed), settimeout, close. The handshake gets 40
    rounds of at most round_s (1 s); a round without an answer sends the last flight again
    (pyOpenSSL has no DTLS timer). udp: a UDP socket of the caller's (bound to the source
    it wants) instead of a fresh one; deadline (a time.monotonic() value): TimeoutError
    once the handshake runs past it."""

    def __init__(self, port, host="127.0.0.1", udp=None, deadline=None, round_s=1.0):
        from OpenSSL import SSL
        self.SSL = SSL
        ctx = SSL.Context(SSL.DTLS_CLIENT_METHOD)
        ctx.set_verify(SSL.VERIFY_NONE, lambda *a: True)
        ctx.set_alpn_protos([b"stun.turn"])
        self.conn = SSL.Connection(ctx, None)
        self.conn.set_connect_state()
        self.udp = udp or dtls_udp_socket()
        self.udp.connect((host, port))
        self.timeout = 5.0
        flight = []
        for _ in range(40):
            try:
                self.conn.do_handshake()
                self._flush()
                return
            except SSL.WantReadError:
                pass
            flight = self._flush() or flight
            wait = round_s if deadline is None else min(round_s, deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError("DTLS handshake with port %d: deadline" % port)
            self.udp.settimeout(wait)
            try:
                self.conn.bio_write(self.udp.recv(65536))
            except socket.timeout:
                for dgram in flight:
                    self.udp.send(dgram)
        raise Failure("DTLS handshake with port %d did not finish" % port)

    def _flush(self):
        """Sends what OpenSSL wrote; returns the datagrams sent."""
        sent = []
        while True:
            try:
                out = self.conn.bio_read(65536)
            except self.SSL.WantReadError:
                return sent
            self.udp.send(out)
            sent.append(out)

    def sendall(self, data):
        self.conn.send(data)
        self._flush()

    def settimeout(self, t):
        self.timeout = t

    def recv(self, _n):
        deadline = time.monotonic() + self.timeout
        while True:
            self.udp.settimeout(max(deadline - time.monotonic(), 0.001))
            self.conn.bio_write(self.udp.recv(65536))
            out = b""
            while True:
                try:
                    out += stream_framed(self.conn.recv(65536))
                except self.SSL.WantReadError:
                    break
                except self.SSL.ZeroReturnError:
                    return out
            self._flush()
            if out:
                return out

    def close(self):
        try:
            self.conn.shutdown()
            self._flush()
        except self.SSL.Error:
            pass
        self.udp.close()


def dtls_connect(port):
    return DtlsSocket(port)


def tls_client(port, user="alice", sni=None):
    """A StreamClient over a TLS connection to 127.0.0.1:port."""
    return StreamClient(port, user=user, sock=tls_connect(port, sni))


def dtls_client(port, user="alice"):
    """A StreamClient over a DTLS association with 127.0.0.1:port."""
    return StreamClient(port, user=user, sock=dtls_connect(port))


# ---- /metrics: scraping and the strict exposition check ----------------------------------

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


# ---- configurations --------------------------------------------------------------------


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
    restart (50000 test_relay, 51000 test_relay_client, 56000 test_upgrade, 58000 the
    turnutils_uclient interop test; below the kernel's ephemeral ports 32768-60999, which
    any socket bound to port 0 may take while the daemon is down: 25000 test_master_traffic,
    26000 test_crash, 27000 test_restart, 29000 test_quota.py, 30300-31099
    test_upgrade_linger's 700 lingering calls, and in 28000..28799:
    28000-28049 test_fdstore_restart, 28050-28099 test_upgrade_urelays_older, 28100-28203
    test_dashboard, 28300-28399 test_sockbuf, 28400-28499 test_ports_owned's taken-over
    call, 28500-28599 test_short_circuit's respawn, 28600-28699 test_cds's restart,
    28700-28739 test_upgrade_stop_handover, 28740-28749 test_ctl's not-reached case,
    28750-28759 test_handoff_burst, 28760-28769 test_ctl's take-over of (id, gen),
    28770-28779 test_tcp_relay's two daemons on one range,
    28780-28789 test_disconnect_crash, 28790-28799 test_state_watch), the
    interop slices (61000..64999) and the port-counting windows (65000..65419, and
    65420..65515 of test_portpool.py). Listener ports bound late come from
    free_port(late=True), above these (31100 up)."""
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


# ---- namespaces and test runs -----------------------------------------------------------


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


class InNetns:
    """with InNetns(name): sockets made inside belong to the named network namespace
    (/var/run/netns/name, as `ip netns add` makes it; root); this thread goes back to its
    own namespace at the end."""

    def __init__(self, name):
        self.path = "/var/run/netns/" + name

    def __enter__(self):
        libc = ctypes.CDLL(None, use_errno=True)
        self.home = os.open("/proc/self/ns/net", os.O_RDONLY)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns")
        finally:
            os.close(fd)

    def __exit__(self, *exc):
        ctypes.CDLL(None, use_errno=True).setns(self.home, CLONE_NEWNET)
        os.close(self.home)


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
                if not isinstance(e, Failure):
                    # Not a check's: where it came from, for a failure seen once in CI.
                    traceback.print_exc(file=sys.stdout)
    sys.stdout.flush()
    sys.exit(1 if failed else 0)
