"""tests/deploy/deploy_stream.py: holds a TURN-TCP call and an RFC 6062 call for a test that
drives turngated from outside the process (test_systemd_boot.py: a crash restart under a
booted systemd keeps both).

`deploy_stream.py HOST PORT SECRET REALM` allocates over TURN-TCP with a channel to its own
UDP echo peer, and over a second TURN-TCP connection a TCP allocation with a data
connection bound to its own TCP echo peer (RFC 6062), relays a first round trip on both and
prints `ready`; then reads commands on stdin: `rt TAG` relays one more round trip on both
calls (prints `ok TAG` or `fail TAG REASON`), `refresh` refreshes both allocations
(`ok refresh` or `fail refresh REASON`), `close` exits. Neither call is reopened: a
connection that ended fails every later round trip.
"""
import os
import socket
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness_admin import StreamClient, TcpPeer, error_code  # noqa: E402

CHANNEL = 0x4000


def udp_echo(host):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, 0))

    def run():
        while True:
            data, addr = s.recvfrom(2048)
            s.sendto(data, addr)
    threading.Thread(target=run, daemon=True).start()
    return s.getsockname()[1]


def round_trip(ctl, dc, tag):
    payload = tag.encode()
    ctl.channel_data(CHANNEL, payload)
    got = ctl.recv_data(timeout=10)
    if got != payload:
        return "TURN-TCP: %r" % (got,)
    dc.sock.sendall(payload)
    got = dc.recv_exact(len(payload), timeout=10)
    if got != payload:
        return "RFC 6062: %r" % (got,)
    return None


def main(host, port, secret, realm):
    peer_port = udp_echo(host)
    tpeer = TcpPeer(host)
    ctl = StreamClient(port, user="stream", server=host, secret=secret, realm=realm)
    ctl.allocate()
    assert error_code(ctl.perm(host, peer_port)[3]) is None, "CreatePermission"
    assert error_code(ctl.bind(host, peer_port, CHANNEL)[3]) is None, "ChannelBind"
    tctl = StreamClient(port, user="rfc6062", server=host, secret=secret, realm=realm)
    tctl.allocate_tcp()
    cid = tctl.connect(host, tpeer.port)
    dc = StreamClient(port, creds=tctl.creds(), server=host, realm=realm)
    assert dc.connection_bind(cid) is None, "ConnectionBind"
    why = round_trip(ctl, dc, "first")
    assert why is None, why
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "close":
            break
        try:
            if words[0] == "refresh":
                codes = (ctl.refresh(600), tctl.refresh(600))
                why = None if codes == (None, None) else "codes %r" % (codes,)
                tag = "refresh"
            else:
                tag = words[1]
                why = round_trip(ctl, dc, tag)
        except Exception as e:  # noqa: BLE001 (a failed round trip is reported, not raised)
            why = str(e)
        print("ok %s" % tag if why is None else "fail %s %s" % (tag, why), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
