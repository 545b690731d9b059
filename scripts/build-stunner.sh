#!/bin/sh
# Builds (once) STUNner's stunnerd and turncat, and the Go test programs of tests/stunner, from
# the Go module tests/stunner (STUNner pinned in its go.mod/go.sum, fetched through the Go
# module proxy, never vendored), and pion-ice from the nested module tests/stunner/pion
# (pion/webrtc v4 pinned in its own go.mod/go.sum, so that it does not move the versions
# stunnerd is built with), and prints the directory that holds the programs.
#
# usage: scripts/build-stunner.sh [--offline]
#   --offline  never reach the network (GOPROXY=off): the tests use this, after
#              scripts/setup.sh fetched the modules
#
# The programs live under $TG_STUNNER_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/turngate/stunner),
# in a directory named by a key over the module's files and the Go version, so a changed pin
# builds anew and an unchanged one is reused without running the Go build. A build goes to a
# temporary directory renamed when complete, under flock. Go: $GO, else `go` on PATH, else
# /usr/local/go/bin/go (Go >= 1.25, what STUNner v1.2.1 asks for). Exit 1 with the reason
# when there is no such Go or the build fails (the Go command's own error, e.g. the module
# proxy's refusal).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
mod="$here/tests/stunner"
offline=0
[ "${1:-}" = --offline ] && offline=1

die() {
	echo "build-stunner: $*" >&2
	exit 1
}

go=${GO:-}
if [ -z "$go" ]; then
	if command -v go >/dev/null 2>&1; then
		go=$(command -v go)
	elif [ -x /usr/local/go/bin/go ]; then
		go=/usr/local/go/bin/go
	else
		die "no Go toolchain (go on PATH, /usr/local/go/bin/go or \$GO); STUNner v1.2.1 needs Go >= 1.25"
	fi
fi
# A toolchain the module cannot use would try to download another: say so instead.
export GOTOOLCHAIN=local
gover=$("$go" env GOVERSION 2>/dev/null) || die "$go does not run"
case "$gover" in
go1.2[5-9]* | go1.[3-9][0-9]* | go[2-9]*) ;;
*) die "$go is $gover; STUNner v1.2.1 needs Go >= 1.25" ;;
esac

cache=${TG_STUNNER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/turngate/stunner}
key=$( (echo "$gover"; cd "$mod" &&
	find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) |
	LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -c1-16)
out="$cache/$key"
progs="stunnerd turncat stunner-validate stunner-cds pion-ice"

ready() {
	for p in $progs; do
		[ -x "$out/$p" ] || return 1
	done
}

if ! ready; then
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	if ! ready; then
		tmp=$(mktemp -d "$cache/.build.XXXXXX")
		trap 'rm -rf "$tmp"' EXIT
		if [ $offline -eq 1 ]; then
			export GOPROXY=off
		fi
		# -mod=readonly: go.sum is the pin; a module it does not list is an error, never added.
		(cd "$mod" && "$go" build -mod=readonly -trimpath -o "$tmp/" \
			github.com/l7mp/stunner/cmd/stunnerd github.com/l7mp/stunner/cmd/turncat \
			./cmd/...) >&2 || die "the Go build of tests/stunner failed (see above)"
		(cd "$mod/pion" && "$go" build -mod=readonly -trimpath -o "$tmp/pion-ice" .) >&2 ||
			die "the Go build of tests/stunner/pion failed (see above)"
		rm -rf "$out"
		mv "$tmp" "$out"
		trap - EXIT
	fi
fi
echo "$out"
