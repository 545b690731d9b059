#!/usr/bin/python3
"""Interop: headless Chromium, symmetric ICE, data channel through turngate (UDP, TCP, TLS).

Two RTCPeerConnections in one page, each with turngate as its only ICE server and
iceTransportPolicy "relay": both sides allocate on turngate and the peer address of each
allocation is turngate's own relay address, so the allowlist lists the listener address
(127.0.0.1) explicitly (loopback is special-purpose, never matched by a broad prefix).
100 messages must arrive in order; the selected pair must be relay<->relay on 127.0.0.1.
UDP uses ephemeral (TURN REST) credentials minted here from the secret; TCP uses static ones;
turns:?transport=tcp (TURN over TLS, relayProtocol "tls") uses ephemeral ones.
Then peer B uses a second, "internal" listener address (the in-cluster URI a media server
should use to avoid hairpinning) while A uses the public one. Last, with the listener
address left out of the allowlist the same page must fail to connect.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chromium  # noqa: E402
import tgtest  # noqa: E402

SECRET = "interop-chromium-secret"


def one(transport, auth_kind):
    if auth_kind == "ephemeral":
        auth = ("ephemeral", SECRET)
        user, pw = tgtest.ephemeral_credentials(SECRET, "chromium")
    else:
        auth = ("static", "user1", "pass1")
        user, pw = "user1", "pass1"
    with tgtest.Daemon(["127.0.0.1"], auth=auth, tls=transport == "tls") as d:
        res = chromium.run_page(d, transport, user, pw)
        msgs = res["messages"]
        expect = ["msg-%d" % i for i in range(100)]
        tgtest.check(msgs == expect, "messages out of order or lost: got %d, first bad %r"
                     % (len(msgs), next((m for m, e in zip(msgs, expect) if m != e), None)))
        chromium.check_relay_pair(res, d, "chromium/%s" % transport)
        relay_protos = {res[s]["local"].get("relayProtocol") for s in ("pairA", "pairB")}
        tgtest.check(relay_protos <= {transport, None},
                     "relayProtocol %s, expected %s" % (relay_protos, transport))
    uri = "turns:?transport=tcp" if transport == "tls" else "turn:?transport=" + transport
    tgtest.proved("Chromium symmetric ICE over %s (%s credentials): 100 "
                  "data-channel messages in order over a relay<->relay pair on turngate's "
                  "address %s" % (uri, auth_kind, d.address))


def gated():
    """Symmetric mode needs turngate's own relay address in the allowlist: without it both
    sides still get relay candidates but every check between them is dropped."""
    with tgtest.Daemon(["127.0.0.5"]) as d:
        try:
            res = chromium.run_page(d, "udp", "user1", "pass1", count=1, timeout_ms=10000)
        except tgtest.Failure as e:
            res = None
            why = str(e)
        tgtest.check(res is None, "connected although 127.0.0.1 is not in the allowlist: %r"
                     % (res,))
        tgtest.check("typ relay" in why and "timeout waiting for ICE connected" in why,
                     "expected relay candidates and an ICE timeout, got: %s" % why)
    tgtest.proved("symmetric ICE needs the relay address in the allowlist: with only "
                  "127.0.0.5 admitted, Chromium got relay candidates but ICE never connected")


def internal_uri():
    """The media-server side uses turngate's internal address (its own listener, 127.0.0.2,
    standing in for the ClusterIP) while the client uses the public one (127.0.0.1): both
    relay addresses must be in the allowlist, and each side's relay sits on the address of
    the listener it used."""
    with tgtest.Daemon(["127.0.0.1", "127.0.0.2"], internal="127.0.0.2") as d:
        iaddr, iport = d.internal
        res = chromium.run_page(d, "udp", "user1", "pass1", count=100,
                                url_b="turn:%s:%d?transport=udp" % (iaddr, iport))
        tgtest.check(res["messages"] == ["msg-%d" % i for i in range(100)],
                     "internal URI: messages lost or out of order")
        chromium.check_relay_pair(res, d, "chromium/internal-uri", addr_b=iaddr)
    tgtest.proved("symmetric ICE with the server side on turngate's internal URI %s:%d and "
                  "the client on %s:%d: relay<->relay across the two listeners, 100 messages "
                  "in order" % (iaddr, iport, d.address, d.port))


def run():
    one("udp", "ephemeral")
    one("tcp", "static")
    internal_uri()
    gated()
    one("tls", "ephemeral")


if __name__ == "__main__":
    tgtest.main(run)
