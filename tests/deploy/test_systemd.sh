#!/bin/sh
# tests/deploy/test_systemd.sh: checks the generated systemd unit with systemd-analyze and against the example config.
#
# The generated unit names the installed binary (@bindir@), which does not exist during
# make check, so a copy pointing at the build tree's turngated and turngatectl is verified;
# everything else in the copy is byte for byte the unit `make install` installs.
set -eu

: "${top_builddir:?top_builddir must be set (run through make check)}"
: "${top_srcdir:?top_srcdir must be set (run through make check)}"

unit="$top_builddir/deploy/systemd/turngate.service"
example="$top_srcdir/deploy/turngate.yaml.in"
daemon="$top_builddir/turngated"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tg-systemd.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
failures=0

fail() {
	echo "FAIL: $*" >&2
	failures=$((failures + 1))
}

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "FAIL: systemd-analyze not found; install the Debian package 'systemd'" >&2
	exit 1
fi
[ -f "$unit" ] || { echo "FAIL: $unit was not generated (make all)" >&2; exit 1; }
[ -x "$daemon" ] || { echo "FAIL: $daemon is not built" >&2; exit 1; }

# Every @var@ must have been substituted.
if grep -n '@[a-z_]*@' "$unit" >&2; then
	fail "unsubstituted @variables@ left in $unit"
fi

# value KEY: the last value of KEY= in the unit (systemd's "last one wins" for scalars).
value() {
	sed -n "s/^$1=//p" "$unit" | tail -n 1
}

installed=$(value ExecStart | cut -d' ' -f1)
case "$installed" in
/*/turngated) ;;
*) fail "ExecStart does not run an absolute .../turngated: '$installed'" ;;
esac

# 1. systemd-analyze verify on the unit, pointed at the build tree's binary. verify exits 0
# on unknown keys and bad values (it only warns), so any output at all is a failure.
abs_build=$(cd "$(dirname "$daemon")" && pwd)
sed -e "s|$installed|$abs_build/turngated|g" \
	-e "s|$(dirname "$installed")/turngatectl|$abs_build/turngatectl|g" \
	"$unit" > "$tmp/turngate.service"
if ! systemd-analyze verify --man=no "$tmp/turngate.service" > "$tmp/verify.out" 2>&1; then
	cat "$tmp/verify.out" >&2
	fail "systemd-analyze verify exited non-zero"
elif [ -s "$tmp/verify.out" ]; then
	cat "$tmp/verify.out" >&2
	fail "systemd-analyze verify printed warnings"
fi

# 2. The hardening as systemd scores it (0 = fully locked down, 10 = none). The unit scores
# 1.7 on systemd 252; 2.0 leaves room for scoring changes but catches a dropped option.
if ! systemd-analyze security --offline=yes --threshold=20 "$tmp/turngate.service" \
	> "$tmp/security.out" 2>&1; then
	grep -E 'Overall|✗' "$tmp/security.out" >&2 || cat "$tmp/security.out" >&2
	fail "systemd-analyze security: exposure above 2.0"
fi

# 3. Settings the daemon's behaviour depends on.
expect() {
	got=$(value "$1")
	[ "$got" = "$2" ] || fail "$1 is '$got', expected '$2' ($3)"
}
expect Type notify "the master sends READY=1 (tests/deploy/test_notify.py)"
expect NotifyAccess main "only the master notifies (tests/deploy/test_notify.py)"
expect KillMode mixed "SIGTERM to the master only, which drains and stops its workers"
expect ExecReload "$(dirname "$installed")/turngatectl reload" \
	"reload through the admin socket: no /bin/kill on a minimal system, and a refused config fails the reload"
expect AmbientCapabilities CAP_NET_BIND_SERVICE "the only capability"
expect CapabilityBoundingSet CAP_NET_BIND_SERVICE "the only capability"
expect NoNewPrivileges yes "hardening"
expect ProtectSystem strict "hardening"
expect RuntimeDirectory turngate "admin socket directory"
[ -n "$(value WatchdogSec)" ] || fail "WatchdogSec is not set"

# 4. The unit and the example config agree: TimeoutStopSec covers the drain plus the
# master's worker stop grace, and LimitNOFILE covers two descriptors per relay port.
cfg_num() {
	sed -n "s/^ *$1: *\"\{0,1\}\([0-9][0-9]*\)\"\{0,1\} *\(#.*\)\{0,1\}$/\1/p" "$example" | head -n 1
}
drain=$(cfg_num drain_timeout)
pmin=$(cfg_num relay_port_min)
pmax=$(cfg_num relay_port_max)
[ -n "$drain" ] && [ -n "$pmin" ] && [ -n "$pmax" ] ||
	fail "example config lacks drain_timeout/relay_port_min/relay_port_max"
stop=$(value TimeoutStopSec)
nofile=$(value LimitNOFILE)
case "$stop" in *[!0-9]* | "") fail "TimeoutStopSec '$stop' is not plain seconds"; stop=0 ;; esac
case "$nofile" in *[!0-9]* | "") fail "LimitNOFILE '$nofile' is not a number"; nofile=0 ;; esac
if [ -n "$drain" ] && [ "$stop" -lt $((drain + 15)) ]; then
	fail "TimeoutStopSec=$stop < drain_timeout $drain + 15 s: systemd would SIGKILL mid-drain"
fi
if [ -n "$pmin" ] && [ -n "$pmax" ] && [ "$nofile" -lt $((2 * (pmax - pmin + 1))) ]; then
	fail "LimitNOFILE=$nofile < 2 x relay ports ($pmin-$pmax)"
fi
# The fd store keeps TURN-TCP and RFC 6062 connections across a crash restart
# (tests/integration/test_fdstore_restart.py): room for as many as a process may hold.
fdmax=$(value FileDescriptorStoreMax)
case "$fdmax" in *[!0-9]* | "") fail "FileDescriptorStoreMax '$fdmax' is not a number"; fdmax=0 ;; esac
if [ "$fdmax" -lt "$nofile" ]; then
	fail "FileDescriptorStoreMax=$fdmax < LimitNOFILE=$nofile: a crash restart would drop the stream connections past it"
fi

# 5. The unit's ExecStartPre check passes on the example config (paths moved to a temp dir).
mkdir "$tmp/etc"
echo test-secret > "$tmp/etc/secret"
echo test-secret > "$tmp/etc/previous-secret"
sed "s|@sysconfdir@/turngate/|$tmp/etc/|g" "$example" > "$tmp/etc/turngate.yaml"
if ! STUNNER_ADDR=127.0.0.1 "$daemon" -c "$tmp/etc/turngate.yaml" -t > "$tmp/t.out" 2>&1 ||
	! grep -qx 'configuration ok' "$tmp/t.out"; then
	cat "$tmp/t.out" >&2
	fail "the example config does not pass turngated -t"
fi

# 6. The sysusers entry creates the user the unit runs as.
sysusers="$top_srcdir/deploy/systemd/sysusers/turngate.conf"
user=$(value User)
grep -q "^u $user " "$sysusers" || fail "User=$user has no 'u $user' line in $sysusers"

if [ "$failures" -ne 0 ]; then
	echo "test_systemd: $failures failure(s)" >&2
	exit 1
fi
echo "test_systemd: ok"
