#!/bin/sh
# The STUNner corpus (tests/conf/stunner/MANIFEST): every config stunnerd accepts passes
# `turngated -t` with and without a pod's environment; each one stunnerd refuses is refused
# with its first error at the FILE:LINE:COL the manifest names. Skips (77) without turngated.
set -u
bin="${top_builddir:-.}/turngated"
dir="${top_srcdir:-.}/tests/conf/stunner"
[ -x "$bin" ] || { echo "skip: $bin not built"; exit 77; }
fail=0

# A stunnerd pod's environment: the downward API (l7mp/stunner-gateway-operator
# internal/renderer/dataplane_util.go) plus the ConfigMap of l7mp/stunner
# deploy/manifests/stunner-local.yaml that the image's default stunnerd.conf reads.
pod_env="STUNNER_ADDR=10.0.0.1 STUNNER_NAME=gateway-1 STUNNER_NAMESPACE=testnamespace
STUNNER_NODENAME=node-1 STUNNER_PUBLIC_ADDR=1.2.3.4 STUNNER_PUBLIC_PORT=3478
STUNNER_PORT=3478 STUNNER_REALM=stunner.l7mp.io STUNNER_AUTH_TYPE=plaintext
STUNNER_USERNAME=12user34 STUNNER_PASSWORD=43passWord21
STUNNER_SHARED_SECRET=my-shared-secret STUNNER_LOGLEVEL=all:INFO STUNNER_MIN_PORT=10000
STUNNER_MAX_PORT=20000"

# $1 file, $2 expectation (ok | error@LINE:COL), $3 "bare" or "pod"
run_one() {
	if [ "$3" = pod ]; then
		# shellcheck disable=SC2086
		out=$(env -i PATH="$PATH" ${ASAN_OPTIONS:+ASAN_OPTIONS="$ASAN_OPTIONS"} \
			${UBSAN_OPTIONS:+UBSAN_OPTIONS="$UBSAN_OPTIONS"} $pod_env \
			timeout 20 "$bin" -c "$dir/$1" -t 2>&1)
	else
		out=$(env -i PATH="$PATH" ${ASAN_OPTIONS:+ASAN_OPTIONS="$ASAN_OPTIONS"} \
			${UBSAN_OPTIONS:+UBSAN_OPTIONS="$UBSAN_OPTIONS"} \
			timeout 20 "$bin" -c "$dir/$1" -t 2>&1)
	fi
	rc=$?
	last=$(printf '%s\n' "$out" | tail -n 1)
	case "$2" in
	ok)
		[ $rc -eq 0 ] && [ "$last" = "configuration ok" ] && return 0 ;;
	error@*)
		first=$(printf '%s\n' "$out" | grep -v ': warning: ' | head -n 1)
		case "$first" in
		"$dir/$1:${2#error@}: "*) [ $rc -eq 1 ] && return 0 ;;
		esac ;;
	esac
	echo "FAIL: $1 ($3 environment): expected $2, rc=$rc"
	printf '%s\n' "$out"
	return 1
}

listed=" "
while read -r file bare pod _origin; do
	case "$file" in ''|'#'*) continue ;; esac
	[ -f "$dir/$file" ] || { echo "FAIL: $file is in MANIFEST but missing"; fail=1; continue; }
	listed="$listed$file "
	run_one "$file" "$bare" bare || fail=1
	run_one "$file" "$pod" pod || fail=1
done < "$dir/MANIFEST"
for f in "$dir"/*; do
	name=${f##*/}
	[ "$name" = MANIFEST ] && continue
	case "$listed" in *" $name "*) ;; *) echo "FAIL: $name is not in MANIFEST"; fail=1 ;; esac
done
exit $fail
