"""Supervision and shutdown: kill -9 of a worker, a fork that fails for a while (ridden out), a
worker that cannot be started again for 60 s (exit status 1; a SIGTERM drain finishes first),
a hung worker (no pongs), a worker stuck inside a loop iteration (holds up snapshot
reclamation), SIGTERM drain, second signal, command line."""
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATED, Client, Daemon, Failure, binding_request,  # noqa: E402
                           check, clock_shift, config_yaml, free_port, run_tests,
                           stun_binding_udp, wait_for)

NOBODY = 65534


def test_kill9_respawns(d):
    port = free_port()
    daemon = Daemon(d, config_yaml(os.path.join(d, "admin.sock"),
                                   [("udp", port, "TURN-UDP")])).start()
    daemon.allowed_deaths = 1
    try:
        before = daemon.admin({"cmd": "workers"})["workers"]
        victim = before[0]
        os.kill(victim["pid"], signal.SIGKILL)
        # While slot 0 is down, the other worker's socket keeps answering: the kernel only
        # hands datagrams of the dead worker's socket to nobody, so retry a few times.
        answered = sum(stun_binding_udp(port, timeout=0.3, tries=1) is not None
                       for _ in range(10))
        check(answered > 0, "no Binding answered while one worker was down")

        def respawned():
            ws = daemon.admin({"cmd": "workers"})["workers"]
            w0 = ws[0]
            if w0["pid"] not in (0, victim["pid"]) and w0["state"] == "running":
                return ws
            return None
        ws = wait_for(respawned, "slot 0 to be respawned")
        check(ws[0]["restarts"] == 1, ws[0])
        check(ws[0]["last_exit"] == signal.SIGKILL, ws[0])
        check(ws[1]["pid"] == before[1]["pid"], "the other worker was restarted too")
        check("killed by signal 9" in daemon.stderr(), "death not logged")
        for _ in range(5):
            check(stun_binding_udp(port) is not None, "no answer after respawn")
    finally:
        check(daemon.stop() == 0, "exit status")


