#!/usr/bin/python3
"""bench/test_attacks.py: bench/attacks.py's smoke mode (make check), so the script can't rot.

Runs every attack of issue 36 at a fiftieth of its count against the built turngated with 5
probes each (no coturn, no timing asserted): the script must exit 0 and print one table
row per attack and rate, each cell with its probe count, and the guessing attack must have
got its nonce. The figures themselves are only meaningful in a full run (docs/performance.md).
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ATTACKS = ("TLS partial hellos", "DTLS stalled hellos", "idle TCP connections",
           "at fd limit", "guessing at", "Allocates, 200 ports")


def main():
    builddir = os.environ.get("top_builddir", os.getcwd())
    r = subprocess.run([sys.executable, os.path.join(HERE, "attacks.py"), "--smoke",
                        "--builddir", builddir], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    out = r.stdout.decode(errors="replace")
    print(out)
    fails = []
    if r.returncode != 0:
        fails.append(f"attacks.py --smoke exited {r.returncode}")
    rows = [ln for ln in out.splitlines() if ln.startswith("| ") and "/5 |" in ln]
    for what in ATTACKS:
        if sum(what in ln for ln in rows) != 1:
            fails.append(f"no single table row for {what!r}")
    if "no nonce" in out:
        fails.append("the guessing attack got no nonce")
    for f in fails:
        print("FAIL: " + f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
