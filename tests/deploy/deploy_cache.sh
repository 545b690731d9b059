#!/bin/sh
# tests/deploy/deploy_cache.sh: builds (once) and prints the cached Debian trees and base image the boot and image tests use.
#
# usage: deploy_cache.sh base|boot|image|npm
#   base   a `debootstrap --variant=minbase bookworm` tree (what an operator's minimal Debian
#          12 has: no procps, no /bin/kill); prints its directory
#   boot   base plus systemd, dbus and the container's RUNTIME_PACKAGES, for
#          `systemd-nspawn --boot`; prints its directory
#   image  base imported into podman (no registry here); prints the image name
#   npm    tests/deploy/k8s-schema's packages (`npm ci` of its package-lock.json, keyed by
#          that file); prints the directory holding node_modules
#
# Everything lives under $TG_DEPLOY_CACHE (default /var/cache/turngate-test), named by a key
# over this script, the suite, the mirror and the package lists, so a changed list builds a
# new tree and an unchanged one is reused. A tree is built in a temporary directory and
# renamed when complete, under flock, so an interrupted build is never taken for a cached
# one. The mirror is the first deb.debian.org-style URI of the host's apt sources (Debian's
# mirror is the only place packages come from), or $TG_DEBIAN_MIRROR.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=${top_srcdir:-$(cd "$here/../.." && pwd)}
cache=${TG_DEPLOY_CACHE:-/var/cache/turngate-test}
suite=bookworm
what=${1:?usage: deploy_cache.sh base|boot|image|npm}

die() {
	echo "deploy_cache: $*" >&2
	exit 1
}

mirror() {
	if [ -n "${TG_DEBIAN_MIRROR:-}" ]; then
		echo "$TG_DEBIAN_MIRROR"
		return
	fi
	# deb822 "URIs: http://HOST/debian" or one-line "deb http://HOST/debian SUITE ...":
	# the first archive that is not the security one.
	cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
		2>/dev/null |
		sed -n -e 's/^URIs: *\(http[^ ]*\/debian\)\/*$/\1/p' \
			-e 's/^deb  *\(\[[^]]*\] *\)\{0,1\}\(http[^ ]*\/debian\)\/* .*/\2/p' |
		head -n 1
}

runtime_packages() {
	sed -n 's/^ARG RUNTIME_PACKAGES="\([^"]*\)"[[:space:]]*$/\1/p' \
		"$top_srcdir/deploy/container/Dockerfile"
}

BOOT_PACKAGES="systemd systemd-sysv dbus"

key() {
	{
		cat "$here/deploy_cache.sh"
		echo "$suite $(mirror) $BOOT_PACKAGES $(runtime_packages)"
	} | sha256sum | cut -c1-12
}

# build NAME FUNCTION [KEY]: runs FUNCTION DIR.tmp once, renames it to DIR; prints DIR.
build() {
	dir="$cache/$1-${3:-$(key)}"
	mkdir -p "$cache"
	exec 9>"$cache/.lock-$1"
	flock 9
	if [ ! -d "$dir" ]; then
		rm -rf "$dir.tmp"
		echo "deploy_cache: building $dir (once; reused while its key holds)" >&2
		"$2" "$dir.tmp" >&2 || { rm -rf "$dir.tmp"; die "building $1 failed"; }
		mv "$dir.tmp" "$dir"
	fi
	exec 9>&-
	echo "$dir"
}

make_base() {
	m=$(mirror)
	[ -n "$m" ] || die "no Debian mirror in /etc/apt/sources.list*; set TG_DEBIAN_MIRROR"
	debootstrap --variant=minbase "$suite" "$1" "$m"
	rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*
}

make_boot() {
	base=$("$here/deploy_cache.sh" base)
	cp -a "$base" "$1"
	# Not booted: nspawn as a chroot with /proc and /dev, on the host's network for apt.
	# shellcheck disable=SC2046
	systemd-nspawn -q --register=no --keep-unit -D "$1" --pipe \
		env DEBIAN_FRONTEND=noninteractive sh -c \
		"apt-get update -q && apt-get install -y -q --no-install-recommends $BOOT_PACKAGES $(runtime_packages) && apt-get clean && rm -rf /var/lib/apt/lists/*"
	# One machine id per boot copy is written by the test; a blank one here.
	: > "$1/etc/machine-id"
}

make_npm() {
	mkdir -p "$1"
	cp "$here/k8s-schema/package.json" "$here/k8s-schema/package-lock.json" "$1/"
	(cd "$1" && npm ci --no-audit --no-fund)
}

case "$what" in
npm) build npm make_npm "$(sha256sum < "$here/k8s-schema/package-lock.json" | cut -c1-12)" ;;
base) build base make_base ;;
boot) build boot make_boot ;;
image)
	name="localhost/turngate-test-base:$suite-$(key)"
	if ! podman image exists "$name"; then
		base=$("$here/deploy_cache.sh" base)
		echo "deploy_cache: importing $base as $name" >&2
		tar -C "$base" -c . | podman import - "$name" >&2
	fi
	echo "$name"
	;;
*) die "unknown artifact '$what' (base, boot, image or npm)" ;;
esac
