"""STUNner's own CDS server drives turngated (#39): stunner-cds (tests/stunner/cmd/stunner-cds,
github.com/l7mp/stunner/pkg/config/server v1.2.1, what the operator runs) serves the configs,
turngated runs with the operator's rendered command line and environment (`-w
--udp-thread-num=N`, STUNNER_ADDR, STUNNER_NAME, STUNNER_NAMESPACE, STUNNER_NODENAME,
STUNNER_CONFIG_ORIGIN), beside test_cds.py's server written in Python:

- the client connects before its config exists: nothing is served, then the config arrives;
- a route change admits a new peer on an existing allocation (the call goes on);
- a secret change: new credentials work, the old ones are refused, the allocations stay;
- a listener added and removed; the allocation on the first listener stays;
- the operator's delete (a zero config) is ignored in watch mode, as stunnerd does;
- the server stops, gets a new config while down and starts again: turngated redials and
  applies it; the allocation stays.

Without STUNner's programs the test skips, or fails under CI=true (--offline at test time).
"""
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
top_srcdir = os.environ.get("top_srcdir", os.path.join(here, "..", ".."))
sys.path.insert(0, os.path.join(top_srcdir, "tests", "integration"))
sys.path.insert(0, here)
from harness_admin import (REALM, SECRET, SUCCESS, Client, check, error_code,  # noqa: E402
                           free_port, run_tests, wait_for)
from test_cds import CdsDaemon, answers  # noqa: E402
from test_stunnerd_diff import programs  # noqa: E402

BIN = {}
IDENT = "testns/gw"


def config(ports, peers, secret):
    """The StunnerConfig as the operator renders it (STUNner's keys only: the Go server
    decodes it into its own type, which has no turngate keys)."""
    return {
        "version": "v1",
        "admin": {"name": IDENT, "loglevel": "all:INFO", "healthcheck_endpoint": ""},
        "auth": {"type": "ephemeral", "realm": REALM, "credentials": {"secret": secret}},
        "listeners": [{"name": "testns/gw/udp-%d" % p, "protocol": "TURN-UDP",
                       "address": "127.0.0.1", "port": p, "routes": ["testns/media"]}
                      for p in ports],
        "clusters": [{"name": "testns/media", "type": "STATIC", "endpoints": peers}],
    }


class Cds:
    def __init__(self, d, port):
        self.err = open(os.path.join(d, "stunner-cds.log"), "wb")
        self.proc = subprocess.Popen([os.path.join(BIN["dir"], "stunner-cds"),
                                      "127.0.0.1:%d" % port], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self.proc.stdout.readline()
        check(line.startswith("listening"), "stunner-cds did not start: %r" % line)

    def cmd(self, *words):
        self.proc.stdin.write(" ".join(words) + "\n")
        self.proc.stdin.flush()
        r = self.proc.stdout.readline().strip()
        check(r == "ok", "stunner-cds %s: %r" % (words[0], r))

    def upsert(self, conf):
        self.cmd("upsert", IDENT, json.dumps(conf))

    def close(self):
        try:
            self.cmd("quit")
        except Exception:  # noqa: BLE001 (already gone: its exit status says why)
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def perm_code(c, ip):
    return error_code(c.perm(ip, 9)[3])


def status(daemon):
    return daemon.admin({"cmd": "status"})


def test_operator_cds(d):
    cport = free_port()
    cds = Cds(d, cport)
    p1, p2, p3 = free_port(), free_port(), free_port()
    env = {"STUNNER_ADDR": "127.0.0.1", "STUNNER_NAME": "gw", "STUNNER_NAMESPACE": "testns",
           "STUNNER_NODENAME": "node-1",
           "STUNNER_CONFIG_ORIGIN": "http://127.0.0.1:%d" % cport}
    daemon = CdsDaemon(d, ["-w", "--udp-thread-num=2"], env).start()
    c = None
    try:
        # connected before its config exists: the bootstrap config serves nothing
        check(not answers(p1), "something answers before any config")
        cds.upsert(config([p1], ["127.0.0.1"], SECRET))
        wait_for(lambda: answers(p1), "the first config")
        st = status(daemon)
        check(st["last_reload"]["trigger"] == "cds", st)

        c = Client(p1)
        c.allocate()
        check(perm_code(c, "127.0.0.1") is None, "the admitted peer")
        check(perm_code(c, "127.0.0.3") == 403, "a peer no route covers")

        # a route change admits 127.0.0.3 on the same allocation
        cds.upsert(config([p1], ["127.0.0.1", "127.0.0.3"], SECRET))
        wait_for(lambda: perm_code(c, "127.0.0.3") is None, "the new route")
        check(status(daemon)["allocations"] == 1, "the allocation after the route change")

        # a secret change: a credential of the new secret works, the old one is refused
        cds.upsert(config([p1], ["127.0.0.1", "127.0.0.3"], "rotated-secret"))

        def new_secret_works():
            n = Client(p1, "bob", secret="rotated-secret")
            try:
                return n.allocate(expect="any")[1] == SUCCESS
            finally:
                n.close()
        wait_for(new_secret_works, "the rotated secret")
        o = Client(p1, "carol")
        check(error_code(o.allocate(expect="any")[3]) == 401, "the old secret")
        o.close()
        # alice's allocation (made with the old secret) and bob's: the rotation ended none
        check(status(daemon)["allocations"] == 2, "the allocations after the rotation")

        # a listener added, then removed; the first listener's allocation stays
        cds.upsert(config([p1, p2], ["127.0.0.1", "127.0.0.3"], "rotated-secret"))
        wait_for(lambda: answers(p2), "the added listener")
        cds.upsert(config([p1], ["127.0.0.1", "127.0.0.3"], "rotated-secret"))
        wait_for(lambda: not answers(p2), "the removed listener")
        check(answers(p1), "the first listener")

        # the operator's delete: a zero config, ignored in watch mode (as stunnerd does)
        g = status(daemon)["generation"]
        cds.cmd("delete", IDENT)
        wait_for(lambda: "ignoring delete" in daemon.stderr(), "the ignored delete")
        check(answers(p1) and status(daemon)["generation"] == g, "the delete was applied")

        # the server goes away, its config changes meanwhile, it comes back: redial, resync
        cds.cmd("stop")
        cds.upsert(config([p1, p3], ["127.0.0.1", "127.0.0.3"], "rotated-secret"))
        cds.cmd("start")
        wait_for(lambda: answers(p3), "the config after the server restart", timeout=60)
        check(answers(p1), "the first listener after the restart")
        check(status(daemon)["last_reload"]["ok"], "last reload")
        check(status(daemon)["allocations"] == 2, "the allocations after the restart")
    finally:
        if c is not None:
            c.close()
        cds.close()
        daemon.stop(check_clean=False)


if __name__ == "__main__":
    if not os.access(os.path.join(os.environ.get("top_builddir", "."), "turngated"), os.X_OK):
        print("skip: turngated not built")
        sys.exit(77)
    BIN["dir"] = programs()
    run_tests([test_operator_cds])
