#!/usr/bin/python3
"""tests/deploy/test_manifests.py: YAML-parses the Kubernetes manifests and checks them against a hand schema and each other.

No kubectl, kubeconform or cluster is available offline, so this is what is checked:
- every file parses (PyYAML, python3-yaml) and every document has apiVersion/kind/metadata.name;
- a closed schema per kind (required keys, types, enums; unknown keys are errors, which
  catches misspelt fields that the API server would silently drop);
- cross-references: selectors match the pod template labels, Service targetPorts and probe
  ports name container ports of the right protocol, volumes and ConfigMap/Secret keys exist,
  the HPA targets the Deployment, the kustomization lists every manifest;
- turngate specifics: STUNNER_ADDR from status.podIP, the grace period covers the drain,
  the config in the ConfigMap passes `turngated -t`, the mixed-protocol annotation is set
  when the Service carries UDP and TCP, the image's user and ports match the Dockerfile;
- deploy/kubernetes-statefulset (an overlay of deploy/kubernetes: its documents with the
  base's less those its patches delete) the same way, and: the StatefulSet's serviceName is
  a headless Service that keeps not-ready (draining) pods in DNS; the container's command
  line, run per pod name with a stand-in for turngated, gives each pod a relay port slice
  of its own, which admin.siblings lists against that pod's DNS name, for every replica;
  every listener has relay_address_mask and its routes admit the mask at every slice; no
  autoscaler; turngated -t accepts the config through each pod's command line;
- the checker itself rejects a set of broken variants of each set (so it can fail);
- deploy/stunner/dataplane.yaml, a Dataplane of STUNner's operator (a CRD: no Kubernetes API
  schema has it): a closed schema of its spec (the field names of the operator's
  api/v1/dataplane_types.go), the operator's `stunnerd` command, which the Dockerfile links
  to turngated, `-w` and a worker count, no STUNNER_* variable of the operator's own, the
  state directory on /dev/shm (a Dataplane has no volumes) holding the admin socket, the
  image's uid, a grace period that covers the drain; broken variants are rejected;
- where kubectl is installed, `kubectl kustomize` (offline) renders the set. Applying or
  server-side validation needs an API server, which is not available.
"""
import copy
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

