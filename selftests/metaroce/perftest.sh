#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# perftest (Debian's perftest 4.5, unmodified) between two namespaces joined by
# a veth pair, over one device type: PERF_TYPE=metaroce (default) or rxe.
# One test point per run: ib_{write,send,read,atomic}_bw with one QP and with
# eight (-q 8), ib_{write,send,read}_lat, ib_send_bw over UD (-c UD) and
# ib_{write,send}_bw over UC (-c UC); with PERF_SET=cm (perftest_cm.sh) or
# all, ib_{write,send,read}_bw connected through RDMA-CM (-R) instead of
# perftest's TCP exchange. Iteration counts are small, so that
# the script stays within about four minutes in the TCG debug kernel, where
# 64 KiB writes move ~0.01-0.02 Gb/s over rxe and ~0.004 Gb/s over MetaRoCE
# (metaroce: ~3 min, rxe: ~1 min). With so few iterations no QP has more than
# a few WRs outstanding; PERF_FILTER='-q 8' PERF_ITERS=800 gives each of the
# eight QPs perftest's default queue depth (128) to fill.
#
# Each point prints the figure perftest reports and one computed here from
# bytes / measuring window: perftest's figure comes from the TSC, calibrated
# against gettimeofday() in the guest, and under TCG that calibration may fail
# (perftest then prints 0.00 with -F). The window is the time between the
# client printing its result header (just before the timed loop) and its result
# line, both timestamped as they arrive, minus the 0.219 s each of perftest's
# clock calibrations (get_cpu_mhz) spends in that window: one for the bw tests
# (in print_report_bw), two for the latency tests (run_iter_lat_* and
# print_report_lat). On ib_write_bw both agree within 1-2%.
#
# The programs run through scripts/rdma-env.sh (the rdma-core 65.0 build with
# the MetaRoCE provider; rxe's provider is in it too). Environment:
#   PERF_TYPE         metaroce | rxe
#   PERF_ITERS        bw iterations with one QP (default 50, 64 KiB each); with
#                     -q 8 each QP does an eighth of them (at least 5)
#   PERF_LAT_ITERS    latency iterations (default 200, 2 bytes each)
#   PERF_TIMEOUT      seconds per run and side (default 60; each point logs
#                     how long it took: 10-25 s in the debug guest. With 30
#                     the first point failed once in CI, where it ran as the
#                     third test at once (scripts/guest-check.sh counted its
#                     lanes wrong), its reason not kept)
#   PERF_FILTER=RE    run only the points whose name matches the extended
#                     regular expression RE (e.g. '-q 8'); the others SKIP
#   PERF_ARGS=ARGS    more perftest options for every bw run (e.g. "-t 64")
#   PERF_SET          plain (default): every point but the RDMA-CM ones;
#                     cm: only those (perftest_cm.sh, run alone: the kernel
#                     CM's handshake is timed, and beside another test lane
#                     the connection failed about once in 20 runs: CM
#                     UNREACHABLE at the client, and once EINVAL for the
#                     server's QP); all: both
#   PERF_STRACE=1     run both sides under strace -f -Z -k (failed system calls
#                     only, with stack) and show the last failed uverbs calls:
#                     which verbs call the device refused, with its errno
#                     (slow: raise PERF_TIMEOUT)
#   METAROCE_KO / RXE_KO   modules to load when not loaded (lib_netns.sh)

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

type=${PERF_TYPE:-metaroce}
set_=${PERF_SET:-plain}
iters=${PERF_ITERS:-50}
lat_iters=${PERF_LAT_ITERS:-200}
tmo=${PERF_TIMEOUT:-60}
qp_iters=$((iters / 8 < 5 ? 5 : iters / 8))
strace=()
if [ "${PERF_STRACE:-0}" = 1 ]; then
	command -v strace >/dev/null 2>&1 || skip_all "PERF_STRACE=1 but strace is not installed"
fi
top=$(cd "$(dirname "$0")/../.." && pwd)
env=$top/scripts/rdma-env.sh

case "$type" in
metaroce | rxe) ;;
*) skip_all "PERF_TYPE must be metaroce or rxe, not '$type'" ;;
esac
case "$set_" in
plain) plan=15 ;;
cm) plan=4 ;;
all) plan=18 ;;
*) skip_all "PERF_SET must be plain, cm or all, not '$set_'" ;;
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

