#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A small RDMA fabric for the tests that move data: two namespaces joined by
# veth (lib.sh's netns_pair_up) with an RDMA device of one type on each end.
# The same set-up serves soft-RoCE (rxe) and MetaRoCE (metaroce) devices.
# Source lib.sh first.
#
#   rdma_type_load TYPE   make TYPE's module present (rxe: $RXE_KO or modprobe;
#                         metaroce: $METAROCE_KO or already loaded); 1 if not
#   rdma_fabric_up TYPE [PLANES]
#                         NS_A: veth0 $FABRIC_IP_A, device $RDMA_A
#                         NS_B: veth1 $FABRIC_IP_B, device $RDMA_B
#                         returns once both ports are ACTIVE and each device
#                         has its IPv4 address as a RoCE GID. Without PLANES
#                         the hosts are joined directly (one veth pair); with
#                         PLANES (1..8) each host sits behind a router
#                         ($NS_RA, $NS_RB) and the routers are joined by
#                         PLANES parallel links plane0.. (10.78.I.1/30 in RA,
#                         .2 in RB), one multipath route each way that hashes
#                         the UDP ports (fib_multipath_hash_policy 1): every
#                         UDP source port picks a plane, as ECMP does
#   rdma_fabric_down      delete the devices and the namespaces
#   fabric_point TYPE [PLANES]
#                         rdma_fabric_up as the first test point; on failure
#                         it reports why and ends the script (ktap_finish)
#   veth0_moving BYTES    whether A's veth0 sends more than BYTES in a second
#   plane_qdisc I ARGS... on both ends of plane I: netem ARGS (loss, delay,
#                         reordering; may be empty), then, if $PLANE_RATE is
#                         set (e.g. 40mbit), a token bucket at that rate whose
#                         queue is fq_codel with ECN marking
#   plane_down I / plane_up I   plane I's link down (a failed plane: packets
#                         hashed to it are lost until the senders move) / up
#   fabric_gid_of IP / gid6 ADDR
#                         the sysfs spelling of an IPv4 (IPv4-mapped) or IPv6
#                         address's GID (gid6 runs python3)
#   fabric_gid_index DEV IP / v6_index DEV ADDR
#                         the GID index of that address's RoCE v2 GID on DEV
#   dev_tx_bytes NS DEV   bytes net device DEV of namespace NS has sent so far
#   plane_bytes I [NS]    bytes router NS (default RA) has sent on plane I
#                         so far
#   sniff_start RUN / sniff_stop RUN
#                         count the MetaRoCE datagrams on B's veth1 between
#                         the two (udp_sniff.py; needs python3)
#   sniff_field RUN DIRECTION NAME
#                         one of the run's counters, DIRECTION "$FABRIC_IP_A>$FABRIC_IP_B"
#                         or the reverse
#   netem_both ARGS...    the same netem qdisc on veth0 and veth1, i.e. on
#                         both directions ("loss 1%", "delay 1ms reorder 25%")
#   netem_clear           remove it again
#   metaroce_integrity_needs TOOLS...
#                         skip the whole test unless mr-integrity is built,
#                         the rdma-core build with the MetaRoCE provider is
#                         there (its environment is then set), TOOLS are
#                         installed and metaroce.ko is loaded
#   verbs_tools_needs [BIN...]
#                         skip the whole test unless the rdma-core build with
#                         the MetaRoCE provider and each check tool BIN are
#                         there
#   rdma_cm_ready         whether /dev/infiniband/rdma_cm is there (loads
#                         rdma_ucm when it is a module)
#   cm_pair NAME SERVER CLIENT
#                         one test point: an RDMA-CM server program in NS_A,
#                         once it listens (cm_listening PORT: an ID of $RDMA_A
#                         listens), its client in NS_B; @PORT@ in either is
#                         the next port after $CM_PORT; output in $logs
#   pair_verdict NAME CRC SRC LOGDIR
#                         the point of a client/server pair (both exit 0)
#   integrity_point NAME EXPECT ARGS...
#                         one test point: tools/integrity/mr-integrity's server
#                         on $RDMA_A, its client on $RDMA_B, ARGS to both;
#                         EXPECT is "pass" or "fail" (a run with -X must fail)

