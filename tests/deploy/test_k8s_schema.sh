#!/bin/sh
# tests/deploy/test_k8s_schema.sh: validates deploy/kubernetes against the Kubernetes API's OpenAPI schemas.
#
# The validator is tests/deploy/k8s-schema/validate.mjs with the npm package
# kubernetes-models (validators generated from the API's published OpenAPI definitions),
# pinned by tests/deploy/k8s-schema/package-lock.json and installed by scripts/setup.sh
# through tests/deploy/deploy_cache.sh npm. Every resource of kustomization.yaml and the
# DaemonSet of deploy/kubernetes-hostnetwork and the manifests of deploy/kubernetes-statefulset
# must be valid, and broken copies (a string containerPort, a probe without a port, a list
# for the Service's sessionAffinity and for the PodDisruptionBudget's maxUnavailable, an
# unknown kind, a string for the StatefulSet's replicas, a headless Service's clusterIP as a
# list) must not be: otherwise the validator checks nothing. deploy/stunner/dataplane.yaml (a
# kind of STUNner's operator, not in the schemas) is checked through the Deployment the
# operator renders from it. Ranges (a port above 65535)
# are not in the published schemas; the API server checks them, and test_manifests.py. No node or packages: FAIL when CI=true,
# SKIP with the reason elsewhere.
set -eu

: "${top_srcdir:?top_srcdir must be set (run through make check)}"
k8s="$top_srcdir/deploy/kubernetes"
here="$top_srcdir/tests/deploy"
cache=${TG_DEPLOY_CACHE:-/var/cache/turngate-test}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tg-k8s-schema.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

unavailable() {
	if [ "${CI:-}" = true ]; then
		echo "FAIL: $* (CI=true: scripts/setup.sh must have installed it)" >&2
		exit 1
	fi
	echo "SKIP: $* (run scripts/setup.sh)"
	exit 77
}

command -v node >/dev/null 2>&1 || unavailable "node not found"
modules="$cache/npm-$(sha256sum < "$here/k8s-schema/package-lock.json" | cut -c1-12)"
[ -d "$modules/node_modules/kubernetes-models" ] || unavailable "no $modules/node_modules"
cp "$here/k8s-schema/validate.mjs" "$modules/validate-$$.mjs"
trap 'rm -rf "$tmp" "$modules/validate-$$.mjs"' EXIT INT TERM

validate() {
	node "$modules/validate-$$.mjs" "$@"
}

files=$(sed -n 's/^  - \(.*\.yaml\)$/\1/p' "$k8s/kustomization.yaml")
[ -n "$files" ] || { echo "FAIL: no resources in kustomization.yaml" >&2; exit 1; }
set --
for f in $files; do set -- "$@" "$k8s/$f"; done
# The host-network and StatefulSet variants' own manifests (their kustomizations reuse the rest).
set -- "$@" "$top_srcdir/deploy/kubernetes-hostnetwork/daemonset.yaml"
sts=$(sed -n 's/^  - \([a-z-]*\.yaml\)$/\1/p' "$top_srcdir/deploy/kubernetes-statefulset/kustomization.yaml")
[ -n "$sts" ] || { echo "FAIL: no resources in kubernetes-statefulset/kustomization.yaml" >&2; exit 1; }
for f in $sts; do set -- "$@" "$top_srcdir/deploy/kubernetes-statefulset/$f"; done
if ! validate "$@"; then
	echo "FAIL: deploy/kubernetes and its variants do not validate" >&2
	exit 1
fi

