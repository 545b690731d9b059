#!/usr/bin/python3
"""bench/test_compare_report.py: compare.py's logic without load or timing (make check).

- turngate-offload's config differs from turngate's by admin.offload_engine: TC alone, on
  loopback and in the network-namespace layout; there the listener binds the server's
  client-facing address (bind_address) and advertises and binds the peer-facing one as its
  relay address, and the cluster admits the peer;
- coturn runs the binary of --coturn, allows loopback peers only on loopback;
- issue 21's targets come out PASS, FAIL or SKIP from the medians as the issue states them,
  with notes on whether the kernel relayed at all and whether 2x was measurable;
- the table has one ratio column per relay server against coturn;
- issue 22's symmetric tests: turngated's config (turngate and base alike) gains the mask
  and its own relay address and mask in the cluster in those tests only, coturn allows
  loopback peers where its relay address is one, turnbench gets the sym mode on the same
  load; the targets (server and machine CPU per delivered packet against base and against
  turngate's flat test), their notes from the short-circuit counter of turngatectl's
  stats;
- issue 39's TCP tests: a TURN-TCP listener in those tests only (turngated and stunnerd),
  turnbench's tcp mode, the round-trip target against stunnerd.
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
                             ns={"client": "c", "server": "s", "peer": "p"}, mask="10.78.1.9")


def configs(topo, test=None, **opts):
    args = argparse.Namespace(auth="static", workers=1, builddir="/b", topo=topo,
                              coturn="/opt/coturn-4.17.1/bin/turnserver", base="/base",
                              **opts)
    texts = {}
    for server in ("turngate", "turngate-offload", "base"):
        with tempfile.TemporaryDirectory() as d:
            cmd = compare.SERVERS[server](args, d, test=test)
            with open(cmd[-1]) as f:
                texts[server] = f.read().replace(d, "RUNDIR")
    with tempfile.TemporaryDirectory() as d:
        coturn = [a.replace(d, "RUNDIR") for a in compare.SERVERS["coturn"](args, d, test=test)]
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


def test_sym_configs():
    """The symmetric tests' settings, in those tests only; base runs the same YAML."""
    for topo in (compare.LOOPBACK, netns_layout()):
        flat, coturn_flat = configs(topo, "flat172")
        sym, coturn_sym = configs(topo, "sym172")
        check(flat["turngate"] == configs(topo)[0]["turngate"] and
              "relay_address_mask" not in flat["turngate"],
              f"{topo.name}: flat tests keep the plain config")
        ends = ", ".join(dict.fromkeys(topo.cluster + [topo.relay_ip, topo.mask]))
        check(f"    routes: [echo]\n    relay_address_mask: {topo.mask}\n" in sym["turngate"]
              and f"    endpoints: [{ends}]" in sym["turngate"],
              f"{topo.name}: sym: mask and cluster [{ends}]:\n{sym['turngate']}")
        check(sym["base"] == sym["turngate"], f"{topo.name}: base runs turngate's YAML")
        extra = [l for l in sym["turngate-offload"].splitlines()
                 if l not in sym["turngate"].splitlines()]
        check(extra == ["  offload_engine: TC"], f"{topo.name}: sym offload: {extra}")
        check(("--allow-loopback-peers" in coturn_sym) == (topo.name == "loopback"),
              f"{topo.name}: coturn's own relay address is a loopback peer only on loopback")
        check(coturn_sym == coturn_flat, f"{topo.name}: coturn runs the same command line")
    sym, _ = configs(compare.LOOPBACK, "sym1200", mask="none")
    check("relay_address_mask" not in sym["turngate"] and
          "    endpoints: [127.0.0.1]" in sym["turngate"], "--mask none: unmasked")
    sym, _ = configs(netns_layout(), "sym1200", mask="10.78.1.7")
    check("relay_address_mask: 10.78.1.7" in sym["turngate"] and
          "[10.78.2.2, 10.78.2.1, 10.78.1.7]" in sym["turngate"], "--mask ADDR")
    args = argparse.Namespace(auth="static", topo=compare.LOOPBACK,
                              p=dict(warm=0.3, dur=1))
    targs = compare.tb_args(args, "sym172")
    check(targs[targs.index("-m"):] == ["-m", "sym", "-n", "100", "-W", "256", "-l", "172",
                                        "-w", "0.3", "-d", "1"], f"sym turnbench: {targs}")
    check(compare.tb_args(args, "flat1200")[targs.index("-m"):][:8] ==
          ["-m", "relay", "-n", "100", "-W", "256", "-l", "1200"], "flat turnbench")


def test_short_circuit_share():
    """The share comes from the counters of turngatectl --json stats."""
    stats = {"counters": {"peer_pkts_out": 400, "short_circuit": 396, "client_pkts_in": 9}}
    check(compare.short_circuit_share(stats) ==
          {"short_circuit": 396, "peer_pkts_out": 400, "short_circuit_frac": 0.99},
          f"share {compare.short_circuit_share(stats)}")
    check(compare.short_circuit_share({"counters": {"peer_pkts_out": 7}})[
        "short_circuit_frac"] == 0, "a build without the counter short-circuits nothing")
    check(compare.short_circuit_share(None) == {} and
          compare.short_circuit_share({"counters": {"peer_pkts_out": 0}}) == {},
          "no stats, or nothing relayed: no share")


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


