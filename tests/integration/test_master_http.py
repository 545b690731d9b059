"""The master's HTTP endpoints: health and readiness (503 while draining), /status without
secrets, metrics, the credential API (its credential really allocates, its bearer token),
a shared health+metrics socket on the health address, the credential API on the health
port refused as a config error (-t, start, reload), endpoints changed by a reload, a host
name refused (never looked up), the health
endpoint serving again after its connection limit was reached, and while slow clients hold
every slot."""
import contextlib
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATECTL, TURNGATED, Client, Daemon, check,  # noqa: E402
                           config_yaml, free_port, line_col, run_tests, wait_for)

HTTP_H = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "http", "http.h")


def get(url, headers=None):
    try:
        req = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def refused(url):
    """True when nothing listens at url any more (connection refused)."""
    try:
        get(url)
    except urllib.error.URLError as e:
        return isinstance(e.reason, ConnectionRefusedError)
    return False


class Pending:
    """A connection opened now and used later: the server closes its connections (accepted
    or still queued) when it stops, so a request answered later proves the server that
    accepted it kept running. The server closes after each response: one request each."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)

    def get(self, path):
        """The status code, or None when the connection was closed by a stopped server."""
        try:
            self.s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
            head = self.s.recv(4096)
        except OSError:
            head = b""
        finally:
            self.s.close()
        return int(head.split(b" ")[1]) if head.startswith(b"HTTP/") else None


def endpoints(health, metrics, cred, extra=""):
    for key, url in (("healthcheck_endpoint", health), ("metrics_endpoint", metrics),
                     ("credential_api_endpoint", cred)):
        if url:
            extra += "  %s: \"%s\"\n" % (key, url)
    return extra


def base(d, port, extra_admin):
    return config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")],
                       extra_admin=extra_admin)


def test_separate_servers(d):
    port, hp, mp, cp = free_port(), free_port(), free_port(), free_port()
    text = config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")],
                       extra_admin=endpoints("http://127.0.0.1:%d" % hp,
                                             "http://127.0.0.1:%d/prom" % mp,
                                             "http://127.0.0.1:%d" % cp))
    daemon = Daemon(d, text).start()
    try:
        check(get("http://127.0.0.1:%d/live" % hp)[0] == 200, "live")
        check(get("http://127.0.0.1:%d/ready" % hp)[0] == 200, "ready")
        code, body = get("http://127.0.0.1:%d/status" % hp)
        st = json.loads(body)
        check(code == 200 and st["status"] == "READY" and "s3cret" not in body, body)
        code, body = get("http://127.0.0.1:%d/prom" % mp)
        check(code == 200 and 'stunner_listener_packets_total{name="udp"' in body, body[:400])
        code, body = get("http://127.0.0.1:%d/?service=turn&username=carol" % cp)
        cred = json.loads(body)
        check(code == 200 and cred["username"].endswith(":carol"), body)
        r = subprocess.run([TURNGATECTL, "probe", "turn:127.0.0.1:%d" % port, "-u",
                            cred["username"], "-p", cred["password"]],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "minted credential does not allocate: %r" % r)
        check(daemon.admin({"cmd": "drain"})["draining"], "drain")
        code, body = get("http://127.0.0.1:%d/ready" % hp)
        check(code == 503, (code, body))
        check(get("http://127.0.0.1:%d/live" % hp)[0] == 200, "live while draining")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_shared_server(d):
    port, hp = free_port(), free_port()
    url = "http://127.0.0.1:%d" % hp
    text = config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")],
                       extra_admin=endpoints(url, url + "/metrics", None))
    daemon = Daemon(d, text).start()
    try:
        check(get(url + "/ready")[0] == 200, "ready on the shared server")
        code, body = get(url + "/metrics")
        check(code == 200 and "stunner_allocations_active 0" in body, body[:300])
    finally:
        check(daemon.stop() == 0, "exit status")


def test_shared_server_binds_health_address(d):
    """health on every address, metrics on 127.0.0.1 of the same port: one server, on the
    health endpoint's address (127.0.0.2 reaches it), with metrics on the metrics path."""
    port, hp = free_port(), free_port()
    text = base(d, port, endpoints("http://:%d" % hp, "http://127.0.0.1:%d/metrics" % hp, None))
    daemon = Daemon(d, text).start()
    try:
        code, body = get("http://127.0.0.2:%d/metrics" % hp)
        check(code == 200 and "stunner_allocations_active" in body, (code, body[:300]))
        check(get("http://127.0.0.2:%d/ready" % hp)[0] == 200, "ready on the health address")
        check(get("http://127.0.0.1:%d/live" % hp)[0] == 200, "live on 127.0.0.1")
        check("health and metrics endpoint http://:%d/metrics" % hp in daemon.stderr(),
              daemon.stderr())
    finally:
        check(daemon.stop() == 0, "exit status")


