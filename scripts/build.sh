#!/bin/sh
# Builds turngate in the source tree (./turngated, ./turngatectl at the top).
# Usage: scripts/build.sh [configure options...]
set -eu
cd "$(dirname "$0")/.."
sh scripts/setup.sh
if [ ! -x configure ] || [ configure.ac -nt configure ]; then
	./autogen.sh >/dev/null 2>&1 || ./autogen.sh
fi
if [ ! -f Makefile ] || [ "$#" -gt 0 ]; then
	./configure -q "$@"
fi
make -j"$(nproc)"
