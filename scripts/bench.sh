#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make bench`: MetaRoCE against rdma_rxe (and TCP), side by side in one VM
# boot of a kernel without debug options (Debian's stock kernel, prepared as
# for `make check-stock`: scripts/stock-prepare.sh), so that KASAN and
# lockdep do not dominate. The guest runs tools/bench/fabric-bench.sh
# (perftest over both RDMA transports on the same topologies, iperf3 beside
# some points); the host then prints the table and
# writes bench.csv (every run), summary.csv and bench.png
# (tools/bench/report.py) into out/bench-DATE/.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

start=$(date +%s)
run_dir bench
point() { # point OK|FAIL NAME: only failures matter here
	[ "$1" = OK ] || log "FAILED: $2"
}
report() {
	log "FAILED: logs in $out"
	exit 1
}
. "$TOP/scripts/stock-prepare.sh"

# The plot needs matplotlib (Debian's python3-matplotlib, for /usr/bin/python3).
py=$(plot_python)

# The guest's user space: perftest and rdma-core 65.0 with the provider.
prefix=$("$TOP/scripts/build-rdma-core.sh" 2>"$out/rdma-core-build.log") || {
	log "rdma-core build failed: $out/rdma-core-build.log"
	exit 1
}
log "booting Debian's $krel; the benchmark takes about 20 minutes (TCG)"
METAROCE_VM_TIMEOUT=${METAROCE_VM_TIMEOUT:-3600} \
METAROCE_VM_APPEND="${METAROCE_VM_APPEND:-} mrvm.modules=$tree" \
METAROCE_VM_INITRD="$out/initramfs.cpio" "$TOP/scripts/vm-run.sh" "$STOCK_VMLINUZ" "$out/guest" \
	"METAROCE_RDMA_PREFIX=$prefix" \
	"BENCH_REPEAT=${BENCH_REPEAT:-3}" "BENCH_FILTER=${BENCH_FILTER:-}" "BENCH_BASE_KO=${BENCH_BASE_KO:-}" \
	"BENCH_DURATION=${BENCH_DURATION:-4}" "BENCH_PERF=${BENCH_PERF:-0}" "BENCH_PLANE_RATE=${BENCH_PLANE_RATE:-40mbit}" \
	"BENCH_PLANES=${BENCH_PLANES:-}" "BENCH_QPS=${BENCH_QPS:-}" "BENCH_TYPES=${BENCH_TYPES:-}" "BENCH_INCAST_SENDERS=${BENCH_INCAST_SENDERS:-}" "BENCH_INCAST_RATE_KBIT=${BENCH_INCAST_RATE_KBIT:-}" \
	"$TOP/tools/bench/fabric-bench.sh" "$out/guest" >"$out/vm.log" 2>&1
log "VM exited with $? after $(($(date +%s) - start)) s in all"
[ -s "$out/guest/bench.csv" ] || {
	log "no results: see $out/vm.log"
	exit 1
}
cp "$out/guest/bench.csv" "$out/bench.csv"
{
	echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)," \
		"$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1); guest: QEMU TCG, kernel $krel"
	"$py" "$TOP/tools/bench/report.py" "$out/bench.csv" --out "$out"
	if [ -s "$out/guest/incast.txt" ]; then
		cp "$out/guest/incast.txt" "$out/incast.txt"
		echo
		"$py" "$TOP/tools/bench/incast_report.py" "$out/incast.txt" --out "$out"
	fi
} | tee "$out/table.txt"
