"""Reload: an invalid config changes nothing and is reported; listeners are added and removed live;
-w reloads on a change of the config or of a secret file it names."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATECTL, TURNGATED, Daemon, check, config_yaml,  # noqa: E402
                           free_port,
                           run_tests, stun_binding_tcp, stun_binding_udp, wait_for)


def test_sighup_invalid_keeps_running(d):
    port = free_port()
    sock = os.path.join(d, "admin.sock")
    good = config_yaml(sock, [("udp", port, "TURN-UDP")])
    daemon = Daemon(d, good).start()
    try:
        gen = daemon.admin({"cmd": "status"})["generation"]
        # Port out of range: a validation error with a location.
        daemon.write_config(good.replace("port: %d" % port, "port: 70000"))
        daemon.signal(signal.SIGHUP)
        st = wait_for(lambda: (lambda s: s if s["last_reload"]["trigger"] == "SIGHUP"
                               else None)(daemon.admin({"cmd": "status"})),
                      "the SIGHUP reload result")
        check(st["last_reload"]["ok"] is False, st)
        check(st["generation"] == gen, "generation changed on a failed reload: %r" % st)
        errs = st["last_reload"]["errors"]
        check(any("listeners[0].port" in e and "70000" in e for e in errs), errs)
        check(any(e.startswith(daemon.conf + ":") or "turngate.yaml:" in e for e in errs),
              "error without file location: %r" % errs)
        # The old config keeps serving.
        check(stun_binding_udp(port) is not None, "old listener stopped after a bad reload")
        # turngatectl reload with the same file: non-zero, errors printed.
        rc, out, err = daemon.ctl("reload")
        check(rc == 1, "turngatectl reload exit %d" % rc)
        check("invalid configuration" in err and "listeners[0].port" in err, err)
        rc, out, err = daemon.ctl("status")
        check(rc == 0 and "FAILED (admin)" in out and "70000" in out, out)
        # YAML syntax error: also rejected.
        daemon.write_config("version: v1\nlisteners: [\n")
        r = daemon.admin({"cmd": "reload"})
        check(r["ok"] is False and r["errors"], r)
        # Fixing the file makes the next reload succeed.
        daemon.write_config(good)
        r = daemon.admin({"cmd": "reload"})
        check(r["ok"] is True and r["generation"] == gen + 1, r)
        check(stun_binding_udp(port) is not None, "listener gone after a good reload")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_add_and_remove_listener(d):
    p1, p2 = free_port(), free_port(late=True)    # p2: bound at a reload
    sock = os.path.join(d, "admin.sock")
    one = config_yaml(sock, [("udp-a", p1, "TURN-UDP")])
    two = config_yaml(sock, [("udp-a", p1, "TURN-UDP"), ("udp-b", p2, "TURN-UDP"),
                             ("tcp-b", p2, "TURN-TCP")])
    daemon = Daemon(d, one).start()
    try:
        check(stun_binding_udp(p1) is not None, "first listener does not answer")
        check(stun_binding_udp(p2, timeout=0.5, tries=1) is None, "p2 answers before added")
        daemon.write_config(two)
        daemon.signal(signal.SIGHUP)
        wait_for(lambda: len(daemon.admin({"cmd": "status"})["listeners"]) == 3,
                 "three listeners")
        # Every worker got the new sockets: several Bindings (spread by reuseport) answer.
        for _ in range(6):
            check(stun_binding_udp(p2) is not None, "added UDP listener does not answer")
            check(stun_binding_tcp(p2) is not None, "added TCP listener does not answer")
        check(stun_binding_udp(p1) is not None, "untouched listener stopped")
        # Remove the first listener via the admin socket.
        daemon.write_config(config_yaml(sock, [("udp-b", p2, "TURN-UDP"),
                                               ("tcp-b", p2, "TURN-TCP")]))
        rc, out, err = daemon.ctl("reload")
        check(rc == 0 and out.startswith("reload ok"), (rc, out, err))
        names = sorted(l["name"] for l in daemon.admin({"cmd": "status"})["listeners"])
        check(names == ["tcp-b", "udp-b"], names)
        check(stun_binding_udp(p1, timeout=0.5, tries=2) is None, "removed listener answers")
        check(stun_binding_udp(p2) is not None, "kept listener stopped")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_listener_port_change(d):
    p1, p2 = free_port(), free_port(late=True)    # p2: bound at a reload
    sock = os.path.join(d, "admin.sock")
    daemon = Daemon(d, config_yaml(sock, [("a", p1, "TURN-UDP"), ("t", p1, "TURN-TCP")])
                    ).start()
    try:
        check(stun_binding_udp(p1) is not None, "listener does not answer")
        # Same names, new port: both listeners restart on p2, p1 goes quiet.
        daemon.write_config(config_yaml(sock, [("a", p2, "TURN-UDP"), ("t", p2, "TURN-TCP")]))
        r = daemon.admin({"cmd": "reload"})
        check(r["ok"], r)
        ls = daemon.admin({"cmd": "status"})["listeners"]
        check(sorted((l["name"], l["port"]) for l in ls) == [("a", p2), ("t", p2)], ls)
        wait_for(lambda: stun_binding_udp(p2) is not None, "restarted UDP listener")
        wait_for(lambda: stun_binding_tcp(p2) is not None, "restarted TCP listener")
        wait_for(lambda: stun_binding_udp(p1, timeout=0.3, tries=1) is None,
                 "old port to go quiet")
        check(stun_binding_tcp(p1) is None, "old TCP port still accepts")
        # A port another process holds (without SO_REUSEPORT): the reload fails whole.
        # (A port below the relay range: one in it would be refused before the bind.)
        blocker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        busy = free_port()
        blocker.bind(("127.0.0.1", busy))
        daemon.write_config(config_yaml(sock, [("a", p2, "TURN-UDP"), ("t", p2, "TURN-TCP"),
                                               ("b", busy, "TURN-UDP")]))
        r = daemon.admin({"cmd": "reload"})
        blocker.close()
        check(r["ok"] is False and "Address already in use" in r["errors"][0], r)
        check(len(daemon.admin({"cmd": "status"})["listeners"]) == 2, "partial reload")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_watch_reload(d):
    p1, p2 = free_port(), free_port(late=True)    # p2: bound at a reload
    sock = os.path.join(d, "admin.sock")
    daemon = Daemon(d, config_yaml(sock, [("a", p1, "TURN-UDP")]), args=["-w"]).start()
    try:
        gen = daemon.admin({"cmd": "status"})["generation"]
        daemon.write_config(config_yaml(sock, [("a", p1, "TURN-UDP"), ("b", p2, "TURN-UDP")]))
        st = wait_for(lambda: (lambda s: s if s["generation"] > gen else None)(
            daemon.admin({"cmd": "status"})), "an inotify reload")
        check(st["last_reload"]["trigger"] == "inotify", st["last_reload"])
        check(stun_binding_udp(p2) is not None, "listener added by -w does not answer")
        # The watch is rebuilt after each reload: a second change is seen too.
        daemon.write_config(config_yaml(sock, [("a", p1, "TURN-UDP")]))
        wait_for(lambda: daemon.admin({"cmd": "status"})["generation"] > st["generation"],
                 "a second inotify reload")
        wait_for(lambda: stun_binding_udp(p2, timeout=0.3, tries=1) is None,
                 "listener removed by -w to go quiet")
    finally:
        check(daemon.stop() == 0, "exit status")


def put(path, text):
    """Replaces a file the way Kubernetes and editors do: write aside, rename over."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def probe(port, secret):
    """True when a credential minted with secret allocates (turngatectl probe mints it)."""
    r = subprocess.run([TURNGATECTL, "probe", "turn:127.0.0.1:%d" % port, "--secret", secret],
                       capture_output=True, text=True, timeout=60)
    return r.returncode == 0


