#!/usr/bin/python3
"""Writes deploy/grafana/turngate.json, the Grafana dashboard, from the panel list below.

    /usr/bin/python3 deploy/grafana/dashboard.py > deploy/grafana/turngate.json

The JSON is what operators import; this file is its source (a panel is one line here, forty
there). tests/integration/test_dashboard.py checks that the committed JSON is this script's
output and runs every query against a real Prometheus scraping a real turngated.

Panels that STUNner also exports (allocations, listener and cluster traffic, connections)
use STUNner's metric names, so the same panels work against stunnerd. The `turngate:*`
series are recording rules of deploy/prometheus/turngate-rules.yaml, shared with its alerts.
"""
import json
import sys

DS = {"type": "prometheus", "uid": "${datasource}"}
INST = 'instance=~"$instance"'
LST = 'instance=~"$instance", name=~"$listener"'
RATE = "[$__rate_interval]"

# (row title, [panel]); a panel is (type, title, unit, description, [(expr, legend)]).
ROWS = [
    ("Allocations", [
        ("stat", "Active allocations", "short",
         "All listeners, the selected instances (STUNner: stunner_allocations_active).",
         [("sum(stunner_allocations_active{%s})" % INST, "active")]),
        ("timeseries", "Active allocations per listener", "short",
         "Allocations created through each listener and still alive.",
         [("sum by (name) (turngate_listener_allocations_active{%s})" % LST, "{{name}}"),
          ("sum by (instance) (stunner_allocations_active{%s})" % INST,
           "{{instance}} total")]),
        ("timeseries", "Allocation rate", "ops",
         "Allocations created per second by listener, and ended (expired, deleted, dropped).",
         [("sum by (name) (rate(turngate_listener_allocations_created_total{%s}%s))"
           % (LST, RATE), "{{name}} created"),
          ("sum(rate(turngate_allocations_ended_total{%s}%s))" % (INST, RATE), "ended")]),
        ("timeseries", "Allocation lifetime", "s",
         "Quantiles of the lifetime of allocations that ended (whole seconds; buckets "
         "10 s .. 1 h).",
         [("histogram_quantile(%s, sum by (le) (rate(turngate_allocation_lifetime_seconds_"
           "bucket{%s}%s)))" % (q, INST, RATE), "p%s" % q[2:].ljust(2, "0"))
          for q in ("0.5", "0.9", "0.99")]),
        ("heatmap", "Allocation lifetime distribution", "short",
         "Ended allocations per lifetime bucket.",
         [("sum by (le) (increase(turngate_allocation_lifetime_seconds_bucket{%s}%s))"
           % (INST, RATE), "{{le}}")]),
        ("timeseries", "Capacity used", "percentunit",
         "Active allocations over the listener's relay ports (alert at 80%) and over the "
         "allocation limit, limits.total_quota (alert at 90%).",
         [("turngate:relay_ports_used:ratio{%s}" % LST, "{{instance}} {{name}} relay ports"),
          ("turngate:allocations_limit_used:ratio{%s}" % INST, "{{instance}} allocation limit")]),
    ]),
    ("Traffic", [
        ("timeseries", "Listener packets", "pps",
         "Packets from (rx) and to (tx) clients at each listener.",
         [("sum by (name, direction) (rate(stunner_listener_packets_total{%s}%s))"
           % (LST, RATE), "{{name}} {{direction}}")]),
        ("timeseries", "Listener bytes", "Bps",
         "Bytes from (rx) and to (tx) clients at each listener.",
         [("sum by (name, direction) (rate(stunner_listener_bytes_total{%s}%s))"
           % (LST, RATE), "{{name}} {{direction}}")]),
        ("timeseries", "Cluster packets", "pps",
         "Packets from (rx) and to (tx) peers on relay sockets, by the cluster that admitted "
         "the peer.",
         [("sum by (name, direction) (rate(stunner_cluster_packets_total{%s}%s))"
           % (INST, RATE), "{{name}} {{direction}}")]),
        ("timeseries", "Cluster bytes", "Bps",
         "Bytes from (rx) and to (tx) peers on relay sockets, by cluster.",
         [("sum by (name, direction) (rate(stunner_cluster_bytes_total{%s}%s))"
           % (INST, RATE), "{{name}} {{direction}}")]),
        ("timeseries", "Listener connections", "short",
         "Open client connections (TCP/TLS: accepted connections; UDP/DTLS: one socket per "
         "live worker, as STUNner counts them).",
         [("sum by (name) (stunner_listener_connections{%s})" % LST, "{{name}} open"),
          ("sum by (name) (rate(stunner_listener_connections_total{%s}%s))" % (LST, RATE),
           "{{name}} opened/s")]),
        ("timeseries", "Kernel fast path", "pps",
         "Datagrams of bound channels relayed by the eBPF programs (admin.offload_engine), "
         "by direction; they are in the listener and cluster panels too. 0 when the fast "
         "path is off.",
         [("sum by (direction) (rate(turngate_offload_packets_total{%s}%s))" % (INST, RATE),
           "{{direction}}")]),
        ("timeseries", "Kernel fast path entries", "short",
         "Bound channels entered in the fast path's maps.",
         [("sum by (instance) (turngate_offload_entries{%s})" % INST, "{{instance}}")]),
        ("timeseries", "TCP relay connects", "ops",
         "RFC 6062 Connect requests per second by result (ok, denied by the routes, failed, "
         "timeout, exists, limit).",
         [("sum by (result) (rate(turngate_tcp_connects_total{%s}%s))" % (INST, RATE),
           "{{result}}")]),
        ("timeseries", "TCP relay peer connections", "short",
         "RFC 6062 peer connections (connecting, waiting for ConnectionBind, relaying).",
         [("sum by (instance) (turngate_tcp_peer_connections{%s})" % INST, "{{instance}}")]),
        ("timeseries", "Bandwidth drops", "pps",
         "Datagrams dropped by a bandwidth limit (limits.allocation_bps, limits.user_bps, "
         "listeners[].max_bps), by listener; `turngatectl top` names the allocations.",
         [("sum by (name) (rate(turngate_listener_bandwidth_drops_total{%s}%s))"
           % (LST, RATE), "{{name}}")]),
    ]),
    ("Security and errors", [
        ("timeseries", "Authentication failures", "ops",
         "By reason, per second over 5 min. `missing` is the 401 challenge every client gets "
         "first; `bad_mac` rising is a secret rotated on one side only.",
         [("sum by (reason) (turngate:auth_failures:rate5m{%s})" % INST, "{{reason}}")]),
        ("timeseries", "Peer permissions", "ops",
         "Denied by the route allowlist (by the client's listener) and granted (by cluster), "
         "per second.",
         [("sum by (listener) (turngate:permission_denied:rate5m{%s, listener=~\"$listener\"})"
           % INST, "{{listener}} denied"),
          ("sum by (name) (rate(turngate_cluster_permissions_granted_total{%s}%s))"
           % (INST, RATE), "{{name}} granted")]),
        ("timeseries", "Quota and bandwidth rejections", "ops",
         "Requests refused by the per-user quota, the total allocation limit, or a bandwidth "
         "limit.",
         [("sum by (kind) (rate(turngate_quota_rejections_total{%s}%s))" % (INST, RATE),
           "{{kind}}")]),
        ("timeseries", "Unauthenticated responses dropped", "ops",
         "Error responses to unauthenticated UDP requests not sent (per-prefix limit: "
         "reflection protection), per second over 5 min.",
         [("sum by (instance) (turngate:unauth_responses_dropped:rate5m{%s})" % INST,
           "{{instance}}")]),
        ("timeseries", "Errors by kind", "ops",
         "Protocol and I/O errors (malformed, 437 allocation mismatch, relay bind, send, "
         "recv, TLS, ...).",
         [("sum by (kind) (rate(turngate_errors_total{%s}%s))" % (INST, RATE), "{{kind}}")]),
        ("timeseries", "TLS and DTLS", "ops",
         "Handshakes completed, DTLS cookie exchanges, handshakes refused (too many in "
         "progress) and connections closed by a deadline, per second; DTLS associations "
         "open (a count).",
         [("sum(rate(turngate_tls_handshakes_total{%s}%s))" % (INST, RATE), "handshakes"),
          ("sum(rate(turngate_dtls_cookie_exchanges_total{%s}%s))" % (INST, RATE),
           "DTLS cookies"),
          ("sum(rate(turngate_handshakes_refused_total{%s}%s))" % (INST, RATE), "refused"),
          ("sum(rate(turngate_connection_timeouts_total{%s}%s))" % (INST, RATE), "timeouts"),
          ("sum by (listener) (turngate_dtls_associations{%s, listener=~\"$listener\"})"
           % INST, "{{listener}} associations")]),
    ]),
    ("Workers and configuration", [
        ("timeseries", "Worker restarts", "short",
         "Workers respawned after dying or hanging, and workers running.",
         [("sum by (instance) (increase(turngate_worker_restarts_total{%s}%s))" % (INST, RATE),
           "{{instance}} restarts"),
          ("sum by (instance) (turngate_worker_up{%s})" % INST, "{{instance}} running")]),
        ("timeseries", "Packets per worker", "pps",
         "Packets handled by each worker slot (clients and peers); an uneven split is "
         "SO_REUSEPORT hashing few clients.",
         [("sum by (instance, worker, direction) (rate(turngate_worker_packets_total{%s}%s))"
           % (INST, RATE), "{{instance}} worker {{worker}} {{direction}}")]),
        ("timeseries", "Worker CPU", "percentunit",
         "CPU time of each worker process (resets when a worker is respawned).",
         [("sum by (instance, worker) (rate(turngate_worker_cpu_seconds_total{%s}%s))"
           % (INST, RATE), "{{instance}} worker {{worker}}")]),
        ("timeseries", "Reloads", "short",
         "Configuration reloads by result, and whether the latest one succeeded (1).",
         [("sum by (result) (increase(turngate_reloads_total{%s}%s))" % (INST, RATE),
           "{{result}}"),
          ("turngate_config_last_reload_successful{%s}" % INST, "{{instance}} last ok")]),
        ("timeseries", "Configuration generation", "none",
         "Generation of the configuration snapshot being served; it steps at every "
         "successful reload.",
         [("turngate_config_generation{%s}" % INST, "{{instance}}")]),
        ("timeseries", "Ready and draining", "short",
         "Ready (1: serving, as /ready) and draining (1: refusing new allocations, "
         "`turngatectl drain`).",
         [("turngate:ready{%s}" % INST, "{{instance}} ready"),
          ("turngate_draining{%s}" % INST, "{{instance}} draining")]),
    ]),
]