def test_cred_never_on_health_port(d):
    """The credential API on the health endpoint's socket (the same address, or a wildcard
    on the same port) is a config error at its FILE:LINE:COL: -t exits 1 with it, a start
    exits 1 with it and serves nothing (it was a log line, and the rest served)."""
    port, hp = free_port(), free_port()
    for health in ("http://127.0.0.1:%d" % hp, "http://:%d" % hp):
        cred = "http://127.0.0.1:%d" % hp
        text = base(d, port, endpoints(health, None, cred))
        with open(os.path.join(d, "check.yaml"), "w") as f:
            f.write(text)
        r = subprocess.run([TURNGATED, "-c", "check.yaml", "-t"], cwd=d, capture_output=True,
                           text=True, timeout=60)
        want = (line_col(text, "credential_api_endpoint: ") +
                " admin.credential_api_endpoint: '%s' shares the socket of "
                "healthcheck_endpoint '%s'" % (cred, health))
        check(r.returncode == 1 and r.stdout.startswith(want), (health, r))
    daemon = Daemon(d, text).start(wait=False)
    rc = daemon.wait_exit()
    daemon.err.close()
    check(rc == 1 and "admin.credential_api_endpoint: '%s' shares the socket" % cred
          in daemon.stderr(), "start with the credential API on the health port (%r):\n%s"
          % (rc, daemon.stderr()))
    check(refused("http://127.0.0.1:%d/ready" % hp), "a refused start serves health")


