#!/usr/bin/env python3
"""Session records (#40): one JSON line per ended allocation, written by the master from the
workers' end events in the shared segment (admin.session_records.file), against the real
daemon with 2 workers.

Each end reason is recorded (Refresh 0, expiry, a closed TURN-TCP connection, turngatectl
revoke, turngatectl disconnect, a reload that removes the listener) with the bytes and packets the test relayed each way; a
worker killed with SIGKILL whose UDP allocation its replacement re-adopts writes no record
until the allocation ends, and then exactly one; a kill -9 of every process and a new start
on the state file records the allocation that expired in the gap (reason expiry) and
nothing twice; a live upgrade loses and duplicates nothing; the file is reopened on
`turngatectl logrotate` and SIGUSR1; a webhook that goes down and comes back gets every
record (in JSON array batches) once it is back; an https:// webhook verifies the server's
certificate (a CA file, the name in the URL or webhook_server_name): an untrusted
certificate or a wrong name is refused and counted, and a trusted server that comes back
gets every record. Relay ports 65520-65535 (no other test's:
the restart rebinds the same relay ports). Without a state file, a stop records what is
still open (reason shutdown).
"""
import contextlib
import http.server
import json
import math
import os
import signal
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (A_LIFETIME, Client, Daemon, Peer, StreamClient, check,  # noqa: E402
                           config, free_port, run_tests, scrape, stop_master, upgrade,
                           wait_equal, wait_for)
from harness_admin import session_records as records  # noqa: E402
from test_quota import kill_worker  # noqa: E402
from test_revoke import ctl_ok  # noqa: E402

RELAY = (65520, 65535)


def make_config(d, port, tcp_port=None, webhook=None, limits=None, metrics=None,
                extra_admin="", extra_records="", out=None, peers=("127.0.0.1",),
                relay=RELAY):
    text = config(d, [("udp", port, "TURN-UDP", ["loopback"])], {"loopback": list(peers)},
                  relay=relay, limits=limits)
    extra = extra_admin + "  session_records:\n    file: %s\n" % (
        out or os.path.join(d, "sessions.jsonl"))
    if webhook:
        extra += "    webhook: %s\n" % webhook
    extra += extra_records
    if metrics:
        extra += "  metrics_endpoint: http://127.0.0.1:%d/metrics\n" % metrics
    text = text.replace("  drain_timeout: 1\n", "  drain_timeout: 1\n" + extra, 1)
    if tcp_port:
        text = text.replace("listeners:\n", "listeners:\n  - name: tcp\n    protocol: TURN-TCP\n"
                            "    address: 127.0.0.1\n    port: %d\n    routes: [loopback]\n"
                            % tcp_port, 1)
    return text


def of_user(recs, c):
    return [r for r in recs if r["username"] == c.username]


def wait_record(d, c, what, name="sessions.jsonl"):
    return wait_for(lambda: of_user(records(d, name), c), what)[0]


@contextlib.contextmanager
def records_daemon(d, text, *closers, wait=True):
    """The daemon started on text (wait: until its workers run) and a list for the test's
    clients: (daemon, cs). On the way out the clients are closed, then each of closers is
    called (a peer's or webhook server's close), then the daemon stops: with exit status
    0 unless the test failed before (that failure is the one reported)."""
    daemon = Daemon(d, text).start(wait=wait)
    cs = []
    try:
        yield daemon, cs
    finally:
        for c in cs:
            c.close()
        for close in closers:
            close()
        rc = daemon.stop()
    check(rc == 0, "exit status")


def end_some(port, names, cs):
    """An allocation of each of names (a client each, added to cs) ended by Refresh 0:
    the clients."""
    ended = []
    for n in names:
        c = Client(port, n)
        cs.append(c)
        ended.append(c)
        c.allocate()
        c.release()
    return ended


def allocs(daemon):
    return daemon.admin({"cmd": "allocations"})["allocations"]


