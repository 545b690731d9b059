"""The pion/webrtc v4 stack through turngated (#39): tests/stunner/pion/pion-ice (two pion
PeerConnections in one process, built by scripts/build-stunner.sh from the nested Go module
tests/stunner/pion, pion/webrtc v4.2.26 pinned in its go.sum) connects peer A, relay-only
on turngated (ICETransportPolicy relay: A gathers relay candidates only), to peer B, in the
ICE modes of docs/ice-modes.md, each over TURN-UDP and TURN-TCP. Each run: the data channel
opens, 50 messages arrive in order each way, B reads 50 RTP packets of A's Opus track, and
the selected candidate pairs are checked against what the mode promises; the counters are
read while both connections are still up (pion-ice -hold).

- asymmetric: B has no ICE server and one host candidate, 127.0.0.5 (the media server's
  pod address, the only endpoint the routes admit). Selected pair: A's relay on the
  listener address <-> B's host 127.0.0.5; turngated's allocation has the TURN transport
  asked for (udp, tcp) and relayed to and from the peer. Control: the routes admit
  127.0.0.6 instead; turngated refuses the peer (perm_denied grows) and ICE never connects.
- symmetric: both relay-only on turngated (2 workers), routes admitting the listener
  address; the pair is relay <-> relay on 127.0.0.1.
- symmetric, masked relay addresses: relay_address_mask 127.0.0.9 (nothing binds it),
  routes admitting the mask only, 2 workers: every candidate either side gathered carries
  127.0.0.9, the pair is mask <-> mask, and every datagram to a peer took the short circuit
  (short_circuit == peer_pkts_out, > 0).
- siblings (UDP): two instances, 127.0.0.1 and 127.0.0.3, each other's siblings, A on one
  and B on the other, mask 127.0.0.9: the same, and each instance's sibling_out and
  sibling_in grew.

Ephemeral credentials over TURN-UDP, static over TURN-TCP. Without STUNner's programs the
test skips, or fails under CI=true (no network at test time: --offline).
"""
import json
import os
import select
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
top_srcdir = os.environ.get("top_srcdir", os.path.join(here, "..", ".."))
sys.path.insert(0, os.path.join(top_srcdir, "tests", "interop"))
sys.path.insert(0, os.path.join(top_srcdir, "tests", "integration"))
sys.path.insert(0, here)
import tgtest  # noqa: E402
from tgtest import Daemon, check  # noqa: E402
from test_stunnerd_diff import programs  # noqa: E402

SECRET = "pion-s3cret"
MASK = "127.0.0.9"
POD = "127.0.0.5"
SLICES = {"127.0.0.1": (49220, 49299), "127.0.0.3": (49300, 49379)}
COUNT = 50
BIN = {}


def auth_for(transport):
    return ("ephemeral", SECRET) if transport == "udp" else ("static", "user1", "pass1")


def creds(transport, who):
    if transport == "udp":
        return tgtest.ephemeral_credentials(SECRET, "pion-" + who)
    return "user1", "pass1"


def peer_args(flag, d, transport, who):
    user, pw = creds(transport, who)
    return ["-" + flag, "turn:%s:%d?transport=%s" % (d.address, d.port, transport),
            "-%s-user" % flag, user, "-%s-pass" % flag, pw]


