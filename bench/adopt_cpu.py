#!/usr/bin/env python3
"""adopt_cpu.py: the new workers' CPU per adopted record and the gap of each live upgrade
in a turngate log (issue 42; bench/results/2026-12-06-adoptcut.md).

    python3 bench/adopt_cpu.py RUNDIR/turngate.log    # bench/scale.py --keep keeps RUNDIR

Each adopting worker logs, at its next loop iteration after the adoption,
"slot N: A adopted in U us of CPU since the fork, V us once its relay sockets are
watched (minor page faults: F, G)" (worker/adopt.c): U and F at its "predecessor's
allocations" line, V and G once libev has registered each adopted relay socket with epoll
(one epoll_ctl each, after that line), from where it polls them. Per upgrade (from the old master's "stopping the workers"):
the sum of U and of V over the new workers divided by the records they adopted, and the
gap to the last adoption line (bench/scale.py's gap_s) and to the last "watched" line
(when the last worker polls its relay sockets again)."""
import datetime
import re
import sys

LINE = re.compile(r"(\d+) adopted in (\d+) us of CPU since the fork, (\d+) us once"
                  r"(?:.*minor page faults: (\d+), (\d+))?")


def when(line):
    t = datetime.datetime.strptime(line.split()[0].rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f")
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


def upgrades(path):
    out, cur = [], None
    with open(path, errors="replace") as f:
        for line in f:
            if "stopping the workers" in line:
                cur = {"stop": when(line), "adopted": [], "watched": [], "n": 0, "u": 0, "v": 0,
                       "f": 0}
                out.append(cur)
            elif cur is None:
                continue
            elif "predecessor's allocations:" in line:
                cur["adopted"].append(when(line))
            elif LINE.search(line):
                m = LINE.search(line)
                cur["watched"].append(when(line))
                cur["n"] += int(m.group(1))
                cur["u"] += int(m.group(2))
                cur["v"] += int(m.group(3))
                cur["f"] += int(m.group(4) or 0)
    return [u for u in out if u["n"]]


def main():
    for i, u in enumerate(upgrades(sys.argv[1])):
        print("upgrade %d: %d adopted by %d workers; CPU per record %.2f us at the adoption "
              "line, %.2f us once watched; page faults per record %.2f at the adoption line; "
              "gap %.3f s to the last adoption line, %.3f s to the last watched line"
              % (i + 1, u["n"], len(u["watched"]), u["u"] / u["n"], u["v"] / u["n"],
                 u["f"] / u["n"], max(u["adopted"]) - u["stop"], max(u["watched"]) - u["stop"]))


if __name__ == "__main__":
    main()
