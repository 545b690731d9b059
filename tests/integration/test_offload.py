#!/usr/bin/python3
"""The kernel fast path through the daemon (#21): bound channels relayed by eBPF.

Three network namespaces joined by veth pairs, so the packets cross real interfaces: a
client's (10.77.1.1, fd77:1::1), the server's (10.77.1.2 / fd77:1::2 towards the client,
10.77.2.2 / fd77:2::2 towards the peer, forwarding on) and a peer's (10.77.2.1, fd77:2::1).
The daemon runs in the server's namespace with `offload_engine: TC` and no
offload_interfaces (the interfaces carrying its listener and relay addresses are found).
The test process lives in the server's namespace and makes the client's and the peer's
sockets in theirs (setns), so the receiving stacks verify every checksum.

- A bound channel's datagrams go both ways while every worker is SIGSTOPped (only the
  kernel can have relayed them), IPv4 and IPv6; the listener, cluster and offload counters
  count each of them exactly once.
- They stop at once when the permission expires (permission_lifetime 4 s), when the
  allocation is deleted (Refresh 0), and when a reload drops the peer's cluster.
- Send indications and a ChannelData too large for one datagram on the path (fragments) are
  still relayed, by user space.
- With the maps pinned (a bpffs mounted in the test's own mount namespace), the kernel
  relays while no daemon runs at all (every process SIGKILLed); the next start takes the
  table and the maps over (the entry stays) and relays on; a stop with no allocation left
  detaches the programs. A graceful stop (SIGTERM's drain; SIGINT under XDP) with an
  allocation left removes the entries and detaches (#35, 8): the peer gets nothing while
  no daemon runs; the next start takes the table over and its worker enters the channel
  again, relayed by the kernel. Without bpffs (unpinned maps) a stop detaches even with an
  allocation left. After a kill -9, a start with `offload_engine: None` removes the
  programs and the pinned maps it finds and relays the allocation in user space.
- A revoked user's allocation that waits for its relay port after a kill -9 (the port still
  bound, here by the test) stops relaying in the kernel at once: its worker deletes the
  entries the earlier run left when the revocation ends it, not the master's garbage
  collection (which removes nothing of it: its log line at DEBUG says so). The same when
  the port stays bound past the wait's bound and the allocation is released.
- An allocation under a bandwidth limit gets no entry: the limit holds with the fast path
  on (the user-space buckets drop what is over it).
- A peer on the relay address's own IP (a media server on the gateway's host: the loopback
  layout, listener and peer on 127.0.0.1, TC on lo) is relayed by the kernel like any other;
  only a peer that is or may become one of our relays (a port in the relay range) is left
  to user space, where the short circuit decides.
- The kernel short circuit (#22): two allocations of one instance on a masked loopback
  listener, each with a channel bound to the other's masked address, exchange ChannelData
  while the workers are stopped, onto the receiver's channel from the listener's address,
  counted exactly (listener, offload and short circuit counters); the pair has no entry
  until both channels are bound, and none once one allocation is deleted. The same over
  IPv6 between two clients in the clients' namespace (udp6 masked with fd77:1::9): the
  rewritten datagram leaves by the veth it came in on.
- In a time namespace (the daemon started by `unshare -T`): with its CLOCK_MONOTONIC 120 s
  behind the kernel's (beyond the permission's 30 s; SKIP on a machine up for less) the
  kernel relays while the workers are stopped, counted once; with it an hour ahead, the
  master's garbage collection keeps the live entry and the kernel stops relaying within
  1 s of the permission's end (12 s) with every process of the daemon stopped, so that
  only the programs' own expiry check can end it. SKIP where unshare -T is refused.
- With the programs refused (TURNGATE_OFFLOAD_FAIL) the daemon says why, relays in user
  space, and the same round trip works.
- `offload_engine: XDP`: native XDP on both veths, the TC program behind it. The client's
  and the peer's veth ends have GRO on, so that the server's veths take XDP frames
  (docs/offload.md, Engines). With partial checksums (a local socket through a veth) XDP
  passes the datagrams up and TC relays them; with full ones (transmit checksumming off on
  the client's and peer's ends) and our TC filters removed, XDP alone relays them, both
  ways, IPv4 and IPv6, counted exactly once; it stops when the permission expires and
  when the allocation is deleted; the XDP program stays attached while no daemon runs and
  after the next start's take-over, and a stop with no allocation left detaches it.
Needs root (namespaces, eBPF) and a build with offload; without either it SKIPs (exit 77)
saying why.
"""
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from topology import ETHTOOL_SGRO, ethtool_set  # noqa: E402
import harness_admin  # noqa: E402
from harness_admin import (ALLOCATE, A_LIFETIME, REALM, REFRESH, SECRET, Client,  # noqa: E402
                           InNetns, check, error_code, run_tests, wait_for)

TAG = "tgo%d" % os.getpid()
NS = {"cli": TAG + "c", "srv": TAG + "s", "peer": TAG + "p"}
MARK = "TG_OFFLOAD_INNER"
A_FAMILY = 0x0017
CHANNEL = 0x4000
PORT = 3478
PEER_PORT = 40000


def sh(cmd):
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)


def topology_up():
    for n in NS.values():
        sh("ip netns add %s" % n)
        sh("ip -n %s link set lo up" % n)
    sh("ip link add %sa netns %s type veth peer name %sb netns %s"
       % (TAG, NS["cli"], TAG, NS["srv"]))
    sh("ip link add %sc netns %s type veth peer name %sd netns %s"
       % (TAG, NS["srv"], TAG, NS["peer"]))
    for ns, dev, v4, v6 in ((NS["cli"], TAG + "a", "10.77.1.1/24", "fd77:1::1/64"),
                            (NS["srv"], TAG + "b", "10.77.1.2/24", "fd77:1::2/64"),
                            (NS["srv"], TAG + "c", "10.77.2.2/24", "fd77:2::2/64"),
                            (NS["peer"], TAG + "d", "10.77.2.1/24", "fd77:2::1/64")):
        sh("ip -n %s addr add %s dev %s" % (ns, v4, dev))
        sh("ip -n %s addr add %s dev %s nodad" % (ns, v6, dev))
        sh("ip -n %s link set %s up" % (ns, dev))
    sh("ip netns exec %s sysctl -qw net.ipv4.conf.all.forwarding=1 "
       "net.ipv6.conf.all.forwarding=1" % NS["srv"])


def topology_down():
    for n in NS.values():
        subprocess.run(["ip", "netns", "del", n], stderr=subprocess.DEVNULL)


