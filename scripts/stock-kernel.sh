#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Prepare a build directory for one of Debian's own (stock) kernels, so that
# metaroce.ko can be built for it, and print that directory.
#
#   scripts/stock-kernel.sh [--release KREL] [--headers DIR]   prepare, print KDIR
#   scripts/stock-kernel.sh toolchain                          install the rustc Debian used
#
# Why: Debian builds its kernel with CONFIG_RUST=y, but its linux-headers
# package has no Rust metadata (rust/*.rmeta, libmacros.so, scripts/target.json),
# and an out-of-tree Rust module is compiled against exactly that. This script
# regenerates it: `make modules_prepare` in linux-source-MAJOR of the same Debian
# version, with the headers' .config and generated headers and the rustc that
# Debian used, into KDIR (an O= output directory). Then it checks the result:
#   - the .config and the generated layout headers (bounds.h, asm-offsets.h,
#     rq-offsets.h, autoconf.h, rustc_cfg) are byte-identical to Debian's;
#   - the crate hashes of `core`, `kernel` and `pin_init` in the regenerated
#     crates equal the ones in the kernel's exports (Debian's Module.symvers).
#     rustc folds its own version string into these hashes, so a module built
#     by any other compiler refers to symbols the kernel does not have.
# Before anything is built, the rustc Debian used (CONFIG_RUSTC_VERSION_TEXT in
# the headers' .config) must be installed; if not, the script stops and says
# which toolchain to install.
#
# Which kernel:
#   --release KREL   an installed kernel's headers, /lib/modules/KREL/build (what
#                    DKMS passes), or --headers DIR;
#   (neither)        the Debian kernel built from the installed linux-source-MAJOR
#                    package: its headers, image and modules packages of the same
#                    version are downloaded and unpacked into the cache (not
#                    installed), for `make check-stock` to boot.
#
# Everything lives in $METAROCE_CACHE/stock-KREL-DEBVERSION/; a finished
# preparation is reused (warm: well under a second). Delete the directory to
# start again. KDIR holds metaroce-kbuild.mk (how to run Kbuild for this tree:
# the Makefile includes it when KDIR= is given) and metaroce-stock.env (what
# `make check-stock` needs to know).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

FLAVOUR=${METAROCE_STOCK_FLAVOUR:-amd64}

cmd=prepare
release=
headers=
while [ $# -gt 0 ]; do
	case "$1" in
	prepare | toolchain) cmd=$1 ;;
	--release) release=$2; shift ;;
	--headers) headers=$2; shift ;;
	*) die "usage: $0 [prepare|toolchain] [--release KREL] [--headers DIR]" ;;
	esac
	shift
done

apt_q() { apt-get -q -o APT::Sandbox::User=root "$@"; }

# config KEY: a value of the headers' .config, quotes removed.
config() { sed -n "s/^$1=\"\\{0,1\\}\\([^\"]*\\)\"\\{0,1\\}\$/\\1/p" "$headers/.config"; }

# --- Which kernel, which Debian version --------------------------------------

downloaded=0
if [ -z "$release" ] && [ -z "$headers" ]; then
	downloaded=1
	major=$KVER_MAJOR
	debver=$(dpkg-query -W -f='${Version}' "linux-source-$major" 2>/dev/null) ||
		die "linux-source-$major is not installed: run scripts/setup.sh"
	# linux-headers-FLAVOUR of that version depends on the ABI-named package.
	release=$(apt-cache show "linux-headers-$FLAVOUR=$debver" 2>/dev/null |
		sed -n 's/^Depends:.*linux-headers-\([^ ,]*-'"$FLAVOUR"'\) .*/\1/p' | head -n1)
	[ -n "$release" ] ||
		die "no linux-headers-$FLAVOUR=$debver in apt: Debian's kernel of linux-source-$major $debver is not in the archive (apt-get update?)"
	dir="$METAROCE_CACHE/stock-$release-$debver"
	headers="$dir/pkgs/usr/src/linux-headers-$release"
