#!/usr/bin/python3
"""compare.py: runs turngated and coturn on the same TURN load, alternating, and prints one table.

Every run starts the server fresh (pinned to core 0) and a fresh echo peer, runs turnbench
(pinned with the echo peer to core 1), and stops both by PID. turnbench samples the server's
CPU (utime+stime of the master and all its descendants) and memory (Pss summed over them, so
a shared-memory segment mapped by several processes is counted once; VmRSS sum also kept) at
the exact edges of the measured window. Loopback only; every wait is bounded.

    bench/compare.py [--quick] [--reps N] [--tests flat172,flat1200,rate,setup,mem]
                     [--builddir DIR] [--auth static|secret] [--ceiling] [--raw FILE]
                     [--base DIR --servers turngate,base]   (A/B of two turngated builds)
"""
import argparse
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

SERVER = ("127.0.0.1", 13478)
PEER = "127.0.0.1:13500"
RELAY_MIN, RELAY_MAX = 40000, 59999
USER, PASS, REALM, SECRET = "bench", "bench", "bench", "bench-secret-0123456789"

TURNGATE_YAML = """version: v1
admin:
  name: bench
  loglevel: all:INFO
  healthcheck_endpoint: ""
  admin_socket: {rundir}/admin.sock
  workers: {workers}
  drain_timeout: 0
  relay_port_min: {rmin}
  relay_port_max: {rmax}
# No limits section: turngated runs with its default limits, reflection protection on
# (every bench allocation comes from 127.0.0.1 and starts with a 401, paid by the address's
# credits once it has authenticated; docs/security.md). The output says so.
auth:
{auth}
listeners:
  - name: udp
    protocol: TURN-UDP
    address: 127.0.0.1
    port: {port}
    routes: [echo]
clusters:
  - name: echo
    type: STATIC
    endpoints: [127.0.0.1]
"""


def turngate_cmd(args, rundir, builddir=None):
    if args.auth == "secret":
        auth = f"  type: ephemeral\n  realm: {REALM}\n  credentials:\n    secret: {SECRET}"
    else:
        auth = (f"  type: static\n  realm: {REALM}\n  credentials:\n"
                f"    username: {USER}\n    password: {PASS}")
    conf = os.path.join(rundir, "turngate.yaml")
    with open(conf, "w") as f:
        f.write(TURNGATE_YAML.format(rundir=rundir, rmin=RELAY_MIN, rmax=RELAY_MAX,
                                     auth=auth, port=SERVER[1], workers=args.workers))
    return [os.path.join(builddir or args.builddir, "turngated"), "-c", conf]


def base_cmd(args, rundir):
    # Another turngated build (--base DIR) on the same settings: A/B of a change.
    return turngate_cmd(args, rundir, args.base)


def coturn_cmd(args, rundir):
    # The coturn settings of docs/performance.md (research baseline): one relay thread.
    cmd = ["turnserver", "-n", "--listening-ip=127.0.0.1", "--relay-ip=127.0.0.1",
           f"--listening-port={SERVER[1]}", f"--min-port={RELAY_MIN}",
           f"--max-port={RELAY_MAX}", f"--realm={REALM}", "--no-tls", "--no-dtls",
           "--no-cli", "--allow-loopback-peers", "--log-file=stdout", "--simple-log",
           f"--pidfile={rundir}/turnserver.pid", f"--userdb={rundir}/turndb",
           f"--relay-threads={args.workers}"]
    if args.auth == "secret":
        cmd += ["--use-auth-secret", f"--static-auth-secret={SECRET}"]
    else:
        cmd += ["--lt-cred-mech", f"--user={USER}:{PASS}"]
    return cmd


SERVERS = {"turngate": turngate_cmd, "coturn": coturn_cmd, "base": base_cmd}


def wait_stun(deadline_s=10.0):
    """True once the server answers a STUN Binding request on SERVER."""
    req = struct.pack("!HHI", 0x0001, 0, 0x2112A442) + os.urandom(12)
    end = time.monotonic() + deadline_s
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.1)
        while time.monotonic() < end:
            try:
                s.sendto(req, SERVER)
                data, _ = s.recvfrom(2048)
                if len(data) >= 20 and data[8:20] == req[8:20]:
                    return True
            except OSError:
                time.sleep(0.05)
    return False