def outer():
    """Builds the namespaces and re-runs this file inside the server's."""
    if os.geteuid() != 0:
        print("SKIP test_offload: needs root (network namespaces and eBPF)")
        sys.exit(77)
    try:
        topology_up()
    except subprocess.CalledProcessError as e:
        topology_down()
        print("SKIP test_offload: cannot build the namespaces (%s)" % e)
        sys.exit(77)
    try:
        rc = subprocess.call(["ip", "netns", "exec", NS["srv"], sys.executable,
                              os.path.abspath(__file__)], env=dict(os.environ, **{MARK: TAG}))
    finally:
        topology_down()
    sys.exit(rc)


def InNs(which):
    """with InNs("cli"): sockets made inside belong to that namespace."""
    return InNetns(NS[which])


def client(v6):
    with InNs("cli"):
        if v6:
            return Client(PORT, server="fd77:1::2", bind="fd77:1::1")
        return Client(PORT, server="10.77.1.2", bind="10.77.1.1")


def peer_sock(v6):
    with InNs("peer"):
        s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("fd77:2::1" if v6 else "10.77.2.1", PEER_PORT))
        s.settimeout(0.2)
        return s


CONFIG = """version: v1
admin:
  name: offload
  loglevel: all:INFO
  workers: 2
  admin_socket: {d}/admin.sock
  state_dir: {d}
  healthcheck_endpoint: ""
  drain_timeout: 2
  session_records:
    file: {d}/sessions.jsonl
  offload_engine: {engine}
  relay_port_min: 50000
  relay_port_max: 50999
auth:
  type: ephemeral
  realm: {realm}
  credentials:
    secret: {secret}
listeners:
  - name: udp4
    protocol: TURN-UDP
    address: 10.77.2.2
    bind_address: 10.77.1.2
    port: {port}
    routes: [{routes}]
  - name: udp6
    protocol: TURN-UDP
    address: fd77:2::2
    bind_address: fd77:1::2
    port: {port}
    routes: [{routes}]
clusters:
  - name: peers
    type: STATIC
    endpoints: ["10.77.2.1", "fd77:2::1"]
  - name: none
    type: STATIC
    endpoints: ["10.77.3.1"]
limits:
  permission_lifetime: {perm}
{limits}"""


class Daemon(harness_admin.Daemon):
    """The library's daemon on CONFIG (routes, permission lifetime, limits and engine as
    given); each start begins a fresh stderr.log; stop() resumes stopped workers and stops
    at once (SIGINT) without scanning the log."""

    def __init__(self, d, perm=300, env=None, limits="", engine="TC", wrap=()):
        self.d, self.perm, self.limits, self.engine = d, perm, limits, engine
        super().__init__(d, "", env=env, wrap=wrap)
        self.write("peers")
        open(self.errpath, "wb").close()
        self.start(wait=False)
        wait_for(lambda: self.workers_running(), "the daemon to start")

    def write(self, routes):
        self.write_config(CONFIG.format(d=self.d, port=PORT, routes=routes, perm=self.perm,
                                        realm=REALM, secret=SECRET, limits=self.limits,
                                        engine=self.engine))

    def workers_running(self):
        try:
            w = self.admin({"cmd": "workers"})["workers"]
        except OSError:
            return False
        return len(w) == 2 and all(x["state"] == "running" for x in w)

    def worker_pids(self):
        return [w["pid"] for w in self.admin({"cmd": "workers"})["workers"]]

    def stop_workers(self, sig):
        for pid in self.worker_pids():
            os.kill(pid, sig)

    def log(self):
        return self.stderr()

    def stop(self):
        self.stop_workers(signal.SIGCONT)
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def bound(v6):
    """A client with CHANNEL bound to the peer, the peer's socket and the peer's address."""
    c = client(v6)
    extra = [(A_FAMILY, bytes([2 if v6 else 1, 0, 0, 0]))]
    r = c.request(ALLOCATE, [(0x0019, bytes([17, 0, 0, 0]))] + extra)
    check(error_code(r[3]) is None, "Allocate: %r" % (error_code(r[3]),))
    p = peer_sock(v6)
    ip = "fd77:2::1" if v6 else "10.77.2.1"
    r = c.bind(ip, PEER_PORT, CHANNEL)
    check(error_code(r[3]) is None, "ChannelBind: %r" % (error_code(r[3]),))
    return c, p


def round_trip(c, p, n, payload=b"x" * 160):
    """Sends n ChannelData datagrams each way; returns (reached the peer, reached the
    client)."""
    got_p = got_c = 0
    for i in range(n):
        c.channel_data(CHANNEL, payload + struct.pack("!I", i))
    deadline = time.monotonic() + 2
    relay = None
    while got_p < n and time.monotonic() < deadline:
        try:
            data, relay = p.recvfrom(70000)
        except socket.timeout:
            continue
        got_p += data[:len(payload)] == payload
    if relay is None:
        return got_p, 0
    for i in range(n):
        p.sendto(payload + struct.pack("!I", i), relay)
    deadline = time.monotonic() + 2
    c.sock.settimeout(0.2)
    while got_c < n and time.monotonic() < deadline:
        try:
            data = c.sock.recv(70000)
        except socket.timeout:
            continue
        got_c += (data[:4] == struct.pack("!HH", CHANNEL, len(payload) + 4) and
                  data[4:4 + len(payload)] == payload)
    return got_p, got_c


def stopped_round_trip(daemon, c, p, n):
    daemon.stop_workers(signal.SIGSTOP)
    try:
        return round_trip(c, p, n)
    finally:
        daemon.stop_workers(signal.SIGCONT)


def settled_stats(daemon):
    """The stats once two samples 0.2 s apart agree (bounded)."""
    last = daemon.admin({"cmd": "stats"})
    for _ in range(50):
        time.sleep(0.2)
        cur = daemon.admin({"cmd": "stats"})
        if cur["listeners"] == last["listeners"]:
            return cur
        last = cur
    raise AssertionError("the listener counters never settled")


def entries(daemon):
    return daemon.admin({"cmd": "status"})["offload"]["entries"]


def check_counted(daemon, name, before, o0, n):
    """n datagrams each way (160 + 4 bytes of payload) since the stats before and the
    offload status o0: counted once each, in the listener's counters and the offload
    counters."""
    after = daemon.admin({"cmd": "stats"})
    o1 = daemon.admin({"cmd": "status"})["offload"]
    b, a = before["listeners"][name], after["listeners"][name]
    for k in ("client_pkts_in", "peer_pkts_out", "peer_pkts_in", "client_pkts_out"):
        check(a[k] - b[k] == n, "%s %s: %d -> %d" % (name, k, b[k], a[k]))
    check(a["peer_bytes_out"] - b["peer_bytes_out"] == n * 164 and
          a["client_bytes_in"] - b["client_bytes_in"] == n * 168, "byte counters")
    check(o1["packets_to_peer"] - o0["packets_to_peer"] == n and
          o1["packets_to_client"] - o0["packets_to_client"] == n,
          "offload counters: %r -> %r" % (o0, o1))


