"""topology.py: where compare.py's client, relay server and echo peer live.

Loopback (the default): everything on 127.0.0.1 in the current network namespace, the
client bound to 127.0.0.2. Or, with --netns, three network namespaces joined by two veth
pairs, so that every datagram crosses real interfaces (a kernel fast path attaches its TC
programs to the server's two veth interfaces, where on loopback it would attach to lo):

    client ns            server ns (forwarding on)              peer ns
    tgb-c 10.78.1.2 <--> tgb-sc 10.78.1.1 | tgb-sp 10.78.2.1 <--> tgb-p 10.78.2.2
    turnbench            relay: listens on 10.78.1.1,           echo peer
                         relays from 10.78.2.1

The symmetric tests' relay_address_mask is an address nothing holds on the clients' side,
as a load balancer's address in front of the relay would be: 10.78.1.9 (127.0.0.9 on
loopback). With the short circuit nothing is sent to it.

The client and the peer route everything through the server namespace, so the `direct`
run (no relay) is the same datagram routed by the server's kernel. Processes enter a
namespace with nsenter --net, which changes nothing else: `ip netns exec` would also
remount /sys in a new mount namespace and hide the bpffs (/sys/fs/bpf) where an offload
engine pins its maps. Needs root. Every namespace is deleted by Topology.close (the veth
pairs go with them), also when a run fails.
"""
import contextlib
import ctypes
import fcntl
import os
import socket
import struct
import subprocess

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"


class Topology:
    """Addresses of one layout; ns maps a role (client, server, peer) to a namespace name,
    or is empty on loopback."""

    def __init__(self, name, server, relay_ip, peer, client, cluster, bind=None, ns=None,
                 mask=None):
        self.name = name
        self.server = server            # (host, port) the TURN listener binds and serves
        self.relay_ip = relay_ip        # relay address (advertised and bound)
        self.peer = peer                # "host:port" of the echo peer
        self.client = client            # turnbench's source address
        self.cluster = cluster          # the peer cluster's endpoints (the allowlist)
        self.bind = bind                # the listener's bind_address, None = its address
        self.mask = mask                # relay_address_mask of the symmetric tests: an
        #                                 address nothing holds, as a load balancer's
        self.ns = ns or {}
        self.rps = {}                   # role -> CPU list its veth ends steer receives to

    def prefix(self, role):
        """Command prefix that runs a program in role's namespace ([] on loopback)."""
        ns = self.ns.get(role)
        return ["nsenter", f"--net={NETNS_DIR}/{ns}", "--"] if ns else []

    @contextlib.contextmanager
    def entered(self, role):
        """The calling thread in role's namespace for the block: sockets created inside stay
        there, files under /proc/thread-self/net read its counters."""
        ns = self.ns.get(role)
        if not ns:
            yield
            return
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        fd = os.open(f"{NETNS_DIR}/{ns}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                e = ctypes.get_errno()
                raise OSError(e, f"setns {ns}: {os.strerror(e)}")
            yield
        finally:
            back = libc.setns(own, CLONE_NEWNET)
            os.close(fd)
            os.close(own)
            if back != 0:   # the thread would stay in the wrong namespace: stop here
                raise OSError(ctypes.get_errno(), "setns back to the original namespace")

    def udp_counter(self, key):
        """A Udp: counter of /proc/net/snmp summed over the layout's namespaces."""
        total = 0
        for role in sorted(set(self.ns) or {None}):
            with self.entered(role):
                try:
                    with open("/proc/thread-self/net/snmp") as f:
                        rows = [l.split() for l in f if l.startswith("Udp:")]
                    total += int(rows[1][rows[0].index(key)])
                except (OSError, ValueError, IndexError):
                    pass
        return total

    def describe(self):
        if not self.ns:
            return (f"loopback: server {self.server[0]}:{self.server[1]}, relay "
                    f"{self.relay_ip}, peer {self.peer}, clients {self.client}")
        return (f"network namespaces {self.ns['client']}/{self.ns['server']}/"
                f"{self.ns['peer']} joined by veth pairs: client {self.client} -> server "
                f"{self.server[0]}:{self.server[1]} (bind_address), relay {self.relay_ip} "
                f"(listener address) -> peer {self.peer}; the server namespace forwards, so "
                "`direct` is routed through it" +
                ("; RPS: " + ", ".join(f"{r} receives on CPU {c}" for r, c in self.rps.items())
                 if self.rps else ""))

    def close(self):
        """Deletes the namespaces (and with them the veth pairs); idempotent."""
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL, timeout=30)
        self.ns = {}


