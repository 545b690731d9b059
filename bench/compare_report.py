"""compare_report.py: compare.py's table, the notes printed above it, and issues 21 and 22's
targets.

Medians (min–max) over the repetitions of each (server, test); ratio columns against coturn
(or against base in an A/B of two turngated builds); the targets of issue 21 (kernel fast
path, flat tests) and of issue 22 (symmetric tests, short circuit) as PASS/FAIL lines on the
medians, SKIP where a run they need is missing.
"""
import re
import statistics

# The closed-loop tests' load (flat, sym, tcp): allocations, and packets in flight over all.
LOAD_N, LOAD_W = 100, 256
# tcprtt: this many allocations over TURN-TCP, one packet in flight each (an unloaded round
# trip).
RTT_N = 10


def test_name(test):
    """"flat172" -> "flat 172 B", "sym1200" -> "sym 1200 B"."""
    kind, size = re.fullmatch(r"([a-z]+)(\d+)", test).groups()
    return f"{kind} {size} B"


def load_rows(test, delivered=False):
    """The rows of a closed-loop test (flat: relayed; sym: delivered, each packet through
    two allocations of the server)."""
    name, pkts = test_name(test), "delivered" if delivered else "relayed"
    return [
        (f"{name}: {pkts} pkt/s", test, "relayed_pps", 1, "{:,.0f}"),
        (f"{name}: server CPU-s per M {pkts} pkts", test, "cpu_s_per_mpkt", 1, "{:.2f}"),
        (f"{name}: server CPU %", test, "server_cpu_pct", 1, "{:.0f}"),
        (f"{name}: machine CPU-s per M {pkts} pkts (all CPUs)", test, "machine_s_per_mpkt",
         1, "{:.2f}"),
        (f"{name}: of which softirq", test, "softirq_s_per_mpkt", 1, "{:.2f}"),
        (f"{name}: machine CPU % (100 = one core)", test, "machine_cpu_pct", 1, "{:.0f}"),
        (f"{name}: loss %", test, "loss", 100, "{:.3f}"),
    ]


def sym_rows(test):
    """A symmetric test: the load rows, the first leg's loss, and how much of it took the
    short circuit by turngated's own counters (coturn has none)."""
    name = test_name(test)
    return load_rows(test, delivered=True) + [
        (f"{name}: loss % on the first leg (to the responder)", test, "fwd_loss", 100,
         "{:.3f}"),
        (f"{name}: short-circuited / peer-bound datagrams (turngated's counters)", test,
         "short_circuit_frac", 1, "{:.3f}"),
    ]


def tcp_rows(test):
    """A TURN-over-TCP test (client to server over TCP, relay and echo peer UDP): the load
    rows, the round trip, and connections the server broke."""
    name = test_name(test)
    return load_rows(test) + [
        (f"{name}: RTT p50 us", test, "rtt_p50_us", 1, "{:,.0f}"),
        (f"{name}: RTT p99 us", test, "rtt_p99_us", 1, "{:,.0f}"),
        (f"{name}: RTT p99.9 us", test, "rtt_p999_us", 1, "{:,.0f}"),
        (f"{name}: TCP connections broken mid-run", test, "broken", 1, "{:,.0f}"),
    ]