def offload_or_skip(daemon):
    o = daemon.admin({"cmd": "status"})["offload"]
    if not o["active"]:
        daemon.stop()
        print("SKIP test_offload: the fast path did not load: %s"
              % [ln for ln in daemon.log().splitlines() if "offload" in ln])
        sys.exit(77)
    return o


def test_kernel_relays_while_workers_stopped(d):
    daemon = Daemon(d)
    try:
        o = offload_or_skip(daemon)
        names = sorted(i["name"] for i in o["interfaces"])
        check(names == [TAG + "b", TAG + "c"] and
              all(i["engine"] == "tc" for i in o["interfaces"]), "interfaces: %r" % o)
        for v6, name in ((False, "udp4"), (True, "udp6")):
            c, p = bound(v6)
            check(round_trip(c, p, 5) == (5, 5), "user-space round trip")
            wait_for(lambda: entries(daemon) >= (2 if v6 else 1), "the channel's entry")
            # A worker counts a datagram after its send returned, which can be after the
            # client read it: the baseline is taken once the counters stopped moving.
            before = settled_stats(daemon)
            o0 = daemon.admin({"cmd": "status"})["offload"]
            got = stopped_round_trip(daemon, c, p, 50)
            check(got == (50, 50), "with the workers stopped (v6=%s): %r" % (v6, got))
            check_counted(daemon, name, before, o0, 50)
            # Send indications still go through user space: nothing while stopped.
            daemon.stop_workers(signal.SIGSTOP)
            c.send("fd77:2::1" if v6 else "10.77.2.1", PEER_PORT, b"send-ind")
            time.sleep(0.3)
            try:
                p.recv(100)
                check(False, "a Send indication went through with the workers stopped")
            except socket.timeout:
                pass
            daemon.stop_workers(signal.SIGCONT)
            check(p.recv(100) == b"send-ind", "Send indication after SIGCONT")
            # A ChannelData larger than the path's MTU arrives as fragments: user space.
            big = os.urandom(3000)
            c.channel_data(CHANNEL, big)
            check(p.recv(4000) == big, "fragmented ChannelData")
            p.close()
    finally:
        daemon.stop()


def test_entries_end_with_their_permission(d, engine="TC"):
    daemon = Daemon(d, perm=5, engine=engine)
    try:
        offload_or_skip(daemon)
        c, p = bound(False)
        if engine == "XDP":
            # What the kernel relays from here on, XDP relayed.
            check(round_trip(c, p, 3) == (3, 3), "user-space round trip")
            wait_for(lambda: entries(daemon) == 1, "the channel's entry")
            xdp_alone(True)
        check(stopped_round_trip(daemon, c, p, 5) == (5, 5), "kernel relay")
        # The permission (5 s) expires while the workers are stopped: the kernel checks
        # the expiry itself.
        daemon.stop_workers(signal.SIGSTOP)
        time.sleep(5.5)
        got = round_trip(c, p, 5)
        daemon.stop_workers(signal.SIGCONT)
        check(got == (0, 0), "relayed after the permission expired: %r" % (got,))
        # Refresh 0 ends the allocation: its entries go (well before its permission).
        p.close()
        wait_for(lambda: entries(daemon) == 0, "the expired entry to go")
        c2, p2 = bound(False)
        wait_for(lambda: entries(daemon) == 1, "one entry")
        r = c2.request(REFRESH, [(A_LIFETIME, struct.pack("!I", 0))])
        check(error_code(r[3]) is None, "Refresh 0")
        wait_for(lambda: entries(daemon) == 0, "the entry to go")
        check(stopped_round_trip(daemon, c2, p2, 3) == (0, 0), "relayed after Refresh 0")
    finally:
        if engine == "XDP":
            xdp_alone(False)
        daemon.stop()


def test_reload_drops_the_route(d):
    daemon = Daemon(d)
    try:
        offload_or_skip(daemon)
        c, p = bound(False)
        check(stopped_round_trip(daemon, c, p, 5) == (5, 5), "kernel relay")
        daemon.write("none")
        r = daemon.admin({"cmd": "reload"})
        check(r.get("ok") is True, "reload: %r" % r)
        wait_for(lambda: entries(daemon) == 0, "the entry to go")
        check(stopped_round_trip(daemon, c, p, 3) == (0, 0), "relayed after the reload")
    finally:
        daemon.stop()


def test_reload_keeps_listener_counters(d):
    """A reload that adds a listener in front and reorders the others (#38): the kernel
    keeps counting the allocation's datagrams at its listener's slot, and the listener's
    figures (user space and kernel) neither jump nor go to another listener."""
    daemon = Daemon(d)
    try:
        offload_or_skip(daemon)
        c, p = bound(False)
        check(round_trip(c, p, 5) == (5, 5), "user-space round trip")
        wait_for(lambda: entries(daemon) >= 1, "the channel's entry")
        before = settled_stats(daemon)
        o0 = daemon.admin({"cmd": "status"})["offload"]
        check(stopped_round_trip(daemon, c, p, 20) == (20, 20), "kernel relay")
        check_counted(daemon, "udp4", before, o0, 20)
        mid = settled_stats(daemon)
        with open(daemon.conf) as f:
            text = f.read()
        head, rest = text.split("listeners:\n", 1)
        lst, tail = rest.split("clusters:\n", 1)
        i = lst.index("  - name: udp6")
        extra = ("  - name: extra\n    protocol: TURN-UDP\n    address: 10.77.2.2\n"
                 "    bind_address: 10.77.1.2\n    port: %d\n    routes: [peers]\n" % (PORT + 1))
        with open(daemon.conf, "w") as f:
            f.write(head + "listeners:\n" + extra + lst[i:] + lst[:i] + "clusters:\n" + tail)
        r = daemon.admin({"cmd": "reload"})
        check(r.get("ok") is True, "reload: %r" % r)
        after = settled_stats(daemon)
        check(after["listeners"]["udp4"] == mid["listeners"]["udp4"],
              "udp4's counters moved with the reload: %r -> %r"
              % (mid["listeners"]["udp4"], after["listeners"]["udp4"]))
        check(after["listeners"]["udp6"] == mid["listeners"]["udp6"], "udp6's counters moved")
        check(all(v == 0 for v in after["listeners"]["extra"].values()),
              "the new listener inherited figures: %r" % after["listeners"]["extra"])
        o0 = daemon.admin({"cmd": "status"})["offload"]
        check(stopped_round_trip(daemon, c, p, 10) == (10, 10), "kernel relay after the reload")
        check_counted(daemon, "udp4", after, o0, 10)
        p.close()
    finally:
        daemon.stop()


