"""Live upgrades keep TURN-TLS calls (issue 41): the old worker that holds them lingers.

A TURN-TLS client (a UDP allocation over a TLS control connection, a channel to a UDP
peer) sends numbered ChannelData every 10 ms while the peer sends numbered datagrams to
the relayed address at the same rate; `turngatectl upgrade` runs five times in a row. Checked: the TLS
connection never closes; the peer gets every datagram the client sent once and in order,
and the client every datagram the peer sent once and in order (the lingering worker keeps
the relay socket: there is no gap); `turngatectl status` (admin `status`, "lingering")
shows the old worker with its one call through all of them; a Refresh succeeds after
them; the allocation's end (Refresh 0) lets the old worker exit, and the status shows
none. With `limits.upgrade_linger: 2` the call ends about 2 s after the upgrade and
`stream_linger_ended` (turngate_stream_linger_ended_total) counts it (the gauges
turngate_upgrade_lingering_workers/_sessions read 1 while it lingers, 0 after); a disconnect of a
user ends every lingering call; an upgrade that fails after ready ends it (the old master
kills its lingering worker before it respawns the slot); a new allocation never takes the
lingering call's relay port, and stopping the daemon stops the lingering worker; with 0 it ends at the upgrade, as before lingering
existed. 700 lingering calls of one worker ended by the limit at once (more session-record
events than a ring holds) let it exit without waiting for a master to drain them. On a build without lingering the TLS
connection closes at the first upgrade.

One thread drives each TLS connection (reads and writes), since an SSL object is not to
be used from two threads at once. Relay ports 44200-44299 and 30300-31099 (no other
test's). Loopback
only, every wait bounded.
"""
import contextlib
import os
import queue
import signal
import struct
import sys
import threading
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Client, Daemon, Failure, alive, check, error_code,  # noqa: E402
                           free_port, make_cert, run_tests, scrape, stop_master, tls_client,
                           upgrade, wait_for)
from harness_admin import session_records  # noqa: E402
from harness_upgrade import held_socket  # noqa: E402
from test_tls import tls_config  # noqa: E402
from test_upgrade_streams import (UdpPeer, call_refresh, file_frames,  # noqa: E402
                                  read_stream)

RELAY = (44200, 44299)
CHANNEL = 0x4000
PERIOD = 0.01
UPGRADES = 5


class TlsCall:
    """A TURN-TLS client's call once set up, driven by one thread: numbered ChannelData
    out every PERIOD, the peer's numbers and STUN responses in."""

    def __init__(self, ctl):
        self.ctl = ctl
        self.sock = ctl.sock
        self.got, self.sent = [], 0
        self.closed = None
        self.stun = queue.Queue()
        self.out = queue.Queue()
        self.stop_tx = threading.Event()
        self.stop_rx = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _send_next(self):
        payload = b"C" + struct.pack("!I", self.sent) + b"c" * 59
        self.sock.sendall(struct.pack("!HH", CHANNEL, len(payload)) + payload)
        self.sent += 1

    def _run(self):
        self.nxt = time.monotonic()
        read_stream(self, lambda data: file_frames(self, data), before=self._write_due)

    def _write_due(self):
        """Before each read: the next numbered ChannelData when it is due, the queued
        requests; the read waits until the next is due (10 ms at most)."""
        if not self.stop_tx.is_set() and time.monotonic() >= self.nxt:
            self._send_next()
            self.nxt += PERIOD
        while not self.out.empty():
            self.sock.sendall(self.out.get())
        self.sock.settimeout(max(0.001, min(0.01, self.nxt - time.monotonic())))

    def refresh(self, lifetime=600):
        return call_refresh(self, self.out.put, lifetime)

    def close(self):
        self.stop_tx.set()
        self.stop_rx.set()
        self.th.join(5)
        self.sock.close()


def listen_port(relay=RELAY):
    """A port for a listener or /metrics (free_port's: never one it gave before) outside
    relay, the daemon's relay range (a listener there is a config error), and this file's."""
    for _ in range(100):    # bounded: one in this file's range is drawn again
        p = free_port(avoid=relay)
        if not RELAY[0] <= p <= RELAY[1]:
            return p
    raise Failure("no free port outside the relay ranges %r and %r" % (relay, RELAY))


