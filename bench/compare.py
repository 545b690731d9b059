#!/usr/bin/python3
"""compare.py: runs turngated and coturn on the same TURN load, alternating, and prints one table.

Every run starts the server fresh (pinned to core 0) and a fresh echo peer, runs turnbench
(pinned with the echo peer to core 1), and stops both by PID. turnbench samples the server's
CPU (utime+stime of the master and all its descendants) and memory (Pss summed over them, so
a shared-memory segment mapped by several processes is counted once; VmRSS sum also kept) at
the exact edges of the measured window, and the whole machine's CPU (/proc/stat, all CPUs,
softirq included) over the same window. Loopback by default; --netns runs the same tests
across three network namespaces joined by veth pairs (bench/topology.py; root). Every wait
is bounded.

    bench/compare.py [--quick] [--reps N] [--tests flat172,flat1200,rate,setup,mem]
                     [--tests flat172,sym172,flat1200,sym1200 --servers turngate,base,coturn
                      --base DIR]   (issue 22: symmetric ICE and the short circuit)
                     [--mask ADDR|none]
                     [--builddir DIR] [--auth static|secret] [--ceiling] [--raw FILE]
                     [--rate PPS] [--setup-n N] [--setup-conc N]
                     [--base DIR --servers turngate,base]   (A/B of two turngated builds)
                     [--netns] [--coturn PATH] [--servers turngate,turngate-offload,coturn]
                     [--offload-engine TC|XDP]
                     [--srv-cpus LIST] [--gen-cpus LIST] [--echo-cpus LIST]

Servers: turngate (the YAML below), turngate-offload (the same plus admin.offload_engine: TC,
or XDP with --offload-engine XDP: issue 21's kernel fast path; with --netns and XDP the
veth ends facing the server get GRO on, which a veth needs to take redirected frames), coturn (--coturn PATH, Debian's turnserver by default), base
(another turngated build), turngate-records (the same as turngate plus session records to a
file and a local webhook sink: issue 40), turngate-coalesce (the same plus
limits.wake_coalesce_us: --coalesce-us, 100 by default: wake-up coalescing, issue 39), and
with --ceiling the direct path (no relay). With
turngate-offload the targets of issue 21 are printed as PASS/FAIL lines under the table.

Tests flat172/flat1200 relay between 100 allocations and the echo peer; sym172/sym1200 pair
the allocations with each other (symmetric ICE: each is the other's peer, at the relayed
address the server announced), so every delivered packet crosses two allocations: turngated
short-circuits them (worker/shortcut.c), a build from before the short circuit (base:
bench/build_base.sh) and coturn send them out of one relay socket into the other. For these
tests turngated's listener announces relay_address_mask (--mask; 127.0.0.9 on loopback,
10.78.1.9 with --netns, addresses nothing holds) and its cluster lists its relay address and
the mask. With a sym test the targets of issue 22 are printed under the table.

Tests tcp172/tcp1200 run the flat load with TURN over TCP between client and server (one TCP
connection per allocation; the relay and the echo peer stay UDP; turnbench -m tcp), and
tcprtt172 ten such allocations with one packet in flight each: the round trip unloaded. In
these tests turngated and stunnerd get a TURN-TCP listener on the UDP listener's address and
port (coturn listens on TCP anyway), and issue 39's target (turngated's TCP round trip not
above stunnerd's, p50 and p99) is printed under the table:

    bench/compare.py --tests tcprtt172,tcp172 --servers turngate,stunnerd,stunnerd-default,coturn
"""
import argparse
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import compare_report  # noqa: E402  (table, notes, targets)
from harness_admin import binding_request, parse  # noqa: E402  (the STUN encoding)
import topology  # noqa: E402  (loopback or network namespaces)

SERVER = ("127.0.0.1", 13478)   # the loopback layout (quota_scale.py uses these too)
PEER = "127.0.0.1:13500"
LOOPBACK = topology.loopback(SERVER[1], int(PEER.split(":")[1]))
COTURN = "/usr/bin/turnserver"  # Debian's coturn 4.6.1
RELAY_MIN, RELAY_MAX = 40000, 59999
USER, PASS, REALM, SECRET = "bench", "bench", "bench", "bench-secret-0123456789"
# The allocations are spread over USERS users (turnbench -U: bench0..bench3, one password):
# with the default configuration one user may hold half of a listener (limits.user_quota
# unset, docs/configuration.md), and the hold test's 10,000 allocations fill the table.
USERS = 4
USER_NAMES = [f"{USER}{k}" for k in range(USERS)]