def in_timens(name, shift):
    """The command prefix that runs the daemon in a time namespace of its own whose
    CLOCK_MONOTONIC is shift seconds off the kernel's (unshare -T execs the daemon in
    place), or None with a SKIP of test name printed when the kernel refuses it (no
    CONFIG_TIME_NS, a negative shift beyond the time since boot)."""
    wrap = ["unshare", "-T", "--monotonic=%d" % shift]
    r = subprocess.run(wrap + ["cat", "/proc/self/timens_offsets"], capture_output=True,
                       text=True)
    if r.returncode != 0 or ("monotonic %d 0" % shift) not in " ".join(r.stdout.split()):
        print("SKIP %s: unshare -T --monotonic=%d: %s" % (name, shift, r.stderr.strip() or
                                                            r.stdout.strip()), flush=True)
        return None
    return wrap


def mono_offset(pid="self"):
    """The CLOCK_MONOTONIC offset (s) of pid's time namespace from the kernel's clock."""
    try:
        with open("/proc/%s/timens_offsets" % pid) as f:
            for ln in f:
                w = ln.split()
                if w[0] == "monotonic":
                    return int(w[1]) + int(w[2]) / 1e9
    except FileNotFoundError:
        pass
    return 0


def test_kernel_relays_behind_the_kernels_clock(d):
    """A daemon in a time namespace whose CLOCK_MONOTONIC runs N s behind the kernel's
    (unshare -T --monotonic=-N; a CRIU restore, a container with a time namespace): its
    entries' expiries reach the maps in the kernel's clock (bpf_ktime_get_ns), so the
    kernel relays the channel while the workers are stopped, counted once. N is beyond
    the permission's lifetime: an expiry written in the daemon's clock (before the fix)
    was in the kernel's past, every entry expired to the programs and nothing relayed."""
    perm, shift = 30, 120
    if time.clock_gettime(time.CLOCK_MONOTONIC) - mono_offset() < shift + 2:
        print("SKIP test_kernel_relays_behind_the_kernels_clock: booted less than %d s ago "
              "(the shifted clock would be negative)" % (shift + 2), flush=True)
        return
    wrap = in_timens("test_kernel_relays_behind_the_kernels_clock", -shift)
    if wrap is None:
        return
    daemon = Daemon(d, perm=perm, wrap=wrap)
    try:
        offload_or_skip(daemon)
        check(mono_offset(daemon.proc.pid) == -shift, "the daemon is not in the namespace")
        c, p = bound(False)
        check(round_trip(c, p, 5) == (5, 5), "user-space round trip")
        wait_for(lambda: entries(daemon) == 1, "the channel's entry")
        before = settled_stats(daemon)
        o0 = daemon.admin({"cmd": "status"})["offload"]
        got = stopped_round_trip(daemon, c, p, 20)
        check(got == (20, 20), "with the workers stopped, %d s behind: %r" % (shift, got))
        check_counted(daemon, "udp4", before, o0, 20)
        p.close()
    finally:
        daemon.stop()


def signal_pids(pids, sig):
    for pid in pids:
        os.kill(pid, sig)


def test_permission_ends_ahead_of_the_kernels_clock(d):
    """A daemon whose CLOCK_MONOTONIC runs an hour ahead of the kernel's (unshare -T
    --monotonic=3600): the kernel stops relaying when the permission expires, with every
    process of the daemon stopped (no worker deletes the entry, no garbage collection of
    the master removes it: only the programs' own expiry check can end it). Before the fix
    the entry's expiry was an hour late in the kernel's clock and the kernel relayed to a
    peer whose permission had expired. Before that, with the workers stopped, the master's
    garbage collection (every 5 s) reads the entry back in the daemon's clock and keeps it."""
    perm, shift = 12, 3600
    wrap = in_timens("test_permission_ends_ahead_of_the_kernels_clock", shift)
    if wrap is None:
        return
    daemon = Daemon(d, perm=perm, wrap=wrap)
    try:
        offload_or_skip(daemon)
        check(mono_offset(daemon.proc.pid) == shift, "the daemon is not in the namespace")
        c, p = bound(False)
        t0 = time.monotonic()    # the permission expires at t0 + perm at the latest
        check(stopped_round_trip(daemon, c, p, 5) == (5, 5), "kernel relay")
        daemon.stop_workers(signal.SIGSTOP)
        try:
            # A garbage collection has run since the entry was written.
            time.sleep(max(0.0, t0 + 6 - time.monotonic()))
            check(entries(daemon) == 1, "the master's garbage collection removed the entry")
            got = round_trip(c, p, 5)
        finally:
            daemon.stop_workers(signal.SIGCONT)
        check(got == (5, 5), "kernel relay after a garbage collection: %r" % (got,))
        pids = daemon.worker_pids() + [daemon.proc.pid]
        signal_pids(pids, signal.SIGSTOP)
        try:
            time.sleep(max(0.0, t0 + perm + 1 - time.monotonic()))
            got = round_trip(c, p, 5)
        finally:
            signal_pids(pids, signal.SIGCONT)
        check(got == (0, 0), "relayed 1 s after the permission expired: %r" % (got,))
        p.close()
    finally:
        daemon.stop()


def with_log(fn):
    """fn, printing the tail of the daemon's log when it fails."""
    def run(d):
        try:
            fn(d)
        except Exception:
            with open(os.path.join(d, "stderr.log"), errors="replace") as f:
                for ln in f.read().splitlines()[-20:]:
                    print("  | " + ln)
            raise
    run.__name__ = fn.__name__
    return run


def tc_filters(dev):
    return subprocess.run(["tc", "filter", "show", "dev", dev, "ingress"], capture_output=True,
                          text=True).stdout.strip()


def xdp_prog(dev):
    """The name of the XDP program on dev (in this namespace), "" when none."""
    out = subprocess.run(["ip", "-d", "link", "show", "dev", dev], capture_output=True,
                         text=True).stdout
    if "prog/xdp" not in out:
        return ""
    pid = out.split("prog/xdp id ")[1].split()[0]
    return subprocess.run(["bpftool", "prog", "show", "id", pid], capture_output=True,
                          text=True).stdout.split("name ")[1].split()[0]


def attached(dev):
    return tc_filters(dev) + xdp_prog(dev)


def test_unpinned_stop_detaches(d):
    """Without bpffs (this file runs in `ip netns exec`'s mount namespace, where nothing
    is mounted on /sys/fs/bpf until test_restart_keeps_kernel_relaying mounts one) the maps
    cannot be pinned: a stop that leaves an allocation in the state file still detaches,
    since no later start could find the maps and their entries would go on relaying for
    whatever serves these addresses next."""
    if subprocess.run(["mountpoint", "-q", "/sys/fs/bpf"]).returncode == 0:
        print("SKIP test_unpinned_stop_detaches: bpffs is mounted here", flush=True)
        return
    daemon = Daemon(d)
    try:
        offload_or_skip(daemon)
        check("not kept across restarts" in daemon.log(), "maps pinned")
        c, p = bound(False)
        check(stopped_round_trip(daemon, c, p, 3) == (3, 3), "kernel relay")
    finally:
        daemon.stop()
    check(attached(TAG + "b") == "" and attached(TAG + "c") == "",
          "still attached after a stop with unpinned maps: %r" % attached(TAG + "b"))
    check("programs stay attached" not in daemon.log(), "the daemon said it kept them")


