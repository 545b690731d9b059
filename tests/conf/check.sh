#!/bin/sh
# Config check through the daemon: `turngated -c FILE -t` accepts every sample and reports a
# broken config one problem per line with FILE:LINE:COL. Skips (77) when turngated is not built.
set -u
bin="${top_builddir:-.}/turngated"
src="${top_srcdir:-.}/tests/conf"
[ -x "$bin" ] || { echo "skip: $bin not built"; exit 77; }
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for f in headless.yaml media-plane.yaml multi-listener.json extensions.yaml; do
	out=$(STUNNER_ADDR=10.0.0.1 timeout 20 "$bin" -c "$src/$f" -t 2>&1)
	rc=$?
	last=$(printf '%s\n' "$out" | tail -n 1)
	# extensions.yaml asks for log_format: json, and -t answers in that format.
	case "$last" in
	"configuration ok" | *'"msg":"configuration ok"}') ok=1 ;;
	*) ok=0 ;;
	esac
	if [ $rc -ne 0 ] || [ $ok -ne 1 ]; then
		echo "FAIL: $f: rc=$rc"; printf '%s\n' "$out"; fail=1
	fi
done

cat > "$tmp/bad.yaml" <<'YAML'
version: v1
auth:
  type: static
  credentials: {username: u, password: p}
listeners:
  - {name: a, address: 192.0.2.1, port: 70000, routes: [nowhere]}
YAML
out=$(timeout 20 "$bin" -c "$tmp/bad.yaml" -t 2>&1)
rc=$?
want1="$tmp/bad.yaml:6:41: listeners[0].port: 70000 is out of range (1..65535)"
want2="$tmp/bad.yaml:6:57: warning: listeners[0].routes[0]: unknown cluster 'nowhere' (admits no peer until a cluster of that name exists)"
if [ $rc -ne 1 ] || ! printf '%s\n' "$out" | grep -qxF "$want1" ||
   ! printf '%s\n' "$out" | grep -qxF "$want2"; then
	echo "FAIL: bad.yaml: rc=$rc"; printf '%s\n' "$out"; fail=1
fi
exit $fail
