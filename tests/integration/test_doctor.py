"""turngatectl doctor: breaks each layer of the troubleshooting order in turn against a real
daemon and checks that doctor names that layer (and only passes on a healthy daemon)."""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATECTL, Daemon, check, config_yaml, echo_peer, free_port,  # noqa: E402
                           run_tests)


def layer_of(out):
    """The layer number doctor names in "first failing layer: N ...", or None."""
    for line in out.splitlines():
        if line.startswith("first failing layer: "):
            return int(line.split()[3])
    return None


def write(d, name, text):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def start(d, port, **kw):
    sock = os.path.join(d, "admin.sock")
    text = config_yaml(sock, [("udp", port, "TURN-UDP"), ("tcp", port, "TURN-TCP")], **kw)
    return Daemon(d, text).start(), text


def test_doctor_healthy(d):
    port = free_port()
    daemon, text = start(d, port)
    try:
        rc, out, err = daemon.ctl("doctor", "-c", daemon.conf)
        check(rc == 0 and "all layers ok\n" in out and "FAIL" not in out, (rc, out, err))
        for name in ("daemon", "last reload", "config file", "listener udp", "listener tcp",
                     "auth", "credential", "routes udp", "routes tcp", "probe"):
            check(any(l.split("  ")[0] == name and " ok " in l for l in out.splitlines()),
                  (name, out))
        peer = echo_peer()
        rc, out, err = daemon.ctl("doctor", "--secret", "s3cret", "--peer",
                                  "127.0.0.1:%d" % peer)
        check(rc == 0 and "round trip" in out and "all layers ok" in out, (rc, out, err))
        # Without any credential, doctor says what it could not test and passes.
        rc, out, err = daemon.ctl("doctor")
        check(rc == 0 and "credential and probe not tested" in out, (rc, out, err))
        rc, out, err = daemon.ctl("doctor", "-u", "x")
        check(rc == 2 and err.endswith("try 'turngatectl --help'\n"), (rc, err))
    finally:
        check(daemon.stop() == 0, "exit status")


def test_doctor_tls(d):
    """TURN-TLS and TURN-DTLS listeners are checked with a handshake and a Binding."""
    port, tport, dport = free_port(), free_port(), free_port()
    crt, key = os.path.join(d, "t.crt"), os.path.join(d, "t.key")
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "30", "-newkey", "ec",
                    "-pkeyopt", "ec_paramgen_curve:P-256", "-subj", "/CN=doctor.test",
                    "-keyout", key, "-out", crt], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    sock = os.path.join(d, "admin.sock")
    text = config_yaml(sock, [("udp", port, "TURN-UDP"), ("tls", tport, "TURN-TLS"),
                              ("dtls", dport, "TURN-DTLS")])
    for name in ("tls", "dtls"):
        head, tail = text.split("  - name: %s\n" % name, 1)
        first, rest = tail.split("    routes:", 1)
        text = (head + "  - name: %s\n" % name + first +
                "    cert_file: %s\n    key_file: %s\n" % (crt, key) + "    routes:" + rest)
    daemon = Daemon(d, text).start()
    try:
        rc, out, err = daemon.ctl("doctor", "--secret", "s3cret")
        check(rc == 0 and "all layers ok" in out, (rc, out, err))
        for name, ver in (("listener tls", "TLSv1.3"), ("listener dtls", "DTLSv1.2")):
            line = next((l for l in out.splitlines() if l.split("  ")[0] == name), "")
            check(" ok " in line and ver in line and "ALPN stun.turn" in line and
                  "doctor.test" in line, (name, out))
    finally:
        check(daemon.stop() == 0, "exit status")


def test_doctor_daemon_down(d):
    rc, out, err = Daemon(d, "").ctl("doctor", "--secret", "s3cret")
    check(rc == 3 and layer_of(out) == 0 and "admin socket" in out, (rc, out, err))