# The start of every bench turngated's configuration (quota_scale.py's too).
ADMIN_YAML = """version: v1
admin:
  name: bench
  loglevel: all:INFO
  healthcheck_endpoint: ""
  admin_socket: {rundir}/admin.sock
  workers: {workers}
  drain_timeout: 0
  relay_port_min: {rmin}
  relay_port_max: {rmax}"""
TURNGATE_YAML = ADMIN_YAML + """{offload}
# No limits section: turngated runs with its default limits, reflection protection on
# (every bench allocation comes from 127.0.0.1 and starts with a 401, paid by the address's
# credits once it has authenticated; docs/security.md). The output says so.
auth:
{auth}
listeners:
  - name: udp
    protocol: TURN-UDP
    address: {relay_ip}{bind}
    port: {port}
    routes: [echo]{mask}{tcp}
clusters:
  - name: echo
    type: STATIC
    endpoints: [{cluster}]
"""
# turngate-offload: the only difference from turngate (issue 21's kernel fast path; no
# offload_interfaces, so the daemon picks the interfaces that carry the listener's and the
# relay's addresses: the server's two veths with --netns, lo on loopback).
OFFLOAD_YAML = "\n  offload_engine: {engine}"


def topo_of(args):
    """The layout of this run (helpers shared with quota_scale.py default to loopback)."""
    return getattr(args, "topo", None) or LOOPBACK


def sym_test(test):
    """A symmetric test: the allocations are each other's peers."""
    return bool(test) and test.startswith("sym")


def tcp_test(test):
    """A TURN-over-TCP test (tcp172, tcp1200: the flat load; tcprtt172: ten allocations,
    one packet in flight each, the round trip unloaded): the servers get a TURN-TCP listener
    on the same address and port as the UDP one, in these tests only."""
    return bool(test) and test.startswith("tcp")


# The TURN-TCP listener of turngated and stunnerd in the tcp tests.
TCP_LISTENER = """
  - name: tcp
    protocol: TURN-TCP
    address: {address}{bind}
    port: {port}
    routes: [echo]"""


def mask_of(args):
    """The relay_address_mask of the symmetric tests: --mask, else the layout's; None for
    --mask none."""
    mask = getattr(args, "mask", None)
    if mask is None:
        return topo_of(args).mask
    return None if mask == "none" else mask


# turngate-records: the only difference from turngate (issue 40): session records to a file
# in the run directory and to a webhook, a local HTTP sink (records_sink) that answers 204.
RECORDS_YAML = ("\n  session_records:\n    file: {rundir}/sessions.jsonl"
                "\n    webhook: http://127.0.0.1:{port}/records")
_SINK = []


def sink_server(ctx=None):
    """A webhook receiver on 127.0.0.1 in a thread, answering 204 (over TLS with ctx, an
    ssl.SSLContext): (port, [records seen])."""
    import http.server
    import threading
    seen = [0]

    class Sink(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen[0] += body.count(b'"session_')
            self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    if ctx:
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1], seen


def records_sink():
    """The webhook's receiver (sink_server), started once per run: (port, [records
    seen])."""
    if not _SINK:
        _SINK.extend(sink_server())
    return _SINK[0], _SINK[1]


# turngate-coalesce: the only difference from turngate: wake-up coalescing (worker/wake.h).
COALESCE_YAML = "limits:\n  wake_coalesce_us: {us}\n"