def test_restart_keeps_kernel_relaying(d, engine="TC"):
    """Pinned maps (a bpffs of this test's mount namespace): the kernel relays while no
    daemon runs at all, the next start takes the maps over with the table, and a stop with
    no allocation left detaches."""
    if subprocess.run("mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf",
                      shell=True).returncode != 0:
        print("SKIP test_restart_keeps_kernel_relaying: cannot mount bpffs", flush=True)
        return
    daemon = Daemon(d, engine=engine)
    try:
        offload_or_skip(daemon)
        check("not kept across restarts" not in daemon.log(), "maps not pinned")
        c, p = bound(False)
        check(stopped_round_trip(daemon, c, p, 5) == (5, 5), "kernel relay")
        pids = [daemon.proc.pid] + daemon.worker_pids()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        daemon.proc.wait()
        got = round_trip(c, p, 20)
        check(got == (20, 20), "with no daemon running: %r" % (got,))
        daemon.err.close()
        before = xdp_prog(TAG + "b")
        daemon = Daemon(d, engine=engine)
        check("taken over" in daemon.log(), "no take-over")
        check(xdp_prog(TAG + "b") == ("tgo_xdp" if engine == "XDP" else "") and
              before == xdp_prog(TAG + "b"), "XDP program across the restart: %r -> %r"
              % (before, xdp_prog(TAG + "b")))
        wait_for(lambda: entries(daemon) == 1, "the entry kept across the restart")
        check(stopped_round_trip(daemon, c, p, 5) == (5, 5), "kernel relay after the restart")
        r = c.request(REFRESH, [(A_LIFETIME, struct.pack("!I", 0))])
        check(error_code(r[3]) is None, "Refresh 0")
        wait_for(lambda: entries(daemon) == 0, "the entry to go")
        check(tc_filters(TAG + "b") != "", "no filter attached")
    finally:
        daemon.stop()
    check(attached(TAG + "b") == "" and attached(TAG + "c") == "",
          "still attached after a stop with no allocation: %r" % attached(TAG + "b"))


GC_REMOVED = "entries the table no longer holds removed"


def waiting_after_kill(d, name):
    """A bound channel relayed by the kernel, every process killed -9, its relay port bound
    by the test (a dying predecessor's socket), the next start: its worker waits for the
    port (the kernel relaying meanwhile), the master's DEBUG lines on. Returns the daemon,
    the client, the peer's socket and the test's socket on the relay port; (None,) * 4 when
    no bpffs can be mounted (SKIP of test name)."""
    if subprocess.run("mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf",
                      shell=True).returncode != 0:
        print("SKIP %s: cannot mount bpffs" % name, flush=True)
        return (None,) * 4
    daemon = Daemon(d)
    held = None
    try:
        offload_or_skip(daemon)
        c = client(False)
        r = c.request(ALLOCATE, [(0x0019, bytes([17, 0, 0, 0]))])
        check(error_code(r[3]) is None, "Allocate: %r" % (error_code(r[3]),))
        relayed = c.relayed(r)[0]
        p = peer_sock(False)
        r = c.bind("10.77.2.1", PEER_PORT, CHANNEL)
        check(error_code(r[3]) is None, "ChannelBind: %r" % (error_code(r[3]),))
        check(stopped_round_trip(daemon, c, p, 3) == (3, 3), "kernel relay")
        pids = [daemon.proc.pid] + daemon.worker_pids()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        daemon.proc.wait()
        daemon.err.close()
        # the workers gone too, their relay sockets closed (a zombie's are)
        wait_for(lambda: not any(harness_admin.alive(pid) for pid in pids),
                 "the killed processes gone")
        held = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        held.bind(relayed)
        daemon = Daemon(d)
        wait_for(lambda: "allocations wait for their relay ports" in daemon.log(),
                 "the allocation to wait for its relay port")
        check(entries(daemon) == 1, "the entry kept over the take-over")
        check(stopped_round_trip(daemon, c, p, 3) == (3, 3), "kernel relay while it waits")
        r = daemon.admin({"cmd": "loglevel", "spec": "all:INFO,master:DEBUG"})
        check(r.get("ok") is True, "loglevel: %r" % r)
        return daemon, c, p, held
    except Exception:
        if held is not None:
            held.close()
        if daemon.proc.poll() is None:
            daemon.stop()
        raise


def check_gone_at_once(daemon, c, p, what):
    """The allocation ended (not listed): its entry is gone, and not by the master's
    garbage collection; nothing relays."""
    wait_for(lambda: daemon.allocations() == [], "the allocation to end (%s)" % what)
    n, gc = entries(daemon), GC_REMOVED in daemon.log()
    check(n == 0 and not gc, "%s: %d entries left, the master's garbage collection removed %s"
          % (what, n, "some" if gc else "none"))
    got = round_trip(c, p, 3)
    check(got == (0, 0), "relayed after it ended (%s): %r" % (what, got))


def test_revoked_while_waiting(d):
    """A revocation of the user of an allocation that waits for its relay port after a
    kill -9 ends it: its entries go as it ends (its worker deletes them; the master's
    garbage collection, every 5 s, finds nothing of it to remove), nothing relays."""
    daemon, c, p, held = waiting_after_kill(d, "test_revoked_while_waiting")
    if daemon is None:
        return
    try:
        r = daemon.admin({"cmd": "revoke", "user": c.username})
        check(r.get("ok") is True and r.get("disconnected") == 1, "revoke: %r" % r)
        check_gone_at_once(daemon, c, p, "revoked")
    finally:
        p.close()
        held.close()
        daemon.stop()


def test_released_at_the_bound(d):
    """The same allocation whose port stays bound past the wait's bound (10 s): released
    (not rebindable), its entries with it."""
    daemon, c, p, held = waiting_after_kill(d, "test_released_at_the_bound")
    if daemon is None:
        return
    try:
        wait_for(lambda: "1 released (not rebindable" in daemon.log(), "the release at the "
                 "bound", timeout=30)
        check_gone_at_once(daemon, c, p, "released at the bound")
    finally:
        p.close()
        held.close()
        daemon.stop()