FABRIC_IP_A=10.77.0.1
FABRIC_IP_B=10.77.0.2
RDMA_A=
RDMA_B=
NS_RA=mrRA-$$
NS_RB=mrRB-$$
FABRIC_PLANES=0

rdma_type_load() {
	case "$1" in
	rxe)
		[ -d /sys/module/rdma_rxe ] && return 0
		if [ -n "$RXE_KO" ]; then
			insmod "$RXE_KO" 2>/dev/null
		else
			modprobe rdma_rxe 2>/dev/null
		fi
		[ -d /sys/module/rdma_rxe ]
		;;
	metaroce)
		[ -d /sys/module/metaroce ] && return 0
		[ -n "$METAROCE_KO" ] && insmod "$METAROCE_KO" 2>/dev/null
		[ -d /sys/module/metaroce ]
		;;
	*)
		echo "rdma_type_load: unknown device type '$1'" >&2
		return 1
		;;
	esac
}

# The sysfs spelling of the RoCE GID of an IPv4 address:
# 10.77.0.1 -> 0000:0000:0000:0000:0000:ffff:0a4d:0001
fabric_gid_of() {
	local IFS=.
	# shellcheck disable=SC2086
	set -- $1
	printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$1" "$2" "$3" "$4"
}

# fabric_gid_index DEV IP: the GID table index of IP's RoCE v2 GID (for -g/-x).
fabric_gid_index() {
	roce_v2_index "$1" "$(fabric_gid_of "$2")"
}

# gid6 ADDR: the sysfs spelling of an IPv6 address's GID (eight groups of
# four hex digits).
gid6() {
	python3 -c 'import ipaddress, sys
print(":".join("%04x" % g for g in __import__("struct").unpack(">8H", ipaddress.IPv6Address(sys.argv[1]).packed)))' "$1"
}

# v6_index DEV ADDR: the GID index of ADDR's RoCE v2 GID on DEV.
v6_index() {
	roce_v2_index "$1" "$(gid6 "$2")"
}

