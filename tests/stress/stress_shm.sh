#!/bin/sh
# Runs the shm stress test (must find no violation) and its --broken control (reclaim
# without grace periods), which must be caught: proves the checker can fail.
set -u
prog="${top_builddir:-.}/tests/stress/stress_shm"
secs="${STRESS_SHM_SECONDS:-18}"
broken_secs="${STRESS_SHM_BROKEN_SECONDS:-10}"  # stops early once caught

[ -x "$prog" ] || { echo "FAIL: $prog not built"; exit 1; }

echo "== protocol run (${secs}s): expect 0 violations"
"$prog" --readers 4 --seconds "$secs"
rc=$?
if [ $rc -ne 0 ]; then
	echo "FAIL: stress_shm exited $rc (1 = violations, 3 = exercised nothing)"
	exit 1
fi

echo "== broken control (up to ${broken_secs}s): the checker must catch premature reclamation"
"$prog" --readers 4 --seconds "$broken_secs" --broken
rc=$?
if [ $rc -ne 1 ]; then
	echo "FAIL: --broken run exited $rc; expected 1 (violations detected)"
	exit 1
fi
echo "PASS: protocol clean, broken control caught"
exit 0
