#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make demo`: set up what is missing, boot the test kernel, put one MetaRoCE
# device in each of two network namespaces joined by a veth pair, and show them;
# then run ib_write_bw (64 KiB, one QP) and ibv_rc_pingpong (4 KiB) over
# MetaRoCE and over soft-RoCE (rxe) on the same veth pair, one after the other,
# and print the figures side by side (scripts/guest-demo.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

variant=${METAROCE_DEMO_KERNEL:-debug}
# Keep the console to the demo itself: kernel info messages stay in dmesg.
export METAROCE_VM_APPEND="${METAROCE_VM_APPEND:-} loglevel=4"
"$TOP/scripts/setup.sh"
kdir=$("$TOP/scripts/build-kernel.sh" "$variant")
make -C "$TOP" KDIR="$kdir" modules >/dev/null
out="$TOP/out/demo"
mkdir -p "$out"
# User space the guest runs: rdma-core 65.0 with the MetaRoCE provider (and
# rxe's). Without it the demo still shows the devices, with no traffic.
prefix=$("$TOP/scripts/build-rdma-core.sh" 2>"$out/rdma-core-build.log") ||
	log "rdma-core build failed (no traffic in the demo): $out/rdma-core-build.log"
rxe_ko=$(find "$kdir/drivers/infiniband/sw/rxe" -name rdma_rxe.ko 2>/dev/null | head -n1) || true
log "booting $kdir (TCG: about seven minutes with the debug kernel)"
"$TOP/scripts/vm-run.sh" "$kdir" "$out" "METAROCE_RDMA_PREFIX=${prefix:-}" \
	"$TOP/scripts/guest-demo.sh" "$TOP/metaroce.ko" "$rxe_ko" \
	>"$out/vm.log" 2>&1 || true
if ! grep -q "^demo: done" "$out/vm.log"; then
	tail -40 "$out/vm.log"
	die "the demo did not finish; VM log: $out/vm.log"
fi
sed -n '/^demo: start/,/^demo: done/p' "$out/vm.log" | tr -d '\r'
