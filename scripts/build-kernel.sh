#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build (or reuse) the metaroce test kernel and print its build directory.
#
#   scripts/build-kernel.sh [debug|fast]
#
# debug (default): the config `make check` boots: KASAN, lockdep, kmemleak, ...
# fast:            the same without the debug options, for benchmarks and demos.
#
# The tree lives in $METAROCE_CACHE/linux-<version>-<variant>-<config hash>; a
# finished build is marked by .metaroce-built and reused as it is.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

variant=${1:-debug}
frags=("$TOP/scripts/kconfig/base.config")
case "$variant" in
debug) frags+=("$TOP/scripts/kconfig/debug.config") ;;
fast) ;;
*) die "unknown kernel variant '$variant' (debug or fast)" ;;
esac

tarball=$(ls /usr/src/linux-source-"$KVER_MAJOR".tar.* 2>/dev/null | head -n1) ||
	true
[ -n "$tarball" ] || die "no /usr/src/linux-source-$KVER_MAJOR.tar.*: run scripts/setup.sh"
# The full version (7.2.13) is recorded in the package, not the tarball name.
full=$(dpkg-query -W -f='${Version}' "linux-source-$KVER_MAJOR" | sed 's/-.*//')
# The key covers every input that changes the result.
hash=$(cat "${frags[@]}" "$TOP/scripts/build-kernel.sh" | sha256sum | cut -c1-12)
kdir="$METAROCE_CACHE/linux-$full-$variant-$hash"

if [ -f "$kdir/.metaroce-built" ]; then
	echo "$kdir"
	exit 0
fi

mkdir -p "$METAROCE_CACHE"
exec 9>"$METAROCE_CACHE/.build.lock"
flock 9
if [ -f "$kdir/.metaroce-built" ]; then
	echo "$kdir"
	exit 0
fi

log "building Linux $full ($variant) in $kdir"
rm -rf "$kdir"
mkdir -p "$kdir"
tar -xf "$tarball" -C "$kdir" --strip-components=1

mk() { make -C "$kdir" LLVM="$LLVM_SUFFIX" "$@"; }
mk -s rustavailable >&2 || die "Rust is not available for this kernel (see above)"
mk -s tinyconfig >&2
(cd "$kdir" && ./scripts/kconfig/merge_config.sh -m -O "$kdir" .config "${frags[@]}" >&2)
mk -s olddefconfig >&2

# merge_config.sh drops what it cannot set without a word: check every line.
bad=0
for f in "${frags[@]}"; do
	while IFS= read -r line; do
		case "$line" in
		CONFIG_*=*) grep -qx "$line" "$kdir/.config" && continue ;;
		"# CONFIG_"*" is not set")
			sym=${line#\# }
			sym=${sym%% *}
			grep -q "^$sym=" "$kdir/.config" || continue
			line="$sym=n" ;;
		*) continue ;;
		esac
		log "config: wanted $line, got: $(grep "^${line%%=*}=" "$kdir/.config" || echo 'not set')"
		bad=1
	done <"$f"
done
[ $bad = 0 ] || die "the kernel config does not hold the fragment (see above)"

start=$(date +%s)
mk -j"$(nproc)" bzImage modules >&2
log "kernel built in $(($(date +%s) - start)) s"
touch "$kdir/.metaroce-built"
echo "$kdir"
