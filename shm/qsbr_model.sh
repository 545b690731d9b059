#!/bin/sh
# Model-checks shm/qsbr.pml with spin: the protocol must verify with 0 errors, and every
# negative control (a deliberately broken variant) must be caught by the assertion.
set -u
src="${top_srcdir:-.}/shm/qsbr.pml"
spin="${SPIN:-}"
[ -n "$spin" ] || spin=$(command -v spin 2>/dev/null || true)
if [ -z "$spin" ]; then
	echo "FAIL: spin (the Promela model checker) not found; install the Debian package" \
	     "'spin' (scripts/setup.sh does) - this test does not skip"
	exit 1
fi
cc="${CC_FOR_PAN:-gcc}"
command -v "$cc" >/dev/null 2>&1 || { echo "FAIL: $cc not found (needed to compile pan.c)"; exit 1; }
[ -r "$src" ] || { echo "FAIL: $src missing"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/qsbr-pml.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cp "$src" "$tmp/qsbr.pml"

# run VARIANT_DEFINE -> prints pan's summary, sets $out
run() {
	(cd "$tmp" && rm -f pan pan.* && "$spin" -a $1 qsbr.pml >spin.log 2>&1 &&
	 "$cc" -O2 -DSAFETY -w -o pan pan.c >cc.log 2>&1 &&
	 ./pan -m200000 >pan.log 2>&1)
	out=$(cat "$tmp/pan.log" 2>/dev/null)
}

status=0
run ""
errs=$(printf '%s\n' "$out" | sed -n 's/.*errors: \([0-9]*\).*/\1/p')
states=$(printf '%s\n' "$out" | sed -n 's/^ *\([0-9e.+]*\) states, stored.*/\1/p')
if [ "$errs" = "0" ] && ! printf '%s\n' "$out" | grep -q 'max search depth too small'; then
	echo "ok: protocol verifies (0 errors, $states states)"
else
	echo "FAIL: protocol model: errors=${errs:-?}"
	printf '%s\n' "$out" | tail -20
	cat "$tmp/spin.log" "$tmp/cc.log" 2>/dev/null | tail -10
	status=1
fi

for bug in BUG_TOKEN_MINUS_ONE BUG_READ_BEFORE_ONLINE BUG_BUMP_BEFORE_SWAP BUG_ZERO_ON_TIMEOUT; do
	run "-D$bug"
	if printf '%s\n' "$out" | grep -q 'assertion violated'; then
		echo "ok: negative control $bug caught"
	else
		echo "FAIL: negative control $bug NOT caught by the model"
		printf '%s\n' "$out" | tail -10
		status=1
	fi
done
exit $status
