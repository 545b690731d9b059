#!/usr/bin/python3
"""scale.py: hold N UDP allocations from many client addresses across several relay
addresses and measure what grows with the table (issue 42).

For each count (--counts, default 10000,60000) and server (--servers turngate,coturn), on
a freshly started server:

  setup      N allocations from the fleet of tests/integration/scale_clients.py (16
             sockets, each sending from many 127.a.b.c addresses, 500 users), offered at
             a fixed pace (--pace, 4,000 setups/s: open loop, below what the fleet and
             server reach together here) and measured in 20 chunks of 5 % of N, each in
             --subchunks parts: the achieved rate and per setup the server's CPU
             (schedstat of master and workers, user and kernel, ns clock), its run-queue
             wait and time slices, the fleet's own CPU, the machine's stolen time and
             the CPU that other programs took meanwhile, the CPU time of a fixed piece of work (what a CPU µs is worth at that moment)
             and the load average. The figures at 0 %, 50 % and 95 % (the chunk from
             90 % that reaches 95 %, as before) are the median and range of the parts
             (levels) and the whole chunk (phases, as the first runs reported them). The
             first runs (--pace 0) let the fleet run as fast as answers came back and
             measured one chunk a level: the fleet's speed, and with it the requests
             the server found per wakeup and its CPU per setup, then followed the load
             of the shared machine (bench/results/2026-12-06-setupflat.md); the table
             is the port space (auto);
  memory     PSS and RSS of every process of the server (smaps_rollup) idle and with N
             held, per allocation, with the kernel's memory for the sockets beside it
             (slab objects of UDP sockets, inodes, files, dentries, epoll entries, and
             sockstat's UDP buffer pages; machine-wide);
  refresh    a Refresh of every held allocation: server CPU per Refresh, and what the
             refreshes of N allocations spread over their lifetime (a Refresh every 300 s
             and a CreatePermission every 240 s a client) would cost of one core;
  observe    (turngate) /metrics scrape, status, the ranked admin `top` (20 rows) and
             the whole-table one,
             `turngatectl top --once --interval 0.1` (two samples 0.1 s apart) and the
             first page of `turngatectl allocations`: wall time, median of 5 (3);
  take-over  (turngate) kill -9 of master and workers, start again: time to the status
             answer with all N taken over, and to a sample of 100 relaying again, with
             the timeline from the kill (kill_restart: the old processes' exit, the new
             master's take-over, forks, adoptions, the sample's first and last echo);
             --churn: before it, kill -9 of worker 0 (time until the sample relays
             again) and a live upgrade to the same binary (the command's time, and until
             the sample relays again).

Relay addresses 127.0.20.1.. (one per 62,500 allocations, ports 1024-63523: four hold
250,000, and the shared port pool books a port number on at most four), listeners on each
at port 64000+k, the fleet's sockets on 64600-64615 (wildcard), metrics on
127.0.0.1:64500; run directory and state file under /dev/shm (a tmpfs, as /run). This
run happens in a network namespace of its own (as root; --no-netns: not), so that no other
program's socket holds a relay port (a wildcard socket on a port of the range makes the
relay bind fail there: on this shared machine others held 5,900 such ports). This
machine's RLIMIT_NOFILE hard limit (20,000, not raisable) caps a process at about 19,800
relay sockets: turngated gets a worker per 15,000 allocations (at least 2), coturn (one
process, one descriptor per allocation) runs only where N fits. Every wait is bounded.

    bench/scale.py [--counts 10000,60000] [--servers turngate,coturn] [--builddir DIR]
                   [--raw FILE] [--keep] [--expiry S] [--churn] [--takeover]
                   [--upgrades K] [--pace R] [--subchunks K] [--setup-only]
                   [--udp-hash SLOTS]

--setup-only runs only the setup and the memory figures. --udp-hash SLOTS gives the
network namespace a UDP hash table of its own (net.ipv4.udp_child_hash_entries, set for
the unshare and put back at once): the kernel looks a datagram's socket up in a chain of
the (address, port) hash, which holds N / slots relay sockets on average (16,384 slots
here, shared by the machine: 15 at 250,000).

--takeover runs only the setup, the memory figures and the take-over (with --churn the
respawn and the live upgrade too), for profiling the restart path
(bench/results/2026-12-06-takeover.md). --upgrades K (with --takeover) runs K live upgrades
in a row instead of the kill -9 take-over, each with the relaying gap read from the
daemon's log (upgrade_once; bench/results/2026-12-06-takeover-handover.md).

--expiry S instead holds N allocations of lifetime S (limits.allocation_lifetime: S) that
are never refreshed, and measures when the table is empty again and the workers' busiest
0.1 s and 1 s of CPU meanwhile (bulk expiry).
"""
import argparse
import hashlib
import math
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import scale_clients  # noqa: E402
import harness_admin as ts  # noqa: E402
from harness_admin import CLONE_NEWNET, echo_peer, unshare  # noqa: E402

