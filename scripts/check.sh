#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make check`: set-up (what is missing), the static checks (rustfmt, clippy),
# the test kernel (cached), the module (under clippy, then for the tests), the
# userspace crates' tests, then one VM boot that loads the module, runs its
# KUnit suites and the selftests. Prints TAP and "N passed, N failed[, N
# skipped]"; exits non-zero on any failure or any WARN/BUG/KASAN/lockdep/kmemleak
# report.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

start=$(date +%s)
"$TOP/scripts/setup.sh" || die "set-up failed"
run_dir check

# The static checks take seconds: they come first, so that a failure shows at
# once. Each is a TAP point (lint.tap): a failure fails the run at the end, and
# the tests still run.
lint_point() { # NUMBER NAME LOG COMMAND...: the point of COMMAND's exit status
	local n=$1 name=$2 logf=$3
	shift 3
	if "$@" >"$logf" 2>&1; then
		echo "ok $n $name" >>"$out/lint.tap"
	else
		echo "not ok $n $name" >>"$out/lint.tap"
		log "FAILED: $name; log: $logf"
	fi
}
lint_point 1 "lint: rustfmt" "$out/lint-fmt.log" make -C "$TOP" --no-print-directory lint-fmt
lint_point 2 "lint: cargo clippy" "$out/lint-clippy.log" make -C "$TOP" --no-print-directory lint-clippy

kdir=$("$TOP/scripts/build-kernel.sh" debug) || die "kernel build failed"
log "kernel: $kdir"

# The module under the kernel's clippy first: clippy-driver does not make the
# same metaroce.ko as rustc, so the module the guest loads is built after it.
lint_point 3 "lint: the module under clippy (CLIPPY=1)" "$out/lint-module.log" \
	make -C "$TOP" --no-print-directory KDIR="$kdir" lint-module
make -C "$TOP" KDIR="$kdir" modules >"$out/module-build.log" 2>&1 || {
	tail -40 "$out/module-build.log" >&2
	die "module build failed; log: $out/module-build.log"
}

"$TOP/scripts/check-user.sh" "$out"

# User space the guest runs (it sees the host's file system): rdma-core 65.0
# with the MetaRoCE provider, the data-integrity tool, the in-kernel test
# client, the benchmarks' helpers and the telemetry viewer.
prefix=$("$TOP/scripts/build-rdma-core.sh" 2>"$out/rdma-core-build.log") ||
	log "rdma-core build failed (the verbs tests will skip): $out/rdma-core-build.log"
make -C "$TOP/tools/integrity" >"$out/integrity-build.log" 2>&1 ||
	log "mr-integrity build failed (its tests will skip): $out/integrity-build.log"
make -C "$TOP" KDIR="$kdir" kclient >"$out/kclient-build.log" 2>&1 ||
	log "tools/kclient build failed (kclient.sh will skip): $out/kclient-build.log"
make -C "$TOP/tools/bench" >"$out/bench-build.log" 2>&1 ||
	log "tools/bench build failed: $out/bench-build.log"
cargo build --manifest-path "$TOP/tools/viewer/Cargo.toml" >"$out/viewer-build.log" 2>&1 ||
	log "tools/viewer build failed (telemetry.sh's viewer points will skip): $out/viewer-build.log"
export METAROCE_RDMA_PREFIX=${prefix:-}

rxe_ko=$(find "$kdir/drivers/infiniband/sw/rxe" -name rdma_rxe.ko 2>/dev/null | head -n1)
log "booting the test kernel (TCG: this takes a few minutes)"
# The guest's selftests take about 50 minutes under emulation (2978 s on
# 2026-12-07, once device creation no longer grew with the namespaces:
# Documentation/testing.md); the same machine took over 70 minutes before
# that, so the guest has 80.
# The emulated CPUs are the limit (two lanes of tests, METAROCE_LANES, gain
# only about 10%), so this boot runs MetaRoCE only: rdma_rxe under KASAN tests
# no code of ours, and `make check-stock` runs the same tests on MetaRoCE and
# rdma_rxe in one boot. METAROCE_TYPES="metaroce rxe" brings rxe back here;
# a list without metaroce would test none of our code, and is refused.
types=${METAROCE_TYPES:-metaroce}
[[ " $types " == *" metaroce "* ]] ||
	die "METAROCE_TYPES=$types: make check tests metaroce (add rxe to compare)"
METAROCE_VM_TIMEOUT=${METAROCE_VM_TIMEOUT:-4800} \
"$TOP/scripts/vm-run.sh" "$kdir" "$out/guest" \
	"METAROCE_RDMA_PREFIX=$METAROCE_RDMA_PREFIX" \
	"METAROCE_TYPES=$types" "METAROCE_LANES=${METAROCE_LANES:-2}" \
	"METAROCE_KDIR=$kdir" \
	"$TOP/scripts/guest-check.sh" "$out/guest" "$TOP/metaroce.ko" "$rxe_ko" \
	>"$out/vm.log" 2>&1
vm_rc=$?
log "VM exited with $vm_rc after $(($(date +%s) - start)) s in all"

python3 "$TOP/scripts/tap_report.py" --cargo "$out"/cargo-*.log \
	--unittest "$out"/unittest-*.log --points "$out/lint.tap" --guest "$out/guest" |
	tee "$out/report.tap"
rc=${PIPESTATUS[0]}
if [ "$rc" != 0 ]; then
	log "FAILED: VM log $out/vm.log, kernel log $out/guest/dmesg.txt"
fi
exit "$rc"
