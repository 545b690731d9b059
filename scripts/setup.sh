#!/bin/sh
# Installs the Debian packages turngate needs to build and test, when any is missing.
# Works as root; uses sudo otherwise. Safe to run repeatedly (does nothing when all present).
set -eu

PKGS="build-essential autoconf automake libtool pkg-config
libev-dev libssl-dev liburcu-dev libyaml-dev libjansson-dev libmicrohttpd-dev libsystemd-dev
libcmocka-dev clang clang-format libclang-rt-14-dev spin libbpf-dev bpftool
coturn python3-aioice python3-aiortc python3-selenium python3-openssl chromium chromium-driver
iproute2 procps openssl systemd python3-yaml prometheus
systemd-container debootstrap podman runc dpkg-dev debhelper haproxy"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done

# node and npm validate the Kubernetes manifests (tests/deploy/test_k8s_schema.sh); a
# machine that has them from elsewhere keeps its own, others get Debian's.
if ! command -v npm >/dev/null 2>&1; then
	missing="$missing nodejs npm"
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi
if [ -n "$missing" ]; then
	echo "setup: installing:$missing"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	# shellcheck disable=SC2086
	$SUDO apt-get install -y -qq --no-install-recommends $missing
	# The coturn, prometheus and haproxy packages enable system services; turngate's tests
	# run their own turnserver, Prometheus and HAProxy.
	if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		for unit in coturn prometheus prometheus-node-exporter haproxy; do
			$SUDO systemctl disable --now "$unit" >/dev/null 2>&1 || true
		done
	fi
else
	echo "setup: all build and test dependencies are installed"
fi
# The npm packages of the manifest schema check, pinned by their package-lock.json, in the
# deploy tests' cache (a no-op once installed).
$SUDO sh "$(dirname "$0")/../tests/deploy/deploy_cache.sh" npm >/dev/null
# STUNner's stunnerd and turncat, pinned by tests/stunner/go.sum and fetched through the Go
# module proxy, for the tests and the benchmark that stand them beside turngate (quick once
# built). Without a Go toolchain those tests skip (and fail under CI=true).
if stunner=$(sh "$(dirname "$0")/build-stunner.sh"); then
	echo "setup: STUNner's programs are in $stunner"
else
	echo "setup: STUNner's programs not built (see above); tests/stunner skips"
fi
echo "setup: done"
