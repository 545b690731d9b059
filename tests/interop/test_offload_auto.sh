#!/bin/sh
# tests/interop/test_offload_auto.sh: the acceptance-style interop suite with the kernel fast
# path on (issue 21): every tgtest.py test (headless Chromium data and media, aiortc, aioice,
# coturn's uclient Send) and the masked symmetric Chromium test (issue 22: on one instance the
# kernel short-circuits the browsers' channels, which the test checks) again, its daemons with `offload_engine: Auto` (tgtest.py's
# TG_OFFLOAD), in a network namespace of its own so the programs attach to that namespace's
# lo. Each daemon prints what the kernel relayed and fails its test when the programs did
# not load. SKIP (77) with the reason when not root or built without the fast path.
set -u

: "${top_srcdir:?top_srcdir must be set (run through make check)}"
: "${top_builddir:?top_builddir must be set (run through make check)}"
if [ "$(id -u)" != 0 ]; then
	echo "SKIP: test_offload_auto needs root (a network namespace, eBPF programs)"
	exit 77
fi
if ! grep -q '^#define HAVE_OFFLOAD 1' "$top_builddir/config.h"; then
	echo "SKIP: test_offload_auto: built without the kernel fast path (configure found no clang/libbpf/bpftool, or --disable-offload)"
	exit 77
fi
tests="test_chromium_data.py test_chromium_media.py test_aiortc_asymmetric.py
test_aioice_turn.py test_uclient_send.py test_chromium_masked.py"
# The namespace's lo carries 127.0.0.0/8 and ::1 once it is up.
exec unshare -n sh -c '
	ip link set lo up || exit 1
	status=0
	ran=0
	for t in '"$(echo $tests)"'; do
		echo "=== $t with offload_engine: Auto"
		TG_OFFLOAD=Auto "$0" "$1/tests/interop/$t"
		rc=$?
		echo "=== $t: exit $rc"
		# 77: the test itself skipped (it printed why); anything else non-zero fails.
		[ "$rc" -eq 0 ] && ran=$((ran + 1))
		[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || status=1
	done
	if [ "$status" -eq 0 ] && [ "$ran" -eq 0 ]; then
		echo "SKIP: every test skipped (see their reasons above)"
		exit 77
	fi
	exit $status' /usr/bin/python3 "$top_srcdir"
