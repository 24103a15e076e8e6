#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the VM for `make demo` (scripts/demo.sh):
#
#   guest-demo.sh METAROCE_KO RXE_KO [OUT]
#
# METAROCE_KO / RXE_KO: the modules to insmod; empty: modprobe them (Debian's
# kernel with metaroce installed by DKMS).
#
# Two network namespaces joined by a veth pair, one MetaRoCE device on each
# end; then the same two unmodified programs over MetaRoCE and over soft-RoCE
# (rxe) on that same veth pair, one device type after the other: ib_write_bw
# (64 KiB, one QP) and ibv_rc_pingpong (4 KiB), and a table of the figures.
# With OUT, then the points MetaRoCE exists for, one run of each transport
# (tools/bench/fabric-bench.sh, which writes OUT/bench.csv): ib_write_bw
# lossless, 1% loss, reordering (and the same 1 ms delay without it), 4
# planes, one plane down, one plane failing BENCH_DURATION/2 after the client
# starts.
#
# The verbs programs run through scripts/rdma-env.sh (rdma-core 65.0 with the
# MetaRoCE provider; rxe's provider is in it too); METAROCE_RDMA_PREFIX names
# it. Under TCG perftest's own Gb/s figure may read 0.00 (its TSC calibration
# fails): the table's figure is bytes / measuring window (see write_bw below).
set -u
ko=$1
rxe_ko=${2:-}
res=${3:-}
top=$(cd "$(dirname "$0")/.." && pwd)
env=$top/scripts/rdma-env.sh
WBW_ITERS=100
PP_ITERS=500
TMO=120

run() {
	echo "\$ $*"
	"$@" 2>&1
}

# gid_of IP: the sysfs spelling of IP's RoCE GID.
gid_of() {
	local IFS=.
	# shellcheck disable=SC2086
	set -- $1
	printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$1" "$2" "$3" "$4"
}
# gid_index DEV IP: port 1 ACTIVE with IP's GID in the table; prints its index.
gid_index() {
	local want f g s
	want=$(gid_of "$2")
	read -r s 2>/dev/null </sys/class/infiniband/"$1"/ports/1/state || return 1
	case "$s" in *ACTIVE*) ;; *) return 1 ;; esac
	for f in /sys/class/infiniband/"$1"/ports/1/gids/*; do
		read -r g 2>/dev/null <"$f" || continue
		if [ "$g" = "$want" ]; then
			echo "${f##*/}"
			return 0
		fi
	done
	return 1
}
wait_gid() {
	local i
	for i in $(seq 100); do
		gid_index "$1" "$2" && return 0
		sleep 0.2
	done
	echo "demo: $1 has no ACTIVE port with $2's GID" >&2
	return 1
}

# Results, by device type.
declare -A WBW WBW_PT PP_MBPS PP_USEC

