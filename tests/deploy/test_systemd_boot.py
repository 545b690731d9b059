#!/usr/bin/python3
"""tests/deploy/test_systemd_boot.py: turngate.service run by a booted systemd in a minimal Debian 12 (systemd-nspawn --boot).

What an operator does, in a container with its own network namespace (only its loopback):
`make install DESTDIR=TREE` of this build into a copy of the cached tree
(tests/deploy/deploy_cache.sh boot: debootstrap minbase + systemd + the runtime libraries,
no procps), boot it, let systemd-sysusers create the user, write the secret and
/etc/default file the example config asks for, then check:
- `systemctl start`: READY=1 reached (Type=notify), the master runs as user turngate with
  only CAP_NET_BIND_SERVICE under the unit's hardening, and `turngatectl probe` relays over
  TURN-UDP and TURN-TCP on 3478;
- `systemctl reload` (ExecReload=turngatectl reload) applies a changed config (a new
  listener answers, the generation goes up) while an allocation is held and keeps relaying;
  an invalid config fails `systemctl reload`, the unit stays active on the old config and
  the journal has the errors;
- `journalctl -u turngate` carries the daemon's levels as journal priorities;
- `systemctl stop` with an allocation held drains for admin.drain_timeout (the allocation
  relays meanwhile), then exits cleanly within TimeoutStopSec;
- `systemctl restart` with an allocation held: a new main process takes it over from the
  state file in /run/turngate (RuntimeDirectoryPreserve=yes) and it goes on relaying;
- `turngatectl upgrade` with an allocation held: the new master becomes the unit's MainPID
  (the old one says MAINPID=, NotifyAccess=main), the allocation relays on, reload works;
- a stalled worker (SIGSTOP) is replaced by the master while the unit stays up; a
  SIGSTOPped master misses its watchdog pings (WatchdogSec lowered to 3 s by a drop-in) and
  systemd restarts the unit;
- a crash: `systemctl kill --signal=SIGKILL` (kill -9 of the master and the workers) with a
  TURN-TCP call and an RFC 6062 call relaying, after a live upgrade: the connections were
  in the unit's file descriptor store (FileDescriptorStoreMax=; stored again by the new
  master once the old one is gone), Restart=always starts the daemon with them,
  and both calls relay on and refresh (the same connections: deploy_stream.py never
  reconnects);
- `systemd-analyze security turngate` (run inside, against the loaded unit): exposure at
  most 2.0.
Needs root, systemd-nspawn, debootstrap, nsenter and python3-aioice. A missing one fails
when CI=true and skips (exit 77) with the reason otherwise.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import yaml

from deploy_turn import SECRET, Holder, cached, check, require, step, write_yaml

SRC = os.environ.get("top_srcdir", ".")
BUILD = os.environ.get("top_builddir", ".")
DRAIN_S = 5
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Machine:
    """One booted copy of the cached tree; commands run in all its namespaces."""

    def __init__(self, tree, log):
        self.tree = tree
        self.log = log
        self.nspawn = None
        self.leader = None

    def boot(self):
        self.nspawn = subprocess.Popen(
            ["systemd-nspawn", "-q", "--register=no", "--keep-unit", "--private-network",
             "--machine", "tg-boot-%d" % os.getpid(), "-D", self.tree, "--boot"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while self.leader is None and time.monotonic() < deadline:
            check(self.nspawn.poll() is None, "systemd-nspawn exited during boot")
            kids = subprocess.run(["ps", "-o", "pid=,comm=", "--ppid", str(self.nspawn.pid)],
                                  capture_output=True, text=True).stdout.split()
            if len(kids) == 2 and kids[1] == "systemd":
                self.leader = int(kids[0])
            time.sleep(0.2)
        check(self.leader is not None, "no systemd under systemd-nspawn within 60 s")
        # Until the container's systemd listens on its private socket, systemctl cannot
        # connect and prints nothing; then --wait waits for the boot to finish.
        while time.monotonic() < deadline + 60:
            state = self.sh("systemctl is-system-running --wait", check_rc=False, timeout=120)
            if state.stdout.strip():
                break
            time.sleep(0.5)
        check(state.stdout.strip() in ("running", "degraded"),
              f"boot: {state.stdout}{state.stderr}")
        if state.stdout.strip() == "degraded":
            print(self.sh("systemctl --failed --no-pager").stdout)

    def sh(self, cmd, check_rc=True, timeout=60):
        """Runs cmd with the container's /bin/sh, as its root, in all its namespaces."""
        r = subprocess.run(["nsenter", "-t", str(self.leader), "-m", "-u", "-i", "-n", "-p",
                            "--", "/usr/bin/env", "-i", PATH, "/bin/sh", "-c", cmd],
                           capture_output=True, text=True, timeout=timeout)
        if check_rc and r.returncode != 0:
            raise AssertionError(f"`{cmd}` exited {r.returncode}: {r.stdout}{r.stderr}")
        return r

    def in_net(self, argv):
        """argv for a host program run in the container's network namespace only."""
        return ["nsenter", f"--net=/proc/{self.leader}/ns/net", "--"] + argv

    def show(self, prop):
        return self.sh(f"systemctl show -P {prop} turngate").stdout.strip()

    def poweroff(self):
        if self.nspawn is None or self.nspawn.poll() is not None:
            return
        if self.leader is not None:
            self.sh("systemctl poweroff", check_rc=False)
        try:
            self.nspawn.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.nspawn.kill()
            self.nspawn.wait(timeout=30)