def loopback(port=13478, peer_port=13500):
    return Topology("loopback", ("127.0.0.1", port), "127.0.0.1", f"127.0.0.1:{peer_port}",
                    "127.0.0.2", ["127.0.0.1"], mask="127.0.0.9")


def _ip(*argv):
    subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=30)


SIOCETHTOOL = 0x8946
ETHTOOL_SGRO = 0x2c


def ethtool_set(dev, cmd, on):
    """ethtool -K dev (feature cmd, e.g. ETHTOOL_SGRO) on|off in the calling thread's
    namespace (ethtool itself need not be installed)."""
    ev = ctypes.create_string_buffer(struct.pack("II", cmd, 1 if on else 0))
    ifr = struct.pack("16sP", dev.encode(), ctypes.addressof(ev)) + bytes(16)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        fcntl.ioctl(s.fileno(), SIOCETHTOOL, ifr)
    finally:
        s.close()


def cpu_mask(cpus):
    """taskset-style list ("0", "1-3,5") -> the hex mask sysfs's rps_cpus takes."""
    mask = 0
    for part in cpus.split(","):
        lo, _, hi = part.strip().partition("-")
        for c in range(int(lo), int(hi or lo) + 1):
            mask |= 1 << c
    return "%x" % mask


def netns(port=13478, peer_port=13500, tag=None, gro=False, rps=None):
    """Creates the three namespaces and the veth pairs; returns the Topology (close it).
    Namespace names carry tag (default: this process's PID), so runs never collide. gro:
    GRO on at the client's and the peer's veth ends, so that they take frames an XDP
    program redirects to the server's ends (docs/offload.md). rps: role -> taskset CPU
    list; each of that namespace's veth ends hands what it receives to those CPUs (RPS),
    as a machine's NIC interrupts land on its own cores; the receive work (routing, TC
    programs, socket delivery) then runs there instead of in the sender's softirq."""
    tag = tag or str(os.getpid())
    names = {r: f"tgb{tag}{r[0]}" for r in ("client", "server", "peer")}
    topo = Topology("netns", ("10.78.1.1", port), "10.78.2.1", f"10.78.2.2:{peer_port}",
                    "10.78.1.2", ["10.78.2.2"], bind="10.78.1.1", ns={}, mask="10.78.1.9")
    c, s, p = names["client"], names["server"], names["peer"]
    try:
        for role, ns in names.items():
            _ip("netns", "add", ns)
            topo.ns[role] = ns      # from here on close() deletes it
        _ip("link", "add", "tgb-c", "netns", c, "type", "veth", "peer", "name", "tgb-sc",
            "netns", s)
        _ip("link", "add", "tgb-sp", "netns", s, "type", "veth", "peer", "name", "tgb-p",
            "netns", p)
        for ns, dev, addr in ((c, "tgb-c", "10.78.1.2/24"), (s, "tgb-sc", "10.78.1.1/24"),
                              (s, "tgb-sp", "10.78.2.1/24"), (p, "tgb-p", "10.78.2.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        for ns in (c, s, p):
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", c, "route", "add", "default", "via", "10.78.1.1")
        _ip("-n", p, "route", "add", "default", "via", "10.78.2.1")
        subprocess.run(["nsenter", f"--net={NETNS_DIR}/{s}", "--", "sysctl", "-qw",
                        "net.ipv4.ip_forward=1"], check=True, capture_output=True, timeout=30)
        for role, dev in (("client", "tgb-c"), ("peer", "tgb-p")) if gro else ():
            with topo.entered(role):
                ethtool_set(dev, ETHTOOL_SGRO, True)
        for role, devs in (("client", ("tgb-c",)), ("server", ("tgb-sc", "tgb-sp")),
                           ("peer", ("tgb-p",))):
            cpus = (rps or {}).get(role)
            if cpus:
                topo.rps[role] = cpus
            for dev in devs if cpus else ():
                # sysfs shows the namespace of whoever mounted it: ip netns exec mounts
                # the namespace's own in a private mount namespace (bpffs is not needed).
                _ip("netns", "exec", names[role], "sh", "-c",
                    f"echo {cpu_mask(cpus)} > /sys/class/net/{dev}/queues/rx-0/rps_cpus")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        topo.close()
        err = getattr(e, "stderr", b"") or b""
        raise RuntimeError(f"network namespaces: {e}: {err.decode(errors='replace').strip()}")
    return topo
