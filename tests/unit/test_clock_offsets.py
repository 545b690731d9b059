#!/usr/bin/python3
"""Unit tests that pass whatever the machine's uptime: the programs whose code reads the real
CLOCK_MONOTONIC (mono_ns()) beside times the test fixes, run again in a time namespace with
the clock at 5 s, a minute and three years.

A test that builds records at a fixed "now" (5,000 s) while the code judges them by the real
clock passes only on machines up for longer (test_state's test_upgrade_ready did until
3833eec), and CI machines are freshly booted. Needs root and a kernel with time namespaces
(unshare -T, Linux 5.6); SKIPs with the reason otherwise. Run by `make check`
($top_builddir names the build)."""
import os
import subprocess
import sys
import time

# Program, and the cmocka test filter ($TG_TEST_FILTER) where only some of its tests read
# the real clock (test_state takes seconds in all).
PROGRAMS = [
    ("tests/unit/test_state", "test_upgrade_ready"),
    ("tests/unit/test_adopt_expiry", None),
    ("tests/unit/test_alloc_perm", None),
    ("tests/unit/test_handover", None),
    ("tests/unit/test_relayho", None),
    ("tests/unit/test_shm", None),
    ("tests/unit/test_turn", None),
    ("fuzz/replay_dispatch", None),
]
# CLOCK_MONOTONIC in seconds: younger than the times tests put in the past of the real
# clock (mono_ns() - 20 s: a fresh boot), below every fixed time of the unit tests (1,000 s,
# 5,000 s), and far above them and their lifetimes.
CLOCKS = [5, 60, 3 * 365 * 86400]


def own_offsets():
    """This process's time namespace offsets in seconds: a new namespace's offsets are
    relative to the host's clocks, not to ours (make check may itself run in one)."""
    off = {"monotonic": 0, "boottime": 0}
    try:
        with open("/proc/self/timens_offsets") as f:
            for line in f:
                name, sec, _ = line.split()
                off[name] = int(sec)
    except OSError:
        pass
    return off


def unshare_args(target):
    """unshare(1) arguments that start a program with both clocks at about target s."""
    off = own_offsets()
    mono = time.clock_gettime(time.CLOCK_MONOTONIC) - off["monotonic"]
    boot = time.clock_gettime(time.CLOCK_BOOTTIME) - off["boottime"]
    return ["unshare", "-T", "--monotonic=%d" % int(target - mono),
            "--boottime=%d" % int(target - boot), "--fork"]


def skip_reason():
    if os.geteuid() != 0:
        return "needs root (unshare -T)"
    try:
        p = subprocess.run(unshare_args(CLOCKS[0]) + ["true"], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "unshare -T: %s" % e
    if p.returncode != 0:
        return "unshare -T: %s" % (p.stderr.strip() or "exit %d" % p.returncode)
    return None


def main():
    why = skip_reason()
    if why is not None:
        print("SKIP: %s" % why)
        return 77
    top = os.environ.get("top_builddir", ".")
    failed = 0
    for clock in CLOCKS:
        for prog, only in PROGRAMS:
            env = dict(os.environ)
            if only is not None:
                env["TG_TEST_FILTER"] = only
            p = subprocess.run(unshare_args(clock) + [os.path.join(top, prog)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=300)
            ok = p.returncode == 0
            print("%s %s with CLOCK_MONOTONIC at about %d s" % ("ok  " if ok else "FAIL",
                                                              prog, clock))
            if not ok:
                failed += 1
                print(p.stdout[-4000:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
