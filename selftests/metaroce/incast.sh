#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Incast: INCAST_SENDERS (8) sender namespaces write to one receiver at once
# through a router whose link to the receiver is the bottleneck: a token
# bucket at INCAST_RATE_KBIT feeding one FIFO CoDel queue that marks ECN
# (fq_codel with a single flow queue, so the queue itself is not fair).
# metaroce.ko is loaded with capacity_mbps at 90% of the bottleneck (rounded
# down to whole Mbit/s): the
# receiver shares that among the senders it counts, in every ACK, and each
# sender paces at its share. Measured over INCAST_SECONDS once every sender
# has run for a while (the hints have gone round):
#   - the receiver counts every sender, each sender paces at its share (or
#     up to an eighth below it, the receiver's cut under ECN marks);
#   - every sender's goodput (new data packets at the receiver, per peer,
#     from its telemetry) within 20% of the mean (the fair share of what
#     crossed the bottleneck), Jain's index >= 0.95;
#   - the bottleneck queue bounded (backlog sampled) and dropping nothing;
#   - the bottleneck used (goodput at least half the senders' shares).
# Then rdma_rxe through the same topology, for comparison (recorded, not
# judged): each sender's offered rate (its veth's transmitted bytes, go-back-N
# resends included), Jain's index and the queue's drops. The figures are
# printed as "# incast:" lines (make bench collects them).
#
# The senders are ib_write_bw clients (perftest, 64 KiB writes, duration
# mode) through scripts/rdma-env.sh. Environment:
#   INCAST_SENDERS    senders (default 8, at most 16)
#   INCAST_RATE_KBIT  the bottleneck's rate (default 3000: below what eight
#                     senders move in the KASAN kernel under emulation, about
#                     3.4 Mbit/s; make bench uses 24000); capacity_mbps is
#                     whole Mbit/s, 90% of it rounded down (2 by default;
#                     at 2.5 Mbit/s Debian's kernel's CoDel queue dropped 3
#                     packets of bursts while the senders kept their shares)
#   INCAST_SECONDS    the measuring window (default 12)
#   INCAST_TYPES      which transports (default "metaroce rxe")
#   INCAST_PERF_ARGS  more ib_write_bw options for both sides (e.g. -e)
#   METAROCE_KO / RXE_KO   the modules (metaroce.ko is reloaded with
#                     capacity_mbps and again without it at the end)

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

senders=${INCAST_SENDERS:-8}
rate=${INCAST_RATE_KBIT:-3000}
window=${INCAST_SECONDS:-12}
types=${INCAST_TYPES:-${METAROCE_TYPES:-metaroce rxe}}
read -r -a perf_args <<<"${INCAST_PERF_ARGS:-}"
capacity=$((rate * 9 / 10 / 1000))
settle=5
# Under emulation the clients start seconds apart, and measure waits up to
# 120 s for all of them to send and 60 s for all to pace at their share: each
# runs long enough to outlast those waits, the settling and the window with a
# margin (for starting the other clients and the slow sampling too), and is
# stopped after the window. (A duration of three windows plus
# a minute ran out in a loaded CI run: five clients ended before the window
# did, and the receiver shared their capacity among the rest.)
duration=$((120 + 60 + settle + window * 2 + 60))

top=$(cd "$(dirname "$0")/../.." && pwd)
env=$top/scripts/rdma-env.sh
prefix=${METAROCE_RDMA_PREFIX:-$("$top/scripts/build-rdma-core.sh" --prefix 2>/dev/null)}
[ -e "$prefix/lib/libibverbs.so.1" ] ||
	skip_all "the rdma-core build is missing (make provider)"
export METAROCE_RDMA_PREFIX=$prefix
command -v ib_write_bw >/dev/null 2>&1 || skip_all "perftest is not installed"
require_tools ip rdma tc ss timeout awk insmod rmmod stdbuf
[ -n "$METAROCE_KO" ] || skip_all "METAROCE_KO is not set (the module is reloaded)"
[ "$senders" -ge 2 ] && [ "$senders" -le 16 ] || skip_all "INCAST_SENDERS must be 2..16"
[ "$capacity" -ge 1 ] || skip_all "a capacity below 1 Mbit/s (raise INCAST_RATE_KBIT)"

