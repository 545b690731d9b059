#!/bin/sh
# test_turnbench_opts.sh: turnbench rejects bad options with status 2 and runs its echo mode;
# no load, no timing (the benchmark itself is never run by make check).
set -u
TB=${top_builddir:-.}/bench/turnbench
fail=0

expect() {	# expect STATUS ARGS...: turnbench ARGS must exit with STATUS
	want=$1
	shift
	"$TB" "$@" >/dev/null 2>&1
	got=$?
	if [ "$got" != "$want" ]; then
		echo "FAIL: turnbench $* exited $got, expected $want"
		fail=1
	fi
}

expect 0 -h
expect 2 -m bogus
expect 2 -n 0
expect 2 -n 100001
expect 2 -l 8
expect 2 -l 70000
expect 2 -s 300.1.1.1:3478
expect 2 -s 127.0.0.1:70000
expect 2 -P 0
expect 2 -n 100 -W 10
expect 2 -m sym -n 3
expect 2 -m sym -n 100 -W 49
expect 2 -m tcp -l 170
expect 2 -m tcp -n 1001 -W 2000
expect 2 -m tcp -n 100 -W 10
expect 2 -m sym -c 1
expect 2 -d -1
expect 2 extra-argument

# Echo mode binds, reports, and ends by itself after -d seconds.
out=$("$TB" -m echo -p 127.0.0.1:0 -d 0.2 2>&1)
case "$out" in
*"echo ready"*"echo packets=0"*) ;;
*) echo "FAIL: echo mode said: $out"; fail=1 ;;
esac
exit $fail
