#!/usr/bin/python3
"""Interop: coturn's turnutils_uclient in Send-indication mode (-s), with ephemeral TURN REST
credentials minted by uclient itself from the shared secret (-W).

tests/interop/turnutils_uclient.py covers ChannelData with static credentials; this file
covers the other data path: 10 clients x 100 messages as Send indications to
turnutils_peer (an echo peer) through turngated, answered as Data indications, over UDP
and over TCP, then ChannelData over UDP with the same -W credentials. uclient must report
every message echoed and 0 lost. A missing tool is a failure (install coturn).
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tgtest  # noqa: E402

UCLIENT = "/usr/bin/turnutils_uclient"
PEER = "/usr/bin/turnutils_peer"
SECRET = "interop-uclient-secret"
CLIENTS, MESSAGES = 10, 100


def run_uclient(daemon, peer_port, tcp, send_ind):
    label = "%s %s" % ("TCP" if tcp else "UDP", "Send indication" if send_ind else "ChannelData")
    # -c: no RTCP companion allocation; -u with -W: uclient builds "<expiry>:interop" and
    # the HMAC-SHA1 password from the secret.
    args = [UCLIENT, "-m", str(CLIENTS), "-n", str(MESSAGES), "-c", "-W", SECRET,
            "-u", "interop", "-e", "127.0.0.3", "-r", str(peer_port), "-p", str(daemon.port)]
    if send_ind:
        args.append("-s")
    if tcp:
        args.append("-t")
    args.append(daemon.address)
    try:
        out = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             timeout=180).stdout.decode(errors="replace")
    except subprocess.TimeoutExpired:
        raise tgtest.Failure("turnutils_uclient %s timed out after 180 s" % label)
    m = re.search(r"Total lost packets (\d+) \(([\d.]+)%\)", out)
    counts = re.findall(r"tot_send_msgs=(\d+), tot_recv_msgs=(\d+)\s*$", out, re.M)
    if not m or not counts or "Total transmit time is" not in out:
        print(out[-3000:])
        raise tgtest.Failure("could not parse turnutils_uclient output (%s)" % label)
    lost, pct = int(m.group(1)), float(m.group(2))
    sent, recv = int(counts[-1][0]), int(counts[-1][1])
    print("%s: sent %d, echoed %d, lost %d (%.3f%%)" % (label, sent, recv, lost, pct),
          flush=True)
    if sent != CLIENTS * MESSAGES or recv != sent or lost != 0 or pct != 0.0:
        print(out[-3000:])
        raise tgtest.Failure("%s: expected %d sent and echoed with 0 lost, got %d/%d, lost %d"
                             % (label, CLIENTS * MESSAGES, sent, recv, lost))


def run():
    for tool in (UCLIENT, PEER):
        tgtest.need_tool(tool, "coturn")
    peer_port = tgtest.free_port("127.0.0.3")
    peer = subprocess.Popen([PEER, "-p", str(peer_port), "-L", "127.0.0.3"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        d = tgtest.Daemon(["127.0.0.3"], auth=("ephemeral", SECRET))
        with d:
            run_uclient(d, peer_port, tcp=False, send_ind=True)
            run_uclient(d, peer_port, tcp=True, send_ind=True)
            run_uclient(d, peer_port, tcp=False, send_ind=False)
    finally:
        peer.kill()
        peer.wait()
    tgtest.proved("turnutils_uclient with TURN REST credentials from -W: Send/Data "
                  "indications over UDP and TCP and ChannelData over UDP, %d messages each, "
                  "all echoed, 0%% loss" % (CLIENTS * MESSAGES))


if __name__ == "__main__":
    tgtest.main(run)