# server_settled NS PORT PID: listening, or already gone (its log says why).
server_settled() {
	listening "$1" "$2" || ! kill -0 "$3" 2>/dev/null
}

# cm_settled PORT SERVER_PID: the same for an RDMA-CM server (-R)
cm_settled() {
	cm_listening "$1" || ! kill -0 "$2" 2>/dev/null
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
	tail -n 12 "$file" | while IFS= read -r l; do ktap_info "  $side: $l"; done
}

# show_counters SIDE NS DEV: the device's nonzero datagram counters (ud_*:
# the MADs of RDMA-CM go through its QP1), for a failed point.
show_counters() {
	local c
	c=$(rdma_in "$2" statistic show link "$3/1" 2>/dev/null |
		awk '{ for (i = 1; i < NF; i++) if ($i ~ /^ud_/ && $(i + 1) != 0) printf "%s %s ", $i, $(i + 1) }')
	ktap_info "  $1 counters: ${c:-none nonzero}"
	# The kernel CM's message counters of the device (REQ, REP, RTU, ...
	# sent, retried, received, duplicates), where sysfs shows them.
	local d=/sys/class/infiniband_cm/$3/1 g f v
	[ -d "$d" ] || return 0
	c=
	for g in cm_tx_msgs cm_tx_retries cm_rx_msgs cm_rx_duplicates; do
		for f in "$d/$g"/*; do
			v=$(cat "$f" 2>/dev/null) && [ -n "$v" ] && [ "$v" != 0 ] &&
				c+="$g/$(basename "$f") $v "
		done
	done
	ktap_info "  $1 CM: ${c:-none nonzero}"
}

# The failed system calls on /dev/infiniband/uverbs* strace saw, each with the
# libibverbs/provider functions it came from (strace -k): the verbs call the
# device refused and its errno. Only the last few. Left out: the ENOSPC every
# process gets from verbs_init_context (has_ioctl_write() probes the kernel
# with a request that is too short on purpose).
show_strace() {
	local side=$1 file=$2 l
	[ -s "$file" ] || return 0
	awk '
	function flush() {
		if (call != "" && !(call ~ /ENOSPC/ && via ~ /verbs_init_context/))
			{ n++; out[n] = call (via != "" ? "  via " via : "") }
		call = ""; via = ""; depth = 0
	}
	/^[0-9]+ +(write|writev|ioctl)\([0-9]+<\/dev\/infiniband\// {
		flush(); call = $0; sub(/^[0-9]+ +/, "", call); sub(/, 0x[0-9a-f]+\)/, ")", call); next
	}
	/^ > / {
		if (call != "" && depth < 3 && $0 ~ /libibverbs|librdmacm|-rdmav[0-9]+\.so/ &&
		    match($0, /\(([a-z_][a-z0-9_]*)\+/)) {
			f = substr($0, RSTART + 1, RLENGTH - 2)
			if (f !~ /^(__)?(ioctl|write|writev|_?execute_ioctl.*|execute_write.*)$/) {
				via = via (via != "" ? " < " : "") f; depth++
			}
		}
		next
	}
	{ flush() }
	END { flush(); for (i = (n > 3 ? n - 2 : 1); i <= n; i++) print out[i] }
	' "$file" | cut -c1-240 |
		while IFS= read -r l; do ktap_info "  $side strace: $l"; done
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
	local name=$1 kind=$2 prog=$3 spid crc src line hdr res ok=0 why= t0=$SECONDS
	shift 3
	if [ -n "${PERF_FILTER:-}" ] && ! grep -qE -e "$PERF_FILTER" <<<"$name"; then
		ktap_skip "$name" "not in PERF_FILTER"
		return
	fi
	port=$((port + 1))
	rm -f "$logs"/server* "$logs"/client*
	if [ "${PERF_STRACE:-0}" = 1 ]; then
		strace=(strace -f -Z -y -k -qq --seccomp-bpf -e signal=none
			-e trace=write,writev,ioctl -o)
	fi
	# strace outside timeout: timeout's TERM then reaches perftest itself.
	ip netns exec "$NS_A" ${strace[@]+"${strace[@]}" "$logs/server.strace"} \
		timeout "$tmo" "$env" stdbuf -oL "$prog" -d "$RDMA_A" -x "$GID_A" -F -p "$port" "$@" \
		>"$logs/server" 2>&1 &
	spid=$!
	case " $* " in
	*" -R "*)
		# Over RDMA-CM the server listens on an RDMA-CM port, which ss
		# does not see: its listening CM ID is waited for instead, for
		# less than the server's own timeout, so that the reason shows.
		wait_for $((tmo / 2)) cm_settled "$port" "$spid"
		cm_listening "$port" || why=" (the server did not listen on RDMA-CM port $port)"
		;;
	*)
		# Less than the server's own timeout, so that a server that
		# never listens costs one timeout per point, not two.
		wait_for $((tmo / 2)) server_settled "$NS_A" "$port" "$spid" ||
			ktap_info "$name: the server did not listen on port $port"
		;;
	esac
	ip netns exec "$NS_B" ${strace[@]+"${strace[@]}" "$logs/client.strace"} \
		timeout "$tmo" "$env" stdbuf -oL "$prog" -d "$RDMA_B" -x "$GID_B" -F -p "$port" "$@" "$FABRIC_IP_A" \
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
				printf "# %s: computed: %d B in %.3f s (window %.3f s - %.3f s calibration) = %.4g Gb/s, %.4g Mpps\n",
					name, s * n, m, w, c, s * n * 8 / m / 1e9, n / m / 1e6 }'
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
	ktap_info "$name: $((SECONDS - t0)) s from starting the server to both sides' end"
	if [ "$ok" = 1 ]; then
		show_strace client "$logs/client.strace"
		show_strace server "$logs/server.strace"
		ktap_ok "$name"
	else
		ktap_info "$name: client $(rc_text "$crc"), server $(rc_text "$src")$([ -z "$line" ] && echo ', no result line')"
		# The client's lines without their time stamps.
		cut -d' ' -f2- "$logs/client" >"$logs/client.txt"
		show_tail client "$logs/client.txt"
		show_tail server "$logs/server"
		show_counters client "$NS_B" "$RDMA_B"
		show_counters server "$NS_A" "$RDMA_A"
		show_strace client "$logs/client.strace"
		show_strace server "$logs/server.strace"
		ktap_fail "$name$why"
	fi
}

bw() {
	local prog=$1
	shift
	case " $* " in
	*" -R "*)
		if ! rdma_cm_ready; then
			ktap_skip "$prog $* ($type)" "no /dev/infiniband/rdma_cm (rdma_ucm is not available)"
			return
		fi
		;;
	esac
	local n=$iters
	case " $* " in *" -q "*) n=$qp_iters ;; esac
	# shellcheck disable=SC2086
	set -- "$@" -n "$n" ${PERF_ARGS:-}
	kind_half=0 perf_point "$prog $* ($type)" bw "$prog" --report_gbits "$@"
}

lat() {
	local prog=$1 half=$2
	shift 2
	kind_half=$half perf_point "$prog $* -n $lat_iters ($type)" lat "$prog" -n "$lat_iters" "$@"
}

ktap_plan "$plan"

if ! rdma_fabric_up "$type" 2>"$logs/setup"; then
	ktap_info "$(cat "$logs/setup")"
	ktap_fail "$type devices on both ends of the veth pair"
	ktap_finish
fi
GID_A=$(fabric_gid_index "$RDMA_A" "$FABRIC_IP_A")
GID_B=$(fabric_gid_index "$RDMA_B" "$FABRIC_IP_B")
ktap_ok "$type devices on both ends of the veth pair ($RDMA_A GID $GID_A, $RDMA_B GID $GID_B)"

if [ "$set_" != cm ]; then
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
	# UD Sends (at most the MTU each), and UC Writes and Sends.
	bw ib_send_bw -c UD -s 1024
	bw ib_write_bw -c UC -s 65536
	bw ib_send_bw -c UC -s 65536
fi
# Connected through RDMA-CM (-R) instead of perftest's TCP exchange.
if [ "$set_" != plain ]; then
	bw ib_write_bw -s 65536 -R
	bw ib_send_bw -s 65536 -R
	bw ib_read_bw -s 65536 -R
fi

ktap_finish
