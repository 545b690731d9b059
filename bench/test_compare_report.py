#!/usr/bin/python3
"""bench/test_compare_report.py: compare.py's logic without load or timing (make check).

- turngate-offload's config differs from turngate's by admin.offload_engine: TC alone, on
  loopback and in the network-namespace layout; there the listener binds the server's
  client-facing address (bind_address) and advertises and binds the peer-facing one as its
  relay address, and the cluster admits the peer;
- coturn runs the binary of --coturn, allows loopback peers only on loopback;
- issue 21's targets come out PASS, FAIL or SKIP from the medians as the issue states them,
  with notes on whether the kernel relayed at all and whether 2x was measurable;
- the table has one ratio column per relay server against coturn.
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
import compare_report  # noqa: E402
import topology  # noqa: E402

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print(f"FAIL: {what}")


def netns_layout():
    # The addresses of topology.netns() without creating anything (no root needed).
    return topology.Topology("netns", ("10.78.1.1", 13478), "10.78.2.1", "10.78.2.2:13500",
                             "10.78.1.2", ["10.78.2.2"], bind="10.78.1.1",
                             ns={"client": "c", "server": "s", "peer": "p"})


def configs(topo):
    args = argparse.Namespace(auth="static", workers=1, builddir="/b", topo=topo,
                              coturn="/opt/coturn-4.17.1/bin/turnserver")
    texts = {}
    for server in ("turngate", "turngate-offload"):
        with tempfile.TemporaryDirectory() as d:
            cmd = compare.SERVERS[server](args, d)
            with open(cmd[-1]) as f:
                texts[server] = f.read().replace(d, "RUNDIR")
    with tempfile.TemporaryDirectory() as d:
        coturn = compare.SERVERS["coturn"](args, d)
    return texts, coturn


def test_configs():
    for topo in (compare.LOOPBACK, netns_layout()):
        texts, coturn = configs(topo)
        a, b = texts["turngate"].splitlines(), texts["turngate-offload"].splitlines()
        extra = [l for l in b if l not in a]
        check(extra == ["  offload_engine: TC"] and len(b) == len(a) + 1,
              f"{topo.name}: turngate-offload adds exactly offload_engine: TC ({extra})")
        check(f"    address: {topo.relay_ip}" in a, f"{topo.name}: relay address")
        check(f"    endpoints: [{', '.join(topo.cluster)}]" in a, f"{topo.name}: cluster")
        check(coturn[0] == "/opt/coturn-4.17.1/bin/turnserver", f"{topo.name}: --coturn")
        check(f"--listening-ip={topo.server[0]}" in coturn and
              f"--relay-ip={topo.relay_ip}" in coturn, f"{topo.name}: coturn addresses")
        check(("--allow-loopback-peers" in coturn) == (topo.name == "loopback"),
              f"{topo.name}: loopback peers allowed only on loopback")
    texts, _ = configs(netns_layout())
    check("    address: 10.78.2.1\n    bind_address: 10.78.1.1\n" in texts["turngate"],
          "netns: listener binds 10.78.1.1, relays from 10.78.2.1")
    texts, _ = configs(compare.LOOPBACK)
    check("bind_address" not in texts["turngate"], "loopback: no bind_address (as before)")
    # quota_scale.py calls coturn_cmd with auth and workers only: Debian's binary.
    with tempfile.TemporaryDirectory() as d:
        cmd = compare.coturn_cmd(argparse.Namespace(auth="static", workers=2), d)
    check(cmd[0] == compare.COTURN and "--relay-ip=127.0.0.1" in cmd, "quota_scale's coturn")


def runs(**medians):
    """results as compare.py collects them: one run per (server, test) with these values."""
    out = {}
    for name, vals in medians.items():
        server, test = name.rsplit("_", 1)
        out[(server.replace("_", "-"), test)] = [dict(vals, duration=1.0)]
    return out


def test_targets():
    flat = {"relayed_pps": 100.0, "machine_s_per_mpkt": 10.0}
    res = runs(turngate_flat172=flat,
               turngate_offload_flat172={"relayed_pps": 250.0, "machine_s_per_mpkt": 3.9},
               coturn_flat172={"relayed_pps": 80.0, "machine_s_per_mpkt": 10.0},
               direct_flat172={"relayed_pps": 320.0, "machine_s_per_mpkt": 2.0})
    lines = compare_report.targets(res, ["flat172", "flat1200"])
    check(len(lines) == 6, f"three targets for each flat test: {lines}")
    check(all(l.startswith("SKIP") and "no turngate-offload result (--servers)" in l
              for l in lines[3:]), f"flat1200 not run: {lines[3:]}")
    check(lines[0].startswith("PASS") and "= 2.50 (target ≥ 2)" in lines[0], lines[0])
    check(lines[1].startswith("PASS") and "= 0.39 (target ≤ 0.4)" in lines[1], lines[1])
    check(lines[2].startswith("FAIL") and "= 0.78 (target ≥ 0.8)" in lines[2], lines[2])
    # Offload relaying in user space (today): equal rates fail; no direct run is a SKIP.
    res = runs(turngate_flat1200=flat, turngate_offload_flat1200=flat,
               coturn_flat1200={"relayed_pps": 80.0, "machine_s_per_mpkt": 12.0})
    lines = compare_report.targets(res, ["flat1200"])
    check([l.split()[0] for l in lines] == ["FAIL", "FAIL", "SKIP"], f"{lines}")
    check("--ceiling" in lines[2], "SKIP says how to get the direct run")
    check(compare_report.targets({}, ["rate"])[0].startswith("none"), "no flat test")
    # The notes: did the kernel relay (worker CPU per packet), can the harness show 2x?
    user = {"relayed_pps": 100.0, "cpu_s_per_mpkt": 4.0, "machine_s_per_mpkt": 8.0}
    res = runs(turngate_flat172=user, direct_flat172={"relayed_pps": 120.0},
               turngate_offload_flat172=dict(user, cpu_s_per_mpkt=3.9),
               coturn_flat172={"relayed_pps": 60.0, "machine_s_per_mpkt": 16.0})
    notes = [l for l in compare_report.targets(res, ["flat172"]) if l.startswith("NOTE")]
    check(len(notes) == 2 and "= 0.97: the worker still handled" in notes[0] and
          "direct / turngate = 1.20" in notes[1] and "cannot be met" in notes[1], f"{notes}")
    res[("turngate-offload", "flat172")][0]["cpu_s_per_mpkt"] = 0.2
    res[("direct", "flat172")][0]["relayed_pps"] = 300.0
    notes = [l for l in compare_report.targets(res, ["flat172"]) if l.startswith("NOTE")]
    check(len(notes) == 1 and "the kernel relayed them" in notes[0], f"{notes}")
    res[("direct", "flat172")][0]["relayed_pps"] = 90.0
    notes = [l for l in compare_report.targets(res, ["flat172"]) if l.startswith("NOTE")]
    check(len(notes) == 2 and "direct is no ceiling here" in notes[1], f"{notes}")


def test_table():
    res = runs(turngate_flat172={"relayed_pps": 100.0}, coturn_flat172={"relayed_pps": 50.0},
               turngate_offload_flat172={"relayed_pps": 150.0},
               direct_flat172={"relayed_pps": 400.0})
    t = compare_report.table(res, ["turngate", "turngate-offload", "coturn", "direct"], 1)
    head = t.splitlines()[0]
    check(head.endswith("| turngate/coturn | turngate-offload/coturn |"), head)
    row = [l for l in t.splitlines() if l.startswith("| flat 172 B: relayed pkt/s")][0]
    check(row.endswith("| 2.00 | 3.00 |"), row)
    t = compare_report.table(res, ["turngate", "base"], 1)
    check("turngate/base" in t.splitlines()[0], "A/B ratio column")


def main():
    test_configs()
    test_targets()
    test_table()
    print("FAIL" if FAILS else "PASS", "test_compare_report")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