def unit_paths():
    """bindir, the config file and the EnvironmentFile of the generated unit."""
    with open(os.path.join(BUILD, "deploy", "systemd", "turngate.service"), encoding="utf-8") as fh:
        unit = fh.read()
    start = re.search(r"^ExecStart=(\S+)/turngated -c (\S+)$", unit, re.M)
    env = re.search(r"^EnvironmentFile=-(\S+)$", unit, re.M)
    check(start and env, "the unit's ExecStart/EnvironmentFile lines changed shape")
    return start.group(1), start.group(2), env.group(1)


def install(tree):
    """make install DESTDIR=tree, then the operator's config edits (loopback relay peers)."""
    subprocess.run(["make", "-s", "-C", BUILD, "install", f"DESTDIR={tree}"], check=True,
                   stdout=subprocess.DEVNULL)
    bindir, conf, envfile = unit_paths()
    with open(tree + conf, encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)
    cfg["admin"].update(drain_timeout=DRAIN_S, workers=2, worker_ping_timeout=3)
    cfg["clusters"][0]["endpoints"].append("127.0.0.0/8")
    # RFC 6062 peers on the loopback for the crash step (deploy_stream.py).
    cfg["clusters"].append({"name": "loop-tcp", "type": "STATIC", "protocol": "TCP",
                            "endpoints": ["127.0.0.0/8"]})
    for listener in cfg["listeners"]:
        if listener["protocol"] == "TURN-TCP":
            listener["routes"].append("loop-tcp")
    write_yaml(tree + conf, cfg)
    for key in ("secret_file", "previous_secret_file"):
        with open(tree + cfg["auth"][key], "w", encoding="utf-8") as fh:
            fh.write(SECRET + "\n")
    os.makedirs(os.path.dirname(tree + envfile), exist_ok=True)
    with open(tree + envfile, "w", encoding="utf-8") as fh:
        fh.write("STUNNER_ADDR=127.0.0.1\n")
    return bindir, conf, cfg


def probe(m, bindir, port, transport="udp"):
    r = m.sh(f"{bindir}/turngatectl probe 'turn:127.0.0.1:{port}?transport={transport}' "
             f"--secret {SECRET}", check_rc=False)
    check(r.returncode == 0, f"probe {transport}:{port}: {r.stdout}{r.stderr}")
    return r.stdout


def journal(m, prio=None):
    cmd = "journalctl -u turngate -o json --no-pager"
    if prio:
        cmd += f" -p {prio}"
    return [json.loads(l) for l in m.sh(cmd).stdout.splitlines() if l.strip()]


