"""test_siblings.py's whole sequence over IPv6 (issue 22, admin.siblings), through the running
daemons.

Two IPv6 instances need two IPv6 addresses, and a host's lo has only ::1, so this test moves
into a network namespace of its own (unshare(CLONE_NEWNET), root) and gives its lo
fd7a:22::1 (instance A), fd7a:22::3 (instance B) and fd7a:22::5 (a source that is no
sibling). Both listeners announce relay_address_mask fd7a:22::9, which nothing holds; in
this namespace a datagram wrongly sent there goes nowhere. Everything else is as in
test_siblings.py: the listing, the exchange with exact sibling counters, the missing
permission, the port in no slice, the sources that are no sibling, the reload. Without root
it SKIPs (exit 77) and says why.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import CLONE_NEWNET, run_tests_as_root, unshare  # noqa: E402
from test_siblings import Net, run_siblings  # noqa: E402

V6 = Net("fd7a:22::1", "fd7a:22::3", "fd7a:22::9", "fd7a:22::5")


def own_namespace():
    """This process (and the daemons it starts) in a new network namespace whose lo holds
    127.0.0.1, ::1 and the test's addresses."""
    unshare(CLONE_NEWNET)
    for ip in (V6.a, V6.b, V6.other):
        # nodad: usable at once (no duplicate address detection on lo anyway).
        subprocess.run(["ip", "-6", "addr", "add", ip + "/128", "dev", "lo", "nodad"],
                       check=True)


def test_siblings_v6(d):
    run_siblings(d, V6)


if __name__ == "__main__":
    run_tests_as_root([test_siblings_v6], "its own network namespace (two IPv6 addresses on "
                      "lo)", own_namespace)
