#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# perftest (Debian's perftest 4.5, unmodified) between two namespaces joined by
# a veth pair, over one device type: PERF_TYPE=metaroce (default) or rxe.
# One test point per run: ib_{write,send,read,atomic}_bw with one QP and with
# eight (-q 8), ib_{write,send,read}_lat. Small iteration counts: the whole
# script stays within a few minutes under TCG.
#
# Each point prints the figure perftest reports and one computed here from
# bytes / measuring window: perftest's figure comes from the TSC, calibrated
# against gettimeofday() in the guest, and under TCG that calibration may fail
# (perftest then prints 0.00 with -F). The window is the time between the
# client printing its result header (just before the timed loop) and its result
# line, both timestamped as they arrive, minus the 0.219 s each of perftest's
# clock calibrations (get_cpu_mhz) spends in that window: one for the bw tests
# (in print_report_bw), two for the latency tests (run_iter_lat_* and
# print_report_lat).
#
# The programs run through scripts/rdma-env.sh (the rdma-core 65.0 build with
# the MetaRoCE provider; rxe's provider is in it too). Environment:
#   PERF_TYPE        metaroce | rxe
#   PERF_ITERS       iterations per QP (default 200)
#   PERF_TIMEOUT     seconds per run and side (default 60)
#   METAROCE_KO / RXE_KO   modules to load when not loaded (lib_netns.sh)

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

type=${PERF_TYPE:-metaroce}
iters=${PERF_ITERS:-200}
tmo=${PERF_TIMEOUT:-60}
top=$(cd "$(dirname "$0")/../.." && pwd)
env=$top/scripts/rdma-env.sh

case "$type" in
metaroce | rxe) ;;
*) skip_all "PERF_TYPE must be metaroce or rxe, not '$type'" ;;
esac
prefix=${METAROCE_RDMA_PREFIX:-$("$top/scripts/build-rdma-core.sh" --prefix 2>/dev/null)}
[ -e "$prefix/lib/libibverbs.so.1" ] ||
	skip_all "the rdma-core build is missing (make provider)"
# rdma-env.sh then skips working the prefix out again for every program.
export METAROCE_RDMA_PREFIX=$prefix
command -v ib_write_bw >/dev/null 2>&1 || skip_all "perftest is not installed"
require_tools ip rdma ss stdbuf timeout ib_send_bw ib_read_bw ib_atomic_bw \
	ib_write_lat ib_send_lat ib_read_lat
rdma_type_load "$type" || skip_all "the $type module is not loaded"

logs=$(mktemp -d)
trap 'rdma_fabric_down; rm -rf "$logs"' EXIT
port=18800
CALIB=0.219