# fabric_dev_ready DEV IP: port 1 ACTIVE and IP's GID in the table.
fabric_dev_ready() {
	local dev=/sys/class/infiniband/$1/ports/1 gid
	gid=$(fabric_gid_of "$2")
	grep -q ACTIVE "$dev/state" 2>/dev/null &&
		grep -qx "$gid" "$dev"/gids/* 2>/dev/null
}

# The multiplane topology (see the top): hosts A and B behind routers RA, RB.
planes_up() {
	local n=$1 i hops_a="" hops_b=""
	FABRIC_PLANES=$n
	FABRIC_IP_A=10.77.1.1
	FABRIC_IP_B=10.77.2.1
	for ns in "$NS_A" "$NS_B" "$NS_RA" "$NS_RB"; do
		ip netns add "$ns" || return 1
		ip -n "$ns" link set lo up
	done
	ip link add veth0 netns "$NS_A" type veth peer name host netns "$NS_RA" || return 1
	ip link add veth1 netns "$NS_B" type veth peer name host netns "$NS_RB" || return 1
	ip -n "$NS_A" addr add 10.77.1.1/24 dev veth0
	ip -n "$NS_RA" addr add 10.77.1.254/24 dev host
	ip -n "$NS_B" addr add 10.77.2.1/24 dev veth1
	ip -n "$NS_RB" addr add 10.77.2.254/24 dev host
	ip -n "$NS_A" link set veth0 up
	ip -n "$NS_B" link set veth1 up
	ip -n "$NS_RA" link set host up
	ip -n "$NS_RB" link set host up
	ip -n "$NS_A" route add default via 10.77.1.254
	ip -n "$NS_B" route add default via 10.77.2.254
	for ((i = 0; i < n; i++)); do
		ip link add "plane$i" netns "$NS_RA" type veth peer name "plane$i" netns "$NS_RB" ||
			return 1
		ip -n "$NS_RA" addr add "10.78.$i.1/30" dev "plane$i"
		ip -n "$NS_RB" addr add "10.78.$i.2/30" dev "plane$i"
		ip -n "$NS_RA" link set "plane$i" up
		ip -n "$NS_RB" link set "plane$i" up
		hops_a+=" nexthop via 10.78.$i.2 dev plane$i"
		hops_b+=" nexthop via 10.78.$i.1 dev plane$i"
	done
	for ns in "$NS_RA" "$NS_RB"; do
		ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1 \
			net.ipv4.fib_multipath_hash_policy=1 || return 1
	done
	# shellcheck disable=SC2086 # the nexthops are separate words
	ip -n "$NS_RA" route add 10.77.2.0/24 $hops_a || return 1
	# shellcheck disable=SC2086
	ip -n "$NS_RB" route add 10.77.1.0/24 $hops_b || return 1
}

plane_qdisc() {
	local i=$1 ns
	shift
	for ns in "$NS_RA" "$NS_RB"; do
		tc -n "$ns" qdisc del dev "plane$i" root 2>/dev/null
		tc -n "$ns" qdisc add dev "plane$i" root handle 1: netem limit 10000 "$@" || return 1
		if [ -n "${PLANE_RATE:-}" ]; then
			tc -n "$ns" qdisc add dev "plane$i" parent 1:1 handle 2: \
				tbf rate "$PLANE_RATE" burst 32k latency 200ms || return 1
			tc -n "$ns" qdisc add dev "plane$i" parent 2:1 handle 3: \
				fq_codel ecn || return 1
		fi
	done
}

plane_down() {
	ip -n "$NS_RA" link set "plane$1" down
}

plane_up() {
	ip -n "$NS_RA" link set "plane$1" up
}

dev_tx_bytes() {
	ip netns exec "$1" cat "/sys/class/net/$2/statistics/tx_bytes"
}

plane_bytes() {
	dev_tx_bytes "${2:-$NS_RA}" "plane$1"
}

SNIFF_DIR=
SNIFF_PID=

sniff_start() {
	[ -n "$SNIFF_DIR" ] || SNIFF_DIR=$(mktemp -d)
	rm -f "$SNIFF_DIR/$1" "$SNIFF_DIR/$1.ready"
	ip netns exec "$NS_B" python3 "$(dirname "${BASH_SOURCE[0]}")/udp_sniff.py" veth1 \
		"$SNIFF_DIR/$1" &
	SNIFF_PID=$!
	wait_for 20 test -e "$SNIFF_DIR/$1.ready"
}

sniff_stop() {
	local l
	kill -TERM "$SNIFF_PID" 2>/dev/null
	wait "$SNIFF_PID" 2>/dev/null
	SNIFF_PID=
	while IFS= read -r l; do ktap_info "wire: $l"; done <"$SNIFF_DIR/$1"
}

sniff_field() {
	awk -v d="$2" -v k="$3=" '$1 == d {
		for (i = 2; i <= NF; i++)
			if (index($i, k) == 1)
				print substr($i, length(k) + 1)
	}' "$SNIFF_DIR/$1"
}

rdma_fabric_up() {
	local type=$1 planes=${2:-}
	RDMA_A="${type}A$$"
	RDMA_B="${type}B$$"
	if [ -n "$planes" ]; then
		planes_up "$planes" || return 1
	else
		netns_pair_up || return 1
	fi
	rdma_in "$NS_A" link add "$RDMA_A" type "$type" netdev veth0 || return 1
	rdma_in "$NS_B" link add "$RDMA_B" type "$type" netdev veth1 || return 1
	wait_for 20 fabric_dev_ready "$RDMA_A" "$FABRIC_IP_A" || {
		echo "rdma_fabric_up: $RDMA_A did not become ready" >&2
		return 1
	}
	wait_for 20 fabric_dev_ready "$RDMA_B" "$FABRIC_IP_B" || {
		echo "rdma_fabric_up: $RDMA_B did not become ready" >&2
		return 1
	}
}

fabric_point() {
	local err rc name=$1 what
	[ "$1" = metaroce ] && name=MetaRoCE
	what="$name devices on both ends of the veth pair"
	[ -n "${2:-}" ] && what="$name devices on hosts behind $2 planes"
	err=$(mktemp)
	rdma_fabric_up "$@" 2>"$err"
	rc=$?
	if [ $rc != 0 ]; then
		[ -s "$err" ] && ktap_info "$(cat "$err")"
		rm -f "$err"
		ktap_fail "$what"
		ktap_finish
	fi
	rm -f "$err"
	ktap_ok "$what ($RDMA_A, $RDMA_B)"
}

veth0_moving() {
	local a b
	a=$(dev_tx_bytes "$NS_A" veth0)
	sleep 1
	b=$(dev_tx_bytes "$NS_A" veth0)
	[ "$b" -gt $((a + $1)) ]
}

rdma_fabric_down() {
	[ -n "$SNIFF_PID" ] && kill "$SNIFF_PID" 2>/dev/null
	[ -n "$SNIFF_DIR" ] && rm -rf "$SNIFF_DIR"
	[ -n "$RDMA_A" ] && cleanup_links "$RDMA_A" "$RDMA_B"
	netns_pair_down
	ip netns del "$NS_RA" 2>/dev/null
	ip netns del "$NS_RB" 2>/dev/null
	true
}

netem_both() {
	ip -n "$NS_A" link show veth0 >/dev/null 2>&1 || return 1
	tc -n "$NS_A" qdisc replace dev veth0 root netem "$@" &&
		tc -n "$NS_B" qdisc replace dev veth1 root netem "$@"
}

# listening NS PORT: a TCP socket listens on PORT in namespace NS:
# `pid_listening` on the first process found in NS (any will do: its
# /proc/PID/net lists the whole namespace's sockets), found in bash. The `ip netns exec ss | grep` this replaced started three
# programs at every poll (every 0.2 s), about 0.25 s apiece under emulation.
listening() {
	local p
	for p in /proc/[0-9]*; do
		[ "$p/ns/net" -ef "/var/run/netns/$1" ] || continue
		pid_listening "${p#/proc/}" "$2"
		return
	done
	return 1
}

netem_clear() {
	tc -n "$NS_A" qdisc del dev veth0 root 2>/dev/null
	tc -n "$NS_B" qdisc del dev veth1 root 2>/dev/null
	true
}

# check_tool_points TYPE BIN LOGDIR [KNOWN [SECONDS]]: runs BIN, a one-device
# check tool of tools/integrity ("PASS name", "FAIL name: why" or
# "SKIP name: why" per check, "# note" lines; -l lists the checks) on
# $RDMA_A in $NS_A for at most SECONDS (120): one test point per check, the
# notes as comments. rdma_rxe is the reference, not the subject: on it, a
# failure whose "name: why" matches the extended regular expression KNOWN
# (what rxe is known to do otherwise, see tools/integrity/README.md) is
# reported TODO; any other failure fails.
check_tool_points() {
	local type=$1 bin=$2 logs=$3 known=${4:-} secs=${5:-120} rc n l names
	names=$("$bin" -l)
	ip netns exec "$NS_A" timeout "$secs" "$__lib_netns_top/scripts/rdma-env.sh" \
		"$bin" -d "$RDMA_A" -g "$(fabric_gid_index "$RDMA_A" "$FABRIC_IP_A")" \
		>"$logs/check" 2>"$logs/check.err"
	rc=$?
	grep "^# " "$logs/check" | while read -r l; do ktap_info "${l#\# }"; done
	for n in $names; do
		l=$(grep -m1 -E "^(PASS|FAIL|SKIP) $n(:|$)" "$logs/check")
		case "$l" in
		PASS*) ktap_ok "$type: ${bin##*/} $n" ;;
		SKIP*) ktap_skip "$type: ${bin##*/} $n" "${l#SKIP $n: }" ;;
		FAIL*)
			ktap_info "$l"
			if [ "$type" = rxe ] && [ -n "$known" ] &&
				printf '%s\n' "${l#FAIL }" | grep -qE "$known"; then
				ktap_todo "$type: ${bin##*/} $n" "rdma_rxe differs: ${l#FAIL }"
			else
				ktap_fail "$type: ${bin##*/} $n"
			fi
			;;
		*)
			ktap_info "no result (${bin##*/} exit status $rc)"
			head -n 5 "$logs/check.err" | while read -r l; do ktap_info "$l"; done
			ktap_fail "$type: ${bin##*/} $n"
			;;
		esac
	done
}

