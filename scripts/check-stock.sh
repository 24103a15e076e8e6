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
run_dir check-stock
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

. "$TOP/scripts/stock-prepare.sh"

log "booting Debian's $krel (TCG: a few minutes)"
METAROCE_VM_APPEND="${METAROCE_VM_APPEND:-} mrvm.modules=$tree" \
METAROCE_VM_INITRD="$out/initramfs.cpio" "$TOP/scripts/vm-run.sh" "$STOCK_VMLINUZ" "$out/guest" \
	"$TOP/scripts/guest-stock-check.sh" "$out/guest" "$krel" >"$out/vm.log" 2>&1
log "VM exited with $? after $(($(date +%s) - start)) s in all"

kunit=()
grep -q '^CONFIG_KUNIT=y' "$STOCK_HEADERS/.config" ||
	kunit=(--no-kunit "CONFIG_KUNIT is off in Debian's kernel")
report "$out/guest/stock.tap" --guest "$out/guest" "${kunit[@]}"
