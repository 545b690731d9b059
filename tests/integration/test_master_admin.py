"""Admin socket: every command, malformed input, limits (idle clients of a full table make
room) and the socket's permissions."""
import json
import os
import select
import socket
import stat
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATED, Daemon, check, clock_shift, config_yaml,  # noqa: E402
                           free_port, run_tests, stun_binding_udp)


def start(d, workers=2, **kw):
    port = free_port()
    sock = os.path.join(d, "admin.sock")
    text = config_yaml(sock, [("udp", port, "TURN-UDP"), ("tcp", port, "TURN-TCP")],
                       workers=workers, **kw)
    return Daemon(d, text, workers=workers).start(), port


def test_socket_mode_and_stale_file(d):
    # A stale socket file (no one listening) must be replaced at start.
    sock = os.path.join(d, "admin.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock)
    s.close()
    daemon, _ = start(d)
    try:
        mode = stat.S_IMODE(os.stat(sock).st_mode)
        check(mode == 0o600, "admin socket mode is %o, expected 600" % mode)
    finally:
        check(daemon.stop() == 0, "exit status")
    check(not os.path.exists(sock), "socket file left behind after exit")


def test_socket_mode_shown_as_written(d):
    """admin_socket_mode shows as the operator wrote it ("0640", not 384) in turngatectl
    config and /status, and the value shown, pasted back into the file, means the same."""
    port, hp = free_port(), free_port()
    sock = os.path.join(d, "admin.sock")
    health = "  healthcheck_endpoint: \"http://127.0.0.1:%d\"\n" % hp

    def text(mode):
        return config_yaml(sock, [("udp", port, "TURN-UDP")],
                           extra_admin=health + "  admin_socket_mode: %s\n" % mode)
    daemon = Daemon(d, text('"0640"')).start()
    try:
        check(stat.S_IMODE(os.stat(sock).st_mode) == 0o640, "socket mode")
        rc, out, err = daemon.ctl("config")
        shown = json.loads(out)["admin"]["admin_socket_mode"]
        check(rc == 0 and shown == "0640", "turngatectl config shows %r" % (shown,))
        with urllib.request.urlopen("http://127.0.0.1:%d/status" % hp, timeout=10) as r:
            st = json.loads(r.read().decode())
        check(st["admin"]["admin_socket_mode"] == "0640", "/status: %r" % (st["admin"],))
        daemon.write_config(text(json.dumps(shown)))
        r = subprocess.run([TURNGATED, "-t", "-c", daemon.conf], capture_output=True,
                           text=True, timeout=60)
        check(r.returncode == 0, "the value shown, pasted back: %r" % (r,))
        daemon.reload()
        shown = daemon.admin({"cmd": "config"})["config"]["admin"]["admin_socket_mode"]
        check(shown == "0640", "after a reload of the pasted value: %r" % (shown,))
    finally:
        check(daemon.stop() == 0, "exit status")


def test_every_command(d):
    daemon, port = start(d)
    try:
        st = daemon.admin({"cmd": "status"})
        check(st["ok"] is True, st)
        for key in ("version", "uptime", "generation", "config_source", "last_reload",
                    "workers", "allocations", "listeners", "pid"):
            check(key in st, "status lacks %s: %r" % (key, st))
        check(st["workers"] == {"configured": 2, "running": 2, "source": "configured"},
              st["workers"])
        check(st["last_reload"]["ok"] is True and st["last_reload"]["trigger"] == "startup",
              st["last_reload"])
        check(st["allocations"] == 0, st)
        check(sorted(l["name"] for l in st["listeners"]) == ["tcp", "udp"], st["listeners"])

        cfg = daemon.admin({"cmd": "config"})
        check(cfg["ok"] and "s3cret" not in json.dumps(cfg), "secret leaked: %r" % cfg)
        check("<redacted>" in json.dumps(cfg), "no redaction marker: %r" % cfg)

        w = daemon.admin({"cmd": "workers"})
        check(w["ok"] and len(w["workers"]) == 2, w)
        check(all(x["state"] == "running" and x["pid"] > 0 for x in w["workers"]), w)

        check(stun_binding_udp(port) is not None, "no Binding answer")
        stats = daemon.admin({"cmd": "stats"})
        check(stats["ok"] and stats["counters"]["stun_binding"] >= 1, stats)

        a = daemon.admin({"cmd": "allocations"})
        check(a == {"ok": True, "allocations": [], "truncated": False, "next_cursor": None}, a)
        a = daemon.admin({"cmd": "allocations", "user": "x", "listener": "udp", "worker": 1})
        check(a["ok"] and a["allocations"] == [], a)

        r = daemon.admin({"cmd": "reload"})
        check(r["ok"] and r["generation"] == st["generation"] + 1, r)

        ll = daemon.admin({"cmd": "loglevel"})
        check(ll == {"ok": True, "spec": "all:INFO", "source": "config"}, ll)
        ll = daemon.admin({"cmd": "loglevel", "spec": "all:DEBUG,turn:TRACE"})
        check(ll == {"ok": True, "spec": "all:DEBUG,turn:TRACE", "source": "override"}, ll)
        ll = daemon.admin({"cmd": "loglevel", "spec": "config"})
        check(ll["source"] == "config", ll)

        dr = daemon.admin({"cmd": "drain"})
        check(dr["ok"] and dr["draining"] is True, dr)
        check(daemon.admin({"cmd": "status"})["draining"] is True, "status not draining")
        dr = daemon.admin({"cmd": "drain", "on": False})
        check(dr["ok"] and dr["draining"] is False, dr)

        dc = daemon.admin({"cmd": "disconnect", "user": "nobody"})
        check(dc == {"ok": True, "disconnected": 0, "not_reached": 0}, dc)
        dc = daemon.admin({"cmd": "disconnect", "id": 0})
        check(dc == {"ok": False, "error": "no such allocation"}, dc)
    finally:
        check(daemon.stop() == 0, "exit status")


# allocations' filters
FILTER_ERR = ("filters: user and listener are strings, worker and cursor non-negative "
              "integers, limit a positive integer")
# a disconnect's "id": N, or [N, GEN]
ID_ERR = "\"id\" must be an allocation id from `allocations`, or [id, gen]"
BAD = [
    (b"not json\n", "malformed request: expected one JSON object per line"),
    (b"[1,2]\n", "malformed request: expected a JSON object"),
    (b"{}\n", "missing \"cmd\" (a string)"),
    (b"{\"cmd\":5}\n", "missing \"cmd\" (a string)"),
    (b"{\"cmd\":\"selfdestruct\"}\n", "unknown command"),
    (b"{\"cmd\":\"status\",\"cmd\":\"status\"}\n",
     "malformed request: expected one JSON object per line"),
    (b"{\"cmd\":\"allocations\",\"worker\":-1}\n", None),
    (b"{\"cmd\":\"allocations\",\"user\":7}\n", None),
    # limit 0 would answer no entry and its own cursor as next_cursor: a walk that goes on
    # until next_cursor is null (operations.md) would never end.
    (b"{\"cmd\":\"allocations\",\"limit\":0}\n", FILTER_ERR),
    (b"{\"cmd\":\"disconnect\"}\n", None),
    (b"{\"cmd\":\"disconnect\",\"id\":\"x\"}\n", None),
    (b"{\"cmd\":\"disconnect\",\"id\":99999999}\n", None),
    (b"{\"cmd\":\"disconnect\",\"id\":1,\"user\":\"a\"}\n", None),
    (b"{\"cmd\":\"disconnect\",\"user\":\"\"}\n", None),
    (b"{\"cmd\":\"disconnect\",\"id\":[]}\n", ID_ERR),
    (b"{\"cmd\":\"disconnect\",\"id\":[0]}\n", ID_ERR),
    (b"{\"cmd\":\"disconnect\",\"id\":[0,1,2]}\n", ID_ERR),
    (b"{\"cmd\":\"disconnect\",\"id\":[0,\"1\"]}\n", ID_ERR),
    (b"{\"cmd\":\"disconnect\",\"id\":[0,-1]}\n", ID_ERR),
    (b"{\"cmd\":\"disconnect\",\"id\":[\"0\",1]}\n", ID_ERR),
    (b"{\"cmd\":\"disconnect\",\"id\":[0,1.5]}\n", ID_ERR),
    (b"{\"cmd\":\"disconnect\",\"id\":[99999999,1]}\n", ID_ERR),
    (b"{\"cmd\":\"disconnect\",\"user\":\"%s\"}\n" % (b"u" * 516), None),
    (b"{\"cmd\":\"drain\",\"on\":\"yes\"}\n", None),
    (b"{\"cmd\":\"loglevel\",\"spec\":\"all:LOUD\"}\n",
     "malformed log spec (expected e.g. \"all:INFO,turn:DEBUG\")"),
    (b"{\"cmd\":\"loglevel\",\"spec\":[]}\n", None),
    (b"\x00\xff\xfe garbage\n", "malformed request: expected one JSON object per line"),
]


def test_malformed(d):
    daemon, port = start(d, workers=1)
    try:
        for data, msg in BAD:
            reply = json.loads(daemon.admin_raw(data))
            check(reply.get("ok") is False and isinstance(reply.get("error"), str),
                  "%r -> %r" % (data, reply))
            if msg is not None:
                check(reply["error"] == msg, "%r -> %r" % (data, reply))
        # An overlong line is refused and the connection stays usable.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(daemon.sock)
        s.sendall(b"{\"cmd\":\"" + b"a" * 20000 + b"\"}\n{\"cmd\":\"status\"}\n")
        buf = b""
        while buf.count(b"\n") < 2:
            chunk = s.recv(65536)
            check(chunk, "connection closed early: %r" % buf)
            buf += chunk
        lines = buf.split(b"\n")
        check(json.loads(lines[0]) == {"ok": False, "error": "request line too long"},
              lines[0])
        check(json.loads(lines[1])["ok"] is True, lines[1])
        # Pipelined requests are answered in order.
        s.sendall(b"{\"cmd\":\"workers\"}\n{\"cmd\":\"nope\"}\n")
        buf = b""
        while buf.count(b"\n") < 2:
            chunk = s.recv(65536)
            check(chunk, "connection closed early")
            buf += chunk
        lines = buf.split(b"\n")
        check("workers" in json.loads(lines[0]), lines[0])
        check(json.loads(lines[1])["error"] == "unknown command", lines[1])
        s.close()
        # Too many clients: the 17th gets an error, the daemon keeps serving.
        held = []
        for _ in range(16):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(daemon.sock)
            held.append(c)
        extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        extra.settimeout(10)
        extra.connect(daemon.sock)
        got = extra.recv(4096)
        check(b"too many admin clients" in got, got)
        extra.close()
        for c in held:
            c.close()
        # The daemon notices the closes asynchronously: retry (bounded) until a slot frees.
        deadline = time.monotonic() + 10
        while not daemon.admin({"cmd": "status"})["ok"]:
            check(time.monotonic() < deadline, "admin socket stays full after clients left")
            time.sleep(0.05)
        check(stun_binding_udp(port) is not None, "Binding after malformed admin input")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_unknown_arguments_change_nothing(d):
    """Found by the aw3 walk: a command that changes something ignored arguments it does not
    take, so a misspelt one left its most drastic default to run: {"cmd":"drain","off":true}
    drained the node, a revoke with "ttl" revoked for ever, a disconnect with a separate "gen"
    ended whatever held that id. Such a request is refused now and changes nothing; commands
    that only read still take any (turngatectl doctor sends "ports" to every one)."""
    daemon, port = start(d, workers=1)
    try:
        for req, arg, takes in (({"cmd": "drain", "off": True}, "off", "on"),
                                ({"cmd": "revoke", "user": "alice", "ttl": 60}, "ttl",
                                 "user user_id for"),
                                ({"cmd": "disconnect", "id": 0, "gen": 5}, "gen", "id user"),
                                ({"cmd": "logrotate", "now": True}, "now", "none")):
            r = daemon.admin(req)
            check(r == {"ok": False, "error": '%s: unknown argument "%s" (it takes: %s)'
                        % (req["cmd"], arg, takes)}, "%r -> %r" % (req, r))
        check(daemon.admin({"cmd": "status"})["draining"] is False, "drained by a typo")
        r = daemon.admin({"cmd": "revocations"})
        check(r["ok"] and not r["revocations"], "revoked by a typo: %r" % r)
        r = daemon.admin({"cmd": "workers", "ports": False})
        check(r["ok"] is True, "a reading command refused an extra argument: %r" % r)
        check(stun_binding_udp(port) is not None, "Binding after refused commands")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_last_line_without_newline(d):
    """Found by the aw3 walk: a request without its newline, then the end of the client's
    output (printf '{"cmd":"status"}' | socat - UNIX-CONNECT:...), got no reply: the
    connection was closed unanswered. It is answered, then closed."""
    daemon, _ = start(d, workers=1)
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(daemon.sock)
        s.sendall(WORKERS.rstrip(b"\n"))
        s.shutdown(socket.SHUT_WR)
        buf = b""
        for _ in range(1000):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        s.close()
        check(buf.endswith(b"\n") and json.loads(buf)["ok"] is True, "reply %r" % buf[:200])
        check(daemon.admin({"cmd": "status"})["ok"] is True, "admin socket after the end")
    finally:
        check(daemon.stop() == 0, "exit status")


def ask_line(s, data):
    """Sends data (the rest of a request line) on a connection kept open and returns the
    reply (bounded by the socket's timeout)."""
    s.sendall(data)
    buf = b""
    while b"\n" not in buf:
        chunk = s.recv(65536)
        check(chunk, "kept connection closed after %r" % data)
        buf += chunk
    return json.loads(buf.split(b"\n", 1)[0])


def closed(s):
    """True when the daemon closed s (end of file now), False while it is open and quiet."""
    readable, _, _ = select.select([s], [], [], 0)
    return bool(readable) and s.recv(1) == b""


WORKERS = b'{"cmd":"workers"}\n'
ADMIN_IDLE_EVICT_S = 10     # master/admin.h


def admin_conn(daemon, conns):
    """A connection to the admin socket, kept (in conns) until the test closes it."""
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(30)
    c.connect(daemon.sock)
    conns.append(c)
    return c


def status_once_room(daemon, why, limit, pause, each=lambda: None):
    """Retries `turngatectl status` (bounded by limit seconds, each() before every try)
    until a full admin socket makes room; a refusal must be the busy line or the close
    before turngatectl's request was sent."""
    deadline = time.monotonic() + limit
    while True:
        each()
        rc, out, err = daemon.ctl("status")
        if rc == 0:
            return
        check(any(w in err for w in ("too many admin clients", "Broken pipe",
                                     "Connection reset")), (rc, out, err))
        check(time.monotonic() < deadline, why)
        time.sleep(pause)


def test_idle_clients_make_room(d):
    # Sixteen connections held open lock nobody out for good: once the idle ones have been
    # idle long enough (ADMIN_IDLE_EVICT_S), a newcomer takes the place of the one idle
    # longest. A client that is in the middle of a request, or that keeps asking on its
    # connection (a dashboard's loop), is not the one closed, even when it connected first.
    daemon, _ = start(d, workers=1)
    conns = []
    try:
        partial = admin_conn(daemon, conns)
        partial.sendall(b'{"cmd":"sta')
        looping = admin_conn(daemon, conns)
        check(ask_line(looping, WORKERS)["ok"] is True, "first request")
        idle = [admin_conn(daemon, conns) for _ in range(14)]
        # Until the idle ones have been idle long enough, newcomers are refused (as before
        # the fix, for good): retry, bounded, while the looping client keeps asking.
        status_once_room(daemon, "turngatectl status still refused: 16 idle admin clients "
                         "lock it out", 90, 0.5,
                         lambda: check(ask_line(looping, WORKERS)["ok"] is True,
                                       "looping client"))
        gone = [c for c in idle if closed(c)]
        check(len(gone) == 1, "%d idle clients closed, expected 1" % len(gone))
        check(not closed(partial) and not closed(looping), "a busy client was closed")
        check(ask_line(partial, b'tus"}\n')["ok"] is True, "the partial request's reply")
        check(ask_line(looping, WORKERS)["ok"] is True, "looping client after")
        line = "uid=%d pid=%d, idle" % (os.getuid(), os.getpid())
        check("closing the one idle longest, " + line in daemon.stderr(),
              "no WARN line naming the closed client (%s)" % line)
    finally:
        for c in conns:
            c.close()
        check(daemon.stop() == 0, "exit status")


def test_stalled_clients_make_room(d):
    # Sixteen connections that each sent half a request and stopped (none idle): once the
    # first has made no progress for ADMIN_STALL_EVICT_S, a newcomer takes its place; the
    # one stalled longest (connected first) goes, the others stay.
    daemon, _ = start(d, workers=1)
    conns = []
    try:
        for _ in range(16):
            admin_conn(daemon, conns).sendall(b'{"cmd":"sta')
            time.sleep(0.05)   # distinct last-progress times: the first is the oldest
        status_once_room(daemon, "turngatectl status still refused: 16 stalled admin "
                         "clients lock it out", 120, 1)
        gone = [i for i, c in enumerate(conns) if closed(c)]
        check(gone == [0], "stalled clients closed: %r, expected [0]" % gone)
        check(ask_line(conns[1], b'tus"}\n')["ok"] is True, "a stalled request's reply")
        line = "closing the one stalled longest, uid=%d pid=%d, no progress" % (
            os.getuid(), os.getpid())
        check(line in daemon.stderr(), "no WARN line naming the closed client (%s)" % line)
    finally:
        for c in conns:
            c.close()
        check(daemon.stop() == 0, "exit status")


def test_idle_eviction_ignores_wall_clock_steps(d):
    # Idle and stall times are counted on the monotonic clock: a wall clock stepped back an
    # hour (NTP, a VM restored) while sixteen clients sit idle must not lock the operator
    # out for that hour (libev's loop time, which the first version used, is the wall
    # clock).
    env, shift = clock_shift(d)
    port = free_port()
    sock = os.path.join(d, "admin.sock")
    daemon = Daemon(d, config_yaml(sock, [("udp", port, "TURN-UDP")], workers=1), workers=1,
                    env=env).start()
    conns = []
    try:
        for _ in range(16):
            admin_conn(daemon, conns)
        time.sleep(ADMIN_IDLE_EVICT_S + 1)   # idle long enough on any clock
        shift(-3600)
        time.sleep(2)   # libev reads the wall clock again at least every second of its loop
        status_once_room(daemon, "turngatectl status refused after the wall clock stepped "
                         "back", 30, 1)
        check(sum(closed(c) for c in conns) == 1, "one idle client closed")
    finally:
        for c in conns:
            c.close()
        check(daemon.stop() == 0, "exit status")


if __name__ == "__main__":
    run_tests([test_socket_mode_and_stale_file, test_socket_mode_shown_as_written,
               test_every_command, test_malformed, test_idle_clients_make_room,
               test_stalled_clients_make_room, test_idle_eviction_ignores_wall_clock_steps,
               test_unknown_arguments_change_nothing, test_last_line_without_newline])
