"""compare_report.py: compare.py's table, the notes printed above it, and issue 21's targets.

Medians (min–max) over the repetitions of each (server, test); ratio columns against coturn
(or against base in an A/B of two turngated builds); the targets of issue 21 as PASS/FAIL
lines on the medians, SKIP where a run they need is missing.
"""
import statistics


# (label, test, key, scale, format)
ROWS = [
    ("flat 172 B: relayed pkt/s", "flat172", "relayed_pps", 1, "{:,.0f}"),
    ("flat 172 B: server CPU-s per M relayed pkts", "flat172", "cpu_s_per_mpkt", 1, "{:.2f}"),
    ("flat 172 B: server CPU %", "flat172", "server_cpu_pct", 1, "{:.0f}"),
    ("flat 172 B: machine CPU-s per M relayed pkts (all CPUs)", "flat172",
     "machine_s_per_mpkt", 1, "{:.2f}"),
    ("flat 172 B: of which softirq", "flat172", "softirq_s_per_mpkt", 1, "{:.2f}"),
    ("flat 172 B: machine CPU % (100 = one core)", "flat172", "machine_cpu_pct", 1,
     "{:.0f}"),
    ("flat 172 B: loss %", "flat172", "loss", 100, "{:.3f}"),
    ("flat 1200 B: relayed pkt/s", "flat1200", "relayed_pps", 1, "{:,.0f}"),
    ("flat 1200 B: server CPU-s per M relayed pkts", "flat1200", "cpu_s_per_mpkt", 1,
     "{:.2f}"),
    ("flat 1200 B: server CPU %", "flat1200", "server_cpu_pct", 1, "{:.0f}"),
    ("flat 1200 B: machine CPU-s per M relayed pkts (all CPUs)", "flat1200",
     "machine_s_per_mpkt", 1, "{:.2f}"),
    ("flat 1200 B: of which softirq", "flat1200", "softirq_s_per_mpkt", 1, "{:.2f}"),
    ("flat 1200 B: machine CPU % (100 = one core)", "flat1200", "machine_cpu_pct", 1,
     "{:.0f}"),
    ("flat 1200 B: loss %", "flat1200", "loss", 100, "{:.3f}"),
    ("rate: server CPU-s per M relayed pkts", "rate", "cpu_s_per_mpkt", 1, "{:.2f}"),
    ("rate: machine CPU-s per M relayed pkts (all CPUs)", "rate", "machine_s_per_mpkt", 1,
     "{:.2f}"),
    ("rate: RTT p50 us", "rate", "rtt_p50_us", 1, "{:,.0f}"),
    ("rate: RTT p99 us", "rate", "rtt_p99_us", 1, "{:,.0f}"),
    ("rate: RTT p99.9 us", "rate", "rtt_p999_us", 1, "{:,.0f}"),
    ("rate: loss %", "rate", "loss", 100, "{:.3f}"),
    ("setup: allocations/s", "setup", "allocs_per_s", 1, "{:,.0f}"),
    ("setup: server CPU-ms per allocation", "setup", "cpu_ms_per_alloc", 1, "{:.3f}"),
    ("setup: same from schedstat (ns clock)", "setup", "sched_ms_per_alloc", 1, "{:.3f}"),
    ("setup of 10,000 (mem test): allocations/s", "mem", "allocs_per_s", 1, "{:,.0f}"),
    ("memory: bytes per held allocation (Pss, shm once)", "mem", "pss_per_alloc_b", 1,
     "{:,.0f}"),
    ("memory: bytes per held allocation (VmRSS sum)", "mem", "rss_per_alloc_b", 1,
     "{:,.0f}"),
    ("memory: whole server Pss held / allocations, bytes", "mem", "pss_total_per_alloc_b", 1,
     "{:,.0f}"),
    ("memory: Pss idle KiB", "mem", "pss_idle_kib", 1, "{:,.0f}"),
    ("memory: Pss held KiB", "mem", "pss_held_kib", 1, "{:,.0f}"),
    ("generator CPU % (flat 172 B)", "flat172", "gen_cpu_pct", 1, "{:.0f}"),
    ("foreign CPU-s in window (flat 172 B)", "flat172", "foreign_cpu_s", 1, "{:.2f}"),
    ("relay sockets on the relay address after the run (flat 172 B, --netns)", "flat172",
     "relay_sockets", 1, "{:,.0f}"),
    ("UDP RcvbufErrors per run (flat 1200 B)", "flat1200", "rcvbuf_errors", 1, "{:,.0f}"),
    ("UDP RcvbufErrors per run (rate)", "rate", "rcvbuf_errors", 1, "{:,.0f}"),
]


def cell(vals, fmt):
    if not vals:
        return "-"
    med = statistics.median(vals)
    if len(vals) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(vals))}–{fmt.format(max(vals))})"


def median_of(results, server, test, key):
    vals = [r[key] for r in results.get((server, test), []) if key in r]
    return statistics.median(vals) if vals else None


def table(results, servers, reps):
    """servers: the table's columns (direct included); one ratio column per relay server
    against coturn (or base, for an A/B without coturn)."""
    ref = "coturn" if "coturn" in servers else "base"
    ratios = [s for s in servers if ref in servers and s not in (ref, "direct")]
    head = ["metric"] + servers + [f"{s}/{ref}" for s in ratios]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, test, key, scale, fmt in ROWS:
        row = [label]
        for s in servers:
            row.append(cell([r[key] * scale for r in results.get((s, test), []) if key in r],
                            fmt))
        for s in ratios:
            a, b = median_of(results, s, test, key), median_of(results, ref, test, key)
            row.append(f"{a / b:.2f}" if a is not None and b else "-")
        if any(c != "-" for c in row[1:len(servers) + 1]):
            lines.append("| " + " | ".join(row) + " |")
    lines.append(f"\nmedian (min–max) of {reps} run(s) per cell; "
                 "relayed packets count both directions.")
    return "\n".join(lines)