NS_R=mrIR-$$
NS_V=mrIV-$$
ns_s() { echo "mrIS$1-$$"; }
DEV_V=
DEVS_S=()
PIDS=()
tested_metaroce=0
logs=$(mktemp -d)
debugfs=/sys/kernel/debug/metaroce

incast_down() {
	local i
	for i in "${PIDS[@]}"; do kill "$i" 2>/dev/null; done
	for i in "${PIDS[@]}"; do wait "$i" 2>/dev/null; done
	PIDS=()
	[ -n "$DEV_V" ] && cleanup_links "$DEV_V" "${DEVS_S[@]}"
	DEV_V=
	DEVS_S=()
	ip netns del "$NS_R" 2>/dev/null
	ip netns del "$NS_V" 2>/dev/null
	for ((i = 0; i < senders; i++)); do ip netns del "$(ns_s "$i")" 2>/dev/null; done
	true
}

unloaded() {
	[ ! -d /sys/module/metaroce ] || rmmod metaroce 2>/dev/null
}

reload_metaroce() {
	wait_for 20 unloaded || {
		echo "# cannot unload metaroce" >&2
		return 1
	}
	insmod "$METAROCE_KO" "$@"
}

# The module goes back to its defaults, so that later tests are not paced.
finish() {
	incast_down
	if [ "$tested_metaroce" = 1 ] && ! reload_metaroce 2>/dev/null; then
		echo "# incast: metaroce.ko could not be reloaded without capacity_mbps" >&2
	fi
	rm -rf "$logs"
}
trap finish EXIT

# ktap_info for every line of a file.
info_file() {
	local l
	while IFS= read -r l; do ktap_info "$l"; done <"$1"
}

# The router, the receiver behind the bottleneck, the senders; TYPE devices.
incast_up() {
	local type=$1 i ns
	ip netns add "$NS_R" && ip netns add "$NS_V" || return 1
	ip -n "$NS_R" link set lo up
	ip -n "$NS_V" link set lo up
	ip link add rcv0 netns "$NS_V" type veth peer name bneck netns "$NS_R" || return 1
	ip -n "$NS_V" addr add 10.80.0.2/24 dev rcv0
	ip -n "$NS_R" addr add 10.80.0.1/24 dev bneck
	ip -n "$NS_V" link set rcv0 up
	ip -n "$NS_R" link set bneck up
	ip -n "$NS_V" route add default via 10.80.0.1
	ip netns exec "$NS_R" sysctl -qw net.ipv4.ip_forward=1 || return 1
	for ((i = 0; i < senders; i++)); do
		ns=$(ns_s "$i")
		ip netns add "$ns" || return 1
		ip -n "$ns" link set lo up
		ip link add snd0 netns "$ns" type veth peer name "up$i" netns "$NS_R" || return 1
		ip -n "$ns" addr add "10.80.$((i + 1)).2/24" dev snd0
		ip -n "$NS_R" addr add "10.80.$((i + 1)).1/24" dev "up$i"
		ip -n "$ns" link set snd0 up
		ip -n "$NS_R" link set "up$i" up
		ip -n "$ns" route add default via "10.80.$((i + 1)).1"
	done
	# The bottleneck: a token bucket, its queue one CoDel FIFO marking ECN.
	tc -n "$NS_R" qdisc add dev bneck root handle 1: tbf rate "${rate}kbit" \
		burst 16kb latency 400ms || return 1
	tc -n "$NS_R" qdisc add dev bneck parent 1:1 handle 10: fq_codel flows 1 ecn \
		limit 2000 target 20ms interval 200ms || return 1
	DEV_V="${type}V$$"
	rdma_in "$NS_V" link add "$DEV_V" type "$type" netdev rcv0 || return 1
	for ((i = 0; i < senders; i++)); do
		DEVS_S[i]="${type}S$i-$$"
		rdma_in "$(ns_s "$i")" link add "${DEVS_S[i]}" type "$type" netdev snd0 || return 1
	done
	wait_for 30 fabric_dev_ready "$DEV_V" 10.80.0.2 || return 1
	for ((i = 0; i < senders; i++)); do
		wait_for 30 fabric_dev_ready "${DEVS_S[i]}" "10.80.$((i + 1)).2" || return 1
	done
}

