#!/bin/sh
# Hunts flaky tests: runs the whole suite (scripts/test-all.sh, both builds) N times in a
# row, or only the tests named (`make check TESTS=...` in _build/default and
# _build/sanitizers, built first when missing), and prints one line per run and a tally.
#
#   scripts/test-repeat.sh N                   # the README's test command, N times
#   scripts/test-repeat.sh N tests/integration/test_master_traffic [...]
#
# As root, runs of named tests get a private network namespace each (unshare -n, loopback
# up), so two runs on one machine, or a run beside a developer's suite, cannot collide on
# the fixed loopback relay port ranges of the integration tests; TG_REPEAT_NETNS=0 turns
# that off. Runs of the whole suite stay in the host's namespace (TG_REPEAT_NETNS=1 to
# force one): its container image test builds an image whose build stage fetches Debian
# packages, which a private namespace cannot reach.
# The log of every run is kept in _build/repeat/run-K.log; a failed run's failing test
# logs are in that file (test-all prints them) or in the build tree (TESTS mode).
# Exits 0 when every run passed.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
jobs=$(nproc)

# One run: the whole suite, or the named tests in both builds. Runs in the namespace.
one_run() {
	if [ -z "$tests" ]; then
		sh scripts/test-all.sh
	else
		st=0
		for d in default sanitizers; do
			(cd "_build/$d" && make -j"$jobs" check TESTS="$tests") || st=1
		done
		return $st
	fi
}

# Inside the namespace (see below): one run of the tests given as $2.
if [ "${1:-}" = __one ]; then
	tests=$2
	one_run
	exit
fi

if [ $# -lt 1 ] || ! [ "$1" -ge 1 ] 2>/dev/null; then
	echo "usage: $0 N [TEST...]" >&2
	exit 2
fi
runs=$1
shift
tests="$*"
mkdir -p "$top/_build/repeat"

# The whole suite stays in the host's namespace by default: make check-deploy builds the
# container image, whose build stage installs Debian packages (no network in a private
# namespace: the image test would fail there). Named tests get a namespace.
netns_default=1
[ -n "$tests" ] || netns_default=0
isolate=""
if [ "${TG_REPEAT_NETNS:-$netns_default}" = 1 ] && [ "$(id -u)" -eq 0 ] &&
	command -v unshare >/dev/null && unshare -n true 2>/dev/null; then
	isolate="unshare -n"
	echo "test-repeat: each run in its own network namespace"
else
	echo "test-repeat: runs share the host's network namespace (the whole suite, not root, no unshare, or TG_REPEAT_NETNS=0)"
fi

if [ -n "$tests" ]; then
	sh scripts/setup.sh
	[ -f configure ] || ./autogen.sh >/dev/null 2>&1
	for d in default sanitizers; do
		flags=""
		[ "$d" = sanitizers ] && flags="--enable-sanitizers"
		mkdir -p "_build/$d"
		# shellcheck disable=SC2086
		[ -f "_build/$d/Makefile" ] || (cd "_build/$d" && "$top/configure" -q $flags)
		(cd "_build/$d" && make -j"$jobs" >/dev/null)
	done
fi

failed=0
for k in $(seq 1 "$runs"); do
	log="$top/_build/repeat/run-$k.log"
	t0=$(date +%s)
	if [ -n "$isolate" ]; then
		# The namespace starts with lo down; the suite needs 127.0.0.1 and ::1.
		$isolate sh -c 'ip link set lo up && exec sh "$0" __one "$1"' "$0" "$tests" >"$log" 2>&1 && rc=0 || rc=$?
	else
		one_run >"$log" 2>&1 && rc=0 || rc=$?
	fi
	secs=$(($(date +%s) - t0))
	summary=$(grep -E '^test-all: [0-9]+ passed' "$log" | tail -n 1 || true)
	[ -n "$summary" ] || summary="($(grep -c '^PASS:' "$log" || true) test programs passed)"
	if [ "$rc" -eq 0 ]; then
		echo "test-repeat: run $k/$runs passed in ${secs}s ${summary}"
	else
		failed=$((failed + 1))
		echo "test-repeat: run $k/$runs FAILED in ${secs}s ${summary} (log: $log)"
		grep -E '^(FAIL|ERROR|XPASS):' "$log" | sed 's/^/test-repeat:   /' || true
	fi
done
echo "test-repeat: $((runs - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