# verbs_tools_needs [BIN...]: skips the whole test (skip_all) unless the
# rdma-core build with the MetaRoCE provider (make provider) and each check
# tool BIN (make -C tools/integrity) are there.
verbs_tools_needs() {
	local prefix b
	prefix=$("$__lib_netns_top/scripts/build-rdma-core.sh" --prefix 2>/dev/null)
	[ -e "$prefix/lib/libibverbs.so.1" ] ||
		skip_all "the rdma-core build is missing (make provider)"
	for b in "$@"; do
		[ -x "$b" ] || skip_all "$b is not built (make -C tools/integrity)"
	done
}

# rdma_cm_ready: whether user space can reach RDMA-CM
# (/dev/infiniband/rdma_cm): built in, or after loading rdma_ucm, which
# distribution kernels have as a module (nothing in the test guests loads it
# on demand).
rdma_cm_ready() {
	[ -e /dev/infiniband/rdma_cm ] || modprobe rdma_ucm 2>/dev/null
	[ -e /dev/infiniband/rdma_cm ]
}

# The device types each_type runs: MetaRoCE, then rdma_rxe in the same boot
# (the reference), unless METAROCE_TYPES names fewer. `make check` boots its
# debug kernel with METAROCE_TYPES=metaroce: rdma_rxe under KASAN tests no
# code of ours, and `make check-stock` runs both types in one boot.
read -ra __fabric_types <<<"${METAROCE_TYPES:-metaroce rxe}"
FABRIC_TYPES="${__fabric_types[*]}"

