"""turngated under a CDS server that behaves as the STUNner operator's (cds_operator.py,
written from the operator's server code): the pod's environment and arguments, a watch
opened before the operator has a config, updates in gorilla's 1024-byte frames, keepalive
pings, the deletion's zero config, and a server restart during which the last config keeps
serving and the client redials every second as stunnerd does."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import Failure, check, free_port, run_tests  # noqa: E402
from cds_operator import OperatorCds  # noqa: E402
from test_cds import CdsDaemon, answers, generation, stop_all, wait_for  # noqa: E402

IDENT = "testns/gw"


def rendered(ports, extra_endpoints=0):
    """A StunnerConfig as the operator's renderer writes it (internal/renderer/*.go):
    $STUNNER_ADDR, offload_engine None, health check disabled (Dataplane
    disableHealthCheck, so parallel tests need no fixed port)."""
    return {
        "version": "v1",
        "admin": {"name": IDENT, "loglevel": "all:INFO", "healthcheck_endpoint": "",
                  "offload_engine": "None"},
        "auth": {"type": "static", "realm": "stunner.l7mp.io",
                 "credentials": {"password": "testpass", "username": "testuser"}},
        "listeners": [{"name": "%s/udp-%d" % (IDENT, p), "protocol": "TURN-UDP",
                       "address": "$STUNNER_ADDR", "port": p,
                       "routes": ["testns/media", "testns/not-rendered"]} for p in ports],
        "clusters": [{"name": "testns/media", "type": "STATIC", "protocol": "UDP",
                      "endpoints": ["127.0.0.0/8"] +
                      ["10.1.%d.%d" % (i >> 8, i & 255) for i in range(extra_endpoints)]}],
    }


def test_operator_cds(d):
    srv = OperatorCds().start()
    # Bound only when a config names them, p3 after a server restart: out of the port-0
    # range, or a client socket of a parallel test could take one first (seen once).
    p1, p2, p3 = (free_port(late=True) for _ in range(3))
    origin = "http://127.0.0.1:%d" % srv.port
    # What the operator's Deployment gives stunnerd (internal/renderer/dataplane_util.go).
    daemon = CdsDaemon(d, ["-w", "--udp-thread-num=1"],
                       {"STUNNER_CONFIG_ORIGIN": origin, "STUNNER_NAMESPACE": "testns",
                        "STUNNER_NAME": "gw", "STUNNER_NODENAME": "node-1",
                        "STUNNER_ADDR": "127.0.0.1"})
    daemon.workers = 1
    daemon.start()
    srv2 = None
    try:
        # The operator has no config yet: the watch is upgraded and waits (no 404, no redial).
        st = wait_for(lambda: srv.watching(), "the watch")[0]
        check(st.target == "/api/v1/configs/testns/gw?node=node-1&watch=true", st.target)
        check(st.headers.get("origin") == origin and
              st.headers.get("host") == "127.0.0.1:%d" % srv.port, st.headers)
        time.sleep(1.5)
        check(srv.upgrades == 1, "redialled a waiting stream: %d" % srv.upgrades)
        check(not answers(p1), "served before any config")

        # The first config, big enough for gorilla to split it into 1024-byte frames.
        srv.update_config({IDENT: rendered([p1], extra_endpoints=200)})
        wait_for(lambda: answers(p1), "the first config")
        g1 = generation(daemon)
        cfg = daemon.admin({"cmd": "config"})["config"]
        check(cfg["listeners"][0]["address"] == "127.0.0.1", cfg["listeners"])
        check(daemon.admin({"cmd": "status"})["unknown_routes"] == 1, "unknown_routes")

        # An update; the same config again is not even sent (Upsert's DeepEqual).
        srv.update_config({IDENT: rendered([p1, p2])})
        wait_for(lambda: answers(p2), "the update")
        check(generation(daemon) == g1 + 1, generation(daemon))

        # stunnerd's keepalive: a ping with "keepalive" every 5 s, answered by the server.
        wait_for(lambda: b"keepalive" in srv.ping_payloads, "a keepalive ping", timeout=15)

        # The Gateway is deleted: the server pushes ZeroConfig(id); stunnerd in watch mode
        # ignores it, so the pod keeps serving through its drain.
        srv.update_config({})
        wait_for(lambda: "ignoring delete configuration update" in daemon.stderr(),
                 "the ignored zero config")
        check(answers(p1) and answers(p2) and generation(daemon) == g1 + 1, "zero config")

        # The server restarts: while it is away the last config keeps serving; it is
        # redialled every second (no backoff), and the re-rendered config is applied.
        port = srv.port
        srv.stop()
        time.sleep(3.5)
        check(answers(p1) and answers(p2), "stopped serving while the CDS was away")
        srv2 = OperatorCds(port)
        srv2.store[IDENT] = rendered([p3])
        t0 = time.monotonic()
        srv2.start()
        wait_for(lambda: srv2.watching(), "the redial", timeout=10)
        check(time.monotonic() - t0 < 2.5, "redial took %.1f s" % (time.monotonic() - t0))
        try:
            wait_for(lambda: answers(p3), "the config after the restart", timeout=60)
        except Failure as e:     # say why (seen once under ASan with the suite in parallel)
            raise Failure("%s; status %r; log tail:\n%s" % (
                e, daemon.admin({"cmd": "status"}).get("last_reload"),
                daemon.stderr()[-3000:]))
        check(not answers(p1) and generation(daemon) == g1 + 2, generation(daemon))
        check(daemon.admin({"cmd": "status"})["last_reload"]["ok"], "last reload")
    finally:
        stop_all(daemon, srv, srv2)


if __name__ == "__main__":
    run_tests([test_operator_cds])
