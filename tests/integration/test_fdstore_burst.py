#!/usr/bin/env python3
"""systemd's file descriptor store at burst scale: no IPC_FDSTORE or IPC_FDUNSTORE frame of
a worker is lost when its control socket is full (worker/fdstore.c). The control socket
holds about 278 small frames with the default wmem_default; a worker that ends or starts more
TURN-TCP connections than that in one go must keep the rest and send them when the master
has read (before: they were logged and lost, and systemd kept the dead connections and
gave them back at the next crash restart under names of records that were free or reused).

No systemd runs here: the fake store of test_fdstore_restart binds $NOTIFY_SOCKET and
keeps what the master stores there. One worker (two for the handoff), one TURN-TCP
listener.

- disconnect --user alice with 2,000 TURN-TCP allocations of alice (and 20 of bob): the
  worker ends them all in one go; the store must get an FDSTOREREMOVE for each of alice's
  connections and keep bob's, while those connections are still open: a connection
  whose allocation ends stays open (idle, 30 s) and must leave the store with its
  allocation. (On main the names left only when the connections closed: alice's
  connections had all closed when the store was empty.)
- the master stopped (SIGSTOP: a master busy elsewhere, or several workers ending
  theirs at once) while 1,000 clients allocate and later while they close: once it runs
  again the store holds every connection, and then none. (On main: 278 of the 1,000
  stored, the rest logged "fd store ...: Resource temporarily unavailable" and lost.)
- a connection whose allocation ended (Refresh 0) while the master was stopped, then
  closed by its client: the server's FIN comes while the master is still stopped, not
  once it has read the FDUNSTORE and the store let its copy go.
- a connection whose allocation ended (Refresh 0), so once in the store, then bound
  (ConnectionBind, RFC 6062) to the other worker's peer connection: handed to that worker
  through the master, the bind succeeds and relays (before dcc0332 the close of our copy
  shut the socket in flight down: no response, EOF).

In a network namespace of its own (root): 2,000 relay ports no other test uses. Every
wait is bounded; nothing is timed.
"""
import contextlib
import os
import select
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (CLONE_NEWNET, Daemon, Failure, StreamClient, TcpPeer,  # noqa: E402
                           check, config, free_port, run_tests_as_root, unshare, wait_for)
from test_fdstore_restart import FdStore  # noqa: E402

RELAY = (10000, 12499)
N = 2000
M = 20
LIMITS = {"user_quota": 0, "unauth_burst": 1000000, "unauth_rate": 1000000,
          "source_connections": 0, "prefix_connections": 0}


def setup():
    unshare(CLONE_NEWNET)


def start(d, workers=1):
    port = free_port()
    text = config(d, [("tcp", port, "TURN-TCP", ["peers", "tcp-peers"])],
                  {"peers": ["127.0.0.1"], "tcp-peers": ("TCP", ["127.0.0.1"])},
                  workers=workers, relay=RELAY, limits=LIMITS)
    # A master stopped longer than this kills its workers when it runs again.
    text = text.replace("  drain_timeout: 1\n", "  drain_timeout: 1\n  worker_ping_timeout: 3600\n")
    store = FdStore(os.path.join(d, "notify.sock"))
    daemon = Daemon(d, text, workers=workers, env={"NOTIFY_SOCKET": store.path}).start()
    return daemon, store, port


def allocate(port, n, user):
    out = []
    for _ in range(n):
        c = StreamClient(port, user=user)
        c.allocate()
        out.append(c)
    return out


def stored(store, n, what):
    try:
        wait_for(lambda: len(store.names()) == n, what, timeout=30)
    except Failure:
        raise Failure("%s: %d connections in the store after 30 s, want %d"
                      % (what, len(store.names()), n)) from None
    store.quiet()
    check(len(store.names()) == n, "%s: %d in the store, want %d"
          % (what, len(store.names()), n))


@contextlib.contextmanager
def served(d, workers=1):
    """The daemon and its fake store; yields (daemon, store, port, clients): the clients
    the test appends are closed, the daemon must then stop with exit status 0."""
    daemon, store, port = start(d, workers)
    clients = []
    try:
        yield daemon, store, port, clients
    finally:
        for c in clients:
            c.close()
        rc = daemon.stop()
        store.close()
    check(rc == 0, "exit status %r" % rc)


def test_disconnect_user_unstores_all(d):
    with served(d, int(os.environ.get("W", "1"))) as (daemon, store, port, clients):
        clients += allocate(port, M, "bob")
        stored(store, M, "bob's allocations")
        bobs = set(store.names())
        clients += allocate(port, N, "alice")
        stored(store, N + M, "alice's allocations")
        r = daemon.admin({"cmd": "disconnect", "user": "alice"})
        check(r.get("ok") is True and r.get("disconnected") == N, "reply %r" % (r,))
        wait_for(lambda: daemon.admin({"cmd": "status"})["allocations"] == M,
                 "alice's allocations ended", timeout=60)
        stored(store, M, "after disconnect --user alice")
        check(set(store.names()) == bobs, "not bob's names: %r"
              % sorted(set(store.names()) ^ bobs)[:10])
        # Out of the store when the allocation ends, not when the connection, which
        # stays open (idle without an allocation for 30 s), closes.
        poll = select.poll()
        for c in clients[M:]:
            poll.register(c.sock, select.POLLIN)
        ended = poll.poll(0)
        check(not ended, "%d of alice's connections closed before their names left the "
              "store" % len(ended))
        print("%d of alice's connections out of the store, %d of bob's kept" % (N, M))