def relay_some(c, peer, n_out, n_back):
    """n_out Send indications of distinct sizes to peer, n_back datagrams back from the peer
    to the relayed address. Returns (bytes out, bytes back)."""
    r = c.allocate()
    relayed = c.relayed(r)[0]
    c.perm("127.0.0.1", peer.port)
    out = 0
    for i in range(n_out):
        c.send("127.0.0.1", peer.port, b"x" * (100 + i))
        out += 100 + i
    got = wait_for(lambda: len(peer.drain()) and True, "data at the peer")
    check(got, "no data at the peer")
    # what has not arrived yet comes before the replies (one socket, loopback, in order)
    deadline = time.monotonic() + 5
    seen = 1
    while seen < n_out and time.monotonic() < deadline:
        seen += len(peer.drain(timeout=0.3))
    back = 0
    for i in range(n_back):
        peer.sock.sendto(b"y" * (50 + i), relayed)
        back += 50 + i
        check(c.recv_data(timeout=3) is not None, "reply %d not relayed" % i)
    return out, back


def test_reasons_and_bytes(d):
    """Refresh 0, expiry, TCP close, revoke and the admin's disconnect: one record each, with
    the reason, the user, the client and relay addresses, the peer, the transport, the
    times, and the bytes/packets the test relayed."""
    port, tport = free_port(), free_port()
    peer = Peer("127.0.0.1")
    with records_daemon(d, make_config(d, port, tcp_port=tport), peer.close) as (daemon, cs):
        a = Client(port, "alice")
        cs.append(a)
        out, back = relay_some(a, peer, 5, 3)
        time.sleep(0.2)
        a.release()
        r = wait_record(d, a, "alice's record")
        check(r["reason"] == "refresh0" and r["transport"] == "udp" and
              r["listener"] == "udp" and r["user"] == "alice", r)
        check(r["to_peer"] == {"packets": 5, "bytes": out}, r)
        check(r["from_peer"] == {"packets": 3, "bytes": back}, r)
        check(r["peers"]["count"] == 1 and r["peers"]["addresses"] == ["127.0.0.1"], r)
        check(r["client"] == "127.0.0.1:%d" % a.sock.getsockname()[1], r)
        check(r["relay"].startswith("127.0.0.1:") and r["duration"] >= 0.2, r)
        check(r["start"] < r["end"] and r["end"].endswith("Z"), r)

        t = StreamClient(tport, "tom")
        cs.append(t)
        t.allocate()
        t.sock.close()
        r = wait_record(d, t, "tom's record")
        check(r["reason"] == "disconnect" and r["transport"] == "tcp", r)

        v = Client(port, "victor")
        cs.append(v)
        v.allocate()
        ctl_ok(daemon, "revoke", "--user-id", "victor")
        r = wait_record(d, v, "victor's record")
        check(r["reason"] == "revoke", r)

        w = Client(port, "wendy")
        cs.append(w)
        w.allocate()
        check(daemon.admin({"cmd": "disconnect", "user": w.username})["ok"], "disconnect")
        r = wait_record(d, w, "wendy's record")
        check(r["reason"] == "admin_disconnect", r)

        recs = records(d)
        check(len(recs) == 4, "expected 4 records, got %r" % recs)


def test_listener_removed(d):
    """A reload that removes a listener ends its allocations: reason listener_removed, with
    the removed listener's name (the worker names it; the new config no longer has it)."""
    port, port2 = free_port(), free_port()
    text = make_config(d, port)
    two = text.replace("listeners:\n", "listeners:\n  - name: gone\n    protocol: TURN-UDP\n"
                       "    address: 127.0.0.1\n    port: %d\n    routes: [loopback]\n"
                       % port2, 1)
    with records_daemon(d, two) as (daemon, cs):
        a = Client(port2, "lisa")
        cs.append(a)
        a.allocate()
        gen = daemon.admin({"cmd": "status"})["generation"]
        daemon.write_config(text)
        daemon.signal(signal.SIGHUP)
        wait_for(lambda: daemon.admin({"cmd": "status"})["generation"] > gen, "the reload")
        r = wait_record(d, a, "lisa's record")
        check(r["reason"] == "listener_removed" and r["listener"] == "gone", r)


