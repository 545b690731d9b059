#!/usr/bin/python3
"""tests/deploy/test_k8s_reload.py: a Secret update through a kubelet-style projected volume reloads turngated -w without a restart.

deploy/kubernetes mounts the ConfigMap and the Secret as one projected volume and runs
`turngated -c /etc/turngate/turngate.yaml -w`. The kubelet's atomic writer lays such a
volume out as a timestamped directory holding the files, a `..data` symlink to it, and one
top-level symlink per file into `..data/`. An update writes a new timestamped directory,
points `..data_tmp` at it, renames `..data_tmp` over `..data` (the atomic switch), and
removes the old directory. This test builds that layout in a temp dir from the
ConfigMap's own config (ports and paths moved to the test's), starts the daemon,
performs a secret rotation as the kubelet would, and checks that
- the daemon reloads by itself (generation goes up, trigger inotify, same pid);
- a credential minted with the new secret allocates, and one from the old secret still
  does (previous-secret), and one from an unrelated secret gets 401.
Timeouts are generous upper bounds; the test polls, never sleeps for a fixed time.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import yaml
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness_admin import free_port  # noqa: E402

SRC = os.environ.get("top_srcdir", ".")
BUILD = os.environ.get("top_builddir", ".")
DAEMON = os.path.join(BUILD, "turngated")
CTL = os.path.join(BUILD, "turngatectl")
CONFIGMAP = os.path.join(SRC, "deploy", "kubernetes", "configmap.yaml")


class ProjectedVolume:
    """A directory laid out and updated the way the kubelet's atomic writer does."""

    def __init__(self, root):
        self.root = root
        self.serial = 0

    def write(self, files):
        self.serial += 1
        ts = os.path.join(self.root, f"..2026_11_30_00_00_{self.serial:02d}.{os.getpid()}")
        os.mkdir(ts)
        for name, text in files.items():
            with open(os.path.join(ts, name), "w", encoding="utf-8") as fh:
                fh.write(text)
        old = None
        data = os.path.join(self.root, "..data")
        if os.path.islink(data):
            old = os.path.join(self.root, os.readlink(data))
        tmp = os.path.join(self.root, "..data_tmp")
        os.symlink(os.path.basename(ts), tmp)
        os.rename(tmp, data)
        for name in files:
            link = os.path.join(self.root, name)
            if not os.path.islink(link):
                os.symlink(os.path.join("..data", name), link)
        if old:
            shutil.rmtree(old)


def ctl(sock, *args):
    r = subprocess.run([CTL, "-s", sock, "--json", *args], capture_output=True, text=True,
                       timeout=60, check=False)
    return json.loads(r.stdout) if r.stdout.strip().startswith("{") else {"raw": r.stdout + r.stderr}


def probe_allocate(port, secret):
    """The result of the probe's allocate step: 'ok' or the error detail."""
    r = subprocess.run([CTL, "probe", f"turn:127.0.0.1:{port}?transport=udp", "--secret", secret,
                        "--timeout", "10000", "--json"], capture_output=True, text=True,
                       timeout=60, check=False)
    try:
        steps = json.loads(r.stdout)["steps"]
    except (ValueError, KeyError):
        return f"unparsable probe output: {r.stdout!r} {r.stderr!r}"
    for s in steps:
        if s["step"] == "allocate":
            return "ok" if s["ok"] else s.get("detail", "failed")
    return f"no allocate step: {steps}"


def test_config(tmp, vol, port):
    with open(CONFIGMAP, encoding="utf-8") as fh:
        cm = yaml.safe_load(fh)
    cfg = yaml.safe_load(cm["data"]["turngate.yaml"])
    cfg["admin"]["admin_socket"] = os.path.join(tmp, "admin.sock")
    cfg["admin"]["state_dir"] = os.path.join(tmp, "state")
    cfg["admin"]["healthcheck_endpoint"] = ""
    cfg["admin"]["metrics_endpoint"] = ""
    cfg["admin"]["workers"] = 1
    for key in ("secret_file", "previous_secret_file"):
        assert cfg["auth"][key].startswith("/etc/turngate/"), cfg["auth"][key]
        cfg["auth"][key] = os.path.join(vol, os.path.basename(cfg["auth"][key]))
    cfg["listeners"] = [l for l in cfg["listeners"] if l["protocol"] == "TURN-UDP"]
    for l in cfg["listeners"]:
        l["port"] = port
    return yaml.safe_dump(cfg)


def wait_generation(sock, above, timeout):
    deadline = time.monotonic() + timeout
    st = {}
    while time.monotonic() < deadline:
        st = ctl(sock, "status")
        if st.get("generation", 0) > above:
            return st
        time.sleep(0.1)
    raise AssertionError(f"no reload within {timeout} s: {st}")


def main():
    for exe in (DAEMON, CTL):
        if not os.access(exe, os.X_OK):
            print(f"FAIL: {exe} is not built")
            return 1
    with tempfile.TemporaryDirectory() as tmp:
        vol = os.path.join(tmp, "etc-turngate")
        os.mkdir(vol)
        sock = os.path.join(tmp, "admin.sock")
        port = free_port()
        config = test_config(tmp, vol, port)
        pv = ProjectedVolume(vol)
        pv.write({"turngate.yaml": config, "secret": "secret-A\n", "previous-secret": "secret-A\n"})
        log = open(os.path.join(tmp, "daemon.log"), "w+", encoding="utf-8")
        env = dict(os.environ, STUNNER_ADDR="127.0.0.1")
        proc = subprocess.Popen([DAEMON, "-c", os.path.join(vol, "turngate.yaml"), "-w"],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            st = {}
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and st.get("generation") is None:
                if proc.poll() is not None:
                    raise AssertionError(f"turngated exited with {proc.returncode}")
                time.sleep(0.1)
                st = ctl(sock, "status") if os.path.exists(sock) else {}
            gen = st.get("generation")
            assert gen is not None, f"admin socket never answered: {st}"
            assert probe_allocate(port, "secret-A") == "ok", "secret-A rejected before rotation"
            assert probe_allocate(port, "secret-B") != "ok", "secret-B accepted before rotation"

            # The rotation as `kubectl apply` of the Secret reaches the pod.
            pv.write({"turngate.yaml": config, "secret": "secret-B\n",
                      "previous-secret": "secret-A\n"})
            st = wait_generation(sock, gen, 30)
            assert st["pid"] == proc.pid, f"pid changed: {st['pid']} != {proc.pid}"
            assert st["last_reload"]["ok"], f"reload failed: {st['last_reload']}"
            assert st["last_reload"]["trigger"] == "inotify", st["last_reload"]
            for secret, want in (("secret-B", "ok"), ("secret-A", "ok")):
                got = probe_allocate(port, secret)
                assert got == want, f"{secret}: allocate {got!r}, expected {want!r}"
            got = probe_allocate(port, "secret-Z")
            assert got.startswith("401"), f"unrelated secret: allocate {got!r}, expected 401"
        except AssertionError as e:
            log.seek(0)
            print(log.read())
            print(f"FAIL: {e}")
            return 1
        finally:
            if proc.poll() is None:
                proc.send_signal(2)  # SIGINT: stop now, no drain
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
            log.close()
    print("ok: a kubelet-style Secret update reloaded turngated -w in place")
    return 0


if __name__ == "__main__":
    sys.exit(main())