SRC = os.environ.get("top_srcdir") or os.path.join(os.path.dirname(__file__), "..", "..")
BUILD = os.environ.get("top_builddir") or SRC
KDIR = os.path.join(SRC, "deploy", "kubernetes")
SDIR = os.path.join(SRC, "deploy", "kubernetes-statefulset")
DOCKERFILE = os.path.join(SRC, "deploy", "container", "Dockerfile")
# The image's ENTRYPOINT, which a container's `command` may wrap (the StatefulSet's does).
IMAGE_DAEMON = "/usr/local/bin/turngated"
WORKLOADS = ("Deployment", "StatefulSet")

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
IANA_SVC = re.compile(r"^(?!.*--)[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# ---- schema language -------------------------------------------------------------------
# A schema is: a type (str, int, bool), a set (enum of allowed values), a list of one schema
# (every item), a dict {key: schema} with "key!" marking required keys (closed: other keys
# are errors), ANY, or MAP (a mapping of strings to strings).
ANY = object()
MAP = object()
INT_OR_STR = (int, str)


def check(schema, value, path, errors):
    if schema is ANY:
        return
    if schema is MAP:
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            errors.append(f"{path}: expected a map of strings to strings")
        return
    if isinstance(schema, set):
        if value not in schema:
            errors.append(f"{path}: {value!r} is not one of {sorted(schema)}")
        return
    if isinstance(schema, tuple) or isinstance(schema, type):
        types = schema if isinstance(schema, tuple) else (schema,)
        # bool is an int in Python; a YAML true must not pass as a port number.
        if isinstance(value, bool) and bool not in types:
            errors.append(f"{path}: expected {'/'.join(t.__name__ for t in types)}, got a boolean")
        elif not isinstance(value, types):
            errors.append(f"{path}: expected {'/'.join(t.__name__ for t in types)}, "
                          f"got {type(value).__name__}")
        return
    if isinstance(schema, list):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list")
            return
        for i, item in enumerate(value):
            check(schema[0], item, f"{path}[{i}]", errors)
        return
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a mapping")
            return
        keys = {k.rstrip("!"): k.endswith("!") for k in schema}
        for k, required in keys.items():
            if required and k not in value:
                errors.append(f"{path}.{k}: missing")
        for k, v in value.items():
            if k not in keys:
                errors.append(f"{path}.{k}: unknown field")
                continue
            sub = schema[k + "!"] if keys[k] else schema[k]
            check(sub, v, f"{path}.{k}", errors)
        return
    raise AssertionError(f"bad schema at {path}")


METADATA = {"name!": str, "namespace": str, "labels": MAP, "annotations": MAP}
LABEL_SELECTOR = {"matchLabels!": MAP}
PROBE = {
    "httpGet!": {"path!": str, "port!": INT_OR_STR, "scheme": {"HTTP", "HTTPS"}},
    "initialDelaySeconds": int, "periodSeconds": int, "timeoutSeconds": int,
    "failureThreshold": int, "successThreshold": int,
}
CONTAINER = {
    "name!": str, "image!": str, "imagePullPolicy": {"Always", "IfNotPresent", "Never"},
    "command": [str], "args": [str],
    "env": [{"name!": str, "value": str, "valueFrom": {
        "fieldRef": {"fieldPath!": str, "apiVersion": str},
        "secretKeyRef": {"name!": str, "key!": str, "optional": bool},
        "configMapKeyRef": {"name!": str, "key!": str, "optional": bool}}}],
    "ports": [{"name": str, "containerPort!": int, "protocol": {"TCP", "UDP", "SCTP"}}],
    "livenessProbe": PROBE, "readinessProbe": PROBE, "startupProbe": PROBE,
    "resources": {"requests": {"cpu": INT_OR_STR, "memory": str},
                  "limits": {"cpu": INT_OR_STR, "memory": str}},
    "securityContext": {
        "allowPrivilegeEscalation": bool, "readOnlyRootFilesystem": bool,
        "runAsNonRoot": bool, "runAsUser": int, "runAsGroup": int, "privileged": bool,
        "capabilities": {"drop": [str], "add": [str]}},
    "volumeMounts": [{"name!": str, "mountPath!": str, "readOnly": bool, "subPath": str}],
}
KEY_TO_PATH = [{"key!": str, "path!": str, "mode": int}]
VOLUME = {
    "name!": str,
    "configMap": {"name!": str, "items": KEY_TO_PATH, "defaultMode": int},
    "secret": {"secretName!": str, "items": KEY_TO_PATH, "defaultMode": int},
    "emptyDir": {"medium": {"", "Memory"}, "sizeLimit": str},
    "projected": {"defaultMode": int, "sources!": [{
        "configMap": {"name!": str, "items": KEY_TO_PATH, "optional": bool},
        "secret": {"name!": str, "items": KEY_TO_PATH, "optional": bool}}]},
}
POD_SPEC = {
    "serviceAccountName": str, "automountServiceAccountToken": bool,
    "terminationGracePeriodSeconds": int,
    "securityContext": {"runAsNonRoot": bool, "runAsUser": int, "runAsGroup": int,
                        "fsGroup": int,
                        "seccompProfile": {"type!": {"RuntimeDefault", "Localhost",
                                                     "Unconfined"}},
                        "sysctls": [{"name!": str, "value!": str}]},
    "topologySpreadConstraints": [{
        "maxSkew!": int, "topologyKey!": str,
        "whenUnsatisfiable!": {"DoNotSchedule", "ScheduleAnyway"},
        "labelSelector": LABEL_SELECTOR}],
    "containers!": [CONTAINER],
    "volumes": [VOLUME],
}
TEMPLATE = {"metadata!": {"labels!": MAP, "annotations": MAP}, "spec!": POD_SPEC}
SCHEMAS = {
    ("v1", "ServiceAccount"): {"apiVersion!": str, "kind!": str, "metadata!": METADATA,
                               "automountServiceAccountToken": bool},
    ("v1", "ConfigMap"): {"apiVersion!": str, "kind!": str, "metadata!": METADATA,
                          "data!": MAP},
    ("v1", "Secret"): {"apiVersion!": str, "kind!": str, "metadata!": METADATA,
                       "type": str, "stringData": MAP, "data": MAP},
    ("apps/v1", "Deployment"): {"apiVersion!": str, "kind!": str, "metadata!": METADATA,
                                "spec!": {
        "replicas": int, "selector!": LABEL_SELECTOR,
        "strategy": {"type!": {"RollingUpdate", "Recreate"},
                     "rollingUpdate": {"maxSurge": INT_OR_STR, "maxUnavailable": INT_OR_STR}},
        "template!": TEMPLATE}},
    ("apps/v1", "StatefulSet"): {"apiVersion!": str, "kind!": str, "metadata!": METADATA,
                                 "spec!": {
        "serviceName!": str, "replicas": int, "selector!": LABEL_SELECTOR,
        "podManagementPolicy": {"OrderedReady", "Parallel"},
        "updateStrategy": {"type!": {"RollingUpdate", "OnDelete"},
                           "rollingUpdate": {"partition": int, "maxUnavailable": INT_OR_STR}},
        "template!": TEMPLATE}},
    ("v1", "Service"): {"apiVersion!": str, "kind!": str, "metadata!": METADATA, "spec!": {
        "type!": {"ClusterIP", "NodePort", "LoadBalancer"}, "selector!": MAP,
        "clusterIP": str, "publishNotReadyAddresses": bool,
        "sessionAffinity": {"None", "ClientIP"},
        "sessionAffinityConfig": {"clientIP!": {"timeoutSeconds!": int}},
        "externalTrafficPolicy": {"Cluster", "Local"}, "loadBalancerClass": str,
        "ports!": [{"name!": str, "port!": int, "targetPort": INT_OR_STR,
                    "protocol!": {"TCP", "UDP"}, "nodePort": int}]}},
    ("policy/v1", "PodDisruptionBudget"): {"apiVersion!": str, "kind!": str,
                                           "metadata!": METADATA, "spec!": {
        "minAvailable": INT_OR_STR, "maxUnavailable": INT_OR_STR,
        "selector!": LABEL_SELECTOR}},
    ("autoscaling/v2", "HorizontalPodAutoscaler"): {"apiVersion!": str, "kind!": str,
                                                    "metadata!": METADATA, "spec!": {
        "scaleTargetRef!": {"apiVersion!": str, "kind!": str, "name!": str},
        "minReplicas": int, "maxReplicas!": int,
        "metrics": [{"type!": {"Resource"}, "resource!": {
            "name!": {"cpu", "memory"},
            "target!": {"type!": {"Utilization", "AverageValue"},
                        "averageUtilization": int, "averageValue": str}}}],
        "behavior": {d: {"stabilizationWindowSeconds": int,
                         "selectPolicy": {"Max", "Min", "Disabled"},
                         "policies": [{"type!": {"Pods", "Percent"}, "value!": int,
                                       "periodSeconds!": int}]}
                     for d in ("scaleUp", "scaleDown")}}},
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"): {
        "apiVersion!": str, "kind!": str, "namespace": str,
        "labels": [{"pairs!": MAP, "includeSelectors": bool}], "resources!": [str],
        "patches": [{"patch!": str}]},
}

# ---- cross-checks ----------------------------------------------------------------------


def by_kind(docs, kind):
    return [d for _, d in docs if isinstance(d, dict) and d.get("kind") == kind]


def one(docs, kind, errors):
    found = by_kind(docs, kind)
    if len(found) != 1:
        errors.append(f"expected exactly one {kind}, found {len(found)}")
        return None
    return found[0]


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_names(docs, errors):
    for f, d in docs:
        name = d.get("metadata", {}).get("name", "")
        if d.get("kind") != "Kustomization" and not DNS1123.match(str(name)):
            errors.append(f"{f}: metadata.name {name!r} is not a DNS-1123 name")


def container_ports(dep):
    c = dep["spec"]["template"]["spec"]["containers"][0]
    return c, c.get("ports", [])


def find_port(ports, ref, protocol="TCP"):
    """The container port a probe/targetPort refers to (by name or number), or None."""
    for p in ports:
        proto = p.get("protocol", "TCP")
        if (isinstance(ref, str) and p.get("name") == ref) or \
                (isinstance(ref, int) and p.get("containerPort") == ref and proto == protocol):
            return p
    return None