def test_expiry_and_metrics(d):
    """An allocation of the minimum lifetime (1 s) expires: reason expiry; the metrics count
    the records written and name the build."""
    port, mport = free_port(), free_port()
    with records_daemon(d, make_config(d, port, metrics=mport,
                                       limits={"allocation_lifetime": 1,
                                               "max_allocation_lifetime": 1})) as (daemon, cs):
        e = Client(port, "erin")
        cs.append(e)
        e.allocate()
        r = wait_record(d, e, "erin's record")
        check(r["reason"] == "expiry" and 0.9 <= r["duration"] <= 5, r)
        text = metrics_text(mport)
        check('turngate_session_records_total{result="written"} 1' in text, text)
        check('turngate_session_records_total{result="dropped"} 0' in text, text)
        check("turngate_session_webhook_failures_total 0" in text, text)
        check('turngate_build_info{version="' in text, text)


def test_logrotate(d):
    """logrotate's steps: the file renamed, then `turngatectl logrotate` (or SIGUSR1): the
    records before are in the renamed file, those after in a new one at the path."""
    port = free_port()
    with records_daemon(d, make_config(d, port)) as (daemon, cs):
        a, = end_some(port, ["anna"], cs)
        wait_record(d, a, "anna's record")
        os.rename(os.path.join(d, "sessions.jsonl"), os.path.join(d, "sessions.jsonl.1"))
        out = ctl_ok(daemon, "logrotate")
        check("reopened" in out, out)
        b, = end_some(port, ["bert"], cs)
        wait_record(d, b, "bert's record in the new file")
        check([r["user"] for r in records(d, "sessions.jsonl.1")] == ["anna"], "old file")
        os.rename(os.path.join(d, "sessions.jsonl"), os.path.join(d, "sessions.jsonl.2"))
        # The second reopen's log line, not any after the name "bert" (which no log line
        # carries: the first reopen's matched and cleo could end before the signal was
        # handled, her record then drained into the renamed file)
        reopens = daemon.stderr().count("reopened")
        daemon.signal(signal.SIGUSR1)
        wait_for(lambda: daemon.stderr().count("reopened") > reopens, "the reopen")
        c, = end_some(port, ["cleo"], cs)
        wait_record(d, c, "cleo's record in the newest file")
        check([r["user"] for r in records(d, "sessions.jsonl.2")] == ["bert"], "2nd file")
        check([r["user"] for r in records(d)] == ["cleo"], "newest file")


def adoption_line(daemon):
    """The replacement worker's "predecessor's allocations" line (waited for)."""
    key = "predecessor's allocations:"
    wait_for(lambda: key in daemon.stderr(), "the replacement's adoption line")
    return [x for x in daemon.stderr().splitlines() if key in x][-1]


def test_worker_kill(d):
    """A worker killed with SIGKILL: its UDP allocation is re-adopted, no record is written
    for it then; when it ends, exactly one."""
    port = free_port()
    daemon = Daemon(d, make_config(d, port)).start()
    cs = []
    try:
        a = Client(port, "kim")
        cs.append(a)
        a.allocate()
        kill_worker(daemon, allocs(daemon)[0]["worker"])
        wait_for(lambda: len(allocs(daemon)) == 1, "the allocation re-adopted")
        # nothing lost: the replacement's adoption line is routine, INFO (not WARN, which
        # operators alert on)
        line = adoption_line(daemon)
        check(" 1 adopted," in line and " INFO " in line, line)
        time.sleep(0.5)
        check(records(d) == [], "a record for a re-adopted allocation: %r" % records(d))
        a.release()
        r = wait_record(d, a, "kim's record")
        check(r["reason"] == "refresh0", r)
        time.sleep(0.5)
        check(len(records(d)) == 1, "records: %r" % records(d))
    finally:
        for c in cs:
            c.close()
        daemon.kill()
        daemon.scan()