# Issue 21's targets, flat 172 B and 1200 B: (what, key, server, against, bound, at least?)
TARGETS = [
    ("relayed pkt/s", "relayed_pps", "turngate-offload", "turngate", 2.0, True),
    ("machine CPU per relayed pkt", "machine_s_per_mpkt", "turngate-offload", "coturn", 0.4,
     False),
    ("relayed pkt/s", "relayed_pps", "turngate-offload", "direct", 0.8, True),
]


def targets(results, tests):
    """PASS/FAIL lines of issue 21's targets on the medians; SKIP where a run is missing."""
    out = []
    for test in [t for t in ("flat172", "flat1200") if t in tests]:
        for what, key, a, b, bound, at_least in TARGETS:
            name = f"{test[:4]} {test[4:]} B: {what}, {a} / {b}"
            want = f"{'≥' if at_least else '≤'} {bound:g}"
            va, vb = median_of(results, a, test, key), median_of(results, b, test, key)
            if va is None or not vb:
                missing = a if va is None else b
                how = "--ceiling" if missing == "direct" else "--servers"
                out.append(f"SKIP {name} (target {want}): no {missing} result ({how})")
                continue
            ratio = va / vb
            ok = ratio >= bound if at_least else ratio <= bound
            out.append(f"{'PASS' if ok else 'FAIL'} {name} = {ratio:.2f} (target {want})")
        out += caveats(results, test)
    return out or ["none: the targets are taken in the flat tests (--tests flat172,flat1200)"]


def caveats(results, test):
    """NOTE lines that say what the targets above can mean on this run, from the numbers:
    whether the kernel did relay (the worker's CPU per packet falls towards 0 when it does),
    and whether the harness could show a relay twice as fast as the user-space one at all
    (the direct path is the most any relay can reach with the same generator)."""
    size = f"{test[:4]} {test[4:]} B"
    out = []
    off = median_of(results, "turngate-offload", test, "cpu_s_per_mpkt")
    user = median_of(results, "turngate", test, "cpu_s_per_mpkt")
    if off is not None and user:
        r = off / user
        out.append(f"NOTE {size}: server CPU per relayed pkt, turngate-offload / turngate = "
                   f"{r:.2f}: " + (
                       "the worker still handled (nearly) every packet, so the kernel fast "
                       "path relayed little or nothing and the lines above compare user "
                       "space with user space" if r >= 0.5 else
                       "the worker handled few of the relayed packets: the kernel relayed "
                       "them"))
    direct = median_of(results, "direct", test, "relayed_pps")
    user = median_of(results, "turngate", test, "relayed_pps")
    if direct is not None and user and direct / user < TARGETS[0][4]:
        r = direct / user
        out.append(f"NOTE {size}: direct / turngate = {r:.2f}: the harness alone moves less "
                   f"than {TARGETS[0][4]:g} × the user-space relay's rate, so the "
                   f"{TARGETS[0][4]:g} × target cannot be met with this machine and pinning "
                   "whatever the fast path does (give the generator and the echo peer cores "
                   "of their own: --gen-cpus, --echo-cpus)" + (
                       "; and direct is no ceiling here: its kernel work (a veth or loopback "
                       "receive runs in the sender's softirq) all lands on the generator's "
                       "and echo peer's cores, where a user-space relay moves half of it to "
                       "the server's core; a TC fast path would put it back on the senders' "
                       "cores, as direct does" if r < 1 else ""))
    return out


def notes(args, results, order):
    """What the reader needs to judge the table: the layout, the servers, the offload
    engine as the daemon reported it, the other load on the machine."""
    out = [f"layout: {args.topo.describe()}"]
    if "coturn" in order:
        out.append(f"coturn: {args.coturn} ({args.coturn_version})")
    if "turngate-offload" in order:
        out.append("turngate-offload: turngate's config plus admin.offload_engine: "
                   f"{getattr(args, 'offload_engine', 'TC')}, nothing else")
        said = args.notes.get("turngate-offload", [])
        out += [f"turngate-offload log: {l}" for l in said] or \
            ["turngate-offload log: no line mentions offload, bpf, tc or xdp"]
    out.append("machine CPU: every CPU's non-idle, non-iowait time (/proc/stat: user, nice, "
               "system, irq, softirq, steal) over the window, per relayed packet. It is the "
               "figure that compares a kernel fast path: the relay's work then runs in "
               "softirq, charged to whatever it interrupts (generator, echo peer) or to "
               "nobody, not to the server, whose process CPU would flatter it. It includes "
               "the generator and echo peer (the same work for every server) and any "
               "other load on the machine.")
    busy = [r["foreign_cpu_s"] / (r["duration"] * r.get("machine_ncpu", 1))
            for (s, t), rs in results.items() for r in rs
            if "foreign_cpu_s" in r and r.get("duration")]
    if busy and statistics.median(busy) > 0.05:
        out.append(f"other load: median {100 * statistics.median(busy):.0f} % of the "
                   "machine's CPU in the windows went to neither the server, the generator "
                   "nor the echo peer (foreign CPU: other tenants, and softirq that ran in "
                   "none of them); the machine-wide figures include it")
    return out
