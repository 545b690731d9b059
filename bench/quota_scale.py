#!/usr/bin/python3
"""quota_scale.py: Allocate cost with a user quota set, with 0 and with N allocations held.

Issue 23's benchmark. For turngated (limits.user_quota set) and coturn (--user-quota set),
alternating, each phase on a freshly started server (pinned to core 0):

  empty  turnbench -m setup -n N (Allocate + CreatePermission + ChannelBind, 64 in flight)
         from 127.0.0.2: setups/s and the server's CPU per allocation (schedstat);
  held   first HELD allocations set up by turnbench -m hold processes (at most 10,000
         each, each from its own source address, held open through the measurement so no
         client 5-tuple is reused), then the same setup run.

Held and measured allocations belong to the same user (static bench/bench): every
measured Allocate checks and bumps the very counter that the held allocations weigh on, so
a check that walks all records, or only the user's own, would both show up as a ratio
below 1. The quota (100,000 by default) refuses nothing; `--quick --quota 400` shows that
it is enforced (both servers answer 486 from the 401st allocation on). Generators on core
1. Loopback only: servers on 127.0.0.1:13478, relay sockets on 127.0.0.3 ports 4000-31999
(below the ephemeral range, and off 127.0.0.1 where test suites run their daemons),
clients on 127.0.0.2 and 127.0.0.11 up. Run directories (turngated's state file among
them) under /dev/shm, a tmpfs as /run is in production. Every wait is bounded; the whole
run takes about a minute.

    bench/quota_scale.py [--reps 5] [--held 20000] [-n 2000] [--quota 100000]
                         [--servers turngate,coturn] [--workers 2] [--builddir DIR]
                         [--nice N] [--raw FILE] [--keep] [--quick]
"""
import argparse
import os
import resource
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (start_server, stop, pin, parse_line, coturn_cmd, credentials,
#                               ADMIN_YAML)

RELAY_IP = "127.0.0.3"
RELAY_MIN, RELAY_MAX = 4000, 31999
MEASURE_SRC = "127.0.0.2"
HOLD_SRC = "127.0.0.{}"         # 11, 12, ...: one source address per hold process
HOLD_CHUNK = 10000              # allocations per hold process (one descriptor each)
FD_SPARE = 200                  # descriptors a server process uses besides relay sockets

TURNGATE_YAML = compare.ADMIN_YAML + """
auth:
  type: static
  realm: {realm}
  credentials:
    username: {user}
    password: {password}
listeners:
  - name: udp
    protocol: TURN-UDP
    address: {relay_ip}
    bind_address: {host}
    port: {port}
    routes: [echo]
clusters:
  - name: echo
    type: STATIC
    endpoints: [127.0.0.1]
# Only these two limits are set; the others (reflection protection included) are defaults.
limits:
  max_allocations: {table}
  user_quota: {quota}
"""


def table_size(args):
    """turngated's allocation table: the default 10,000 is too small for the held phase.
    A quarter spare: each worker claims records from its own part of the table, and one
    that outgrows its part walks the next worker's records (shm_alloc_claim)."""
    return max(10000, (args.held + args.n) * 5 // 4)


def turngate_cmd(args, rundir):
    conf = os.path.join(rundir, "turngate.yaml")
    with open(conf, "w") as f:
        f.write(TURNGATE_YAML.format(
            rundir=rundir, workers=args.workers, rmin=RELAY_MIN, rmax=RELAY_MAX,
            realm=compare.REALM, user=compare.USER, password=compare.PASS, relay_ip=RELAY_IP,
            host=compare.SERVER[0], port=compare.SERVER[1], table=table_size(args),
            quota=args.quota))
    return [os.path.join(args.builddir, "turngated"), "-c", conf]


def coturn_cmd(args, rundir):
    """compare.py's coturn command line (static auth, relay threads = --workers) with this
    benchmark's relay address and ports, and the user quota. total-quota stays unset
    (coturn's default 0 = unlimited)."""
    cmd = compare.coturn_cmd(argparse.Namespace(auth="static", workers=args.workers), rundir)
    swap = {"--relay-ip=": RELAY_IP, "--min-port=": RELAY_MIN, "--max-port=": RELAY_MAX}
    for key, val in swap.items():
        hits = [i for i, a in enumerate(cmd) if a.startswith(key)]
        if len(hits) != 1:
            raise RuntimeError(f"compare.coturn_cmd has no single {key}")
        cmd[hits[0]] = f"{key}{val}"
    return cmd + [f"--user-quota={args.quota}"]


SERVERS = {"turngate": turngate_cmd, "coturn": coturn_cmd}


def held_for(args, server):
    """How many allocations this server is given to hold. coturn is one process with one
    descriptor per UDP allocation (measured: 1,000 allocations, 1,000 more descriptors), so
    held + N must fit one process's RLIMIT_NOFILE, which may not be raisable here."""
    if server != "coturn":
        return args.held
    return max(0, min(args.held, args.nofile - FD_SPARE - args.n))


def tb_common():
    return ["-s", f"{compare.SERVER[0]}:{compare.SERVER[1]}", "-p", compare.PEER,
            "-u", compare.USER, "-k", compare.PASS, "-c", "64"]


def start_holds(args, tb, count):
    """Hold processes of at most HOLD_CHUNK allocations each; returns the Popen list."""
    procs = []
    for i, start in enumerate(range(0, count, HOLD_CHUNK)):
        n = min(HOLD_CHUNK, count - start)
        cmd = compare.pin(args, args.gen_cpus) + [tb, "-m", "hold", "-n", str(n),
                                                  "-b", HOLD_SRC.format(11 + i),
                                                  "-H", str(args.hold_s)] + tb_common()
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, start_new_session=True))
    return procs