def check_deployment(docs, dep, errors):
    wl = dep["kind"]
    spec = dep["spec"]
    tmpl = spec["template"]
    pod = tmpl["spec"]
    if not selects(spec["selector"]["matchLabels"], tmpl["metadata"]["labels"]):
        errors.append(f"{wl}: spec.selector.matchLabels does not match the template labels")
    c, ports = container_ports(dep)
    names = [p["name"] for p in ports if "name" in p]
    if len(names) != len(set(names)):
        errors.append(f"{wl}: duplicate container port names")
    for n in names:
        if len(n) > 15 or not IANA_SVC.match(n) or not re.search("[a-z]", n):
            errors.append(f"{wl}: port name {n!r} is not a valid IANA service name")
    for p in ports:
        if not 1 <= p["containerPort"] <= 65535:
            errors.append(f"{wl}: containerPort {p['containerPort']} out of range")
    for probe in ("livenessProbe", "readinessProbe"):
        pr = c.get(probe)
        if pr is None:
            errors.append(f"{wl}: container has no {probe}")
            continue
        target = find_port(ports, pr["httpGet"]["port"])
        if target is None or target.get("protocol", "TCP") != "TCP":
            errors.append(f"{wl}: {probe} port {pr['httpGet']['port']!r} is not a "
                          "TCP container port")
    if c.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/live":
        errors.append(f"{wl}: livenessProbe must GET /live")
    if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/ready":
        errors.append(f"{wl}: readinessProbe must GET /ready")
    env = {e["name"]: e for e in c.get("env", [])}
    addr = env.get("STUNNER_ADDR", {}).get("valueFrom", {}).get("fieldRef", {})
    if addr.get("fieldPath") != "status.podIP":
        errors.append(f"{wl}: STUNNER_ADDR must come from fieldRef status.podIP")
    # security
    psc = pod.get("securityContext", {})
    csc = c.get("securityContext", {})
    if not (psc.get("runAsNonRoot") or csc.get("runAsNonRoot")):
        errors.append(f"{wl}: runAsNonRoot is not set")
    if (csc.get("runAsUser") or psc.get("runAsUser") or 0) == 0:
        errors.append(f"{wl}: runAsUser must be a non-zero uid")
    if csc.get("readOnlyRootFilesystem") is not True:
        errors.append(f"{wl}: readOnlyRootFilesystem must be true")
    if csc.get("allowPrivilegeEscalation") is not False:
        errors.append(f"{wl}: allowPrivilegeEscalation must be false")
    caps = csc.get("capabilities", {})
    if caps.get("drop") != ["ALL"]:
        errors.append(f"{wl}: capabilities.drop must be [ALL]")
    if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
        errors.append(f"{wl}: capabilities.add may only hold NET_BIND_SERVICE")
    # service account
    sa_name = pod.get("serviceAccountName")
    sas = [d for d in by_kind(docs, "ServiceAccount") if d["metadata"]["name"] == sa_name]
    if not sas:
        errors.append(f"{wl}: serviceAccountName {sa_name!r} has no ServiceAccount")
    elif pod.get("automountServiceAccountToken",
                 sas[0].get("automountServiceAccountToken", True)) is not False:
        # the pod's setting wins over the service account's; the default is to mount
        errors.append(f"{wl}: the service account token is automounted")
    check_volumes(docs, wl, pod, c, errors)


def check_volumes(docs, wl, pod, c, errors):
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        if m["name"] not in vols:
            errors.append(f"{wl}: volumeMount {m['name']!r} has no volume")
        if "subPath" in m:
            errors.append(f"{wl}: volumeMount {m['name']!r} uses subPath, which never "
                          "receives ConfigMap/Secret updates")
    cms = {d["metadata"]["name"]: d for d in by_kind(docs, "ConfigMap")}
    secs = {d["metadata"]["name"]: d for d in by_kind(docs, "Secret")}
    for v in vols.values():
        sources = v.get("projected", {}).get("sources", [])
        sources += [{"configMap": v["configMap"]}] if "configMap" in v else []
        sources += [{"secret": dict(v["secret"], name=v["secret"]["secretName"])}] \
            if "secret" in v else []
        for s in sources:
            for kind, table, field in (("configMap", cms, "data"),
                                       ("secret", secs, "stringData")):
                if kind not in s:
                    continue
                ref = s[kind]
                obj = table.get(ref["name"])
                if obj is None:
                    errors.append(f"{wl}: volume {v['name']!r} references missing "
                                  f"{kind} {ref['name']!r}")
                    continue
                keys = set(obj.get(field, {})) | set(obj.get("data", {}))
                for item in ref.get("items", []):
                    if item["key"] not in keys:
                        errors.append(f"{wl}: {kind} {ref['name']!r} has no key "
                                      f"{item['key']!r}")


def config_of(docs, errors):
    """The turngate config from the ConfigMap, parsed, and its text."""
    for cm in by_kind(docs, "ConfigMap"):
        text = cm.get("data", {}).get("turngate.yaml")
        if text is not None:
            try:
                return yaml.safe_load(text), text
            except yaml.YAMLError as e:
                errors.append(f"ConfigMap turngate.yaml does not parse: {e}")
                return None, None
    errors.append("no ConfigMap carries turngate.yaml")
    return None, None


