#!/usr/bin/env python3
"""The session records' webhook named by DNS (#40: its failures never slow the relay): the
master resolves the webhook's host in a child process, so a DNS server that does not
answer holds nothing but the webhook's own backlog.

The test runs in mount and network namespaces of its own (root): /etc/resolv.conf (the
test's DNS server on 127.0.0.53, a 30 s timeout), /etc/nsswitch.conf and /etc/hosts are
bind-mounted from files of the test. The DNS server holds every query for hook.test
unanswered until the test releases them. While it holds one, the daemon is up, answers
its admin socket and writes records to its file (on main the master itself waited in
getaddrinfo); once released (A 127.0.0.1, an empty AAAA), the webhook gets the records
that waited. Without root it SKIPs (exit 77) and says why.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (CLONE_NEWNET, CLONE_NEWNS, check,  # noqa: E402
                           free_port, relay_range, run_tests_as_root, unshare, wait_for)
from dns_server import DNS_IP, DnsServer, Resolver  # noqa: E402
from test_session_records import (Hook, HookServer, end_some, make_config,  # noqa: E402
                                  records, records_daemon)


def own_namespaces():
    unshare(CLONE_NEWNS | CLONE_NEWNET)
    Resolver(tempfile.mkdtemp(prefix="tg-hookdns-"), timeout=30)
    subprocess.run(["ip", "addr", "add", DNS_IP + "/32", "dev", "lo"], check=True)


def test_webhook_dns_never_blocks(d):
    """A held DNS query for the webhook's host: the daemon runs, answers its admin socket
    and writes the records to its file meanwhile; released, the webhook gets them all."""
    dns = DnsServer({"hook.test": "127.0.0.1"}, hold=True)
    port, hport = free_port(), free_port()
    Hook.got = []
    hook = HookServer(hport)
    text = make_config(d, port, webhook="http://hook.test:%d/hook" % hport, relay=relay_range())
    try:
        with records_daemon(d, text, dns.release, hook.close, wait=False) as (daemon, cs):
            wait_for(lambda: dns.held, "a query for hook.test at the DNS server", timeout=10)
            # the query is held (30 s): the master answers all the same

            def running():
                try:
                    st = json.loads(daemon.admin_raw(b'{"cmd": "status"}\n', timeout=5))
                except (OSError, ValueError):
                    return False
                return st.get("workers", {}).get("running") == 2
            wait_for(running, "the master's answer while the DNS query is held", timeout=10)
            end_some(port, ("dana", "dirk"), cs)
            wait_for(lambda: len(records(d)) == 2, "2 records in the file")
            check(Hook.got == [] and dns.held and not dns.released,
                  "delivered before the answer")
            dns.release()
            wait_for(lambda: len(Hook.got) == 2, "the records at the webhook", timeout=20)
            check(sorted(r["user"] for r in Hook.got) == ["dana", "dirk"], repr(Hook.got))
    finally:
        dns.close()


if __name__ == "__main__":
    run_tests_as_root([test_webhook_dns_never_blocks],
                      "a DNS server of its own (mount and network namespaces)", own_namespaces)
