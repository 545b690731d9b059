"""Live upgrades keep TURN-DTLS calls (issue 41): the old worker that holds them lingers,
and the new workers forward its clients' datagrams to it.

A TURN-DTLS client (a UDP allocation over a DTLS association, a channel to a UDP peer)
sends numbered ChannelData every 10 ms while the peer sends numbered datagrams to the
relayed address at the same rate; `turngatectl upgrade` runs five times in a row. After
each, the client's datagrams reach the listener socket that the new workers read: they
forward them to the lingering old worker (worker/dtlslinger.c), which answers from the
listener's address and keeps its relay socket. Checked: the association never closes; the
peer gets every datagram the client sent exactly once, and the client every datagram the
peer sent exactly once (loopback at 100 a second loses none); a Refresh succeeds after
each upgrade; `turngatectl status` (admin `status`, "lingering") shows the same old worker
with its one DTLS call through all of them; the client's close_notify ends the call and
the old worker exits. With `limits.upgrade_linger: 2` the call ends at the limit, the
metrics count it (turngate_upgrade_lingering_dtls_sessions while it lingers,
turngate_stream_linger_ended_total after). Bad input on the forwarding channel (garbage,
a short header, a forged header for an unknown client) is dropped: nothing crashes and
the call relays on. An upgrade that fails after ready ends the call (the old master kills
its lingering worker), leaves no file behind, and a new DTLS client relays. On a build
without this the association ends at the first upgrade (the old worker closes it as it
exits, and the new workers know nothing of it).

Relay ports 44350-44399 (no other test's). Loopback only, every wait bounded.
"""
import glob
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (alive, check, dtls_client, run_tests, scrape,  # noqa: E402
                           upgrade, wait_for)
from harness_upgrade import held_socket  # noqa: E402
from test_upgrade_linger import (UPGRADES, failed_upgrade, linger_setup,  # noqa: E402
                                 lingering, listen_port, tls_call)
from test_upgrade_linger import start as linger_start  # noqa: E402

RELAY = (44350, 44399)


def start(d, linger, mport=None):
    """test_upgrade_linger's daemon on this file's relay range: (daemon, DTLS port)."""
    return linger_start(d, linger, relay=RELAY, mport=mport, dtls=True)


def dtls_call(port, peer):
    """A TURN-DTLS allocation with a channel to peer, relaying: (call, relayed address)."""
    return tls_call(port, peer, dtls_client)


def once(got, n, what):
    """Every number below n exactly once in got."""
    dups = len(got) - len(set(got))
    missing = sorted(set(range(n)) - set(got))
    check(dups == 0 and not missing and len(got) == n,
          "%s: %d of %d, %d duplicates, missing %r" % (what, len(got), n, dups, missing[:20]))


def poke_channel(d):
    """Bad input on every lingering worker's forwarding socket: garbage, a short
    header, a header with a wrong magic, a well-formed one for a client it does not hold.
    Returns how many messages went in."""
    sent = 0
    for path in glob.glob(os.path.join(d, "**", "*.linger.*.sock"), recursive=True):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.connect(path)
            hdr = struct.pack("=IIHH16s", 0x444C4631, 0, socket.AF_INET, 1,
                              socket.inet_aton("127.0.0.1") + b"\0" * 12)
            # an empty message last: the old worker takes it for the end of the channel
            for msg in (b"x", b"\xff" * 7, os.urandom(40), b"\0" * 64 + b"y" * 200,
                        hdr + b"\x17\xfe\xfd" + os.urandom(60), b""):
                s.send(msg)
                sent += 1
        finally:
            s.close()
    return sent


def lingering_run(d, linger, mport=None):
    """test_upgrade_linger's linger_setup with this file's daemon (start); the test makes
    the DTLS call and sets r.call."""
    return linger_setup(d, linger, starter=start, connect=None, mport=mport)


