#!/bin/sh
# build_base.sh: builds turngated as it was before the short circuit (issue 22), for
# bench/compare.py --base: "today's symmetric path", relayed out of one relay socket and in
# at the other.
#
# Usage: bench/build_base.sh [DIR [COMMIT]]
#   DIR     a git worktree of its own, made here (default /tmp/turngate-base); the build
#           tree is DIR/_build/default, as scripts/build.sh makes it
#   COMMIT  default: the parent of the commit that created worker/shortcut.c
#
# The configure build of scripts/build.sh (without its package check), but only turngated:
# compare.py runs the load generator of its own build tree against every server. Set NICE
# to change the priority of the build (default "nice -n 15"). Remove the worktree with
# `git worktree remove DIR` when done.
set -eu
dir=${1:-/tmp/turngate-base}
case $dir in
/*) ;;
*) dir=$(pwd)/$dir ;;
esac
cd "$(dirname "$0")/.."
if [ $# -ge 2 ]; then
	commit=$(git rev-parse --verify "$2^{commit}")
else
	first=$(git log --reverse --format=%H -- worker/shortcut.c | head -n 1)
	if [ -z "$first" ]; then
		echo "build_base: no commit created worker/shortcut.c in this history" >&2
		exit 1
	fi
	commit=$(git rev-parse "$first^")
fi
if [ -e "$dir" ]; then
	have=$(git -C "$dir" rev-parse HEAD 2>/dev/null || echo none)
	if [ "$have" != "$commit" ]; then
		echo "build_base: $dir exists at $have, not at $commit: remove it or pass another DIR" >&2
		exit 1
	fi
else
	git worktree add --detach "$dir" "$commit" >/dev/null
fi
cd "$dir"
if [ ! -x configure ]; then	# the worktree stays at its commit: once is enough
	${NICE:-nice -n 15} ./autogen.sh >/dev/null 2>&1 || ./autogen.sh
fi
mkdir -p _build/default
cd _build/default
if [ ! -f Makefile ]; then
	${NICE:-nice -n 15} "$dir/configure" -q
fi
${NICE:-nice -n 15} make -j"$(nproc)" turngated >/dev/null
echo "base: $(git log -1 --format='%h %s' | cut -c1-100)"
echo "base: turngated built in $dir/_build/default; run compare.py with --base $dir/_build/default"
