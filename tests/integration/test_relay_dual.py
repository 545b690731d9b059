"""The relay address of the other family of a dual-stack allocation (RFC 8656
ADDITIONAL-ADDRESS-FAMILY) comes from the listener's own interface (#35, finding 8).

The test moves into a network namespace of its own (unshare(CLONE_NEWNET), root) with two
veth pairs, the first made first (so its addresses come first in getifaddrs):

- tgo ("other"): 10.9.0.1/8 and fd00:b::1/64. Its network 10.0.0.0/8 contains the
  listeners' addresses below without holding them.
- tgn ("own"): 10.9.9.9/24 and fd00:a::1/64, the `own` listener's address.
- tgb ("bare"): 10.8.8.8/24 and no IPv6 address but its link-local one.

An Allocate with ADDITIONAL-ADDRESS-FAMILY IPv6 on the listener at 10.9.9.9 gets fd00:a::1
(tgn's), never fd00:b::1 (tgo's, whose network merely contains 10.9.9.9); on the listener at
10.8.8.8 it gets its IPv4 relay and ADDRESS-ERROR-CODE 440 (its interface has no usable IPv6
address; tgo's is not taken instead); on 127.0.0.4 (local through lo's 127.0.0.0/8, listed
nowhere) it gets ::1 from lo. REQUESTED-ADDRESS-FAMILY IPv6 alone gets the same address as
the dual allocation. A listener's `dual_stack_address` is announced instead, whether local
(fd00:a::1 on 10.8.8.8's listener) or not (2001:db8::5). Without root it SKIPs (exit 77)
and says why.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_ADDITIONAL_FAMILY, CLONE_NEWNET, REALM, SECRET, Client,  # noqa: E402
                           Daemon, check, error_code, run_tests_as_root, unshare)

PORT = 3478
A_REQUESTED_FAMILY, A_ADDRESS_ERROR = 0x0017, 0x8001
IFACES = (("tgo", "10.9.0.1/8", "fd00:b::1/64"), ("tgn", "10.9.9.9/24", "fd00:a::1/64"),
          ("tgb", "10.8.8.8/24", None))


def own_namespace():
    unshare(CLONE_NEWNET)
    for dev, v4, v6 in IFACES:
        subprocess.run(["ip", "link", "add", dev, "type", "veth", "peer", "name", dev + "p"],
                       check=True)
        for d in (dev, dev + "p"):
            subprocess.run(["ip", "link", "set", d, "up"], check=True)
        subprocess.run(["ip", "addr", "add", v4, "dev", dev], check=True)
        if v6:
            subprocess.run(["ip", "addr", "add", v6, "dev", dev, "nodad"], check=True)


def config(d):
    text = ("version: v1\nadmin:\n  name: dual\n  loglevel: all:INFO\n  workers: 1\n"
            "  admin_socket: %s/admin.sock\n  healthcheck_endpoint: \"\"\n  drain_timeout: 1\n"
            "  relay_port_min: 50000\n  relay_port_max: 50999\n"
            "auth:\n  type: ephemeral\n  realm: %s\n  credentials:\n    secret: %s\n"
            "listeners:\n" % (d, REALM, SECRET))
    for name, ip, port, dual in (("own", "10.9.9.9", PORT, None),
                                 ("bare", "10.8.8.8", PORT, None),
                                 ("lo4", "127.0.0.4", PORT, None),
                                 ("conf", "10.8.8.8", PORT + 1, "fd00:a::1"),
                                 ("far", "10.9.9.9", PORT + 1, "2001:db8::5")):
        text += ("  - name: %s\n    protocol: TURN-UDP\n    address: %s\n    port: %d\n"
                 "    routes: [any]\n" % (name, ip, port))
        if dual:
            text += "    dual_stack_address: %s\n" % dual
    return text + ("clusters:\n  - name: any\n    type: STATIC\n"
                   "    endpoints: [\"10.0.0.0/8\", \"fd00::/8\"]\n")


def relays(server, extra, port=PORT):
    c = Client(port, server=server, bind=server)
    try:
        r = c.allocate(extra)
        return [ip for ip, _ in c.relayed(r)], A_ADDRESS_ERROR in r[3]
    finally:
        c.close()


def test_dual_relay_from_own_interface(d):
    daemon = Daemon(d, config(d), workers=1).start()
    try:
        dual = [(A_ADDITIONAL_FAMILY, bytes([2, 0, 0, 0]))]
        got = relays("10.9.9.9", dual)
        check(got == (["10.9.9.9", "fd00:a::1"], False),
              "dual allocation on 10.9.9.9 (own interface tgn has fd00:a::1): %r" % (got,))
        got = relays("10.8.8.8", dual)
        check(got == (["10.8.8.8"], True),
              "dual allocation on 10.8.8.8 (its interface has no IPv6): %r" % (got,))
        got = relays("127.0.0.4", dual)
        check(got == (["127.0.0.4", "::1"], False), "dual allocation on 127.0.0.4: %r" % (got,))
        # dual_stack_address: the configured address, local (bound to it) or not (the
        # relay socket takes the wildcard, as for a non-local `address`).
        got = relays("10.8.8.8", dual, PORT + 1)
        check(got == (["10.8.8.8", "fd00:a::1"], False),
              "dual allocation with dual_stack_address fd00:a::1: %r" % (got,))
        got = relays("10.9.9.9", dual, PORT + 1)
        check(got == (["10.9.9.9", "2001:db8::5"], False),
              "dual allocation with dual_stack_address 2001:db8::5: %r" % (got,))
        c = Client(PORT, server="10.9.9.9", bind="10.9.9.9")
        r = c.allocate([(A_REQUESTED_FAMILY, bytes([2, 0, 0, 0]))])
        check([ip for ip, _ in c.relayed(r)] == ["fd00:a::1"] and error_code(r[3]) is None,
              "REQUESTED-ADDRESS-FAMILY IPv6 on 10.9.9.9: %r" % (c.relayed(r),))
        c.close()
    finally:
        daemon.stop()


if __name__ == "__main__":
    run_tests_as_root([test_dual_relay_from_own_interface],
                      "its own network namespace (veth pairs with IPv4 and IPv6 addresses)",
                      own_namespace)
