#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build rdma-core 65.0 (libibverbs, librdmacm, every provider of that release,
# rxe's included) together with this project's provider (tools/provider) and
# install it under a prefix in the cache. Prints the prefix.
#
#   scripts/build-rdma-core.sh            build unless already built; print the prefix
#   scripts/build-rdma-core.sh --prefix   print the prefix; exit 1 if it is not built
#
# The provider plugin ABI is private to one rdma-core release, so libibverbs and
# all its providers come from this one build. Nothing is installed outside the
# cache: unmodified programs load this libibverbs through scripts/rdma-env.sh
# (LD_LIBRARY_PATH). See Documentation/abi.md.
#
# The source is Debian's orig tarball of rdma-core 65.0 (sid), fetched with
# `apt-get source --download-only` (needs the sid deb-src line scripts/setup.sh
# adds; the .dsc 404s, the tarball downloads, its hash is checked here).
#
# The prefix is $METAROCE_CACHE/rdma-core-65.0-<hash>/prefix, where the hash
# covers tools/provider/providers, uapi/rdma/metaroce-abi.h and RECIPE below:
# a change to any of them builds a new prefix beside the old one.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

RDMA_CORE_VER=65.0
RDMA_CORE_DEB=65.0-1.1
RDMA_CORE_SHA256=f6ba3d8b2c4aa334c5c883c1ad0772de339011123cff4fb1db32ae7a443fb7ca
# Bump when the configure options or the patching below change.
RECIPE=2

BUILD_DEPS=(cmake ninja-build pkg-config gcc libc6-dev python3
	libnl-3-dev libnl-route-3-dev libudev-dev)

inputs_hash() {
	(
		cd "$TOP"
		printf 'rdma-core %s recipe %s\n' "$RDMA_CORE_VER" "$RECIPE"
		find tools/provider/providers -type f -print0 | LC_ALL=C sort -z |
			xargs -0 sha256sum
		sha256sum uapi/rdma/metaroce-abi.h
	) | sha256sum | cut -c1-12
}

dir="$METAROCE_CACHE/rdma-core-$RDMA_CORE_VER-$(inputs_hash)"
prefix="$dir/prefix"
stamp="$prefix/.metaroce-built"

if [ "${1:-}" = --prefix ]; then
	[ -f "$stamp" ] || { log "rdma-core is not built for this tree: run make provider"; exit 1; }
	echo "$prefix"
	exit 0
