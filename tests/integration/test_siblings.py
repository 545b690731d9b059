"""Two instances behind one mask, each the other's sibling (issue 22, admin.siblings), through
the running daemons.

Instance A relays on 127.0.0.1 with relay ports 49400-49599, instance B on 127.0.0.3 with
49600-49799 (windows of this test alone); both listeners announce relay_address_mask
127.0.0.9, a loopback address nothing binds (a datagram wrongly sent to the mask is lost).
Both configs carry one identical siblings list that names both instances, as one ConfigMap
serving every replica would, so each skips the entry that is itself. A client on A and a
client on B exchange Send indications and ChannelData both ways. Checked:
- XOR-RELAYED-ADDRESS carries the mask with a port of the instance's own slice; the admin
  `config` and `status` show the sibling list (this instance's entry as self, the other
  resolved);
- every datagram arrives once, every Data indication's XOR-PEER-ADDRESS is the sender's
  masked address, and the counters are exact: sibling_out on the sender, sibling_in on the
  receiver (turngate_sibling_packets_total in /metrics), no short circuit, no send error;
- no permission on the receiving side: translated (sibling_in), then dropped and counted as
  a permission denial;
- a masked address whose port is in no slice: ChannelBind 403, a Send dropped and counted
  as denied, nothing sent;
- datagrams from a source that is no sibling (another address, or a sibling's address with
  a port outside its slice) keep their source address;
- a reload of B without the sibling list stops the translation: A's datagrams then arrive
  with A's real relay address.
"""
import os
import socket
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Client, Daemon, Failure, check, error_code, free_port,  # noqa: E402
                           hostport, run_tests)
from test_short_circuit import expect_quiet, recv_all  # noqa: E402

A_SLICE, B_SLICE = (49400, 49599), (49600, 49799)
OUTSIDE = 40000  # a port in no slice


class Net:
    """The addresses of one run: instance A's and B's, the mask, and a source that is no
    sibling; names: what the siblings list gives for A and B (their IPs by default)."""

    def __init__(self, a, b, mask, other, names=None):
        self.a, self.b, self.mask, self.other = a, b, mask, other
        self.names = names or (a, b)


V4 = Net("127.0.0.1", "127.0.0.3", "127.0.0.9", "127.0.0.5")


def siblings_yaml(net):
    """The one list both configs carry."""
    return "  siblings:\n" + "".join(
        "    - address: %s\n      relay_port_min: %d\n      relay_port_max: %d\n"
        % (ip, lo, hi) for ip, (lo, hi) in zip(net.names, (A_SLICE, B_SLICE)))


def config(d, net, ip, port, relay, mport, siblings=True, workers=1):
    text = ("version: v1\nadmin:\n  name: sib\n  loglevel: all:INFO\n  workers: %d\n"
            "  admin_socket: %s/admin.sock\n  drain_timeout: 1\n  healthcheck_endpoint: \"\"\n"
            "  metrics_endpoint: \"http://127.0.0.1:%d/metrics\"\n"
            "  relay_port_min: %d\n  relay_port_max: %d\n"
            % (workers, d, mport, relay[0], relay[1]))
    if siblings:
        text += siblings_yaml(net)
    text += ("auth:\n  type: ephemeral\n  realm: sec.realm\n  credentials:\n    secret: sec-s3cret\n"
             "listeners:\n  - name: masked\n    protocol: TURN-UDP\n    address: %s\n"
             "    port: %d\n    routes: [peers]\n    relay_address_mask: %s\n"
             "clusters:\n  - name: peers\n    type: STATIC\n"
             "    endpoints: [\"%s\", \"%s\", \"%s\"]\n"
             % (ip, port, net.mask, net.mask, net.a, net.other))
    return text


class Instance:
    """One daemon in its own directory: ip, port (TURN), mport (metrics), relay slice."""

    def __init__(self, d, net, name, ip, relay, workers):
        self.dir = os.path.join(d, name)
        os.mkdir(self.dir)
        self.net, self.ip, self.relay, self.workers = net, ip, relay, workers
        self.port, self.mport = free_port(), free_port()
        self.daemon = Daemon(self.dir, self.text(), workers=workers).start()

    def text(self, siblings=True):
        return config(self.dir, self.net, self.ip, self.port, self.relay, self.mport,
                      siblings, self.workers)

    def stats(self):
        return self.daemon.admin({"cmd": "stats"})["counters"]

    def reload(self, siblings):
        self.daemon.write_config(self.text(siblings))
        r = self.daemon.admin({"cmd": "reload"})
        check(r.get("ok") is True, "reload failed: %r" % (r,))

    def metric(self, name):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.mport,
                                    timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return int(float(line.split()[1]))
        raise Failure("%s not in /metrics" % name)