# fabric_types: how many types each_type runs.
fabric_types() {
	echo "${#__fabric_types[@]}"
}

# rxe_compared: whether this run compares with rdma_rxe; if not, says so
# (a TAP comment) and fails.
rxe_compared() {
	[[ " $FABRIC_TYPES " == *" rxe "* ]] && return 0
	ktap_info "rdma_rxe is not compared in this run (METAROCE_TYPES=$FABRIC_TYPES); make check-stock compares it"
	return 1
}

# each_type N FN: FN TYPE for each of FABRIC_TYPES, each on its own fabric
# brought up first, which is a point ("TYPE devices on both ends of the veth
# pair"); FN reports N - 1 more. A type whose fabric does not come up fails
# that point and skips the rest. Plan N * $(fabric_types) points.
each_type() {
	local n=$1 fn=$2 type err
	rxe_compared || :
	for type in "${__fabric_types[@]}"; do
		if [ "$type" = rxe ] && ! rdma_type_load rxe; then
			for _ in $(seq 1 "$n"); do
				ktap_skip "rxe: point" "rdma_rxe is not available"
			done
			continue
		fi
		err=$(mktemp)
		if ! rdma_fabric_up "$type" 2>"$err"; then
			ktap_info "$(cat "$err")"
			rm -f "$err"
			ktap_fail "$type devices on both ends of the veth pair"
			for _ in $(seq 2 "$n"); do
				ktap_skip "$type: point" "no fabric"
			done
			rdma_fabric_down
			continue
		fi
		rm -f "$err"
		ktap_ok "$type devices on both ends of the veth pair ($RDMA_A, $RDMA_B)"
		"$fn" "$type"
		rdma_fabric_down
	done
}

