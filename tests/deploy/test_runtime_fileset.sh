#!/bin/sh
# tests/deploy/test_runtime_fileset.sh: runs turngated from the container runtime file set to catch a missing library.
#
# No container engine runs here, so the runtime stage of deploy/container/Dockerfile is
# reproduced from this host's dpkg database: the packages of its RUNTIME_PACKAGES line plus
# libc6 and everything they Depend on (what apt installs into bookworm-slim), keeping only
# their shared libraries, plus the binaries its COPY lines name. The build tree's binaries
# stand in for the installed ones. Then:
#   1. every library `ldd` lists must be owned by a package of that closure;
#   2. the dynamic loader, restricted to the file set, must resolve every library inside it;
#   3. turngated -t, run by that loader, must accept the image's config;
#   4. the check must notice when libev4 is left out (so it can fail at all).
set -eu

: "${top_builddir:?top_builddir must be set (run through make check)}"
: "${top_srcdir:?top_srcdir must be set (run through make check)}"

dockerfile="$top_srcdir/deploy/container/Dockerfile"
example="$top_srcdir/deploy/turngate.yaml.in"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tg-fileset.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

die() {
	echo "FAIL: $*" >&2
	exit 1
}

for tool in dpkg dpkg-query ldd; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool not found (this test needs a Debian host)"
done

# ---- what the Dockerfile's runtime stage contains -------------------------------------
pkgs=$(sed -n 's/^ARG RUNTIME_PACKAGES="\([^"]*\)"[[:space:]]*$/\1/p' "$dockerfile")
[ -n "$pkgs" ] || die "no one-line ARG RUNTIME_PACKAGES=\"...\" in $dockerfile"
bins=$(sed -n 's|^COPY --from=build \(.*\) /usr/local/bin/[[:space:]]*$|\1|p' "$dockerfile" |
	tr ' ' '\n' | sed -n 's|^/out/usr/local/bin/\([A-Za-z0-9_.-]*\)$|\1|p')
[ -n "$bins" ] || die "no 'COPY --from=build /out/usr/local/bin/... /usr/local/bin/' in $dockerfile"
case " $(echo $bins) " in *" turngated "*) ;; *) die "the runtime stage does not copy turngated" ;; esac
for b in $bins; do
	[ -x "$top_builddir/$b" ] || die "$top_builddir/$b is not built (the image copies it)"
done
echo "runtime packages: $pkgs"
echo "binaries: $(echo $bins)"

# ---- dependency closure (Pre-Depends and Depends, first installed alternative) ----------
installed() {
	[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}
for p in $pkgs; do
	installed "$p" || die "runtime package $p (from $dockerfile) is not installed here; apt-get install $p"
done
# deps PKG: one line per dependency, alternatives separated by spaces, versions and
# architecture qualifiers stripped.
deps() {
	dpkg-query -W -f='${Pre-Depends}, ${Depends}\n' "$1" | tr ',' '\n' |
		sed -e 's/([^)]*)//g' -e 's/:[a-z0-9]*//g' -e 's/|/ /g' -e 's/^ *//' -e 's/ *$//' |
		sed '/^$/d'
}
# A --enable-sanitizers build links the sanitizer runtimes, which the image's build (plain
# configure) never does: their packages (and, through the closure, their dependencies)
# join the file set, with a note, so the rest of the check still applies.
extra=""
for b in $bins; do
	for lib in $(ldd "$top_builddir/$b" | sed -n 's/.*=> \(\/[^ ]*lib[a-z]*san\.so[^ ]*\) (.*/\1/p'); do
		o=$(dpkg-query -S "$lib" 2>/dev/null | head -n 1 | cut -d: -f1) || o=""
		[ -n "$o" ] || o=$(dpkg-query -S "/usr$lib" 2>/dev/null | head -n 1 | cut -d: -f1) || o=""
		case " $extra " in *" $o "*) ;; *) extra="$extra $o" ;; esac
	done
done
extra=$(echo $extra)
[ -z "$extra" ] || echo "note: sanitizer build; adding its runtime packages: $extra"
closure=" "
todo="$pkgs libc6 $extra"
while [ -n "$todo" ]; do
	set -- $todo
	p=$1
	shift
	todo="$*"
	case "$closure" in *" $p "*) continue ;; esac
	closure="$closure$p "
	deps "$p" > "$tmp/deps"
	while read -r alts; do
		pick=""
		for a in $alts; do
			if installed "$a"; then
				pick=$a
				break
			fi
		done
		# Unresolved virtual packages (debconf-2.0 and the like) carry no libraries.
		[ -n "$pick" ] && todo="$todo $pick"
	done < "$tmp/deps"
done
echo "closure: $(echo $closure | wc -w) packages"

