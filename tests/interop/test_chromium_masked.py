#!/usr/bin/python3
"""Interop: headless Chromium, symmetric ICE with masked relay addresses (issue 22).

Two independent headless Chromium browsers (two chromedriver sessions, one
RTCPeerConnection each; this script carries the offer and the answer between them, each
with all its candidates), both with turngate as their only ICE server and
iceTransportPolicy "relay", on TURN-UDP listeners with relay_address_mask 127.0.0.9: a
loopback address nothing binds, which is enough, since data between two masked allocations
never goes to the mask (the short circuit inside an instance, the siblings' real addresses
across instances). The routes admit the mask only. Checked in each case:
- the data channel opens and 50 messages arrive in order each way;
- no internal address (a listener's `address`) in either side's candidates: the
  a=candidate lines (connection and related address) and c= lines of its local and remote
  SDP, the candidates it gathered, and the address and relatedAddress of every
  local-candidate and remote-candidate in getStats; every relay candidate carries the mask
  with its allocation's relay port, and the selected pair is relay <-> relay, mask to mask.
  (The stats' `url` is the TURN URI the page was given, the client's own setting: in a
  deployment the load balancer's address, which the listener address stands in for here.)
Case 1, one instance, 1 worker and 2 workers: turngate_short_circuit_packets_total grows,
and by as much as turngate_peer_packets_total{direction="tx"}: every datagram to a peer took
the short circuit, none left a relay socket.
Control: the same without the mask (routes admit 127.0.0.1): the data channel works but the
check finds 127.0.0.1 in the candidates, so it can fail.
Case 2, two instances, 127.0.0.1 (relay ports 49800-49899) and 127.0.0.3 (49900-49999),
each other's siblings (one admin.siblings list for both, as one ConfigMap for every
replica), browser A on the first, B on the second: the same checks, and on each instance
turngate_sibling_packets_total grew in both directions (it sent its client's datagrams to
the other instance and gave the other's the mask back).
"""
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chromium  # noqa: E402
import tgtest  # noqa: E402

MASK = "127.0.0.9"
SLICES = {"127.0.0.1": (49800, 49899), "127.0.0.3": (49900, 49999)}
COUNT = 50

PAGE = r"""<!doctype html>
<html><head><meta charset="utf-8"><title>turngate masked</title></head>
<body><script>
"use strict";
// One peer of a pair, relay-only through turngate; the test carries offer and answer.
let pc = null, dc = null, opened = false;
const got = [], gathered = [], channels = [];

""" + chromium.PAGE_HELPERS + r"""
// Sends this side's messages: the offerer once its channel is open, the answerer (cfg.remote
// set) once the offerer's first message arrived. The offerer's channel is then open (it
// sends from onopen), so no message of the answerer's reaches it while it still waits for
// the DCEP ACK: in that window Chromium was seen to lose one message (one side had 49 of
// 50, the daemon had relayed or counted every datagram, ICE stayed connected; about 1 run
// in 50 under load).
// The channel counts as open once it was seen open: at the datachannel event, at its open
// event, or when this side's sends went through (send() throws unless readyState is
// "open"). Not by reading readyState at the end: once in a CI run the answerer's readyState
// read "connecting" after 30 s although it had received the offerer's messages and the
// offerer had all its replies (a Chromium state race); `channels` lists every channel
// event and the states seen, for a failure's message.
function wire(ch, cfg) {
  let sent = false;
  const send = () => {
    if (sent) return;
    sent = true;
    for (let i = 0; i < cfg.count; i++) ch.send(cfg.name + "-" + i);
    opened = true;
  };
  channels.push({ label: ch.label, id: ch.id, state: ch.readyState });
  if (ch.readyState === "open") opened = true;
  ch.addEventListener("open", () => { opened = true; });
  dc = ch;
  ch.onmessage = m => { got.push(m.data); if (cfg.remote) send(); };
  if (!cfg.remote) { if (ch.readyState === "open") send(); else ch.onopen = send; }
}

// Offerer: cfg.remote unset; answerer: cfg.remote is the offer. Returns the local SDP once
// it holds a relay candidate and gathering is complete or 2 s passed (the signalling
// carries no later candidate: Chromium may go on trying the TURN server from other
// interfaces, ::1 among them, long after the allocation on loopback).
window.peerStart = async function (cfg) {
  pc = new RTCPeerConnection({ iceServers: [{ urls: [cfg.url], username: cfg.username,
                                              credential: cfg.credential }],
                               iceTransportPolicy: "relay" });
  pc.onicecandidate = e => {
    if (e.candidate && e.candidate.candidate) gathered.push(e.candidate.candidate);
  };
  if (cfg.remote) {
    pc.ondatachannel = e => wire(e.channel, cfg);
    await pc.setRemoteDescription({ type: "offer", sdp: cfg.remote });
    await pc.setLocalDescription(await pc.createAnswer());
  } else {
    wire(pc.createDataChannel("masked", { ordered: true }), cfg);
    await pc.setLocalDescription(await pc.createOffer());
  }
  await until("a relay candidate", () => gathered.some(c => c.includes(" typ relay")),
              cfg.timeoutMs);
  const settle = Date.now() + 2000;
  await until("", () => pc.iceGatheringState === "complete" || Date.now() > settle,
              cfg.timeoutMs);
  return pc.localDescription.sdp;
};

window.peerAnswer = async function (sdp) {
  await pc.setRemoteDescription({ type: "answer", sdp: sdp });
  return true;
};

async function candidateStats() {
  const stats = await pc.getStats(), cands = [];
  let pairId = null;
  stats.forEach(s => {
    if (s.type === "local-candidate" || s.type === "remote-candidate")
      cands.push({ type: s.type, id: s.id, address: s.address || s.ip || null,
                   relatedAddress: s.relatedAddress || null, port: s.port,
                   candidateType: s.candidateType, url: s.url || null });
    if (s.type === "transport" && s.selectedCandidatePairId) pairId = s.selectedCandidatePairId;
  });
  const pair = pairId ? stats.get(pairId) : null;
  return { cands, pair: pair ? { local: pair.localCandidateId, remote: pair.remoteCandidateId }
                              : null };
}

// Waits for ICE, the channel and the other side's messages; returns what the test checks.
window.peerFinish = async function (cfg) {
  const res = { gathered };
  try {
    await until("ICE connected", () => ["connected", "completed"].includes(pc.iceConnectionState),
                cfg.timeoutMs);
    await until("data channel open", () => opened, cfg.timeoutMs);
    await until(cfg.count + " messages", () => got.length >= cfg.count, cfg.messagesMs);
    res.ok = true;
  } catch (e) {
    res.ok = false;
    res.error = String(e) + " (" + got.length + " received, channel " +
                (dc ? dc.readyState : "none") + ")";
  }
  res.ice = pc.iceConnectionState;
  res.channels = channels.concat([{ final: dc ? dc.readyState : null }]);
  res.messages = got.slice();
  res.localSdp = pc.localDescription ? pc.localDescription.sdp : "";
  res.remoteSdp = pc.remoteDescription ? pc.remoteDescription.sdp : "";
  Object.assign(res, await candidateStats());
  return res;
};
</script></body></html>
"""