def test_cred_token(d):
    """credential_api_token_file: no or a wrong bearer token gets 401, the right one 200;
    the token never shows in /status or the admin config; a reload that changes only the
    token applies without restarting the server."""
    port, hp, cp = free_port(), free_port(), free_port()
    tokfile = os.path.join(d, "token")
    with open(tokfile, "w") as f:
        f.write("t0ken-one\n")
    extra = endpoints("http://127.0.0.1:%d" % hp, None, "http://127.0.0.1:%d" % cp,
                      "  credential_api_token_file: %s\n" % tokfile)
    daemon = Daemon(d, base(d, port, extra)).start()
    url = "http://127.0.0.1:%d/?service=turn&username=bob" % cp
    try:
        check(get(url)[0] == 401, "no token")
        check(get(url, {"Authorization": "Bearer wrong"})[0] == 401, "wrong token")
        code, body = get(url, {"Authorization": "Bearer t0ken-one"})
        check(code == 200 and json.loads(body)["username"].endswith(":bob"), (code, body))
        code, body = get("http://127.0.0.1:%d/status" % hp)
        check(code == 200 and "t0ken-one" not in body, body)
        conf = json.dumps(daemon.admin({"cmd": "config"}))
        check("t0ken-one" not in conf and "redacted" in conf, conf)
        alive = Pending(cp)
        daemon.write_config(base(d, port, endpoints(
            "http://127.0.0.1:%d" % hp, None, "http://127.0.0.1:%d" % cp,
            "  credential_api_token: t0ken-two\n")))
        r = daemon.admin({"cmd": "reload"})
        check(r["ok"] is True, r)
        check(alive.get("/?service=turn&username=x") == 401, "server restarted by a token change")
        check(get(url, {"Authorization": "Bearer t0ken-one"})[0] == 401, "old token")
        check(get(url, {"Authorization": "Bearer t0ken-two"})[0] == 200, "new token")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_reload_moves_endpoints(d):
    """A reload that changes the metrics endpoint restarts only that server (health keeps its
    connection); moving the credential API onto the health port is refused (the old
    endpoints serve on); moving metrics onto the health port merges them."""
    port, hp, mp, cp = free_port(), free_port(), free_port(), free_port()
    mp2 = free_port(late=True)     # bound at the first reload
    h = "http://127.0.0.1:%d" % hp
    daemon = Daemon(d, base(d, port, endpoints(h, "http://127.0.0.1:%d/m" % mp,
                                              "http://127.0.0.1:%d" % cp))).start()
    try:
        check(get("http://127.0.0.1:%d/m" % mp)[0] == 200, "metrics before")
        alive = Pending(hp)
        daemon.write_config(base(d, port, endpoints(h, "http://127.0.0.1:%d/m2" % mp2,
                                                   "http://127.0.0.1:%d" % cp)))
        check(daemon.admin({"cmd": "reload"})["ok"] is True, "reload 1")
        check(refused("http://127.0.0.1:%d/m" % mp), "old metrics endpoint still served")
        code, body = get("http://127.0.0.1:%d/m2" % mp2)
        check(code == 200 and "stunner_allocations_active" in body, (code, body[:200]))
        check(alive.get("/live") == 200, "health server restarted by a metrics change")
        check(get("http://127.0.0.1:%d/?service=turn&username=u" % cp)[0] == 200, "cred kept")
        alive = Pending(hp)
        # The credential API moved onto the health port: the reload is refused with the
        # error's position, the running config keeps serving every endpoint as it was.
        daemon.write_config(base(d, port, endpoints(h, "http://127.0.0.1:%d/m2" % mp2, h)))
        r = daemon.admin({"cmd": "reload"})
        check(r["ok"] is False and any(
            "turngate.yaml:" in e and "admin.credential_api_endpoint: '%s' shares the socket "
            "of healthcheck_endpoint '%s'" % (h, h) in e for e in r["errors"]), r)
        check(get("http://127.0.0.1:%d/?service=turn&username=u" % cp)[0] == 200,
              "cred kept on its port after a refused reload")
        check(get(h + "/?service=turn&username=u")[0] == 404, "cred served on health")
        check(alive.get("/ready") == 200, "health server restarted by a refused reload")
        rc, out, _ = daemon.ctl("status")
        check(rc == 0 and "FAILED (admin)" in out and "shares the socket" in out, out)
        alive = Pending(hp)
        # Metrics moved onto the health port: the health server is replaced by the merged one.
        daemon.write_config(base(d, port, endpoints(h, h + "/metrics", None)))
        check(daemon.admin({"cmd": "reload"})["ok"] is True, "reload 3")
        check(refused("http://127.0.0.1:%d/m2" % mp2), "old metrics port after the merge")
        code, body = get(h + "/metrics")
        check(code == 200 and "stunner_allocations_active" in body, (code, body[:200]))
        check(get(h + "/ready")[0] == 200, "health on the merged server")
        check(alive.get("/live") is None, "old health connection survived its server")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_endpoint_host_names(d):
    """An endpoint's host is an address, or localhost (127.0.0.1, no lookup): a name is
    refused with FILE:LINE:COL at -t, at start and at reload (the running endpoints and
    allocations are kept), never looked up (a blocking getaddrinfo in the master's loop at
    every reload, a DNS outage refusing reloads). Before, -t said ok and nothing listened."""
    port, hp, mp = free_port(), free_port(), free_port()
    why = (" admin.metrics_endpoint: 'http://metrics.local:%d/prom': host 'metrics.local' "
           "is a name: write an IP address (0.0.0.0 or the pod's) - turngated does not look "
           "names up for its endpoints\n" % mp)
    bad = base(d, port, endpoints("http://localhost:%d" % hp,
                                  "http://metrics.local:%d/prom" % mp, None))
    daemon = Daemon(d, bad)
    want = line_col(bad, "metrics_endpoint: ", daemon.conf) + why
    r = subprocess.run([TURNGATED, "-t", "-c", daemon.conf], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 1 and r.stdout == want, (want, r))
    daemon.start(wait=False)
    rc = daemon.wait_exit(timeout=60)
    daemon.err.close()
    check(rc == 1 and want in daemon.stderr(), (want, rc, daemon.stderr()))
    metrics = "http://localhost:%d/prom" % mp
    daemon = Daemon(d, base(d, port, endpoints("http://localhost:%d" % hp, metrics, None)))
    daemon.start()
    client = Client(port, secret="s3cret", realm="test.realm")
    try:
        client.allocate()
        check(get("http://127.0.0.1:%d/live" % hp)[0] == 200, "health on localhost")
        code, body = get("http://127.0.0.1:%d/prom" % mp)
        check(code == 200 and "stunner_allocations_active" in body, "metrics on localhost")
        daemon.write_config(bad)
        r = daemon.admin({"cmd": "reload"})
        check(r["ok"] is False and want.strip() in r["errors"], (want, r))
        check(get("http://127.0.0.1:%d/prom" % mp)[0] == 200, "metrics after a failed reload")
        check(client.refresh(600) is None, "allocation lost by a failed reload")
        cfg = daemon.admin({"cmd": "config"})["config"]["admin"]
        check(cfg["metrics_endpoint"] == metrics, cfg)
        client.release()
    finally:
        client.close()
        check(daemon.stop() == 0, "exit status")