def test_watch_secret_file(d):
    """-w sees a rotation done only in the secret files (the config file is not touched):
    the new secret verifies, the old one too (now the previous secret, in its grace), the
    one before that no longer."""
    port = free_port()
    cur, prev = os.path.join(d, "secret"), os.path.join(d, "previous")
    put(cur, "secret-one\n")
    put(prev, "secret-zero\n")
    text = config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")])
    files = ("  secret_file: %s\n  previous_secret_file: %s\n"
             "  previous_secret_grace: 3600\n" % (cur, prev))
    check("  credentials:\n    secret: s3cret\n" in text, text)
    text = text.replace("  credentials:\n    secret: s3cret\n", files)
    daemon = Daemon(d, text, args=["-w"]).start()
    try:
        check(probe(port, "secret-one") and probe(port, "secret-zero"), "before rotation")
        check(not probe(port, "secret-two"), "a secret not configured yet verifies")
        gen = daemon.admin({"cmd": "status"})["generation"]
        put(prev, "secret-one\n")
        put(cur, "secret-two\n")
        wait_for(lambda: daemon.admin({"cmd": "status"})["generation"] > gen,
                 "a reload after the secret files changed")
        # Both writes may land in one reload or two: wait until the second one is in.
        wait_for(lambda: probe(port, "secret-two"), "the new secret to verify")
        st = daemon.admin({"cmd": "status"})
        check(st["last_reload"]["trigger"] == "inotify", st["last_reload"])
        check(probe(port, "secret-one"), "the old secret stopped verifying during its grace")
        check(not probe(port, "secret-zero"), "the secret before it still verifies")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_reload_refuses_relay_range_over_a_port(d):
    """#35 (8): a reload whose relay port range would hold the listener's own port (a relay
    socket could take it) is refused with the key's position, and the old config serves on
    with the old range."""
    port = free_port()
    sock = os.path.join(d, "admin.sock")
    good = config_yaml(sock, [("udp", port, "TURN-UDP")])
    daemon = Daemon(d, good).start()
    try:
        gen = daemon.admin({"cmd": "status"})["generation"]
        bad = good.replace("    port: %d\n" % port, "    port: %d\n    relay_port_min: %d\n"
                           "    relay_port_max: %d\n" % (port, port - 10, port + 10))
        check(bad != good, "the listener's port line not found")
        daemon.write_config(bad)
        daemon.signal(signal.SIGHUP)
        st = wait_for(lambda: (lambda s: s if s["last_reload"]["trigger"] == "SIGHUP"
                               else None)(daemon.admin({"cmd": "status"})),
                      "the SIGHUP reload result")
        check(st["last_reload"]["ok"] is False, st)
        check(st["generation"] == gen, "generation changed on a refused reload: %r" % st)
        errs = st["last_reload"]["errors"]
        check(any("turngate.yaml:" in e and "listeners[0].relay_port_min" in e and
                  "holds this listener's own port %d/udp" % port in e for e in errs), errs)
        rc, out, err = daemon.ctl("reload")
        check(rc == 1 and "relay port range" in err, (rc, out, err))
        cfg = json.loads(daemon.ctl("config")[1])
        check(cfg["listeners"][0]["relay_port_min"] == 49152, cfg["listeners"][0])
        check(stun_binding_udp(port) is not None, "the listener stopped after a refused reload")
    finally:
        check(daemon.stop() == 0, "exit status")