# Starts the servers and then every client at once.
incast_start() {
	local i gid port
	gid=$(fabric_gid_index "$DEV_V" 10.80.0.2) || return 1
	for ((i = 0; i < senders; i++)); do
		port=$((18900 + i))
		ip netns exec "$NS_V" timeout $((duration + 60)) "$env" ib_write_bw -d "$DEV_V" \
			-x "$gid" -F -s 65536 -D "$duration" -p "$port" ${perf_args[@]+"${perf_args[@]}"} >"$logs/server$i" 2>&1 &
		PIDS+=($!)
	done
	for ((i = 0; i < senders; i++)); do
		wait_for 120 listening "$NS_V" $((18900 + i)) || {
			echo "server $i did not listen: $(tail -n 3 "$logs/server$i")" >&2
			return 1
		}
	done
	STARTED=$SECONDS
	for ((i = 0; i < senders; i++)); do
		gid=$(fabric_gid_index "${DEVS_S[i]}" "10.80.$((i + 1)).2") || {
			echo "no GID for sender $i" >&2
			return 1
		}
		# Line-buffered: the MTU line is read while it runs.
		ip netns exec "$(ns_s "$i")" timeout $((duration + 60)) "$env" stdbuf -oL ib_write_bw \
			-d "${DEVS_S[i]}" -x "$gid" -F -s 65536 -D "$duration" -p $((18900 + i)) \
			${perf_args[@]+"${perf_args[@]}"} \
			10.80.0.2 >"$logs/client$i" 2>&1 &
		CLIENTS[i]=$!
		PIDS+=($!)
	done
}

# The bottleneck queue's counters: "sent_bytes dropped backlog_bytes".
queue_stats() {
	tc -n "$NS_R" -s qdisc show dev bneck | awk '
	$1 == "qdisc" && $2 == "fq_codel" { q = 1 }
	q && $1 == "Sent" { sent = $2; d = $7; sub(/,/, "", d) }
	q && $1 == "backlog" { b = $2; sub(/b$/, "", b); m = 1
		if (b ~ /K$/) m = 1024; if (b ~ /M$/) m = 1048576
		sub(/[KM]$/, "", b); print sent, d, int(b * m); exit }'
}

# Each sender's rcvd (new data packets) as the receiver's telemetry counts
# them, in sender order; and the device line's fields.
rcvd_per_sender() {
	awk -v n="$senders" '
	$1 == "peer" { split($2, ip, "."); for (i = 3; i < NF; i += 2) if ($i == "rcvd") r[ip[3] - 1] = $(i + 1) }
	END { for (i = 0; i < n; i++) printf "%d ", r[i] + 0; print "" }' "$debugfs/$DEV_V"
}

device_field() {
	awk -v k="$2" '$1 == "device" { for (i = 2; i < NF; i++) if ($i == k) print $(i + 1) }' \
		"$debugfs/$1"
}

pace_of_sender() {
	awk '$1 == "peer" && $2 == "10.80.0.2" { for (i = 3; i < NF; i += 2) if ($i == "pace_kbps") print $(i + 1) }' \
		"$debugfs/$1"
}

# What each sender sent into the router (its veth's bytes, as the router's
# end received them), in sender order. Run inside the router's namespace.
tx_per_sender() {
	local i v out=""
	for ((i = 0; i < senders; i++)); do
		read -r v <"/sys/class/net/up$i/statistics/rx_bytes"
		out+="$v "
	done
	echo "$out"
}

sample() {
	if [ "$1" = metaroce ]; then
		rcvd_per_sender
	else
		ip netns exec "$NS_R" bash -c "$(declare -f tx_per_sender); senders=$senders; tx_per_sender"
	fi
}