# measure TYPE DEV_A DEV_B: both programs between hostA (server) and hostB.
measure() {
	local type=$1 da=$2 db=$3 ga gb spid out hdr line w bytes c
	ga=$(wait_gid "$da" 10.77.0.1) || return 1
	gb=$(wait_gid "$db" 10.77.0.2) || return 1
	echo "demo: $type: $da (hostA, GID index $ga) <-> $db (hostB, GID index $gb)"
	out=$(mktemp -d)

	# ib_write_bw: the client's lines are timestamped as they arrive; the
	# window runs from its result header (printed just before the timed
	# loop) to its result line, minus the 0.219 s perftest's clock
	# calibration (get_cpu_mhz in print_report_bw) spends inside it.
	echo "\$ ip netns exec hostA ib_write_bw -d $da -x $ga -F --report_gbits -s 65536 -n $WBW_ITERS -p 18515 &"
	ip netns exec hostA timeout $TMO "$env" stdbuf -oL ib_write_bw -d "$da" -x "$ga" \
		-F --report_gbits -s 65536 -n $WBW_ITERS -p 18515 >"$out/server" 2>&1 &
	spid=$!
	for _ in $(seq 75); do
		ip netns exec hostA ss -Hltn "sport = :18515" | grep -q . && break
		sleep 0.2
	done
	echo "\$ ip netns exec hostB ib_write_bw -d $db -x $gb -F --report_gbits -s 65536 -n $WBW_ITERS -p 18515 10.77.0.1"
	ip netns exec hostB timeout $TMO "$env" stdbuf -oL ib_write_bw -d "$db" -x "$gb" \
		-F --report_gbits -s 65536 -n $WBW_ITERS -p 18515 10.77.0.1 2>&1 |
		while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done >"$out/client"
	c=${PIPESTATUS[0]}
	wait "$spid"
	hdr=$(awk '$2 == "#bytes" { print $1; exit }' "$out/client")
	line=$(awk 'seen && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ { $1 = $1; print; exit }
		$2 == "#bytes" { seen = 1 }' "$out/client")
	if [ "$c" = 0 ] && [ -n "$hdr" ] && [ -n "$line" ]; then
		grep -E '#bytes|^[0-9.]+ +[0-9]+ +[0-9]+ ' "$out/client" | cut -d' ' -f2-
		# shellcheck disable=SC2086
		set -- $line
		WBW_PT[$type]=$5
		WBW[$type]=$(awk -v t0="$hdr" -v t1="$1" -v s="$2" -v n="$3" 'BEGIN {
			m = t1 - t0 - 0.219; if (m <= 0.001) m = 0.001
			printf "%.4f", s * n * 8 / m / 1e9 }')
		w=$(awk -v t0="$hdr" -v t1="$1" 'BEGIN { printf "%.3f", t1 - t0 - 0.219 }')
		bytes=$(($2 * $3))
		echo "demo: $type: ib_write_bw: $bytes bytes in $w s = ${WBW[$type]} Gb/s (perftest says ${WBW_PT[$type]} Gb/s)"
	else
		echo "demo: $type: ib_write_bw failed (client rc $c); its last lines, then the server's:"
		cut -d' ' -f2- "$out/client" | tail -n 8
		tail -n 8 "$out/server"
	fi

	# ibv_rc_pingpong times itself with gettimeofday(): its figures stand.
	echo "\$ ip netns exec hostA ibv_rc_pingpong -d $da -g $ga -s 4096 -n $PP_ITERS -p 18516 &"
	ip netns exec hostA timeout $TMO "$env" ibv_rc_pingpong -d "$da" -g "$ga" \
		-s 4096 -n $PP_ITERS -p 18516 >"$out/pp-server" 2>&1 &
	spid=$!
	for _ in $(seq 75); do
		ip netns exec hostA ss -Hltn "sport = :18516" | grep -q . && break
		sleep 0.2
	done
	echo "\$ ip netns exec hostB ibv_rc_pingpong -d $db -g $gb -s 4096 -n $PP_ITERS -p 18516 10.77.0.1"
	ip netns exec hostB timeout $TMO "$env" ibv_rc_pingpong -d "$db" -g "$gb" \
		-s 4096 -n $PP_ITERS -p 18516 10.77.0.1 >"$out/pp-client" 2>&1
	c=$?
	wait "$spid"
	if [ "$c" = 0 ] && grep -q "bytes in" "$out/pp-client"; then
		grep -E "bytes in|iters in" "$out/pp-client"
		PP_MBPS[$type]=$(sed -n 's/.* = \([0-9.]*\) Mbit\/sec.*/\1/p' "$out/pp-client")
		PP_USEC[$type]=$(sed -n 's/.* = \([0-9.]*\) usec\/iter.*/\1/p' "$out/pp-client")
	else
		echo "demo: $type: ibv_rc_pingpong failed (client rc $c); its last lines, then the server's:"
		tail -n 8 "$out/pp-client"
		tail -n 8 "$out/pp-server"
	fi
	rm -rf "$out"
}

# row LABEL METAROCE RXE: one line of the table, with MetaRoCE/rxe.
row() {
	local r=-
	if [ -n "$2" ] && [ -n "$3" ]; then
		r=$(awk -v a="$2" -v b="$3" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
	fi
	printf '%-38s %10s %10s %14s\n' "$1" "${2:--}" "${3:--}" "$r"
}

# load_rxe: insmod the rxe module named, else modprobe it.
load_rxe() {
	if [ -n "$rxe_ko" ]; then
		run insmod "$rxe_ko"
	else
		run modprobe rdma_rxe
	fi
}

echo "demo: start"
if [ -n "$ko" ]; then
	run insmod "$ko"
else
	run modprobe metaroce
fi
run ip netns add hostA
run ip netns add hostB
run ip link add veth0 netns hostA type veth peer name veth1 netns hostB
run ip -n hostA addr add 10.77.0.1/24 dev veth0
run ip -n hostB addr add 10.77.0.2/24 dev veth1
run ip -n hostA link set veth0 up
run ip -n hostB link set veth1 up
run ip netns exec hostA rdma link add mr0 type metaroce netdev veth0
run ip netns exec hostB rdma link add mr1 type metaroce netdev veth1
run ip netns exec hostA rdma link show
run ip netns exec hostB rdma link show
run rdma dev show
for d in mr0 mr1; do
	echo "\$ grep -H . /sys/class/infiniband/$d/ports/1/{link_layer,state,gids/0,gids/1}"
	grep -H . /sys/class/infiniband/$d/ports/1/{link_layer,state,gids/0,gids/1} 2>&1
done

if [ -z "${METAROCE_RDMA_PREFIX:-}" ] || [ ! -e "$METAROCE_RDMA_PREFIX/lib/libibverbs.so.1" ]; then
	echo "demo: no rdma-core build with the MetaRoCE provider (make provider): no traffic"
else
	export METAROCE_RDMA_PREFIX
	echo "demo: traffic over MetaRoCE (mr0, mr1)"
	run ip netns exec hostB "$env" ibv_devinfo -d mr1
	measure metaroce mr0 mr1
	run rdma link delete mr0
	run rdma link delete mr1

	echo "demo: the same over soft-RoCE (rxe) on the same veth pair"
	load_rxe
	if [ -d /sys/module/rdma_rxe ] &&
		run ip netns exec hostA rdma link add rxe0 type rxe netdev veth0 &&
		run ip netns exec hostB rdma link add rxe1 type rxe netdev veth1; then
		measure rxe rxe0 rxe1
	fi
	for d in rxe0 rxe1; do
		[ -e /sys/class/infiniband/$d ] && run rdma link delete $d
	done
	[ -d /sys/module/rdma_rxe ] && run rmmod rdma_rxe

	echo "demo: MetaRoCE and rxe, one after the other on the same veth pair (TCG guest: expect +-25% between boots)"
	printf '%-38s %10s %10s %14s\n' "" MetaRoCE rxe MetaRoCE/rxe
	row "ib_write_bw 64 KiB, 1 QP (Gb/s)" "${WBW[metaroce]:-}" "${WBW[rxe]:-}"
	row "  as perftest reports it (Gb/s)" "${WBW_PT[metaroce]:-}" "${WBW_PT[rxe]:-}"
	row "ibv_rc_pingpong 4 KiB (Mbit/s)" "${PP_MBPS[metaroce]:-}" "${PP_MBPS[rxe]:-}"
	row "ibv_rc_pingpong 4 KiB (usec/iter)" "${PP_USEC[metaroce]:-}" "${PP_USEC[rxe]:-}"
	echo "demo: ib_write_bw's figure is bytes / measuring window; perftest's own may read 0.00 under TCG"

	if [ -n "$res" ] && command -v ib_write_bw >/dev/null; then
		echo "demo: what MetaRoCE is for: ib_write_bw, 64 KiB, 4 s, MetaRoCE then rxe on the same"
		echo "demo: topology: lossless, 1% loss, reordering and its reference (the same 1 ms"
		echo "demo: delay without it) on the veth pair; then two hosts behind 4 planes of"
		echo "demo: 40 Mbit/s (selftests/metaroce/lib_netns.sh), all up, one down, one failing"
		echo "demo: 2 s after the client starts"
		load_rxe
		BENCH_REPEAT=1 BENCH_DURATION=4 BENCH_PLANES=4 BENCH_TYPES="metaroce rxe" \
			BENCH_FILTER='^write_bw (loss (0|1)%|reordering|delay 1ms|4 planes.*)$' \
			"$top/tools/bench/fabric-bench.sh" "$res" 2>&1 | grep -v "^# plane[0-9]"
		[ -d /sys/module/rdma_rxe ] && run rmmod rdma_rxe
	elif [ -n "$res" ]; then
		echo "demo: perftest is missing: no loss, reordering or plane points"
	fi
fi

for d in mr0 mr1; do
	[ -e /sys/class/infiniband/$d ] && run rdma link delete $d
done
run ip netns del hostA
run ip netns del hostB
run rmmod metaroce
echo "demo: done"