def test_worker_kill_tcp_lifetime(d):
    """A worker killed with SIGKILL: its replacement ends its TURN-TCP allocation (the
    connection died with it) as worker_crash, counts it as ended and observes its lifetime
    (the histogram's _count equals turngate_allocations_ended_total)."""
    port, tport, mport = free_port(), free_port(), free_port()
    daemon = Daemon(d, make_config(d, port, tcp_port=tport, metrics=mport)).start()
    cs = []
    try:
        tcp = StreamClient(tport, "toni")
        cs.append(tcp)
        tcp.allocate(extra=[(A_LIFETIME, struct.pack("!I", 600))])
        kill_worker(daemon, allocs(daemon)[0]["worker"])
        check(wait_record(d, tcp, "toni's record")["reason"] == "worker_crash", records(d))
        # a call lost (its connection died with the worker): the adoption line is a WARN
        line = adoption_line(daemon)
        check(" 1 TCP," in line and " WARN " in line, line)
        wait_equal(mport, {"turngate_allocations_ended_total": 1,
                           "turngate_allocation_lifetime_seconds_count": 1})
    finally:
        for c in cs:
            c.close()
        daemon.kill()
        daemon.scan()


def test_restart(d):
    """kill -9 of every process, a new start on the state file: the allocation that expired
    while nothing ran is recorded at the take-over (reason expiry), the one taken over is
    recorded once when it ends, the one ended before the kill is not recorded again."""
    port = free_port(late=True)     # bound again by the start 3 s after the kill
    # allocation_lifetime is the shortest lifetime the daemon grants: 2 s for sven (if it
    # runs out before the kill, the worker records the expiry: one record either way)
    daemon = Daemon(d, make_config(d, port, limits={"allocation_lifetime": 2})).start()
    cs = []
    try:
        done, long, short = (Client(port, "dora"), Client(port, "lena"),
                             Client(port, "sven"))
        cs += [done, long, short]
        done.allocate()
        done.release()
        wait_record(d, done, "dora's record")
        long.allocate(extra=[(A_LIFETIME, struct.pack("!I", 600))])
        short.allocate()
        daemon.kill_all()
        time.sleep(3)    # sven's lifetime runs out while nothing runs
        daemon.start()
        r = wait_record(d, short, "sven's expiry record at the take-over")
        check(r["reason"] == "expiry", r)
        check(of_user(records(d), long) == [], "lena recorded before her end")
        long.release()
        wait_record(d, long, "lena's record")
        time.sleep(0.5)
        users = sorted(r["user"] for r in records(d))
        check(users == ["dora", "lena", "sven"], "records: %r" % users)
    finally:
        for c in cs:
            c.close()
        daemon.kill()
        daemon.scan()