# ---- 1. every library the binaries need comes from the closure -------------------------
owner() {
	o=$(dpkg-query -S "$1" 2>/dev/null | head -n 1 | cut -d: -f1) || o=""
	if [ -z "$o" ]; then
		# merged /usr: dpkg knows /lib/... while the loader may report /usr/lib/..., or back
		case "$1" in
		/usr/lib/*) alt=${1#/usr} ;;
		/lib/* | /lib64/*) alt=/usr$1 ;;
		*) alt="" ;;
		esac
		[ -n "$alt" ] && o=$(dpkg-query -S "$alt" 2>/dev/null | head -n 1 | cut -d: -f1)
	fi
	echo "${o:-}"
}
bad=0
for b in $bins; do
	ldd "$top_builddir/$b" > "$tmp/ldd" 2>&1 || { cat "$tmp/ldd" >&2; die "ldd $b failed"; }
	for lib in $(sed -n -e 's/.*=> \(\/[^ ]*\) (.*/\1/p' -e 's/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p' "$tmp/ldd"); do
		o=$(owner "$lib")
		if [ -z "$o" ]; then
			echo "FAIL: $b needs $lib, which no Debian package owns" >&2
			bad=1
		else
			case "$closure" in
			*" $o "*) ;;
			*)
				echo "FAIL: $b needs $lib from package $o, which RUNTIME_PACKAGES does not bring in" >&2
				bad=1
				;;
			esac
		fi
	done
	if grep -q 'not found' "$tmp/ldd"; then
		grep 'not found' "$tmp/ldd" >&2
		bad=1
	fi
done
[ "$bad" -eq 0 ] || die "the runtime stage lacks libraries the binaries need"

# ---- the file set: the closure's shared libraries and the binaries -----------------------
root="$tmp/root"
mkdir -p "$root/usr/local/bin"
for p in $closure; do
	dpkg-query -L "$p" 2>/dev/null |
		grep -E '^/(usr/)?lib(64|x?32)?/([^/]+/)?[^/]*\.so(\.[0-9][0-9.]*)?$' || :
done | sort -u > "$tmp/libs"
[ -s "$tmp/libs" ] || die "the closure ships no shared libraries (dpkg database broken?)"
while read -r f; do
	[ -e "$f" ] || continue
	mkdir -p "$root${f%/*}"
	# A relative link stays a link; an absolute one would lead out of the file set, so
	# its target is copied instead.
	case "$(readlink "$f" || :)" in
	"" | /*) cp -L "$f" "$root$f" ;;
	*) cp -P "$f" "$root$f" ;;
	esac
done < "$tmp/libs"
for b in $bins; do
	cp "$top_builddir/$b" "$root/usr/local/bin/$b"
done
ld=$(find "$root" -name 'ld-linux*.so*' -type f | head -n 1)
[ -n "$ld" ] || die "no dynamic loader in the file set (libc6 files missing?)"
libpath=""
for d in $(sed -n 's|^\(.*\)/[^/]*$|\1|p' "$tmp/libs" | sort -u); do
	libpath="$libpath${libpath:+:}$root$d"
done

# check_set ROOT LIBPATH: every library of every binary resolves inside ROOT.
check_set() {
	rc=0
	for b in $bins; do
		if ! "$1/${ld#"$root"/}" --library-path "$2" --inhibit-cache --list \
			"$1/usr/local/bin/$b" > "$tmp/list" 2>&1; then
			echo "  $b: the loader could not resolve every library:" >&2
			sed 's/^/    /' "$tmp/list" >&2
			rc=1
			continue
		fi
		for lib in $(sed -n 's/.*=> \(\/[^ ]*\) (.*/\1/p' "$tmp/list"); do
			case "$lib" in
			"$1"/*) ;;
			*)
				echo "  $b: $lib resolved outside the file set" >&2
				rc=1
				;;
			esac
		done
		if grep -q 'not found' "$tmp/list"; then
			grep 'not found' "$tmp/list" | sed "s/^/  $b: /" >&2
			rc=1
		fi
	done
	return $rc
}

# ---- 2. the loader finds everything inside the file set -----------------------------------
check_set "$root" "$libpath" || die "a library the binaries need is not in the runtime file set"

# ---- 3. turngated runs from the file set and accepts the image's config ------------------
mkdir "$tmp/etc"
echo test-secret > "$tmp/etc/secret"
echo test-secret > "$tmp/etc/previous-secret"
sed "s|@sysconfdir@/turngate/|$tmp/etc/|g; s|@sysconfdir@|$tmp|g" "$example" > "$tmp/etc/turngate.yaml"
if ! STUNNER_ADDR=127.0.0.1 "$ld" --library-path "$libpath" --inhibit-cache \
	"$root/usr/local/bin/turngated" -c "$tmp/etc/turngate.yaml" -t > "$tmp/run" 2>&1; then
	cat "$tmp/run" >&2
	die "turngated -t failed when run from the runtime file set"
fi
grep -qx 'configuration ok' "$tmp/run" || { cat "$tmp/run" >&2; die "turngated -t did not print 'configuration ok'"; }
case " $(echo $bins) " in
*" turngatectl "*)
	"$ld" --library-path "$libpath" --inhibit-cache "$root/usr/local/bin/turngatectl" --help \
		> "$tmp/ctl" 2>&1 || { cat "$tmp/ctl" >&2; die "turngatectl --help failed from the file set"; }
	;;
esac

# ---- 4. the check notices a missing package (libev4: turngated links libev) -------------
cp -a "$root" "$tmp/root2"
dpkg-query -L libev4 | while read -r f; do
	[ -d "$tmp/root2$f" ] || rm -f "$tmp/root2$f"
done
libpath2=$(echo "$libpath" | sed "s|$root|$tmp/root2|g")
if check_set "$tmp/root2" "$libpath2" 2>/dev/null; then
	die "self-check: a file set without libev4 was accepted, so the check cannot catch a missing library"
fi

echo "test_runtime_fileset: ok ($(wc -l < "$tmp/libs") library files, loader $(basename "$ld"))"