def test_master_busy(d):
    with served(d) as (daemon, store, port, clients):
        master = daemon.proc.pid
        os.kill(master, signal.SIGSTOP)
        try:
            clients += allocate(port, N // 2, "alice")
        finally:
            os.kill(master, signal.SIGCONT)
        stored(store, N // 2, "the master stopped while they allocated")
        os.kill(master, signal.SIGSTOP)
        try:
            for c in clients:
                c.sock.shutdown(socket.SHUT_WR)
            for c in clients:
                check(c.recv_eof(timeout=30), "the worker did not end a connection")
        finally:
            os.kill(master, signal.SIGCONT)
        stored(store, 0, "the master stopped while they ended")
        print("%d connections stored and removed while the master was stopped" % (N // 2))


def test_fin_after_allocation_ends(d):
    """A connection whose allocation ended (Refresh 0) while the master was stopped, so
    that its FDUNSTORE waits and the store still holds its copy: the client's close must
    get the server's FIN while the master is still stopped (the worker shuts the socket
    down, as for a connection that closes with its allocation). Before the fix: no EOF
    until the master read the FDUNSTORE."""
    with served(d) as (daemon, store, port, clients):
        master = daemon.proc.pid
        c = StreamClient(port, user="alice")
        clients.append(c)
        c.allocate()
        stored(store, 1, "one allocation")
        os.kill(master, signal.SIGSTOP)
        try:
            check(c.refresh(0) is None, "Refresh(0) failed")
            c.sock.shutdown(socket.SHUT_WR)
            try:
                eof = c.recv_eof(timeout=10)
            except socket.timeout:
                eof = False
            check(eof, "no EOF from the server while the master was stopped")
        finally:
            os.kill(master, signal.SIGCONT)
        stored(store, 0, "after the connection closed")
        print("FIN of a connection whose allocation ended, with the master stopped")


def worker_of(daemon, c):
    a = c.record(daemon)
    check(a is not None, "no allocation of %r" % (c.sock.getsockname(),))
    return a["worker"]


def test_handoff_after_allocation_ended(d):
    """A plain TURN-TCP connection that was in the store (its allocation ended, Refresh 0,
    the connection open) sends a ConnectionBind for a CONNECTION-ID of the other worker:
    its worker hands the socket to the owner through the master (IPC_TCP_HANDOFF) and
    closes its copy, which must not shut the socket down (dcc0332). The bind succeeds and
    bytes flow both ways. Before the fix: no response, EOF. Of up to 16 connections, one
    on the other worker (SO_REUSEPORT places them)."""
    peer = TcpPeer("127.0.0.1")
    try:
        with served(d, workers=2) as (daemon, store, port, clients):
            ctl = StreamClient(port, user="alice")
            clients.append(ctl)
            ctl.allocate_tcp()
            owner = worker_of(daemon, ctl)
            c1 = None
            for _ in range(16):
                c = StreamClient(port, creds=ctl.creds())
                clients.append(c)
                c.allocate()
                if worker_of(daemon, c) != owner:
                    c1 = c
                    break
            check(c1 is not None, "16 connections all on worker %d" % owner)
            stored(store, len(clients), "the allocations")
            check(c1.refresh(0) is None, "Refresh(0) failed")
            stored(store, len(clients) - 1, "after Refresh(0)")
            cid = ctl.connect("127.0.0.1", peer.port)
            wait_for(lambda: len(peer.sources) == 1, "the peer's accept", timeout=10)
            c1.nonce = ctl.nonce    # the control connection's, as clients do
            try:
                code = c1.connection_bind(cid)
            except (Failure, OSError) as e:
                raise Failure("ConnectionBind on worker %d's connection for worker %d's "
                              "CONNECTION-ID: %s" % (1 - owner, owner, e)) from None
            check(code is None, "ConnectionBind: got %r" % (code,))
            hello = b"hello over the handed-off connection"
            c1.sock.sendall(hello)
            check(c1.recv_exact(len(hello)) == hello, "echo mismatch")
            print("ConnectionBind handed from worker %d to %d after Refresh(0): data flows"
                  % (1 - owner, owner))
    finally:
        peer.close()

if __name__ == "__main__":
    sys.setswitchinterval(0.0001)   # the store's thread and the clients' loop take turns
    run_tests_as_root([test_disconnect_user_unstores_all, test_master_busy,
                       test_fin_after_allocation_ends, test_handoff_after_allocation_ended],
                      "a network namespace of its own, for 2,500 relay ports", setup)