def connect(url_a, url_b, user, password, count=COUNT, timeout_ms=30000, probe=None,
            daemons=()):
    """Browser A offers on url_a, browser B answers on url_b; returns (result A, result B,
    what probe() returned while both were still connected). A browser's failure also
    reports the messages it lacks and the daemons' non-zero counters (what each relayed,
    dropped or refused). The messages get 90 s. While both sides sent as soon as their
    channel opened, one side lacked a message now and then under load (3 runs in about
    145, on one instance and across siblings), after 30 s and after 90 s alike: the
    answerer now waits for the offerer's first message (wire() in the page says why)."""
    cfg = {"username": user, "credential": password, "count": count, "timeoutMs": timeout_ms,
           "messagesMs": 90000}
    with chromium.PageServer(PAGE) as page, chromium.Browser() as a, chromium.Browser() as b:
        a.driver.get(page.url)
        b.driver.get(page.url)
        offer = a.call("peerStart", dict(cfg, url=url_a, name="a"))
        tgtest.check(isinstance(offer, str), "A's offer: %r" % (offer,))
        answer = b.call("peerStart", dict(cfg, url=url_b, name="b", remote=offer))
        tgtest.check(isinstance(answer, str), "B's answer: %r" % (answer,))
        tgtest.check(a.call("peerAnswer", answer) is True, "A refused the answer")
        ra = a.call("peerFinish", cfg)
        rb = b.call("peerFinish", cfg)
        seen = probe() if probe else None
    for side, r, other in (("A", ra, "b"), ("B", rb, "a")):
        want = ["%s-%d" % (other, i) for i in range(count)]
        if not r.get("ok"):
            got = r.get("messages") or []
            raise tgtest.Failure("browser %s: %s, missing %s (ICE %s; gathered %s; remote SDP "
                                 "candidates %s; daemon counters %s; channels %s)"
                                 % (side, r.get("error"),
                                    [m for m in want if m not in got][:10], r.get("ice"),
                                    json.dumps(r.get("gathered")),
                                    json.dumps(sdp_candidates(r.get("remoteSdp", ""))),
                                    daemon_counters(daemons),
                                    json.dumps(r.get("channels"))))
        tgtest.check(r["messages"] == want, "browser %s: messages lost or out of order: %d, "
                     "first %r" % (side, len(r["messages"]), r["messages"][:3]))
    return ra, rb, seen


