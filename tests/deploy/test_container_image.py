#!/usr/bin/python3
"""tests/deploy/test_container_image.py: builds deploy/container/Dockerfile with podman and runs the image.

There is no registry here, so both stages start from a local Debian 12 image
(tests/deploy/deploy_cache.sh image: a debootstrap minbase tree imported with
`podman import`, passed as BUILD_IMAGE and RUNTIME_IMAGE). The build uses the host's network
for apt; the container runs with --network=host inside a network namespace this test
creates, so its loopback is its own. Checks:
- the image runs as uid 10001 (USER), with no capabilities (--cap-drop=ALL), on a read-only
  root (podman's /run tmpfs copies up the image's /run/turngate, owned by 10001); its HEALTHCHECK (GET /live over bash's /dev/tcp) passes under `podman healthcheck
  run` and fails once the daemon is stopped;
- the config comes from a mounted /etc/turngate (file and secrets) with the relay address
  from STUNNER_ADDR, and the image's own turngatectl relays an allocation through it;
- `podman kill --signal HUP` reloads (generation + 1, trigger SIGHUP); a changed file is
  picked up by the image's `-w` (a new listener answers) while a held allocation relays;
- `podman stop` (SIGTERM) drains: /ready turns 503, the held allocation still relays, and
  the container exits 0 once that allocation ends, before drain_timeout.
- as STUNner's operator renders its dataplane pod (deploy/stunner/dataplane.yaml): the
  image's `stunnerd -w --udp-thread-num=2` with the STUNNER_* environment and the
  Dataplane's env gets its config from a CDS server (tests/integration/cds_server.py, run in
  the test's namespace), serves it (a TURN allocation relays, /ready 200), runs 2 workers,
  keeps its state file on /dev/shm, and exits 0 on `podman stop`.
Prints the image size. Needs root, podman, runc, ip and python3-aioice; CONTAINERS_CONF
defaults to one that sets default_ulimits = [] (this machine may not raise RLIMIT_NOFILE).
A missing tool fails when CI=true and skips (exit 77) with the reason otherwise.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

from deploy_turn import SECRET, Holder, cached, check, require, step, write_yaml

SRC = os.environ.get("top_srcdir", ".")
CACHE = os.environ.get("TG_DEPLOY_CACHE", "/var/cache/turngate-test")
DRAIN_S = 30
NAME = "tg-image-%d" % os.getpid()
NETNS = "tg-image-%d" % os.getpid()
NAME2 = "tg-image-stunnerd-%d" % os.getpid()


def podman(*args, check_rc=True, timeout=120):
    """podman in the test's network namespace: with --network=host, runc exec (podman exec,
    healthcheck run) joins no network namespace, so it has to be started in the right one."""
    r = subprocess.run(ns(["podman", "--runtime", "runc"] + list(args)), capture_output=True,
                       text=True, timeout=timeout)
    if check_rc and r.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {r.returncode}: {r.stdout}{r.stderr}")
    return r


def build(base):
    """podman build of the Dockerfile from the source tree; returns the image name.

    The build stage is tagged too, so that `podman image prune` after the build removes only
    the images a rebuild replaced (each source change leaves a build stage of ~700 MB) and
    keeps the apt layers the next build reuses."""
    image = "localhost/turngate-test:check"
    t = time.monotonic()
    for target, tag in (("build", "localhost/turngate-test:build"), (None, image)):
        argv = ["podman", "--runtime", "runc", "build", "--format", "docker", "--network", "host",
                "--pull=never", "--ignorefile",
                os.path.join(SRC, "deploy/container/Dockerfile.dockerignore"),
                "--build-arg", f"BUILD_IMAGE={base}", "--build-arg", f"RUNTIME_IMAGE={base}",
                "-f", os.path.join(SRC, "deploy/container/Dockerfile"), "-t", tag, SRC]
        if target:
            argv[4:4] = ["--target", target]
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=1800)
        if r.returncode != 0:
            print(r.stdout[-4000:])
            raise AssertionError("podman build failed")
    subprocess.run(["podman", "image", "prune", "-f"], stdout=subprocess.DEVNULL, check=True)
    size = int(subprocess.run(["podman", "image", "inspect", "--format", "{{.Size}}", image],
                              capture_output=True, text=True, check=True).stdout)
    print(f"built {image} in {time.monotonic() - t:.0f} s, size {size / 1e6:.1f} MB")
    return image


def ns(argv):
    """argv run in the test's network namespace; nsenter, not `ip netns exec`, which mounts
    a new /sys without the cgroup hierarchies that runc needs."""
    return ["nsenter", f"--net=/run/netns/{NETNS}", "--"] + argv


def http_status(url):
    """GET url from inside the test's network namespace; the status code or None."""
    r = subprocess.run(ns([sys.executable, "-c", (
        "import sys, urllib.request, urllib.error\n"
        "try:\n print(urllib.request.urlopen(sys.argv[1], timeout=5).status)\n"
        "except urllib.error.HTTPError as e:\n print(e.code)\n"
        "except OSError:\n print('none')\n"), url]), capture_output=True, text=True)
    return r.stdout.strip()