else
	[ -n "$headers" ] || headers=/lib/modules/$release/build
	[ -f "$headers/.config" ] ||
		die "no kernel headers at $headers: install linux-headers-$release"
	headers=$(readlink -f "$headers")
	[ -n "$release" ] || release=$(cat "$headers/include/config/kernel.release")
	# The Debian version is recorded in the headers themselves.
	debver=$(sed -n 's/.*LINUX_PACKAGE_ID " *Debian \([^"]*\)".*/\1/p' \
		"$headers/include/generated/package.h" 2>/dev/null)
	[ -n "$debver" ] || debver=$(dpkg-query -W -f='${Version}' "linux-headers-$release" 2>/dev/null) ||
		die "cannot tell the Debian version of the headers at $headers"
	major=$(echo "$release" | cut -d. -f1-2)
	dir="$METAROCE_CACHE/stock-$release-$debver"
fi

mkdir -p "$METAROCE_CACHE"
exec 9>"$METAROCE_CACHE/.stock.lock"
flock 9

if [ $downloaded = 1 ] && [ ! -f "$dir/pkgs/.unpacked" ]; then
	common=$(apt-cache show "linux-headers-$release=$debver" |
		sed -n 's/^Depends:.*\(linux-headers-[^ ,]*-common\) .*/\1/p' | head -n1)
	pkgs=("linux-headers-$release" "linux-binary-$release" "linux-modules-$release"
		"linux-base-$release")
	[ -n "$common" ] && pkgs+=("$common")
	log "downloading Debian's kernel $release ($debver): ${pkgs[*]}"
	rm -rf "$dir/debs" "$dir/pkgs"
	mkdir -p "$dir/debs" "$dir/pkgs"
	(cd "$dir/debs" && apt_q download "${pkgs[@]/%/=$debver}" >&2) ||
		die "cannot download ${pkgs[*]} at $debver (apt-get update?)"
	for deb in "$dir"/debs/*.deb; do
		dpkg-deb -x "$deb" "$dir/pkgs"
	done
	rm -rf "$dir/debs"
	# Module dependencies, for modprobe in the guest.
	depmod -b "$dir/pkgs/usr" "$release"
	touch "$dir/pkgs/.unpacked"
fi
[ -f "$headers/.config" ] || die "no .config in $headers"

# --- The compilers Debian used -------------------------------------------------

grep -qx 'CONFIG_RUST=y' "$headers/.config" ||
	die "kernel $release is built without CONFIG_RUST=y: it cannot load a Rust module"
rustc_text=$(config CONFIG_RUSTC_VERSION_TEXT)
rustc_ver=$(echo "$rustc_text" | awk '{print $2}')
# "rustc 1.97.1 (8bab26f4f 2026-07-14)": what rustup's build of it prints.
rustc_id=$(echo "$rustc_text" | sed 's/^\(rustc [^ ]* ([^)]*)\).*/\1/')
install_hint="rustup toolchain install $rustc_ver --profile minimal --component rust-src,rustfmt (or: scripts/stock-kernel.sh toolchain)"

if [ "$cmd" = toolchain ]; then
	if rustup run "$rustc_ver" rustc --version >/dev/null 2>&1; then
		have=$(rustup component list --toolchain "$rustc_ver" --installed 2>/dev/null)
		for c in rust-src rustfmt; do
			grep -q "^$c" <<<"$have" || rustup component add --toolchain "$rustc_ver" "$c" >&2
		done
	else
		log "installing rustc $rustc_ver (Debian's kernel $release was built by \"$rustc_text\")"
		rustup toolchain install "$rustc_ver" --profile minimal --component rust-src,rustfmt >&2
	fi
	exit 0
fi

# Debian's own rustc prints the very text; any other needs rustup's build of
# the same release, with Debian's version string forced into the crate hashes.
rustup_tc=
if [ -x /usr/bin/rustc ] && [ "$(/usr/bin/rustc --version 2>/dev/null)" = "$rustc_text" ]; then
	rustc_bin=/usr/bin/rustc
	force_default=
