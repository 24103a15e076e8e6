#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The benchmark of `make bench`, run inside one VM boot (scripts/bench.sh):
# the same perftest commands over MetaRoCE and over rdma_rxe (and iperf3
# over TCP beside some), on the same topologies
# (selftests/metaroce/lib_netns.sh), each point BENCH_REPEAT times.
# Appends one CSV row per run to OUT/bench.csv:
#   point,transport,repeat,value,unit,perftest_value,cpu_busy,cpu_user,cpu_system,cpu_softirq,wire_bytes,busy_cpu_s,kernel_cpu_s
# value: Gb/s for bandwidth (bytes x 8 / time: perftest's iteration count
# over its sampling window, which with -D d is d less two margins of d/4
# (integer seconds): 2 s of a 4 s run; iperf3's received bytes over its
# own time), microseconds for latency (perftest's t_avg). (Until
# 2026-12-07 perftest's bytes were divided by d: at the default d of 4
# every figure was half the rate; ratios between the RDMA transports were
# right.)
# perftest_value: the figure perftest printed (its clock calibration may fail
# under TCG); value is empty when the run failed or timed out;
# cpu_*: the share of all vCPUs' time, in percent, that was not idle, that
# went to user space, to the kernel and to softirqs, while the client ran
# (from /proc/stat); wire_bytes: what host B's veth1 sent meanwhile (B
# is the client, the data's sender in the bandwidth points: payload,
# headers and resends, after netem's drops), busy_cpu_s and kernel_cpu_s:
# the CPU-seconds of all vCPUs that were busy, and that went to the kernel
# (system, irq, softirq), over the same time (report.py divides them by
# wire_bytes: CPU-seconds per GB). For perftest that time is the client's
# whole run, its connection set-up included (under a second of about
# 5.7 at the default d of 4), so the figure leans against the RDMA
# transports a little.
# Transport "tcp" (in BENCH_TYPES by default) is iperf3 beside the direct
# topology's ib_write_bw points (run_tcp).
#
#   fabric-bench.sh OUT
# Environment: BENCH_REPEAT (3), BENCH_DURATION (seconds per bandwidth run, 4),
# BENCH_SIZE (bytes per message, 65536), BENCH_PLANE_RATE (per-plane limit for
# the plane points, 40mbit), BENCH_FILTER (an extended regular expression:
# only the points whose name matches), BENCH_PERF (1: a flat kernel and user
# profile of the whole guest during every bandwidth run, with perf's cpu-clock
# sampling, written as OUT/perf-POINT-TRANSPORT-REPEAT.txt; needs perf, and
# the server waits on perf's start, so the figures are not the plain ones),
# BENCH_BASE_KO (a metaroce.ko of another revision, built for this kernel:
# the latency point, lossless ib_write_bw and ib_send_bw, and ib_write_bw at
# 1% loss are also run alternating that module and this one, each loaded in
# turn into this boot, as points "write_lat base"/"write_lat this",
# "write_bw base"/"write_bw this", "send_bw base"/..., "write_bw loss 1% base"/...,
# and "write_lat 64K base"/... (64 KiB Writes one at a time: each message
# ends with a short tail on every path, which waits for the receiver's
# delayed ACK unless something asks for it)
# (a pair runs when BENCH_FILTER, if given, matches its name, alone or with
# " base" or " this"; BENCH_FILTER='(base|this)$' runs all five); boot-to-boot drift, which
# moves latency by a third under TCG, then hits both alike), BENCH_INCAST_SENDERS (8) and BENCH_INCAST_RATE_KBIT
# (24000: the incast point's bottleneck, below the ~35 Mbit/s that eight
# MetaRoCE senders and their receiver move together in this guest, where
# the CPU and not the link would limit; Documentation/performance.md),
# BENCH_TYPES (the transports of each point, "metaroce rxe tcp"; tcp runs
# only beside the direct topology's ib_write_bw points),
# BENCH_PLANES (the plane counts of the plane points: "1 2 4 8"; with 4 come
# the failed-plane points: plane 1 down before the run, and plane 1 failing
# BENCH_DURATION/2 after the client starts).
# Points "write_bw N QPs" (BENCH_QPS: "16 1024") are lossless write_bw with
# perftest's -q N (and -t 16384/N, at most 128: the send queue depth per QP,
# so that perftest's CQ fits rxe's 32767 entries): N QPs on one device to
# one peer, over one MetaRoCE
# connection; against "write_bw loss 0%" (one QP) they show whether the
# aggregate holds as QPs grow. Each run also records the kernel memory the
# two programs' objects took, half-way through the run, per QP (both ends
# are in this guest, so 2N QPs; /proc/meminfo's Slab, VmallocUsed,
# KernelStack and PageTables against just before the server started; their
# CQs, regions and contexts are counted in too) as "# qp-memory:" lines.
# Points "write_bw POLL_CQ" and "write_lat POLL_CQ" are lossless write_bw
# and write_lat on MetaRoCE alone with METAROCE_NO_RINGS=1 (every ibv_poll_cq
# a system call): what the completion rings buy, in the same boot (a
# BENCH_FILTER of "write_lat" selects both latency points).

