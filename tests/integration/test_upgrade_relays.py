"""A live upgrade hands the UDP allocations' relay sockets over (issue 42): the new workers
take the old workers' sockets instead of binding new ones.

300 UDP allocations through 2 workers; the kernel's socket of each relayed port (its inode
in /proc/net/udp) is noted, `turngatectl upgrade` runs (the same binary), and every relayed
port must still be held by the same socket, the only one on that port: nothing was closed
or bound again, and no allocation was lost (the new master lists all 300). A peer's
datagram to a handed-over relay port reaches its client as a Data indication, a Refresh
succeeds. Then an upgrade that fails after the old workers handed their sockets over (the
new binary's configuration names a listener on a port the test holds): the old master's
respawned workers take them back, again the same sockets, all 300 allocations, relaying.
On a build that binds the relay ports again every inode changes at the first upgrade.

Relay ports 44400-44799 (no other test's). Loopback only, every wait bounded.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import check, run_tests, upgrade  # noqa: E402
from harness_upgrade import (check_failed_upgrade, check_relaying,  # noqa: E402
                             check_same_sockets, relaying)

RELAY = (44400, 44799)
N = 300


def test_upgrade_hands_relay_sockets_over(d):
    with relaying(d, RELAY, N) as r:
        r.pid = upgrade(r.daemon, r.workers)
        check(len(r.daemon.allocations()) == N, "allocations listed after the upgrade")
        check_same_sockets(r.before, r.ports, "after the upgrade", RELAY)
        check("relay sockets handed over" in r.daemon.stderr(), "no hand-over in the log")
        check_relaying(r.sample, r.peer, "after the upgrade")
        check_failed_upgrade(d, r)


if __name__ == "__main__":
    run_tests([test_upgrade_hands_relay_sockets_over])
