#!/usr/bin/python3
"""The Grafana dashboard and the Prometheus rules against a real Prometheus scraping a real
turngated (issue 26).

test_dashboard_static: deploy/grafana/turngate.json is dashboard.py's output, parses, has the
datasource/instance/listener variables, every panel query names only metrics a scrape of
turngated shows (or recording rules of deploy/prometheus/turngate-rules.yaml, or `up`), and
none groups by a per-user label; the checker itself rejects a bad query.

test_against_prometheus: a Prometheus started here (1 s scrape and evaluation interval,
loopback port, temporary storage, the rules with every `for:` removed) scrapes turngated
while the test drives a known load and injects faults: allocations on a listener with four
relay ports and up to the total quota, a denied peer, failed authentications, a TLS
handshake, a good and a failed reload, three killed workers, a flood of unauthenticated
requests, then a drain. No alert fires before the faults; each alert fires after its fault
(TurngateNotReady only after the drain); then every panel expression, every variable, every
recording rule and every alert expression, run through the HTTP query API, returns a
non-empty vector of finite values with the labels the panel's legend and `by` clause name.

Without prometheus only the static test runs, and the program then exits as skipped
(failed in CI, CI=true).

TG_DASHBOARD_SHOT=FILE.png also renders Prometheus's graph page of a few panel queries in
headless Chromium after the load (docs/operations.md shows it), with a minute of relayed
traffic first so the graphs have a shape; not part of make check.
"""
import json
import math
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("top_srcdir") or os.path.join(HERE, "..", "..")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRC, "deploy", "grafana"))
import dashboard as dashboard_src  # noqa: E402
from harness_admin import (ALLOCATE, A_TRANSPORT, REQUEST, Daemon, Failure, build,  # noqa: E402
                           check, error_code, free_port, need_tool, peer_socket, run_tests,
                           scrape, wait_for)
from test_metrics import SECRET, exact_client  # noqa: E402

DASHBOARD = os.path.join(SRC, "deploy", "grafana", "turngate.json")
RULES = os.path.join(SRC, "deploy", "prometheus", "turngate-rules.yaml")
CERT = os.path.join(SRC, "tests", "conf", "test-cert.pem")
KEY = os.path.join(SRC, "tests", "conf", "test-key.pem")

# Labels that would make one series per user or per allocation: never grouped by.
PER_USER = {"user", "username", "client", "peer", "realm", "allocation", "id", "nonce"}
# Values of the dashboard's variables when its queries run outside Grafana.
VARIABLES = {"$instance": ".*", "$listener": ".*", "$__rate_interval": "5m"}
TOTAL_QUOTA = 8
EDGE_PORTS = 4