# (label, test, key, scale, format)
ROWS = load_rows("flat172") + load_rows("flat1200") + sym_rows("sym172") + \
    sym_rows("sym1200") + tcp_rows("tcprtt172") + tcp_rows("tcp172") + tcp_rows("tcp1200") + [
    ("rate: server CPU-s per M relayed pkts", "rate", "cpu_s_per_mpkt", 1, "{:.2f}"),
    ("rate: machine CPU-s per M relayed pkts (all CPUs)", "rate", "machine_s_per_mpkt", 1,
     "{:.2f}"),
    ("rate: RTT p50 us", "rate", "rtt_p50_us", 1, "{:,.0f}"),
    ("rate: RTT p99 us", "rate", "rtt_p99_us", 1, "{:,.0f}"),
    ("rate: RTT p99.9 us", "rate", "rtt_p999_us", 1, "{:,.0f}"),
    ("rate: loss %", "rate", "loss", 100, "{:.3f}"),
    ("rate: share of the offered packets that reached the echo peer %", "rate", "peer_share",
     100, "{:.1f}"),
    ("rate: server CPU-s per M delivered legs (to the peer, or back)", "rate",
     "cpu_s_per_mleg", 1, "{:.2f}"),
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
    ("generator CPU % (sym 172 B)", "sym172", "gen_cpu_pct", 1, "{:.0f}"),
    ("foreign CPU-s in window (sym 172 B)", "sym172", "foreign_cpu_s", 1, "{:.2f}"),
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
    against coturn (or base, for an A/B without coturn), and one per turngated server against
    each stunnerd arm."""
    ref = "coturn" if "coturn" in servers else "base"
    pairs = [(s, ref) for s in servers
             if ref in servers and s not in (ref, "direct") and not s.startswith("stunnerd")]
    # turngated against each stunnerd arm too (issue 39)
    pairs += [(s, st) for st in servers if st.startswith("stunnerd")
              for s in servers if s.startswith("turngate")]
    head = ["metric"] + servers + [f"{s}/{r}" for s, r in pairs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, test, key, scale, fmt in ROWS:
        row = [label]
        for s in servers:
            row.append(cell([r[key] * scale for r in results.get((s, test), []) if key in r],
                            fmt))
        for s, r in pairs:
            a, b = median_of(results, s, test, key), median_of(results, r, test, key)
            row.append(f"{a / b:.2f}" if a is not None and b else "-")
        if any(c != "-" for c in row[1:len(servers) + 1]):
            lines.append("| " + " | ".join(row) + " |")
    lines.append(f"\nmedian (min–max) of {reps} run(s) per cell; "
                 "relayed packets count both directions" + (
                     "; delivered packets (sym) are those that reached either client of a "
                     "pair, 2 per round trip, each through two allocations of the server"
                     if any(t.startswith("sym") for _, t in results) else "") + ".")
    return "\n".join(lines)


# Issue 21's targets, flat 172 B and 1200 B: (what, key, server, against, bound, at least?)
TARGETS = [
    ("relayed pkt/s", "relayed_pps", "turngate-offload", "turngate", 2.0, True),
    ("machine CPU per relayed pkt", "machine_s_per_mpkt", "turngate-offload", "coturn", 0.4,
     False),
    ("relayed pkt/s", "relayed_pps", "turngate-offload", "direct", 0.8, True),
]


def verdict(name, va, vb, bound, at_least, missing):
    """One line for the ratio va / vb against bound: PASS or FAIL, or SKIP where a value is
    missing; missing = ((what a is, how to get it), (what b is, how to get it))."""
    want = f"{'≥' if at_least else '≤'} {bound:g}"
    if va is None or not vb:
        what, how = missing[0] if va is None else missing[1]
        return f"SKIP {name} (target {want}): no {what} result ({how})"
    ratio = va / vb
    ok = ratio >= bound if at_least else ratio <= bound
    return f"{'PASS' if ok else 'FAIL'} {name} = {ratio:.2f} (target {want})"


def targets(results, tests):
    """PASS/FAIL lines of issue 21's targets on the medians; SKIP where a run is missing."""
    out = []
    for test in [t for t in ("flat172", "flat1200") if t in tests]:
        for what, key, a, b, bound, at_least in TARGETS:
            out.append(verdict(
                f"{test_name(test)}: {what}, {a} / {b}", median_of(results, a, test, key),
                median_of(results, b, test, key), bound, at_least,
                [(s, "--ceiling" if s == "direct" else "--servers") for s in (a, b)]))
        out += caveats(results, test)
    return out or ["none: the targets are taken in the flat tests (--tests flat172,flat1200)"]


# Issue 22's targets compare CPU per delivered packet in two figures, each its own line:
# (what, key). The server's own CPU is the figure of the issue (a short circuit saves the
# server's work); the machine's includes the generator, the same work for every server.
SYM_CPU = [
    ("server process CPU per delivered pkt (turngated's master and workers, utime+stime)",
     "cpu_s_per_mpkt"),
    ("machine CPU per delivered pkt (all CPUs, /proc/stat; generator included)",
     "machine_s_per_mpkt"),
]
SYM_VS_BASE, SYM_VS_FLAT = 0.6, 1.1


def sym_targets(results, tests):
    """PASS/FAIL lines of issue 22's targets on the medians: the symmetric test with the
    short circuit (turngate: in user space; turngate-offload: in the kernel, when it ran)
    against today's symmetric path (base, the build before the short circuit) and against
    the same server's asymmetric flat test of the same size."""
    out = []
    servers = ["turngate"] + [s for s in ("turngate-offload",)
                              if any(k[0] == s for k in results)]
    for test in [t for t in ("sym172", "sym1200") if t in tests]:
        flat, name = "flat" + test[3:], test_name(test)
        for server in servers:
            # The kernel's work is charged to whatever it interrupts, not to the server
            # process (about 0 CPU-s): for turngate-offload only the machine figure compares.
            for what, key in SYM_CPU[1:] if server == "turngate-offload" else SYM_CPU:
                sc = median_of(results, server, test, key)
                out.append(verdict(
                    f"{name}: {what}, {server} / base (today's symmetric path)", sc,
                    median_of(results, "base", test, key), SYM_VS_BASE, False,
                    ((server, "--servers"), ("base", "--servers turngate,base --base DIR, "
                                             "DIR built by bench/build_base.sh"))))
                out.append(verdict(
                    f"{name}: {what}, {server} / {server} {test_name(flat)} (asymmetric)", sc,
                    median_of(results, server, flat, key), SYM_VS_FLAT, False,
                    ((server, "--servers"), (f"{server} {flat}", f"--tests {flat},{test}"))))
        out += sym_caveats(results, test)
    return out or ["none: the targets are taken in the symmetric tests (--tests "
                   "flat172,sym172,flat1200,sym1200)"]


# Issue 39: "TCP relay round trip not above stunnerd's", for each turngated server against
# each stunnerd arm, on the unloaded round trip (tcprtt) and under the flat load (tcp).
TCP_RTT_KEYS = [("RTT p50", "rtt_p50_us"), ("RTT p99", "rtt_p99_us")]


def tcp_targets(results, tests):
    """PASS/FAIL lines of issue 39's TCP round-trip target on the medians (turngated's
    round trip / stunnerd's <= 1), SKIP where a stunnerd arm did not run."""
    out = []
    servers = sorted({s for s, _ in results})
    tg = [s for s in servers if s.startswith("turngate")] or ["turngate"]
    st = [s for s in servers if s.startswith("stunnerd")] or ["stunnerd"]
    for test in [t for t in tests if t.startswith("tcp")]:
        for what, key in TCP_RTT_KEYS:
            for a in tg:
                for b in st:
                    out.append(verdict(
                        f"{test_name(test)}: {what}, {a} / {b}", median_of(results, a, test, key),
                        median_of(results, b, test, key), 1.0, False,
                        [(s, "--servers") for s in (a, b)]))
    return out or ["none: the TCP round trip is taken in the tcp tests (--tests "
                   "tcprtt172,tcp172)"]


def sym_caveats(results, test):
    """NOTE lines from turngated's counters: whether turngate's pairs took the short circuit
    and whether base, which should have none, took it."""
    out = []
    for server, want in (("turngate", 1.0), ("turngate-offload", 1.0), ("base", 0.0)):
        frac = median_of(results, server, test, "short_circuit_frac")
        if frac is None:
            continue
        if abs(frac - want) > 0.01:
            out.append(f"NOTE {test_name(test)}: {server} short-circuited {frac:.3f} of the "
                       "datagrams towards a peer, expected " + (
                           "all of them: the pairs did not take the short circuit (check "
                           "relayed0 and the routes)" if want else
                           "none: base is not a build from before the short circuit, so "
                           "turngate / base is not against today's symmetric path"))
    return out


def caveats(results, test):
    """NOTE lines that say what the targets above can mean on this run, from the numbers:
    whether the kernel did relay (the worker's CPU per packet falls towards 0 when it does),
    and whether the harness could show a relay twice as fast as the user-space one at all
    (the direct path is the most any relay can reach with the same generator)."""
    size = test_name(test)
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
    for st in [s for s in order if s.startswith("stunnerd")]:
        out.append(f"{st}: {getattr(args, 'stunner_bin', '?')}/stunnerd (STUNner v1.2.1, "
                   "tests/stunner/go.mod), " + (
                       f"--udp-thread-num={args.workers}" if st == "stunnerd" else
                       "no --udp-thread-num (its default: one UDP socket and read loop)") +
                   "; it binds the wildcard [::]:PORT whatever the listener's address says")
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
    if any(t.startswith("sym") for _, t in results):
        out += sym_notes(args, results, order)
    busy = [r["foreign_cpu_s"] / (r["duration"] * r.get("machine_ncpu", 1))
            for (s, t), rs in results.items() for r in rs
            if "foreign_cpu_s" in r and r.get("duration")]
    if busy and statistics.median(busy) > 0.05:
        out.append(f"other load: median {100 * statistics.median(busy):.0f} % of the "
                   "machine's CPU in the windows went to neither the server, the generator "
                   "nor the echo peer (foreign CPU: other tenants, and softirq that ran in "
                   "none of them); the machine-wide figures include it")
    return out


def sym_notes(args, results, order):
    """The symmetric tests' set-up: the pairs, the settings they add to turngated's config,
    what each server announced as relayed address, what coturn does with them."""
    topo, mask = args.topo, getattr(args, "sym_mask", None)
    out = ["sym: turnbench pairs allocation 2k with 2k+1 of the same server (the same "
           f"{LOAD_N} allocations as flat, {LOAD_N // 2} pairs; {LOAD_W} packets in flight "
           f"over the {LOAD_N // 2} senders): "
           "2k sends ChannelData to 2k+1's XOR-RELAYED-ADDRESS, 2k+1 sends each packet back "
           "through its own allocation (symmetric ICE: both ends TURN clients of one relay)",
           "sym: turngated (turngate and base) gets, in these tests only, " +
           (f"relay_address_mask: {mask} on the listener and " if mask else "") +
           "its own relay address" + (" and the mask" if mask else "") + " in the cluster's "
           "endpoints, so that its allocations may be each other's peers"]
    seen = []
    for s in order:
        addrs = sorted({r["relayed0"] for (srv, t), rs in results.items() for r in rs
                        if srv == s and t.startswith("sym") and "relayed0" in r})
        if addrs:
            seen.append(f"{s} {', '.join(addrs)}")
    if seen:
        out.append("sym: XOR-RELAYED-ADDRESS of the first allocation: " + "; ".join(seen) + (
            " (a build before the short circuit ignores relay_address_mask)"
            if mask and "base" in order else ""))
    if "coturn" in order:
        out.append("sym: coturn relays each leg out of the sender's relay socket into the "
                   "receiver's (no short circuit)" + (
                       "; --allow-loopback-peers, as its relay addresses are loopback ones"
                       if topo.relay_ip.startswith("127.") else
                       "; its relay address is no loopback one, so nothing needs allowing"))
    return out