def worker_pids(daemon):
    return sorted(w["pid"] for w in daemon.admin({"cmd": "workers"})["workers"])


def sighup_result(daemon):
    daemon.signal(signal.SIGHUP)
    return wait_for(lambda: (lambda s: s if s["last_reload"]["trigger"] == "SIGHUP"
                             else None)(daemon.admin({"cmd": "status"})),
                    "the SIGHUP reload result")


def unblock_fifo(path):
    """Ends a read that blocks on the FIFO at path (the code before the fix), if any."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def one_udp_daemon(d):
    """A started daemon with one UDP listener: (daemon, its port, its config text)."""
    port = free_port()
    good = config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")])
    return Daemon(d, good).start(), port, good


def check_t_refuses(conf, want, timeout):
    """turngated -t on conf exits non-zero and prints want."""
    t = subprocess.run([TURNGATED, "-t", "-c", conf], capture_output=True, text=True,
                       timeout=timeout)
    check(t.returncode != 0 and want in t.stdout + t.stderr, (t.returncode, t.stdout, t.stderr))


def refused_keeps_serving(daemon, port, gen, pids):
    """After a refused reload: the old generation, the same workers, the listener answers."""
    check(daemon.admin({"cmd": "status"})["generation"] == gen, "generation changed")
    check(worker_pids(daemon) == pids, "the workers changed")
    check(stun_binding_udp(port) is not None, "the old listener stopped")


def test_reload_refuses_deep_nesting(d):
    """aw3 F1: a config of lists 100k deep (libyaml's load is quadratic in the depth: a
    minute with the master's loop stopped) is refused at once, by -t and by a reload, at the
    first level past 64; the old config and its workers serve on."""
    daemon, port, good = one_udp_daemon(d)
    try:
        gen, pids = daemon.admin({"cmd": "status"})["generation"], worker_pids(daemon)
        deep = good + "x: " + "[" * 100000 + "]" * 100000 + "\n"
        want = ("turngate.yaml:%d:67: lists and mappings nested deeper than 64 levels"
                % (good.count("\n") + 1))
        daemon.write_config(deep)
        r = daemon.admin({"cmd": "reload"})
        check(r["ok"] is False and any(want in e for e in r["errors"]), r)
        check_t_refuses(daemon.conf, want, 60)
        refused_keeps_serving(daemon, port, gen, pids)
        check(daemon.reload(good)["generation"] == gen + 1, "the good config after it")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_reload_refuses_fifo_config(d):
    """aw3 F3: a config path that is a FIFO blocked the master (SIGHUP, reload, -t) until
    someone wrote it; a reload refuses it at once as not a regular file, and the old config
    and its workers serve on. -t reads a pipe to its end (review13: `cat x.yaml | turngated
    -t -c /dev/stdin` is checked as before), and one without a writer at once: empty."""
    daemon, port, good = one_udp_daemon(d)
    try:
        gen, pids = daemon.admin({"cmd": "status"})["generation"], worker_pids(daemon)
        os.unlink(daemon.conf)
        os.mkfifo(daemon.conf, 0o600)
        st = sighup_result(daemon)
        check(st["last_reload"]["ok"] is False and
              any("not a regular file" in e for e in st["last_reload"]["errors"]), st)
        check_t_refuses(daemon.conf, "empty document", 20)
        t = subprocess.run([TURNGATED, "-t", "-c", "/dev/stdin"], input=good,
                           capture_output=True, text=True, timeout=20)
        check(t.returncode == 0, "-t of a piped config: %r" % ((t.stdout, t.stderr),))
        refused_keeps_serving(daemon, port, gen, pids)
        unblock_fifo(daemon.conf)
        os.unlink(daemon.conf)
        check(daemon.reload(good)["generation"] == gen + 1, "the good config after it")
    finally:
        unblock_fifo(daemon.conf)
        check(daemon.stop() == 0, "exit status")


if __name__ == "__main__":
    run_tests([test_sighup_invalid_keeps_running, test_add_and_remove_listener,
               test_listener_port_change, test_watch_reload, test_watch_secret_file,
               test_reload_refuses_relay_range_over_a_port,
               test_reload_refuses_deep_nesting, test_reload_refuses_fifo_config])
