#!/bin/sh
# Builds turngate and runs the whole test suite: the normal build's `make check`
# (unit, integration, interop, fuzz corpus replay) and `make check-deploy`, then the same
# suite built with ASan+UBSan in a separate build directory. Exits non-zero when any test fails.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
jobs=$(nproc)

sh scripts/setup.sh
./autogen.sh >/dev/null 2>&1 || ./autogen.sh

run_suite() {
	dir=$1
	shift
	echo "=== test-all: build in $dir ($*)"
	mkdir -p "$dir"
	(cd "$dir" && "$top/configure" -q "$@" && make -j"$jobs" >/dev/null)
	if ! (cd "$dir" && make -j"$jobs" check); then
		echo "=== test-all: failures in $dir; their logs follow"
		for log in $(find "$dir" -name '*.log' ! -name 'test-suite.log' ! -name 'config.log'); do
			trs="${log%.log}.trs"
			if [ -f "$trs" ] && grep -q '^:test-result: \(FAIL\|ERROR\|XPASS\)' "$trs"; then
				echo "----- $log"
				tail -n 80 "$log"
			fi
		done
		return 1
	fi
}

status=0
run_suite "$top/_build/default" || status=1
# The deployment as an operator runs it (a booted systemd, the container image built and
# run: make check-deploy, docs/testing.md), once, from the plain build.
if [ "${TG_SKIP_DEPLOY:-0}" = 1 ]; then
	echo "=== test-all: make check-deploy skipped because TG_SKIP_DEPLOY=1"
else
	echo "=== test-all: make check-deploy in $top/_build/default"
	if ! (cd "$top/_build/default" && make check-deploy); then
		echo "=== test-all: check-deploy failed; its logs follow"
		tail -n 80 "$top"/_build/default/tests/deploy/test_systemd_boot.log \
			"$top"/_build/default/tests/deploy/test_container_image.log 2>/dev/null || :
		status=1
	fi
fi
if [ "${TG_SKIP_SANITIZERS:-0}" = 1 ]; then
	echo "=== test-all: sanitizer build skipped because TG_SKIP_SANITIZERS=1"
else
	run_suite "$top/_build/sanitizers" --enable-sanitizers || status=1
fi
# One closing line over all suites, from automake's summaries.
passed=0
failed=0
for log in "$top"/_build/default/test-suite.log "$top"/_build/default/test-suite-deploy.log \
	"$top"/_build/sanitizers/test-suite.log; do
	[ -f "$log" ] || continue
	p=$(sed -n 's/^# PASS: *//p' "$log" | head -n 1)
	f=$(sed -n 's/^# FAIL: *//p' "$log" | head -n 1)
	e=$(sed -n 's/^# ERROR: *//p' "$log" | head -n 1)
	x=$(sed -n 's/^# XPASS: *//p' "$log" | head -n 1)
	passed=$((passed + ${p:-0}))
	failed=$((failed + ${f:-0} + ${e:-0} + ${x:-0}))
done
[ "$status" -eq 0 ] || [ "$failed" -gt 0 ] || failed=1
echo "test-all: $passed passed, $failed failed"
if [ "$status" -eq 0 ]; then
	echo "=== test-all: all suites passed"
else
	echo "=== test-all: FAILED"
fi
exit $status
