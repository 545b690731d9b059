#!/usr/bin/python3
"""Interop: aiortc (python3-aiortc), asymmetric ICE, the media-plane model.

Peer A is the client: turngate is its only ICE server and it is relay-only (aiortc 1.4 has
no iceTransportPolicy, so the test sets aioice's TransportPolicy.RELAY on A's ICE
connection and gives A no host sockets: see load()). Peer B stands
in for a media server in a pod: no ICE servers at all, one host candidate on 127.0.0.5 (its
"pod IP"; aioice's host address discovery is pointed at it). The allowlist admits
127.0.0.5 explicitly (loopback is special-purpose and never matched by a broad prefix).
A's relay candidate must pair with B's host candidate and a data channel carries 50
messages each way, in order. Then the same with 127.0.0.5 removed from the allowlist
(only 127.0.0.6 admitted): turngate refuses the ChannelBind and the connection fails within
a bounded wait: the gateway really gates.
Variants: A reaches turngate over ?transport=udp and ?transport=tcp.
Last, the security hole that docs/ice-modes.md warns about: the same denied setup, but the
client also has a STUN server and is not relay-only: it connects around turngate.
"""
import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tgtest  # noqa: E402

POD_ADDR = "127.0.0.5"
COUNT = 50


def load():
    aiortc = tgtest.need_module("aiortc", "python3-aiortc")
    ice = tgtest.need_module("aioice.ice", "python3-aioice")
    # Host address discovery, per peer: B's only address is its "pod IP" (aioice otherwise
    # offers every interface address except 127.0.0.1); A gets none. aioice 0.8's
    # TransportPolicy.RELAY only hides host candidates from the SDP: it still binds host
    # sockets and runs connectivity checks from them, and on one host those checks reach
    # B directly, bypassing turngate (this test caught exactly that). So A must have no
    # host sockets at all. Gathering happens in setLocalDescription, one peer at a time.
    ice.get_host_addresses = lambda use_ipv4, use_ipv6: list(HOST_ADDRS)
    return aiortc, ice


HOST_ADDRS = []


def ice_connection(pc):
    return pc.sctp.transport.transport.iceGatherer._connection


async def wait_state(pc, states, timeout):
    end = asyncio.get_running_loop().time() + timeout
    while pc.connectionState not in states:
        if asyncio.get_running_loop().time() > end:
            return False
        await asyncio.sleep(0.05)
    return True


async def session(aiortc, ice, daemon, transport, user, pw, expect_ok):
    server = aiortc.RTCIceServer(urls="turn:%s:%d?transport=%s"
                                 % (daemon.address, daemon.port, transport),
                                 username=user, credential=pw)
    a = aiortc.RTCPeerConnection(aiortc.RTCConfiguration(iceServers=[server]))
    b = aiortc.RTCPeerConnection(aiortc.RTCConfiguration(iceServers=[]))
    got_b, got_a = [], []
    opened = asyncio.Event()
    refused = []
    loop = asyncio.get_running_loop()

    def on_error(lp, ctx):
        # aioice binds channels in fire-and-forget tasks: a refused ChannelBind surfaces
        # here as an unretrieved TransactionFailed. Record 403s; report anything else.
        exc = ctx.get("exception")
        resp = getattr(exc, "response", None)
        if resp is not None and resp.attributes.get("ERROR-CODE", (0,))[0] == 403:
            refused.append(resp)
        else:
            lp.default_exception_handler(ctx)

    loop.set_exception_handler(on_error)
    try:
        dc = a.createDataChannel("interop", ordered=True)
        ice_connection(a)._transport_policy = ice.TransportPolicy.RELAY
        dc.on("open", opened.set)
        dc.on("message", got_a.append)

        @b.on("datachannel")
        def on_dc(ch):
            @ch.on("message")
            def on_msg(m):
                got_b.append(m)
                ch.send("echo-" + m)

        HOST_ADDRS[:] = []
        await asyncio.wait_for(a.setLocalDescription(await a.createOffer()), 30)
        tgtest.check(all(p.local_candidate.type == "relay"
                         for p in ice_connection(a)._protocols),
                     "client has non-relay sockets")
        offer = a.localDescription.sdp
        cands_a = [l for l in offer.splitlines() if l.startswith("a=candidate")]
        tgtest.check(cands_a and all(" typ relay" in l for l in cands_a),
                     "client offered non-relay candidates: %s" % cands_a)
        await b.setRemoteDescription(a.localDescription)
        HOST_ADDRS[:] = [POD_ADDR]
        await asyncio.wait_for(b.setLocalDescription(await b.createAnswer()), 30)
        cands_b = [l for l in b.localDescription.sdp.splitlines()
                   if l.startswith("a=candidate")]
        tgtest.check(cands_b and all(" typ host" in l and POD_ADDR in l for l in cands_b),
                     "media server offered other than one host candidate on %s: %s"
                     % (POD_ADDR, cands_b))
        await a.setRemoteDescription(b.localDescription)
        if not expect_ok:
            ok = await wait_state(a, ("failed", "closed"), 90)
            tgtest.check(ok, "connection neither failed nor connected within 90 s")
            tgtest.check(not opened.is_set(), "data channel opened although denied")
            import gc
            gc.collect()  # unretrieved task exceptions are reported on collection
            tgtest.check(refused, "no 403 Forbidden seen for the client's ChannelBind")
            print("%s: with %s outside the allowlist: ChannelBind refused (403 x%d), "
                  "client connectionState %s" % (transport, POD_ADDR, len(refused),
                                                 a.connectionState), flush=True)
            return
        tgtest.check(await wait_state(a, ("connected", "failed", "closed"), 60)
                     and a.connectionState == "connected",
                     "client did not connect within 60 s: %s" % a.connectionState)
        await asyncio.wait_for(opened.wait(), 30)
        for i in range(COUNT):
            dc.send("m%d" % i)
        end = asyncio.get_running_loop().time() + 30
        while len(got_a) < COUNT and asyncio.get_running_loop().time() < end:
            await asyncio.sleep(0.05)
        want = ["m%d" % i for i in range(COUNT)]
        tgtest.check(got_b == want, "media server got %d messages, in order: %s"
                     % (len(got_b), got_b == want[:len(got_b)]))
        tgtest.check(got_a == ["echo-" + m for m in want],
                     "client got %d echoes" % len(got_a))
        pa = ice_connection(a)._nominated.get(1)
        pb = ice_connection(b)._nominated.get(1)
        tgtest.check(pa is not None and pb is not None, "no nominated pair")
        tgtest.check(pa.local_candidate.type == "relay"
                     and pa.local_candidate.host == daemon.address
                     and pa.remote_candidate.type == "host"
                     and pa.remote_candidate.host == POD_ADDR,
                     "client pair is %s" % pa)
        tgtest.check(pb.local_candidate.type == "host" and pb.local_candidate.host == POD_ADDR
                     and pb.remote_candidate.type == "relay"
                     and pb.remote_candidate.host == daemon.address,
                     "media server pair is %s" % pb)
        print("%s: client relay %s:%d <-> media server host %s:%d, %d messages each way"
              % (transport, pa.local_candidate.host, pa.local_candidate.port,
                 pa.remote_candidate.host, pa.remote_candidate.port, COUNT), flush=True)
    finally:
        await asyncio.wait_for(asyncio.gather(a.close(), b.close(),
                                              return_exceptions=True), 30)