def scenario(m, tree, bindir, conf, cfg):
    t = step("start")
    m.sh("chgrp turngate " + " ".join(cfg["auth"][k] for k in ("secret_file", "previous_secret_file")))
    m.sh("chmod 0640 " + " ".join(cfg["auth"][k] for k in ("secret_file", "previous_secret_file")))
    m.sh("systemctl daemon-reload && systemctl start turngate")
    check(m.show("ActiveState") == "active", "not active after start")
    pid = int(m.show("MainPID"))
    status = m.sh(f"cat /proc/{pid}/status").stdout
    uid = m.sh("id -u turngate").stdout.strip()
    check(re.search(rf"^Uid:\s+{uid}\s+{uid}\s+{uid}\s+{uid}$", status, re.M),
          f"master not running as turngate ({uid}):\n{status}")
    check(re.search(r"^CapEff:\s+0000000000000400$", status, re.M),
          "master's effective capabilities are not CAP_NET_BIND_SERVICE alone")
    check(re.search(r"^NoNewPrivs:\s+1$", status, re.M), "NoNewPrivileges not applied")
    check(re.search(r"^Seccomp:\s+2$", status, re.M), "no seccomp filter (SystemCallFilter)")
    print(f"active in {time.monotonic() - t:.1f} s, main pid {pid}, uid {uid}")
    print(probe(m, bindir, 3478, "udp"))
    probe(m, bindir, 3478, "tcp")
    holder = Holder(m.in_net, 3478)

    step("reload: a new listener while an allocation is held")
    gen = json.loads(m.sh(f"{bindir}/turngatectl --json status").stdout)["generation"]
    cfg["listeners"].append(dict(cfg["listeners"][0], name="turn-udp-2", port=3479))
    write_yaml(tree + conf, cfg)
    m.sh("systemctl reload turngate")
    gen2 = json.loads(m.sh(f"{bindir}/turngatectl --json status").stdout)["generation"]
    check(gen2 == gen + 1, f"generation {gen} -> {gen2} after systemctl reload")
    check(int(m.show("MainPID")) == pid, "the reload replaced the main process")
    probe(m, bindir, 3479)
    holder.round_trip("after-reload")

    step("reload: an invalid config is refused")
    bad = yaml.safe_load(yaml.safe_dump(cfg))
    bad["listeners"][-1]["port"] = 70000
    write_yaml(tree + conf, bad)
    r = m.sh("systemctl reload turngate", check_rc=False)
    check(r.returncode != 0, "systemctl reload succeeded with an invalid config")
    check(m.show("ActiveState") == "active", "unit not active after a refused reload")
    st = json.loads(m.sh(f"{bindir}/turngatectl --json status").stdout)
    check(st["generation"] == gen2, "a refused reload changed the generation")
    holder.round_trip("after-refused-reload")
    probe(m, bindir, 3479)
    write_yaml(tree + conf, cfg)

    step("journal levels")
    entries = journal(m)
    errors = [e for e in entries if "70000 is out of range" in e.get("MESSAGE", "")]
    check(errors, "the refused reload's errors are not in journalctl -u turngate")
    by_level = {}
    for e in entries:
        lv = re.search(r"Z (DEBUG|INFO|WARN|ERROR|CRIT)\b", e.get("MESSAGE", ""))
        if lv and e.get("_PID") != "1":
            by_level.setdefault(lv.group(1), set()).add(e.get("PRIORITY"))
    print(f"journal priorities by level: {by_level}")
    want = {"INFO": "6", "WARN": "4", "ERROR": "3"}
    for level, prio in want.items():
        if level in by_level:
            check(by_level[level] == {prio}, f"{level} lines have PRIORITY {by_level[level]}")
    check("INFO" in by_level and "ERROR" in by_level, "no INFO or no ERROR lines to compare")
    errs = [e["MESSAGE"] for e in journal(m, prio="err") if e.get("SYSLOG_IDENTIFIER") == "turngated"]
    check(errs and all(" ERROR " in x or " CRIT " in x for x in errs),
          f"journalctl -p err shows other levels: {errs[:3]}")

    t = step(f"stop: drains for drain_timeout ({DRAIN_S} s) with an allocation held")
    stop = subprocess.Popen(["nsenter", "-t", str(m.leader), "-m", "-u", "-i", "-n", "-p", "--",
                             "/usr/bin/env", "-i", PATH, "systemctl", "stop", "turngate"])
    deadline = time.monotonic() + 10
    while m.show("ActiveState") != "deactivating" and time.monotonic() < deadline:
        time.sleep(0.1)
    check(m.show("ActiveState") == "deactivating", "not deactivating after systemctl stop")
    holder.round_trip("draining")
    stop.wait(timeout=60)
    took = time.monotonic() - t
    print(f"stopped in {took:.1f} s")
    check(stop.returncode == 0, "systemctl stop failed")
    check(DRAIN_S <= took < DRAIN_S + 5 + 10, f"stop took {took:.1f} s, drain_timeout {DRAIN_S}")
    check(m.show("Result") == "success", f"stop result {m.show('Result')}")
    check(m.show("ExecMainStatus") == "0", f"exit status {m.show('ExecMainStatus')}")
    check(any("draining for up to %d s" % DRAIN_S in e.get("MESSAGE", "") for e in journal(m)),
          "no drain line in the journal")
    holder.close()

    step("restart: a new main process takes the held allocation over (state file)")
    m.sh("systemctl start turngate")
    pid = int(m.show("MainPID"))
    holder = Holder(m.in_net, 3478)
    holder.round_trip("before-restart")
    m.sh("systemctl restart turngate", timeout=90)
    pid2 = int(m.show("MainPID"))
    check(pid2 != pid and m.show("ActiveState") == "active", "restart did not replace the master")
    state = json.loads(m.sh(f"{bindir}/turngatectl --json status").stdout).get("state", {})
    print(f"after restart: state file {state.get('file')}, {state.get('taken_over')} taken over")
    check(state.get("taken_over", 0) >= 1, f"the restart took no allocation over: {state}")
    holder.round_trip("after-restart")

    step("live upgrade: turngatectl upgrade, the new master becomes MainPID and keeps the allocation")
    restarts = m.show("NRestarts")
    up = m.sh(f"{bindir}/turngatectl upgrade --timeout 30", timeout=60)
    pid3 = int(up.stdout.strip())
    check(pid3 not in (pid2, 0), f"upgrade printed {up.stdout!r}")
    deadline = time.monotonic() + 10
    while int(m.show("MainPID")) != pid3 and time.monotonic() < deadline:
        time.sleep(0.2)
    check(int(m.show("MainPID")) == pid3 and m.show("ActiveState") == "active" and
          m.show("NRestarts") == restarts,
          f"after the upgrade: MainPID {m.show('MainPID')} (want {pid3}), "
          f"{m.show('ActiveState')}, NRestarts {m.show('NRestarts')}")
    holder.round_trip("after-upgrade")
    m.sh("systemctl reload turngate")
    print(f"upgraded: MainPID {pid2} -> {pid3}, allocation kept, reload through the new master")
    pid2 = pid3
    holder.close()
    probe(m, bindir, 3478)

    step("a stalled worker is replaced by the master")
    workers = json.loads(m.sh(f"{bindir}/turngatectl --json workers").stdout)["workers"]
    wpid = workers[0]["pid"]
    m.sh(f"/bin/bash -c 'kill -STOP {wpid}'")
    deadline = time.monotonic() + 30
    replaced = False
    while not replaced and time.monotonic() < deadline:
        time.sleep(0.5)
        now = json.loads(m.sh(f"{bindir}/turngatectl --json workers").stdout)["workers"]
        replaced = now[0]["pid"] not in (wpid, 0) and now[0]["state"] == "running"
    check(replaced, "the SIGSTOPped worker was not replaced within 30 s")
    check(int(m.show("MainPID")) == pid2 and m.show("NRestarts") == "0",
          "a worker stall restarted the unit")
    probe(m, bindir, 3478)

    step("watchdog: a SIGSTOPped master is restarted by systemd (WatchdogSec=3 drop-in)")
    m.sh("mkdir -p /run/systemd/system/turngate.service.d && printf '[Service]\\nWatchdogSec=3\\n'"
         " > /run/systemd/system/turngate.service.d/watchdog.conf && systemctl daemon-reload"
         " && systemctl restart turngate")
    pid = int(m.show("MainPID"))
    ping = m.show("WatchdogTimestampMonotonic")
    time.sleep(2.5)
    check(m.show("WatchdogTimestampMonotonic") != ping, "no WATCHDOG=1 within 2.5 s (WatchdogSec=3)")
    restarts = int(m.show("NRestarts"))
    t = time.monotonic()
    m.sh(f"/bin/bash -c 'kill -STOP {pid}'")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if int(m.show("NRestarts")) > restarts and m.show("ActiveState") == "active":
            break
    took = time.monotonic() - t
    check(int(m.show("NRestarts")) == restarts + 1 and int(m.show("MainPID")) != pid,
          f"not restarted within 60 s of SIGSTOP: {m.sh('systemctl status turngate --no-pager', check_rc=False).stdout}")
    check(any("atchdog timeout" in e.get("MESSAGE", "") for e in journal(m)),
          "no watchdog timeout in the journal")
    print(f"restarted by the watchdog {took:.1f} s after SIGSTOP")
    probe(m, bindir, 3478)
    m.sh("rm -r /run/systemd/system/turngate.service.d && systemctl daemon-reload")

    step("crash: kill -9 of every process keeps a TURN-TCP and an RFC 6062 call (fd store)")
    pid = int(m.show("MainPID"))
    streams = subprocess.Popen(
        m.in_net([sys.executable, os.path.join(SRC, "tests", "deploy", "deploy_stream.py"),
                  "127.0.0.1", "3478", SECRET, cfg["auth"]["realm"]]),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = streams.stdout.readline().strip()
        check(line == "ready", f"stream calls: {line!r}")
        deadline = time.monotonic() + 10
        while int(m.show("NFileDescriptorStore")) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        stored = int(m.show("NFileDescriptorStore"))
        check(stored == 4, f"{stored} descriptors in the store, want 4 (two TURN-TCP "
              "connections, a peer connection and its data connection)")
        # A live upgrade first: the old workers' names leave the store, the new master
        # stores the connections again once the old one is gone (NotifyAccess=main).
        up = m.sh(f"{bindir}/turngatectl upgrade --timeout 30", timeout=60)
        pid = int(up.stdout.strip())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
                int(m.show("MainPID")) == pid and int(m.show("NFileDescriptorStore")) == 4 and
                any("stream connections stored" in e.get("MESSAGE", "") for e in journal(m))):
            time.sleep(0.2)
        check(int(m.show("MainPID")) == pid and int(m.show("NFileDescriptorStore")) == 4,
              f"after the upgrade: MainPID {m.show('MainPID')} (want {pid}), "
              f"{m.show('NFileDescriptorStore')} descriptors stored (want 4)")
        # The same four sockets under the new master's names, not the old names left over.
        check(any(f"master[{pid}] master: fd store: the old master is gone: 4 stream "
                  "connections stored" in e.get("MESSAGE", "") for e in journal(m)),
              "the new master did not store the connections again")
        restarts = int(m.show("NRestarts"))
        m.sh("systemctl kill --signal=SIGKILL turngate")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
                int(m.show("NRestarts")) > restarts and m.show("ActiveState") == "active"):
            time.sleep(0.2)
        check(int(m.show("NRestarts")) == restarts + 1 and int(m.show("MainPID")) != pid,
              "not restarted after the kill")
        for cmd, tag in (("rt after-crash", "after-crash"), ("refresh", "refresh")):
            streams.stdin.write(cmd + "\n")
            streams.stdin.flush()
            line = streams.stdout.readline().strip()
            check(line == f"ok {tag}", f"after the crash restart, {cmd}: {line!r}")
        took_back = [e.get("MESSAGE", "") for e in journal(m)
                     if "taken back from systemd" in e.get("MESSAGE", "")]
        check(took_back and "4 stream connections taken back" in took_back[-1],
              f"the master's fd store line: {took_back}")
        print(f"crash restart: MainPID {pid} -> {m.show('MainPID')}, {took_back[-1]}; both "
              "calls relay on and refresh")
    finally:
        if streams.poll() is None:
            streams.stdin.write("close\n")
            streams.stdin.flush()
            streams.wait(timeout=30)

    step("systemd-analyze security")
    out = m.sh("systemd-analyze security --no-pager turngate", check_rc=False).stdout
    score = re.search(r"Overall exposure level for turngate.service: ([0-9.]+) (\S+)", out)
    check(score, f"no score in: {out[-500:]}")
    print(f"systemd-analyze security turngate: {score.group(1)} {score.group(2)}")
    check(float(score.group(1)) <= 2.0, f"exposure {score.group(1)} > 2.0")
    m.sh("systemctl stop turngate", timeout=90)