else
	have=$(rustup run "$rustc_ver" rustc --version 2>/dev/null) ||
		die "Debian's kernel $release was built by \"$rustc_text\", and this machine has no rustc $rustc_ver. A Rust module must be built by that exact compiler. Install it: $install_hint"
	[ "$have" = "$rustc_id" ] ||
		die "Debian's kernel $release was built by \"$rustc_text\", but rustup's toolchain $rustc_ver is \"$have\". Reinstall it: rustup toolchain uninstall $rustc_ver; $install_hint"
	rustup component list --toolchain "$rustc_ver" --installed 2>/dev/null | grep -q '^rust-src' ||
		die "rustc $rustc_ver lacks its library source: rustup component add --toolchain $rustc_ver rust-src"
	rustup_tc=$rustc_ver
	rustc_bin=$(rustup which --toolchain "$rustc_ver" rustc)
	force_default=${rustc_text#rustc }
fi
if [ -n "${RUSTC_FORCE_RUSTC_VERSION+set}" ]; then
	force=$RUSTC_FORCE_RUSTC_VERSION
	[ "$force" = "$force_default" ] ||
		log "RUSTC_FORCE_RUSTC_VERSION from the environment: \"$force\" (Debian's: \"$force_default\")"
else
	force=$force_default
fi
command -v bindgen >/dev/null || die "bindgen is not installed: run scripts/setup.sh"

grep -qx 'CONFIG_CC_IS_GCC=y' "$headers/.config" ||
	die "kernel $release is not built by gcc: only Debian's gcc-built kernels are handled"
cc_text=$(config CONFIG_CC_VERSION_TEXT)
debian_cc=${cc_text%% *}
mkdir -p "$dir/bin"
if command -v "$debian_cc" >/dev/null; then
	cc=$debian_cc
else
	# The host's gcc stands in for Debian's newer one. It only compiles the few C
	# files of modules_prepare (whose output is checked against Debian's below)
	# and the module's C helpers: map or drop the options it does not know.
	cc="$dir/bin/gcc"
	cat >"$cc" <<-'EOF'
	#!/bin/bash
	# Written by scripts/stock-kernel.sh: the host's gcc in place of the newer gcc
	# Debian built its kernel with; options the older gcc lacks are mapped or dropped.
	args=()
	for a in "$@"; do
		case "$a" in
		-fmin-function-alignment=*) args+=("-falign-functions=${a#*=}") ;;
		-finline-stringops* | -fzero-init-padding-bits=* | -fdiagnostics-show-context* | \
		-Wno-unterminated-string* | -Wno-default-const-init-unsafe | -Wno-alloc-size) ;;
		*) args+=("$a") ;;
		esac
	done
	exec gcc "${args[@]}"
	EOF
	chmod +x "$cc"
fi

# --- modules_prepare -----------------------------------------------------------

kdir="$dir/build"
# What the preparation depends on besides the Debian version: redo it if any changes.
stamp=$(printf '%s\n' "$rustc_bin" "$force" "$cc" "$(bindgen --version)" \
	"$(sha256sum "$0" | cut -c1-16)")
if [ -f "$kdir/.metaroce-prepared" ] && [ "$(cat "$kdir/.metaroce-prepared")" = "$stamp" ]; then
	echo "$kdir"
	exit 0
fi

srcver=$(dpkg-query -W -f='${Version}' "linux-source-$major" 2>/dev/null || echo none)
[ "$srcver" = "$debver" ] ||
	die "kernel $release is Debian version $debver, but linux-source-$major is $srcver: apt-get install linux-source-$major=$debver"
tarball=$(ls /usr/src/linux-source-"$major".tar.* 2>/dev/null | head -n1)
[ -n "$tarball" ] || die "no /usr/src/linux-source-$major.tar.*: apt-get install linux-source-$major=$debver"

start=$(date +%s)
if [ ! -f "$dir/src/.unpacked" ]; then
	log "unpacking $tarball"
	rm -rf "$dir/src"
	mkdir -p "$dir/src"
	tar -xf "$tarball" -C "$dir/src" --strip-components=1
	touch "$dir/src/.unpacked"
fi

log "preparing Rust metadata for $release in $kdir (rustc: $rustc_bin)"
rm -rf "$kdir"
mkdir -p "$kdir/include/config" "$kdir/arch/x86/include"
cp -p "$headers/.config" "$kdir/.config"
cp -p "$headers/include/config/auto.conf" "$headers/include/config/kernel.release" \
	"$kdir/include/config/"
