#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make check-stock`: the module on Debian's own stock kernel, not ours.
#   1. set-up, including dkms and the rustc Debian built the kernel with;
#   2. scripts/stock-kernel.sh: Debian's headers, image and modules packages of
#      the installed linux-source version, and the kernel's Rust metadata
#      regenerated and verified (cached);
#   3. DKMS as a user would run it (dkms add, build, install; dkms.conf's build
#      command does the preparation), with DKMS's trees and the install tree
#      under the run's directory: the install tree is a copy of the stock
#      kernel's modules, which becomes the guest's /lib/modules/KREL;
#   4. one boot of Debian's vmlinuz under QEMU (a small initramfs loads 9p, then
#      the host's root is used as for `make check`), running
#      scripts/guest-stock-check.sh: uname -r, `modprobe metaroce` (the DKMS
#      module, with ib_core), then the selftests and the kernel log check.
# Prints TAP and "N passed, N failed[, N skipped]"; exits non-zero on any failure.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

start=$(date +%s)
out="$TOP/out/check-stock-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out/guest"
log "results and logs: $out"
tap="$out/stock.tap"
: >"$tap"
n=0
point() { # point OK|FAIL NAME
	n=$((n + 1))
	if [ "$1" = OK ]; then echo "ok $n $2"; else echo "not ok $n $2"; fi >>"$tap"
}
# report [GUEST ARGS...]: the closing TAP report; its status is the script's.
report() {
	python3 "$TOP/scripts/tap_report.py" --points "$tap" "$@" | tee "$out/report.tap"
	local rc=${PIPESTATUS[0]}
	[ "$rc" = 0 ] || log "FAILED: logs in $out"
	exit "$rc"
}

"$TOP/scripts/setup.sh" stock >"$out/setup.log" 2>&1 || {
	tail -20 "$out/setup.log" >&2
	point FAIL "stock: set-up (scripts/setup.sh stock; log: $out/setup.log)"
	report
}

# The Rust metadata, regenerated and verified; also makes sure the packages are there.
if kdir=$("$TOP/scripts/stock-kernel.sh" 2> >(tee "$out/stock-kernel.log" >&2)); then
	point OK "stock: Rust metadata regenerated for Debian's kernel, crate hashes verified"
else
	point FAIL "stock: Rust metadata for Debian's kernel (log: $out/stock-kernel.log)"
	report
fi
. "$kdir/metaroce-stock.env"
krel=$STOCK_RELEASE
log "Debian's kernel $krel ($STOCK_DEBVER), built by $STOCK_RUSTC"

# --- DKMS ------------------------------------------------------------------------

# The guest's module tree: the stock modules (hard links into the cache) plus
# whatever dkms installs.
tree="$out/modroot/lib/modules/$krel"
mkdir -p "$out/modroot/lib/modules"
cp -al "$STOCK_MODULES" "$tree" 2>/dev/null || cp -a "$STOCK_MODULES" "$tree"

ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"$/\1/p' "$TOP/dkms.conf")
src="$out/dkms/src/metaroce-$ver"
mkdir -p "$src" "$out/dkms/tree"
# The checkout as it is (tracked files and new ones), as a user's copy would be.
git -C "$TOP" ls-files -z -co --exclude-standard | (cd "$TOP" && xargs -0 cp --parents -t "$src")
dkms=(dkms --dkmstree "$out/dkms/tree" --sourcetree "$out/dkms/src"
	--installtree "$out/modroot/lib/modules")
(
	set -x
	"${dkms[@]}" add -m metaroce -v "$ver" &&
	"${dkms[@]}" build -m metaroce -v "$ver" -k "$krel" --kernelsourcedir "$STOCK_HEADERS" &&
	"${dkms[@]}" install -m metaroce -v "$ver" -k "$krel" --kernelsourcedir "$STOCK_HEADERS" \
		--no-depmod
) >"$out/dkms.log" 2>&1
dkms_rc=$?
cat "$out/dkms/tree/metaroce/$ver/build/make.log" \
	"$out/dkms/tree/metaroce/$ver/$krel"/*/log/make.log >"$out/module-build.log" 2>/dev/null
if [ $dkms_rc = 0 ] && ls "$tree/updates/dkms/metaroce.ko"* >/dev/null 2>&1; then
	point OK "stock: dkms add, build and install metaroce $ver for $krel"
else
	tail -30 "$out/dkms.log" "$out/module-build.log" >&2
	point FAIL "stock: dkms add, build and install metaroce $ver for $krel (logs: $out/dkms.log, $out/module-build.log)"
	report
fi
depmod -b "$out/modroot" "$krel"

# --- The guest -------------------------------------------------------------------

# Debian's kernel has 9p as modules: a small initramfs loads them before the
# host's root is mounted.
ird="$out/initramfs"
mkdir -p "$ird/bin" "$ird/modules" "$ird/proc" "$ird/dev" "$ird/newroot"
cp /bin/busybox "$ird/bin/busybox"
cp "$TOP/scripts/stock-initramfs-init.sh" "$ird/init"
for m in 9pnet_virtio 9p overlay; do
	modprobe -d "$(dirname "$(dirname "$(dirname "$STOCK_MODULES")")")" -S "$krel" \
		--show-depends "$m"
done | awk '$1 == "insmod" && !seen[$2]++ {print $2}' |
	while read -r ko; do
		name=$(basename "${ko%.xz}")
		xz -dc "$ko" >"$ird/modules/$name" 2>/dev/null || cp "$ko" "$ird/modules/$name"
		echo "$name" >>"$ird/modules/order"
	done
(cd "$ird" && find . | cpio -o -H newc --quiet) >"$out/initramfs.cpio"

log "booting Debian's $krel (TCG: a few minutes)"
METAROCE_VM_APPEND="${METAROCE_VM_APPEND:-} mrvm.modules=$tree" \
METAROCE_VM_INITRD="$out/initramfs.cpio" "$TOP/scripts/vm-run.sh" "$STOCK_VMLINUZ" "$out/guest" \
	"$TOP/scripts/guest-stock-check.sh" "$out/guest" "$krel" >"$out/vm.log" 2>&1
log "VM exited with $? after $(($(date +%s) - start)) s in all"

kunit=()
grep -q '^CONFIG_KUNIT=y' "$STOCK_HEADERS/.config" ||
	kunit=(--no-kunit "CONFIG_KUNIT is off in Debian's kernel")
report "$out/guest/stock.tap" --guest "$out/guest" "${kunit[@]}"