def wait_holds(procs, deadline):
    """Waits for each hold process's result line; all of its allocations must be ready."""
    ready = 0
    for p in procs:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
            raise RuntimeError("hold: no result line in time")
        res = compare.parse_line(p.stdout.readline())
        if res is None or res.get("failed") or res.get("ready") != res.get("n"):
            err = p.stderr.read()[-400:] if p.poll() is not None else ""
            raise RuntimeError(f"hold: not every allocation ready: {res} {err}")
        ready += int(res["ready"])
    return ready


def run_phase(args, server, held):
    """One fresh server, `held` allocations held, then the measured setup run."""
    tb = os.path.join(args.builddir, "bench", "turnbench")
    rundir = tempfile.mkdtemp(prefix=f"tgquota-{server}-", dir=args.rundir_base)
    srv, holds = None, []
    log = open(os.path.join(rundir, "server.log"), "w")
    try:
        srv = compare.start_server(SERVERS[server](args, rundir), rundir, log, server,
                                   compare.pin(args, args.srv_cpus))
        holds = start_holds(args, tb, held)
        got = wait_holds(holds, time.monotonic() + args.hold_s / 2)
        r = subprocess.run(compare.pin(args, args.gen_cpus) +
                           [tb, "-m", "setup", "-n", str(args.n), "-b", MEASURE_SRC,
                            "-P", str(srv.pid)] + tb_common(),
                           capture_output=True, text=True, timeout=60)
        res = compare.parse_line(r.stdout)
        if r.returncode != 0 or res is None:
            raise RuntimeError(f"turnbench rc={r.returncode}: {r.stderr.strip()[-400:]}")
        if any(p.poll() is not None for p in holds):
            raise RuntimeError("a hold process ended before the measurement did")
        res["held"] = got
        return res
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"# {server} held={held}: {e}", file=sys.stderr)
        return None
    finally:
        for p in holds:
            compare.stop(p)
        compare.stop(srv)
        log.close()
        if args.keep or (srv is not None and srv.returncode not in (0, -15, None)):
            print(f"# {server}: run directory kept: {rundir}", file=sys.stderr)
        else:
            shutil.rmtree(rundir, ignore_errors=True)


def cell(vals, fmt):
    if not vals:
        return "-"
    med = fmt.format(statistics.median(vals))
    return med if len(vals) == 1 else f"{med} ({fmt.format(min(vals))}–{fmt.format(max(vals))})"


def ratios(rounds, key):
    """held/empty of each round in which both phases gave the key."""
    return [h[key] / e[key] for e, h in rounds if e and h and e.get(key) and h.get(key)]


def table(args, results, servers):
    head = "| metric | " + " | ".join(servers) + " |"
    lines = [head, "|" + "---|" * (len(servers) + 1)]

    def row(label, fn):
        lines.append(f"| {label} | " + " | ".join(fn(s) for s in servers) + " |")

    def phase(s, i, key):
        return [r[i][key] for r in results[s] if r[i] and key in r[i]]

    row("allocations held (same user)", lambda s: f"{held_for(args, s):,}")
    row("setups/s, 0 held", lambda s: cell(phase(s, 0, "allocs_per_s"), "{:,.0f}"))
    row("setups/s, held", lambda s: cell(phase(s, 1, "allocs_per_s"), "{:,.0f}"))
    row("**setups/s held/empty**", lambda s: cell(ratios(results[s], "allocs_per_s"),
                                                   "{:.2f}"))
    row("server CPU-ms per setup, 0 held", lambda s: cell(phase(s, 0, "sched_ms_per_alloc"),
                                                          "{:.4f}"))
    row("server CPU-ms per setup, held", lambda s: cell(phase(s, 1, "sched_ms_per_alloc"),
                                                        "{:.4f}"))
    row("server CPU per setup held/empty", lambda s: cell(ratios(results[s],
                                                                 "sched_ms_per_alloc"),
                                                          "{:.2f}"))
    row("retransmissions, 0 held / held (sum)",
        lambda s: f"{sum(phase(s, 0, 'retrans')):.0f} / {sum(phase(s, 1, 'retrans')):.0f}")
    lines.append(f"\nmedian (min–max) of {args.reps} round(s); a ratio is taken per round "
                 f"(both phases back to back), then the median; {args.n:,} setups measured "
                 "per phase; CPU from schedstat (ns) over the server's processes.")
    return "\n".join(lines)