def stop(proc, grace=5.0):
    """SIGTERM, then SIGKILL after grace seconds; the process group is the one we created."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=5)


def pin(args, cpus):
    """taskset to the given cores ("" = unpinned), and optionally a nice value."""
    cmd = ["taskset", "-c", cpus] if cpus else []
    if args.nice:
        cmd = ["nice", "-n", str(args.nice)] + cmd
    return cmd


CGROUP_CPU = "/sys/fs/cgroup/cpu"      # cgroup v1 cpu controller (this machine's layout)


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def cap_workers(master, workers, pct):
    """Puts each of turngated's worker processes in its own cpu cgroup capped at pct % of
    one core (10 ms period): a stand-in for "one core per worker" on a box whose cores are
    taken by the load generator. Returns the cgroup directories to remove afterwards."""
    deadline = time.monotonic() + 10
    pids = children(master)
    while len(pids) < workers and time.monotonic() < deadline:
        time.sleep(0.05)
        pids = children(master)
    if len(pids) < workers:
        raise RuntimeError(f"expected {workers} workers under {master}, found {pids}")
    dirs = []
    for i, pid in enumerate(sorted(pids)):
        d = os.path.join(CGROUP_CPU, f"tgbench-{master}-w{i}")
        os.makedirs(d, exist_ok=True)
        for name, val in (("cpu.cfs_period_us", 10000), ("cpu.cfs_quota_us", pct * 100),
                          ("cgroup.procs", pid)):
            with open(os.path.join(d, name), "w") as f:
                f.write(str(val))
        dirs.append(d)
    return dirs


def start_echo(args, tb, lifetime):
    p = subprocess.Popen(pin(args, args.gen_cpus) + [tb, "-m", "echo", "-p", PEER, "-d",
                                               str(lifetime)], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    line = p.stdout.readline()
    if "echo ready" not in line:
        stop(p)
        raise RuntimeError("echo peer did not start")
    return p


def udp_rcvbuf_errors():
    """Box-wide UDP RcvbufErrors (datagrams dropped on a full receive buffer)."""
    try:
        with open("/proc/net/snmp") as f:
            rows = [l.split() for l in f if l.startswith("Udp:")]
        return int(rows[1][rows[0].index("RcvbufErrors")])
    except (OSError, ValueError, IndexError):
        return 0


def parse_line(out):
    for line in out.splitlines():
        if line.startswith("turnbench "):
            kv = dict(t.split("=", 1) for t in line.split()[1:] if "=" in t)
            return {k: (float(v) if v.replace(".", "", 1).lstrip("-").isdigit() else v)
                    for k, v in kv.items()}
    return None


def tb_args(args, test):
    p = args.p
    common = ["-s", f"{SERVER[0]}:{SERVER[1]}", "-p", PEER, "-u", USER]
    common += ["-S", SECRET] if args.auth == "secret" else ["-k", PASS]
    if test.startswith("flat"):
        return common + ["-m", "relay", "-n", "100", "-W", "256", "-l", test[4:],
                         "-w", str(p["warm"]), "-d", str(p["dur"])]
    if test == "rate":
        return common + ["-m", "rate", "-n", str(p["rate_n"]), "-r", str(p["rate"]),
                         "-l", "172", "-w", str(p["warm"]), "-d", str(p["dur"])]
    if test == "setup":
        return common + ["-m", "setup", "-n", str(p["setup_n"]), "-c", "64"]
    if test == "mem":
        return common + ["-m", "hold", "-n", str(p["mem_n"]), "-c", "64", "-T", "2", "-H", "0"]
    raise ValueError(test)


def run_one(args, server, test):
    """One fresh server + echo + turnbench run; returns the parsed result dict or None."""
    tb = os.path.join(args.builddir, "bench", "turnbench")
    rundir = tempfile.mkdtemp(prefix=f"tgbench-{server}-")
    srv = echo = None
    capped = []
    log = open(os.path.join(rundir, "server.log"), "w")
    try:
        if server == "direct":
            if not test.startswith("flat"):
                return None
            targs = ["-m", "direct", "-p", PEER, "-n", "100", "-W", "256", "-l", test[4:],
                     "-w", str(args.p["warm"]), "-d", str(args.p["dur"])]
        else:
            cmd = SERVERS[server](args, rundir)
            srv = subprocess.Popen(pin(args, args.srv_cpus) + cmd, stdout=log, stderr=log,
                                   cwd=rundir, start_new_session=True)
            if not wait_stun():
                raise RuntimeError(f"{server} did not answer STUN on {SERVER}")
            if args.worker_quota and server != "coturn":
                capped = cap_workers(srv.pid, args.workers, args.worker_quota)
            targs = tb_args(args, test) + ["-P", str(srv.pid)]
        echo = start_echo(args, tb, 600)
        targs += ["-E", str(echo.pid)]
        drops = udp_rcvbuf_errors()
        r = subprocess.run(pin(args, args.gen_cpus) + [tb] + targs, capture_output=True,
                           text=True, timeout=args.p["run_timeout"])
        res = parse_line(r.stdout)
        if res is not None:
            res["rcvbuf_errors"] = udp_rcvbuf_errors() - drops
        if r.returncode != 0 or res is None:
            print(f"# {server} {test}: turnbench rc={r.returncode}: "
                  f"{r.stderr.strip()[-400:]}", file=sys.stderr)
            return None
        return res
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"# {server} {test}: {e}", file=sys.stderr)
        return None
    finally:
        stop(echo)
        stop(srv)
        for d in capped:
            try:
                os.rmdir(d)
            except OSError:
                pass
        log.close()
        if srv is not None and srv.returncode not in (0, -signal.SIGTERM, None) \
                and not args.keep:
            print(f"# {server} exit status {srv.returncode}, log kept in {rundir}",
                  file=sys.stderr)
        elif not args.keep:
            shutil.rmtree(rundir, ignore_errors=True)


# (label, test, key, scale, format)
ROWS = [
    ("flat 172 B: relayed pkt/s", "flat172", "relayed_pps", 1, "{:,.0f}"),
    ("flat 172 B: server CPU-s per M relayed pkts", "flat172", "cpu_s_per_mpkt", 1, "{:.2f}"),
    ("flat 172 B: server CPU %", "flat172", "server_cpu_pct", 1, "{:.0f}"),
    ("flat 172 B: loss %", "flat172", "loss", 100, "{:.3f}"),
    ("flat 1200 B: relayed pkt/s", "flat1200", "relayed_pps", 1, "{:,.0f}"),
    ("flat 1200 B: server CPU-s per M relayed pkts", "flat1200", "cpu_s_per_mpkt", 1,
     "{:.2f}"),
    ("flat 1200 B: server CPU %", "flat1200", "server_cpu_pct", 1, "{:.0f}"),
    ("flat 1200 B: loss %", "flat1200", "loss", 100, "{:.3f}"),
    ("rate: server CPU-s per M relayed pkts", "rate", "cpu_s_per_mpkt", 1, "{:.2f}"),
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


def table(results, servers, reps):
    head = ["metric"] + servers
    ref = "coturn" if "coturn" in servers else "base"
    if "turngate" in servers and ref in servers:
        head.append(f"turngate/{ref}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, test, key, scale, fmt in ROWS:
        row, meds = [label], {}
        for s in servers:
            vals = [r[key] * scale for r in results.get((s, test), []) if key in r]
            row.append(cell(vals, fmt))
            meds[s] = statistics.median(vals) if vals else None
        if len(head) > len(servers) + 1:
            a, b = meds.get("turngate"), meds.get(ref)
            row.append(f"{a / b:.2f}" if a is not None and b else "-")
        if any(c != "-" for c in row[1:len(servers) + 1]):
            lines.append("| " + " | ".join(row) + " |")
    lines.append(f"\nmedian (min–max) of {reps} run(s) per cell; "
                 "relayed packets count both directions.")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke test: short runs, 1 round")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--tests", default="flat172,flat1200,rate,setup,mem")
    ap.add_argument("--servers", default="turngate,coturn")
    ap.add_argument("--ceiling", action="store_true",
                    help="also run the harness alone (direct, no relay) in the flat tests")
    ap.add_argument("--builddir", default=os.getcwd(), help="build tree (turngated, bench/)")
    ap.add_argument("--base", help="another build tree whose turngated runs as server 'base'")
    ap.add_argument("--auth", choices=["static", "secret"], default="static")
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--raw", help="append every run's raw line to this file")
    ap.add_argument("--keep", action="store_true", help="keep run directories")
    ap.add_argument("--workers", type=int, default=1,
                    help="turngated workers and coturn relay threads (1)")
    ap.add_argument("--srv-cpus", default="0", help="taskset list for the server ('' = none)")
    ap.add_argument("--gen-cpus", default="1",
                    help="taskset list for generator and echo ('' = none)")
    ap.add_argument("--worker-quota", type=int, default=0, metavar="PCT",
                    help="turngated only: each worker in its own cpu cgroup capped at PCT %% "
                         "of a core (root, cgroup v1), to show worker scaling on 2 cores")
    ap.add_argument("--nice", type=int, default=0,
                    help="nice value for server, generator and echo (e.g. -10 on a shared box)")
    args = ap.parse_args()
    if args.quick:
        args.p = dict(warm=0.3, dur=1, rate_n=400, rate=20000, setup_n=500, mem_n=1000,
                      run_timeout=30)
        reps = args.reps or 1
    else:
        args.p = dict(warm=1, dur=10, rate_n=400, rate=20000, setup_n=2000, mem_n=10000,
                      run_timeout=120)
        reps = args.reps or 3
    if args.duration:
        args.p["dur"] = args.duration
    reps = max(1, min(reps, 20))
    args.workers = max(1, min(args.workers, 64))
    if args.worker_quota and not (10 <= args.worker_quota <= 100
                                  and os.access(CGROUP_CPU, os.W_OK)):
        sys.exit(f"--worker-quota needs 10..100 and a writable {CGROUP_CPU} (root, cgroup v1)")
    servers = [s for s in args.servers.split(",") if s]
    for s in servers:
        if s not in SERVERS:
            sys.exit(f"unknown server {s}")
    if "base" in servers and not (args.base and os.access(os.path.join(args.base, "turngated"),
                                                           os.X_OK)):
        sys.exit("server 'base' needs --base DIR holding a built turngated")
    if "coturn" in servers and not shutil.which("turnserver"):
        sys.exit("turnserver (coturn) not found")
    tb = os.path.join(args.builddir, "bench", "turnbench")
    if not os.access(tb, os.X_OK):
        sys.exit(f"{tb} not built (run make in the build tree or pass --builddir)")
    for host, port in (SERVER, (PEER.split(":")[0], int(PEER.split(":")[1]))):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                probe.bind((host, port))
            except OSError as e:
                sys.exit(f"UDP {host}:{port} is busy ({e.strerror}): stop what holds it")
    order = servers + (["direct"] if args.ceiling else [])
    results = {}
    raw = open(args.raw, "a") if args.raw else None
    for test in [t for t in args.tests.split(",") if t]:
        for rep in range(reps):
            for s in order:         # A B A B ...: noise spreads over all servers
                res = run_one(args, s, test)
                if res is None:
                    continue
                if "gen_cpu_s" in res and "duration" in res and res["duration"]:
                    res["gen_cpu_pct"] = 100 * res["gen_cpu_s"] / res["duration"]
                if res.get("pss_held_kib") and res.get("ready"):
                    res["pss_total_per_alloc_b"] = res["pss_held_kib"] * 1024 / res["ready"]
                results.setdefault((s, test), []).append(res)
                line = " ".join(f"{k}={v}" for k, v in res.items())
                print(f"# {s} {test} rep{rep + 1}: {line}", file=sys.stderr, flush=True)
                if raw:
                    raw.write(f"server={s} test={test} rep={rep + 1} {line}\n")
    if raw:
        raw.close()
    print("turngated: default limits (limits.* unset; reflection protection on); set here: "
          f"workers {args.workers}, relay ports {RELAY_MIN}-{RELAY_MAX}, loglevel all:INFO")
    print(table(results, order, reps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