def test_graceful_stop_removes_entries(d, engine="TC", sig=signal.SIGTERM):
    """#35 (8): a graceful stop (SIGTERM's drain, SIGINT) with an allocation left and the
    maps pinned removes the entries and detaches: nothing relays while no daemon runs
    (only a crash or kill -9 leaves the kernel relaying). The table stays in the state file:
    the next start takes it over and its worker enters the channel again."""
    if subprocess.run("mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf",
                      shell=True).returncode != 0:
        print("SKIP test_graceful_stop_removes_entries: cannot mount bpffs", flush=True)
        return
    daemon = Daemon(d, engine=engine)
    try:
        offload_or_skip(daemon)
        check("not kept across restarts" not in daemon.log(), "maps not pinned")
        c, p = bound(False)
        check(round_trip(c, p, 3) == (3, 3), "user-space round trip")
        wait_for(lambda: entries(daemon) == 1, "the channel's entry")
        o0 = daemon.admin({"cmd": "status"})["offload"]
        check(stopped_round_trip(daemon, c, p, 5) == (5, 5), "kernel relay")
        o1 = daemon.admin({"cmd": "status"})["offload"]
        check(o1["packets_to_peer"] - o0["packets_to_peer"] == 5, "offload counters: %r -> %r"
              % (o0, o1))
        daemon.proc.send_signal(sig)
        check(daemon.proc.wait(30) == 0, "exit status")
        daemon.err.close()
        got = round_trip(c, p, 5)
        check(got == (0, 0), "relayed with no daemon running after a graceful stop: %r"
              % (got,))
        check(attached(TAG + "b") == "" and attached(TAG + "c") == "",
              "still attached after a graceful stop: %r" % attached(TAG + "b"))
        check("removed 1 entries and detached" in daemon.log(), "no removal logged")
        check("1 allocations stay in" in daemon.log(), "the allocation did not stay")
        daemon = Daemon(d, engine=engine)
        check("taken over" in daemon.log(), "no take-over")
        wait_for(lambda: entries(daemon) == 1, "the entry entered again at adoption")
        check(stopped_round_trip(daemon, c, p, 5) == (5, 5), "kernel relay after the restart")
        r = c.request(REFRESH, [(A_LIFETIME, struct.pack("!I", 0))])
        check(error_code(r[3]) is None, "Refresh 0")
        p.close()
    finally:
        if daemon.proc.poll() is None:
            daemon.stop()


def test_xdp_fast_stop_removes_entries(d):
    test_graceful_stop_removes_entries(d, engine="XDP", sig=signal.SIGINT)


def test_none_removes_leftovers(d):
    """A kill -9 with an allocation leaves the programs attached and the maps pinned; a
    start with offload_engine None takes them over and removes them (nothing relays on
    entries no one updates), and relays the allocation it took over in user space."""
    if subprocess.run(["mountpoint", "-q", "/sys/fs/bpf"]).returncode != 0:
        print("SKIP test_none_removes_leftovers: no bpffs (mounted by the restart test)",
              flush=True)
        return
    daemon = Daemon(d)
    try:
        offload_or_skip(daemon)
        c, p = bound(False)
        check(stopped_round_trip(daemon, c, p, 3) == (3, 3), "kernel relay")
        for pid in [daemon.proc.pid] + daemon.worker_pids():
            os.kill(pid, signal.SIGKILL)
        daemon.proc.wait()
        daemon.err.close()
        check(tc_filters(TAG + "b") != "", "nothing left attached by the kill")
        daemon = Daemon(d, engine="None")
        check("removed the programs an earlier run left" in daemon.log(), "no log line")
        check(attached(TAG + "b") == "" and attached(TAG + "c") == "",
              "still attached: %r" % attached(TAG + "b"))
        check("taken over" in daemon.log(), "no take-over")
        check(round_trip(c, p, 5) == (5, 5), "user-space relay of the allocation taken over")
    finally:
        daemon.stop()


def test_bandwidth_limit_holds(d):
    """An allocation under a bandwidth limit stays in user space (the programs do not
    charge the buckets), so the limit holds with the fast path on (#23)."""
    daemon = Daemon(d, limits="  allocation_bps: 8000\n  bandwidth_burst_ms: 100\n")
    try:
        offload_or_skip(daemon)
        c, p = bound(False)
        # The entry would be set before the ChannelBind response: there is none.
        check(entries(daemon) == 0, "a limited allocation was entered")
        got = round_trip(c, p, 20)
        check(got[0] <= 2, "the limit (1000 B/s, burst 100 ms) let %d of 20 through" % got[0])
        drops = daemon.admin({"cmd": "stats"})["counters"]["quota_bandwidth"]
        check(drops >= 18, "bandwidth drops %r" % drops)
    finally:
        daemon.stop()


def test_refused_programs_fall_back(d):
    daemon = Daemon(d, env={"TURNGATE_OFFLOAD_FAIL": "1"})
    try:
        o = daemon.admin({"cmd": "status"})["offload"]
        check(not o["active"] and o["engine"] == "TC", "status: %r" % o)
        check("relaying in user space" in daemon.log(), "no log line says why")
        c, p = bound(False)
        check(round_trip(c, p, 20) == (20, 20), "user-space relay")
        check(stopped_round_trip(daemon, c, p, 3) == (0, 0), "relayed with the workers stopped")
    finally:
        daemon.stop()


ETHTOOL_STXCSUM = 0x17


def far_ends(cmd, on):
    """ethtool -K (tx|gro) on|off at the client's and the peer's veth ends."""
    for which, dev in (("cli", TAG + "a"), ("peer", TAG + "d")):
        with InNs(which):
            ethtool_set(dev, cmd, on)


def xdp_alone(on):
    """Full checksums from the client and the peer (transmit checksumming off on their
    ends) and our TC filters gone: what is relayed now, XDP relayed. on=False: partial
    checksums again (the filters come back with the next daemon)."""
    far_ends(ETHTOOL_STXCSUM, not on)
    if on:
        for dev in (TAG + "b", TAG + "c"):
            sh("tc filter del dev %s ingress pref %d handle 0x7467 bpf" % (dev, 0x7467))


def test_xdp_relays_while_workers_stopped(d):
    daemon = Daemon(d, engine="XDP")
    try:
        o = offload_or_skip(daemon)
        check(sorted(i["engine"] for i in o["interfaces"]) == ["xdp", "xdp"], "engines: %r" % o)
        check(xdp_prog(TAG + "b") == "tgo_xdp" and tc_filters(TAG + "b") != "",
              "XDP in front of TC: %r %r" % (xdp_prog(TAG + "b"), tc_filters(TAG + "b")))
        check("offload XDP: xdp on %sb" % TAG in daemon.log(), "the log line names the engine")
        chans = []
        for v6 in (False, True):
            chans.append(bound(v6))
            check(round_trip(*chans[-1], 5) == (5, 5), "user-space round trip")
        wait_for(lambda: entries(daemon) == 2, "the channels' entries")
        for alone in (False, True):
            if alone:
                xdp_alone(True)
            for v6, name in ((False, "udp4"), (True, "udp6")):
                c, p = chans[v6]
                before = settled_stats(daemon)
                o0 = daemon.admin({"cmd": "status"})["offload"]
                got = stopped_round_trip(daemon, c, p, 50)
                check(got == (50, 50), "workers stopped (v6=%s, XDP alone=%s): %r"
                      % (v6, alone, got))
                check_counted(daemon, name, before, o0, 50)
        for c, p in chans:
            p.close()
    finally:
        xdp_alone(False)
        daemon.stop()