def daemon_counters(daemons):
    """Each daemon's non-zero admin `stats` counters, as text (or why there are none)."""
    out = []
    for d in daemons:
        try:
            c = d.admin({"cmd": "stats"})["counters"]
            out.append("%s: %s" % (d.address, json.dumps({k: v for k, v in c.items() if v})))
        except Exception as e:  # a diagnostic: never hide the failure it explains
            out.append("%s: no stats (%s)" % (d.address, e))
    return "; ".join(out) or "none asked"


def sdp_candidates(sdp):
    return [l[2:] for l in sdp.splitlines() if l.startswith("a=candidate:")]


def parse_candidate(line):
    """(address, port, type, related address or None) of an ICE candidate line."""
    t = line.split()
    kv = dict(zip(t[6::2], t[7::2]))
    return t[4], int(t[5]), kv.get("typ"), kv.get("raddr")


def addresses(res):
    """Every address one side shows: [(where, address, relay candidate's port or None)]."""
    out = []
    for where, lines in (("local SDP", sdp_candidates(res["localSdp"])),
                         ("remote SDP", sdp_candidates(res["remoteSdp"])),
                         ("gathered", res["gathered"])):
        for line in lines:
            addr, port, typ, raddr = parse_candidate(line)
            out.append((where + " " + typ, addr, port))
            if raddr:
                out.append((where + " raddr", raddr, None))
    for which in ("localSdp", "remoteSdp"):
        out += [(which + " c=", l.split()[-1], None)
                for l in res[which].splitlines() if l.startswith("c=")]
    for c in res["cands"]:
        out.append(("%s %s" % (c["type"], c["candidateType"]), c["address"], c["port"]))
        if c["relatedAddress"]:
            out.append((c["type"] + " relatedAddress", c["relatedAddress"], None))
    return out


def leaks(ra, rb, internal):
    """The places where either side shows an address of `internal`."""
    return [(side, w, a) for side, r in (("A", ra), ("B", rb))
            for w, a, _ in addresses(r) if a in internal]


def check_candidates(ra, rb, internal, label):
    """No internal address anywhere; relay candidates and the selected pair on the mask."""
    found = leaks(ra, rb, internal)
    tgtest.check(not found, "%s: internal addresses in candidates: %s" % (label, found[:8]))
    for side, r in (("A", ra), ("B", rb)):
        cands = [x for x in addresses(r) if x[2] is not None]
        tgtest.check(any("local SDP relay" in w for w, _, _ in cands) and
                     any("remote SDP relay" in w for w, _, _ in cands),
                     "%s: browser %s has no relay candidate in its SDPs" % (label, side))
        other = [x for x in cands if x[1] != MASK or " relay" not in x[0]]
        tgtest.check(not other, "%s: browser %s shows candidates not on the mask: %s"
                     % (label, side, other[:8]))
        by_id = {c["id"]: c for c in r["cands"]}
        pair = r["pair"]
        tgtest.check(pair is not None, "%s: browser %s has no selected pair" % (label, side))
        loc, rem = by_id.get(pair["local"], {}), by_id.get(pair["remote"], {})
        tgtest.check(loc.get("address") == MASK and rem.get("address") == MASK and
                     loc.get("candidateType") == "relay" and rem.get("candidateType") == "relay",
                     "%s: browser %s selected %r <-> %r" % (label, side, loc, rem))
    pa = {c["id"]: c for c in ra["cands"]}
    loc = pa[ra["pair"]["local"]]
    rem = pa[ra["pair"]["remote"]]
    print("%s: selected pair %s:%d(relay) <-> %s:%d(relay); no internal address among %d+%d "
          "addresses shown" % (label, loc["address"], loc["port"], rem["address"], rem["port"],
                               len(addresses(ra)), len(addresses(rb))), flush=True)


def metrics_admin(port):
    return '  metrics_endpoint: "http://127.0.0.1:%d/metrics"\n' % port


def metric_values(port, want):
    """The samples named in want (name with labels, as Prometheus prints them) from the
    daemon's metrics endpoint (retried while it comes up), in want's order."""
    deadline = time.monotonic() + 15
    while True:
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
                text = r.read().decode()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    got = {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
           if l.startswith(tuple(want))}
    tgtest.check(all(w in got for w in want), "metrics lack %s" % (want,))
    return [got[w] for w in want]


def short_circuit_counts(port):
    """turngate_short_circuit_packets_total and turngate_peer_packets_total{direction="tx"}."""
    return metric_values(port, ("turngate_short_circuit_packets_total",
                                'turngate_peer_packets_total{direction="tx"}'))


