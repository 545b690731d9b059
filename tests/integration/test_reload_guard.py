"""The reload guard (#37): a reload cannot silently empty the gateway.

A `-w` daemon with three listeners and a relaying allocation: renaming `listeners:` to
`listners:` is refused (the allocation keeps relaying, /ready stays 200, status and the
metrics say "refused" with the reason and a did-you-mean at FILE:LINE:COL); `turngatectl
reload --force` applies it (/ready 503, the metric says applied). A deliberate removal of one
listener applies; `listeners: []` is refused without --force, and so are a removal while a
listener key is misspelled and a listener restart caused by a misspelled key of its own. A start without listeners is allowed (/ready 503). A config
from the discovery service stays authoritative: an empty one is applied, logged as a
warning and shown in status.
"""
import os
import re
import signal
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Client, Daemon, Peer, check, config, free_port,  # noqa: E402
                           relay_range, run_tests, wait_for)


def make_config(d, listeners, http_port):
    text = config(d, [(n, p, proto, ["loopback"]) for n, p, proto in listeners],
                  {"loopback": ["127.0.0.1"]}, relay=relay_range())
    return text.replace('  healthcheck_endpoint: ""\n',
                        '  healthcheck_endpoint: "http://127.0.0.1:%d"\n'
                        '  metrics_endpoint: "http://127.0.0.1:%d/metrics"\n'
                        % (http_port, http_port), 1)


def http_get(port, path):
    """(status, body) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(port, name):
    """The value of the sample `name` (with its labels, as written) in /metrics, or None."""
    body = http_get(port, "/metrics")[1]
    m = re.search(r"^%s (\S+)$" % re.escape(name), body, re.M)
    return float(m.group(1)) if m else None


def relays(c, peer):
    """A round trip through c's allocation: client -> peer, peer -> client."""
    c.send("127.0.0.1", peer.port, b"ping-guard")
    got = peer.drain(timeout=2.0, limit=1)
    if not got or got[0][0] != b"ping-guard":
        return False
    peer.sock.sendto(b"pong-guard", got[0][1])
    return c.recv_data(timeout=2.0) == b"pong-guard"


def last_reload(daemon, trigger, after_gen=None):
    """The status once a reload with this trigger is recorded."""
    return wait_for(lambda: (lambda s: s if s["last_reload"]["trigger"] == trigger else None)(
        daemon.admin({"cmd": "status"})), "a %s reload" % trigger)


def three(p1, p2):
    return [("udp", p1, "TURN-UDP"), ("tcp", p1, "TURN-TCP"), ("udp2", p2, "TURN-UDP")]


