"""turngated watching STUNner's config discovery service (CDS) over its WebSocket API, against
the suite's CDS server (cds_server.py, written from STUNner's published API; the real
operator was not run): initial config, live updates, a rejected invalid config, fragmented
messages, the delete "zero config", server restart with redial and resync, and a restart of
the daemon that keeps its allocations although it starts on the bootstrap config."""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATED, Client, Daemon, check, free_port, run_tests,  # noqa: E402
                           stun_binding_udp, wait_for)
from cds_server import CdsServer  # noqa: E402

IDENT = "testns/gw"


def stunner_config(sock, ports, name="gw", relay=None):
    """A StunnerConfig as the operator renders it (JSON), plus our admin_socket key; relay:
    (relay_port_min, relay_port_max), else the default range."""
    admin = {"name": "testns/" + name, "loglevel": "all:INFO", "healthcheck_endpoint": "",
             "admin_socket": sock}
    if relay:
        admin["relay_port_min"], admin["relay_port_max"] = relay
    return {
        "version": "v1",
        "admin": admin,
        "auth": {"type": "ephemeral", "realm": "stunner.l7mp.io",
                 "credentials": {"secret": "cds-secret"}},
        "listeners": [{"name": "testns/%s/udp-%d" % (name, p), "protocol": "TURN-UDP",
                       "address": "127.0.0.1", "port": p, "routes": ["testns/media"]}
                      for p in ports],
        "clusters": [{"name": "testns/media", "type": "STATIC",
                      "endpoints": ["127.0.0.0/8"]}],
    }


class CdsDaemon(Daemon):
    """turngated started on a CDS origin (from -c or $STUNNER_CONFIG_ORIGIN)."""

    def __init__(self, workdir, args, env):
        Daemon.__init__(self, workdir, "")
        self.cds_args, self.cds_env = args, env

    def start(self, wait=True):
        env = dict(os.environ)
        env.update(self.cds_env)
        env["TURNGATE_ADMIN_SOCKET"] = self.sock
        self.err = open(self.errpath, "ab")
        self.proc = subprocess.Popen([TURNGATED] + self.cds_args, env=env,
                                     stdin=subprocess.DEVNULL, stdout=self.err,
                                     stderr=self.err)
        if wait:
            self.wait_running(self.workers)
        return self


def answers(port):
    return stun_binding_udp(port, timeout=0.3, tries=1) is not None


def stop_all(daemon, *servers):
    """Stops the CDS servers (None: never started), then the daemon (exit status 0)."""
    for s in servers:
        if s is not None:
            s.stop()
    check(daemon.stop() == 0, "exit status")


def generation(daemon):
    return daemon.admin({"cmd": "status"})["generation"]


