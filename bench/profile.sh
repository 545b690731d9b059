#!/bin/sh
# profile.sh: where turngated's worker spends its time per relayed packet (perf, loopback).
#
#   bench/profile.sh [BUILDDIR] [PAYLOAD] [SECONDS]     (run as root; needs perf)
#   LOAD="-m rate -n 400 -r 20000" bench/profile.sh ...  (another load; default closed loop)
#
# Starts turngated (1 worker, core 0), the echo peer and a closed-loop relay load (core 1),
# then records the worker with `perf record -e cpu-clock -g` and counts its system calls with
# `perf stat` on syscall tracepoints over the same window. Prints the relay result, the
# syscall counts and the top of `perf report`. Output files stay in $OUT (default a temp dir).
set -eu
B=${1:-$PWD}
PAYLOAD=${2:-172}
SECS=${3:-5}
TB=$B/bench/turnbench
OUT=${OUT:-$(mktemp -d /tmp/tgprof.XXXXXX)}
[ -x "$B/turngated" ] && [ -x "$TB" ] || { echo "build turngated and bench/turnbench in $B" >&2; exit 2; }
command -v perf >/dev/null || { echo "perf not installed" >&2; exit 2; }

cat >"$OUT/turngate.yaml" <<EOF
version: v1
admin:
  name: bench
  loglevel: all:INFO
  healthcheck_endpoint: ""
  admin_socket: $OUT/admin.sock
  workers: 1
  drain_timeout: 0
  relay_port_min: 40000
  relay_port_max: 59999
auth:
  type: static
  realm: bench
  credentials: {username: bench, password: bench}
listeners:
  - {name: udp, protocol: TURN-UDP, address: 127.0.0.1, port: 13478, routes: [echo]}
clusters:
  - {name: echo, type: STATIC, endpoints: [127.0.0.1]}
EOF

taskset -c 0 "$B/turngated" -c "$OUT/turngate.yaml" >"$OUT/turngated.log" 2>&1 &
TG=$!
taskset -c 1 "$TB" -m echo -d $((SECS + 60)) >"$OUT/echo.log" 2>&1 &
ECHO=$!
cleanup() { kill "$TG" "$ECHO" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE
sleep 1
WORKER=$(pgrep -P "$TG" | head -n 1)
[ -n "$WORKER" ] || { echo "no worker process under $TG" >&2; exit 1; }

# Load runs 2 s longer than the recording on both sides, so both see steady state only.
timeout $((SECS + 30)) taskset -c 1 "$TB" ${LOAD:--m relay -n 100 -W 256} -l "$PAYLOAD" -w 1 \
	-d $((SECS + 2)) -P "$TG" -E "$ECHO" >"$OUT/relay.txt" &
LOAD=$!
sleep 1.5
EV=$(for s in recvmmsg sendmmsg recvfrom sendto recvmsg sendmsg epoll_wait epoll_pwait \
	read write clock_gettime; do printf 'syscalls:sys_enter_%s,' $s; done)
timeout $((SECS + 10)) perf stat -e "${EV%,}" -p "$WORKER" -o "$OUT/syscalls.txt" -- sleep "$SECS" &
STAT=$!
timeout $((SECS + 10)) perf record -q -e cpu-clock -g -p "$WORKER" -o "$OUT/perf.data" -- sleep "$SECS" \
	>/dev/null 2>&1
wait "$STAT" || true
wait "$LOAD" || true
cat "$OUT/relay.txt"
grep -E 'syscalls:' "$OUT/syscalls.txt" | awk '{print $1, $2}'
perf report -i "$OUT/perf.data" --no-children --sort symbol --stdio 2>/dev/null | \
	grep -E '^ +[0-9]' | head -n 40
echo "turngated: default limits (no limits section; reflection protection on)"
echo "files in $OUT"