def start(d, linger, relay=RELAY, udp=False, mport=None, dtls=False):
    """A daemon with TURN-UDP, TURN-TLS and TURN-DTLS listeners (and /metrics on mport):
    (daemon, TLS port; the DTLS port with dtls), and the UDP port too with udp."""
    crt, key = make_cert(d, "turn.test")
    udp_port, tls_port, dtls_port = (listen_port(relay) for _ in range(3))
    text = tls_config(d, udp_port, tls_port, dtls_port, crt, key, relay=relay)
    text += "limits:\n  upgrade_linger: %d\n" % linger
    if mport:
        text = text.replace("admin:\n", "admin:\n  metrics_endpoint: "
                            "\"http://127.0.0.1:%d/metrics\"\n" % mport, 1)
    daemon = Daemon(d, text, workers=2).start()
    port = dtls_port if dtls else tls_port
    return (daemon, port, udp_port) if udp else (daemon, port)


def tls_call(port, peer, client=tls_client):
    """A TURN-TLS allocation (client: dtls_client for TURN-DTLS) with a channel to peer,
    relaying: (call, relayed address)."""
    ctl = client(port)
    r = ctl.allocate()
    relayed = ctl.relayed(r)[0]
    check(error_code(ctl.perm("127.0.0.1", peer.port)[3]) is None, "CreatePermission")
    check(error_code(ctl.bind("127.0.0.1", peer.port, CHANNEL)[3]) is None, "ChannelBind")
    return TlsCall(ctl), relayed


def lingering(daemon):
    return daemon.admin({"cmd": "status"}).get("lingering")


def kill_all(pids):
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, TypeError):
            pass


def failed_upgrade(daemon, held):
    """An upgrade that fails after ready: the new binary's configuration names a listener
    on the port of held (a socket the test holds); the configuration is put back after.
    Waits for the old master's two workers."""
    text = open(daemon.conf).read()
    daemon.write_config(text.replace("listeners:\n", "listeners:\n  - name: busy\n"
                                     "    protocol: TURN-UDP\n    address: 127.0.0.1\n"
                                     "    port: %d\n    routes: [loopback]\n"
                                     % held.getsockname()[1], 1))
    rc, out, err = daemon.ctl("upgrade")
    check(rc == 1 and "upgrade failed" in err, "upgrade: rc %d %s%s" % (rc, out, err))
    daemon.write_config(text)
    wait_for(lambda: daemon.admin({"cmd": "status"})["workers"]["running"] == 2,
             "the old master's workers")


@contextlib.contextmanager
def linger_setup(d, linger, starter=None, connect=tls_call, **kw):
    """(starter or start)(d, linger, **kw) and a call by connect(port, peer) (a TURN-TLS
    one; None: the test makes its own and sets s.call) to a UDP peer: a namespace with
    daemon, port (TLS; udp_port too with udp=True), peer, call and relayed; pid (the
    master of the last upgrade) and old (the lingering workers' pids) are for the test to
    fill. On the way out it ends the call, the peer, that master, those workers and the
    daemon; then, unless the test failed, it scans the daemon's log."""
    started = (starter or start)(d, linger, **kw)
    s = types.SimpleNamespace(daemon=started[0], port=started[1], peer=UdpPeer(), call=None,
                              pid=None, old=[])
    s.udp_port = started[2] if len(started) > 2 else None
    try:
        if connect:
            s.call, s.relayed = connect(s.port, s.peer)
        yield s
    finally:
        if s.call is not None:
            s.call.close()
        s.peer.close()
        stop_master(s.daemon, s.pid)
        kill_all(s.old)
        s.daemon.kill()
    s.daemon.scan()


def upgrade_lingering(s):
    """An upgrade that leaves one old worker lingering with the one call: its entry of the
    status (its pid goes to s.old)."""
    s.pid = upgrade(s.daemon, 2)
    ls = lingering(s.daemon)
    s.old += [w["pid"] for w in ls or []]
    check(ls is not None and len(ls) == 1 and ls[0]["sessions"] == 1,
          "status shows one lingering worker with 1 call: %r" % (ls,))
    return ls[0]


