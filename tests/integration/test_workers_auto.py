"""The default worker count fits the CPUs the process may use (#37): affinity and the
cgroup's CPU quota, not the host's CPU count, and `status` (admin and turngatectl) says where
the number came from.

- sched_setaffinity to CPU 0 before exec (as `taskset -c 0 turngated`): 1 worker,
  "auto: affinity 1 of N CPUs" (on a host with more than one CPU).
- `admin.workers: 2` and `--workers 1`: "configured" / "configured: --workers".
- As root where the cgroup tree is writable: the daemon started inside a fresh cgroup
  (v2 cpu.max "100000 100000", or v1 cpu.cfs_quota_us 100000 of 100000) gets 1 worker and
  "auto: cgroup cpu.max 1 -> 1" / "auto: cgroup cpu.cfs_quota_us 1 -> 1"; skipped with a
  line where it cannot (the parser is unit-tested on a fake tree: tests/unit/test_cpus.c).
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATED, Daemon, check, config_yaml, free_port,  # noqa: E402
                           run_tests)

NCPU = len(os.sched_getaffinity(0))


class PreexecDaemon(Daemon):
    """A Daemon whose process runs preexec() between fork and exec."""

    def __init__(self, workdir, text, preexec, args=(), workers=1):
        super().__init__(workdir, text, args=args, workers=workers)
        self.preexec = preexec

    def start(self, wait=True):
        self.err = open(self.errpath, "ab")
        self.proc = subprocess.Popen([TURNGATED, "-c", self.conf] + self.args,
                                     stdin=subprocess.DEVNULL, stdout=self.err,
                                     stderr=self.err, preexec_fn=self.preexec)
        if wait:
            self.wait_running(self.workers)
        return self


def auto_config(d, workers=None):
    """A config without admin.workers (workers=None) or with it."""
    text = config_yaml(os.path.join(d, "admin.sock"), [("udp", free_port(), "TURN-UDP")])
    lines = [ln for ln in text.splitlines(True) if not ln.startswith("  workers: ")]
    if workers is not None:
        lines.insert(lines.index("admin:\n") + 1, "  workers: %d\n" % workers)
    return "".join(lines)


def check_status(daemon, n, source):
    st = daemon.admin({"cmd": "status"})["workers"]
    check(st["configured"] == n and st["source"] == source,
          "status workers: %r, expected %d (%s)" % (st, n, source))
    rc, out, err = daemon.ctl("status")
    line = [ln for ln in out.splitlines() if ln.startswith("workers:")]
    check(rc == 0 and line and line[0].endswith("running of %d (%s)" % (n, source)),
          "turngatectl status: %r %s" % (line, err))


def test_affinity(d):
    """One CPU in the affinity mask: one worker, and status says why."""
    if NCPU < 2:
        print("SKIP test_affinity: this host gives us one CPU")
        return
    daemon = PreexecDaemon(d, auto_config(d), lambda: os.sched_setaffinity(0, {min(
        os.sched_getaffinity(0))}), workers=1).start(wait=False)
    try:
        daemon.wait_running(1, timeout=10)
        check_status(daemon, 1, "auto: affinity 1 of %d CPUs" % os.cpu_count())
    finally:
        daemon.stop()


def test_configured(d):
    """admin.workers and --workers are taken as given, whatever the CPUs."""
    daemon = Daemon(d, auto_config(d, workers=2), workers=2).start()
    try:
        check_status(daemon, 2, "configured")
    finally:
        daemon.stop()
    daemon = Daemon(d, auto_config(d), args=["--workers", "1"], workers=1).start()
    try:
        check_status(daemon, 1, "configured: --workers")
    finally:
        daemon.stop()


def own_cgroup():
    """(kind, base dir, our path) of a writable cgroup hierarchy with the cpu controller, or
    None: kind 2 (unified, cpu.max) or 1 (v1 cpu, CFS quota)."""
    if os.geteuid() != 0:
        return None
    with open("/proc/self/cgroup") as f:
        lines = [ln.rstrip("\n").split(":", 2) for ln in f]
    for hid, ctrls, path in lines:
        if hid == "0" and ctrls == "":
            base = "/sys/fs/cgroup"
            try:
                with open(os.path.join(base + path, "cgroup.controllers")) as f:
                    if "cpu" in f.read().split():
                        return 2, base, path
            except OSError:
                pass
    for hid, ctrls, path in lines:
        if "cpu" in ctrls.split(","):
            for mnt in (ctrls, "cpu"):
                base = os.path.join("/sys/fs/cgroup", mnt)
                if os.path.exists(os.path.join(base + path, "cpu.cfs_quota_us")):
                    return 1, base, path
    return None


def make_child(kind, base, path):
    """A fresh child cgroup limited to one CPU; its directory, or None when not writable."""
    child = os.path.join(base + path, "tg-test-%d" % os.getpid())
    try:
        os.mkdir(child)
        if kind == 2:
            with open(os.path.join(child, "cpu.max"), "w") as f:
                f.write("100000 100000\n")
        else:
            with open(os.path.join(child, "cpu.cfs_period_us"), "w") as f:
                f.write("100000\n")
            with open(os.path.join(child, "cpu.cfs_quota_us"), "w") as f:
                f.write("100000\n")
        return child
    except OSError as e:
        print("cgroup %s not usable: %s" % (child, e))
        if os.path.isdir(child):
            os.rmdir(child)
        return None


def test_cgroup_quota(d):
    """Started inside a cgroup limited to one CPU: one worker, the quota named."""
    found = own_cgroup() if NCPU >= 2 else None
    child = make_child(*found) if found else None
    if child is None:
        print("SKIP test_cgroup_quota: no writable cgroup with the cpu controller here "
              "(or one CPU); tests/unit/test_cpus.c covers the parser")
        return

    def enter():
        with open(os.path.join(child, "cgroup.procs"), "w") as f:
            f.write("%d\n" % os.getpid())

    try:
        daemon = PreexecDaemon(d, auto_config(d), enter, workers=1).start(wait=False)
        try:
            daemon.wait_running(1, timeout=10)
            check_status(daemon, 1, "auto: cgroup %s 1 -> 1"
                         % ("cpu.max" if found[0] == 2 else "cpu.cfs_quota_us"))
        finally:
            daemon.stop()
    finally:
        for _ in range(100):    # the workers may take a moment to be gone
            try:
                os.rmdir(child)
                break
            except OSError:
                time.sleep(0.05)


if __name__ == "__main__":
    run_tests([test_affinity, test_configured, test_cgroup_quota])