fi
[ $# -eq 0 ] || die "usage: $0 [--prefix]"

if [ -f "$stamp" ]; then
	echo "$prefix"
	exit 0
fi

mkdir -p "$METAROCE_CACHE"
exec 9>"$METAROCE_CACHE/rdma-core.lock"
flock 9
# Another run may have finished it while we waited.
if [ -f "$stamp" ]; then
	echo "$prefix"
	exit 0
fi

SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo

install_deps() {
	local missing=() p
	for p in "${BUILD_DEPS[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
			missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing: ${missing[*]}"
		DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q \
			--no-install-recommends "${missing[@]}"
	fi
}

fetch_tarball() {
	local tarball="$METAROCE_CACHE/rdma-core_$RDMA_CORE_VER.orig.tar.gz" tmp
	if [ -f "$tarball" ] &&
	   echo "$RDMA_CORE_SHA256  $tarball" | sha256sum -c --status; then
		echo "$tarball"
		return
	fi
	if ! apt-cache showsrc rdma-core 2>/dev/null | grep -qx "Version: $RDMA_CORE_DEB"; then
		[ -f /etc/apt/sources.list.d/metaroce.sources ] ||
			die "no deb-src line for sid: run scripts/setup.sh first"
		$SUDO apt-get update -q >&2
	fi
	tmp=$(mktemp -d "$METAROCE_CACHE/rdma-core-src.XXXXXX")
	log "downloading rdma-core_$RDMA_CORE_VER.orig.tar.gz (Debian sid source)"
	# The .dsc and the Debian tarball 404; only the orig tarball is needed.
	(cd "$tmp" && apt-get source -q --download-only -o APT::Sandbox::User=root \
		"rdma-core=$RDMA_CORE_DEB" >&2) || true
	[ -f "$tmp/rdma-core_$RDMA_CORE_VER.orig.tar.gz" ] ||
		die "apt-get source did not fetch rdma-core_$RDMA_CORE_VER.orig.tar.gz"
	echo "$RDMA_CORE_SHA256  $tmp/rdma-core_$RDMA_CORE_VER.orig.tar.gz" |
		sha256sum -c --status || die "rdma-core_$RDMA_CORE_VER.orig.tar.gz: wrong sha256"
	mv "$tmp/rdma-core_$RDMA_CORE_VER.orig.tar.gz" "$tarball"
	rm -rf "$tmp"
	echo "$tarball"
}

start=$(date +%s)
install_deps
tarball=$(fetch_tarball)

# A directory without the stamp is a failed or interrupted build: start over.
rm -rf "$dir"
mkdir -p "$dir/src"
log "building rdma-core $RDMA_CORE_VER with the metaroce provider in $dir"
tar -xzf "$tarball" -C "$dir/src" --strip-components=1

# The provider, and the ABI header it includes as <rdma/metaroce-abi.h>.
cp -r "$TOP/tools/provider/providers/metaroce" "$dir/src/providers/metaroce"
mkdir -p "$dir/src/providers/metaroce/uapi/rdma"
cp "$TOP/uapi/rdma/metaroce-abi.h" "$dir/src/providers/metaroce/uapi/rdma/"
sed -i 's|^add_subdirectory(providers/siw)$|&\nadd_subdirectory(providers/metaroce)|' \
	"$dir/src/CMakeLists.txt"
grep -qx 'add_subdirectory(providers/metaroce)' "$dir/src/CMakeLists.txt" ||
	die "could not add providers/metaroce to rdma-core's CMakeLists.txt"

# Debian bookworm's ibv_devinfo (rdma-core 44) binds one private symbol,
# ibv_query_gid_type@IBVERBS_PRIVATE_34, which 65 exports only as
# @IBVERBS_PRIVATE_65. Its signature and enum are the same in both releases:
# export it under the old version as well, so that program loads this library.
cat >>"$dir/src/libibverbs/verbs.c" <<'EOF'

/* Added by metaroce's scripts/build-rdma-core.sh: rdma-core 44's
 * ibv_devinfo binds ibv_query_gid_type@IBVERBS_PRIVATE_34. */
int __ibv_query_gid_type_private_34(struct ibv_context *context,
				    uint8_t port_num, unsigned int index,
				    enum ibv_gid_type_sysfs *type);
__asm__(".symver __ibv_query_gid_type_private_34, ibv_query_gid_type@IBVERBS_PRIVATE_34");
int __ibv_query_gid_type_private_34(struct ibv_context *context,
				    uint8_t port_num, unsigned int index,
				    enum ibv_gid_type_sysfs *type)
{
	return ibv_query_gid_type(context, port_num, index, type);
}
EOF
printf '\n/* Added by metaroce: see the end of verbs.c */\nIBVERBS_PRIVATE_34 {\n};\n' \
	>>"$dir/src/libibverbs/libibverbs.map.in"

log "configuring (log: $dir/build.log)"
# Release (-O2 -g -DNDEBUG) as Debian builds it. Every install path is under
# the prefix: SYSUSERS_DIR would otherwise be systemd's /usr/lib/sysusers.d and
# CMAKE_INSTALL_SYSTEMD_BINDIR /lib/systemd.
# The paths libibverbs compiles in come from here: IBV_CONFIG_DIR is
# $prefix/etc/libibverbs.d, VERBS_PROVIDER_DIR $prefix/lib/libibverbs.
if ! cmake -GNinja -S "$dir/src" -B "$dir/build" \
	-DCMAKE_BUILD_TYPE=Release \
	-DCMAKE_INSTALL_PREFIX="$prefix" \
	-DCMAKE_INSTALL_LIBDIR=lib \
	-DCMAKE_INSTALL_SYSCONFDIR=etc \
	-DCMAKE_INSTALL_RUNDIR=var/run \
	-DCMAKE_INSTALL_SYSTEMD_BINDIR="$prefix/lib/systemd" \
	-DSYSUSERS_DIR="$prefix/lib/sysusers.d" \
	-DNO_MAN_PAGES=1 -DNO_PYVERBS=1 -DENABLE_STATIC=0 \
	>"$dir/build.log" 2>&1; then
	tail -30 "$dir/build.log" >&2
	die "cmake failed; log: $dir/build.log"
fi

log "compiling"
if ! ninja -C "$dir/build" >>"$dir/build.log" 2>&1; then
	grep -E 'error|FAILED' "$dir/build.log" | head -30 >&2
	die "build failed; log: $dir/build.log"
fi
if grep -q 'providers/metaroce/.*warning:' "$dir/build.log"; then
	grep -A3 'providers/metaroce/.*warning:' "$dir/build.log" >&2
	die "the metaroce provider compiles with warnings; log: $dir/build.log"
fi

# Install into a staging root first: anything that would land outside the
# prefix shows up there, and then nothing is installed at all.
stage="$dir/stage"
if ! DESTDIR="$stage" ninja -C "$dir/build" install >>"$dir/build.log" 2>&1; then
	tail -30 "$dir/build.log" >&2
	die "install failed; log: $dir/build.log"
fi
outside=$(cd "$stage" && find . \( -type f -o -type l \) | sed 's|^\.||' |
	grep -v "^$prefix/" || true)
[ -z "$outside" ] || die "install would write outside the prefix: $outside"
mv "$stage$prefix" "$prefix"
rm -rf "$stage"

for f in lib/libibverbs.so.1 lib/librdmacm.so.1 \
	lib/libibverbs/librxe-rdmav*.so lib/libibverbs/libmetaroce-rdmav*.so \
	etc/libibverbs.d/metaroce.driver etc/libibverbs.d/rxe.driver; do
	compgen -G "$prefix/$f" >/dev/null || die "not installed: $prefix/$f"
done

# The Debian programs this build is for must resolve every symbol version.
for p in ibv_devices ibv_devinfo ibv_rc_pingpong ib_write_bw rping; do
	p=$(command -v "$p") || continue
	if LD_LIBRARY_PATH="$prefix/lib" ldd "$p" 2>&1 | grep -q 'not found'; then
		LD_LIBRARY_PATH="$prefix/lib" ldd "$p" >&2
		die "$p does not load with $prefix/lib"
	fi
done

{
	echo "rdma-core $RDMA_CORE_VER (Debian $RDMA_CORE_DEB orig tarball) + metaroce provider"
	echo "inputs hash: $(inputs_hash)"
	echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(($(date +%s) - start)) s"
} >"$stamp"
log "built in $(($(date +%s) - start)) s"
echo "$prefix"