def rest_password(secret, username):
    import base64
    import hashlib
    import hmac
    return base64.b64encode(hmac.new(secret.encode(), username.encode(),
                                     hashlib.sha1).digest()).decode()


def test_cred_rotation_ttl_bad_queries(d):
    """Minted credentials follow the current secret across a reload, carry the asked ttl,
    allocate; malformed queries get 400 with a JSON message."""
    import time
    port, cp = free_port(), free_port()
    cred_api = "  credential_api_endpoint: \"http://127.0.0.1:%d\"\n" % cp
    sock = os.path.join(d, "admin.sock")
    daemon = Daemon(d, config_yaml(sock, [("udp", port, "TURN-UDP")], secret="first",
                                   extra_admin=cred_api)).start()
    url = "http://127.0.0.1:%d" % cp
    try:
        t0 = int(time.time())
        code, body = get(url + "/?service=turn&username=ann&ttl=120")
        cred = json.loads(body)
        expiry = int(cred["username"].split(":")[0])
        check(code == 200 and cred["ttl"] == 120 and t0 + 119 <= expiry <= int(time.time()) + 121,
              "ttl not respected: %r" % body)
        check(cred["password"] == rest_password("first", cred["username"]), "not the secret")
        gen = daemon.admin({"cmd": "status"})["generation"]
        daemon.write_config(config_yaml(sock, [("udp", port, "TURN-UDP")], secret="second",
                                        extra_admin=cred_api))
        r = daemon.admin({"cmd": "reload"})
        check(r["ok"] is True and r["generation"] == gen + 1, "reload: %r" % r)
        code, body = get(url + "/ice?service=turn&username=bob&ttl=60")
        ice = json.loads(body)["iceServers"][0]
        check(code == 200 and ice["credential"] == rest_password("second", ice["username"]),
              "minted after rotation with the old secret: %r" % body)
        r = subprocess.run([TURNGATECTL, "probe", "turn:127.0.0.1:%d" % port, "-u",
                            ice["username"], "-p", ice["credential"]],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "credential minted after rotation does not allocate: %r" % r)
        for q in ("/?username=x", "/?service=stun&username=x", "/?service=turn&ttl=abc",
                  "/ice?service=turn&ttl=-5"):
            code, body = get(url + q)
            check(code == 400 and json.loads(body).get("message"), "%s: %r %r" % (q, code, body))
    finally:
        check(daemon.stop() == 0, "exit status")


def http_limits():
    """HTTP_CONN_LIMIT and HTTP_CONN_PER_IP as http/http.h defines them."""
    with open(HTTP_H) as f:
        text = f.read()
    return tuple(int(re.search(r"#define %s (\d+)u" % name, text).group(1))
                 for name in ("HTTP_CONN_LIMIT", "HTTP_CONN_PER_IP"))


