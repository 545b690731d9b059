"""Headless Chromium driver for the interop suite: serves a test page on 127.0.0.1 and runs
two RTCPeerConnections in it, both relay-only through turngate (symmetric ICE).

Loopback needs Chromium's --allow-loopback-in-peer-connection: without it the network
manager drops the loopback interface, so on a loopback-only test the browser has no local
network to open the TURN socket from and gathers no relay candidate at all.
"""
import http.server
import json
import os
import shutil
import tempfile
import threading

import tgtest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

# The page helpers every test page uses: sleep(ms), and until(what, cond, ms), which waits
# for cond() and throws "timeout waiting for WHAT" after ms.
PAGE_HELPERS = r"""
function sleep(ms) { return new Promise(r => setTimeout(r, ms)); }

async function until(what, cond, ms) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("timeout waiting for " + what);
    await sleep(50);
  }
}
"""

PAGE = r"""<!doctype html>
<html><head><meta charset="utf-8"><title>turngate interop</title></head>
<body><script>
"use strict";
// Two peers in one page, both relay-only through turngate (symmetric ICE).
""" + PAGE_HELPERS + r"""
async function selectedPair(pc) {
  const stats = await pc.getStats();
  let pairId = null;
  stats.forEach(s => { if (s.type === "transport" && s.selectedCandidatePairId) pairId = s.selectedCandidatePairId; });
  if (!pairId) stats.forEach(s => { if (s.type === "candidate-pair" && s.nominated && s.state === "succeeded") pairId = s.id; });
  if (!pairId) return null;
  const pair = stats.get(pairId);
  const l = stats.get(pair.localCandidateId), r = stats.get(pair.remoteCandidateId);
  return { local: { type: l.candidateType, address: l.address, port: l.port, relayProtocol: l.relayProtocol, url: l.url },
           remote: { type: r.candidateType, address: r.address, port: r.port } };
}

async function inboundPackets(pc) {
  const stats = await pc.getStats();
  const out = {};
  stats.forEach(s => { if (s.type === "inbound-rtp") out[s.kind] = s.packetsReceived; });
  return out;
}

window.runTest = async function (cfg) {
  const log = [];
  // B (the "media server" side) may use another URI: turngate's internal address.
  const conf = url => ({ iceServers: [{ urls: [url], username: cfg.username, credential: cfg.credential }],
                         iceTransportPolicy: "relay" });
  const a = new RTCPeerConnection(conf(cfg.url)), b = new RTCPeerConnection(conf(cfg.urlB || cfg.url));
  const cands = { a: [], b: [] };
  a.onicecandidate = e => { if (e.candidate) { cands.a.push(e.candidate.candidate); b.addIceCandidate(e.candidate); } };
  b.onicecandidate = e => { if (e.candidate) { cands.b.push(e.candidate.candidate); a.addIceCandidate(e.candidate); } };
  const result = { cands, log };
  try {
    let dc = null, got = [], remoteTracks = 0;
    if (cfg.media) {
      const stream = await navigator.mediaDevices.getUserMedia({ audio: true, video: { width: 320, height: 240 } });
      stream.getTracks().forEach(t => a.addTrack(t, stream));
      b.ontrack = () => { remoteTracks++; };
    } else {
      dc = a.createDataChannel("interop", { ordered: true });
      b.ondatachannel = e => { e.channel.onmessage = m => got.push(m.data); };
    }
    await a.setLocalDescription(await a.createOffer());
    await b.setRemoteDescription(a.localDescription);
    await b.setLocalDescription(await b.createAnswer());
    await a.setRemoteDescription(b.localDescription);
    await until("ICE connected", () => ["connected", "completed"].includes(a.iceConnectionState)
                && ["connected", "completed"].includes(b.iceConnectionState), cfg.timeoutMs);
    log.push("ice connected");
    if (cfg.media) {
      await until("remote tracks", () => remoteTracks >= 2, cfg.timeoutMs);
      // The fake devices stream for a few seconds: sample after 1 s and again at the end,
      // so the result shows media kept flowing, not one burst.
      await sleep(1000);
      result.inboundEarly = await inboundPackets(b);
      await sleep(cfg.mediaMs);
      const pk = await inboundPackets(b);
      result.inbound = pk;
    } else {
      await until("data channel open", () => dc.readyState === "open", cfg.timeoutMs);
      for (let i = 0; i < cfg.count; i++) dc.send("msg-" + i);
      await until(cfg.count + " messages", () => got.length >= cfg.count, cfg.timeoutMs);
      result.messages = got;
    }
    result.pairA = await selectedPair(a);
    result.pairB = await selectedPair(b);
    result.ok = true;
  } catch (e) {
    result.ok = false;
    result.error = String(e);
    result.iceA = a.iceConnectionState; result.iceB = b.iceConnectionState;
    result.gatherA = a.iceGatheringState;
  } finally {
    a.close(); b.close();
  }
  return result;
};
</script></body></html>
"""


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.server.page.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class PageServer:
    """A test page (default PAGE) on http://127.0.0.1:PORT/ from a thread (a secure context:
    localhost)."""

    def __init__(self, page=PAGE):
        self.page = page

    def __enter__(self):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.page = self.page
        self.url = "http://127.0.0.1:%d/" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()
        return False


