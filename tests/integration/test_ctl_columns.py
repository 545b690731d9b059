"""turngatectl top and allocations with a gateway's long names: every column stays under its
header, the names are printed whole; disconnect and drain leave a log line that names what
they did."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Client, Daemon, check, config, free_port, relay_range,  # noqa: E402
                           run_tests, wait_for)

LONG = "default/my-gateway-with-a-long-name/udp-listener-for-tenant-a"
LONG_USER = "tenant-a-user-with-a-rather-long-identifier"


def aligned(out, left, right):
    """Each row's left columns start where their header does, right columns end where
    their header does (a name that pushed a column shows as a shifted start or end)."""
    lines = [l for l in out.splitlines() if l.strip()]
    head = lines[0]
    for row in lines[1:]:
        if row.startswith("("):
            continue
        for name in left:
            i = head.index(name)
            check(i == 0 or (row[i - 1] == " " and row[i] != " "),
                  "column %s not aligned in %r\n%s" % (name, row, out))
        for name in right:
            e = head.index(name) + len(name)
            check(row[e - 1] != " " and (e == len(row) or row[e] == " "),
                  "column %s not aligned in %r\n%s" % (name, row, out))


def test_ctl_long_names(d):
    port = free_port()
    text = config(d, [(LONG, port, "TURN-UDP", ["loopback"])],
                  {"loopback": ["127.0.0.0/8"]}, relay=relay_range(), workers=1)
    daemon = Daemon(d, text, workers=1).start()
    clients = [Client(port, user="alice"), Client(port, user=LONG_USER)]
    try:
        for c in clients:
            c.allocate()
        rc, out, err = daemon.ctl("allocations")
        check(rc == 0 and out.count(LONG) == 2 and LONG_USER in out, (rc, out, err))
        aligned(out, ["ID", "GEN", "WRK", "USER", "LISTENER", "CLIENT", "RELAY"],
                ["AGE", "LEFT", "PERMS", "CHANS", "TCP"])
        rc, out, err = daemon.ctl("top", "--once", "--interval", "0.2")
        check(rc == 0 and out.count(LONG) == 2 and LONG_USER in out, (rc, out, err))
        title, allocs, users = out.split("\n\n", 2)
        check(title.startswith("turngate top: 2 allocations"), out)
        aligned(allocs, ["ID", "USER", "LISTENER"],
                ["WK", "AGE", "PERMS", "CHANS", "TO_PEER", "FROM_PEER", "PPS"])
        aligned(users, ["USER"], ["ALLOCS", "TO_PEER", "FROM_PEER", "PPS"])

        # disconnect and drain say in the log what they did, not only what was asked.
        rc, out, err = daemon.ctl("disconnect", "--user", LONG_USER)
        check(rc == 0 and out == "disconnected 1 allocation(s)\n", (rc, out, err))
        wait_for(lambda: daemon.admin({"cmd": "status"})["allocations"] == 1,
                 "the allocation disconnected")
        aid = daemon.admin({"cmd": "allocations"})["allocations"][0]["id"]
        rc, out, err = daemon.ctl("disconnect", str(aid))
        check(rc == 0, (rc, out, err))
        rc, out, err = daemon.ctl("drain")
        check(rc == 0, (rc, out, err))
        rc, out, err = daemon.ctl("drain", "off")
        check(rc == 0, (rc, out, err))
        deadline = time.monotonic() + 10
        want = ["admin: disconnect: ending 1 allocation(s) of user %s" % LONG_USER,
                "admin: disconnect: ending allocation %d of user " % aid,
                "admin: drain: on (new allocations refused), ",
                "admin: drain: off (new allocations accepted), "]
        while time.monotonic() < deadline and not all(w in daemon.stderr() for w in want):
            time.sleep(0.05)
        log = daemon.stderr()
        for w in want:
            check(w in log, "no log line %r:\n%s" % (w, log))
    finally:
        for c in clients:
            c.close()
        check(daemon.stop() == 0, "exit status")


if __name__ == "__main__":
    run_tests([test_ctl_long_names])
