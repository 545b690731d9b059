"""The master's HTTP endpoints: health and readiness (503 while draining), /status without
secrets, metrics, the credential API (its credential really allocates), a shared socket."""
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATECTL, Daemon, check, config_yaml, free_port,  # noqa: E402
                           run_tests)


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def endpoints(health, metrics, cred):
    extra = ""
    for key, url in (("healthcheck_endpoint", health), ("metrics_endpoint", metrics),
                     ("credential_api_endpoint", cred)):
        if url:
            extra += "  %s: \"%s\"\n" % (key, url)
    return extra


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


if __name__ == "__main__":
    run_tests([test_separate_servers, test_shared_server])
