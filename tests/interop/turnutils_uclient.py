#!/usr/bin/python3
"""Interop: coturn's turnutils_uclient against turngated (2 workers).

Twenty clients send 200 ChannelData messages each to turnutils_peer (an echo peer) through
turngated, over UDP, TCP, TLS (-t -S) and DTLS (-S); uclient must report 0 lost packets. A missing tool
is a failure, not a skip (install the Debian package coturn). The daemon's log must stay
free of sanitizer reports and worker deaths.

uclient picks channel numbers up to 0x7FFF (RFC 5766), outside RFC 8656's 0x4000-0x4FFF that
turngate enforces by default, so the config sets limits.channel_numbers: rfc5766."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

UCLIENT = "/usr/bin/turnutils_uclient"
PEER = "/usr/bin/turnutils_peer"
BAD = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "[crit]", "killed by signal")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def free_port():
    """A port free for UDP and TCP on 127.0.0.4 (kernel-chosen, outside the relay range)."""
    for _ in range(200):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.4", 0))
        port = u.getsockname()[1]
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if 20000 <= port < 49152:
                t.bind(("127.0.0.4", port))
                return port
        except OSError:
            pass
        finally:
            u.close()
            t.close()
    fail("no free port")


def daemon_path(top):
    for cand in ("turngated", "master/turngated"):
        p = os.path.join(top, cand)
        if os.access(p, os.X_OK):
            return p
    fail("turngated not found under " + top)


def wait_binding(port, deadline):
    req = bytes.fromhex("000100002112a442") + os.urandom(12)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.2)
    try:
        while time.monotonic() < deadline:
            try:
                s.sendto(req, ("127.0.0.4", port))
                data = s.recv(2048)
                if data[:2] == b"\x01\x01":
                    return True
            except OSError:
                time.sleep(0.05)
        return False
    finally:
        s.close()


def run_uclient(port, peer_port, mode):
    """mode: UDP, TCP, TLS or DTLS."""
    tcp = mode in ("TCP", "TLS")
    args = [UCLIENT, "-m", "20", "-n", "200", "-c", "-u", "user1", "-w", "pass1",
            "-e", "127.0.0.1", "-r", str(peer_port), "-p", str(port)]
    if tcp:
        args.append("-t")
    if mode in ("TLS", "DTLS"):
        args.append("-S")
    args.append("127.0.0.4")
    try:
        out = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             timeout=180).stdout.decode(errors="replace")
    except subprocess.TimeoutExpired:
        fail("turnutils_uclient %s timed out" % mode)
    m = re.search(r"Total lost packets (\d+) \(([\d.]+)%\)", out)
    sent = re.search(r"Total transmit time is", out)
    if not m or not sent:
        print(out[-3000:])
        fail("could not parse turnutils_uclient output (%s)" % mode)
    lost, pct = int(m.group(1)), float(m.group(2))
    counts = re.findall(r"tot_send_msgs=(\d+), tot_recv_msgs=(\d+)\s*$", out, re.M)
    if not counts:
        print(out[-3000:])
        fail("no message totals in turnutils_uclient output")
    sent_n, recv_n = int(counts[-1][0]), int(counts[-1][1])
    print("%s: sent %d, received %d, lost %d (%.3f%%)"
          % (mode, sent_n, recv_n, lost, pct))
    if sent_n != 20 * 200 or recv_n != sent_n:
        print(out[-3000:])
        fail("expected 4000 messages sent and echoed, got %d/%d" % (sent_n, recv_n))
    for line in out.splitlines():
        if "Total" in line or "Average" in line:
            print("  " + line.strip())
    if lost != 0 or pct != 0.0:
        print(out[-3000:])
        fail("turnutils_uclient over %s lost %d packets" % (mode, lost))
    return out


def main():
    for tool in (UCLIENT, PEER):
        if not os.access(tool, os.X_OK):
            fail(tool + " missing: install the Debian package coturn")
    top = os.environ.get("top_builddir", ".")
    daemon = daemon_path(top)
    tmp = tempfile.mkdtemp(prefix="tg-interop-")
    # TLS and DTLS need ports of their own: they share socket types with TCP and UDP.
    port, peer_port, tls_port, dtls_port = free_port(), free_port(), free_port(), free_port()
    conf = os.path.join(tmp, "turngate.yaml")
    crt, key = os.path.join(tmp, "turn.crt"), os.path.join(tmp, "turn.key")
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "2", "-newkey", "ec",
                    "-pkeyopt", "ec_paramgen_curve:P-256", "-subj", "/CN=turn.interop.test",
                    "-keyout", key, "-out", crt], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    log = os.path.join(tmp, "turngated.log")
    with open(conf, "w") as f:
        f.write("""version: v1
admin:
  healthcheck_endpoint: ""
  admin_socket: %s/admin.sock
  drain_timeout: 1
  relay_port_min: 52000
  relay_port_max: 52999
# turnutils_uclient picks channel numbers from RFC 5766's 0x4000-0x7FFF; turngate's default
# is RFC 8656's 0x4000-0x4FFF (400 above it), so this legacy client needs the extension.
limits:
  channel_numbers: rfc5766
auth:
  type: static
  realm: interop.example
  credentials:
    username: user1
    password: pass1
listeners:
  - name: udp
    protocol: TURN-UDP
    address: 127.0.0.4
    port: %d
    routes: [peer]
  - name: tcp
    protocol: TURN-TCP
    address: 127.0.0.4
    port: %d
    routes: [peer]
  - name: tls
    protocol: TURN-TLS
    address: 127.0.0.4
    port: %d
    cert_file: %s
    key_file: %s
    routes: [peer]
  - name: dtls
    protocol: TURN-DTLS
    address: 127.0.0.4
    port: %d
    cert_file: %s
    key_file: %s
    routes: [peer]
clusters:
  - name: peer
    type: STATIC
    endpoints: ["127.0.0.1"]
""" % (tmp, port, port, tls_port, crt, key, dtls_port, crt, key))
    peer = subprocess.Popen([PEER, "-p", str(peer_port), "-L", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    logf = open(log, "w")
    d = subprocess.Popen([daemon, "-c", conf, "--workers", "2"], stdout=logf, stderr=logf)
    status = 1
    try:
        if not wait_binding(port, time.monotonic() + 10):
            fail("turngated did not answer a Binding within 10 s")
        run_uclient(port, peer_port, "UDP")
        run_uclient(port, peer_port, "TCP")
        run_uclient(tls_port, peer_port, "TLS")
        run_uclient(dtls_port, peer_port, "DTLS")
        status = 0
    finally:
        d.send_signal(signal.SIGTERM)
        try:
            rc = d.wait(timeout=15)
        except subprocess.TimeoutExpired:
            d.kill()
            rc = d.wait()
            print("turngated ignored SIGTERM")
            status = 1
        peer.kill()
        peer.wait()
        logf.close()
        text = open(log, errors="replace").read()
        bad = [l for l in text.splitlines() if any(b in l for b in BAD)
               or ("exited with status" in l and "exited with status 0" not in l)]
        if rc != 0 or bad:
            print("turngated exit %d; log problems:\n%s" % (rc, "\n".join(bad[:20])))
            print(text[-4000:])
            status = 1
        if status == 0 and not os.environ.get("TG_KEEP_TMP"):
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