def test_cds_watch(d):
    srv = CdsServer().start()
    sock = os.path.join(d, "admin.sock")
    # Bound only when a pushed config names them (p2..p5 seconds later).
    p1, p2, p3, p4, p5 = (free_port(late=True) for _ in range(5))
    srv.set_config(IDENT, stunner_config(sock, [p1]))
    origin = "http://127.0.0.1:%d" % srv.port
    daemon = CdsDaemon(d, ["-c", origin, "-w", "--udp-thread-num=2", "-l", "all:INFO"],
                       {"STUNNER_NAMESPACE": "testns", "STUNNER_NAME": "gw"}).start()
    srv2 = None
    try:
        wait_for(lambda: answers(p1), "the initial config's listener")
        st = daemon.admin({"cmd": "status"})
        check(st["config_source"] == origin and st["last_reload"]["trigger"] == "cds", st)
        check("/api/v1/configs/testns/gw?watch=true" in srv.requests, srv.requests)
        g1 = st["generation"]

        # A live update adds a listener.
        srv.set_config(IDENT, stunner_config(sock, [p1, p2]))
        wait_for(lambda: answers(p2), "the pushed listener")
        check(generation(daemon) == g1 + 1, (g1, generation(daemon)))

        # The same config again changes nothing; an invalid one is rejected and logged,
        # and the old config keeps serving.
        srv.set_config(IDENT, stunner_config(sock, [p1, p2]))
        bad = stunner_config(sock, [p1, p2])
        bad["listeners"][0]["protocol"] = "TURN-BOGUS"
        srv.set_config(IDENT, bad)
        lr = wait_for(lambda: (lambda s: s if not s["last_reload"]["ok"] else None)(
            daemon.admin({"cmd": "status"})), "the rejection")
        check(lr["last_reload"]["trigger"] == "cds" and lr["generation"] == g1 + 1, lr)
        check(any("TURN-BOGUS" in e for e in lr["last_reload"]["errors"]), lr)
        check(answers(p1) and answers(p2), "old config no longer serving")
        check("config update rejected" in daemon.stderr(), daemon.stderr())
        # aw3 F1: a valid config plus lists 60k deep (libyaml's load is quadratic in the
        # depth: the master stalled for seconds, then applied it) is refused at level 65.
        deep = json.dumps(stunner_config(sock, [p3]))
        deep = deep[:-1] + ', "x": ' + "[" * 60000 + "]" * 60000 + "}"
        srv.set_config(IDENT, deep)
        lr = wait_for(lambda: (lambda s: s if any(
            "nested deeper than 64 levels" in e for e in s["last_reload"].get("errors", []))
            else None)(daemon.admin({"cmd": "status"})), "the deep config's rejection")
        check(lr["generation"] == g1 + 1, lr)
        check(answers(p1) and answers(p2) and not answers(p3), "the deep config applied")

        # A message split into a text frame and continuation frames.
        srv.fragment = 64
        srv.set_config(IDENT, stunner_config(sock, [p3]))
        wait_for(lambda: answers(p3), "the fragmented config")
        check(generation(daemon) == g1 + 2 and not answers(p1), "p1 still served")

        # A config over 64 KiB (a 64-bit frame length, many reads): 4000 endpoints.
        big = stunner_config(sock, [p3])
        big["clusters"][0]["endpoints"] += ["10.%d.%d.%d/32" % (i >> 16, (i >> 8) & 255,
                                                                  i & 255) for i in range(4000)]
        check(len(json.dumps(big)) > 65536, "not big enough")
        srv.set_config(IDENT, big)
        wait_for(lambda: generation(daemon) == g1 + 3, "the big config")
        check(daemon.admin({"cmd": "status"})["last_reload"]["ok"], "big config rejected")
        check(len(daemon.admin({"cmd": "config"})["config"]["clusters"][0]["endpoints"])
              == 4001, "endpoints")

        # The delete "zero config" is ignored (stunnerd does the same in watch mode).
        srv.fragment = 0
        srv.set_config(IDENT, {"version": "v1", "admin": {"name": IDENT},
                               "auth": {"type": "static", "credentials": {
                                   "username": "dummy-username",
                                   "password": "dummy-password"}},
                               "listeners": [], "clusters": []})
        srv.set_config(IDENT, stunner_config(sock, [p3, p4]))
        wait_for(lambda: answers(p4), "the config after the zero config")
        check(generation(daemon) == g1 + 4 and answers(p3), "zero config applied")
        check("ignoring delete configuration update" in daemon.stderr(), daemon.stderr())

        # The server restarts with a newer config: redial, resync.
        port = srv.port
        srv.stop()
        srv2 = CdsServer(port).start()
        srv2.set_config(IDENT, stunner_config(sock, [p5]))
        wait_for(lambda: answers(p5), "the config after the server restart", timeout=60)
        check(generation(daemon) == g1 + 5, generation(daemon))
        check("redialling" in daemon.stderr(), daemon.stderr())
        check(daemon.admin({"cmd": "status"})["last_reload"]["ok"], "last reload")
    finally:
        stop_all(daemon, srv, srv2)


