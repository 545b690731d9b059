"""Socket buffers of a real turngated (docs/performance.md): the UDP listener sockets ask
for 4 MiB and the relay sockets for 1 MiB of receive and send buffer. Read back with
`ss -m` (iproute2): the kernel reports twice the granted size, and without CAP_NET_ADMIN
grants at most net.core.[rw]mem_max, so the check is against what this host permits."""
import os
import re
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import Daemon, check, config_yaml, free_port, run_tests  # noqa: E402
from test_metrics import SECRET, exact_client  # noqa: E402

MIB = 1024 * 1024


def sysctl(name):
    with open("/proc/sys/net/core/" + name) as f:
        return int(f.read())


def skmem(port):
    """(rb, tb) of every UDP socket bound to 127.0.0.1:port."""
    out = subprocess.run(["ss", "-uanmH", "sport = :%d" % port], capture_output=True,
                         text=True, timeout=10, check=True).stdout
    return [(int(a), int(b)) for a, b in re.findall(r"rb(\d+),t\d+,tb(\d+)", out)]


def want(req, limit):
    """Lowest size the kernel may report: 2 x the request, capped by the sysctl unless
    FORCE worked (then more, which also passes)."""
    return 2 * min(req, limit)


def start(d):
    """A daemon with one TURN-UDP listener and two workers; returns (port, daemon)."""
    check(shutil.which("ss") is not None, "ss missing: install the Debian package iproute2")
    # test_buffers_after_takeover's restart binds the listener and the relay port again:
    # both below the kernel's port-0 range, where no socket bound to port 0 meanwhile (a
    # test beside this one) can hold one. Relay ports 28300-28399: no other test's.
    port = free_port(late=True)
    text = config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")], workers=2,
                       secret=SECRET,
                       extra_admin="  relay_port_min: 28300\n  relay_port_max: 28399\n")
    return port, Daemon(d, text, workers=2).start()


def test_buffers(d):
    port, daemon = start(d)
    try:
        rmax, wmax = sysctl("rmem_max"), sysctl("wmem_max")
        lst = skmem(port)
        check(len(lst) == 2, "expected one listener socket per worker, got %r" % lst)
        for rb, tb in lst:
            check(rb >= want(4 * MIB, rmax) and tb >= want(4 * MIB, wmax),
                  "listener buffers %d/%d below 4 MiB (rmem_max %d)" % (rb, tb, rmax))
        c = exact_client(port)
        c.challenge()
        _, rport = c.relayed(c.allocate())[0]
        rel = skmem(rport)
        check(len(rel) == 1, "relay socket not found: %r" % rel)
        rb, tb = rel[0]
        check(rb >= want(MIB, rmax) and tb >= want(MIB, wmax),
              "relay buffers %d/%d below 1 MiB (rmem_max %d)" % (rb, tb, rmax))
        c.release()
        daemon.stop()
    finally:
        if daemon.proc.poll() is None:
            daemon.kill()


def test_buffers_after_takeover(d):
    """A restart's new worker binds the adopted relay socket first and sets its buffers
    once it has adopted everything (worker/adopt.c): they still end at 1 MiB."""
    port, daemon = start(d)
    try:
        rmax, wmax = sysctl("rmem_max"), sysctl("wmem_max")
        c = exact_client(port)
        c.challenge()
        _, rport = c.relayed(c.allocate())[0]
        daemon.kill()           # SIGKILL to the master; its workers leave the record LIVE
        deadline = time.monotonic() + 10
        while skmem(rport) and time.monotonic() < deadline:
            time.sleep(0.05)
        daemon.start()
        deadline = time.monotonic() + 10
        rel = []
        while time.monotonic() < deadline:
            rel = skmem(rport)
            if len(rel) == 1 and rel[0][0] >= want(MIB, rmax) and rel[0][1] >= want(MIB, wmax):
                break
            time.sleep(0.05)
        check(len(rel) == 1, "adopted relay socket not found: %r\n%s" % (rel, daemon.stderr()))
        rb, tb = rel[0]
        check(rb >= want(MIB, rmax) and tb >= want(MIB, wmax),
              "adopted relay buffers %d/%d below 1 MiB (rmem_max %d)" % (rb, tb, rmax))
        check("1 adopted" in daemon.stderr(), "no adoption:\n" + daemon.stderr())
        c.release()
        daemon.stop()
    finally:
        if daemon.proc.poll() is None:
            daemon.kill()


if __name__ == "__main__":
    run_tests([test_buffers, test_buffers_after_takeover])