# ---- PromQL, read just enough to name metrics and grouping labels ------------------------

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr):
    """Metric (and recording rule) names an expression selects."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        if m.group().lower() in KEYWORDS or e[m.end():].lstrip().startswith("("):
            continue
        names.add(m.group())
    return names


def grouping(expr):
    """Labels named in by/without/on/ignoring clauses."""
    out = set()
    for m in re.finditer(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        out |= {x.strip() for x in m.group(1).split(",") if x.strip()}
    return out


def expected_labels(expr, legend):
    """(exact label set or None, labels every series must have) of a panel query."""
    need = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
    m = re.match(r"\s*(?:sum|max|min|avg|count) by \(([^)]*)\) \(", expr)
    if m:
        return {x.strip() for x in m.group(1).split(",")}, need
    if re.match(r"\s*(sum\(|histogram_quantile\()", expr):
        return set(), need
    return None, need


def substitute(expr):
    for k, v in VARIABLES.items():
        expr = expr.replace(k, v)
    return expr


def targets(dash):
    for p in dash["panels"]:
        for t in p.get("targets", []):
            yield p["title"], t


def rules_of(rules, kind):
    return [r for g in rules["groups"] for r in g["rules"] if kind in r]


def query_problems(dash, rules, scraped):
    """Everything wrong with the queries; empty when all is well."""
    known = scraped | {r["record"] for r in rules_of(rules, "record")} | {"up"}
    errs = []
    exprs = [("panel " + title, t["expr"]) for title, t in targets(dash)]
    exprs += [("variable " + v["name"], v["definition"]) for v in dash["templating"]["list"]
              if v["type"] == "query"]
    exprs += [("rule " + r.get("record", r.get("alert")), r["expr"])
              for g in rules["groups"] for r in g["rules"]]
    for where, e in exprs:
        if where.startswith("variable "):
            e = re.sub(r"^label_values\((.*), \w+\)$", r"\1", e)
        unknown = metric_names(e) - known
        if unknown:
            errs.append("%s: metrics turngated does not export: %s" % (where, sorted(unknown)))
        if not metric_names(e):
            errs.append("%s: selects no metric: %s" % (where, e))
        users = grouping(e) & PER_USER
        if users:
            errs.append("%s: groups by per-user labels %s" % (where, sorted(users)))
    for title, t in targets(dash):
        users = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", t["legendFormat"])) & PER_USER
        if users:
            errs.append("panel %s: legend names per-user labels %s" % (title, sorted(users)))
    return errs


# ---- turngated --------------------------------------------------------------------------

def daemon_config(d, ports, mport, relay_base, port=None):
    """Five listeners; udp and edge with relay ranges of their own from relay_base. port
    overrides udp's port (70000: a config a reload must refuse)."""
    udp, edge, tls = ports
    first = udp if port is None else port
    ls = [("udp", "TURN-UDP", first, "relay_port_min: %d, relay_port_max: %d"
           % (relay_base, relay_base + 99)),
          ("tcp", "TURN-TCP", udp, ""),
          ("edge", "TURN-UDP", edge, "relay_port_min: %d, relay_port_max: %d"
           % (relay_base + 100, relay_base + 99 + EDGE_PORTS)),
          ("tls", "TURN-TLS", tls, "cert_file: %s, key_file: %s" % (CERT, KEY)),
          ("dtls", "TURN-DTLS", tls, "cert_file: %s, key_file: %s"
           % (os.path.join(d, "dtls-cert.pem"), os.path.join(d, "dtls-key.pem")))]
    text = ("version: v1\nadmin:\n  name: dash\n  loglevel: all:INFO\n  workers: 2\n"
            "  admin_socket: %s\n  drain_timeout: 10\n  healthcheck_endpoint: \"\"\n"
            "  metrics_endpoint: \"http://127.0.0.1:%d/metrics\"\n"
            "auth:\n  type: ephemeral\n  realm: test.realm\n  credentials:\n    secret: %s\n"
            "listeners:\n" % (os.path.join(d, "admin.sock"), mport, SECRET))
    for name, proto, p, extra in ls:
        text += ("  - {name: %s, protocol: %s, address: 127.0.0.1, port: %d, routes: [loopback]%s}\n"
                 % (name, proto, p, ", " + extra if extra else ""))
    return text + ("clusters:\n  - {name: loopback, type: STATIC, endpoints: [127.0.0.0/8]}\n"
                   # one user fills the total quota (user_quota's default would stop it
                   # at half), and one key fails 30 times (past the guessing budget)
                   "limits: {total_quota: %d, unauth_rate: 20, unauth_burst: 100, "
                   "user_quota: 0, auth_fail_prefix: 0, auth_fail_user: 0}\n"
                   % TOTAL_QUOTA)


def try_allocate(port):
    """A client allocating once on the listener at port: (client, None) or (client, code)."""
    c = exact_client(port)
    c.challenge()
    return c, error_code(c.request(ALLOCATE, [(A_TRANSPORT, b"\x11\0\0\0")])[3])


def kill_worker(daemon, slot):
    before = daemon.admin({"cmd": "workers"})["workers"][slot]
    os.kill(before["pid"], signal.SIGKILL)

    def back():
        w = daemon.admin({"cmd": "workers"})["workers"][slot]
        return w["state"] == "running" and w["pid"] not in (0, before["pid"])
    wait_for(back, "worker %d respawned" % slot)


# ---- Prometheus -------------------------------------------------------------------------

