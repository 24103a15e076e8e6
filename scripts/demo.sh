#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make demo`: set up what is missing, boot a kernel without debug options
# (Debian's stock 7.2, with metaroce built and installed by DKMS as for `make
# check-stock`: scripts/stock-prepare.sh), put one MetaRoCE device in each of
# two network namespaces joined by a veth pair, and show them; run ib_write_bw
# (64 KiB, one QP) and ibv_rc_pingpong (4 KiB) over MetaRoCE and over
# soft-RoCE (rxe) on the same veth pair, one after the other; then the points
# MetaRoCE exists for, both transports on the same topologies: ib_write_bw
# lossless, through 1% loss, through reordering (and the same 1 ms delay
# without it), over 4 planes, with one of them down, and with one failing 2 s
# after the client starts (tools/bench/fabric-bench.sh).
# Prints the figures side by side and writes a plot (scripts/guest-demo.sh,
# tools/bench/report.py) into out/demo-DATE/.
#
# METAROCE_DEMO_KERNEL=debug (or fast) boots our own kernel build of that
# variant instead (scripts/build-kernel.sh); the debug kernel's KASAN and
# lockdep make both transports several times slower.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

variant=${METAROCE_DEMO_KERNEL:-stock}
start=$(date +%s)
run_dir demo
# Keep the console to the demo itself: kernel info messages stay in dmesg.
export METAROCE_VM_APPEND="${METAROCE_VM_APPEND:-} loglevel=4"

if [ "$variant" = stock ]; then
	point() { # point OK|FAIL NAME: only failures matter here
		[ "$1" = OK ] || log "FAILED: $2"
	}
	report() {
		die "the set-up for Debian's kernel failed: logs in $out"
	}
	# It checks each step itself (point/report), as for check-stock.
	set +e
	. "$TOP/scripts/stock-prepare.sh"
	set -e
	kernel=$STOCK_VMLINUZ
	# Both modules come from the guest's module tree (modprobe).
	ko= rxe_ko=
	export METAROCE_VM_APPEND="$METAROCE_VM_APPEND mrvm.modules=$tree"
	export METAROCE_VM_INITRD="$out/initramfs.cpio"
	what="Debian's $krel"
else
	"$TOP/scripts/setup.sh" >"$out/setup.log" 2>&1 || die "set-up failed: $out/setup.log"
	kernel=$("$TOP/scripts/build-kernel.sh" "$variant")
	make -C "$TOP" KDIR="$kernel" modules >/dev/null
	ko=$TOP/metaroce.ko
	rxe_ko=$(find "$kernel/drivers/infiniband/sw/rxe" -name rdma_rxe.ko 2>/dev/null | head -n1) || true
	what="the $variant kernel ($kernel)"
fi
py=$(plot_python)
# User space the guest runs: rdma-core 65.0 with the MetaRoCE provider (and
# rxe's) and perftest. Without it the demo still shows the devices, with no
# traffic.
prefix=$("$TOP/scripts/build-rdma-core.sh" 2>"$out/rdma-core-build.log") ||
	log "rdma-core build failed (no traffic in the demo): $out/rdma-core-build.log"
if [ "$variant" = stock ]; then
	log "booting $what; the demo takes about 3 minutes (TCG)"
else
	log "booting $what; the demo takes about ten minutes (TCG, debug options)"
fi
"$TOP/scripts/vm-run.sh" "$kernel" "$out/guest" "METAROCE_RDMA_PREFIX=${prefix:-}" \
	"$TOP/scripts/guest-demo.sh" "$ko" "$rxe_ko" "$out/guest" \
	>"$out/vm.log" 2>&1 || true
if ! grep -q "^demo: done" "$out/vm.log"; then
	tail -40 "$out/vm.log"
	die "the demo did not finish; VM log: $out/vm.log"
fi
sed -n '/^demo: start/,/^demo: done/p' "$out/vm.log" | tr -d '\r'
if [ -s "$out/guest/bench.csv" ]; then
	cp "$out/guest/bench.csv" "$out/bench.csv"
	echo
	echo "demo: the same points as a table (one run each; medians of three in \`make bench\`):"
	"$py" "$TOP/tools/bench/report.py" "$out/bench.csv" --out "$out" | tee "$out/table.txt"
fi
log "demo finished in $(($(date +%s) - start)) s; results in $out"
