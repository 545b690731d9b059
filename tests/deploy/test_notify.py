#!/usr/bin/python3
"""tests/deploy/test_notify.py: checks turngated keeps the sd_notify contract turngate.service relies on.

The unit says Type=notify, NotifyAccess=main, WatchdogSec=, ExecReload=turngatectl reload
(the master's reload path, the same as SIGHUP's) and KillMode=mixed. No systemd runs here, so this test plays systemd's part: it binds the
NOTIFY_SOCKET datagram socket (with SO_PASSCRED, to see who sends), starts the real daemon
on a loopback port, and checks that
- READY=1 comes from the main (master) pid, and only once the listener answers STUN;
- WATCHDOG=1 keeps coming while WATCHDOG_USEC is set;
- SIGHUP gives RELOADING=1 then READY=1;
- SIGTERM gives STOPPING=1 and a clean exit after the drain;
- every notification comes from the main pid (NotifyAccess=main would drop others).
Timeouts are generous upper bounds, never expected durations.
"""
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness_admin import free_port, stun_binding_udp  # noqa: E402

BUILD = os.environ.get("top_builddir", ".")
DAEMON = os.path.join(BUILD, "turngated")
SO_PASSCRED = getattr(socket, "SO_PASSCRED", 16)
SCM_CREDENTIALS = getattr(socket, "SCM_CREDENTIALS", 2)


class Notify:
    """The receiving end of NOTIFY_SOCKET: messages with their sender pid."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_PASSCRED, 1)
        self.seen = []  # (pid, {key: value})

    def wait_for(self, key, value, timeout):
        """Returns the first message after the ones seen so far that has key=value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
            except socket.timeout:
                break
            pid = None
            for level, typ, cdata in anc:
                if level == socket.SOL_SOCKET and typ == SCM_CREDENTIALS:
                    pid = struct.unpack("iII", cdata[:12])[0]
            fields = dict(line.split("=", 1) for line in data.decode().splitlines()
                          if "=" in line)
            self.seen.append((pid, fields))
            if fields.get(key) == value:
                return pid, fields
        raise AssertionError(f"no {key}={value} within {timeout} s; got {self.seen}")


def built_with_libsystemd():
    try:
        with open(os.path.join(BUILD, "config.h"), encoding="utf-8") as fh:
            return any(line.startswith("#define HAVE_LIBSYSTEMD 1") for line in fh)
    except OSError:
        return True  # unknown: do not add a misleading hint


def main():
    if not os.access(DAEMON, os.X_OK):
        print(f"FAIL: {DAEMON} is not built")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        cfg = os.path.join(tmp, "turngate.yaml")
        with open(cfg, "w", encoding="utf-8") as fh:
            fh.write(f"""version: v1
admin:
  name: notify-test
  workers: 1
  drain_timeout: 2
  admin_socket: {tmp}/admin.sock
  healthcheck_endpoint: ""
auth:
  type: ephemeral
  credentials:
    secret: notify-test-secret
listeners:
  - name: udp
    protocol: TURN-UDP
    address: 127.0.0.1
    port: {port}
    routes: [local]
clusters:
  - name: local
    type: STATIC
    endpoints: ["127.0.0.1"]
""")
        notify = Notify(os.path.join(tmp, "notify.sock"))
        env = dict(os.environ, NOTIFY_SOCKET=os.path.join(tmp, "notify.sock"),
                   WATCHDOG_USEC="1000000")
        env.pop("WATCHDOG_PID", None)
        log = open(os.path.join(tmp, "daemon.log"), "w+", encoding="utf-8")
        proc = subprocess.Popen([DAEMON, "-c", cfg], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            pid, _ = notify.wait_for("READY", "1", 30)
            assert pid == proc.pid, f"READY=1 from pid {pid}, not the main pid {proc.pid}"
            assert stun_binding_udp(port, timeout=5.0, tries=1) is not None, "READY=1 sent but the listener does not answer STUN"
            notify.wait_for("WATCHDOG", "1", 10)
            notify.wait_for("WATCHDOG", "1", 10)  # and again: it keeps coming

            proc.send_signal(signal.SIGHUP)
            notify.wait_for("RELOADING", "1", 15)
            notify.wait_for("READY", "1", 15)

            proc.send_signal(signal.SIGTERM)
            notify.wait_for("STOPPING", "1", 15)
            # drain_timeout 2 s + the master's 5 s worker stop grace, generously
            rc = proc.wait(timeout=60)
            assert rc == 0, f"exit status {rc} after SIGTERM"
            others = [(p, f) for p, f in notify.seen if p != proc.pid]
            assert not others, f"notifications from other pids (dropped under " \
                               f"NotifyAccess=main): {others}"
        except AssertionError as e:
            log.seek(0)
            print(log.read())
            print(f"FAIL: {e}")
            if not built_with_libsystemd():
                print("FAIL: this turngated was configured without libsystemd, so it sends no "
                      "notifications and turngate.service (Type=notify) would time out at start")
            return 1
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            log.close()
    print(f"ok: {len(notify.seen)} notifications, all from the main pid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