RELAY_MIN, PER_RELAY = 1024, 62500
RELAY_MAX = RELAY_MIN + PER_RELAY - 1
LISTEN_PORT, METRICS_PORT, CLIENT_PORT = 64000, 64500, 64600
N_SOCKS = 16
PER_WORKER = 15000
FD_HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

TURNGATE_YAML = """version: v1
admin:
  name: scale
  loglevel: all:INFO
  healthcheck_endpoint: ""
  metrics_endpoint: "http://127.0.0.1:{mport}/metrics"
  admin_socket: {rundir}/admin.sock
  state_dir: {rundir}
  workers: {workers}
  drain_timeout: 0
  relay_port_min: {rmin}
  relay_port_max: {rmax}
{limits}auth:
  type: ephemeral
  realm: {realm}
  credentials:
    secret: {secret}
clusters:
  - name: loopback
    type: STATIC
    endpoints: [127.0.0.0/8]
listeners:
"""


def relays_for(n):
    return ["127.0.20.%d" % (k + 1) for k in range(max(1, math.ceil(n / PER_RELAY)))]


def pids_of(root):
    """root and its descendants."""
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open("/proc/%d/task/%d/children" % (p, p)) as f:
                todo += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def sched(pids):
    """[CPU s, run-queue wait s, time slices] of pids and their threads (schedstat: ns,
    not clock ticks)."""
    t = [0, 0, 0]
    for p in pids:
        try:
            for tid in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/schedstat" % (p, tid)) as f:
                    for k, v in enumerate(f.read().split()[:3]):
                        t[k] += int(v)
        except OSError:
            pass
    return [t[0] / 1e9, t[1] / 1e9, t[2]]


def cpu_s(pids):
    """CPU seconds of pids and their threads (schedstat)."""
    return sched(pids)[0]


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def machine_s():
    """[busy, stolen] CPU seconds of the machine so far (/proc/stat, all CPUs; busy: all
    but idle, iowait and steal)."""
    with open("/proc/stat") as f:
        w = [int(x) for x in f.readline().split()[1:9]]
    hz = os.sysconf("SC_CLK_TCK")
    return [(sum(w) - w[3] - w[4] - w[7]) / hz, w[7] / hz]


def mem_kb(pids):
    pss = rss = 0
    for p in pids:
        try:
            with open("/proc/%d/smaps_rollup" % p) as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1])
        except OSError:
            pass
    return pss, rss


SLABS = ("UDP", "UDPv6", "sock_inode_cache", "filp", "dentry", "eventpoll_epi")


def kernel_kb():
    """The kernel's memory for sockets: the slab caches a UDP socket takes objects of
    (its sock, inode, file, dentry, epoll entry), active objects times their size, plus
    /proc/net/sockstat's UDP buffer pages. Machine-wide: other programs' changes show."""
    kb = 0
    with open("/proc/slabinfo") as f:
        for line in f:
            w = line.split()
            if w and w[0] in SLABS:
                kb += int(w[1]) * int(w[3]) / 1024
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("UDP:"):
                w = line.split()
                kb += int(w[w.index("mem") + 1]) * 4
    return kb


def timed(fn, reps=5):
    ts_ = []
    for _ in range(reps):
        t0 = time.monotonic()
        fn()
        ts_.append(time.monotonic() - t0)
    return statistics.median(ts_) * 1000, max(ts_) * 1000


