"""DNS names re-resolved while the daemon runs (master/dns.c): STRICT_DNS endpoints and
admin.siblings given by name follow their names every 5 s, without a reload, as stunnerd's
STRICT_DNS clusters do.

The test runs in mount and network namespaces of its own (root): /etc/hosts,
/etc/resolv.conf and /etc/nsswitch.conf are bind-mounted from files of the test ("hosts:
files dns", nameserver 127.0.0.53 with a 1 s timeout), and a DNS server of the test on
127.0.0.53 either stays silent (a DNS outage) or answers NXDOMAIN. Checked:
- a STRICT_DNS endpoint whose name moves from 10.55.0.5 to 10.55.0.6 (addresses of the
  namespace's lo: a name that resolves to a loopback address is never admitted) in
  /etc/hosts: a
  CreatePermission for 10.55.0.6 is refused (403) and then, within a few rounds and with no
  reload, admitted, while 10.55.0.5 is now refused; the master logs the new address and its
  status counts the change;
- the name gone from /etc/hosts while the DNS server is silent: the rounds fail (counted),
  and 10.55.0.6 stays admitted (a DNS outage ends no call);
- the DNS server answers NXDOMAIN: the name resolves to nothing, 10.55.0.6 is refused, and
  a warning says so;
- a sibling given by name (b.sib.test) that pointed at the wrong address (127.0.0.4) while
  instance B relays on 127.0.0.3: once /etc/hosts says 127.0.0.3, A's status shows it and
  test_siblings.exchange passes (Send and ChannelData both ways, exact sibling counters),
  with no reload of either instance.
Without root it SKIPs (exit 77) and says why.
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (CLONE_NEWNET, CLONE_NEWNS, Client, Daemon, Failure,  # noqa: E402
                           check, error_code, free_port, relay_range, run_tests_as_root, unshare)
from dns_server import DnsServer, Resolver  # noqa: E402
from test_siblings import Allocated, Net, exchange, start_pair, stop_pair  # noqa: E402

PEERS = ("10.55.0.5", "10.55.0.6")  # on this namespace's lo
ROUND_WAIT = 20.0  # a few 5 s rounds


def own_namespaces():
    unshare(CLONE_NEWNS | CLONE_NEWNET)
    # The STRICT_DNS peers: a name resolving to a loopback address is never admitted.
    for ip in PEERS:
        subprocess.run(["ip", "addr", "add", ip + "/32", "dev", "lo"], check=True)


def eventually(pred, what, timeout=ROUND_WAIT):
    """Asks pred() twice a second until it holds; Failure after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    raise Failure("timed out waiting for " + what)


def dns_status(daemon):
    return daemon.admin({"cmd": "status"})["dns"]


def admitted(c, ip):
    """CreatePermission for ip: True (success) or False (403); anything else fails."""
    code = error_code(c.perm(ip)[3])
    check(code in (None, 403), "CreatePermission %s: %r" % (ip, code))
    return code is None


def strict_dns_config(d, port):
    lo, hi = relay_range()
    return ("version: v1\nadmin:\n  name: dns\n  loglevel: all:INFO\n  workers: 1\n"
            "  admin_socket: %s/admin.sock\n  drain_timeout: 1\n  healthcheck_endpoint: \"\"\n"
            "  relay_port_min: %d\n  relay_port_max: %d\n"
            "auth:\n  type: ephemeral\n  realm: sec.realm\n  credentials:\n    secret: sec-s3cret\n"
            "listeners:\n  - name: udp\n    protocol: TURN-UDP\n    address: 127.0.0.1\n"
            "    port: %d\n    routes: [media]\n"
            "clusters:\n  - name: media\n    type: STRICT_DNS\n    endpoints: [peer.dns.test]\n"
            % (d, lo, hi, port))


