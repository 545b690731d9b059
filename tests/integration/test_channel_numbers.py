"""Channel numbers (#37): the default accepts RFC 5766's 0x4000-0x7FFF, what stunnerd (pion)
accepts and coturn's turnutils_uclient picks from, and a Python client sees it through the
running daemon: ChannelBind 0x7FFF succeeds and ChannelData on it reaches the peer and
comes back; 0x8000 gets 400. With limits.channel_numbers: rfc8656 (the strict range) 0x5000
gets 400 and 0x4FFF still binds. Every wait is bounded.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Client, Daemon, Peer, check, config, error_code,  # noqa: E402
                           free_port, relay_range, run_tests)


def start(d, limits=None):
    port = free_port()
    text = config(d, [("udp", port, "TURN-UDP", ["loopback"])], {"loopback": ["127.0.0.1"]},
                  limits=limits, workers=1, relay=relay_range())
    return Daemon(d, text, workers=1).start(), port


def bind_code(c, peer, channel):
    return error_code(c.bind("127.0.0.1", peer.port, channel)[3])


def test_default_wide(d):
    daemon, port = start(d)
    peer = Peer("127.0.0.1")
    try:
        c = Client(port)
        relayed = c.relayed(c.allocate())[0]
        check(bind_code(c, peer, 0x7FFF) is None, "ChannelBind 0x7FFF refused")
        c.channel_data(0x7FFF, b"top of RFC 5766's range")
        got = peer.drain(timeout=2.0, limit=1)
        check(got and got[0][0] == b"top of RFC 5766's range", "peer got %r" % (got,))
        peer.sock.sendto(b"back", tuple(relayed[:2]))
        check(c.recv_data(timeout=2.0) == b"back", "no ChannelData back on 0x7FFF")
        check(bind_code(c, Peer("127.0.0.1"), 0x8000) == 400, "0x8000 not refused with 400")
        c.close()
    finally:
        peer.close()
        daemon.stop()


def test_strict_option(d):
    daemon, port = start(d, limits={"channel_numbers": "rfc8656"})
    peer = Peer("127.0.0.1")
    try:
        c = Client(port)
        c.allocate()
        check(bind_code(c, peer, 0x5000) == 400, "rfc8656: 0x5000 not refused")
        check(bind_code(c, peer, 0x4FFF) is None, "rfc8656: 0x4FFF refused")
        c.close()
    finally:
        peer.close()
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_default_wide, test_strict_option])