async def stun_bypass(aiortc, ice, daemon):
    """The security hole of extra STUN servers: a client that is not relay-only and has a
    STUN server besides turngate gets host/server-reflexive candidates, and when those can
    reach the media server the pair that wins avoids turngate, so the allowlist (which does
    not admit the media server here) is never consulted."""
    stun = aiortc.RTCIceServer(urls="stun:%s:%d" % (daemon.address, daemon.port))
    turn = aiortc.RTCIceServer(urls="turn:%s:%d?transport=udp" % (daemon.address, daemon.port),
                               username="user1", credential="pass1")
    a = aiortc.RTCPeerConnection(aiortc.RTCConfiguration(iceServers=[stun, turn]))
    b = aiortc.RTCPeerConnection(aiortc.RTCConfiguration(iceServers=[]))
    try:
        dc = a.createDataChannel("bypass")
        opened = asyncio.Event()
        dc.on("open", opened.set)
        HOST_ADDRS[:] = ["127.0.0.9"]  # the client's own address
        await asyncio.wait_for(a.setLocalDescription(await a.createOffer()), 30)
        await b.setRemoteDescription(a.localDescription)
        HOST_ADDRS[:] = [POD_ADDR]
        await asyncio.wait_for(b.setLocalDescription(await b.createAnswer()), 30)
        await a.setRemoteDescription(b.localDescription)
        tgtest.check(await wait_state(a, ("connected", "failed", "closed"), 60)
                     and a.connectionState == "connected",
                     "expected the bypass to connect, got %s" % a.connectionState)
        await asyncio.wait_for(opened.wait(), 30)
        pa = ice_connection(a)._nominated.get(1)
        tgtest.check(pa is not None and pa.local_candidate.type != "relay",
                     "expected a non-relay pair, got %s" % pa)
        print("bypass: client %s candidate %s:%d <-> media server %s:%d, turngate not on the "
              "path although its allowlist does not admit %s"
              % (pa.local_candidate.type, pa.local_candidate.host, pa.local_candidate.port,
                 pa.remote_candidate.host, pa.remote_candidate.port, POD_ADDR), flush=True)
    finally:
        await asyncio.wait_for(asyncio.gather(a.close(), b.close(),
                                              return_exceptions=True), 30)


def run():
    aiortc, ice = load()
    secret = "interop-aiortc-secret"
    for transport in ("udp", "tcp"):
        with tgtest.Daemon([POD_ADDR], auth=("ephemeral", secret)) as d:
            user, pw = tgtest.ephemeral_credentials(secret, "aiortc")
            asyncio.run(session(aiortc, ice, d, transport, user, pw, True))
    tgtest.proved("aiortc asymmetric ICE: relay-only client through turngate "
                  "(?transport=udp and tcp) reached a media server's host candidate %s "
                  "admitted by the allowlist; data channel in order both ways" % POD_ADDR)
    with tgtest.Daemon(["127.0.0.6"], auth=("static", "user1", "pass1")) as d:
        asyncio.run(session(aiortc, ice, d, "udp", "user1", "pass1", False))
        tgtest.proved("with the media server's address removed from the allowlist the same "
                      "client could not connect: turngate gates the media plane")
        asyncio.run(stun_bypass(aiortc, ice, d))
    tgtest.proved("why iceTransportPolicy relay and no extra STUN servers: a client not "
                  "restricted to relay (policy 'all', a STUN server besides turngate) reached "
                  "the same non-admitted media server directly, around turngate and its "
                  "allowlist")


if __name__ == "__main__":
    tgtest.main(run)