def test_tls_call_lingers_through_upgrades(d):
    with linger_setup(d, 600) as s:
        call, peer, daemon, old = s.call, s.peer, s.daemon, s.old
        peer.start_tx(s.relayed)
        wait_for(lambda: len(peer.got) >= 20 and len(call.got) >= 20, "relaying both ways",
                 timeout=10)
        for i in range(UPGRADES):
            ls = upgrade_lingering(s)
            n_peer, n_call = len(peer.got), len(call.got)
            wait_for(lambda: len(peer.got) > n_peer + 10 and len(call.got) > n_call + 10,
                     "relaying after upgrade %d (%s)" % (i + 1, call.closed), timeout=10)
            check(call.closed is None, "upgrade %d: %s" % (i + 1, call.closed))
            check(ls["ends_in_s"] > 500, "the linger limit: %r" % (ls,))
        check(len(set(old)) == 1 and alive(old[0]), "the same old worker lingers: %r" % (old,))
        rc, out, err = daemon.ctl("status")
        check(rc == 0 and ("pid %d" % old[0]) in out,
              "turngatectl status names the lingering worker:\n%s%s" % (out, err))
        check(call.refresh() is None, "Refresh after the upgrades")
        call.stop_tx.set()
        peer.stop_tx.set()
        peer.tx.join(5)
        wait_for(lambda: len(peer.got) == call.sent and len(call.got) == peer.sent,
                 "every datagram (peer has %d of %d, client %d of %d)"
                 % (len(peer.got), call.sent, len(call.got), peer.sent), timeout=10)
        check(call.closed is None, "the connection: %s" % call.closed)
        check(peer.got == list(range(call.sent)), "client -> peer: once and in order")
        check(call.got == list(range(peer.sent)), "peer -> client: once and in order")
        print("%d upgrades: client -> peer %d, peer -> client %d, all once and in order; "
              "old worker pid %d lingered" % (UPGRADES, call.sent, peer.sent, old[0]))
        # The call ends: the old worker has nothing left and exits.
        check(call.refresh(0) is None, "Refresh 0")
        wait_for(lambda: lingering(daemon) == [] and not alive(old[0]),
                 "the lingering worker to exit")
        st = daemon.admin({"cmd": "stats"})
        check(st["counters"]["stream_linger_ended"] == 0, "none ended by the limit")


def test_linger_limit_ends_them(d):
    mport = listen_port()
    with linger_setup(d, 2, mport=mport) as s:
        call, daemon = s.call, s.daemon
        wait_for(lambda: call.sent >= 10, "sending")
        upgrade_lingering(s)
        m = scrape(mport)
        check(m["turngate_upgrade_lingering_workers"] == 1 and
              m["turngate_upgrade_lingering_sessions"] == 1 and
              m["turngate_stream_linger_ended_total"] == 0, "metrics while lingering")
        check(call.closed is None, "still open after the upgrade: %s" % call.closed)
        wait_for(lambda: call.closed is not None, "the linger limit to end the call",
                 timeout=20)
        wait_for(lambda: lingering(daemon) == [] and not alive(s.old[0]),
                 "the lingering worker to exit")
        st = daemon.admin({"cmd": "stats"})
        check(st["counters"]["stream_linger_ended"] == 1,
              "one call ended by the limit: %r" % (st["counters"]["stream_linger_ended"],))
        m = scrape(mport)
        check(m["turngate_upgrade_lingering_workers"] == 0 and
              m["turngate_upgrade_lingering_sessions"] == 0 and
              m["turngate_stream_linger_ended_total"] == 1, "metrics after the limit")
        print("linger limit 2 s: the call ended (%s), counted" % call.closed)


def test_disconnect_ends_lingering(d):
    """A disconnect of a user cannot reach into a lingering worker to pick that user's
    calls: every lingering call ends (it fails closed)."""
    with linger_setup(d, 600) as s:
        call, daemon = s.call, s.daemon
        wait_for(lambda: call.sent >= 10, "sending")
        upgrade_lingering(s)
        r = daemon.admin({"cmd": "disconnect", "user": "alice"})
        check(r.get("ok") is True, "disconnect: %r" % (r,))
        wait_for(lambda: call.closed is not None, "the lingering call to end", timeout=10)
        wait_for(lambda: lingering(daemon) == [] and not alive(s.old[0]),
                 "the lingering worker to exit")
        check(daemon.admin({"cmd": "stats"})["counters"]["stream_linger_ended"] == 0,
              "not counted as ended by the limit")


def test_failed_upgrade_ends_lingering(d):
    """An upgrade that fails after ready (the new binary's configuration names a listener
    on a port the test holds): the old master kills its lingering worker before it
    respawns the slot (one process per slot), so the TLS call ends, as before lingering
    existed; the old master serves on and a new TLS call relays."""
    daemon, port = start(d, 600)
    held = held_socket(RELAY, (port,))
    peer, call, call2 = UdpPeer(), None, None
    try:
        call, relayed = tls_call(port, peer)
        wait_for(lambda: call.sent >= 10, "sending")
        old = daemon.admin({"cmd": "status"})["pid"]
        failed_upgrade(daemon, held)
        check(daemon.admin({"cmd": "status"})["pid"] == old, "the old master serves")
        wait_for(lambda: call.closed is not None, "the lingering call to end", timeout=10)
        wait_for(lambda: lingering(daemon) == [], "no lingering worker")
        check("ends its TLS calls (the upgrade failed)" in daemon.stderr(),
              "the old master's line")
        call2, relayed2 = tls_call(port, peer)
        wait_for(lambda: len(peer.got) >= 10, "a new TLS call relays", timeout=10)
    finally:
        for c in (call, call2):
            if c is not None:
                c.close()
        peer.close()
        held.close()
        daemon.stop()