def test_doctor_listener(d):
    port = free_port()
    daemon, text = start(d, port)
    try:
        # The operator's file says another port than the daemon listens on.
        other = free_port()
        wrong = write(d, "wrong.yaml", text.replace("port: %d" % port, "port: %d" % other))
        rc, out, err = daemon.ctl("doctor", "-c", wrong)
        check(rc == 1 and layer_of(out) == 1 and "listens on %d" % port in out, (rc, out))
        # A listener of the file that the daemon does not have.
        extra = write(d, "extra.yaml", text.replace("clusters:", "  - name: more\n"
                                                    "    protocol: TURN-UDP\n"
                                                    "    address: 127.0.0.1\n"
                                                    "    port: %d\n    routes: [loopback]\n"
                                                    "clusters:" % other))
        rc, out, err = daemon.ctl("doctor", "-c", extra)
        check(rc == 1 and layer_of(out) == 1 and "listener more" in out and
              "not open" in out, (rc, out))
        # Sockets held but nobody answers (workers frozen): layer 1 again.
        pids = [w["pid"] for w in daemon.admin({"cmd": "workers"})["workers"]]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            rc, out, err = daemon.ctl("doctor", "--timeout", "600", "--secret", "s3cret")
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        check(rc == 1 and layer_of(out) == 1 and "no STUN answer" in out, (rc, out))
    finally:
        check(daemon.stop() == 0, "exit status")


def test_doctor_auth(d):
    port = free_port()
    daemon, text = start(d, port)
    try:
        rc, out, err = daemon.ctl("doctor", "--secret", "not-the-secret")
        check(rc == 1 and layer_of(out) == 2 and "401" in out and
              "secret differs" in out, (rc, out))
        # The same through the config file: the file's secret is not the daemon's.
        stale = write(d, "stale.yaml", text.replace("secret: s3cret", "secret: older"))
        rc, out, err = daemon.ctl("doctor", "-c", stale)
        check(rc == 1 and layer_of(out) == 2 and "config file's secret" in out, (rc, out))
    finally:
        check(daemon.stop() == 0, "exit status")


def test_doctor_routes(d):
    port = free_port()
    daemon, text = start(d, port)
    try:
        # A route to a cluster without endpoints.
        daemon.write_config(text.replace("endpoints: [127.0.0.0/8]", "endpoints: []"))
        rc, out, err = daemon.ctl("reload")
        check(rc == 0, (out, err))
        rc, out, err = daemon.ctl("doctor", "--secret", "s3cret")
        check(rc == 1 and layer_of(out) == 3 and "no endpoints" in out, (rc, out))
        # A STRICT_DNS cluster whose name does not resolve (.invalid never does, RFC 6761).
        daemon.write_config(text.replace("type: STATIC\n    endpoints: [127.0.0.0/8]",
                                         "type: STRICT_DNS\n    endpoints: [media.invalid]"))
        rc, out, err = daemon.ctl("reload")
        check(rc == 0, (out, err))
        rc, out, err = daemon.ctl("doctor", "--secret", "s3cret")
        check(rc == 1 and layer_of(out) == 3 and "media.invalid does not resolve" in out,
              (rc, out))
        # A cluster that does not hold the peer: the probe's permission gets 403.
        daemon.write_config(text.replace("endpoints: [127.0.0.0/8]",
                                         "endpoints: [127.0.0.2/32]"))
        rc, out, err = daemon.ctl("reload")
        check(rc == 0, (out, err))
        peer = echo_peer()
        rc, out, err = daemon.ctl("doctor", "--secret", "s3cret", "--peer",
                                  "127.0.0.1:%d" % peer)
        check(rc == 1 and layer_of(out) == 3 and
              "peer 127.0.0.1 refused (403 Forbidden): no route of listener udp admits it"
              in out and "127.0.0.1/32] in cluster loopback" in out, (rc, out))
        # A failed reload is layer 0: the daemon runs the previous config.
        daemon.write_config(text.replace("port: %d" % port, "port: 70000", 1))
        rc, out, err = daemon.ctl("reload")
        check(rc == 1, (out, err))
        rc, out, err = daemon.ctl("doctor", "--secret", "s3cret")
        check(rc == 1 and layer_of(out) == 0 and "last reload" in out, (rc, out))
    finally:
        check(daemon.stop() == 0, "exit status")