def as_nobody(fn):
    """Runs fn in a child that is nobody (uid and gid, real, effective and saved: what
    prlimit(2) on a process of nobody asks of a caller without CAP_SYS_RESOURCE); returns
    its exit status, 0 when fn returned."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            fn()
            os._exit(0)
        except BaseException:
            os._exit(1)
    return os.waitpid(pid, 0)[1]


def nobody_daemon(d, drain_timeout=10):
    """A daemon run as nobody (setpriv), in a folder nobody owns, started; None (with the
    reason printed) where that cannot be done: not root, or no setpriv."""
    if os.geteuid() != 0:
        print("  skipped: needs root (to run the daemon as nobody)")
        return None
    if shutil.which("setpriv") is None:
        print("  skipped: no setpriv (util-linux) to run the daemon as nobody")
        return None
    sub = os.path.join(d, "nobody")
    os.mkdir(sub)
    os.chown(sub, NOBODY, NOBODY)
    os.chmod(d, 0o711)
    port = free_port()
    text = config_yaml(os.path.join(sub, "admin.sock"), [("udp", port, "TURN-UDP")])
    # LeakSanitizer's check at exit needs a thread, which RLIMIT_NPROC 1 refuses (the
    # sanitizer build then aborts with "LeakSanitizer has encountered a fatal error").
    daemon = Daemon(sub, text.replace("drain_timeout: 10", "drain_timeout: %d" % drain_timeout),
                    wrap=["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                          "--clear-groups"],
                    env={"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
                         ":detect_leaks=0"})
    daemon.start()
    daemon.allowed_deaths = 1
    daemon.port = port
    return daemon


def set_nproc(daemon, soft):
    """Sets the master's soft RLIMIT_NPROC (as nobody: no CAP_SYS_RESOURCE needed); returns
    the one it had."""
    pid, nproc = daemon.proc.pid, resource.RLIMIT_NPROC
    with open("/proc/%d/limits" % pid) as f:     # prlimit(2) reading it is nobody's too
        row = [x.split()[2] for x in f if x.startswith("Max processes")][0]
    was = resource.RLIM_INFINITY if row == "unlimited" else int(row)
    check(as_nobody(lambda: resource.prlimit(pid, nproc,
                                             (soft, resource.prlimit(pid, nproc)[1]))) == 0,
          "prlimit")
    return was


FORK_FAILED = "slot 0: fork: Resource temporarily unavailable"
GAVE_UP = ("worker 0: no running worker for 60 s (every start failed): giving up, the daemon "
           "stops with status 1")


def test_short_fork_failure_is_ridden_out(d):
    """A fork that fails for a while (pids.max, a shared RLIMIT_NPROC) does not stop a
    healthy daemon: the slot is retried at its backoff and serves again once the fork
    works. Before, 5 failures in a row (about 1.5 s) stopped the daemon with status 1."""
    daemon = nobody_daemon(d)
    if daemon is None:
        return
    try:
        was = set_nproc(daemon, 1)
        os.kill(daemon.admin({"cmd": "workers"})["workers"][0]["pid"], signal.SIGKILL)
        wait_for(lambda: daemon.proc.poll() is not None or
                 daemon.stderr().count(FORK_FAILED) >= 7, "7 failed forks")
        check(daemon.proc.poll() is None, "stopped by a short fork failure:\n%s"
              % daemon.stderr())
        set_nproc(daemon, was)

        def serving():
            ws = daemon.admin({"cmd": "workers"})["workers"]
            return ws[0]["state"] == "running" and ws[0]["pid"] > 0
        wait_for(serving, "slot 0 to serve again")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_worker_that_cannot_start_stops_with_1(d):
    """A slot whose worker cannot be started again (here its fork fails: the master runs as
    nobody with RLIMIT_NPROC lowered to 1 after start, then its worker is killed) is given
    up once it has had no running worker for 60 s: the daemon stops with status 1, so that
    systemd's Restart=on-failure or a container's restart policy acts. Before the give-up
    existed, the master retried every 5 s for ever and exited 0 when told to stop."""
    daemon = nobody_daemon(d)
    if daemon is None:
        return
    try:
        set_nproc(daemon, 1)
        os.kill(daemon.admin({"cmd": "workers"})["workers"][0]["pid"], signal.SIGKILL)
        rc = daemon.wait_exit(timeout=120)
    finally:
        daemon.kill()
    log = daemon.stderr()
    check(rc == 1, "exit status %r, want 1:\n%s" % (rc, log))
    check(log.count(FORK_FAILED) > 5, log)
    check(GAVE_UP in log, log)
    daemon.err.close()
    daemon.scan()


def test_give_up_lets_the_drain_finish(d):
    """A slot given up while SIGTERM drains (an allocation held, drain_timeout 80 s) does
    not cut the drain short: the daemon drains on to its deadline, then exits 1 (something
    failed). Before, the give-up stopped the daemon at once."""
    daemon = nobody_daemon(d, drain_timeout=80)
    if daemon is None:
        return
    client = Client(daemon.port, secret="s3cret", realm="test.realm")
    try:
        client.allocate()
        set_nproc(daemon, 1)
        daemon.signal(signal.SIGTERM)
        os.kill(daemon.admin({"cmd": "workers"})["workers"][0]["pid"], signal.SIGKILL)
        wait_for(lambda: daemon.proc.poll() is not None or GAVE_UP in daemon.stderr(),
                 "the give-up or the exit", timeout=90)
        check(daemon.proc.poll() is None, "the give-up cut the drain short:\n%s"
              % daemon.stderr())
        rc = daemon.wait_exit(timeout=60)
    finally:
        client.close()
        daemon.kill()
    check(rc == 1, "exit status %r, want 1:\n%s" % (rc, daemon.stderr()))
    daemon.err.close()
    daemon.scan()


def test_hung_worker_is_replaced(d):
    """A worker that stops answering pings (SIGSTOP) is killed after admin.worker_ping_timeout
    (3 s here, 15 s by default) and respawned."""
    port = free_port()
    daemon = Daemon(d, config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")],
                                   extra_admin="  worker_ping_timeout: 3\n")).start()
    daemon.allowed_deaths = 1
    try:
        victim = daemon.admin({"cmd": "workers"})["workers"][0]["pid"]
        os.kill(victim, signal.SIGSTOP)

        def replaced():
            w = daemon.admin({"cmd": "workers"})["workers"][0]
            return w["pid"] not in (0, victim) and w["state"] == "running"
        wait_for(replaced, "the hung worker to be replaced", timeout=60)
        check("does not answer pings: killing it" in daemon.stderr(), daemon.stderr())
        check(stun_binding_udp(port) is not None, "no answer after the replacement")
    finally:
        check(daemon.stop() == 0, "exit status")


def pids(daemon):
    return [w["pid"] for w in daemon.admin({"cmd": "workers"})["workers"]]


def ping_rounds_pass(daemon, n=3):
    """Waits until n more ping rounds (one a second) have been answered by every worker."""
    def answered():
        return all(w["state"] == "running" and w["last_pong_age"] < 1.5
                   for w in daemon.admin({"cmd": "workers"})["workers"])
    for _ in range(n):
        time.sleep(1.0)
        wait_for(answered, "every worker answering pings", timeout=30)


def test_master_stall_kills_no_worker(d):
    """Found by review11: a master whose own loop stalled longer than worker_ping_timeout (a
    blocking lookup at a reload with a STRICT_DNS cluster, a paused VM; SIGSTOP here) killed
    every healthy worker at its next tick, "does not answer pings", before it read the pongs
    queued meanwhile: TCP and TLS calls ended. Now a worker is judged by its oldest ping not
    answered, after the answers queued are read."""
    port = free_port()
    daemon = Daemon(d, config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")],
                                   extra_admin="  worker_ping_timeout: 3\n")).start()
    try:
        before = pids(daemon)
        daemon.signal(signal.SIGSTOP)
        try:
            time.sleep(6)
        finally:
            daemon.signal(signal.SIGCONT)
        wait_for(lambda: "the master's loop stalled" in daemon.stderr(), "the stall logged")
        ping_rounds_pass(daemon)
        check(pids(daemon) == before, "workers replaced after the master's stall:\n"
              + daemon.stderr())
        check("does not answer pings" not in daemon.stderr(), daemon.stderr())
    finally:
        check(daemon.stop() == 0, "exit status")


def test_wall_clock_step_kills_no_worker(d):
    """Found with the stall above: the ping clocks were libev's loop time, the wall clock. A
    wall clock stepped forward an hour (NTP, a VM restored) killed every worker at the next
    ping; stepped back, a hung worker would have gone unnoticed for that hour. They are the
    monotonic clock now: a step kills nobody, and says nothing of a stall."""
    env, shift = clock_shift(d)
    port = free_port()
    daemon = Daemon(d, config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")],
                                   extra_admin="  worker_ping_timeout: 3\n"),
                    env=env).start()
    try:
        before = pids(daemon)
        shift(3600)
        time.sleep(2)   # libev reads the wall clock again at least every second of its loop
        ping_rounds_pass(daemon)
        check(pids(daemon) == before, "workers replaced after a wall clock step:\n"
              + daemon.stderr())
        check("does not answer pings" not in daemon.stderr(), daemon.stderr())
        check(not re.search(r"stalled \d{3,}", daemon.stderr()), "a step taken for a stall")
    finally:
        check(daemon.stop() == 0, "exit status")


class Flood:
    """Binding requests sent as fast as one thread can (replies ignored), so the worker is
    inside a loop iteration (online) most of the time. Bounded: stops after max_s."""

    def __init__(self, port, max_s=120.0):
        self.port, self.max_s = port, max_s
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(4)]
        req = binding_request()[0]
        end = time.monotonic() + self.max_s
        try:
            while not self.stop_ev.is_set() and time.monotonic() < end:
                for s in socks:
                    try:
                        s.sendto(req, ("127.0.0.1", self.port))
                    except OSError:
                        pass
        finally:
            for s in socks:
                s.close()

    def stop(self):
        self.stop_ev.set()
        self.t.join(timeout=10)


def proc_state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def stop_online(daemon, pid, tries=400):
    """SIGSTOPs the worker until it is frozen while online (inside a loop iteration, where
    it may hold a snapshot pointer); an attempt that catches it offline (in epoll_wait) is
    undone with SIGCONT. Returns the number of attempts."""
    for attempt in range(1, tries + 1):
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: proc_state(pid) == "T", "the worker to stop", timeout=10)
        if daemon.admin({"cmd": "workers"})["workers"][0]["online"]:
            return attempt
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.005 * (attempt % 7))
    raise Failure("worker never caught online in %d tries" % tries)


def test_stalled_worker_blocks_reclamation(d):
    """A worker frozen inside a loop iteration holds up the grace period of the snapshot a
    reload replaces: after admin.worker_stall_timeout the master logs it, kills it (not the
    ping timeout, set far longer here), respawns it, and reclamation resumes."""
    port = free_port()
    text = config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")], workers=1,
                       extra_admin="  worker_ping_timeout: 600\n  worker_stall_timeout: 2\n")
    daemon = Daemon(d, text, workers=1).start()
    daemon.allowed_deaths = 1
    flood = Flood(port)
    try:
        st = daemon.admin({"cmd": "status"})
        check(st["snapshots"]["pending"] == 0, st)
        victim = daemon.admin({"cmd": "workers"})["workers"][0]["pid"]
        tries = stop_online(daemon, victim)
        flood.stop()
        sys.stderr.write("  worker frozen online after %d SIGSTOP(s)\n" % tries)
        reclaimed = daemon.admin({"cmd": "status"})["snapshots"]["reclaimed"]
        r = daemon.admin({"cmd": "reload"})
        check(r["ok"] is True, r)

        def replaced():
            w = daemon.admin({"cmd": "workers"})["workers"][0]
            return w["pid"] not in (0, victim) and w["state"] == "running"
        wait_for(replaced, "the stalled worker to be replaced", timeout=60)
        # The master named the frozen worker as the blocker of the grace period.
        err = daemon.stderr()
        check("worker 0 (pid %d) blocks snapshot reclamation: killing it" % victim in err, err)
        check("does not answer pings" not in err, "killed by the ping timeout instead:\n" + err)
        st = wait_for(lambda: (lambda s: s if s["snapshots"]["pending"] == 0 else None)(
            daemon.admin({"cmd": "status"})), "reclamation to resume", timeout=30)
        check(st["snapshots"]["reclaimed"] > reclaimed, st)
        check(stun_binding_udp(port) is not None, "no answer after the replacement")
    finally:
        flood.stop()
        check(daemon.stop() == 0, "exit status")


def test_sigterm_drains_and_exits_0(d):
    port = free_port()
    daemon = Daemon(d, config_yaml(os.path.join(d, "admin.sock"),
                                   [("udp", port, "TURN-UDP")])).start()
    pids = [w["pid"] for w in daemon.admin({"cmd": "workers"})["workers"]]
    daemon.signal(signal.SIGTERM)
    rc = daemon.wait_exit(timeout=30)
    check(rc == 0, "exit status %d" % rc)
    daemon.err.close()
    daemon.scan()
    for pid in pids:
        check(not os.path.exists("/proc/%d" % pid) or
              open("/proc/%d/stat" % pid).read().split()[2] == "Z",
              "worker %d outlived the master" % pid)
    check("draining" in daemon.stderr(), "drain not logged")


def test_second_signal_stops_now(d):
    port = free_port()
    daemon = Daemon(d, config_yaml(os.path.join(d, "admin.sock"),
                                   [("udp", port, "TURN-UDP")])).start()
    daemon.signal(signal.SIGTERM)
    daemon.signal(signal.SIGINT)
    rc = daemon.wait_exit(timeout=30)
    check(rc == 0, "exit status %d" % rc)
    daemon.err.close()
    daemon.scan()


def test_repeated_signals_keep_the_deadline(d):
    """A stop whose worker does not exit (SIGSTOP) ends at its deadline (1 s after SIGINT,
    the worker killed) however often the signal comes again: each SIGINT used to set the
    deadline 1 s ahead again, so an operator pressing Ctrl-C kept the master waiting."""
    port = free_port()
    daemon = Daemon(d, config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")],
                                   workers=1), workers=1).start()
    daemon.allowed_deaths = 1   # the stopped worker, killed at the deadline
    victim = daemon.admin({"cmd": "workers"})["workers"][0]["pid"]
    os.kill(victim, signal.SIGSTOP)
    daemon.signal(signal.SIGINT)
    deadline = time.monotonic() + 20
    while daemon.proc.poll() is None and time.monotonic() < deadline:
        daemon.signal(signal.SIGINT)    # ten a second, each well within the 1 s deadline
        time.sleep(0.1)
    exited = daemon.proc.poll() is not None
    if not exited:
        os.kill(victim, signal.SIGKILL)
        daemon.kill()
    check(exited, "the master still runs 20 s after SIGINT, signalled again ten a second")
    daemon.err.close()
    daemon.scan()


def test_second_daemon_refused(d):
    port = free_port()
    sock = os.path.join(d, "admin.sock")
    daemon = Daemon(d, config_yaml(sock, [("udp", port, "TURN-UDP")])).start()
    try:
        r = subprocess.run([TURNGATED, "-c", daemon.conf], capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 1 and "another turngated is running" in r.stderr, r)
        check(daemon.admin({"cmd": "status"})["ok"], "first daemon disturbed")
    finally:
        check(daemon.stop() == 0, "exit status")


def test_diagnosed_config_error_said_once(d):
    """A config the loader diagnoses fails the start with its diagnostics only: the generic
    "cannot load configuration" line is for failures without a diagnostic."""
    conf = os.path.join(d, "bad.yaml")
    with open(conf, "w") as f:
        f.write("version: v1\nlisteners:\n  - name: x\n    protocol: TURN-BOGUS\n"
                "    port: 3478\n")
    r = subprocess.run([TURNGATED, "-c", conf], capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "TURN-BOGUS" in r.stderr, r)
    check("cannot load configuration" not in r.stderr, r.stderr)
    r = subprocess.run([TURNGATED, "-c", os.path.join(d, "missing.yaml")],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and r.stderr.count("missing.yaml") >= 1, r)


def test_command_line(d):
    r = subprocess.run([TURNGATED, "-v"], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0 and r.stdout.startswith("turngated "), r)
    r = subprocess.run([TURNGATED, "-h"], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0 and "--udp-thread-num" in r.stdout, r)
    check(r.stdout.startswith("usage: turngated") and r.stderr == "", r)
    # A usage error: its one line, then where the whole text is (not the 20-line text,
    # which pushed the line that says what is wrong off the screen); status 2.
    for args, first in ((["--bogus"], "turngated: --bogus: unknown option"),
                        (["--w"], "turngated: --w: ambiguous (--watch or --workers)"),
                        (["-tx"], "turngated: -x: unknown option"),
                        (["-c"], "turngated: -c: needs a value"),
                        (["--config"], "turngated: --config: needs a value"),
                        (["--workers", "0"], "turngated: worker count must be 1..255"),
                        (["-t", "extra"], "turngated: unexpected argument: extra")):
        r = subprocess.run([TURNGATED] + args, capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and r.stdout == "" and
              r.stderr == first + "\ntry 'turngated --help'\n", (args, r))
    r = subprocess.run([TURNGATED, "-l", "all:NOPE"], capture_output=True, text=True,
                       timeout=30)
    check(r.returncode == 2 and "malformed log spec" in r.stderr, r)
    # --udp-thread-num overrides the config's worker count.
    port = free_port()
    daemon = Daemon(d, config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")],
                                   workers=2), args=["--udp-thread-num=3", "-l", "all:WARN"],
                    workers=3).start()
    try:
        st = daemon.admin({"cmd": "status"})
        check(st["workers"] == {"configured": 3, "running": 3,
                                "source": "configured: --workers"}, st)
        ll = daemon.admin({"cmd": "loglevel"})
        check(ll == {"ok": True, "spec": "all:WARN", "source": "override"}, ll)
    finally:
        check(daemon.stop() == 0, "exit status")


if __name__ == "__main__":
    run_tests([test_kill9_respawns, test_short_fork_failure_is_ridden_out,
               test_worker_that_cannot_start_stops_with_1, test_give_up_lets_the_drain_finish,
               test_hung_worker_is_replaced, test_master_stall_kills_no_worker,
               test_wall_clock_step_kills_no_worker,
               test_stalled_worker_blocks_reclamation, test_sigterm_drains_and_exits_0,
               test_second_signal_stops_now, test_repeated_signals_keep_the_deadline,
               test_second_daemon_refused,
               test_diagnosed_config_error_said_once, test_command_line])
