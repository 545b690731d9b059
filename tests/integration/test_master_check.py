"""`turngated -c FILE -t`: exact output lines and exit statuses for valid and broken files."""
import json
import os
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATED, Daemon, check, config_yaml, free_port,  # noqa: E402
                           run_tests)

CORPUS = os.path.join(os.environ.get("top_srcdir", "."), "tests", "conf", "stunner")


def run_check(d, name, text, prefix=""):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    # Run from the file's directory so diagnostics name it as given ("name").
    r = subprocess.run([TURNGATED, "-c", prefix + (path if prefix else name), "-t"], cwd=d,
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout


def good(d):
    return config_yaml(os.path.join(d, "admin.sock"),
                       [("udp", 3478, "TURN-UDP"), ("tcp", 3478, "TURN-TCP")])


def test_valid(d):
    rc, out = run_check(d, "ok.yaml", good(d))
    check((rc, out) == (0, "configuration ok\n"), (rc, out))
    # stunnerd's file:// form.
    rc, out = run_check(d, "ok2.yaml", good(d), prefix="file://")
    check((rc, out) == (0, "configuration ok\n"), (rc, out))
    # No -c: the embedded default.
    r = subprocess.run([TURNGATED, "-t"], capture_output=True, text=True, timeout=60)
    check((r.returncode, r.stdout) == (0, "configuration ok\n"), r)


def test_every_problem_reported(d):
    text = good(d).replace("port: 3478", "port: 70000", 1).replace("TURN-TCP", "TURN-FOO")
    rc, out = run_check(d, "bad.yaml", text)
    lines = out.splitlines()
    check(rc == 1, (rc, out))
    check(len(lines) == 2, out)
    check(lines[0].startswith("bad.yaml:") and
          lines[0].endswith(": listeners[0].port: 70000 is out of range (1..65535)"), lines)
    check(lines[1].startswith("bad.yaml:") and ": listeners[1].protocol: 'TURN-FOO' is not a "
          "listener protocol" in lines[1], lines)
    check("configuration ok" not in out, out)


def test_syntax_and_missing(d):
    rc, out = run_check(d, "syn.yaml", "version: v1\nlisteners: [\n")
    check(rc == 1 and out.startswith("syn.yaml:3:1: syntax error"), (rc, out))
    r = subprocess.run([TURNGATED, "-c", os.path.join(d, "missing.yaml"), "-t"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and r.stdout == os.path.join(d, "missing.yaml") +
          ": cannot read: No such file or directory\n", r)


def test_warning_only_is_ok(d):
    rc, out = run_check(d, "warn.yaml", good(d) + "bogus: 1\n")
    lines = out.splitlines()
    check(rc == 0, (rc, out))
    check(len(lines) == 2 and ": warning: bogus: unknown key (ignored)" in lines[0], lines)
    check(lines[1] == "configuration ok", lines)


def test_stunner_corpus_live(d):
    """Operator-rendered configs from the corpus, served by a running daemon with a pod's
    $STUNNER_ADDR: `turngatectl config` shows the values stunnerd would use and `status`
    counts the route to a cluster the operator could not render."""
    with open(os.path.join(CORPUS, "operator-missing-backend.json")) as f:
        conf = json.load(f)
    with open(os.path.join(CORPUS, "edge-merge-keys.yaml")) as f:
        merged = f.read()
    port, hport = free_port(), free_port()
    conf["admin"].update({"admin_socket": os.path.join(d, "admin.sock"), "workers": 1,
                          "healthcheck_endpoint": "http://127.0.0.1:%d" % hport,
                          "loglevel": "all:INFO,turn:WARN,bogus"})
    conf["listeners"][0]["port"] = port
    # Same JSON, as the CDS server sends it; the daemon gets the pod's address.
    os.environ["STUNNER_ADDR"] = "127.0.0.1"
    dm = Daemon(d, json.dumps(conf), workers=1)
    try:
        dm.start()
        rc, out, err = dm.ctl("config")
        check(rc == 0, (rc, out, err))
        cfg = json.loads(out)
        lst = cfg["listeners"][0]
        check(lst["address"] == "127.0.0.1" and lst["port"] == port, lst)
        check(lst["routes"] == ["testnamespace/udproute-no-backend",
                                "testnamespace/udproute-ok"], lst)
        check(cfg["admin"]["loglevel"] == "all:INFO,turn:WARN", cfg["admin"])
        check(cfg["admin"]["name"] == "testnamespace/gateway-1", cfg["admin"])
        check(cfg["clusters"][0]["endpoints"] == ["10.42.0.0/16:<5000-5010>", "10.96.0.10"],
              cfg["clusters"])
        st = dm.admin({"cmd": "status"})
        check(st.get("unknown_routes") == 1, st)
        with urllib.request.urlopen("http://127.0.0.1:%d/status" % hport, timeout=10) as r:
            hs = json.loads(r.read())
        check(hs.get("unknownRoutes") == 1, hs)
        # A reload to the merge-key config: the second listener keeps the merged routes.
        text = merged.replace("auth:", "admin: {admin_socket: %s, workers: 1, "
                              "healthcheck_endpoint: \"http://127.0.0.1:%d\"}\nauth:"
                              % (dm.sock, hport), 1)
        text = text.replace("address: 10.0.0.7\n  port: 3478",
                            "address: 127.0.0.1\n  port: %d" % port)
        dm.write_config(text)
        rc, out, err = dm.ctl("reload")
        check(rc == 0, (rc, out, err))
        rc, out, err = dm.ctl("config")
        cfg = json.loads(out)
        tcp = cfg["listeners"][1]
        check(tcp["protocol"] == "TURN-TCP" and tcp["address"] == "127.0.0.1" and
              tcp["port"] == port and tcp["routes"] == ["media"], tcp)
        check(dm.admin({"cmd": "status"}).get("unknown_routes") == 0, "unknown_routes")
    finally:
        del os.environ["STUNNER_ADDR"]
        dm.stop()


RANGE_HEAD = """version: v1
admin:
  name: t
  healthcheck_endpoint: "http://127.0.0.1:51000"
  metrics_endpoint: "http://:8080"
auth:
  type: ephemeral
  credentials:
    secret: s
listeners:
"""


def test_relay_range_holds_own_port(d):
    """#35 (8): a relay port range that holds one of the instance's own ports (a listener's
    of either transport, on an address its relay sockets may bind, or an HTTP endpoint's)
    is an error at the key that set the range, or at the port that falls in one."""
    text = RANGE_HEAD + (
        # 1: its own port in its range (line 14, column 21: the value of relay_port_min).
        "  - {name: a, address: 127.0.0.1, port: 3478, relay_port_min: 3000, "
        "relay_port_max: 4000}\n"
        # 2: a TCP listener's port in listeners[0]'s range on the same address.
        "  - {name: b, protocol: TURN-TCP, address: 127.0.0.1, port: 3500, "
        "relay_port_min: 40000, relay_port_max: 40999}\n"
        # 3: the same port on another IPv4 address: no clash.
        "  - {name: c, address: 127.0.0.3, port: 3600, relay_port_min: 41000, "
        "relay_port_max: 41999}\n"
        # 4: an inherited range (49152-65535) holding the health port on its address.
        "  - {name: d, address: 127.0.0.1, port: 4700}\n"
        # 5: a wildcard listener: listeners[0]'s relay sockets on 127.0.0.1 would take it.
        "  - {name: e, address: 0.0.0.0, port: 3800, relay_port_min: 42000, "
        "relay_port_max: 42999}\n")
    rc, out = run_check(d, "range.yaml", text)
    lines = out.splitlines()
    check(rc == 1 and len(lines) == 4, (rc, out))
    check(lines[0] == "range.yaml:11:63: listeners[0].relay_port_min: relay port range "
          "3000-4000 holds this listener's own port 3478/udp on 127.0.0.1 (expected a range "
          "that holds none of this instance's listener ports)", lines[0])
    check(lines[1] == "range.yaml:12:61: listeners[1].port: 3500/tcp on 127.0.0.1 lies in "
          "the relay port range 3000-4000 of listeners[0] (expected a port outside every "
          "relay port range on that address: a relay socket could take it)", lines[1])
    check(lines[2] == "range.yaml:14:5: listeners[3]: relay port range 49152-65535 "
          "(admin.relay_port_min..max) holds port 51000 of admin.healthcheck_endpoint "
          "http://127.0.0.1:51000 (expected a range that holds none of this instance's HTTP "
          "ports)", lines[2])
    check(lines[3].startswith("range.yaml:15:") and
          "listeners[4].port: 3800/udp on 0.0.0.0 lies in the relay port range 3000-4000 "
          "of listeners[0]" in lines[3], lines[3])
    # Moved out of each other's ranges, the same listeners pass.
    fixed = (text.replace("port: 3478", "port: 2478").replace("port: 3500", "port: 2500")
             .replace("port: 3800", "port: 2800").replace("127.0.0.1:51000", "127.0.0.1:8086"))
    rc, out = run_check(d, "fixed.yaml", fixed)
    check((rc, out) == (0, "configuration ok\n"), (rc, out))


def test_dual_stack_address_checked(d):
    """listeners[].dual_stack_address (#35, 8): an IP of the other family than `address`,
    unicast and not link-local, and not with relay_address_mask; each mistake is an error
    at the key."""
    text = RANGE_HEAD.replace("http://127.0.0.1:51000", "http://127.0.0.1:8086") + (
        "  - {name: a, address: 10.0.0.1, port: 3478, dual_stack_address: fd00::1}\n"
        "  - {name: b, address: 10.0.0.2, port: 3478, dual_stack_address: 10.0.0.3}\n"
        "  - {name: c, address: 10.0.0.4, port: 3478, dual_stack_address: fe80::1}\n"
        "  - {name: d, address: 10.0.0.5, port: 3478, dual_stack_address: fd00::5, "
        "relay_address_mask: 192.0.2.1}\n"
        "  - {name: e, address: 10.0.0.6, port: 3478, dual_stack_address: nope}\n")
    rc, out = run_check(d, "dual.yaml", text)
    lines = out.splitlines()
    check(rc == 1 and len(lines) == 4, (rc, out))
    check(lines[0].startswith("dual.yaml:12:") and "listeners[1].dual_stack_address: "
          "'10.0.0.3' is of the family of address '10.0.0.2' (expected an IPv6 address"
          in lines[0], lines[0])
    check(lines[1].startswith("dual.yaml:13:") and "listeners[2].dual_stack_address: "
          "'fe80::1' is an unspecified, multicast, broadcast or link-local" in lines[1],
          lines[1])
    check(lines[2].startswith("dual.yaml:14:") and "listeners[3].dual_stack_address: "
          "given with relay_address_mask" in lines[2], lines[2])
    check(lines[3].startswith("dual.yaml:15:") and "listeners[4].dual_stack_address: "
          "'nope' is not an IP address" in lines[3], lines[3])


if __name__ == "__main__":
    run_tests([test_valid, test_every_problem_reported, test_syntax_and_missing,
               test_warning_only_is_ok, test_stunner_corpus_live,
               test_relay_range_holds_own_port, test_dual_stack_address_checked])