def test_doctor_refused_peer(d):
    """A media-plane config whose clusters hold the media servers, not the relay: the
    probe without --peer relays between two of its own allocations, so the relay's own
    address is the peer that gets 403. doctor names it and the route that would admit it
    (not an echo timeout), and neither doctor nor probe leaves an allocation behind."""
    port = free_port()
    sock = os.path.join(d, "admin.sock")
    text = config_yaml(sock, [("udp", port, "TURN-UDP"), ("tcp", port, "TURN-TCP")])
    daemon = Daemon(d, text.replace("endpoints: [127.0.0.0/8]", "endpoints: [10.0.0.0/8]"))
    daemon.start()
    try:
        rc, out, err = daemon.ctl("doctor", "--secret", "s3cret")
        check(rc == 1 and layer_of(out) == 3, (rc, out, err))
        check("permission (peer): peer 127.0.0.1 refused (403 Forbidden): no route of "
              "listener udp admits it" in out, out)
        check("fix: add it to a cluster routed from udp, e.g. endpoints: [..., 127.0.0.1/32]"
              " in cluster loopback" in out and "echo" not in out.split("fix:")[1].split(
                  "(")[0], out)
        check("delete (peer)" in out, out)
        check(daemon.admin({"cmd": "status"})["allocations"] == 0, "doctor left allocations")
        r = subprocess.run([TURNGATECTL, "probe", "turn:127.0.0.1:%d" % port, "--secret",
                            "s3cret"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and "403 Forbidden: peer 127.0.0.1:" in r.stdout and
              "refused" in r.stdout, r)
        check(daemon.admin({"cmd": "status"})["allocations"] == 0, "probe left allocations")
        # Covered by a cluster, refused all the same: doctor says why a covered peer can be.
        daemon.write_config(text.replace("endpoints: [127.0.0.0/8]",
                                         'endpoints: [10.0.0.0/8, "127.0.0.0/8:<1-2>"]'))
        rc, out, err = daemon.ctl("reload")
        check(rc == 0, (out, err))
        rc, out, err = daemon.ctl("doctor", "--secret", "s3cret")
        check(rc == 1 and layer_of(out) == 3 and "although cluster loopback routed from udp "
              "covers its address" in out and "<MIN-MAX>" in out, (rc, out))
        check(daemon.admin({"cmd": "status"})["allocations"] == 0, "doctor left allocations")
        # ChannelBind to a port outside the cluster's range: 403 at the bind (it used to
        # succeed, and every ChannelData on it was dropped in silence).
        peer = echo_peer()
        r = subprocess.run([TURNGATECTL, "probe", "turn:127.0.0.1:%d" % port, "--secret",
                            "s3cret", "--peer", "127.0.0.1:%d" % peer],
                           capture_output=True, text=True, timeout=60)
        lines = {l.split()[0]: l for l in r.stdout.splitlines()}
        check(r.returncode == 1 and " ok " in lines.get("create-permission", "") and
              "FAIL" in lines.get("channel-bind", "") and
              "403 Forbidden: peer 127.0.0.1:%d refused" % peer in r.stdout and
              "round" not in lines, r)
        check(daemon.admin({"cmd": "status"})["allocations"] == 0, "probe left allocations")
    finally:
        check(daemon.stop() == 0, "exit status")


if __name__ == "__main__":
    run_tests([test_doctor_healthy, test_doctor_tls, test_doctor_daemon_down,
               test_doctor_listener, test_doctor_auth, test_doctor_routes,
               test_doctor_refused_peer])