class Prometheus:
    """A Prometheus of its own: loopback port, storage in the test's directory."""

    def __init__(self, d, target_port, rules):
        self.port = free_port()
        self.dir = d
        with open(os.path.join(d, "rules.yaml"), "w") as f:
            yaml.safe_dump(rules, f, sort_keys=False)
        conf = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                           "evaluation_interval": "1s"},
                "rule_files": [os.path.join(d, "rules.yaml")],
                "scrape_configs": [{"job_name": "turngate", "static_configs": [
                    {"targets": ["127.0.0.1:%d" % target_port]}]}]}
        with open(os.path.join(d, "prometheus.yml"), "w") as f:
            yaml.safe_dump(conf, f)
        self.log = open(os.path.join(d, "prometheus.log"), "wb")
        self.proc = subprocess.Popen(
            [shutil.which("prometheus"), "--config.file=" + os.path.join(d, "prometheus.yml"),
             "--storage.tsdb.path=" + os.path.join(d, "tsdb"),
             "--storage.tsdb.retention.time=1h",
             "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        wait_for(self.ready, "Prometheus ready on port %d" % self.port, 60)

    def logtext(self):
        with open(os.path.join(self.dir, "prometheus.log"), "rb") as f:
            return f.read().decode(errors="replace")[-3000:]

    def get(self, path, **params):
        url = "http://127.0.0.1:%d%s" % (self.port, path)
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read()

    def ready(self):
        check(self.proc.poll() is None, "prometheus exited:\n" + self.logtext())
        try:
            self.get("/-/ready")
            return True
        except OSError:
            return False

    def api(self, path, **params):
        reply = json.loads(self.get("/api/v1/" + path, **params))
        check(reply["status"] == "success", "%s %r: %r" % (path, params, reply))
        return reply["data"]

    def query(self, q):
        data = self.api("query", query=q)
        check(data["resultType"] == "vector", "%s: result type %s" % (q, data["resultType"]))
        return data["result"]

    def firing(self):
        return {a["labels"]["alertname"] for a in self.api("alerts")["alerts"]
                if a["state"] == "firing"}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def check_result(p, where, expr, legend=""):
    """A panel or rule expression: non-empty, finite, and shaped as its legend and by say."""
    result = p.query(substitute(expr))
    check(result, "%s: empty result for %s" % (where, substitute(expr)))
    exact, need = expected_labels(expr, legend)
    for s in result:
        labels = set(s["metric"]) - {"__name__"}
        v = float(s["value"][1])
        check(math.isfinite(v), "%s: %s = %s" % (where, s["metric"], v))
        check(need <= labels, "%s: series %s lacks %s" % (where, s["metric"], need - labels))
        check(exact is None or labels == exact,
              "%s: series %s, expected labels %s" % (where, s["metric"], sorted(exact or [])))
    return result


# ---- tests ------------------------------------------------------------------------------

def load():
    with open(DASHBOARD) as f:
        text = f.read()
    with open(RULES) as f:
        rules = yaml.safe_load(f)
    return text, json.loads(text), rules


def start_daemon(d):
    """(daemon, listener ports, metrics port, config(port=None) -> its config text)."""
    ports = (free_port(), free_port(), free_port())
    mport = free_port()

    # Relay ports 28100-28203, no other test's (50000 was test_relay's window) and below
    # the kernel's port-0 range: the three worker kills make the successors bind the held
    # allocations' relay ports again, and edge's four are counted.
    def config(port=None):
        return daemon_config(d, ports, mport, 28100, port)
    shutil.copy(CERT, os.path.join(d, "dtls-cert.pem"))
    shutil.copy(KEY, os.path.join(d, "dtls-key.pem"))
    return Daemon(d, config()).start(), ports, mport, config


def expiring_certificate(d):
    """Replaces the DTLS listener's certificate with one that expires in 5 days (the next
    reload loads it: TurngateCertificateExpiring)."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "5", "-subj", "/CN=turn.test",
                    "-keyout", os.path.join(d, "dtls-key.pem"),
                    "-out", os.path.join(d, "dtls-cert.pem")], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_dashboard_static(d):
    text, dash, rules = load()
    check(text == dashboard_src.render(), "turngate.json is not dashboard.py's output: "
          "run /usr/bin/python3 deploy/grafana/dashboard.py > deploy/grafana/turngate.json")
    names = {v["name"]: v for v in dash["templating"]["list"]}
    check(names.get("datasource", {}).get("type") == "datasource"
          and names["datasource"]["query"] == "prometheus", "no Prometheus datasource variable")
    check({"instance", "listener"} <= set(names), "instance/listener variables missing")
    for title, t in targets(dash):
        check(t["datasource"]["uid"] == "${datasource}", title + ": not on ${datasource}")
        check(t["expr"] == t["expr"].strip() and t["refId"], title + ": target")
    for p in dash["panels"]:
        if p["type"] not in ("row", "text"):
            check(p.get("datasource", {}).get("uid") == "${datasource}",
                  p["title"] + ": panel not on ${datasource}")
    check(sum(1 for _ in targets(dash)) >= 30, "fewer panel queries than expected")
    daemon, _, mport, _ = start_daemon(d)
    try:
        scraped = {re.sub(r"\{.*", "", k) for k in scrape(mport)}
        errs = query_problems(dash, rules, scraped)
        check(not errs, "\n".join(errs))
        # the checker can fail: an unknown metric and a per-user grouping
        bad = {"panels": [{"title": "bad", "targets": [
                   {"expr": "sum by (user) (rate(turngate_nope_total[5m]))",
                    "legendFormat": "{{peer}}"}]}],
               "templating": {"list": []}}
        errs = query_problems(bad, rules, scraped)
        check(len(errs) == 3 and "turngate_nope_total" in errs[0], "checker: %r" % errs)
        check(metric_names('histogram_quantile(0.5, sum by (le) (rate(a_b{x="y"}[5m]))) '
                           '/ on (instance) c:d') == {"a_b", "c:d"}, "metric_names")
        daemon.stop()
    finally:
        daemon.kill()


def inject_load(daemon, ports, config, peer, shot):
    """The known load and the faults; returns the clients holding allocations."""
    udp, edge, tls = ports
    pip, pport = peer.getsockname()
    a = exact_client(udp)
    a.challenge()
    rip, rport = a.relayed(a.allocate())[0]
    check(error_code(a.perm(pip)[3]) is None, "permission for the peer")
    ramp = []
    for i in range(600 if shot else 20):
        a.send(pip, pport, b"media %04d" % i)
        check(peer.recvfrom(2048)[0] == b"media %04d" % i, "relayed payload")
        if i % 5 == 0:
            peer.sendto(b"back", (rip, rport))
            a.sock.recv(2048)
        if shot:   # a minute in four phases, fast and slow, with an allocation in each
            if i % 150 == 75 and len(ramp) < 3:
                c, code = try_allocate(udp)
                check(code is None, "Allocate: %r" % code)
                ramp.append(c)
            time.sleep(0.05 if i // 150 % 2 == 0 else 0.15)
    for c in ramp:
        c.release()
    for i in range(10):                                   # a route that admits no 10/8 peer
        check(error_code(a.perm("10.9.8.%d" % i)[3]) == 403, "peer outside the routes: 403")
    b = exact_client(udp)                                 # a secret rotated on one side only
    b.challenge()
    b.key = bytes(16)
    for _ in range(30):
        r = b.request(ALLOCATE, [(A_TRANSPORT, b"\x11\0\0\0")])
        check(error_code(r[3]) == 401, "wrong key not refused")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.set_alpn_protocols(["stun.turn"])
    ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls), timeout=10)).close()
    held = [a]
    edge_codes = []
    for _ in range(EDGE_PORTS):                           # relay ports of "edge": 2 per worker
        c, code = try_allocate(edge)
        edge_codes.append(code)
        check(code in (None, 508), "edge Allocate: %r" % code)
        held += [c] if code is None else []
    fill, code = [], None
    for _ in range(TOTAL_QUOTA + 1):                      # up to the total quota
        c, code = try_allocate(udp)
        if code is not None:
            break
        fill.append(c)
    check(code == 508, "total quota %d not reached (%d + %d held)"
          % (TOTAL_QUOTA, len(held), len(fill)))
    for c in fill:                                        # lifetimes for the histogram
        c.release()
    expiring_certificate(daemon.dir)
    rc, out, err = daemon.ctl("reload")
    check(rc == 0 and "generation 2" in out, "good reload: %s %s" % (out, err))
    daemon.write_config(config(port=70000))
    rc, out, err = daemon.ctl("reload")
    check(rc == 1, "a reload of port 70000 must fail: %s %s" % (out, err))
    for slot in (0, 1, 0):
        kill_worker(daemon, slot)
    daemon.allowed_deaths = 3
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # unauthenticated flood
    for _ in range(400):
        s.sendto(build(ALLOCATE, REQUEST, os.urandom(12), [(A_TRANSPORT, b"\x11\0\0\0")],
                       fingerprint=True),
                 ("127.0.0.1", udp))
    s.close()
    return held, edge_codes


def test_against_prometheus(d):
    _, dash, rules = load()
    for r in rules_of(rules, "alert"):
        r.pop("for", None)            # fire at the first evaluation that matches
    alerts = {r["alert"] for r in rules_of(rules, "alert")}
    shot = os.environ.get("TG_DASHBOARD_SHOT")
    daemon, ports, mport, config = start_daemon(d)
    p = None
    peer = peer_socket()
    try:
        peer.settimeout(5.0)
        p = Prometheus(d, mport, rules)
        t0 = time.monotonic()
        # two rule evaluations over a scraped target, and no alert yet
        wait_for(lambda: p.query('count_over_time(turngate:ready[1m]) >= 2'),
                 "two evaluations of turngate:ready", 60)
        check(p.query('up{job="turngate"} == 1'), "target not up")
        check(not p.firing(), "alerts before any fault: %s" % p.firing())
        held, edge_codes = inject_load(daemon, ports, config, peer, shot)
        want = alerts - {"TurngateNotReady"}
        try:
            wait_for(lambda: p.firing() >= want, "alerts firing", 90)
        except Failure:
            raise Failure("alerts not firing: %s (edge Allocates: %r)"
                          % (sorted(want - p.firing()), edge_codes))
        check("TurngateNotReady" not in p.firing(), "TurngateNotReady before the drain")
        rc, out, _ = daemon.ctl("drain")
        check(rc == 0, "turngatectl drain")
        wait_for(lambda: "TurngateNotReady" in p.firing(), "TurngateNotReady firing", 60)
        for title, t in targets(dash):
            check_result(p, "panel " + title, t["expr"], t["legendFormat"])
        for r in rules_of(rules, "record") + rules_of(rules, "alert"):
            check_result(p, r.get("record", r.get("alert")), r["expr"])
        for v in dash["templating"]["list"]:
            if v["type"] == "query":
                m = re.match(r"label_values\((.*), (\w+)\)$", v["definition"])
                vals = p.api("label/%s/values" % m.group(2), **{"match[]": substitute(m.group(1))})
                check(vals, "variable %s: no values" % v["name"])
        listeners = p.api("label/name/values", **{"match[]": "stunner_listener_packets_total"})
        check(set(listeners) == {"udp", "tcp", "edge", "tls", "dtls"}, listeners)
        workers = p.query("sum by (worker) (turngate_worker_packets_total)")
        check({s["metric"]["worker"] for s in workers} == {"0", "1"}, workers)
        if shot:
            screenshot(p, dash, shot, time.monotonic() - t0 + 10)
        for c in held:      # so the drain ends at once (else it waits drain_timeout)
            c.refresh(0)
        daemon.write_config(config())
        check(daemon.stop() == 0, "exit status")
    except Exception:
        if p is not None:
            print("prometheus log:\n" + p.logtext())
        raise
    finally:
        peer.close()
        if p is not None:
            p.stop()
        daemon.kill()


# ---- screenshot (TG_DASHBOARD_SHOT) ------------------------------------------------------

SHOT_PANELS = ("Active allocations per listener", "Listener packets", "Authentication failures",
               "Peer permissions", "Packets per worker")


def screenshot(p, dash, path, seconds):
    from selenium import webdriver
    exprs = [substitute(t["expr"]).replace("5m]", "15s]") for title, t in targets(dash)
             if title in SHOT_PANELS]
    params = {}
    for i, e in enumerate(exprs):
        params.update({"g%d.expr" % i: e, "g%d.tab" % i: "0",
                       "g%d.range_input" % i: "%ds" % seconds,
                       "g%d.stacked" % i: "0", "g%d.show_exemplars" % i: "0"})
    url = "http://127.0.0.1:%d/graph?%s" % (p.port, urllib.parse.urlencode(params))
    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              "--window-size=1300,1000", "--force-device-scale-factor=0.6"):
        opts.add_argument(a)
    drv = webdriver.Chrome(options=opts)
    try:
        drv.get(url)
        # Debian's Prometheus 2.42 serves the classic UI: one rickshaw SVG per graph
        wait_for(lambda: len(drv.find_elements("css selector", ".graph_area svg path.path"))
                 >= len(exprs), "graphs drawn", 60)
        drv.set_window_size(1300, drv.execute_script("return document.body.scrollHeight") + 40)
        drv.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
        time.sleep(2)
        drv.save_screenshot(path)
    finally:
        drv.quit()


if __name__ == "__main__":
    if shutil.which("prometheus") is None:      # the static checks need no Prometheus
        try:
            run_tests([test_dashboard_static])
        except SystemExit as e:
            if e.code:
                raise
        need_tool("prometheus", "prometheus")   # exits: skipped, or failed in CI
    run_tests([test_dashboard_static, test_against_prometheus])
