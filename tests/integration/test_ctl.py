"""turngatectl against a running daemon: human output, --json, exit statuses, usage errors."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (SUCCESS, TURNGATECTL, Client, Daemon, check, echo_relays,  # noqa: E402
                           config, config_yaml, echo_peer, free_port, relay_range, run_tests,
                           stop_master, upgrade, wait_for)

# A usage error's last line on stderr: where the usage is (the whole text is for --help).
TRY = "try 'turngatectl --help'\n"

def test_ctl_commands(d):
    port = free_port()
    daemon = Daemon(d, config_yaml(os.path.join(d, "admin.sock"),
                                   [("udp", port, "TURN-UDP"), ("tcp", port, "TURN-TCP")])
                    ).start()
    try:
        rc, out, err = daemon.ctl("status")
        check(rc == 0, (rc, err))
        check("workers:        2 running of 2" in out, out)
        check("last reload:    ok (startup)" in out, out)
        check("listener:       udp TURN-UDP 127.0.0.1:%d" % port in out, out)

        text = out
        rc, out, err = daemon.ctl("--json", "status")
        check(rc == 0 and json.loads(out)["ok"] is True, out)
        t = json.loads(out)["table"]
        check("descriptors %d per process (a full table needs %d)"
              % (t["descriptors"], t["descriptors_wanted"]) in text, text)

        rc, out, err = daemon.ctl("workers")
        lines = out.strip().split("\n")
        check(rc == 0 and lines[0].split()[:3] == ["SLOT", "PID", "STATE"], out)
        check(len(lines) == 3 and all("running" in l for l in lines[1:]), out)

        rc, out, err = daemon.ctl("config")
        check(rc == 0 and "s3cret" not in out and json.loads(out)["auth"], out)

        rc, out, err = daemon.ctl("allocations", "--user", "u", "--worker", "0")
        check(rc == 0 and out.split("\n")[0].startswith("ID"), out)

        rc, out, err = daemon.ctl("stats")
        check(rc == 0 and "client_pkts_in " in out and "allocations 0" in out, out)

        rc, out, err = daemon.ctl("loglevel", "all:DEBUG")
        check(rc == 0 and out == "log level: all:DEBUG (override)\n", out)
        rc, out, err = daemon.ctl("loglevel", "bogus:LEVEL:x")
        check(rc == 1 and "malformed log spec" in err, (rc, err))
        rc, out, err = daemon.ctl("loglevel", "config")
        check(rc == 0 and out == "log level: all:INFO (config)\n", out)

        rc, out, err = daemon.ctl("drain")
        check(rc == 0 and out == "draining: yes, allocations: 0\n", out)
        rc, out, err = daemon.ctl("drain", "off")
        check(rc == 0 and out == "draining: no, allocations: 0\n", out)

        rc, out, err = daemon.ctl("disconnect", "--user", "alice")
        check(rc == 0 and out == "disconnected 0 allocation(s)\n", out)
        rc, out, err = daemon.ctl("disconnect", "3")
        check(rc == 1 and err == "turngatectl: disconnect: no such allocation\n", err)

        # Into a pipe, top's refreshes follow one another a blank line apart, without the
        # terminal's clear-screen codes (before: ESC [H ESC [2J before each refresh).
        rc, out, err = daemon.ctl("top", "--count", "2", "--interval", "0.1")
        check(rc == 0 and out.count("turngate top: ") == 2 and "\x1b" not in out and
              "\n\nturngate top: " in out, (rc, out, err))

        gen = daemon.admin({"cmd": "status"})["generation"]
        rc, out, err = daemon.ctl("reload")
        check(rc == 0 and out.startswith("reload ok: generation %d" % (gen + 1)), out)

        # Usage errors never reach the daemon.
        for args in (["frobnicate"], ["status", "extra"], ["disconnect"],
                     ["disconnect", "-1"], ["allocations", "--worker", "x"],
                     ["allocations", "--user"], ["allocations", "--limit", "0"],
                     ["allocations", "--page", "0"], ["drain", "maybe"]):
            rc, out, err = daemon.ctl(*args)
            check(rc == 2 and err.endswith(TRY), (args, rc, err))
    finally:
        check(daemon.stop() == 0, "exit status")


def test_ctl_not_reached(d):
    """disconnect --user and revoke whose worker cannot be told: its control channel is full
    (the worker SIGSTOPped, the channel filled with disconnects of its one allocation by id
    until the master's send fails; no timing involved). turngatectl prints the reply
    whole: disconnect the "not reached:" line and exit 1 (nothing else ends those), revoke
    its entry, "ended 0" and the not-reached count as information, exit 0 (the worker's
    own sweep ends them). Before: both exited 1 and printed only "turngatectl: CMD: -".
    Relay ports 28740-28749 (no other test's)."""
    port = free_port()
    daemon = Daemon(d, config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")],
                                   workers=1,
                                   extra_admin="  worker_ping_timeout: 3600\n"
                                               "  worker_stall_timeout: 3600\n"
                                               "  relay_port_min: 28740\n"
                                               "  relay_port_max: 28749\n"),
                    workers=1).start()
    c = Client(port, user="alice", secret="s3cret", realm="test.realm")
    pid, stopped = None, False
    try:
        c.allocate()
        aid = daemon.allocations()[0]["id"]
        pid = daemon.admin({"cmd": "workers"})["workers"][0]["pid"]
        os.kill(pid, signal.SIGSTOP)
        stopped = True
        for sent in range(10000):
            r = daemon.admin({"cmd": "disconnect", "id": aid})
            if r.get("ok") is not True:
                break
        check(r.get("ok") is False, "the control channel never filled: %r" % (r,))
        sys.stderr.write("  control channel full after %d frame(s): %s\n"
                         % (sent, r.get("error")))

        rc, out, err = daemon.ctl("disconnect", "--user", "alice")
        lines = out.split("\n")
        check(rc == 1 and err == "" and lines[0] == "disconnected 0 allocation(s)" and
              lines[1].startswith("not reached: 1 allocation(s) (their worker is not running "
                                  "or its control channel is full") and lines[2:] == [""],
              (rc, out, err))

        rc, out, err = daemon.ctl("revoke", "--user-id", "alice", "--for", "1h")
        lines = out.split("\n")
        check(rc == 0 and err == "" and lines[0].startswith("revoked: user_id  alice") and
              lines[1] == "ended 0 allocation(s)" and
              lines[2] == "1 allocation(s) on workers not reached now: they end when their "
                          "worker sweeps or adopts" and lines[3:] == [""], (rc, out, err))
        rc, out, err = daemon.ctl("--json", "revoke", "--user-id", "alice", "--for", "1h")
        check(rc == 0 and json.loads(out)["not_reached"] == 1, (rc, out, err))

        os.kill(pid, signal.SIGCONT)
        stopped = False
        wait_for(lambda: daemon.admin({"cmd": "status"})["allocations"] == 0,
                 "the allocation ended once the worker runs again")
    finally:
        if stopped:
            os.kill(pid, signal.SIGCONT)
        c.close()
        check(daemon.stop() == 0, "exit status")


def test_ctl_probe(d):
    port = free_port()
    daemon = Daemon(d, config_yaml(os.path.join(d, "admin.sock"),
                                   [("udp", port, "TURN-UDP"), ("tcp", port, "TURN-TCP")])
                    ).start()
    try:
        uri = "turn:127.0.0.1:%d" % port
        r = subprocess.run([TURNGATECTL, "probe", uri, "--secret", "s3cret"],
                           capture_output=True, text=True, timeout=60)
        steps = [l.split()[0:2] for l in r.stdout.splitlines()]
        check(r.returncode == 0, r)
        check([s[0] for s in steps] == ["connect", "allocate", "allocate", "permission",
                                        "round", "delete", "delete"], r.stdout)
        check(all("ok" in l.split()[1:3] for l in r.stdout.splitlines()), r.stdout)
        peer = echo_peer()
        r = subprocess.run([TURNGATECTL, "probe", uri + "?transport=tcp", "--secret", "s3cret",
                            "--peer", "127.0.0.1:%d" % peer, "--json"],
                           capture_output=True, text=True, timeout=60)
        out = json.loads(r.stdout)
        check(r.returncode == 0 and out["ok"] is True, r)
        check([s["step"] for s in out["steps"]] == ["connect", "allocate", "create-permission",
                                                    "channel-bind", "round trip", "delete"], out)
        r = subprocess.run([TURNGATECTL, "probe", uri, "--secret", "wrong"],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and "allocate" in r.stdout and "FAIL" in r.stdout and
              "401" in r.stdout, r)
        r = subprocess.run([TURNGATECTL, "probe", uri, "--secret", "s3cret", "--peer",
                            "10.9.9.9:7"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and "403" in r.stdout, r)
        for args in (["probe", "stun:x", "--secret", "a"], ["probe", uri],
                     ["probe", uri, "-u", "a"], ["probe", uri + "?transport=sctp",
                                                 "--secret", "a"]):
            r = subprocess.run([TURNGATECTL] + args, capture_output=True, text=True,
                               timeout=60)
            check(r.returncode == 2, (args, r))
    finally:
        check(daemon.stop() == 0, "exit status")


def test_ctl_disconnect_gen(d):
    """disconnect ID --gen G ends the allocation at ID only while its record's generation is
    G: the operator's race, where the allocation listed ended and another user's took its id
    (a table of one record: every allocation takes id 0), is refused with "no such
    allocation" and the new allocation relays on; with its own generation it ends. The id
    alone still works. allocations shows the generation (GEN, "gen"). Before: "gen" was
    ignored and the other user's allocation ended."""
    port = free_port()
    daemon = Daemon(d, config(d, [("udp", port, "TURN-UDP", ["loopback"])],
                              {"loopback": ["127.0.0.0/8"]}, limits={"max_allocations": 1},
                              relay=relay_range(), workers=1), workers=1).start()
    echo = echo_peer()
    alice, bob = Client(port, user="alice"), Client(port, user="bob")
    try:
        alice.allocate()
        old = alice.record(daemon)
        check(old is not None and isinstance(old.get("gen"), int) and old["gen"] > 0, old)
        rc, out, err = daemon.ctl("allocations")
        lines = out.split("\n")
        check(rc == 0 and lines[0].split()[:3] == ["ID", "GEN", "WRK"] and
              lines[1].split()[:2] == [str(old["id"]), str(old["gen"])], (rc, out, err))
        alice.release()
        wait_for(lambda: daemon.allocations() == [], "alice's allocation ended")

        bob.allocate()
        new = bob.record(daemon)
        check(new is not None and new["id"] == old["id"] and new["gen"] > old["gen"],
              (old, new))
        check(bob.perm("127.0.0.1", echo)[1] == SUCCESS, "CreatePermission")
        check(echo_relays(bob, echo, b"before"), "bob's allocation does not relay")

        # What the operator saw: alice's id and generation. Bob's allocation is not hers.
        rc, out, err = daemon.ctl("disconnect", str(old["id"]), "--gen", str(old["gen"]))
        check(rc == 1 and err == "turngatectl: disconnect: no such allocation\n",
              (rc, out, err))
        r = daemon.admin({"cmd": "disconnect", "id": [old["id"], old["gen"]]})
        check(r == {"ok": False, "error": "no such allocation"}, r)
        check(echo_relays(bob, echo, b"after"), "bob's allocation ended by a disconnect of alice's")
        check(daemon.allocations()[0]["gen"] == new["gen"], daemon.allocations())

        r = daemon.admin({"cmd": "disconnect", "id": [new["id"], new["gen"]]})
        check(r == {"ok": True, "disconnected": 1, "worker": 0}, r)
        wait_for(lambda: daemon.allocations() == [], "bob's allocation ended")
        check(bob.refresh(600) == 437, "bob's allocation still refreshes")

        # The id alone, as before.
        alice.allocate()
        rc, out, err = daemon.ctl("disconnect", str(alice.record(daemon)["id"]))
        check(rc == 0 and out == "disconnected 1 allocation(s)\n", (rc, out, err))
        wait_for(lambda: daemon.allocations() == [], "alice's allocation ended")
        for args in (["disconnect", "0", "--gen"], ["disconnect", "0", "--gen", "x"],
                     ["disconnect", "0", "--gen", "-1"], ["disconnect", "--gen", "1", "0"],
                     ["disconnect", "0", "--gen", "1", "2"]):
            rc, out, err = daemon.ctl(*args)
            check(rc == 2 and err.endswith(TRY), (args, rc, err))
    finally:
        alice.close()
        bob.close()
        check(daemon.stop() == 0, "exit status")


def test_ctl_disconnect_gen_takeover(d):
    """(id, gen) names one allocation across a live upgrade and a kill -9 restart: the
    table taken over hands out gens above every gen of the earlier one, so a pair listed
    before names nothing after (no such allocation), and the allocation taken over relays
    on. A table of one record: alice (id 0, gen 1) ends, bob takes id 0 (gen 2). Before:
    the take-over copied bob with gen 1 (its claim in the fresh table), and `disconnect 0
    --gen 1` (alice's pair) ended bob. Relay ports 28760-28769 (no other test's): bob's
    is bound again after the kill."""
    port = free_port(late=True)     # bound again after the kill
    daemon = Daemon(d, config(d, [("udp", port, "TURN-UDP", ["loopback"])],
                              {"loopback": ["127.0.0.0/8"]}, limits={"max_allocations": 1},
                              relay=(28760, 28769), workers=1), workers=1)
    daemon.start()
    echo = echo_peer()
    alice, bob = Client(port, user="alice"), Client(port, user="bob")
    new_pid = None
    try:
        alice.allocate()
        seen = [alice.record(daemon)]
        alice.release()
        wait_for(lambda: daemon.allocations() == [], "alice's allocation ended")
        bob.allocate()
        seen.append(bob.record(daemon))
        check(seen[1]["id"] == seen[0]["id"] and seen[1]["gen"] > seen[0]["gen"], seen)
        check(bob.perm("127.0.0.1", echo)[1] == SUCCESS, "CreatePermission")
        check(echo_relays(bob, echo, b"before"), "bob's allocation does not relay")

        def gone_after(what):
            now = bob.record(daemon)
            check(now is not None and now["gen"] > max(a["gen"] for a in seen),
                  (what, seen, now))
            for old in seen:
                rc, out, err = daemon.ctl("disconnect", str(old["id"]), "--gen",
                                          str(old["gen"]))
                check(rc == 1 and err == "turngatectl: disconnect: no such allocation\n",
                      (what, old, rc, out, err))
            check(echo_relays(bob, echo, what.encode()), "bob's allocation ended after " + what)
            seen.append(now)

        daemon.kill_all()
        daemon.start()
        gone_after("restart")
        new_pid = upgrade(daemon, workers=1)
        gone_after("upgrade")
        rc, out, err = daemon.ctl("disconnect", str(seen[-1]["id"]), "--gen",
                                  str(seen[-1]["gen"]))
        check(rc == 0 and out == "disconnected 1 allocation(s)\n", (rc, out, err))
        wait_for(lambda: daemon.allocations() == [], "bob's allocation ended")
    finally:
        alice.close()
        bob.close()
        if new_pid is not None:
            stop_master(daemon, new_pid)
        daemon.kill()
        daemon.scan()


OLDER_ID_ERR = "\"id\" must be an allocation id from `allocations`"


class OlderAdmin:
    """An admin socket that answers as a daemon from before "gen" did: allocations without
    "gen"; disconnect refuses an "id" that is not an integer with that daemon's error, and
    ends an integer one (a thread; one request per connection, as turngatectl sends them).
    requests: what it was sent."""

    def __init__(self, path):
        self.requests = []
        self.ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ls.bind(path)
        self.ls.listen(8)
        self.ls.settimeout(30)
        threading.Thread(target=self.serve, daemon=True).start()

    def answer(self, req):
        if req.get("cmd") == "allocations":
            return {"ok": True, "truncated": False, "allocations": [{
                "id": 7, "worker": 0, "user": "1796083800:alice", "listener": "udp",
                "client": "127.0.0.1:41916", "relay": "127.0.0.1:49152", "age": 2.0,
                "lifetime_left": 598.0, "permissions": [], "channels": [],
                "tcp_connections": 0, "to_peer": {"packets": 0, "bytes": 0},
                "from_peer": {"packets": 0, "bytes": 0}}]}
        if type(req.get("id")) is not int:
            return {"ok": False, "error": OLDER_ID_ERR}
        return {"ok": True, "disconnected": 1, "worker": 0}

    def serve(self):
        for _ in range(16):
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            with c:
                c.settimeout(30)
                buf = b""
                while b"\n" not in buf:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                req = json.loads(buf.split(b"\n", 1)[0])
                self.requests.append(req)
                c.sendall(json.dumps(self.answer(req)).encode() + b"\n")


def test_ctl_older_daemon(d):
    """turngatectl against a daemon older than "gen" (the package upgraded, the daemon not
    yet): the listing shows "-" for GEN, not 0; `disconnect ID --gen G` sends "id": [ID, G],
    which that daemon refuses (not an integer): nothing ended, exit 1. Before: "gen" was a
    key of its own, which that daemon ignored: it ended whatever held the id, and
    turngatectl noticed only after (no "gen" echoed)."""
    sock = os.path.join(d, "older.sock")
    fake = OlderAdmin(sock)
    ctl = [TURNGATECTL, "-s", sock]
    r = subprocess.run(ctl + ["allocations"], capture_output=True, text=True, timeout=60)
    lines = r.stdout.split("\n")
    check(r.returncode == 0 and lines[0].split()[:3] == ["ID", "GEN", "WRK"] and
          lines[1].split()[:3] == ["7", "-", "0"], r)
    r = subprocess.run(ctl + ["disconnect", "7", "--gen", "3"], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 1 and r.stdout == "" and
          r.stderr == "turngatectl: disconnect: %s\n" % OLDER_ID_ERR, r)
    check(fake.requests[-1] == {"cmd": "disconnect", "id": [7, 3]}, fake.requests)
    r = subprocess.run(ctl + ["disconnect", "7"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and r.stdout == "disconnected 1 allocation(s)\n" and
          r.stderr == "", r)
    fake.ls.close()


# Each usage error's first line on stderr: the command, the argument, what is wrong.
USAGE_ERRORS = [
    ([], "turngatectl: no COMMAND given"),
    (["--bogus", "status"], "turngatectl: --bogus: unknown option"),
    (["-s"], "turngatectl: -s: needs a value (the admin socket's path)"),
    (["frobnicate"], "turngatectl: frobnicate: unknown command"),
    (["status", "extra"], "turngatectl status: extra: unexpected argument (it takes none)"),
    (["reload", "--forse"], "turngatectl reload: --forse: unknown option (reload [--force])"),
    (["allocations", "--cursor", "-1"],
     "turngatectl allocations: --cursor: -1 is not a non-negative integer"),
    (["allocations", "--limit", "abc"],
     "turngatectl allocations: --limit: abc is not a positive integer"),
    (["allocations", "--page", "0"], "turngatectl allocations: --page: 0 is not a positive integer"),
    (["allocations", "--user"], "turngatectl allocations: --user: needs a value"),
    (["allocations", "--usr", "a"], "turngatectl allocations: --usr: unknown option"),
    (["top", "--rows", "0"], "turngatectl top: --rows: 0 is not an integer from 1 to 1000000"),
    (["top", "--count", "x"], "turngatectl top: --count: x is not an integer from 1 to 1000000"),
    (["top", "--interval", "0.01"],
     "turngatectl top: --interval: 0.01 is not a number of seconds from 0.1 to 60"),
    (["top", "--once", "now"], "turngatectl top: now: unexpected argument"),
    (["disconnect"], "turngatectl disconnect: missing ID or --user U"),
    (["disconnect", "-1"], "turngatectl disconnect: ID: -1 is not a non-negative integer"),
    (["disconnect", "3", "--gen", "x"],
     "turngatectl disconnect: --gen: x is not a non-negative integer"),
    (["disconnect", "3", "--gen"], "turngatectl disconnect: --gen: needs a value"),
    (["disconnect", "--user", "a", "b"], "turngatectl disconnect: b: unexpected argument"),
    (["drain", "maybe"], "turngatectl drain: maybe: neither on nor off"),
    (["loglevel", "a", "b"], "turngatectl loglevel: b: unexpected argument (one SPEC at most)"),
    (["revoke"], "turngatectl revoke: missing USER or --user-id ID"),
    (["revoke", "--user-id"], "turngatectl revoke: --user-id: needs a value"),
    (["revoke", "bob", "--for"], "turngatectl revoke: --for: needs a value"),
    (["unrevoke", "bob", "--for", "1m"], "turngatectl unrevoke: --for: unknown option"),
    (["revocations", "x"], "turngatectl revocations: x: unexpected argument"),
    (["doctor", "-u", "x"], "turngatectl doctor: -u: needs -p PASS too"),
    (["doctor", "--timeout", "soon"],
     "turngatectl doctor: --timeout: soon is not an integer from 1 to 3600000"),
    (["upgrade", "--timeout", "0"],
     "turngatectl upgrade: --timeout: 0 is not a number of seconds from 0.001 to 3600"),
    (["upgrade", "--bin", "x"], "turngatectl upgrade: --bin: unknown option"),
    (["probe"], "turngatectl probe: missing TURN-URI (turn[s]:HOST[:PORT][?transport=udp|tcp])"),
    (["probe", "stun:x", "--secret", "a"],
     "turngatectl probe: TURN-URI: stun:x is not turn[s]:HOST[:PORT][?transport=udp|tcp]"),
    (["probe", "turn:127.0.0.1", "-u", "a"], "turngatectl probe: -u: needs -p PASS too"),
    (["probe", "turn:127.0.0.1", "--secret", "a", "--timeout", "abc"],
     "turngatectl probe: --timeout: abc is not an integer from 1 to 3600000"),
    (["probe", "turn:127.0.0.1", "--secret", "a", "--transport", "quic"],
     "turngatectl probe: --transport: quic is not one of udp, tcp, tls, dtls"),
]


def test_ctl_usage_errors(d):
    """Every usage error says first, in one line on stderr, which command and argument are
    wrong and why, then only where the usage is (the 60-line text pushed that line off the
    screen); exit 2, nothing on stdout, the daemon never asked (the socket does not exist:
    reaching for it would exit 3). Before: most printed only the 60-line usage, disconnect
    and drain a "bad command or arguments: CMD"."""
    sock = os.path.join(d, "none.sock")
    for args, first in USAGE_ERRORS:
        r = subprocess.run([TURNGATECTL, "-s", sock] + args if args[:1] != ["-s"] else
                           [TURNGATECTL] + args, capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and r.stdout == "" and r.stderr == first + "\n" + TRY,
              (args, r.returncode, r.stderr))


def test_ctl_no_daemon(d):
    r = subprocess.run([TURNGATECTL, "-s", os.path.join(d, "none.sock"), "status"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 3 and "cannot connect to the admin socket" in r.stderr, r)
    r = subprocess.run([TURNGATECTL], capture_output=True, text=True, timeout=30)
    check(r.returncode == 2, r)
    r = subprocess.run([TURNGATECTL, "--help"], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0 and r.stdout.startswith("usage: turngatectl") and
          "allocations" in r.stdout and r.stderr == "", r)


if __name__ == "__main__":
    run_tests([test_ctl_commands, test_ctl_not_reached, test_ctl_disconnect_gen,
               test_ctl_disconnect_gen_takeover, test_ctl_older_daemon, test_ctl_probe,
               test_ctl_usage_errors, test_ctl_no_daemon])