def test_restart_lifetimes(d):
    """kill -9 of every process, a new start on the state file: the allocations the take-over
    ends (one expired while nothing ran, one TURN-TCP that cannot be taken over) are counted
    as ended and each observed in the lifetime histogram too, as a worker's end is (its
    _count equals turngate_allocations_ended_total), with one record each."""
    port, tport = free_port(late=True), free_port(late=True)    # bound again after the kill
    mport = free_port()
    text = make_config(d, port, tcp_port=tport, metrics=mport,
                       limits={"allocation_lifetime": 3})
    daemon = Daemon(d, text).start()
    cs = []
    long_life = [(A_LIFETIME, struct.pack("!I", 600))]
    try:
        done, kept, tcp, short = (Client(port, "dana"), Client(port, "kurt"),
                                  StreamClient(tport, "tess"), Client(port, "ivo"))
        cs += [done, kept, tcp, short]
        def mono():
            return time.clock_gettime(time.CLOCK_MONOTONIC)     # the daemon's clock

        # Each lifetime lies between what the times taken here allow (each end and its
        # creation between two of them), rounded to the nearest second as the daemon does.
        t0 = mono()
        done.allocate()
        done.release()
        wait_record(d, done, "dana's record")
        dana = (0.0, mono() - t0)
        kept.allocate(extra=long_life)
        t_tcp = mono()
        tcp.allocate(extra=long_life)
        t_tcp_done = mono()
        # ivo's record expires (allocation_lifetime, set by the worker after it read the
        # request) at most 3 s after his response came: once that has passed the take-over
        # ends it (or, were the kill more than 3 s late, his worker did: counted and observed
        # either way). tess's TURN-TCP allocation is always ended by the take-over.
        t_ivo = mono()
        short.allocate()
        granted = mono()
        daemon.kill_all()
        while mono() < granted + 3.1:
            time.sleep(0.1)
        t_start = mono()
        daemon.start()
        t_started = mono()
        check("1 allocations taken over" in daemon.stderr() and
              " expired, 1 TCP/TLS/DTLS" in daemon.stderr(),
              "the take-over did not end tess's allocation")
        check(wait_record(d, short, "ivo's record")["reason"] == "expiry", records(d))
        check(wait_record(d, tcp, "tess's record")["reason"] == "shutdown", records(d))
        m = scrape(mport)
        ended = m["turngate_allocations_ended_total"]
        check(ended == 3, "ended %r" % ended)
        check(m["turngate_allocation_lifetime_seconds_count"] == ended,
              "lifetimes observed %r, allocations ended %r" %
              (m["turngate_allocation_lifetime_seconds_count"], ended))
        # dana's from her allocation to her record; ivo's from creation to his expiry, 3 s
        # (ended by the take-over or by his worker's timer, no later than the take-over);
        # tess's from creation (before her response) to the take-over (during the start)
        ivo = (3.0, max(3.0, t_started - t_ivo))
        tess = (t_start - t_tcp_done, t_started - t_tcp)
        spans = [dana, ivo, tess]
        low = sum(math.ceil(lo - 0.5) for lo, _ in spans)
        high = sum(math.floor(hi + 0.5) for _, hi in spans)
        inf = m['turngate_allocation_lifetime_seconds_bucket{le="+Inf"}']
        le10 = m['turngate_allocation_lifetime_seconds_bucket{le="10"}']
        check(inf == 3, m)
        check(sum(math.floor(hi + 0.5) <= 10 for _, hi in spans) <= le10 <=
              sum(math.ceil(lo - 0.5) <= 10 for lo, _ in spans),
              "le=10 %r for lifetimes within %r" % (le10, spans))
        check(low <= m["turngate_allocation_lifetime_seconds_sum"] <= high,
              "sum %r not within [%r, %r] (%r)" %
              (m["turngate_allocation_lifetime_seconds_sum"], low, high, spans))
        kept.release()
        wait_record(d, kept, "kurt's record")
        wait_equal(mport, {"turngate_allocations_ended_total": 4,
                           "turngate_allocation_lifetime_seconds_count": 4})
        time.sleep(0.5)
        users = sorted(r["user"] for r in records(d))
        check(users == ["dana", "ivo", "kurt", "tess"], "records: %r" % users)
    finally:
        for c in cs:
            c.close()
        daemon.kill()
        daemon.scan()


def test_upgrade(d):
    """A live upgrade: allocations that ended before it are recorded once, the ones taken
    over once when they end after it."""
    port = free_port()
    daemon = Daemon(d, make_config(d, port)).start()
    cs, new_pid = [], None
    try:
        before, after = Client(port, "ulla"), Client(port, "uwe")
        cs += [before, after]
        before.allocate()
        after.allocate()
        before.release()
        new_pid = upgrade(daemon)
        wait_record(d, before, "ulla's record")
        check(of_user(records(d), after) == [], "uwe recorded before his end")
        after.release()
        wait_record(d, after, "uwe's record")
        time.sleep(0.5)
        users = sorted(r["user"] for r in records(d))
        check(users == ["ulla", "uwe"], "records: %r" % users)
    finally:
        for c in cs:
            c.close()
        stop_master(daemon, new_pid)
        daemon.kill()


