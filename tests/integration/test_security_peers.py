"""Hostile peer addresses and attributes after MESSAGE-INTEGRITY against the real daemon.

Derived from coturn's security history (CVE-2020-26262, CVE-2026-27624, 4.13.1 #1945-#1947,
commit ab762f33): a cluster of 0.0.0.0/0 and ::/0 must still refuse loopback, unspecified,
link-local, metadata and multicast peers in every IPv6 disguise, through CreatePermission,
ChannelBind and Send indications; an explicitly listed 127.0.0.1 / ::1 is admitted; and
attributes appended after MESSAGE-INTEGRITY change nothing. The rest of the IANA
special-purpose registries and the cloud metadata addresses are refused as well (#35), the
pod ranges are not, and a cluster admits a category by name (admit_special).
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_ADDITIONAL_FAMILY, A_LIFETIME, A_PEER, Client, Daemon,  # noqa: E402
                           Peer, check, config, error_code, free_port, relay_range, run_tests,
                           xor_addr)

# (address, where a datagram that leaked would land: a local IP we can listen on, or None)
DISGUISES = [
    ("0.0.0.0", "127.0.0.1"), ("::", "::1"), ("::1", "::1"), ("127.0.0.1", "127.0.0.1"),
    ("::ffff:127.0.0.1", "127.0.0.1"), ("::127.0.0.1", "127.0.0.1"),
    ("2002:7f00:1::1", "127.0.0.1"), ("64:ff9b::7f00:1", "127.0.0.1"),
    ("169.254.169.254", None), ("fe80::1", None), ("224.0.0.1", None), ("ff02::1", None),
    ("::ffff:0.0.0.0", "127.0.0.1"), ("::ffff:169.254.169.254", None), ("127.0.0.2", None),
]
DUAL = [(A_ADDITIONAL_FAMILY, bytes([2, 0, 0, 0]))]  # IPv4 + IPv6 relay: no 443 shortcut


# The rest of the IANA special-purpose registries and the cloud metadata addresses (#35):
# refused through 0.0.0.0/0 and ::/0 as the ranges above are.
REGISTRY = ["fd00:ec2::254", "fd00:ec2::23", "100.100.100.200", "fd20:ce::254", "fec0::1",
            "64:ff9b:1::1", "::ffff:0:0:1", "192.0.0.170", "192.0.0.192", "198.18.0.1",
            "169.254.170.2", "168.63.129.16", "2001:db8::1", "192.0.2.1", "100::1",
            "2001:1::2", "2002:a00:1::1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "240.0.0.1",
            "255.255.255.255", "3fff::1", "5f00::1"]
# The private ranges where pod networks live stay admissible through ordinary routes.
PODS = ["10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "fd00::1", "fd00:ec2::253"]


def start(d):
    port_open, port_lo = free_port(), free_port()
    text = config(d, [("open", port_open, "TURN-UDP", ["world"]),
                      ("lo", port_lo, "TURN-UDP", ["world", "loopback"])],
                  {"world": ["0.0.0.0/0", "::/0"], "loopback": ["127.0.0.1", "::1"]},
                  relay=relay_range())
    return Daemon(d, text).start(), port_open, port_lo


def test_disguised_peers_refused(d):
    daemon, port_open, _ = start(d)
    sinks = {"127.0.0.1": Peer("127.0.0.1"), }
    sinks["::1"] = Peer("::1", sinks["127.0.0.1"].port)
    pport = sinks["127.0.0.1"].port
    c = Client(port_open)
    try:
        r = c.allocate(DUAL)
        check(len(c.relayed(r)) == 2, "dual-stack allocation expected: %r" % (c.relayed(r),))
        before = daemon.admin({"cmd": "stats"})["counters"]
        for i, (ip, sink) in enumerate(DISGUISES):
            r = c.perm(ip, pport)
            check(error_code(r[3]) == 403, "CreatePermission %s: %r" % (ip, error_code(r[3])))
            r = c.bind(ip, pport, 0x4000 + i)
            check(error_code(r[3]) == 403, "ChannelBind %s: %r" % (ip, error_code(r[3])))
            c.send(ip, pport, b"leak-send-" + ip.encode())
            c.channel_data(0x4000 + i, b"leak-chan-" + ip.encode())
        for name, s in sinks.items():
            got = s.drain(1.0)
            check(got == [], "datagrams reached %s: %r" % (name, got))
        after = daemon.admin({"cmd": "stats"})["counters"]
        print("counters before/after: %s" % {k: (before.get(k), after[k]) for k in after
                                             if before.get(k) != after[k]})
        # A good peer on the same allocation still works: the refusals broke nothing.
        r = c.perm("10.1.2.3", 9)
        check(error_code(r[3]) is None, "ordinary peer 10.1.2.3 refused: %r" % (r,))
    finally:
        c.close()
        for s in sinks.values():
            s.close()
        daemon.stop()


def test_explicit_loopback_admitted(d):
    daemon, _, port_lo = start(d)
    v4, v6 = Peer("127.0.0.1"), Peer("::1")
    c = Client(port_lo)
    try:
        c.allocate(DUAL)
        for ip, sink, ch in (("127.0.0.1", v4, 0x4001), ("::1", v6, 0x4002)):
            r = c.perm(ip, sink.port)
            check(error_code(r[3]) is None, "listed %s refused: %r" % (ip, error_code(r[3])))
            c.send(ip, sink.port, b"hello " + ip.encode())
            got = sink.drain(1.0)
            check([g[0] for g in got] == [b"hello " + ip.encode()], "Send to %s: %r" % (ip, got))
            r = c.bind(ip, sink.port, ch)
            check(error_code(r[3]) is None, "ChannelBind %s: %r" % (ip, error_code(r[3])))
            c.channel_data(ch, b"chan " + ip.encode())
            got = sink.drain(1.0)
            check([g[0] for g in got] == [b"chan " + ip.encode()], "ChannelData %s: %r"
                  % (ip, got))
            # and back: the peer's answer reaches the client
            sink.sock.sendto(b"back", got[0][1])
            check(c.recv_data(1.0) == b"back", "peer -> client through %s" % ip)
        # Listing 127.0.0.1 admits exactly that: the rest of the special ranges stay refused.
        for ip in ("127.0.0.2", "169.254.169.254", "0.0.0.0", "fe80::1", "ff02::1"):
            r = c.perm(ip, 9)
            check(error_code(r[3]) == 403, "listed-loopback listener admitted %s: %r"
                  % (ip, error_code(r[3])))
    finally:
        c.close()
        v4.close()
        v6.close()
        daemon.stop()


def start_admit(d):
    """open: 0.0.0.0/0 and ::/0; meta: the same plus a cluster of the pod ranges that names
    metadata in admit_special."""
    port_open, port_meta = free_port(), free_port()
    text = config(d, [("open", port_open, "TURN-UDP", ["world"]),
                      ("meta", port_meta, "TURN-UDP", ["world", "cloud"])],
                  {"world": ["0.0.0.0/0", "::/0"], "cloud": ["100.64.0.0/10", "fd00::/8"]},
                  relay=relay_range())
    text = text.replace("  - name: cloud\n    type: STATIC\n",
                        "  - name: cloud\n    type: STATIC\n    admit_special: [metadata]\n")
    return Daemon(d, text).start(), port_open, port_meta


def test_special_registry_refused(d):
    daemon, port_open, port_meta = start_admit(d)
    c, m = Client(port_open), Client(port_meta)
    try:
        c.allocate(DUAL)
        m.allocate(DUAL)
        before = daemon.admin({"cmd": "stats"})["counters"].get("perm_denied", 0)
        for i, ip in enumerate(REGISTRY):
            r = c.perm(ip, 80)
            check(error_code(r[3]) == 403, "CreatePermission %s: %r" % (ip, error_code(r[3])))
            r = c.bind(ip, 80, 0x4000 + i)
            check(error_code(r[3]) == 403, "ChannelBind %s: %r" % (ip, error_code(r[3])))
        after = daemon.admin({"cmd": "stats"})["counters"].get("perm_denied", 0)
        check(after - before >= 2 * len(REGISTRY), "perm_denied %d -> %d" % (before, after))
        for ip in PODS:
            r = c.perm(ip, 80)
            check(error_code(r[3]) is None, "pod address %s refused: %r" % (ip, r))
        # admit_special: [metadata] on a cluster whose routes cover them admits exactly them
        for ip in ("100.100.100.200", "fd00:ec2::254", "fd20:ce::254"):
            r = m.perm(ip, 80)
            check(error_code(r[3]) is None, "admit_special: %s refused: %r"
                  % (ip, error_code(r[3])))
        for ip in ("169.254.169.254", "127.0.0.1", "fec0::1", "192.0.0.170", "::ffff:0:0:1"):
            r = m.perm(ip, 80)
            check(error_code(r[3]) == 403, "admit_special [metadata] admitted %s: %r"
                  % (ip, error_code(r[3])))
    finally:
        c.close()
        m.close()
        daemon.stop()


def test_attributes_after_mi_ignored(d):
    daemon, _, port_lo = start(d)
    v4, v6 = Peer("127.0.0.1"), Peer("::1")
    c = Client(port_lo)
    try:
        c.allocate(DUAL)
        # Refresh LIFETIME 600 with a LIFETIME 0 after MI: the allocation must live on.
        r = c.request(4, [(A_LIFETIME, struct.pack("!I", 600))],
                      after_mi=[(A_LIFETIME, struct.pack("!I", 0))])
        check(error_code(r[3]) is None, "Refresh with trailing LIFETIME: %r" % (r,))
        lt = struct.unpack("!I", r[3][A_LIFETIME][0])[0]
        check(lt == 600, "Refresh answered lifetime %d, not the pre-MI 600" % lt)
        # CreatePermission for 127.0.0.1 with ::1 (also listed) appended after MI: only the
        # pre-MI peer gets a permission.
        r = c.perm("127.0.0.1", v4.port,
                   after_mi=[(A_PEER, lambda tid: xor_addr("::1", v6.port, tid))])
        check(error_code(r[3]) is None, "CreatePermission with trailing peer: %r" % (r,))
        c.send("127.0.0.1", v4.port, b"pre-mi")
        c.send("::1", v6.port, b"post-mi")
        check([g[0] for g in v4.drain(1.0)] == [b"pre-mi"], "pre-MI peer has no permission")
        got = v6.drain(1.0)
        check(got == [], "a peer appended after MI got a permission: %r" % (got,))
        # A refused peer appended after MI cannot spoil a good request either way, and a
        # refused peer before MI is not rescued by a good one after it.
        r = c.perm("127.0.0.1", 9, after_mi=[(A_PEER, lambda tid:
                                               xor_addr("169.254.169.254", 80, tid))])
        check(error_code(r[3]) is None, "trailing refused peer changed the answer: %r" % (r,))
        r = c.perm("169.254.169.254", 80, after_mi=[(A_PEER, lambda tid:
                                                      xor_addr("127.0.0.1", 9, tid))])
        check(error_code(r[3]) == 403, "trailing good peer rescued 169.254.169.254: %r"
              % (error_code(r[3]),))
        # Refresh LIFETIME 0 before MI and 3600 after: the allocation is deleted.
        r = c.request(4, [(A_LIFETIME, struct.pack("!I", 0))],
                      after_mi=[(A_LIFETIME, struct.pack("!I", 3600))])
        check(error_code(r[3]) is None, "Refresh 0: %r" % (r,))
        r = c.perm("127.0.0.1", 9)
        check(error_code(r[3]) == 437, "allocation survived a pre-MI LIFETIME 0: %r"
              % (error_code(r[3]),))
    finally:
        c.close()
        v4.close()
        v6.close()
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_disguised_peers_refused, test_explicit_loopback_admitted,
               test_special_registry_refused, test_attributes_after_mi_ignored])