def test_typo_refused_then_forced(d):
    p1, p2, hp = free_port(), free_port(), free_port()
    good = make_config(d, three(p1, p2), hp)
    daemon = Daemon(d, good, args=["-w"]).start()
    peer = Peer("127.0.0.1")
    c = Client(p1)
    try:
        check(http_get(hp, "/ready")[0] == 200, "/ready before")
        c.allocate()
        check(c.perm("127.0.0.1", peer.port)[1] == 0x100, "CreatePermission")
        check(relays(c, peer), "no relaying before the reload")
        gen = daemon.admin({"cmd": "status"})["generation"]

        # The typo of the issue: every listener would go.
        check("\nlisteners:\n" in good, good)
        daemon.write_config(good.replace("\nlisteners:\n", "\nlistners:\n", 1))
        st = last_reload(daemon, "inotify")
        lr = st["last_reload"]
        check(lr.get("result") == "refused" and lr["ok"] is False, lr)
        check("would remove every listener (udp, tcp, udp2)" in (lr.get("reason") or ""), lr)
        check(re.search(r"turngate\.yaml:\d+:1: listners: unknown key \(ignored\); did you "
                        r"mean `listeners`\?", lr["reason"]), lr)
        check(any(re.search(r"turngate\.yaml:\d+:1: warning: listners: unknown key "
                            r"\(ignored\); did you mean `listeners`\?", e)
                  for e in lr["errors"]), lr)
        check(st["generation"] == gen and len(st["listeners"]) == 3, st)
        check(st["allocations"] == 1, st)
        check(relays(c, peer), "the allocation stopped relaying after a refused reload")
        rc, out, err = daemon.ctl("status")
        check(rc == 0 and "last reload:    refused (inotify): would remove every listener"
              in out and "did you mean `listeners`?" in out, out)
        check(metric(hp, "turngate_config_last_reload_successful") == 0, "metric not 0")
        check(metric(hp, 'turngate_reloads_total{result="refused"}') == 1, "refused counter")
        check(http_get(hp, "/ready")[0] == 200, "/ready after the refusal")
        check("refused: would remove every listener" in daemon.stderr(), daemon.stderr())

        # turngatectl reload without --force: refused again, non-zero exit.
        rc, out, err = daemon.ctl("reload")
        check(rc != 0 and "would remove every listener" in err and "refused" in err and
              "--force" in err, (rc, out, err))
        check(relays(c, peer), "relaying after the second refusal")

        # --force applies it: nothing serves, /ready 503, the metric says applied.
        rc, out, err = daemon.ctl("reload", "--force")
        check(rc == 0 and "(forced)" in out, (rc, out, err))
        st = daemon.admin({"cmd": "status"})
        check(st["listeners"] == [] and st["last_reload"]["result"] == "applied" and
              st["last_reload"]["forced"] is True, st)
        check(http_get(hp, "/ready")[0] == 503, "/ready with no listener")
        check(metric(hp, "turngate_config_last_reload_successful") == 1, "metric not 1")
        rc, out, err = daemon.ctl("status")
        check("ok (admin, forced): would remove every listener" in out and
              "none (nothing serves" in out, out)
        wait_for(lambda: daemon.admin({"cmd": "status"})["allocations"] == 0,
                 "the allocations of the removed listeners to end")
        # Putting the listeners back makes it ready again (a reload from nothing).
        daemon.write_config(good)
        wait_for(lambda: len(daemon.admin({"cmd": "status"})["listeners"]) == 3,
                 "the listeners back")
        check(http_get(hp, "/ready")[0] == 200, "/ready with the listeners back")
    finally:
        c.close()
        peer.close()
        check(daemon.stop() == 0, "exit status")