class Allocated:
    """A client of instance inst with its allocation: relayed (the masked address) and
    internal (its relay socket's real address, from the admin listing)."""

    def __init__(self, inst, user):
        self.c = Client(inst.port, user, server=inst.ip)
        r = self.c.allocate()
        self.relayed = self.c.relayed(r)[0]
        rec = self.c.record(inst.daemon)
        check(rec is not None,
              "allocation of %s not listed" % hostport(self.c.sock.getsockname()))
        ip, port = rec["relay_internal"].rsplit(":", 1)
        self.internal = (ip.strip("[]"), int(port))

    def perm(self, ip, port=9):
        r = self.c.perm(ip, port)
        check(error_code(r[3]) is None, "CreatePermission %s: %r" % (ip, error_code(r[3])))


def wait_counts(inst, want, timeout=5.0):
    """Polls the stats until every counter in want has exactly its value (a worker counts a
    datagram right after the send the test saw arrive)."""
    deadline = time.monotonic() + timeout
    while True:
        got = inst.stats()
        diff = {k: (got[k], v) for k, v in want.items() if got[k] != v}
        if not diff:
            return got
        check(time.monotonic() < deadline and all(g < v for g, v in diff.values()),
              "%s counters (got, want): %r" % (inst.ip, diff))
        time.sleep(0.05)


def grow(before, **delta):
    return {k: before[k] + v for k, v in delta.items()}


def start_pair(d, net):
    a = Instance(d, net, "a", net.a, A_SLICE, 1)
    try:
        b = Instance(d, net, "b", net.b, B_SLICE, 2)
    except Exception:
        a.daemon.stop(check_clean=False)
        raise
    return a, b


def stop_pair(a, b):
    for inst in (a, b):
        inst.daemon.stop()


def check_listing(inst, other):
    """Both outputs show the list: this instance's entry as self, the other resolved."""
    for sibs in (inst.daemon.admin({"cmd": "config"})["config"]["admin"]["siblings"],
                 inst.daemon.admin({"cmd": "status"})["siblings"]):
        by_addr = {s["address"]: s for s in sibs}
        me, it = by_addr[inst.ip], by_addr[other.ip]
        check(me["self"] is True and me["resolved"] == [] and
              (me["relay_port_min"], me["relay_port_max"]) == inst.relay,
              "own entry %r" % (me,))
        check(it["self"] is False and it["resolved"] == [other.ip] and
              (it["relay_port_min"], it["relay_port_max"]) == other.relay,
              "sibling entry %r" % (it,))
    rc, out, err = inst.daemon.ctl("status")
    want = ["sibling:        %s %d-%d: this instance" % ((inst.ip,) + inst.relay),
            "sibling:        %s %d-%d: %s" % ((other.ip,) + other.relay + (other.ip,))]
    got = [l for l in out.splitlines() if l.startswith("sibling:")]
    check(rc == 0 and sorted(got) == sorted(want), "turngatectl status: %r (%s)" % (got, err))


def exchange(a, b, pa, pb, n=5):
    """Send indications, then ChannelData, both ways; exact counts on both instances."""
    mask = a.net.mask
    pa.perm(mask)
    pb.perm(mask)
    ca0, cb0 = a.stats(), b.stats()
    for (x, px), (y, py) in (((a, pa), (b, pb)), ((b, pb), (a, pa))):
        for i in range(n):
            px.c.send(mask, py.relayed[1], b"send-%d" % i)
        got = recv_all(py, n + 1, 2.0)
        check(got == [("data", px.relayed, b"send-%d" % i) for i in range(n)],
              "Send %r -> %r: %r" % (px.relayed, py.relayed, got))
    for px, py, ch in ((pa, pb, 0x4001), (pb, pa, 0x4002)):
        r = px.c.bind(mask, py.relayed[1], ch)
        check(error_code(r[3]) is None, "ChannelBind: %r" % (error_code(r[3]),))
    for px, py, cx, cy in ((pa, pb, 0x4001, 0x4002), (pb, pa, 0x4002, 0x4001)):
        for i in range(n):
            px.c.channel_data(cx, b"chan-%d" % i)
        got = recv_all(py, n + 1, 2.0)
        check(got == [("chan", cy, b"chan-%d" % i) for i in range(n)],
              "ChannelData %r -> %r: %r" % (px.relayed, py.relayed, got))
    for inst, before in ((a, ca0), (b, cb0)):
        wait_counts(inst, grow(before, sibling_out=2 * n, sibling_in=2 * n,
                               peer_pkts_out=2 * n, peer_pkts_in=2 * n, short_circuit=0,
                               err_send=0, perm_denied=0))
        check(inst.metric('turngate_sibling_packets_total{direction="out"}') ==
              inst.stats()["sibling_out"], "metric and stats disagree")