# jain RATES...: Jain's fairness index.
jain() {
	awk 'BEGIN { for (i = 1; i < ARGC; i++) { s += ARGV[i]; q += ARGV[i] ^ 2 }
		n = ARGC - 1; printf "%.3f\n", (q > 0 ? s * s / (n * q) : 0) }' "$@"
}

# within PCT MEAN RATES...: every rate within PCT% of MEAN.
within() {
	awk -v p="$1" -v m="$2" 'BEGIN { for (i = 3; i < ARGC; i++)
		if (ARGV[i] < m * (1 - p / 100) || ARGV[i] > m * (1 + p / 100)) exit 1 }' "$@"
}

# Whether every sender has sent: the receiver's telemetry has a peer line
# with data for each (MetaRoCE), or the router received from each (rxe).
all_sending() {
	local x
	# shellcheck disable=SC2206
	x=($(sample "$1"))
	[ "${#x[@]}" = "$senders" ] || return 1
	for v in "${x[@]}"; do [ "$v" -gt 0 ] || return 1; done
}

# Whether every sender paces at its share or up to an eighth below it (the
# hints have gone round; a sender that started late, under emulation, is
# no longer in its unpaced start).
all_paced() {
	local i p share=$((capacity * 1000 / senders))
	for ((i = 0; i < senders; i++)); do
		p=$(pace_of_sender "${DEVS_S[i]}")
		[ -n "$p" ] && [ "$p" -le "$share" ] && [ "$p" -ge $((share * 7 / 8)) ] || return 1
	done
}

# client_last_line I: the last line client I printed (rules and '#' left out).
client_last_line() {
	grep -v -- '^-*$' "$logs/client$1" 2>/dev/null | tail -n 1 | tr -d '\r#'
}