def test_deliberate_removals(d):
    p1, p2, hp = free_port(), free_port(), free_port()
    daemon = Daemon(d, make_config(d, three(p1, p2), hp)).start()
    try:
        # One listener left out of the list: deliberate, applied without --force.
        daemon.write_config(make_config(d, three(p1, p2)[:2], hp))
        daemon.signal(signal.SIGHUP)
        st = last_reload(daemon, "SIGHUP")
        check(st["last_reload"]["result"] == "applied" and st["last_reload"]["ok"], st)
        check(sorted(x["name"] for x in st["listeners"]) == ["tcp", "udp"], st)

        # A removal while a listener key is misspelled: refused, with the did-you-mean.
        text = make_config(d, [("udp", p1, "TURN-UDP")], hp).replace(
            "    protocol: TURN-UDP\n", "    protocl: TURN-UDP\n", 1)
        daemon.write_config(text)
        r = daemon.admin({"cmd": "reload"})
        check(r["ok"] is False and r.get("refused") is True, r)
        check("would remove listener tcp while a key is not recognised" in r["error"] and
              "listeners[0].protocl: unknown key (ignored); did you mean `protocol`?"
              in r["error"], r)
        check(len(daemon.admin({"cmd": "status"})["listeners"]) == 2, "partly applied")

        # A listener restarted by a misspelled key of its own (its address falls back to
        # the default, its calls would end): refused too.
        text = make_config(d, three(p1, p2)[:2], hp).replace(
            "    address: 127.0.0.1\n", "    adress: 127.0.0.1\n", 1)
        daemon.write_config(text)
        r = daemon.admin({"cmd": "reload"})
        check(r["ok"] is False and r.get("refused") is True, r)
        check("would restart listener udp (its allocations end) while its key is not "
              "recognised" in r["error"] and "listeners[0].adress: unknown key (ignored); "
              "did you mean `address`?" in r["error"], r)

        # Every listener removed on purpose (`listeners: []`): still refused without force.
        text = make_config(d, [], hp).replace("listeners:\nclusters:", "listeners: []\nclusters:")
        check("listeners: []" in text, text)
        daemon.write_config(text)
        r = daemon.admin({"cmd": "reload"})
        check(r["ok"] is False and "would remove every listener (udp, tcp)" in r["error"], r)
        check(http_get(hp, "/ready")[0] == 200, "/ready after the refusal")
        check(daemon.admin({"cmd": "reload", "force": "yes"})["ok"] is False, "force: string")
        r = daemon.admin({"cmd": "reload", "force": True})
        check(r["ok"] is True and r["forced"] is True, r)
        check(daemon.admin({"cmd": "status"})["listeners"] == [], "listeners after force")
        check(http_get(hp, "/ready")[0] == 503, "/ready with no listener")
        check(metric(hp, 'turngate_reloads_total{result="refused"}') == 3, "refused counter")
        # the start, the SIGHUP and the forced reload
        check(metric(hp, 'turngate_reloads_total{result="success"}') == 3, "success counter")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_start_without_listeners(d):
    """A start is a reload from nothing: it removes nothing and is allowed, not ready."""
    hp = free_port()
    text = make_config(d, [], hp).replace("listeners:\nclusters:", "listeners: []\nclusters:")
    daemon = Daemon(d, text).start()
    try:
        st = daemon.admin({"cmd": "status"})
        check(st["listeners"] == [] and st["last_reload"]["ok"], st)
        check(http_get(hp, "/ready")[0] == 503, "/ready with no listener at start")
        check(http_get(hp, "/live")[0] == 200, "/live")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_cds_empty_applied_loudly(d):
    from cds_server import CdsServer
    from test_cds import IDENT, CdsDaemon, answers, stunner_config
    srv = CdsServer().start()
    sock = os.path.join(d, "admin.sock")
    p1 = free_port()
    srv.set_config(IDENT, stunner_config(sock, [p1]))
    daemon = CdsDaemon(d, ["-c", "http://127.0.0.1:%d" % srv.port, "--udp-thread-num=2"],
                       {"STUNNER_NAMESPACE": "testns", "STUNNER_NAME": "gw"}).start()
    try:
        wait_for(lambda: answers(p1), "the CDS listener")
        gen = daemon.admin({"cmd": "status"})["generation"]
        # The operator renders a Gateway without listeners: authoritative, applied.
        srv.set_config(IDENT, stunner_config(sock, []))
        st = wait_for(lambda: (lambda s: s if s["generation"] > gen else None)(
            daemon.admin({"cmd": "status"})), "the empty CDS config")
        lr = st["last_reload"]
        check(st["listeners"] == [] and lr["ok"] and lr["trigger"] == "cds", st)
        check("would remove every listener (testns/gw/udp-%d)" % p1 in (lr.get("reason") or ""),
              lr)
        check(re.search(r"WARN .*applied the discovery service's configuration, which is "
                        r"authoritative: would remove every listener", daemon.stderr()),
              daemon.stderr())
        rc, out, err = daemon.ctl("status")
        check("ok (cds): would remove every listener" in out and "none (nothing serves" in out,
              out)
        check(not answers(p1), "the listener still answers")
    finally:
        srv.stop()
        check(daemon.stop() == 0, "exit status")


if __name__ == "__main__":
    run_tests([test_typo_refused_then_forced, test_deliberate_removals,
               test_start_without_listeners, test_cds_empty_applied_loudly])