def turngate_cmd(args, rundir, builddir=None, offload=False, test=None, records=False,
                 coalesce=False):
    if args.auth == "secret":
        auth = f"  type: ephemeral\n  realm: {REALM}\n  credentials:\n    secret: {SECRET}"
    else:
        auth = (f"  type: static\n  realm: {REALM}\n  credentials:\n"
                f"    username: {USER_NAMES[0]}\n    password: {PASS}\n  users:\n"
                + "".join(f"    - {{username: {u}, password: {PASS}}}\n"
                          for u in USER_NAMES[1:])).rstrip("\n")
    topo = topo_of(args)
    cluster, mask = list(topo.cluster), None
    if sym_test(test):
        # The allocations are each other's peers: the routes admit the relay address and
        # the mask (docs/relay.md, "Relay to relay").
        mask = mask_of(args)
        cluster += [a for a in (topo.relay_ip, mask) if a and a not in cluster]
    conf = os.path.join(rundir, "turngate.yaml")
    with open(conf, "w") as f:
        f.write(TURNGATE_YAML.format(
            rundir=rundir, rmin=RELAY_MIN, rmax=RELAY_MAX, auth=auth, port=topo.server[1],
            workers=args.workers, relay_ip=topo.relay_ip, cluster=", ".join(cluster),
            mask=f"\n    relay_address_mask: {mask}" if mask else "",
            bind=f"\n    bind_address: {topo.bind}" if topo.bind else "",
            tcp=TCP_LISTENER.format(
                address=topo.relay_ip, port=topo.server[1],
                bind=f"\n    bind_address: {topo.bind}" if topo.bind else "")
            if tcp_test(test) else "",
            offload=(OFFLOAD_YAML.format(engine=getattr(args, "offload_engine", "TC"))
                     if offload else "") +
            (RECORDS_YAML.format(rundir=rundir, port=records_sink()[0]) if records else "")))
        if coalesce:
            f.write(COALESCE_YAML.format(us=args.coalesce_us))
    return [os.path.join(builddir or args.builddir, "turngated"), "-c", conf]


def offload_cmd(args, rundir, test=None):
    return turngate_cmd(args, rundir, offload=True, test=test)


def records_cmd(args, rundir, test=None):
    return turngate_cmd(args, rundir, test=test, records=True)


def coalesce_cmd(args, rundir, test=None):
    return turngate_cmd(args, rundir, test=test, coalesce=True)


def base_cmd(args, rundir, test=None):
    # Another turngated build (--base DIR) on the same settings: A/B of a change.
    return turngate_cmd(args, rundir, args.base, test=test)


def coturn_cmd(args, rundir, test=None):
    # The coturn settings of docs/performance.md (research baseline): one relay thread.
    # Loopback peers are allowed only where the peer is on loopback: the echo peer, or in
    # the symmetric tests coturn's own relay address (its allocations are the peers).
    topo = topo_of(args)
    peer = topo.relay_ip if sym_test(test) else topo.peer
    cmd = [getattr(args, "coturn", None) or COTURN, "-n",
           f"--listening-ip={topo.server[0]}", f"--relay-ip={topo.relay_ip}",
           f"--listening-port={topo.server[1]}", f"--min-port={RELAY_MIN}",
           f"--max-port={RELAY_MAX}", f"--realm={REALM}", "--no-tls", "--no-dtls",
           "--no-cli", "--log-file=stdout", "--simple-log",
           f"--pidfile={rundir}/turnserver.pid", f"--userdb={rundir}/turndb",
           f"--relay-threads={args.workers}"]
    if peer.startswith("127."):
        cmd.insert(cmd.index("--no-cli") + 1, "--allow-loopback-peers")
    if args.auth == "secret":
        cmd += ["--use-auth-secret", f"--static-auth-secret={SECRET}"]
    else:
        cmd += ["--lt-cred-mech"] + [f"--user={u}:{PASS}" for u in USER_NAMES]
    return cmd


# stunnerd v1.2.1 (tests/stunner's Go module, scripts/build-stunner.sh): the same listener,
# cluster and auth in STUNner's own v1 schema. Relay ports are the kernel's (STUNner has no
# range); no health check, no metrics.
STUNNERD_YAML = """version: v1
admin:
  name: bench
  loglevel: all:WARN
  healthcheck_endpoint: ""
auth:
{auth}
listeners:
  - name: udp
    protocol: TURN-UDP
    address: {relay_ip}
    port: {port}
    routes: [echo]{tcp}
clusters:
  - name: echo
    type: STATIC
    protocol: UDP
    endpoints: [{cluster}]
"""


def stunnerd_cmd(args, rundir, test=None, threads=True):
    # --udp-thread-num = turngated's worker count (server stunnerd), or stunnerd's default
    # (server stunnerd-default: no flag, one UDP socket and read loop per listener).
    if args.auth == "secret":
        auth = f"  type: ephemeral\n  realm: {REALM}\n  credentials:\n    secret: {SECRET}"
    else:
        auth = (f"  type: static\n  realm: {REALM}\n  credentials:\n"
                f"    username: {USER}\n    password: {PASS}")
    topo = topo_of(args)
    cluster = list(topo.cluster)
    if sym_test(test):
        cluster += [topo.relay_ip] if topo.relay_ip not in cluster else []
    conf = os.path.join(rundir, "stunnerd.yaml")
    with open(conf, "w") as f:
        f.write(STUNNERD_YAML.format(
            auth=auth, relay_ip=topo.relay_ip, port=topo.server[1],
            cluster=", ".join('"%s"' % c for c in cluster),
            tcp=TCP_LISTENER.format(address=topo.relay_ip, port=topo.server[1], bind="")
            if tcp_test(test) else ""))
    cmd = [os.path.join(args.stunner_bin, "stunnerd"), "-c", "file://" + conf]
    if threads:
        cmd.append(f"--udp-thread-num={args.workers}")
    return cmd