def test_shutdown_without_state_file(d):
    """Without a state file the allocations still open end with the daemon: one shutdown
    record each at the stop (with one, the next start takes them over instead)."""
    port = free_port()
    with records_daemon(d, make_config(d, port, extra_admin='  state_dir: ""\n')) as (daemon, cs):
        a = Client(port, "sam")
        cs.append(a)
        a.allocate()
    recs = records(d)
    check(len(recs) == 1 and recs[0]["user"] == "sam" and recs[0]["reason"] == "shutdown",
          "records: %r" % recs)


def test_quota(d):
    """An Allocate refused over limits.user_quota (486) is recorded with reason quota: the
    user, the refused client's address, no traffic; the granted one keeps its own record."""
    port = free_port()
    with records_daemon(d, make_config(d, port, limits={"user_quota": 1})) as (daemon, cs):
        a, b = Client(port, "quinn"), Client(port, "quinn")
        cs += [a, b]
        a.allocate()
        b.allocate(expect=486)
        r = wait_record(d, b, "the refusal's record")
        check(r["reason"] == "quota" and r["user"] == "quinn", r)
        check(r["client"] == "127.0.0.1:%d" % b.sock.getsockname()[1], r)
        check(r["to_peer"] == {"packets": 0, "bytes": 0} and r["peers"]["count"] == 0, r)
        a.release()
        wait_for(lambda: len(records(d)) == 2, "quinn's granted allocation's record")
        check([x["reason"] for x in records(d)] == ["quota", "refresh0"], records(d))
        check(records(d)[1]["client"] == "127.0.0.1:%d" % a.sock.getsockname()[1], records(d))


def stdout_records(daemon):
    """The records among the master's standard output (the harness puts it with stderr)."""
    return [json.loads(line) for line in daemon.stderr().splitlines()
            if line.startswith('{"type":"session_')]


def test_stdout_start_and_peers(d):
    """file: stdout (containers) with start: true: a session_start line when the allocation
    is granted (who, from where, the relay address; no end fields), then its session_end
    with peers.count 6 and the first 4 (SHM_REC_PEERS) permission addresses."""
    port = free_port()
    with records_daemon(d, make_config(d, port, out="stdout", peers=("127.0.0.0/8",),
                                       extra_records="    start: true\n")) as (daemon, cs):
        a = Client(port, "stella")
        cs.append(a)
        r = a.allocate()
        relayed = a.relayed(r)[0]
        s = wait_for(lambda: [x for x in stdout_records(daemon)
                              if x["type"] == "session_start"], "the start record")[0]
        check(s["user"] == "stella" and s["listener"] == "udp" and s["transport"] == "udp", s)
        check(s["client"] == "127.0.0.1:%d" % a.sock.getsockname()[1], s)
        check(s["relay"] == "%s:%d" % relayed, s)
        check(s["server"] == "127.0.0.1:%d" % port, s)
        check(s["start"].endswith("Z"), s)
        check(not any(k in s for k in ("end", "duration", "reason", "to_peer")), s)
        ips = ["127.0.0.%d" % i for i in range(2, 8)]
        for ip in ips:
            check(a.perm(ip) is not None, "CreatePermission " + ip)
        a.release()
        e = wait_for(lambda: [x for x in stdout_records(daemon)
                              if x["type"] == "session_end"], "the end record")[0]
        check((e["id"], e["gen"], e["start"]) == (s["id"], s["gen"], s["start"]), (s, e))
        check(e["reason"] == "refresh0" and e["peers"]["count"] == 6, e)
        check(e["peers"]["addresses"] == ips[:4], e)
        check(records(d) == [], "a file written with file: stdout")
        time.sleep(0.3)
        check(len(stdout_records(daemon)) == 2, "records: %r" % stdout_records(daemon))