def check_limits(args, servers):
    """Exits when the descriptor or port budget cannot hold the test."""
    need = args.held + args.n
    per_worker = need * 11 // (10 * args.workers) + FD_SPARE
    if "turngate" in servers and per_worker > args.nofile:
        sys.exit(f"turngated: about {per_worker} descriptors per worker with {args.workers} "
                 f"workers, RLIMIT_NOFILE is {args.nofile}: raise --workers")
    if need * 11 // 10 > RELAY_MAX - RELAY_MIN + 1:
        sys.exit(f"{need} allocations do not fit relay ports {RELAY_MIN}-{RELAY_MAX}")
    if min(HOLD_CHUNK, args.n) + 64 > args.nofile:
        sys.exit(f"turnbench needs {min(HOLD_CHUNK, args.n) + 64} descriptors")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind(compare.SERVER)
        except OSError as e:
            sys.exit(f"UDP {compare.SERVER} is busy ({e.strerror}): stop what holds it")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="rounds (5)")
    ap.add_argument("--held", type=int, default=20000, help="allocations held (20000)")
    ap.add_argument("-n", type=int, default=2000, help="setups measured per phase (2000)")
    ap.add_argument("--quota", type=int, default=100000,
                    help="limits.user_quota / --user-quota (100000: refuses nothing)")
    ap.add_argument("--servers", default="turngate,coturn")
    ap.add_argument("--workers", type=int, default=2,
                    help="turngated workers and coturn relay threads (2: one turngated "
                         "worker cannot hold 22,000 relay sockets under a 20,000 "
                         "descriptor limit)")
    ap.add_argument("--builddir", default=os.getcwd(), help="build tree (turngated, bench/)")
    ap.add_argument("--srv-cpus", default="0", help="taskset list for the server")
    ap.add_argument("--gen-cpus", default="1", help="taskset list for the generators")
    ap.add_argument("--nice", type=int, default=0, help="nice value for everything started")
    ap.add_argument("--raw", help="append every run's raw line to this file")
    ap.add_argument("--keep", action="store_true", help="keep run directories")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 2,000 held, 500 measured, 1 round")
    args = ap.parse_args()
    if args.quick:
        args.held, args.n, args.reps = 2000, 500, 1
    args.reps = max(1, min(args.reps, 20))
    args.workers = max(1, min(args.workers, 64))
    args.n = max(1, min(args.n, HOLD_CHUNK))
    args.held = max(0, min(args.held, 100000))
    args.hold_s = 120 if args.held <= 30000 else 300
    args.nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    args.rundir_base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    servers = [s for s in args.servers.split(",") if s]
    for s in servers:
        if s not in SERVERS:
            sys.exit(f"unknown server {s}")
    if "coturn" in servers and not shutil.which("turnserver"):
        sys.exit("turnserver (coturn) not found")
    for prog in ("turngated", "bench/turnbench"):
        if not os.access(os.path.join(args.builddir, prog), os.X_OK):
            sys.exit(f"{prog} not built in {args.builddir} (pass --builddir)")
    check_limits(args, servers)
    results = {s: [] for s in servers}
    raw = open(args.raw, "a") if args.raw else None
    t0 = time.monotonic()
    for rep in range(args.reps):
        for s in servers:
            # Empty first in odd rounds, held first in even ones: drift spreads over both.
            order = (0, 1) if rep % 2 == 0 else (1, 0)
            pair = [None, None]
            for i in order:
                held = 0 if i == 0 else held_for(args, s)
                pair[i] = run_phase(args, s, held)
                if pair[i] is None:
                    continue
                line = " ".join(f"{k}={v}" for k, v in pair[i].items())
                print(f"# {s} held={held} rep{rep + 1}: {line}", file=sys.stderr, flush=True)
                if raw:
                    raw.write(f"server={s} test=quota-scale rep={rep + 1} {line}\n")
            results[s].append(pair)
    if raw:
        raw.close()
    print(f"quota-scale ({time.monotonic() - t0:.0f} s): turngated limits.user_quota "
          f"{args.quota}, limits.max_allocations {table_size(args)}, workers {args.workers}, "
          "other limits default (reflection protection on); coturn --user-quota "
          f"{args.quota}, total-quota unset (unlimited), relay threads {args.workers}; "
          f"RLIMIT_NOFILE {args.nofile}")
    if "coturn" in servers and held_for(args, "coturn") < args.held:
        print(f"coturn holds {held_for(args, 'coturn'):,}, not {args.held:,}: one process, one "
              f"descriptor per allocation, {args.n:,} measured on top, RLIMIT_NOFILE "
              f"{args.nofile}")
    print(table(args, results, servers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
