#!/bin/sh
# Installs missing build dependencies and builds turngate in _build/default
# (programs: _build/default/turngated, _build/default/turngatectl).
# Usage: scripts/build.sh [configure options...]
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
sh scripts/setup.sh
if [ ! -x configure ] || [ configure.ac -nt configure ]; then
	./autogen.sh >/dev/null 2>&1 || ./autogen.sh
fi
mkdir -p _build/default
cd _build/default
if [ ! -f Makefile ] || [ "$#" -gt 0 ]; then
	"$top/configure" -q "$@"
fi
make -j"$(nproc)" >/dev/null
echo "build: programs are in _build/default"