def main():
    require("systemd-nspawn", ("systemd-nspawn", "debootstrap", "nsenter", "ps"))
    t0 = time.monotonic()
    boot = cached("boot")
    cache = os.environ.get("TG_DEPLOY_CACHE", "/var/cache/turngate-test")
    with tempfile.TemporaryDirectory(dir=cache, prefix="run-boot.") as tmp:
        tree = os.path.join(tmp, "root")
        subprocess.run(["cp", "-a", boot, tree], check=True)
        with open(os.path.join(tree, "etc", "machine-id"), "w", encoding="utf-8") as fh:
            fh.write(os.urandom(16).hex() + "\n")
        bindir, conf, cfg = install(tree)
        log = open(os.path.join(tmp, "console.log"), "w+", encoding="utf-8")
        m = Machine(tree, log)
        try:
            m.boot()
            scenario(m, tree, bindir, conf, cfg)
        except (AssertionError, subprocess.SubprocessError, OSError, ValueError) as e:
            if m.leader is not None:
                print(m.sh("journalctl -u turngate --no-pager | tail -n 60", check_rc=False).stdout)
            print(f"FAIL: {e}")
            return 1
        finally:
            m.poweroff()
            log.close()
    print(f"ok: booted systemd, start/reload/stop/restart/watchdog, in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