class Browser:
    """Headless Chromium via chromedriver (selenium), fresh profile, loopback WebRTC allowed."""

    def __init__(self, media=False):
        tgtest.need_tool(CHROMIUM, "chromium")
        tgtest.need_tool(CHROMEDRIVER, "chromium-driver")
        self.webdriver = tgtest.need_module("selenium.webdriver", "python3-selenium")
        self.media = media
        self.profile = tempfile.mkdtemp(prefix="tg-chromium-")
        self.driver = None

    def __enter__(self):
        wd = self.webdriver
        from selenium.webdriver.chrome.service import Service
        opts = wd.ChromeOptions()
        opts.binary_location = CHROMIUM
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                     "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync",
                     "--disable-dev-shm-usage",
                     "--user-data-dir=" + self.profile,
                     "--force-webrtc-ip-handling-policy=default",
                     # turns: to the tests' self-signed certificate (its verification is
                     # aioice's part: test_aioice_turn.py checks it against its CA)
                     "--ignore-certificate-errors"):
            opts.add_argument(flag)
        # Loopback-only test host: let WebRTC use the loopback interface (see the module
        # docstring). TG_NO_LOOPBACK_FLAG=1 leaves it out, to show what it is for.
        if not os.environ.get("TG_NO_LOOPBACK_FLAG"):
            opts.add_argument("--allow-loopback-in-peer-connection")
        if self.media:
            opts.add_argument("--use-fake-device-for-media-stream")
            opts.add_argument("--use-fake-ui-for-media-stream")
        service = Service(executable_path=CHROMEDRIVER)
        try:
            self.driver = wd.Chrome(service=service, options=opts)
        except Exception as e:
            shutil.rmtree(self.profile, ignore_errors=True)
            tgtest.fail("could not start headless Chromium via chromedriver: %s" % e)
        self.driver.set_script_timeout(240)  # above the page's own waits (3 x timeoutMs)
        self.driver.set_page_load_timeout(60)
        return self

    def call(self, fn, *args):
        """Awaits the loaded page's async window[fn](...args) and returns its value; a
        rejection comes back as {ok: false, error}."""
        return self.driver.execute_async_script(
            "const a = Array.from(arguments), cb = a.pop();"
            "window[a[0]](...a.slice(1)).then(cb, e => cb({ok: false, error: String(e)}));",
            fn, *args)

    def run(self, page_url, cfg):
        self.driver.get(page_url)
        return self.call("runTest", cfg)

    def __exit__(self, *a):
        try:
            if self.driver is not None:
                self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)
        return False


def check_relay_pair(res, daemon, label, addr_b=None):
    """Both selected pairs are relay<->relay, on turngate's listener (relay) addresses: A's
    on daemon.address, B's on addr_b (default the same)."""
    addr_b = addr_b or daemon.address
    want = {"pairA": (daemon.address, addr_b), "pairB": (addr_b, daemon.address)}
    for side in ("pairA", "pairB"):
        pair = res.get(side)
        tgtest.check(pair is not None, "%s: no selected candidate pair on %s" % (label, side))
        loc, rem = pair["local"], pair["remote"]
        tgtest.check(loc["type"] == "relay" and rem["type"] == "relay",
                     "%s: %s selected pair is %s<->%s, not relay<->relay: %s"
                     % (label, side, loc["type"], rem["type"], json.dumps(pair)))
        tgtest.check((loc["address"], rem["address"]) == want[side],
                     "%s: %s relay addresses %s / %s are not turngate's %s / %s"
                     % ((label, side, loc["address"], rem["address"]) + want[side]))
    print("%s: selected pair A %s:%d(relay,%s) <-> %s:%d(relay)"
          % (label, res["pairA"]["local"]["address"], res["pairA"]["local"]["port"],
             res["pairA"]["local"].get("relayProtocol"), res["pairA"]["remote"]["address"],
             res["pairA"]["remote"]["port"]), flush=True)


def run_page(daemon, transport, username, password, media=False, count=100, timeout_ms=60000,
             url_b=None):
    """Runs the page test against daemon over ?transport=udp|tcp, or turns: ("tls");
    returns the result dict.
    url_b: another TURN URI for peer B (default: the same as A's)."""
    if transport == "tls":   # turns: on the daemon's TURN-TLS listener (tgtest tls=True)
        url = "turns:%s:%d?transport=tcp" % (daemon.address, daemon.tls_port)
    else:
        url = "turn:%s:%d?transport=%s" % (daemon.address, daemon.port, transport)
    cfg = {"url": url, "urlB": url_b, "username": username, "credential": password, "media": media,
           "count": count, "timeoutMs": timeout_ms, "mediaMs": 3000}
    with PageServer() as page, Browser(media=media) as br:
        res = br.run(page.url, cfg)
    tgtest.check(isinstance(res, dict), "page returned %r" % (res,))
    if not res.get("ok"):
        raise tgtest.Failure("%s via %s: %s (ice A=%s B=%s gathering=%s; candidates %s)"
                             % ("media" if media else "data", url, res.get("error"),
                                res.get("iceA"), res.get("iceB"), res.get("gatherA"),
                                json.dumps(res.get("cands"))))
    return res