class Hook(http.server.BaseHTTPRequestHandler):
    got = []

    def do_POST(self):
        n = int(self.headers["Content-Length"])
        batch = json.loads(self.rfile.read(n))
        Hook.got.extend(batch)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def serve(port):
    http.server.HTTPServer.allow_reuse_address = True
    srv = http.server.HTTPServer(("127.0.0.1", port), Hook)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_webhook(d):
    """Records POSTed in JSON arrays; the webhook goes down (failures counted, records kept
    in the backlog) and comes back: every record arrives, none twice."""
    port, hport, mport = free_port(), free_port(), free_port()
    Hook.got = []
    hook = HookServer(hport)
    with records_daemon(d, make_config(d, port, webhook="http://127.0.0.1:%d/hook" % hport,
                                       metrics=mport), hook.close) as (daemon, cs):
        end_some(port, ["hank"], cs)
        wait_for(lambda: [r for r in Hook.got if r["user"] == "hank"], "hank at the hook")
        hook.close()
        names = ["hu%d" % i for i in range(5)]
        end_some(port, names, cs)
        wait_for(lambda: len(records(d)) == 6, "6 records in the file")

        wait_for(lambda: webhook_failures(mport) >= 1, "a failed delivery counted")
        check(webhook_metric(mport, "backlog") == 5, "turngate_session_webhook_backlog")
        hook.start()
        wait_for(lambda: len(Hook.got) == 6, "the backlog delivered", timeout=30)
        wait_for(lambda: webhook_metric(mport, "backlog") == 0, "the backlog gauge at 0")
        check(webhook_metric(mport, "dropped_total") == 0, "records dropped")
        check(sorted(r["user"] for r in Hook.got) == sorted(["hank"] + names),
              "hook got %r" % [r["user"] for r in Hook.got])


def make_ca_cert(d, name, san):
    """A self-signed certificate (its own CA) for subjectAltName san: (cert, key)."""
    crt, key = os.path.join(d, name + ".crt"), os.path.join(d, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "30", "-subj", "/CN=" + name,
                    "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-addext", "subjectAltName=" + san, "-keyout", key, "-out", crt],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return crt, key


class TlsHook(Hook):
    handshakes = 0


def serve_tls(port, crt, key):
    """Hook's server behind TLS with (crt, key); counts the completed handshakes."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)

    class Server(http.server.HTTPServer):
        allow_reuse_address = True

        def get_request(self):
            sock, addr = self.socket.accept()
            try:
                sock.settimeout(5)
                conn = ctx.wrap_socket(sock, server_side=True)
            except (OSError, ssl.SSLError):
                sock.close()
                raise
            TlsHook.handshakes += 1
            return conn, addr

    srv = Server(("127.0.0.1", port), Hook)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


class HookServer:
    """Hook's server on port, over TLS with cert (crt, key); up from the start. close()
    stops it (again: nothing), start() starts it again, e.g. with another certificate."""

    def __init__(self, port, cert=None):
        self.port, self.srv = port, None
        self.start(cert)

    def start(self, cert=None):
        self.srv = serve_tls(self.port, *cert) if cert else serve(self.port)

    def close(self):
        if self.srv is not None:
            self.srv.shutdown()
            self.srv.server_close()
            self.srv = None


def webhook_metric(mport, name):
    """turngate_session_webhook_NAME's value (None when it is not exported)."""
    for line in metrics_text(mport).splitlines():
        if line.startswith("turngate_session_webhook_%s " % name):
            return int(line.split()[1])
    return None


def metrics_text(mport):
    """The daemon's /metrics page (its text as it is)."""
    return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport,
                                  timeout=10).read().decode()


def webhook_failures(mport):
    return webhook_metric(mport, "failures_total") or 0