def status(name=NAME):
    """turngatectl status of the image's own client, as JSON."""
    return json.loads(podman("exec", name, "/usr/local/bin/turngatectl", "--json", "status").stdout)


def probe(port, name=NAME):
    r = podman("exec", name, "/usr/local/bin/turngatectl", "probe",
               f"turn:127.0.0.1:{port}?transport=udp", "--secret", SECRET, check_rc=False)
    check(r.returncode == 0, f"probe {port}: {r.stdout}{r.stderr}")
    return r.stdout


def write_conf(conf):
    """The shipped example config, as the image installs it, for a loopback peer."""
    with open(os.path.join(SRC, "deploy", "turngate.yaml.in"), encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh.read().replace("@sysconfdir@", "/etc"))
    cfg["admin"].update(drain_timeout=DRAIN_S, workers=1)
    cfg["clusters"][0]["endpoints"].append("127.0.0.0/8")
    write_yaml(os.path.join(conf, "turngate.yaml"), cfg)
    for key in ("secret_file", "previous_secret_file"):
        path = os.path.join(conf, os.path.basename(cfg["auth"][key]))
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(SECRET + "\n")
        os.chown(path, 0, 10001)
        os.chmod(path, 0o640)
    os.chmod(os.path.join(conf, "turngate.yaml"), 0o644)
    return cfg