# CONFIG's admin and auth, without a state directory (nothing is pinned), and a loopback
# listener whose cluster is its own address.
LO_CONFIG = CONFIG[:CONFIG.index("listeners:")].replace("  state_dir: {d}\n", "") + """listeners:
  - name: lo4
    protocol: TURN-UDP
    address: 127.0.0.1
    port: {port}
    routes: [local]
clusters:
  - name: local
    type: STATIC
    endpoints: ["127.0.0.1"]
"""


class LoDaemon(Daemon):
    def write(self, routes):
        self.write_config(LO_CONFIG.format(d=self.d, port=PORT, realm=REALM, secret=SECRET,
                                       engine="TC"))


def test_peer_on_the_relay_ip(d):
    daemon = LoDaemon(d)
    try:
        offload_or_skip(daemon)
        c = Client(PORT, server="127.0.0.1", bind="127.0.0.2")
        r = c.request(ALLOCATE, [(0x0019, bytes([17, 0, 0, 0]))])
        check(error_code(r[3]) is None, "Allocate: %r" % (error_code(r[3]),))
        p = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        p.bind(("127.0.0.1", PEER_PORT))
        p.settimeout(0.2)
        # A port inside the relay range of the relay's IP may be (or become) an allocation
        # of ours: no entry; the short circuit or the relay sockets carry it.
        r = c.bind("127.0.0.1", 50999, CHANNEL + 1)
        check(error_code(r[3]) is None, "ChannelBind: %r" % (error_code(r[3]),))
        r = c.bind("127.0.0.1", PEER_PORT, CHANNEL)
        check(error_code(r[3]) is None, "ChannelBind: %r" % (error_code(r[3]),))
        wait_for(lambda: entries(daemon) >= 1, "the entry of the channel to the peer")
        check(entries(daemon) == 1, "entries: %d (the in-range port has none)" % entries(daemon))
        o0 = daemon.admin({"cmd": "status"})["offload"]
        got = stopped_round_trip(daemon, c, p, 10)
        check(got == (10, 10), "relayed with the workers stopped: %r" % (got,))
        o1 = daemon.admin({"cmd": "status"})["offload"]
        check(o1["packets_to_peer"] - o0["packets_to_peer"] == 10 and
              o1["packets_to_client"] - o0["packets_to_client"] == 10,
              "offload counters: %r -> %r" % (o0, o1))
        c.close()
        p.close()
    finally:
        daemon.stop()


# LO_CONFIG with the listener's relay addresses masked (127.0.0.9, which nothing binds: a
# datagram that left a relay socket for it would be lost) and the mask admitted.
SC_CONFIG = LO_CONFIG.replace("    routes: [local]\n",
                              "    routes: [local]\n    relay_address_mask: 127.0.0.9\n").replace(
    'endpoints: ["127.0.0.1"]', 'endpoints: ["127.0.0.1", "127.0.0.9"]')
SC_CHANNELS = (0x4000, 0x4001)


class ScDaemon(Daemon):
    def write(self, routes):
        self.write_config(SC_CONFIG.format(d=self.d, port=PORT, realm=REALM, secret=SECRET,
                                       engine="TC"))


def sc_exchange(src, dst, chan_out, chan_in, n, payload):
    """n ChannelData from src on chan_out; how many reached dst as ChannelData on chan_in,
    from the listener dst reached, with the payload unchanged."""
    for i in range(n):
        src.channel_data(chan_out, payload + struct.pack("!I", i))
    got, seen = 0, set()
    deadline = time.monotonic() + 2
    dst.sock.settimeout(0.2)
    while got < n and time.monotonic() < deadline:
        try:
            data, frm = dst.sock.recvfrom(70000)
        except socket.timeout:
            continue
        body = payload + data[-4:]
        if (frm[:2] == dst.server and data[:4] == struct.pack("!HH", chan_in, len(body))
                and data[4:] == body and data[-4:] not in seen):
            seen.add(data[-4:])
            got += 1
    return got


def test_kernel_short_circuit(d):
    """#22's kernel short circuit: two allocations of one instance, each with a channel
    bound to the other's masked address, exchange ChannelData while every worker is
    SIGSTOPped (only the kernel can carry it), rewritten onto the receiver's channel and
    counted exactly; the pair's two entries come with the second ChannelBind and go when
    either allocation is deleted. Loopback, TC on lo (a local delivery)."""
    short_circuit_pair(ScDaemon(d), "lo4", "127.0.0.9",
                       lambda: Client(PORT, server="127.0.0.1", bind="127.0.0.2"),
                       lambda: Client(PORT, server="127.0.0.1", bind="127.0.0.3"))


# CONFIG's udp6 listener masked with fd77:1::9 (on the clients' side, which nothing holds)
# and the mask admitted; the udp4 listener as it is.
SC6_CONFIG = CONFIG.replace(
    "    bind_address: fd77:1::2\n    port: {port}\n    routes: [{routes}]\n",
    "    bind_address: fd77:1::2\n    port: {port}\n    routes: [{routes}]\n"
    "    relay_address_mask: fd77:1::9\n").replace(
    'endpoints: ["10.77.2.1", "fd77:2::1"]', 'endpoints: ["10.77.2.1", "fd77:2::1", "fd77:1::9"]')


class Sc6Daemon(Daemon):
    def write(self, routes):
        self.write_config(SC6_CONFIG.format(d=self.d, port=PORT, routes=routes, perm=self.perm,
                                            realm=REALM, secret=SECRET, limits=self.limits,
                                            engine=self.engine))


def test_kernel_short_circuit_v6(d):
    """The same over IPv6 between two clients in the clients' namespace: the kernel sends
    the rewritten datagram back out of the veth it came in on (a routed short circuit)."""
    short_circuit_pair(Sc6Daemon(d), "udp6", "fd77:1::9", lambda: client(True),
                       lambda: client(True), extra=[(A_FAMILY, bytes([2, 0, 0, 0]))])


