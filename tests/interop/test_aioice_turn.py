#!/usr/bin/python3
"""Interop: aioice's TURN client (python3-aioice) allocates on turngate over UDP and over TCP
and relays to a UDP echo peer.

aioice.turn.create_turn_endpoint allocates, binds a channel to the peer on first send and
sends ChannelData; the echo peer (127.0.0.7, admitted by the allowlist) answers each datagram
and turngate relays the answers back. Every one of 200 payloads per transport must come
back intact from the peer's address, and the relayed address must be turngate's listener
address. Then a send to 127.0.0.8 (not in the allowlist) must have its ChannelBind refused
with 403, and nothing is relayed there.
"""
import asyncio
import os
import socket
import ssl
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tgtest  # noqa: E402

PEER_ADDR = "127.0.0.7"
DENIED_ADDR = "127.0.0.8"
COUNT = 200


class EchoPeer:
    """A UDP echo server in a thread; counts what it echoed."""

    def __init__(self, addr):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((addr, tgtest.free_port(addr)))
        self.sock.settimeout(0.2)
        self.addr = self.sock.getsockname()
        self.echoed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stop.is_set():
            try:
                data, src = self.sock.recvfrom(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            self.sock.sendto(data, src)
            self.echoed += 1

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


class Receiver(asyncio.DatagramProtocol):
    def __init__(self):
        self.got = []
        self.event = asyncio.Event()
        self.want = 0

    def datagram_received(self, data, addr):
        self.got.append((data, addr))
        if len(self.got) >= self.want:
            self.event.set()


async def allocate_and_echo(stun, aioice_turn, daemon, transport, user, pw, peer, denied,
                            tls=None):
    """tls: an SSLContext for TURN over TLS (transport "tcp" to daemon.tls_port)."""
    port = daemon.tls_port if tls else daemon.port
    name = "tls" if tls else transport
    t, proto = await asyncio.wait_for(aioice_turn.create_turn_endpoint(
        Receiver, server_addr=(daemon.address, port), username=user, password=pw,
        transport=transport, ssl=tls or False), 20)
    try:
        relayed = t.get_extra_info("sockname")
        tgtest.check(relayed[0] == daemon.address,
                     "%s: relayed address %s is not turngate's %s" % (name, relayed,
                                                                      daemon.address))
        payloads = [("%s-%d-" % (name, i)).encode() + os.urandom(32 + i)
                    for i in range(COUNT)]
        # The first send binds the channel; the rest wait for it inside aioice. Batches of
        # 50 keep every socket buffer on the path far from full (loopback UDP drops only
        # on a full buffer), so any loss is turngate's.
        for i in range(0, COUNT, 50):
            proto.want = i + 50
            proto.event.clear()
            for p in payloads[i:i + 50]:
                t.sendto(p, peer.addr)
            try:
                await asyncio.wait_for(proto.event.wait(), 30)
            except asyncio.TimeoutError:
                raise tgtest.Failure("%s: only %d of %d echoes within 30 s"
                                     % (name, len(proto.got), proto.want))
        got = [d for d, _ in proto.got]
        srcs = {a for _, a in proto.got}
        tgtest.check(sorted(got) == sorted(payloads),
                     "%s: %d of %d echoes intact" % (name, len(set(got) & set(payloads)),
                                                     COUNT))
        tgtest.check(srcs == {peer.addr}, "%s: echoes came from %s, expected %s"
                     % (name, srcs, peer.addr))
        print("%s: allocation %s:%d relayed %d datagrams to %s:%d and back"
              % (name, relayed[0], relayed[1], COUNT, peer.addr[0], peer.addr[1]),
              flush=True)
        # A peer outside the allowlist: ChannelBind must be refused (403 Forbidden).
        inner = t._TurnTransport__inner_protocol
        try:
            await asyncio.wait_for(inner.channel_bind(0x4001, denied.addr), 20)
            raise tgtest.Failure("%s: ChannelBind to %s (not allowed) succeeded"
                                 % (name, denied.addr))
        except stun.TransactionFailed as e:
            code = e.response.attributes.get("ERROR-CODE", (0, ""))[0]
            tgtest.check(code == 403, "%s: ChannelBind to a denied peer got %r, expected 403"
                         % (name, e.response.attributes.get("ERROR-CODE")))
        print("%s: ChannelBind to %s:%d refused with 403" % ((name,) + denied.addr),
              flush=True)
        return relayed
    finally:
        t.close()
        await asyncio.sleep(0)


async def scenario(daemon, user, pw):
    aioice_turn = tgtest.need_module("aioice.turn", "python3-aioice")
    stun = tgtest.need_module("aioice.stun", "python3-aioice")
    peer, denied = EchoPeer(PEER_ADDR), EchoPeer(DENIED_ADDR)
    try:
        for transport in ("udp", "tcp"):
            await allocate_and_echo(stun, aioice_turn, daemon, transport, user, pw, peer,
                                    denied)
        # TURN over TLS, the certificate verified (CA = the test's self-signed one, the
        # server's IP in its subjectAltName), ALPN stun.turn offered.
        ctx = ssl.create_default_context(cafile=daemon.tls_cert)
        ctx.set_alpn_protocols(["stun.turn"])
        await allocate_and_echo(stun, aioice_turn, daemon, "tcp", user, pw, peer, denied,
                                tls=ctx)
        # Let the Refresh(0) of the closed allocations go out before the loop ends.
        await asyncio.sleep(0.5)
    finally:
        peer.close()
        denied.close()
    tgtest.check(denied.echoed == 0, "the denied peer received %d datagrams" % denied.echoed)


def run():
    secret = "interop-aioice-secret"
    with tgtest.Daemon([PEER_ADDR], auth=("ephemeral", secret), tls=True) as d:
        user, pw = tgtest.ephemeral_credentials(secret, "aioice")
        asyncio.run(asyncio.wait_for(scenario(d, user, pw), 120))
    tgtest.proved("aioice TURN allocations over UDP, TCP and TLS (certificate verified) on "
                  "turngate relayed %d datagrams each to a UDP echo peer and back intact; a "
                  "peer outside the allowlist was refused (403)" % COUNT)


if __name__ == "__main__":
    tgtest.main(run)
