"""Shared helpers for the interop suite: run turngated on loopback with a generated config.

Every wait is bounded. The daemon's stderr goes to a file that stop() scans for sanitizer
reports and worker deaths, so each test also proves the daemon stayed healthy under a real
third-party client. A missing tool is a failure (fail()), never a skip: CI installs them
(scripts/setup.sh).
"""
import importlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import harness_admin  # noqa: E402
from harness_admin import Failure, check, credentials, free_port, stun_binding_udp  # noqa: E402,F401

BAD = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "[crit]", "killed by signal",
       "Assertion")


def fail(msg):
    """Print the reason and exit 1 (the test failed)."""
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def proved(msg):
    print("PROVED: " + msg, flush=True)


def need_tool(path, package):
    if not os.access(path, os.X_OK):
        fail("%s missing: install the Debian package %s (scripts/setup.sh does)" % (path, package))


def need_module(name, package):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        fail("python module %s missing (%s): install the Debian package %s "
             "(run with /usr/bin/python3; scripts/setup.sh installs it)" % (name, e, package))


def ephemeral_credentials(secret, user="user", lifetime=3600):
    """TURN REST API credentials: ("<expiry>:user", base64(HMAC-SHA1(secret, username)))."""
    return credentials(user, lifetime, secret)


def config_yaml(tmp, port, endpoints, auth, address="127.0.0.1", workers=2, tcp=True,
                internal=None, tls=None, mask=None, relay=None, admin_extra=""):
    """A STUNner v1 config: TURN-UDP (and TURN-TCP) on address:port, one cluster 'allowed'.

    internal: optional (address, port) of one more TURN-UDP listener, 'internal-udp', standing
    in for the in-cluster (ClusterIP) address that media servers should use.

    tls: optional (port, cert file, key file) of a TURN-TLS listener 'turn-tls' on address.

    auth: ("static", user, password) or ("ephemeral", secret). The relay window (relay, a
    (min, max) pair) is by default a random 500-port slice of 61000..64999: above the
    kernel's ephemeral range and clear of the fixed ranges of the integration tests
    (50000..60999; 65000.. are port-counting windows), so our relay sockets never starve
    another test; parallel interop tests rarely share a slice and the worker skips ports in
    use anyway.

    mask: the relay_address_mask of every listener. admin_extra: more admin keys, as YAML
    lines indented by two spaces."""
    if relay is None:
        lo = random.randrange(61000, 65000, 500)
        relay = (lo, lo + 499)
    if auth[0] == "static":
        auth_text = ("  type: static\n  realm: interop.example\n  credentials:\n"
                     "    username: %s\n    password: %s\n" % (auth[1], auth[2]))
    else:
        auth_text = ("  type: ephemeral\n  realm: interop.example\n  credentials:\n"
                     "    secret: %s\n" % auth[1])
    text = ("version: v1\nadmin:\n  name: interop\n  loglevel: all:INFO\n  workers: %d\n"
            "  healthcheck_endpoint: \"\"\n  admin_socket: %s/admin.sock\n  drain_timeout: 1\n"
            "  relay_port_min: %d\n  relay_port_max: %d\n%sauth:\n%slisteners:\n"
            % (workers, tmp, relay[0], relay[1], admin_extra, auth_text))
    # TG_OFFLOAD=Auto (or TC, XDP): the same suite with the kernel fast path (issue 21);
    # run it in a network namespace of its own (the programs attach to its lo).
    if os.environ.get("TG_OFFLOAD"):
        text = text.replace("admin:\n", "admin:\n  offload_engine: %s\n"
                            % os.environ["TG_OFFLOAD"], 1)
    protos = ["TURN-UDP"] + (["TURN-TCP"] if tcp else [])
    for p in protos:
        text += ("  - name: %s\n    protocol: %s\n    address: %s\n    port: %d\n"
                 "    routes: [allowed]\n" % (p.lower(), p, address, port))
    if internal:
        text += ("  - name: internal-udp\n    protocol: TURN-UDP\n    address: %s\n"
                 "    port: %d\n    routes: [allowed]\n" % internal)
    if tls:
        text += ("  - name: turn-tls\n    protocol: TURN-TLS\n    address: %s\n    port: %d\n"
                 "    cert_file: %s\n    key_file: %s\n    routes: [allowed]\n"
                 % ((address,) + tuple(tls)))
    if mask:
        text = text.replace("    routes: [allowed]\n",
                            "    routes: [allowed]\n    relay_address_mask: %s\n" % mask)
    eps = ", ".join('"%s"' % e for e in endpoints)
    text += "clusters:\n  - name: allowed\n    type: STATIC\n    endpoints: [%s]\n" % eps
    return text


def _binding_ok(addr, port):
    try:
        return stun_binding_udp(port, timeout=0.2, tries=1, addr=addr) is not None
    except OSError:
        return False