def test_sym_targets():
    cpu = {"cpu_s_per_mpkt": 2.0, "machine_s_per_mpkt": 6.0, "short_circuit_frac": 1.0}
    res = runs(turngate_sym172=cpu,
               base_sym172={"cpu_s_per_mpkt": 4.0, "machine_s_per_mpkt": 9.0,
                            "short_circuit_frac": 0.0},
               turngate_flat172={"cpu_s_per_mpkt": 1.9, "machine_s_per_mpkt": 5.0})
    lines = compare_report.sym_targets(res, ["flat172", "sym172", "sym1200"])
    check(len(lines) == 8, f"two figures x two targets for each sym test: {lines}")
    check(lines[0].startswith("PASS sym 172 B: server process CPU per delivered pkt") and
          "turngate / base (today's symmetric path) = 0.50 (target ≤ 0.6)" in lines[0],
          lines[0])
    check(lines[1].startswith("PASS") and "turngate / turngate flat 172 B (asymmetric) = "
          "1.05 (target ≤ 1.1)" in lines[1], lines[1])
    check(lines[2].startswith("FAIL sym 172 B: machine CPU per delivered pkt") and
          "= 0.67 (target ≤ 0.6)" in lines[2], lines[2])
    check(lines[3].startswith("FAIL") and "= 1.20 (target ≤ 1.1)" in lines[3], lines[3])
    check(all(l.startswith("SKIP sym 1200 B") and "no turngate result (--servers)" in l
              for l in lines[4:]), f"sym1200 not run: {lines[4:]}")
    # No base and no flat run: SKIP lines say how to get them; the counters' notes.
    res = runs(turngate_sym1200=dict(cpu, short_circuit_frac=0.5),
               base_sym1200={"cpu_s_per_mpkt": 4.0, "short_circuit_frac": 0.3})
    lines = compare_report.sym_targets(res, ["sym1200"])
    check("SKIP" in lines[1] and "--tests flat1200,sym1200" in lines[1], lines[1])
    check(lines[2].startswith("SKIP") and "no base result" in lines[2] and
          "bench/build_base.sh" in lines[2], lines[2])
    notes = [l for l in lines if l.startswith("NOTE")]
    check(len(notes) == 2 and "turngate short-circuited 0.500" in notes[0] and
          "base short-circuited 0.300" in notes[1] and "not a build from before" in notes[1],
          f"{notes}")
    check(compare_report.sym_targets({}, ["flat172"])[0].startswith("none"), "no sym test")


def test_sym_report():
    res = runs(turngate_sym172={"relayed_pps": 100.0, "fwd_loss": 0.0, "loss": 0.001,
                                "short_circuit_frac": 1.0, "relayed0": "127.0.0.9:40000"},
               base_sym172={"relayed_pps": 60.0, "short_circuit_frac": 0.0,
                            "relayed0": "127.0.0.1:40000"},
               coturn_sym172={"relayed_pps": 50.0, "relayed0": "127.0.0.1:41000"})
    t = compare_report.table(res, ["turngate", "base", "coturn"], 1)
    row = [l for l in t.splitlines() if l.startswith("| sym 172 B: delivered pkt/s")]
    check(row and row[0].endswith("| 100 | 60 | 50 | 2.00 | 1.20 |"), f"{row}")
    check("| sym 172 B: loss % | 0.100 |" in t, "loss row in per cent")
    check("short-circuited / peer-bound datagrams (turngated's counters) | 1.000 | 0.000 | - |"
          in t, "short-circuit share row")
    check("each through two allocations" in t.splitlines()[-1], "footnote: delivered")
    args = argparse.Namespace(topo=compare.LOOPBACK, sym_mask="127.0.0.9", notes={},
                              coturn="/usr/bin/turnserver", coturn_version="version x")
    notes = compare_report.notes(args, res, ["turngate", "base", "coturn"])
    check(any("relay_address_mask: 127.0.0.9 on the listener" in l for l in notes),
          f"mask note {notes}")
    check(any("turngate 127.0.0.9:40000; base 127.0.0.1:40000; coturn 127.0.0.1:41000" in l
              for l in notes), f"relayed addresses {notes}")
    check(any("--allow-loopback-peers" in l for l in notes), "coturn's loopback peers")
    flat = runs(turngate_flat172={"relayed_pps": 1.0})
    check(not any(l.startswith("sym") for l in compare_report.notes(args, flat, ["turngate"]))
          and "each through" not in compare_report.table(flat, ["turngate"], 1),
          "no sym notes without a sym test")