def pion(args, timeout=60, probe=None):
    """Runs pion-ice -hold with args; returns (exit status, its JSON result, what probe()
    returned while both connections were still up, its stderr)."""
    errf = tempfile.TemporaryFile()
    p = subprocess.Popen([os.path.join(BIN["dir"], "pion-ice"), "-hold", "-messages", str(COUNT),
                          "-rtp", str(COUNT), "-timeout", "%ds" % timeout] + args,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf)
    line = b""
    deadline = time.monotonic() + timeout + 30
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 1)
        if r:
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                break
            line += chunk
    seen = probe() if probe and line.endswith(b"\n") else None
    try:
        p.communicate(input=b"", timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
    errf.seek(0)
    err = errf.read().decode(errors="replace")
    errf.close()
    try:
        res = json.loads(line)
    except ValueError:
        raise tgtest.Failure("pion-ice printed no result (exit %s):\n%s" % (p.returncode,
                                                                         err[-4000:]))
    return p.returncode, res, seen, err


def ok(rc, res, err, what):
    check(rc == 0 and res["ok"], "%s: pion-ice failed (exit %d): %s\n%s"
          % (what, rc, res.get("error"), err[-3000:]))
    check(res["a"]["received"] == COUNT and res["b"]["received"] == COUNT and res["rtp"] >= COUNT,
          "%s: messages %d/%d, RTP %d" % (what, res["a"]["received"], res["b"]["received"],
                                          res["rtp"]))


def ep(c):
    return "%s %s:%d" % (c["type"], c["address"], c["port"])


def counters(d):
    return d.admin({"cmd": "stats"})["counters"]


def transports(d):
    return sorted(a["transport"] for a in d.admin({"cmd": "allocations"})["allocations"])


def delta(before, after, key):
    return after[key] - before[key]


def asymmetric(transport):
    what = "asymmetric ICE, TURN-%s" % transport.upper()
    with Daemon([POD], auth=auth_for(transport), workers=2) as d:
        c0 = counters(d)
        rc, res, seen, err = pion(peer_args("a", d, transport, "a") + ["-b-host", POD],
                                  probe=lambda: (transports(d), counters(d)))
        ok(rc, res, err, what)
        a, b = res["a"], res["b"]
        check(a["local"]["type"] == "relay" and a["local"]["address"] == d.address
              and a["remote"]["type"] == "host" and a["remote"]["address"] == POD,
              "%s: A's pair %s <-> %s" % (what, ep(a["local"]), ep(a["remote"])))
        check(b["local"]["address"] == POD and b["remote"]["type"] == "relay",
              "%s: B's pair %s <-> %s" % (what, ep(b["local"]), ep(b["remote"])))
        kinds, c1 = seen
        check(kinds == [transport], "%s: turngated's allocations have transports %r"
              % (what, kinds))
        out, back = delta(c0, c1, "peer_pkts_out"), delta(c0, c1, "peer_pkts_in")
        check(out >= COUNT and back > 0, "%s: turngated relayed %d datagrams to the peer, "
              "%d back" % (what, out, back))
    tgtest.proved("pion %s: pair A %s <-> B %s; %d messages each way, %d RTP packets; "
                  "turngated relayed %d datagrams to %s and %d back"
                  % (what, ep(a["local"]), ep(a["remote"]), COUNT, res["rtp"], out, POD, back))


def asymmetric_refused():
    """The routes do not admit B's address: turngated refuses it, ICE does not connect."""
    with Daemon(["127.0.0.6"], auth=auth_for("udp"), workers=1) as d:
        c0 = counters(d)
        rc, res, _, err = pion(peer_args("a", d, "udp", "a") + ["-b-host", POD], timeout=15)
        c1 = counters(d)
        check(rc != 0 and not res["ok"] and not res["a"]["connected"],
              "asymmetric ICE with %s not admitted: pion-ice connected: %r" % (POD, res))
        denied = delta(c0, c1, "perm_denied")
        check(denied > 0, "asymmetric ICE with %s not admitted: perm_denied stayed %d"
              % (POD, c1["perm_denied"]))
    tgtest.proved("the check can fail: with %s not in the routes pion-ice fails (%s), "
                  "perm_denied +%d" % (POD, res["error"], denied))


def symmetric(transport):
    what = "symmetric ICE, TURN-%s" % transport.upper()
    with Daemon(["127.0.0.1"], auth=auth_for(transport), workers=2) as d:
        rc, res, kinds, err = pion(peer_args("a", d, transport, "a")
                                   + peer_args("b", d, transport, "b"),
                                   probe=lambda: transports(d))
        ok(rc, res, err, what)
        for side in "ab":
            s = res[side]
            check(s["local"]["type"] == "relay" and s["remote"]["type"] == "relay"
                  and s["local"]["address"] == d.address and s["remote"]["address"] == d.address,
                  "%s: %s's pair %s <-> %s" % (what, side, ep(s["local"]), ep(s["remote"])))
        check(kinds == [transport, transport], "%s: turngated's allocations have transports %r"
              % (what, kinds))
    tgtest.proved("pion %s: pair %s <-> %s, %d messages each way, %d RTP packets"
                  % (what, ep(res["a"]["local"]), ep(res["a"]["remote"]), COUNT, res["rtp"]))


def check_masked(res, internal, what):
    for side in "ab":
        s = res[side]
        for line in s["gathered"]:
            addr = line.split()[4]
            check(addr == MASK, "%s: %s gathered a candidate on %s: %s" % (what, side, addr, line))
        check(s["local"]["type"] == "relay" and s["remote"]["type"] == "relay"
              and s["local"]["address"] == MASK and s["remote"]["address"] == MASK,
              "%s: %s's pair %s <-> %s" % (what, side, ep(s["local"]), ep(s["remote"])))
        check(s["local"]["related"] not in internal or what.endswith("TCP"),
              "%s: %s's relay candidate shows %s" % (what, side, s["local"]["related"]))


def short_circuit_counts(d, c0):
    """(short-circuited, peer-bound) datagrams since c0. A snapshot can fall between a
    worker's two increments of one datagram, so up to 5 snapshots, 0.1 s apart, are read
    until they agree; a datagram that left a relay socket stays counted in peer_pkts_out
    alone in every later snapshot."""
    for _ in range(5):
        c1 = counters(d)
        sc, tx = delta(c0, c1, "short_circuit"), delta(c0, c1, "peer_pkts_out")
        if sc == tx:
            break
        time.sleep(0.1)
    return sc, tx


def masked(transport):
    what = "symmetric ICE, masked relay addresses, TURN-%s" % transport.upper()
    with Daemon([MASK], auth=auth_for(transport), workers=2, mask=MASK) as d:
        c0 = counters(d)
        rc, res, seen, err = pion(peer_args("a", d, transport, "a")
                                  + peer_args("b", d, transport, "b"),
                                  probe=lambda: (transports(d), short_circuit_counts(d, c0)))
        ok(rc, res, err, what)
        check_masked(res, {d.address}, what)
        kinds, (sc, tx) = seen
        check(kinds == [transport, transport], "%s: turngated's allocations have transports %r"
              % (what, kinds))
        check(sc > 0 and sc == tx, "%s: %d datagrams to peers, %d short-circuited" % (what, tx, sc))
    tgtest.proved("pion %s: every candidate and the pair on %s, %d messages each way, %d RTP "
                  "packets, %d datagrams short-circuited (all there were)"
                  % (what, MASK, COUNT, res["rtp"], sc))


def siblings_admin():
    text = "  siblings:\n"
    for addr, (lo, hi) in sorted(SLICES.items()):
        text += ("    - address: %s\n      relay_port_min: %d\n      relay_port_max: %d\n"
                 % (addr, lo, hi))
    return text


def siblings():
    what = "symmetric ICE across sibling instances, masked, TURN-UDP"
    d1, d2 = (Daemon([MASK], auth=auth_for("udp"), address=addr, workers=2, tcp=False,
                     mask=MASK, relay=SLICES[addr], admin_extra=siblings_admin())
              for addr in ("127.0.0.1", "127.0.0.3"))
    with d1, d2:
        rc, res, seen, err = pion(peer_args("a", d1, "udp", "a") + peer_args("b", d2, "udp", "b"),
                                  probe=lambda: (counters(d1), counters(d2)))
        ok(rc, res, err, what)
        check_masked(res, {d1.address, d2.address}, what)
        sib = [(c["sibling_out"], c["sibling_in"]) for c in seen]
        check(all(o > 0 and i > 0 for o, i in sib), "%s: sibling datagrams (out, in) per "
              "instance %r" % (what, sib))
    tgtest.proved("pion %s: pair on %s, %d messages each way, %d RTP packets; sibling "
                  "datagrams (out, in): %s %r, %s %r"
                  % (what, MASK, COUNT, res["rtp"], d1.address, sib[0], d2.address, sib[1]))


def run():
    for t in ("udp", "tcp"):
        asymmetric(t)
    asymmetric_refused()
    for t in ("udp", "tcp"):
        symmetric(t)
    for t in ("udp", "tcp"):
        masked(t)
    siblings()


if __name__ == "__main__":
    if not os.access(os.path.join(os.environ.get("top_builddir", "."), "turngated"), os.X_OK):
        print("skip: turngated not built")
        sys.exit(77)
    BIN["dir"] = programs()
    tgtest.main(run)