# pingpong_pair PROG NAME LOGDIR ARGS...: an unmodified libibverbs example
# (ibv_rc_pingpong, ibv_srq_pingpong, ...) as server in $NS_A and client in
# $NS_B over $RDMA_A and $RDMA_B, on the next TCP port after
# $PINGPONG_PORT: one test point, passed when both exit 0.
PINGPONG_PORT=18700
pingpong_pair() {
	local prog=$1 name=$2 logs=$3 env=$__lib_netns_top/scripts/rdma-env.sh
	local crc src spid port l
	shift 3
	PINGPONG_PORT=$((PINGPONG_PORT + 1))
	port=$PINGPONG_PORT
	ip netns exec "$NS_A" timeout 240 "$env" "$prog" -d "$RDMA_A" \
		-g "$(fabric_gid_index "$RDMA_A" "$FABRIC_IP_A")" -p "$port" "$@" \
		>"$logs/server" 2>&1 &
	spid=$!
	wait_for 10 listening "$NS_A" "$port"
	ip netns exec "$NS_B" timeout 240 "$env" "$prog" -d "$RDMA_B" \
		-g "$(fabric_gid_index "$RDMA_B" "$FABRIC_IP_B")" -p "$port" "$@" \
		"$FABRIC_IP_A" >"$logs/client" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	grep -h "bytes in" "$logs/client" | while read -r l; do ktap_info "client: $l"; done
	pair_verdict "$name" "$crc" "$src" "$logs"
}

CM_PORT=18900
# cm_listening PORT: an RDMA-CM ID of $RDMA_A listens on PORT (an RDMA-CM
# port has no socket ss sees; the RDMA core lists its IDs). An ID bound to
# an address shows as "link DEV/1"; a wildcard listener (perftest's -R
# server) as one "link DEV/-" ID per device, in every namespace, so another
# lane's on the same port would match too: the tests using this run alone
# (run_alone).
cm_listening() {
	rdma resource show cm_id 2>/dev/null |
		grep -E "^link $RDMA_A/[-0-9]+ .*state LISTEN .*src-addr [^ ]*:$1( |$)" >/dev/null
}

