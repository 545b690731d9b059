#!/bin/sh
# Installs the Debian packages turngate needs to build and test, when any is missing.
# Works as root; uses sudo otherwise. Safe to run repeatedly (does nothing when all present).
set -eu

PKGS="build-essential autoconf automake libtool pkg-config
libev-dev libssl-dev liburcu-dev libyaml-dev libjansson-dev libmicrohttpd-dev libsystemd-dev
libcmocka-dev clang libclang-rt-14-dev spin
coturn python3-aioice python3-aiortc python3-selenium chromium chromium-driver
iproute2 procps openssl systemd python3-yaml prometheus"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done

if [ -z "$missing" ]; then
	echo "setup: all build and test dependencies are installed"
	exit 0
fi

echo "setup: installing:$missing"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
# The coturn and prometheus packages enable system services; turngate's tests run their own
# turnserver and Prometheus.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	for unit in coturn prometheus prometheus-node-exporter; do
		$SUDO systemctl disable --now "$unit" >/dev/null 2>&1 || true
	done
fi
echo "setup: done"