def _tcp_ok(addr, port):
    try:
        socket.create_connection((addr, port), timeout=0.5).close()
        return True
    except OSError:
        return False


class Daemon(harness_admin.Daemon):
    """turngated on loopback (the test library's daemon, ready when it answers a Binding on
    every listener). Use as a context manager: stops and scans the log on exit."""

    def __init__(self, endpoints, auth=("static", "user1", "pass1"), address="127.0.0.1",
                 workers=2, tcp=True, internal=None, tls=False, mask=None, relay=None,
                 admin_extra=""):
        tmp = tempfile.mkdtemp(prefix="tg-interop-")
        self.tmp = tmp
        self.address = address
        self.port = free_port(address)
        self.tcp = tcp
        self.workers = workers
        self.endpoints = list(endpoints)
        self.auth = auth
        self.internal = (internal, free_port(internal)) if internal else None
        # tls: a TURN-TLS listener on a port of its own, with a self-signed certificate
        # for the address (SAN IP) that clients can verify against self.tls_cert.
        self.tls_port = self.tls_cert = None
        tls_conf = None
        if tls:
            self.tls_port = free_port(address)
            self.tls_cert = os.path.join(self.tmp, "turn.crt")
            key = os.path.join(self.tmp, "turn.key")
            subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "30", "-newkey", "ec",
                            "-pkeyopt", "ec_paramgen_curve:P-256", "-subj", "/CN=turn.interop.test",
                            "-addext", "subjectAltName=IP:%s,DNS:turn.interop.test" % address,
                            "-keyout", key, "-out", self.tls_cert], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            tls_conf = (self.tls_port, self.tls_cert, key)
        harness_admin.Daemon.__init__(
            self, tmp, config_yaml(tmp, self.port, endpoints, auth, address, workers, tcp,
                                   self.internal, tls_conf, mask, relay, admin_extra),
            workers=workers)

    def start(self, timeout=30.0):
        harness_admin.Daemon.start(self, wait=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                fail("turngated exited early (%d):\n%s" % (self.proc.returncode, self.text()))
            if (_binding_ok(self.address, self.port)
                    and (not self.tcp or _tcp_ok(self.address, self.port))
                    and (not self.internal or _binding_ok(*self.internal))
                    and (not self.tls_port or _tcp_ok(self.address, self.tls_port))):
                print("turngated up on %s:%d (UDP%s), %d workers, allowlist %s"
                      % (self.address, self.port, "+TCP" if self.tcp else "", self.workers,
                         self.endpoints), flush=True)
                return self
            time.sleep(0.05)
        self.stop(scan=False)
        fail("turngated did not answer a Binding within %.0f s:\n%s" % (timeout, self.text()))

    def text(self):
        return self.stderr()

    def stop(self, scan=True):
        """SIGTERM, bounded wait, then scan the log. Returns a list of problems (empty = ok)."""
        problems = []
        if self.proc is None:
            return problems
        if os.environ.get("TG_OFFLOAD") and self.proc.poll() is None:
            problems += self.offload_report()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            problems.append("turngated ignored SIGTERM for 20 s")
        self.proc = None
        self.err.close()
        if scan:
            text = self.text()
            bad = [l for l in text.splitlines() if any(b in l for b in BAD)]
            if rc != 0:
                problems.append("turngated exited with %d" % rc)
            if bad:
                problems.append("daemon log problems:\n" + "\n".join(bad[:20]))
            if problems:
                print(text[-4000:])
        return problems

    def offload_report(self):
        """Under TG_OFFLOAD: prints what the kernel fast path relayed; a problem when the
        programs did not load (the run would not test them)."""
        try:
            o = self.admin({"cmd": "status"})["offload"]
        except (OSError, ValueError, KeyError) as e:
            return ["offload status unreadable: %s" % e]
        print("offload %s: active %s, interfaces %s, to peer %d, to client %d, short-circuited "
              "%d datagrams" % (o["engine"], o["active"],
                                [(i["name"], i["engine"]) for i in o["interfaces"]],
                                o["packets_to_peer"], o["packets_to_client"],
                                o["packets_short_circuit"]), flush=True)
        return [] if o["active"] else ["TG_OFFLOAD set but the fast path did not load"]

    def __enter__(self):
        return self.start()

    def __exit__(self, et, ev, tb):
        problems = self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if problems and et is None:
            raise Failure("; ".join(problems))
        return False


def main(fn):
    """Runs fn(); a Failure or an unexpected exception is a test failure (exit 1)."""
    try:
        fn()
    except Failure as e:
        fail(str(e))
    except Exception:
        import traceback
        traceback.print_exc()
        fail("unexpected exception")
    print("PASS", flush=True)
    sys.exit(0)