def no_permission(a, b, pa):
    """B's client holds no permission for A's masked address: translated, then dropped."""
    pc = Allocated(b, "carol")
    mask = a.net.mask
    pa.perm(mask)
    ca0, cb0 = a.stats(), b.stats()
    for i in range(3):
        pa.c.send(mask, pc.relayed[1], b"no-perm-%d" % i)
    expect_quiet(pc)
    wait_counts(a, grow(ca0, sibling_out=3, err_send=0, perm_denied=0))
    wait_counts(b, grow(cb0, sibling_in=3, perm_denied=3, peer_pkts_in=3))
    pc.c.close()


def outside_every_slice(a, pa):
    """The mask with a port of no instance: refused as an unadmitted peer (CreatePermission is
    by IP, so it stays admitted by the routes)."""
    mask = a.net.mask
    ca0 = a.stats()
    r = pa.c.bind(mask, OUTSIDE, 0x4005)
    check(error_code(r[3]) == 403,
          "ChannelBind to %s:%d: %r" % (mask, OUTSIDE, error_code(r[3])))
    pa.perm(mask, OUTSIDE)
    pa.c.send(mask, OUTSIDE, b"nowhere")
    wait_counts(a, grow(ca0, perm_denied=2, sibling_out=0, peer_pkts_out=0, err_send=0))


def port_outside(lo_hi_list):
    """A port free on 127.0.0.1 in none of the slices."""
    for _ in range(50):
        p = free_port()
        if all(not lo <= p <= hi for lo, hi in lo_hi_list):
            return p
    raise Failure("no port outside the slices")


def not_siblings(b, pb):
    """Sources that are no sibling reach B's client with their own address."""
    net = b.net
    pb.perm(net.other)
    pb.perm(net.a)
    cb0 = b.stats()
    for ip, port in ((net.other, 0), (net.a, port_outside((A_SLICE, B_SLICE)))):
        s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind((ip, port))
            s.sendto(b"plain", pb.internal)
            got = recv_all(pb, 2, 2.0)
            check(got == [("data", s.getsockname()[:2], b"plain")],
                  "from %r: %r" % (s.getsockname(), got))
        finally:
            s.close()
    wait_counts(b, grow(cb0, sibling_in=0, peer_pkts_in=2))


def reload_removes(a, b, pa, pb):
    """B forgets its siblings: A's datagrams arrive from A's real relay address."""
    pb.perm(a.net.a)
    b.reload(siblings=False)
    check(b.daemon.admin({"cmd": "status"})["siblings"] == [], "siblings after the reload")
    ca0, cb0 = a.stats(), b.stats()
    pa.c.send(a.net.mask, pb.relayed[1], b"after")
    got = recv_all(pb, 2, 2.0)
    check(got == [("data", pa.internal, b"after")], "after the reload: %r" % (got,))
    wait_counts(a, grow(ca0, sibling_out=1))
    wait_counts(b, grow(cb0, sibling_in=0, peer_pkts_in=1))


def run_siblings(d, net):
    """The whole sequence for the addresses of net."""
    a, b = start_pair(d, net)
    try:
        check_listing(a, b)
        check_listing(b, a)
        pa, pb = Allocated(a, "alice"), Allocated(b, "bob")
        for p, inst in ((pa, a), (pb, b)):
            lo, hi = inst.relay
            check(p.relayed[0] == net.mask and lo <= p.relayed[1] <= hi,
                  "XOR-RELAYED-ADDRESS %r, expected %s with a port in %r"
                  % (p.relayed, net.mask, inst.relay))
            check(p.internal[0] == inst.ip, "relay_internal %r" % (p.internal,))
        exchange(a, b, pa, pb)
        no_permission(a, b, pa)
        outside_every_slice(a, pa)
        not_siblings(b, pb)
        reload_removes(a, b, pa, pb)
        pa.c.close()
        pb.c.close()
    finally:
        stop_pair(a, b)


def test_siblings(d):
    run_siblings(d, V4)


if __name__ == "__main__":
    run_tests([test_siblings])