SIBLING = ('turngate_sibling_packets_total{direction="out"}',
           'turngate_sibling_packets_total{direction="in"}')


def one_instance(workers):
    mport = tgtest.free_port()
    with tgtest.Daemon([MASK], workers=workers, tcp=False, mask=MASK,
                       relay=SLICES["127.0.0.1"], admin_extra=metrics_admin(mport)) as d:
        sc0, tx0 = short_circuit_counts(mport)
        url = "turn:%s:%d?transport=udp" % (d.address, d.port)
        ra, rb, owners = connect(url, url, "user1", "pass1", probe=lambda: sorted(
            a["worker"] for a in d.admin({"cmd": "allocations"})["allocations"]), daemons=[d])
        label = "one instance, %d worker%s" % (workers, "s" * (workers > 1))
        check_candidates(ra, rb, {d.address}, label)
        sc1, tx1 = short_circuit_counts(mport)
        tgtest.check(sc1 - sc0 > 0, "%s: turngate_short_circuit_packets_total stayed %r"
                     % (label, sc1))
        tgtest.check(sc1 - sc0 == tx1 - tx0, "%s: %d datagrams to peers, %d short-circuited: "
                     "some left a relay socket" % (label, tx1 - tx0, sc1 - sc0))
        if os.environ.get("TG_OFFLOAD"):
            # The kernel fast path on (test_offload_auto.sh): the browsers' channels are
            # bound to each other, so the kernel short-circuits their ChannelData.
            k = d.admin({"cmd": "status"})["offload"]["packets_short_circuit"]
            tgtest.check(k > 0, "%s: the kernel short-circuited none of the datagrams" % label)
            label += ", %d of the datagrams short-circuited by the kernel" % k
    tgtest.proved("Chromium symmetric ICE, mask %s, %s: %d data-channel messages each way, "
                  "no candidate shows %s, %d datagrams short-circuited (all there were; "
                  "allocations on workers %s)"
                  % (MASK, label, COUNT, d.address, sc1 - sc0, owners))


def unmasked_control():
    """Without the mask the internal address shows, and check_candidates says so."""
    with tgtest.Daemon(["127.0.0.1"], workers=1, tcp=False, relay=SLICES["127.0.0.1"]) as d:
        url = "turn:%s:%d?transport=udp" % (d.address, d.port)
        ra, rb, _ = connect(url, url, "user1", "pass1", count=5)
        found = leaks(ra, rb, {d.address})
        try:
            check_candidates(ra, rb, {d.address}, "control")
            failed = None
        except tgtest.Failure as e:
            failed = str(e)
    tgtest.check(found and failed and "internal addresses" in failed,
                 "without the mask the check found no internal address: %r" % (failed,))
    tgtest.proved("the check can fail: without relay_address_mask it finds %s in %d places "
                  "(e.g. browser %s, %s)" % (d.address, len(found), found[0][0], found[0][1]))


def siblings_admin():
    text = "  siblings:\n"
    for addr, (lo, hi) in sorted(SLICES.items()):
        text += ("    - address: %s\n      relay_port_min: %d\n      relay_port_max: %d\n"
                 % (addr, lo, hi))
    return text


def two_instances():
    mports = {addr: tgtest.free_port() for addr in ("127.0.0.1", "127.0.0.3")}
    d1, d2 = (tgtest.Daemon([MASK], address=addr, workers=2, tcp=False, mask=MASK,
                            relay=SLICES[addr],
                            admin_extra=siblings_admin() + metrics_admin(mports[addr]))
              for addr in ("127.0.0.1", "127.0.0.3"))
    with d1, d2:
        ra, rb, _ = connect("turn:%s:%d?transport=udp" % (d1.address, d1.port),
                            "turn:%s:%d?transport=udp" % (d2.address, d2.port), "user1", "pass1",
                            daemons=[d1, d2])
        check_candidates(ra, rb, {d1.address, d2.address}, "two instances")
        # Each instance sent its client's datagrams to the other (out) and gave the other's
        # the mask back (in): the pair went through the siblings, not to the mask.
        counts = {d.address: metric_values(mports[d.address], SIBLING) for d in (d1, d2)}
        tgtest.check(all(o > 0 and i > 0 for o, i in counts.values()),
                     "sibling datagrams (out, in) per instance: %r" % counts)
    tgtest.proved("Chromium symmetric ICE across two sibling instances (%s, %s), mask %s: %d "
                  "data-channel messages each way, no candidate shows either instance's "
                  "address; sibling datagrams (out, in): %r"
                  % (d1.address, d2.address, MASK, COUNT, counts))


def run():
    one_instance(1)
    one_instance(2)
    unmasked_control()
    two_instances()


if __name__ == "__main__":
    tgtest.main(run)
