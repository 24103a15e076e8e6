#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make demo`: set up what is missing, boot the test kernel, put one MetaRoCE
# device in each of two network namespaces joined by a veth pair, and show them.
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
log "booting $kdir (TCG: about two minutes with the debug kernel)"
"$TOP/scripts/vm-run.sh" "$kdir" "$out" "$TOP/scripts/guest-demo.sh" "$TOP/metaroce.ko" \
	>"$out/vm.log" 2>&1 || true
if ! grep -q "^demo: done" "$out/vm.log"; then
	tail -40 "$out/vm.log"
	die "the demo did not finish; VM log: $out/vm.log"
fi
sed -n '/^demo: start/,/^demo: done/p' "$out/vm.log" | tr -d '\r'
