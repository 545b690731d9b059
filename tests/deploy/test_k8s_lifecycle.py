#!/usr/bin/python3
"""tests/deploy/test_k8s_lifecycle.py: the pod lifecycle deploy/kubernetes relies on, against the real daemon.

deployment.yaml assumes: its probes' paths (/live and /ready, read from the manifest) on
the health port answer 200 once the pod
serves; on SIGTERM (pod deletion) /ready turns 503 at once so the pod leaves the Service
endpoints, /live stays 200 so the kubelet does not restart it mid-drain, existing
allocations keep relaying, new ones are refused, and the process exits 0 as soon as the
last allocation ends, well before terminationGracePeriodSeconds. This test runs
`turngated -c CONFIG -w` with the ConfigMap's own config (ports and paths moved to the
test's; drain_timeout lowered so a failure cannot hold the suite for ten minutes; the
loopback peer added to the routed cluster) and checks each step with HTTP requests, a real
TURN client (python3-aioice) and a UDP echo peer. Timeouts are generous upper bounds.
"""
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml
from aioice import stun, turn

from deploy_turn import Client, Echo, credential, round_trip
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness_admin import free_port  # noqa: E402

SRC = os.environ.get("top_srcdir", ".")
BUILD = os.environ.get("top_builddir", ".")
DAEMON = os.path.join(BUILD, "turngated")
CONFIGMAP = os.path.join(SRC, "deploy", "kubernetes", "configmap.yaml")
SECRET = "lifecycle-test-secret"
DRAIN_S = 60


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None


def wait_status(url, want, timeout):
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = http_status(url)
        if got == want:
            return
        time.sleep(0.1)
    raise AssertionError(f"{url}: {got}, expected {want} within {timeout} s")