def check_turngate(docs, dep, errors):
    wl = dep["kind"]
    cfg, _ = config_of(docs, errors)
    if cfg is None:
        return
    pod = dep["spec"]["template"]["spec"]
    c, ports = container_ports(dep)
    drain = cfg.get("admin", {}).get("drain_timeout", 30)
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if grace < drain + 15:
        errors.append(f"{wl}: terminationGracePeriodSeconds {grace} < drain_timeout "
                      f"{drain} + 15: pods would be killed mid-drain")
    for i, lst in enumerate(cfg.get("listeners", [])):
        proto = "UDP" if lst.get("protocol", "TURN-UDP").upper() in ("TURN-UDP", "TURN-DTLS") \
            else "TCP"
        port = lst.get("port", 3478)
        if find_port(ports, port, proto) is None:
            errors.append(f"{wl}: listener {lst.get('name')!r} ({proto} {port}) has no "
                          "container port")
        if lst.get("address") != "$STUNNER_ADDR":
            errors.append(f"config: listeners[{i}].address should be \"$STUNNER_ADDR\" (the pod IP)")
    health = cfg.get("admin", {}).get("healthcheck_endpoint", "http://:8086")
    m = re.match(r"^https?://[^/]*:(\d+)", health or "")
    hport = int(m.group(1)) if m else 8086
    probe = find_port(ports, c.get("readinessProbe", {}).get("httpGet", {}).get("port"))
    if probe is None or probe["containerPort"] != hport:
        errors.append(f"{wl}: the probes do not target the health port {hport}")
    args = c.get("args", [])
    if "-c" not in args or args.index("-c") + 1 >= len(args):
        errors.append(f"{wl}: args lack -c CONFIG")
    elif "-w" not in args and "--watch" not in args:
        errors.append(f"{wl}: args lack -w: ConfigMap/Secret updates would not reload")
    else:
        path = args[args.index("-c") + 1]
        mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
        if os.path.dirname(path) not in mounts:
            errors.append(f"{wl}: config {path} is not in a mounted volume directory")
        for key in ("secret_file", "previous_secret_file"):
            f = cfg.get("auth", {}).get(key)
            if f and os.path.dirname(f) != os.path.dirname(path):
                errors.append(f"config: auth.{key} {f} is outside the watched directory "
                              f"{os.path.dirname(path)}: a Secret change would not reload")


def headless(d):
    return d.get("kind") == "Service" and d.get("spec", {}).get("clusterIP") == "None"


