#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The benchmark of `make bench`, run inside one VM boot (scripts/bench.sh):
# the same perftest commands over MetaRoCE and over rdma_rxe, on the same
# topologies (selftests/metaroce/lib_netns.sh), each point BENCH_REPEAT times.
# Appends one CSV row per run to OUT/bench.csv:
#   point,transport,repeat,value,unit,perftest_value
# value: Gb/s for bandwidth (bytes moved x 8 / measured duration, from
# perftest's iteration count), microseconds for latency (perftest's t_avg);
# perftest_value: the figure perftest printed (its clock calibration may fail
# under TCG); value is empty when the run failed or timed out.
#
#   fabric-bench.sh OUT
# Environment: BENCH_REPEAT (3), BENCH_DURATION (seconds per bandwidth run, 4),
# BENCH_SIZE (bytes per message, 65536), BENCH_PLANE_RATE (per-plane limit for
# the plane points, 40mbit), BENCH_FILTER (an extended regular expression:
# only the points whose name matches).

out=$1
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
. "$top/selftests/metaroce/lib.sh"
. "$top/selftests/metaroce/lib_netns.sh"
. "$top/scripts/rdma-env.sh"
env=$top/scripts/rdma-env.sh

repeat=${BENCH_REPEAT:-3}
dur=${BENCH_DURATION:-4}
size=${BENCH_SIZE:-65536}
rate=${BENCH_PLANE_RATE:-40mbit}
csv=$out/bench.csv
logs=$(mktemp -d)
port=19000
echo "point,transport,repeat,value,unit,perftest_value" >"$csv"

modprobe rdma_rxe 2>/dev/null || rdma_type_load rxe
modprobe metaroce 2>/dev/null || rdma_type_load metaroce

# devices_up [PLANES]: a MetaRoCE and an rxe device on each host.
devices_up() {
	rdma_fabric_up metaroce "$@" || return 1
	RXE_A=rxeA$$
	RXE_B=rxeB$$
	rdma_in "$NS_A" link add "$RXE_A" type rxe netdev veth0 &&
		rdma_in "$NS_B" link add "$RXE_B" type rxe netdev veth1 &&
		wait_for 20 fabric_dev_ready "$RXE_A" "$FABRIC_IP_A" &&
		wait_for 20 fabric_dev_ready "$RXE_B" "$FABRIC_IP_B"
}

devices_down() {
	cleanup_links "$RXE_A" "$RXE_B"
	rdma_fabric_down
}

listening() {
	ip netns exec "$1" ss -Hltn "sport = :$2" | grep -q .
}

# run_once POINT TYPE KIND PROG ARGS...: one run, one CSV row.
run_once() {
	local point=$1 type=$2 kind=$3 prog=$4 rep=$5 da db ga gb spid line value="" pf=""
	shift 5
	if [ "$type" = metaroce ]; then da=$RDMA_A db=$RDMA_B; else da=$RXE_A db=$RXE_B; fi
	ga=$(fabric_gid_index "$da" "$FABRIC_IP_A")
	gb=$(fabric_gid_index "$db" "$FABRIC_IP_B")
	port=$((port + 1))
	ip netns exec "$NS_A" timeout 30 "$env" "$prog" -d "$da" -x "$ga" -F -p "$port" "$@" \
		>"$logs/server" 2>&1 &
	spid=$!
	wait_for 20 listening "$NS_A" "$port"
	ip netns exec "$NS_B" timeout 30 "$env" "$prog" -d "$db" -x "$gb" -F -p "$port" "$@" \
		"$FABRIC_IP_A" >"$logs/client" 2>&1
	wait "$spid"
	line=$(awk 'seen && $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ { $1 = $1; print; exit }
		$1 == "#bytes" { seen = 1 }' "$logs/client")
	if [ -n "$line" ]; then
		# shellcheck disable=SC2086
		set -- $line
		case "$kind" in
		bw)	# bytes iterations peak average msgrate
			value=$(awk -v b="$1" -v n="$2" -v d="$dur" 'BEGIN { printf "%.5f", b * n * 8 / d / 1e9 }')
			pf=$4 ;;
		lat)	# bytes iterations t_min t_max t_typical t_avg ...
			value=$6
			pf=$5 ;;
		esac
	fi
	echo "$point,$type,$rep,$value,$([ "$kind" = bw ] && echo Gb/s || echo us),$pf" >>"$csv"
	echo "# $point $type #$rep: ${value:-failed}"
	[ -n "$value" ] || tail -3 "$logs/client" | sed 's/^/#   /'
}

# point NAME KIND PROG ARGS...: both transports, BENCH_REPEAT times each,
# interleaved so that a drift of the machine hits both alike.
point() {
	local name=$1 r t
	shift
	if [ -n "${BENCH_FILTER:-}" ] && ! grep -qE -e "$BENCH_FILTER" <<<"$name"; then
		return
	fi
	for ((r = 1; r <= repeat; r++)); do
		for t in metaroce rxe; do
			run_once "$name" "$t" "$1" "$2" "$r" "${@:3}"
		done
	done
}

bw=(-s "$size" -D "$dur")

echo "# direct: the hosts joined by one veth pair"
devices_up || { echo "# no fabric"; exit 1; }
for loss in 0 0.1 1 5 10; do
	if [ "$loss" != 0 ]; then netem_both loss "$loss%"; fi
	point "write_bw loss $loss%" bw ib_write_bw "${bw[@]}"
	point "send_bw loss $loss%" bw ib_send_bw "${bw[@]}"
	netem_clear
done
netem_both delay 1ms reorder 25% 50%
point "write_bw reordering" bw ib_write_bw "${bw[@]}"
netem_both delay 1ms
point "write_bw delay 1ms" bw ib_write_bw "${bw[@]}"
netem_clear
point "write_lat" lat ib_write_lat -s 2 -n 500
devices_down

for planes in 1 2 4 8; do
	echo "# $planes planes of $rate each"
	devices_up "$planes" || { echo "# no fabric"; exit 1; }
	for ((i = 0; i < planes; i++)); do PLANE_RATE=$rate plane_qdisc "$i"; done
	point "write_bw $planes planes" bw ib_write_bw "${bw[@]}"
	if [ "$planes" = 4 ]; then
		plane_down 1
		point "write_bw 4 planes 1 failed" bw ib_write_bw "${bw[@]}"
		plane_up 1
	fi
	devices_down
done
rm -rf "$logs"
echo "# done"
