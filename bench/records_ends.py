#!/usr/bin/python3
"""records_ends.py: how many allocation ends per second the session records keep up with
(issue 40).

turngated (loopback, the bench layout of compare.py, static auth with USERS users) writes
session records to a file and to a webhook (a local HTTP sink in this script). turnbench
holds N allocations spread over the users; once they are all up, the admin socket's
`disconnect` ends each user's allocations, one user every 1/USERS of --window seconds (N
ends in about --window seconds). The script then waits (bounded) for the records and prints
the ends' rate, the records in the file, those the webhook received, and
turngate_session_records_total{result=written|dropped} from the metrics endpoint.

    bench/records_ends.py [--builddir DIR] [-n 10000] [--users 10] [--window 1.0] [--https]

--https: the webhook is https:// (a TLS sink in this script with a self-signed certificate
given as webhook_ca_file; each POST is a new TLS connection, as the master makes one per
batch).
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (the bench configuration)


def admin(sock, req):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock)
    s.sendall(json.dumps(req).encode() + b"\n")
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    return json.loads(buf)


def metric(port, name, labels=None):
    """The sum of the samples of name (with exactly these labels, if given)."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
    total = None
    for line in text.splitlines():
        key = line.split(" ")[0]
        if key == name + ("{%s}" % labels if labels else "") or \
                (labels is None and key.startswith(name + "{")):
            total = (total or 0) + int(float(line.split()[-1]))
    return total


def active(port):
    return metric(port, "turngate_listener_allocations_active") or 0


def tls_sink(rundir):
    """An HTTPS receiver like compare.records_sink: (port, [records seen], CA file)."""
    import ssl
    crt, key = os.path.join(rundir, "sink.crt"), os.path.join(rundir, "sink.key")
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "2", "-subj", "/CN=sink",
                    "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", crt],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    return compare.sink_server(ctx) + (crt,)


def lines(path):
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builddir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                       "..", "_build", "default"))
    ap.add_argument("-n", type=int, default=10000)
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--window", type=float, default=1.0)
    ap.add_argument("--https", action="store_true", help="an https:// webhook")
    args = ap.parse_args()
    builddir = os.path.abspath(args.builddir)
    compare.USER_NAMES[:] = ["%s%d" % (compare.USER, k) for k in range(args.users)]
    rundir = tempfile.mkdtemp(prefix="tgbench-records-")
    cargs = types.SimpleNamespace(auth="static", workers=2, builddir=builddir, topo=None,
                                  mask=None)
    cmd = compare.turngate_cmd(cargs, rundir, records=True)
    mport = 19090
    conf = cmd[-1]
    with open(conf) as f:
        text = f.read()
    text = text.replace("  drain_timeout: 0\n", "  drain_timeout: 0\n  metrics_endpoint: "
                        "http://127.0.0.1:%d/metrics\n" % mport, 1)
    sink_port, seen = compare.records_sink()
    if args.https:
        tport, seen, ca = tls_sink(rundir)
        old = "webhook: http://127.0.0.1:%d/records" % sink_port
        if old not in text:
            sys.exit("records_ends: no webhook line in the bench config")
        text = text.replace(old, "webhook: https://127.0.0.1:%d/records\n    "
                            "webhook_ca_file: %s" % (tport, ca), 1)
    with open(conf, "w") as f:
        f.write(text)
    print("webhook: %s" % ("https:// (TLS sink, webhook_ca_file)" if args.https
                           else "http:// (compare.records_sink)"))
    sock = os.path.join(rundir, "admin.sock")
    log = open(os.path.join(rundir, "turngated.log"), "w")
    try:
        srv = compare.start_server(cmd, rundir, log, "turngated")
    except RuntimeError as e:
        sys.exit("%s (run directory: %s)" % (e, rundir))
    tb = None
    try:
        tb = subprocess.Popen([os.path.join(builddir, "bench", "turnbench"), "-m", "hold",
                               "-s", "127.0.0.1:13478", "-p", compare.PEER, "-b", "127.0.0.2",
                               "-u", compare.USER, "-k", compare.PASS, "-U", str(args.users),
                               "-n", str(args.n), "-c", "64", "-T", "1", "-H", "60"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        up = 0
        while time.monotonic() - t0 < 60:
            up = active(mport)
            if up >= args.n:
                break
            time.sleep(0.5)
        print("allocations up: %d of %d after %.1f s" % (up, args.n, time.monotonic() - t0))
        w0 = metric(mport, "turngate_session_records_total", 'result="written"') or 0
        # One user every window/users seconds; a disconnect sends each worker that owns
        # any of the user's allocations one request, however many (the reply counts them
        # in "disconnected"; those on a worker it could not tell, "not_reached", are not
        # counted): the users are asked again until all are counted.
        start = time.monotonic()
        asked, rounds = 0, 0
        while asked < up and time.monotonic() < start + 30:
            for k, u in enumerate(compare.USER_NAMES):
                while rounds == 0 and time.monotonic() < start + k * args.window / args.users:
                    time.sleep(0.001)
                asked += admin(sock, {"cmd": "disconnect", "user": u}).get("disconnected", 0)
            rounds += 1
            if asked < up:
                time.sleep(0.01)
        while active(mport) > 0 and time.monotonic() < start + 30:
            time.sleep(0.01)
        sent = time.monotonic() - start
        deadline = time.monotonic() + 30
        path = os.path.join(rundir, "sessions.jsonl")
        while time.monotonic() < deadline and (lines(path) < up or seen[0] < up):
            time.sleep(0.2)
        done = time.monotonic() - start
        left = active(mport)
        written = metric(mport, "turngate_session_records_total", 'result="written"')
        dropped = metric(mport, "turngate_session_records_total", 'result="dropped"')
        failures = metric(mport, "turngate_session_webhook_failures_total", "")
        print("ended %d allocations (%d left) by %d disconnect commands (%d rounds) in %.3f s:"
              " %.0f ends/s" % (up - left, left, rounds * args.users, rounds, sent,
                                (up - left) / sent if sent else 0))
        print("records: file %d lines, webhook %d, written %d (+%d), dropped %s, webhook "
              "failures %s, all in after %.2f s" % (lines(path), seen[0], written or 0,
                                                    (written or 0) - w0, dropped, failures,
                                                    done))
    finally:
        if tb:
            tb.send_signal(signal.SIGINT)
            try:
                tb.wait(5)
            except subprocess.TimeoutExpired:
                tb.kill()
        compare.stop(srv, grace=10.0)
        log.close()
        print("run directory kept: %s" % rundir)


if __name__ == "__main__":
    main()
