#!/usr/bin/env python3
"""turngatectl disconnect --user and revoke at issue 42 scale: 2,000 allocations of one
user on one worker end, every one of them, and the reply counts them all.

- disconnect --user alice: 1,000 allocations of the REST credential "EXPIRY:alice" on an
  ephemeral listener and 1,000 of the static user "alice" on a listener of its own (static
  auth), all on the one worker. The reply says 2,000 disconnected and none not reached;
  the table then holds no allocation of alice within a bounded wait, while bob's (REST and
  static) and those of the static user "team:alice" (not a REST username: its own user,
  which `--user alice` does not name) stay. (On main before one frame per worker: the
  master sent a frame per allocation, the control socket filled, the reply said about 250
  and the rest of alice's allocations stayed up with nothing to end them.)
- revoke --user-id alice on the same setup: the reply counts the 2,000 and they end; the
  others stay. The count is exact because the master counts before it stores the entry
  (master/revoke.c): counted after, a worker's own sweep could end some first. (On main the reply counted the frames that fitted, about 250; the workers'
  own sweep ended the rest within a second.)

Relay ports 25000-27499 (no other test's). Every wait is bounded; nothing is timed.
"""
import base64
import hashlib
import hmac
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import REALM, SECRET, Daemon, check, config, free_port, run_tests, wait_for  # noqa: E402
import scale_clients  # noqa: E402

RELAY = (25000, 27499)
N = 2000          # alice's: half REST, half static
M = 150           # the others': a third each REST bob, static bob, static team:alice
STATIC = {"alice": "alice-pw", "bob": "bob-pw", "team:alice": "team-pw"}


def make_config(d, port, sport):
    text = config(d, [("rest", port, "TURN-UDP", ["loopback"]),
                      ("static", sport, "TURN-UDP", ["loopback"])],
                  {"loopback": ["127.0.0.1"]}, workers=1, relay=RELAY,
                  limits={"user_quota": 0})
    users = "".join("        - {username: \"%s\", password: \"%s\"}\n" % kv
                    for kv in STATIC.items())
    anchor = "    port: %d\n    routes: [loopback]\n" % sport
    check(anchor in text, "the static listener's lines")
    return text.replace(anchor, anchor + "    auth:\n      type: static\n      users:\n" +
                        users, 1)


def rest_user(name):
    user = "%d:%s" % (int(time.time()) + 3600, name)
    pw = base64.b64encode(hmac.new(SECRET.encode(), user.encode(),
                                   hashlib.sha1).digest()).decode()
    return user, pw


def cred(user, pw):
    return (user.encode(), hashlib.md5(("%s:%s:%s" % (user, REALM, pw)).encode()).digest())


def fleet(n, servers, creds):
    """n clients, client i on servers[i % k] with creds[i % k] (k: both lists' length)."""
    f = scale_clients.Fleet(n, [free_port() for _ in range(4)], servers, users=1)
    f.users = creds
    return f


def allocate_all(f):
    left = f.allocate(list(range(f.n)))
    check(not left and not f.errors and all(f.relayed),
          "allocations failed: %d unanswered, %d errors, e.g. %r"
          % (len(left), len(f.errors), sorted(f.errors.items())[:5]))


def by_user(daemon):
    """{username: live allocations}, every page of the listing."""
    out, cursor = {}, 0
    while cursor is not None:
        r = daemon.admin({"cmd": "allocations", "limit": 5000, "cursor": cursor})
        check(r.get("ok") is True, "allocations: %r" % (r,))
        for a in r["allocations"]:
            out[a["user"]] = out.get(a["user"], 0) + 1
        cursor = r.get("next_cursor")
    return out


def ends_all(d, act):
    """N allocations of alice (REST and static), M of the others, on one worker; act(daemon)
    ends alice's and returns the reply: it must count N, and alice's must all end."""
    port, sport = free_port(), free_port()
    daemon = Daemon(d, make_config(d, port, sport), workers=1).start()
    fleets = []
    try:
        ra, rb = rest_user("alice"), rest_user("bob")
        servers = [("127.0.0.1", port), ("127.0.0.1", sport)]
        fleets.append(fleet(N, servers, [cred(*ra), cred("alice", STATIC["alice"])]))
        fleets.append(fleet(M, servers + [("127.0.0.1", sport)],
                            [cred(*rb), cred("bob", STATIC["bob"]),
                             cred("team:alice", STATIC["team:alice"])]))
        for f in fleets:
            allocate_all(f)
        want = {ra[0]: N // 2, "alice": N // 2, rb[0]: M // 3, "bob": M // 3,
                "team:alice": M // 3}
        check(by_user(daemon) == want, "before: %r" % by_user(daemon))
        r = act(daemon)
        check(r.get("ok") is True, "reply: %r" % (r,))
        check(r.get("disconnected") == N and r.get("not_reached", 0) == 0,
              "the reply counts %r of alice's %d allocations (not reached: %r)"
              % (r.get("disconnected"), N, r.get("not_reached")))
        for k in (ra[0], "alice"):
            del want[k]
        wait_for(lambda: daemon.admin({"cmd": "status"})["allocations"] == M,
                 "alice's allocations ended", timeout=60.0)
        check(by_user(daemon) == want, "after: %r, want %r" % (by_user(daemon), want))
        print("%d allocations of alice ended, reply %r; %d of others stay" % (N, r, M))
    finally:
        for f in fleets:
            f.close()
        rc = daemon.stop()
    check(rc == 0, "exit status %r" % rc)


def test_disconnect_user(d):
    ends_all(d, lambda daemon: daemon.admin({"cmd": "disconnect", "user": "alice"}))


def test_revoke_user_id(d):
    ends_all(d, lambda daemon: daemon.admin({"cmd": "revoke", "user_id": "alice"}))


if __name__ == "__main__":
    run_tests([test_disconnect_user, test_revoke_user_id])