# deploy/stunner/dataplane.yaml is a Dataplane, a kind of STUNner's operator that the API
# schemas lack (test_manifests.py checks its own fields). Its core-typed fields (env,
# resources, the security contexts, the grace period) are checked in the Deployment the
# operator renders from it: the stunnerd container with the operator's STUNNER_* env and
# the Dataplane's fields applied on top, as the operator's internal/renderer/dataplane_util.go
# does. A copy with a string runAsUser must be rejected (so this checks something).
render_dataplane() {
	python3 - "$1" <<'EOF'
import sys
import yaml
spec = yaml.safe_load(open(sys.argv[1], encoding="utf-8"))["spec"]
env = [{"name": "STUNNER_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
       {"name": "STUNNER_NAME", "value": "gw"}, {"name": "STUNNER_NAMESPACE", "value": "ns"},
       {"name": "STUNNER_NODENAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
       {"name": "STUNNER_CONFIG_ORIGIN", "value": "http://stunner-config-discovery:13478"}]
c = {"name": "stunnerd", "image": spec["image"], "command": spec["command"],
     "args": spec["args"], "env": env + spec.get("env", []),
     "ports": [{"name": "metrics-port", "containerPort": 8080, "protocol": "TCP"}],
     "imagePullPolicy": spec.get("imagePullPolicy", "Always")}
for k, to in (("resources", "resources"), ("containerSecurityContext", "securityContext"),
              ("envFrom", "envFrom")):
    if k in spec:
        c[to] = spec[k]
pod = {"containers": [c], "hostNetwork": spec.get("hostNetwork", False),
       "terminationGracePeriodSeconds": spec.get("terminationGracePeriodSeconds", 3600)}
for k in ("securityContext", "affinity", "tolerations", "topologySpreadConstraints",
          "imagePullSecrets"):
    if k in spec:
        pod[k] = spec[k]
labels = {"app": "stunner", "stunner.l7mp.io/related-gateway-name": "gw"}
yaml.safe_dump({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "gw", "namespace": "ns"},
                "spec": {"selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels}, "spec": pod}}},
               sys.stdout)
EOF
}
dp="$top_srcdir/deploy/stunner/dataplane.yaml"
render_dataplane "$dp" > "$tmp/dataplane-deployment.yaml"
if ! validate "$tmp/dataplane-deployment.yaml"; then
	echo "FAIL: the Deployment rendered from deploy/stunner/dataplane.yaml does not validate" >&2
	exit 1
fi
sed 's/runAsUser: 10001/runAsUser: "10001"/' "$dp" > "$tmp/dataplane-broken.yaml"
cmp -s "$dp" "$tmp/dataplane-broken.yaml" && { echo "FAIL: dataplane-string-uid: no edit" >&2; exit 1; }
render_dataplane "$tmp/dataplane-broken.yaml" > "$tmp/dataplane-broken-deployment.yaml"
if validate "$tmp/dataplane-broken-deployment.yaml" > "$tmp/dataplane-broken.out" 2>&1; then
	echo "FAIL: dataplane-string-uid: a string runAsUser was accepted" >&2
	exit 1
fi
echo "rejected as expected: dataplane-string-uid: $(tail -1 "$tmp/dataplane-broken.out")"

# broken NAME FILE SED: a copy of FILE (under deploy/) edited by SED must be rejected.
failures=0
broken() {
	sed "$3" "$top_srcdir/deploy/$2" > "$tmp/$1.yaml"
	if cmp -s "$top_srcdir/deploy/$2" "$tmp/$1.yaml"; then
		echo "FAIL: $1: the edit changed nothing in $2 (update the test)" >&2
		failures=$((failures + 1))
	elif validate "$tmp/$1.yaml" > "$tmp/$1.out"; then
		cat "$tmp/$1.out" >&2
		echo "FAIL: $1 was accepted" >&2
		failures=$((failures + 1))
	else
		echo "rejected as expected: $1: $(tail -n 1 "$tmp/$1.out" | sed 's/^[^:]*: //')"
	fi
}
broken string-containerPort kubernetes/deployment.yaml 's/containerPort: 3478/containerPort: "3478"/'
broken probe-without-port kubernetes/deployment.yaml '/livenessProbe:/,/port:/{/port:/d}'
broken service-affinity-list kubernetes/service.yaml 's/sessionAffinity: ClientIP/sessionAffinity: [ClientIP]/'
broken pdb-list kubernetes/pdb.yaml 's/maxUnavailable: 1/maxUnavailable: [1]/'
broken unknown-kind kubernetes/service.yaml 's/^kind: Service$/kind: Servicee/'
broken sts-string-replicas kubernetes-statefulset/statefulset.yaml 's/^  replicas: 3$/  replicas: "3"/'
broken headless-clusterip-list kubernetes-statefulset/service-headless.yaml 's/clusterIP: None/clusterIP: [None]/'
[ "$failures" -eq 0 ] || exit 1
echo "test_k8s_schema: ok"