def test_lingering_port_not_reused(d):
    """The lingering call's relay port is outside the new master's table, but no new
    allocation takes it: with a relay range of two ports, after the upgrade one new UDP
    allocation gets the other port, the next is refused (508), and the lingering call
    still relays from its own port. Stopping the daemon then stops the lingering worker."""
    clients = []
    with linger_setup(d, 600, relay=(44290, 44291), udp=True) as s:
        call, relayed = s.call, s.relayed
        try:
            upgrade_lingering(s)
            c = Client(s.udp_port)
            clients.append(c)
            other = c.relayed(c.allocate())[0]
            check(other[1] != relayed[1] and 44290 <= other[1] <= 44291,
                  "the new allocation's port %r is not the lingering one %r"
                  % (other, relayed))
            c2 = Client(s.udp_port)
            clients.append(c2)
            c2.allocate(expect=508)
            n = len(call.got)
            s.peer.start_tx(relayed)
            wait_for(lambda: len(call.got) > n + 10, "the lingering call relays (%s)"
                     % call.closed, timeout=10)
            check(call.closed is None, "the lingering call: %s" % call.closed)
            # Stopping the daemon stops the lingering worker too.
            stop_master(s.daemon, s.pid)
            s.pid = None
            wait_for(lambda: not alive(s.old[0]),
                     "the lingering worker to stop with the daemon")
            wait_for(lambda: call.closed is not None, "the lingering call to end", timeout=10)
        finally:
            for c in clients:
                c.close()


def test_linger_zero_ends_them_at_upgrade(d):
    with linger_setup(d, 0) as s:
        call = s.call
        wait_for(lambda: call.sent >= 10, "sending")
        s.pid = upgrade(s.daemon, 2)
        wait_for(lambda: call.closed is not None, "the call to end at the upgrade",
                 timeout=10)
        check(lingering(s.daemon) == [], "nothing lingers")


MANY_RELAY = (30300, 31099)
MANY = 700


def test_many_lingering_end(d):
    """700 TLS calls of one worker linger (more than a slot's session-record ring holds,
    512) and the linger limit (2 s) ends them in one go, session records written to a
    file: no master drains the old segment's ring any more (the new master recorded
    those calls at its take-over), so the lingering worker keeps no backlog and exits
    without waiting for one (before: a 1 s stall and ERROR "... not drained by the
    master in time"). Each call has its one record, the take-over's shutdown."""
    crt, key = make_cert(d, "turn.test")
    udp_port, tls_port, dtls_port = (listen_port(MANY_RELAY) for _ in range(3))
    text = tls_config(d, udp_port, tls_port, dtls_port, crt, key, relay=MANY_RELAY)
    text += "limits:\n  upgrade_linger: 2\n  user_quota: %d\n" % (MANY + 10)
    check("  workers: 2\n" in text, "the config names its workers")
    text = text.replace("  workers: 2\n", "  workers: 1\n", 1)    # all in one slot
    check("  drain_timeout: 1\n" in text, "the config has an admin section")
    text = text.replace("  drain_timeout: 1\n", "  drain_timeout: 1\n  session_records:\n"
                        "    file: %s\n" % os.path.join(d, "sessions.jsonl"), 1)
    daemon = Daemon(d, text, workers=1).start()
    calls, pid, old = [], None, []
    try:
        for _ in range(MANY):
            c = tls_client(tls_port)
            check(c.relayed(c.allocate()), "Allocate")
            calls.append(c)
        pid = upgrade(daemon, 1)
        ls = lingering(daemon) or []
        old = [w["pid"] for w in ls]
        check(len(ls) == 1 and ls[0]["sessions"] == MANY,
              "one worker lingers with %d calls: %r" % (MANY, ls))
        wait_for(lambda: not alive(old[0]), "the lingering worker to exit", timeout=20)
        err = daemon.stderr()
        check("not drained by the master in time" not in err,
              "the lingering worker waited for its session records:\n%s" % err[-2000:])
        ends = [r for r in session_records(d) if r["reason"] == "shutdown"]
        check(len(ends) == MANY, "a shutdown record each: %d" % len(ends))
    finally:
        for c in calls:
            c.close()
        stop_master(daemon, pid)
        kill_all(old)
        daemon.kill()
    daemon.scan()
    print("%d lingering calls ended by the limit: the worker exited, no wait" % MANY)


if __name__ == "__main__":
    run_tests([test_tls_call_lingers_through_upgrades, test_linger_limit_ends_them,
               test_disconnect_ends_lingering, test_failed_upgrade_ends_lingering,
               test_lingering_port_not_reused, test_linger_zero_ends_them_at_upgrade,
               test_many_lingering_end])