def test_dtls_call_lingers_through_upgrades(d):
    with lingering_run(d, 600) as r:
        daemon, peer = r.daemon, r.peer
        call, relayed = dtls_call(r.port, peer)
        r.call = call
        peer.start_tx(relayed)
        wait_for(lambda: len(peer.got) >= 20 and len(call.got) >= 20, "relaying both ways",
                 timeout=10)
        for i in range(UPGRADES):
            r.pid = upgrade(daemon, 2)
            n_peer, n_call = len(peer.got), len(call.got)
            wait_for(lambda: len(peer.got) > n_peer + 10 and len(call.got) > n_call + 10,
                     "relaying after upgrade %d (%s)" % (i + 1, call.closed), timeout=10)
            check(call.closed is None, "upgrade %d: %s" % (i + 1, call.closed))
            check(call.refresh() is None, "Refresh after upgrade %d" % (i + 1))
            ls = lingering(daemon)
            check(ls is not None and len(ls) == 1 and ls[0]["sessions"] == 1 and
                  ls[0].get("dtls_sessions") == 1,
                  "upgrade %d: status shows one lingering worker with 1 DTLS call: %r"
                  % (i + 1, ls))
            r.old.append(ls[0]["pid"])
            if i == 0:
                check(poke_channel(d) > 0, "a forwarding socket beside the state file")
        old = r.old[0]
        check(len(set(r.old)) == 1 and alive(old), "the same old worker lingers: %r" % (r.old,))
        check("forwards 1 DTLS clients to 1 lingering workers" in daemon.stderr(),
              "the new workers forward the client's datagrams")
        rc, out, err = daemon.ctl("status")
        check(rc == 0 and ("pid %d" % old) in out and "1 DTLS" in out,
              "turngatectl status names the lingering worker and its DTLS call:\n%s%s"
              % (out, err))
        call.stop_tx.set()
        peer.stop_tx.set()
        peer.tx.join(5)
        wait_for(lambda: len(peer.got) >= call.sent and len(call.got) >= peer.sent,
                 "every datagram (peer has %d of %d, client %d of %d)"
                 % (len(peer.got), call.sent, len(call.got), peer.sent), timeout=10)
        check(call.closed is None, "the association: %s" % call.closed)
        once(peer.got, call.sent, "client -> peer")
        once(call.got, peer.sent, "peer -> client")
        print("%d upgrades: client -> peer %d (in order: %s), peer -> client %d (in order: "
              "%s), each once; old worker pid %d lingered"
              % (UPGRADES, call.sent, peer.got == sorted(peer.got), peer.sent,
                 call.got == sorted(call.got), old))
        # The client goes (close_notify): the old worker has nothing left and exits.
        r.call = None
        call.close()
        wait_for(lambda: lingering(daemon) == [] and not alive(old),
                 "the lingering worker to exit after the client's close_notify")
        st = daemon.admin({"cmd": "stats"})
        check(st["counters"]["stream_linger_ended"] == 0, "none ended by the limit")


def linger_files(d):
    return glob.glob(os.path.join(d, "**", "*.linger.*"), recursive=True)


def test_dtls_linger_limit_ends_them(d):
    mport = listen_port(RELAY)
    with lingering_run(d, 2, mport=mport) as r:
        daemon = r.daemon
        call, _ = dtls_call(r.port, r.peer)
        r.call = call
        wait_for(lambda: call.sent >= 10, "sending")
        r.pid = upgrade(daemon, 2)
        ls = lingering(daemon)
        check(ls and len(ls) == 1 and ls[0]["sessions"] == 1 and ls[0]["dtls_sessions"] == 1,
              "one lingering DTLS call: %r" % (ls,))
        r.old.append(ls[0]["pid"])
        m = scrape(mport)
        check(m["turngate_upgrade_lingering_workers"] == 1 and
              m["turngate_upgrade_lingering_sessions"] == 1 and
              m["turngate_upgrade_lingering_dtls_sessions"] == 1 and
              m["turngate_stream_linger_ended_total"] == 0, "metrics while lingering")
        check(call.closed is None, "still open after the upgrade: %s" % call.closed)
        wait_for(lambda: call.closed is not None, "the linger limit to end the call",
                 timeout=20)
        wait_for(lambda: lingering(daemon) == [] and not alive(r.old[0]),
                 "the lingering worker to exit")
        m = scrape(mport)
        check(m["turngate_upgrade_lingering_workers"] == 0 and
              m["turngate_upgrade_lingering_dtls_sessions"] == 0 and
              m["turngate_stream_linger_ended_total"] == 1, "metrics after the limit")
        check(linger_files(d) == [], "no status file or forwarding socket left: %r"
              % linger_files(d))
        print("linger limit 2 s: the DTLS call ended (%s), counted" % call.closed)


def test_dtls_failed_upgrade(d):
    """An upgrade that fails after ready (the new binary's configuration names a listener
    on a port the test holds): the old master kills its lingering worker before it
    respawns the slot, so the DTLS call ends; the respawned workers find the dead worker's
    status file and socket (its clients' datagrams are theirs again), the status file and
    socket go at the next status, and a new DTLS client relays."""
    held = held_socket(RELAY)
    call2 = None
    try:
        with lingering_run(d, 600) as r:
            daemon = r.daemon
            call, relayed = dtls_call(r.port, r.peer)
            r.call = call
            wait_for(lambda: call.sent >= 10, "sending")
            failed_upgrade(daemon, held)
            wait_for(lambda: lingering(daemon) == [] and linger_files(d) == [],
                     "no lingering worker, its files gone")
            n = len(r.peer.got)
            call2, relayed2 = dtls_call(r.port, r.peer)
            r.peer.start_tx(relayed2)
            wait_for(lambda: len(call2.got) >= 10 and len(r.peer.got) > n + 10,
                     "a new DTLS call relays both ways", timeout=10)
            check("ends its TLS calls (the upgrade failed)" in daemon.stderr(),
                  "the old master killed its lingering worker")
            print("failed upgrade: the lingering DTLS call ended, a new one relays")
    finally:
        if call2 is not None:
            call2.close()
        held.close()


if __name__ == "__main__":
    run_tests([test_dtls_call_lingers_through_upgrades, test_dtls_linger_limit_ends_them,
               test_dtls_failed_upgrade])
