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
- the checker itself rejects a set of broken variants (so it can fail);
- where kubectl is installed, `kubectl kustomize` (offline) renders the set. Applying or
  server-side validation needs an API server, which is not available.
"""
import copy
import os
import re
import subprocess
import sys
import tempfile

import yaml

SRC = os.environ.get("top_srcdir") or os.path.join(os.path.dirname(__file__), "..", "..")
BUILD = os.environ.get("top_builddir") or SRC
KDIR = os.path.join(SRC, "deploy", "kubernetes")
DOCKERFILE = os.path.join(SRC, "deploy", "container", "Dockerfile")

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
        "template!": {"metadata!": {"labels!": MAP, "annotations": MAP},
                      "spec!": POD_SPEC}}},
    ("v1", "Service"): {"apiVersion!": str, "kind!": str, "metadata!": METADATA, "spec!": {
        "type!": {"ClusterIP", "NodePort", "LoadBalancer"}, "selector!": MAP,
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
        "labels": [{"pairs!": MAP, "includeSelectors": bool}], "resources!": [str]},
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
    spec = dep["spec"]
    tmpl = spec["template"]
    pod = tmpl["spec"]
    if not selects(spec["selector"]["matchLabels"], tmpl["metadata"]["labels"]):
        errors.append("Deployment: spec.selector.matchLabels does not match the template labels")
    c, ports = container_ports(dep)
    names = [p["name"] for p in ports if "name" in p]
    if len(names) != len(set(names)):
        errors.append("Deployment: duplicate container port names")
    for n in names:
        if len(n) > 15 or not IANA_SVC.match(n) or not re.search("[a-z]", n):
            errors.append(f"Deployment: port name {n!r} is not a valid IANA service name")
    for p in ports:
        if not 1 <= p["containerPort"] <= 65535:
            errors.append(f"Deployment: containerPort {p['containerPort']} out of range")
    for probe in ("livenessProbe", "readinessProbe"):
        pr = c.get(probe)
        if pr is None:
            errors.append(f"Deployment: container has no {probe}")
            continue
        target = find_port(ports, pr["httpGet"]["port"])
        if target is None or target.get("protocol", "TCP") != "TCP":
            errors.append(f"Deployment: {probe} port {pr['httpGet']['port']!r} is not a "
                          "TCP container port")
    if c.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/live":
        errors.append("Deployment: livenessProbe must GET /live")
    if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/ready":
        errors.append("Deployment: readinessProbe must GET /ready")
    env = {e["name"]: e for e in c.get("env", [])}
    addr = env.get("STUNNER_ADDR", {}).get("valueFrom", {}).get("fieldRef", {})
    if addr.get("fieldPath") != "status.podIP":
        errors.append("Deployment: STUNNER_ADDR must come from fieldRef status.podIP")
    # security
    psc = pod.get("securityContext", {})
    csc = c.get("securityContext", {})
    if not (psc.get("runAsNonRoot") or csc.get("runAsNonRoot")):
        errors.append("Deployment: runAsNonRoot is not set")
    if (csc.get("runAsUser") or psc.get("runAsUser") or 0) == 0:
        errors.append("Deployment: runAsUser must be a non-zero uid")
    if csc.get("readOnlyRootFilesystem") is not True:
        errors.append("Deployment: readOnlyRootFilesystem must be true")
    if csc.get("allowPrivilegeEscalation") is not False:
        errors.append("Deployment: allowPrivilegeEscalation must be false")
    caps = csc.get("capabilities", {})
    if caps.get("drop") != ["ALL"]:
        errors.append("Deployment: capabilities.drop must be [ALL]")
    if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
        errors.append("Deployment: capabilities.add may only hold NET_BIND_SERVICE")
    # service account
    sa_name = pod.get("serviceAccountName")
    sas = [d for d in by_kind(docs, "ServiceAccount") if d["metadata"]["name"] == sa_name]
    if not sas:
        errors.append(f"Deployment: serviceAccountName {sa_name!r} has no ServiceAccount")
    elif pod.get("automountServiceAccountToken",
                 sas[0].get("automountServiceAccountToken", True)) is not False:
        # the pod's setting wins over the service account's; the default is to mount
        errors.append("Deployment: the service account token is automounted")
    check_volumes(docs, pod, c, errors)


def check_volumes(docs, pod, c, errors):
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        if m["name"] not in vols:
            errors.append(f"Deployment: volumeMount {m['name']!r} has no volume")
        if "subPath" in m:
            errors.append(f"Deployment: volumeMount {m['name']!r} uses subPath, which never "
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
                    errors.append(f"Deployment: volume {v['name']!r} references missing "
                                  f"{kind} {ref['name']!r}")
                    continue
                keys = set(obj.get(field, {})) | set(obj.get("data", {}))
                for item in ref.get("items", []):
                    if item["key"] not in keys:
                        errors.append(f"Deployment: {kind} {ref['name']!r} has no key "
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
    cfg, _ = config_of(docs, errors)
    if cfg is None:
        return
    pod = dep["spec"]["template"]["spec"]
    c, ports = container_ports(dep)
    drain = cfg.get("admin", {}).get("drain_timeout", 30)
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if grace < drain + 15:
        errors.append(f"Deployment: terminationGracePeriodSeconds {grace} < drain_timeout "
                      f"{drain} + 15: pods would be killed mid-drain")
    for i, lst in enumerate(cfg.get("listeners", [])):
        proto = "UDP" if lst.get("protocol", "TURN-UDP").upper() in ("TURN-UDP", "TURN-DTLS") \
            else "TCP"
        port = lst.get("port", 3478)
        if find_port(ports, port, proto) is None:
            errors.append(f"Deployment: listener {lst.get('name')!r} ({proto} {port}) has no "
                          "container port")
        if lst.get("address") != "$STUNNER_ADDR":
            errors.append(f"config: listeners[{i}].address should be \"$STUNNER_ADDR\" (the pod IP)")
    health = cfg.get("admin", {}).get("healthcheck_endpoint", "http://:8086")
    m = re.match(r"^https?://[^/]*:(\d+)", health or "")
    hport = int(m.group(1)) if m else 8086
    probe = find_port(ports, c.get("readinessProbe", {}).get("httpGet", {}).get("port"))
    if probe is None or probe["containerPort"] != hport:
        errors.append(f"Deployment: the probes do not target the health port {hport}")
    args = c.get("args", [])
    if "-c" not in args or args.index("-c") + 1 >= len(args):
        errors.append("Deployment: args lack -c CONFIG")
    elif "-w" not in args and "--watch" not in args:
        errors.append("Deployment: args lack -w: ConfigMap/Secret updates would not reload")
    else:
        path = args[args.index("-c") + 1]
        mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
        if os.path.dirname(path) not in mounts:
            errors.append(f"Deployment: config {path} is not in a mounted volume directory")
        for key in ("secret_file", "previous_secret_file"):
            f = cfg.get("auth", {}).get(key)
            if f and os.path.dirname(f) != os.path.dirname(path):
                errors.append(f"config: auth.{key} {f} is outside the watched directory "
                              f"{os.path.dirname(path)}: a Secret change would not reload")


def check_service(docs, dep, errors):
    svc = one(docs, "Service", errors)
    if svc is None:
        return
    spec = svc["spec"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    if not selects(spec["selector"], labels):
        errors.append("Service: selector does not match the Deployment's pod labels")
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
            errors.append("PodDisruptionBudget: selector does not match the Deployment's pods")
        if ("minAvailable" in pdb["spec"]) == ("maxUnavailable" in pdb["spec"]):
            errors.append("PodDisruptionBudget: set exactly one of minAvailable/maxUnavailable")
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
    listed = set(k[0]["resources"])
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
        errors.append(f"Dockerfile USER {m.group(1)} != Deployment runAsUser {uid}")
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
    dep = one(docs, "Deployment", errors)
    if dep is None:
        return errors
    check_deployment(docs, dep, errors)
    check_turngate(docs, dep, errors)
    check_service(docs, dep, errors)
    check_pdb_hpa(docs, dep, errors)
    check_kustomization(docs, files, errors)
    check_dockerfile(dep, errors)
    return errors


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


def daemon_check(docs):
    """Runs the built turngated -t on the ConfigMap's config with the Secret's files."""
    daemon = os.path.join(BUILD, "turngated")
    if not os.access(daemon, os.X_OK):
        return [f"{daemon} is not built"]
    errors = []
    _, text = config_of(docs, errors)
    secret = by_kind(docs, "Secret")[0].get("stringData", {})
    with tempfile.TemporaryDirectory() as tmp:
        for key, value in secret.items():
            with open(os.path.join(tmp, key), "w", encoding="utf-8") as fh:
                fh.write(value + "\n")
        cfg = os.path.join(tmp, "turngate.yaml")
        with open(cfg, "w", encoding="utf-8") as fh:
            fh.write(text.replace("/etc/turngate/", tmp + "/"))
        env = dict(os.environ, STUNNER_ADDR="10.1.2.3")
        r = subprocess.run([daemon, "-c", cfg, "-t"], capture_output=True, text=True,
                           env=env, timeout=60, check=False)
        out = r.stdout + r.stderr
        if r.returncode != 0 or "configuration ok" not in r.stdout.splitlines():
            errors.append("turngated -t rejects the ConfigMap's config:\n" + out)
    return errors


def kustomize_check(files):
    """Renders the kustomization with `kubectl kustomize` (offline) when kubectl exists."""
    import shutil
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("note: kubectl not found, so `kubectl kustomize` rendering was not checked")
        return []
    r = subprocess.run([kubectl, "kustomize", KDIR], capture_output=True, text=True,
                       timeout=120, check=False)
    if r.returncode != 0:
        return [f"kubectl kustomize {KDIR} failed:\n{r.stderr}"]
    rendered = [d for d in yaml.safe_load_all(r.stdout) if d]
    errors = []
    want = len(files) - 1  # every manifest but the kustomization itself
    if len(rendered) != want:
        errors.append(f"kubectl kustomize rendered {len(rendered)} objects, expected {want}")
    for d in rendered:
        md = d.get("metadata", {})
        if md.get("namespace") != "turngate":
            errors.append(f"kustomize: {d.get('kind')}/{md.get('name')} not in namespace turngate")
    print(f"ok: kubectl kustomize rendered {len(rendered)} objects")
    return errors


def mutations(docs):
    """Broken variants of the manifests, each with what it breaks."""
    def edit(kind, fn):
        d2 = copy.deepcopy(docs)
        for _, d in d2:
            if d.get("kind") == kind:
                fn(d)
        return d2

    def pod(d):
        return d["spec"]["template"]["spec"]

    def ctr(d):
        return pod(d)["containers"][0]

    def cm_text(d, old, new):
        d["data"]["turngate.yaml"] = d["data"]["turngate.yaml"].replace(old, new)

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


def main():
    files = sorted(os.path.join(KDIR, f) for f in os.listdir(KDIR)
                   if f.endswith((".yaml", ".yml")))
    if not files:
        print(f"FAIL: no manifests in {KDIR}")
        return 1
    docs, errors = load(files)
    if not errors:
        errors = validate(docs, files)
    if not errors:
        errors = daemon_check(docs)
    if not errors:
        errors = kustomize_check(files)
    for e in errors:
        print(f"FAIL: {e}")
    if errors:
        return 1
    print(f"ok: {len(docs)} documents in {len(files)} files")

    missed = [name for name, variant in mutations(docs) if not validate(variant, files)]
    for name in missed:
        print(f"FAIL: self-check: the broken variant '{name}' was accepted")
    if missed:
        return 1
    print(f"ok: {len(mutations(docs))} broken variants rejected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