def stunnerd_default_cmd(args, rundir, test=None):
    return stunnerd_cmd(args, rundir, test=test, threads=False)


SERVERS = {"turngate": turngate_cmd, "turngate-offload": offload_cmd, "coturn": coturn_cmd,
           "turngate-records": records_cmd, "turngate-coalesce": coalesce_cmd,
           "base": base_cmd, "stunnerd": stunnerd_cmd, "stunnerd-default": stunnerd_default_cmd}


def wait_stun(deadline_s=10.0, topo=None):
    """True once the server answers a STUN Binding request on the layout's server address
    (asked from the client's namespace)."""
    topo = topo or LOOPBACK
    req, tid = binding_request()
    end = time.monotonic() + deadline_s
    with topo.entered("client"):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with s:
        s.settimeout(0.1)
        while time.monotonic() < end:
            try:
                s.sendto(req, topo.server)
                data, _ = s.recvfrom(2048)
                p = parse(data)
                if p and p[2] == tid:
                    return True
            except OSError:
                time.sleep(0.05)
    return False


def wait_tcp(deadline_s=10.0, topo=None):
    """True once the server accepts a TCP connection on the layout's server address."""
    topo = topo or LOOPBACK
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with topo.entered("client"):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        with s:
            s.settimeout(0.5)
            try:
                s.connect(topo.server)
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


def start_server(cmd, rundir, log, name, prefix=(), topo=None):
    """Starts a server: cmd after prefix (pin's taskset, nice, namespace) in rundir, its
    output to log, in a process group of its own (stop() ends it). Returns its Popen once
    it answers STUN on the layout's server address; RuntimeError if it does not within
    10 s (then it is stopped, and the error has its exit status and the end of its log)."""
    srv = subprocess.Popen(list(prefix) + cmd, stdout=log, stderr=log, cwd=rundir,
                           start_new_session=True)
    if wait_stun(topo=topo):
        return srv
    stop(srv)
    log.flush()
    with open(log.name, errors="replace") as f:
        tail = f.read()[-400:]
    raise RuntimeError(f"{name} did not answer STUN on {(topo or LOOPBACK).server} (exit "
                       f"status {srv.returncode}); the end of its log:\n{tail}")