def test_tcp():
    """Issue 39's TCP tests: a TURN-TCP listener on the UDP one's address and port in those
    tests only (turngated and stunnerd); turnbench's tcp mode on the flat load, or ten
    allocations with one packet in flight each; the round-trip target against each stunnerd
    arm."""
    for topo in (compare.LOOPBACK, netns_layout()):
        plain, _ = configs(topo, "flat172")
        tcp, _ = configs(topo, "tcp172")
        check("TURN-TCP" not in plain["turngate"], f"{topo.name}: no TCP listener in flat")
        extra = [l for l in tcp["turngate"].splitlines()
                 if l not in plain["turngate"].splitlines()]
        want = ["  - name: tcp", "    protocol: TURN-TCP"]
        check(extra == want, f"{topo.name}: tcp adds a TURN-TCP listener: {extra}")
        check(f"    protocol: TURN-TCP\n    address: {topo.relay_ip}\n" +
              (f"    bind_address: {topo.bind}\n" if topo.bind else "") +
              f"    port: {topo.server[1]}\n    routes: [echo]\n" in tcp["turngate"],
              f"{topo.name}: TCP listener on the UDP one's address and port:\n"
              f"{tcp['turngate']}")
    args = argparse.Namespace(auth="static", workers=2, topo=compare.LOOPBACK,
                              stunner_bin="/s")
    with tempfile.TemporaryDirectory() as d:
        cmd = compare.SERVERS["stunnerd"](args, d, test="tcprtt172")
        with open(cmd[2][len("file://"):]) as f:
            text = f.read()
    check("    protocol: TURN-TCP\n    address: 127.0.0.1\n    port: 13478\n" in text and
          cmd[-1] == "--udp-thread-num=2", f"stunnerd's TCP listener:\n{text}\n{cmd}")
    args = argparse.Namespace(auth="static", topo=compare.LOOPBACK, p=dict(warm=0.3, dur=1))
    targs = compare.tb_args(args, "tcp1200")
    check(targs[targs.index("-m"):] == ["-m", "tcp", "-n", "100", "-W", "256", "-l", "1200",
                                        "-w", "0.3", "-d", "1"], f"tcp turnbench: {targs}")
    targs = compare.tb_args(args, "tcprtt172")
    check(targs[targs.index("-m"):][:7] == ["-m", "tcp", "-n", "10", "-W", "10", "-l"] and
          targs[targs.index("-l") + 1] == "172", f"tcprtt turnbench: {targs}")
    res = runs(turngate_tcprtt172={"rtt_p50_us": 150.0, "rtt_p99_us": 900.0},
               stunnerd_tcprtt172={"rtt_p50_us": 300.0, "rtt_p99_us": 800.0},
               coturn_tcprtt172={"rtt_p50_us": 100.0, "rtt_p99_us": 100.0})
    lines = compare_report.tcp_targets(res, ["tcprtt172", "tcp172"])
    check(len(lines) == 4 and lines[0] == "PASS tcprtt 172 B: RTT p50, turngate / stunnerd = "
          "0.50 (target ≤ 1)" and lines[1].startswith("FAIL tcprtt 172 B: RTT p99") and
          "= 1.12" in lines[1] and all(l.startswith("SKIP tcp 172 B") for l in lines[2:]),
          f"tcp targets (against stunnerd only): {lines}")
    t = compare_report.table(res, ["turngate", "stunnerd", "coturn"], 1)
    row = [l for l in t.splitlines() if l.startswith("| tcprtt 172 B: RTT p50 us")]
    check(row and row[0].endswith("| 150 | 300 | 100 | 1.50 | 0.50 |"), f"{row}")
    check(compare_report.tcp_targets({}, ["flat172"])[0].startswith("none"), "no tcp test")


def test_delivered_legs():
    """CPU per delivered leg: first legs that reached the echo peer count even when their
    echo was lost; the echo peer's count over the run against every packet sent."""
    res = {"sent": 1000.0, "received": 500.0, "sent_all": 1200.0, "server_cpu_s": 0.03}
    out = compare.delivered_legs(res, 1200)
    check(out["peer_share"] == 1.0 and abs(out["cpu_s_per_mleg"] - 20.0) < 1e-9,
          f"lost on the way back: 1500 legs delivered: {out}")
    out = compare.delivered_legs(res, 600)
    check(out["peer_share"] == 0.5 and abs(out["cpu_s_per_mleg"] - 30.0) < 1e-9,
          f"lost on the way in: 1000 legs delivered: {out}")
    check(compare.delivered_legs(res, None) == {} and
          compare.delivered_legs({k: v for k, v in res.items() if k != "server_cpu_s"},
                                 9) == {},
          "no echo count or no server sample: nothing")
    args = argparse.Namespace(auth="static", topo=compare.LOOPBACK,
                              p=dict(setup_n=10000, setup_conc=256))
    targs = compare.tb_args(args, "setup")
    check(targs[targs.index("-m"):] == ["-m", "setup", "-n", "10000", "-c", "256"],
          f"setup turnbench: {targs}")


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
    test_sym_configs()
    test_short_circuit_share()
    test_targets()
    test_sym_targets()
    test_sym_report()
    test_tcp()
    test_delivered_legs()
    test_table()
    print("FAIL" if FAILS else "PASS", "test_compare_report")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