def variables():
    def query(name, label, metric):
        return {"name": name, "label": name, "type": "query", "datasource": DS,
                "query": {"query": "label_values(%s, %s)" % (metric, label),
                          "refId": "PrometheusVariableQueryEditor-VariableQuery"},
                "definition": "label_values(%s, %s)" % (metric, label),
                "refresh": 2, "multi": True, "includeAll": True, "allValue": ".*",
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                "sort": 1}
    return [{"name": "datasource", "label": "Data source", "type": "datasource",
             "query": "prometheus", "current": {}, "hide": 0},
            query("instance", "instance", "stunner_allocations_active"),
            query("listener", "name", 'stunner_listener_packets_total{instance=~"$instance"}')]


def panel(pid, kind, title, unit, desc, targets, pos):
    p = {"id": pid, "type": kind, "title": title, "description": desc, "datasource": DS,
         "gridPos": pos, "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
         "targets": [{"datasource": DS, "expr": e, "legendFormat": lg, "refId": chr(65 + i),
                      **({"format": "heatmap"} if kind == "heatmap" else {})}
                     for i, (e, lg) in enumerate(targets)]}
    if kind == "timeseries":
        p["options"] = {"legend": {"displayMode": "list", "placement": "bottom",
                                   "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}}
    elif kind == "heatmap":
        p["options"] = {"calculate": False, "yAxis": {"unit": "s"},
                        "cellGap": 1, "color": {"scheme": "Blues", "mode": "scheme"}}
    elif kind == "stat":
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                          "values": False}, "graphMode": "area"}
    return p


def dashboard():
    panels, pid, y = [], 1, 0
    for title, row in ROWS:
        panels.append({"id": pid, "type": "row", "title": title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid, y = pid + 1, y + 1
        for i, spec in enumerate(row):
            pos = {"h": 8, "w": 8, "x": 8 * (i % 3), "y": y + 8 * (i // 3)}
            panels.append(panel(pid, *spec, pos))
            pid += 1
        y += 8 * ((len(row) + 2) // 3)
    return {
        "title": "turngate", "uid": "turngate", "description":
        "TURN relay: allocations, traffic, authentication, workers, reloads "
        "(turngate's deploy/grafana/turngate.json).",
        "tags": ["turngate", "stunner", "turn"], "editable": True, "graphTooltip": 1,
        "schemaVersion": 38, "version": 1, "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"}, "timezone": "",
        "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana",
                                                               "uid": "-- Grafana --"},
                                  "enable": True, "hide": True, "name": "Annotations & Alerts",
                                  "type": "dashboard"}]},
        "templating": {"list": variables()},
        "panels": panels,
    }


def render():
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