def pin(args, cpus, role=None):
    """taskset to the given cores ("" = unpinned), and optionally a nice value; with role
    (client, server, peer), in that role's network namespace of the layout."""
    cmd = ["taskset", "-c", cpus] if cpus else []
    if args.nice:
        cmd = ["nice", "-n", str(args.nice)] + cmd
    return (topo_of(args).prefix(role) if role else []) + cmd


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
    p = subprocess.Popen(pin(args, echo_cpus(args), "peer") +
                         [tb, "-m", "echo", "-p", topo_of(args).peer, "-d", str(lifetime)],
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = p.stdout.readline()
    if "echo ready" not in line:
        stop(p)
        raise RuntimeError("echo peer did not start")
    return p


def stop_echo(echo):
    """Stops the echo peer; the datagrams it echoed over its life (its last line), or None."""
    if echo is None:
        return None
    stop(echo)
    try:
        m = re.search(r"echo packets=(\d+)", echo.stdout.read())
    except (OSError, ValueError):
        return None
    return int(m.group(1)) if m else None


def delivered_legs(res, peer_packets):
    """CPU per delivered packet, counting each leg that arrived (issue 39's fairness check):
    turnbench's cpu_s_per_mpkt divides by 2 x the round trips that came back, so a packet
    the server relayed to the peer and then lost on the way back counts for nothing although
    the server did that work. The echo peer's count over its life (fresh for each run)
    against every packet turnbench sent (warm-up included) gives the share of the offered
    packets that reached the peer; in the window that is sent x share first legs, plus the
    received second legs."""
    if peer_packets is None or not res.get("sent_all") or "server_cpu_s" not in res:
        return {}
    share = min(1.0, peer_packets / res["sent_all"])
    legs = res["sent"] * share + res["received"]
    out = {"peer_share": share, "echo_packets": peer_packets}
    if legs:
        out["cpu_s_per_mleg"] = res["server_cpu_s"] * 1e6 / legs
    return out


def echo_cpus(args):
    """--echo-cpus, or the generator's cores (quota_scale.py's args have neither)."""
    e = getattr(args, "echo_cpus", None)
    return args.gen_cpus if e is None else e


def udp_rcvbuf_errors(topo=None):
    """UDP RcvbufErrors (datagrams dropped on a full receive buffer) of the box, or summed
    over the layout's namespaces."""
    return (topo or LOOPBACK).udp_counter("RcvbufErrors")


def udp_bound(pid):
    """(address, port) of every IPv4 UDP socket in pid's network namespace."""
    out = []
    with open(f"/proc/{pid}/net/udp") as f:
        for line in list(f)[1:]:
            addr, port = line.split()[1].split(":")
            out.append((socket.inet_ntoa(int(addr, 16).to_bytes(4, sys.byteorder)),
                        int(port, 16)))
    return out


def check_listener(topo, pid, server):
    """The listener is bound to the layout's server address, not to the wildcard."""
    bound = udp_bound(pid)
    if topo.server not in bound or ("0.0.0.0", topo.server[1]) in bound:
        raise RuntimeError(f"{server} is not bound to {topo.server} alone: "
                           f"{sorted(b for b in bound if b[1] == topo.server[1])}")


def relay_sockets(topo, pid):
    """UDP sockets on the relay address in the relay port range (the namespace's alone
    with --netns; on loopback other programs' sockets there would count too)."""
    return sum(1 for a, p in udp_bound(pid)
               if a == topo.relay_ip and RELAY_MIN <= p <= RELAY_MAX)


def parse_line(out):
    for line in out.splitlines():
        if line.startswith("turnbench "):
            kv = dict(t.split("=", 1) for t in line.split()[1:] if "=" in t)
            return {k: (float(v) if v.replace(".", "", 1).lstrip("-").isdigit() else v)
                    for k, v in kv.items()}
    return None


def tb_args(args, test):
    p, topo = args.p, topo_of(args)
    common = ["-s", f"{topo.server[0]}:{topo.server[1]}", "-p", topo.peer, "-b", topo.client,
              "-u", USER, "-U", str(USERS)]
    common += ["-S", SECRET] if args.auth == "secret" else ["-k", PASS]
    if test.startswith("flat") or sym_test(test):
        mode, size = ("sym", test[3:]) if sym_test(test) else ("relay", test[4:])
        return common + ["-m", mode, "-n", str(compare_report.LOAD_N), "-W",
                         str(compare_report.LOAD_W), "-l", size,
                         "-w", str(p["warm"]), "-d", str(p["dur"])]
    if test.startswith("tcprtt"):
        return common + ["-m", "tcp", "-n", str(compare_report.RTT_N), "-W",
                         str(compare_report.RTT_N), "-l", test[6:],
                         "-w", str(p["warm"]), "-d", str(p["dur"])]
    if tcp_test(test):
        return common + ["-m", "tcp", "-n", str(compare_report.LOAD_N), "-W",
                         str(compare_report.LOAD_W), "-l", test[3:],
                         "-w", str(p["warm"]), "-d", str(p["dur"])]
    if test == "rate":
        return common + ["-m", "rate", "-n", str(p["rate_n"]), "-r", str(p["rate"]),
                         "-l", "172", "-w", str(p["warm"]), "-d", str(p["dur"])]
    if test == "setup":
        return common + ["-m", "setup", "-n", str(p["setup_n"]), "-c",
                         str(p.get("setup_conc", 64))]
    if test == "mem":
        return common + ["-m", "hold", "-n", str(p["mem_n"]), "-c", "64", "-T", "2", "-H", "0"]
    raise ValueError(test)


def run_one(args, server, test):
    """One fresh server + echo + turnbench run; returns the parsed result dict or None."""
    tb = os.path.join(args.builddir, "bench", "turnbench")
    topo = topo_of(args)
    rundir = tempfile.mkdtemp(prefix=f"tgbench-{server}-")
    srv = echo = None
    capped = []
    log = open(os.path.join(rundir, "server.log"), "w")
    try:
        if server == "direct":
            if not test.startswith("flat"):
                return None
            targs = ["-m", "direct", "-p", topo.peer, "-b", topo.client, "-n",
                     str(compare_report.LOAD_N), "-W", str(compare_report.LOAD_W), "-l",
                     test[4:], "-w", str(args.p["warm"]), "-d", str(args.p["dur"])]
        else:
            cmd = SERVERS[server](args, rundir, test=test)
            srv = start_server(cmd, rundir, log, server, pin(args, args.srv_cpus, "server"),
                               topo)
            if tcp_test(test) and not wait_tcp(topo=topo):
                raise RuntimeError(f"{server} accepts no TCP connection on {topo.server}")
            if not server.startswith("stunnerd"):   # stunnerd binds [::]:PORT whatever
                check_listener(topo, srv.pid, server)  # the listener's address says
            if args.worker_quota and server.startswith("turngate"):
                capped = cap_workers(srv.pid, args.workers, args.worker_quota)
            targs = tb_args(args, test) + ["-P", str(srv.pid)]
            if server.startswith("stunnerd") and "-U" in targs:
                # STUNner's static auth has one user (and no user quota): no -U, user "bench"
                i = targs.index("-U")
                del targs[i:i + 2]
        if not sym_test(test):      # in sym the clients echo each other
            echo = start_echo(args, tb, 600)
            targs += ["-E", str(echo.pid)]
        drops = udp_rcvbuf_errors(topo)
        r = subprocess.run(pin(args, args.gen_cpus, "client") + [tb] + targs,
                           capture_output=True, text=True, timeout=args.p["run_timeout"])
        res = parse_line(r.stdout)
        peer_packets = stop_echo(echo)
        echo = None
        if res is not None:
            res["rcvbuf_errors"] = udp_rcvbuf_errors(topo) - drops
            res.update(delivered_legs(res, peer_packets))
            if srv is not None and topo.ns:
                res["relay_sockets"] = relay_sockets(topo, srv.pid)
            if sym_test(test) and server.startswith("turngate"):
                res.update(short_circuit_share(server_stats(args, rundir)))
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
        # stunnerd's graceful shutdown waits for every allocation to end: SIGKILL after 1 s
        stunnerd = server.startswith("stunnerd")
        stop(srv, grace=1.0 if stunnerd else 5.0)
        for d in capped:
            try:
                os.rmdir(d)
            except OSError:
                pass
        log.close()
        if server.startswith("turngate"):
            offload_notes(args, server, rundir)
        if srv is not None and srv.returncode not in (0, -signal.SIGTERM, None) \
                and not (stunnerd and srv.returncode == -signal.SIGKILL) and not args.keep:
            print(f"# {server} exit status {srv.returncode}, log kept in {rundir}",
                  file=sys.stderr)
        elif not args.keep:
            shutil.rmtree(rundir, ignore_errors=True)


def server_stats(args, rundir):
    """turngated's counters summed over its workers (`turngatectl --json stats` of this
    build tree, on the YAML's admin socket), or None."""
    try:
        r = subprocess.run([os.path.join(args.builddir, "turngatectl"), "-s",
                            os.path.join(rundir, "admin.sock"), "--json", "stats"],
                           capture_output=True, text=True, timeout=10)
        return json.loads(r.stdout) if r.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def short_circuit_share(stats):
    """From turngated's stats after a symmetric run: datagrams from a client towards a peer
    (peer_pkts_out, which counts a short-circuited one as if it had left a relay socket)
    and how many of them took the short circuit (none in a build from before it)."""
    ctr = (stats or {}).get("counters", {})
    if not ctr.get("peer_pkts_out"):
        return {}
    return {"short_circuit": ctr.get("short_circuit", 0), "peer_pkts_out": ctr["peer_pkts_out"],
            "short_circuit_frac": ctr.get("short_circuit", 0) / ctr["peer_pkts_out"]}


OFFLOAD_RE = re.compile(r"offload|\bbpf\b|\bxdp\b|\btc\b", re.IGNORECASE)


def offload_notes(args, server, rundir):
    """Keeps what the daemon's log said about the offload engine (whether the programs
    loaded, and where), so the output shows whether the kernel relayed at all."""
    notes = args.notes.setdefault(server, []) if hasattr(args, "notes") else []
    try:
        with open(os.path.join(rundir, "server.log"), errors="replace") as f:
            for line in f:
                # The run directory's name holds the server's: it must not match.
                line = re.sub(r"^\d{4}-\d\d-\d\dT\S+\s+", "",
                              line.strip().replace(rundir, "RUNDIR"))
                line = re.sub(r"\[\d+\]", "", line)      # PIDs differ from run to run
                if OFFLOAD_RE.search(line) and line not in notes and len(notes) < 8:
                    notes.append(line[:300])
    except OSError:
        pass


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
    ap.add_argument("--setup-n", type=int, default=None, metavar="N",
                    help="the setup test's allocations (2000; 500 with --quick)")
    ap.add_argument("--setup-conc", type=int, default=None, metavar="N",
                    help="the setup test's transactions in flight (64)")
    ap.add_argument("--rate", type=int, default=None, metavar="PPS",
                    help="the rate test's offered packets/s towards the peer (20000): lower "
                         "it to compare CPU per packet where no server drops any")
    ap.add_argument("--keep", action="store_true", help="keep run directories")
    ap.add_argument("--workers", type=int, default=1,
                    help="turngated workers, coturn relay threads and stunnerd's "
                         "--udp-thread-num (1)")
    ap.add_argument("--srv-cpus", default="0", help="taskset list for the server ('' = none)")
    ap.add_argument("--gen-cpus", default="1",
                    help="taskset list for the generator, and the echo peer ('' = none)")
    ap.add_argument("--echo-cpus", default=None,
                    help="taskset list for the echo peer (default: --gen-cpus)")
    ap.add_argument("--worker-quota", type=int, default=0, metavar="PCT",
                    help="turngated only: each worker in its own cpu cgroup capped at PCT %% "
                         "of a core (root, cgroup v1), to show worker scaling on 2 cores")
    ap.add_argument("--nice", type=int, default=0,
                    help="nice value for server, generator and echo (e.g. -10 on a shared box)")
    ap.add_argument("--coturn", default=COTURN,
                    help=f"the turnserver binary of server coturn ({COTURN})")
    ap.add_argument("--ports", default=None, metavar="SERVER,PEER",
                    help="loopback ports of the server and the echo peer (13478,13500), "
                         "to run beside another benchmark")
    ap.add_argument("--stunner-bin", default=None, metavar="DIR",
                    help="where stunnerd v1.2.1 is for servers stunnerd and stunnerd-default "
                         "(default: what scripts/build-stunner.sh builds)")
    ap.add_argument("--netns", action="store_true",
                    help="client, server and echo peer in three network namespaces joined by "
                         "veth pairs (root; bench/topology.py), instead of loopback")
    ap.add_argument("--rps", action="store_true",
                    help="with --netns: each namespace's veth ends hand what they receive to "
                         "its own cores (RPS: the server's to --srv-cpus, the client's to "
                         "--gen-cpus, the peer's to --echo-cpus), as separate machines' NICs "
                         "would; without it a veth receive runs in the sender's softirq")
    ap.add_argument("--mask", default=None, metavar="ADDR|none",
                    help="relay_address_mask of turngated's listener in the sym tests "
                         "(127.0.0.9 on loopback, 10.78.1.9 with --netns; none: unmasked, the "
                         "allocations announce the listener's address)")
    ap.add_argument("--coalesce-us", type=int, default=100, metavar="US",
                    help="server turngate-coalesce's limits.wake_coalesce_us (100)")
    ap.add_argument("--offload-engine", choices=["TC", "XDP"], default="TC",
                    help="turngate-offload's admin.offload_engine (XDP: native on the veths "
                         "with --netns, whose far ends then get GRO on)")
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
    if args.rate:
        args.p["rate"] = args.rate
    if args.setup_n:
        args.p["setup_n"] = args.setup_n
    if args.setup_conc:
        args.p["setup_conc"] = args.setup_conc
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
    if "coturn" in servers:
        if not shutil.which(args.coturn):
            sys.exit(f"{args.coturn} (coturn's turnserver) not found: pass --coturn PATH")
        args.coturn = os.path.abspath(shutil.which(args.coturn))   # servers run in rundir
        args.coturn_version = coturn_version(args.coturn)
    if any(x.startswith("stunnerd") for x in servers):
        if not args.stunner_bin:
            r = subprocess.run(["sh", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", "scripts", "build-stunner.sh")],
                               stdout=subprocess.PIPE, text=True)
            if r.returncode != 0:
                sys.exit("stunnerd: scripts/build-stunner.sh failed (pass --stunner-bin DIR)")
            args.stunner_bin = r.stdout.strip()
        if not os.access(os.path.join(args.stunner_bin, "stunnerd"), os.X_OK):
            sys.exit(f"no stunnerd in {args.stunner_bin}")
    if args.mask not in (None, "none"):
        try:
            ipaddress.IPv4Address(args.mask)
        except ValueError:
            sys.exit(f"--mask {args.mask}: not an IPv4 address")
    tb = os.path.join(args.builddir, "bench", "turnbench")
    if not os.access(tb, os.X_OK):
        sys.exit(f"{tb} not built (run make in the build tree or pass --builddir)")
    if args.rps and not args.netns:
        sys.exit("--rps needs --netns (loopback has no per-interface receive queue to steer)")
    if args.netns:
        if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nsenter"):
            sys.exit("--netns needs root, ip (iproute2) and nsenter (util-linux)")
    else:
        server, peer = SERVER, (PEER.split(":")[0], int(PEER.split(":")[1]))
        if args.ports:
            try:
                sp, pp = (int(x) for x in args.ports.split(","))
            except ValueError:
                sys.exit(f"--ports {args.ports}: SERVER,PEER")
            server, peer = (SERVER[0], sp), (peer[0], pp)
        for host, port in (server, peer):
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                try:
                    probe.bind((host, port))
                except OSError as e:
                    sys.exit(f"UDP {host}:{port} is busy ({e.strerror}): stop what holds it")
    # SIGTERM and SIGHUP unwind like ^C, so the servers stop and the namespaces go.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))
    args.notes = {}
    args.topo = LOOPBACK
    if args.ports and not args.netns:
        args.topo = topology.loopback(server[1], peer[1])
    try:
        if args.netns:
            try:
                rps = dict(server=args.srv_cpus, client=args.gen_cpus,
                           peer=echo_cpus(args)) if args.rps else None
                args.topo = topology.netns(SERVER[1], int(PEER.split(":")[1]),
                                           gro=args.offload_engine == "XDP", rps=rps)
            except RuntimeError as e:
                sys.exit(str(e))
        args.sym_mask = mask_of(args)
        return run_all(args, servers, reps)
    finally:
        args.topo.close()


def coturn_version(path):
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        return "version " + (r.stdout.strip().splitlines() or ["?"])[0]
    except (OSError, subprocess.TimeoutExpired):
        return "version unknown"


def run_all(args, servers, reps):
    order = servers + (["direct"] if args.ceiling else [])
    tests = [t for t in args.tests.split(",") if t]
    results = {}
    raw = open(args.raw, "a") if args.raw else None
    for test in tests:
        for rep in range(reps):
            for s in order:         # A B A B ...: noise spreads over all servers
                res = run_one(args, s, test)
                if res is None:
                    continue
                if "gen_cpu_s" in res and "duration" in res and res["duration"]:
                    res["gen_cpu_pct"] = 100 * res["gen_cpu_s"] / res["duration"]
                if res.get("pss_held_kib") and res.get("ready"):
                    res["pss_total_per_alloc_b"] = res["pss_held_kib"] * 1024 / res["ready"]
                if "machine_softirq_s" in res and res.get("relayed_pps"):
                    res["softirq_s_per_mpkt"] = (res["machine_softirq_s"] * 1e6 /
                                                 (res["relayed_pps"] * res["duration"]))
                results.setdefault((s, test), []).append(res)
                line = " ".join(f"{k}={v}" for k, v in res.items())
                print(f"# {s} {test} rep{rep + 1}: {line}", file=sys.stderr, flush=True)
                if raw:
                    raw.write(f"server={s} test={test} rep={rep + 1} {line}\n")
    if raw:
        raw.close()
    print("turngated: default limits (limits.* unset; reflection protection on); set here: "
          f"workers {args.workers}, relay ports {RELAY_MIN}-{RELAY_MAX}, loglevel all:INFO")
    if "turngate-coalesce" in order:
        print(f"turngate-coalesce: the same plus limits.wake_coalesce_us: {args.coalesce_us} "
              "(not the default)")
    print("\n".join(compare_report.notes(args, results, order)))
    print(compare_report.table(results, order, reps))
    for issue, wanted, lines in ((21, "turngate-offload" in order, compare_report.targets),
                                 (22, any(sym_test(t) for t in tests),
                                  compare_report.sym_targets),
                                 (39, any(tcp_test(t) for t in tests),
                                  compare_report.tcp_targets)):
        if wanted:
            print(f"\nissue {issue} targets (medians of {reps} run(s)"
                  f"{'; one run per cell is a smoke test, not a verdict' if reps == 1 else ''}"
                  "):")
            print("\n".join(lines(results, tests)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