out=$1
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
. "$top/selftests/metaroce/lib.sh"
. "$top/selftests/metaroce/lib_netns.sh"
. "$top/scripts/rdma-env.sh"
rdma_env=$top/scripts/rdma-env.sh

repeat=${BENCH_REPEAT:-3}
dur=${BENCH_DURATION:-4}
case "$dur" in
'' | *[!0-9]*) dur=0 ;;
*) dur=$((10#$dur)) ;;
esac
if [ "$dur" = 0 ]; then
	echo "# BENCH_DURATION must be a whole number of seconds above 0, not '${BENCH_DURATION:-}'"
	exit 1
fi
# perftest's sampling window in -D mode: the run less a margin of a quarter
# (integer seconds) at each end; below 4 s there is no margin, and the
# window holds the ramp-up too (figures not comparable with longer runs).
window=$((dur - 2 * (dur / 4)))
size=${BENCH_SIZE:-65536}
rate=${BENCH_PLANE_RATE:-40mbit}
csv=$out/bench.csv
logs=$(mktemp -d)
port=19000
echo "point,transport,repeat,value,unit,perftest_value,cpu_busy,cpu_user,cpu_system,cpu_softirq,wire_bytes,busy_cpu_s,kernel_cpu_s" >"$csv"

# cpu_times: the summed CPU line of /proc/stat (user nice system idle iowait
# irq softirq steal ...), in clock ticks.
cpu_times() {
	awk '$1 == "cpu" { $1 = ""; print; exit }' /proc/stat
}

# kernel_kib: the kernel's own memory now, in KiB: slab, vmalloc, kernel
# stacks and page tables (what verbs objects are made of).
kernel_kib() {
	awk '$1 ~ /^(Slab|VmallocUsed|KernelStack|PageTables):$/ { n += $2 } END { print n + 0 }' /proc/meminfo
}

# backlog_drops: packets the guest's CPUs dropped for a full input backlog
# (netdev_max_backlog; where veth and loopback traffic queues), so far.
backlog_drops() {
	local n=0 processed dropped rest
	while read -r processed dropped rest; do n=$((n + 16#$dropped)); done </proc/net/softnet_stat
	echo "$n"
}

# run_costs C0 W0: what a run cost since cpu_times gave C0 and host B's
# veth1 had sent W0 bytes, as the CSV's last seven columns:
# "busy,user,system,softirq" in percent of all vCPUs' time (empty if no
# time passed), then "wire_bytes,busy_s,kernel_s": the bytes veth1 sent
# meanwhile and the CPU-seconds of all vCPUs, busy (all but idle and
# iowait) and kernel (system, irq and softirq: the transports' own work; a
# polling program's spin is user time). cpu_costs and wire_costs split it.
run_costs() {
	local c1
	c1=$(cpu_times)
	awk -v a="$1" -v b="$c1" -v w="$(($(dev_tx_bytes "$NS_B" veth1) - $2))" \
		-v hz="$(getconf CLK_TCK)" 'BEGIN {
		n = split(a, x); split(b, y); total = 0
		for (i = 1; i <= n; i++) { d[i] = y[i] - x[i]; total += d[i] }
		if (total <= 0) printf ",,,,"
		else printf "%.0f,%.0f,%.0f,%.0f,", 100 * (total - d[4] - d[5]) / total,
			100 * (d[1] + d[2]) / total, 100 * d[3] / total, 100 * d[7] / total
		printf "%d,%.2f,%.2f", w, (total - d[4] - d[5]) / hz, (d[3] + d[6] + d[7]) / hz
	}'
}

# cpu_costs COSTS, wire_costs COSTS: run_costs's first four fields (the CPU
# split), its last three (bytes and CPU-seconds).
cpu_costs() { echo "${1%,*,*,*}"; }
wire_costs() { echo "${1#*,*,*,*,}"; }

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

# offloads off|back NS DEV: with "off", TSO, GSO and GRO of DEV off, its
# settings saved first; fails unless all three read back off. With "back",
# the saved settings put back, and a note when they do not read back so.
offloads() {
	local saved=$logs/offloads-$3 now
	if [ "$1" = back ]; then
		[ -s "$saved" ] || return 0
		# shellcheck disable=SC2046 # "tso on gso on gro off": separate words
		ip netns exec "$2" ethtool -K "$3" $(cat "$saved") 2>/dev/null
		now=$(offload_state "$2" "$3")
		[ "$now" = "$(cat "$saved")" ] || echo "# $3: offloads not put back: $now (were $(cat "$saved"))"
		rm -f "$saved"
		return 0
	fi
	offload_state "$2" "$3" >"$saved"
	[ -s "$saved" ] || return 1
	ip netns exec "$2" ethtool -K "$3" tso off gso off gro off 2>/dev/null
	# ethtool -K succeeds when only some features changed: read them back.
	[ "$(offload_state "$2" "$3")" = "tso off gso off gro off " ]
}

# offload_state NS DEV: "tso X gso Y gro Z " as ethtool -k reads them.
offload_state() {
	ip netns exec "$1" ethtool -k "$2" 2>/dev/null |
		awk -F': ' '$1 ~ /^(tcp-segmentation-offload|generic-segmentation-offload|generic-receive-offload)$/ {
			sub(/ .*/, "", $2); if (!($1 in v)) n++; v[$1] = $2 }
		END { if (n == 3) printf "tso %s gso %s gro %s ", v["tcp-segmentation-offload"],
			v["generic-segmentation-offload"], v["generic-receive-offload"] }'
}

# run_tcp POINT KIND PROG REPEAT: the TCP column of a direct-topology
# ib_write_bw point (tcp_here=1): iperf3 from B to A for BENCH_DURATION
# seconds over the same veth pair and netem, with TSO, GSO and GRO off on
# both ends (so that TCP too sends and receives one packet per MTU), put
# back after. Other points get no TCP row. A run that cannot be made (no
# iperf3, offloads that stay on) or that fails (iperf3's exit status, or an
# "error" in its JSON: with -J it exits 0 on a refused connection) gives a
# row with an empty value, i.e. a failed run in the table.
tcp_here=
run_tcp() {
	local point=$1 kind=$2 prog=$3 rep=$4 c0 w0 value="" costs=",,,,,," spid rc why=""
	local tmo=$((30 + dur))
	[ "$kind" = bw ] && [ "$prog" = ib_write_bw ] && [ "$tcp_here" = 1 ] || return 0
	if ! command -v iperf3 >/dev/null; then
		why="no iperf3"
	elif ! offloads off "$NS_A" veth0 || ! offloads off "$NS_B" veth1; then
		why="TSO, GSO and GRO cannot be turned off (ethtool)"
	fi
	if [ -z "$why" ]; then
		port=$((port + 1))
		ip netns exec "$NS_A" timeout "$tmo" iperf3 -s -1 -p "$port" >"$logs/server" 2>&1 &
		spid=$!
		wait_for 20 listening "$NS_A" "$port"
		profile_start "$point-tcp-$rep" "$kind"
		c0=$(cpu_times)
		w0=$(dev_tx_bytes "$NS_B" veth1)
		ip netns exec "$NS_B" timeout "$tmo" iperf3 -c "$FABRIC_IP_A" -p "$port" -t "$dur" -J \
			>"$logs/client" 2>"$logs/client.err"
		rc=$?
		costs=$(run_costs "$c0" "$w0")
		profile_end
		# What the receiver got, over iperf3's own measured time.
		value=$(python3 -c 'import json, sys
try:
    j = json.load(open(sys.argv[1]))
    if "error" in j:
        print("error: " + str(j["error"]), file=sys.stderr)
    else:
        print("%.5f" % (j["end"]["sum_received"]["bits_per_second"] / 1e9))
except (OSError, ValueError, KeyError, TypeError) as e:
    print("no figure in the JSON: %r" % e, file=sys.stderr)' "$logs/client" 2>>"$logs/client.err")
		if [ "$rc" = 124 ]; then
			why="timed out after $tmo s"
			value=
		elif [ "$rc" != 0 ]; then
			why="iperf3 exit status $rc"
			value=
		fi
		# A server whose client never got through (a refused connection
		# exits 0) would wait out its timeout.
		[ -n "$value" ] || kill "$spid" 2>/dev/null
		wait "$spid"
	fi
	offloads back "$NS_A" veth0
	offloads back "$NS_B" veth1
	echo "$point,tcp,$rep,$value,Gb/s,,$costs" >>"$csv"
	echo "# $point tcp #$rep: ${value:-failed} (cpu busy,user,sys,softirq % $(cpu_costs "$costs"); wire bytes,busy cpu s,kernel cpu s $(wire_costs "$costs"))"
	if [ -z "$value" ]; then
		[ -z "$why" ] || echo "#   $why"
		tail -3 "$logs/client.err" 2>/dev/null | sed 's/^/#   /'
	fi
	rm -f "$logs/client.err"
}

# run_once POINT TYPE KIND PROG ARGS...: one run, one CSV row (for TYPE
# tcp, run_tcp: a row only beside the direct ib_write_bw points). With
# before_run set, the function it names runs first; with mid_run set, the
# function it names runs half of BENCH_DURATION after the client starts (a
# plane failing during the transfer). With no_rings=1, MetaRoCE's runs
# (both sides) poll their CQs with POLL_CQ (METAROCE_NO_RINGS=1) instead
# of reading the completion rings.
before_run=
mid_run=
no_rings=
qps=
plane_back() {
	plane_up 1
	sleep 2
}
plane_fail() {
	plane_down 1
}
run_once() {
	local point=$1 type=$2 kind=$3 prog=$4 rep=$5 da db ga gb spid mpid="" line value="" pf="" c0 d0 t0
	local pre=() k0 qpid= w0 costs
	shift 5
	if [ "$type" = tcp ]; then
		run_tcp "$point" "$kind" "$prog" "$rep"
		return
	fi
	[ "$type" = metaroce ] && [ "$no_rings" = 1 ] && pre=(env METAROCE_NO_RINGS=1)
	[ -z "$before_run" ] || "$before_run"
	if [ "$type" = rxe ]; then da=$RXE_A db=$RXE_B; else da=$RDMA_A db=$RDMA_B; fi
	ga=$(fabric_gid_index "$da" "$FABRIC_IP_A")
	gb=$(fabric_gid_index "$db" "$FABRIC_IP_B")
	port=$((port + 1))
	# (Creating and connecting many QPs takes its time under TCG.)
	local tmo=$((30 + dur))
	[ -z "$qps" ] || tmo=$((30 + dur + qps / 8))
	k0=$(kernel_kib)
	ip netns exec "$NS_A" timeout "$tmo" "${pre[@]}" "$rdma_env" "$prog" -d "$da" -x "$ga" -F -p "$port" "$@" \
		>"$logs/server" 2>&1 &
	spid=$!
	wait_for 20 listening "$NS_A" "$port"
	profile_start "$point-$type-$rep" "$kind"
	c0=$(cpu_times)
	d0=$(backlog_drops)
	w0=$(dev_tx_bytes "$NS_B" veth1)
	t0=$(date +%s%N)
	if [ -n "$mid_run" ]; then
		(
			sleep "$(awk -v d="$dur" 'BEGIN { print d / 2 }')"
			"$mid_run"
		) &
		mpid=$!
	fi
	if [ -n "$qps" ]; then
		# Half-way through the transfer, which starts once every QP is
		# created and connected (the client prints its result header).
		(
			for ((w = 0; w < tmo * 2; w++)); do
				grep -q '#bytes' "$logs/client" 2>/dev/null && break
				sleep 0.5
			done
			sleep "$(awk -v d="$dur" 'BEGIN { print d / 2 }')"
			echo "$(($(kernel_kib) - k0))" >"$logs/kmem"
		) &
		qpid=$!
	fi
	ip netns exec "$NS_B" timeout "$tmo" "${pre[@]}" "$rdma_env" stdbuf -oL "$prog" -d "$db" -x "$gb" -F -p "$port" "$@" \
		"$FABRIC_IP_A" >"$logs/client" 2>&1
	[ -z "$mpid" ] || wait "$mpid"
	if [ -n "$qpid" ]; then
		wait "$qpid"
		awk -v k="$(cat "$logs/kmem" 2>/dev/null)" -v n="$qps" -v p="$point" -v t="$type" -v r="$rep" \
			'BEGIN { if (k != "") printf "# qp-memory: %s %s #%s: %d KiB for %d QPs, %.1f KiB per QP\n", p, t, r, k, 2 * n, k / (2 * n) }'
		rm -f "$logs/kmem"
	fi
	costs=$(run_costs "$c0" "$w0")
	t0=$((($(date +%s%N) - t0) / 1000000))
	d0=$(($(backlog_drops) - d0))
	profile_end
	wait "$spid"
	line=$(awk 'seen && $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ { $1 = $1; print; exit }
		$1 == "#bytes" { seen = 1 }' "$logs/client")
	if [ -n "$line" ]; then
		# shellcheck disable=SC2086
		set -- $line
		case "$kind" in
		bw)	# bytes iterations peak average msgrate
			value=$(awk -v b="$1" -v n="$2" -v d="$window" 'BEGIN { printf "%.5f", b * n * 8 / d / 1e9 }')
			pf=$4 ;;
		lat)	# bytes iterations t_min t_max t_typical t_avg ...
			value=$6
			pf=$5 ;;
		esac
	fi
	echo "$point,$type,$rep,$value,$([ "$kind" = bw ] && echo Gb/s || echo us),$pf,$costs" >>"$csv"
	echo "# $point $type #$rep: ${value:-failed} (cpu busy,user,sys,softirq % $(cpu_costs "$costs"); client ran $t0 ms; $d0 backlog drops; wire bytes,busy cpu s,kernel cpu s $(wire_costs "$costs"))"
	[ -n "$value" ] || tail -3 "$logs/client" | sed 's/^/#   /'
}

# profile_start NAME KIND: with BENCH_PERF=1, a system-wide profile of the
# coming bandwidth run; profile_end writes it, symbols hottest first, into
# OUT/perf-NAME.txt. perf takes seconds to start under TCG (it reads every
# process's maps first), longer than a run: it starts with its events off,
# and profile_start turns them on through perf's control FIFO and waits for
# the acknowledgement, so that the samples are those of the run, not of the
# idle time after it (before, a profile was 99.7% the idle loop).
prof=
prof_pid=
profile_start() {
	prof=
	[ "${BENCH_PERF:-0}" = 1 ] && [ "$2" = bw ] && command -v perf >/dev/null || return 0
	prof="$out/perf-$(tr -c 'A-Za-z0-9.\n-' _ <<<"$1")"
	rm -f "$logs/perf.ctl" "$logs/perf.ack"
	mkfifo "$logs/perf.ctl" "$logs/perf.ack" || {
		prof=
		return 0
	}
	# The data file on tmpfs: perf cannot finish one on the 9p share.
	perf record -q -a -e cpu-clock -F 499 -D -1 \
		--control "fifo:$logs/perf.ctl,$logs/perf.ack" -o "$logs/perf.data" -- sleep 600 \
		>"$prof.err" 2>&1 &
	prof_pid=$!
	# Opening the FIFO blocks until perf has it open: both sides in
	# timeouts, so that a perf that failed costs a minute, not the run.
	if timeout 60 sh -c 'echo enable >"$1" && read -r a <"$2" && [ "$a" = ack ]' sh \
		"$logs/perf.ctl" "$logs/perf.ack"; then
		return 0
	fi
	echo "# perf did not start: no profile for $1"
	kill "$prof_pid" 2>/dev/null
	wait "$prof_pid" 2>/dev/null
	prof=
}

profile_end() {
	[ -n "$prof" ] || return 0
	timeout 20 sh -c 'echo disable >"$1" && read -r a <"$2"' sh "$logs/perf.ctl" "$logs/perf.ack"
	kill -INT "$prof_pid" 2>/dev/null
	wait "$prof_pid"
	perf report -i "$logs/perf.data" --stdio --no-children --sort dso,sym 2>>"$prof.err" |
		grep -v '^#' | grep -v '^$' | head -80 >"$prof.txt"
	rm -f "$logs/perf.data" "$logs/perf.ctl" "$logs/perf.ack"
	[ -s "$prof.txt" ] && rm -f "$prof.err"
}

# point NAME KIND PROG ARGS...: each transport of BENCH_TYPES (TCP only where
# run_tcp runs), BENCH_REPEAT times each, interleaved so that a drift of the
# machine hits all alike (with no_rings=1, MetaRoCE only: rxe's runs would
# be those of the point before).
point() {
	local name=$1 r t types=${BENCH_TYPES:-metaroce rxe tcp}
	shift
	if [ -n "${BENCH_FILTER:-}" ] && ! grep -qE -e "$BENCH_FILTER" <<<"$name"; then
		return
	fi
	[ "$no_rings" = 1 ] && types=metaroce
	for ((r = 1; r <= repeat; r++)); do
		for t in $types; do
			run_once "$name" "$t" "$1" "$2" "$r" "${@:3}"
		done
	done
}

bw=(-s "$size" -D "$dur")

echo "# direct: the hosts joined by one veth pair"
devices_up || { echo "# no fabric"; exit 1; }
# netem as the root qdisc of both ends, dropping nothing: what the emulator
# itself costs (every packet through its queue), the reference for the loss
# points' cost beyond it.
# TCP beside them on these points (run_tcp).
tcp_here=1
netem_both loss 0%
point "write_bw netem 0%" bw ib_write_bw "${bw[@]}"
netem_clear
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
tcp_here=
point "write_lat" lat ib_write_lat -s 2 -n 500
# The same without completion rings (each poll a system call), for what
# the rings bought, in the same boot.
no_rings=1
point "write_bw POLL_CQ" bw ib_write_bw "${bw[@]}"
point "write_lat POLL_CQ" lat ib_write_lat -s 2 -n 500
no_rings=
# Many QPs on one device to one peer (one connection), with their memory.
# perftest's CQ holds tx_depth (-t, 128) completions per QP, and rxe's CQs
# at most 32767: the depth per QP is 16384 / N, at most 128 (16 for 1024).
for qps in ${BENCH_QPS:-16 1024}; do
	depth=$((16384 / qps))
	[ "$depth" -gt 128 ] && depth=128
	point "write_bw $qps QPs" bw ib_write_bw "${bw[@]}" -q "$qps" -t "$depth"
done
qps=
devices_down
# A/B: this module against BENCH_BASE_KO, loaded in turn.
# ab_wanted NAME: whether the A/B pair of NAME runs: BENCH_FILTER matches
# NAME itself, "NAME base" or "NAME this" (both run either way).
ab_wanted() {
	[ -z "${BENCH_FILTER:-}" ] ||
		printf '%s\n' "$1" "$1 base" "$1 this" | grep -qE -e "$BENCH_FILTER"
}
if [ -n "${BENCH_BASE_KO:-}" ] && { ab_wanted write_lat || ab_wanted write_bw ||
	ab_wanted send_bw || ab_wanted "write_bw loss 1%" || ab_wanted "write_lat 64K"; }; then
	echo "# A/B: $BENCH_BASE_KO against this module, alternating"
	for ((r = 1; r <= repeat; r++)); do
		# ABBA: neither module always goes first.
		order="base this"
		[ $((r % 2)) = 0 ] && order="this base"
		for which in $order; do
			rmmod metaroce || { echo "# cannot unload metaroce"; break 2; }
			if [ "$which" = base ]; then
				insmod "$BENCH_BASE_KO" || { echo "# cannot load $BENCH_BASE_KO"; break 2; }
			else
				modprobe metaroce || rdma_type_load metaroce
			fi
			devices_up || {
				echo "# no fabric with the $which module"
				devices_down
				break 2
			}
			if ab_wanted write_lat; then
				run_once "write_lat $which" metaroce lat ib_write_lat "$r" -s 2 -n 500
			fi
			if ab_wanted "write_lat 64K"; then
				run_once "write_lat 64K $which" metaroce lat ib_write_lat "$r" -s 65536 -n 200
			fi
			if ab_wanted write_bw; then
				run_once "write_bw $which" metaroce bw ib_write_bw "$r" "${bw[@]}"
			fi
			if ab_wanted send_bw; then
				run_once "send_bw $which" metaroce bw ib_send_bw "$r" "${bw[@]}"
			fi
			if ab_wanted "write_bw loss 1%"; then
				netem_both loss 1%
				run_once "write_bw loss 1% $which" metaroce bw ib_write_bw "$r" "${bw[@]}"
				netem_clear
			fi
			devices_down
		done
	done
	# The rest runs on this module (whichever was loaded when a round broke off).
	rmmod metaroce 2>/dev/null
	modprobe metaroce || rdma_type_load metaroce
fi

for planes in ${BENCH_PLANES:-1 2 4 8}; do
	echo "# $planes planes of $rate each"
	devices_up "$planes" || { echo "# no fabric"; exit 1; }
	for ((i = 0; i < planes; i++)); do PLANE_RATE=$rate plane_qdisc "$i"; done
	point "write_bw $planes planes" bw ib_write_bw "${bw[@]}"
	# What each plane's bottleneck did in the data's direction (the perftest
	# client in B writes to the server in A) over this point's runs: bytes
	# and packets through it, tbf throttling, fq_codel's ECN marks.
	for ((i = 0; i < planes; i++)); do
		echo "# plane$i B to A after $planes planes:" \
			$(tc -s -n "$NS_RB" qdisc show dev "plane$i" |
				grep -E "^qdisc tbf|^qdisc fq_codel|Sent|ecn_mark" | tr -s ' \n' ' ')
	done
	if [ "$planes" = 4 ]; then
		plane_down 1
		point "write_bw 4 planes 1 failed" bw ib_write_bw "${bw[@]}"
		plane_up 1
		# The same plane failing BENCH_DURATION/2 after each client starts
		# (perftest's connection set-up included): the transfer must go on
		# over the other three (rxe's one flow stops if it was hashed to
		# plane 1). Before each run the plane is up again and the paths
		# have 2 s to find it.
		before_run=plane_back mid_run=plane_fail
		point "write_bw 4 planes 1 fails mid-run" bw ib_write_bw "${bw[@]}"
		before_run= mid_run=
		plane_up 1
	fi
	devices_down
done

# Incast: selftests/metaroce/incast.sh, both transports through the same
# rate-limited, ECN-marking bottleneck; its "# incast:" lines go to
# OUT/incast.txt (report.py reads them).
if [ -z "${BENCH_FILTER:-}" ] || grep -qE -e "$BENCH_FILTER" <<<"incast"; then
	echo "# incast: ${BENCH_INCAST_SENDERS:-8} senders to one receiver"
	for ((r = 1; r <= repeat; r++)); do
		METAROCE_KO=${METAROCE_KO:-$(modinfo -n metaroce 2>/dev/null)} \
			INCAST_SENDERS=${BENCH_INCAST_SENDERS:-8} \
			INCAST_RATE_KBIT=${BENCH_INCAST_RATE_KBIT:-24000} \
			"$top/selftests/metaroce/incast.sh" >"$logs/incast" 2>&1
		grep "^# incast: " "$logs/incast" | sed "s/^# incast: /repeat $r /" >>"$out/incast.txt"
		grep -E "^(not )?ok " "$logs/incast" | sed "s/^/# incast #$r: /"
	done
fi

rm -rf "$logs"
echo "# done"