class Server:
    def __init__(self, kind, n, args, rundir):
        self.kind, self.n, self.args, self.rundir = kind, n, args, rundir
        self.relays = relays_for(n)
        self.workers = args.workers or max(2, math.ceil(n / PER_WORKER))
        self.proc = None
        self.master = None     # the master after a live upgrade
        self.log = open(os.path.join(rundir, "%s.log" % kind), "ab")

    def cmd(self):
        if self.kind == "turngate":
            text = TURNGATE_YAML.format(mport=METRICS_PORT, rundir=self.rundir,
                                        workers=self.workers, rmin=RELAY_MIN, rmax=RELAY_MAX,
                                        limits=("limits:\n  allocation_lifetime: %d\n"
                                                % self.args.expiry if self.args.expiry else ""),
                                        realm=ts.REALM, secret=ts.SECRET)
            for k, ip in enumerate(self.relays):
                text += ("  - {name: udp%d, protocol: TURN-UDP, address: %s, port: %d, "
                         "routes: [loopback]}\n" % (k, ip, LISTEN_PORT + k))
            conf = os.path.join(self.rundir, "turngate.yaml")
            with open(conf, "w") as f:
                f.write(text)
            return [os.path.join(self.args.builddir, "turngated"), "-c", conf]
        cmd = ["turnserver", "-n", "--no-tls", "--no-dtls", "--no-cli", "--log-file=stdout",
               "--simple-log", "--allow-loopback-peers", "--realm=%s" % ts.REALM,
               "--use-auth-secret", "--static-auth-secret=%s" % ts.SECRET,
               "--min-port=%d" % RELAY_MIN, "--max-port=%d" % RELAY_MAX,
               "--relay-threads=%d" % 2, "--pidfile=%s/turnserver.pid" % self.rundir,
               "--userdb=%s/turndb" % self.rundir, "--listening-port=%d" % LISTEN_PORT]
        for ip in self.relays:
            cmd += ["--listening-ip=%s" % ip, "--relay-ip=%s" % ip]
        return cmd

    def servers(self):
        if self.kind == "turngate":
            return [(ip, LISTEN_PORT + k) for k, ip in enumerate(self.relays)]
        return [(ip, LISTEN_PORT) for ip in self.relays]

    def start(self):
        self.proc = subprocess.Popen(self.cmd(), stdout=self.log, stderr=self.log,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited: see %s" % (self.kind, self.log.name))
            if self.kind == "coturn" or os.path.exists(os.path.join(self.rundir,
                                                                   "admin.sock")):
                try:
                    if self.kind == "coturn" or self.admin("status")["workers"]["running"] \
                            == self.workers:
                        time.sleep(0.5 if self.kind == "coturn" else 0)
                        return
                except (OSError, ValueError, KeyError):
                    pass
            time.sleep(0.05)
        raise RuntimeError("%s did not start" % self.kind)

    def admin(self, cmd, **kw):
        import json
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(60)
        s.connect(os.path.join(self.rundir, "admin.sock"))
        s.sendall(json.dumps(dict(cmd=cmd, **kw)).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            c = s.recv(1 << 20)
            if not c:
                break
            buf += c
        s.close()
        return json.loads(buf)

    def ctl(self, *a):
        return subprocess.run([os.path.join(self.args.builddir, "turngatectl"), "-s",
                               os.path.join(self.rundir, "admin.sock")] + list(a),
                              capture_output=True, timeout=120)

    def pids(self):
        return pids_of(self.master or self.proc.pid)

    def kill(self):
        for p in reversed(self.pids()):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.master is None:
            self.proc.wait(timeout=30)
        else:          # a live upgrade's master is not our child
            deadline = time.monotonic() + 30
            while os.path.exists("/proc/%d" % self.master) and time.monotonic() < deadline:
                time.sleep(0.05)
            self.master = None

    def stop(self):
        if self.master is not None:
            os.kill(self.master, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while os.path.exists("/proc/%d" % self.master) and time.monotonic() < deadline:
                time.sleep(0.05)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def churn(srv, fleet, sample, peer, res):
    """kill -9 of worker 0: the time until the whole sample relays again (its share
    re-adopted by the respawned worker); then a live upgrade (turngatectl upgrade to the
    same binary): the time the command took and until the sample relays again."""
    w0 = srv.admin("workers")["workers"][0]["pid"]
    t0 = time.monotonic()
    os.kill(w0, signal.SIGKILL)
    time.sleep(0.02)
    got = fleet.probe(sample, peer, deadline=60, resend=0.02)
    res["respawn_relay_s"], res["relayed_after_respawn"] = time.monotonic() - t0, len(got)
    t0 = time.monotonic()
    r = srv.ctl("upgrade", "--timeout", "120")
    res["upgrade_cmd_s"] = time.monotonic() - t0
    if r.returncode != 0:
        res["upgrade_error"] = r.stderr.decode()[-300:]
        return
    got = fleet.probe(sample, peer, deadline=60, resend=0.02)
    res["upgrade_relay_s"], res["relayed_after_upgrade"] = time.monotonic() - t0, len(got)
    srv.master = int(r.stdout.split()[-1])
    srv.proc.wait(timeout=30)
    res["upgrade_allocations"] = srv.admin("status")["allocations"]


def kill_restart(srv, fleet, sample, peer, res):
    """kill -9 of master and workers, start again. takeover_s and takeover_relay_s are
    from the master's reaping (the start) to the status answer with all taken over and to
    the whole sample relaying, as before; kill_s is the kill and that reaping. The rest is
    from the kill: the last old process done exiting (old_exit_s, its 250,000 sockets
    closed by the kernel meanwhile), the new master's take-over line (taken_s), its last
    worker's fork (forked_s), the first and last adoption line (adopted_s), the last
    "... once its relay sockets are watched" line (watched_s), the sample's first and last
    echo (relay_first_s, relay_last_s), the adoption lines' sum of allocations "not
    rebindable" (lost: their ports were still held), of those that waited for their relay
    ports instead (port_waits; builds since 2026-12-07) and the last of their "came free"
    lines (came_free_s)."""
    import threading
    old = srv.pids()
    offset = os.path.getsize(srv.log.name)
    gone, stop, cpu = {}, [], {}

    def watch():
        end = time.monotonic() + 60
        while len(gone) < len(old) and time.monotonic() < end and not stop:
            for p in old:
                if p in gone:
                    continue
                c = cpu_s([p])     # 0 once reaped: the last reading stays
                if c > 0:
                    cpu[p] = c
                if not ts.alive(p):     # a zombie's files are released
                    gone[p] = time.monotonic()
            time.sleep(0.005)
    th = threading.Thread(target=watch)
    cpu0 = {p: cpu_s([p]) for p in old}
    th.start()
    tk, wall = time.monotonic(), time.time()
    srv.kill()
    t0 = time.monotonic()
    res["kill_s"] = t0 - tk
    try:
        srv.start()
        st = srv.admin("status")
        res["takeover_s"] = time.monotonic() - t0
        res["taken_over"] = st["state"]["taken_over"]
        when = {}
        got = fleet.probe(sample, peer, resend=0.02, when=when)
        res["takeover_relay_s"] = time.monotonic() - t0
        res["relayed_after"] = len(got)
        if when:
            res["relay_first_s"] = min(when.values()) - tk
            res["relay_last_s"] = max(when.values()) - tk
    finally:
        th.join(timeout=65)
        stop.append(1)
    if len(gone) == len(old):
        res["old_exit_s"] = max(gone.values()) - tk
    # their CPU from the kill to the last reading before they were done (a lower bound)
    res["old_exit_cpu_s"] = sum(cpu.get(p, cpu0[p]) - cpu0[p] for p in old)
    time.sleep(0.5)     # the last log lines
    taken, started = "allocations taken over from", "started (pid"
    adopted, watched = "predecessor's allocations:", "sockets are watched"
    wait, free = b" allocations wait for their relay ports", "their relay ports came free"
    t = log_times(srv.log.name, offset, [taken, started, adopted, watched, free])
    for key, pat, pick in (("taken_s", taken, min), ("forked_s", started, max),
                           ("adopted_first_s", adopted, min), ("adopted_s", adopted, max),
                           ("watched_s", watched, max), ("came_free_s", free, max)):
        if t[pat]:
            res[key] = pick(t[pat]) - wall
    lost = waits = 0
    with open(srv.log.name, "rb") as f:
        f.seek(offset)
        for line in f:
            if b"not rebindable" in line and adopted.encode() in line:
                lost += int(line.split(b" not rebindable")[0].split()[-1])
            if wait in line:
                waits += int(line.split(wait)[0].split()[-1])
    res["not_rebindable"], res["port_waits"] = lost, waits


def log_times(path, offset, pats):
    """{pattern: [seconds since the epoch of each line containing it]} of the daemon's log
    from byte offset on (lines start with an ISO time with microseconds, UTC)."""
    import datetime
    out = {p: [] for p in pats}
    with open(path, "rb") as f:
        f.seek(offset)
        for raw in f:
            line = raw.decode(errors="replace")
            for p in pats:
                if p in line:
                    when = line.split()[0].rstrip("Z")
                    try:
                        t = datetime.datetime.strptime(when, "%Y-%m-%dT%H:%M:%S.%f")
                    except ValueError:
                        continue
                    out[p].append(t.replace(tzinfo=datetime.timezone.utc).timestamp())
    return out


def upgrade_once(srv, fleet, sample, peer):
    """One live upgrade to the same binary: the command's time, the time until the whole
    sample relays again (both from the command's start: the new master's start before its
    "ready" runs while the old workers still relay), and from the daemon's log the gap:
    from the old master's "stopping the workers" (nothing relays from there) to the last
    new worker's "... once its relay sockets are watched" line (every worker polls its relay
    sockets again: libev registers them with epoll after the adoption's "predecessor's
    allocations" line, at the worker's next loop iteration; builds without that line end
    the gap at the adoption lines, and gap_adopt_s is always the gap to those), split at the
    old master's
    "workers stopped" (the old workers' exit), and after it at the new master's take-over
    line (copy_s: its copy of the table under the lock) and its last worker's fork
    (forks_s: from the take-over line)."""
    res = {}
    offset = os.path.getsize(srv.log.name)
    t0 = time.monotonic()
    r = srv.ctl("upgrade", "--timeout", "120")
    res["cmd_s"] = time.monotonic() - t0
    if r.returncode != 0:
        res["error"] = r.stderr.decode()[-300:]
        return res
    got = fleet.probe(sample, peer, deadline=60, resend=0.02)
    res["relay_s"], res["relayed"] = time.monotonic() - t0, len(got)
    old, srv.master = srv.master, int(r.stdout.split()[-1])
    if old is None:
        srv.proc.wait(timeout=30)
    else:
        deadline = time.monotonic() + 30
        while os.path.exists("/proc/%d" % old) and time.monotonic() < deadline:
            time.sleep(0.05)
    res["allocations"] = srv.admin("status")["allocations"]
    time.sleep(0.5)     # the last log lines
    stop, down, adopted, handed = ("stopping the workers", "upgrade: workers stopped",
                                   "predecessor's allocations:", "relay sockets handed over")
    taken, started = "allocations taken over from", "started (pid"
    watched = "sockets are watched"
    t = log_times(srv.log.name, offset, [stop, down, adopted, handed, taken, started, watched])
    if t[stop] and t[adopted]:
        end = max(t[watched]) if len(t[watched]) >= len(t[adopted]) else max(t[adopted])
        res["gap_s"] = end - t[stop][0]
        res["gap_adopt_s"] = max(t[adopted]) - t[stop][0]
        res["first_adopted_s"] = min(t[adopted]) - t[stop][0]
        if t[down]:
            res["old_exit_s"] = t[down][0] - t[stop][0]
            res["new_start_s"] = end - t[down][0]
            # ... split at the new master's take-over line (its copy of the table under
            # the lock) and its last worker's fork
            after = [x for x in t[taken] if x >= t[down][0]]
            forks = [x for x in t[started] if after and x >= after[0]]
            if after:
                res["copy_s"] = after[0] - t[down][0]
            if forks:
                res["forks_s"] = max(forks) - after[0]
    res["handed_lines"] = len(t[handed])
    return res


def refresh_all(fleet, todo):
    def first(i):
        a, key = fleet.authed(i, ts.REFRESH, [(ts.A_LIFETIME, b"\0\0\x02\x58")])
        return ts.build(ts.REFRESH, ts.REQUEST, os.urandom(12), a, key=key)

    def answer(i, p):
        if p[1] != ts.SUCCESS:
            fleet.errors[i] = ts.error_code(p[3])
        return None
    return fleet.run(todo, first, answer, 512, 300.0)


def expiry(n, args, out):
    """N allocations of lifetime --expiry s (limits.allocation_lifetime; a client cannot ask
    for less than it), never refreshed: when the table is empty again, measured from the
    last Allocate's answer, and the workers' CPU sampled every 0.1 s (the busiest 0.1 s
    and the busiest 1 s, in % of one core)."""
    rundir = tempfile.mkdtemp(prefix="tg-scale-", dir="/dev/shm")
    os.chmod(rundir, 0o700)
    srv = Server("turngate", n, args, rundir)
    res = {"server": "turngate", "n": n, "lifetime": args.expiry, "workers": srv.workers}
    fleet = None
    try:
        srv.start()
        fleet = scale_clients.Fleet(n, [CLIENT_PORT + k for k in range(N_SOCKS)],
                                    srv.servers(), users=500)
        fleet.allocate(list(range(n)), deadline=600)
        t_end = time.monotonic()
        res["ok"] = sum(1 for r in fleet.relayed if r is not None)
        samples = []
        deadline = t_end + args.expiry + 30
        while time.monotonic() < deadline:
            samples.append((time.monotonic(), cpu_s(srv.pids()),
                            srv.admin("status")["allocations"]))
            if samples[-1][2] == 0:
                break
            time.sleep(0.1)
        zero = next((t for t, _, a in samples if a == 0), None)
        res["empty_after_s"] = None if zero is None else zero - t_end
        busiest = [(b[1] - a[1]) / (b[0] - a[0]) * 100 for a, b in zip(samples, samples[1:])]
        win = []
        for i, a in enumerate(samples):
            j = next((k for k in range(i, len(samples)) if samples[k][0] - a[0] >= 1.0), None)
            if j is not None:
                win.append((samples[j][1] - a[1]) / (samples[j][0] - a[0]) * 100)
        res.update(busiest_100ms_pct=max(busiest or [0]), busiest_1s_pct=max(win or [0]),
                   cpu_total_s=samples[-1][1] - samples[0][1])
    except Exception as e:  # report and go on
        res["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        if fleet is not None:
            fleet.close()
        srv.stop()
        if not args.keep:
            shutil.rmtree(rundir, ignore_errors=True)
    print(res, file=out, flush=True)
    return res


PROBE = os.urandom(1 << 20)


def fixed_work_us():
    """This thread's CPU µs for a fixed piece of work (SHA-256 of 1 MiB, 4 times, the
    least): what a CPU µs is worth just now on the shared machine (no cycle counters
    in this VM)."""
    best = None
    for _ in range(4):
        t0 = time.thread_time_ns()
        hashlib.sha256(PROBE).digest()
        t = (time.thread_time_ns() - t0) / 1000
        best = t if best is None else min(best, t)
    return round(best, 1)


class SetupDone(Exception):
    """--setup-only: the rest of a run is skipped."""


LEVELS = (0, 50, 90, 95)     # the chunks of 5 % starting there; 90: "at 95 %" (to 95 %)


def setup_profile(srv, fleet, n, args):
    """Sets up all n allocations in 20 chunks of 5 % of n, each in --subchunks equal
    parts, every one measured: the fleet's achieved rate, and per setup the server's CPU
    (schedstat of master and workers: user and kernel, ns clock), its run-queue wait and
    time slices, and the fleet's own CPU, with the machine's stolen time, the CPU that
    neither used (others_pct, % of one core; clock ticks, so ±1 tick), load average,
    a fixed-work probe and t (CLOCK_MONOTONIC at the part's start and end, for perf -k).
    The fleet offers a fixed --pace (open loop) so that every chunk gets the same work per
    wakeup; --pace 0 is the closed loop of the first runs. Returns phases (as before: the
    whole chunk at 0, 50 and 90 % (the one that reaches 95 %): pct, setups/s, CPU µs a
    setup), levels ({pct: [median, min, max] of the parts' CPU µs a setup}), chunks (one
    row per part) and the load averages at the start and end."""
    chunk = max(500, n // 20)
    parts = max(1, args.subchunks)
    rate = args.pace or None
    rows, done = [], 0
    me = [os.getpid()]
    load0 = loadavg()
    while done < n:
        pct = round(100 * done / n)
        end_chunk = min(n, done + chunk)
        for k in range(parts):
            lo = done + (end_chunk - done) * k // parts
            hi = done + (end_chunk - done) * (k + 1) // parts
            if hi <= lo:
                continue
            pids = srv.pids()
            probe = fixed_work_us()
            s0, f0, st0, t0 = sched(pids), sched(me), machine_s(), time.monotonic()
            fleet.allocate(list(range(lo, hi)), deadline=600, rate=rate)
            t1, s1, f1, st1 = time.monotonic(), sched(pids), sched(me), machine_s()
            m = hi - lo
            rows.append(dict(pct=pct, part=k, n=m, t=[round(t0, 3), round(t1, 3)],
                             rate=round(m / (t1 - t0)),
                             cpu_us=round((s1[0] - s0[0]) / m * 1e6, 2),
                             wait_us=round((s1[1] - s0[1]) / m * 1e6, 2),
                             slices=round((s1[2] - s0[2]) / m, 3),
                             fleet_us=round((f1[0] - f0[0]) / m * 1e6, 2),
                             steal_pct=round(100 * (st1[1] - st0[1]) / (t1 - t0), 1),
                             others_pct=round(100 * ((st1[0] - st0[0]) - (s1[0] - s0[0]) -
                                                     (f1[0] - f0[0])) / (t1 - t0), 1),
                             probe_us=probe,
                             load1=loadavg()[0]))
        done = end_chunk
    phases, levels = [], {}
    for pct in LEVELS:
        mine = [r for r in rows if r["pct"] == pct]
        if not mine:
            continue
        m = sum(r["n"] for r in mine)
        cpu = sum(r["cpu_us"] * r["n"] for r in mine) / m
        wall = sum(r["n"] / r["rate"] for r in mine)
        if pct != 95:
            phases.append((pct, m / wall, cpu))
        per = [r["cpu_us"] for r in mine]
        levels[pct] = [statistics.median(per), min(per), max(per)]
    return dict(phases=phases, levels=levels, chunks=rows, pace=args.pace,
                load_setup=[load0, loadavg()])


def run(kind, n, args, out):
    rundir = tempfile.mkdtemp(prefix="tg-scale-", dir="/dev/shm")
    os.chmod(rundir, 0o700)
    srv = Server(kind, n, args, rundir)
    res = {"server": kind, "n": n, "relays": len(srv.relays),
           "workers": srv.workers if kind == "turngate" else 1, "load_start": loadavg(),
           "binary": os.path.realpath(args.builddir), "tag": args.tag,
           "udp_hash": getattr(args, "udp_hash_slots", None)}
    fleet = None
    try:
        srv.start()
        time.sleep(1.0)
        idle_pss, idle_rss = mem_kb(srv.pids())
        idle_udp = kernel_kb()
        fleet = scale_clients.Fleet(n, [CLIENT_PORT + k for k in range(N_SOCKS)],
                                    srv.servers(), users=500)
        t_all, cpu_all = time.monotonic(), cpu_s(srv.pids())
        res.update(setup_profile(srv, fleet, n, args))
        t_all, cpu_all = time.monotonic() - t_all, cpu_s(srv.pids()) - cpu_all
        ok = sum(1 for r in fleet.relayed if r is not None)
        codes = {}
        for i, c in fleet.errors.items():
            codes[c] = codes.get(c, 0) + 1
        res.update(ok=ok, codes=codes, setup_rate=n / t_all, setup_cpu_us=cpu_all / n * 1e6)
        time.sleep(2.0)
        pss, rss = mem_kb(srv.pids())
        udp = kernel_kb()
        res.update(idle_pss_kb=idle_pss, pss_kb=pss, rss_kb=rss,
                   pss_per_alloc=(pss - idle_pss) * 1024 / max(ok, 1),
                   rss_per_alloc=(rss - idle_rss) * 1024 / max(ok, 1),
                   kernel_per_alloc=(udp - idle_udp) * 1024 / max(ok, 1))
        held = [i for i in range(n) if fleet.relayed[i] is not None]
        if args.setup_only:
            raise SetupDone()
        if not args.takeover:
            c0 = cpu_s(srv.pids())
            refresh_all(fleet, held)
            per = (cpu_s(srv.pids()) - c0) / max(len(held), 1)
            res.update(refresh_cpu_us=per * 1e6,
                       keepalive_core_pct=100 * ok * per * (1 / 300 + 1 / 240))
        peer = ("127.0.0.1", echo_peer())
        sample = random.Random(1).sample(held, min(100, len(held)))
        fleet.permit(sample, peer)
        res["relayed"] = len(fleet.probe(sample, peer))
        if kind == "turngate" and not args.takeover:
            url = "http://127.0.0.1:%d/metrics" % METRICS_PORT
            res["scrape_ms"] = timed(lambda: urllib.request.urlopen(url, timeout=60).read())
            res["status_ms"] = timed(lambda: srv.admin("status"))
            srv.admin("top", rows=20)
            res["top_ranked_ms"] = timed(lambda: srv.admin("top", rows=20))
            if n <= 60000:     # the whole table in one reply: 32 MiB cap beyond
                res["top_full_ms"] = timed(lambda: srv.admin("top"), 3)
            res["top_once_ms"] = timed(lambda: srv.ctl("top", "--once", "--interval", "0.1"), 3)
            res["list_ms"] = timed(lambda: srv.ctl("allocations"), 3)
            res["series"] = sum(1 for line in urllib.request.urlopen(url).read().decode()
                                .splitlines() if line and not line.startswith("#"))
        if kind == "turngate" and args.upgrades:
            res["upgrades"] = [upgrade_once(srv, fleet, sample, peer)
                               for _ in range(args.upgrades)]
        elif kind == "turngate":
            if args.churn:
                churn(srv, fleet, sample, peer, res)
            kill_restart(srv, fleet, sample, peer, res)
    except SetupDone:
        pass
    except Exception as e:  # report and go on with the next run
        res["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        if fleet is not None:
            fleet.close()
        srv.stop()
        if not args.keep:
            shutil.rmtree(rundir, ignore_errors=True)
    res["load_end"] = loadavg()
    print(res, file=out, flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--counts", default="10000,60000")
    ap.add_argument("--servers", default="turngate,coturn")
    ap.add_argument("--builddir", default=os.getcwd())
    ap.add_argument("--raw", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--expiry", type=int, default=0,
                    help="instead: bulk expiry of N allocations of this lifetime (s)")
    ap.add_argument("--churn", action="store_true",
                    help="also kill -9 a worker and run a live upgrade (turngate)")
    ap.add_argument("--takeover", action="store_true",
                    help="only setup and the take-over (with --churn: and respawn, upgrade)")
    ap.add_argument("--upgrades", type=int, default=0,
                    help="instead of the take-over: this many live upgrades in a row, each "
                         "timed (turngate)")
    ap.add_argument("--workers", type=int, default=0,
                    help="turngate's worker count (default: one per %d allocations, at least 2)"
                         % PER_WORKER)
    ap.add_argument("--pace", type=int, default=4000,
                    help="setups a second the fleet offers in every chunk (open loop; "
                         "0: as fast as it can, the closed loop of the first runs)")
    ap.add_argument("--subchunks", type=int, default=5,
                    help="parts each 5 %% chunk of the setup is measured in (median, "
                         "spread)")
    ap.add_argument("--udp-hash", type=int, default=0,
                    help="the network namespace's own UDP hash table of this many slots "
                         "(net.ipv4.udp_child_hash_entries, 128-65536, set for the "
                         "unshare and put back; 0: the machine's table, shared)")
    ap.add_argument("--tag", default="", help="a name for the run, kept in its raw line")
    ap.add_argument("--setup-only", action="store_true",
                    help="only the setup and the memory figures")
    ap.add_argument("--no-netns", action="store_true",
                    help="stay in this network namespace (others' sockets can hold relay ports)")
    args = ap.parse_args()
    out = open(args.raw, "a") if args.raw else sys.stdout
    if not args.no_netns and os.geteuid() == 0:
        knob = None
        if args.udp_hash:       # the new namespace gets a UDP hash table of its own
            # opened here: a net sysctl file writes to the namespace it was opened in
            knob = open("/proc/sys/net/ipv4/udp_child_hash_entries", "r+")
            before = knob.read().strip()
            knob.seek(0)
            knob.write(str(args.udp_hash))
            knob.flush()
        try:
            unshare(CLONE_NEWNET)   # no other program's socket holds a relay port here
        finally:
            if knob is not None:
                knob.seek(0)
                knob.write(before)
                knob.close()
        with open("/proc/sys/net/ipv4/udp_hash_entries") as f:
            hashed = f.read().strip()
        print("in a new network namespace (loopback only); its UDP hash table: %s slots "
              "(negative: the machine's table, shared)" % hashed, flush=True)
        args.udp_hash_slots = int(hashed)
    if args.expiry:
        for n in [int(x) for x in args.counts.split(",")]:
            expiry(n, args, out)
        return
    for n in [int(x) for x in args.counts.split(",")]:
        for kind in args.servers.split(","):
            if kind == "coturn" and (shutil.which("turnserver") is None or n > FD_HARD - 500):
                print("coturn: skipped at %d (one process, one descriptor per allocation; "
                      "hard limit %d)" % (n, FD_HARD), flush=True)
                continue
            r = run(kind, n, args, out)
            if out is not sys.stdout:
                print(r, flush=True)


if __name__ == "__main__":
    main()
