# SPDX-License-Identifier: GPL-2.0
# Sourced by scripts/check-stock.sh, scripts/bench.sh and scripts/demo.sh:
# everything a boot of Debian's stock kernel needs, in the run's directory $out:
#   - set-up (dkms, the rustc Debian built the kernel with);
#   - scripts/stock-kernel.sh: Debian's kernel packages and the Rust metadata
#     regenerated and verified (cached);
#   - metaroce built and installed by DKMS as a user would, into a copy of the
#     stock kernel's module tree ($tree, the guest's /lib/modules/$krel);
#   - an initramfs that loads 9p and overlay ($out/initramfs.cpio).
# The caller defines point OK|FAIL NAME (one result) and report (the end of
# the run, with what failed); a failed step calls report.
# Sets: krel, tree, STOCK_* (metaroce-stock.env).

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