cp -pr "$headers/include/generated" "$kdir/include/"
cp -pr "$headers/arch/x86/include/generated" "$kdir/arch/x86/include/"
# Kconfig must not run again (it would probe this machine's compilers and change
# the config): no recorded dependencies, and everything newer than .config.
: >"$kdir/include/config/auto.conf.cmd"
find "$kdir/include" "$kdir/arch" -type f -exec touch {} +

# (An empty RUSTC_FORCE_RUSTC_VERSION would be hashed as it is: unset it then.)
kbuild_env=(env -u LLVM -u CC -u RUSTC_FORCE_RUSTC_VERSION DEBIAN_KERNEL_NO_CC_VERSION_CHECK=y)
[ -n "$force" ] && kbuild_env+=(RUSTC_FORCE_RUSTC_VERSION="$force")
[ -n "$rustup_tc" ] && kbuild_env+=(RUSTUP_TOOLCHAIN="$rustup_tc")
"${kbuild_env[@]}" make -C "$dir/src" O="$kdir" KERNELRELEASE="$release" \
	CC="$cc" HOSTCC=gcc -j"$(nproc)" modules_prepare >"$dir/prepare.log" 2>&1 || {
	tail -30 "$dir/prepare.log" >&2
	die "modules_prepare failed; log: $dir/prepare.log"
}
cp -p "$headers/Module.symvers" "$kdir/Module.symvers"

# --- Verify --------------------------------------------------------------------

cmp -s "$headers/.config" "$kdir/.config" ||
	die "the kernel config changed during modules_prepare (Kconfig ran again): compare $headers/.config $kdir/.config"
for f in bounds.h asm-offsets.h rq-offsets.h autoconf.h rustc_cfg; do
	[ -f "$headers/include/generated/$f" ] || continue
	cmp -s "$headers/include/generated/$f" "$kdir/include/generated/$f" ||
		die "include/generated/$f differs from Debian's: the C compiler $cc lays out the kernel's structures differently"
done
# Crate hashes: v0-mangled Rust symbols name their crate as Cs<hash>_<len><name>.
bad=0
for crate in core kernel pin_init; do
	tag="_${#crate}$crate"
	want=$(grep -oE "Cs[0-9A-Za-z]*$tag" "$kdir/Module.symvers" | sort -u | tr '\n' ' ')
	got=$(cat "$kdir"/rust/exports_*_generated.h 2>/dev/null | grep -oE "Cs[0-9A-Za-z]*$tag" |
		sort -u | tr '\n' ' ')
	if [ -z "$want" ] || [ "$want" != "$got" ]; then
		log "crate $crate: Debian's kernel exports ${want:-nothing}, the regenerated crate has ${got:-nothing}"
		bad=1
	fi
done
[ $bad = 0 ] || die "the regenerated Rust crates do not match Debian's kernel $release: it was built by \"$rustc_text\" and needs RUSTC_FORCE_RUSTC_VERSION=\"$force_default\" (used: \"$force\" with $rustc_bin). Install the compiler ($install_hint) and leave RUSTC_FORCE_RUSTC_VERSION unset"

cat >"$kdir/metaroce-kbuild.mk" <<EOF
# Written by scripts/stock-kernel.sh: how to run Kbuild for Debian's $release.
LLVM :=
MR_KBUILD_ARGS := CC=$cc
export DEBIAN_KERNEL_NO_CC_VERSION_CHECK := y
${force:+export RUSTC_FORCE_RUSTC_VERSION := $force}
${rustup_tc:+export RUSTUP_TOOLCHAIN := $rustup_tc}
EOF
modules_dir=
[ $downloaded = 1 ] && modules_dir="$dir/pkgs/usr/lib/modules/$release"
cat >"$kdir/metaroce-stock.env" <<EOF
STOCK_RELEASE='$release'
STOCK_DEBVER='$debver'
STOCK_HEADERS='$headers'
STOCK_MODULES='$modules_dir'
STOCK_VMLINUZ='${modules_dir:+$modules_dir/vmlinuz}'
STOCK_RUSTC='$rustc_text'
EOF
printf '%s\n' "$stamp" >"$kdir/.metaroce-prepared"
log "prepared and verified in $(($(date +%s) - start)) s (crate hashes of core, kernel, pin_init match)"
echo "$kdir"
