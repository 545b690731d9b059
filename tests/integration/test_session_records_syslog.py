#!/usr/bin/env python3
"""Session records to syslog (#40): admin.session_records.file: syslog sends one LOG_INFO
message per record through syslog(3), which writes to /dev/log.

The test needs a /dev/log of its own to read: it moves into a mount namespace (root) with a
tmpfs on /dev that holds the few devices a daemon opens (bind mounts of the real ones) and a
datagram socket of the test's at /dev/log. Nothing is mounted or created on the host's /dev.
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (CLONE_NEWNS, check, free_port, relay_range,  # noqa: E402
                           run_tests_as_root, unshare, wait_for)
from test_session_records import (end_some, make_config, metrics_text,  # noqa: E402
                                  records_daemon)

LOG = None   # the test's /dev/log


def own_dev():
    """This process in a mount namespace whose /dev is a tmpfs with the real null, zero,
    full, random, urandom, tty and shm bound in, and our socket at /dev/log."""
    global LOG
    unshare(CLONE_NEWNS)
    old = tempfile.mkdtemp(prefix="tg-olddev-")
    subprocess.run(["mount", "--rbind", "/dev", old], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/dev"], check=True)
    for name in ("null", "zero", "full", "random", "urandom", "tty"):
        if os.path.exists(os.path.join(old, name)):
            open(os.path.join("/dev", name), "w").close()
            subprocess.run(["mount", "--bind", os.path.join(old, name),
                            os.path.join("/dev", name)], check=True)
    for name in ("shm", "pts"):
        if os.path.isdir(os.path.join(old, name)):
            os.mkdir(os.path.join("/dev", name))
            subprocess.run(["mount", "--rbind", os.path.join(old, name),
                            os.path.join("/dev", name)], check=True)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, os.path.join("/dev", name))
    LOG = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    LOG.bind("/dev/log")
    LOG.settimeout(0.2)


def syslog_records(got):
    """Reads what reached /dev/log into got; returns the session records among it."""
    while True:
        try:
            got.append(LOG.recv(65536).decode(errors="replace"))
        except socket.timeout:
            break
    out = []
    for msg in got:
        m = re.match(r"<(\d+)>.*?(\{\"type\":\"session_.*\})\s*$", msg, re.S)
        if m:
            out.append((int(m.group(1)), json.loads(m.group(2))))
    return out


def test_syslog(d):
    """Two allocations end (Refresh 0): two messages at /dev/log, each one JSON record at
    priority LOG_INFO; the metrics count them written."""
    port, mport = free_port(), free_port()
    got = []
    with records_daemon(d, make_config(d, port, out="syslog", metrics=mport,
                                       relay=relay_range())) as (daemon, cs):
        end_some(port, ("sylvia", "sybil"), cs)
        recs = wait_for(lambda: len(syslog_records(got)) >= 2 and syslog_records(got),
                        "2 records at /dev/log")
        time.sleep(0.3)
        recs = syslog_records(got)
        check(sorted(r["user"] for _, r in recs) == ["sybil", "sylvia"], "records %r" % recs)
        for prio, r in recs:
            check(prio & 7 == 6, "priority %d is not LOG_INFO" % prio)
            check(r["reason"] == "refresh0" and r["type"] == "session_end", r)
        check(not os.path.exists(os.path.join(d, "sessions.jsonl")), "a file with syslog")
        text = metrics_text(mport)
        check('turngate_session_records_total{result="written"} 2' in text, text)


if __name__ == "__main__":
    run_tests_as_root([test_syslog], "a /dev/log of its own (a mount namespace)", own_dev)