def wait_for(what, fn, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return
        time.sleep(0.3)
    raise AssertionError(f"{what} not within {timeout} s")


def scenario(image, conf, cfg):
    step("run: non-root, no capabilities, read-only root, config mounted, STUNNER_ADDR")
    podman("run", "-d", "--name", NAME, "--network=host", "--read-only", "--cap-drop=ALL",
           "-v", f"{conf}:/etc/turngate:ro", "-e", "STUNNER_ADDR=127.0.0.1", image, timeout=60)
    wait_for("healthy", lambda: podman("healthcheck", "run", NAME, check_rc=False).returncode == 0,
             30)
    proc1 = podman("exec", NAME, "cat", "/proc/1/status").stdout
    check("\nUid:\t10001\t10001\t10001\t10001\n" in proc1, f"not uid 10001:\n{proc1}")
    check("\nCapEff:\t0000000000000000\n" in proc1, "capabilities left with --cap-drop=ALL")
    check(http_status("http://127.0.0.1:8086/live") == "200", "/live not 200")
    out = probe(3478)
    check("allocate           ok" in out and "127.0.0.1:" in out, out)
    print(out)
    holder = Holder(ns, 3478)

    step("podman kill --signal HUP reloads")
    gen = status()["generation"]
    podman("kill", "--signal", "HUP", NAME)
    wait_for("generation + 1", lambda: status()["generation"] == gen + 1, 10)
    check(status()["last_reload"]["trigger"] == "SIGHUP", f"trigger {status()['last_reload']}")
    holder.round_trip("after-hup")

    step("a changed mounted file is reloaded by -w")
    cfg["listeners"].append(dict(cfg["listeners"][0], name="turn-udp-2", port=3479))
    write_yaml(os.path.join(conf, "turngate.yaml"), cfg)
    os.chmod(os.path.join(conf, "turngate.yaml"), 0o644)
    wait_for("listener turn-udp-2", lambda: any(
        l.get("name") == "turn-udp-2" for l in status().get("listeners", [])), 20)
    probe(3479)
    holder.round_trip("after-file-change")

    t = step(f"podman stop: SIGTERM drains (drain_timeout {DRAIN_S} s), exit once the allocation ends")
    stop = subprocess.Popen(ns(["podman", "--runtime", "runc", "stop", "-t", str(DRAIN_S + 15), NAME]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for("/ready 503", lambda: http_status("http://127.0.0.1:8086/ready") == "503", 10)
    check(http_status("http://127.0.0.1:8086/live") == "200", "/live not 200 while draining")
    holder.round_trip("draining")
    holder.close()
    stop.wait(timeout=DRAIN_S + 30)
    took = time.monotonic() - t
    code = podman("inspect", "--format", "{{.State.ExitCode}}", NAME).stdout.strip()
    print(f"stopped {took:.1f} s after SIGTERM, exit code {code}")
    check(code == "0", f"exit code {code}")
    check(took < DRAIN_S, f"stop took {took:.1f} s: waited for drain_timeout with no allocation")
    check(podman("healthcheck", "run", NAME, check_rc=False).returncode != 0,
          "healthcheck passes on a stopped container")


def operator_scenario(image, conf):
    """The pod STUNner's operator renders from deploy/stunner/dataplane.yaml (its command, its
    env after the operator's STUNNER_* variables), with 2 workers, against a CDS server."""
    step("operator's pod: stunnerd -w --udp-thread-num=2, STUNNER_* env, config from a CDS server")
    with open(os.path.join(SRC, "deploy", "stunner", "dataplane.yaml"), encoding="utf-8") as fh:
        spec = yaml.safe_load(fh)["spec"]
    cds_port = 23479
    stunner = {"version": "v1",
               "admin": {"name": "testns/gw", "loglevel": "all:INFO",
                         "healthcheck_endpoint": "http://0.0.0.0:8086"},
               "auth": {"type": "ephemeral", "realm": "stunner.l7mp.io",
                        "credentials": {"secret": SECRET}},
               "listeners": [{"name": "testns/gw/udp", "protocol": "TURN-UDP",
                              "address": "$STUNNER_ADDR", "port": 3478,
                              "routes": ["testns/media"]}],
               "clusters": [{"name": "testns/media", "type": "STATIC",
                             "endpoints": ["127.0.0.0/8"]}]}
    path = os.path.join(conf, "cds.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(stunner, fh)
    env = {"STUNNER_ADDR": "127.0.0.1", "STUNNER_NAME": "gw", "STUNNER_NAMESPACE": "testns",
           "STUNNER_NODENAME": "node-1", "STUNNER_CONFIG_ORIGIN": f"http://127.0.0.1:{cds_port}"}
    env.update((e["name"], e["value"]) for e in spec["env"])
    cds = subprocess.Popen(ns([sys.executable, os.path.join(SRC, "tests", "integration",
                                                          "cds_server.py"),
                               "--port", str(cds_port), f"testns/gw={path}"]),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = cds.stdout.readline()
        check(line.startswith("CDS server on"), f"CDS server did not start: {line!r}")
        argv = ["run", "-d", "--name", NAME2, "--network=host", "--read-only", "--cap-drop=ALL",
                "--user", "10001:10001", "--entrypoint", spec["command"][0]]
        for k, v in env.items():
            argv += ["-e", f"{k}={v}"]
        podman(*argv, image, *spec["command"][1:], "-w", "--udp-thread-num=2", timeout=60)
        wait_for("/ready 200", lambda: http_status("http://127.0.0.1:8086/ready") == "200", 30)
        cmdline = podman("exec", NAME2, "cat", "/proc/1/cmdline").stdout
        check(cmdline.split("\0")[:3] == ["stunnerd", "-w", "--udp-thread-num=2"],
              f"pid 1 is not the operator's command line: {cmdline!r}")
        st = status(NAME2)
        print(f"status: config {st['config_source']}, workers {st['workers']}, "
              f"last reload {st['last_reload']}")
        check(st["workers"]["configured"] == 2 and st["workers"]["running"] == 2,
              f"workers {st['workers']}")
        check(st["config_source"] == env["STUNNER_CONFIG_ORIGIN"], st["config_source"])
        check(any(l.get("name") == "testns/gw/udp" for l in st.get("listeners", [])),
              f"listeners {st.get('listeners')}")
        out = probe(3478, NAME2)
        check("allocate           ok" in out, out)
        state = podman("exec", NAME2, "ls", env["TURNGATE_STATE_DIR"]).stdout.split()
        check(any(f.endswith(".state") for f in state), f"no state file in /dev/shm: {state}")
        podman("stop", "-t", "40", NAME2, timeout=60)
        code = podman("inspect", "--format", "{{.State.ExitCode}}", NAME2).stdout.strip()
        check(code == "0", f"exit code {code}")
    finally:
        cds.kill()
        cds.wait()


def main():
    require("podman, network namespaces", ("podman", "runc", "ip", "nsenter", "debootstrap"))
    if "CONTAINERS_CONF" not in os.environ:
        os.makedirs(CACHE, exist_ok=True)
        path = os.path.join(CACHE, "containers.conf")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("[containers]\ndefault_ulimits = []\n")
        os.environ["CONTAINERS_CONF"] = path
    t0 = time.monotonic()
    base = cached("image")
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        subprocess.run(ns(["ip", "link", "set", "lo", "up"]), check=True)
        image = build(base)
        with tempfile.TemporaryDirectory(prefix="tg-image.") as conf:
            os.chmod(conf, 0o755)
            cfg = write_conf(conf)
            try:
                scenario(image, conf, cfg)
                operator_scenario(image, conf)
            except (AssertionError, subprocess.SubprocessError, OSError, ValueError,
                    KeyError) as e:
                for name in (NAME, NAME2):
                    print(podman("logs", name, check_rc=False).stdout[-3000:])
                    print(podman("logs", name, check_rc=False).stderr[-3000:])
                print(f"FAIL: {e}")
                return 1
            finally:
                podman("rm", "-f", "-t", "0", NAME, check_rc=False)
                podman("rm", "-f", "-t", "0", NAME2, check_rc=False)
    finally:
        subprocess.run(["ip", "netns", "delete", NETNS])
    print(f"ok: image built and run, relay, HUP, -w, drain, as stunnerd from a CDS, in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
