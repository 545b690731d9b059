"""Metrics end to end: a real turngated, TURN driven over loopback by a minimal client in this
file, then the scraped counters must equal what the test did, exactly. Exactness is possible
because every counted event is caused by this test alone (one client, one peer, no
retransmissions: a lost reply fails the test instead of being retried) and every wait for a
counter is bounded and checks equality, never "at least".

Also: a strict Prometheus text-format (0.0.4) check of the whole scrape, the TCP connection
gauge going 1 then 0, the UDP listener counting one socket per worker (STUNner semantics).

/ready before a configuration is serving: turngated refuses to start without a valid
configuration, and the window between the HTTP server starting and the first worker
reporting RUNNING is too short to observe without depending on timing, so it is not tested
here; 503 while draining is tested in test_master_http.py.
"""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (ALLOCATE, A_TRANSPORT, Client, Daemon, check,  # noqa: E402
                           config_yaml, error_code, free_port, peer_socket, prom_check,
                           run_tests, wait_equal)

SECRET = "s3cret"        # config_yaml's
REALM = "test.realm"


def exact_client(port):
    """A UDP TURN client for counting: every request is sent once (a lost reply fails the
    test, a retransmission would make the counters inexact), with FINGERPRINT."""
    return Client(port, secret=SECRET, realm=REALM, tries=1, fingerprint=True, timeout=5.0)


def start(d, workers=2):
    port, mport = free_port(), free_port()
    text = config_yaml(os.path.join(d, "admin.sock"),
                       [("udp", port, "TURN-UDP"), ("tcp", port, "TURN-TCP")], workers=workers,
                       secret=SECRET,
                       extra_admin='  metrics_endpoint: "http://127.0.0.1:%d/metrics"\n' % mport)
    return Daemon(d, text, workers=workers).start(), port, mport


# ---- tests -------------------------------------------------------------------------------

def test_exact_counters(d):
    daemon, port, mport = start(d)
    peer = peer_socket()
    try:
        peer.settimeout(5.0)
        pip, pport = peer.getsockname()
        base = wait_equal(mport, {"turngate_auth_failures_total{reason=\"missing\"}": 0})
        check(base["stunner_listener_connections{name=\"udp\"}"] == 2,
              "UDP listener: one socket per worker")
        c = exact_client(port)
        c.challenge()                                   # auth failure "missing": 1
        bad_mac = 3
        good_key = c.key
        c.key = c.key_of("wrong")
        for _ in range(bad_mac):                        # auth failure "bad_mac": 3
            r = c.request(ALLOCATE, [(A_TRANSPORT, b"\x11\0\0\0")])
            check(error_code(r[3]) == 401, "wrong password not refused")
        c.key = good_key
        rip, rport = c.relayed(c.allocate())[0]
        check(error_code(c.perm(pip)[3]) is None, "CreatePermission for the peer")
        check(error_code(c.perm("10.9.8.7")[3]) == 403, "peer outside the routes must get 403")
        sends = 25
        for i in range(sends):                          # client -> peer: 25 packets
            c.send(pip, pport, b"m%03d" % i)
            data, src = peer.recvfrom(2048)
            check(data == b"m%03d" % i and src == (rip, rport), "relayed payload")
        back = 7
        for i in range(back):                           # peer -> client: 7 packets
            peer.sendto(b"b%d" % i, (rip, rport))
            check(c.recv_data(5.0) == b"b%d" % i, "Data indication payload")
        want = {
            'turngate_auth_failures_total{reason="missing"}': 1,
            'turngate_auth_failures_total{reason="bad_mac"}': bad_mac,
            'turngate_auth_failures_total{reason="stale_nonce"}': 0,
            'turngate_permission_denied_total{listener="udp"}': 1,
            'turngate_permission_denied_total{listener="tcp"}': 0,
            'turngate_peer_packets_total{direction="tx"}': sends,
            'turngate_peer_packets_total{direction="rx"}': back,
            'stunner_cluster_packets_total{name="loopback",direction="tx"}': sends,
            'stunner_cluster_packets_total{name="loopback",direction="rx"}': back,
            # every datagram this client sent, and every one it received
            'stunner_listener_packets_total{name="udp",direction="rx"}': c.sent,
            'stunner_listener_packets_total{name="udp",direction="tx"}': c.sent - sends + back,
            'turngate_allocations_created_total': 1,
            'stunner_allocations_active': 1,
            'stunner_listener_connections{name="udp"}': 2,
            'stunner_listener_connections_total{name="udp"}': 2,
        }
        wait_equal(mport, want)
        c.release()
        want['stunner_listener_packets_total{name="udp",direction="rx"}'] = c.sent
        want['stunner_listener_packets_total{name="udp",direction="tx"}'] = c.sent - sends + back
        want['stunner_allocations_active'] = 0
        want['turngate_allocations_ended_total'] = 1
        # one ended allocation observed (its bucket depends on how long the test ran)
        want['turngate_allocation_lifetime_seconds_count'] = 1
        want['turngate_allocation_lifetime_seconds_bucket{le="+Inf"}'] = 1
        wait_equal(mport, want)
        daemon.stop()
    finally:
        peer.close()
        if daemon.proc.poll() is None:
            daemon.kill()


def test_tcp_connection_gauge(d):
    daemon, port, mport = start(d)
    try:
        wait_equal(mport, {'stunner_listener_connections{name="tcp"}': 0,
                           'stunner_listener_connections_total{name="tcp"}': 0})
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        wait_equal(mport, {'stunner_listener_connections{name="tcp"}': 1,
                           'stunner_listener_connections_total{name="tcp"}': 1})
        s.close()
        wait_equal(mport, {'stunner_listener_connections{name="tcp"}': 0,
                           'stunner_listener_connections_total{name="tcp"}': 1})
        daemon.stop()
    finally:
        if daemon.proc.poll() is None:
            daemon.kill()


def test_checker_rejects(d):
    """The format check itself must fail on broken text (else it proves nothing)."""
    bad = ["a_total 1\n", "# HELP a x\n# TYPE a counter\na 1\n",
           "# HELP g x\n# TYPE g gauge\ng{x=\"a\\q\"} 1\n", "# HELP g x\n# TYPE g gauge\ng 1",
           "# HELP g x\n# TYPE g gauge\ng  1\n", "# HELP g x\ng 1\n",
           "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
           "h_sum 1\nh_count 1\n",
           "# HELP g x\n# TYPE g gauge\ng 1\ng 2\n"]
    for text in bad:
        try:
            prom_check(text)
        except Exception:
            continue
        raise AssertionError("checker accepted %r" % text)
    prom_check("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
               "h_sum 7\nh_count 2\n")


if __name__ == "__main__":
    run_tests([test_checker_rejects, test_exact_counters, test_tcp_connection_gauge])