# measure TYPE: once every sender sends (MetaRoCE: and paces at its share)
# and then SETTLE seconds, fills RATES
# (Mbit/s per sender), DROPS, QMAX (bytes), SENT (Mbit/s through the
# bottleneck) over a window of about INCAST_SECONDS (measured: starting
# programs is slow under emulation), and RUNNING (clients still running at
# its end: none may have failed). Returns 1 at once (SETUP_FAILED says why,
# the counts and the clients' last lines go to the log) when MetaRoCE's
# senders do not all send within 120 s.
measure() {
	local type=$1 a b q0 q1 t0 t1 tq0 tq1 i payload=1
	if ! wait_for 120 all_sending "$type"; then
		# MetaRoCE's points would all fail after a wasted window: say
		# why at once. rxe's run is recorded, not judged: it goes on.
		SETUP_FAILED="not every sender sent within 120 s of starting"
		echo "$SETUP_FAILED" >&2
		if [ "$type" = metaroce ]; then
			ktap_info "incast: $type: packets received per sender: $(sample "$type")"
			sender_details | sed 's/^/# /'
			for ((i = 0; i < senders; i++)); do
				ktap_info "incast: client $i: $(client_last_line "$i")"
			done
			return 1
		fi
	fi
	if [ "$type" = metaroce ]; then
		wait_for 60 all_paced || echo "not every sender paces at its share" >&2
	fi
	sleep "$settle"
	# Each count is timed by its own clock reading: under emulation a
	# reading program takes a second or more.
	a=$(sample "$type")
	# The connections' counts since they began, at the window's start: the
	# report's are the same counts at its end (the difference is the window's).
	DETAILS0=
	[ "$type" = metaroce ] && DETAILS0=$(sender_details)
	t0=$EPOCHREALTIME
	q0=$(queue_stats)
	tq0=$EPOCHREALTIME
	QMAX=0
	QTRACE=
	SENDERS_SEEN=
	PACES=()
	# The clock in microseconds, compared in bash (an awk started for each
	# look cost about 0.25 s of the window's seconds under emulation).
	# (Its digits only: the decimal point is the locale's, the fraction
	# always six digits.)
	local until_us=$((${t0//[!0-9]/} + window * 1000000))
	while [ "${EPOCHREALTIME//[!0-9]/}" -lt "$until_us" ]; do
		sleep 1
		# shellcheck disable=SC2046
		set -- $(queue_stats)
		[ "${3:-0}" -gt "$QMAX" ] && QMAX=$3
		QTRACE+="${3:-?} "
	done
	if [ "$type" = metaroce ]; then
		SENDERS_SEEN=$(device_field "$DEV_V" senders)
		for ((i = 0; i < senders; i++)); do PACES[i]=$(pace_of_sender "${DEVS_S[i]}"); done
	fi
	RUNNING=0
	ENDED=
	RAN=$((SECONDS - STARTED))
	for ((i = 0; i < senders; i++)); do
		if kill -0 "${CLIENTS[i]}" 2>/dev/null; then
			RUNNING=$((RUNNING + 1))
		else
			ENDED+="client $i ended: $(client_last_line "$i"); "
		fi
	done
	b=$(sample "$type")
	t1=$EPOCHREALTIME
	q1=$(queue_stats)
	tq1=$EPOCHREALTIME
	WINDOW=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
	local qwindow
	qwindow=$(awk -v a="$tq0" -v b="$tq1" 'BEGIN { printf "%.2f", b - a }')
	# Full packets carry the QP's path MTU (perftest's "Mtu : 1024[B]"),
	# at most the device's payload.
	if [ "$type" = metaroce ]; then
		payload=$(device_field "$DEV_V" payload)
		local mtu
		mtu=$(awk '$1 == "Mtu" { v = $3; sub(/\[B\]/, "", v); print v + 0; exit }' "$logs/client0")
		[ -n "$mtu" ] && [ "$mtu" -gt 0 ] && [ "$mtu" -lt "$payload" ] && payload=$mtu
	fi
	# shellcheck disable=SC2206 # word lists on purpose
	local x=($a) y=($b)
	RATES=()
	for ((i = 0; i < senders; i++)); do
		# MetaRoCE: packets x payload bytes; rxe: bytes.
		RATES[i]=$(awk -v d=$((y[i] - x[i])) -v p="$payload" -v w="$WINDOW" \
			'BEGIN { printf "%.3f", d * p * 8 / w / 1e6 }')
	done
	# shellcheck disable=SC2086
	set -- ${q0:-0 0 0}
	local sent0=$1 drop0=$2
	# shellcheck disable=SC2086
	set -- ${q1:-0 0 0}
	DROPS=$(($2 - drop0))
	SENT=$(awk -v b=$(($1 - sent0)) -v w="$qwindow" 'BEGIN { printf "%.3f", b * 8 / w / 1e6 }')
	[ -n "$q0" ] && [ -n "$q1" ] || DROPS="unknown (no fq_codel statistics)"
	return 0
}

run_type() {
	local type=$1 i
	SETUP_FAILED=
	if ! incast_up "$type" 2>"$logs/up.err"; then
		info_file "$logs/up.err"
		return 1
	fi
	CLIENTS=()
	if ! incast_start 2>"$logs/start.err"; then
		info_file "$logs/start.err"
		return 1
	fi
	measure "$type"
}

# What each sender's connection did (MetaRoCE): the fields of its peer line
# that say why a sender fell behind or burst (resends, path moves, timeouts),
# and the receiver's line for that sender (a resend the receiver counts as a
# duplicate was not needed: its packet had arrived, its ACK had not).
sender_details() {
	local i s r
	for ((i = 0; i < senders; i++)); do
		s=$(peer_fields "${DEVS_S[i]}" 10.80.0.2 \
			'window|srtt_us|sent|resent|spurious|relocated|moves|timeouts|naks_rcvd|acks_rcvd')
		r=$(peer_fields "$DEV_V" "10.80.$((i + 1)).2" 'rcvd|duplicates|acks_sent|dropped')
		echo "incast: sender $i$s | receiver:$r"
	done
}

# peer_fields DEV IP NAMES: " name value" for each field of DEV's telemetry
# line of peer IP whose name is one of NAMES (an awk alternation).
peer_fields() {
	awk -v ip="$2" -v re="^($3)\$" '$1 == "peer" && $2 == ip {
		o = ""
		for (k = 3; k < NF; k += 2)
			if ($k ~ re)
				o = o " " $k " " $(k + 1)
		print o }' "$debugfs/$1" 2>/dev/null
}

report() {
	local type=$1 j mean
	j=$(jain "${RATES[@]}")
	mean=$(awk 'BEGIN { for (i = 1; i < ARGC; i++) s += ARGV[i]; printf "%.3f", s / (ARGC - 1) }' "${RATES[@]}")
	ktap_info "incast: $type senders $senders bottleneck_kbit $rate window_s $WINDOW" \
		"rates_mbps ${RATES[*]} mean $mean jain $j bottleneck_mbps $SENT queue_max_bytes $QMAX queue_drops $DROPS"
	JAIN=$j
	MEAN=$mean
	if [ "$type" = metaroce ]; then
		echo "$DETAILS0" | sed 's/^/# at the window'"'"'s start: /'
		sender_details | sed 's/^/# at its end: /'
		ktap_info "incast: queue backlog per second (bytes): ${QTRACE:-}"
	fi
}

npoints=9
[[ " $types " == *" rxe "* ]] && npoints=$((npoints + 1))
ktap_plan $npoints

# --- MetaRoCE -------------------------------------------------------------
if [[ " $types " == *" metaroce "* ]]; then
	tested_metaroce=1
	check "metaroce.ko loads with capacity_mbps=$capacity" reload_metaroce capacity_mbps="$capacity"
	if run_type metaroce; then
		ktap_ok "$senders senders and a receiver behind a ${rate} kbit/s bottleneck"
		report metaroce
		check "every client still runs at the end of the window ($RUNNING of $senders, ${RAN} s after the first started, each runs $duration s)" \
			[ "$RUNNING" = "$senders" ]
		[ -n "$ENDED" ] && ktap_info "incast: $ENDED"
		check "the receiver counts $senders senders (counted: ${SENDERS_SEEN:-none})" \
			[ "${SENDERS_SEEN:-0}" = "$senders" ]
		share=$((capacity * 1000 / senders))
		ok=0
		[ "${#PACES[@]}" = "$senders" ] && ok=1
		for p in "${PACES[@]}"; do
			[ -n "$p" ] && [ "$p" -le "$share" ] && [ "$p" -ge $((share * 7 / 8)) ] || ok=0
		done
		check "every sender paces at its share, $share kbit/s, or up to an eighth below (${PACES[*]})" \
			[ $ok = 1 ]
		check "every sender within 20% of the mean, the fair share of what crossed ($MEAN Mbit/s)" \
			within 20 "$MEAN" "${RATES[@]}"
		check "Jain's index $JAIN >= 0.95" awk -v j="$JAIN" 'BEGIN { exit !(j >= 0.95) }'
		check "the bottleneck queue drops nothing once settled ($DROPS) and stays below 64 KiB ($QMAX bytes)" \
			eval '[ "$DROPS" = 0 ] && [ "$QMAX" -lt 65536 ]'
		check "the senders use the bottleneck: goodput $(awk -v m="$MEAN" -v n="$senders" 'BEGIN { print m * n }') Mbit/s >= half of $capacity" \
			awk -v m="$MEAN" -v n="$senders" -v c="$capacity" 'BEGIN { exit !(m * n >= c / 2) }'
	else
		for ((k = 1; k < 9; k++)); do ktap_fail "metaroce incast (set-up failed${SETUP_FAILED:+: $SETUP_FAILED})"; done
	fi
	incast_down
else
	for ((k = 0; k < 9; k++)); do ktap_skip "metaroce incast" "not in INCAST_TYPES"; done
fi

# --- rdma_rxe, for comparison ----------------------------------------------
if [[ " $types " == *" rxe "* ]]; then
	if ! rdma_type_load rxe; then
		ktap_skip "rxe through the same incast" "rdma_rxe is not available"
	elif run_type rxe; then
		report rxe
		ktap_ok "rxe through the same incast ($RUNNING of $senders clients running at the end; recorded, not judged)"
	else
		ktap_fail "rxe through the same incast (set-up failed)"
	fi
	incast_down
fi
ktap_finish