def accepted(port):
    """Connections to 127.0.0.1:port established and taken from the accept queue (0 while
    any is still queued), from /proc/net/tcp."""
    n = 0
    for line in open("/proc/net/tcp").readlines()[1:]:
        f = line.split()
        if f[1] != "0100007F:%04X" % port:
            continue
        if f[3] == "0A" and int(f[4].split(":")[1], 16) > 0:
            return 0
        n += f[3] == "01"
    return n


@contextlib.contextmanager
def slow_clients(d):
    """A daemon whose health server holds its whole connection limit from 127.0.5.2 up (the
    per-address limit each), each a request head never finished; yields (daemon, url, held
    connections). Closes them and checks the daemon's clean stop on the way out."""
    port, hp = free_port(), free_port()
    url = "http://127.0.0.1:%d" % hp
    daemon = Daemon(d, base(d, port, endpoints(url, None, None))).start()
    limit, per_ip = http_limits()
    held = []
    try:
        check(get(url + "/live")[0] == 200, "live before")
        for i in range(limit):
            c = socket.socket()
            held.append(c)
            c.bind(("127.0.5.%d" % (2 + i // per_ip), 0))
            c.connect(("127.0.0.1", hp))
            c.sendall(b"GET /live HTTP/1.1\r\nHost: x\r\n")  # a head never finished
        wait_for(lambda: accepted(hp) >= limit, "%d connections accepted" % limit, timeout=10)
        yield daemon, url, held
    finally:
        for c in held:
            c.close()
        check(daemon.stop() == 0, "exit status")


def test_serves_after_connection_limit(d):
    """Found by attackwalk: slow connections from 4 addresses (16 each, the per-address
    limit) filled the health server's 64; when they all closed in one turn of the master's
    loop, MHD put its listening socket back only at a later MHD_run that nothing called,
    and /live never answered again (kubelet's liveness probe would restart the pod). The
    master is stopped while the attacker resets its connections so that they all close in
    one turn, as they did by chance in the attack. (Since a newcomer beyond 64 closes the
    oldest, 64 connections stay under MHD's own limit; the run after closes still matters
    for MHD's pause on EMFILE, and this case stays as the attack's regression.)"""
    with slow_clients(d) as (daemon, url, held):
        daemon.signal(signal.SIGSTOP)
        try:
            for c in held:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                c.close()
        finally:
            daemon.signal(signal.SIGCONT)

        def live():
            try:
                return get(url + "/live")[0] == 200
            except OSError:
                return False
        wait_for(live, "/live answered after the attacker's connections closed", timeout=30)


def test_slow_clients_make_room(d):
    """Found by attackwalk: slow connections from 4 addresses (16 each, the per-address
    limit), each a request head never finished, held every one of the health server's 64
    slots and /live answered nobody until they went idle (a header line within every 10 s
    keeps them forever). Now a newcomer closes one (the oldest of an address holding the
    most): /live answers while they are held, and the attacker's connections are the ones
    that go."""
    with slow_clients(d) as (daemon, url, held):
        done = threading.Event()

        def trickle():
            """A header line on each every 2 s keeps them from MHD's idle timeout (bounded:
            at most 30 s)."""
            for n in range(15):
                if done.wait(2.0):
                    return
                for c in held:
                    try:
                        c.send(b"X-%d: y\r\n" % n)
                    except OSError:
                        pass
        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        try:
            for i in range(3):
                code = get(url + "/live")[0]
                check(code == 200, "/live while %d slow connections are held: %r"
                      % (len(held), code))
        finally:
            done.set()
            t.join()
        closed = 0
        for c in held:
            c.settimeout(0.01)
            try:
                closed += c.recv(1) == b""
            except socket.timeout:
                pass
            except OSError:
                closed += 1
        check(closed >= 1, "the newcomers closed the attacker's oldest connections")


if __name__ == "__main__":
    run_tests([test_separate_servers, test_shared_server, test_shared_server_binds_health_address,
               test_cred_never_on_health_port, test_cred_token, test_reload_moves_endpoints,
               test_endpoint_host_names,
               test_cred_rotation_ttl_bad_queries, test_serves_after_connection_limit,
               test_slow_clients_make_room])