def strict_dns(d, files, dns):
    files.hosts({"peer.dns.test": "10.55.0.5"})
    os.mkdir(d)
    port = free_port()
    daemon = Daemon(d, strict_dns_config(d, port), workers=1).start()
    c = Client(port, "alice")
    try:
        c.allocate()
        check(admitted(c, "10.55.0.5") and not admitted(c, "10.55.0.6"),
              "at start: 10.55.0.5 admitted, 10.55.0.6 refused")
        check(dns_status(daemon)["names"] == 1, "status dns: %r" % (dns_status(daemon),))
        changes = dns_status(daemon)["changes"]
        files.hosts({"peer.dns.test": "10.55.0.6"})
        eventually(lambda: admitted(c, "10.55.0.6"), "10.55.0.6 admitted without a reload")
        check(not admitted(c, "10.55.0.5"), "10.55.0.5 still admitted after the move")
        st = dns_status(daemon)
        check(st["changes"] == changes + 1, "status dns after the move: %r" % (st,))
        rc, out, err = daemon.ctl("status")
        line = [l for l in out.splitlines() if l.startswith("dns:")]
        check(rc == 0 and len(line) == 1 and line[0].split()[1:5] == ["1", "name", "every", "5"]
              and "changed %d," % st["changes"] in line[0],
              "turngatectl status: %r (%s)" % (line, err))
        # The name leaves /etc/hosts, the DNS server is silent: rounds fail, nothing changes.
        failures = st["failures"]
        files.hosts({})
        eventually(lambda: dns_status(daemon)["failures"] >= failures + 2,
                   "two failed rounds counted")
        check(admitted(c, "10.55.0.6"), "10.55.0.6 dropped by a DNS outage")
        check(dns_status(daemon)["changes"] == changes + 1, "a failed round changed something")
        # NXDOMAIN: the name has no address any more.
        dns.nxdomain = True
        eventually(lambda: not admitted(c, "10.55.0.6"), "10.55.0.6 refused after NXDOMAIN")
        c.close()
    finally:
        daemon.stop()
    with open(daemon.errpath) as f:
        log = f.read()
    check("dns: 'peer.dns.test' now resolves to 10.55.0.6" in log and
          "dns: 'peer.dns.test' no longer resolves" in log,
          "the master's log lacks the DNS lines:\n%s" % log[-2000:])
    print("STRICT_DNS endpoint followed its name: 10.55.0.5 -> 10.55.0.6 (no reload), kept "
          "through a DNS outage, dropped at NXDOMAIN", flush=True)


def siblings_by_name(d, files):
    names = ("a.sib.test", "b.sib.test")
    files.hosts({names[0]: "127.0.0.1", names[1]: "127.0.0.4"})
    os.mkdir(d)
    a, b = start_pair(d, Net("127.0.0.1", "127.0.0.3", "127.0.0.9", "127.0.0.5", names=names))
    try:
        def resolved_b():
            sibs = a.daemon.admin({"cmd": "status"})["siblings"]
            return [s["resolved"] for s in sibs if s["address"] == names[1]][0]
        check(resolved_b() == ["127.0.0.4"], "b.sib.test at start: %r" % (resolved_b(),))
        files.hosts({names[0]: "127.0.0.1", names[1]: "127.0.0.3"})
        eventually(lambda: resolved_b() == ["127.0.0.3"], "A sees b.sib.test at 127.0.0.3")
        pa, pb = Allocated(a, "alice"), Allocated(b, "bob")
        exchange(a, b, pa, pb)
        pa.c.close()
        pb.c.close()
    finally:
        stop_pair(a, b)
    print("sibling b.sib.test followed its name to 127.0.0.3 (no reload): the pair exchanged "
          "through the siblings, counters exact", flush=True)


def test_dns_refresh(d):
    files = Resolver(tempfile.mkdtemp(dir=d), timeout=1)
    dns = DnsServer()
    try:
        strict_dns(os.path.join(d, "strict"), files, dns)
        dns.nxdomain = False
        siblings_by_name(os.path.join(d, "sib"), files)
    finally:
        dns.close()


if __name__ == "__main__":
    run_tests_as_root([test_dns_refresh], "its own mount and network namespaces (its own "
                      "/etc/hosts and DNS server)", own_namespaces)