def test_webhook_https(d):
    """An https:// webhook with webhook_ca_file: a server whose certificate chains to it
    gets the batches; one with an untrusted certificate is refused at the handshake (no
    request reaches it) and counted in turngate_session_webhook_failures_total; the trusted
    server back on the port gets every record that waited, none twice."""
    port, hport, mport = free_port(), free_port(), free_port()
    ca, ca_key = make_ca_cert(d, "hook", "IP:127.0.0.1")
    evil, evil_key = make_ca_cert(d, "evil", "IP:127.0.0.1")
    Hook.got = []
    TlsHook.handshakes = 0
    hook = HookServer(hport, (ca, ca_key))
    with records_daemon(d, make_config(d, port, webhook="https://127.0.0.1:%d/hook" % hport,
                                       metrics=mport,
                                       extra_records="    webhook_ca_file: %s\n" % ca),
                        hook.close) as (daemon, cs):
        end_some(port, ["hedi"], cs)
        wait_for(lambda: [r for r in Hook.got if r["user"] == "hedi"], "hedi at the hook")
        check(webhook_failures(mport) == 0, "failures with a trusted server")
        hook.close()

        hook.start((evil, evil_key))
        names = ["hx%d" % i for i in range(4)]
        end_some(port, names, cs)
        wait_for(lambda: len(records(d)) == 5, "5 records in the file")
        wait_for(lambda: webhook_failures(mport) >= 2, "the untrusted server's refusals")
        wait_for(lambda: "certificate verification failed" in daemon.stderr(),
                 "the refusal's reason in the log")
        check(len(Hook.got) == 1, "the untrusted server got records: %r" % Hook.got)
        hook.close()

        hook.start((ca, ca_key))
        wait_for(lambda: len(Hook.got) == 5, "the backlog delivered", timeout=30)
        time.sleep(0.5)
        check(sorted(r["user"] for r in Hook.got) == sorted(["hedi"] + names),
              "hook got %r" % [r["user"] for r in Hook.got])


def test_webhook_https_name(d):
    """The certificate must carry the verified name: the URL's host (127.0.0.1) against a
    certificate for hook.example only is refused; a reload with webhook_server_name:
    hook.example (the same URL) delivers what waited."""
    port, hport, mport = free_port(), free_port(), free_port()
    crt, key = make_ca_cert(d, "named", "DNS:hook.example")
    Hook.got = []
    hook = HookServer(hport, (crt, key))
    url = "https://127.0.0.1:%d/hook" % hport
    base = "    webhook_ca_file: %s\n" % crt
    with records_daemon(d, make_config(d, port, webhook=url, metrics=mport,
                                       extra_records=base), hook.close) as (daemon, cs):
        end_some(port, ["nina", "nils"], cs)
        wait_for(lambda: webhook_failures(mport) >= 1, "the name mismatch refused")
        check(Hook.got == [], "delivered to a certificate of another name")
        check("certificate verification failed" in daemon.stderr(), "the reason")
        gen = daemon.admin({"cmd": "status"})["generation"]
        daemon.write_config(make_config(
            d, port, webhook=url, metrics=mport,
            extra_records=base + "    webhook_server_name: hook.example\n"))
        daemon.signal(signal.SIGHUP)
        wait_for(lambda: daemon.admin({"cmd": "status"})["generation"] > gen, "the reload")
        wait_for(lambda: len(Hook.got) == 2, "the backlog delivered", timeout=30)
        check(sorted(r["user"] for r in Hook.got) == ["nils", "nina"], repr(Hook.got))


if __name__ == "__main__":
    run_tests([test_reasons_and_bytes, test_listener_removed, test_expiry_and_metrics, test_logrotate,
               test_worker_kill, test_worker_kill_tcp_lifetime, test_restart, test_restart_lifetimes,
               test_upgrade, test_shutdown_without_state_file,
               test_quota, test_stdout_start_and_peers, test_webhook, test_webhook_https, test_webhook_https_name])