# cm_pair NAME SERVER CLIENT: the command SERVER (words) in $NS_A, then,
# once it listens, CLIENT in $NS_B, each under a 120 s timeout, through
# scripts/rdma-env.sh, their output in $logs; one point, passed when both
# exit 0. @PORT@ in either stands for the next port after $CM_PORT
# (udaddy has no port option: its -p is the port space; it listens on
# 7174).
cm_pair() {
	local name=$1 server=$2 client=$3 spid crc src l listen=7174
	local env=$__lib_netns_top/scripts/rdma-env.sh port
	CM_PORT=$((CM_PORT + 1))
	port=$CM_PORT
	[[ "$server" == *@PORT@* ]] && listen=$port
	server=${server//@PORT@/$port}
	client=${client//@PORT@/$port}
	# shellcheck disable=SC2086
	ip netns exec "$NS_A" timeout 120 "$env" $server >"$logs/server" 2>&1 &
	spid=$!
	# (or has exited: the client then fails at once)
	wait_for 30 eval "cm_listening $listen || ! kill -0 $spid 2>/dev/null" ||
		ktap_info "$name: the server does not listen on $listen after 30 s"
	# shellcheck disable=SC2086
	ip netns exec "$NS_B" timeout 120 "$env" $client >"$logs/client" 2>&1
	crc=$?
	# A server whose client failed would wait out its timeout: stopped
	# (ip netns exec runs timeout in its place, which passes the signal on).
	[ "$crc" -eq 0 ] || kill "$spid" 2>/dev/null
	wait "$spid"
	src=$?
	[ "$crc" -ne 0 ] || tail -n 2 "$logs/client" | while read -r l; do ktap_info "client: $l"; done
	pair_verdict "$name" "$crc" "$src" "$logs"
}

# pair_verdict NAME CLIENT_RC SERVER_RC LOGDIR: the point of a client and
# server pair, passed when both exited 0; else with the start of both logs
# (LOGDIR/client, LOGDIR/server), and the exit codes and each log's last
# line in the failed point's own line (a CI summary may show only that;
# 124 is `timeout`'s).
pair_verdict() {
	local name=$1 crc=$2 src=$3 logs=$4 l
	if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]; then
		ktap_ok "$name"
		return
	fi
	head -n 15 "$logs/client" | while read -r l; do ktap_info "client: $l"; done
	head -n 15 "$logs/server" | while read -r l; do ktap_info "server: $l"; done
	ktap_fail "$name ($(fail_reason "$crc" "$logs/client" "$src" "$logs/server"))"
}

# fail_reason CLIENT_RC CLIENT_LOG SERVER_RC SERVER_LOG: "client rc N: its
# log's last line; server rc M: ..." (80 characters of each, without '#',
# which would start a KTAP directive, or carriage returns).
fail_reason() {
	echo "client rc $1: $(__last_line "$2"); server rc $3: $(__last_line "$4")"
}
__last_line() {
	tr -d '\r#' <"$1" | grep -v '^[[:space:]]*$' | tail -n 1 | cut -c1-80
}

MR_INTEGRITY=${MR_INTEGRITY:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tools/integrity/mr-integrity}
__lib_netns_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

metaroce_integrity_needs() {
	[ -x "$MR_INTEGRITY" ] ||
		skip_all "$MR_INTEGRITY is not built (make -C tools/integrity)"
	. "$__lib_netns_top/scripts/rdma-env.sh"
	[ -n "${METAROCE_RDMA_PREFIX:-}" ] ||
		skip_all "the rdma-core build is missing (make provider)"
	require_tools "$@"
	rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"
}
__integrity_port=18600

__integrity_show() {
	local l
	while IFS= read -r l; do ktap_info "$1: $l"; done
}

integrity_point() {
	local name=$1 expect=$2 t0=$SECONDS src crc spid ok=0 dir
	shift 2
	dir=$(mktemp -d)
	__integrity_port=$((__integrity_port + 1))
	ip netns exec "$NS_A" timeout 280 "$MR_INTEGRITY" -d "$RDMA_A" \
		-p "$__integrity_port" "$@" >"$dir/server" 2>&1 &
	spid=$!
	ip netns exec "$NS_B" timeout 280 "$MR_INTEGRITY" -d "$RDMA_B" \
		-p "$__integrity_port" "$@" "$FABRIC_IP_A" >"$dir/client" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	ktap_info "$name: $((SECONDS - t0)) s, client rc $crc, server rc $src"
	grep -h "PASS" "$dir/client" | __integrity_show client
	if [ "$expect" = pass ]; then
		[ "$crc" -eq 0 ] && [ "$src" -eq 0 ] &&
			grep -q "^mr-integrity: PASS" "$dir/client" &&
			grep -q "^mr-integrity: PASS" "$dir/server" && ok=1
	else
		# both sides fail, and one of them says which byte
		[ "$crc" -eq 1 ] && [ "$src" -eq 1 ] &&
			grep -q "FAIL qp=.*byte\|FAIL qp=.*value" \
				"$dir/client" "$dir/server" && ok=1
	fi
	if [ "$ok" = 0 ] || [ "$expect" != pass ]; then
		grep -h "FAIL\|note" "$dir/client" | head -n 8 | __integrity_show client
		grep -h "FAIL\|note" "$dir/server" | head -n 8 | __integrity_show server
	fi
	[ "$ok" = 1 ] || name="$name ($(fail_reason "$crc" "$dir/client" "$src" "$dir/server"))"
	rm -rf "$dir"
	if [ "$ok" = 1 ]; then
		ktap_ok "$name"
	else
		ktap_fail "$name"
	fi
}
