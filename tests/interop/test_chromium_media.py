#!/usr/bin/python3
"""Interop: headless Chromium, symmetric ICE, fake audio+video media through turngate.

Chromium's fake capture devices (--use-fake-device-for-media-stream, no permission prompt
with --use-fake-ui-for-media-stream) feed an audio and a video track from peer A to peer B;
both peers are relay-only through turngate over UDP with ephemeral credentials. getStats()
on B must show inbound-rtp packetsReceived > 0 for audio and video after 1 s, and growing
over the next 3 s, and the selected pair
must be relay<->relay on turngate's address.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chromium  # noqa: E402
import tgtest  # noqa: E402

SECRET = "interop-media-secret"


def run():
    with tgtest.Daemon(["127.0.0.1"], auth=("ephemeral", SECRET)) as d:
        user, pw = tgtest.ephemeral_credentials(SECRET, "media")
        res = chromium.run_page(d, "udp", user, pw, media=True)
        early, inbound = res.get("inboundEarly") or {}, res.get("inbound") or {}
        print("inbound-rtp packetsReceived on B: after 1 s %s, 3 s later %s"
              % (early, inbound), flush=True)
        for kind in ("audio", "video"):
            tgtest.check((inbound.get(kind) or 0) > (early.get(kind) or 0) > 0,
                         "%s RTP did not keep flowing through turngate: %s then %s"
                         % (kind, early, inbound))
        chromium.check_relay_pair(res, d, "chromium/media")
    tgtest.proved("Chromium fake audio+video tracks flowed through turngate (symmetric ICE, "
                  "relay<->relay on %s, ephemeral credentials): audio %d, video %d RTP "
                  "packets received over ~4 s" % (d.address, inbound["audio"], inbound["video"]))


if __name__ == "__main__":
    tgtest.main(run)