# gid_index DEV IP: the GID table index holding IP's RoCE (v2) GID.
gid_index() {
	local want f
	want=$(fabric_gid_of "$2")
	for f in /sys/class/infiniband/"$1"/ports/1/gids/*; do
		if [ "$(cat "$f")" = "$want" ]; then
			basename "$f"
			return 0
		fi
	done
	return 1
}

listening() {
	ip netns exec "$1" ss -Hltn "sport = :$2" | grep -q .
}

# server_settled NS PORT PID: listening, or already gone (its log says why).
server_settled() {
	listening "$1" "$2" || ! kill -0 "$3" 2>/dev/null
}

# Each line of stdin, prefixed with the time it arrived.
stamp() {
	local l
	while IFS= read -r l; do
		printf '%s %s\n' "$EPOCHREALTIME" "$l"
	done
}

show_tail() {
	local side=$1 file=$2 l
	tail -n 8 "$file" | while IFS= read -r l; do ktap_info "  $side: $l"; done
}

rc_text() {
	case "$1" in
	0) echo "rc 0" ;;
	124) echo "timed out after ${tmo} s" ;;
	*) echo "rc $1" ;;
	esac
}

# perf_point NAME KIND PROG ARGS...
# KIND: bw (size x iterations / window), lat (window / iterations, and half of
# it for the ping-pong tests write_lat and send_lat, which report one way).
perf_point() {
	local name=$1 kind=$2 prog=$3 spid crc src line hdr res ok=0
	shift 3
	port=$((port + 1))
	rm -f "$logs/server" "$logs/client"
	ip netns exec "$NS_A" timeout "$tmo" "$env" stdbuf -oL \
		"$prog" -d "$RDMA_A" -x "$GID_A" -F -p "$port" "$@" \
		>"$logs/server" 2>&1 &
	spid=$!
	wait_for 15 server_settled "$NS_A" "$port" "$spid" ||
		ktap_info "$name: the server did not listen on port $port"
	ip netns exec "$NS_B" timeout "$tmo" "$env" stdbuf -oL \
		"$prog" -d "$RDMA_B" -x "$GID_B" -F -p "$port" "$@" "$FABRIC_IP_A" \
		2>&1 | stamp >"$logs/client"
	crc=${PIPESTATUS[0]}
	wait "$spid"
	src=$?

	# The result header (#bytes ...) and the first line of numbers after it.
	hdr=$(awk '$2 == "#bytes" { print $1; exit }' "$logs/client")
	line=$(awk 'seen && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ { $1 = $1; print; exit }
		$2 == "#bytes" { seen = 1 }' "$logs/client")
	if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ] && [ -n "$line" ] && [ -n "$hdr" ]; then
		ok=1
		# shellcheck disable=SC2086
		set -- $line
		res=$1
		shift
		case "$kind" in
		bw)
			# time bytes iters peak avg msgrate
			ktap_info "$name: perftest: $1 B x $2: BW peak $3, average $4 Gb/s, $5 Mpps"
			awk -v t0="$hdr" -v t1="$res" -v s="$1" -v n="$2" -v c="$CALIB" -v name="$name" 'BEGIN {
				w = t1 - t0; m = w - c; if (m <= 0.001) m = 0.001;
				printf "# %s: computed: %d B in %.3f s (window %.3f s - %.3f s calibration) = %.3f Gb/s\n",
					name, s * n, m, w, c, s * n * 8 / m / 1e9 }'
			;;
		lat)
			# time bytes iters t_min t_max t_typical t_avg t_stdev p99 p99.9
			ktap_info "$name: perftest: $1 B x $2: t_typical $5 us, t_avg $6 us, t_min $3, t_max $4, p99 $8 us"
			awk -v t0="$hdr" -v t1="$res" -v n="$2" -v c="$CALIB" -v half="$kind_half" -v name="$name" 'BEGIN {
				w = t1 - t0; m = w - 2 * c; if (m <= 0.001) m = 0.001;
				per = m / n * 1e6;
				printf "# %s: computed: %d iterations in %.3f s (window %.3f s - 2 x %.3f s calibration) = %.1f us per iteration%s\n",
					name, n, m, w, c, per, half ? sprintf(" (%.1f us one way)", per / 2) : "" }'
			;;
		esac
	fi
	if [ "$ok" = 1 ]; then
		ktap_ok "$name"
	else
		ktap_info "$name: client $(rc_text "$crc"), server $(rc_text "$src")$([ -z "$line" ] && echo ', no result line')"
		# The client's lines without their time stamps.
		cut -d' ' -f2- "$logs/client" >"$logs/client.txt"
		show_tail client "$logs/client.txt"
		show_tail server "$logs/server"
		ktap_fail "$name"
	fi
}

bw() {
	local prog=$1
	shift
	kind_half=0 perf_point "$prog $* ($type)" bw "$prog" --report_gbits -n "$iters" "$@"
}

lat() {
	local prog=$1 half=$2
	shift 2
	kind_half=$half perf_point "$prog $* ($type)" lat "$prog" -n "$iters" "$@"
}

ktap_plan 12

if ! rdma_fabric_up "$type" 2>"$logs/setup"; then
	ktap_info "$(cat "$logs/setup")"
	ktap_fail "$type devices on both ends of the veth pair"
	ktap_finish
fi
GID_A=$(gid_index "$RDMA_A" "$FABRIC_IP_A")
GID_B=$(gid_index "$RDMA_B" "$FABRIC_IP_B")
ktap_ok "$type devices on both ends of the veth pair ($RDMA_A GID $GID_A, $RDMA_B GID $GID_B)"

bw ib_write_bw -s 65536
bw ib_send_bw -s 65536
bw ib_read_bw -s 65536
bw ib_atomic_bw
bw ib_write_bw -s 65536 -q 8
bw ib_send_bw -s 65536 -q 8
bw ib_read_bw -s 65536 -q 8
bw ib_atomic_bw -q 8
lat ib_write_lat 1 -s 2
lat ib_send_lat 1 -s 2
lat ib_read_lat 0 -s 2

ktap_finish