def short_circuit_pair(daemon, listener, mask, mk_a, mk_b, extra=()):
    try:
        offload_or_skip(daemon)
        a, b = mk_a(), mk_b()
        ra = a.relayed(a.allocate(extra=extra))[0]
        rb = b.relayed(b.allocate(extra=extra))[0]
        check(ra[0] == rb[0] == mask, "masked relayed addresses: %r %r" % (ra, rb))
        r = a.bind(rb[0], rb[1], SC_CHANNELS[0])
        check(error_code(r[3]) is None, "ChannelBind a: %r" % (error_code(r[3]),))
        # The entry is written before the response: with one channel of the pair only,
        # none (the receiver could only be sent a Data indication).
        check(entries(daemon) == 0, "entries with one channel: %d" % entries(daemon))
        r = b.bind(ra[0], ra[1], SC_CHANNELS[1])
        check(error_code(r[3]) is None, "ChannelBind b: %r" % (error_code(r[3]),))
        check(entries(daemon) == 2, "entries of the pair: %d" % entries(daemon))
        before = settled_stats(daemon)
        c0 = daemon.admin({"cmd": "stats"})["counters"]["short_circuit"]
        o0 = daemon.admin({"cmd": "status"})["offload"]
        n = 40
        daemon.stop_workers(signal.SIGSTOP)
        try:
            got = (sc_exchange(a, b, SC_CHANNELS[0], SC_CHANNELS[1], n, b"a" * 157),
                   sc_exchange(b, a, SC_CHANNELS[1], SC_CHANNELS[0], n, b"b" * 160))
        finally:
            daemon.stop_workers(signal.SIGCONT)
        check(got == (n, n), "short-circuited by the kernel with the workers stopped: %r"
              % (got,))
        after = daemon.admin({"cmd": "stats"})
        o1 = daemon.admin({"cmd": "status"})["offload"]
        check(o1["packets_short_circuit"] - o0["packets_short_circuit"] == 2 * n and
              o1["packets_to_peer"] - o0["packets_to_peer"] == 2 * n and
              o1["packets_to_client"] - o0["packets_to_client"] == 2 * n,
              "offload counters: %r -> %r" % (o0, o1))
        check(after["counters"]["short_circuit"] - c0 == 2 * n,
              "short_circuit: %d -> %d" % (c0, after["counters"]["short_circuit"]))
        bl, al = before["listeners"][listener], after["listeners"][listener]
        for k in ("client_pkts_in", "peer_pkts_out", "peer_pkts_in", "client_pkts_out"):
            check(al[k] - bl[k] == 2 * n, "%s %s: %d -> %d" % (listener, k, bl[k], al[k]))
        # 157 + 4 and 160 + 4 bytes of data each way; the client side adds the 4-byte header.
        data = n * (161 + 164)
        check(al["peer_bytes_out"] - bl["peer_bytes_out"] == data and
              al["peer_bytes_in"] - bl["peer_bytes_in"] == data and
              al["client_bytes_in"] - bl["client_bytes_in"] == data + 8 * n,
              "%s byte counters: %r -> %r" % (listener, bl, al))
        # b ends: both entries go (a's towards b as well), and a's data reaches b no more.
        r = b.request(REFRESH, [(A_LIFETIME, struct.pack("!I", 0))])
        check(error_code(r[3]) is None, "Refresh 0: %r" % (error_code(r[3]),))
        check(entries(daemon) == 0, "entries after b ended: %d" % entries(daemon))
        check(sc_exchange(a, b, SC_CHANNELS[0], SC_CHANNELS[1], 5, b"c" * 100) == 0,
              "a's ChannelData still reached b after its allocation ended")
        a.close()
        b.close()
    finally:
        daemon.stop()


def test_records_count_the_kernel(d, engine="TC"):
    """Issue #40: the session record's bytes and packets include what the kernel relayed
    (read from the channel's entries before they are deleted at the allocation's end)."""
    daemon = Daemon(d, engine=engine)
    try:
        offload_or_skip(daemon)
        c, p = bound(False)
        check(round_trip(c, p, 5) == (5, 5), "user-space round trip")
        wait_for(lambda: entries(daemon) >= 1, "the channel's entry")
        settled_stats(daemon)
        o0 = daemon.admin({"cmd": "status"})["offload"]
        got = stopped_round_trip(daemon, c, p, 50)
        check(got == (50, 50), "with the workers stopped: %r" % (got,))
        o1 = daemon.admin({"cmd": "status"})["offload"]
        check(o1["packets_to_peer"] - o0["packets_to_peer"] == 50, "the kernel relayed them")
        r = c.request(REFRESH, [(A_LIFETIME, struct.pack("!I", 0))])
        check(error_code(r[3]) is None, "Refresh 0: %r" % (error_code(r[3]),))

        def rec():
            try:
                with open(os.path.join(d, "sessions.jsonl")) as f:
                    return [json.loads(ln) for ln in f if ln.strip()]
            except FileNotFoundError:
                return []
        recs = wait_for(rec, "the session record")
        check(len(recs) == 1 and recs[0]["reason"] == "refresh0", recs)
        # 5 before the workers stop and 50 while they are, each way (the kernel carries
        # them all once the channel is bound: 0 in the record before), 164 bytes of data each.
        n = 55
        check(recs[0]["to_peer"] == {"packets": n, "bytes": n * 164} and
              recs[0]["from_peer"] == {"packets": n, "bytes": n * 164}, recs[0])
        c.close()
        p.close()
    finally:
        daemon.stop()


def test_xdp_records_count_the_kernel(d):
    test_records_count_the_kernel(d, engine="XDP")


def test_xdp_entries_end_with_their_permission(d):
    test_entries_end_with_their_permission(d, engine="XDP")


def test_xdp_restart(d):
    test_restart_keeps_kernel_relaying(d, engine="XDP")


if __name__ == "__main__":
    if os.environ.get(MARK) is None:
        outer()
    TAG = os.environ[MARK]
    NS = {"cli": TAG + "c", "srv": TAG + "s", "peer": TAG + "p"}
    # The server's veths take XDP frames when their peers have GRO on (Engines).
    far_ends(ETHTOOL_SGRO, True)
    tests = [test_kernel_relays_while_workers_stopped, test_entries_end_with_their_permission,
             test_reload_drops_the_route, test_unpinned_stop_detaches,
             test_restart_keeps_kernel_relaying, test_revoked_while_waiting,
             test_released_at_the_bound, test_graceful_stop_removes_entries,
             test_none_removes_leftovers,
             test_bandwidth_limit_holds, test_refused_programs_fall_back,
             test_peer_on_the_relay_ip, test_kernel_short_circuit, test_kernel_short_circuit_v6,
             test_xdp_relays_while_workers_stopped, test_xdp_entries_end_with_their_permission,
             test_xdp_restart, test_xdp_fast_stop_removes_entries,
             test_reload_keeps_listener_counters,
             test_records_count_the_kernel, test_xdp_records_count_the_kernel,
             test_kernel_relays_behind_the_kernels_clock,
             test_permission_ends_ahead_of_the_kernels_clock]
    if os.environ.get("TG_OFFLOAD_ONLY"):   # one test by name, for a local run
        tests = [t for t in tests if t.__name__ == os.environ["TG_OFFLOAD_ONLY"]]
    run_tests([with_log(t) for t in tests])
