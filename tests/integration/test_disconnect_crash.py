#!/usr/bin/python3
"""An admin disconnect survives the death of the worker it was sent to, against the real
daemon with one worker.

The master sends `disconnect ID --gen G` (IPC_DISC_INDEX) and `disconnect --user U`
(IPC_DISC_USER) straight to the owner worker's control socket. Here the worker is
SIGSTOPped, so it never reads the frame; the disconnect is answered ok; then the worker
is SIGKILLed. Its replacement adopts the slot's allocations from the shared table, and
the master re-sends it the disconnects the dead one had not acted on
(master/discsent.h): the disconnected allocation ends, the other user's is adopted and
relays on, and the master logs the re-send. Before: the frame died with the worker, the
replacement adopted the allocation and it relayed on though the reply said
"disconnected". Relay ports 28780-28789 (no other test's): the replacement binds the
adopted allocations' relay ports again.
"""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (SUCCESS, Client, Daemon, check, config, echo_peer,  # noqa: E402
                           echo_relays, free_port, run_tests, wait_for)

RELAY = (28780, 28789)


def worker(daemon):
    return daemon.admin({"cmd": "workers"})["workers"][0]


def crash_after_disconnect(d, disconnect):
    """alice's and bob's allocations on the one worker; the worker stopped; disconnect(daemon,
    alice's listing entry) asks to end alice's (answered ok); the worker killed. Once its
    replacement runs, alice's allocation is gone and bob's relays."""
    port = free_port()
    daemon = Daemon(d, config(d, [("udp", port, "TURN-UDP", ["loopback"])],
                              {"loopback": ["127.0.0.0/8"]}, relay=RELAY, workers=1),
                    workers=1)
    daemon.allowed_deaths = 1   # the kill below
    daemon.start()
    echo = echo_peer()
    alice, bob = Client(port, user="alice"), Client(port, user="bob")
    pid, stopped = None, False
    try:
        for c in (alice, bob):
            c.allocate()
            check(c.perm("127.0.0.1", echo)[1] == SUCCESS, "CreatePermission")
            check(echo_relays(c, echo, b"before"), "no relay before the crash")
        rec = alice.record(daemon)
        pid = worker(daemon)["pid"]
        os.kill(pid, signal.SIGSTOP)
        stopped = True
        r = disconnect(daemon, rec)
        check(r.get("ok") is True and r.get("disconnected") == 1, r)
        os.kill(pid, signal.SIGKILL)
        stopped = False
        wait_for(lambda: worker(daemon)["pid"] not in (None, 0, pid) and
                 worker(daemon)["state"] == "running", "the replacement worker")
        wait_for(lambda: alice.record(daemon) is None,
                 "alice's disconnected allocation to end after the crash")
        check(bob.record(daemon) is not None, "bob's allocation ended too")
        check(echo_relays(bob, echo, b"after"), "bob's adopted allocation does not relay")
        wait_for(lambda: "worker 0: 1 disconnects re-sent that worker pid %d had not acted on"
                 % pid in daemon.stderr(), "the re-send's log line")
    finally:
        if stopped:
            os.kill(pid, signal.SIGKILL)
        alice.close()
        bob.close()
        check(daemon.stop() == 0, "exit status")


def test_disconnect_id_crash(d):
    """disconnect [ID, GEN] to a worker killed before it read the frame."""
    crash_after_disconnect(d, lambda daemon, rec: daemon.admin(
        {"cmd": "disconnect", "id": [rec["id"], rec["gen"]]}))


def test_disconnect_user_crash(d):
    """disconnect --user alice to a worker killed before it read the frame."""
    crash_after_disconnect(d, lambda daemon, rec: daemon.admin(
        {"cmd": "disconnect", "user": "alice"}))


if __name__ == "__main__":
    run_tests([test_disconnect_id_crash, test_disconnect_user_crash])