def write_config(tmp, turn_port, health_port):
    with open(CONFIGMAP, encoding="utf-8") as fh:
        cfg = yaml.safe_load(yaml.safe_load(fh)["data"]["turngate.yaml"])
    grace = cfg["admin"]["drain_timeout"]
    cfg["admin"].update(admin_socket=os.path.join(tmp, "admin.sock"), workers=1,
                        state_dir=os.path.join(tmp, "state"),
                        healthcheck_endpoint=f"http://127.0.0.1:{health_port}",
                        metrics_endpoint="", drain_timeout=DRAIN_S)
    for key in ("secret_file", "previous_secret_file"):
        cfg["auth"][key] = os.path.join(tmp, os.path.basename(cfg["auth"][key]))
        with open(cfg["auth"][key], "w", encoding="utf-8") as fh:
            fh.write(SECRET + "\n")
    cfg["listeners"] = [l for l in cfg["listeners"] if l["protocol"] == "TURN-UDP"]
    cfg["listeners"][0]["port"] = turn_port
    cfg["clusters"][0]["endpoints"].append("127.0.0.1")
    path = os.path.join(tmp, "turngate.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(cfg, fh)
    return path, grace


def probe_paths():
    """The paths of the Deployment's liveness and readiness probes (what the kubelet asks),
    which the host-network DaemonSet must share, port included."""
    probes = []
    for path in (("kubernetes", "deployment.yaml"), ("kubernetes-hostnetwork", "daemonset.yaml")):
        with open(os.path.join(SRC, "deploy", *path), encoding="utf-8") as fh:
            ctr = yaml.safe_load(fh)["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
        probes.append([(ctr[k]["httpGet"]["path"], ports[ctr[k]["httpGet"]["port"]])
                       for k in ("livenessProbe", "readinessProbe")])
    assert probes[0] == probes[1], f"the DaemonSet's probes {probes[1]} != the Deployment's {probes[0]}"
    return probes[0][0][0], probes[0][1][0]


async def scenario(proc, turn_port, health):
    live, ready = probe_paths()
    loop = asyncio.get_running_loop()
    echo_t, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
    peer = echo_t.get_extra_info("sockname")
    user, password = credential(SECRET, "lifecycle")
    try:
        wait_status(health + ready, 200, 30)
        wait_status(health + live, 200, 5)
        transport, client = await turn.create_turn_endpoint(
            Client, server_addr=("127.0.0.1", turn_port), username=user, password=password)
        await round_trip(transport, client, peer, "before")

        proc.send_signal(signal.SIGTERM)
        wait_status(health + ready, 503, 10)
        assert http_status(health + live) == 200, f"{live} failed while draining"
        assert proc.poll() is None, "exited with an allocation still open"
        await round_trip(transport, client, peer, "draining")
        refused = False
        try:
            t2, _ = await asyncio.wait_for(turn.create_turn_endpoint(
                Client, server_addr=("127.0.0.1", turn_port), username=user,
                password=password), 30)
            t2.close()
        except stun.TransactionFailed as e:  # an error response to the Allocate
            refused = True
            print(f"new allocation while draining: {e.response.attributes.get('ERROR-CODE')}")
        assert refused, "a new allocation was accepted while draining"

        start = time.monotonic()
        transport.close()  # Refresh with LIFETIME 0: the last allocation ends
        while proc.poll() is None and time.monotonic() - start < DRAIN_S + 30:
            await asyncio.sleep(0.1)
        assert proc.poll() == 0, f"exit status {proc.poll()} after the drain"
        assert time.monotonic() - start < DRAIN_S, \
            "the daemon waited for drain_timeout instead of exiting with no allocations left"
    finally:
        echo_t.close()


def state_room(log_text):
    """The emptyDir that holds state_dir must take the state file twice: a start (a
    container restart inside the pod) copies the table it takes over into a new file
    before it removes the old one, and a Memory emptyDir's tmpfs is sizeLimit large.
    The segment's size is the daemon's own figure for the ConfigMap's config (the pod runs
    2 workers where this test runs 1: 1 MiB of slack covers their slots)."""
    m = re.search(r"shared segment ([0-9.]+) MiB", log_text)
    assert m, "no 'shared segment N MiB' line in the daemon's log"
    seg = float(m.group(1))
    with open(os.path.join(SRC, "deploy", "kubernetes", "deployment.yaml"),
              encoding="utf-8") as fh:
        vols = yaml.safe_load(fh)["spec"]["template"]["spec"]["volumes"]
    limit = [v["emptyDir"]["sizeLimit"] for v in vols if v["name"] == "run"][0]
    m = re.fullmatch(r"([0-9]+)Mi", limit)
    assert m, f"sizeLimit {limit!r} is not in Mi"
    need = 2 * seg + 1
    assert int(m.group(1)) >= need, \
        f"emptyDir 'run' sizeLimit {limit} < {need:.1f} MiB (twice the {seg} MiB table)"
    return seg, limit


def main():
    if not os.access(DAEMON, os.X_OK):
        print(f"FAIL: {DAEMON} is not built")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        turn_port = free_port()
        health_port = free_port()
        cfg, grace_cfg = write_config(tmp, turn_port, health_port)
        with open(os.path.join(SRC, "deploy", "kubernetes", "deployment.yaml"),
                  encoding="utf-8") as fh:
            grace_pod = yaml.safe_load(fh)["spec"]["template"]["spec"][
                "terminationGracePeriodSeconds"]
        log = open(os.path.join(tmp, "daemon.log"), "w+", encoding="utf-8")
        proc = subprocess.Popen([DAEMON, "-c", cfg, "-w"], stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, STUNNER_ADDR="127.0.0.1"))
        try:
            assert grace_pod >= grace_cfg + 15, \
                f"terminationGracePeriodSeconds {grace_pod} < drain_timeout {grace_cfg} + 15"
            asyncio.run(asyncio.wait_for(
                scenario(proc, turn_port, f"http://127.0.0.1:{health_port}"), 240))
            log.seek(0)
            seg, limit = state_room(log.read())
        except (AssertionError, asyncio.TimeoutError, OSError) as e:
            log.seek(0)
            print(log.read())
            print(f"FAIL: {e!r}")
            return 1
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
            log.close()
    print("ok: ready -> SIGTERM -> not ready, still live, relaying, refusing -> exit 0")
    print(f"ok: the state file's emptyDir ({limit}) holds the {seg} MiB table twice")
    return 0


if __name__ == "__main__":
    sys.exit(main())