def check_service(docs, dep, errors):
    svc = one([(f, d) for f, d in docs if not headless(d)], "Service", errors)
    if svc is None:
        return
    spec = svc["spec"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    if not selects(spec["selector"], labels):
        errors.append(f"Service: selector does not match the {dep['kind']}'s pod labels")
    if spec["type"] != "LoadBalancer":
        errors.append("Service: type must be LoadBalancer")
    if spec.get("sessionAffinity") != "ClientIP":
        errors.append("Service: sessionAffinity must be ClientIP")
    _, ports = container_ports(dep)
    protos = set()
    for p in spec["ports"]:
        protos.add(p["protocol"])
        tp = p.get("targetPort", p["port"])
        target = find_port(ports, tp, p["protocol"])
        if target is None or target.get("protocol", "TCP") != p["protocol"]:
            errors.append(f"Service: port {p['name']!r} targets {tp!r}, which is no "
                          f"{p['protocol']} container port")
        elif target["containerPort"] == 8086:
            errors.append("Service: exposes the health port 8086 on the public load balancer")
    ann = svc["metadata"].get("annotations", {})
    if protos == {"TCP", "UDP"}:
        if ann.get("service.beta.kubernetes.io/aws-load-balancer-enable-tcp-udp-listener") != "true":
            errors.append("Service: UDP and TCP on one LoadBalancer without "
                          "aws-load-balancer-enable-tcp-udp-listener: \"true\"")
        ports_by_proto = {}
        for p in spec["ports"]:
            ports_by_proto.setdefault(p["port"], set()).add(p["protocol"])
        if not any(v == {"TCP", "UDP"} for v in ports_by_proto.values()):
            errors.append("Service: no port carries both UDP and TCP")
    if ann.get("service.beta.kubernetes.io/aws-load-balancer-nlb-target-type") != "ip":
        errors.append("Service: aws-load-balancer-nlb-target-type must be ip")


def check_pdb_hpa(docs, dep, errors):
    labels = dep["spec"]["template"]["metadata"]["labels"]
    pdb = one(docs, "PodDisruptionBudget", errors)
    if pdb is not None:
        if not selects(pdb["spec"]["selector"]["matchLabels"], labels):
            errors.append(f"PodDisruptionBudget: selector does not match the {dep['kind']}'s "
                          "pods")
        if ("minAvailable" in pdb["spec"]) == ("maxUnavailable" in pdb["spec"]):
            errors.append("PodDisruptionBudget: set exactly one of minAvailable/maxUnavailable")
    if dep["kind"] == "StatefulSet":
        if by_kind(docs, "HorizontalPodAutoscaler"):
            errors.append("HorizontalPodAutoscaler: scaling a StatefulSet needs its "
                          "admin.siblings edited in step; no autoscaler")
        return
    hpa = one(docs, "HorizontalPodAutoscaler", errors)
    if hpa is not None:
        ref = hpa["spec"]["scaleTargetRef"]
        if (ref["apiVersion"], ref["kind"], ref["name"]) != \
                ("apps/v1", "Deployment", dep["metadata"]["name"]):
            errors.append("HorizontalPodAutoscaler: scaleTargetRef does not name the Deployment")
        if hpa["spec"].get("minReplicas", 1) > hpa["spec"]["maxReplicas"]:
            errors.append("HorizontalPodAutoscaler: minReplicas > maxReplicas")


def check_kustomization(docs, files, errors):
    k = [d for f, d in docs if d.get("kind") == "Kustomization"]
    if len(k) != 1:
        errors.append("expected one kustomization.yaml")
        return
    listed = {r for r in k[0]["resources"] if not r.startswith("../")}
    others = {os.path.basename(f) for f in files} - {"kustomization.yaml"}
    if listed != others:
        errors.append(f"kustomization resources {sorted(listed)} != manifests {sorted(others)}")


def check_dockerfile(dep, errors):
    with open(DOCKERFILE, encoding="utf-8") as fh:
        text = fh.read()
    m = re.search(r"^USER (\d+)(?::(\d+))?\s*$", text, re.M)
    c, ports = container_ports(dep)
    psc = dep["spec"]["template"]["spec"].get("securityContext", {})
    uid = c.get("securityContext", {}).get("runAsUser", psc.get("runAsUser"))
    if not m:
        errors.append("Dockerfile: no numeric USER uid[:gid]")
    elif int(m.group(1)) != uid:
        errors.append(f"Dockerfile USER {m.group(1)} != {dep['kind']} runAsUser {uid}")
    if not re.search(r'^ENTRYPOINT \["%s"\]\s*$' % re.escape(IMAGE_DAEMON), text, re.M):
        errors.append(f"Dockerfile: ENTRYPOINT is not [\"{IMAGE_DAEMON}\"], which the "
                      "manifests run")
    exposed = set()
    for line in re.findall(r"^EXPOSE (.*)$", text, re.M):
        for item in line.split():
            port, _, proto = item.partition("/")
            exposed.add((int(port), (proto or "tcp").upper()))
    for p in ports:
        if p["name"] == "metrics":
            continue
        if (p["containerPort"], p.get("protocol", "TCP")) not in exposed:
            errors.append(f"Dockerfile does not EXPOSE {p['containerPort']}/{p.get('protocol', 'TCP')}")


def validate(docs, files):
    """All errors for a list of (file, document)."""
    errors = []
    for f, d in docs:
        if not isinstance(d, dict):
            errors.append(f"{f}: document is not a mapping")
            continue
        key = (d.get("apiVersion"), d.get("kind"))
        schema = SCHEMAS.get(key)
        if schema is None:
            errors.append(f"{f}: unknown apiVersion/kind {key}")
            continue
        check(schema, d, f"{f}:{d.get('kind')}", errors)
    if errors:
        return errors  # the cross-checks assume the schema holds
    check_names(docs, errors)
    dep = workload(docs, errors)
    if dep is None:
        return errors
    check_deployment(docs, dep, errors)
    check_turngate(docs, dep, errors)
    check_service(docs, dep, errors)
    check_pdb_hpa(docs, dep, errors)
    check_kustomization(docs, files, errors)
    check_dockerfile(dep, errors)
    if dep["kind"] == "StatefulSet":
        check_statefulset(docs, dep, errors)
    return errors


def workload(docs, errors):
    """The one Deployment or StatefulSet of the set, or None (an error added)."""
    found = [d for _, d in docs if d.get("kind") in WORKLOADS]
    if len(found) != 1:
        errors.append(f"expected exactly one {' or '.join(WORKLOADS)}, found {len(found)}")
        return None
    return found[0]


def load(files):
    docs, errors = [], []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            try:
                for d in yaml.safe_load_all(fh):
                    if d is not None:
                        docs.append((os.path.basename(f), d))
            except yaml.YAMLError as e:
                errors.append(f"{f}: YAML error: {e}")
    return docs, errors


def pod_names(dep):
    """Names of the workload's pods: each ordinal's of a StatefulSet, one of a Deployment."""
    name = dep["metadata"]["name"]
    if dep["kind"] == "StatefulSet":
        return [f"{name}-{i}" for i in range(dep["spec"].get("replicas", 1))]
    return [f"{name}-7c9f8d6b5-x2x4q"]


def container_argv(dep, daemon, cfg):
    """The container's command line as the image runs it (its `command`, else the image's
    ENTRYPOINT, then `args`) with daemon for the image's turngated, cfg for the config file
    and -t (check and exit) for -w."""
    c, _ = container_ports(dep)
    cmd = [a.replace(IMAGE_DAEMON, daemon) for a in c.get("command", [IMAGE_DAEMON])]
    args = [cfg if a == "/etc/turngate/turngate.yaml" else "-t" if a == "-w" else a
            for a in c.get("args", [])]
    return cmd + args


def pod_env(pod):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_PORT_")}
    env.update(STUNNER_ADDR="10.1.2.3", STUNNER_NAME=pod)
    return env



def config_ok(stdout):
    """True when `turngated -t` said "configuration ok": a plain line, or a JSON log line
    whose msg says it (the ConfigMaps set log_format: json, and -t answers in the checked
    file's format)."""
    for line in stdout.splitlines():
        if line == "configuration ok":
            return True
        try:
            if json.loads(line).get("msg") == "configuration ok":
                return True
        except (ValueError, AttributeError):
            continue
    return False

def daemon_check(docs):
    """Runs the built turngated -t on the ConfigMap's config with the Secret's files, through
    the container's command line, as each pod would."""
    daemon = os.path.join(BUILD, "turngated")
    if not os.access(daemon, os.X_OK):
        return [f"{daemon} is not built"]
    errors = []
    dep = workload(docs, errors)
    _, text = config_of(docs, errors)
    secret = by_kind(docs, "Secret")[0].get("stringData", {})
    with tempfile.TemporaryDirectory() as tmp:
        for key, value in secret.items():
            with open(os.path.join(tmp, key), "w", encoding="utf-8") as fh:
                fh.write(value + "\n")
        cfg = os.path.join(tmp, "turngate.yaml")
        with open(cfg, "w", encoding="utf-8") as fh:
            fh.write(text.replace("/etc/turngate/", tmp + "/"))
        for pod in pod_names(dep):
            r = subprocess.run(container_argv(dep, daemon, cfg), capture_output=True,
                               text=True, env=pod_env(pod), timeout=60, check=False)
            out = r.stdout + r.stderr
            if r.returncode != 0 or not config_ok(r.stdout):
                errors.append(f"pod {pod}: turngated -t rejects the ConfigMap's config:\n"
                              + out)
    return errors


def kustomize_check(kdir, want):
    """Renders the kustomization in kdir with `kubectl kustomize` (offline) when kubectl
    exists; want: how many objects it must render."""
    import shutil
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("note: kubectl not found, so `kubectl kustomize` rendering was not checked")
        return []
    r = subprocess.run([kubectl, "kustomize", kdir], capture_output=True, text=True,
                       timeout=120, check=False)
    if r.returncode != 0:
        return [f"kubectl kustomize {kdir} failed:\n{r.stderr}"]
    rendered = [d for d in yaml.safe_load_all(r.stdout) if d]
    errors = []
    if len(rendered) != want:
        errors.append(f"kubectl kustomize rendered {len(rendered)} objects, expected {want}")
    for d in rendered:
        md = d.get("metadata", {})
        if md.get("namespace") != "turngate":
            errors.append(f"kustomize: {d.get('kind')}/{md.get('name')} not in namespace turngate")
    print(f"ok: kubectl kustomize {os.path.relpath(kdir, SRC)} rendered {len(rendered)} "
          "objects")
    return errors


def load_overlay(files, base_docs):
    """The documents of an overlay of ../kubernetes (deploy/kubernetes-statefulset): its own
    and its base's, less those its patches delete."""
    docs, errors = load(files)
    ks = [d for _, d in docs if d.get("kind") == "Kustomization"]
    if errors or len(ks) != 1:
        return docs, errors or [f"{len(ks)} kustomizations in {os.path.dirname(files[0])}"]
    if "../kubernetes" not in ks[0].get("resources", []):
        return docs, ["the StatefulSet's kustomization does not build on ../kubernetes"]
    deleted = set()
    for p in ks[0].get("patches", []):
        d = yaml.safe_load(p.get("patch", ""))
        if isinstance(d, dict) and d.get("$patch") == "delete":
            deleted.add((d.get("kind"), d.get("metadata", {}).get("name")))
    base = [("../kubernetes/" + f, d) for f, d in base_docs
            if d.get("kind") != "Kustomization"
            and (d.get("kind"), d["metadata"]["name"]) not in deleted]
    return docs + base, []


def pod_slices(dep, errors):
    """Each pod's (RELAY_PORT_MIN, RELAY_PORT_MAX) as its container's command line exports
    them to turngated (run with a stand-in that prints them), or None (an error added)."""
    slices = []
    with tempfile.TemporaryDirectory() as tmp:
        stub = os.path.join(tmp, "turngated")
        with open(stub, "w", encoding="utf-8") as fh:
            fh.write('#!/bin/sh\necho "$RELAY_PORT_MIN $RELAY_PORT_MAX"\n')
        os.chmod(stub, 0o755)
        for name in pod_names(dep):
            r = subprocess.run(container_argv(dep, stub, "turngate.yaml"), capture_output=True,
                               text=True, env=pod_env(name), timeout=30, check=False)
            try:
                lo, hi = (int(x) for x in r.stdout.split())
            except ValueError:
                errors.append(f"StatefulSet: pod {name}'s command line gives turngated no "
                              f"relay port slice: {r.stdout!r} {r.stderr!r}")
                return None
            slices.append((lo, hi))
    return slices


def mask_routes(cfg, errors):
    """The port ranges at which the listeners' routes admit each listener's mask:
    {mask: [(lo, hi)]}; a listener without a mask is an error."""
    clusters = {c.get("name"): c for c in cfg.get("clusters", [])}
    admitted = {}
    for lst in cfg.get("listeners", []):
        mask = lst.get("relay_address_mask")
        if not mask:
            errors.append(f"config: listener {lst.get('name')!r} has no relay_address_mask")
            continue
        ranges = admitted.setdefault(mask, [])
        for route in lst.get("routes", []):
            for ep in clusters.get(route, {}).get("endpoints", []):
                m = re.match(r"^([^:/<]+)(?::<(\d+)-(\d+)>)?$", ep)
                if m and m.group(1) == mask:
                    ranges.append((int(m.group(2) or 1), int(m.group(3) or 65535)))
    return admitted


def check_statefulset(docs, sts, errors):
    """Masked relay addresses across replicas: a headless Service that keeps draining pods
    in DNS, a relay port slice per pod from its ordinal, admin.siblings naming every pod
    with its slice, every listener masked and its mask admitted over all the slices."""
    spec = sts["spec"]
    svc = [d for d in by_kind(docs, "Service") if d["metadata"]["name"] == spec["serviceName"]]
    if not svc or not headless(svc[0]):
        errors.append(f"StatefulSet: serviceName {spec['serviceName']!r} is no headless "
                      "Service (clusterIP: None)")
    elif not selects(svc[0]["spec"]["selector"], spec["template"]["metadata"]["labels"]):
        errors.append("StatefulSet: the headless Service does not select its pods")
    elif svc[0]["spec"].get("publishNotReadyAddresses") is not True:
        errors.append("StatefulSet: the headless Service drops not-ready pods from DNS, and a "
                      "draining pod is not ready but still relays for its siblings")
    cfg, _ = config_of(docs, errors)
    if cfg is None:
        return
    admin = cfg.get("admin", {})
    if (admin.get("relay_port_min"), admin.get("relay_port_max")) != \
            ("$RELAY_PORT_MIN", "$RELAY_PORT_MAX"):
        errors.append("config: admin.relay_port_min/max are not \"$RELAY_PORT_MIN\"/"
                      "\"$RELAY_PORT_MAX\" (each pod's slice)")
    ns = [d.get("namespace") for _, d in docs if d.get("kind") == "Kustomization"][0]
    want = [f"{p}.{spec['serviceName']}.{ns}.svc.cluster.local" for p in pod_names(sts)]
    sibs = admin.get("siblings") or []
    if [s.get("address") for s in sibs] != want:
        errors.append(f"config: admin.siblings {[s.get('address') for s in sibs]} are not the "
                      f"{len(want)} pods {want}")
        return
    slices = pod_slices(sts, errors)
    if slices is None:
        return
    for s, sl in zip(sibs, slices):
        if (s.get("relay_port_min"), s.get("relay_port_max")) != sl:
            errors.append(f"config: sibling {s['address']} has the slice "
                          f"{s.get('relay_port_min')}-{s.get('relay_port_max')}, its pod "
                          f"{sl[0]}-{sl[1]}")
    ordered = sorted(slices)
    if any(a[1] >= b[0] for a, b in zip(ordered, ordered[1:])) or \
            not all(1024 <= lo <= hi <= 65535 for lo, hi in slices):
        errors.append(f"StatefulSet: the pods' relay port slices {slices} overlap or leave "
                      "1024-65535")
    for mask, ranges in mask_routes(cfg, errors).items():
        if not all(any(a <= lo and hi <= b for a, b in ranges) for lo, hi in slices):
            errors.append(f"config: the listeners' routes do not admit the mask {mask} at "
                          f"every pod's relay ports {slices}")


def sts_mutations(docs):
    """Broken variants of the StatefulSet set, each with what it breaks."""
    def edit(kind, fn):
        return edited(docs, kind, fn)

    hpa = [("hpa.yaml", {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                         "metadata": {"name": "turngate"},
                         "spec": {"scaleTargetRef": {"apiVersion": "apps/v1",
                                                     "kind": "StatefulSet", "name": "turngate"},
                                  "maxReplicas": 5}})]
    return [
        ("a replica not among the siblings", edit("StatefulSet", lambda d: d["spec"].update(
            {"replicas": d["spec"]["replicas"] + 1}))),
        ("serviceName not headless", edit("StatefulSet", lambda d: d["spec"].update(
            {"serviceName": "turngate"}))),
        ("draining pods out of DNS", edit("Service", lambda d: headless(d) and d["spec"].update(
            {"publishNotReadyAddresses": False}))),
        ("a sibling's slice off", edit("ConfigMap", lambda d: cm_text(
            d, "relay_port_min: 51000", "relay_port_min: 51500"))),
        ("one slice for every pod", edit("ConfigMap", lambda d: cm_text(
            d, 'relay_port_min: "$RELAY_PORT_MIN"', "relay_port_min: 50000"))),
        ("slices from the wrong ordinal", edit("StatefulSet", lambda d: ctr(d).update(
            {"command": [a.replace("1000 * ordinal", "1000 * (ordinal + 1)")
                         for a in ctr(d)["command"]]}))),
        ("a listener without the mask", edit("ConfigMap", lambda d: cm_text(
            d, "    relay_address_mask: 203.0.113.10\n", "", 1))),
        ("the mask not admitted", edit("ConfigMap", lambda d: cm_text(
            d, '"203.0.113.10:<', '"203.0.113.11:<'))),
        ("an autoscaler", copy.deepcopy(docs) + hpa),
    ]


def edited(docs, kind, fn):
    """A copy of docs with fn applied to every document of kind."""
    d2 = copy.deepcopy(docs)
    for _, d in d2:
        if d.get("kind") == kind:
            fn(d)
    return d2


def pod(d):
    return d["spec"]["template"]["spec"]


def ctr(d):
    return pod(d)["containers"][0]


def cm_text(d, old, new, count=-1):
    d["data"]["turngate.yaml"] = d["data"]["turngate.yaml"].replace(old, new, count)


def mutations(docs):
    """Broken variants of the manifests, each with what it breaks."""
    def edit(kind, fn):
        return edited(docs, kind, fn)

    return [
        ("selector mismatch", edit("Deployment", lambda d: d["spec"]["selector"][
            "matchLabels"].update({"app.kubernetes.io/name": "other"}))),
        ("misspelt field", edit("Deployment", lambda d: ctr(d).update(
            {"readinessprobe": ctr(d).pop("readinessProbe")}))),
        ("probe port missing", edit("Deployment", lambda d: ctr(d)["livenessProbe"][
            "httpGet"].update({"port": "nohealth"}))),
        ("SCTP service port", edit("Service", lambda d: d["spec"]["ports"][0].update(
            {"protocol": "SCTP"}))),
        ("port as a string", edit("Service", lambda d: d["spec"]["ports"][0].update(
            {"port": "3478"}))),
        ("short grace period", edit("Deployment", lambda d: pod(d).update(
            {"terminationGracePeriodSeconds": 30}))),
        ("no mixed annotation", edit("Service", lambda d: d["metadata"]["annotations"].pop(
            "service.beta.kubernetes.io/aws-load-balancer-enable-tcp-udp-listener"))),
        ("HPA wrong target", edit("HorizontalPodAutoscaler", lambda d: d["spec"][
            "scaleTargetRef"].update({"name": "nope"}))),
        ("PDB selector", edit("PodDisruptionBudget", lambda d: d["spec"]["selector"][
            "matchLabels"].update({"x": "y"}))),
        ("writable root", edit("Deployment", lambda d: ctr(d)["securityContext"].update(
            {"readOnlyRootFilesystem": False}))),
        ("extra capability", edit("Deployment", lambda d: ctr(d)["securityContext"][
            "capabilities"].update({"add": ["NET_ADMIN"]}))),
        ("token automount", edit("Deployment", lambda d: pod(d).update(
            {"automountServiceAccountToken": True}))),
        ("STUNNER_ADDR not pod IP", edit("Deployment", lambda d: ctr(d)["env"][0][
            "valueFrom"]["fieldRef"].update({"fieldPath": "status.hostIP"}))),
        ("missing secret key", edit("Secret", lambda d: d["stringData"].pop(
            "previous-secret"))),
        ("subPath mount", edit("Deployment", lambda d: ctr(d)["volumeMounts"][0].update(
            {"subPath": "turngate.yaml"}))),
        ("secret outside watched dir", edit("ConfigMap", lambda d: cm_text(
            d, "secret_file: /etc/turngate/secret", "secret_file: /var/secret"))),
        ("listener port not in container", edit("ConfigMap", lambda d: cm_text(
            d, "port: 3478", "port: 3479"))),
    ]


def manifest_files(kdir):
    return sorted(os.path.join(kdir, f) for f in os.listdir(kdir)
                  if f.endswith((".yaml", ".yml")))


def check_set(name, docs, files, kdir, broken):
    """Validates one set, runs the daemon and kustomize checks, then the broken variants;
    prints the outcome, returns whether it passed."""
    errors = validate(docs, files)
    if not errors:
        errors = daemon_check(docs)
    if not errors:
        errors = kustomize_check(kdir, sum(d.get("kind") != "Kustomization" for _, d in docs))
    for e in errors:
        print(f"FAIL: {name}: {e}")
    if errors:
        return False
    print(f"ok: {name}: {len(docs)} documents in {len(files)} files")
    missed = [what for what, variant in broken if not validate(variant, files)]
    for what in missed:
        print(f"FAIL: {name}: self-check: the broken variant '{what}' was accepted")
    if missed:
        return False
    print(f"ok: {name}: {len(broken)} broken variants rejected")
    return True


# STUNner's Dataplane (stunner.l7mp.io/v1), its spec's fields as the gateway operator's
# api/v1/dataplane_types.go names them (l7mp/stunner-gateway-operator 0e1f157a); the core
# types inside (env, securityContext, resources...) are only shape-checked here.
DATAPLANE = os.path.join(SRC, "deploy", "stunner", "dataplane.yaml")
ENV_VAR = {"name!": str, "value": str, "valueFrom": dict}
DATAPLANE_SCHEMA = {
    "apiVersion!": {"stunner.l7mp.io/v1"}, "kind!": {"Dataplane"},
    "metadata!": {"name!": str, "labels": MAP, "annotations": MAP},
    "spec!": {
        "image!": str, "imagePullPolicy": {"Always", "Never", "IfNotPresent"},
        "imagePullSecrets": [{"name!": str}], "dataplaneResource": {"Deployment", "DaemonSet"},
        "labels": MAP, "annotations": MAP, "command!": [str], "args!": [str],
        "envFrom": [dict], "env!": [ENV_VAR], "containerSecurityContext": dict,
        "replicas": int, "resources": dict, "terminationGracePeriodSeconds": int,
        "hostNetwork": bool, "affinity": dict, "securityContext": dict, "tolerations": [dict],
        "topologySpreadConstraints": [dict], "disableHealthCheck": bool,
        "enableMetricsEndpoint": bool, "offloadEngine": str, "offloadInterfaces": [str],
    },
}
# What the operator itself puts in the container's environment (the Dataplane's env is
# appended after it, so a duplicate would be ambiguous).
OPERATOR_ENV = ("STUNNER_ADDR", "STUNNER_NAME", "STUNNER_NAMESPACE", "STUNNER_NODENAME",
                "STUNNER_CONFIG_ORIGIN")
# admin.drain_timeout's default (the operator's config has no turngate keys) plus the
# master's 5 s to stop its workers.
DATAPLANE_MIN_GRACE = 30 + 5


def dataplane_errors(dp):
    """All errors of the Dataplane document dp."""
    errors = []
    check(DATAPLANE_SCHEMA, dp, "Dataplane", errors)
    if errors:
        return errors
    spec = dp["spec"]
    with open(DOCKERFILE, encoding="utf-8") as fh:
        text = fh.read()
    if spec["command"] != ["stunnerd"]:
        errors.append(f"command {spec['command']} is not the operator's [\"stunnerd\"]")
    if not re.search(r'^RUN \["/bin/ln", "-s", "turngated", "/usr/local/bin/stunnerd"\]\s*$',
                     text, re.M):
        errors.append("the Dockerfile does not link /usr/local/bin/stunnerd to turngated")
    args = spec["args"]
    threads = [a for a in args if re.fullmatch(r"--udp-thread-num=[1-9][0-9]*", a)]
    if "-w" not in args or len(threads) != 1 or len(args) != 2:
        errors.append(f"args {args} are not the operator's -w --udp-thread-num=N")
    env = {e["name"]: e.get("value") for e in spec["env"]}
    for name in OPERATOR_ENV:
        if name in env:
            errors.append(f"env {name} is the operator's own")
    state = env.get("TURNGATE_STATE_DIR") or ""
    sock = env.get("TURNGATE_ADMIN_SOCKET") or ""
    if not state.startswith("/dev/shm/"):
        errors.append(f"TURNGATE_STATE_DIR {state!r} is not on /dev/shm (the pod's memory)")
    if os.path.dirname(sock) != state:
        errors.append(f"TURNGATE_ADMIN_SOCKET {sock!r} is not in TURNGATE_STATE_DIR "
                      "(the image's /run/turngate is on the read-only root)")
    m = re.search(r"^USER (\d+)(?::(\d+))?\s*$", text, re.M)
    uid = spec.get("securityContext", {}).get("runAsUser")
    if m is None or uid != int(m.group(1)):
        errors.append(f"securityContext.runAsUser {uid} is not the image's USER")
    csc = spec.get("containerSecurityContext", {})
    if csc.get("readOnlyRootFilesystem") is not True:
        errors.append("containerSecurityContext.readOnlyRootFilesystem is not true")
    if spec.get("terminationGracePeriodSeconds", 3600) < DATAPLANE_MIN_GRACE:
        errors.append(f"terminationGracePeriodSeconds below {DATAPLANE_MIN_GRACE} s "
                      "(drain_timeout 30 s + 5 s)")
    return errors


def check_dataplane():
    try:
        with open(DATAPLANE, encoding="utf-8") as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        print(f"FAIL: {DATAPLANE}: {e}")
        return False
    if len(docs) != 1:
        print(f"FAIL: {DATAPLANE}: {len(docs)} documents, want one Dataplane")
        return False
    errors = dataplane_errors(docs[0])
    for e in errors:
        print(f"FAIL: deploy/stunner/dataplane.yaml: {e}")
    if errors:
        return False
    print("ok: deploy/stunner/dataplane.yaml")

    def variant(fn):
        d = copy.deepcopy(docs[0])
        fn(d)
        return d

    def env_set(name, value):
        def fn(d):
            for e in d["spec"]["env"]:
                if e["name"] == name:
                    e["value"] = value
        return fn
    broken = [
        ("misspelt spec field", variant(lambda d: d["spec"].update(volumes=[]))),
        ("wrong kind", variant(lambda d: d.update(kind="DataPlane"))),
        ("command turngated", variant(lambda d: d["spec"].update(command=["turngated"]))),
        ("no -w", variant(lambda d: d["spec"].update(args=["--udp-thread-num=2"]))),
        ("a config file", variant(lambda d: d["spec"]["args"].extend(["-c", "/x"]))),
        ("operator's env", variant(lambda d: d["spec"]["env"].append(
            {"name": "STUNNER_ADDR", "value": "1.2.3.4"}))),
        ("state on disk", variant(env_set("TURNGATE_STATE_DIR", "/var/lib/turngate"))),
        ("socket elsewhere", variant(env_set("TURNGATE_ADMIN_SOCKET", "/run/turngate/a.sock"))),
        ("root uid", variant(lambda d: d["spec"]["securityContext"].update(runAsUser=0))),
        ("short grace", variant(lambda d: d["spec"].update(terminationGracePeriodSeconds=5))),
    ]
    missed = [what for what, d in broken if not dataplane_errors(d)]
    for what in missed:
        print(f"FAIL: deploy/stunner/dataplane.yaml: self-check: '{what}' was accepted")
    if missed:
        return False
    print(f"ok: deploy/stunner/dataplane.yaml: {len(broken)} broken variants rejected")
    return True


def main():
    files = manifest_files(KDIR)
    if not files:
        print(f"FAIL: no manifests in {KDIR}")
        return 1
    docs, errors = load(files)
    if not errors:
        sfiles = manifest_files(SDIR)
        sdocs, errors = load_overlay(sfiles, docs)
    for e in errors:
        print(f"FAIL: {e}")
    if errors:
        return 1
    ok = check_set("deploy/kubernetes", docs, files, KDIR, mutations(docs))
    ok &= check_set("deploy/kubernetes-statefulset", sdocs, sfiles, SDIR,
                    sts_mutations(sdocs))
    ok &= check_dataplane()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