def test_cds_restart_keeps_allocations(d):
    """SIGKILL of the whole daemon, then the same command: the new run starts on the
    bootstrap config (no listeners), takes the state file over, and its workers adopt the
    allocations only once the CDS config brought the listener back."""
    srv = CdsServer().start()
    sock = os.path.join(d, "admin.sock")
    # The new run binds the listener and the three relay ports again: below the kernel's
    # port-0 range, where no socket bound to port 0 meanwhile (a test beside this one)
    # can hold one ("not rebindable", the allocation lost). 28600-28699: no other test's.
    port = free_port(late=True)
    srv.set_config(IDENT, stunner_config(sock, [port], relay=(28600, 28699)))
    args = ["-c", "http://127.0.0.1:%d" % srv.port, "--udp-thread-num=2"]
    env = {"STUNNER_NAMESPACE": "testns", "STUNNER_NAME": "gw"}
    daemon = CdsDaemon(d, args, env).start()
    clients = []
    try:
        wait_for(lambda: answers(port), "the listener")
        for _ in range(3):
            c = Client(port, secret="cds-secret", realm="stunner.l7mp.io", tries=1,
                       fingerprint=True, timeout=5.0)
            c.challenge()
            c.allocate()
            clients.append(c)
        check(daemon.admin({"cmd": "status"})["allocations"] == 3, "3 allocations")
        pids = [w["pid"] for w in daemon.admin({"cmd": "workers"})["workers"]]
        daemon.proc.kill()
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        daemon.proc.wait(timeout=30)
        daemon.err.close()
        daemon = CdsDaemon(d, args, env).start()
        wait_for(lambda: answers(port), "the listener again")
        # the workers adopt once the CDS config's listener is there, none is released
        wait_for(lambda: sum(int(n) for n in re.findall(
            r"predecessor's allocations: (\d+) adopted", daemon.stderr())) == 3, "the adoption")
        check(not re.search(r"allocations: .*dropped [1-9]|[1-9]\d* not rebindable",
                            daemon.stderr()), daemon.stderr())
        st = daemon.admin({"cmd": "status"})
        check(st["state"]["taken_over"] == 3 and st["allocations"] == 3, st)
        for c in clients:
            c.release()     # with the nonce of the first run: no 401/438
        check(daemon.admin({"cmd": "status"})["allocations"] == 0, "released")
    finally:
        srv.stop()
        check(daemon.stop() == 0, "exit status")


def test_cds_env_origin_not_ready(d):
    """$STUNNER_CONFIG_ORIGIN without -c, --id, and no config yet: nothing is served."""
    srv = CdsServer().start()
    sock = os.path.join(d, "admin.sock")
    p1 = free_port()
    daemon = CdsDaemon(d, ["--id", "other/gw2"],
                       {"STUNNER_CONFIG_ORIGIN": "http://127.0.0.1:%d" % srv.port}).start()
    try:
        wait_for(lambda: srv.watchers() == 1, "the watch")
        st = daemon.admin({"cmd": "status"})
        check(st["listeners"] == [] and st["last_reload"]["trigger"] == "startup", st)
        check("/api/v1/configs/other/gw2?watch=true" in srv.requests, srv.requests)
        check(not answers(p1), "something answers before any config")
        srv.set_config("other/gw2", stunner_config(sock, [p1], name="gw2"))
        wait_for(lambda: answers(p1), "the first config")
        cfg = daemon.admin({"cmd": "config"})["config"]
        check(cfg["admin"]["name"] == "testns/gw2", cfg["admin"])
        # Keepalive both ways: the server's ping gets a (masked) pong with its payload,
        # and the daemon pings every 5 s.
        srv.ping_all(b"are-you-there")
        wait_for(lambda: b"are-you-there" in srv.pongs, "the pong")
        wait_for(lambda: srv.pings > 0, "a keepalive ping")
    finally:
        srv.stop()
        check(daemon.stop() == 0, "exit status")


def test_cds_bad_origin(d):
    for args, msg in ((["-c", "https://127.0.0.1:1"], "TLS"),
                      (["-c", "http://"], "malformed config origin"),
                      (["-c", "http://127.0.0.1:x"], "malformed config origin"),
                      (["-c", "http://127.0.0.1:1", "--id", "noslash"], "NAMESPACE/NAME"),
                      (["-c", "http://127.0.0.1:1", "-t"], "not a config discovery"),
                      (["-c", "https://127.0.0.1:1", "-t"], "TLS")):
        r = subprocess.run([TURNGATED] + args, capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and msg in r.stderr, (args, r))
    # -t's usage error is its own status, and -h says so (it listed only 0 and 1).
    r = subprocess.run([TURNGATED, "-h"], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0 and "2: usage error" in r.stdout + r.stderr, r)


if __name__ == "__main__":
    run_tests([test_cds_watch, test_cds_restart_keeps_allocations, test_cds_env_origin_not_ready,
               test_cds_bad_origin])
